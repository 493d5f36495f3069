//! The integration tests' shared harness, a dev-only crate both packages' tests use, by
//! concern: `programs.rs` (the programs under test, found beside this build, and what they are
//! given), `process.rs` (commands, the plugin exec'd directly, `RunOut`), `net.rs` (netns,
//! veth NICs, `ip -j` views), `client.rs` (the libcni client), `containerd.rs` (a private
//! containerd CRI, the kubelet-side client), `cluster.rs` (the real one-node Kubernetes of
//! tests/cluster/cluster.sh), `apiserver.rs` (its API server, or a stand-in for the faults the
//! real one does not show), `podman.rs` (podman on a private storage root), `daemonset.rs`
//! (conf/k8s/daemonset.yaml's containers run by podman on a stand-in node), `grpc_wire.rs`
//! (gRPC calls written byte for byte as the kubelet's grpc-go writes them), `standin.rs` (a
//! peer no registry ships, in Python), `dra_kubelet.rs` (the DRA tests' kubelet and our driver
//! beside it), `multus.rs` (a delegate's config as Multus passes it), `cleanup.rs` (mounts,
//! processes and cgroups a runtime left), `rig.rs` (one test's world), `root.rs` (root or a
//! loud skip; in CI, a failure), `world.rs` (NICs, pods and the network's config the flow tests
//! share). Everything but the API server and the DRA kubelet is re-exported here.
//!
//! Tests run in parallel threads, so every name carries a per-process tag and a per-test
//! counter. Tests need root (netns, links): without it a test binary skips, saying how many
//! tests did not run, and fails when `$CI` or `$RHD_TESTS_MUST_RUN` is set; without `go` (the
//! libcni client) they fail loudly.

pub mod apiserver;
mod cleanup;
mod client;
mod cluster;
mod containerd;
mod daemonset;
pub mod dra_kubelet;
mod grpc_wire;
mod multus;
mod net;
mod podman;
mod process;
mod programs;
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
pub use programs::*;
pub use rig::*;
pub use root::*;
pub use standin::*;
pub use world::*;

/// The randomised tests' PRNG, the library's own (src/fuzz/mutate.rs).
pub use rdma_host_device::mutate::Rng;
