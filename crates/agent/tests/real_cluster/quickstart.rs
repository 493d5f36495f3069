//! README.md's "Quick start on a cluster", run in order against a real one-node Kubernetes
//! (issue 35; issue 28, item 3, before it). The commands are READ from the README's code blocks,
//! so the README cannot drift from this test: a command the test does not know how to run fails
//! it (`every_quick_start_command_is_one_this_test_runs`, no root), it is not skipped.
//!
//! The cluster is tests/cluster/cluster.sh's (through crates/test-support/src/cluster.rs): Kubernetes
//! 1.37's kube-apiserver, scheduler, controller-manager and kubelet, containerd 2.4 with CDI and
//! NRI, Multus' thin plugin 4.3.0 as the node's CNI, in a network namespace and a private mount
//! namespace in which the node's /opt/cni/bin, /etc/cni/net.d, /var/lib/kubelet, ... are the
//! cluster's own. What is real, step by step:
//!
//! 1. `scripts/setup.sh --for build` as written; `cargo build --release` (or, for a developer's
//!    loop, RHD_CLUSTER_PLUGIN naming the plugin binary to ship, the agent beside it, as
//!    crates/agent/tests/real_cluster/pods.rs takes it; then build-image.sh is given that binary); `deploy/build-image.sh`
//!    (podman on a private storage root through PODMAN_OPTS); `podman save --format oci-archive
//!    IMAGE | ctr -n k8s.io images import -` with the cluster's ctr run inside the node against
//!    the cluster's containerd (`--address`: its socket is in the cluster's directory);
//! 2. `kubectl label node` for real, with this cluster's node name for the README's
//!    gpu-node-1; node.json edited in the ConfigMap as an operator would: the device plugin's
//!    pool and allowedNics select the node's NIC, a veth in the node's network namespace;
//! 3. `kubectl apply -f conf/k8s/daemonset.yaml` (the ConfigMap so edited, the DaemonSet as
//!    shipped): the controller-manager runs it on the labelled node, every container ready
//!    (install, uppers-watch, device-plugin, nri, metrics, node-report), the plugin in the
//!    node's /opt/cni/bin, node.json beside it, the kubelet offering rdma-host-device.io/rail;
//! 4. `kubectl apply` of conf/multus/rdma-rail-device-plugin.yaml and conf/k8s/pod-nccl.yaml,
//!    each changed for what this machine lacks, each change said where it is made: the NAD's
//!    whereabouts becomes host-local on its range (whereabouts is not built for the cluster);
//!    the pod runs busybox (localhost/rhd-busybox:test, imported by cluster.sh) instead of
//!    NVIDIA's PyTorch image, sleeps instead of torchrun, and asks for no nvidia.com/gpu (no
//!    GPU here); its networks annotation and `rdma-host-device.io/rail: 1` are as shipped. The
//!    real scheduler, the kubelet's allocation through our device plugin, Multus' delegation
//!    to our plugin with the allocated deviceID;
//! 5. "See it worked": the README's `kubectl get pod ... network-status` as written (net1 from
//!    default/rdma-rail, the NIC's MAC, a host-local address of the NAD's range; no
//!    device-info: a veth has no PCI function); `kubectl -n kube-system exec ds/rdma-host-device
//!    -c node-report -- rdma-host-device-agent inspect` as written, showing the NIC in the pod
//!    as net1 of rdma-rail (with no false "netns path ... is gone": node-report mounts the
//!    node's /run/netns). Were the NIC not listed (inspect hides virtual links without RDMA,
//!    and a veth whose pod netns it cannot open is one), it is run again with `--all`, having
//!    said so. Then the pod is deleted: the NIC is home with its name, MAC and MTU, no state,
//!    no lease, and offered again.
//!
//! Still not real, and why: the `apt-get install` is apt's simulation (`-s`: a test installs
//! no packages; scripts/setup.sh --for test did); the node's NIC is a veth (no RDMA NIC here),
//! so `kubectl exec ... ibv_devinfo` and `ulimit -l` (the nri container raises memlock only for
//! containers given an RDMA device) are named as not run: the VM's group cri-exclusive proves
//! them (tests/vm/cri.sh, cases `allocated` and `nri`), and device-info with an RDMA NIC is
//! tests/vm/plugin.sh's case `device-info`; whereabouts and the pod's image, as above.
//!
//! Needs root, the cluster parts (scripts/setup.sh --for cluster), podman, busybox-static and
//! the release build (or RHD_CLUSTER_PLUGIN). RHD_CLUSTER_KEEP=1 keeps the cluster to look at.
//! 27 s with the release build current: the cluster up in 11 s, the quick start in 16 s.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

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
    /// `kubectl label node NODE KEY=VALUE`: the README's node, the key, the value.
    Label(String, String, String),
    Apply(Vec<String>),
    /// `kubectl exec POD -- CMD...`
    PodExec(String, Vec<String>),
    /// `kubectl get pod POD -o jsonpath=...network-status...`: the pod, the `-o` argument.
    NetworkStatus(String, String),
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
        ["kubectl", "label", "node", node, label] => {
            let (k, v) = label
                .split_once('=')
                .ok_or(format!("{cmd:?}: no KEY=VALUE"))?;
            Step::Label(node.to_string(), k.to_owned(), v.to_owned())
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
            Step::NetworkStatus(pod.to_string(), jsonpath.to_string())
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
        .map(|c| {
            step(c).unwrap_or_else(|e| {
                panic!("{e}: teach crates/agent/tests/real_cluster/quickstart.rs to run it")
            })
        })
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
            &|s| matches!(s, Step::NetworkStatus(..)),
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

// ------------------------------------------------------------------ the cluster's side

/// The node's NIC for the pod: a veth in the node's network namespace, its peer staying there
/// (this machine has no RDMA NIC), as crates/agent/tests/real_cluster/pods.rs makes them.
const NIC: &str = "rhdrail0";
const PEER: &str = "rhdpeer0";
/// The test pods' image, which tests/cluster/cluster.sh imports into the node's containerd.
const BUSYBOX: &str = "localhost/rhd-busybox:test";

fn yaml_docs(file: &str) -> Vec<Value> {
    let text = fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    yaml::parse_all(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// `ip -j link show dev NAME` in the node's network namespace, if the link is there.
fn node_link(c: &Cluster, name: &str) -> Option<Value> {
    let out = Command::new("ip")
        .args(["-n", &c.netns, "-j", "link", "show", "dev", name])
        .stdin(Stdio::null())
        .output()
        .expect("run ip");
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get(0).cloned()
}

/// The operator's edit of node.json in the ConfigMap (README's step 2): the device plugin's
/// pool and the NICs pods may have are the node's veth, where a real node selects its
/// mlx5_core NICs.
fn node_json_for_this_node(cm: &Value) -> (Value, Value) {
    let mut cfg: Value =
        serde_json::from_str(cm["data"]["node.json"].as_str().expect("node.json")).unwrap();
    let pools = cfg["devicePlugin"]["pools"]
        .as_array_mut()
        .expect("the ConfigMap's node.json has pools");
    assert_eq!(pools.len(), 1, "{pools:?}");
    pools[0]["selectors"] = json!({"names": [NIC]});
    cfg["allowedNics"] = json!({"names": [NIC]});
    let mut cm = cm.clone();
    cm["data"]["node.json"] = json!(serde_json::to_string_pretty(&cfg).unwrap());
    (cm, cfg)
}

/// conf/k8s/pod-nccl.yaml for this machine, each change for a thing it lacks; its name, its
/// networks annotation, its NIC limit, its env and IPC_LOCK are as shipped.
fn pod_for_this_machine(p: &Value) -> Value {
    let mut p = p.clone();
    let c = &mut p["spec"]["containers"][0];
    // NVIDIA's PyTorch image (nvcr.io: no registry here): the busybox cluster.sh imported into
    // the node's containerd, which is only there (Never: no pull is tried).
    c["image"] = json!(BUSYBOX);
    c["imagePullPolicy"] = json!("Never");
    // torchrun on 8 GPUs: the same entrypoint (it prints NCCL_IB_HCA and NCCL_IB_GID_INDEX,
    // which CDI sets), then a sleep.
    let cmd = c["command"][2].as_str().expect("sh -c SCRIPT").to_owned();
    let torchrun = "exec torchrun --nproc_per_node=8 /workspace/train.py";
    assert!(cmd.ends_with(torchrun), "pod-nccl.yaml's command: {cmd}");
    c["command"][2] = json!(cmd.replace(torchrun, "exec sleep 3600"));
    // No nvidia.com/gpu: no GPU here (nor NVIDIA's device plugin); the NIC limit as shipped.
    let limits = c["resources"]["limits"]
        .as_object_mut()
        .expect("pod-nccl.yaml's limits");
    assert!(limits.remove("nvidia.com/gpu").is_some(), "{limits:?}");
    assert_eq!(
        limits
            .get("rdma-host-device.io/rail")
            .and_then(Value::as_u64),
        Some(1),
        "{limits:?}"
    );
    // busybox's sleep as PID 1 ignores SIGTERM: one second, not 30, before the kubelet kills.
    p["spec"]["terminationGracePeriodSeconds"] = json!(1);
    p
}

// ------------------------------------------------------------------ the run

#[test]
fn the_quick_start_runs_in_order_on_a_real_cluster() {
    require_root();
    let steps = steps();
    let (c, _turn) = Cluster::shared();
    let t_all = Instant::now();
    let podman = Podman::new("quickstart");
    let (_, ds) = manifests();
    let image = daemonset_image(&ds);
    // RHD_CLUSTER_PLUGIN (as crates/agent/tests/real_cluster/pods.rs): the developer's loop ships these binaries
    // (say target/debug's) instead of the release build.
    let developer_bin = std::env::var_os("RHD_CLUSTER_PLUGIN").map(PathBuf::from);

    // The node's NIC, there before the DaemonSet as a real node's NICs are.
    c.ip(&["link", "add", NIC, "type", "veth", "peer", "name", PEER]);
    c.ip(&["link", "set", NIC, "mtu", &ORIG_MTU.to_string()]);
    c.ip(&["link", "set", NIC, "up"]);
    c.ip(&["link", "set", PEER, "up"]);
    let mac = node_link(c, NIC).expect("the NIC")["address"]
        .as_str()
        .expect("its MAC")
        .to_owned();

    let mut pod_name: Option<String> = None;
    let mut not_here: Vec<String> = Vec::new();
    let mut timings: Vec<(String, f64)> = Vec::new();

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
                // Not as written: apt's own simulation (a test installs no packages);
                // scripts/setup.sh --for test installed them.
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
            Step::ReleaseBuild => match &developer_bin {
                Some(b) => eprintln!(
                    "RHD_CLUSTER_PLUGIN={}: no release build, the image ships it",
                    b.display()
                ),
                None => {
                    release_binary();
                }
            },
            Step::BuildImage => {
                let mut cmd = Command::new(repo().join("deploy/build-image.sh"));
                // As written: no argument (dist/ if scripts/release.sh made one, else the
                // release build); the developer's loop names its binary.
                if let Some(b) = &developer_bin {
                    cmd.arg(b);
                }
                let out = cmd
                    .env("PODMAN_OPTS", podman.opts().join(" "))
                    .env_remove("IMAGE")
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                let report = output_text(&out);
                assert!(out.status.success(), "deploy/build-image.sh\n{report}");
                assert!(
                    report.contains(&format!("image: {image}\n")),
                    "the build tagged something else than the DaemonSet's {image}:\n{report}"
                );
            }
            Step::LoadImage(save, import) => {
                assert_eq!(
                    save[4], image,
                    "the quick start saves another image than the DaemonSet's"
                );
                // As written, on the node: podman's archive piped into the node's ctr, which
                // talks to the cluster's containerd at its own socket (a node's ctr finds
                // /run/containerd/containerd.sock by default).
                let mut saver = Command::new(&save[0])
                    .args(podman.opts())
                    .args(&save[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                let sock = c.dir.join("run/containerd.sock");
                let out = c
                    .inside(c.bin("ctr").to_str().expect("utf-8"))
                    .arg("--address")
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
                let names = c.on_node(
                    c.bin("ctr").to_str().unwrap(),
                    &[
                        "--address",
                        sock.to_str().unwrap(),
                        "-n",
                        "k8s.io",
                        "images",
                        "ls",
                        "-q",
                    ],
                );
                assert!(
                    names.lines().any(|l| l == image),
                    "the node's containerd does not list {image} after the import: {names}"
                );
            }
            Step::Label(readme_node, key, value) => {
                // The README's node is gpu-node-1; this cluster's one node has its own name.
                eprintln!("{readme_node} is this cluster's {}", c.node);
                c.k(&["label", "node", &c.node, &format!("{key}={value}")]);
            }
            Step::Apply(files) => {
                let docs: Vec<Value> = files.iter().flat_map(|f| yaml_docs(f)).collect();
                let kinds: Vec<&str> = docs
                    .iter()
                    .map(|d| d["kind"].as_str().unwrap_or(""))
                    .collect();
                if kinds.contains(&"DaemonSet") {
                    assert_eq!(kinds, ["ConfigMap", "DaemonSet"], "{files:?}");
                    apply_daemonset(c, &docs);
                } else {
                    assert_eq!(kinds.len(), 2, "one NAD and one pod: {kinds:?}");
                    let nad = docs
                        .iter()
                        .find(|d| d["kind"] == "NetworkAttachmentDefinition")
                        .expect("a NAD");
                    let p = docs.iter().find(|d| d["kind"] == "Pod").expect("a pod");
                    pod_name = Some(apply_nad_and_pod(c, nad, p));
                }
            }
            Step::PodExec(_, cmd) => {
                let why = match cmd.first().map(String::as_str) {
                    Some("ibv_devinfo") => {
                        "the pod's RDMA device: needs an RDMA NIC (the node's NIC here is a veth); proved in the VM, group cri-exclusive, case `allocated` (ibv_devinfo in a container given the device plugin's allocation)"
                    }
                    Some("sh") if cmd.iter().any(|a| a.contains("ulimit -l")) => {
                        "node.json's memlock: the nri container raises it for containers given an RDMA device, which a veth has none of; proved in the VM, group cri-exclusive, case `nri` (a container's processes, a `runc exec`'d one too)"
                    }
                    _ => panic!(
                        "the quick start runs {cmd:?} in the pod: teach crates/agent/tests/real_cluster/quickstart.rs what proves it"
                    ),
                };
                not_here.push(format!("kubectl exec -- {}: {why}", cmd.join(" ")));
            }
            Step::NetworkStatus(pod, output) => {
                assert_eq!(
                    Some(pod),
                    pod_name.as_ref(),
                    "the pod the quick start applied"
                );
                // As written.
                let text = c.k(&["get", "pod", pod, "-o", output]);
                eprintln!("network-status: {text}");
                let status: Vec<Value> = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("network-status is not a JSON list: {e}: {text}"));
                let s = status
                    .iter()
                    .find(|s| s["interface"] == "net1")
                    .unwrap_or_else(|| panic!("no net1 in network-status: {text}"));
                assert_eq!(s["name"], "default/rdma-rail", "{s}");
                assert!(
                    s["mac"]
                        .as_str()
                        .is_some_and(|m| m.eq_ignore_ascii_case(&mac)),
                    "net1 is the node's {NIC} ({mac}): {s}"
                );
                let ip = s["ips"][0].as_str().unwrap_or_default();
                assert!(
                    ip.starts_with("192.168.120."),
                    "an address of the NAD's range: {s}"
                );
                // A veth has no PCI function and no RDMA device: nothing for device-info (the
                // VM's tests/vm/plugin.sh, case `device-info`, checks it with a real one).
                assert!(
                    s.get("device-info").is_none(),
                    "device-info for a veth: {s}"
                );
                // The pod's own view: net1 has the address and the NAD's MTU; the NIC left the
                // node.
                let addr = c.k(&["exec", pod, "--", "ip", "-o", "addr", "show", "dev", "net1"]);
                assert!(
                    addr.contains(&format!(" {ip}/")),
                    "the pod's net1 has {ip}: {addr}"
                );
                let l = c.k(&["exec", pod, "--", "ip", "-o", "link", "show", "dev", "net1"]);
                assert!(l.contains(" mtu 9000 "), "the NAD's MTU on net1: {l}");
                assert!(
                    node_link(c, NIC).is_none(),
                    "{NIC} is still in the node's namespace"
                );
            }
            Step::DaemonSetExec(container, cmd) => {
                let pod = pod_name.as_deref().expect("the pod comes first");
                let exec = |cmd: &[String]| {
                    let mut args: Vec<String> = [
                        "-n",
                        "kube-system",
                        "exec",
                        "ds/rdma-host-device",
                        "-c",
                        container,
                        "--",
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                    args.extend(cmd.iter().cloned());
                    c.k(&args)
                };
                // As written.
                let mut text = exec(cmd);
                eprintln!("{text}");
                // The pod as inspect names it: its sandbox, holding the NIC as net1 of the
                // NAD's network.
                let shows = |t: &str| {
                    t.lines().any(|l| {
                        l.starts_with(NIC) && l.contains("in pod") && l.ends_with(" as net1")
                    }) && t.contains(" as net1 in /var/run/netns/")
                        && t.contains("(network rdma-rail)")
                };
                if !shows(&text) {
                    // inspect hides virtual links without RDMA unless --all: the node's NIC
                    // here is a veth, where a real node's is an RDMA NIC it always lists.
                    assert!(
                        text.contains("--all shows them"),
                        "inspect neither shows {NIC} in {pod} nor says it hid links:\n{text}"
                    );
                    let mut all = cmd.clone();
                    all.push("--all".into());
                    text = exec(&all);
                    eprintln!("with --all (the NIC is a veth):\n{text}");
                }
                assert!(
                    shows(&text),
                    "inspect does not show {NIC} in the pod {pod} as net1\n{text}"
                );
                // Its "Runtime:" line sees containerd's NRI socket (node-report mounts the
                // node's /var/run/nri): before that mount it said the socket was absent and
                // advised turning NRI on, on a node where it is on.
                let rt = text
                    .lines()
                    .find(|l| l.starts_with("Runtime:"))
                    .unwrap_or_else(|| panic!("inspect names no runtime (hostPID)\n{text}"));
                assert!(
                    rt.contains("nri.sock there"),
                    "inspect in node-report does not see the runtime's NRI socket: {rt}\n{text}"
                );
                // The node-report container sees the pods' netns paths (it mounts the node's
                // /run/netns): no false "the pod's netns path ... is gone".
                assert!(
                    !text.contains("netns path"),
                    "inspect in node-report thinks the pod's netns is gone\n{text}"
                );
            }
        }
        timings.push((
            format!("{st:?}").chars().take(40).collect(),
            t0.elapsed().as_secs_f64(),
        ));
    }

    // The pod deleted: Multus' DEL through the plugin, and the NIC is home.
    let t0 = Instant::now();
    let pod = pod_name.expect("the quick start applied a pod");
    c.k(&["delete", "pod", &pod, "--wait=true", "--timeout=120s"]);
    let home = c.wait(&format!("{NIC} home after the pod's deletion"), 60, || {
        node_link(c, NIC)
    });
    assert_eq!(
        home["mtu"], ORIG_MTU,
        "{NIC} came home with another MTU: {home}"
    );
    assert!(
        home["address"]
            .as_str()
            .is_some_and(|m| m.eq_ignore_ascii_case(&mac)),
        "{home}"
    );
    let state = c.on_node("find", &["/var/lib/cni/rdma-host-device", "-type", "f"]);
    assert!(state.trim().is_empty(), "state left after DEL: {state}");
    let leases = c.on_node("find", &["/var/lib/cni/networks", "-name", "192.168.*"]);
    assert!(
        leases.trim().is_empty(),
        "the IP is still leased after DEL: {leases}"
    );
    // Offered again.
    c.wait("the node offers its NIC again", 60, || {
        let v = c.get(&["node", &c.node]);
        (v["status"]["allocatable"]["rdma-host-device.io/rail"] == "1").then_some(())
    });
    timings.push((
        "the pod deleted, the NIC home".into(),
        t0.elapsed().as_secs_f64(),
    ));

    eprintln!(
        "not run here (and where it is proved):\n  {}",
        not_here.join("\n  ")
    );
    for (s, t) in &timings {
        eprintln!("{t:7.1} s  {s}");
    }
    eprintln!(
        "the quick start ran in {:.0} s (the cluster's start not counted)",
        t_all.elapsed().as_secs_f64()
    );
}

/// `kubectl apply -f conf/k8s/daemonset.yaml` with the operator's node.json: the
/// controller-manager runs the DaemonSet on the labelled node, every container ready; the
/// device plugin registered with the kubelet, which offers the NIC.
fn apply_daemonset(c: &Cluster, docs: &[Value]) {
    let (cm, cfg) = node_json_for_this_node(&docs[0]);
    c.apply(&cm.to_string());
    c.apply(&docs[1].to_string());
    c.wait("DaemonSet rdma-host-device ready on the node", 240, || {
        let v = c.get(&["-n", "kube-system", "daemonset", "rdma-host-device"]);
        (v["status"]["numberReady"] == 1).then_some(())
    });
    // install: the image's plugin in the node's /opt/cni/bin (Multus' binDir), the node
    // configuration beside it.
    let version = c.on_node("/opt/cni/bin/rdma-host-device", &["--version"]);
    assert!(
        version.starts_with(&format!("rdma-host-device {} ", env!("CARGO_PKG_VERSION"))),
        "the node's plugin: {version}"
    );
    let installed: Value =
        serde_json::from_str(&c.on_node("cat", &["/etc/rdma-host-device/node.json"]))
            .expect("the node's node.json");
    assert_eq!(installed, cfg, "the node's node.json is the operator's");
    c.wait("the node offers rdma-host-device.io/rail", 90, || {
        let v = c.get(&["node", &c.node]);
        (v["status"]["allocatable"]["rdma-host-device.io/rail"] == "1").then_some(())
    });
}

/// `kubectl apply -f conf/multus/rdma-rail-device-plugin.yaml -f conf/k8s/pod-nccl.yaml`, for
/// this machine (nad_for_this_cluster, pod_for_this_machine): the scheduler places the pod,
/// the kubelet allocates the NIC through the device plugin, Multus attaches rdma-rail with
/// it. Returns the pod's name.
fn apply_nad_and_pod(c: &Cluster, nad: &Value, p: &Value) -> String {
    c.apply(&with_host_local(nad).to_string());
    let p = pod_for_this_machine(p);
    let name = p["metadata"]["name"].as_str().expect("a name").to_owned();
    c.apply(&p.to_string());
    c.wait(&format!("pod {name} running"), 180, || {
        c.pod_running("default", &name).then_some(())
    });
    // The kubelet's allocation reached the container: the device plugin's variable names the
    // NIC (a veth's ID is its name).
    let env = c.k(&["exec", &name, "--", "env"]);
    assert!(
        env.lines()
            .any(|l| l == format!("RDMA_HOST_DEVICE_RAIL_IDS={NIC}")),
        "the pod's environment: {env}"
    );
    // The per-NIC env of node.json's devicePlugin.nicEnv, as ADD completed it before the
    // container was created (a veth: no RDMA device, so the generation alone).
    assert!(
        env.lines()
            .any(|l| l == "RDMA_HOST_DEVICE_METADATA_GENERATION=2"),
        "the pod's environment: {env}"
    );
    name
}
