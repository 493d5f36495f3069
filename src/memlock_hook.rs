//! `rdma-host-device memlock-hook LIMIT`: the OCI `createRuntime` hook the CDI spec names
//! (the agent's `cdi` writes the spec, see its module): it raises the container's
//! RLIMIT_MEMLOCK, as memory registration pins pages and containerd's default 8 MiB makes
//! `ibv_reg_mr` fail. The runtime execs the plugin's binary for it, so it lives with the plugin.
//! The hook's input is the runtime's OCI state on stdin (a pid), read within a bound.

use rdma_host_device_core::error::{Code, Error, Result, invalid_config};
use rdma_host_device_core::node::{DEFAULT_CDI_SPEC, Memlock};
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// The most of the OCI state read from stdin.
const MAX_STATE: u64 = 1 << 20;

/// `memlock-hook BYTES|unlimited`: the limit the hook sets.
pub fn hook_options(args: &[String]) -> Result<Memlock> {
    match args {
        [limit] => Memlock::parse(limit).map_err(|e| e.context("memlock-hook")),
        [] => Err(invalid_config(
            "memlock-hook needs a LIMIT (bytes or unlimited)",
        )),
        [_, extra, ..] => Err(invalid_config(format!(
            "memlock-hook takes one LIMIT, not also {extra:?}"
        ))),
    }
}

/// `memlock-hook`: as the runtime runs it, with the container's OCI state on stdin.
pub fn run_hook(limit: &Memlock) -> Result<()> {
    memlock_hook(*limit, &mut std::io::stdin())
}

/// The OCI hook: the container's process (the `pid` of the runtime's state on stdin) gets
/// RLIMIT_MEMLOCK `limit` (soft and hard) before it starts; its program inherits it.
///
/// Only that container's: the state must be of a container being created (the hook is a
/// `createRuntime` hook) and its pid a process in that container's namespaces as its bundle's
/// `config.json` gives them (`namespace_mismatch`), held by a pidfd from before the check until
/// after the limit is set, so a pid the process left and another took is never acted on.
pub fn memlock_hook(limit: Memlock, state: &mut dyn Read) -> Result<()> {
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
        for bad in [&b"{}"[..], b"not json", br#"{"pid": 0}"#, br#"{"pid": -5}"#] {
            assert!(memlock_hook(Memlock::Unlimited, &mut &bad[..]).is_err());
        }
    }
}
