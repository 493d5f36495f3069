//! What a pod with NET_ADMIN may change on its NIC beyond name, MTU, MAC and alias (which the
//! move itself restores), and putting it back as the node had it before the NIC leaves the
//! pod: links stacked on the NIC, its interface flags, device group, transmit queue length
//! and altnames. Each is read back: what could not be restored is an error naming it, so DEL
//! fails and keeps the state rather than hand the next tenant a NIC the last one shaped.

use super::{LinkInfo, Links, errno, nl_error};
use crate::error::{Code, Error, Result};
use netlink_packet_route::link::LinkFlags;
use rtnetlink::LinkUnspec;

/// The interface flags a pod can flip (`ip link set DEV promisc|allmulticast|arp|multicast|
/// dynamic|trailers|...`; what the kernel's dev_change_flags lets anyone change, plus the
/// user-requested promiscuous and allmulticast modes). IFF_UP is the record's `host_up`.
pub const POD_FLAGS: u32 = libc::IFF_DEBUG as u32
    | libc::IFF_NOTRAILERS as u32
    | libc::IFF_NOARP as u32
    | libc::IFF_PROMISC as u32
    | libc::IFF_ALLMULTI as u32
    | libc::IFF_MULTICAST as u32
    | libc::IFF_PORTSEL as u32
    | libc::IFF_AUTOMEDIA as u32
    | libc::IFF_DYNAMIC as u32;

/// A NIC's settings as the node had them at ADD. `None`: not recorded (a record written by a
/// version before this rule), left as the pod has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// The [`POD_FLAGS`] bits of `ifi_flags`.
    pub flags: Option<u32>,
    pub group: Option<u32>,
    pub txqlen: Option<u32>,
    /// The altnames, exactly: others are deleted, missing ones added back. `None`: not
    /// recorded.
    pub altnames: Option<Vec<String>>,
}

/// `flags`' [`POD_FLAGS`] bits by name, for messages.
fn flag_names(flags: u32) -> String {
    let names: Vec<String> = LinkFlags::from_bits_retain(flags & POD_FLAGS)
        .iter_names()
        .map(|(n, _)| n.to_uppercase())
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(",")
    }
}

impl Links {
    /// Delete every link in this namespace stacked on link `index` (its IFLA_LINK names it,
    /// directly or through another such link: a macvlan, macvtap, ipvlan, VLAN, a VLAN on a
    /// macvlan), top storey first. A link whose IFLA_LINK is an index in another namespace (a
    /// veth's peer) is not stacked here. Returns the names deleted; an error names the links
    /// still there.
    pub async fn delete_uppers(&self, index: u32) -> Result<Vec<String>> {
        let all = self.all().await?;
        let mut stack: Vec<&LinkInfo> = Vec::new();
        let mut below = vec![index];
        loop {
            let storey: Vec<&LinkInfo> = all
                .iter()
                .filter(|l| {
                    l.index != index
                        && l.lower_netnsid.is_none()
                        && l.lower.is_some_and(|lo| below.contains(&lo))
                        && !stack.iter().any(|s| s.index == l.index)
                })
                .collect();
            if storey.is_empty() {
                break;
            }
            below.extend(storey.iter().map(|l| l.index));
            stack.extend(storey);
        }
        let mut deleted = Vec::new();
        let mut failed = Vec::new();
        for l in stack.iter().rev() {
            log::info!(
                "deleting {} (index {}, {}): the pod stacked it on its NIC",
                l.name,
                l.index,
                l.kind.as_deref().unwrap_or("link")
            );
            match self.handle.link().del(l.index).execute().await {
                Ok(()) => deleted.push(l.name.clone()),
                // Gone with a link below it.
                Err(e) if errno(&e) == Some(libc::ENODEV) => deleted.push(l.name.clone()),
                Err(e) => failed.push(nl_error(format!("deleting {}", l.name), e).msg),
            }
        }
        if !failed.is_empty() {
            return Err(Error::new(
                Code::Netlink,
                format!(
                    "links the pod stacked on its NIC could not be deleted: {}",
                    failed.join("; ")
                ),
            ));
        }
        Ok(deleted)
    }

