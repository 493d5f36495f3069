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

/// How many whole ttrpc messages one multiplexer frame may complete. Go's ttrpc writes one
/// message per flush (a header and its payload, in chunks of at most 4096 bytes), so a frame
/// of the runtime's completes one message, rarely two; a frame that completes more is a peer
/// making us answer for it (a 4 MiB frame holds 400,000 empty messages), and ends the
/// connection.
pub const MAX_MESSAGES_PER_FRAME: usize = 64;

/// The trunk's read side: frames in, ttrpc messages out, per connection. Linear in what it
/// reads: a message is taken from a read offset, and the bytes left are moved to the front
/// once, when the frame's messages are all taken, never once per message.
#[derive(Debug, Default)]
pub struct Reader {
    /// Bytes received on connections 1 and 2; those before `start[i]` are already taken.
    pending: [Vec<u8>; 2],
    start: [usize; 2],
    /// Messages taken since the last frame was read.
    taken: usize,
    /// Bytes moved to the front of a buffer, in all (what keeps the reader linear, measured).
    pub moved: usize,
}

impl Reader {
    /// The next whole ttrpc message on connection 1 or 2, reading frames from `r` as needed.
    /// Frames for other connections are dropped (the multiplexer does the same).
    pub fn next(&mut self, r: &mut impl Read) -> io::Result<Message> {
        loop {
            for i in 0..self.pending.len() {
                if let Some((m, used)) =
                    take_message(&self.pending[i][self.start[i]..], i as u32 + 1)?
                {
                    self.taken += 1;
                    if self.taken > MAX_MESSAGES_PER_FRAME {
                        return Err(protocol(format!(
                            "one multiplexer frame completed more than {MAX_MESSAGES_PER_FRAME} ttrpc messages"
                        )));
                    }
                    self.start[i] += used;
                    return Ok(m);
                }
            }
            // Every whole message taken: what is left of each buffer is less than one message.
            for i in 0..self.pending.len() {
                let rest = self.pending[i].len() - self.start[i];
                if self.start[i] > 0 {
                    self.pending[i].copy_within(self.start[i].., 0);
                    self.pending[i].truncate(rest);
                    self.moved += rest;
                    self.start[i] = 0;
                }
            }
            let (conn, payload) = read_frame(r)?;
            self.taken = 0;
            if let Some(buf) = self.pending.get_mut((conn as usize).wrapping_sub(1)) {
                buf.extend_from_slice(&payload);
            }
        }
    }
}

/// A whole ttrpc message at the start of `buf`, and how many bytes of `buf` it takes.
fn take_message(buf: &[u8], conn: u32) -> io::Result<Option<(Message, usize)>> {
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
    Ok(Some((m, TTRPC_HEADER + len)))
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

    /// `n` empty requests on connection 1, as one ttrpc byte stream.
    fn empty_requests(n: usize) -> Vec<u8> {
        let mut stream = Vec::with_capacity(n * TTRPC_HEADER);
        for i in 0..n {
            stream.extend_from_slice(&0u32.to_be_bytes());
            stream.extend_from_slice(&(2 * i as u32 + 1).to_be_bytes());
            stream.extend_from_slice(&[TYPE_REQUEST, 0]);
        }
        stream
    }

    /// `payload` as multiplexer frames of at most `chunk` bytes on connection 1.
    fn frames(payload: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for c in payload.chunks(chunk) {
            out.extend_from_slice(&PLUGIN_CONN.to_be_bytes());
            out.extend_from_slice(&(c.len() as u32).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    #[test]
    fn a_frame_of_400000_empty_messages_ends_the_connection_at_the_65th() {
        // Issue 47 item 5: one 4 MB frame of 400,000 empty ttrpc messages cost the agent 15 s
        // of CPU (each message answered, and the buffer moved once per message).
        let wire = frames(&empty_requests(400_000), MAX_FRAME);
        assert_eq!(wire.len(), 8 + 4_000_000);
        let mut r = Reader::default();
        let mut input = &wire[..];
        for i in 0..MAX_MESSAGES_PER_FRAME {
            let m = r.next(&mut input).unwrap();
            assert_eq!(m.stream, 2 * i as u32 + 1);
        }
        let e = r.next(&mut input).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("more than 64 ttrpc messages"), "{e}");
        // Nothing was moved: the messages were taken from an offset.
        assert_eq!(r.moved, 0);
    }

    #[test]
    fn the_reader_moves_each_byte_at_most_once_whatever_the_framing() {
        // 400,000 messages in frames of 64 (the bound) and in frames cutting messages apart:
        // every message comes out, and the bytes moved to a buffer's front stay below the
        // input's size (the old reader moved what followed each message: 400,000 x 2 MB).
        let stream = empty_requests(400_000);
        for chunk in [64 * TTRPC_HEADER, 64 * TTRPC_HEADER - 3, 7] {
            let wire = frames(&stream, chunk);
            let mut r = Reader::default();
            let mut input = &wire[..];
            for i in 0..400_000u32 {
                assert_eq!(
                    r.next(&mut input).unwrap().stream,
                    2 * i + 1,
                    "chunk {chunk}"
                );
            }
            assert_eq!(
                r.next(&mut input).unwrap_err().kind(),
                io::ErrorKind::UnexpectedEof
            );
            assert!(
                r.moved < stream.len(),
                "chunk {chunk}: {} bytes moved",
                r.moved
            );
        }
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
