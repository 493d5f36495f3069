//! Pairing a NIC with its RDMA device, driver-neutral.

use crate::error::Result;
use std::path::Path;

/// The net devices that belong to RDMA device `dev`, through sysfs
/// (/sys/class/infiniband/DEV/device/net/): works for PCI and auxiliary-bus devices.
pub fn netdevs_of_rdma_device(dev: &str) -> Result<Vec<String>> {
    let dir = Path::new("/sys/class/infiniband")
        .join(dev)
        .join("device/net");
    Ok(std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default())
}
