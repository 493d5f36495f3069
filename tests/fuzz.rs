//! Hostile input through the binary, as a runtime execs it: a sample of the fuzz corpus's
//! mutants (src/fuzz/mutate.rs) as ADD and CHECK configs, plus oversized and pathological
//! inputs. Every answer must be exactly one JSON error object with a message, never 999 (a
//! panic), and nothing may be created. The in-process fuzzer (src/fuzz.rs) runs far more.
//! Needs root only for the rig's temp dirs.

mod common;

#[path = "../src/fuzz/mutate.rs"]
#[allow(dead_code)]
mod mutate;

use common::*;
use std::path::Path;

/// ADD/CHECK with a netns that does not exist: a config that survives parsing stops there,
/// before any lock, state or link is touched.
fn answer(cmd: &str, stdin: &[u8], netns: &str, extra: &[(&str, &str)]) -> RunOut {
    let mut env: Vec<(&str, Option<&str>)> = vec![
        ("CNI_COMMAND", Some(cmd)),
        ("CNI_CONTAINERID", Some("fuzz-0")),
        ("CNI_NETNS", Some(netns)),
        ("CNI_IFNAME", Some("net1")),
        ("CNI_PATH", Some("/nonexistent-cni-path")),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, Some(*v))));
    run_plugin(&env, stdin)
}

fn assert_clean_error(out: &RunOut) -> i64 {
    let e = out.one_error();
    let code = e["code"].as_i64().unwrap();
    assert_ne!(code, 999, "a panic\n{out}");
    code
}

#[test]
fn mutated_configs_get_one_clean_error_each() {
    let seeds =
        mutate::corpus(&Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz-corpus/netconf"));
    let mut rng = mutate::Rng(mutate::seed());
    let n = mutate::iters(300).min(2000);
    let mut codes = std::collections::BTreeMap::new();
    let mut sent = 0;
    while sent < n {
        let input = mutate::mutant(&seeds, &mut rng);
        // A mutant naming a log file would make the plugin write where it says.
        if input.windows(7).any(|w| w == b"logFile") {
            continue;
        }
        for cmd in ["ADD", "CHECK"] {
            let out = answer(cmd, &input, "/nonexistent/netns", &[]);
            *codes.entry(assert_clean_error(&out)).or_insert(0) += 1;
        }
        sent += 1;
    }
    eprintln!("fuzz binary: {sent} mutated configs x ADD, CHECK: codes {codes:?}");
    assert!(codes.len() > 3, "mutants reach few checks: {codes:?}");
}

#[test]
fn oversized_and_pathological_inputs() {
    let good = br#"{"cniVersion":"1.0.0","name":"n","type":"rdma-host-device","device":"eth9"}"#;
    // 2 MiB of config: bounded read, code 7.
    let mut big = br#"{"cniVersion":"1.0.0","name":"n","x":""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 2 << 20));
    big.extend(br#""}"#);
    assert_eq!(
        assert_clean_error(&answer("ADD", &big, "/nonexistent", &[])),
        7
    );
    // 100k nested arrays: a decode error, not a stack overflow.
    let deep = [vec![b'['; 100_000], vec![b']'; 100_000]].concat();
    assert_eq!(
        assert_clean_error(&answer("ADD", &deep, "/nonexistent", &[])),
        6
    );
    let deep_in = format!(
        r#"{{"cniVersion":"1.0.0","name":"n","device":"e","prevResult":{}1{}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let code = assert_clean_error(&answer("ADD", deep_in.as_bytes(), "/nonexistent", &[]));
    assert!(code == 6 || code == 7, "deep prevResult: {code}");
    // Oversized environment.
    let long = "a".repeat(5000);
    assert_eq!(
        assert_clean_error(&answer("ADD", good, "/nonexistent", &[("CNI_ARGS", &long)])),
        4
    );
    // Netns paths that are not network namespaces.
    for bad in [
        "/proc/self/ns/uts",
        "/dev/null",
        "/proc/self/ns",
        "/etc/hostname",
    ] {
        let code = assert_clean_error(&answer("ADD", good, bad, &[]));
        assert_eq!(code, 4, "CNI_NETNS={bad}");
    }
    // Invalid UTF-8 and NUL bytes in config.
    let code = assert_clean_error(&answer(
        "ADD",
        b"{\"cniVersion\":\"1.0.0\xff\",\"name\":\"n\0\"}",
        "/nonexistent",
        &[],
    ));
    assert_eq!(code, 6);
}

/// A bug anywhere turns into error 999 in valid JSON, in the config's version: the panic hook.
#[test]
fn panic_prints_valid_error_json() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    for version in ["0.3.1", "1.1.0"] {
        let conf = rig.conf(version, serde_json::json!({"device": nic.name}));
        let out = rig.call(
            "ADD",
            &conf,
            &pod.path(),
            &rig.cid(0),
            "net1",
            &[("RHD_FAULT", "add:locked:panic")],
        );
        let e = out.one_error();
        assert_eq!(e["code"], 999, "{out}");
        assert_eq!(e["cniVersion"], version, "{out}");
        assert!(e["msg"].as_str().unwrap().contains("bug"), "{out}");
        assert_eq!(out.stdout.lines().count(), 1, "one JSON object only\n{out}");
        nic.assert_home(Some(&pod), &out);
        rig.assert_state_empty(&out);
    }
}
