//! The agent as the CNI GC caller. containerd (2.4 and before) never calls a plugin's GC (go-cni
//! has no GC method), so an attachment whose sandbox went without a DEL that reached us (the
//! runtime crashed, DEL failed and the sandbox was removed anyway, Multus lost its cache, ...)
//! would hold its NIC and its IPAM lease for ever. With the node configuration's `gc` section,
//! the exporter's process runs a round at start and every `periodSeconds`:
//!
//! 1. ask the runtime over CRI which sandboxes exist (`cri.rs`, read-only); if it cannot be
//!    asked (no socket, an error, no answer within `timeoutSeconds`), or lists no sandbox at
//!    all (not even the agent's own pod's: a wrong socket), collect nothing;
//! 2. take our attachment records of Kubernetes pods whose container ID (containerd's sandbox
//!    ID) the runtime does not list and whose state file was last written more than `graceSeconds` before the
//!    question ([`leaked`]): an ADD in flight has no sandbox in the list yet (containerd adds
//!    it only after ADD returns) but a young record;
//! 3. give each back through the plugin's own GC flow (`flows::collect_leaked`, the library,
//!    not the installed binary: the same code as the runtime's GC, with the agent's log and
//!    metrics), which takes each attachment's lock, re-reads its record, releases its IPAM
//!    with what ADD allocated with, and brings its NIC home as DEL would;
//! 4. log a line and count it (`rdma_host_device_gc_collected_total{network}`, or
//!    `..._gc_failed_total` and a retry next round).
//!
//! Only the runtime's answer decides what is leaked, never the API server: a pod the API server
//! no longer knows keeps its NIC as long as the runtime has its sandbox.

pub mod counters;
pub mod cri;

pub use counters::Counters;

use rdma_host_device::cni::env::{Command, Env};
use rdma_host_device::cni::netconf::{NetConf, ValidAttachment};
use rdma_host_device_core::node::{GcConfig, Node};
use rdma_host_device_core::state::{Record, Store};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

/// A record and when its state file was last written.
#[derive(Debug, Clone)]
pub struct Written {
    pub record: Record,
    pub at: SystemTime,
}

/// The records that are leaked: made for a Kubernetes pod (ADD had `K8S_POD_*` in CNI_ARGS:
/// the CRI runtime's; an attachment of podman or another runtime on the node is none of its
/// business), their container is no sandbox the runtime listed, and their file was written at
/// least `grace` before `asked_at` (when the runtime was asked). A record written later, or
/// stamped in the future (a clock stepped back), is never leaked.
pub fn leaked<'a>(
    records: &'a [Written],
    listed: &HashSet<String>,
    asked_at: SystemTime,
    grace: Duration,
) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|w| w.record.pod.is_some())
        .filter(|w| !listed.contains(&w.record.container_id))
        .filter(|w| asked_at.duration_since(w.at).is_ok_and(|age| age >= grace))
        .map(|w| &w.record)
        .collect()
}

/// Every record of the store with its file's time. A file that goes between the two reads was
/// removed by a DEL: left out.
fn written(state_dir: &std::path::Path) -> rdma_host_device_core::error::Result<Vec<Written>> {
    Ok(Store::new(state_dir)
        .all_named()?
        .into_iter()
        .filter_map(|(name, record)| {
            let at = std::fs::symlink_metadata(state_dir.join(&name))
                .and_then(|m| m.modified())
                .ok()?;
            Some(Written { record, at })
        })
        .collect())
}

/// How one round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// The runtime answered: this many attachments were leaked, this many given back.
    Done { leaked: usize, collected: usize },
    /// The runtime could not be asked: nothing was collected.
    RuntimeUnavailable,
}

/// One round: ask the runtime, pick the leaked attachments, give each back.
pub fn round(cfg: &GcConfig, node: &Node, counters: &Counters) -> Round {
    let asked_at = SystemTime::now();
    let deadline = Duration::from_secs(cfg.timeout_seconds);
    let answer = crate::async_rt::current_thread()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(cri::sandboxes(&cfg.cri_socket, deadline)));
    let sandboxes = match answer {
        Ok(s) => s,
        Err(e) => {
            log::warn!(
                "gc: cannot ask the runtime which pod sandboxes exist ({e}); collecting nothing this round"
            );
            counters.round("runtime_unavailable");
            return Round::RuntimeUnavailable;
        }
    };
    let records = match written(&node.state_dir) {
        Ok(r) => r,
        Err(e) => {
            log::error!(
                "gc: cannot read the attachment records: {e}; collecting nothing this round"
            );
            counters.round("done");
            return Round::Done {
                leaked: 0,
                collected: 0,
            };
        }
    };
    // The agent itself runs in a pod: a runtime that lists no sandbox at all is not the one
    // that runs this node's pods (a wrong gc.criSocket), or has lost its state; taking its
    // word would give back every pod's NIC.
    if sandboxes.ids.is_empty() && !records.is_empty() {
        log::warn!(
            "gc: {} at {} lists no pod sandbox at all, not even this agent's, while {} attachment(s) are recorded: is gc.criSocket the runtime that runs this node's pods? collecting nothing this round",
            sandboxes.runtime,
            cfg.cri_socket.display(),
            records.len()
        );
        counters.round("runtime_unavailable");
        return Round::RuntimeUnavailable;
    }
    let grace = Duration::from_secs(cfg.grace_seconds);
    let found = leaked(&records, &sandboxes.ids, asked_at, grace);
    let mut by_network: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in &found {
        by_network.entry(r.network.as_str()).or_default().push(r);
    }
    let mut collected = 0;
    for (network, rs) in by_network {
        collected += collect_network(cfg, node, network, &rs, counters);
    }
    log::info!(
        "gc: {} ({} sandboxes) asked; {} attachment(s) of {} leaked, {collected} given back",
        sandboxes.runtime,
        sandboxes.ids.len(),
        found.len(),
        records.len()
    );
    counters.round("done");
    Round::Done {
        leaked: found.len(),
        collected,
    }
}

