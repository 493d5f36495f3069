//! Which containers get the node's memlock limit: those whose device nodes include one of this
//! node's uverbs char devices, recognised by its device number (major:minor).
//!
//! Why the number: it is what the runtime put in the container's `linux.devices` (and in its
//! device cgroup) from the device plugin's `Allocate`, a DRA claim's or a CDI spec's edits, none
//! of which a pod spec can write; it is also what grants access, so a container matched here is
//! one that can open the device. Names are not trusted: a container path is anything the edit
//! chose, an env var (`RDMA_HOST_DEVICE_*`) or an annotation is anything the pod's author wrote.
//! docs/trust.md has the whole reasoning.

use super::api::{Container, ContainerAdjustment, PosixRlimit, RLIMIT_MEMLOCK};
use rdma_host_device_core::node::Memlock;
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// A char device's number.
pub type DevNum = (u64, u64);

/// This node's uverbs char devices (`<dev>/infiniband/uverbsN`) by number, with their names.
/// Read at each decision: a few `stat`s, and a device that appears (or leaves for a pod in
/// exclusive mode, keeping its node) is seen at once.
pub fn node_uverbs(dev: &Path) -> BTreeMap<DevNum, String> {
    let dir = dev.join("infiniband");
    rdma_host_device_core::sysfs::list_dir(&dir)
        .into_iter()
        .filter(|n| rdma_host_device_core::rdma::netlink::is_uverbs_name(n))
        .filter_map(|n| {
            let m = std::fs::symlink_metadata(dir.join(&n)).ok()?;
            m.file_type().is_char_device().then(|| {
                let rdev = m.rdev();
                (
                    (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev)),
                    n,
                )
            })
        })
        .collect()
}

/// The first of the container's device nodes that is one of `ours`: (its path in the
/// container, the node's name for it).
pub fn rdma_device<'a>(
    c: &'a Container,
    ours: &'a BTreeMap<DevNum, String>,
) -> Option<(&'a str, &'a str)> {
    c.linux.as_ref()?.devices.iter().find_map(|d| {
        if d.r#type != "c" {
            return None;
        }
        let num = (u64::try_from(d.major).ok()?, u64::try_from(d.minor).ok()?);
        ours.get(&num).map(|n| (d.path.as_str(), n.as_str()))
    })
}

/// The policy as an rlimit value (RLIM_INFINITY for unlimited, as the OCI spec and runc take it).
fn rlim(limit: Memlock) -> u64 {
    match limit {
        Memlock::Unlimited => u64::MAX,
        Memlock::Bytes(b) => b,
    }
}

/// Whether the container's spec already gives it at least the policy (the runtime's base spec
/// or a plugin called before us): then nothing is asked, and no second owner of the rlimit
/// makes the runtime refuse the container.
pub fn already_enough(c: &Container, limit: Memlock) -> bool {
    let want = rlim(limit);
    // The last entry of a type is the one runc applies.
    c.rlimits
        .iter()
        .rev()
        .find(|l| l.r#type == RLIMIT_MEMLOCK)
        .is_some_and(|l| l.soft >= want && l.hard >= want)
}

/// The adjustment for a container given one of our devices: RLIMIT_MEMLOCK, soft and hard, at
/// the node's policy. It goes into the container's OCI spec (`process.rlimits`), which every
/// process the runtime starts in the container gets, `exec`'d ones included.
pub fn memlock_adjustment(limit: Memlock) -> ContainerAdjustment {
    let n = rlim(limit);
    ContainerAdjustment {
        rlimits: vec![PosixRlimit {
            r#type: RLIMIT_MEMLOCK.into(),
            hard: n,
            soft: n,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::super::api::{LinuxContainer, LinuxDevice};
    use super::*;

    fn container(devices: &[(&str, &str, i64, i64)]) -> Container {
        Container {
            linux: Some(LinuxContainer {
                devices: devices
                    .iter()
                    .map(|&(path, t, major, minor)| LinuxDevice {
                        path: path.into(),
                        r#type: t.into(),
                        major,
                        minor,
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_char_device_with_one_of_our_numbers_counts_whatever_its_path() {
        let ours = BTreeMap::from([((231, 192), "uverbs0".to_owned())]);
        // The device plugin's path, or any other the edit chose: the number decides.
        assert_eq!(
            rdma_device(&container(&[("/dev/x", "c", 231, 192)]), &ours),
            Some(("/dev/x", "uverbs0"))
        );
        for (what, c) in [
            (
                "our path, another number",
                container(&[("/dev/infiniband/uverbs0", "c", 231, 193)]),
            ),
            (
                "our number as a block device",
                container(&[("/dev/infiniband/uverbs0", "b", 231, 192)]),
            ),
            (
                "rdma_cm alone",
                container(&[("/dev/infiniband/rdma_cm", "c", 10, 58)]),
            ),
            ("negative numbers", container(&[("/dev/y", "c", -1, -1)])),
            ("no devices", Container::default()),
        ] {
            assert_eq!(rdma_device(&c, &ours), None, "{what}");
        }
    }

    #[test]
    fn the_adjustment_is_soft_and_hard_memlock_at_the_policy() {
        let a = memlock_adjustment(Memlock::Bytes(1 << 30));
        assert_eq!(
            a.rlimits,
            [PosixRlimit {
                r#type: "RLIMIT_MEMLOCK".into(),
                hard: 1 << 30,
                soft: 1 << 30
            }]
        );
        // RLIM_INFINITY, as the OCI spec and runc take it.
        assert_eq!(
            memlock_adjustment(Memlock::Unlimited).rlimits[0].hard,
            u64::MAX
        );
    }

    #[test]
    fn a_spec_that_already_gives_the_policy_is_left_alone_and_a_smaller_one_is_raised() {
        let with = |soft, hard| Container {
            rlimits: vec![
                PosixRlimit {
                    r#type: "RLIMIT_NOFILE".into(),
                    hard: u64::MAX,
                    soft: u64::MAX,
                },
                PosixRlimit {
                    r#type: RLIMIT_MEMLOCK.into(),
                    hard,
                    soft,
                },
            ],
            ..Default::default()
        };
        let gib = Memlock::Bytes(1 << 30);
        assert!(already_enough(&with(u64::MAX, u64::MAX), gib));
        assert!(already_enough(&with(1 << 30, 1 << 30), gib));
        assert!(
            !already_enough(&with(8 << 20, u64::MAX), gib),
            "soft too small"
        );
        assert!(!already_enough(&with(1 << 30, 1 << 30), Memlock::Unlimited));
        assert!(!already_enough(&Container::default(), gib), "none at all");
    }

    #[test]
    fn the_nodes_uverbs_are_its_char_devices_by_number() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: mknod needs root");
            return;
        }
        let root = std::env::temp_dir().join(format!("rhd-nri-dev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let ib = root.join("infiniband");
        std::fs::create_dir_all(&ib).unwrap();
        let mk = |name: &str, kind, major, minor| {
            nix::sys::stat::mknod(
                &ib.join(name),
                kind,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(major, minor),
            )
            .unwrap()
        };
        use nix::sys::stat::SFlag;
        mk("uverbs3", SFlag::S_IFCHR, 231, 195);
        mk("rdma_cm", SFlag::S_IFCHR, 10, 58);
        mk("uverbs4", SFlag::S_IFBLK, 231, 196);
        std::fs::write(ib.join("uverbs5"), "").unwrap();
        assert_eq!(
            node_uverbs(&root),
            BTreeMap::from([((231, 195), "uverbs3".to_owned())])
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
