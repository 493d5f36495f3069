//! The uppers watcher (`rdma-host-device-agent uppers-watch`, crates/agent/src/uppers_watch.rs):
//! ADD asks it whether a device of another namespace (a macvlan NAD's) rides the NIC, instead of
//! scanning every namespace of the node. Its word must be as good as the scan it saves: a
//! device made on the NIC after the watcher certified it is refused all the same, and a watcher
//! that is gone, stalls or talks nonsense leaves ADD to scan, never to trust it or to hang.

use test_support as common;

use common::*;
use serde_json::json;
use std::io::{BufRead, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const IF: &str = "net1";

fn code(out: &RunOut) -> u64 {
    out.one_error()["code"].as_u64().unwrap_or(0)
}

fn msg(out: &RunOut) -> String {
    out.one_error()["msg"].as_str().unwrap_or("").to_owned()
}

/// A watcher run as the DaemonSet runs it, on a socket of the rig's, which the rig's node
/// names. Killed when dropped.
struct Watcher {
    child: Child,
    socket: PathBuf,
    /// One real watcher at a time in this binary: each hears every namespace's link
    /// notifications (NETLINK_LISTEN_ALL_NSID) and guards every tagged NIC on the machine, so a
    /// neighbouring test's watcher would delete this test's foreign upper first and count it in
    /// its own counter (seen once in CI).
    _alone: std::sync::MutexGuard<'static, ()>,
}

static ONE_WATCHER: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Watcher {
    fn start(rig: &Rig) -> Watcher {
        Watcher::start_alone(rig, Watcher::alone())
    }

    /// No other test's watcher runs while this is held (for a test that must act before its
    /// own watcher starts).
    fn alone() -> std::sync::MutexGuard<'static, ()> {
        ONE_WATCHER.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start_alone(rig: &Rig, alone: std::sync::MutexGuard<'static, ()>) -> Watcher {
        let socket = rig.dir.path().join("uppers.sock");
        let log = std::fs::File::create(rig.dir.path().join("uppers-watch.log"))
            .expect("the watcher's log");
        let child = Command::new(AGENT)
            .args(["uppers-watch", "--debug", "--socket"])
            .arg(&socket)
            .env_remove("CNI_COMMAND")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting uppers-watch");
        let mut w = Watcher {
            child,
            socket,
            _alone: alone,
        };
        for _ in 0..500 {
            if w.socket.exists() {
                rig.set_node(json!({"uppersSocket": w.socket}));
                return w;
            }
            if let Ok(Some(st)) = w.child.try_wait() {
                panic!("uppers-watch exited: {st}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        w.stop();
        panic!("uppers-watch made no socket in 5 s");
    }

    /// Ask it, as ADD does, what rides `nic`: its answer line. An answer that nothing does
    /// is a certificate it keeps until the NIC's notifications void it.
    fn ask(&self, nic: &Veth) -> String {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata("/proc/thread-self/ns/net").unwrap();
        let index = link(None, &nic.name).expect("the NIC is home").index;
        let q = json!({"ifindex": index, "name": nic.name, "netns": [m.dev(), m.ino()]});
        let mut c = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        writeln!(c, "{q}").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(&c).read_line(&mut line).unwrap();
        line
    }

    /// What it logged so far (at debug level: each search it made).
    fn log(&self) -> String {
        std::fs::read_to_string(self.socket.with_file_name("uppers-watch.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// ADD, logging at debug level: its stderr says whether the watcher answered.
fn add(rig: &Rig, nic: &Veth, pod: &Netns) -> RunOut {
    let conf = rig.conf("1.1.0", json!({"device": nic.name, "logLevel": "debug"}));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), IF, &[])
}

const ANSWERED: &str = "the uppers watcher answered";

/// ADD is refused with 107 naming `why`, and the NIC stays home. Its output, for more checks.
fn assert_refused(rig: &Rig, nic: &Veth, pod: &Netns, why: &str) -> RunOut {
    let add = add(rig, nic, pod);
    assert_eq!(code(&add), 107, "{add}");
    assert!(msg(&add).contains(why), "wanted {why:?}\n{add}");
    rig.assert_detached(nic, Some(pod), &add);
    add
}

/// ADD and DEL work, and the NIC is home again. ADD's output.
fn assert_allowed(rig: &Rig, nic: &Veth, pod: &Netns) -> RunOut {
    let added = add(rig, nic, pod);
    added.ok();
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    let del = rig.call("DEL", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(link(None, &nic.name).is_some(), "NIC not home\n{del}");
    added
}

/// The watcher, not ADD's own scan, gave the answer.
fn assert_answered(out: &RunOut) {
    assert!(
        out.stderr.contains(ANSWERED),
        "the watcher did not answer\n{out}"
    );
}

#[test]
fn a_macvlan_made_in_another_namespace_after_the_watcher_certified_the_nic_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let victim = rig.netns(1);
    let w = Watcher::start(&rig);
    // The first ADD has the watcher scan and certify the NIC; the second is answered from
    // what it learnt (the NIC came home in between).
    assert_answered(&assert_allowed(&rig, &nic, &pod));
    assert_answered(&assert_allowed(&rig, &nic, &pod));
    // Certified now (asked twice: the second answer may come from the certificate alone).
    for _ in 0..2 {
        assert_eq!(w.ask(&nic).trim(), r#"{"riding":[]}"#);
    }
    // Made in the victim's namespace directly: the host sees no new link, only the NIC's
    // own notification (its new upper).
    let mv = format!("rh{}w{}", tag(), rig.n);
    ip(&[
        "link",
        "add",
        &mv,
        "link",
        &nic.name,
        "netns",
        &victim.name,
        "type",
        "macvlan",
    ]);
    let there = format!(
        "macvlan {mv} in /run/netns/{} is stacked on it",
        victim.name
    );
    assert_answered(&assert_refused(&rig, &nic, &pod, &there));
    ip(&["-n", &victim.name, "link", "del", &mv]);
    assert_answered(&assert_allowed(&rig, &nic, &pod));
    // Made on the host (the host's own check refuses it), then moved to the victim: the NIC
    // hears nothing of the move, its macvlan's departure is what tells.
    ip(&["link", "add", &mv, "link", &nic.name, "type", "macvlan"]);
    assert_refused(&rig, &nic, &pod, &format!("macvlan {mv} is stacked on it"));
    assert_eq!(w.ask(&nic).trim(), r#"{"riding":[]}"#, "certified again");
    ip(&["link", "set", &mv, "netns", &victim.name]);
    assert_answered(&assert_refused(&rig, &nic, &pod, &there));
    ip(&["-n", &victim.name, "link", "del", &mv]);
    assert_answered(&assert_allowed(&rig, &nic, &pod));
}

/// The same in a namespace only a process holds (no /run/netns name).
#[test]
fn with_a_watcher_a_macvlan_in_a_processs_namespace_is_refused() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let _w = Watcher::start(&rig);
    assert_allowed(&rig, &nic, &pod);
    let mut holder = Command::new("unshare")
        .args(["--net", "sleep", "60"])
        .spawn()
        .expect("unshare --net sleep");
    let pid = holder.id().to_string();
    // Once the holder is `sleep`, unshare has made its namespace and exec'd.
    for _ in 0..100 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let vl = format!("rh{}p{}", tag(), rig.n);
    let made = run(
        "ip",
        &[
            "link", "add", &vl, "link", &nic.name, "netns", &pid, "type", "macvlan",
        ],
    );
    let add = add(&rig, &nic, &pod);
    assert_answered(&add);
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(
        made.status.success(),
        "ip link add {vl} ... netns {pid}: {made:?}"
    );
    assert_eq!(code(&add), 107, "{add}");
    assert!(
        msg(&add).contains(&format!(
            "macvlan {vl} in the netns of pid {pid} (sleep) is stacked on it"
        )),
        "{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
}

#[test]
fn with_the_watcher_killed_add_scans_every_namespace_itself() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let victim = rig.netns(1);
    let mut w = Watcher::start(&rig);
    assert_allowed(&rig, &nic, &pod);
    w.stop();
    // Its socket file stays behind, refusing connections.
    assert!(w.socket.exists());
    let mv = format!("rh{}k{}", tag(), rig.n);
    ip(&[
        "link",
        "add",
        &mv,
        "link",
        &nic.name,
        "netns",
        &victim.name,
        "type",
        "macvlan",
    ]);
    let out = assert_refused(
        &rig,
        &nic,
        &pod,
        &format!(
            "macvlan {mv} in /run/netns/{} is stacked on it",
            victim.name
        ),
    );
    assert!(!out.stderr.contains(ANSWERED), "{out}");
}

/// A stand-in watcher on the rig's socket that answers every connection with `answer`
/// (`None`: reads the query and never answers, holding the connection).
fn fake_watcher(rig: &Rig, answer: Option<&'static str>) -> PathBuf {
    let socket = rig
        .dir
        .path()
        .join(format!("fake-{}.sock", answer.map_or(0, str::len)));
    let _ = std::fs::remove_file(&socket);
    let l = UnixListener::bind(&socket).expect("binding the fake watcher");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            let mut line = String::new();
            let _ = std::io::BufReader::new(&c).read_line(&mut line);
            match answer {
                Some(a) => {
                    let _ = (&c).write_all(a.as_bytes());
                }
                None => held.push(c),
            }
        }
    });
    rig.set_node(json!({"uppersSocket": socket}));
    socket
}

#[test]
fn add_goes_by_what_the_watcher_answers() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    fake_watcher(
        &rig,
        Some("{\"riding\":[\"a test double is stacked on it\"]}\n"),
    );
    assert_answered(&assert_refused(
        &rig,
        &nic,
        &pod,
        "a test double is stacked on it",
    ));
}

#[test]
fn a_watcher_that_stalls_or_talks_nonsense_leaves_add_to_scan_and_never_hangs_it() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let victim = rig.netns(1);
    let mv = format!("rh{}g{}", tag(), rig.n);
    ip(&[
        "link",
        "add",
        &mv,
        "link",
        &nic.name,
        "netns",
        &victim.name,
        "type",
        "macvlan",
    ]);
    let there = format!(
        "macvlan {mv} in /run/netns/{} is stacked on it",
        victim.name
    );
    for answer in [
        None,
        Some("hello\n"),
        Some("{\"riding\":[]"),
        Some("{\"unknown\":\"busy\"}\n"),
        Some("{\"riding\":[],\"clear\":true}\n"),
    ] {
        fake_watcher(&rig, answer);
        let started = Instant::now();
        let out = assert_refused(&rig, &nic, &pod, &there);
        assert!(!out.stderr.contains(ANSWERED), "{out}");
        // Not a timing: a bound far above the deadline, which a hang would pass.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "ADD waited {:?} on a watcher answering {answer:?}",
            started.elapsed()
        );
    }
}

/// Issue 36: the watcher's socket is 0600 and the directory it makes for it 0700, whatever the
/// umask it was started with: not 0777 for a moment after bind (it was, until a chmod), nor
/// narrowed by the umask. Started under umask 000 and 077, each in a directory it must make.
#[test]
fn the_watchers_socket_and_directory_have_their_modes_whatever_the_umask() {
    require_root();
    let dir = TempDir::new("uppers-modes");
    for mask in [0o000, 0o077] {
        let sub = dir.path().join(format!("run-{mask:03o}"));
        let socket = sub.join("uppers.sock");
        let alone = ONE_WATCHER.lock().unwrap_or_else(|e| e.into_inner());
        let child = with_umask(&mut Command::new(AGENT), mask)
            .args(["uppers-watch", "--socket"])
            .arg(&socket)
            .env_remove("CNI_COMMAND")
            .stdout(Stdio::null())
            .spawn()
            .expect("starting uppers-watch");
        let mut w = Watcher {
            child,
            socket: socket.clone(),
            _alone: alone,
        };
        assert!(
            wait_for_path(&socket, 5),
            "uppers-watch made no socket in 5 s"
        );
        assert_eq!(
            [mode_of(&sub), mode_of(&socket)],
            [Ok(Mode(0o700)), Ok(Mode(0o600))],
            "umask {mask:03o}: the socket's directory, then the socket"
        );
        w.stop();
    }
}

/// Issue 47, item 1: with the watcher running, a neighbour's `macvlan mode passthru` stacked on
/// a NIC a pod holds (made in the neighbour's namespace, its lower the pod's NIC) is deleted as
/// soon as the kernel reports it, and counted for the exporter; the pod's NIC is untouched.
#[test]
fn the_watcher_deletes_a_neighbours_macvlan_on_an_attached_nic_at_once() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let w = Watcher::start(&rig);
    let counter = w.socket.with_file_name("foreign-uppers-removed");
    add(&rig, &nic, &victim).ok();
    let mv = format!("rh{}g{}", tag(), rig.n);
    stack_passthru(&victim, IF, &attacker, &mv);
    // Deleted by the watcher, not by any verb of ours: none runs until it is gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while link(Some(&attacker.name), &mv).is_some() {
        assert!(
            Instant::now() < deadline,
            "the neighbour's macvlan still rides the pod's NIC 20 s later"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Counted right after the deletion.
    let read = || std::fs::read_to_string(&counter).unwrap_or_default();
    while read().trim() != "1" {
        assert!(
            Instant::now() < deadline,
            "{}: {:?}",
            counter.display(),
            read()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        link(Some(&victim.name), IF).is_some(),
        "the pod's NIC is gone"
    );
    // The exporter serves the count (the node's uppersSocket says where the watcher is).
    let scrape = Command::new(AGENT)
        .args(["metrics", "--once"])
        .env(NODE_CONFIG_ENV, rig.node_config())
        .env_remove("CNI_COMMAND")
        .output()
        .expect("running the exporter once");
    let text = String::from_utf8_lossy(&scrape.stdout);
    assert!(
        text.lines()
            .any(|l| l == "rdma_host_device_foreign_uppers_removed_total 1"),
        "{text}"
    );
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    nic.assert_home(Some(&victim), &"after DEL");
}

/// DEL and CHECK, logging at debug level (their stderr says whether the guard vouched), with
/// ADD's result for CHECK.
fn check_and_del(rig: &Rig, nic: &Veth, pod: &Netns, added: &RunOut) -> (RunOut, RunOut) {
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name, "logLevel": "debug"}));
    let del_conf = conf.clone();
    conf["prevResult"] = added.ok();
    let check = rig.call("CHECK", &conf, &pod.path(), &rig.cid(0), IF, &[]);
    let del = rig.call("DEL", &del_conf, &pod.path(), &rig.cid(0), IF, &[]);
    (check, del)
}

