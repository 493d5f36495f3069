//! This node's ResourceSlice: one device per NIC the node would hand to a pod, with the
//! attributes claims select by, kept current.
//!
//! Which NICs: those `dra.nics` selects (default: every NIC backed by a device, PCI function or
//! auxiliary-bus device), found by the node's inventory as the device plugin finds them
//! (`rdma_host_device_core::inventory`: host NICs, then NICs in pods from their attachment
//! records), minus what ADD's own node policy
//! refuses (`Node::admit`: outside `allowedNics`, or an uplink not in `allowedUplinks`). So a
//! claim can only be allocated a NIC that ADD will hand over.
//!
//! Device names are DNS labels derived from what a pod cannot change: `pci-0000-3b-00-1` from
//! the PCI address, `aux-mlx5-core-sf-2` from an auxiliary device, `net-NAME` from the host
//! name of a virtual link (only when `dra.nics` names it; the tests' veths).
//!
//! Attributes: `resource.kubernetes.io/{pcieRoot, pciBusID, numaNode}`, Multus'
//! `k8s.cni.cncf.io/{deviceID, resourceName}` (deviceID is what ADD resolves, the device
//! plugin's ID), and ours under `rdma-host-device.io/`: `ifName`, `driver`, `mtu`,
//! `linkSpeed` (Mb/s), `linkUp`, `rdma`, `rdmaDevice`, `nodeGUID`, `transport` (InfiniBand,
//! RoCE, iWARP), `rail`. Health is the device plugin's judge (`crate::health`, which
//! looks at a NIC in a pod inside its pod's netns): a NIC whose link is up without carrier,
//! whose RDMA device is gone or has a port down, or whose PCI function is gone or reports
//! uncorrectable errors, gets the device taint `rdma-host-device.io/unhealthy` (the value says
//! why; NoSchedule: running pods stay) where the API server keeps taints (DRADeviceTaints); a
//! 1.34 server without the gate drops them, which is noticed and logged once. The same
//! verdict, with its sentence, goes to the kubelet's health stream (`dra::resource_health`, fed through
//! [`HealthSender`]), which shows it in the pod's status. `linkUp` is published only
//! when it is known: an admin-down NIC (how free NICs wait) has no carrier to report.
//!
//! Kept current: a netlink link notification, a change seen every `TICK` (sysfs: NICs, RDMA
//! devices and ports, carrier, PCI functions and AER counters; a NIC in a pod in its netns), a
//! change to our slice by someone else (a watch), and every
//! `resync`. Publishing converges: create, update (pool generation + 1 on any change), delete
//! our driver's other slices for this node; the same state twice writes nothing.

use super::DRIVER;
use crate::error::Result;
use crate::health;
use crate::kube::{
    ApiError, Device, DeviceTaint, Kube, ResourcePool, ResourceSlice, ResourceSliceSpec,
    SliceEvent, SliceFilter,
};
use futures::StreamExt;
use rdma_host_device_core::dra::metadata::{Attribute, attr};
use rdma_host_device_core::inventory::{self, Nic};
use rdma_host_device_core::link::Links;
use rdma_host_device_core::node::{DraConfig, Node};
use rdma_host_device_core::rdma::identity::format_guid;
use rdma_host_device_core::state::Store;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The taint a device gets while the device plugin's health rule calls it unhealthy.
pub const UNHEALTHY_TAINT: &str = "rdma-host-device.io/unhealthy";
/// How often sysfs is compared with the last look (cheap: a few small files per NIC).
const TICK: Duration = Duration::from_millis(500);
/// After a link notification, wait this long for the burst to end before reading.
const SETTLE: Duration = Duration::from_millis(100);
/// After a change, look again this many times, every other tick, changed or not: a device
/// seen half-made (an RDMA device registered before its netdev is paired with it) would
/// otherwise leave a fingerprint that no longer changes, and the slice wrong until `resync`.
const RELOOKS: u32 = 10;
/// The longest wait between two tries when the API server fails.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A watch of our slices is renewed after this long (the server ends it then).
const WATCH_SECONDS: u32 = 300;

/// What `run` needs besides the client.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The Node object's name: the slice's `nodeName` and pool name.
    pub node_name: String,
    pub node: Node,
    pub dra: DraConfig,
    pub state_dir: PathBuf,
    /// `/sys` (a test may point elsewhere for what is read from files).
    pub sys: PathBuf,
    /// Publish again at least this often, changed or not (a slice someone deleted comes back).
    pub resync: Duration,
}

