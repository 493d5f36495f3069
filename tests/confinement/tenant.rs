//! A tenant writes the network configuration (a NetworkAttachmentDefinition is a namespaced
//! object) that this plugin runs as root: each test here is one thing a hostile or careless
//! tenant tries, and what the node operator needs to stay true. The rows of docs/trust.md that
//! say "refused" or "confined" point here. Needs root (see crates/test-support/src/lib.rs).

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const IF: &str = "net1";

/// Run one plugin call on its own thread and fail the test if it has not finished within
/// `limit`: no tenant input may make the plugin block.
fn call_within(
    rig: &std::sync::Arc<Rig>,
    limit: Duration,
    cmd: &'static str,
    conf: &Value,
    pod: &Netns,
    cid: &str,
) -> RunOut {
    let (tx, rx) = mpsc::channel();
    let (r, conf, path, cid) = (rig.clone(), conf.clone(), pod.path(), cid.to_owned());
    let start = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(r.call(cmd, &conf, &path, &cid, IF, &[]));
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out,
        Err(_) => panic!(
            "{cmd} did not finish within {limit:?} (started {:?} ago): the plugin blocked",
            start.elapsed()
        ),
    }
}

fn code(out: &RunOut) -> u64 {
    out.one_error()["code"].as_u64().unwrap_or(0)
}

fn msg(out: &RunOut) -> String {
    out.one_error()["msg"].as_str().unwrap_or("").to_owned()
}

// ---------------------------------------------------------------- paths

#[test]
fn log_file_or_state_dir_outside_the_nodes_directories_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let victim = rig.dir.path().join("victim.log");
    let cases = [
        json!({"logFile": victim}),
        json!({"logFile": "../victim.log"}),
        json!({"logFile": "/proc/self/attr/current"}),
        json!({"stateDir": "/etc"}),
        json!({"stateDir": rig.dir.path().join("other-state")}),
    ];
    for extra in cases {
        let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
        for (k, v) in extra.as_object().unwrap() {
            conf[k] = v.clone();
        }
        let out = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        assert_eq!(code(&out), 7, "{extra}\n{out}");
        let m = msg(&out);
        assert!(
            m.contains("node") && (m.contains("logFile") || m.contains("stateDir")),
            "the message says it is a node setting: {m}"
        );
        nic.assert_home(Some(&pod), &out);
        assert!(!victim.exists(), "wrote {}\n{out}", victim.display());
        assert!(!rig.dir.path().join("other-state").exists());
        assert!(!Path::new("/etc/locks").exists(), "created /etc/locks");
    }
    rig.assert_state_empty(&"refused configs");
}

#[test]
fn log_file_is_placed_in_the_nodes_log_dir() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["logFile"] = json!("tenant.log");
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    let log = fs::read_to_string(rig.log_dir().join("tenant.log")).unwrap();
    assert!(log.starts_with("# rdma-host-device log\n"), "{log}");
    assert!(log.contains(" ADD ") && log.contains(" DEL "), "{log}");
    nic.assert_home(Some(&pod), &del);
}

#[test]
fn a_symlink_in_the_log_dir_is_not_followed() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let victim = rig.dir.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    fs::create_dir_all(rig.log_dir()).unwrap();
    std::os::unix::fs::symlink(&victim, rig.log_dir().join("link.log")).unwrap();
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["logFile"] = json!("link.log");
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    add.ok();
    assert!(
        add.stderr.contains("not logging to a file"),
        "says why\n{add}"
    );
    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn a_fifo_in_the_log_dir_blocks_neither_add_nor_del() {
    let rig = std::sync::Arc::new(Rig::new());
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    fs::create_dir_all(rig.log_dir()).unwrap();
    let fifo = rig.log_dir().join("fifo.log");
    let out = run("mkfifo", &[fifo.to_str().unwrap()]);
    assert!(out.status.success());
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["logFile"] = json!("fifo.log");
    let limit = Duration::from_secs(5);
    call_within(&rig, limit, "ADD", &conf, &pod, &rig.cid(0)).ok();
    let del = call_within(&rig, limit, "DEL", &conf, &pod, &rig.cid(0));
    del.ok();
    nic.assert_home(Some(&pod), &del);
    // A reader on the FIFO does not make it a log file either.
    let reader = std::process::Command::new("cat")
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    call_within(&rig, limit, "ADD", &conf, &pod, &rig.cid(1)).ok();
    call_within(&rig, limit, "DEL", &conf, &pod, &rig.cid(1)).ok();
    let _ = fs::remove_file(&fifo);
    let mut reader = reader;
    let _ = reader.kill();
    let got = reader.wait_with_output().unwrap();
    assert!(got.stdout.is_empty(), "wrote to the FIFO");
}

