//! The plugin under a real containerd CRI, driven as kubelet drives it.
//!
//! Each test starts its own private containerd (crates/test-support/src/containerd.rs: Debian's 1.6 with
//! its built-in CRI plugin, a locally built sandbox image, the CRI v1 gRPC API called from
//! Python as kubelet calls it). containerd then calls the plugin exactly as on a Kubernetes
//! node: `eth0`, CNI_ARGS with the pod, `loopback` first, DEL on Stop with the netns and a
//! second DEL without one on Remove, DEL of the whole list after a failed ADD.
//!
//! The "NIC" is a veth end, as in the other integration tests. Needs root, containerd, runc,
//! a C compiler, and the Python venv with grpcio that scripts/setup.sh makes. The tests run
//! one at a time (a mutex): each starts its own containerd, and their timings are printed.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::Child;
use std::sync::Mutex;

/// The network name in every test conflist (host-local keeps its leases under it).
const NET: &str = "rdma-cri";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- what a user checks

/// The netns name (for `ip -n`) of a sandbox's netns path.
fn ns_name(pod: &Pod) -> &str {
    pod.netns.rsplit('/').next().unwrap()
}

/// Our plugin's entry of a conflist: the veth `nic`, MTU 9000, host-local on this rig's range.
fn our_plugin(rig: &Rig, nic: &Veth) -> Value {
    json!({
        "type": "rdma-host-device",
        "device": nic.name,
        "mtu": 9000,
        "ipam": rig.host_local_ipam(),
        "logFile": "cri.log"
    })
}

fn conflist(plugins: Vec<Value>) -> Value {
    json!({"cniVersion": "1.0.0", "name": NET, "plugins": plugins})
}

/// A veth "NIC" whose wire end is up (so the pod sees a carrier).
fn nic(rig: &Rig, i: u32) -> Veth {
    let v = rig.nic(i);
    ip(&["link", "set", &v.peer, "up"]);
    v
}

/// The pod as kubelet and a user inside it see it: READY, the sandbox IP is the IPAM address,
/// and `eth0` in its netns is our NIC (by MAC) with that address, MTU 9000 and IPAM's route;
/// the NIC is gone from the host and host-local holds exactly that lease for this sandbox.
fn assert_pod_has_nic(c: &Containerd, rig: &Rig, pod: &Pod, nic: &Veth) {
    let ctx = c.context();
    assert_eq!(pod.state, "SANDBOX_READY", "{pod:?}\n{ctx}");
    let o = rig.octet();
    assert!(
        pod.ip.starts_with(&format!("10.77.{o}.")),
        "sandbox IP {:?} is not from the IPAM range 10.77.{o}.0/24\n{ctx}",
        pod.ip
    );
    assert!(
        pod.netns.starts_with("/var/run/netns/cni-"),
        "netns {:?}\n{ctx}",
        pod.netns
    );
    let eth0 = link(Some(ns_name(pod)), "eth0").unwrap_or_else(|| {
        panic!(
            "no eth0 in the sandbox netns:\n{}\n{ctx}",
            dump(Some(ns_name(pod)))
        )
    });
    assert!(
        eth0.mac.eq_ignore_ascii_case(&nic.mac),
        "eth0 in the pod is not the NIC: {eth0:?}\n{ctx}"
    );
    assert_eq!(eth0.mtu, 9000, "{eth0:?}\n{ctx}");
    assert!(eth0.up, "{eth0:?}\n{ctx}");
    assert!(
        eth0.addrs.contains(&format!("{}/24", pod.ip)),
        "eth0 lacks the sandbox IP {}: {:?}\n{ctx}",
        pod.ip,
        eth0.addrs
    );
    // (sbr, when chained, moves the routes into its own table: look in all of them.)
    let out = run(
        "ip",
        &["-n", ns_name(pod), "-j", "route", "show", "table", "all"],
    );
    let r: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(
        r.iter().any(|r| r["dst"] == json!("10.78.0.0/16")
            && r["gateway"] == json!(format!("10.77.{o}.1"))
            && r["dev"] == json!("eth0")),
        "IPAM's route 10.78.0.0/16 via 10.77.{o}.1 missing in the pod: {r:?}\n{ctx}"
    );
    assert!(
        link(None, &nic.name).is_none() && nic.on_host().is_none(),
        "the NIC is still on the host\n{ctx}"
    );
    let leases: Vec<String> = rig
        .allocations(NET)
        .into_iter()
        .map(|(ip, owner)| format!("{ip} {}", owner.lines().next().unwrap_or("")))
        .collect();
    assert_eq!(
        leases,
        vec![format!("{} {}", pod.ip, pod.id)],
        "host-local's leases\n{ctx}"
    );
}

