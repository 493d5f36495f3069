//! Which NICs each pool offers: the host's NICs and those attached to pods (their records in
//! the state directory), matched against the pools' selectors, minus what the node policy
//! refuses (`allowedNics`, the node's own uplinks). Each NIC is one device whose ID is what
//! Multus hands the CNI as `deviceID`: its PCI function, else its auxiliary-bus device (a
//! sub-function), else (a virtual link, as in the tests) its interface name.
//!
//! A NIC's RDMA device is found by ADD's own pairing rules (`rdma::pair::pair_from`: the RDMA
//! port whose netdev is the NIC, else sysfs, else the node GUID), so a software RDMA device
//! (rxe, siw: no PCI parent) and an eRDMA device are found as ADD will find them, and
//! `Allocate` hands out their char devices.

use rdma_host_device_core::error::Result;
use rdma_host_device_core::link::Links;
use rdma_host_device_core::node::{DevicePluginConfig, NicFacts, Node};
use rdma_host_device_core::rdma::identity::{RdmaId, Snapshot};
use rdma_host_device_core::rdma::pair;
use rdma_host_device_core::state::{Store, Tag};
use rdma_host_device_core::sysfs;
use std::path::Path;

/// One NIC as the device plugin sees it.
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
    pub fn of(r: &rdma_host_device_core::state::Record) -> InPod {
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
    #[cfg(test)]
    pub(crate) fn for_test(id: &str, name: &str, rdma: Option<&str>) -> Nic {
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

/// The ID Multus will pass as `deviceID`, which ADD resolves (`select::resolve`): one rule for
/// both sides, in `sysfs`.
pub use rdma_host_device_core::sysfs::device_id;

/// Sort NICs into pools (in `dp.pools` order): a NIC goes to the first pool whose selectors
/// match it, never to two. Returns the pools' NICs (sorted by ID) and a line per NIC left out
/// or matched twice, for the log.
pub fn assign(
    dp: &DevicePluginConfig,
    node: &Node,
    nics: Vec<Nic>,
) -> (Vec<Vec<Nic>>, Vec<String>) {
    let mut pools: Vec<Vec<Nic>> = vec![Vec::new(); dp.pools.len()];
    let mut notes = Vec::new();
    for nic in nics {
        let facts = nic.facts();
        let hits: Vec<usize> = (0..dp.pools.len())
            .filter(|&i| dp.pools[i].selectors.matches(&facts))
            .collect();
        let Some(&first) = hits.first() else { continue };
        let pool = &dp.pools[first].resource_name;
        if let Some(p) = &node.allowed_nics
            && !p.matches(&facts)
        {
            notes.push(format!(
                "{} ({}) matches {pool} but not the node's allowedNics: not offered",
                nic.name, nic.id
            ));
            continue;
        }
        if !nic.uplink.is_empty()
            && !node
                .allowed_uplinks
                .iter()
                .any(|u| *u == nic.name || Some(u.as_str()) == nic.pci.as_deref())
        {
            notes.push(format!(
                "{} ({}) matches {pool} but the node itself uses it ({}): not offered (allowedUplinks lifts this)",
                nic.name,
                nic.id,
                nic.uplink.join("; ")
            ));
            continue;
        }
        if hits.len() > 1 {
            notes.push(format!(
                "{} ({}) matches {} pools; offered in {pool} only",
                nic.name,
                nic.id,
                hits.len()
            ));
        }
        drop(facts);
        pools[first].push(nic);
    }
    for p in &mut pools {
        p.sort_by(|a, b| a.id.cmp(&b.id));
        p.dedup_by(|a, b| a.id == b.id);
    }
    (pools, notes)
}

/// Every NIC some pool's selectors match: those in the host's namespace (`host`), then those
/// attached to pods (the records in `store`) that are not back on the host. `sys` is `/sys`.
pub async fn gather(
    host: &Links,
    store: &Store,
    dp: &DevicePluginConfig,
    sys: &Path,
    uppers_socket: &Path,
) -> Result<Vec<Nic>> {
    let wanted = |n: &Nic| dp.pools.iter().any(|p| p.selectors.matches(&n.facts()));
    gather_wanted(host, store, &wanted, sys, uppers_socket).await
}

/// Every NIC `wanted` keeps (the DRA driver's selection, `dra::slices`), found as [`gather`]
/// finds them: host NICs (their uplink reasons read only for those kept), then attached ones.
pub async fn gather_wanted(
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
        // A NIC back from a dead pod carries our tag and may bear its pod-side name.
        let name = l
            .alias
            .as_deref()
            .and_then(Tag::decode)
            .map_or_else(|| l.name.clone(), |t| t.host_name);
        let pci = sysfs::pci_of(&l.name);
        let aux = l
            .parent
            .as_ref()
            .filter(|(_, bus)| bus == "auxiliary")
            .map(|(dev, _)| dev.clone());
        let id = rdma.as_ref().and_then(|snap| paired(snap, &l));
        let mut nic = Nic {
            id: device_id(pci.as_deref(), aux.as_deref(), &l.name),
            name,
            driver: sysfs::nic_driver(&l.name),
            rdma_device: id.as_ref().map(|d| d.name.clone()),
            rdma_guid: id.as_ref().and_then(|d| d.guid),
            rdma_name_is_the_nodes: id.as_ref().is_none_or(|d| d.name_is_the_nodes),
            uverbs: id.as_ref().and_then(|d| d.uverbs.clone()),
            pci,
            numa: None,
            pci_root: None,
            attached: false,
            pod: None,
            uplink: Vec::new(),
        };
        if !wanted(&nic) {
            continue;
        }
        nic.uplink = rdma_host_device_core::uppers::uses(host, uppers_socket, &l).await?;
        if nic.id != l.name {
            nic.numa = sysfs::numa_node(sys, &nic.id);
            nic.pci_root = sysfs::pci_root(sys, &nic.id);
        }
        out.push(nic);
    }
    for r in store.all()? {
        let aux = r
            .parent
            .as_deref()
            .and_then(|p| p.strip_prefix("auxiliary/"));
        let id = device_id(r.pci.as_deref(), aux, &r.host_name);
        if out.iter().any(|n| n.id == id) {
            continue; // back on the host: its pod is gone
        }
        let nic = Nic {
            numa: (id != r.host_name)
                .then(|| sysfs::numa_node(sys, &id))
                .flatten(),
            pci_root: (id != r.host_name)
                .then(|| sysfs::pci_root(sys, &id))
                .flatten(),
            driver: r.pci.as_deref().and_then(sysfs::pci_driver),
            id,
            name: r.host_name.clone(),
            pci: r.pci.clone(),
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
fn paired(snap: &Snapshot, l: &rdma_host_device_core::link::LinkInfo) -> Option<RdmaId> {
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

/// The NICs now in pods, by device ID, and where (read every health tick: ADD saves its record
/// before the NIC leaves the host, so a NIC on its way into a pod never looks gone).
pub fn attached(store: &Store) -> std::collections::HashMap<String, InPod> {
    store
        .all()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let aux = r
                .parent
                .as_deref()
                .and_then(|p| p.strip_prefix("auxiliary/"));
            (device_id(r.pci.as_deref(), aux, &r.host_name), InPod::of(r))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_host_device_core::node::{NicPolicy, Pool};

    fn nic(name: &str, pci: Option<&str>, driver: &str) -> Nic {
        Nic {
            id: device_id(pci, None, name),
            name: name.into(),
            pci: pci.map(Into::into),
            driver: Some(driver.into()),
            rdma_device: None,
            rdma_guid: None,
            rdma_name_is_the_nodes: false,
            uverbs: None,
            numa: None,
            pci_root: None,
            attached: false,
            pod: None,
            uplink: Vec::new(),
        }
    }

    fn pool(name: &str, sel: NicPolicy) -> Pool {
        Pool {
            resource_name: name.into(),
            selectors: sel,
        }
    }

    #[test]
    fn a_nic_goes_to_one_pool_and_the_nodes_own_uplink_to_none() {
        let dp = DevicePluginConfig {
            pools: vec![
                pool(
                    "x.io/rail",
                    NicPolicy {
                        drivers: vec!["mlx5_core".into()],
                        ..Default::default()
                    },
                ),
                pool(
                    "x.io/other",
                    NicPolicy {
                        names: vec!["ens2".into(), "ens3".into()],
                        ..Default::default()
                    },
                ),
            ],
            ..Default::default()
        };
        let mut up = nic("ens0", Some("0000:01:00.0"), "mlx5_core");
        up.uplink = vec!["it carries the default route".into()];
        let nics = vec![
            nic("ens2", Some("0000:3b:00.1"), "mlx5_core"),
            nic("ens1", Some("0000:3b:00.0"), "mlx5_core"),
            nic("ens3", None, "veth"),
            nic("eth9", None, "virtio_net"),
            up,
        ];
        let (pools, notes) = assign(&dp, &Node::default(), nics.clone());
        let ids = |p: &[Nic]| p.iter().map(|n| n.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&pools[0]), ["0000:3b:00.0", "0000:3b:00.1"]);
        assert_eq!(
            ids(&pools[1]),
            ["ens3"],
            "ens2 is the rail's: first pool wins"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("ens2") && n.contains("2 pools")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("ens0") && n.contains("default route")),
            "{notes:?}"
        );
        // allowedUplinks lifts the uplink rule, as for ADD; allowedNics narrows.
        let node = Node {
            allowed_uplinks: vec!["ens0".into()],
            allowed_nics: Some(NicPolicy {
                pci_addresses: vec!["0000:01:00.0".into(), "0000:3b:00.0".into()],
                ..Default::default()
            }),
            ..Node::default()
        };
        let (pools, notes) = assign(&dp, &node, nics);
        assert_eq!(ids(&pools[0]), ["0000:01:00.0", "0000:3b:00.0"]);
        assert!(pools[1].is_empty());
        assert!(notes.iter().any(|n| n.contains("allowedNics")), "{notes:?}");
    }

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
}
