//! `rdma-host-device-agent dra`, the kubelet side of our DRA driver, driven the way the kubelet
//! drives it over the real gRPC wire: tests/dra/kubelet.py (grpcio, stubs generated at test time
//! from our own tests/dra/pluginregistration.proto and dra.proto) watches the plugin registry
//! directory, registers the driver (GetInfo, NotifyRegistrationStatus) and calls
//! NodePrepareResources / NodeUnprepareResources on the socket the registration names.
//! Then the CNI's own lookup: ADD with a NAD's `draRequest` takes the NIC the driver prepared
//! for the pod whose UID the runtime passes, and never another pod's.
//!
//! The driver reads claims from the real kube-apiserver 1.37 of the test cluster
//! (tests/cluster/cluster.sh) through its real client; the test plays the user and the
//! scheduler with real REST calls (curl: create the claim, then PUT its allocation and
//! reservedFor on /status), reserved for real pods that stay Pending (the controller-manager
//! drops a reservation for a pod that does not exist), so claim and pod UIDs are the API
//! server's. Each test has a namespace and a node name of its own on the shared server. Two
//! cases keep tests/kube/apiserver.py, for what a real 1.37 server is not made to do on demand:
//! drop `status.devices` (a pre-1.33 server; the gate is locked on in 1.37) and change a claim
//! between the driver's read and its write. The NICs are veths (no RDMA on this machine: their
//! answer carries no CDI ID; the uverbs CDI IDs are unit-tested in crates/agent/src/dra/).
//! Needs root (veths, netns), the venv with grpcio that scripts/setup.sh makes, and curl.

use test_support as common;
use test_support::apiserver as standin;
use test_support::dra_kubelet as kubelet;

use common::*;
use kubelet::*;
use prost::Message;
use rdma_host_device_agent::dra::api::NodePrepareResourcesResponse;
use rdma_host_device_agent::dra::api::path::PREPARE;
use rdma_host_device_agent::kubelet_grpc::registration::PluginInfo;
use rdma_host_device_agent::kubelet_grpc::registration::path::GET_INFO;
use serde_json::{Value, json};
use standin::ApiServer;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

/// The DRA device name of a veth, as our ResourceSlice names it (`net-NAME`).
fn device(nic: &Veth) -> String {
    rdma_host_device_agent::dra::slices::name_for(None, &nic.name, &nic.name)
}

/// What a user and the scheduler do for a claim: create it, then write its allocation
/// (`results` as (request, driver, device)) and the pods it is reserved for (by name, made
/// if need be) on /status. Returns the UID the API server gave it.
fn seed(w: &World, name: &str, results: &[(&str, &str, &str)], pods: &[&str]) -> String {
    let base = w.claims();
    let created = w.api.call(
        "POST",
        &base,
        Some(&json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": w.ns, "name": name},
            "spec": {"devices": {"requests": results.iter().map(|(r, _, _)| json!({
                "name": r, "exactly": {"deviceClassName": "rdma-nic"}})).collect::<Vec<_>>()}},
        })),
    );
    let mut c = created.clone();
    c["status"] = json!({
        "allocation": {"devices": {"results": results.iter().map(|(r, d, dev)| json!({
            "request": r, "driver": d, "pool": w.node, "device": dev})).collect::<Vec<_>>()}},
        "reservedFor": pods.iter().map(|p| json!({"resource": "pods", "name": p, "uid": w.pod(p)}))
            .collect::<Vec<_>>(),
    });
    w.api
        .call("PUT", &format!("{base}/{name}/status"), Some(&c));
    created["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// A rig, the kubelet's root directory, the API server, and this test's namespace, node name
/// (its pool's) and pods there.
struct World {
    rig: Rig,
    kubelet_dir: TempDir,
    api: ApiServer,
    ns: String,
    node: String,
    /// Whether `api` is a real API server (pods are real objects, with the UIDs it gives).
    real: bool,
    pods: RefCell<HashMap<String, String>>,
}

impl World {
    /// The node publishes (and so prepares) its NICs 0 and 1, veths named in `dra.nics`; the
    /// claims live in the cluster's real API server.
    fn new() -> World {
        let w = World::on(Rig::new(), ApiServer::real(), true);
        w.api.call(
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": w.ns}})),
        );
        // The namespace's default ServiceAccount, which a pod needs: the controller-manager
        // makes it a moment later; made here at once (a 409 if it was quicker).
        w.api.try_call(
            "POST",
            &format!("/api/v1/namespaces/{}/serviceaccounts", w.ns),
            Some(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})),
        );
        w
    }

    /// [`new`](Self::new) on the stand-in API server started with `args`.
    fn stand_in(args: &[&str]) -> World {
        let rig = Rig::new();
        let api = ApiServer::start(rig.dir.path(), args);
        World::on(rig, api, false)
    }

    fn on(rig: Rig, api: ApiServer, real: bool) -> World {
        rig.set_node(json!({"dra": {"nics": {"names": [rig.nic_name(0), rig.nic_name(1)]}}}));
        World {
            ns: format!("team-{}", rig.n),
            node: format!("node-{}-{}", tag(), rig.n),
            rig,
            kubelet_dir: TempDir::new("dra-kubelet"),
            api,
            real,
            pods: RefCell::default(),
        }
    }

    /// The UID of this test's pod `name`: on a real API server a pod made now (it stays
    /// Pending: no node matches its selector), on the stand-in the name itself.
    fn pod(&self, name: &str) -> String {
        if !self.real {
            return name.to_owned();
        }
        if let Some(uid) = self.pods.borrow().get(name) {
            return uid.clone();
        }
        let pod = self.api.call(
            "POST",
            &format!("/api/v1/namespaces/{}/pods", self.ns),
            Some(&json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"rdma-host-device.io/test": "no-such-node"},
                    "containers": [{"name": "c", "image": "pause", "imagePullPolicy": "Never"}]
                }
            })),
        );
        let uid = pod["metadata"]["uid"]
            .as_str()
            .expect("a pod's uid")
            .to_owned();
        self.pods.borrow_mut().insert(name.into(), uid.clone());
        uid
    }

    /// CNI_ARGS as a runtime writes them for this test's pod `name`.
    fn cni_args(&self, name: &str) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={name};K8S_POD_UID={}",
            self.ns,
            self.pod(name)
        )
    }

    /// The REST path of this test's claims.
    fn claims(&self) -> String {
        format!(
            "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims",
            self.ns
        )
    }

    fn checkpoint(&self) -> Value {
        let p = self.rig.state_dir().join("dra/checkpoint.json");
        std::fs::read(&p)
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or(Value::Null)
    }

    /// The kubelet, and the driver once registered (registration number `count`).
    fn serving(&self) -> (Kubelet, Logged) {
        let mut k = Kubelet::start(self.kubelet_dir.path());
        let d = start_driver_on(&self.rig, self.kubelet_dir.path(), &self.api, &self.node);
        registered(&mut k, 1, &d);
        (k, d)
    }
}

