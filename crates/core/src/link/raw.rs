//! A small synchronous RTM_GETLINK dump that decodes only what the plugin asks of every link
//! of a namespace: its name as bytes, alias, parent device, kind, MTU and reported state, and
//! the device it rides (IFLA_LINK, or a vxlan's `dev`) with that device's namespace id. For what the rtnetlink crate
//! cannot do (names that are not UTF-8, which it drops: `unreadable.rs`) or does too slowly to
//! run over every pod's namespace (a pod can fill its own with tens of thousands of links:
//! `uses.rs`). Statistics are not asked for (RTEXT_FILTER_SKIP_STATS): most of a link's bytes.

use crate::netlink_sync::{self, NLMSG_DONE, NLMSG_ERROR, SyncSocket, u16_at, u32_at};

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWNSID: u16 = 88;
const RTM_GETNSID: u16 = 90;
const NETNSA_NSID: u16 = 1;
const NETNSA_FD: u16 = 3;
const RTM_GETLINK: u16 = 18;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_IFALIAS: u16 = 20;
const IFLA_PARENT_DEV_NAME: u16 = 56;
const IFLA_LINK: u16 = 5;
const IFLA_EXT_MASK: u16 = 29;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_VXLAN_LINK: u16 = 3;
const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
/// Set on each message of a dump the kernel filtered as asked.
const NLM_F_DUMP_FILTERED: u16 = 0x20;
/// `struct ifinfomsg`.
const IFINFOMSG_LEN: usize = 16;
/// A dump larger than this is not a link table we can judge.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// One link, as much of it as the plugin asks of every link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawLink {
    pub index: u32,
    /// Any bytes the kernel took (not always UTF-8).
    pub name: Vec<u8>,
    pub alias: Option<String>,
    /// IFLA_PARENT_DEV_NAME: the device behind a hardware NIC (`0000:3b:00.1`).
    pub parent: Option<String>,
    /// IFLA_INFO_KIND (`veth`, ...); `None` for hardware.
    pub kind: Option<String>,
    /// The device it rides: IFLA_LINK (a macvlan's or VLAN's lower, a veth's peer), or a
    /// vxlan's IFLA_VXLAN_LINK.
    pub lower: Option<u32>,
    /// IFLA_LINK_NETNSID: the namespace `lower` is in, as this link's namespace numbers it.
    pub lower_netnsid: Option<i32>,
    pub mtu: Option<u32>,
    /// IFLA_OPERSTATE, as the kernel reports it (DOWN while the link is not running).
    pub operstate: Option<u8>,
}

impl RawLink {
    /// Whether this link is stacked on link `index` of the namespace it numbers as
    /// `lower_netnsid` (`None`: its own): its IFLA_LINK names it, and it is not a veth (a
    /// veth's IFLA_LINK is its peer, not a lower device).
    pub(crate) fn rides(&self, index: u32, lower_netnsid: Option<i32>) -> bool {
        self.lower == Some(index)
            && self.lower_netnsid == lower_netnsid
            && self.kind.as_deref() != Some("veth")
    }

    /// The name for messages: its bytes, escaped (`logging::escaped`).
    pub fn shown(&self) -> String {
        crate::logging::escaped(&self.name, crate::logging::MAX_SHOWN)
    }

    /// What its notification announces ([`Announced`]).
    pub fn announced(&self) -> Announced<'_> {
        Announced {
            name: &self.name,
            mtu: self.mtu,
            operstate: self.operstate,
        }
    }
}

/// Every link of the calling thread's namespace; `None` when they are more than `MAX_BYTES`
/// (never a partial list): the caller decides what a namespace that large means.
pub fn dump() -> std::io::Result<Option<Vec<RawLink>>> {
    dump_on(&mut netlink_sync::route_socket()?)
}