#[test]
fn only_log_files_the_plugin_created_are_written_or_rotated() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    fs::create_dir_all(rig.log_dir()).unwrap();
    let big = vec![b'x'; 11 << 20];
    // Someone else's file in the log dir, over the rotation size.
    let foreign = rig.log_dir().join("foreign.log");
    fs::write(&foreign, &big).unwrap();
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["logFile"] = json!("foreign.log");
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    assert_eq!(fs::read(&foreign).unwrap(), big, "foreign file changed");
    assert!(!rig.log_dir().join("foreign.log.1").exists(), "rotated it");

    // Our own file grows past 10 MiB: it is rotated to .1 and a new one started.
    conf["logFile"] = json!("ours.log");
    let ours = rig.log_dir().join("ours.log");
    rig.call("ADD", &conf, &pod.path(), &rig.cid(1), IF, &[])
        .ok();
    let mut f = fs::OpenOptions::new().append(true).open(&ours).unwrap();
    std::io::Write::write_all(&mut f, &big).unwrap();
    drop(f);
    rig.call("DEL", &conf, &pod.path(), &rig.cid(1), IF, &[])
        .ok();
    let old = rig.log_dir().join("ours.log.1");
    assert!(old.exists(), "not rotated");
    assert!(
        fs::metadata(&ours).unwrap().len() < 1 << 20,
        "not restarted"
    );
    nic.assert_home(Some(&pod), &"after rotation");
}

// ---------------------------------------------------------------- the node's own NICs

/// ADD is refused with 107 naming the NIC and `why`; STATUS agrees (50); nothing changed.
fn assert_refused(rig: &Rig, nic: &Veth, pod: &Netns, why: &str) {
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&add), 107, "{add}");
    let m = msg(&add);
    assert!(m.contains(&nic.name) && m.contains(why), "{m}");
    assert!(link(None, &nic.name).is_some(), "NIC left the host\n{add}");
    assert!(link(Some(&pod.name), IF).is_none());
    rig.assert_state_empty(&add);
    let status = rig.call("STATUS", &conf, "", "", "", &[]);
    assert_eq!(
        code(&status),
        50,
        "STATUS says ready for a refused NIC\n{status}"
    );
    assert!(msg(&status).contains(why), "{status}");
}

fn assert_allowed(rig: &Rig, nic: &Veth, pod: &Netns) {
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(link(None, &nic.name).is_some(), "NIC not home\n{del}");
}

#[test]
fn a_nic_with_a_global_host_address_is_refused_unless_the_node_allows_it() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let addr = format!("10.99.{}.1/24", rig.octet());
    ip(&["addr", "add", &addr, "dev", &nic.name]);
    assert_refused(&rig, &nic, &pod, &addr);
    rig.set_node(json!({"allowedUplinks": [nic.name]}));
    assert_allowed(&rig, &nic, &pod);
}

#[test]
fn a_nic_carrying_a_default_route_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    ip(&["link", "set", &nic.name, "up"]);
    ip(&["link", "set", &nic.peer, "up"]);
    let table = (40_000 + rig.n).to_string();
    ip(&["route", "add", "default", "dev", &nic.name, "table", &table]);
    assert_refused(&rig, &nic, &pod, "default route");
    ip(&["route", "del", "default", "dev", &nic.name, "table", &table]);
    assert_allowed(&rig, &nic, &pod);
}

/// What else the node uses a NIC for (attack review NU1: each of these was taken by ADD, and
/// the route, address or vxlan was gone from the node after DEL): a route to a prefix, a split
/// default, an IPv6 route via a link-local gateway (BGP unnumbered), a scope-link address, a
/// vxlan bound to it by `dev`. Each is refused with 107 and stays; the kernel's own routes and
/// IPv6 link-local address of an up NIC are not uses.
#[test]
fn routes_addresses_and_vxlans_of_the_node_on_a_nic_are_uses_too() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let dev = nic.name.as_str();
    ip(&["link", "set", dev, "up"]);
    ip(&["link", "set", &nic.peer, "up"]);
    let o = rig.octet();
    let table = (42_000 + rig.n).to_string();

    let net = format!("10.213.{o}.0/24");
    ip(&["route", "add", &net, "dev", dev]);
    assert_refused(&rig, &nic, &pod, &format!("route to {net}"));
    assert!(
        String::from_utf8_lossy(&run("ip", &["route", "show", &net]).stdout).contains(dev),
        "the node's route is still there"
    );
    ip(&["route", "del", &net, "dev", dev]);

    for half in ["0.0.0.0/1", "128.0.0.0/1"] {
        ip(&["route", "add", half, "dev", dev, "table", &table]);
    }
    assert_refused(&rig, &nic, &pod, "route to 0.0.0.0/1");
    for half in ["0.0.0.0/1", "128.0.0.0/1"] {
        ip(&["route", "del", half, "dev", dev, "table", &table]);
    }

    let v6 = format!("2001:db8:77:{o:x}::/64");
    ip(&["-6", "route", "add", &v6, "via", "fe80::1", "dev", dev]);
    assert_refused(&rig, &nic, &pod, &format!("route to {v6}"));
    ip(&["-6", "route", "del", &v6, "via", "fe80::1", "dev", dev]);

    let addr = format!("10.214.{o}.1/24");
    ip(&["addr", "add", &addr, "scope", "link", "dev", dev]);
    assert_refused(&rig, &nic, &pod, &format!("link-scope address {addr}"));
    ip(&["addr", "del", &addr, "dev", dev]);

    let vx = format!("rh{}x{}", tag(), rig.n);
    ip(&[
        "link", "add", &vx, "type", "vxlan", "id", "77", "dev", dev, "dstport", "4789",
    ]);
    assert_refused(&rig, &nic, &pod, &format!("vxlan {vx} is stacked on it"));
    assert!(link(None, &vx).is_some(), "the node's vxlan is still there");
    ip(&["link", "del", &vx]);

    assert_allowed(&rig, &nic, &pod);
}

