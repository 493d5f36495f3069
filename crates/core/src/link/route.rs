//! Routes over rtnetlink: add one with every CNI 1.1 field (or name the field the kernel
//! refuses), read them back from every table, compare.

use crate::error::{Code, Error, Result, invalid_config};
use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RouteScope,
};
use rtnetlink::RouteMessageBuilder;
use std::net::IpAddr;

use super::{Links, errno, nl_error};

impl Links {
    /// Add `r` out of link `index`, every field of it (table, scope, priority, TOS, MTU and
    /// advmss metrics) or none. A field the kernel refuses or would silently alter (a table 0
    /// that becomes main, a clamped metric, a scope IPv6 ignores) is an invalid-config error
    /// naming the field; other failures are netlink errors.
    pub async fn add_route(&self, index: u32, r: &RouteSpec) -> Result<()> {
        let dev = self.describe(index).await;
        let what = format!("adding route {r} on {dev}");
        if let Err(msg) = r.validate() {
            return Err(invalid_config(format!("{what}: {msg}")));
        }
        let msg = r
            .message(index, RouteSpec::ALL)
            .map_err(|e| Error::new(Code::InvalidConfig, format!("{what}: {e}")))?;
        if let Err(e) = self.handle.route().add(msg).execute().await {
            return Err(self.blame_route_field(index, r, &what, e).await);
        }
        // What the kernel kept: it may clamp a metric or ignore a field without complaint.
        let kept = self.find_route(index, r).await?;
        match kept.as_ref().map(|k| r.differences(k)) {
            Some(d) if d.is_empty() => Ok(()),
            Some(d) => Err(invalid_config(format!(
                "{what}: the kernel did not keep {}",
                d.join(", ")
            ))),
            None => Err(Error::new(
                Code::Netlink,
                format!("{what}: the kernel accepted it but does not list it"),
            )),
        }
    }
    /// The kernel refused `r`: find which field it refuses by adding the route again with
    /// one more field at a time (each trial removed again), so the operator is told what to
    /// fix. A route refused with none of its optional fields is a netlink error as before.
    async fn blame_route_field(
        &self,
        index: u32,
        r: &RouteSpec,
        what: &str,
        e: rtnetlink::Error,
    ) -> Error {
        let refused = nl_error(what, e);
        let mut fields = 0;
        // The bare route first: if even that is refused, no field is to blame.
        for (bit, name) in [(0, "")].into_iter().chain(RouteSpec::FIELDS) {
            if bit != 0 && !r.has(bit) {
                continue;
            }
            let Ok(msg) = r.message(index, fields | bit) else {
                continue;
            };
            match self.handle.route().add(msg.clone()).execute().await {
                Ok(()) => {
                    let _ = self.handle.route().del(msg).execute().await;
                    fields |= bit;
                }
                Err(_) if bit == 0 => return refused,
                Err(e) => {
                    let why = match errno(&e) {
                        Some(n) => std::io::Error::from_raw_os_error(n).to_string(),
                        None => e.to_string(),
                    };
                    return invalid_config(format!(
                        "{what}: the kernel refuses its {name} ({why})"
                    ));
                }
            }
        }
        if fields == 0 {
            return refused;
        }
        // Each field alone is accepted; only the whole is refused: name them all.
        let mut err = refused;
        err.code = Code::InvalidConfig;
        err.msg.push_str(&format!(
            " (the kernel refuses this combination of {})",
            r.field_names().join(", ")
        ));
        err
    }

    /// The route out of link `index` that `r` describes (same destination, table, TOS and,
    /// when `r` sets one, priority), as the kernel has it.
    pub async fn find_route(&self, index: u32, r: &RouteSpec) -> Result<Option<KernelRoute>> {
        Ok(self
            .routes(index)
            .await?
            .into_iter()
            .find(|k| r.same_key(k)))
    }

    /// Routes out of link `index`, in every table.
    pub async fn routes(&self, index: u32) -> Result<Vec<KernelRoute>> {
        let what = format!("the link with index {index}");
        Ok(self
            .all_routes(None, &what)
            .await?
            .iter()
            .filter_map(|m| KernelRoute::from_message(m, m.header.address_family))
            .filter(|k| k.oif == Some(index))
            .collect())
    }

