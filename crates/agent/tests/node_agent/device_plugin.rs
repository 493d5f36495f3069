//! `rdma-host-device-agent device-plugin` driven the way the kubelet drives it, over the real gRPC
//! wire: tests/device_plugin/kubelet.py (grpcio, stubs generated at test time from our own
//! tests/device_plugin/deviceplugin.proto) serves `Registration` on kubelet.sock, receives the
//! plugin's `Register`, calls `GetDevicePluginOptions`, `ListAndWatch`,
//! `GetPreferredAllocation` and `Allocate` on the plugin's socket, and restarts like a kubelet
//! (sockets deleted and recreated). The NICs are veths selected by name (this machine has no
//! PCI NICs and no RDMA; char devices and NUMA are unit-tested on fake sysfs trees; the VM's
//! group cri-exclusive, case `allocated`, runs the same path with a real RDMA device).
//! The whole host path is here too: the kubelet's Allocate, then ADD given the allocated
//! device's ID as Multus passes it (`deviceID`, a veth's ID being its name), and the node
//! policy that bounds what a tenant's own `deviceID` can reach.
//! Needs root (veths, netns) and the venv with grpcio that scripts/setup.sh makes.

use test_support as common;

use common::*;
use prost::Message;
use rdma_host_device_agent::device_plugin::api::DevicePluginOptions;
use rdma_host_device_agent::device_plugin::api::path::GET_OPTIONS;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RESOURCE: &str = "rdma-host-device.io/rail";
const ENDPOINT: &str = "rdma-host-device-rail.sock";

/// The kubelet stand-in (tests/device_plugin/kubelet.py).
struct Kubelet(StandIn);

impl Kubelet {
    fn start(dir: &Path) -> Kubelet {
        Kubelet::start_with(dir, &[])
    }

    /// [`start`](Self::start) with the stand-in's settings `env` (see kubelet.py's header).
    fn start_with(dir: &Path, env: &[(&str, &str)]) -> Kubelet {
        // Its stubs are generated once, atomically (renamed into place), shared by runs.
        let stubs = Path::new(TARGET_TMP).join("dp-stubs");
        let mut all = vec![("RHD_DP_STUBS", stubs.as_os_str())];
        all.extend(env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(*v))));
        Kubelet(StandIn::start(
            "device_plugin/kubelet.py",
            &[dir.as_os_str()],
            &all,
            "listening",
        ))
    }

    fn ask(&mut self, cmd: Value) -> Value {
        self.0.ask(cmd)
    }
}

/// The device plugin under test, its log in a file.
fn start_device_plugin(rig: &Rig, sockets: &Path, devinfo: &Path) -> Logged {
    let log = rig.dir.path().join(format!("device-plugin-{}.log", rig.n));
    let mut cmd = Command::new(AGENT);
    cmd.args(["device-plugin", "--socket-dir"])
        .arg(sockets)
        .arg("--device-info-dir")
        .arg(devinfo)
        .env(NODE_CONFIG_ENV, rig.node_config());
    Logged::spawn(&mut cmd, log, "the device plugin")
}

/// A rig whose node configuration has one pool selecting `names`, with its sockets dir.
fn world(names: &[&str]) -> (Rig, TempDir, TempDir) {
    let rig = Rig::new();
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": names}}
    ]}}));
    (rig, TempDir::new("dp-sock"), TempDir::new("dp-info"))
}

/// The kubelet and the device plugin for one pool of `nics` (by name): registered, and the
/// kubelet watching until it lists every NIC Healthy.
fn serving(rig: &Rig, sockets: &TempDir, devinfo: &TempDir, nics: &[&str]) -> (Kubelet, Logged) {
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": nics}}
    ]}}));
    let mut k = Kubelet::start(sockets.path());
    let plugin = start_device_plugin(rig, sockets.path(), devinfo.path());
    registered(&mut k, 1, &plugin);
    k.ask(json!({"cmd": "watch", "resource": RESOURCE}));
    let healthy: serde_json::Map<String, Value> = nics
        .iter()
        .map(|n| (n.to_string(), json!("Healthy")))
        .collect();
    devices(&mut k, Value::Object(healthy), 5.0, &plugin);
    (k, plugin)
}

