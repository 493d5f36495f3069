use super::*;
use serde_json::json;

fn place(dir: &Path) -> Place {
    Place {
        plugin_data_dir: dir.join("plugins/rdma-host-device.io"),
        cdi_dir: dir.join("cdi"),
    }
}

const CLAIM: ClaimRef<'static> = ClaimRef {
    namespace: "team-a",
    name: "pod-rail-x7k2p",
    uid: "0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6",
};

fn prepared_device(name: &str, rdma: &str) -> Device {
    let mut attributes = BTreeMap::new();
    attributes.insert(attr::RDMA_DEVICE.into(), Attribute::string(rdma));
    attributes.insert(attr::UVERBS.into(), Attribute::string("uverbs0"));
    attributes.insert(attr::NUMA_NODE.into(), Attribute::int(1));
    attributes.insert(attr::PCI_BUS_ID.into(), Attribute::string("0000:3b:00.0"));
    Device {
        driver: DRIVER.into(),
        pool: "node-a".into(),
        name: name.into(),
        attributes,
        network_data: None,
    }
}

fn attached(ifname: &str, gids: &[(&str, u32)]) -> Attached {
    Attached {
        // net1 is mlx5_0's, net2 mlx5_1's.
        rdma_device: Some(format!(
            "mlx5_{}",
            ifname.trim_start_matches("net").parse::<u32>().unwrap() - 1
        )),
        gid_indices: gids.iter().map(|(a, i)| (a.parse().unwrap(), *i)).collect(),
        network: NetworkData {
            interface_name: ifname.into(),
            ips: gids.iter().map(|(a, _)| format!("{a}/24")).collect(),
            hardware_address: "aa:bb:cc:dd:ee:ff".into(),
        },
    }
}

/// The shape of the helper's own example (`api/metadata/testdata/HEAD/metadata.json`): a
/// stream of a v1beta1 and a v1alpha1 object with all of ObjectMeta, attributes of every kind
/// and networkData. We read the first, ignoring what we do not use.
#[test]
fn the_helpers_stream_is_read_from_its_first_object() {
    let obj = |version: &str, generation: i64| {
        json!({
            "kind": "DeviceMetadata",
            "apiVersion": version,
            "metadata": {
                "name": "claim", "generateName": "g", "namespace": "default", "uid": "claim-uid",
                "resourceVersion": "1", "generation": generation,
                "creationTimestamp": "2008-01-01T01:01:01Z", "labels": {"k": "v"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]
            },
            "podClaimName": "PodClaimNameValue",
            "requests": [{"name": "request", "devices": [{
                "driver": "gpu.example.com", "pool": "worker-0", "name": "gpu-0",
                "attributes": {"model": {"int": 2, "bool": true, "string": "LATEST-GPU-MODEL",
                    "version": "1.0.0", "ints": [6], "bools": [true], "strings": ["s"], "versions": ["v"]}},
                "networkData": {"interfaceName": "eth1", "ips": ["10.0.0.1/24"], "hardwareAddress": "aa:bb:cc:dd:ee:ff"}
            }]}]
        })
    };
    let mut stream = serde_json::to_vec_pretty(&obj(API_VERSION, 7)).unwrap();
    stream.push(b'\n');
    stream.extend(serde_json::to_vec_pretty(&obj("metadata.resource.k8s.io/v1alpha1", 3)).unwrap());
    let dm = DeviceMetadata::decode(&stream).unwrap();
    assert_eq!(dm.metadata.generation, 7, "the first object, newest first");
    assert_eq!(dm.metadata.uid, "claim-uid");
    assert_eq!(dm.pod_claim_name.as_deref(), Some("PodClaimNameValue"));
    let d = &dm.requests[0].devices[0];
    assert_eq!(d.attributes["model"].int, Some(2));
    assert_eq!(
        d.attributes["model"].string.as_deref(),
        Some("LATEST-GPU-MODEL")
    );
    assert_eq!(d.network_data.as_ref().unwrap().interface_name, "eth1");
    // A stream of an unknown version first: skipped, as a consumer does.
    let mut later = serde_json::to_vec(&obj("metadata.resource.k8s.io/v1", 9)).unwrap();
    later.extend(&stream);
    assert_eq!(
        DeviceMetadata::decode(&later).unwrap().metadata.generation,
        7
    );
    assert!(DeviceMetadata::decode(b"{\"kind\":\"Other\"}").is_err());
    assert!(DeviceMetadata::decode(b"{not json").is_err());
}