    /// Every IPv4 and IPv6 route of this namespace, in every table, as the kernel dumps them;
    /// with `oif`, asked for the routes that may leave through that link (RTA_OIF: a socket in
    /// strict-check mode has the kernel filter them, multipath hops and nexthop objects
    /// included; another socket ignores it and gets them all). `what` names the link they are
    /// read for, in the error.
    pub(super) async fn all_routes(
        &self,
        oif: Option<u32>,
        what: &str,
    ) -> Result<Vec<RouteMessage>> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut q = RouteMessage::default();
            q.header.address_family = family;
            // Table unspecified: the kernel dumps every table.
            q.header.table = 0;
            if let Some(index) = oif {
                q.attributes.push(RouteAttribute::Oif(index));
            }
            let msgs: Vec<RouteMessage> = self
                .handle
                .route()
                .get(q)
                .execute()
                .try_collect()
                .await
                .map_err(|e| nl_error(format!("listing routes of {what}"), e))?;
            out.extend(msgs);
        }
        Ok(out)
    }
}

/// RT_TABLE_MAIN: where a route without `table` goes.
pub const MAIN_TABLE: u32 = 254;

/// A route as IPAM asked for it (the CNI 1.1 route fields), gateway already resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteSpec {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub table: Option<u32>,
    pub scope: Option<u8>,
    pub priority: Option<u32>,
    pub tos: Option<u8>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
}

/// A route as the kernel lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRoute {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub oif: Option<u32>,
    pub table: u32,
    pub scope: u8,
    pub priority: Option<u32>,
    pub tos: u8,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
}

