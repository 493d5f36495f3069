//! GC (CNI 1.1.0): it releases the attachments the runtime no longer lists and restores NICs
//! lost to dead pods (with or without their record), and leaves valid attachments and
//! attachments another call is working on alone. On a node where some things cannot be
//! cleaned it must clean everything else, report every failure (the first as the error, the
//! others in its details), and finish the job on a later GC once the obstacle is gone. Needs
//! root.

use test_support as common;

use common::*;
use rdma_host_device_core::state::owner_key;
use std::os::fd::AsRawFd;

/// NIC `i` goes to pod `i`; configs of cniVersion 1.1.0 (GC's).
fn world(n: u32) -> World {
    World::losing("1.1.0", n, n)
}

/// This module's steps on the shared world.
trait Collected {
    fn add(&self, i: usize);
    fn has_record(&self, i: usize) -> bool;
    fn assert_released(&self, i: usize, ctx: &dyn std::fmt::Display);
}

impl Collected for World {
    fn add(&self, i: usize) {
        self.call("ADD", i, i, &[]).ok();
    }

    fn has_record(&self, i: usize) -> bool {
        self.rig
            .state_dir()
            .join(format!("{}:{}.json", self.cid(i), self.ifname))
            .exists()
    }

    fn assert_released(&self, i: usize, ctx: &dyn std::fmt::Display) {
        self.nics[i].assert_home(Some(&self.pods[i]), ctx);
        assert!(!self.has_record(i), "attachment {i} still has state\n{ctx}");
        let a = self.rig.allocations_of(&self.rig.net_name(), &self.cid(i));
        assert!(a.is_empty(), "attachment {i} still has IP {a:?}\n{ctx}");
    }
}

/// The whole error text a runtime would log: msg and details.
fn error_text(out: &RunOut) -> String {
    let e = out.one_error();
    format!(
        "{} {}",
        e["msg"].as_str().unwrap_or(""),
        e["details"].as_str().unwrap_or("")
    )
}

#[test]
fn gc_keeps_going_past_errors_and_reports_them_all() {
    // 0, 1, 2: stale; the second GC reaches fails (an injected fault: a NIC whose name is
    // taken on the host no longer stops GC, it comes home under a name that says so). 3: lost
    // on the host without a record, and restoring it fails too. 4: valid.
    let w = world(5);
    for i in 0..5 {
        w.add(i);
    }
    kill_netns_refunding(&w.pods[3], &w.ifname);
    std::fs::remove_file(
        w.rig
            .state_dir()
            .join(format!("{}:{}.json", w.cid(3), w.ifname)),
    )
    .expect("3's record");

    let gc = w.gc(
        &w.attachments(&[4]),
        &[("RHD_FAULT", "gc:release:error@2,gc:lost-nic:error@1")],
    );
    let text = error_text(&gc);
    let kept: Vec<usize> = (0..3).filter(|i| w.has_record(*i)).collect();
    let [failed] = kept[..] else {
        panic!("exactly one stale attachment must be kept, not {kept:?}\n{gc}")
    };
    for (what, name) in [("stale", &w.cid(failed)), ("lost 3", &w.nics[3].name)] {
        assert!(
            text.contains(name.as_str()),
            "GC did not report the failure of {what} ({name})\n{gc}"
        );
    }
    assert!(
        text.contains("1 more error(s)"),
        "the second error must be in details\n{gc}"
    );
    for i in (0..3).filter(|i| *i != failed) {
        w.assert_released(i, &gc);
    }
    assert!(
        w.attached(failed, failed),
        "{failed} must stay as it was\n{gc}"
    );
    assert!(
        link(None, &w.ifname).is_some_and(|l| l.mac == w.nics[3].mac),
        "3 must stay lost\n{gc}"
    );
    assert!(
        w.attached(4, 4) && w.has_record(4),
        "GC touched valid 4\n{gc}"
    );

    // The obstacles go; the next GC finishes the job.
    let gc = w.gc(&w.attachments(&[4]), &[]);
    gc.ok();
    w.assert_released(failed, &gc);
    w.nics[3].assert_home(None, &gc);
    assert!(link(None, &w.ifname).is_none(), "{gc}");
    assert!(w.attached(4, 4), "GC touched valid 4\n{gc}");
    let del = w.call("DEL", 4, 4, &[]);
    del.ok();
    w.assert_released(4, &del);
    w.rig.assert_state_empty(&del);
}

