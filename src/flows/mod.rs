//! The CNI verbs as flows of named steps. `run` picks the flow; each flow file reads top to
//! bottom like the story it tells.

mod add;
mod address;
mod check;
mod del;
mod gc;
mod give_back;
mod metadata;
mod plan;
mod rdma;
mod status;

pub use give_back::orphaned_nic;

use crate::cni::env::{Command, Env};
use crate::cni::netconf::NetConf;
use crate::cni::result::CniResult;
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::node::Node;

/// What a verb prints on success.
pub enum Output {
    Result(CniResult),
    Nothing,
}

/// The node agent's GC (no runtime calls GC on containerd): release exactly the attachments of
/// `conf`'s network named in `leaked`, every other record counting as valid (`gc::collect`), on
/// a current-thread runtime like [`run`]. Call it on a thread of its own: a step may leave the
/// thread in a pod's network namespace.
pub fn collect_leaked(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    leaked: &[crate::cni::netconf::ValidAttachment],
) -> Result<()> {
    let rt = runtime()?;
    rt.block_on(gc::collect(env, conf, node, leaked))
}

/// The plugin's runtime: one thread (setns is per thread) and I/O only (rtnetlink's socket;
/// nothing in a plugin call waits on Tokio's clock).
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| Error::new(Code::Io, format!("cannot start the async runtime: {e}")))
}

/// Run one verb to completion on a current-thread runtime (setns is per thread, and one
/// thread is all a plugin call needs).
pub fn run(env: &Env, conf: &NetConf, node: &Node) -> Result<Output> {
    let rt = runtime()?;
    rt.block_on(async {
        match env.command {
            Command::Add => add::add(env, conf, node).await.map(Output::Result),
            Command::Del => del::del(env, conf, node).await.map(|()| Output::Nothing),
            Command::Check => check::check(env, conf, node)
                .await
                .map(|()| Output::Nothing),
            Command::Status => status::status(env, conf, node)
                .await
                .map(|()| Output::Nothing),
            Command::Gc => gc::gc(env, conf, node).await.map(|()| Output::Nothing),
            Command::Version => Ok(Output::Nothing),
        }
    })
}
