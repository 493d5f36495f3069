//! The 1.1.0 route fields (`table`, `mtu`, `advmss`, `scope`, `priority`, `tos`) from IPAM are
//! applied in the pod, refused with code 7 (naming the field, host unchanged) when the kernel
//! cannot take them, and verified by CHECK. Debian's IPAM plugins never emit these fields, so
//! a fixed test IPAM (`Rig::fixed_ipam`) answers with them. Driven through libcni.

use test_support as common;

use common::*;
use serde_json::{Value, json};

const IF: &str = "net1";

/// A 1.1.0 IPAM result for this rig: 10.77.X.2/24 and fd77:X::2/64 with their gateways, and
/// `routes`.
fn ipam_result(rig: &Rig, routes: Value) -> Value {
    let o = rig.octet();
    json!({
        "cniVersion": "1.1.0",
        "ips": [
            {"address": format!("10.77.{o}.2/24"), "gateway": format!("10.77.{o}.1")},
            {"address": format!("fd77:{o:x}::2/64"), "gateway": format!("fd77:{o:x}::1")}
        ],
        "routes": routes
    })
}

/// Both routes with every field set.
fn full_routes(rig: &Rig) -> Value {
    let o = rig.octet();
    json!([
        {"dst": "10.78.0.0/16", "gw": format!("10.77.{o}.1"), "table": 100, "mtu": 1400,
         "advmss": 1360, "priority": 50, "tos": 8, "scope": 200},
        {"dst": "fd78::/64", "gw": format!("fd77:{o:x}::1"), "table": 101, "mtu": 1450,
         "advmss": 1390, "priority": 77}
    ])
}

/// Every route in the pod, all tables, both families (`ip -d -j route show table all`).
fn pod_routes(pod: &Netns) -> Vec<Value> {
    let mut all = Vec::new();
    for fam in ["-4", "-6"] {
        let out = ip_in(
            Some(&pod.name),
            &[fam, "-d", "-j", "route", "show", "table", "all"],
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        all.extend(v.as_array().cloned().unwrap_or_default());
    }
    all
}

fn find<'a>(routes: &'a [Value], dst: &str) -> Option<&'a Value> {
    routes.iter().find(|r| r["dst"] == dst && r["dev"] == IF)
}

fn metric(r: &Value, name: &str) -> Option<u64> {
    r["metrics"]
        .as_array()?
        .iter()
        .find_map(|m| m[name].as_u64())
}

#[test]
fn every_route_field_from_ipam_is_applied_in_the_pod() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
    conf["ipam"] = rig.fixed_ipam("fixed-ipam", &ipam_result(&rig, full_routes(&rig)));
    let file = rig.write("net.conf", &conf);

    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    let result = add.ok();
    let rts = pod_routes(&pod);
    let ctx = format!("{add}\npod routes: {rts:#?}");

    let v4 = find(&rts, "10.78.0.0/16").unwrap_or_else(|| panic!("no 10.78.0.0/16\n{ctx}"));
    assert_eq!(v4["table"], "100", "table\n{ctx}");
    assert_eq!(metric(v4, "mtu"), Some(1400), "mtu\n{ctx}");
    assert_eq!(metric(v4, "advmss"), Some(1360), "advmss\n{ctx}");
    assert_eq!(v4["metric"].as_u64(), Some(50), "priority\n{ctx}");
    assert_eq!(v4["tos"], "0x08", "tos\n{ctx}");
    assert_eq!(v4["scope"], "site", "scope 200\n{ctx}");

    let v6 = find(&rts, "fd78::/64").unwrap_or_else(|| panic!("no fd78::/64\n{ctx}"));
    assert_eq!(v6["table"], "101", "table\n{ctx}");
    assert_eq!(metric(v6, "mtu"), Some(1450), "mtu\n{ctx}");
    assert_eq!(metric(v6, "advmss"), Some(1390), "advmss\n{ctx}");
    assert_eq!(v6["metric"].as_u64(), Some(77), "priority\n{ctx}");

    // The 1.1.0 result echoes them, tos included.
    let raw = &add.plugin_stdout("ADD")[0];
    let r = raw["routes"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["dst"] == "10.78.0.0/16"))
        .unwrap_or_else(|| panic!("result lacks 10.78.0.0/16\n{ctx}"));
    for (k, want) in [
        ("table", 100),
        ("mtu", 1400),
        ("advmss", 1360),
        ("priority", 50),
        ("tos", 8),
        ("scope", 200),
    ] {
        assert_eq!(r[k].as_u64(), Some(want), "result route {k}\n{ctx}");
    }
    assert_eq!(result["cniVersion"], "1.1.0");

    rig.drive("check", &file, &pod.path(), &cid, IF, &[]).ok();
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