#[test]
fn what_we_write_is_the_helpers_format_and_round_trips() {
    let dm = DeviceMetadata::new(
        &CLAIM,
        Some("rail".into()),
        "nic",
        vec![prepared_device("pci-0000-3b-00-0", "mlx5_0")],
    );
    let body = dm.encode();
    assert_eq!(
        body.last(),
        Some(&b'\n'),
        "a stream of objects, one per line end"
    );
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["kind"], "DeviceMetadata");
    assert_eq!(v["apiVersion"], "metadata.resource.k8s.io/v1beta1");
    assert_eq!(
        v["metadata"],
        json!({"name": "pod-rail-x7k2p", "namespace": "team-a",
               "uid": "0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6", "generation": 1})
    );
    assert_eq!(v["podClaimName"], "rail");
    let dev = &v["requests"][0]["devices"][0];
    assert_eq!(dev["driver"], "rdma-host-device.io");
    assert_eq!(
        dev["attributes"]["resource.kubernetes.io/numaNode"],
        json!({"int": 1})
    );
    assert_eq!(
        dev["attributes"]["rdma-host-device.io/rdmaDevice"],
        json!({"string": "mlx5_0"})
    );
    assert!(dev.get("networkData").is_none(), "none before ADD");
    assert_eq!(DeviceMetadata::decode(&body).unwrap(), dm);
}

/// The helper's layout, but for the claim's directory, which is filed by UID as well
/// (`<ns>_<claim>_<uid>`, issue 47: the helper's `<ns>_<claim>` is shared by a claim made
/// again under the same name).
#[test]
fn paths_are_the_helpers_layout_and_refuse_what_is_not_a_name() {
    let p = place(Path::new("/k"));
    let f = p.files(&CLAIM, "nic/rail0").unwrap();
    assert_eq!(
        f.file,
        Path::new(
            "/k/plugins/rdma-host-device.io/dra-device-metadata/team-a_pod-rail-x7k2p_0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6/nic/metadata.json"
        )
    );
    assert_eq!(
        f.metadata_spec,
        Path::new(
            "/k/cdi/rdma-host-device.io_metadata_0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6_nic.json"
        )
    );
    assert_eq!(
        f.metadata_cdi_id(),
        "rdma-host-device.io/metadata=0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6_nic"
    );
    assert_eq!(
        f.env_cdi_id(),
        "rdma-host-device.io/claim=0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6",
        "one env per claim"
    );
    assert_eq!(
        f.env_spec,
        Path::new("/k/cdi/rdma-host-device.io_claim_0f6e5c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6.json")
    );
    assert_eq!(
        container_path(Some("rail"), "pod-rail-x7k2p", "nic/rail0"),
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rail/nic/rdma-host-device.io-metadata.json"
    );
    assert_eq!(
        container_path(None, "shared", "nic"),
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/shared/nic/rdma-host-device.io-metadata.json"
    );
    // The annotation is the claim writer's: anything but a name is not a path component.
    for bad in ["../../etc", "a/b", "", "x\ny"] {
        assert_eq!(
            container_path(Some(bad), "shared", "nic"),
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/shared/nic/rdma-host-device.io-metadata.json",
            "{bad:?}"
        );
    }
    for bad in ["..", "a/b", "", ".x", "x.", "a..b", "a b"] {
        let c = ClaimRef { name: bad, ..CLAIM };
        assert!(p.files(&c, "nic").is_err(), "{bad:?}");
        let c = ClaimRef {
            namespace: bad,
            ..CLAIM
        };
        assert!(p.files(&c, "nic").is_err(), "{bad:?}");
        assert!(
            p.files(&CLAIM, bad).is_err() || bad.contains('/'),
            "{bad:?}"
        );
    }
    assert!(p.files(&CLAIM, "../x").is_err());
}

