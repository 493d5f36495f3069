//! STATUS: ready when the configured NIC can be attached (or already is, to a pod) and the IPAM
//! plugin is there and ready.

use crate::cni::env::Env;
use crate::cni::netconf::NetConf;
use crate::error::{Code, Error, Result};
use crate::ipam::Ipam;
use crate::link::Links;
use crate::select;
use crate::state::Store;

pub async fn status(env: &Env, conf: &NetConf) -> Result<()> {
    if let Some(sel) = &conf.selector {
        let host = Links::open()?;
        let records = Store::new(&conf.state_dir).all()?;
        match select::resolve(sel, &host, &records).await {
            Ok(_) => {}
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
        let ipam = Ipam::new(t, env)
            .map_err(|e| Error::new(Code::NotAvailable, format!("not ready: {}", e.msg)))?;
        ipam.optional("STATUS", &conf.raw)?;
    }
    Ok(())
}
