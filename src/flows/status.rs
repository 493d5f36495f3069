//! STATUS: ready when the configured NIC can be attached (or already is, to a pod) and the IPAM
//! plugin is there and ready. A NIC back from a pod deleted without DEL is given back first.

use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::ipam::Ipam;
use crate::select;
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::link::Links;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::Store;

use super::give_back::lost::{give_back_lost, name_lost_unreadable};

/// STATUS: ready (Ok) when the configured NIC can be attached or already is, the node policy
/// allows it, and the IPAM plugin answers; otherwise 50 with the reason.
pub async fn status(env: &Env, conf: &NetConf, node: &Node) -> Result<()> {
    if let Some(sel) = &conf.nic {
        let host = Links::open()?;
        name_lost_unreadable(&host, &rdma_host_device_core::netns::Netns::current()?).await?;
        let store = Store::new(&node.state_dir);
        match select::resolve(sel, &host, &store).await {
            // A NIC back from a dead pod is ready once it has its own name again.
            Ok(r) => {
                let records = &r.records;
                select::admit(node, &host, &r, records)
                    .await
                    .map_err(|e| Error::new(Code::NotAvailable, format!("not ready: {}", e.msg)))?;
                if let Some(tag) = &r.lost {
                    give_back_lost(&host, &r.link, tag, records, "STATUS").await?;
                }
                if let Some(why) = super::rdma::not_ready_on_host(conf, &r.link)? {
                    return Err(Error::new(
                        Code::NotAvailable,
                        format!("not ready: {why}; ADD would fail verifying RDMA (113)"),
                    ));
                }
            }
            Err(e) if e.code == Code::DeviceBusy => {
                log::info!("STATUS: {sel} is in use by a pod: {}", e.msg)
            }
            Err(e) => {
                return Err(Error::new(
                    Code::NotAvailable,
                    format!("not ready: {}", e.msg),
                ));
            }
        }
    }
    if let Some(t) = &conf.ipam_type {
        let ipam = Ipam::new(t, env, node)
            .map_err(|e| Error::new(Code::NotAvailable, format!("not ready: {}", e.msg)))?;
        ipam.optional("STATUS", &conf.raw)
            .map_err(|e| Error::new(Code::NotAvailable, format!("not ready: {}", e.msg)))?;
    }
    Ok(())
}
