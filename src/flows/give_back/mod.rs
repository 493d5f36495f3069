//! Giving back: everything that returns what an attachment took (its NIC, its RDMA device, its
//! IP lease, its state), whoever asks. One word for it throughout, and one place:
//! - this file: releasing one attachment, the NIC sent home (DEL, GC, and a failed ADD's
//!   [`ledger`]);
//! - `rdma.rs`: its RDMA device deleted or sent home, never blocking on a held one;
//! - `lost.rs`: NICs back on the host from a pod that died without DEL (ADD, DEL, GC, STATUS);
//! - `decide/`: the pure decisions (which link is the attachment's NIC, how a lost one comes
//!   back), on plain data, unit-tested without a kernel;
//! - `holders.rs`: who keeps a pod's network namespace alive once its path is gone;
//! - `ledger.rs`: what ADD took, written down before it acts, given back if ADD fails.
//!
//! What decides which link is the attachment's NIC is its state record (a hardware NIC's
//! parent device; a virtual one's kind, pod ifindex and permanent MAC), never the
//! pod-writable alias tag alone.

use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::ipam::Ipam;
use crate::lock;
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::fault;
use rdma_host_device_core::link::{Arrival, LinkInfo, Links};
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::{Record, Store, Tag, parent_key};

use decide::{
    Where, find_nic, given_back, is_orphaned_nic, legacy, lost_under_another_tag, tagged_by,
    unreadable_is_ours,
};

pub(in crate::flows) mod decide;
mod holders;
pub(in crate::flows) mod ledger;
pub(in crate::flows) mod lost;
pub mod rdma;

use lost::give_back_lost;

/// Where giving back acts: the call's environment and config, the host and, when it still
/// exists, the pod (namespace and an rtnetlink socket in each).
pub struct Places<'a> {
    pub env: &'a Env,
    pub conf: &'a NetConf,
    pub node: &'a Node,
    pub host_ns: &'a Netns,
    pub host: &'a Links,
    pub pod_ns: Option<&'a Netns>,
    pub pod: Option<&'a Links>,
}

/// Release one attachment: IPAM released (first, while the NIC is still in the pod), the NIC
/// home, the state forgotten. DEL and GC call it, holding the attachment's lock.
pub async fn release_attachment(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    store: &Store,
    record: Option<&Record>,
    netns: &str,
) -> Result<()> {
    let mut errors = Vec::new();
    let host_ns = Netns::current()?;
    let host = Links::open()?;
    let pod_ns = Netns::open_if_alive(netns).map_err(|mut e| {
        e.msg.push_str("; the attachment's state is kept");
        e
    })?;
    // The host's own netns is no pod's: acting on it would rename, re-MTU and re-MAC whatever
    // host link sits at the NIC's recorded index. Refused before anything, the state kept.
    // So is a namespace other than the one ADD attached in (the path retargeted since).
    if let Some(ns) = &pod_ns {
        ns.refuse_if_host()
            .and_then(|()| refuse_if_not_adds(ns, record))
            .map_err(|mut e| {
                e.msg.push_str("; the attachment's state is kept");
                e
            })?;
    }
    let pod = match &pod_ns {
        Some(ns) => match Links::open_in(ns) {
            Ok(l) => Some(l),
            Err(e) => {
                errors.push(e);
                None
            }
        },
        None => None,
    };
    let places = Places {
        env,
        conf,
        node,
        host_ns: &host_ns,
        host: &host,
        pod_ns: pod_ns.as_ref(),
        pod: pod.as_ref(),
    };
    // The pod's netns path is gone, but the netns may live on (a process still in it): then
    // the NIC, still carrying the pod's address, is in it. Nothing is released.
    if pod_ns.is_none()
        && let Some(r) = record
    {
        orphaned(r, netns).await?;
    }
    // A software device that processes hold open cannot be deleted without the kernel
    // blocking this call until they close it: refused first, with nothing released (its
    // address goes only with the NIC), so that the retry finds the attachment whole.
    if let (Some(ns), Some(r)) = (&pod_ns, record) {
        rdma::refuse_releasing_a_used_soft_device(ns, r)?;
    }
    release_ipam(env, conf, node, record, &mut errors)?;
    remove_device_info(record, &mut errors);
    take_adds_part_out_of_claim_metadata(node, record);
    take_adds_part_out_of_nic_env(node, record);
    return_nic(&places, record, &mut errors).await?;
    if errors.is_empty() {
        // The state file, and a temp file left by an ADD killed while writing it.
        store.remove(&env.container_id, &env.ifname)?;
    }
    rdma_host_device_core::error::first_error(errors)
}

