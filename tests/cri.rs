//! The plugin under a real containerd CRI, driven as kubelet drives it.
//!
//! Each test starts Debian's containerd (1.6, its built-in CRI plugin) with a private config
//! (own root, state, sockets, runc root, CNI conf and bin dirs, cgroup parent), imports a
//! locally built sandbox image (tests/cri/pause.c packed as an OCI layout: no registry is
//! reachable), and calls the CRI v1 gRPC API with tests/cri/cri.py (Python grpcio, stubs
//! generated from tests/cri/api.proto at test time). containerd then calls the plugin exactly
//! as on a Kubernetes node: `eth0`, CNI_ARGS with the pod, `loopback` first, DEL on Stop with
//! the netns and a second DEL without one on Remove, DEL of the whole list after a failed ADD.
//! The plugin inherits containerd's environment, so the test node configuration reaches it
//! through RDMA_HOST_DEVICE_NODE_CONFIG.
//!
//! The "NIC" is a veth end, as in the other integration tests. Needs root, containerd, runc,
//! a C compiler, and the Python venv with grpcio that scripts/setup.sh makes. The tests run
//! one at a time (a mutex): each starts its own containerd, and their timings are printed.
//! Everything a test starts or mounts is cleaned up on drop, also when an assertion fails.

mod common;

use common::*;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const CONTAINERD: &str = "/usr/bin/containerd";
const PAUSE_IMAGE: &str = "localhost/rhd-pause:test";
/// The network name in every test conflist (host-local keeps its leases under it).
const NET: &str = "rdma-cri";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python (scripts/setup.sh: `$RHD_VENV`, default ~/.cache/rhd-venv).
fn python() -> PathBuf {
    let venv = std::env::var_os("RHD_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/rhd-venv")
        });
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} missing: the CRI tests need a venv with grpcio and grpcio-tools (scripts/setup.sh makes it)",
        py.display()
    );
    py
}

/// The sandbox image as an OCI layout tar, built once per test binary: a static `pause`.
fn pause_image() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = Path::new(TARGET_TMP).join(format!("cri-image-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("pause");
        let out = run(
            "cc",
            &[
                "-static",
                "-Os",
                "-s",
                "-o",
                bin.to_str().unwrap(),
                repo().join("tests/cri/pause.c").to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "cc -static tests/cri/pause.c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tar = dir.join("pause.tar");
        let out = Command::new(python())
            .arg(repo().join("tests/cri/cri.py"))
            .args(["-", "image"])
            .arg(&bin)
            .arg(PAUSE_IMAGE)
            .arg(&tar)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cri.py image: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tar
    })
}

/// A pod sandbox as the CRI reports it.
#[derive(Debug)]
struct Pod {
    id: String,
    /// PodSandboxStatus.network.ip: what `kubectl get pod -o wide` shows.
    ip: String,
    /// The sandbox's netns, `cni-<uuid>` under /var/run/netns.
    netns: String,
    state: String,
}

/// One private containerd with the CRI plugin, and everything it made, cleaned up on drop.
struct Containerd<'r> {
    rig: &'r Rig,
    dir: PathBuf,
    sock: PathBuf,
    /// Cgroup parent of this instance's sandboxes (a directory in every hierarchy).
    cgroup: String,
    child: Option<Child>,
    /// Sandbox ids and netns paths seen, for cleanup after a failure.
    seen: RefCell<Vec<(String, String)>>,
    /// (CRI call, ms) as measured by the client.
    timings: RefCell<Vec<(String, f64)>>,
}

