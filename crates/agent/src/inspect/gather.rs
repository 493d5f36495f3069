//! Gathering the inspect report from the kernel (rtnetlink, RDMA netlink, verbs, sysfs) and
//! the state dir. Read-only.

use super::*;
use rdma_host_device_core::link::{LinkInfo, Links};
use rdma_host_device_core::rdma::netlink::{
    NetnsMode, RdmaDevice, RdmaNlError, RdmaPort, RdmaSocket,
};
use rdma_host_device_core::rdma::pair;
use rdma_host_device_core::rdma::verbs::{self, GidType, PortState, Source};
use rdma_host_device_core::state::{Record, Store, Tag};
use rdma_host_device_core::sysfs;
use std::collections::BTreeMap;
use std::path::Path;
use tokio::runtime::Runtime;

// ---------------------------------------------------------------- gathering

/// What RDMA netlink said, once for the whole report.
struct RdmaView {
    mode: Option<NetnsMode>,
    devices: Vec<RdmaDevice>,
    ports: Vec<RdmaPort>,
}

pub(super) fn gather(opts: &Options) -> Result<Report> {
    // One runtime for every netlink question `inspect` asks (the rtnetlink handle is async).
    let rt = crate::async_rt::current_thread()?;
    let links = host_links(&rt)?;
    let (rdma_view, mut summary) = rdma_view();
    let (records, state_error) = match Store::new(&opts.state_dir).all() {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };

    let mut gid_cache: BTreeMap<String, GidQuery> = BTreeMap::new();
    let mut nics = Vec::new();
    let mut paired_devices: Vec<String> = Vec::new();
    let mut hidden_links = 0;
    for l in links.iter().filter(|l| l.name != "lo") {
        let tag = l.alias.as_deref().and_then(Tag::decode);
        let rdma = rdma_view
            .as_ref()
            .and_then(|v| pair_in_view(v, l))
            .map(|(dev, port, how)| {
                paired_devices.push(dev.name.clone());
                rdma_row(&dev, port, Some(how), rdma_view.as_ref(), &mut gid_cache)
            });
        let has_device = sysfs::has_device(&l.name);
        let displaced = l
            .alias
            .as_deref()
            .and_then(rdma_host_device_core::state::displaced_from)
            .filter(|own| *own != l.name);
        if !(opts.all || has_device || rdma.is_some() || tag.is_some() || displaced.is_some()) {
            hidden_links += 1;
            continue;
        }
        let mut notes = Vec::new();
        let stale = records.iter().find(|r| r.mac == l.mac && !l.mac.is_empty());
        if let Some(r) = stale {
            notes.push(format!(
                "a state record says container {} holds this NIC as {}, but it is on the host: the pod's netns is gone; the next DEL or GC for that container cleans up",
                super::render::short_id(&r.container_id),
                r.ifname
            ));
        } else if let Some(t) = &tag {
            notes.push(format!(
                "came back from a pod deleted without DEL (originally {}, MTU {}); the next ADD that selects it restores it",
                t.host_name, t.host_mtu
            ));
        }
        if let Some(own) = displaced {
            notes.push(format!(
                "came home from a pod under this name because its own, {own}, was taken on the host (by a link another pod may have made there, through a network namespace id); once {own} is free: ip link set {} name {own}",
                l.name
            ));
        }
        if let Some(r) = &rdma
            && let Some(s) = &r.port_state
            && s != "ACTIVE"
        {
            notes.push(format!(
                "RDMA port {} is {s}: ADD's GID check will fail until the link has carrier",
                r.port.unwrap_or(1)
            ));
        }
        nics.push(NicRow {
            name: l.name.clone(),
            ifindex: Some(l.index),
            mac: l.mac.clone(),
            driver: sysfs::nic_driver(&l.name),
            pci: rdma_host_device_core::sysfs::pci_of(&l.name),
            location: "host",
            oper_state: sysfs::operstate(&l.name),
            admin_up: Some(l.up),
            mtu: Some(l.mtu),
            rdma,
            attachment: None,
            counters: None,
            notes,
        });
    }

    // NICs in pods: known from the state records (their netdevs are not in this netns).
    for r in &records {
        if links.iter().any(|l| l.mac == r.mac && !r.mac.is_empty()) {
            continue;
        }
        let rdma = r.rdma_device.as_deref().map(|name| {
            let dev = rdma_view
                .as_ref()
                .and_then(|v| v.devices.iter().find(|d| d.name == name).cloned());
            match dev {
                Some(dev) => {
                    paired_devices.push(dev.name.clone());
                    // Port state and GIDs as seen from the host: in shared mode the device is
                    // visible here; its GIDs follow the NIC's addresses in the pod.
                    rdma_row(
                        &dev,
                        None,
                        Some("state record"),
                        rdma_view.as_ref(),
                        &mut gid_cache,
                    )
                }
                None => RdmaRow {
                    device: name.to_owned(),
                    driver: None,
                    protocol: None,
                    port: None,
                    port_state: None,
                    paired_by: Some("state record"),
                    gids: None,
                    gid_error: Some(if r.rdma_moved || r.soft_device.is_some() {
                        "in the pod's netns: not visible from the host".to_owned()
                    } else {
                        "not visible from the host".to_owned()
                    }),
                },
            }
        });
        let inside = pod_link(&rt, r);
        let mut notes = Vec::new();
        if let Some((l, held_by)) = orphaned(&rt, r) {
            notes.push(format!(
                "the pod's netns path {} is gone, but the NIC is still in its namespace as {} ({held_by}): DEL fails with 11, keeping the IP and the state, until that is over",
                r.netns, l.name
            ));
        }
        nics.push(NicRow {
            name: r.host_name.clone(),
            ifindex: None,
            mac: r.mac.clone(),
            driver: r.pci.as_deref().and_then(sysfs::pci_driver),
            pci: r.pci.clone(),
            location: "pod",
            oper_state: None,
            admin_up: inside.as_ref().map(|l| l.up),
            mtu: inside.as_ref().map(|l| l.mtu),
            rdma,
            attachment: Some(Attachment::from(r)),
            counters: None,
            notes,
        });
    }

    // Lost NICs whose name is not UTF-8: invisible to the link dump above.
    for u in rdma_host_device_core::link::unreadable_links().unwrap_or_default() {
        let Some(tag) = u.alias.as_deref().and_then(Tag::decode) else {
            continue;
        };
        nics.push(NicRow {
            name: u.shown(),
            ifindex: Some(u.index),
            mac: String::new(),
            driver: None,
            pci: None,
            location: "host",
            oper_state: None,
            admin_up: None,
            mtu: None,
            rdma: None,
            attachment: None,
            counters: None,
            notes: vec![format!(
                "came back from a pod deleted without DEL (originally {}) under a name that is not UTF-8; the next ADD, GC or STATUS renames it rhd{} and restores it",
                tag.host_name, u.index
            )],
        });
    }

    let mut unpaired = Vec::new();
    if let Some(v) = &rdma_view {
        for d in &v.devices {
            if !paired_devices.contains(&d.name) {
                unpaired.push(rdma_row(d, None, None, Some(v), &mut gid_cache));
            }
        }
    }
    if verbs::verbs_available() {
        summary.gid_source = "libibverbs";
    }
    Ok(Report {
        node: sysfs::read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default(),
        plugin_version: env!("CARGO_PKG_VERSION"),
        rdma: summary,
        nics,
        unpaired_rdma_devices: unpaired,
        state_dir: opts.state_dir.clone(),
        state_error,
        hidden_links,
        counter_errors: BTreeMap::new(),
        runtimes: super::runtime::runtimes(
            Path::new("/proc"),
            super::runtime::Paths {
                nri_socket: &opts.nri_socket,
                cdi_spec: &opts.cdi_spec,
            },
        ),
        ipam_confinement: super::report::IpamConfinement::of(
            &rdma_host_device_core::node::Node::load().unwrap_or_default(),
        ),
    })
}

