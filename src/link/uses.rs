//! Why the node itself needs a link: a default route through it (any table, multipath,
//! nexthop objects), a global address, a bond or bridge it is a port of, a device stacked on it,
//! here or in any other namespace of the node (a Multus macvlan NAD puts the macvlan in its
//! pod's netns, where it still rides the NIC: handing the NIC over would give its new holder
//! that pod's frames and its link).

use crate::error::{Code, Error, Result};
use futures::TryStreamExt;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::route::RouteAttribute;

use super::{LinkInfo, Links, nl_error};
use crate::netns::{self, Netns};
use futures::StreamExt;
use netlink_packet_core::{NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};

impl Links {
    /// Why the node itself needs link `link`, in words: it carries a default route (any
    /// table), a global address, or it is a port of a bond or bridge. Empty when it does not.
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
        for m in msgs.iter().filter(|m| {
            m.header.index == link.index
                && m.header.scope == netlink_packet_route::address::AddressScope::Universe
        }) {
            if let Some(ip) = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            }) {
                why.push(format!(
                    "it has the global address {ip}/{}",
                    m.header.prefix_len
                ));
            }
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
        for m in routes
            .iter()
            .filter(|m| m.header.destination_prefix_length == 0)
        {
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
                why.push(format!(
                    "the node's {fam} default route (table {table}) goes through it"
                ));
            }
        }
        why.dedup();
        Ok(why)
    }
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
        for upper in there.all().await? {
            if upper.lower == Some(link.index)
                && upper.lower_netnsid == Some(host_id)
                && upper.kind.as_deref() != Some("veth")
            {
                why.push(format!(
                    "{} {} in {label} is stacked on it",
                    upper.kind.as_deref().unwrap_or("link"),
                    upper.name
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
