//! The plugin as Multus delegates to it, driven through libcni (tests/libcni-driver), one test
//! per NetworkAttachmentDefinition in conf/multus/ plus the containerd conflist in
//! conf/containerd/. What Multus does to a delegate is reproduced from its source
//! (pkg/types/conf.go LoadDelegateNetConf, newCNIRuntimeConf; pkg/multus/multus.go; the code
//! is in crates/test-support/src/multus.rs, shared with crates/agent/tests/real_cluster/multus_dra.rs):
//!
//! - a device plugin's device: `deviceID` AND `pciBusID` (same value) put at the top level of
//!   the config (of every plugin, for a list), and `deviceID` + `CNIDeviceInfoFile` offered as
//!   capability args (libcni passes them in runtimeConfig when the config has the capability);
//! - the network selection element's `cni-args` merged into `args.cni`;
//! - CNI_ARGS `IgnoreUnknown=true;K8S_POD_NAMESPACE=..;K8S_POD_NAME=..;
//!   K8S_POD_INFRA_CONTAINER_ID=..;K8S_POD_UID=..`;
//! - a conflist without `cniVersion` gets Multus's own.
//!
//! Only the environment is replaced: the NIC name by a test veth, whereabouts (which needs a
//! Kubernetes API) by host-local with the same range, and stateDir/logFile by the test's dir.
//! Veths have no PCI address and this kernel has no RDMA, so the deviceID, rdmaDevice and
//! softDevice examples can only show their documented errors here (100, 110); the VM tests
//! run them for real. Needs root and `go` (see crates/test-support/src/lib.rs).

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};

const IF: &str = "net1";
const NO_SUCH_PCI: &str = "0000:ff:1f.7";

