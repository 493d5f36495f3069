//! Devices riding a host NIC from the node's other namespaces: a Multus macvlan (ipvlan, VLAN)
//! NAD puts its upper in its pod's netns, where it still rides the NIC, and handing the NIC to
//! another pod would give that pod the victim's frames and its link. The kernel lists no
//! NIC's uppers across namespaces, so the one sure answer is a scan of every namespace
//! (`scan.rs`), whose cost grows with the pods on the node.
//!
//! The watcher (`watch.rs`, `rdma-host-device-agent uppers-watch`) keeps that answer valid between
//! scans: the kernel tells the NIC's own namespace of every upper linked to or unlinked from
//! it (NETDEV_CHANGEUPPER becomes an RTM_NEWLINK for the NIC, whichever namespace the upper is
//! in), so a scan that found nothing holds until such a message arrives. `riding` asks it
//! (`client.rs`) and, when it cannot answer, scans in-process: correctness never depends on
//! the watcher, only the cost does.

mod client;
mod scan;
mod watch;

pub use scan::elsewhere;
pub use watch::{Options, run, serve};

use crate::error::Result;
use crate::link::LinkInfo;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// Where the watcher listens unless the node says otherwise (`uppersSocket`).
pub const DEFAULT_SOCKET: &str = "/run/rdma-host-device/uppers.sock";

/// How long ADD waits for the watcher before it scans itself: longer than the watcher's scan
/// of a node of a few hundred pods (which a query may have to wait for), short enough that a
/// stuck watcher costs each ADD little.
pub const DEADLINE: Duration = Duration::from_millis(500);

/// What devices of the node's other namespaces ride host link `link`, in words ("macvlan mv0
/// in /run/netns/pod-a is stacked on it"); empty when none. Asks the watcher at `socket`
/// first; without its answer, scans every namespace. Run in the host's namespace.
pub fn riding(socket: &Path, link: &LinkInfo) -> Result<Vec<String>> {
    match client::ask(socket, link.index, &link.name, DEADLINE) {
        Ok(why) => {
            log::debug!(
                "the uppers watcher answered for {}: {} riding it",
                link.name,
                why.len()
            );
            Ok(why)
        }
        Err(e) => {
            log::debug!(
                "the uppers watcher did not answer for {} ({e}); scanning every namespace",
                link.name
            );
            scan::elsewhere(link.index, &link.name)
        }
    }
}

/// A question to the watcher: what rides host link `ifindex` from other namespaces. `netns`
/// is the asker's namespace (device, inode): an index means nothing in another one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    ifindex: u32,
    name: String,
    netns: (u64, u64),
}

/// The watcher's answer: what rides it (empty: nothing), or why it cannot tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum Answer {
    Riding(Vec<String>),
    Unknown(String),
}

/// The longest query or answer line: an answer names at most a few hundred devices.
const MAX_LINE: usize = 256 << 10;

/// This thread's network namespace as (device, inode).
fn own_netns() -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/thread-self/ns/net")?;
    Ok((m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_answers_are_one_json_line_each_and_nothing_else_parses() {
        let q = Query {
            ifindex: 7,
            name: "eth1".into(),
            netns: (4, 4026531840),
        };
        let line = serde_json::to_string(&q).unwrap();
        assert_eq!(
            line,
            r#"{"ifindex":7,"name":"eth1","netns":[4,4026531840]}"#
        );
        assert_eq!(serde_json::from_str::<Query>(&line).unwrap(), q);
        let a = Answer::Riding(vec!["macvlan m in x is stacked on it".into()]);
        let line = serde_json::to_string(&a).unwrap();
        assert_eq!(line, r#"{"riding":["macvlan m in x is stacked on it"]}"#);
        assert_eq!(serde_json::from_str::<Answer>(&line).unwrap(), a);
        for bad in [
            r#"{"riding":[],"extra":1}"#,
            r#"{"clear":true}"#,
            r#"{"riding":"none"}"#,
            "",
            "riding",
        ] {
            assert!(serde_json::from_str::<Answer>(bad).is_err(), "{bad}");
        }
    }
}
