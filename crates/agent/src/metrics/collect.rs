//! One scrape: every attachment in the state directory, seen from inside its pod's netns (the
//! pod interface's netdev counters; the RDMA device's ports, hardware counters, resource counts
//! and QP owners over RDMA netlink; its standard port counters from sysfs), then every RDMA
//! device still on the host. A failure costs only the samples it concerns and one count in
//! `rdma_host_device_scrape_errors_total{stage}`; nothing here fails the scrape. One file on
//! purpose: the order of a scrape and its error accounting read top to bottom.

use super::netdev::{self, NetdevError, NetdevStats};
use super::snapshot::{self as m, Labels, Snapshot, Value, with};
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::rdma::netlink::stats::QpOwner;
use rdma_host_device_core::rdma::netlink::{
    NetnsMode, RdmaDevice, RdmaNlError, RdmaPort, RdmaSocket,
};
use rdma_host_device_core::state::{Record, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where one scrape looks, and how long one kernel query may take.
#[derive(Debug, Clone)]
pub struct Source {
    pub state_dir: PathBuf,
    /// The sysfs the host's RDMA devices are read from (`/sys`; a fake tree in tests).
    pub sysfs: PathBuf,
    pub timeout: Duration,
}

/// The failures of one scrape, by stage.
#[derive(Debug, Default)]
pub struct Errors(pub BTreeMap<&'static str, u64>);

impl Errors {
    fn count(&mut self, stage: &'static str, what: impl std::fmt::Display) {
        log::debug!("scrape error ({stage}): {what}");
        *self.0.entry(stage).or_default() += 1;
    }
}

/// What was read about one RDMA device.
#[derive(Debug, Default)]
struct RdmaSample {
    device: Option<RdmaDevice>,
    ports: Vec<PortSample>,
    resources: Vec<(String, u64)>,
    qps: Vec<QpOwner>,
}

#[derive(Debug)]
struct PortSample {
    port: RdmaPort,
    hw: Vec<(String, u64)>,
    counters: Vec<(String, u64)>,
}

/// Collect one scrape into `snap`; returns the failures.
pub fn scrape(src: &Source, snap: &mut Snapshot) -> Errors {
    let started = Instant::now();
    let mut errors = Errors::default();
    let records = match Store::new(&src.state_dir).all() {
        Ok(r) => r,
        Err(e) => {
            errors.count("state_dir", e);
            Vec::new()
        }
    };
    snap.put(
        &m::ATTACHMENTS,
        Vec::new(),
        Value::Float(records.len() as f64),
    );
    let mode = host_netns_mode();
    // The attachments' devices by index (global, and no pod can change it), not by a name a
    // pod may have given another device: the host's list leaves out exactly those.
    let mut attached = BTreeSet::new();
    for r in &records {
        // One bad record must not cost the others: a panic is counted, not propagated.
        let one = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut errs = Errors::default();
            let mut part = Snapshot::default();
            let index = attachment(src, r, mode, &mut part, &mut errs);
            (part, errs, index)
        }));
        match one {
            Ok((part, errs, index)) => {
                attached.extend(index);
                merge(snap, part);
                for (k, v) in errs.0 {
                    *errors.0.entry(k).or_default() += v;
                }
            }
            Err(_) => errors.count("panic", format!("attachment {}", r.container_id)),
        }
    }
    host_devices(src, mode, &attached, snap, &mut errors);
    snap.put(
        &m::SCRAPE_DURATION,
        Vec::new(),
        Value::Float(started.elapsed().as_secs_f64()),
    );
    errors
}

fn merge(into: &mut Snapshot, part: Snapshot) {
    for f in part.families {
        for (l, v) in f.samples {
            into.put(f.metric, l, v);
        }
    }
}

/// The mode's name, or "none" without RDMA.
fn mode_name(mode: Option<NetnsMode>) -> &'static str {
    mode.map_or("none", NetnsMode::name)
}

/// The kernel's RDMA netns mode, or None without RDMA.
fn host_netns_mode() -> Option<NetnsMode> {
    RdmaSocket::open().ok()?.netns_mode().ok()
}

