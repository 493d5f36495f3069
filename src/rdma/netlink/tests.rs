//! Tests of the RDMA netlink module: request bytes, reply decoding (hand-built and captured
//! from a real kernel), robustness against malformed bytes, and — inside the rdma-vm rig —
//! the real socket against a real kernel (`#[ignore]`d; see tests/vm/rdma_netlink_probe.sh).

use super::*;

// ------------------------------------------------------------- kernel-like bytes, by hand

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_MULTI: u16 = 2;

fn ty(command: u16) -> u16 {
    (5 << 10) | command
}

/// One attribute: len (without padding), type, value, zero padding to 4 bytes.
fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(4 + value.len() as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(value);
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

fn msg(ty: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&4242u32.to_ne_bytes()); // our port id, as the kernel fills it in
    b.extend_from_slice(body);
    b
}

fn done(seq: u32, code: i32) -> Vec<u8> {
    msg(NLMSG_DONE, NLM_F_MULTI, seq, &code.to_ne_bytes())
}

/// NLMSG_ERROR: the code, then the request's header (as with NETLINK_CAP_ACK).
fn error(seq: u32, code: i32) -> Vec<u8> {
    let mut body = code.to_ne_bytes().to_vec();
    body.extend_from_slice(&msg(ty(1), 5, seq, &[])[..16]);
    msg(NLMSG_ERROR, 0, seq, &body)
}

fn device_body(index: u32, name: &str, ports: u32, guid: u64, protocol: &str) -> Vec<u8> {
    [
        nla(1, &index.to_ne_bytes()),
        nla(2, format!("{name}\0").as_bytes()),
        nla(3, &ports.to_ne_bytes()),
        nla(4, &0x1234u64.to_ne_bytes()), // CAP_FLAGS: ignored
        nla(6, &guid.to_ne_bytes()),
        nla(14, &[1]),
        nla(67, format!("{protocol}\0").as_bytes()),
    ]
    .concat()
}

fn port_body(dev: u32, name: &str, port: u32, netdev: Option<(u32, &str)>) -> Vec<u8> {
    let mut b = [
        nla(1, &dev.to_ne_bytes()),
        nla(2, format!("{name}\0").as_bytes()),
        nla(3, &port.to_ne_bytes()),
        nla(12, &[4]),
        nla(13, &[5]),
    ]
    .concat();
    if let Some((index, ndev)) = netdev {
        b.extend(nla(50, &index.to_ne_bytes()));
        b.extend(nla(51, format!("{ndev}\0").as_bytes()));
    }
    b
}

fn two_device_dump(seq: u32) -> Vec<u8> {
    [
        msg(
            ty(1),
            NLM_F_MULTI,
            seq,
            &device_body(1, "mlx5_0", 1, 0xa1b2, "roce"),
        ),
        msg(
            ty(1),
            NLM_F_MULTI,
            seq,
            &device_body(7, "siw0", 1, 0xc3d4, "iw"),
        ),
        done(seq, 0),
    ]
    .concat()
}

// ------------------------------------------------------------------------------ encoding

#[test]
fn encodes_device_dump() {
    let bytes = encode_request(cmd::GET, NLM_F_REQUEST | NLM_F_DUMP, 7, &[]);
    #[rustfmt::skip]
    let want = [
        16, 0, 0, 0,  0x01, 0x14,  0x01, 0x03,  7, 0, 0, 0,  0, 0, 0, 0,
    ];
    assert_eq!(bytes, want);
}

#[test]
fn encodes_port_dump_of_one_device() {
    let req = [ReqAttr::U32(attr::DEV_INDEX, 3)];
    let bytes = encode_request(cmd::PORT_GET, NLM_F_REQUEST | NLM_F_DUMP, 8, &req);
    #[rustfmt::skip]
    let want = [
        24, 0, 0, 0,  0x05, 0x14,  0x01, 0x03,  8, 0, 0, 0,  0, 0, 0, 0,
        8, 0, 1, 0,  3, 0, 0, 0,
    ];
    assert_eq!(bytes, want);
}