#[test]
fn gc_injected_failures_do_not_stop_it() {
    // Two stale attachments and two lost NICs; the first of each kind fails.
    let w = world(4);
    let lost_if = format!("gl{}x{}", tag(), w.rig.n);
    for i in 0..2 {
        w.add(i);
    }
    // 2, 3: the runtime's DEL ran before the kernel returned the NIC: no record is left.
    let limbo = w.rig.netns(9);
    for i in 2..4 {
        let ifname = format!("{lost_if}{i}");
        let call = |cmd| {
            w.rig
                .call(cmd, &w.conf(i), &w.pods[i].path(), &w.cid(i), &ifname, &[])
        };
        call("ADD").ok();
        ip(&[
            "-n",
            &w.pods[i].name,
            "link",
            "set",
            &ifname,
            "netns",
            &limbo.name,
        ]);
        w.pods[i].delete();
        call("DEL").ok();
        assert!(!w.has_record(i));
    }
    ip(&[
        "-n",
        &limbo.name,
        "link",
        "set",
        &format!("{lost_if}2"),
        "netns",
        &std::process::id().to_string(),
    ]);
    kill_netns_refunding(&limbo, &format!("{lost_if}3"));
    for i in 2..4 {
        assert!(
            link(None, &format!("{lost_if}{i}")).is_some(),
            "{i} is not lost on the host"
        );
    }
    let gc = w.gc(
        &[],
        &[("RHD_FAULT", "gc:release:error@1,gc:lost-nic:error@1")],
    );
    let text = error_text(&gc);
    assert_eq!(
        text.matches("injected fault").count(),
        2,
        "both injected failures must be reported\n{gc}"
    );
    let released = (0..2).filter(|&i| !w.has_record(i)).count();
    assert_eq!(
        released, 1,
        "the other stale attachment must be released\n{gc}"
    );
    let restored = (2..4)
        .filter(|&i| link(None, &w.nics[i].name).is_some())
        .count();
    assert_eq!(restored, 1, "the other lost NIC must be restored\n{gc}");

    let gc = w.gc(&[], &[]);
    gc.ok();
    for i in 0..4 {
        w.assert_released(i, &gc);
    }
    w.rig.assert_state_empty(&gc);
}

