//! Links whose name is not UTF-8. The kernel takes any bytes in a name but `/`, `:` and
//! whitespace (`ip link set net1 name $'\xff'`); the netlink crates decode names as strings
//! and drop a message whose name is not UTF-8, so such a link is invisible to every lookup in
//! `mod.rs`: a pod could hide its NIC from DEL, or a NIC lost to a dead pod from everything.
//! The raw dump (`raw.rs`) sees them; one of ours (the caller decides, by
//! its index, its parent device or our tag) is renamed to a readable name, and the rest of the
//! plugin sees it again.

use super::raw::{self, RawLink};
use super::{Links, nl_error};
use crate::error::{Code, Error, Result};
use crate::netns::Netns;
use rtnetlink::LinkUnspec;

/// A link whose name is not UTF-8, with what tells whose it is.
pub type Unreadable = RawLink;

/// The links in the calling thread's namespace whose name is not UTF-8.
pub fn dump() -> std::io::Result<Vec<Unreadable>> {
    // The namespace's link names as /proc lists them for this thread, a few bytes a link: the
    // raw dump (about 1.1 KiB a link, and a node has a veth per pod) only when one is not
    // UTF-8, or when the list does not read as expected.
    if std::fs::read("/proc/thread-self/net/dev").is_ok_and(|t| names_all_utf8(&t)) {
        return Ok(Vec::new());
    }
    let all = raw::dump()?.ok_or_else(|| {
        std::io::Error::other(format!(
            "more than {} MiB of links: not a link table to judge",
            raw::MAX_BYTES >> 20
        ))
    })?;
    Ok(all
        .into_iter()
        .filter(|l| std::str::from_utf8(&l.name).is_err())
        .collect())
}

/// Whether every name in `/proc/net/dev`'s text (two header lines, then `NAME: counters` per
/// link, a name holding neither `:` nor whitespace) is UTF-8; false for a line without `:`.
fn names_all_utf8(dev: &[u8]) -> bool {
    dev.split(|b| *b == b'\n')
        .skip(2)
        .filter(|l| !l.is_empty())
        .all(|line| match line.iter().position(|b| *b == b':') {
            Some(colon) => std::str::from_utf8(line[..colon].trim_ascii()).is_ok(),
            None => false,
        })
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

    #[test]
    fn only_a_name_that_is_not_utf8_or_an_unexpected_line_sends_us_to_the_raw_dump() {
        let head = "Inter-|   Receive\n face |bytes    packets\n";
        let ok = format!("{head}    lo: 0 0 0\n  eth0: 1 2 3\n");
        assert!(names_all_utf8(ok.as_bytes()));
        let mut bad = head.as_bytes().to_vec();
        bad.extend_from_slice(b"  pod\xff1: 0 0 0\n");
        assert!(!names_all_utf8(&bad));
        assert!(!names_all_utf8(format!("{head}garbage\n").as_bytes()));
        // This thread's namespace reads as expected (loopback at least).
        let here = std::fs::read("/proc/thread-self/net/dev").expect("/proc/net/dev");
        assert!(names_all_utf8(&here));
    }
}