#[test]
fn the_cdi_specs_mount_the_file_read_only_and_carry_our_env() {
    let p = place(Path::new("/k"));
    let f = p.files(&CLAIM, "nic").unwrap();
    let m = metadata_spec(&f, "/var/run/kubernetes.io/dra-device-attributes/x");
    assert_eq!(m["kind"], "rdma-host-device.io/metadata");
    assert_eq!(m["devices"][0]["name"], f.cdi_name);
    assert_eq!(
        m["devices"][0]["containerEdits"]["mounts"][0],
        json!({"hostPath": f.file, "containerPath": "/var/run/kubernetes.io/dra-device-attributes/x",
               "options": ["ro", "bind"]})
    );
    let mut dm = DeviceMetadata::new(&CLAIM, None, "nic", vec![prepared_device("a", "mlx5_0")]);
    let e = env_spec(&f, std::slice::from_ref(&dm));
    assert_eq!(e["kind"], "rdma-host-device.io/claim");
    assert_eq!(e["devices"][0]["name"], CLAIM.uid);
    assert_eq!(
        e["devices"][0]["containerEdits"]["env"],
        json!([
            "RDMA_HOST_DEVICE_METADATA_GENERATION=1",
            "NCCL_IB_HCA==mlx5_0"
        ]),
        "the HCA known at prepare, no GID index before ADD"
    );
    // No RDMA device (a veth): still one env, so the CDI device is never empty.
    dm.requests[0].devices[0].attributes.clear();
    assert_eq!(
        env_of(std::slice::from_ref(&dm)),
        ["RDMA_HOST_DEVICE_METADATA_GENERATION=1"]
    );
    // A name that is not plain is not put in the env.
    dm.requests[0].devices[0]
        .attributes
        .insert(attr::RDMA_DEVICE.into(), Attribute::string("x,y=z"));
    assert_eq!(
        env_of(std::slice::from_ref(&dm)),
        ["RDMA_HOST_DEVICE_METADATA_GENERATION=1"]
    );
}

#[test]
fn add_bumps_the_generation_and_sets_the_gid_index_del_takes_it_out() {
    let mut dm = DeviceMetadata::new(
        &CLAIM,
        None,
        "nic",
        vec![
            prepared_device("a", "mlx5_0"),
            prepared_device("b", "mlx5_1"),
        ],
    );
    assert!(apply(
        &mut dm,
        "node-a",
        "a",
        Some(&attached("net1", &[("10.0.0.5", 3), ("fd00::5", 5)]))
    ));
    assert_eq!(dm.metadata.generation, 2);
    let a = &dm.requests[0].devices[0];
    assert_eq!(a.attributes[attr::IF_NAME].string.as_deref(), Some("net1"));
    assert_eq!(a.attributes[attr::GID_INDEX].int, Some(3));
    assert_eq!(
        a.attributes[attr::GID_INDICES].string.as_deref(),
        Some("10.0.0.5=3,fd00::5=5")
    );
    assert_eq!(a.network_data.as_ref().unwrap().interface_name, "net1");
    // One of two devices verified: no common index yet, the per-device one.
    assert_eq!(
        env_of(std::slice::from_ref(&dm)),
        [
            "RDMA_HOST_DEVICE_METADATA_GENERATION=2",
            "NCCL_IB_HCA==mlx5_0,mlx5_1",
            "RDMA_HOST_DEVICE_GID_INDEX_0=3"
        ]
    );
    assert!(apply(
        &mut dm,
        "node-a",
        "b",
        Some(&attached("net2", &[("10.0.1.5", 3)]))
    ));
    assert_eq!(
        env_of(std::slice::from_ref(&dm)),
        [
            "RDMA_HOST_DEVICE_METADATA_GENERATION=3",
            "NCCL_IB_HCA==mlx5_0,mlx5_1",
            "NCCL_IB_GID_INDEX=3"
        ]
    );
    assert!(apply(
        &mut dm,
        "node-a",
        "b",
        Some(&attached("net2", &[("10.0.1.5", 4)]))
    ));
    assert_eq!(
        env_of(std::slice::from_ref(&dm))[2..],
        [
            "RDMA_HOST_DEVICE_GID_INDEX_0=3",
            "RDMA_HOST_DEVICE_GID_INDEX_1=4"
        ],
        "different indices: no NCCL_IB_GID_INDEX"
    );
    // DEL: ADD's part out, the prepare part kept.
    assert!(apply(&mut dm, "node-a", "b", None));
    let b = &dm.requests[0].devices[1];
    assert!(b.network_data.is_none());
    assert!(!b.attributes.contains_key(attr::IF_NAME));
    assert!(!b.attributes.contains_key(attr::GID_INDEX));
    assert_eq!(
        b.attributes[attr::UVERBS].string.as_deref(),
        Some("uverbs0")
    );
    assert_eq!(dm.metadata.generation, 5);
    assert!(
        !apply(&mut dm, "node-a", "nope", None),
        "not a device of the file"
    );
    assert_eq!(dm.metadata.generation, 5);
    // Many addresses: the text stays an attribute string.
    let many: Vec<(String, u32)> = (1..20).map(|i| (format!("fd00::{i}"), i)).collect();
    let many: Vec<(&str, u32)> = many.iter().map(|(a, i)| (a.as_str(), *i)).collect();
    apply(&mut dm, "node-a", "a", Some(&attached("net1", &many)));
    let t = dm.requests[0].devices[0].attributes[attr::GID_INDICES]
        .string
        .clone()
        .unwrap();
    assert!(t.len() <= 64 && t.starts_with("fd00::1=1,"), "{t}");
}

