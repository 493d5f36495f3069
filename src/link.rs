//! Link verbs over rtnetlink, against one network namespace per `Links` handle: look links up,
//! move+rename+MTU+alias+up in one request, addresses and routes.

use crate::error::{Code, Error, Result, invalid_config};
use crate::netns::Netns;
use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RouteScope,
};
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};
use std::net::IpAddr;

/// What we need to know about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub index: u32,
    pub name: String,
    /// Lower-case colon form; empty for links without a hardware address.
    pub mac: String,
    pub mtu: u32,
    pub up: bool,
    pub alias: Option<String>,
    /// The MTU range the driver accepts, when the kernel reports it.
    pub min_mtu: Option<u32>,
    pub max_mtu: Option<u32>,
    /// The bond or bridge this link is a port of (IFLA_MASTER).
    pub master: Option<u32>,
    /// The permanent hardware address (IFLA_PERM_ADDRESS): set by the NIC's firmware, not
    /// changeable from a pod. Empty for virtual links, which have none.
    pub perm_mac: String,
    /// Alternative names (`ip link property add ... altname`): they select the link as its
    /// name does, and travel with it between namespaces.
    pub altnames: Vec<String>,
    /// The device behind the netdev (IFLA_PARENT_DEV_NAME, e.g. the PCI function
    /// `0000:3b:00.1`, and its bus, `pci`): hardware a pod cannot create. `None` for virtual
    /// links.
    pub parent: Option<(String, String)>,
    /// The link type (IFLA_INFO_KIND: `veth`, `macvlan`, `vlan`, ...); `None` for hardware.
    pub kind: Option<String>,
    /// The link it is stacked on (IFLA_LINK: a macvlan's or VLAN's lower device, a veth's peer).
    pub lower: Option<u32>,
}

/// How a link should look once it has arrived in the target namespace.
#[derive(Debug, Clone)]
pub struct Arrival<'a> {
    pub name: &'a str,
    pub mtu: Option<u32>,
    /// `Some("")` clears the alias.
    pub alias: Option<&'a str>,
    pub up: bool,
    /// Set this MAC (colon form) if given: a pod may have changed it.
    pub mac: Option<&'a str>,
}

/// `aa:bb:..` to bytes; `None` if it is not a MAC.
fn mac_bytes(mac: &str) -> Option<Vec<u8>> {
    mac.split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .filter(|b| b.len() == 6)
}

/// An rtnetlink socket bound to one network namespace.
pub struct Links {
    handle: Handle,
}

fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

fn nl_error(what: impl std::fmt::Display, e: rtnetlink::Error) -> Error {
    let detail = match errno(&e) {
        Some(n) => std::io::Error::from_raw_os_error(n).to_string(),
        None => e.to_string(),
    };
    Error::new(Code::Netlink, format!("{what}: {detail}"))
}

