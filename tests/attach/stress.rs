//! Concurrency: two ADDs that want one NIC (one wins, the other gets "device busy" or "try
//! again" and changes nothing), calls on different NICs that never wait for each other, and a
//! stress run: 16 NICs, 16 pods, ADD/CHECK/DEL in random parallel order with random faults
//! (kill, error, panic, delay) and a GC running alongside; at the end nothing may be lost.
//! Needs root. `RHD_SEED` replays a run; `RHD_STRESS_ROUNDS` sets rounds per pod; `RHD_TEST_LOG`
//! (a file name) makes the plugin log there.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This module's steps on the shared world.
trait NothingLost {
    fn assert_nothing_lost(&self, ctx: &dyn std::fmt::Display);
}

impl NothingLost for World {
    /// Nothing lost: every NIC home with name and MTU and untagged, every pod empty, no IP
    /// allocated, nothing in the stateDir.
    fn assert_nothing_lost(&self, ctx: &dyn std::fmt::Display) {
        for nic in &self.nics {
            nic.assert_home(None, ctx);
            let l = link(None, &nic.name).unwrap();
            assert!(
                l.alias
                    .as_deref()
                    .is_none_or(|a| !a.contains("rdma-host-device")),
                "{} still tagged {:?}\n{ctx}",
                nic.name,
                l.alias
            );
        }
        for p in 0..self.pods.len() {
            let l = self.pod_links(p);
            assert!(l.is_empty(), "pod {p} still holds {l:?}\n{ctx}");
        }
        let a = self.rig.allocations(&self.rig.net_name());
        assert!(a.is_empty(), "IPs still allocated: {a:?}\n{ctx}");
        self.rig.assert_state_empty(ctx);
    }
}

/// Wait until another process holds the flock on `path`: the file's existence is not enough
/// (a call creates it, then locks it; a second call started in between could win the lock,
/// as it did once in a CI run under load).
fn wait_for(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let t = Instant::now();
    loop {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} was never locked",
            path.display()
        );
        if let Ok(f) = std::fs::File::open(path) {
            // SAFETY: flock on a fd we own; a lock we get is dropped with the file at once.
            let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------- two ADDs, one NIC

/// The first ADD holds the NIC (delayed before the move, so the NIC is still on the host);
/// the second waits for it and, once the first is done, finds the NIC taken: 102. With a short
/// wait instead: 11. Either way the loser changed nothing. (Once the NIC has left the host, a
/// second ADD sees it attached and answers 102 at once.)
fn loser_gets(code: i64, loser_env: &[(&str, &str)]) {
    let w = World::new("1.0.0", 1, 2);
    // NIC locks are node-wide (src/lock.rs NIC_LOCK_DIR).
    let lock = std::path::Path::new("/run/rdma-host-device/locks")
        .join(format!("nic-{}.lock", w.nics[0].name));
    let (res_a, res_b) = std::thread::scope(|s| {
        let a = s.spawn(|| w.call("ADD", 0, 0, &[("RHD_FAULT", "add:after-state:sleep=1500")]));
        wait_for(&lock);
        let b = s.spawn(|| w.call("ADD", 0, 1, loser_env));
        (a.join().unwrap(), b.join().unwrap())
    });
    res_a.ok();
    let e = res_b.one_error();
    assert_eq!(e["code"], code, "{res_b}");
    assert!(
        e["msg"].as_str().unwrap().contains(&w.nics[0].name),
        "the message must name the NIC\n{res_b}"
    );
    assert_eq!(
        link(Some(&w.pods[0].name), &w.ifname).map(|l| l.mac),
        Some(w.nics[0].mac.clone()),
        "the winner lost its NIC\n{res_b}"
    );
    assert!(
        w.pod_links(1).is_empty(),
        "the loser's pod got a link\n{res_b}"
    );
    let cid_b = w.rig.cid(1);
    assert!(
        w.rig.allocations_of(&w.rig.net_name(), &cid_b).is_empty(),
        "the loser holds an IP\n{res_b}"
    );
    assert!(
        !w.rig
            .state_dir()
            .join(format!("{cid_b}:{}.json", w.ifname))
            .exists(),
        "the loser left state\n{res_b}"
    );
    // The runtime DELs the failed ADD: that must not touch the winner.
    w.call("DEL", 0, 1, &[]).ok();
    assert!(
        link(Some(&w.pods[0].name), &w.ifname).is_some(),
        "loser's DEL took the NIC"
    );
    let del = w.call("DEL", 0, 0, &[]);
    del.ok();
    w.assert_nothing_lost(&del);
}

#[test]
fn second_add_for_same_nic_is_busy_102() {
    loser_gets(102, &[]);
}

#[test]
fn second_add_for_same_nic_times_out_11() {
    loser_gets(11, &[("RHD_LOCK_TIMEOUT_MS", "300")]);
}

/// Eight ADDs for one NIC at once, several times: exactly one wins each time.
#[test]
fn many_adds_for_one_nic_exactly_one_wins() {
    let w = World::new("1.0.0", 1, 8);
    for round in 0..3 {
        let outs: Vec<RunOut> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|p| {
                    let w = &w;
                    s.spawn(move || w.call("ADD", 0, p, &[]))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..8).filter(|&p| outs[p].success()).collect();
        let all: String = outs.iter().map(|o| o.to_string()).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: winners {winners:?}\n{all}"
        );
        for (p, o) in outs.iter().enumerate() {
            if p != winners[0] {
                let c = o.one_error()["code"].as_i64();
                assert!(matches!(c, Some(102 | 11)), "round {round}: pod {p}\n{o}");
                assert!(
                    w.pod_links(p).is_empty(),
                    "round {round}: loser {p} got a link"
                );
            }
        }
        for p in 0..8 {
            w.call("DEL", 0, p, &[]).ok();
        }
        w.assert_nothing_lost(&format!("round {round}"));
    }
}

