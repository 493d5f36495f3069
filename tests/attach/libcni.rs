//! The plugin driven by a real CNI client: libcni (Debian's 1.1.2) through
//! tests/libcni-driver, the way containerd/CRI-O/Multus call it. Veth pairs stand in for
//! host NICs; each test has its own netns, stateDir, host-local dataDir and libcni cache.
//! Needs root and `go` (see crates/test-support/src/lib.rs).

use test_support as common;

use common::*;
use serde_json::{Value, json};

const IF: &str = "net1";

fn has_version_field(result: &Value) -> Vec<bool> {
    result["ips"]
        .as_array()
        .map(|a| a.iter().map(|ip| ip.get("version").is_some()).collect())
        .unwrap_or_default()
}

/// Index of our interface in result.interfaces (by name and sandbox).
fn our_iface(result: &Value, sandbox: &str, ctx: &RunOut) -> usize {
    let ifaces = result["interfaces"]
        .as_array()
        .unwrap_or_else(|| panic!("result has no interfaces[]\n{ctx}"));
    ifaces
        .iter()
        .position(|i| i["name"] == IF && i["sandbox"] == sandbox)
        .unwrap_or_else(|| {
            panic!("result.interfaces has no {{name: {IF}, sandbox: {sandbox}}}\n{ctx}")
        })
}

