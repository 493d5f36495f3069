//! Unit tests of the verbs module: the sysfs parser on fake sysfs trees, and the pure logic
//! (GID types, waiting, messages). The `#[ignore]`d tests that need a real RDMA kernel are in
//! `crates/core/src/rdma/verbs/tests/vm.rs`.

use super::*;
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

mod vm;

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
    // On a machine without libibverbs this is false; with it, the first call loads it. Either
    // way it must agree with whether the library is there.
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