#[test]
fn a_bridge_port_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let br = format!("rh{}b{}", tag(), rig.n);
    ip(&["link", "add", &br, "type", "bridge"]);
    ip(&["link", "set", &nic.name, "master", &br]);
    assert_refused(&rig, &nic, &pod, &format!("port of {br}"));
    let _ = run("ip", &["link", "del", &br]);
}

#[test]
fn the_node_policy_names_the_nics_pods_may_have() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    rig.set_node(json!({"allowedNics": {"names": ["someothernic"], "drivers": ["mlx5_core"]}}));
    assert_refused(&rig, &nic, &pod, "allowedNics");
    rig.set_node(json!({"allowedNics": {"names": [nic.name]}}));
    assert_allowed(&rig, &nic, &pod);
    rig.set_node(json!({"allowedNics": {"drivers": ["veth"]}}));
    assert_allowed(&rig, &nic, &pod);
}

#[test]
fn a_broken_node_configuration_stops_add_with_its_path() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    fs::write(rig.node_config(), "{\"stateDir\": \"relative\"}").unwrap();
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&add), 7, "{add}");
    assert!(
        msg(&add).contains(&rig.node_config().display().to_string()),
        "{add}"
    );
    nic.assert_home(Some(&pod), &add);
}

// ---------------------------------------------------------------- DEL tells the truth

/// ADD with host-local IPAM (so a leaked IP shows) into pod 0 as net1.
fn attach(rig: &Rig, nic: &Veth, pod: &Netns) -> Value {
    let conf = rig.host_local_conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    conf
}

fn in_pod(pod: &Netns, args: &[&str]) {
    let mut a = vec!["-n", pod.name.as_str()];
    a.extend_from_slice(args);
    ip(&a);
}

#[test]
fn a_pod_that_rewrites_its_alias_mac_and_name_still_gets_its_nic_taken_back() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = attach(&rig, &nic, &pod);
    // What a pod with NET_ADMIN may do to its own interface.
    in_pod(&pod, &["link", "set", IF, "down"]);
    in_pod(&pod, &["link", "set", IF, "alias", "mine now"]);
    in_pod(&pod, &["link", "set", IF, "address", "02:11:22:33:44:55"]);
    in_pod(&pod, &["link", "set", IF, "name", "eth9"]);
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    // Home under its name, MTU and MAC; nothing of it left in the pod; IP and state released.
    nic.assert_home(Some(&pod), &del);
    assert!(
        link(Some(&pod.name), "eth9").is_none(),
        "still in the pod\n{del}"
    );
    assert!(
        rig.allocations_of(&rig.net_name(), &rig.cid(0)).is_empty(),
        "IP leaked\n{del}"
    );
    rig.assert_state_empty(&del);
}

#[test]
fn a_forged_tag_cannot_redirect_del_to_another_link() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let decoy = rig.nic(1);
    let pod = rig.netns(0);
    let index = link(None, &nic.name).unwrap().index;
    let conf = attach(&rig, &nic, &pod);
    let tag = link(Some(&pod.name), IF).unwrap().alias.expect("tagged");
    // The pod moves our tag and the NIC's MAC onto another link of its own, and hides the NIC.
    ip(&["link", "set", &decoy.name, "netns", &pod.name]);
    in_pod(&pod, &["link", "set", &decoy.name, "name", "decoy"]);
    in_pod(&pod, &["link", "set", IF, "alias", ""]);
    in_pod(&pod, &["link", "set", IF, "address", "02:11:22:33:44:56"]);
    in_pod(&pod, &["link", "set", "decoy", "address", &nic.mac]);
    in_pod(&pod, &["link", "set", "decoy", "alias", &tag]);
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    let home = link(None, &nic.name).expect("the NIC is home");
    assert_eq!(
        home.index, index,
        "the host got another link as {}\n{del}",
        nic.name
    );
    assert_eq!(home.mac, nic.mac, "MAC restored\n{del}");
    assert!(
        link(Some(&pod.name), "decoy").is_some(),
        "the decoy was moved\n{del}"
    );
    assert!(
        del.stderr.contains("ignoring decoy"),
        "the log says why\n{del}"
    );
    rig.assert_state_empty(&del);
}

