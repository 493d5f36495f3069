//! A NIC from a ResourceClaim reaching the pod through Multus' DRA mode (Multus main, after
//! v4.3.0): Multus reads the pod's claims and the node's ResourceSlice from the API server and
//! hands the allocated device's `k8s.cni.cncf.io/deviceID` to the CNI of the NAD whose
//! `k8s.v1.cni.cncf.io/resourceName` equals the device's `k8s.cni.cncf.io/resourceName`.
//!
//! The whole way, each side real or a stand-in written apart from our code:
//! - our DRA driver (`rdma-host-device-agent dra`) publishes the node's slice to the real
//!   kube-apiserver 1.37 of the test cluster (tests/cluster/cluster.sh), each test in a
//!   namespace and under a node name of its own;
//! - the test acts as the user (the pod, the NAD from conf/k8s/dra-multus.yaml), the
//!   kube-controller-manager (a claim made from the pod's template, named in the pod's
//!   `status.resourceClaimStatuses`) and the scheduler (the claim allocated to a device the
//!   slice lists, reserved for the pod), with real REST calls; the pod is a real one that stays
//!   Pending (no node matches its selector), as the real controller-manager keeps a
//!   reservation only for a pod that exists;
//! - the kubelet stand-in (tests/dra/kubelet.py) has the driver prepare the claim;
//! - the Multus-DRA stand-in (tests/kube/multus_dra.py, Multus' draclient step read from its
//!   source) resolves the deviceID from the pod, the NAD, the claim and the slice;
//! - the delegate Multus builds from it (crates/test-support/src/multus.rs, as tests/attach/multus.rs does for
//!   Multus 4.x) runs through libcni (tests/libcni-driver): ADD, CHECK, DEL.
//!
//! The NICs are veths: our slice names one `net-NAME` and publishes its interface name as the
//! deviceID, which ADD resolves for a link with no bus device (select.rs). Needs root, the venv
//! with grpcio that scripts/setup.sh makes, curl and `go`.

use test_support as common;
use test_support::apiserver as standin;
use test_support::dra_kubelet as kubelet;

use common::*;
use kubelet::*;
use serde_json::{Value, json};
use standin::ApiServer;
use std::process::Command;
use std::time::{Duration, Instant};

const IF: &str = "net1";
/// The resourceName the node configuration gives every device, and the example NAD asks.
const RESOURCE_NAME: &str = "rdma-host-device.io/rail";

