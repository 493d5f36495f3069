//! Locks that keep concurrent calls apart without serialising the node: one per attachment
//! (container + interface) and one per NIC (by its original host name), each an flock(2) on a
//! file (attachments under `<stateDir>/locks/`, NICs node-wide under
//! `/run/rdma-host-device/locks/`), taken with a bounded wait.
//!
//! - The kernel drops an flock when its holder dies, so a plugin killed with SIGKILL never
//!   leaves a NIC locked.
//! - Lock files are unlinked by their holder on release, so the directory is empty when the
//!   node is idle. A waiter that wins a lock on a file that was unlinked meanwhile notices
//!   (the path no longer names the inode it locked) and starts over.
//! - Order: attachment before NIC. Locks are re-entrant within a thread (an ADD that rolls
//!   back takes the NIC's lock again through DEL's code), so one call never waits on itself.
//! - A wait that runs out is code 11 ("try again later"): the runtime retries.

use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::state::owner_key;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::marker::PhantomData;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a call waits for another one working on the same NIC or attachment. An ADD holds
/// its locks through IPAM and GID verification (`rdma.gidTimeoutMs`, 5 s by default).
const DEFAULT_WAIT: Duration = Duration::from_secs(15);

/// A held lock; released (and its file unlinked) on drop, on the thread that took it.
#[derive(Debug)]
pub struct Guard {
    /// `None` when this thread already held the lock (re-entrant take).
    held: Option<(PathBuf, File)>,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some((path, file)) = self.held.take() {
            // Unlink while still holding it, then close (which releases the flock).
            let _ = std::fs::remove_file(&path);
            HELD.with(|h| h.borrow_mut().remove(&path));
            drop(file);
        }
    }
}

thread_local! {
    /// Lock files this thread holds.
    static HELD: RefCell<HashSet<PathBuf>> = RefCell::new(HashSet::new());
}

fn lock_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("locks")
}

fn wait() -> Duration {
    rdma_host_device_core::fault::debug_env_u64("RHD_LOCK_TIMEOUT_MS")
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_WAIT)
}

/// The attachment `container_id`/`ifname` (ADD, DEL, CHECK of one attachment).
pub fn attachment(state_dir: &Path, container_id: &str, ifname: &str) -> Result<Guard> {
    let what = format!("attachment {container_id}/{ifname}");
    let path = lock_dir(state_dir).join(format!("att-{}.lock", owner_key(container_id, ifname)));
    take(&path, wait(), &what)?.ok_or_else(|| busy(&what))
}

/// Like [`attachment`] but without waiting (`None` when another call holds it: GC skips it),
/// by the attachment's owner key (all a hashed temp file name keeps of a long container ID);
/// `label` names it in messages.
pub fn try_attachment(state_dir: &Path, owner: &str, label: &str) -> Result<Option<Guard>> {
    let what = format!("attachment {label}");
    let path = lock_dir(state_dir).join(format!("att-{owner}.lock"));
    take(&path, Duration::ZERO, &what)
}

/// NIC locks are node-wide (on tmpfs), not per state dir: two networks that select the same
/// NIC must exclude each other, and so must two plugins whose nodes name different stateDirs.
pub const NIC_LOCK_DIR: &str = "/run/rdma-host-device/locks";

/// The NIC whose original host name is `host_name` (a validated interface name: no '/').
pub fn device(host_name: &str) -> Result<Guard> {
    let what = format!("NIC {host_name}");
    let path = Path::new(NIC_LOCK_DIR).join(format!("nic-{host_name}.lock"));
    take(&path, wait(), &what)?.ok_or_else(|| busy(&what))
}

fn busy(what: &str) -> Error {
    Error::new(
        Code::TryAgain,
        format!(
            "{what} is busy: another CNI call has been working on it for {} ms; try again later",
            wait().as_millis()
        ),
    )
}

