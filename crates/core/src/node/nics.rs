//! The node's NIC policy: which NICs may be handed to pods (`allowedNics`, `allowedUplinks`),
//! judged on what a NIC is ([`NicFacts`]) by [`Node::admit`], for ADD, the device plugin and the
//! DRA driver alike.

use super::Node;
use crate::error::{Code, Error, Result};
use crate::rdma::identity::{format_guid, parse_guid};
use serde::{Deserialize, Serialize};

/// NICs named by what they are: by name, PCI function, driver or RDMA device; a NIC matches
/// if any entry names it. The node's `allowedNics` (absent: any NIC except the node's own
/// uplinks), a device-plugin pool's and a DRA rail's `selectors`, and `dra.nics`. Not the
/// network configuration's request for one NIC, which is the plugin's `NicRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NicSelectors {
    /// Host interface names (the primary name, as `ip link` shows it).
    #[serde(default)]
    pub names: Vec<String>,
    /// PCI functions, `0000:3b:00.1`.
    #[serde(default)]
    pub pci_addresses: Vec<String>,
    /// Kernel drivers, `mlx5_core`, `irdma`'s `ice`, ...
    #[serde(default)]
    pub drivers: Vec<String>,
    /// RDMA devices by node GUID (`0200:00ff:fe00:0010`, as `rdma dev` prints it), or by name
    /// (`mlx5_0`): a name matches only where no pod can rename devices (exclusive netns mode),
    /// see `rdma::identity`.
    #[serde(default)]
    pub rdma_devices: Vec<String>,
}

impl NicSelectors {
    /// Does any entry name this NIC?
    pub fn matches(&self, nic: &NicFacts<'_>) -> bool {
        let any = |list: &[String], v: Option<&str>| v.is_some_and(|v| list.iter().any(|x| x == v));
        any(&self.names, Some(nic.name))
            || any(&self.pci_addresses, nic.pci)
            || any(&self.drivers, nic.driver)
            || self.rdma_devices.iter().any(|e| rdma_entry_matches(e, nic))
    }

    /// `rdmaDevices` entries that name this NIC's RDMA device by a name a pod may have given
    /// it (shared netns mode): they do not count, and the refusal says why.
    pub(super) fn untrusted_rdma_names<'a>(&'a self, nic: &NicFacts<'_>) -> Vec<&'a str> {
        self.rdma_devices
            .iter()
            .filter(|e| {
                parse_guid(e).is_none() && !nic.rdma_name_is_the_nodes && nic.rdma_device == Some(e)
            })
            .map(String::as_str)
            .collect()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.names.is_empty()
            && self.pci_addresses.is_empty()
            && self.drivers.is_empty()
            && self.rdma_devices.is_empty()
    }

    /// Every entry as `key value`, to find one named by two pools.
    pub(super) fn entries(&self) -> impl Iterator<Item = String> + '_ {
        [
            ("names", &self.names),
            ("pciAddresses", &self.pci_addresses),
            ("drivers", &self.drivers),
            ("rdmaDevices", &self.rdma_devices),
        ]
        .into_iter()
        .flat_map(|(k, l)| l.iter().map(move |v| format!("{k} {v:?}")))
    }
}

/// What the NIC is, as far as the node policy cares.
#[derive(Debug, Default)]
pub struct NicFacts<'a> {
    pub name: &'a str,
    pub pci: Option<&'a str>,
    pub driver: Option<&'a str>,
    /// Its RDMA device's name now, its node GUID, and whether that name is the node's (no pod
    /// can rename a device: exclusive netns mode) or may be a pod's choice (shared mode).
    pub rdma_device: Option<&'a str>,
    pub rdma_guid: Option<u64>,
    pub rdma_name_is_the_nodes: bool,
    /// Why the node itself needs this NIC (default route, global address, bond port), if it does.
    pub uplink: Vec<String>,
    /// Why this link may have been made from another network namespace (a veth whose peer,
    /// or a macvlan whose lower, is in another namespace: IFLA_LINK_NETNSID), if it may: a
    /// pod with NET_ADMIN can make such a link on the host under any free name. Only
    /// `allowedNics.names` naming it lets it through.
    pub made_elsewhere: Option<String>,
}

/// Does one `rdmaDevices` entry name this NIC's RDMA device? A node GUID by the device's GUID;
/// a name only when no pod can have given it (`rdma::identity`).
fn rdma_entry_matches(entry: &str, nic: &NicFacts<'_>) -> bool {
    match parse_guid(entry) {
        Some(g) => nic.rdma_guid == Some(g),
        None => nic.rdma_name_is_the_nodes && nic.rdma_device == Some(entry),
    }
}

impl Node {
    /// Why this NIC may not be handed to a pod, or `Ok` when it may.
    pub fn admit(&self, nic: &NicFacts<'_>) -> Result<()> {
        let refuse = |why: String| {
            Error::new(
                Code::NotAllowed,
                format!(
                    "{} may not be handed to a pod: {why} (node policy: {})",
                    nic.name, self.source
                ),
            )
        };
        if let Some(p) = &self.allowed_nics
            && !p.matches(nic)
        {
            let untrusted = p.untrusted_rdma_names(nic);
            return Err(refuse(format!(
                "it is not in allowedNics (name {}, pci {}, driver {}, rdma device {}{}){}",
                nic.name,
                nic.pci.unwrap_or("none"),
                nic.driver.unwrap_or("none"),
                nic.rdma_device.unwrap_or("none"),
                nic.rdma_guid
                    .map(|g| format!(" node GUID {}", format_guid(g)))
                    .unwrap_or_default(),
                if untrusted.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; rdmaDevices {untrusted:?} matched only by name, and in the shared RDMA netns mode any pod with NET_ADMIN can rename RDMA devices (`rdma dev set`): list the device's node GUID instead{}",
                        nic.rdma_guid
                            .map(|g| format!(" ({})", format_guid(g)))
                            .unwrap_or_default()
                    )
                },
            )));
        }
        if let Some(why) = &nic.made_elsewhere
            && !self
                .allowed_nics
                .as_ref()
                .is_some_and(|p| p.names.iter().any(|n| n == nic.name))
        {
            return Err(refuse(format!(
                "{why}, so any pod with NET_ADMIN and no user namespace may have made it on the host (through a network namespace id), under any free name, another pod's NIC's included; list it in allowedNics.names to hand it over anyway"
            )));
        }
        if !nic.uplink.is_empty() {
            let listed = self
                .allowed_uplinks
                .iter()
                .any(|u| u == nic.name || Some(u.as_str()) == nic.pci);
            if !listed {
                return Err(refuse(format!(
                    "the node itself uses it ({}); list it in allowedUplinks to hand it over anyway",
                    nic.uplink.join("; ")
                )));
            }
            log::warn!(
                "{} is used by the node ({}) and allowed by allowedUplinks; its host addresses and routes will not come back on DEL",
                nic.name,
                nic.uplink.join("; ")
            );
        }
        Ok(())
    }
}
