//! The node's own settings, written by the node operator (the DaemonSet installs them from a
//! ConfigMap), never by a NetworkAttachmentDefinition: where the plugin keeps its state and its
//! log files, which NICs may be handed to pods, and which programs a network configuration may
//! make it exec as IPAM. The plugin works without the file.
//!
//! The file is `/etc/rdma-host-device/node.json`, or the path in `RDMA_HOST_DEVICE_NODE_CONFIG`
//! (the environment of a CNI plugin is the runtime's, a node-level component, not the tenant's).

mod device_plugin;
mod memlock;
pub mod show;
use crate::error::{Code, Error, Result};
use crate::rdma::identity::{format_guid, parse_guid};
pub use device_plugin::{CharDevices, DevicePluginConfig, Pool};
pub use memlock::Memlock;
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const DEFAULT_PATH: &str = "/etc/rdma-host-device/node.json";
pub const PATH_ENV: &str = "RDMA_HOST_DEVICE_NODE_CONFIG";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/rdma-host-device";
pub const DEFAULT_LOG_DIR: &str = "/var/log/rdma-host-device";
/// The IPAM plugins a network configuration may name when the node says nothing: the address
/// managers people use with a host NIC, and nothing that is not an address manager (`portmap`,
/// `bridge`, ... are plugins too, and would run as root with the tenant's config).
pub const DEFAULT_IPAM_PLUGINS: [&str; 4] = ["host-local", "static", "dhcp", "whereabouts"];
/// The directories a path in a network configuration's `ipam` may name when the node says
/// nothing: host-local's default dataDir (/var/lib/cni/networks), dhcp's socket
/// (/run/cni/dhcp.sock), whereabouts' kubeconfig (/etc/cni/net.d/...).
pub const DEFAULT_IPAM_PATHS: [&str; 4] = ["/var/lib/cni", "/run/cni", "/var/run/cni", "/etc/cni"];
/// `ipam` keys known to be paths: a relative value with `..` is refused too (an absolute
/// value of any key is checked against `ipamPaths`).
const IPAM_PATH_KEYS: [&str; 3] = ["dataDir", "resolvConf", "daemonSocketPath"];

/// Larger than any sane node config; the file is the operator's, but we never read unbounded.
const MAX_LEN: u64 = 1 << 20;

/// Which NICs may be handed to pods. Absent: any NIC except the node's own uplinks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NicPolicy {
    /// Host interface names (the primary name, as `ip link` shows it).
    #[serde(default)]
    pub names: Vec<String>,
    /// PCI functions, `0000:3b:00.1`.
    #[serde(default)]
    pub pci_addresses: Vec<String>,
    /// Kernel drivers, `mlx5_core`, `irdma`'s `ice`, ...
    #[serde(default)]
    pub drivers: Vec<String>,
    /// RDMA devices by node GUID (`0200:00ff:fe00:0010`, as `rdma dev` prints it), or by name
    /// (`mlx5_0`): a name matches only where no pod can rename devices (exclusive netns mode),
    /// see `rdma::identity`.
    #[serde(default)]
    pub rdma_devices: Vec<String>,
}

impl NicPolicy {
    /// Does any entry name this NIC?
    pub fn matches(&self, nic: &NicFacts<'_>) -> bool {
        let any = |list: &[String], v: Option<&str>| v.is_some_and(|v| list.iter().any(|x| x == v));
        any(&self.names, Some(nic.name))
            || any(&self.pci_addresses, nic.pci)
            || any(&self.drivers, nic.driver)
            || self.rdma_devices.iter().any(|e| rdma_entry_matches(e, nic))
    }

    /// `rdmaDevices` entries that name this NIC's RDMA device by a name a pod may have given
    /// it (shared netns mode): they do not count, and the refusal says why.
    fn untrusted_rdma_names<'a>(&'a self, nic: &NicFacts<'_>) -> Vec<&'a str> {
        self.rdma_devices
            .iter()
            .filter(|e| {
                parse_guid(e).is_none() && !nic.rdma_name_is_the_nodes && nic.rdma_device == Some(e)
            })
            .map(String::as_str)
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty()
            && self.pci_addresses.is_empty()
            && self.drivers.is_empty()
            && self.rdma_devices.is_empty()
    }