fn registered(k: &mut Kubelet, count: u64, d: &Logged) -> Value {
    let r = k.ask(json!({"cmd": "registered", "count": count, "timeout": 10}));
    assert!(
        r["error"].is_null(),
        "no registration #{count}: {r}\n{}",
        d.log()
    );
    assert_eq!(r["verdict"], "registered", "{r}\n{}", d.log());
    r
}

#[test]
fn the_kubelet_registers_the_driver_and_gets_a_prepared_claim_once_however_often_it_asks() {
    let w = World::new();
    let a = w.rig.nic(0);
    let gpu = ("gpu", "gpu.example.com", "gpu-0");
    let rail = seed(&w, "rail", &[gpu, ("nic", DRIVER, &device(&a))], &["pod-1"]);
    let gpu_only = seed(&w, "gpu-only", &[gpu], &["pod-1"]);
    let (mut k, d) = w.serving();
    let r = registered(&mut k, 1, &d);
    assert_eq!(r["type"], "DRAPlugin");
    assert_eq!(r["name"], DRIVER);
    assert_eq!(r["socket"], format!("{DRIVER}-reg.sock"));
    let endpoint = w
        .kubelet_dir
        .path()
        .join("plugins")
        .join(DRIVER)
        .join("dra.sock");
    assert_eq!(r["endpoint"], endpoint.display().to_string());
    // The DRA service, and the device health stream the kubelet watches when it knows it.
    assert_eq!(
        r["supported_versions"],
        json!([
            "v1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ])
    );
    assert!(
        d.log()
            .contains(&format!("the kubelet registered {DRIVER}")),
        "{}",
        d.log()
    );

    let first = k.prepare_in(&w.ns, &[("rail", &rail), ("gpu-only", &gpu_only)]);
    assert_eq!(
        first[&rail],
        json!({"error": "", "devices": [{"request_names": ["nic"], "pool_name": w.node,
            "device_name": device(&a), "cdi_device_ids": []}]}),
        "ours only, not the GPU driver's; a veth has no RDMA device, so no CDI ID\n{}",
        d.log()
    );
    assert_eq!(
        first[&gpu_only],
        json!({"error": "", "devices": []}),
        "another driver's claim"
    );
    let cp = w.checkpoint();
    assert_eq!(cp["version"], 1);
    assert_eq!(cp["claims"][&rail]["pods"], json!([w.pod("pod-1")]));
    assert_eq!(
        cp["claims"][&rail]["devices"][0]["deviceId"],
        a.name.as_str()
    );
    assert!(cp["claims"].get(&gpu_only).is_none(), "{cp}");

    // Again (the kubelet retries after a restart of its own): the same answer, nothing new.
    let again = k.prepare_in(&w.ns, &[("rail", &rail)]);
    assert_eq!(again[&rail], first[&rail]);
    assert_eq!(w.checkpoint(), cp);
}

/// The registration socket's path on a real node: what the kubelet's plugin watcher names as
/// `:authority` there.
const NODE_REG_SOCKET: &str = "/var/lib/kubelet/plugins_registry/rdma-host-device.io-reg.sock";

#[test]
fn a_kubelet_naming_the_socket_path_as_authority_registers_the_driver_and_is_served() {
    // The kubelet's plugin watcher dials the registration socket by its path (grpc-go's
    // passthrough resolver), so its requests name the path as HTTP/2 :authority: not a URI
    // authority. Each call is made twice on one connection (the second from grpc-go's HPACK
    // dynamic table), and once more with the path Huffman-coded, as grpc-go codes it.
    let w = World::new();
    let d = start_driver_on(&w.rig, w.kubelet_dir.path(), &w.api, &w.node);
    let root = w.kubelet_dir.path();
    let reg = root
        .join("plugins_registry")
        .join(format!("{DRIVER}-reg.sock"));
    let dra = root.join("plugins").join(DRIVER).join("dra.sock");
    until("the driver's sockets", &d, || {
        (reg.exists() && dra.exists()).then_some(())
    });
    let reg_path = reg.display().to_string();
    for (authority, coding) in [
        (reg_path.as_str(), Coding::Plain),
        (NODE_REG_SOCKET, Coding::Huffman),
    ] {
        for a in grpc_go_calls(&reg, authority, coding, GET_INFO, &[], 2) {
            assert!(
                a.ok(),
                "GetInfo, :authority {authority:?} ({coding:?}): {a:?}\n{}",
                d.log()
            );
            let info = PluginInfo::decode(&a.message[..]).expect("a PluginInfo");
            assert_eq!(info.name, DRIVER);
            assert_eq!(info.r#type, "DRAPlugin");
            assert_eq!(info.endpoint, dra.display().to_string());
        }
    }
    // And by grpc-go itself, dialling as the plugin watcher does.
    let info = kubelet_dial(&reg, GET_INFO).unwrap_or_else(|e| panic!("{e}\n{}", d.log()));
    let info = PluginInfo::decode(&info[..]).expect("a PluginInfo");
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.endpoint, dra.display().to_string());
    // The DRA service the registration names, called as the kubelet's DRA manager calls it
    // (`localhost`), by hand and by grpc-go.
    for a in grpc_go_calls(&dra, "localhost", Coding::Plain, PREPARE, &[], 2) {
        assert!(a.ok(), "NodePrepareResources: {a:?}\n{}", d.log());
        let r = NodePrepareResourcesResponse::decode(&a.message[..]).expect("an answer");
        assert!(r.claims.is_empty(), "{r:?}");
    }
    let r = kubelet_dial_localhost(&dra, PREPARE).unwrap_or_else(|e| panic!("{e}\n{}", d.log()));
    let r = NodePrepareResourcesResponse::decode(&r[..]).expect("an answer");
    assert!(r.claims.is_empty(), "{r:?}");
    // Only the registration socket is read through the rewriter (issue 48): h2 refuses a path
    // as :authority on the DRA socket, which no kubelet sends there.
    let dra_path = dra.display().to_string();
    for a in grpc_go_calls(&dra, &dra_path, Coding::Plain, PREPARE, &[], 1) {
        assert_eq!(
            a.reset,
            Some(1),
            "PROTOCOL_ERROR expected: {a:?}\n{}",
            d.log()
        );
    }
}

#[test]
fn a_second_claim_for_a_prepared_nic_is_refused_and_a_stale_uid_too() {
    let w = World::new();
    let a = w.rig.nic(0);
    let first = seed(&w, "first", &[("nic", DRIVER, &device(&a))], &["pod-1"]);
    let second = seed(&w, "second", &[("nic", DRIVER, &device(&a))], &["pod-2"]);
    let elsewhere = seed(
        &w,
        "elsewhere",
        &[("nic", DRIVER, "net-no-such-nic")],
        &["pod-3"],
    );
    // A NIC of the node that the slice does not publish (not in dra.nics): not prepared either.
    let hidden_nic = w.rig.nic(2);
    let hidden = seed(
        &w,
        "hidden",
        &[("nic", DRIVER, &device(&hidden_nic))],
        &["pod-4"],
    );
    let (mut k, d) = w.serving();
    assert_eq!(
        k.prepare_in(&w.ns, &[("first", &first)])[&first]["error"],
        ""
    );
    let r = k.prepare_in(
        &w.ns,
        &[
            ("second", &second),
            ("elsewhere", &elsewhere),
            ("first", "uid-old"),
        ],
    );
    let e = |uid: &str| r[uid]["error"].as_str().unwrap().to_owned();
    assert!(
        e(&second).contains(&format!(
            "already prepared for claim {}/first ({first})",
            w.ns
        )),
        "{r}\n{}",
        d.log()
    );
    assert!(e(&elsewhere).contains("not a NIC of this node"), "{r}");
    let h = k.prepare_in(&w.ns, &[("hidden", &hidden)]);
    assert!(
        h[&hidden]["error"]
            .as_str()
            .unwrap()
            .contains("not a NIC of this node"),
        "{h}\n{}",
        d.log()
    );
    assert!(
        e("uid-old").contains(&format!("has UID {first}, not uid-old")),
        "{r}"
    );
    let cp = w.checkpoint();
    assert_eq!(
        cp["claims"].as_object().unwrap().keys().collect::<Vec<_>>(),
        [&first]
    );
}

#[test]
fn unprepare_works_from_the_checkpoint_after_a_driver_restart_and_for_unknown_claims() {
    let w = World::new();
    let a = w.rig.nic(0);
    let first = seed(&w, "first", &[("nic", DRIVER, &device(&a))], &["pod-1"]);
    let second = seed(&w, "second", &[("nic", DRIVER, &device(&a))], &["pod-2"]);
    let (mut k, mut d) = w.serving();
    assert_eq!(
        k.prepare_in(&w.ns, &[("first", &first)])[&first]["error"],
        ""
    );
    // A new driver (a restart, or the next DaemonSet pod) with no API server at all: the
    // checkpoint alone says what to unprepare.
    d.stop();
    let d2 = start_driver_on(&w.rig, w.kubelet_dir.path(), &w.api.nowhere(), &w.node);
    registered(&mut k, 2, &d2);
    assert!(
        d2.log().contains("1 claim(s) prepared before this start"),
        "{}",
        d2.log()
    );
    let u = k.unprepare_in(&w.ns, &[("first", &first), ("never", "uid-never")]);
    assert_eq!(
        u,
        json!({&first: {"error": ""}, "uid-never": {"error": ""}}),
        "{}",
        d2.log()
    );
    assert_eq!(w.checkpoint()["claims"], json!({}));
    assert_eq!(
        k.unprepare_in(&w.ns, &[("first", &first)])[&first]["error"],
        "",
        "twice"
    );
    // The NIC is free for the next claim (which the driver cannot read now: it says so).
    let r = k.prepare_in(&w.ns, &[("second", &second)]);
    assert!(
        r[&second]["error"]
            .as_str()
            .unwrap()
            .contains(&format!("reading claim {}/second", w.ns)),
        "{r}"
    );
}

#[test]
fn add_with_dra_request_takes_the_nic_prepared_for_its_pod_and_never_another_pods() {
    let w = World::new();
    let (a, b) = (w.rig.nic(0), w.rig.nic(1));
    let (pod_a, pod_b, pod_c) = (w.rig.netns(0), w.rig.netns(1), w.rig.netns(2));
    let ca = seed(&w, "a", &[("nic", DRIVER, &device(&a))], &["pod-a"]);
    let cb = seed(&w, "b", &[("nic", DRIVER, &device(&b))], &["pod-b"]);
    let (mut k, d) = w.serving();
    let r = k.prepare_in(&w.ns, &[("a", &ca), ("b", &cb)]);
    assert_eq!(
        (r[&ca]["error"].as_str(), r[&cb]["error"].as_str()),
        (Some(""), Some("")),
        "{r}\n{}",
        d.log()
    );

    // One NAD for every pod: the request's name is all it says.
    let conf = w.rig.conf("1.0.0", json!({"draRequest": "nic"}));
    // Pod c has no claim: the same NAD reaches nothing, though b's NIC is free on the host.
    let c = w.rig.call(
        "ADD",
        &conf,
        &pod_c.path(),
        &w.rig.cid(2),
        "net1",
        &[("CNI_ARGS", &w.cni_args("pod-c"))],
    );
    let e = c.err_code(100);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains(&format!("prepared no NIC for pod {}", w.pod("pod-c"))),
        "{e}"
    );
    assert!(b.on_host().is_some() && a.on_host().is_some());
    // No pod UID (a runtime outside Kubernetes): refused, nothing guessed.
    w.rig
        .call("ADD", &conf, &pod_c.path(), &w.rig.cid(2), "net1", &[])
        .err_code(4);
    // A request pod a does not have.
    let other = w.rig.conf("1.0.0", json!({"draRequest": "rail-7"}));
    let e = w
        .rig
        .call(
            "ADD",
            &other,
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-a"))],
        )
        .err_code(100);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("this pod's requests: nic"),
        "{e}"
    );

    // Pod a gets a's NIC, pod b gets b's, each by its own UID.
    w.rig
        .call(
            "ADD",
            &conf,
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-a"))],
        )
        .ok();
    assert!(a.on_host().is_none(), "a went into pod a");
    assert_eq!(
        link(Some(&pod_a.name), "net1").map(|l| l.mac),
        Some(a.mac.clone())
    );
    assert!(b.on_host().is_some(), "b stays home");
    w.rig
        .call(
            "ADD",
            &conf,
            &pod_b.path(),
            &w.rig.cid(1),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-b"))],
        )
        .ok();
    assert_eq!(
        link(Some(&pod_b.name), "net1").map(|l| l.mac),
        Some(b.mac.clone())
    );
    // A second ADD for pod a under the same request: its one NIC is attached already.
    w.rig
        .call(
            "ADD",
            &conf,
            &pod_a.path(),
            &w.rig.cid(0),
            "net2",
            &[("CNI_ARGS", &w.cni_args("pod-a"))],
        )
        .err_code(102);

    // DEL works from what ADD recorded, as always: the NIC comes home.
    w.rig
        .call(
            "DEL",
            &conf,
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-a"))],
        )
        .ok();
    w.rig
        .call(
            "DEL",
            &conf,
            &pod_b.path(),
            &w.rig.cid(1),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-b"))],
        )
        .ok();
    a.assert_home(Some(&pod_a), &"after DEL");
    b.assert_home(Some(&pod_b), &"after DEL");
    let left: Vec<PathBuf> = w
        .rig
        .state_files()
        .into_iter()
        .filter(|f| !f.ends_with("dra/checkpoint.json"))
        .collect();
    assert!(
        left.is_empty(),
        "only the driver's checkpoint stays: {left:?}"
    );
}

