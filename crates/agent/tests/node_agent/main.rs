//! The node agent (`rdma-host-device-agent`), each subcommand driven as its peer drives it:
//! - `cli`: both executables as a person meets them;
//! - `device_plugin`: the kubelet's device-plugin API over the real gRPC wire;
//! - `dra`: the kubelet side of the DRA driver;
//! - `cdi`: the CDI spec read by podman;
//! - `nri`: the NRI plugin under a runtime's wire;
//! - `metrics`: the exporter scraped;
//! - `inspect`: what an operator sees;
//! - `uppers`: the uppers watcher ADD asks.

mod cdi;
mod cli;
mod device_plugin;
mod dra;
mod inspect;
mod metrics;
mod nri;
mod uppers;
