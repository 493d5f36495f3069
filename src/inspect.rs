//! `rdma-host-device inspect`: what an operator runs first when a pod has no RDMA. One view of
//! the node: every NIC in the host netns with the RDMA device it pairs with (RDMA netlink port
//! netdev, else sysfs, else node GUID: the same order as ADD), its driver, PCI address, link
//! state and MTU; the RDMA netns mode with what it means for this plugin; a GID table summary
//! per RDMA device; and which NICs are attached to pods (the state dir's records).
//!
//! Read-only: it changes nothing on the node. Gathering (`gather`) is kept apart from printing
//! (`render_table`, `--json`) so the printing is testable on a made-up report.

use crate::link::{LinkInfo, Links};
use crate::node::DEFAULT_STATE_DIR;
use crate::rdma::netlink::{NetnsMode, RdmaDevice, RdmaNlError, RdmaPort, RdmaSocket};
use crate::rdma::pair;
use crate::rdma::verbs::{self, GidType, PortState, Source};
use crate::state::{Record, Store, Tag};
use crate::sysfs;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub json: bool,
    pub all: bool,
    pub color: Color,
    pub state_dir: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            json: false,
            all: false,
            color: Color::Auto,
            state_dir: crate::node::Node::load()
                .map(|n| n.state_dir)
                .unwrap_or_else(|_| PathBuf::from(DEFAULT_STATE_DIR)),
        }
    }
}

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

// ---------------------------------------------------------------- entry point

/// Run `inspect`; returns the process exit code.
pub fn run(opts: &Options) -> i32 {
    let report = match gather(opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rdma-host-device inspect: {e}");
            return 1;
        }
    };
    if opts.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("rdma-host-device inspect: cannot print JSON: {e}");
                return 1;
            }
        }
    } else {
        let color = match opts.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => stdout_is_terminal(),
        };
        print!("{}", render_table(&report, color));
    }
    0
}

fn stdout_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1;
    tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

// ---------------------------------------------------------------- gathering

/// What RDMA netlink said, once for the whole report.
struct RdmaView {
    mode: Option<NetnsMode>,
    devices: Vec<RdmaDevice>,
    ports: Vec<RdmaPort>,
}

