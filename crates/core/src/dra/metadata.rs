//! Device metadata for the container (KEP-5304), written by us in the layout and format of the
//! Kubernetes Go helper (`k8s.io/dynamic-resource-allocation/kubeletplugin/metadata.go`,
//! v0.37.2): the kubelet has no part in it, the runtime only resolves CDI.
//!
//! Per (claim, request) with a device of ours:
//! - the metadata file `<pluginDataDir>/dra-device-metadata/<ns>_<claim>/<request>/metadata.json`:
//!   a stream of `DeviceMetadata` objects, one per API version, newest first; we write
//!   `metadata.resource.k8s.io/v1beta1` only (the helper requires it; v1alpha1 has the same
//!   fields);
//! - the CDI spec `<cdiDir>/rdma-host-device.io_metadata_<claimUID>_<request>.json` (kind
//!   `rdma-host-device.io/metadata`, device `<claimUID>_<request>`) bind-mounting that file
//!   read-only at `/var/run/kubernetes.io/dra-device-attributes/{resourceclaims/<claim>,
//!   resourceclaimtemplates/<podClaimName>}/<request>/rdma-host-device.io-metadata.json`;
//! - per claim, a CDI spec of our own, `<cdiDir>/rdma-host-device.io_claim_<claimUID>.json`
//!   (kind `rdma-host-device.io/claim`, device `<claimUID>`), whose `containerEdits.env` sets
//!   `NCCL_IB_HCA` for every device of the claim (requests by name) and, once ADD verified
//!   the GIDs, `NCCL_IB_GID_INDEX` ([`env_of`]). Per claim, not per request: NCCL takes one
//!   list, and a CDI env edit of the same name replaces the previous one, so a container using
//!   a claim of eight one-NIC requests would otherwise see one NIC.
//!
//! The driver's prepare writes all three (generation 1: what is known before the pod exists)
//! and appends both CDI IDs to the request's first device; ADD, inside RunPodSandbox and so
//! before any container is created and its CDI resolved, completes the file and the env spec
//! with what it applied and verified (generation + 1, [`update_device`]); DEL takes ADD's part
//! out again, unprepare removes everything. A bind mount pins the inode: a container started
//! before a rewrite keeps the old file, a restarted one mounts the current one.
//!
//! Every path here is made from the node configuration's directories (`dra.deviceMetadata`)
//! and the claim's namespace, name, UID and request, each checked to be a Kubernetes name
//! (so one path component, never `..`); nothing a NAD says reaches a path. Every value in the
//! env is ours: an integer, or an RDMA device name the kernel gave (checked to be plain).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::DRIVER;
use crate::state::NetworkData;

pub const API_VERSION: &str = "metadata.resource.k8s.io/v1beta1";
pub const KIND: &str = "DeviceMetadata";
/// Where the file is in a container (`k8s.io/dynamic-resource-allocation/api/metadata`).
pub const CONTAINER_DIR: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// Under the driver's plugin data directory.
pub const SUBDIR: &str = "dra-device-metadata";
/// The CDI kind of the metadata file's mount, as the helper names it.
pub const CDI_METADATA_KIND: &str = "rdma-host-device.io/metadata";
/// Ours: the request's environment.
pub const CDI_ENV_KIND: &str = "rdma-host-device.io/claim";
/// What the runtimes of Debian 12 read (the mount and env edits are 0.3.0's).
pub const CDI_VERSION: &str = "0.5.0";
/// The most read of a metadata file (ours are a few KiB).
const MAX_BYTES: u64 = 1 << 20;
/// The API's limit for a string attribute.
const MAX_STRING: usize = 64;

