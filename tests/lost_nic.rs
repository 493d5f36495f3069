//! Lost NICs: a pod's netns dies without DEL (a force delete, a crashed runtime), and the
//! kernel hands the physical NIC back to the host under its pod-side name. The plugin must
//! recognise it by the tag in its alias (not by its name) and restore its original name and
//! MTU: in the next ADD that selects it, in GC, in DEL, and STATUS must call the node ready.
//! See `kill_netns_refunding` in tests/common for how the kernel's part is reproduced. Needs
//! root.

mod common;

use common::*;
use serde_json::{Value, json};

/// One NIC and up to two pods.
struct World {
    rig: Rig,
    nic: Veth,
    pods: [Netns; 2],
    cids: [String; 2],
    /// CNI_IFNAME, unique per test: it is the name a lost NIC bears on the shared host.
    ifname: String,
    conf: Value,
    /// Declared last, so dropped last: see `lost_nic_lock`.
    _serial: std::fs::File,
}

impl World {
    fn new(version: &str) -> World {
        let serial = lost_nic_lock();
        let rig = Rig::new();
        let nic = rig.nic(0);
        let pods = [rig.netns(0), rig.netns(1)];
        let cids = [rig.cid(0), rig.cid(1)];
        let mut conf = rig.conf(version, json!({"device": nic.name, "mtu": 1400}));
        conf["ipam"] = rig.host_local_ipam();
        World {
            _serial: serial,
            ifname: format!("lst{}x{}", tag(), rig.n),
            rig,
            nic,
            pods,
            cids,
            conf,
        }
    }

    fn call(&self, cmd: &str, conf: &Value, pod: usize) -> RunOut {
        self.rig.call(
            cmd,
            conf,
            &self.pods[pod].path(),
            &self.cids[pod],
            &self.ifname,
            &[],
        )
    }

    /// GC with `valid` (container, ifname) attachments.
    fn gc(&self, valid: &[(&str, &str)]) -> RunOut {
        let mut c = self.conf.clone();
        c["cniVersion"] = json!("1.1.0");
        c["cni.dev/valid-attachments"] = valid
            .iter()
            .map(|(cid, ifn)| json!({"containerID": cid, "ifname": ifn}))
            .collect();
        self.rig.call("GC", &c, "", "", "", &[])
    }

    fn status(&self) -> RunOut {
        let mut c = self.conf.clone();
        c["cniVersion"] = json!("1.1.0");
        self.rig.call("STATUS", &c, "", "", "", &[])
    }

    /// ADD into pod `i`, then let the pod die without DEL; the NIC comes back lost.
    fn attach_and_lose(&self, i: usize) {
        let add = self.call("ADD", &self.conf, i);
        add.ok();
        kill_netns_refunding(&self.pods[i], &self.ifname);
        self.assert_lost(&add);
    }

    /// The NIC is on the host under the pod-side name, still tagged.
    fn assert_lost(&self, ctx: &dyn std::fmt::Display) {
        let l = link(None, &self.ifname)
            .unwrap_or_else(|| panic!("the lost NIC is not on the host as {}\n{ctx}", self.ifname));
        assert_eq!(l.mac, self.nic.mac, "{ctx}");
        assert!(
            l.alias
                .as_deref()
                .is_some_and(|a| a.starts_with("rdma-host-device:v1:")),
            "the lost NIC lost its tag: {:?}\n{ctx}",
            l.alias
        );
        assert!(
            link(None, &self.nic.name).is_none(),
            "precondition: the original name is free\n{ctx}"
        );
    }

    /// Home under its original name and MTU, untagged, nothing under the pod-side name.
    fn assert_home(&self, ctx: &dyn std::fmt::Display) {
        self.nic.assert_home(None, ctx);
        let l = link(None, &self.nic.name).unwrap();
        assert!(
            l.alias.as_deref().is_none_or(str::is_empty),
            "restored NIC keeps alias {:?}\n{ctx}",
            l.alias
        );
        assert!(
            link(None, &self.ifname).is_none(),
            "a link still bears the pod-side name\n{ctx}"
        );
    }

