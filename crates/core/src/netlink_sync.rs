//! Synchronous netlink sockets: one socket type for what the async rtnetlink handle cannot ask
//! or decode. Its users: RDMA netlink (`rdma/netlink/`), raw NETLINK_ROUTE dumps of nexthop
//! objects (`link/nexthop.rs`) and of links whose names are not UTF-8
//! (`link/unreadable.rs`), and the exporter's link statistics (`metrics/netdev.rs`).
//!
//! A socket answers for the netns of the thread that opened it. Every receive is bounded by
//! the socket's timeout (a CNI verb must not hang on the kernel), and a datagram larger than
//! the buffer is an error, never silently cut.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;

/// The receive buffer: the kernel sizes dump datagrams after the largest buffer offered.
const RECV_BUF_LEN: usize = 64 * 1024;
/// How long a raw route dump may wait for one datagram.
const ROUTE_DUMP_TIMEOUT: Duration = Duration::from_secs(10);

/// A netlink socket bound in the calling thread's netns and connected to the kernel.
pub struct SyncSocket {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
    timeout: Duration,
}

impl SyncSocket {
    /// Open a socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_RDMA`, ...) whose every receive
    /// gives up after `timeout`.
    pub fn open(protocol: isize, timeout: Duration) -> io::Result<Self> {
        let mut socket = Socket::new(protocol)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        let mut s = SyncSocket {
            socket,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF_LEN),
            timeout,
        };
        s.set_timeout(timeout)?;
        Ok(s)
    }

    /// Bound every later receive by `timeout` (`SO_RCVTIMEO`).
    pub(crate) fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: a valid socket fd and a pointer to a timeval that outlives the call, with
        // its size.
        let rc = unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.timeout = timeout;
        Ok(())
    }

    /// The sequence number for the next request (the replies carry it).
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    pub fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.socket.send(request, 0).map(drop)
    }

    /// The next datagram from the kernel. `what` names the request in errors: a timeout is
    /// `TimedOut` ("no reply to WHAT within N s"), a datagram larger than the buffer
    /// `InvalidData`.
    pub fn recv(&mut self, what: &str) -> io::Result<&[u8]> {
        loop {
            self.buf.clear();
            match self.socket.recv(&mut self.buf, libc::MSG_TRUNC) {
                Ok(n) if n > self.buf.len() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{what}: datagram of {n} bytes truncated"),
                    ));
                }
                Ok(_) => return Ok(&self.buf),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no reply to {what} within {} s", self.timeout.as_secs_f32()),
                    ));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A NETLINK_ROUTE dump of `msg_type` (the request's family header is `header`, e.g. a zeroed
/// `ifinfomsg`), giving each datagram to `datagram` while it answers true and fewer than
/// `max_bytes` were read. The callers parse the datagrams.
pub(crate) fn route_dump(
    msg_type: u16,
    header: &[u8],
    max_bytes: usize,
    datagram: impl FnMut(&[u8]) -> bool,
) -> io::Result<()> {
    route_socket()?.dump(msg_type, header, max_bytes, datagram)
}

/// A NETLINK_ROUTE socket in the calling thread's netns whose receives wait up to the dump
/// timeout: for a few requests in a row on one socket.
pub fn route_socket() -> io::Result<SyncSocket> {
    SyncSocket::open(NETLINK_ROUTE, ROUTE_DUMP_TIMEOUT)
}

/// One netlink request: header (`msg_type`, `flags`, a new sequence number) and `body`.
fn request(sock: &mut SyncSocket, msg_type: u16, flags: u16, body: &[u8]) -> Vec<u8> {
    let seq = sock.next_seq();
    let len = 16 + body.len();
    let mut req = Vec::with_capacity(len);
    req.extend_from_slice(&(len as u32).to_ne_bytes());
    req.extend_from_slice(&msg_type.to_ne_bytes());
    req.extend_from_slice(&flags.to_ne_bytes());
    req.extend_from_slice(&seq.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    req.extend_from_slice(body);
    req
}

impl SyncSocket {
    /// `route_dump` on this socket (bound where it was opened).
    pub fn dump(
        &mut self,
        msg_type: u16,
        header: &[u8],
        max_bytes: usize,
        mut datagram: impl FnMut(&[u8]) -> bool,
    ) -> io::Result<()> {
        let req = request(self, msg_type, NLM_F_REQUEST | NLM_F_DUMP, header);
        self.send(&req)?;
        let mut total = 0;
        loop {
            let buf = self.recv("a route dump")?;
            total += buf.len();
            if !datagram(buf) || total >= max_bytes {
                return Ok(());
            }
        }
    }

    /// One request that changes something (`body` after the netlink header), acknowledged:
    /// `Ok` when the kernel says it is done, its errno otherwise.
    pub fn act(&mut self, msg_type: u16, body: &[u8], what: &str) -> io::Result<()> {
        let req = request(self, msg_type, NLM_F_REQUEST | NLM_F_ACK, body);
        self.send(&req)?;
        let reply = self.recv(what)?;
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: no acknowledgement"),
            )
        };
        if u16_at(reply, 4) != Some(NLMSG_ERROR) {
            return Err(bad());
        }
        match u32_at(reply, 16).map(|c| c as i32) {
            Some(0) => Ok(()),
            Some(code) => Err(io::Error::from_raw_os_error(code.saturating_neg())),
            None => Err(bad()),
        }
    }

    /// One request that is not a dump (`body` after the netlink header) and its one reply
    /// datagram, which the caller parses.
    pub(crate) fn ask(&mut self, msg_type: u16, body: &[u8], what: &str) -> io::Result<&[u8]> {
        let req = request(self, msg_type, NLM_F_REQUEST, body);
        self.send(&req)?;
        self.recv(what)
    }
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// One netlink attribute as the kernel lays it out (length, type, value, padding to 4 bytes):
/// for tests that build kernel replies by hand.
#[cfg(test)]
pub(crate) fn test_attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(value);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

/// One netlink message as the kernel lays it out (header with port id 0, then `body`): for
/// tests that build kernel replies by hand.
#[cfg(test)]
pub(crate) fn test_message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}
