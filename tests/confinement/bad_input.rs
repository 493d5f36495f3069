//! Bad inputs sent to the binary directly, the way a runtime's raw exec does it: CNI_* in the
//! environment, the config on stdin. Each must fail with exactly one JSON error object on
//! stdout carrying the expected code and a message, and must leave the host NIC alone.
//! Needs root (see crates/test-support/src/lib.rs).

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What to put on stdin.
enum Stdin {
    /// A valid config (device = the test NIC, static IPAM), edited by the closure.
    Conf(fn(&mut Value)),
    /// Exactly these bytes.
    Raw(&'static str),
}

type Env = BTreeMap<&'static str, Option<String>>;

/// Run one bad input: ADD against a fresh NIC and pod unless `env_edit` changes that.
fn case(code: i64, stdin: Stdin, env_edit: impl FnOnce(&mut Env, &Rig)) {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1400}));
    let bytes = match stdin {
        Stdin::Conf(edit) => {
            edit(&mut conf);
            serde_json::to_vec(&conf).unwrap()
        }
        Stdin::Raw(s) => s.as_bytes().to_vec(),
    };
    let mut env: Env = BTreeMap::new();
    env.insert("CNI_COMMAND", Some("ADD".into()));
    env.insert("CNI_CONTAINERID", Some(rig.cid(0)));
    env.insert("CNI_NETNS", Some(pod.path()));
    env.insert("CNI_IFNAME", Some("net1".into()));
    env.insert("CNI_PATH", Some(rig.cni_path("1.0.0")));
    env.insert(
        NODE_CONFIG_ENV,
        Some(rig.node_config().display().to_string()),
    );
    env_edit(&mut env, &rig);
    let env_v: Vec<(&str, Option<&str>)> = env.iter().map(|(k, v)| (*k, v.as_deref())).collect();
    let out = run_plugin(&env_v, &bytes);

    assert!(!out.success(), "expected a non-zero exit\n{out}");
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout must be exactly one JSON object ({e})\n{out}"));
    assert!(v.is_object(), "stdout is JSON but not an object\n{out}");
    assert_eq!(v["code"].as_i64(), Some(code), "error code\n{out}");
    assert!(
        v["msg"].as_str().is_some_and(|m| !m.trim().is_empty()),
        "msg must be a non-empty string\n{out}"
    );
    nic.assert_home(Some(&pod), &out);
    assert!(
        link(Some(&pod.name), "net1").is_none(),
        "pod got net1 on a failed call\n{out}"
    );
    rig.assert_state_empty(&out);
}

fn same_env(_: &mut Env, _: &Rig) {}

fn set(k: &'static str, v: &str) -> impl FnOnce(&mut Env, &Rig) {
    let v = v.to_owned();
    move |env, _| {
        env.insert(k, Some(v));
    }
}

fn unset(k: &'static str) -> impl FnOnce(&mut Env, &Rig) {
    move |env, _| {
        env.insert(k, None);
    }
}

// ---------------------------------------------------------------- config

