//! The plugin's own directories (`stateDir`, `logDir`, `deviceInfoDir`, the runtime
//! directory) and the path rules every setting that names a path obeys.

use super::{DEFAULT_LOG_DIR, DEFAULT_STATE_DIR};
use std::path::{Path, PathBuf};

/// Where the plugin keeps what it shares between calls on this node (version memos, the IPAM
/// working directory, node-wide locks): never IPAM's.
pub const RUN_DIR: &str = "/run/rdma-host-device";

/// Where CDI specs go unless the node says otherwise (both kubelet halves' `cdiDir`): the
/// directory containerd and CRI-O read, a tmpfs.
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// `p` with every symlink of its longest existing ancestor resolved (the file the kernel
/// would grant a rule on), the missing rest appended as written.
pub(super) fn real_path(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(mut r) = std::fs::canonicalize(&existing) {
            r.extend(rest.iter().rev());
            return r;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// A directory of the node's that the plugin or the agent writes files in (`cdiDir`,
/// `pluginDataDir`): absolute, without `..`, and one [`check_own_dir`] allows.
pub(super) fn check_node_dir(key: &str, dir: &Path) -> std::result::Result<(), String> {
    if !dir.is_absolute() || has_dotdot(dir) {
        return Err(format!(
            "{key} {} must be an absolute path without '..'",
            dir.display()
        ));
    }
    check_own_dir(key, dir)
}

pub(super) fn has_dotdot(p: &Path) -> bool {
    p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Whether `path` (absolute, without `..`) is one of `prefixes` or under one, by whole
/// components: `/etc/cnix` is not under `/etc/cni`.
pub fn path_under(prefixes: &[PathBuf], path: &Path) -> bool {
    path.is_absolute() && !has_dotdot(path) && prefixes.iter().any(|p| path.starts_with(p))
}

/// Directories the plugin's own state, logs and device-info files must not be: the plugin
/// creates, replaces and deletes files in them (DEL removes a device-info file it recorded;
/// with `deviceInfoDir: /etc` that reached any file in /etc).
const SYSTEM_DIRS: [&str; 22] = [
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/log",
    "/var/run",
];

/// Trees that hold the system's own files: none of the plugin's directories may be in one
/// (`/etc/cni/net.d` as a stateDir would have the plugin write and delete among CNI configs).
const SYSTEM_TREES: [&str; 8] = [
    "/etc", "/usr", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
];

/// Why `dir` cannot be one of the plugin's own directories (`stateDir`, `logDir`,
/// `deviceInfoDir`): a NUL byte (no path has one), a system directory itself, anything under
/// /proc, /sys or /dev, or inside a tree of the system's own files ([`SYSTEM_TREES`]).
pub(super) fn check_own_dir(key: &str, dir: &Path) -> std::result::Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    if dir.as_os_str().as_bytes().contains(&0) {
        return Err(format!("{key} {dir:?} contains a NUL byte"));
    }
    let norm: PathBuf = dir.components().collect();
    if SYSTEM_DIRS.iter().any(|d| norm == Path::new(d)) {
        return Err(format!(
            "{key} {} is a system directory; the plugin creates and deletes files there: give it a directory of its own (e.g. {})",
            dir.display(),
            match key {
                "stateDir" => DEFAULT_STATE_DIR,
                "logDir" => DEFAULT_LOG_DIR,
                _ => "/var/run/k8s.cni.cncf.io/devinfo/cni",
            }
        ));
    }
    if let Some(tree) = SYSTEM_TREES.iter().find(|d| norm.starts_with(d)) {
        return Err(format!(
            "{key} {} is inside {tree}, which holds the system's own files; the plugin creates and deletes files there: give it a directory of its own",
            dir.display()
        ));
    }
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|d| norm.starts_with(d))
    {
        return Err(format!(
            "{key} {} is on a kernel file system (/proc, /sys, /dev)",
            dir.display()
        ));
    }
    Ok(())
}