/// The CNI config of the NAD in conf/multus/<file>.
fn nad_config(file: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conf/multus")
        .join(file);
    let docs = yaml::parse_all(&fs::read_to_string(&p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let nad = docs
        .iter()
        .find(|d| d["kind"] == "NetworkAttachmentDefinition")
        .unwrap_or_else(|| panic!("{} has no NAD", p.display()));
    serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap()
}

fn conflist(file: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conf/containerd")
        .join(file);
    serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap()
}

/// Each rdma-host-device entry of a config or list.
fn ours_mut(conf: &mut Value) -> Vec<&mut Value> {
    if conf["plugins"].is_array() {
        conf["plugins"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .filter(|p| p["type"] == "rdma-host-device")
            .collect()
    } else {
        vec![conf]
    }
}

/// Point the example at this test's world: `nic` instead of the example's NIC name (if it
/// names one), host-local instead of whereabouts, and a log file (in the rig's node logDir).
fn localize(rig: &Rig, conf: &mut Value, nic: Option<&Veth>) -> PathBuf {
    let log = rig.log_dir().join("plugin.log");
    for p in ours_mut(conf) {
        if let (Some(nic), true) = (nic, p.get("device").is_some()) {
            p["device"] = json!(nic.name);
        }
        p["logFile"] = json!("plugin.log");
        match p["ipam"]["type"].as_str() {
            Some("whereabouts") => {
                let range = p["ipam"]["range"].clone();
                p["ipam"] = json!({"type": "host-local", "dataDir": rig.data_dir(),
                                    "ranges": [[{"subnet": range}]]});
            }
            Some("host-local") => p["ipam"]["dataDir"] = json!(rig.data_dir()),
            _ => {}
        }
    }
    log
}

/// CNI_ARGS as Multus builds them, for this rig's pod `trainer-N`.
fn multus_cni_args(rig: &Rig, cid: &str) -> String {
    multus_k8s_args(
        "default",
        &format!("trainer-{}", rig.n),
        &format!("5e1f-{}", rig.n),
        cid,
    )
}

/// The capability args Multus offers for a device plugin's device.
fn multus_caps(rig: &Rig, net: &str, cid: &str, device_id: &str) -> Vec<String> {
    multus_device_caps(&rig.dir.path().join("devinfo"), net, cid, IF, device_id)
}

fn log_lines(log: &Path) -> Vec<String> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ------------------------------------------------------------------ NIC by name + whereabouts

#[test]
fn nad_nic_by_name_add_check_del_as_multus_calls_it() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = nad_config("rdma-nic-whereabouts.yaml");
    let log = localize(&rig, &mut conf, Some(&nic));
    // cni-args from the pod's network selection element land in args.cni.
    let conf = multus_delegate(conf, None, Some(json!({"rail": "0"})));
    let file = rig.write("rdma-rail0.conf", &conf);
    let args = multus_cni_args(&rig, &cid);
    let extra = ["-args", args.as_str()];

    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &extra);
    let res = add.ok();
    assert_eq!(res["cniVersion"], "1.0.0", "{add}");
    let l = link(Some(&pod.name), IF).unwrap_or_else(|| panic!("no {IF} in pod\n{add}"));
    assert_eq!(l.mac, nic.mac, "{add}");
    assert_eq!(l.mtu, 9000, "the NAD's mtu\n{add}");
    assert!(l.up, "{add}");
    assert!(
        l.addrs
            .iter()
            .any(|a| a.starts_with("192.168.100.") && a.ends_with("/24")),
        "no address from the NAD's range: {l:?}\n{add}"
    );
    assert!(nic.on_host().is_none(), "NIC still on host\n{add}");
    let stdin = add.plugin_stdin("ADD");
    assert_eq!(
        stdin[0]["args"]["cni"]["rail"], "0",
        "args.cni reached the plugin\n{add}"
    );

    // One line per step, each with the container ID, in the NAD's logFile.
    let lines = log_lines(&log);
    let add_lines: Vec<&String> = lines.iter().filter(|l| l.contains(" ADD ")).collect();
    assert!(
        add_lines.len() >= 3,
        "expected a log line per ADD step in {}: {lines:#?}\n{add}",
        log.display()
    );
    assert!(
        add_lines.iter().all(|l| l.contains(&cid)),
        "every line names the container: {add_lines:#?}"
    );

    rig.drive("check", &file, &pod.path(), &cid, IF, &extra)
        .ok();
    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &extra);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
    assert!(
        log_lines(&log)
            .iter()
            .any(|l| l.contains(" DEL ") && l.contains(&cid)),
        "DEL logged nothing: {:#?}",
        log_lines(&log)
    );
}

// ------------------------------------------------------------------ device plugin deviceID

/// Multus injects the device plugin's PCI address as deviceID AND pciBusID (one device, not two
/// selectors) and offers it as the deviceID capability. A veth has no PCI address, so the
/// documented answer here is 100 (no host NIC at that address), with nothing changed.
#[test]
fn nad_device_plugin_deviceid_as_multus_injects_it() {
    deviceid_as_multus_injects_it("rdma-deviceid-sriov.yaml");
}

/// The same for the NAD that names our own device plugin's resource (rdma-host-device.io/rail).
#[test]
fn nad_of_our_device_plugins_resource_gets_the_deviceid_as_multus_injects_it() {
    deviceid_as_multus_injects_it("rdma-rail-device-plugin.yaml");
}