#[test]
fn encodes_sys_get_with_ack() {
    let bytes = encode_request(cmd::SYS_GET, NLM_F_REQUEST | NLM_F_ACK, 11, &[]);
    #[rustfmt::skip]
    let want = [
        16, 0, 0, 0,  0x06, 0x14,  0x05, 0x00,  11, 0, 0, 0,  0, 0, 0, 0,
    ];
    assert_eq!(bytes, want);
}

#[test]
fn encodes_newlink_with_nul_terminated_padded_strings() {
    let req = [
        ReqAttr::Str(attr::DEV_NAME, "rxe0"),
        ReqAttr::Str(attr::LINK_TYPE, "rxe"),
        ReqAttr::Str(attr::NDEV_NAME, "v0"),
    ];
    let bytes = encode_request(cmd::NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 9, &req);
    #[rustfmt::skip]
    let want = [
        44, 0, 0, 0,  0x03, 0x14,  0x05, 0x00,  9, 0, 0, 0,  0, 0, 0, 0,
        9, 0, 2, 0,  b'r', b'x', b'e', b'0',  0, 0, 0, 0,   // DEV_NAME "rxe0\0" + 3 pad
        8, 0, 65, 0,  b'r', b'x', b'e', 0,                  // LINK_TYPE "rxe\0"
        7, 0, 51, 0,  b'v', b'0', 0, 0,                     // NDEV_NAME "v0\0" + 1 pad
    ];
    assert_eq!(bytes, want);
}

#[test]
fn encodes_set_netns_and_dellink() {
    let req = [
        ReqAttr::U32(attr::DEV_INDEX, 2),
        ReqAttr::U32(attr::NET_NS_FD, 5),
    ];
    let bytes = encode_request(cmd::SET, NLM_F_REQUEST | NLM_F_ACK, 10, &req);
    #[rustfmt::skip]
    let want = [
        32, 0, 0, 0,  0x02, 0x14,  0x05, 0x00,  10, 0, 0, 0,  0, 0, 0, 0,
        8, 0, 1, 0,  2, 0, 0, 0,
        8, 0, 68, 0,  5, 0, 0, 0,
    ];
    assert_eq!(bytes, want);

    let req = [ReqAttr::U32(attr::DEV_INDEX, 4)];
    let bytes = encode_request(cmd::DELLINK, NLM_F_REQUEST | NLM_F_ACK, 12, &req);
    assert_eq!(&bytes[..8], &[24, 0, 0, 0, 0x04, 0x14, 0x05, 0x00]);
    assert_eq!(&bytes[16..], &[8, 0, 1, 0, 4, 0, 0, 0]);
}

#[test]
fn rejects_names_the_kernel_cannot_take() {
    for bad in ["", "a\0b", &"x".repeat(64)] {
        assert!(
            matches!(checked_name(bad), Err(RdmaNlError::InvalidName(_))),
            "{bad:?}"
        );
    }
    assert_eq!(checked_name("rxe0").ok(), Some("rxe0"));
}

// ------------------------------------------------------------------------------ decoding

#[test]
fn decodes_a_device_dump() {
    let devices = parse_devices(&two_device_dump(3), 3).unwrap();
    assert_eq!(
        devices,
        vec![
            RdmaDevice {
                index: 1,
                name: "mlx5_0".into(),
                node_guid: Some(0xa1b2),
                node_type: Some(1),
                protocol: Some("roce".into()),
                driver: None,
                port_count: Some(1),
            },
            RdmaDevice {
                index: 7,
                name: "siw0".into(),
                node_guid: Some(0xc3d4),
                node_type: Some(1),
                protocol: Some("iw".into()),
                driver: None,
                port_count: Some(1),
            },
        ]
    );
}

#[test]
fn an_empty_dump_is_no_devices() {
    assert_eq!(parse_devices(&done(1, 0), 1).unwrap(), vec![]);
}

#[test]
fn a_dump_may_arrive_over_several_datagrams() {
    let bytes = two_device_dump(3);
    let first_len = u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize;
    let mut reply = Reply::new("dev get", 3);
    reply.feed(&bytes[..first_len]).unwrap();
    assert!(!reply.done);
    reply.feed(&bytes[first_len..]).unwrap();
    assert_eq!(reply.finish().unwrap().len(), 2);
}

