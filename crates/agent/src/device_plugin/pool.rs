//! Which NICs each pool offers: the node's NICs as its inventory finds them
//! (`rdma_host_device_core::inventory`: the host's NICs and those attached to pods), matched
//! against the pools' selectors, minus what the node policy refuses (`allowedNics`, the
//! node's own uplinks). Each NIC is one device whose ID is what Multus hands the CNI as
//! `deviceID` (`inventory::device_id`). The inventory pairs a NIC's RDMA device by ADD's own
//! rules, so `Allocate` hands out the char devices ADD will find.

use crate::error::Result;
use rdma_host_device_core::inventory::{self, Nic};
use rdma_host_device_core::link::Links;
use rdma_host_device_core::node::{DevicePluginConfig, Node};
use rdma_host_device_core::state::Store;
use std::path::Path;

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

/// Every NIC some pool's selectors match, as the node's inventory finds them
/// (`inventory::gather`: host NICs, then those attached to pods). `sys` is `/sys`.
pub async fn gather(
    host: &Links,
    store: &Store,
    dp: &DevicePluginConfig,
    sys: &Path,
    uppers_socket: &Path,
) -> Result<Vec<Nic>> {
    let wanted = |n: &Nic| dp.pools.iter().any(|p| p.selectors.matches(&n.facts()));
    Ok(inventory::gather(host, store, &wanted, sys, uppers_socket).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_host_device_core::inventory::device_id;
    use rdma_host_device_core::node::{NicSelectors, Pool};

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

    fn pool(name: &str, sel: NicSelectors) -> Pool {
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
                    NicSelectors {
                        drivers: vec!["mlx5_core".into()],
                        ..Default::default()
                    },
                ),
                pool(
                    "x.io/other",
                    NicSelectors {
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
            allowed_nics: Some(NicSelectors {
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
}
