//! Is a device usable: what `ListAndWatch` reports as `Healthy` or `Unhealthy`.
//!
//! A NIC in a pod (its attachment record holds) is Healthy: it is in use, and the kubelet
//! must not think its pod lost it. A NIC on the host is Unhealthy when its netdev is gone, when
//! it is up without carrier (the wire is dead), or when its RDMA device vanished or has a port
//! DOWN while the netdev has carrier. An admin-down NIC on the host (how free NICs usually
//! wait: ADD sets it up in the pod) has no carrier to judge and is Healthy.
//!
//! Read from sysfs (`/sys/class/net`, `/sys/class/infiniband`) every tick: a few small files
//! per NIC, no netlink, so a change reaches `ListAndWatch` within one tick.

use rdma_host_device_core::inventory::Nic;
use std::path::Path;

/// What sysfs says about a NIC now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its netdev is in the host's namespace.
    pub on_host: bool,
    /// IFF_UP.
    pub admin_up: bool,
    /// `carrier`: unknown (`None`) while the link is admin down.
    pub carrier: Option<bool>,
    /// Its RDMA device (if it had one) is still there.
    pub rdma_present: bool,
    /// A port of its RDMA device says `DOWN`.
    pub port_down: bool,
}

/// `Ok` for Healthy, else why not (for the log).
pub fn judge(nic: &Nic, seen: &Seen) -> std::result::Result<(), String> {
    if nic.attached {
        return Ok(());
    }
    if !seen.on_host {
        return Err("its netdev is gone from the host".into());
    }
    if seen.admin_up && seen.carrier == Some(false) {
        return Err("it is up without carrier (link down)".into());
    }
    if let Some(dev) = &nic.rdma_device {
        if !seen.rdma_present {
            return Err(format!("its RDMA device {dev} is gone"));
        }
        if seen.admin_up && seen.carrier == Some(true) && seen.port_down {
            return Err(format!("its RDMA device {dev} has a port DOWN"));
        }
    }
    Ok(())
}

/// Read what `judge` needs about `nic` from `sys` (`/sys`).
pub fn look(sys: &Path, nic: &Nic) -> Seen {
    let net = sys.join("class/net").join(&nic.name);
    let read = |p: &Path| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    let flags = read(&net.join("flags"))
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok());
    let mut seen = Seen {
        on_host: flags.is_some(),
        admin_up: flags.is_some_and(|f| f & libc::IFF_UP as u32 != 0),
        carrier: read(&net.join("carrier")).map(|c| c == "1"),
        ..Seen::default()
    };
    if let Some(dev) = &nic.rdma_device {
        let ports = sys.join("class/infiniband").join(dev).join("ports");
        seen.rdma_present = ports.is_dir();
        seen.port_down = rdma_host_device_core::sysfs::list_dir(&ports)
            .iter()
            .filter_map(|p| read(&ports.join(p).join("state")))
            .any(|s| s.ends_with("DOWN"));
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(rdma: Option<&str>, attached: bool) -> Nic {
        Nic {
            attached,
            ..Nic::for_test("0000:3b:00.0", "ens1", rdma)
        }
    }

    #[test]
    fn health_follows_the_wire_and_a_nic_in_a_pod_stays_healthy() {
        let up = Seen {
            on_host: true,
            admin_up: true,
            carrier: Some(true),
            rdma_present: true,
            port_down: false,
        };
        let n = nic(Some("mlx5_0"), false);
        assert!(judge(&n, &up).is_ok());
        let waiting = Seen {
            admin_up: false,
            carrier: None,
            port_down: true,
            ..up.clone()
        };
        assert!(
            judge(&n, &waiting).is_ok(),
            "admin down on the host: free, not broken"
        );
        for (seen, why) in [
            (
                Seen {
                    on_host: false,
                    ..Seen::default()
                },
                "gone",
            ),
            (
                Seen {
                    carrier: Some(false),
                    ..up.clone()
                },
                "without carrier",
            ),
            (
                Seen {
                    rdma_present: false,
                    ..up.clone()
                },
                "mlx5_0 is gone",
            ),
            (
                Seen {
                    port_down: true,
                    ..up.clone()
                },
                "port DOWN",
            ),
        ] {
            let e = judge(&n, &seen).unwrap_err();
            assert!(e.contains(why), "{e}");
            assert!(
                judge(&nic(Some("mlx5_0"), true), &seen).is_ok(),
                "attached: {why}"
            );
        }
        // Without an RDMA device only the netdev counts.
        assert!(
            judge(
                &nic(None, false),
                &Seen {
                    rdma_present: false,
                    ..up
                }
            )
            .is_ok()
        );
    }

    #[test]
    fn sysfs_facts_are_read_from_the_tree() {
        let root = std::env::temp_dir().join(format!("rhd-health-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let net = root.join("class/net/ens1");
        let port = root.join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(net.join("flags"), "0x1003\n").unwrap();
        std::fs::write(net.join("carrier"), "1\n").unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        let n = nic(Some("mlx5_0"), false);
        let s = look(&root, &n);
        assert_eq!(
            s,
            Seen {
                on_host: true,
                admin_up: true,
                carrier: Some(true),
                rdma_present: true,
                port_down: false
            }
        );
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        assert!(look(&root, &n).port_down);
        std::fs::remove_dir_all(&net).unwrap();
        assert!(!look(&root, &n).on_host);
        let _ = std::fs::remove_dir_all(&root);
    }
}
