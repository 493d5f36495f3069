//! DEL: release IPAM and give the NIC back to the host as it was. It succeeds when repeated,
//! without a netns, with the netns gone, and after the interface was renamed in the pod. Past
//! its refusals, which keep everything (the host's or another namespace than ADD's: 4; the NIC
//! in a namespace that outlived its path, or a held software RDMA device: 11), it tries every
//! step and reports what failed so the runtime retries.

use super::give_back::release_attachment;
use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::lock;
use rdma_host_device_core::error::Result;
use rdma_host_device_core::fault;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::Store;

/// DEL: lock the attachment, load its record (the netns from it when the runtime sends none)
/// and release it: IPAM, the NIC, the state. Lenient about the config, strict about the truth.
pub async fn del(env: &Env, conf: &NetConf, node: &Node) -> Result<()> {
    let store = Store::new(&node.state_dir);
    let _attachment = lock::attachment(&node.state_dir, &env.container_id, &env.ifname)?;
    fault::hit("del:locked")?;
    let record = store.load(&env.container_id, &env.ifname)?;
    let netns = if env.netns.is_empty() {
        record.as_ref().map(|r| r.netns.clone()).unwrap_or_default()
    } else {
        env.netns.clone()
    };
    release_attachment(env, conf, node, &store, record.as_ref(), &netns).await
}
