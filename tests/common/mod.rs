//! Shared support for the integration tests, by concern: `process.rs` (commands, the plugin
//! exec'd directly, `RunOut`), `net.rs` (netns, veth NICs, `ip -j` views), `client.rs` (the
//! libcni client), `containerd.rs` (a private containerd CRI, the kubelet-side client), `cluster.rs` (the real
//! one-node Kubernetes of tests/cluster/cluster.sh),
//! `podman.rs` (podman on a private storage root), `daemonset.rs` (conf/k8s/daemonset.yaml's
//! containers run by podman on a stand-in node), `grpc_wire.rs` (gRPC calls written byte for
//! byte as the kubelet's grpc-go writes them), `multus.rs` (a delegate's config as Multus
//! passes it), `cleanup.rs` (mounts, processes and cgroups
//! a runtime left), `rig.rs` (one test's world), `root.rs` (root or a loud skip; in CI, a
//! failure), `world.rs` (NICs, pods and the network's config the flow tests share). Everything
//! is re-exported here.
//!
//! Tests run in parallel threads, so every name carries a per-process tag and a per-test
//! counter. Tests need root (netns, links): without it a test binary skips, saying how many
//! tests did not run, and fails when `$CI` or `$RHD_TESTS_MUST_RUN` is set; without `go` (the
//! libcni client) they fail loudly.
#![allow(dead_code, unused_imports)]

mod cleanup;
mod client;
mod cluster;
mod containerd;
mod daemonset;
mod grpc_wire;
mod multus;
mod net;
mod podman;
mod process;
mod rig;
mod root;
mod standin;
mod world;
/// The YAML reader `validate` reads operators' manifests with, for the ones the shared helpers
/// read.
pub use rdma_host_device_agent::validate::yaml;

pub use cleanup::*;
pub use client::*;
pub use cluster::*;
pub use containerd::*;
pub use daemonset::*;
pub use grpc_wire::*;
pub use multus::*;
pub use net::*;
pub use podman::*;
pub use process::*;
pub use rig::*;
pub use root::*;
pub use standin::*;
pub use world::*;

use serde_json::{Value, json};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The plugin under test.
pub const PLUGIN: &str = env!("CARGO_BIN_EXE_rdma-host-device");
/// The node agent beside it (inspect, metrics, device-plugin, cdi, node-config, validate): the
/// agent crate's binary, in the same target directory as the plugin's (cargo names only a
/// package's own binaries to its tests). `cargo test` at the root builds it: the agent crate
/// is a default member and has an integration test of its own (crates/agent/tests/).
pub const AGENT: &str = concat!(env!("CARGO_BIN_EXE_rdma-host-device"), "-agent");

/// The binary the tests run: [`PLUGIN`], or `$RHD_TEST_PLUGIN` to aim the same suite at
/// another plugin (e.g. `/usr/lib/cni/host-device`, to see the suite catch its faults).
pub fn plugin() -> PathBuf {
    std::env::var_os("RHD_TEST_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(PLUGIN))
}
/// Cargo's scratch dir for integration tests (target/tmp).
pub const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");
/// Where Debian's plugins (static, host-local, loopback, tuning, ...) live.
pub const SYSTEM_CNI_DIR: &str = "/usr/lib/cni";
pub const ALL_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// The MTU every test NIC starts with, so a restored MTU is recognisable.
pub const ORIG_MTU: u64 = 1337;

static COUNTER: AtomicU32 = AtomicU32::new(1);

fn next_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// Short per-process tag (3 hex digits) so names from concurrent test binaries differ.
pub fn tag() -> String {
    format!("{:03x}", std::process::id() & 0xfff)
}

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

/// The randomised tests' PRNG, the library's own (src/fuzz/mutate.rs).
#[allow(unused_imports)]
pub use rdma_host_device::mutate::Rng;

/// Held by tests that leave a NIC lost on the host or that run GC (which restores every lost
/// NIC on the node, whoever lost it), so that they do not restore each other's lost NICs. A
/// file lock, so it also holds across test binaries and checkouts running at once.
pub fn lost_nic_lock() -> std::fs::File {
    use std::os::fd::AsRawFd;
    // Its file is root's: without root, skip (or fail in CI) as the rest of the test would.
    require_root();
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/rhd-tests-lost-nics.lock")
        .expect("open /tmp/rhd-tests-lost-nics.lock");
    // SAFETY: flock on our own fd; released when the File drops.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock /tmp/rhd-tests-lost-nics.lock");
    f
}
