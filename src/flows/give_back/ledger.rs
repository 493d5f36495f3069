//! ADD's ledger: every step that changes the node first writes down what it takes; if ADD
//! fails, everything written is given back, newest first. Giving the NIC back is this
//! module's parent's (`give_back_nic`), shared with DEL and GC.

use super::{Places, give_back_nic};
use crate::ipam::Ipam;
use rdma_host_device_core::error::Result;
use rdma_host_device_core::fault;
use rdma_host_device_core::state::{Record, Store};

/// One thing ADD took, and so one thing to give back.
#[derive(Debug)]
pub enum Taken {
    /// The state file written before the first change: removed.
    StateFile {
        container_id: String,
        ifname: String,
    },
    /// An RDMA device moved into the pod (when the NIC never followed it): sent home.
    RdmaDevice { device: String },
    /// The NIC: home under its original name, MTU and alias; first the software RDMA device
    /// made for it deleted and a moved RDMA device sent home.
    Nic { record: Box<Record> },
    /// What IPAM handed out: released.
    Lease,
    /// The device-info file ADD wrote: removed.
    DeviceInfo { path: std::path::PathBuf },
    /// ADD's part of a DRA claim's device metadata: taken out.
    Metadata {
        files: Box<rdma_host_device_core::dra::metadata::Files>,
        pool: String,
        device: String,
    },
    /// ADD's part of the device plugin's env spec of the NIC: back to generation 1.
    NicEnv {
        env: crate::flows::metadata::NicEnv,
        rdma: Option<String>,
    },
}

#[derive(Default)]
pub struct Ledger {
    taken: Vec<Taken>,
}

impl Ledger {
    /// Write down what the next step takes, before it acts.
    pub fn took(&mut self, t: Taken) {
        self.taken.push(t);
    }

    /// The NIC arrived and the record learnt more (its index in the pod): give back from that.
    pub fn update_record(&mut self, r: &Record) {
        for t in &mut self.taken {
            if let Taken::Nic { record } = t {
                **record = r.clone();
            }
        }
    }

    /// ADD succeeded: the pod keeps everything; nothing to give back.
    pub fn settle(&mut self) {
        self.taken.clear();
    }

    /// ADD failed: give back everything, newest first; keep going past failures and log them.
    /// If one fails, the state file stays: DEL needs what it says (the RDMA device, a
    /// software device, the original alias) to finish the job.
    pub async fn give_back(&mut self, places: &Places<'_>) {
        let mut failed = false;
        while let Some(t) = self.taken.pop() {
            if failed && matches!(t, Taken::StateFile { .. }) {
                log::warn!(
                    "keeping the state file: giving something back failed; DEL will finish it"
                );
                continue;
            }
            if let Err(e) = fault::hit("add:give-back") {
                log::error!("giving back {t:?} skipped: {e}");
                failed = true;
                continue;
            }
            log::info!("giving back: {t:?}");
            if let Err(e) = give_back_one(&t, places).await {
                log::error!("giving back {t:?} failed: {e}");
                failed = true;
            }
        }
    }
}

async fn give_back_one(t: &Taken, places: &Places<'_>) -> Result<()> {
    match t {
        Taken::StateFile {
            container_id,
            ifname,
        } => Store::new(&places.node.state_dir).remove(container_id, ifname),
        Taken::RdmaDevice { device } => match places.pod_ns {
            Some(pod_ns) => super::rdma::give_back_device(device, pod_ns, places.host_ns),
            None => Ok(()),
        },
        Taken::Nic { record } => give_back_nic(places, Some(record)).await.map(drop),
        Taken::Lease => match &places.conf.ipam_type {
            Some(t) => Ipam::new(t, places.env, places.node)?.del(&places.conf.raw),
            None => Ok(()),
        },
        Taken::DeviceInfo { path } => rdma_host_device_core::device_info::remove(path),
        Taken::Metadata {
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
        Taken::NicEnv { env, rdma } => {
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