/// After Stop and Remove: the NIC is home with its name, MAC and MTU, the lease is released,
/// the plugin's state is forgotten and the sandbox netns is gone.
fn assert_all_home(c: &Containerd, rig: &Rig, pod: &Pod, nic: &Veth) {
    let ctx = c.context();
    nic.assert_home(None, &ctx);
    assert!(
        rig.allocations(NET).is_empty(),
        "leases left: {:?}\n{ctx}",
        rig.allocations(NET)
    );
    rig.assert_state_empty(&ctx);
    assert!(
        !Path::new(&pod.netns).exists(),
        "{} still exists\n{ctx}",
        pod.netns
    );
}

// ---------------------------------------------------------------- the cases

#[test]
fn run_stop_remove_moves_the_nic_in_and_home() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic)]));

    let pod = c
        .run_pod("web-0")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic);
    assert_eq!(
        rig.state_files()
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .count(),
        1
    );
    // What containerd told the plugin: the Kubernetes pod in CNI_ARGS reached IPAM, which
    // records the container id; the interface is eth0.
    let log = fs::read_to_string(rig.log_dir().join("cri.log")).unwrap_or_default();
    assert!(
        log.contains(&format!("ADD {}", pod.id)) && log.contains("as eth0"),
        "plugin log:\n{log}"
    );

    // Stop: DEL with the netns. The NIC is home at once; the sandbox is NOTREADY.
    c.stop(&pod.id)
        .unwrap_or_else(|e| panic!("StopPodSandbox: {e}\n{}", c.context()));
    nic.assert_home(None, &c.context());
    assert!(rig.allocations(NET).is_empty(), "lease kept after Stop");
    assert_eq!(c.pod(&pod.id).state, "SANDBOX_NOTREADY");
    // Remove: the second DEL, without a netns, changes nothing and succeeds.
    c.remove(&pod.id)
        .unwrap_or_else(|e| panic!("RemovePodSandbox: {e}\n{}", c.context()));
    assert!(c.list().is_empty(), "{:?}", c.list());
    assert_all_home(&c, &rig, &pod, &nic);

    // And again: the NIC is as good as new for the next pod.
    let again = c
        .run_pod("web-1")
        .unwrap_or_else(|e| panic!("second RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &again, &nic);
    c.delete_pod(&again.id);
    assert_all_home(&c, &rig, &again, &nic);
    c.report("run, stop, remove, twice");
}

#[test]
fn two_sandboxes_racing_for_one_nic() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic)]));

    let kids: Vec<Child> = ["racer-a", "racer-b"]
        .iter()
        .map(|n| c.cri_cmd(&["run", n]).spawn().unwrap())
        .collect();
    let results: Vec<Result<Value, Value>> = kids
        .into_iter()
        .map(|k| parse_cri(&["run"], &k.wait_with_output().unwrap()))
        .collect();
    let won: Vec<&Value> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let lost: Vec<&Value> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        won.len() == 1 && lost.len() == 1,
        "expected one winner and one loser: {results:?}\n{}",
        c.context()
    );
    // The loser's kubelet sees why, in the plugin's own words (102: the NIC is taken; or 11
    // if it waited out the lock).
    let msg = lost[0]["message"].as_str().unwrap_or("");
    eprintln!("the losing RunPodSandbox got: {} {msg}", lost[0]["error"]);
    assert!(
        msg.contains("rdma-host-device") && msg.contains(&nic.name),
        "the CRI error does not carry the plugin's message: {msg}\n{}",
        c.context()
    );
    // Nothing broken: the DEL containerd ran for the loser left the winner's NIC alone.
    let winner = c.pod(won[0]["id"].as_str().unwrap());
    assert_pod_has_nic(&c, &rig, &winner, &nic);
    let listed = c.list();
    assert_eq!(listed.len(), 1, "sandboxes: {listed:?}");
    assert_eq!(listed[0].0, winner.id);
    c.delete_pod(&winner.id);
    assert_all_home(&c, &rig, &winner, &nic);
    // The loser left no stale claim: the next pod gets the NIC.
    let next = c
        .run_pod("racer-c")
        .unwrap_or_else(|e| panic!("RunPodSandbox after the race: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &next, &nic);
    c.delete_pod(&next.id);
    assert_all_home(&c, &rig, &next, &nic);
    c.report("race");
}

#[test]
fn sandbox_netns_unmounted_behind_containerds_back() {
    let _s = serial();
    let rig = Rig::new();
    let nic0 = nic(&rig, 0);
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic0)]));
    let pod = c
        .run_pod("orphan-0")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic0);

    // An operator's `ip netns delete`: the bind mount goes and the file with it; only the
    // pause process still holds the namespace.
    ip(&["netns", "delete", ns_name(&pod)]);
    assert!(!Path::new(&pod.netns).exists());

    // kubectl delete pod must still finish: Stop kills pause (the netns dies with it, and
    // with it the veth: a virtual link cannot come home, a physical one would, see
    // tests/give_back/lost_nic.rs), containerd finds the netns closed and calls DEL without one.
    c.delete_pod(&pod.id);
    let ctx = c.context();
    assert!(
        rig.allocations(NET).is_empty(),
        "lease leaked: {:?}\n{ctx}",
        rig.allocations(NET)
    );
    rig.assert_state_empty(&ctx);
    assert!(
        nic0.on_host().is_none(),
        "a veth cannot outlive its netns: {ctx}"
    );
    // The plugin forgot the attachment: a new NIC under the same name goes to the next pod.
    drop(nic0);
    let nic1 = nic(&rig, 0);
    let next = c
        .run_pod("orphan-1")
        .unwrap_or_else(|e| panic!("RunPodSandbox after the orphan: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &next, &nic1);
    c.delete_pod(&next.id);
    assert_all_home(&c, &rig, &next, &nic1);
    c.report("netns unmounted");
}

#[test]
fn containerd_killed_and_restarted_mid_pod() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    let mut c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic)]));
    let pod = c
        .run_pod("survivor")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic);

    c.kill_and_restart();
    // The pod lived through it with its NIC; the new containerd knows it as before.
    let after = c.pod(&pod.id);
    assert_eq!(after.state, "SANDBOX_READY", "{after:?}\n{}", c.context());
    assert_eq!(after.ip, pod.ip);
    assert_eq!(after.netns, pod.netns);
    assert_pod_has_nic(&c, &rig, &after, &nic);

    c.delete_pod(&pod.id);
    assert_all_home(&c, &rig, &pod, &nic);
    c.report("containerd restarted");
}

