use super::*;

fn parse(s: &str) -> Result<NetConf> {
    NetConf::parse(s.as_bytes().to_vec())
}

#[test]
fn minimal_config() {
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n","type":"rdma-host-device","device":"eth1"}"#)
        .unwrap();
    assert_eq!(c.nic, Some(NicRequest::Name("eth1".into())));
    assert_eq!(c.rdma.isolation, Isolation::Auto);
    assert_eq!(c.rdma.gid_timeout_ms, 5000);
}

#[test]
fn log_file_is_a_name_in_the_nodes_log_dir() {
    let node = Node {
        log_dir: PathBuf::from("/l"),
        ..Node::default()
    };
    let p = |f: &str| {
        NetConf::parse_strict(
            format!(r#"{{"cniVersion":"1.0.0","name":"n","logFile":{f:?}}}"#).into_bytes(),
            &node,
        )
    };
    assert_eq!(
        p("a.log").unwrap().log_file,
        Some(PathBuf::from("/l/a.log"))
    );
    assert_eq!(
        p("/l/b.log").unwrap().log_file,
        Some(PathBuf::from("/l/b.log"))
    );
    for bad in ["/l/sub/c.log", "/tmp/c.log", ".hidden", "", "a/b", "x y"] {
        assert_eq!(p(bad).unwrap_err().code, Code::InvalidConfig, "{bad}");
    }
}

#[test]
fn del_is_lenient_and_says_what_it_ignored() {
    let node = Node::default();
    let raw = br#"{"cniVersion":"1.0.0","name":"n","device":"e","hwaddr":"x","typo":1,
        "mtu":7,"stateDir":"/etc","logFile":"/etc/passwd",
        "rdma":{"gidTimeoutMs":99999999},"ipam":{"type":"host-local","subnet":"10.0.0.0/24"}}"#;
    assert!(NetConf::parse_strict(raw.to_vec(), &node).is_err());
    let (c, ignored) = NetConf::parse_lenient(raw.to_vec(), &node).unwrap();
    assert_eq!(c.ipam_type.as_deref(), Some("host-local"));
    assert_eq!(c.log_file, None);
    assert_eq!(c.mtu, None);
    assert_eq!(c.nic, None);
    assert_eq!(c.raw, raw.to_vec(), "IPAM gets the bytes the runtime sent");
    let all = ignored.join("\n");
    for k in ["typo", "mtu", "stateDir", "logFile", "rdma"] {
        assert!(all.contains(k), "{k} not reported in {all}");
    }
    // A bad version or name does not stop DEL either; only non-JSON does.
    let (c, _) =
        NetConf::parse_lenient(br#"{"cniVersion":"9","name":"a b"}"#.to_vec(), &node).unwrap();
    assert_eq!(c.cni_version, Version::LATEST);
    assert_eq!(
        NetConf::parse_lenient(b"nope".to_vec(), &node)
            .unwrap_err()
            .code,
        Code::Decode
    );
}

#[test]
fn full_config() {
    let c = parse(
        r#"{"cniVersion":"1.1.0","name":"rdma-net","type":"rdma-host-device",
            "hwaddr":"AA-BB-CC-DD-EE-FF","mtu":9000,
            "ipam":{"type":"host-local","subnet":"10.1.0.0/24"},
            "rdma":{"isolation":"exclusive","gidTimeoutMs":100,"softDevice":"siw"},
            "logLevel":"debug","logFile":"x.log","stateDir":"/var/lib/cni/rdma-host-device"}"#,
    )
    .unwrap();
    assert_eq!(
        c.log_file,
        Some(PathBuf::from("/var/log/rdma-host-device/x.log"))
    );
    assert_eq!(c.nic, Some(NicRequest::Mac("aa:bb:cc:dd:ee:ff".into())));
    assert_eq!(c.ipam_type.as_deref(), Some("host-local"));
    assert_eq!(c.rdma.soft_device, Some(SoftDevice::Siw));
    assert_eq!(c.log_level, Some(log::LevelFilter::Debug));
}

#[test]
fn same_device_id_twice_is_one_selector() {
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n","deviceID":"0000:00:05.0","runtimeConfig":{"deviceID":"0000:00:05.0"}}"#).unwrap();
    assert_eq!(c.nic, Some(NicRequest::DeviceId("0000:00:05.0".into())));
}

