//! The node agent's Kubernetes API client, for the DRA driver (`dra/`): ResourceSlices
//! (`resource.k8s.io/v1`, cluster-scoped) and ResourceClaims (namespaced). Agent-only: the CNI
//! binary (src/main.rs) never reaches this module, so none of it (nor hyper's client, rustls,
//! ring) is linked into it.
//!
//! Our own client, small on purpose (the kube + k8s-openapi stack it replaced was most of the
//! agent's build): HTTPS over hyper and rustls on `ring` (`http.rs`), serde types for exactly
//! the fields the driver reads and writes (`types.rs`), a watch read line by line as it comes
//! (`watch.rs`). Every request is bounded in time and size; nothing the server sends is
//! trusted to be well formed.
//!
//! # The API
//!
//! ```text
//! Kube::connect(&Endpoint) -> Result<Kube, ApiError>      (async; inside a Tokio runtime)
//!   Endpoint::InCluster                 KUBERNETES_SERVICE_HOST/PORT, the service account's
//!                                       token (re-read every minute: it rotates) and CA
//!   Endpoint::Explicit { server, ca, token }   a URL, a CA file (PEM), a token file (re-read too)
//!   Endpoint::from_options(&KubeOptions)       --kube-server/--kube-ca/--kube-token, else in-cluster
//!
//! kube.get_claim(namespace, name) -> Result<ResourceClaim, ApiError>
//!     claim.status.allocation.devices.results[]: {request, driver, pool, device}
//!     claim.status.reserved_for[]: {resource, name, uid}: the pods it is reserved for
//!     (`allocated_devices(&claim)` and `reserved_pod_uids(&claim)` read both)
//! kube.update_claim_status(&claim) -> Result<ResourceClaim>   PUT .../status, with the claim's
//!     resourceVersion: 409 (`ApiError::is_conflict`) when it changed meanwhile
//! kube.get_claim_json(namespace, name) / replace_claim_status_json(&claim)   the same as the
//!     API's JSON, every field kept (what `dra::status` edits `status.devices[]` in)
//!
//! kube.list_slices(&SliceFilter) -> Result<(Vec<ResourceSlice>, resourceVersion)>
//! kube.watch_slices(&SliceFilter, resourceVersion, timeoutSeconds) -> Result<stream of
//!     Result<SliceEvent>>: ends when the server ends it, after an error (an ERROR event, 410
//!     Expired: list again), or after timeoutSeconds + 30 s without a byte
//! kube.create_slice(&slice) / update_slice(&slice) -> Result<ResourceSlice>
//! kube.delete_slice(name, uid) -> Result<()>   (already gone is fine; uid as a precondition)
//!   SliceFilter { driver, node }: fieldSelector spec.driver=D,spec.nodeName=N
//! ```
//!
//! Every failure is an [`ApiError`]: what was asked (verb, object), and the API server's HTTP
//! code, reason and message, or why no answer came (TLS, connection, bad config). It converts
//! into the crate's `Error` with a message an operator can act on (a 401 names the token file,
//! a 403 names the RBAC rule that is missing).

mod http;
mod types;
mod watch;

use futures::{Stream, StreamExt};
use http::{Failure, Http, Target};
use hyper::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use types::{
    AllocationResult, Device, DeviceAllocationResult, DeviceRequestAllocationResult, DeviceTaint,
    ObjectMeta, ResourceClaim, ResourceClaimConsumerReference, ResourceClaimStatus, ResourcePool,
    ResourceSlice, ResourceSliceSpec,
};

/// Where the API server is and who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// In a pod: `KUBERNETES_SERVICE_HOST`/`_PORT`, and the service account's token and CA in
    /// /var/run/secrets/kubernetes.io/serviceaccount/.
    InCluster,
    /// Anywhere (tests, a node outside the cluster's network): the server's URL, the CA that
    /// signed its certificate (PEM), and a file holding the bearer token.
    Explicit {
        server: String,
        ca: PathBuf,
        token: PathBuf,
    },
}

/// The agent's options naming the API server; all three or none (then in-cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct KubeOptions {
    /// The API server's URL (https://HOST:PORT) [default: in-cluster]
    #[arg(long, value_name = "URL", requires_all = ["kube_ca", "kube_token"])]
    pub kube_server: Option<String>,
    /// The CA certificate (PEM) the API server's certificate is checked against
    #[arg(long, value_name = "FILE", requires = "kube_server")]
    pub kube_ca: Option<PathBuf>,
    /// A file holding the bearer token (re-read every minute)
    #[arg(long, value_name = "FILE", requires = "kube_server")]
    pub kube_token: Option<PathBuf>,
}