#[test]
fn prepare_update_and_remove_through_the_files() {
    let dir = std::env::temp_dir().join(format!("rhd-meta-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let p = place(&dir);
    let f = p.files(&CLAIM, "nic").unwrap();
    let dm = DeviceMetadata::new(
        &CLAIM,
        Some("rail".into()),
        "nic",
        vec![prepared_device("a", "mlx5_0")],
    );
    let ids = prepare(&f, &dm, Some("rail")).unwrap();
    assert_eq!(ids, [f.metadata_cdi_id(), f.env_cdi_id()]);
    // A second request of the same claim, then the claim's env from both, by request name.
    let f2 = p.files(&CLAIM, "nic2").unwrap();
    let dm2 = DeviceMetadata::new(
        &CLAIM,
        Some("rail".into()),
        "nic2",
        vec![prepared_device("b", "mlx5_1")],
    );
    assert_eq!(
        prepare(&f2, &dm2, Some("rail")).unwrap()[1],
        ids[1],
        "the same env ID"
    );
    write_env(&f).unwrap();
    let env: serde_json::Value = serde_json::from_slice(&fs::read(&f.env_spec).unwrap()).unwrap();
    assert_eq!(
        env["devices"][0]["containerEdits"]["env"],
        json!([
            "RDMA_HOST_DEVICE_METADATA_GENERATION=1",
            "NCCL_IB_HCA==mlx5_0,mlx5_1"
        ])
    );
    let spec: serde_json::Value =
        serde_json::from_slice(&fs::read(&f.metadata_spec).unwrap()).unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rail/nic/rdma-host-device.io-metadata.json"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&f.file).unwrap().permissions().mode() & 0o777,
        0o644
    );

    let g = update_device(
        &f,
        "node-a",
        "a",
        Some(&attached("net1", &[("10.0.0.5", 3)])),
    )
    .unwrap();
    assert_eq!(g, Some(2));
    let now = DeviceMetadata::decode(&fs::read(&f.file).unwrap()).unwrap();
    assert_eq!(now.metadata.generation, 2);
    assert_eq!(now.pod_claim_name.as_deref(), Some("rail"), "kept");
    let env: serde_json::Value = serde_json::from_slice(&fs::read(&f.env_spec).unwrap()).unwrap();
    assert_eq!(
        env["devices"][0]["containerEdits"]["env"],
        json!([
            "RDMA_HOST_DEVICE_METADATA_GENERATION=2",
            "NCCL_IB_HCA==mlx5_0,mlx5_1",
            "RDMA_HOST_DEVICE_GID_INDEX_0=3"
        ]),
        "one of the claim's two devices verified"
    );
    let g = update_device(
        &f2,
        "node-a",
        "b",
        Some(&attached("net2", &[("10.0.1.5", 3)])),
    )
    .unwrap();
    assert_eq!(g, Some(2));
    let env: serde_json::Value = serde_json::from_slice(&fs::read(&f.env_spec).unwrap()).unwrap();
    assert_eq!(
        env["devices"][0]["containerEdits"]["env"],
        json!([
            "RDMA_HOST_DEVICE_METADATA_GENERATION=2",
            "NCCL_IB_HCA==mlx5_0,mlx5_1",
            "NCCL_IB_GID_INDEX=3"
        ]),
        "both verified at the same index"
    );
    assert!(
        update_device(&f, "node-a", "zzz", None).is_err(),
        "ADD's device missing from the file is an error (ADD is strict)"
    );
    assert_eq!(update_device(&f, "node-a", "a", None).unwrap(), Some(3));
    let leftovers: Vec<_> = fs::read_dir(&f.request_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["metadata.json"], "no temp file left");

    // The node restarted: /var/run/cdi is empty, the metadata files live on; prepared again,
    // the specs are written again from them, ADD's generation kept.
    let before = fs::read(&f.env_spec).unwrap();
    for s in [&f.metadata_spec, &f2.metadata_spec, &f.env_spec] {
        fs::remove_file(s).unwrap();
    }
    assert_eq!(ensure_specs(&p, &CLAIM, &["nic", "nic2"]).unwrap(), 3);
    assert_eq!(fs::read(&f.env_spec).unwrap(), before);
    let spec: serde_json::Value =
        serde_json::from_slice(&fs::read(&f2.metadata_spec).unwrap()).unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rail/nic2/rdma-host-device.io-metadata.json"
    );
    assert_eq!(ensure_specs(&p, &CLAIM, &["nic", "nic2"]).unwrap(), 0);
    remove(&p, &CLAIM, &["nic", "nic2"]).unwrap();
    assert!(!f.claim_dir.exists() && !f.env_spec.exists() && !f.metadata_spec.exists());
    assert!(!f2.metadata_spec.exists());
    assert_eq!(fs::read_dir(&p.cdi_dir).unwrap().count(), 0);
    remove(&p, &CLAIM, &["nic"]).unwrap();
    assert_eq!(
        update_device(&f, "node-a", "a", None).unwrap(),
        None,
        "gone: nothing to do"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// Issue 47, item 2: the claim's directory is 0755, so any local user could flock it and stall
/// every rewrite of the claim's files for LOCK_WAIT, then fail ADD. With `nobody` holding that
/// lock the rewrite goes through now: the claim's lock is a 0600 file in our own 0700
/// directory, which the user `nobody` can neither open nor lock, and it goes with the claim.
#[test]
fn a_nobody_lock_on_the_claims_directory_stalls_no_rewrite_and_ours_is_out_of_its_reach() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("rhd-meta-flock-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let p = place(&dir);
    let f = p.files(&CLAIM, "nic").unwrap();
    let dm = DeviceMetadata::new(&CLAIM, None, "nic", vec![prepared_device("a", "mlx5_0")]);
    prepare(&f, &dm, None).unwrap();
    let squatter = crate::files::nobody::Squatter::hold(&f.claim_dir);
    let g = update_device(
        &f,
        "node-a",
        "a",
        Some(&attached("net1", &[("10.0.0.5", 3)])),
    );
    assert_eq!(g.unwrap(), Some(2));
    let (lock_dir, name) = claim_lock(&f);
    let lock = lock_dir.join(&name);
    let mode = |q: &Path| fs::metadata(q).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&lock_dir), 0o700);
    assert_eq!(mode(&lock), 0o600);
    for target in [&lock, &lock_dir] {
        if let Some((locked, said)) = crate::files::nobody::can_lock(target) {
            assert!(!locked, "nobody locked {}", target.display());
            assert!(said.contains("Permission denied"), "{said}");
        }
    }
    drop(squatter);
    remove(&p, &CLAIM, &["nic"]).unwrap();
    assert!(!lock.exists(), "the claim's lock outlived it");
    let _ = fs::remove_dir_all(&dir);
}

