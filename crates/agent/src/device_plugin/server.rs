//! The gRPC side: one pool's `DevicePlugin` service on its unix socket, and its registration
//! with the kubelet (`Registration.Register` on `kubelet.sock`), kept alive across kubelet
//! restarts.
//!
//! The service is routed by hand (the five paths of `api::path`), each method a
//! `tonic::server::Grpc` call with prost's codec: what tonic-build would generate, without a
//! build step. The kubelet's restart is seen by polling (every `WATCH_TICK`): it deletes every
//! socket in the directory (ours too: serve anew, register again) and creates a new
//! `kubelet.sock` (register again).

use super::allocate;
use super::api::{self, path};
use crate::kubelet_grpc;
use futures::Stream;
use rdma_host_device_core::inventory::Nic;
use rdma_host_device_core::node::{CharDevices, Pool};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tonic::codegen::{BoxFuture, StdError, http};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// How often the sockets are checked for a kubelet restart.
pub const WATCH_TICK: Duration = Duration::from_millis(200);
/// A call to the kubelet gives up after this long.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait between two refused registrations (they start at `WATCH_TICK` and double):
/// each call makes the kubelet dial us and log an error.
const REGISTER_RETRY_MAX: Duration = Duration::from_secs(10);

/// One pool as a device plugin: what it offers, and how it answers.
pub struct Plugin {
    pub pool: Pool,
    pub chars: CharDevices,
    pub device_info_dir: PathBuf,
    /// `/sys` (a fake tree in unit tests).
    pub sys: PathBuf,
    /// Every NIC this pool has offered since the start, by ID.
    pub nics: Mutex<BTreeMap<String, Nic>>,
    /// The device list `ListAndWatch` streams: a new value is a new message.
    pub devices: watch::Sender<Vec<api::Device>>,
}

type Stream_ = Pin<Box<dyn Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

impl Plugin {
    /// Our socket's file name in the kubelet's directory: one per pool.
    pub fn endpoint(&self) -> String {
        format!(
            "rdma-host-device-{}.sock",
            self.pool
                .env_suffix()
                .to_ascii_lowercase()
                .replace('_', "-")
        )
    }