/// The labels every series of an attachment carries.
fn attachment_labels(r: &Record, mode: Option<NetnsMode>) -> Labels {
    let pod = r.pod.clone().unwrap_or_default();
    vec![
        ("namespace", pod.namespace),
        ("pod", pod.name),
        ("container_id", r.container_id.clone()),
        ("interface", r.ifname.clone()),
        ("network", r.network.clone()),
        ("host_nic", r.host_name.clone()),
        ("pci_address", r.pci.clone().unwrap_or_default()),
        ("rdma_device", r.rdma_device.clone().unwrap_or_default()),
        ("netns_mode", mode_name(mode).to_string()),
    ]
}

fn attachment(
    src: &Source,
    r: &Record,
    mode: Option<NetnsMode>,
    snap: &mut Snapshot,
    errors: &mut Errors,
) -> Option<u32> {
    let labels = attachment_labels(r, mode);
    let mut info = labels.clone();
    info.push(("netns", r.netns.clone()));
    info.push(("soft_device", r.soft_device.clone().unwrap_or_default()));
    snap.put(&m::ATTACHMENT_INFO, info, Value::Float(1.0));
    let up =
        |snap: &mut Snapshot, v: f64| snap.put(&m::ATTACHMENT_UP, labels.clone(), Value::Float(v));

    // Only the namespace ADD attached in: a path retargeted since names another pod's.
    let ns = match Netns::open(Path::new(&r.netns)).and_then(|ns| {
        ns.refuse_if_not(r.netns_id)?;
        Ok(ns)
    }) {
        Ok(ns) => ns,
        Err(e) => {
            errors.count("netns", e);
            up(snap, 0.0);
            return None;
        }
    };
    let timeout = src.timeout;
    let inside = ns.within(|| {
        let nd = netdev::stats(r.pod_index, &r.ifname, timeout);
        // The pod's own socket: in exclusive mode the device is only visible there.
        let mut rdma_errs = Errors::default();
        let rdma = r
            .rdma_device
            .as_deref()
            .map(|d| rdma_sample(d, r.pod_index, timeout, &mut rdma_errs));
        // A moved device's sysfs directory exists only in a sysfs mounted in its netns.
        if r.rdma_moved
            && let Some(s) = &rdma
        {
            let dev = sampled_name(s);
            let ports: Vec<u32> = s.ports.iter().map(|p| p.port.port).collect();
            match rdma_host_device_core::rdma::verbs::sysfs::with_own_sysfs(move |root| {
                ports
                    .iter()
                    .map(|p| port_counters(root, &dev, *p))
                    .collect::<Vec<_>>()
            }) {
                Ok(all) => (nd, rdma, rdma_errs, Some(all)),
                Err(e) => {
                    rdma_errs.count("port_counters", e);
                    (nd, rdma, rdma_errs, None)
                }
            }
        } else {
            (nd, rdma, rdma_errs, None)
        }
    });
    let (nd, rdma, rdma_errs, pod_counters) = match inside {
        Ok(x) => x,
        Err(e) => {
            errors.count("netns", e);
            up(snap, 0.0);
            return None;
        }
    };
    for (k, v) in rdma_errs.0 {
        *errors.0.entry(k).or_default() += v;
    }
    match nd {
        Ok(s) => {
            up(snap, 1.0);
            netdev_samples(&labels, &s, snap);
        }
        Err(e) => {
            // A pod that deleted or renamed our interface, or a netns being torn down.
            if e != NetdevError::NotFound {
                log::debug!("{}: netdev: {e}", r.container_id);
            }
            errors.count("netdev", format!("{}/{}: {e}", r.container_id, r.ifname));
            up(snap, 0.0);
        }
    }
    if let Some(mut s) = rdma {
        match pod_counters {
            Some(all) => {
                for (p, c) in s.ports.iter_mut().zip(all) {
                    match c {
                        Ok(c) => p.counters = c,
                        Err(e) => errors.count("port_counters", e),
                    }
                }
            }
            None if !r.rdma_moved => {
                let dev = sampled_name(&s);
                for p in &mut s.ports {
                    match port_counters(&src.sysfs, &dev, p.port.port) {
                        Ok(c) => p.counters = c,
                        Err(e) => errors.count("port_counters", e),
                    }
                }
            }
            None => {}
        }
        rdma_samples(&labels, &s, snap);
        return s.device.as_ref().map(|d| d.index);
    }
    None
}