/// ADD (device + static IPAM + mtu 1400 + dns) -> CHECK (0.4.0+) -> DEL -> DEL, asserting the
/// pod, the host, the result in the config's version, and the stateDir.
fn full_cycle(version: &str) {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let o = rig.octet();
    let mut conf = rig.conf(version, json!({"device": nic.name, "mtu": 1400}));
    conf["dns"] = json!({"nameservers": [format!("10.77.{o}.53")], "domain": "example.test",
                          "search": ["example.test"]});
    let file = rig.write("net.conf", &conf);
    // what containerd/CRI-O put in CNI_ARGS
    let cni_args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-{};K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=1234",
        rig.n
    );
    let k8s: &[&str] = &["-args", &cni_args];

    // ---- ADD
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, k8s);
    let result = add.ok();

    // host lost the NIC
    assert!(
        link(None, &nic.name).is_none() && nic.on_host().is_none(),
        "NIC still on the host after ADD\n{add}"
    );
    // pod has it as CNI_IFNAME with its MAC, MTU 1400, UP, the address
    let l = link(Some(&pod.name), IF)
        .unwrap_or_else(|| panic!("pod has no {IF}:\n{}\n{add}", dump(Some(&pod.name))));
    assert_eq!(l.mac, nic.mac, "MAC in pod\n{add}");
    assert_eq!(l.mtu, 1400, "MTU in pod\n{add}");
    assert!(l.up, "{IF} not UP in pod\n{add}");
    let addr = format!("10.77.{o}.2/24");
    assert!(
        l.addrs.contains(&addr),
        "pod {IF} lacks {addr}: {l:?}\n{add}"
    );
    // the gateway-less IPAM route goes via the IPAM gateway
    let gw = format!("10.77.{o}.1");
    let rts = routes(Some(&pod.name));
    assert!(
        rts.iter()
            .any(|r| r["dst"] == "10.78.0.0/16" && r["gateway"] == gw.as_str() && r["dev"] == IF),
        "no route 10.78.0.0/16 via {gw} dev {IF} in pod: {rts:?}\n{add}"
    );

    // result, as the runtime sees it (libcni-parsed for <= 1.0.0, raw for 1.1.0)
    assert_eq!(result["cniVersion"], version, "result cniVersion\n{add}");
    let i = our_iface(&result, &pod.path(), &add);
    assert!(
        result["interfaces"][i]["mac"]
            .as_str()
            .is_some_and(|m| m.eq_ignore_ascii_case(&nic.mac)),
        "result interface mac\n{add}"
    );
    let ips = result["ips"].as_array().cloned().unwrap_or_default();
    let ours: Vec<&Value> = ips.iter().filter(|ip| ip["address"] == addr).collect();
    assert_eq!(ours.len(), 1, "result ips[] must hold {addr} once\n{add}");
    assert_eq!(ours[0]["gateway"], gw.as_str(), "ip gateway\n{add}");
    assert_eq!(
        ours[0]["interface"].as_u64(),
        Some(i as u64),
        "ips[].interface must index our interface\n{add}"
    );
    assert!(
        result["routes"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["dst"] == "10.78.0.0/16")),
        "result routes lack 10.78.0.0/16\n{add}"
    );
    assert!(
        result["dns"]["nameservers"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n == &json!(format!("10.77.{o}.53")))),
        "dns not passed through\n{add}"
    );

    // the plugin's own stdout, before libcni re-marshals it
    let raw = add.plugin_stdout("ADD");
    assert_eq!(raw.len(), 1, "one ADD exec of our plugin\n{add}");
    let raw = &raw[0];
    assert_eq!(raw["cniVersion"], version, "raw result cniVersion\n{add}");
    let want_version_field = !version_ge(version, "1.0.0");
    for (what, r) in [("plugin stdout", raw), ("libcni result", &result)] {
        let v = has_version_field(r);
        assert!(!v.is_empty(), "{what}: no ips\n{add}");
        assert!(
            v.iter().all(|&b| b == want_version_field),
            "{what}: ips[].version must be {} for {version}\n{add}",
            if want_version_field {
                "present"
            } else {
                "absent"
            }
        );
    }
    if version == "1.1.0" {
        let ri = our_iface(raw, &pod.path(), &add);
        assert_eq!(
            raw["interfaces"][ri]["mtu"].as_u64(),
            Some(1400),
            "1.1.0 result interface must carry mtu\n{add}"
        );
    } else {
        assert!(
            raw["interfaces"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i.get("mtu").is_none()),
            "interface mtu is a 1.1.0 field; must not appear in {version}\n{add}"
        );
    }

    // ---- CHECK
    if version_ge(version, "0.4.0") {
        let chk = rig.drive("check", &file, &pod.path(), &cid, IF, k8s);
        chk.ok();
    }

    // ---- DEL
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, k8s);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    assert!(
        link(Some(&pod.name), IF).is_none(),
        "pod still has {IF}\n{del}"
    );
    rig.assert_state_empty(&del);

    // ---- repeated DEL
    let del2 = rig.drive("del", &file, &pod.path(), &cid, IF, k8s);
    del2.ok();
    rig.assert_detached(&nic, Some(&pod), &del2);
}

#[test]
fn v0_3_0_add_check_del() {
    full_cycle("0.3.0");
}
#[test]
fn v0_3_1_add_check_del() {
    full_cycle("0.3.1");
}
#[test]
fn v0_4_0_add_check_del() {
    full_cycle("0.4.0");
}
#[test]
fn v1_0_0_add_check_del() {
    full_cycle("1.0.0");
}
#[test]
fn v1_1_0_add_check_del() {
    full_cycle("1.1.0");
}

// ------------------------------------------------------------------ selectors

/// ADD with `selector`, assert the NIC moved, DEL, assert it is home.
fn select_ok(selector: impl FnOnce(&Veth) -> Value) {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let file = rig.write("net.conf", &rig.conf("1.0.0", selector(&nic)));
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    add.ok();
    let l = link(Some(&pod.name), IF).unwrap_or_else(|| panic!("pod has no {IF}\n{add}"));
    assert_eq!(l.mac, nic.mac, "wrong NIC moved\n{add}");
    assert!(nic.on_host().is_none(), "NIC still on host\n{add}");
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// ADD with `conf` must fail with `code` and leave everything as it was.
fn select_fails(
    code: i64,
    extra: &[&str],
    conf: impl FnOnce(&Rig, &Veth) -> Value,
) -> (Rig, RunOut) {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let file = rig.write("net.conf", &conf(&rig, &nic));
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, extra);
    add.err_code(code);
    nic.assert_home(Some(&pod), &add);
    assert!(
        link(Some(&pod.name), IF).is_none(),
        "pod got {IF} on a failed ADD\n{add}"
    );
    rig.assert_state_empty(&add);
    drop(pod);
    drop(nic);
    (rig, add)
}

