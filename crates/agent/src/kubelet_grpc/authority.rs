//! The wire fix for a kubelet client that dials a unix socket by its path.
//!
//! A gRPC client dialling a unix socket by its path names the path as HTTP/2 `:authority`:
//! grpc-go's passthrough resolver does (the kubelet's plugin watcher calls
//! `grpc.DialContext(ctx, socketPath, ...)` with a unix dialer and no `WithAuthority`), and so do
//! other gRPC stacks. Our servers are tonic over hyper over h2, and h2's server resets every
//! stream whose `:authority` is not a valid URI authority (`RST_STREAM` with `PROTOCOL_ERROR`,
//! "malformed authority"), with no option to accept it. So each accepted connection is read
//! through [`KubeletStream`]: the client's frames pass unchanged except header blocks, which are
//! decoded with the client's HPACK state and sent on as literals without indexing (h2's decoder
//! table stays empty, so the two HPACK states can never disagree), an `:authority` h2 would
//! refuse replaced by `localhost`. Nothing reads the authority of a request to these sockets.
//! What the server writes passes untouched. Every buffer is bounded: a header block larger than
//! [`MAX_HEADER_BLOCK`] (encoded or decoded) closes the connection.
//!
//! Only the registration socket is read so ([`super::Dialled::ByPath`]): the kubelet's device
//! and DRA managers name `localhost`, and their sockets are served as they are.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::codegen::http;
use tonic::transport::server::Connected;

/// The client connection preface ("PRI * HTTP/2.0...").
const PREFACE_LEN: usize = 24;
const FRAME_HEAD_LEN: usize = 9;
/// The largest frame payload we take and send: the server's SETTINGS_MAX_FRAME_SIZE, hyper's
/// default, which we leave as it is (tonic's `max_frame_size` unset).
pub const MAX_FRAME: usize = 16 * 1024;
/// The most a header block may be, encoded (across its HEADERS and CONTINUATION frames) and
/// decoded (names, values and 32 bytes per field, as SETTINGS_MAX_HEADER_LIST_SIZE counts): four
/// times hyper's default SETTINGS_MAX_HEADER_LIST_SIZE, past which h2 refuses the request anyway.
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// The HPACK dynamic table a client may use: the protocol's default, as our server advertises
/// no SETTINGS_HEADER_TABLE_SIZE.
const HEADER_TABLE_SIZE: usize = 4096;
/// What stands for an authority h2 would refuse.
const REPLACEMENT: &[u8] = b"localhost";
/// How much is read from the socket at once.
const READ_CHUNK: usize = 8 * 1024;

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// An accepted connection whose client-to-server HTTP/2 stream is read through [`Rewriter`].
pub struct KubeletStream {
    inner: UnixStream,
    rewriter: Rewriter,
    /// Read from the socket, not yet rewritten: at most a frame head or one header frame
    /// (bounded by [`MAX_FRAME`]) plus one [`READ_CHUNK`].
    input: Vec<u8>,
    /// Rewritten, not yet read by the server; `output[sent..]` is what is left.
    output: Vec<u8>,
    sent: usize,
    eof: bool,
}

impl KubeletStream {
    pub fn new(inner: UnixStream) -> KubeletStream {
        KubeletStream {
            inner,
            rewriter: Rewriter::new(),
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            eof: false,
        }
    }
}

impl Connected for KubeletStream {
    type ConnectInfo = <UnixStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for KubeletStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.sent < this.output.len() {
                let n = buf.remaining().min(this.output.len() - this.sent);
                buf.put_slice(&this.output[this.sent..this.sent + n]);
                this.sent += n;
                if this.sent == this.output.len() {
                    this.output.clear();
                    this.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let used = this.rewriter.feed(&this.input, &mut this.output)?;
            this.input.drain(..used);
            if !this.output.is_empty() {
                continue;
            }
            if this.eof {
                // What is left is an incomplete frame: the server sees the connection end.
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut rb = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                this.eof = true;
            }
            this.input.extend_from_slice(rb.filled());
        }
    }
}

impl AsyncWrite for KubeletStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Where the client's byte stream is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum At {
    /// In the connection preface, so many bytes of it left.
    Preface(usize),
    /// At a frame head.
    Head,
    /// In a frame passed through, so many bytes of its payload left.
    Pass(usize),
}

/// A header block being gathered from a HEADERS frame and its CONTINUATIONs.
struct Block {
    stream: u32,
    /// The HEADERS frame's END_STREAM and PRIORITY flags.
    flags: u8,
    /// Its priority fields (stream dependency and weight), when PRIORITY is set.
    priority: [u8; 5],
    encoded: Vec<u8>,
}

/// The client-to-server half of an HTTP/2 connection, rewritten as the module says.
pub struct Rewriter {
    at: At,
    block: Option<Block>,
    hpack: loona_hpack::Decoder<'static>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

fn malformed(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from the client: {what}"),
    )
}

impl Rewriter {
    pub fn new() -> Rewriter {
        let mut hpack = loona_hpack::Decoder::new();
        hpack.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Rewriter {
            at: At::Preface(PREFACE_LEN),
            block: None,
            hpack,
        }
    }