/// IPAM first, while the interface is still in the pod: a plugin may need it to give its
/// address back (the dhcp daemon sends DHCPRELEASE from it; once the NIC has left, the lease
/// would leak). Whatever IPAM says, the NIC is still returned. A plugin the node does not allow
/// (now), or paths in its `ipam` outside the node's `ipamPaths`/`ipamReadPaths`, are not run:
/// ADD only ever recorded what passed, so this is an operator who has since narrowed the node,
/// an older record, or no record and a config ADD refused (the runtime's clean-up DEL after
/// that ADD failed). DEL still succeeds, loudly: failing would keep the pod from ever being
/// deleted for the sake of an allocation in a plugin the node has decided not to run.
fn release_ipam(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    record: Option<&Record>,
    errors: &mut Vec<Error>,
) -> Result<()> {
    let Some((t, raw)) = ipam_of(conf, record) else {
        return Ok(());
    };
    match Ipam::new(&t, env, node).and_then(|i| i.del(&raw)) {
        Ok(()) => {
            log::info!("IPAM {t} released");
            fault::hit("del:after-ipam-release")?;
        }
        Err(e) if e.code == Code::NotAllowed && record.is_none() => log::warn!(
            "not running IPAM {t:?} for DEL: {}; there is no record of {}/{}, so no ADD of this config got that far (ADD refuses what the node does not allow), and nothing is released",
            e.msg,
            env.container_id,
            env.ifname
        ),
        Err(e) if e.code == Code::NotAllowed => log::error!(
            "not releasing IPAM: {}; whatever {t:?} allocated for {}/{} stays allocated (the NIC still comes home)",
            e.msg,
            env.container_id,
            env.ifname
        ),
        Err(e) => errors.push(e),
    }
    Ok(())
}

/// The device-info file ADD wrote for Multus (it may have been a device plugin's copy
/// before): it describes a device the pod no longer has.
fn remove_device_info(record: Option<&Record>, errors: &mut Vec<Error>) {
    if let Some(path) = record.and_then(|r| r.device_info.as_ref())
        && let Err(e) = rdma_host_device_core::device_info::remove(path)
    {
        errors.push(e);
    }
}

/// ADD's part of a DRA claim's device metadata (ifName, addresses, GID indices): the pod no
/// longer has them. Lenient: a file that is gone (the claim unprepared) or cannot be rewritten
/// is logged, and DEL goes on; unprepare removes the files in any case.
fn take_adds_part_out_of_claim_metadata(node: &Node, record: Option<&Record>) {
    let Some(dra) = record.and_then(|r| r.dra.as_ref()) else {
        return;
    };
    match super::metadata::files(node, Some(dra)) {
        Ok(Some(files)) => {
            match rdma_host_device_core::dra::metadata::update_device(
                &files,
                &dra.pool,
                &dra.device,
                None,
            ) {
                Ok(Some(g)) => log::info!(
                    "device metadata {}: ADD's part taken out (generation {g})",
                    files.file.display()
                ),
                Ok(None) => {}
                Err(e) => log::warn!("device metadata {}: {e}", files.file.display()),
            }
        }
        Ok(None) => {}
        Err(e) => log::warn!("device metadata: {e}"),
    }
}

