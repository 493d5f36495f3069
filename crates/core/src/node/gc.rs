//! `gc` in the node configuration: the node agent's collection of leaked attachments (the CNI
//! GC's job, which containerd never does): which runtime socket to ask which sandboxes exist,
//! how often, and how old an attachment must be before it may be collected. Written by the
//! node operator; parsed only by the agent and `node-config`, never by the CNI verbs.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `gc`: without it (or without `criSocket`), the agent collects nothing and says so.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcConfig {
    /// The runtime's CRI socket, asked (read-only: `Version`, `ListPodSandbox`) which pod
    /// sandboxes exist. containerd's is /run/containerd/containerd.sock.
    pub cri_socket: PathBuf,
    /// Seconds between rounds (the first is at start).
    #[serde(default = "default_period")]
    pub period_seconds: u64,
    /// An attachment whose record was written less than this many seconds before the runtime
    /// was asked is never collected: containerd lists a sandbox only once its CNI ADD returned.
    #[serde(default = "default_grace")]
    pub grace_seconds: u64,
    /// The deadline of one question to the runtime, in seconds; past it the round collects
    /// nothing.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Where the IPAM plugins are (the runtime's CNI_PATH), as the agent sees them.
    #[serde(default = "default_cni_path")]
    pub cni_path: Vec<PathBuf>,
}

fn default_period() -> u64 {
    300
}

fn default_grace() -> u64 {
    120
}

fn default_timeout() -> u64 {
    10
}

fn default_cni_path() -> Vec<PathBuf> {
    vec![PathBuf::from("/opt/cni/bin")]
}

impl GcConfig {
    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), String> {
        if !self.cri_socket.is_absolute() {
            return Err(format!(
                "gc.criSocket {:?} is not an absolute path",
                self.cri_socket
            ));
        }
        if !(1..=86_400).contains(&self.period_seconds) {
            return Err(format!(
                "gc.periodSeconds {} is not between 1 and 86400",
                self.period_seconds
            ));
        }
        // An ADD holds its lock for at most the IPAM deadline (600 s) and its own work: a
        // grace below 10 s could not cover even a slow ADD's record write to the runtime's list.
        if !(10..=86_400).contains(&self.grace_seconds) {
            return Err(format!(
                "gc.graceSeconds {} is not between 10 and 86400",
                self.grace_seconds
            ));
        }
        if !(1..=300).contains(&self.timeout_seconds) {
            return Err(format!(
                "gc.timeoutSeconds {} is not between 1 and 300",
                self.timeout_seconds
            ));
        }
        if self.cni_path.is_empty() || self.cni_path.iter().any(|p| !p.is_absolute()) {
            return Err(format!(
                "gc.cniPath {:?} must be a non-empty list of absolute paths",
                self.cni_path
            ));
        }
        Ok(())
    }
}