/// While one ADD holds its NIC (and its attachment) for two seconds, ADD, CHECK and DEL of
/// other pods on other NICs finish long before: there is no node-wide lock.
#[test]
fn calls_on_other_nics_do_not_wait() {
    let w = World::new("1.0.0", 3, 3);
    // NIC locks are node-wide (src/lock.rs NIC_LOCK_DIR).
    let lock = std::path::Path::new("/run/rdma-host-device/locks")
        .join(format!("nic-{}.lock", w.nics[0].name));
    let slow_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let slow = s.spawn(|| {
            let r = w.call(
                "ADD",
                0,
                0,
                &[("RHD_FAULT", "add:after-addresses:sleep=2500")],
            );
            slow_done.store(true, Ordering::SeqCst);
            r
        });
        wait_for(&lock);
        let t = Instant::now();
        let add = w.call("ADD", 1, 1, &[]);
        let result = add.ok();
        let mut conf = w.conf(1);
        conf["prevResult"] = result;
        let check = w.call_with("CHECK", &conf, 1, &[]);
        check.ok();
        let del = w.call("DEL", 1, 1, &[]);
        del.ok();
        w.call("ADD", 2, 2, &[]).ok();
        w.call("DEL", 2, 2, &[]).ok();
        let took = t.elapsed();
        assert!(
            !slow_done.load(Ordering::SeqCst),
            "the other calls took {took:?}: they waited for the slow ADD"
        );
        slow.join().unwrap().ok();
    });
    w.call("DEL", 0, 0, &[]).ok();
    w.assert_nothing_lost(&"end");
}

// ---------------------------------------------------------------- the stress run

const ACTIONS: &[&str] = &["kill", "error", "panic", "sleep=40"];

#[derive(Default)]
struct Figures {
    rounds: u64,
    calls: u64,
    add_ok: u64,
    add_busy_102: u64,
    add_try_again_11: u64,
    checks: u64,
    del_retries: u64,
    gc_runs: u64,
    faults: BTreeMap<String, u64>,
    unexpected: Vec<String>,
}

