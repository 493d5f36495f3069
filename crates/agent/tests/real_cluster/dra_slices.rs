//! `rdma-host-device-agent dra` publishing this node's ResourceSlice to the real kube-apiserver
//! 1.37 of the test cluster (tests/cluster/cluster.sh; each test names its own node): which
//! NICs are devices (the node policy's, never an uplink, only allowedNics), their attributes,
//! and how the slice follows the node (a link going down, a NIC removed, the slice deleted by
//! someone else, the agent restarted, a wrong token). A server without device taints is a
//! second real API server with DRADeviceTaints off (as 1.33-1.35 defaults were). The NICs are
//! veths named in the node configuration's `dra.nics` (this machine has no PCI NICs and no
//! RDMA; PCI-derived attributes are unit-tested in crates/agent/src/dra/slices.rs).
//! Needs root (veths).

use test_support as common;
use test_support::apiserver as standin;

use common::*;
use rdma_host_device_agent::dra::slices::{UNHEALTHY_TAINT, device_name_of_link};
use rdma_host_device_agent::kube::{Kube, ResourceSlice, SliceFilter};
use serde_json::json;
use standin::ApiServer;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DRIVER: &str = "rdma-host-device.io";
/// How long the slice may take to follow a change on the node (the agent reacts to link
/// notifications at once and looks at sysfs every 500 ms; this is the bound a user can rely on).
const BOUND: Duration = Duration::from_secs(5);

fn rt() -> tokio::runtime::Runtime {
    rdma_host_device_agent::async_rt::current_thread().unwrap()
}

