//! `rdma-host-device-agent inspect`, as an operator runs it: a NIC attached to a pod shows where it
//! is, its MTU and admin state as the pod sees them, and the attachment; once DEL ran it is
//! back on the host. Its counters: totals, and with `--watch` the pod's traffic per second
//! while a sender in the pod runs.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

fn row<'a>(report: &'a Value, nic: &str) -> Option<&'a Value> {
    report["nics"].as_array()?.iter().find(|n| n["name"] == nic)
}

#[test]
fn inspect_shows_a_nic_in_its_pod_then_at_home() {
    require_root();
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let mut conf = rig.conf("1.0.0", json!({ "device": nic.name }));
    conf["mtu"] = json!(1300);
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();

    let report = rig.inspect_json(None);
    let r = row(&report, &nic.name).unwrap_or_else(|| panic!("{} missing: {report}", nic.name));
    assert_eq!(r["location"], "pod", "{r}");
    assert_eq!(r["mtu"], 1300, "the MTU as the pod sees it: {r}");
    assert_eq!(r["adminUp"], true, "{r}");
    assert_eq!(r["attachment"]["containerID"], rig.cid(0), "{r}");
    assert_eq!(r["attachment"]["ifname"], "net1", "{r}");
    // The exporter's counters, read in the pod: totals without --watch, no rates.
    assert!(r["counters"]["netdev"]["txBytes"].is_u64(), "{r}");
    assert!(r["counters"]["rates"].is_null(), "{r}");

    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    let report = rig.inspect_json(None);
    let r = row(&report, &nic.name);
    // A veth without RDMA is a virtual link: hidden unless --all, and never "in a pod" again.
    assert!(
        r.is_none_or(|r| r["location"] == "host" && r["attachment"].is_null()),
        "{report}"
    );
}

#[test]
fn inspect_watch_shows_a_pods_traffic_per_second() {
    require_root();
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let conf = rig.conf("1.0.0", json!({ "device": nic.name }));
    rig.call("ADD", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
    // The wire's host end gets .1; the pod has .2 from static IPAM.
    let o = rig.octet();
    ip(&["addr", "add", &format!("10.77.{o}.1/24"), "dev", &nic.peer]);
    ip(&["link", "set", &nic.peer, "up"]);

    // A sender in the pod: 1,000-byte UDP datagrams, ~1,000 a second, for 8 s (both
    // inspects below sample within that).
    let send = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         end=time.time()+8\n\
         while time.time()<end:\n s.sendto(b'x'*1000,('10.77.{o}.1',9)); time.sleep(0.001)"
    );
    let mut sender = Command::new("ip")
        .args(["netns", "exec", &pod.name, "python3", "-c", &send])
        .spawn()
        .expect("start the sender");
    std::thread::sleep(Duration::from_millis(500));
    let report: Value = serde_json::from_str(&rig.inspect(None, &["--json", "--watch", "1"]))
        .expect("inspect --json --watch prints JSON");
    let table = rig.inspect(None, &["--watch=1", "--color", "never"]);
    let status = sender.wait().unwrap();
    assert!(status.success(), "sender: {status:?}");

    let r = row(&report, &nic.name).unwrap_or_else(|| panic!("{} missing: {report}", nic.name));
    let c = &r["counters"];
    let rates = &c["rates"];
    let secs = rates["intervalSeconds"].as_f64().unwrap();
    assert!((0.9..5.0).contains(&secs), "interval {secs}: {c}");
    let tx = rates["netdev"]["txBytes"].as_f64().unwrap();
    let txp = rates["netdev"]["txPackets"].as_f64().unwrap();
    // At most ~1,000 datagrams of 1,042 bytes on the wire a second; at least some.
    assert!(tx > 0.0 && tx < 2_000_000.0, "tx bytes/s {tx}: {c}");
    assert!(txp > 0.0, "tx packets/s {txp}: {c}");
    assert!(
        (tx / txp - 1042.0).abs() < 50.0,
        "bytes per packet {}: {c}",
        tx / txp
    );
    assert!(c["netdev"]["txBytes"].as_u64().unwrap() >= 1042, "{c}");
    eprintln!("inspect --watch 1: {tx:.0} B/s, {txp:.0} packets/s over {secs:.2} s");

    assert!(table.contains("Traffic per second over"), "{table}");
    let line = table
        .lines()
        .rfind(|l| l.starts_with(&format!("{} ", nic.name)))
        .unwrap_or_else(|| panic!("no counters row: {table}"));
    // People read a container ID by its first 12 characters; the rig's IDs carry the test's
    // PID, so on a fresh machine (small PIDs) one can be shorter than that and is shown whole.
    let cid = rig.cid(0);
    let short = cid.get(..12).unwrap_or(&cid);
    assert!(line.contains(&format!("{short} as net1")), "{table}");
    let fields: Vec<&str> = line.split_whitespace().collect();
    // NIC, POD (3 words), RX "N unit/s", RX PKTS, TX "N unit/s", TX PKTS...
    let tx_cell = format!("{} {}", fields[7], fields[8]);
    assert!(
        tx_cell.ends_with("/s") && !tx_cell.starts_with("0 "),
        "TX {tx_cell}: {table}"
    );

    rig.call("DEL", &conf, &pod.path(), &rig.cid(0), "net1", &[])
        .ok();
}