/// Pick a fault for a call, or none.
fn maybe_fault(rng: &mut Rng, points: &[&str], f: &Mutex<Figures>) -> Option<String> {
    if !rng.chance(0.3) {
        return None;
    }
    let point = points[rng.below(points.len())];
    let action = ACTIONS[rng.below(ACTIONS.len())];
    // An ADD that fails late may also be killed while it rolls back.
    let (kind, fault) = if action == "error" && point.starts_with("add:") && rng.chance(0.3) {
        let n = 1 + rng.below(3);
        (
            "error+kill-in-rollback",
            format!("{point}:error,add:give-back:kill@{n}"),
        )
    } else {
        (action, format!("{point}:{action}"))
    };
    *f.lock()
        .unwrap()
        .faults
        .entry(kind.to_string())
        .or_default() += 1;
    Some(fault)
}

fn with_fault(fault: &Option<String>) -> Vec<(&str, &str)> {
    fault.iter().map(|f| ("RHD_FAULT", f.as_str())).collect()
}

/// One pod's life: pick a NIC, ADD, maybe CHECK, DEL until it succeeds; again.
fn pod_worker(
    w: &World,
    pod: usize,
    rounds: u32,
    seed: u64,
    f: &Mutex<Figures>,
    live: &Mutex<HashSet<usize>>,
) {
    let mut rng = Rng(seed);
    let n = w.nics.len();
    let bad = |what: String| f.lock().unwrap().unexpected.push(what);
    for round in 0..rounds {
        let k = rng.below(n);
        live.lock().unwrap().insert(pod);
        let fault = maybe_fault(&mut rng, ADD_FAULT_POINTS, f);
        let add = w.call("ADD", k, pod, &with_fault(&fault));
        f.lock().unwrap().calls += 1;
        if add.success() {
            f.lock().unwrap().add_ok += 1;
            match link(Some(&w.pods[pod].name), &w.ifname) {
                Some(l) if l.mac == w.nics[k].mac => {}
                other => bad(format!(
                    "pod {pod} round {round}: ADD ok but pod has {other:?}\n{add}"
                )),
            }
            if rng.chance(0.3) {
                let mut conf = w.conf(k);
                conf["prevResult"] = add.json();
                let check = w.call_with("CHECK", &conf, pod, &[]);
                f.lock().unwrap().checks += 1;
                if !check.success() {
                    bad(format!("pod {pod} round {round}: CHECK failed\n{check}"));
                }
            }
        } else if !add.killed() {
            let code = serde_json::from_str::<Value>(&add.stdout)
                .ok()
                .and_then(|v| v["code"].as_i64());
            let injected = fault.is_some();
            match code {
                Some(102) => f.lock().unwrap().add_busy_102 += 1,
                Some(11) => f.lock().unwrap().add_try_again_11 += 1,
                Some(5 | 999) if injected => {}
                _ => bad(format!(
                    "pod {pod} round {round}: ADD failed unexpectedly\n{add}"
                )),
            }
        } else if fault.is_none() {
            bad(format!(
                "pod {pod} round {round}: killed without a fault\n{add}"
            ));
        }
        if rng.chance(0.2) {
            std::thread::sleep(Duration::from_millis(rng.below(30) as u64));
        }
        // The runtime DELs until DEL succeeds (with faults on the first try).
        let mut tries = 0;
        loop {
            let fault = if tries == 0 {
                maybe_fault(&mut rng, DEL_FAULT_POINTS, f)
            } else {
                None
            };
            let del = w.call("DEL", k, pod, &with_fault(&fault));
            f.lock().unwrap().calls += 1;
            if del.success() {
                break;
            }
            if fault.is_none() {
                bad(format!(
                    "pod {pod} round {round}: DEL without fault failed\n{del}"
                ));
            }
            tries += 1;
            f.lock().unwrap().del_retries += 1;
            if tries > 5 {
                bad(format!("pod {pod} round {round}: DEL keeps failing\n{del}"));
                break;
            }
        }
        live.lock().unwrap().remove(&pod);
        let left = w.pod_links(pod);
        if !left.is_empty() {
            bad(format!(
                "pod {pod} round {round}: after DEL the pod holds {left:?}"
            ));
        }
        f.lock().unwrap().rounds += 1;
    }
}

