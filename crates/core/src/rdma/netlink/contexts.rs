//! The verbs contexts open on a device (`RDMA_NLDEV_CMD_RES_CTX_GET`, kernel 5.9 and later) and
//! who holds them: what `rdma/users.rs` asks before deleting a soft device, whose deletion
//! sleeps in the kernel until every holder closes its context.

use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};

use super::wire::{ReqAttr, attr, cmd, nested_entries, owned_entry};
use super::{RdmaNlError, RdmaSocket};

/// A verbs context a process holds open on an RDMA device (`RDMA_NLDEV_CMD_RES_CTX_GET`):
/// what `ibv_open_device` (and librdmacm, on every device it sees) creates. While one is open,
/// deleting a software device sleeps in the kernel until its process closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaUser {
    /// The context's number on its device.
    pub ctxn: Option<u32>,
    /// The owner's pid in the caller's pid namespace (the kernel hides contexts of processes
    /// outside it); None for a kernel user, which names its module instead.
    pub pid: Option<u32>,
    pub kernel_name: Option<String>,
}

impl RdmaSocket {
    /// The verbs contexts open on a device of this socket's netns, one per holder (a process
    /// may hold several). Kernels before 5.9 cannot say (EINVAL/EOPNOTSUPP from the kernel).
    pub fn users(&mut self, dev_index: u32) -> Result<Vec<RdmaUser>, RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        let bodies = self.request(
            "res ctx get",
            cmd::RES_CTX_GET,
            NLM_F_REQUEST | NLM_F_DUMP,
            &req,
        )?;
        users_from_bodies(&bodies)
    }
}

/// The contexts of a `RES_CTX_GET` dump: each message holds the device, then a `RES_CTX`
/// table of `RES_CTX_ENTRY` nests (a context's number and its owner's pid or module).
pub(super) fn users_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<RdmaUser>, RdmaNlError> {
    nested_entries(bodies, attr::RES_CTX, attr::RES_CTX_ENTRY, |entry| {
        let o = owned_entry(entry, attr::RES_CTXN)?;
        Ok(Some(RdmaUser {
            ctxn: o.number,
            pid: o.pid,
            kernel_name: o.kernel_name,
        }))
    })
}
