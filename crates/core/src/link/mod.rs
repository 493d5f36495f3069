//! Link verbs over rtnetlink, against one network namespace per `Links` handle: look links up,
//! move+rename+MTU+alias+up in one request, addresses. Routes are `route.rs`'s; what the node
//! itself uses a link for (uplink checks) is `uses.rs`'s.

mod nexthop;
pub mod raw;
mod restore;
mod route;
mod unreadable;
mod uses;

pub use restore::{POD_FLAGS, Settings};
pub use route::{KernelRoute, MAIN_TABLE, RouteSpec};
pub use unreadable::{Unreadable, dump as unreadable_links};

use crate::error::{Code, Error, Result};
use crate::netns::Netns;
use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec};
use std::net::IpAddr;

/// What we need to know about a link.
// Default: unit tests (here and in the plugin crate) build links from the few fields a
// decision reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkInfo {
    pub index: u32,
    pub name: String,
    /// Lower-case colon form; empty for links without a hardware address.
    pub mac: String,
    pub mtu: u32,
    pub up: bool,
    /// The interface flags (`ifi_flags`: IFF_UP, IFF_PROMISC, IFF_NOARP, ...).
    pub flags: u32,
    /// IFLA_GROUP: the device group (0 is `default`).
    pub group: u32,
    /// IFLA_TXQLEN: the transmit queue length.
    pub txqlen: u32,
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
    /// The device behind the netdev (IFLA_PARENT_DEV_NAME, e.g. the PCI function
    /// `0000:3b:00.1`, and its bus, `pci`): hardware a pod cannot create. `None` for virtual
    /// links.
    pub parent: Option<(String, String)>,
    /// The link type (IFLA_INFO_KIND: `veth`, `macvlan`, `vlan`, ...); `None` for hardware.
    pub kind: Option<String>,
    /// The link it is stacked on (IFLA_LINK: a macvlan's or VLAN's lower device, a veth's peer;
    /// IFLA_VXLAN_LINK: a vxlan's `dev`).
    pub lower: Option<u32>,
    /// IFLA_LINK_NETNSID: the namespace `lower` is in, as this link's namespace numbers it,
    /// when that is another namespace (a macvlan moved into a pod, riding a host NIC).
    pub lower_netnsid: Option<i32>,
    /// IFLA_CARRIER: the link has carrier.
    pub carrier: bool,
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

impl Arrival<'_> {
    /// `b` asking for what the link becomes: its name, and its MTU, alias and MAC when given
    /// (up or down is the caller's: a rename in place needs the link down first).
    fn apply(&self, b: LinkMessageBuilder<LinkUnspec>) -> LinkMessageBuilder<LinkUnspec> {
        let mut b = b.name(self.name.to_string());
        if let Some(mtu) = self.mtu {
            b = b.mtu(mtu);
        }
        if let Some(alias) = self.alias {
            b = b.alias(alias.to_string());
        }
        if let Some(mac) = self.mac.and_then(parse_mac) {
            b = b.address(mac.to_vec());
        }
        b
    }
}