/// The links of kind `kind` (IFLA_INFO_KIND) in the calling thread's namespace, the kernel
/// filtering: it walks every link but fills in only those, so the cost does not grow with the
/// others (a veth per pod). A kind the kernel does not know has no links; the kernel then
/// ignores the filter, its answer says so (no NLM_F_DUMP_FILTERED), and the dump is abandoned
/// with its socket.
pub(crate) fn dump_kind(kind: &str) -> std::io::Result<Vec<RawLink>> {
    let mut sock = netlink_sync::route_socket()?;
    let mut req = every_link();
    let mut name = kind.as_bytes().to_vec();
    name.push(0);
    let mut info = Vec::new();
    push_attr(&mut info, IFLA_INFO_KIND, &name);
    push_attr(&mut req, IFLA_LINKINFO, &info);
    let mut out = Vec::new();
    let mut outcome = Ok(true);
    sock.dump(RTM_GETLINK, &req, MAX_BYTES, |buf| {
        if let Some(first) = messages(buf).and_then(|m| m.first().copied())
            && u16_at(first, 4) == Some(RTM_NEWLINK)
            && u16_at(first, 6).is_some_and(|f| f & NLM_F_DUMP_FILTERED == 0)
        {
            // Unfiltered: the kernel knows no such kind, so no link is of it.
            outcome = Ok(false);
            return false;
        }
        outcome = parse(buf, &mut out);
        outcome == Ok(true)
    })?;
    match outcome {
        Ok(false) => Ok(out
            .into_iter()
            .filter(|l| l.kind.as_deref() == Some(kind))
            .collect()),
        Ok(true) => Err(std::io::Error::other(format!(
            "more than {} MiB of {kind} links",
            MAX_BYTES >> 20
        ))),
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// Append attribute `kind` = `value`, padded to 4 bytes.
fn push_attr(b: &mut Vec<u8>, kind: u16, value: &[u8]) {
    b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(value);
    while !b.len().is_multiple_of(4) {
        b.push(0);
    }
}

/// The request for every link: AF_UNSPEC in a zeroed ifinfomsg, no statistics.
fn every_link() -> Vec<u8> {
    let mut req = vec![0u8; IFINFOMSG_LEN];
    req.extend_from_slice(&8u16.to_ne_bytes());
    req.extend_from_slice(&IFLA_EXT_MASK.to_ne_bytes());
    req.extend_from_slice(&RTEXT_FILTER_SKIP_STATS.to_ne_bytes());
    req
}

/// `dump` on `sock`, in the namespace it was opened in.
pub(crate) fn dump_on(sock: &mut SyncSocket) -> std::io::Result<Option<Vec<RawLink>>> {
    let mut out = Vec::new();
    let mut outcome = Ok(true);
    sock.dump(RTM_GETLINK, &every_link(), MAX_BYTES, |buf| {
        outcome = parse(buf, &mut out);
        outcome == Ok(true)
    })?;
    match outcome {
        Ok(false) => Ok(Some(out)),
        Ok(true) => Ok(None),
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// The links of `sock`'s namespace that `keep` keeps, however many links the namespace holds:
/// the dump is read to its end, and only what is kept is held (a search for what rides one
/// NIC must not pass over a namespace because it is large).
pub(crate) fn dump_where(
    sock: &mut SyncSocket,
    keep: impl Fn(&RawLink) -> bool,
) -> std::io::Result<Vec<RawLink>> {
    let mut out = Vec::new();
    let mut outcome = Ok(true);
    sock.dump(RTM_GETLINK, &every_link(), usize::MAX, |buf| {
        let mut these = Vec::new();
        outcome = parse(buf, &mut these);
        out.extend(these.into_iter().filter(|l| keep(l)));
        outcome == Ok(true)
    })?;
    match outcome {
        Ok(false) => Ok(out),
        Ok(true) => Err(std::io::Error::other("the link dump ended early")),
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// Delete link `index` of `sock`'s namespace (RTM_DELLINK). One gone already is not an error.
pub fn delete_on(sock: &mut SyncSocket, index: u32) -> std::io::Result<()> {
    let mut req = vec![0u8; IFINFOMSG_LEN];
    req[4..8].copy_from_slice(&index.to_ne_bytes());
    match sock.act(RTM_DELLINK, &req, "deleting a link") {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(()),
        r => r,
    }
}

/// Whether a link notification (RTM_NEWLINK or RTM_DELLINK, as a group member receives them)
/// is a removal, and the link as it describes it. `None` for a message that is neither.
pub fn notification(msg: &[u8]) -> Option<(bool, RawLink)> {
    let gone = match u16_at(msg, 4)? {
        RTM_NEWLINK => false,
        RTM_DELLINK => true,
        _ => return None,
    };
    Some((gone, link(msg.get(16..)?)?))
}

/// What a link notification says of its link that the kernel changes only with a
/// notification of its own, sent after the change and whether the link is up or down: its
/// name (NETDEV_CHANGENAME), MTU (NETDEV_CHANGEMTU) and operational state as reported (DOWN
/// while the link is not running; opening and closing it send a notification, and while it
/// runs linkwatch sends one with each change). Not the alias: the kernel announces one set on a
/// link that is down with nothing (`netdev_state_change` sends only for a link that is up).
/// Nor flags, promiscuity or carrier: the kernel changes them without a notification of their
/// own, when an upper adds an address for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Announced<'a> {
    pub name: &'a [u8],
    pub mtu: Option<u32>,
    pub operstate: Option<u8>,
}

/// Whether a link notification (a whole message) says only that its link went down: the
/// interface flags without IFF_UP and IFF_UP among the changed ones (`ifi_change`). The
/// kernel closes a link before it moves it to another namespace, so the move itself sends
/// this just before its RTM_DELLINK. An upper linked to or unlinked from the link
/// (NETDEV_CHANGEUPPER) sends `ifi_change` 0: never this.
pub fn went_down(msg: &[u8]) -> bool {
    let up = libc::IFF_UP as u32;
    match (u16_at(msg, 4), u32_at(msg, 24), u32_at(msg, 28)) {
        (Some(RTM_NEWLINK), Some(flags), Some(change)) => flags & up == 0 && change & up != 0,
        _ => false,
    }
}

/// The messages of one datagram, each whole (header included); `None` when one is cut short.
pub fn messages(buf: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let len = u32_at(buf, at)? as usize;
        if len < 16 || at + len > buf.len() {
            return None;
        }
        out.push(&buf[at..at + len]);
        at += (len + 3) & !3;
    }
    Some(out)
}

/// The id `sock`'s namespace gives the namespace `fd` refers to (RTM_GETNSID), `None` when
/// it has given it none: then no link there can name a lower device in that namespace.
pub fn nsid_of(sock: &mut SyncSocket, fd: std::os::fd::RawFd) -> std::io::Result<Option<i32>> {
    // struct rtgenmsg (AF_UNSPEC, padded to 4), then NETNSA_FD.
    let mut body = vec![0u8; 4];
    body.extend_from_slice(&8u16.to_ne_bytes());
    body.extend_from_slice(&NETNSA_FD.to_ne_bytes());
    body.extend_from_slice(&u32::try_from(fd).unwrap_or(u32::MAX).to_ne_bytes());
    let reply = sock.ask(RTM_GETNSID, &body, "asking for a namespace id")?;
    let bad = || std::io::Error::from_raw_os_error(libc::EBADMSG);
    let msg = messages(reply)
        .and_then(|m| m.first().copied())
        .ok_or_else(bad)?;
    match u16_at(msg, 4).ok_or_else(bad)? {
        NLMSG_ERROR => {
            let code = u32_at(msg, 16).ok_or_else(bad)? as i32;
            Err(std::io::Error::from_raw_os_error(code.saturating_neg()))
        }
        RTM_NEWNSID => Ok(attrs(msg.get(20..).ok_or_else(bad)?)
            .find(|(k, _)| *k == NETNSA_NSID)
            .and_then(|(_, v)| u32_at(v, 0))
            .map(|n| n as i32)
            .filter(|n| *n >= 0)),
        _ => Err(bad()),
    }
}

/// Netlink attributes in `b`: (type, value).
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let (len, kind) = (u16_at(b, at)? as usize, u16_at(b, at + 2)?);
        if len < 4 || at + len > b.len() {
            return None;
        }
        let value = &b[at + 4..at + len];
        at += (len + 3) & !3;
        Some((kind & 0x3fff, value))
    })
}

/// A string attribute without its NUL.
fn bytes(v: &[u8]) -> &[u8] {
    v.split(|b| *b == 0).next().unwrap_or(v)
}

/// Parse one datagram, appending its links: `Ok(true)` when more are to come, `Ok(false)` when
/// the dump ended, `Err(errno)` when the kernel refused it or a message is cut short.
fn parse(buf: &[u8], out: &mut Vec<RawLink>) -> Result<bool, i32> {
    let mut at = 0;
    while let (Some(len), Some(kind)) = (u32_at(buf, at), u16_at(buf, at + 4)) {
        let len = len as usize;
        if len < 16 || at + len > buf.len() {
            return Err(libc::EBADMSG);
        }
        let msg = &buf[at..at + len];
        match kind {
            NLMSG_DONE => return Ok(false),
            NLMSG_ERROR => {
                return match u32_at(msg, 16).map(|c| c as i32) {
                    Some(0) => Ok(false),
                    Some(c) => Err(c.saturating_neg()),
                    None => Err(libc::EBADMSG),
                };
            }
            RTM_NEWLINK => out.push(msg.get(16..).and_then(link).ok_or(libc::EBADMSG)?),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Ok(true)
}

/// One RTM_NEWLINK body.
fn link(body: &[u8]) -> Option<RawLink> {
    let index = u32_at(body, 4)?;
    let mut l = RawLink {
        index,
        ..RawLink::default()
    };
    let mut data = None;
    for (kind, value) in attrs(body.get(IFINFOMSG_LEN..)?) {
        match kind {
            IFLA_IFNAME => l.name = bytes(value).to_vec(),
            IFLA_MTU => l.mtu = u32_at(value, 0),
            IFLA_OPERSTATE => l.operstate = value.first().copied(),
            IFLA_IFALIAS => l.alias = std::str::from_utf8(bytes(value)).ok().map(str::to_owned),
            IFLA_PARENT_DEV_NAME => {
                l.parent = std::str::from_utf8(bytes(value)).ok().map(str::to_owned)
            }
            IFLA_LINK => l.lower = u32_at(value, 0).filter(|i| *i > 0),
            IFLA_LINK_NETNSID => {
                l.lower_netnsid = u32_at(value, 0).map(|n| n as i32).filter(|n| *n >= 0)
            }
            IFLA_LINKINFO => {
                for (k, v) in attrs(value) {
                    match k {
                        IFLA_INFO_KIND => {
                            l.kind = std::str::from_utf8(bytes(v)).ok().map(str::to_owned)
                        }
                        IFLA_INFO_DATA => data = Some(v),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // A vxlan's `dev` is not its IFLA_LINK, but it rides that device all the same.
    if l.kind.as_deref() == Some("vxlan")
        && let Some(d) = data
        && let Some(i) = attrs(d)
            .find(|(k, _)| *k == IFLA_VXLAN_LINK)
            .and_then(|(_, v)| u32_at(v, 0))
            .filter(|i| *i > 0)
    {
        l.lower = Some(i);
    }
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::netlink_sync::test_attr as attr;

    fn newlink(index: u32, name: &[u8], extra: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        let mut n = name.to_vec();
        n.push(0);
        body.extend(attr(IFLA_IFNAME, &n));
        body.extend_from_slice(extra);
        crate::netlink_sync::test_message(RTM_NEWLINK, 0, 0, &body)
    }

    #[test]
    fn a_notification_announces_its_links_name_mtu_and_state_and_not_its_alias() {
        let said = |alias: &[u8]| {
            let mut extra = attr(IFLA_MTU, &1400u32.to_ne_bytes());
            extra.extend(attr(IFLA_OPERSTATE, &[6]));
            extra.extend(attr(IFLA_IFALIAS, alias));
            let (gone, l) = notification(&newlink(7, b"net1", &extra)).expect("a notification");
            assert!(!gone);
            l
        };
        let tagged = said(b"rdma-host-device:v1:x\0");
        assert_eq!(
            tagged.announced(),
            Announced {
                name: b"net1",
                mtu: Some(1400),
                operstate: Some(6),
            }
        );
        // Another alias announces nothing new.
        assert_eq!(said(b"mine now\0").announced(), tagged.announced());
    }

    #[test]
    fn every_link_is_kept_with_what_tells_whose_it_is_and_what_it_rides() {
        let mut info = attr(IFLA_INFO_KIND, b"veth\0");
        info = attr(IFLA_LINKINFO, &info);
        let mut extra = attr(IFLA_IFALIAS, b"rdma-host-device:v1:x\0");
        extra.extend(info);
        let mut buf = newlink(3, b"eth0", &[]);
        buf.extend(newlink(7, b"pod\xff\xfe1", &extra));
        // A macvlan on index 3 of the namespace numbered 2; a vxlan whose dev is index 3.
        let mut mv = attr(IFLA_LINK, &3u32.to_ne_bytes());
        mv.extend(attr(IFLA_LINK_NETNSID, &2i32.to_ne_bytes()));
        mv.extend(attr(IFLA_LINKINFO, &attr(IFLA_INFO_KIND, b"macvlan\0")));
        buf.extend(newlink(8, b"mv0", &mv));
        let mut vx = attr(IFLA_INFO_KIND, b"vxlan\0");
        vx.extend(attr(
            IFLA_INFO_DATA,
            &attr(IFLA_VXLAN_LINK, &3u32.to_ne_bytes()),
        ));
        buf.extend(newlink(9, b"vx0", &attr(IFLA_LINKINFO, &vx)));
        let mut out = Vec::new();
        assert_eq!(parse(&buf, &mut out), Ok(true));
        assert_eq!(out.len(), 4);
        assert_eq!(
            (out[0].index, out[0].name.as_slice(), out[0].lower),
            (3, &b"eth0"[..], None)
        );
        assert_eq!(out[1].index, 7);
        assert_eq!(out[1].name, b"pod\xff\xfe1");
        assert_eq!(out[1].kind.as_deref(), Some("veth"));
        assert_eq!(out[1].alias.as_deref(), Some("rdma-host-device:v1:x"));
        assert_eq!(out[1].shown(), "pod\\xff\\xfe1");
        assert_eq!((out[2].lower, out[2].lower_netnsid), (Some(3), Some(2)));
        assert_eq!(
            (out[3].kind.as_deref(), out[3].lower),
            (Some("vxlan"), Some(3))
        );
        // Cut short: an error, never a partial list taken for the whole; never a panic.
        assert_eq!(parse(&buf[..20], &mut out), Err(libc::EBADMSG));
        assert_eq!(parse(&[0xff; 3], &mut out), Ok(true));
        // The end of the dump, and a dump the kernel refused.
        let done = crate::netlink_sync::test_message(NLMSG_DONE, 0, 0, &0i32.to_ne_bytes());
        assert_eq!(parse(&done, &mut out), Ok(false));
        let refused =
            crate::netlink_sync::test_message(NLMSG_ERROR, 0, 0, &(-libc::EINVAL).to_ne_bytes());
        assert_eq!(parse(&refused, &mut out), Err(libc::EINVAL));
    }

    #[test]
    fn only_a_link_going_down_is_went_down_and_an_upper_change_never_is() {
        let msg = |flags: u32, change: u32| {
            let mut body = vec![0u8; IFINFOMSG_LEN];
            body[4..8].copy_from_slice(&7u32.to_ne_bytes());
            body[8..12].copy_from_slice(&flags.to_ne_bytes());
            body[12..16].copy_from_slice(&change.to_ne_bytes());
            crate::netlink_sync::test_message(RTM_NEWLINK, 0, 0, &body)
        };
        let up = libc::IFF_UP as u32;
        let bcast = libc::IFF_BROADCAST as u32;
        // The close before a move: IFF_UP cleared, and said to have changed.
        assert!(went_down(&msg(bcast, up)));
        // NETDEV_CHANGEUPPER: ifi_change 0, whatever the flags.
        assert!(!went_down(&msg(bcast, 0)));
        assert!(!went_down(&msg(bcast | up, 0)));
        // Coming up.
        assert!(!went_down(&msg(bcast | up, up)));
        let mut del = msg(bcast, up);
        del[4..6].copy_from_slice(&RTM_DELLINK.to_ne_bytes());
        assert!(!went_down(&del));
        assert!(!went_down(&[0u8; 10]));
    }

    #[test]
    fn the_dump_runs() {
        // Whatever this namespace holds, the dump answers, loopback among its links.
        let links = dump().expect("a link dump").expect("a small namespace");
        assert!(links.iter().any(|l| l.name == b"lo"), "{links:?}");
    }
    #[test]
    fn a_link_rides_the_index_it_names_in_the_namespace_it_names_but_a_veth_never_does() {
        let mv = RawLink {
            index: 9,
            lower: Some(4),
            lower_netnsid: Some(2),
            kind: Some("macvlan".into()),
            ..RawLink::default()
        };
        assert!(mv.rides(4, Some(2)));
        assert!(!mv.rides(4, None), "another namespace's index 4");
        assert!(!mv.rides(4, Some(3)));
        assert!(!mv.rides(5, Some(2)));
        let peer = RawLink {
            kind: Some("veth".into()),
            ..mv.clone()
        };
        assert!(!peer.rides(4, Some(2)), "a veth's IFLA_LINK is its peer");
    }
}