/// GC every so often with every attachment that may be live listed as valid: it must never
/// take anything from a live pod, and runs alongside everything else.
fn gc_worker(w: &World, stop: &AtomicBool, f: &Mutex<Figures>, live: &Mutex<HashSet<usize>>) {
    let path = w.rig.cni_path("1.0.0");
    while !stop.load(Ordering::SeqCst) {
        // Held through the GC: no pod starts an ADD the valid list does not show.
        let live = live.lock().unwrap();
        let valid: Vec<Value> = live
            .iter()
            .map(|&p| json!({"containerID": w.cid(p), "ifname": w.ifname}))
            .collect();
        let mut conf = w.conf(0);
        conf["cniVersion"] = json!("1.1.0");
        conf["cni.dev/valid-attachments"] = Value::Array(valid);
        // The rig's node file, as every other call of this test: with the built-in defaults
        // this GC looked at /var/lib/cni's state, not the rig's, and GC'd nothing of the test.
        let node = w.rig.node_config();
        let node = node.to_str().unwrap();
        let gc = run_plugin(
            &[
                ("CNI_COMMAND", Some("GC")),
                ("CNI_PATH", Some(&path)),
                (NODE_CONFIG_ENV, Some(node)),
            ],
            &serde_json::to_vec(&conf).unwrap(),
        );
        let mut fig = f.lock().unwrap();
        fig.gc_runs += 1;
        fig.calls += 1;
        if !gc.success() {
            fig.unexpected.push(format!("GC failed\n{gc}"));
        }
        drop(fig);
        drop(live);
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn stress_16_nics_16_pods_random_faults() {
    let seed = Rng::from_env().0;
    let rounds: u32 = std::env::var("RHD_STRESS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let w = World::losing("1.0.0", 16, 16); // it runs GC
    let f = Mutex::new(Figures::default());
    let live = Mutex::new(HashSet::new());
    let stop = AtomicBool::new(false);
    let t = Instant::now();
    std::thread::scope(|s| {
        let gc = s.spawn(|| gc_worker(&w, &stop, &f, &live));
        let pods: Vec<_> = (0..w.pods.len())
            .map(|p| {
                let (w, f, live) = (&w, &f, &live);
                let seed = seed.wrapping_add(p as u64 * 0x9e37_79b9);
                s.spawn(move || pod_worker(w, p, rounds, seed, f, live))
            })
            .collect();
        for p in pods {
            p.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        gc.join().unwrap();
    });
    let took = t.elapsed();
    let f = Arc::new(f.into_inner().unwrap());
    let injected: u64 = f.faults.values().sum();
    let report = format!(
        "stress: seed {seed} ({}s): {} rounds, {} plugin calls; ADD ok {}, busy 102: {}, try-again 11: {}; CHECKs {}; DEL retries {}; GC runs {}; faults injected {injected} {:?}",
        took.as_secs(),
        f.rounds,
        f.calls,
        f.add_ok,
        f.add_busy_102,
        f.add_try_again_11,
        f.checks,
        f.del_retries,
        f.gc_runs,
        f.faults
    );
    println!("{report}");
    eprintln!("{report}");
    assert!(
        f.unexpected.is_empty(),
        "{} unexpected outcomes (replay with RHD_SEED={seed}):\n{}",
        f.unexpected.len(),
        f.unexpected.join("\n")
    );
    assert_eq!(f.rounds, u64::from(rounds) * 16);
    assert!(
        injected > 0 && f.add_busy_102 > 0,
        "the run must contend and inject faults\n{report}"
    );
    w.assert_nothing_lost(&report);
}