    /// Put `want` back on link `index`: flags, group and queue length in one RTM_SETLINK,
    /// then the altnames; then read the link back. An error names every setting that is
    /// still not as recorded.
    pub async fn restore_settings(&self, index: u32, want: &Settings) -> Result<()> {
        let Some(now) = self.by_index(index).await? else {
            return Err(Error::new(
                Code::Netlink,
                format!("the link with index {index} vanished while its settings were restored"),
            ));
        };
        let mut problems = Vec::new();
        let mut b = LinkUnspec::new_with_index(index);
        let mut set = false;
        if let Some(g) = want.group.filter(|g| *g != now.group) {
            b = b.link_group(g);
            set = true;
        }
        if let Some(q) = want.txqlen.filter(|q| *q != now.txqlen) {
            b = b.txqueuelen(q);
            set = true;
        }
        let mut msg = b.build();
        if let Some(flags) = want.flags
            && (now.flags ^ flags) & POD_FLAGS != 0
        {
            // Only the flags a pod can flip change (ifi_change); IFF_UP is left alone.
            msg.header.flags = LinkFlags::from_bits_retain(flags & POD_FLAGS);
            msg.header.change_mask = LinkFlags::from_bits_retain(POD_FLAGS);
            set = true;
        }
        if set && let Err(e) = self.handle.link().set(msg).execute().await {
            problems.push(nl_error("setting flags, group and txqueuelen", e).msg);
        }
        let no_names = Vec::new();
        let (wanted, names_recorded) = match &want.altnames {
            Some(names) => (names, true),
            None => (&no_names, false),
        };
        let extra: Vec<&str> = now
            .altnames
            .iter()
            .filter(|a| names_recorded && !wanted.contains(a))
            .map(String::as_str)
            .collect();
        if !extra.is_empty() {
            let req = self.handle.link().property_del(index).alt_ifname(&extra);
            if let Err(e) = req.execute().await {
                problems.push(
                    nl_error(
                        format!("deleting altnames the pod added ({})", extra.join(", ")),
                        e,
                    )
                    .msg,
                );
            }
        }
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|a| !now.altnames.contains(a))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            let req = self.handle.link().property_add(index).alt_ifname(&missing);
            if let Err(e) = req.execute().await {
                problems.push(
                    nl_error(format!("adding back altnames ({})", missing.join(", ")), e).msg,
                );
            }
        }
        let Some(after) = self.by_index(index).await? else {
            return Err(Error::new(
                Code::Netlink,
                format!("the link with index {index} vanished while its settings were restored"),
            ));
        };
        problems.extend(differences(&after, want));
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::new(
            Code::Netlink,
            format!(
                "cannot restore what the node had on {} (index {index}): {}",
                after.name,
                problems.join("; ")
            ),
        ))
    }
}

/// What in `l` is not as `want` says, one phrase each.
fn differences(l: &LinkInfo, want: &Settings) -> Vec<String> {
    let mut d = Vec::new();
    if let Some(f) = want.flags
        && (l.flags ^ f) & POD_FLAGS != 0
    {
        d.push(format!(
            "flags are {} instead of {}",
            flag_names(l.flags),
            flag_names(f)
        ));
    }
    if let Some(g) = want.group
        && l.group != g
    {
        d.push(format!("group is {} instead of {g}", l.group));
    }
    if let Some(q) = want.txqlen
        && l.txqlen != q
    {
        d.push(format!("txqueuelen is {} instead of {q}", l.txqlen));
    }
    let Some(mut should) = want.altnames.clone() else {
        return d;
    };
    let mut have = l.altnames.clone();
    have.sort();
    should.sort();
    if have != should {
        d.push(format!(
            "altnames are [{}] instead of [{}]",
            have.join(", "),
            should.join(", ")
        ));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_flags_are_the_changeable_ones() {
        assert_eq!(POD_FLAGS & libc::IFF_UP as u32, 0);
        assert_eq!(POD_FLAGS & libc::IFF_LOWER_UP as u32, 0);
        assert_eq!(
            flag_names(libc::IFF_PROMISC as u32 | libc::IFF_UP as u32),
            "PROMISC"
        );
        assert_eq!(flag_names(0), "none");
    }
}
