//! Network namespaces: open and validate a netns path, and run code inside one on the current
//! thread. A netlink socket stays bound to the netns it was opened in, so callers open one
//! socket per namespace inside `within` and keep it.

use crate::error::{Code, Error, Result};
use nix::sched::{CloneFlags, setns};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// nsfs's magic number (linux/magic.h): a netns handle lives on nsfs.
const NSFS_MAGIC: i64 = 0x6e73_6673;
/// ioctl(2) on an nsfs fd: which kind of namespace (linux/nsfs.h, _IO(0xb7, 0x3)).
const NS_GET_NSTYPE: libc::Ioctl = 0xb703;

#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

impl Netns {
    /// Open a netns by path (CNI_NETNS). A missing path is "unknown container" (3); a path
    /// that is not a network namespace is a bad CNI_NETNS (4).
    pub fn open(path: &Path) -> Result<Self> {
        // O_NONBLOCK: opening a FIFO (or a device) named as a netns must not wait for a writer;
        // std adds O_CLOEXEC. What it opened is then checked to be a netns.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| {
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    Code::UnknownContainer
                } else {
                    Code::InvalidEnv
                };
                Error::new(
                    code,
                    format!("cannot open network namespace {}: {e}", path.display()),
                )
            })?;
        let ns = Netns {
            file,
            path: path.to_path_buf(),
        };
        ns.check_is_netns()?;
        Ok(ns)
    }

    /// A pod netns that may be gone: `None` (logged) when it is (no such path, or the empty
    /// file a netns mount leaves behind once unmounted), so DEL and GC carry on without it.
    /// A path that is something else (a FIFO, a device, a directory, a socket) is no pod's
    /// netns, gone or not: refused (4), so DEL keeps the state rather than guess.
    pub fn open_if_alive(path: &str) -> Result<Option<Netns>> {
        if path.is_empty() {
            return Ok(None);
        }
        let p = std::path::Path::new(path);
        match Netns::open(p) {
            Ok(ns) => Ok(Some(ns)),
            Err(e) if e.code == Code::InvalidEnv && !is_gone_netns_file(p) => Err(e),
            Err(e) if e.code == Code::UnknownContainer || e.code == Code::InvalidEnv => {
                log::info!(
                    "pod netns {path} is gone ({}); looking for the NIC on the host",
                    e.msg
                );
                Ok(None)
            }
            // Only a missing path (or the empty file an unmount leaves) is gone.
            Err(e) => Err(e),
        }
    }

    /// The namespace's identity: the nsfs device and inode (what `ip netns identify` and
    /// `stat -L` compare); ADD records it, DEL and CHECK act only on the same namespace.
    pub fn identity(&self) -> Result<(u64, u64)> {
        let m = self.file.metadata().map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot stat network namespace {}: {e}", self.path.display()),
            )
        })?;
        Ok((m.dev(), m.ino()))
    }

    /// The namespace the calling thread is in now (the host's, for a plugin run by a runtime).
    pub fn current() -> Result<Self> {
        Self::open(Path::new("/proc/thread-self/ns/net"))
    }

    fn check_is_netns(&self) -> Result<()> {
        let kind = self.file.metadata().map(|m| m.file_type()).map_err(|e| {
            Error::new(
                Code::InvalidEnv,
                format!("cannot stat {}: {e}", self.path.display()),
            )
        })?;
        let what = if kind.is_fifo() {
            Some("a FIFO")
        } else if kind.is_dir() {
            Some("a directory")
        } else if kind.is_socket() {
            Some("a socket")
        } else if kind.is_char_device() || kind.is_block_device() {
            Some("a device")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(Error::new(
                Code::InvalidEnv,
                format!(
                    "{} is {what}, not a network namespace (expected an nsfs file such as /var/run/netns/NAME or /proc/PID/ns/net)",
                    self.path.display()
                ),
            ));
        }
        let not_netns = || {
            Error::new(
                Code::InvalidEnv,
                format!(
                    "{} is not a network namespace (expected an nsfs file such as /var/run/netns/NAME or /proc/PID/ns/net)",
                    self.path.display()
                ),
            )
        };
        let st = nix::sys::statfs::fstatfs(&self.file).map_err(|_| not_netns())?;
        if st.filesystem_type().0 as i64 != NSFS_MAGIC {
            return Err(not_netns());
        }
        // An nsfs file can also be another kind of namespace: ask the kernel which.
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
        let kind = unsafe { libc::ioctl(self.file.as_raw_fd(), NS_GET_NSTYPE) };
        if kind != libc::CLONE_NEWNET {
            return Err(not_netns());
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Is this the host's own network namespace: the one the plugin runs in, or init's
    /// (pid 1's, when the plugin may open it)? Never a pod's: a CNI_NETNS naming it would make
    /// ADD, CHECK or DEL act on the host's links.
    pub fn is_the_hosts(&self) -> bool {
        [
            "/proc/thread-self/ns/net",
            "/proc/self/ns/net",
            "/proc/1/ns/net",
        ]
        .iter()
        .filter_map(|p| Netns::open(Path::new(p)).ok())
        .any(|host| self.same_as(&host))
    }

    /// Refuse this namespace as a pod's if it is the host's own (see
    /// [`is_the_hosts`](Self::is_the_hosts)): invalid CNI_NETNS (4).
    pub fn refuse_if_host(&self) -> Result<()> {
        if !self.is_the_hosts() {
            return Ok(());
        }
        Err(Error::new(
            Code::InvalidEnv,
            format!(
                "CNI_NETNS {} is the host's own network namespace, not a pod's; refusing to act on the host's links",
                self.path.display()
            ),
        ))
    }

    /// Refuse (4) this namespace unless it is `want` (a recorded [`identity`](Self::identity);
    /// `None`, from an older record: anything): the path now names another namespace (a
    /// symlink or bind mount retargeted to another pod's), where a recorded ifindex may be
    /// anyone's link. Where the wanted namespace is still reachable, the message says how.
    pub fn refuse_if_not(&self, want: Option<(u64, u64)>) -> Result<()> {
        let Some(want) = want else {
            return Ok(());
        };
        let got = self.identity()?;
        if got == want {
            return Ok(());
        }
        let still = find_by_identity(want)
            .map(|label| format!(" (that namespace is still there: {label})"))
            .unwrap_or_else(|| " (that namespace is not found on the node)".into());
        Err(Error::new(
            Code::InvalidEnv,
            format!(
                "CNI_NETNS {} is now network namespace {}:{}, not {}:{} where ADD attached the NIC{still}; refusing to act on another namespace's links",
                self.path.display(),
                got.0,
                got.1,
                want.0,
                want.1
            ),
        ))
    }

    /// Same namespace (same nsfs inode)?
    pub fn same_as(&self, other: &Netns) -> bool {
        match (self.file.metadata(), other.file.metadata()) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        }
    }

    /// Run `f` with the calling thread inside this namespace, then return to where it was.
    pub fn within<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let home = Netns::current()?;
        setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::new(
                Code::Io,
                format!(
                    "cannot enter network namespace {}: {e}",
                    self.path.display()
                ),
            )
        })?;
        // Return on every way out of `f`, a panic included (ADD rolls back after a panic).
        let _back = GoBack(home);
        Ok(f())
    }
}

