//! IPAM delegation: exec the plugin named by `ipam.type` from CNI_PATH with the call's CNI_*
//! variables and, on stdin, the configuration narrowed to what an address manager reads.
//!
//! Two rules of our own. The node decides which plugins `ipam.type` may name (`ipamPlugins` in
//! the node configuration, crates/core/src/node/): [`Ipam::new`] refuses any other with 107 before it even
//! looks in CNI_PATH, so no verb execs a program the node did not allow. And IPAM gets only
//! the keys an address manager reads ([`for_ipam`]): not a tenant's `prevResult` (except on
//! CHECK, where the runtime supplies it and `static` compares against it), not
//! `runtimeConfig` beyond the `ips` and `ipRanges` capabilities, not our own keys.
//!
//! And an IPAM plugin older than the config's cniVersion (Debian 12 ships plugins
//! that stop at 1.0.0) answers code 1. We then ask it for VERSION and retry once with the
//! newest version both sides speak, so a 1.1.0 network still gets its addresses. The answer
//! is remembered per plugin binary (in /run, keyed by the file's identity, so an upgrade
//! invalidates it): later calls downgrade at once instead of paying three execs.

use crate::cni::env::Env;
use crate::cni::result::CniResult;
use crate::cni::version::Version;
use rdma_host_device_core::error::{Code, Error, Result, invalid_config};
use rdma_host_device_core::node::Node;
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

/// Remembered IPAM plugin versions: on tmpfs, so a reboot (or an upgrade) forgets them.
const VERSION_MEMO_DIR: &str = "/run/rdma-host-device/ipam-versions";

/// When this process's IPAM budget ends: one `ipamTimeoutSeconds` for every exec of an IPAM
/// plugin in one CNI call (a VERSION query, a retry with an older version, ADD's rollback
/// DEL, GC's releases), so no tenant's plugin keeps the call, and the attachment's lock,
/// longer than the node allows. Set by the first [`Ipam`] of the process.
static CALL_DEADLINE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// One IPAM plugin, found on CNI_PATH, and the attachment it acts for.
pub struct Ipam<'a> {
    plugin: String,
    exe: PathBuf,
    env: &'a Env,
    /// Where paths in the `ipam` object may point (`ipamPaths`).
    node: &'a Node,
    /// The attachment: normally the runtime's, but GC acts for attachments it found on disk.
    container_id: String,
    /// When this CNI call's IPAM budget ends ([`CALL_DEADLINE`]).
    deadline: std::time::Instant,
    ifname: String,
    netns: String,
}

fn locate_plugin(plugin: &str, path: &[PathBuf]) -> Result<PathBuf> {
    path.iter()
        .map(|d| d.join(plugin))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            invalid_config(format!(
                "IPAM plugin {plugin:?} not found in CNI_PATH ({}); install it there or fix ipam.type",
                path.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ))
        })
}

impl<'a> Ipam<'a> {
    /// The IPAM plugin `plugin`, if the node allows it (107 otherwise) and CNI_PATH has it (7).
    pub fn new(plugin: &str, env: &'a Env, node: &'a Node) -> Result<Self> {
        node.admit_ipam(plugin)?;
        Ok(Ipam {
            plugin: plugin.to_string(),
            exe: locate_plugin(plugin, &env.path)?,
            env,
            node,
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
            netns: env.netns.clone(),
            deadline: *CALL_DEADLINE.get_or_init(|| {
                std::time::Instant::now()
                    + std::time::Duration::from_secs(node.ipam_timeout_seconds)
            }),
        })
    }

    pub fn add(&self, conf: &[u8]) -> Result<CniResult> {
        self.admit_paths(conf)?;
        let out = self.call("ADD", conf)?;
        CniResult::from_slice(&out).map_err(|e| {
            Error::new(
                Code::Ipam,
                format!(
                    "IPAM plugin {:?} returned an unusable result: {}",
                    self.plugin, e.msg
                ),
            )
        })
    }

    /// DEL obeys the node as ADD does, whatever it releases with (the record of any version,
    /// or, without one, the config the runtime sends now): paths outside the node's are
    /// refused with 107 and nothing runs. Its callers log that and let DEL succeed.
    pub fn del(&self, conf: &[u8]) -> Result<()> {
        self.admit_paths(conf)?;
        self.call("DEL", conf).map(drop)
    }

    pub fn check(&self, conf: &[u8]) -> Result<()> {
        self.admit_paths(conf)?;
        self.call("CHECK", conf).map(drop)
    }

