//! Through a real cluster (tests/cluster/cluster.sh: Kubernetes 1.37's kube-apiserver,
//! kube-scheduler, kube-controller-manager and kubelet, containerd 2.4 with CDI and NRI, Multus'
//! thin plugin 4.3.0, the CNI plugins 1.10.0, all built from their Go modules by
//! scripts/cluster-parts.sh), what a cluster operator does with conf/ as shipped:
//! - conf/k8s/daemonset.yaml and conf/k8s/dra.yaml applied as they are (the ConfigMap's node.json
//!   edited as an operator would: the pool, allowedNics and `dra.nics` name the test's NIC), the
//!   image built by deploy/build-image.sh and imported into the node's containerd, the node
//!   labelled as README says; the controller-manager runs the DaemonSets;
//! - the DRA path: the kubelet registers our driver through its own plugin-registration client
//!   (the call that failed with PROTOCOL_ERROR on a real kubelet), the real scheduler allocates
//!   a claim from our ResourceSlice, the kubelet prepares it through our driver, Multus runs
//!   conf/k8s/dra-claims.yaml's NAD rail-0 and our CNI takes the prepared NIC, the claim's status
//!   carries the network data; the pod's status shows the device's health from our health
//!   stream, Unhealthy with our sentence (and the slice tainted) while the NIC's wire is cut on
//!   the node, Healthy again after; a second claim for the only NIC waits; the pod deleted: the
//!   NIC is home under its name and the claim unprepared;
//! - the device plugin path: an unprivileged pod (uid 1000, every capability dropped) asking for
//!   `rdma-host-device.io/rail: 1` and the network of conf/multus/rdma-rail-device-plugin.yaml
//!   gets the NIC the kubelet allocated, Multus' network-status names it; a second pod is not
//!   admitted while the first holds the NIC; on delete the NIC comes home.
//!
//! The node's NICs are veths in the node's network namespace: this machine has no RDMA, so the
//! one-rail template's `rdma` condition is dropped, and whereabouts (not built here) becomes
//! host-local on the NAD's own range; each change is made where it is used and says so. The
//! RDMA checks in a pod (ibv_devinfo, memlock in exec'd processes) need the VM's kernel: the
//! same kubelet and containerd run them as a node inside the RDMA VM (tests/vm/cluster.sh, VM
//! group `cluster`; docs/testing.md).
//!
//! Needs root, the cluster parts (scripts/setup.sh --for cluster), podman, and the release
//! build (deploy/build-image.sh ships it).

use test_support as common;

use common::*;
use serde_json::{Value, json};

/// The node's NICs for pods: veths whose peers stay in the node's namespace.
const NICS: [&str; 2] = ["rhdrail0", "rhdrail1"];
const IMAGE_ARCHIVE: &str = "rdma-host-device-image.tar";

fn of_kind<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Once per cluster: the NICs, the image, the node's label, daemonset.yaml and dra.yaml
/// applied, and every pod of both DaemonSets ready.
fn installed(c: &Cluster) {
    c.once("pods: installed", || {
        c.add_nics(&NICS);
        // README's step 1, the image; step 2, the label, and node.json edited for this
        // node's NICs.
        c.image_from_this_build("cluster-image", IMAGE_ARCHIVE);
        c.label_rdma_capable();
        let ds = daemonset_docs(RailBy::DevicePlugin);
        for d in ds.iter().chain(conf_docs("conf/k8s/dra.yaml").iter()) {
            c.apply(&d.to_string());
        }
        *RAIL_BY.lock().unwrap_or_else(|e| e.into_inner()) = RailBy::DevicePlugin;
        for ds in ["rdma-host-device", "rdma-host-device-dra"] {
            c.wait(&format!("DaemonSet {ds} ready on the node"), 240, || {
                let v = c.get(&["-n", "kube-system", "daemonset", ds]);
                (v["status"]["numberReady"] == 1).then_some(())
            });
        }
        every_container_stays_up(c);
    });
}

/// Every container of both DaemonSets' pods running, ready and never restarted, 15 s after
/// the DaemonSets were first ready: a container that fails at start is Running for a moment
/// (the DaemonSet counted ready) before it crash-loops. The shipped uppers watcher did, for want
/// of NET_BROADCAST, and only a rolling update on two nodes showed it.
fn every_container_stays_up(c: &Cluster) {
    std::thread::sleep(std::time::Duration::from_secs(15));
    let pods = c.get(&["-n", "kube-system", "pods"]);
    let mut seen = 0;
    let mut down = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        if !name.starts_with("rdma-host-device") {
            continue;
        }
        for s in pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
        {
            seen += 1;
            if s["ready"] != true || s["restartCount"] != 0 {
                down.push(format!(
                    "{name}/{}: ready {}, restarts {}, {}",
                    s["name"].as_str().unwrap_or_default(),
                    s["ready"],
                    s["restartCount"],
                    s["lastState"]["terminated"]["message"]
                        .as_str()
                        .or(s["state"]["waiting"]["reason"].as_str())
                        .unwrap_or_default()
                ));
            }
        }
    }
    assert!(seen >= 6, "the DaemonSets' containers: {seen} seen");
    assert!(down.is_empty(), "containers not up: {down:#?}");
}