/// Is `p` what a pod's netns path is once the netns is gone: missing (ENOENT, and only that),
/// or the empty regular file a netns bind mount leaves when it is unmounted (`ip netns del`,
/// runtimes)? A regular file with content is not (4: it never was a netns), nor a path that
/// exists but cannot be looked at (a symlink loop, EACCES, a name too long): that is an error
/// (4), and DEL keeps the state, where "gone" would release the IP of a NIC still in its pod.
fn is_gone_netns_file(p: &Path) -> bool {
    match std::fs::metadata(p) {
        Ok(m) => m.file_type().is_file() && m.len() == 0,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Where the network namespace `id` (device and inode, as [`Netns::identity`] gives them)
/// can still be found on the node, if anywhere: a `/run/netns` path or a process in it.
pub fn find_by_identity(id: (u64, u64)) -> Option<String> {
    others_on_node()
        .into_iter()
        .find(|(p, _)| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == id))
        .map(|(_, label)| label)
}

/// Every other network namespace on the node that has a name: those mounted under `/run/netns`
/// (pod sandboxes of containerd and CRI-O, `ip netns`) and those of every process
/// (`/proc/PID/ns/net`), each once (by its nsfs inode), never the calling thread's own. Each
/// comes with how a person would find it: its `/run/netns` path, or a process in it. A
/// namespace with neither (held only by an fd or a mount elsewhere) is not found.
pub fn others_on_node() -> Vec<(PathBuf, String)> {
    use std::collections::HashSet;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let mut seen: HashSet<(u64, u64)> = id(Path::new("/proc/thread-self/ns/net"))
        .into_iter()
        .collect();
    let mut out = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        if let Some(i) = id(&p)
            && seen.insert(i)
        {
            let label = p.display().to_string();
            out.push((p, label));
        }
    }
    for pid in crate::process::pids() {
        let p = PathBuf::from(format!("/proc/{pid}/ns/net"));
        if let Some(i) = id(&p)
            && seen.insert(i)
        {
            let comm = crate::process::comm(pid);
            out.push((p, format!("the netns of pid {pid} ({comm})")));
        }
    }
    out
}

