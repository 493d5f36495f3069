//! gRPC calls written byte for byte as the kubelet's grpc-go client writes them when it dials a
//! unix socket by its path (the plugin watcher's `grpc.DialContext(ctx, socketPath, ...)` with a
//! unix dialer and no `WithAuthority`): HTTP/2's preface and SETTINGS, then per call a HEADERS
//! frame whose HPACK block names the socket's path as `:authority`, a literal with incremental
//! indexing (its name the static table's 1), as Go's HPACK encoder writes it, and the same call
//! again on the connection all from the dynamic table. What comes back is read as a client
//! would, so a test can assert what the kubelet would see.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// What one call got back.
#[derive(Debug, Default)]
pub struct WireAnswer {
    /// Response headers and trailers, in order.
    pub headers: Vec<(String, String)>,
    /// The gRPC message(s) of the response's DATA, without their 5-byte prefixes.
    pub message: Vec<u8>,
    /// The RST_STREAM error code, if the server reset the stream.
    pub reset: Option<u32>,
    /// The GOAWAY error code and debug data, if the server ended the connection.
    pub goaway: Option<(u32, String)>,
}

impl WireAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the call succeeded as gRPC says: HTTP 200 and grpc-status 0.
    pub fn ok(&self) -> bool {
        self.reset.is_none()
            && self.goaway.is_none()
            && self.header(":status") == Some("200")
            && self.header("grpc-status") == Some("0")
    }
}

/// How the `:authority` string is written.
#[derive(Clone, Copy, Debug)]
pub enum Coding {
    Plain,
    Huffman,
}

/// `calls` unary calls of `path`, each with `request` (a protobuf message), on one connection
/// to `socket`, `:authority` naming `authority` as grpc-go does.
pub fn grpc_go_calls(
    socket: &Path,
    authority: &str,
    coding: Coding,
    path: &str,
    request: &[u8],
    calls: usize,
) -> Vec<WireAnswer> {
    let mut s = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = PREFACE.to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE 4 MiB, as grpc-go says.
    hello.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0x40, 0, 0]));
    s.write_all(&hello).unwrap();
    let mut their_hpack = loona_hpack::Decoder::new();
    let mut answers = Vec::new();
    for i in 0..calls {
        let stream = 1 + 2 * i as u32;
        let block = if i == 0 {
            first_block(path, authority, coding)
        } else {
            // te (62), content-type (63), :authority (64), :path (65).
            vec![0x83, 0x86, 0xc1, 0xc0, 0xbf, 0xbe]
        };
        let mut body = vec![0];
        body.extend((request.len() as u32).to_be_bytes());
        body.extend(request);
        let mut out = frame(HEADERS, END_HEADERS, stream, &block);
        out.extend(frame(DATA, END_STREAM, stream, &body));
        s.write_all(&out).unwrap();
        answers.push(answer(&mut s, stream, &mut their_hpack));
    }
    answers
}

fn first_block(path: &str, authority: &str, coding: Coding) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    b.push(0x44); // :path, the static table's name 4, indexed
    string(&mut b, path.as_bytes(), false);
    b.push(0x41); // :authority, the static table's name 1, indexed
    string(
        &mut b,
        authority.as_bytes(),
        matches!(coding, Coding::Huffman),
    );
    b.push(0x5f); // content-type, the static table's name 31, indexed
    string(&mut b, b"application/grpc", false);
    b.push(0x40); // te, a new name, indexed
    string(&mut b, b"te", false);
    string(&mut b, b"trailers", false);
    b
}

/// Read frames until `stream`'s answer is whole (or the stream or connection ends).
fn answer(s: &mut UnixStream, stream: u32, hpack: &mut loona_hpack::Decoder) -> WireAnswer {
    let mut a = WireAnswer::default();
    let mut block = Vec::new();
    let mut message = Vec::new();
    loop {
        let mut head = [0u8; 9];
        if let Err(e) = s.read_exact(&mut head) {
            panic!("reading the answer of stream {stream}: {e}; so far {a:?}");
        }
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; len];
        s.read_exact(&mut payload).unwrap();
        match kind {
            SETTINGS if flags & 0x1 == 0 => s.write_all(&frame(SETTINGS, 0x1, 0, &[])).unwrap(),
            GOAWAY => {
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                a.goaway = Some((code, String::from_utf8_lossy(&payload[8..]).into_owned()));
                return a;
            }
            RST_STREAM if id == stream => {
                a.reset = Some(u32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]));
                return a;
            }
            HEADERS | CONTINUATION if id == stream => {
                block.extend(payload);
                if flags & END_HEADERS != 0 {
                    let fields = hpack.decode(&block).expect("the server's HPACK decodes");
                    a.headers.extend(fields.into_iter().map(|(n, v)| {
                        (
                            String::from_utf8_lossy(&n).into_owned(),
                            String::from_utf8_lossy(&v).into_owned(),
                        )
                    }));
                    block.clear();
                }
            }
            DATA if id == stream => message.extend(payload),
            _ => {}
        }
        if id == stream && flags & END_STREAM != 0 && block.is_empty() {
            let mut m = &message[..];
            while m.len() >= 5 {
                let n = u32::from_be_bytes([m[1], m[2], m[3], m[4]]) as usize;
                a.message.extend(&m[5..5 + n]);
                m = &m[5 + n..];
            }
            return a;
        }
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

