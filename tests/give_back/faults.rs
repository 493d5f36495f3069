//! Crash safety: the plugin is killed (SIGKILL), fails, or panics at every step boundary of ADD
//! and DEL (`RHD_FAULT`, honoured by debug builds only; see crates/core/src/fault.rs). After a
//! kill the runtime's DEL must bring everything back: the NIC on the host under its original
//! name and MTU, the IP released, no state file; and a new ADD must succeed. After an error or a
//! panic the plugin's own rollback must already have done that. Veth pairs stand in for NICs;
//! host-local (Debian's) allocates the IPs. Needs root.
//!
//! The RDMA boundaries (`add:after-rdma-move`, `add:after-soft-rdma`) need RDMA hardware or
//! rdma_rxe and are not reached here.

use test_support as common;

use common::*;
use serde_json::json;

/// The tests' one attachment: NIC 0 in pod 0 of a [`World`], cniVersion 1.0.0.
fn world() -> World {
    World::new("1.0.0", 1, 1)
}

/// This module's steps on the shared world.
trait AtFault {
    fn at(&self, cmd: &str, fault: Option<&str>) -> RunOut;
    fn assert_clean(&self, ctx: &dyn std::fmt::Display);
    fn assert_attached(&self, ctx: &dyn std::fmt::Display);
    fn assert_usable(&self);
}

impl AtFault for World {
    /// `cmd` for the one attachment, with `fault` injected (`RHD_FAULT`).
    fn at(&self, cmd: &str, fault: Option<&str>) -> RunOut {
        let extra: Vec<(&str, &str)> = fault.map(|f| ("RHD_FAULT", f)).into_iter().collect();
        self.call(cmd, 0, 0, &extra)
    }

    /// Everything as before the first ADD: NIC home with name and MTU, pod empty, no IP
    /// allocated, no state file (lock files included).
    fn assert_clean(&self, ctx: &dyn std::fmt::Display) {
        self.nics[0].assert_home(Some(&self.pods[0]), ctx);
        let left: Vec<String> = links(Some(&self.pods[0].name))
            .into_iter()
            .map(|l| l.name)
            .filter(|n| n != "lo")
            .collect();
        assert!(left.is_empty(), "pod still holds {left:?}\n{ctx}");
        let a = self.rig.allocations(&self.rig.net_name());
        assert!(a.is_empty(), "IP still allocated: {a:?}\n{ctx}");
        self.rig.assert_state_empty(ctx);
        let host = link(None, &self.nics[0].name).unwrap();
        assert!(
            host.alias
                .as_deref()
                .is_none_or(|a| !a.contains("rdma-host-device")),
            "our tag is still on the NIC: {:?}\n{ctx}",
            host.alias
        );
    }

    /// The NIC is in the pod as CNI_IFNAME with an address.
    fn assert_attached(&self, ctx: &dyn std::fmt::Display) {
        let l = link(Some(&self.pods[0].name), &self.ifname).unwrap_or_else(|| {
            panic!(
                "pod has no {}\n{}\n{ctx}",
                self.ifname,
                dump(Some(&self.pods[0].name))
            )
        });
        assert_eq!(l.mac, self.nics[0].mac, "wrong NIC in the pod\n{ctx}");
        assert_eq!(l.mtu, 1400, "MTU in the pod\n{ctx}");
        assert_eq!(l.addrs.len(), 1, "pod addresses {:?}\n{ctx}", l.addrs);
    }

    /// A fresh ADD and DEL work, leaving everything clean.
    fn assert_usable(&self) {
        let add = self.at("ADD", None);
        add.ok();
        self.assert_attached(&add);
        let del = self.at("DEL", None);
        del.ok();
        self.assert_clean(&del);
    }
}

// ---------------------------------------------------------------- ADD killed

fn add_killed_at(point: &str) {
    let w = world();
    let fault = format!("{point}:kill");
    let add = w.at("ADD", Some(&fault));
    assert!(add.killed(), "ADD was not killed at {point}\n{add}");
    assert!(
        add.stdout.is_empty(),
        "a killed plugin prints nothing\n{add}"
    );
    // The runtime saw ADD fail: it calls DEL (maybe more than once).
    let del = w.at("DEL", None);
    del.ok();
    w.assert_clean(&del);
    w.at("DEL", None).ok();
    w.assert_usable();
}

