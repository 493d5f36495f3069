//! RDMA netlink (NETLINK_RDMA, the kernel's "nldev" interface): a small synchronous socket and
//! the verbs this plugin needs from it. One protocol, one file (its message encoding and the
//! verbs share private helpers); the statistics verbs are `netlink/stats.rs`, the tests
//! against kernel captures `netlink/tests.rs`.
//!
//! Owns: listing RDMA devices and their ports (which netdev each port is paired with), reading
//! the RDMA netns mode, moving a device to another netns, adding and deleting soft devices
//! (rxe, siw) — plus the pure functions that encode requests and decode replies, so the bytes
//! can be tested without a kernel. Numbers come from `include/uapi/rdma/rdma_netlink.h`.
//!
//! A socket answers for the netns of the thread that opened it: devices, ports and netdevs are
//! looked up there (in exclusive mode a device is only visible in its own netns, and a port
//! reports its netdev only if that netdev is in the socket's netns). Open one per namespace.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::netlink_sync::SyncSocket;

use netlink_packet_core::{
    DecodeError, Emitable, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkBuffer,
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable, Nla,
    NlasIterator,
};
use netlink_sys::protocols::NETLINK_RDMA;

/// `RDMA_NL_NLDEV`: the netlink "client" of the device interface (bits 10..16 of the type).
const RDMA_NL_NLDEV: u16 = 5;

/// `enum rdma_nldev_command` (the low 10 bits of the netlink message type).
mod cmd {
    pub const GET: u16 = 1;
    pub const SET: u16 = 2;
    pub const NEWLINK: u16 = 3;
    pub const DELLINK: u16 = 4;
    pub const PORT_GET: u16 = 5;
    pub const SYS_GET: u16 = 6;
    pub const GET_CHARDEV: u16 = 15;
    pub const RES_CTX_GET: u16 = 22;
}

/// `enum rdma_nldev_attr`: only the ones we send or read.
mod attr {
    pub const DEV_INDEX: u16 = 1; // u32
    pub const DEV_NAME: u16 = 2; // string
    pub const PORT_INDEX: u16 = 3; // u32: port number, or the port count in a device reply
    pub const NODE_GUID: u16 = 6; // u64, host byte order
    pub const PORT_STATE: u16 = 12; // u8
    pub const PORT_PHYS_STATE: u16 = 13; // u8
    pub const RES_PID: u16 = 28; // u32: the process that owns a user resource
    pub const RES_KERN_NAME: u16 = 29; // string: the kernel module owning a kernel resource
    pub const DEV_NODE_TYPE: u16 = 14; // u8
    pub const NDEV_INDEX: u16 = 50; // u32
    pub const RES_CTXN: u16 = 64; // u32: a verbs context's number on its device
    pub const NDEV_NAME: u16 = 51; // string
    pub const LINK_TYPE: u16 = 65; // string: "rxe", "siw"
    pub const SYS_NETNS_MODE: u16 = 66; // u8: 1 shared, 0 exclusive
    pub const DEV_PROTOCOL: u16 = 67; // string: "roce", "iw", "ib", "opa", "usnic"
    pub const NET_NS_FD: u16 = 68; // u32
    pub const CHARDEV_TYPE: u16 = 69; // string: "uverbs"
    pub const UVERBS_DRIVER_ID: u16 = 73; // u32 (the header says u64; accept both)
    pub const RES_CTX: u16 = 86; // nested: the table of verbs contexts
    pub const RES_CTX_ENTRY: u16 = 87; // nested: one context
}

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

/// An RDMA device as `RDMA_NLDEV_CMD_GET` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    /// The kernel's device index; the first device is 0.
    pub index: u32,
    pub name: String,
    pub node_guid: Option<u64>,
    /// `RDMA_NODE_*`: 1 IB CA (also RoCE), 4 RNIC (iWARP).
    pub node_type: Option<u8>,
    /// "roce", "iw", "ib", "opa" or "usnic" (from the first port).
    pub protocol: Option<String>,
    /// Driver family ("mlx5", "rxe", "siw", ...) from the uverbs chardev query; None when
    /// ib_uverbs is absent or the kernel does not say. Filled by `devices()` only.
    pub driver: Option<String>,
    pub port_count: Option<u32>,
}

