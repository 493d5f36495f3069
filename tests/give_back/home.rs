//! Home exactly as it left: what a pod with NET_ADMIN does to its NIC (flags, group, queue
//! length, links stacked on it, altnames, a name that is not UTF-8) must not come home with it,
//! reach the next pod or hide the NIC; what the runtime sends DEL (the host's own netns, a
//! container ID of any length, a netns path gone while the netns lives on) must not make DEL act
//! on the host, release what is still in use, or fail for ever. Issue 17, by case number;
//! docs/trust.md's rows point here. Needs root (see crates/test-support/src/lib.rs).

use test_support as common;

use common::*;
use serde_json::{Value, json};

const IF: &str = "net1";

fn in_pod(pod: &Netns, args: &[&str]) {
    let mut a = vec!["-n", pod.name.as_str()];
    a.extend_from_slice(args);
    ip(&a);
}

/// `ip -j -d link show dev NAME` in the host (`None`) or netns `ns`.
fn details(ns: Option<&str>, name: &str) -> Value {
    let out = ip_in(ns, &["-j", "-d", "link", "show", "dev", name]);
    assert!(
        out.status.success(),
        "ip link show {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v[0].clone()
}

/// The flags a pod can flip on its interface (`ip link set ... promisc/allmulticast/arp/
/// multicast/dynamic/trailers`), as `ip` names them, sorted.
fn flippable_flags(d: &Value) -> Vec<String> {
    const FLIPPABLE: [&str; 7] = [
        "PROMISC",
        "ALLMULTI",
        "NOARP",
        "MULTICAST",
        "DYNAMIC",
        "NOTRAILERS",
        "DEBUG",
    ];
    let mut f: Vec<String> = d["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|f| FLIPPABLE.contains(f))
        .map(str::to_owned)
        .collect();
    f.sort();
    f
}

fn altnames(ns: Option<&str>, name: &str) -> Vec<String> {
    let mut a: Vec<String> = details(ns, name)["altnames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    a.sort();
    a
}

/// Names of the links in `pod` but `lo`.
fn pod_links(pod: &Netns) -> Vec<String> {
    links(Some(&pod.name))
        .into_iter()
        .map(|l| l.name)
        .filter(|n| n != "lo")
        .collect()
}

fn add(rig: &Rig, nic: &Veth, pod: &Netns, i: u32) -> Value {
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(i), IF, &[])
        .ok();
    conf
}

// ---------------------------------------------------------------- case 10: flags, group, txqlen

#[test]
fn flags_group_and_txqueuelen_set_in_the_pod_do_not_come_home() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let before = details(None, &nic.name);
    let conf = add(&rig, &nic, &pod, 0);
    in_pod(
        &pod,
        &[
            "link",
            "set",
            IF,
            "promisc",
            "on",
            "allmulticast",
            "on",
            "arp",
            "off",
            "multicast",
            "off",
            "dynamic",
            "on",
            "trailers",
            "off",
            "group",
            "7",
            "txqueuelen",
            "42",
        ],
    );
    let changed = details(Some(&pod.name), IF);
    assert_ne!(
        flippable_flags(&changed),
        flippable_flags(&before),
        "precondition: the pod changed the flags"
    );
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    let after = details(None, &nic.name);
    assert_eq!(
        flippable_flags(&after),
        flippable_flags(&before),
        "flags\n{del}"
    );
    assert_eq!(after["group"], before["group"], "group\n{del}");
    assert_eq!(after["txqlen"], before["txqlen"], "txqueuelen\n{del}");
    assert!(
        after["promiscuity"].as_u64().unwrap_or(0) == before["promiscuity"].as_u64().unwrap_or(0),
        "promiscuity count {} (was {})\n{del}",
        after["promiscuity"],
        before["promiscuity"]
    );
    rig.assert_state_empty(&del);
}

/// The host's own settings (not the defaults) are what comes back: a NIC handed over in
/// promiscuous mode, in group 3, with a queue of 77, returns so even after the pod cleared them.
#[test]
fn the_nodes_own_flags_group_and_txqueuelen_are_restored() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    ip(&[
        "link",
        "set",
        &nic.name,
        "promisc",
        "on",
        "arp",
        "off",
        "group",
        "3",
        "txqueuelen",
        "77",
    ]);
    let before = details(None, &nic.name);
    let conf = add(&rig, &nic, &pod, 0);
    in_pod(
        &pod,
        &[
            "link",
            "set",
            IF,
            "promisc",
            "off",
            "arp",
            "on",
            "group",
            "0",
            "txqueuelen",
            "1000",
        ],
    );
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    let after = details(None, &nic.name);
    assert_eq!(
        flippable_flags(&after),
        flippable_flags(&before),
        "flags\n{del}"
    );
    assert_eq!(after["group"], before["group"], "group\n{del}");
    assert_eq!(after["txqlen"], json!(77), "txqueuelen\n{del}");
}