    fn assert_no_ip_no_state(&self, ctx: &dyn std::fmt::Display) {
        let a = self.rig.allocations(&self.rig.net_name());
        assert!(a.is_empty(), "IPs still allocated: {a:?}\n{ctx}");
        self.rig.assert_state_empty(ctx);
    }
}

/// DEL cannot give a lost NIC its name back because another link took the name meanwhile:
/// the error says so plainly, by names (not by interface index), so the operator knows which
/// link to rename.
#[test]
fn del_of_a_lost_nic_whose_name_is_taken_says_so_by_name() {
    let w = World::new("1.0.0");
    w.attach_and_lose(0);
    let squat = Veth::new(&w.nic.name, &w.rig.peer_name(11), 1500);
    let del = w.call("DEL", &w.conf, 0);
    let e = del.err();
    let msg = format!(
        "{} {}",
        e["msg"].as_str().unwrap_or(""),
        e["details"].as_str().unwrap_or("")
    );
    let want = format!(
        "the NIC is back on the host as {} because {} is taken",
        w.ifname, w.nic.name
    );
    assert!(msg.contains(&want), "the error must say {want:?}\n{del}");
    assert!(
        !msg.contains("link #"),
        "links are named by name, not index\n{del}"
    );
    drop(squat);
    let del = w.call("DEL", &w.conf, 0);
    del.ok();
    w.assert_home(&del);
    w.assert_no_ip_no_state(&del);
}

// ---------------------------------------------------------------- ADD

fn add_takes_lost_nic(selector: impl FnOnce(&World) -> Value) {
    let mut w = World::new("1.0.0");
    w.attach_and_lose(0);
    if let Value::Object(sel) = selector(&w) {
        for k in ["device", "hwaddr"] {
            w.conf.as_object_mut().unwrap().remove(k);
        }
        for (k, v) in sel {
            w.conf[k] = v;
        }
    }
    // Pod 0's attachment was never deleted: its record is still there. The NIC is free anyway.
    let add = w.call("ADD", &w.conf, 1);
    add.ok();
    let l = link(Some(&w.pods[1].name), &w.ifname)
        .unwrap_or_else(|| panic!("pod 1 did not get the NIC\n{add}"));
    assert_eq!(l.mac, w.nic.mac, "{add}");
    assert_eq!(l.mtu, 1400, "{add}");
    assert!(
        link(None, &w.ifname).is_none(),
        "still lost on the host\n{add}"
    );
    // The dead pod's DEL comes late: it must not touch pod 1's NIC, but releases its IP.
    let del0 = w.call("DEL", &w.conf, 0);
    del0.ok();
    assert!(
        link(Some(&w.pods[1].name), &w.ifname).is_some(),
        "the dead pod's DEL took the NIC from pod 1\n{del0}"
    );
    assert!(
        w.rig
            .allocations_of(&w.rig.net_name(), &w.cids[0])
            .is_empty(),
        "dead pod's IP not released\n{del0}"
    );
    let del1 = w.call("DEL", &w.conf, 1);
    del1.ok();
    w.assert_home(&del1);
    w.assert_no_ip_no_state(&del1);
}

#[test]
fn add_by_original_name_restores_lost_nic() {
    add_takes_lost_nic(|w| json!({"device": w.nic.name}));
}

#[test]
fn add_by_mac_restores_lost_nic() {
    add_takes_lost_nic(|w| json!({"hwaddr": w.nic.mac.to_uppercase()}));
}