#[test]
fn multus_device_id_and_pci_bus_id_are_one_selector() {
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n","deviceID":"0000:00:05.0","pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"0000:00:05.0"}}"#).unwrap();
    assert_eq!(c.nic, Some(NicRequest::DeviceId("0000:00:05.0".into())));
    let e = parse(
        r#"{"cniVersion":"1.0.0","name":"n","deviceID":"0000:00:05.0","pciBusID":"0000:00:06.0"}"#,
    )
    .unwrap_err();
    assert_eq!(e.code, Code::DeviceAmbiguous);
}

#[test]
fn bad_config_table() {
    let base = r#""cniVersion":"1.0.0","name":"n","type":"rdma-host-device""#;
    let cases: &[(&str, Code)] = &[
        ("{", Code::Decode),
        ("[]", Code::Decode),
        (
            r#"{"cniVersion":"9.9.9","name":"n","device":"e"}"#,
            Code::IncompatibleVersion,
        ),
        (r#"{"name":"n","device":"e"}"#, Code::IncompatibleVersion),
        (
            r#"{"cniVersion":"1.0.0","device":"e"}"#,
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"devcie\":\"e\"}}"),
            Code::UnsupportedField,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"mtu\":-5}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"mtu\":\"abc\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"mtu\":10}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"a/b\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"hwaddr\":\"aa:bb:cc:dd:ee:ff\"}}"),
            Code::DeviceAmbiguous,
        ),
        (
            &format!("{{{base},\"hwaddr\":\"zz\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"kernelpath\":\"/etc/passwd\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"pciBusID\":\"../../x\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"rdma\":{{\"isolation\":\"maybe\"}}}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"rdma\":{{\"bogus\":1}}}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"ipam\":{{\"type\":\"../x\"}}}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"ipam\":{{\"subnet\":\"10.0.0.0/8\"}}}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"stateDir\":\"rel\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"stateDir\":\"/etc\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"logFile\":\"/etc/passwd\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"logFile\":\"../x.log\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"logFile\":\"/var/log/rdma-host-device/../x\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"logFile\":\"..\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"logFile\":\"a\\u0000b\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"logLevel\":\"loud\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"rdma\":{{\"gidTimeoutMs\":600001}}}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"rdma\":{{\"softDevice\":\"mlx5\"}}}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"rdmaDevice\":\"../mlx5_0\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"a/b\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"hwaddr\":\"zz\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!("{{{base},\"device\":\"e\",\"type\":\"../rdma-host-device\"}}"),
            Code::InvalidConfig,
        ),
        (
            &format!(
                "{{{base},\"device\":\"e\",\"prevResult\":{{\"ips\":[{{\"address\":\"nope\"}}]}}}}"
            ),
            Code::InvalidConfig,
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"bad name","device":"e"}"#,
            Code::InvalidConfig,
        ),
    ];
    for (input, code) in cases {
        let err = parse(input).expect_err(input);
        assert_eq!(err.code, *code, "{input}: {err}");
        assert!(!err.msg.is_empty());
    }
}

#[test]
fn oversized_config_is_rejected() {
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(MAX_CONFIG_LEN));
    assert_eq!(parse(&big).unwrap_err().code, Code::InvalidConfig);
}

#[test]
fn no_selector_is_reported_by_require() {
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n"}"#).unwrap();
    assert_eq!(c.require_nic().unwrap_err().code, Code::InvalidConfig);
}

