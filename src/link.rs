//! Link verbs over rtnetlink, against one network namespace per `Links` handle: look links up,
//! move+rename+MTU+alias+up in one request, addresses and routes.

use crate::error::{Code, Error, Result};
use crate::netns::Netns;
use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};
use std::net::IpAddr;

/// What we need to know about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub index: u32,
    pub name: String,
    /// Lower-case colon form; empty for links without a hardware address.
    pub mac: String,
    pub mtu: u32,
    pub up: bool,
    pub alias: Option<String>,
    /// The MTU range the driver accepts, when the kernel reports it.
    pub min_mtu: Option<u32>,
    pub max_mtu: Option<u32>,
    /// The bond or bridge this link is a port of (IFLA_MASTER).
    pub master: Option<u32>,
    /// The permanent hardware address (IFLA_PERM_ADDRESS): set by the NIC's firmware, not
    /// changeable from a pod. Empty for virtual links, which have none.
    pub perm_mac: String,
    /// Alternative names (`ip link property add ... altname`): they select the link as its
    /// name does, and travel with it between namespaces.
    pub altnames: Vec<String>,
}

/// How a link should look once it has arrived in the target namespace.
#[derive(Debug, Clone)]
pub struct Arrival<'a> {
    pub name: &'a str,
    pub mtu: Option<u32>,
    /// `Some("")` clears the alias.
    pub alias: Option<&'a str>,
    pub up: bool,
    /// Set this MAC (colon form) if given: a pod may have changed it.
    pub mac: Option<&'a str>,
}

/// `aa:bb:..` to bytes; `None` if it is not a MAC.
fn mac_bytes(mac: &str) -> Option<Vec<u8>> {
    mac.split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .filter(|b| b.len() == 6)
}

/// An rtnetlink socket bound to one network namespace.
pub struct Links {
    handle: Handle,
}

fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

fn nl_error(what: impl std::fmt::Display, e: rtnetlink::Error) -> Error {
    let detail = match errno(&e) {
        Some(n) => std::io::Error::from_raw_os_error(n).to_string(),
        None => e.to_string(),
    };
    Error::new(Code::Netlink, format!("{what}: {detail}"))
}