/// The CNI binary the runtime execs per attachment reads the driver's checkpoint and nothing
/// else of it: no gRPC server, no API client (their symbols are not linked in).
#[test]
fn the_cni_binary_links_the_checkpoint_reader_but_not_the_driver() {
    let out = Command::new("nm")
        .args(["-C", PLUGIN])
        .output()
        .expect("nm (binutils)");
    if out.stdout.is_empty() {
        eprintln!("{PLUGIN} has no symbol table (stripped): nothing to look at");
        return;
    }
    let syms = String::from_utf8_lossy(&out.stdout);
    let count = |s: &str| syms.lines().filter(|l| l.contains(s)).count();
    assert!(
        count("dra::checkpoint") > 0,
        "ADD's draRequest reads the checkpoint"
    );
    for agent_only in [
        "dra::plugin",
        "dra::nics",
        "tonic::",
        "kube::",
        "k8s_openapi::",
        "h2::",
    ] {
        assert_eq!(count(agent_only), 0, "{agent_only} reached the CNI binary");
    }
}

/// This test's claim `name` as the API server has it.
fn claim(w: &World, name: &str) -> Value {
    w.api.call("GET", &format!("{}/{name}", w.claims()), None)
}

/// The claim's `status.devices[]` (empty when it has none), each entry without its null
/// fields (the real API server writes an entry's absent `conditions` as null).
fn status_devices(w: &World, name: &str) -> Vec<Value> {
    without_nulls(&claim(w, name)["status"]["devices"])
}

