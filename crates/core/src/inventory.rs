//! The node's NICs: which NICs this node offers and who each one is. One rule names a NIC for
//! everyone who hands it out or takes it: the device plugin's pools (`device_plugin::pool`),
//! the DRA driver's slices and prepare (`dra::slices`, `dra::nics`) and ADD (`select`,
//! `flows::plan`).
//!
//! - [`device_id`]: the ID a device plugin hands out and Multus passes to ADD as `deviceID`
//!   (its PCI function, else its auxiliary-bus device, else a virtual link's interface name);
//! - [`Identity`]: a NIC's device ID, host name, PCI address and auxiliary-bus device, read
//!   from a host link ([`Identity::of_link`]: a couple of sysfs reads, what ADD pays) or from
//!   an attachment's record ([`Identity::of_record`]: nothing read);
//! - [`Nic`] and [`gather`]: every NIC of the node with the facts the node policy looks at
//!   (driver, RDMA device by ADD's own pairing, uplink reasons, NUMA node, PCI root), for the
//!   agent, which reads them all; ADD never does (its cost stays flat in the node's NICs).

use crate::error::Result;
use crate::link::{LinkInfo, Links};
use crate::node::NicFacts;
use crate::rdma::identity::{RdmaId, Snapshot};
use crate::rdma::pair;
use crate::state::{Record, Store, Tag};
use crate::sysfs;
use std::collections::HashMap;
use std::path::Path;

/// The ID a device plugin hands out for a NIC, which Multus passes to ADD as `deviceID`: its
/// PCI function, else its auxiliary-bus device (a sub-function), else (a virtual link, which
/// has no bus device) its interface name.
pub fn device_id(pci: Option<&str>, aux: Option<&str>, name: &str) -> String {
    pci.or(aux).unwrap_or(name).to_owned()
}

/// Who a NIC is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// [`device_id`]: what the device plugin and the DRA driver hand out and ADD resolves.
    pub device_id: String,
    /// Its name on the host: a NIC back from a dead pod may bear its pod-side name, and is
    /// named by the name its tag keeps; a NIC in a pod by the name its record keeps.
    pub name: String,
    pub pci: Option<String>,
    /// Its auxiliary-bus device (`mlx5_core.sf.2`, a sub-function).
    pub aux: Option<String>,
}

impl Identity {
    /// Host link `l`: its PCI address from sysfs, its auxiliary-bus device from the link's
    /// parent device. A virtual link's device ID is the name it has now, which is the name
    /// ADD finds it by (`select::resolve`).
    pub fn of_link(l: &LinkInfo) -> Identity {
        let pci = sysfs::pci_of(&l.name);
        let aux = l
            .parent
            .as_ref()
            .filter(|(_, bus)| bus == "auxiliary")
            .map(|(dev, _)| dev.clone());
        Identity {
            device_id: device_id(pci.as_deref(), aux.as_deref(), &l.name),
            name: l
                .alias
                .as_deref()
                .and_then(Tag::decode)
                .map_or_else(|| l.name.clone(), |t| t.host_name),
            pci,
            aux,
        }
    }

    /// The NIC attachment `r` holds (in a pod now), as ADD recorded it.
    pub fn of_record(r: &Record) -> Identity {
        let aux = r
            .parent
            .as_deref()
            .and_then(|p| p.strip_prefix("auxiliary/"))
            .map(str::to_owned);
        Identity {
            device_id: device_id(r.pci.as_deref(), aux.as_deref(), &r.host_name),
            name: r.host_name.clone(),
            pci: r.pci.clone(),
            aux,
        }
    }

    /// Backed by a device (a PCI function or an auxiliary-bus device), not a virtual link.
    pub fn backed(&self) -> bool {
        self.pci.is_some() || self.aux.is_some()
    }
}

