//! A pod with NET_ADMIN and no user namespace reaches the host's links through its network
//! namespace id (issue 36, items 3 and 6). What it must not get: a device of its own riding a
//! NIC that another pod's ADD hands over (stacked between ADD's check and the move), another
//! pod's DEL failing for ever because it made a host link with that pod's NIC's name, or the
//! link it made handed to another tenant that selects that name. Needs root.

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;

const IF: &str = "net1";

fn msg(out: &RunOut) -> String {
    out.one_error()["msg"].as_str().unwrap_or("").to_owned()
}

/// The kernel moves a link before it renames it: a name taken in the pod at the moment of the
/// move leaves the NIC in the pod under its host name. ADD's error says where the NIC is (not
/// that it "stays where it was") and its rollback brings it home.
#[test]
fn an_ifname_taken_in_the_pod_during_the_move_is_reported_truly_and_the_nic_comes_home() {
    let rig = Arc::new(Rig::new());
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let (r, c, path, cid) = (rig.clone(), conf.clone(), pod.path(), rig.cid(0));
    let add = std::thread::spawn(move || {
        r.call(
            "ADD",
            &c,
            &path,
            &cid,
            IF,
            &[("RHD_FAULT", "add:after-state:sleep=1500")],
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let taker = format!("rh{}t{}", tag(), rig.n);
    ip(&[
        "-n", &pod.name, "link", "add", IF, "type", "veth", "peer", "name", &taker,
    ]);
    let add = add.join().expect("the ADD thread");
    assert!(!add.success(), "{add}");
    let m = msg(&add);
    // This kernel moves first (Linux 6.x); one that checks the name first would leave the NIC
    // on the host: either way the message names it where it is.
    assert!(
        m.contains(&format!("kept the name {}", nic.name))
            || m.contains(&format!("stays where it was, as {}", nic.name)),
        "the error says where the NIC is: {m}"
    );
    nic.assert_home(Some(&pod), &add);
    rig.assert_state_empty(&add);
}
