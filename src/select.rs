//! Device selection: turn the config's one selector into one link in the host's namespace.
//! Direct lookups (by name, by sysfs path) wherever the kernel offers them; a full link dump
//! only for MACs and for recognising a NIC that came back from a dead pod under another name.

use crate::cni::netconf::NicRequest;
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::inventory::{self, Identity};
use rdma_host_device_core::link::{LinkInfo, Links};
use rdma_host_device_core::node::{NicFacts, Node};
use rdma_host_device_core::rdma::identity;
use rdma_host_device_core::rdma::pair::Nic;
use rdma_host_device_core::state::{Record, Store, Tag};
use rdma_host_device_core::sysfs;
use std::path::Path;

/// The host link a selector resolved to.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub link: LinkInfo,
    /// The NIC's PCI address, when it has one.
    pub pci: Option<String>,
    /// Set when the NIC came back from a dead pod without a DEL: it carries our tag and may
    /// bear the pod-side name. The caller gives it back before use.
    pub lost: Option<Tag>,
    /// The attachments' records as `resolve` read them, right after the host lookup: one
    /// snapshot for the caller's policy check and a lost NIC's record_for_lost.
    pub records: Vec<Record>,
}

fn not_found(sel: &NicRequest, why: &str) -> Error {
    Error::new(
        Code::DeviceNotFound,
        format!("no host network interface matches {sel}: {why}"),
    )
}

