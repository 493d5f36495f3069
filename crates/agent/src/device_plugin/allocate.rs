//! What a container gets for the NICs the kubelet allocated it (`Allocate`), and which NICs to
//! prefer for a request (`GetPreferredAllocation`).
//!
//! Per container: the char devices of each NIC's RDMA device (`/dev/infiniband/uverbsN`,
//! `umadN`/`issmN` only if the node's `charDevices` allows) and `rdma_cm` once; environment
//! variables naming the NICs (`RDMA_HOST_DEVICE_<POOL>_IDS`) and RDMA devices
//! (`RDMA_HOST_DEVICE_<POOL>_RDMA`, for `NCCL_IB_HCA`); and, per NIC, the device-info file
//! Multus reads (`devinfo/dp/<resource>-<id>-device.json`). Which char devices exist is read
//! from sysfs (`class/infiniband_verbs`, `class/infiniband_mad`, `class/misc/rdma_cm`), never
//! from `/dev`: the plugin's container needs no device nodes, and a device the kernel does
//! not have is not returned (the runtime would fail the container on a missing node).

use super::api::{CdiDevice, ContainerAllocateResponse, DeviceSpec};
use rdma_host_device_core::device_info::{self, DeviceInfo};
use rdma_host_device_core::inventory::Nic;
use rdma_host_device_core::node::{CharDevices, Pool};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the device plugin's device-info files go (the spec's `devinfo/dp`).
pub(crate) const DEFAULT_DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo/dp";

/// The environment variables for `pool`'s NICs.
pub fn env_names(pool: &Pool) -> (String, String) {
    let s = pool.env_suffix();
    (
        format!("RDMA_HOST_DEVICE_{s}_IDS"),
        format!("RDMA_HOST_DEVICE_{s}_RDMA"),
    )
}

/// The char devices (`class` `infiniband_verbs` or `infiniband_mad`, names starting with
/// `prefix`) whose `ibdev` is `rdma`, as device specs.
fn char_devices(sys: &Path, class: &str, prefix: &str, rdma: &str) -> Vec<DeviceSpec> {
    let dir = sys.join("class").join(class);
    rdma_host_device_core::sysfs::list_dir(&dir)
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .filter(|n| {
            std::fs::read_to_string(dir.join(n).join("ibdev")).is_ok_and(|d| d.trim() == rdma)
        })
        .map(|n| spec(&n))
        .collect()
}

/// `/dev/infiniband/<name>`, the same path in the container, read-write.
fn spec(name: &str) -> DeviceSpec {
    DeviceSpec {
        container_path: format!("/dev/infiniband/{name}"),
        host_path: format!("/dev/infiniband/{name}"),
        permissions: "rw".into(),
    }
}

/// The response for one container given `nics` of `pool`. `sys` is `/sys`.
pub fn container_response(
    pool: &Pool,
    nics: &[&Nic],
    chars: CharDevices,
    sys: &Path,
) -> ContainerAllocateResponse {
    let mut r = ContainerAllocateResponse::default();
    let mut rdma = Vec::new();
    for nic in nics {
        let Some(d) = &nic.rdma_device else { continue };
        rdma.push(d.clone());
        let verbs = match &nic.uverbs {
            // Read with the pairing, by device index: a pod's rename cannot redirect it.
            Some(u) => vec![spec(u)],
            // A NIC in a pod, or no RDMA netlink: by the name (see `Nic::uverbs`).
            None => char_devices(sys, "infiniband_verbs", "uverbs", d),
        };
        if chars.cdi {
            // The CDI spec names a device by its uverbs char device (`cdi.rs`).
            r.cdi_devices.extend(verbs.iter().map(|v| CdiDevice {
                name: format!(
                    "{}={}",
                    crate::cdi::KIND,
                    v.container_path.trim_start_matches("/dev/infiniband/")
                ),
            }));
        }
        r.devices.extend(verbs);
        if chars.umad {
            r.devices
                .extend(char_devices(sys, "infiniband_mad", "umad", d));
        }
        if chars.issm {
            r.devices
                .extend(char_devices(sys, "infiniband_mad", "issm", d));
        }
    }
    if !rdma.is_empty() {
        if sys.join("class/misc/rdma_cm").exists() {
            r.devices.push(spec("rdma_cm"));
        } else {
            log::warn!("no rdma_cm on this node (rdma_ucm not loaded): not handed out");
        }
    }
    let (ids, rdma_env) = env_names(pool);
    r.envs.insert(
        ids,
        nics.iter()
            .map(|n| n.id.as_str())
            .collect::<Vec<_>>()
            .join(","),
    );
    r.envs.insert(rdma_env, rdma.join(","));
    r
}