/// What one NIC looks like now, beyond `Nic`: the facts of its netdev and RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub nic: Nic,
    pub mtu: Option<u32>,
    /// Mb/s, when the link reports it.
    pub speed: Option<i64>,
    pub transport: Option<&'static str>,
    /// The carrier, when the NIC is up on the host (unknown while it is admin down or in a pod).
    pub link_up: Option<bool>,
    /// The health judge's verdict (`crate::health`): the taint's value when unhealthy,
    /// and what the kubelet's health stream reports.
    pub health: health::Health,
    pub rail: Option<String>,
}

/// The device name of `nic`: a DNS label from what a pod cannot change.
pub(crate) fn device_name(nic: &Nic) -> String {
    name_for(nic.pci.as_deref(), &nic.id, &nic.name)
}

/// The device name of a NIC with PCI address `pci`, device ID `id` and host name `name`:
/// `pci-0000-3b-00-1` from its PCI address, `aux-mlx5-core-sf-2` from its auxiliary-bus device
/// (`id`, when it is not the name), `net-NAME` from a virtual link's host name. Prepare finds
/// a claim's NIC by it (`nics.rs`).
pub fn name_for(pci: Option<&str>, id: &str, name: &str) -> String {
    match pci {
        Some(pci) => label("pci", pci),
        None if id != name => label("aux", id),
        None => device_name_of_link(name),
    }
}

/// The device name of a virtual link (no device behind it) named `ifname` on the host.
pub fn device_name_of_link(ifname: &str) -> String {
    label("net", ifname)
}

fn label(prefix: &str, base: &str) -> String {
    let mut s: String = format!("{prefix}-{base}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    s.truncate(63);
    while s.ends_with('-') {
        s.pop();
    }
    s
}

/// The device `f` is published as (`taints`: whether to carry its health as a taint).
pub fn device(f: &Facts, dra: &DraConfig, taints: bool) -> Device {
    let mut a: BTreeMap<String, Attribute> = BTreeMap::new();
    let mut put = |k: &str, v: Attribute| {
        a.insert(k.to_owned(), v);
    };
    if let Some(root) = &f.nic.pci_root {
        put(attr::PCIE_ROOT, Attribute::string(root));
    }
    if let Some(pci) = &f.nic.pci {
        put(attr::PCI_BUS_ID, Attribute::string(pci));
    }
    if let Some(n) = f.nic.numa {
        put(attr::NUMA_NODE, Attribute::int(n));
    }
    put(attr::DEVICE_ID, Attribute::string(&f.nic.id));
    if let Some(r) = &dra.resource_name {
        put(attr::RESOURCE_NAME, Attribute::string(r));
    }
    put(attr::IF_NAME, Attribute::string(&f.nic.name));
    if let Some(d) = &f.nic.driver {
        put(attr::DRIVER, Attribute::string(d));
    }
    if let Some(m) = f.mtu {
        put(attr::MTU, Attribute::int(i64::from(m)));
    }
    if let Some(s) = f.speed {
        put(attr::LINK_SPEED, Attribute::int(s));
    }
    if let Some(up) = f.link_up {
        put(attr::LINK_UP, Attribute::boolean(up));
    }
    put(attr::RDMA, Attribute::boolean(f.nic.rdma_device.is_some()));
    if let Some(d) = &f.nic.rdma_device {
        put(attr::RDMA_DEVICE, Attribute::string(d));
    }
    if let Some(g) = f.nic.rdma_guid {
        put(attr::NODE_GUID, Attribute::string(format_guid(g)));
    }
    if let Some(t) = f.transport {
        put(attr::TRANSPORT, Attribute::string(t));
    }
    if let Some(r) = &f.rail {
        put(attr::RAIL, Attribute::string(r));
    }
    Device {
        name: device_name(&f.nic),
        attributes: Some(a),
        taints: (taints && f.health.is_unhealthy()).then(|| {
            vec![DeviceTaint {
                key: UNHEALTHY_TAINT.into(),
                value: f.health.word().map(Into::into),
                effect: "NoSchedule".into(),
                time_added: None,
            }]
        }),
    }
}

/// What sysfs says of RDMA device `dev`'s transport: iWARP (an RNIC), InfiniBand, or RoCE
/// (an InfiniBand CA on Ethernet).
fn transport(sys: &Path, dev: &str) -> Option<&'static str> {
    let d = sys.join("class/infiniband").join(dev);
    let node_type = std::fs::read_to_string(d.join("node_type")).ok()?;
    if node_type.trim_start().starts_with('4') {
        return Some("iWARP");
    }
    let ports = d.join("ports");
    let layer = rdma_host_device_core::sysfs::list_dir(&ports)
        .iter()
        .find_map(|p| std::fs::read_to_string(ports.join(p).join("link_layer")).ok())?;
    match layer.trim() {
        "InfiniBand" => Some("InfiniBand"),
        "Ethernet" => Some("RoCE"),
        _ => None,
    }
}

