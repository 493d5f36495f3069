//! The world the flow tests share (tests/give_back/faults.rs, gc.rs, lost_nic.rs, stress.rs): veth NICs, pods, one
//! CNI_IFNAME unique to the test, and the network's config selecting each NIC with host-local
//! IPAM (so a leaked address shows) and MTU 1400 (so a restored MTU shows). A test file adds
//! its own checks in an `impl World` of its own.

use crate::net::{Link, Netns, Veth, kill_netns_refunding, link, links};
use crate::process::{RunOut, ip};
use crate::rig::{Rig, tag};
use crate::root::require_root;
use serde_json::{Value, json};
use std::{fmt, fs};

pub struct World {
    pub rig: Rig,
    pub nics: Vec<Veth>,
    pub pods: Vec<Netns>,
    /// CNI_IFNAME, unique per test: a NIC lost to a dead pod lands on the shared host under it.
    pub ifname: String,
    /// The cniVersion of [`World::conf`].
    pub version: String,
    /// Held by a world that loses NICs or runs GC ([`lost_nic_lock`]). Declared last, so
    /// dropped last.
    _serial: Option<std::fs::File>,
}

impl World {
    /// `nics` NICs and `pods` pods, configs of `version`.
    pub fn new(version: &str, nics: u32, pods: u32) -> World {
        World::build(version, nics, pods, None)
    }

    /// [`World::new`] holding [`lost_nic_lock`] for the whole test: for tests that leave a
    /// NIC lost on the host or run GC (which restores every lost NIC on the node).
    pub fn losing(version: &str, nics: u32, pods: u32) -> World {
        World::build(version, nics, pods, Some(lost_nic_lock()))
    }

    fn build(version: &str, nics: u32, pods: u32, serial: Option<std::fs::File>) -> World {
        let rig = Rig::new();
        World {
            nics: (0..nics).map(|i| rig.nic(i)).collect(),
            pods: (0..pods).map(|i| rig.netns(i)).collect(),
            ifname: format!("w{}x{}", tag(), rig.n),
            version: version.to_owned(),
            rig,
            _serial: serial,
        }
    }

    /// The network's config selecting NIC `k`. With `$RHD_TEST_LOG` (a file name) the plugin
    /// logs there, in the rig's node logDir.
    pub fn conf(&self, k: usize) -> Value {
        let mut c = self.rig.host_local_conf(
            &self.version,
            json!({"device": self.nics[k].name, "mtu": 1400}),
        );
        if let Ok(f) = std::env::var("RHD_TEST_LOG") {
            c["logFile"] = json!(f);
        }
        c
    }

    /// The container ID of pod `i`.
    pub fn cid(&self, i: usize) -> String {
        self.rig.cid(i as u32)
    }

    /// `cmd` with `conf` for pod `i`'s attachment, `extra` in the environment.
    pub fn call_with(&self, cmd: &str, conf: &Value, i: usize, extra: &[(&str, &str)]) -> RunOut {
        self.rig.call(
            cmd,
            conf,
            &self.pods[i].path(),
            &self.cid(i),
            &self.ifname,
            extra,
        )
    }

    /// `cmd` for NIC `k` in pod `i`.
    pub fn call(&self, cmd: &str, k: usize, i: usize, extra: &[(&str, &str)]) -> RunOut {
        self.call_with(cmd, &self.conf(k), i, extra)
    }

    /// A 1.1.0 config of the network (no attachment's: GC and STATUS take none).
    fn network_conf(&self) -> Value {
        let mut c = self.conf(0);
        c["cniVersion"] = json!("1.1.0");
        c
    }

    /// GC listing `valid` (container ID, ifname) as the valid attachments.
    pub fn gc(&self, valid: &[(String, String)], extra: &[(&str, &str)]) -> RunOut {
        let mut c = self.network_conf();
        c["cni.dev/valid-attachments"] = valid
            .iter()
            .map(|(cid, ifname)| json!({"containerID": cid, "ifname": ifname}))
            .collect();
        self.rig.call("GC", &c, "", "", "", extra)
    }

    /// The attachments of pods `pods`, as GC's valid list names them.
    pub fn attachments(&self, pods: &[usize]) -> Vec<(String, String)> {
        pods.iter()
            .map(|&i| (self.cid(i), self.ifname.clone()))
            .collect()
    }

    pub fn status(&self) -> RunOut {
        self.rig
            .call("STATUS", &self.network_conf(), "", "", "", &[])
    }