    /// Every verb runs the plugin only on paths where the node allows: the paths in its `ipam`
    /// must be under `ipamPaths`/`ipamReadPaths` (ADD checks them before any change; CHECK,
    /// STATUS and GC would otherwise exec host-local on a tenant's `dataDir` anywhere, and its
    /// GC removes what it finds there; a DEL without a record, of a config ADD refused, would
    /// run it there as root, and one whose record an older version wrote, or whose node has
    /// since narrowed its lists, likewise).
    pub fn admit_paths(&self, conf: &[u8]) -> Result<()> {
        self.node.admit_ipam_paths(&ipam_object(conf))
    }

    /// STATUS/GC exist from spec 1.1.0 on: forward them only to a plugin that speaks 1.1.0
    /// (an older one validates its environment before it even reads the verb).
    pub fn optional(&self, command: &str, conf: &[u8]) -> Result<()> {
        self.admit_paths(conf)?;
        if self.newest_version() < Some(Version::V1_1_0) {
            log::info!(
                "IPAM plugin {:?} predates spec 1.1.0 and has no {command}; nothing to forward",
                self.plugin
            );
            return Ok(());
        }
        self.call(command, conf).map(drop)
    }

    fn call(&self, command: &str, conf: &[u8]) -> Result<Vec<u8>> {
        self.call_raw(command, conf).map_err(|f| f.error)
    }

    fn call_raw(&self, command: &str, conf: &[u8]) -> std::result::Result<Vec<u8>, Failure> {
        let (conf, asked) = &for_ipam(conf, command).map_err(|error| Failure {
            their_code: None,
            error,
        })?;
        if let (Some(asked), Some(newest)) = (*asked, self.remembered_version())
            && newest < asked
        {
            let conf = with_version(conf, newest).map_err(|error| Failure {
                their_code: None,
                error,
            })?;
            return self.exec(command, &conf);
        }
        match self.exec(command, conf) {
            Err(f) if f.their_code == Some(1) => {
                // Only a version older than the one asked can help (asking again the same
                // way would only spend the call's deadline once more).
                let Some(older) = self
                    .newest_version()
                    .filter(|v| asked.is_none_or(|a| *v < a))
                else {
                    return Err(f);
                };
                log::info!(
                    "IPAM plugin {:?} does not speak the config's cniVersion; retrying {command} with {}",
                    self.plugin,
                    older.as_str()
                );
                let conf = with_version(conf, older).map_err(|error| Failure {
                    their_code: None,
                    error,
                })?;
                self.exec(command, &conf)
            }
            other => other,
        }
    }

    /// The newest version both we and the plugin speak (remembered, or asked: VERSION).
    fn newest_version(&self) -> Option<Version> {
        if let Some(v) = self.remembered_version() {
            return Some(v);
        }
        let out = self.exec("VERSION", b"{}").ok()?;
        let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
        let theirs: Vec<Version> = v["supportedVersions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .filter_map(|s| Version::parse(s).ok())
                    .collect()
            })
            .unwrap_or_default();
        let newest = theirs.into_iter().max();
        if let Some(v) = newest {
            self.remember_version(v);
        }
        newest
    }

    /// Where the plugin's version is remembered, and the identity of the file it was asked of.
    fn version_memo(&self) -> Option<(PathBuf, String)> {
        let m = std::fs::metadata(&self.exe).ok()?;
        let key = format!(
            "{}:{}:{}:{}",
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime_nsec() + m.mtime() * 1_000_000_000
        );
        let name = self.exe.to_string_lossy().replace('/', "_");
        Some((PathBuf::from(VERSION_MEMO_DIR).join(name), key))
    }

    fn remembered_version(&self) -> Option<Version> {
        let (path, key) = self.version_memo()?;
        let text = std::fs::read_to_string(path).ok()?;
        let (k, v) = text.trim().split_once(' ')?;
        (k == key).then(|| Version::parse(v).ok()).flatten()
    }

    /// Best effort: without the memo, the next call asks again.
    fn remember_version(&self, v: Version) {
        let Some((path, key)) = self.version_memo() else {
            return;
        };
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let ok = std::fs::create_dir_all(VERSION_MEMO_DIR).is_ok()
            && std::fs::write(&tmp, format!("{key} {}\n", v.as_str())).is_ok()
            && std::fs::rename(&tmp, &path).is_ok();
        if !ok {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    fn exec(&self, command: &str, stdin: &[u8]) -> std::result::Result<Vec<u8>, Failure> {
        let path = join_path(&self.env.path);
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", self.container_id.as_str()),
            ("CNI_IFNAME", self.ifname.as_str()),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_ARGS", self.env.args.as_str()),
            ("CNI_PATH", path.as_str()),
        ];
        let mut policy = crate::confine::Policy::ipam(self.node, &self.plugin);
        policy.deadline = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        let out = crate::confine::run(&self.exe, &env, stdin, &policy).map_err(|e| {
            Failure::ours(format!(
                "IPAM plugin {:?} ({}), {command}: {e}",
                self.plugin,
                self.exe.display()
            ))
        })?;
        if !out.stderr.is_empty() {
            log::warn!(
                "IPAM plugin {:?}, {command}, on stderr: {}",
                self.plugin,
                String::from_utf8_lossy(&out.stderr)
                    .trim_end()
                    .escape_debug()
            );
        }
        if out.code == 0 {
            return Ok(out.stdout);
        }
        let reply: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let msg = reply["msg"].as_str().unwrap_or("no error message");
        let code = reply["code"].as_u64();
        let error = Error::new(
            Code::Ipam,
            format!(
                "IPAM plugin {:?} failed {command}: {msg}{}",
                self.plugin,
                code.map(|c| format!(" (its code {c})")).unwrap_or_default()
            ),
        )
        .with_details(if reply.is_null() {
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            reply.to_string()
        });
        Err(Failure {
            their_code: code,
            error,
        })
    }
}

