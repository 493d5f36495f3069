//! Unit tests (fake sysfs trees, pure logic) and `#[ignore]`d tests that need a real RDMA kernel:
//! run them in the rdma VM (RDMA_VM=1) after `modprobe rdma_rxe` and creating rxe0 on veth v0
//! with 10.9.9.1/24; names contain "verbs" so `--ignored verbs` selects them all.

use super::*;
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------- fake sysfs trees

/// A directory under std::env::temp_dir(), removed on drop.
struct TempTree(PathBuf);

impl TempTree {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rdma-host-device-verbs-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        TempTree(dir)
    }

    fn write(&self, rel: &str, content: &str) {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, format!("{content}\n")).expect("write");
    }

    fn root(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

/// An rxe-like RoCE device: port 1 ACTIVE on netdev v0 (ifindex 7) with a link-local GID (v1 and
/// v2), ::ffff:10.9.9.1 (v1 and v2), an empty slot in between and after.
fn fake_rxe(tree: &TempTree) {
    let d = "class/infiniband/rxe0";
    tree.write(&format!("{d}/node_type"), "1: CA");
    tree.write(&format!("{d}/ports/1/state"), "4: ACTIVE");
    tree.write(&format!("{d}/ports/1/link_layer"), "Ethernet");
    let gids = [
        (
            "fe80:0000:0000:0000:5054:00ff:fe12:3456",
            Some("IB/RoCE v1"),
        ),
        ("fe80:0000:0000:0000:5054:00ff:fe12:3456", Some("RoCE v2")),
        (ZERO_GID, None),
        (
            "0000:0000:0000:0000:0000:ffff:0a09:0901",
            Some("IB/RoCE v1"),
        ),
        ("0000:0000:0000:0000:0000:ffff:0a09:0901", Some("RoCE v2")),
        (ZERO_GID, None),
    ];
    for (i, (gid, ty)) in gids.iter().enumerate() {
        tree.write(&format!("{d}/ports/1/gids/{i}"), gid);
        if let Some(ty) = ty {
            tree.write(&format!("{d}/ports/1/gid_attrs/types/{i}"), ty);
            tree.write(&format!("{d}/ports/1/gid_attrs/ndevs/{i}"), "v0");
        }
    }
    // Index 10 sorts after 2 numerically but before it as text.
    tree.write(
        &format!("{d}/ports/1/gids/10"),
        "2001:0db8:0000:0000:0000:0000:0000:0001",
    );
    tree.write(&format!("{d}/ports/1/gid_attrs/types/10"), "RoCE v2");
    tree.write(&format!("{d}/ports/1/gid_attrs/ndevs/10"), "v0");
    tree.write("class/net/v0/ifindex", "7");
}

#[test]
fn sysfs_parser_reads_fake_rxe() {
    let tree = TempTree::new();
    fake_rxe(&tree);
    let r = query_device_sysfs_at(tree.root(), "rxe0").expect("parse");
    assert_eq!(r.device, "rxe0");
    assert_eq!(r.transport, Transport::Ib);
    assert_eq!(r.source, Source::Sysfs);
    assert_eq!(r.verified, Verification::NotChecked);
    assert_eq!(
        r.ports,
        vec![PortInfo {
            port: 1,
            state: PortState::Active,
            link_layer: LinkLayer::Ethernet
        }]
    );
    let idx: Vec<u32> = r.gids.iter().map(|g| g.index).collect();
    assert_eq!(
        idx,
        vec![0, 1, 3, 4, 10],
        "zero GIDs skipped, numeric order"
    );
    let v2 = &r.gids[3];
    assert_eq!(v2.gid, Ipv4Addr::new(10, 9, 9, 1).to_ipv6_mapped());
    assert_eq!(v2.gid_type, GidType::RoceV2);
    assert_eq!(v2.ndev_ifindex, Some(7));
    assert_eq!(v2.port, 1);
    assert_eq!(
        r.gids[2].gid_type,
        GidType::RoceV1,
        "IB/RoCE v1 on Ethernet"
    );
    assert!(r.has_per_ip_gids());
    let addrs = [
        IpAddr::V4(Ipv4Addr::new(10, 9, 9, 1)),
        "2001:db8::1".parse().expect("v6"),
    ];
    assert!(missing_roce_v2(&r, &addrs).is_empty());
}

#[test]
fn sysfs_parser_unknown_netdev_and_racing_entry() {
    let tree = TempTree::new();
    fake_rxe(&tree);
    // The netdev is not in this sysfs's netns view (e.g. the host's /sys for a pod netdev).
    fs::remove_dir_all(tree.root().join("class/net/v0")).expect("rm");
    // A GID whose type attribute cannot be read (entry deleted between reads): skipped.
    tree.write(
        "class/infiniband/rxe0/ports/1/gids/11",
        "2001:0db8:0000:0000:0000:0000:0000:0002",
    );
    let r = query_device_sysfs_at(tree.root(), "rxe0").expect("parse");
    assert!(r.gids.iter().all(|g| g.ndev_ifindex.is_none()));
    assert_eq!(r.gids.len(), 5);
}

#[test]
fn sysfs_parser_device_not_visible() {
    let tree = TempTree::new();
    fake_rxe(&tree);
    for name in ["mlx5_0", "..", "../infiniband/rxe0", "", "a/b"] {
        match query_device_sysfs_at(tree.root(), name) {
            Err(VerbsError::DeviceNotVisible { device }) => assert_eq!(device, name),
            other => panic!("{name:?}: expected DeviceNotVisible, got {other:?}"),
        }
    }
    // No /sys/class/infiniband at all (kernel without RDMA).
    let empty = TempTree::new();
    assert!(matches!(
        query_device_sysfs_at(empty.root(), "rxe0"),
        Err(VerbsError::DeviceNotVisible { .. })
    ));
}

#[test]
fn sysfs_parser_bad_gid_is_an_error() {
    let tree = TempTree::new();
    fake_rxe(&tree);
    tree.write("class/infiniband/rxe0/ports/1/gids/3", "garbage");
    let err = query_device_sysfs_at(tree.root(), "rxe0").expect_err("must fail");
    assert!(matches!(err, VerbsError::Io(..)), "{err:?}");
    assert!(err.to_string().contains("gids/3"), "{err}");
}

fn fake_siw(tree: &TempTree, state: &str) {
    let d = "class/infiniband/siw0";
    tree.write(&format!("{d}/node_type"), "4: RNIC");
    tree.write(&format!("{d}/ports/1/state"), state);
    tree.write(&format!("{d}/ports/1/link_layer"), "Ethernet");
    tree.write(
        &format!("{d}/ports/1/gids/0"),
        "5254:0012:3456:0000:0000:0000:0000:0000",
    );
    tree.write(&format!("{d}/ports/1/gid_attrs/types/0"), "IB/RoCE v1");
}

#[test]
fn iwarp_is_verified_by_port_state_only() {
    let addrs = [IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))];
    let down = TempTree::new();
    fake_siw(&down, "1: DOWN");
    let r = query_device_sysfs_at(down.root(), "siw0").expect("parse");
    assert_eq!(r.transport, Transport::Iwarp);
    assert!(!r.has_per_ip_gids());
    match check(r, &addrs, Duration::ZERO) {
        Err(VerbsError::PortNotActive {
            device,
            port,
            state,
        }) => {
            assert_eq!((device.as_str(), port, state), ("siw0", 1, PortState::Down));
        }
        other => panic!("expected PortNotActive, got {other:?}"),
    }
    let up = TempTree::new();
    fake_siw(&up, "4: ACTIVE");
    let r = query_device_sysfs_at(up.root(), "siw0").expect("parse");
    let r = check(r, &addrs, Duration::ZERO).expect("active");
    assert_eq!(r.verified, Verification::PortActiveOnly);
}

