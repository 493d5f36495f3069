//! The container runtimes on this node and the RLIMIT_MEMLOCK their containers inherit: where
//! a runtime reads no CDI (containerd 1.6), nothing else raises it, and `ibv_reg_mr` beyond it
//! fails for a non-root process (NCCL then falls back to TCP without a word). Read from
//! `/proc/<pid>/limits` of every process whose name is a runtime's.

use super::report::RuntimeMemlock;
use std::path::Path;

/// The process names of the runtimes whose children are containers.
const RUNTIMES: &[&str] = &["containerd", "crio", "dockerd"];
/// Below this, RDMA memory registration of a real workload fails (NCCL registers GiBs).
const ENOUGH: u64 = 1 << 30;

/// Every runtime process found under `proc`, with its memlock limit and what to do about it.
pub fn runtimes(proc: &Path) -> Vec<RuntimeMemlock> {
    let mut out = Vec::new();
    for pid in crate::sysfs::list_dir(proc)
        .into_iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
    {
        let dir = proc.join(&pid);
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        if !RUNTIMES.contains(&comm) {
            continue;
        }
        let Some(soft) = std::fs::read_to_string(dir.join("limits"))
            .ok()
            .and_then(|l| memlock_soft(&l))
        else {
            continue;
        };
        out.push(RuntimeMemlock {
            runtime: comm.to_owned(),
            pid: pid.parse().unwrap_or(0),
            memlock_bytes: soft,
            advice: advice(comm, soft),
        });
    }
    out.sort_by_key(|r| r.pid);
    out
}

/// The soft "Max locked memory" of a `/proc/<pid>/limits` text: `None` if absent, `u64::MAX`
/// for unlimited.
pub fn memlock_soft(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(u64::MAX)
    } else {
        soft.parse().ok()
    }
}

fn advice(runtime: &str, soft: u64) -> Option<String> {
    (soft < ENOUGH).then(|| {
        format!(
            "containers of {runtime} inherit RLIMIT_MEMLOCK {}: RDMA memory registration beyond it fails for non-root processes (NCCL falls back to TCP). Raise it: `systemctl edit {runtime}` with [Service] LimitMEMLOCK=infinity, then restart {runtime}; or, with a runtime that reads CDI, `rdma-host-device-agent cdi` (its hook sets the node's memlock per container)",
            human(soft)
        )
    })
}

fn human(bytes: u64) -> String {
    match bytes {
        u64::MAX => "unlimited".into(),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max locked memory         8388608              8388608              bytes     
Max address space         unlimited            unlimited            bytes     
";

    #[test]
    fn the_soft_memlock_limit_is_read_and_a_small_one_gets_advice() {
        assert_eq!(memlock_soft(LIMITS), Some(8 << 20));
        let unlimited = LIMITS.replace(
            "8388608              8388608",
            "unlimited            unlimited",
        );
        assert_eq!(memlock_soft(&unlimited), Some(u64::MAX));
        assert_eq!(memlock_soft("nothing here"), None);
        let a = advice("containerd", 8 << 20).unwrap();
        assert!(
            a.contains("8 MiB") && a.contains("LimitMEMLOCK=infinity"),
            "{a}"
        );
        assert_eq!(advice("crio", u64::MAX), None);
    }
}
