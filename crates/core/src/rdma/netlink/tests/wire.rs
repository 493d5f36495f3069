//! The wire format: the bytes of every request we send, the framing of replies (several datagrams, stale replies, ACKs and refusals) and malformed bytes, which decode to errors and never panic.

use super::*;

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