/// The entries of `devices` (a JSON array, or nothing), each without its null fields.
fn without_nulls(devices: &Value) -> Vec<Value> {
    let mut devices = devices.as_array().cloned().unwrap_or_default();
    for d in &mut devices {
        if let Some(o) = d.as_object_mut() {
            o.retain(|_, v| !v.is_null());
        }
    }
    devices
}

/// Wait up to 15 s for `f` to give something; panic with `what` (and the driver's log).
fn until<T>(what: &str, d: &Logged, mut f: impl FnMut() -> Option<T>) -> T {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}\n{}",
            d.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Another driver's entry, as a GPU driver would write it in the same claim's status.
fn gpu_entry(w: &World) -> Value {
    json!({"driver": "gpu.example.com", "pool": w.node, "device": "gpu-0",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
            "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"}]})
}

/// Static IPAM (Debian's `static` plugin) with `addresses`.
fn with_static_ipam(rig: &Rig, addresses: &[String]) -> Value {
    let mut conf = rig.conf("1.0.0", json!({"draRequest": "nic"}));
    conf["ipam"] = json!({"type": "static",
        "addresses": addresses.iter().map(|a| json!({"address": a})).collect::<Vec<_>>()});
    conf
}

/// Our entry for `nic` as the claim's status should show it after ADD.
fn our_entry(w: &World, nic: &Veth, ips: &[String]) -> Value {
    json!({"driver": DRIVER, "pool": w.node, "device": device(nic),
        "networkData": {"interfaceName": "net1", "ips": ips, "hardwareAddress": nic.mac}})
}