/// Take the lock at `path`, waiting up to `max`. `Ok(None)`: still held by someone else.
fn take(path: &Path, max: Duration, what: &str) -> Result<Option<Guard>> {
    if HELD.with(|h| h.borrow().contains(path)) {
        return Ok(Some(Guard {
            held: None,
            _not_send: PhantomData,
        }));
    }
    let io = |e: std::io::Error| {
        Error::new(
            Code::Io,
            format!("locking {what} ({}): {e}", path.display()),
        )
    };
    if let Some(dir) = path.parent() {
        // Only root enters the state directory (`files::private_dir`).
        rdma_host_device_core::files::private_dir(dir).map_err(io)?;
    }
    let deadline = Instant::now() + max;
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(io)?;
        // 0600 whatever the umask (`files::set_mode`); a lock file is ours alone.
        rdma_host_device_core::files::set_mode(&file, 0o600).map_err(io)?;
        if !rdma_host_device_core::files::flock_within(
            &file,
            deadline.saturating_duration_since(Instant::now()),
        )
        .map_err(io)?
        {
            return Ok(None);
        }
        // Did the previous holder unlink the file while we waited? Then we hold a lock on a
        // file nobody else will ever open: start over on the path's current file.
        let ours = file.metadata().map_err(io)?;
        match std::fs::metadata(path) {
            Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => {
                HELD.with(|h| h.borrow_mut().insert(path.to_path_buf()));
                return Ok(Some(Guard {
                    held: Some((path.to_path_buf(), file)),
                    _not_send: PhantomData,
                }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn dir(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rhd-lock-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// flock excludes across open file descriptions even in one process, so a second
    /// "process" is simulated by taking the lock directly on a fresh fd.
    fn foreign_hold(path: &Path) -> File {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap();
        // SAFETY: flock on our own fd.
        assert_eq!(
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        f
    }

    #[test]
    fn reentrant_and_released_with_file_removed() {
        let file = Path::new(NIC_LOCK_DIR).join("nic-rhdt-reent.lock");
        let g1 = device("rhdt-reent").unwrap();
        let g2 = device("rhdt-reent").unwrap();
        assert!(
            g2.held.is_none(),
            "second take in the same process is re-entrant"
        );
        drop(g2);
        assert!(file.exists(), "outer guard still holds it");
        drop(g1);
        assert!(!file.exists(), "released lock leaves no file");
    }

    #[test]
    fn foreign_holder_makes_try_fail_and_wait_time_out() {
        let d = dir("foreign");
        let p = d.join(format!("locks/att-{}.lock", owner_key("c1", "net1")));
        let f = foreign_hold(&p);
        assert!(
            try_attachment(&d, &owner_key("c1", "net1"), "c1/net1")
                .unwrap()
                .is_none()
        );
        let t = Instant::now();
        let r = take(&p, Duration::from_millis(100), "x").unwrap();
        assert!(r.is_none());
        assert!(t.elapsed() >= Duration::from_millis(100));
        // Different attachments never wait on each other.
        assert!(
            try_attachment(&d, &owner_key("c2", "net1"), "c2/net1")
                .unwrap()
                .is_some()
        );
        drop(f);
        assert!(
            try_attachment(&d, &owner_key("c1", "net1"), "c1/net1")
                .unwrap()
                .is_some()
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn holders_exclude_each_other_across_unlinks() {
        // Every release unlinks the file; waiters that locked the old inode must start over,
        // so there is never more than one holder.
        let inside = Arc::new(AtomicU32::new(0));
        let max_inside = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (inside, max_inside) = (inside.clone(), max_inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        let g = device("rhdt-unlink").unwrap();
                        assert!(g.held.is_some(), "threads do not share re-entrancy");
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max_inside.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(300));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(g);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(max_inside.load(Ordering::SeqCst), 1, "two holders at once");
        assert!(
            !Path::new(NIC_LOCK_DIR)
                .join("nic-rhdt-unlink.lock")
                .exists()
        );
    }
}
