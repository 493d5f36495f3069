//! GID table queries through libibverbs (dlopened on first use, `ibv.rs`), with a sysfs fallback.
//!
//! Everything here answers for the network namespace of the CALLING THREAD: the flow setns()es a
//! thread into the pod's netns and calls [`query_device`] / [`wait_for_gids`] on it.
//!
//! - Verbs path ([`query_device_verbs`]): libibverbs enumerates devices through an RDMA netlink
//!   socket opened on the calling thread and reads ports and GIDs by ioctl, so it follows the
//!   thread's netns without any remount. Enumeration and open happen on the same thread (a device
//!   listed in one netns and opened from another fails with EPERM, reported as ENOENT).
//! - Sysfs path ([`query_device_sysfs`]): the process's /sys shows the netns of whoever mounted
//!   it, so a helper thread joins the caller's netns, unshares its mount namespace and mounts a
//!   fresh sysfs there; in exclusive RDMA netns mode only that mount shows the pod's devices, and
//!   only it resolves the pod's netdev names to ifindexes. The parser itself
//!   ([`query_device_sysfs_at`]) takes a root directory so it can be tested on a fake tree.

mod ibv;
pub mod sysfs;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

pub use ibv::{query_device_verbs, verbs_available};
pub use sysfs::{query_device_sysfs, query_device_sysfs_at, with_own_sysfs};

/// What the kernel says a GID is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    Ib,
    RoceV1,
    RoceV2,
    /// A value this code does not know: the verbs enum value, or [`GidType::SYSFS_UNKNOWN`] for a
    /// sysfs type string it does not recognise.
    Other(u32),
}

impl GidType {
    /// `Other` value used for a sysfs `gid_attrs/types/I` string that is not recognised.
    pub(crate) const SYSFS_UNKNOWN: u32 = u32::MAX;

    /// From `ibv_gid_entry.gid_type` (`enum ibv_gid_type`: 0 IB, 1 RoCE v1, 2 RoCE v2).
    pub(crate) fn from_verbs(value: u32) -> Self {
        match value {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            2 => GidType::RoceV2,
            other => GidType::Other(other),
        }
    }

    /// From a sysfs `gid_attrs/types/I` string. The kernel writes "IB/RoCE v1" for both IB and
    /// RoCE v1 GIDs; the port's link layer tells them apart (as libibverbs does).
    pub(crate) fn from_sysfs(text: &str, link_layer: LinkLayer) -> Self {
        match text.trim() {
            "IB/RoCE v1" | "RoCE v1" if link_layer == LinkLayer::Ethernet => GidType::RoceV1,
            "IB/RoCE v1" | "IB" => GidType::Ib,
            "RoCE v1" => GidType::RoceV1,
            "RoCE v2" => GidType::RoceV2,
            _ => GidType::Other(Self::SYSFS_UNKNOWN),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::Ib => f.write_str("IB"),
            GidType::RoceV1 => f.write_str("RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Other(v) => write!(f, "unknown GID type {v}"),
        }
    }
}

/// One valid (non-zero) GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    pub port: u32,
    pub index: u32,
    pub gid: Ipv6Addr,
    pub gid_type: GidType,
    /// The netdev the GID belongs to, as an ifindex in the netdev's own netns (the caller's, for
    /// a netdev moved into the pod). None for IB GIDs and when the kernel reports none.
    pub ndev_ifindex: Option<u32>,
}

/// `enum ibv_port_state` / the number in sysfs `ports/N/state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Other(u32),
}

