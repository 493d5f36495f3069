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
