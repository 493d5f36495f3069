//! Undoing what a runtime left behind when a test ends, also after a failed assertion:
//! mounts under a test's directory, processes it started, its cgroups.

use std::fs;
use std::path::Path;

/// Processes whose command line has `arg` as one of its words.
pub fn pids_with_arg(arg: &str) -> Vec<libc::pid_t> {
    let mut pids = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(e.path().join("cmdline"))
            && cmd.split(|b| *b == 0).any(|w| w == arg.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// Processes in cgroup `name` (any hierarchy, any depth).
pub fn pids_in_cgroup(name: &str) -> Vec<libc::pid_t> {
    fn walk(d: &Path, out: &mut Vec<libc::pid_t>) {
        if let Ok(s) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(
                s.lines()
                    .filter_map(|l| l.trim().parse::<libc::pid_t>().ok()),
            );
        }
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    for h in fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        walk(&h.path().join(name), &mut out);
    }
    out.sort();
    out.dedup();
    out
}

pub fn rmdir_tree(d: &Path) {
    for e in fs::read_dir(d).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            rmdir_tree(&e.path());
        }
    }
    let _ = fs::remove_dir(d);
}

/// Lazily unmount every mount point under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = dir.to_string_lossy().into_owned();
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let c = std::ffi::CString::new(p).unwrap();
        // SAFETY: umount2 on a path string we own.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}