/// Something on the host took the NIC's name (a pod with NET_ADMIN can make a link there
/// through a namespace id): DEL brings the NIC home by its identity under a name that says
/// so and succeeds, rather than failing on every retry.
#[test]
fn del_whose_nic_name_is_taken_on_the_host_brings_it_home_under_a_name_that_says_so() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = attach(&rig, &nic, &pod);
    let squatter = Veth::new(&nic.name, &format!("rh{}q{}", tag(), rig.n), 1500);
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_state_empty(&del);
    assert!(link(None, &nic.name).is_some_and(|l| l.mac != nic.mac));
    let home = nic
        .on_host()
        .unwrap_or_else(|| panic!("the NIC is not on the host\n{del}"));
    assert!(home.name.contains('~'), "came home as {}\n{del}", home.name);
    assert_eq!(
        home.alias.as_deref(),
        Some(format!("rdma-host-device:displaced:{}", nic.name).as_str()),
        "{del}"
    );
    drop(squatter);
    ip(&["link", "set", &home.name, "name", &nic.name]);
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn del_works_from_the_record_when_the_config_was_edited_since_add() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let other = rig.nic(1);
    let pod = rig.netns(0);
    let mut conf = attach(&rig, &nic, &pod);
    // The NAD was edited: a typo key, out-of-range values, another NIC, a foreign stateDir.
    conf["devcie"] = json!("x");
    conf["mtu"] = json!(7);
    conf["rdma"] = json!({"gidTimeoutMs": 99_999_999});
    conf["device"] = json!(other.name);
    conf["stateDir"] = json!("/etc");
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    assert!(
        link(None, &other.name).is_some(),
        "the other NIC was touched"
    );
    rig.assert_state_empty(&del);
    assert!(
        del.stderr.contains("ignoring") && del.stderr.contains("devcie"),
        "DEL logs what it ignored\n{del}"
    );
}

// ---------------------------------------------------------------- altnames

#[test]
fn any_name_the_kernel_accepts_selects_the_nic() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let alt = format!("rhalt{}x{}", tag(), rig.n);
    ip(&["link", "property", "add", "dev", &nic.name, "altname", &alt]);
    let conf = rig.conf("1.1.0", json!({"device": alt}));
    rig.call("STATUS", &conf, "", "", "", &[]).ok();
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    assert!(link(None, &nic.name).is_none(), "NIC still on the host");
    // While attached, the altname (which travelled with the NIC) names a busy NIC.
    let other = rig.call("ADD", &conf, &pod.path(), &rig.cid(1), "net2", &[]);
    assert_eq!(code(&other), 102, "{other}");
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn del_releases_with_the_ipam_add_used_even_if_the_config_now_names_another() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mut conf = attach(&rig, &nic, &pod);
    assert_eq!(rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(), 1);
    // The NAD now names another IPAM plugin: one that, if run, would leave a mark.
    let mark = rig.dir.path().join("evil-ran");
    let evil = rig.bin_dir().join("evil-ipam");
    fs::write(
        &evil,
        format!("#!/bin/sh\ntouch {}\necho '{{}}'\n", mark.display()),
    )
    .unwrap();
    run("chmod", &["755", evil.to_str().unwrap()]);
    conf["ipam"] = json!({"type": "evil-ipam"});
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(
        !mark.exists(),
        "DEL ran the IPAM plugin the edited config names\n{del}"
    );
    assert!(
        rig.allocations_of(&rig.net_name(), &rig.cid(0)).is_empty(),
        "the address ADD got was not released\n{del}"
    );
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn a_nic_with_a_macvlan_on_it_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mv = format!("rh{}m{}", tag(), rig.n);
    ip(&["link", "add", &mv, "link", &nic.name, "type", "macvlan"]);
    assert_refused(&rig, &nic, &pod, &format!("macvlan {mv} is stacked on it"));
    let _ = run("ip", &["link", "del", &mv]);
    assert_allowed(&rig, &nic, &pod);
}

