//! Decoding the statistics and resource replies (nested tables, u64 values padded as the
//! kernel pads them), and the bytes of a `STAT_GET` request.

use super::*;
use crate::rdma::netlink::stats::*;

/// A u64 as the kernel puts it: nla_put_u64_64bit may precede it with a PAD attribute.
fn u64_padded(kind: u16, v: u64) -> Vec<u8> {
    [nla(0, &[]), nla(kind, &v.to_ne_bytes())].concat()
}

fn reply_bodies(head: &[Vec<u8>], tail: Vec<u8>) -> Vec<Vec<u8>> {
    let mut b = head.concat();
    b.extend(tail);
    vec![b]
}

#[test]
fn decodes_hw_counters_in_driver_order() {
    let entry = |n: &str, v: u64| {
        nest(
            stat_attr::STAT_HWCOUNTER_ENTRY,
            &[
                nla(stat_attr::STAT_HWCOUNTER_ENTRY_NAME, &s(n)),
                u64_padded(stat_attr::STAT_HWCOUNTER_ENTRY_VALUE, v),
            ],
        )
    };
    let bodies = reply_bodies(
        &[
            nla(attr::DEV_INDEX, &3u32.to_ne_bytes()),
            nla(attr::PORT_INDEX, &1u32.to_ne_bytes()),
        ],
        nest(
            stat_attr::STAT_HWCOUNTERS,
            &[entry("sent_pkts", 12), entry("rcvd_pkts", 1 << 40)],
        ),
    );
    assert_eq!(
        hw_counters_from_bodies(&bodies).unwrap(),
        vec![("sent_pkts".into(), 12), ("rcvd_pkts".into(), 1 << 40)]
    );
    // A reply without the table (a driver with no counters enabled): none, not an error.
    assert!(hw_counters_from_bodies(&[vec![]]).unwrap().is_empty());
}

#[test]
fn decodes_the_resource_summary() {
    let entry = |n: &str, v: u64| {
        nest(
            stat_attr::RES_SUMMARY_ENTRY,
            &[
                nla(stat_attr::RES_SUMMARY_ENTRY_NAME, &s(n)),
                u64_padded(stat_attr::RES_SUMMARY_ENTRY_CURR, v),
            ],
        )
    };
    let bodies = reply_bodies(
        &[nla(attr::DEV_NAME, &s("rxe0"))],
        nest(
            stat_attr::RES_SUMMARY,
            &[entry("pd", 1), entry("qp", 3), entry("cm_id", 0)],
        ),
    );
    assert_eq!(
        summary_from_bodies(&bodies).unwrap(),
        vec![("pd".into(), 1), ("qp".into(), 3), ("cm_id".into(), 0)]
    );
}

#[test]
fn decodes_qp_owners_user_and_kernel() {
    let qp = |n: u32, owner: Vec<u8>| {
        nest(
            stat_attr::RES_QP_ENTRY,
            &[nla(stat_attr::RES_LQPN, &n.to_ne_bytes()), owner],
        )
    };
    let bodies = vec![
        [
            nla(attr::DEV_INDEX, &1u32.to_ne_bytes()),
            nest(
                stat_attr::RES_QP,
                &[
                    qp(1, nla(attr::RES_KERN_NAME, &s("ib_core"))),
                    qp(17, nla(attr::RES_PID, &4242u32.to_ne_bytes())),
                ],
            ),
        ]
        .concat(),
    ];
    let qps = qps_from_bodies(&bodies).unwrap();
    assert_eq!(qps.len(), 2);
    assert_eq!(qps[0].kern_name.as_deref(), Some("ib_core"));
    assert_eq!((qps[1].lqpn, qps[1].pid), (Some(17), Some(4242)));
}

#[test]
fn malformed_values_are_decode_errors_not_panics() {
    let bad = nest(
        stat_attr::STAT_HWCOUNTERS,
        &[nest(
            stat_attr::STAT_HWCOUNTER_ENTRY,
            &[
                nla(stat_attr::STAT_HWCOUNTER_ENTRY_NAME, &s("x")),
                nla(stat_attr::STAT_HWCOUNTER_ENTRY_VALUE, &[1, 2, 3]),
            ],
        )],
    );
    assert!(matches!(
        hw_counters_from_bodies(&[bad]),
        Err(RdmaNlError::Decode(_))
    ));
}

#[test]
fn encodes_stat_get_for_one_port() {
    let req = [
        ReqAttr::U32(attr::DEV_INDEX, 2),
        ReqAttr::U32(attr::PORT_INDEX, 1),
    ];
    let bytes = encode_request(stat_cmd::STAT_GET, NLM_F_REQUEST | NLM_F_ACK, 5, &req);
    // RDMA_NL_GET_TYPE(5, 17) = 0x1411
    assert_eq!(&bytes[4..6], &[0x11, 0x14]);
    assert_eq!(
        &bytes[16..],
        &[8, 0, 1, 0, 2, 0, 0, 0, 8, 0, 3, 0, 1, 0, 0, 0]
    );
}
