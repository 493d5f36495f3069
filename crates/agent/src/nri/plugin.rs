//! One connection to the runtime, as an NRI plugin: register, be configured (subscribing to
//! CreateContainer only), be synchronized, then answer every request until the runtime closes
//! the connection. The sequence is containerd/nri's `pkg/stub`: the plugin calls
//! `Runtime.RegisterPlugin` on the multiplexer's connection 2; the runtime calls
//! `Plugin.Configure`, `Plugin.Synchronize` and then the subscribed events on connection 1.
//!
//! Never blocking the runtime: every request gets an answer at once (an unknown method gets
//! ttrpc's Unimplemented, an undecodable one InvalidArgument), and the only work per
//! CreateContainer is a `stat` of the node's few uverbs nodes. Writes time out, so a runtime
//! that stops reading ends the connection instead of hanging the plugin.

use super::api::{self, Request, Response, Status};
use super::devices;
use super::wire::{self, Message, PLUGIN_CONN, RUNTIME_CONN, TYPE_REQUEST, TYPE_RESPONSE};
use prost::Message as _;
use rdma_host_device_core::logging::shown;
use rdma_host_device_core::node::Memlock;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the runtime has to answer the registration and configure us (containerd's own
/// registration timeout is 5 s).
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write to the runtime may take before the connection is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The stream ID of our one call, RegisterPlugin (a ttrpc client's first).
const REGISTER_STREAM: u32 = 1;

/// What the plugin is: its registration and its policy.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    /// Two digits.
    pub index: String,
    pub memlock: Memlock,
    /// Where the node's device nodes are (`/dev`).
    pub dev: PathBuf,
}

/// How a connection ended.
#[derive(Debug)]
pub struct Outcome {
    /// Whether the runtime configured the plugin (it was serving containers).
    pub configured: bool,
    /// `Ok`: the runtime closed the connection; `Err`: why we gave it up.
    pub end: io::Result<()>,
}

/// Serve the runtime on `stream` until the connection ends.
pub fn session(stream: UnixStream, cfg: &Config) -> Outcome {
    let mut s = Session {
        stream,
        cfg,
        configured: false,
        reader: wire::Reader::default(),
    };
    let end = s.serve();
    Outcome {
        configured: s.configured,
        end,
    }
}

struct Session<'a> {
    stream: UnixStream,
    cfg: &'a Config,
    configured: bool,
    reader: wire::Reader,
}

