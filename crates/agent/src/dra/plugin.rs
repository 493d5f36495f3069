//! The kubelet side of the DRA driver: `NodePrepareResources` and `NodeUnprepareResources`
//! (DRA plugin API v1), the device health stream (`NodeWatchResources`, `resource_health.rs`)
//! on the same socket, and the registration that tells the kubelet where they are served.
//!
//! Prepare, per claim the kubelet names (references only: namespace, name, UID):
//! 1. already in the checkpoint: the same answer again (idempotent; the pods it is reserved
//!    for are read again, so a shared claim's later pod is known to the CNI);
//! 2. otherwise the claim is read from the API server ([`ClaimSource`]); its UID must be the
//!    one the kubelet named (a claim deleted and re-created under the same name is another
//!    claim) and it must be allocated;
//! 3. each allocation result whose driver is ours is a NIC of this node ([`Nics`]: by the
//!    device's name in our ResourceSlice, never by anything a pod can rename); a NIC another
//!    claim holds, or one attached to a pod by other means, refuses the claim;
//! 4. the answer per device: the CDI IDs of its RDMA device's uverbs char device
//!    (`rdma-host-device.io/rdma=uverbsN`; the spec `rdma-host-device-agent cdi` writes also
//!    gives `rdma_cm` and the memlock hook to any container that gets one of its devices);
//! 5. the claim is written to the checkpoint before the answer leaves.
//!
//! A claim that fails gets its error in the answer (the kubelet retries it); the others go on.
//! Calls are serialised (one at a time, as the Go helper does by default): two claims racing
//! for one NIC are decided in order. Unprepare removes claims from the checkpoint; a claim it
//! does not hold was unprepared already and succeeds.
//!
//! Results of other drivers are skipped: the kubelet hands a claim to every driver that has
//! devices in it, and each prepares its own.

use super::api::{self, path};
use super::checkpoint::{Checkpoint, PreparedClaim, PreparedDevice};
use super::nics::{NicRef, Nics};
use crate::kube::ResourceClaim;
use crate::kubelet_grpc::registration::{PluginInfo, PluginWatcher};
use crate::kubelet_grpc::{self, Dialled, socket, unary};
use futures::future::BoxFuture;
use rdma_host_device_core::dra::metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// How often the sockets are checked (removed by someone: served anew).
const WATCH_TICK: Duration = Duration::from_millis(500);
/// A claim read from the API server gives up after this long (the kubelet's own call to us
/// times out after 45 s by default).
const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);

/// Where claims are read from: the API server's client, or a stand-in in a test.
pub trait ClaimSource: Send + Sync {
    /// `GET /apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}`: the
    /// claim as the API's JSON, or why not.
    fn get_claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<serde_json::Value, String>>;
}

/// The annotation the scheduler puts on the claim it makes for a pod's DRA-backed extended
/// resources (`resource.kubernetes.io/extended-resource-claim`, KEP-5004).
pub const EXTENDED_RESOURCE_CLAIM: &str = "resource.kubernetes.io/extended-resource-claim";
/// The annotation a claim made from a pod's template carries: the pod's name for the claim,
/// which names the metadata file's directory in the container.
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// What prepare reads of a claim: the one model of a ResourceClaim (`crate::kube`'s), read
/// through these.
trait ClaimFacts {
    /// The UIDs of the pods (core group, resource `pods`) the claim is reserved for.
    fn pods(&self) -> Vec<String>;
    /// Whether the scheduler made it for a pod's extended resources (its annotation `"true"`).
    fn is_extended_resource(&self) -> bool;
    /// One of its annotations.
    fn annotation(&self, key: &str) -> Option<String>;
}

impl ClaimFacts for ResourceClaim {
    fn pods(&self) -> Vec<String> {
        crate::kube::reserved_pod_uids(self)
            .into_iter()
            .filter(|u| !u.is_empty())
            .collect()
    }

    fn is_extended_resource(&self) -> bool {
        self.annotation(EXTENDED_RESOURCE_CLAIM)
            .is_some_and(|v| v == "true")
    }

