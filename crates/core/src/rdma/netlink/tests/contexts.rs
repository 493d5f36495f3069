//! The verbs contexts of a device (`RES_CTX_GET`): the request and its decoded owners.

use super::*;

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