/// Issue 18: a Multus macvlan NAD puts the macvlan in *its pod's* netns, where it still rides
/// the NIC; handing the NIC to another pod gave that pod the victim's frames and its link.
/// Uppers in any namespace of the node count: one named under /run/netns (a pod sandbox) and
/// one held only by a process. (macvlan only: this kernel has no 8021q or ipvlan module; they
/// are found the same way, by IFLA_LINK and IFLA_LINK_NETNSID.)
#[test]
fn a_nic_carrying_a_macvlan_in_another_namespace_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let victim = rig.netns(1);
    let mv = format!("rh{}m{}", tag(), rig.n);
    ip(&["link", "add", &mv, "link", &nic.name, "type", "macvlan"]);
    ip(&["link", "set", &mv, "netns", &victim.name]);
    assert_refused(
        &rig,
        &nic,
        &pod,
        &format!(
            "macvlan {mv} in /run/netns/{} is stacked on it",
            victim.name
        ),
    );
    in_pod(&victim, &["link", "del", &mv]);
    // One in a namespace that only a process holds.
    let mut holder = std::process::Command::new("unshare")
        .args(["--net", "sleep", "60"])
        .spawn()
        .expect("unshare --net sleep");
    let pid = holder.id().to_string();
    // Once the holder is `sleep`, unshare has made its namespace and exec'd: the message below
    // names the holder by its comm, which is `unshare` until then.
    for _ in 0..100 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let vl = format!("rh{}v{}", tag(), rig.n);
    ip(&["link", "add", &vl, "link", &nic.name, "type", "macvlan"]);
    let mut moved = run("ip", &["link", "set", &vl, "netns", &pid]);
    for _ in 0..50 {
        if moved.status.success() {
            break;
        }
        // unshare may not have made its namespace yet
        std::thread::sleep(Duration::from_millis(20));
        moved = run("ip", &["link", "set", &vl, "netns", &pid]);
    }
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = run("ip", &["link", "del", &vl]);
    assert!(
        moved.status.success(),
        "ip link set {vl} netns {pid}: {moved:?}"
    );
    assert_eq!(code(&add), 107, "{add}");
    assert!(
        msg(&add).contains(&format!(
            "macvlan {vl} in the netns of pid {pid} (sleep) is stacked on it"
        )),
        "{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    assert_allowed(&rig, &nic, &pod);
}

#[test]
fn a_default_route_through_a_nexthop_object_is_seen() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    ip(&["link", "set", &nic.name, "up"]);
    ip(&["link", "set", &nic.peer, "up"]);
    let id = (50_000 + rig.n).to_string();
    let table = (41_000 + rig.n).to_string();
    ip(&["nexthop", "add", "id", &id, "dev", &nic.name]);
    ip(&["route", "add", "default", "nhid", &id, "table", &table]);
    // Without the compat mode, the route dump carries only the nexthop id.
    let compat = fs::read_to_string("/proc/sys/net/ipv4/nexthop_compat_mode").unwrap_or_default();
    let _ = fs::write("/proc/sys/net/ipv4/nexthop_compat_mode", "0");
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    let _ = fs::write("/proc/sys/net/ipv4/nexthop_compat_mode", compat.trim());
    let _ = run("ip", &["route", "del", "default", "table", &table]);
    let _ = run("ip", &["nexthop", "del", "id", &id]);
    assert_eq!(code(&add), 107, "{add}");
    assert!(msg(&add).contains("default route"), "{add}");
    nic.assert_home(Some(&pod), &add);
}

// ---------------------------------------------------------------- programs exec'd as IPAM

/// A test IPAM plugin `name` in the rig's CNI_PATH that keeps what it was given on stdin in
/// `DIR/stdin-COMMAND.json`, touches `DIR/ran` and answers ADD with one address. Returns its
/// `ipam` object and DIR. (The rig's node does not allow it: each test says what it allows.)
fn recording_ipam(rig: &Rig, name: &str) -> (Value, std::path::PathBuf) {
    // Where the node lets IPAM write (the kernel refuses anywhere else).
    let dir = rig.data_dir().join(format!("{name}-saw"));
    fs::create_dir_all(&dir).unwrap();
    let o = rig.octet();
    let result = json!({"cniVersion": "1.0.0",
        "ips": [{"address": format!("10.77.{o}.9/24"), "gateway": format!("10.77.{o}.1")}]});
    let script = format!(
        "#!/bin/sh\n\
         touch {d}/ran\n\
         cat > {d}/stdin-$CNI_COMMAND.json\n\
         case \"$CNI_COMMAND\" in\n\
         ADD) echo '{result}';;\n\
         VERSION) echo '{{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\"]}}';;\n\
         esac\n",
        d = dir.display()
    );
    let p = rig.bin_dir().join(name);
    fs::write(&p, script).unwrap();
    run("chmod", &["755", p.to_str().unwrap()]);
    (json!({"type": name}), dir)
}