// ---------------------------------------------------------------- case 8: upper devices

#[test]
fn links_the_pod_stacked_on_its_nic_are_deleted_before_it_leaves() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let next = rig.netns(1);
    let conf = add(&rig, &nic, &pod, 0);
    // What a pod with NET_ADMIN may stack on its NIC to keep a foot on the wire. VLAN and
    // ipvlan need their kernel modules: used where the kernel has them (the VM has).
    in_pod(&pod, &["link", "add", "mv0", "link", IF, "type", "macvlan"]);
    in_pod(
        &pod,
        &["link", "add", "mvt0", "link", IF, "type", "macvtap"],
    );
    // Two storeys up: on the macvlan.
    in_pod(
        &pod,
        &["link", "add", "mv1", "link", "mv0", "type", "macvlan"],
    );
    let optional: [&[&str]; 3] = [
        &[
            "link", "add", "link", IF, "name", "vl5", "type", "vlan", "id", "5",
        ],
        &["link", "add", "ipv0", "link", IF, "type", "ipvlan"],
        &[
            "link", "add", "link", "mv0", "name", "vl6", "type", "vlan", "id", "6",
        ],
    ];
    for args in optional {
        let out = ip_in(Some(&pod.name), args);
        if !out.status.success() {
            eprintln!(
                "this kernel cannot `ip {}` ({}); not part of this run",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    // A veth of the pod's own is not on the NIC: it stays.
    in_pod(
        &pod,
        &[
            "link", "add", "own0", "type", "veth", "peer", "name", "own1",
        ],
    );
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    let mut left = pod_links(&pod);
    left.sort();
    assert_eq!(
        left,
        vec!["own0".to_string(), "own1".to_string()],
        "links on the NIC survived DEL in the old pod\n{del}"
    );
    rig.assert_state_empty(&del);
    // The next pod gets the NIC, and the old one has nothing on that wire.
    add(&rig, &nic, &next, 1);
    assert!(link(Some(&next.name), IF).is_some());
    let mut left = pod_links(&pod);
    left.sort();
    assert_eq!(left, vec!["own0".to_string(), "own1".to_string()]);
    rig.call("DEL", &conf, &next.path(), &rig.cid(1), IF, &[])
        .ok();
    nic.assert_home(Some(&next), &"second DEL");
}

// ---------------------------------------------------------------- case 9: altnames

#[test]
fn altnames_come_home_as_the_node_had_them() {
    let rig = Rig::new();
    let a = rig.nic(0);
    let b = rig.nic(1);
    let (pod_a, pod_b, pod_c) = (rig.netns(0), rig.netns(1), rig.netns(2));
    let own = format!("rhalt{}x{}", tag(), rig.n);
    let extra = format!("rhext{}x{}", tag(), rig.n);
    ip(&["link", "property", "add", "dev", &a.name, "altname", &own]);
    let conf_a = add(&rig, &a, &pod_a, 0);
    let conf_b = add(&rig, &b, &pod_b, 1);
    // Pod A drops the node's altname and adds two of its own: one is NIC B's name.
    in_pod(
        &pod_a,
        &["link", "property", "del", "dev", IF, "altname", &own],
    );
    in_pod(
        &pod_a,
        &["link", "property", "add", "dev", IF, "altname", &b.name],
    );
    in_pod(
        &pod_a,
        &["link", "property", "add", "dev", IF, "altname", &extra],
    );
    let del = rig.call("DEL", &conf_a, &pod_a.path(), &rig.cid(0), IF, &[]);
    del.ok();
    a.assert_home(Some(&pod_a), &del);
    assert_eq!(
        altnames(None, &a.name),
        vec![own.clone()],
        "altnames of {}\n{del}",
        a.name
    );
    // NIC B comes home under its own name, which no altname of A holds.
    let del = rig.call("DEL", &conf_b, &pod_b.path(), &rig.cid(1), IF, &[]);
    del.ok();
    b.assert_home(Some(&pod_b), &del);
    // B's name selects B.
    let b_index = link(None, &b.name).unwrap().index;
    add(&rig, &b, &pod_c, 2);
    assert!(
        link(None, &a.name).is_some(),
        "{} was taken for {}",
        a.name,
        b.name
    );
    assert_eq!(
        link(Some(&pod_c.name), IF).map(|l| l.index),
        Some(b_index),
        "{} selected another NIC",
        b.name
    );
    rig.call("DEL", &conf_b, &pod_c.path(), &rig.cid(2), IF, &[])
        .ok();
    b.assert_home(Some(&pod_c), &"last DEL");
}

// ---------------------------------------------------------------- case 12: the host's netns

#[test]
fn del_naming_the_hosts_own_netns_is_refused_and_keeps_the_state() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let result = rig
        .call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = result;
    // The plugin's own netns, and this test's (the host's; /proc/1 may be closed to us).
    let mine = format!("/proc/{}/ns/net", std::process::id());
    for host in ["/proc/self/ns/net", mine.as_str()] {
        let del = rig.call("DEL", &conf, host, &rig.cid(0), IF, &[]);
        let e = del.err_code(4);
        assert!(
            e["msg"].as_str().unwrap_or("").contains("host"),
            "the message says why\n{del}"
        );
        assert!(
            !rig.state_files().is_empty(),
            "state forgotten on a refused DEL\n{del}"
        );
        assert!(
            link(Some(&pod.name), IF).is_some(),
            "the NIC left the pod\n{del}"
        );
        let check = rig.call("CHECK", &check_conf, host, &rig.cid(0), IF, &[]);
        check.err_code(4);
    }
    rig.call("CHECK", &check_conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// The netns path ADD was given is a symlink the runtime (or whoever controls it) retargets
/// to another pod's namespace before DEL: DEL and CHECK act only on the namespace ADD
/// attached in. Refused with 4 naming both, the state and the NIC kept; nothing in the other
/// pod touched; once the path names ADD's namespace again, DEL brings the NIC home. (The old
/// plugin's DEL said "nothing to return", forgot the record and left the NIC in the pod.)
#[test]
fn del_and_check_act_only_on_the_netns_add_attached_in_even_if_the_path_now_names_another() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let other = rig.netns(1);
    // The other pod has a link of its own at the NIC's name, the one DEL would act on.
    in_pod(
        &other,
        &[
            "link",
            "add",
            IF,
            "type",
            "veth",
            "peer",
            "name",
            "otherpeer",
        ],
    );
    let link_path = rig.dir.path().join("netns-link");
    std::os::unix::fs::symlink(pod.path(), &link_path).unwrap();
    let path = link_path.display().to_string();
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let result = rig.call("ADD", &conf, &path, &rig.cid(0), IF, &[]).ok();
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = result;
    std::fs::remove_file(&link_path).unwrap();
    std::os::unix::fs::symlink(other.path(), &link_path).unwrap();
    let del = rig.call("DEL", &conf, &path, &rig.cid(0), IF, &[]);
    let e = del.err_code(4);
    let msg = e["msg"].as_str().unwrap_or("");
    assert!(
        msg.contains("where ADD attached the NIC") && msg.contains(&pod.path()),
        "the message says it is another namespace and where ADD's is\n{del}"
    );
    assert!(!rig.state_files().is_empty(), "state forgotten\n{del}");
    assert!(
        link(Some(&pod.name), IF).is_some(),
        "the NIC left the pod\n{del}"
    );
    assert!(
        link(Some(&other.name), IF).is_some(),
        "the other pod's link was touched\n{del}"
    );
    // With an empty CNI_NETNS DEL takes the recorded path: the same refusal.
    rig.call("DEL", &conf, "", &rig.cid(0), IF, &[]).err_code(4);
    let check = rig.call("CHECK", &check_conf, &path, &rig.cid(0), IF, &[]);
    check.err_code(4);
    std::fs::remove_file(&link_path).unwrap();
    std::os::unix::fs::symlink(pod.path(), &link_path).unwrap();
    rig.call("CHECK", &check_conf, &path, &rig.cid(0), IF, &[])
        .ok();
    let del = rig.call("DEL", &conf, &path, &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    rig.assert_state_empty(&del);
}

// ---------------------------------------------------------------- case 13: long container IDs

/// A container ID of `len` bytes the spec's rule allows.
fn long_cid(rig: &Rig, len: usize) -> String {
    let mut c = rig.cid(0);
    while c.len() < len {
        c.push('a');
    }
    c
}

#[test]
fn a_container_id_of_any_length_is_a_valid_del_of_nothing() {
    let rig = Rig::new();
    let pod = rig.netns(0);
    let conf = rig.conf("1.0.0", json!({"device": "rhd-no-such-nic"}));
    for len in [242, 243, 255, 300, 4000] {
        let cid = long_cid(&rig, len);
        for netns in [pod.path(), String::new()] {
            let del = rig.call("DEL", &conf, &netns, &cid, IF, &[]);
            assert!(
                del.success(),
                "DEL of nothing, container ID of {len} bytes\n{del}"
            );
        }
    }
    rig.assert_state_empty(&"DELs of nothing");
}

#[test]
fn a_long_container_id_attaches_and_detaches() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let cid = long_cid(&rig, 300);
    rig.call("ADD", &conf, &pod.path(), &cid, IF, &[]).ok();
    assert!(link(Some(&pod.name), IF).is_some());
    // A second ADD for the same attachment still finds the first one's record.
    let again = rig.call("ADD", &conf, &pod.path(), &cid, IF, &[]);
    again.err_code(102);
    let del = rig.call("DEL", &conf, &pod.path(), &cid, IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
    // ADD still validates the ID.
    let bad = format!("{cid}/x");
    rig.call("ADD", &conf, &pod.path(), &bad, IF, &[])
        .err_code(4);
}

/// A pod's netns died without DEL, and the kernel gave its NIC A back to the host with an
/// altname the pod added: NIC B's name. B's name must still select B (busy while attached,
/// never A), and B's DEL must bring B home under its name (freeing it from the lost NIC).
#[test]
fn a_lost_nic_bearing_another_nics_name_as_altname_neither_blocks_nor_impersonates_it() {
    let _serial = lost_nic_lock();
    let rig = Rig::new();
    let a = rig.nic(0);
    let b = rig.nic(1);
    let (pod_a, pod_b) = (rig.netns(0), rig.netns(1));
    // The name A bears on the host once lost: unique on the shared host.
    let if_a = format!("lst{}x{}", tag(), rig.n);
    let conf_a = rig.conf("1.0.0", json!({"device": a.name}));
    rig.call("ADD", &conf_a, &pod_a.path(), &rig.cid(0), &if_a, &[])
        .ok();
    let conf_b = add(&rig, &b, &pod_b, 1);
    in_pod(
        &pod_a,
        &["link", "property", "add", "dev", &if_a, "altname", &b.name],
    );
    kill_netns_refunding(&pod_a, &if_a);
    assert!(
        altnames(None, &if_a).contains(&b.name),
        "precondition: lost A carries B's name"
    );
    // B's name names B, which is attached: busy, and A stays where it is.
    let third = rig.netns(2);
    let conf_by_b = rig.conf("1.0.0", json!({"device": b.name}));
    let add_b = rig.call("ADD", &conf_by_b, &third.path(), &rig.cid(2), IF, &[]);
    add_b.err_code(102);
    assert!(
        link(Some(&third.name), IF).is_none(),
        "ADD took a NIC by the altname its pod gave it\n{add_b}"
    );
    let del = rig.call("DEL", &conf_b, &pod_b.path(), &rig.cid(1), IF, &[]);
    del.ok();
    b.assert_home(Some(&pod_b), &del);
    // A's own DEL restores it (if B's DEL did not already).
    let del = rig.call("DEL", &conf_a, &pod_a.path(), &rig.cid(0), &if_a, &[]);
    del.ok();
    a.assert_home(None, &del);
    assert!(altnames(None, &a.name).is_empty(), "{del}");
    rig.assert_state_empty(&del);
}

/// What DEL cannot put back fails it, naming what, with the NIC still in the pod and the
/// state kept; the retry, once the obstacle is gone, finishes.
#[test]
fn del_that_cannot_restore_a_setting_names_it_and_keeps_the_state() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let own = format!("rhalt{}x{}", tag(), rig.n);
    ip(&["link", "property", "add", "dev", &nic.name, "altname", &own]);
    let conf = add(&rig, &nic, &pod, 0);
    // The pod takes the NIC's altname away and gives it to a link of its own.
    in_pod(
        &pod,
        &["link", "property", "del", "dev", IF, "altname", &own],
    );
    in_pod(
        &pod,
        &["link", "add", &own, "type", "veth", "peer", "name", "own1"],
    );
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    let e = del.err();
    let m = e["msg"].as_str().unwrap_or("");
    assert!(
        m.contains(&own) && m.contains("altname") && m.contains("retried"),
        "the error names the altname and says DEL can be retried\n{del}"
    );
    assert!(link(Some(&pod.name), IF).is_some(), "the NIC left\n{del}");
    assert!(!rig.state_files().is_empty(), "state forgotten\n{del}");
    in_pod(&pod, &["link", "del", &own]);
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    assert_eq!(altnames(None, &nic.name), vec![own.clone()], "{del}");
    rig.assert_state_empty(&del);
}

// ---------------------------------------------------------------- case 7: a netns without a path

/// The runtime removed the pod's netns path, but a process still in the netns keeps it (and
/// the NIC, carrying the pod's address) alive. DEL must not say "nothing to return": it fails
/// retryably naming the holder, keeping the IP and the state; once the holder is gone, DEL
/// finishes.
#[test]
fn del_whose_netns_path_was_unmounted_while_another_mount_keeps_the_netns_keeps_the_ip_and_the_state()
 {
    // The runtime's path is unmounted (an empty file is left) while the namespace lives on
    // under another /run/netns name: DEL must know it by the identity ADD recorded, not
    // believe it gone (second attack pass, X2). A path that is a file with content was never a
    // netns: 4, nothing forgotten (X3).
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.host_local_conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    let keep = format!("{}-kept", pod.path());
    let sh = |cmd: &str| {
        let st = std::process::Command::new("sh")
            .args(["-c", cmd])
            .status()
            .expect("sh");
        assert!(st.success(), "{cmd}");
    };
    sh(&format!(
        "touch {keep} && mount --bind {} {keep} && umount {}",
        pod.path(),
        pod.path()
    ));
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    let e = del.err_code(11);
    let m = e["msg"].as_str().unwrap_or("");
    assert!(
        m.contains(&keep),
        "names where the namespace lives on\n{del}"
    );
    assert_eq!(
        rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(),
        1,
        "{del}"
    );
    assert_eq!(rig.state_files().len(), 1, "{del}");
    sh(&format!("echo not-a-netns > {}", pod.path()));
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.err_code(4);
    assert_eq!(rig.state_files().len(), 1, "{del}");
    // The path back: DEL finishes.
    sh(&format!(
        ": > {p} && mount --bind {keep} {p} && umount {keep} && rm {keep}",
        p = pod.path()
    ));
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    assert!(del.success(), "{del}");
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn del_whose_netns_path_is_gone_while_the_netns_lives_on_keeps_the_ip_and_the_state() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.host_local_conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
        .ok();
    // A process in the pod holds the netns; then the path goes.
    let mut holder = std::process::Command::new("ip")
        .args(["netns", "exec", &pod.name, "sleep", "600"])
        .spawn()
        .expect("start a process in the pod");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let pod_ns = std::fs::metadata(pod.path()).unwrap();
    let in_pod_ns = |pid: u32| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|m| m.ino() == pod_ns.ino() && m.dev() == pod_ns.dev())
    };
    while !in_pod_ns(holder.id()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never entered the pod"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    pod.delete();
    assert!(!std::path::Path::new(&pod.path()).exists());
    // inspect says where the NIC is, and who keeps it there.
    let report = rig.inspect_json(None);
    let row = report["nics"]
        .as_array()
        .and_then(|a| a.iter().find(|n| n["name"] == nic.name.as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("{} missing from inspect: {report}", nic.name));
    let notes = row["notes"].to_string();
    assert!(
        notes.contains("is gone") && notes.contains(&format!("pid {}", holder.id())),
        "inspect names the orphaned netns and its holder: {row}"
    );
    for netns in [pod.path(), String::new()] {
        let del = rig.call("DEL", &conf, &netns, &rig.cid(0), IF, &[]);
        let e = del.err_code(11);
        let m = e["msg"].as_str().unwrap_or("");
        assert!(
            m.contains(&format!("pid {}", holder.id())) && m.contains(&nic.name),
            "the error names the NIC and the holder\n{del}"
        );
        assert_eq!(
            rig.allocations_of(&rig.net_name(), &rig.cid(0)).len(),
            1,
            "the IP was released while the NIC still carries it\n{del}"
        );
        assert!(!rig.state_files().is_empty(), "state forgotten\n{del}");
    }
    let _ = holder.kill();
    let _ = holder.wait();
    // The netns dies with its last process (a veth with it); DEL finishes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
        if del.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "DEL still fails after the holder exited\n{del}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(rig.allocations_of(&rig.net_name(), &rig.cid(0)).is_empty());
    rig.assert_state_empty(&"after the holder exited");
}

// ---------------------------------------------------------------- case 11: names that are bytes

/// A name that is not UTF-8, as `ip` takes it: the kernel allows any bytes but `/`, `:` and
/// whitespace.
const NOT_UTF8: &[u8] = b"pod\xff\xfe1";

fn not_utf8() -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(NOT_UTF8.to_vec())
}

/// `ip ARGS` with OS-string arguments (a name that is bytes), panicking on failure.
fn ip_os(args: &[&std::ffi::OsStr]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pod renames its interface to a name that is not UTF-8 (which the netlink crates cannot
/// decode, so the link vanished from the plugin's view): DEL still sees it and brings it home.
#[test]
fn a_nic_renamed_in_the_pod_to_a_name_that_is_not_utf8_still_comes_home() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = add(&rig, &nic, &pod, 0);
    in_pod(&pod, &["link", "set", IF, "down"]);
    let os = |s: &str| std::ffi::OsString::from(s);
    ip_os(&[
        &os("-n"),
        &os(&pod.name),
        &os("link"),
        &os("set"),
        &os(IF),
        &os("name"),
        &not_utf8(),
    ]);
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// A netns standing in for the node's own, for the tests that leave a link with a name that is
/// not UTF-8 on "the host": on the real host it would break `ip -j` (which every test here
/// reads links with) for every test running next to them. The plugin runs inside it.
struct Node {
    ns: Netns,
    nic: String,
}

impl Node {
    fn new(rig: &Rig) -> Node {
        let ns = Netns::new(&format!("rhd-node-{}-{}", std::process::id(), rig.n));
        let nic = rig.nic_name(0);
        ip(&[
            "-n",
            &ns.name,
            "link",
            "add",
            &nic,
            "mtu",
            &ORIG_MTU.to_string(),
            "type",
            "veth",
            "peer",
            "name",
            &rig.peer_name(0),
        ]);
        Node { ns, nic }
    }

    /// The plugin, called as `rig.call` does, but inside this node's netns.
    fn call(&self, rig: &Rig, cmd: &str, conf: &Value, netns: &str, cid: &str) -> RunOut {
        let version = conf["cniVersion"].as_str().unwrap_or("1.0.0");
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.ns.name])
            .arg(plugin())
            .env("CNI_COMMAND", cmd)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", netns)
            .env("CNI_IFNAME", IF)
            .env("CNI_PATH", rig.cni_path(version))
            .env(NODE_CONFIG_ENV, rig.node_config());
        let out = output_with_stdin(&mut c, &serde_json::to_vec(conf).unwrap());
        RunOut {
            what: format!(
                "{cmd} {cid} in node {} for {netns:?}\n  conf {conf}",
                self.ns.name
            ),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            trace: Vec::new(),
        }
    }

    /// The NIC is in the node under its own name with its MTU (and `ip -j` can read the node).
    fn assert_home(&self, ctx: &dyn std::fmt::Display) {
        let l = link(Some(&self.ns.name), &self.nic);
        assert!(
            l.as_ref().is_some_and(|l| l.mtu == ORIG_MTU),
            "NIC {} not home in the node: {l:?}\n{ctx}",
            self.nic
        );
    }
}

/// Attach the node's NIC to `pod` (as container 0), let the pod rename it to a name that is
/// not UTF-8, then let the pod's netns die without DEL: the NIC comes back to the node under
/// that name, still tagged (what the kernel does for a physical NIC; see kill_netns_refunding).
fn lose_with_an_unreadable_name(rig: &Rig, node: &Node, pod: &Netns) -> Value {
    let conf = rig.conf("1.0.0", json!({"device": node.nic}));
    node.call(rig, "ADD", &conf, &pod.path(), &rig.cid(0)).ok();
    let os = |s: &str| std::ffi::OsString::from(s);
    in_pod(pod, &["link", "set", IF, "down"]);
    ip_os(&[
        &os("-n"),
        &os(&pod.name),
        &os("link"),
        &os("set"),
        &os(IF),
        &os("name"),
        &not_utf8(),
    ]);
    ip_os(&[
        &os("-n"),
        &os(&pod.name),
        &os("link"),
        &os("set"),
        &os("dev"),
        &not_utf8(),
        &os("netns"),
        &os(&node.ns.name),
    ]);
    pod.delete();
    assert!(
        link(Some(&node.ns.name), &node.nic).is_none(),
        "precondition: lost"
    );
    conf
}

/// A lost NIC with a name that is not UTF-8: the next ADD that wants it sees and restores it,
/// and the old attachment's DEL finds nothing left to do.
#[test]
fn a_lost_nic_with_a_name_that_is_not_utf8_is_found_by_add() {
    let rig = Rig::new();
    let node = Node::new(&rig);
    let (pod, next) = (rig.netns(0), rig.netns(1));
    let conf = lose_with_an_unreadable_name(&rig, &node, &pod);
    // inspect (in the node) lists the lost NIC by its escaped name.
    let report = rig.inspect_json(Some(&node.ns));
    assert!(
        report["nics"].as_array().is_some_and(|a| a.iter().any(|n| {
            n["name"] == "pod\\xff\\xfe1" && n["notes"].to_string().contains("not UTF-8")
        })),
        "inspect lists the lost NIC: {report}"
    );
    node.call(&rig, "ADD", &conf, &next.path(), &rig.cid(1))
        .ok();
    assert!(link(Some(&next.name), IF).is_some());
    let del = node.call(&rig, "DEL", &conf, &next.path(), &rig.cid(1));
    del.ok();
    node.assert_home(&del);
    let del = node.call(&rig, "DEL", &conf, &pod.path(), &rig.cid(0));
    del.ok();
    node.assert_home(&del);
    rig.assert_state_empty(&del);
}

/// ... by STATUS (which restores lost NICs), by GC, and by the old attachment's own DEL.
#[test]
fn a_lost_nic_with_a_name_that_is_not_utf8_is_found_by_status_gc_and_del() {
    let rig = Rig::new();
    let node = Node::new(&rig);
    for verb in ["STATUS", "GC", "DEL"] {
        let pod = rig.netns(0);
        let mut conf = lose_with_an_unreadable_name(&rig, &node, &pod);
        conf["cniVersion"] = json!("1.1.0");
        conf["cni.dev/valid-attachments"] = json!([]);
        let out = match verb {
            "DEL" => node.call(&rig, "DEL", &conf, &pod.path(), &rig.cid(0)),
            _ => node.call(&rig, verb, &conf, "", ""),
        };
        out.ok();
        node.assert_home(&out);
        node.call(&rig, "DEL", &conf, &pod.path(), &rig.cid(0)).ok();
        rig.assert_state_empty(&out);
    }
}