/// The name the sampled device has now (what its sysfs directory is called).
fn sampled_name(s: &RdmaSample) -> String {
    s.device
        .as_ref()
        .map(|d| d.name.clone())
        .unwrap_or_default()
}

fn netdev_samples(labels: &Labels, s: &NetdevStats, snap: &mut Snapshot) {
    for (metric, v) in [
        (&m::RX_BYTES, s.rx_bytes),
        (&m::TX_BYTES, s.tx_bytes),
        (&m::RX_PACKETS, s.rx_packets),
        (&m::TX_PACKETS, s.tx_packets),
        (&m::RX_ERRORS, s.rx_errors),
        (&m::TX_ERRORS, s.tx_errors),
        (&m::RX_DROPPED, s.rx_dropped),
        (&m::TX_DROPPED, s.tx_dropped),
    ] {
        snap.int(metric, labels.clone(), v);
    }
    snap.put(
        &m::NETDEV_UP,
        labels.clone(),
        Value::Float(f64::from(u8::from(s.oper_up))),
    );
    snap.put(
        &m::NETDEV_MTU,
        labels.clone(),
        Value::Float(f64::from(s.mtu)),
    );
}

/// Everything RDMA netlink says about an attachment's device, from the calling thread's (the
/// pod's) netns: the device whose port's netdev is the pod's NIC (`pod_index`), whatever it is
/// called now. In shared mode any pod renames any device; by name, a swap put another pod's
/// device (its counters, its QP owners' pids) under this attachment's labels. By `name`, the
/// one ADD recorded, only for a record without the NIC's pod index (older versions).
fn rdma_sample(
    name: &str,
    pod_index: Option<u32>,
    timeout: Duration,
    errors: &mut Errors,
) -> RdmaSample {
    let mut out = RdmaSample::default();
    let mut sock = match RdmaSocket::open().and_then(|mut s| s.set_timeout(timeout).map(|_| s)) {
        Ok(s) => s,
        Err(e) => {
            errors.count("rdma", e);
            return out;
        }
    };
    let list = match sock.device_list() {
        Ok(list) => list,
        Err(e) => {
            errors.count("rdma", e);
            return out;
        }
    };
    let dev = match pod_index {
        Some(ix) => {
            let nics: Vec<RdmaDevice> = list
                .into_iter()
                .filter(|d| {
                    sock.ports_of(d.index)
                        .is_ok_and(|ps| ps.iter().any(|p| p.netdev_index == Some(ix)))
                })
                .collect();
            let by_name = nics.iter().position(|d| d.name == name);
            nics.into_iter().nth(by_name.unwrap_or(0))
        }
        None => list.into_iter().find(|d| d.name == name),
    };
    let Some(dev) = dev else {
        // A soft device dies with its netdev (a veth in a deleted netns); a real one may be
        // on its way back to the host.
        errors.count("rdma", format!("RDMA device {name} is not visible"));
        return out;
    };
    device_detail(&mut sock, &dev, &mut out, errors);
    out.device = Some(dev);
    out
}

fn device_detail(
    sock: &mut RdmaSocket,
    dev: &RdmaDevice,
    out: &mut RdmaSample,
    errors: &mut Errors,
) {
    match sock.ports_of(dev.index) {
        Ok(ports) => {
            for port in ports {
                let hw = match sock.hw_counters(dev.index, port.port) {
                    Ok(hw) => hw.unwrap_or_default(),
                    Err(e) => {
                        errors.count("hw_counters", e);
                        Vec::new()
                    }
                };
                out.ports.push(PortSample {
                    port,
                    hw,
                    counters: Vec::new(),
                });
            }
        }
        Err(e) => errors.count("rdma", e),
    }
    match sock.resource_summary(dev.index) {
        Ok(r) => out.resources = r,
        Err(e) => errors.count("resources", e),
    }
    match sock.qp_owners(dev.index) {
        Ok(q) => out.qps = q,
        Err(e) => errors.count("qps", e),
    }
}

