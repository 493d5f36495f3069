//! Tests of the RDMA netlink module, one file per concern under `tests/`: `wire.rs` (request
//! bytes, reply framing, malformed bytes), `device.rs`, `admin.rs`, `contexts.rs`, `stats.rs`
//! (each one's reply decoding), `captured.rs` (requests and replies captured from a real kernel)
//! and `vm.rs` (the real socket against a real kernel, `#[ignore]`d: run inside the rdma-vm rig
//! by tests/vm/unit.sh). Here: the kernel-like bytes they share, the pure decoders of whole
//! replies, and what the socket does on a kernel without RDMA.

use super::admin::*;
use super::contexts::*;
use super::device::*;
use super::wire::*;
use super::*;
use crate::netlink_sync::{test_attr as nla, test_message as msg};
use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

mod admin;
mod captured;
mod contexts;
mod device;
mod stats;
mod vm;
mod wire;

// ------------------------------------------------------------- kernel-like bytes, by hand

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_MULTI: u16 = 2;

fn ty(command: u16) -> u16 {
    (5 << 10) | command
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

const NLA_F_NESTED: u16 = 0x8000;

/// A nest: `parts` inside one attribute flagged NLA_F_NESTED.
fn nest(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
    nla(kind | NLA_F_NESTED, &parts.concat())
}

/// A string attribute's value, NUL-terminated as the kernel sends it.
fn s(v: &str) -> Vec<u8> {
    format!("{v}\0").into_bytes()
}

// ------------------------------------------------------------ whole replies, decoded

/// The bodies of a complete reply to request `seq`, as the socket would collect them.
fn collect(reply: &[u8], seq: u32, op: &'static str) -> Result<Vec<Vec<u8>>, RdmaNlError> {
    let mut r = Reply::new(op, seq);
    r.feed(reply)?;
    r.finish()
}

/// Decode a complete device dump reply (what `devices()` receives, without drivers).
fn parse_devices(reply: &[u8], seq: u32) -> Result<Vec<RdmaDevice>, RdmaNlError> {
    decode_all(&collect(reply, seq, "dev get")?, device_from_attrs)
}

/// Decode a complete port dump reply (one device's ports).
fn parse_ports(reply: &[u8], seq: u32) -> Result<Vec<RdmaPort>, RdmaNlError> {
    decode_all(&collect(reply, seq, "port get")?, port_from_attrs)
}

/// Decode a complete `RES_CTX_GET` dump reply.
fn parse_users(reply: &[u8], seq: u32) -> Result<Vec<RdmaUser>, RdmaNlError> {
    users_from_bodies(&collect(reply, seq, "res ctx get")?)
}

/// Decode a complete `SYS_GET` reply (the answer, then the ACK).
fn parse_sys(reply: &[u8], seq: u32) -> Result<NetnsMode, RdmaNlError> {
    sys_from_bodies(&collect(reply, seq, "sys get")?)
}

/// Decode a reply that should be a bare ACK; a refusal is `RdmaNlError::Kernel`.
fn parse_ack(reply: &[u8], seq: u32, op: &'static str) -> Result<(), RdmaNlError> {
    collect(reply, seq, op).map(drop)
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
