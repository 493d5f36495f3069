//! The full scan for what rides a host link without the kernel listing it as an upper:
//! - `here`: in the host's own namespace, the links of the kinds the kernel does not link to
//!   their lower (the IP tunnels; vxlan and IPoIB children on older kernels), each kind asked of
//!   the kernel alone (a filtered dump). Each costs the kernel a walk of the host's links (a
//!   veth per pod), which is why the watcher keeps its answer.
//! - `elsewhere`: in every other namespace of the node, links whose lower (IFLA_LINK, a vxlan's
//!   `dev`) is the host link's index in the namespace that one numbers as the host's
//!   (IFLA_LINK_NETNSID). One setns, one netlink socket and two requests per namespace (its id
//!   for the host, a raw link dump without statistics, read to its end however large and
//!   keeping only what rides the link): a pod can fill its own namespace with tens of
//!   thousands of links, and is searched all the same.
//!
//! A veth's IFLA_LINK is its peer, not a lower device.

use crate::error::{Code, Error, Result};
use crate::link::raw::{self, RawLink};
use crate::netlink_sync;
use crate::netns::{self, Netns};

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
pub(crate) fn here(index: u32, name: &str) -> Result<Vec<String>> {
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
pub(crate) fn elsewhere(index: u32, name: &str) -> Result<Vec<String>> {
    let host = Netns::current()?;
    let mut why = Vec::new();
    for (path, label) in netns::others_on_node() {
        // Gone since it was listed (its last process exited): nothing rides the NIC from
        // there any more. Held open from here on, it cannot go while we look.
        let Ok(ns) = Netns::open(&path) else {
            continue;
        };
        // Read to its end whatever its size, keeping only what rides the link: a namespace
        // is never passed over for holding many links.
        let seen: std::io::Result<Vec<RawLink>> = ns.within(|| {
            let mut sock = netlink_sync::route_socket()?;
            let Some(host_id) = raw::nsid_of(&mut sock, host.raw_fd())? else {
                // It numbers no link's lower as being in the host's namespace.
                return Ok(Vec::new());
            };
            raw::dump_where(&mut sock, |upper| upper.rides(index, Some(host_id)))
        })?;
        let riding = seen.map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("looking for devices riding {name} in {label}: {e}"),
            )
        })?;
        for upper in riding {
            why.push(format!(
                "{} {} in {label} is stacked on it",
                upper.kind.as_deref().unwrap_or("link"),
                upper.shown()
            ));
        }
    }
    Ok(why)
}
