//! The nldev wire format: the protocol's numbers (from `include/uapi/rdma/rdma_netlink.h`), the
//! bytes of a request, the framing of the kernel's replies (ACK, DONE, refusals, replies left
//! over from an earlier request) and the decoding of attributes. Pure functions on bytes, so
//! they can be tested without a kernel; the socket that sends and receives them is in `mod.rs`.

use netlink_packet_core::{
    DecodeError, Emitable, NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, Nla, NlasIterator,
};

use super::RdmaNlError;

/// `RDMA_NL_NLDEV`: the netlink "client" of the device interface (bits 10..16 of the type).
const RDMA_NL_NLDEV: u16 = 5;

/// `enum rdma_nldev_command` (the low 10 bits of the netlink message type).
pub(super) mod cmd {
    pub(crate) const GET: u16 = 1;
    pub const SET: u16 = 2;
    pub const NEWLINK: u16 = 3;
    pub const DELLINK: u16 = 4;
    pub(crate) const PORT_GET: u16 = 5;
    pub(crate) const SYS_GET: u16 = 6;
    pub(crate) const GET_CHARDEV: u16 = 15;
    pub const RES_CTX_GET: u16 = 22;
}

/// `enum rdma_nldev_attr`: only the ones we send or read (the statistics' own are in `stats.rs`).
pub(super) mod attr {
    pub(crate) const DEV_INDEX: u16 = 1; // u32
    pub(crate) const DEV_NAME: u16 = 2; // string
    pub(crate) const PORT_INDEX: u16 = 3; // u32: port number, or the port count in a device reply
    pub(crate) const NODE_GUID: u16 = 6; // u64, host byte order
    pub(crate) const PORT_STATE: u16 = 12; // u8
    pub(crate) const PORT_PHYS_STATE: u16 = 13; // u8
    pub const RES_PID: u16 = 28; // u32: the process that owns a user resource
    pub const RES_KERN_NAME: u16 = 29; // string: the kernel module owning a kernel resource
    pub(crate) const DEV_NODE_TYPE: u16 = 14; // u8
    pub(crate) const NDEV_INDEX: u16 = 50; // u32
    pub const RES_CTXN: u16 = 64; // u32: a verbs context's number on its device
    pub(crate) const NDEV_NAME: u16 = 51; // string
    pub const LINK_TYPE: u16 = 65; // string: "rxe", "siw"
    pub(crate) const SYS_NETNS_MODE: u16 = 66; // u8: 1 shared, 0 exclusive
    pub(crate) const DEV_PROTOCOL: u16 = 67; // string: "roce", "iw", "ib", "opa", "usnic"
    pub const NET_NS_FD: u16 = 68; // u32
    pub(crate) const CHARDEV_TYPE: u16 = 69; // string: "uverbs"
    pub(crate) const CHARDEV_NAME: u16 = 70; // string: "uverbs0"
    pub(crate) const UVERBS_DRIVER_ID: u16 = 73; // u32 (the header says u64; accept both)
    pub const RES_CTX: u16 = 86; // nested: the table of verbs contexts
    pub const RES_CTX_ENTRY: u16 = 87; // nested: one context
}

pub(super) fn checked_name(name: &str) -> Result<&str, RdmaNlError> {
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
pub(super) enum ReqAttr<'a> {
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
pub(super) fn encode_request(command: u16, flags: u16, seq: u32, attrs: &[ReqAttr]) -> Vec<u8> {
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
pub(super) struct Reply {
    op: &'static str,
    seq: u32,
    /// The attribute bytes of each nldev message, in order.
    pub(super) bodies: Vec<Vec<u8>>,
    pub(super) done: bool,
}

impl Reply {
    pub(super) fn new(op: &'static str, seq: u32) -> Self {
        Reply {
            op,
            seq,
            bodies: Vec::new(),
            done: false,
        }
    }

    /// Take in one datagram (or several concatenated: each message carries its length).
    pub(super) fn feed(&mut self, mut rest: &[u8]) -> Result<(), RdmaNlError> {
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
    pub(super) fn finish(self) -> Result<Vec<Vec<u8>>, RdmaNlError> {
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
pub(super) fn each_attr(
    body: &[u8],
    mut f: impl FnMut(u16, &[u8]) -> Result<(), RdmaNlError>,
) -> Result<(), RdmaNlError> {
    for nla in NlasIterator::new(body) {
        let nla = nla.map_err(|e| decode_err(format!("attribute: {e}")))?;
        f(nla.kind(), nla.value())?;
    }
    Ok(())
}

/// The entries (`entry` nests) of the `table` nest in each body of a reply, each made by `one`
/// (which may skip one by answering `None`): how the kernel sends every per-device table.
pub(super) fn nested_entries<T>(
    bodies: &[Vec<u8>],
    table: u16,
    entry: u16,
    mut one: impl FnMut(&[u8]) -> Result<Option<T>, RdmaNlError>,
) -> Result<Vec<T>, RdmaNlError> {
    let mut out = Vec::new();
    for body in bodies {
        each_attr(body, |kind, v| {
            if kind != table {
                return Ok(());
            }
            each_attr(v, |kind, e| {
                if kind == entry
                    && let Some(t) = one(e)?
                {
                    out.push(t);
                }
                Ok(())
            })
        })?;
    }
    Ok(out)
}

/// A tracked resource's entry (a verbs context, a QP): its number on its device (the `number`
/// attribute) and its owner, a process (`RES_PID`) or a kernel module (`RES_KERN_NAME`).
pub(super) struct Owned {
    pub number: Option<u32>,
    pub pid: Option<u32>,
    pub kernel_name: Option<String>,
}

pub(super) fn owned_entry(e: &[u8], number: u16) -> Result<Owned, RdmaNlError> {
    let mut o = Owned {
        number: None,
        pid: None,
        kernel_name: None,
    };
    each_attr(e, |kind, v| {
        match kind {
            k if k == number => o.number = Some(get_u32(kind, v)?),
            attr::RES_PID => o.pid = Some(get_u32(kind, v)?),
            attr::RES_KERN_NAME => o.kernel_name = Some(get_str(v)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(o)
}

fn fixed<const N: usize>(kind: u16, v: &[u8]) -> Result<[u8; N], RdmaNlError> {
    v.try_into()
        .map_err(|_| decode_err(format!("attribute {kind}: {} bytes, want {N}", v.len())))
}
pub(super) fn get_u8(kind: u16, v: &[u8]) -> Result<u8, RdmaNlError> {
    Ok(fixed::<1>(kind, v)?[0])
}
pub(super) fn get_u32(kind: u16, v: &[u8]) -> Result<u32, RdmaNlError> {
    Ok(u32::from_ne_bytes(fixed(kind, v)?))
}
pub(super) fn get_u64(kind: u16, v: &[u8]) -> Result<u64, RdmaNlError> {
    Ok(u64::from_ne_bytes(fixed(kind, v)?))
}
/// A NUL-terminated string (anything after the first NUL is ignored).
pub(super) fn get_str(v: &[u8]) -> String {
    let text = v.split(|&b| b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(text).into_owned()
}

pub(super) fn required<T>(value: Option<T>, what: &str) -> Result<T, RdmaNlError> {
    value.ok_or_else(|| decode_err(format!("reply without {what}")))
}

pub(super) fn decode_all<T>(
    bodies: &[Vec<u8>],
    f: impl Fn(&[u8]) -> Result<T, RdmaNlError>,
) -> Result<Vec<T>, RdmaNlError> {
    bodies.iter().map(|b| f(b)).collect()
}