    fn annotation(&self, key: &str) -> Option<String> {
        self.metadata
            .other
            .get("annotations")
            .and_then(|a| a.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    }
}

/// The driver's prepare and unprepare, over its checkpoint.
pub struct Driver {
    /// Our driver name: allocation results of any other are not ours.
    pub name: String,
    pub claims: Arc<dyn ClaimSource>,
    pub nics: Arc<dyn Nics>,
    /// The checkpoint's path (`checkpoint::path(stateDir)`).
    pub checkpoint: PathBuf,
    /// Held by each prepare and unprepare call, whole.
    pub serial: tokio::sync::Mutex<()>,
    /// The CDI spec brought up to date before a claim's CDI IDs are answered (`--cdi-spec`):
    /// an RDMA device loaded since the spec was written gets its entry first.
    pub cdi: Option<CdiSpec>,
    /// Every published device's health, as the slice loop judged it last: what
    /// `NodeWatchResources` streams (`resource_health.rs`).
    pub health: tokio::sync::watch::Receiver<Vec<super::slices::DeviceHealth>>,
    /// Where the KEP-5304 device metadata goes (node configuration `dra.deviceMetadata`);
    /// `None`: written by no one.
    pub metadata: Option<metadata::Place>,
}

/// Where the CDI spec is and what it says (`cdi::refresh`'s arguments).
pub struct CdiSpec {
    pub path: PathBuf,
    /// The node's /dev, where the uverbs char devices are looked for.
    pub dev: crate::cdi::DevDir,
    pub hook: crate::cdi::Hook,
}

/// What one claim's preparation returns, or why it failed.
type Prepared = Result<Vec<api::Device>, String>;

impl Driver {
    pub async fn prepare(
        &self,
        req: api::NodePrepareResourcesRequest,
    ) -> Result<api::NodePrepareResourcesResponse, Status> {
        let _one = self.serial.lock().await;
        let mut cp =
            Checkpoint::read(&self.checkpoint).map_err(|e| Status::unavailable(e.to_string()))?;
        let mut out = api::NodePrepareResourcesResponse::default();
        for c in req.claims {
            let answer = match self.prepare_one(&mut cp, &c).await {
                Ok(devices) => api::NodePrepareResourceResponse {
                    devices,
                    error: String::new(),
                },
                Err(error) => {
                    log::warn!("prepare {}/{} ({}): {error}", c.namespace, c.name, c.uid);
                    api::NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error,
                    }
                }
            };
            out.claims.insert(c.uid.clone(), answer);
        }
        Ok(out)
    }

