//! `#[ignore]`d tests that need a real RDMA kernel, run in the rdma VM by tests/vm/unit.sh
//! (RDMA_VM=1, after `modprobe rdma_rxe` and creating rxe0 on veth v0 with 10.9.9.1/24; with
//! RDMA_VM_NO_VERBS=1 once libibverbs is moved away). Their path, `rdma::verbs::tests::vm`,
//! contains "verbs", so `--ignored verbs` selects them all.

use super::*;

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