/// Every attribute name we write, in a ResourceSlice's devices and in a claim's device
/// metadata (fully qualified, as a consumer's CEL selector or a pod reads them): one table, so
/// the slice and the metadata cannot name one thing two ways.
pub mod attr {
    // Kubernetes' own names, which the scheduler's alignment and other drivers read.
    pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
    pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
    pub const NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
    // Multus' names for what a device plugin hands over.
    pub const DEVICE_ID: &str = "k8s.cni.cncf.io/deviceID";
    pub const RESOURCE_NAME: &str = "k8s.cni.cncf.io/resourceName";
    // Ours.
    pub const IF_NAME: &str = "rdma-host-device.io/ifName";
    pub const DRIVER: &str = "rdma-host-device.io/driver";
    pub const MTU: &str = "rdma-host-device.io/mtu";
    pub const LINK_SPEED: &str = "rdma-host-device.io/linkSpeed";
    pub const LINK_UP: &str = "rdma-host-device.io/linkUp";
    pub const RDMA: &str = "rdma-host-device.io/rdma";
    pub const RDMA_DEVICE: &str = "rdma-host-device.io/rdmaDevice";
    pub const NODE_GUID: &str = "rdma-host-device.io/nodeGUID";
    pub const TRANSPORT: &str = "rdma-host-device.io/transport";
    pub const RAIL: &str = "rdma-host-device.io/rail";
    pub const UVERBS: &str = "rdma-host-device.io/uverbs";
    pub const GID_INDEX: &str = "rdma-host-device.io/gidIndex";
    pub const GID_INDICES: &str = "rdma-host-device.io/gidIndices";
}

/// Env names in the request's CDI device.
pub mod env {
    pub const HCA: &str = "NCCL_IB_HCA";
    pub const GID_INDEX: &str = "NCCL_IB_GID_INDEX";
    /// `RDMA_HOST_DEVICE_GID_INDEX_<i>`: the i-th device of `NCCL_IB_HCA`'s, when they differ.
    pub const GID_INDEX_OF: &str = "RDMA_HOST_DEVICE_GID_INDEX_";
    /// The metadata file's generation the env was written with (2 and up: ADD's).
    pub const GENERATION: &str = "RDMA_HOST_DEVICE_METADATA_GENERATION";
}

/// `DeviceMetadata` (v1beta1). Fields the helper writes and we do not (the rest of
/// `ObjectMeta`) are ignored when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMetadata {
    pub kind: String,
    pub api_version: String,
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<Request>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub generation: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub driver: String,
    pub pool: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, Attribute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<NetworkData>,
}

/// A device attribute (the API's `DeviceAttribute`) as a ResourceSlice and a claim's device
/// metadata both carry it: one of its fields set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl Attribute {
    pub fn int(v: i64) -> Attribute {
        Attribute {
            int: Some(v),
            ..Attribute::default()
        }
    }
    pub fn string(v: impl Into<String>) -> Attribute {
        Attribute {
            string: Some(v.into()),
            ..Attribute::default()
        }
    }
    pub fn boolean(v: bool) -> Attribute {
        Attribute {
            bool: Some(v),
            ..Attribute::default()
        }
    }
}

impl DeviceMetadata {
    /// Generation 1 of one request's metadata, as prepare writes it.
    pub fn new(
        claim: &ClaimRef<'_>,
        pod_claim_name: Option<String>,
        request: &str,
        devices: Vec<Device>,
    ) -> DeviceMetadata {
        DeviceMetadata {
            kind: KIND.into(),
            api_version: API_VERSION.into(),
            metadata: ObjectMeta {
                name: claim.name.into(),
                namespace: claim.namespace.into(),
                uid: claim.uid.into(),
                generation: 1,
            },
            pod_claim_name,
            requests: vec![Request {
                name: request.into(),
                devices,
            }],
        }
    }

    /// The stream as the file holds it: the v1beta1 object, pretty, and a newline.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// The first object of the stream in a version we read (v1beta1, or v1alpha1: the same
    /// fields); other versions are skipped, as a consumer does.
    pub fn decode(body: &[u8]) -> Result<DeviceMetadata, String> {
        for v in serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>() {
            let v = v.map_err(|e| e.to_string())?;
            let version = v["apiVersion"].as_str().unwrap_or_default();
            if v["kind"] == KIND
                && (version == API_VERSION || version == "metadata.resource.k8s.io/v1alpha1")
            {
                let mut dm: DeviceMetadata =
                    serde_json::from_value(v).map_err(|e| e.to_string())?;
                dm.api_version = API_VERSION.into();
                return Ok(dm);
            }
        }
        Err(format!("no {KIND} object of version {API_VERSION}"))
    }

    fn devices_mut(&mut self) -> impl Iterator<Item = &mut Device> {
        self.requests.iter_mut().flat_map(|r| r.devices.iter_mut())
    }

    fn devices(&self) -> impl Iterator<Item = &Device> {
        self.requests.iter().flat_map(|r| r.devices.iter())
    }
}