fn speed(sys: &Path, ifname: &str) -> Option<i64> {
    std::fs::read_to_string(sys.join("class/net").join(ifname).join("speed"))
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|s| *s > 0)
}

/// Facts of NICs now in pods, kept from when they were last seen on the host (the host cannot
/// read them there, and the slice should not flap because a NIC was attached), and the health
/// judge's memory (AER counters).
#[derive(Debug, Default)]
pub struct Memory {
    by_id: HashMap<String, Facts>,
    judge: health::Judge,
}

/// Every NIC to publish, with its facts, sorted by device name.
pub async fn discover(
    host: &Links,
    store: &Store,
    s: &Settings,
    memory: &mut Memory,
) -> Result<Vec<Facts>> {
    let wanted = |n: &Nic| match &s.dra.nics {
        Some(p) => p.matches(&n.facts()),
        None => n.pci.is_some() || n.id != n.name,
    };
    let nics = inventory::gather(host, store, &wanted, &s.sys, &s.node.uppers_socket).await?;
    let links: HashMap<String, u32> = host
        .all()
        .await?
        .into_iter()
        .map(|l| (l.name, l.mtu))
        .collect();
    let mut out: Vec<Facts> = Vec::new();
    let now = std::time::Instant::now();
    for nic in nics {
        if let Err(e) = s.node.admit(&nic.facts()) {
            log::debug!("not published: {}", e.msg);
            continue;
        }
        let rail = s
            .dra
            .rails
            .iter()
            .find(|r| r.selectors.matches(&nic.facts()))
            .map(|r| r.name.clone());
        // Judged where it is: on the host, or in its pod's netns.
        let seen = health::look(&s.sys, &nic);
        let verdict = memory.judge.judge(&nic, &seen, now);
        let f = if nic.attached {
            match memory.by_id.get(&nic.id) {
                Some(old) => Facts {
                    nic: Nic {
                        attached: true,
                        rdma_guid: nic.rdma_guid.or(old.nic.rdma_guid),
                        ..nic
                    },
                    rail,
                    link_up: old.link_up,
                    health: verdict,
                    ..old.clone()
                },
                None => Facts {
                    nic,
                    mtu: None,
                    speed: None,
                    transport: None,
                    link_up: None,
                    health: verdict,
                    rail,
                },
            }
        } else {
            let f = Facts {
                mtu: links.get(&nic.name).copied(),
                speed: speed(&s.sys, &nic.name),
                transport: nic
                    .rdma_device
                    .as_deref()
                    .and_then(|d| transport(&s.sys, d)),
                link_up: if seen.admin_up { seen.carrier } else { None },
                health: verdict,
                rail,
                nic,
            };
            memory.by_id.insert(f.nic.id.clone(), f.clone());
            f
        };
        let name = device_name(&f.nic);
        if out.iter().any(|o| device_name(&o.nic) == name) {
            log::warn!(
                "{} ({}) would be published as {name}, which another NIC already is: left out",
                f.nic.name,
                f.nic.id
            );
            continue;
        }
        out.push(f);
    }
    out.sort_by_key(|f| device_name(&f.nic));
    Ok(out)
}

/// What `sysfs` shows of the NICs and RDMA devices now, what the health judge sees of each
/// (a NIC in a pod, in its pod's netns) and which AER hold-downs run, to notice a change
/// cheaply.
fn fingerprint(sys: &Path, nics: &[Facts], judge: &health::Judge) -> Vec<String> {
    let mut fp = rdma_host_device_core::sysfs::list_dir(&sys.join("class/net"));
    fp.extend(rdma_host_device_core::sysfs::list_dir(
        &sys.join("class/infiniband"),
    ));
    for f in nics {
        fp.push(format!("{:?}", health::look(sys, &f.nic)));
    }
    fp.extend(judge.holding(std::time::Instant::now()));
    fp
}