#[test]
fn skips_replies_to_other_requests() {
    let stale = msg(ty(1), NLM_F_MULTI, 2, &device_body(9, "old", 1, 1, "ib"));
    let bytes = [stale, two_device_dump(3)].concat();
    let names: Vec<_> = parse_devices(&bytes, 3)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["mlx5_0", "siw0"]);
}

#[test]
fn a_reply_without_done_is_incomplete() {
    let bytes = msg(ty(1), NLM_F_MULTI, 3, &device_body(1, "a", 1, 1, "ib"));
    assert!(matches!(
        parse_devices(&bytes, 3),
        Err(RdmaNlError::Decode(_))
    ));
}

#[test]
fn decodes_ports_with_and_without_netdev() {
    let bytes = [
        msg(
            ty(5),
            NLM_F_MULTI,
            4,
            &port_body(2, "rxe0", 1, Some((3, "v0"))),
        ),
        msg(ty(5), NLM_F_MULTI, 4, &port_body(2, "rxe0", 2, None)),
        done(4, 0),
    ]
    .concat();
    let ports = parse_ports(&bytes, 4).unwrap();
    assert_eq!(
        ports[0],
        RdmaPort {
            dev_index: 2,
            dev_name: "rxe0".into(),
            port: 1,
            state: Some(4),
            phys_state: Some(5),
            netdev_index: Some(3),
            netdev_name: Some("v0".into()),
        }
    );
    assert_eq!(
        (
            ports[1].port,
            ports[1].netdev_index,
            ports[1].netdev_name.as_deref()
        ),
        (2, None, None)
    );
}

#[test]
fn decodes_sys_get() {
    for (byte, mode) in [(1u8, NetnsMode::Shared), (0, NetnsMode::Exclusive)] {
        let body = [nla(66, &[byte]), nla(79, &[1])].concat(); // + COPY_ON_FORK, ignored
        let bytes = [msg(ty(6), 0, 5, &body), error(5, 0)].concat();
        assert_eq!(parse_sys(&bytes, 5).unwrap(), mode);
    }
    let no_mode = [msg(ty(6), 0, 5, &nla(79, &[1])), error(5, 0)].concat();
    assert!(matches!(
        parse_sys(&no_mode, 5),
        Err(RdmaNlError::Decode(_))
    ));
}

#[test]
fn decodes_acks_and_kernel_errors() {
    parse_ack(&error(6, 0), 6, "link add").unwrap();
    let err = parse_ack(&error(6, -95), 6, "dev set netns").unwrap_err();
    assert!(
        matches!(
            err,
            RdmaNlError::Kernel {
                op: "dev set netns",
                errno: 95
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.errno(), Some(libc::EOPNOTSUPP));
    assert!(err.to_string().contains("dev set netns"), "{err}");
    // A dump that fails half-way says so in NLMSG_DONE.
    let err = parse_devices(&done(6, -22), 6).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL));
    // A refusal to start a dump comes as NLMSG_ERROR.
    assert_eq!(
        parse_ports(&error(6, -22), 6).unwrap_err().errno(),
        Some(22)
    );
}

#[test]
fn decodes_the_uverbs_driver_id() {
    let id32 = nla(73, &14u32.to_ne_bytes());
    assert_eq!(driver_from_attrs(&id32).unwrap().as_deref(), Some("rxe"));
    let id64 = nla(73, &18u64.to_ne_bytes());
    assert_eq!(driver_from_attrs(&id64).unwrap().as_deref(), Some("siw"));
    assert_eq!(
        driver_from_attrs(&nla(73, &0u32.to_ne_bytes())).unwrap(),
        None
    );
    assert_eq!(
        driver_from_attrs(&nla(73, &999u32.to_ne_bytes())).unwrap(),
        None
    );
    assert_eq!(driver_from_attrs(&[]).unwrap(), None);
}