const VOUCHED: &str = "the uppers guard vouches for";
const DECLINED: &str = "the uppers guard does not vouch for";

/// Issue 47: DEL and CHECK do not search every namespace for riders when the guard has watched
/// the NIC since ADD (their cost stays flat with the pods beside them); they take its word, and
/// the NIC comes home.
#[test]
fn del_and_check_take_the_guards_word_for_a_nic_it_watched_since_add() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let _w = Watcher::start(&rig);
    let added = add(&rig, &nic, &victim);
    let (check, del) = check_and_del(&rig, &nic, &victim, &added);
    check.ok();
    assert!(check.stderr.contains(VOUCHED), "CHECK searched\n{check}");
    del.ok();
    assert!(del.stderr.contains(VOUCHED), "DEL searched\n{del}");
    nic.assert_home(Some(&victim), &del);
    rig.assert_state_empty(&del);
}

/// The guard follows tagged NICs; a pod that rewrites its NIC's alias drops that, and a
/// neighbour's macvlan then stays on the NIC. The guard heard the NIC touched all the same and
/// does not vouch: CHECK fails naming the rider, and DEL deletes it before the NIC goes home.
#[test]
fn a_rider_the_guard_did_not_follow_is_named_by_check_and_deleted_by_del() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let w = Watcher::start(&rig);
    let added = add(&rig, &nic, &victim);
    added.ok();
    ip(&["-n", &victim.name, "link", "set", IF, "alias", "mine now"]);
    let mv = format!("rh{}u{}", tag(), rig.n);
    stack_passthru(&victim, IF, &attacker, &mv);
    // The guard answers in order: once it has answered a later question, it has read the
    // macvlan's notification, and it left the macvlan alone.
    let _ = w.ask(&rig.nic(1));
    assert!(
        link(Some(&attacker.name), &mv).is_some(),
        "the guard deleted a rider of a NIC without our tag: this test no longer tests DEL"
    );
    let (check, del) = check_and_del(&rig, &nic, &victim, &added);
    assert_eq!(code(&check), 106, "{check}");
    assert!(msg(&check).contains(&format!("macvlan {mv}")), "{check}");
    assert!(check.stderr.contains(DECLINED), "{check}");
    del.ok();
    assert!(del.stderr.contains(DECLINED), "{del}");
    assert!(
        link(Some(&attacker.name), &mv).is_none(),
        "the neighbour's macvlan outlived DEL\n{del}"
    );
    nic.assert_home(Some(&victim), &del);
    rig.assert_state_empty(&del);
}

