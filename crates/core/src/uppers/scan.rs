//! The full scan for what rides a host link without the kernel listing it as an upper:
//! - `here`: in the host's own namespace, the links of the kinds the kernel does not link to
//!   their lower (the IP tunnels; vxlan and IPoIB children on older kernels), each kind asked of
//!   the kernel alone (a filtered dump). Each costs the kernel a walk of the host's links (a
//!   veth per pod), which is why the watcher keeps its answer.
//! - `elsewhere`: in every other namespace of the node, links whose lower (IFLA_LINK, a vxlan's
//!   `dev`) is the host link's index in the namespace that one numbers as the host's
//!   (IFLA_LINK_NETNSID). One setns, one netlink socket and two requests per namespace (its id
//!   for the host, a raw link dump without statistics): a pod can fill its own namespace with
//!   tens of thousands of links.
//!
//! A veth's IFLA_LINK is its peer, not a lower device.

use crate::error::{Code, Error, Result};
use crate::link::raw::{self, RawLink};
use crate::netlink_sync;
use crate::netns::{self, Netns};

/// What a namespace holds that may ride the host: its links, if it numbers the host at all.
type Seen = Option<Option<Vec<RawLink>>>;

/// Kinds that ride a device named by `dev` (IFLA_LINK, a vxlan's IFLA_VXLAN_LINK) without the
/// kernel linking them to it as uppers, so sysfs does not list them: the IP tunnels, and vxlan
/// and IPoIB children on kernels that did not link them yet.
const RIDING_UNLINKED: [&str; 14] = [
    "ipip",
    "gre",
    "gretap",
    "erspan",
    "sit",
    "ip6tnl",
    "ip6gre",
    "ip6gretap",
    "ip6erspan",
    "vti",
    "vti6",
    "xfrm",
    "vxlan",
    "ipoib",
];

/// Everything `here` and `elsewhere` find riding host link `index`. Run in the host's
/// namespace.
pub fn all(index: u32, name: &str) -> Result<Vec<String>> {
    let mut why = here(index, name)?;
    why.extend(elsewhere(index, name)?);
    Ok(why)
}

/// Links of this namespace (the host's) of a kind in [`RIDING_UNLINKED`] whose lower is host
/// link `index` (`name` in messages), each in words.
pub fn here(index: u32, name: &str) -> Result<Vec<String>> {
    let mut why = Vec::new();
    for kind in RIDING_UNLINKED {
        let links = raw::dump_kind(kind).map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("listing the {kind} links riding {name} (raw dump): {e}"),
            )
        })?;
        for upper in links {
            if upper.lower == Some(index) && upper.lower_netnsid.is_none() && upper.index != index {
                why.push(format!("{kind} {} is stacked on it", upper.shown()));
            }
        }
    }
    Ok(why)
}

/// Devices of the node's other namespaces stacked on host link `index` (`name` in messages),
/// each in words. Run in the host's namespace.
pub fn elsewhere(index: u32, name: &str) -> Result<Vec<String>> {
    let host = Netns::current()?;
    let mut why = Vec::new();
    for (path, label) in netns::others_on_node() {
        // Gone since it was listed (its last process exited): nothing rides the NIC from
        // there any more. Held open from here on, it cannot go while we look.
        let Ok(ns) = Netns::open(&path) else {
            continue;
        };
        let seen: std::io::Result<(Option<i32>, Seen)> = ns.within(|| {
            let mut sock = netlink_sync::route_socket()?;
            let Some(host_id) = raw::nsid_of(&mut sock, host.raw_fd())? else {
                // It numbers no link's lower as being in the host's namespace.
                return Ok((None, None));
            };
            Ok((Some(host_id), Some(raw::dump_on(&mut sock)?)))
        })?;
        let (host_id, links) = seen.map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("looking for devices riding {name} in {label}: {e}"),
            )
        })?;
        let (Some(host_id), Some(links)) = (host_id, links) else {
            continue;
        };
        // One past the dump's bound is not searched: failing would let that pod stop every
        // ADD on the node, while what rides the NIC from there is that pod's own (its macvlan
        // NAD's).
        let Some(links) = links else {
            log::warn!(
                "{label} holds more than {} MiB of links; not searched for devices riding {name}",
                raw::MAX_BYTES >> 20
            );
            continue;
        };
        for upper in links {
            if upper.lower == Some(index)
                && upper.lower_netnsid == Some(host_id)
                && upper.kind.as_deref() != Some("veth")
            {
                why.push(format!(
                    "{} {} in {label} is stacked on it",
                    upper.kind.as_deref().unwrap_or("link"),
                    upper.shown()
                ));
            }
        }
    }
    Ok(why)
}
