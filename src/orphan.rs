//! Network namespaces that outlive their path: the runtime unmounted a pod's netns (or never
//! had a path for it), but a process still in it keeps it, and whatever NIC it holds, alive.
//! Such a namespace is reachable only through a holder's `/proc/PID/ns/net`
//! ([`crate::netns::others_on_node`] finds it); DEL looks there before it believes a NIC is
//! gone, and names the processes that keep it.

use crate::netns::Netns;
use std::os::unix::fs::MetadataExt;

/// How many holders a message names at most.
const NAMED_HOLDERS: usize = 5;

/// The processes in network namespace `ns` (pid, comm), by pid.
pub fn holders(ns: &Netns) -> Vec<(u32, String)> {
    let Ok(me) = std::fs::metadata(ns.path()) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
        })
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, comm.trim_end().to_string())
        })
        .collect()
}

/// "pid 4242 (sleep), pid 4250 (python3)" for messages, at most [`NAMED_HOLDERS`] of them.
pub fn describe(holders: &[(u32, String)]) -> String {
    let mut s: Vec<String> = holders
        .iter()
        .take(NAMED_HOLDERS)
        .map(|(pid, comm)| format!("pid {pid} ({comm})"))
        .collect();
    if holders.len() > NAMED_HOLDERS {
        s.push(format!("and {} more", holders.len() - NAMED_HOLDERS));
    }
    s.join(", ")
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

    #[test]
    fn holders_are_named_briefly() {
        let h: Vec<(u32, String)> = (1..=7).map(|p| (p, format!("p{p}"))).collect();
        let d = describe(&h);
        assert!(d.starts_with("pid 1 (p1), pid 2 (p2)"), "{d}");
        assert!(d.ends_with("and 2 more"), "{d}");
        assert_eq!(describe(&h[..1]), "pid 1 (p1)");
    }
}