#[test]
fn add_killed_after_lock() {
    add_killed_at("add:locked");
}
#[test]
fn add_killed_after_state_saved() {
    add_killed_at("add:after-state");
}
#[test]
fn add_killed_after_nic_move() {
    add_killed_at("add:after-nic-move");
}
#[test]
fn add_killed_after_ipam() {
    add_killed_at("add:after-ipam");
}
#[test]
fn add_killed_after_addresses() {
    add_killed_at("add:after-addresses");
}
#[test]
fn add_killed_before_result() {
    add_killed_at("add:before-result");
}

/// Killed while rolling back an ADD that failed late: at each undo step in turn.
#[test]
fn add_killed_during_rollback() {
    let w = world();
    let mut n = 1;
    loop {
        let fault = format!("add:after-addresses:error,add:give-back:kill@{n}");
        let add = w.at("ADD", Some(&fault));
        if !add.killed() {
            // Past the last undo step: the rollback finished by itself.
            assert!(n > 2, "rollback has fewer steps than expected ({n})\n{add}");
            add.err_code(5);
            w.assert_clean(&add);
            break;
        }
        let del = w.at("DEL", None);
        del.ok();
        w.assert_clean(&del);
        n += 1;
        assert!(n < 10, "more undo steps than ADD has");
    }
    w.assert_usable();
}

// ---------------------------------------------------------------- ADD fails or panics

fn add_fails_at(point: &str) {
    let w = world();
    let add = w.at("ADD", Some(&format!("{point}:error")));
    let e = add.one_error();
    assert!(
        e["msg"].as_str().unwrap().contains("injected fault"),
        "ADD failed, but not at the injected fault\n{add}"
    );
    // The rollback alone restored everything.
    w.assert_clean(&add);
    w.at("DEL", None).ok();
    w.assert_usable();
}

fn add_panics_at(point: &str) {
    let w = world();
    let add = w.at("ADD", Some(&format!("{point}:panic")));
    let e = add.one_error();
    assert_eq!(e["code"], 999, "a panic is error 999\n{add}");
    assert_eq!(e["cniVersion"], "1.0.0", "in the config's version\n{add}");
    assert!(
        e["msg"].as_str().unwrap().contains("injected panic"),
        "{add}"
    );
    w.assert_clean(&add);
    w.at("DEL", None).ok();
    w.assert_usable();
}

#[test]
fn add_error_at_each_boundary_rolls_back() {
    for &p in ADD_FAULT_POINTS {
        add_fails_at(p);
    }
}

#[test]
fn add_panic_at_each_boundary_prints_999_and_rolls_back() {
    for &p in ADD_FAULT_POINTS {
        add_panics_at(p);
    }
}

// ---------------------------------------------------------------- DEL killed, failing, panicking

fn del_faulted_at(point: &str, action: &str) {
    let w = world();
    let add = w.at("ADD", None);
    add.ok();
    w.assert_attached(&add);
    let del = w.at("DEL", Some(&format!("{point}:{action}")));
    match action {
        "kill" => assert!(del.killed(), "DEL was not killed at {point}\n{del}"),
        "panic" => assert_eq!(del.one_error()["code"], 999, "{del}"),
        _ => {
            del.one_error();
        }
    }
    // The runtime retries DEL until it succeeds.
    let again = w.at("DEL", None);
    again.ok();
    w.assert_clean(&again);
    w.assert_usable();
}

#[test]
fn del_killed_at_each_boundary() {
    for &p in DEL_FAULT_POINTS {
        del_faulted_at(p, "kill");
    }
}

#[test]
fn del_error_at_each_boundary() {
    for &p in DEL_FAULT_POINTS {
        del_faulted_at(p, "error");
    }
}

#[test]
fn del_panic_prints_999() {
    del_faulted_at("del:after-nic-return", "panic");
}

