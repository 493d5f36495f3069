//! `rdma-host-device-agent nri`, the NRI plugin that puts the node's memlock policy in the OCI
//! spec of containers given one of the node's RDMA devices, driven by a runtime over NRI's real
//! wire: tests/nri/runtime.py, a containerd stand-in written apart from the plugin (NRI's socket
//! multiplexer, ttrpc frames, protobuf generated at test time from our own tests/nri/nri.proto
//! and ttrpc.proto). It checks the registration as NRI does, configures and synchronizes the
//! plugin, sends CreateContainer, and, like containerd, applies the adjustment to an OCI spec,
//! runs the container with Debian's runc and starts a second process in it with `runc exec` the
//! way containerd builds `kubectl exec`'s processes.
//!
//! The node's RDMA device is a char device the test makes with mknod (this kernel has no RDMA):
//! the plugin reads it under `--dev`. Needs root (mknod, runc) and the venv with grpcio-tools
//! that scripts/setup.sh makes.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The runtime stand-in (tests/nri/runtime.py).
struct Runtime(StandIn);

impl Runtime {
    fn start(socket: &Path) -> Runtime {
        Self::start_as(socket, &[])
    }

    /// A runtime stating another version (`RHD_NRI_RUNTIME_VERSION`, `RHD_NRI_VERSION`).
    fn start_as(socket: &Path, env: &[(&str, &str)]) -> Runtime {
        let stubs = Path::new(TARGET_TMP).join("nri-stubs");
        let mut env: Vec<(&str, &std::ffi::OsStr)> = env
            .iter()
            .map(|(k, v)| (*k, std::ffi::OsStr::new(*v)))
            .collect();
        env.push(("RHD_NRI_STUBS", stubs.as_os_str()));
        Runtime(StandIn::start(
            "nri/runtime.py",
            &[socket.as_os_str()],
            &env,
            "listening",
        ))
    }

    fn ask(&mut self, cmd: Value) -> Value {
        self.0.ask(cmd)
    }

    /// Wait until `n` plugin connections have registered (and been configured and
    /// synchronized) since the runtime started.
    fn registered(&mut self, n: usize) -> Value {
        let r = self.ask(json!({"cmd": "registered", "count": n, "timeout": 20}));
        assert!(r.get("error").is_none(), "{r}");
        r
    }

    fn create(&mut self, container: Value) -> Value {
        let r = self.ask(json!({"cmd": "create", "pod": pod(), "container": container}));
        assert!(r.get("error").is_none(), "{r}");
        r["adjust"].clone()
    }

    fn connections(&mut self) -> Value {
        self.ask(json!({"cmd": "connections"}))
    }
}

fn pod() -> Value {
    json!({"id": "sandbox-1", "name": "trainer", "uid": "4a1b-uid", "namespace": "team-a"})
}

/// A fake node: /dev with one uverbs char device (the test's own major:minor), the node
/// configuration with the memlock policy, the NRI socket, the plugin's log.
struct Node {
    dir: TempDir,
    /// The uverbs char device's number.
    major: i64,
    minor: i64,
}