#[test]
fn dra_request_names_a_claims_request_and_only_it_selects() {
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n","draRequest":"rail/gpu-0"}"#).unwrap();
    assert_eq!(c.dra_request.as_deref(), Some("rail/gpu-0"));
    assert_eq!(c.nic, None);
    let base = r#""cniVersion":"1.0.0","name":"n""#;
    for (input, code) in [
        (
            format!("{{{base},\"draRequest\":\"Rail\"}}"),
            Code::InvalidConfig,
        ),
        (
            format!("{{{base},\"draRequest\":\"a/b/c\"}}"),
            Code::InvalidConfig,
        ),
        (
            format!("{{{base},\"draRequest\":\"../x\"}}"),
            Code::InvalidConfig,
        ),
        (
            format!("{{{base},\"draRequest\":\"\"}}"),
            Code::InvalidConfig,
        ),
        (
            format!("{{{base},\"draRequest\":\"nic\",\"deviceID\":\"0000:3b:00.0\"}}"),
            Code::DeviceAmbiguous,
        ),
        (
            format!(
                "{{{base},\"draRequest\":\"nic\",\"runtimeConfig\":{{\"deviceID\":\"0000:3b:00.0\"}}}}"
            ),
            Code::DeviceAmbiguous,
        ),
    ] {
        let err = parse(&input).expect_err(&input);
        assert_eq!(err.code, code, "{input}: {err}");
    }
    // DEL works from its record: a draRequest (even a bad one) is not needed there.
    let (c, _) = NetConf::parse_lenient(
        format!("{{{base},\"draRequest\":\"Bad\"}}").into_bytes(),
        &Node::default(),
    )
    .unwrap();
    assert_eq!(c.dra_request, None);
}

#[test]
fn dra_extended_resource_names_a_resource_and_lets_only_a_device_id_beside_it() {
    let base = r#""cniVersion":"1.0.0","name":"n""#;
    let key = r#""draExtendedResource":"rdma-host-device.io/rail""#;
    let c = parse(&format!("{{{base},{key}}}")).unwrap();
    assert_eq!(
        c.dra_extended_resource.as_deref(),
        Some("rdma-host-device.io/rail")
    );
    assert_eq!(c.nic, None);
    // The name every DeviceClass answers to.
    parse(&format!(
        "{{{base},\"draExtendedResource\":\"deviceclass.resource.kubernetes.io/rdma-host-device.io\"}}"
    ))
    .unwrap();
    // What Multus adds from a device plugin: one deviceID, which wins (flows::plan).
    let c = parse(&format!(
        "{{{base},{key},\"deviceID\":\"0000:3b:00.0\",\"pciBusID\":\"0000:3b:00.0\",\"runtimeConfig\":{{\"deviceID\":\"0000:3b:00.0\"}}}}"
    ))
    .unwrap();
    assert_eq!(c.nic, Some(NicRequest::DeviceId("0000:3b:00.0".into())));
    for (input, code, says) in [
        (
            format!("{{{base},\"draExtendedResource\":\"rail\"}}"),
            Code::InvalidConfig,
            "draExtendedResource \"rail\" must be vendor-domain/name",
        ),
        (
            format!("{{{base},\"draExtendedResource\":\"kubernetes.io/rail\"}}"),
            Code::InvalidConfig,
            "Kubernetes' own",
        ),
        (
            format!("{{{base},\"draExtendedResource\":\"deviceclass.resource.kubernetes.io/\"}}"),
            Code::InvalidConfig,
            "draExtendedResource",
        ),
        (
            format!("{{{base},\"draExtendedResource\":\"\"}}"),
            Code::InvalidConfig,
            "draExtendedResource",
        ),
        (
            format!("{{{base},\"draExtendedResource\":7}}"),
            Code::InvalidConfig,
            "expected a string",
        ),
        (
            format!("{{{base},{key},\"draRequest\":\"nic\"}}"),
            Code::DeviceAmbiguous,
            "give one",
        ),
        (
            format!("{{{base},{key},\"device\":\"eth1\"}}"),
            Code::DeviceAmbiguous,
            "device \"eth1\" would always win",
        ),
        (
            format!("{{{base},{key},\"pciBusID\":\"0000:3b:00.0\"}}"),
            Code::DeviceAmbiguous,
            "would always win",
        ),
    ] {
        let err = parse(&input).expect_err(&input);
        assert_eq!(err.code, code, "{input}: {err}");
        assert!(err.msg.contains(says), "{input}: {}", err.msg);
    }
    // DEL works from its record: the key (even a bad value) is not needed there.
    let (c, _) = NetConf::parse_lenient(
        format!("{{{base},\"draExtendedResource\":\"bad\"}}").into_bytes(),
        &Node::default(),
    )
    .unwrap();
    assert_eq!(c.dra_extended_resource, None);
}
