//! `rdma-host-device inspect`, as an operator runs it: a NIC attached to a pod shows where it
//! is, its MTU and admin state as the pod sees them, and the attachment; once DEL ran it is
//! back on the host.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::Command;

fn inspect(rig: &Rig) -> Value {
    let out = Command::new(plugin())
        .args(["inspect", "--json", "--state-dir"])
        .arg(rig.state_dir())
        .env_remove("CNI_COMMAND")
        .output()
        .expect("run inspect");
    assert!(out.status.success(), "inspect failed: {out:?}");
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

fn row<'a>(report: &'a Value, nic: &str) -> Option<&'a Value> {
    report["nics"].as_array()?.iter().find(|n| n["name"] == nic)
}

#[test]
fn inspect_shows_a_nic_in_its_pod_then_at_home() {
    require_root();
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mut conf = rig.conf("1.0.0", json!({ "device": nic.name }));
    conf["mtu"] = json!(1300);
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();

    let report = inspect(&rig);
    let r = row(&report, &nic.name).unwrap_or_else(|| panic!("{} missing: {report}", nic.name));
    assert_eq!(r["location"], "pod", "{r}");
    assert_eq!(r["mtu"], 1300, "the MTU as the pod sees it: {r}");
    assert_eq!(r["adminUp"], true, "{r}");
    assert_eq!(r["attachment"]["containerID"], rig.cid(0), "{r}");
    assert_eq!(r["attachment"]["ifname"], "net1", "{r}");

    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    let report = inspect(&rig);
    let r = row(&report, &nic.name);
    // A veth without RDMA is a virtual link: hidden unless --all, and never "in a pod" again.
    assert!(
        r.is_none_or(|r| r["location"] == "host" && r["attachment"].is_null()),
        "{report}"
    );
}
