//! For tests only (the unit tests here, and the integration tests through the `test-support`
//! feature): HTTP/2 and HPACK bytes written as the kubelet's grpc-go client writes them, the
//! one encoder both kinds of test build their requests with.

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One frame: its 9-byte head, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The SETTINGS frame grpc-go opens with: SETTINGS_INITIAL_WINDOW_SIZE 4 MiB.
pub fn settings() -> Vec<u8> {
    frame(0x4, 0, 0, &[0, 4, 0, 0x40, 0, 0])
}

/// An HPACK string literal, plain or Huffman-coded (the code checked against the decoder's own
/// table as it is written).
pub fn string(out: &mut Vec<u8>, s: &[u8], huffman: bool) {
    if huffman {
        let h = huffman_code(s);
        let back = loona_hpack::huffman::HuffmanDecoder::new().decode(&h);
        assert_eq!(
            back.ok().as_deref(),
            Some(s),
            "the Huffman codes here are the RFC's"
        );
        super::authority::integer(out, 7, 0x80, h.len());
        out.extend_from_slice(&h);
    } else {
        super::authority::integer(out, 7, 0, s.len());
        out.extend_from_slice(s);
    }
}

/// RFC 7541's Huffman code, of the characters the tests' socket paths and method names use (a
/// string with another one panics: add its code from the RFC's appendix B).
pub fn huffman_code(s: &[u8]) -> Vec<u8> {
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

/// The header block of grpc-go's first request on a connection: `:method POST` and `:scheme
/// http` from the static table, the rest literals with incremental indexing (names from the
/// static table where it has them), `:authority` Huffman-coded or not. Afterwards the dynamic
/// table holds, newest first: te (62), content-type (63), :authority (64), :path (65).
pub fn first_request(path: &str, authority: &str, huffman: bool) -> Vec<u8> {
    let mut b = vec![0x83, 0x86];
    b.push(0x44); // :path, static name 4
    string(&mut b, path.as_bytes(), false);
    b.push(0x41); // :authority, static name 1
    string(&mut b, authority.as_bytes(), huffman);
    b.push(0x5f); // content-type, static name 31
    string(&mut b, b"application/grpc", false);
    b.push(0x40); // te, a new name
    string(&mut b, b"te", false);
    string(&mut b, b"trailers", false);
    b
}

/// The same request again on the connection: all from the dynamic table.
pub const SECOND_REQUEST: &[u8] = &[0x83, 0x86, 0xc1, 0xc0, 0xbf, 0xbe];