/// The device plugin's env spec of the NIC (`nic_env`): back to generation 1, as its Allocate
/// wrote it; the GID index ADD put there is the pod's, which no longer has the NIC. Lenient like
/// the claim's metadata.
fn take_adds_part_out_of_nic_env(node: &Node, record: Option<&Record>) {
    let Some(r) = record else {
        return;
    };
    match super::metadata::nic_env_of(node, r) {
        Ok(Some(ne)) => {
            let id = rdma_host_device_core::nic_env::cdi_id(&ne.id);
            match rdma_host_device_core::nic_env::update(
                &ne.place,
                &ne.id,
                r.rdma_device.as_deref(),
                None,
            ) {
                Ok(Some(g)) => log::info!("env {id}: ADD's part taken out (generation {g})"),
                Ok(None) => {}
                Err(e) => log::warn!("env {id}: {e}"),
            }
        }
        Ok(None) => {}
        Err(e) => log::warn!("the per-NIC env: {e}"),
    }
}

/// The NIC home ([`give_back_nic`]); a failure is kept with the others, and the state with it.
async fn return_nic(
    places: &Places<'_>,
    record: Option<&Record>,
    errors: &mut Vec<Error>,
) -> Result<()> {
    match give_back_nic(places, record).await {
        Ok(true) => {
            log::info!("NIC returned to the host");
            fault::hit("del:after-nic-return")?;
        }
        Ok(false) => log::info!(
            "no NIC held by {} in the pod or on the host; nothing to return",
            places.env.ifname
        ),
        Err(e) => errors.push(e.context("returning the NIC to the host")),
    }
    Ok(())
}

/// Refuse (4) a pod namespace that is not the one ADD attached in (see
/// [`Netns::refuse_if_not`]): DEL, GC and CHECK act only on the namespace ADD recorded.
pub fn refuse_if_not_adds(ns: &Netns, record: Option<&Record>) -> Result<()> {
    ns.refuse_if_not(record.and_then(|r| r.netns_id))
}

/// Fail (11, retryable) if `r`'s NIC sits in a living network namespace the plugin can reach
/// only through a process in it (see [`orphaned_nic`]): the pod's, whose path `netns` is gone.
/// Its IP and the attachment's state are kept: once the holders exit, a hardware NIC comes
/// back to the host (and the retry gives it back) and a virtual one is gone with the netns.
async fn orphaned(r: &Record, netns: &str) -> Result<()> {
    let Some((l, held_by)) = orphaned_nic(r).await else {
        return Ok(());
    };
    Err(Error::new(
        Code::TryAgain,
        format!(
            "{} is still in a network namespace as {} (index {}): the pod's path {} is gone, but the namespace lives on ({held_by}); keeping its IP and the attachment's state so that DEL can be retried once that is over",
            r.host_name,
            l.name,
            l.index,
            if netns.is_empty() {
                "(none given)"
            } else {
                netns
            },
        ),
    ))
}

/// `r`'s NIC in a network namespace only a process keeps (`/proc/PID/ns/net`, from
/// `netns::others_on_node`; one with another name under /run/netns is someone's, and a NIC on
/// its way home from a dead pod passes through none): the link there, and who holds it
/// ("held by pid 4242 (sleep)"). DEL and `inspect` ask.
pub async fn orphaned_nic(r: &Record) -> Option<(LinkInfo, String)> {
    let owner = r.owner();
    // Namespaces only a process keeps, and the one ADD attached in under another name (its
    // path unmounted while another mount keeps it). Namespace identities are reused once a
    // namespace is freed, so the NIC itself must be there either way.
    let same_ns = |p: &std::path::Path| {
        r.netns_id.is_some_and(|id| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino()) == id
            })
        })
    };
    let held = rdma_host_device_core::netns::others_on_node()
        .into_iter()
        .filter(|(p, _)| p.starts_with("/proc") || same_ns(p));
    for (path, label) in held {
        let Ok(ns) = Netns::open(&path) else {
            continue;
        };
        if ns.is_the_hosts() {
            continue;
        }
        let links = match Links::open_in(&ns) {
            Ok(l) => l.all().await.unwrap_or_default(),
            Err(_) => continue,
        };
        let Some(l) = links.into_iter().find(|l| is_orphaned_nic(l, r, &owner)) else {
            continue;
        };
        let holders = holders::holders(&ns);
        let held_by = if holders.is_empty() {
            label
        } else {
            format!(
                "held by {}",
                rdma_host_device_core::process::describe(&holders)
            )
        };
        return Some((l, held_by));
    }
    None
}