/// Where an attached NIC is when its pod's netns path is gone but a process keeps the netns.
fn orphaned(rt: &Runtime, r: &Record) -> Option<(LinkInfo, String)> {
    if r.netns.is_empty() || Path::new(&r.netns).exists() {
        return None;
    }
    rt.block_on(rdma_host_device::flows::orphaned_nic(r))
}

/// The attached NIC as the pod sees it (by its MAC), if the pod's netns is still there.
fn pod_link(rt: &Runtime, r: &Record) -> Option<LinkInfo> {
    let ns = rdma_host_device_core::netns::Netns::open(Path::new(&r.netns)).ok()?;
    rt.block_on(async {
        let links = Links::open_in(&ns).ok()?;
        links
            .all()
            .await
            .ok()?
            .into_iter()
            .find(|l| !r.mac.is_empty() && l.mac == r.mac)
    })
}

fn host_links(rt: &Runtime) -> Result<Vec<LinkInfo>> {
    rt.block_on(async {
        let links = Links::open()?;
        let mut all = links.all().await?;
        all.sort_by_key(|l| l.index);
        Ok(all)
    })
}

fn rdma_view() -> (Option<RdmaView>, RdmaSummary) {
    let mut summary = RdmaSummary {
        available: false,
        netns_mode: None,
        gid_source: "sysfs",
        error: None,
        guidance: Vec::new(),
    };
    let mut sock = match RdmaSocket::open() {
        Ok(s) => s,
        Err(e @ RdmaNlError::Unavailable(_)) => {
            summary.error = Some(e.to_string());
            summary.guidance = vec![
                "RDMA netlink cannot be opened: ib_core is not loaded (or not built) in this kernel."
                    .into(),
                "Networks that need RDMA (rdmaDevice, rdma.softDevice, rdma.isolation \"exclusive\") fail ADD with code 110 here; others attach the NIC without RDMA.".into(),
                "To enable: load the NIC's RDMA driver (mlx5_ib, irdma, bnxt_re, erdma, ...; it pulls in ib_core), or `modprobe rdma_rxe` / `siw` for software RDMA.".into(),
            ];
            return (None, summary);
        }
        Err(e) => {
            summary.error = Some(e.to_string());
            summary.guidance = vec![format!("RDMA netlink failed: {e}")];
            return (None, summary);
        }
    };
    summary.available = true;
    let mut view = RdmaView {
        mode: None,
        devices: Vec::new(),
        ports: Vec::new(),
    };
    let mut errors = Vec::new();
    match sock.netns_mode() {
        Ok(m) => view.mode = Some(m),
        Err(e) => errors.push(format!("netns mode: {e}")),
    }
    match sock.devices() {
        Ok(d) => view.devices = d,
        Err(e) => errors.push(format!("devices: {e}")),
    }
    match sock.ports() {
        Ok(p) => view.ports = p,
        Err(e) => errors.push(format!("ports: {e}")),
    }
    if !errors.is_empty() {
        summary.error = Some(errors.join("; "));
    }
    summary.netns_mode = view.mode.map(NetnsMode::name);
    summary.guidance = mode_guidance(view.mode, view.devices.is_empty());
    (Some(view), summary)
}