#[test]
fn select_by_hwaddr_any_case() {
    select_ok(|nic| json!({"hwaddr": nic.mac.to_uppercase()}));
}

#[test]
fn select_by_hwaddr_lower_case() {
    select_ok(|nic| json!({"hwaddr": nic.mac}));
}

#[test]
fn select_by_kernelpath() {
    select_ok(|nic| json!({"kernelpath": format!("/sys/devices/virtual/net/{}", nic.name)}));
}

// Veths have no PCI address: the PCI-based selectors must report "not found" (100) here;
// their positive cases run in the VM.
const NO_SUCH_PCI: &str = "0000:ff:1f.7";

#[test]
fn select_by_pci_bus_id_not_found() {
    select_fails(100, &[], |rig, _| {
        rig.conf("1.0.0", json!({"pciBusID": NO_SUCH_PCI}))
    });
}

#[test]
fn select_by_top_level_device_id_not_found() {
    select_fails(100, &[], |rig, _| {
        rig.conf("1.0.0", json!({"deviceID": NO_SUCH_PCI}))
    });
}

#[test]
fn select_by_runtime_config_device_id_capability_not_found() {
    let cap = format!("deviceID={NO_SUCH_PCI}");
    let (_rig, add) = select_fails(100, &["-cap", &cap], |rig, _| {
        let mut c = rig.conf("1.0.0", json!({}));
        c["capabilities"] = json!({"deviceID": true});
        c
    });
    // libcni put it in runtimeConfig (proves the capability path was exercised)
    let stdin = add.plugin_stdin("ADD");
    assert_eq!(
        stdin
            .first()
            .map(|s| s["runtimeConfig"]["deviceID"].clone()),
        Some(json!(NO_SUCH_PCI)),
        "libcni did not inject runtimeConfig.deviceID\n{add}"
    );
}

#[test]
fn select_auxiliary_device_id_not_found() {
    select_fails(100, &[], |rig, _| {
        rig.conf("1.0.0", json!({"deviceID": "mlx5_core.sf.4242"}))
    });
}

/// Multus puts the same deviceID at top level and in runtimeConfig: one selector, not two.
#[test]
fn device_id_top_level_and_capability_agreeing_is_one_selector() {
    let cap = format!("deviceID={NO_SUCH_PCI}");
    select_fails(100, &["-cap", &cap], |rig, _| {
        let mut c = rig.conf("1.0.0", json!({"deviceID": NO_SUCH_PCI}));
        c["capabilities"] = json!({"deviceID": true});
        c
    });
}

#[test]
fn device_id_top_level_and_capability_disagreeing_is_101() {
    select_fails(101, &["-cap", "deviceID=0000:ff:1f.6"], |rig, _| {
        let mut c = rig.conf("1.0.0", json!({"deviceID": NO_SUCH_PCI}));
        c["capabilities"] = json!({"deviceID": true});
        c
    });
}

#[test]
fn two_selectors_are_ambiguous() {
    select_fails(101, &[], |rig, nic| {
        rig.conf("1.0.0", json!({"device": nic.name, "hwaddr": nic.mac}))
    });
}

#[test]
fn device_not_found() {
    select_fails(100, &[], |rig, _| {
        rig.conf("1.0.0", json!({"device": format!("rh{}nosuch", tag())}))
    });
}

// ------------------------------------------------------------------ IPAM and DEL edge cases

