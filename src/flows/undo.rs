//! Undo for ADD: every step that changes the node pushes how to take itself back; a failure
//! runs them in reverse. The same "give the NIC back" is what DEL does.

use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::error::{Code, Error, Result};
use crate::fault;
use crate::ipam::Ipam;
use crate::link::{Arrival, LinkInfo, Links};
use crate::lock;
use crate::netns::Netns;
use crate::state::{Record, Store, Tag};

/// One step to take back.
#[derive(Debug)]
pub enum Undo {
    /// Remove the state file written before the first change.
    ForgetState {
        container_id: String,
        ifname: String,
    },
    /// Give back an RDMA device moved into the pod (when the NIC never followed it).
    ReturnRdma { device: String },
    /// Return the NIC to the host under its original name, MTU and alias; first delete the
    /// software RDMA device made for it and give back a moved RDMA device.
    ReturnNic { record: Box<Record> },
    /// Release what IPAM handed out.
    ReleaseIpam,
}

/// The places an undo acts on.
pub struct Scene<'a> {
    pub env: &'a Env,
    pub conf: &'a NetConf,
    pub host_ns: &'a Netns,
    pub host: &'a Links,
    pub pod_ns: Option<&'a Netns>,
    pub pod: Option<&'a Links>,
}

#[derive(Default)]
pub struct UndoStack {
    steps: Vec<Undo>,
}

impl UndoStack {
    pub fn push(&mut self, u: Undo) {
        self.steps.push(u);
    }

    /// The NIC arrived and the record learnt more (its index in the pod): undo from that.
    pub fn update_record(&mut self, r: &Record) {
        for step in &mut self.steps {
            if let Undo::ReturnNic { record } = step {
                **record = r.clone();
            }
        }
    }

    /// Everything succeeded: nothing to take back.
    pub fn disarm(&mut self) {
        self.steps.clear();
    }

    /// Take back every step, newest first; keep going past failures and log them.
    /// If a step fails, the state file stays: DEL needs what it says (the RDMA device, a
    /// software device, the original alias) to finish the job.
    pub async fn unwind(&mut self, scene: &Scene<'_>) {
        let mut failed = false;
        while let Some(step) = self.steps.pop() {
            if failed && matches!(step, Undo::ForgetState { .. }) {
                log::warn!("keeping the state file: an undo step failed; DEL will finish it");
                continue;
            }
            if let Err(e) = fault::hit("add:undo") {
                log::error!("undo {step:?} skipped: {e}");
                failed = true;
                continue;
            }
            log::info!("undo: {step:?}");
            if let Err(e) = apply(&step, scene).await {
                log::error!("undo {step:?} failed: {e}");
                failed = true;
            }
        }
    }
}

async fn apply(step: &Undo, s: &Scene<'_>) -> Result<()> {
    match step {
        Undo::ForgetState {
            container_id,
            ifname,
        } => Store::new(&s.conf.state_dir).remove(container_id, ifname),
        Undo::ReturnRdma { device } => match s.pod_ns {
            Some(pod_ns) => super::rdma::return_device(device, pod_ns, s.host_ns),
            None => Ok(()),
        },
        Undo::ReturnNic { record } => return_nic(s, Some(record)).await.map(drop),
        Undo::ReleaseIpam => match &s.conf.ipam_type {
            Some(t) => Ipam::new(t, s.env)?.del(&s.conf.raw),
            None => Ok(()),
        },
    }
}