// ---------------------------------------------------------------- pure logic

fn report_with(gids: &[(&str, GidType)]) -> DeviceReport {
    DeviceReport {
        device: "rxe0".into(),
        transport: Transport::Ib,
        ports: vec![PortInfo {
            port: 1,
            state: PortState::Active,
            link_layer: LinkLayer::Ethernet,
        }],
        gids: gids
            .iter()
            .enumerate()
            .map(|(i, (g, t))| GidEntry {
                port: 1,
                index: u32::try_from(i).expect("small"),
                gid: g.parse().expect("gid"),
                gid_type: *t,
                ndev_ifindex: Some(2),
            })
            .collect(),
        source: Source::Verbs,
        verified: Verification::NotChecked,
    }
}

#[test]
fn missing_roce_v2_maps_v4_and_v6() {
    let r = report_with(&[
        ("::ffff:10.0.0.1", GidType::RoceV2),
        ("::ffff:10.0.0.2", GidType::RoceV1),
        ("2001:db8::1", GidType::RoceV2),
        ("2001:db8::2", GidType::Ib),
    ]);
    let addrs: Vec<IpAddr> = [
        "10.0.0.1",
        "10.0.0.2",
        "2001:db8::1",
        "2001:db8::2",
        "10.0.0.3",
        "10.0.0.2",
    ]
    .iter()
    .map(|s| s.parse().expect("ip"))
    .collect();
    let missing: Vec<String> = missing_roce_v2(&r, &addrs)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(missing, ["10.0.0.2", "2001:db8::2", "10.0.0.3"]);
    // ::ffff:a.b.c.d is not the same as an IPv6 address that happens to embed it.
    let compat = report_with(&[("::10.0.0.1", GidType::RoceV2)]);
    assert_eq!(missing_roce_v2(&compat, &addrs[..1]), addrs[..1].to_vec());
    assert!(missing_roce_v2(&r, &[]).is_empty());
}