/// The example NAD for Multus' DRA mode (conf/k8s/dra-multus.yaml), its IPAM made local.
fn example_nad(rig: &Rig, ns: &str) -> Value {
    let p = common::repo().join("conf/k8s/dra-multus.yaml");
    let docs = yaml::parse_all(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let mut nad = docs
        .into_iter()
        .find(|d| d["kind"] == "NetworkAttachmentDefinition")
        .expect("conf/k8s/dra-multus.yaml has a NAD");
    let mut conf: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    assert_eq!(
        conf["ipam"]["type"], "whereabouts",
        "the example's IPAM (needs the Kubernetes API): replaced here by host-local"
    );
    conf["ipam"] = rig.host_local_ipam();
    nad["spec"]["config"] = json!(conf.to_string());
    nad["metadata"]["namespace"] = json!(ns);
    nad
}

/// One node: the API server, the kubelet's directory, our driver, the kubelet stand-in.
struct World {
    rig: Rig,
    api: ApiServer,
    /// This test's namespace, and its node's name (the slice's pool).
    ns: String,
    node: String,
    _kubelet_dir: TempDir,
    kubelet: Kubelet,
    driver: Logged,
}

impl World {
    /// The node publishes its NICs 0 and 1 (veths named in `dra.nics`), with `dra` keys
    /// `extra` besides (the resourceName).
    fn new(extra: Value) -> World {
        let rig = Rig::new();
        let mut dra = json!({"nics": {"names": [rig.nic_name(0), rig.nic_name(1)]}});
        for (k, v) in extra.as_object().unwrap() {
            dra[k] = v.clone();
        }
        rig.set_node(json!({"dra": dra}));
        let api = ApiServer::real();
        let (ns, node) = (
            format!("mdra-{}", rig.n),
            format!("node-m{}-{}", tag(), rig.n),
        );
        api.call(
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        );
        // The namespace's default ServiceAccount, which a pod needs: the controller-manager
        // makes it a moment later; made here at once (a 409 if it was quicker).
        api.try_call(
            "POST",
            &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            Some(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})),
        );
        let kubelet_dir = TempDir::new("mdra-kubelet");
        let mut kubelet = Kubelet::start(kubelet_dir.path());
        let driver = start_driver_on(&rig, kubelet_dir.path(), &api, &node);
        let r = kubelet
            .0
            .ask(json!({"cmd": "registered", "count": 1, "timeout": 10}));
        assert_eq!(r["verdict"], "registered", "{r}\n{}", driver.log());
        World {
            rig,
            api,
            ns,
            node,
            _kubelet_dir: kubelet_dir,
            kubelet,
            driver,
        }
    }

    /// Our driver's devices on this node as the API server lists them, once it published
    /// `want` of them.
    fn published(&self, want: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let l = self.api.call("GET", &format!(
                    "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={},spec.driver={DRIVER}",
                    self.node
                ), None);
            let devices: Vec<Value> = l["items"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
                .collect();
            if devices.len() >= want {
                return devices;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the driver published {l} only\n{}",
                self.driver.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pod `name` on this node claiming template `one-rail` as "rail": created by the user,
    /// its claim made by the kube-controller-manager and named in the pod's status, allocated
    /// by the scheduler (`results`: (request, driver, device)) and reserved for the pod, then
    /// prepared by the kubelet. Returns the pod's UID.
    fn pod_with_claim(&mut self, name: &str, results: &[(&str, &str, &str)]) -> String {
        let (ns, node) = (&self.ns, &self.node);
        let pods = format!("/api/v1/namespaces/{ns}/pods");
        let pod = self.api.call(
            "POST",
            &pods,
            Some(&json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "nodeSelector": {"rdma-host-device.io/test": "no-such-node"},
                    "resourceClaims": [{"name": "rail", "resourceClaimTemplateName": "one-rail"}],
                    "containers": [{"name": "c", "image": "trainer", "imagePullPolicy": "Never",
                                    "resources": {"claims": [{"name": "rail"}]}}],
                },
            })),
        );
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
        let claims = format!("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims");
        let claim_name = format!("{name}-rail-x7k2p");
        let claim = self.api.call(
            "POST",
            &claims,
            Some(&json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name, "namespace": ns,
                    "annotations": {"resource.kubernetes.io/pod-claim-name": "rail"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                         "uid": uid, "controller": true,
                                         "blockOwnerDeletion": true}],
                },
                "spec": {"devices": {"requests": results.iter().map(|(r, _, _)| json!({
                    "name": r, "exactly": {"deviceClassName": DRIVER}})).collect::<Vec<_>>()}},
            })),
        );
        // The controller-manager's part: the claim named in the pod's status (read again until
        // the write lands: the scheduler writes the same pod's conditions meanwhile).
        let statuses = json!([{"name": "rail", "resourceClaimName": claim_name}]);
        let mut tries = 0;
        loop {
            let mut p = self.api.call("GET", &format!("{pods}/{name}"), None);
            p["status"]["resourceClaimStatuses"] = statuses.clone();
            let (ok, answer) = self
                .api
                .try_call("PUT", &format!("{pods}/{name}/status"), Some(&p));
            if ok {
                break;
            }
            tries += 1;
            assert!(tries < 10, "the pod's status: {answer}");
        }
        let mut c = claim.clone();
        c["status"] = json!({
            "allocation": {"devices": {"results": results.iter().map(|(r, d, dev)| json!({
                "request": r, "driver": d, "pool": node, "device": dev})).collect::<Vec<_>>()}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
        });
        self.api
            .call("PUT", &format!("{claims}/{claim_name}/status"), Some(&c));
        let claim_uid = claim["metadata"]["uid"].as_str().unwrap();
        let r = self
            .kubelet
            .0
            .ask(json!({"cmd": "prepare", "driver": DRIVER,
            "claims": [{"namespace": ns, "name": claim_name, "uid": claim_uid}]}));
        assert_eq!(
            r["claims"][claim_uid]["error"],
            "",
            "{r}\n{}",
            self.driver.log()
        );
        uid
    }

    fn create_nad(&self, nad: &Value) {
        self.api.call(
            "POST",
            &format!(
                "/apis/k8s.cni.cncf.io/v1/namespaces/{}/network-attachment-definitions",
                self.ns
            ),
            Some(nad),
        );
    }

    /// The Multus-DRA stand-in for pod `pod` (`uid`, as the runtime passes it) and `networks`.
    fn multus(&self, pod: &str, uid: &str, networks: &str) -> Value {
        let out = Command::new("python3")
            .arg(common::repo().join("tests/kube/multus_dra.py"))
            .args(["--server", &self.api.url, "--ca"])
            .arg(&self.api.ca)
            .arg("--token")
            .arg(&self.api.token)
            .args([
                "--namespace",
                &self.ns,
                "--pod",
                pod,
                "--uid",
                uid,
                "--network",
                networks,
            ])
            .output()
            .expect("python3 tests/kube/multus_dra.py");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "multus_dra.py: {e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// The delegate Multus builds from `d` (one of the stand-in's answers), written for libcni,
    /// and the extra libcni flags Multus' runtime config gives (CNI_ARGS, capabilities).
    fn delegate(
        &self,
        d: &Value,
        pod: &str,
        uid: &str,
        cid: &str,
    ) -> (std::path::PathBuf, Vec<String>) {
        let id = d["deviceID"].as_str();
        let conf = multus_delegate(d["config"].clone(), id, None);
        let file = self.rig.write(
            &format!("{}-{cid}.conf", d["network"].as_str().unwrap()),
            &conf,
        );
        let mut extra = vec!["-args".to_owned(), multus_k8s_args(&self.ns, pod, uid, cid)];
        if let Some(id) = id {
            extra.extend(multus_device_caps(
                &self.rig.dir.path().join("devinfo"),
                conf["name"].as_str().unwrap(),
                cid,
                IF,
                id,
            ));
        }
        (file, extra)
    }
}

