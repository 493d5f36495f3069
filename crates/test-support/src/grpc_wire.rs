//! gRPC calls written byte for byte as the kubelet's grpc-go client writes them when it dials a
//! unix socket by its path (the plugin watcher's `grpc.DialContext(ctx, socketPath, ...)` with a
//! unix dialer and no `WithAuthority`): HTTP/2's preface and SETTINGS, then per call a HEADERS
//! frame whose HPACK block names the socket's path as `:authority`, a literal with incremental
//! indexing (its name the static table's 1), as Go's HPACK encoder writes it, and the same call
//! again on the connection all from the dynamic table. What comes back is read as a client
//! would, so a test can assert what the kubelet would see.

use rdma_host_device_agent::kubelet_grpc::grpc_go_wire::{
    PREFACE, SECOND_REQUEST, first_request, frame, settings,
};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

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
    hello.extend(settings());
    s.write_all(&hello).unwrap();
    let mut their_hpack = loona_hpack::Decoder::new();
    let mut answers = Vec::new();
    for i in 0..calls {
        let stream = 1 + 2 * i as u32;
        let block = if i == 0 {
            first_request(path, authority, matches!(coding, Coding::Huffman))
        } else {
            SECOND_REQUEST.to_vec()
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

/// One call of `method` with an empty request by tests/kubelet-dial, a grpc-go client dialling
/// `socket` as the kubelet's plugin watcher does (the path as `:authority`): the answer's bytes,
/// or grpc-go's error. Built once per test binary into target/tmp (grpc-go from the Go module
/// proxy, by go.sum).
pub fn kubelet_dial(socket: &Path, method: &str) -> Result<Vec<u8>, String> {
    kubelet_dial_as(socket, method, &[])
}

/// [`kubelet_dial`] as the kubelet's device and DRA managers dial a plugin's socket:
/// `localhost` as `:authority` (here `unix:` and the path, as the DRA manager does; the device
/// manager says `grpc.WithAuthority("localhost")`).
pub fn kubelet_dial_localhost(socket: &Path, method: &str) -> Result<Vec<u8>, String> {
    kubelet_dial_as(socket, method, &["dra"])
}

fn kubelet_dial_as(socket: &Path, method: &str, how: &[&str]) -> Result<Vec<u8>, String> {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let dir = Path::new(crate::programs::TARGET_TMP).join("kubelet-dial-bin");
        fs::create_dir_all(&dir).expect("mkdir target/tmp/kubelet-dial-bin");
        let out = dir.join("kubelet-dial");
        let tmp = dir.join(format!("kubelet-dial.{}", std::process::id()));
        let gocache = std::env::var_os("GOCACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(crate::programs::TARGET_TMP).join("go-cache"));
        let res = Command::new("go")
            .args(["build", "-buildvcs=false", "-o"])
            .arg(&tmp)
            .arg(".")
            .current_dir(crate::process::repo().join("tests/kubelet-dial"))
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
        .args(how)
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