fn deviceid_as_multus_injects_it(nad: &str) {
    let rig = Rig::new();
    // Where Multus puts CNI device-info files, as the node configuration names it.
    rig.set_node(json!({"deviceInfoDir": rig.dir.path().join("devinfo")}));
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = nad_config(nad);
    localize(&rig, &mut conf, None);
    let net = conf["name"].as_str().unwrap().to_owned();
    let conf = multus_delegate(conf, Some(NO_SUCH_PCI), None);
    let file = rig.write("by-device-plugin.conf", &conf);
    let args = multus_cni_args(&rig, &cid);
    let mut extra: Vec<String> = vec!["-args".into(), args];
    extra.extend(multus_caps(&rig, &net, &cid, NO_SUCH_PCI));

    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &strs(&extra));
    let err = add.err_code(100);
    assert!(
        err["msg"].as_str().unwrap_or("").contains(NO_SUCH_PCI),
        "the error names the device: {err}\n{add}"
    );
    let stdin = &add.plugin_stdin("ADD")[0];
    assert_eq!(stdin["deviceID"], NO_SUCH_PCI, "{add}");
    assert_eq!(stdin["pciBusID"], NO_SUCH_PCI, "{add}");
    assert_eq!(
        stdin["runtimeConfig"]["deviceID"], NO_SUCH_PCI,
        "libcni passes the capability\n{add}"
    );
    assert!(
        stdin["runtimeConfig"]["CNIDeviceInfoFile"]
            .as_str()
            .is_some_and(|p| p.starts_with(&rig.dir.path().join("devinfo").display().to_string())),
        "the NAD declares CNIDeviceInfoFile: libcni passes Multus' path\n{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    // DEL after a failed ADD (Multus always sends one) succeeds.
    rig.drive("del", &file, &pod.path(), &cid, IF, &strs(&extra))
        .ok();
}