    async fn prepare_one(&self, cp: &mut Checkpoint, c: &api::Claim) -> Prepared {
        if c.uid.is_empty() || c.namespace.is_empty() || c.name.is_empty() {
            return Err("the claim reference needs a namespace, a name and a UID".into());
        }
        let read = self.read_claim(c).await;
        if let Some(known) = cp.claims.get(&c.uid) {
            let mut known = known.clone();
            // Who the claim is reserved for may have grown (a shared claim); the devices never
            // change for one UID. A claim prepared by a driver that did not record extended
            // resource claims learns it here.
            if let Ok(claim) = &read
                && (claim.pods() != known.pods
                    || claim.is_extended_resource() != known.extended_resource)
            {
                known.pods = claim.pods();
                known.extended_resource = claim.is_extended_resource();
                cp.claims.insert(c.uid.clone(), known.clone());
                self.save(cp)?;
            }
            // Its CDI specs gone (the node restarted: /var/run/cdi is a tmpfs), the kubelet
            // preparing it again: written again from the metadata files, or the answer's CDI
            // IDs would not resolve.
            if known.metadata
                && let Some(place) = &self.metadata
            {
                let claim = metadata::ClaimRef {
                    namespace: &known.namespace,
                    name: &known.name,
                    uid: &c.uid,
                };
                let requests: Vec<&str> =
                    known.devices.iter().map(|d| d.request.as_str()).collect();
                match metadata::ensure_specs(place, &claim, &requests) {
                    Ok(0) => {}
                    Ok(n) => log::info!(
                        "prepare {}/{} ({}): {n} device metadata CDI spec(s) written again",
                        c.namespace,
                        c.name,
                        c.uid
                    ),
                    Err(e) => return Err(format!("the claim's device metadata: {e}")),
                }
            }
            return Ok(answer(&known));
        }
        let claim = read?;
        if claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none()
        {
            return Err(format!("claim {}/{} is not allocated", c.namespace, c.name));
        }
        let mut devices = Vec::new();
        let mut nics = Vec::new();
        for r in crate::kube::allocated_devices(&claim)
            .iter()
            .filter(|r| r.driver == self.name)
        {
            let nic = self.nic_for(cp, c, r).await?;
            nics.push(nic.clone());
            devices.push(PreparedDevice {
                request: r.request.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                device_id: nic.device_id.clone(),
                cdi_device_ids: nic.cdi_device_ids(),
            });
        }
        // One NIC twice in one claim is an allocator's bug, not ours to hand out twice.
        let mut ids: Vec<&str> = devices.iter().map(|d| d.device_id.as_str()).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("the claim names NIC {} twice", w[0]));
        }
        if devices.is_empty() {
            // Another driver's claim: nothing of ours to prepare or to remember.
            return Ok(Vec::new());
        }
        if let Some(spec) = &self.cdi
            && devices.iter().any(|d| !d.cdi_device_ids.is_empty())
        {
            let sys = Path::new("/sys");
            crate::cdi::refresh(&spec.path, sys, &spec.dev, &spec.hook)
                .map_err(|e| format!("{}: the runtime could not resolve its CDI IDs", e))?;
        }
        let mut prepared = PreparedClaim {
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            pods: claim.pods(),
            devices,
            extended_resource: claim.is_extended_resource(),
            metadata: false,
        };
        if let Some(place) = &self.metadata {
            let pod_claim_name = claim.annotation(POD_CLAIM_NAME);
            write_metadata(place, &c.uid, &mut prepared, &nics, pod_claim_name)?;
        }
        cp.claims.insert(c.uid.clone(), prepared.clone());
        if let Err(e) = self.save(cp) {
            cp.claims.remove(&c.uid);
            if let Some(place) = &self.metadata {
                remove_metadata(place, &c.uid, &prepared);
            }
            return Err(e);
        }
        log::info!(
            "prepared {}/{} ({}) for pod(s) {}: {}",
            c.namespace,
            c.name,
            c.uid,
            prepared.pods.join(","),
            prepared
                .devices
                .iter()
                .map(|d| format!(
                    "{} = {} [{}]",
                    d.device,
                    d.device_id,
                    d.cdi_device_ids.join(" ")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(answer(&prepared))
    }

    /// The claim from the API server, checked against the kubelet's reference.
    async fn read_claim(&self, c: &api::Claim) -> Result<ResourceClaim, String> {
        let v = tokio::time::timeout(CLAIM_TIMEOUT, self.claims.get_claim(&c.namespace, &c.name))
            .await
            .map_err(|_| {
                format!(
                    "reading claim {}/{} took over {} s",
                    c.namespace,
                    c.name,
                    CLAIM_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("reading claim {}/{}: {e}", c.namespace, c.name))?;
        let claim: ResourceClaim = serde_json::from_value(v).map_err(|e| {
            format!(
                "claim {}/{} is not a ResourceClaim: {e}",
                c.namespace, c.name
            )
        })?;
        let uid = claim.metadata.uid.as_deref().unwrap_or("");
        if uid != c.uid {
            return Err(format!(
                "claim {}/{} has UID {uid}, not {} (deleted and created again?)",
                c.namespace, c.name, c.uid
            ));
        }
        Ok(claim)
    }

    /// The NIC allocation result `r` names, if no other claim holds it.
    async fn nic_for(
        &self,
        cp: &Checkpoint,
        c: &api::Claim,
        r: &crate::kube::AllocatedDevice,
    ) -> Result<NicRef, String> {
        let nic = self.nics.find(&r.device).await?.ok_or_else(|| {
            format!(
                "device {} (pool {}) is not a NIC of this node",
                r.device, r.pool
            )
        })?;
        if let Some((uid, other)) = cp.holder(&nic.device_id, &c.uid) {
            return Err(format!(
                "device {} (NIC {}) is already prepared for claim {}/{} ({uid})",
                r.device, nic.device_id, other.namespace, other.name
            ));
        }
        if let Some(who) = &nic.attached_to {
            return Err(format!(
                "device {} (NIC {}) is attached to {who} without a claim",
                r.device, nic.device_id
            ));
        }
        Ok(nic)
    }

    fn save(&self, cp: &Checkpoint) -> Result<(), String> {
        cp.write(&self.checkpoint).map_err(|e| {
            format!(
                "cannot write the DRA checkpoint {}: {e}",
                self.checkpoint.display()
            )
        })
    }

    pub async fn unprepare(
        &self,
        req: api::NodeUnprepareResourcesRequest,
    ) -> Result<api::NodeUnprepareResourcesResponse, Status> {
        let _one = self.serial.lock().await;
        let mut cp =
            Checkpoint::read(&self.checkpoint).map_err(|e| Status::unavailable(e.to_string()))?;
        let mut gone = Vec::new();
        for c in &req.claims {
            if let Some(p) = cp.claims.remove(&c.uid) {
                gone.push((c, p));
            }
        }
        // The metadata files first: a claim whose files stay is kept, and the kubelet asks again.
        let mut kept = std::collections::BTreeMap::new();
        if let Some(place) = &self.metadata {
            gone.retain(|(c, p)| {
                if !p.metadata {
                    return true;
                }
                let claim = metadata::ClaimRef {
                    namespace: &p.namespace,
                    name: &p.name,
                    uid: &c.uid,
                };
                let requests: Vec<&str> = p.devices.iter().map(|d| d.request.as_str()).collect();
                match metadata::remove(place, &claim, &requests) {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn!("unprepare {}/{} ({}): {e}", p.namespace, p.name, c.uid);
                        kept.insert(c.uid.clone(), format!("removing its device metadata: {e}"));
                        cp.claims.insert(c.uid.clone(), p.clone());
                        false
                    }
                }
            });
        }
        let error = match gone.is_empty() && kept.is_empty() {
            true => String::new(),
            false => self.save(&cp).err().unwrap_or_default(),
        };
        for (c, p) in &gone {
            if error.is_empty() {
                log::info!(
                    "unprepared {}/{} ({}): {}",
                    p.namespace,
                    p.name,
                    c.uid,
                    p.devices
                        .iter()
                        .map(|d| d.device_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        let claims = req
            .claims
            .iter()
            .map(|c| {
                let failed = gone.iter().any(|(g, _)| g.uid == c.uid);
                let error = match kept.get(&c.uid) {
                    Some(e) => e.clone(),
                    None if failed => error.clone(),
                    None => String::new(),
                };
                (c.uid.clone(), api::NodeUnprepareResourceResponse { error })
            })
            .collect();
        Ok(api::NodeUnprepareResourcesResponse { claims })
    }
}

/// The kubelet's answer for a prepared claim: one device per result, named by its request.
fn answer(p: &PreparedClaim) -> Vec<api::Device> {
    p.devices
        .iter()
        .map(|d| api::Device {
            request_names: vec![d.request.clone()],
            pool_name: d.pool.clone(),
            device_name: d.device.clone(),
            cdi_device_ids: d.cdi_device_ids.clone(),
        })
        .collect()
}

/// Prepare's part of the device metadata (`rdma_host_device_core::dra::metadata`): per
/// request, the metadata file with what is known of each device before the pod exists (its
/// RDMA and uverbs devices, PCI address, NUMA node), its CDI spec and our env spec; both CDI
/// IDs appended to the request's first device, which is what the kubelet hands the container.
/// ADD adds the interface name, the addresses and the GID indices. A failure removes what was
/// written and fails the claim (the kubelet retries).
fn write_metadata(
    place: &metadata::Place,
    uid: &str,
    prepared: &mut PreparedClaim,
    nics: &[NicRef],
    pod_claim_name: Option<String>,
) -> Result<(), String> {
    let claim = metadata::ClaimRef {
        namespace: &prepared.namespace,
        name: &prepared.name,
        uid,
    };
    let mut requests: Vec<&str> = Vec::new();
    for d in &prepared.devices {
        let r = metadata::base_request(&d.request);
        if !requests.contains(&r) {
            requests.push(r);
        }
    }
    let mut ids = Vec::new();
    let mut written = Vec::new();
    let mut last = None;
    for request in &requests {
        let files = place
            .files(&claim, request)
            .map_err(|e| format!("device metadata: {e}"))?;
        let devices = prepared
            .devices
            .iter()
            .zip(nics)
            .filter(|(d, _)| metadata::base_request(&d.request) == *request)
            .map(|(d, nic)| metadata_device(d, nic))
            .collect();
        let dm = metadata::DeviceMetadata::new(&claim, pod_claim_name.clone(), request, devices);
        written.push(*request);
        match metadata::prepare(&files, &dm, pod_claim_name.as_deref()) {
            Ok(i) => ids.push((request.to_string(), i)),
            Err(e) => {
                let _ = metadata::remove(place, &claim, &written);
                return Err(format!(
                    "writing the device metadata of request {request}: {e}"
                ));
            }
        }
        last = Some(files);
    }
    // The claim's env, from every request's file (`NCCL_IB_HCA` known now).
    if let Some(files) = &last
        && let Err(e) = metadata::write_env(files)
    {
        let _ = metadata::remove(place, &claim, &written);
        return Err(format!("writing the claim's CDI env spec: {e}"));
    }
    for (request, i) in ids {
        if let Some(first) = prepared
            .devices
            .iter_mut()
            .find(|d| metadata::base_request(&d.request) == request)
        {
            first.cdi_device_ids.extend(i);
        }
    }
    prepared.metadata = true;
    Ok(())
}

/// One device's entry in the metadata file, as prepare knows it.
fn metadata_device(d: &PreparedDevice, nic: &NicRef) -> metadata::Device {
    use metadata::{Attribute, attr};
    let mut attributes = std::collections::BTreeMap::new();
    if let Some(r) = &nic.rdma_device {
        attributes.insert(attr::RDMA_DEVICE.to_owned(), Attribute::string(r.clone()));
    }
    if let Some(u) = &nic.uverbs {
        attributes.insert(attr::UVERBS.to_owned(), Attribute::string(u.clone()));
    }
    if let Some(p) = &nic.pci {
        attributes.insert(attr::PCI_BUS_ID.to_owned(), Attribute::string(p.clone()));
    }
    if let Some(n) = nic.numa {
        attributes.insert(attr::NUMA_NODE.to_owned(), Attribute::int(n));
    }
    metadata::Device {
        driver: rdma_host_device_core::dra::DRIVER.to_owned(),
        pool: d.pool.clone(),
        name: d.device.clone(),
        attributes,
        network_data: None,
    }
}

/// Undo [`write_metadata`], logging what could not be removed.
fn remove_metadata(place: &metadata::Place, uid: &str, p: &PreparedClaim) {
    let claim = metadata::ClaimRef {
        namespace: &p.namespace,
        name: &p.name,
        uid,
    };
    let requests: Vec<&str> = p.devices.iter().map(|d| d.request.as_str()).collect();
    if let Err(e) = metadata::remove(place, &claim, &requests) {
        log::warn!(
            "removing the device metadata of {}/{} ({uid}): {e}",
            p.namespace,
            p.name
        );
    }
}

/// Where the two sockets are and what the registration says.
#[derive(Debug, Clone)]
pub struct Sockets {
    /// `<kubelet>/plugins_registry/<driver>-reg.sock`, which the kubelet's plugin watcher finds.
    pub registration: PathBuf,
    /// `<kubelet>/plugins/<driver>/dra.sock`, the DRA service.
    pub dra: PathBuf,
    /// The DRA socket's path as the kubelet sees it (the same on a node; the registration
    /// tells the kubelet this one).
    pub endpoint: String,
}

impl Sockets {
    pub fn under(kubelet_dir: &Path, driver: &str) -> Sockets {
        let dra = kubelet_dir.join("plugins").join(driver).join("dra.sock");
        Sockets {
            registration: kubelet_dir
                .join("plugins_registry")
                .join(format!("{driver}-reg.sock")),
            endpoint: dra.display().to_string(),
            dra,
        }
    }
}

/// The `DRAPlugin` v1 service on the DRA socket.
#[derive(Clone)]
pub struct DraService(pub Arc<Driver>);

impl kubelet_grpc::Routed for DraService {
    fn route(&self, req: kubelet_grpc::Call) -> kubelet_grpc::Answer {
        let d = self.0.clone();
        match req.uri().path() {
            path::PREPARE => Box::pin(async move {
                Ok(unary(req, move |r| {
                    let d = d.clone();
                    Box::pin(async move { d.prepare(r).await }) as BoxFuture<'static, _>
                })
                .await)
            }),
            path::UNPREPARE => Box::pin(async move {
                Ok(unary(req, move |r| {
                    let d = d.clone();
                    Box::pin(async move { d.unprepare(r).await }) as BoxFuture<'static, _>
                })
                .await)
            }),
            path::WATCH_HEALTH | path::WATCH_HEALTH_V1ALPHA1 => Box::pin(async move {
                let svc =
                    tower::service_fn(move |_: tonic::Request<api::NodeWatchResourcesRequest>| {
                        let s = super::resource_health::watch(
                            d.health.clone(),
                            super::resource_health::RESEND,
                        );
                        async move { Ok::<_, Status>(tonic::Response::new(s)) }
                    });
                Ok(tonic::server::Grpc::new(tonic_prost::ProstCodec::<
                    api::NodeWatchResourcesResponse,
                    api::NodeWatchResourcesRequest,
                >::default())
                .server_streaming(svc, req)
                .await)
            }),
            other => kubelet_grpc::unimplemented(other),
        }
    }
}

/// Serve the DRA service, then the registration (the kubelet calls the DRA socket as soon as it
/// sees the registration one), forever; a socket someone removed is served anew
/// (`kubelet_grpc::socket`). The plugin watcher finds the registration socket by itself.
pub async fn supervise(driver: Arc<Driver>, sockets: Sockets) {
    let registration = PluginWatcher {
        info: PluginInfo {
            r#type: api::PLUGIN_TYPE.into(),
            name: driver.name.clone(),
            endpoint: sockets.endpoint.clone(),
            supported_versions: std::iter::once(api::SERVICE_V1)
                .chain(api::HEALTH_SERVICES)
                .map(Into::into)
                .collect(),
        },
    };
    let plugin = socket::Plugin {
        name: driver.name.clone(),
        sockets: vec![
            socket::Endpoint {
                path: sockets.dra,
                service: kubelet_grpc::service(DraService(driver)),
                dialled: Dialled::Localhost,
            },
            socket::Endpoint {
                path: sockets.registration,
                service: kubelet_grpc::service(registration),
                dialled: Dialled::ByPath,
            },
        ],
        tick: WATCH_TICK,
    };
    socket::supervise(plugin, || socket::Found).await
}

#[cfg(test)]
mod tests {
    //! The logic of prepare and unprepare with claims and NICs given in memory; the gRPC wire,
    //! registration and restarts are crates/agent/tests/node_agent/dra.rs's, against a kubelet stand-in.
    use super::*;
    use serde_json::{Value, json};
    use std::sync::Mutex;

    struct Claims(Mutex<Vec<Value>>);

    impl ClaimSource for Claims {
        fn get_claim<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Value, String>> {
            let found = self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|c| c["metadata"]["namespace"] == namespace && c["metadata"]["name"] == name)
                .cloned();
            Box::pin(async move { found.ok_or_else(|| format!("{namespace}/{name} not found")) })
        }
    }

    /// Two NICs: `0000-3b-00-0` with uverbs1, `0000-5e-00-0` without RDMA.
    struct TwoNics;

    impl Nics for TwoNics {
        fn find<'a>(&'a self, device: &'a str) -> BoxFuture<'a, Result<Option<NicRef>, String>> {
            let n = match device {
                "0000-3b-00-0" => Some(NicRef {
                    device_id: "0000:3b:00.0".into(),
                    uverbs: Some("uverbs1".into()),
                    rdma_device: Some("mlx5_1".into()),
                    pci: Some("0000:3b:00.0".into()),
                    numa: Some(0),
                    attached_to: None,
                }),
                "0000-5e-00-0" => Some(NicRef {
                    device_id: "0000:5e:00.0".into(),
                    attached_to: Some("c9/net1".into()),
                    ..NicRef::default()
                }),
                _ => None,
            };
            Box::pin(async move { Ok(n) })
        }
    }

    fn claim(name: &str, uid: &str, results: Value, pods: &[&str]) -> Value {
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "team", "name": name, "uid": uid},
            "status": {
                "allocation": {"devices": {"results": results}},
                "reservedFor": pods.iter().map(|p| json!({"resource": "pods", "name": "p", "uid": p}))
                    .chain([json!({"apiGroup": "example.com", "resource": "pods", "name": "x", "uid": "not-a-pod"})])
                    .collect::<Vec<_>>(),
            }
        })
    }

    fn ours(device: &str) -> Value {
        json!({"request": "nic", "driver": "rdma-host-device.io", "pool": "node-a", "device": device})
    }

    /// A driver whose checkpoint lives in a directory of its own, removed with it.
    struct TestDriver {
        driver: Driver,
        dir: std::path::PathBuf,
    }

    impl std::ops::Deref for TestDriver {
        type Target = Driver;
        fn deref(&self) -> &Driver {
            &self.driver
        }
    }

    impl Drop for TestDriver {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn driver(tag: &str, claims: Vec<Value>) -> TestDriver {
        driver_with(tag, Arc::new(Claims(Mutex::new(claims))))
    }

    fn driver_with(tag: &str, claims: Arc<Claims>) -> TestDriver {
        let dir = std::env::temp_dir().join(format!("rhd-dra-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TestDriver {
            driver: Driver {
                name: "rdma-host-device.io".into(),
                claims,
                nics: Arc::new(TwoNics),
                checkpoint: super::super::checkpoint::path(&dir),
                serial: tokio::sync::Mutex::new(()),
                cdi: None,
                health: tokio::sync::watch::channel(Vec::new()).1,
                metadata: None,
            },
            dir,
        }
    }

    fn refs(c: &[(&str, &str)]) -> Vec<api::Claim> {
        c.iter()
            .map(|(name, uid)| api::Claim {
                namespace: "team".into(),
                name: (*name).into(),
                uid: (*uid).into(),
            })
            .collect()
    }

    fn prepare(d: &Driver, c: &[(&str, &str)]) -> api::NodePrepareResourcesResponse {
        let rt = crate::async_rt::current_thread().unwrap();
        rt.block_on(d.prepare(api::NodePrepareResourcesRequest { claims: refs(c) }))
            .unwrap()
    }

    fn unprepare(d: &Driver, c: &[(&str, &str)]) -> api::NodeUnprepareResourcesResponse {
        let rt = crate::async_rt::current_thread().unwrap();
        rt.block_on(d.unprepare(api::NodeUnprepareResourcesRequest { claims: refs(c) }))
            .unwrap()
    }

    #[test]
    fn prepare_answers_the_uverbs_cdi_id_records_the_pods_and_is_idempotent() {
        let gpu = json!({"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu0"});
        let d = driver(
            "prep",
            vec![claim(
                "a",
                "uid-a",
                json!([gpu, ours("0000-3b-00-0")]),
                &["pod-1"],
            )],
        );
        let r = prepare(&d, &[("a", "uid-a")]);
        let a = &r.claims["uid-a"];
        assert_eq!(a.error, "");
        assert_eq!(
            a.devices,
            [api::Device {
                request_names: vec!["nic".into()],
                pool_name: "node-a".into(),
                device_name: "0000-3b-00-0".into(),
                cdi_device_ids: vec!["rdma-host-device.io/rdma=uverbs1".into()],
            }],
            "the GPU driver's device is not ours"
        );
        let cp = Checkpoint::read(&d.checkpoint).unwrap();
        assert_eq!(cp.claims["uid-a"].pods, ["pod-1"], "only core pods");
        assert_eq!(cp.claims["uid-a"].devices[0].device_id, "0000:3b:00.0");
        let again = prepare(&d, &[("a", "uid-a")]);
        assert_eq!(again.claims["uid-a"], *a);
        assert_eq!(Checkpoint::read(&d.checkpoint).unwrap(), cp);
    }

    #[test]
    fn prepare_writes_the_device_metadata_and_unprepare_removes_it() {
        let mut c = claim(
            "pod-rail-abc",
            "uid-m",
            json!([ours("0000-3b-00-0")]),
            &["pod-1"],
        );
        c["metadata"]["annotations"] = json!({"resource.kubernetes.io/pod-claim-name": "rail"});
        let mut d = driver("meta", vec![c]);
        let place = metadata::Place {
            plugin_data_dir: d.dir.join("plugins/rdma-host-device.io"),
            cdi_dir: d.dir.join("cdi"),
        };
        d.driver.metadata = Some(place.clone());
        let r = prepare(&d, &[("pod-rail-abc", "uid-m")]);
        let a = &r.claims["uid-m"];
        assert_eq!(a.error, "");
        assert_eq!(
            a.devices[0].cdi_device_ids,
            [
                "rdma-host-device.io/rdma=uverbs1",
                "rdma-host-device.io/metadata=uid-m_nic",
                "rdma-host-device.io/claim=uid-m"
            ]
        );
        let cp = Checkpoint::read(&d.checkpoint).unwrap();
        assert!(cp.claims["uid-m"].metadata);
        let claim_ref = metadata::ClaimRef {
            namespace: "team",
            name: "pod-rail-abc",
            uid: "uid-m",
        };
        let files = place.files(&claim_ref, "nic").unwrap();
        let dm = metadata::DeviceMetadata::decode(&std::fs::read(&files.file).unwrap()).unwrap();
        assert_eq!(dm.pod_claim_name.as_deref(), Some("rail"));
        assert_eq!(dm.metadata.generation, 1);
        let dev = &dm.requests[0].devices[0];
        assert_eq!(
            (dev.pool.as_str(), dev.name.as_str()),
            ("node-a", "0000-3b-00-0")
        );
        let s = |k: &str| dev.attributes[k].string.clone().unwrap_or_default();
        assert_eq!(s(metadata::attr::RDMA_DEVICE), "mlx5_1");
        assert_eq!(s(metadata::attr::UVERBS), "uverbs1");
        assert_eq!(s(metadata::attr::PCI_BUS_ID), "0000:3b:00.0");
        assert_eq!(dev.attributes[metadata::attr::NUMA_NODE].int, Some(0));
        let spec: Value =
            serde_json::from_slice(&std::fs::read(&files.metadata_spec).unwrap()).unwrap();
        assert_eq!(
            spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rail/nic/rdma-host-device.io-metadata.json"
        );
        // Prepared again: the same answer, nothing rewritten (ADD may have completed it); after
        // a node restart emptied the CDI directory, the specs are written again.
        assert_eq!(
            prepare(&d, &[("pod-rail-abc", "uid-m")]).claims["uid-m"],
            *a
        );
        std::fs::remove_file(&files.metadata_spec).unwrap();
        std::fs::remove_file(&files.env_spec).unwrap();
        assert_eq!(
            prepare(&d, &[("pod-rail-abc", "uid-m")]).claims["uid-m"],
            *a
        );
        assert!(files.metadata_spec.exists() && files.env_spec.exists());
        let u = unprepare(&d, &[("pod-rail-abc", "uid-m")]);
        assert_eq!(u.claims["uid-m"].error, "");
        assert!(
            !files.claim_dir.exists() && !files.metadata_spec.exists() && !files.env_spec.exists()
        );
    }

    #[test]
    fn a_nic_held_by_one_claim_refuses_another_and_only_that_claim() {
        let d = driver(
            "held",
            vec![
                claim("a", "uid-a", json!([ours("0000-3b-00-0")]), &["pod-1"]),
                claim("b", "uid-b", json!([ours("0000-3b-00-0")]), &["pod-2"]),
                claim("c", "uid-c", json!([ours("0000-5e-00-0")]), &["pod-3"]),
                claim("gone", "uid-new", json!([]), &[]),
                claim("bare", "uid-bare", json!([]), &[]),
            ],
        );
        assert_eq!(prepare(&d, &[("a", "uid-a")]).claims["uid-a"].error, "");
        let r = prepare(
            &d,
            &[
                ("b", "uid-b"),
                ("c", "uid-c"),
                ("gone", "uid-old"),
                ("nowhere", "uid-x"),
            ],
        );
        let err = |uid: &str| r.claims[uid].error.clone();
        assert!(
            err("uid-b").contains("already prepared for claim team/a (uid-a)"),
            "{}",
            err("uid-b")
        );
        assert!(
            err("uid-c").contains("attached to c9/net1"),
            "{}",
            err("uid-c")
        );
        assert!(
            err("uid-old").contains("has UID uid-new, not uid-old"),
            "{}",
            err("uid-old")
        );
        assert!(err("uid-x").contains("not found"), "{}", err("uid-x"));
        assert!(r.claims.values().all(|c| c.devices.is_empty()));
        let cp = Checkpoint::read(&d.checkpoint).unwrap();
        assert_eq!(cp.claims.keys().collect::<Vec<_>>(), ["uid-a"]);
        // A claim with no device of ours prepares to nothing, and is no one's holder.
        let bare = prepare(&d, &[("bare", "uid-bare")]);
        assert_eq!(bare.claims["uid-bare"].error, "");
        assert!(bare.claims["uid-bare"].devices.is_empty());
    }

    #[test]
    fn a_shared_claim_prepared_again_learns_its_new_pod() {
        let claims = Arc::new(Claims(Mutex::new(vec![claim(
            "s",
            "uid-s",
            json!([ours("0000-3b-00-0")]),
            &["pod-1"],
        )])));
        let d = driver_with("shared", claims.clone());
        prepare(&d, &[("s", "uid-s")]);
        // The scheduler reserves it for a second pod too; the kubelet prepares it for that pod.
        if let Some(c) = claims.0.lock().unwrap().first_mut() {
            c["status"]["reservedFor"] = json!([
                {"resource": "pods", "name": "p1", "uid": "pod-1"},
                {"resource": "pods", "name": "p2", "uid": "pod-2"}
            ]);
        }
        let r = prepare(&d, &[("s", "uid-s")]);
        assert_eq!(r.claims["uid-s"].error, "");
        let cp = Checkpoint::read(&d.checkpoint).unwrap();
        assert_eq!(cp.claims["uid-s"].pods, ["pod-1", "pod-2"]);
        assert_eq!(cp.for_pod("pod-2", "nic").len(), 1);
    }

    #[test]
    fn an_extended_resource_claim_is_recorded_as_one_and_an_older_record_learns_it() {
        let mut ext = claim(
            "pod-x-extended-resources-abcde",
            "uid-x",
            json!([ours("0000-3b-00-0")]),
            &["pod-x"],
        );
        ext["metadata"]["annotations"] = json!({EXTENDED_RESOURCE_CLAIM: "true"});
        ext["status"]["allocation"]["devices"]["results"][0]["request"] =
            json!("container-0-request-0");
        let d = driver("ext", vec![ext]);
        let r = prepare(&d, &[("pod-x-extended-resources-abcde", "uid-x")]);
        assert_eq!(r.claims["uid-x"].error, "");
        let cp = Checkpoint::read(&d.checkpoint).unwrap();
        assert!(cp.claims["uid-x"].extended_resource);
        assert_eq!(cp.extended_for_pod("pod-x").len(), 1);
        // The record an older driver left (no flag): the kubelet's next prepare sets it.
        let mut old = cp.clone();
        old.claims.get_mut("uid-x").unwrap().extended_resource = false;
        old.write(&d.checkpoint).unwrap();
        prepare(&d, &[("pod-x-extended-resources-abcde", "uid-x")]);
        assert_eq!(Checkpoint::read(&d.checkpoint).unwrap(), cp);
        // A claim without the annotation (or with another value) is an ordinary one.
        let plain = driver(
            "plain",
            vec![claim(
                "a",
                "uid-a",
                json!([ours("0000-3b-00-0")]),
                &["pod-1"],
            )],
        );
        prepare(&plain, &[("a", "uid-a")]);
        let cp = Checkpoint::read(&plain.checkpoint).unwrap();
        assert!(!cp.claims["uid-a"].extended_resource);
    }

    #[test]
    fn unallocated_or_unknown_nics_are_per_claim_errors() {
        let mut unallocated = claim("u", "uid-u", json!([]), &[]);
        unallocated["status"] = json!({});
        let d = driver(
            "unalloc",
            vec![
                unallocated,
                claim("n", "uid-n", json!([ours("ffff-00-00-0")]), &["p"]),
            ],
        );
        let r = prepare(&d, &[("u", "uid-u"), ("n", "uid-n")]);
        assert!(r.claims["uid-u"].error.contains("not allocated"));
        assert!(
            r.claims["uid-n"]
                .error
                .contains("is not a NIC of this node")
        );
    }

    #[test]
    fn unprepare_frees_the_nic_and_succeeds_for_a_claim_already_gone() {
        let d = driver(
            "unprep",
            vec![
                claim("a", "uid-a", json!([ours("0000-3b-00-0")]), &["pod-1"]),
                claim("b", "uid-b", json!([ours("0000-3b-00-0")]), &["pod-2"]),
            ],
        );
        prepare(&d, &[("a", "uid-a")]);
        let u = unprepare(&d, &[("a", "uid-a"), ("never", "uid-never")]);
        assert_eq!(u.claims.len(), 2);
        assert!(u.claims.values().all(|c| c.error.is_empty()));
        assert!(Checkpoint::read(&d.checkpoint).unwrap().claims.is_empty());
        assert_eq!(unprepare(&d, &[("a", "uid-a")]).claims["uid-a"].error, "");
        // Free again: the other claim gets it.
        assert_eq!(prepare(&d, &[("b", "uid-b")]).claims["uid-b"].error, "");
    }
}