#[test]
fn rejects_malformed_attributes() {
    let short_index = [nla(1, &[1, 0]), nla(2, b"x\0")].concat();
    let bytes = [msg(ty(1), NLM_F_MULTI, 1, &short_index), done(1, 0)].concat();
    assert!(matches!(
        parse_devices(&bytes, 1),
        Err(RdmaNlError::Decode(_))
    ));
    let no_name = nla(1, &1u32.to_ne_bytes());
    let bytes = [msg(ty(1), NLM_F_MULTI, 1, &no_name), done(1, 0)].concat();
    assert!(matches!(
        parse_devices(&bytes, 1),
        Err(RdmaNlError::Decode(_))
    ));
    // Not an nldev message (client 4 = RDMA_NL_LS).
    let bytes = [msg(4 << 10 | 1, 0, 1, &[]), done(1, 0)].concat();
    assert!(matches!(
        parse_devices(&bytes, 1),
        Err(RdmaNlError::Decode(_))
    ));
}

/// Every truncation and many corruptions of a valid reply decode to Ok or Err, never a panic.
#[test]
fn never_panics_on_malformed_bytes() {
    let valid = [
        two_device_dump(3),
        msg(
            ty(5),
            NLM_F_MULTI,
            3,
            &port_body(2, "rxe0", 1, Some((3, "v0"))),
        ),
        error(3, -1),
    ]
    .concat();
    let try_all = |b: &[u8]| {
        let _ = parse_devices(b, 3);
        let _ = parse_ports(b, 3);
        let _ = parse_sys(b, 3);
        let _ = parse_ack(b, 3, "x");
        let _ = driver_from_attrs(b);
    };
    for len in 0..=valid.len() {
        try_all(&valid[..len]);
    }
    for i in 0..valid.len() {
        for v in [0x00, 0x01, 0x03, 0x7f, 0x80, 0xff] {
            let mut b = valid.clone();
            b[i] = v;
            try_all(&b);
        }
    }
    // And pseudo-random bytes, some with a plausible header.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..5000 {
        let len = (round % 97) as usize;
        let mut b: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        if len >= 16 && round % 2 == 0 {
            b[..4].copy_from_slice(&(len as u32).to_ne_bytes());
            b[8..12].copy_from_slice(&3u32.to_ne_bytes());
        }
        try_all(&b);
    }
}

// ------------------------------------------------- replies captured from a real kernel

/// A capture from testdata/rdma-netlink (see its README): the request as sent, every byte
/// read back for it, and the request's sequence number.
fn capture(name: &str) -> (Vec<u8>, Vec<u8>, u32) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/rdma-netlink");
    let read = |file: String| fs_read(&format!("{dir}/{file}"));
    let req = read(format!("{name}.req.bin"));
    let seq = u32::from_ne_bytes(req[8..12].try_into().unwrap());
    (req, read(format!("{name}.bin")), seq)
}

fn fs_read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const DUMP: u16 = NLM_F_REQUEST | NLM_F_DUMP;
const DO: u16 = NLM_F_REQUEST | NLM_F_ACK;

#[test]
fn captured_sys_get() {
    let (req, reply, seq) = capture("sys_get_shared");
    assert_eq!(encode_request(cmd::SYS_GET, DO, seq, &[]), req);
    assert_eq!(parse_sys(&reply, seq).unwrap(), NetnsMode::Shared);
    let (_, reply, seq) = capture("sys_get_exclusive");
    assert_eq!(parse_sys(&reply, seq).unwrap(), NetnsMode::Exclusive);
}