#[test]
fn chained_with_tuning_and_sbr_as_conf_shows() {
    let _s = serial();
    let rig = Rig::new();
    let nic = nic(&rig, 0);
    // conf/containerd/20-rdma.conflist as shipped, with this test's NIC and IPAM range.
    let text = fs::read_to_string(repo().join("conf/containerd/20-rdma.conflist")).unwrap();
    let mut list: Value = serde_json::from_str(&text).unwrap();
    list["name"] = json!(NET);
    let ours = our_plugin(&rig, &nic);
    let first = &mut list["plugins"][0];
    assert_eq!(first["type"], json!("rdma-host-device"));
    first["device"] = ours["device"].clone();
    first["ipam"] = ours["ipam"].clone();
    first["logFile"] = ours["logFile"].clone();
    let chained: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["type"].as_str())
        .collect();
    assert_eq!(chained, ["rdma-host-device", "tuning", "sbr"]);
    let c = Containerd::start(&rig, &list);

    let pod = c
        .run_pod("chained")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &pod, &nic);
    // tuning ran on our result: the sysctls are set in the pod.
    for (key, want) in [
        ("net.ipv4.conf.all.arp_ignore", "1"),
        ("net.ipv4.conf.all.arp_announce", "2"),
    ] {
        let out = run("ip", &["netns", "exec", ns_name(&pod), "sysctl", "-n", key]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{key} in the pod\n{}",
            c.context()
        );
    }
    // sbr ran on our result: traffic from the pod's address uses its own table.
    let rules =
        String::from_utf8_lossy(&run("ip", &["-n", ns_name(&pod), "rule"]).stdout).into_owned();
    assert!(
        rules.contains(&format!("from {} lookup 100", pod.ip)),
        "sbr's rule missing:\n{rules}\n{}",
        c.context()
    );
    let t100 = run(
        "ip",
        &["-n", ns_name(&pod), "route", "show", "table", "100"],
    );
    let t100 = String::from_utf8_lossy(&t100.stdout);
    assert!(
        t100.contains(&format!("default via 10.77.{}.1 dev eth0", rig.octet())),
        "sbr's table 100 lacks the default route via the IPAM gateway:\n{t100}\n{}",
        c.context()
    );
    c.delete_pod(&pod.id);
    assert_all_home(&c, &rig, &pod, &nic);
    c.report("chained with tuning and sbr");
}

