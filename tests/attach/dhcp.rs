//! DHCP IPAM end to end: the lease a pod got must be given back to the DHCP server on DEL.
//!
//! The wire: a veth pair whose host end is the NIC the plugin takes and whose other end sits
//! in a "server" netns running dnsmasq. Debian's CNI `dhcp` plugin talks to its daemon
//! (`/usr/lib/cni/dhcp daemon`, started here with its own socket), which keeps a DHCP client
//! per lease inside the pod's netns, bound to the interface. The daemon can only send
//! DHCPRELEASE while that interface is still in the pod, so DEL must release IPAM before it
//! gives the NIC back to the host. Needs root, dnsmasq (scripts/setup.sh installs
//! dnsmasq-base) and Debian's containernetworking-plugins.

use test_support as common;

use common::*;
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DNSMASQ: &str = "/usr/sbin/dnsmasq";
const DHCP_PLUGIN: &str = "/usr/lib/cni/dhcp";

/// A background process killed (SIGTERM, then SIGKILL) and reaped on drop, so a failing
/// test leaves no daemon behind.
struct Daemon {
    what: &'static str,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(what: &'static str, cmd: &mut Command, log: &Path) -> Daemon {
        let out = fs::File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let err = out.try_clone().expect("dup log fd");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"));
        Daemon {
            what,
            child,
            log: log.to_path_buf(),
        }
    }

    fn output(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until `ready()` holds; panic with the daemon's output if it exits or takes 10 s.
    fn wait_ready(&mut self, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "{} exited ({st}) before it was ready:\n{}",
                    self.what,
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after 10 s:\n{}",
                self.what,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child, not yet reaped (so the pid is still ours).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `cond` for up to `secs`.
fn eventually(secs: u64, cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dhcp_lease_is_released_on_del() {
    let rig = Rig::new();
    // Drop order is the reverse: daemons, then the netns, then the NIC, then the rig's dir.
    let nic = rig.nic(0);
    let server = rig.netns(1);
    let pod = rig.netns(0);
    let o = rig.octet();
    let dir = rig.dir.path().to_path_buf();

    // The server end of the wire. A veth whose peer is in another namespace may have been
    // made from there (docs/trust.md): the node names this one in allowedNics.
    ip(&["link", "set", &nic.peer, "netns", &server.name]);
    // The daemon's socket is this rig's, not the default /run/cni/dhcp.sock: the node names it
    // for dhcp (ipamSockets), or the kernel refuses the connect (Landlock ABI 9).
    rig.set_node(json!({
        "allowedNics": {"names": [nic.name]},
        "ipamSockets": {"dhcp": [rig.data_dir().join("dhcp.sock")]},
    }));
    let srv_addr = format!("10.79.{o}.1/24");
    ip(&[
        "-n",
        &server.name,
        "addr",
        "add",
        &srv_addr,
        "dev",
        &nic.peer,
    ]);
    ip(&["-n", &server.name, "link", "set", &nic.peer, "up"]);

    let leases = dir.join("dnsmasq.leases");
    let dnsmasq_log = dir.join("dnsmasq.log");
    let dnsmasq_cmd = [
        "netns",
        "exec",
        &server.name,
        DNSMASQ,
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--port=0",
        "--user=root",
        "--group=root",
        &format!("--interface={}", nic.peer),
        "--bind-interfaces",
        &format!("--dhcp-range=10.79.{o}.10,10.79.{o}.50,255.255.255.0,1h"),
        &format!("--dhcp-leasefile={}", leases.display()),
        "--log-dhcp",
        &format!("--log-facility={}", dnsmasq_log.display()),
        &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
    ]
    .map(|s| s.to_string());
    let mut dnsmasq = Daemon::spawn(
        "dnsmasq",
        Command::new("ip").args(&dnsmasq_cmd),
        &dir.join("dnsmasq.out"),
    );
    let read_log = || fs::read_to_string(&dnsmasq_log).unwrap_or_default();
    dnsmasq.wait_ready(|| read_log().contains("DHCP, IP range"));

    // In the node's ipamPaths: the string check refuses a daemonSocketPath elsewhere.
    let sock = rig.data_dir().join("dhcp.sock");
    fs::create_dir_all(rig.data_dir()).unwrap();
    let mut daemon = Daemon::spawn(
        "CNI dhcp daemon",
        Command::new(DHCP_PLUGIN)
            .arg("daemon")
            .arg("-socketpath")
            .arg(&sock)
            .arg("-pidfile")
            .arg(dir.join("dhcp.pid")),
        &dir.join("dhcp-daemon.log"),
    );
    daemon.wait_ready(|| sock.exists());

    let mut conf = rig.conf("1.0.0", json!({"device": nic.name}));
    conf["ipam"] = json!({"type": "dhcp", "daemonSocketPath": sock});
    let path = rig.write("dhcp.conf", &conf);
    let cid = rig.cid(0);
    let logs = |out: &RunOut| {
        format!(
            "{out}\n---- dnsmasq log:\n{}\n---- leases:\n{}\n---- dhcp daemon:\n{}",
            read_log(),
            fs::read_to_string(&leases).unwrap_or_default(),
            daemon.output()
        )
    };

    let add = rig.drive("add", &path, &pod.path(), &cid, "net1", &[]);
    let res = add.ok();
    let addr = res["ips"][0]["address"].as_str().unwrap_or("").to_owned();
    let ip_only = addr.split('/').next().unwrap_or("").to_owned();
    let host: u32 = ip_only
        .strip_prefix(&format!("10.79.{o}."))
        .and_then(|h| h.parse().ok())
        .unwrap_or(0);
    assert!(
        (10..=50).contains(&host) && addr.ends_with("/24"),
        "ADD's address {addr:?} is not from dnsmasq's range 10.79.{o}.10-50/24\n{}",
        logs(&add)
    );
    let inside = link(Some(&pod.name), "net1")
        .unwrap_or_else(|| panic!("no net1 in the pod\n{}", logs(&add)));
    assert!(
        inside.addrs.contains(&addr),
        "net1 in the pod has {:?}, not {addr}\n{}",
        inside.addrs,
        logs(&add)
    );
    let leased = || {
        fs::read_to_string(&leases)
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some(ip_only.as_str()))
    };
    assert!(
        eventually(5, leased),
        "dnsmasq's lease file does not list {ip_only}\n{}",
        logs(&add)
    );

    let del = rig.drive("del", &path, &pod.path(), &cid, "net1", &[]);
    del.ok();
    rig.assert_detached(&nic, Some(&pod), &logs(&del));
    let released = eventually(5, || {
        read_log().contains(&format!("DHCPRELEASE({}) {ip_only} ", nic.peer)) && !leased()
    });
    assert!(
        released,
        "DEL did not give the lease on {ip_only} back to the DHCP server (no DHCPRELEASE, or \
         still in the lease file)\n{}",
        logs(&del)
    );
}