/// Who serves `rdma-host-device.io/rail` on the node: the device plugin (daemonset.yaml's
/// node.json as shipped), or the DRA driver through the DeviceClass's extendedResourceName
/// (node.json's `dra.extendedResourceName`, no devicePlugin: what an operator sets on a DRA
/// node). Either way the rail is the one NIC `NICS[0]`; the DRA driver also publishes
/// `NICS[1]` for claims when the device plugin serves the rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RailBy {
    DevicePlugin,
    Dra,
}

static RAIL_BY: std::sync::Mutex<RailBy> = std::sync::Mutex::new(RailBy::DevicePlugin);

/// conf/k8s/daemonset.yaml with its ConfigMap's node.json edited as an operator would for this
/// node's NICs and for who serves the rail.
fn daemonset_docs(by: RailBy) -> Vec<Value> {
    let mut ds = conf_docs("conf/k8s/daemonset.yaml");
    for d in ds.iter_mut().filter(|d| d["kind"] == "ConfigMap") {
        let mut node: Value =
            serde_json::from_str(d["data"]["node.json"].as_str().expect("node.json"))
                .expect("node.json parses");
        node["allowedNics"] = json!({"names": NICS});
        match by {
            RailBy::DevicePlugin => {
                node["devicePlugin"]["pools"][0]["selectors"] = json!({"names": [NICS[0]]});
                // dra.deviceMetadata as shipped; the NICs this node has.
                node["dra"]["nics"] = json!({"names": NICS});
            }
            RailBy::Dra => {
                let obj = node.as_object_mut().expect("node.json is an object");
                obj.remove("devicePlugin");
                node["dra"]["nics"] = json!({"names": [NICS[0]]});
                node["dra"]["extendedResourceName"] = json!("rdma-host-device.io/rail");
            }
        }
        d["data"]["node.json"] = json!(node.to_string());
    }
    ds
}

/// Have `by` serve the rail: the ConfigMap's node.json changed, both DaemonSets restarted
/// (their pods read node.json at start), then the kubelet's allocatable and our slice as that
/// mode makes them. Nothing when it serves it already.
fn rail_served_by(c: &Cluster, by: RailBy) {
    let mut now = RAIL_BY.lock().unwrap_or_else(|e| e.into_inner());
    let t = std::time::Instant::now();
    let switch = *now != by;
    if switch {
        for d in daemonset_docs(by)
            .iter()
            .filter(|d| d["kind"] == "ConfigMap")
        {
            c.apply(&d.to_string());
        }
        for ds in ["rdma-host-device", "rdma-host-device-dra"] {
            c.k(&["-n", "kube-system", "rollout", "restart", "daemonset", ds]);
        }
        for ds in ["rdma-host-device", "rdma-host-device-dra"] {
            c.k(&[
                "-n",
                "kube-system",
                "rollout",
                "status",
                "daemonset",
                ds,
                "--timeout=240s",
            ]);
        }
    }
    // Checked even without a switch: right after the install the device plugin may not have
    // registered yet, and while the node's allocatable has no rail the scheduler serves a rail
    // pod through the DeviceClass's extendedResourceName (a CI run's fail-closed pod got a
    // DRA claim that way).
    let want = match by {
        RailBy::DevicePlugin => Some(1),
        RailBy::Dra => None,
    };
    c.wait(
        &format!("the node's allocatable rail as {by:?} makes it"),
        120,
        || {
            let v = c.get(&["node", &c.node]);
            let n = v["status"]["allocatable"]["rdma-host-device.io/rail"]
                .as_str()
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n > 0);
            (n == want).then_some(())
        },
    );
    let published = if by == RailBy::Dra { 1 } else { NICS.len() };
    c.wait("our ResourceSlice as node.json says", 120, || {
        let n = node_slices(c)?
            .iter()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .count();
        (n == published).then_some(())
    });
    if switch {
        eprintln!(
            "the rail is served by {by:?} after {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    *now = by;
}

/// Our driver's ResourceSlices for this node (`spec.nodeName`), as the scheduler sees them:
/// the tests that talk to the API server alone publish slices of the same driver for nodes of
/// their own, on the same server.
fn node_slices(c: &Cluster) -> Option<Vec<Value>> {
    let v = c.get(&["resourceslices"]);
    let ours = v["items"]
        .as_array()?
        .iter()
        .filter(|s| s["spec"]["driver"] == "rdma-host-device.io" && s["spec"]["nodeName"] == c.node)
        .cloned()
        .collect();
    Some(ours)
}

/// conf/multus/rdma-rail-device-plugin.yaml as shipped (host-local for whereabouts), named
/// `name`: the one NAD for both paths.
fn rail_nad(name: &str) -> String {
    let mut nad = with_host_local(&conf_docs("conf/multus/rdma-rail-device-plugin.yaml")[0]);
    nad["metadata"]["name"] = json!(name);
    nad.to_string()
}

/// The claim's `status.devices` (KEP-4817) once our driver has written them.
fn claim_status_devices(c: &Cluster, claim: &str) -> Vec<Value> {
    c.wait("the claim's status.devices", 30, || {
        let v = c.get(&["-n", "default", "resourceclaim", claim]);
        v["status"]["devices"]
            .as_array()
            .filter(|d| !d.is_empty())
            .cloned()
    })
}

/// The one pod spec for both paths: an unprivileged pod asking for one
/// `rdma-host-device.io/rail` and attaching the network `rdma-rail` as net1.
fn rail_pod(name: &str) -> String {
    unprivileged_pod(
        name,
        "rdma-rail",
        json!({"limits": {"rdma-host-device.io/rail": "1"}}),
        json!([]),
    )
}

/// The DRA driver's pod (the DaemonSet of conf/k8s/dra.yaml).
fn driver_pod(c: &Cluster) -> String {
    let v = c.get(&[
        "-n",
        "kube-system",
        "pods",
        "-l",
        "app.kubernetes.io/name=rdma-host-device-dra",
    ]);
    v["items"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|p| p["metadata"]["deletionTimestamp"].is_null())
        })
        .and_then(|p| p["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A pod in `default` whose one container runs as uid 1000 with every capability dropped,
/// attached to the NAD `network` as net1, with these container `resources` and pod
/// `resourceClaims`.
fn unprivileged_pod(name: &str, network: &str, resources: Value, claims: Value) -> String {
    let networks = json!([{"name": network, "interface": "net1"}]).to_string();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": claims,
            "containers": [{"name": "c", "image": "localhost/rhd-busybox:test",
                "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"],
                "resources": resources,
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": true,
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
        }
    })
    .to_string()
}

