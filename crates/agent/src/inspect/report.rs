//! The inspect report: what `gather` finds and `render` prints (or `--json` serialises).

use rdma_host_device_core::state::Record;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

// ---------------------------------------------------------------- the report

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub node: String,
    pub plugin_version: &'static str,
    pub rdma: RdmaSummary,
    pub nics: Vec<NicRow>,
    /// RDMA devices visible here that pair with no listed NIC (IB-only ports, NICs in pods).
    pub unpaired_rdma_devices: Vec<RdmaRow>,
    pub state_dir: PathBuf,
    /// Why the attachments could not be read, if they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_error: Option<String>,
    /// Links left out of the table (virtual ones without RDMA, unless `--all`).
    pub hidden_links: usize,
    /// What reading the counters failed at, by stage (as the exporter's scrape_errors_total).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counter_errors: BTreeMap<&'static str, u64>,
    /// The container runtimes running here and the memlock limit their containers inherit.
    pub runtimes: Vec<RuntimeMemlock>,
    /// Whether this kernel lets the plugin confine the IPAM plugins it runs (src/confine/).
    pub ipam_confinement: IpamConfinement,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IpamConfinement {
    /// The kernel's Landlock ABI version; None: no Landlock.
    pub landlock_abi: Option<u32>,
    /// The node's `ipamConfinement` ("required" or "bestEffort").
    pub policy: rdma_host_device_core::node::Confinement,
    pub timeout_seconds: u64,
    /// Set when IPAM plugins run unconfined or not at all here: what that means.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl IpamConfinement {
    /// What this kernel and `node` make of IPAM execs.
    pub fn of(node: &rdma_host_device_core::node::Node) -> Self {
        Self::with(rdma_host_device::confine::landlock_abi(), node)
    }

    /// What a kernel with Landlock ABI `landlock_abi` and `node` make of IPAM execs.
    pub fn with(landlock_abi: Option<u32>, node: &rdma_host_device_core::node::Node) -> Self {
        let warning = match (landlock_abi, node.ipam_confinement) {
            (Some(_), _) => None,
            (None, rdma_host_device_core::node::Confinement::Required) => Some(
                "this kernel has no Landlock: every network with an `ipam` is refused (105); enable Landlock (lsm=...,landlock) or set ipamConfinement: bestEffort".into(),
            ),
            (None, rdma_host_device_core::node::Confinement::BestEffort) => Some(
                "this kernel has no Landlock: IPAM plugins run unconfined (ipamConfinement: bestEffort) and may write anywhere root can".into(),
            ),
        };
        IpamConfinement {
            landlock_abi,
            policy: node.ipam_confinement,
            timeout_seconds: node.ipam_timeout_seconds,
            warning,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeMemlock {
    /// `containerd`, `crio` or `dockerd`.
    pub runtime: String,
    pub pid: u32,
    /// Its soft RLIMIT_MEMLOCK in bytes (u64::MAX: unlimited).
    pub memlock_bytes: u64,
    /// The NRI socket looked for (as the runtime sees its file system).
    pub nri_socket: String,
    /// Whether that socket is there (NRI on).
    pub nri: bool,
    /// containerd only: whether its NRI default validator is on, which makes the pods
    /// conf/k8s/fail-closed.yaml marks wait for our NRI plugin (`None`: not containerd, or its
    /// configuration is not readable here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nri_validator: Option<bool>,
    /// Which path gives containers with an RDMA device the node's memlock.
    pub memlock_path: MemlockPath,
    /// What to do when what its containers' processes get is too small for RDMA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
}

/// Which path gives a container with an RDMA device the node's `memlock` (crates/agent/src/inspect/runtime.rs).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum MemlockPath {
    /// The NRI plugin: in the container's spec, every process, exec included.
    Nri,
    /// The CDI spec's createRuntime hook: the container's first process only.
    CdiHookOnly,
    /// Nothing: every process inherits the runtime's own limit.
    Neither,
    /// This process cannot see the runtime's files (no ptrace rights over it).
    Unknown,
}

impl MemlockPath {
    /// As a person reads it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            MemlockPath::Nri => {
                "NRI (the nri container sets it in the spec: every process, kubectl exec included)"
            }
            MemlockPath::CdiHookOnly => {
                "CDI hook only (a container's first process, not exec'd ones)"
            }
            MemlockPath::Neither => "neither NRI nor CDI (containers inherit the runtime's limit)",
            MemlockPath::Unknown => "unknown (the runtime's files are not visible to this process)",
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RdmaSummary {
    pub available: bool,
    /// "shared" or "exclusive"; None when RDMA is unavailable or the query failed.
    pub netns_mode: Option<&'static str>,
    /// How GID tables are read: "libibverbs" or "sysfs" (libibverbs.so.1 not loadable).
    pub gid_source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the mode (or the lack of RDMA) means for networks using this plugin.
    pub guidance: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NicRow {
    pub name: String,
    /// None for a NIC that is in a pod (known from the state dir only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ifindex: Option<u32>,
    pub mac: String,
    pub driver: Option<String>,
    pub pci: Option<String>,
    /// "host" or "pod".
    pub location: &'static str,
    /// The kernel's operstate ("up", "down", "lowerlayerdown", ...); None in a pod.
    pub oper_state: Option<String>,
    /// Admin state; for a NIC in a pod, as the pod sees it (None if its netns is gone).
    pub admin_up: Option<bool>,
    pub mtu: Option<u32>,
    pub rdma: Option<RdmaRow>,
    pub attachment: Option<Attachment>,
    /// Traffic counters (`counters.rs`): a pod's interface and its RDMA device, or a host
    /// NIC's RDMA device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    /// Anything the operator should know about this NIC.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RdmaRow {
    pub device: String,
    pub driver: Option<String>,
    /// "roce", "iw", "ib", ...
    pub protocol: Option<String>,
    pub port: Option<u32>,
    /// "ACTIVE", "DOWN", ...
    pub port_state: Option<String>,
    /// How the pairing was found (for unpaired devices: None).
    pub paired_by: Option<&'static str>,
    pub gids: Option<GidSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GidSummary {
    /// Valid GIDs on the port (all ports when the port is unknown).
    pub total: usize,
    pub roce_v2: usize,
    pub roce_v1: usize,
    /// RoCE v2 GIDs derived from IPv4 addresses (::ffff:a.b.c.d): what NCCL/UCX pick by default.
    pub roce_v2_ipv4: usize,
    /// "verbs" or "sysfs".
    pub source: &'static str,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    pub network: String,
    pub rdma_moved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_device: Option<String>,
}

impl From<&Record> for Attachment {
    fn from(r: &Record) -> Self {
        Attachment {
            container_id: r.container_id.clone(),
            ifname: r.ifname.clone(),
            netns: r.netns.clone(),
            network: r.network.clone(),
            rdma_moved: r.rdma_moved,
            soft_device: r.soft_device.clone(),
        }
    }
}

/// What the metrics exporter reads for one attachment (or one RDMA device on the host), taken
/// from one scrape of its collector.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    /// The pod interface's (IFLA_STATS64); None for a NIC on the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<Netdev<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
    /// QPs the RDMA device holds now (RDMA netlink resource tracking).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qps: Option<u64>,
    /// The driver's hardware counters (RDMA netlink statistics) by port, then name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hw_counters: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Per-second rates between two samples (`--watch`); the totals above are the second's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rates: Option<Rates>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Netdev<T> {
    pub rx_bytes: T,
    pub rx_packets: T,
    pub tx_bytes: T,
    pub tx_packets: T,
}

/// Per second, over `interval_seconds`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rates {
    pub interval_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<Netdev<f64>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hw_counters: BTreeMap<u32, BTreeMap<String, f64>>,
}