/// A claim as the kubelet and the checkpoint name it.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// Where the node keeps the files (node configuration `dra.deviceMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The driver's plugin data directory (`<kubelet>/plugins/rdma-host-device.io`).
    pub plugin_data_dir: PathBuf,
    /// Where the runtime reads CDI specs (`/var/run/cdi`).
    pub cdi_dir: PathBuf,
}

/// One request's files and CDI IDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// `<pluginDataDir>/dra-device-metadata/<ns>_<claim>_<claimUID>`: all the claim's requests.
    pub claim_dir: PathBuf,
    /// `<claim_dir>/<request>`.
    pub request_dir: PathBuf,
    /// `<request_dir>/metadata.json`.
    pub file: PathBuf,
    pub metadata_spec: PathBuf,
    /// The claim's env spec (one for all its requests).
    pub env_spec: PathBuf,
    /// `<claimUID>_<request>`: the metadata CDI device's name.
    pub cdi_name: String,
    /// `<claimUID>`: the env CDI device's name.
    pub env_name: String,
}

impl Files {
    pub fn metadata_cdi_id(&self) -> String {
        format!("{CDI_METADATA_KIND}={}", self.cdi_name)
    }
    pub fn env_cdi_id(&self) -> String {
        format!("{CDI_ENV_KIND}={}", self.env_name)
    }
}

/// `request` without a subrequest (`nic/rail0` -> `nic`): the helper files by the base request.
pub fn base_request(request: &str) -> &str {
    request.split('/').next().unwrap_or(request)
}

/// A Kubernetes name (DNS subdomain, or a UID's letters): safe as one path component and in a
/// CDI device name.
fn check_name(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
        && !s.contains("..");
    match ok {
        true => Ok(()),
        false => Err(format!("{what} {s:?} is not a Kubernetes name")),
    }
}

impl Place {
    /// The files of `claim`'s `request` (its base request's).
    pub fn files(&self, claim: &ClaimRef<'_>, request: &str) -> Result<Files, String> {
        let request = base_request(request);
        check_name("namespace", claim.namespace)?;
        check_name("claim name", claim.name)?;
        check_name("claim UID", claim.uid)?;
        check_name("request", request)?;
        // Filed by the claim's UID as well as its name: a claim deleted and made again under
        // the same name (a new UID, perhaps another NIC) is another claim, and the kubelet may
        // prepare the new one before it unprepares the old (issue 47). `_` is in no Kubernetes
        // name, so the three parts cannot run into each other.
        let claim_dir = self
            .plugin_data_dir
            .join(SUBDIR)
            .join(format!("{}_{}_{}", claim.namespace, claim.name, claim.uid));
        let request_dir = claim_dir.join(request);
        let cdi_name = format!("{}_{request}", claim.uid);
        Ok(Files {
            file: request_dir.join("metadata.json"),
            metadata_spec: self
                .cdi_dir
                .join(format!("{DRIVER}_metadata_{cdi_name}.json")),
            env_spec: self
                .cdi_dir
                .join(format!("{DRIVER}_claim_{}.json", claim.uid)),
            env_name: claim.uid.to_owned(),
            claim_dir,
            request_dir,
            cdi_name,
        })
    }
}

/// Where the file is in a container: under `resourceclaimtemplates/<podClaimName>` for a claim
/// made from a template, else under `resourceclaims/<claim>`. The pod claim name is the claim's
/// annotation, which whoever writes the claim may set to anything: only a Kubernetes name is
/// taken (the claim's own name and the request are checked by [`Place::files`] before this).
pub fn container_path(pod_claim_name: Option<&str>, claim: &str, request: &str) -> String {
    let request = base_request(request);
    match pod_claim_name.filter(|p| check_name("pod claim name", p).is_ok()) {
        Some(p) => {
            format!("{CONTAINER_DIR}/resourceclaimtemplates/{p}/{request}/{DRIVER}-metadata.json")
        }
        None => format!("{CONTAINER_DIR}/resourceclaims/{claim}/{request}/{DRIVER}-metadata.json"),
    }
}

