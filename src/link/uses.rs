//! Why the node itself needs a link: a route through it that the kernel did not make for the
//! link itself (any prefix, any table, multipath, nexthop objects), an address other than its
//! IPv6 link-local one, a bond or bridge it is a port of, a device stacked on it (a vxlan
//! bound to it by `dev` included),
//! here or in any other namespace of the node (a Multus macvlan NAD puts the macvlan in its
//! pod's netns, where it still rides the NIC: handing the NIC over would give its new holder
//! that pod's frames and its link).

use crate::error::{Code, Error, Result};
use futures::TryStreamExt;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::route::{RouteAttribute, RouteProtocol};

use super::{LinkInfo, Links, nl_error};
use crate::netns::{self, Netns};
use futures::StreamExt;
use netlink_packet_core::{NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};

impl Links {
    /// Why the node itself needs link `link`, in words: it carries a route (any table), an
    /// address, a device stacked on it, or it is a port of a bond or bridge. Empty when not.
    pub async fn node_uses(&self, link: &LinkInfo) -> Result<Vec<String>> {
        let mut why = Vec::new();
        // Devices stacked on it (macvlan, ipvlan, VLAN, ...) stay on the host and lose their
        // wire when it leaves: whatever they carry is the node's. A veth's IFLA_LINK is its
        // peer, not a lower device.
        for upper in self.all().await? {
            if upper.lower == Some(link.index)
                && upper.lower_netnsid.is_none()
                && upper.index != link.index
                && upper.kind.as_deref() != Some("veth")
            {
                why.push(format!(
                    "{} {} is stacked on it",
                    upper.kind.as_deref().unwrap_or("link"),
                    upper.name
                ));
            }
        }
        why.extend(uppers_elsewhere(link).await?);
        if let Some(m) = link.master {
            let master = self.by_index(m).await?.map(|l| l.name);
            why.push(format!(
                "it is a port of {}",
                master.unwrap_or_else(|| format!("link #{m}"))
            ));
        }
        let msgs: Vec<AddressMessage> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(link.index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_error(format!("listing addresses of {}", link.name), e))?;
        // Every address but the IPv6 link-local one the kernel gives any link that is up: a
        // scope-link or IPv4 link-local address is the node's configuration too, and leaves
        // with the NIC.
        for m in msgs.iter().filter(|m| m.header.index == link.index) {
            let Some(ip) = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            }) else {
                continue;
            };
            if is_ipv6_link_local(&ip) {
                continue;
            }
            let scope = match m.header.scope {
                netlink_packet_route::address::AddressScope::Universe => "global",
                netlink_packet_route::address::AddressScope::Link => "link-scope",
                netlink_packet_route::address::AddressScope::Host => "host-scope",
                _ => "site-scope",
            };
            why.push(format!(
                "it has the {scope} address {ip}/{}",
                m.header.prefix_len
            ));
        }
        // Nexthop objects leaving through it (routes that name only `nhid`). The socket is
        // opened in this thread's namespace, which is the host's: node_uses runs there.
        let nh_ids = super::nexthop::ids_through(link.index).map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("listing nexthop objects of {}: {e}", link.name),
            )
        })?;
        let routes = self.all_routes(&link.name).await?;
        // Any route through it but those the kernel keeps for the link itself (its
        // IPv6 link-local and multicast routes, an address's own): a default route, a split
        // default (two /1, as VPNs add), a static or learned route to any prefix.
        for m in routes.iter().filter(|m| {
            m.header.destination_prefix_length == 0 || m.header.protocol != RouteProtocol::Kernel
        }) {
            let via_link = m.attributes.iter().any(|a| match a {
                RouteAttribute::Oif(i) => *i == link.index,
                RouteAttribute::MultiPath(hops) => {
                    hops.iter().any(|h| h.interface_index == link.index)
                }
                RouteAttribute::NhId(id) => nh_ids.contains(id),
                _ => false,
            });
            if via_link {
                let table = m
                    .attributes
                    .iter()
                    .find_map(|a| match a {
                        RouteAttribute::Table(t) => Some(*t),
                        _ => None,
                    })
                    .unwrap_or(u32::from(m.header.table));
                let fam = if m.header.address_family == AddressFamily::Inet {
                    "IPv4"
                } else {
                    "IPv6"
                };
                let len = m.header.destination_prefix_length;
                let dst = m.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Destination(d) => super::route::route_ip(d),
                    _ => None,
                });
                why.push(match dst {
                    _ if len == 0 => {
                        format!("the node's {fam} default route (table {table}) goes through it")
                    }
                    Some(d) => format!(
                        "the node's {fam} route to {d}/{len} (table {table}, {:?}) goes through it",
                        m.header.protocol
                    ),
                    None => format!(
                        "a node {fam} route (table {table}, {:?}) goes through it",
                        m.header.protocol
                    ),
                });
            }
        }
        why.dedup();
        Ok(why)
    }
}