/// A kill after the NIC reached the pod but before IPAM, then the pod dies too (force delete):
/// DEL with the netns gone still releases everything it can, and the NIC, once the kernel
/// returns it, is recognised and restored by the next ADD.
#[test]
fn add_killed_then_pod_force_deleted() {
    let w = World::losing("1.0.0", 1, 1);
    let add = w.at("ADD", Some("add:after-ipam:kill"));
    assert!(add.killed(), "{add}");
    kill_netns_refunding(&w.pods[0], &w.ifname);
    let del = w.at("DEL", None);
    del.ok();
    let a = w.rig.allocations(&w.rig.net_name());
    assert!(a.is_empty(), "IP leaked: {a:?}\n{del}");
    w.rig.assert_state_empty(&del);
    w.nics[0].assert_home(None, &del);
}

// ---------------------------------------------------------------- killed inside the state write

/// This module's steps on the shared world.
trait RecordFile {
    fn record_file(&self) -> std::path::PathBuf;
    fn temp_file(&self) -> std::path::PathBuf;
    fn add_killed_mid_state_write(&self);
}

impl RecordFile for World {
    /// The attachment's state record.
    fn record_file(&self) -> std::path::PathBuf {
        self.rig
            .state_dir()
            .join(format!("{}:{}.json", self.cid(0), self.ifname))
    }

    /// The temp file `Store::save` writes before its rename.
    fn temp_file(&self) -> std::path::PathBuf {
        let mut p = self.record_file().into_os_string();
        p.push(".tmp");
        p.into()
    }

    /// ADD killed between writing the state's temp file and renaming it: the temp file is
    /// left, and no state file.
    fn add_killed_mid_state_write(&self) {
        let add = self.at("ADD", Some("state:before-rename:kill"));
        assert!(
            add.killed(),
            "ADD was not killed inside the state write\n{add}"
        );
        let files = self.rig.state_files();
        assert!(
            files.contains(&self.temp_file())
                && !files
                    .iter()
                    .any(|f| f.extension().is_some_and(|x| x == "json")),
            "expected the temp file and no state file, found {files:?}\n{add}"
        );
    }
}

/// DEL removes the temp file a killed ADD left: nothing of the attachment survives.
#[test]
fn add_killed_mid_state_write_then_del_leaves_nothing() {
    let w = world();
    w.add_killed_mid_state_write();
    let del = w.at("DEL", None);
    del.ok();
    w.assert_clean(&del);
    w.assert_usable();
}

/// The next ADD of the attachment removes it too, even one that fails before writing state.
#[test]
fn add_killed_mid_state_write_then_failing_add_removes_temp() {
    let w = world();
    w.add_killed_mid_state_write();
    let mut conf = w.conf(0);
    conf["device"] = json!(format!("nx{}x{}", tag(), w.rig.n));
    let add = w.call_with("ADD", &conf, 0, &[]);
    add.err_code(100);
    assert!(
        !w.temp_file().exists(),
        "ADD left the stale temp file of its own attachment\n{add}"
    );
    w.rig.assert_state_empty(&add);
    w.assert_usable();
}

/// A node crash right after ADD put its first record in place: ADD syncs it to the disk in the
/// background while it moves the NIC, so what the crash leaves may be an empty or zero-filled
/// file (renamed before its data was written). Nothing of ADD's outlived the crash (it
/// waits for the disk before IPAM), so DEL takes the file as no record and finishes, instead
/// of refusing the attachment for ever as an unreadable record.
#[test]
fn a_record_torn_by_a_node_crash_does_not_stop_del() {
    for torn in [Vec::new(), vec![0u8; 512]] {
        let w = world();
        let add = w.at("ADD", Some("add:after-state:kill"));
        assert!(add.killed(), "{add}");
        let record = w.record_file();
        assert!(record.exists(), "no record in place\n{add}");
        std::fs::write(&record, &torn).unwrap();
        let del = w.at("DEL", None);
        del.ok();
        assert!(
            del.stderr.contains("cut its write short"),
            "DEL did not say why it had no record\n{del}"
        );
        w.assert_clean(&del);
        w.assert_usable();
    }
}
