//! Nexthop objects (RTM_GETNEXTHOP, Linux 5.3+): a route may name its way out only by
//! `RTA_NH_ID`, with the device in the nexthop object. rtnetlink has no nexthop API, so this is
//! a small synchronous dump over a NETLINK_ROUTE socket in the calling thread's namespace.

use crate::netlink_sync::{self, NLMSG_DONE, NLMSG_ERROR, u16_at, u32_at};
use std::collections::HashSet;

const RTM_NEWNEXTHOP: u16 = 104;
const RTM_GETNEXTHOP: u16 = 106;
const NHA_ID: u16 = 1;
const NHA_GROUP: u16 = 2;
const NHA_OIF: u16 = 5;
/// An answer larger than this is not a nexthop table we can judge: stop reading.
const MAX_BYTES: usize = 16 << 20;

/// One nexthop object: its id, its device (for a single nexthop) or its members (a group).
#[derive(Debug, Default, PartialEq, Eq)]
struct Nexthop {
    id: u32,
    oif: Option<u32>,
    group: Vec<u32>,
}

/// The ids of every nexthop object (single or group) that leaves through link `index`.
/// A kernel without nexthop objects has none: an empty set.
pub(crate) fn ids_through(index: u32) -> std::io::Result<HashSet<u32>> {
    let all = dump()?;
    let mut ids: HashSet<u32> = all
        .iter()
        .filter(|n| n.oif == Some(index))
        .map(|n| n.id)
        .collect();
    let groups: Vec<u32> = all
        .iter()
        .filter(|n| n.group.iter().any(|m| ids.contains(m)))
        .map(|n| n.id)
        .collect();
    ids.extend(groups);
    Ok(ids)
}

fn dump() -> std::io::Result<Vec<Nexthop>> {
    let mut out = Vec::new();
    let mut refused = None;
    // struct nhmsg, AF_UNSPEC
    netlink_sync::route_dump(RTM_GETNEXTHOP, &[0u8; 8], MAX_BYTES, |buf| {
        match parse(buf, &mut out) {
            Parsed::More => true,
            Parsed::Done => false,
            Parsed::Error(code) => {
                refused = Some(code);
                false
            }
        }
    })?;
    // EOPNOTSUPP/EINVAL from kernels without nexthop objects: none exist.
    if let Some(code) = refused {
        log::debug!(
            "no nexthop objects to look at (the kernel answers errno {})",
            -code
        );
        return Ok(Vec::new());
    }
    Ok(out)
}

enum Parsed {
    More,
    Done,
    Error(i32),
}

/// Parse one datagram of netlink messages, appending the nexthops found.
fn parse(buf: &[u8], out: &mut Vec<Nexthop>) -> Parsed {
    let mut at = 0;
    while let (Some(len), Some(kind)) = (u32_at(buf, at), u16_at(buf, at + 4)) {
        let len = len as usize;
        if len < 16 || at + len > buf.len() {
            return Parsed::Done;
        }
        let msg = &buf[at..at + len];
        match kind {
            NLMSG_DONE => return Parsed::Done,
            NLMSG_ERROR => {
                let code = u32_at(msg, 16).map_or(-1, |c| c as i32);
                return if code == 0 {
                    Parsed::Done
                } else {
                    Parsed::Error(code)
                };
            }
            RTM_NEWNEXTHOP => out.push(nexthop(&msg[16..])),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Parsed::More
}

/// `struct nhmsg` (8 bytes) and its attributes.
fn nexthop(body: &[u8]) -> Nexthop {
    let mut n = Nexthop::default();
    let mut at = 8;
    while let (Some(len), Some(kind)) = (u16_at(body, at), u16_at(body, at + 2)) {
        let len = len as usize;
        if len < 4 || at + len > body.len() {
            break;
        }
        let value = &body[at + 4..at + len];
        match kind & 0x3fff {
            NHA_ID => n.id = u32_at(value, 0).unwrap_or(0),
            NHA_OIF => n.oif = u32_at(value, 0),
            // struct nexthop_grp: id u32, weight u8, weight_high u8, resvd u16
            NHA_GROUP => n.group = value.chunks_exact(8).filter_map(|c| u32_at(c, 0)).collect(),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::netlink_sync::test_attr as attr;

    fn msg(kind: u16, body: &[u8]) -> Vec<u8> {
        crate::netlink_sync::test_message(kind, 0, 0, body)
    }

    #[test]
    fn parses_singles_groups_and_the_end() {
        let mut single = vec![0u8; 8];
        single.extend(attr(NHA_ID, &7u32.to_ne_bytes()));
        single.extend(attr(NHA_OIF, &42u32.to_ne_bytes()));
        let mut group = vec![0u8; 8];
        group.extend(attr(NHA_ID, &9u32.to_ne_bytes()));
        let mut members = Vec::new();
        for id in [7u32, 8] {
            members.extend_from_slice(&id.to_ne_bytes());
            members.extend_from_slice(&[1, 0, 0, 0]);
        }
        group.extend(attr(NHA_GROUP, &members));
        let mut buf = msg(RTM_NEWNEXTHOP, &single);
        buf.extend(msg(RTM_NEWNEXTHOP, &group));
        let mut out = Vec::new();
        assert!(matches!(parse(&buf, &mut out), Parsed::More));
        assert_eq!(
            out[0],
            Nexthop {
                id: 7,
                oif: Some(42),
                group: vec![]
            }
        );
        assert_eq!(
            out[1],
            Nexthop {
                id: 9,
                oif: None,
                group: vec![7, 8]
            }
        );
        assert!(matches!(
            parse(&msg(NLMSG_DONE, &[0; 4]), &mut out),
            Parsed::Done
        ));
        // Truncated or garbage input ends the parse, never panics.
        assert!(matches!(parse(&buf[..20], &mut out), Parsed::Done));
        assert!(matches!(parse(&[0xff; 3], &mut out), Parsed::More));
    }
}