/// The per-NIC env devices of one container given `nics` (`nic_env`): their specs written at
/// generation 1 (every one with the container's `NCCL_IB_HCA`), their CDI names to answer.
/// ADD completes each with its GID index before the container is created.
pub fn nic_env(
    place: &rdma_host_device_core::nic_env::Place,
    nics: &[&Nic],
) -> Result<Vec<CdiDevice>, String> {
    let ids: Vec<(&str, Option<&str>)> = nics
        .iter()
        .map(|n| (n.id.as_str(), n.rdma_device.as_deref()))
        .collect();
    rdma_host_device_core::nic_env::allocated(place, &ids)
        .map(|names| names.into_iter().map(|name| CdiDevice { name }).collect())
        .map_err(|e| {
            format!(
                "cannot write the env CDI specs of {} in {} (devicePlugin.nicEnv.cdiDir): {e}; the container would name a CDI device the runtime cannot resolve",
                ids.iter().map(|(i, _)| *i).collect::<Vec<_>>().join(","),
                place.cdi_dir.display()
            )
        })
}

/// `<dir>/<resourceName, '/' as '-'>-<deviceID>-device.json` (device-info spec, section 4.1).
pub fn device_info_path(dir: &Path, resource: &str, id: &str) -> PathBuf {
    dir.join(format!("{}-{id}-device.json", resource.replace('/', "-")))
}

/// Write the device-info file for `nic` (nothing for a NIC with neither a PCI address nor an
/// RDMA device: the spec has nothing to say about it).
pub fn write_device_info(
    dir: &Path,
    pool: &Pool,
    nic: &Nic,
) -> rdma_host_device_core::error::Result<()> {
    let info = DeviceInfo {
        pci_address: nic.pci.clone(),
        pf_pci_address: nic
            .pci
            .as_deref()
            .and_then(rdma_host_device_core::sysfs::physfn_of),
        rdma_device: nic.rdma_device.clone(),
    };
    if info.is_empty() {
        return Ok(());
    }
    device_info::write(&device_info_path(dir, &pool.resource_name, &nic.id), &info)
}

/// A device `GetPreferredAllocation` may pick: its ID and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub id: String,
    pub numa: Option<i64>,
    /// The PCI root complex (`pci0000:3a`).
    pub pci_root: Option<String>,
}

/// `GetPreferredAllocation` for one container: `must` first, then the rest from one NUMA node
/// if one can hold it (the node the `must` devices are on, else the one that fits most tightly),
/// then from the nodes with the most free devices; inside a NUMA node the same rule keeps the
/// request under one PCI root complex where it can.
pub fn preferred(available: &[Offer], must: &[String], size: usize) -> Vec<String> {
    let mut out: Vec<String> = must.iter().take(size).cloned().collect();
    let placed: Vec<&Offer> = available.iter().filter(|o| out.contains(&o.id)).collect();
    let mut by_numa: BTreeMap<Option<i64>, Vec<&Offer>> = BTreeMap::new();
    for o in available.iter().filter(|o| !out.contains(&o.id)) {
        by_numa.entry(o.numa).or_default().push(o);
    }
    let home_numa = most_common(placed.iter().filter_map(|o| o.numa)).map(Some);
    let home_root = most_common(placed.iter().filter_map(|o| o.pci_root.clone())).map(Some);
    let need = size.saturating_sub(out.len());
    for numa in visit_order(&by_numa, home_numa, need) {
        let mut by_root: BTreeMap<Option<String>, Vec<&Offer>> = BTreeMap::new();
        for o in &by_numa[&numa] {
            by_root.entry(o.pci_root.clone()).or_default().push(o);
        }
        let need = size.saturating_sub(out.len());
        for root in visit_order(&by_root, home_root.clone(), need) {
            let mut ids: Vec<&String> = by_root[&root].iter().map(|o| &o.id).collect();
            ids.sort();
            for id in ids {
                if out.len() >= size {
                    return out;
                }
                out.push(id.clone());
            }
        }
    }
    out
}