/// The device plugin's per-NIC env (`devicePlugin.nicEnv`, issue 38 item 2): `Allocate` wrote
/// generation 1 of the NIC's CDI spec; ADD, given the NIC as Multus passes a device plugin's
/// deviceID (a veth's is its name), rewrites that NIC's spec and no other as generation 2;
/// DEL puts it back to generation 1, byte for byte; an ADD that fails after writing it
/// (injected fault) undoes it; a spec ADD cannot read back fails ADD (strict), the NIC home.
#[test]
fn the_device_plugins_nic_env_is_completed_by_add_and_put_back_by_del_and_a_failed_add() {
    use rdma_host_device_core::nic_env;
    let rig = Rig::new();
    let cdi = rig.dir.path().join("cdi");
    rig.set_node(json!({"devicePlugin": {"nicEnv": {"cdiDir": cdi}}}));
    let place = nic_env::Place { cdi_dir: cdi };
    let (nic, other) = (rig.nic(0), rig.nic(1));
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    // What Allocate writes for each NIC of the pool, before any sandbox exists.
    nic_env::allocated(&place, &[(&nic.name, None)]).unwrap();
    nic_env::allocated(&place, &[(&other.name, None)]).unwrap();
    let gen1 = fs::read(place.spec_path(&nic.name).unwrap()).unwrap();
    let other_gen1 = fs::read(place.spec_path(&other.name).unwrap()).unwrap();
    let env = |id: &str| -> Vec<String> {
        let v: Value =
            serde_json::from_slice(&fs::read(place.spec_path(id).unwrap()).unwrap()).unwrap();
        serde_json::from_value(v["devices"][0]["containerEdits"]["env"].clone()).unwrap()
    };
    assert_eq!(env(&nic.name), ["RDMA_HOST_DEVICE_METADATA_GENERATION=1"]);

    let mut conf = nad_config("rdma-rail-device-plugin.yaml");
    localize(&rig, &mut conf, None);
    let conf = multus_delegate(conf, Some(&nic.name), None);
    let add = rig.call("ADD", &conf, &pod.path(), &cid, IF, &[]);
    add.ok();
    assert_eq!(
        env(&nic.name),
        ["RDMA_HOST_DEVICE_METADATA_GENERATION=2"],
        "ADD completed the NIC's spec (a veth has no RDMA device, so no GID index)\n{add}"
    );
    assert_eq!(
        fs::read(place.spec_path(&other.name).unwrap()).unwrap(),
        other_gen1,
        "another NIC's spec is untouched"
    );
    let del = rig.call("DEL", &conf, &pod.path(), &cid, IF, &[]);
    del.ok();
    assert_eq!(
        fs::read(place.spec_path(&nic.name).unwrap()).unwrap(),
        gen1,
        "DEL: generation 1 again\n{del}"
    );
    rig.assert_detached(&nic, Some(&pod), &del);

    // A failure after the spec was written: ADD's undo puts it back.
    let add = rig.call(
        "ADD",
        &conf,
        &pod.path(),
        &cid,
        IF,
        &[("RHD_FAULT", "add:before-result:error")],
    );
    let e = add.err();
    assert!(
        e["msg"]
            .as_str()
            .is_some_and(|m| m.contains("injected fault")),
        "{add}"
    );
    assert_eq!(
        fs::read(place.spec_path(&nic.name).unwrap()).unwrap(),
        gen1,
        "{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    rig.call("DEL", &conf, &pod.path(), &cid, IF, &[]).ok();

    // Strict: a spec ADD cannot read back as ours fails ADD, and nothing stays moved.
    fs::write(place.spec_path(&nic.name).unwrap(), "{}").unwrap();
    let add = rig.call("ADD", &conf, &pod.path(), &cid, IF, &[]);
    let e = add.err_code(5);
    assert!(
        e["msg"].as_str().is_some_and(
            |m| m.contains("rdma-host-device.io/nic=") && m.contains("not the spec of")
        ),
        "{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    rig.call("DEL", &conf, &pod.path(), &cid, IF, &[]).ok();
}

/// Same, for an mlx5 sub-function (auxiliary bus device name).
#[test]
fn nad_device_plugin_auxiliary_deviceid_not_found() {
    let rig = Rig::new();
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = nad_config("rdma-deviceid-sriov.yaml");
    localize(&rig, &mut conf, None);
    let conf = multus_delegate(conf, Some("mlx5_core.sf.4242"), None);
    let file = rig.write("sf.conf", &conf);
    let args = multus_cni_args(&rig, &cid);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &["-args", &args]);
    add.err_code(100);
    rig.assert_state_empty(&add);
}

// ------------------------------------------------------------------ rdmaDevice / softDevice

/// Without RDMA in the kernel (this machine), a network that names an RDMA device fails with
/// 110 and changes nothing.
#[test]
fn nad_rdma_device_without_rdma_is_110() {
    let rig = Rig::new();
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = nad_config("rdma-device-by-rdma-name.yaml");
    localize(&rig, &mut conf, None);
    let conf = multus_delegate(conf, None, None);
    let file = rig.write("mlx5-1.conf", &conf);
    let args = multus_cni_args(&rig, &cid);
    let extra = ["-args", args.as_str(), "-cap", r#"ips=["10.10.1.7/24"]"#];
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &extra);
    let err = add.err_code(110);
    assert!(
        err["msg"].as_str().unwrap_or("").contains("mlx5_1"),
        "the error names the RDMA device: {err}\n{add}"
    );
    rig.assert_state_empty(&add);
    rig.drive("del", &file, &pod.path(), &cid, IF, &extra).ok();
}

#[test]
fn nad_soft_siw_without_rdma_is_110_and_leaves_the_nic() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut conf = nad_config("rdma-soft-siw.yaml");
    let log = localize(&rig, &mut conf, Some(&nic));
    let conf = multus_delegate(conf, None, None);
    let file = rig.write("siw.conf", &conf);
    let args = multus_cni_args(&rig, &cid);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &["-args", &args]);
    let err = add.err_code(110);
    assert!(
        err["msg"].as_str().unwrap_or("").contains("RDMA"),
        "{err}\n{add}"
    );
    nic.assert_home(Some(&pod), &add);
    assert!(link(Some(&pod.name), IF).is_none(), "{add}");
    rig.assert_state_empty(&add);
    assert!(
        log_lines(&log).iter().any(|l| l.contains(&cid)),
        "the failure is in the log file too: {:#?}",
        log_lines(&log)
    );
    rig.drive("del", &file, &pod.path(), &cid, IF, &["-args", &args])
        .ok();
}

