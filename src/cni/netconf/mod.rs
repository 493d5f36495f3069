//! `NetConf`: the network configuration on stdin, parsed, validated, and kept raw for IPAM.
//! Strict for ADD, lenient for DEL. Longer than most files because it is the one place every
//! tenant-written key is checked (its bad-input table is in netconf/tests.rs); split it and
//! the checks would drift apart.

use super::result::CniResult;
use super::version::Version;
use rdma_host_device_core::error::{Code, Error, Result, invalid_config};
use rdma_host_device_core::logging::shown;
use rdma_host_device_core::node::Node;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest config we read: configs come from the cluster and are untrusted.
pub const MAX_CONFIG_LEN: usize = 1 << 20;

/// Keys that select the NIC: ADD needs one; DEL works from its record and ignores them.
pub const SELECTOR_KEYS: &[&str] = &[
    "device",
    "hwaddr",
    "kernelpath",
    "pciBusID",
    "deviceID",
    "rdmaDevice",
    "draRequest",
    "draExtendedResource",
    "runtimeConfig",
];

/// Top-level keys we understand besides the selectors; anything else is rejected with code 2
/// so typos surface.
pub const OTHER_KEYS: &[&str] = &[
    "cniVersion",
    "cniVersions",
    "name",
    "type",
    "args",
    "ipam",
    "dns",
    "prevResult",
    "capabilities",
    "cni.dev/valid-attachments",
    // libcni >= 1.2 also sends the list under the spec text's first name (cni#1101).
    "cni.dev/attachments",
    "mtu",
    "rdma",
    "logFile",
    "logLevel",
    "stateDir",
];