#[test]
fn host_local_ip_released_on_del() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let net = rig.net_name();
    let file = rig.write(
        "net.conf",
        &rig.host_local_conf("1.0.0", json!({"device": nic.name})),
    );
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let res = add.ok();
    let got = rig.allocations_of(&net, &cid);
    assert_eq!(
        got.len(),
        1,
        "host-local should hold one IP for {cid}: {got:?}\n{add}"
    );
    let ip = &got[0].0;
    let l = link(Some(&pod.name), IF).unwrap_or_else(|| panic!("no {IF} in pod\n{add}"));
    assert!(
        l.addrs.iter().any(|a| a.starts_with(&format!("{ip}/"))),
        "pod lacks the allocated {ip}: {l:?}\n{add}"
    );
    assert!(
        res["ips"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["address"] == format!("{ip}/24"))),
        "result lacks {ip}\n{add}"
    );
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    assert!(
        rig.allocations_of(&net, &cid).is_empty(),
        "IP not released: {:?}\n{del}",
        rig.allocations(&net)
    );
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn del_with_empty_netns_succeeds_and_releases_ip() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let net = rig.net_name();
    let file = rig.write(
        "net.conf",
        &rig.host_local_conf("1.0.0", json!({"device": nic.name})),
    );
    rig.drive("add", &file, &pod.path(), &cid, IF, &[]).ok();
    assert_eq!(rig.allocations_of(&net, &cid).len(), 1);
    let del = rig.drive("del", &file, "", &cid, IF, &[]);
    del.ok();
    assert!(
        rig.allocations_of(&net, &cid).is_empty(),
        "IP leaked after DEL with empty CNI_NETNS: {:?}\n{del}",
        rig.allocations(&net)
    );
    // and a later DEL with the netns still works and brings the NIC home
    let del2 = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del2.ok();
    rig.assert_detached(&nic, Some(&pod), &del2);
}

#[test]
fn del_after_netns_deleted_succeeds_and_releases_ip() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let net = rig.net_name();
    let file = rig.write(
        "net.conf",
        &rig.host_local_conf("1.0.0", json!({"device": nic.name})),
    );
    rig.drive("add", &file, &pod.path(), &cid, IF, &[]).ok();
    let path = pod.path();
    pod.delete(); // a veth dies with its netns; a physical NIC would return to init_net
    let del = rig.drive("del", &file, &path, &cid, IF, &[]);
    del.ok();
    assert!(
        rig.allocations_of(&net, &cid).is_empty(),
        "IP leaked after DEL with a vanished netns: {:?}\n{del}",
        rig.allocations(&net)
    );
    rig.assert_state_empty(&del);
    rig.drive("del", &file, &path, &cid, IF, &[]).ok();
}

#[test]
fn del_after_rename_in_pod_brings_nic_home() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let file = rig.write(
        "net.conf",
        &rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400})),
    );
    rig.drive("add", &file, &pod.path(), &cid, IF, &[]).ok();
    ip(&["-n", &pod.name, "link", "set", IF, "down"]);
    ip(&["-n", &pod.name, "link", "set", IF, "name", "other"]);
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
    assert!(
        link(Some(&pod.name), "other").is_none(),
        "renamed link still in pod\n{del}"
    );
    rig.assert_state_empty(&del);
}

#[test]
fn add_fails_when_ifname_exists_in_pod() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    // (no dummy module on every kernel: a veth pair inside the pod does as well)
    ip(&[
        "-n", &pod.name, "link", "add", IF, "type", "veth", "peer", "name", "net1peer",
    ]);
    let file = rig.write(
        "net.conf",
        &rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400})),
    );
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    add.err_code(103);
    nic.assert_home(Some(&pod), &add);
    assert!(
        link(Some(&pod.name), IF).is_some(),
        "the pod's own {IF} vanished\n{add}"
    );
    rig.assert_state_empty(&add);
}

