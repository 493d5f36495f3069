//! Links whose name is not UTF-8. The kernel takes any bytes in a name but `/`, `:` and
//! whitespace (`ip link set net1 name $'\xff'`); the netlink crates decode names as strings
//! and drop a message whose name is not UTF-8, so such a link is invisible to every lookup in
//! `mod.rs`: a pod could hide its NIC from DEL, or a NIC lost to a dead pod from everything.
//! A small synchronous RTM_GETLINK dump here sees them; one of ours (the caller decides, by
//! its index, its parent device or our tag) is renamed to a readable name, and the rest of the
//! plugin sees it again.

use super::{Links, nl_error};
use crate::error::{Code, Error, Result};
use crate::netlink_sync::{self, NLMSG_DONE, NLMSG_ERROR, u16_at, u32_at};
use crate::netns::Netns;
use rtnetlink::LinkUnspec;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_IFALIAS: u16 = 20;
const IFLA_PARENT_DEV_NAME: u16 = 56;
/// `struct ifinfomsg`.
const IFINFOMSG_LEN: usize = 16;
/// A dump larger than this is not a link table we can judge: stop reading.
const MAX_BYTES: usize = 64 << 20;

/// A link whose name is not UTF-8, with what tells whose it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unreadable {
    pub index: u32,
    pub name: Vec<u8>,
    pub alias: Option<String>,
    /// IFLA_PARENT_DEV_NAME: the device behind a hardware NIC (`0000:3b:00.1`).
    pub parent: Option<String>,
    /// IFLA_INFO_KIND (`veth`, ...); `None` for hardware.
    pub kind: Option<String>,
}

impl Unreadable {
    /// The name for messages: its bytes, escaped.
    pub fn shown(&self) -> String {
        self.name.escape_ascii().to_string()
    }
}

/// The links in the calling thread's namespace whose name is not UTF-8.
pub fn dump() -> std::io::Result<Vec<Unreadable>> {
    let mut out = Vec::new();
    // AF_UNSPEC in a zeroed ifinfomsg: every link.
    netlink_sync::route_dump(RTM_GETLINK, &[0u8; IFINFOMSG_LEN], MAX_BYTES, |buf| {
        parse(buf, &mut out).is_some()
    })?;
    Ok(out)
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

/// Parse one datagram, appending the links whose name is not UTF-8. `None`: the dump ended.
fn parse(buf: &[u8], out: &mut Vec<Unreadable>) -> Option<()> {
    let mut at = 0;
    while let (Some(len), Some(kind)) = (u32_at(buf, at), u16_at(buf, at + 4)) {
        let len = len as usize;
        if len < 16 || at + len > buf.len() {
            return None;
        }
        let msg = &buf[at..at + len];
        match kind {
            NLMSG_DONE | NLMSG_ERROR => return None,
            RTM_NEWLINK => {
                if let Some(l) = link(msg.get(16..)?) {
                    out.push(l);
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Some(())
}

/// One RTM_NEWLINK body, if its name is not UTF-8.
fn link(body: &[u8]) -> Option<Unreadable> {
    let index = u32_at(body, 4)?;
    let mut l = Unreadable {
        index,
        ..Unreadable::default()
    };
    for (kind, value) in attrs(body.get(IFINFOMSG_LEN..)?) {
        match kind {
            IFLA_IFNAME => l.name = bytes(value).to_vec(),
            IFLA_IFALIAS => l.alias = std::str::from_utf8(bytes(value)).ok().map(str::to_owned),
            IFLA_PARENT_DEV_NAME => {
                l.parent = std::str::from_utf8(bytes(value)).ok().map(str::to_owned)
            }
            IFLA_LINKINFO => {
                l.kind = attrs(value)
                    .find(|(k, _)| *k == IFLA_INFO_KIND)
                    .and_then(|(_, v)| std::str::from_utf8(bytes(v)).ok().map(str::to_owned))
            }
            _ => {}
        }
    }
    (std::str::from_utf8(&l.name).is_err()).then_some(l)
}

impl Links {
    /// Rename every link of namespace `ns` (this handle's) whose name is not UTF-8 and that
    /// `ours` picks to `rhd<index>`, down first (the kernel renames only a link that is down),
    /// so that the lookups of `mod.rs` see it again. Returns the indexes renamed.
    pub async fn name_unreadable(
        &self,
        ns: &Netns,
        ours: impl Fn(&Unreadable) -> bool,
    ) -> Result<Vec<u32>> {
        let found = ns.within(dump)?.map_err(|e| {
            Error::new(
                Code::Netlink,
                format!(
                    "listing the links of {} (raw dump): {e}",
                    ns.path().display()
                ),
            )
        })?;
        let mut renamed = Vec::new();
        for u in found.iter().filter(|u| ours(u)) {
            let name = format!("rhd{}", u.index);
            log::warn!(
                "link {} (index {}) has a name that is not UTF-8; renaming it {name}",
                u.shown(),
                u.index
            );
            let down = LinkUnspec::new_with_index(u.index).down().build();
            let rename = LinkUnspec::new_with_index(u.index)
                .name(name.clone())
                .build();
            for msg in [down, rename] {
                if let Err(e) = self.handle.link().set(msg).execute().await {
                    return Err(nl_error(
                        format!(
                            "renaming link {} (index {}, a name that is not UTF-8) to {name}",
                            u.shown(),
                            u.index
                        ),
                        e,
                    ));
                }
            }
            renamed.push(u.index);
        }
        Ok(renamed)
    }
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
    fn only_names_that_are_not_utf8_are_kept_with_what_tells_whose() {
        let mut info = attr(IFLA_INFO_KIND, b"veth\0");
        info = attr(IFLA_LINKINFO, &info);
        let mut extra = attr(IFLA_IFALIAS, b"rdma-host-device:v1:x\0");
        extra.extend(info);
        let mut buf = newlink(3, b"eth0", &[]);
        buf.extend(newlink(7, b"pod\xff\xfe1", &extra));
        let mut out = Vec::new();
        assert_eq!(parse(&buf, &mut out), Some(()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].index, 7);
        assert_eq!(out[0].name, b"pod\xff\xfe1");
        assert_eq!(out[0].kind.as_deref(), Some("veth"));
        assert_eq!(out[0].alias.as_deref(), Some("rdma-host-device:v1:x"));
        assert_eq!(out[0].shown(), "pod\\xff\\xfe1");
        // Truncated or garbage input ends the parse, never panics.
        assert_eq!(parse(&buf[..20], &mut out), None);
        assert_eq!(parse(&[0xff; 3], &mut out), Some(()));
    }

    #[test]
    fn the_dump_runs() {
        // Whatever this namespace holds, the dump answers (names here are all UTF-8).
        assert!(dump().is_ok());
    }
}
