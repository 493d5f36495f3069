//! The node configuration's tests: loading, edge cases, the NIC and IPAM policies.

use super::*;

fn write(body: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let p = std::env::temp_dir().join(format!("rhd-node-{}-{n}.json", std::process::id()));
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn defaults_without_a_file() {
    let n = Node::from_file(Path::new("/nonexistent/rhd/node.json"), false).unwrap();
    assert_eq!(n.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    assert_eq!(n.log_dir, PathBuf::from(DEFAULT_LOG_DIR));
    // Named explicitly (by the environment) but missing: an error, not silent defaults.
    let e = Node::from_file(Path::new("/nonexistent/rhd/node.json"), true).unwrap_err();
    assert_eq!(e.code, Code::InvalidConfig);
}

#[test]
fn bad_files_are_refused_with_the_path() {
    for body in [
        "{",
        r#"{"stateDir":"relative"}"#,
        r#"{"logDir":"/var/log/../../etc"}"#,
        r#"{"stateDir":"/x","typo":1}"#,
        r#"{"allowedNics":{"name":["x"]}}"#,
        r#"{"ipamPlugins":["../bin/sh"]}"#,
        r#"{"ipamPlugins":[""]}"#,
        r#"{"ipamPlugins":"host-local"}"#,
        r#"{"devicePlugin":{"pools":[]}}"#,
        r#"{"devicePlugin":{"pools":[{"resourceName":"rail","selectors":{"names":["a"]}}]}}"#,
        r#"{"devicePlugin":{"pools":[{"resourceName":"Example.com/rail","selectors":{"names":["a"]}}]}}"#,
        r#"{"devicePlugin":{"pools":[{"resourceName":"kubernetes.io/rail","selectors":{"names":["a"]}}]}}"#,
        r#"{"devicePlugin":{"pools":[{"resourceName":"x.io/-rail","selectors":{"names":["a"]}}]}}"#,
        r#"{"devicePlugin":{"pools":[{"resourceName":"x.io/rail","selectors":{}}]}}"#,
        r#"{"devicePlugin":{"pools":[{"resourceName":"x.io/rail","selectors":{"names":["a"]}}],"charDevices":{"umadd":true}}}"#,
    ] {
        let p = write(body);
        let e = Node::from_file(&p, true)
            .and_then(|n| n.device_plugin())
            .unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{body}");
        assert!(e.msg.contains(&p.display().to_string()), "{}", e.msg);
        let _ = std::fs::remove_file(p);
    }
}

/// `memlockFailClosed` works through our CDI spec's hook: a device plugin that hands out char
/// devices without naming the spec would leave its pods open, so that pair is refused.
#[test]
fn memlock_fail_closed_needs_the_device_plugins_cdi_names() {
    let pool = r#""pools":[{"resourceName":"x.io/rail","selectors":{"names":["a"]}}]"#;
    let open = write(&format!(
        r#"{{"memlockFailClosed":true,"devicePlugin":{{{pool}}}}}"#
    ));
    let e = Node::from_file(&open, true)
        .and_then(|n| n.device_plugin())
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidConfig);
    assert!(
        e.msg.contains("devicePlugin.charDevices.cdi") && e.msg.contains("memlockFailClosed"),
        "{}",
        e.msg
    );
    let closed = write(&format!(
        r#"{{"memlockFailClosed":true,"devicePlugin":{{{pool},"charDevices":{{"cdi":true}}}}}}"#
    ));
    let n = Node::from_file(&closed, true).unwrap();
    assert!(n.memlock_fail_closed && n.device_plugin().unwrap().is_some());
    // The CNI verbs do not read devicePlugin: ADD is not refused for it.
    assert!(Node::from_file(&open, true).is_ok());
    for p in [open, closed] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn node_config_edge_cases_are_errors_that_say_what_is_wrong() {
    for (body, says) in [
        // serde's sequence form of a struct: `[]` was all defaults, `["/x"]` a stateDir.
        ("[]", "top level must be a JSON object"),
        (r#"["/tmp/rhd-state2"]"#, "top level must be a JSON object"),
        (" \n [ ] ", "top level must be a JSON object"),
        ("null", "top level must be a JSON object"),
        (r#""x""#, "top level must be a JSON object"),
        (
            r#"{"deviceInfoDir":"/"}"#,
            "deviceInfoDir / is a system directory",
        ),
        (
            r#"{"deviceInfoDir":"/etc"}"#,
            "deviceInfoDir /etc is a system directory",
        ),
        (r#"{"deviceInfoDir":"/etc/"}"#, "is a system directory"),
        (r#"{"stateDir":"/etc/cni/net.d"}"#, "is inside /etc"),
        (r#"{"logDir":"/usr/lib"}"#, "is inside /usr"),
        (r#"{"stateDir":"/lib64/x"}"#, "is inside /lib64"),
        (r#"{"stateDir":"/"}"#, "stateDir / is a system directory"),
        (r#"{"stateDir":"//var//lib"}"#, "is a system directory"),
        (r#"{"logDir":"/proc/self"}"#, "kernel file system"),
        (r#"{"logDir":"/dev/shm"}"#, "kernel file system"),
        (r#"{"stateDir":"/tmp/a\u0000b"}"#, "NUL byte"),
        (r#"{"memlock":"0"}"#, "less than one page"),
        (r#"{"memlock":"4095"}"#, "less than one page"),
        (r#"{"memlock":0}"#, "invalid type"),
        (
            r#"{"cdiHook":"opt/cni/bin/x"}"#,
            "cdiHook opt/cni/bin/x must be an absolute path",
        ),
        (r#"{"cdiHook":"/opt/../x"}"#, "without '..'"),
    ] {
        let p = write(body);
        let e = Node::from_file(&p, true).unwrap_err();
        let _ = std::fs::remove_file(&p);
        assert_eq!(e.code, Code::InvalidConfig, "{body}");
        assert!(
            e.msg.contains(says) && e.msg.contains(&p.display().to_string()),
            "{body}: {}",
            e.msg
        );
    }
    // Still fine: directories of the plugin's own, an object with leading whitespace.
    let p = write(
        " {\"stateDir\":\"/var/lib/cni/rdma-host-device\",\"deviceInfoDir\":\"/var/run/k8s.cni.cncf.io/devinfo/cni\",\"memlock\":\"4096\"}",
    );
    let n = Node::from_file(&p, true);
    let _ = std::fs::remove_file(&p);
    n.unwrap();
}

#[test]
fn device_plugin_pools_are_validated_and_a_nic_is_in_one_pool_only() {
    let load = |body: &str| {
        let p = write(body);
        let r = Node::from_file(&p, true).and_then(|n| n.device_plugin().map(|dp| (n, dp)));
        let _ = std::fs::remove_file(p);
        r
    };
    let n = load(
        r#"{"devicePlugin":{"pools":[
            {"resourceName":"rdma-host-device.io/rail","selectors":{"pciAddresses":["0000:3b:00.0"]}},
            {"resourceName":"rdma-host-device.io/rail-b","selectors":{"drivers":["irdma"]}}],
            "charDevices":{"umad":true}}}"#,
    )
    .unwrap();
    let (n, dp) = (n.0, n.1.unwrap());
    assert_eq!(dp.pools.len(), 2);
    assert!(dp.char_devices.umad && !dp.char_devices.issm);
    assert_eq!(dp.pools[0].env_suffix(), "RAIL");
    assert_eq!(dp.pools[1].env_suffix(), "RAIL_B");
    let json: serde_json::Value = serde_json::from_str(&n.to_json()).unwrap();
    assert_eq!(
        json["devicePlugin"]["pools"][1]["resourceName"],
        "rdma-host-device.io/rail-b"
    );
    for (body, says) in [
        (
            r#"{"devicePlugin":{"pools":[{"resourceName":"a.io/r","selectors":{"names":["x"]}},{"resourceName":"b.io/s","selectors":{"names":["y","x"]}}]}}"#,
            "names \"x\" is also in a.io/r's",
        ),
        (
            r#"{"devicePlugin":{"pools":[{"resourceName":"a.io/r","selectors":{"names":["x"]}},{"resourceName":"a.io/r","selectors":{"names":["y"]}}]}}"#,
            "is also pools[0]'s",
        ),
        (
            r#"{"devicePlugin":{"pools":[{"resourceName":"a.io/r","selectors":{"names":["x"]}},{"resourceName":"b.io/r","selectors":{"names":["y"]}}]}}"#,
            "same environment variables",
        ),
        (
            r#"{"devicePlugin":{"pools":[{"resourceName":"a.io/r","selectors":{}}]}}"#,
            "offer no NIC",
        ),
    ] {
        let e = load(body).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(e.msg.contains(says), "{body}: {}", e.msg);
        assert!(e.msg.contains("devicePlugin"), "{}", e.msg);
    }
    // The CNI verbs load the file without parsing devicePlugin: a mistake there is the
    // device plugin's and node-config's to report, never a reason for ADD to fail.
    let p = write(r#"{"devicePlugin":{"pools":[{"resourceName":"nope"}]}}"#);
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(p);
    assert!(n.device_plugin().is_err());
    assert_eq!(Node::default().device_plugin().unwrap(), None);
}

#[test]
fn policy() {
    let p = write(
        r#"{"stateDir":"/s","logDir":"/l","allowedNics":{"names":["a"],"drivers":["mlx5_core"]},"allowedUplinks":["up0"]}"#,
    );
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(p);
    let nic = |name, driver, uplink: &[&str]| NicFacts {
        name,
        driver,
        uplink: uplink.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    assert!(n.admit(&nic("a", None, &[])).is_ok());
    assert!(n.admit(&nic("b", Some("mlx5_core"), &[])).is_ok());
    let e = n.admit(&nic("b", Some("ice"), &[])).unwrap_err();
    assert_eq!(e.code, Code::NotAllowed);
    assert!(
        e.msg.contains("allowedNics") && e.msg.contains("ice"),
        "{}",
        e.msg
    );
    let e = n
        .admit(&nic("a", None, &["carries the default route"]))
        .unwrap_err();
    assert!(e.msg.contains("default route"), "{}", e.msg);
    let free = Node::default();
    assert!(free.admit(&nic("z", None, &[])).is_ok());
    assert!(free.admit(&nic("up0", None, &["x"])).is_err());
    let n2 = Node {
        allowed_uplinks: vec!["up0".into()],
        ..Node::default()
    };
    assert!(n2.admit(&nic("up0", None, &["x"])).is_ok());
}

#[test]
fn rdma_devices_policy_matches_a_node_guid_and_a_name_only_where_pods_cannot_rename() {
    // A pod swapped two device names in shared mode: the forbidden NIC's device (GUID
    // ...0002) is now called "rxe_ok", the name the policy allows.
    let forbidden = |shared: bool| NicFacts {
        name: "eth-bad",
        rdma_device: Some("rxe_ok"),
        rdma_guid: Some(2),
        rdma_name_is_the_nodes: !shared,
        ..Default::default()
    };
    let allowed = NicFacts {
        name: "eth-ok",
        rdma_device: Some("rxe_bad"),
        rdma_guid: Some(1),
        ..Default::default()
    };
    let by = |entries: &[&str]| Node {
        allowed_nics: Some(NicSelectors {
            rdma_devices: entries.iter().map(|e| e.to_string()).collect(),
            ..Default::default()
        }),
        ..Node::default()
    };
    // By GUID: the names do not matter.
    let guid = by(&["0000:0000:0000:0001"]);
    assert!(guid.admit(&allowed).is_ok());
    let e = guid.admit(&forbidden(true)).unwrap_err();
    assert_eq!(e.code, Code::NotAllowed);
    assert!(e.msg.contains("node GUID 0000:0000:0000:0002"), "{}", e.msg);
    // By name in shared mode: the swapped name does not admit it, and the refusal says
    // why and which GUID to list.
    let name = by(&["rxe_ok"]);
    let e = name.admit(&forbidden(true)).unwrap_err();
    assert_eq!(e.code, Code::NotAllowed);
    assert!(
        e.msg.contains("rename") && e.msg.contains("(0000:0000:0000:0002)"),
        "{}",
        e.msg
    );
    // In exclusive mode a name is the node's.
    assert!(name.admit(&forbidden(false)).is_ok());
}

#[test]
fn ipam_plugins_default_to_the_address_managers_and_follow_the_file() {
    let n = Node::default();
    for t in DEFAULT_IPAM_PLUGINS {
        assert!(n.admit_ipam(t).is_ok(), "{t}");
    }
    for t in ["portmap", "bridge", "host-device", "rdma-host-device", "sh"] {
        let e = n.admit_ipam(t).unwrap_err();
        assert_eq!(e.code, Code::NotAllowed, "{t}");
        assert!(
            e.msg.contains(t) && e.msg.contains("host-local, static, dhcp, whereabouts"),
            "{}",
            e.msg
        );
    }
    let p = write(r#"{"ipamPlugins":["static","my-ipam"]}"#);
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(p);
    assert!(n.admit_ipam("my-ipam").is_ok());
    assert!(n.admit_ipam("host-local").is_err());
    assert!(n.to_json().contains("\"my-ipam\""), "{}", n.to_json());
    let p = write(r#"{"ipamPlugins":[]}"#);
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(p);
    assert!(
        n.admit_ipam("static")
            .unwrap_err()
            .msg
            .contains("allows none")
    );
}

#[test]
fn ipam_paths_match_whole_components_under_the_node_prefixes() {
    let pre: Vec<PathBuf> = default_ipam_paths();
    for ok in [
        "/var/lib/cni/networks",
        "/var/lib/cni/networks/",
        "/var/lib/cni/networks/net1",
        "/run/cni/dhcp.sock",
        "/run//cni/./x",
    ] {
        assert!(path_under(&pre, Path::new(ok)), "{ok}");
    }
    for no in [
        "/etc/cnix",
        "/etc/cni-evil/x",
        "/etc/cni/net.d",
        "/var/lib/cni",
        "/var/lib/cni/rdma-host-device",
        "/var/lib/cn",
        "/var/lib",
        "/",
        "/tmp/x/deep",
        "/var/lib/cni/../../../root",
        "var/lib/cni/x",
    ] {
        assert!(!path_under(&pre, Path::new(no)), "{no}");
    }
}

#[test]
fn ipam_paths_refuse_paths_outside_the_prefixes_naming_the_key() {
    let n = Node::default();
    let ok = serde_json::json!({"type":"host-local","subnet":"10.0.0.0/24",
        "routes":[{"dst":"0.0.0.0/0"}],"dataDir":"/var/lib/cni/networks",
        "kubernetes":{"kubeconfig":"/etc/cni/net.d/w.kubeconfig"},"dataDirx":"rel/ok"});
    n.admit_ipam_paths(&ok).unwrap();
    for (ipam, key) in [
        (serde_json::json!({"dataDir":"/tmp/x/deep"}), "ipam.dataDir"),
        (serde_json::json!({"dataDir":"/etc/cnix"}), "ipam.dataDir"),
        (
            serde_json::json!({"dataDir":"/var/lib/cni/../../tmp"}),
            "ipam.dataDir",
        ),
        (serde_json::json!({"dataDir":"../../tmp"}), "ipam.dataDir"),
        (
            serde_json::json!({"resolvConf":"/root/secret"}),
            "ipam.resolvConf",
        ),
        (
            serde_json::json!({"daemonSocketPath":"/tmp/evil.sock"}),
            "ipam.daemonSocketPath",
        ),
        (
            serde_json::json!({"kubernetes":{"kubeconfig":"/root/.kube/config"}}),
            "ipam.kubernetes.kubeconfig",
        ),
        (serde_json::json!({"x":[{"y":"/tmp/z"}]}), "ipam.x[0].y"),
        (serde_json::json!({"dataDir":DEFAULT_STATE_DIR}), "outside"),
        (serde_json::json!({"dataDir":"/var/lib/cni"}), "outside"),
        (
            serde_json::json!({"dataDir":"/var/lib/cni/rdma-host-device/x"}),
            "outside",
        ),
        (serde_json::json!({"dataDir":"tmp/x"}), "relative"),
        (serde_json::json!({"resolvConf":"resolv.conf"}), "relative"),
        // Go's decoder reads "DataDir" as dataDir.
        (serde_json::json!({"DataDir":"tmp"}), "relative"),
        (serde_json::json!({"RESOLVCONF":"../x"}), "'..'"),
    ] {
        let e = n.admit_ipam_paths(&ipam).unwrap_err();
        assert_eq!(e.code, Code::NotAllowed, "{ipam}");
        assert!(e.msg.contains(key), "{key}: {}", e.msg);
        assert!(
            e.msg.contains(
                "/var/lib/cni/networks, /run/cni, /var/run/cni, /etc/cni, /etc/resolv.conf"
            ),
            "{}",
            e.msg
        );
    }
    // The node's list decides, and to_json shows it.
    let p = write(r#"{"ipamPaths":["/srv/ipam"]}"#);
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(p);
    n.admit_ipam_paths(&serde_json::json!({"dataDir":"/srv/ipam/x"}))
        .unwrap();
    assert!(
        n.admit_ipam_paths(&serde_json::json!({"dataDir":"/var/lib/cni/x"}))
            .is_err()
    );
    assert!(n.to_json().contains("\"/srv/ipam\""), "{}", n.to_json());
    assert!(Node::default().to_json().contains("\"/var/run/cni\""));
    // ipamSockets: dhcp's daemon by default, shown; a node's own entry replaces the default.
    let shown: serde_json::Value = serde_json::from_str(&Node::default().to_json()).unwrap();
    assert_eq!(
        shown["ipamSockets"],
        serde_json::json!({"dhcp": ["/run/cni/dhcp.sock"]})
    );
    let p = write(r#"{"ipamSockets":{"dhcp":["/srv/ipam/dhcp.sock"]}}"#);
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(p);
    assert_eq!(
        n.ipam_sockets.get("dhcp").map(Vec::as_slice),
        Some(&[PathBuf::from("/srv/ipam/dhcp.sock")][..])
    );
    assert!(!n.ipam_sockets.contains_key("host-local"));
    for (body, says) in [
        (r#"{"ipamPaths":["relative"]}"#, "ipamPaths"),
        (r#"{"ipamPaths":["/a/../b"]}"#, "ipamPaths"),
        (r#"{"ipamReadPaths":["etc"]}"#, "ipamReadPaths"),
        (r#"{"ipamSockets":{"dhcp":["dhcp.sock"]}}"#, "ipamSockets"),
        (
            r#"{"ipamSockets":{"dhcp":["/run/../x.sock"]}}"#,
            "ipamSockets",
        ),
        (
            r#"{"ipamSockets":{"dhcp":["/run/cni/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock"]}}"#,
            "at most 107 bytes",
        ),
        // The kernel would grant IPAM the plugin's own records or log.
        (r#"{"ipamPaths":["/var/lib/cni"]}"#, "stateDir"),
        (
            r#"{"stateDir":"/srv/s","ipamReadPaths":["/srv/s/x"]}"#,
            "stateDir",
        ),
        (r#"{"logDir":"/srv/l","ipamPaths":["/srv"]}"#, "logDir"),
        (
            r#"{"stateDir":"/srv/s","ipamPaths":["/srv/s/ipam"]}"#,
            "stateDir",
        ),
        (r#"{"ipamTimeoutSeconds":0}"#, "ipamTimeoutSeconds"),
        (r#"{"ipamReadPaths":["/proc"]}"#, "kernel file system"),
        (r#"{"ipamReadPaths":["/sys/kernel"]}"#, "kernel file system"),
        (r#"{"ipamPaths":["/"]}"#, "the root"),
        (
            r#"{"ipamPaths":["/run/rdma-host-device"]}"#,
            "runtime directory",
        ),
        (
            r#"{"ipamPaths":["/run"]}"#,
            "holds or is inside the plugin's",
        ),
        (
            r#"{"ipamPaths":["/var/run/k8s.cni.cncf.io"]}"#,
            "deviceInfoDir",
        ),
        (r#"{"ipamConfinement":"never"}"#, "bestEffort"),
    ] {
        let p = write(body);
        let e = Node::from_file(&p, true).unwrap_err();
        let _ = std::fs::remove_file(p);
        assert_eq!(e.code, Code::InvalidConfig, "{body}");
        assert!(e.msg.contains(says), "{body}: {}", e.msg);
    }
}

/// `node-config` prints what the plugin will use: every key, read back, gives the same node.
#[test]
fn node_config_output_read_back_is_the_same_node() {
    let p = write(
        r#"{"stateDir":"/srv/s","logDir":"/srv/l","allowedNics":{"names":["a"],"pciAddresses":["0000:3b:00.0"],"drivers":["irdma"],"rdmaDevices":["0002:c903:0033:1234"]},
        "allowedUplinks":["b"],"deviceInfoDir":"/srv/d","memlock":"1048576","cdiHook":"/srv/bin/rdma-host-device","ipamPlugins":["host-local"],
        "ipamPaths":["/srv/ipam"],"ipamReadPaths":["/srv/ro"],"ipamConfinement":"bestEffort",
        "ipamTimeoutSeconds":7,"takeRdmaDevicesInUse":true,
        "devicePlugin":{"pools":[{"resourceName":"rdma-host-device.io/rail","selectors":{"names":["a"]}}],
        "charDevices":{"umad":true,"issm":true,"cdi":true}},
        "dra":{"nics":{"drivers":["mlx5_core"]},"resourceName":"rdma-host-device.io/rail",
        "rails":[{"name":"0","selectors":{"pciAddresses":["0000:3b:00.0"]}}]},
        "gc":{"criSocket":"/run/containerd/containerd.sock","periodSeconds":60}}"#,
    );
    let n = Node::from_file(&p, true).unwrap();
    let _ = std::fs::remove_file(&p);
    let mut shown: serde_json::Value = serde_json::from_str(&n.to_json()).unwrap();
    shown.as_object_mut().unwrap().remove("source");
    let q = write(&shown.to_string());
    let back = Node::from_file(&q, true).unwrap();
    let _ = std::fs::remove_file(&q);
    assert_eq!(back.device_plugin().unwrap(), n.device_plugin().unwrap());
    assert_eq!(back.dra().unwrap(), n.dra().unwrap());
    assert!(n.dra().unwrap().is_some());
    assert_eq!(back.gc().unwrap(), n.gc().unwrap());
    let g = n.gc().unwrap().unwrap();
    assert_eq!((g.period_seconds, g.grace_seconds), (60, 120));
    let same = |mut x: Node| {
        x.source.clear();
        x.device_plugin_json = None;
        x.dra_json = None;
        x.gc_json = None;
        x
    };
    assert_eq!(same(back), same(n), "{shown}");
}

/// A symlink to the stateDir is the stateDir: the kernel would grant the file it resolves to.
#[test]
fn an_ipam_path_that_is_a_symlink_to_the_state_dir_is_refused() {
    let d = std::env::temp_dir().join(format!("rhd-node-alias-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("state")).unwrap();
    std::os::unix::fs::symlink(d.join("state"), d.join("alias")).unwrap();
    let p = write(&format!(
        r#"{{"stateDir":"{s}","ipamPaths":["{a}"]}}"#,
        s = d.join("state").display(),
        a = d.join("alias").display()
    ));
    let e = Node::from_file(&p, true).unwrap_err();
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(e.code, Code::InvalidConfig);
    assert!(e.msg.contains("stateDir"), "{}", e.msg);
}

#[test]
fn a_bad_dra_section_is_an_error_naming_the_file_and_the_key() {
    for (body, says) in [
        (r#"{"dra":{"resourceName":"rail"}}"#, "dra.resourceName"),
        (
            r#"{"dra":{"resourceName":"a-rather-long-vendor-domain.example.com/this-name-is-longer-than-the-api-lets"}}"#,
            "longer than 64",
        ),
        (r#"{"dra":{"nics":{}}}"#, "dra.nics is empty"),
        (
            r#"{"dra":{"rails":[{"name":"","selectors":{"names":["a"]}}]}}"#,
            "dra.rails[0]",
        ),
        (
            r#"{"dra":{"rails":[{"name":"0","selectors":{}}]}}"#,
            "selectors is empty",
        ),
        (
            r#"{"dra":{"rails":[{"name":"0","selectors":{"names":["a"]}},{"name":"0","selectors":{"names":["b"]}}]}}"#,
            "named twice",
        ),
        (r#"{"dra":{"rail":[]}}"#, "unknown field"),
        (
            r#"{"dra":{"extendedResourceName":"rail"}}"#,
            "dra.extendedResourceName \"rail\" must be vendor-domain/name",
        ),
        (
            r#"{"dra":{"extendedResourceName":"kubernetes.io/rail"}}"#,
            "Kubernetes' own",
        ),
        (
            r#"{"dra":{"deviceMetadata":{"cdiDir":"/etc/cdi"}}}"#,
            "dra.deviceMetadata.cdiDir /etc/cdi is inside /etc",
        ),
        (
            r#"{"dra":{"deviceMetadata":{"pluginDataDir":"var/lib/x"}}}"#,
            "must be an absolute path",
        ),
        (
            r#"{"dra":{"deviceMetadata":{"dir":"/x"}}}"#,
            "unknown field",
        ),
    ] {
        let p = write(body);
        let e = Node::from_file(&p, true).and_then(|n| n.dra()).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{body}");
        assert!(e.msg.contains(&p.display().to_string()), "{}", e.msg);
        assert!(e.msg.contains(says), "{body}: {}", e.msg);
        let _ = std::fs::remove_file(p);
    }
    assert_eq!(Node::default().dra().unwrap(), None);
}

/// What ADD reads of `dra`: `deviceMetadata` alone (a bad rail is the agent's to refuse), the
/// same checks, and no metadata without the key.
#[test]
fn add_reads_only_dra_device_metadata() {
    let dir = std::env::temp_dir().join(format!("rhd-node-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("node.json");
    let load = |body: &str| {
        std::fs::write(&p, body).unwrap();
        Node::from_file(&p, true).unwrap().dra_metadata()
    };
    assert_eq!(load("{}").unwrap(), None);
    assert_eq!(load(r#"{"dra":{"nics":{"names":["a"]}}}"#).unwrap(), None);
    let m = load(r#"{"dra":{"rails":[{"name":"","selectors":{}}],"deviceMetadata":{}}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(m, DeviceMetadataConfig::default());
    let place = m.place().unwrap();
    assert_eq!(
        place.plugin_data_dir,
        Path::new("/var/lib/kubelet/plugins/rdma-host-device.io")
    );
    assert_eq!(place.cdi_dir, Path::new("/var/run/cdi"));
    let off = load(r#"{"dra":{"deviceMetadata":{"enabled":false}}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(off.place(), None);
    assert!(load(r#"{"dra":{"deviceMetadata":{"cdiDir":"/"}}}"#).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// What ADD reads of `devicePlugin`: `nicEnv` alone (a bad pool is the device plugin's to
/// refuse), checked as `dra.deviceMetadata.cdiDir` is, and no per-NIC env without the key.
#[test]
fn add_reads_only_device_plugin_nic_env_checked_like_the_dra_cdi_dir() {
    let dir = std::env::temp_dir().join(format!("rhd-node-nicenv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("node.json");
    let load = |body: &str| {
        std::fs::write(&p, body).unwrap();
        Node::from_file(&p, true).unwrap().nic_env()
    };
    assert_eq!(load("{}").unwrap(), None);
    assert_eq!(load(r#"{"devicePlugin":{"pools":[]}}"#).unwrap(), None);
    let e = load(r#"{"devicePlugin":{"pools":[],"nicEnv":{}}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(e, NicEnvConfig::default());
    assert_eq!(e.place().unwrap().cdi_dir, Path::new("/var/run/cdi"));
    let off = load(r#"{"devicePlugin":{"nicEnv":{"enabled":false}}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(off.place(), None);
    for (body, says) in [
        (
            r#"{"devicePlugin":{"nicEnv":{"cdiDir":"/etc/cdi"}}}"#,
            "devicePlugin.nicEnv.cdiDir /etc/cdi is inside /etc",
        ),
        (
            r#"{"devicePlugin":{"nicEnv":{"cdiDir":"/"}}}"#,
            "system directory",
        ),
        (
            r#"{"devicePlugin":{"nicEnv":{"cdiDir":"run/cdi"}}}"#,
            "must be an absolute path",
        ),
        (
            r#"{"devicePlugin":{"nicEnv":{"cdiDir":"/var/run/cdi/../../etc"}}}"#,
            "without '..'",
        ),
        (
            r#"{"devicePlugin":{"nicEnv":{"dir":"/x"}}}"#,
            "unknown field",
        ),
    ] {
        let e = load(body).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{body}");
        assert!(e.msg.contains(says), "{body}: {}", e.msg);
        // The device plugin refuses the same.
        let full = body.replace(
            r#"{"devicePlugin":{"#,
            r#"{"devicePlugin":{"pools":[{"resourceName":"a.io/r","selectors":{"names":["x"]}}],"#,
        );
        std::fs::write(&p, full).unwrap();
        let e = Node::from_file(&p, true)
            .unwrap()
            .device_plugin()
            .unwrap_err();
        assert!(e.msg.contains(says), "{body}: {}", e.msg);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resource_served_through_dra_may_not_be_a_device_plugin_pool_too() {
    let pool = |name: &str| {
        let nic = name.rsplit('/').next().unwrap_or(name);
        format!(r#"{{"resourceName":"{name}","selectors":{{"names":["{nic}0"]}}}}"#)
    };
    let both = format!(
        r#"{{"devicePlugin":{{"pools":[{},{}]}},"dra":{{"extendedResourceName":"rdma-host-device.io/rail"}}}}"#,
        pool("rdma-host-device.io/storage"),
        pool("rdma-host-device.io/rail")
    );
    let p = write(&both);
    let n = Node::from_file(&p, true).unwrap();
    // Both halves refuse (each checks its own section against the other), naming the file,
    // the pool, and both ways out.
    for e in [n.device_plugin().unwrap_err(), n.dra().unwrap_err()] {
        assert_eq!(e.code, Code::InvalidConfig);
        for says in [
            p.display().to_string().as_str(),
            "devicePlugin.pools[1] offers rdma-host-device.io/rail",
            "dra.extendedResourceName",
            "remove that pool",
            "remove dra.extendedResourceName",
        ] {
            assert!(e.msg.contains(says), "{says}: {}", e.msg);
        }
    }
    let _ = std::fs::remove_file(p);
    // Another pool beside it, or the name on one side only: accepted.
    for ok in [
        format!(
            r#"{{"devicePlugin":{{"pools":[{}]}},"dra":{{"extendedResourceName":"rdma-host-device.io/rail"}}}}"#,
            pool("rdma-host-device.io/storage")
        ),
        format!(
            r#"{{"devicePlugin":{{"pools":[{}]}},"dra":{{}}}}"#,
            pool("rdma-host-device.io/rail")
        ),
        r#"{"dra":{"extendedResourceName":"rdma-host-device.io/rail"}}"#.to_owned(),
    ] {
        let p = write(&ok);
        let n = Node::from_file(&p, true).unwrap();
        n.device_plugin().unwrap();
        n.dra().unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&n.to_json()).unwrap()["dra"]
                ["extendedResourceName"]
                .as_str()
                .is_some(),
            ok.contains("extendedResourceName"),
            "node-config prints it"
        );
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_link_made_from_another_namespace_is_refused_unless_allowed_nics_names_it() {
    let squatter = NicFacts {
        name: "ens1f0",
        made_elsewhere: Some("it is a veth whose peer is in another network namespace".into()),
        ..Default::default()
    };
    // No allowedNics: every NIC but the uplinks, yet not this one.
    let e = Node::default().admit(&squatter).unwrap_err();
    assert_eq!(e.code, Code::NotAllowed);
    assert!(
        e.msg.contains("veth whose peer") && e.msg.contains("allowedNics.names"),
        "{}",
        e.msg
    );
    // A driver entry matches it (veth), but only a name entry lets it through.
    let by = |p: NicSelectors| Node {
        allowed_nics: Some(p),
        ..Node::default()
    };
    let drivers = by(NicSelectors {
        drivers: vec!["veth".into()],
        ..Default::default()
    });
    let veth = NicFacts {
        driver: Some("veth"),
        ..squatter
    };
    assert!(drivers.admit(&veth).is_err());
    let names = by(NicSelectors {
        names: vec!["ens1f0".into()],
        ..Default::default()
    });
    assert!(names.admit(&veth).is_ok());
}

/// `gc`: optional; a socket that is not absolute, a period of 0 or a grace below 10 s are the
/// operator's mistakes, reported with the key.
#[test]
fn gc_section_is_checked() {
    assert_eq!(Node::default().gc().unwrap(), None);
    for (body, says) in [
        (r#"{"gc":{"criSocket":"run/c.sock"}}"#, "gc.criSocket"),
        (
            r#"{"gc":{"criSocket":"/c.sock","periodSeconds":0}}"#,
            "gc.periodSeconds",
        ),
        (
            r#"{"gc":{"criSocket":"/c.sock","graceSeconds":5}}"#,
            "gc.graceSeconds",
        ),
        (
            r#"{"gc":{"criSocket":"/c.sock","cniPath":[]}}"#,
            "gc.cniPath",
        ),
        (r#"{"gc":{"periodSeconds":60}}"#, "criSocket"),
        (r#"{"gc":{"criSocket":"/c.sock","bogus":1}}"#, "bogus"),
    ] {
        let p = write(body);
        let n = Node::from_file(&p, true).unwrap();
        let _ = std::fs::remove_file(p);
        let e = n.gc().unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{body}");
        assert!(e.msg.contains(says), "{body}: {}", e.msg);
    }
}

/// `node-config` shows every key the file may hold, each section parsed, the defaults filled
/// in: what the file sets comes back under the key it was set by, and a setting's value taken
/// from the shown JSON reads back into the same node.
#[test]
fn the_effective_settings_show_every_key_and_read_back_the_same() {
    let body = r#"{"allowedNics":{"drivers":["mlx5_core"]},"memlockFailClosed":true,
        "gc":{"criSocket":"/run/containerd/containerd.sock"},
        "devicePlugin":{"pools":[{"resourceName":"rdma-host-device.io/rail","selectors":{"drivers":["mlx5_core"]}}],"charDevices":{"cdi":true}},
        "dra":{"rails":[{"name":"rail0","selectors":{"drivers":["irdma"]}}]}}"#;
    let n: Node = serde_json::from_str(body).unwrap();
    let mut shown: serde_json::Value = serde_json::from_str(&n.to_json()).unwrap();
    for k in keys_of::<Node>() {
        assert!(shown.get(*k).is_some(), "{k} not shown: {shown}");
    }
    assert_eq!(shown["gc"]["periodSeconds"], 300, "{shown}");
    shown.as_object_mut().unwrap().remove("source");
    let again: Node = serde_json::from_value(shown.clone()).unwrap();
    assert_eq!(again.to_json(), n.to_json(), "{shown}");
}
