//! `rdma-host-device-agent dra`: a kubelet DRA driver (`resource.k8s.io/v1`, DRA plugin API
//! v1) named [`DRIVER_NAME`], handing out the node's NICs with their RDMA devices.
//!
//! - `api.rs`: the kubelet's registration and DRA v1 messages, hand-written prost structs.
//! - `plugin.rs`: prepare and unprepare, the two gRPC services, their sockets.
//! - `nics.rs`: which NIC a device name is (and its uverbs char device), under the node policy.
//! - `checkpoint.rs`: the prepared claims, on disk; the CNI reads it for `draRequest`, so it
//!   depends on nothing else here.
//!
//! Nothing here but `checkpoint` is reachable from the CNI binary (src/main.rs).

pub mod api;
pub mod checkpoint;
pub mod nics;
pub mod plugin;

use crate::error::{Result, invalid_config, io_error};
use crate::flags::absolute_path;
use crate::node::Node;
use futures::future::BoxFuture;
use std::path::PathBuf;
use std::sync::Arc;

/// Our DRA driver's name: the `driver` of our ResourceSlices and allocation results.
pub const DRIVER_NAME: &str = "rdma-host-device.io";
/// The kubelet's root directory, under which `plugins_registry/` and `plugins/` are.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

/// `dra [--kubelet-dir DIR] [--state-dir DIR] [--cdi-spec FILE [--cdi-hook PATH]] [--kube-server URL --kube-ca FILE --kube-token FILE]`.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// The kubelet's root directory: the registration socket goes in DIR/plugins_registry, the
    /// DRA socket is DIR/plugins/rdma-host-device.io/dra.sock
    #[arg(long, value_name = "DIR", default_value = DEFAULT_KUBELET_DIR, value_parser = absolute_path)]
    pub kubelet_dir: PathBuf,
    /// The attachments' state directory, where the checkpoint of prepared claims is kept
    /// (DIR/dra/checkpoint.json) [default: the node configuration's stateDir]
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    pub state_dir: Option<PathBuf>,
    /// Bring this CDI spec up to date (`cdi`'s) before answering a claim's CDI IDs
    #[arg(long, value_name = "FILE", value_parser = absolute_path)]
    pub cdi_spec: Option<PathBuf>,
    /// The memlock hook's path in that spec, as the node's runtime sees it
    #[arg(long, value_name = "PATH", default_value = crate::cdi::DEFAULT_HOOK, value_parser = absolute_path)]
    pub cdi_hook: PathBuf,
    #[command(flatten)]
    pub kube: crate::kube::KubeOptions,
}

/// Claims from the API server, in the API's JSON.
impl plugin::ClaimSource for crate::kube::Kube {
    fn get_claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, std::result::Result<serde_json::Value, String>> {
        Box::pin(async move {
            let claim = crate::kube::Kube::get_claim(self, namespace, name)
                .await
                .map_err(|e| e.to_string())?;
            serde_json::to_value(claim).map_err(|e| e.to_string())
        })
    }
}

/// Run the driver's kubelet side until killed; returns only if it cannot start.
pub fn run(opts: &Options) -> Result<()> {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("rdma-host-device-agent dra: bug: {info}");
    }));
    crate::logging::init(log::LevelFilter::Info, None, " dra".into());
    let node = Node::load()?;
    let state_dir = opts.state_dir.clone().unwrap_or(node.state_dir.clone());
    let cdi = match &opts.cdi_spec {
        None => None,
        Some(path) => Some(plugin::CdiSpec {
            path: path.clone(),
            hook: opts.cdi_hook.clone(),
            memlock: crate::node::Memlock::parse(&node.memlock)
                .map_err(|e| e.context(&node.source))?,
        }),
    };
    let checkpoint = checkpoint::path(&state_dir);
    // A checkpoint this build cannot read stops the start: unprepare depends on it.
    let held =
        checkpoint::Checkpoint::read(&checkpoint).map_err(|e| invalid_config(e.to_string()))?;
    log::info!(
        "{} claim(s) prepared before this start, in {}",
        held.claims.len(),
        checkpoint.display()
    );
    let sockets = plugin::Sockets::under(&opts.kubelet_dir, DRIVER_NAME);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| io_error("cannot start the runtime", e))?;
    rt.block_on(async move {
        let kube =
            crate::kube::Kube::connect(&crate::kube::Endpoint::from_options(&opts.kube)).await?;
        let driver = Arc::new(plugin::Driver {
            name: DRIVER_NAME.into(),
            claims: Arc::new(kube),
            nics: Arc::new(nics::HostNics { node }),
            checkpoint,
            serial: tokio::sync::Mutex::new(()),
            cdi,
        });
        plugin::supervise(driver, sockets).await;
        Ok(())
    })
}