/// One NIC of the node, with what the node policy's selectors look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    /// The device ID: `deviceID` for the CNI.
    pub id: String,
    /// Its name on the host (the name its record keeps while it is in a pod).
    pub name: String,
    pub pci: Option<String>,
    pub driver: Option<String>,
    pub rdma_device: Option<String>,
    /// Its RDMA device's node GUID, and whether `rdma_device` is the node's name for it (no
    /// pod can rename devices, or its record says so) or may be a pod's (`rdma::identity`).
    pub rdma_guid: Option<u64>,
    pub rdma_name_is_the_nodes: bool,
    /// Its RDMA device's uverbs char device (`uverbs0`), read with the pairing (device index ->
    /// char device, RDMA netlink): what `Allocate` hands out and names in CDI. `None` for a NIC
    /// in a pod or read without RDMA netlink: then the char device is looked up by the name.
    pub uverbs: Option<String>,
    pub numa: Option<i64>,
    /// The PCI root complex it hangs off (`pci0000:3a`), for keeping a request under one.
    pub pci_root: Option<String>,
    /// In a pod: its attachment record is in the state directory.
    pub attached: bool,
    /// Where in its pod, as the attachment record says (the health judge looks there).
    pub pod: Option<InPod>,
    /// Why the node itself uses it (default route, global address, ...), if it does.
    pub uplink: Vec<String>,
}

/// Where an attached NIC is, from its attachment record: all the health judge needs to look at
/// it in its pod (one namespace, one ifindex; nothing about other pods).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InPod {
    /// The pod's netns path as ADD got it (CNI_NETNS).
    pub netns: String,
    /// The namespace ADD found there (nsfs device, inode): a path retargeted since names
    /// another pod's namespace, which is not looked into.
    pub netns_id: Option<(u64, u64)>,
    /// Its interface name in the pod (CNI_IFNAME) and its ifindex there, which a pod cannot
    /// change (the name only for records older than the index).
    pub ifname: String,
    pub index: Option<u32>,
}

impl InPod {
    pub(crate) fn of(r: &Record) -> InPod {
        InPod {
            netns: r.netns.clone(),
            netns_id: r.netns_id,
            ifname: r.ifname.clone(),
            index: r.pod_index,
        }
    }
}

impl Nic {
    /// A NIC on the host at PCI address `id`, named `name`, with RDMA device `rdma` (named as
    /// the node names it): the unit tests' start, which each test varies.
    #[doc(hidden)]
    pub fn for_test(id: &str, name: &str, rdma: Option<&str>) -> Nic {
        Nic {
            id: id.into(),
            name: name.into(),
            pci: Some(id.into()),
            driver: None,
            rdma_device: rdma.map(Into::into),
            rdma_guid: None,
            rdma_name_is_the_nodes: true,
            uverbs: None,
            numa: None,
            pci_root: None,
            attached: false,
            pod: None,
            uplink: Vec::new(),
        }
    }

    /// Host link `l` as a NIC, its RDMA device paired in `rdma` (ADD's pairing rules); its
    /// uplink reasons, NUMA node and PCI root are not read here (see [`gather`]).
    pub fn on_host(l: &LinkInfo, rdma: Option<&Snapshot>) -> Nic {
        let who = Identity::of_link(l);
        let id = rdma.and_then(|snap| paired(snap, l));
        Nic {
            id: who.device_id,
            name: who.name,
            driver: sysfs::nic_driver(&l.name),
            rdma_device: id.as_ref().map(|d| d.name.clone()),
            rdma_guid: id.as_ref().and_then(|d| d.guid),
            rdma_name_is_the_nodes: id.as_ref().is_none_or(|d| d.name_is_the_nodes),
            uverbs: id.as_ref().and_then(|d| d.uverbs.clone()),
            pci: who.pci,
            numa: None,
            pci_root: None,
            attached: false,
            pod: None,
            uplink: Vec::new(),
        }
    }

    /// What the node policy's selectors look at.
    pub fn facts(&self) -> NicFacts<'_> {
        NicFacts {
            name: &self.name,
            pci: self.pci.as_deref(),
            driver: self.driver.as_deref(),
            rdma_device: self.rdma_device.as_deref(),
            rdma_guid: self.rdma_guid,
            rdma_name_is_the_nodes: self.rdma_name_is_the_nodes,
            uplink: self.uplink.clone(),
            // Pools are judged by these facts; ADD judges the link it resolves, where a link
            // made from another namespace is refused (`select::made_elsewhere`).
            made_elsewhere: None,
        }
    }
}