/// No attachment recorded in the node's stateDir (the DRA driver's checkpoint stays).
fn no_attachment(rig: &Rig, ctx: &dyn std::fmt::Display) {
    let left: Vec<_> = rig
        .state_files()
        .into_iter()
        .filter(|f| !f.ends_with("dra/checkpoint.json"))
        .collect();
    assert!(left.is_empty(), "attachment records left: {left:?}\n{ctx}");
}

fn attr<'a>(dev: &'a Value, name: &str) -> Option<&'a str> {
    dev["attributes"][name]["string"].as_str()
}

fn device_named<'a>(devices: &'a [Value], name: &str) -> &'a Value {
    devices
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in {devices:?}"))
}

#[test]
fn a_claimed_nic_reaches_the_pod_through_multus_dra_mode_and_comes_home_on_del() {
    let mut w = World::new(json!({"resourceName": RESOURCE_NAME}));
    let (a, b) = (w.rig.nic(0), w.rig.nic(1));
    let pod_ns = w.rig.netns(0);
    let cid = w.rig.cid(0);
    let devices = w.published(2);
    // The device the scheduler picks: NIC b's, as the slice names and describes it.
    let name_b = rdma_host_device_agent::dra::slices::name_for(None, &b.name, &b.name);
    let dev_b = device_named(&devices, &name_b);
    assert_eq!(
        attr(dev_b, "k8s.cni.cncf.io/resourceName"),
        Some(RESOURCE_NAME)
    );
    let published_id = attr(dev_b, "k8s.cni.cncf.io/deviceID")
        .expect("the slice gives the device Multus' deviceID")
        .to_owned();
    // With a GPU from another driver in the same claim (in no slice of ours: Multus skips it).
    let uid = w.pod_with_claim(
        "trainer",
        &[
            ("gpu", "gpu.example.com", "gpu-0"),
            ("nic", DRIVER, &name_b),
        ],
    );
    let nad = example_nad(&w.rig, &w.ns);
    let net = nad["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(
        nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"],
        RESOURCE_NAME
    );
    w.create_nad(&nad);

    let m = w.multus("trainer", &uid, &net);
    assert_eq!(
        m["resourceMap"],
        json!({RESOURCE_NAME: [published_id]}),
        "{m}\n{}",
        w.api.requests()
    );
    let d = &m["delegates"][0];
    assert_eq!(d["deviceID"], published_id.as_str(), "{m}");
    assert!(
        m["log"].to_string().contains("gpu.example.com"),
        "the GPU was skipped, not an error: {m}"
    );
    // Multus read what its draclient reads, the slices scoped by field selectors.
    let reqs = w.api.requests();
    let ns = &w.ns;
    for path in [
        format!("GET /api/v1/namespaces/{ns}/pods/trainer "),
        format!(
            "GET /apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{net} "
        ),
        format!("GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/trainer-rail-x7k2p "),
        "spec.driver%3Drdma-host-device.io".to_owned(),
    ] {
        assert!(reqs.contains(&path), "no {path:?} in\n{reqs}");
    }

    let (file, extra) = w.delegate(d, "trainer", &uid, &cid);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let add = w.rig.drive("add", &file, &pod_ns.path(), &cid, IF, &extra);
    add.ok();
    let stdin = &add.plugin_stdin("ADD")[0];
    assert_eq!(stdin["deviceID"], published_id.as_str(), "{add}");
    assert_eq!(stdin["pciBusID"], published_id.as_str(), "{add}");
    let l = link(Some(&pod_ns.name), IF).unwrap_or_else(|| panic!("no {IF} in the pod\n{add}"));
    assert_eq!(l.mac, b.mac, "the claimed NIC, not another\n{add}");
    assert!(b.on_host().is_none(), "{add}");
    assert!(a.on_host().is_some(), "the unclaimed NIC stays home\n{add}");
    w.rig
        .drive("check", &file, &pod_ns.path(), &cid, IF, &extra)
        .ok();
    // Multus' DEL runs the delegate it cached at ADD: the same config.
    let del = w.rig.drive("del", &file, &pod_ns.path(), &cid, IF, &extra);
    del.ok();
    b.assert_home(Some(&pod_ns), &del);
    assert!(link(Some(&pod_ns.name), IF).is_none(), "{del}");
    no_attachment(&w.rig, &del);
}

