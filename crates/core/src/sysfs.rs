//! What sysfs (and, for a virtual link's driver, one ethtool ioctl) says about net devices:
//! the devices behind them, their PCI addresses, drivers, NUMA nodes, PCI roots and RDMA
//! devices. The CNI verbs' and `inspect`'s reads of /sys/class/net, /sys/bus and /sys/devices
//! live here. Four modules read sysfs trees of their own, each for one concern: the GID table
//! (`rdma/verbs/sysfs.rs`, through a private sysfs mount inside the pod's netns), uverbs char
//! devices (`cdi.rs`, `device_plugin/allocate.rs`), RDMA port counters (`metrics/collect.rs`,
//! which `inspect` reuses) and the device plugin's per-tick link and port state
//! (the agent's `health.rs`); those take the sysfs root as a parameter, so tests give them a
//! fake tree.

use std::path::{Path, PathBuf};

pub fn list_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Net devices of a device directory: its `net/`, or its virtio child's `net/`.
pub fn netdevs_of_device_dir(dir: &Path) -> Vec<String> {
    let mut names = list_dir(&dir.join("net"));
    for child in list_dir(dir).iter().filter(|c| c.starts_with("virtio")) {
        names.extend(list_dir(&dir.join(child).join("net")));
    }
    names
}

/// `kernelpath`: a device directory under /sys/devices, or a net device's own directory.
pub fn netdevs_under(p: &Path) -> Vec<String> {
    let names = netdevs_of_device_dir(p);
    if !names.is_empty() {
        return names;
    }
    let is_netdev_dir = p.parent().and_then(Path::file_name) == Some("net".as_ref());
    match (is_netdev_dir && p.exists(), p.file_name()) {
        (true, Some(f)) => vec![f.to_string_lossy().into_owned()],
        _ => Vec::new(),
    }
}

/// `pciBusID` / `deviceID`: a PCI function or an auxiliary-bus device (SF).
pub fn netdevs_of_bus_device(id: &str) -> Vec<String> {
    ["/sys/bus/pci/devices", "/sys/bus/auxiliary/devices"]
        .iter()
        .map(|bus| PathBuf::from(bus).join(id))
        .flat_map(|d| netdevs_of_device_dir(&d))
        .collect()
}

/// The auxiliary-bus device behind a net device (`mlx5_core.sf.2` for a sub-function).
pub fn aux_of(ifname: &str) -> Option<String> {
    let dev = std::fs::canonicalize(format!("/sys/class/net/{ifname}/device")).ok()?;
    let base = dev.file_name()?.to_string_lossy().into_owned();
    Path::new("/sys/bus/auxiliary/devices")
        .join(&base)
        .exists()
        .then_some(base)
}

/// The PCI address behind a net device (through a virtio hop if there is one).
pub fn pci_of(ifname: &str) -> Option<String> {
    let dev = std::fs::canonicalize(format!("/sys/class/net/{ifname}/device")).ok()?;
    let base = dev.file_name()?.to_string_lossy().into_owned();
    if is_pci_address(&base) {
        return Some(base);
    }
    let parent = dev.parent()?.file_name()?.to_string_lossy().into_owned();
    (base.starts_with("virtio") && is_pci_address(&parent)).then_some(parent)
}

/// `dddd:bb:dd.f`
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

pub fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

pub(crate) fn link_basename(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
}

/// The physical function of a PCI virtual function (`physfn`); `None` for anything else.
pub fn physfn_of(pci: &str) -> Option<String> {
    link_basename(format!("/sys/bus/pci/devices/{pci}/physfn")).filter(|p| is_pci_address(p))
}

pub fn pci_driver(pci: &str) -> Option<String> {
    link_basename(format!("/sys/bus/pci/devices/{pci}/driver"))
}

/// The NIC's driver: sysfs for devices with a bus, else the ethtool driver name (veth, bond...).
pub fn nic_driver(ifname: &str) -> Option<String> {
    link_basename(format!("/sys/class/net/{ifname}/device/driver"))
        .or_else(|| ethtool_driver(ifname))
}