/// An IPAM call that failed, with the plugin's own code when it gave one.
struct Failure {
    their_code: Option<u64>,
    error: Error,
}

impl Failure {
    fn ours(msg: String) -> Self {
        Failure {
            their_code: None,
            error: Error::new(Code::Ipam, msg),
        }
    }
}

fn join_path(p: &[PathBuf]) -> String {
    p.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Top-level keys an IPAM plugin gets: what the spec's IPAM plugins read (`name` and
/// `cniVersion` for their store and result, `ipam`, `dns`, `args` for static's `args.cni.ips`),
/// our `type`, and GC's list of valid attachments.
const IPAM_KEYS: [&str; 7] = [
    "cniVersion",
    "name",
    "type",
    "ipam",
    "dns",
    "args",
    "cni.dev/valid-attachments",
];
/// `runtimeConfig` capabilities that are about addresses (host-local and static read `ips`,
/// host-local `ipRanges`); the rest (`portMappings`, `bandwidth`, `deviceID`, ...) are not
/// IPAM's business.
const IPAM_CAPABILITIES: [&str; 2] = ["ips", "ipRanges"];

/// What the IPAM plugin gets on stdin for `command`: the network configuration reduced to
/// [`IPAM_KEYS`] and the address capabilities of `runtimeConfig`; `prevResult` only on CHECK
/// (the runtime's cached result; `static` checks its addresses against it). The spec says a
/// delegated plugin gets the configuration its caller got; we narrow it because that
/// configuration is a tenant's and the delegate runs as root: a `prevResult` and
/// `runtimeConfig.portMappings` written into a NAD are not for an address manager.
/// Also the `cniVersion` it asks for, when that is one we know.
pub fn for_ipam(conf: &[u8], command: &str) -> Result<(Vec<u8>, Option<Version>)> {
    let val: Value = serde_json::from_slice(conf)
        .map_err(|e| Error::new(Code::Decode, format!("network configuration for IPAM: {e}")))?;
    let Value::Object(given) = val else {
        return Err(Error::new(
            Code::Decode,
            "network configuration for IPAM: not a JSON object",
        ));
    };
    let version = given
        .get("cniVersion")
        .and_then(Value::as_str)
        .and_then(|v| Version::parse(v).ok());
    let mut out = serde_json::Map::new();
    for (k, v) in given {
        if IPAM_KEYS.contains(&k.as_str()) || (k == "prevResult" && command == "CHECK") {
            out.insert(k, v);
        } else if k == "runtimeConfig"
            && let Value::Object(rc) = v
        {
            let rc: serde_json::Map<String, Value> = rc
                .into_iter()
                .filter(|(c, _)| IPAM_CAPABILITIES.contains(&c.as_str()))
                .collect();
            if !rc.is_empty() {
                out.insert(k, Value::Object(rc));
            }
        }
    }
    Ok((Value::Object(out).to_string().into_bytes(), version))
}

/// The `ipam` object of a network configuration (null if it has none or is not JSON).
pub fn ipam_object(conf: &[u8]) -> Value {
    serde_json::from_slice::<Value>(conf)
        .map(|v| v["ipam"].clone())
        .unwrap_or_default()
}

/// The config with another cniVersion, its prevResult rewritten in that version's shape.
fn with_version(conf: &[u8], v: Version) -> Result<Vec<u8>> {
    let mut val: Value = serde_json::from_slice(conf)
        .map_err(|e| Error::new(Code::Decode, format!("network configuration: {e}")))?;
    if let Some(o) = val.as_object_mut() {
        o.insert("cniVersion".into(), Value::from(v.as_str()));
        if let Some(prev) = o.remove("prevResult") {
            let older = CniResult::from_value(prev)?.to_json(v);
            let older: Value = serde_json::from_str(&older).unwrap_or(Value::Null);
            o.insert("prevResult".into(), older);
        }
    }
    Ok(val.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_rewrite_keeps_the_rest() {
        let c = br#"{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static"},
            "prevResult":{"interfaces":[{"name":"net1","mtu":9000}],"ips":[{"address":"10.0.0.2/24","interface":0}]}}"#;
        let v: Value = serde_json::from_slice(&with_version(c, Version::V0_4_0).unwrap()).unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        assert_eq!(v["ipam"]["type"], "static");
        assert_eq!(v["prevResult"]["cniVersion"], "0.4.0");
        assert_eq!(v["prevResult"]["ips"][0]["version"], "4");
        assert!(v["prevResult"]["interfaces"][0].get("mtu").is_none());
    }

    #[test]
    fn remembered_version_follows_the_binary() {
        let dir = std::env::temp_dir().join(format!("rhd-ipam-memo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("fake-ipam");
        std::fs::copy("/bin/true", &exe).unwrap();
        let env = Env::from_lookup(|k| {
            (k == "CNI_COMMAND")
                .then(|| "VERSION".to_string())
                .or_else(|| (k == "CNI_PATH").then(|| dir.display().to_string()))
        })
        .unwrap();
        let node = Node {
            ipam_plugins: vec!["fake-ipam".into()],
            ..Node::default()
        };
        let ipam = Ipam::new("fake-ipam", &env, &node).unwrap();
        assert_eq!(
            Ipam::new("portmap", &env, &node).err().map(|e| e.code),
            Some(Code::NotAllowed)
        );
        ipam.remember_version(Version::V1_0_0);
        assert_eq!(ipam.remembered_version(), Some(Version::V1_0_0));
        // An upgraded plugin (another file) is asked again.
        std::fs::remove_file(&exe).unwrap();
        std::fs::copy("/bin/ls", &exe).unwrap();
        assert_eq!(ipam.remembered_version(), None);
        if let Some((memo, _)) = ipam.version_memo() {
            let _ = std::fs::remove_file(memo);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_plugin_is_a_config_error() {
        let e = locate_plugin("no-such-ipam", &[PathBuf::from("/nonexistent")]).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(e.msg.contains("no-such-ipam"));
    }

    #[test]
    fn ipam_gets_only_what_an_address_manager_reads() {
        let c = br#"{"cniVersion":"1.0.0","name":"n","type":"rdma-host-device","device":"eth9",
            "ipam":{"type":"static","addresses":[{"address":"10.0.0.2/24"}]},
            "dns":{"nameservers":["10.0.0.1"]},"args":{"cni":{"ips":["10.0.0.3/24"]}},
            "prevResult":{"ips":[{"address":"10.9.9.9/32"}]},
            "runtimeConfig":{"portMappings":[{"hostPort":22,"containerPort":22,"protocol":"tcp"}],
                             "ips":["10.0.0.4/24"],"bandwidth":{"ingressRate":1}},
            "capabilities":{"portMappings":true},"rdma":{"isolation":"none"},"mtu":9000}"#;
        for cmd in ["ADD", "DEL", "GC", "STATUS"] {
            let v: Value = serde_json::from_slice(&for_ipam(c, cmd).unwrap().0).unwrap();
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            let mut keys = keys.clone();
            keys.sort();
            assert_eq!(
                keys,
                [
                    "args",
                    "cniVersion",
                    "dns",
                    "ipam",
                    "name",
                    "runtimeConfig",
                    "type"
                ],
                "{cmd}"
            );
            assert_eq!(
                v["runtimeConfig"],
                serde_json::json!({"ips": ["10.0.0.4/24"]})
            );
            assert_eq!(v["ipam"]["type"], "static");
        }
        let v: Value = serde_json::from_slice(&for_ipam(c, "CHECK").unwrap().0).unwrap();
        assert_eq!(v["prevResult"]["ips"][0]["address"], "10.9.9.9/32");
        // Only port mappings: no runtimeConfig at all.
        let v: Value = serde_json::from_slice(
            &for_ipam(
                br#"{"name":"n","runtimeConfig":{"portMappings":[]}}"#,
                "ADD",
            )
            .unwrap()
            .0,
        )
        .unwrap();
        assert!(v.get("runtimeConfig").is_none(), "{v}");
        assert_eq!(for_ipam(b"[]", "ADD").unwrap_err().code, Code::Decode);
    }
}
