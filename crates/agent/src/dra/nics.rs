//! Which NIC of this node a DRA device name is, for prepare: the host's links and the NICs
//! attached to pods (their records in the state directory), each named as the ResourceSlice
//! names it (`slices::name_for` of its device ID: the PCI address, a sub-function's auxiliary
//! device, or a virtual link's interface name), with its RDMA device's uverbs char device read
//! by ADD's own pairing (device index, RDMA netlink), so a pod renaming an RDMA device in
//! shared mode cannot point a claim at another device.
//!
//! The node policy holds here as on ADD: a NIC outside `allowedNics`, or one the node itself
//! uses (an uplink, unless `allowedUplinks` names it), is not one we prepare, whatever a claim
//! says.

use super::slices::name_for;
use futures::future::BoxFuture;
use rdma_host_device_core::inventory::{Identity, Nic};
use rdma_host_device_core::link::{LinkInfo, Links};
use rdma_host_device_core::node::{DraConfig, NicFacts, Node};
use rdma_host_device_core::rdma::identity::Snapshot;
use rdma_host_device_core::state::Store;

/// A NIC a claim's device is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicRef {
    /// `inventory::device_id`: what ADD resolves as `deviceID`, and the checkpoint records.
    pub device_id: String,
    /// Its RDMA device's uverbs char device (`uverbs0`), if it has one.
    pub uverbs: Option<String>,
    /// The attachment holding it now (`container/ifname`), if it is in a pod.
    pub attached_to: Option<String>,
    /// What the device metadata says of it before ADD: its RDMA device (ADD's pairing), its
    /// PCI address and NUMA node (as the slice publishes them).
    pub rdma_device: Option<String>,
    pub pci: Option<String>,
    pub numa: Option<i64>,
}

impl NicRef {
    /// The CDI device IDs prepare returns: the uverbs char device's entry in our CDI spec
    /// (`cdi.rs`), whose common edits add `rdma_cm` and the memlock hook.
    pub fn cdi_device_ids(&self) -> Vec<String> {
        self.uverbs
            .iter()
            .map(|u| format!("{}={u}", crate::cdi::KIND))
            .collect()
    }
}

/// Device name -> NIC.
pub trait Nics: Send + Sync {
    /// The NIC named `device` in our ResourceSlice; `None` when no NIC of this node has that
    /// name or the node policy keeps it; an error when the node could not be read.
    fn find<'a>(&'a self, device: &'a str) -> BoxFuture<'a, Result<Option<NicRef>, String>>;
}

/// The node's NICs, read at each call (prepare is rare; a NIC hot-plugged since is found).
pub struct HostNics {
    pub node: Node,
    pub dra: DraConfig,
}

impl HostNics {
    async fn find_now(&self, device: &str) -> rdma_host_device_core::error::Result<Option<NicRef>> {
        let host = Links::open()?;
        let store = Store::new(&self.node.state_dir);
        // Each host link whose device name is `device`, named as the slice names it.
        let mut hits: Vec<(LinkInfo, Identity)> = Vec::new();
        for l in host.all().await? {
            if l.name == "lo" {
                continue;
            }
            let who = Identity::of_link(&l);
            if name_for(who.pci.as_deref(), &who.device_id, &who.name) == device {
                hits.push((l, who));
            }
        }
        let records = store.all()?;
        // (device ID, device name, attachment) of every NIC in a pod.
        let attached: Vec<(String, String, String)> = records
            .iter()
            .map(|r| {
                let who = Identity::of_record(r);
                let name = name_for(who.pci.as_deref(), &who.device_id, &who.name);
                (
                    who.device_id,
                    name,
                    format!("{}/{}", r.container_id, r.ifname),
                )
            })
            .collect();
        match hits.as_slice() {
            [] => {
                // In a pod already: known by its record, but not ours to hand out again.
                Ok(attached
                    .into_iter()
                    .find(|(_, name, _)| name == device)
                    .map(|(device_id, _, who)| NicRef {
                        device_id,
                        attached_to: Some(who),
                        ..NicRef::default()
                    }))
            }
            [(l, who)] => {
                let id = &who.device_id;
                let mut nic = Nic::on_host(l, Snapshot::read()?.as_ref());
                nic.uplink =
                    rdma_host_device_core::uppers::uses(&host, &self.node.uppers_socket, l).await?;
                // The policy judges the link by the name it has now, and where it was made.
                let facts = NicFacts {
                    name: &l.name,
                    made_elsewhere: rdma_host_device::select::made_elsewhere(l),
                    ..nic.facts()
                };
                let published = match &self.dra.nics {
                    Some(p) => p.matches(&facts),
                    None => who.backed(),
                };
                if !published {
                    log::warn!(
                        "{device} is {} ({id}), which dra.nics does not publish",
                        l.name
                    );
                    return Ok(None);
                }
                if let Err(e) = self.node.admit(&facts) {
                    log::warn!("{device} is {} ({id}): {}", l.name, e.msg);
                    return Ok(None);
                }
                drop(facts);
                Ok(Some(NicRef {
                    device_id: id.clone(),
                    uverbs: nic.uverbs,
                    rdma_device: nic.rdma_device,
                    pci: nic.pci,
                    numa: nic.numa,
                    attached_to: attached
                        .into_iter()
                        .find(|(a, _, _)| a == id)
                        .map(|(_, _, who)| who),
                }))
            }
            many => Err(rdma_host_device_core::error::Error::new(
                rdma_host_device_core::error::Code::DeviceAmbiguous,
                format!(
                    "device name {device} is that of several NICs ({})",
                    many.iter()
                        .map(|(l, who)| format!("{} {}", l.name, who.device_id))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }
}

impl Nics for HostNics {
    fn find<'a>(&'a self, device: &'a str) -> BoxFuture<'a, Result<Option<NicRef>, String>> {
        Box::pin(async move { self.find_now(device).await.map_err(|e| e.msg) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_are_the_slices_dns_labels() {
        assert_eq!(
            name_for(Some("0000:3b:00.1"), "0000:3b:00.1", "ens1f1"),
            "pci-0000-3b-00-1"
        );
        assert_eq!(
            name_for(None, "mlx5_core.sf.4", "enp3s0f0s4"),
            "aux-mlx5-core-sf-4"
        );
        assert_eq!(name_for(None, "Veth_A.1", "Veth_A.1"), "net-veth-a-1");
        let long = "n".repeat(80);
        assert_eq!(name_for(None, &long, &long).len(), 63);
    }

    #[test]
    fn cdi_ids_name_the_uverbs_char_device() {
        let n = NicRef {
            device_id: "0000:3b:00.1".into(),
            uverbs: Some("uverbs2".into()),
            ..NicRef::default()
        };
        assert_eq!(n.cdi_device_ids(), ["rdma-host-device.io/rdma=uverbs2"]);
        let none = NicRef { uverbs: None, ..n };
        assert!(none.cdi_device_ids().is_empty());
    }
}