impl Session<'_> {
    fn serve(&mut self) -> io::Result<()> {
        self.stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let register = api::RegisterPluginRequest {
            plugin_name: self.cfg.name.clone(),
            plugin_idx: self.cfg.index.clone(),
            nri_version: String::new(),
        };
        let call = Request {
            service: api::RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: register.encode_to_vec(),
            timeout_nano: REGISTRATION_TIMEOUT.as_nanos() as i64,
        };
        wire::write_message(
            &mut self.stream,
            RUNTIME_CONN,
            REGISTER_STREAM,
            TYPE_REQUEST,
            &call.encode_to_vec(),
        )?;
        // One deadline for the registration, whatever the peer sends before it: a read
        // timeout alone is per read, and many messages in one frame need no read.
        let deadline = Instant::now() + REGISTRATION_TIMEOUT;
        let late = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the runtime did not configure the plugin within {} s of its registration",
                    REGISTRATION_TIMEOUT.as_secs()
                ),
            )
        };
        loop {
            if !self.configured {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(late());
                }
                self.stream.set_read_timeout(Some(left))?;
            }
            let m = match self.reader.next(&mut self.stream) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e)
                    if !self.configured
                        && matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                {
                    return Err(late());
                }
                Err(e) => return Err(e),
            };
            match (m.conn, m.kind) {
                (RUNTIME_CONN, TYPE_RESPONSE) if m.stream == REGISTER_STREAM => {
                    self.registered(&m)?
                }
                (PLUGIN_CONN, TYPE_REQUEST) => {
                    let answer = self.answer(&m.payload);
                    wire::write_message(
                        &mut self.stream,
                        PLUGIN_CONN,
                        m.stream,
                        TYPE_RESPONSE,
                        &answer.encode_to_vec(),
                    )?;
                }
                // Stream data or a stray answer: nothing of ours.
                _ => {}
            }
        }
    }

    /// The runtime's answer to RegisterPlugin.
    fn registered(&mut self, m: &Message) -> io::Result<()> {
        let r = Response::decode(&m.payload[..]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the runtime's answer to RegisterPlugin is not a ttrpc response: {e}"),
            )
        })?;
        match r.status {
            Some(s) if s.code != 0 => Err(io::Error::other(format!(
                "the runtime refused the registration as {}-{}: {} (code {})",
                self.cfg.index,
                self.cfg.name,
                rdma_host_device_core::logging::line(&s.message, 512),
                s.code
            ))),
            _ => {
                log::info!(
                    "registered with the runtime as {}-{}",
                    self.cfg.index,
                    self.cfg.name
                );
                Ok(())
            }
        }
    }

    /// The answer to one call of the runtime's.
    fn answer(&mut self, payload: &[u8]) -> Response {
        let req = match Request::decode(payload) {
            Ok(r) => r,
            Err(e) => {
                return failure(
                    api::CODE_INVALID_ARGUMENT,
                    format!("not a ttrpc request: {e}"),
                );
            }
        };
        if req.service != api::PLUGIN_SERVICE {
            return failure(
                api::CODE_UNIMPLEMENTED,
                format!("no service {:?} here", req.service),
            );
        }
        let out = match req.method.as_str() {
            "Configure" => decode(&req).map(|r: api::ConfigureRequest| {
                log::info!(
                    "configured by {} {} (NRI {}): RLIMIT_MEMLOCK {} for every container given one of this node's uverbs devices",
                    shown(&r.runtime_name),
                    shown(&r.runtime_version),
                    shown(if r.nri_version.is_empty() { "unknown" } else { &r.nri_version }),
                    self.cfg.memlock.as_arg(),
                );
                if predates_rlimits(&r.runtime_name, &r.runtime_version, &r.nri_version) {
                    log::warn!(
                        "{} {} has NRI from before rlimit adjustments (NRI v0.4.0: containerd 1.7.7, CRI-O 1.29): it drops this plugin's memlock limit; upgrade the runtime, or give containers the limit through the runtime's own setting (`rdma-host-device-agent inspect` names it)",
                        shown(&r.runtime_name),
                        shown(&r.runtime_version)
                    );
                }
                self.configured = true;
                // From here on the runtime calls when containers are created, however rarely.
                let _ = self.stream.set_read_timeout(None);
                api::ConfigureResponse {
                    events: api::event_mask(&[api::EVENT_CREATE_CONTAINER]),
                }
                .encode_to_vec()
            }),
            "Synchronize" => decode(&req).map(|r: api::SynchronizeRequest| {
                api::SynchronizeResponse { more: r.more }.encode_to_vec()
            }),
            "CreateContainer" => {
                decode(&req).map(|r: api::CreateContainerRequest| self.create_container(&r))
            }
            "Shutdown" => {
                log::info!("the runtime is shutting down");
                Ok(api::Empty {}.encode_to_vec())
            }
            other => Err(failure(
                api::CODE_UNIMPLEMENTED,
                format!("{other}: not subscribed"),
            )),
        };
        match out {
            Ok(payload) => Response {
                status: None,
                payload,
            },
            Err(r) => r,
        }
    }

    fn create_container(&self, r: &api::CreateContainerRequest) -> Vec<u8> {
        let (Some(c), pod) = (&r.container, r.pod.clone().unwrap_or_default()) else {
            return api::CreateContainerResponse::default().encode_to_vec();
        };
        let ours = devices::node_uverbs(&self.cfg.dev);
        let adjust = devices::rdma_device(c, &ours).and_then(|(path, name)| {
            let enough = devices::already_enough(c, self.cfg.memlock);
            log::info!(
                "container {} of pod {}/{} ({}): {} (it was given {name} as {})",
                shown(&c.name),
                shown(&pod.namespace),
                shown(&pod.name),
                shown(&c.id),
                if enough {
                    format!(
                        "its spec already has RLIMIT_MEMLOCK {} or more",
                        self.cfg.memlock.as_arg()
                    )
                } else {
                    format!("RLIMIT_MEMLOCK {}", self.cfg.memlock.as_arg())
                },
                shown(path),
            );
            (!enough).then(|| devices::memlock_adjustment(self.cfg.memlock))
        });
        api::CreateContainerResponse { adjust }.encode_to_vec()
    }
}

/// `v1.7.6`, `1.29.0-rc.1`, `v0.3.1-0.2023...` as (major, minor, patch); `None` if not a version.
fn version(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.strip_prefix('v').unwrap_or(v).splitn(3, '.');
    let mut num = || -> Option<u64> {
        let p = parts.next()?;
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((num()?, num()?, num()?))
}

/// Whether the runtime is known to drop rlimit adjustments: NRI added them in v0.4.0
/// (containerd 1.7.7; CRI-O 1.29 ships v0.5.0). By the NRI version the runtime states, else by
/// its own version (containerd/nri `InferVersionFromRuntime`'s table); unknown: `false`.
pub fn predates_rlimits(runtime: &str, runtime_version: &str, nri_version: &str) -> bool {
    if let Some(nri) = version(nri_version) {
        return nri < (0, 4, 0);
    }
    match (runtime, version(runtime_version)) {
        ("containerd", Some(v)) => v < (1, 7, 7),
        ("cri-o", Some(v)) => v < (1, 29, 0),
        _ => false,
    }
}

fn failure(code: i32, message: String) -> Response {
    Response {
        status: Some(Status { code, message }),
        payload: Vec::new(),
    }
}

fn decode<M: prost::Message + Default>(req: &Request) -> Result<M, Response> {
    M::decode(&req.payload[..]).map_err(|e| {
        failure(
            api::CODE_INVALID_ARGUMENT,
            format!("{}: undecodable request: {e}", req.method),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_whose_nri_drops_rlimits_are_recognised() {
        for (name, v, nri, old) in [
            ("containerd", "v1.7.6", "", true),
            ("containerd", "v1.7.7", "", false),
            ("containerd", "v2.1.0", "", false),
            ("cri-o", "1.28.4", "", true),
            ("cri-o", "1.29.0", "", false),
            // The NRI version, when stated, decides.
            ("containerd", "v1.7.30", "v0.3.0", true),
            ("containerd", "v1.7.0", "v0.8.0", false),
            (
                "cri-o",
                "1.27.1",
                "v0.3.1-0.20230504231226-94185418e253",
                true,
            ),
            // Unknown: no warning.
            ("someruntime", "0.1.0", "", false),
            ("containerd", "devel", "unknown", false),
        ] {
            assert_eq!(predates_rlimits(name, v, nri), old, "{name} {v} {nri}");
        }
    }
}
