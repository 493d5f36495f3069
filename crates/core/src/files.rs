//! Files the plugin writes for others to read (the device-info file, the CDI spec): replaced
//! whole through a temp file of our own and a rename, so a reader sees the old file or the new
//! one, and a symlink at the path is replaced, never followed.
//!
//! And the one reader of files the node's tools and the verbs take in (the node configuration,
//! `validate`'s files, state records, the previous CDI spec, a device plugin's device-info
//! file, the metrics token): a regular file only, opened without blocking (a FIFO put at the
//! path cannot stall a tool or the one thread that answers scrapes), at most a bound.
//!
//! And directories only root may read (the state directory, which holds every attachment's
//! `ipam` object).
//!
//! And the one bounded wait for an flock(2) ([`flock_within`]): the plugin's locks
//! (`src/lock.rs`) and the env specs' (`dra::metadata`, `nic_env`) poll for it until a deadline
//! and give up, never blocking a CNI call or the kubelet's Allocate for ever.
//!
//! And the modes of what the plugin and the agent create: the one the code names, whatever the
//! umask (issue 36). The kernel applies the umask at creation (open, mkdir, a unix socket's
//! bind), so each is created with its mode (the umask can only take bits away) and then set to
//! exactly that mode on what was created (`fchmod`, or `chmod` of a directory or socket made
//! here): at no moment is anything wider than its mode. The umask itself is never touched: it
//! is the process's, shared by every thread.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What kind of file `t` is, for a message (`a FIFO`).
fn kind(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The whole of the regular file at `path` (symlinks followed: ConfigMap mounts are symlinks),
/// at most `max` bytes. A FIFO, device, socket or directory is refused without waiting
/// (`InvalidInput`, naming what it is), a longer file too (`FileTooLarge`); a missing one is
/// `NotFound` as usual.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_bounded(path, max, 0)
}

/// [`read_regular`], but a symlink at `path` is not followed (`ELOOP`): for files in
/// directories others may write to.
pub(crate) fn read_regular_nofollow(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_bounded(path, max, libc::O_NOFOLLOW)
}

fn read_bounded(path: &Path, max: u64, flags: i32) -> std::io::Result<Vec<u8>> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind(t)),
        ));
    }
    let mut body = Vec::new();
    f.take(max + 1).read_to_end(&mut body)?;
    if body.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(body)
}

/// Make `dir` (and missing parents) a directory only its owner may enter: created 0700, and
/// an existing one with group or other bits (as versions before this one made the state
/// directory: 0755) tightened to 0700. A symlink or a directory of another owner is left as it
/// is (the node's choice).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    create_dirs(dir, 0o700)?;
    let m = fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if m.is_dir()
        && m.permissions().mode() & 0o077 != 0
        && std::os::unix::fs::MetadataExt::uid(&m) == me
    {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// `dir` and its missing parents, each one made here with exactly `mode` (see the module's
/// header); a directory already there is left as it is (the node's).
pub fn create_dirs(dir: &Path, mode: u32) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() {
        match fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(at),
            Err(e) => return Err(e),
        }
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(d) {
            // Opened without following a symlink: the mode goes to the directory made here.
            Ok(()) => fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(d)
                .and_then(|f| set_mode(&f, mode))
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("setting the mode of {} to {mode:04o}: {e}", d.display()),
                    )
                })?,
            // Made meanwhile by someone else: theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("creating the directory {}: {e}", d.display()),
                ));
            }
        }
    }
    Ok(())
}

/// Give the file `f` (one just created) exactly `mode` (`fchmod`).
pub fn set_mode(f: &fs::File, mode: u32) -> std::io::Result<()> {
    f.set_permissions(fs::Permissions::from_mode(mode))
}

/// The uid of the process at the other end of the unix socket `fd` (`SO_PEERCRED`: who
/// connected, as the kernel recorded it at `connect`, whatever it says afterwards).
pub fn peer_uid(fd: std::os::fd::RawFd) -> std::io::Result<u32> {
    // SAFETY: an all-zero ucred is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` live across the call, `len` is `cred`'s size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Whether a peer of uid `uid` is one our sockets serve: root (the kubelet, the runtime, the
/// plugin they run) or the agent's own uid. Whoever else reached the socket (a descriptor
/// passed on, a process with CAP_DAC_OVERRIDE and another uid) is refused at once: the socket's
/// 0600 mode is the first check, this the second, by what the connecting process cannot change.
pub fn peer_served(uid: u32) -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// The peer check on an accepted connection: `Err` says whom it refused, for the log.
pub fn check_peer(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    let uid = peer_uid(fd)?;
    if peer_served(uid) {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("a peer of uid {uid}: only root and this agent's uid are served"),
        ))
    }
}