fn string(out: &mut Vec<u8>, s: &[u8], huffman: bool) {
    let (high, bytes) = if huffman {
        let h = huffman_code(s);
        let back = loona_hpack::huffman::HuffmanDecoder::new().decode(&h);
        assert_eq!(
            back.ok().as_deref(),
            Some(s),
            "the Huffman codes here are the RFC's"
        );
        (0x80, h)
    } else {
        (0, s.to_vec())
    };
    // An HPACK integer, 7-bit prefix.
    let mut v = bytes.len();
    if v < 127 {
        out.push(high | v as u8);
    } else {
        out.push(high | 127);
        v -= 127;
        while v >= 128 {
            out.push((v % 128) as u8 | 0x80);
            v /= 128;
        }
        out.push(v as u8);
    }
    out.extend(bytes);
}

/// RFC 7541's Huffman code, of the characters the tests' socket paths use (a path with another
/// one panics: add its code from the RFC's appendix B).
fn huffman_code(s: &[u8]) -> Vec<u8> {
    let (mut acc, mut bits, mut out) = (0u64, 0u32, Vec::new());
    for &c in s {
        let (code, n): (u64, u32) = match c {
            b'-' => (0x16, 6),
            b'.' => (0x17, 6),
            b'/' => (0x18, 6),
            b'0' => (0x0, 5),
            b'1' => (0x1, 5),
            b'2' => (0x2, 5),
            b'a' => (0x3, 5),
            b'b' => (0x23, 6),
            b'c' => (0x4, 5),
            b'd' => (0x24, 6),
            b'e' => (0x5, 5),
            b'f' => (0x25, 6),
            b'g' => (0x26, 6),
            b'h' => (0x27, 6),
            b'i' => (0x6, 5),
            b'j' => (0x74, 7),
            b'k' => (0x75, 7),
            b'l' => (0x28, 6),
            b'm' => (0x29, 6),
            b'n' => (0x2a, 6),
            b'o' => (0x7, 5),
            b'p' => (0x2b, 6),
            b'q' => (0x76, 7),
            b'r' => (0x2c, 6),
            b's' => (0x8, 5),
            b't' => (0x9, 5),
            b'u' => (0x2d, 6),
            b'v' => (0x77, 7),
            b'w' => (0x78, 7),
            b'x' => (0x79, 7),
            b'y' => (0x7a, 7),
            b'z' => (0x7b, 7),
            b'_' => (0x22, 6),
            other => panic!("no Huffman code here for {:?}", other as char),
        };
        acc = (acc << n) | code;
        bits += n;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        // Padded with the most significant bits of EOS (all ones).
        out.push(((acc << (8 - bits)) as u8) | ((1u8 << (8 - bits)) - 1));
    }
    out
}

/// One call of `method` with an empty request by tests/kubelet-dial, a grpc-go client dialling
/// `socket` as the kubelet's plugin watcher does: the answer's bytes, or grpc-go's error.
/// Built once per test binary into target/tmp (grpc-go from the Go module proxy, by go.sum).
pub fn kubelet_dial(socket: &Path, method: &str) -> Result<Vec<u8>, String> {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let dir = Path::new(super::TARGET_TMP).join("kubelet-dial-bin");
        fs::create_dir_all(&dir).expect("mkdir target/tmp/kubelet-dial-bin");
        let out = dir.join("kubelet-dial");
        let tmp = dir.join(format!("kubelet-dial.{}", std::process::id()));
        let gocache = std::env::var_os("GOCACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(super::TARGET_TMP).join("go-cache"));
        let res = Command::new("go")
            .args(["build", "-buildvcs=false", "-o"])
            .arg(&tmp)
            .arg(".")
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubelet-dial"))
            .env("GOCACHE", &gocache)
            .env("GOFLAGS", "-mod=readonly")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `go` ({e}): apt-get install golang-go"));
        assert!(
            res.status.success(),
            "building tests/kubelet-dial failed:\n{}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
        fs::rename(&tmp, &out).expect("install kubelet-dial");
        out
    });
    let res = Command::new(bin)
        .arg(socket)
        .arg(method)
        .output()
        .expect("run kubelet-dial");
    let answer: serde_json::Value = serde_json::from_slice(&res.stdout).unwrap_or_else(|e| {
        panic!(
            "kubelet-dial said no JSON ({e}): {}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        )
    });
    match (answer["reply"].as_str(), answer["error"].as_str()) {
        (Some(hex), _) => Ok((0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
            .collect()),
        (_, Some(e)) => Err(e.to_owned()),
        _ => panic!("kubelet-dial: {answer}"),
    }
}
