//! Leaks collected without the runtime's help, through the real cluster (tests/cluster/cluster.sh:
//! Kubernetes 1.37's kubelet, containerd 2.4, Multus' thin plugin 4.3.0, host-local 1.10.0).
//! containerd never calls a CNI plugin's GC, so an attachment whose sandbox went without a DEL
//! reaching the plugin keeps its NIC and its IPAM lease for ever, unless the agent collects it:
//! conf/k8s/daemonset.yaml as shipped (its node.json's `gc` with a short period; cluster.sh links
//! containerd's well-known socket path to its socket), a pod given a NIC, the sandbox
//! removed so that DEL never reaches us, and the agent's next round gives the NIC back, frees the
//! lease, and leaves a live pod of the same network alone.
//!
//! How DEL is kept from us, honestly: Multus answers DEL with success without calling any
//! delegate when its cache file for the sandbox (/var/lib/cni/multus/<sandbox ID>) is gone and the
//! pod is gone from the API server ("cannot properly delete", multus.go:1085-1088 of 4.3.0). The
//! test removes that cache file and force-deletes the pod: the kubelet stops the sandbox as usual
//! (containerd's teardown calls Multus, which returns without calling us) and the test removes
//! it with the CRI's RemovePodSandbox (what the kubelet's own sandbox GC does a minute later).
//!
//! One stand-in, for the kernel: a physical NIC comes back to the host's namespace (as `net1`,
//! with our alias tag) when its pod's netns dies; a veth would die with it. So the test moves
//! net1 to the node's namespace just before the pod goes, as the kernel would do just after.
//!
//! Needs root, the cluster parts (scripts/setup.sh --for cluster), podman, the venv with grpcio
//! (for the CRI client, tests/cri/cri.py), and the release build (deploy/build-image.sh ships it;
//! RHD_CLUSTER_PLUGIN names other binaries).

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

const NICS: [&str; 2] = ["rhdgc0", "rhdgc1"];
/// Both NADs' network: the live pod's attachment is of the same network as the leaked one.
const NET: &str = "gc-rail";
const PERIOD: u64 = 5;
const GRACE: u64 = 10;

/// The image, daemonset.yaml applied with node.json's gc period short, and its pod ready.
fn install(c: &Cluster) {
    c.add_nics(&NICS);
    c.image_from_this_build("cluster-gc-image", "rdma-host-device-image.tar");
    c.label_rdma_capable();
    let mut ds = conf_docs("conf/k8s/daemonset.yaml");
    for d in ds.iter_mut() {
        if d["kind"] == "ConfigMap" {
            let mut node: Value =
                serde_json::from_str(d["data"]["node.json"].as_str().expect("node.json"))
                    .expect("node.json parses");
            node["allowedNics"] = json!({"names": NICS});
            // As shipped but for the period and grace: a test cannot wait 5 minutes.
            assert_eq!(
                node["gc"]["criSocket"], "/run/containerd/containerd.sock",
                "daemonset.yaml's node.json has gc"
            );
            node["gc"]["periodSeconds"] = json!(PERIOD);
            node["gc"]["graceSeconds"] = json!(GRACE);
            d["data"]["node.json"] = json!(node.to_string());
        }
    }
    for d in &ds {
        c.apply(&d.to_string());
    }
    c.wait("DaemonSet rdma-host-device ready on the node", 240, || {
        let v = c.get(&["-n", "kube-system", "daemonset", "rdma-host-device"]);
        (v["status"]["numberReady"] == 1).then_some(())
    });
}

/// A NAD of network NET taking `nic`, host-local on one range shared by both NADs.
fn nad(name: &str, nic: &str) -> String {
    let conf = json!({"cniVersion": "1.0.0", "name": NET, "type": "rdma-host-device",
        "device": nic, "ipam": {"type": "host-local", "ranges": [[{"subnet": "192.168.131.0/24"}]]}});
    json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"config": conf.to_string()}})
    .to_string()
}

fn pod(name: &str, network: &str) -> String {
    let networks = json!([{"name": network, "interface": "net1"}]).to_string();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "localhost/rhd-busybox:test",
                "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"]}]}
    })
    .to_string()
}

/// The node's path `p` as seen from here (cluster.sh backs the node's paths by DIR/node/...).
fn node_path(c: &Cluster, p: &str) -> PathBuf {
    c.dir.join("node").join(p.trim_start_matches('/'))
}

