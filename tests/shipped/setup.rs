//! scripts/setup.sh decides what to install, replace or refuse from apt's simulated plan. These
//! tests feed it plans apt really printed (testdata/setup/, recorded with `apt-get -s install`
//! on a fresh machine of the kind this project builds on: Debian 12 with a backported
//! qemu-utils 10.0) and check its decisions, without installing anything and without root.
//! The last test checks the machine the suite runs on: after `scripts/test.sh` ran setup,
//! nothing of the test set is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn plan(name: &str) -> PathBuf {
    Path::new(ROOT).join("testdata/setup").join(name)
}

fn setup(args: &[&str]) -> Output {
    Command::new(Path::new(ROOT).join("scripts/setup.sh"))
        .args(args)
        .output()
        .expect("run scripts/setup.sh")
}

/// Setup's decision lines (stdout) for a recorded plan: (kind, package, rest...).
fn decisions(o: &Output) -> Vec<Vec<String>> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn has(d: &[Vec<String>], kind: &str, pkg: &str) -> bool {
    d.iter().any(|l| l[0] == kind && l[1] == pkg)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The version apt's plan installs `pkg` at, read from the plan itself.
fn planned_version(file: &str, pkg: &str) -> String {
    let text = std::fs::read_to_string(plan(file)).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("Inst {pkg} (")))
        .unwrap_or_else(|| panic!("{file} does not install {pkg}"));
    line.split_whitespace()
        .nth(2)
        .unwrap()
        .trim_start_matches('(')
        .to_owned()
}

#[test]
fn a_backported_qemu_utils_is_replaced_by_debian_12s_of_the_qemu_version_it_installs() {
    let o = setup(&[
        "--for",
        "test",
        "--plan-from",
        plan("fresh-test.txt").to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "setup refused a fresh machine's plan: {}",
        stderr(&o)
    );
    let d = decisions(&o);
    let qemu = planned_version("fresh-test.txt", "qemu-system-x86");
    let replace = d
        .iter()
        .find(|l| l[0] == "replace" && l[1] == "qemu-utils")
        .unwrap_or_else(|| panic!("no replacement of qemu-utils: {d:?}"));
    assert_eq!(
        replace[2], "1:10.0.2+ds-2+deb13u1~bpo12+1",
        "the backport being replaced"
    );
    assert_eq!(replace[3], qemu, "qemu-utils must match qemu-system-x86");
    assert!(
        stderr(&o).contains("replacing qemu-utils 1:10.0.2+ds-2+deb13u1~bpo12+1 by Debian 12's"),
        "one line says so: {}",
        stderr(&o)
    );
    assert!(!d.iter().any(|l| l[0] == "refuse"), "{d:?}");
}

#[test]
fn the_test_set_brings_what_the_tests_run_and_no_browser() {
    let o = setup(&[
        "--for",
        "test",
        "--plan-from",
        plan("fresh-test.txt").to_str().unwrap(),
    ]);
    let d = decisions(&o);
    for p in [
        "qemu-system-x86",
        "containerd",
        "runc",
        "podman",
        "golang-go",
        "prometheus",
    ] {
        assert!(has(&d, "new", p), "{p} missing from the test set's plan");
    }
    assert!(
        !has(&d, "new", "chromium"),
        "the tests must not install Chromium"
    );
    let upgrades: Vec<&str> = d
        .iter()
        .filter(|l| l[0] == "upgrade")
        .map(|l| l[1].as_str())
        .collect();
    assert_eq!(
        upgrades,
        ["login", "passwd"],
        "only what a new package forces"
    );
    let err = stderr(&o);
    assert!(err.contains("86 new packages"), "{err}");
    assert!(
        err.contains("upgrading, because a new package needs"),
        "{err}"
    );
}

#[test]
fn the_demo_set_is_what_the_demo_runs_and_upgrades_nothing() {
    let o = setup(&[
        "--for",
        "demo",
        "--plan-from",
        plan("fresh-demo.txt").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d = decisions(&o);
    for p in [
        "qemu-system-x86",
        "clang",
        "cmake",
        "containernetworking-plugins",
        "ibverbs-utils",
    ] {
        assert!(has(&d, "new", p), "{p} missing from the demo's plan");
    }
    for p in [
        "containerd",
        "podman",
        "golang-go",
        "prometheus",
        "chromium",
        "udev",
        "systemd",
    ] {
        assert!(
            !has(&d, "new", p) && !has(&d, "upgrade", p),
            "the demo installs {p}"
        );
    }
    assert!(
        !d.iter().any(|l| l[0] == "upgrade"),
        "the demo upgrades: {d:?}"
    );
    assert!(has(&d, "replace", "qemu-utils"), "{d:?}");
}

#[test]
fn only_the_pictures_set_brings_chromium() {
    let o = setup(&[
        "--for",
        "pictures",
        "--plan-from",
        plan("fresh-pictures.txt").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(has(&decisions(&o), "new", "chromium"));
}

#[test]
fn a_removal_setup_does_not_know_is_refused_with_the_command_to_run() {
    // apt's plan for sysvinit-core on the same machine: it would remove systemd-sysv and ten more.
    let o = setup(&[
        "--for",
        "test",
        "--plan-from",
        plan("unknown-removal.txt").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "setup went on: {}", stderr(&o));
    let d = decisions(&o);
    assert_eq!(d.len(), 1, "one refusal, then stop: {d:?}");
    assert_eq!(d[0][..2], ["refuse".to_owned(), "remove".to_owned()]);
    let err = stderr(&o);
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(
        err.contains("apt-get install --no-install-recommends"),
        "no command to run: {err}"
    );
    assert!(!err.contains("replacing"), "{err}");
}

#[test]
fn a_downgrade_without_the_qemu_it_matches_is_refused() {
    // qemu-utils is a known case only beside the qemu-system-x86 it must match; a plan that
    // downgrades it for nothing is refused like any other.
    let o = setup(&[
        "--for",
        "test",
        "--plan-from",
        plan("unknown-downgrade.txt").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let d = decisions(&o);
    assert!(
        d.iter()
            .any(|l| l[..2] == ["refuse".to_owned(), "downgrade".to_owned()]),
        "{d:?}"
    );
}

#[test]
fn after_setup_nothing_the_tests_need_is_missing() {
    // scripts/test.sh runs setup before cargo test: on that machine the dry run plans nothing.
    let o = setup(&["--for", "test", "--dry-run"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("nothing to install"),
        "setup's dry run still plans: {err}"
    );
}
