//! ADD: select the NIC, remember it, move it into the pod renamed, get addresses from IPAM and
//! apply them, and answer with the result. Any failure takes back every step already done.

use super::rdma::{self, Plan};
use super::undo::{Scene, Undo, UndoStack};
use crate::cni::env::Env;
use crate::cni::netconf::{NetConf, Selector};
use crate::cni::result::{CniResult, Interface, IpConfig, Route};
use crate::error::{Code, Error, Result};
use crate::fault;
use crate::ipam::Ipam;
use crate::link::{Arrival, LinkInfo, Links, RouteSpec};
use crate::lock;
use crate::netns::Netns;
use crate::node::Node;
use crate::select::{self, Resolved};
use crate::state::{Record, Store};
use futures::FutureExt;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::path::Path;

pub async fn add(env: &Env, conf: &NetConf, node: &Node) -> Result<CniResult> {
    let selector = conf.require_selector()?;
    let pod_ns = Netns::open(Path::new(&env.netns))?;
    let host_ns = Netns::current()?;
    if pod_ns.same_as(&host_ns) {
        return Err(Error::new(
            Code::InvalidEnv,
            format!(
                "CNI_NETNS {} is the host's own network namespace",
                env.netns
            ),
        ));
    }
    let host = Links::open()?;
    let pod = Links::open_in(&pod_ns)?;
    let store = Store::new(&conf.state_dir);
    let _attachment = lock::attachment(&conf.state_dir, &env.container_id, &env.ifname)?;
    fault::hit("add:locked")?;
    // A temp file of ours can only be what an earlier call killed mid-write left (we hold the
    // lock every writer holds).
    store.remove_temp(&env.container_id, &env.ifname)?;

    if let Some(old) = store.load(&env.container_id, &env.ifname)? {
        return Err(Error::new(
            Code::DeviceBusy,
            format!(
                "container {} already has {} attached as {} (an earlier ADD that was not deleted); the runtime must DEL it first",
                env.container_id, old.host_name, env.ifname
            ),
        ));
    }
    let (resolved, _nic) = resolve_locked(selector, &host, &store).await?;
    log::info!(
        "{selector} is {} (mac {}, mtu {}{})",
        resolved.link.name,
        resolved.link.mac,
        resolved.link.mtu,
        resolved
            .pci
            .as_deref()
            .map(|p| format!(", pci {p}"))
            .unwrap_or_default()
    );
    select::admit(node, &host, &resolved, selector).await?;
    if pod.by_name(&env.ifname).await?.is_some() {
        return Err(Error::new(
            Code::IfnameExists,
            format!(
                "interface {} already exists in {}; pick another CNI_IFNAME",
                env.ifname, env.netns
            ),
        ));
    }
    let link = recover_if_lost(&host, resolved.clone(), &store).await?;
    if let Some(mtu) = conf.mtu {
        check_mtu(&link, mtu)?;
    }
    let ipam_conf = serde_json::from_slice::<serde_json::Value>(&conf.raw)
        .map(|v| v["ipam"].clone())
        .unwrap_or_default();
    if ipv6_declared(&ipam_conf) {
        check_ipv6_mtu(conf.mtu.unwrap_or(link.mtu), "the config's ipam")?;
    }

    let scene = Scene {
        env,
        conf,
        host_ns: &host_ns,
        host: &host,
        pod_ns: Some(&pod_ns),
        pod: Some(&pod),
    };
    let mut undo = UndoStack::default();
    // A panic is a bug, but it must not strand the NIC in the pod: roll back, then let the
    // panic go on to the hook in main.rs, which prints error 999.
    let attached = AssertUnwindSafe(attach(&scene, &link, &resolved, &mut undo))
        .catch_unwind()
        .await;
    match attached {
        Ok(Ok(result)) => {
            undo.disarm();
            log::info!("done");
            Ok(result)
        }
        Ok(Err(e)) => {
            log::error!("failed: {e}; rolling back");
            undo.unwind(&scene).await;
            Err(e)
        }
        Err(panic) => {
            log::error!("panicked; rolling back");
            undo.unwind(&scene).await;
            std::panic::resume_unwind(panic)
        }
    }
}

