//! A synchronous NETLINK_ROUTE dump over a raw socket in the calling thread's namespace, for
//! what rtnetlink cannot ask or decode: nexthop objects (`nexthop.rs`) and links whose name is
//! not UTF-8 (`link/unreadable.rs`). The callers parse the datagrams; this sends the request
//! and reads until they are done, within a bound on the bytes read.

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;

/// Dump `msg_type` (the request's family header is `header`, e.g. a zeroed `ifinfomsg`), giving
/// each datagram to `datagram` while it answers true and fewer than `max_bytes` were read.
pub fn dump(
    msg_type: u16,
    header: &[u8],
    max_bytes: usize,
    mut datagram: impl FnMut(&[u8]) -> bool,
) -> std::io::Result<()> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    let len = 16 + header.len();
    let mut req = Vec::with_capacity(len);
    req.extend_from_slice(&(len as u32).to_ne_bytes());
    req.extend_from_slice(&msg_type.to_ne_bytes());
    req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid
    req.extend_from_slice(header);
    sock.send_to(&req, &SocketAddr::new(0, 0), 0)?;
    let mut total = 0;
    loop {
        let (buf, _) = sock.recv_from_full()?;
        total += buf.len();
        if !datagram(&buf) || total >= max_bytes {
            return Ok(());
        }
    }
}

pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
