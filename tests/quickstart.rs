//! README.md's "Quick start on a cluster", run in order (issue 28, item 3). The commands are
//! READ from the README's code blocks, so the README cannot drift from this test: a command the
//! test does not know how to run fails it (`every_quick_start_command_is_one_this_test_runs`,
//! no root), it is not skipped. Each command is then run as written, on this machine, standing
//! in only for what no registry ships, each stand-in named where it is used:
//!
//! 1. the image: `scripts/setup.sh --for build` as written; the `apt-get install` as apt's own
//!    simulation (`-s`: a test installs no packages; scripts/setup.sh --for test did); `cargo
//!    build --release`; `deploy/build-image.sh` (podman on a private storage root); `podman save
//!    --format oci-archive ... | ctr -n k8s.io images import -` into a real containerd (Debian's,
//!    started by the test as tests/cri.rs does), whose CRI then runs a container from the image
//!    by the DaemonSet's image name, as a kubelet with `imagePullPolicy: IfNotPresent` does;
//! 2. the label: no kube-apiserver here, so the command is checked against the DaemonSet's
//!    nodeSelector (the label it sets is the one the DaemonSet selects); the node
//!    configuration: the ConfigMap's node.json edited as an operator would (the pool and
//!    allowedNics select a test veth instead of mlx5_core NICs, which this machine has none of);
//! 3. the DaemonSet: each container of conf/k8s/daemonset.yaml run by podman from the built
//!    image with the YAML's command, env, mounts and security context, on a stand-in node
//!    root (hostPath volumes are its directories): install (which checks node.json with the
//!    agent and installs the plugin into the node's /opt/cni/bin), uppers-watch,
//!    device-plugin (registering with the kubelet stand-in tests/device_plugin/kubelet.py) and
//!    node-report. Not run here: metrics (tests/image.rs runs it from the same image) and nri
//!    (needs a runtime with NRI, containerd 2.x: tests/nri.rs drives it through the NRI
//!    stand-in, the VM's cri-exclusive group through a real runtime);
//! 4. the NAD and the pod: the kubelet stand-in allocates the pod's `rdma-host-device.io/rail`
//!    (GetPreferredAllocation, Allocate); Multus is reproduced as tests/multus.rs does (the
//!    delegate's config with the allocated `deviceID`, CNI_ARGS, capability args, through
//!    libcni: tests/libcni-driver) into a network namespace standing for the pod's sandbox;
//!    whereabouts (which needs a Kubernetes API) becomes host-local on the NAD's range. The
//!    node's side (the installed plugin in /opt/cni/bin, node.json, stateDir, logDir, IPAM data,
//!    device-info dir) is the stand-in root's, bind-mounted at the node's paths in a private
//!    mount namespace, so the plugin reads and writes exactly where the DaemonSet's containers
//!    look;
//! 5. "see it worked": the `network-status` annotation built from the plugin's CNI result as
//!    Multus builds it; `inspect` in the node-report container shows the NIC in the pod.
//!    `ibv_devinfo` and `ulimit -l` in the pod need an RDMA device and a runtime: not faked
//!    here; the VM's group cri-exclusive proves them (tests/vm/cri.sh, case `allocated`:
//!    ibv_devinfo in a container given the device plugin's allocation; case `nri`: node.json's
//!    memlock in a container's processes, a `runc exec`'d one too), and a veth has no
//!    device-info (tests/vm/plugin.sh, case `device-info`, checks it with an RDMA NIC). Then
//!    DEL as Multus sends it, and the NIC is home.
//!
//! Needs root, podman, containerd, go (scripts/setup.sh --for test) and the release build;
//! 17 s when the release build is current (it runs `cargo build --release` first, as the
//! README does).

mod common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const README_SECTION: &str = "## Quick start on a cluster";

// ------------------------------------------------------------------ reading the README

/// The README's quick start: every command of its ```sh blocks, in order, comments dropped,
/// `a && b` split into `a` and `b`.
fn quick_start_commands() -> Vec<String> {
    let readme = fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find(&format!("\n{README_SECTION}\n"))
        .unwrap_or_else(|| panic!("README.md has no {README_SECTION:?} section"));
    let rest = &readme[start + README_SECTION.len() + 2..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in section.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_block = !in_block && t == "```sh";
            assert!(
                in_block || t == "```",
                "the quick start has a code block that is not ```sh: {t:?}"
            );
            continue;
        }
        if !in_block {
            continue;
        }
        let code = strip_comment(line);
        let code = code.trim();
        if let Some(cont) = code.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(code);
        let whole = std::mem::take(&mut pending);
        for c in whole.split(" && ") {
            if !c.trim().is_empty() {
                commands.push(c.trim().to_owned());
            }
        }
    }
    assert!(!in_block, "an unclosed code block in the quick start");
    commands
}