/// One port of an RDMA device as `RDMA_NLDEV_CMD_PORT_GET` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    pub dev_index: u32,
    pub dev_name: String,
    pub port: u32,
    /// IB port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.
    pub state: Option<u8>,
    /// IB physical state: 3 DISABLED, 5 LINK_UP, ...
    pub phys_state: Option<u8>,
    /// The paired netdev; absent when it lives in another netns than the socket.
    pub netdev_index: Option<u32>,
    pub netdev_name: Option<String>,
}

/// A verbs context a process holds open on an RDMA device (`RDMA_NLDEV_CMD_RES_CTX_GET`):
/// what `ibv_open_device` (and librdmacm, on every device it sees) creates. While one is open,
/// deleting a software device sleeps in the kernel until its process closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaUser {
    /// The context's number on its device.
    pub ctxn: Option<u32>,
    /// The owner's pid in the caller's pid namespace (the kernel hides contexts of processes
    /// outside it); None for a kernel user, which names its module instead.
    pub pid: Option<u32>,
    pub kernel_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// Every RDMA device is visible in every netns (the kernel default).
    Shared,
    /// A device is visible only in its own netns; devices can be moved.
    Exclusive,
}

impl NetnsMode {
    /// The name `rdma system` and the kernel's `netns_mode` documentation use.
    pub fn name(self) -> &'static str {
        match self {
            NetnsMode::Shared => "shared",
            NetnsMode::Exclusive => "exclusive",
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

    /// Every RDMA device visible from this netns, with its driver when the kernel says: one
    /// `GET` dump, then one uverbs `GET_CHARDEV` per device (which loads ib_uverbs if needed).
    pub fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaNlError> {
        let mut devices = self.dump_devices()?;
        for dev in &mut devices {
            // Best effort: needs ib_uverbs (the kernel loads it on demand).
            dev.driver = match self.driver_of(dev.index) {
                Ok(driver) => driver,
                Err(e) => {
                    log::debug!("no driver for RDMA device {}: {e}", dev.name);
                    None
                }
            };
        }
        Ok(devices)
    }

    pub fn device_by_name(&mut self, name: &str) -> Result<Option<RdmaDevice>, RdmaNlError> {
        Ok(self.devices()?.into_iter().find(|d| d.name == name))
    }

    /// Every port of every device visible from this netns. The kernel dumps ports one device
    /// at a time (`PORT_GET` without a device index is EINVAL), so this is one dump per device.
    pub fn ports(&mut self) -> Result<Vec<RdmaPort>, RdmaNlError> {
        let mut ports = Vec::new();
        for dev in self.dump_devices()? {
            let req = [ReqAttr::U32(attr::DEV_INDEX, dev.index)];
            match self.request("port get", cmd::PORT_GET, NLM_F_REQUEST | NLM_F_DUMP, &req) {
                Ok(bodies) => ports.extend(decode_all(&bodies, port_from_attrs)?),
                // The device went away between the two dumps.
                Err(RdmaNlError::Kernel {
                    errno: libc::EINVAL,
                    ..
                }) => {
                    log::debug!("RDMA device {} vanished while listing ports", dev.name)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(ports)
    }

    pub fn netns_mode(&mut self) -> Result<NetnsMode, RdmaNlError> {
        let bodies = self.request("sys get", cmd::SYS_GET, NLM_F_REQUEST | NLM_F_ACK, &[])?;
        sys_from_bodies(&bodies)
    }

    /// Move a device (looked up in this socket's netns) into the netns of `netns_fd`; to give
    /// it back, ask from a socket opened in the netns it is in. EOPNOTSUPP (95) in shared
    /// mode, or when the driver cannot disassociate its users (stock rxe and siw).
    pub fn move_to_netns(
        &mut self,
        dev_index: u32,
        netns_fd: BorrowedFd,
    ) -> Result<(), RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::U32(attr::NET_NS_FD, netns_fd.as_raw_fd() as u32),
        ];
        self.request("dev set netns", cmd::SET, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// `rdma dev set OLD name NAME`, for a device in this socket's netns.
    pub fn rename(&mut self, dev_index: u32, name: &str) -> Result<(), RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::Str(attr::DEV_NAME, checked_name(name)?),
        ];
        self.request("dev set name", cmd::SET, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// `rdma link add NAME type LINK_TYPE netdev NETDEV`; the netdev is looked up in this
    /// socket's netns, the new device lands in init_net (visible everywhere in shared mode).
    pub fn add_soft_device(
        &mut self,
        name: &str,
        link_type: &str,
        netdev: &str,
    ) -> Result<(), RdmaNlError> {
        let req = [
            ReqAttr::Str(attr::DEV_NAME, checked_name(name)?),
            ReqAttr::Str(attr::LINK_TYPE, checked_name(link_type)?),
            ReqAttr::Str(attr::NDEV_NAME, checked_name(netdev)?),
        ];
        self.request("link add", cmd::NEWLINK, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// `rdma link delete`: only soft devices allow it (others answer EINVAL).
    pub fn delete_device(&mut self, dev_index: u32) -> Result<(), RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        self.request("link delete", cmd::DELLINK, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// The verbs contexts open on a device of this socket's netns, one per holder (a process
    /// may hold several). Kernels before 5.9 cannot say (EINVAL/EOPNOTSUPP from the kernel).
    pub fn users(&mut self, dev_index: u32) -> Result<Vec<RdmaUser>, RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        let bodies = self.request(
            "res ctx get",
            cmd::RES_CTX_GET,
            NLM_F_REQUEST | NLM_F_DUMP,
            &req,
        )?;
        users_from_bodies(&bodies)
    }

    fn dump_devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaNlError> {
        let bodies = self.request("dev get", cmd::GET, NLM_F_REQUEST | NLM_F_DUMP, &[])?;
        decode_all(&bodies, device_from_attrs)
    }

    fn driver_of(&mut self, dev_index: u32) -> Result<Option<String>, RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::Str(attr::CHARDEV_TYPE, "uverbs"),
        ];
        let bodies = self.request(
            "chardev get",
            cmd::GET_CHARDEV,
            NLM_F_REQUEST | NLM_F_ACK,
            &req,
        )?;
        match bodies.first() {
            Some(body) => driver_from_attrs(body),
            None => Ok(None),
        }
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

fn checked_name(name: &str) -> Result<&str, RdmaNlError> {
    // IB_DEVICE_NAME_MAX is 64 with the NUL; netdev names are shorter and the kernel checks.
    if name.is_empty() || name.len() >= 64 || name.contains('\0') {
        return Err(RdmaNlError::InvalidName(name.to_string()));
    }
    Ok(name)
}

fn decode_err(msg: impl Into<String>) -> RdmaNlError {
    RdmaNlError::Decode(msg.into())
}

// ---------------------------------------------------------------------------- encoding

/// An attribute of a request: a u32, or a string sent NUL-terminated (the kernel's
/// NLA_NUL_STRING policy requires the NUL).
#[derive(Debug, Clone, Copy)]
enum ReqAttr<'a> {
    U32(u16, u32),
    Str(u16, &'a str),
}

impl Nla for ReqAttr<'_> {
    fn value_len(&self) -> usize {
        match self {
            ReqAttr::U32(..) => 4,
            ReqAttr::Str(_, s) => s.len() + 1,
        }
    }
    fn kind(&self) -> u16 {
        match self {
            ReqAttr::U32(kind, _) | ReqAttr::Str(kind, _) => *kind,
        }
    }
    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            ReqAttr::U32(_, v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            ReqAttr::Str(_, s) => {
                let (text, nul) = buffer.split_at_mut(s.len());
                text.copy_from_slice(s.as_bytes());
                nul.fill(0);
            }
        }
    }
}

/// An nldev message body: the command (low 10 bits of the netlink type) and its raw attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NldevMessage {
    command: u16,
    attrs: Vec<u8>,
}

impl NetlinkSerializable for NldevMessage {
    fn message_type(&self) -> u16 {
        // RDMA_NL_GET_TYPE(client, op)
        (RDMA_NL_NLDEV << 10) + self.command
    }
    fn buffer_len(&self) -> usize {
        self.attrs.len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.attrs);
    }
}

impl NetlinkDeserializable for NldevMessage {
    type Error = DecodeError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        let client = (header.message_type >> 10) & 0x3f;
        if client != RDMA_NL_NLDEV {
            let ty = header.message_type;
            return Err(format!("message type {ty:#x} is not an nldev message").into());
        }
        Ok(NldevMessage {
            command: header.message_type & 0x3ff,
            attrs: payload.to_vec(),
        })
    }
}

/// The bytes of one request: a netlink header (port id 0: the kernel fills it in) and the
/// attributes, each padded to 4 bytes.
fn encode_request(command: u16, flags: u16, seq: u32, attrs: &[ReqAttr]) -> Vec<u8> {
    let mut body = vec![0; attrs.buffer_len()];
    attrs.emit(&mut body);
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let payload = NetlinkPayload::InnerMessage(NldevMessage {
        command,
        attrs: body,
    });
    let mut msg = NetlinkMessage::new(header, payload);
    msg.finalize();
    let mut bytes = vec![0; msg.buffer_len()];
    msg.serialize(&mut bytes);
    bytes
}

// ---------------------------------------------------------------------------- decoding

/// The replies to one request, fed datagram by datagram until the kernel is done.
struct Reply {
    op: &'static str,
    seq: u32,
    /// The attribute bytes of each nldev message, in order.
    bodies: Vec<Vec<u8>>,
    done: bool,
}

impl Reply {
    fn new(op: &'static str, seq: u32) -> Self {
        Reply {
            op,
            seq,
            bodies: Vec::new(),
            done: false,
        }
    }

