//! The device-info file (k8snetworkplumbingwg device-info spec 1.1.0): what tells the pod which
//! PCI function and RDMA device are its own. Multus passes its path through the
//! `CNIDeviceInfoFile` capability (`runtimeConfig.CNIDeviceInfoFile`), may have copied a device
//! plugin's file there already, and after ADD copies the file into the pod's
//! `k8s.v1.cni.cncf.io/network-status` annotation as `device-info`, which the pod reads through
//! the downward API (say, to set `NCCL_IB_HCA`).
//!
//! Who writes the path: Multus, or a tenant's NAD carrying `runtimeConfig` itself. So the path
//! must name a file directly in the node's `deviceInfoDir` (checked when the config is parsed);
//! the file is written through a temp file and a rename (a symlink there is replaced, never
//! followed) and read with O_NOFOLLOW, never past a size bound.

use crate::error::{Code, Error, Result};
use serde_json::{Map, Value, json};
use std::fs;
use std::path::{Path, PathBuf};

/// Where Multus puts the CNI's device-info files (the spec's `devinfo/cni`).
pub const DEFAULT_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo/cni";
const VERSION: &str = "1.1.0";
/// A device-info file is a few hundred bytes; one a device plugin wrote is read up to this.
const MAX_LEN: u64 = 64 * 1024;

/// What the pod is told about its NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    pub pci_address: Option<String>,
    /// The physical function's PCI address, when the NIC is a virtual function.
    pub pf_pci_address: Option<String>,
    /// The RDMA device's name as the pod sees it.
    pub rdma_device: Option<String>,
}

impl DeviceInfo {
    /// Nothing to say (a virtual NIC without an RDMA device).
    pub fn is_empty(&self) -> bool {
        self.pci_address.is_none() && self.rdma_device.is_none()
    }

    /// `existing` (a device plugin's file Multus copied here) with ours filled in: its other
    /// keys (a representor, say) are kept, our PCI address and RDMA device win.
    fn merged_into(&self, existing: Option<Value>) -> Value {
        let mut top = match existing {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        top.insert("type".into(), json!("pci"));
        top.insert("version".into(), json!(VERSION));
        let mut pci = match top.remove("pci") {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        for (key, v) in [
            ("pci-address", &self.pci_address),
            ("pf-pci-address", &self.pf_pci_address),
            ("rdma-device", &self.rdma_device),
        ] {
            if let Some(v) = v {
                pci.insert(key.into(), json!(v));
            }
        }
        top.insert("pci".into(), Value::Object(pci));
        Value::Object(top)
    }
}

/// The path a config asks for, if it names a file directly in `dir`; otherwise why not.
pub fn confine(path: &Path, dir: &Path) -> Result<PathBuf> {
    let bad = |why: &str| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "runtimeConfig.CNIDeviceInfoFile {}: {why} (the node's deviceInfoDir is {})",
                path.display(),
                dir.display()
            ),
        )
    };
    let name = path.file_name().ok_or_else(|| bad("names no file"))?;
    if path.parent() != Some(dir) {
        return Err(bad("must be a file directly in the node's deviceInfoDir"));
    }
    if name.len() > 255 || name.to_string_lossy().starts_with('.') {
        return Err(bad("not a plain file name"));
    }
    Ok(path.to_path_buf())
}

/// The device-info file must be this attachment's: Multus names it
/// `<network>-<containerID>_<ifname>` (`/` as `-`), so its name ends with
/// `-<containerID>_<ifname>`. A config naming another attachment's file (a NAD can carry
/// `runtimeConfig` itself) would have DEL remove that file.
pub fn check_owner(path: &Path, container_id: &str, ifname: &str) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let own = format!("-{container_id}_{ifname}").replace('/', "-");
    if name.ends_with(&own) {
        return Ok(());
    }
    Err(Error::new(
        Code::InvalidConfig,
        format!(
            "runtimeConfig.CNIDeviceInfoFile {}: not this attachment's (Multus names it <network>{own})",
            path.display()
        ),
    ))
}