/// GC names one network: the valid list is the runtime's for that name only, so another
/// network's attachments on the node (same state directory) are none of its business: not its
/// attachment, not its NIC lost on the host after its pod died, not its IPs. (The old GC gave
/// every lost NIC on the host its name back, whatever network it belonged to.) That network's
/// own GC then releases both.
#[test]
fn gc_of_one_network_touches_nothing_of_another() {
    let w = world(3);
    let net_b = format!("{}-b", w.rig.net_name());
    let conf_b = |i: usize| {
        let mut c = w.conf(i);
        c["name"] = serde_json::json!(net_b);
        c
    };
    // 0: network A. 1, 2: network B; 2's pod dies and its NIC is lost on the host.
    w.add(0);
    for i in 1..3 {
        w.rig
            .call(
                "ADD",
                &conf_b(i),
                &w.pods[i].path(),
                &w.cid(i),
                &w.ifname,
                &[],
            )
            .ok();
    }
    kill_netns_refunding(&w.pods[2], &w.ifname);
    let lost = || link(None, &w.ifname).is_some_and(|l| l.mac == w.nics[2].mac);
    assert!(lost(), "2 is not lost on the host");
    let b_ips = w.rig.allocations(&net_b);
    assert_eq!(b_ips.len(), 2, "network B's IPs {b_ips:?}");

    let gc = w.gc(&[], &[]);
    gc.ok();
    w.assert_released(0, &gc);
    assert!(
        w.attached(1, 1) && w.has_record(1),
        "GC of network A released network B's attachment 1\n{gc}"
    );
    assert!(
        lost() && w.has_record(2),
        "GC of network A restored network B's lost NIC 2\n{gc}"
    );
    assert_eq!(
        w.rig.allocations(&net_b),
        b_ips,
        "GC of network A released network B's IPs\n{gc}"
    );

    let mut c = conf_b(0);
    c["cni.dev/valid-attachments"] = serde_json::json!([]);
    let gc = w.rig.call("GC", &c, "", "", "", &[]);
    gc.ok();
    w.nics[1].assert_home(Some(&w.pods[1]), &gc);
    w.nics[2].assert_home(None, &gc);
    assert!(w.rig.allocations(&net_b).is_empty(), "{gc}");
    w.rig.assert_state_empty(&gc);
}

/// An attachment locked by another call (an ADD still running: the runtime may list valid
/// attachments before it finishes) is left alone; the next GC takes it.
#[test]
fn gc_skips_attachment_busy_with_another_call() {
    let w = world(2);
    w.add(0);
    w.add(1);
    let lock = w.rig.state_dir().join(format!(
        "locks/att-{}.lock",
        owner_key(&w.cid(0), &w.ifname)
    ));
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    let f = std::fs::File::create(&lock).unwrap();
    // SAFETY: flock on our own fd.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    let gc = w.gc(&[], &[]);
    gc.ok();
    assert!(
        w.attached(0, 0) && w.has_record(0),
        "GC took a busy attachment\n{gc}"
    );
    w.assert_released(1, &gc);
    // And DEL of that attachment waits for the lock (bounded), then says "try again".
    let del = w.call("DEL", 0, 0, &[("RHD_LOCK_TIMEOUT_MS", "200")]);
    assert_eq!(del.one_error()["code"], 11, "{del}");
    assert!(w.attached(0, 0), "{del}");
    drop(f);
    std::fs::remove_file(&lock).unwrap();
    let gc = w.gc(&[], &[]);
    gc.ok();
    w.assert_released(0, &gc);
    w.rig.assert_state_empty(&gc);
}

/// An ADD killed between writing its state's temp file and renaming it leaves the temp file;
/// GC removes it, whether the attachment is still listed as valid or not, but never while
/// another call holds the attachment (it may be writing that file right now).
#[test]
fn gc_removes_temp_files_left_by_killed_writes() {
    let w = world(2);
    let temp = |i: usize| {
        w.rig
            .state_dir()
            .join(format!("{}:{}.json.tmp", w.cid(i), w.ifname))
    };
    for i in 0..2 {
        let add = w.call("ADD", i, i, &[("RHD_FAULT", "state:before-rename:kill")]);
        assert!(
            add.killed(),
            "ADD {i} was not killed inside the state write\n{add}"
        );
        assert!(temp(i).exists(), "no temp file left by ADD {i}\n{add}");
    }
    // 0 is busy with another call: its temp file may be a write in progress.
    let lock = w.rig.state_dir().join(format!(
        "locks/att-{}.lock",
        owner_key(&w.cid(0), &w.ifname)
    ));
    let f = std::fs::File::open(&lock)
        .unwrap_or_else(|e| panic!("the killed ADD's lock file {}: {e}", lock.display()));
    // SAFETY: flock on our own fd.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    // 1 is listed as valid (the runtime may still think the ADD is running): still garbage.
    let gc = w.gc(&w.attachments(&[1]), &[]);
    gc.ok();
    assert!(
        temp(0).exists(),
        "GC removed a temp file under a held lock\n{gc}"
    );
    assert!(!temp(1).exists(), "GC left a stale temp file\n{gc}");
    drop(f);
    let gc = w.gc(&[], &[]);
    gc.ok();
    w.rig.assert_state_empty(&gc);
    for i in 0..2 {
        w.nics[i].assert_home(Some(&w.pods[i]), &gc);
    }
}