/// `line` without its shell comment (a `#` outside quotes, at the start or after a blank).
fn strip_comment(line: &str) -> String {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, ch) in line.char_indices() {
        match ch {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].to_owned(),
            _ => {}
        }
        prev = ch;
    }
    line.to_owned()
}

/// A command's words as the shell splits them (quotes removed; `|` is its own word).
fn words(cmd: &str) -> Vec<String> {
    let (mut out, mut cur, mut single, mut double, mut any) =
        (Vec::new(), String::new(), false, false, false);
    for ch in cmd.chars() {
        match ch {
            '\'' if !double => (single, any) = (!single, true),
            '"' if !single => (double, any) = (!double, true),
            c if c.is_whitespace() && !single && !double => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// One quick-start command, as this test understands it.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Setup(String),
    AptInstall(Vec<String>),
    ReleaseBuild,
    BuildImage,
    /// `podman save --format oci-archive IMAGE | ctr -n k8s.io images import -`: the two sides.
    LoadImage(Vec<String>, Vec<String>),
    /// `kubectl label node NODE KEY=VALUE`
    Label(String, String),
    Apply(Vec<String>),
    /// `kubectl exec POD -- CMD...`
    PodExec(String, Vec<String>),
    /// `kubectl get pod POD -o jsonpath=...network-status...`
    NetworkStatus(String),
    /// `kubectl -n NS exec ds/NAME -c CONTAINER -- CMD...`
    DaemonSetExec(String, Vec<String>),
}

fn step(cmd: &str) -> Result<Step, String> {
    let w = words(cmd);
    let s: Vec<&str> = w.iter().map(String::as_str).collect();
    let unknown = || {
        Err(format!(
            "the quick-start test does not know how to run {cmd:?}"
        ))
    };
    Ok(match s.as_slice() {
        ["scripts/setup.sh", "--for", set] => Step::Setup(set.to_string()),
        ["apt-get", "install", rest @ ..] => {
            Step::AptInstall(rest.iter().map(|x| x.to_string()).collect())
        }
        ["cargo", "build", "--release"] => Step::ReleaseBuild,
        ["deploy/build-image.sh"] => Step::BuildImage,
        ["kubectl", "label", "node", _node, label] => {
            let (k, v) = label
                .split_once('=')
                .ok_or(format!("{cmd:?}: no KEY=VALUE"))?;
            Step::Label(k.to_owned(), v.to_owned())
        }
        ["kubectl", "apply", rest @ ..] => {
            let mut files = Vec::new();
            let mut it = rest.iter();
            while let Some(a) = it.next() {
                match *a {
                    "-f" => files.push(it.next().ok_or(format!("{cmd:?}: -f what?"))?.to_string()),
                    _ => return unknown(),
                }
            }
            Step::Apply(files)
        }
        ["kubectl", "exec", pod, "--", rest @ ..] => Step::PodExec(
            pod.to_string(),
            rest.iter().map(|x| x.to_string()).collect(),
        ),
        ["kubectl", "get", "pod", pod, "-o", jsonpath]
            if jsonpath.starts_with("jsonpath=")
                && jsonpath.contains(r"k8s\.v1\.cni\.cncf\.io/network-status") =>
        {
            Step::NetworkStatus(pod.to_string())
        }
        [
            "kubectl",
            "-n",
            "kube-system",
            "exec",
            ds,
            "-c",
            c,
            "--",
            rest @ ..,
        ] if *ds == "ds/rdma-host-device" => {
            Step::DaemonSetExec(c.to_string(), rest.iter().map(|x| x.to_string()).collect())
        }
        _ if s.contains(&"|") => {
            let bar = s.iter().position(|x| *x == "|").unwrap();
            let (l, r) = (&s[..bar], &s[bar + 1..]);
            match (l, r) {
                (
                    ["podman", "save", "--format", "oci-archive", _image],
                    ["ctr", "-n", "k8s.io", "images", "import", "-"],
                ) => Step::LoadImage(
                    l.iter().map(|x| x.to_string()).collect(),
                    r.iter().map(|x| x.to_string()).collect(),
                ),
                _ => return unknown(),
            }
        }
        _ => return unknown(),
    })
}

fn steps() -> Vec<Step> {
    quick_start_commands()
        .iter()
        .map(|c| step(c).unwrap_or_else(|e| panic!("{e}: teach tests/quickstart.rs to run it")))
        .collect()
}

/// Every command of the quick start is one this file runs; and the quick start does what
/// issue 28 asks of it, in this order: the image, loaded on the node; the DaemonSet; the NAD
/// and the pod; then how to see it worked.
#[test]
fn every_quick_start_command_is_one_this_test_runs() {
    let steps = steps();
    eprintln!("{steps:#?}");
    let pos = |f: &dyn Fn(&Step) -> bool, what: &str| {
        steps
            .iter()
            .position(f)
            .unwrap_or_else(|| panic!("the quick start has no step that {what}: {steps:#?}"))
    };
    let order = [
        pos(&|s| *s == Step::BuildImage, "builds the image"),
        pos(&|s| matches!(s, Step::LoadImage(..)), "loads the image"),
        pos(
            &|s| matches!(s, Step::Apply(f) if f.iter().any(|f| f == "conf/k8s/daemonset.yaml")),
            "applies the DaemonSet",
        ),
        pos(
            &|s| matches!(s, Step::Apply(f) if f.iter().any(|f| f.starts_with("conf/multus/"))),
            "applies a NAD",
        ),
        pos(
            &|s| matches!(s, Step::NetworkStatus(_)),
            "shows the network-status",
        ),
    ];
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "out of order: {order:?}"
    );
    let lines = fs::read_to_string(repo().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: a front page, at most 200"
    );
}

// ------------------------------------------------------------------ the node's paths

/// The node's paths the plugin, run by Multus, reads and writes: each is bind-mounted from the
/// stand-in node root in a private mount namespace around libcni's client.
const NODE_PATHS: [&str; 7] = [
    "/opt/cni/bin",
    "/etc/rdma-host-device",
    "/var/lib/cni/rdma-host-device",
    "/var/lib/cni/networks",
    "/var/log/rdma-host-device",
    "/var/run/k8s.cni.cncf.io/devinfo",
    "/run/rdma-host-device",
];

/// Mount points this test had to create on this machine (an empty directory where the node
/// would have one), removed again when it ends.
struct MountPoints(Vec<PathBuf>);

impl MountPoints {
    fn make() -> MountPoints {
        let mut made = Vec::new();
        for p in NODE_PATHS {
            // The first missing ancestor and everything below it are ours to remove.
            let mut first_missing = None;
            for a in Path::new(p).ancestors() {
                if !a.exists() {
                    first_missing = Some(a.to_path_buf());
                }
            }
            fs::create_dir_all(p).unwrap_or_else(|e| panic!("mkdir {p}: {e}"));
            if let Some(m) = first_missing {
                made.push(m);
            }
        }
        MountPoints(made)
    }
}

impl Drop for MountPoints {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            // Only empty directories: nothing was ever written here, only mounted over.
            let _ = rmdir_empty(p);
        }
    }
}

