//! tests/give_back/upgrade.rs's hand-over through a real cluster (tests/cluster/cluster.sh: Kubernetes
//! 1.37, containerd 2.4, Multus thin 4.3.0): the DaemonSet of conf/k8s/daemonset.yaml updated
//! and rolled back by the controller-manager while a pod holds a NIC, and the pod deleted by
//! the kubelet afterwards, so the other version's plugin DELs what one version ADDed:
//! - a rolling update: the DaemonSet at the previous release's image, a pod given a NIC by the
//!   device plugin and the previous plugin (Multus, NAD rdma-rail); `kubectl set image` to this
//!   build's image, `rollout status`: the node's /opt/cni/bin/rdma-host-device is this build;
//!   the pod deleted: this build DELs the previous release's attachment;
//! - a rollback: this build installed, a pod attached by it; `kubectl rollout undo`: the node's
//!   plugin is the previous release's again; the pod deleted: the previous release DELs this
//!   build's attachment.
//!
//! After each DEL: the NIC is home in the node's namespace under its name with ORIG_MTU, its
//! host-local lease is gone from /var/lib/cni/networks/rdma-rail, and its state record from
//! node.json's stateDir.
//!
//! The previous release's plugin is `$RHD_PREVIOUS_PLUGIN` (scripts/test.sh exports it), else
//! what scripts/previous-release.sh builds; if neither gives one, a plain `cargo test` skips
//! (loudly), under scripts/test.sh or CI it fails. Its image, `localhost/rdma-host-device:previous`,
//! carries that plugin with this build's agent (the plugin is what changes hands); this build's
//! image is made from `$RHD_CLUSTER_PLUGIN` (e.g. target/debug/rdma-host-device) or the release
//! build, with the agent beside it. The node's NICs are veths (no RDMA here) and whereabouts
//! becomes host-local on the NAD's range, as in crates/agent/tests/real_cluster/pods.rs.
//!
//! One test function: the rollback starts where the update ended. Needs root, the cluster parts
//! (scripts/setup.sh --for cluster), podman.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The node's NICs for pods: veths whose peers stay in the node's namespace.
const NICS: [&str; 2] = ["rhdrail0", "rhdrail1"];
const PREVIOUS_IMAGE: &str = "localhost/rdma-host-device:previous";
/// The name conf/k8s/daemonset.yaml uses.
const CURRENT_IMAGE: &str = "localhost/rdma-host-device:0.1.0";
const PREVIOUS_ENV: &str = "RHD_PREVIOUS_PLUGIN";
const DS: &str = "ds/rdma-host-device";
const STATE_DIR: &str = "/var/lib/cni/rdma-host-device";
const LEASES: &str = "/var/lib/cni/networks/rdma-rail";

/// The node configuration a user of the previous release had: its daemonset.yaml's node.json
/// (that release refuses unknown keys, and knows neither `cdiHook` nor `dra`), with the pool
/// and allowedNics naming this node's NICs.
fn previous_node_json() -> Value {
    json!({
        "stateDir": STATE_DIR,
        "logDir": "/var/log/rdma-host-device",
        "ipamPlugins": ["host-local", "static", "dhcp", "whereabouts"],
        "allowedNics": {"names": NICS},
        "devicePlugin": {"pools": [
            {"resourceName": "rdma-host-device.io/rail", "selectors": {"names": NICS}}
        ]}
    })
}

/// The previous release's plugin, or `None` (said on stderr) where a skip is allowed.
fn previous() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PREVIOUS_ENV) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "${PREVIOUS_ENV} = {} is no file", p.display());
        return Some(p);
    }
    let out = Command::new(repo().join("scripts/previous-release.sh"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run scripts/previous-release.sh");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && path.is_file() {
        return Some(path);
    }
    let why = format!(
        "${PREVIOUS_ENV} is not set and scripts/previous-release.sh gave no plugin:\n{}",
        output_text(&out)
    );
    if let Some(var) = must_run() {
        panic!("{why}\n(${var} is set: this test may not skip)");
    }
    let _ = std::io::stderr().write_all(format!("SKIPPED in cluster_upgrade: {why}\n").as_bytes());
    None
}

