//! GC: give back every attachment of this network that the runtime no longer lists in
//! `cni.dev/valid-attachments`, and give lost NICs (back on the host from a dead pod, still
//! bearing our tag) their names back. Keeps going past individual failures and reports them
//! all: the first as the error, the others in its details.
//!
//! Scope: the network named in the config. The valid list is the runtime's for that name
//! only, so another network's attachments, its lost NICs and its temp files are never
//! touched (they would all look stale). A lost NIC or temp file no record claims has no
//! network left to ask: any GC takes it.
//!
//! [`collect`] is the same job for the node agent, which has no runtime's list (containerd
//! never calls GC): it names the attachments to release, and everything else counts as valid.

use super::give_back::lost::give_back_all_lost;
use super::give_back::release_attachment;
use crate::cni::env::Env;
use crate::cni::netconf::{NetConf, ValidAttachment};
use crate::ipam::Ipam;
use crate::lock;
use rdma_host_device_core::error::first_error;
use rdma_host_device_core::error::{Error, Result};
use rdma_host_device_core::fault;

use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::{Record, Store};
use std::collections::HashSet;

/// GC: release every attachment of this network not in `cni.dev/valid-attachments`, give back
/// lost NICs, remove stale temp files; report every failure, the first as the error.
pub async fn gc(env: &Env, conf: &NetConf, node: &Node) -> Result<()> {
    // Without the list, every attachment would look stale: refuse rather than guess.
    let valid = conf.valid_attachments.clone().ok_or_else(|| {
        rdma_host_device_core::error::invalid_config(
            "GC needs \"cni.dev/valid-attachments\" in the network configuration (an empty list means none is valid)",
        )
    })?;
    let store = Store::new(&node.state_dir);
    let mut errors = Vec::new();
    let records = store.all().unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    release_all_but(env, conf, node, &store, records, &valid, errors).await
}

/// GC without a runtime's list (the node agent's: `rdma-host-device-agent metrics` with the node
/// configuration's `gc`, `flows::collect_leaked`): release exactly
/// the attachments of this network named in `leaked`, and count every other record in the store
/// as valid. The inverse of [`gc`]'s list on purpose: an attachment whose ADD finished after the
/// caller read the store is not in `leaked`, so it is never released, whatever its age.
/// Lost NICs and stale temp files are handled as GC handles them.
pub async fn collect(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    leaked: &[ValidAttachment],
) -> Result<()> {
    let store = Store::new(&node.state_dir);
    let mut errors = Vec::new();
    let records = store.all().unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    let valid: Vec<ValidAttachment> = records
        .iter()
        .filter(|r| r.network == conf.name)
        .filter(|r| {
            !leaked
                .iter()
                .any(|a| a.container_id == r.container_id && a.ifname == r.ifname)
        })
        .map(|r| ValidAttachment {
            container_id: r.container_id.clone(),
            ifname: r.ifname.clone(),
        })
        .collect();
    release_all_but(env, conf, node, &store, records, &valid, errors).await
}

/// What both GCs do once they know which attachments are valid.
async fn release_all_but(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    store: &Store,
    records: Vec<Record>,
    valid: &[ValidAttachment],
    mut errors: Vec<Error>,
) -> Result<()> {
    // Attachments handled here, whatever the outcome: their lost NICs were tried already.
    let mut tried = HashSet::new();
    for r in &records {
        let listed = valid
            .iter()
            .any(|a| a.container_id == r.container_id && a.ifname == r.ifname);
        if r.network != conf.name || listed {
            continue;
        }
        tried.insert(r.owner());
        if let Err(e) = release_stale(env, conf, node, store, r).await {
            errors.push(e.context(format!("GC of {}/{}", r.container_id, r.ifname)));
        }
    }
    // Attachments of other networks (by their records): their GC's, not ours.
    let others: HashSet<String> = records
        .iter()
        .filter(|r| r.network != conf.name)
        .map(Record::owner)
        .collect();
    remove_stale_temps(node, store, &others, &mut errors);
    if let Err(e) = give_back_all_lost(valid, &tried, &others, &records, &mut errors).await {
        errors.push(e.context("GC: looking for lost NICs"));
    }
    if let Some(t) = &conf.ipam_type {
        match Ipam::new(t, env, node).and_then(|i| i.optional("GC", &conf.raw)) {
            Ok(()) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        log::error!("GC finished with {} error(s)", errors.len());
    }
    first_error(errors)
}

/// One attachment the runtime no longer lists. One that another call is working on right now
/// (an ADD still running, a DEL) is left to that call.
async fn release_stale(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    store: &Store,
    r: &Record,
) -> Result<()> {
    let label = format!("{}/{}", r.container_id, r.ifname);
    let Some(_attachment) = lock::try_attachment(&node.state_dir, &r.owner(), &label)? else {
        log::info!(
            "GC: {}/{} is busy with another call; leaving it to that call",
            r.container_id,
            r.ifname
        );
        return Ok(());
    };
    // Re-read under the lock: a DEL may have finished meanwhile.
    let Some(r) = store.load(&r.container_id, &r.ifname)? else {
        return Ok(());
    };
    fault::hit("gc:release")?;
    log::info!(
        "GC: {} of container {} is not a valid attachment any more; releasing it",
        r.ifname,
        r.container_id
    );
    let mut stale = env.clone();
    stale.container_id = r.container_id.clone();
    stale.ifname = r.ifname.clone();
    stale.netns = r.netns.clone();
    release_attachment(&stale, conf, node, store, Some(&r), &r.netns).await
}

/// Temp files of state writes killed before their rename (any attachment in the state dir
/// but another network's, valid or not: such a file is never of use). One whose attachment is locked may be a write
/// in progress and is left to its writer.
fn remove_stale_temps(
    node: &Node,
    store: &Store,
    others: &HashSet<String>,
    errors: &mut Vec<Error>,
) {
    let temps = match store.temps() {
        Ok(t) => t,
        Err(e) => {
            errors.push(e.context("GC: looking for stale temp state files"));
            return;
        }
    };
    for t in temps.into_iter().filter(|t| !others.contains(&t.owner)) {
        let removed = match lock::try_attachment(&node.state_dir, &t.owner, &t.label) {
            Ok(Some(_attachment)) => store.remove_temp_file(&t),
            Ok(None) => {
                log::info!(
                    "GC: {} is busy; its temp state file may be a write in progress",
                    t.label
                );
                Ok(())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = removed {
            errors.push(e.context(format!("GC: stale temp state file of {}", t.label)));
        }
    }
}
