//! The node's own settings, written by the node operator (the DaemonSet installs them from a
//! ConfigMap), never by a NetworkAttachmentDefinition: where the plugin keeps its state and its
//! log files, which NICs may be handed to pods, and which programs a network configuration may
//! make it exec as IPAM. The plugin works without the file.
//!
//! The file is `/etc/rdma-host-device/node.json`, or the path in `RDMA_HOST_DEVICE_NODE_CONFIG`
//! (the environment of a CNI plugin is the runtime's, a node-level component, not the tenant's).
//!
//! This file reads and checks the file as a whole; each subsystem's settings and their rules
//! live beside it: `nics.rs` (which NICs may be handed over: `allowedNics`, `allowedUplinks`,
//! [`Node::admit`]), `ipam.rs` (which IPAM plugins and paths, their confinement and deadline),
//! `dirs.rs` (the plugin's own directories and the path rules), `memlock.rs`, and the agent's
//! sections, kept as text until their subsystem parses them: `device_plugin.rs`, `dra.rs`,
//! `gc.rs`.

mod device_plugin;
mod dirs;
mod dra;
mod gc;
mod ipam;
mod keys;
mod memlock;
mod nics;
use crate::error::{Code, Error, Result};
pub use device_plugin::{CharDevices, DevicePluginConfig, NicEnvConfig, Pool, check_resource_name};
pub use dirs::{RUN_DIR, path_under};
use dirs::{check_own_dir, has_dotdot};
pub use dra::{DeviceMetadataConfig, DraConfig, Rail};
pub use gc::GcConfig;
pub use ipam::{
    Confinement, DEFAULT_IPAM_PATHS, DEFAULT_IPAM_PLUGINS, DEFAULT_IPAM_READ_PATHS,
    DEFAULT_IPAM_SOCKETS, DEFAULT_IPAM_TIMEOUT_SECONDS, MAX_IPAM_OUTPUT,
};
use ipam::{
    default_ipam_paths, default_ipam_plugins, default_ipam_read_paths, default_ipam_sockets,
    default_ipam_timeout,
};
pub use keys::keys_of;
pub use memlock::Memlock;
pub use nics::{NicFacts, NicSelectors};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DEFAULT_PATH: &str = "/etc/rdma-host-device/node.json";
pub const PATH_ENV: &str = "RDMA_HOST_DEVICE_NODE_CONFIG";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/rdma-host-device";
pub const DEFAULT_LOG_DIR: &str = "/var/log/rdma-host-device";
/// Larger than any sane node config; the file is the operator's, but we never read unbounded.
const MAX_LEN: u64 = 1 << 20;

/// The node configuration file's content. Its keys are its fields' names (camelCase), read by
/// derive and written back by derive ([`Node::to_json`]); [`keys_of`] lists them for help.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    /// Where attachments are remembered (and per-attachment locks live).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// The only directory a netconf `logFile` may name a file in.
    #[serde(default = "default_log_dir")]
    pub log_dir: PathBuf,
    /// Only these NICs may be handed to pods (any entry matching is enough).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_nics: Option<NicSelectors>,
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
    /// Fail-closed memlock (`memlockFailClosed`): the CDI spec's hook refuses a container whose
    /// OCI spec does not already give it `memlock` (what the NRI plugin puts there), so that no
    /// container given one of our RDMA devices runs while the NRI plugin is away, whatever the
    /// runtime's NRI does about a plugin that is not there. Off by default: a node without
    /// the NRI plugin relies on the hook alone.
    #[serde(default)]
    pub memlock_fail_closed: bool,
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
    /// The unix sockets each IPAM plugin may connect to (`ipamSockets`, by plugin name;
    /// default: dhcp's daemon at /run/cni/dhcp.sock). A plugin without an entry gets no unix
    /// socket at all (seccomp); one with an entry may connect only to those where the kernel
    /// can say so (Landlock ABI 9, Linux 7.1), to any pathname socket of root's before that.
    #[serde(default = "default_ipam_sockets")]
    pub ipam_sockets: std::collections::BTreeMap<String, Vec<PathBuf>>,
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
    #[serde(
        default,
        rename = "devicePlugin",
        deserialize_with = "raw_json",
        skip_serializing
    )]
    pub device_plugin_json: Option<String>,
    /// What the DRA driver publishes (`rdma-host-device-agent dra`), kept as its JSON text like
    /// `devicePlugin`; parsed by [`Node::dra`].
    #[serde(
        default,
        rename = "dra",
        deserialize_with = "raw_json",
        skip_serializing
    )]
    pub dra_json: Option<String>,
    /// The agent's collection of leaked attachments (`gc`), kept as its JSON text like
    /// `devicePlugin`; parsed by [`Node::gc`].
    #[serde(
        default,
        rename = "gc",
        deserialize_with = "raw_json",
        skip_serializing
    )]
    pub gc_json: Option<String>,
    /// The uppers watcher's socket (`rdma-host-device-agent uppers-watch`), which ADD and the device
    /// plugin ask whether a device of another namespace rides a NIC. Only the cost depends on
    /// it: without an answer from it they look through every namespace themselves.
    #[serde(default = "default_uppers_socket")]
    pub uppers_socket: PathBuf,
    /// Where this came from, for messages (shown by `to_json`, never read from the file).
    #[serde(skip_deserializing)]
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

