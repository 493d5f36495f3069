//! CHECK: the interface is in the pod with the MAC, MTU, addresses and routes that prevResult
//! promised, and nothing of another namespace rides it; then IPAM's own CHECK.

use crate::cni::env::Env;
use crate::cni::netconf::{Isolation, NetConf};
use crate::ipam::Ipam;
use rdma_host_device_core::error::{Code, Error, Result, invalid_config};
use rdma_host_device_core::link::Links;
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::Store;
use std::net::IpAddr;
use std::path::Path;

fn mismatch(msg: String) -> Error {
    Error::new(Code::CheckFailed, msg)
}

/// CHECK: the interface, its MAC, MTU, addresses and routes are as prevResult says; then the
/// RDMA GIDs from inside the pod and IPAM's own CHECK.
pub async fn check(env: &Env, conf: &NetConf, node: &Node) -> Result<()> {
    if !conf.cni_version.has_check() {
        return Err(Error::new(
            Code::IncompatibleVersion,
            format!(
                "CHECK needs cniVersion 0.4.0 or later; the config says {}",
                conf.cni_version.as_str()
            ),
        ));
    }
    let prev = conf
        .prev_result
        .as_ref()
        .ok_or_else(|| invalid_config("CHECK needs prevResult in the network configuration"))?;
    let (idx, iface) = prev
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.name == env.ifname && !i.sandbox.is_empty())
        .ok_or_else(|| {
            mismatch(format!(
                "prevResult has no interface {} inside a sandbox",
                env.ifname
            ))
        })?;
    let pod_ns = Netns::open(Path::new(&env.netns))?;
    pod_ns.refuse_if_host()?;
    let record = Store::new(&node.state_dir).load(&env.container_id, &env.ifname)?;
    super::give_back::refuse_if_not_adds(&pod_ns, record.as_ref())?;
    let pod = Links::open_in(&pod_ns)?;
    let link = pod.by_name(&env.ifname).await?.ok_or_else(|| {
        mismatch(format!(
            "interface {} is missing from {}",
            env.ifname, env.netns
        ))
    })?;
    if !iface.mac.is_empty() && !iface.mac.eq_ignore_ascii_case(&link.mac) {
        return Err(mismatch(format!(
            "{} has MAC {}, prevResult says {}",
            env.ifname, link.mac, iface.mac
        )));
    }
    if let Some(want) = conf.mtu.or(iface.mtu)
        && link.mtu != want
    {
        return Err(mismatch(format!(
            "{} has MTU {}, expected {want}",
            env.ifname, link.mtu
        )));
    }
    if !link.up {
        return Err(mismatch(format!("{} is down", env.ifname)));
    }
    // Nothing another namespace made may ride the pod's NIC for the whole attachment (a
    // neighbour's `macvlan mode passthru` on it gets this pod's frames).
    let riders = rdma_host_device_core::uppers::arrival::foreign_riders(
        &node.uppers_socket,
        record.as_ref().and_then(|r| r.moved_after.as_ref()),
        &pod_ns,
        link.index,
        &env.ifname,
    )?;
    if !riders.is_empty() {
        return Err(mismatch(format!(
            "{} has devices of other network namespaces riding it ({}): they receive this pod's frames; the node's uppers watcher deletes them, or DEL does before the NIC leaves",
            env.ifname,
            riders.join("; ")
        )));
    }
    let have = pod.addresses(link.index).await?;
    let ours: Vec<_> = prev
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(idx))
        .collect();
    for ip in &ours {
        if !have.contains(&ip.address) {
            return Err(mismatch(format!(
                "{} lacks address {} (has {:?})",
                env.ifname, ip.address, have
            )));
        }
    }
    // Routes without an interface in the result: check those that leave through one of our
    // subnets (a route via another interface's gateway belongs to that interface).
    let routes = pod.routes(link.index).await?;
    for r in &prev.routes {
        let gw = super::address::gateway_of(r, ours.iter().copied());
        let on_our_link = gw.is_some_and(|g| ours.iter().any(|i| i.address.contains(&g)));
        if !on_our_link {
            continue;
        }
        let want = super::address::route_spec(r, gw);
        match routes.iter().find(|k| want.same_key(k)) {
            None => {
                return Err(mismatch(format!(
                    "{} lacks route {want} (in table {})",
                    env.ifname,
                    want.table_or_main()
                )));
            }
            Some(k) => {
                let d = want.differences(k);
                if !d.is_empty() {
                    return Err(mismatch(format!(
                        "{}'s route {} has {}",
                        env.ifname,
                        want.dst,
                        d.join(", ")
                    )));
                }
            }
        }
    }
    // The RDMA device ADD paired (the state file says which): verified again from inside.
    if conf.rdma.isolation != Isolation::None
        && let Some(device) = record.and_then(|r| r.rdma_device)
    {
        let addrs: Vec<IpAddr> = ours.iter().map(|ip| ip.address.addr()).collect();
        super::rdma::verify(&device, &addrs, conf.rdma.gid_timeout_ms, &pod_ns)
            .map(drop)
            .map_err(|e| mismatch(super::rdma::with_netdev_state(e, Some(&link)).msg))?;
    }
    if let Some(t) = &conf.ipam_type {
        // The node decides where the paths in `ipam` may point, as for ADD (Ipam checks).
        Ipam::new(t, env, node)?.check(&conf.raw)?;
    }
    log::info!("{} is as expected", env.ifname);
    Ok(())
}
