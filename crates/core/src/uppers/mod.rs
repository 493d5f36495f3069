//! Devices riding a host NIC that the host's sysfs does not list as its uppers:
//! - from the node's other namespaces: a Multus macvlan (ipvlan, VLAN) NAD puts its upper in
//!   its pod's netns, where it still rides the NIC, and handing the NIC to another pod would
//!   give that pod the victim's frames and its link. The kernel lists no NIC's uppers across
//!   namespaces, so the one sure answer is a scan of every namespace, whose cost grows with the
//!   pods on the node;
//! - in the host's namespace, the kinds the kernel never links to their lower (an IP tunnel
//!   bound to the NIC by `dev`): the kernel filters them by kind, but each kind asked costs a
//!   walk of the host's links, one veth per pod.
//!
//! The watcher (the agent's `uppers_watch.rs`, `rdma-host-device-agent uppers-watch`) keeps that answer (`scan.rs`)
//! valid between scans: the kernel tells the NIC's own namespace of every upper linked to or
//! unlinked from it (NETDEV_CHANGEUPPER becomes an RTM_NEWLINK for the NIC, whichever namespace
//! the upper is in), and of every host link made or changed, with its lower (IFLA_LINK), so a
//! scan that found nothing holds until such a message arrives. `riding` asks it (`client.rs`)
//! and, when it cannot answer, scans in-process: correctness never depends on the watcher, only
//! the cost does.

pub mod arrival;
mod client;
pub mod scan;

use crate::error::Result;
use crate::link::{LinkInfo, Links};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// Where the watcher listens unless the node says otherwise (`uppersSocket`).
pub const DEFAULT_SOCKET: &str = "/run/rdma-host-device/uppers.sock";

/// How long ADD waits for the watcher before it scans itself: longer than the watcher's scan
/// of a node of a few hundred pods (which a query may have to wait for), short enough that a
/// stuck watcher costs each ADD little.
pub(crate) const DEADLINE: Duration = Duration::from_millis(500);

/// Why host link `link` is not free, in words, each reason once: what the node uses it for
/// (`Links::node_uses`) and what rides it (`riding`). Run in the host's namespace.
pub async fn uses(host: &Links, socket: &Path, link: &LinkInfo) -> Result<Vec<String>> {
    let mut why = host.node_uses(link).await?;
    for r in riding(socket, link)? {
        // Where sysfs is not the host's, node_uses reads every link and finds the tunnels too.
        if !why.contains(&r) {
            why.push(r);
        }
    }
    Ok(why)
}

/// What devices ride host link `link` without the host's sysfs listing them, in words
/// ("macvlan mv0 in /run/netns/pod-a is stacked on it", "ipip t0 is stacked on it"); empty when
/// none. Asks the watcher at `socket` first; without its answer, scans the host's unlinked
/// kinds and every other namespace. Run in the host's namespace.
pub(crate) fn riding(socket: &Path, link: &LinkInfo) -> Result<Vec<String>> {
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
            scan::all(link.index, &link.name)
        }
    }
}

/// A question to the watcher: what rides host link `ifindex` from other namespaces. `netns`
/// is the asker's namespace (device, inode): an index means nothing in another one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Query {
    pub ifindex: u32,
    pub name: String,
    pub netns: (u64, u64),
}

/// A question to the watcher's guard (DEL and CHECK, `arrival`): has it watched link
/// `ifindex` of the namespace the host numbers `nsid`, without a break since `since_ns`
/// (CLOCK_BOOTTIME, this boot), and deleted whatever another namespace stacked on it
/// meanwhile? `netns` is the asker's namespace, the host's: an id means nothing in another.
/// The answer is [`Answer::Riding`] with nothing in it when it has, [`Answer::Unknown`] when
/// it cannot say so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watched {
    pub watched: WatchedNic,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchedNic {
    pub netns: (u64, u64),
    pub nsid: i32,
    pub ifindex: u32,
    pub name: String,
    pub since_ns: u64,
}

/// The watcher's answer: what rides it (empty: nothing), or why it cannot tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Answer {
    Riding(Vec<String>),
    Unknown(String),
}

/// The longest query or answer line: an answer names at most a few hundred devices.
pub const MAX_LINE: usize = 256 << 10;

/// This thread's network namespace as (device, inode).
pub fn own_netns() -> std::io::Result<(u64, u64)> {
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
        let w = Watched {
            watched: WatchedNic {
                netns: (4, 4026531840),
                nsid: 3,
                ifindex: 9,
                name: "net1".into(),
                since_ns: 12,
            },
        };
        let line = serde_json::to_string(&w).unwrap();
        assert_eq!(
            line,
            r#"{"watched":{"netns":[4,4026531840],"nsid":3,"ifindex":9,"name":"net1","since_ns":12}}"#
        );
        // The two questions never parse as each other: a watcher tells them apart.
        assert!(serde_json::from_str::<Query>(&line).is_err());
        assert!(serde_json::from_str::<Watched>(&serde_json::to_string(&q).unwrap()).is_err());
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