#[test]
fn captured_device_dumps() {
    let (req, reply, seq) = capture("dev_get_dump_rxe");
    assert_eq!(encode_request(cmd::GET, DUMP, seq, &[]), req);
    let rxe0 = RdmaDevice {
        index: 0, // the first RDMA device has index 0
        name: "rxe0".into(),
        node_guid: Some(0x0000_00ff_fe00_0010), // EUI-64 of v0's MAC 02:00:00:00:00:10
        node_type: Some(1),
        protocol: Some("roce".into()),
        driver: None,
        port_count: Some(1),
    };
    assert_eq!(parse_devices(&reply, seq).unwrap(), vec![rxe0.clone()]);

    let (_, reply, seq) = capture("dev_get_dump_rxe_siw");
    let siw0 = RdmaDevice {
        index: 1,
        name: "siw0".into(),
        node_guid: Some(0x0000_00ff_fe00_0011),
        node_type: Some(4),
        protocol: Some("iw".into()),
        driver: None,
        port_count: Some(1),
    };
    assert_eq!(
        parse_devices(&reply, seq).unwrap(),
        vec![rxe0.clone(), siw0]
    );

    let (_, reply, seq) = capture("dev_get_dump_empty");
    assert_eq!(parse_devices(&reply, seq).unwrap(), vec![]);

    // A GET for one index (not a dump): the device, then the ACK.
    let (_, reply, seq) = capture("dev_get_rxe0");
    let bodies = collect(&reply, seq, "dev get").unwrap();
    assert_eq!(decode_all(&bodies, device_from_attrs).unwrap(), vec![rxe0]);
    let (_, reply, seq) = capture("dev_get_enodev");
    assert_eq!(
        parse_ack(&reply, seq, "dev get").unwrap_err().errno(),
        Some(libc::EINVAL)
    );
}

#[test]
fn captured_port_dumps() {
    let (req, reply, seq) = capture("port_get_dump_rxe");
    let by_dev = [ReqAttr::U32(attr::DEV_INDEX, 0)];
    assert_eq!(encode_request(cmd::PORT_GET, DUMP, seq, &by_dev), req);
    let want = |dev_index: u32, dev_name: &str, ndev: u32, ndev_name: &str| RdmaPort {
        dev_index,
        dev_name: dev_name.into(),
        port: 1,
        state: Some(4),      // ACTIVE
        phys_state: Some(5), // LINK_UP
        netdev_index: Some(ndev),
        netdev_name: Some(ndev_name.into()),
    };
    assert_eq!(
        parse_ports(&reply, seq).unwrap(),
        vec![want(0, "rxe0", 4, "v0")]
    );
    let (_, reply, seq) = capture("port_get_dump_siw");
    assert_eq!(
        parse_ports(&reply, seq).unwrap(),
        vec![want(1, "siw0", 3, "v1")]
    );
}

#[test]
fn captured_link_add_and_delete() {
    let (req, reply, seq) = capture("newlink_ack");
    let add = [
        ReqAttr::Str(attr::DEV_NAME, "rxe0"),
        ReqAttr::Str(attr::LINK_TYPE, "rxe"),
        ReqAttr::Str(attr::NDEV_NAME, "v0"),
    ];
    assert_eq!(encode_request(cmd::NEWLINK, DO, seq, &add), req);
    parse_ack(&reply, seq, "link add").unwrap();
    let (_, reply, seq) = capture("newlink_siw_ack");
    parse_ack(&reply, seq, "link add").unwrap();

    let (req, reply, seq) = capture("dellink_ack");
    let del = [ReqAttr::U32(attr::DEV_INDEX, 1)];
    assert_eq!(encode_request(cmd::DELLINK, DO, seq, &del), req);
    parse_ack(&reply, seq, "link delete").unwrap();
}

#[test]
fn captured_move_refusals() {
    for name in [
        "dev_set_netns_shared_eopnotsupp",
        "dev_set_netns_eopnotsupp",
    ] {
        let (req, reply, seq) = capture(name);
        let fd = u32::from_ne_bytes(req[28..32].try_into().unwrap());
        let set = [
            ReqAttr::U32(attr::DEV_INDEX, 0),
            ReqAttr::U32(attr::NET_NS_FD, fd),
        ];
        assert_eq!(encode_request(cmd::SET, DO, seq, &set), req, "{name}");
        let err = parse_ack(&reply, seq, "dev set netns").unwrap_err();
        assert_eq!(err.errno(), Some(libc::EOPNOTSUPP), "{name}");
    }
}

/// Every capture, cut short anywhere, decodes to Ok or Err and never panics.
#[test]
fn captures_cut_short_never_panic() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/rdma-netlink");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "bin") {
            let bytes = fs_read(&path.to_string_lossy());
            for len in 0..bytes.len() {
                let _ = parse_devices(&bytes[..len], 0);
                let _ = parse_ports(&bytes[..len], 0);
                let _ = parse_sys(&bytes[..len], 0);
            }
        }
    }
}