impl Links {
    /// A socket in the calling thread's current namespace. Must run inside the tokio runtime.
    pub fn open() -> Result<Self> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| Error::new(Code::Netlink, format!("cannot open rtnetlink socket: {e}")))?;
        tokio::spawn(conn);
        Ok(Links { handle })
    }

    /// A socket in `ns`: opened there, used from here.
    pub fn open_in(ns: &Netns) -> Result<Self> {
        ns.run(Self::open)?
    }

    pub async fn by_name(&self, name: &str) -> Result<Option<LinkInfo>> {
        let req = self.handle.link().get().match_name(name.to_string());
        self.one(req.execute(), &format!("looking up link {name:?}"))
            .await
    }

    pub async fn by_index(&self, index: u32) -> Result<Option<LinkInfo>> {
        let req = self.handle.link().get().match_index(index);
        self.one(req.execute(), &format!("looking up link #{index}"))
            .await
    }

    async fn one(
        &self,
        mut stream: impl futures::Stream<Item = std::result::Result<LinkMessage, rtnetlink::Error>>
        + Unpin,
        what: &str,
    ) -> Result<Option<LinkInfo>> {
        match stream.try_next().await {
            Ok(m) => Ok(m.map(|m| info(&m))),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(nl_error(what, e)),
        }
    }

    /// Every link in the namespace. Only for lookups the kernel cannot filter (by MAC, alias).
    pub async fn all(&self) -> Result<Vec<LinkInfo>> {
        let msgs: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_error("listing links", e))?;
        Ok(msgs.iter().map(info).collect())
    }

    /// Move link `index` into `target`, renamed, with MTU, alias and admin state, in ONE
    /// RTM_SETLINK: the kernel renames during the move, so no other process ever sees the link
    /// under a half-way name or in a half-way place.
    pub async fn move_to(&self, index: u32, target: &Netns, how: &Arrival<'_>) -> Result<()> {
        let mut b = LinkUnspec::new_with_index(index)
            .setns_by_fd(target.raw_fd())
            .name(how.name.to_string());
        if let Some(mtu) = how.mtu {
            b = b.mtu(mtu);
        }
        if let Some(alias) = how.alias {
            b = b.alias(alias.to_string());
        }
        if let Some(mac) = how.mac.and_then(mac_bytes) {
            b = b.address(mac);
        }
        b = if how.up { b.up() } else { b.down() };
        self.handle
            .link()
            .set(b.build())
            .execute()
            .await
            .map_err(|e| {
                let hint = match errno(&e) {
                    Some(libc::EEXIST) => format!(
                        " (a link named {:?} already exists in {})",
                        how.name,
                        target.path().display()
                    ),
                    _ => String::new(),
                };
                let mut err = nl_error(
                    format!(
                        "moving link #{index} to {} as {:?}",
                        target.path().display(),
                        how.name
                    ),
                    e,
                );
                err.msg.push_str(&hint);
                err
            })
    }

    /// Rename / re-MTU / re-alias a link where it is (recovering a NIC lost to a dead netns).
    pub async fn restore_in_place(&self, index: u32, how: &Arrival<'_>) -> Result<()> {
        let mut b = LinkUnspec::new_with_index(index).name(how.name.to_string());
        if let Some(mtu) = how.mtu {
            b = b.mtu(mtu);
        }
        if let Some(alias) = how.alias {
            b = b.alias(alias.to_string());
        }
        if let Some(mac) = how.mac.and_then(mac_bytes) {
            b = b.address(mac);
        }
        // A rename needs the link down; bring it up afterwards if it should be.
        let b = b.down();
        self.handle
            .link()
            .set(b.build())
            .execute()
            .await
            .map_err(|e| nl_error(format!("restoring link #{index} as {:?}", how.name), e))?;
        if how.up {
            self.set_up(index).await?;
        }
        Ok(())
    }

    pub async fn set_up(&self, index: u32) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index).up().build();
        self.handle
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(|e| nl_error(format!("setting link #{index} up"), e))
    }

    pub async fn add_address(&self, index: u32, addr: IpNet) -> Result<()> {
        self.handle
            .address()
            .add(index, addr.addr(), addr.prefix_len())
            .execute()
            .await
            .map_err(|e| nl_error(format!("adding address {addr} to link #{index}"), e))
    }

    /// Addresses on link `index` (with their prefix), link-local IPv6 excluded.
    pub async fn addresses(&self, index: u32) -> Result<Vec<IpNet>> {
        let msgs: Vec<AddressMessage> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_error(format!("listing addresses of link #{index}"), e))?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => IpNet::new(*ip, m.header.prefix_len).ok(),
                    _ => None,
                })
            })
            .filter(|n| !is_link_local(n.addr()))
            .collect())
    }

    /// Add a route out of link `index`; `gw` None makes it a link route.
    pub async fn add_route(
        &self,
        index: u32,
        dst: IpNet,
        gw: Option<IpAddr>,
        metric: Option<u32>,
    ) -> Result<()> {
        let what = || {
            format!(
                "adding route {dst}{} on link #{index}",
                gw.map(|g| format!(" via {g}")).unwrap_or_default()
            )
        };
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst.network(), dst.prefix_len())
            .map_err(|e| Error::new(Code::Netlink, format!("{}: {e}", what())))?
            .output_interface(index);
        if let Some(gw) = gw {
            b = b
                .gateway(gw)
                .map_err(|e| Error::new(Code::Netlink, format!("{}: {e}", what())))?;
        }
        if let Some(m) = metric {
            b = b.priority(m);
        }
        self.handle
            .route()
            .add(b.build())
            .execute()
            .await
            .map_err(|e| nl_error(what(), e))
    }

    /// Why the node itself needs link `link`, in words: it carries a default route (any
    /// table), a global address, or it is a port of a bond or bridge. Empty when it does not.
    pub async fn node_uses(&self, link: &LinkInfo) -> Result<Vec<String>> {
        let mut why = Vec::new();
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
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut q = RouteMessage::default();
            q.header.address_family = family;
            let msgs: Vec<RouteMessage> = self
                .handle
                .route()
                .get(q)
                .execute()
                .try_collect()
                .await
                .map_err(|e| nl_error(format!("listing routes of {}", link.name), e))?;
            for m in msgs
                .iter()
                .filter(|m| m.header.destination_prefix_length == 0)
            {
                let via_link = m.attributes.iter().any(|a| match a {
                    RouteAttribute::Oif(i) => *i == link.index,
                    RouteAttribute::MultiPath(hops) => {
                        hops.iter().any(|h| h.interface_index == link.index)
                    }
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
                    let fam = if family == AddressFamily::Inet {
                        "IPv4"
                    } else {
                        "IPv6"
                    };
                    why.push(format!(
                        "the node's {fam} default route (table {table}) goes through it"
                    ));
                }
            }
        }
        why.dedup();
        Ok(why)
    }

    /// Routes out of link `index` in the main table: (destination, gateway).
    pub async fn routes(&self, index: u32) -> Result<Vec<(IpNet, Option<IpAddr>)>> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut q = RouteMessage::default();
            q.header.address_family = family;
            let msgs: Vec<RouteMessage> = self
                .handle
                .route()
                .get(q)
                .execute()
                .try_collect()
                .await
                .map_err(|e| nl_error(format!("listing routes of link #{index}"), e))?;
            for m in msgs {
                let oif = m.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Oif(i) => Some(*i),
                    _ => None,
                });
                if oif != Some(index) {
                    continue;
                }
                let dst_addr = m.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Destination(d) => route_ip(d),
                    _ => None,
                });
                let dst_addr = dst_addr.unwrap_or(match family {
                    AddressFamily::Inet6 => IpAddr::from([0u16; 8]),
                    _ => IpAddr::from([0u8; 4]),
                });
                let gw = m.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Gateway(g) => route_ip(g),
                    _ => None,
                });
                if let Ok(dst) = IpNet::new(dst_addr, m.header.destination_prefix_length) {
                    out.push((dst, gw));
                }
            }
        }
        Ok(out)
    }
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

