//! `rdma-host-device-agent nri`: an NRI plugin (Node Resource Interface: containerd 1.7.7+ with NRI
//! enabled, on by default from 2.0; CRI-O 1.29+) that puts the node's `memlock` policy into the
//! OCI spec of every container given one of this node's RDMA devices, as
//! `process.rlimits` RLIMIT_MEMLOCK (soft and hard). In the spec, the limit reaches every
//! process the runtime starts in the container: its first, and those of `kubectl exec`, which
//! the CDI spec's createRuntime hook (`cdi.rs`) cannot reach. Other containers are left alone.
//!
//! - `api.rs`: the NRI and ttrpc messages used, hand-written `prost::Message` structs.
//! - `wire.rs`: NRI's socket multiplexer and ttrpc's framing.
//! - `devices.rs`: which containers get the limit (by device number), and the adjustment.
//! - `plugin.rs`: one connection: register, configure, answer.
//! - here: the options and the loop that connects, and connects again when the runtime
//!   restarts or goes away (backing off to one try every few seconds; never exits for it).
//!
//! Who writes what: the policy is the node configuration's `memlock`; which container has our
//! device is the runtime's account of its device nodes (docs/trust.md); the socket is the
//! runtime's, reached through the DaemonSet's hostPath mount. Agent-only: the CNI binary
//! (src/main.rs) never reaches this module.

pub mod api;
pub mod devices;
pub mod plugin;
pub mod wire;

use crate::error::Result;
use crate::flags::absolute_path;
use rdma_host_device_core::node::{Memlock, Node};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// NRI's default socket (containerd and CRI-O).
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// Our name as the runtime logs it (`90-rdma-host-device`).
pub const PLUGIN_NAME: &str = "rdma-host-device";
/// Late in the order: the runtime calls plugins by ascending index and shows each the devices
/// those before it added (a DRA driver adding RDMA char devices through NRI comes first).
pub(crate) const DEFAULT_INDEX: &str = "90";
/// The first wait before connecting again, and the longest.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LAST_RETRY: Duration = Duration::from_secs(5);

/// `nri [--socket PATH] [--index NN]`.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// The runtime's NRI socket
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET, value_parser = absolute_path)]
    pub socket: PathBuf,
    /// The plugin's index, two digits: the runtime calls plugins in ascending order, and ours
    /// must come after any that adds RDMA devices
    #[arg(long, value_name = "NN", default_value = DEFAULT_INDEX, value_parser = plugin_index)]
    pub index: String,
    /// The node's /dev as this process sees it, where the uverbs char devices' numbers are
    /// read (the DaemonSet: /host/dev, a read-only mount of the node's /dev; a mount of
    /// /dev/infiniband itself goes stale when devtmpfs removes the emptied directory)
    #[arg(long, value_name = "DIR", default_value = "/dev", value_parser = absolute_path)]
    pub dev: PathBuf,
}

/// NRI's rule for an index: exactly two digits.
fn plugin_index(s: &str) -> std::result::Result<String, String> {
    if s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()) {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?}: an NRI plugin index is two digits (00-99)"))
    }
}

/// Serve the runtime until killed; returns only if the node configuration is unusable.
pub fn run(o: &Options) -> Result<()> {
    rdma_host_device_core::logging::init(log::LevelFilter::Info, None, " nri".into());
    let node = Node::load()?;
    let memlock = Memlock::parse(&node.memlock).map_err(|e| e.context(&node.source))?;
    let cfg = plugin::Config {
        name: PLUGIN_NAME.into(),
        index: o.index.clone(),
        memlock,
        dev: o.dev.clone(),
    };
    let mut wait = FIRST_RETRY;
    let mut last_refusal = String::new();
    loop {
        match UnixStream::connect(&o.socket) {
            Err(e) => {
                // Said once per reason, not once per try.
                let why = e.to_string();
                if why != last_refusal {
                    log::info!(
                        "waiting for the runtime's NRI socket {}: {why} (is NRI enabled? containerd 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false; CRI-O: enable_nri = true)",
                        o.socket.display()
                    );
                    last_refusal = why;
                }
            }
            Ok(stream) => {
                last_refusal.clear();
                let out = plugin::session(stream, &cfg);
                match out.end {
                    Ok(()) => log::warn!(
                        "the runtime closed the NRI connection; connecting again (containers created meanwhile get no memlock limit from this plugin)"
                    ),
                    Err(e) => log::warn!("the NRI connection ended: {e}; connecting again"),
                }
                if out.configured {
                    wait = FIRST_RETRY;
                }
            }
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(LAST_RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_two_digits() {
        assert_eq!(plugin_index("90").unwrap(), "90");
        for bad in ["9", "100", "a1", "", "-1"] {
            assert!(plugin_index(bad).is_err(), "{bad}");
        }
    }
}
