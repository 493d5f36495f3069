//! Which link is an attachment's NIC, and how a lost NIC is to be given back: the pure decisions
//! of giving back, on plain data (links as netlink reported them, records, tags), so that they
//! can be tested without a kernel. What a pod cannot forge decides: a hardware NIC is its
//! parent device; a virtual one its kind and where it is; our alias tag is a hint only.

use rdma_host_device_core::link::{Arrival, LinkInfo, Unreadable};
use rdma_host_device_core::state::{Record, Tag, record_of_lost};
use std::collections::HashSet;

/// Where [`find_nic`] looks: the pod (any state of the NIC) or the host (only a lost NIC,
/// which still bears our tag; an untagged one there is simply at home).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::flows) enum Where {
    Pod,
    Host,
}

/// Is `l` the NIC that `r` describes, by what a pod cannot forge? A NIC with a parent device
/// (a PCI function, an SF, a virtio device) is that device: no link a pod creates has one. A
/// virtual "NIC" (tests' veths) can only be matched by its kind, the permanent MAC where it
/// has one, and where it is; a pod can imitate those, so virtual NICs are not protected.
pub(in crate::flows) fn is_the_nic(l: &LinkInfo, r: &Record) -> bool {
    match &r.parent {
        Some(_) => r.is_its_device(l),
        None => {
            (r.perm_mac.is_empty() || l.perm_mac == r.perm_mac)
                && l.parent.is_none()
                && l.kind == r.kind
        }
    }
}

/// Records written before ADD noted the NIC's identity (host index, parent, kind): DEL falls
/// back to the alias tag and MAC for them, as those versions did.
pub(in crate::flows) fn legacy(r: &Record) -> bool {
    r.host_index == 0
}

/// The NIC of `r` among `links`, by what a pod cannot forge. A link bearing our tag that is
/// not the NIC is ignored, and said so.
pub(in crate::flows) fn find_nic(
    links: &[LinkInfo],
    r: &Record,
    owner: &str,
    place: Where,
) -> Option<LinkInfo> {
    let tagged = |l: &LinkInfo| {
        l.alias
            .as_deref()
            .and_then(Tag::decode)
            .is_some_and(|t| t.owner == owner)
    };
    let hit = if legacy(r) {
        links
            .iter()
            .find(|l| tagged(l) || (place == Where::Pod && l.mac == r.mac && l.alias.is_none()))
    } else {
        match (place, r.pod_index, r.parent.is_some()) {
            // Hardware: the device itself, wherever its index is now.
            (Where::Pod, _, true) => links.iter().find(|l| is_the_nic(l, r)),
            // Virtual: the index the pod cannot change (though it can reuse it).
            (Where::Pod, Some(index), false) => {
                links.iter().find(|l| l.index == index && is_the_nic(l, r))
            }
            // ADD died between the move and noting the pod-side index: the host index (kept
            // by a move when it is free), our tag or the recorded MAC, on a link of its kind.
            (Where::Pod, None, false) => links.iter().find(|l| {
                is_the_nic(l, r)
                    && l.mac == r.mac
                    && (l.index == r.host_index || tagged(l) || l.alias.is_none())
            }),
            // On the host only a lost NIC (still tagged) is ours to give back.
            (Where::Host, _, _) => links
                .iter()
                .find(|l| tagged(l) && is_the_nic(l, r) && (r.parent.is_some() || l.mac == r.mac)),
        }
    };
    for l in links.iter().filter(|l| tagged(l)) {
        if hit.is_none_or(|h| h.index != l.index) {
            log::warn!(
                "ignoring {} (index {}, mac {}): it bears the tag of {}/{} but is not its NIC {} ({})",
                l.name,
                l.index,
                l.mac,
                r.container_id,
                r.ifname,
                r.host_name,
                r.parent.clone().unwrap_or_else(|| format!("mac {}", r.mac))
            );
        }
    }
    hit.cloned()
}

/// `r`'s hardware NIC back on the host under a tag that is not `r`'s: its pod rewrote the alias
/// before it died (attack review L1), and this DEL came before any call that gives back lost
/// NICs. Whose NIC it is follows the rule those calls use ([`record_of_lost`] over every
/// record): the tag's owner's if that attachment has a record (a later attachment's NIC,
/// legitimately), else the record whose device it is. A virtual NIC has no device to tell.
pub(in crate::flows) fn lost_under_another_tag(
    links: &[LinkInfo],
    r: &Record,
    records: &[Record],
) -> Option<LinkInfo> {
    if r.parent.is_none() || legacy(r) {
        return None;
    }
    links
        .iter()
        .find(|l| {
            r.is_its_device(l)
                && l.alias
                    .as_deref()
                    .and_then(Tag::decode)
                    .and_then(|tag| record_of_lost(l, &tag, records))
                    .is_some_and(|whose| whose.owner() == r.owner())
        })
        .cloned()
}