    /// Take in one datagram (or several concatenated: each message carries its length).
    fn feed(&mut self, mut rest: &[u8]) -> Result<(), RdmaNlError> {
        let op = self.op;
        while !self.done && !rest.is_empty() {
            let buf =
                NetlinkBuffer::new_checked(rest).map_err(|e| decode_err(format!("{op}: {e}")))?;
            let (len, seq) = (buf.length() as usize, buf.sequence_number());
            let this = rest;
            // Messages are 4-byte aligned; the last one may lack its padding.
            rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
            if seq != self.seq {
                // Left over from an earlier request that failed half-way.
                log::debug!("{op}: skipping a reply with seq {seq} (want {})", self.seq);
                continue;
            }
            let msg = NetlinkMessage::<NldevMessage>::deserialize(this)
                .map_err(|e| decode_err(format!("{op}: {e}")))?;
            match msg.payload {
                NetlinkPayload::InnerMessage(m) => self.bodies.push(m.attrs),
                NetlinkPayload::Error(e) => match e.code {
                    None => self.done = true, // the ACK
                    Some(code) => {
                        return Err(RdmaNlError::Kernel {
                            op,
                            errno: code.get().saturating_abs(),
                        });
                    }
                },
                NetlinkPayload::Done(d) if d.code < 0 => {
                    return Err(RdmaNlError::Kernel {
                        op,
                        errno: d.code.saturating_abs(),
                    });
                }
                NetlinkPayload::Done(_) => self.done = true,
                NetlinkPayload::Noop => {}
                other => return Err(decode_err(format!("{op}: unexpected {other:?}"))),
            }
        }
        Ok(())
    }

