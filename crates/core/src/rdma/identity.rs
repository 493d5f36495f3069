//! What identifies an RDMA device to the node's policy and to the `rdmaDevice` selector.
//!
//! Its node GUID, always: no pod can change it (`rdma dev set` renames, it does not re-GUID).
//! Its name only where no pod can rename it. In the kernel's default *shared* netns mode every
//! RDMA device is visible in every network namespace, and any process with `NET_ADMIN` in one
//! (a pod's) may rename any device (`rdma dev set mlx5_1 name mlx5_0`): two swapped names made
//! a policy by name admit the NIC it forbade (issue 18, case 5). In *exclusive* mode a device
//! is seen, and renamed, only in its own namespace, and the plugin renames a device a pod
//! renamed back before it leaves the pod: there a name is the node's.
//!
//! The decisions here are pure (devices and ports already listed), so they are unit-tested
//! without RDMA; `of_nic` and `netdevs_of_selector` do the one RDMA netlink read each.

use super::netlink::{NetnsMode, RdmaDevice, RdmaNlError, RdmaPort, RdmaSocket};
use super::pair::{Nic, pair_from, rdma_error};
use crate::error::{Code, Error, Result};

/// The RDMA device paired with a host NIC, as the policy judges it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RdmaId {
    /// Its name now (any pod may have chosen it, unless `name_is_the_nodes`).
    pub name: String,
    pub guid: Option<u64>,
    /// True only in exclusive mode: no pod can rename a device in the host's namespace.
    pub name_is_the_nodes: bool,
    /// Its uverbs char device (`uverbs0`), which no pod can rename: what a container is given.
    pub uverbs: Option<String>,
}

/// A node GUID as `rdma dev`, `ibv_devinfo` and sysfs `node_guid` print it:
/// `0200:00ff:fe00:0010` (four groups of four hex digits).
pub fn parse_guid(s: &str) -> Option<u64> {
    let groups: Vec<&str> = s.split(':').collect();
    if groups.len() != 4
        || !groups
            .iter()
            .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return None;
    }
    u64::from_str_radix(&groups.concat(), 16).ok()
}

pub fn format_guid(g: u64) -> String {
    let h = format!("{g:016x}");
    format!("{}:{}:{}:{}", &h[0..4], &h[4..8], &h[8..12], &h[12..16])
}

/// The identity of the RDMA device paired with `nic`, from devices and ports listed in one
/// read (name and GUID from the same device message, so a rename in between cannot mix them).
pub(crate) fn identify(
    devices: &[RdmaDevice],
    ports: &[RdmaPort],
    mode: NetnsMode,
    nic: &Nic<'_>,
) -> Result<Option<RdmaId>> {
    Ok(pair_from(devices, ports, nic)?.map(|p| RdmaId {
        name: p.device.name,
        guid: p.device.node_guid,
        name_is_the_nodes: mode == NetnsMode::Exclusive,
        uverbs: p.device.uverbs,
    }))
}

/// Every RDMA device and port the caller's (the host's) namespace sees, and the netns mode:
/// one read, judged as often as needed.
pub struct Snapshot {
    pub devices: Vec<RdmaDevice>,
    pub ports: Vec<RdmaPort>,
    pub mode: NetnsMode,
}

impl Snapshot {
    /// `None` on a node without RDMA netlink.
    pub fn read() -> Result<Option<Snapshot>> {
        let mut sock = match RdmaSocket::open() {
            Ok(s) => s,
            Err(RdmaNlError::Unavailable(_)) => return Ok(None),
            Err(e) => return Err(rdma_error("opening RDMA netlink", e)),
        };
        let mode = sock
            .netns_mode()
            .map_err(|e| rdma_error("reading the RDMA netns mode", e))?;
        let (devices, ports) = super::pair::devices_and_ports(&mut sock)?;
        Ok(Some(Snapshot {
            devices,
            ports,
            mode,
        }))
    }

    pub(crate) fn of(&self, nic: &Nic<'_>) -> Result<Option<RdmaId>> {
        identify(&self.devices, &self.ports, self.mode, nic)
    }
}

/// The RDMA device paired with the host NIC `nic`; `None` on a node without RDMA or for a NIC
/// without a device.
pub fn of_nic(nic: &Nic<'_>) -> Result<Option<RdmaId>> {
    match Snapshot::read()? {
        Some(s) => s.of(nic),
        None => Ok(None),
    }
}

