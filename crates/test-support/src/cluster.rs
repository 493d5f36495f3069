//! The real one-node cluster of tests/cluster/cluster.sh (Kubernetes 1.37, containerd 2.4,
//! built from their Go modules by scripts/cluster-parts.sh), started when a test first asks,
//! anew for each module of tests that works its node, and stopped when the binary exits;
//! `kubectl` against it, commands inside the node (its network and mount namespaces), and the
//! DaemonSet's image imported into its containerd.

use crate::daemonset::{build_image, release_binary};
use crate::net::ORIG_MTU;
use crate::podman::Podman;
use crate::process::{output_text, repo};
use crate::root::require_root;
use rdma_host_device_agent::validate::yaml;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use std::{fmt, fs};

/// A running cluster: its directory (env, logs, kubeconfigs) and the node's names.
pub struct Cluster {
    pub dir: PathBuf,
    pub node: String,
    /// The node's address, where the API server listens too (port 443).
    pub node_ip: String,
    pub netns: String,
    /// A process inside the node's network and mount namespaces.
    pub holder: u32,
    /// What modules installed on it ([`Cluster::once`]).
    done: Mutex<HashSet<&'static str>>,
}

fn script() -> PathBuf {
    repo().join("tests/cluster/cluster.sh")
}

/// `cluster.sh down DIR`: the pods deleted through the kubelet, everything stopped.
fn down(dir: &Path) {
    let _ = Command::new(script()).arg("down").arg(dir).status();
}

/// The cluster that is up, and who works its node. A module of tests that works the node
/// (installs the DaemonSets, adds NICs: [`Cluster::shared`]) owns the cluster it was given, and
/// the next module that does gets a fresh one, once no test still talks to the old one's API
/// server ([`Cluster::api`]). Tests that only talk to the API server share whichever is up.
struct Up {
    cluster: Option<&'static Cluster>,
    /// The file of the module whose tests work the node.
    owner: Option<&'static str>,
    api_users: usize,
    started: u32,
}

static UP: Mutex<Up> = Mutex::new(Up {
    cluster: None,
    owner: None,
    api_users: 0,
    started: 0,
});
/// Said when the last API user of a cluster is done.
static API_DONE: Condvar = Condvar::new();
/// One test at a time works the node: they share it and its NICs.
static TURN: Mutex<()> = Mutex::new(());

fn up() -> MutexGuard<'static, Up> {
    UP.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's use of a cluster's API server: the cluster stays up until it is dropped.
pub struct ApiUse(());

impl Drop for ApiUse {
    fn drop(&mut self) {
        let mut up = up();
        up.api_users -= 1;
        API_DONE.notify_all();
    }
}

impl Cluster {
    /// A cluster whose node the calling module's tests work, and the caller's turn on it: the
    /// one they were given before, or a fresh one if none is up or another module's tests
    /// worked the one that is (what each module installs on the node is its own; a module
    /// keeps what it installed with [`Cluster::once`]). The parts are built by
    /// scripts/setup.sh --for cluster, or here on first use.
    #[track_caller]
    pub fn shared() -> (&'static Cluster, MutexGuard<'static, ()>) {
        require_root();
        let module = std::panic::Location::caller().file();
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut up = up();
        if let Some(c) = up.cluster {
            if up.owner.is_none_or(|o| o == module) {
                up.owner = Some(module);
                return (c, turn);
            }
            up = API_DONE
                .wait_while(up, |u| u.api_users > 0)
                .unwrap_or_else(|e| e.into_inner());
            c.down();
            up.cluster = None;
        }
        let c = Cluster::start(&mut up);
        up.owner = Some(module);
        (c, turn)
    }

    /// The cluster that is up (started if none is) for a test that talks to its API server
    /// only, and leaves the node to others: the cluster stays up while the [`ApiUse`] lives.
    pub fn api() -> (&'static Cluster, ApiUse) {
        require_root();
        let mut up = up();
        let c = match up.cluster {
            Some(c) => c,
            None => Cluster::start(&mut up),
        };
        up.api_users += 1;
        (c, ApiUse(()))
    }

