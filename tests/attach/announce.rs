//! After ADD applies the addresses, what sriov-cni users expect: a gratuitous ARP and an
//! unsolicited neighbour advertisement seen on the segment, IPv6 addresses usable at once (not
//! `tentative`), and an IPv6 address with a pod MTU below 1280 refused with code 7. The veth
//! peer on the host is the "switch" side; it is brought up so the pod's link has carrier.
//! Driven through libcni.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const IF: &str = "net1";

/// A dual-stack 1.1.0 IPAM result: 10.77.X.2/24 and fd77:X::2/64.
fn dual_stack(rig: &Rig) -> (Value, Ipv4Addr, Ipv6Addr) {
    let o = rig.octet();
    let v4 = Ipv4Addr::new(10, 77, o as u8, 2);
    let v6: Ipv6Addr = format!("fd77:{o:x}::2").parse().unwrap();
    let result = json!({
        "cniVersion": "1.1.0",
        "ips": [
            {"address": format!("{v4}/24"), "gateway": format!("10.77.{o}.1")},
            {"address": format!("{v6}/64"), "gateway": format!("fd77:{o:x}::1")}
        ]
    });
    (result, v4, v6)
}

/// A raw packet socket on host link `name`, receiving every frame.
struct Capture {
    fd: i32,
}

impl Capture {
    fn on(name: &str) -> Capture {
        let cname = std::ffi::CString::new(name).unwrap();
        // SAFETY: plain libc calls on our own fd.
        unsafe {
            let index = libc::if_nametoindex(cname.as_ptr());
            assert!(index > 0, "no link {name}");
            let proto = (libc::ETH_P_ALL as u16).to_be();
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto));
            assert!(
                fd >= 0,
                "packet socket: {}",
                std::io::Error::last_os_error()
            );
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = index as i32;
            let rc = libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 100_000,
            };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            Capture { fd }
        }
    }

    /// Frames received until `done` says so or `limit` passes.
    fn until(&self, limit: Duration, mut done: impl FnMut(&[Vec<u8>]) -> bool) -> Vec<Vec<u8>> {
        let end = Instant::now() + limit;
        let mut frames = Vec::new();
        while Instant::now() < end && !done(&frames) {
            let mut buf = vec![0u8; 2048];
            // SAFETY: buf is valid for its length.
            let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n > 0 {
                buf.truncate(n as usize);
                frames.push(buf);
            }
        }
        frames
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // SAFETY: our own fd.
        unsafe { libc::close(self.fd) };
    }
}

fn mac_bytes(mac: &str) -> Vec<u8> {
    mac.split(':')
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// A gratuitous ARP for `ip` from `mac`: broadcast request, sender and target address `ip`.
fn is_garp(f: &[u8], mac: &[u8], ip: Ipv4Addr) -> bool {
    f.len() >= 42
        && f[..6] == [0xff; 6]
        && &f[6..12] == mac
        && f[12..14] == [0x08, 0x06]
        && f[20..22] == [0, 1]
        && &f[22..28] == mac
        && f[28..32] == ip.octets()
        && f[38..42] == ip.octets()
}

/// An unsolicited NA for `ip` from `mac`: to ff02::1, hop limit 255, Override set.
fn is_unsolicited_na(f: &[u8], mac: &[u8], ip: Ipv6Addr) -> bool {
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    f.len() >= 14 + 40 + 24
        && &f[6..12] == mac
        && f[12..14] == [0x86, 0xdd]
        && f[14 + 6] == 58
        && f[14 + 7] == 255
        && f[14 + 24..14 + 40] == all_nodes.octets()
        && f[54] == 136
        && f[58] & 0x20 != 0
        && f[62..78] == ip.octets()
}

#[test]
fn add_announces_every_address_from_the_pod_interface() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    ip(&["link", "set", &nic.peer, "up"]);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let (result, v4, v6) = dual_stack(&rig);
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
    conf["ipam"] = rig.fixed_ipam("fixed-ipam", &result);
    let file = rig.write("net.conf", &conf);

    let cap = Capture::on(&nic.peer);
    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    add.ok();
    let mac = mac_bytes(&nic.mac);
    let frames = cap.until(Duration::from_secs(3), |fs| {
        fs.iter().any(|f| is_garp(f, &mac, v4)) && fs.iter().any(|f| is_unsolicited_na(f, &mac, v6))
    });
    assert!(
        frames.iter().any(|f| is_garp(f, &mac, v4)),
        "no gratuitous ARP for {v4} from {} on the switch side ({} frames seen)\n{add}",
        nic.mac,
        frames.len()
    );
    assert!(
        frames.iter().any(|f| is_unsolicited_na(f, &mac, v6)),
        "no unsolicited neighbour advertisement for {v6} from {} on the switch side ({} frames seen)\n{add}",
        nic.mac,
        frames.len()
    );
    rig.drive("del", &file, &pod.path(), &cid, IF, &[]).ok();
    nic.assert_home(Some(&pod), &add);
}

