//! GC: undo every attachment of this network that the runtime no longer lists in
//! `cni.dev/valid-attachments`. Keeps going past individual failures and reports them all.

use super::del::release;
use super::undo::first_error;
use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::error::Result;
use crate::ipam::Ipam;
use crate::state::Store;

pub async fn gc(env: &Env, conf: &NetConf) -> Result<()> {
    let valid = conf.valid_attachments.clone().unwrap_or_default();
    let store = Store::new(&conf.state_dir);
    let mut errors = Vec::new();
    for r in store.all()? {
        let listed = valid
            .iter()
            .any(|a| a.container_id == r.container_id && a.ifname == r.ifname);
        if r.network != conf.name || listed {
            continue;
        }
        log::info!(
            "GC: {} of container {} is not a valid attachment any more; releasing it",
            r.ifname,
            r.container_id
        );
        let mut stale = env.clone();
        stale.container_id = r.container_id.clone();
        stale.ifname = r.ifname.clone();
        stale.netns = r.netns.clone();
        if let Err(e) = release(&stale, conf, &store, Some(&r), &r.netns).await {
            errors.push(e.context(format!("GC of {}/{}", r.container_id, r.ifname)));
        }
    }
    if let Some(t) = &conf.ipam_type {
        match Ipam::new(t, env).and_then(|i| i.optional("GC", &conf.raw)) {
            Ok(()) => {}
            Err(e) => errors.push(e),
        }
    }
    first_error(errors)
}
