//! `dra` in the node configuration: what `rdma-host-device-agent dra` publishes as this node's
//! ResourceSlice (`dra::slices`): which NICs, the `k8s.cni.cncf.io/resourceName` attribute
//! Multus matches a NAD's `resourceName` against, and the rail each NIC is on. Written by the
//! node operator; parsed by the agent and `node-config`; the CNI verbs read `deviceMetadata` alone
//! (`Node::dra_metadata`).

use super::NicSelectors;
use super::device_plugin::check_resource_name;
use serde::{Deserialize, Serialize};

/// `dra`: what the DRA driver publishes. Every NIC it publishes is also one the node policy
/// (`allowedNics`, never an uplink unless in `allowedUplinks`) lets ADD hand to a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DraConfig {
    /// Publish only the NICs these select. Absent: every NIC backed by a device (a PCI
    /// function or an auxiliary-bus device), never a virtual link (veth, bridge, ...): the
    /// runtime creates one per pod, which would churn the slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics: Option<NicSelectors>,
    /// The `k8s.cni.cncf.io/resourceName` attribute of every device: Multus (DRA mode) hands a
    /// device's `k8s.cni.cncf.io/deviceID` to the CNI of the NAD whose
    /// `k8s.v1.cni.cncf.io/resourceName` equals it. Absent: the attribute is not published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// Rails: the first whose selectors match a NIC names its `rdma-host-device.io/rail`.
    #[serde(default)]
    pub rails: Vec<Rail>,
    /// The extended resource this node serves through DRA: the `spec.extendedResourceName` of
    /// the DeviceClass (conf/k8s/dra.yaml), so that a pod's `resources.limits` of it gets a
    /// claim the scheduler makes (KEP-5004). The scheduler uses DRA for it only on nodes whose
    /// allocatable has none of it, so `devicePlugin` may not offer the same name here (both
    /// halves refuse to start), and the device plugin, with no pools, idles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resource_name: Option<String>,
    /// Where the KEP-5304 device metadata goes (`dra::metadata`); absent: none is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_metadata: Option<DeviceMetadataConfig>,
}

/// `dra.deviceMetadata`: where prepare writes each request's metadata file and CDI specs, and
/// where ADD (which reads only this key of `dra`) completes them. The paths ADD writes come
/// from here and from the claim's names, never from a network configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceMetadataConfig {
    /// Off (or no `deviceMetadata`): no metadata file, no CDI spec, no env.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The driver's plugin data directory; the files go in its `dra-device-metadata/`.
    #[serde(default = "default_plugin_data_dir")]
    pub plugin_data_dir: std::path::PathBuf,
    /// Where the runtime reads CDI specs.
    #[serde(default = "default_cdi_dir")]
    pub cdi_dir: std::path::PathBuf,
}

fn yes() -> bool {
    true
}
pub(crate) const DEFAULT_PLUGIN_DATA_DIR: &str = "/var/lib/kubelet/plugins/rdma-host-device.io";
pub use super::dirs::DEFAULT_CDI_DIR;
fn default_plugin_data_dir() -> std::path::PathBuf {
    DEFAULT_PLUGIN_DATA_DIR.into()
}
fn default_cdi_dir() -> std::path::PathBuf {
    DEFAULT_CDI_DIR.into()
}

impl Default for DeviceMetadataConfig {
    fn default() -> Self {
        DeviceMetadataConfig {
            enabled: true,
            plugin_data_dir: default_plugin_data_dir(),
            cdi_dir: default_cdi_dir(),
        }
    }
}

impl DeviceMetadataConfig {
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        super::dirs::check_node_dir("dra.deviceMetadata.pluginDataDir", &self.plugin_data_dir)?;
        super::dirs::check_node_dir("dra.deviceMetadata.cdiDir", &self.cdi_dir)
    }

    /// Where the files go, when enabled.
    pub fn place(&self) -> Option<crate::dra::metadata::Place> {
        self.enabled.then(|| crate::dra::metadata::Place {
            plugin_data_dir: self.plugin_data_dir.clone(),
            cdi_dir: self.cdi_dir.clone(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rail {
    /// The rail's name as claims select it (`device.attributes["rdma-host-device.io"].rail`).
    pub name: String,
    pub selectors: NicSelectors,
}

/// The most a string attribute may hold (resource.k8s.io/v1 `DeviceAttribute.string`).
pub const MAX_ATTRIBUTE_STRING: usize = 64;

impl DraConfig {
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        if let Some(m) = &self.device_metadata {
            m.check()?;
        }
        if let Some(r) = &self.resource_name {
            check_resource_name(r).map_err(|e| format!("dra.{e}"))?;
            if r.len() > MAX_ATTRIBUTE_STRING {
                return Err(format!(
                    "dra.resourceName {r:?} is longer than {MAX_ATTRIBUTE_STRING} characters (the API's limit for an attribute)"
                ));
            }
        }
        if let Some(r) = &self.extended_resource_name {
            check_resource_name(r).map_err(|e| format!("dra.extended{}", capitalised(&e)))?;
        }
        if let Some(n) = &self.nics
            && n.is_empty()
        {
            return Err("dra.nics is empty, so no NIC would be published; leave it out to publish every NIC with a device".into());
        }
        for (i, r) in self.rails.iter().enumerate() {
            if r.name.is_empty() || r.name.len() > MAX_ATTRIBUTE_STRING {
                return Err(format!(
                    "dra.rails[{i}]: name must be 1-{MAX_ATTRIBUTE_STRING} characters"
                ));
            }
            if r.selectors.is_empty() {
                return Err(format!(
                    "dra.rails[{i}] ({}): selectors is empty, so no NIC is on it",
                    r.name
                ));
            }
            if self.rails[..i].iter().any(|q| q.name == r.name) {
                return Err(format!("dra.rails[{i}]: rail {:?} is named twice", r.name));
            }
        }
        Ok(())
    }
}

/// `resourceName ...` as `ResourceName ...`, for a message about `extendedResourceName`.
fn capitalised(e: &str) -> String {
    let mut c = e.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}