#[test]
fn gid_type_mapping() {
    assert_eq!(GidType::from_verbs(0), GidType::Ib);
    assert_eq!(GidType::from_verbs(1), GidType::RoceV1);
    assert_eq!(GidType::from_verbs(2), GidType::RoceV2);
    assert_eq!(GidType::from_verbs(9), GidType::Other(9));
    let eth = LinkLayer::Ethernet;
    let ib = LinkLayer::InfiniBand;
    assert_eq!(GidType::from_sysfs("IB/RoCE v1\n", eth), GidType::RoceV1);
    assert_eq!(GidType::from_sysfs("IB/RoCE v1", ib), GidType::Ib);
    assert_eq!(GidType::from_sysfs("RoCE v2", eth), GidType::RoceV2);
    assert_eq!(
        GidType::from_sysfs("RoCE v3", eth),
        GidType::Other(GidType::SYSFS_UNKNOWN)
    );
    assert_eq!(PortState::from_raw(4), PortState::Active);
    assert_eq!(PortState::from_raw(1), PortState::Down);
    assert_eq!(PortState::from_raw(5), PortState::ActiveDefer);
    assert_eq!(PortState::from_raw(0), PortState::Other(0));
    assert_eq!(LinkLayer::from_verbs(2), LinkLayer::Ethernet);
    assert_eq!(LinkLayer::from_verbs(1), LinkLayer::InfiniBand);
    assert_eq!(LinkLayer::from_verbs(0), LinkLayer::Unspecified);
    assert_eq!(LinkLayer::from_sysfs("InfiniBand"), LinkLayer::InfiniBand);
    assert_eq!(Transport::from_node_type(1), Transport::Ib);
    assert_eq!(Transport::from_node_type(4), Transport::Iwarp);
    assert_eq!(Transport::from_node_type(-1), Transport::Other);
}

#[test]
fn native_ib_port_is_not_checked_per_ip() {
    let mut r = report_with(&[("fe80::1", GidType::Ib)]);
    r.ports[0].link_layer = LinkLayer::InfiniBand;
    let r = check(r, &["10.0.0.1".parse().expect("ip")], Duration::ZERO).expect("active");
    assert_eq!(r.verified, Verification::PortActiveOnly);
}