fn known(key: &str) -> bool {
    SELECTOR_KEYS.contains(&key) || OTHER_KEYS.contains(&key)
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfig {
    #[serde(rename = "deviceID")]
    pub device_id: Option<String>,
    /// Where Multus wants the device-info file (the `CNIDeviceInfoFile` capability).
    #[serde(rename = "CNIDeviceInfoFile")]
    pub device_info_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Move the RDMA device when the kernel is in exclusive mode; leave it shared otherwise.
    #[default]
    Auto,
    /// Require exclusive mode.
    Exclusive,
    /// Do not touch RDMA at all.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SoftDevice {
    Rxe,
    Siw,
}

impl SoftDevice {
    /// The kernel's link type, as in `rdma link add NAME type rxe netdev IF`.
    pub fn name(self) -> &'static str {
        match self {
            SoftDevice::Rxe => "rxe",
            SoftDevice::Siw => "siw",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RdmaConf {
    #[serde(default)]
    pub isolation: Isolation,
    #[serde(default = "default_gid_timeout")]
    pub gid_timeout_ms: u64,
    pub soft_device: Option<SoftDevice>,
}

fn default_gid_timeout() -> u64 {
    5000
}

impl Default for RdmaConf {
    fn default() -> Self {
        RdmaConf {
            isolation: Isolation::Auto,
            gid_timeout_ms: default_gid_timeout(),
            soft_device: None,
        }
    }
}

/// How the config names the host NIC it asks for (its one selector key: `device`, `hwaddr`,
/// ...). Exactly one must be given. What the node lets it have is its policy, core's
/// `Node::admit` (its `allowedNics` a `node::NicSelectors`), judged on the NIC found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NicRequest {
    Name(String),
    Mac(String),
    KernelPath(String),
    Pci(String),
    /// `deviceID` from Multus or the `deviceID` capability: a PCI or auxiliary-bus device, or
    /// the interface name a device plugin gives a virtual link (`select::resolve`).
    DeviceId(String),
    RdmaDevice(String),
}

impl std::fmt::Display for NicRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NicRequest::Name(v) => write!(f, "device {}", shown(v)),
            NicRequest::Mac(v) => write!(f, "hwaddr {}", shown(v)),
            NicRequest::KernelPath(v) => write!(f, "kernelpath {}", shown(v)),
            NicRequest::Pci(v) => write!(f, "pciBusID {}", shown(v)),
            NicRequest::DeviceId(v) => write!(f, "deviceID {}", shown(v)),
            NicRequest::RdmaDevice(v) => write!(f, "rdmaDevice {}", shown(v)),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GivenConf {
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(rename = "type")]
    plugin_type: Option<String>,
    ipam: Option<Value>,
    dns: Option<super::result::Dns>,
    prev_result: Option<Value>,
    #[serde(default)]
    runtime_config: RuntimeConfig,
    device: Option<String>,
    hwaddr: Option<String>,
    kernelpath: Option<String>,
    #[serde(rename = "pciBusID")]
    pci_bus_id: Option<String>,
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    rdma_device: Option<String>,
    dra_request: Option<String>,
    dra_extended_resource: Option<String>,
    mtu: Option<u32>,
    rdma: Option<RdmaConf>,
    log_file: Option<PathBuf>,
    log_level: Option<String>,
    state_dir: Option<PathBuf>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<ValidAttachment>>,
    #[serde(rename = "cni.dev/attachments")]
    legacy_attachments: Option<Vec<ValidAttachment>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// The validated network configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: Version,
    pub name: String,
    pub ipam_type: Option<String>,
    pub dns: Option<super::result::Dns>,
    pub prev_result: Option<CniResult>,
    pub nic: Option<NicRequest>,
    /// `draRequest`: the NIC our DRA driver prepared for this pod under that request of its
    /// claim (`flows::plan::dra_nic`); exclusive with the selectors above.
    pub dra_request: Option<String>,
    /// `draExtendedResource`: when no `deviceID` came (a device plugin's, through Multus'
    /// `resourceName`), the next NIC not yet attached of this pod's extended-resource claim,
    /// the claim the scheduler made for the pod's `resources.limits` of this name on a node
    /// that serves it through DRA (`flows::plan::dra_extended_nic`). `deviceID` wins.
    pub dra_extended_resource: Option<String>,
    pub mtu: Option<u32>,
    pub rdma: RdmaConf,
    /// The log file inside the node's log directory, when the config names one.
    pub log_file: Option<PathBuf>,
    pub log_level: Option<log::LevelFilter>,
    pub valid_attachments: Option<Vec<ValidAttachment>>,
    /// The device-info file to write, a file in the node's `deviceInfoDir`.
    pub device_info_file: Option<PathBuf>,
    /// Exactly what the runtime sent; IPAM plugins get the same bytes.
    pub raw: Vec<u8>,
}

/// What the config's `cniVersion` says, read before anything else can fail, so that even an
/// error about the rest of the config is printed in the version the runtime asked for.
pub fn peek_version(raw: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    v.get("cniVersion")?.as_str().map(str::to_owned)
}

impl NetConf {
    /// Parse strictly (ADD, CHECK, STATUS, GC) with the built-in node defaults.
    #[cfg(test)]
    pub(crate) fn parse(raw: Vec<u8>) -> Result<Self> {
        Self::parse_strict(raw, &Node::default())
    }

    /// Parse strictly: every key known, every value valid. What ADD and the other verbs use.
    pub fn parse_strict(raw: Vec<u8>, node: &Node) -> Result<Self> {
        let obj = Self::object(&raw)?;
        if let Some(k) = obj.keys().find(|k| !known(k)) {
            return Err(Error::new(
                Code::UnsupportedField,
                format!(
                    "unsupported field {} = {} in network configuration; known fields: {}",
                    shown(k),
                    shown(obj[k].to_string()),
                    [SELECTOR_KEYS, OTHER_KEYS].concat().join(", ")
                ),
            ));
        }
        Self::from_object(obj, raw, node)
    }

    /// Parse for DEL, which must undo an attachment even when its config was edited since ADD
    /// (a typo key, a value now invalid, another selector or stateDir): unknown keys and
    /// invalid values are dropped (and returned, to be logged), selectors are not needed (DEL
    /// works from the state record). Only a config that is not a JSON object is refused.
    pub fn parse_lenient(raw: Vec<u8>, node: &Node) -> Result<(Self, Vec<String>)> {
        let mut obj = Self::object(&raw)?;
        let mut ignored = Vec::new();
        obj.retain(|k, v| {
            let known = known(k);
            if !known {
                ignored.push(format!(
                    "unknown field {} = {}",
                    shown(k),
                    shown(v.to_string())
                ));
            }
            known && !SELECTOR_KEYS.contains(&k.as_str())
        });
        // Each value on its own, beside a valid version and name.
        let probe_base = |k: &str, v: &Value| {
            let mut p = serde_json::Map::new();
            p.insert("cniVersion".into(), Value::from(Version::LATEST.as_str()));
            p.insert("name".into(), Value::from("lenient"));
            p.insert(k.to_owned(), v.clone());
            Self::from_object(p, Vec::new(), node).err()
        };
        let keys: Vec<String> = obj.keys().cloned().collect();
        for k in keys {
            if let Some(e) = probe_base(&k, &obj[&k]) {
                ignored.push(format!("{k}: {}", e.msg));
                obj.remove(&k);
            }
        }
        if !obj.contains_key("cniVersion") {
            obj.insert("cniVersion".into(), Value::from(Version::LATEST.as_str()));
        }
        if !obj.contains_key("name") {
            obj.insert("name".into(), Value::from("unnamed"));
        }
        let conf = Self::from_object(obj, raw, node)?;
        Ok((conf, ignored))
    }

    /// The config as a JSON object, within the size limit.
    fn object(raw: &[u8]) -> Result<serde_json::Map<String, Value>> {
        if raw.len() > MAX_CONFIG_LEN {
            return Err(invalid_config(format!(
                "network configuration is {} bytes; the limit is {MAX_CONFIG_LEN}",
                raw.len()
            )));
        }
        let value: Value = serde_json::from_slice(raw).map_err(|e| {
            Error::new(
                Code::Decode,
                format!("network configuration on stdin is not valid JSON: {e}"),
            )
        })?;
        match value {
            Value::Object(o) => Ok(o),
            _ => Err(Error::new(
                Code::Decode,
                "network configuration must be a JSON object",
            )),
        }
    }

    fn from_object(obj: serde_json::Map<String, Value>, raw: Vec<u8>, node: &Node) -> Result<Self> {
        let given: GivenConf = serde_json::from_value(Value::Object(obj))
            .map_err(|e| invalid_config(format!("network configuration: {e}")))?;
        Self::validate(given, raw, node)
    }

    fn validate(given: GivenConf, raw: Vec<u8>, node: &Node) -> Result<Self> {
        let cni_version = Version::parse(given.cni_version.as_deref().unwrap_or(""))?;
        let name = given
            .name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| invalid_config("\"name\" is required"))?;
        validate_network_name(&name)?;
        if let Some(t) = &given.plugin_type
            && t.contains('/')
        {
            return Err(invalid_config(format!(
                "\"type\" {} must be a file name",
                shown(t)
            )));
        }
        let ipam_type = match &given.ipam {
            None => None,
            Some(v) => match v.get("type").and_then(Value::as_str) {
                Some(t) if !t.is_empty() && !t.contains('/') && t != "." && t != ".." => {
                    Some(t.to_owned())
                }
                Some(t) => {
                    return Err(invalid_config(format!(
                        "ipam.type {} must be a plugin file name",
                        shown(t)
                    )));
                }
                None if v.as_object().is_some_and(|o| o.is_empty()) => None,
                None => return Err(invalid_config("\"ipam\" needs a \"type\"")),
            },
        };
        if let Some(mtu) = given.mtu
            && !(68..=65535).contains(&mtu)
        {
            return Err(invalid_config(format!(
                "mtu {mtu} is out of range; Linux accepts 68 to 65535"
            )));
        }
        let rdma = given.rdma.unwrap_or_default();
        if rdma.gid_timeout_ms > 600_000 {
            return Err(invalid_config(format!(
                "rdma.gidTimeoutMs {} is too long; at most 600000 (10 minutes)",
                rdma.gid_timeout_ms
            )));
        }
        let log_level = match given.log_level.as_deref() {
            None => None,
            Some(l) => Some(l.parse::<log::LevelFilter>().map_err(|_| {
                invalid_config(format!(
                    "logLevel {} is not one of error, warn, info, debug, trace, off",
                    shown(l)
                ))
            })?),
        };
        // The state directory is the node's: a config may only repeat it (older configs did).
        if let Some(d) = &given.state_dir
            && d != &node.state_dir
        {
            return Err(invalid_config(format!(
                "stateDir {} is a node setting: the node keeps its state in {} ({}); remove stateDir from the network configuration",
                d.display(),
                node.state_dir.display(),
                node.source
            )));
        }
        let log_file = match &given.log_file {
            None => None,
            Some(f) => Some(node.log_dir.join(log_file_name(f, &node.log_dir)?)),
        };
        let prev_result = match given.prev_result {
            None => None,
            Some(v) => Some(
                CniResult::from_value(v)
                    .map_err(|e| e.context("prevResult in network configuration"))?,
            ),
        };
        let device_info_file = match &given.runtime_config.device_info_file {
            None => None,
            Some(f) => Some(rdma_host_device_core::device_info::confine(
                f,
                &node.device_info_dir,
            )?),
        };
        let nic = nic_request(
            given.device,
            given.hwaddr,
            given.kernelpath,
            given.pci_bus_id,
            given.device_id,
            given.runtime_config.device_id,
            given.rdma_device,
        )?;
        if let Some(r) = &given.dra_request {
            validate_request_name(r)?;
            if let Some(sel) = &nic {
                return Err(Error::new(
                    Code::DeviceAmbiguous,
                    format!(
                        "draRequest {} and {sel} both select a NIC; give one",
                        shown(r)
                    ),
                ));
            }
        }
        if let Some(r) = &given.dra_extended_resource {
            validate_extended_resource_name(r)?;
            if let Some(q) = &given.dra_request {
                return Err(Error::new(
                    Code::DeviceAmbiguous,
                    format!(
                        "draExtendedResource {} and draRequest {} both select a NIC from a claim; give one",
                        shown(r),
                        shown(q)
                    ),
                ));
            }
            // Only a deviceID (what Multus passes from a device plugin) may come beside it, and
            // wins; a selector the NAD fixes itself would always win, leaving it dead.
            if let Some(sel) = nic
                .as_ref()
                .filter(|s| !matches!(s, NicRequest::DeviceId(_)))
            {
                return Err(Error::new(
                    Code::DeviceAmbiguous,
                    format!(
                        "draExtendedResource {} and {sel} both select a NIC; {sel} would always win: give one (only a deviceID, which Multus passes from a device plugin, may come beside it)",
                        shown(r)
                    ),
                ));
            }
        }
        Ok(NetConf {
            cni_version,
            name,
            ipam_type,
            dns: given.dns,
            prev_result,
            nic,
            dra_request: given.dra_request,
            dra_extended_resource: given.dra_extended_resource,
            mtu: given.mtu,
            rdma,
            log_file,
            log_level,
            valid_attachments: given.valid_attachments.or(given.legacy_attachments),
            device_info_file,
            raw,
        })
    }

    /// The selector, required for the verbs that act on a NIC.
    pub fn require_nic(&self) -> Result<&NicRequest> {
        self.nic.as_ref().ok_or_else(|| {
            invalid_config(
                "no device selected: set one of \"device\", \"hwaddr\", \"kernelpath\", \"pciBusID\", \"rdmaDevice\", \"deviceID\" (top level or runtimeConfig), \"draRequest\" or \"draExtendedResource\"",
            )
        })
    }
}

