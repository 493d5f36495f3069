//! Lost NICs: a pod's netns dies without DEL (a force delete, a crashed runtime), and the
//! kernel hands the physical NIC back to the host under its pod-side name. The plugin must
//! recognise it by the tag in its alias (not by its name) and restore its original name and
//! MTU: in the next ADD that selects it, in DEL, in GC (tests/give_back/gc.rs), and STATUS must call the
//! node ready. See `kill_netns_refunding` in crates/test-support for how the kernel's part is
//! reproduced. Needs root.

use test_support as common;

use common::*;
use serde_json::{Value, json};

/// One NIC and two pods, holding the lost-NIC lock.
fn world() -> World {
    World::losing("1.0.0", 1, 2)
}

/// DEL cannot give a lost NIC its name back because another link took the name meanwhile (a
/// pod with NET_ADMIN can make one on the host): the NIC is restored by its identity under a
/// name that says so, DEL succeeds, and the log says, by names, where the NIC is and why.
#[test]
fn del_of_a_lost_nic_whose_name_is_taken_restores_it_under_a_name_that_says_so() {
    let w = world();
    w.attach_and_lose(0, 0);
    let squat = Veth::new(&w.nics[0].name, &w.rig.peer_name(11), 1500);
    let del = w.call("DEL", 0, 0, &[]);
    del.ok();
    w.assert_no_ip_no_state(&del);
    let home = w.nics[0]
        .on_host()
        .unwrap_or_else(|| panic!("the NIC is not on the host\n{del}"));
    let stem: String = w.nics[0].name.chars().take(9).collect();
    assert!(
        home.name.starts_with(&format!("{stem}~")),
        "restored as {}\n{del}",
        home.name
    );
    assert_eq!(home.mtu, w.nics[0].mtu, "{del}");
    assert!(
        del.stderr.contains(&format!(
            "came home as {}: its name {} is taken on the host by {}",
            home.name, w.nics[0].name, w.nics[0].name
        )),
        "the log says where the NIC is and why\n{del}"
    );
    assert_eq!(
        home.alias.as_deref(),
        Some(format!("rdma-host-device:displaced:{}", w.nics[0].name).as_str()),
        "{del}"
    );
    drop(squat);
    ip(&["link", "set", &home.name, "name", &w.nics[0].name]);
    w.nics[0].assert_home(None, &"renamed back");
    assert!(link(None, &w.ifname).is_none(), "{del}");
}

// ---------------------------------------------------------------- ADD

fn add_takes_lost_nic(selector: impl FnOnce(&World) -> Value) {
    let w = world();
    w.attach_and_lose(0, 0);
    let mut conf = w.conf(0);
    if let Value::Object(sel) = selector(&w) {
        for k in ["device", "hwaddr"] {
            conf.as_object_mut().unwrap().remove(k);
        }
        for (k, v) in sel {
            conf[k] = v;
        }
    }
    // Pod 0's attachment was never deleted: its record is still there. The NIC is free anyway.
    let add = w.call_with("ADD", &conf, 1, &[]);
    add.ok();
    let l = link(Some(&w.pods[1].name), &w.ifname)
        .unwrap_or_else(|| panic!("pod 1 did not get the NIC\n{add}"));
    assert_eq!(l.mac, w.nics[0].mac, "{add}");
    assert_eq!(l.mtu, 1400, "{add}");
    assert!(
        link(None, &w.ifname).is_none(),
        "still lost on the host\n{add}"
    );
    // The dead pod's DEL comes late: it must not touch pod 1's NIC, but releases its IP.
    let del0 = w.call_with("DEL", &conf, 0, &[]);
    del0.ok();
    assert!(
        link(Some(&w.pods[1].name), &w.ifname).is_some(),
        "the dead pod's DEL took the NIC from pod 1\n{del0}"
    );
    assert!(
        w.rig
            .allocations_of(&w.rig.net_name(), &w.cid(0))
            .is_empty(),
        "dead pod's IP not released\n{del0}"
    );
    let del1 = w.call_with("DEL", &conf, 1, &[]);
    del1.ok();
    w.assert_restored_released(0, &del1);
}

#[test]
fn add_by_original_name_gives_back_lost_nic() {
    add_takes_lost_nic(|w| json!({"device": w.nics[0].name}));
}

#[test]
fn add_by_mac_gives_back_lost_nic() {
    add_takes_lost_nic(|w| json!({"hwaddr": w.nics[0].mac.to_uppercase()}));
}

/// The kernel returns a NIC some time after the netns is gone, so the runtime's DEL may run
/// before it is back: DEL finds nothing, releases the IP and forgets the attachment. The NIC
/// then shows up tagged, with no record left; ADD must still recognise it.
#[test]
fn add_gives_back_nic_that_returned_after_del() {
    let w = world();
    w.lose_after_del(0, 0);
    let add = w.call("ADD", 0, 1, &[]);
    add.ok();
    assert!(link(Some(&w.pods[1].name), &w.ifname).is_some(), "{add}");
    let del = w.call("DEL", 0, 1, &[]);
    del.ok();
    w.assert_restored_released(0, &del);
}

// ---------------------------------------------------------------- DEL, STATUS (GC: tests/give_back/gc.rs)

#[test]
fn del_gives_back_its_lost_nic() {
    let w = world();
    w.attach_and_lose(0, 0);
    let del = w.call("DEL", 0, 0, &[]);
    del.ok();
    w.assert_restored_released(0, &del);
    w.call("DEL", 0, 0, &[]).ok();
}

#[test]
fn status_gives_back_a_lost_nic_and_is_ready() {
    let w = world();
    let st = w.status();
    st.ok();
    w.attach_and_lose(0, 0);
    // Record still there (no DEL): the NIC is recognised by its tag, restored, and ready.
    let st = w.status();
    st.ok();
    assert!(
        st.stderr.contains("lost NIC") && st.stderr.contains(&w.ifname),
        "STATUS did not recognise the lost NIC\n{st}"
    );
    w.assert_restored(0, &st);
    w.call("DEL", 0, 0, &[]).ok();
    w.assert_restored(0, &"after DEL");
    w.status().ok();
}

#[test]
fn status_gives_back_a_lost_nic_without_record() {
    let w = world();
    w.lose_after_del(0, 0);
    let st = w.status();
    st.ok();
    assert!(st.stderr.contains("lost NIC"), "{st}");
    w.assert_restored(0, &st);
    // Nothing left for GC to do.
    let gc = w.gc(&[], &[]);
    gc.ok();
    w.assert_restored(0, &gc);
}