/// A guard that started after ADD did not hear what came before it: it does not vouch, and
/// DEL finds and deletes the rider stacked while no watcher ran.
#[test]
fn a_guard_started_after_add_does_not_vouch_for_that_nic() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    // No other test's guard may delete the rider meanwhile.
    let alone = Watcher::alone();
    let added = add(&rig, &nic, &victim);
    added.ok();
    let mv = format!("rh{}l{}", tag(), rig.n);
    stack_passthru(&victim, IF, &attacker, &mv);
    let _w = Watcher::start_alone(&rig, alone);
    let (check, del) = check_and_del(&rig, &nic, &victim, &added);
    assert_eq!(code(&check), 106, "{check}");
    assert!(check.stderr.contains(DECLINED), "{check}");
    del.ok();
    assert!(del.stderr.contains(DECLINED), "{del}");
    assert!(
        link(Some(&attacker.name), &mv).is_none(),
        "the neighbour's macvlan outlived DEL\n{del}"
    );
    nic.assert_home(Some(&victim), &del);
}

const SEARCHED: &str = "uppers guard: searching every namespace for what rides";

/// The operational state `ip` shows for link `name` of namespace `ns`.
fn operstate(ns: &Netns, name: &str) -> String {
    let out = ip(&["-n", &ns.name, "-j", "link", "show", name]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("ip -j");
    v[0]["operstate"].as_str().unwrap_or_default().to_owned()
}

/// Issue 47: the guard follows an ADD without searching every namespace (its cost on the node
/// stays flat with the pods beside it). ADD's own notifications of the NIC (its move, name,
/// MTU, state) each announce a change; a neighbour's macvlan stacked after them announces
/// none, and is searched for and deleted all the same. DEL right behind ADD takes the
/// guard's word.
#[test]
fn the_guard_searches_nothing_for_add_and_still_deletes_a_rider_after_it() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let w = Watcher::start(&rig);
    // With an MTU of its own: ADD changes that too, while the NIC is down.
    let conf = rig.conf("1.1.0", json!({"device": nic.name, "mtu": 1400}));
    let added = rig.call("ADD", &conf, &victim.path(), &rig.cid(0), IF, &[]);
    assert_eq!(
        link(Some(&victim.name), IF).map(|l| l.mtu),
        Some(1400),
        "{added}"
    );
    // Linkwatch reports the state after ADD has answered: wait for it, then make sure the
    // guard has read it (it reads its notifications before it answers a question).
    let deadline = Instant::now() + Duration::from_secs(20);
    while operstate(&victim, IF) == "DOWN" {
        assert!(
            Instant::now() < deadline,
            "net1 is still DOWN 20 s after ADD"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = w.ask(&rig.nic(1));
    let searched = w.log().matches(SEARCHED).count();
    assert_eq!(searched, 0, "the guard searched after ADD\n{}", w.log());
    let mv = format!("rh{}s{}", tag(), rig.n);
    stack_passthru(&victim, IF, &attacker, &mv);
    while link(Some(&attacker.name), &mv).is_some() {
        assert!(
            Instant::now() < deadline,
            "the neighbour's macvlan still rides the pod's NIC\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(w.log().contains(SEARCHED), "{}", w.log());
    let (check, del) = check_and_del(&rig, &nic, &victim, &added);
    check.ok();
    assert!(check.stderr.contains(VOUCHED), "CHECK searched\n{check}");
    del.ok();
    assert!(del.stderr.contains(VOUCHED), "DEL searched\n{del}");
    nic.assert_home(Some(&victim), &del);
}

/// Issue 47: ADD tags the NIC while it is down, which the kernel announces with nothing until
/// the link comes up; a neighbour's macvlan stacked in that moment is announced with the new
/// tag as the only thing new. The guard does not take that for one of ADD's changes: it
/// searches and deletes the macvlan while ADD is still held after the move.
#[test]
fn a_rider_stacked_while_add_holds_the_nic_down_and_tagged_is_deleted_by_the_guard() {
    let rig = std::sync::Arc::new(Rig::new());
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let w = Watcher::start(&rig);
    let conf = rig.conf("1.1.0", json!({"device": nic.name}));
    let add = rig.call_on_thread(
        "ADD",
        &conf,
        victim.path(),
        rig.cid(0),
        IF,
        &[("RHD_FAULT", "add:after-nic-move:sleep=8000")],
    );
    let deadline = Instant::now() + Duration::from_secs(8);
    while link(Some(&victim.name), IF).is_none() {
        assert!(Instant::now() < deadline, "the NIC never reached the pod");
        std::thread::sleep(Duration::from_millis(10));
    }
    let l = link(Some(&victim.name), IF).expect("net1 in the pod");
    assert!(!l.up && l.alias.is_some(), "not down and tagged: {l:?}");
    let before = w.log().matches(SEARCHED).count();
    let mv = format!("rh{}w{}", tag(), rig.n);
    stack_passthru(&victim, IF, &attacker, &mv);
    while link(Some(&attacker.name), &mv).is_some() {
        assert!(
            !add.is_finished(),
            "ADD went on with the neighbour's macvlan riding the NIC\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !add.is_finished(),
        "ADD, not the guard, may have deleted it: this test no longer tests the guard"
    );
    assert!(w.log().matches(SEARCHED).count() > before, "{}", w.log());
    let added = add.join().expect("the ADD thread");
    added.ok();
    let del = rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[]);
    del.ok();
    nic.assert_home(Some(&victim), &del);
}
