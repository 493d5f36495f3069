//! The agent's `inspect`: what an operator runs first when a pod has no RDMA. One view of
//! the node: every NIC in the host netns with the RDMA device it pairs with (RDMA netlink port
//! netdev, else sysfs, else node GUID: the same order as ADD), its driver, PCI address, link
//! state and MTU; the RDMA netns mode with what it means for this plugin; a GID table summary
//! per RDMA device; and which NICs are attached to pods (the state dir's records).
//!
//! Read-only: it changes nothing on the node. Gathering (`gather`) is kept apart from printing
//! (`render_table`, `--json`) so the printing is testable on a made-up report: `report.rs`
//! holds the types, `gather.rs` reads the node, `render.rs` prints. `counters.rs` adds the
//! traffic counters of every attached NIC and RDMA device, read by the metrics exporter's
//! collector (`--watch SECS`: two samples, per-second rates).

pub mod counters;
mod gather;
mod render;
mod report;
mod runtime;

pub use gather::mode_guidance;
pub use render::render_table;
pub use report::*;

use crate::error::Result;
use gather::*;
use rdma_host_device_core::node::DEFAULT_STATE_DIR;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

/// `inspect [--json] [--all] [--watch [SECS]] [--state-dir DIR] [--color auto|always|never]`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The report as JSON, for machines
    #[arg(long)]
    pub json: bool,
    /// Also list virtual links without RDMA
    #[arg(long, short = 'a')]
    pub all: bool,
    /// Colour the table: auto is only on a terminal, and not with NO_COLOR set
    #[arg(long, alias = "colour", value_name = "WHEN", value_enum, default_value_t = Color::Auto)]
    pub color: Color,
    /// Same as --color never
    #[arg(long, hide = true)]
    pub no_color: bool,
    /// The attachments' state directory [default: the node configuration's stateDir,
    /// /var/lib/cni/rdma-host-device]
    #[arg(long, value_name = "DIR", value_parser = crate::flags::absolute_path,
          default_value_os_t = default_state_dir(), hide_default_value = true)]
    pub state_dir: PathBuf,
    /// Sample the counters twice, SECS apart (default 2), and show per-second rates
    #[arg(long, short = 'w', value_name = "SECS", num_args = 0..=1, default_missing_value = "2",
          value_parser = watch_interval)]
    pub watch: Option<std::time::Duration>,
    /// The runtime's NRI socket, as the runtime sees it
    #[arg(long, value_name = "PATH", default_value = crate::nri::DEFAULT_SOCKET,
          value_parser = crate::flags::absolute_path, hide = true)]
    pub nri_socket: PathBuf,
    /// Our CDI spec, as the runtime sees it
    #[arg(long, value_name = "FILE", default_value = crate::cdi::DEFAULT_SPEC,
          value_parser = crate::flags::absolute_path, hide = true)]
    pub cdi_spec: PathBuf,
}

/// The node configuration's `stateDir` (the default when that cannot be read).
fn default_state_dir() -> PathBuf {
    rdma_host_device_core::node::Node::load()
        .map(|n| n.state_dir)
        .unwrap_or_else(|_| PathBuf::from(DEFAULT_STATE_DIR))
}

/// `--watch`'s SECS: 0.1 to 3600 seconds.
fn watch_interval(s: &str) -> std::result::Result<std::time::Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|s| (0.1..=3600.0).contains(s))
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("{s:?}: want seconds, 0.1 to 3600"))
}

// ---------------------------------------------------------------- entry point

/// Run `inspect`: the report on stdout, as a table or JSON.
pub fn run(opts: &Options) -> Result<()> {
    let mut report = gather(opts)?;
    let first = counters::sample(&opts.state_dir);
    let second = opts.watch.map(|d| {
        std::thread::sleep(d);
        counters::sample(&opts.state_dir)
    });
    counters::fill(&mut report, &first, second.as_ref());
    if opts.json {
        let s = serde_json::to_string_pretty(&report)
            .map_err(|e| crate::error::failed("cannot print JSON", e))?;
        println!("{s}");
    } else {
        let color = match opts.color {
            _ if opts.no_color => false,
            Color::Always => true,
            Color::Never => false,
            Color::Auto => stdout_is_terminal(),
        };
        print!("{}", render_table(&report, color));
    }
    Ok(())
}

