//! The kernel, not our reading of a tenant's `ipam` object, bounds what an IPAM plugin does
//! (src/confine/). Each test runs an IPAM plugin that ignores its config and tries to get
//! out (write and read outside the node's `ipamPaths`/`ipamReadPaths`, the stateDir, a
//! relative path, a child that outlives it, a read that never ends), or Debian's host-local
//! given a config built to escape, and checks what a node operator would: nothing appeared
//! where it should not, nothing of it is still running, ADD answered by its deadline with
//! the NIC home, and the attachment's lock is free for DEL.

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use test_support as common;

const IF: &str = "net1";

fn code(out: &RunOut) -> u64 {
    out.one_error()["code"].as_u64().unwrap_or(0)
}

fn msg(out: &RunOut) -> String {
    out.one_error()["msg"].as_str().unwrap_or("").to_owned()
}

/// An IPAM plugin (a shell script in the rig's CNI_PATH) that runs `body` first, then answers
/// ADD with one address and VERSION with every version.
fn escaping_ipam(rig: &Rig, name: &str, body: &str) -> Value {
    use std::os::unix::fs::PermissionsExt;
    let o = rig.octet();
    let p = rig.bin_dir().join(name);
    let script = format!(
        "#!/bin/sh\n\
         cat >/dev/null\n\
         {body}\n\
         case \"$CNI_COMMAND\" in\n\
         ADD) echo '{{\"cniVersion\":\"1.0.0\",\"ips\":[{{\"address\":\"10.77.{o}.9/24\"}}]}}';;\n\
         VERSION) echo '{{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\"]}}';;\n\
         esac\n"
    );
    fs::write(&p, script).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    rig.allow_ipam(name);
    json!({ "type": name })
}

/// Processes whose command line starts with `prefix` (NUL-separated arguments).
fn processes_like(prefix: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).starts_with(prefix))
        })
        .collect()
}

fn kill_like(prefix: &str) {
    for p in processes_like(prefix) {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    }
}

