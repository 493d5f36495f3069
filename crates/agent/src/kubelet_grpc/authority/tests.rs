//! The rewriter on byte streams built as grpc-go's HTTP/2 client writes them (its HPACK encoder
//! indexes `:authority`, `:path`, `content-type` and `te` incrementally, then refers to them),
//! read back as h2 reads them.

use super::*;
use crate::kubelet_grpc::grpc_go_wire::{
    PREFACE, SECOND_REQUEST, first_request as request_of, frame, huffman_code, settings, string,
};
use std::time::Duration;

/// grpc-go's first request on a connection: GetInfo, naming `authority`.
fn first_request(authority: &str, huffman: bool) -> Vec<u8> {
    request_of(GET_INFO, authority, huffman)
}

const SOCKET: &str = "/var/lib/kubelet/plugins_registry/rdma-host-device.io-reg.sock";
const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";

/// An empty gRPC message, the last of its stream.
fn empty_message(stream: u32) -> Vec<u8> {
    frame(0x0, END_STREAM, stream, &[0, 0, 0, 0, 0])
}

fn rewrite(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let used = Rewriter::new().feed(input, &mut out).expect("rewritten");
    assert_eq!(used, input.len(), "all of the input taken");
    out
}

/// A frame as the server reads it.
#[derive(Debug, PartialEq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn frames(mut b: &[u8]) -> Vec<Frame> {
    assert_eq!(&b[..PREFACE.len()], PREFACE, "the preface passed unchanged");
    b = &b[PREFACE.len()..];
    let mut all = Vec::new();
    while !b.is_empty() {
        let len = (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]);
        all.push(Frame {
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]),
            payload: b[9..9 + len].to_vec(),
        });
        b = &b[9 + len..];
    }
    all
}

/// A header block of literals without indexing and with plain strings, the only form the
/// rewriter sends (so h2's HPACK table stays empty): its fields; anything else panics.
fn literals(mut b: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let take = |b: &mut &[u8]| {
        assert_eq!(b[0] & 0x80, 0, "no Huffman coding");
        let (len, used) = read_integer(b, 7);
        let s = String::from_utf8(b[used..used + len].to_vec()).expect("UTF-8");
        *b = &b[used + len..];
        s
    };
    while !b.is_empty() {
        assert_eq!(b[0], 0, "a literal without indexing, its name a literal");
        b = &b[1..];
        let name = take(&mut b);
        let value = take(&mut b);
        fields.push((name, value));
    }
    fields
}

fn read_integer(b: &[u8], n: u32) -> (usize, usize) {
    let max = (1usize << n) - 1;
    let mut v = usize::from(b[0]) & max;
    if v < max {
        return (v, 1);
    }
    let mut i = 1;
    let mut shift = 0;
    loop {
        v += usize::from(b[i] & 0x7f) << shift;
        shift += 7;
        i += 1;
        if b[i - 1] & 0x80 == 0 {
            return (v, i);
        }
    }
}

fn request_fields(authority: &str) -> Vec<(String, String)> {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", GET_INFO),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect()
}

#[test]
fn the_huffman_codes_here_are_the_rfcs() {
    let s = b"/var/lib/kubelet/plugins_registry/rdma-host-device.io-reg.sock";
    let decoded = loona_hpack::huffman::HuffmanDecoder::new()
        .decode(&huffman_code(s))
        .expect("decodes");
    assert_eq!(decoded, s);
}

#[test]
fn grpc_gos_socket_path_authority_becomes_localhost_and_every_other_byte_passes() {
    let mut input = PREFACE.to_vec();
    input.extend(settings());
    input.extend(frame(
        HEADERS,
        END_HEADERS,
        1,
        &first_request(SOCKET, false),
    ));
    input.extend(empty_message(1));
    input.extend(frame(0x8, 0, 0, &[0, 0, 0x10, 0])); // WINDOW_UPDATE
    input.extend(frame(0x4, 0x1, 0, &[])); // SETTINGS ACK
    input.extend(frame(HEADERS, END_HEADERS, 3, SECOND_REQUEST));
    input.extend(empty_message(3));
    input.extend(frame(0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8])); // PING
    let got = frames(&rewrite(&input));
    let want = frames(&input);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        if w.kind == HEADERS {
            assert_eq!((g.kind, g.flags, g.stream), (w.kind, w.flags, w.stream));
            assert_eq!(literals(&g.payload), request_fields("localhost"));
        } else {
            assert_eq!(g, w, "a frame other than HEADERS passes unchanged");
        }
    }
}

#[test]
fn a_huffman_coded_authority_too() {
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &first_request(SOCKET, true),
    ));
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, SECOND_REQUEST));
    let got = frames(&rewrite(&input));
    assert_eq!(got.len(), 2);
    for g in &got {
        assert_eq!(g.flags, END_HEADERS | END_STREAM);
        assert_eq!(literals(&g.payload), request_fields("localhost"));
    }
}

