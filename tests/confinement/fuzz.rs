//! Hostile input through the binary, as a runtime execs it: a sample of the fuzz corpus's
//! mutants (src/fuzz/mutate.rs) as ADD and CHECK configs, plus oversized and pathological
//! inputs. Every answer must be exactly one JSON error object with a message, never 999 (a
//! panic), and nothing may be created. The in-process fuzzer (src/fuzz/) runs far more.
//! Needs root only for the rig's temp dirs.

use test_support as common;

use common::*;
use rdma_host_device::mutate;
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
        rig.assert_detached(&nic, Some(&pod), &out);
    }
}

// ---------------------------------------------------------------- hostile paths

/// Every path the plugin (and what it execs) wrote, created, renamed, removed or chmod-ed, as
/// strace saw it: successful calls only.
fn written_paths(trace: &str) -> Vec<String> {
    let writes = [
        "mkdir", "rename", "unlink", "rmdir", "symlink", "link", "chmod", "truncate", "creat",
    ];
    let mut out = Vec::new();
    for line in trace.lines() {
        let Some(call) = line
            .split_whitespace()
            .find(|w| w.contains('('))
            .and_then(|w| w.split('(').next())
        else {
            continue;
        };
        let result_ok = line
            .rsplit_once(" = ")
            .is_some_and(|(_, r)| !r.trim_start().starts_with('-'));
        let is_open = call == "openat" || call == "open";
        let opens_for_write = is_open
            && ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"]
                .iter()
                .any(|f| line.contains(f));
        if !result_ok || !(opens_for_write || writes.iter().any(|w| call.starts_with(w))) {
            continue;
        }
        // Every quoted string argument of the call is a path.
        let mut rest = line;
        while let Some(a) = rest.find('"') {
            let Some(b) = rest[a + 1..].find('"') else {
                break;
            };
            out.push(rest[a + 1..a + 1 + b].to_owned());
            rest = &rest[a + 1 + b + 1..];
        }
    }
    out
}

/// Run one plugin call under strace, within 5 s.
fn traced(
    rig: &Rig,
    cmd: &str,
    conf: &serde_json::Value,
    pod: &Netns,
    cid: &str,
) -> (RunOut, Vec<String>) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let trace = rig.dir.path().join(format!("strace-{cid}-{cmd}"));
    let mut child = Command::new("strace")
        .args(["-f", "-qq", "-s", "4096", "-o"])
        .arg(&trace)
        .arg(plugin())
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", "net1")
        .env("CNI_PATH", rig.cni_path("1.0.0"))
        .env(NODE_CONFIG_ENV, rig.node_config())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace");
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(conf).unwrap());
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > std::time::Duration::from_secs(5) {
            let _ = child.kill();
            panic!("{cmd} with {conf} did not end within 5 s: the plugin blocked");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    let _ = std::fs::remove_file(&trace);
    let run = RunOut {
        what: format!("{cmd} {cid} conf {conf}"),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace: Vec::new(),
    };
    (run, written_paths(&text))
}

#[test]
fn hostile_paths_never_write_outside_the_nodes_directories_nor_block() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let log_dir = rig.log_dir();
    let trap = rig.dir.path().join("trap");
    std::fs::create_dir_all(&log_dir).unwrap();
    std::fs::create_dir_all(&trap).unwrap();
    std::fs::write(trap.join("victim"), "precious").unwrap();
    // What a hostile node neighbour (or an earlier mistake) left in the log directory.
    std::os::unix::fs::symlink(trap.join("victim"), log_dir.join("link.log")).unwrap();
    std::os::unix::fs::symlink(&trap, log_dir.join("dirlink")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", log_dir.join("passwd.log")).unwrap();
    assert!(
        run("mkfifo", &[log_dir.join("fifo.log").to_str().unwrap()])
            .status
            .success()
    );
    std::fs::create_dir_all(log_dir.join("adir.log")).unwrap();
    std::fs::write(log_dir.join("foreign.log"), "not ours").unwrap();
    let victim = trap.join("victim").display().to_string();
    let long = "a".repeat(5000);
    let values = [
        "link.log",
        "fifo.log",
        "adir.log",
        "foreign.log",
        "passwd.log",
        "dirlink/x.log",
        "../trap/victim",
        "..",
        ".",
        "",
        "/etc/passwd",
        "/etc",
        "/proc/self/mem",
        "/proc/sysrq-trigger",
        "/dev/sda",
        "x\u{0}y",
        &victim,
        &long,
        "ok.log",
        "/",
        "log\n",
        "ü.log",
    ];
    let allowed = [
        rig.state_dir().display().to_string(),
        log_dir.display().to_string(),
        "/run/rdma-host-device/".to_owned(),
        // the node's ipamPaths, which the plugin makes for IPAM (src/confine/)
        rig.data_dir().display().to_string(),
        "/var/lib/cni/networks".to_owned(),
        "/run/cni".to_owned(),
        "/var/run/cni".to_owned(),
        // the plugin's own namespace handles and private sysfs mounts
        "/proc/thread-self/".to_owned(),
        "/proc/self/".to_owned(),
        "/dev/null".to_owned(),
    ];
    let mut rng = mutate::Rng(mutate::seed());
    let n = mutate::iters(60);
    let mut outcomes = std::collections::BTreeMap::new();
    let mut seen_state_writes = 0;
    for i in 0..n {
        let mut conf = rig.conf("1.0.0", serde_json::json!({"device": nic.name}));
        match rng.below(4) {
            0 | 3 => conf["logFile"] = serde_json::json!(values[rng.below(values.len())]),
            1 => conf["stateDir"] = serde_json::json!(values[rng.below(values.len())]),
            _ => {
                conf["logFile"] = serde_json::json!(values[rng.below(values.len())]);
                conf["stateDir"] = serde_json::json!(values[rng.below(values.len())]);
            }
        }
        let cid = format!("fz{i}");
        for cmd in ["ADD", "DEL"] {
            let (out, wrote) = traced(&rig, cmd, &conf, &pod, &cid);
            let outcome = if out.success() {
                "ok".to_owned()
            } else {
                let code = out.one_error()["code"].as_i64().unwrap_or(0);
                assert_ne!(code, 999, "a panic\n{out}");
                code.to_string()
            };
            *outcomes.entry(format!("{cmd} {outcome}")).or_insert(0) += 1;
            seen_state_writes += wrote.iter().filter(|p| p.starts_with(&allowed[0])).count();
            for p in &wrote {
                assert!(
                    allowed.iter().any(|a| p.starts_with(a.as_str())),
                    "{cmd} wrote {p:?}, outside the node's directories\n{out}"
                );
            }
        }
        nic.assert_home(Some(&pod), &format!("after {conf}"));
    }
    assert_eq!(
        std::fs::read_to_string(trap.join("victim")).unwrap(),
        "precious"
    );
    assert_eq!(
        std::fs::read_to_string(log_dir.join("foreign.log")).unwrap(),
        "not ours"
    );
    assert_eq!(files_under(&trap).len(), 1, "{:?}", files_under(&trap));
    eprintln!("hostile paths: {n} configs x ADD, DEL: {outcomes:?}");
    // The tracer sees the plugin's own writes (so the check above is not vacuous).
    assert!(seen_state_writes > 0, "strace saw no state writes at all");
    assert!(
        outcomes.contains_key("ADD ok"),
        "no hostile value got past parsing"
    );
    rig.assert_state_empty(&"after the hostile paths");
}