// ------------------------------------------------------------------ containerd conflist

/// rdma-host-device -> tuning -> sbr: our result is tuning's prevResult and sbr's: sbr builds
/// its source-based routing table from the address we (through IPAM) put on the NIC.
fn chain_cycle(list: Value) {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let mut list = list;
    localize(&rig, &mut list, Some(&nic));
    let version = list["cniVersion"].as_str().unwrap().to_owned();
    let file = rig.write("20-rdma.conflist", &list);
    let args = multus_cni_args(&rig, &cid);
    let extra = ["-args", args.as_str()];

    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &extra);
    let res = add.ok();
    assert_eq!(res["cniVersion"], version.as_str(), "{add}");
    let l = link(Some(&pod.name), IF).unwrap_or_else(|| panic!("no {IF} in pod\n{add}"));
    assert_eq!(l.mac, nic.mac, "{add}");
    assert_eq!(l.mtu, 9000, "{add}");
    let addr = l
        .addrs
        .iter()
        .find(|a| a.starts_with("192.168.100."))
        .unwrap_or_else(|| panic!("no address from the list's range: {l:?}\n{add}"))
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    // tuning ran in the pod with our result as prevResult.
    for (k, want) in [("arp_ignore", "1"), ("arp_announce", "2")] {
        let v = run(
            "ip",
            &[
                "netns",
                "exec",
                &pod.name,
                "cat",
                &format!("/proc/sys/net/ipv4/conf/all/{k}"),
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&v.stdout).trim(),
            want,
            "tuning's {k}\n{add}"
        );
    }
    // sbr found our interface and address in its prevResult.
    let rules = run("ip", &["-n", &pod.name, "rule", "show"]);
    let rules = String::from_utf8_lossy(&rules.stdout).into_owned();
    assert!(
        rules
            .lines()
            .any(|r| r.contains(&format!("from {addr} lookup 100"))),
        "sbr made no rule for {addr}: {rules}\n{add}"
    );
    let t100 = run("ip", &["-n", &pod.name, "route", "show", "table", "100"]);
    let t100 = String::from_utf8_lossy(&t100.stdout).into_owned();
    assert!(
        t100.contains(&format!("dev {IF}")),
        "sbr's table 100 has no route via {IF}: {t100}\n{add}"
    );
    let raw = add.plugin_stdout("ADD");
    assert_eq!(raw[0]["cniVersion"], version.as_str(), "{add}");
    // The chain's later plugins got our result.
    let tuning_in: Vec<&Value> = add
        .trace
        .iter()
        .filter(|t| {
            t["command"] == "ADD" && t["plugin"].as_str().is_some_and(|p| p.ends_with("/tuning"))
        })
        .map(|t| &t["stdin"])
        .collect();
    assert!(
        tuning_in
            .first()
            .is_some_and(
                |s| s["prevResult"]["interfaces"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|i| i["name"] == IF
                        && i["mac"]
                            .as_str()
                            .is_some_and(|m| m.eq_ignore_ascii_case(&nic.mac))))
            ),
        "tuning's prevResult lacks our interface\n{add}"
    );

    let del = rig.drive("del", &file, &pod.path(), &cid, IF, &extra);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}

#[test]
fn containerd_conflist_chains_tuning_and_sbr() {
    chain_cycle(conflist("20-rdma.conflist"));
}

/// A NAD holding a plugin list without cniVersion: Multus fills in its own (0.3.1 by default);
/// the whole chain then speaks 0.3.1, results included (ips[].version present).
#[test]
fn multus_fills_in_cni_version_for_a_list_without_one() {
    let mut list = conflist("20-rdma.conflist");
    list.as_object_mut().unwrap().remove("cniVersion");
    let list = multus_delegate(list, None, None);
    assert_eq!(list["cniVersion"], MULTUS_CNI_VERSION);
    chain_cycle(list);
}