/// The value most of `values` share (the smallest on a tie).
fn most_common<T: Ord>(values: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|(_, c)| *c == best).map(|(v, _)| v)
}

/// In which order to take devices from `groups` (by NUMA node, or by PCI root) for `need`
/// more: first `home` if it can hold them all, else the group that holds them most tightly
/// (a known place before an unknown one), then the others, largest first.
fn visit_order<K: Ord + Clone, V>(
    groups: &BTreeMap<Option<K>, Vec<V>>,
    home: Option<Option<K>>,
    need: usize,
) -> Vec<Option<K>> {
    let first = home
        .filter(|h| groups.get(h).is_some_and(|g| g.len() >= need))
        .or_else(|| {
            groups
                .iter()
                .filter(|(_, g)| g.len() >= need)
                .min_by_key(|(k, g)| (g.len(), k.is_none()))
                .map(|(k, _)| k.clone())
        });
    let mut order: Vec<Option<K>> = groups.keys().cloned().collect();
    order.sort_by_key(|k| {
        (
            Some(k) != first.as_ref(),
            std::cmp::Reverse(groups[k].len()),
        )
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(id: &str, rdma: Option<&str>) -> Nic {
        Nic::for_test(id, &format!("n{id}"), rdma)
    }

    fn pool() -> Pool {
        Pool {
            resource_name: "rdma-host-device.io/rail".into(),
            selectors: Default::default(),
        }
    }

    /// A fake /sys: mlx5_0 with uverbs1 and umad0/issm0, mlx5_1 with uverbs0/umad1, rdma_cm.
    fn tree(root: &Path) -> PathBuf {
        let sys = root.join("sys");
        for (class, name, ibdev) in [
            ("infiniband_verbs", "uverbs0", "mlx5_1"),
            ("infiniband_verbs", "uverbs1", "mlx5_0"),
            ("infiniband_mad", "umad0", "mlx5_0"),
            ("infiniband_mad", "issm0", "mlx5_0"),
            ("infiniband_mad", "umad1", "mlx5_1"),
        ] {
            let d = sys.join("class").join(class).join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("ibdev"), format!("{ibdev}\n")).unwrap();
        }
        std::fs::create_dir_all(sys.join("class/misc/rdma_cm")).unwrap();
        sys
    }

    #[test]
    fn allocate_hands_out_each_nics_own_char_devices_and_names_them() {
        let root = std::env::temp_dir().join(format!("rhd-alloc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let sys = tree(&root);
        let (a, b) = (
            nic("0000:3b:00.0", Some("mlx5_0")),
            nic("0000:3b:00.1", Some("mlx5_1")),
        );
        let paths = |r: &ContainerAllocateResponse| {
            r.devices
                .iter()
                .map(|d| d.container_path.clone())
                .collect::<Vec<_>>()
        };
        let r = container_response(&pool(), &[&a, &b], CharDevices::default(), &sys);
        assert_eq!(
            paths(&r),
            [
                "/dev/infiniband/uverbs1",
                "/dev/infiniband/uverbs0",
                "/dev/infiniband/rdma_cm"
            ]
        );
        assert!(
            r.devices
                .iter()
                .all(|d| d.permissions == "rw" && d.host_path == d.container_path)
        );
        assert_eq!(
            r.envs["RDMA_HOST_DEVICE_RAIL_IDS"],
            "0000:3b:00.0,0000:3b:00.1"
        );
        assert_eq!(r.envs["RDMA_HOST_DEVICE_RAIL_RDMA"], "mlx5_0,mlx5_1");
        // Management devices only when the node allows them, and only the NIC's own.
        let chars = CharDevices {
            umad: true,
            issm: true,
            cdi: false,
        };
        let r = container_response(&pool(), &[&a], chars, &sys);
        assert!(
            r.cdi_devices.is_empty(),
            "no CDI names unless the node says so"
        );
        assert_eq!(
            paths(&r),
            [
                "/dev/infiniband/uverbs1",
                "/dev/infiniband/umad0",
                "/dev/infiniband/issm0",
                "/dev/infiniband/rdma_cm"
            ]
        );
        // With CDI: each RDMA device's CDI name too (its spec carries the memlock hook).
        let cdi = CharDevices {
            cdi: true,
            ..Default::default()
        };
        let r = container_response(&pool(), &[&a, &b], cdi, &sys);
        let names: Vec<&str> = r.cdi_devices.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "rdma-host-device.io/rdma=uverbs1",
                "rdma-host-device.io/rdma=uverbs0"
            ],
            "named by the char device (cdi.rs), not by a name a pod can change"
        );
        // rdma_ucm not loaded: rdma_cm is left out rather than failing the container.
        std::fs::remove_dir(sys.join("class/misc/rdma_cm")).unwrap();
        let r = container_response(&pool(), &[&a], CharDevices::default(), &sys);
        assert_eq!(paths(&r), ["/dev/infiniband/uverbs1"]);
        // A NIC without RDMA: names only.
        let v = nic("veth0", None);
        let r = container_response(&pool(), &[&v], CharDevices::default(), &sys);
        assert!(r.devices.is_empty());
        assert_eq!(r.envs["RDMA_HOST_DEVICE_RAIL_RDMA"], "");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_nic_gets_the_char_device_its_pairing_read_even_after_a_pod_swapped_device_names() {
        // Shared RDMA netns mode: any pod with NET_ADMIN renames any device. Discovery read
        // mlx5_0 with uverbs1 (by device index); since then a pod swapped the names, so sysfs
        // now says uverbs0 is "mlx5_0". The container still gets mlx5_0's own uverbs1.
        let root = std::env::temp_dir().join(format!("rhd-alloc-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let sys = tree(&root);
        let mut a = nic("0000:3b:00.0", Some("mlx5_1"));
        a.uverbs = Some("uverbs1".into());
        let cdi = CharDevices {
            cdi: true,
            ..Default::default()
        };
        let r = container_response(&pool(), &[&a], cdi, &sys);
        let paths: Vec<&str> = r
            .devices
            .iter()
            .map(|d| d.container_path.as_str())
            .collect();
        assert_eq!(
            paths,
            ["/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]
        );
        assert_eq!(r.cdi_devices[0].name, "rdma-host-device.io/rdma=uverbs1");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn allocate_names_each_nics_env_device_by_its_device_id_after_writing_its_spec() {
        let root = std::env::temp_dir().join(format!("rhd-alloc-env-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let place = rdma_host_device_core::nic_env::Place {
            cdi_dir: root.join("cdi"),
        };
        let (a, b) = (
            nic("0000:3b:00.0", Some("mlx5_0")),
            nic("0000:3b:00.1", Some("mlx5_1")),
        );
        let names: Vec<String> = nic_env(&place, &[&a, &b])
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "rdma-host-device.io/nic=0000:3b:00.0",
                "rdma-host-device.io/nic=0000:3b:00.1"
            ]
        );
        for n in [&a, &b] {
            assert!(
                place.spec_path(&n.id).unwrap().is_file(),
                "resolves before ADD"
            );
        }
        // A directory it cannot write: the kubelet is told why (the name would not resolve).
        std::fs::write(root.join("file"), "").unwrap();
        let bad = rdma_host_device_core::nic_env::Place {
            cdi_dir: root.join("file/cdi"),
        };
        let e = nic_env(&bad, &[&a]).unwrap_err();
        assert!(
            e.contains("devicePlugin.nicEnv.cdiDir") && e.contains("0000:3b:00.0"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn device_info_files_are_named_as_multus_looks_them_up() {
        let root = std::env::temp_dir().join(format!("rhd-dpinfo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let a = nic("0000:3b:00.0", Some("mlx5_0"));
        write_device_info(&root, &pool(), &a).unwrap();
        let p = root.join("rdma-host-device.io-rail-0000:3b:00.0-device.json");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "pci", "version": "1.1.0",
                "pci": {"pci-address": "0000:3b:00.0", "rdma-device": "mlx5_0"}})
        );
        // Nothing to say about a virtual NIC: no file.
        write_device_info(
            &root,
            &pool(),
            &Nic {
                pci: None,
                ..nic("veth0", None)
            },
        )
        .unwrap();
        assert_eq!(rdma_host_device_core::sysfs::list_dir(&root).len(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn preferred_allocation_keeps_a_request_on_one_numa_node() {
        let av = |v: &[(&str, Option<i64>)]| {
            v.iter()
                .map(|(i, n)| Offer {
                    id: i.to_string(),
                    numa: *n,
                    pci_root: None,
                })
                .collect::<Vec<_>>()
        };
        let a = av(&[
            ("a0", Some(0)),
            ("a1", Some(0)),
            ("a2", Some(0)),
            ("b0", Some(1)),
            ("b1", Some(1)),
        ]);
        // Two fit on either node: the tighter fit (node 1) keeps node 0's three for a bigger request.
        assert_eq!(preferred(&a, &[], 2), ["b0", "b1"]);
        assert_eq!(preferred(&a, &[], 3), ["a0", "a1", "a2"]);
        // A must-include device pulls the rest onto its node.
        assert_eq!(preferred(&a, &["a1".into()], 2), ["a1", "a0"]);
        assert_eq!(preferred(&a, &["b1".into()], 2), ["b1", "b0"]);
        // Too big for one node: the fullest first, then the others.
        assert_eq!(preferred(&a, &[], 4), ["a0", "a1", "a2", "b0"]);
        // No topology at all: still a full answer.
        let n = av(&[("x", None), ("y", None)]);
        assert_eq!(preferred(&n, &[], 1), ["x"]);
        assert_eq!(preferred(&n, &[], 5), ["x", "y"]);
    }

    #[test]
    fn preferred_allocation_keeps_a_request_under_one_pci_root_within_its_numa_node() {
        let o = |id: &str, numa: i64, root: &str| Offer {
            id: id.into(),
            numa: Some(numa),
            pci_root: Some(root.into()),
        };
        // NUMA node 0 has three NICs under root 3a and two under 5d; node 1 has one.
        let a = [
            o("3a-0", 0, "pci0000:3a"),
            o("5d-0", 0, "pci0000:5d"),
            o("3a-1", 0, "pci0000:3a"),
            o("5d-1", 0, "pci0000:5d"),
            o("3a-2", 0, "pci0000:3a"),
            o("c1-0", 1, "pci0000:c1"),
        ];
        // Two: one root holds them (the tighter one), not one from each.
        assert_eq!(preferred(&a, &[], 2), ["5d-0", "5d-1"]);
        assert_eq!(preferred(&a, &[], 3), ["3a-0", "3a-1", "3a-2"]);
        // A must-include device keeps the rest under its root.
        assert_eq!(preferred(&a, &["3a-1".into()], 2), ["3a-1", "3a-0"]);
        // Four: the NUMA node first, its fuller root first.
        assert_eq!(preferred(&a, &[], 4), ["3a-0", "3a-1", "3a-2", "5d-0"]);
    }
}