/// A process named like a runtime (this test's copy of `sleep`, started by util-linux's
/// prlimit with a 4 MiB memlock limit), standing in for the daemon: inspect reads its name, its
/// limits and, through its /proc root, the NRI socket and the CDI spec.
struct FakeRuntime {
    child: std::process::Child,
    pid: u32,
}

impl FakeRuntime {
    fn start(rig: &Rig, name: &str) -> FakeRuntime {
        FakeRuntime::start_as(rig, name, "/bin/sleep", &["30"])
    }

    /// `program` copied under the runtime's `name`, run with `args` (a shell, so that the
    /// command line can carry a runtime's own flags such as containerd's `--config FILE`).
    fn start_as(rig: &Rig, name: &str, program: &str, args: &[&str]) -> FakeRuntime {
        let fake = rig.dir.path().join(name);
        std::fs::copy(program, &fake).unwrap();
        let child = Command::new("prlimit")
            .args(["--memlock=4194304:4194304"])
            .arg(&fake)
            .args(args)
            .spawn()
            .expect("prlimit (util-linux)");
        let pid = child.id();
        // prlimit execs the program in the same process: wait until it has the runtime's name.
        let comm = format!("/proc/{pid}/comm");
        for _ in 0..100 {
            if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == name) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        FakeRuntime { child, pid }
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where containers get the node's memlock from, per runtime, and the exact setting where no
/// path reaches every process: NRI socket there -> NRI, no advice; our CDI spec only -> the
/// hook (first process only) and the runtime's settings; neither -> the same settings. Each
/// runtime is named with its own (containerd: NRI, base_runtime_spec, LimitMEMLOCK; CRI-O:
/// enable_nri, default_ulimits).
#[test]
fn inspect_names_each_runtimes_memlock_path_and_the_setting_to_change() {
    require_root();
    let rig = Rig::new();
    // containerd's configuration, named on its command line: NRI's default validator on (the
    // fail-closed setting of docs/deploy.md), which the report names.
    let config = rig.dir.path().join("containerd.toml");
    std::fs::write(
        &config,
        "version = 3\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  [plugins.\"io.containerd.nri.v1.nri\".default_validator]\n    enable = true\n",
    )
    .unwrap();
    // (A script, not `sh -c`: containerd's own `-c` is `--config`.)
    let script = rig.dir.path().join("runtime.sh");
    std::fs::write(&script, "sleep 30\n").unwrap();
    let containerd = FakeRuntime::start_as(
        &rig,
        "containerd",
        "/bin/sh",
        &[
            script.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let crio = FakeRuntime::start(&rig, "crio");
    let nri = rig.dir.path().join("nri/nri.sock");
    let cdi = rig.dir.path().join("cdi/rdma-host-device.json");
    std::fs::create_dir_all(nri.parent().unwrap()).unwrap();
    std::fs::create_dir_all(cdi.parent().unwrap()).unwrap();
    let paths = [
        "--nri-socket",
        nri.to_str().unwrap(),
        "--cdi-spec",
        cdi.to_str().unwrap(),
    ];
    let report = |rig: &Rig| -> (Value, String) {
        let json: Value =
            serde_json::from_str(&rig.inspect(None, &[&["--json"][..], &paths[..]].concat()))
                .unwrap();
        let text = rig.inspect(None, &[&["--color", "never"][..], &paths[..]].concat());
        (json, text)
    };
    let of = |r: &Value, pid: u32| -> Value {
        r["runtimes"]
            .as_array()
            .and_then(|rs| rs.iter().find(|x| x["pid"] == pid))
            .cloned()
            .unwrap_or_else(|| panic!("pid {pid} not among the runtimes: {r:#}"))
    };

    // Neither: containerd 1.6.
    let (r, text) = report(&rig);
    let c = of(&r, containerd.pid);
    assert_eq!(
        (
            &c["runtime"],
            &c["memlockBytes"],
            &c["nri"],
            &c["nriValidator"],
            &c["memlockPath"]
        ),
        (
            &json!("containerd"),
            &json!(4194304),
            &json!(false),
            &json!(true),
            &json!("neither")
        ),
        "{c}"
    );
    assert!(
        of(&r, crio.pid).get("nriValidator").is_none(),
        "a containerd setting"
    );
    let advice = c["advice"].as_str().unwrap_or("");
    for setting in [
        "[plugins.\"io.containerd.nri.v1.nri\"] disable = false",
        "base_runtime_spec",
        "\"type\": \"RLIMIT_MEMLOCK\"",
        "LimitMEMLOCK=infinity",
    ] {
        assert!(advice.contains(setting), "{setting}: {advice}");
    }
    let o = of(&r, crio.pid);
    let advice = o["advice"].as_str().unwrap_or("");
    for setting in ["enable_nri = true", "default_ulimits = [\"memlock=-1:-1\"]"] {
        assert!(advice.contains(setting), "{setting}: {advice}");
    }
    assert!(
        text.contains(&format!(
            "Runtime: containerd (pid {}), containers inherit memlock 4096 KiB; NRI socket {} absent; NRI validator on (pods fail-closed.yaml marks wait for the nri container); memlock path: neither",
            containerd.pid,
            nri.display()
        )),
        "{text}"
    );

    // Our CDI spec, no NRI: the hook reaches only the first process; exec'd ones inherit.
    std::fs::write(&cdi, "{}").unwrap();
    let (r, _) = report(&rig);
    let c = of(&r, containerd.pid);
    assert_eq!(c["memlockPath"], "cdiHookOnly", "{c}");
    let advice = c["advice"].as_str().unwrap_or("");
    assert!(
        advice.contains("only a container's first process") && advice.contains("base_runtime_spec"),
        "{advice}"
    );

    // NRI's socket: the plugin puts the limit in the spec; nothing to change.
    let _listener = std::os::unix::net::UnixListener::bind(&nri).unwrap();
    let (r, text) = report(&rig);
    let c = of(&r, containerd.pid);
    assert_eq!(
        (&c["nri"], &c["memlockPath"]),
        (&json!(true), &json!("nri")),
        "{c}"
    );
    assert!(c.get("advice").is_none(), "{c}");
    assert!(
        text.contains(&format!(
            "NRI socket {} there; NRI validator on (pods fail-closed.yaml marks wait for the nri container); memlock path: NRI",
            nri.display()
        )),
        "{text}"
    );
    // Without ptrace rights over the runtime (the DaemonSet's unprivileged install container),
    // its files cannot be seen: the path is unknown, not "neither".
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(AGENT)
        .args(["inspect", "--json", "--state-dir", "/nonexistent-rhd"])
        .args(paths)
        .output()
        .expect("setpriv (util-linux)");
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&out)));
    let c = of(&r, containerd.pid);
    assert_eq!(c["memlockPath"], "unknown", "{c}");
    assert!(
        c["advice"]
            .as_str()
            .is_some_and(|a| a.contains("cannot see containerd's files")),
        "{c}"
    );
    drop(containerd);
    drop(crio);
}