/// Give the NIC of attachment `record` back to the host as it was. Returns whether a NIC was
/// found. What decides which link is ours is the record, never the alias tag alone: a pod with
/// NET_ADMIN can rewrite its interface's alias, MAC and name, and put our tag on another link.
/// Looks in the pod first (by the ifindex the record saw there, or the permanent MAC), then on
/// the host (a NIC that came back from a dead pod). Without a record nothing is touched: ADD
/// writes it before its first change, so no record means nothing of ours is out.
pub async fn return_nic(s: &Scene<'_>, record: Option<&Record>) -> Result<bool> {
    let Some(r) = record else {
        log::info!("no state record for this attachment: nothing of ours to give back");
        return Ok(false);
    };
    let owner = r.owner();
    // Lock the NIC before touching it (re-entrant: ADD's rollback already holds it).
    let _nic = lock::device(&r.host_name)?;
    let original_alias = r.host_alias.as_deref();
    if let (Some(pod), Some(pod_ns)) = (s.pod, s.pod_ns) {
        let links = pod.all().await?;
        if let Some(link) = find_ours(&links, r, &owner, Where::Pod) {
            if r.rdma_device.is_some() || r.soft_device.is_some() {
                super::rdma::release(pod_ns, s.host_ns, link.index, Some(r))?;
            }
            let how = restored(r, original_alias, &link);
            log::info!(
                "returning {} (index {} in the pod) to the host as {} (mtu {})",
                link.name,
                link.index,
                r.host_name,
                r.host_mtu
            );
            pod.move_to(link.index, s.host_ns, &how).await?;
            if let Some(still) = find_ours(&pod.all().await?, r, &owner, Where::Pod) {
                return Err(still_in_pod(r, &still));
            }
            return Ok(true);
        }
        if r.rdma_moved
            && let Some(dev) = &r.rdma_device
        {
            // Killed between moving the RDMA device and the NIC: the device is in the pod alone.
            super::rdma::return_device(dev, pod_ns, s.host_ns)?;
        }
    }
    if let Some(link) = find_ours(&s.host.all().await?, r, &owner, Where::Host) {
        log::info!(
            "{} is back on the host without a DEL; restoring its name {}",
            link.name,
            r.host_name
        );
        s.host
            .restore_in_place(link.index, &restored(r, original_alias, &link))
            .await?;
        return Ok(true);
    }
    let home = s.host.all().await?.into_iter().find(|l| {
        if r.perm_mac.is_empty() {
            l.name == r.host_name && l.mac == r.mac
        } else {
            l.perm_mac == r.perm_mac
        }
    });
    if home.is_none() && s.pod.is_some() && r.pod_index.is_some() && !r.perm_mac.is_empty() {
        // A real NIC cannot vanish: the pod moved it on (into a namespace of its own).
        return Err(Error::new(
            Code::Netlink,
            format!(
                "{} (permanent mac {}) is neither in pod {} nor on the host: the pod may have moved it into another network namespace; keeping the attachment's state so that DEL can be retried",
                r.host_name, r.perm_mac, r.netns
            ),
        ));
    }
    Ok(false)
}

/// Where [`find_ours`] looks: the pod (any state of the NIC) or the host (only a lost NIC,
/// which still bears our tag; an untagged one there is simply at home).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Where {
    Pod,
    Host,
}