/// Resolve the selector and lock the NIC it names (by its original host name); what decides is
/// the resolution made under the lock, since every call that moves a NIC holds its lock. A
/// loser of a race for the NIC gets "device busy" (102) from it, or 11 if the wait ran out,
/// and has changed nothing.
async fn resolve_locked(
    sel: &Selector,
    host: &Links,
    store: &Store,
) -> Result<(Resolved, lock::Guard)> {
    fn identity(r: &Resolved) -> &str {
        r.lost.as_ref().map_or(&r.link.name, |t| &t.host_name)
    }
    // Look first, without the lock, to learn which NIC the selector names: the lock is on the
    // NIC's own (primary, original) name, never the selector's string, which may be an altname.
    // A NIC being moved by another call is briefly in no namespace at all, so "not found"
    // there is only believed when it lasts.
    let guess = {
        let mut tries = 0;
        loop {
            match select::resolve(sel, host, store).await {
                Ok(r) => break identity(&r).to_string(),
                Err(e) if e.code == Code::DeviceNotFound && tries < 3 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    };
    let guard = lock::device(&guess)?;
    let now = select::resolve(sel, host, store).await?;
    if identity(&now) != guess {
        return Err(Error::new(
            Code::TryAgain,
            format!(
                "{sel} was {guess} and became {} while this call waited for it; try again",
                identity(&now)
            ),
        ));
    }
    Ok((now, guard))
}

/// A NIC back from a dead pod still bears the pod-side name: give it its own first, as its
/// old attachment's record says (see `restore_lost` for what happens without one).
async fn recover_if_lost(host: &Links, r: Resolved, store: &Store) -> Result<LinkInfo> {
    let Some(tag) = r.lost else {
        return Ok(r.link);
    };
    super::undo::restore_lost(host, &r.link, &tag, &store.all()?, "ADD").await?;
    host.by_index(r.link.index).await?.ok_or_else(|| {
        Error::new(
            Code::DeviceNotFound,
            format!("{} vanished while being restored", tag.host_name),
        )
    })
}

/// The kernel applies a move's MTU after the move itself: an MTU the driver refuses would
/// fail half-way, so it is checked against the driver's range before anything changes.
fn check_mtu(nic: &LinkInfo, mtu: u32) -> Result<()> {
    let (lo, hi) = (nic.min_mtu.unwrap_or(68), nic.max_mtu.unwrap_or(u32::MAX));
    if (lo..=hi).contains(&mtu) {
        return Ok(());
    }
    Err(crate::error::invalid_config(format!(
        "mtu {mtu} is outside what {}'s driver accepts ({lo} to {hi})",
        nic.name
    )))
}

/// IPv6 needs a link MTU of at least 1280 (RFC 8200): below it the kernel disables IPv6 on
/// the link and drops its addresses, so a pod would come up without the address its result
/// promises.
const IPV6_MIN_MTU: u32 = 1280;

fn check_ipv6_mtu(mtu: u32, whence: &str) -> Result<()> {
    if mtu >= IPV6_MIN_MTU {
        return Ok(());
    }
    Err(crate::error::invalid_config(format!(
        "{whence} has an IPv6 address, and IPv6 needs MTU >= {IPV6_MIN_MTU}, but the pod's MTU would be {mtu}; raise mtu or drop the IPv6 address"
    )))
}

/// Does the ipam config name IPv6 addresses or ranges (static `addresses`, host-local
/// `ranges`/`subnet`, whereabouts `range`/`ipRanges`)? Checked before anything changes; the
/// IPAM result is checked again once it is known.
fn ipv6_declared(ipam: &serde_json::Value) -> bool {
    use serde_json::Value;
    const KEYS: [&str; 6] = [
        "addresses",
        "address",
        "ranges",
        "subnet",
        "range",
        "ipRanges",
    ];
    fn any_v6(v: &Value) -> bool {
        match v {
            Value::String(s) => {
                let ip = s.split('/').next().unwrap_or(s);
                ip.parse::<std::net::Ipv6Addr>().is_ok()
            }
            Value::Array(a) => a.iter().any(any_v6),
            Value::Object(o) => o
                .iter()
                .any(|(k, v)| KEYS.contains(&k.as_str()) && any_v6(v)),
            _ => false,
        }
    }
    ipam.as_object().is_some_and(|o| {
        o.iter()
            .any(|(k, v)| KEYS.contains(&k.as_str()) && any_v6(v))
    })
}

/// The steps that change the node, each registering its undo before it acts.
async fn attach(
    s: &Scene<'_>,
    nic: &LinkInfo,
    resolved: &Resolved,
    undo: &mut UndoStack,
) -> Result<CniResult> {
    let (env, conf) = (s.env, s.conf);
    let (Some(pod_ns), Some(pod)) = (s.pod_ns, s.pod) else {
        return Err(Error::new(Code::Io, "ADD needs the pod's namespace"));
    };
    let mut record = Record {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        network: conf.name.clone(),
        netns: env.netns.clone(),
        host_name: nic.name.clone(),
        host_mtu: nic.mtu,
        host_up: nic.up,
        host_alias: nic.alias.clone().filter(|a| !a.is_empty()),
        mac: nic.mac.clone(),
        perm_mac: nic.perm_mac.clone(),
        altnames: nic.altnames.clone(),
        host_index: nic.index,
        pod_index: None,
        pci: resolved.pci.clone(),
        rdma_device: None,
        rdma_moved: false,
        soft_device: None,
        pod: env.pod(),
    };

    // 1. Pair and check RDMA while nothing has changed yet.
    let plan = rdma::plan(env, conf, nic)?;
    if let Some(p) = &plan {
        p.record_into(&mut record);
    }

    // 2. Remember, before the first change, what DEL needs.
    undo.push(Undo::ForgetState {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
    });
    Store::new(&conf.state_dir).save(&record)?;
    fault::hit("add:after-state")?;

    // 3. Exclusive mode: the RDMA device goes first (see flows/rdma.rs for why).
    if let Some(Plan::Move { device, index }) = &plan {
        undo.push(Undo::ReturnRdma {
            device: device.clone(),
        });
        rdma::move_in(device, *index, pod_ns)?;
        fault::hit("add:after-rdma-move")?;
    }

    // 4. Move, rename, MTU, tag and up, in one request.
    let tag = record.tag().encode();
    undo.push(Undo::ReturnNic {
        record: Box::new(record.clone()),
    });
    s.host
        .move_to(
            nic.index,
            pod_ns,
            &Arrival {
                name: &env.ifname,
                mtu: conf.mtu,
                alias: Some(&tag),
                up: true,
                mac: None,
            },
        )
        .await?;
    fault::hit("add:after-nic-move")?;
    let inside = pod.by_name(&env.ifname).await?.ok_or_else(|| {
        Error::new(
            Code::Netlink,
            format!(
                "{} did not arrive in {} as {}",
                nic.name, env.netns, env.ifname
            ),
        )
    })?;
    // From now on DEL knows the NIC by its index in the pod, which the pod cannot change.
    record.pod_index = Some(inside.index);
    Store::new(&conf.state_dir).save(&record)?;
    undo.update_record(&record);
    log::info!(
        "moved {} into {} as {} (index {}, mtu {})",
        nic.name,
        env.netns,
        env.ifname,
        inside.index,
        inside.mtu
    );

    // 5. No RDMA hardware: a software device on the NIC, made inside the pod.
    if let Some(Plan::Soft { kind, name }) = &plan {
        rdma::create_soft(*kind, name, &env.ifname, pod_ns)?;
        fault::hit("add:after-soft-rdma")?;
    }

    // 6. Addresses from IPAM, applied inside the pod.
    let mut result = conf.prev_result.clone().unwrap_or_default();
    let ours = result.push_interface(Interface {
        name: env.ifname.clone(),
        mac: inside.mac.clone(),
        mtu: Some(inside.mtu),
        sandbox: env.netns.clone(),
        pci_id: resolved.pci.clone().unwrap_or_default(),
        socket_path: String::new(),
    });
    if let Some(t) = &conf.ipam_type {
        let ipam = Ipam::new(t, env)?;
        // Registered first: a plugin may allocate and then fail.
        undo.push(Undo::ReleaseIpam);
        let got = ipam.add(&conf.raw)?;
        fault::hit("add:after-ipam")?;
        if got.ips.iter().any(|ip| ip.address.addr().is_ipv6()) {
            check_ipv6_mtu(inside.mtu, &format!("IPAM plugin {t:?}'s result"))?;
        }
        apply_ipam(pod, inside.index, &got, ours, &mut result).await?;
        if conf.dns.is_none() && !got.dns.is_empty() {
            result.dns = got.dns;
        }
    }
    if let Some(dns) = &conf.dns {
        result.dns = dns.clone();
    }
    let ours_ips: Vec<IpAddr> = result
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(ours))
        .map(|ip| ip.address.addr())
        .collect();
    crate::announce::announce(pod_ns, &env.ifname, inside.index, &inside.mac, &ours_ips);
    fault::hit("add:after-addresses")?;

    // 7. The RDMA device, seen from inside the pod, has a RoCE v2 GID for every address.
    if let Some(p) = &plan {
        rdma::verify(p.device(), &ours_ips, conf.rdma.gid_timeout_ms, pod_ns)?;
    }
    fault::hit("add:before-result")?;
    Ok(result)
}

/// Apply IPAM's addresses and routes to our interface, and record them in the result. A route
/// without a gateway goes via the IPAM gateway of its address family.
async fn apply_ipam(
    pod: &Links,
    index: u32,
    got: &CniResult,
    ours: usize,
    result: &mut CniResult,
) -> Result<()> {
    for ip in &got.ips {
        pod.add_address(index, ip.address).await?;
        result.ips.push(IpConfig {
            interface: Some(ours),
            ..ip.clone()
        });
    }
    for r in &got.routes {
        let gw = r.gw.or_else(|| gateway_for(&got.ips, r.dst.addr()));
        pod.add_route(index, &route_spec(r, gw)).await?;
        result.routes.push(r.clone());
    }
    Ok(())
}

/// A result route as the kernel is asked for it, every 1.1.0 field included. `mtu`, `advmss`
/// and `priority` 0 mean unset (libcni omits them when 0); `table` and `scope` 0 are values.
pub(super) fn route_spec(r: &Route, gw: Option<IpAddr>) -> RouteSpec {
    RouteSpec {
        dst: r.dst,
        gw,
        table: r.table,
        scope: r.scope,
        priority: r.priority.filter(|&p| p != 0),
        tos: r.tos,
        mtu: r.mtu.filter(|&m| m != 0),
        advmss: r.advmss.filter(|&m| m != 0),
    }
}

fn gateway_for(ips: &[IpConfig], dst: IpAddr) -> Option<IpAddr> {
    ips.iter()
        .filter_map(|i| i.gateway)
        .find(|g| g.is_ipv4() == dst.is_ipv4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_outside_the_drivers_range_is_refused_before_any_change() {
        let nic = LinkInfo {
            index: 3,
            name: "ens1".into(),
            mac: String::new(),
            mtu: 1500,
            up: false,
            alias: None,
            min_mtu: Some(68),
            max_mtu: Some(1500),
            master: None,
            perm_mac: String::new(),
            altnames: Vec::new(),
        };
        assert!(check_mtu(&nic, 1500).is_ok());
        let e = check_mtu(&nic, 9000).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(
            e.msg.contains("ens1") && e.msg.contains("1500"),
            "{}",
            e.msg
        );
        let unknown = LinkInfo {
            max_mtu: None,
            ..nic
        };
        assert!(check_mtu(&unknown, 9000).is_ok());
    }

    #[test]
    fn ipv6_in_the_ipam_config_is_seen() {
        use serde_json::json;
        for (ipam, want) in [
            (
                json!({"type": "static", "addresses": [{"address": "fd00::2/64"}]}),
                true,
            ),
            (
                json!({"type": "static", "addresses": [{"address": "10.0.0.2/24"}]}),
                false,
            ),
            (
                json!({"type": "host-local", "ranges": [[{"subnet": "fd00::/64"}]]}),
                true,
            ),
            (
                json!({"type": "host-local", "subnet": "10.0.0.0/24"}),
                false,
            ),
            (json!({"type": "whereabouts", "range": "fd00::/120"}), true),
            (
                json!({"type": "whereabouts", "ipRanges": [{"range": "fd00::/120"}]}),
                true,
            ),
            (json!({"type": "dhcp", "dataDir": "/var/a:b"}), false),
            (json!(null), false),
        ] {
            assert_eq!(ipv6_declared(&ipam), want, "{ipam}");
        }
        assert!(check_ipv6_mtu(1280, "x").is_ok());
        let e = check_ipv6_mtu(1279, "x").unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(e.msg.contains("IPv6 needs MTU >= 1280"), "{}", e.msg);
    }

    #[test]
    fn route_without_gw_uses_gateway_of_its_family() {
        let ips = vec![
            IpConfig {
                address: "fd00::2/64".parse().unwrap(),
                gateway: Some("fd00::1".parse().unwrap()),
                interface: None,
            },
            IpConfig {
                address: "10.0.0.2/24".parse().unwrap(),
                gateway: Some("10.0.0.1".parse().unwrap()),
                interface: None,
            },
        ];
        assert_eq!(
            gateway_for(&ips, "10.9.0.0".parse().unwrap()),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            gateway_for(&ips, "fd01::".parse().unwrap()),
            Some("fd00::1".parse().unwrap())
        );
        assert_eq!(gateway_for(&ips[..1], "10.9.0.0".parse().unwrap()), None);
    }
}
