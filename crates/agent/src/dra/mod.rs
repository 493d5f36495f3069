//! `rdma-host-device-agent dra`: the DRA driver (Kubernetes `resource.k8s.io/v1`) of the node
//! agent, named [`DRIVER`]. Two halves in one process:
//!
//! - `slices.rs`: this node's NICs published as a ResourceSlice, so a ResourceClaim can ask for
//!   a NIC by what it is (RDMA, transport, speed, rail, PCIe root shared with a GPU);
//! - `plugin.rs`: the kubelet side (plugin registration, DRA plugin API v1): prepare reads a
//!   claim, maps our allocated devices to NICs (`nics.rs`), answers their RDMA devices' CDI IDs
//!   and records the claim in the checkpoint (`rdma_host_device_core::dra::checkpoint`);
//!   unprepare works from the checkpoint alone.
//!   `api.rs` holds the kubelet's messages;
//! - `resource_health.rs`: the kubelet's device health stream (`v1.DRAResourceHealth`), fed by the slice
//!   loop's verdicts (the device plugin's judge, which looks at a NIC in a pod in its netns);
//! - `status.rs`: the network data of NICs that ADD attached (`draRequest`), from the CNI's
//!   state records into their claims' `status.devices[]` (KEP-4817).
//!
//! The NIC's move into the pod stays the CNI's: ADD finds the NIC prepared for its pod in the
//! checkpoint (a NAD's `draRequest`). That is why the checkpoint's format lives in the core
//! crate, which both programs depend on: the CNI plugin reads it without linking the driver.
//!
//! `run` builds one current-thread Tokio runtime and one `Kube` client; the kubelet side is
//! spawned on it first (so unprepare works while the API server is away), then
//! `slices::run(kube, settings)` publishes until the process ends, with a clone of the client.

pub mod api;
pub mod nics;
pub mod plugin;
pub mod resource_health;
pub mod slices;
pub mod status;

use crate::error::{Result, invalid};
use crate::flags::absolute_path;
use crate::kube::{Endpoint, Kube, KubeOptions};
use futures::future::BoxFuture;
use rdma_host_device_core::node::Node;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The driver's name (defined beside the checkpoint, which the CNI plugin reads too).
pub use rdma_host_device_core::dra::DRIVER;
use rdma_host_device_core::dra::checkpoint;
/// The kubelet's root directory, under which `plugins_registry/` and `plugins/` are.
pub(crate) const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

/// `dra --node-name NODE [--kube-server URL --kube-ca FILE --kube-token FILE] ...`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// This node's name as the API server knows it (the DaemonSet passes spec.nodeName)
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node_name: String,
    #[command(flatten)]
    pub kube: KubeOptions,
    /// The attachments' state directory, where the checkpoint of prepared claims is kept too
    /// (DIR/dra/checkpoint.json) [default: the node configuration's stateDir]
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    pub state_dir: Option<PathBuf>,
    /// Publish the slice again at least this often, changed or not
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub resync_seconds: u64,
    /// The kubelet's root directory: the registration socket goes in DIR/plugins_registry, the
    /// DRA socket is DIR/plugins/rdma-host-device.io/dra.sock
    #[arg(long, value_name = "DIR", default_value = DEFAULT_KUBELET_DIR, value_parser = absolute_path)]
    pub kubelet_dir: PathBuf,
    /// Bring this CDI spec up to date (`cdi`'s) before answering a claim's CDI IDs
    #[arg(long, value_name = "FILE", value_parser = absolute_path)]
    pub cdi_spec: Option<PathBuf>,
    #[command(flatten)]
    pub dev: crate::cdi::DevDir,
}

/// A Node's name: a DNS subdomain (the slice's name and pool are made from it).
fn node_name(s: &str) -> std::result::Result<String, String> {
    if !rdma_host_device_core::names::is_dns_subdomain(s, 253 - DRIVER.len() - 1) {
        return Err(format!("{s:?} is not a node name (a DNS subdomain)"));
    }
    Ok(s.to_owned())
}

/// Claims from the API server, in the API's JSON.
impl plugin::ClaimSource for Kube {
    fn get_claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, std::result::Result<serde_json::Value, String>> {
        Box::pin(async move {
            self.get_claim_json(namespace, name)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// The node configuration, once its file is there. On a fresh node this DaemonSet's pod
/// starts beside the rdma-host-device DaemonSet's, whose install container writes node.json;
/// a driver that went on with the defaults would publish none of the node's NICs until
/// restarted. The real cluster's tests saw the driver start 0.1 s before the install
/// container.
fn node_once_installed() -> Result<Node> {
    let path = Node::path();
    let mut said = false;
    while let Err(e) = std::fs::symlink_metadata(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            break;
        }
        if !said {
            log::info!(
                "waiting for the node configuration {}: the install container of the \
                 rdma-host-device DaemonSet (conf/k8s/daemonset.yaml) writes it",
                path.display()
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(Node::load_from(&path)?)
}

/// Run the driver until killed; returns only if it cannot start (the node configuration, a
/// checkpoint this build cannot read, the API server's address or credentials, its refusal of
/// our first publication).
pub fn run(opts: &Options) -> Result<()> {
    rdma_host_device_core::logging::init(log::LevelFilter::Info, None, " dra".into());
    if opts.resync_seconds == 0 {
        return Err(invalid("--resync-seconds must be at least 1"));
    }
    let node = node_once_installed()?;
    let dra = node.dra()?.unwrap_or_default();
    let state_dir = opts.state_dir.clone().unwrap_or(node.state_dir.clone());
    let cdi = match &opts.cdi_spec {
        None => None,
        Some(path) => Some(plugin::CdiSpec {
            path: path.clone(),
            dev: opts.dev.clone(),
            hook: crate::cdi::Hook::of(&node, None)?,
        }),
    };
    let metadata = dra.device_metadata.as_ref().and_then(|m| m.place());
    let checkpoint = checkpoint::path(&state_dir);
    // A checkpoint this build cannot read stops the start: unprepare depends on it.
    let held = checkpoint::Checkpoint::read(&checkpoint).map_err(|e| invalid(e.to_string()))?;
    log::info!(
        "{} claim(s) prepared before this start, in {}",
        held.claims.len(),
        checkpoint.display()
    );
    let sockets = plugin::Sockets::under(&opts.kubelet_dir, DRIVER);
    let nics = nics::HostNics {
        node: node.clone(),
        dra: dra.clone(),
    };
    let settings = slices::Settings {
        node_name: opts.node_name.clone(),
        state_dir,
        node,
        dra,
        sys: PathBuf::from("/sys"),
        resync: Duration::from_secs(opts.resync_seconds),
    };
    let rt = crate::async_rt::current_thread()?;
    rt.block_on(async move {
        let kube = Kube::connect(&Endpoint::from_options(&opts.kube)).await?;
        let (health, health_rx) = tokio::sync::watch::channel(Vec::new());
        let driver = Arc::new(plugin::Driver {
            name: DRIVER.into(),
            claims: Arc::new(kube.clone()),
            nics: Arc::new(nics),
            checkpoint,
            serial: tokio::sync::Mutex::new(()),
            cdi,
            health: health_rx,
            metadata,
        });
        // The kubelet side first: unprepare must work even while the API server is away.
        tokio::spawn(plugin::supervise(driver, sockets));
        tokio::spawn(status::Reporter::new(kube.clone(), DRIVER, &settings.state_dir).run());
        slices::run(kube, settings, health).await
    })
}