impl Endpoint {
    pub fn from_options(o: &KubeOptions) -> Endpoint {
        match (&o.kube_server, &o.kube_ca, &o.kube_token) {
            (Some(server), Some(ca), Some(token)) => Endpoint::Explicit {
                server: server.clone(),
                ca: ca.clone(),
                token: token.clone(),
            },
            _ => Endpoint::InCluster,
        }
    }

    fn describe(&self) -> String {
        match self {
            Endpoint::InCluster => "the in-cluster API server".into(),
            Endpoint::Explicit { server, .. } => server.clone(),
        }
    }

    fn token_file(&self) -> String {
        match self {
            Endpoint::InCluster => format!("{SERVICE_ACCOUNT}/token"),
            Endpoint::Explicit { token, .. } => token.display().to_string(),
        }
    }
}

/// A request that failed: what was asked, and the API server's answer or why there was none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// `create resourceslices/node1-rdma-host-device.io`, `connect to https://...`.
    pub what: String,
    /// The HTTP code and the Status reason (`NotFound`, `Conflict`, ...), if the server answered.
    pub code: Option<u16>,
    pub reason: String,
    pub message: String,
    /// Where we talk to and with which token, for the operator's hint.
    server: String,
    token_file: String,
}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        self.code == Some(404)
    }
    /// 409 on update (stale resourceVersion) or create (the name exists).
    pub fn is_conflict(&self) -> bool {
        self.code == Some(409)
    }
    pub fn is_already_exists(&self) -> bool {
        self.code == Some(409) && self.reason == "AlreadyExists"
    }

    fn hint(&self) -> String {
        match self.code {
            Some(401) => format!(
                "; the API server does not accept the token in {} (expired, or from another cluster)",
                self.token_file
            ),
            Some(403) => {
                "; the agent's ServiceAccount lacks this permission (deploy/dra-rbac.yaml)".into()
            }
            Some(404) if self.reason != "NotFound" => {
                "; is resource.k8s.io/v1 served (Kubernetes 1.34 or later)?".into()
            }
            _ => String::new(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(c) => write!(
                f,
                "{} at {}: {c} {}: {}{}",
                self.what,
                self.server,
                self.reason,
                self.message,
                self.hint()
            ),
            None => write!(f, "{} at {}: {}", self.what, self.server, self.message),
        }
    }
}

impl std::error::Error for ApiError {}

/// Which slices are ours: those of our driver on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceFilter {
    pub driver: String,
    pub node: String,
}

impl SliceFilter {
    fn field_selector(&self) -> String {
        format!("spec.driver={},spec.nodeName={}", self.driver, self.node)
    }
}

/// One event of a slice watch.
#[derive(Debug, Clone)]
pub enum SliceEvent {
    Added(ResourceSlice),
    Modified(ResourceSlice),
    Deleted(ResourceSlice),
    /// The server says where the watch is (no object changed).
    Bookmark(String),
}

/// Where a service account's files are in a pod.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// A watch without a byte for this long past its `timeoutSeconds` is a dead connection.
const WATCH_GRACE: Duration = Duration::from_secs(30);

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

/// A connected client (cheap to clone: one connection pool).
#[derive(Clone)]
pub struct Kube {
    http: Arc<Http>,
    server: String,
    token_file: String,
}

impl fmt::Debug for Kube {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kube")
            .field("server", &self.server)
            .finish()
    }
}

impl Kube {
    /// A client for `endpoint`; reads the CA and checks the token file is there. Call it inside
    /// a Tokio runtime. Nothing is sent yet: a wrong token shows at the first request.
    pub async fn connect(endpoint: &Endpoint) -> Result<Kube, ApiError> {
        let fail = |msg: String| ApiError {
            what: "configure the Kubernetes client".into(),
            code: None,
            reason: String::new(),
            message: msg,
            server: endpoint.describe(),
            token_file: endpoint.token_file(),
        };
        let target = match endpoint {
            Endpoint::InCluster => in_cluster()
                .map_err(|e| fail(format!("not in a pod with a service account: {e}")))?,
            Endpoint::Explicit { server, ca, token } => {
                let uri: hyper::Uri = server
                    .parse()
                    .map_err(|e| fail(format!("server URL {server:?}: {e}")))?;
                if uri.scheme_str() != Some("https") {
                    return Err(fail(format!(
                        "server URL {server:?}: only https is supported (the token must not travel in clear)"
                    )));
                }
                let authority = uri
                    .authority()
                    .ok_or_else(|| fail(format!("server URL {server:?}: no host")))?;
                if uri.query().is_some() {
                    return Err(fail(format!(
                        "server URL {server:?}: a query is not expected"
                    )));
                }
                let host = authority.host();
                Target {
                    authority: authority.as_str().to_owned(),
                    host: host
                        .strip_prefix('[')
                        .and_then(|h| h.strip_suffix(']'))
                        .unwrap_or(host)
                        .to_owned(),
                    port: authority.port_u16().unwrap_or(443),
                    base_path: uri.path().trim_end_matches('/').to_owned(),
                    ca: ca.clone(),
                    token: token.clone(),
                }
            }
        };
        let http = Http::new(target).map_err(fail)?;
        Ok(Kube {
            http: Arc::new(http),
            server: endpoint.describe(),
            token_file: endpoint.token_file(),
        })
    }