fn registered(k: &mut Kubelet, count: u64, plugin: &Logged) -> Value {
    let r = k.ask(json!({"cmd": "registered", "count": count, "timeout": 10}));
    assert!(
        r["error"].is_null(),
        "no registration #{count}: {r}\n{}",
        plugin.log()
    );
    r
}

fn devices(k: &mut Kubelet, want: Value, timeout: f64, plugin: &Logged) -> Value {
    let r =
        k.ask(json!({"cmd": "devices", "resource": RESOURCE, "want": want, "timeout": timeout}));
    assert!(
        r["error"].is_null(),
        "want {want}, got {r}\n{}",
        plugin.log()
    );
    r
}

/// The kubelet's device manager names `localhost` as HTTP/2 `:authority`
/// (`grpc.WithAuthority("localhost")` since Kubernetes 1.26): served, twice on one connection
/// (the second from grpc-go's HPACK dynamic table), Huffman-coded too, and by grpc-go itself.
/// The socket is not read through the registration socket's rewriter (issue 48): a path as
/// `:authority`, which kubelets before 1.26 sent, is refused by h2.
#[test]
fn the_device_managers_localhost_authority_is_served_and_a_path_is_not_rewritten() {
    let (rig, sockets, devinfo) = world(&[]);
    let a = rig.nic(0);
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": [a.name]}}
    ]}}));
    let plugin = start_device_plugin(&rig, sockets.path(), devinfo.path());
    let ours = sockets.path().join(ENDPOINT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ours.exists() {
        assert!(Instant::now() < deadline, "no socket\n{}", plugin.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    for coding in [Coding::Plain, Coding::Huffman] {
        for answer in grpc_go_calls(&ours, "localhost", coding, GET_OPTIONS, &[], 2) {
            assert!(
                answer.ok(),
                "GetDevicePluginOptions ({coding:?}): {answer:?}\n{}",
                plugin.log()
            );
            let o = DevicePluginOptions::decode(&answer.message[..]).expect("options");
            assert!(o.get_preferred_allocation_available, "{o:?}");
        }
    }
    let o = kubelet_dial_localhost(&ours, GET_OPTIONS)
        .unwrap_or_else(|e| panic!("{e}\n{}", plugin.log()));
    let o = DevicePluginOptions::decode(&o[..]).expect("options");
    assert!(o.get_preferred_allocation_available, "{o:?}");
    let path = ours.display().to_string();
    for answer in grpc_go_calls(&ours, &path, Coding::Plain, GET_OPTIONS, &[], 1) {
        assert_eq!(
            answer.reset,
            Some(1),
            "PROTOCOL_ERROR expected: {answer:?}\n{}",
            plugin.log()
        );
    }
}

#[test]
fn the_kubelet_gets_the_pools_nics_over_grpc_but_never_the_nodes_uplink() {
    let (rig, sockets, devinfo) = world(&[]);
    let (a, b, up) = (rig.nic(0), rig.nic(1), rig.nic(2));
    // The node itself uses `up`: a global address on it.
    ip(&[
        "addr",
        "add",
        &format!("10.98.{}.1/24", rig.octet()),
        "dev",
        &up.name,
    ]);
    // With the per-NIC env (devicePlugin.nicEnv) in a directory of the rig's.
    let cdi = rig.dir.path().join("cdi");
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": [a.name, b.name, up.name]}}
    ], "nicEnv": {"cdiDir": cdi}}}));
    let mut k = Kubelet::start(sockets.path());
    let plugin = start_device_plugin(&rig, sockets.path(), devinfo.path());

    let r = registered(&mut k, 1, &plugin);
    assert_eq!(r["version"], "v1beta1");
    assert_eq!(r["endpoint"], ENDPOINT);
    assert_eq!(r["resource_name"], RESOURCE);
    assert_eq!(r["options"]["get_preferred_allocation_available"], true);
    assert!(sockets.path().join(ENDPOINT).exists());
    let o = k.ask(json!({"cmd": "options", "resource": RESOURCE}));
    assert_eq!(o["get_preferred_allocation_available"], true, "{o}");

    k.ask(json!({"cmd": "watch", "resource": RESOURCE}));
    let want = json!({&a.name: "Healthy", &b.name: "Healthy", &up.name: null});
    let l = devices(&mut k, want, 5.0, &plugin);
    let listed: Vec<&str> = l["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [a.name.as_str(), b.name.as_str()], "{l}");
    assert!(
        l["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["numa"] == json!([])),
        "a veth has no NUMA node: no topology ({l})"
    );
    assert!(
        plugin.log().contains(&up.name) && plugin.log().contains("global address"),
        "the log says why the uplink is not offered:\n{}",
        plugin.log()
    );

    let p = k.ask(json!({"cmd": "preferred", "resource": RESOURCE,
        "available": [a.name, b.name], "must": [b.name], "size": 1}));
    assert_eq!(p["ids"], json!([[b.name]]), "{p}");
    let p = k.ask(json!({"cmd": "preferred", "resource": RESOURCE,
        "available": [a.name, b.name], "size": 2}));
    assert_eq!(p["ids"][0].as_array().unwrap().len(), 2, "{p}");

    let r = k.ask(json!({"cmd": "allocate", "resource": RESOURCE,
        "containers": [[a.name], [b.name, a.name]]}));
    assert!(r["error"].is_null(), "{r}\n{}", plugin.log());
    let resp = r["responses"].as_array().unwrap();
    assert_eq!(resp.len(), 2, "one answer per container: {r}");
    assert_eq!(
        resp[0]["envs"]["RDMA_HOST_DEVICE_RAIL_IDS"],
        a.name.as_str()
    );
    assert_eq!(
        resp[1]["envs"]["RDMA_HOST_DEVICE_RAIL_IDS"],
        format!("{},{}", b.name, a.name)
    );
    assert_eq!(
        resp[0]["envs"]["RDMA_HOST_DEVICE_RAIL_RDMA"], "",
        "no RDMA on a veth"
    );
    assert_eq!(
        resp[0]["devices"],
        json!([]),
        "no RDMA device, no char device: {r}"
    );
    assert_eq!(
        files_under(devinfo.path()),
        Vec::<PathBuf>::new(),
        "a veth has nothing for a device-info file"
    );
    // Each NIC's env device, by its device ID (a veth's is its name), its spec written before
    // the answer: the runtime resolves every name it is given.
    let nic = |n: &str| format!("rdma-host-device.io/nic={n}");
    assert_eq!(resp[0]["cdi_devices"], json!([nic(&a.name)]), "{r}");
    assert_eq!(
        resp[1]["cdi_devices"],
        json!([nic(&b.name), nic(&a.name)]),
        "{r}"
    );
    let place = rdma_host_device_core::nic_env::Place {
        cdi_dir: cdi.clone(),
    };
    for n in [&a.name, &b.name] {
        let spec: Value =
            serde_json::from_slice(&std::fs::read(place.spec_path(n).unwrap()).unwrap()).unwrap();
        assert_eq!(
            spec["devices"][0]["containerEdits"]["env"],
            json!(["RDMA_HOST_DEVICE_METADATA_GENERATION=1"]),
            "generation 1, no RDMA device on a veth: {spec}"
        );
    }
    assert!(
        !place.spec_path(&up.name).unwrap().exists(),
        "the uplink is not offered: no spec"
    );
    // Allocate's latency as the kubelet sees it (gRPC round trip on the unix socket).
    let mut ms: Vec<f64> = (0..20)
        .map(|_| {
            k.ask(json!({"cmd": "allocate", "resource": RESOURCE, "containers": [[a.name]]}))["ms"]
                .as_f64()
                .unwrap()
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "Allocate over gRPC: median {} ms, max {} ms (20 calls)",
        ms[10], ms[19]
    );

    let e = k.ask(json!({"cmd": "allocate", "resource": RESOURCE, "containers": [[up.name]]}));
    assert_eq!(
        e["error"], "NOT_FOUND",
        "the uplink cannot be allocated: {e}"
    );
    assert!(e["message"].as_str().unwrap().contains(&up.name), "{e}");
}

#[test]
fn a_nic_losing_its_link_turns_unhealthy_within_a_second_on_the_host_and_in_its_pod() {
    let (rig, sockets, devinfo) = world(&[]);
    let (a, b) = (rig.nic(0), rig.nic(1));
    let pod = rig.netns(0);
    for l in [&a.name, &a.peer, &b.peer] {
        ip(&["link", "set", l, "up"]);
    }
    let (mut k, plugin) = serving(&rig, &sockets, &devinfo, &[&a.name, &b.name]);

    // The wire dies (the peer goes down): Unhealthy within a second, Healthy when it is back.
    let mut took = Vec::new();
    for (cmd, health) in [("down", "Unhealthy"), ("up", "Healthy")] {
        let t0 = Instant::now();
        ip(&["link", "set", &a.peer, cmd]);
        devices(&mut k, json!({&a.name: health}), 1.0, &plugin);
        took.push(t0.elapsed());
    }
    // b goes into a pod through the CNI (ADD): Healthy on its way there and in the pod, where
    // it is judged (its pod's netns, as its record names it).
    let conf = rig.conf("1.0.0", json!({"device": b.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    std::thread::sleep(Duration::from_millis(600)); // three health ticks with b in the pod
    devices(&mut k, json!({&b.name: "Healthy"}), 1.0, &plugin);
    let in_pod = |h: &Value| {
        h["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c[0] == b.name.as_str() && c[1] == "Unhealthy")
            .count()
    };
    let h = k.ask(json!({"cmd": "history", "resource": RESOURCE}));
    assert_eq!(
        in_pod(&h),
        0,
        "a NIC on its way into a pod is not Unhealthy: {h}"
    );
    // Its wire cut while it is in the pod: Unhealthy (net1 in the pod has no carrier), and
    // Healthy again when the wire is back.
    for (cmd, health) in [("down", "Unhealthy"), ("up", "Healthy")] {
        let t0 = Instant::now();
        ip(&["link", "set", &b.peer, cmd]);
        devices(&mut k, json!({&b.name: health}), 1.0, &plugin);
        took.push(t0.elapsed());
    }
    assert!(
        plugin
            .log()
            .contains("net1 in the pod is up without carrier"),
        "{}",
        plugin.log()
    );
    // Home (DEL): never Unhealthy on the way.
    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[]);
    std::thread::sleep(Duration::from_millis(600));
    let h = k.ask(json!({"cmd": "history", "resource": RESOURCE}));
    assert_eq!(
        in_pod(&h),
        1,
        "Unhealthy once (the cut), not on its way into the pod or home: {h}\n{}",
        plugin.log()
    );
    // The NIC is deleted: Unhealthy, still listed (the kubelet must not lose track of it).
    let t0 = Instant::now();
    ip(&["link", "del", &a.name]);
    devices(
        &mut k,
        json!({&a.name: "Unhealthy", &b.name: "Healthy"}),
        1.0,
        &plugin,
    );
    took.push(t0.elapsed());
    eprintln!(
        "health to the ListAndWatch stream: peer down {:?}, up {:?}; in the pod: down {:?}, up {:?}; deleted {:?}",
        took[0], took[1], took[2], took[3], took[4]
    );
    assert!(took.iter().all(|t| *t < Duration::from_secs(1)), "{took:?}");
    assert!(plugin.log().contains("without carrier"), "{}", plugin.log());
}

#[test]
fn a_kubelet_restart_and_a_plugin_restart_each_end_in_a_new_registration() {
    let (rig, sockets, devinfo) = world(&[]);
    let a = rig.nic(0);
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": [a.name]}}
    ]}}));
    let mut k = Kubelet::start(sockets.path());
    let mut plugin = start_device_plugin(&rig, sockets.path(), devinfo.path());
    registered(&mut k, 1, &plugin);

    // kubelet.sock recreated, our socket left alone: register again on the same socket.
    k.ask(json!({"cmd": "restart", "remove_all": false}));
    let r = registered(&mut k, 2, &plugin);
    eprintln!(
        "re-registered {} ms after kubelet.sock was recreated",
        r["ms"]
    );
    // A restart as the kubelet does it: every socket in the directory deleted.
    k.ask(json!({"cmd": "restart", "remove_all": true}));
    let r = registered(&mut k, 3, &plugin);
    eprintln!(
        "re-registered {} ms after every socket was deleted",
        r["ms"]
    );
    assert!(
        sockets.path().join(ENDPOINT).exists(),
        "serving on a new socket"
    );
    k.ask(json!({"cmd": "watch", "resource": RESOURCE}));
    devices(&mut k, json!({&a.name: "Healthy"}), 5.0, &plugin);

    // The plugin itself restarts: it registers again, offering the same device.
    plugin.stop();
    let mut plugin = start_device_plugin(&rig, sockets.path(), devinfo.path());
    registered(&mut k, 4, &plugin);
    k.ask(json!({"cmd": "watch", "resource": RESOURCE}));
    devices(&mut k, json!({&a.name: "Healthy"}), 5.0, &plugin);
    let r = k.ask(json!({"cmd": "allocate", "resource": RESOURCE, "containers": [[a.name]]}));
    assert_eq!(
        r["responses"][0]["envs"]["RDMA_HOST_DEVICE_RAIL_IDS"],
        a.name.as_str(),
        "{r}"
    );
    plugin.stop();
}

