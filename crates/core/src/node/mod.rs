//! The node's own settings, written by the node operator (the DaemonSet installs them from a
//! ConfigMap), never by a NetworkAttachmentDefinition: where the plugin keeps its state and its
//! log files, which NICs may be handed to pods, and which programs a network configuration may
//! make it exec as IPAM. The plugin works without the file.
//!
//! The file is `/etc/rdma-host-device/node.json`, or the path in `RDMA_HOST_DEVICE_NODE_CONFIG`
//! (the environment of a CNI plugin is the runtime's, a node-level component, not the tenant's).

mod device_plugin;
mod dra;
mod gc;
mod memlock;
use crate::error::{Code, Error, Result};
use crate::rdma::identity::{format_guid, parse_guid};
pub use device_plugin::{CharDevices, DevicePluginConfig, Pool};
pub use dra::{DeviceMetadataConfig, DraConfig, Rail};
pub use gc::GcConfig;
pub use memlock::Memlock;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const DEFAULT_PATH: &str = "/etc/rdma-host-device/node.json";
pub const PATH_ENV: &str = "RDMA_HOST_DEVICE_NODE_CONFIG";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/rdma-host-device";
pub const DEFAULT_LOG_DIR: &str = "/var/log/rdma-host-device";
/// The IPAM plugins a network configuration may name when the node says nothing: the address
/// managers people use with a host NIC, and nothing that is not an address manager (`portmap`,
/// `bridge`, ... are plugins too, and would run as root with the tenant's config).
pub const DEFAULT_IPAM_PLUGINS: [&str; 4] = ["host-local", "static", "dhcp", "whereabouts"];
/// The directories an IPAM plugin may write beneath when the node says nothing (the kernel
/// enforces it, src/confine/): host-local's default dataDir (/var/lib/cni/networks), dhcp's
/// socket directory (/run/cni). Never the plugin's own stateDir.
pub const DEFAULT_IPAM_PATHS: [&str; 3] = ["/var/lib/cni/networks", "/run/cni", "/var/run/cni"];
/// What an IPAM plugin may read (and execute) beyond its own file and the dynamic loader's
/// directories when the node says nothing: the CNI configuration (whereabouts' kubeconfig
/// lives in /etc/cni/net.d/whereabouts.d/) and the node's resolver configuration.
pub const DEFAULT_IPAM_READ_PATHS: [&str; 2] = ["/etc/cni", "/etc/resolv.conf"];
/// How long one exec of an IPAM plugin may take when the node says nothing (a DHCP lease
/// takes a few seconds; nothing legitimate takes this long).
pub const DEFAULT_IPAM_TIMEOUT_SECONDS: u64 = 30;
/// The most an IPAM plugin may write to stdout (a CNI result is a few KiB).
pub const MAX_IPAM_OUTPUT: usize = 1 << 20;
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
    /// RLIMIT_MEMLOCK containers that get an RDMA device are given (by the NRI plugin in
    /// their spec, by the CDI spec's hook to their first process): bytes, or "unlimited" (the
    /// default).
    #[serde(default = "default_memlock")]
    pub memlock: String,
    /// The CDI spec's memlock hook (the CNI binary) as the node's runtime sees it: the one
    /// setting both writers of the spec (`cdi`, the device plugin's `--cdi-spec`) take it from.
    #[serde(default = "default_cdi_hook")]
    pub cdi_hook: PathBuf,
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
    /// What an IPAM plugin may read and execute besides its own file and the loader's
    /// directories (`ipamReadPaths`); enforced by the kernel like `ipamPaths`.
    #[serde(default = "default_ipam_read_paths")]
    pub ipam_read_paths: Vec<PathBuf>,
    /// Where the kernel cannot confine an IPAM plugin (no Landlock, no PID namespace):
    /// `required` (the default) refuses to run it, `bestEffort` runs it with a warning.
    #[serde(default)]
    pub ipam_confinement: Confinement,
    /// The deadline of one exec of an IPAM plugin, in seconds (1-600).
    #[serde(default = "default_ipam_timeout")]
    pub ipam_timeout_seconds: u64,
    /// Exclusive mode: whether ADD may move an RDMA device that host processes hold open
    /// (their verbs contexts are cut off). Off by default: such a NIC is refused (107).
    #[serde(default)]
    pub take_rdma_devices_in_use: bool,
    /// What the device plugin offers the kubelet (`rdma-host-device-agent device-plugin`), kept as
    /// its JSON text: the CNI verbs never parse it (nor stop on a mistake in it); the device
    /// plugin and `node-config` do, through [`Node::device_plugin`].
    #[serde(default, rename = "devicePlugin", deserialize_with = "raw_json")]
    pub device_plugin_json: Option<String>,
    /// What the DRA driver publishes (`rdma-host-device-agent dra`), kept as its JSON text like
    /// `devicePlugin`; parsed by [`Node::dra`].
    #[serde(default, rename = "dra", deserialize_with = "raw_json")]
    pub dra_json: Option<String>,
    /// The agent's collection of leaked attachments (`gc`), kept as its JSON text like
    /// `devicePlugin`; parsed by [`Node::gc`].
    #[serde(default, rename = "gc", deserialize_with = "raw_json")]
    pub gc_json: Option<String>,
    /// The uppers watcher's socket (`rdma-host-device-agent uppers-watch`), which ADD and the device
    /// plugin ask whether a device of another namespace rides a NIC. Only the cost depends on
    /// it: without an answer from it they look through every namespace themselves.
    #[serde(default = "default_uppers_socket")]
    pub uppers_socket: PathBuf,
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

