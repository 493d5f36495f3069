//! The API objects the DRA driver reads and writes, `resource.k8s.io/v1` (Kubernetes 1.34 and
//! later), each with only the fields the driver uses, named as the API names them.
//!
//! Two rules keep a write from losing what the server holds:
//! - `metadata` keeps every field it does not name (labels, annotations, owner references,
//!   managed fields, timestamps) and sends them back unchanged, so a slice read, edited and
//!   PUT back keeps what the server set on it besides `resourceVersion` and `uid`;
//! - a claim is not ours: its `spec` is kept whole as the server's JSON, and each level of its
//!   `status` keeps the fields it does not name. (`dra::status` writes claim status through the
//!   JSON path, `Kube::get_claim_json`, which keeps everything by construction.)
//!
//! A slice's `spec` is ours entirely: an update replaces it with what the driver publishes.

use rdma_host_device_core::dra::metadata::Attribute;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The group and version of every object here.
pub(crate) const API_VERSION: &str = "resource.k8s.io/v1";

/// An object's metadata: the fields the driver reads, and the rest as the server wrote it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Every other field, sent back as it came.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `ResourceSlice`: devices a driver offers on a node.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResourceSlice {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ResourceSliceSpec,
}

/// A slice's spec, as the driver publishes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceSliceSpec {
    pub driver: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    pub pool: ResourcePool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<Device>>,
}

/// The pool a slice belongs to; a consumer takes only the slices of its newest generation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourcePool {
    pub name: String,
    pub generation: i64,
    pub resource_slice_count: i64,
}

/// One device of a slice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Device {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, Attribute>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<DeviceTaint>>,
}

/// A device taint (DRADeviceTaints); the server adds `timeAdded`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeviceTaint {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

/// `ResourceClaim`: what a pod asked for and, in its status, what it was given.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResourceClaim {
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The request, kept as the server's JSON (the driver never reads it).
    #[serde(default)]
    pub spec: Value,
    #[serde(default)]
    pub status: Option<ResourceClaimStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<AllocationResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_for: Option<Vec<ResourceClaimConsumerReference>>,
    /// `devices[]` and whatever a newer server has.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceAllocationResult>,
    /// `nodeSelector`, `allocationTimestamp`, ...
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceAllocationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<DeviceRequestAllocationResult>>,
    /// `config[]`, ...
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One device allocated: which request it serves, and the device by driver, pool and name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRequestAllocationResult {
    #[serde(default)]
    pub request: String,
    #[serde(default)]
    pub driver: String,
    #[serde(default)]
    pub pool: String,
    #[serde(default)]
    pub device: String,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Who a claim is reserved for (a pod: resource `pods`, no API group).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimConsumerReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A list's answer: the items and the collection's resourceVersion (where a watch starts).
#[derive(Debug, Deserialize)]
pub(super) struct List<T> {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListMeta {
    #[serde(default)]
    pub resource_version: Option<String>,
}

/// The API server's account of a failure (`kind: Status`), in an error answer or a watch's
/// ERROR event.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Status {
    pub kind: String,
    pub code: u16,
    pub reason: String,
    pub message: String,
}

// apiVersion and kind are written on every object sent (the server requires them), whatever
// the value held.
impl Serialize for ResourceSlice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("ResourceSlice", 4)?;
        o.serialize_field("apiVersion", API_VERSION)?;
        o.serialize_field("kind", "ResourceSlice")?;
        o.serialize_field("metadata", &self.metadata)?;
        o.serialize_field("spec", &self.spec)?;
        o.end()
    }
}

impl Serialize for ResourceClaim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("ResourceClaim", 5)?;
        o.serialize_field("apiVersion", API_VERSION)?;
        o.serialize_field("kind", "ResourceClaim")?;
        o.serialize_field("metadata", &self.metadata)?;
        if !self.spec.is_null() {
            o.serialize_field("spec", &self.spec)?;
        }
        if let Some(st) = &self.status {
            o.serialize_field("status", st)?;
        }
        o.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slice_read_and_written_back_keeps_the_metadata_the_server_set() {
        let from_server = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {
                "name": "n1-rdma-host-device.io", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "creationTimestamp": "2026-11-28T00:00:00Z",
                "labels": {"a": "b"}, "managedFields": [{"manager": "x"}]
            },
            "spec": {
                "driver": "rdma-host-device.io", "nodeName": "n1",
                "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
                "devices": [{"name": "d0", "taints": [
                    {"key": "k", "value": "v", "effect": "NoSchedule", "timeAdded": "2026-11-28T00:00:01Z"}
                ]}]
            }
        });
        let s: ResourceSlice = serde_json::from_value(from_server.clone()).unwrap();
        assert_eq!(s.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(s.metadata.generation, Some(3));
        assert_eq!(serde_json::to_value(&s).unwrap(), from_server);
    }

    #[test]
    fn a_claim_keeps_what_the_driver_does_not_read() {
        let from_server = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "annotations": {"x": "y"}},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "c"}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "nic", "driver": "d", "pool": "p", "device": "x", "adminAccess": false}],
                        "config": [{"source": "FromClaim"}]
                    },
                    "nodeSelector": {"nodeSelectorTerms": []}
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
                "devices": [{"driver": "d", "pool": "p", "device": "x", "networkData": {"ips": ["10.0.0.2/24"]}}],
                "aNewerField": 1
            }
        });
        let c: ResourceClaim = serde_json::from_value(from_server.clone()).unwrap();
        assert_eq!(serde_json::to_value(&c).unwrap(), from_server);
    }
}
