//! The device plugin's per-NIC env for the container: a CDI device per NIC,
//! `rdma-host-device.io/nic=<deviceID>` in `<cdiDir>/rdma-host-device.io_nic_<deviceID>.json`,
//! whose `containerEdits.env` is the DRA path's ([`metadata::env_of`]): `NCCL_IB_HCA`, and,
//! once ADD verified the GIDs, `NCCL_IB_GID_INDEX`.
//!
//! `Allocate` runs before the pod's sandbox exists, so it cannot know the GID index; the
//! container is created after ADD, which can. So:
//! - the device plugin writes generation 1 (what `Allocate` knows: the RDMA devices of every NIC
//!   the container gets, in its order, as `NCCL_IB_HCA`) and names the device in its answer; it
//!   also writes generation 1 for every NIC of its pools that has no spec (after a node restart
//!   `/var/run/cdi`, a tmpfs, is empty while the kubelet's checkpoint still names the device):
//!   the name always resolves, which containerd requires of every CDI name it is given;
//! - ADD, after its verbs check, rewrites the spec of the NIC it moved as generation 2 with its
//!   GID index (`NCCL_IB_GID_INDEX` for a container of one NIC; `RDMA_HOST_DEVICE_GID_INDEX_<i>`,
//!   `i` its place in `NCCL_IB_HCA`, for a container of several, whose specs each carry the
//!   same `NCCL_IB_HCA` so that whichever CDI applies last says the same); DEL and ADD's undo
//!   put it back to generation 1.
//!
//! The spec is its own record: generation 1 is fully said by its `NCCL_IB_HCA`, which ADD and
//! DEL read back (our own file in the node's CDI directory, only root writes there) and check
//! name by name. Every rewrite is one atomic write (`files::write_atomic`) under a lock on the
//! CDI directory taken within [`metadata::LOCK_WAIT`] (a file in our own 0700 directory there).
//!
//! Paths: the node configuration's `devicePlugin.nicEnv.cdiDir` and the NIC's device ID as the
//! node reads it (`inventory::device_id`: its PCI function, its auxiliary device, or a virtual
//! link's host name), checked to be a CDI device name (one path component, never `..`). ADD
//! takes the ID of the NIC it resolved and moved, not the `deviceID` string a NAD carries, so
//! nothing a tenant writes names another NIC's spec or a path.

use crate::dra::DRIVER;
use crate::dra::metadata::{self, Attached, Attribute, Device, DeviceMetadata, attr};
use std::io;
use std::path::PathBuf;

/// Our lock directory in the CDI directory (0700).
pub const LOCK_DIR: &str = ".rdma-host-device.io-locks";
/// The CDI kind of the per-NIC env devices.
pub const CDI_KIND: &str = "rdma-host-device.io/nic";
/// The most read of a spec (ours are well under a KiB).
const MAX_BYTES: u64 = 64 << 10;
/// The longest device ID taken (a PCI address is 12, an interface name 15).
const MAX_ID: usize = 64;
/// Pools of the entries of the metadata the env is made from: the container's RDMA devices as
/// `NCCL_IB_HCA` lists them, and the NIC itself when it is not one of them.
const HCA: &str = "hca";
const NIC: &str = "nic";

/// Where the node keeps the specs (`devicePlugin.nicEnv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub cdi_dir: PathBuf,
}

/// A device ID fit for a CDI device name and a file name: what CDI allows (a letter or digit
/// first and last; letters, digits, `_`, `-`, `.`, `:` between), at most [`MAX_ID`] bytes.
pub fn check_id(id: &str) -> Result<(), String> {
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= MAX_ID
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':'))
        && !id.contains("..");
    match ok {
        true => Ok(()),
        false => Err(format!(
            "device ID {id:?} cannot name a CDI device (letters, digits, '_', '-', '.', ':', at most {MAX_ID})"
        )),
    }
}

/// `rdma-host-device.io/nic=<id>`.
pub fn cdi_id(id: &str) -> String {
    format!("{CDI_KIND}={id}")
}

impl Place {
    /// `<cdiDir>/rdma-host-device.io_nic_<id>.json`.
    pub fn spec_path(&self, id: &str) -> Result<PathBuf, String> {
        check_id(id)?;
        Ok(self.cdi_dir.join(format!("{DRIVER}_nic_{id}.json")))
    }

    /// The specs' lock (released when the file closes): a file in our own 0700 directory in
    /// the CDI directory ([`LOCK_DIR`]), never the CDI directory itself, which any user may
    /// open and flock (issue 47: `flock -x /var/run/cdi` as `nobody` stalled every Allocate
    /// and ADD). The runtimes read no subdirectory of a CDI directory.
    fn lock(&self) -> io::Result<std::fs::File> {
        crate::files::create_dirs(&self.cdi_dir, 0o755)?;
        crate::files::lock_private_within(
            &self.cdi_dir.join(LOCK_DIR),
            "nic-env.lock",
            metadata::LOCK_WAIT,
        )
    }

    fn spec(&self, id: &str) -> io::Result<PathBuf> {
        self.spec_path(id)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }
}

/// Generation 1 of NIC `id`'s metadata: every RDMA device of the container (`hcas`, in order),
/// and the NIC itself when its RDMA device (`rdma`) is not one of them.
fn base(id: &str, hcas: &[String], rdma: Option<&str>) -> DeviceMetadata {
    let entry = |pool: &str, name: &str, rdma: Option<&str>| Device {
        driver: DRIVER.into(),
        pool: pool.into(),
        name: name.into(),
        attributes: rdma
            .map(|r| (attr::RDMA_DEVICE.to_owned(), Attribute::string(r)))
            .into_iter()
            .collect(),
        network_data: None,
    };
    let mut devices: Vec<Device> = hcas.iter().map(|h| entry(HCA, h, Some(h))).collect();
    if !rdma.is_some_and(|r| hcas.iter().any(|h| h == r)) {
        devices.push(entry(NIC, id, rdma));
    }
    DeviceMetadata {
        kind: metadata::KIND.into(),
        api_version: metadata::API_VERSION.into(),
        metadata: metadata::ObjectMeta {
            name: id.into(),
            generation: 1,
            ..Default::default()
        },
        pod_claim_name: None,
        requests: vec![metadata::Request {
            name: NIC.into(),
            devices,
        }],
    }
}