    fn err(&self, what: String, f: Failure) -> ApiError {
        let (code, reason, message) = match f {
            Failure::Answer {
                code,
                reason,
                message,
            } => (Some(code), reason, message),
            Failure::NoAnswer(m) => (None, String::new(), m),
        };
        ApiError {
            what,
            code,
            reason,
            message,
            server: self.server.clone(),
            token_file: self.token_file.clone(),
        }
    }

    /// One request whose answer is an object of type `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        what: &(dyn Fn() -> String + Sync),
        method: Method,
        path: &str,
        body: Option<&dyn ErasedJson>,
    ) -> Result<T, ApiError> {
        let body = body.map(|b| b.to_json()).transpose().map_err(|e| {
            self.err(
                what(),
                Failure::NoAnswer(format!("encoding the request: {e}")),
            )
        })?;
        let answer = self
            .http
            .call(method, path, body)
            .await
            .map_err(|f| self.err(what(), f))?;
        serde_json::from_slice(&answer).map_err(|e| {
            self.err(
                what(),
                Failure::NoAnswer(format!("an answer that is not what was asked for: {e}")),
            )
        })
    }

    /// The claim `namespace/name`, with its status (allocation, reservedFor).
    pub async fn get_claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ApiError> {
        let what = || format!("get resourceclaims {namespace}/{name}");
        let path = claim_path(namespace, name).map_err(|m| self.err(what(), m))?;
        self.call(&what, Method::GET, &path, None).await
    }

    /// Write `claim.status` (its `.status` subresource), conditional on the claim's
    /// resourceVersion.
    pub async fn update_claim_status(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let what = || format!("update resourceclaims/status {ns}/{name}");
        let path = claim_path(ns, name).map_err(|m| self.err(what(), m))? + "/status";
        self.call(&what, Method::PUT, &path, Some(claim)).await
    }

    /// The claim `namespace/name` as the API server's JSON, every field kept (a status written
    /// back from it loses none of a newer server's fields).
    pub async fn get_claim_json(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<serde_json::Value, ApiError> {
        let what = || format!("get resourceclaims {namespace}/{name}");
        let path = claim_path(namespace, name).map_err(|m| self.err(what(), m))?;
        self.call(&what, Method::GET, &path, None).await
    }

    /// Write the `.status` of `claim` (JSON as [`get_claim_json`](Self::get_claim_json) gave
    /// it, with its resourceVersion: 409 when it changed meanwhile); the claim as stored.
    pub async fn replace_claim_status_json(
        &self,
        claim: &serde_json::Value,
    ) -> Result<serde_json::Value, ApiError> {
        let ns = claim["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = claim["metadata"]["name"].as_str().unwrap_or_default();
        let what = || format!("update resourceclaims/status {ns}/{name}");
        let path = claim_path(ns, name).map_err(|m| self.err(what(), m))? + "/status";
        self.call(&what, Method::PUT, &path, Some(claim)).await
    }

    /// Our slices now, and the collection's resourceVersion to watch from.
    pub async fn list_slices(
        &self,
        filter: &SliceFilter,
    ) -> Result<(Vec<ResourceSlice>, String), ApiError> {
        let what = || format!("list resourceslices ({})", filter.field_selector());
        let path = format!(
            "{SLICES}?fieldSelector={}",
            http::escape(&filter.field_selector())
        );
        let list: types::List<ResourceSlice> = self.call(&what, Method::GET, &path, None).await?;
        let rv = list.metadata.resource_version.unwrap_or_default();
        Ok((list.items, rv))
    }

    /// Changes to our slices after `resource_version`, until the server ends the watch
    /// (`timeout_seconds`) or an error (a 410 Expired: list again).
    pub async fn watch_slices(
        &self,
        filter: &SliceFilter,
        resource_version: &str,
        timeout_seconds: u32,
    ) -> Result<impl Stream<Item = Result<SliceEvent, ApiError>> + use<>, ApiError> {
        let what = format!("watch resourceslices ({})", filter.field_selector());
        let path = format!(
            "{SLICES}?watch=1&allowWatchBookmarks=true&fieldSelector={}&resourceVersion={}&timeoutSeconds={timeout_seconds}",
            http::escape(&filter.field_selector()),
            http::escape(resource_version),
        );
        let body = self
            .http
            .stream(&path)
            .await
            .map_err(|f| self.err(what.clone(), f))?;
        let idle = Duration::from_secs(timeout_seconds.into()) + WATCH_GRACE;
        let me = self.clone();
        // The item is the module's `Result<_, ApiError>`, as every call's answer is.
        #[allow(clippy::result_large_err)]
        let item = move |r: Result<SliceEvent, Failure>| r.map_err(|f| me.err(what.clone(), f));
        Ok(watch::events(body, idle).map(item).boxed())
    }

    pub async fn create_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let what = || format!("create resourceslices/{name}");
        self.call(&what, Method::POST, SLICES, Some(slice)).await
    }

    /// Replace `slice` (its metadata.resourceVersion makes it conditional).
    pub async fn update_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let what = || format!("update resourceslices/{name}");
        let path = format!(
            "{SLICES}/{}",
            segment(name).map_err(|m| self.err(what(), m))?
        );
        self.call(&what, Method::PUT, &path, Some(slice)).await
    }

    /// Delete slice `name` (only if its uid is still `uid`, when given); gone already is fine.
    pub async fn delete_slice(&self, name: &str, uid: Option<&str>) -> Result<(), ApiError> {
        let what = || format!("delete resourceslices/{name}");
        let path = format!(
            "{SLICES}/{}",
            segment(name).map_err(|m| self.err(what(), m))?
        );
        let options = serde_json::json!({
            "apiVersion": "v1", "kind": "DeleteOptions",
            "preconditions": uid.map(|u| serde_json::json!({"uid": u})),
        });
        match self
            .call::<serde_json::Value>(&what, Method::DELETE, &path, Some(&options))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A request body, whatever its type (`call` takes one of several).
trait ErasedJson: Sync {
    fn to_json(&self) -> serde_json::Result<Vec<u8>>;
}

impl<T: Serialize + Sync> ErasedJson for T {
    fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self)
    }
}