/// A kubelet that answers the first Register after the plugin's 5 s deadline, though it
/// connected at once (kubelet 1.37 under QEMU's TCG did, in the VM's cluster group), and then
/// refuses a second Register for the same socket ("device plugin already connected"): the
/// plugin takes that refusal for the registration it is, and stops asking. It asked again
/// every 200 ms, for ever, each call making the kubelet dial it and log an error.
#[test]
fn a_kubelet_that_answers_late_is_registered_once_and_not_asked_again_and_again() {
    let (rig, sockets, devinfo) = world(&[]);
    let a = rig.nic(0);
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": [a.name]}}
    ]}}));
    let mut k = Kubelet::start_with(sockets.path(), &[("RHD_KUBELET_SLOW_REGISTER", "6")]);
    let plugin = start_device_plugin(&rig, sockets.path(), devinfo.path());
    registered(&mut k, 2, &plugin);
    let t = std::time::Instant::now();
    while !plugin
        .log()
        .contains("already (it answered an earlier registration late)")
    {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{}",
            plugin.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Past the late answer and a few retry periods: no third call.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let r = k.ask(json!({"cmd": "registrations"}));
    assert_eq!(
        r["registrations"].as_array().map(Vec::len),
        Some(2),
        "{r}\n{}",
        plugin.log()
    );
    k.ask(json!({"cmd": "watch", "resource": RESOURCE}));
    devices(&mut k, json!({&a.name: "Healthy"}), 5.0, &plugin);
}