/// The CDI spec mounting the metadata file read-only at `container_path`.
pub fn metadata_spec(files: &Files, container_path: &str) -> serde_json::Value {
    serde_json::json!({
        "cdiVersion": CDI_VERSION,
        "kind": CDI_METADATA_KIND,
        "devices": [{
            "name": files.cdi_name,
            "containerEdits": {"mounts": [{
                "hostPath": files.file,
                "containerPath": container_path,
                "options": ["ro", "bind"],
            }]},
        }],
    })
}

/// An RDMA device name fit for an env value: what the kernel allows and NCCL's list syntax
/// does not use (`,`, `:`, `=`, `^`).
pub(crate) fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// The claim's environment from its requests' metadata (in request-name order):
/// - `RDMA_HOST_DEVICE_METADATA_GENERATION`: the newest generation of its files (always
///   there, so the CDI device is never empty, which CDI refuses);
/// - `NCCL_IB_HCA==dev0,dev1`: every device's RDMA device, in order, exact match (`=`);
/// - `NCCL_IB_GID_INDEX`: the RoCE v2 GID index of the first address, when every device has one
///   and they agree; otherwise `RDMA_HOST_DEVICE_GID_INDEX_<i>` for each i-th device that has
///   one (the i of `NCCL_IB_HCA`'s list), and no `NCCL_IB_GID_INDEX`.
pub fn env_of(requests: &[DeviceMetadata]) -> Vec<String> {
    let generation = requests
        .iter()
        .map(|d| d.metadata.generation)
        .max()
        .unwrap_or_default();
    let mut out = vec![format!("{}={generation}", env::GENERATION)];
    let hcas: Vec<(&str, Option<i64>)> = requests
        .iter()
        .flat_map(|dm| dm.devices())
        .filter_map(|d| {
            let name = d.attributes.get(attr::RDMA_DEVICE)?.string.as_deref()?;
            plain(name).then_some((name, d.attributes.get(attr::GID_INDEX).and_then(|a| a.int)))
        })
        .collect();
    if hcas.is_empty() {
        return out;
    }
    out.push(format!(
        "{}=={}",
        env::HCA,
        hcas.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(",")
    ));
    let first = hcas[0].1;
    if first.is_some() && hcas.iter().all(|(_, g)| *g == first) {
        out.push(format!("{}={}", env::GID_INDEX, first.unwrap_or_default()));
    } else {
        for (i, (_, g)) in hcas.iter().enumerate() {
            if let Some(g) = g {
                out.push(format!("{}{i}={g}", env::GID_INDEX_OF));
            }
        }
    }
    out
}

/// Our CDI spec with the claim's environment.
pub fn env_spec(files: &Files, requests: &[DeviceMetadata]) -> serde_json::Value {
    cdi_env_spec(CDI_ENV_KIND, &files.env_name, env_of(requests))
}

/// A CDI spec of one device, `kind`=`name`, whose edits are only `env`: the claim's here, a
/// NIC's in `nic_env`.
pub fn cdi_env_spec(kind: &str, name: &str, env: Vec<String>) -> serde_json::Value {
    serde_json::json!({
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [{
            "name": name,
            "containerEdits": {"env": env},
        }],
    })
}

/// Every request's metadata of the claim `files` is of, by request name. Bounded by the
/// claim's requests, nothing else on the node.
fn claim_requests(files: &Files) -> io::Result<Vec<DeviceMetadata>> {
    let mut names: Vec<String> = fs::read_dir(&files.claim_dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let f = files.claim_dir.join(&n).join("metadata.json");
        let body = match crate::files::read_regular_nofollow(&f, MAX_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", f.display()))),
        };
        out.push(DeviceMetadata::decode(&body).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", f.display()))
        })?);
    }
    Ok(out)
}

/// Rewrite the claim's env spec from every request's metadata file.
pub fn write_env(files: &Files) -> io::Result<()> {
    let requests = claim_requests(files)?;
    write(&files.env_spec, &pretty(&env_spec(files, &requests)))
}

/// How long a rewrite waits for another one of the same claim (or NIC: `nic_env`): the
/// writes take milliseconds, so a longer wait is a writer stuck, and ADD fails (undone) rather
/// than hang its sandbox.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The claim's directory, locked (flock within [`LOCK_WAIT`], released when the returned file
/// closes): ADD and DEL of the claim's devices (two pods of a shared claim) rewrite its files
/// one at a time. `None` when there is no such directory.
fn lock_claim(files: &Files) -> io::Result<Option<fs::File>> {
    if !files.claim_dir.is_dir() {
        return Ok(None);
    }
    let (dir, name) = claim_lock(files);
    crate::files::lock_private_within(&dir, &name, LOCK_WAIT).map(Some)
}