/// The IPAM plugin and configuration to release with: what ADD used (in the record), whatever
/// the network's config says now, which its writer may have changed since (another plugin,
/// another pool). The config sent is the current one with ADD's `ipam` object in it. Records
/// older than this rule carry no `ipam`: the current config's is used.
fn ipam_of(conf: &NetConf, record: Option<&Record>) -> Option<(String, Vec<u8>)> {
    let recorded = record.and_then(|r| r.ipam.clone());
    let Some(ipam) = recorded else {
        return conf.ipam_type.clone().map(|t| (t, conf.raw.clone()));
    };
    let t = ipam.get("type")?.as_str()?.to_owned();
    let mut v: serde_json::Value = serde_json::from_slice(&conf.raw)
        .ok()
        .filter(serde_json::Value::is_object)
        .unwrap_or_else(
            || serde_json::json!({"cniVersion": conf.cni_version.as_str(), "name": conf.name}),
        );
    if v.get("ipam") != Some(&ipam) {
        log::warn!("the network's ipam changed since ADD; releasing with what ADD used ({t})");
    }
    v["ipam"] = ipam;
    Some((t, serde_json::to_vec(&v).unwrap_or_default()))
}

/// Give the NIC of attachment `record` back to the host as it was. Returns whether a NIC was
/// found. What decides which link is ours is the record, never the alias tag alone: a pod with
/// NET_ADMIN can rewrite its interface's alias, MAC and name, and put our tag on another link.
/// Looks in the pod first (by the record: parent device, or pod ifindex and permanent MAC), then on
/// the host (a NIC that came back from a dead pod). Without a record nothing is touched: ADD
/// writes it before its first change, so no record means nothing of ours is out.
pub async fn give_back_nic(places: &Places<'_>, record: Option<&Record>) -> Result<bool> {
    let Some(r) = record else {
        log::info!("no state record for this attachment: nothing of ours to give back");
        return Ok(false);
    };
    let owner = r.owner();
    // Lock the NIC before touching it (re-entrant: ADD's rollback already holds it).
    let _nic = lock::device(&r.host_name)?;
    if let (Some(pod), Some(pod_ns)) = (places.pod, places.pod_ns)
        && from_pod(places, pod, pod_ns, r, &owner).await?
    {
        return Ok(true);
    }
    if lost_on_host(places, r, &owner).await? {
        return Ok(true);
    }
    neither_in_pod_nor_on_host(places, r).await
}

/// The NIC from the pod, with what the pod made of it left behind: whether it was there.
async fn from_pod(
    places: &Places<'_>,
    pod: &Links,
    pod_ns: &Netns,
    r: &Record,
    owner: &str,
) -> Result<bool> {
    let original_alias = r.host_alias.as_deref();
    // A name that is not UTF-8 hides a link from every lookup: give ours a readable one.
    pod.name_unreadable(pod_ns, |u| unreadable_is_ours(u, r, owner))
        .await?;
    let links = pod.all().await?;
    let ours = find_nic(&links, r, owner, Where::Pod);
    // The RDMA side first, while the NIC is in the pod: a software device dies with its
    // netdev's move, and a moved device must not be left behind. Without the NIC there
    // (ADD killed between moving the RDMA device and the NIC) the device may be alone.
    if r.rdma_device.is_some() || r.soft_device.is_some() {
        rdma::release(
            pod_ns,
            places.host_ns,
            ours.as_ref().map(|l| l.index),
            Some(r),
        )?;
    }
    let Some(link) = ours else {
        return Ok(false);
    };
    // What the pod made of its NIC does not leave with it: links stacked on it go, flags,
    // group, queue length and altnames return to what the node had.
    let keep = |e: Error| {
        let mut e = e.context(format!("{} is still in pod {}", r.host_name, r.netns));
        e.msg
            .push_str("; keeping the attachment's state so that DEL can be retried");
        e
    };
    pod.delete_uppers(link.index).await.map_err(keep)?;
    // Nor what another namespace stacked on it (through an id for the pod's namespace): it
    // would ride the NIC home and keep its frames.
    let removed = rdma_host_device_core::uppers::arrival::remove_foreign_riders(
        &places.node.uppers_socket,
        r.moved_after.as_ref(),
        pod_ns,
        link.index,
        &link.name,
    )
    .map_err(keep)?;
    for what in removed {
        log::warn!(
            "{} in pod {}: {what} before the NIC goes home",
            link.name,
            r.netns
        );
    }
    pod.restore_settings(link.index, &r.settings())
        .await
        .map_err(keep)?;
    free_home_name(places, r, owner).await.map_err(keep)?;
    let home = HomeName::find(places.host, r, None).await.map_err(keep)?;
    let how = Arrival {
        name: &home.name,
        alias: home.alias(original_alias),
        ..given_back(r, original_alias, &link)
    };
    log::info!(
        "returning {} (index {} in the pod) to the host as {} (mtu {})",
        link.name,
        link.index,
        home.name,
        r.host_mtu
    );
    pod.move_to(link.index, places.host_ns, &how).await?;
    if let Some(still) = find_nic(&pod.all().await?, r, owner, Where::Pod) {
        return Err(still_in_pod(r, &still));
    }
    home.report(places.host, r, link.index).await;
    Ok(true)
}