/// The agent under test, its log in a file.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(rig: &Rig, api: &ApiServer, node: &str, token: Option<&std::path::Path>) -> Agent {
        Agent::start_reading(rig, api, node, token, &rig.node_config())
    }

    /// [`Agent::start`] with the node configuration at `config`.
    fn start_reading(
        rig: &Rig,
        api: &ApiServer,
        node: &str,
        token: Option<&std::path::Path>,
        config: &std::path::Path,
    ) -> Agent {
        let log = rig.dir.path().join(format!(
            "dra-{}.log",
            rig.dir.path().read_dir().unwrap().count()
        ));
        let child = Command::new(AGENT)
            .args(["dra", "--node-name", node, "--kube-server", &api.url])
            .arg("--kube-ca")
            .arg(&api.ca)
            .arg("--kube-token")
            .arg(token.unwrap_or(&api.token))
            .arg("--state-dir")
            .arg(rig.state_dir())
            // The kubelet side serves its sockets here, not in the machine's /var/lib/kubelet.
            .arg("--kubelet-dir")
            .arg(rig.dir.path().join("kubelet"))
            .env(NODE_CONFIG_ENV, config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the agent");
        Agent { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Our slices for `node` on the API server.
fn slices(api: &ApiServer, node: &str) -> Vec<ResourceSlice> {
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        let f = SliceFilter {
            driver: DRIVER.into(),
            node: node.into(),
        };
        kube.list_slices(&f).await.unwrap().0
    })
}

/// Wait (up to `within`) until our one slice for `node` satisfies `ok`; returns it and how
/// long it took.
fn wait_slice(
    api: &ApiServer,
    agent: &Agent,
    node: &str,
    within: Duration,
    what: &str,
    ok: impl Fn(&ResourceSlice) -> bool,
) -> (ResourceSlice, Duration) {
    let start = Instant::now();
    loop {
        let s = slices(api, node);
        if s.len() == 1 && ok(&s[0]) {
            return (s.into_iter().next().unwrap(), start.elapsed());
        }
        if start.elapsed() > within {
            panic!(
                "{what}: not within {within:?}; slices now: {}\nagent log:\n{}",
                serde_json::to_string_pretty(&s).unwrap(),
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn device<'a>(
    s: &'a ResourceSlice,
    name: &str,
) -> Option<&'a rdma_host_device_agent::kube::Device> {
    s.spec.devices.iter().flatten().find(|d| d.name == name)
}

fn attr<'a>(
    s: &'a ResourceSlice,
    dev: &str,
    key: &str,
) -> Option<&'a rdma_host_device_core::dra::metadata::Attribute> {
    device(s, dev)?.attributes.as_ref()?.get(key)
}

fn node_name(rig: &Rig) -> String {
    format!("node-{}-{}", tag(), rig.n)
}

/// A rig with veths 0..4: 0 and 3 allowed and published, 1 outside allowedNics, 2 an uplink
/// (a global address on it); all named by dra.nics; 0 on rail "7".
fn node_with_four_veths(rig: &Rig) -> Vec<Veth> {
    let v: Vec<Veth> = (0..4).map(|i| rig.nic(i)).collect();
    ip(&[
        "addr",
        "add",
        &format!("10.77.{}.1/24", rig.octet()),
        "dev",
        &v[2].name,
    ]);
    ip(&["link", "set", &v[2].name, "up"]);
    rig.set_node(json!({
        "allowedNics": {"names": [v[0].name, v[2].name, v[3].name]},
        "dra": {
            "nics": {"names": [v[0].name, v[1].name, v[2].name, v[3].name]},
            "resourceName": "rdma-host-device.io/rail",
            "rails": [{"name": "7", "selectors": {"names": [v[0].name]}}],
        },
    }));
    v
}

fn dev(v: &Veth) -> String {
    device_name_of_link(&v.name)
}

#[test]
fn the_slice_lists_the_allowed_nics_with_their_attributes_and_never_an_uplink() {
    let rig = Rig::new();
    let v = node_with_four_veths(&rig);
    let api = ApiServer::real();
    let node = node_name(&rig);
    let agent = Agent::start(&rig, &api, &node, None);
    let (s, _) = wait_slice(&api, &agent, &node, BOUND, "the first slice", |s| {
        s.spec.devices.as_ref().is_some_and(|d| d.len() == 2)
    });
    assert_eq!(
        s.metadata.name.as_deref(),
        Some(&*format!("{node}-{DRIVER}"))
    );
    assert_eq!(s.spec.driver, DRIVER);
    assert_eq!(s.spec.node_name.as_deref(), Some(&*node));
    assert_eq!(
        (s.spec.pool.name.as_str(), s.spec.pool.resource_slice_count),
        (node.as_str(), 1)
    );
    let names: Vec<_> = s
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| d.name.clone())
        .collect();
    assert_eq!(
        names,
        [dev(&v[0]), dev(&v[3])],
        "not 1 (allowedNics), not 2 (uplink)"
    );
    let s_ = |d: &Veth, k: &str| {
        attr(&s, &dev(d), k)
            .and_then(|a| a.string.clone())
            .unwrap_or_else(|| panic!("{k} of {}: {s:?}", d.name))
    };
    assert_eq!(
        s_(&v[0], "k8s.cni.cncf.io/deviceID"),
        v[0].name,
        "what ADD resolves"
    );
    assert_eq!(
        s_(&v[0], "k8s.cni.cncf.io/resourceName"),
        "rdma-host-device.io/rail"
    );
    assert_eq!(s_(&v[0], "rdma-host-device.io/ifName"), v[0].name);
    assert_eq!(s_(&v[0], "rdma-host-device.io/driver"), "veth");
    assert_eq!(s_(&v[0], "rdma-host-device.io/rail"), "7");
    assert!(attr(&s, &dev(&v[3]), "rdma-host-device.io/rail").is_none());
    assert_eq!(
        attr(&s, &dev(&v[0]), "rdma-host-device.io/mtu").and_then(|a| a.int),
        Some(ORIG_MTU as i64)
    );
    assert_eq!(
        attr(&s, &dev(&v[0]), "rdma-host-device.io/rdma").and_then(|a| a.bool),
        Some(false),
        "a veth has no RDMA device"
    );
    for k in [
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/pcieRoot",
        "rdma-host-device.io/rdmaDevice",
        "rdma-host-device.io/linkUp",
    ] {
        assert!(
            attr(&s, &dev(&v[0]), k).is_none(),
            "{k}: a veth has none (linkUp: admin down, unknown)"
        );
    }
}