/// `ETHTOOL_GDRVINFO`: what `ethtool -i` prints as "driver".
pub fn ethtool_driver(ifname: &str) -> Option<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    if ifname.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: all-zero is a valid value for these plain C structs.
    let mut info: DrvInfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    // SAFETY: as above.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut info as *mut DrvInfo).cast();
    // SAFETY: a plain datagram socket, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `ifr` names the interface and points at `info`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut ifr) };
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return None;
    }
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    let name = String::from_utf8_lossy(&info.driver[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

/// The PCI root complex (host bridge) a PCI or auxiliary device hangs off, as sysfs names it
/// (`pci0000:3a`): devices under one root reach each other (and the GPUs there) without
/// crossing the CPU interconnect. `None` for a device that is not under a PCI root.
pub(crate) fn pci_root(sys: &Path, bus_id: &str) -> Option<String> {
    let sys = std::fs::canonicalize(sys).ok()?;
    let devices = sys.join("devices");
    ["pci", "auxiliary"].iter().find_map(|bus| {
        let dir =
            std::fs::canonicalize(sys.join("bus").join(bus).join("devices").join(bus_id)).ok()?;
        let root = dir.strip_prefix(&devices).ok()?.components().next()?;
        let root = root.as_os_str().to_str()?;
        root.starts_with("pci").then(|| root.to_string())
    })
}

/// The NUMA node of a PCI function or auxiliary-bus device (`bus_id`), from `numa_node` in its
/// sysfs directory or, for a sub-function, its nearest ancestor's; `None` when the kernel does
/// not know (`-1`) or says nothing. `sys` is `/sys` (a fake tree in unit tests).
pub(crate) fn numa_node(sys: &Path, bus_id: &str) -> Option<i64> {
    let sys = std::fs::canonicalize(sys).ok()?;
    for bus in ["pci", "auxiliary"] {
        let Ok(mut dir) =
            std::fs::canonicalize(sys.join("bus").join(bus).join("devices").join(bus_id))
        else {
            continue;
        };
        while dir.starts_with(&sys) && dir != sys {
            if let Ok(v) = std::fs::read_to_string(dir.join("numa_node")) {
                return v.trim().parse::<i64>().ok().filter(|n| *n >= 0);
            }
            dir.pop();
        }
    }
    None
}

/// The RDMA device on the same device as a net device (`/sys/class/net/<name>/device/infiniband`),
/// for the policy's `rdmaDevices`; ADD's own pairing (RDMA netlink) decides what moves.
pub fn rdma_of(ifname: &str) -> Option<String> {
    rdma_devices_of(ifname).into_iter().next()
}

/// Every RDMA device on the same device as net device `ifname`, sorted (none for a virtual
/// link, or a software RDMA device, which has no `device/infiniband`).
pub(crate) fn rdma_devices_of(ifname: &str) -> Vec<String> {
    list_dir(
        &Path::new("/sys/class/net")
            .join(ifname)
            .join("device/infiniband"),
    )
}

/// The net devices on the same device as RDMA device `dev` (`device/net`), sorted.
pub fn netdevs_of_rdma(dev: &str) -> Vec<String> {
    list_dir(
        &Path::new("/sys/class/infiniband")
            .join(dev)
            .join("device/net"),
    )
}

/// Whether this node has any RDMA device (`/sys/class/infiniband` exists once ib_core has one
/// registered).
pub fn has_rdma() -> bool {
    Path::new("/sys/class/infiniband").exists()
}

/// Whether `ifname` has a device behind it (hardware, or a virtio/SF device), not a virtual link.
pub fn has_device(ifname: &str) -> bool {
    Path::new("/sys/class/net")
        .join(ifname)
        .join("device")
        .exists()
}

/// Whether net device `ifname` exists in the host's namespace as sysfs shows it.
pub fn netdev_exists(ifname: &str) -> bool {
    Path::new("/sys/class/net").join(ifname).exists()
}

/// A net device's operational state (`operstate`: up, down, lowerlayerdown, ...).
pub fn operstate(ifname: &str) -> Option<String> {
    read_trimmed(&format!("/sys/class/net/{ifname}/operstate"))
}

/// Whether the device `dev` exists on bus `bus` (`/sys/bus/<bus>/devices/<dev>`): a PCI function
/// or auxiliary device that was not removed or unplugged.
pub fn bus_device_exists(bus: &str, dev: &str) -> bool {
    Path::new("/sys/bus")
        .join(bus)
        .join("devices")
        .join(dev)
        .exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_address_shape() {
        assert!(is_pci_address("0000:3b:00.1"));
        assert!(!is_pci_address("mlx5_core.sf.2"));
        assert!(!is_pci_address("0000:3b:00"));
    }

    #[test]
    fn kernelpath_of_a_virtual_netdev_is_its_name() {
        // lo always exists and lives under /sys/devices/virtual/net/lo.
        assert_eq!(
            netdevs_under(Path::new("/sys/devices/virtual/net/lo")),
            ["lo"]
        );
        assert!(netdevs_under(Path::new("/sys/devices/virtual/net/nope0")).is_empty());
    }

    #[test]
    fn numa_node_of_a_pci_function_or_a_sub_function() {
        let root = std::env::temp_dir().join(format!("rhd-numa-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let pf = root.join("devices/pci0000:3a/0000:3b:00.0");
        let sf = pf.join("mlx5_core.sf.2");
        let unknown = root.join("devices/pci0000:00/0000:00:05.0");
        for d in [&sf, &unknown] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(pf.join("numa_node"), "1\n").unwrap();
        std::fs::write(unknown.join("numa_node"), "-1\n").unwrap();
        for (bus, id, dev) in [
            ("pci", "0000:3b:00.0", &pf),
            ("auxiliary", "mlx5_core.sf.2", &sf),
            ("pci", "0000:00:05.0", &unknown),
        ] {
            let b = root.join("bus").join(bus).join("devices");
            std::fs::create_dir_all(&b).unwrap();
            std::os::unix::fs::symlink(dev, b.join(id)).unwrap();
        }
        assert_eq!(numa_node(&root, "0000:3b:00.0"), Some(1));
        assert_eq!(
            numa_node(&root, "mlx5_core.sf.2"),
            Some(1),
            "the SF's parent PF"
        );
        assert_eq!(numa_node(&root, "0000:00:05.0"), None, "-1 is no topology");
        assert_eq!(numa_node(&root, "veth0"), None);
        assert_eq!(
            pci_root(&root, "0000:3b:00.0").as_deref(),
            Some("pci0000:3a")
        );
        assert_eq!(
            pci_root(&root, "mlx5_core.sf.2").as_deref(),
            Some("pci0000:3a")
        );
        assert_eq!(
            pci_root(&root, "0000:00:05.0").as_deref(),
            Some("pci0000:00")
        );
        assert_eq!(pci_root(&root, "veth0"), None);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn unknown_bus_device_has_no_netdevs() {
        assert!(netdevs_of_bus_device("0000:ff:1f.7").is_empty());
    }
}
