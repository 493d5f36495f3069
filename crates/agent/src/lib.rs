//! rdma-host-device-agent as a library: the node agent's subcommands (device plugin, DRA
//! driver, NRI plugin, CDI spec, Prometheus exporter, inspect, validate, uppers watcher) and
//! its command line (`cli.rs`), for the binary (src/main.rs) and the tests.
//!
//! It depends on `rdma_host_device_core` and on the plugin crate `rdma_host_device`, for three
//! answers that must be the plugin's own, not a copy that could drift: `validate` judges a
//! network configuration with the plugin's parser (`cni::netconf`), `inspect` finds a NIC
//! stranded by a dead pod by DEL's rule (`flows::orphaned_nic`) and reports the landlock ABI
//! the IPAM confinement gets (`confine`), and the DRA driver leaves out NICs that selection
//! would refuse (`select::made_elsewhere`). Nothing of the plugin depends back on the agent.

pub mod async_rt;
pub mod cdi;
pub mod cli;
pub mod device_plugin;
pub mod dra;
pub mod error;
pub mod flags;
pub mod gc;
pub mod health;
pub mod inspect;
pub mod kube;
pub mod kubelet_grpc;
pub mod metrics;
pub mod node_config;
pub mod nri;
pub mod uppers_guard;
pub mod uppers_watch;
pub mod validate;