/// The devices the `rdmaDevice` selector `sel` names: a node GUID names the devices with that
/// GUID, whatever they are called; a name names the device of that name only in exclusive
/// mode. In shared mode a name is refused (111) with the GUID to use instead: a pod could have
/// swapped it with another device's.
pub fn select<'a>(
    devices: &'a [RdmaDevice],
    mode: NetnsMode,
    sel: &str,
) -> Result<Vec<&'a RdmaDevice>> {
    if let Some(g) = parse_guid(sel) {
        return Ok(devices.iter().filter(|d| d.node_guid == Some(g)).collect());
    }
    let named: Vec<&RdmaDevice> = devices.iter().filter(|d| d.name == sel).collect();
    if mode == NetnsMode::Shared && !named.is_empty() {
        return Err(Error::new(
            Code::RdmaNetnsMode,
            format!(
                "rdmaDevice {sel:?} is a name, and in the shared RDMA netns mode any pod with NET_ADMIN can rename RDMA devices (`rdma dev set`), so it may not be the device the network meant; select it by its node GUID{} instead, or run the node in exclusive mode (`rdma system set netns exclusive`)",
                named
                    .iter()
                    .filter_map(|d| d.node_guid)
                    .map(|g| format!(" {}", format_guid(g)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ));
    }
    Ok(named)
}

/// The host netdevs of the devices `sel` names (the `rdmaDevice` selector), by RDMA netlink.
/// `None` when the node has no RDMA netlink (the caller falls back to sysfs for names).
pub fn netdevs_of_selector(sel: &str) -> Result<Option<Vec<String>>> {
    let Some(snap) = Snapshot::read()? else {
        return Ok(None);
    };
    let chosen = select(&snap.devices, snap.mode, sel)?;
    Ok(Some(
        snap.ports
            .iter()
            .filter(|p| chosen.iter().any(|d| d.index == p.dev_index))
            .filter_map(|p| p.netdev_name.clone())
            .collect(),
    ))
}

/// The net devices of the RDMA device the `rdmaDevice` selector `sel` names (a node GUID, or
/// a name where pods cannot rename devices: `identity::select`), from the host's view.
pub fn netdevs_of_rdma_device(sel: &str) -> Result<Vec<String>> {
    let mut names = match netdevs_of_selector(sel)? {
        Some(names) => names,
        // No RDMA netlink: nothing can rename a device either; sysfs knows the names.
        None => crate::sysfs::netdevs_of_rdma(sel),
    };
    names.sort();
    names.dedup();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: u32, name: &str, guid: u64) -> RdmaDevice {
        RdmaDevice {
            index,
            name: name.into(),
            node_guid: Some(guid),
            node_type: Some(1),
            protocol: Some("roce".into()),
            driver: Some("rxe".into()),
            uverbs: None,
            port_count: Some(1),
        }
    }

    fn port(dev: &RdmaDevice, netdev: u32, netdev_name: &str) -> RdmaPort {
        RdmaPort {
            dev_index: dev.index,
            dev_name: dev.name.clone(),
            port: 1,
            state: None,
            phys_state: None,
            netdev_index: Some(netdev),
            netdev_name: Some(netdev_name.into()),
        }
    }

    #[test]
    fn guids_parse_as_rdma_tools_print_them() {
        assert_eq!(
            parse_guid("0200:00ff:fe00:0010"),
            Some(0x0200_00ff_fe00_0010)
        );
        assert_eq!(format_guid(0x0200_00ff_fe00_0010), "0200:00ff:fe00:0010");
        for no in [
            "mlx5_0",
            "0200:00ff:fe00",
            "0200:00ff:fe00:001",
            "0200:00ff:fe00:00g0",
            "",
        ] {
            assert_eq!(parse_guid(no), None, "{no}");
        }
    }

    #[test]
    fn swapped_names_do_not_move_a_guid_and_a_name_is_refused_in_shared_mode() {
        // A pod swapped the names: eth-ok's device (GUID 1) is now called "rxe_bad", the
        // forbidden eth-bad's (GUID 2) "rxe_ok".
        let devices = [dev(0, "rxe_bad", 1), dev(1, "rxe_ok", 2)];
        let ports = [
            port(&devices[0], 10, "eth-ok"),
            port(&devices[1], 11, "eth-bad"),
        ];
        let bad = Nic {
            index: 11,
            name: "eth-bad",
            mac: "",
        };
        let id = identify(&devices, &ports, NetnsMode::Shared, &bad)
            .unwrap()
            .unwrap();
        assert_eq!(id.guid, Some(2));
        assert_eq!(id.name, "rxe_ok");
        assert!(!id.name_is_the_nodes);
        let id = identify(&devices, &ports, NetnsMode::Exclusive, &bad)
            .unwrap()
            .unwrap();
        assert!(id.name_is_the_nodes);
        // The selector: by GUID, the device whatever its name; by name, refused in shared
        // mode naming the GUID to use; taken in exclusive mode.
        let by_guid = select(&devices, NetnsMode::Shared, "0000:0000:0000:0001").unwrap();
        assert_eq!(by_guid.len(), 1);
        assert_eq!(by_guid[0].index, 0);
        let e = select(&devices, NetnsMode::Shared, "rxe_ok").unwrap_err();
        assert_eq!(e.code, Code::RdmaNetnsMode);
        assert!(
            e.msg.contains("0000:0000:0000:0002") && e.msg.contains("rename"),
            "{}",
            e.msg
        );
        assert_eq!(
            select(&devices, NetnsMode::Exclusive, "rxe_ok").unwrap()[0].index,
            1
        );
        // A name no device has is simply nothing (the caller says 110).
        assert!(
            select(&devices, NetnsMode::Shared, "mlx5_9")
                .unwrap()
                .is_empty()
        );
    }
}