/// Write (or complete) the device-info file at `path`.
pub fn write(path: &Path, info: &DeviceInfo) -> Result<()> {
    let fail = |what: String| {
        Error::new(
            Code::Io,
            format!("device-info file {}: {what}", path.display()),
        )
    };
    let existing = read(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let body = serde_json::to_vec(&info.merged_into(existing))
        .map_err(|e| fail(format!("cannot encode it: {e}")))?;
    crate::files::replace(path, &body).map_err(|e| fail(format!("cannot write it: {e}")))
}

/// Remove the device-info file; gone already is fine, and so is anything but a file there
/// (left alone: not ours).
pub fn remove(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() && !m.file_type().is_symlink() => {
            log::warn!("device-info: {} is not a file; left alone", path.display());
            return Ok(());
        }
        _ => {}
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::new(
            Code::Io,
            format!("cannot remove device-info file {}: {e}", path.display()),
        )),
        _ => Ok(()),
    }
}

/// A device plugin's file already there, as JSON: `None` if there is none, or if it is not a
/// regular file of JSON within the bound (then ours replaces it).
fn read(path: &Path) -> std::io::Result<Option<Value>> {
    use std::io::ErrorKind;
    match crate::files::read_regular_nofollow(path, MAX_LEN) {
        Ok(body) => Ok(serde_json::from_slice(&body).ok()),
        // None there; a symlink (ELOOP), something not a regular file, or too long:
        // replaced, never followed.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Ok(None),
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::FileTooLarge) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> DeviceInfo {
        DeviceInfo {
            pci_address: Some("0000:3b:00.2".into()),
            pf_pci_address: Some("0000:3b:00.0".into()),
            rdma_device: Some("mlx5_2".into()),
        }
    }

    #[test]
    fn a_new_file_says_pci_address_pf_and_rdma_device() {
        let v = info().merged_into(None);
        assert_eq!(
            v,
            json!({"type": "pci", "version": "1.1.0", "pci": {
                "pci-address": "0000:3b:00.2", "pf-pci-address": "0000:3b:00.0",
                "rdma-device": "mlx5_2"}})
        );
    }

    #[test]
    fn a_device_plugins_file_keeps_its_other_keys_and_gains_the_rdma_device() {
        let dp = json!({"type": "pci", "version": "1.0.0",
            "pci": {"pci-address": "0000:3b:00.2", "representor-device": "eth5"}});
        let only_rdma = DeviceInfo {
            rdma_device: Some("mlx5_2".into()),
            ..Default::default()
        };
        let v = only_rdma.merged_into(Some(dp));
        assert_eq!(v["version"], "1.1.0");
        assert_eq!(v["pci"]["representor-device"], "eth5");
        assert_eq!(v["pci"]["pci-address"], "0000:3b:00.2");
        assert_eq!(v["pci"]["rdma-device"], "mlx5_2");
    }

    #[test]
    fn a_symlink_at_the_path_is_replaced_never_followed() {
        let dir = std::env::temp_dir().join(format!("rhd-devinfo-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, "keep").unwrap();
        let path = dir.join("net-c1_net1-device.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write(&path, &info()).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert!(fs::symlink_metadata(&path).unwrap().is_file());
        let v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["pci"]["rdma-device"], "mlx5_2");
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert!(!path.exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_file_must_be_this_attachments_as_multus_names_it() {
        let dir = Path::new(DEFAULT_DIR);
        assert!(check_owner(&dir.join("rail-0-c1f2_net1"), "c1f2", "net1").is_ok());
        for other in [
            "rail-0-victim_net1",
            "rail-0-c1f2_net2",
            "c1f2_net1-x",
            "rail-0-xc1f2_net1x",
        ] {
            assert!(
                check_owner(&dir.join(other), "c1f2", "net1").is_err(),
                "{other}"
            );
        }
    }

    #[test]
    fn only_a_file_directly_in_the_nodes_dir_is_accepted() {
        let dir = Path::new(DEFAULT_DIR);
        assert!(confine(&dir.join("net-c1-net1-device.json"), dir).is_ok());
        for bad in [
            "/etc/passwd",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/../../../../etc/cron.d/x",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/sub/x.json",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/.hidden",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/",
            "relative.json",
        ] {
            let e = confine(Path::new(bad), dir).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig, "{bad}");
        }
    }
}