/// fe80::/10: what every IPv6 link gets when it comes up, and gives up with the NIC harmlessly.
fn is_ipv6_link_local(ip: &std::net::IpAddr) -> bool {
    matches!(ip, std::net::IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// Devices stacked on the host's link `link` from the node's other namespaces: in each, links
/// whose lower (IFLA_LINK) is `link`'s index in the namespace that one numbers as the host's
/// (IFLA_LINK_NETNSID). A veth's IFLA_LINK is its peer, not a lower device. Run in the host's
/// namespace.
async fn uppers_elsewhere(link: &LinkInfo) -> Result<Vec<String>> {
    let host = Netns::current()?;
    let mut why = Vec::new();
    for (path, label) in netns::others_on_node() {
        // Gone since it was listed (its last process exited): nothing rides the NIC from
        // there any more. Held open from here on, it cannot go while we look.
        let Ok(ns) = Netns::open(&path) else {
            continue;
        };
        let there = Links::open_in(&ns)?;
        let Some(host_id) = there.nsid_of(&host).await? else {
            continue; // it numbers no link's lower as being in the host's namespace
        };
        // A pod can fill its own namespace with links: read them raw, without statistics,
        // not through the rtnetlink crate's full decoding (1.3 s for 40,000 links). One past
        // the dump's bound is not searched: failing would let that pod stop every ADD on the
        // node, while what rides the NIC from there is that pod's own (its macvlan NAD's).
        let dumped = ns.within(super::raw::dump)?.map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("listing the links of {label} (raw dump): {e}"),
            )
        })?;
        let Some(links) = dumped else {
            log::warn!(
                "{label} holds more than {} MiB of links; not searched for devices riding {}",
                super::raw::MAX_BYTES >> 20,
                link.name
            );
            continue;
        };
        for upper in links {
            if upper.lower == Some(link.index)
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

impl Links {
    /// The id this socket's namespace gives namespace `ns` (RTM_GETNSID), `None` when it has
    /// given it none: then none of its links can name a lower device there.
    async fn nsid_of(&self, ns: &Netns) -> Result<Option<i32>> {
        let mut msg = NsidMessage::default();
        msg.attributes = vec![NsidAttribute::Fd(
            u32::try_from(ns.raw_fd()).unwrap_or(u32::MAX),
        )];
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetNsId(msg));
        req.header.flags = NLM_F_REQUEST;
        let mut replies =
            self.handle.clone().request(req).map_err(|e| {
                nl_error(format!("asking for the id of {}", ns.path().display()), e)
            })?;
        while let Some(reply) = replies.next().await {
            match reply.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNsId(m)) => {
                    return Ok(m.attributes.iter().find_map(|a| match a {
                        NsidAttribute::Id(id) if *id >= 0 => Some(*id),
                        _ => None,
                    }));
                }
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    return Err(nl_error(
                        format!("asking for the id of {}", ns.path().display()),
                        rtnetlink::Error::NetlinkError(e),
                    ));
                }
                _ => {}
            }
        }
        Ok(None)
    }
}