#[test]
fn an_authority_h2_takes_is_kept_and_one_it_refuses_is_replaced() {
    for (sent, seen) in [
        ("localhost", "localhost"),
        ("localhost:50051", "localhost:50051"),
        ("rdma-host-device.io", "rdma-host-device.io"),
        (SOCKET, "localhost"),
        ("%2Fvar%2Flib%2Fkubelet%2Fx.sock", "localhost"),
        ("", "localhost"),
        ("a b", "localhost"),
    ] {
        // Whatever h2 would take stays, the rest is what h2's check refuses.
        assert_eq!(acceptable(sent.as_bytes()), sent == seen, "{sent:?}");
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &first_request(sent, false)));
        let got = frames(&rewrite(&input));
        assert_eq!(literals(&got[0].payload), request_fields(seen), "{sent:?}");
    }
}

#[test]
fn padding_is_dropped_priority_kept_and_continuations_joined() {
    let block = first_request(SOCKET, true);
    let (a, rest) = block.split_at(10);
    let (b, c) = rest.split_at(20);
    let mut headers = vec![3]; // pad length
    headers.extend([0x80, 0, 0, 1, 200]); // exclusive, depends on stream 1, weight 201
    headers.extend(a);
    headers.extend([0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_STREAM | PADDED | PRIORITY, 3, &headers));
    input.extend(frame(CONTINUATION, 0, 3, b));
    input.extend(frame(CONTINUATION, END_HEADERS, 3, c));
    input.extend(settings());
    let got = frames(&rewrite(&input));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].kind, HEADERS);
    assert_eq!(got[0].flags, END_STREAM | PRIORITY | END_HEADERS);
    assert_eq!(got[0].stream, 3);
    assert_eq!(got[0].payload[..5], [0x80, 0, 0, 1, 200]);
    assert_eq!(literals(&got[0].payload[5..]), request_fields("localhost"));
    assert_eq!(got[1], frames(&[PREFACE, &settings()].concat())[0]);
}

#[test]
fn a_header_block_larger_than_a_frame_goes_on_in_continuations_h2_takes() {
    // Two 9000-byte values: the block takes a HEADERS frame and a CONTINUATION coming in, and
    // so going out.
    let mut block = first_request(SOCKET, false);
    for name in ["x-a", "x-b"] {
        block.push(0);
        string(&mut block, name.as_bytes(), false);
        string(&mut block, "v".repeat(9000).as_bytes(), false);
    }
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &block[..MAX_FRAME]));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, &block[MAX_FRAME..]));
    let got = frames(&rewrite(&input));
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].kind, got[0].flags), (HEADERS, 0));
    assert_eq!((got[1].kind, got[1].flags), (CONTINUATION, END_HEADERS));
    assert!(
        got.iter()
            .all(|f| f.payload.len() <= MAX_FRAME && f.stream == 1)
    );
    assert_eq!(got[0].payload.len(), MAX_FRAME);
    let mut want = request_fields("localhost");
    for name in ["x-a", "x-b"] {
        want.push((name.into(), "v".repeat(9000)));
    }
    let joined = [&got[0].payload[..], &got[1].payload[..]].concat();
    let decoded = loona_hpack::Decoder::new()
        .decode(&joined)
        .expect("decodes");
    let decoded: Vec<(String, String)> = decoded
        .into_iter()
        .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    assert_eq!(decoded, want);
}

#[test]
fn byte_by_byte_reads_rewrite_the_same() {
    let mut input = PREFACE.to_vec();
    input.extend(settings());
    input.extend(frame(HEADERS, END_HEADERS, 1, &first_request(SOCKET, true)));
    input.extend(empty_message(1));
    input.extend(frame(HEADERS, END_HEADERS, 3, SECOND_REQUEST));
    input.extend(empty_message(3));
    let whole = rewrite(&input);
    let mut r = Rewriter::new();
    let (mut pending, mut out) = (Vec::new(), Vec::new());
    for &b in &input {
        pending.push(b);
        let used = r.feed(&pending, &mut out).expect("rewritten");
        pending.drain(..used);
        assert!(pending.len() <= FRAME_HEAD_LEN + MAX_FRAME);
    }
    assert!(pending.is_empty());
    assert_eq!(out, whole);
}

fn refused(input: &[u8]) -> String {
    let mut out = Vec::new();
    let e = Rewriter::new()
        .feed(input, &mut out)
        .expect_err("the connection is ended");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    e.to_string()
}