#[test]
fn ipv6_addresses_are_not_tentative_right_after_add() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    ip(&["link", "set", &nic.peer, "up"]);
    let pod = rig.netns(0);
    let cid = rig.cid(0);
    let (result, _, v6) = dual_stack(&rig);
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name}));
    conf["ipam"] = rig.fixed_ipam("fixed-ipam", &result);
    let file = rig.write("net.conf", &conf);

    let add = rig.drive("add", &file, &pod.path(), &cid, IF, &[]);
    add.ok();
    let out = ip_in(Some(&pod.name), &["-6", "addr", "show", "dev", IF]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&v6.to_string()),
        "{v6} missing:\n{text}\n{add}"
    );
    // The IPAM addresses (scope global); the kernel's own link-local still runs DAD.
    assert!(
        !text
            .lines()
            .any(|l| l.contains("scope global") && l.contains("tentative")),
        "IPv6 address still tentative right after ADD:\n{text}\n{add}"
    );
    rig.drive("del", &file, &pod.path(), &cid, IF, &[]).ok();
}

/// IPv6 with a pod MTU below 1280: 7 before any change when the config shows the IPv6
/// address (static IPAM), and 7 with a full rollback when only IPAM's result does.
#[test]
fn ipv6_with_mtu_below_1280_fails_with_7() {
    let rig = Rig::new();
    let nic = rig.nic(0);
    let pod = rig.netns(0);
    let o = rig.octet();

    let mut conf = rig.conf("1.0.0", json!({"device": nic.name, "mtu": 1200}));
    conf["ipam"] = json!({"type": "static", "addresses": [
        {"address": format!("10.77.{o}.2/24")}, {"address": format!("fd77:{o:x}::2/64")}]});
    let file = rig.write("static.conf", &conf);
    let add = rig.drive("add", &file, &pod.path(), &rig.cid(0), IF, &[]);
    let e = add.err_code(7);
    assert!(
        e["msg"]
            .as_str()
            .is_some_and(|m| m.contains("IPv6 needs MTU >= 1280")),
        "{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
    let logs = &add.stderr;
    assert!(
        !logs.contains("moved "),
        "must fail before the NIC moves\n{add}"
    );

    let (result, _, _) = dual_stack(&rig);
    let mut conf = rig.conf("1.1.0", json!({"device": nic.name, "mtu": 1200}));
    conf["ipam"] = rig.fixed_ipam("fixed-ipam", &result);
    let file = rig.write("fixed.conf", &conf);
    let add = rig.drive("add", &file, &pod.path(), &rig.cid(1), IF, &[]);
    let e = add.err_code(7);
    assert!(
        e["msg"]
            .as_str()
            .is_some_and(|m| m.contains("IPv6 needs MTU >= 1280")),
        "{add}"
    );
    rig.assert_detached(&nic, Some(&pod), &add);
}
