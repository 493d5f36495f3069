//! Addresses and routes on the pod's interface, as ADD applies them and CHECK finds them: one
//! rule for how a result route becomes a kernel route (every CNI 1.1 field) and which gateway
//! a route without one goes through.

use crate::cni::result::{CniResult, IpConfig, Route};
use rdma_host_device_core::error::Result;
use rdma_host_device_core::link::{Links, RouteSpec};

use std::net::IpAddr;

/// Apply IPAM's addresses and routes to our interface, and record them in the result. A route
/// without a gateway goes via the IPAM gateway of its address family.
pub(super) async fn apply_ipam(
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
        let gw = gateway_of(r, &got.ips);
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

fn gateway_for<'a>(ips: impl IntoIterator<Item = &'a IpConfig>, dst: IpAddr) -> Option<IpAddr> {
    ips.into_iter()
        .filter_map(|i| i.gateway)
        .find(|g| g.is_ipv4() == dst.is_ipv4())
}

/// The gateway route `r` goes through: its own, else the gateway of its address family among
/// `ips` (IPAM's, or the result's for our interface).
pub(super) fn gateway_of<'a>(
    r: &Route,
    ips: impl IntoIterator<Item = &'a IpConfig>,
) -> Option<IpAddr> {
    r.gw.or_else(|| gateway_for(ips, r.dst.addr()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