#[test]
fn a_client_cannot_make_it_buffer_without_bound() {
    // A header frame larger than the server's frame size: refused from its head alone.
    let mut input = PREFACE.to_vec();
    input.extend(&frame(HEADERS, 0, 1, &vec![0; MAX_FRAME + 1])[..FRAME_HEAD_LEN]);
    assert!(refused(&input).contains("a header frame of 16385 bytes"));

    // CONTINUATIONs without end.
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &[0x83]));
    for _ in 0..(MAX_HEADER_BLOCK / MAX_FRAME + 1) {
        input.extend(frame(CONTINUATION, 0, 1, &vec![0x83; MAX_FRAME]));
    }
    assert!(refused(&input).contains("a header block over 65536 bytes"));

    // A small block that decodes into much: one 4000-byte entry, referred to again and again.
    let mut block = vec![0x40];
    string(&mut block, b"x-big", false);
    string(&mut block, &[b'v'; 4000], false);
    block.extend([0xbe; 16]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    assert!(refused(&input).contains("a header list over 65536 bytes"));

    // A dynamic table larger than the server allows.
    let mut block = Vec::new();
    integer(&mut block, 5, 0x20, 1 << 20);
    block.push(0x83);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    assert!(refused(&input).contains("HPACK cannot decode"));
}

#[test]
fn a_broken_header_block_ends_the_connection() {
    for (what, input) in [
        (
            "a frame of type 0 inside a header block",
            [frame(HEADERS, 0, 1, &[0x83]), empty_message(1)].concat(),
        ),
        (
            "a CONTINUATION frame on another stream",
            [
                frame(HEADERS, 0, 1, &[0x83]),
                frame(CONTINUATION, END_HEADERS, 3, &[0x86]),
            ]
            .concat(),
        ),
        (
            "padding longer than it",
            frame(HEADERS, END_HEADERS | PADDED, 1, &[5, 0x83]),
        ),
        (
            "too short for its priority",
            frame(HEADERS, END_HEADERS | PRIORITY, 1, &[0, 0]),
        ),
        (
            "HPACK cannot decode",
            frame(
                HEADERS,
                END_HEADERS,
                1,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ),
    ] {
        let e = refused(&[PREFACE, &input].concat());
        assert!(e.contains(what), "{e}");
    }
}

// Issue 36's outside attack pass on the rewriter: what a hostile local root client of the
// kubelet's sockets can send.

/// A small deterministic generator (xorshift64*), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One hostile frame: a header frame with a valid, mutated or random block (any flags,
/// streams, padding lengths, priority fields), or another frame, or a frame head whose length
/// lies.
fn hostile_frame(rng: &mut Rng) -> Vec<u8> {
    let stream = [0, 1, 3, 0x7fff_ffff, 0xffff_ffff][rng.below(5) as usize];
    let flags = rng.next() as u8;
    let mut block = match rng.below(4) {
        0 => first_request(SOCKET, rng.below(2) == 0),
        1 => SECOND_REQUEST.to_vec(),
        2 => {
            // HPACK's hard cases: big integers, table size updates, huge string lengths.
            let mut b = Vec::new();
            for _ in 0..rng.below(6) {
                match rng.below(5) {
                    0 => integer(&mut b, 5, 0x20, rng.below(1 << 20) as usize),
                    1 => integer(&mut b, 7, 0x80, rng.below(1 << 40) as usize),
                    2 => {
                        b.push(0x40);
                        integer(
                            &mut b,
                            7,
                            0x80 * rng.below(2) as u8,
                            rng.below(1 << 30) as usize,
                        );
                    }
                    3 => b.extend([0xff; 12]),
                    _ => {
                        let n = rng.below(40) as usize;
                        b.extend(rng.bytes(n))
                    }
                }
            }
            b
        }
        _ => {
            let n = rng.below(200) as usize;
            rng.bytes(n)
        }
    };
    if rng.below(3) == 0 && !block.is_empty() {
        let at = rng.below(block.len() as u64) as usize;
        block[at] ^= 1 << rng.below(8);
    }
    let kind = [
        HEADERS,
        HEADERS,
        CONTINUATION,
        CONTINUATION,
        0x0,
        0x4,
        0x5,
        0x8,
        0x2a,
    ][rng.below(9) as usize];
    let mut f = frame(kind, flags, stream, &block);
    if rng.below(10) == 0 {
        // A length that says more (or much more) than follows.
        let len = rng.below(1 << 24) as usize;
        f[..3].copy_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
    }
    f
}

/// Random streams of hostile frames, fed whole and in random pieces as [`KubeletStream`]
/// feeds them: no panic, the same outcome either way, the unread rest never more than a frame,
/// and the output never more than the input plus one decoded block's bound per block.
#[test]
fn hostile_frame_streams_never_panic_and_stay_bounded() {
    for seed in 1..3000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut input = PREFACE.to_vec();
        let mut blocks = 0;
        for _ in 0..1 + rng.below(12) {
            let f = hostile_frame(&mut rng);
            blocks += usize::from(f[3] == HEADERS || f[3] == CONTINUATION);
            input.extend(f);
        }
        let bound = input.len() + blocks * (MAX_HEADER_BLOCK + MAX_HEADER_BLOCK / 2);
        let whole = std::panic::catch_unwind(|| {
            let mut out = Vec::new();
            let r = Rewriter::new().feed(&input, &mut out);
            (r.map_err(|e| e.to_string()), out)
        })
        .unwrap_or_else(|_| panic!("seed {seed}: the rewriter panicked"));
        assert!(
            whole.1.len() <= bound,
            "seed {seed}: {} > {bound}",
            whole.1.len()
        );
        // In pieces.
        let mut r = Rewriter::new();
        let (mut pending, mut out, mut at) = (Vec::new(), Vec::new(), 0);
        let mut failed = None;
        while at < input.len() {
            let n = (1 + rng.below(READ_CHUNK as u64) as usize).min(input.len() - at);
            pending.extend_from_slice(&input[at..at + n]);
            at += n;
            match r.feed(&pending, &mut out) {
                Ok(used) => {
                    pending.drain(..used);
                    assert!(
                        pending.len() <= FRAME_HEAD_LEN + MAX_FRAME,
                        "seed {seed}: {} bytes held",
                        pending.len()
                    );
                }
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        match (&whole.0, failed) {
            (Ok(used), None) => {
                assert_eq!(*used, input.len() - pending.len(), "seed {seed}");
                assert_eq!(out, whole.1, "seed {seed}");
            }
            (Err(a), Some(b)) => assert_eq!(*a, b, "seed {seed}"),
            (a, b) => panic!("seed {seed}: whole {a:?}, in pieces {b:?}"),
        }
    }
}

/// A client that opens a header block and never ends it (the CONTINUATION flood of 2024, with
/// empty frames): every byte is taken, nothing reaches the server, nothing is kept but the
/// 9-byte frame heads' worth of nothing; interleaving another stream or frame ends it.
#[test]
fn a_header_block_that_never_ends_costs_nothing_kept() {
    let mut r = Rewriter::new();
    let mut out = Vec::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &[0x83]));
    assert_eq!(r.feed(&input, &mut out).unwrap(), input.len());
    let empty = frame(CONTINUATION, 0, 1, &[]);
    let flood: Vec<u8> = empty.repeat(100_000);
    assert_eq!(r.feed(&flood, &mut out).unwrap(), flood.len());
    assert_eq!(out, PREFACE, "nothing of the block went on");
    assert_eq!(r.block.as_ref().map(|b| b.encoded.len()), Some(1));
    for (what, next) in [
        (
            "a HEADERS frame inside a header block",
            frame(HEADERS, END_HEADERS, 3, &[0x83]),
        ),
        (
            "a CONTINUATION frame on another stream",
            frame(CONTINUATION, END_HEADERS, 3, &[]),
        ),
        ("a frame of type 4 inside a header block", settings()),
        (
            "a frame of type 8 inside a header block",
            frame(0x8, 0, 0, &[0, 0, 0, 1]),
        ),
    ] {
        let mut r2 = Rewriter::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, 0, 1, &[0x83]));
        input.extend(next);
        let e = r2.feed(&input, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}