fn rmdir_empty(p: &Path) -> std::io::Result<()> {
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_empty(&e.path())?;
            }
        }
    }
    fs::remove_dir(p)
}

/// Multus's call of the delegate through libcni, on the node: `cmd` with `conf`, from a
/// private mount namespace in which the node's paths are the stand-in root's. CNI_PATH is
/// Multus's binDir (/opt/cni/bin, where the install container put the plugin), then Debian's
/// plugins standing for the node's IPAM plugins.
#[allow(clippy::too_many_arguments)]
fn multus_calls(
    node: &Node,
    dir: &Path,
    cmd: &str,
    conf: &Path,
    netns: &str,
    cid: &str,
    ifname: &str,
    extra: &[String],
) -> RunOut {
    let trace = dir.join(format!("trace-{cmd}.jsonl"));
    let mut script = String::from("set -e\n");
    for p in NODE_PATHS {
        let src = node.host(p);
        fs::create_dir_all(&src).unwrap();
        script.push_str(&format!("mount --bind '{}' '{p}'\n", src.display()));
    }
    script.push_str("exec \"$@\"\n");
    let mut args: Vec<String> = [
        "-cmd",
        cmd,
        "-conf",
        &conf.display().to_string(),
        "-netns",
        netns,
        "-cid",
        cid,
        "-ifname",
        ifname,
        "-path",
        &format!("/opt/cni/bin:{SYSTEM_CNI_DIR}"),
        "-cache",
        &dir.join("libcni-cache").display().to_string(),
        "-trace",
        &trace.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().cloned());
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(&script)
        .arg("sh")
        .arg(driver())
        .args(&args)
        .env_remove(NODE_CONFIG_ENV)
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare + the libcni driver");
    let trace_v = fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let _ = fs::remove_file(&trace);
    RunOut {
        what: format!(
            "libcni {cmd} on the node (config: {})",
            fs::read_to_string(conf).unwrap_or_default()
        ),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace: trace_v,
    }
}

// ------------------------------------------------------------------ the kubelet stand-in

const KUBELET_SOCKETS: &str = "/var/lib/kubelet/device-plugins";

fn ask(k: &mut StandIn, cmd: Value, ctx: &dyn Fn() -> String) -> Value {
    let r = k.ask(cmd.clone());
    assert!(
        r["error"].is_null(),
        "the kubelet stand-in, {cmd}: {r}\n{}",
        ctx()
    );
    r
}