#[test]
fn the_claims_status_carries_the_network_data_add_applied_until_del_even_across_a_driver_restart() {
    let w = World::new();
    let (a, b) = (w.rig.nic(0), w.rig.nic(1));
    let (pod_a, pod_b) = (w.rig.netns(0), w.rig.netns(1));
    let ca = seed(
        &w,
        "a",
        &[
            ("gpu", "gpu.example.com", "gpu-0"),
            ("nic", DRIVER, &device(&a)),
        ],
        &["pod-a"],
    );
    let cb = seed(&w, "b", &[("nic", DRIVER, &device(&b))], &["pod-b"]);
    // The GPU driver has written its entry in claim a already: ours goes beside it.
    let mut c = claim(&w, "a");
    c["status"]["devices"] = json!([gpu_entry(&w)]);
    w.api
        .call("PUT", &format!("{}/a/status", w.claims()), Some(&c));
    // A claim allocated our device but never prepared by this driver, and a state record
    // naming it (root could write one; our CNI never would): nothing is written for it.
    let stranger = seed(&w, "stranger", &[("nic", DRIVER, "net-other")], &["pod-x"]);
    let forged = w.rig.state_dir().join("forged:net1.json");
    std::fs::create_dir_all(w.rig.state_dir()).unwrap();
    std::fs::write(
        &forged,
        json!({"containerId": "forged", "ifname": "net1", "network": "n", "netns": "/x",
            "hostName": "no-such-nic", "hostMtu": 1500, "hostUp": true, "mac": "02:00:00:00:00:09",
            "dra": {"namespace": w.ns, "name": "stranger", "uid": stranger, "request": "nic",
                "driver": DRIVER, "pool": w.node, "device": "net-other",
                "network": {"interfaceName": "net1", "ips": ["10.99.0.1/24"],
                    "hardwareAddress": "02:00:00:00:00:09"}}})
        .to_string(),
    )
    .unwrap();

    let (mut k, d) = w.serving();
    let r = k.prepare_in(&w.ns, &[("a", &ca), ("b", &cb)]);
    assert_eq!(r[&ca]["error"], "", "{r}\n{}", d.log());
    assert_eq!(r[&cb]["error"], "", "{r}\n{}", d.log());

    let o = w.rig.octet();
    let ips_a = vec![format!("10.91.{o}.5/24"), format!("fd00:91:{o:x}::5/64")];
    let ips_b = vec![format!("10.92.{o}.6/24")];
    w.rig
        .call(
            "ADD",
            &with_static_ipam(&w.rig, &ips_a),
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-a"))],
        )
        .ok();
    w.rig
        .call(
            "ADD",
            &with_static_ipam(&w.rig, &ips_b),
            &pod_b.path(),
            &w.rig.cid(1),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-b"))],
        )
        .ok();
    // What ADD applied, not what the pod shows later: the pod renames and re-addresses it.
    let want_a = our_entry(&w, &a, &ips_a);
    until("claim a's entry", &d, || {
        (status_devices(&w, "a") == [gpu_entry(&w), want_a.clone()]).then_some(())
    });
    until("claim b's entry", &d, || {
        (status_devices(&w, "b") == [our_entry(&w, &b, &ips_b)]).then_some(())
    });
    assert_eq!(
        link(Some(&pod_a.name), "net1").map(|l| l.mac),
        Some(a.mac.clone()),
        "the entry's MAC is the NIC's"
    );
    assert!(
        status_devices(&w, "stranger").is_empty(),
        "a record naming a claim the driver did not prepare writes nothing"
    );
    assert!(
        d.log().contains(&format!(
            "claim {}/stranger ({stranger}), which this driver did not prepare",
            w.ns
        )),
        "{}",
        d.log()
    );

    // DEL of pod b while the driver runs: b's entry goes.
    w.rig
        .call(
            "DEL",
            &with_static_ipam(&w.rig, &ips_b),
            &pod_b.path(),
            &w.rig.cid(1),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-b"))],
        )
        .ok();
    until("claim b's entry to go", &d, || {
        status_devices(&w, "b").is_empty().then_some(())
    });
    assert_eq!(status_devices(&w, "a"), [gpu_entry(&w), want_a.clone()]);

    // DEL of pod a while no driver runs: the next one removes a's entry at start, and only it.
    let mut d = d;
    d.stop();
    w.rig
        .call(
            "DEL",
            &with_static_ipam(&w.rig, &ips_a),
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &w.cni_args("pod-a"))],
        )
        .ok();
    assert_eq!(status_devices(&w, "a"), [gpu_entry(&w), want_a]);
    let d2 = start_driver_on(&w.rig, w.kubelet_dir.path(), &w.api, &w.node);
    registered(&mut k, 2, &d2);
    until("claim a's entry to go after the restart", &d2, || {
        (status_devices(&w, "a") == [gpu_entry(&w)]).then_some(())
    });
    a.assert_home(Some(&pod_a), &"after DEL");
    b.assert_home(Some(&pod_b), &"after DEL");
    std::fs::remove_file(&forged).unwrap();
}