/// What a NAD's writer tried (issue 18): `"ipam": {"type": "portmap"}` with a `prevResult`
/// and `runtimeConfig.portMappings` of their own made ADD install a DNAT rule for the node's
/// port 22; `bridge`, `host-device`, `ptp` as IPAM recursed without bound. Every verb refuses a
/// plugin the node does not list, before it changes anything, and never execs it.
#[test]
fn an_ipam_type_the_node_does_not_allow_is_refused_before_any_change() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    // Stand-ins first on CNI_PATH: if any were exec'd, it would leave `ran` behind.
    let mut seen = Vec::new();
    for t in ["portmap", "bridge", "host-device", "ptp"] {
        let (_, dir) = recording_ipam(&rig, t);
        seen.push(dir.join("ran"));
    }
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
    conf["ipam"] = json!({"type": "portmap"});
    conf["runtimeConfig"] = json!({"portMappings": [
        {"hostPort": 22, "containerPort": 22, "protocol": "tcp", "hostIP": "0.0.0.0"}]});
    conf["prevResult"] = json!({"cniVersion": "1.1.0",
        "interfaces": [{"name": IF, "sandbox": pod.path()}],
        "ips": [{"address": "192.0.2.66/32", "interface": 0}]});
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&add), 107, "{add}");
    let m = msg(&add);
    assert!(
        m.contains("\"portmap\"") && m.contains("host-local, static, dhcp, whereabouts"),
        "names the plugin and what the node allows: {m}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    let status = rig.call("STATUS", &conf, "", "", "", &[]);
    assert_eq!(code(&status), 50, "{status}");
    assert!(msg(&status).contains("portmap"), "{status}");
    // DEL without a record releases with the config's IPAM: not a forbidden one.
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(del.stderr.contains("not running IPAM"), "{del}");
    for t in ["bridge", "host-device", "ptp", "rdma-host-device"] {
        conf["ipam"] = json!({"type": t});
        let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        assert_eq!(code(&add), 107, "{t}\n{add}");
        rig.assert_detached(&nic, Some(&pod), &add);
    }
    for ran in &seen {
        assert!(!ran.exists(), "{} was exec'd", ran.display());
    }
}

/// An IPAM plugin the node allows but CNI_PATH lacks (a node that lists `whereabouts` before
/// installing it): ADD answers 7 naming CNI_PATH before it moves anything, not after moving
/// the NIC in and back out.
#[test]
fn an_allowed_ipam_plugin_missing_from_cni_path_fails_add_before_the_nic_moves() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    rig.set_node(json!({"ipamPlugins": ["not-installed-ipam"]}));
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["ipam"] = json!({"type": "not-installed-ipam"});
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&add), 7, "{add}");
    assert!(
        msg(&add).contains("not-installed-ipam") && msg(&add).contains("CNI_PATH"),
        "names the plugin and where it looked: {add}"
    );
    assert!(
        !add.stderr.contains("moved ") && !add.stderr.contains("rolling back"),
        "nothing moved, nothing to roll back: {add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    rig.assert_state_empty(&add);
}

#[test]
fn the_node_decides_which_ipam_plugins_a_nad_may_run() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    // The defaults: host-local and static (the ones installed here) work.
    for ipam in [rig.static_ipam(), rig.host_local_ipam()] {
        let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
        conf["ipam"] = ipam;
        rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
            .ok();
        let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        del.ok();
        nic.assert_home(Some(&pod), &del);
    }
    // A node that lists its own plugin allows that one, and only what it lists.
    let (site, saw) = recording_ipam(&rig, "site-ipam");
    rig.set_node(json!({"ipamPlugins": ["site-ipam", "host-local"]}));
    let out = run(AGENT, &["node-config", rig.node_config().to_str().unwrap()]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        shown["ipamPlugins"],
        json!(["site-ipam", "host-local"]),
        "node-config shows the key: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&add), 107, "static is not listed now\n{add}");
    assert!(msg(&add).contains("site-ipam, host-local"), "{add}");
    nic.assert_home(Some(&pod), &add);
    let mut conf = conf;
    conf["ipam"] = site;
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    assert!(saw.join("stdin-ADD.json").exists());
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(saw.join("stdin-DEL.json").exists(), "{del}");
    nic.assert_home(Some(&pod), &del);
}

/// IPAM gets what an address manager reads: a `prevResult` or `runtimeConfig.portMappings`
/// written into the NAD never reaches it (nor our own keys).
#[test]
fn ipam_gets_neither_a_tenants_prev_result_nor_port_mappings() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let (site, saw) = recording_ipam(&rig, "site-ipam");
    rig.set_node(json!({"ipamPlugins": ["site-ipam"]}));
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400}));
    conf["ipam"] = site.clone();
    conf["runtimeConfig"] = json!({"portMappings": [
        {"hostPort": 22, "containerPort": 22, "protocol": "tcp"}]});
    conf["prevResult"] = json!({"cniVersion": "1.0.0",
        "ips": [{"address": "192.0.2.66/32"}]});
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    for verb in ["ADD", "DEL"] {
        let f = saw.join(format!("stdin-{verb}.json"));
        let got: Value = serde_json::from_str(&fs::read_to_string(&f).unwrap_or_default())
            .unwrap_or(Value::Null);
        assert_eq!(got["ipam"], site, "{verb}: {got}");
        assert_eq!(got["name"], json!(rig.net_name()), "{verb}: {got}");
        for k in ["prevResult", "runtimeConfig", "device", "mtu"] {
            assert!(got.get(k).is_none(), "{verb}: IPAM got {k}: {got}");
        }
    }
}