    pub fn options() -> api::DevicePluginOptions {
        api::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }
    }

    fn list_and_watch(&self) -> Stream_ {
        let rx = self.devices.subscribe();
        Box::pin(futures::stream::unfold(
            (rx, true),
            |(mut rx, first)| async move {
                if !first && rx.changed().await.is_err() {
                    return None;
                }
                let devices = rx.borrow_and_update().clone();
                Some((Ok(api::ListAndWatchResponse { devices }), (rx, false)))
            },
        ))
    }

    fn preferred(
        &self,
        req: api::PreferredAllocationRequest,
    ) -> Result<api::PreferredAllocationResponse, Status> {
        let nics = self.nics.lock().unwrap_or_else(|e| e.into_inner());
        let container_responses = req
            .container_requests
            .into_iter()
            .map(|c| {
                let available: Vec<allocate::Offer> = c
                    .available_device_ids
                    .iter()
                    .map(|id| allocate::Offer {
                        id: id.clone(),
                        numa: nics.get(id).and_then(|n| n.numa),
                        pci_root: nics.get(id).and_then(|n| n.pci_root.clone()),
                    })
                    .collect();
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                api::ContainerPreferredAllocationResponse {
                    device_ids: allocate::preferred(&available, &c.must_include_device_ids, size),
                }
            })
            .collect();
        Ok(api::PreferredAllocationResponse {
            container_responses,
        })
    }

    fn allocate(&self, req: api::AllocateRequest) -> Result<api::AllocateResponse, Status> {
        let known = self.nics.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out = api::AllocateResponse::default();
        for c in req.container_requests {
            let mut nics = Vec::new();
            for id in &c.devices_ids {
                let nic = known.get(id).ok_or_else(|| {
                    Status::not_found(format!(
                        "device {id:?} is not one of {}'s ({})",
                        self.pool.resource_name,
                        known.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })?;
                nics.push(nic);
            }
            for nic in &nics {
                if let Err(e) = allocate::write_device_info(&self.device_info_dir, &self.pool, nic)
                {
                    log::warn!("{e} (Multus will not see {}'s device-info)", nic.id);
                }
            }
            let r = allocate::container_response(&self.pool, &nics, self.chars, &self.sys);
            log::info!(
                "allocated {} to a container: {} char device(s), {}",
                c.devices_ids.join(","),
                r.devices.len(),
                r.envs
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            out.container_responses.push(r);
        }
        Ok(out)
    }
}

/// The `DevicePlugin` gRPC service of one pool.
#[derive(Clone)]
pub struct Service(pub Arc<Plugin>);

impl tonic::server::NamedService for Service {
    const NAME: &'static str = "v1beta1.DevicePlugin";
}

/// A unary method answered by the async `f` (the DRA plugin's services use it too).
pub(crate) async fn unary<B, Q, A, F>(
    req: http::Request<B>,
    f: F,
) -> http::Response<tonic::body::Body>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    Q: prost::Message + Default + Send + 'static,
    A: prost::Message + Send + 'static,
    F: Fn(Q) -> futures::future::BoxFuture<'static, Result<A, Status>> + Send + Clone + 'static,
{
    let svc = tower::service_fn(move |r: Request<Q>| {
        let f = f.clone();
        async move { f(r.into_inner()).await.map(Response::new) }
    });
    tonic::server::Grpc::new(ProstCodec::<A, Q>::default())
        .unary(svc, req)
        .await
}

/// [`unary`] for a method whose answer `f` computes at once.
async fn unary_now<B, Q, A>(
    req: http::Request<B>,
    f: impl Fn(Q) -> Result<A, Status> + Send + Sync + Clone + 'static,
) -> http::Response<tonic::body::Body>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    Q: prost::Message + Default + Send + 'static,
    A: prost::Message + Send + 'static,
{
    unary(req, move |q| -> futures::future::BoxFuture<'static, _> {
        Box::pin(std::future::ready(f(q)))
    })
    .await
}

impl<B> tonic::codegen::Service<http::Request<B>> for Service
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let p = self.0.clone();
        match req.uri().path() {
            path::GET_OPTIONS => {
                Box::pin(
                    async move { Ok(unary_now(req, |_: api::Empty| Ok(Plugin::options())).await) },
                )
            }
            path::ALLOCATE => {
                Box::pin(async move { Ok(unary_now(req, move |r| p.allocate(r)).await) })
            }
            path::GET_PREFERRED => {
                Box::pin(async move { Ok(unary_now(req, move |r| p.preferred(r)).await) })
            }
            path::PRE_START => Box::pin(async move {
                Ok(unary_now(req, |_: api::PreStartContainerRequest| {
                    Ok(api::PreStartContainerResponse {})
                })
                .await)
            }),
            path::LIST_AND_WATCH => Box::pin(async move {
                let svc = tower::service_fn(move |_: Request<api::Empty>| {
                    let s = p.list_and_watch();
                    async move { Ok::<_, Status>(Response::new(s)) }
                });
                Ok(tonic::server::Grpc::new(
                    ProstCodec::<api::ListAndWatchResponse, api::Empty>::default(),
                )
                .server_streaming(svc, req)
                .await)
            }),
            other => {
                let s = Status::unimplemented(format!("{other} is not a method we serve"));
                Box::pin(async move { Ok(s.into_http()) })
            }
        }
    }
}