/// `name` as one segment of a URL's path: a Kubernetes name (escaped all the same), never
/// empty, `.` or `..`.
fn segment(name: &str) -> Result<String, Failure> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(Failure::NoAnswer(format!(
            "{name:?} is not an object's name"
        )));
    }
    Ok(http::escape(name))
}

fn claim_path(namespace: &str, name: &str) -> Result<String, Failure> {
    Ok(format!(
        "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims/{}",
        segment(namespace)?,
        segment(name)?
    ))
}

/// The API server as a pod sees it: `KUBERNETES_SERVICE_HOST`/`_PORT`, and its service
/// account's CA and token.
fn in_cluster() -> Result<Target, String> {
    let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
    let host = var("KUBERNETES_SERVICE_HOST")?;
    let port = var("KUBERNETES_SERVICE_PORT")?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("KUBERNETES_SERVICE_PORT={port:?} is not a port"))?;
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(Target {
        authority,
        host,
        port,
        base_path: String::new(),
        ca: PathBuf::from(SERVICE_ACCOUNT).join("ca.crt"),
        token: PathBuf::from(SERVICE_ACCOUNT).join("token"),
    })
}

/// One device the claim was allocated: which request it serves, and the device by driver,
/// pool and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// `status.allocation.devices.results[]` of `claim` (empty if it is not allocated).
pub fn allocated_devices(claim: &ResourceClaim) -> Vec<AllocatedDevice> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| AllocatedDevice {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        })
        .collect()
}

/// The UIDs of the pods `claim` is reserved for (`status.reservedFor[]` of resource `pods`).
pub fn reserved_pod_uids(claim: &ResourceClaim) -> Vec<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
        .map(|r| r.uid.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_allocation_and_reservations_read_as_the_driver_needs_them() {
        let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "rdma-host-device.io"}}]}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "nic", "driver": "rdma-host-device.io", "pool": "node1", "device": "pci-0000-3b-00-0"}
                ]}},
                "reservedFor": [
                    {"resource": "pods", "name": "p", "uid": "u-1"},
                    {"apiGroup": "example.io", "resource": "pods", "name": "x", "uid": "u-2"}
                ]
            }
        }))
        .unwrap();
        assert_eq!(
            allocated_devices(&claim),
            [AllocatedDevice {
                request: "nic".into(),
                driver: "rdma-host-device.io".into(),
                pool: "node1".into(),
                device: "pci-0000-3b-00-0".into(),
            }]
        );
        assert_eq!(reserved_pod_uids(&claim), ["u-1"], "core pods only");
    }

    #[test]
    fn an_answer_from_the_server_says_what_to_fix() {
        let e = ApiError {
            what: "list resourceslices".into(),
            code: Some(401),
            reason: "Unauthorized".into(),
            message: "Unauthorized".into(),
            server: "https://10.0.0.1:443".into(),
            token_file: "/t/token".into(),
        };
        let text = crate::error::Error::from(e).to_string();
        assert!(text.contains("401 Unauthorized"), "{text}");
        assert!(text.contains("/t/token"), "{text}");
    }
}