#[test]
fn a_nad_whose_resource_name_does_not_match_gets_no_device_and_adds_nothing() {
    let mut w = World::new(json!({"resourceName": RESOURCE_NAME}));
    let a = w.rig.nic(0);
    let pod_ns = w.rig.netns(0);
    let cid = w.rig.cid(0);
    w.published(1);
    let name_a = rdma_host_device_agent::dra::slices::name_for(None, &a.name, &a.name);
    let uid = w.pod_with_claim("trainer", &[("nic", DRIVER, &name_a)]);
    let mut nad = example_nad(&w.rig, &w.ns);
    nad["metadata"]["name"] = json!("other-rail");
    nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] =
        json!("example.com/other-rail");
    w.create_nad(&nad);

    // A pod UID that is not the API server's: Multus refuses (GetPod's double check).
    let wrong = w.multus("trainer", "not-the-uid", "other-rail");
    assert!(
        wrong["error"]
            .as_str()
            .is_some_and(|e| e.contains("expected pod UID")),
        "{wrong}"
    );

    let m = w.multus("trainer", &uid, "other-rail");
    assert_eq!(m["resourceMap"], json!({RESOURCE_NAME: [a.name]}), "{m}");
    let d = &m["delegates"][0];
    assert!(d["deviceID"].is_null(), "{m}");
    let (file, extra) = w.delegate(d, "trainer", &uid, &cid);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let add = w.rig.drive("add", &file, &pod_ns.path(), &cid, IF, &extra);
    let e = add.err_code(7);
    assert!(
        e["msg"]
            .as_str()
            .unwrap_or("")
            .contains("no device selected"),
        "our documented error for a network without a device: {e}\n{add}"
    );
    a.assert_home(Some(&pod_ns), &add);
    no_attachment(&w.rig, &add);
    w.rig
        .drive("del", &file, &pod_ns.path(), &cid, IF, &extra)
        .ok();
}

