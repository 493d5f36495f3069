//! NRI's wire below the protobuf messages: one unix socket (the "trunk") carrying two logical
//! connections through NRI's multiplexer, each a ttrpc byte stream.
//!
//! - Multiplexer (containerd/nri `pkg/net/multiplex`): every write is a frame, an 8-byte header
//!   (connection ID, payload length, both big-endian u32) and the payload. Connection 1 carries
//!   the plugin's service (the runtime calls us), connection 2 the runtime's (we call it). A
//!   frame holds any slice of a connection's stream: messages are reassembled per connection.
//! - ttrpc (containerd/ttrpc `channel.go`): a 10-byte header (length u32, stream ID u32, type
//!   u8: 1 request, 2 response; flags u8) and the payload, a protobuf `Request` or `Response`.
//!   A client's stream IDs are odd and increase; the answer carries the request's ID.
//!
//! Bounds: a ttrpc message is at most 4 MiB (ttrpc's own limit), a frame at most that and a
//! header; more is a protocol error that ends the connection, never an allocation.

use std::io::{self, Read, Write};

/// The multiplexer's connection that carries the plugin's service.
pub const PLUGIN_CONN: u32 = 1;
/// The multiplexer's connection that carries the runtime's service.
pub const RUNTIME_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// ttrpc's `messageLengthMax`.
pub const MAX_MESSAGE: usize = 4 << 20;
const MAX_FRAME: usize = TTRPC_HEADER + MAX_MESSAGE;
/// What Go's ttrpc hands its connection per write (bufio's buffer): a message larger than this
/// is sent as its first 4096 bytes and then the rest, the chunks Go's reader expects.
const GO_WRITE_CHUNK: usize = 4096;

pub const TYPE_REQUEST: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;

/// One ttrpc message, with the multiplexer connection it came on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub conn: u32,
    pub stream: u32,
    pub kind: u8,
    pub flags: u8,
    pub payload: Vec<u8>,
}

fn protocol(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The trunk's read side: frames in, ttrpc messages out, per connection.
#[derive(Debug, Default)]
pub struct Reader {
    /// Bytes received on connections 1 and 2 not yet a whole message.
    pending: [Vec<u8>; 2],
}

impl Reader {
    /// The next whole ttrpc message on connection 1 or 2, reading frames from `r` as needed.
    /// Frames for other connections are dropped (the multiplexer does the same).
    pub fn next(&mut self, r: &mut impl Read) -> io::Result<Message> {
        loop {
            for (i, buf) in self.pending.iter_mut().enumerate() {
                if let Some(m) = take_message(buf, i as u32 + 1)? {
                    return Ok(m);
                }
            }
            let (conn, payload) = read_frame(r)?;
            if let Some(buf) = self.pending.get_mut((conn as usize).wrapping_sub(1)) {
                buf.extend_from_slice(&payload);
            }
        }
    }
}

/// A whole ttrpc message at the start of `buf`, removed from it.
fn take_message(buf: &mut Vec<u8>, conn: u32) -> io::Result<Option<Message>> {
    if buf.len() < TTRPC_HEADER {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_MESSAGE {
        return Err(protocol(format!(
            "a ttrpc message of {len} bytes (at most {MAX_MESSAGE})"
        )));
    }
    if buf.len() < TTRPC_HEADER + len {
        return Ok(None);
    }
    let m = Message {
        conn,
        stream: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        kind: buf[8],
        flags: buf[9],
        payload: buf[TTRPC_HEADER..TTRPC_HEADER + len].to_vec(),
    };
    buf.drain(..TTRPC_HEADER + len);
    Ok(Some(m))
}

/// One multiplexer frame: its connection and payload.
fn read_frame(r: &mut impl Read) -> io::Result<(u32, Vec<u8>)> {
    let mut h = [0u8; MUX_HEADER];
    r.read_exact(&mut h)?;
    let conn = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_FRAME {
        return Err(protocol(format!(
            "a multiplexer frame of {len} bytes (at most {MAX_FRAME})"
        )));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok((conn, payload))
}

/// Send one ttrpc message on connection `conn` of the trunk.
pub fn write_message(
    w: &mut impl Write,
    conn: u32,
    stream: u32,
    kind: u8,
    payload: &[u8],
) -> io::Result<()> {
    if payload.len() > MAX_MESSAGE {
        return Err(protocol(format!(
            "a ttrpc message of {} bytes (at most {MAX_MESSAGE})",
            payload.len()
        )));
    }
    let mut msg = Vec::with_capacity(TTRPC_HEADER + payload.len());
    msg.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    msg.extend_from_slice(&stream.to_be_bytes());
    msg.extend_from_slice(&[kind, 0]);
    msg.extend_from_slice(payload);
    let (first, rest) = msg.split_at(msg.len().min(GO_WRITE_CHUNK));
    let mut out = Vec::with_capacity(msg.len() + 2 * MUX_HEADER);
    for chunk in [first, rest] {
        if chunk.is_empty() {
            continue;
        }
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    w.write_all(&out)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_split_across_frames_and_interleaved_with_another_connection_is_reassembled() {
        let mut wire = Vec::new();
        write_message(&mut wire, RUNTIME_CONN, 1, TYPE_RESPONSE, b"registered").unwrap();
        let big = vec![7u8; 10_000];
        let mut req = Vec::new();
        write_message(&mut req, PLUGIN_CONN, 3, TYPE_REQUEST, &big).unwrap();
        // Sent as Go's bufio would: two frames (4096 bytes, then the rest).
        assert_eq!(&req[..8], &[0, 0, 0, 1, 0, 0, 16, 0]);
        // Interleave: the request's first frame, the response, then the request's rest.
        let first = 8 + 4096;
        let mut all = req[..first].to_vec();
        all.extend_from_slice(&wire);
        all.extend_from_slice(&req[first..]);
        // And a frame for a connection nobody opened, which is dropped.
        all.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 1, 0xff]);
        write_message(&mut all, PLUGIN_CONN, 5, TYPE_REQUEST, b"").unwrap();
        let mut r = Reader::default();
        let mut input = &all[..];
        let a = r.next(&mut input).unwrap();
        assert_eq!((a.conn, a.stream, a.kind), (RUNTIME_CONN, 1, TYPE_RESPONSE));
        assert_eq!(a.payload, b"registered");
        let b = r.next(&mut input).unwrap();
        assert_eq!(
            (b.conn, b.stream, b.payload.len()),
            (PLUGIN_CONN, 3, 10_000)
        );
        let c = r.next(&mut input).unwrap();
        assert_eq!((c.conn, c.stream, c.payload.len()), (PLUGIN_CONN, 5, 0));
        assert_eq!(
            r.next(&mut input).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn oversized_frames_and_messages_are_refused_before_any_allocation() {
        let frame = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
        let e = Reader::default().next(&mut &frame[..]).unwrap_err();
        assert!(e.to_string().contains("multiplexer frame"), "{e}");
        let msg = [
            0, 0, 0, 1, 0, 0, 0, 10, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 0,
        ];
        let e = Reader::default().next(&mut &msg[..]).unwrap_err();
        assert!(e.to_string().contains("ttrpc message"), "{e}");
    }
}
