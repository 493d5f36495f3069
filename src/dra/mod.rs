//! `rdma-host-device-agent dra`: the DRA driver (Kubernetes `resource.k8s.io/v1`) of the node
//! agent. It publishes this node's NICs as a ResourceSlice (`slices`), so a ResourceClaim can
//! ask for a NIC by what it is (RDMA, transport, speed, rail, PCIe root shared with a GPU).
//! The NIC's move into the pod stays the CNI's. Agent-only: the CNI binary never reaches this
//! module (nor `kube`).
//!
//! `run` builds one current-thread Tokio runtime and one `Kube` client; `slices::run(kube,
//! settings)` is a future that publishes until the process ends, so the kubelet side
//! (registration, NodePrepareResources) runs beside it on the same runtime with a clone of the
//! same client (`Kube::get_claim`, `Kube::update_claim_status`).

pub mod slices;

use crate::error::{Result, invalid_config, io_error};
use crate::flags::absolute_path;
use crate::kube::{Endpoint, Kube, KubeOptions};
use crate::node::Node;
use std::path::PathBuf;
use std::time::Duration;

/// The driver's name: the ResourceSlices' `spec.driver`, the DeviceClass's selector, and the
/// domain of our device attributes.
pub const DRIVER: &str = "rdma-host-device.io";

/// `dra --node-name NODE [--kube-server URL --kube-ca FILE --kube-token FILE] ...`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// This node's name as the API server knows it (the DaemonSet passes spec.nodeName)
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node_name: String,
    #[command(flatten)]
    pub kube: KubeOptions,
    /// The attachments' state directory [default: the node configuration's stateDir]
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    pub state_dir: Option<PathBuf>,
    /// Publish the slice again at least this often, changed or not
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub resync_seconds: u64,
}

/// A Node's name: a DNS subdomain (the slice's name and pool are made from it).
fn node_name(s: &str) -> std::result::Result<String, String> {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.len() > 253 - DRIVER.len() - 1 || !s.split('.').all(label) {
        return Err(format!("{s:?} is not a node name (a DNS subdomain)"));
    }
    Ok(s.to_owned())
}

/// Run the driver until killed; returns only if it cannot start (the node configuration, the
/// API server's address or credentials, its refusal of our first publication).
pub fn run(opts: &Options) -> Result<()> {
    crate::logging::init(log::LevelFilter::Info, None, " dra".into());
    let node = Node::load()?;
    let dra = node.dra()?.unwrap_or_default();
    if opts.resync_seconds == 0 {
        return Err(invalid_config("--resync-seconds must be at least 1"));
    }
    let settings = slices::Settings {
        node_name: opts.node_name.clone(),
        state_dir: opts.state_dir.clone().unwrap_or(node.state_dir.clone()),
        node,
        dra,
        sys: PathBuf::from("/sys"),
        resync: Duration::from_secs(opts.resync_seconds),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| io_error("cannot start the runtime", e))?;
    rt.block_on(async move {
        let kube = Kube::connect(&Endpoint::from_options(&opts.kube)).await?;
        slices::run(kube, settings).await
    })
}
