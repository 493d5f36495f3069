//! Asking the watcher, bounded by a deadline from the first byte to the last: a watcher that is
//! absent, refuses, stalls or answers garbage is an error the caller answers by scanning
//! itself. Only a socket owned by root is asked.

use super::{Answer, MAX_LINE, Query, Watched, WatchedNic, own_netns};
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the watcher at `socket` says rides host link `ifindex`, within `deadline`.
pub(crate) fn ask(
    socket: &Path,
    ifindex: u32,
    name: &str,
    deadline: Duration,
) -> io::Result<Vec<String>> {
    let q = Query {
        ifindex,
        name: name.to_owned(),
        netns: own_netns()?,
    };
    match exchange(socket, &q, deadline)? {
        Answer::Riding(why) => Ok(why),
        Answer::Unknown(why) => Err(io::Error::other(format!("it cannot tell: {why}"))),
    }
}

/// Whether the watcher's guard vouches that nothing of another namespace rides `nic` (it has
/// watched it without a break since `nic.since_ns` and removed what came), within `deadline`:
/// `Ok(())` only on its plain "nothing"; its reason, or what went wrong, otherwise.
pub fn ask_guard(socket: &Path, nic: &WatchedNic, deadline: Duration) -> io::Result<()> {
    let q = Watched {
        watched: nic.clone(),
    };
    match exchange(socket, &q, deadline)? {
        Answer::Riding(why) if why.is_empty() => Ok(()),
        Answer::Riding(why) => Err(io::Error::other(format!(
            "it names riders: {}",
            why.join("; ")
        ))),
        Answer::Unknown(why) => Err(io::Error::other(why)),
    }
}

/// One question, one answer line, within `deadline` from the first byte to the last.
fn exchange<Q: serde::Serialize>(socket: &Path, q: &Q, deadline: Duration) -> io::Result<Answer> {
    let end = Instant::now() + deadline;
    let m = std::fs::symlink_metadata(socket)?;
    if !m.file_type().is_socket() || m.uid() != 0 {
        return Err(io::Error::other(format!(
            "{} is not a socket owned by root",
            socket.display()
        )));
    }
    let mut s = connect(socket)?;
    let mut line = serde_json::to_vec(q).map_err(io::Error::other)?;
    line.push(b'\n');
    s.set_write_timeout(Some(left(end)?))?;
    s.write_all(&line)?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"\n") {
        s.set_read_timeout(Some(left(end)?))?;
        let n = match s.read(&mut buf) {
            Ok(0) => return Err(io::Error::other("the watcher closed before answering")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        got.extend_from_slice(&buf[..n]);
        if got.len() > MAX_LINE {
            return Err(io::Error::other("the watcher's answer is too long"));
        }
    }
    serde_json::from_slice::<Answer>(&got)
        .map_err(|e| io::Error::other(format!("its answer does not parse: {e}")))
}

/// The time left before `end`; an error once it has passed.
fn left(end: Instant) -> io::Result<Duration> {
    let d = end.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no answer before the deadline",
        ));
    }
    Ok(d)
}

/// Connect without waiting: a listener whose backlog is full is busy (EAGAIN), not a wait.
fn connect(path: &Path) -> io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::other("the socket path is too long"));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain socket(2); the fd is owned right after.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new socket no one else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: addr is a valid sockaddr_un of the given size.
    let rc = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let s = UnixStream::from(owned);
    s.set_nonblocking(false)?;
    Ok(s)
}