/// The memlock hook's argument that makes it refuse a container whose OCI spec lacks the
/// limit (`memlockFailClosed`): the agent's CDI spec writes it, the plugin's hook reads it.
pub const FAIL_CLOSED_ARG: &str = "--fail-closed";

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
            memlock_fail_closed: false,
            ipam_plugins: default_ipam_plugins(),
            ipam_paths: default_ipam_paths(),
            ipam_read_paths: default_ipam_read_paths(),
            ipam_sockets: default_ipam_sockets(),
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

/// A node serves an extended resource one way: the scheduler asks the DRA driver for it (a
/// DeviceClass's `extendedResourceName`) only on nodes whose allocatable has none of it, so a
/// device plugin offering the same name on a node meant for DRA would take every such pod, and
/// the DRA half would never be asked. Refused in both halves' configuration, with the fix.
fn one_way(dp: &DevicePluginConfig, d: &DraConfig) -> std::result::Result<(), String> {
    let Some(name) = &d.extended_resource_name else {
        return Ok(());
    };
    match dp.pools.iter().position(|p| &p.resource_name == name) {
        None => Ok(()),
        Some(i) => Err(format!(
            "devicePlugin.pools[{i}] offers {name}, which dra.extendedResourceName says this node serves through DRA; a node serves an extended resource one way only (the scheduler asks DRA for it only where the device plugin offers none). For DRA on this node remove that pool (or devicePlugin); for the device plugin remove dra.extendedResourceName"
        )),
    }
}

impl Node {
    /// The node configuration: the file named by the environment or the default path; the
    /// built-in defaults when the default file does not exist.
    pub fn load() -> Result<Node> {
        let named = std::env::var_os(PATH_ENV).is_some_and(|p| !p.is_empty());
        Self::from_file(&Self::path(), named)
    }

