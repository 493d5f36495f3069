use super::*;
use crate::state::NetworkData;
use std::net::IpAddr;

fn place(tag: &str) -> Place {
    let d = std::env::temp_dir().join(format!("rhd-nicenv-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    Place { cdi_dir: d }
}

fn env_in(p: &Place, id: &str) -> Vec<String> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.spec_path(id).unwrap()).unwrap()).unwrap();
    assert_eq!(v["kind"], CDI_KIND);
    assert_eq!(v["devices"][0]["name"], id);
    v["devices"][0]["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect()
}

fn attached(gid: u32) -> Attached {
    let a: IpAddr = "10.100.0.2".parse().unwrap();
    Attached {
        rdma_device: None,
        gid_indices: vec![(a, gid)],
        network: NetworkData {
            interface_name: "net1".into(),
            ips: vec!["10.100.0.2/16".into()],
            hardware_address: String::new(),
        },
    }
}

#[test]
fn allocate_writes_generation_1_add_completes_it_and_del_puts_it_back() {
    let p = place("one");
    let id = "0000:3b:00.0";
    let ids = allocated(&p, &[(id, Some("mlx5_0"))]).unwrap();
    assert_eq!(ids, ["rdma-host-device.io/nic=0000:3b:00.0"]);
    assert!(
        p.spec_path(id)
            .unwrap()
            .ends_with("rdma-host-device.io_nic_0000:3b:00.0.json")
    );
    let gen1 = std::fs::read(p.spec_path(id).unwrap()).unwrap();
    assert_eq!(
        env_in(&p, id),
        [
            "RDMA_HOST_DEVICE_METADATA_GENERATION=1",
            "NCCL_IB_HCA==mlx5_0"
        ]
    );
    // ADD, after its verbs check: the GID index of the pod's address.
    assert_eq!(
        update(&p, id, Some("mlx5_0"), Some(&attached(3))).unwrap(),
        Some(2)
    );
    assert_eq!(
        env_in(&p, id),
        [
            "RDMA_HOST_DEVICE_METADATA_GENERATION=2",
            "NCCL_IB_HCA==mlx5_0",
            "NCCL_IB_GID_INDEX=3"
        ]
    );
    // DEL (and ADD's undo): generation 1 again, byte for byte what Allocate wrote.
    assert_eq!(update(&p, id, Some("mlx5_0"), None).unwrap(), Some(1));
    assert_eq!(std::fs::read(p.spec_path(id).unwrap()).unwrap(), gen1);
    let _ = std::fs::remove_dir_all(&p.cdi_dir);
}

#[test]
fn a_container_of_two_nics_gets_both_in_nccl_ib_hca_and_each_nics_gid_index_by_its_place() {
    let p = place("two");
    let nics = [
        ("0000:3b:00.0", Some("mlx5_0")),
        ("0000:3b:00.1", Some("mlx5_1")),
    ];
    allocated(&p, &nics).unwrap();
    for (id, _) in nics {
        assert_eq!(
            env_in(&p, id),
            [
                "RDMA_HOST_DEVICE_METADATA_GENERATION=1",
                "NCCL_IB_HCA==mlx5_0,mlx5_1"
            ],
            "the same NCCL_IB_HCA in each spec: whichever CDI applies last says it all"
        );
    }
    update(&p, nics[1].0, nics[1].1, Some(&attached(1))).unwrap();
    assert_eq!(
        env_in(&p, nics[1].0),
        [
            "RDMA_HOST_DEVICE_METADATA_GENERATION=2",
            "NCCL_IB_HCA==mlx5_0,mlx5_1",
            "RDMA_HOST_DEVICE_GID_INDEX_1=1"
        ],
        "one NIC's ADD cannot know the other's index: no NCCL_IB_GID_INDEX, its own by place"
    );
    update(&p, nics[0].0, nics[0].1, Some(&attached(1))).unwrap();
    assert_eq!(env_in(&p, nics[0].0)[2], "RDMA_HOST_DEVICE_GID_INDEX_0=1");
    let _ = std::fs::remove_dir_all(&p.cdi_dir);
}

#[test]
fn a_nic_without_rdma_gets_only_the_generation() {
    let p = place("veth");
    allocated(&p, &[("rhdrail0", None)]).unwrap();
    assert_eq!(
        env_in(&p, "rhdrail0"),
        ["RDMA_HOST_DEVICE_METADATA_GENERATION=1"]
    );
    update(&p, "rhdrail0", None, Some(&attached(0))).unwrap();
    assert_eq!(
        env_in(&p, "rhdrail0"),
        ["RDMA_HOST_DEVICE_METADATA_GENERATION=2"]
    );
    let _ = std::fs::remove_dir_all(&p.cdi_dir);
}

