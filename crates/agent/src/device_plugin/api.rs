//! The kubelet device-plugin API, `v1beta1`, as protobuf messages: our own description of the
//! wire contract (message and field numbers as in the kubelet's `api.proto`, package
//! `v1beta1`), written as `prost::Message` structs so the build needs no `protoc`.
//! `tests/device_plugin/deviceplugin.proto` describes the same messages for the test's kubelet, which
//! is generated from it by grpcio-tools: a field number wrong here fails that test.

use prost::Message;
use std::collections::HashMap;

/// The API version we speak (`RegisterRequest.version`).
pub const VERSION: &str = "v1beta1";
/// The kubelet's registration socket, in the device-plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Device health as `ListAndWatch` reports it.
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";

/// gRPC method paths (`/<package>.<service>/<method>`).
pub mod path {
    pub const REGISTER: &str = "/v1beta1.Registration/Register";
    pub const GET_OPTIONS: &str = "/v1beta1.DevicePlugin/GetDevicePluginOptions";
    pub const LIST_AND_WATCH: &str = "/v1beta1.DevicePlugin/ListAndWatch";
    pub const GET_PREFERRED: &str = "/v1beta1.DevicePlugin/GetPreferredAllocation";
    pub const ALLOCATE: &str = "/v1beta1.DevicePlugin/Allocate";
    pub const PRE_START: &str = "/v1beta1.DevicePlugin/PreStartContainer";
}

#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, Message)]
pub struct DevicePluginOptions {
    #[prost(bool, tag = "1")]
    pub pre_start_required: bool,
    #[prost(bool, tag = "2")]
    pub get_preferred_allocation_available: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct RegisterRequest {
    #[prost(string, tag = "1")]
    pub version: String,
    /// Our socket's file name, in the kubelet's device-plugin directory.
    #[prost(string, tag = "2")]
    pub endpoint: String,
    #[prost(string, tag = "3")]
    pub resource_name: String,
    #[prost(message, optional, tag = "4")]
    pub options: Option<DevicePluginOptions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListAndWatchResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct NumaNode {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct TopologyInfo {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct Device {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub health: String,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PreStartContainerRequest {
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PreStartContainerResponse {}

#[derive(Clone, PartialEq, Message)]
pub struct PreferredAllocationRequest {
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerPreferredAllocationRequest>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerPreferredAllocationRequest {
    #[prost(string, repeated, tag = "1")]
    pub available_device_ids: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub must_include_device_ids: Vec<String>,
    #[prost(int32, tag = "3")]
    pub allocation_size: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct PreferredAllocationResponse {
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerPreferredAllocationResponse>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerPreferredAllocationResponse {
    #[prost(string, repeated, tag = "1")]
    pub device_ids: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AllocateRequest {
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerAllocateRequest>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerAllocateRequest {
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AllocateResponse {
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerAllocateResponse>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerAllocateResponse {
    #[prost(map = "string, string", tag = "1")]
    pub envs: HashMap<String, String>,
    #[prost(message, repeated, tag = "2")]
    pub mounts: Vec<Mount>,
    #[prost(message, repeated, tag = "3")]
    pub devices: Vec<DeviceSpec>,
    #[prost(map = "string, string", tag = "4")]
    pub annotations: HashMap<String, String>,
    #[prost(message, repeated, tag = "5")]
    pub cdi_devices: Vec<CdiDevice>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(bool, tag = "3")]
    pub read_only: bool,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct DeviceSpec {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// cgroup permissions: `r`, `w`, `m`.
    #[prost(string, tag = "3")]
    pub permissions: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct CdiDevice {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes a protobuf encoder from the kubelet's own .proto produces for the same values
    /// (field 1 string, field 2 string, field 3 message with field 1 varint).
    #[test]
    fn a_device_encodes_with_the_kubelets_field_numbers() {
        let d = Device {
            id: "a".into(),
            health: "Healthy".into(),
            topology: Some(TopologyInfo {
                nodes: vec![NumaNode { id: 1 }],
            }),
        };
        let want: Vec<u8> = [
            &[0x0a, 1, b'a'][..],
            &[0x12, 7],
            b"Healthy",
            &[0x1a, 4, 0x0a, 2, 0x08, 1],
        ]
        .concat();
        assert_eq!(d.encode_to_vec(), want);
        let r = ContainerPreferredAllocationRequest {
            available_device_ids: vec!["x".into()],
            must_include_device_ids: vec!["y".into()],
            allocation_size: 2,
        };
        assert_eq!(
            r.encode_to_vec(),
            [0x0a, 1, b'x', 0x12, 1, b'y', 0x18, 2].to_vec()
        );
    }
}