/// The agent's leak collector (`metrics` with node.json's `gc`) against this real containerd: a
/// sandbox removed while the node's network configuration no longer names our plugin (containerd
/// DELs with the configuration it has then, not the one of ADD: our DEL never runs) leaves an
/// attachment no runtime will ever release; the agent's next round gives its NIC back and frees
/// its lease, and a live sandbox's attachment stays, round after round. The one stand-in is the
/// kernel's: the veth is moved to the host as a physical NIC comes back from a dying netns (a
/// veth dies with it).
#[test]
fn the_agent_collects_an_attachment_whose_sandbox_went_without_del_and_keeps_a_live_one() {
    let _s = serial();
    let rig = Rig::new();
    let (nic0, nic1) = (nic(&rig, 0), nic(&rig, 1));
    let c = Containerd::start(&rig, &conflist(vec![our_plugin(&rig, &nic0)]));
    let leaky = c
        .run_pod("leaky")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    assert_pod_has_nic(&c, &rig, &leaky, &nic0);
    c.set_conflist(&conflist(vec![our_plugin(&rig, &nic1)]));
    let live = c
        .run_pod("live")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.context()));
    let in_live = || {
        link(Some(ns_name(&live)), "eth0").is_some_and(|l| l.mac.eq_ignore_ascii_case(&nic1.mac))
    };
    assert!(in_live(), "live's eth0 is not nic1\n{}", c.context());
    let leases = |id: &str| {
        rig.allocations(NET)
            .into_iter()
            .filter(|(_, holder)| holder.lines().next() == Some(id))
            .count()
    };
    let record = |id: &str| rig.state_dir().join(format!("{id}:eth0.json")).exists();

    // Away from us: the configuration now names another plugin only; the kernel's return of
    // the NIC stood in for; Stop and Remove succeed without calling us.
    c.set_conflist(&conflist(vec![json!({"type": "tuning"})]));
    // (The host has an eth0 of its own: the kernel then names the returning NIC devN, N its
    // ifindex.)
    let index = link(Some(ns_name(&leaky)), "eth0")
        .expect("leaky's eth0")
        .index;
    let returned = format!("dev{index}");
    ip(&[
        "-n",
        ns_name(&leaky),
        "link",
        "set",
        "eth0",
        "netns",
        &std::process::id().to_string(),
        "name",
        &returned,
    ]);
    c.delete_pod(&leaky.id);
    assert!(
        record(&leaky.id),
        "a DEL reached the plugin\n{}",
        c.context()
    );
    assert_eq!(leases(&leaky.id), 1);
    assert!(link(None, &returned).is_some(), "{returned} on the host");

    // The agent, its node configuration naming this containerd, a round a second.
    rig.set_node(
        json!({"gc": {"criSocket": c.sock(), "periodSeconds": 1, "graceSeconds": 10,
        "cniPath": [rig.bin_dir(), SYSTEM_CNI_DIR]}}),
    );
    let mut agent = std::process::Command::new(AGENT)
        .args(["metrics", "--listen", "127.0.0.1:0"])
        .env(NODE_CONFIG_ENV, rig.node_config())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the agent");
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let log = log.clone();
        let err = agent.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let mut t = log.lock().unwrap();
                t.push_str(&l);
                t.push('\n');
            }
        })
    };
    let text = || log.lock().unwrap().clone();
    let wait = |what: &str, secs: u64, ok: &dyn Fn() -> bool| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !ok() {
            assert!(
                std::time::Instant::now() < end,
                "{what}: not within {secs} s\nagent:\n{}\n{}",
                text(),
                c.context()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let t0 = std::time::Instant::now();
    wait("the leaked attachment collected", 30, &|| {
        !record(&leaky.id)
    });
    eprintln!(
        "collected {:.1} s after the agent started",
        t0.elapsed().as_secs_f64()
    );
    let ctx = format!("agent:\n{}\n{}", text(), c.context());
    nic0.assert_home(None, &ctx);
    assert_eq!(leases(&leaky.id), 0, "the lease is kept\n{ctx}");
    assert!(
        text().contains(&format!("gc: collected {}/eth0", leaky.id)),
        "{ctx}"
    );
    // Three more rounds: the live sandbox's attachment is all there.
    let rounds = |t: &str| t.matches("sandboxes) asked").count();
    let now = rounds(&text());
    wait("three more rounds", 30, &|| rounds(&text()) >= now + 3);
    assert!(record(&live.id), "live's record\n{ctx}");
    assert_eq!(leases(&live.id), 1, "live's lease\n{ctx}");
    assert_pod_has_nic(&c, &rig, &c.pod(&live.id), &nic1);
    assert_eq!(text().matches("gc: collected").count(), 1, "{}", text());

    let _ = agent.kill();
    let _ = agent.wait();
    let _ = reader.join();
    c.set_conflist(&conflist(vec![our_plugin(&rig, &nic1)]));
    c.delete_pod(&live.id);
    assert_all_home(&c, &rig, &live, &nic1);
    c.report("agent gc");
}
