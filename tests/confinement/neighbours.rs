//! A pod with NET_ADMIN and no user namespace reaches the host's links through its network
//! namespace id (issue 36, items 3 and 6). What it must not get: a device of its own riding a
//! NIC that another pod's ADD hands over (stacked between ADD's check and the move), another
//! pod's DEL failing for ever because it made a host link with that pod's NIC's name, or the
//! link it made handed to another tenant that selects that name. Needs root.

use test_support as common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

const IF: &str = "net1";

fn code(out: &RunOut) -> u64 {
    out.one_error()["code"].as_u64().unwrap_or(0)
}

fn msg(out: &RunOut) -> String {
    out.one_error()["msg"].as_str().unwrap_or("").to_owned()
}

/// The macvlans of namespace `ns`, as `ip -d -j link` shows them.
fn macvlans(ns: &str) -> Vec<String> {
    let out = ip_in(Some(ns), &["-d", "-j", "link", "show", "type", "macvlan"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
        .collect()
}

/// The attacker: a loop that stacks a macvlan of the attacker's namespace on the free NIC
/// (`ip link add link NIC ... netns ATTACKER`: a macvlan in the attacker's namespace whose
/// lower is the host NIC, IFLA_LINK_NETNSID naming the host, as the attacker gets with
/// `ip -n ATTACKER link add ... link-netnsid HOST`) and deletes it again while the NIC is
/// still on the host, until stopped; once the NIC has left with it, it keeps it.
struct Attacker {
    stop: Arc<AtomicBool>,
    made: Arc<AtomicU32>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Attacker {
    fn start(nic: &str, ns: &str, mv: &str) -> Attacker {
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicU32::new(0));
        let (s, m) = (stop.clone(), made.clone());
        let (nic, ns, mv) = (nic.to_owned(), ns.to_owned(), mv.to_owned());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let add = run(
                    "ip",
                    &[
                        "link", "add", "link", &nic, "name", &mv, "netns", &ns, "type", "macvlan",
                    ],
                );
                if add.status.success() {
                    m.fetch_add(1, Ordering::SeqCst);
                    if !run("ip", &["link", "show", "dev", &nic]).status.success() {
                        // The NIC left the host with the macvlan riding it: keep it.
                        break;
                    }
                    let _ = run("ip", &["-n", &ns, "link", "del", &mv]);
                }
            }
        });
        Attacker {
            stop,
            made,
            thread: Some(thread),
        }
    }

    /// Stop the loop and wait for it: nothing of it is in flight afterwards.
    fn stop(&mut self) -> u32 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.made.load(Ordering::SeqCst)
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Hundreds of ADDs racing a pod that stacks a macvlan on the NIC through the host's netns
/// id and deletes it again: the victim's pod never ends with the NIC and the attacker's
/// macvlan riding it. Either ADD refuses (107, naming what rode it, or, seen by the policy
/// check, what is stacked on it) with the NIC home, or the NIC arrived clean.
#[test]
fn a_macvlan_stacked_on_the_nic_while_add_hands_it_over_never_arrives_with_it() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let mv = format!("rh{}a{}", tag(), rig.n);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    // 200 rounds at least; more (up to 1000) until one has hit the window between the policy
    // check and the move, which a loaded machine shifts (CI runs beside other builds).
    let (min_rounds, max_rounds) = (200, 1000);
    let mut rounds = 0;
    let (mut clean, mut refused_on_arrival, mut refused_by_policy, mut made) = (0, 0, 0, 0);
    for round in 0..max_rounds {
        if round >= min_rounds && refused_on_arrival > 0 {
            break;
        }
        rounds += 1;
        let mut a = Attacker::start(&nic.name, &attacker.name, &mv);
        // A few milliseconds between the policy check and the move, as a busy node has.
        let add = rig.call(
            "ADD",
            &conf,
            &victim.path(),
            &rig.cid(0),
            IF,
            &[("RHD_FAULT", "add:after-state:sleep=15")],
        );
        made += a.stop();
        let riding = macvlans(&attacker.name);
        if add.success() {
            assert!(
                riding.is_empty(),
                "round {round}: the victim's pod got the NIC with the attacker's {riding:?} riding it\n{add}"
            );
            clean += 1;
            rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[])
                .ok();
        } else {
            assert_eq!(code(&add), 107, "round {round}\n{add}");
            let m = msg(&add);
            if m.contains("arrived in") && m.contains(&format!("macvlan {mv} in")) {
                refused_on_arrival += 1;
            } else {
                assert!(m.contains("stacked on it"), "round {round}: {m}\n{add}");
                refused_by_policy += 1;
            }
            rig.assert_state_empty(&add);
        }
        for l in macvlans(&attacker.name) {
            ip(&["-n", &attacker.name, "link", "del", &l]);
        }
        nic.assert_home(Some(&victim), &format!("round {round}\n{add}"));
    }
    eprintln!(
        "{rounds} rounds: {clean} clean, {refused_on_arrival} refused on arrival, {refused_by_policy} refused by the policy check; the attacker made {made} macvlans"
    );
    assert!(
        made > 0,
        "the attacker never made its macvlan: no race was run"
    );
    assert!(
        refused_on_arrival > 0,
        "no round had the macvlan made in the window: the race did not test the check on arrival"
    );
}