/// An API server without the DRAResourceClaimDeviceStatus gate drops `status.devices` and
/// answers 200: the driver says so once and does not write again and again. The stand-in: the
/// gate is locked on in 1.37, and no older server is built here.
#[test]
fn an_api_server_that_drops_the_device_status_is_told_once_and_not_asked_again() {
    let w = World::stand_in(&["--no-device-status"]);
    let (a, b) = (w.rig.nic(0), w.rig.nic(1));
    let (pod_a, pod_b) = (w.rig.netns(0), w.rig.netns(1));
    let ca = seed(&w, "a", &[("nic", DRIVER, &device(&a))], &["pod-a"]);
    let cb = seed(&w, "b", &[("nic", DRIVER, &device(&b))], &["pod-b"]);
    let (mut k, d) = w.serving();
    let r = k.prepare_in(&w.ns, &[("a", &ca), ("b", &cb)]);
    assert_eq!(
        (r[&ca]["error"].as_str(), r[&cb]["error"].as_str()),
        (Some(""), Some(""))
    );
    let o = w.rig.octet();
    for (i, (pod, uid)) in [(&pod_a, "pod-a"), (&pod_b, "pod-b")]
        .into_iter()
        .enumerate()
    {
        w.rig
            .call(
                "ADD",
                &with_static_ipam(&w.rig, &[format!("10.93.{o}.{}/24", i + 1)]),
                &pod.path(),
                &w.rig.cid(i as u32),
                "net1",
                &[("CNI_ARGS", &w.cni_args(uid))],
            )
            .ok();
    }
    let dropped = "the API server dropped status.devices";
    until("the driver to see the field dropped", &d, || {
        d.log().contains(dropped).then_some(())
    });
    let puts = |name: &str| {
        w.api
            .requests()
            .lines()
            .filter(|l| l.contains(&format!("PUT {}/{name}/status", w.claims())))
            .count()
    };
    // Both claims written once (after the seed's own PUT), then left alone past a retry period.
    until("both claims written", &d, || {
        (puts("a") == 2 && puts("b") == 2).then_some(())
    });
    std::thread::sleep(
        rdma_host_device_agent::dra::status::RETRY + std::time::Duration::from_secs(1),
    );
    assert_eq!((puts("a"), puts("b")), (2, 2), "{}", d.log());
    assert_eq!(d.log().matches(dropped).count(), 1, "{}", d.log());
    assert!(status_devices(&w, "a").is_empty());
    for (i, (pod, uid)) in [(&pod_a, "pod-a"), (&pod_b, "pod-b")]
        .into_iter()
        .enumerate()
    {
        w.rig
            .call(
                "DEL",
                &with_static_ipam(&w.rig, &[format!("10.93.{o}.{}/24", i + 1)]),
                &pod.path(),
                &w.rig.cid(i as u32),
                "net1",
                &[("CNI_ARGS", &w.cni_args(uid))],
            )
            .ok();
    }
}