// ------------------------------------------------------------------- the real socket

#[test]
fn open_without_rdma_is_unavailable() {
    if std::path::Path::new("/sys/module/ib_core").exists() {
        return; // this kernel has RDMA: nothing to check here
    }
    assert!(matches!(
        RdmaSocket::open(),
        Err(RdmaNlError::Unavailable(_))
    ));
}

/// Tests against a real kernel, run inside the rdma-vm rig by tests/vm/rdma_netlink_probe.sh,
/// which loads rdma_rxe, creates veth v0/v1 and `rdma link add rxe0 type rxe netdev v0`.
mod vm {
    use super::*;
    use std::fs;

    fn in_vm() -> bool {
        let yes = std::env::var_os("RDMA_VM").is_some();
        if !yes {
            eprintln!("skipped: needs RDMA_VM=1 (run tests/vm/rdma_netlink_probe.sh)");
        }
        yes
    }

    fn sysfs(path: &str) -> String {
        fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .trim()
            .to_string()
    }

    fn run_in_new_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare netns");
            f()
        })
        .join()
        .expect("netns thread")
    }

    #[test]
    #[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
    fn vm_devices_and_ports() {
        if !in_vm() {
            return;
        }
        let mut sock = RdmaSocket::open().unwrap();
        let dev = sock.device_by_name("rxe0").unwrap().expect("rxe0 listed");
        eprintln!("{dev:?}");
        assert_eq!(dev.protocol.as_deref(), Some("roce"));
        assert_eq!(dev.node_type, Some(1));
        assert_eq!(dev.port_count, Some(1));
        assert_eq!(dev.driver.as_deref(), Some("rxe"));
        let guid = sysfs("/sys/class/infiniband/rxe0/node_guid").replace(':', "");
        assert_eq!(dev.node_guid, Some(u64::from_str_radix(&guid, 16).unwrap()));

        let ports = sock.ports().unwrap();
        eprintln!("{ports:?}");
        let port = ports
            .iter()
            .find(|p| p.dev_name == "rxe0")
            .expect("rxe0 port");
        assert_eq!((port.dev_index, port.port), (dev.index, 1));
        assert_eq!(port.netdev_name.as_deref(), Some("v0"));
        let ifindex: u32 = sysfs("/sys/class/net/v0/ifindex").parse().unwrap();
        assert_eq!(port.netdev_index, Some(ifindex));
        assert!(port.state.is_some() && port.phys_state.is_some());
    }

    #[test]
    #[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
    fn vm_netns_mode_and_visibility_from_another_netns() {
        if !in_vm() {
            return;
        }
        let mode = RdmaSocket::open().unwrap().netns_mode().unwrap();
        let want = match sysfs("/sys/module/ib_core/parameters/netns_mode").as_str() {
            "Y" => NetnsMode::Shared,
            _ => NetnsMode::Exclusive,
        };
        assert_eq!(mode, want);

        // From a fresh netns: shared mode shows rxe0 (without its netdev, which is not
        // there); exclusive mode shows nothing.
        let (devices, ports) = run_in_new_netns(|| {
            let mut sock = RdmaSocket::open().unwrap();
            (sock.devices().unwrap(), sock.ports().unwrap())
        });
        eprintln!("from a new netns ({mode:?}): {devices:?} {ports:?}");
        match mode {
            NetnsMode::Shared => {
                assert!(devices.iter().any(|d| d.name == "rxe0"));
                let port = ports.iter().find(|p| p.dev_name == "rxe0").unwrap();
                assert_eq!(
                    (port.netdev_index, port.netdev_name.as_deref()),
                    (None, None)
                );
            }
            NetnsMode::Exclusive => assert!(devices.is_empty() && ports.is_empty()),
        }
    }

    #[test]
    #[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
    fn vm_soft_device_add_and_delete() {
        if !in_vm() {
            return;
        }
        let mut sock = RdmaSocket::open().unwrap();
        sock.add_soft_device("rxenl", "rxe", "v1").unwrap();
        let dev = sock
            .device_by_name("rxenl")
            .unwrap()
            .expect("rxenl listed after add");
        let ports = sock.ports().unwrap();
        let port = ports.iter().find(|p| p.dev_index == dev.index).unwrap();
        assert_eq!(port.netdev_name.as_deref(), Some("v1"));
        sock.delete_device(dev.index).unwrap();
        assert_eq!(sock.device_by_name("rxenl").unwrap(), None);

        let err = sock
            .add_soft_device("rxebad", "rxe", "nosuchnetdev")
            .unwrap_err();
        eprintln!("add with a missing netdev: {err}");
        assert_eq!(err.errno(), Some(libc::ENODEV));
        let err = sock.delete_device(9999).unwrap_err();
        eprintln!("delete of a missing device: {err}");
        assert_eq!(err.errno(), Some(libc::EINVAL));
    }

    #[test]
    #[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
    fn vm_move_stock_rxe_is_eopnotsupp() {
        if !in_vm() {
            return;
        }
        let mut sock = RdmaSocket::open().unwrap();
        let dev = sock.device_by_name("rxe0").unwrap().expect("rxe0 listed");
        let netns = fs::File::open("/proc/thread-self/ns/net").unwrap();
        let err = sock
            .move_to_netns(dev.index, std::os::fd::AsFd::as_fd(&netns))
            .unwrap_err();
        eprintln!("move rxe0: {err}");
        assert_eq!(err.errno(), Some(libc::EOPNOTSUPP));
        // The socket is still in step after a refusal.
        assert!(sock.device_by_name("rxe0").unwrap().is_some());
    }
}