/// Where the claim's lock is: a file in our own 0700 directory beside the claims' (`.locks`),
/// never the claim's directory, which is 0755 and which any user may open and flock (issue 47).
fn claim_lock(files: &Files) -> (PathBuf, String) {
    let parent = files
        .claim_dir
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = files
        .claim_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (
        parent.join(".locks"),
        format!("claim-{}.lock", crate::state::owner_key(&name, "")),
    )
}

pub(crate) fn write(path: &Path, body: &[u8]) -> io::Result<()> {
    crate::files::replace(path, body)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

/// Prepare's part for one request: the metadata file (generation 1) and its CDI spec; then,
/// once for the claim, [`write_env`]. Returns the two CDI IDs to append to the request's first
/// device (the env one is the claim's, the same for each of its requests).
pub fn prepare(
    files: &Files,
    dm: &DeviceMetadata,
    pod_claim_name: Option<&str>,
) -> io::Result<[String; 2]> {
    crate::files::create_dirs(&files.request_dir, 0o755)?;
    write(&files.file, &dm.encode())?;
    let request = dm
        .requests
        .first()
        .map(|r| r.name.as_str())
        .unwrap_or_default();
    let cpath = container_path(pod_claim_name, &dm.metadata.name, request);
    write(&files.metadata_spec, &pretty(&metadata_spec(files, &cpath)))?;
    Ok([files.metadata_cdi_id(), files.env_cdi_id()])
}

pub(crate) fn pretty(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap_or_default()
}

/// A claim prepared by an agent from before claims were filed by UID has its files under
/// `<ns>_<claim>`: moved to the claim's own directory when every request's metadata there is
/// this claim's (its UID), else left alone (it is another claim's of the same name).
/// Returns whether it moved them (the specs then name the old place, and are written again).
fn adopt_unversioned(files: &Files, claim: &ClaimRef<'_>) -> io::Result<bool> {
    let old = files
        .claim_dir
        .with_file_name(format!("{}_{}", claim.namespace, claim.name));
    if files.claim_dir.exists() || !old.is_dir() {
        return Ok(false);
    }
    let probe = Files {
        claim_dir: old.clone(),
        ..files.clone()
    };
    let requests = claim_requests(&probe)?;
    if requests.is_empty() || requests.iter().any(|r| r.metadata.uid != claim.uid) {
        return Ok(false);
    }
    fs::rename(&old, &files.claim_dir)?;
    log::info!(
        "claim {}/{} ({}): its metadata moved from {} to {}",
        claim.namespace,
        claim.name,
        claim.uid,
        old.display(),
        files.claim_dir.display()
    );
    Ok(true)
}

/// Unprepare's part: the claim's metadata directory and both specs of each request. Missing
/// files are no error.
pub fn remove(place: &Place, claim: &ClaimRef<'_>, requests: &[&str]) -> io::Result<()> {
    let gone = |r: io::Result<()>| match r {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    let mut last = None;
    for r in requests {
        let f = place
            .files(claim, r)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        gone(fs::remove_file(&f.metadata_spec))?;
        last = Some(f);
    }
    match last {
        Some(f) => {
            gone(fs::remove_file(&f.env_spec))?;
            adopt_unversioned(&f, claim)?;
            let locked = lock_claim(&f)?;
            gone(fs::remove_dir_all(&f.claim_dir))?;
            if locked.is_some() {
                let (dir, name) = claim_lock(&f);
                crate::files::unlink_lock(&dir, &name);
            }
            Ok(())
        }
        None => Ok(()),
    }
}

/// After the node restarted (`/var/run/cdi` is a tmpfs) the kubelet prepares its claims again,
/// and the checkpoint answers the same CDI IDs: their specs are written again from the metadata
/// files, which live on (`pluginDataDir`). Specs still there are left as they are. Returns how
/// many were written.
pub fn ensure_specs(place: &Place, claim: &ClaimRef<'_>, requests: &[&str]) -> io::Result<usize> {
    let mut written = 0;
    let mut moved = false;
    let mut last = None;
    for r in requests {
        let f = place
            .files(claim, r)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if last.is_none() {
            moved = adopt_unversioned(&f, claim)?;
        }
        if moved || !f.metadata_spec.exists() {
            let body = crate::files::read_regular_nofollow(&f.file, MAX_BYTES)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", f.file.display())))?;
            let dm = DeviceMetadata::decode(&body).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", f.file.display()),
                )
            })?;
            let cpath = container_path(dm.pod_claim_name.as_deref(), claim.name, r);
            write(&f.metadata_spec, &pretty(&metadata_spec(&f, &cpath)))?;
            written += 1;
        }
        last = Some(f);
    }
    if let Some(f) = last
        && (moved || !f.env_spec.exists())
    {
        let _locked = lock_claim(&f)?;
        write_env(&f)?;
        written += 1;
    }
    Ok(written)
}

