//! Who uses an RDMA device: the processes holding verbs contexts open on it (RDMA netlink's
//! resource tracking), by pid and command, for the messages that refuse to take or delete it.

use crate::error::Result;
use crate::rdma::netlink::{RdmaDevice, RdmaSocket};
use crate::rdma::pair::rdma_error;

/// The processes (pid, command) holding a verbs context open on `dev`, seen from `sock`'s
/// netns, sorted and without repeats. Empty when the kernel cannot say (before 5.9): logged.
pub fn holders(sock: &mut RdmaSocket, dev: &RdmaDevice) -> Result<Vec<(u32, String)>> {
    match sock.users(dev.index) {
        Ok(users) => {
            let mut pids: Vec<(u32, String)> = users
                .iter()
                .filter_map(|u| u.pid)
                .map(|pid| (pid, crate::process::comm(pid)))
                .collect();
            pids.sort();
            pids.dedup();
            Ok(pids)
        }
        Err(e) if matches!(e.errno(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
            log::warn!(
                "cannot list the users of RDMA device {} ({e}; kernels before 5.9 cannot say)",
                dev.name
            );
            Ok(Vec::new())
        }
        Err(e) => Err(rdma_error(
            format!("listing the users of RDMA device {}", dev.name),
            e,
        )),
    }
}