/// Our attachment record of pod `name`, if any.
fn record_of(c: &Cluster, name: &str) -> Option<Value> {
    let dir = node_path(c, "/var/lib/cni/rdma-host-device");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_slice::<Value>(&std::fs::read(e.path()).ok()?).ok())
        .find(|r| r["pod"]["name"] == name)
}

/// When pod `name`'s attachment record was last written (its state file's time).
fn record_written(c: &Cluster, name: &str) -> SystemTime {
    let dir = node_path(c, "/var/lib/cni/rdma-host-device");
    std::fs::read_dir(dir)
        .expect("the state dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .find(|e| {
            std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|r| r["pod"]["name"] == name)
        })
        .and_then(|e| e.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("no record of {name}"))
}

/// host-local's lease files of network NET held by `sandbox`.
fn leases_of(c: &Cluster, sandbox: &str) -> Vec<String> {
    let dir = node_path(c, &format!("/var/lib/cni/networks/{NET}"));
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_to_string(e.path())
                        .is_ok_and(|t| t.lines().next() == Some(sandbox))
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// One CRI call to the node's containerd (tests/cri/cri.py), its JSON.
fn cri(c: &Cluster, args: &[&str]) -> Value {
    let out = std::process::Command::new(venv_python())
        .arg(repo().join("tests/cri/cri.py"))
        .arg(c.dir.join("run/containerd.sock"))
        .args(args)
        .output()
        .expect("run cri.py");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("cri.py {args:?}: {}", output_text(&out)))
}

