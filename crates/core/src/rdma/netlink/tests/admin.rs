//! Decoding the netns mode (`SYS_GET`); the changing requests are encoded in `wire.rs` and checked against captures in `captured.rs`.

use super::*;

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
