//! Network namespaces that outlive their path: the runtime unmounted a pod's netns (or never
//! had a path for it), but a process still in it keeps it, and whatever NIC it holds, alive.
//! Such a namespace is reachable only through a holder's `/proc/PID/ns/net`
//! ([`rdma_host_device_core::netns::others_on_node`] finds it); DEL looks there before it believes a NIC is
//! gone, and names the processes that keep it.

use rdma_host_device_core::netns::Netns;
use std::os::unix::fs::MetadataExt;

/// The processes in network namespace `ns` (pid, comm), by pid.
pub(crate) fn holders(ns: &Netns) -> Vec<(u32, String)> {
    let Ok(me) = std::fs::metadata(ns.path()) else {
        return Vec::new();
    };
    rdma_host_device_core::process::pids()
        .into_iter()
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
        })
        .map(|pid| (pid, rdma_host_device_core::process::comm(pid)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processes_of_a_namespace_are_its_holders() {
        let me = Netns::open(std::path::Path::new("/proc/self/ns/net")).unwrap();
        let h = holders(&me);
        assert!(h.iter().any(|(pid, _)| *pid == std::process::id()), "{h:?}");
    }
}