fn rdma_samples(labels: &Labels, s: &RdmaSample, snap: &mut Snapshot) {
    if s.device.is_none() {
        return;
    }
    for p in &s.ports {
        let pl = with(labels, "port", p.port.port.to_string());
        if let Some(st) = p.port.state {
            snap.put(&m::PORT_STATE, pl.clone(), Value::Float(f64::from(st)));
        }
        for (name, v) in &p.hw {
            snap.int(&m::HW_COUNTER, with(&pl, "counter", name.clone()), *v);
        }
        for (name, v) in &p.counters {
            snap.int(&m::PORT_COUNTER, with(&pl, "counter", name.clone()), *v);
        }
    }
    for (name, v) in &s.resources {
        snap.put(
            &m::RESOURCES,
            with(labels, "resource", name.clone()),
            Value::Float(*v as f64),
        );
    }
    let mut owners: BTreeMap<(String, String), u64> = BTreeMap::new();
    for q in &s.qps {
        let key = match (q.pid, &q.kern_name) {
            (Some(pid), _) => (pid.to_string(), rdma_host_device_core::process::comm(pid)),
            (None, Some(k)) => (String::new(), k.clone()),
            (None, None) => (String::new(), String::new()),
        };
        *owners.entry(key).or_default() += 1;
    }
    for ((pid, owner), n) in owners {
        let mut l = with(labels, "owner_pid", pid);
        l.push(("owner", owner));
        snap.put(&m::QPS, l, Value::Float(n as f64));
    }
}