/// The sha256 of a file on this machine.
fn sha256(path: &Path) -> String {
    let out = run("sha256sum", &[path.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "sha256sum: {}", output_text(&out));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a sum")
        .to_owned()
}

/// The sha256 of the plugin the DaemonSet installed on the node.
fn installed_sha256(c: &Cluster) -> String {
    c.on_node("sha256sum", &["/opt/cni/bin/rdma-host-device"])
        .split_whitespace()
        .next()
        .expect("a sum")
        .to_owned()
}

/// The names in a directory of the node (empty if it does not exist).
fn ls_in_node(c: &Cluster, dir: &str) -> Vec<String> {
    let out = c.inside("ls").args(["-1A", dir]).output().expect("ls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The state records of the node's stateDir (`<container>:<ifname>.json`).
fn records(c: &Cluster) -> Vec<String> {
    ls_in_node(c, STATE_DIR)
        .into_iter()
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .collect()
}

/// Every image of the DaemonSet's containers and init containers.
fn ds_images(c: &Cluster) -> Vec<String> {
    let v = c.get(&["-n", "kube-system", DS]);
    let spec = &v["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default())
        .map(|c| c["image"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `kubectl rollout status` until the DaemonSet's pods all run its current template.
fn rolled_out(c: &Cluster, what: &str) {
    let out = c.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        DS,
        "--timeout=240s",
    ]);
    if !out.status.success() {
        let pods = c.kubectl(&["get", "pods", "-A", "-o", "wide"]);
        panic!(
            "{what}: rollout status: {}\n--- pods:\n{}\n--- kubelet log:\n{}",
            output_text(&out),
            String::from_utf8_lossy(&pods.stdout),
            c.log_tail("kubelet", 40)
        );
    }
}

/// What one pod holds: its NIC (by its node name), its IP, the state records it added.
struct Attachment {
    pod: String,
    nic: String,
    ip: String,
    records: Vec<String>,
}

fn pod_spec(name: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"k8s.v1.cni.cncf.io/networks": "[{\"name\": \"rdma-rail\", \"interface\": \"net1\"}]"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "localhost/rhd-busybox:test",
                "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"],
                "resources": {"limits": {"rdma-host-device.io/rail": "1"}},
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": true,
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
        }
    })
    .to_string()
}

/// A pod given one NIC through the device plugin and the installed plugin (`by`, for the
/// messages): running, its net1 the NIC the kubelet allocated, with the NAD's MTU and an
/// address of its range, its lease and state record on the node.
fn attach(c: &Cluster, pod: &str, by: &str) -> Attachment {
    c.wait(
        "the node offers both NICs as rdma-host-device.io/rail",
        120,
        || {
            let v = c.get(&["node", &c.node]);
            (v["status"]["allocatable"]["rdma-host-device.io/rail"].as_str()
                == Some(&*NICS.len().to_string()))
            .then_some(())
        },
    );
    let before = records(c);
    c.apply(&pod_spec(pod));
    c.wait(&format!("pod {pod} running ({by})"), 180, || {
        c.pod_running("default", pod).then_some(())
    });
    let net1 = c.net1_status("default", pod);
    assert_eq!(net1["name"], "default/rdma-rail", "{by}: {net1}");
    let ip = net1["ips"][0].as_str().unwrap_or_default().to_owned();
    assert!(
        ip.starts_with("192.168.120."),
        "{by}: net1's address {ip}: {net1}"
    );
    let gone: Vec<&str> = NICS.iter().copied().filter(|n| !c.nic_in_node(n)).collect();
    assert_eq!(gone.len(), 1, "{by}: one NIC moved into {pod}: {gone:?}");
    let env = c.k(&["-n", "default", "exec", pod, "--", "env"]);
    let ids = env
        .lines()
        .find_map(|l| l.strip_prefix("RDMA_HOST_DEVICE_RAIL_IDS="))
        .unwrap_or_else(|| panic!("{by}: no RDMA_HOST_DEVICE_RAIL_IDS in {env}"));
    assert_eq!(ids, gone[0], "{by}: the kubelet allocated {ids}");
    // In the pod: net1, with the NAD's MTU.
    let link = c.k(&[
        "-n", "default", "exec", pod, "--", "ip", "-o", "link", "show", "net1",
    ]);
    assert!(link.contains("mtu 9000"), "{by}: net1 in {pod}: {link}");
    let leases = ls_in_node(c, LEASES);
    assert!(
        leases.contains(&ip),
        "{by}: no host-local lease for {ip} in {LEASES}: {leases:?}"
    );
    let added: Vec<String> = records(c)
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    assert_eq!(
        added.len(),
        1,
        "{by}: one state record for {pod} in {STATE_DIR}: {added:?}"
    );
    Attachment {
        pod: pod.to_owned(),
        nic: gone[0].to_owned(),
        ip,
        records: added,
    }
}

/// The pod deleted through the kubelet: `by` DELs it; the NIC is home under its name with
/// ORIG_MTU, its lease and its state record gone.
fn detach(c: &Cluster, a: &Attachment, by: &str) {
    c.k(&[
        "-n",
        "default",
        "delete",
        "pod",
        &a.pod,
        "--wait=true",
        "--timeout=120s",
    ]);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !c.nic_in_node(&a.nic) {
        if std::time::Instant::now() > end {
            let cni: Vec<String> = c
                .log("containerd")
                .lines()
                .filter(|l| l.contains("rdma-host-device") || l.contains("rdma-rail"))
                .map(str::to_owned)
                .collect();
            panic!(
                "{by}: {} not home 90 s after {}'s deletion (the NIC stayed in the pod, or is \
                 lost); state records: {:?}; leases: {:?}\n--- containerd on the CNI (last 30):\n{}",
                a.nic,
                a.pod,
                records(c),
                ls_in_node(c, LEASES),
                cni[cni.len().saturating_sub(30)..].join("\n")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    c.assert_home(&a.nic);
    let leases = ls_in_node(c, LEASES);
    assert!(
        !leases.contains(&a.ip),
        "{by}: {}'s address {} is still leased in {LEASES}",
        a.pod,
        a.ip
    );
    let left: Vec<String> = records(c)
        .into_iter()
        .filter(|r| a.records.contains(r))
        .collect();
    assert!(
        left.is_empty(),
        "{by}: {}'s state record is left in {STATE_DIR}: {left:?}",
        a.pod
    );
}

#[test]
fn a_rolling_update_and_a_rollback_hand_a_pods_nic_over_through_the_kubelet() {
    let Some(prev) = previous() else { return };
    let (c, _turn) = Cluster::shared();
    let t0 = std::time::Instant::now();
    let cur = std::env::var_os("RHD_CLUSTER_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(release_binary);
    let agent = cur.with_file_name("rdma-host-device-agent");
    let (prev_sum, cur_sum) = (sha256(&prev), sha256(&cur));
    assert_ne!(
        prev_sum, cur_sum,
        "the previous release's plugin is this build"
    );

    c.add_nics(&NICS);
    let podman = Podman::new("upgrade-images");
    build_image_tagged(&podman, &prev, &agent, PREVIOUS_IMAGE);
    c.import_image(&podman, PREVIOUS_IMAGE, "previous-image.tar");
    build_image_tagged(&podman, &cur, &agent, CURRENT_IMAGE);
    c.import_image(&podman, CURRENT_IMAGE, "current-image.tar");
    c.label_rdma_capable();
    // daemonset.yaml as a user of the previous release runs it: every image the previous one,
    // the node configuration that release reads.
    let mut ds = conf_docs("conf/k8s/daemonset.yaml");
    for d in ds.iter_mut() {
        if d["kind"] == "ConfigMap" {
            d["data"]["node.json"] = json!(previous_node_json().to_string());
        }
        if d["kind"] == "DaemonSet" {
            let spec = &mut d["spec"]["template"]["spec"];
            for k in ["initContainers", "containers"] {
                for ct in spec[k].as_array_mut().into_iter().flatten() {
                    ct["image"] = json!(PREVIOUS_IMAGE);
                }
            }
        }
    }
    for d in &ds {
        c.apply(&d.to_string());
    }
    rolled_out(c, "the previous release");
    assert_eq!(
        installed_sha256(c),
        prev_sum,
        "the DaemonSet at {PREVIOUS_IMAGE} did not install the previous release's plugin"
    );
    // conf/multus/rdma-rail-device-plugin.yaml, host-local for whereabouts on its range, as a
    // user of the previous release has it: without draExtendedResource, which that release's
    // strict parser refuses (2, unknown key; README's upgrade note: the key goes into a NAD
    // only once every node runs a build that knows it, and out of it before a rollback).
    let mut nad = with_host_local(&conf_docs("conf/multus/rdma-rail-device-plugin.yaml")[0]);
    let mut conf: Value =
        serde_json::from_str(nad["spec"]["config"].as_str().expect("config")).expect("json");
    if let Some(o) = conf.as_object_mut() {
        o.remove("draExtendedResource");
    }
    nad["spec"]["config"] = json!(conf.to_string());
    c.apply(&nad.to_string());

    // 1. The rolling update, a pod holding the previous release's attachment.
    let a = attach(c, "upgrade-a", "the previous release's ADD");
    c.k(&[
        "-n",
        "kube-system",
        "set",
        "image",
        DS,
        &format!("*={CURRENT_IMAGE}"),
    ]);
    assert!(
        ds_images(c).iter().all(|i| i == CURRENT_IMAGE),
        "set image left {:?}",
        ds_images(c)
    );
    rolled_out(c, "the update to this build");
    assert_eq!(
        installed_sha256(c),
        cur_sum,
        "the update did not install this build's plugin on the node"
    );
    assert!(
        !c.nic_in_node(&a.nic),
        "the update took {}'s NIC {} out of it",
        a.pod,
        a.nic
    );
    detach(
        c,
        &a,
        "this build's DEL of the previous release's attachment",
    );
    eprintln!("update: done at {:.0} s", t0.elapsed().as_secs_f64());

    // 2. The rollback, a pod holding this build's attachment.
    let b = attach(c, "rollback-b", "this build's ADD");
    c.k(&["-n", "kube-system", "rollout", "undo", DS]);
    c.wait("rollout undo brings back the previous image", 30, || {
        ds_images(c)
            .iter()
            .all(|i| i == PREVIOUS_IMAGE)
            .then_some(())
    });
    rolled_out(c, "the rollback to the previous release");
    assert_eq!(
        installed_sha256(c),
        prev_sum,
        "the rollback did not install the previous release's plugin on the node"
    );
    assert!(
        !c.nic_in_node(&b.nic),
        "the rollback took {}'s NIC {} out of it",
        b.pod,
        b.nic
    );
    detach(
        c,
        &b,
        "the previous release's DEL of this build's attachment",
    );
    eprintln!("rollback: done at {:.0} s", t0.elapsed().as_secs_f64());
}