impl<'r> Containerd<'r> {
    /// Start containerd with `conflist` as its only network (and our plugin, Debian's
    /// loopback, host-local, tuning and sbr in its CNI bin dir), import the pause image.
    fn start(rig: &'r Rig, conflist: &Value) -> Containerd<'r> {
        let _ = pause_image();
        let dir = rig.dir.path().join("cri");
        for d in ["net.d", "root", "state", "runc"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        for p in ["loopback", "host-local", "tuning", "sbr"] {
            let link = rig.bin_dir().join(p);
            if !link.exists() {
                std::os::unix::fs::symlink(Path::new(SYSTEM_CNI_DIR).join(p), link).unwrap();
            }
        }
        let sock = dir.join("containerd.sock");
        let d = dir.display();
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc cannot write /proc/self/oom_score_adj here (no CAP_SYS_RESOURCE)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{d}/net.d"
    max_conf_num = 1
"#,
            bin = rig.bin_dir().display()
        );
        fs::write(dir.join("config.toml"), config).unwrap();
        fs::write(
            dir.join("net.d/10-rdma.conflist"),
            serde_json::to_vec_pretty(conflist).unwrap(),
        )
        .unwrap();
        let mut c = Containerd {
            rig,
            cgroup: format!("rhd-cri-{}-{}", std::process::id(), rig.n),
            dir,
            sock,
            child: None,
            seen: RefCell::new(Vec::new()),
            timings: RefCell::new(Vec::new()),
        };
        c.spawn();
        let out = run(
            "ctr",
            &[
                "-a",
                c.sock.to_str().unwrap(),
                "-n",
                "k8s.io",
                "images",
                "import",
                pause_image().to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "ctr images import: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            c.context()
        );
        c
    }

    /// Start the containerd process and wait until its CRI says runtime and network ready.
    fn spawn(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .unwrap();
        let child = Command::new(CONTAINERD)
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .env(NODE_CONFIG_ENV, self.rig.node_config())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {CONTAINERD}: {e} (scripts/setup.sh installs containerd)")
            });
        self.child = Some(child);
        let t0 = Instant::now();
        loop {
            if self.sock.exists()
                && let Ok(v) = self.cri(&["status"])
                && v["RuntimeReady"] == json!(true)
                && v["NetworkReady"] == json!(true)
            {
                break;
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(Child::try_wait) {
                panic!("containerd exited ({st}) at start\n{}", self.context());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "containerd's CRI not ready after 20 s\n{}",
                self.context()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL containerd (its shims and the pods live on, as on a node whose runtime
    /// crashed), then start it again on the same state.
    fn kill_and_restart(&mut self) {
        let mut child = self.child.take().expect("containerd running");
        child.kill().unwrap();
        child.wait().unwrap();
        self.spawn();
    }

    /// One CRI call through cri.py: Ok(its JSON) or Err(the gRPC error as JSON).
    fn cri(&self, args: &[&str]) -> Result<Value, Value> {
        let out = self.cri_cmd(args).output().unwrap();
        parse_cri(args, &out)
    }

    fn cri_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(python());
        cmd.arg(repo().join("tests/cri/cri.py"))
            .arg(&self.sock)
            .args(args)
            .env("RHD_CRI_CGROUP_PARENT", format!("/{}", self.cgroup))
            .env(
                "RHD_CRI_STUBS",
                Path::new(TARGET_TMP).join(format!("cri-stubs-{}", std::process::id())),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn time(&self, what: &str, v: &Value) {
        if let Some(ms) = v["ms"].as_f64() {
            self.timings.borrow_mut().push((what.to_owned(), ms));
        }
    }

    /// RunPodSandbox for pod `name`, then its status.
    fn run_pod(&self, name: &str) -> Result<Pod, Value> {
        let v = self.cri(&["run", name])?;
        self.time("RunPodSandbox", &v);
        let id = v["id"].as_str().unwrap().to_owned();
        Ok(self.pod(&id))
    }

    /// PodSandboxStatus (verbose: the netns path comes from the runtime spec).
    fn pod(&self, id: &str) -> Pod {
        let v = self
            .cri(&["pod", id])
            .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}\n{}", self.context()));
        let pod = Pod {
            id: id.to_owned(),
            ip: v["ip"].as_str().unwrap_or("").to_owned(),
            netns: v["netns"].as_str().unwrap_or("").to_owned(),
            state: v["state"].as_str().unwrap_or("").to_owned(),
        };
        let mut seen = self.seen.borrow_mut();
        if !seen.iter().any(|(i, _)| i == id) {
            seen.push((id.to_owned(), pod.netns.clone()));
        }
        pod
    }

    fn stop(&self, id: &str) -> Result<Value, Value> {
        let v = self.cri(&["stop", id])?;
        self.time("StopPodSandbox", &v);
        Ok(v)
    }

    fn remove(&self, id: &str) -> Result<Value, Value> {
        let v = self.cri(&["remove", id])?;
        self.time("RemovePodSandbox", &v);
        Ok(v)
    }

    /// ListPodSandbox: (id, name, state) of every sandbox.
    fn list(&self) -> Vec<(String, String, String)> {
        let v = self
            .cri(&["list"])
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}\n{}", self.context()));
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let s = |k: &str| i[k].as_str().unwrap_or("").to_owned();
                (s("id"), s("name"), s("state"))
            })
            .collect()
    }

    /// Stop then Remove, both of which must succeed, as `kubectl delete pod` needs.
    fn delete_pod(&self, id: &str) {
        self.stop(id)
            .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}\n{}", self.context()));
        self.remove(id)
            .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}\n{}", self.context()));
        assert!(
            !self.list().iter().any(|(i, _, _)| i == id),
            "sandbox {id} still listed after Remove\n{}",
            self.context()
        );
    }

