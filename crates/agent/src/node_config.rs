//! The agent's `node-config [FILE]`: the node configuration the plugin would use (FILE, or
//! the one the plugin finds), printed as JSON with the defaults filled in. The DaemonSet's
//! installer checks a new one with it before putting it in place.

use crate::error::Result;
use rdma_host_device_core::node::Node;
use std::path::PathBuf;

/// The file to read; `None`: the one the plugin reads (`$RDMA_HOST_DEVICE_NODE_CONFIG` or the
/// default path).
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// The node configuration to read [default: $RDMA_HOST_DEVICE_NODE_CONFIG, or
    /// /etc/rdma-host-device/node.json]
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// Print it, or fail with what is invalid in which file (its `devicePlugin` and `dra` included).
pub fn run(o: &Options) -> Result<()> {
    let node = match &o.file {
        Some(f) => Node::load_from(f)?,
        None => Node::load()?,
    };
    node.device_plugin()?;
    node.dra()?;
    node.gc()?;
    println!("{}", node.to_json());
    Ok(())
}
