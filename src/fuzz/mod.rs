//! Fuzzing the untrusted inputs in process (a test module): network configurations through
//! `NetConf::parse`, and CNI results (IPAM output, `prevResult`) through `CniResult`, mutated
//! from the corpus in testdata/fuzz-corpus/ by src/fuzz/mutate.rs. Nothing may panic; errors
//! must carry the codes documented for bad config; what is accepted must hold the invariants
//! the flows rely on (names safe in paths, absolute dirs, MTU in range, results that print
//! and re-read in every version).

use crate::cni::netconf::{NetConf, NicRequest, peek_version};
use crate::cni::result::CniResult;
use crate::cni::version::SUPPORTED;
use crate::mutate::{self, Rng};
use rdma_host_device_core::error::Code;
use rdma_host_device_core::names::validate_ifname;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

fn corpus(kind: &str) -> Vec<Vec<u8>> {
    mutate::corpus(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/fuzz-corpus")
            .join(kind),
    )
}

fn show(input: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(input))
}

/// Codes a bad config may earn (docs/operations.md): version, unsupported field, decode, invalid
/// config, ambiguous selector.
const CONFIG_CODES: &[Code] = &[
    Code::IncompatibleVersion,
    Code::UnsupportedField,
    Code::Decode,
    Code::InvalidConfig,
    Code::DeviceAmbiguous,
];

fn check_netconf(input: &[u8]) -> Result<(), String> {
    let _ = peek_version(input);
    match NetConf::parse(input.to_vec()) {
        Err(e) => {
            if !CONFIG_CODES.contains(&e.code) {
                return Err(format!("unexpected code {:?}: {e}", e.code));
            }
            if e.msg.trim().is_empty() {
                return Err("empty error message".into());
            }
            let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0"))
                .map_err(|j| format!("error JSON does not parse: {j}"))?;
            if v["code"] != e.code as u32 {
                return Err(format!("error JSON lost its code: {v}"));
            }
            Ok(())
        }
        Ok(c) => {
            let name_ok = !c.name.is_empty()
                && c.name.len() <= 253
                && c.name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "_.-".contains(ch));
            if !name_ok {
                return Err(format!("accepted network name {:?}", c.name));
            }
            if c.log_file.as_ref().is_some_and(|f| !f.is_absolute()) {
                return Err(format!("accepted relative logFile {:?}", c.log_file));
            }
            if c.mtu.is_some_and(|m| !(68..=65535).contains(&m)) {
                return Err(format!("accepted mtu {:?}", c.mtu));
            }
            if let Some(t) = &c.ipam_type
                && (t.is_empty() || t.contains('/') || t == "." || t == "..")
            {
                return Err(format!("accepted ipam.type {t:?}"));
            }
            match &c.nic {
                Some(NicRequest::Name(n)) if validate_ifname(n).is_err() => {
                    return Err(format!("accepted device {n:?}"));
                }
                Some(NicRequest::Pci(id) | NicRequest::DeviceId(id))
                    if id.contains('/') || id == ".." || id.is_empty() =>
                {
                    return Err(format!("accepted bus id {id:?}"));
                }
                Some(NicRequest::KernelPath(p))
                    if !p.starts_with("/sys/devices/") || p.contains("/../") =>
                {
                    return Err(format!("accepted kernelpath {p:?}"));
                }
                _ => {}
            }
            if let Some(prev) = &c.prev_result {
                check_result_prints(prev)?;
            }
            Ok(())
        }
    }
}

/// Prints as JSON in every version and reads back with the same interfaces and IPs.
fn check_result_prints(r: &CniResult) -> Result<(), String> {
    for v in SUPPORTED {
        let out = r.to_json(v);
        let back = CniResult::from_slice(out.as_bytes())
            .map_err(|e| format!("{} result does not read back: {e}: {out}", v.as_str()))?;
        if back.ips != r.ips || back.interfaces.len() != r.interfaces.len() {
            return Err(format!("{} result changed on the way: {out}", v.as_str()));
        }
    }
    Ok(())
}

fn check_result(input: &[u8]) -> Result<(), String> {
    match CniResult::from_slice(input) {
        Err(e) if e.code != Code::InvalidConfig => Err(format!("unexpected code {:?}", e.code)),
        Err(_) => Ok(()),
        Ok(r) => check_result_prints(&r),
    }
}

/// Run `check` on every seed and `n` mutants; panics name the first failing input.
fn fuzz(kind: &str, n: usize, check: fn(&[u8]) -> Result<(), String>) -> (usize, usize) {
    let seeds = corpus(kind);
    let mut rng = Rng(mutate::seed() ^ kind.len() as u64);
    let mut accepted = 0;
    let inputs: Vec<Vec<u8>> = seeds
        .iter()
        .cloned()
        .chain((0..n).map(|_| mutate::mutant(&seeds, &mut rng)))
        .collect();
    // Quiet the panic hook while we catch panics on purpose.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failure = None;
    for input in &inputs {
        match catch_unwind(AssertUnwindSafe(|| check(input))) {
            Ok(Ok(())) => {
                if serde_json::from_slice::<serde_json::Value>(input).is_ok() {
                    accepted += 1;
                }
            }
            Ok(Err(why)) => {
                failure = Some(format!("{why}\ninput: {}", show(input)));
                break;
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failure = Some(format!("PANIC {msg}\ninput: {}", show(input)));
                break;
            }
        }
    }
    std::panic::set_hook(hook);
    if let Some(f) = failure {
        panic!("fuzz {kind} (RHD_FUZZ_SEED={}): {f}", mutate::seed());
    }
    (inputs.len(), accepted)
}

#[test]
fn fuzz_netconf_parse() {
    let (n, json_ok) = fuzz("netconf", mutate::iters(30_000), check_netconf);
    eprintln!(
        "fuzz netconf: {n} inputs, {json_ok} of them well-formed JSON; no panic, no bad code"
    );
    assert!(
        json_ok > n / 4,
        "mutants rarely reach validation ({json_ok}/{n})"
    );
}

#[test]
fn fuzz_cni_result() {
    let (n, json_ok) = fuzz("result", mutate::iters(30_000), check_result);
    eprintln!("fuzz result: {n} inputs, {json_ok} of them well-formed JSON; no panic");
    assert!(
        json_ok > n / 4,
        "mutants rarely reach parsing ({json_ok}/{n})"
    );
}

#[test]
fn fuzz_checks_can_fail() {
    // The oracle itself: a config the invariants reject must be caught.
    assert!(check_result_prints(&CniResult::default()).is_ok());
    assert!(check_netconf(br#"{"cniVersion":"1.0.0","name":"n","mtu":9000}"#).is_ok());
    assert!(check_netconf(b"{").is_ok(), "decode errors are fine");
    let e = check_netconf(
        br#"{"cniVersion":"1.0.0","name":"n","device":"a","deviceID":"0000:00:01.0"}"#,
    );
    assert!(e.is_ok(), "101 is an allowed code: {e:?}");
}