    /// Every entry as `key value`, to find one named by two pools.
    fn entries(&self) -> impl Iterator<Item = String> + '_ {
        [
            ("names", &self.names),
            ("pciAddresses", &self.pci_addresses),
            ("drivers", &self.drivers),
            ("rdmaDevices", &self.rdma_devices),
        ]
        .into_iter()
        .flat_map(|(k, l)| l.iter().map(move |v| format!("{k} {v:?}")))
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "names": self.names,
            "pciAddresses": self.pci_addresses,
            "drivers": self.drivers,
            "rdmaDevices": self.rdma_devices,
        })
    }
}

/// The node configuration file's content.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    /// Where attachments are remembered (and per-attachment locks live).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// The only directory a netconf `logFile` may name a file in.
    #[serde(default = "default_log_dir")]
    pub log_dir: PathBuf,
    /// Only these NICs may be handed to pods (any entry matching is enough).
    #[serde(default)]
    pub allowed_nics: Option<NicPolicy>,
    /// NICs (by name or PCI address) that may be handed to pods although they carry the node's
    /// default route, a global address, or are a port of a bond or bridge. Their host addresses
    /// and routes are not restored on DEL.
    #[serde(default)]
    pub allowed_uplinks: Vec<String>,
    /// The only directory a `runtimeConfig.CNIDeviceInfoFile` may name a file in (Multus').
    #[serde(default = "default_device_info_dir")]
    pub device_info_dir: PathBuf,
    /// RLIMIT_MEMLOCK the CDI spec's hook gives containers that get an RDMA device: bytes, or
    /// "unlimited" (the default).
    #[serde(default = "default_memlock")]
    pub memlock: String,
    /// The only plugins `ipam.type` may name (file names in CNI_PATH). The plugin runs as root
    /// and execs what `ipam.type` names with the tenant's config on stdin: the node decides.
    #[serde(default = "default_ipam_plugins")]
    pub ipam_plugins: Vec<String>,
    /// The only directories (absolute, compared by path component) an absolute path anywhere
    /// in a network configuration's `ipam` may name: the IPAM plugin runs as root and creates,
    /// reads or connects to what its config names (host-local's `dataDir`, `resolvConf`, dhcp's
    /// `daemonSocketPath`, ...).
    #[serde(default = "default_ipam_paths")]
    pub ipam_paths: Vec<PathBuf>,
    /// Exclusive mode: whether ADD may move an RDMA device that host processes hold open
    /// (their verbs contexts are cut off). Off by default: such a NIC is refused (107).
    #[serde(default)]
    pub take_rdma_devices_in_use: bool,
    /// What the device plugin offers the kubelet (`rdma-host-device-agent device-plugin`), kept as
    /// its JSON text: the CNI verbs never parse it (nor stop on a mistake in it); the device
    /// plugin and `node-config` do, through [`Node::device_plugin`].
    #[serde(default, rename = "devicePlugin", deserialize_with = "raw_json")]
    pub device_plugin_json: Option<String>,
    /// Where this came from, for messages.
    #[serde(skip)]
    pub source: String,
}

/// A JSON value as its text, unparsed (one copy, no tree).
fn raw_json<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    let raw: Box<serde_json::value::RawValue> = Deserialize::deserialize(d)?;
    Ok(Some(raw.get().to_owned()))
}

fn default_state_dir() -> PathBuf {
    PathBuf::from(DEFAULT_STATE_DIR)
}

fn default_log_dir() -> PathBuf {
    PathBuf::from(DEFAULT_LOG_DIR)
}

fn default_memlock() -> String {
    "unlimited".into()
}

fn default_device_info_dir() -> PathBuf {
    PathBuf::from(crate::device_info::DEFAULT_DIR)
}

fn default_ipam_plugins() -> Vec<String> {
    DEFAULT_IPAM_PLUGINS.iter().map(|s| s.to_string()).collect()
}

fn default_ipam_paths() -> Vec<PathBuf> {
    DEFAULT_IPAM_PATHS.iter().map(PathBuf::from).collect()
}

