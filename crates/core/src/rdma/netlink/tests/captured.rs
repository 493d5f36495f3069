//! Requests and replies captured from a real kernel (testdata/rdma-netlink, see its README): our request bytes match what was sent, and the replies decode.

use super::*;

/// A capture from testdata/rdma-netlink (see its README): the request as sent, every byte
/// read back for it, and the request's sequence number.
fn capture(name: &str) -> (Vec<u8>, Vec<u8>, u32) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/rdma-netlink");
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
        uverbs: None,
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
        uverbs: None,
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
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/rdma-netlink");
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