/// The kernel returns a NIC some time after the netns is gone, so the runtime's DEL may run
/// before it is back: DEL finds nothing, releases the IP and forgets the attachment. The NIC
/// then shows up tagged, with no record left; ADD must still recognise it.
#[test]
fn add_restores_nic_that_returned_after_del() {
    let w = World::new("1.0.0");
    lose_after_del(&w);
    let add = w.call("ADD", &w.conf, 1);
    add.ok();
    assert!(link(Some(&w.pods[1].name), &w.ifname).is_some(), "{add}");
    let del = w.call("DEL", &w.conf, 1);
    del.ok();
    w.assert_home(&del);
    w.assert_no_ip_no_state(&del);
}

/// ADD into pod 0; the pod dies with the NIC "in flight"; DEL runs; then the NIC lands on the
/// host lost, with no state file left about it.
fn lose_after_del(w: &World) {
    let add = w.call("ADD", &w.conf, 0);
    add.ok();
    let limbo = w.rig.netns(7);
    ip(&[
        "-n",
        &w.pods[0].name,
        "link",
        "set",
        "dev",
        &w.ifname,
        "down",
    ]);
    ip(&[
        "-n",
        &w.pods[0].name,
        "link",
        "set",
        "dev",
        &w.ifname,
        "netns",
        &limbo.name,
    ]);
    w.pods[0].delete();
    let del = w.call("DEL", &w.conf, 0);
    del.ok();
    w.assert_no_ip_no_state(&del);
    kill_netns_refunding(&limbo, &w.ifname);
    w.assert_lost(&del);
}

// ---------------------------------------------------------------- GC, DEL, STATUS

#[test]
fn gc_restores_lost_nic_of_stale_attachment() {
    let w = World::new("1.0.0");
    w.attach_and_lose(0);
    let gc = w.gc(&[]);
    gc.ok();
    w.assert_home(&gc);
    w.assert_no_ip_no_state(&gc);
}

#[test]
fn gc_restores_lost_nic_without_record() {
    let w = World::new("1.0.0");
    lose_after_del(&w);
    // Some other attachment is valid; this NIC's is not.
    let gc = w.gc(&[("someone-else", "net1")]);
    gc.ok();
    w.assert_home(&gc);
    w.assert_no_ip_no_state(&gc);
}

#[test]
fn gc_leaves_lost_nic_of_valid_attachment_to_its_del() {
    let w = World::new("1.0.0");
    w.attach_and_lose(0);
    let gc = w.gc(&[(w.cids[0].as_str(), w.ifname.as_str())]);
    gc.ok();
    w.assert_lost(&gc);
    let del = w.call("DEL", &w.conf, 0);
    del.ok();
    w.assert_home(&del);
    w.assert_no_ip_no_state(&del);
}

#[test]
fn del_restores_its_lost_nic() {
    let w = World::new("1.0.0");
    w.attach_and_lose(0);
    let del = w.call("DEL", &w.conf, 0);
    del.ok();
    w.assert_home(&del);
    w.assert_no_ip_no_state(&del);
    w.call("DEL", &w.conf, 0).ok();
}

#[test]
fn status_restores_a_lost_nic_and_is_ready() {
    let w = World::new("1.0.0");
    let st = w.status();
    st.ok();
    w.attach_and_lose(0);
    // Record still there (no DEL): the NIC is recognised by its tag, restored, and ready.
    let st = w.status();
    st.ok();
    assert!(
        st.stderr.contains("lost NIC") && st.stderr.contains(&w.ifname),
        "STATUS did not recognise the lost NIC\n{st}"
    );
    w.assert_home(&st);
    w.call("DEL", &w.conf, 0).ok();
    w.assert_home(&"after DEL");
    w.status().ok();
}

#[test]
fn status_restores_a_lost_nic_without_record() {
    let w = World::new("1.0.0");
    lose_after_del(&w);
    let st = w.status();
    st.ok();
    assert!(st.stderr.contains("lost NIC"), "{st}");
    w.assert_home(&st);
    // Nothing left for GC to do.
    let gc = w.gc(&[]);
    gc.ok();
    w.assert_home(&gc);
}