    /// `f`, unless it ran on this cluster before under the name `what`: what a module installs
    /// once on the node it works.
    pub fn once(&self, what: &'static str, f: impl FnOnce()) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        if done.insert(what) {
            f();
        }
    }

    fn start(state: &mut Up) -> &'static Cluster {
        extern "C" fn at_exit() {
            let Some(c) = up().cluster else { return };
            // RHD_CLUSTER_KEEP: leave the last one up to look at (cluster.sh down DIR stops it).
            if std::env::var_os("RHD_CLUSTER_KEEP").is_some() {
                eprintln!("cluster kept: {}", c.dir.display());
                return;
            }
            c.down();
        }
        if state.started == 0 {
            // SAFETY: registers a plain function; the test harness exits through exit(3).
            unsafe { libc::atexit(at_exit) };
        }
        state.started += 1;
        // Not under short_tmp(), which goes when the binary exits: the cluster's own
        // teardown removes what it made, and RHD_CLUSTER_KEEP may keep it. cluster.sh names
        // the node's netns by the name's last five characters.
        let dir = PathBuf::from(format!(
            "/tmp/rhd-k8s-{}-{}",
            std::process::id(),
            state.started
        ));
        let t = Instant::now();
        let out = Command::new(script())
            .arg("up")
            .arg(&dir)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/cluster/cluster.sh");
        if !out.status.success() {
            // What did start is stopped now: the exit hook knows only a cluster that came up.
            down(&dir);
            panic!("cluster.sh up failed; logs in {}/logs", dir.display());
        }
        let env = fs::read_to_string(dir.join("env")).expect("cluster env");
        let get = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("{k} missing in the cluster's env"))
                .to_owned()
        };
        eprintln!("cluster up in {:.1} s", t.elapsed().as_secs_f64());
        // One per module that works a node, at most, in a test binary's life.
        let c: &'static Cluster = Box::leak(Box::new(Cluster {
            node: get("NODE"),
            node_ip: get("NODE_IP"),
            netns: get("NETNS"),
            holder: get("HOLDER").parse().expect("holder pid"),
            dir,
            done: Mutex::new(HashSet::new()),
        }));
        state.cluster = Some(c);
        c
    }

    fn down(&self) {
        down(&self.dir);
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    /// `kubectl ARGS` as the cluster's admin.
    pub fn kubectl<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        Command::new(self.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(self.dir.join("admin.kubeconfig"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl")
    }

    /// `kubectl ARGS`, which must succeed; its stdout.
    pub fn k<S: AsRef<std::ffi::OsStr> + fmt::Debug>(&self, args: &[S]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl get ARGS -o json`.
    pub fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.k(&a)).expect("kubectl get -o json")
    }

    /// `kubectl apply -f -` of this YAML or JSON text.
    pub fn apply(&self, text: &str) -> String {
        self.k_stdin(&["apply", "-f", "-"], text)
    }

    /// `kubectl ARGS`, which must succeed, given `text` on stdin; its stdout.
    pub fn k_stdin(&self, args: &[&str], text: &str) -> String {
        let mut child = Command::new(self.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(self.dir.join("admin.kubeconfig"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl apply");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to kubectl");
        let out = child.wait_with_output().expect("kubectl apply");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}\n--- given:\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A command run inside the node: its network and mount namespaces.
    pub fn inside(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.holder.to_string())
            .args(["--net", "--mount", "--"])
            .arg(program)
            .stdin(Stdio::null());
        c
    }

    /// A command inside the node (its network and mount namespaces), which must succeed: its
    /// stdout.
    pub fn on_node(&self, program: &str, args: &[&str]) -> String {
        let out = self.inside(program).args(args).output().expect("nsenter");
        assert!(
            out.status.success(),
            "on the node: {program} {args:?}\n{}",
            output_text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `ip ARGS` in the node's network namespace, which must succeed.
    pub fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.netns)
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip -n {} {args:?}: {}",
            self.netns,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Poll `probe` every 250 ms until it returns Some, for at most `secs`; on time-out, fail
    /// saying `what`, with the cluster's view of the pods and the kubelet's last lines.
    pub fn wait<T>(&self, what: &str, secs: u64, mut probe: impl FnMut() -> Option<T>) -> T {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = probe() {
                return v;
            }
            if Instant::now() > end {
                let pods = self.kubectl(&["get", "pods", "-A", "-o", "wide"]);
                let events = self.kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"]);
                // Our DaemonSets' containers say what they did (the DRA driver's start before
                // node.json was written showed only as a slice that never came).
                let ours = self.kubectl(&[
                    "-n",
                    "kube-system",
                    "logs",
                    "-l",
                    "app.kubernetes.io/name in (rdma-host-device, rdma-host-device-dra)",
                    "--all-containers",
                    "--prefix",
                    "--tail=20",
                ]);
                panic!(
                    "{what}: not after {secs} s\n--- pods:\n{}\n--- events:\n{}\n--- our containers' logs (last 20 lines each):\n{}{}\n--- kubelet log (last 40 lines):\n{}",
                    String::from_utf8_lossy(&pods.stdout),
                    String::from_utf8_lossy(&events.stdout),
                    String::from_utf8_lossy(&ours.stdout),
                    String::from_utf8_lossy(&ours.stderr),
                    self.log_tail("kubelet", 40)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The last `n` lines of a component's log (etcd, kube-apiserver, kubelet, containerd, ...).
    pub fn log_tail(&self, component: &str, n: usize) -> String {
        let text = fs::read_to_string(self.dir.join("logs").join(format!("{component}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The whole log of a component.
    pub fn log(&self, component: &str) -> String {
        fs::read_to_string(self.dir.join("logs").join(format!("{component}.log")))
            .unwrap_or_default()
    }

    /// The pod's phase and whether every container is ready.
    pub fn pod_running(&self, ns: &str, name: &str) -> bool {
        let out = self.kubectl(&["-n", ns, "get", "pod", name, "-o", "json"]);
        if !out.status.success() {
            return false;
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["status"]["phase"] == "Running"
            && v["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c["ready"] == true))
    }

    /// Imports an OCI archive into the node's containerd (namespace k8s.io, as the kubelet's).
    pub fn import(&self, archive: &Path) {
        let out = self
            .inside(self.bin("ctr").to_str().expect("utf-8 path"))
            .arg("--address")
            .arg(self.dir.join("run/containerd.sock"))
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr images import {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Veth NICs for pods in the node's network namespace, each with ORIG_MTU and up, its peer
    /// (`rhdpeerN`) up beside it in the node.
    pub fn add_nics(&self, nics: &[&str]) {
        for (i, n) in nics.iter().enumerate() {
            self.ip(&[
                "link",
                "add",
                n,
                "type",
                "veth",
                "peer",
                "name",
                &format!("rhdpeer{i}"),
            ]);
            self.ip(&["link", "set", n, "mtu", &ORIG_MTU.to_string()]);
            self.ip(&["link", "set", n, "up"]);
            self.ip(&["link", "set", &format!("rhdpeer{i}"), "up"]);
        }
    }

    /// `podman save` of `image` from `podman`'s storage as an OCI archive in the cluster's
    /// directory (`archive`), imported into the node's containerd.
    pub fn import_image(&self, podman: &Podman, image: &str, archive: &str) {
        let archive = self.dir.join(archive);
        let out = podman.run(&[
            "save",
            "--format",
            "oci-archive",
            "-o",
            archive.to_str().expect("utf-8"),
            image,
        ]);
        assert!(out.status.success(), "podman save: {}", output_text(&out));
        self.import(&archive);
    }

    /// The DaemonSet's image as README's step 1 makes it (deploy/build-image.sh, from the
    /// release build; a developer may name other binaries, e.g. target/debug's, with
    /// RHD_CLUSTER_PLUGIN), built in `podman_store`'s storage and imported into the node's
    /// containerd through `archive`. Its name.
    pub fn image_from_this_build(&self, podman_store: &str, archive: &str) -> String {
        let bin = std::env::var_os("RHD_CLUSTER_PLUGIN")
            .map(PathBuf::from)
            .unwrap_or_else(release_binary);
        let podman = Podman::new(podman_store);
        let report = build_image(&podman, &bin);
        let image = report
            .lines()
            .find_map(|l| l.strip_prefix("image: "))
            .expect("build-image.sh names its image")
            .to_owned();
        self.import_image(&podman, &image, archive);
        image
    }

    /// The node labelled as README's step 2 says: the DaemonSets' nodeSelector.
    pub fn label_rdma_capable(&self) {
        self.k(&[
            "label",
            "node",
            &self.node,
            "feature.node.kubernetes.io/rdma.capable=true",
        ]);
    }

    /// `pods` of `ns` deleted (their CNI DEL runs), then `nic` back in the node under its
    /// name, with its MTU.
    pub fn delete_pods_and_see_nic_home(&self, ns: &str, pods: &[&str], nic: &str) {
        let mut args = vec!["-n", ns, "delete", "pod"];
        args.extend_from_slice(pods);
        args.extend(["--wait=true", "--timeout=120s"]);
        self.k(&args);
        self.wait(&format!("{nic} home after the pod's deletion"), 60, || {
            self.nic_in_node(nic).then_some(())
        });
        self.assert_home(nic);
    }

    /// Is the NIC in the node's network namespace (under this name)?
    pub fn nic_in_node(&self, nic: &str) -> bool {
        Command::new("ip")
            .args(["-n", &self.netns, "link", "show", "dev", nic])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// The NIC is in the node's namespace under its own name, with its MTU.
    pub fn assert_home(&self, nic: &str) {
        let out = self.ip(&["-j", "link", "show", "dev", nic]);
        let v: Value = serde_json::from_str(&out).expect("ip -j");
        assert_eq!(
            v[0]["mtu"], ORIG_MTU,
            "{nic} came home with another MTU: {v}"
        );
    }

    /// The entry of Multus' network-status for the pod's `net1`, the interface our CNI gave
    /// it (a test fails naming what the pod has when there is none).
    pub fn net1_status(&self, ns: &str, pod: &str) -> Value {
        let status = self.network_status(ns, pod);
        status
            .iter()
            .find(|s| s["interface"] == "net1")
            .cloned()
            .unwrap_or_else(|| panic!("no net1 in {ns}/{pod}'s network-status: {status:?}"))
    }

    /// The network-status annotation Multus wrote on the pod.
    pub fn network_status(&self, ns: &str, pod: &str) -> Vec<Value> {
        let v = self.get(&["-n", ns, "pod", pod]);
        let s = v["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
            .as_str()
            .unwrap_or("[]");
        serde_json::from_str(s).unwrap_or_default()
    }
}

/// A NAD of conf/multus as shipped, but host-local in place of whereabouts (which
/// scripts/cluster-parts.sh does not build) on the NAD's own range.
pub fn with_host_local(nad: &Value) -> Value {
    let mut nad = nad.clone();
    let mut conf: Value =
        serde_json::from_str(nad["spec"]["config"].as_str().expect("config")).expect("json");
    assert_eq!(conf["ipam"]["type"], "whereabouts", "{conf}");
    let range = conf["ipam"]["range"].clone();
    conf["ipam"] = json!({"type": "host-local", "ranges": [[{"subnet": range}]]});
    nad["spec"]["config"] = json!(conf.to_string());
    nad
}

/// The YAML documents of a file under conf/.
pub fn conf_docs(path: &str) -> Vec<Value> {
    let text = fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    yaml::parse_all(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}