/// The env of NIC `id`: generation 1 from `hcas` and its RDMA device, with `attached` (ADD's,
/// generation 2) applied to its own entry.
pub fn env(
    id: &str,
    hcas: &[String],
    rdma: Option<&str>,
    attached: Option<&Attached>,
) -> Vec<String> {
    let mut dm = base(id, hcas, rdma);
    if let Some(a) = attached {
        let (pool, name) = match rdma.filter(|r| hcas.iter().any(|h| h == r)) {
            Some(r) => (HCA, r),
            None => (NIC, id),
        };
        metadata::apply(&mut dm, pool, name, Some(a));
    }
    metadata::env_of(std::slice::from_ref(&dm))
}

fn write(path: &std::path::Path, id: &str, env: Vec<String>) -> io::Result<()> {
    metadata::write(
        path,
        &metadata::pretty(&metadata::cdi_env_spec(CDI_KIND, id, env)),
    )
}

/// `Allocate`'s part for one container given `nics` (device ID, RDMA device), in order: each
/// NIC's spec at generation 1, every one with the container's whole `NCCL_IB_HCA`. Returns the
/// CDI IDs to name, in the same order. A NIC whose ID cannot name a CDI device (a virtual
/// link's odd name) gets none, with a warning: ADD writes none for it either, and the
/// container still gets its char devices and the others' env.
pub fn allocated(place: &Place, nics: &[(&str, Option<&str>)]) -> io::Result<Vec<String>> {
    let hcas: Vec<String> = nics
        .iter()
        .filter_map(|(_, r)| *r)
        .filter(|r| metadata::plain(r))
        .map(str::to_owned)
        .collect();
    let mut specs = Vec::new();
    for (id, rdma) in nics {
        match place.spec_path(id) {
            Ok(p) => specs.push((*id, *rdma, p)),
            Err(e) => log::warn!("{e}: no per-NIC env for it"),
        }
    }
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let _locked = place.lock()?;
    for (id, rdma, path) in &specs {
        write(path, id, env(id, &hcas, *rdma, None))?;
    }
    Ok(specs.iter().map(|(id, _, _)| cdi_id(id)).collect())
}

/// The device plugin's discovery: NIC `id`'s spec at generation 1 (its own RDMA device as
/// `NCCL_IB_HCA`) if it has none. `true` when written.
pub fn ensure(place: &Place, id: &str, rdma: Option<&str>) -> io::Result<bool> {
    let path = place.spec(id)?;
    if path.exists() {
        return Ok(false);
    }
    let _locked = place.lock()?;
    if path.exists() {
        return Ok(false);
    }
    let hcas: Vec<String> = rdma
        .filter(|r| metadata::plain(r))
        .map(str::to_owned)
        .into_iter()
        .collect();
    write(&path, id, env(id, &hcas, rdma, None))?;
    Ok(true)
}

/// `NCCL_IB_HCA`'s RDMA devices in the spec at `path` of NIC `id` (our own file: its kind, its
/// one device's name and every device name checked). `None`: no spec.
fn read_hcas(path: &std::path::Path, id: &str) -> io::Result<Option<Vec<String>>> {
    let bad = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    let body = match crate::files::read_regular_nofollow(path, MAX_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let spec: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| bad(format!("not JSON: {e}")))?;
    let device = &spec["devices"][0];
    if spec["kind"] != CDI_KIND || device["name"] != id {
        return Err(bad(format!(
            "not the spec of {} (kind {}, device {})",
            cdi_id(id),
            spec["kind"],
            device["name"]
        )));
    }
    let prefix = format!("{}=", metadata::env::HCA);
    let hca = device["containerEdits"]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .find_map(|v| v.strip_prefix(&prefix));
    let Some(list) = hca else {
        return Ok(Some(Vec::new()));
    };
    let list = list.strip_prefix('=').unwrap_or(list);
    let hcas: Vec<String> = list.split(',').map(str::to_owned).collect();
    if let Some(h) = hcas.iter().find(|h| !metadata::plain(h)) {
        return Err(bad(format!(
            "{h:?} in NCCL_IB_HCA is not an RDMA device name"
        )));
    }
    Ok(Some(hcas))
}

/// ADD's (`attached`: generation 2) or DEL's and the undo's (`None`: generation 1) rewrite of
/// NIC `id`'s spec, whose RDMA device is `rdma`, keeping the container's `NCCL_IB_HCA` as
/// `Allocate` wrote it. `Ok(None)` when the NIC has no spec (not the device plugin's, or a node
/// without `nicEnv` when it was allocated); `Ok(Some(generation))` when written.
pub fn update(
    place: &Place,
    id: &str,
    rdma: Option<&str>,
    attached: Option<&Attached>,
) -> io::Result<Option<i64>> {
    let path = place.spec(id)?;
    if !path.exists() {
        return Ok(None);
    }
    let _locked = place.lock()?;
    let Some(hcas) = read_hcas(&path, id)? else {
        return Ok(None);
    };
    write(&path, id, env(id, &hcas, rdma, attached))?;
    Ok(Some(if attached.is_some() { 2 } else { 1 }))
}

#[cfg(test)]
mod tests;
