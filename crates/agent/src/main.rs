//! rdma-host-device-agent: the node agent beside the CNI plugin (device plugin, DRA driver,
//! NRI plugin, exporter, CDI spec writer, inspect, node-config, validate, uppers watcher). Its
//! command line is `rdma_host_device_agent::cli`; the CNI plugin the runtime execs is the root
//! crate's src/main.rs.

fn main() {
    std::process::exit(rdma_host_device_agent::cli::main());
}