/// The same made deterministic: the macvlan is stacked on the NIC while ADD sleeps between its
/// check and the move. ADD fails naming it, and the NIC is home with nothing of ADD left.
#[test]
fn a_macvlan_stacked_on_the_nic_between_the_check_and_the_move_is_named_and_the_nic_goes_home() {
    let rig = Arc::new(Rig::new());
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let mv = format!("rh{}d{}", tag(), rig.n);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let add = rig.call_on_thread(
        "ADD",
        &conf,
        victim.path(),
        rig.cid(0),
        IF,
        &[("RHD_FAULT", "add:after-state:sleep=1500")],
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    ip(&[
        "link",
        "add",
        "link",
        &nic.name,
        "name",
        &mv,
        "netns",
        &attacker.name,
        "type",
        "macvlan",
    ]);
    let add = add.join().expect("the ADD thread");
    assert_eq!(code(&add), 107, "{add}");
    let m = msg(&add);
    assert!(
        m.contains(&format!("macvlan {mv} in /run/netns/{}", attacker.name)),
        "the error names what rode the NIC: {m}"
    );
    nic.assert_home(Some(&victim), &add);
    rig.assert_state_empty(&add);
    assert!(
        add.stderr.contains("rolling back"),
        "ADD rolled back\n{add}"
    );
    // The rollback gives the NIC back as DEL does: the foreign macvlan deleted first (issue
    // 47), so nothing rides it now.
    assert!(
        macvlans(&attacker.name).is_empty(),
        "the attacker's macvlan rode the NIC home\n{add}"
    );
    // The next ADD succeeds, and, nothing having touched the NIC
    // while it was handed over, without scanning the node's namespaces.
    ip(&["link", "set", &nic.name, "up"]);
    let add = rig.call("ADD", &conf, &victim.path(), &rig.cid(0), IF, &[]);
    add.ok();
    assert!(
        !add.stderr.contains("from anywhere on the node"),
        "a clean ADD scanned\n{add}"
    );
    rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    nic.assert_home(Some(&victim), &"after the clean ADD and DEL");
}

/// A pod makes a host link with the name of another pod's NIC (a veth whose peer is its own,
/// made from its namespace): that pod's DEL still succeeds, the NIC coming home under a name
/// that says so, which the log and `inspect` explain; another tenant's ADD by that name is
/// refused rather than handed the squatter's veth.
#[test]
fn a_host_link_squatting_a_pods_nic_name_neither_blocks_its_del_nor_goes_to_another_tenant() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let tenant = rig.netns(2);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    // Made from inside the attacker's namespace: the peer there, the squatter on the host
    // (`netns 1`: pid 1's namespace, the host's).
    let peer = format!("rh{}s{}", tag(), rig.n);
    ip(&[
        "-n",
        &attacker.name,
        "link",
        "add",
        &peer,
        "type",
        "veth",
        "peer",
        "name",
        &nic.name,
        "netns",
        "1",
    ]);
    let squatter = link(None, &nic.name).expect("the squatter on the host");
    assert_ne!(squatter.mac, nic.mac);

    // Another tenant selects the name: refused (the name's NIC is in a pod, and this link,
    // born on the host meanwhile, is not it: issue 47), the squatter stays where it is.
    let other = rig.conf("1.0.0", json!({"device": nic.name}));
    let add = rig.call("ADD", &other, &tenant.path(), &rig.cid(2), IF, &[]);
    assert_eq!(code(&add), 102, "{add}");
    assert!(msg(&add).contains("is not that NIC"), "{add}");
    assert!(link(None, &nic.name).is_some_and(|l| l.mac == squatter.mac));
    assert!(link(Some(&tenant.name), IF).is_none(), "{add}");

    // The victim's DEL: done, the NIC home by its identity under a name that says so.
    let del = rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[]);
    del.ok();
    rig.assert_state_empty(&del);
    let home = nic
        .on_host()
        .unwrap_or_else(|| panic!("the NIC is not on the host\n{del}"));
    let stem: String = nic.name.chars().take(9).collect();
    assert!(
        home.name.starts_with(&format!("{stem}~")) && home.name.len() <= 15,
        "came home as {}\n{del}",
        home.name
    );
    assert_eq!(home.mtu, nic.mtu, "{del}");
    assert!(
        link_by_mac(Some(&victim.name), &nic.mac).is_none(),
        "still in the pod\n{del}"
    );
    assert!(
        del.stderr.contains(&format!(
            "came home as {}: its name {} is taken",
            home.name, nic.name
        )),
        "the log says where the NIC is and why\n{del}"
    );
    let report = rig.inspect(None, &[]);
    assert!(
        report.contains(&home.name)
            && report.contains(&format!("its own, {}, was taken", nic.name)),
        "inspect says what happened:\n{report}"
    );
    // Once the squatter is gone, the operator renames it back.
    ip(&["-n", &attacker.name, "link", "del", &peer]);
    ip(&["link", "set", &home.name, "name", &nic.name]);
    nic.assert_home(Some(&victim), &"renamed back");
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
    let add = rig.call_on_thread(
        "ADD",
        &conf,
        pod.path(),
        rig.cid(0),
        IF,
        &[("RHD_FAULT", "add:after-state:sleep=1500")],
    );
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