/// The real API server refuses these `status.devices[]` entries (422, one cause per field),
/// and the stand-in, which two cases above still use, refuses them as it does: an entry for a
/// device the claim was not allocated, an entry twice, an address without its prefix length
/// or not in canonical form, an address twice, an interface name over 256 bytes.
#[test]
fn the_api_stand_in_refuses_device_status_entries_the_real_one_refuses() {
    for w in [World::new(), World::stand_in(&[])] {
        device_status_refusals(&w);
    }
}

fn device_status_refusals(w: &World) {
    let which = if w.real {
        "the real API server"
    } else {
        "the stand-in"
    };
    seed(w, "v", &[("nic", DRIVER, "net-a")], &["pod-v"]);
    let put = |devices: Value| {
        let mut c = claim(w, "v");
        c["status"]["devices"] = devices;
        w.api
            .try_call("PUT", &format!("{}/v/status", w.claims()), Some(&c))
    };
    let entry = |device: &str, net: Value| json!({"driver": DRIVER, "pool": w.node, "device": device, "networkData": net});
    let good = entry(
        "net-a",
        json!({"interfaceName": "net1", "ips": ["10.0.0.5/24", "fd00::5/64"],
        "hardwareAddress": "02:00:00:00:00:01"}),
    );
    for (devices, field, why) in [
        (
            json!([entry("net-b", json!({}))]),
            "status.devices[0]",
            "must be an allocated device in the claim",
        ),
        (json!([good, good]), "status.devices[1]", "Duplicate value"),
        (
            json!([entry("net-a", json!({"ips": ["10.0.0.5"]}))]),
            "status.devices[0].networkData.ips[0]",
            "must be a valid address in CIDR form",
        ),
        (
            json!([entry("net-a", json!({"ips": ["fd00:0::5/64"]}))]),
            "status.devices[0].networkData.ips[0]",
            "must be in canonical form (\"fd00::5/64\")",
        ),
        (
            json!([entry(
                "net-a",
                json!({"ips": ["10.0.0.5/24", "10.0.0.5/24"]})
            )]),
            "status.devices[0].networkData.ips[1]",
            "Duplicate value",
        ),
        (
            json!([entry("net-a", json!({"interfaceName": "n".repeat(257)}))]),
            "status.devices[0].networkData.interfaceName",
            "Too long",
        ),
    ] {
        let (ok, answer) = put(devices.clone());
        assert!(!ok, "{which}: {devices} was accepted");
        assert_eq!(answer["code"], 422, "{which}: {answer}");
        let causes = answer["details"]["causes"].as_array().unwrap();
        assert!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["message"].as_str().unwrap().contains(why)),
            "{which}: {devices}: {answer}"
        );
    }
    let (ok, answer) = put(json!([good]));
    assert!(ok, "{answer}");
    assert_eq!(
        without_nulls(&answer["status"]["devices"]),
        [good],
        "{which}"
    );
}

