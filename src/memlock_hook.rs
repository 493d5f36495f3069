//! `rdma-host-device memlock-hook LIMIT`: the OCI `createRuntime` hook the CDI spec names
//! (the agent's `cdi` writes the spec, see its module): it raises the container's
//! RLIMIT_MEMLOCK, as memory registration pins pages and containerd's default 8 MiB makes
//! `ibv_reg_mr` fail. The runtime execs the plugin's binary for it, so it lives with the plugin.
//! The hook's input is the runtime's OCI state on stdin (a pid), read within a bound.

use rdma_host_device_core::error::{Code, Error, Result, invalid_config};
use rdma_host_device_core::node::{DEFAULT_CDI_SPEC, FAIL_CLOSED_ARG, Memlock};
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// The most of the OCI state read from stdin.
const MAX_STATE: u64 = 1 << 20;

/// What the CDI spec asks of the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookOptions {
    /// The limit the hook sets.
    pub limit: Memlock,
    /// Refuse a container whose OCI spec does not already give it `limit` (node.json
    /// `memlockFailClosed`): the NRI plugin puts it there, for every process of the container.
    pub fail_closed: bool,
}

/// `memlock-hook BYTES|unlimited [--fail-closed]`.
pub fn hook_options(args: &[String]) -> Result<HookOptions> {
    let (limit, fail_closed) = match args {
        [limit] => (limit, false),
        [limit, flag] if flag == FAIL_CLOSED_ARG => (limit, true),
        [] => {
            return Err(invalid_config(
                "memlock-hook needs a LIMIT (bytes or unlimited)",
            ));
        }
        [_, extra, ..] => {
            return Err(invalid_config(format!(
                "memlock-hook takes a LIMIT and optionally {FAIL_CLOSED_ARG}, not also {extra:?}"
            )));
        }
    };
    Ok(HookOptions {
        limit: Memlock::parse(limit).map_err(|e| e.context("memlock-hook"))?,
        fail_closed,
    })
}

/// `memlock-hook`: as the runtime runs it, with the container's OCI state on stdin.
pub fn run_hook(o: &HookOptions) -> Result<()> {
    memlock_hook(o, &mut std::io::stdin())
}

/// The container's RLIMIT_MEMLOCK as its OCI spec (`process.rlimits`) gives it, soft and hard;
/// `None` when the spec gives none (the runtime's default then: containerd's 8 MiB).
pub fn spec_memlock(config: &Value) -> Option<(u64, u64)> {
    config["process"]["rlimits"]
        .as_array()?
        .iter()
        .find(|r| r["type"].as_str() == Some("RLIMIT_MEMLOCK"))
        .and_then(|r| Some((r["soft"].as_u64()?, r["hard"].as_u64()?)))
}

/// Why a container whose OCI spec is `config` must not start under `memlockFailClosed`, if so:
/// its spec does not give every process of it at least `limit`.
pub fn fail_closed_refusal(config: &Value, limit: Memlock) -> Option<String> {
    let want = limit.as_rlim();
    let has = spec_memlock(config);
    if has.is_some_and(|(soft, hard)| soft >= want && hard >= want) {
        return None;
    }
    let has = match has {
        None => "none, so the runtime's default".to_string(),
        Some((soft, hard)) => format!("soft {soft}, hard {hard}"),
    };
    Some(format!(
        "its OCI spec gives it no RLIMIT_MEMLOCK of {} ({has}): the node's NRI plugin (rdma-host-device-agent nri), which puts it there for every process of the container, did not see this container (restarting, being upgraded, or not running); refusing to start it rather than let processes exec'd into it run without the node's memlock (node.json memlockFailClosed); the runtime retries, and it starts once the NRI plugin is back",
        limit.as_arg()
    ))
}

