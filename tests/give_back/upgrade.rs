//! Upgrade and rollback of the DaemonSet while pods hold NICs. The install container replaces
//! /opt/cni/bin/rdma-host-device while attachments made by the other version exist; whichever
//! version runs next must CHECK them, DEL them (the NIC home under its name, MTU and admin
//! state, its IP released, its state gone) and GC them, and leave the valid ones alone. Both
//! directions: the previous release's attachments handled by this build (upgrade), and this
//! build's by the previous release (rollback). And a record a newer version wrote in a format
//! this one cannot undo is refused with TryAgain, untouched.
//!
//! The previous release's plugin is `$RHD_PREVIOUS_PLUGIN`: scripts/test.sh builds it from the
//! commit `scripts/previous-release.sh` names. Without it a plain `cargo test` skips these
//! (loudly); under scripts/test.sh or CI that is a failure. Needs root.

use test_support as common;

use common::*;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

const PREVIOUS_ENV: &str = "RHD_PREVIOUS_PLUGIN";

/// The previous release's plugin, or `None` (said on stderr) where a skip is allowed.
fn previous() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PREVIOUS_ENV) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "${PREVIOUS_ENV} = {} is no file", p.display());
        return Some(p);
    }
    if let Some(var) = must_run() {
        panic!(
            "${PREVIOUS_ENV} is not set and ${var} is: build the previous release with scripts/previous-release.sh (scripts/test.sh does)"
        );
    }
    let _ = std::io::stderr().write_all(
        format!("SKIPPED in upgrade: ${PREVIOUS_ENV} is not set (scripts/previous-release.sh builds it)\n")
            .as_bytes(),
    );
    None
}

/// Three pods hold NICs made by `from`; then `to` is the plugin: it CHECKs and DELs pod 0's,
/// GC with only pod 2 valid takes pod 1's, and pod 2's stays until its DEL.
fn hand_over(from: &Path, to: &Path) {
    let w = World::losing("1.1.0", 3, 3);
    w.rig.use_plugin(from);
    let mut added = Vec::new();
    for i in 0..3 {
        let add = w.call("ADD", i, i, &[]);
        add.ok();
        added.push(add.json());
    }
    w.rig.use_plugin(to);
    let ctx = format!("made by {}, handled by {}", from.display(), to.display());

    let mut check = w.conf(0);
    check["prevResult"] = added[0].clone();
    let out = w.call_with("CHECK", &check, 0, &[]);
    assert!(
        out.success(),
        "CHECK of the other version's attachment\n{ctx}\n{out}"
    );

    let out = w.call("DEL", 0, 0, &[]);
    out.ok();
    w.nics[0].assert_home(Some(&w.pods[0]), &out);
    assert!(
        w.rig
            .allocations_of(&w.rig.net_name(), &w.cid(0))
            .is_empty(),
        "DEL left pod 0's IP allocated\n{ctx}\n{out}"
    );

    let gc = w.gc(&w.attachments(&[2]), &[]);
    gc.ok();
    w.nics[1].assert_home(Some(&w.pods[1]), &gc);
    assert!(
        w.rig
            .allocations_of(&w.rig.net_name(), &w.cid(1))
            .is_empty(),
        "GC left pod 1's IP allocated\n{ctx}\n{gc}"
    );
    assert!(w.attached(2, 2), "GC took valid pod 2's NIC\n{ctx}\n{gc}");

    let out = w.call("DEL", 2, 2, &[]);
    out.ok();
    w.nics[2].assert_home(Some(&w.pods[2]), &out);
    w.rig.assert_state_empty(&format!("{ctx}\n{out}"));
    assert!(
        w.rig.allocations(&w.rig.net_name()).is_empty(),
        "IPs left allocated\n{ctx}"
    );
}

#[test]
fn an_upgrade_checks_deletes_and_collects_the_previous_releases_attachments() {
    let Some(prev) = previous() else { return };
    hand_over(&prev, &plugin());
}

#[test]
fn a_rollback_checks_deletes_and_collects_this_builds_attachments() {
    let Some(prev) = previous() else { return };
    hand_over(&plugin(), &prev);
}

/// A record in a format newer than this build's (what a later release writes after a change
/// an older binary would undo wrongly): DEL and CHECK answer TryAgain (11) naming the file
/// and the way out, GC leaves it, and the NIC stays in its pod until a version that reads it
/// runs (here: the record put back as this build wrote it).
#[test]
fn a_record_of_a_newer_format_is_refused_and_left_untouched() {
    let w = World::losing("1.1.0", 1, 1);
    let add = w.call("ADD", 0, 0, &[]);
    add.ok();
    let file = w
        .rig
        .state_dir()
        .join(format!("{}:{}.json", w.cid(0), w.ifname));
    let ours = std::fs::read(&file).unwrap();
    let mut newer: serde_json::Value = serde_json::from_slice(&ours).unwrap();
    let format = newer["format"]
        .as_u64()
        .expect("records carry their format");
    newer["format"] = json!(format + 1);
    newer["undoneOnlyByNewerVersions"] = json!(true);
    std::fs::write(&file, newer.to_string()).unwrap();

    let del = w.call("DEL", 0, 0, &[]);
    let e = del.err_code(11);
    let msg = e["msg"].as_str().unwrap_or("");
    assert!(
        msg.contains(&*file.to_string_lossy()) && msg.contains("newer") && msg.contains("forward"),
        "{del}"
    );
    assert!(w.attached(0, 0), "DEL touched the NIC\n{del}");
    let mut check = w.conf(0);
    check["prevResult"] = add.json();
    w.call_with("CHECK", &check, 0, &[]).err_code(11);
    let gc = w.gc(&[], &[]);
    assert!(w.attached(0, 0), "GC touched the NIC\n{gc}");
    assert!(file.exists(), "the record is gone\n{gc}");

    std::fs::write(&file, ours).unwrap();
    let del = w.call("DEL", 0, 0, &[]);
    del.ok();
    w.nics[0].assert_home(Some(&w.pods[0]), &del);
    w.rig.assert_state_empty(&del);
}
