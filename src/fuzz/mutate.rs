//! A small deterministic mutation engine for the fuzz tests (no nightly, no extra crates):
//! byte edits, JSON token insertions, JSON values replaced at random paths, splices. Shared by
//! the in-process fuzzer (src/fuzz/mod.rs), the binary one (tests/confinement/fuzz.rs) and the randomised
//! integration tests (through the library: `rdma_host_device::mutate`).

use serde_json::{Value, json};
use std::path::Path;

/// splitmix64: a tiny deterministic PRNG; tests print its seed.
pub struct Rng(pub u64);

#[allow(clippy::should_implement_trait)]
impl Rng {
    /// Seed from `$RHD_SEED` or the clock.
    pub fn from_env() -> Rng {
        let seed = std::env::var("RHD_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0x5eed)
            });
        Rng(seed)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// The seed from `RHD_FUZZ_SEED`, else a fixed one (runs are reproducible by default).
pub fn seed() -> u64 {
    std::env::var("RHD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_cafe)
}

/// `RHD_FUZZ_ITERS` or `default`.
pub fn iters(default: usize) -> usize {
    std::env::var("RHD_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Every file of a corpus directory, sorted.
pub fn corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let v: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!v.is_empty(), "empty corpus {}", dir.display());
    v
}

const TOKENS: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"1e999",
    b"-0.0",
    b"18446744073709551616",
    b"4294967296",
    b"65536",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"\"../..\"",
    b"\"a/b\"",
    b"\"net1\"",
    b"\"1.1.0\"",
    b"\"0.3.0\"",
    b"\"9.9.9\"",
    b"\"cniVersion\"",
    b"\"ipam\"",
    b"\"prevResult\"",
    b"\"device\"",
    b"\"mtu\"",
    b"\"rdma\"",
    b"\"stateDir\"",
    b"\"type\"",
    b"\"interfaces\"",
    b"\"ips\"",
    b"\"routes\"",
    b"\"address\"",
    b"\"dst\"",
    b"\"10.0.0.1/33\"",
    b"\"::/129\"",
    b"\"fe80::1%eth0/64\"",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b"\\",
    b"/*",
    b"NaN",
    b"Infinity",
];

fn interesting_value(r: &mut Rng) -> Value {
    match r.below(22) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(0),
        4 => json!(67),
        5 => json!(65536),
        6 => json!(u64::MAX),
        7 => json!(1.5),
        8 => json!(""),
        9 => json!("a/b"),
        10 => json!("x".repeat(300)),
        11 => json!([]),
        12 => json!({}),
        13 => json!("0000:3b:00.1"),
        14 => json!(".."),
        15 => json!("eth0 "),
        16 => json!("10.0.0.1/24"),
        17 => json!("not-an-ip"),
        18 => {
            let mut v = json!(1);
            for _ in 0..r.below(200) {
                v = json!([v]);
            }
            v
        }
        19 => json!({"type": "host-local", "subnet": "10.0.0.0/8"}),
        20 => json!([{"containerID": "", "ifname": "../x"}]),
        _ => json!("\u{0}\u{7f}é\u{1F600}"),
    }
}

/// Replace, delete or add something at a random place in a JSON tree.
fn mutate_value(v: &mut Value, r: &mut Rng, depth: u32) {
    let descend = depth < 6 && r.below(3) != 0;
    match v {
        Value::Object(m) if !m.is_empty() => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = &keys[r.below(keys.len())];
            if descend {
                mutate_value(m.get_mut(k).unwrap(), r, depth + 1);
            } else {
                match r.below(4) {
                    0 => {
                        m.remove(k);
                    }
                    1 => {
                        m.insert(format!("{k}x"), interesting_value(r));
                    }
                    _ => {
                        m.insert(k.clone(), interesting_value(r));
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = r.below(a.len());
            if descend {
                mutate_value(&mut a[i], r, depth + 1);
            } else if r.below(2) == 0 {
                a.remove(i);
            } else {
                let dup = a[i].clone();
                a.push(dup);
            }
        }
        _ => *v = interesting_value(r),
    }
}

/// One mutant of `seeds[i]` (sometimes spliced with another seed).
pub fn mutant(seeds: &[Vec<u8>], r: &mut Rng) -> Vec<u8> {
    let mut b = seeds[r.below(seeds.len())].clone();
    let rounds = 1 + r.below(4);
    for _ in 0..rounds {
        match r.below(10) {
            // Structural: keeps the input mostly valid JSON, so validation is reached.
            0..=3 => {
                if let Ok(mut v) = serde_json::from_slice::<Value>(&b) {
                    mutate_value(&mut v, r, 0);
                    b = serde_json::to_vec(&v).unwrap();
                }
            }
            4 => {
                let t = TOKENS[r.below(TOKENS.len())];
                let at = r.below(b.len() + 1);
                b.splice(at..at, t.iter().copied());
            }
            5 if !b.is_empty() => {
                let at = r.below(b.len());
                b[at] ^= 1 << r.below(8);
            }
            6 if !b.is_empty() => {
                let at = r.below(b.len());
                let end = (at + 1 + r.below(16)).min(b.len());
                b.drain(at..end);
            }
            7 if !b.is_empty() => {
                let at = r.below(b.len());
                let end = (at + 1 + r.below(32)).min(b.len());
                let chunk: Vec<u8> = b[at..end].to_vec();
                let to = r.below(b.len() + 1);
                b.splice(to..to, chunk);
            }
            8 => {
                let other = &seeds[r.below(seeds.len())];
                let cut = r.below(b.len() + 1);
                let from = r.below(other.len() + 1);
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            _ => {
                let at = r.below(b.len() + 1);
                b.insert(at, r.next() as u8);
            }
        }
    }
    b
}