/// What the netns mode means for networks using this plugin (the DaemonSet logs this too).
pub fn mode_guidance(mode: Option<NetnsMode>, no_devices: bool) -> Vec<String> {
    let mut g = Vec::new();
    match mode {
        Some(NetnsMode::Shared) => {
            g.push("RDMA netns mode: shared (the kernel default). Every pod sees every RDMA device; the plugin moves the NIC and leaves its RDMA device in place (rdma.isolation \"auto\"), and rdma.softDevice works.".into());
            g.push("For per-pod RDMA isolation (rdma.isolation \"exclusive\", else ADD fails with code 111): `options ib_core netns_mode=0` in /etc/modprobe.d/ib_core.conf, update the initramfs, reboot (or boot with ib_core.netns_mode=0).".into());
        }
        Some(NetnsMode::Exclusive) => {
            g.push("RDMA netns mode: exclusive. A pod sees only the RDMA devices moved into it; the plugin moves the NIC's RDMA device with the NIC (drivers that can: mlx4, mlx5, hns, irdma, erdma; others fail ADD with code 112).".into());
            g.push(
                "rdma.softDevice (rxe/siw) needs shared mode: ADD fails with code 111 here.".into(),
            );
        }
        None => g.push(
            "RDMA netns mode: unknown (the kernel did not answer RDMA_NLDEV_CMD_SYS_GET)".into(),
        ),
    }
    if no_devices {
        g.push("No RDMA devices: load the NIC's RDMA driver, or use rdma.softDevice (rxe/siw) for NICs without RDMA hardware.".into());
    }
    g
}

