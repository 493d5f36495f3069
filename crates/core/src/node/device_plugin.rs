//! `devicePlugin` in the node configuration: the pools `rdma-host-device-agent device-plugin`
//! offers the kubelet, each an extended resource whose devices are the NICs its selectors match,
//! and the char devices the node lets pods have. Validated where the device plugin and
//! `node-config` read it; the CNI verbs never parse it.

use super::NicSelectors;
use serde::{Deserialize, Serialize};

/// `devicePlugin`: what `rdma-host-device-agent device-plugin` offers the kubelet. Each pool is one
/// extended resource; each NIC its selectors match is one device of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevicePluginConfig {
    pub pools: Vec<Pool>,
    /// Which RDMA management char devices `Allocate` hands out beside `uverbsN` and `rdma_cm`.
    #[serde(default)]
    pub char_devices: CharDevices,
    /// Per NIC a CDI device of env (`nic_env`): `Allocate` names it and writes its spec, ADD
    /// completes it with the RoCE v2 GID index it verified (`NCCL_IB_GID_INDEX`). Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_env: Option<NicEnvConfig>,
}

/// `devicePlugin.nicEnv`: where the per-NIC env CDI specs go. The device plugin writes them
/// (generation 1, at `Allocate` and for every NIC of its pools that has none), ADD and DEL
/// rewrite them (which read only this key of `devicePlugin`): the path is the node's, made
/// from this directory and the NIC's own device ID, never from a network configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NicEnvConfig {
    /// Off: no spec, no CDI name.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Where the runtime reads CDI specs.
    #[serde(default = "default_cdi_dir")]
    pub cdi_dir: std::path::PathBuf,
}

fn yes() -> bool {
    true
}
fn default_cdi_dir() -> std::path::PathBuf {
    super::dirs::DEFAULT_CDI_DIR.into()
}

impl Default for NicEnvConfig {
    fn default() -> Self {
        NicEnvConfig {
            enabled: true,
            cdi_dir: default_cdi_dir(),
        }
    }
}

impl NicEnvConfig {
    /// The same rule as `dra.deviceMetadata.cdiDir`'s ([`super::dirs::check_node_dir`]).
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        super::dirs::check_node_dir("devicePlugin.nicEnv.cdiDir", &self.cdi_dir)
    }

    /// Where the specs go, when enabled.
    pub fn place(&self) -> Option<crate::nic_env::Place> {
        self.enabled.then(|| crate::nic_env::Place {
            cdi_dir: self.cdi_dir.clone(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pool {
    /// The extended resource, `vendor-domain/name` (`rdma-host-device.io/rail`).
    pub resource_name: String,
    /// The same shape as `allowedNics`: any entry matching puts the NIC in this pool.
    pub selectors: NicSelectors,
}

impl Pool {
    /// The part after the `/`, upper-cased with `_` for anything else: the suffix of the
    /// environment variables `Allocate` sets (`rail` -> `RAIL`).
    pub fn env_suffix(&self) -> String {
        let short = self
            .resource_name
            .rsplit_once('/')
            .map_or(self.resource_name.as_str(), |(_, n)| n);
        short
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    }
}

/// Management interfaces (`umad*`, `issm*`): a process holding them can send MADs to the
/// fabric (issm: mark the port as a subnet manager). Off unless the node operator says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CharDevices {
    #[serde(default)]
    pub umad: bool,
    #[serde(default)]
    pub issm: bool,
    /// Also name each RDMA device's CDI device (`rdma-host-device.io/rdma=uverbsN`, from the
    /// spec `rdma-host-device-agent cdi` writes): a runtime that reads CDI then runs its memlock
    /// hook. Off by default: a runtime without the spec would fail the container.
    #[serde(default)]
    pub cdi: bool,
}

/// `vendor-domain/name` as the kubelet accepts an extended resource: a DNS subdomain (not
/// Kubernetes' own), then a name of letters, digits, `-`, `_`, `.` (63 at most) that starts and
/// ends with a letter or digit.
pub fn check_resource_name(r: &str) -> std::result::Result<(), String> {
    let (domain, name) = r
        .split_once('/')
        .ok_or_else(|| format!("resourceName {r:?} must be vendor-domain/name"))?;
    if !crate::names::is_dns_subdomain(domain, 253) {
        return Err(format!(
            "resourceName {r:?}: {domain:?} is not a DNS subdomain (lower-case letters, digits, '-', '.')"
        ));
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") || domain == "k8s.io" {
        return Err(format!(
            "resourceName {r:?}: the {domain} domain is Kubernetes' own; use your own"
        ));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > 63
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || !edge(name.chars().next())
        || !edge(name.chars().last())
    {
        return Err(format!(
            "resourceName {r:?}: the name after '/' must be 1-63 letters, digits, '-', '_', '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

impl DevicePluginConfig {
    /// What is wrong with it, for `node-config` and the device plugin's start.
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        if let Some(e) = &self.nic_env {
            e.check()?;
        }
        if self.pools.is_empty() {
            return Err("devicePlugin.pools is empty: give at least one pool".into());
        }
        let mut seen: Vec<(String, &str)> = Vec::new();
        for (i, p) in self.pools.iter().enumerate() {
            let at = format!("devicePlugin.pools[{i}]");
            check_resource_name(&p.resource_name).map_err(|e| format!("{at}: {e}"))?;
            if p.selectors.is_empty() {
                return Err(format!(
                    "{at} ({}): selectors is empty, so it would offer no NIC",
                    p.resource_name
                ));
            }
            for (j, q) in self.pools[..i].iter().enumerate() {
                if q.resource_name == p.resource_name {
                    return Err(format!(
                        "{at}: resourceName {} is also pools[{j}]'s",
                        p.resource_name
                    ));
                }
                if q.env_suffix() == p.env_suffix() {
                    return Err(format!(
                        "{at}: {} and pools[{j}]'s {} would set the same environment variables (*_{}); rename one",
                        p.resource_name,
                        q.resource_name,
                        p.env_suffix()
                    ));
                }
            }
            for e in p.selectors.entries() {
                if let Some((_, other)) = seen.iter().find(|(s, _)| *s == e) {
                    return Err(format!(
                        "{at} ({}): selector {e} is also in {other}'s: a NIC is in one pool only",
                        p.resource_name
                    ));
                }
                seen.push((e, &p.resource_name));
            }
        }
        Ok(())
    }
}