/// The `k8s.v1.cni.cncf.io/network-status` entry Multus 4.x writes for a delegate, from its
/// CNI result (net-attach-def client's CreateNetworkStatuses, as Multus calls it): one entry
/// per interface the result puts in the sandbox, named `NAMESPACE/NAD`, with the interface's
/// name, MAC and MTU, the result's IPs that point at it, the DNS, and `device-info` from the
/// CNI device-info file when there is one.
fn network_status(net: &str, result: &Value, device_info: Option<Value>) -> Vec<Value> {
    let ifaces = result["interfaces"].as_array().cloned().unwrap_or_default();
    let ips = result["ips"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (i, iface) in ifaces.iter().enumerate() {
        if iface["sandbox"].as_str().unwrap_or("").is_empty() {
            continue;
        }
        let mut s = json!({"name": net, "interface": iface["name"], "mac": iface["mac"],
                           "dns": result.get("dns").cloned().unwrap_or(json!({}))});
        let addrs: Vec<Value> = ips
            .iter()
            .filter(|ip| ip["interface"].as_u64() == Some(i as u64))
            .filter_map(|ip| ip["address"].as_str())
            .map(|a| json!(a.split('/').next().unwrap()))
            .collect();
        if !addrs.is_empty() {
            s["ips"] = json!(addrs);
        }
        if let Some(mtu) = iface["mtu"].as_u64().filter(|m| *m > 0) {
            s["mtu"] = json!(mtu);
        }
        if let Some(d) = &device_info {
            s["device-info"] = d.clone();
        }
        out.push(s);
    }
    out
}

// ------------------------------------------------------------------ the run

fn yaml_docs(file: &str) -> Vec<Value> {
    let text = fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    yaml::parse_all(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn wait_for(what: &str, timeout: Duration, ctx: &dyn Fn() -> String, f: &mut dyn FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < timeout,
            "{what}: not after {timeout:?}\n{}",
            ctx()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_quick_start_runs_in_order_on_this_machine() {
    require_root();
    let t_all = Instant::now();
    let steps = steps();
    let rig = Rig::new();
    let podman = Podman::new("podman");
    let dir = TempDir::new("quickstart");
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let (cm0, ds) = manifests();
    let image = daemonset_image(&ds);
    let _mount_points = MountPoints::make();

    let mut release: Option<PathBuf> = None;
    let mut containerd: Option<Containerd> = None;
    let mut node: Option<Node> = None;
    let mut kubelet: Option<StandIn> = None;
    let mut add_result: Option<(Value, String, PathBuf)> = None; // result, net name, devinfo
    let mut delegate: Option<(PathBuf, Vec<String>)> = None;
    let mut not_here: Vec<String> = Vec::new();
    let mut timings: Vec<(String, f64)> = Vec::new();
    let logs = |name: &str| output_text(&podman.run(&["logs", name]));
    let all_logs = || {
        ["uppers-watch", "device-plugin", "node-report"]
            .iter()
            .map(|c| format!("---- {c}\n{}", logs(c)))
            .collect::<Vec<_>>()
            .join("\n")
    };

    for st in &steps {
        let t0 = Instant::now();
        eprintln!("==== {st:?}");
        match st {
            Step::Setup(set) => {
                let out = Command::new(repo().join("scripts/setup.sh"))
                    .args(["--for", set])
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "scripts/setup.sh --for {set}\n{}",
                    output_text(&out)
                );
            }
            Step::AptInstall(args) => {
                // Stand-in: apt's own simulation; scripts/setup.sh --for test installed them.
                let out = Command::new("apt-get")
                    .arg("install")
                    .arg("-s")
                    .args(args)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                let text = output_text(&out);
                assert!(out.status.success(), "apt-get install -s {args:?}\n{text}");
                assert!(
                    text.contains(" 0 newly installed"),
                    "the quick start's packages are not all installed here \
                     (scripts/setup.sh --for test installs them): {text}"
                );
            }
            Step::ReleaseBuild => release = Some(release_binary()),
            Step::BuildImage => {
                let bin = release.clone().expect("cargo build --release comes first");
                // As written: no argument; it takes dist/ if scripts/release.sh made one, else
                // the release build.
                let dist = repo().join("dist/rdma-host-device");
                let shipped = if dist.exists() { dist } else { bin };
                let out = Command::new(repo().join("deploy/build-image.sh"))
                    .env("PODMAN_OPTS", podman.opts().join(" "))
                    .env_remove("IMAGE")
                    .output()
                    .unwrap();
                let report = output_text(&out);
                assert!(out.status.success(), "deploy/build-image.sh\n{report}");
                assert!(
                    report.contains(&format!("image: {image}\n")),
                    "the build tagged something else than the DaemonSet's {image}:\n{report}"
                );
                release = Some(shipped);
            }
            Step::LoadImage(save, import) => {
                assert_eq!(
                    save[4], image,
                    "the quick start saves another image than the DaemonSet's"
                );
                // A real containerd (Debian's), as tests/cri.rs starts it; its only network
                // loopback (this pod needs none).
                let c = Containerd::start(
                    &rig,
                    &json!({"cniVersion": "1.0.0", "name": "qs-lo", "plugins": [{"type": "loopback"}]}),
                );
                let sock = rig.dir.path().join("cri/containerd.sock");
                let mut p = Command::new(&save[0]);
                p.args(podman.opts())
                    .args(&save[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let mut saver = p.spawn().unwrap();
                let out = Command::new(&import[0])
                    .arg("-a")
                    .arg(&sock)
                    .args(&import[1..])
                    .stdin(saver.stdout.take().unwrap())
                    .output()
                    .unwrap();
                let saved = saver.wait_with_output().unwrap();
                assert!(
                    saved.status.success(),
                    "podman save\n{}",
                    output_text(&saved)
                );
                assert!(
                    out.status.success(),
                    "ctr images import\n{}",
                    output_text(&out)
                );
                eprintln!("ctr images import: {}", output_text(&out).trim());
                let ls = run(
                    "ctr",
                    &[
                        "-a",
                        sock.to_str().unwrap(),
                        "-n",
                        "k8s.io",
                        "images",
                        "ls",
                        "-q",
                    ],
                );
                let names = String::from_utf8_lossy(&ls.stdout).into_owned();
                assert!(
                    names.lines().any(|l| l == image),
                    "containerd does not list {image} after the import: {names}\n{}",
                    output_text(&out)
                );
                // The kubelet's view: the CRI resolves the DaemonSet's image name without a pull
                // (CreateContainer never pulls) and runs the plugin from it.
                // A hostNetwork pod, as the DaemonSet's.
                let cri = |args: &[&str]| {
                    let out = c
                        .cri_cmd(args)
                        .env("RHD_CRI_HOST_NETWORK", "1")
                        .output()
                        .unwrap();
                    parse_cri(args, &out)
                };
                let sandbox = cri(&["run", "qs-image"])
                    .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
                let sandbox = c.pod(sandbox["id"].as_str().unwrap());
                let spec = json!({"command": ["/bin/sh", "-c", "sleep 60"]});
                let created = cri(&[
                    "create",
                    &sandbox.id,
                    "qs-image",
                    "install",
                    &image,
                    &spec.to_string(),
                ])
                .unwrap_or_else(|e| panic!("CreateContainer from {image}: {e}\n{}", c.context()));
                let id = created["id"].as_str().unwrap().to_owned();
                c.cri(&["start", &id])
                    .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", c.context()));
                let v = c
                    .cri(&[
                        "exec",
                        &id,
                        "20",
                        "/usr/local/bin/rdma-host-device",
                        "--version",
                    ])
                    .unwrap_or_else(|e| panic!("ExecSync: {e}\n{}", c.context()));
                assert!(
                    v["stdout"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with(&format!("rdma-host-device {} ", env!("CARGO_PKG_VERSION"))),
                    "the plugin in the imported image: {v}"
                );
                let _ = c.cri(&["cstop", &id]);
                let _ = c.cri(&["cremove", &id]);
                c.delete_pod(&sandbox.id);
                containerd = Some(c);
            }
            Step::Label(key, value) => {
                // Stand-in for the API server: the label is the one the DaemonSet selects, and
                // its other selectors are labels every kubelet sets itself.
                let sel = ds["spec"]["template"]["spec"]["nodeSelector"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                assert_eq!(
                    sel.get(key),
                    Some(&json!(value)),
                    "the DaemonSet does not select {key}={value}: {sel:?}"
                );
                for (k, _) in sel.iter().filter(|(k, _)| *k != key) {
                    assert_eq!(
                        k, "kubernetes.io/os",
                        "the DaemonSet selects a label the quick start does not set: {k}"
                    );
                }
            }
            Step::Apply(files) => {
                let docs: Vec<Value> = files.iter().flat_map(|f| yaml_docs(f)).collect();
                let kinds: Vec<&str> = docs
                    .iter()
                    .map(|d| d["kind"].as_str().unwrap_or(""))
                    .collect();
                if kinds.contains(&"DaemonSet") {
                    assert_eq!(kinds, ["ConfigMap", "DaemonSet"], "{files:?}");
                    let n = apply_daemonset(
                        &podman,
                        &dir,
                        &cm0,
                        &ds,
                        &image,
                        release.as_deref().expect("the image comes first"),
                        &nic,
                        &mut kubelet,
                        &all_logs,
                    );
                    node = Some(n);
                } else {
                    let nad = docs
                        .iter()
                        .find(|d| d["kind"] == "NetworkAttachmentDefinition")
                        .expect("a NAD");
                    let p = docs.iter().find(|d| d["kind"] == "Pod").expect("a pod");
                    assert_eq!(kinds.len(), 2, "one NAD and one pod: {kinds:?}");
                    let n = node.as_ref().expect("the DaemonSet comes first");
                    let k = kubelet.as_mut().expect("the device plugin is registered");
                    let (result, net, devinfo, conf, extra) =
                        attach(n, &dir, k, nad, p, &nic, &pod, &cid, &all_logs);
                    add_result = Some((result, net, devinfo));
                    delegate = Some((conf, extra));
                }
            }
            Step::PodExec(_, cmd) => {
                let why = match cmd.first().map(String::as_str) {
                    Some("ibv_devinfo") => {
                        "the pod's RDMA device: needs an RDMA NIC and a runtime; proved in the VM, group cri-exclusive, case `allocated` (ibv_devinfo in a container given the device plugin's allocation)"
                    }
                    Some("sh") if cmd.join(" ").contains("ulimit -l") => {
                        "memlock in the pod: needs an RDMA device and a runtime with NRI or CDI; proved in the VM, group cri-exclusive, case `nri` (node.json's memlock in a container's first process and in one started by `runc exec`, as `kubectl exec` starts it) and case `cdi`, and by tests/nri.rs"
                    }
                    _ => panic!(
                        "the quick start runs {cmd:?} in the pod: teach tests/quickstart.rs what proves it"
                    ),
                };
                not_here.push(format!("kubectl exec -- {}: {why}", cmd.join(" ")));
            }
            Step::NetworkStatus(_) => {
                let (result, net, devinfo) = add_result.as_ref().expect("the pod comes first");
                // Multus reads the CNI device-info file after ADD, if there is one.
                let info = fs::read(n_host(&node, devinfo))
                    .ok()
                    .map(|b| serde_json::from_slice::<Value>(&b).unwrap());
                let status = network_status(&format!("default/{net}"), result, info.clone());
                eprintln!(
                    "network-status: {}",
                    serde_json::to_string_pretty(&status).unwrap()
                );
                assert_eq!(
                    status.len(),
                    1,
                    "one entry for the rail network: {status:?}\n{result}"
                );
                let s = &status[0];
                assert_eq!(s["interface"], "net1", "{s}");
                assert!(
                    s["mac"]
                        .as_str()
                        .is_some_and(|m| m.eq_ignore_ascii_case(&nic.mac)),
                    "the NIC's MAC: {s}"
                );
                // The NAD says cniVersion 1.0.0, whose interfaces carry no mtu (1.1.0's do):
                // Multus then writes none; the pod's net1 has the NAD's 9000 (checked at ADD).
                assert!(s.get("mtu").is_none(), "{s}");
                let ip = s["ips"][0].as_str().unwrap_or("");
                assert!(
                    ip.starts_with("192.168.120."),
                    "an address of the NAD's range: {s}"
                );
                assert!(
                    link(Some(&pod.name), "net1")
                        .is_some_and(|l| l.addrs.iter().any(|a| a.starts_with(&format!("{ip}/")))),
                    "the pod's net1 has {ip}\n{}",
                    dump(Some(&pod.name))
                );
                // A veth has no PCI function and no RDMA device: nothing for device-info (the
                // VM's tests/vm/plugin.sh, case `device-info`, checks it with a real one).
                assert!(
                    info.is_none() && s.get("device-info").is_none(),
                    "device-info for a veth: {s}"
                );
            }
            Step::DaemonSetExec(container, cmd) => {
                assert_eq!(
                    container, "node-report",
                    "the quick start execs in another container: {container}"
                );
                let mut args = vec!["exec".to_string(), container.clone()];
                args.extend(cmd.iter().cloned());
                let out = podman.run(&args);
                let text = output_text(&out);
                eprintln!("{text}");
                assert!(
                    out.status.success(),
                    "podman exec node-report {cmd:?}\n{text}"
                );
                assert!(
                    text.contains(&cid) && text.contains("net1") && text.contains(&nic.name),
                    "inspect does not show {} in the pod as net1 ({cid})\n{text}",
                    nic.name
                );
            }
        }
        timings.push((
            format!("{st:?}").chars().take(40).collect(),
            t0.elapsed().as_secs_f64(),
        ));
    }

    // 5. DEL, as Multus sends it when the pod goes, and the NIC is home.
    let n = node.as_ref().expect("the DaemonSet ran");
    let (conf, extra) = delegate.as_ref().expect("the pod was attached");
    let del = multus_calls(n, dir.path(), "del", conf, &pod.path(), &cid, "net1", extra);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    let left = files_under(&n.host("/var/lib/cni/rdma-host-device"));
    assert!(left.is_empty(), "state left after DEL: {left:?}\n{del}");
    let leases: Vec<PathBuf> = files_under(&n.host("/var/lib/cni/networks"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("192.168."))
        })
        .collect();
    assert!(
        leases.is_empty(),
        "the IP is still leased after DEL: {leases:?}"
    );
    let k = kubelet.as_mut().unwrap();
    ask(
        k,
        json!({"cmd": "devices", "resource": "rdma-host-device.io/rail", "want": {&nic.name: "Healthy"}, "timeout": 5}),
        &all_logs,
    );
    drop(containerd);

    eprintln!(
        "not run here (and where it is proved):\n  {}",
        not_here.join("\n  ")
    );
    for (s, t) in &timings {
        eprintln!("{t:7.1} s  {s}");
    }
    eprintln!(
        "the quick start ran in {:.0} s",
        t_all.elapsed().as_secs_f64()
    );
}

fn n_host(node: &Option<Node>, p: &Path) -> PathBuf {
    node.as_ref().unwrap().host(p.to_str().unwrap())
}

/// `kubectl apply -f conf/k8s/daemonset.yaml`: the operator's node.json, then every container
/// of the DaemonSet this machine can run, in the order a node starts them.
#[allow(clippy::too_many_arguments)]
fn apply_daemonset(
    podman: &Podman,
    dir: &TempDir,
    cm: &Value,
    ds: &Value,
    image: &str,
    bin: &Path,
    nic: &Veth,
    kubelet: &mut Option<StandIn>,
    ctx: &dyn Fn() -> String,
) -> Node {
    // The operator's edit of node.json: the pool, and the NICs pods may have, are the test
    // veth (this machine has no mlx5_core NIC).
    let mut cfg: Value = serde_json::from_str(cm["data"]["node.json"].as_str().unwrap()).unwrap();
    let pools = cfg["devicePlugin"]["pools"]
        .as_array_mut()
        .expect("the ConfigMap's node.json has pools");
    assert_eq!(pools.len(), 1, "{pools:?}");
    pools[0]["selectors"] = json!({"names": [nic.name]});
    cfg["allowedNics"] = json!({"names": [nic.name]});
    let mut cm = cm.clone();
    cm["data"]["node.json"] = json!(serde_json::to_string_pretty(&cfg).unwrap());
    let node = Node::new(dir.path(), &cm, bin);
    let spec = &ds["spec"]["template"]["spec"];
    let names: Vec<String> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default())
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    for name in &names {
        eprintln!("---- container {name}");
        match name.as_str() {
            "install" => {
                let out = podman.run(&podman_args(ds, "install", &node, image, false));
                let log = output_text(&out);
                eprintln!("{log}");
                assert!(out.status.success(), "the install container failed\n{log}");
                for want in [
                    "install.sh: installed /host/opt/cni/bin/rdma-host-device",
                    "install.sh: installed the node configuration /host/etc/rdma-host-device/node.json",
                ] {
                    assert!(log.contains(want), "missing {want:?}\n{log}");
                }
                assert_eq!(
                    fs::read(node.host("/opt/cni/bin/rdma-host-device")).unwrap(),
                    fs::read(bin).unwrap(),
                    "the node's /opt/cni/bin has the image's plugin"
                );
                assert_eq!(
                    serde_json::from_slice::<Value>(
                        &fs::read(node.host("/etc/rdma-host-device/node.json")).unwrap()
                    )
                    .unwrap(),
                    cfg,
                    "the node's node.json is the operator's"
                );
            }
            "uppers-watch" => {
                let out = podman.run(&podman_args(ds, name, &node, image, true));
                assert!(out.status.success(), "uppers-watch\n{}", output_text(&out));
                let sock = node.host("/run/rdma-host-device/uppers.sock");
                wait_for(
                    "uppers-watch's socket",
                    Duration::from_secs(20),
                    ctx,
                    &mut || sock.exists(),
                );
            }
            "device-plugin" => {
                // The kubelet was there first: its Registration socket in the node's
                // /var/lib/kubelet/device-plugins.
                let sockets = node.host(KUBELET_SOCKETS);
                fs::create_dir_all(&sockets).unwrap();
                let stubs = Path::new(TARGET_TMP).join("dp-stubs");
                let mut k = StandIn::start(
                    "device_plugin/kubelet.py",
                    &[sockets.as_os_str()],
                    &[("RHD_DP_STUBS", stubs.as_os_str())],
                    "listening",
                );
                let out = podman.run(&podman_args(ds, name, &node, image, true));
                assert!(out.status.success(), "device-plugin\n{}", output_text(&out));
                let r = ask(
                    &mut k,
                    json!({"cmd": "registered", "count": 1, "timeout": 20}),
                    ctx,
                );
                assert_eq!(r["resource_name"], "rdma-host-device.io/rail", "{r}");
                ask(
                    &mut k,
                    json!({"cmd": "watch", "resource": "rdma-host-device.io/rail"}),
                    ctx,
                );
                ask(
                    &mut k,
                    json!({"cmd": "devices", "resource": "rdma-host-device.io/rail",
                                   "want": {&nic.name: "Healthy"}, "timeout": 10}),
                    ctx,
                );
                *kubelet = Some(k);
            }
            "node-report" => {
                let out = podman.run(&podman_args(ds, name, &node, image, true));
                assert!(out.status.success(), "node-report\n{}", output_text(&out));
                wait_for(
                    "node-report's first report",
                    Duration::from_secs(20),
                    ctx,
                    &mut || {
                        output_text(&podman.run(&["logs", "node-report"]))
                            .contains("attached to pods; state dir")
                    },
                );
            }
            "metrics" => eprintln!(
                "metrics: not run here (it would listen on this machine's :9879); tests/image.rs \
                 runs it from the same image with the YAML's mounts"
            ),
            "nri" => eprintln!(
                "nri: not run here (needs a runtime with NRI, containerd 2.x); tests/nri.rs runs \
                 it against the NRI stand-in"
            ),
            other => {
                panic!("the DaemonSet runs a container tests/quickstart.rs does not know: {other}")
            }
        }
    }
    node
}

/// `kubectl apply` of the NAD and the pod: the kubelet allocates the pod's NIC, Multus
/// delegates to the NAD's config with it. Returns the CNI result, the network's name, the CNI
/// device-info file's path on the node, the delegate's config file and libcni's extra flags.
#[allow(clippy::too_many_arguments)]
fn attach(
    node: &Node,
    dir: &TempDir,
    k: &mut StandIn,
    nad: &Value,
    p: &Value,
    nic: &Veth,
    pod: &Netns,
    cid: &str,
    ctx: &dyn Fn() -> String,
) -> (Value, String, PathBuf, PathBuf, Vec<String>) {
    let resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
        .as_str()
        .expect("the NAD names a device plugin resource");
    let want = p["spec"]["containers"][0]["resources"]["limits"][resource]
        .as_u64()
        .unwrap_or_else(|| panic!("the pod does not ask for {resource}"));
    let networks: Value = serde_json::from_str(
        p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .expect("networks annotation"),
    )
    .unwrap();
    let sel = &networks[0];
    assert_eq!(
        sel["name"], nad["metadata"]["name"],
        "the pod asks for the NAD applied with it"
    );
    let ifname = sel["interface"].as_str().unwrap_or("net1");

    // The kubelet: the device plugin's preferred NICs, then Allocate.
    let pref = ask(
        k,
        json!({"cmd": "preferred", "resource": resource, "available": [nic.name], "size": want}),
        ctx,
    );
    let ids: Vec<String> = pref["ids"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_owned())
        .collect();
    let alloc = ask(
        k,
        json!({"cmd": "allocate", "resource": resource, "containers": [ids]}),
        ctx,
    );
    assert_eq!(
        alloc["responses"][0]["envs"]["RDMA_HOST_DEVICE_RAIL_IDS"],
        nic.name.as_str(),
        "{alloc}"
    );
    let device_id = ids[0].clone();

    // Multus: the NAD's config with the allocated device, into the pod's sandbox.
    let mut conf: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    let net = conf["name"].as_str().unwrap().to_owned();
    assert_eq!(conf["ipam"]["type"], "whereabouts");
    // Stand-in: whereabouts needs a Kubernetes API; host-local on the same range (its data in
    // the node's /var/lib/cni/networks).
    conf["ipam"] = json!({"type": "host-local", "ranges": [[{"subnet": conf["ipam"]["range"]}]]});
    let conf = multus_delegate(conf, Some(&device_id), None);
    let file = dir.path().join("rdma-rail.conf");
    fs::write(&file, serde_json::to_vec_pretty(&conf).unwrap()).unwrap();
    let devinfo = PathBuf::from(format!(
        "/var/run/k8s.cni.cncf.io/devinfo/cni/{net}-{cid}_{ifname}"
    ));
    let extra: Vec<String> = vec![
        "-args".into(),
        format!(
            "IgnoreUnknown=true;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=9a1e-quickstart",
            p["metadata"]["name"].as_str().unwrap()
        ),
        "-cap".into(),
        format!("deviceID={device_id}"),
        "-cap".into(),
        format!("CNIDeviceInfoFile={}", devinfo.display()),
    ];
    let add = multus_calls(
        node,
        dir.path(),
        "add",
        &file,
        &pod.path(),
        cid,
        ifname,
        &extra,
    );
    let result = add.ok();
    let l =
        link(Some(&pod.name), ifname).unwrap_or_else(|| panic!("no {ifname} in the pod\n{add}"));
    assert_eq!(
        l.mac, nic.mac,
        "the allocated NIC is the pod's {ifname}\n{add}"
    );
    assert_eq!(l.mtu, 9000, "the NAD's MTU\n{add}");
    assert!(
        nic.on_host().is_none(),
        "the NIC is still on the host\n{add}"
    );
    // The device plugin keeps the NIC in the pod Healthy.
    std::thread::sleep(Duration::from_millis(600));
    ask(
        k,
        json!({"cmd": "devices", "resource": resource, "want": {&nic.name: "Healthy"}, "timeout": 2}),
        ctx,
    );
    (result, net, devinfo, file, extra)
}
