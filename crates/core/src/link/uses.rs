//! Why the node itself needs a link, as its own namespace shows it: a route through it that
//! the kernel did not make for the link itself (any prefix, any table, multipath, nexthop
//! objects), an address other than its IPv6 link-local one, a bond or bridge it is a port of, a
//! device the kernel links to it as an upper. Devices riding it without that link (an IP tunnel
//! bound to it by `dev`) and from the node's other namespaces (a Multus macvlan NAD puts the
//! macvlan in its pod's netns) are `uppers/`'s to find.
//!
//! Every read is bounded by what the NIC carries, not by what the node holds: a node adds a
//! veth (and often a route) to the host per pod, so addresses and routes are asked of the
//! kernel filtered by the link (NETLINK_GET_STRICT_CHK), and the host's links are read raw,
//! without statistics.

use crate::error::{Code, Error, Result};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::route::{RouteAttribute, RouteProtocol};

use super::{LinkInfo, Links, nl_error};
use futures::StreamExt;
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;

impl Links {
    /// Why the node itself needs link `link` (in this handle's namespace, the host's), in
    /// words: it carries a route (any table), an address, a device of this namespace stacked on
    /// it, or it is a port of a bond or bridge. Empty when not.
    pub(crate) async fn node_uses(&self, link: &LinkInfo) -> Result<Vec<String>> {
        let mut why = Vec::new();
        // Devices stacked on it (macvlan, ipvlan, VLAN, ...) stay on the host and lose their
        // wire when it leaves: whatever they carry is the node's.
        why.extend(self.stacked_here(link).await?);
        if let Some(m) = link.master {
            let master = self.by_index(m).await?.map(|l| l.name);
            why.push(format!(
                "it is a port of {}",
                master.unwrap_or_else(|| format!("link #{m}"))
            ));
        }
        // A socket of its own that asks the kernel to filter (the shared one keeps the lenient
        // checks its other requests were written for).
        let filtered = Links::open_filtered()?;
        let msgs = filtered
            .addresses_of(link.index)
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
        let routes = filtered.all_routes(Some(link.index), &link.name).await?;
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

/// The names sysfs lists as `link`'s uppers (`upper_NAME`), if this sysfs shows `link` (same
/// name, index and address): `None` when it is another namespace's.
fn sysfs_uppers(link: &LinkInfo) -> Option<Vec<Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::path::Path::new("/sys/class/net").join(&link.name);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    if read("ifindex")?.trim() != link.index.to_string() || read("address")?.trim() != link.mac {
        return None;
    }
    let entries = std::fs::read_dir(&dir).ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .as_bytes()
                    .strip_prefix(b"upper_")
                    .map(<[u8]>::to_vec)
            })
            .collect(),
    )
}

/// fe80::/10: what every IPv6 link gets when it comes up, and gives up with the NIC harmlessly.
fn is_ipv6_link_local(ip: &std::net::IpAddr) -> bool {
    matches!(ip, std::net::IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

impl Links {
    /// The devices of this namespace (the host's) the kernel links to `link` as uppers, in
    /// words: what sysfs lists (macvlan, macvtap, ipvlan, VLAN, vxlan on newer kernels,
    /// macsec, ...; its bond or bridge is reported as such, not here), without reading the
    /// host's other links (a veth per pod). The kinds that ride a device without being linked
    /// to it (IP tunnels) are `uppers::riding`'s, which the watcher keeps an answer for. When
    /// this sysfs is not the namespace's (it shows no such link: a process that entered a
    /// namespace without mounting its sysfs), every link is read instead, and those kinds are
    /// found here too. A veth's IFLA_LINK is its peer, not a lower.
    async fn stacked_here(&self, link: &LinkInfo) -> Result<Vec<String>> {
        let mut why = Vec::new();
        let raw_error = |e: std::io::Error| {
            Error::new(
                Code::Netlink,
                format!("listing the devices riding {} (raw dump): {e}", link.name),
            )
        };
        let riding = |upper: &super::raw::RawLink| {
            upper.rides(link.index, None) && upper.index != link.index
        };
        let Some(uppers) = sysfs_uppers(link) else {
            let all = super::raw::dump().map_err(raw_error)?.ok_or_else(|| {
                Error::new(
                    Code::Netlink,
                    format!(
                        "the host's links take more than {} MiB: cannot tell what rides {}",
                        super::raw::MAX_BYTES >> 20,
                        link.name
                    ),
                )
            })?;
            for upper in all.iter().filter(|u| riding(u)) {
                why.push(format!(
                    "{} {} is stacked on it",
                    upper.kind.as_deref().unwrap_or("link"),
                    upper.shown()
                ));
            }
            return Ok(why);
        };
        for name in uppers {
            let found = match std::str::from_utf8(&name) {
                Ok(n) => self.by_name(n).await?,
                Err(_) => None,
            };
            if found.as_ref().is_some_and(|l| Some(l.index) == link.master) {
                continue;
            }
            why.push(format!(
                "{} {} is stacked on it",
                found
                    .as_ref()
                    .and_then(|l| l.kind.as_deref())
                    .unwrap_or("link"),
                name.escape_ascii()
            ));
        }
        Ok(why)
    }

    /// A socket in the calling thread's namespace on which the kernel applies the filters a
    /// dump request carries (NETLINK_GET_STRICT_CHK, Linux 4.20+; an older kernel ignores
    /// them, and the callers filter the answers again).
    pub(crate) fn open_filtered() -> Result<Self> {
        let (mut conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| Error::new(Code::Netlink, format!("cannot open rtnetlink socket: {e}")))?;
        use netlink_sys::AsyncSocket;
        if let Err(e) = conn
            .socket_mut()
            .socket_ref()
            .set_netlink_get_strict_chk(true)
        {
            log::debug!("the kernel filters no dumps (NETLINK_GET_STRICT_CHK: {e})");
        }
        tokio::spawn(conn);
        Ok(Links { handle })
    }

    /// The addresses on link `index`, the kernel asked for those only.
    async fn addresses_of(
        &self,
        index: u32,
    ) -> std::result::Result<Vec<AddressMessage>, rtnetlink::Error> {
        let mut q = AddressMessage::default();
        q.header.index = index;
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetAddress(q));
        req.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut replies = self.handle.clone().request(req)?;
        let mut out = Vec::new();
        while let Some(reply) = replies.next().await {
            match reply.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(m))
                    if m.header.index == index =>
                {
                    out.push(m)
                }
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    return Err(rtnetlink::Error::NetlinkError(e));
                }
                _ => {}
            }
        }
        Ok(out)
    }
}