#[test]
fn poll_until_backs_off_and_names_missing() {
    // Succeeds on the 4th query.
    let mut calls = 0;
    let addrs: Vec<IpAddr> = vec!["10.0.0.1".parse().expect("ip")];
    let r = poll_until(&addrs, Duration::from_secs(5), || {
        calls += 1;
        Ok(if calls < 4 {
            report_with(&[])
        } else {
            report_with(&[("::ffff:10.0.0.1", GidType::RoceV2)])
        })
    })
    .expect("eventually");
    assert_eq!(calls, 4);
    assert_eq!(r.verified, Verification::RoceV2Gids);

    // Never: 2+4+8+16+32+50+50.. ms sleeps within 200 ms => a handful of queries, not hundreds.
    let mut calls = 0;
    let start = Instant::now();
    let err = poll_until(&addrs, Duration::from_millis(200), || {
        calls += 1;
        Ok(report_with(&[]))
    })
    .expect_err("times out");
    let took = start.elapsed();
    assert!((5..=12).contains(&calls), "calls = {calls}");
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(2));
    match &err {
        VerbsError::GidTimeout {
            device,
            missing,
            waited_ms,
        } => {
            assert_eq!(device, "rxe0");
            assert_eq!(missing, &addrs);
            assert!(*waited_ms >= 190, "waited_ms = {waited_ms}");
        }
        other => panic!("expected GidTimeout, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("10.0.0.1") && msg.contains("rdma.gidTimeoutMs"),
        "{msg}"
    );

    // A device that never shows up reports that, not a GID timeout.
    let err = poll_until(&addrs, Duration::from_millis(20), || {
        Err(VerbsError::DeviceNotVisible {
            device: "rxe9".into(),
        })
    })
    .expect_err("never visible");
    assert!(
        matches!(err, VerbsError::DeviceNotVisible { .. }),
        "{err:?}"
    );
}

#[test]
fn error_messages_are_actionable() {
    let e = VerbsError::sys("ibv_get_device_list", libc::ENOSYS);
    assert!(e.to_string().contains("modprobe ib_uverbs"), "{e}");
    let e = VerbsError::sys("ibv_open_device", libc::ENOENT);
    assert!(e.to_string().contains("network namespace"), "{e}");
    let e = VerbsError::PortNotActive {
        device: "rxe0".into(),
        port: 1,
        state: PortState::Down,
    };
    assert!(
        e.to_string().contains("port 1 of RDMA device rxe0 is DOWN"),
        "{e}"
    );
}

#[test]
fn verbs_available_matches_the_loader() {
    // On a machine without libibverbs this is false; with it, rdma-mummy-sys loaded it at
    // start-up. Either way it must agree with a plain (loading) dlopen of the same name.
    let present = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists()
        || std::path::Path::new("/usr/lib64/libibverbs.so.1").exists();
    if present {
        assert!(verbs_available());
    }
    if !verbs_available() {
        assert!(matches!(
            query_device_verbs("rxe0"),
            Err(VerbsError::NoLibrary)
        ));
    }
}

// ---------------------------------------------------------------- in the RDMA VM

fn in_vm() -> bool {
    if std::env::var_os("RDMA_VM").is_some_and(|v| v == "1") {
        return true;
    }
    eprintln!("skipped: needs RDMA_VM=1 (run inside rdma-vm.sh)");
    false
}

fn no_verbs_mode() -> bool {
    std::env::var_os("RDMA_VM_NO_VERBS").is_some_and(|v| v == "1")
}

fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", cmd])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn assert_has_v2(r: &DeviceReport, addr: Ipv4Addr, ifindex: Option<u32>) {
    let want = addr.to_ipv6_mapped();
    let e = r
        .gids
        .iter()
        .find(|g| g.gid == want && g.gid_type == GidType::RoceV2)
        .unwrap_or_else(|| panic!("no RoCE v2 GID {want} in {r:#?}"));
    assert_eq!(e.port, 1);
    if ifindex.is_some() {
        assert_eq!(e.ndev_ifindex, ifindex, "{e:?}");
    }
    assert_eq!(r.ports[0].state, PortState::Active, "{r:?}");
    assert_eq!(r.ports[0].link_layer, LinkLayer::Ethernet);
    assert_eq!(r.transport, Transport::Ib);
}