// ------------------------------------------------------------ verbs contexts (users)

const NLA_F_NESTED: u16 = 0x8000;

fn ctx_entry(ctxn: u32, owner: Result<u32, &str>) -> Vec<u8> {
    let mut inner = nla(64, &ctxn.to_ne_bytes());
    match owner {
        Ok(pid) => inner.extend(nla(28, &pid.to_ne_bytes())),
        Err(module) => inner.extend(nla(29, format!("{module}\0").as_bytes())),
    }
    nla(87 | NLA_F_NESTED, &inner)
}

#[test]
fn encodes_ctx_dump_of_one_device() {
    let req = [ReqAttr::U32(attr::DEV_INDEX, 2)];
    let bytes = encode_request(cmd::RES_CTX_GET, NLM_F_REQUEST | NLM_F_DUMP, 9, &req);
    #[rustfmt::skip]
    let want = [
        24, 0, 0, 0,  0x16, 0x14,  0x01, 0x03,  9, 0, 0, 0,  0, 0, 0, 0,
        8, 0, 1, 0,  2, 0, 0, 0,
    ];
    assert_eq!(bytes, want);
}

#[test]
fn decodes_the_verbs_contexts_of_a_device_with_their_owners() {
    let table = [
        ctx_entry(0, Ok(4711)),
        ctx_entry(3, Ok(815)),
        ctx_entry(4, Err("ib_ipoib")),
    ]
    .concat();
    let body = [
        nla(1, &2u32.to_ne_bytes()),
        nla(2, b"rxe_0123\0"),
        nla(86 | NLA_F_NESTED, &table),
    ]
    .concat();
    let reply = [msg(ty(22), NLM_F_MULTI, 5, &body), done(5, 0)].concat();
    let users = parse_users(&reply, 5).expect("decodes");
    let owners: Vec<_> = users
        .iter()
        .map(|u| (u.ctxn, u.pid, u.kernel_name.as_deref()))
        .collect();
    assert_eq!(
        owners,
        [
            (Some(0), Some(4711), None),
            (Some(3), Some(815), None),
            (Some(4), None, Some("ib_ipoib"))
        ]
    );
}

#[test]
fn a_device_nobody_uses_has_no_contexts() {
    let body = [nla(1, &2u32.to_ne_bytes()), nla(2, b"rxe_0123\0")].concat();
    let reply = [msg(ty(22), NLM_F_MULTI, 6, &body), done(6, 0)].concat();
    assert_eq!(parse_users(&reply, 6).expect("decodes"), []);
    assert_eq!(parse_users(&done(7, 0), 7).expect("decodes"), []);
}
