//! A private containerd with its CRI plugin, driven as kubelet drives it (tests/runtimes/cri.rs).
//!
//! Each instance is Debian's containerd (1.6, its built-in CRI plugin) with a private config
//! (own root, state, sockets, runc root, CNI conf and bin dirs, cgroup parent) and a locally
//! built sandbox image (tests/cri/pause.c packed as an OCI layout: no registry is reachable);
//! the CRI v1 gRPC API is called with tests/cri/cri.py (Python grpcio, stubs generated from
//! tests/cri/api.proto at test time). The plugin inherits containerd's environment, so the
//! rig's node configuration reaches it through RDMA_HOST_DEVICE_NODE_CONFIG. Everything an
//! instance starts or mounts is cleaned up on drop, also when an assertion fails.

use crate::cleanup::{pids_in_cgroup, pids_with_arg, rmdir_tree, unmount_under};
use crate::net::links;
use crate::process::{output_with_stdin, repo, run, venv_python};
use crate::programs::{NODE_CONFIG_ENV, SYSTEM_CNI_DIR, TARGET_TMP};
use crate::rig::Rig;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const CONTAINERD: &str = "/usr/bin/containerd";
pub const PAUSE_IMAGE: &str = "localhost/rhd-pause:test";
/// The sandbox image as an OCI layout tar, built once per test binary: a static `pause`.
pub fn pause_image() -> &'static Path {
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
        let out = Command::new(venv_python())
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
pub struct Pod {
    pub id: String,
    /// PodSandboxStatus.network.ip: what `kubectl get pod -o wide` shows.
    pub ip: String,
    /// The sandbox's netns, `cni-<uuid>` under /var/run/netns.
    pub netns: String,
    pub state: String,
}

/// One private containerd with the CRI plugin, and everything it made, cleaned up on drop.
pub struct Containerd<'r> {
    rig: &'r Rig,
    dir: PathBuf,
    sock: PathBuf,
    /// Cgroup parent of this instance's sandboxes (a directory in every hierarchy).
    cgroup: String,
    /// The conflist's network name (libcni caches results under it).
    net: String,
    child: Option<Child>,
    /// Sandbox ids and netns paths seen, for cleanup after a failure.
    seen: RefCell<Vec<(String, String)>>,
    /// (CRI call, ms) as measured by the client.
    timings: RefCell<Vec<(String, f64)>>,
}

impl<'r> Containerd<'r> {
    /// Start containerd with `conflist` as its only network (and our plugin, Debian's
    /// loopback, host-local, tuning and sbr in its CNI bin dir), import the pause image.
    pub fn start(rig: &'r Rig, conflist: &Value) -> Containerd<'r> {
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
            net: conflist["name"].as_str().unwrap_or("").to_owned(),
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
    pub fn kill_and_restart(&mut self) {
        let mut child = self.child.take().expect("containerd running");
        child.kill().unwrap();
        child.wait().unwrap();
        self.spawn();
    }

    /// One CRI call through cri.py: Ok(its JSON) or Err(the gRPC error as JSON).
    /// Its CRI socket.
    pub fn sock(&self) -> &Path {
        &self.sock
    }

    /// Replace its network configuration (written in place: its watcher ignores a rename),
    /// and give it the ~1 s it takes to reload (three, for a loaded machine).
    pub fn set_conflist(&self, conflist: &Value) {
        fs::write(
            self.dir.join("net.d/10-rdma.conflist"),
            serde_json::to_vec_pretty(conflist).unwrap(),
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_secs(3));
    }

    pub fn cri(&self, args: &[&str]) -> Result<Value, Value> {
        let out = self.cri_cmd(args).output().unwrap();
        parse_cri(args, &out)
    }

    pub fn cri_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(venv_python());
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
    pub fn run_pod(&self, name: &str) -> Result<Pod, Value> {
        let v = self.cri(&["run", name])?;
        self.time("RunPodSandbox", &v);
        let id = v["id"].as_str().unwrap().to_owned();
        Ok(self.pod(&id))
    }

    /// PodSandboxStatus (verbose: the netns path comes from the runtime spec).
    pub fn pod(&self, id: &str) -> Pod {
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

    pub fn stop(&self, id: &str) -> Result<Value, Value> {
        let v = self.cri(&["stop", id])?;
        self.time("StopPodSandbox", &v);
        Ok(v)
    }

    pub fn remove(&self, id: &str) -> Result<Value, Value> {
        let v = self.cri(&["remove", id])?;
        self.time("RemovePodSandbox", &v);
        Ok(v)
    }

    /// ListPodSandbox: (id, name, state) of every sandbox.
    pub fn list(&self) -> Vec<(String, String, String)> {
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
    pub fn delete_pod(&self, id: &str) {
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
    pub fn context(&self) -> String {
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
    pub fn report(&self, case: &str) {
        let t = self.timings.borrow();
        let line: Vec<String> = t.iter().map(|(w, ms)| format!("{w} {ms:.0} ms")).collect();
        eprintln!("cri timings [{case}]: {}", line.join(", "));
    }
}

pub fn parse_cri(args: &[&str], out: &std::process::Output) -> Result<Value, Value> {
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
            for cached in [
                format!("{}-{id}-eth0", self.net),
                format!("cni-loopback-{id}-lo"),
            ] {
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
    let out = output_with_stdin(
        &mut Command::new("sha256sum"),
        format!("{address}/k8s.io/{id}").as_bytes(),
    );
    let hex = String::from_utf8_lossy(&out.stdout);
    Path::new("/run/containerd/s").join(hex.split_whitespace().next().unwrap_or("none"))
}