/// Run `f` on a fresh thread that has setns()'d into the named netns (`ip netns add NAME`).
fn in_netns<R: Send + 'static>(name: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let file = fs::File::open(format!("/run/netns/{name}")).expect("open netns");
    std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("netns thread")
}

#[test]
#[ignore = "needs an RDMA kernel: run in the rdma VM"]
fn verbs_vm_query_rxe0() {
    if !in_vm() || no_verbs_mode() {
        return;
    }
    assert!(verbs_available());
    let v0: u32 = sh("cat /sys/class/net/v0/ifindex")
        .parse()
        .expect("ifindex");
    let t = Instant::now();
    let r = query_device_verbs("rxe0").expect("verbs query");
    eprintln!(
        "verbs query of rxe0: {:?}, {} GIDs",
        t.elapsed(),
        r.gids.len()
    );
    assert_eq!(r.source, Source::Verbs);
    assert_has_v2(&r, Ipv4Addr::new(10, 9, 9, 1), Some(v0));
    let r2 = query_device("rxe0").expect("query_device");
    assert_eq!(r2.source, Source::Verbs);
    assert!(matches!(
        query_device_verbs("nosuch0"),
        Err(VerbsError::DeviceNotVisible { .. })
    ));
    assert!(matches!(
        query_device("nosuch0"),
        Err(VerbsError::DeviceNotVisible { .. })
    ));
}

#[test]
#[ignore = "needs an RDMA kernel: run in the rdma VM"]
fn verbs_vm_sysfs_rxe0() {
    if !in_vm() {
        return;
    }
    let v0: u32 = sh("cat /sys/class/net/v0/ifindex")
        .parse()
        .expect("ifindex");
    let t = Instant::now();
    let s = query_device_sysfs("rxe0").expect("sysfs query");
    eprintln!(
        "sysfs query of rxe0 (thread + mount): {:?}, {} GIDs",
        t.elapsed(),
        s.gids.len()
    );
    assert_eq!(s.source, Source::Sysfs);
    assert_has_v2(&s, Ipv4Addr::new(10, 9, 9, 1), Some(v0));
    let t = Instant::now();
    with_own_sysfs(|_| ()).expect("mount only");
    let mount_only = t.elapsed();
    let t = Instant::now();
    query_device_sysfs_at(Path::new("/sys"), "rxe0").expect("parse /sys");
    eprintln!(
        "thread+mount only: {mount_only:?}; parsing /sys directly: {:?}",
        t.elapsed()
    );
    if !no_verbs_mode() {
        let v = query_device_verbs("rxe0").expect("verbs");
        let strip = |r: &DeviceReport| {
            r.gids
                .iter()
                .map(|g| (g.port, g.index, g.gid, g.gid_type, g.ndev_ifindex))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&s), strip(&v), "sysfs and verbs disagree");
        assert_eq!(s.ports, v.ports);
    }
}