/// What identifies a file across delete-and-recreate (inode numbers are reused).
fn identity(p: &Path) -> Option<(u64, i64, i64)> {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some((m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Whether the kubelet's refusal of a Register says it is connected to our `endpoint` already:
/// it answered an earlier Register after our deadline, yet connected (1.37's device manager
/// refuses a second connection to one socket: "device plugin already connected: <path>").
fn connected_already(refusal: &str, endpoint: &str) -> bool {
    const SAID: &str = "device plugin already connected: ";
    refusal.find(SAID).is_some_and(|at| {
        let rest = &refusal[at + SAID.len()..];
        let path = rest.split(" (").next().unwrap_or(rest);
        Path::new(path.trim()).file_name() == Some(std::ffi::OsStr::new(endpoint))
    })
}

/// `Registration.Register` on `<dir>/kubelet.sock`, within `REGISTER_TIMEOUT`: one HTTP/2
/// connection (hyper's client, not tonic's channel: no pool, balancer or reconnects to carry
/// for one call), gRPC framing by tonic's client.
pub async fn register(dir: &Path, endpoint: &str, resource: &str) -> Result<(), String> {
    let sock = dir.join(api::KUBELET_SOCKET);
    let call = async {
        let io = tokio::net::UnixStream::connect(&sock)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(io),
        )
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let conn = tokio::spawn(conn);
        let svc = tower::service_fn(move |req: http::Request<tonic::body::Body>| {
            let mut send = send.clone();
            async move { send.send_request(req).await }
        });
        let mut grpc =
            tonic::client::Grpc::with_origin(svc, http::Uri::from_static("http://localhost"));
        let req = api::RegisterRequest {
            version: api::VERSION.into(),
            endpoint: endpoint.into(),
            resource_name: resource.into(),
            options: Some(Plugin::options()),
        };
        let answer = grpc
            .unary::<_, api::Empty, _>(
                Request::new(req),
                http::uri::PathAndQuery::from_static(path::REGISTER),
                ProstCodec::default(),
            )
            .await
            .map_err(|s| format!("the kubelet refused: {} ({:?})", s.message(), s.code()));
        conn.abort();
        answer.map(|_| ())
    };
    tokio::time::timeout(REGISTER_TIMEOUT, call)
        .await
        .map_err(|_| format!("no answer within {} s", REGISTER_TIMEOUT.as_secs()))?
}

/// Serve `plugin` on its socket in `dir` and keep it registered with the kubelet, forever.
pub async fn supervise(plugin: Arc<Plugin>, dir: PathBuf) {
    let endpoint = plugin.endpoint();
    let resource = plugin.pool.resource_name.clone();
    let ours = dir.join(&endpoint);
    let kubelet = dir.join(api::KUBELET_SOCKET);
    loop {
        let _ = std::fs::remove_file(&ours);
        // Only root (the kubelet) connects: 0600 from the moment the socket exists.
        let listener = match rdma_host_device_core::files::listen_unix(&ours, 0o600).and_then(|l| {
            l.set_nonblocking(true)?;
            tokio::net::UnixListener::from_std(l)
        }) {
            Ok(l) => l,
            Err(e) => {
                log::error!(
                    "{resource}: cannot listen on {}: {e}; retrying in 1 s",
                    ours.display()
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mine = identity(&ours);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = kubelet_grpc::serve(listener, Service(plugin.clone()), async {
            let _ = stopped.await;
        });
        log::info!("{resource}: serving on {}", ours.display());
        let mut registered_with = None;
        let mut last_error = String::new();
        // Refused registrations are tried again after a wait that doubles; a new kubelet
        // socket (a kubelet restart) is tried at once.
        let mut tried_with = None;
        let mut retry = WATCH_TICK;
        let mut next_try = tokio::time::Instant::now();
        loop {
            if identity(&ours) != mine {
                log::info!(
                    "{resource}: {} was removed (the kubelet restarted?); serving anew",
                    ours.display()
                );
                break;
            }
            if server.is_finished() {
                log::error!("{resource}: the gRPC server stopped; starting it again");
                break;
            }
            let k = identity(&kubelet);
            if k.is_none() && last_error.is_empty() {
                last_error = format!("waiting for {}", kubelet.display());
                log::info!("{resource}: {last_error}");
            }
            if k != tried_with {
                tried_with = k;
                retry = WATCH_TICK;
                next_try = tokio::time::Instant::now();
            }
            if k.is_some() && k != registered_with && tokio::time::Instant::now() >= next_try {
                match register(&dir, &endpoint, &resource).await {
                    Ok(()) => {
                        log::info!("{resource}: registered with the kubelet as {endpoint}");
                        registered_with = k;
                        last_error.clear();
                    }
                    Err(e) if connected_already(&e, &endpoint) => {
                        log::info!(
                            "{resource}: the kubelet is connected to {endpoint} already (it answered an earlier registration late): registered"
                        );
                        registered_with = k;
                        last_error.clear();
                    }
                    Err(e) => {
                        if e != last_error {
                            log::warn!(
                                "{resource}: registering with {}: {e}; retrying in up to {} s",
                                kubelet.display(),
                                REGISTER_RETRY_MAX.as_secs()
                            );
                        }
                        last_error = e;
                        next_try = tokio::time::Instant::now() + retry;
                        retry = (retry * 2).min(REGISTER_RETRY_MAX);
                    }
                }
            }
            tokio::time::sleep(WATCH_TICK).await;
        }
        let _ = stop.send(());
        let _ = server.await;
    }
}

#[cfg(test)]
mod tests {
    use super::connected_already;

    #[test]
    fn a_refusal_naming_our_socket_as_connected_is_a_registration() {
        let ours = "rdma-host-device.io-rail.sock";
        let said = |path: &str| {
            format!("the kubelet refused: device plugin already connected: {path} (Unknown)")
        };
        assert!(connected_already(
            &said("/var/lib/kubelet/device-plugins/rdma-host-device.io-rail.sock"),
            ours
        ));
        assert!(
            !connected_already(&said("/var/lib/kubelet/device-plugins/other.sock"), ours),
            "another plugin's socket"
        );
        assert!(
            !connected_already("the kubelet refused: invalid resource name (Unknown)", ours),
            "another refusal"
        );
        assert!(!connected_already("no answer within 5 s", ours));
    }
}