    /// Links in pod `i` other than lo.
    pub fn pod_links(&self, i: usize) -> Vec<Link> {
        links(Some(&self.pods[i].name))
            .into_iter()
            .filter(|l| l.name != "lo")
            .collect()
    }

    /// Is NIC `k` in pod `i` as CNI_IFNAME?
    pub fn attached(&self, k: usize, i: usize) -> bool {
        link(Some(&self.pods[i].name), &self.ifname).is_some_and(|l| l.mac == self.nics[k].mac)
    }

    /// ADD NIC `k` into pod `i`, then let the pod die without DEL: the kernel hands the NIC
    /// back to the host under its pod-side name, still tagged (lost).
    pub fn attach_and_lose(&self, k: usize, i: usize) {
        let add = self.call("ADD", k, i, &[]);
        add.ok();
        kill_netns_refunding(&self.pods[i], &self.ifname);
        self.assert_lost(k, &add);
    }

    /// ADD NIC `k` into pod `i`; the pod dies with the NIC "in flight" (in a namespace no
    /// path names); the runtime's DEL runs; then the kernel hands the NIC back, lost, with no
    /// state file left about it.
    pub fn lose_after_del(&self, k: usize, i: usize) {
        let add = self.call("ADD", k, i, &[]);
        add.ok();
        let limbo = self.rig.netns(100 + i as u32);
        let pod = &self.pods[i].name;
        ip(&["-n", pod, "link", "set", "dev", &self.ifname, "down"]);
        ip(&[
            "-n",
            pod,
            "link",
            "set",
            "dev",
            &self.ifname,
            "netns",
            &limbo.name,
        ]);
        self.pods[i].delete();
        let del = self.call("DEL", k, i, &[]);
        del.ok();
        self.assert_no_ip_no_state(&del);
        kill_netns_refunding(&limbo, &self.ifname);
        self.assert_lost(k, &del);
    }

    /// NIC `k` is on the host under the pod-side name, still tagged.
    pub fn assert_lost(&self, k: usize, ctx: &dyn fmt::Display) {
        let nic = &self.nics[k];
        let l = link(None, &self.ifname)
            .unwrap_or_else(|| panic!("the lost NIC is not on the host as {}\n{ctx}", self.ifname));
        assert_eq!(l.mac, nic.mac, "{ctx}");
        assert!(
            l.alias
                .as_deref()
                .is_some_and(|a| a.starts_with("rdma-host-device:v1:")),
            "the lost NIC lost its tag: {:?}\n{ctx}",
            l.alias
        );
        assert!(
            link(None, &nic.name).is_none(),
            "precondition: the original name is free\n{ctx}"
        );
    }

    /// NIC `k` home under its original name and MTU, untagged, nothing under the pod-side
    /// name.
    pub fn assert_restored(&self, k: usize, ctx: &dyn fmt::Display) {
        let nic = &self.nics[k];
        nic.assert_home(None, ctx);
        let l = link(None, &nic.name).unwrap();
        assert!(
            l.alias.as_deref().is_none_or(str::is_empty),
            "restored NIC keeps alias {:?}\n{ctx}",
            l.alias
        );
        assert!(
            link(None, &self.ifname).is_none(),
            "a link still bears the pod-side name\n{ctx}"
        );
    }

    /// After the last DEL or GC: NIC `k` restored ([`World::assert_restored`]), no IP
    /// allocated, nothing in the stateDir.
    pub fn assert_restored_released(&self, k: usize, ctx: &dyn fmt::Display) {
        self.assert_restored(k, ctx);
        self.assert_no_ip_no_state(ctx);
    }

    /// No IP allocated on the network, nothing in the stateDir.
    pub fn assert_no_ip_no_state(&self, ctx: &dyn fmt::Display) {
        let a = self.rig.allocations(&self.rig.net_name());
        assert!(a.is_empty(), "IPs still allocated: {a:?}\n{ctx}");
        self.rig.assert_state_empty(ctx);
    }
}

/// Held by tests that leave a NIC lost on the host or that run GC (which restores every lost
/// NIC on the node, whoever lost it), so that they do not restore each other's lost NICs. A
/// file lock, so it also holds across test binaries and checkouts running at once.
pub fn lost_nic_lock() -> std::fs::File {
    use std::os::fd::AsRawFd;
    // Its file is root's: without root, skip (or fail in CI) as the rest of the test would.
    require_root();
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/rhd-tests-lost-nics.lock")
        .expect("open /tmp/rhd-tests-lost-nics.lock");
    // SAFETY: flock on our own fd; released when the File drops.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock /tmp/rhd-tests-lost-nics.lock");
    f
}