/// ADD records an IPAM plugin the node allowed; if the node stops allowing it, DEL does not
/// run it: it says so, brings the NIC home and forgets the attachment (the allocation stays).
#[test]
fn del_does_not_run_an_ipam_plugin_the_node_no_longer_allows() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = attach(&rig, &nic, &pod);
    assert_eq!(rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(), 1);
    rig.set_node(json!({"ipamPlugins": ["static"]}));
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(
        del.stderr.contains("not releasing IPAM") && del.stderr.contains("host-local"),
        "{del}"
    );
    assert_eq!(
        rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(),
        1,
        "host-local ran\n{del}"
    );
    rig.assert_detached(&nic, Some(&pod), &del);
}

// ---------------------------------------------------------------- IPAM paths

/// A path anywhere in `ipam` (host-local's `dataDir`, `resolvConf`, dhcp's `daemonSocketPath`,
/// ...) is one root's IPAM plugin creates, reads or connects to: ADD refuses one outside the
/// node's `ipamPaths` (or with `..`) with 107 before it changes anything, and nothing appears
/// there; a root-only file named as `resolvConf` never reaches the output.
#[test]
fn status_and_gc_never_run_ipam_on_a_path_outside_the_nodes_ipam_paths() {
    // ADD refuses such a config before any change; STATUS and GC, which also exec the IPAM
    // plugin with the network's config (host-local's GC removes what it finds in dataDir),
    // must refuse it too.
    let rig = Rig::new();
    let nic = rig.nic(0);
    let outside = TempDir::new("ipam-outside-sg");
    let target = outside.path().join("deep");
    let mut conf = rig.host_local_conf("1.1.0", json!({"device": nic.name}));
    conf["ipam"]["dataDir"] = json!(target);
    let status = rig.call("STATUS", &conf, "", "", "", &[]);
    assert_eq!(code(&status), 50, "{status}");
    assert!(
        msg(&status).contains("ipam.dataDir") && msg(&status).contains("ipamPaths"),
        "names the key and the node's setting: {status}"
    );
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let gc = rig.call("GC", &gc, "", "", "", &[]);
    assert_eq!(code(&gc), 107, "{gc}");
    assert!(msg(&gc).contains("ipam.dataDir"), "{gc}");
    assert!(!target.exists(), "IPAM ran on {}", target.display());
}

