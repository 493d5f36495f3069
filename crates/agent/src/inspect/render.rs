//! Printing the inspect report as an aligned, optionally coloured table for a terminal.
//!
//! Names in it are a pod's to choose (an interface's, an RDMA device's in shared mode) and may
//! hold escape sequences: every cell, note and line passes `logging::line` (escaped, bounded)
//! before it reaches the terminal; the only escapes printed are the colours `paint` adds.

use super::*;
use rdma_host_device_core::logging::{MAX_LINE, line};

// ---------------------------------------------------------------- printing

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
pub(super) const RED: &str = "\x1b[31m";
pub(super) const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const DIM: &str = "\x1b[2m";

/// One table cell: its text and the colour it gets on a terminal.
struct Cell {
    text: String,
    color: Option<&'static str>,
}

/// The most of one cell shown (an escaped name fits).
const MAX_CELL: usize = 160;

fn cell(text: impl Into<String>) -> Cell {
    Cell {
        text: line(&text.into(), MAX_CELL),
        color: None,
    }
}

fn colored(text: impl Into<String>, color: &'static str) -> Cell {
    Cell {
        text: line(&text.into(), MAX_CELL),
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
    let (body, nl) = match text.strip_suffix('\n') {
        Some(b) => (b, "\n"),
        None => (text, ""),
    };
    let body = line(body, MAX_LINE);
    match color {
        Some(c) if use_color => {
            out.push_str(c);
            out.push_str(&body);
            out.push_str(RESET);
        }
        _ => out.push_str(&body),
    }
    out.push_str(nl);
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
    let ic = &r.ipam_confinement;
    match (&ic.warning, ic.landlock_abi) {
        (Some(w), _) => paint(&mut out, &format!("IPAM plugins: {w}\n"), Some(RED), color),
        (None, Some(abi)) => out.push_str(&format!(
            "IPAM plugins: confined by the kernel (Landlock ABI {abi}, seccomp allow-list, own PID, IPC, UTS and cgroup namespaces, {} s deadline)\n",
            ic.timeout_seconds
        )),
        (None, None) => {}
    }
    for rt in &r.runtimes {
        let limit = if rt.memlock_bytes == u64::MAX {
            "unlimited".to_owned()
        } else {
            format!("{} KiB", rt.memlock_bytes / 1024)
        };
        let validator = match rt.nri_validator {
            Some(true) => {
                "; NRI validator on (pods fail-closed.yaml marks wait for the nri container)"
            }
            Some(false) => {
                "; NRI validator off (a pod may start while the nri container is away: docs/deploy.md, \"Fail-closed\")"
            }
            None => "",
        };
        let line = format!(
            "Runtime: {} (pid {}), containers inherit memlock {limit}; NRI socket {} {}{validator}; memlock path: {}\n",
            rt.runtime,
            rt.pid,
            rt.nri_socket,
            if rt.nri { "there" } else { "absent" },
            rt.memlock_path.describe()
        );
        paint(&mut out, &line, rt.advice.as_ref().map(|_| RED), color);
        if let Some(a) = &rt.advice {
            paint(&mut out, &format!("  {a}\n"), Some(DIM), color);
        }
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

    render_counters(&mut out, r, color);

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
    if !r.counter_errors.is_empty() {
        let by: Vec<String> = r
            .counter_errors
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        notes.push(format!(
            "counters: some could not be read ({}; a pod's netns or interface gone, a device without statistics)",
            by.join(", ")
        ));
    }
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&format!("- {}\n", line(&n, MAX_LINE)));
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

const COUNTER_HEADERS: [&str; 9] = [
    "NIC",
    "POD",
    "RX",
    "RX PKTS",
    "TX",
    "TX PKTS",
    "RDMA",
    "QPS",
    "HW COUNTERS",
];

/// The counters table: totals, or per-second rates after `--watch`.
fn render_counters(out: &mut String, r: &Report, color: bool) {
    let with: Vec<(&NicRow, &Counters)> = r
        .nics
        .iter()
        .filter_map(|n| Some((n, n.counters.as_ref()?)))
        .collect();
    if with.is_empty() {
        return;
    }
    let interval = with
        .iter()
        .find_map(|(_, c)| c.rates.as_ref())
        .map(|r| r.interval_seconds);
    out.push('\n');
    let title = match interval {
        Some(s) => format!("Traffic per second over {s:.1} s (QPS: now)\n"),
        None => "Traffic counters (totals; --watch SECS for rates)\n".to_owned(),
    };
    paint(out, &title, Some(BOLD), color);
    let rows: Vec<Vec<Cell>> = with.iter().map(|(n, c)| counter_cells(n, c)).collect();
    render_rows(out, &COUNTER_HEADERS, &rows, color);
}

fn counter_cells(n: &NicRow, c: &Counters) -> Vec<Cell> {
    let pod = match &n.attachment {
        Some(a) => format!("{} as {}", short_id(&a.container_id), a.ifname),
        None => "(host)".to_owned(),
    };
    let netdev: [String; 4] = match (&c.rates, &c.netdev) {
        (Some(r), _) => match &r.netdev {
            Some(nd) => [
                format!("{}/s", bytes(nd.rx_bytes)),
                format!("{}/s", amount(nd.rx_packets)),
                format!("{}/s", bytes(nd.tx_bytes)),
                format!("{}/s", amount(nd.tx_packets)),
            ],
            None => Default::default(),
        },
        (None, Some(nd)) => [
            bytes(nd.rx_bytes as f64),
            nd.rx_packets.to_string(),
            bytes(nd.tx_bytes as f64),
            nd.tx_packets.to_string(),
        ],
        (None, None) => Default::default(),
    };
    let mut cells = vec![cell(n.name.clone()), cell(pod)];
    cells.extend(netdev.into_iter().map(|t| {
        if t.is_empty() {
            colored("-", DIM)
        } else {
            cell(t)
        }
    }));
    cells.push(cell(dash(c.rdma_device.as_ref())));
    cells.push(cell(dash(c.qps)));
    cells.push(cell(hw_summary(c)));
    cells
}

/// The driver counters that moved (rates) or are not zero (totals), at most four.
fn hw_summary(c: &Counters) -> String {
    let name = |port: u32, n: &str| {
        if port == 1 {
            n.to_owned()
        } else {
            format!("p{port} {n}")
        }
    };
    let (total, shown): (usize, Vec<String>) = match &c.rates {
        Some(r) => (
            r.hw_counters.values().map(|m| m.len()).sum(),
            r.hw_counters
                .iter()
                .flat_map(|(p, m)| m.iter().map(move |(n, v)| (*p, n, *v)))
                .filter(|(_, _, v)| *v > 0.0)
                .map(|(p, n, v)| format!("{} {}/s", name(p, n), amount(v)))
                .collect(),
        ),
        None => (
            c.hw_counters.values().map(|m| m.len()).sum(),
            c.hw_counters
                .iter()
                .flat_map(|(p, m)| m.iter().map(move |(n, v)| (*p, n, *v)))
                .filter(|(_, _, v)| *v > 0)
                .map(|(p, n, v)| format!("{} {v}", name(p, n)))
                .collect(),
        ),
    };
    match (total, shown.len()) {
        (0, _) => "-".to_owned(),
        (t, 0) => format!("{t}, all 0"),
        (_, k) if k > 4 => format!("{}, +{} more", shown[..4].join(", "), k - 4),
        _ => shown.join(", "),
    }
}

/// Bytes as people read them (powers of 1000).
pub(super) fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A rate of things: one decimal below 100.
fn amount(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A container ID as people read it: its first 12 characters.
pub(super) fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
