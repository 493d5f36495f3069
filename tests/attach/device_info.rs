//! The device-info file (`CNIDeviceInfoFile` capability) as Multus asks for it, through libcni:
//! a path outside the node's `deviceInfoDir` (a tenant's NAD can carry `runtimeConfig` itself),
//! or another attachment's file there, is refused before anything changes; a device plugin's file Multus copied there is not
//! blanked by a NIC that has nothing to add, and DEL removes the file. A veth has no PCI
//! address and this kernel no RDMA, so what the file says of a real NIC and its RDMA device is
//! checked in the VM (tests/vm/plugin.sh, case device-info). Needs root and `go`.

use test_support as common;

use common::*;
use serde_json::json;
use std::fs;

const IF: &str = "net1";

fn conf_with_capability(rig: &Rig, nic: &Veth) -> serde_json::Value {
    let mut c = rig.conf("1.0.0", json!({"device": nic.name}));
    c["capabilities"] = json!({"CNIDeviceInfoFile": true});
    c
}

#[test]
fn a_device_info_path_outside_the_nodes_dir_is_refused_and_nothing_changes() {
    let rig = Rig::new();
    let devinfo = rig.dir.path().join("devinfo");
    rig.set_node(json!({"deviceInfoDir": devinfo}));
    let (nic, pod, cid) = (rig.nic(0), rig.netns(0), rig.cid(0));
    let file = rig.write("n.conf", &conf_with_capability(&rig, &nic));
    let elsewhere = rig.dir.path().join("elsewhere.json");
    let victim = devinfo.join(format!("{}-victim_{IF}", rig.net_name()));
    fs::create_dir_all(&devinfo).unwrap();
    fs::write(&victim, "another pod's").unwrap();
    for target in [
        elsewhere.clone(),
        devinfo.join("../elsewhere.json"),
        devinfo.join("sub/x.json"),
        // Another attachment's file, in the right directory: DEL would remove it.
        victim.clone(),
    ] {
        let cap = format!("CNIDeviceInfoFile={}", target.display());
        let add = rig.drive("add", &file, &pod.path(), &cid, IF, &["-cap", &cap]);
        let err = add.err_code(7);
        let m = err["msg"].as_str().unwrap_or("");
        assert!(
            m.contains("deviceInfoDir") || m.contains("not this attachment's"),
            "the message says why: {err}\n{add}"
        );
        rig.assert_detached(&nic, Some(&pod), &add);
        assert!(
            !elsewhere.exists(),
            "a file was written outside deviceInfoDir\n{add}"
        );
    }
    let del = rig.call(
        "DEL",
        &conf_with_capability(&rig, &nic),
        &pod.path(),
        &cid,
        IF,
        &[],
    );
    del.ok();
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        "another pod's",
        "{del}"
    );
}

#[test]
fn a_device_plugins_file_is_kept_by_add_and_removed_by_del() {
    let rig = Rig::new();
    let devinfo = rig.dir.path().join("devinfo");
    rig.set_node(json!({"deviceInfoDir": devinfo}));
    fs::create_dir_all(&devinfo).unwrap();
    let (nic, pod, cid) = (rig.nic(0), rig.netns(0), rig.cid(0));
    // What Multus copies from the device plugin's file before calling the CNI.
    // Multus' name for it: <network>-<containerID>_<ifname>.
    let info = devinfo.join(format!("{}-{cid}_{IF}", rig.net_name()));
    let dp = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2"}}"#;
    fs::write(&info, dp).unwrap();
    let file = rig.write("n.conf", &conf_with_capability(&rig, &nic));
    let cap = format!("CNIDeviceInfoFile={}", info.display());

    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &["-cap", &cap]);
    add.ok();
    assert_eq!(
        fs::read_to_string(&info).unwrap(),
        dp,
        "a NIC with no PCI address or RDMA device must leave the file as it was\n{add}"
    );
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &["-cap", &cap]);
    del.ok();
    assert!(!info.exists(), "DEL left the device-info file\n{del}");
    rig.assert_detached(&nic, Some(&pod), &del);
}