/// Resolve `sel` against the host's links. `store` holds our attachments, to tell "not there"
/// from "in use by a pod". It is read after the host lookups: ADD saves its record before it
/// moves a NIC and DEL forgets it after the NIC is back, so a NIC missing from the host is
/// always explained by a record read afterwards, even while other calls run.
pub async fn resolve(sel: &NicRequest, host: &Links, store: &Store) -> Result<Resolved> {
    // The host lookup first: the link the selector names, and the name it was found by.
    let (candidate, by_name): (Option<LinkInfo>, Option<String>) = match sel {
        NicRequest::Mac(mac) => {
            let all = host.all().await?;
            let hits: Vec<&LinkInfo> = all.iter().filter(|l| l.mac == *mac).collect();
            match hits.as_slice() {
                [one] => (Some((*one).clone()), None),
                [] => (None, None),
                many => {
                    return Err(Error::new(
                        Code::DeviceAmbiguous,
                        format!(
                            "{sel} matches several host interfaces ({}); select by name or PCI address",
                            many.iter()
                                .map(|l| l.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
        _ => {
            let names = match sel {
                NicRequest::Name(n) => vec![n.clone()],
                NicRequest::KernelPath(p) => sysfs::netdevs_under(Path::new(p)),
                NicRequest::Pci(id) => sysfs::netdevs_of_bus_device(id),
                NicRequest::DeviceId(id) => netdevs_of_device_id(id)?,
                NicRequest::RdmaDevice(dev) => {
                    rdma_host_device_core::rdma::identity::netdevs_of_rdma_device(dev)?
                }
                NicRequest::Mac(_) => Vec::new(),
            };
            match names.as_slice() {
                [] => (None, None),
                // The kernel finds a link by any of its names, altnames included.
                [name] => (host.by_name(name).await?, Some(name.clone())),
                many => {
                    return Err(Error::new(
                        Code::DeviceAmbiguous,
                        format!(
                            "{sel} has several network interfaces ({}); select one by name",
                            many.join(", ")
                        ),
                    ));
                }
            }
        }
    };
    // Then the records, once (see above for why after).
    let records = store.all()?;
    if let Some(link) = candidate
        && by_name
            .as_deref()
            .is_none_or(|name| link.name == name || altname_is_the_nodes(&link, name, &records))
    {
        if let NicRequest::Name(_) = sel {
            refuse_a_link_born_while_the_nic_was_away(&link, &records, sel)?;
        }
        return found_on_host(link, &records, sel);
    }
    // A NIC on the host with our tag is free whatever the records say: its pod is gone.
    if let Some(lost) = find_lost(sel, host, &records).await? {
        return Ok(lost);
    }
    if let Some(r) = records.iter().find(|r| attachment_holds(r, sel)) {
        return Err(Error::new(
            Code::DeviceBusy,
            format!(
                "{sel} is attached to container {} as {} in {}; DEL that attachment first",
                r.container_id, r.ifname, r.netns
            ),
        ));
    }
    if let NicRequest::RdmaDevice(dev) = sel {
        // The network asked for RDMA by name: say that RDMA is what is missing.
        let why = if sysfs::has_rdma() {
            "no RDMA device of that name has a network interface in the host network namespace (see `rdma link show`)"
        } else {
            "this node has no RDMA devices at all (no /sys/class/infiniband: load the NIC's RDMA driver)"
        };
        return Err(Error::new(
            Code::RdmaNotFound,
            format!("rdmaDevice {dev:?}: {why}"),
        ));
    }
    Err(not_found(
        sel,
        "it is not in the host network namespace (check the name with `ip link`, or whether another pod holds it)",
    ))
}

/// A name's NIC is the one the node means by it: while an attachment holds a NIC of that name
/// (in its pod, its name free on the host), an untagged host link bearing the name is not that
/// NIC unless it has that NIC's identity, which a pod cannot make: its parent device (PCI,
/// auxiliary), its permanent MAC, or, for a virtual NIC, its kind and host ifindex. Any other
/// link was born on the host while the NIC was away (a neighbour with the node's NET_ADMIN can
/// make one of any kind, an `ifb` with no peer or lower among them): 102, naming the attachment.
/// The records are the ones `resolve` already read: no lookup more per ADD.
fn refuse_a_link_born_while_the_nic_was_away(
    link: &LinkInfo,
    records: &[Record],
    sel: &NicRequest,
) -> Result<()> {
    if link.alias.as_deref().and_then(Tag::decode).is_some() {
        // Back from a dead pod: `found_on_host` and `admit` judge it by its tag and record.
        return Ok(());
    }
    let Some(r) = records.iter().find(|r| attachment_holds(r, sel)) else {
        return Ok(());
    };
    if is_records_nic(link, r) {
        return Ok(());
    }
    Err(Error::new(
        Code::DeviceBusy,
        format!(
            "{sel} is attached to container {} as {} in {}; the host link now named {} ({}, index {}) is not that NIC: it appeared on the host while the NIC was away (made by something with NET_ADMIN on this node), so it is never handed out by that name. DEL that attachment first; select NICs by PCI address where pods hold the node's NET_ADMIN",
            r.container_id,
            r.ifname,
            r.netns,
            link.name,
            link.kind.as_deref().unwrap_or("no kind"),
            link.index
        ),
    ))
}

/// Is host link `l` the NIC of record `r`, by what no pod can give another link?
fn is_records_nic(l: &LinkInfo, r: &Record) -> bool {
    if let Some(p) = &r.parent {
        return l
            .parent
            .as_ref()
            .map(rdma_host_device_core::state::parent_key)
            .as_deref()
            == Some(p.as_str());
    }
    if !r.perm_mac.is_empty() {
        return l.perm_mac.eq_ignore_ascii_case(&r.perm_mac);
    }
    r.kind.is_some() && l.kind == r.kind && r.host_index != 0 && l.index == r.host_index
}

/// `deviceID`: what a device plugin hands out (`inventory::device_id`), a PCI function or
/// auxiliary-bus device, or the interface name of a virtual link (ours gives a veth its name).
/// A name counts only where it is that link's device ID: a NIC with a bus device is known by
/// it, so `deviceID` never reaches a hardware NIC by a name (that is `device`'s job). Either
/// way the node policy (`admit`) judges the NIC found, as for every selector.
fn netdevs_of_device_id(id: &str) -> Result<Vec<String>> {
    let by_bus = sysfs::netdevs_of_bus_device(id);
    if !by_bus.is_empty() || sysfs::is_pci_address(id) {
        return Ok(by_bus);
    }
    if !sysfs::netdev_exists(id) {
        return Ok(Vec::new());
    }
    let own = inventory::device_id(
        sysfs::pci_of(id).as_deref(),
        sysfs::aux_of(id).as_deref(),
        id,
    );
    if own == id {
        return Ok(vec![id.to_owned()]);
    }
    Err(Error::new(
        Code::DeviceNotFound,
        format!(
            "deviceID {id:?} is the name of an interface whose device ID is {own:?}: a device plugin hands out {own:?}, and a NIC with a bus device is never selected by name through deviceID (use \"device\" for a name)"
        ),
    ))
}

/// The node policy's say on the NIC `r`, before anything changes: it must be allowed by the
/// node configuration, and, unless listed in its `allowedUplinks`, not be one the node itself
/// uses (default route, global address, bond or bridge port).
pub async fn admit(node: &Node, host: &Links, r: &Resolved, records: &[Record]) -> Result<()> {
    // A lost NIC's tag was writable by its pod: its original name counts only when its
    // attachment's record says the same; otherwise the policy sees the name it has now.
    let name = match &r.lost {
        Some(tag)
            if records
                .iter()
                .any(|rec| rec.owner() == tag.owner && rec.host_name == tag.host_name) =>
        {
            &tag.host_name
        }
        _ => &r.link.name,
    };
    let driver = sysfs::nic_driver(&r.link.name);
    // The NIC's RDMA device as its pairing finds it (never the selector's string): its node
    // GUID, and its name only where no pod can have renamed it.
    let rdma = identity::of_nic(&Nic {
        index: r.link.index,
        name: &r.link.name,
        mac: &r.link.mac,
    })?;
    let uplink = rdma_host_device_core::uppers::uses(host, &node.uppers_socket, &r.link).await?;
    node.admit(&NicFacts {
        name,
        pci: r.pci.as_deref(),
        driver: driver.as_deref(),
        rdma_device: rdma.as_ref().map(|d| d.name.as_str()),
        rdma_guid: rdma.as_ref().and_then(|d| d.guid),
        rdma_name_is_the_nodes: rdma.as_ref().is_some_and(|d| d.name_is_the_nodes),
        uplink,
        made_elsewhere: made_elsewhere(&r.link),
    })
}

/// Why host link `l` may have been made from another network namespace, if it may: it names
/// a link of another namespace as its peer or lower (IFLA_LINK_NETNSID), which is what a link
/// made on the host from a pod (`ip link add ... netns <host's id>`, or with
/// IFLA_TARGET_NETNSID) has when it is a veth or rides a link of the pod's. A link with
/// neither (a dummy, a bridge) tells nothing of where it was made: see docs/trust.md.
pub fn made_elsewhere(l: &LinkInfo) -> Option<String> {
    let id = l.lower_netnsid?;
    Some(match l.kind.as_deref() {
        Some("veth") => {
            format!("it is a veth whose peer is in another network namespace (netnsid {id} here)")
        }
        kind => format!(
            "it is a {} whose lower device is in another network namespace (netnsid {id} here)",
            kind.unwrap_or("link")
        ),
    })
}

/// A link found on the host. One that carries our tag is lost (our tag only leaves the pod
/// with a dead netns: every move sets or clears it in the same request), so it is free even
/// when its old attachment's record is still there; the caller gives it back.
fn found_on_host(link: LinkInfo, records: &[Record], sel: &NicRequest) -> Result<Resolved> {
    // The loopback device (which `"hwaddr": "00:00:00:00:00:00"` also selects) is no NIC: the
    // kernel refuses to move it, and a record naming index 1 could never be undone.
    if link.flags & libc::IFF_LOOPBACK as u32 != 0 {
        return Err(Error::new(
            Code::NotAllowed,
            format!(
                "{sel} selects {}, the loopback interface: it is never handed to a pod",
                link.name
            ),
        ));
    }
    // A tagged NIC on the host is one the kernel gave back when its pod's netns died: the
    // attachment that tagged it is stale (its DEL will still release its IP), the NIC is free.
    let lost = link.alias.as_deref().and_then(Tag::decode);
    if let Some(tag) = &lost
        && let Some(r) = records.iter().find(|r| r.owner() == tag.owner)
    {
        log::info!(
            "{sel} ({}) came back from container {}'s dead netns {}; taking it over",
            link.name,
            r.container_id,
            r.netns
        );
    }
    Ok(Resolved {
        pci: sysfs::pci_of(&link.name),
        link,
        lost,
        records: records.to_vec(),
    })
}

/// Does attachment `r` hold the NIC that `sel` names?
fn attachment_holds(r: &Record, sel: &NicRequest) -> bool {
    match sel {
        NicRequest::Name(n) => r.host_name == *n || r.altnames.contains(n),
        NicRequest::Mac(m) => r.mac == *m,
        NicRequest::Pci(id) => r.pci.as_deref() == Some(id.as_str()),
        NicRequest::DeviceId(id) => {
            r.pci.as_deref() == Some(id.as_str()) || Identity::of_record(r).device_id == *id
        }
        NicRequest::RdmaDevice(d) => r.rdma_device.as_deref() == Some(d.as_str()),
        NicRequest::KernelPath(p) => Path::new(p).file_name().is_some_and(|f| {
            r.host_name == f.to_string_lossy() || r.pci.as_deref() == Some(&*f.to_string_lossy())
        }),
    }
}

/// Is `alt`, an altname of `link`, one the node gave it? A lost NIC (back on the host from a
/// dead pod, still tagged) also carries the altnames its pod added, which may be any name,
/// another NIC's included: only those its attachment's record lists count. An untagged link's
/// altnames are the node's.
fn altname_is_the_nodes(link: &LinkInfo, alt: &str, records: &[Record]) -> bool {
    let Some(tag) = link.alias.as_deref().and_then(Tag::decode) else {
        return true;
    };
    let ok = records
        .iter()
        .find(|r| r.owner() == tag.owner)
        .is_some_and(|r| r.altnames.iter().any(|a| a == alt));
    if !ok {
        log::info!(
            "{alt:?} is an altname of {}, a NIC back from a dead pod, but not one the node gave it: it does not select {}",
            link.name,
            link.name
        );
    }
    ok
}

/// A NIC that came back from a dead pod keeps the pod-side name but carries our tag with its
/// original name: find it by that identity (an altname only if the node gave it).
async fn find_lost(sel: &NicRequest, host: &Links, records: &[Record]) -> Result<Option<Resolved>> {
    // The name a lost NIC comes home under: its record's (found by its device when the pod
    // rewrote the tag), else the tag's.
    let home_name = |l: &LinkInfo, tag: &Tag| {
        rdma_host_device_core::state::record_of_lost(l, tag, records)
            .map_or(tag.host_name.clone(), |r| r.host_name.clone())
    };
    let wanted = |l: &LinkInfo, tag: &Tag| match sel {
        NicRequest::Name(n) => {
            home_name(l, tag) == *n
                || (l.altnames.contains(n)
                    && records
                        .iter()
                        .any(|r| r.owner() == tag.owner && r.altnames.contains(n)))
        }
        NicRequest::Mac(m) => l.mac == *m,
        NicRequest::Pci(id) | NicRequest::DeviceId(id) => {
            sysfs::pci_of(&l.name).as_deref() == Some(id)
        }
        NicRequest::KernelPath(p) => {
            sysfs::netdevs_under(Path::new(p)).contains(&l.name)
                || home_name(l, tag) == file_name(p)
        }
        NicRequest::RdmaDevice(_) => false,
    };
    for l in host.all().await? {
        if let Some(tag) = l.alias.as_deref().and_then(Tag::decode)
            && wanted(&l, &tag)
        {
            log::info!(
                "{} is {sel}, back from a pod that was deleted without DEL (was {}); giving it back",
                l.name,
                tag.host_name
            );
            return Ok(Some(Resolved {
                pci: sysfs::pci_of(&l.name),
                link: l,
                lost: Some(tag),
                records: records.to_vec(),
            }));
        }
    }
    Ok(None)
}

fn file_name(p: &str) -> String {
    Path::new(p)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}