/// Another writer changes the claim between the driver's read and its write (a GPU driver
/// updating its entry): the 409 is met by reading the claim again and writing at once, not by
/// the retry of a write that got no answer.
#[test]
fn a_claim_changed_under_the_write_is_read_again_and_written() {
    // The stand-in: a real server is not made to lose a race twice on demand.
    let w = World::stand_in(&["--race-device-status", "2"]);
    let a = w.rig.nic(0);
    let pod_a = w.rig.netns(0);
    let ca = seed(&w, "a", &[("nic", DRIVER, &device(&a))], &["pod-a"]);
    let (mut k, d) = w.serving();
    assert_eq!(
        k.prepare_in(&w.ns, &[("a", &ca)])[&ca]["error"],
        "",
        "{}",
        d.log()
    );
    let ips = vec![format!("10.94.{}.5/24", w.rig.octet())];
    let conf = with_static_ipam(&w.rig, &ips);
    let args = w.cni_args("pod-a");
    w.rig
        .call(
            "ADD",
            &conf,
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &args)],
        )
        .ok();
    until("claim a's entry", &d, || {
        (status_devices(&w, "a") == [our_entry(&w, &a, &ips)]).then_some(())
    });
    let log = w.api.requests();
    let conflicts = log
        .lines()
        .filter(|l| l.contains(&format!("PUT {}/a/status", w.claims())) && l.contains(" 409 "))
        .count();
    assert_eq!(conflicts, 2, "{log}");
    assert!(
        !d.log().contains("trying again every"),
        "a conflict is not a failure to wait out\n{}",
        d.log()
    );
    w.rig
        .call(
            "DEL",
            &conf,
            &pod_a.path(),
            &w.rig.cid(0),
            "net1",
            &[("CNI_ARGS", &args)],
        )
        .ok();
    until("claim a's entry to go", &d, || {
        status_devices(&w, "a").is_empty().then_some(())
    });
}

/// Issue 36: what the driver makes has the mode it names whatever the umask it was started
/// with: the directories it makes for its sockets 0750 (under umask 000 they were 0777), both
/// sockets 0600 from the moment they exist (they were the umask's until a chmod), the
/// checkpoint 0600 in a 0700 directory. Under umask 000 and 077, each.
#[test]
fn its_sockets_and_checkpoint_have_their_modes_whatever_the_umask() {
    for mask in [0o000, 0o077] {
        let w = World::new();
        let a = w.rig.nic(0);
        let rail = seed(&w, "rail", &[("nic", DRIVER, &device(&a))], &["pod-1"]);
        let kubelet = w.kubelet_dir.path();
        let mut k = Kubelet::start(kubelet);
        let mut cmd = Command::new(AGENT);
        with_umask(&mut cmd, mask)
            .args(["dra", "--node-name", &w.node, "--kubelet-dir"])
            .arg(kubelet)
            .arg("--kube-server")
            .arg(&w.api.url)
            .arg("--kube-ca")
            .arg(&w.api.ca)
            .arg("--kube-token")
            .arg(&w.api.token)
            .env(NODE_CONFIG_ENV, w.rig.node_config());
        let log = w.rig.dir.path().join(format!("dra-{mask:03o}.log"));
        let d = Logged::spawn(&mut cmd, log, "the DRA driver");
        registered(&mut k, 1, &d);
        let r = k.prepare_in(&w.ns, &[("rail", &rail)]);
        assert_eq!(r[&rail]["error"], "", "{r}\n{}", d.log());
        let plugin_dir = kubelet.join("plugins").join(DRIVER);
        let registry = kubelet.join("plugins_registry");
        let checkpoint = w.rig.state_dir().join("dra/checkpoint.json");
        assert_eq!(
            [
                mode_of(&kubelet.join("plugins")),
                mode_of(&plugin_dir),
                mode_of(&registry),
                mode_of(&plugin_dir.join("dra.sock")),
                mode_of(&registry.join(format!("{DRIVER}-reg.sock"))),
                mode_of(checkpoint.parent().unwrap()),
                mode_of(&checkpoint),
            ],
            [
                Ok(Mode(0o750)),
                Ok(Mode(0o750)),
                Ok(Mode(0o750)),
                Ok(Mode(0o600)),
                Ok(Mode(0o600)),
                Ok(Mode(0o700)),
                Ok(Mode(0o600))
            ],
            "umask {mask:03o}: the socket directories, the DRA and registration sockets, the \
             checkpoint's directory and the checkpoint\n{}",
            d.log()
        );
    }
}