#[test]
fn malformed_json_is_6() {
    case(
        6,
        Stdin::Raw(r#"{"cniVersion": "1.0.0", "name": "#),
        same_env,
    );
}

#[test]
fn non_object_json_is_6() {
    case(6, Stdin::Raw("[1, 2, 3]"), same_env);
}

#[test]
fn unknown_cni_version_is_1() {
    case(
        1,
        Stdin::Conf(|c| c["cniVersion"] = json!("9.9.9")),
        same_env,
    );
}

#[test]
fn missing_cni_version_is_1() {
    // no cniVersion means 0.1.0 per the spec, which this plugin does not support
    case(
        1,
        Stdin::Conf(|c| {
            c.as_object_mut().unwrap().remove("cniVersion");
        }),
        same_env,
    );
}

#[test]
fn missing_name_is_7() {
    case(
        7,
        Stdin::Conf(|c| {
            c.as_object_mut().unwrap().remove("name");
        }),
        same_env,
    );
}

#[test]
fn unknown_top_level_field_is_2() {
    case(
        2,
        Stdin::Conf(|c| {
            let o = c.as_object_mut().unwrap();
            let d = o.remove("device").unwrap();
            o.insert("devcie".into(), d);
        }),
        same_env,
    );
}

/// The loopback device is no NIC: `"hwaddr": "00:00:00:00:00:00"` (lo's MAC) or `"device":
/// "lo"` once left a record no DEL could undo (the kernel refuses to move lo).
#[test]
fn the_loopback_device_is_never_selected_107() {
    case(
        107,
        Stdin::Conf(|c| {
            let o = c.as_object_mut().unwrap();
            o.remove("device");
            o.insert("hwaddr".into(), json!("00:00:00:00:00:00"));
        }),
        same_env,
    );
    case(107, Stdin::Conf(|c| c["device"] = json!("lo")), same_env);
}

#[test]
fn negative_mtu_is_7() {
    case(7, Stdin::Conf(|c| c["mtu"] = json!(-5)), same_env);
}

#[test]
fn string_mtu_is_7() {
    case(7, Stdin::Conf(|c| c["mtu"] = json!("abc")), same_env);
}

#[test]
fn tiny_mtu_is_7() {
    case(7, Stdin::Conf(|c| c["mtu"] = json!(10)), same_env);
}

#[test]
fn bad_static_ipam_address_is_105() {
    case(
        105,
        Stdin::Conf(|c| c["ipam"]["addresses"][0]["address"] = json!("10.77.1.999/24")),
        same_env,
    );
}

#[test]
fn no_selector_is_7() {
    case(
        7,
        Stdin::Conf(|c| {
            c.as_object_mut().unwrap().remove("device");
        }),
        same_env,
    );
}

#[test]
fn device_not_found_is_100() {
    case(
        100,
        Stdin::Conf(|c| c["device"] = json!("rhdnosuchnic0")),
        same_env,
    );
}

// ---------------------------------------------------------------- environment

#[test]
fn ifname_dotdot_slash_is_4() {
    case(4, Stdin::Conf(|_| {}), set("CNI_IFNAME", "../x"));
}

#[test]
fn ifname_slash_is_4() {
    case(4, Stdin::Conf(|_| {}), set("CNI_IFNAME", "a/b"));
}

#[test]
fn ifname_empty_is_4() {
    case(4, Stdin::Conf(|_| {}), set("CNI_IFNAME", ""));
}

#[test]
fn ifname_unset_is_4() {
    case(4, Stdin::Conf(|_| {}), unset("CNI_IFNAME"));
}

#[test]
fn ifname_16_chars_is_4() {
    case(
        4,
        Stdin::Conf(|_| {}),
        set("CNI_IFNAME", "toolongname12345"),
    );
}

#[test]
fn ifname_dot_is_4() {
    case(4, Stdin::Conf(|_| {}), set("CNI_IFNAME", "."));
}

#[test]
fn missing_command_is_4() {
    case(4, Stdin::Conf(|_| {}), unset("CNI_COMMAND"));
}

#[test]
fn unknown_command_is_4() {
    case(4, Stdin::Conf(|_| {}), set("CNI_COMMAND", "FROB"));
}

#[test]
fn missing_container_id_is_4() {
    case(4, Stdin::Conf(|_| {}), unset("CNI_CONTAINERID"));
}

#[test]
fn missing_netns_for_add_is_4() {
    case(4, Stdin::Conf(|_| {}), unset("CNI_NETNS"));
}

#[test]
fn netns_regular_file_is_4() {
    case(4, Stdin::Conf(|_| {}), |env, rig| {
        let f = rig.dir.path().join("not-a-netns");
        std::fs::write(&f, b"x").unwrap();
        env.insert("CNI_NETNS", Some(f.display().to_string()));
    });
}

/// A FIFO named as CNI_NETNS (a node input, but "nothing may make the plugin block"): ADD,
/// DEL and CHECK each answer within a second with 4, saying what the path is. On the old
/// plugin each blocked in open() until a writer came (here a watchdog opens the FIFO after
/// 3 s, so the old plugin fails on time rather than hanging the suite).
#[test]
fn a_fifo_as_cni_netns_answers_within_a_second_with_4_for_add_del_and_check() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let rig = Rig::new();
    let nic = rig.nic(0);
    let fifo = rig.dir.path().join("netns-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, fifo) = (done.clone(), fifo.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(3));
                // O_RDWR never blocks on a FIFO, and releases a reader blocked in open().
                let _ = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&fifo);
            }
        })
    };
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "sandbox": fifo.display().to_string()}], "ips": []});
    let path = fifo.display().to_string();
    for (verb, conf) in [("ADD", &conf), ("DEL", &conf), ("CHECK", &check_conf)] {
        let t = Instant::now();
        let out = rig.call(verb, conf, &path, &rig.cid(0), "net1", &[]);
        let took = t.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "{verb} with a FIFO as CNI_NETNS took {took:?}\n{out}"
        );
        let e = out.err_code(4);
        assert!(
            e["msg"].as_str().unwrap_or("").contains("FIFO"),
            "{verb}: the message says what the path is\n{out}"
        );
    }
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    nic.assert_home(None, &"after the FIFO calls");
    rig.assert_state_empty(&"after the FIFO calls");
}

#[test]
fn netns_of_the_host_itself_is_4() {
    // The runtime (or whoever sets CNI_NETNS) cannot make ADD move a NIC into the host netns.
    case(4, Stdin::Conf(|_| {}), set("CNI_NETNS", "/proc/1/ns/net"));
}

#[test]
fn netns_nonexistent_for_add_is_3() {
    case(3, Stdin::Conf(|_| {}), |env, rig| {
        let f = rig.dir.path().join("no-such-netns");
        env.insert("CNI_NETNS", Some(f.display().to_string()));
    });
}

