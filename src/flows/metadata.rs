//! What ADD completes for the pod's containers, as the CNI verbs see it: a DRA claim's KEP-5304
//! device metadata and the device plugin's per-NIC env spec (`nic_env`). Where each is, made
//! from the node's directories and the NIC's own identity alone. ADD completes them (plan.rs
//! finds them, add.rs writes); DEL and a failed ADD take ADD's part out (give_back/).

use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::DraAttachment;

/// The device metadata files of `dra`'s claim and request, when the driver recorded writing
/// them: made from the node configuration's directories (never from the network
/// configuration) and the claim's names, which must be Kubernetes names. Checked before
/// anything changes; a node configuration that no longer has `dra.deviceMetadata` leaves the
/// files as prepare wrote them, with a warning.
pub fn files(
    node: &Node,
    dra: Option<&DraAttachment>,
) -> Result<Option<rdma_host_device_core::dra::metadata::Files>> {
    let Some(dra) = dra.filter(|d| d.metadata) else {
        return Ok(None);
    };
    let Some(place) = node.dra_metadata()?.and_then(|m| m.place()) else {
        log::warn!(
            "the DRA driver wrote device metadata for claim {}/{}, but the node configuration {} has no dra.deviceMetadata now: not completed",
            dra.namespace,
            dra.name,
            node.source
        );
        return Ok(None);
    };
    let claim = rdma_host_device_core::dra::metadata::ClaimRef {
        namespace: &dra.namespace,
        name: &dra.name,
        uid: &dra.uid,
    };
    place.files(&claim, &dra.request).map(Some).map_err(|e| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "the device metadata of claim {}/{}: {e}",
                dra.namespace, dra.name
            ),
        )
    })
}

/// Where the device plugin's env spec of one NIC is (`rdma_host_device_core::nic_env`).
#[derive(Debug, Clone)]
pub struct NicEnv {
    pub place: rdma_host_device_core::nic_env::Place,
    /// The NIC's device ID as the node reads it.
    pub id: String,
}

/// The device plugin's env spec the attachment `record`'s NIC may have, when the node
/// configuration has `devicePlugin.nicEnv`: named by the NIC's own device ID as the host reads
/// it (`Identity::of_record`: its PCI function, its auxiliary device, or a virtual link's host
/// name), never by the `deviceID` a NAD carries, so no tenant input names a path or another
/// NIC. None for a NIC of a DRA claim (its env is the claim's) or an ID no CDI device can
/// have (the device plugin cannot have named it either).
pub fn nic_env_of(
    node: &Node,
    record: &rdma_host_device_core::state::Record,
) -> Result<Option<NicEnv>> {
    if record.dra.is_some() {
        return Ok(None);
    }
    let Some(place) = node.nic_env()?.and_then(|e| e.place()) else {
        return Ok(None);
    };
    let id = rdma_host_device_core::inventory::Identity::of_record(record).device_id;
    if let Err(e) = rdma_host_device_core::nic_env::check_id(&id) {
        log::info!("{}: {e}; no per-NIC env", record.host_name);
        return Ok(None);
    }
    Ok(Some(NicEnv { place, id }))
}
