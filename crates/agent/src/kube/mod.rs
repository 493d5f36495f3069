//! The node agent's Kubernetes API client, for the DRA driver (`dra/`): ResourceSlices
//! (`resource.k8s.io/v1`, cluster-scoped) and ResourceClaims (namespaced). Agent-only: the CNI
//! binary (src/main.rs) never reaches this module, so none of it (nor kube, rustls, ring) is
//! linked into it.
//!
//! Built on the `kube` crate's client (rustls on `ring`, no runtime, no derive) and
//! `k8s-openapi`'s types as of Kubernetes 1.34, the first release with `resource.k8s.io/v1`.
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
//! kube.watch_slices(&SliceFilter, resourceVersion) -> Result<stream of SliceEvent>
//! kube.create_slice(&slice) / update_slice(&slice) -> Result<ResourceSlice>
//! kube.delete_slice(name, uid) -> Result<()>   (already gone is fine; uid as a precondition)
//!   SliceFilter { driver, node }: fieldSelector spec.driver=D,spec.nodeName=N
//! ```
//!
//! Every failure is an [`ApiError`]: what was asked (verb, object), and the API server's HTTP
//! code, reason and message, or why no answer came (TLS, connection, bad config). It converts
//! into the crate's `Error` with a message an operator can act on (a 401 names the token file,
//! a 403 names the RBAC rule that is missing).

use ::kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions,
    WatchEvent, WatchParams,
};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::resource::v1 as resource;
use std::fmt;
use std::path::{Path, PathBuf};

pub use resource::{ResourceClaim, ResourceSlice};

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
            Endpoint::InCluster => {
                "/var/run/secrets/kubernetes.io/serviceaccount/token".to_string()
            }
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