/// Issue 36: DEL obeys the node as ADD does. The runtime's clean-up DEL after a refused ADD
/// has no record and the config ADD refused: it ran that config's IPAM as root (host-local on a
/// `dataDir` outside the node's, refused by the kernel: DEL failed on every retry). Now DEL
/// runs nothing, says why and succeeds; CHECK, GC and STATUS run nothing either. And a DEL
/// whose record names paths the node no longer lists does not run IPAM on them.
#[test]
fn del_check_gc_and_status_of_a_config_add_refused_run_nothing_and_del_succeeds() {
    use std::os::unix::fs::PermissionsExt;
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let outside = TempDir::new("ipam-outside-del");
    let target = outside.path().join("deep");
    // A stand-in IPAM that leaves a mark in a directory the node allows whenever it runs.
    let marks = rig.data_dir().join("marks");
    fs::create_dir_all(&marks).unwrap();
    let name = "rhd-marking-ipam";
    let script = rig.bin_dir().join(name);
    fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat >/dev/null\n: >\"{}/$CNI_COMMAND\"\n",
            marks.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    rig.allow_ipam(name);
    for ipam in [
        json!({"type": "host-local", "dataDir": target, "ranges": [[{"subnet": "10.77.250.0/24"}]]}),
        json!({"type": name, "dataDir": target}),
    ] {
        let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
        conf["ipam"] = ipam.clone();
        let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        assert_eq!(code(&add), 107, "{add}");
        let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        del.ok();
        assert!(
            del.stderr.contains("not running IPAM") && del.stderr.contains("ipam.dataDir"),
            "DEL says why it ran nothing: {del}"
        );
        let mut check = conf.clone();
        check["prevResult"] = json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": IF, "sandbox": pod.path()}], "ips": []});
        let check = rig.call("CHECK", &check, &pod.path(), &rig.cid(0), IF, &[]);
        assert_ne!(code(&check), 0, "{check}");
        let mut gc = conf.clone();
        gc["cni.dev/valid-attachments"] = json!([]);
        let gc = rig.call("GC", &gc, "", "", "", &[]);
        assert_eq!(code(&gc), 107, "{gc}");
        let status = rig.call("STATUS", &conf, "", "", "", &[]);
        assert_eq!(code(&status), 50, "{status}");
        assert!(!target.exists(), "IPAM ran on {}", target.display());
        let ran: Vec<_> = fs::read_dir(&marks)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(ran.is_empty(), "{ipam}: IPAM ran for {ran:?}\n{del}");
        rig.assert_detached(&nic, Some(&pod), &del);
    }
    // With a record: ADD ran host-local in the rig's dataDir; the node then narrows its
    // ipamPaths. DEL does not run it there, brings the NIC home and succeeds.
    let conf = attach(&rig, &nic, &pod);
    assert_eq!(rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(), 1);
    rig.set_node(json!({"ipamPaths": ["/var/lib/cni/networks"]}));
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(
        del.stderr.contains("not releasing IPAM") && del.stderr.contains("ipam.dataDir"),
        "{del}"
    );
    assert_eq!(
        rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(),
        1,
        "host-local ran\n{del}"
    );
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn ipam_paths_outside_the_nodes_ipam_paths_are_refused_before_any_change() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let outside = TempDir::new("ipam-outside");
    let target = outside.path().join("deep");
    let secret = outside.path().join("secret");
    fs::write(&secret, "search rhd-secret-domain.example\n").unwrap();
    // Root's own, readable by root only.
    std::os::unix::fs::chown(&secret, Some(0), Some(0)).unwrap();
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let escape = format!(
        "{}/../{}/deep",
        rig.dir.path().display(),
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    let cases = [
        ("dataDir", json!(target), "outside"),
        ("dataDir", json!(escape), "'..'"),
        ("dataDir", json!("../../../../tmp/rhd-ipam-rel"), "'..'"),
        ("dataDir", json!(rig.state_dir()), "outside"),
        ("dataDir", json!("tmp/rhd-ipam-rel"), "relative"),
        ("resolvConf", json!(secret), "outside"),
        (
            "daemonSocketPath",
            json!(outside.path().join("evil.sock")),
            "outside",
        ),
    ];
    for (key, value, why) in cases {
        let mut conf = rig.host_local_conf("1.0.0", json!({"device": nic.name}));
        conf["ipam"][key] = value.clone();
        let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        assert_eq!(code(&add), 107, "{key} {value}\n{add}");
        let m = msg(&add);
        assert!(
            m.contains(&format!("ipam.{key}")) && m.contains(why),
            "names the key and why: {m}"
        );
        assert!(
            m.contains("/var/lib/cni/networks, /run/cni, /var/run/cni") && m.contains("ipamPaths"),
            "names the allowed directories: {m}"
        );
        rig.assert_detached(&nic, Some(&pod), &add);
        assert!(!target.exists(), "created {}\n{add}", target.display());
        assert!(!Path::new("/tmp/rhd-ipam-rel").exists(), "{add}");
        assert!(
            !rig.state_dir().join(rig.net_name()).exists(),
            "host-local wrote into the stateDir\n{add}"
        );
        assert!(
            !add.stdout.contains("rhd-secret-domain") && !add.stderr.contains("rhd-secret-domain"),
            "the secret reached the output\n{add}"
        );
        assert!(
            rig.allocations_of(&rig.net_name(), &rig.cid(0)).is_empty(),
            "IPAM ran\n{add}"
        );
    }
    assert_eq!(
        fs::read_dir(outside.path()).unwrap().count(),
        1,
        "only the secret is in {}",
        outside.path().display()
    );
    // `validate` applies the same check.
    let mut conf = rig.host_local_conf("1.0.0", json!({"device": nic.name}));
    conf["ipam"]["dataDir"] = json!(target);
    let file = rig.write("outside.conf", &conf);
    let out = std::process::Command::new(AGENT)
        .args(["validate", file.to_str().unwrap()])
        .env(NODE_CONFIG_ENV, rig.node_config())
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "validate accepted it: {said}");
    assert!(said.contains("ipam.dataDir"), "{said}");
}

/// The rig's own dataDir (its node lists the rig's directory) works, a node that lists another
/// directory allows that one, and CHECK refuses a path the node does not allow.
#[test]
fn ipam_paths_the_node_lists_are_allowed() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = attach(&rig, &nic, &pod);
    assert_eq!(rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(), 1);
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);

    let site = TempDir::new("ipam-site");
    let data = site.path().join("pools");
    rig.set_node(json!({"ipamPaths": [site.path()]}));
    let out = run(AGENT, &["node-config", rig.node_config().to_str().unwrap()]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        shown["ipamPaths"],
        json!([site.path()]),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut conf = rig.host_local_conf("1.0.0", json!({"device": nic.name}));
    // The rig's own directory is no longer listed.
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&add), 107, "{add}");
    nic.assert_home(Some(&pod), &add);
    conf["ipam"]["dataDir"] = json!(data);
    let add = rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    let result = add.ok();
    assert!(
        data.join(rig.net_name()).is_dir(),
        "host-local used {}\n{add}",
        data.display()
    );
    // CHECK applies the node's paths too.
    let mut check = conf.clone();
    check["prevResult"] = result;
    rig.call("CHECK", &check, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    check["ipam"]["dataDir"] = json!(rig.data_dir());
    let out = rig.call("CHECK", &check, &pod.path(), &rig.cid(0), IF, &[]);
    assert_eq!(code(&out), 107, "{out}");
    assert!(msg(&out).contains("ipam.dataDir"), "{out}");
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}