/// A unix stream socket listening at `path`, whose file has exactly `mode` from the moment it
/// exists: the socket's inode is given `mode` before `bind` (which creates the file with that
/// mode less the umask), the file then set to `mode`, and only then does it listen, so no one
/// connects before. `path` must be free (the caller removes a stale socket); its directory
/// must exist.
pub fn listen_unix(path: &Path, mode: u32) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let name = path.as_os_str().as_bytes();
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= addr.sun_path.len() || name.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} cannot be a unix socket's path (empty, a NUL byte, or {} bytes or more)",
                path.display(),
                addr.sun_path.len()
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + name.len() + 1;
    let os = |what: &str| {
        let e = std::io::Error::last_os_error();
        std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
    };
    // SAFETY: socket(2) with constant arguments; the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os("creating the socket for"));
    }
    // SAFETY: `fd` is a new descriptor no one else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fchmod(2) of the socket's inode, an fd we own.
    if unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(os("setting the mode of the socket for"));
    }
    // SAFETY: bind(2) with an initialized sockaddr_un and its length.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            len as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(os("binding"));
    }
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
        let _ = fs::remove_file(path);
        return Err(std::io::Error::new(
            e.kind(),
            format!("setting the mode of {} to {mode:04o}: {e}", path.display()),
        ));
    }
    // SAFETY: listen(2) on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        let e = os("listening on");
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(std::os::unix::net::UnixListener::from(fd))
}

/// Take an exclusive flock(2) on `file`, polling until `max` has passed: `Ok(true)` held
/// (released when the file closes), `Ok(false)` still someone else's at the deadline.
pub fn flock_within(file: &fs::File, max: std::time::Duration) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    const POLL: std::time::Duration = std::time::Duration::from_millis(10);
    let deadline = std::time::Instant::now() + max;
    loop {
        // SAFETY: flock(2) on a descriptor the caller owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) && e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

/// The lock file `name` in `dir`, root's own (made 0700 if missing: [`private_dir`]; the file
/// 0600, never through a symlink), flocked within `max` ([`flock_within`]; released when the
/// returned file closes). Our locks are never on a path another local user can open: anyone
/// who can open a file can flock it, and a directory others may read (the CDI directory, the
/// DRA metadata's, 0755) would let any user stall every writer. A lock still held at the
/// deadline is an error of kind `WouldBlock` naming it and the wait. A file unlinked by its
/// holder while we waited ([`unlink_lock`]) is opened again.
pub fn lock_private_within(
    dir: &Path,
    name: &str,
    max: std::time::Duration,
) -> std::io::Result<fs::File> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(name);
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    private_dir(dir).map_err(named)?;
    let d = fs::symlink_metadata(dir).map_err(named)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !d.is_dir() || d.uid() != me || d.mode() & 0o077 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not our own private directory (a directory of uid {me}, mode 0700; it is \
                 uid {}, mode {:04o}): another user could lock what we lock there; remove it",
                dir.display(),
                d.uid(),
                d.mode() & 0o7777
            ),
        ));
    }
    let deadline = std::time::Instant::now() + max;
    loop {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
            .map_err(named)?;
        set_mode(&f, 0o600).map_err(named)?;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !flock_within(&f, left).map_err(named)? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!(
                    "{} is held by another writer for more than {} ms; try again",
                    path.display(),
                    max.as_millis()
                ),
            ));
        }
        let ours = f.metadata().map_err(named)?;
        match fs::symlink_metadata(&path) {
            Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => return Ok(f),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(e)),
        }
    }
}

/// Remove lock file `name` of `dir` while holding it ([`lock_private_within`]): a waiter
/// that then gets the unlinked file opens the path again.
pub fn unlink_lock(dir: &Path, name: &str) {
    let _ = fs::remove_file(dir.join(name));
}

/// Put `body` at `path` (mode 0644, whatever the umask), making its directory (0755) if needed.
pub fn replace(path: &Path, body: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        create_dirs(dir, 0o755)?;
    }
    write_atomic(path, body, 0o644)
}