/// The RDMA device (and port) paired with host link `l`, by ADD's own rules (`pair_from`);
/// a NIC that pairs ambiguously shows no pairing, as ADD would refuse it.
fn pair_in_view(v: &RdmaView, l: &LinkInfo) -> Option<(RdmaDevice, Option<u32>, &'static str)> {
    let nic = pair::Nic {
        index: l.index,
        name: &l.name,
        mac: &l.mac,
    };
    match pair::pair_from(&v.devices, &v.ports, &nic) {
        Ok(found) => found.map(|p| (p.device, p.port, p.how)),
        Err(e) => {
            log::warn!("{}", e.msg);
            None
        }
    }
}

/// One RDMA device's verbs query, asked once per report.
type GidQuery = std::result::Result<verbs::DeviceReport, verbs::VerbsError>;

fn rdma_row(
    dev: &RdmaDevice,
    port: Option<u32>,
    paired_by: Option<&'static str>,
    view: Option<&RdmaView>,
    gid_cache: &mut BTreeMap<String, GidQuery>,
) -> RdmaRow {
    let nl_port = view.and_then(|v| {
        v.ports
            .iter()
            .find(|p| p.dev_name == dev.name && port.is_none_or(|n| p.port == n))
    });
    let report = gid_cache
        .entry(dev.name.clone())
        .or_insert_with(|| verbs::query_device(&dev.name));
    let (gids, gid_error) = match report {
        Ok(r) => (Some(gid_summary(r, port)), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let port_state = nl_port
        .and_then(|p| p.state)
        .map(|s| PortState::from_raw(u32::from(s)).to_string())
        .or_else(|| {
            report.as_ref().ok().and_then(|r| {
                r.ports
                    .iter()
                    .find(|p| port.is_none_or(|n| p.port == n))
                    .map(|p| p.state.to_string())
            })
        });
    RdmaRow {
        device: dev.name.clone(),
        driver: dev.driver.clone(),
        protocol: dev.protocol.clone(),
        port: port.or(nl_port.map(|p| p.port)),
        port_state,
        paired_by,
        gids,
        gid_error,
    }
}

fn gid_summary(r: &verbs::DeviceReport, port: Option<u32>) -> GidSummary {
    let on_port = || r.gids.iter().filter(|g| port.is_none_or(|p| g.port == p));
    GidSummary {
        total: on_port().count(),
        roce_v2: on_port().filter(|g| g.gid_type == GidType::RoceV2).count(),
        roce_v1: on_port().filter(|g| g.gid_type == GidType::RoceV1).count(),
        roce_v2_ipv4: on_port()
            .filter(|g| g.gid_type == GidType::RoceV2 && g.gid.to_ipv4_mapped().is_some())
            .count(),
        source: match r.source {
            Source::Verbs => "verbs",
            Source::Sysfs => "sysfs",
        },
    }
}
