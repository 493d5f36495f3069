//! Fault injection at the step boundaries of the flows, for the crash-safety tests. Only debug
//! builds listen: a release build compiles every hook to nothing and ignores the environment.
//!
//! `RHD_FAULT=<point>:<action>[@<n>][,<point>:<action>[@<n>]...]`
//!
//! - `point`: a name passed to [`hit`], e.g. `add:after-nic-move` (see [`POINTS`]).
//! - `action`: `kill` (SIGKILL to ourselves: no undo, no output, like an OOM kill or a node
//!   crash), `error` (the step fails: the flow's own error path runs), `panic` (a bug: the panic
//!   hook prints error 999), `sleep=<ms>` (hold everything, e.g. a lock, for a while).
//! - `@n`: fire on the n-th time the point is reached in this process only (GC visits a point
//!   once per attachment); without it, every time.
//!
//! `RHD_LOCK_TIMEOUT_MS` (debug builds only) shortens the bounded lock wait of `lock.rs`.

#[cfg(not(debug_assertions))]
use crate::error::Result;

/// Every injection point, in the order a flow reaches them. Tests iterate over these.
#[allow(dead_code)]
pub(crate) const POINTS: &[&str] = &[
    // ADD
    "add:locked",
    // inside the state file's atomic write (ADD), between the temp file and its rename
    "state:before-rename",
    "add:after-state",
    "add:after-rdma-move",
    "add:after-nic-move",
    "add:after-soft-rdma",
    "add:after-ipam",
    "add:after-addresses",
    "add:before-result",
    // ADD rolling back: before each undo step
    "add:give-back",
    // DEL
    "del:locked",
    "del:after-ipam-release",
    "del:after-nic-return",
    // GC: before each stale attachment, before each lost NIC
    "gc:release",
    "gc:lost-nic",
];

/// Reached step boundary `point`: do what `RHD_FAULT` says for it, if anything.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn hit(_point: &str) -> Result<()> {
    Ok(())
}

/// A debug-only override of a tunable, read from the environment.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn debug_env_u64(_name: &str) -> Option<u64> {
    None
}

#[cfg(debug_assertions)]
pub use imp::{debug_env_u64, hit};

#[cfg(debug_assertions)]
mod imp {
    use crate::error::{Code, Error, Result};
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) enum Action {
        Kill,
        Error,
        Panic,
        Sleep(u64),
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) struct Fault {
        pub point: String,
        pub action: Action,
        pub nth: Option<u32>,
    }

    /// Parse the spec; malformed entries are reported on stderr and ignored.
    pub(super) fn parse(spec: &str) -> Vec<Fault> {
        spec.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                let f = parse_one(s);
                if f.is_none() {
                    eprintln!("rdma-host-device: ignoring malformed RHD_FAULT entry {s:?}");
                }
                f
            })
            .collect()
    }

    fn parse_one(s: &str) -> Option<Fault> {
        let (s, nth) = match s.rsplit_once('@') {
            Some((a, n)) => (a, Some(n.parse().ok()?)),
            None => (s, None),
        };
        let (point, action) = s.rsplit_once(':')?;
        let action = match action {
            "kill" => Action::Kill,
            "error" => Action::Error,
            "panic" => Action::Panic,
            a => Action::Sleep(a.strip_prefix("sleep=")?.parse().ok()?),
        };
        Some(Fault {
            point: point.to_string(),
            action,
            nth,
        })
    }

    fn faults() -> &'static [Fault] {
        static F: OnceLock<Vec<Fault>> = OnceLock::new();
        F.get_or_init(|| {
            std::env::var("RHD_FAULT")
                .map(|s| parse(&s))
                .unwrap_or_default()
        })
    }

    pub fn hit(point: &str) -> Result<()> {
        if faults().is_empty() {
            return Ok(());
        }
        static HITS: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
        let n = {
            let mut m = HITS
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let n = m.entry(point.to_string()).or_default();
            *n += 1;
            *n
        };
        for f in faults()
            .iter()
            .filter(|f| f.point == point && f.nth.is_none_or(|k| k == n))
        {
            log::warn!("RHD_FAULT: {:?} at {point} (hit {n})", f.action);
            match f.action {
                Action::Kill => {
                    // SAFETY: kill(2) on our own pid; SIGKILL cannot be caught.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                    // SIGKILL is delivered before kill(2) returns to a single-threaded caller;
                    // never carry on past a kill point regardless.
                    std::process::abort();
                }
                Action::Error => {
                    return Err(Error::new(
                        Code::Io,
                        format!("injected fault at {point} (RHD_FAULT)"),
                    ));
                }
                Action::Panic => panic!("injected panic at {point} (RHD_FAULT)"),
                Action::Sleep(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
            }
        }
        Ok(())
    }

    pub fn debug_env_u64(name: &str) -> Option<u64> {
        std::env::var(name).ok()?.parse().ok()
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::imp::{Action, Fault, parse};

    #[test]
    fn spec_parses() {
        let f = parse("add:after-state:kill, del:locked:error@2,gc:release:sleep=50,x:panic");
        assert_eq!(
            f,
            vec![
                Fault {
                    point: "add:after-state".into(),
                    action: Action::Kill,
                    nth: None
                },
                Fault {
                    point: "del:locked".into(),
                    action: Action::Error,
                    nth: Some(2)
                },
                Fault {
                    point: "gc:release".into(),
                    action: Action::Sleep(50),
                    nth: None
                },
                Fault {
                    point: "x".into(),
                    action: Action::Panic,
                    nth: None
                },
            ]
        );
    }

    #[test]
    fn malformed_entries_are_dropped() {
        assert!(parse("nocolon,a:explode,a:kill@x,a:sleep=zz").is_empty());
        assert!(parse("").is_empty());
    }

    #[test]
    fn every_point_is_hit_somewhere() {
        // A point named in POINTS but never passed to hit() would make a test pass vacuously.
        fn sources(dir: &std::path::Path, into: &mut String) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    sources(&p, into);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("fault.rs") {
                    into.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
                }
            }
        }
        // The points are hit in all three crates: the workspace's src/ and crates/.
        let mut src = String::new();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        sources(&root.join("src"), &mut src);
        sources(&root.join("crates"), &mut src);
        for p in super::POINTS {
            assert!(
                src.contains(&format!("fault::hit(\"{p}\")")),
                "{p} is never hit"
            );
        }
    }
}
