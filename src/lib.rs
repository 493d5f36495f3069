//! rdma-host-device as a library: the CNI plugin's modules, for the binary (src/main.rs) and
//! for the tests, which import what they need instead of copying it. Each module owns one
//! concern; docs/DESIGN.md is the map.

pub mod announce;
pub mod cdi;
pub mod cli;
pub mod cni;
pub mod confine;
pub mod device_info;
pub mod device_plugin;
pub mod dra;
pub mod error;
pub mod fault;
pub mod files;
pub mod flags;
pub mod flows;
#[cfg(test)]
mod fuzz;
pub mod inspect;
pub mod ipam;
pub mod kube;
pub mod kubelet_grpc;
pub mod link;
pub mod lock;
pub mod logging;
pub mod metrics;
#[path = "fuzz/mutate.rs"]
pub mod mutate;
pub mod netns;

pub mod netlink_sync;
pub mod node;
pub mod nri;
pub mod orphan;
pub mod process;
pub mod rdma;
pub mod select;
pub mod state;
pub mod sysfs;
pub mod uppers;
pub mod validate;