/// Issue 47, item 1: a neighbour with NET_ADMIN stacks a `macvlan mode passthru` of its own
/// namespace on another pod's NIC while that pod holds it (through an id for the victim's
/// namespace, which one dump of the host with IFLA_TARGET_NETNSID gives it; here made from the
/// victim's side with `netns`, the same link in the end). CHECK fails naming it; DEL deletes
/// it before the NIC leaves, so the NIC comes home clean and the next ADD takes it.
#[test]
fn a_neighbours_macvlan_on_an_attached_nic_fails_check_and_del_removes_it() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let attacker = rig.netns(1);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    let result = rig
        .call("ADD", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = result;
    rig.call("CHECK", &check_conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    let mv = format!("rh{}p{}", tag(), rig.n);
    stack_passthru(&victim, IF, &attacker, &mv);
    assert_eq!(macvlans(&attacker.name), vec![mv.clone()]);

    let check = rig.call("CHECK", &check_conf, &victim.path(), &rig.cid(0), IF, &[]);
    let e = check.err_code(106);
    let m = e["msg"].as_str().unwrap_or("");
    assert!(
        m.contains(&format!("macvlan {mv} in /run/netns/{}", attacker.name)),
        "CHECK names what rides the NIC: {m}\n{check}"
    );

    let del = rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(
        macvlans(&attacker.name).is_empty(),
        "the neighbour's macvlan outlived DEL\n{del}"
    );
    assert!(
        del.stderr.contains(&format!("macvlan {mv}")) && del.stderr.contains("was deleted"),
        "DEL logs what it deleted\n{del}"
    );
    nic.assert_home(Some(&victim), &del);
    rig.assert_state_empty(&del);
    // Home clean: the next ADD is not refused for an upper riding it.
    rig.call("ADD", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
}

/// Issue 47, item 6: while a pod holds the NIC, a neighbour makes a host link with no lower or
/// peer (an `ifb`: nothing in netlink says which namespace made it) under the NIC's name.
/// Another tenant's ADD of that name is refused (102, naming the attachment that holds the
/// NIC), never handed the dead link; the pod's DEL still brings the NIC home.
#[test]
fn a_peerless_host_link_squatting_a_pods_nic_name_is_not_that_nic() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let victim = rig.netns(0);
    let tenant = rig.netns(2);
    let conf = rig.conf("1.0.0", json!({"device": nic.name}));
    rig.call("ADD", &conf, &victim.path(), &rig.cid(0), IF, &[])
        .ok();
    // Made on the host as a pod with the node's NET_ADMIN would (through the host's id).
    ip(&["link", "add", &nic.name, "type", "ifb"]);
    let squatter = link(None, &nic.name).expect("the squatter on the host");

    let add = rig.call("ADD", &conf, &tenant.path(), &rig.cid(2), IF, &[]);
    assert_eq!(code(&add), 102, "{add}");
    let m = msg(&add);
    assert!(
        m.contains(&format!("is attached to container {}", rig.cid(0)))
            && m.contains("not that NIC"),
        "the error says the name's NIC is in a pod and this link is not it: {m}"
    );
    assert!(link(Some(&tenant.name), IF).is_none(), "{add}");
    assert!(link(None, &nic.name).is_some_and(|l| l.index == squatter.index));

    let del = rig.call("DEL", &conf, &victim.path(), &rig.cid(0), IF, &[]);
    del.ok();
    assert!(nic.on_host().is_some(), "the NIC is not home\n{del}");
    ip(&["link", "del", &nic.name]);
    // The squatter gone, the NIC comes back to its name through the operator.
    if let Some(home) = nic.on_host()
        && home.name != nic.name
    {
        ip(&["link", "set", &home.name, "name", &nic.name]);
    }
    nic.assert_home(Some(&victim), &"renamed back");
}

/// The first step of issue 47's item 1, as a pod takes it: one RTM_GETLINK dump of the host
/// through the id its namespace has for the host's (IFLA_TARGET_NETNSID, argv[1]). Prints
/// "links N" (N links came back) or "refused ERRNO".
const TARGET_DUMP: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.bind((0, 0))
body = struct.pack("=BxHiII", 0, 0, 0, 0, 0) + struct.pack("=HHi", 8, 46, int(sys.argv[1]))
s.send(struct.pack("=IHHII", 16 + len(body), 18, 0x301, 1, 0) + body)
links = 0
while True:
    data, at = s.recv(1 << 20), 0
    while at + 16 <= len(data):
        n, kind = struct.unpack_from("=IH", data, at)
        if kind in (2, 3):
            code = struct.unpack_from("=i", data, at + 16)[0] if n >= 20 else 0
            print(f"refused {-code}" if code < 0 else f"links {links}")
            sys.exit(0)
        links += kind == 16
        at += (n + 3) & ~3
"#;

/// The id that the namespace `prefix` runs `ip` in has for the host's, as its veth `link` (its
/// peer on the host) shows it.
fn host_id(prefix: &[&str], link: &str) -> String {
    let mut args: Vec<&str> = prefix.to_vec();
    args.extend(["ip", "-j", "-d", "link", "show", "dev", link]);
    let out = run(args[0], &args[1..]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    match &v[0]["link_netnsid"] {
        serde_json::Value::Number(n) => n.to_string(),
        other => panic!(
            "{link} shows no link-netnsid ({other}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// docs/trust.md: `hostUsers: false` ends what a NET_ADMIN pod can do to its neighbours through
/// namespace ids. A pod in the node's user namespace (the control) gets the host's links through
/// the id its namespace has for the host's, the first step to riding a neighbour's NIC; the same
/// pod in a user namespace of its own, root there as `hostUsers: false` makes it, is refused
/// (EACCES): its NET_ADMIN is not the host namespace's owner's. The pod is a stand-in made with
/// `unshare --user --map-root-user --net`, a user namespace owning the pod's network namespace,
/// as the runtime makes one; the check refusing it is the kernel's, whichever made the pod.
#[test]
fn a_pod_in_a_user_namespace_of_its_own_is_refused_the_hosts_links_through_its_namespace_id() {
    let rig = Rig::new();
    let t = tag();
    let shared = rig.netns(0);
    let (h0, p0) = (format!("rh{t}h{}", rig.n), format!("rh{t}p{}", rig.n));
    ip(&[
        "link",
        "add",
        &h0,
        "type",
        "veth",
        "peer",
        "name",
        &p0,
        "netns",
        &shared.name,
    ]);
    let exec = ["ip", "netns", "exec", shared.name.as_str()];
    let id = host_id(&exec, &p0);
    let mut args = exec.to_vec();
    args.extend(["python3", "-c", TARGET_DUMP, &id]);
    let got = run(args[0], &args[1..]);
    let said = String::from_utf8_lossy(&got.stdout).trim().to_owned();
    assert!(
        said.starts_with("links ") && said != "links 0",
        "the control: a pod in the node's user namespace dumps the host's links: {said:?} {}",
        String::from_utf8_lossy(&got.stderr)
    );

    let mut pod = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "sleep", "600"])
        .spawn()
        .expect("unshare");
    let pid = pod.id().to_string();
    let ours = std::fs::read_link("/proc/self/ns/user").expect("our user namespace");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{pid}/ns/user")).ok() == Some(ours.clone()) {
        assert!(
            std::time::Instant::now() < deadline,
            "unshare made no namespaces"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (h1, p1) = (format!("rh{t}H{}", rig.n), format!("rh{t}P{}", rig.n));
    ip(&[
        "link", "add", &h1, "type", "veth", "peer", "name", &p1, "netns", &pid,
    ]);
    let enter = ["nsenter", "-t", pid.as_str(), "-U", "-n"];
    let id = host_id(&enter, &p1);
    let mut args = enter.to_vec();
    args.extend(["python3", "-c", TARGET_DUMP, &id]);
    let got = run(args[0], &args[1..]);
    let _ = pod.kill();
    let _ = pod.wait();
    let said = String::from_utf8_lossy(&got.stdout).trim().to_owned();
    assert_eq!(
        said,
        format!("refused {}", libc::EACCES),
        "a pod in a user namespace of its own: {}",
        String::from_utf8_lossy(&got.stderr)
    );
}