/// `logFile`: a plain file name, placed in the node's log directory. An absolute path is
/// accepted only when it already names a file directly in that directory.
fn log_file_name(f: &Path, log_dir: &Path) -> Result<String> {
    let name = if f.is_absolute() {
        match (f.parent(), f.file_name()) {
            (Some(parent), Some(name)) if parent == log_dir => name,
            _ => {
                return Err(invalid_config(format!(
                    "logFile {} is outside the node's log directory {}; give a file name, it is placed there",
                    f.display(),
                    log_dir.display()
                )));
            }
        }
    } else {
        f.as_os_str()
    };
    let name = name.to_string_lossy();
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(name.into_owned())
    } else {
        Err(invalid_config(format!(
            "logFile {} must be a file name of letters, digits, '.', '_' and '-' (not starting with '.'); it is placed in the node's log directory {}",
            shown(f.as_os_str().as_encoded_bytes()),
            log_dir.display()
        )))
    }
}

/// The spec's network name rule, which also keeps the name safe in file names.
fn validate_network_name(name: &str) -> Result<()> {
    if name.len() <= 253 && rdma_host_device_core::names::is_spec_name(name) {
        Ok(())
    } else {
        Err(invalid_config(format!(
            "name {} must start with a letter or digit and hold only letters, digits, '_', '.', '-'",
            shown(name)
        )))
    }
}