#[test]
fn rollback_when_ipam_rejects_address() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400}));
    conf["ipam"]["addresses"][0]["address"] = json!("10.77.300.2/24");
    let file = rig.write("net.conf", &conf);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let e = add.err_code(105);
    assert!(
        e["msg"].as_str().is_some_and(|m| !m.is_empty()),
        "empty msg\n{add}"
    );
    assert!(
        e["details"].as_str().is_some_and(|d| !d.is_empty()),
        "105 must carry the IPAM plugin's error in details\n{add}"
    );
    nic.assert_home(Some(&pod), &add);
    assert!(link(Some(&pod.name), IF).is_none(), "pod kept {IF}\n{add}");
    rig.assert_state_empty(&add);
}

#[test]
fn rollback_when_ipam_plugin_missing() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400}));
    // Allowed by the node, so ADD gets as far as looking for it (after moving the NIC).
    rig.allow_ipam("rhd-no-such-ipam");
    conf["ipam"] = json!({"type": "rhd-no-such-ipam"});
    let file = rig.write("net.conf", &conf);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let e = add.err();
    let code = e["code"].as_i64().unwrap_or(0);
    assert!(
        code != 0 && code != 999,
        "want a documented plugin error code, got {code}\n{add}"
    );
    nic.assert_home(Some(&pod), &add);
    assert!(link(Some(&pod.name), IF).is_none(), "pod kept {IF}\n{add}");
    rig.assert_state_empty(&add);
}

/// CHECK is not a no-op: an address removed in the pod is a mismatch (106).
#[test]
fn check_detects_removed_address() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let o = rig.octet();
    let file = rig.write("net.conf", &rig.conf("1.0.0", json!({"device": nic.name})));
    rig.drive("add", &file, &pod.path(), &cid, IF, &[]).ok();
    rig.drive("check", &file, &pod.path(), &cid, IF, &[]).ok();
    ip(&[
        "-n",
        &pod.name,
        "addr",
        "del",
        &format!("10.77.{o}.2/24"),
        "dev",
        IF,
    ]);
    let chk = rig.drive("check", &file, &pod.path(), &cid, IF, &[]);
    chk.err_code(106);
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

// ------------------------------------------------------------------ chaining