/// The OCI hook: the container's process (the `pid` of the runtime's state on stdin) gets
/// RLIMIT_MEMLOCK `limit` (soft and hard) before it starts; its program inherits it.
///
/// Only that container's: the state must be of a container being created (the hook is a
/// `createRuntime` hook) and its pid a process in that container's namespaces as its bundle's
/// `config.json` gives them (`namespace_mismatch`), held by a pidfd from before the check until
/// after the limit is set, so a pid the process left and another took is never acted on.
pub fn memlock_hook(o: &HookOptions, state: &mut dyn Read) -> Result<()> {
    let limit = o.limit;
    let mut body = Vec::new();
    state
        .take(MAX_STATE)
        .read_to_end(&mut body)
        .map_err(|e| Error::new(Code::Io, format!("reading the OCI state: {e}")))?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        Error::new(
            Code::Decode,
            format!("the OCI state on stdin is not JSON: {e}"),
        )
    })?;
    let pid = v["pid"]
        .as_i64()
        .filter(|&p| p > 0 && p <= i64::from(i32::MAX))
        .ok_or_else(|| Error::new(Code::Decode, "the OCI state has no pid"))?
        as libc::pid_t;
    let id = rdma_host_device_core::logging::shown(v["id"].as_str().unwrap_or("(no id)"));
    let refuse = |why: String| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "not setting RLIMIT_MEMLOCK of pid {pid} for container {id}: {why}; the hook acts only on the container the runtime runs it for (a createRuntime hook, CDI spec {DEFAULT_CDI_SPEC})"
            ),
        )
    };
    match v["status"].as_str() {
        Some("creating" | "created") => {}
        Some(other) => {
            return Err(refuse(format!(
                "the state's status is {}, not creating or created",
                rdma_host_device_core::logging::shown(other)
            )));
        }
        None => return Err(refuse("the state has no status".into())),
    }
    let bundle = v["bundle"]
        .as_str()
        .map(Path::new)
        .filter(|b| b.is_absolute())
        .ok_or_else(|| refuse("the state has no absolute bundle path".into()))?;
    let config_path = bundle.join("config.json");
    let config: Value = rdma_host_device_core::files::read_regular(&config_path, MAX_CONFIG)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            refuse(format!(
                "cannot read the bundle's {}: {e}",
                rdma_host_device_core::logging::shown(config_path.as_os_str().as_encoded_bytes())
            ))
        })?;
    if o.fail_closed
        && let Some(why) = fail_closed_refusal(&config, limit)
    {
        return Err(Error::new(
            Code::NotAllowed,
            format!("refusing container {id}: {why}"),
        ));
    }
    let pidfd = Pidfd::open(pid).map_err(|e| refuse(format!("no such process: {e}")))?;
    if let Some(why) = namespace_mismatch(pid, &config) {
        return Err(refuse(why));
    }
    let lim = libc::rlimit {
        rlim_cur: limit.as_rlim(),
        rlim_max: limit.as_rlim(),
    };
    // SAFETY: prlimit with a valid rlimit struct and no old-limit pointer.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_MEMLOCK, &lim, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(Error::new(
            Code::Io,
            format!(
                "setting RLIMIT_MEMLOCK of pid {pid} to {}: {}",
                limit.as_arg(),
                std::io::Error::last_os_error()
            ),
        ));
    }
    if !pidfd.alive() {
        return Err(refuse(
            "the process exited while the hook ran (its pid may be another's now)".into(),
        ));
    }
    Ok(())
}

/// The most of a bundle's config.json read (Kubernetes' are tens of KiB).
const MAX_CONFIG: u64 = 16 << 20;

/// The namespaces a container's init is in once the runtime has created it (when
/// `createRuntime` hooks run), by OCI type and /proc/PID/ns name. The user, cgroup and time
/// namespaces are left out: some runtimes enter them later, and they say nothing the others
/// do not.
const NAMESPACES: [(&str, &str); 5] = [
    ("mount", "mnt"),
    ("pid", "pid"),
    ("network", "net"),
    ("ipc", "ipc"),
    ("uts", "uts"),
];

/// Why `pid` is not the init of the container `config` (its bundle's config.json) describes,
/// if it is not: for each namespace type, one the config names by path must be that one; one
/// it asks for without a path must be another than the hook's own (the runtime's); one it
/// leaves out must be the runtime's. A new PID namespace's init is its pid 1.
pub fn namespace_mismatch(pid: libc::pid_t, config: &Value) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let listed = config["linux"]["namespaces"].as_array();
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    for (oci, proc_name) in NAMESPACES {
        let theirs = match id(Path::new(&format!("/proc/{pid}/ns/{proc_name}"))) {
            Ok(i) => i,
            Err(e) => return Some(format!("cannot read its {oci} namespace: {e}")),
        };
        let own = match id(Path::new(&format!("/proc/self/ns/{proc_name}"))) {
            Ok(i) => i,
            Err(e) => return Some(format!("cannot read the hook's own {oci} namespace: {e}")),
        };
        let entry = listed
            .into_iter()
            .flatten()
            .find(|n| n["type"].as_str() == Some(oci));
        match entry.map(|n| n["path"].as_str().filter(|p| !p.is_empty())) {
            None if theirs != own => {
                return Some(format!(
                    "its {oci} namespace is not the runtime's, which the bundle's config gives the container"
                ));
            }
            None => {}
            Some(None) if theirs == own => {
                return Some(format!(
                    "it is in the runtime's own {oci} namespace, and the bundle's config gives the container a new one"
                ));
            }
            Some(None) => {}
            Some(Some(path)) => match id(Path::new(path)) {
                Ok(want) if want == theirs => {}
                Ok(_) => {
                    return Some(format!(
                        "its {oci} namespace is not {}, the container's in the bundle's config",
                        rdma_host_device_core::logging::shown(path)
                    ));
                }
                Err(e) => {
                    return Some(format!(
                        "cannot read the container's {oci} namespace {}: {e}",
                        rdma_host_device_core::logging::shown(path)
                    ));
                }
            },
        }
        if oci == "pid" && matches!(entry.map(|n| n["path"].as_str()), Some(None | Some(""))) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let in_ns = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_whitespace().last());
            if in_ns != Some("1") {
                return Some(
                    "it is not pid 1 of the new PID namespace the bundle's config gives the container"
                        .into(),
                );
            }
        }
    }
    None
}