/// The slice's name: one slice per node, named after it.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRIVER}")
}

/// Our slices on the API server, and how we converge them on what we want.
pub struct Publisher {
    kube: Kube,
    node: String,
    filter: SliceFilter,
    /// Whether the API server keeps device taints (until a write shows it drops them).
    pub taints: bool,
    /// The pool generation last written: a slice deleted by someone else comes back newer.
    generation: i64,
}

/// What a `converge` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Created { generation: i64 },
    Updated { generation: i64 },
}

/// A taint as we compare it: key, value, effect (the server adds `timeAdded`).
type TaintEssence = (String, Option<String>, String);

/// The parts of a device we publish, for comparing with what the server holds (which adds
/// `timeAdded` to taints, and may drop taints altogether).
fn essence(
    d: &Device,
    taints: bool,
) -> (
    &str,
    Option<&BTreeMap<String, Attribute>>,
    Vec<TaintEssence>,
) {
    let t = if taints {
        d.taints
            .iter()
            .flatten()
            .map(|t| (t.key.clone(), t.value.clone(), t.effect.clone()))
            .collect()
    } else {
        Vec::new()
    };
    (&d.name, d.attributes.as_ref().filter(|a| !a.is_empty()), t)
}

impl Publisher {
    pub fn new(kube: Kube, node: &str) -> Publisher {
        Publisher {
            kube,
            node: node.to_owned(),
            filter: SliceFilter {
                driver: DRIVER.into(),
                node: node.to_owned(),
            },
            taints: true,
            generation: 0,
        }
    }

    fn spec(&self, generation: i64, devices: &[Device]) -> ResourceSliceSpec {
        ResourceSliceSpec {
            driver: DRIVER.into(),
            node_name: Some(self.node.clone()),
            pool: ResourcePool {
                name: self.node.clone(),
                generation,
                resource_slice_count: 1,
            },
            devices: Some(devices.to_vec()),
        }
    }

    fn holds(&self, s: &ResourceSlice, devices: &[Device]) -> bool {
        let have = s.spec.devices.as_deref().unwrap_or_default();
        s.spec.pool.name == self.node
            && s.spec.pool.resource_slice_count == 1
            && have.len() == devices.len()
            && have
                .iter()
                .zip(devices)
                .all(|(h, w)| essence(h, self.taints) == essence(w, self.taints))
    }

    /// Make our slices on the server say `devices`: one slice, written only if it differs.
    pub async fn converge(&mut self, devices: &[Device]) -> std::result::Result<Outcome, ApiError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let (slices, _) = self.kube.list_slices(&self.filter).await?;
            let top = slices
                .iter()
                .map(|s| s.spec.pool.generation)
                .max()
                .unwrap_or(0)
                .max(self.generation);
            // Keep the one named after the node (created if missing); the rest go, after it
            // holds a newer generation than theirs.
            let keep = slices
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(&slice_name(&self.node)));
            let result = match keep {
                Some(s) if self.holds(s, devices) && slices.len() == 1 => {
                    return Ok(Outcome::Unchanged);
                }
                Some(s) if self.holds(s, devices) && s.spec.pool.generation == top => {
                    Ok((s.clone(), Outcome::Unchanged))
                }
                Some(s) => {
                    let mut next = s.clone();
                    next.spec = self.spec(top + 1, devices);
                    self.kube.update_slice(&next).await.map(|s| {
                        (
                            s,
                            Outcome::Updated {
                                generation: top + 1,
                            },
                        )
                    })
                }
                None => {
                    let mut s = ResourceSlice {
                        metadata: Default::default(),
                        spec: self.spec(top + 1, devices),
                    };
                    s.metadata.name = Some(slice_name(&self.node));
                    self.kube.create_slice(&s).await.map(|s| {
                        (
                            s,
                            Outcome::Created {
                                generation: top + 1,
                            },
                        )
                    })
                }
            };
            let (kept, outcome) = match result {
                Err(e) if e.is_conflict() && tries < 4 => {
                    log::info!("{e}; reading our slices again");
                    continue;
                }
                Err(e) => return Err(e),
                Ok(r) => r,
            };
            self.generation = kept.spec.pool.generation;
            if self.taints
                && devices.iter().any(|d| d.taints.is_some())
                && kept
                    .spec
                    .devices
                    .iter()
                    .flatten()
                    .all(|d| d.taints.is_none())
            {
                log::warn!(
                    "the API server dropped our device taints (Kubernetes 1.34 without the DRADeviceTaints feature gate?): an unhealthy NIC stays schedulable; its linkUp attribute still says so"
                );
                self.taints = false;
            }
            for s in &slices {
                if s.metadata.uid != kept.metadata.uid {
                    let name = s.metadata.name.as_deref().unwrap_or_default();
                    log::info!("deleting our other slice {name} for this node");
                    self.kube
                        .delete_slice(name, s.metadata.uid.as_deref())
                        .await?;
                }
            }
            return Ok(outcome);
        }
    }
}