/// The NIC of `r` among `links`, by what a pod cannot forge. A link bearing our tag that is
/// not the NIC is ignored, and said so.
fn find_ours(links: &[LinkInfo], r: &Record, owner: &str, place: Where) -> Option<LinkInfo> {
    let tagged = |l: &LinkInfo| {
        l.alias
            .as_deref()
            .and_then(Tag::decode)
            .is_some_and(|t| t.owner == owner)
    };
    let perm_ok = |l: &LinkInfo| r.perm_mac.is_empty() || l.perm_mac == r.perm_mac;
    let hit = match (place, r.pod_index) {
        // The pod cannot change an ifindex, and the permanent MAC guards against a pod link
        // that took the index after the NIC left.
        (Where::Pod, Some(index)) => links.iter().find(|l| l.index == index && perm_ok(l)),
        // ADD died between the move and noting the pod-side index: the permanent MAC, or the
        // host index (kept by a move when it is free), or our tag or MAC on a link that has
        // the MAC we recorded.
        (Where::Pod, None) => links
            .iter()
            .find(|l| !r.perm_mac.is_empty() && l.perm_mac == r.perm_mac)
            .or_else(|| {
                links.iter().find(|l| {
                    r.perm_mac.is_empty()
                        && l.mac == r.mac
                        && (l.index == r.host_index || tagged(l) || l.alias.is_none())
                })
            }),
        (Where::Host, _) => links.iter().find(|l| {
            tagged(l)
                && if r.perm_mac.is_empty() {
                    l.mac == r.mac
                } else {
                    l.perm_mac == r.perm_mac
                }
        }),
    };
    for l in links.iter().filter(|l| tagged(l)) {
        if hit.is_none_or(|h| h.index != l.index) {
            log::warn!(
                "ignoring {} (index {}, mac {}): it bears the tag of {}/{} but is not its NIC {} (mac {}{})",
                l.name,
                l.index,
                l.mac,
                r.container_id,
                r.ifname,
                r.host_name,
                r.mac,
                if r.perm_mac.is_empty() {
                    String::new()
                } else {
                    format!(", permanent mac {}", r.perm_mac)
                }
            );
        }
    }
    hit.cloned()
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

/// How the NIC of `r` looks once restored: its original name, MTU, admin state, alias and MAC.
fn restored<'a>(r: &'a Record, original_alias: Option<&'a str>, now: &LinkInfo) -> Arrival<'a> {
    Arrival {
        name: &r.host_name,
        mtu: Some(r.host_mtu),
        alias: Some(original_alias.unwrap_or("")),
        up: r.host_up,
        mac: (now.mac != r.mac && !r.mac.is_empty()).then_some(r.mac.as_str()),
    }
}

/// Give a lost NIC (back on the host from a pod's dead netns, still tagged) its original name,
/// MTU and admin state, under its lock, if it is still lost once the lock is held (an ADD, DEL,
/// GC or STATUS may have restored it meanwhile). What it is restored to comes from its
/// attachment's record when there is one, which must match the link. Without a record (a DEL
/// ran while the NIC was still on its way home) only the tag is left, and the pod could have
/// written it: it may then only rename this NIC, never to a name another attachment's NIC had.
/// `who` names the caller in the log.
pub(super) async fn restore_lost(
    host: &Links,
    l: &LinkInfo,
    tag: &Tag,
    records: &[Record],
    who: &str,
) -> Result<()> {
    let record = records.iter().find(|r| r.owner() == tag.owner);
    let from_tag;
    let r = match record {
        Some(r) => r,
        None => {
            if let Some(other) = records.iter().find(|r| r.host_name == tag.host_name) {
                log::warn!(
                    "{who}: {} bears a tag naming {}, the NIC of attachment {}/{}; not renaming it",
                    l.name,
                    tag.host_name,
                    other.container_id,
                    other.ifname
                );
                return Ok(());
            }
            from_tag = Record {
                container_id: String::new(),
                ifname: String::new(),
                network: String::new(),
                netns: String::new(),
                host_name: tag.host_name.clone(),
                host_mtu: tag.host_mtu,
                host_up: tag.host_up,
                host_alias: None,
                mac: l.mac.clone(),
                perm_mac: l.perm_mac.clone(),
                altnames: Vec::new(),
                host_index: l.index,
                pod_index: None,
                pci: None,
                rdma_device: None,
                rdma_moved: false,
                soft_device: None,
                pod: None,
            };
            &from_tag
        }
    };
    let _nic = lock::device(&r.host_name)?;
    let Some(now) = host.by_index(l.index).await? else {
        return Ok(());
    };
    if find_ours(std::slice::from_ref(&now), r, &tag.owner, Where::Host).is_none() {
        return Ok(());
    }
    log::info!(
        "{who}: {} is a lost NIC (back from a pod deleted without DEL); restoring it as {} (mtu {})",
        now.name,
        r.host_name,
        r.host_mtu
    );
    host.restore_in_place(now.index, &restored(r, r.host_alias.as_deref(), &now))
        .await
}

/// A pod netns that may be gone: DEL and GC carry on without it.
pub fn open_pod_ns(path: &str) -> Option<Netns> {
    if path.is_empty() {
        return None;
    }
    match Netns::open(std::path::Path::new(path)) {
        Ok(ns) => Some(ns),
        Err(e) if e.code == Code::UnknownContainer || e.code == Code::InvalidEnv => {
            log::info!(
                "pod netns {path} is gone ({}); looking for the NIC on the host",
                e.msg
            );
            None
        }
        Err(e) => {
            log::warn!("cannot open pod netns {path}: {e}");
            None
        }
    }
}

/// Combine errors from steps that all had to be tried.
pub fn first_error(errors: Vec<Error>) -> Result<()> {
    let mut it = errors.into_iter();
    match it.next() {
        None => Ok(()),
        Some(mut first) => {
            let rest: Vec<String> = it.map(|e| e.to_string()).collect();
            if !rest.is_empty() {
                let also = format!("{} more error(s): {}", rest.len(), rest.join("; "));
                first.details = if first.details.is_empty() {
                    also
                } else {
                    format!("{}; {also}", first.details)
                };
            }
            Err(first)
        }
    }
}
