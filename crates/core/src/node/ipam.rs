//! The node's IPAM settings: which plugins a network configuration may make the plugin exec
//! as its IPAM, which paths their configuration may name, what the kernel lets them reach
//! (`src/confine/` enforces it), and their deadline.

use super::Node;
use super::dirs::{RUN_DIR, has_dotdot, path_under, real_path};
use crate::error::{Code, Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The IPAM plugins a network configuration may name when the node says nothing: the address
/// managers people use with a host NIC, and nothing that is not an address manager (`portmap`,
/// `bridge`, ... are plugins too, and would run as root with the tenant's config).
pub const DEFAULT_IPAM_PLUGINS: [&str; 4] = ["host-local", "static", "dhcp", "whereabouts"];
/// The directories an IPAM plugin may write beneath when the node says nothing (the kernel
/// enforces it, src/confine/): host-local's default dataDir (/var/lib/cni/networks), dhcp's
/// socket directory (/run/cni). Never the plugin's own stateDir.
pub const DEFAULT_IPAM_PATHS: [&str; 3] = ["/var/lib/cni/networks", "/run/cni", "/var/run/cni"];
/// What an IPAM plugin may read (and execute) beyond its own file and the dynamic loader's
/// directories when the node says nothing: the CNI configuration (whereabouts' kubeconfig
/// lives in /etc/cni/net.d/whereabouts.d/) and the node's resolver configuration.
pub const DEFAULT_IPAM_READ_PATHS: [&str; 2] = ["/etc/cni", "/etc/resolv.conf"];
/// The unix sockets an IPAM plugin may connect to when the node says nothing: the dhcp
/// daemon's, at its default path. Every other plugin gets no AF_UNIX socket at all (the
/// kernel refuses it: src/confine/), so it cannot speak for the kubelet through a socket of
/// root's (issue 47).
pub const DEFAULT_IPAM_SOCKETS: [(&str, &str); 1] = [("dhcp", "/run/cni/dhcp.sock")];
/// The longest path a unix socket address holds (`sun_path`, less its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// How long one exec of an IPAM plugin may take when the node says nothing (a DHCP lease
/// takes a few seconds; nothing legitimate takes this long).
pub const DEFAULT_IPAM_TIMEOUT_SECONDS: u64 = 30;
/// The most an IPAM plugin may write to stdout (a CNI result is a few KiB).
pub const MAX_IPAM_OUTPUT: usize = 1 << 20;
/// `ipam` keys known to be paths: a relative value with `..` is refused too (an absolute
/// value of any key is checked against `ipamPaths`).
const IPAM_PATH_KEYS: [&str; 3] = ["dataDir", "resolvConf", "daemonSocketPath"];

pub(super) fn default_ipam_plugins() -> Vec<String> {
    DEFAULT_IPAM_PLUGINS.iter().map(|s| s.to_string()).collect()
}

pub(super) fn default_ipam_paths() -> Vec<PathBuf> {
    DEFAULT_IPAM_PATHS.iter().map(PathBuf::from).collect()
}

pub(super) fn default_ipam_read_paths() -> Vec<PathBuf> {
    DEFAULT_IPAM_READ_PATHS.iter().map(PathBuf::from).collect()
}

pub(super) fn default_ipam_sockets() -> BTreeMap<String, Vec<PathBuf>> {
    DEFAULT_IPAM_SOCKETS
        .iter()
        .map(|(plugin, path)| (plugin.to_string(), vec![PathBuf::from(path)]))
        .collect()
}

pub(super) fn default_ipam_timeout() -> u64 {
    DEFAULT_IPAM_TIMEOUT_SECONDS
}

/// `ipamConfinement`: what to do where the kernel cannot confine an IPAM plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Confinement {
    /// Refuse to run it (ADD fails with 105 and says why).
    #[default]
    Required,
    /// Run it without what the kernel lacks, with a warning in the log.
    BestEffort,
}

