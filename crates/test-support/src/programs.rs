//! The programs under test and what they are given: the plugin and the agent as this build
//! linked them (build.rs finds them), the scratch directory, Debian's CNI plugins, the CNI
//! versions, the fault points and the node configuration's variable.

use std::path::PathBuf;

/// The plugin under test.
pub const PLUGIN: &str = concat!(env!("RHD_PROFILE_DIR"), "/rdma-host-device");
/// The node agent beside it (inspect, metrics, device-plugin, cdi, node-config, validate), in
/// the same profile directory (build.rs says how it is found). `cargo test --workspace` builds
/// both programs: each package that has integration tests gets its binaries built.
pub const AGENT: &str = concat!(env!("RHD_PROFILE_DIR"), "/rdma-host-device-agent");

/// The binary the tests run: [`PLUGIN`], or `$RHD_TEST_PLUGIN` to aim the same suite at
/// another plugin (e.g. `/usr/lib/cni/host-device`, to see the suite catch its faults).
pub fn plugin() -> PathBuf {
    std::env::var_os("RHD_TEST_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(PLUGIN))
}
/// Cargo's scratch dir for integration tests (target/tmp).
pub const TARGET_TMP: &str = env!("RHD_TARGET_TMP");
/// Where Debian's plugins (static, host-local, loopback, tuning, ...) live.
pub const SYSTEM_CNI_DIR: &str = "/usr/lib/cni";
pub const ALL_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The fault points (crates/core/src/fault.rs) an ADD of a NIC without RDMA passes, in order
/// (the RDMA steps' points are not reached without RDMA, `add:give-back` only after a failure).
pub const ADD_FAULT_POINTS: &[&str] = &[
    "add:locked",
    "add:after-state",
    "add:after-nic-move",
    "add:after-ipam",
    "add:after-addresses",
    "add:before-result",
];
/// The fault points a DEL of a NIC without RDMA passes, in order.
pub const DEL_FAULT_POINTS: &[&str] = &[
    "del:locked",
    "del:after-nic-return",
    "del:after-ipam-release",
];

/// Where the plugin reads the node configuration from (see crates/core/src/node/).
pub const NODE_CONFIG_ENV: &str = "RDMA_HOST_DEVICE_NODE_CONFIG";