#[test]
fn chain_loopback_then_ours() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let o = rig.octet();
    let mut ours = rig.conf("1.0.0", json!({"device": nic.name}));
    let obj = ours.as_object_mut().unwrap();
    obj.remove("cniVersion");
    obj.remove("name");
    let list = json!({"cniVersion": "1.0.0", "name": rig.net_name(),
                      "plugins": [{"type": "loopback"}, ours]});
    let file = rig.write("net.conflist", &list);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let res = add.ok();
    let ifaces = res["interfaces"].as_array().cloned().unwrap_or_default();
    let lo = ifaces
        .iter()
        .position(|i| i["name"] == "lo")
        .unwrap_or_else(|| panic!("loopback's lo dropped from prevResult\n{add}"));
    let me = our_iface(&res, &pod.path(), &add);
    let ips = res["ips"].as_array().cloned().unwrap_or_default();
    for ip in &ips {
        let idx = ip["interface"].as_u64().map(|x| x as usize);
        let a = ip["address"].as_str().unwrap_or("");
        if a.starts_with("127.") || a.starts_with("::1") {
            assert_eq!(idx, Some(lo), "lo's IP {a} must index lo\n{add}");
        } else if a == format!("10.77.{o}.2/24") {
            assert_eq!(idx, Some(me), "our IP must index our interface\n{add}");
        } else {
            panic!("unexpected ip {ip}\n{add}");
        }
    }
    assert!(
        ips.iter().any(|ip| ip["address"] == "127.0.0.1/8"),
        "loopback's 127.0.0.1/8 dropped\n{add}"
    );
    assert!(
        ips.iter()
            .any(|ip| ip["address"] == format!("10.77.{o}.2/24")),
        "our IP missing\n{add}"
    );
    // our plugin really got loopback's result as prevResult
    let stdin = add.plugin_stdin("ADD");
    assert!(
        stdin
            .first()
            .is_some_and(|s| s["prevResult"]["interfaces"][0]["name"] == "lo"),
        "no prevResult given to our plugin?\n{add}"
    );
    rig.drive("check", &file, &pod.path(), &cid, IF, &[]).ok();
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn chain_ours_then_tuning() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let new_mac = format!("02:7e:00:00:{:02x}:{:02x}", rig.n / 256 % 256, rig.n % 256);
    let mut ours = rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400}));
    let obj = ours.as_object_mut().unwrap();
    obj.remove("cniVersion");
    obj.remove("name");
    let tuning = json!({"type": "tuning", "mac": new_mac,
                        "sysctl": {format!("net.ipv4.conf.{IF}.arp_ignore"): "1"}});
    let list = json!({"cniVersion": "1.0.0", "name": rig.net_name(),
                      "plugins": [ours, tuning]});
    let file = rig.write("net.conflist", &list);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let res = add.ok();
    let l = link(Some(&pod.name), IF).unwrap_or_else(|| panic!("no {IF} in pod\n{add}"));
    assert_eq!(l.mac, new_mac, "tuning's mac not applied\n{add}");
    assert_eq!(l.mtu, 1400, "our mtu lost\n{add}");
    let sysctl = run(
        "ip",
        &[
            "netns",
            "exec",
            &pod.name,
            "cat",
            &format!("/proc/sys/net/ipv4/conf/{IF}/arp_ignore"),
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&sysctl.stdout).trim(),
        "1",
        "tuning's sysctl not applied\n{add}"
    );
    let me = our_iface(&res, &pod.path(), &add);
    assert_eq!(
        res["interfaces"][me]["mac"], new_mac,
        "tuning updates the mac in the result\n{add}"
    );
    let chk = rig.drive("check", &file, &pod.path(), &cid, IF, &[]);
    chk.ok();
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    // tuning's DEL restores the MAC it changed; we check name and MTU.
    let home = link(None, &nic.name).unwrap_or_else(|| {
        panic!(
            "NIC not home under {}: host has {:?}\n{del}",
            nic.name,
            links(None).iter().map(|l| &l.name).collect::<Vec<_>>()
        )
    });
    assert_eq!(home.mtu, ORIG_MTU, "original MTU not restored\n{del}");
    assert!(link(Some(&pod.name), IF).is_none(), "pod kept {IF}\n{del}");
    rig.assert_state_empty(&del);
}

#[test]
fn chain_v110_loopback_then_ours() {
    // 1.1.0 lists go through the driver's pkg/invoke path (prevResult as raw JSON), with
    // Debian's loopback behind the version shim.
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut ours = rig.conf("1.1.0", json!({"device": nic.name, "mtu": 1400}));
    let obj = ours.as_object_mut().unwrap();
    obj.remove("cniVersion");
    obj.remove("name");
    let list = json!({"cniVersion": "1.1.0", "name": rig.net_name(),
                      "plugins": [{"type": "loopback"}, ours]});
    let file = rig.write("net.conflist", &list);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let res = add.ok();
    assert_eq!(res["cniVersion"], "1.1.0", "result version\n{add}");
    assert!(
        res["interfaces"]
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["name"] == "lo")),
        "loopback's lo dropped from prevResult\n{add}"
    );
    let me = our_iface(&res, &pod.path(), &add);
    assert_eq!(res["interfaces"][me]["mtu"], 1400, "1.1.0 mtu\n{add}");
    rig.drive("check", &file, &pod.path(), &cid, IF, &[]).ok();
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

// ------------------------------------------------------------------ STATUS and GC (1.1.0)