/// The NIC back on the host without a DEL (its pod's netns died), still tagged: restored in
/// place under its name. Whether it was there.
async fn lost_on_host(places: &Places<'_>, r: &Record, owner: &str) -> Result<bool> {
    let original_alias = r.host_alias.as_deref();
    places
        .host
        .name_unreadable(places.host_ns, |u| tagged_by(u, Some(owner)))
        .await?;
    let on_host = places.host.all().await?;
    let lost = match find_nic(&on_host, r, owner, Where::Host) {
        Some(l) => Some(l),
        None if r.parent.is_some() => {
            let records = Store::new(&places.node.state_dir).all()?;
            lost_under_another_tag(&on_host, r, &records)
        }
        None => None,
    };
    let Some(link) = lost else {
        return Ok(false);
    };
    log::info!(
        "{} is back on the host without a DEL{}; giving it back under its name {}",
        link.name,
        if link
            .alias
            .as_deref()
            .and_then(Tag::decode)
            .is_some_and(|t| t.owner != owner)
        {
            " under a tag its pod rewrote"
        } else {
            ""
        },
        r.host_name
    );
    // Settings first, while the link still bears the tag that lets a retry find it.
    places
        .host
        .restore_settings(link.index, &r.settings())
        .await?;
    let home = HomeName::find(places.host, r, Some(link.index)).await?;
    let how = Arrival {
        name: &home.name,
        alias: home.alias(original_alias),
        ..given_back(r, original_alias, &link)
    };
    places.host.restore_in_place(link.index, &how).await?;
    home.report(places.host, r, link.index).await;
    Ok(true)
}

/// Not in the pod, not lost on the host: at home already, or gone. A hardware NIC whose device
/// still exists but whose netdev is in neither namespace was moved on by the pod (into a
/// namespace of its own): DEL must not say it is done. One whose device is gone (a VF destroyed,
/// a NIC unplugged) has nothing left to return.
async fn neither_in_pod_nor_on_host(places: &Places<'_>, r: &Record) -> Result<bool> {
    let Some(parent) = r.parent.as_deref().filter(|_| !legacy(r)) else {
        return Ok(false);
    };
    let home = places
        .host
        .all()
        .await?
        .into_iter()
        .any(|l| l.parent.as_ref().map(parent_key).as_deref() == Some(parent));
    let device_exists = parent
        .split_once('/')
        .is_some_and(|(bus, dev)| rdma_host_device_core::sysfs::bus_device_exists(bus, dev));
    if !home && places.pod.is_some() && device_exists {
        return Err(Error::new(
            Code::Netlink,
            format!(
                "{} ({parent}) is neither in pod {} nor on the host, though its device exists: the pod may have moved it into another network namespace; keeping the attachment's state so that DEL can be retried",
                r.host_name, r.netns
            ),
        ));
    }
    if !home && !device_exists {
        log::warn!(
            "{} ({parent}) no longer exists on this node (removed or unplugged); nothing to return",
            r.host_name
        );
    }
    Ok(false)
}