// ---------------------------------------------------------------- lost NICs (tests/give_back/lost_nic.rs)

#[test]
fn gc_gives_back_lost_nic_of_stale_attachment() {
    let w = World::losing("1.0.0", 1, 1);
    w.attach_and_lose(0, 0);
    let gc = w.gc(&[], &[]);
    gc.ok();
    w.assert_restored_released(0, &gc);
}

#[test]
fn gc_gives_back_lost_nic_without_record() {
    let w = World::losing("1.0.0", 1, 1);
    w.lose_after_del(0, 0);
    // Some other attachment is valid; this NIC's is not.
    let gc = w.gc(&[("someone-else".into(), "net1".into())], &[]);
    gc.ok();
    w.assert_restored_released(0, &gc);
}

#[test]
fn gc_leaves_lost_nic_of_valid_attachment_to_its_del() {
    let w = World::losing("1.0.0", 1, 1);
    w.attach_and_lose(0, 0);
    let gc = w.gc(&w.attachments(&[0]), &[]);
    gc.ok();
    w.assert_lost(0, &gc);
    let del = w.call("DEL", 0, 0, &[]);
    del.ok();
    w.assert_restored_released(0, &del);
}

/// The node agent's GC (`flows::collect_leaked`, no runtime's list): it releases exactly the
/// attachments it names and counts every other record valid, so an attachment it did not name
/// (a live pod's, or one whose ADD finished after the agent read the store) is never taken,
/// even though no list names it valid.
#[test]
fn the_agents_collect_releases_exactly_the_named_attachments() {
    use rdma_host_device::cni::env::{Command as Verb, Env};
    use rdma_host_device::cni::netconf::{NetConf, ValidAttachment};
    let w = world(3);
    for i in 0..3 {
        w.add(i);
        assert!(w.attached(i, i), "ADD {i}");
    }
    let node: rdma_host_device_core::node::Node =
        serde_json::from_str(&std::fs::read_to_string(w.rig.node_config()).unwrap()).unwrap();
    let env = Env {
        command: Verb::Gc,
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        args: String::new(),
        path: w
            .rig
            .cni_path("1.1.0")
            .split(':')
            .map(std::path::PathBuf::from)
            .collect(),
    };
    // What the agent sends: the network, no ipam (each record has ADD's), no list.
    let raw = serde_json::json!({"cniVersion": "1.1.0", "name": w.rig.net_name(),
        "type": "rdma-host-device"});
    let conf = NetConf::parse_strict(raw.to_string().into_bytes(), &node).unwrap();
    let leaked = [ValidAttachment {
        container_id: w.cid(0),
        ifname: w.ifname.clone(),
    }];
    // A thread of its own, as the agent does: the flow enters pods' namespaces.
    let out = std::thread::scope(|s| {
        s.spawn(|| rdma_host_device::flows::collect_leaked(&env, &conf, &node, &leaked))
            .join()
            .unwrap()
    });
    assert!(out.is_ok(), "{out:?}");
    w.assert_released(0, &"collect of 0");
    for i in 1..3 {
        assert!(
            w.attached(i, i) && w.has_record(i),
            "collect touched {i}, which it was not given"
        );
        let a = w.rig.allocations_of(&w.rig.net_name(), &w.cid(i));
        assert_eq!(a.len(), 1, "{i}'s lease: {a:?}");
    }
    for i in 1..3 {
        let del = w.call("DEL", i, i, &[]);
        del.ok();
        w.assert_released(i, &del);
    }
}