/// Puts the calling thread back into its namespace when dropped.
struct GoBack(Netns);

impl Drop for GoBack {
    fn drop(&mut self) {
        if let Err(e) = setns(self.0.file.as_fd(), CloneFlags::CLONE_NEWNET) {
            // Carrying on in the wrong namespace could move the wrong links: stop here.
            eprintln!(
                "rdma-host-device: cannot return to the host network namespace: {e}; aborting"
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_file_is_not_a_netns() {
        let err = Netns::open(Path::new("/etc/hostname")).unwrap_err();
        assert_eq!(err.code, Code::InvalidEnv);
    }

    #[test]
    fn missing_path_is_unknown_container() {
        let err = Netns::open(Path::new("/nonexistent/ns")).unwrap_err();
        assert_eq!(err.code, Code::UnknownContainer);
    }

    #[test]
    fn only_a_missing_path_or_an_unmounted_file_is_a_gone_netns() {
        let d = std::env::temp_dir().join(format!("rhd-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        assert!(
            Netns::open_if_alive(&s(&d.join("missing")))
                .unwrap()
                .is_none()
        );
        std::fs::write(d.join("unmounted"), b"").unwrap();
        assert!(
            Netns::open_if_alive(&s(&d.join("unmounted")))
                .unwrap()
                .is_none()
        );
        // Paths that exist but cannot be opened are errors (4), not "gone": DEL would forget
        // a NIC still in its pod and release its address.
        let looped = d.join("loop");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        let long = d.join("x".repeat(300));
        for p in [looped, long] {
            let e = Netns::open_if_alive(&s(&p)).expect_err(&s(&p));
            assert_eq!(e.code, Code::InvalidEnv, "{e}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn other_namespace_kinds_are_rejected() {
        let err = Netns::open(Path::new("/proc/self/ns/uts")).unwrap_err();
        assert_eq!(err.code, Code::InvalidEnv);
    }

    #[test]
    fn the_hosts_own_namespace_is_refused() {
        let me = Netns::open(Path::new("/proc/self/ns/net")).unwrap();
        assert!(me.is_the_hosts());
        assert_eq!(me.refuse_if_host().unwrap_err().code, Code::InvalidEnv);
        let other = std::thread::spawn(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).unwrap();
            Netns::current().unwrap()
        })
        .join()
        .unwrap();
        assert!(!other.is_the_hosts());
        assert!(other.refuse_if_host().is_ok());
    }

    #[test]
    fn run_returns_home_even_after_a_panic() {
        let home = Netns::current().unwrap();
        // A fresh namespace, made on a throw-away thread (unshare acts on the calling thread).
        let other = std::thread::spawn(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).unwrap();
            Netns::current().unwrap()
        })
        .join()
        .unwrap();
        assert!(!other.same_as(&home));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            other.within(|| panic!("inside")).ok();
        }));
        assert!(r.is_err());
        assert!(Netns::current().unwrap().same_as(&home));
    }

    #[test]
    fn other_namespaces_are_found_once_and_never_the_own() {
        // A namespace held only by a process (no /run/netns name): found through /proc.
        let Ok(mut child) = std::process::Command::new("unshare")
            .args(["--net", "sleep", "30"])
            .spawn()
        else {
            return; // no util-linux unshare here: nothing to show
        };
        let theirs = PathBuf::from(format!("/proc/{}/ns/net", child.id()));
        let home = Netns::current().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let other = loop {
            if let Ok(ns) = Netns::open(&theirs)
                && !ns.same_as(&home)
            {
                break Some(ns);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let found = others_on_node();
        let opened: Vec<Netns> = found
            .iter()
            .filter_map(|(p, _)| Netns::open(p).ok())
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        let other = other.expect("unshare --net made no namespace (not root?)");
        let mut ids: Vec<(u64, u64)> = found
            .iter()
            .filter_map(|(p, _)| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino())))
            .collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "a namespace found twice: {found:?}");
        assert!(!opened.iter().any(|ns| ns.same_as(&home)), "{found:?}");
        assert!(opened.iter().any(|ns| ns.same_as(&other)), "{found:?}");
    }

    #[test]
    fn current_is_itself() {
        let a = Netns::current().unwrap();
        let b = Netns::open(Path::new("/proc/self/ns/net")).unwrap();
        assert!(a.same_as(&b));
        assert_eq!(a.within(|| 42).unwrap(), 42);
    }
}