/// Every NIC `wanted` keeps: those in the host's namespace (`host`; their uplink reasons read
/// only for those kept), then those attached to pods (the records in `store`) that are not
/// back on the host. `sys` is `/sys`; `uppers_socket` the uppers watcher's.
pub async fn gather(
    host: &Links,
    store: &Store,
    wanted: &dyn Fn(&Nic) -> bool,
    sys: &Path,
    uppers_socket: &Path,
) -> Result<Vec<Nic>> {
    let mut out: Vec<Nic> = Vec::new();
    let rdma = rdma_view();
    for l in host.all().await? {
        if l.name == "lo" {
            continue;
        }
        let mut nic = Nic::on_host(&l, rdma.as_ref());
        if !wanted(&nic) {
            continue;
        }
        nic.uplink = crate::uppers::uses(host, uppers_socket, &l).await?;
        if nic.id != l.name {
            nic.numa = sysfs::numa_node(sys, &nic.id);
            nic.pci_root = sysfs::pci_root(sys, &nic.id);
        }
        out.push(nic);
    }
    for r in store.all()? {
        let who = Identity::of_record(&r);
        if out.iter().any(|n| n.id == who.device_id) {
            continue; // back on the host: its pod is gone
        }
        let id = who.device_id;
        let nic = Nic {
            numa: (id != r.host_name)
                .then(|| sysfs::numa_node(sys, &id))
                .flatten(),
            pci_root: (id != r.host_name)
                .then(|| sysfs::pci_root(sys, &id))
                .flatten(),
            driver: r.pci.as_deref().and_then(sysfs::pci_driver),
            id,
            name: who.name,
            pci: who.pci,
            rdma_device: r.rdma_device.clone(),
            // The name ADD recorded, read from the node when it attached the NIC.
            rdma_guid: None,
            rdma_name_is_the_nodes: true,
            uverbs: None,
            attached: true,
            pod: Some(InPod::of(&r)),
            uplink: Vec::new(),
        };
        if wanted(&nic) {
            out.push(nic);
        }
    }
    Ok(out)
}

/// The NICs now in pods, by device ID, and where (read every health tick: ADD saves its record
/// before the NIC leaves the host, so a NIC on its way into a pod never looks gone).
pub fn attached(store: &Store) -> HashMap<String, InPod> {
    store
        .all()
        .unwrap_or_default()
        .iter()
        .map(|r| (Identity::of_record(r).device_id, InPod::of(r)))
        .collect()
}

/// Every RDMA device and port the host sees, and the netns mode, in one read; none on a node
/// without RDMA netlink, or when the read fails (logged: no NIC then matches a pool by its
/// RDMA device).
fn rdma_view() -> Option<Snapshot> {
    match Snapshot::read() {
        Ok(s) => s,
        Err(e) => {
            log::warn!(
                "listing RDMA devices and ports: {}; no NIC has an RDMA device this round",
                e.msg
            );
            None
        }
    }
}

/// The RDMA device ADD would pair with host link `l` (its name, node GUID and whether the name
/// is the node's); none when it pairs ambiguously (ADD would refuse it, naming the devices;
/// logged).
pub(crate) fn paired(snap: &Snapshot, l: &LinkInfo) -> Option<RdmaId> {
    let nic = pair::Nic {
        index: l.index,
        name: &l.name,
        mac: &l.mac,
    };
    match snap.of(&nic) {
        Ok(id) => id,
        Err(e) => {
            log::warn!("{}", e.msg);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_are_what_multus_hands_the_cni() {
        assert_eq!(
            device_id(Some("0000:3b:00.1"), None, "ens1"),
            "0000:3b:00.1"
        );
        assert_eq!(
            device_id(None, Some("mlx5_core.sf.2"), "enp3s0f0s2"),
            "mlx5_core.sf.2"
        );
        assert_eq!(device_id(None, None, "veth0"), "veth0");
    }

    #[test]
    fn a_record_names_its_nic_as_the_host_did() {
        let sf = Record {
            host_name: "enp3s0f0s2".into(),
            parent: Some("auxiliary/mlx5_core.sf.2".into()),
            ..Record::default()
        };
        let who = Identity::of_record(&sf);
        assert_eq!(who.device_id, "mlx5_core.sf.2");
        assert_eq!(who.aux.as_deref(), Some("mlx5_core.sf.2"));
        assert!(who.backed());
        let vf = Record {
            host_name: "ens1f1v0".into(),
            pci: Some("0000:3b:00.2".into()),
            parent: Some("pci/0000:3b:00.2".into()),
            ..Record::default()
        };
        assert_eq!(Identity::of_record(&vf).device_id, "0000:3b:00.2");
        assert_eq!(Identity::of_record(&vf).aux, None);
        let veth = Record {
            host_name: "veth7".into(),
            ..Record::default()
        };
        let who = Identity::of_record(&veth);
        assert_eq!((who.device_id.as_str(), who.backed()), ("veth7", false));
    }
}