impl Node {
    fn new(label: &str, memlock: &str) -> Node {
        require_root();
        let dir = TempDir::new(label);
        let ib = dir.path().join("dev/infiniband");
        fs::create_dir_all(&ib).unwrap();
        let (major, minor) = (231, 192);
        for (name, major, minor) in [("uverbs0", major, minor), ("rdma_cm", 10, 58)] {
            let p = std::ffi::CString::new(ib.join(name).to_str().unwrap()).unwrap();
            // SAFETY: mknod of a char device node in our own temp dir.
            let rc = unsafe {
                libc::mknod(
                    p.as_ptr(),
                    libc::S_IFCHR | 0o600,
                    libc::makedev(major, minor),
                )
            };
            assert_eq!(rc, 0, "mknod {name}: {}", std::io::Error::last_os_error());
        }
        fs::write(
            dir.path().join("node.json"),
            json!({ "memlock": memlock }).to_string(),
        )
        .unwrap();
        Node {
            dir,
            major: i64::from(major),
            minor: i64::from(minor),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("nri.sock")
    }

    /// A container given the node's RDMA device (as the device plugin or CDI puts it), named
    /// by the container path `path`.
    fn with_device(&self, id: &str, path: &str) -> Value {
        json!({"id": id, "podSandboxId": "sandbox-1", "name": id, "args": ["sleep", "1"],
               "linux": {"devices": [
                   {"path": "/dev/infiniband/rdma_cm", "type": "c", "major": 10, "minor": 58},
                   {"path": path, "type": "c", "major": self.major, "minor": self.minor}]}})
    }

    /// The plugin under test, its log in the node's directory.
    fn agent(&self, n: usize) -> Agent {
        let log = self.dir.path().join(format!("nri-{n}.log"));
        let child = Command::new(AGENT)
            .arg("nri")
            .arg("--socket")
            .arg(self.socket())
            .arg("--dev")
            .arg(self.dir.path().join("dev"))
            .env(
                "RDMA_HOST_DEVICE_NODE_CONFIG",
                self.dir.path().join("node.json"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the agent");
        Agent { child, log }
    }
}

struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The memlock rlimit of an adjustment, as (hard, soft); `None` if it sets none.
fn memlock_of(adjust: &Value) -> Option<(String, String)> {
    adjust["rlimits"].as_array()?.iter().find_map(|l| {
        (l["type"] == "RLIMIT_MEMLOCK").then(|| {
            (
                l["hard"].as_str().unwrap_or_default().to_owned(),
                l["soft"].as_str().unwrap_or_default().to_owned(),
            )
        })
    })
}

#[test]
fn the_plugin_registers_as_nri_requires_and_subscribes_to_create_container_only() {
    let node = Node::new("nri-reg", "unlimited");
    let mut rt = Runtime::start(&node.socket());
    let agent = node.agent(0);
    let r = rt.registered(1);
    assert_eq!(
        r["plugins"],
        json!([{"name": "rdma-host-device", "idx": "90", "events": 8}]),
        "name, two-digit index, and the CreateContainer bit (1 << 3) alone: {r}\n{}",
        agent.log()
    );
    // The runtime's Synchronize carried a running container with the device: it is only
    // acknowledged (no update asked for), and the plugin says what it serves.
    assert!(
        agent
            .log()
            .contains("configured by \"containerd\" \"v2.1.0-standin\""),
        "{}",
        agent.log()
    );
}

#[test]
fn a_runtime_whose_nri_drops_rlimits_is_named_in_a_warning() {
    // containerd 1.7.0-1.7.6 has NRI v0.3.0, which has no rlimit adjustment: the plugin's
    // answer would be dropped without a word, so the plugin says so when it is configured.
    let node = Node::new("nri-old", "unlimited");
    let mut rt = Runtime::start_as(
        &node.socket(),
        &[
            ("RHD_NRI_RUNTIME_VERSION", "v1.7.6"),
            ("RHD_NRI_VERSION", ""),
        ],
    );
    let agent = node.agent(0);
    rt.registered(1);
    let log = agent.log();
    assert!(
        log.contains("\"containerd\" \"v1.7.6\" has NRI from before rlimit adjustments"),
        "{log}"
    );
    // And a current one gets no such warning.
    let node = Node::new("nri-new", "unlimited");
    let mut rt = Runtime::start(&node.socket());
    let agent = node.agent(0);
    rt.registered(1);
    assert!(
        !agent.log().contains("before rlimit adjustments"),
        "{}",
        agent.log()
    );
}

#[test]
fn a_container_given_our_device_gets_the_memlock_rlimit_and_no_other_container_does() {
    let node = Node::new("nri-create", "1073741824");
    let mut rt = Runtime::start(&node.socket());
    let agent = node.agent(0);
    rt.registered(1);
    // The device plugin's path, and a DRA driver's or CDI spec's own: the number decides.
    for path in ["/dev/infiniband/uverbs0", "/dev/rdma/rail0"] {
        let adjust = rt.create(node.with_device("with-device", path));
        assert_eq!(
            memlock_of(&adjust),
            Some(("1073741824".into(), "1073741824".into())),
            "{path}: {adjust}"
        );
    }
    // What a pod's author can write: the device plugin's env var names, annotations, a path
    // that looks like ours but is another device, or only rdma_cm.
    let forged = [
        json!({"id": "env", "name": "env",
               "env": ["RDMA_HOST_DEVICE_RAIL_IDS=0000:3b:00.1", "RDMA_HOST_DEVICE_RAIL_RDMA=uverbs0"],
               "annotations": {"cdi.k8s.io/rdma": "rdma-host-device.io/rdma=uverbs0"}}),
        json!({"id": "other-number", "name": "other-number", "linux": {"devices": [
            {"path": "/dev/infiniband/uverbs0", "type": "c", "major": node.major, "minor": node.minor + 1}]}}),
        json!({"id": "block", "name": "block", "linux": {"devices": [
            {"path": "/dev/infiniband/uverbs0", "type": "b", "major": node.major, "minor": node.minor}]}}),
        json!({"id": "cm-only", "name": "cm-only", "linux": {"devices": [
            {"path": "/dev/infiniband/rdma_cm", "type": "c", "major": 10, "minor": 58}]}}),
    ];
    for c in forged {
        let adjust = rt.create(c.clone());
        assert_eq!(memlock_of(&adjust), None, "{c}: {adjust}");
    }
    // A spec that already has the policy or more (a base_runtime_spec) is left alone (no second
    // owner of the rlimit for the runtime to refuse); a smaller one is raised.
    for (have, raised) in [(2u64 << 30, false), (8 << 20, true)] {
        let mut c = node.with_device("based", "/dev/infiniband/uverbs0");
        c["rlimits"] = json!([{"type": "RLIMIT_MEMLOCK", "hard": have, "soft": have}]);
        let adjust = rt.create(c);
        assert_eq!(memlock_of(&adjust).is_some(), raised, "{have}: {adjust}");
    }
    let log = agent.log();
    assert!(
        log.contains("container \"with-device\" of pod \"team-a\"/\"trainer\"")
            && log.contains("RLIMIT_MEMLOCK 1073741824 (it was given uverbs0"),
        "{log}"
    );
    assert!(!log.contains("\"env\""), "{log}");
}

#[test]
fn a_restarted_plugin_registers_again_and_serves() {
    let node = Node::new("nri-restart", "unlimited");
    let mut rt = Runtime::start(&node.socket());
    let first = node.agent(0);
    rt.registered(1);
    drop(first);
    let _second = node.agent(1);
    let r = rt.registered(2);
    assert_eq!(r["plugins"].as_array().map(Vec::len), Some(1), "{r}");
    assert_eq!(rt.connections()["accepted"], 2);
    let adjust = rt.create(node.with_device("after-restart", "/dev/infiniband/uverbs0"));
    assert_eq!(
        memlock_of(&adjust),
        Some((u64::MAX.to_string(), u64::MAX.to_string())),
        "unlimited is RLIM_INFINITY: {adjust}"
    );
}

#[test]
fn a_runtime_that_goes_away_is_waited_for_without_spinning_and_served_when_it_returns() {
    let node = Node::new("nri-away", "unlimited");
    let mut rt = Runtime::start(&node.socket());
    let mut agent = node.agent(0);
    rt.registered(1);
    // The runtime stops: its socket is gone.
    rt.ask(json!({"cmd": "stop"}));
    std::thread::sleep(Duration::from_secs(2));
    assert!(agent.alive(), "the plugin exited: {}", agent.log());
    // It restarts with NRI not ready yet: every connection is closed at once. The plugin
    // tries again with a growing pause, a handful of times, not thousands.
    rt.ask(json!({"cmd": "refuse"}));
    std::thread::sleep(Duration::from_secs(4));
    let refused = rt.connections()["refused"].as_u64().unwrap();
    assert!(
        (1..=15).contains(&refused),
        "{refused} connections in 4 s: {}",
        agent.log()
    );
    assert!(agent.alive(), "the plugin exited: {}", agent.log());
    // NRI is up: the plugin registers again and serves.
    rt.ask(json!({"cmd": "start"}));
    let r = rt.registered(2);
    assert_eq!(r["plugins"][0]["name"], "rdma-host-device", "{r}");
    let adjust = rt.create(node.with_device("after-return", "/dev/infiniband/uverbs0"));
    assert!(memlock_of(&adjust).is_some(), "{adjust}");
    let log = agent.log();
    assert!(
        log.contains("waiting for the runtime's NRI socket"),
        "the wait is said: {log}"
    );
    assert_eq!(
        log.matches("waiting for the runtime's NRI socket").count(),
        1,
        "said once, not per try: {log}"
    );
}

/// RLIMIT_MEMLOCK of this process (soft, hard), bytes.
fn own_memlock() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut l) }, 0);
    (l.rlim_cur, l.rlim_max)
}