/// A node whose configuration gives no `dra.resourceName`: its devices carry a deviceID but no
/// resourceName, so Multus maps nothing for them and the NAD gets no device.
#[test]
fn a_device_published_without_a_resource_name_is_skipped_by_multus() {
    let mut w = World::new(json!({}));
    let a = w.rig.nic(0);
    let pod_ns = w.rig.netns(0);
    let cid = w.rig.cid(0);
    let devices = w.published(1);
    let name_a = rdma_host_device_agent::dra::slices::name_for(None, &a.name, &a.name);
    let dev_a = device_named(&devices, &name_a);
    assert!(attr(dev_a, "k8s.cni.cncf.io/deviceID").is_some(), "{dev_a}");
    assert!(
        attr(dev_a, "k8s.cni.cncf.io/resourceName").is_none(),
        "{dev_a}"
    );
    let uid = w.pod_with_claim("trainer", &[("nic", DRIVER, &name_a)]);
    let nad = example_nad(&w.rig, &w.ns);
    let net = nad["metadata"]["name"].as_str().unwrap().to_owned();
    w.create_nad(&nad);

    let m = w.multus("trainer", &uid, &net);
    assert_eq!(m["resourceMap"], json!({}), "{m}");
    assert!(
        m["log"]
            .to_string()
            .contains("no k8s.cni.cncf.io/resourceName"),
        "{m}"
    );
    let d = &m["delegates"][0];
    assert!(d["deviceID"].is_null(), "{m}");
    let (file, extra) = w.delegate(d, "trainer", &uid, &cid);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let add = w.rig.drive("add", &file, &pod_ns.path(), &cid, IF, &extra);
    add.err_code(7);
    a.assert_home(Some(&pod_ns), &add);
}

/// A tenant's NAD may write `deviceID` itself (Multus passes a NAD's config as it is): the NIC
/// the driver prepared for another pod's claim is refused to it (102) and stays home, and so
/// to a call naming no pod; the claim's pod then gets it through Multus.
#[test]
fn a_claimed_nic_is_refused_to_any_other_pod_that_names_its_device_id() {
    let mut w = World::new(json!({"resourceName": RESOURCE_NAME}));
    let a = w.rig.nic(0);
    let (pod_ns, intruder_ns) = (w.rig.netns(0), w.rig.netns(1));
    let (cid, intruder_cid) = (w.rig.cid(0), w.rig.cid(1));
    let devices = w.published(1);
    let name_a = rdma_host_device_agent::dra::slices::name_for(None, &a.name, &a.name);
    let id = attr(device_named(&devices, &name_a), "k8s.cni.cncf.io/deviceID")
        .unwrap()
        .to_owned();
    let uid = w.pod_with_claim("trainer", &[("nic", DRIVER, &name_a)]);
    let nad = example_nad(&w.rig, &w.ns);
    let net = nad["metadata"]["name"].as_str().unwrap().to_owned();
    w.create_nad(&nad);

    // The tenant's delegate: the same config with the claimed NIC's deviceID written in.
    let conf: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    let stolen = w
        .rig
        .write("stolen.conf", &multus_delegate(conf, Some(&id), None));
    for args in [
        multus_k8s_args(&w.ns, "intruder", "uid-of-the-intruder", &intruder_cid),
        format!("IgnoreUnknown=true;K8S_POD_INFRA_CONTAINER_ID={intruder_cid}"),
    ] {
        let add = w.rig.drive(
            "add",
            &stolen,
            &intruder_ns.path(),
            &intruder_cid,
            IF,
            &["-args", &args],
        );
        let e = add.err_code(102);
        assert!(
            e["msg"].as_str().unwrap_or("").contains(&format!(
                "prepared for ResourceClaim {}/trainer-rail-x7k2p",
                w.ns
            )),
            "{e}\n{add}"
        );
        a.assert_home(Some(&intruder_ns), &add);
        no_attachment(&w.rig, &add);
        w.rig
            .drive(
                "del",
                &stolen,
                &intruder_ns.path(),
                &intruder_cid,
                IF,
                &["-args", &args],
            )
            .ok();
    }

    let m = w.multus("trainer", &uid, &net);
    let (file, extra) = w.delegate(&m["delegates"][0], "trainer", &uid, &cid);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let add = w.rig.drive("add", &file, &pod_ns.path(), &cid, IF, &extra);
    add.ok();
    assert_eq!(
        link(Some(&pod_ns.name), IF).map(|l| l.mac),
        Some(a.mac.clone()),
        "{add}"
    );
    w.rig
        .drive("del", &file, &pod_ns.path(), &cid, IF, &extra)
        .ok();
    a.assert_home(Some(&pod_ns), &"after DEL");
}