/// A NIC lost to a dead pod (back on the host, still tagged) may carry, as an altname its pod
/// gave it, the name `r`'s NIC comes home under: the move would fail on it for ever. Restore
/// that NIC from its own attachment's record first (its altnames as the node had them), which
/// frees the name. A link that has the name as its own is left to the move's error.
async fn free_home_name(places: &Places<'_>, r: &Record, owner: &str) -> Result<()> {
    let Some(l) = places.host.by_name(&r.host_name).await? else {
        return Ok(());
    };
    let Some(tag) = l.alias.as_deref().and_then(Tag::decode) else {
        return Ok(());
    };
    if l.name == r.host_name || tag.owner == owner {
        return Ok(());
    }
    log::info!(
        "{} is an altname of {}, a NIC back from a dead pod (originally {}); giving that NIC back first",
        r.host_name,
        l.name,
        tag.host_name
    );
    let records = Store::new(&places.node.state_dir).all()?;
    give_back_lost(places.host, &l, &tag, &records, "DEL").await
}

fn still_in_pod(r: &Record, l: &LinkInfo) -> Error {
    Error::new(
        Code::Netlink,
        format!(
            "{} is still in pod {} as {} (index {}) after it was returned; keeping the attachment's state so that DEL can be retried",
            r.host_name, r.netns, l.name, l.index
        ),
    )
}

/// The name a NIC comes home under: its own, or, when a host link holds that name (any pod
/// with NET_ADMIN and no user namespace can make one on the host, through a namespace id), a
/// name that says so (`DISPLACED_MARK`): DEL brings the NIC home by its identity and succeeds,
/// never failing on every retry for a name someone else took.
struct HomeName {
    name: String,
    /// Who holds the NIC's own name, when someone does.
    taken_by: Option<String>,
    alias_note: String,
}

impl HomeName {
    /// For `r`'s NIC (on the host at `here`, when it is there already).
    async fn find(host: &Links, r: &Record, here: Option<u32>) -> Result<HomeName> {
        let holder = host
            .by_name(&r.host_name)
            .await?
            .filter(|l| Some(l.index) != here);
        let Some(l) = holder else {
            return Ok(HomeName {
                name: r.host_name.clone(),
                taken_by: None,
                alias_note: String::new(),
            });
        };
        let what = match crate::select::made_elsewhere(&l) {
            Some(why) => format!("{} (index {}; {why})", l.name, l.index),
            None => format!(
                "{} (index {}, {})",
                l.name,
                l.index,
                l.kind.as_deref().unwrap_or("hardware")
            ),
        };
        let taken_by = if l.name == r.host_name {
            what
        } else {
            format!("{what}, as an altname")
        };
        Ok(HomeName {
            name: rdma_host_device_core::state::displaced_pattern(&r.host_name),
            taken_by: Some(taken_by),
            alias_note: rdma_host_device_core::state::displaced_note(&r.host_name),
        })
    }

    /// The alias the NIC comes home with: the node's, or, displaced and without one, a note
    /// of its own name (for `inspect` and whoever reads `ip link`).
    fn alias<'a>(&'a self, original: Option<&'a str>) -> Option<&'a str> {
        match original {
            Some(a) if !a.is_empty() => Some(a),
            _ if self.taken_by.is_some() => Some(&self.alias_note),
            _ => Some(""),
        }
    }

    /// Log where the NIC came home, if not under its own name.
    async fn report(&self, host: &Links, r: &Record, index: u32) {
        let Some(by) = &self.taken_by else {
            return;
        };
        // Its index, unless that was taken on the host: then another link may have it.
        let now = match host.by_index(index).await {
            Ok(Some(l)) if r.is_its_device(&l) || (!r.mac.is_empty() && l.mac == r.mac) => l.name,
            _ => self.name.replace("%d", "N"),
        };
        log::warn!(
            "{} came home as {now}: its name {} is taken on the host by {by}; rename it back (ip link set {now} name {}) once that link is gone",
            r.host_name,
            r.host_name,
            r.host_name
        );
    }
}