/// On a fresh node the DRA DaemonSet's pod may start before the install container of
/// daemonset.yaml's pod has written node.json (the real cluster's pods tests saw it, 0.1 s
/// apart). The driver waits for the file, saying what writes it, and then publishes the NICs
/// the file names: not the defaults' none, until a restart.
#[test]
fn a_driver_started_before_its_node_configuration_publishes_once_it_is_written() {
    let rig = Rig::new();
    let v = node_with_four_veths(&rig);
    let api = ApiServer::real();
    let node = node_name(&rig);
    let later = rig.dir.path().join("installed-later");
    std::fs::create_dir(&later).unwrap();
    let config = later.join("node.json");
    let agent = Agent::start_reading(&rig, &api, &node, None, &config);
    let start = Instant::now();
    while !agent.log().contains("waiting for the node configuration") {
        assert!(
            start.elapsed() < BOUND,
            "no word of the wait: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        agent.log().contains(&config.display().to_string()),
        "{}",
        agent.log()
    );
    assert!(slices(&api, &node).is_empty(), "nothing before the file");
    // Written as the install container does: whole, under its name.
    let tmp = later.join(".node.json.tmp");
    std::fs::copy(rig.node_config(), &tmp).unwrap();
    std::fs::rename(&tmp, &config).unwrap();
    let (s, took) = wait_slice(&api, &agent, &node, BOUND, "the slice", |s| {
        s.spec.devices.as_ref().is_some_and(|d| d.len() == 2)
    });
    eprintln!("published {took:?} after node.json was written");
    let names: Vec<_> = s.spec.devices.iter().flatten().map(|d| &d.name).collect();
    assert_eq!(names, [&dev(&v[0]), &dev(&v[3])]);
}

#[test]
fn a_link_going_down_flips_link_up_and_taints_the_device_within_the_bound() {
    let rig = Rig::new();
    let v = node_with_four_veths(&rig);
    ip(&["link", "set", &v[0].peer, "up"]);
    ip(&["link", "set", &v[0].name, "up"]);
    let api = ApiServer::real();
    let node = node_name(&rig);
    let agent = Agent::start(&rig, &api, &node, None);
    let d0 = dev(&v[0]);
    let link_up =
        |s: &ResourceSlice| attr(s, &d0, "rdma-host-device.io/linkUp").and_then(|a| a.bool);
    let (before, _) = wait_slice(&api, &agent, &node, BOUND, "linkUp true", |s| {
        link_up(s) == Some(true)
    });
    assert!(device(&before, &d0).unwrap().taints.is_none());

    ip(&["link", "set", &v[0].peer, "down"]);
    let (after, took) = wait_slice(&api, &agent, &node, BOUND, "linkUp false", |s| {
        link_up(s) == Some(false)
    });
    eprintln!("the slice followed the link going down in {took:?}");
    let t = device(&after, &d0)
        .unwrap()
        .taints
        .clone()
        .unwrap_or_default();
    assert_eq!(t.len(), 1, "{after:?}");
    assert_eq!(t[0].key, UNHEALTHY_TAINT);
    assert_eq!(t[0].value.as_deref(), Some("link-down"));
    assert_eq!(t[0].effect, "NoSchedule", "running pods are not evicted");
    assert!(
        after.spec.pool.generation > before.spec.pool.generation,
        "a change moves the pool generation"
    );
    assert!(
        device(&after, &dev(&v[3])).unwrap().taints.is_none(),
        "only that device"
    );

    ip(&["link", "set", &v[0].peer, "up"]);
    let (back, _) = wait_slice(&api, &agent, &node, BOUND, "linkUp true again", |s| {
        link_up(s) == Some(true)
    });
    assert!(device(&back, &d0).unwrap().taints.is_none(), "taint lifted");
}

#[test]
fn a_server_without_device_taints_gets_link_up_false_and_the_agent_says_why() {
    let rig = Rig::new();
    let v = node_with_four_veths(&rig);
    ip(&["link", "set", &v[0].name, "up"]); // peer down: no carrier from the start
    let api =
        ApiServer::real_with_feature_gates("DRADeviceTaints=false,DRADeviceTaintRules=false", 6443);
    let node = node_name(&rig);
    let agent = Agent::start(&rig, &api, &node, None);
    let d0 = dev(&v[0]);
    let (s, _) = wait_slice(&api, &agent, &node, BOUND, "linkUp false", |s| {
        attr(s, &d0, "rdma-host-device.io/linkUp").and_then(|a| a.bool) == Some(false)
    });
    assert!(device(&s, &d0).unwrap().taints.is_none());
    // It does not rewrite the slice forever hoping the taint sticks.
    let g = s.spec.pool.generation;
    std::thread::sleep(Duration::from_secs(2));
    let s = slices(&api, &node);
    assert_eq!(s[0].spec.pool.generation, g, "{}", agent.log());
    assert!(
        agent.log().contains("dropped our device taints"),
        "{}",
        agent.log()
    );
}

#[test]
fn a_nic_removed_leaves_the_slice_and_one_added_joins_it() {
    let rig = Rig::new();
    let v = node_with_four_veths(&rig);
    let api = ApiServer::real();
    let node = node_name(&rig);
    let agent = Agent::start(&rig, &api, &node, None);
    let (before, _) = wait_slice(&api, &agent, &node, BOUND, "two devices", |s| {
        s.spec.devices.as_ref().is_some_and(|d| d.len() == 2)
    });
    ip(&["link", "del", &v[3].name]);
    let (after, took) = wait_slice(&api, &agent, &node, BOUND, "NIC 3 gone", |s| {
        device(s, &dev(&v[3])).is_none()
    });
    eprintln!("the slice followed a NIC's removal in {took:?}");
    assert!(device(&after, &dev(&v[0])).is_some());
    assert!(after.spec.pool.generation > before.spec.pool.generation);
    let _again = rig.nic(3);
    wait_slice(&api, &agent, &node, BOUND, "NIC 3 back", |s| {
        device(s, &dev(&v[3])).is_some()
    });
}

#[test]
fn a_restarted_agent_keeps_one_slice_and_removes_strays() {
    let rig = Rig::new();
    let _v = node_with_four_veths(&rig);
    let api = ApiServer::real();
    let node = node_name(&rig);
    // A stray slice of our driver for this node (an older agent's, another name).
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        let stray: ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-{DRIVER}-old")},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 4, "resourceSliceCount": 1},
                     "devices": [{"name": "old"}]}
        }))
        .unwrap();
        kube.create_slice(&stray).await.unwrap();
    });
    let mut agent = Agent::start(&rig, &api, &node, None);
    let (first, _) = wait_slice(&api, &agent, &node, BOUND, "one slice", |s| {
        s.metadata.name.as_deref() == Some(&*format!("{node}-{DRIVER}"))
    });
    assert!(
        first.spec.pool.generation > 4,
        "above the stray's generation, so no scheduler mixes them"
    );
    agent.stop();
    let agent = Agent::start(&rig, &api, &node, None);
    // Give it time to publish (it has, when its log says so), then count.
    let start = Instant::now();
    while !agent.log().contains("slice ") && start.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let s = slices(&api, &node);
    assert_eq!(s.len(), 1, "{s:?}\n{}", agent.log());
    assert_eq!(
        s[0].metadata.resource_version, first.metadata.resource_version,
        "the same state is not written again"
    );
}