#[test]
fn discovery_writes_a_missing_spec_and_never_overwrites_one() {
    let p = place("ensure");
    let id = "mlx5_core.sf.4";
    // ADD of a NIC with no spec: not the device plugin's, nothing written.
    assert_eq!(
        update(&p, id, Some("mlx5_4"), Some(&attached(3))).unwrap(),
        None
    );
    assert!(!p.spec_path(id).unwrap().exists());
    assert!(ensure(&p, id, Some("mlx5_4")).unwrap());
    update(&p, id, Some("mlx5_4"), Some(&attached(3))).unwrap();
    assert!(!ensure(&p, id, Some("mlx5_4")).unwrap());
    assert_eq!(env_in(&p, id)[2], "NCCL_IB_GID_INDEX=3", "ADD's stays");
    let _ = std::fs::remove_dir_all(&p.cdi_dir);
}

#[test]
fn no_id_reaches_outside_the_cdi_dir_and_a_foreign_or_forged_spec_is_refused() {
    let p = place("threat");
    for id in [
        "",
        "../x",
        "a/b",
        "..",
        ".x",
        "x.",
        "a..b",
        "eth0\n",
        "a b",
        &"a".repeat(65),
    ] {
        assert!(p.spec_path(id).is_err(), "{id:?}");
        assert_eq!(
            allocated(&p, &[(id, None)]).unwrap(),
            Vec::<String>::new(),
            "{id:?}"
        );
        assert!(update(&p, id, None, None).is_err(), "{id:?}");
    }
    assert!(
        !p.cdi_dir.exists(),
        "nothing written for an ID that cannot be a CDI name"
    );
    // Beside a good one: its RDMA device still in the others' NCCL_IB_HCA, no name of its own.
    let names = allocated(
        &p,
        &[("a b", Some("mlx5_9")), ("0000:3b:00.1", Some("mlx5_1"))],
    )
    .unwrap();
    assert_eq!(names, ["rdma-host-device.io/nic=0000:3b:00.1"]);
    assert_eq!(env_in(&p, "0000:3b:00.1")[1], "NCCL_IB_HCA==mlx5_9,mlx5_1");
    let id = "0000:3b:00.0";
    let path = p.spec_path(id).unwrap();
    // Another NIC's spec at this path, or a forged HCA list: refused, not rewritten.
    std::fs::create_dir_all(&p.cdi_dir).unwrap();
    std::fs::write(
        &path,
        metadata::pretty(&metadata::cdi_env_spec(CDI_KIND, "0000:3b:00.1", vec![])),
    )
    .unwrap();
    assert!(update(&p, id, None, Some(&attached(1))).is_err());
    std::fs::write(
        &path,
        metadata::pretty(&metadata::cdi_env_spec(
            CDI_KIND,
            id,
            vec!["NCCL_IB_HCA==mlx5_0,$(reboot)".into()],
        )),
    )
    .unwrap();
    let e = update(&p, id, Some("mlx5_0"), Some(&attached(1))).unwrap_err();
    assert!(e.to_string().contains("not an RDMA device name"), "{e}");
    // A symlink at the path is not read through.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
    assert!(update(&p, id, None, Some(&attached(1))).is_err());
    let _ = std::fs::remove_dir_all(&p.cdi_dir);
}

/// Issue 47, item 2: the CDI directory is 0755, and `flock -x` on it as `nobody` made every
/// Allocate fail after LOCK_WAIT and ADD of a pool NIC with 5. With `nobody` holding that
/// lock the writer goes through now: its lock is a 0600 file in our own 0700 directory, which
/// the user `nobody` can neither open nor lock.
#[test]
fn a_nobody_lock_on_the_cdi_directory_stalls_no_writer_and_ours_is_out_of_its_reach() {
    use std::os::unix::fs::PermissionsExt;
    let p = place("flock");
    std::fs::create_dir_all(&p.cdi_dir).unwrap();
    let squatter = crate::files::nobody::Squatter::hold(&p.cdi_dir);
    let ids = allocated(&p, &[("0000:3b:00.0", Some("mlx5_0"))]).unwrap();
    assert_eq!(ids, vec![cdi_id("0000:3b:00.0")]);
    let locks = p.cdi_dir.join(LOCK_DIR);
    let lock = locks.join("nic-env.lock");
    let mode = |q: &std::path::Path| std::fs::metadata(q).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&locks), 0o700);
    assert_eq!(mode(&lock), 0o600);
    for target in [&lock, &locks] {
        if let Some((locked, said)) = crate::files::nobody::can_lock(target) {
            assert!(!locked, "nobody locked {}", target.display());
            assert!(said.contains("Permission denied"), "{said}");
        }
    }
    drop(squatter);
    let _ = std::fs::remove_dir_all(&p.cdi_dir);
}
