//! Tests against a real kernel, run inside the rdma-vm rig by tests/vm/unit.sh (and
//! tests/vm/rdma_netlink_probe.sh), which loads rdma_rxe, creates veth v0/v1 and
//! `rdma link add rxe0 type rxe netdev v0`. Their path, `rdma::netlink::tests::vm`, is the
//! filter those scripts run.

use super::*;
use std::fs;

fn in_vm() -> bool {
    let yes = std::env::var_os("RDMA_VM").is_some();
    if !yes {
        eprintln!("skipped: needs RDMA_VM=1 (run tests/vm/rdma_netlink_probe.sh)");
    }
    yes
}

fn sysfs(path: &str) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .to_string()
}

fn run_in_new_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare netns");
        f()
    })
    .join()
    .expect("netns thread")
}

#[test]
#[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
fn vm_devices_and_ports() {
    if !in_vm() {
        return;
    }
    let mut sock = RdmaSocket::open().unwrap();
    let dev = sock.device_by_name("rxe0").unwrap().expect("rxe0 listed");
    eprintln!("{dev:?}");
    assert_eq!(dev.protocol.as_deref(), Some("roce"));
    assert_eq!(dev.node_type, Some(1));
    assert_eq!(dev.port_count, Some(1));
    assert_eq!(dev.driver.as_deref(), Some("rxe"));
    let guid = sysfs("/sys/class/infiniband/rxe0/node_guid").replace(':', "");
    assert_eq!(dev.node_guid, Some(u64::from_str_radix(&guid, 16).unwrap()));

    let ports = sock.ports().unwrap();
    eprintln!("{ports:?}");
    let port = ports
        .iter()
        .find(|p| p.dev_name == "rxe0")
        .expect("rxe0 port");
    assert_eq!((port.dev_index, port.port), (dev.index, 1));
    assert_eq!(port.netdev_name.as_deref(), Some("v0"));
    let ifindex: u32 = sysfs("/sys/class/net/v0/ifindex").parse().unwrap();
    assert_eq!(port.netdev_index, Some(ifindex));
    assert!(port.state.is_some() && port.phys_state.is_some());
}

#[test]
#[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
fn vm_netns_mode_and_visibility_from_another_netns() {
    if !in_vm() {
        return;
    }
    let mode = RdmaSocket::open().unwrap().netns_mode().unwrap();
    let want = match sysfs("/sys/module/ib_core/parameters/netns_mode").as_str() {
        "Y" => NetnsMode::Shared,
        _ => NetnsMode::Exclusive,
    };
    assert_eq!(mode, want);

    // From a fresh netns: shared mode shows rxe0 (without its netdev, which is not
    // there); exclusive mode shows nothing.
    let (devices, ports) = run_in_new_netns(|| {
        let mut sock = RdmaSocket::open().unwrap();
        (sock.devices().unwrap(), sock.ports().unwrap())
    });
    eprintln!("from a new netns ({mode:?}): {devices:?} {ports:?}");
    match mode {
        NetnsMode::Shared => {
            assert!(devices.iter().any(|d| d.name == "rxe0"));
            let port = ports.iter().find(|p| p.dev_name == "rxe0").unwrap();
            assert_eq!(
                (port.netdev_index, port.netdev_name.as_deref()),
                (None, None)
            );
        }
        NetnsMode::Exclusive => assert!(devices.is_empty() && ports.is_empty()),
    }
}

#[test]
#[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
fn vm_soft_device_add_and_delete() {
    if !in_vm() {
        return;
    }
    let mut sock = RdmaSocket::open().unwrap();
    sock.add_soft_device("rxenl", "rxe", "v1").unwrap();
    let dev = sock
        .device_by_name("rxenl")
        .unwrap()
        .expect("rxenl listed after add");
    let ports = sock.ports().unwrap();
    let port = ports.iter().find(|p| p.dev_index == dev.index).unwrap();
    assert_eq!(port.netdev_name.as_deref(), Some("v1"));
    sock.delete_device(dev.index).unwrap();
    assert_eq!(sock.device_by_name("rxenl").unwrap(), None);

    let err = sock
        .add_soft_device("rxebad", "rxe", "nosuchnetdev")
        .unwrap_err();
    eprintln!("add with a missing netdev: {err}");
    assert_eq!(err.errno(), Some(libc::ENODEV));
    let err = sock.delete_device(9999).unwrap_err();
    eprintln!("delete of a missing device: {err}");
    assert_eq!(err.errno(), Some(libc::EINVAL));
}

#[test]
#[ignore = "needs RDMA: run in the VM via tests/vm/rdma_netlink_probe.sh"]
fn vm_move_stock_rxe_is_eopnotsupp() {
    if !in_vm() {
        return;
    }
    let mut sock = RdmaSocket::open().unwrap();
    let dev = sock.device_by_name("rxe0").unwrap().expect("rxe0 listed");
    let netns = fs::File::open("/proc/thread-self/ns/net").unwrap();
    let err = sock
        .move_to_netns(dev.index, std::os::fd::AsFd::as_fd(&netns))
        .unwrap_err();
    eprintln!("move rxe0: {err}");
    assert_eq!(err.errno(), Some(libc::EOPNOTSUPP));
    // The socket is still in step after a refusal.
    assert!(sock.device_by_name("rxe0").unwrap().is_some());
}
