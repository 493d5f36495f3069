//! rdma-host-device, the CNI plugin as a library: the CNI verbs and their flows, IPAM and its
//! confinement, NIC selection and the memlock hook, for the binary (src/main.rs) and the tests.
//! It depends on `rdma_host_device_core` alone (kernel side, node configuration, record
//! formats), so no Kubernetes client, gRPC or option parser is compiled into it; the compiler
//! keeps that wall. docs/DESIGN.md is the map.

pub mod announce;
pub mod cni;
pub mod confine;
pub mod flows;
#[cfg(test)]
mod fuzz;
pub mod ipam;
pub mod lock;
pub mod memlock_hook;
#[path = "fuzz/mutate.rs"]
pub mod mutate;
pub mod select;
