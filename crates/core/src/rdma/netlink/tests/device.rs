//! Decoding device and port dumps and the uverbs driver query.

use super::*;

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
                uverbs: None,
                port_count: Some(1),
            },
            RdmaDevice {
                index: 7,
                name: "siw0".into(),
                node_guid: Some(0xc3d4),
                node_type: Some(1),
                protocol: Some("iw".into()),
                driver: None,
                uverbs: None,
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
fn decodes_the_uverbs_char_device_and_only_a_kernel_name() {
    let body = [
        nla(73, &14u32.to_ne_bytes()),
        nla(70, b"uverbs3\0"),
        nla(72, &0u64.to_ne_bytes()),
    ]
    .concat();
    assert_eq!(uverbs_from_attrs(&body).as_deref(), Some("uverbs3"));
    assert_eq!(driver_from_attrs(&body).unwrap().as_deref(), Some("rxe"));
    // Not a name the kernel gives a verbs char device: never a path nor a CDI name.
    for bad in [&b"../sda\0"[..], b"uverbs\0", b"uverbs1x\0", b"umad0\0"] {
        assert_eq!(uverbs_from_attrs(&nla(70, bad)), None, "{bad:?}");
    }
    assert_eq!(uverbs_from_attrs(&[]), None);
}