// ---------------------------------------------------------------- VERSION

#[test]
fn version_lists_all_supported_versions() {
    let out = run_plugin(
        &[("CNI_COMMAND", Some("VERSION"))],
        br#"{"cniVersion":"1.0.0"}"#,
    );
    assert!(out.success(), "VERSION failed\n{out}");
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("VERSION stdout not JSON ({e})\n{out}"));
    let got: Vec<&str> = v["supportedVersions"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for want in ALL_VERSIONS {
        assert!(got.contains(&want), "supportedVersions lacks {want}\n{out}");
    }
    assert!(
        v["cniVersion"].is_string(),
        "VERSION reply lacks cniVersion\n{out}"
    );
}

#[test]
fn version_with_empty_stdin_still_answers() {
    // libcni's GetVersionInfo always sends a config; a bare exec may not. Either a
    // success with supportedVersions or a clean JSON error is acceptable, never garbage.
    let out = run_plugin(&[("CNI_COMMAND", Some("VERSION"))], b"");
    let v = out.json();
    if out.success() {
        assert!(v["supportedVersions"].is_array(), "{out}");
    } else {
        assert!(v["code"].is_i64() && v["msg"].is_string(), "{out}");
    }
}

/// `nà` is `n`, 0xc3, 0xa0, and the kernel's isspace reads 0xa0 as a space: `dev_valid_name`
/// refuses it. Refused with 4 before anything moves, not at the rename inside the pod.
#[test]
fn ifname_the_kernel_reads_as_holding_a_space_is_4() {
    case(4, Stdin::Conf(|_| {}), set("CNI_IFNAME", "nà"));
}

/// A tenant's megabyte under an unknown key: ADD refuses it (2) and DEL ignores it, and
/// neither writes it whole to stdout, stderr (the runtime's journal) or the log file, nor an
/// escape sequence it holds.
#[test]
fn a_megabyte_under_an_unknown_key_is_neither_echoed_nor_logged_whole() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["logFile"] = json!("big.log");
    conf["junk\u{1b}[2J"] = json!(format!("\u{1b}]0;owned\u{7}{}", "x".repeat(1_000_000)));
    let bytes = serde_json::to_vec(&conf).unwrap();
    assert!(bytes.len() > 1_000_000 && bytes.len() < 1 << 20);
    let node = rig.node_config().display().to_string();
    let cid = rig.cid(0);
    let path = rig.cni_path("1.0.0");
    let netns = pod.path();
    for command in ["ADD", "DEL"] {
        let env = [
            ("CNI_COMMAND", Some(command)),
            ("CNI_CONTAINERID", Some(cid.as_str())),
            ("CNI_NETNS", Some(netns.as_str())),
            ("CNI_IFNAME", Some("net1")),
            ("CNI_PATH", Some(path.as_str())),
            (NODE_CONFIG_ENV, Some(node.as_str())),
        ];
        let out = run_plugin(&env, &bytes);
        if command == "ADD" {
            let v: Value = serde_json::from_str(&out.stdout).unwrap();
            assert_eq!(v["code"], 2, "{}", &out.stdout[..out.stdout.len().min(500)]);
        } else {
            assert!(out.success(), "DEL ignores an unknown key");
        }
        for (what, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(
                text.len() < 16 << 10,
                "{command}: {what} holds {} bytes: {}...",
                text.len(),
                &text[..text.len().min(300)]
            );
            assert!(!text.contains('\u{1b}'), "{command}: {what}: {text}");
        }
    }
    let log = std::fs::read_to_string(rig.log_dir().join("big.log")).unwrap_or_default();
    assert!(
        log.len() < 32 << 10,
        "the log file holds {} bytes",
        log.len()
    );
    assert!(!log.contains('\u{1b}'), "{log}");
    nic.assert_home(Some(&pod), &"after ADD and DEL");
}

/// Only a missing path (ENOENT) means a pod's netns is gone. A path that exists but cannot be
/// opened (a symlink loop, a name too long) made DEL say "gone", look for the NIC elsewhere and
/// release what it could: now DEL answers 4, the NIC stays in its pod, the state stays, and the
/// DEL with the right path finishes.
#[test]
fn del_whose_netns_path_cannot_be_opened_is_4_and_keeps_the_nic_and_the_state() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    let looped = rig.dir.path().join("netns-loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let long = format!("/run/netns/{}", "n".repeat(300));
    for path in [looped.display().to_string(), long] {
        let out = rig.call("DEL", &conf, &path, &rig.cid(0), "net1", &[]);
        out.err_code(4);
        assert!(
            link(Some(&pod.name), "net1").is_some(),
            "the NIC stays in its pod\n{out}"
        );
        assert!(!rig.state_files().is_empty(), "the state stays\n{out}");
    }
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &del);
}