    /// The plugin's log file and containerd's log, for failure messages.
    fn context(&self) -> String {
        let tail = |p: &Path, n: usize| {
            let s = fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        format!(
            "---- plugin log\n{}\n---- containerd log (tail)\n{}\n---- host links\n{}",
            tail(&self.rig.log_dir().join("cri.log"), 40),
            tail(&self.dir.join("containerd.log"), 30),
            links(None)
                .iter()
                .map(|l| format!("{} {} mtu {}", l.name, l.mac, l.mtu))
                .collect::<Vec<_>>()
                .join("\n")
        )
    }

    /// Print the CRI timings (`cargo test -- --nocapture` shows them).
    fn report(&self, case: &str) {
        let t = self.timings.borrow();
        let line: Vec<String> = t.iter().map(|(w, ms)| format!("{w} {ms:.0} ms")).collect();
        eprintln!("cri timings [{case}]: {}", line.join(", "));
    }
}

fn parse_cri(args: &[&str], out: &std::process::Output) -> Result<Value, Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "cri.py {args:?} printed no JSON (exit {}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    match out.status.code() {
        Some(0) => Ok(v),
        Some(3) => Err(v),
        _ => panic!(
            "cri.py {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

impl Drop for Containerd<'_> {
    fn drop(&mut self) {
        // 1. As kubelet would: stop and remove every sandbox left (a test that failed half-way).
        if self.child.is_some() {
            let listed = self.cri(&["list"]).unwrap_or_default();
            for item in listed["items"].as_array().into_iter().flatten() {
                let id = item["id"].as_str().unwrap_or("");
                let _ = self.cri(&["stop", id]);
                let _ = self.cri(&["remove", id]);
            }
        }
        // 2. containerd itself, then any shim it started (found by its own socket address)
        // and any process left in this instance's cgroups (a pause whose shim died).
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let addr = self.sock.to_string_lossy().into_owned();
        for pid in pids_with_arg(&addr)
            .into_iter()
            .chain(pids_in_cgroup(&self.cgroup))
        {
            // SAFETY: kill(2) on a pid this test's containerd started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(100));
        // 3. Mounts under our dir (rootfs, shm), the sandboxes' netns, shim sockets, cgroups,
        // libcni's cached results.
        unmount_under(&self.dir);
        for (id, netns) in self.seen.borrow().iter() {
            if !netns.is_empty() && Path::new(netns).exists() {
                let c = std::ffi::CString::new(netns.as_str()).unwrap();
                // SAFETY: umount2 on a path string we own.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
                let _ = fs::remove_file(netns);
            }
            let _ = fs::remove_file(shim_socket(&addr, id));
            for cached in [format!("{NET}-{id}-eth0"), format!("cni-loopback-{id}-lo")] {
                let _ = fs::remove_file(Path::new("/var/lib/cni/results").join(cached));
            }
        }
        for hierarchy in fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            rmdir_tree(&hierarchy.path().join(&self.cgroup));
        }
    }
}

/// The shim socket containerd 1.6 makes for a task: /run/containerd/s/sha256(address/ns/id).
fn shim_socket(address: &str, id: &str) -> PathBuf {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(format!("{address}/k8s.io/{id}").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let hex = String::from_utf8_lossy(&out.stdout);
    Path::new("/run/containerd/s").join(hex.split_whitespace().next().unwrap_or("none"))
}

/// Processes whose command line has `arg` as one of its words.
fn pids_with_arg(arg: &str) -> Vec<libc::pid_t> {
    let mut pids = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(e.path().join("cmdline"))
            && cmd.split(|b| *b == 0).any(|w| w == arg.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// Processes in cgroup `name` (any hierarchy, any depth).
fn pids_in_cgroup(name: &str) -> Vec<libc::pid_t> {
    fn walk(d: &Path, out: &mut Vec<libc::pid_t>) {
        if let Ok(s) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(
                s.lines()
                    .filter_map(|l| l.trim().parse::<libc::pid_t>().ok()),
            );
        }
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    for h in fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        walk(&h.path().join(name), &mut out);
    }
    out.sort();
    out.dedup();
    out
}

fn rmdir_tree(d: &Path) {
    for e in fs::read_dir(d).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            rmdir_tree(&e.path());
        }
    }
    let _ = fs::remove_dir(d);
}

/// Lazily unmount every mount point under `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = dir.to_string_lossy().into_owned();
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let c = std::ffi::CString::new(p).unwrap();
        // SAFETY: umount2 on a path string we own.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

// ---------------------------------------------------------------- what a user checks

/// The netns name (for `ip -n`) of a sandbox's netns path.
fn ns_name(pod: &Pod) -> &str {
    pod.netns.rsplit('/').next().unwrap()
}

/// Our plugin's entry of a conflist: the veth `nic`, MTU 9000, host-local on this rig's range.
fn our_plugin(rig: &Rig, nic: &Veth) -> Value {
    let mut ipam = rig.host_local_ipam();
    ipam["dataDir"] = json!(rig.data_dir());
    json!({
        "type": "rdma-host-device",
        "device": nic.name,
        "mtu": 9000,
        "ipam": ipam,
        "logFile": "cri.log"
    })
}

fn conflist(plugins: Vec<Value>) -> Value {
    json!({"cniVersion": "1.0.0", "name": NET, "plugins": plugins})
}

/// A veth "NIC" whose wire end is up (so the pod sees a carrier).
fn nic(rig: &Rig, i: u32) -> Veth {
    let v = rig.nic(i);
    ip(&["link", "set", &v.peer, "up"]);
    v
}

/// The pod as kubelet and a user inside it see it: READY, the sandbox IP is the IPAM address,
/// and `eth0` in its netns is our NIC (by MAC) with that address, MTU 9000 and IPAM's route;
/// the NIC is gone from the host and host-local holds exactly that lease for this sandbox.
fn assert_pod_has_nic(c: &Containerd, rig: &Rig, pod: &Pod, nic: &Veth) {
    let ctx = c.context();
    assert_eq!(pod.state, "SANDBOX_READY", "{pod:?}\n{ctx}");
    let o = rig.octet();
    assert!(
        pod.ip.starts_with(&format!("10.77.{o}.")),
        "sandbox IP {:?} is not from the IPAM range 10.77.{o}.0/24\n{ctx}",
        pod.ip
    );
    assert!(
        pod.netns.starts_with("/var/run/netns/cni-"),
        "netns {:?}\n{ctx}",
        pod.netns
    );
    let eth0 = link(Some(ns_name(pod)), "eth0").unwrap_or_else(|| {
        panic!(
            "no eth0 in the sandbox netns:\n{}\n{ctx}",
            dump(Some(ns_name(pod)))
        )
    });
    assert!(
        eth0.mac.eq_ignore_ascii_case(&nic.mac),
        "eth0 in the pod is not the NIC: {eth0:?}\n{ctx}"
    );
    assert_eq!(eth0.mtu, 9000, "{eth0:?}\n{ctx}");
    assert!(eth0.up, "{eth0:?}\n{ctx}");
    assert!(
        eth0.addrs.contains(&format!("{}/24", pod.ip)),
        "eth0 lacks the sandbox IP {}: {:?}\n{ctx}",
        pod.ip,
        eth0.addrs
    );
    // (sbr, when chained, moves the routes into its own table: look in all of them.)
    let out = run(
        "ip",
        &["-n", ns_name(pod), "-j", "route", "show", "table", "all"],
    );
    let r: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(
        r.iter().any(|r| r["dst"] == json!("10.78.0.0/16")
            && r["gateway"] == json!(format!("10.77.{o}.1"))
            && r["dev"] == json!("eth0")),
        "IPAM's route 10.78.0.0/16 via 10.77.{o}.1 missing in the pod: {r:?}\n{ctx}"
    );
    assert!(
        link(None, &nic.name).is_none() && nic.on_host().is_none(),
        "the NIC is still on the host\n{ctx}"
    );
    let leases: Vec<String> = rig
        .allocations(NET)
        .into_iter()
        .map(|(ip, owner)| format!("{ip} {}", owner.lines().next().unwrap_or("")))
        .collect();
    assert_eq!(
        leases,
        vec![format!("{} {}", pod.ip, pod.id)],
        "host-local's leases\n{ctx}"
    );
}

/// After Stop and Remove: the NIC is home with its name, MAC and MTU, the lease is released,
/// the plugin's state is forgotten and the sandbox netns is gone.
fn assert_all_home(c: &Containerd, rig: &Rig, pod: &Pod, nic: &Veth) {
    let ctx = c.context();
    nic.assert_home(None, &ctx);
    assert!(
        rig.allocations(NET).is_empty(),
        "leases left: {:?}\n{ctx}",
        rig.allocations(NET)
    );
    rig.assert_state_empty(&ctx);
    assert!(
        !Path::new(&pod.netns).exists(),
        "{} still exists\n{ctx}",
        pod.netns
    );
}

// ---------------------------------------------------------------- the cases

#[test]
fn run_stop_remove_moves_the_nic_in_and_home() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic)]));

    let pod = c
        .run_pod("web-0")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic);
    assert_eq!(
        rig.state_files()
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .count(),
        1
    );
    // What containerd told the plugin: the Kubernetes pod in CNI_ARGS reached IPAM, which
    // records the container id; the interface is eth0.
    let log = fs::read_to_string(rig.log_dir().join("cri.log")).unwrap_or_default();
    assert!(
        log.contains(&format!("ADD {}", pod.id)) && log.contains("as eth0"),
        "plugin log:\n{log}"
    );

    // Stop: DEL with the netns. The NIC is home at once; the sandbox is NOTREADY.
    c.stop(&pod.id)
        .unwrap_or_else(|e| panic!("StopPodSandbox: {e}\n{}", c.context()));
    nic.assert_home(None, &c.context());
    assert!(rig.allocations(NET).is_empty(), "lease kept after Stop");
    assert_eq!(c.pod(&pod.id).state, "SANDBOX_NOTREADY");
    // Remove: the second DEL, without a netns, changes nothing and succeeds.
    c.remove(&pod.id)
        .unwrap_or_else(|e| panic!("RemovePodSandbox: {e}\n{}", c.context()));
    assert!(c.list().is_empty(), "{:?}", c.list());
    assert_all_home(&c, &rig, &pod, &nic);

    // And again: the NIC is as good as new for the next pod.
    let again = c
        .run_pod("web-1")
        .unwrap_or_else(|e| panic!("second RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &again, &nic);
    c.delete_pod(&again.id);
    assert_all_home(&c, &rig, &again, &nic);
    c.report("run, stop, remove, twice");
}

#[test]
fn two_sandboxes_racing_for_one_nic() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic)]));

    let kids: Vec<Child> = ["racer-a", "racer-b"]
        .iter()
        .map(|n| c.cri_cmd(&["run", n]).spawn().unwrap())
        .collect();
    let results: Vec<Result<Value, Value>> = kids
        .into_iter()
        .map(|k| parse_cri(&["run"], &k.wait_with_output().unwrap()))
        .collect();
    let won: Vec<&Value> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let lost: Vec<&Value> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        won.len() == 1 && lost.len() == 1,
        "expected one winner and one loser: {results:?}\n{}",
        c.context()
    );
    // The loser's kubelet sees why, in the plugin's own words (102: the NIC is taken; or 11
    // if it waited out the lock).
    let msg = lost[0]["message"].as_str().unwrap_or("");
    eprintln!("the losing RunPodSandbox got: {} {msg}", lost[0]["error"]);
    assert!(
        msg.contains("rdma-host-device") && msg.contains(&nic.name),
        "the CRI error does not carry the plugin's message: {msg}\n{}",
        c.context()
    );
    // Nothing broken: the DEL containerd ran for the loser left the winner's NIC alone.
    let winner = c.pod(won[0]["id"].as_str().unwrap());
    assert_pod_has_nic(&c, &rig, &winner, &nic);
    let listed = c.list();
    assert_eq!(listed.len(), 1, "sandboxes: {listed:?}");
    assert_eq!(listed[0].0, winner.id);
    c.delete_pod(&winner.id);
    assert_all_home(&c, &rig, &winner, &nic);
    // The loser left no stale claim: the next pod gets the NIC.
    let next = c
        .run_pod("racer-c")
        .unwrap_or_else(|e| panic!("RunPodSandbox after the race: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &next, &nic);
    c.delete_pod(&next.id);
    assert_all_home(&c, &rig, &next, &nic);
    c.report("race");
}

#[test]
fn sandbox_netns_unmounted_behind_containerds_back() {
    let _s = serial();
    let rig = Rig::new();
    let nic0 = nic(&rig, 0);
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic0)]));
    let pod = c
        .run_pod("orphan-0")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic0);

    // An operator's `ip netns delete`: the bind mount goes and the file with it; only the
    // pause process still holds the namespace.
    ip(&["netns", "delete", ns_name(&pod)]);
    assert!(!Path::new(&pod.netns).exists());

    // kubectl delete pod must still finish: Stop kills pause (the netns dies with it, and
    // with it the veth: a virtual link cannot come home, a physical one would, see
    // tests/lost_nic.rs), containerd finds the netns closed and calls DEL without one.
    c.delete_pod(&pod.id);
    let ctx = c.context();
    assert!(
        rig.allocations(NET).is_empty(),
        "lease leaked: {:?}\n{ctx}",
        rig.allocations(NET)
    );
    rig.assert_state_empty(&ctx);
    assert!(
        nic0.on_host().is_none(),
        "a veth cannot outlive its netns: {ctx}"
    );
    // The plugin forgot the attachment: a new NIC under the same name goes to the next pod.
    drop(nic0);
    let nic1 = nic(&rig, 0);
    let next = c
        .run_pod("orphan-1")
        .unwrap_or_else(|e| panic!("RunPodSandbox after the orphan: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &next, &nic1);
    c.delete_pod(&next.id);
    assert_all_home(&c, &rig, &next, &nic1);
    c.report("netns unmounted");
}

#[test]
fn containerd_killed_and_restarted_mid_pod() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    let mut c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic)]));
    let pod = c
        .run_pod("survivor")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic);

    c.kill_and_restart();
    // The pod lived through it with its NIC; the new containerd knows it as before.
    let after = c.pod(&pod.id);
    assert_eq!(after.state, "SANDBOX_READY", "{after:?}\n{}", c.context());
    assert_eq!(after.ip, pod.ip);
    assert_eq!(after.netns, pod.netns);
    assert_pod_has_nic(&c, &rig, &after, &nic);

    c.delete_pod(&pod.id);
    assert_all_home(&c, &rig, &pod, &nic);
    c.report("containerd restarted");
}

