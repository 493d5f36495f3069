//! DEL: release IPAM and give the NIC back to the host as it was. It succeeds when repeated,
//! without a netns, with the netns gone, and after the interface was renamed in the pod; it
//! always tries every step and reports what failed so the runtime retries.

use super::undo::{Scene, first_error, open_pod_ns, return_nic};
use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::error::Result;
use crate::fault;
use crate::ipam::Ipam;
use crate::link::Links;
use crate::lock;
use crate::netns::Netns;
use crate::state::{Record, Store};

pub async fn del(env: &Env, conf: &NetConf) -> Result<()> {
    let store = Store::new(&conf.state_dir);
    let _attachment = lock::attachment(&conf.state_dir, &env.container_id, &env.ifname)?;
    fault::hit("del:locked")?;
    let record = store.load(&env.container_id, &env.ifname)?;
    let netns = if env.netns.is_empty() {
        record.as_ref().map(|r| r.netns.clone()).unwrap_or_default()
    } else {
        env.netns.clone()
    };
    release(env, conf, &store, record.as_ref(), &netns).await
}

/// Undo one attachment: IPAM released, NIC home, state forgotten. Shared with GC, which holds
/// the attachment's lock as DEL does.
pub async fn release(
    env: &Env,
    conf: &NetConf,
    store: &Store,
    record: Option<&Record>,
    netns: &str,
) -> Result<()> {
    let mut errors = Vec::new();
    let host_ns = Netns::current()?;
    let host = Links::open()?;
    let pod_ns = open_pod_ns(netns);
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
    let scene = Scene {
        env,
        conf,
        host_ns: &host_ns,
        host: &host,
        pod_ns: pod_ns.as_ref(),
        pod: pod.as_ref(),
    };
    // IPAM first, while the interface is still in the pod: a plugin may need it to give its
    // address back (the dhcp daemon sends DHCPRELEASE from it; once the NIC has left, the
    // lease would leak). Whatever IPAM says, the NIC is still returned.
    if let Some(t) = &conf.ipam_type {
        match Ipam::new(t, env).and_then(|i| i.del(&conf.raw)) {
            Ok(()) => {
                log::info!("IPAM {t} released");
                fault::hit("del:after-ipam-release")?;
            }
            Err(e) => errors.push(e),
        }
    }
    match return_nic(&scene, record).await {
        Ok(true) => {
            log::info!("NIC returned to the host");
            fault::hit("del:after-nic-return")?;
        }
        Ok(false) => log::info!(
            "no NIC held by {} in the pod or on the host; nothing to return",
            env.ifname
        ),
        Err(e) => errors.push(e.context("returning the NIC to the host")),
    }
    if errors.is_empty() {
        // The state file, and a temp file left by an ADD killed while writing it.
        store.remove(&env.container_id, &env.ifname)?;
    }
    first_error(errors)
}