#[test]
fn an_ipam_plugin_that_ignores_its_config_writes_and_reads_nothing_outside() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let outside = TempDir::new("confine-outside");
    let secret = outside.path().join("secret");
    fs::write(&secret, "rhd-confine-secret\n").unwrap();
    let data = rig.data_dir();
    fs::create_dir_all(&data).unwrap();
    let rel = format!("rhd-confine-rel-{}", std::process::id());
    let ipam = escaping_ipam(
        &rig,
        "rhd-escaping-ipam",
        &format!(
            "echo x > {out}/written-outside\n\
             mkdir -p {rel}\n\
             echo x > {state}/forged-record\n\
             cat {secret} > {data}/copied-secret\n\
             echo x > {data}/ran",
            out = outside.path().display(),
            state = rig.state_dir().display(),
            secret = secret.display(),
            data = data.display(),
        ),
    );
    let conf = json!({
        "cniVersion": "1.0.0", "name": rig.net_name(), "type": "rdma-host-device",
        "device": nic.name, "ipam": ipam,
    });
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    add.ok();
    assert!(data.join("ran").exists(), "the plugin ran\n{add}");
    assert!(
        !outside.path().join("written-outside").exists(),
        "IPAM wrote outside ipamPaths\n{add}"
    );
    assert!(
        !rig.state_dir().join("forged-record").exists(),
        "IPAM wrote into the stateDir\n{add}"
    );
    assert!(
        !Path::new("/").join(&rel).exists()
            && !Path::new(rdma_host_device::confine::EMPTY_DIR)
                .join(&rel)
                .exists(),
        "a relative path landed somewhere\n{add}"
    );
    let copied = fs::read_to_string(data.join("copied-secret")).unwrap_or_default();
    assert!(
        !copied.contains("rhd-confine-secret"),
        "IPAM read a file outside ipamReadPaths\n{add}"
    );
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// An IPAM plugin that starts a child in a session of its own and then blocks: ADD answers
/// 105 by the node's deadline, rolls back (the NIC is home), leaves no process, and DEL is
/// not kept waiting for the attachment's lock.
#[test]
fn an_ipam_plugin_that_never_answers_is_killed_at_the_deadline_with_what_it_started() {
    let rig = Rig::new();
    rig.set_node(json!({"ipamTimeoutSeconds": 2}));
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let secs = 200_000 + std::process::id() % 100_000;
    let marker = format!("sleep\0{secs}");
    let ipam = escaping_ipam(
        &rig,
        "rhd-blocking-ipam",
        &format!("[ \"$CNI_COMMAND\" = ADD ] && {{ setsid sleep {secs} & sleep {secs}; }}"),
    );
    let conf = json!({
        "cniVersion": "1.0.0", "name": rig.net_name(), "type": "rdma-host-device",
        "device": nic.name, "ipam": ipam,
    });
    let start = Instant::now();
    let add = call_with_watchdog(&rig, "ADD", &conf, &pod, Duration::from_secs(30));
    let took = start.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let left = processes_like(&marker);
    kill_like(&marker);
    assert_eq!(code(&add), 105, "{add}");
    assert!(
        msg(&add).contains("ipamTimeoutSeconds") && msg(&add).contains("rhd-blocking-ipam"),
        "says which plugin and which setting: {add}"
    );
    // One budget for the whole call: the plugin's ADD and the rollback's DEL share it.
    assert!(took < Duration::from_secs(10), "ADD took {took:?}\n{add}");
    assert!(left.is_empty(), "IPAM processes outlived ADD: {left:?}");
    nic.assert_home(Some(&pod), &add);
    // The attachment's lock is free: DEL releases what the rollback had no time left for.
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// The runtime gives up on ADD and kills the plugin: the IPAM plugin it was waiting for, and
/// what that started, die with it (not one orphan per retry).
#[test]
fn killing_the_plugin_kills_its_ipam_plugin_and_everything_that_started() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let secs = 300_000 + std::process::id() % 100_000;
    let marker = format!("sleep\0{secs}");
    let ipam = escaping_ipam(
        &rig,
        "rhd-orphaning-ipam",
        &format!("[ \"$CNI_COMMAND\" = ADD ] && {{ setsid sleep {secs} & sleep {secs}; }}"),
    );
    let conf = json!({
        "cniVersion": "1.0.0", "name": rig.net_name(), "type": "rdma-host-device",
        "device": nic.name, "ipam": ipam,
    });
    let out = call_with_watchdog(&rig, "ADD", &conf, &pod, Duration::from_secs(2));
    assert!(out.killed(), "ADD answered before it was killed: {out}");
    std::thread::sleep(Duration::from_millis(500));
    let left = processes_like(&marker);
    kill_like(&marker);
    assert!(
        left.is_empty(),
        "IPAM processes outlived the plugin: {left:?}"
    );
    // What ADD left is DEL's to undo, as after any killed ADD.
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// Debian's host-local, given configs built to escape, run as the plugin runs it: refused by
/// the kernel where the string checks would have been the only guard (they are bypassed
/// here by calling the confinement directly), and confined to its dataDir where it works.
#[test]
fn debian_host_local_given_configs_built_to_escape_is_refused_by_the_kernel() {
    require_root();
    let host_local = Path::new(SYSTEM_CNI_DIR).join("host-local");
    assert!(host_local.exists(), "Debian's host-local is missing");
    let allowed = TempDir::new("confine-hl-allowed");
    let outside = TempDir::new("confine-hl-outside");
    let secret = outside.path().join("resolv.conf");
    fs::write(
        &secret,
        "nameserver 10.66.66.66\nsearch rhd-secret.example\n",
    )
    .unwrap();
    let write = [allowed.path().to_path_buf()];
    let read: [std::path::PathBuf; 0] = [];
    let policy = rdma_host_device::confine::Policy {
        read: &read,
        write: &write,
        sockets: &[],
        required: true,
        deadline: Duration::from_secs(20),
        max_output: 1 << 20,
    };
    let env = |cmd: &'static str| {
        [
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "confine-hl"),
            ("CNI_IFNAME", "net1"),
            ("CNI_NETNS", "/proc/self/ns/net"),
            ("CNI_PATH", SYSTEM_CNI_DIR),
        ]
    };
    let rel = format!("rhd-hl-rel-{}", std::process::id());
    let run = |ipam: Value| {
        let conf = json!({"cniVersion": "1.0.0", "name": "confine-hl", "type": "x", "ipam": ipam});
        rdma_host_device::confine::run(
            &host_local,
            &env("ADD"),
            &serde_json::to_vec(&conf).unwrap(),
            &policy,
        )
        .unwrap()
    };
    let range = json!([[{"subnet": "10.79.1.0/24"}]]);
    // A relative dataDir: resolved against the empty working directory, where nothing may be
    // written.
    let out = run(json!({"type": "host-local", "ranges": range, "dataDir": rel}));
    assert_ne!(out.code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!Path::new("/").join(&rel).exists());
    // An absolute dataDir outside.
    let out =
        run(json!({"type": "host-local", "ranges": range, "dataDir": outside.path().join("d")}));
    assert_ne!(out.code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!outside.path().join("d").exists());
    // A resolvConf outside ipamReadPaths: its content never reaches the result.
    let out = run(json!({"type": "host-local", "ranges": range,
        "dataDir": allowed.path(), "resolvConf": secret}));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !said.contains("rhd-secret") && !said.contains("10.66.66.66"),
        "{said}"
    );
    // Where the node allows it, it works.
    let out = run(json!({"type": "host-local", "ranges": range, "dataDir": allowed.path()}));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.code, 0, "{said}");
    assert!(said.contains("10.79.1."), "{said}");
    assert!(allowed.path().join("confine-hl").is_dir());
}

/// The plugin run as the runtime would, killed with SIGKILL after `limit` if it has not
/// answered by then (as a runtime that gives up does).
fn call_with_watchdog(rig: &Rig, cmd: &str, conf: &Value, pod: &Netns, limit: Duration) -> RunOut {
    let mut c = Command::new(plugin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CNI_") {
            c.env_remove(k);
        }
    }
    c.env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", rig.cid(0))
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", IF)
        .env("CNI_PATH", rig.cni_path("1.0.0"))
        .env(NODE_CONFIG_ENV, rig.node_config())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    {
        use std::io::Write;
        let mut w = child.stdin.take().unwrap();
        w.write_all(&serde_json::to_vec(conf).unwrap()).unwrap();
    }
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    RunOut {
        what: format!("{cmd} with a watchdog of {limit:?}\n  conf {conf}"),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace: Vec::new(),
    }
}