/// Issue 47, item 4: a claim deleted and made again under the same name is another claim (a
/// new UID, perhaps another NIC). The kubelet may prepare the new one before it unprepares the
/// old one; the old claim's unprepare then removed the new claim's mount source, because the
/// files were kept by `<namespace>_<claim>`. They are kept by UID now.
#[test]
fn a_recreated_claims_files_outlive_the_old_claims_unprepare() {
    let dir = std::env::temp_dir().join(format!("rhd-meta-recreated-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let p = place(&dir);
    let again = ClaimRef {
        uid: "7d1c0b9a-8e7f-4a6b-9c5d-3e2f1a0b9c8d",
        ..CLAIM
    };
    let old = p.files(&CLAIM, "nic").unwrap();
    let new = p.files(&again, "nic").unwrap();
    assert_ne!(old.claim_dir, new.claim_dir);
    for (claim, files, rdma) in [(&CLAIM, &old, "mlx5_0"), (&again, &new, "mlx5_1")] {
        let dm = DeviceMetadata::new(claim, None, "nic", vec![prepared_device("a", rdma)]);
        prepare(files, &dm, None).unwrap();
        write_env(files).unwrap();
    }
    remove(&p, &CLAIM, &["nic"]).unwrap();
    assert!(!old.claim_dir.exists() && !old.metadata_spec.exists() && !old.env_spec.exists());
    let body = fs::read(&new.file).expect("the new claim's mount source is still there");
    let dm = DeviceMetadata::decode(&body).unwrap();
    assert_eq!(dm.metadata.uid, again.uid);
    assert_eq!(
        dm.requests[0].devices[0].attributes[attr::RDMA_DEVICE]
            .string
            .as_deref(),
        Some("mlx5_1")
    );
    assert!(new.metadata_spec.exists() && new.env_spec.exists());
    let _ = fs::remove_dir_all(&dir);
}

/// A claim an older agent prepared has its files under `<namespace>_<claim>`: after an upgrade
/// its specs are written again (naming the new place) and its unprepare removes them; a
/// same-named claim's old files (another UID) are not taken.
#[test]
fn a_claim_filed_by_name_before_the_upgrade_is_moved_under_its_uid_and_no_other_is() {
    let dir = std::env::temp_dir().join(format!("rhd-meta-adopt-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let p = place(&dir);
    let f = p.files(&CLAIM, "nic").unwrap();
    let legacy = f
        .claim_dir
        .with_file_name(format!("{}_{}", CLAIM.namespace, CLAIM.name));
    // As the older agent left it: the metadata under the name, the spec naming that file.
    let dm = DeviceMetadata::new(&CLAIM, None, "nic", vec![prepared_device("a", "mlx5_0")]);
    let as_before = Files {
        claim_dir: legacy.clone(),
        request_dir: legacy.join("nic"),
        file: legacy.join("nic/metadata.json"),
        ..f.clone()
    };
    prepare(&as_before, &dm, None).unwrap();
    write_env(&as_before).unwrap();

    // Another claim of that name (another UID) leaves the files alone.
    let other = ClaimRef {
        uid: "7d1c0b9a-8e7f-4a6b-9c5d-3e2f1a0b9c8d",
        ..CLAIM
    };
    remove(&p, &other, &["nic"]).unwrap();
    assert!(legacy.join("nic/metadata.json").exists());

    // The kubelet prepares the claim again after the upgrade: the files move, the spec names
    // the new place.
    assert_eq!(ensure_specs(&p, &CLAIM, &["nic"]).unwrap(), 2);
    assert!(!legacy.exists() && f.file.exists());
    let spec: serde_json::Value =
        serde_json::from_slice(&fs::read(&f.metadata_spec).unwrap()).unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"],
        json!(f.file)
    );
    remove(&p, &CLAIM, &["nic"]).unwrap();
    assert!(!f.claim_dir.exists() && !f.metadata_spec.exists() && !f.env_spec.exists());
    let _ = fs::remove_dir_all(&dir);
}
