//! rdma-host-device-agent: the node agent beside the CNI plugin (device plugin, exporter, CDI
//! spec writer, inspect, node-config, validate), sharing the plugin's library. Its command line
//! is `rdma_host_device::cli`; the CNI plugin the runtime execs is src/main.rs.

fn main() {
    std::process::exit(rdma_host_device::cli::main());
}