/// What ADD applied and verified for one device: what [`update_device`] adds to its entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attached {
    /// The RDMA device's name in the pod, if it has one.
    pub rdma_device: Option<String>,
    /// The index of the RoCE v2 GID of each of the pod's addresses, in address order.
    pub gid_indices: Vec<(IpAddr, u32)>,
    pub network: NetworkData,
}

/// `addr=idx,...`, as many as fit in an attribute string.
fn gid_indices_text(g: &[(IpAddr, u32)]) -> String {
    let mut out = String::new();
    for (addr, idx) in g {
        let item = format!("{addr}={idx}");
        let len = out.len() + usize::from(!out.is_empty()) + item.len();
        if len > MAX_STRING {
            break;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&item);
    }
    out
}

/// Apply `attached` (ADD) or take ADD's part out (`None`: DEL, an undo) on the entry of
/// device `pool`/`device` in `dm`; the generation goes up by one. `false` when no entry is
/// that device.
pub fn apply(
    dm: &mut DeviceMetadata,
    pool: &str,
    device: &str,
    attached: Option<&Attached>,
) -> bool {
    let Some(d) = dm
        .devices_mut()
        .find(|d| d.driver == DRIVER && d.pool == pool && d.name == device)
    else {
        return false;
    };
    for k in [attr::IF_NAME, attr::GID_INDEX, attr::GID_INDICES] {
        d.attributes.remove(k);
    }
    d.network_data = None;
    if let Some(a) = attached {
        if let Some(r) = &a.rdma_device {
            d.attributes
                .insert(attr::RDMA_DEVICE.into(), Attribute::string(r.clone()));
        }
        if !a.network.interface_name.is_empty() {
            d.attributes.insert(
                attr::IF_NAME.into(),
                Attribute::string(a.network.interface_name.clone()),
            );
        }
        if let Some((_, first)) = a.gid_indices.first() {
            d.attributes
                .insert(attr::GID_INDEX.into(), Attribute::int(i64::from(*first)));
            d.attributes.insert(
                attr::GID_INDICES.into(),
                Attribute::string(gid_indices_text(&a.gid_indices)),
            );
        }
        d.network_data = Some(a.network.clone());
    }
    dm.metadata.generation += 1;
    true
}

/// ADD's and DEL's rewrite of one request's metadata file and the claim's env spec, under a
/// lock on the claim's directory (two pods of a shared claim, each with a device of it): read
/// the file, [`apply`], write both through a temp file and a rename. `Ok(None)` when there is no file
/// (unprepared already, or a driver that wrote none); `Ok(Some(generation))` when written.
pub fn update_device(
    files: &Files,
    pool: &str,
    device: &str,
    attached: Option<&Attached>,
) -> io::Result<Option<i64>> {
    let Some(_locked) = lock_claim(files)? else {
        return Ok(None);
    };
    let body = match crate::files::read_regular_nofollow(&files.file, MAX_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("{}: {e}", files.file.display()),
            ));
        }
    };
    let mut dm = DeviceMetadata::decode(&body).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", files.file.display()),
        )
    })?;
    if !apply(&mut dm, pool, device, attached) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} has no entry for device {pool}/{device}",
                files.file.display()
            ),
        ));
    }
    write(&files.file, &dm.encode())?;
    write_env(files)?;
    Ok(Some(dm.metadata.generation))
}

#[cfg(test)]
mod tests;