#[test]
fn two_pools_are_two_resources_on_two_sockets_each_with_its_own_nics_and_variables() {
    let (rig, sockets, devinfo) = world(&[]);
    let (a, b) = (rig.nic(0), rig.nic(1));
    rig.set_node(json!({"devicePlugin": {"pools": [
        {"resourceName": RESOURCE, "selectors": {"names": [a.name]}},
        {"resourceName": "rdma-host-device.io/storage", "selectors": {"names": [b.name]}}
    ]}}));
    let mut k = Kubelet::start(sockets.path());
    let plugin = start_device_plugin(&rig, sockets.path(), devinfo.path());
    registered(&mut k, 2, &plugin);
    let mut regs: Vec<(String, String)> = k.ask(json!({"cmd": "registrations"}))["registrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["resource_name"].as_str().unwrap().to_owned(),
                r["endpoint"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    regs.sort();
    assert_eq!(
        regs,
        [
            (RESOURCE.to_owned(), ENDPOINT.to_owned()),
            (
                "rdma-host-device.io/storage".to_owned(),
                "rdma-host-device-storage.sock".to_owned()
            )
        ]
    );
    for (res, nic, var) in [
        (RESOURCE, &a, "RDMA_HOST_DEVICE_RAIL_IDS"),
        (
            "rdma-host-device.io/storage",
            &b,
            "RDMA_HOST_DEVICE_STORAGE_IDS",
        ),
    ] {
        k.ask(json!({"cmd": "watch", "resource": res}));
        let r = k.ask(json!({"cmd": "devices", "resource": res,
            "want": {&nic.name: "Healthy"}, "timeout": 5}));
        assert_eq!(
            r["devices"].as_array().unwrap().len(),
            1,
            "{res}: {r}\n{}",
            plugin.log()
        );
        let r = k.ask(json!({"cmd": "allocate", "resource": res, "containers": [[nic.name]]}));
        assert_eq!(r["responses"][0]["envs"][var], nic.name.as_str(), "{r}");
    }
}

#[test]
fn without_a_device_plugin_section_it_refuses_to_start_and_says_why() {
    let rig = Rig::new();
    let sockets = TempDir::new("dp-sock");
    let o = Command::new(AGENT)
        .args(["device-plugin", "--socket-dir"])
        .arg(sockets.path())
        .env(NODE_CONFIG_ENV, rig.node_config())
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no devicePlugin"), "{err}");
}

/// The config Multus hands the plugin for a NAD annotated with our resource name: the device
/// the kubelet allocated to the pod as `deviceID` and `pciBusID` (the same value), and as
/// `runtimeConfig.deviceID` (the `deviceID` capability).
fn as_multus_passes(rig: &Rig, id: &str) -> Value {
    let mut c = rig.conf("1.0.0", json!({"deviceID": id, "pciBusID": id}));
    c["capabilities"] = json!({"deviceID": true});
    c["runtimeConfig"] = json!({"deviceID": id});
    c
}

#[test]
fn the_kubelets_allocation_reaches_add_as_multus_device_id_and_that_nic_lands_in_the_pod() {
    let (rig, sockets, devinfo) = world(&[]);
    let (a, b) = (rig.nic(0), rig.nic(1));
    let (pod, other) = (rig.netns(0), rig.netns(1));
    // Live wires: in the pod the NIC is judged where it is, and a veth whose peer is down has
    // no carrier there.
    for l in [&a.peer, &b.peer] {
        ip(&["link", "set", l, "up"]);
    }
    let (mut k, plugin) = serving(&rig, &sockets, &devinfo, &[&a.name, &b.name]);

    // The kubelet picks one device for the pod's request and allocates it.
    let p = k.ask(json!({"cmd": "preferred", "resource": RESOURCE,
        "available": [a.name, b.name], "size": 1}));
    let id = p["ids"][0][0]
        .as_str()
        .expect("a preferred device")
        .to_owned();
    let r = k.ask(json!({"cmd": "allocate", "resource": RESOURCE, "containers": [[id]]}));
    assert_eq!(
        r["responses"][0]["envs"]["RDMA_HOST_DEVICE_RAIL_IDS"],
        id.as_str(),
        "{r}"
    );
    let (mine, free) = if id == a.name { (&a, &b) } else { (&b, &a) };

    // Multus passes that ID to ADD: the allocated NIC, and only it, goes into the pod.
    let conf = as_multus_passes(&rig, &id);
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[]);
    let result = add.ok();
    assert_eq!(result["interfaces"][0]["name"], "net1", "{add}");
    assert_eq!(result["interfaces"][0]["mac"], mine.mac.as_str(), "{add}");
    assert!(
        link(Some(&pod.name), "net1").is_some_and(|l| l.mac == mine.mac),
        "the allocated NIC is the pod's net1\n{add}"
    );
    assert!(mine.on_host().is_none(), "{add}");
    assert!(free.on_host().is_some(), "the other NIC stays home\n{add}");
    // In the pod, its wire alive, it stays Healthy; a second pod's ADD with the same deviceID
    // is refused.
    std::thread::sleep(Duration::from_millis(600));
    devices(&mut k, json!({&id: "Healthy"}), 1.0, &plugin);
    let again = rig.call("ADD", &conf, &other.path(), &rig.cid(1), "net1", &[]);
    let e = again.err_code(102);
    assert!(
        e["msg"].as_str().unwrap_or("").contains(&rig.cid(0)),
        "busy names the pod holding it\n{again}"
    );
    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    mine.assert_home(Some(&pod), &"after DEL");
}

#[test]
fn a_tenants_device_id_reaches_no_nic_the_node_policy_refuses_nor_a_hardware_nic_by_its_name() {
    let rig = Rig::new();
    let (a, c) = (rig.nic(0), rig.nic(1));
    let pod = rig.netns(0);
    // The node allows `a` only (its pool would hold `a` only, whatever the pool's selectors).
    rig.set_node(json!({
        "allowedNics": {"names": [a.name]},
        "devicePlugin": {"pools": [
            {"resourceName": RESOURCE, "selectors": {"names": [a.name, c.name]}}
        ]}
    }));
    // A NAD that writes `c`'s ID itself, as if the kubelet had allocated it: 107.
    let add = rig.call(
        "ADD",
        &as_multus_passes(&rig, &c.name),
        &pod.path(),
        &rig.cid(0),
        "net1",
        &[],
    );
    let e = add.err_code(107);
    assert!(
        e["msg"].as_str().unwrap_or("").contains("allowedNics"),
        "{add}"
    );
    c.assert_home(Some(&pod), &add);
    // A name that is no interface: not found (100), nothing changed.
    let add = rig.call(
        "ADD",
        &as_multus_passes(&rig, "rhdnosuch0"),
        &pod.path(),
        &rig.cid(0),
        "net1",
        &[],
    );
    add.err_code(100);
    // A NIC with a PCI function is known by its PCI address: its name is no deviceID (a
    // device plugin never hands it out), so `deviceID: eth0` reaches nothing. Only on a
    // machine that has such a NIC (the build machines have a virtio one).
    let hardware = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find_map(|n| rdma_host_device_core::sysfs::pci_of(&n).map(|pci| (n, pci)));
    match hardware {
        Some((name, pci)) => {
            let add = rig.call(
                "ADD",
                &rig.conf("1.0.0", json!({"deviceID": name})),
                &pod.path(),
                &rig.cid(0),
                "net1",
                &[],
            );
            let e = add.err_code(100);
            assert!(
                e["msg"].as_str().unwrap_or("").contains(&pci),
                "the error names the NIC's device ID\n{add}"
            );
            assert!(
                link(None, &name).is_some(),
                "{name} is still on the host\n{add}"
            );
        }
        None => eprintln!("no NIC with a PCI function here: the hardware-name case is skipped"),
    }
    // And the allowed NIC by its ID: attached.
    let conf = as_multus_passes(&rig, &a.name);
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    a.assert_home(Some(&pod), &"after DEL");
}

/// Issue 36: what the device plugin makes has the mode it names whatever the umask it was
/// started with: its socket 0600 (under umask 000 it was 0777: anyone on the node could call
/// Allocate), the CDI spec 0644 and the directories it makes for it 0755. Under umask 000
/// and 077, each. (Its device-info files are written by the same writer as the spec,
/// `files::replace`; a veth has neither PCI address nor RDMA device, so it gets none here.)
#[test]
fn its_socket_and_files_have_their_modes_whatever_the_umask() {
    for mask in [0o000, 0o077] {
        let (rig, sockets, devinfo) = world(&[]);
        let a = rig.nic(0);
        rig.set_node(json!({"devicePlugin": {"pools": [
            {"resourceName": RESOURCE, "selectors": {"names": [a.name]}}
        ]}}));
        let spec_dir = rig.dir.path().join("cdi-made");
        let spec = spec_dir.join("here/rdma-host-device.json");
        let mut k = Kubelet::start(sockets.path());
        let mut cmd = Command::new(AGENT);
        with_umask(&mut cmd, mask)
            .args(["device-plugin", "--socket-dir"])
            .arg(sockets.path())
            .arg("--device-info-dir")
            .arg(devinfo.path())
            .arg("--cdi-spec")
            .arg(&spec)
            .env(NODE_CONFIG_ENV, rig.node_config());
        let log = rig.dir.path().join(format!("device-plugin-{mask:03o}.log"));
        let plugin = Logged::spawn(&mut cmd, log, "the device plugin");
        registered(&mut k, 1, &plugin);
        assert!(wait_for_path(&spec, 5), "no CDI spec\n{}", plugin.log());
        assert_eq!(
            [
                mode_of(&sockets.path().join(ENDPOINT)),
                mode_of(&spec_dir),
                mode_of(&spec_dir.join("here")),
                mode_of(&spec),
            ],
            [
                Ok(Mode(0o600)),
                Ok(Mode(0o755)),
                Ok(Mode(0o755)),
                Ok(Mode(0o644))
            ],
            "umask {mask:03o}: the socket, the CDI spec's directories and the spec\n{}",
            plugin.log()
        );
    }
}