#[test]
fn a_slice_deleted_by_someone_else_comes_back() {
    let rig = Rig::new();
    let _v = node_with_four_veths(&rig);
    let api = ApiServer::real();
    let node = node_name(&rig);
    let agent = Agent::start(&rig, &api, &node, None);
    let (s, _) = wait_slice(&api, &agent, &node, BOUND, "the slice", |_| true);
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        kube.delete_slice(s.metadata.name.as_deref().unwrap(), None)
            .await
            .unwrap();
    });
    let (back, took) = wait_slice(&api, &agent, &node, BOUND, "the slice back", |n| {
        n.metadata.uid != s.metadata.uid
    });
    eprintln!("a deleted slice came back in {took:?}");
    assert!(back.spec.pool.generation > s.spec.pool.generation);
}

#[test]
fn a_wrong_token_stops_the_agent_with_the_reason() {
    let rig = Rig::new();
    let _v = node_with_four_veths(&rig);
    let api = ApiServer::real();
    let wrong = rig.dir.path().join("wrong-token");
    std::fs::write(&wrong, "not-the-token").unwrap();
    let mut agent = Agent::start(&rig, &api, &node_name(&rig), Some(&wrong));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = agent.child.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < BOUND, "still running: {}", agent.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(1), "{}", agent.log());
    let log = agent.log();
    assert!(log.contains("401 Unauthorized"), "{log}");
    assert!(log.contains(&wrong.display().to_string()), "{log}");
    assert!(slices(&api, &node_name(&rig)).is_empty());
}
