//! RDMA netlink (NETLINK_RDMA, the kernel's "nldev" interface): a small synchronous socket and
//! the requests this plugin makes with it, one file per concern:
//! - this file: the socket (open, one request and its replies, the reply timeout) and its error;
//! - `wire.rs`: the protocol's numbers, request bytes, reply framing, attribute decoding;
//! - `device.rs`: listing devices and their ports (which netdev each port is paired with);
//! - `admin.rs`: the netns mode, moving and renaming a device, adding and deleting soft devices;
//! - `contexts.rs`: the verbs contexts open on a device and who holds them;
//! - `stats.rs`: counters and resource tracking, for the metrics exporter;
//! - `tests/`: their tests, on hand-built bytes, on captures from a real
//!   kernel, and (in the VM) against a real kernel.
//!
//! A socket answers for the netns of the thread that opened it: devices, ports and netdevs are
//! looked up there (in exclusive mode a device is only visible in its own netns, and a port
//! reports its netdev only if that netdev is in the socket's netns). Open one per namespace.

use std::io;
use std::time::Duration;

use crate::netlink_sync::SyncSocket;

use netlink_sys::protocols::NETLINK_RDMA;

mod admin;
mod contexts;
mod device;
pub mod stats;
mod wire;

pub use admin::NetnsMode;
pub use contexts::RdmaUser;
pub use device::{RdmaDevice, RdmaPort, is_uverbs_name};

use wire::{Reply, ReqAttr, encode_request};

/// How long one request may wait for the kernel before giving up (a CNI plugin must not hang).
const RECV_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum RdmaNlError {
    /// The socket cannot be opened: the kernel has no RDMA support (no ib_core).
    #[error("RDMA netlink is unavailable (kernel without RDMA support?): {0}")]
    Unavailable(#[source] io::Error),
    /// The kernel refused the request (`NLMSG_ERROR` or a failed `NLMSG_DONE`).
    /// `errno` is positive: 95 (EOPNOTSUPP) is "this device cannot do that".
    #[error("RDMA netlink {op} failed: {}", io::Error::from_raw_os_error(*errno))]
    Kernel { op: &'static str, errno: i32 },
    #[error("RDMA netlink I/O: {0}")]
    Io(#[source] io::Error),
    /// The kernel's reply (or a test's bytes) could not be decoded.
    #[error("RDMA netlink: cannot decode the reply: {0}")]
    Decode(String),
    /// A name we were asked to send cannot be a kernel name (empty, too long, or with a NUL).
    #[error("RDMA netlink: invalid name {0:?}")]
    InvalidName(String),
}

impl RdmaNlError {
    /// The kernel's errno, when the kernel refused the request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            RdmaNlError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// A socket bound to the netns of the thread that called `open()`.
pub struct RdmaSocket {
    socket: SyncSocket,
}

impl RdmaSocket {
    pub fn open() -> Result<Self, RdmaNlError> {
        let socket = SyncSocket::open(NETLINK_RDMA, RECV_TIMEOUT).map_err(|e| {
            if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) {
                RdmaNlError::Unavailable(e)
            } else {
                RdmaNlError::Io(e)
            }
        })?;
        Ok(RdmaSocket { socket })
    }

    /// Give up on a reply after `timeout` (the exporter's scrape budget), not the CNI's 30 s.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), RdmaNlError> {
        self.socket.set_timeout(timeout).map_err(RdmaNlError::Io)
    }

    /// Send one request and collect the attribute bodies of its replies until the kernel's
    /// ACK (requests) or NLMSG_DONE (dumps).
    fn request(
        &mut self,
        op: &'static str,
        command: u16,
        flags: u16,
        attrs: &[ReqAttr],
    ) -> Result<Vec<Vec<u8>>, RdmaNlError> {
        let seq = self.socket.next_seq();
        let bytes = encode_request(command, flags, seq, attrs);
        self.socket.send(&bytes).map_err(RdmaNlError::Io)?;
        let mut reply = Reply::new(op, seq);
        while !reply.done {
            let datagram = self.socket.recv(op).map_err(RdmaNlError::Io)?;
            reply.feed(datagram)?;
        }
        Ok(reply.bodies)
    }
}

#[cfg(test)]
mod tests;
