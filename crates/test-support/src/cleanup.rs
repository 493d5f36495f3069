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

/// Lazily unmount every mount point under `dir` (`dir` itself included), deepest first, in
/// this thread's mount namespace.
///
/// Each is first made private: a mount under `dir` may be a peer of one outside it (a bind or
/// rbind of a shared mount joins the source's peer group; `ip netns add` makes /run/netns
/// shared), and an unmount under a shared mount propagates to its peers. Without this an rbind
/// of /run/netns in a test's directory took every nsfs mount of the host's /run/netns with it
/// (tests/runtimes/image.rs, issue 36 item 5).
pub fn unmount_under(dir: &Path) {
    let info = fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
    let prefix = dir.to_string_lossy().trim_end_matches('/').to_owned();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| *p == prefix || p.starts_with(&format!("{prefix}/")))
        .collect();
    points.sort_by_key(|p| p.len());
    points.dedup();
    for p in &points {
        let Ok(c) = std::ffi::CString::new(p.as_str()) else {
            continue;
        };
        // SAFETY: mount(2) changing only the propagation of a path string we own.
        unsafe {
            libc::mount(
                std::ptr::null(),
                c.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
    }
    for p in points.iter().rev() {
        let Ok(c) = std::ffi::CString::new(p.as_str()) else {
            continue;
        };
        // SAFETY: umount2 on a path string we own.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A mount point as /proc/PID/mountinfo writes it (space, tab, newline and backslash as
/// `\ooo`), as a path.
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|d| (b'0'..=b'7').contains(d)))
            .map(|d| d.iter().fold(0u16, |n, d| n * 8 + u16::from(d - b'0')))
            .and_then(|n| u8::try_from(n).ok());
        if let (b'\\', Some(byte)) = (b[i], octal) {
            out.push(byte);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