/// A value the kernel refuses (scope 255 "nowhere"; tos 1, an ECN bit), or one it would not
/// keep (table 0, scope on IPv6): code 7 naming the field, and the host as before.
#[test]
fn a_route_field_that_cannot_be_applied_fails_add_with_7_and_rolls_back() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let o = rig.octet();
    let gw = format!("10.77.{o}.1");
    let cases = [
        (
            "scope",
            json!({"dst": "10.78.0.0/16", "gw": gw, "scope": 255}),
        ),
        ("tos", json!({"dst": "10.78.0.0/16", "gw": gw, "tos": 1})),
        (
            "table",
            json!({"dst": "10.78.0.0/16", "gw": gw, "table": 0}),
        ),
        (
            "scope",
            json!({"dst": "fd78::/64", "gw": format!("fd77:{o:x}::1"), "scope": 253}),
        ),
    ];
    for (i, (field, route)) in cases.into_iter().enumerate() {
        let cid = rig.cid(i as u32);
        let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
        // Two good routes first, so there is something to roll back.
        let routes = json!([{"dst": "10.79.0.0/16", "mtu": 1300, "table": 100},
                             {"dst": "10.80.0.0/16"}, route]);
        let ipam = format!("fixed-ipam-{i}");
        conf["ipam"] = rig.fixed_ipam(&ipam, &ipam_result(&rig, routes));
        let file = rig.write(&format!("net{i}.conf"), &conf);
        let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
        let e = add.err_code(7);
        let msg = e["msg"].as_str().unwrap_or("");
        eprintln!("{field}: {msg}");
        assert!(
            msg.contains(field) && msg.contains(route["dst"].as_str().unwrap_or("?")),
            "the message must name the field {field} and the route\n{add}"
        );
        rig.assert_detached(&nic, Some(&pod), &add);
        assert!(
            pod_routes(&pod).iter().all(|r| r["dev"] != IF),
            "routes left in the pod\n{add}"
        );
        // The runtime's DEL after a failed ADD is harmless.
        rig.drive("del", &file, &pod.path(), &cid, IF, &[]).ok();
        nic.assert_home(Some(&pod), &add);
    }
}

#[test]
fn check_finds_a_route_changed_or_removed_in_the_pod() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let o = rig.octet();
    let gw = format!("10.77.{o}.1");
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
    conf["ipam"] = rig.fixed_ipam("fixed-ipam", &ipam_result(&rig, full_routes(&rig)));
    let file = rig.write("net.conf", &conf);
    rig.drive("add", &file, &pod.path(), &cid, IF, &[]).ok();
    rig.drive("check", &file, &pod.path(), &cid, IF, &[]).ok();

    let key = [
        "10.78.0.0/16",
        "table",
        "100",
        "tos",
        "0x08",
        "metric",
        "50",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["-n", &pod.name, "route", "add"]
            .iter()
            .chain(key.iter())
            .map(|s| s.to_string())
            .collect();
        a.extend(
            ["via", gw.as_str(), "dev", IF]
                .iter()
                .chain(extra)
                .map(|s| s.to_string()),
        );
        a
    };
    let del: Vec<&str> = ["-n", &pod.name, "route", "del"]
        .into_iter()
        .chain(key)
        .collect();
    // The same route with another MTU: a difference named "mtu".
    ip(&del);
    let changed = with(&["mtu", "1300", "advmss", "1360", "scope", "site"]);
    ip(&changed.iter().map(String::as_str).collect::<Vec<_>>());
    let chk = rig.drive("check", &file, &pod.path(), &cid, IF, &[]);
    let e = chk.err_code(106);
    assert!(
        e["msg"].as_str().is_some_and(|m| m.contains("mtu 1300")),
        "CHECK must name the MTU difference\n{chk}"
    );
    // Scope global (0) instead of site (200).
    ip(&del);
    let scoped = with(&["mtu", "1400", "advmss", "1360", "scope", "global"]);
    ip(&scoped.iter().map(String::as_str).collect::<Vec<_>>());
    let chk = rig.drive("check", &file, &pod.path(), &cid, IF, &[]);
    let e = chk.err_code(106);
    assert!(
        e["msg"].as_str().is_some_and(|m| m.contains("scope")),
        "CHECK must name the scope difference\n{chk}"
    );
    // Moved to the main table: missing from table 100.
    ip(&del);
    ip(&[
        "-n",
        &pod.name,
        "route",
        "add",
        "10.78.0.0/16",
        "via",
        &gw,
        "dev",
        IF,
    ]);
    let chk = rig.drive("check", &file, &pod.path(), &cid, IF, &[]);
    let e = chk.err_code(106);
    assert!(
        e["msg"]
            .as_str()
            .is_some_and(|m| m.contains("lacks route") && m.contains("table 100")),
        "CHECK must say the route is missing from table 100\n{chk}"
    );

    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &[]);
    del.ok();
    nic.assert_home(Some(&pod), &del);
}