/// What the DRA driver's pod logged (empty if it cannot be read yet).
fn driver_log(c: &Cluster, pod: &str) -> String {
    let out = c.kubectl(&["-n", "kube-system", "logs", pod]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn dra_driver_registers_with_the_real_kubelet_and_a_pod_gets_the_prepared_nic() {
    let (c, _turn) = Cluster::shared();
    installed(c);
    // The node as shipped: the device plugin serves the rail, the slice has both NICs.
    rail_served_by(c, RailBy::DevicePlugin);
    // The kubelet's own registration client (grpc-go, the socket's path as :authority) reached
    // GetInfo, accepted the driver and said so (NotifyRegistrationStatus, which our driver
    // logs).
    c.wait("the kubelet registers rdma-host-device.io", 60, || {
        driver_log(c, &driver_pod(c))
            .contains("the kubelet registered rdma-host-device.io")
            .then_some(())
    });
    // Its slice, as the scheduler sees it.
    c.wait("our ResourceSlice with the node's NICs", 60, || {
        let n = node_slices(c)?
            .iter()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .count();
        (n == NICS.len()).then_some(())
    });

    // dra-claims.yaml's one-rail template, less its `rdma` condition (veths have no RDMA
    // device here), and its NAD rail-0 as shipped.
    let claims = conf_docs("conf/k8s/dra-claims.yaml");
    let mut tpl = of_kind(&claims, "ResourceClaimTemplate", "one-rail").clone();
    tpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = json!([{"cel": {
        "expression": "device.attributes[\"rdma-host-device.io\"].linkUp"}}]);
    c.apply(&tpl.to_string());
    c.apply(&of_kind(&claims, "NetworkAttachmentDefinition", "rail-0").to_string());
    // The NICs are up on one side only without a peer up: both peers are up, so linkUp holds.
    let pod = |name: &str| {
        unprivileged_pod(
            name,
            "rail-0",
            json!({"claims": [{"name": "rails"}]}),
            json!([{"name": "rails", "resourceClaimTemplateName": "one-rail"}]),
        )
    };
    c.apply(&pod("dra-a"));
    c.wait("pod dra-a running with its claim prepared", 180, || {
        c.pod_running("default", "dra-a").then_some(())
    });
    let net1 = c.net1_status("default", "dra-a");
    assert_eq!(net1["name"], "default/rail-0", "{net1}");
    // The NIC the driver prepared left the node: it is net1 in the pod.
    let claim_name = c.get(&["-n", "default", "pod", "dra-a"])["status"]["resourceClaimStatuses"]
        [0]["resourceClaimName"]
        .as_str()
        .expect("the pod's claim")
        .to_owned();
    let claim = c.get(&["-n", "default", "resourceclaim", &claim_name]);
    let dev = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        .as_str()
        .expect("allocated device")
        .to_owned();
    let nic = NICS
        .iter()
        .find(|n| dev.ends_with(*n))
        .unwrap_or_else(|| panic!("allocated {dev} is none of {NICS:?}"));
    assert!(
        !c.nic_in_node(nic),
        "{nic} is still in the node's namespace"
    );
    // KEP-4817: the claim's status carries the network data ADD applied.
    let devices = claim_status_devices(c, &claim_name);
    assert_eq!(devices[0]["driver"], "rdma-host-device.io");
    assert_eq!(devices[0]["device"], dev.as_str());
    assert_eq!(
        devices[0]["networkData"]["interfaceName"], "net1",
        "{devices:?}"
    );

    // KEP-5304: the container reads the device metadata prepare wrote and ADD completed
    // (generation 2: the interface name and the addresses; a veth has no RDMA device, so no
    // GID index), at the path the helper's layout gives a claim made from a template; and the
    // env of our CDI device, written at the same generation.
    let meta_path = "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rails/nic-0/rdma-host-device.io-metadata.json";
    let meta_text = c.k(&["-n", "default", "exec", "dra-a", "--", "cat", meta_path]);
    eprintln!("{meta_path} in the container:\n{meta_text}");
    let meta: Value = serde_json::Deserializer::from_str(&meta_text)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON object in {meta_text}"));
    assert_eq!(meta["kind"], "DeviceMetadata", "{meta}");
    assert_eq!(
        meta["apiVersion"], "metadata.resource.k8s.io/v1beta1",
        "{meta}"
    );
    assert_eq!(meta["metadata"]["name"], claim_name.as_str(), "{meta}");
    assert_eq!(meta["metadata"]["uid"], claim["metadata"]["uid"], "{meta}");
    assert_eq!(
        meta["metadata"]["generation"], 2,
        "prepare's 1, ADD's 2: {meta}"
    );
    assert_eq!(meta["podClaimName"], "rails", "{meta}");
    let mdev = &meta["requests"][0]["devices"][0];
    assert_eq!(meta["requests"][0]["name"], "nic-0", "{meta}");
    assert_eq!(mdev["driver"], "rdma-host-device.io", "{meta}");
    assert_eq!(mdev["name"], dev.as_str(), "{meta}");
    assert_eq!(
        mdev["attributes"]["rdma-host-device.io/ifName"],
        json!({"string": "net1"}),
        "{meta}"
    );
    assert_eq!(mdev["networkData"]["interfaceName"], "net1", "{meta}");
    assert_eq!(
        mdev["networkData"]["ips"], devices[0]["networkData"]["ips"],
        "the addresses the claim's status has: {meta}"
    );
    // Veths: no PCI address, no NUMA node, no RDMA device, so none of those attributes.
    for absent in [
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/numaNode",
        "rdma-host-device.io/rdmaDevice",
        "rdma-host-device.io/gidIndex",
    ] {
        assert!(mdev["attributes"].get(absent).is_none(), "{absent}: {meta}");
    }
    let env = c.k(&["-n", "default", "exec", "dra-a", "--", "env"]);
    assert!(
        env.lines()
            .any(|l| l == "RDMA_HOST_DEVICE_METADATA_GENERATION=2"),
        "{env}"
    );
    assert!(
        !env.contains("NCCL_IB_HCA") && !env.contains("NCCL_IB_GID_INDEX"),
        "no RDMA device, no NCCL env: {env}"
    );

    // KEP-4680 through the kubelet: the driver's health stream puts the device's health in
    // the pod's status; the NIC's wire cut on the node (its veth peer down: net1 in the pod
    // loses carrier) makes it Unhealthy with our sentence, and the slice's taint follows;
    // the wire back, Healthy and untainted again.
    let peer = format!("rhdpeer{}", NICS.iter().position(|n| n == nic).unwrap_or(0));
    let health = |want: &str| {
        let v = c.get(&["-n", "default", "pod", "dra-a"]);
        let entries = v["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let claim = entries.iter().find(|e| e["name"] == "claim:rails")?;
        let r = claim["resources"].as_array()?.first()?.clone();
        (r["health"] == want).then_some(r)
    };
    let taint = || {
        node_slices(c)
            .into_iter()
            .flatten()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .find(|d| d["name"] == dev.as_str())
            .and_then(|d| d["taints"].as_array().cloned())
            .and_then(|t| t.first().cloned())
    };
    let healthy = c.wait("the pod's status shows our device Healthy", 90, || {
        health("Healthy")
    });
    // The kubelet names the device by its first CDI ID: a veth has no uverbs one, so it is the
    // claim's device metadata (KEP-5304, as the Go helper appends it too); without CDI IDs
    // it would be rdma-host-device.io/<pool>/<device>.
    assert_eq!(
        healthy["resourceID"],
        format!(
            "rdma-host-device.io/metadata={}_nic-0",
            claim["metadata"]["uid"].as_str().unwrap_or_default()
        ),
        "{healthy}"
    );
    assert!(
        taint().is_none(),
        "a healthy device is tainted: {:?}",
        taint()
    );
    c.ip(&["link", "set", &peer, "down"]);
    let cut = std::time::Instant::now();
    let sick = c.wait("the pod's status shows our device Unhealthy", 15, || {
        health("Unhealthy")
    });
    let took = cut.elapsed();
    assert_eq!(
        sick["message"], "link-down: net1 in the pod is up without carrier",
        "{sick}"
    );
    let t = c.wait("the slice's taint for the unhealthy device", 15, taint);
    assert_eq!(t["key"], "rdma-host-device.io/unhealthy", "{t}");
    assert_eq!(t["value"], "link-down", "{t}");
    assert_eq!(t["effect"], "NoSchedule", "{t}");
    eprintln!(
        "Unhealthy in the pod's status {:.1} s after the wire was cut",
        took.as_secs_f64()
    );
    c.ip(&["link", "set", &peer, "up"]);
    let back = std::time::Instant::now();
    c.wait(
        "the pod's status shows our device Healthy again",
        15,
        || health("Healthy"),
    );
    eprintln!(
        "Healthy again {:.1} s after the wire came back",
        back.elapsed().as_secs_f64()
    );
    c.wait("the slice's taint gone", 15, || {
        taint().is_none().then_some(())
    });

    // A claim for two NICs while dra-a holds one of the two waits: the scheduler finds no
    // allocation, the pod is not started.
    let mut two = tpl.clone();
    two["metadata"]["name"] = json!("two-rails");
    two["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = json!(2);
    two["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] =
        json!("ExactCount");
    c.apply(&two.to_string());
    c.apply(&pod("dra-b").replace("\"one-rail\"", "\"two-rails\""));
    c.wait("dra-b reported unschedulable", 60, || {
        let v = c.get(&["-n", "default", "pod", "dra-b"]);
        let cond = v["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled")?
            .clone();
        (cond["status"] == "False").then_some(())
    });
    assert!(
        !c.pod_running("default", "dra-b"),
        "dra-b runs with a NIC dra-a holds"
    );
    c.k(&[
        "-n",
        "default",
        "delete",
        "pod",
        "dra-b",
        "--wait=true",
        "--timeout=60s",
    ]);

    // The driver restarted while the pod runs (its DaemonSet's pod deleted, the controller
    // starts another, the kubelet registers it again): the new one unprepares what the old one
    // prepared.
    let old_driver = driver_pod(c);
    c.k(&[
        "-n",
        "kube-system",
        "delete",
        "pod",
        &old_driver,
        "--wait=true",
        "--timeout=60s",
    ]);
    let new_driver = c.wait("a new DRA driver pod ready", 120, || {
        let p = driver_pod(c);
        (!p.is_empty() && p != old_driver && c.pod_running("kube-system", &p)).then_some(p)
    });
    c.wait("the kubelet registers the new driver", 60, || {
        driver_log(c, &new_driver)
            .contains("the kubelet registered rdma-host-device.io")
            .then_some(())
    });

    // Delete: the NIC comes home, the claim is unprepared and deallocated.
    c.delete_pods_and_see_nic_home("default", &["dra-a"], nic);
    c.wait("the claim of the deleted pod gone", 60, || {
        (!c.kubectl(&["-n", "default", "get", "resourceclaim", &claim_name])
            .status
            .success())
        .then_some(())
    });
    // Unprepared: its metadata file and both CDI specs are gone from the node.
    let uid = claim["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    c.wait("the claim's device metadata removed", 30, || {
        let left = c.on_node(
            "sh",
            &[
                "-c",
                &format!(
                    "ls /var/run/cdi/ /var/lib/kubelet/plugins/rdma-host-device.io/dra-device-metadata/ 2>/dev/null | grep -e {uid} -e default_{claim_name} || true"
                ),
            ],
        );
        left.trim().is_empty().then_some(())
    });
}

#[test]
fn device_plugin_gives_an_unprivileged_pod_its_nic_through_multus() {
    let (c, _turn) = Cluster::shared();
    installed(c);
    rail_served_by(c, RailBy::DevicePlugin);
    // The kubelet lists the pool as the node's allocatable resource.
    c.wait("the node offers rdma-host-device.io/rail", 90, || {
        let v = c.get(&["node", &c.node]);
        (v["status"]["allocatable"]["rdma-host-device.io/rail"]
            .as_str()
            .and_then(|n| n.parse::<usize>().ok())
            == Some(1))
        .then_some(())
    });
    // The same NAD and pod spec as the DRA node's test
    // (one_pod_spec_gets_its_nic_from_dra_on_a_node_whose_device_plugin_offers_none).
    c.apply(&rail_nad("rdma-rail"));
    // The pool's one NIC to the first pod: the second cannot be admitted while it holds it.
    c.apply(&rail_pod("dp-a"));
    c.wait("pod dp-a running", 180, || {
        c.pod_running("default", "dp-a").then_some(())
    });
    let net1 = c.net1_status("default", "dp-a");
    assert_eq!(net1["name"], "default/rdma-rail", "{net1}");
    let ip = net1["ips"][0].as_str().unwrap_or_default();
    assert!(
        ip.starts_with("192.168.120."),
        "net1's address {ip}: {net1}"
    );
    // The container's environment names the NIC the kubelet allocated: the device plugin's,
    // not a claim (deviceID came, and won over the NAD's draExtendedResource).
    let a = c.get(&["-n", "default", "pod", "dp-a"]);
    assert!(
        a["status"]["extendedResourceClaimStatus"].is_null(),
        "a device plugin's pod has no extended-resource claim: {}",
        a["status"]
    );
    let env = c.k(&["-n", "default", "exec", "dp-a", "--", "env"]);
    let ids = env
        .lines()
        .find_map(|l| l.strip_prefix("RDMA_HOST_DEVICE_RAIL_IDS="))
        .unwrap_or_else(|| panic!("no RDMA_HOST_DEVICE_RAIL_IDS in {env}"));
    let gone: Vec<&str> = NICS.iter().copied().filter(|n| !c.nic_in_node(n)).collect();
    assert_eq!(gone, [NICS[0]], "the pool's NIC moved into the pod (net1)");
    assert_eq!(ids, NICS[0]);
    // The per-NIC env (node.json's devicePlugin.nicEnv, as shipped): Allocate named
    // rdma-host-device.io/nic=<the NIC's ID> and wrote generation 1 before the sandbox existed;
    // ADD rewrote it as generation 2; the container, created after ADD, sees generation 2: so
    // containerd's CDI cache had reloaded the spec by then. A veth has no RDMA device, so no
    // NCCL_IB_HCA or NCCL_IB_GID_INDEX (the RDMA VM's group checks those).
    let spec_path = format!("/var/run/cdi/rdma-host-device.io_nic_{}.json", NICS[0]);
    let spec = |c: &Cluster| -> Value {
        serde_json::from_str(&c.on_node("cat", &[&spec_path]))
            .unwrap_or_else(|e| panic!("{spec_path}: {e}"))
    };
    let env_of = |v: &Value| v["devices"][0]["containerEdits"]["env"].clone();
    assert_eq!(
        env_of(&spec(c)),
        json!(["RDMA_HOST_DEVICE_METADATA_GENERATION=2"]),
        "{spec_path} after ADD"
    );
    assert!(
        env.lines()
            .any(|l| l == "RDMA_HOST_DEVICE_METADATA_GENERATION=2"),
        "the container sees ADD's generation of the NIC's env: {env}"
    );
    assert!(
        !env.contains("NCCL_IB_HCA") && !env.contains("NCCL_IB_GID_INDEX"),
        "no RDMA device, no NCCL env: {env}"
    );
    // How long before containerd created the container ADD rewrote the spec (its mtime, and
    // containerd's CreateContainer line for dp-a's container, the newest of a container `c`):
    // the margin containerd's CDI cache, which follows the directory's inotify events in a
    // goroutine, had to reload it.
    let epoch = |t: &str| -> f64 {
        c.on_node("date", &["-d", t, "+%s.%N"])
            .trim()
            .parse()
            .unwrap_or_default()
    };
    let written: f64 = c
        .on_node("stat", &["-c", "%.9Y", &spec_path])
        .trim()
        .parse()
        .unwrap_or_default();
    let containerd = c.log("containerd");
    let created = containerd
        .lines()
        .rfind(|l| {
            l.contains("CreateContainer within sandbox")
                && l.contains(r#"for container name:\"c\""#)
        })
        .and_then(|l| l.split("time=\"").nth(1))
        .and_then(|r| r.split('"').next())
        .map(epoch);
    eprintln!(
        "dp-a: {spec_path} generation 2 written {:.3} s before containerd's CreateContainer",
        created.map_or(f64::NAN, |t| t - written)
    );

    c.apply(&rail_pod("dp-b"));
    std::thread::sleep(std::time::Duration::from_secs(5));
    let b = c.get(&["-n", "default", "pod", "dp-b"]);
    assert_eq!(
        b["status"]["phase"], "Pending",
        "dp-b got the NIC dp-a holds: {b}"
    );

    c.k(&[
        "-n",
        "default",
        "delete",
        "pod",
        "dp-a",
        "dp-b",
        "--wait=true",
        "--timeout=120s",
    ]);
    c.wait("every NIC home", 60, || {
        NICS.iter().all(|n| c.nic_in_node(n)).then_some(())
    });
    for n in NICS {
        c.assert_home(n);
    }
    // DEL put the NIC's env back to generation 1 (what Allocate wrote).
    assert_eq!(
        env_of(&spec(c)),
        json!(["RDMA_HOST_DEVICE_METADATA_GENERATION=1"]),
        "{spec_path} after DEL"
    );
}

/// Issue 38 item 3 through the real scheduler, kubelet, containerd and Multus 4.3: on a node
/// whose DRA driver serves `rdma-host-device.io/rail` (the DeviceClass's extendedResourceName;
/// node.json's dra.extendedResourceName, no device-plugin pool), the device plugin test's very
/// pod spec and NAD (`rail_pod`, `rail_nad`): the scheduler makes the pod's claim, the kubelet
/// prepares it through our driver, Multus passes no deviceID, and the NAD's
/// draExtendedResource takes the NIC prepared for this pod. A second such pod waits while the
/// first holds the only NIC; delete: the NIC is home, the claim unprepared and gone.
#[test]
fn one_pod_spec_gets_its_nic_from_dra_on_a_node_whose_device_plugin_offers_none() {
    let (c, _turn) = Cluster::shared();
    installed(c);
    rail_served_by(c, RailBy::Dra);
    let nic = NICS[0];
    c.apply(&rail_nad("rdma-rail"));
    c.apply(&rail_pod("er-a"));
    c.wait(
        "pod er-a running with its extended-resource claim",
        180,
        || c.pod_running("default", "er-a").then_some(()),
    );
    let pod = c.get(&["-n", "default", "pod", "er-a"]);
    let ext = &pod["status"]["extendedResourceClaimStatus"];
    let claim_name = ext["resourceClaimName"]
        .as_str()
        .unwrap_or_else(|| panic!("no extendedResourceClaimStatus: {}", pod["status"]))
        .to_owned();
    assert!(
        claim_name.starts_with("er-a-extended-resources-"),
        "{claim_name}"
    );
    assert_eq!(
        ext["requestMappings"],
        json!([{"containerName": "c", "resourceName": "rdma-host-device.io/rail",
            "requestName": "container-0-request-0"}]),
        "{ext}"
    );
    let claim = c.get(&["-n", "default", "resourceclaim", &claim_name]);
    assert_eq!(
        claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"], "true",
        "{claim}"
    );
    assert_eq!(
        claim["status"]["reservedFor"][0]["uid"], pod["metadata"]["uid"],
        "{claim}"
    );
    let result = &claim["status"]["allocation"]["devices"]["results"][0];
    assert_eq!(result["request"], "container-0-request-0", "{claim}");
    assert!(
        result["device"].as_str().unwrap_or_default().ends_with(nic),
        "{claim}"
    );
    eprintln!(
        "er-a: claim {claim_name}, request {}, device {}",
        result["request"], result["device"]
    );
    // Multus ran the NAD; our CNI took the NIC of that claim (no deviceID came).
    let net1 = c.net1_status("default", "er-a");
    assert_eq!(net1["name"], "default/rdma-rail", "{net1}");
    assert!(
        !c.nic_in_node(nic),
        "{nic} is still in the node's namespace"
    );
    let driver = driver_pod(c);
    assert!(
        driver_log(c, &driver).contains(&format!("prepared default/{claim_name}")),
        "the driver's log: {}",
        driver_log(c, &driver)
    );
    // The attachment's record names the claim, so the driver reports net1 in its status.
    let devices = claim_status_devices(c, &claim_name);
    assert_eq!(
        devices[0]["networkData"]["interfaceName"], "net1",
        "{devices:?}"
    );

    // The same spec again: the only NIC is held, the scheduler finds none, the pod waits.
    c.apply(&rail_pod("er-b"));
    let why = c.wait("er-b reported unschedulable", 60, || {
        let v = c.get(&["-n", "default", "pod", "er-b"]);
        let cond = v["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled")?
            .clone();
        (cond["status"] == "False").then_some(cond)
    });
    eprintln!("er-b: {why}");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let b = c.get(&["-n", "default", "pod", "er-b"]);
    assert_eq!(b["status"]["phase"], "Pending", "{b}");

    c.delete_pods_and_see_nic_home("default", &["er-a", "er-b"], nic);
    c.wait("the claim unprepared by our driver", 60, || {
        driver_log(c, &driver)
            .contains(&format!("unprepared default/{claim_name}"))
            .then_some(())
    });
    c.wait("the claim of the deleted pod gone", 60, || {
        (!c.kubectl(&["-n", "default", "get", "resourceclaim", &claim_name])
            .status
            .success())
        .then_some(())
    });
}

#[test]
fn the_daemonset_installs_the_plugin_and_reports_the_node() {
    let (c, _turn) = Cluster::shared();
    installed(c);
    // install: the plugin in the node's /opt/cni/bin, the node configuration beside it.
    let log = c.k(&[
        "-n",
        "kube-system",
        "logs",
        "ds/rdma-host-device",
        "-c",
        "install",
    ]);
    assert!(
        log.contains("installed /host/opt/cni/bin/rdma-host-device")
            || log.contains("is already this build"),
        "{log}"
    );
    // The installed plugin runs on the node (on_node fails the test otherwise).
    c.on_node("/opt/cni/bin/rdma-host-device", &["--version"]);
    let node_json = c.on_node("cat", &["/etc/rdma-host-device/node.json"]);
    let node: Value = serde_json::from_str(&node_json).expect("node.json installed");
    assert_eq!(node["allowedNics"]["names"], json!(NICS));
    // node-report: README's command, in the DaemonSet's container; it names the NICs (with
    // --all: it hides virtual links such as these veths by default).
    let report = c.k(&[
        "-n",
        "kube-system",
        "exec",
        "ds/rdma-host-device",
        "-c",
        "node-report",
        "--",
        "rdma-host-device-agent",
        "inspect",
        "--all",
        "--color=never",
    ]);
    for n in NICS {
        assert!(report.contains(n), "inspect does not name {n}:\n{report}");
    }
    // The exporter answers on the node's :9879 (hostNetwork), as Prometheus scrapes it.
    let metrics = c
        .inside("curl")
        .args(["-sS", "--max-time", "10", "http://127.0.0.1:9879/metrics"])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.status.success() && text.contains("rdma_host_device"),
        "the exporter's /metrics: {}{}",
        &text[..text.len().min(400)],
        String::from_utf8_lossy(&metrics.stderr)
    );
}

/// The pids of the DaemonSet's NRI plugin (its container's command line: no other process on
/// the machine runs `nri` on the runtime's own socket with the node's /dev at /host/dev).
fn nri_plugin_pids() -> Vec<i32> {
    let want = [
        "nri",
        "--socket",
        rdma_host_device_agent::nri::DEFAULT_SOCKET,
        "--dev",
        "/host/dev",
    ];
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
            (args.len() == want.len() + 1
                && args[0].ends_with(b"rdma-host-device-agent")
                && args[1..].iter().zip(want).all(|(a, w)| *a == w.as_bytes()))
            .then_some(pid)
        })
        .collect()
}

/// Fail-closed, as conf/k8s/fail-closed.yaml and docs/deploy.md set it up (containerd's NRI
/// default validator on, cluster.sh's containerd has it): the real API server's
/// MutatingAdmissionPolicy marks a pod asking for a rail as needing our NRI plugin and leaves
/// other pods alone; while the plugin is away (killed again and again, as a crash loop or an
/// upgrade leaves it), the real containerd refuses to create that pod's container, the pod's
/// events say why, and it starts once the plugin is back; a pod without RDMA starts meanwhile.
/// (The memlock the plugin then gives is checked where there are RDMA devices: the VM group
/// `cluster`.)
#[test]
fn a_rail_pod_waits_for_the_nri_plugin_rather_than_start_without_it() {
    let (c, _turn) = Cluster::shared();
    installed(c);
    rail_served_by(c, RailBy::DevicePlugin);
    for d in conf_docs("conf/k8s/fail-closed.yaml") {
        c.apply(&d.to_string());
    }
    let rail = |name: &str| {
        unprivileged_pod(
            name,
            "rdma-rail-fc",
            json!({"limits": {"rdma-host-device.io/rail": "1"}}),
            json!([]),
        )
    };
    let required = "required-plugins.noderesource.dev/pod";
    let dry_run = |pod: &str| -> Value {
        let out = c.k_stdin(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            pod,
        );
        serde_json::from_str(&out).unwrap_or(Value::Null)
    };
    // The policy takes a moment to reach the API server's admission chain.
    c.wait("the policy marks a rail pod", 60, || {
        (dry_run(&rail("fc-probe"))["metadata"]["annotations"][required]
            == r#"["rdma-host-device"]"#)
            .then_some(())
    });
    // Without RDMA and without the NAD (the cluster network only).
    let mut plain: Value =
        serde_json::from_str(&unprivileged_pod("fc-plain", "-", json!({}), json!([])))
            .expect("pod json");
    plain["metadata"]["annotations"] = json!({});
    assert!(
        dry_run(&plain.to_string())["metadata"]["annotations"][required].is_null(),
        "a pod without RDMA is not marked"
    );
    // The one NAD of both paths, under a name of its own.
    c.apply(&rail_nad("rdma-rail-fc"));
    c.wait("the NRI plugin running", 120, || {
        (!nri_plugin_pids().is_empty()).then_some(())
    });

    // The plugin away: killed every 200 ms for 25 s, the pods created meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let killer = {
        let (stop, killed) = (stop.clone(), killed.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for pid in nri_plugin_pids() {
                    // SAFETY: kill(2) on a pid read from /proc; no memory is shared.
                    if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                        killed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            killed.load(std::sync::atomic::Ordering::SeqCst)
        })
    };
    // The pod only once the plugin is in its restart back-off (killed twice: the kubelet
    // restarts it at once the first time). containerd 2.4.2 (NRI v0.12.3) counts a plugin
    // that dies while it handles CreateContainer as present to the validator (AddPlugin comes
    // before the call; the dead plugin's adjustment is just missing), so a container created
    // in the plugin's first fraction of a second after a restart starts without it: a gap of
    // containerd's this test must not race into (docs/deploy.md, "Fail-closed").
    c.wait("the NRI plugin killed twice", 60, || {
        (killed.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(())
    });
    c.apply(&rail("fc-a"));
    c.apply(&plain.to_string());
    c.wait(
        "the pod without RDMA running while the plugin is away",
        120,
        || c.pod_running("default", "fc-plain").then_some(()),
    );
    let refused = "required plugin \"rdma-host-device\" not present";
    let why = c.wait("fc-a refused while the plugin is away", 120, || {
        let ev = c.k(&[
            "-n",
            "default",
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=fc-a",
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ]);
        ev.lines().find(|l| l.contains(refused)).map(str::to_owned)
    });
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(
        !c.pod_running("default", "fc-a"),
        "fc-a started while the plugin was being killed ({why})"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let kills = killer.join().expect("the killer thread");
    eprintln!("NRI plugin killed {kills} time(s); fc-a's event: {why}");
    assert!(kills > 0, "the plugin was never killed");
    // Back (the kubelet restarts the container after its back-off): fc-a starts.
    c.wait("fc-a running once the plugin is back", 300, || {
        c.pod_running("default", "fc-a").then_some(())
    });
    let a = c.get(&["-n", "default", "pod", "fc-a"]);
    assert_eq!(
        a["metadata"]["annotations"][required], r#"["rdma-host-device"]"#,
        "{a}"
    );
    c.k(&[
        "-n",
        "default",
        "delete",
        "pod",
        "fc-a",
        "fc-plain",
        "--wait=true",
        "--timeout=120s",
    ]);
    for d in conf_docs("conf/k8s/fail-closed.yaml") {
        let kind = d["kind"].as_str().unwrap_or_default().to_owned();
        let name = d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        c.k(&["delete", &kind, &name]);
    }
    c.wait("every NIC home", 60, || {
        NICS.iter().all(|n| c.nic_in_node(n)).then_some(())
    });
}