fn info(m: &LinkMessage) -> LinkInfo {
    let mut li = LinkInfo {
        index: m.header.index,
        name: String::new(),
        mac: String::new(),
        mtu: 0,
        up: m.header.flags.contains(LinkFlags::Up),
        alias: None,
        min_mtu: None,
        max_mtu: None,
        master: None,
        perm_mac: String::new(),
        altnames: Vec::new(),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => li.name = n.clone(),
            LinkAttribute::Address(mac) => li.mac = format_mac(mac),
            LinkAttribute::Mtu(mtu) => li.mtu = *mtu,
            LinkAttribute::IfAlias(al) => li.alias = Some(al.clone()),
            LinkAttribute::MinMtu(m) => li.min_mtu = Some(*m),
            LinkAttribute::MaxMtu(m) if *m > 0 => li.max_mtu = Some(*m),
            LinkAttribute::Controller(i) if *i > 0 => li.master = Some(*i),
            LinkAttribute::PropList(props) => {
                for p in props {
                    if let netlink_packet_route::link::Prop::AltIfName(n) = p {
                        li.altnames.push(n.clone());
                    }
                }
            }
            LinkAttribute::PermAddress(mac) if mac.iter().any(|b| *b != 0) => {
                li.perm_mac = format_mac(mac)
            }
            _ => {}
        }
    }
    li
}

pub fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_formatting() {
        assert_eq!(
            format_mac(&[0xaa, 0x0b, 0, 1, 2, 0xff]),
            "aa:0b:00:01:02:ff"
        );
        assert_eq!(format_mac(&[]), "");
    }

    #[test]
    fn link_local_filter() {
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(!is_link_local("fd00::1".parse().unwrap()));
        assert!(is_link_local("169.254.1.1".parse().unwrap()));
    }
}