#[test]
#[ignore = "needs an RDMA kernel: run in the rdma VM"]
fn verbs_vm_wait_for_gids() {
    if !in_vm() {
        return;
    }
    let t = Instant::now();
    let r = wait_for_gids("rxe0", &[ip("10.9.9.1")], Duration::from_secs(3)).expect("present");
    eprintln!(
        "wait for a present GID: {:?} via {:?}",
        t.elapsed(),
        r.source
    );
    assert_eq!(r.verified, Verification::RoceV2Gids);

    let t = Instant::now();
    let err = wait_for_gids(
        "rxe0",
        &[ip("10.9.9.1"), ip("10.9.9.77")],
        Duration::from_millis(300),
    )
    .expect_err("10.9.9.77 is not there");
    let took = t.elapsed();
    eprintln!("timeout after {took:?}: {err}");
    match &err {
        VerbsError::GidTimeout {
            missing, waited_ms, ..
        } => {
            assert_eq!(missing, &vec![ip("10.9.9.77")]);
            assert!(*waited_ms >= 300, "{waited_ms}");
        }
        other => panic!("expected GidTimeout, got {other:?}"),
    }
    assert!(took < Duration::from_secs(2), "{took:?}");

    // A fresh address: how long until its GID shows up after `ip addr add` returns.
    sh("ip addr add 10.9.9.5/24 dev v0");
    let t = Instant::now();
    let r = wait_for_gids("rxe0", &[ip("10.9.9.5")], Duration::from_secs(5)).expect("new GID");
    eprintln!("GID for a new address appeared within {:?}", t.elapsed());
    assert_has_v2(&r, Ipv4Addr::new(10, 9, 9, 5), None);
    // And an IPv6 address (rxe on a veth: not tentative with nodad).
    sh("ip addr add 2001:db8::5/64 dev v0 nodad");
    let r = wait_for_gids("rxe0", &[ip("2001:db8::5")], Duration::from_secs(5)).expect("v6 GID");
    assert_eq!(r.verified, Verification::RoceV2Gids);
    sh("ip addr del 10.9.9.5/24 dev v0; ip addr del 2001:db8::5/64 dev v0");
}

#[test]
#[ignore = "needs an RDMA kernel: run in the rdma VM"]
fn verbs_vm_pod_netns() {
    if !in_vm() {
        return;
    }
    sh(
        "ip netns add vt1 && ip link add v2 type veth peer v3 && ip link set v3 netns vt1 \
        && ip link set v2 up && ip netns exec vt1 ip link set v3 up \
        && ip netns exec vt1 ip addr add 10.9.8.2/24 dev v3 \
        && ip netns exec vt1 rdma link add rxe1 type rxe netdev v3",
    );
    let v3: u32 = sh("ip netns exec vt1 cat /sys/class/net/v3/ifindex")
        .parse()
        .expect("ifindex");
    let mode = sh("rdma system show");
    eprintln!("{mode}; v3 ifindex in vt1 = {v3}");
    let exclusive = mode.contains("exclusive");

    let (verbs, sysfs, waited, host_view) = in_netns("vt1", || {
        let t = Instant::now();
        let verbs = query_device("rxe1");
        eprintln!("query_device(rxe1) in vt1: {:?}", t.elapsed());
        let t = Instant::now();
        let again = query_device("rxe1").map(|r| r.source);
        eprintln!("again: {:?} ({again:?})", t.elapsed());
        let t = Instant::now();
        let s = query_device_sysfs("rxe1").map(|r| r.gids.len());
        eprintln!("query_device_sysfs(rxe1) in vt1: {:?} ({s:?})", t.elapsed());
        let sysfs = query_device_sysfs("rxe1");
        let waited = wait_for_gids("rxe1", &[ip("10.9.8.2")], Duration::from_secs(3));
        // The process's /sys is the host's view: the pod's netdev is not in its class/net.
        let host_view = query_device_sysfs_at(Path::new("/sys"), "rxe1");
        (verbs, sysfs, waited, host_view)
    });
    if exclusive {
        // rxe1 was created from vt1 but lands in init_net: not visible in the pod.
        assert!(
            matches!(verbs, Err(VerbsError::DeviceNotVisible { .. })),
            "{verbs:?}"
        );
        assert!(
            matches!(sysfs, Err(VerbsError::DeviceNotVisible { .. })),
            "{sysfs:?}"
        );
        assert!(
            matches!(waited, Err(VerbsError::DeviceNotVisible { .. })),
            "{waited:?}"
        );
        // ... while the host's /sys (init_net) shows it.
        assert!(host_view.is_ok(), "{host_view:?}");
        // And from the host, rxe1 is visible but rxe0 is not in vt1.
        let host = query_device("rxe1").expect("rxe1 from init_net");
        let want = if no_verbs_mode() {
            Source::Sysfs
        } else {
            Source::Verbs
        };
        assert_eq!(host.source, want);
        let rxe0_in_pod = in_netns("vt1", || {
            (query_device_verbs("rxe0"), query_device_sysfs("rxe0"))
        });
        if no_verbs_mode() {
            assert!(matches!(rxe0_in_pod.0, Err(VerbsError::NoLibrary)));
        } else {
            assert!(matches!(
                rxe0_in_pod.0,
                Err(VerbsError::DeviceNotVisible { .. })
            ));
        }
        assert!(matches!(
            rxe0_in_pod.1,
            Err(VerbsError::DeviceNotVisible { .. })
        ));
    } else {
        let verbs = verbs.expect("verbs in vt1");
        let sysfs = sysfs.expect("sysfs in vt1");
        eprintln!("verbs via {:?}: {:?}", verbs.source, verbs.gids);
        assert_eq!(
            verbs.source,
            if no_verbs_mode() {
                Source::Sysfs
            } else {
                Source::Verbs
            }
        );
        assert_has_v2(&verbs, Ipv4Addr::new(10, 9, 8, 2), Some(v3));
        assert_has_v2(&sysfs, Ipv4Addr::new(10, 9, 8, 2), Some(v3));
        assert_eq!(
            waited.expect("wait in vt1").verified,
            Verification::RoceV2Gids
        );
        let host_view = host_view.expect("shared mode: rxe1 in the host's /sys too");
        let e = host_view
            .gids
            .iter()
            .find(|g| g.gid == Ipv4Addr::new(10, 9, 8, 2).to_ipv6_mapped())
            .expect("GID in the host view");
        eprintln!(
            "host /sys view resolves the pod netdev to {:?}",
            e.ndev_ifindex
        );
        assert_eq!(e.ndev_ifindex, None, "v3 is not in the host's class/net");
    }
    sh("ip netns exec vt1 rdma link del rxe1 || rdma link del rxe1; ip netns del vt1");
}