fn nic_request(
    device: Option<String>,
    hwaddr: Option<String>,
    kernelpath: Option<String>,
    pci: Option<String>,
    device_id: Option<String>,
    rc_device_id: Option<String>,
    rdma_device: Option<String>,
) -> Result<Option<NicRequest>> {
    // Multus may put the same deviceID at top level and in runtimeConfig: that is one selector.
    let device_id = match (device_id, rc_device_id) {
        (Some(a), Some(b)) if a != b => {
            return Err(Error::new(
                Code::DeviceAmbiguous,
                format!(
                    "deviceID {} and runtimeConfig.deviceID {} disagree; give one",
                    shown(a),
                    shown(b)
                ),
            ));
        }
        (a, b) => a.or(b),
    };
    // Multus (LoadDelegateNetConf) injects a device plugin's device as BOTH deviceID and
    // pciBusID, with the same value: that is one selector as well.
    let pci = match (pci, &device_id) {
        (Some(p), Some(d)) if p == *d => None,
        (p, _) => p,
    };
    let mut found = Vec::new();
    if let Some(v) = device {
        rdma_host_device_core::names::validate_ifname(&v)
            .map_err(|m| invalid_config(format!("device: {m}")))?;
        found.push(NicRequest::Name(v));
    }
    if let Some(v) = hwaddr {
        found.push(NicRequest::Mac(normalised_hwaddr(&v)?));
    }
    if let Some(v) = kernelpath {
        if !v.starts_with("/sys/devices/") || v.contains("/../") || v.ends_with("/..") {
            return Err(invalid_config(format!(
                "kernelpath {} must be an absolute path under /sys/devices/",
                shown(&v)
            )));
        }
        found.push(NicRequest::KernelPath(v));
    }
    if let Some(v) = pci {
        validate_bus_id("pciBusID", &v)?;
        found.push(NicRequest::Pci(v));
    }
    if let Some(v) = device_id {
        validate_bus_id("deviceID", &v)?;
        found.push(NicRequest::DeviceId(v));
    }
    if let Some(v) = rdma_device {
        if v.is_empty() || v.len() > 64 || v.contains('/') || v.starts_with('.') {
            return Err(invalid_config(format!(
                "rdmaDevice {} is not an RDMA device name",
                shown(&v)
            )));
        }
        found.push(NicRequest::RdmaDevice(v));
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Error::new(
            Code::DeviceAmbiguous,
            format!(
                "several device selectors given ({}); give exactly one",
                found
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// `draRequest`: a request name of a ResourceClaim (a DNS label), or a subrequest of one
/// (`request/subrequest`).
fn validate_request_name(v: &str) -> Result<()> {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let parts: Vec<&str> = v.split('/').collect();
    if parts.len() <= 2 && parts.iter().all(|p| label(p)) {
        Ok(())
    } else {
        Err(invalid_config(format!(
            "draRequest {} is not a request name of a ResourceClaim (a DNS label, or request/subrequest)",
            shown(v)
        )))
    }
}

/// `draExtendedResource`: an extended resource's name as a DeviceClass's
/// `extendedResourceName` gives it (`vendor-domain/name`, the rule the device plugin's pools
/// follow), or the name every class answers to, `deviceclass.resource.kubernetes.io/<class>`.
fn validate_extended_resource_name(v: &str) -> Result<()> {
    let implicit = v
        .strip_prefix("deviceclass.resource.kubernetes.io/")
        .is_some_and(|class| {
            !class.is_empty()
                && class.len() <= 253
                && class.split('.').all(|l| {
                    !l.is_empty()
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                        && l.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                })
        });
    if implicit {
        return Ok(());
    }
    rdma_host_device_core::node::check_resource_name(v).map_err(|e| {
        invalid_config(format!(
            "draExtendedResource {}",
            e.strip_prefix("resourceName ").unwrap_or(&e)
        ))
    })
}

/// A PCI (`0000:3b:00.1`) or auxiliary-bus (`mlx5_core.sf.4`) device name, or (`deviceID`
/// of a virtual link) an interface name: one sysfs path component.
fn validate_bus_id(field: &str, v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.len() <= 64
        && v != "."
        && v != ".."
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        let or_name = if field == "deviceID" {
            ", auxiliary device or interface name"
        } else {
            " or auxiliary device name"
        };
        Err(invalid_config(format!(
            "{field} {} is not a PCI address (like 0000:3b:00.1){or_name}",
            shown(v)
        )))
    }
}

/// `hwaddr` in lower-case colon form, the form links report.
fn normalised_hwaddr(v: &str) -> Result<String> {
    rdma_host_device_core::link::parse_mac(v)
        .map(|m| rdma_host_device_core::link::format_mac(&m))
        .ok_or_else(|| {
            invalid_config(format!(
                "hwaddr {} is not a MAC address like 0a:58:0a:00:00:01",
                shown(v)
            ))
        })
}

#[cfg(test)]
mod tests;