fn default_uppers_socket() -> PathBuf {
    PathBuf::from(crate::uppers::DEFAULT_SOCKET)
}

/// The memlock hook the CDI spec names unless the node says otherwise (`cdiHook`): the plugin's
/// binary where the DaemonSet installs it.
pub const DEFAULT_HOOK: &str = "/opt/cni/bin/rdma-host-device";
/// Where the agent's `cdi` writes the CDI spec that names the hook, unless told otherwise.
pub const DEFAULT_CDI_SPEC: &str = "/var/run/cdi/rdma-host-device.json";

fn default_cdi_hook() -> PathBuf {
    PathBuf::from(DEFAULT_HOOK)
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

fn default_ipam_read_paths() -> Vec<PathBuf> {
    DEFAULT_IPAM_READ_PATHS.iter().map(PathBuf::from).collect()
}

fn default_ipam_timeout() -> u64 {
    DEFAULT_IPAM_TIMEOUT_SECONDS
}

/// `ipamConfinement`: what to do where the kernel cannot confine an IPAM plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Confinement {
    /// Refuse to run it (ADD fails with 105 and says why).
    #[default]
    Required,
    /// Run it without what the kernel lacks, with a warning in the log.
    BestEffort,
}

/// Where the plugin keeps what it shares between calls on this node (version memos, the IPAM
/// working directory, node-wide locks): never IPAM's.
pub const RUN_DIR: &str = "/run/rdma-host-device";