/// The same client on a real socket through [`KubeletStream`]: the server's read waits (no
/// spinning: the thread's CPU time stays small while it waits) and ends when the client goes.
#[test]
fn a_client_that_never_ends_its_header_block_leaves_the_server_waiting_not_spinning() {
    use tokio::io::AsyncReadExt;
    let rt = crate::async_rt::current_thread().unwrap();
    rt.block_on(async {
        let (server, mut client) = UnixStream::pair().unwrap();
        let mut s = KubeletStream::new(server);
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(HEADERS, 0, 1, &[0x83]));
        hello.extend(frame(CONTINUATION, 0, 1, &[]).repeat(1000));
        tokio::io::AsyncWriteExt::write_all(&mut client, &hello)
            .await
            .unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], PREFACE);
        let cpu = || {
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: getrusage into a zeroed struct.
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
            Duration::new(u.ru_utime.tv_sec as u64, u.ru_utime.tv_usec as u32 * 1000)
                + Duration::new(u.ru_stime.tv_sec as u64, u.ru_stime.tv_usec as u32 * 1000)
        };
        let before = cpu();
        let waited = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await;
        assert!(waited.is_err(), "the read returned {waited:?}");
        let spent = cpu() - before;
        assert!(
            spent < Duration::from_millis(100),
            "{spent:?} of CPU while waiting"
        );
        drop(client);
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .expect("the read ends when the client goes")
            .unwrap();
        assert_eq!(n, 0, "end of stream, the unfinished block dropped");
    });
}