/// Should the agent stop rather than retry: the API server will answer the same until the
/// operator fixes something (credentials, RBAC, a cluster without resource.k8s.io/v1).
pub fn is_fatal(e: &ApiError) -> bool {
    matches!(e.code, Some(401) | Some(403)) || (e.code == Some(404) && e.reason != "NotFound")
}

/// Where the publishing loop puts every device's verdict for the kubelet's health stream
/// (`dra::resource_health`): what it publishes as taints, at the same moment, before the API server is
/// asked (health reaches the kubelet while the API server is away).
pub type HealthSender = tokio::sync::watch::Sender<Vec<DeviceHealth>>;

/// One device's verdict, as the health stream names it (pool and device as in the slice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealth {
    pub pool: String,
    pub device: String,
    pub health: health::Health,
}

fn report_health(tx: &HealthSender, pool: &str, facts: &[Facts]) {
    let now: Vec<DeviceHealth> = facts
        .iter()
        .map(|f| DeviceHealth {
            pool: pool.to_owned(),
            device: device_name(&f.nic),
            health: f.health.clone(),
        })
        .collect();
    tx.send_if_modified(|old| {
        let changed = *old != now;
        if changed {
            for d in now.iter().filter(|d| !old.contains(d)) {
                match &d.health {
                    health::Health::Healthy => log::info!("{}: Healthy", d.device),
                    h @ health::Health::Unhealthy { .. } => {
                        log::warn!("{}: Unhealthy: {}", d.device, h.message())
                    }
                    h => log::info!("{}: Unknown: {}", d.device, h.message()),
                }
            }
            *old = now;
        }
        changed
    });
}

/// A wake-up for the publishing loop.
enum Wake {
    Link,
    Tick,
    Watch,
    Resync,
}