/// The one atomic write: `body` into a new temp file beside `path` (mode `mode`, whatever the
/// umask; never through a symlink), synced, then renamed over `path`, so a reader sees the old
/// file or the new one, never half. The temp file is removed if anything fails. Making the
/// directory, and syncing it after, are the caller's (`replace`, the DRA checkpoint).
pub fn write_atomic(path: &Path, body: &[u8], mode: u32) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = Path::new(&tmp);
    let _ = fs::remove_file(tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .and_then(|mut f| {
            set_mode(&f, mode)?;
            f.write_all(body)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(tmp);
    }
    written
}

/// Test help: the unprivileged local user (`nobody`) of issue 47 and its locks.
#[cfg(test)]
pub(crate) mod nobody {
    use super::*;

    /// The unprivileged local user of the tests (`nobody`).
    pub(crate) const NOBODY: u32 = 65534;

    /// Test help: `flock(1)` run as `nobody`, the local user of issue 47 (`flock -x /var/run/cdi`
    /// stalled every writer), with `args` (the path first). `None` when the tests are not root
    /// and so cannot run anything as someone else.
    pub(crate) fn flock_as_nobody(args: &[&std::ffi::OsStr]) -> Option<std::process::Command> {
        use std::os::unix::process::CommandExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let mut c = std::process::Command::new("flock");
        c.uid(NOBODY).gid(NOBODY).args(args);
        Some(c)
    }

    /// Test help: whether `nobody` can open and lock `path` at once (`flock -n`), and what
    /// `flock(1)` said when it could not. `None` when not root.
    pub(crate) fn can_lock(path: &Path) -> Option<(bool, String)> {
        let out = flock_as_nobody(&[
            "-n".as_ref(),
            "-x".as_ref(),
            path.as_os_str(),
            "true".as_ref(),
        ])?
        .output()
        .expect("flock(1) runs");
        Some((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Test help: `path` flocked (`LOCK_EX`) by someone else until dropped: by `nobody` through
    /// `flock(1)` when the tests are root (the attack of issue 47, as it was run), else by
    /// another open file description of ours, which conflicts the same way.
    pub(crate) struct Squatter {
        child: Option<std::process::Child>,
        _own: Option<fs::File>,
    }

    impl Squatter {
        pub(crate) fn hold(path: &Path) -> Self {
            let args = [path.as_os_str(), "sleep".as_ref(), "600".as_ref()];
            let Some(mut c) = flock_as_nobody(&args) else {
                let own = fs::File::open(path).unwrap();
                assert!(flock_within(&own, std::time::Duration::ZERO).unwrap());
                return Squatter {
                    child: None,
                    _own: Some(own),
                };
            };
            let child = c.spawn().expect("flock(1) runs");
            let s = Squatter {
                child: Some(child),
                _own: None,
            };
            for _ in 0..500 {
                let probe = fs::File::open(path).unwrap();
                if !flock_within(&probe, std::time::Duration::ZERO).unwrap() {
                    return s;
                }
                drop(probe);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            panic!("nobody's flock(1) never held {}", path.display());
        }
    }

    impl Drop for Squatter {
        fn drop(&mut self) {
            if let Some(c) = self.child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rhd-files-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// Modes with group-write bits, which the usual umask (022) takes away: what `files`
    /// makes has them all the same (each umask's own test is the agent's, in a child process:
    /// crates/agent/tests/node_agent/{cdi,device_plugin,dra,uppers}.rs).
    #[test]
    fn what_files_creates_has_exactly_its_mode() {
        let d = tmp("modes");
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        let deep = d.join("a/b/c");
        create_dirs(&deep, 0o775).unwrap();
        assert_eq!(
            [mode(&d.join("a")), mode(&d.join("a/b")), mode(&deep)],
            [0o775; 3]
        );
        // One already there is the node's, left as it is.
        fs::set_permissions(d.join("a"), fs::Permissions::from_mode(0o711)).unwrap();
        create_dirs(&d.join("a/x"), 0o750).unwrap();
        assert_eq!([mode(&d.join("a")), mode(&d.join("a/x"))], [0o711, 0o750]);
        create_dirs(&deep, 0o700).unwrap();
        assert_eq!(mode(&deep), 0o775);

        let sock = deep.join("s.sock");
        let l = listen_unix(&sock, 0o660).unwrap();
        assert_eq!(mode(&sock), 0o660);
        assert!(fs::symlink_metadata(&sock).unwrap().file_type().is_socket());
        std::os::unix::net::UnixStream::connect(&sock).expect("it listens");
        drop(l);
        let e = listen_unix(&sock, 0o600).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        assert!(e.to_string().contains("s.sock"), "{e}");
        let long = d.join("x".repeat(120));
        assert_eq!(
            listen_unix(&long, 0o600).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );

        let f = deep.join("spec.json");
        replace(&f, b"{}").unwrap();
        assert_eq!(mode(&f), 0o644);
        let fresh = d.join("new/dir/info.json");
        replace(&fresh, b"{}").unwrap();
        assert_eq!([mode(&d.join("new")), mode(&d.join("new/dir"))], [0o755; 2]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_reader_takes_regular_files_within_the_bound_and_never_waits_on_a_fifo() {
        let d = tmp("read");
        let f = d.join("f");
        fs::write(&f, b"12345").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"12345");
        let e = read_regular(&f, 4).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("larger than 4 bytes"), "{e}");
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        let e = read_regular(&fifo, 100).unwrap_err();
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(
            read_regular(&d, 100)
                .unwrap_err()
                .to_string()
                .contains("a directory")
        );
        let e = read_regular(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_regular(&link, 5).unwrap(), b"12345");
        assert_eq!(
            read_regular_nofollow(&link, 5).unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_private_dir_is_made_0700_and_an_open_one_tightened() {
        let d = tmp("private");
        let new = d.join("a/b");
        private_dir(&new).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&new), 0o700);
        let old = d.join("old");
        fs::create_dir(&old).unwrap();
        fs::set_permissions(&old, fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&old).unwrap();
        assert_eq!(mode(&old), 0o700);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_private_lock_held_elsewhere_is_waited_for_within_the_bound_and_then_refused() {
        use std::os::unix::fs::MetadataExt;
        let d = tmp("lockfile");
        let locks = d.join("locks");
        let bound = std::time::Duration::from_millis(100);
        let held = lock_private_within(&locks, "x.lock", bound).unwrap();
        let t = std::time::Instant::now();
        let e = lock_private_within(&locks, "x.lock", bound).unwrap_err();
        assert!(t.elapsed() >= bound);
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        assert!(e.to_string().contains("held by another writer"), "{e}");
        // A holder that unlinks its lock (the claim's, as the claim goes) and lets go: the
        // waiter locks the path's new file, not the unlinked one a third writer would miss.
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || {
                lock_private_within(&locks, "x.lock", std::time::Duration::from_secs(5))
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        unlink_lock(&locks, "x.lock");
        drop(held);
        let got = waiter.join().unwrap().unwrap();
        assert_eq!(
            got.metadata().unwrap().ino(),
            fs::metadata(locks.join("x.lock")).unwrap().ino()
        );
        let _ = fs::remove_dir_all(&d);
    }

    /// A lock directory someone else owns (made while its parent was open to them) is
    /// refused, not used: its owner could take every lock in it.
    #[test]
    fn a_lock_directory_not_ours_is_refused() {
        let d = tmp("lockforeign");
        let locks = d.join("locks");
        fs::create_dir(&locks).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: giving a directory to nobody needs root");
            return;
        }
        std::os::unix::fs::chown(&locks, Some(nobody::NOBODY), Some(nobody::NOBODY)).unwrap();
        let e = lock_private_within(&locks, "x.lock", std::time::Duration::ZERO).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(
            e.to_string().contains("not our own private directory"),
            "{e}"
        );
        assert!(!locks.join("x.lock").exists());
        let _ = fs::remove_dir_all(&d);
    }

    /// Issue 47: our sockets answer only whom they serve. The check is by `SO_PEERCRED`, which
    /// the connecting process cannot forge: a socket open to all (0666, so that the mode is
    /// not what refuses) reached by `nobody` is refused, one reached by us is served.
    #[test]
    fn a_peer_of_another_uid_is_refused_and_root_is_served() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let dir = std::env::temp_dir().join(format!("rhd-peer-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let sock = dir.join("s.sock");
        let l = listen_unix(&sock, 0o666).unwrap();
        let me = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        let (ours, _) = l.accept().unwrap();
        assert!(check_peer(ours.as_raw_fd()).is_ok());
        drop(me);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped the other uid: not root");
            let _ = fs::remove_dir_all(&dir);
            return;
        }
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg("import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.recv(1)")
            .arg(&sock)
            .uid(nobody::NOBODY)
            .gid(nobody::NOBODY)
            .spawn()
            .expect("python3 runs");
        let (theirs, _) = l.accept().unwrap();
        assert_eq!(peer_uid(theirs.as_raw_fd()).unwrap(), nobody::NOBODY);
        let e = check_peer(theirs.as_raw_fd()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("uid 65534"), "{e}");
        drop(theirs);
        let _ = child.wait();
        let _ = fs::remove_dir_all(&dir);
    }
}