fn has_dotdot(p: &Path) -> bool {
    p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Whether `path` (absolute, without `..`) is one of `prefixes` or under one, by whole
/// components: `/etc/cnix` is not under `/etc/cni`.
pub fn path_under(prefixes: &[PathBuf], path: &Path) -> bool {
    path.is_absolute() && !has_dotdot(path) && prefixes.iter().any(|p| path.starts_with(p))
}

impl Default for Node {
    fn default() -> Self {
        Node {
            state_dir: default_state_dir(),
            log_dir: default_log_dir(),
            allowed_nics: None,
            allowed_uplinks: Vec::new(),
            device_info_dir: default_device_info_dir(),
            memlock: default_memlock(),
            ipam_plugins: default_ipam_plugins(),
            ipam_paths: default_ipam_paths(),
            take_rdma_devices_in_use: false,
            device_plugin_json: None,
            source: "built-in defaults".into(),
        }
    }
}

/// Does one `rdmaDevices` entry name this NIC's RDMA device? A node GUID by the device's GUID;
/// a name only when no pod can have given it (`rdma::identity`).
fn rdma_entry_matches(entry: &str, nic: &NicFacts<'_>) -> bool {
    match parse_guid(entry) {
        Some(g) => nic.rdma_guid == Some(g),
        None => nic.rdma_name_is_the_nodes && nic.rdma_device == Some(entry),
    }
}

/// Directories the plugin's own state, logs and device-info files must not be: the plugin
/// creates, replaces and deletes files in them (DEL removes a device-info file it recorded;
/// with `deviceInfoDir: /etc` that reached any file in /etc).
const SYSTEM_DIRS: [&str; 22] = [
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/log",
    "/var/run",
];

/// Trees that hold the system's own files: none of the plugin's directories may be in one
/// (`/etc/cni/net.d` as a stateDir would have the plugin write and delete among CNI configs).
const SYSTEM_TREES: [&str; 8] = [
    "/etc", "/usr", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
];

/// Why `dir` cannot be one of the plugin's own directories (`stateDir`, `logDir`,
/// `deviceInfoDir`): a NUL byte (no path has one), a system directory itself, anything under
/// /proc, /sys or /dev, or inside a tree of the system's own files ([`SYSTEM_TREES`]).
fn check_own_dir(key: &str, dir: &Path) -> std::result::Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    if dir.as_os_str().as_bytes().contains(&0) {
        return Err(format!("{key} {dir:?} contains a NUL byte"));
    }
    let norm: PathBuf = dir.components().collect();
    if SYSTEM_DIRS.iter().any(|d| norm == Path::new(d)) {
        return Err(format!(
            "{key} {} is a system directory; the plugin creates and deletes files there: give it a directory of its own (e.g. {})",
            dir.display(),
            match key {
                "stateDir" => DEFAULT_STATE_DIR,
                "logDir" => DEFAULT_LOG_DIR,
                _ => "/var/run/k8s.cni.cncf.io/devinfo/cni",
            }
        ));
    }
    if let Some(tree) = SYSTEM_TREES.iter().find(|d| norm.starts_with(d)) {
        return Err(format!(
            "{key} {} is inside {tree}, which holds the system's own files; the plugin creates and deletes files there: give it a directory of its own",
            dir.display()
        ));
    }
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|d| norm.starts_with(d))
    {
        return Err(format!(
            "{key} {} is on a kernel file system (/proc, /sys, /dev)",
            dir.display()
        ));
    }
    Ok(())
}

/// What the NIC is, as far as the node policy cares.
#[derive(Debug, Default)]
pub struct NicFacts<'a> {
    pub name: &'a str,
    pub pci: Option<&'a str>,
    pub driver: Option<&'a str>,
    /// Its RDMA device's name now, its node GUID, and whether that name is the node's (no pod
    /// can rename a device: exclusive netns mode) or may be a pod's choice (shared mode).
    pub rdma_device: Option<&'a str>,
    pub rdma_guid: Option<u64>,
    pub rdma_name_is_the_nodes: bool,
    /// Why the node itself needs this NIC (default route, global address, bond port), if it does.
    pub uplink: Vec<String>,
}

impl Node {
    /// The node configuration: the file named by the environment or the default path; the
    /// built-in defaults when the default file does not exist.
    pub fn load() -> Result<Node> {
        match std::env::var_os(PATH_ENV) {
            Some(p) if !p.is_empty() => Self::from_file(Path::new(&p), true),
            _ => Self::from_file(Path::new(DEFAULT_PATH), false),
        }
    }

