//! Debian's podman kept off the machine's own storage, for the tests that run containers with
//! it (`cdi.rs`: a container given a CDI device name; `image.rs`: the DaemonSet's image):
//! its storage root, run root and tmp dir in a temp dir of the test's, and its containers,
//! images and mounts removed on drop.

use crate::cleanup::unmount_under;
use crate::rig::TempDir;
use std::process::{Command, Output, Stdio};

/// Podman with a private storage root, run root and tmp dir; removes its containers,
/// images and mounts on drop.
pub struct Podman {
    /// Podman's storage lives under `storage/`, `run/` and `tmp/` here; a test may keep its own
    /// files beside them (they go with the temp dir).
    pub dir: TempDir,
}

/// `podman run` options every test container needs here: this machine's root lacks
/// CAP_SYS_RESOURCE, so runc may only lower rlimits (podman's defaults raise them), as
/// containerd's restrict_oom_score_adj in crates/test-support/src/containerd.rs.
pub const PODMAN_RUN_LIMITS: [&str; 2] = ["--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096"];

impl Podman {
    pub fn new(label: &str) -> Podman {
        Podman {
            dir: TempDir::new(label),
        }
    }

    /// The global options that keep podman off the machine's own storage. cgroupfs: no
    /// systemd here.
    pub fn opts(&self) -> Vec<String> {
        let d = self.dir.path().display();
        vec![
            format!("--root={d}/storage"),
            format!("--runroot={d}/run"),
            format!("--tmpdir={d}/tmp"),
            "--cgroup-manager=cgroupfs".into(),
            "--events-backend=file".into(),
        ]
    }

    /// `podman OPTS`, with no stdin, ready for a subcommand.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.args(self.opts()).stdin(Stdio::null());
        c
    }

    /// `podman OPTS ARGS...`, run to completion.
    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        self.cmd()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run podman ({e}): scripts/setup.sh installs it"))
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self
            .cmd()
            .args(["rm", "--all", "--force", "--time=0"])
            .output();
        let _ = self.cmd().args(["rmi", "--all", "--force"]).output();
        unmount_under(self.dir.path());
    }
}