    /// Rewrite what of `input` can be, appending the result to `out`; the number of bytes of
    /// `input` used. What is left is an incomplete frame head or header frame, to be given
    /// again with more after it. An error means the connection must end.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<usize> {
        let mut used = 0;
        loop {
            let n = self.step(&input[used..], out)?;
            if n == 0 {
                return Ok(used);
            }
            used += n;
        }
    }

    fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<usize> {
        match self.at {
            At::Preface(left) | At::Pass(left) => {
                let n = left.min(input.len());
                out.extend_from_slice(&input[..n]);
                self.at = match self.at {
                    _ if n == left => At::Head,
                    At::Preface(_) => At::Preface(left - n),
                    _ => At::Pass(left - n),
                };
                Ok(n)
            }
            At::Head => {
                let Some(head) = input.get(..FRAME_HEAD_LEN) else {
                    return Ok(0);
                };
                let len = (usize::from(head[0]) << 16)
                    | (usize::from(head[1]) << 8)
                    | usize::from(head[2]);
                let (kind, flags) = (head[3], head[4]);
                let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                let ours = kind == HEADERS || (kind == CONTINUATION && self.block.is_some());
                if !ours {
                    if self.block.is_some() {
                        return Err(malformed(format!(
                            "a frame of type {kind} inside a header block"
                        )));
                    }
                    out.extend_from_slice(head);
                    self.at = if len == 0 { At::Head } else { At::Pass(len) };
                    return Ok(FRAME_HEAD_LEN);
                }
                if len > MAX_FRAME {
                    return Err(malformed(format!("a header frame of {len} bytes")));
                }
                let Some(payload) = input.get(FRAME_HEAD_LEN..FRAME_HEAD_LEN + len) else {
                    return Ok(0);
                };
                if kind == HEADERS {
                    self.headers(stream, flags, payload, out)?;
                } else {
                    self.continuation(stream, flags, payload, out)?;
                }
                Ok(FRAME_HEAD_LEN + len)
            }
        }
    }

    fn headers(
        &mut self,
        stream: u32,
        flags: u8,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if self.block.is_some() {
            return Err(malformed("a HEADERS frame inside a header block"));
        }
        let mut p = payload;
        let mut pad = 0;
        if flags & PADDED != 0 {
            let (&n, rest) = p
                .split_first()
                .ok_or_else(|| malformed("a padded HEADERS frame without its pad length"))?;
            pad = usize::from(n);
            p = rest;
        }
        let mut priority = [0; 5];
        if flags & PRIORITY != 0 {
            let (fields, rest) = p
                .split_at_checked(5)
                .ok_or_else(|| malformed("a HEADERS frame too short for its priority"))?;
            priority.copy_from_slice(fields);
            p = rest;
        }
        if pad > p.len() {
            return Err(malformed("a HEADERS frame's padding longer than it"));
        }
        let fragment = &p[..p.len() - pad];
        self.block = Some(Block {
            stream,
            flags: flags & (END_STREAM | PRIORITY),
            priority,
            encoded: Vec::new(),
        });
        self.gather(flags, fragment, out)
    }

    fn continuation(
        &mut self,
        stream: u32,
        flags: u8,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if self.block.as_ref().map(|b| b.stream) != Some(stream) {
            return Err(malformed("a CONTINUATION frame on another stream"));
        }
        self.gather(flags, payload, out)
    }

    fn gather(&mut self, flags: u8, fragment: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let Some(block) = self.block.as_mut() else {
            return Err(malformed("a header fragment outside a header block"));
        };
        if block.encoded.len() + fragment.len() > MAX_HEADER_BLOCK {
            return Err(malformed(format!(
                "a header block over {MAX_HEADER_BLOCK} bytes"
            )));
        }
        block.encoded.extend_from_slice(fragment);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        match self.block.take() {
            Some(block) => self.finish(block, out),
            None => Ok(()),
        }
    }

    /// Decode a whole header block and send it on as literals, as HEADERS and CONTINUATIONs.
    fn finish(&mut self, block: Block, out: &mut Vec<u8>) -> io::Result<()> {
        let mut fields = Vec::with_capacity(block.encoded.len() * 2);
        let mut size = 0usize;
        self.hpack
            .decode_with_cb(&block.encoded, |name, value| {
                size = size.saturating_add(name.len() + value.len() + 32);
                if size > MAX_HEADER_BLOCK {
                    return;
                }
                let value: &[u8] = if &*name == b":authority" && !acceptable(&value) {
                    REPLACEMENT
                } else {
                    &value
                };
                literal(&mut fields, &name, value);
            })
            .map_err(|e| malformed(format!("a header block HPACK cannot decode: {e:?}")))?;
        if size > MAX_HEADER_BLOCK {
            return Err(malformed(format!(
                "a header list over {MAX_HEADER_BLOCK} bytes"
            )));
        }
        let mut rest = &fields[..];
        let mut first = true;
        loop {
            let prefix: &[u8] = if first && block.flags & PRIORITY != 0 {
                &block.priority
            } else {
                &[]
            };
            let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME - prefix.len()));
            let (kind, mut flags) = if first {
                (HEADERS, block.flags)
            } else {
                (CONTINUATION, 0)
            };
            if tail.is_empty() {
                flags |= END_HEADERS;
            }
            let len = prefix.len() + chunk.len();
            out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
            out.extend_from_slice(&block.stream.to_be_bytes());
            out.extend_from_slice(prefix);
            out.extend_from_slice(chunk);
            if tail.is_empty() {
                return Ok(());
            }
            rest = tail;
            first = false;
        }
    }
}

/// Whether h2 takes `authority` as a request's `:authority` (it parses it as this).
fn acceptable(authority: &[u8]) -> bool {
    http::uri::Authority::try_from(authority).is_ok()
}

/// A header field as a literal without indexing, with a literal name, no Huffman coding.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        integer(out, 7, 0, s.len());
        out.extend_from_slice(s);
    }
}

/// An HPACK integer with an `n`-bit prefix, `high` the bits above it in its first byte.
pub(super) fn integer(out: &mut Vec<u8>, n: u32, high: u8, v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    let mut v = v - max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests;