impl PortState {
    pub fn from_raw(value: u32) -> Self {
        match value {
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            other => PortState::Other(other),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            PortState::Other(v) => write!(f, "state {v}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    Ethernet,
    InfiniBand,
    Unspecified,
}

impl LinkLayer {
    /// From `ibv_port_attr.link_layer` (0 unspecified, 1 InfiniBand, 2 Ethernet).
    pub(crate) fn from_verbs(value: u8) -> Self {
        match value {
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }

    /// From sysfs `ports/N/link_layer`.
    pub(crate) fn from_sysfs(text: &str) -> Self {
        match text.trim() {
            "Ethernet" => LinkLayer::Ethernet,
            "InfiniBand" => LinkLayer::InfiniBand,
            _ => LinkLayer::Unspecified,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub port: u32,
    pub state: PortState,
    pub link_layer: LinkLayer,
}

/// The device's transport, from its node type: CA/switch/router are IB (RoCE included), RNIC is
/// iWARP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Ib,
    Iwarp,
    Other,
}

impl Transport {
    /// From `enum ibv_node_type` (also the number in sysfs `node_type`, e.g. "4: RNIC").
    pub(crate) fn from_node_type(node_type: i64) -> Self {
        match node_type {
            1..=3 => Transport::Ib,
            4 => Transport::Iwarp,
            _ => Transport::Other,
        }
    }
}

/// Where a [`DeviceReport`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Verbs,
    Sysfs,
}

/// What [`wait_for_gids`] established about the device (plain queries say `NotChecked`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verification {
    /// A plain query: nothing was checked.
    NotChecked,
    /// Every requested address has a RoCE v2 GID.
    RoceV2Gids,
    /// The device has no per-IP GIDs (iWARP: one MAC-derived GID; native InfiniBand: GIDs are
    /// not derived from IPs), so only "a port is ACTIVE" was checked.
    PortActiveOnly,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    pub device: String,
    pub transport: Transport,
    pub ports: Vec<PortInfo>,
    /// Valid (non-zero) GIDs, sorted by port then index.
    pub gids: Vec<GidEntry>,
    pub source: Source,
    pub verified: Verification,
}

impl DeviceReport {
    /// Whether the device's GID table carries a GID per IP address (RoCE). False for iWARP and
    /// for native InfiniBand ports, where only the port state can be verified.
    pub fn has_per_ip_gids(&self) -> bool {
        self.transport == Transport::Ib
            && !self.ports.is_empty()
            && self
                .ports
                .iter()
                .all(|p| p.link_layer == LinkLayer::Ethernet)
    }

    /// The first ACTIVE port, if any.
    pub fn active_port(&self) -> Option<&PortInfo> {
        self.ports.iter().find(|p| p.state == PortState::Active)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error(
        "libibverbs.so.1 could not be loaded: install rdma-core's libibverbs1 and ibverbs-providers \
         on the node (apt install ibverbs-providers / dnf install libibverbs)"
    )]
    NoLibrary,

    #[error(
        "RDMA device {device} is not visible in this network namespace: check `rdma dev` and \
         `rdma system` here; in exclusive RDMA netns mode the device must first be moved into \
         this namespace, and libibverbs only lists devices whose driver has a provider \
         (ibverbs-providers) while the ib_uverbs module is loaded"
    )]
    DeviceNotVisible { device: String },

    #[error(
        "port {port} of RDMA device {device} is {state}, not ACTIVE: check that its netdev is up \
         with carrier (`ip link`, `rdma link show`), and the cable/switch port"
    )]
    PortNotActive {
        device: String,
        port: u32,
        state: PortState,
    },

    #[error(
        "RDMA device {device} has no RoCE v2 GID for {} after {waited_ms} ms: the addresses must be \
         on the netdev paired with {device} (`rdma link show`) and that netdev must be up; inspect \
         the table with `ibv_devinfo -v -d {device}` inside the pod netns; on a slow node raise \
         rdma.gidTimeoutMs",
        join_addrs(.missing)
    )]
    GidTimeout {
        device: String,
        missing: Vec<IpAddr>,
        waited_ms: u64,
    },

    #[error("{op} failed: {} (errno {errno}){}", std::io::Error::from_raw_os_error(*.errno), sys_hint(.op, *.errno))]
    Sys { op: &'static str, errno: i32 },

    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

impl VerbsError {
    pub(crate) fn sys(op: &'static str, errno: i32) -> Self {
        VerbsError::Sys { op, errno }
    }

    /// A nix call failed.
    pub(crate) fn nix(op: &'static str, e: nix::Error) -> Self {
        VerbsError::Sys {
            op,
            errno: e as i32,
        }
    }
}

fn join_addrs(addrs: &[IpAddr]) -> String {
    addrs
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn sys_hint(op: &str, errno: i32) -> &'static str {
    match (op, errno) {
        ("ibv_get_device_list", libc::ENOSYS) => {
            ": the kernel has no RDMA user-space access; load it with `modprobe ib_uverbs`"
        }
        ("ibv_open_device", libc::ENOENT | libc::EPERM) => {
            ": the device was listed in one network namespace and opened from another \
             (libibverbs reports the kernel's EPERM as ENOENT)"
        }
        (_, libc::EPERM | libc::EACCES) => {
            ": the plugin must run as root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
        }
        (_, libc::EOPNOTSUPP) => {
            ": the installed libibverbs or the kernel lacks this call; update rdma-core"
        }
        _ => "",
    }
}

/// The addresses in `addrs` that have no RoCE v2 GID in `report`: IPv4 a.b.c.d needs
/// `::ffff:a.b.c.d`, IPv6 needs itself. Duplicates are reported once.
pub fn missing_roce_v2(report: &DeviceReport, addrs: &[IpAddr]) -> Vec<IpAddr> {
    let mut missing: Vec<IpAddr> = Vec::new();
    for addr in addrs {
        let want = match addr {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => *v6,
        };
        let found = report
            .gids
            .iter()
            .any(|g| g.gid_type == GidType::RoceV2 && g.gid == want);
        if !found && !missing.contains(addr) {
            missing.push(*addr);
        }
    }
    missing
}

/// Query `dev_name` as seen from the calling thread's netns: through verbs when libibverbs is
/// loaded, else (or when verbs cannot see or read the device) through a fresh sysfs mount.
pub fn query_device(dev_name: &str) -> Result<DeviceReport, VerbsError> {
    if !verbs_available() {
        log::debug!("libibverbs not loaded; reading the GID table of {dev_name} from sysfs");
        return query_device_sysfs(dev_name);
    }
    match query_device_verbs(dev_name) {
        Ok(report) => Ok(report),
        Err(verbs_err) if falls_back(&verbs_err) => match query_device_sysfs(dev_name) {
            Ok(report) => {
                log::warn!(
                    "verbs could not read {dev_name} ({verbs_err}); used sysfs instead: \
                     check that ib_uverbs is loaded and ibverbs-providers has its driver"
                );
                Ok(report)
            }
            Err(sysfs_err @ VerbsError::DeviceNotVisible { .. }) => Err(sysfs_err),
            Err(sysfs_err) => {
                log::debug!("sysfs fallback for {dev_name} failed too: {sysfs_err}");
                Err(verbs_err)
            }
        },
        Err(e) => Err(e),
    }
}

/// Verbs errors after which sysfs may still answer.
fn falls_back(e: &VerbsError) -> bool {
    match e {
        VerbsError::NoLibrary | VerbsError::DeviceNotVisible { .. } => true,
        VerbsError::Sys { errno, .. } => matches!(*errno, libc::ENOSYS | libc::EOPNOTSUPP),
        _ => false,
    }
}

/// First poll interval of [`wait_for_gids`]; doubled each round up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_millis(2);
const BACKOFF_MAX: Duration = Duration::from_millis(50);

/// Poll `dev_name` (from the calling thread's netns) until every address in `addrs` has a RoCE v2
/// GID, or for iWARP / native IB until a port is ACTIVE (the report then says
/// [`Verification::PortActiveOnly`]). Gives up after `deadline` (a duration from now) with the
/// last reason: [`VerbsError::GidTimeout`] naming the missing addresses,
/// [`VerbsError::PortNotActive`], or the query's own error (e.g. the device never became visible).
/// The deadline bounds when the last check STARTS: a slow query (sysfs under emulation: ~0.1-0.3 s)
/// can end after it.
pub fn wait_for_gids(
    dev_name: &str,
    addrs: &[IpAddr],
    deadline: Duration,
) -> Result<DeviceReport, VerbsError> {
    if verbs_available() {
        return poll_until(addrs, deadline, || query_device(dev_name));
    }
    // No libibverbs: keep one private sysfs mount for the whole wait instead of one per poll.
    let dev = dev_name.to_owned();
    let addrs = addrs.to_vec();
    with_own_sysfs(move |root| poll_until(&addrs, deadline, || query_device_sysfs_at(root, &dev)))?
}

fn poll_until(
    addrs: &[IpAddr],
    timeout: Duration,
    mut query: impl FnMut() -> Result<DeviceReport, VerbsError>,
) -> Result<DeviceReport, VerbsError> {
    let start = Instant::now();
    let mut backoff = BACKOFF_START;
    loop {
        let waited = start.elapsed();
        let err = match query().and_then(|report| check(report, addrs, waited)) {
            Ok(report) => return Ok(report),
            Err(e) => e,
        };
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            return Err(match err {
                VerbsError::GidTimeout {
                    device, missing, ..
                } => VerbsError::GidTimeout {
                    device,
                    missing,
                    waited_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                },
                other => other,
            });
        }
        std::thread::sleep(backoff.min(timeout - elapsed));
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Ok(report, marked verified) if `report` satisfies the wait; else the error that says why not.
fn check(
    mut report: DeviceReport,
    addrs: &[IpAddr],
    waited: Duration,
) -> Result<DeviceReport, VerbsError> {
    // A RoCE port keeps its GIDs when its netdev loses carrier: the GIDs alone would pass a
    // port that carries nothing. Every transport needs an ACTIVE port.
    if report.active_port().is_none() {
        let (port, state) = report
            .ports
            .first()
            .map_or((1, PortState::Other(0)), |p| (p.port, p.state));
        return Err(VerbsError::PortNotActive {
            device: report.device,
            port,
            state,
        });
    }
    if report.has_per_ip_gids() {
        let missing = missing_roce_v2(&report, addrs);
        if missing.is_empty() {
            report.verified = Verification::RoceV2Gids;
            return Ok(report);
        }
        return Err(VerbsError::GidTimeout {
            device: report.device,
            missing,
            waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
        });
    }
    report.verified = Verification::PortActiveOnly;
    Ok(report)
}