    /// The bodies, once the reply is complete (the pure decoders' end; the socket stops on DONE).
    #[cfg(test)]
    fn finish(self) -> Result<Vec<Vec<u8>>, RdmaNlError> {
        if !self.done {
            return Err(decode_err(format!(
                "{}: reply ended before ACK or DONE",
                self.op
            )));
        }
        Ok(self.bodies)
    }
}

/// Call `f(kind, value)` for each attribute of a body; flags (nested, byte order) are masked.
fn each_attr(
    body: &[u8],
    mut f: impl FnMut(u16, &[u8]) -> Result<(), RdmaNlError>,
) -> Result<(), RdmaNlError> {
    for nla in NlasIterator::new(body) {
        let nla = nla.map_err(|e| decode_err(format!("attribute: {e}")))?;
        f(nla.kind(), nla.value())?;
    }
    Ok(())
}

fn fixed<const N: usize>(kind: u16, v: &[u8]) -> Result<[u8; N], RdmaNlError> {
    v.try_into()
        .map_err(|_| decode_err(format!("attribute {kind}: {} bytes, want {N}", v.len())))
}
fn get_u8(kind: u16, v: &[u8]) -> Result<u8, RdmaNlError> {
    Ok(fixed::<1>(kind, v)?[0])
}
fn get_u32(kind: u16, v: &[u8]) -> Result<u32, RdmaNlError> {
    Ok(u32::from_ne_bytes(fixed(kind, v)?))
}
fn get_u64(kind: u16, v: &[u8]) -> Result<u64, RdmaNlError> {
    Ok(u64::from_ne_bytes(fixed(kind, v)?))
}
/// A NUL-terminated string (anything after the first NUL is ignored).
fn get_str(v: &[u8]) -> String {
    let text = v.split(|&b| b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(text).into_owned()
}

fn required<T>(value: Option<T>, what: &str) -> Result<T, RdmaNlError> {
    value.ok_or_else(|| decode_err(format!("reply without {what}")))
}

fn decode_all<T>(
    bodies: &[Vec<u8>],
    f: impl Fn(&[u8]) -> Result<T, RdmaNlError>,
) -> Result<Vec<T>, RdmaNlError> {
    bodies.iter().map(|b| f(b)).collect()
}

fn device_from_attrs(body: &[u8]) -> Result<RdmaDevice, RdmaNlError> {
    let (mut index, mut name) = (None, None);
    let (mut node_guid, mut node_type, mut protocol, mut port_count) = (None, None, None, None);
    each_attr(body, |kind, v| {
        match kind {
            attr::DEV_INDEX => index = Some(get_u32(kind, v)?),
            attr::DEV_NAME => name = Some(get_str(v)),
            attr::PORT_INDEX => port_count = Some(get_u32(kind, v)?),
            attr::NODE_GUID => node_guid = Some(get_u64(kind, v)?),
            attr::DEV_NODE_TYPE => node_type = Some(get_u8(kind, v)?),
            attr::DEV_PROTOCOL => protocol = Some(get_str(v)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(RdmaDevice {
        index: required(index, "device index")?,
        name: required(name, "device name")?,
        node_guid,
        node_type,
        protocol,
        driver: None,
        port_count,
    })
}

fn port_from_attrs(body: &[u8]) -> Result<RdmaPort, RdmaNlError> {
    let (mut dev_index, mut dev_name, mut port) = (None, None, None);
    let (mut state, mut phys_state, mut netdev_index, mut netdev_name) = (None, None, None, None);
    each_attr(body, |kind, v| {
        match kind {
            attr::DEV_INDEX => dev_index = Some(get_u32(kind, v)?),
            attr::DEV_NAME => dev_name = Some(get_str(v)),
            attr::PORT_INDEX => port = Some(get_u32(kind, v)?),
            attr::PORT_STATE => state = Some(get_u8(kind, v)?),
            attr::PORT_PHYS_STATE => phys_state = Some(get_u8(kind, v)?),
            attr::NDEV_INDEX => netdev_index = Some(get_u32(kind, v)?),
            attr::NDEV_NAME => netdev_name = Some(get_str(v)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(RdmaPort {
        dev_index: required(dev_index, "device index")?,
        dev_name: required(dev_name, "device name")?,
        port: required(port, "port index")?,
        state,
        phys_state,
        netdev_index,
        netdev_name,
    })
}

/// The contexts of a `RES_CTX_GET` dump: each message holds the device, then a `RES_CTX`
/// table of `RES_CTX_ENTRY` nests (a context's number and its owner's pid or module).
fn users_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<RdmaUser>, RdmaNlError> {
    let mut users = Vec::new();
    for body in bodies {
        each_attr(body, |kind, table| {
            if kind != attr::RES_CTX {
                return Ok(());
            }
            each_attr(table, |kind, entry| {
                if kind != attr::RES_CTX_ENTRY {
                    return Ok(());
                }
                let mut user = RdmaUser {
                    ctxn: None,
                    pid: None,
                    kernel_name: None,
                };
                each_attr(entry, |kind, v| {
                    match kind {
                        attr::RES_CTXN => user.ctxn = Some(get_u32(kind, v)?),
                        attr::RES_PID => user.pid = Some(get_u32(kind, v)?),
                        attr::RES_KERN_NAME => user.kernel_name = Some(get_str(v)),
                        _ => {}
                    }
                    Ok(())
                })?;
                users.push(user);
                Ok(())
            })
        })?;
    }
    Ok(users)
}

fn sys_from_bodies(bodies: &[Vec<u8>]) -> Result<NetnsMode, RdmaNlError> {
    let mut mode = None;
    for body in bodies {
        each_attr(body, |kind, v| {
            if kind == attr::SYS_NETNS_MODE {
                mode = Some(get_u8(kind, v)?);
            }
            Ok(())
        })?;
    }
    match required(mode, "netns mode")? {
        0 => Ok(NetnsMode::Exclusive),
        _ => Ok(NetnsMode::Shared),
    }
}

/// The driver family from a uverbs chardev reply (`enum rdma_driver_id`).
fn driver_from_attrs(body: &[u8]) -> Result<Option<String>, RdmaNlError> {
    let mut id = None;
    each_attr(body, |kind, v| {
        if kind == attr::UVERBS_DRIVER_ID {
            id = Some(match v.len() {
                8 => get_u64(kind, v)?,
                _ => u64::from(get_u32(kind, v)?),
            });
        }
        Ok(())
    })?;
    const NAMES: [&str; 23] = [
        "",
        "mlx5",
        "mlx4",
        "cxgb3",
        "cxgb4",
        "mthca",
        "bnxt_re",
        "ocrdma",
        "nes",
        "irdma",
        "vmw_pvrdma",
        "qedr",
        "hns",
        "usnic",
        "rxe",
        "hfi1",
        "qib",
        "efa",
        "siw",
        "erdma",
        "mana",
        "ionic",
        "hfi2",
    ];
    let name = id.and_then(|id| NAMES.get(usize::try_from(id).ok()?).copied());
    Ok(name.filter(|n| !n.is_empty()).map(str::to_string))
}

/// Decode a complete device dump reply (what `devices()` receives, without drivers).
#[cfg(test)]
fn parse_devices(reply: &[u8], seq: u32) -> Result<Vec<RdmaDevice>, RdmaNlError> {
    decode_all(&collect(reply, seq, "dev get")?, device_from_attrs)
}

/// Decode a complete port dump reply (one device's ports).
#[cfg(test)]
fn parse_ports(reply: &[u8], seq: u32) -> Result<Vec<RdmaPort>, RdmaNlError> {
    decode_all(&collect(reply, seq, "port get")?, port_from_attrs)
}

/// Decode a complete `RES_CTX_GET` dump reply.
#[cfg(test)]
fn parse_users(reply: &[u8], seq: u32) -> Result<Vec<RdmaUser>, RdmaNlError> {
    users_from_bodies(&collect(reply, seq, "res ctx get")?)
}

/// Decode a complete `SYS_GET` reply (the answer, then the ACK).
#[cfg(test)]
fn parse_sys(reply: &[u8], seq: u32) -> Result<NetnsMode, RdmaNlError> {
    sys_from_bodies(&collect(reply, seq, "sys get")?)
}

/// Decode a reply that should be a bare ACK; a refusal is `RdmaNlError::Kernel`.
#[cfg(test)]
fn parse_ack(reply: &[u8], seq: u32, op: &'static str) -> Result<(), RdmaNlError> {
    collect(reply, seq, op).map(drop)
}

#[cfg(test)]
fn collect(reply: &[u8], seq: u32, op: &'static str) -> Result<Vec<Vec<u8>>, RdmaNlError> {
    let mut r = Reply::new(op, seq);
    r.feed(reply)?;
    r.finish()
}

pub mod stats;

#[cfg(test)]
mod tests;