/// A connected client (cheap to clone: one connection pool).
#[derive(Clone)]
pub struct Kube {
    client: ::kube::Client,
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
        let config = match endpoint {
            Endpoint::InCluster => ::kube::Config::incluster()
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
                let ders = read_ca(ca).map_err(fail)?;
                check_token_file(token).map_err(fail)?;
                let mut c = ::kube::Config::new(uri);
                c.root_cert = Some(ders);
                c.root_cert_file = Some(ca.clone());
                c.auth_info.token_file = Some(token.display().to_string());
                c
            }
        };
        let client = ::kube::Client::try_from(config).map_err(|e| fail(e.to_string()))?;
        Ok(Kube {
            client,
            server: endpoint.describe(),
            token_file: endpoint.token_file(),
        })
    }

    fn err(&self, what: String, e: ::kube::Error) -> ApiError {
        let (code, reason, message) = match e {
            ::kube::Error::Api(s) => (Some(s.code), s.reason.clone(), s.message.clone()),
            other => (None, String::new(), other.to_string()),
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

    fn slices(&self) -> Api<ResourceSlice> {
        Api::all(self.client.clone())
    }

    fn claims(&self, namespace: &str) -> Api<ResourceClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The claim `namespace/name`, with its status (allocation, reservedFor).
    pub async fn get_claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ApiError> {
        self.claims(namespace)
            .get(name)
            .await
            .map_err(|e| self.err(format!("get resourceclaims {namespace}/{name}"), e))
    }

    /// Write `claim.status` (its `.status` subresource), conditional on the claim's
    /// resourceVersion.
    pub async fn update_claim_status(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        self.claims(ns)
            .replace_status(name, &PostParams::default(), claim)
            .await
            .map_err(|e| self.err(format!("update resourceclaims/status {ns}/{name}"), e))
    }

    fn raw_claims(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::erase::<ResourceClaim>(&()),
        )
    }

    /// The claim `namespace/name` as the API server's JSON, every field kept (a status written
    /// back from it loses none of a newer server's fields).
    pub async fn get_claim_json(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<serde_json::Value, ApiError> {
        let what = || format!("get resourceclaims {namespace}/{name}");
        let claim = self
            .raw_claims(namespace)
            .get(name)
            .await
            .map_err(|e| self.err(what(), e))?;
        serde_json::to_value(claim).map_err(|e| self.err(what(), ::kube::Error::SerdeError(e)))
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
        let obj: DynamicObject = serde_json::from_value(claim.clone())
            .map_err(|e| self.err(what(), ::kube::Error::SerdeError(e)))?;
        let stored = self
            .raw_claims(ns)
            .replace_status(name, &PostParams::default(), &obj)
            .await
            .map_err(|e| self.err(what(), e))?;
        serde_json::to_value(stored).map_err(|e| self.err(what(), ::kube::Error::SerdeError(e)))
    }

    /// Our slices now, and the collection's resourceVersion to watch from.
    pub async fn list_slices(
        &self,
        filter: &SliceFilter,
    ) -> Result<(Vec<ResourceSlice>, String), ApiError> {
        let lp = ListParams::default().fields(&filter.field_selector());
        let list = self.slices().list(&lp).await.map_err(|e| {
            self.err(
                format!("list resourceslices ({})", filter.field_selector()),
                e,
            )
        })?;
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
        let wp = WatchParams::default()
            .fields(&filter.field_selector())
            .timeout(timeout_seconds);
        let what = format!("watch resourceslices ({})", filter.field_selector());
        let me = self.clone();
        let stream = self
            .slices()
            .watch(&wp, resource_version)
            .await
            .map_err(|e| self.err(what.clone(), e))?;
        Ok(stream
            .map_err(move |e| me.err(what.clone(), e))
            .and_then(|ev| async move {
                match ev {
                    WatchEvent::Added(s) => Ok(SliceEvent::Added(s)),
                    WatchEvent::Modified(s) => Ok(SliceEvent::Modified(s)),
                    WatchEvent::Deleted(s) => Ok(SliceEvent::Deleted(s)),
                    WatchEvent::Bookmark(b) => {
                        Ok(SliceEvent::Bookmark(b.metadata.resource_version))
                    }
                    WatchEvent::Error(s) => Err(ApiError {
                        what: "watch resourceslices".into(),
                        code: Some(s.code),
                        reason: s.reason,
                        message: s.message,
                        server: String::new(),
                        token_file: String::new(),
                    }),
                }
            })
            .boxed())
    }

    pub async fn create_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        self.slices()
            .create(&PostParams::default(), slice)
            .await
            .map_err(|e| self.err(format!("create resourceslices/{name}"), e))
    }

    /// Replace `slice` (its metadata.resourceVersion makes it conditional).
    pub async fn update_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        self.slices()
            .replace(name, &PostParams::default(), slice)
            .await
            .map_err(|e| self.err(format!("update resourceslices/{name}"), e))
    }

    /// Delete slice `name` (only if its uid is still `uid`, when given); gone already is fine.
    pub async fn delete_slice(&self, name: &str, uid: Option<&str>) -> Result<(), ApiError> {
        let dp = DeleteParams {
            preconditions: uid.map(|u| Preconditions {
                uid: Some(u.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.slices().delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = self.err(format!("delete resourceslices/{name}"), e);
                if e.is_not_found() { Ok(()) } else { Err(e) }
            }
        }
    }
}

/// The token file must be readable and hold the token alone: kube sends the file's bytes
/// verbatim (client-go trims them; kube does not), so a trailing newline would make every
/// request fail with an unhelpful "invalid bearer token". Said here, once, with the fix.
fn check_token_file(path: &Path) -> Result<(), String> {
    let t =
        std::fs::read_to_string(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    if t.trim().is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    if t.trim() != t {
        return Err(format!(
            "token file {} has white space around the token (a trailing newline?), which would be sent as part of it: write the token alone (printf %s \"$TOKEN\" > FILE)",
            path.display()
        ));
    }
    Ok(())
}

/// The CA file's certificates, DER.
fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("CA file {}: {e}", path.display()))?;
    let mut out = Vec::new();
    let mut b64 = String::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line == "-----BEGIN CERTIFICATE-----" {
            inside = true;
            b64.clear();
        } else if line == "-----END CERTIFICATE-----" {
            inside = false;
            out.push(
                base64_decode(&b64)
                    .ok_or_else(|| format!("CA file {}: bad base64", path.display()))?,
            );
        } else if inside {
            b64.push_str(line);
        }
    }
    if out.is_empty() {
        return Err(format!(
            "CA file {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(out)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let take = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    Some(out)
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
    fn base64_round_trips_what_pem_holds() {
        assert_eq!(base64_decode("TWFu").unwrap(), b"Man");
        assert_eq!(base64_decode("TWE=").unwrap(), b"Ma");
        assert_eq!(base64_decode("TQ==").unwrap(), b"M");
        assert!(base64_decode("T!==").is_none());
    }

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