impl Links {
    /// A socket in the calling thread's current namespace. Must run inside the tokio runtime.
    pub fn open() -> Result<Self> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| Error::new(Code::Netlink, format!("cannot open rtnetlink socket: {e}")))?;
        tokio::spawn(conn);
        Ok(Links { handle })
    }

    /// A socket in `ns`: opened there, used from here.
    pub fn open_in(ns: &Netns) -> Result<Self> {
        ns.run(Self::open)?
    }

    pub async fn by_name(&self, name: &str) -> Result<Option<LinkInfo>> {
        let req = self.handle.link().get().match_name(name.to_string());
        self.one(req.execute(), &format!("looking up link {name:?}"))
            .await
    }

    pub async fn by_index(&self, index: u32) -> Result<Option<LinkInfo>> {
        let req = self.handle.link().get().match_index(index);
        self.one(
            req.execute(),
            &format!("looking up the link with index {index}"),
        )
        .await
    }

    /// How error messages name link `index`: by its name, the index only as an extra.
    async fn describe(&self, index: u32) -> String {
        self.name_of(index).await.0
    }

    async fn one(
        &self,
        mut stream: impl futures::Stream<Item = std::result::Result<LinkMessage, rtnetlink::Error>>
        + Unpin,
        what: &str,
    ) -> Result<Option<LinkInfo>> {
        match stream.try_next().await {
            Ok(m) => Ok(m.map(|m| info(&m))),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(nl_error(what, e)),
        }
    }

    /// Every link in the namespace. Only for lookups the kernel cannot filter (by MAC, alias).
    pub async fn all(&self) -> Result<Vec<LinkInfo>> {
        let msgs: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_error("listing links", e))?;
        Ok(msgs.iter().map(info).collect())
    }

    /// Move link `index` into `target`, renamed, with MTU, alias and admin state, in ONE
    /// RTM_SETLINK: the kernel renames during the move, so no other process ever sees the link
    /// under a half-way name or in a half-way place.
    pub async fn move_to(&self, index: u32, target: &Netns, how: &Arrival<'_>) -> Result<()> {
        let mut b = LinkUnspec::new_with_index(index)
            .setns_by_fd(target.raw_fd())
            .name(how.name.to_string());
        if let Some(mtu) = how.mtu {
            b = b.mtu(mtu);
        }
        if let Some(alias) = how.alias {
            b = b.alias(alias.to_string());
        }
        if let Some(mac) = how.mac.and_then(mac_bytes) {
            b = b.address(mac);
        }
        b = if how.up { b.up() } else { b.down() };
        let Err(e) = self.handle.link().set(b.build()).execute().await else {
            return Ok(());
        };
        let (dev, now) = self.name_of(index).await;
        let hint = match errno(&e) {
            Some(libc::EEXIST) => format!(
                "; the NIC stays where it was, as {now}, because {} is taken there",
                how.name
            ),
            _ => String::new(),
        };
        let mut err = nl_error(
            format!(
                "moving {dev} to {} as {:?}",
                target.path().display(),
                how.name
            ),
            e,
        );
        err.msg.push_str(&hint);
        Err(err)
    }

    /// Rename / re-MTU / re-alias a link where it is (recovering a NIC lost to a dead netns).
    pub async fn restore_in_place(&self, index: u32, how: &Arrival<'_>) -> Result<()> {
        let mut b = LinkUnspec::new_with_index(index).name(how.name.to_string());
        if let Some(mtu) = how.mtu {
            b = b.mtu(mtu);
        }
        if let Some(alias) = how.alias {
            b = b.alias(alias.to_string());
        }
        if let Some(mac) = how.mac.and_then(mac_bytes) {
            b = b.address(mac);
        }
        // A rename needs the link down; bring it up afterwards if it should be.
        let b = b.down();
        if let Err(e) = self.handle.link().set(b.build()).execute().await {
            let (dev, now) = self.name_of(index).await;
            let hint = match errno(&e) {
                Some(libc::EEXIST) => format!(
                    "; the NIC is back on the host as {now} because {} is taken",
                    how.name
                ),
                _ => String::new(),
            };
            let mut err = nl_error(format!("restoring {dev} as {:?}", how.name), e);
            err.msg.push_str(&hint);
            return Err(err);
        }
        if how.up {
            self.set_up(index).await?;
        }
        Ok(())
    }

    /// Link `index`'s description for messages ("net1 (index 7)") and its bare name.
    async fn name_of(&self, index: u32) -> (String, String) {
        match self.by_index(index).await {
            Ok(Some(l)) if !l.name.is_empty() => (format!("{} (index {index})", l.name), l.name),
            _ => {
                let d = format!("the link with index {index}");
                (d.clone(), d)
            }
        }
    }

    pub async fn set_up(&self, index: u32) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index).up().build();
        match self.handle.link().set(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) => Err(nl_error(
                format!("setting {} up", self.describe(index).await),
                e,
            )),
        }
    }

    /// Add `addr` to link `index`. IPv6 addresses skip duplicate address detection
    /// (IFA_F_NODAD), so they are usable the moment ADD returns rather than `tentative` for a
    /// second or more: the address came from IPAM, which owns its uniqueness.
    pub async fn add_address(&self, index: u32, addr: IpNet) -> Result<()> {
        let mut req = self
            .handle
            .address()
            .add(index, addr.addr(), addr.prefix_len());
        if addr.addr().is_ipv6() {
            let m = req.message_mut();
            m.header.flags.insert(AddressHeaderFlags::Nodad);
        }
        match req.execute().await {
            Ok(()) => Ok(()),
            Err(e) => Err(nl_error(
                format!("adding address {addr} to {}", self.describe(index).await),
                e,
            )),
        }
    }

    /// Addresses on link `index` (with their prefix), link-local IPv6 excluded.
    pub async fn addresses(&self, index: u32) -> Result<Vec<IpNet>> {
        let got: std::result::Result<Vec<AddressMessage>, _> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await;
        let msgs = match got {
            Ok(m) => m,
            Err(e) => {
                return Err(nl_error(
                    format!("listing addresses of {}", self.describe(index).await),
                    e,
                ));
            }
        };
        Ok(msgs
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => IpNet::new(*ip, m.header.prefix_len).ok(),
                    _ => None,
                })
            })
            .filter(|n| !is_link_local(n.addr()))
            .collect())
    }

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

    /// Why the node itself needs link `link`, in words: it carries a default route (any
    /// table), a global address, or it is a port of a bond or bridge. Empty when it does not.
    pub async fn node_uses(&self, link: &LinkInfo) -> Result<Vec<String>> {
        let mut why = Vec::new();
        // Devices stacked on it (macvlan, ipvlan, VLAN, ...) stay on the host and lose their
        // wire when it leaves: whatever they carry is the node's. A veth's IFLA_LINK is its
        // peer, not a lower device.
        for upper in self.all().await? {
            if upper.lower == Some(link.index)
                && upper.index != link.index
                && upper.kind.as_deref() != Some("veth")
            {
                why.push(format!(
                    "{} {} is stacked on it",
                    upper.kind.as_deref().unwrap_or("link"),
                    upper.name
                ));
            }
        }
        if let Some(m) = link.master {
            let master = self.by_index(m).await?.map(|l| l.name);
            why.push(format!(
                "it is a port of {}",
                master.unwrap_or_else(|| format!("link #{m}"))
            ));
        }
        let msgs: Vec<AddressMessage> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(link.index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_error(format!("listing addresses of {}", link.name), e))?;
        for m in msgs.iter().filter(|m| {
            m.header.index == link.index
                && m.header.scope == netlink_packet_route::address::AddressScope::Universe
        }) {
            if let Some(ip) = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            }) {
                why.push(format!(
                    "it has the global address {ip}/{}",
                    m.header.prefix_len
                ));
            }
        }
        // Nexthop objects leaving through it (routes that name only `nhid`). The socket is
        // opened in this thread's namespace, which is the host's: node_uses runs there.
        let nh_ids = crate::nexthop::ids_through(link.index).map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("listing nexthop objects of {}: {e}", link.name),
            )
        })?;
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut q = RouteMessage::default();
            q.header.address_family = family;
            let msgs: Vec<RouteMessage> = self
                .handle
                .route()
                .get(q)
                .execute()
                .try_collect()
                .await
                .map_err(|e| nl_error(format!("listing routes of {}", link.name), e))?;
            for m in msgs
                .iter()
                .filter(|m| m.header.destination_prefix_length == 0)
            {
                let via_link = m.attributes.iter().any(|a| match a {
                    RouteAttribute::Oif(i) => *i == link.index,
                    RouteAttribute::MultiPath(hops) => {
                        hops.iter().any(|h| h.interface_index == link.index)
                    }
                    RouteAttribute::NhId(id) => nh_ids.contains(id),
                    _ => false,
                });
                if via_link {
                    let table = m
                        .attributes
                        .iter()
                        .find_map(|a| match a {
                            RouteAttribute::Table(t) => Some(*t),
                            _ => None,
                        })
                        .unwrap_or(u32::from(m.header.table));
                    let fam = if family == AddressFamily::Inet {
                        "IPv4"
                    } else {
                        "IPv6"
                    };
                    why.push(format!(
                        "the node's {fam} default route (table {table}) goes through it"
                    ));
                }
            }
        }
        why.dedup();
        Ok(why)
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
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut q = RouteMessage::default();
            q.header.address_family = family;
            // Table unspecified: the kernel dumps every table.
            q.header.table = 0;
            let msgs: Vec<RouteMessage> = self
                .handle
                .route()
                .get(q)
                .execute()
                .try_collect()
                .await
                .map_err(|e| {
                    nl_error(format!("listing routes of the link with index {index}"), e)
                })?;
            out.extend(
                msgs.iter()
                    .filter_map(|m| KernelRoute::from_message(m, family))
                    .filter(|k| k.oif == Some(index)),
            );
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

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