fn gather(opts: &Options) -> Result<Report, String> {
    let links = host_links()?;
    let (rdma_view, mut summary) = rdma_view();
    let (records, state_error) = match Store::new(&opts.state_dir).all() {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };

    let mut gid_cache: BTreeMap<String, Result<verbs::DeviceReport, String>> = BTreeMap::new();
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
        let has_device = Path::new("/sys/class/net")
            .join(&l.name)
            .join("device")
            .exists();
        if !(opts.all || has_device || rdma.is_some() || tag.is_some()) {
            hidden_links += 1;
            continue;
        }
        let mut notes = Vec::new();
        let stale = records.iter().find(|r| r.mac == l.mac && !l.mac.is_empty());
        if let Some(r) = stale {
            notes.push(format!(
                "a state record says container {} holds this NIC as {}, but it is on the host: the pod's netns is gone; the next DEL or GC for that container cleans up",
                short_id(&r.container_id),
                r.ifname
            ));
        } else if let Some(t) = &tag {
            notes.push(format!(
                "came back from a pod deleted without DEL (originally {}, MTU {}); the next ADD that selects it restores it",
                t.host_name, t.host_mtu
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
            pci: crate::sysfs::pci_of(&l.name),
            location: "host",
            oper_state: sysfs::read_trimmed(&format!("/sys/class/net/{}/operstate", l.name)),
            admin_up: Some(l.up),
            mtu: Some(l.mtu),
            rdma,
            attachment: None,
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
        let inside = pod_link(r);
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
            notes: Vec::new(),
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
    })
}

/// The attached NIC as the pod sees it (by its MAC), if the pod's netns is still there.
fn pod_link(r: &Record) -> Option<LinkInfo> {
    let ns = crate::netns::Netns::open(Path::new(&r.netns)).ok()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .ok()?;
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

fn host_links() -> Result<Vec<LinkInfo>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(async {
        let links = Links::open().map_err(|e| e.to_string())?;
        let mut all = links.all().await.map_err(|e| e.to_string())?;
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
    summary.netns_mode = view.mode.map(mode_name);
    summary.guidance = mode_guidance(view.mode, view.devices.is_empty());
    (Some(view), summary)
}

fn mode_name(m: NetnsMode) -> &'static str {
    match m {
        NetnsMode::Shared => "shared",
        NetnsMode::Exclusive => "exclusive",
    }
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

fn rdma_row(
    dev: &RdmaDevice,
    port: Option<u32>,
    paired_by: Option<&'static str>,
    view: Option<&RdmaView>,
    gid_cache: &mut BTreeMap<String, Result<verbs::DeviceReport, String>>,
) -> RdmaRow {
    let nl_port = view.and_then(|v| {
        v.ports
            .iter()
            .find(|p| p.dev_name == dev.name && port.is_none_or(|n| p.port == n))
    });
    let report = gid_cache
        .entry(dev.name.clone())
        .or_insert_with(|| verbs::query_device(&dev.name).map_err(|e| e.to_string()));
    let (gids, gid_error) = match report {
        Ok(r) => (Some(gid_summary(r, port)), None),
        Err(e) => (None, Some(e.clone())),
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

fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

// ---------------------------------------------------------------- printing

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const DIM: &str = "\x1b[2m";

/// One table cell: its text and the colour it gets on a terminal.
struct Cell {
    text: String,
    color: Option<&'static str>,
}

fn cell(text: impl Into<String>) -> Cell {
    Cell {
        text: text.into(),
        color: None,
    }
}

fn colored(text: impl Into<String>, color: &'static str) -> Cell {
    Cell {
        text: text.into(),
        color: Some(color),
    }
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

const HEADERS: [&str; 9] = [
    "NIC",
    "DRIVER",
    "PCI",
    "LINK",
    "MTU",
    "RDMA",
    "PORT",
    "ROCEv2 GIDS",
    "POD",
];

fn nic_cells(n: &NicRow) -> Vec<Cell> {
    let link = match (n.location, n.admin_up, n.oper_state.as_deref()) {
        ("pod", Some(true), _) => colored("in pod, up", YELLOW),
        ("pod", Some(false), _) => colored("in pod, down", RED),
        ("pod", ..) => colored("in pod", YELLOW),
        (_, Some(false), _) => colored("down (admin)", RED),
        (_, _, Some("up")) => colored("up", GREEN),
        // veth, tun and friends report "unknown" while passing traffic.
        (_, _, Some("unknown")) => cell("up (no carrier info)"),
        (_, _, Some(s)) => colored(s, RED),
        (_, _, None) => cell("-"),
    };
    let (rdma, port, gids) = match &n.rdma {
        None => (colored("none", DIM), cell("-"), cell("-")),
        Some(r) => {
            let name = match &r.driver {
                Some(d) => format!("{} ({d})", r.device),
                None => r.device.clone(),
            };
            let port = match (&r.port_state, r.port) {
                (Some(s), Some(p)) => {
                    let c = if s == "ACTIVE" { GREEN } else { RED };
                    colored(format!("{p} {s}"), c)
                }
                (Some(s), None) => cell(s.clone()),
                (None, Some(p)) => cell(p.to_string()),
                (None, None) => cell("-"),
            };
            let gids = match (&r.gids, &r.gid_error) {
                (Some(g), _) if r.protocol.as_deref() == Some("iw") => {
                    cell(format!("n/a (iWARP, {} GID)", g.total))
                }
                (Some(g), _) => {
                    let c = if g.roce_v2 > 0 { GREEN } else { YELLOW };
                    colored(format!("{} of {}", g.roce_v2, g.total), c)
                }
                (None, Some(_)) => colored("unreadable", RED),
                (None, None) => cell("-"),
            };
            (cell(name), port, gids)
        }
    };
    let pod = match &n.attachment {
        Some(a) => colored(
            format!("{} as {}", short_id(&a.container_id), a.ifname),
            YELLOW,
        ),
        None => cell("-"),
    };
    vec![
        cell(n.name.clone()),
        cell(dash(n.driver.as_ref())),
        cell(dash(n.pci.as_ref())),
        link,
        cell(dash(n.mtu)),
        rdma,
        port,
        gids,
        pod,
    ]
}

/// Append `text`, coloured when `use_color`; a trailing newline stays outside the colour.
fn paint(out: &mut String, text: &str, color: Option<&str>, use_color: bool) {
    match color {
        Some(c) if use_color => {
            let (body, nl) = match text.strip_suffix('\n') {
                Some(b) => (b, "\n"),
                None => (text, ""),
            };
            out.push_str(c);
            out.push_str(body);
            out.push_str(RESET);
            out.push_str(nl);
        }
        _ => out.push_str(text),
    }
}

fn render_rows(out: &mut String, headers: &[&str], rows: &[Vec<Cell>], color: bool) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.text.chars().count());
        }
    }
    let last = headers.len() - 1;
    for (i, h) in headers.iter().enumerate() {
        let text = if i == last {
            h.to_string()
        } else {
            format!("{h:<w$}  ", w = widths[i])
        };
        paint(out, &text, Some(BOLD), color);
    }
    out.push('\n');
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            paint(out, &c.text, c.color, color);
            if i != last {
                let pad = widths[i] - c.text.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
}

/// The human view of `r`; `color` adds ANSI colours (only ever on a terminal).
pub fn render_table(r: &Report, color: bool) -> String {
    let mut out = String::new();
    paint(
        &mut out,
        &format!(
            "rdma-host-device {} inspect on {}\n",
            r.plugin_version,
            if r.node.is_empty() {
                "this node"
            } else {
                &r.node
            }
        ),
        Some(BOLD),
        color,
    );
    let head = if !r.rdma.available {
        colored("RDMA: not available in this kernel", RED)
    } else {
        let mode = r.rdma.netns_mode.unwrap_or("unknown");
        cell(format!(
            "RDMA: netns mode {mode}; GID tables read via {}",
            r.rdma.gid_source
        ))
    };
    paint(&mut out, &head.text, head.color, color);
    out.push('\n');
    for g in &r.rdma.guidance {
        paint(&mut out, &format!("  {g}\n"), Some(DIM), color);
    }
    if let Some(e) = &r.rdma.error
        && r.rdma.available
    {
        paint(
            &mut out,
            &format!("  RDMA netlink: {e}\n"),
            Some(RED),
            color,
        );
    }
    out.push('\n');

    if r.nics.is_empty() {
        out.push_str("No NICs to show");
        if r.hidden_links > 0 {
            out.push_str(&format!(
                " ({} virtual link{} hidden: --all shows them)",
                r.hidden_links,
                if r.hidden_links == 1 { "" } else { "s" }
            ));
        }
        out.push_str(".\n");
    } else {
        let rows: Vec<Vec<Cell>> = r.nics.iter().map(nic_cells).collect();
        render_rows(&mut out, &HEADERS, &rows, color);
        if r.hidden_links > 0 {
            paint(
                &mut out,
                &format!(
                    "({} virtual link{} without RDMA hidden: --all shows them)\n",
                    r.hidden_links,
                    if r.hidden_links == 1 { "" } else { "s" }
                ),
                Some(DIM),
                color,
            );
        }
    }

    if !r.unpaired_rdma_devices.is_empty() {
        out.push_str("\nRDMA devices with no NIC in this netns:\n");
        let rows: Vec<Vec<Cell>> = r
            .unpaired_rdma_devices
            .iter()
            .map(|d| {
                vec![
                    cell(d.device.clone()),
                    cell(dash(d.driver.as_ref())),
                    cell(dash(d.protocol.as_ref())),
                    cell(dash(d.port_state.as_ref())),
                    cell(
                        d.gids
                            .as_ref()
                            .map_or("-".into(), |g| format!("{} of {}", g.roce_v2, g.total)),
                    ),
                ]
            })
            .collect();
        render_rows(
            &mut out,
            &["RDMA", "DRIVER", "PROTOCOL", "PORT", "ROCEv2 GIDS"],
            &rows,
            color,
        );
    }

    let mut notes: Vec<String> = Vec::new();
    for n in &r.nics {
        for note in &n.notes {
            notes.push(format!("{}: {note}", n.name));
        }
        if let Some(rd) = &n.rdma
            && let Some(e) = &rd.gid_error
        {
            notes.push(format!("{} ({}): GID table: {e}", n.name, rd.device));
        }
        if let Some(a) = &n.attachment {
            notes.push(format!(
                "{}: attached to container {} as {} in {} (network {}{})",
                n.name,
                a.container_id,
                a.ifname,
                a.netns,
                a.network,
                match (&a.soft_device, a.rdma_moved) {
                    (Some(s), _) => format!(", software RDMA device {s}"),
                    (None, true) => ", RDMA device moved with it".to_owned(),
                    (None, false) => String::new(),
                }
            ));
        }
    }
    if let Some(e) = &r.state_error {
        notes.push(format!("attachments unknown: {e}"));
    }
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&format!("- {n}\n"));
        }
    }
    let ready = r
        .nics
        .iter()
        .filter(|n| n.location == "host")
        .filter(|n| {
            n.rdma
                .as_ref()
                .is_some_and(|d| d.port_state.as_deref() == Some("ACTIVE"))
        })
        .count();
    out.push('\n');
    let summary = format!(
        "{ready} host NIC(s) ready for RDMA (paired, port ACTIVE); {} attached to pods; state dir {}\n",
        r.nics.iter().filter(|n| n.attachment.is_some()).count(),
        r.state_dir.display()
    );
    paint(
        &mut out,
        &summary,
        Some(if ready > 0 { GREEN } else { YELLOW }),
        color,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            node: "node-1".into(),
            plugin_version: "0.1.0",
            rdma: RdmaSummary {
                available: true,
                netns_mode: Some("shared"),
                gid_source: "libibverbs",
                error: None,
                guidance: mode_guidance(Some(NetnsMode::Shared), false),
            },
            nics: vec![
                NicRow {
                    name: "ens1f0".into(),
                    ifindex: Some(4),
                    mac: "0c:42:a1:00:00:01".into(),
                    driver: Some("mlx5_core".into()),
                    pci: Some("0000:3b:00.0".into()),
                    location: "host",
                    oper_state: Some("up".into()),
                    admin_up: Some(true),
                    mtu: Some(9000),
                    rdma: Some(RdmaRow {
                        device: "mlx5_0".into(),
                        driver: Some("mlx5".into()),
                        protocol: Some("roce".into()),
                        port: Some(1),
                        port_state: Some("ACTIVE".into()),
                        paired_by: Some("rdma netlink port"),
                        gids: Some(GidSummary {
                            total: 4,
                            roce_v2: 2,
                            roce_v1: 2,
                            roce_v2_ipv4: 1,
                            source: "verbs",
                        }),
                        gid_error: None,
                    }),
                    attachment: None,
                    notes: vec![],
                },
                NicRow {
                    name: "ens1f1".into(),
                    ifindex: None,
                    mac: "0c:42:a1:00:00:02".into(),
                    driver: Some("mlx5_core".into()),
                    pci: Some("0000:3b:00.1".into()),
                    location: "pod",
                    oper_state: None,
                    admin_up: None,
                    mtu: None,
                    rdma: None,
                    attachment: Some(Attachment {
                        container_id: "0123456789abcdef0123".into(),
                        ifname: "net1".into(),
                        netns: "/var/run/netns/cni-1".into(),
                        network: "rdma-a".into(),
                        rdma_moved: false,
                        soft_device: None,
                    }),
                    notes: vec![],
                },
            ],
            unpaired_rdma_devices: vec![],
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            state_error: None,
            hidden_links: 3,
        }
    }

    #[test]
    fn table_without_color_has_no_escapes_and_aligns_columns() {
        let t = render_table(&report(), false);
        assert!(!t.contains('\x1b'), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("NIC ")).unwrap();
        let col = lines[header].find("RDMA ").unwrap();
        assert_eq!(&lines[header + 1][col..col + 6], "mlx5_0", "{t}");
        assert!(lines[header + 2].contains("in pod"), "{t}");
        assert!(lines[header + 2].contains("0123456789ab as net1"), "{t}");
        assert!(t.contains("2 of 4"), "{t}");
        assert!(t.contains("1 ACTIVE"), "{t}");
        assert!(t.contains("netns mode shared"), "{t}");
        assert!(t.contains("3 virtual links without RDMA hidden"), "{t}");
        assert!(t.contains("1 host NIC(s) ready for RDMA"), "{t}");
    }

    #[test]
    fn table_with_color_pads_by_visible_width() {
        let plain = render_table(&report(), false);
        let colored = render_table(&report(), true);
        assert!(colored.contains(GREEN));
        let stripped = strip_ansi(&colored);
        assert_eq!(stripped, plain);
    }

    #[test]
    fn no_rdma_is_said_plainly() {
        let mut r = report();
        r.rdma = RdmaSummary {
            available: false,
            netns_mode: None,
            gid_source: "sysfs",
            error: Some("x".into()),
            guidance: vec!["RDMA: not available in this kernel (no ib_core)".into()],
        };
        r.nics.truncate(1);
        r.nics[0].rdma = None;
        let t = render_table(&r, false);
        assert!(t.contains("RDMA: not available in this kernel"), "{t}");
        assert!(t.contains("0 host NIC(s) ready"), "{t}");
    }

    #[test]
    fn json_field_names_are_camel_case() {
        let v = serde_json::to_value(report()).unwrap();
        assert_eq!(v["rdma"]["netnsMode"], "shared");
        assert_eq!(v["nics"][0]["rdma"]["gids"]["roceV2"], 2);
        assert_eq!(
            v["nics"][1]["attachment"]["containerID"],
            "0123456789abcdef0123"
        );
        assert_eq!(v["nics"][1]["location"], "pod");
        assert_eq!(v["unpairedRdmaDevices"], serde_json::json!([]));
    }

    #[test]
    fn guidance_names_the_boot_setting() {
        let g = mode_guidance(Some(NetnsMode::Shared), true).join("\n");
        assert!(g.contains("ib_core netns_mode=0"));
        assert!(g.contains("No RDMA devices"));
        let g = mode_guidance(Some(NetnsMode::Exclusive), false).join("\n");
        assert!(g.contains("code 111"));
    }

    #[test]
    fn ethtool_knows_loopback_or_nothing() {
        // lo has no ethtool driver info; the call must simply answer None, not fail.
        assert_eq!(crate::sysfs::ethtool_driver("lo"), None);
        assert_eq!(crate::sysfs::ethtool_driver("no-such-if0"), None);
    }

    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