#[test]
#[ignore = "needs an RDMA kernel: run in the rdma VM with libibverbs moved away"]
fn verbs_vm_without_libibverbs() {
    if !in_vm() || !no_verbs_mode() {
        return;
    }
    assert!(!verbs_available());
    assert!(matches!(
        query_device_verbs("rxe0"),
        Err(VerbsError::NoLibrary)
    ));
    let r = query_device("rxe0").expect("sysfs fallback");
    assert_eq!(r.source, Source::Sysfs);
    assert_has_v2(&r, Ipv4Addr::new(10, 9, 9, 1), None);
    let t = Instant::now();
    let r = wait_for_gids("rxe0", &[ip("10.9.9.1")], Duration::from_secs(3)).expect("wait");
    eprintln!("wait via sysfs: {:?}", t.elapsed());
    assert_eq!(
        (r.source, r.verified),
        (Source::Sysfs, Verification::RoceV2Gids)
    );
    let err =
        wait_for_gids("rxe0", &[ip("10.9.9.77")], Duration::from_millis(200)).expect_err("missing");
    assert!(matches!(err, VerbsError::GidTimeout { .. }), "{err:?}");
}

#[test]
fn a_roce_port_without_carrier_fails_although_its_gids_are_there() {
    // rxe keeps the GID of an address when its netdev loses carrier; the port goes DOWN.
    let mut r = report_with(&[("::ffff:10.0.0.1", GidType::RoceV2)]);
    r.ports[0].state = PortState::Down;
    match check(r, &["10.0.0.1".parse().expect("ip")], Duration::ZERO) {
        Err(VerbsError::PortNotActive {
            device,
            port,
            state,
        }) => {
            assert_eq!((device.as_str(), port, state), ("rxe0", 1, PortState::Down));
        }
        other => panic!("expected PortNotActive, got {other:?}"),
    }
    let r = report_with(&[("::ffff:10.0.0.1", GidType::RoceV2)]);
    let r = check(r, &["10.0.0.1".parse().expect("ip")], Duration::ZERO).expect("active");
    assert_eq!(r.verified, Verification::RoceV2Gids);
}