fn stdout_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1;
    tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

#[cfg(test)]
mod tests {
    use super::render::{GREEN, RED};
    use super::*;
    use rdma_host_device_core::rdma::netlink::NetnsMode;

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
                    counters: None,
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
                    counters: None,
                    notes: vec![],
                },
            ],
            unpaired_rdma_devices: vec![],
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            state_error: None,
            hidden_links: 3,
            counter_errors: Default::default(),
            runtimes: Vec::new(),
            ipam_confinement: report::IpamConfinement::with(
                Some(6),
                &rdma_host_device_core::node::Node::default(),
            ),
        }
    }

    fn options(a: &[&str]) -> std::result::Result<Options, clap::Error> {
        use clap::{Args, FromArgMatches};
        let cmd = Options::augment_args(clap::Command::new("inspect"));
        Options::from_arg_matches(&cmd.try_get_matches_from(["inspect"].iter().chain(a))?)
    }

    #[test]
    fn inspect_flags() {
        let o = options(&["--json", "--all", "--state-dir", "/x"]).unwrap();
        assert!(o.json && o.all);
        assert_eq!(o.state_dir, PathBuf::from("/x"));
        let o = options(&["--state-dir=/y", "--color=never"]).unwrap();
        assert_eq!(o.state_dir, PathBuf::from("/y"));
        assert_eq!(o.color, Color::Never);
        assert!(options(&["--state-dir"]).is_err());
        assert!(options(&["--state-dir", "rel"]).is_err());
        assert!(options(&["--bogus"]).is_err());
        let e = options(&["--color", "purple"]).unwrap_err().to_string();
        assert!(e.contains("[possible values: auto, always, never]"), "{e}");
        assert!(options(&["--no-color"]).unwrap().no_color);
        assert_eq!(options(&["--colour=always"]).unwrap().color, Color::Always);
        assert_eq!(options(&[]).unwrap().watch, None);
        let secs = |a: &[&str]| options(a).map(|o| o.watch.unwrap().as_secs_f64());
        assert_eq!(secs(&["--watch"]).unwrap(), 2.0);
        assert_eq!(secs(&["--watch", "--json"]).unwrap(), 2.0);
        assert_eq!(secs(&["--watch", "0.5", "--json"]).unwrap(), 0.5);
        assert_eq!(secs(&["--watch=5"]).unwrap(), 5.0);
        assert!(options(&["--watch=0"]).is_err());
        assert!(options(&["--watch=x"]).is_err());
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
    fn names_a_pod_chose_reach_the_terminal_escaped() {
        // A pod renames its interface, and in shared mode any RDMA device, to escape sequences
        // (clear the screen, set the window title, move the cursor over other rows).
        let mut r = report();
        r.nics[0].name = "e\x1b[2Jx".into();
        if let Some(d) = &mut r.nics[0].rdma {
            d.device = "m\x1b]0;owned\x07\u{202e}".into();
        }
        r.nics[0].notes.push("note \x1b[1A\rfake row".into());
        if let Some(a) = &mut r.nics[1].attachment {
            a.ifname = "p\x1b[31m".into();
        }
        let plain = render_table(&r, false);
        assert!(
            !plain.contains('\x1b') && !plain.contains('\x07') && !plain.contains('\r'),
            "{plain}"
        );
        assert!(!plain.contains('\u{202e}'), "{plain}");
        assert!(plain.contains("e\\u{1b}[2Jx"), "{plain}");
        assert!(plain.contains("note \\u{1b}[1A\\rfake row"), "{plain}");
        // With colour the only escapes are the colours: still the plain table underneath.
        assert_eq!(strip_ansi(&render_table(&r, true)), plain);
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
    fn whether_ipam_plugins_are_confined_is_said_and_unconfined_is_red() {
        let t = render_table(&report(), false);
        assert!(
            t.contains("IPAM plugins: confined by the kernel (Landlock ABI 6"),
            "{t}"
        );
        let mut r = report();
        let mut node = rdma_host_device_core::node::Node::default();
        r.ipam_confinement = IpamConfinement::with(None, &node);
        let t = render_table(&r, true);
        assert!(t.contains(&format!("{RED}IPAM plugins: this kernel has no Landlock: every network with an `ipam` is refused")), "{t}");
        node.ipam_confinement = rdma_host_device_core::node::Confinement::BestEffort;
        r.ipam_confinement = IpamConfinement::with(None, &node);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["ipamConfinement"]["policy"], "bestEffort");
        assert!(
            v["ipamConfinement"]["warning"]
                .as_str()
                .is_some_and(|w| w.contains("run unconfined")),
            "{v}"
        );
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

    /// The pod row's counters: totals, then the same with rates as `--watch 2` makes them.
    fn with_counters(rates: bool) -> Report {
        let mut r = report();
        let mut c = Counters {
            netdev: Some(Netdev {
                rx_bytes: 2_500,
                rx_packets: 20,
                tx_bytes: 3_100_000,
                tx_packets: 3_000,
            }),
            rdma_device: Some("mlx5_1".into()),
            qps: Some(2),
            ..Default::default()
        };
        let hw = c.hw_counters.entry(1).or_default();
        hw.insert("rdma_sends".into(), 120);
        hw.insert("out_of_sequence".into(), 0);
        if rates {
            let before = Counters {
                netdev: Some(Netdev {
                    rx_bytes: 2_500,
                    rx_packets: 20,
                    tx_bytes: 100_000,
                    tx_packets: 1_000,
                }),
                hw_counters: [(
                    1,
                    [("rdma_sends".into(), 100), ("out_of_sequence".into(), 0)].into(),
                )]
                .into(),
                ..Default::default()
            };
            c.rates = Some(counters::rates(&before, &c, 2.0));
        }
        r.nics[1].counters = Some(c);
        r
    }

    #[test]
    fn counters_show_totals_and_with_watch_per_second_rates() {
        let t = render_table(&with_counters(false), false);
        assert!(
            t.contains("Traffic counters (totals; --watch SECS for rates)"),
            "{t}"
        );
        let row = t.lines().rfind(|l| l.starts_with("ens1f1 ")).unwrap();
        let row = row.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            row, "ens1f1 0123456789ab as net1 2.5 kB 20 3.1 MB 3000 mlx5_1 2 rdma_sends 120",
            "{t}"
        );

        let t = render_table(&with_counters(true), false);
        assert!(
            t.contains("Traffic per second over 2.0 s (QPS: now)"),
            "{t}"
        );
        let lines: Vec<&str> = t.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.starts_with("NIC  ") && l.contains("TX PKTS"))
            .unwrap();
        let row = lines[header + 1];
        // Columns line up under their headers.
        let at = |h: &str| lines[header].find(h).unwrap();
        assert!(row[at("TX ")..].starts_with("1.5 MB/s"), "{t}");
        assert!(row[at("TX PKTS")..].starts_with("1000/s"), "{t}");
        assert!(row[at("RX ")..].starts_with("0 B/s"), "{t}");
        assert!(row[at("RX PKTS")..].starts_with("0.0/s"), "{t}");
        assert!(row[at("QPS")..].starts_with("2 "), "{t}");
        assert!(row.ends_with("rdma_sends 10.0/s"), "{t}");
        // Coloured, the same text.
        assert_eq!(strip_ansi(&render_table(&with_counters(true), true)), t);

        let v = serde_json::to_value(with_counters(true)).unwrap();
        let c = &v["nics"][1]["counters"];
        assert_eq!(c["netdev"]["txBytes"], 3_100_000, "{c}");
        assert_eq!(c["qps"], 2);
        assert_eq!(c["hwCounters"]["1"]["rdma_sends"], 120);
        assert_eq!(c["rates"]["intervalSeconds"], 2.0);
        assert_eq!(c["rates"]["netdev"]["txBytes"], 1_500_000.0);
        assert_eq!(c["rates"]["hwCounters"]["1"]["rdma_sends"], 10.0);
        assert!(v["nics"][0].get("counters").is_none());
    }

    #[test]
    fn unit_prefixes() {
        use super::render::bytes;
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(999.0), "999 B");
        assert_eq!(bytes(1_000.0), "1.0 kB");
        assert_eq!(bytes(1_234_567.0), "1.2 MB");
        assert_eq!(bytes(5e15), "5000.0 TB");
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
        assert_eq!(rdma_host_device_core::sysfs::ethtool_driver("lo"), None);
        assert_eq!(
            rdma_host_device_core::sysfs::ethtool_driver("no-such-if0"),
            None
        );
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