#[test]
fn status_v110_succeeds() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    for ipam in [rig.static_ipam(), rig.host_local_ipam()] {
        let mut c = rig.conf("1.1.0", json!({"device": nic.name}));
        c["ipam"] = ipam;
        let file = rig.write("net.conf", &c);
        let st = rig.drive("status", &file, "", "", "", &[]);
        st.ok();
        assert_eq!(
            st.plugin_stdin("STATUS").len(),
            1,
            "our plugin was not called\n{st}"
        );
        nic.assert_home(None, &st);
    }
}

/// GC as libcni >= 1.2 sends it: both `cni.dev/valid-attachments` and the legacy
/// `cni.dev/attachments` (cni#1101) in the config.
#[test]
fn gc_v110_libcni_returns_stale_attachment_and_keeps_valid_one() {
    gc_cycle("both");
}

/// GC with the spec's key only.
#[test]
fn gc_v110_spec_key_returns_stale_attachment_and_keeps_valid_one() {
    gc_cycle("spec");
}

/// GC with only the misnamed key of the 1.1.0 spec text (cni#1101).
#[test]
fn gc_v110_legacy_key_returns_stale_attachment_and_keeps_valid_one() {
    gc_cycle("legacy");
}

fn gc_cycle(keys: &str) {
    let rig = Rig::new();
    let nic_a = rig.nic(0);
    let nic_b = rig.nic(1);
    let pod_a = rig.netns(0);
    let pod_b = rig.netns(1);
    let (cid_a, cid_b) = (rig.cid(0), rig.cid(1));
    let net = rig.net_name();
    let conf_a = rig.host_local_conf("1.1.0", json!({"device": nic_a.name, "mtu": 1400}));
    let conf_b = rig.host_local_conf("1.1.0", json!({"device": nic_b.name, "mtu": 1400}));
    let file_a = rig.write("a.conf", &conf_a);
    let file_b = rig.write("b.conf", &conf_b);
    rig.drive("add", &file_a, &pod_a.path(), &cid_a, IF, &[])
        .ok();
    rig.drive("add", &file_b, &pod_b.path(), &cid_b, IF, &[])
        .ok();
    assert_eq!(rig.allocations_of(&net, &cid_a).len(), 1);
    assert_eq!(rig.allocations_of(&net, &cid_b).len(), 1);

    // GC keeping only B
    let valid = format!("{cid_b}/{IF}");
    let gc = rig.drive(
        "gc",
        &file_a,
        "",
        "",
        "",
        &["-valid", &valid, "-gc-keys", keys],
    );
    gc.ok();
    nic_a.assert_home(Some(&pod_a), &gc);
    assert!(
        rig.allocations_of(&net, &cid_a).is_empty(),
        "GC did not release A's IP: {:?}\n{gc}",
        rig.allocations(&net)
    );
    let lb = link(Some(&pod_b.name), IF)
        .unwrap_or_else(|| panic!("GC took B's NIC although B is valid\n{gc}"));
    assert_eq!(lb.mac, nic_b.mac, "B's pod has a different NIC\n{gc}");
    assert_eq!(
        rig.allocations_of(&net, &cid_b).len(),
        1,
        "GC released B's IP although B is valid\n{gc}"
    );

    // GC again: nothing more to do
    rig.drive(
        "gc",
        &file_b,
        "",
        "",
        "",
        &["-valid", &valid, "-gc-keys", keys],
    )
    .ok();
    assert!(link(Some(&pod_b.name), IF).is_some(), "second GC took B");

    // A's DEL after GC is still fine; B's DEL cleans up the rest
    rig.drive("del", &file_a, &pod_a.path(), &cid_a, IF, &[])
        .ok();
    let del = rig.drive("del", &file_b, &pod_b.path(), &cid_b, IF, &[]);
    del.ok();
    nic_b.assert_home(Some(&pod_b), &del);
    assert!(rig.allocations(&net).is_empty(), "IPs left\n{del}");
    rig.assert_state_empty(&del);
}