impl Node {
    /// The IPAM settings checked when the file is read (every CNI call loads it): plugin file
    /// names, paths absolute and away from the plugin's own directories and the kernel's file
    /// systems, the deadline in range. Why not, as the error's text.
    pub(super) fn check_ipam(&self) -> std::result::Result<(), String> {
        for p in &self.ipam_plugins {
            if p.is_empty() || p.contains('/') || p == "." || p == ".." {
                return Err(format!(
                    "ipamPlugins entry {p:?} must be a plugin file name (it is looked up in CNI_PATH)"
                ));
            }
        }
        // An entry for a plugin ipamPlugins leaves out is never used (that plugin never runs).
        for (plugin, sockets) in &self.ipam_sockets {
            for p in sockets {
                let len = p.as_os_str().len();
                if !p.is_absolute() || has_dotdot(p) || len > MAX_SOCKET_PATH {
                    return Err(format!(
                        "ipamSockets entry {} of {plugin:?} must be an absolute path without '..' of at most {MAX_SOCKET_PATH} bytes (a unix socket's address)",
                        p.display()
                    ));
                }
            }
        }
        // The plugin's own directories, resolved once (every CNI call loads this file).
        let own: Vec<(&str, PathBuf, bool)> = [
            ("stateDir", &self.state_dir, true),
            ("logDir", &self.log_dir, false),
            ("deviceInfoDir", &self.device_info_dir, true),
            ("runtime directory", &PathBuf::from(RUN_DIR), true),
        ]
        .into_iter()
        .map(|(what, dir, inside_too)| (what, real_path(dir), inside_too))
        .collect();
        for (key, paths) in [
            ("ipamPaths", &self.ipam_paths),
            ("ipamReadPaths", &self.ipam_read_paths),
        ] {
            for p in paths {
                if !p.is_absolute() || has_dotdot(p) {
                    return Err(format!(
                        "{key} entry {} must be an absolute path without '..'",
                        p.display()
                    ));
                }
                // The kernel grants IPAM all of an entry, by the file it resolves to: one
                // that holds the plugin's own records, log, runtime directory or the
                // device-info directory, or lies among them, or reaches the kernel's own
                // file systems, would hand them to a tenant's IPAM config. Compared as
                // resolved paths, so a symlink to the stateDir is the stateDir. (A directory
                // of its own inside the logDir reaches no log file.)
                let real = real_path(p);
                if real == Path::new("/")
                    || ["/proc", "/sys", "/dev"]
                        .iter()
                        .any(|d| real.starts_with(d))
                {
                    return Err(format!(
                        "{key} entry {} is {}: IPAM plugins would reach the whole node",
                        p.display(),
                        if real == Path::new("/") {
                            "the root".to_owned()
                        } else {
                            format!("on a kernel file system ({})", real.display())
                        }
                    ));
                }
                for (what, dir, inside_too) in &own {
                    if dir.starts_with(&real) || (*inside_too && real.starts_with(dir)) {
                        return Err(format!(
                            "{key} entry {} holds or is inside the plugin's {what} {}: IPAM plugins would reach the plugin's own files; list a directory beside it",
                            p.display(),
                            dir.display()
                        ));
                    }
                }
            }
        }
        if !(1..=600).contains(&self.ipam_timeout_seconds) {
            return Err(format!(
                "ipamTimeoutSeconds {} must be 1-600",
                self.ipam_timeout_seconds
            ));
        }
        Ok(())
    }

    /// Whether a network configuration may make the plugin exec `plugin` as its IPAM: refused
    /// with 107 (the node's policy, as for a NIC) naming the plugins the node allows.
    pub fn admit_ipam(&self, plugin: &str) -> Result<()> {
        if self.ipam_plugins.iter().any(|p| p == plugin) {
            return Ok(());
        }
        Err(Error::new(
            Code::NotAllowed,
            format!(
                "ipam.type {plugin:?} is not an IPAM plugin this node allows; it allows {} (ipamPlugins in the node policy: {})",
                if self.ipam_plugins.is_empty() {
                    "none".to_owned()
                } else {
                    self.ipam_plugins.join(", ")
                },
                self.source
            ),
        ))
    }

    /// Whether every path in a network configuration's `ipam` object is one the node lets IPAM
    /// name: each absolute string, at any depth, must be under `ipamPaths` without `..`, and a
    /// relative value of a key known to be a path must not contain `..`. Refused with 107 (the
    /// node's policy) naming the key and the allowed directories.
    pub fn admit_ipam_paths(&self, ipam: &serde_json::Value) -> Result<()> {
        self.walk_ipam("ipam", None, ipam)
    }

    fn walk_ipam(&self, at: &str, key: Option<&str>, v: &serde_json::Value) -> Result<()> {
        use serde_json::Value;
        match v {
            Value::Object(m) => m
                .iter()
                .try_for_each(|(k, v)| self.walk_ipam(&format!("{at}.{k}"), Some(k), v)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| self.walk_ipam(&format!("{at}[{i}]"), key, v)),
            Value::String(s) => {
                let p = Path::new(s);
                let refuse = |why: &str| {
                    Err(Error::new(
                        Code::NotAllowed,
                        format!(
                            "{at} {s:?} {why}; IPAM paths must be under {} (ipamPaths and ipamReadPaths in the node policy: {})",
                            if self.ipam_paths.is_empty() && self.ipam_read_paths.is_empty() {
                                "no directory at all".to_owned()
                            } else {
                                self.ipam_paths
                                    .iter()
                                    .chain(&self.ipam_read_paths)
                                    .map(|p| p.display().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            },
                            self.source
                        ),
                    ))
                };
                if s.starts_with('/') {
                    if has_dotdot(p) {
                        return refuse("contains '..'");
                    }
                    if !path_under(&self.ipam_paths, p) && !path_under(&self.ipam_read_paths, p) {
                        return refuse("is outside the directories this node lets IPAM name");
                    }
                } else if key
                    .is_some_and(|k| IPAM_PATH_KEYS.iter().any(|p| p.eq_ignore_ascii_case(k)))
                {
                    // Go's decoder (host-local, dhcp) matches keys without regard to case.
                    // The plugin resolves it against its working directory: an empty one
                    // the kernel lets it write nothing in. Said early, not relied on.
                    return refuse(if has_dotdot(p) {
                        "contains '..'"
                    } else {
                        "is relative (the plugin would resolve it against its working directory)"
                    });
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
