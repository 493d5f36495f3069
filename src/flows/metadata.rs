//! A DRA claim's KEP-5304 device metadata, as the CNI verbs see it: where its files are, made
//! from the node's directories alone. ADD completes them (plan.rs finds them, add.rs writes);
//! DEL and a failed ADD take ADD's part out (give_back/).

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
