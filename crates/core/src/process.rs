//! Processes as messages name them: every pid in `/proc`, a pid's command name, and a short
//! list of "pid N (comm)" for errors that say who holds something (a netns, an RDMA device).
//! Pids are the plugin's pid namespace's: the host's, where runtimes run CNI plugins.

/// How many processes a message names at most.
const NAMED: usize = 5;

/// Every process's pid (`/proc/PID`), in ascending order; empty when /proc is unreadable.
pub fn pids() -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

/// A process's command name (`/proc/PID/comm`), empty when it is gone or unreadable.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// "pid 4242 (sleep), pid 4250 (python3)" for messages, at most [`NAMED`] of them.
pub fn describe(processes: &[(u32, String)]) -> String {
    let mut s: Vec<String> = processes
        .iter()
        .take(NAMED)
        .map(|(pid, comm)| format!("pid {pid} ({comm})"))
        .collect();
    if processes.len() > NAMED {
        s.push(format!("and {} more", processes.len() - NAMED));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_named_briefly() {
        let h: Vec<(u32, String)> = (1..=7).map(|p| (p, format!("p{p}"))).collect();
        let d = describe(&h);
        assert!(d.starts_with("pid 1 (p1), pid 2 (p2)"), "{d}");
        assert!(d.ends_with("and 2 more"), "{d}");
        assert_eq!(describe(&h[..1]), "pid 1 (p1)");
    }

    #[test]
    fn a_live_process_has_its_command_name() {
        let me = comm(std::process::id());
        assert!(!me.is_empty() && !me.ends_with('\n'), "{me:?}");
    }
}
