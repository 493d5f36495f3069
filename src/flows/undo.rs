//! Undo for ADD: every step that changes the node pushes how to take itself back; a failure
//! runs them in reverse. The same "give the NIC back" is what DEL does.

use crate::cni::env::Env;
use crate::cni::netconf::Isolation;
use crate::cni::netconf::NetConf;
use crate::error::{Code, Error, Result};
use crate::fault;
use crate::ipam::Ipam;
use crate::link::{Arrival, LinkInfo, Links};
use crate::lock;
use crate::netns::Netns;
use crate::state::{Record, Store, Tag, owner_key};

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
        Undo::ReturnNic { record } => return_nic(s, &record.owner(), Some(record)).await.map(drop),
        Undo::ReleaseIpam => match &s.conf.ipam_type {
            Some(t) => Ipam::new(t, s.env)?.del(&s.conf.raw),
            None => Ok(()),
        },
    }
}

/// Find the NIC that attachment `owner` holds, wherever it is now, and put it back on the host
/// as it was. Returns whether a NIC was found. Looks in the pod first (by our tag, so a rename
/// inside the pod does not hide it), then on the host (a NIC that came back from a dead pod).
pub async fn return_nic(s: &Scene<'_>, owner: &str, record: Option<&Record>) -> Result<bool> {
    let original_alias = record.and_then(|r| r.host_alias.as_deref());
    // Lock the NIC before touching it (re-entrant: ADD's rollback already holds it). Without a
    // record, the tag on the link says which NIC it is; the links are then looked at again
    // under the lock, since another call may have moved the NIC in between.
    let host_name = match record {
        Some(r) => Some(r.host_name.clone()),
        None => find_tag(s, owner).await?.map(|t| t.host_name),
    };
    let _nic = match &host_name {
        Some(n) => Some(lock::device(n)?),
        None => None,
    };
    if let (Some(pod), Some(pod_ns)) = (s.pod, s.pod_ns)
        && let Some((link, tag)) = ours_in_pod(pod, owner, record).await?
    {
        if s.conf.rdma.isolation != Isolation::None {
            super::rdma::release(pod_ns, s.host_ns, link.index, record)?;
        }
        let how = arrival(&tag, original_alias);
        log::info!(
            "returning {} to the host as {} (mtu {})",
            link.name,
            tag.host_name,
            tag.host_mtu
        );
        pod.move_to(link.index, s.host_ns, &how).await?;
        return Ok(true);
    }
    if let (Some(pod_ns), Some(r)) = (s.pod_ns, record)
        && r.rdma_moved
        && s.conf.rdma.isolation != Isolation::None
        && let Some(dev) = &r.rdma_device
    {
        // Killed between moving the RDMA device and the NIC: the device is in the pod alone.
        super::rdma::return_device(dev, pod_ns, s.host_ns)?;
    }
    if let Some((link, tag)) = tagged(s.host, owner).await? {
        log::info!(
            "{} is back on the host without a DEL; restoring its name {}",
            link.name,
            tag.host_name
        );
        s.host
            .restore_in_place(link.index, &arrival(&tag, original_alias))
            .await?;
        return Ok(true);
    }
    Ok(false)
}

/// Give a lost NIC (back on the host from a pod's dead netns, still tagged) its original name,
/// MTU and admin state, under its lock, if it is still lost once the lock is held (an ADD, DEL,
/// GC or STATUS may have restored it meanwhile). `who` names the caller in the log.
pub(super) async fn restore_lost(
    host: &Links,
    l: &LinkInfo,
    tag: &Tag,
    alias: Option<&str>,
    who: &str,
) -> Result<()> {
    let _nic = lock::device(&tag.host_name)?;
    let Some(now) = host.by_index(l.index).await? else {
        return Ok(());
    };
    if now.alias.as_deref().and_then(Tag::decode).as_ref() != Some(tag) {
        return Ok(());
    }
    log::info!(
        "{who}: {} is a lost NIC (back from a pod deleted without DEL); restoring it as {} (mtu {})",
        now.name,
        tag.host_name,
        tag.host_mtu
    );
    host.restore_in_place(now.index, &arrival(tag, alias)).await
}

/// How a NIC looks once restored: as its tag remembers it, with its original alias (or none).
pub(super) fn arrival<'a>(tag: &'a Tag, original_alias: Option<&'a str>) -> Arrival<'a> {
    Arrival {
        name: &tag.host_name,
        mtu: Some(tag.host_mtu),
        alias: Some(original_alias.unwrap_or("")),
        up: tag.host_up,
    }
}

/// `owner`'s tag, read from its NIC in the pod or on the host.
async fn find_tag(s: &Scene<'_>, owner: &str) -> Result<Option<Tag>> {
    if let Some(pod) = s.pod
        && let Some((_, tag)) = tagged(pod, owner).await?
    {
        return Ok(Some(tag));
    }
    Ok(tagged(s.host, owner).await?.map(|(_, t)| t))
}

/// Our NIC in the pod: by its tag or, when the tag never got there (the kernel applies a
/// move's later attributes after the move itself, and one of them failed), by the MAC the
/// record remembers, on an untagged link. One dump of the pod's links serves both.
async fn ours_in_pod(
    pod: &Links,
    owner: &str,
    record: Option<&Record>,
) -> Result<Option<(LinkInfo, Tag)>> {
    let links = pod.all().await?;
    if let Some(hit) = find_tagged(&links, owner) {
        return Ok(Some(hit));
    }
    let Some(r) = record.filter(|r| !r.mac.is_empty()) else {
        return Ok(None);
    };
    Ok(links
        .into_iter()
        .find(|l| l.mac == r.mac && l.alias.as_deref().and_then(Tag::decode).is_none())
        .map(|l| (l, r.tag())))
}

/// The link in `links`' namespace that carries `owner`'s tag.
async fn tagged(links: &Links, owner: &str) -> Result<Option<(LinkInfo, Tag)>> {
    Ok(find_tagged(&links.all().await?, owner))
}

fn find_tagged(links: &[LinkInfo], owner: &str) -> Option<(LinkInfo, Tag)> {
    links.iter().find_map(|l| {
        let tag = Tag::decode(l.alias.as_deref()?)?;
        (tag.owner == owner).then(|| (l.clone(), tag))
    })
}

/// The attachment key of this call.
pub fn owner_of(env: &Env) -> String {
    owner_key(&env.container_id, &env.ifname)
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
