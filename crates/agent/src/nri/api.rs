//! The NRI API (`nri.pkg.api.v1alpha1`, containerd/nri `pkg/api/api.proto`) as far as the memlock
//! plugin uses it, and ttrpc's own envelope (`ttrpc.Request`, `ttrpc.Response`): our own
//! description of the wire contract, hand-written `prost::Message` structs with the upstream
//! field numbers, so the build needs no `protoc` (as `device_plugin::api`). Fields we do not read
//! are left out: protobuf skips unknown fields, so a runtime sending the whole `Container` is
//! read correctly. `tests/nri/nri.proto` and `tests/nri/ttrpc.proto` describe the same messages
//! for the test's runtime stand-in, generated from them by grpcio-tools: a field number wrong
//! here fails that test.

use prost::Message;

/// The runtime's service (the plugin calls it), on the multiplexer's connection 2.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The plugin's service (the runtime calls it), on the multiplexer's connection 1.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// `Event` numbers, for the subscription mask (`1 << (event - 1)`).
pub const EVENT_CREATE_CONTAINER: u32 = 4;

/// The subscription mask of `events` (`EventMask.Set` upstream).
pub fn event_mask(events: &[u32]) -> i32 {
    events.iter().fold(0, |m, e| m | (1 << (e - 1)))
}

/// The rlimit type NRI and the OCI spec name memlock by.
pub const RLIMIT_MEMLOCK: &str = "RLIMIT_MEMLOCK";

#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, Message)]
pub struct RegisterPluginRequest {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Two digits: the runtime calls plugins in ascending index order.
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
    #[prost(string, tag = "3")]
    pub nri_version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ConfigureRequest {
    #[prost(string, tag = "1")]
    pub config: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// Milliseconds.
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// Milliseconds: how long the runtime waits for each of our answers.
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
    #[prost(string, tag = "6")]
    pub nri_version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ConfigureResponse {
    /// The event subscription mask.
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// Only `more` is read: the pods and containers (fields 1 and 2) are skipped.
#[derive(Clone, PartialEq, Message)]
pub struct SynchronizeRequest {
    #[prost(bool, tag = "3")]
    pub more: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct SynchronizeResponse {
    /// Must echo the request's `more`, or the runtime drops the plugin.
    #[prost(bool, tag = "2")]
    pub more: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub uid: String,
    #[prost(string, tag = "4")]
    pub namespace: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    /// The rlimits its spec has so far (the runtime's base spec, plugins called before us).
    #[prost(message, repeated, tag = "13")]
    pub rlimits: Vec<PosixRlimit>,
}

#[derive(Clone, PartialEq, Message)]
pub struct LinuxContainer {
    /// The container's device nodes: what the spec's `linux.devices` holds after the device
    /// plugin's, DRA's and CDI's edits (and those of plugins called before us).
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<LinuxDevice>,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct LinuxDevice {
    /// In the container.
    #[prost(string, tag = "1")]
    pub path: String,
    /// `c` (char), `b` (block), `p` (fifo).
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(int64, tag = "3")]
    pub major: i64,
    #[prost(int64, tag = "4")]
    pub minor: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct CreateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, Message)]
pub struct CreateContainerResponse {
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerAdjustment {
    #[prost(message, repeated, tag = "7")]
    pub rlimits: Vec<PosixRlimit>,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct PosixRlimit {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(uint64, tag = "2")]
    pub hard: u64,
    #[prost(uint64, tag = "3")]
    pub soft: u64,
}

/// ttrpc's envelope of a call (containerd/ttrpc `request.proto`, package `ttrpc`).
#[derive(Clone, PartialEq, Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttrpc's envelope of an answer: a `google.rpc.Status` (absent or code 0: OK) and the payload.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status`: a gRPC code and a message (details left out).
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC's code for a method the server does not serve.
pub const CODE_UNIMPLEMENTED: i32 = 12;
/// gRPC's code for a request that cannot be decoded.
pub const CODE_INVALID_ARGUMENT: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscription_mask_is_nris_bit_per_event() {
        // CreateContainer is event 4: bit 3 (EventMask.Set upstream: 1 << (e - 1)).
        assert_eq!(event_mask(&[EVENT_CREATE_CONTAINER]), 8);
    }

    /// Bytes a protobuf encoder from NRI's own .proto produces for the same values: field 7
    /// (rlimits) of the adjustment, holding field 1 string, field 2 and 3 varints.
    #[test]
    fn an_rlimit_adjustment_encodes_with_nris_field_numbers() {
        let a = ContainerAdjustment {
            rlimits: vec![PosixRlimit {
                r#type: "X".into(),
                hard: 1,
                soft: 2,
            }],
        };
        assert_eq!(
            a.encode_to_vec(),
            [0x3a, 7, 0x0a, 1, b'X', 0x10, 1, 0x18, 2]
        );
    }
}
