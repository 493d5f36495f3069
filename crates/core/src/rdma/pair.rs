//! Pairing a NIC with its RDMA device, driver-neutral: the RDMA device whose port reports the
//! NIC as its netdev (RDMA netlink, what `rdma link show` prints: mlx5, irdma, erdma, rxe, siw
//! alike); else the PCI/auxiliary device's `infiniband/` directory in sysfs; else the node GUID
//! derived from the NIC's MAC (eRDMA is a PCI function of its own).

use super::netlink::{RdmaDevice, RdmaNlError, RdmaPort, RdmaSocket};
use crate::error::{Code, Error, Result};

pub fn rdma_error(what: impl std::fmt::Display, e: RdmaNlError) -> Error {
    Error::new(Code::Rdma, format!("{what}: {e}"))
}

/// The NIC as pairing sees it.
pub struct Nic<'a> {
    pub index: u32,
    pub name: &'a str,
    pub mac: &'a str,
}

/// Every RDMA device and port `sock` sees: what pairing and identity decide from.
pub(crate) fn devices_and_ports(sock: &mut RdmaSocket) -> Result<(Vec<RdmaDevice>, Vec<RdmaPort>)> {
    let devices = sock
        .devices()
        .map_err(|e| rdma_error("listing RDMA devices", e))?;
    let ports = sock
        .ports()
        .map_err(|e| rdma_error("listing RDMA ports", e))?;
    Ok((devices, ports))
}

/// The one RDMA device paired with `nic`, seen through `sock` (a socket in the NIC's netns:
/// ports only report netdevs of their own namespace).
pub fn pair(sock: &mut RdmaSocket, nic: &Nic<'_>) -> Result<Option<RdmaDevice>> {
    let (devices, ports) = devices_and_ports(sock)?;
    Ok(pair_from(&devices, &ports, nic)?.map(|p| {
        log::info!(
            "{} pairs with RDMA device {} (by {})",
            nic.name,
            p.device.name,
            p.how
        );
        p.device
    }))
}

/// A pairing and how it was found.
pub struct Paired {
    pub device: RdmaDevice,
    /// The port whose netdev is the NIC, when found that way.
    pub port: Option<u32>,
    pub how: &'static str,
}

/// The pairing rules over devices and ports already listed (ADD and `inspect` share them).
pub fn pair_from(
    devices: &[RdmaDevice],
    ports: &[RdmaPort],
    nic: &Nic<'_>,
) -> Result<Option<Paired>> {
    let by_port: Vec<&RdmaPort> = ports
        .iter()
        .filter(|p| p.netdev_index == Some(nic.index))
        .collect();
    let mut names: Vec<String> = by_port.iter().map(|p| p.dev_name.clone()).collect();
    let mut how = "RDMA netlink port netdev";
    if names.is_empty() {
        names = crate::sysfs::rdma_devices_of(nic.name);
        how = "sysfs device/infiniband";
    }
    if names.is_empty()
        && let Some(guid) = guid_from_mac(nic.mac)
    {
        names = devices
            .iter()
            .filter(|d| d.node_guid == Some(guid))
            .map(|d| d.name.clone())
            .collect();
        how = "node GUID from MAC";
    }
    names.sort();
    names.dedup();
    match names.as_slice() {
        [] => Ok(None),
        [one] => Ok(devices.iter().find(|d| d.name == *one).map(|d| Paired {
            device: d.clone(),
            port: by_port.first().map(|p| p.port),
            how,
        })),
        many => Err(Error::new(
            Code::DeviceAmbiguous,
            format!(
                "{} pairs with several RDMA devices ({}, by {how}); select the NIC with \"rdmaDevice\" instead",
                nic.name,
                many.join(", ")
            ),
        )),
    }
}

/// The EUI-64 node GUID an RDMA device derives from a MAC: flip the universal/local bit of the
/// first byte and put ff:fe in the middle (eRDMA, rxe).
pub(crate) fn guid_from_mac(mac: &str) -> Option<u64> {
    let [a, b1, c, d, e, f] = crate::link::parse_mac(mac)?;
    Some(u64::from_be_bytes([a ^ 0x02, b1, c, 0xff, 0xfe, d, e, f]))
}

/// Software RDMA drivers: their device dies when its netdev changes namespace.
pub fn is_soft_driver(d: &RdmaDevice) -> bool {
    matches!(d.driver.as_deref(), Some("rxe" | "siw"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_the_eui64_of_the_mac() {
        // Measured in the VM: rxe on 02:00:00:00:00:10 reports node GUID 0x000000fffe000010.
        assert_eq!(
            guid_from_mac("02:00:00:00:00:10"),
            Some(0x0000_00ff_fe00_0010)
        );
        assert_eq!(
            guid_from_mac("aa:bb:cc:dd:ee:ff"),
            Some(0xa8bb_ccff_fedd_eeff)
        );
        assert_eq!(guid_from_mac("zz"), None);
        assert_eq!(guid_from_mac(""), None);
    }
}
