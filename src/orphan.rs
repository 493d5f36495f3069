//! Network namespaces that outlive their path: the runtime unmounted a pod's netns (or never
//! had a path for it), but a process still in it keeps it, and whatever NIC it holds, alive.
//! Such a namespace is reachable only through a holder's `/proc/PID/ns/net`; DEL looks there
//! before it believes a NIC is gone.

use crate::netns::Netns;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How many holders a message names at most.
const NAMED_HOLDERS: usize = 5;

/// A living network namespace other than the host's, and processes in it.
pub struct Living {
    pub ns: Netns,
    /// (pid, comm) of processes in it, by pid.
    pub holders: Vec<(u32, String)>,
}

impl Living {
    /// "pid 4242 (sleep), pid 4250 (python3)" for messages.
    pub fn describe_holders(&self) -> String {
        let mut s: Vec<String> = self
            .holders
            .iter()
            .take(NAMED_HOLDERS)
            .map(|(pid, comm)| format!("pid {pid} ({comm})"))
            .collect();
        if self.holders.len() > NAMED_HOLDERS {
            s.push(format!("and {} more", self.holders.len() - NAMED_HOLDERS));
        }
        s.join(", ")
    }
}

/// Every network namespace some process on the node is in, but the host's own (the plugin's,
/// or pid 1's), each once. Namespaces the plugin may not open are skipped.
pub fn living_netns() -> Vec<Living> {
    let mut by_inode: HashMap<(u64, u64), Living> = HashMap::new();
    let mut hosts: HashSet<(u64, u64)> = HashSet::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let path = format!("/proc/{pid}/ns/net");
        // stat follows the magic link to the namespace's nsfs inode: cheap, and enough to
        // tell namespaces apart before opening one.
        let Ok(md) = std::fs::metadata(&path) else {
            continue;
        };
        let key = (md.dev(), md.ino());
        if hosts.contains(&key) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim_end().to_string())
            .unwrap_or_default();
        if let Some(l) = by_inode.get_mut(&key) {
            l.holders.push((pid, comm));
            continue;
        }
        let Ok(ns) = Netns::open(Path::new(&path)) else {
            continue;
        };
        if ns.is_the_hosts() {
            // Remembered, so that its other processes skip the open.
            hosts.insert(key);
            continue;
        }
        by_inode.insert(
            key,
            Living {
                ns,
                holders: vec![(pid, comm)],
            },
        );
    }
    let mut all: Vec<Living> = by_inode.into_values().collect();
    for l in &mut all {
        l.holders.sort();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_own_namespace_is_not_listed() {
        for l in living_netns() {
            assert!(!l.ns.is_the_hosts());
            assert!(!l.holders.is_empty());
        }
    }

    #[test]
    fn holders_are_named_briefly() {
        let l = Living {
            ns: Netns::current().unwrap(),
            holders: (1..=7).map(|p| (p, format!("p{p}"))).collect(),
        };
        let d = l.describe_holders();
        assert!(d.starts_with("pid 1 (p1), pid 2 (p2)"), "{d}");
        assert!(d.ends_with("and 2 more"), "{d}");
    }
}
