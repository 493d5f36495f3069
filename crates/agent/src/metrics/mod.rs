//! `rdma-host-device-agent metrics --listen ADDR`: a long-running Prometheus exporter (the
//! DaemonSet's second container) for every attachment this node's plugin made. With the node
//! configuration's `gc`, the same process runs the leak collector (`crate::gc`) and serves its
//! counters.
//!
//! - `collect.rs`: one scrape: enter each pod's netns, read its interface and RDMA device;
//!   then the RDMA devices still on the host.
//! - `netdev.rs`: an interface's counters over route netlink.
//! - `snapshot.rs`: the table of metric families and one scrape's samples.
//! - `encode.rs`: the OpenMetrics text, by the `prometheus-client` crate.
//! - `server.rs`: `/metrics` and `/healthz` over hyper.
//!
//! RDMA statistics and resource queries live with the rest of RDMA netlink
//! (`rdma/netlink/stats.rs`).

pub mod collect;
pub mod encode;
pub mod netdev;
pub mod server;
pub mod snapshot;

use crate::error::{Result, failed, invalid};
use collect::Source;
use encode::ScrapeErrors;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where `--listen` points when not given.
pub(crate) const DEFAULT_LISTEN: &str = "0.0.0.0:9879";
/// How long one kernel query may take before it counts as a scrape error.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The exporter's state between scrapes: where to look, and the error counters.
#[derive(Debug)]
pub struct Exporter {
    pub source: Source,
    pub errors: ScrapeErrors,
    /// The GC's counters (`crate::gc`, run by this process when the node configuration has
    /// `gc`).
    pub gc: crate::gc::Counters,
    /// The uppers watcher's count of deleted foreign uppers (`crate::uppers_guard`), beside
    /// its socket.
    pub uppers_removed: Option<PathBuf>,
    /// One scrape at a time: a second scraper waits instead of doubling the work.
    busy: Mutex<()>,
}

impl Exporter {
    pub fn new(state_dir: PathBuf) -> Self {
        Exporter {
            source: Source {
                state_dir,
                sysfs: PathBuf::from("/sys"),
                timeout: QUERY_TIMEOUT,
            },
            errors: ScrapeErrors::default(),
            gc: crate::gc::Counters::default(),
            uppers_removed: None,
            busy: Mutex::new(()),
        }
    }

    /// Collect and encode one scrape.
    pub fn scrape(&self) -> String {
        let _one = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let mut snap = snapshot::Snapshot::default();
        let errs = collect::scrape(&self.source, &mut snap);
        // Only while a watcher runs (it writes the file when it starts).
        if let Some(n) = self
            .uppers_removed
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            snap.int(&snapshot::FOREIGN_UPPERS_REMOVED, Vec::new(), n);
        }
        for (stage, n) in errs.0 {
            self.errors.add(stage, n);
        }
        encode::render(snap, &self.errors, &self.gc).unwrap_or_else(|e| {
            log::error!("encoding the scrape: {e}");
            String::new()
        })
    }
}

/// `metrics [--listen ADDR] [--state-dir DIR] [--once] [--token-file FILE]`; `:PORT` listens on
/// every IPv4 address.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// Where to serve /metrics and /healthz: ADDR:PORT, [ADDR]:PORT, or :PORT for every IPv4
    /// address
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, value_parser = listen_arg)]
    pub listen: SocketAddr,
    /// The attachments' state directory [default: the node configuration's stateDir]
    #[arg(long, value_name = "DIR", value_parser = crate::flags::absolute_path)]
    pub state_dir: Option<PathBuf>,
    /// Print one scrape on stdout and exit (for a person, and tests without a port).
    #[arg(long)]
    pub once: bool,
    /// Serve `/metrics` only to clients sending the bearer token in this file.
    #[arg(long, value_name = "FILE", value_parser = crate::flags::absolute_path)]
    pub token_file: Option<PathBuf>,
}

/// `--listen`'s value, its error as clap prints it.
fn listen_arg(listen: &str) -> std::result::Result<SocketAddr, String> {
    listen_addr(listen).map_err(|e| e.to_string())
}

/// `ADDR:PORT`, `[ADDR]:PORT`, or `:PORT` for every IPv4 address.
fn listen_addr(listen: &str) -> Result<SocketAddr> {
    let full = if listen.starts_with(':') {
        format!("0.0.0.0{listen}")
    } else {
        listen.to_owned()
    };
    full.parse().map_err(|e| {
        invalid(format!(
            "{listen:?}: {e} (want ADDR:PORT, [ADDR]:PORT or :PORT)"
        ))
    })
}

/// Run the exporter until killed (or, `--once`, print one scrape).
pub fn run(opts: &Options) -> Result<()> {
    // The CNI panic hook prints an error JSON on stdout; a long-running exporter only logs.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("rdma-host-device-agent metrics: bug: {info}");
    }));
    rdma_host_device_core::logging::init(log::LevelFilter::Info, None, " metrics".into());
    let mut node = rdma_host_device_core::node::Node::load()?;
    if let Some(d) = &opts.state_dir {
        node.state_dir = d.clone();
    }
    let mut exporter = Exporter::new(node.state_dir.clone());
    exporter.uppers_removed = Some(
        node.uppers_socket
            .with_file_name(crate::uppers_guard::COUNTER_FILE),
    );
    let exporter = Arc::new(exporter);
    if opts.once {
        print!("{}", exporter.scrape());
        return Ok(());
    }
    // The leak collector (the node configuration's `gc`) runs beside the exporter, which
    // serves its counters.
    crate::gc::spawn(node, exporter.gc.clone());
    // A token file that cannot be read is a mistake to report now, not a 503 at every scrape.
    if let Some(file) = &opts.token_file {
        server::read_token(file)
            .map_err(|why| invalid(format!("token file {}: {why}", file.display())))?;
    }
    let access = server::Access {
        token_file: opts.token_file.clone(),
    };
    server::serve(opts.listen, exporter, access)
        .map_err(|e| failed(format_args!("cannot listen on {}", opts.listen), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(a: &[&str]) -> std::result::Result<Options, clap::Error> {
        use clap::{Args, FromArgMatches};
        let cmd = Options::augment_args(clap::Command::new("metrics"));
        Options::from_arg_matches(&cmd.try_get_matches_from(["metrics"].iter().chain(a))?)
    }

    #[test]
    fn metrics_flags() {
        let o = options(&["--listen", ":9000", "--state-dir=/s"]).unwrap();
        assert_eq!(o.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(o.state_dir, Some(PathBuf::from("/s")));
        let o = options(&["--listen=[::1]:1"]).unwrap();
        assert_eq!(o.listen, "[::1]:1".parse().unwrap());
        assert_eq!(
            options(&[]).unwrap().listen,
            DEFAULT_LISTEN.parse().unwrap()
        );
        let e = options(&["--listen", "nope"]).unwrap_err().to_string();
        assert!(
            e.contains(
                "\"nope\": invalid socket address syntax (want ADDR:PORT, [ADDR]:PORT or :PORT)"
            ),
            "{e}"
        );
        for bad in [
            &["--listen"][..],
            &["--listen", "nope"],
            &["--state-dir", "rel"],
            &["-x"],
        ] {
            assert!(options(bad).is_err(), "{bad:?}");
        }
    }
}