    /// The node configuration in `path`, which must exist.
    pub fn load_from(path: &Path) -> Result<Node> {
        Self::from_file(path, true)
    }

    /// The effective settings, defaults filled in, as the operator would write them.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::json!({
            "stateDir": self.state_dir,
            "logDir": self.log_dir,
            "allowedUplinks": self.allowed_uplinks,
            "deviceInfoDir": self.device_info_dir,
            "memlock": self.memlock,
            "ipamPlugins": self.ipam_plugins,
            "ipamPaths": self.ipam_paths,
            "takeRdmaDevicesInUse": self.take_rdma_devices_in_use,
            "source": self.source,
        });
        if let Some(p) = &self.allowed_nics {
            v["allowedNics"] = p.to_json();
        }
        if let Ok(Some(dp)) = self.device_plugin() {
            v["devicePlugin"] = serde_json::json!({
                "pools": dp.pools.iter().map(|p| serde_json::json!({
                    "resourceName": p.resource_name,
                    "selectors": p.selectors.to_json(),
                })).collect::<Vec<_>>(),
                "charDevices": {
                    "umad": dp.char_devices.umad,
                    "issm": dp.char_devices.issm,
                    "cdi": dp.char_devices.cdi,
                },
            });
        }
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }

    fn from_file(path: &Path, required: bool) -> Result<Node> {
        let bad = |what: String| {
            Error::new(
                Code::InvalidConfig,
                format!("node configuration {}: {what}", path.display()),
            )
        };
        let f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Node::default());
            }
            Err(e) => return Err(bad(format!("cannot open it: {e}"))),
        };
        let mut body = Vec::new();
        f.take(MAX_LEN + 1)
            .read_to_end(&mut body)
            .map_err(|e| bad(format!("cannot read it: {e}")))?;
        if body.len() as u64 > MAX_LEN {
            return Err(bad(format!("larger than {MAX_LEN} bytes")));
        }
        // serde reads a struct from a JSON array too, field by field (`["/x"]` set stateDir):
        // the file is one object of named keys or nothing.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(bad(
                "the top level must be a JSON object ({\"stateDir\": ...}), not an array or a value"
                    .into(),
            ));
        }
        let mut node: Node = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
        node.source = path.display().to_string();
        for (key, dir) in [
            ("stateDir", &node.state_dir),
            ("logDir", &node.log_dir),
            ("deviceInfoDir", &node.device_info_dir),
        ] {
            if !dir.is_absolute() || dir.components().any(|c| c.as_os_str() == "..") {
                return Err(bad(format!(
                    "{key} {} must be an absolute path without '..'",
                    dir.display()
                )));
            }
            check_own_dir(key, dir).map_err(bad)?;
        }
        Memlock::parse(&node.memlock).map_err(|e| bad(e.msg))?;
        for p in &node.ipam_plugins {
            if p.is_empty() || p.contains('/') || p == "." || p == ".." {
                return Err(bad(format!(
                    "ipamPlugins entry {p:?} must be a plugin file name (it is looked up in CNI_PATH)"
                )));
            }
        }
        for p in &node.ipam_paths {
            if !p.is_absolute() || has_dotdot(p) {
                return Err(bad(format!(
                    "ipamPaths entry {} must be an absolute directory without '..'",
                    p.display()
                )));
            }
        }
        Ok(node)
    }

    /// Whether a network configuration may make the plugin exec `plugin` as its IPAM: refused
    /// with 107 (the node's policy, as for a NIC) naming the plugins the node allows.
    pub fn admit_ipam(&self, plugin: &str) -> Result<()> {
        if self.ipam_plugins.iter().any(|p| p == plugin) {
            return Ok(());
        }
        Err(Error::new(
            Code::NotAllowed,
            format!(
                "ipam.type {plugin:?} is not an IPAM plugin this node allows; it allows {} (ipamPlugins in the node policy: {})",
                if self.ipam_plugins.is_empty() {
                    "none".to_owned()
                } else {
                    self.ipam_plugins.join(", ")
                },
                self.source
            ),
        ))
    }

    /// Whether every path in a network configuration's `ipam` object is one the node lets IPAM
    /// name: each absolute string, at any depth, must be under `ipamPaths` without `..`, and a
    /// relative value of a key known to be a path must not contain `..`. Refused with 107 (the
    /// node's policy) naming the key and the allowed directories.
    pub fn admit_ipam_paths(&self, ipam: &serde_json::Value) -> Result<()> {
        self.walk_ipam("ipam", None, ipam)
    }

    fn walk_ipam(&self, at: &str, key: Option<&str>, v: &serde_json::Value) -> Result<()> {
        use serde_json::Value;
        match v {
            Value::Object(m) => m
                .iter()
                .try_for_each(|(k, v)| self.walk_ipam(&format!("{at}.{k}"), Some(k), v)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| self.walk_ipam(&format!("{at}[{i}]"), key, v)),
            Value::String(s) => {
                let p = Path::new(s);
                let refuse = |why: &str| {
                    Err(Error::new(
                        Code::NotAllowed,
                        format!(
                            "{at} {s:?} {why}; IPAM paths must be under {} (ipamPaths in the node policy: {})",
                            if self.ipam_paths.is_empty() {
                                "no directory at all".to_owned()
                            } else {
                                self.ipam_paths
                                    .iter()
                                    .map(|p| p.display().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            },
                            self.source
                        ),
                    ))
                };
                if s.starts_with('/') {
                    if has_dotdot(p) {
                        return refuse("contains '..'");
                    }
                    if !path_under(&self.ipam_paths, p) {
                        return refuse("is outside the directories this node lets IPAM name");
                    }
                    // The plugin's own records are never IPAM's (host-local writes
                    // <dataDir>/<network name>/, so a parent of the stateDir reaches it too).
                    if p.starts_with(&self.state_dir) || self.state_dir.starts_with(p) {
                        return refuse(&format!(
                            "is, holds or is inside the plugin's own stateDir {}",
                            self.state_dir.display()
                        ));
                    }
                } else if key.is_some_and(|k| IPAM_PATH_KEYS.contains(&k)) && has_dotdot(p) {
                    return refuse("contains '..'");
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The `devicePlugin` section, parsed and checked; `None` without one.
    pub fn device_plugin(&self) -> Result<Option<DevicePluginConfig>> {
        let Some(text) = &self.device_plugin_json else {
            return Ok(None);
        };
        let bad = |what: String| {
            Error::new(
                Code::InvalidConfig,
                format!("node configuration {}: devicePlugin: {what}", self.source),
            )
        };
        let dp: DevicePluginConfig = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        dp.check().map_err(bad)?;
        Ok(Some(dp))
    }

    /// Why this NIC may not be handed to a pod, or `Ok` when it may.
    pub fn admit(&self, nic: &NicFacts<'_>) -> Result<()> {
        let refuse = |why: String| {
            Error::new(
                Code::NotAllowed,
                format!(
                    "{} may not be handed to a pod: {why} (node policy: {})",
                    nic.name, self.source
                ),
            )
        };
        if let Some(p) = &self.allowed_nics
            && !p.matches(nic)
        {
            let untrusted = p.untrusted_rdma_names(nic);
            return Err(refuse(format!(
                "it is not in allowedNics (name {}, pci {}, driver {}, rdma device {}{}){}",
                nic.name,
                nic.pci.unwrap_or("none"),
                nic.driver.unwrap_or("none"),
                nic.rdma_device.unwrap_or("none"),
                nic.rdma_guid
                    .map(|g| format!(" node GUID {}", format_guid(g)))
                    .unwrap_or_default(),
                if untrusted.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; rdmaDevices {untrusted:?} matched only by name, and in the shared RDMA netns mode any pod with NET_ADMIN can rename RDMA devices (`rdma dev set`): list the device's node GUID instead{}",
                        nic.rdma_guid
                            .map(|g| format!(" ({})", format_guid(g)))
                            .unwrap_or_default()
                    )
                },
            )));
        }
        if !nic.uplink.is_empty() {
            let listed = self
                .allowed_uplinks
                .iter()
                .any(|u| u == nic.name || Some(u.as_str()) == nic.pci);
            if !listed {
                return Err(refuse(format!(
                    "the node itself uses it ({}); list it in allowedUplinks to hand it over anyway",
                    nic.uplink.join("; ")
                )));
            }
            log::warn!(
                "{} is used by the node ({}) and allowed by allowedUplinks; its host addresses and routes will not come back on DEL",
                nic.name,
                nic.uplink.join("; ")
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