impl KernelRoute {
    fn from_message(m: &RouteMessage, family: AddressFamily) -> Option<KernelRoute> {
        let mut k = KernelRoute {
            dst: IpNet::new(
                match family {
                    AddressFamily::Inet6 => IpAddr::from([0u16; 8]),
                    _ => IpAddr::from([0u8; 4]),
                },
                0,
            )
            .ok()?,
            gw: None,
            oif: None,
            table: u32::from(m.header.table),
            scope: m.header.scope.into(),
            priority: None,
            tos: m.header.tos,
            mtu: None,
            advmss: None,
        };
        let mut dst = None;
        for a in &m.attributes {
            match a {
                RouteAttribute::Destination(d) => dst = route_ip(d),
                RouteAttribute::Gateway(g) => k.gw = route_ip(g),
                RouteAttribute::Oif(i) => k.oif = Some(*i),
                RouteAttribute::Table(t) => k.table = *t,
                RouteAttribute::Priority(p) => k.priority = Some(*p),
                RouteAttribute::Metrics(ms) => {
                    for metric in ms {
                        match metric {
                            RouteMetric::Mtu(v) => k.mtu = Some(*v),
                            RouteMetric::Advmss(v) => k.advmss = Some(*v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(d) = dst {
            k.dst = IpNet::new(d, m.header.destination_prefix_length).ok()?;
        }
        Some(k)
    }
}

impl RouteSpec {
    const TABLE: u8 = 1;
    const SCOPE: u8 = 2;
    const PRIORITY: u8 = 4;
    const TOS: u8 = 8;
    const MTU: u8 = 16;
    const ADVMSS: u8 = 32;
    const ALL: u8 = 63;
    /// In the order they are tried when the kernel refuses a route.
    const FIELDS: [(u8, &'static str); 6] = [
        (Self::TABLE, "table"),
        (Self::SCOPE, "scope"),
        (Self::PRIORITY, "priority"),
        (Self::TOS, "tos"),
        (Self::MTU, "mtu"),
        (Self::ADVMSS, "advmss"),
    ];

    fn has(&self, bit: u8) -> bool {
        match bit {
            Self::TABLE => self.table.is_some(),
            Self::SCOPE => self.scope.is_some(),
            Self::PRIORITY => self.priority.is_some(),
            Self::TOS => self.tos.is_some(),
            Self::MTU => self.mtu.is_some(),
            Self::ADVMSS => self.advmss.is_some(),
            _ => false,
        }
    }

    fn field_names(&self) -> Vec<&'static str> {
        Self::FIELDS
            .iter()
            .filter(|(bit, _)| self.has(*bit))
            .map(|(_, n)| *n)
            .collect()
    }

    /// The table the route lands in.
    pub fn table_or_main(&self) -> u32 {
        self.table.unwrap_or(MAIN_TABLE)
    }

    /// Values the kernel would take but not keep as asked: refused before anything is sent,
    /// with the field named.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let v6 = self.dst.addr().is_ipv6();
        if self.table == Some(0) {
            return Err(
                "table 0 is not a routing table (the kernel would use main, 254); use 1-4294967295"
                    .into(),
            );
        }
        if v6 && self.tos.is_some_and(|t| t != 0) {
            return Err("tos is IPv4 only; the kernel has no TOS on IPv6 routes".into());
        }
        if v6 && self.scope.is_some_and(|s| s != 0) {
            return Err(format!(
                "scope {} cannot be applied: the kernel keeps every IPv6 route at scope 0 (universe)",
                self.scope.unwrap_or_default()
            ));
        }
        // The kernel clamps these without a word (ip_metrics_convert).
        if let Some(m) = self.mtu
            && m > 65535 - 15
        {
            return Err(format!(
                "mtu {m} is above 65520, the most a route can carry"
            ));
        }
        if let Some(m) = self.advmss
            && m > 65535 - 40
        {
            return Err(format!(
                "advmss {m} is above 65495, the most a route can carry"
            ));
        }
        Ok(())
    }

    /// The RTM_NEWROUTE message for this route out of `index`, with the optional fields in
    /// `fields` (a set of the bits above).
    fn message(&self, index: u32, fields: u8) -> std::result::Result<RouteMessage, String> {
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(self.dst.network(), self.dst.prefix_len())
            .map_err(|e| e.to_string())?
            .output_interface(index);
        if let Some(gw) = self.gw {
            b = b.gateway(gw).map_err(|e| e.to_string())?;
        }
        if fields & Self::TABLE != 0
            && let Some(t) = self.table
        {
            b = b.table_id(t);
        }
        if fields & Self::SCOPE != 0
            && let Some(s) = self.scope
        {
            b = b.scope(RouteScope::from(s));
        }
        if fields & Self::PRIORITY != 0
            && let Some(p) = self.priority
        {
            b = b.priority(p);
        }
        if fields & Self::TOS != 0
            && let Some(t) = self.tos
        {
            b = b.tos(t);
        }
        let mut metrics = Vec::new();
        if fields & Self::MTU != 0
            && let Some(m) = self.mtu
        {
            metrics.push(RouteMetric::Mtu(m));
        }
        if fields & Self::ADVMSS != 0
            && let Some(m) = self.advmss
        {
            metrics.push(RouteMetric::Advmss(m));
        }
        let mut msg = b.build();
        if !metrics.is_empty() {
            msg.attributes.push(RouteAttribute::Metrics(metrics));
        }
        Ok(msg)
    }

    /// Does the kernel's route `k` stand for this one (the kernel's own key: destination,
    /// table, TOS, and the priority when one is asked for)?
    pub fn same_key(&self, k: &KernelRoute) -> bool {
        k.dst == self.dst
            && k.table == self.table_or_main()
            && k.tos == self.tos.unwrap_or(0)
            && self.priority.is_none_or(|p| k.priority == Some(p))
    }

    /// Every field of this route that `k` has otherwise, as "FIELD X (asked Y)".
    pub fn differences(&self, k: &KernelRoute) -> Vec<String> {
        fn show<T: std::fmt::Display>(v: Option<T>) -> String {
            v.map_or_else(|| "none".to_string(), |v| v.to_string())
        }
        let mut d = Vec::new();
        if self.gw.is_some() && k.gw != self.gw {
            d.push(format!("gw {} (asked {})", show(k.gw), show(self.gw)));
        }
        if k.table != self.table_or_main() {
            d.push(format!(
                "table {} (asked {})",
                k.table,
                self.table_or_main()
            ));
        }
        if let Some(s) = self.scope
            && k.scope != s
        {
            d.push(format!("scope {} (asked {s})", k.scope));
        }
        if let Some(p) = self.priority
            && k.priority != Some(p)
        {
            d.push(format!("priority {} (asked {p})", show(k.priority)));
        }
        if let Some(t) = self.tos
            && k.tos != t
        {
            d.push(format!("tos {} (asked {t})", k.tos));
        }
        if let Some(m) = self.mtu
            && k.mtu != Some(m)
        {
            d.push(format!("mtu {} (asked {m})", show(k.mtu)));
        }
        if let Some(m) = self.advmss
            && k.advmss != Some(m)
        {
            d.push(format!("advmss {} (asked {m})", show(k.advmss)));
        }
        d
    }
}

impl std::fmt::Display for RouteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dst)?;
        if let Some(g) = self.gw {
            write!(f, " via {g}")?;
        }
        for (bit, name) in Self::FIELDS {
            let v = match bit {
                Self::TABLE => self.table.map(|v| v.to_string()),
                Self::SCOPE => self.scope.map(|v| v.to_string()),
                Self::PRIORITY => self.priority.map(|v| v.to_string()),
                Self::TOS => self.tos.map(|v| v.to_string()),
                Self::MTU => self.mtu.map(|v| v.to_string()),
                Self::ADVMSS => self.advmss.map(|v| v.to_string()),
                _ => None,
            };
            if let Some(v) = v {
                write!(f, " {name} {v}")?;
            }
        }
        Ok(())
    }
}

pub(super) fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}