/// The one MAC parser: `aa:bb:cc:dd:ee:ff` (or with `-`, either case) to its six bytes;
/// `None` if it is not a 48-bit MAC written with two hex digits a byte.
pub fn parse_mac(mac: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = mac.split([':', '-']);
    for b in &mut out {
        let p = parts.next()?;
        if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// An rtnetlink socket bound to one network namespace.
pub struct Links {
    pub(super) handle: Handle,
}

pub(super) fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

pub(super) fn nl_error(what: impl std::fmt::Display, e: rtnetlink::Error) -> Error {
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
        ns.within(Self::open)?
    }

    pub async fn by_name(&self, name: &str) -> Result<Option<LinkInfo>> {
        let req = self.handle.link().get().match_name(name.to_string());
        self.one(req.execute(), &format!("looking up link {name:?}"))
            .await
    }

    pub async fn by_index(&self, index: u32) -> Result<Option<LinkInfo>> {
        let req = self.handle.link().get().match_index(index);
        self.one(
            req.execute(),
            &format!("looking up the link with index {index}"),
        )
        .await
    }

    /// How error messages name link `index`: by its name, the index only as an extra.
    async fn describe(&self, index: u32) -> String {
        self.name_of(index).await.0
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

    /// Wait until link `index` has carrier, up to `timeout`; whether it has.
    pub async fn wait_for_carrier(&self, index: u32, timeout: std::time::Duration) -> Result<bool> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.by_index(index).await?.is_some_and(|l| l.carrier) {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
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
        let b = how.apply(LinkUnspec::new_with_index(index).setns_by_fd(target.raw_fd()));
        let b = if how.up { b.up() } else { b.down() };
        let Err(e) = self.handle.link().set(b.build()).execute().await else {
            return Ok(());
        };
        // Where the link is now: the kernel moves it before it renames it, so a name taken in
        // `target` leaves it there under the name it had (Linux 6.x), or, on kernels that
        // check first, where it was. Never say one when it is the other.
        let here = self.by_index(index).await.ok().flatten();
        let there = match &here {
            Some(_) => None,
            None => match Links::open_in(target) {
                Ok(t) => t.by_index(index).await.ok().flatten(),
                Err(_) => None,
            },
        };
        let dev = match (&here, &there) {
            (Some(l), _) | (None, Some(l)) => format!("{} (index {index})", l.name),
            (None, None) => format!("the link with index {index}"),
        };
        let place = if target.is_the_hosts() {
            "the host".to_owned()
        } else {
            target.path().display().to_string()
        };
        let hint = match (errno(&e), &here, &there) {
            (Some(libc::EEXIST), Some(l), _) => format!(
                "; the NIC stays where it was, as {}, because {} is taken in {place}",
                l.name, how.name
            ),
            (Some(libc::EEXIST), None, Some(l)) => format!(
                "; the NIC did move to {place} but kept the name {} there, because {} is taken there",
                l.name, how.name
            ),
            (Some(libc::EEXIST), None, None) => format!(
                "; {} is taken in {place}, and the NIC is neither where it was nor at index {index} there",
                how.name
            ),
            _ => String::new(),
        };
        let mut err = nl_error(
            format!(
                "moving {dev} to {} as {:?}",
                target.path().display(),
                how.name
            ),
            e,
        );
        err.msg.push_str(&hint);
        Err(err)
    }

    /// Rename / re-MTU / re-alias a link where it is (recovering a NIC lost to a dead netns).
    pub async fn restore_in_place(&self, index: u32, how: &Arrival<'_>) -> Result<()> {
        // A rename needs the link down; bring it up afterwards if it should be.
        let b = how.apply(LinkUnspec::new_with_index(index)).down();
        if let Err(e) = self.handle.link().set(b.build()).execute().await {
            let (dev, now) = self.name_of(index).await;
            let hint = match errno(&e) {
                Some(libc::EEXIST) => format!(
                    "; the NIC is back on the host as {now} because {} is taken",
                    how.name
                ),
                _ => String::new(),
            };
            let mut err = nl_error(format!("restoring {dev} as {:?}", how.name), e);
            err.msg.push_str(&hint);
            return Err(err);
        }
        if how.up {
            self.set_up(index).await?;
        }
        Ok(())
    }

    /// Link `index`'s description for messages ("net1 (index 7)") and its bare name.
    async fn name_of(&self, index: u32) -> (String, String) {
        match self.by_index(index).await {
            Ok(Some(l)) if !l.name.is_empty() => (format!("{} (index {index})", l.name), l.name),
            _ => {
                let d = format!("the link with index {index}");
                (d.clone(), d)
            }
        }
    }

    pub async fn set_up(&self, index: u32) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index).up().build();
        match self.handle.link().set(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) => Err(nl_error(
                format!("setting {} up", self.describe(index).await),
                e,
            )),
        }
    }

    /// Add `addr` to link `index`. IPv6 addresses skip duplicate address detection
    /// (IFA_F_NODAD), so they are usable the moment ADD returns rather than `tentative` for a
    /// second or more: the address came from IPAM, which owns its uniqueness.
    pub async fn add_address(&self, index: u32, addr: IpNet) -> Result<()> {
        let mut req = self
            .handle
            .address()
            .add(index, addr.addr(), addr.prefix_len());
        if addr.addr().is_ipv6() {
            let m = req.message_mut();
            m.header.flags.insert(AddressHeaderFlags::Nodad);
        }
        match req.execute().await {
            Ok(()) => Ok(()),
            Err(e) => Err(nl_error(
                format!("adding address {addr} to {}", self.describe(index).await),
                e,
            )),
        }
    }

    /// Addresses on link `index` (with their prefix), link-local IPv6 excluded.
    pub async fn addresses(&self, index: u32) -> Result<Vec<IpNet>> {
        let got: std::result::Result<Vec<AddressMessage>, _> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await;
        let msgs = match got {
            Ok(m) => m,
            Err(e) => {
                return Err(nl_error(
                    format!("listing addresses of {}", self.describe(index).await),
                    e,
                ));
            }
        };
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
        flags: m.header.flags.bits(),
        group: 0,
        txqlen: 0,
        alias: None,
        min_mtu: None,
        max_mtu: None,
        master: None,
        perm_mac: String::new(),
        altnames: Vec::new(),
        parent: None,
        kind: None,
        lower: None,
        lower_netnsid: None,
        carrier: false,
    };
    let (mut parent, mut bus) = (None, None);
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => li.name = n.clone(),
            LinkAttribute::Address(mac) => li.mac = format_mac(mac),
            LinkAttribute::Mtu(mtu) => li.mtu = *mtu,
            LinkAttribute::Group(g) => li.group = *g,
            LinkAttribute::TxQueueLen(q) => li.txqlen = *q,
            LinkAttribute::IfAlias(al) => li.alias = Some(al.clone()),
            LinkAttribute::MinMtu(m) => li.min_mtu = Some(*m),
            LinkAttribute::MaxMtu(m) if *m > 0 => li.max_mtu = Some(*m),
            LinkAttribute::Controller(i) if *i > 0 => li.master = Some(*i),
            LinkAttribute::Carrier(c) => li.carrier = *c != 0,
            LinkAttribute::ParentDevName(n) => parent = Some(n.clone()),
            LinkAttribute::ParentDevBusName(b) => bus = Some(b.clone()),
            LinkAttribute::Link(i) if *i > 0 => li.lower = Some(*i),
            LinkAttribute::LinkNetNsId(n) if *n >= 0 => li.lower_netnsid = Some(*n),
            LinkAttribute::LinkInfo(infos) => {
                use netlink_packet_route::link::{InfoData, InfoVxlan, LinkInfo as Info};
                for i in infos {
                    match i {
                        Info::Kind(k) => li.kind = Some(k.to_string()),
                        // A vxlan's `dev` is not its IFLA_LINK, but it rides that device all the
                        // same (the kernel deletes it when the device leaves).
                        Info::Data(InfoData::Vxlan(v)) => {
                            for a in v {
                                if let InfoVxlan::Link(i) = a
                                    && *i > 0
                                {
                                    li.lower = Some(*i);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
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
    li.parent = parent.map(|p| (p, bus.unwrap_or_default()));
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
    fn macs_parse_with_colons_or_dashes_two_digits_a_byte() {
        let mac = [0xaa, 0x0b, 0, 1, 2, 0xff];
        assert_eq!(parse_mac("aa:0b:00:01:02:ff"), Some(mac));
        assert_eq!(parse_mac("AA-0B-00-01-02-FF"), Some(mac));
        for bad in [
            "",
            "aa:b:00:01:02:ff",
            "aa:0b:00:01:02",
            "aa:0b:00:01:02:ff:00",
            "zz:0b:00:01:02:ff",
            "+a:0b:00:01:02:ff",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }

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