/// The sandbox's state in the runtime's list, or None when it is not listed.
fn sandbox_state(c: &Cluster, id: &str) -> Option<String> {
    cri(c, &["list"])["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|s| s["id"] == id)
        .map(|s| s["state"].as_str().unwrap_or_default().to_owned())
}

/// The exporter's /metrics on the node.
fn metrics(c: &Cluster) -> String {
    let out = c
        .inside("curl")
        .args(["-sS", "--max-time", "10", "http://127.0.0.1:9879/metrics"])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A sample's value in the exposition (0 when absent).
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn agent_log(c: &Cluster) -> String {
    let out = c.kubectl(&[
        "-n",
        "kube-system",
        "logs",
        "ds/rdma-host-device",
        "-c",
        "metrics",
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const COLLECTED: &str = "rdma_host_device_gc_collected_total{network=\"gc-rail\"}";
const ROUNDS: &str = "rdma_host_device_gc_rounds_total{outcome=\"done\"}";

#[test]
fn an_attachment_whose_sandbox_vanished_without_del_is_collected_and_a_live_pods_is_not() {
    let (c, _turn) = Cluster::shared();
    install(c);
    c.apply(&nad("gc-a", NICS[0]));
    c.apply(&nad("gc-b", NICS[1]));
    c.apply(&pod("leaky", "gc-a"));
    c.apply(&pod("live", "gc-b"));
    for p in ["leaky", "live"] {
        c.wait(&format!("pod {p} running"), 180, || {
            c.pod_running("default", p).then_some(())
        });
    }
    let leaky = record_of(c, "leaky").expect("leaky's attachment record");
    let live = record_of(c, "live").expect("live's attachment record");
    let sandbox = leaky["containerId"]
        .as_str()
        .expect("containerId")
        .to_owned();
    let live_sandbox = live["containerId"]
        .as_str()
        .expect("containerId")
        .to_owned();
    assert_eq!(leaky["hostName"], NICS[0], "{leaky}");
    assert!(!c.nic_in_node(NICS[0]) && !c.nic_in_node(NICS[1]));
    assert_eq!(leases_of(c, &sandbox).len(), 1, "leaky's lease");
    assert_eq!(leases_of(c, &live_sandbox).len(), 1, "live's lease");
    // The GC runs and keeps its hands off both while the runtime lists their sandboxes.
    c.wait("two GC rounds done", 60, || {
        (sample(&metrics(c), ROUNDS) >= 2).then_some(())
    });
    assert_eq!(sample(&metrics(c), COLLECTED), 0);
    assert!(record_of(c, "leaky").is_some() && record_of(c, "live").is_some());

    // Keep DEL from us (Multus' cache gone, the pod gone from the API server), and stand in
    // for the kernel's return of a physical NIC from the dying netns.
    let cache = node_path(c, &format!("/var/lib/cni/multus/{sandbox}"));
    std::fs::remove_file(&cache)
        .unwrap_or_else(|e| panic!("Multus' cache {}: {e}", cache.display()));
    let netns = leaky["netns"]
        .as_str()
        .expect("netns")
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    c.on_node(
        "ip",
        &[
            "-n",
            &netns,
            "link",
            "set",
            "net1",
            "netns",
            &c.holder.to_string(),
        ],
    );
    assert!(
        c.nic_in_node("net1"),
        "net1 on the node, as the kernel returns it"
    );
    c.k(&[
        "-n",
        "default",
        "delete",
        "pod",
        "leaky",
        "--grace-period=0",
        "--force",
    ]);
    // The kubelet stops the sandbox (teardown: Multus answers without calling us); the CRI's
    // RemovePodSandbox removes it, as the kubelet's sandbox GC would.
    c.wait("the kubelet stops leaky's sandbox", 60, || {
        (sandbox_state(c, &sandbox).as_deref() != Some("SANDBOX_READY")).then_some(())
    });
    if sandbox_state(c, &sandbox).is_some() {
        let r = cri(c, &["remove", &sandbox]);
        assert!(r.get("error").is_none(), "RemovePodSandbox: {r}");
    }
    let gone_at = SystemTime::now();
    assert_eq!(
        sandbox_state(c, &sandbox),
        None,
        "the runtime still lists it"
    );
    // Our DEL never ran: the record and the lease are still there.
    assert!(record_of(c, "leaky").is_some(), "a DEL reached the plugin");
    assert_eq!(leases_of(c, &sandbox).len(), 1);
    // Collectable from when both hold: no sandbox, and a record older than the grace.
    let eligible = gone_at.max(record_written(c, "leaky") + Duration::from_secs(GRACE));

    // Within a period of that (and a round's work): the NIC home under its name and MTU, the
    // record gone, the lease freed, the metric and the log line.
    c.wait("leaky's attachment collected", GRACE + PERIOD + 20, || {
        (record_of(c, "leaky").is_none() && c.nic_in_node(NICS[0])).then_some(())
    });
    let now = SystemTime::now();
    let after_gone = now.duration_since(gone_at).unwrap_or_default();
    let after_eligible = now.duration_since(eligible).unwrap_or_default();
    eprintln!(
        "collected {:.1} s after the sandbox left the runtime's list, {:.1} s after it became collectable (grace {GRACE} s, period {PERIOD} s)",
        after_gone.as_secs_f64(),
        after_eligible.as_secs_f64()
    );
    assert!(
        after_eligible <= Duration::from_secs(PERIOD + 3),
        "collected {after_eligible:?} after it became collectable; the period is {PERIOD} s"
    );
    c.assert_home(NICS[0]);
    assert!(!c.nic_in_node("net1"), "net1 still on the node");
    assert!(leases_of(c, &sandbox).is_empty(), "leaky's lease not freed");
    let text = metrics(c);
    assert_eq!(sample(&text, COLLECTED), 1, "{text}");
    let log = agent_log(c);
    assert!(
        log.contains(&format!("gc: collected {sandbox}/net1 (pod default/leaky)")),
        "{log}"
    );

    // The live pod of the same network, across several more rounds: untouched.
    let rounds = sample(&text, ROUNDS);
    c.wait("three more GC rounds", 4 * PERIOD + 30, || {
        (sample(&metrics(c), ROUNDS) >= rounds + 3).then_some(())
    });
    assert!(c.pod_running("default", "live"));
    assert!(record_of(c, "live").is_some(), "live's record");
    assert!(!c.nic_in_node(NICS[1]), "live's NIC left its pod");
    let live_ns = live["netns"]
        .as_str()
        .expect("netns")
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    c.on_node("ip", &["-n", &live_ns, "link", "show", "dev", "net1"]);
    assert_eq!(leases_of(c, &live_sandbox).len(), 1, "live's lease");
    assert_eq!(sample(&metrics(c), COLLECTED), 1);

    for l in agent_log(c).lines().filter(|l| l.contains("gc:")).take(12) {
        eprintln!("agent: {l}");
    }
    c.k(&[
        "-n",
        "default",
        "delete",
        "pod",
        "live",
        "--wait=true",
        "--timeout=120s",
    ]);
    c.wait("live's NIC home after its deletion", 60, || {
        c.nic_in_node(NICS[1]).then_some(())
    });
}