/// `ports/N/counters/*` of a device under `sysfs`: none (not an error) when the driver has no
/// such group (rxe, siw); unreadable counters are skipped (some read EINVAL on some links).
fn port_counters(sysfs: &Path, dev: &str, port: u32) -> Result<Vec<(String, u64)>, String> {
    if dev.is_empty() || dev.contains('/') || dev.starts_with('.') {
        return Err(format!("bad RDMA device name {dev:?}"));
    }
    let dir = sysfs
        .join("class/infiniband")
        .join(dev)
        .join("ports")
        .join(port.to_string())
        .join("counters");
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut out: Vec<(String, u64)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let v = std::fs::read_to_string(e.path()).ok()?;
            Some((name, v.trim().parse().ok()?))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The PCI function of a host RDMA device, from its sysfs `device` link.
fn pci_of(sysfs: &Path, dev: &str) -> String {
    let link = sysfs.join("class/infiniband").join(dev).join("device");
    std::fs::canonicalize(link)
        .ok()
        .filter(|p| {
            p.components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with("pci"))
        })
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// Every RDMA device visible in the host's netns that no attachment holds.
fn host_devices(
    src: &Source,
    mode: Option<NetnsMode>,
    attached: &BTreeSet<u32>,
    snap: &mut Snapshot,
    errors: &mut Errors,
) {
    let mut sock = match RdmaSocket::open() {
        Ok(s) => s,
        Err(RdmaNlError::Unavailable(_)) => return, // no RDMA in this kernel: nothing to say
        Err(e) => return errors.count("host_rdma", e),
    };
    if let Err(e) = sock.set_timeout(src.timeout) {
        return errors.count("host_rdma", e);
    }
    let devices = match sock.device_list() {
        Ok(d) => d,
        Err(e) => return errors.count("host_rdma", e),
    };
    for dev in devices.iter().filter(|d| !attached.contains(&d.index)) {
        let mut s = RdmaSample::default();
        device_detail(&mut sock, dev, &mut s, errors);
        for p in &mut s.ports {
            match port_counters(&src.sysfs, &dev.name, p.port.port) {
                Ok(c) => p.counters = c,
                Err(e) => errors.count("port_counters", e),
            }
        }
        let host_nic = s
            .ports
            .iter()
            .find_map(|p| p.port.netdev_name.clone())
            .unwrap_or_default();
        let labels: Labels = vec![
            ("namespace", String::new()),
            ("pod", String::new()),
            ("container_id", String::new()),
            ("interface", String::new()),
            ("network", String::new()),
            ("host_nic", host_nic),
            ("pci_address", pci_of(&src.sysfs, &dev.name)),
            ("rdma_device", dev.name.clone()),
            ("netns_mode", mode_name(mode).to_string()),
        ];
        s.device = Some(dev.clone());
        rdma_samples(&labels, &s, snap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_host_device_core::names::PodRef;

    fn record(cid: &str, netns: &str) -> Record {
        serde_json::from_value(serde_json::json!({
            "containerId": cid, "ifname": "net1", "network": "n", "netns": netns,
            "hostName": "eth9", "hostMtu": 1500, "hostUp": true, "mac": "aa:bb:cc:dd:ee:ff",
            "pci": "0000:3b:00.1", "rdmaDevice": "mlx5_0",
            "pod": {"namespace": "team-a", "name": "trainer-0"}
        }))
        .unwrap()
    }

    #[test]
    fn labels_carry_the_pod_and_the_nic() {
        let r = record("c1", "/x");
        assert_eq!(
            r.pod,
            Some(PodRef {
                namespace: "team-a".into(),
                name: "trainer-0".into(),
                uid: String::new()
            })
        );
        let l = attachment_labels(&r, Some(NetnsMode::Exclusive));
        let get = |k: &str| l.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("namespace"), Some("team-a"));
        assert_eq!(get("pod"), Some("trainer-0"));
        assert_eq!(get("pci_address"), Some("0000:3b:00.1"));
        assert_eq!(get("rdma_device"), Some("mlx5_0"));
        assert_eq!(get("netns_mode"), Some("exclusive"));
        // A record written before pods were recorded still loads, with empty pod labels.
        let mut old = serde_json::to_value(&r).unwrap();
        old.as_object_mut().unwrap().remove("pod");
        let old: Record = serde_json::from_value(old).unwrap();
        assert_eq!(
            attachment_labels(&old, None)[0],
            ("namespace", String::new())
        );
    }

    #[test]
    fn a_vanished_netns_is_counted_not_fatal() {
        let dir = std::env::temp_dir().join(format!("rhd-metrics-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(&dir);
        store
            .save(&record("gone", "/nonexistent/netns/gone"))
            .unwrap();
        store.save(&record("notns", "/etc/hostname")).unwrap();
        let src = Source {
            state_dir: dir.clone(),
            sysfs: PathBuf::from("/nonexistent-sysfs"),
            timeout: Duration::from_secs(1),
        };
        let mut snap = Snapshot::default();
        let errs = scrape(&src, &mut snap);
        assert_eq!(errs.0.get("netns"), Some(&2), "{errs:?}");
        assert_eq!(snap.samples("rdma_host_device_attachment_info").len(), 2);
        let up = snap.samples("rdma_host_device_attachment_up");
        assert!(up.iter().all(|(_, v)| *v == Value::Float(0.0)), "{up:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn port_counters_from_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("rhd-metrics-sysfs-{}", std::process::id()));
        let c = root.join("class/infiniband/mlx5_0/ports/1/counters");
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("port_xmit_data"), "1234\n").unwrap();
        std::fs::write(c.join("port_rcv_data"), "99\n").unwrap();
        std::fs::write(c.join("weird"), "N/A\n").unwrap();
        assert_eq!(
            port_counters(&root, "mlx5_0", 1).unwrap(),
            vec![
                ("port_rcv_data".into(), 99),
                ("port_xmit_data".into(), 1234)
            ]
        );
        assert!(port_counters(&root, "rxe0", 1).unwrap().is_empty());
        assert!(port_counters(&root, "../x", 1).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