/// Publish this node's slice and keep it current until the process ends. Returns an error only
/// when the first publication fails for a reason retrying cannot fix (`is_fatal`: a wrong
/// token, missing RBAC, no resource.k8s.io/v1); every other failure is logged and retried.
/// Runs on the caller's Tokio runtime (current-thread is enough).
pub async fn run(kube: Kube, s: Settings, health: HealthSender) -> Result<()> {
    let host = Links::open()?;
    let store = Store::new(&s.state_dir);
    let mut memory = Memory::default();
    let mut publisher = Publisher::new(kube.clone(), &s.node_name);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Wake>(16);
    spawn_link_events(tx.clone());
    spawn_slice_watch(kube, publisher.filter.clone(), tx.clone());
    let mut ticker = tokio::time::interval(TICK);
    let mut resync = tokio::time::interval(s.resync);
    let mut backoff = Duration::from_secs(1);
    let mut first = true;
    let mut relooks = 0u32;
    let mut ticks = 0u32;
    loop {
        let facts = match discover(&host, &store, &s, &mut memory).await {
            Ok(f) => f,
            Err(e) => {
                log::warn!("reading the node's NICs: {e}; trying again");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let fp = fingerprint(&s.sys, &facts, &memory.judge);
        report_health(&health, &s.node_name, &facts);
        let devices: Vec<Device> = facts
            .iter()
            .map(|f| device(f, &s.dra, publisher.taints))
            .collect();
        match publisher.converge(&devices).await {
            Ok(o) => {
                if o != Outcome::Unchanged || first {
                    log::info!(
                        "slice {}: {o:?}, {} device(s): {}",
                        slice_name(&s.node_name),
                        devices.len(),
                        devices
                            .iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                }
                first = false;
                backoff = Duration::from_secs(1);
            }
            Err(e) if first && is_fatal(&e) => return Err(e.into()),
            Err(e) => {
                log::warn!(
                    "publishing this node's ResourceSlice: {e}; trying again in {backoff:?}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        }
        // Wait for a reason to look again.
        loop {
            let wake = tokio::select! {
                w = rx.recv() => w.unwrap_or(Wake::Resync),
                _ = ticker.tick() => Wake::Tick,
                _ = resync.tick() => Wake::Resync,
            };
            match wake {
                Wake::Tick => {
                    ticks = ticks.wrapping_add(1);
                    if fingerprint(&s.sys, &facts, &memory.judge) != fp {
                        relooks = RELOOKS;
                        break;
                    }
                    if relooks > 0 && ticks.is_multiple_of(2) {
                        relooks -= 1;
                        break;
                    }
                }
                Wake::Link => {
                    tokio::time::sleep(SETTLE).await;
                    while rx.try_recv().is_ok() {}
                    relooks = RELOOKS;
                    break;
                }
                Wake::Watch | Wake::Resync => break,
            }
        }
    }
}

/// Wake the loop on every link notification (RTNLGRP_LINK) of the host's namespace.
fn spawn_link_events(tx: tokio::sync::mpsc::Sender<Wake>) {
    use netlink_sys::{
        AsyncSocket, AsyncSocketExt, SocketAddr, TokioSocket, protocols::NETLINK_ROUTE,
    };
    const RTNLGRP_LINK: u32 = 1;
    let sock = (|| -> std::io::Result<TokioSocket> {
        let mut s = TokioSocket::new(NETLINK_ROUTE)?;
        s.socket_mut().bind(&SocketAddr::new(0, 0))?;
        s.socket_mut().add_membership(RTNLGRP_LINK)?;
        Ok(s)
    })();
    let sock = match sock {
        Ok(s) => s,
        Err(e) => {
            log::warn!(
                "no link notifications ({e}): link changes are seen within {TICK:?} from sysfs"
            );
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            match sock.recv_from_full().await {
                Ok(_) => {
                    if tx.try_send(Wake::Link).is_err() && tx.is_closed() {
                        return;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    let _ = tx.try_send(Wake::Link);
                }
                Err(e) => {
                    log::warn!(
                        "link notifications ended ({e}): link changes are seen within {TICK:?} from sysfs"
                    );
                    return;
                }
            }
        }
    });
}

/// Wake the loop when our slices change on the server (someone edited or deleted them; our
/// own writes wake it too, and find nothing to do).
fn spawn_slice_watch(kube: Kube, filter: SliceFilter, tx: tokio::sync::mpsc::Sender<Wake>) {
    tokio::spawn(async move {
        loop {
            let rv = match kube.list_slices(&filter).await {
                Ok((_, rv)) => rv,
                Err(e) => {
                    log::debug!("watching our slices: {e}");
                    tokio::time::sleep(MAX_BACKOFF).await;
                    continue;
                }
            };
            let mut events = match kube.watch_slices(&filter, &rv, WATCH_SECONDS).await {
                Ok(s) => s,
                Err(e) => {
                    log::debug!("watching our slices: {e}");
                    tokio::time::sleep(MAX_BACKOFF).await;
                    continue;
                }
            };
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(SliceEvent::Bookmark(_)) => {}
                    Ok(_) => {
                        if tx.send(Wake::Watch).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        log::debug!("watching our slices: {e}");
                        break;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_host_device_core::node::{NicSelectors, Rail};

    fn facts(nic: Nic) -> Facts {
        Facts {
            nic,
            mtu: Some(9000),
            speed: Some(200000),
            transport: Some("RoCE"),
            link_up: Some(true),
            health: health::Health::Healthy,
            rail: Some("3".into()),
        }
    }

    #[test]
    fn device_names_are_dns_labels_from_what_a_pod_cannot_change() {
        assert_eq!(
            device_name(&Nic::for_test("0000:3b:00.1", "ens1f1", None)),
            "pci-0000-3b-00-1"
        );
        let mut sf = Nic::for_test("mlx5_core.sf.2", "enp3s0f0s2", None);
        sf.pci = None;
        assert_eq!(device_name(&sf), "aux-mlx5-core-sf-2");
        let mut veth = Nic::for_test("Veth_A.1", "Veth_A.1", None);
        veth.pci = None;
        assert_eq!(device_name(&veth), "net-veth-a-1");
        let mut long = Nic::for_test("x", &"n".repeat(80), None);
        long.pci = None;
        long.id = long.name.clone();
        assert_eq!(device_name(&long).len(), 63);
    }

    #[test]
    fn a_pci_nic_carries_the_standard_multus_and_our_attributes() {
        let mut nic = Nic::for_test("0000:3b:00.1", "ens1f1", Some("mlx5_1"));
        nic.numa = Some(1);
        nic.pci_root = Some("pci0000:3a".into());
        nic.driver = Some("mlx5_core".into());
        nic.rdma_guid = Some(0x0200_00ff_fe00_0010);
        let dra = DraConfig {
            resource_name: Some("rdma-host-device.io/rail".into()),
            rails: vec![Rail {
                name: "3".into(),
                selectors: NicSelectors::default(),
            }],
            ..Default::default()
        };
        let d = device(&facts(nic), &dra, true);
        let a = d.attributes.unwrap();
        let s = |k: &str| a[k].string.clone().unwrap_or_else(|| panic!("{k}: {a:?}"));
        assert_eq!(s("resource.kubernetes.io/pcieRoot"), "pci0000:3a");
        assert_eq!(s("resource.kubernetes.io/pciBusID"), "0000:3b:00.1");
        assert_eq!(a["resource.kubernetes.io/numaNode"].int, Some(1));
        assert_eq!(s("k8s.cni.cncf.io/deviceID"), "0000:3b:00.1");
        assert_eq!(
            s("k8s.cni.cncf.io/resourceName"),
            "rdma-host-device.io/rail"
        );
        assert_eq!(s("rdma-host-device.io/rdmaDevice"), "mlx5_1");
        assert_eq!(s("rdma-host-device.io/nodeGUID"), "0200:00ff:fe00:0010");
        assert_eq!(s("rdma-host-device.io/transport"), "RoCE");
        assert_eq!(s("rdma-host-device.io/driver"), "mlx5_core");
        assert_eq!(s("rdma-host-device.io/rail"), "3");
        assert_eq!(a["rdma-host-device.io/linkSpeed"].int, Some(200000));
        assert_eq!(a["rdma-host-device.io/mtu"].int, Some(9000));
        assert_eq!(a["rdma-host-device.io/linkUp"].bool, Some(true));
        assert_eq!(a["rdma-host-device.io/rdma"].bool, Some(true));
        assert!(d.taints.is_none(), "healthy: no taint");
        for k in a.keys() {
            let ident = k.rsplit_once('/').unwrap().1;
            assert!(
                ident.len() <= 32 && !ident.contains('-'),
                "{k}: a C identifier"
            );
        }
    }

    #[test]
    fn an_unhealthy_nic_is_tainted_only_where_the_server_keeps_taints() {
        let mut f = facts(Nic::for_test("0000:3b:00.1", "ens1f1", None));
        f.link_up = Some(false);
        f.health = health::Health::Unhealthy {
            word: "link-down",
            why: "ens1f1 is up without carrier".into(),
        };
        let d = device(&f, &DraConfig::default(), true);
        let t = d.taints.unwrap();
        assert_eq!(
            (
                t[0].key.as_str(),
                t[0].value.as_deref(),
                t[0].effect.as_str()
            ),
            (UNHEALTHY_TAINT, Some("link-down"), "NoSchedule")
        );
        let d = device(&f, &DraConfig::default(), false);
        assert!(d.taints.is_none());
        assert_eq!(
            d.attributes.unwrap()["rdma-host-device.io/linkUp"].bool,
            Some(false)
        );
    }

    #[test]
    fn transport_is_read_from_sysfs_as_the_kernel_writes_it() {
        let dir = std::env::temp_dir().join(format!("rhd-dra-sys-{}", std::process::id()));
        for (dev, node_type, layer) in [
            ("mlx5_0", "1: CA", "Ethernet"),
            ("mlx5_1", "1: CA", "InfiniBand"),
            ("irdma0", "4: RNIC", "Ethernet"),
        ] {
            let d = dir.join("class/infiniband").join(dev);
            std::fs::create_dir_all(d.join("ports/1")).unwrap();
            std::fs::write(d.join("node_type"), format!("{node_type}\n")).unwrap();
            std::fs::write(d.join("ports/1/link_layer"), format!("{layer}\n")).unwrap();
        }
        assert_eq!(transport(&dir, "mlx5_0"), Some("RoCE"));
        assert_eq!(transport(&dir, "mlx5_1"), Some("InfiniBand"));
        assert_eq!(transport(&dir, "irdma0"), Some("iWARP"));
        assert_eq!(transport(&dir, "none"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
