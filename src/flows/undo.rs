//! The undo stack of ADD: every step that changes the node pushes how to take itself back; a
//! failure runs them in reverse. Giving the NIC back is give_back/'s (`return_nic`), shared
//! with DEL.

use super::give_back::{Places, return_nic};
use crate::ipam::Ipam;
use rdma_host_device_core::error::Result;
use rdma_host_device_core::fault;
use rdma_host_device_core::state::{Record, Store};

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
    /// Remove the device-info file ADD wrote.
    RemoveDeviceInfo { path: std::path::PathBuf },
    /// Take ADD's part out of a DRA claim's device metadata.
    ResetMetadata {
        files: Box<rdma_host_device_core::dra::metadata::Files>,
        pool: String,
        device: String,
    },
    /// Put the device plugin's env spec of the NIC back to generation 1.
    ResetNicEnv {
        env: super::plan::NicEnv,
        rdma: Option<String>,
    },
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
    pub async fn unwind(&mut self, places: &Places<'_>) {
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
            if let Err(e) = apply(&step, places).await {
                log::error!("undo {step:?} failed: {e}");
                failed = true;
            }
        }
    }
}

async fn apply(step: &Undo, places: &Places<'_>) -> Result<()> {
    match step {
        Undo::ForgetState {
            container_id,
            ifname,
        } => Store::new(&places.node.state_dir).remove(container_id, ifname),
        Undo::ReturnRdma { device } => match places.pod_ns {
            Some(pod_ns) => super::give_back::rdma::return_device(device, pod_ns, places.host_ns),
            None => Ok(()),
        },
        Undo::ReturnNic { record } => return_nic(places, Some(record)).await.map(drop),
        Undo::ReleaseIpam => match &places.conf.ipam_type {
            Some(t) => Ipam::new(t, places.env, places.node)?.del(&places.conf.raw),
            None => Ok(()),
        },
        Undo::RemoveDeviceInfo { path } => rdma_host_device_core::device_info::remove(path),
        Undo::ResetMetadata {
            files,
            pool,
            device,
        } => rdma_host_device_core::dra::metadata::update_device(files, pool, device, None)
            .map(drop)
            .map_err(|e| {
                rdma_host_device_core::error::io_error("resetting the device metadata", e)
            }),
        // Lenient like DEL's: a spec that cannot be put back (ADD failed because it could not
        // read it) is no reason to keep the record; the NIC is home either way.
        Undo::ResetNicEnv { env, rdma } => {
            if let Err(e) =
                rdma_host_device_core::nic_env::update(&env.place, &env.id, rdma.as_deref(), None)
            {
                log::warn!(
                    "env {}: not put back to generation 1: {e}",
                    rdma_host_device_core::nic_env::cdi_id(&env.id)
                );
            }
            Ok(())
        }
    }
}