fn info(m: &LinkMessage) -> LinkInfo {
    let mut li = LinkInfo {
        index: m.header.index,
        name: String::new(),
        mac: String::new(),
        mtu: 0,
        up: m.header.flags.contains(LinkFlags::Up),
        alias: None,
        min_mtu: None,
        max_mtu: None,
        master: None,
        perm_mac: String::new(),
        altnames: Vec::new(),
        parent: None,
        kind: None,
        lower: None,
    };
    let (mut parent, mut bus) = (None, None);
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => li.name = n.clone(),
            LinkAttribute::Address(mac) => li.mac = format_mac(mac),
            LinkAttribute::Mtu(mtu) => li.mtu = *mtu,
            LinkAttribute::IfAlias(al) => li.alias = Some(al.clone()),
            LinkAttribute::MinMtu(m) => li.min_mtu = Some(*m),
            LinkAttribute::MaxMtu(m) if *m > 0 => li.max_mtu = Some(*m),
            LinkAttribute::Controller(i) if *i > 0 => li.master = Some(*i),
            LinkAttribute::ParentDevName(n) => parent = Some(n.clone()),
            LinkAttribute::ParentDevBusName(b) => bus = Some(b.clone()),
            LinkAttribute::Link(i) if *i > 0 => li.lower = Some(*i),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let netlink_packet_route::link::LinkInfo::Kind(k) = i {
                        li.kind = Some(k.to_string());
                    }
                }
            }
            LinkAttribute::PropList(props) => {
                for p in props {
                    if let netlink_packet_route::link::Prop::AltIfName(n) = p {
                        li.altnames.push(n.clone());
                    }
                }
            }
            LinkAttribute::PermAddress(mac) if mac.iter().any(|b| *b != 0) => {
                li.perm_mac = format_mac(mac)
            }
            _ => {}
        }
    }
    li.parent = parent.map(|p| (p, bus.unwrap_or_default()));
    li
}

pub fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_formatting() {
        assert_eq!(
            format_mac(&[0xaa, 0x0b, 0, 1, 2, 0xff]),
            "aa:0b:00:01:02:ff"
        );
        assert_eq!(format_mac(&[]), "");
    }

    #[test]
    fn link_local_filter() {
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(!is_link_local("fd00::1".parse().unwrap()));
        assert!(is_link_local("169.254.1.1".parse().unwrap()));
    }
}