/// Give back `leaked`, all of `network`, through the plugin's GC flow; returns how many went.
fn collect_network(
    cfg: &GcConfig,
    node: &Node,
    network: &str,
    leaked: &[&Record],
    counters: &Counters,
) -> usize {
    for r in leaked {
        log::info!(
            "gc: {}/{} ({}, NIC {}, network {network}) has no sandbox in the runtime since {} s or more; giving it back",
            r.container_id,
            r.ifname,
            pod_of(r),
            r.host_name,
            cfg.grace_seconds
        );
    }
    let list: Vec<ValidAttachment> = leaked
        .iter()
        .map(|r| ValidAttachment {
            container_id: r.container_id.clone(),
            ifname: r.ifname.clone(),
        })
        .collect();
    let raw = serde_json::json!({
        "cniVersion": "1.1.0",
        "name": network,
        "type": "rdma-host-device",
    })
    .to_string()
    .into_bytes();
    let env = Env {
        command: Command::Gc,
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        args: String::new(),
        path: cfg.cni_path.clone(),
    };
    // A thread of its own: the flow enters pods' network namespaces.
    let outcome = NetConf::parse_strict(raw, node).and_then(|conf| {
        std::thread::scope(|s| {
            s.spawn(|| rdma_host_device::flows::collect_leaked(&env, &conf, node, &list))
                .join()
                .unwrap_or_else(|_| {
                    Err(rdma_host_device_core::error::Error::new(
                        rdma_host_device_core::error::Code::Internal,
                        "the GC flow panicked",
                    ))
                })
        })
    });
    if let Err(e) = &outcome {
        log::error!("gc: network {network}: {e}");
    }
    let store = Store::new(&node.state_dir);
    let mut gone = 0;
    for r in leaked {
        match store.load(&r.container_id, &r.ifname) {
            Ok(None) => {
                gone += 1;
                counters.collected(network);
                log::info!(
                    "gc: collected {}/{} ({}): NIC {} home, IPAM released, record removed",
                    r.container_id,
                    r.ifname,
                    pod_of(r),
                    r.host_name
                );
            }
            _ => {
                counters.failed(network);
                log::warn!(
                    "gc: {}/{} ({}) is still held (see the error above, or another call holds it); trying again next round",
                    r.container_id,
                    r.ifname,
                    pod_of(r)
                );
            }
        }
    }
    gone
}

fn pod_of(r: &Record) -> String {
    r.pod
        .as_ref()
        .map(|p| format!("pod {}/{}", p.namespace, p.name))
        .unwrap_or_else(|| "no pod recorded".into())
}

/// Run rounds for ever on a thread of its own: one now, then one every period. Without a `gc`
/// section, says once that leaks are not collected and returns.
pub fn spawn(node: Node, counters: Counters) {
    let cfg = match node.gc() {
        Ok(Some(c)) => c,
        Ok(None) => {
            log::info!(
                "gc: the node configuration has no gc.criSocket: attachments whose pod sandbox disappeared without a DEL are not collected (containerd never calls the CNI's GC)"
            );
            return;
        }
        Err(e) => {
            log::error!("gc: {e}; attachments whose sandbox disappeared are not collected");
            return;
        }
    };
    log::info!(
        "gc: asking {} every {} s; collecting attachments without a sandbox older than {} s",
        cfg.cri_socket.display(),
        cfg.period_seconds,
        cfg.grace_seconds
    );
    let spawned = std::thread::Builder::new()
        .name("gc".into())
        .spawn(move || {
            loop {
                round(&cfg, &node, &counters);
                std::thread::sleep(Duration::from_secs(cfg.period_seconds));
            }
        });
    if let Err(e) = spawned {
        log::error!("gc: cannot start its thread: {e}; leaks are not collected");
    }
}

#[cfg(test)]
mod tests;
