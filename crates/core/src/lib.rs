//! rdma-host-device-core: what both programs share and neither owns. The kernel side (links,
//! RDMA netlink, verbs, network namespaces, sysfs, the uppers scan), the node configuration,
//! the formats both programs read (the attachment record, the DRA checkpoint, the CNI
//! device-info file), and the plumbing (errors, logging, files). No Kubernetes client, no
//! gRPC, no option parser: the CNI plugin (the root crate) depends on this crate alone, the
//! agent (crates/agent) on this and the plugin crate. docs/DESIGN.md is the map.

pub mod device_info;
pub mod dra;
pub mod error;
pub mod fault;
pub mod files;
pub mod inventory;
pub mod link;
pub mod logging;
pub mod names;
pub mod netlink_sync;
pub mod netns;
pub mod nic_env;
pub mod node;
pub mod process;
pub mod rdma;
pub mod state;
pub mod sysfs;
pub mod uppers;