/// Does unreadable link `u` (a name that is not UTF-8) bear a tag of ours: `owner`'s, or any
/// attachment's when `None`?
pub(in crate::flows) fn tagged_by(u: &Unreadable, owner: Option<&str>) -> bool {
    u.alias
        .as_deref()
        .and_then(Tag::decode)
        .is_some_and(|t| owner.is_none_or(|o| t.owner == o))
}

/// Is unreadable link `u`, in the pod, the NIC of `r`? As [`find_nic`] decides: a hardware
/// NIC by its device, a virtual one by its pod index and kind; a legacy record by our tag.
pub(in crate::flows) fn unreadable_is_ours(u: &Unreadable, r: &Record, owner: &str) -> bool {
    if legacy(r) {
        return tagged_by(u, Some(owner));
    }
    match &r.parent {
        Some(p) => u
            .parent
            .as_deref()
            .is_some_and(|d| p.rsplit_once('/').is_some_and(|(_, dev)| dev == d)),
        None => {
            u.kind == r.kind
                && (Some(u.index) == r.pod_index
                    || (r.pod_index.is_none() && tagged_by(u, Some(owner))))
        }
    }
}

/// Is `l`, in some namespace reached through a process, the NIC of `r`? A hardware NIC is its
/// device; a virtual one must also be at the recorded pod index and bear our tag or the
/// recorded MAC (any namespace may have a veth at that index). Either way, not one bearing
/// another attachment's tag: the NIC may have come home and gone to another pod since.
pub(in crate::flows) fn is_orphaned_nic(l: &LinkInfo, r: &Record, owner: &str) -> bool {
    let tag = l.alias.as_deref().and_then(Tag::decode);
    let tagged = tag.as_ref().is_some_and(|t| t.owner == owner);
    if tag.is_some() && !tagged {
        return false;
    }
    if legacy(r) {
        return tagged;
    }
    is_the_nic(l, r)
        && (r.parent.is_some() || (Some(l.index) == r.pod_index && (tagged || l.mac == r.mac)))
}

/// How the NIC of `r` looks once given back: its original name, MTU, admin state, alias and MAC.
pub(in crate::flows) fn given_back<'a>(
    r: &'a Record,
    original_alias: Option<&'a str>,
    now: &LinkInfo,
) -> Arrival<'a> {
    Arrival {
        name: &r.host_name,
        mtu: Some(r.host_mtu),
        alias: Some(original_alias.unwrap_or("")),
        up: r.host_up,
        mac: (now.mac != r.mac && !r.mac.is_empty()).then_some(r.mac.as_str()),
    }
}

/// How a lost NIC (back on the host from a pod's dead netns, still tagged) is to be given back:
/// from its attachment's record when there is one. Without a record (a DEL ran while the NIC
/// was still on its way home) only the tag is left, and the pod could have written it: it may
/// then only rename this NIC, never to a name another attachment's NIC had. `None`: leave the
/// link as it is. `who` names the caller in the log.
pub(in crate::flows) fn record_for_lost(
    l: &LinkInfo,
    tag: &Tag,
    records: &[Record],
    who: &str,
) -> Option<Record> {
    if let Some(r) = record_of_lost(l, tag, records) {
        if r.owner() != tag.owner {
            log::warn!(
                "{who}: {} bears a tag naming {} ({}), but it is the NIC of attachment {}/{} ({}): giving it back from that record",
                l.name,
                tag.host_name,
                tag.owner,
                r.container_id,
                r.ifname,
                r.host_name
            );
        }
        return Some(r.clone());
    }
    if let Some(other) = records.iter().find(|r| r.host_name == tag.host_name) {
        log::warn!(
            "{who}: {} bears a tag naming {}, the NIC of attachment {}/{}; not renaming it",
            l.name,
            tag.host_name,
            other.container_id,
            other.ifname
        );
        return None;
    }
    // The link's own identity; the name, MTU and state its tag says; nothing the pod could
    // have set (flags, group, queue length) is restored without a record.
    Some(Record {
        host_name: tag.host_name.clone(),
        host_mtu: tag.host_mtu,
        host_up: tag.host_up,
        host_alias: None,
        host_flags: None,
        host_group: None,
        host_txqlen: None,
        ..Record::of_home(l)
    })
}

/// The tag of host link `l` if GC is to give it back as a lost NIC: it bears an attachment's tag
/// (an operator's alias does not decode as one), that attachment is not in `valid` (its DEL
/// will come), and this GC has not just released it (`tried`: its NIC was looked for then).
pub(in crate::flows) fn lost_to_give_back(
    l: &LinkInfo,
    valid: &HashSet<String>,
    tried: &HashSet<String>,
) -> Option<Tag> {
    let tag = l.alias.as_deref().and_then(Tag::decode)?;
    (!valid.contains(&tag.owner) && !tried.contains(&tag.owner)).then_some(tag)
}

#[cfg(test)]
mod tests;