fn ulimit_l(bytes: u64) -> String {
    if bytes == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        (bytes / 1024).to_string()
    }
}

#[test]
fn every_process_of_a_container_with_our_device_has_the_limit_exec_included_and_others_keep_the_default()
 {
    // Below this process's hard limit, so runc can set it without CAP_SYS_RESOURCE (which a
    // node's runtime has and this build machine's root may not); different from the default.
    let (soft, hard) = own_memlock();
    let policy = (hard.min(8 << 20) / 2) & !4095;
    assert!(policy >= 4096 && policy != soft, "soft {soft} hard {hard}");
    let node = Node::new("nri-runc", &policy.to_string());
    let rootfs = node.dir.path().join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).unwrap();
    for d in ["proc", "dev", "sys"] {
        fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    fs::copy("/bin/busybox", rootfs.join("bin/busybox"))
        .expect("busybox-static (scripts/setup.sh)");
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
    let work = node.dir.path().join("work");
    fs::create_dir_all(&work).unwrap();
    let mut rt = Runtime::start(&node.socket());
    let agent = node.agent(0);
    rt.registered(1);
    let tag = format!(
        "{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    );
    let run = |rt: &mut Runtime, container: Value| {
        let r = rt.ask(json!({"cmd": "run", "pod": pod(), "container": container,
                              "rootfs": rootfs, "work": work}));
        assert!(r.get("error").is_none(), "{r}\n{}", agent.log());
        r
    };
    let with = run(
        &mut rt,
        node.with_device(&format!("rdma-{tag}"), "/dev/infiniband/uverbs0"),
    );
    assert_eq!(
        (with["first"].as_str(), with["exec"].as_str()),
        (
            Some(ulimit_l(policy).as_str()),
            Some(ulimit_l(policy).as_str())
        ),
        "ulimit -l of the first and of an exec'd process: {with}"
    );
    let without = run(
        &mut rt,
        json!({"id": format!("plain-{tag}"), "name": "plain", "env": ["RDMA_HOST_DEVICE_RAIL_IDS=x"]}),
    );
    assert_eq!(
        (without["first"].as_str(), without["exec"].as_str()),
        (Some(ulimit_l(soft).as_str()), Some(ulimit_l(soft).as_str())),
        "the runtime's default stays: {without}"
    );
}