/// A pidfd (pidfd_open(2)): what says a pid is still the process it was when opened. Without
/// pidfds (kernels before 5.3), the pid alone.
struct Pidfd(Option<std::os::fd::OwnedFd>);

impl Pidfd {
    fn open(pid: libc::pid_t) -> std::io::Result<Pidfd> {
        use std::os::fd::FromRawFd;
        let no_flags: libc::c_long = 0;
        // SAFETY: pidfd_open(2) with a pid and no flags; the fd is owned at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::c_long::from(pid), no_flags) };
        if fd >= 0 {
            // SAFETY: a new descriptor no one else owns.
            return Ok(Pidfd(Some(unsafe {
                std::os::fd::OwnedFd::from_raw_fd(fd as i32)
            })));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return Ok(Pidfd(None));
        }
        Err(e)
    }

    /// Whether the process has not been reaped (a pid is never reused before).
    fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.0 else {
            return true;
        };
        let (no_signal, no_flags): (libc::c_long, libc::c_long) = (0, 0);
        // SAFETY: pidfd_send_signal(2) of signal 0 (no signal, a check) on a pidfd we own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                libc::c_long::from(fd.as_raw_fd()),
                no_signal,
                std::ptr::null::<libc::siginfo_t>(),
                no_flags,
            )
        };
        rc == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_refuses_a_state_without_a_pid() {
        let o = HookOptions {
            limit: Memlock::Unlimited,
            fail_closed: false,
        };
        for bad in [&b"{}"[..], b"not json", br#"{"pid": 0}"#, br#"{"pid": -5}"#] {
            assert!(memlock_hook(&o, &mut &bad[..]).is_err());
        }
    }

    #[test]
    fn the_options_are_a_limit_and_optionally_fail_closed() {
        let args = |a: &[&str]| hook_options(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            args(&["unlimited"]).unwrap(),
            HookOptions {
                limit: Memlock::Unlimited,
                fail_closed: false
            }
        );
        assert_eq!(
            args(&["1048576", "--fail-closed"]).unwrap(),
            HookOptions {
                limit: Memlock::Bytes(1 << 20),
                fail_closed: true
            }
        );
        for bad in [
            &[][..],
            &["unlimited", "--fail-open"],
            &["--fail-closed", "unlimited"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
    }

    /// What decides under `memlockFailClosed`: the container's OCI spec, as the NRI plugin
    /// (or anything else) left it, must give soft and hard at least the node's limit.
    #[test]
    fn fail_closed_wants_the_limit_in_the_spec_soft_and_hard() {
        let spec = |rlimits: Value| serde_json::json!({"process": {"rlimits": rlimits}});
        let memlock = |soft: u64, hard: u64| {
            spec(serde_json::json!([
                {"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 1024},
                {"type": "RLIMIT_MEMLOCK", "soft": soft, "hard": hard},
            ]))
        };
        let gb = Memlock::Bytes(1 << 30);
        // What the NRI plugin writes for `unlimited`: RLIM_INFINITY.
        assert_eq!(
            fail_closed_refusal(&memlock(u64::MAX, u64::MAX), Memlock::Unlimited),
            None
        );
        assert_eq!(fail_closed_refusal(&memlock(1 << 30, 1 << 31), gb), None);
        // The runtime's default (no entry), a lower soft or hard, no process at all: refused.
        let none = fail_closed_refusal(&spec(serde_json::json!([])), gb).unwrap();
        assert!(none.contains("none, so the runtime's default"), "{none}");
        assert!(none.contains("memlockFailClosed"), "{none}");
        let low = fail_closed_refusal(&memlock(8 << 20, 8 << 20), gb).unwrap();
        assert!(low.contains("soft 8388608, hard 8388608"), "{low}");
        assert!(fail_closed_refusal(&memlock(1 << 30, 8 << 20), gb).is_some());
        assert!(fail_closed_refusal(&memlock(1 << 30, 1 << 30), Memlock::Unlimited).is_some());
        assert!(fail_closed_refusal(&serde_json::json!({}), gb).is_some());
        // A hostile spec's odd types are no limit.
        let odd = spec(serde_json::json!([{"type": "RLIMIT_MEMLOCK", "soft": "max", "hard": -1}]));
        assert!(fail_closed_refusal(&odd, gb).is_some());
    }
}