    /// Where [`Node::load`] reads: the file the environment names, else the default path.
    pub fn path() -> PathBuf {
        match std::env::var_os(PATH_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_PATH),
        }
    }

    /// The node configuration in `path`, which must exist.
    pub fn load_from(path: &Path) -> Result<Node> {
        Self::from_file(path, true)
    }

    /// The effective settings, defaults filled in, as the operator would write them.
    pub fn to_json(&self) -> String {
        // Every key by derive: one someone adds is shown without being listed here.
        let mut v = serde_json::to_value(self).unwrap_or_default();
        // Each agent section as its parser read it (defaults filled in), when it parses.
        if let Ok(Some(dp)) = self.device_plugin() {
            v["devicePlugin"] = serde_json::to_value(dp).unwrap_or_default();
        }
        if let Ok(Some(d)) = self.dra() {
            v["dra"] = serde_json::to_value(d).unwrap_or_default();
        }
        if let Ok(Some(g)) = self.gc() {
            v["gc"] = serde_json::to_value(g).unwrap_or_default();
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
        Self::from_json(&body, &path.display().to_string())
    }

    /// The node configuration `body` (what a node.json holds), checked as a file of it is;
    /// `source` names where it came from in errors.
    pub fn from_json(body: &[u8], source: &str) -> Result<Node> {
        let bad = |what: String| {
            Error::new(
                Code::InvalidConfig,
                format!("node configuration {source}: {what}"),
            )
        };
        // serde reads a struct from a JSON array too, field by field (`["/x"]` set stateDir):
        // the file is one object of named keys or nothing.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(bad(
                "the top level must be a JSON object ({\"stateDir\": ...}), not an array or a value"
                    .into(),
            ));
        }
        let mut node: Node = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
        node.source = source.to_owned();
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
        node.check_ipam().map_err(bad)?;
        Ok(node)
    }

    /// The `devicePlugin` section, parsed and checked (also against `dra`: a node serves an
    /// extended resource one way); `None` without one.
    pub fn device_plugin(&self) -> Result<Option<DevicePluginConfig>> {
        let dp = self.device_plugin_alone()?;
        if let (Some(dp), Ok(Some(d))) = (&dp, self.dra_alone()) {
            one_way(dp, &d).map_err(|e| self.invalid(e))?;
        }
        if let Some(dp) = &dp
            && self.memlock_fail_closed
            && !dp.char_devices.cdi
        {
            return Err(self.invalid(
                "memlockFailClosed is set, but devicePlugin.charDevices.cdi is not: the device plugin would hand out char devices without our CDI spec, whose hook is what refuses a container the NRI plugin did not see, so its pods would not fail closed; set devicePlugin.charDevices.cdi to true (and let the installer write the CDI spec), or drop memlockFailClosed".into(),
            ));
        }
        Ok(dp)
    }

    /// The `dra` section, parsed and checked (also against `devicePlugin`, the same way);
    /// `None` without one.
    pub fn dra(&self) -> Result<Option<DraConfig>> {
        let d = self.dra_alone()?;
        if let (Some(d), Ok(Some(dp))) = (&d, self.device_plugin_alone()) {
            one_way(&dp, d).map_err(|e| self.invalid(e))?;
        }
        Ok(d)
    }

    fn invalid(&self, what: String) -> Error {
        Error::new(
            Code::InvalidConfig,
            format!("node configuration {}: {what}", self.source),
        )
    }

    fn device_plugin_alone(&self) -> Result<Option<DevicePluginConfig>> {
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

    fn dra_alone(&self) -> Result<Option<DraConfig>> {
        let Some(text) = &self.dra_json else {
            return Ok(None);
        };
        let bad = |what: String| self.invalid(what);
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
        let bad = |what: String| self.invalid(what);
        let only: Only = serde_json::from_str(text).map_err(|e| bad(format!("dra: {e}")))?;
        if let Some(m) = &only.device_metadata {
            m.check().map_err(bad)?;
        }
        Ok(only.device_metadata)
    }

    /// `devicePlugin.nicEnv` alone, parsed and checked; `None` without it (no per-NIC env):
    /// what ADD and DEL read of `devicePlugin` (the rest is the device plugin's, and not parsed
    /// on every CNI call, nor stopped by a mistake in it).
    pub fn nic_env(&self) -> Result<Option<NicEnvConfig>> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Only {
            #[serde(default)]
            nic_env: Option<NicEnvConfig>,
        }
        let Some(text) = &self.device_plugin_json else {
            return Ok(None);
        };
        let bad = |what: String| self.invalid(what);
        let only: Only =
            serde_json::from_str(text).map_err(|e| bad(format!("devicePlugin: {e}")))?;
        if let Some(e) = &only.nic_env {
            e.check().map_err(bad)?;
        }
        Ok(only.nic_env)
    }

    /// The `gc` section, parsed and checked; `None` without one.
    pub fn gc(&self) -> Result<Option<GcConfig>> {
        let Some(text) = &self.gc_json else {
            return Ok(None);
        };
        let bad = |what: String| self.invalid(what);
        let g: GcConfig = serde_json::from_str(text).map_err(|e| bad(format!("gc: {e}")))?;
        g.check().map_err(bad)?;
        Ok(Some(g))
    }
}

#[cfg(test)]
mod tests;