#[test]
fn chained_with_tuning_and_sbr_as_conf_shows() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    // conf/containerd/20-rdma.conflist as shipped, with this test's NIC and IPAM range.
    let text = fs::read_to_string(repo().join("conf/containerd/20-rdma.conflist")).unwrap();
    let mut list: Value = serde_json::from_str(&text).unwrap();
    list["name"] = json!(NET);
    let ours = our_plugin(&rig, &nic);
    let first = &mut list["plugins"][0];
    assert_eq!(first["type"], json!("rdma-host-device"));
    first["device"] = ours["device"].clone();
    first["ipam"] = ours["ipam"].clone();
    first["logFile"] = ours["logFile"].clone();
    let chained: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["type"].as_str())
        .collect();
    assert_eq!(chained, ["rdma-host-device", "tuning", "sbr"]);
    let c = Containerd::start(&rig, &list);

    let pod = c
        .run_pod("chained")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic);
    // tuning ran on our result: the sysctls are set in the pod.
    for (key, want) in [
        ("net.ipv4.conf.all.arp_ignore", "1"),
        ("net.ipv4.conf.all.arp_announce", "2"),
    ] {
        let out = run("ip", &["netns", "exec", ns_name(&pod), "sysctl", "-n", key]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{key} in the pod\n{}",
            c.context()
        );
    }
    // sbr ran on our result: traffic from the pod's address uses its own table.
    let rules =
        String::from_utf8_lossy(&run("ip", &["-n", ns_name(&pod), "rule"]).stdout).into_owned();
    assert!(
        rules.contains(&format!("from {} lookup 100", pod.ip)),
        "sbr's rule missing:\n{rules}\n{}",
        c.context()
    );
    let t100 = run(
        "ip",
        &["-n", ns_name(&pod), "route", "show", "table", "100"],
    );
    let t100 = String::from_utf8_lossy(&t100.stdout);
    assert!(
        t100.contains(&format!("default via 10.77.{}.1 dev eth0", rig.octet())),
        "sbr's table 100 lacks the default route via the IPAM gateway:\n{t100}\n{}",
        c.context()
    );
    c.delete_pod(&pod.id);
    assert_all_home(&c, &rig, &pod, &nic);
    c.report("chained with tuning and sbr");
}
