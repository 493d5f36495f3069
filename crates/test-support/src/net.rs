//! Network namespaces and veth "host NICs" with RAII cleanup, and links/routes read through `ip -j`.

use crate::process::{ip, ip_in, run};
use serde_json::Value;
use std::fmt;

// ---------------------------------------------------------------- netns

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        let _ = run("ip", &["netns", "del", name]);
        ip(&["netns", "add", name]);
        // lo up, like a runtime's sandbox would have it
        let _ = run("ip", &["-n", name, "link", "set", "lo", "up"]);
        Netns {
            name: name.to_owned(),
        }
    }
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
    /// Delete it now (idempotent; drop does it again harmlessly).
    pub fn delete(&self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.delete();
    }
}

// ---------------------------------------------------------------- links

/// A veth pair standing in for a host NIC: `name` is the NIC, `peer` stays on the host.
/// Drop deletes whatever is left of it on the host, found by name or by its MAC (so a NIC
/// that came home under a wrong name is cleaned too). Create it before the pod netns so the
/// netns is dropped first (a veth in a dying netns is destroyed with it).
pub struct Veth {
    pub name: String,
    pub peer: String,
    pub mac: String,
    pub mtu: u64,
}

impl Veth {
    pub fn new(name: &str, peer: &str, mtu: u64) -> Veth {
        assert!(name.len() <= 15 && peer.len() <= 15, "ifname too long");
        let _ = run("ip", &["link", "del", name]);
        let _ = run("ip", &["link", "del", peer]);
        let m = mtu.to_string();
        ip(&[
            "link", "add", name, "mtu", &m, "type", "veth", "peer", "name", peer, "mtu", &m,
        ]);
        let mac = link(None, name).expect("new veth").mac;
        Veth {
            name: name.to_owned(),
            peer: peer.to_owned(),
            mac,
            mtu,
        }
    }

    /// The NIC as seen on the host under any name (by MAC).
    pub fn on_host(&self) -> Option<Link> {
        link_by_mac(None, &self.mac)
    }

    /// Assert the NIC is on the host with its original name and MTU, and not in `pod`.
    pub fn assert_home(&self, pod: Option<&Netns>, ctx: &dyn fmt::Display) {
        let l = link(None, &self.name);
        let Some(l) = l else {
            panic!(
                "NIC {} ({}) is not on the host under its original name; host has it as {:?}; pod has {:?}\n{ctx}",
                self.name,
                self.mac,
                self.on_host().map(|l| l.name),
                pod.map(|p| links(Some(&p.name))
                    .into_iter()
                    .map(|l| l.name)
                    .collect::<Vec<_>>())
            )
        };
        assert!(
            l.mac.eq_ignore_ascii_case(&self.mac),
            "host link {} has MAC {}, expected {}\n{ctx}",
            self.name,
            l.mac,
            self.mac
        );
        assert_eq!(
            l.mtu, self.mtu,
            "NIC {} is home but with MTU {} instead of its original {}\n{ctx}",
            self.name, l.mtu, self.mtu
        );
        if let Some(pod) = pod {
            assert!(
                link_by_mac(Some(&pod.name), &self.mac).is_none(),
                "the NIC's MAC is still present in the pod netns\n{ctx}"
            );
        }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        if let Some(l) = self.on_host() {
            let _ = run("ip", &["link", "del", &l.name]);
        }
        let _ = run("ip", &["link", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.peer]);
    }
}

/// One link as `ip -j addr show` reports it.
#[derive(Debug, Clone)]
pub struct Link {
    pub index: u64,
    pub name: String,
    pub mac: String,
    pub mtu: u64,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// "addr/prefix" strings.
    pub addrs: Vec<String>,
    pub alias: Option<String>,
}

fn parse_link(v: &Value) -> Link {
    let flags: Vec<&str> = v["flags"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Link {
        index: v["ifindex"].as_u64().unwrap_or(0),
        name: v["ifname"].as_str().unwrap_or("").to_owned(),
        mac: v["address"].as_str().unwrap_or("").to_lowercase(),
        mtu: v["mtu"].as_u64().unwrap_or(0),
        up: flags.contains(&"UP"),
        addrs: v["addr_info"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|ai| {
                        format!(
                            "{}/{}",
                            ai["local"].as_str().unwrap_or(""),
                            ai["prefixlen"].as_u64().unwrap_or(0)
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        alias: v["ifalias"].as_str().map(str::to_owned),
    }
}

/// A neighbour's `macvlan mode passthru` named `name` in namespace `attacker`, riding link
/// `ifname` of `victim` (made from the victim's side with `netns`: the same link in the end as
/// one made through an id for the victim's namespace).
pub fn stack_passthru(victim: &Netns, ifname: &str, attacker: &Netns, name: &str) {
    ip(&[
        "-n",
        &victim.name,
        "link",
        "add",
        "link",
        ifname,
        "name",
        name,
        "netns",
        &attacker.name,
        "type",
        "macvlan",
        "mode",
        "passthru",
    ]);
}

/// All links in the host (`None`) or in netns `ns`.
pub fn links(ns: Option<&str>) -> Vec<Link> {
    let out = ip_in(ns, &["-j", "addr", "show"]);
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut all: Vec<Link> = v
        .as_array()
        .map(|a| a.iter().map(parse_link).collect())
        .unwrap_or_default();
    // `ip -j addr show` leaves out the alias; `ip -j link show` has it.
    let out = ip_in(ns, &["-j", "link", "show"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    for l in v.as_array().into_iter().flatten() {
        if let (Some(i), Some(a)) = (l["ifindex"].as_u64(), l["ifalias"].as_str())
            && let Some(link) = all.iter_mut().find(|x| x.index == i)
        {
            link.alias = Some(a.to_owned());
        }
    }
    all
}

/// The link called `name`, if any.
pub fn link(ns: Option<&str>, name: &str) -> Option<Link> {
    links(ns).into_iter().find(|l| l.name == name)
}

/// The link with MAC `mac` (any case), if any.
pub fn link_by_mac(ns: Option<&str>, mac: &str) -> Option<Link> {
    links(ns)
        .into_iter()
        .find(|l| l.mac.eq_ignore_ascii_case(mac))
}

/// IPv4 routes in the host (`None`) or in netns `ns`, as `ip -j route show` objects.
pub fn routes(ns: Option<&str>) -> Vec<Value> {
    let out = ip_in(ns, &["-j", "route", "show"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array().cloned().unwrap_or_default()
}

/// A human-readable dump of a netns (or the host) for failure messages.
pub fn dump(ns: Option<&str>) -> String {
    let a = ip_in(ns, &["addr", "show"]);
    let r = ip_in(ns, &["route", "show"]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&r.stdout)
    )
}

/// What the kernel does to a physical NIC when the netns holding it dies: it goes down and
/// back to the host netns under the name it had in the pod, keeping its alias and MTU; then
/// the netns goes away. Virtual links cannot show this here: veth, ifb and vxlan die with the
/// netns and bridges cannot change netns at all, so the test does the kernel's part by hand.
pub fn kill_netns_refunding(pod: &Netns, ifname: &str) {
    let me = std::process::id().to_string();
    ip(&["-n", &pod.name, "link", "set", "dev", ifname, "down"]);
    ip(&["-n", &pod.name, "link", "set", "dev", ifname, "netns", &me]);
    pod.delete();
}

/// The MTU every test NIC starts with, so a restored MTU is recognisable.
pub const ORIG_MTU: u64 = 1337;