/// `p` with every symlink of its longest existing ancestor resolved (the file the kernel
/// would grant a rule on), the missing rest appended as written.
fn real_path(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(mut r) = std::fs::canonicalize(&existing) {
            r.extend(rest.iter().rev());
            return r;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
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
            cdi_hook: default_cdi_hook(),
            ipam_plugins: default_ipam_plugins(),
            ipam_paths: default_ipam_paths(),
            ipam_read_paths: default_ipam_read_paths(),
            ipam_confinement: Confinement::default(),
            ipam_timeout_seconds: default_ipam_timeout(),
            take_rdma_devices_in_use: false,
            device_plugin_json: None,
            dra_json: None,
            gc_json: None,
            uppers_socket: default_uppers_socket(),
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
    /// Why this link may have been made from another network namespace (a veth whose peer,
    /// or a macvlan whose lower, is in another namespace: IFLA_LINK_NETNSID), if it may: a
    /// pod with NET_ADMIN can make such a link on the host under any free name. Only
    /// `allowedNics.names` naming it lets it through.
    pub made_elsewhere: Option<String>,
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
            "cdiHook": self.cdi_hook,
            "ipamPlugins": self.ipam_plugins,
            "ipamPaths": self.ipam_paths,
            "ipamReadPaths": self.ipam_read_paths,
            "ipamConfinement": self.ipam_confinement,
            "ipamTimeoutSeconds": self.ipam_timeout_seconds,
            "takeRdmaDevicesInUse": self.take_rdma_devices_in_use,
            "uppersSocket": self.uppers_socket,
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
        if let Ok(Some(d)) = self.dra() {
            v["dra"] = d.to_json();
        }
        if let Ok(Some(g)) = self.gc() {
            v["gc"] = serde_json::json!({
                "criSocket": g.cri_socket,
                "periodSeconds": g.period_seconds,
                "graceSeconds": g.grace_seconds,
                "timeoutSeconds": g.timeout_seconds,
                "cniPath": g.cni_path,
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
        // A regular file within the bound, read without blocking: a FIFO at the path stalls
        // neither ADD nor `node-config`, the installer, the exporter or the device plugin.
        let body = match crate::files::read_regular(path, MAX_LEN) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Node::default());
            }
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                return Err(bad(e.to_string()));
            }
            Err(e) => return Err(bad(format!("cannot read it: {e}"))),
        };
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
        if !node.uppers_socket.is_absolute() || has_dotdot(&node.uppers_socket) {
            return Err(bad(format!(
                "uppersSocket {} must be an absolute path without '..'",
                node.uppers_socket.display()
            )));
        }
        Memlock::parse(&node.memlock).map_err(|e| bad(e.msg))?;
        if !node.cdi_hook.is_absolute() || has_dotdot(&node.cdi_hook) {
            return Err(bad(format!(
                "cdiHook {} must be an absolute path without '..' (the CNI binary as the runtime sees it)",
                node.cdi_hook.display()
            )));
        }
        for p in &node.ipam_plugins {
            if p.is_empty() || p.contains('/') || p == "." || p == ".." {
                return Err(bad(format!(
                    "ipamPlugins entry {p:?} must be a plugin file name (it is looked up in CNI_PATH)"
                )));
            }
        }
        // The plugin's own directories, resolved once (every CNI call loads this file).
        let own: Vec<(&str, PathBuf, bool)> = [
            ("stateDir", &node.state_dir, true),
            ("logDir", &node.log_dir, false),
            ("deviceInfoDir", &node.device_info_dir, true),
            ("runtime directory", &PathBuf::from(RUN_DIR), true),
        ]
        .into_iter()
        .map(|(what, dir, inside_too)| (what, real_path(dir), inside_too))
        .collect();
        for (key, paths) in [
            ("ipamPaths", &node.ipam_paths),
            ("ipamReadPaths", &node.ipam_read_paths),
        ] {
            for p in paths {
                if !p.is_absolute() || has_dotdot(p) {
                    return Err(bad(format!(
                        "{key} entry {} must be an absolute path without '..'",
                        p.display()
                    )));
                }
                // The kernel grants IPAM all of an entry, by the file it resolves to: one
                // that holds the plugin's own records, log, runtime directory or the
                // device-info directory, or lies among them, or reaches the kernel's own
                // file systems, would hand them to a tenant's IPAM config. Compared as
                // resolved paths, so a symlink to the stateDir is the stateDir. (A directory
                // of its own inside the logDir reaches no log file.)
                let real = real_path(p);
                if real == Path::new("/")
                    || ["/proc", "/sys", "/dev"]
                        .iter()
                        .any(|d| real.starts_with(d))
                {
                    return Err(bad(format!(
                        "{key} entry {} is {}: IPAM plugins would reach the whole node",
                        p.display(),
                        if real == Path::new("/") {
                            "the root".to_owned()
                        } else {
                            format!("on a kernel file system ({})", real.display())
                        }
                    )));
                }
                for (what, dir, inside_too) in &own {
                    if dir.starts_with(&real) || (*inside_too && real.starts_with(dir)) {
                        return Err(bad(format!(
                            "{key} entry {} holds or is inside the plugin's {what} {}: IPAM plugins would reach the plugin's own files; list a directory beside it",
                            p.display(),
                            dir.display()
                        )));
                    }
                }
            }
        }
        if !(1..=600).contains(&node.ipam_timeout_seconds) {
            return Err(bad(format!(
                "ipamTimeoutSeconds {} must be 1-600",
                node.ipam_timeout_seconds
            )));
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
                            "{at} {s:?} {why}; IPAM paths must be under {} (ipamPaths and ipamReadPaths in the node policy: {})",
                            if self.ipam_paths.is_empty() && self.ipam_read_paths.is_empty() {
                                "no directory at all".to_owned()
                            } else {
                                self.ipam_paths
                                    .iter()
                                    .chain(&self.ipam_read_paths)
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
                    if !path_under(&self.ipam_paths, p) && !path_under(&self.ipam_read_paths, p) {
                        return refuse("is outside the directories this node lets IPAM name");
                    }
                } else if key
                    .is_some_and(|k| IPAM_PATH_KEYS.iter().any(|p| p.eq_ignore_ascii_case(k)))
                {
                    // Go's decoder (host-local, dhcp) matches keys without regard to case.
                    // The plugin resolves it against its working directory: an empty one
                    // the kernel lets it write nothing in. Said early, not relied on.
                    return refuse(if has_dotdot(p) {
                        "contains '..'"
                    } else {
                        "is relative (the plugin would resolve it against its working directory)"
                    });
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

    /// The `dra` section, parsed and checked; `None` without one.
    pub fn dra(&self) -> Result<Option<DraConfig>> {
        let Some(text) = &self.dra_json else {
            return Ok(None);
        };
        let bad = |what: String| {
            Error::new(
                Code::InvalidConfig,
                format!("node configuration {}: {what}", self.source),
            )
        };
        let d: DraConfig = serde_json::from_str(text).map_err(|e| bad(format!("dra: {e}")))?;
        d.check().map_err(bad)?;
        Ok(Some(d))
    }

    /// `dra.deviceMetadata` alone, parsed and checked; `None` without it (no device metadata):
    /// what ADD and DEL read of `dra` (the rest is the agent's, and not parsed on every CNI
    /// call).
    pub fn dra_metadata(&self) -> Result<Option<DeviceMetadataConfig>> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Only {
            #[serde(default)]
            device_metadata: Option<DeviceMetadataConfig>,
        }
        let Some(text) = &self.dra_json else {
            return Ok(None);
        };
        let bad = |what: String| {
            Error::new(
                Code::InvalidConfig,
                format!("node configuration {}: {what}", self.source),
            )
        };
        let only: Only = serde_json::from_str(text).map_err(|e| bad(format!("dra: {e}")))?;
        if let Some(m) = &only.device_metadata {
            m.check().map_err(bad)?;
        }
        Ok(only.device_metadata)
    }

    /// The `gc` section, parsed and checked; `None` without one.
    pub fn gc(&self) -> Result<Option<GcConfig>> {
        let Some(text) = &self.gc_json else {
            return Ok(None);
        };
        let bad = |what: String| {
            Error::new(
                Code::InvalidConfig,
                format!("node configuration {}: {what}", self.source),
            )
        };
        let g: GcConfig = serde_json::from_str(text).map_err(|e| bad(format!("gc: {e}")))?;
        g.check().map_err(bad)?;
        Ok(Some(g))
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
        if let Some(why) = &nic.made_elsewhere
            && !self
                .allowed_nics
                .as_ref()
                .is_some_and(|p| p.names.iter().any(|n| n == nic.name))
        {
            return Err(refuse(format!(
                "{why}, so any pod with NET_ADMIN and no user namespace may have made it on the host (through a network namespace id), under any free name, another pod's NIC's included; list it in allowedNics.names to hand it over anyway"
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
