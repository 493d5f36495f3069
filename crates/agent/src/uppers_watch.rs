//! The uppers watcher (`rdma-host-device-agent uppers-watch --socket PATH`): keeps, per host link
//! asked about, a certificate that nothing rides it unseen by the host's sysfs (a device of
//! another namespace, or a host link of a kind the kernel does not link to its lower), and
//! answers queries on a root-only unix socket.
//!
//! A certificate says: a full scan (`scan.rs`) found nothing, and no link notification that
//! may mean a change has arrived since the scan began. It holds because the kernel raises
//! NETDEV_CHANGEUPPER on a lower device whenever an upper (macvlan, macvtap, ipvlan, VLAN,
//! vxlan with a `dev`, a bond or bridge enslaving it) is linked to it or unlinked from it, and
//! rtnetlink turns that into an RTM_NEWLINK for the lower in the lower's namespace, whichever
//! namespace the upper is in. So every notification for the link's index voids its
//! certificate, and so does one for a host link whose lower is that index (a macvlan leaving
//! the host for a pod raises nothing on its lower; an IP tunnel made, or bound by `dev`, on the
//! host raises only its own). So does losing notifications (ENOBUFS):
//! then every certificate goes.
//!
//! The notifications are queued on our socket by the kernel before the change returns to
//! whoever made it, so draining the socket after reading a query makes the answer current.
//! A scan during which its link was touched proves nothing and is repeated. A link asked about
//! before that leaves the host and comes home (a DEL) is scanned again once it has been quiet
//! for a moment, so the next ADD finds it certified.
//!
//! Beside it, the guard (`uppers_guard.rs`) watches the NICs pods hold: what another namespace
//! stacks on one is deleted at once (issue 47), and DEL and CHECK ask it whether they must
//! search for riders themselves.

use crate::error::{Error, Result};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use rdma_host_device_core::link::raw;
use rdma_host_device_core::uppers::{
    Answer, DEFAULT_SOCKET, MAX_LINE, Query, Watched, own_netns, scan,
};
use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// RTNLGRP_LINK: link notifications.
const RTNLGRP_LINK: u32 = 1;
/// The notification socket's receive buffer: a burst of pods starting must not overflow it.
const RCVBUF: libc::c_int = 16 << 20;
/// One notification datagram at most (a link message with statistics is a few KiB).
const DATAGRAM: usize = 64 << 10;
/// How long a link that came home must be quiet before it is scanned again.
const QUIET: Duration = Duration::from_millis(100);
/// Scans of one link in a row, each voided by a notification, before giving up the query.
const TRIES: usize = 3;
/// Links remembered (asked about, or away from the host): a bound, not a working size.
const REMEMBERED: usize = 4096;
/// How long one client may take to send its query and read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(1);

/// `uppers-watch`'s options.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// The unix socket ADD asks (the node configuration's uppersSocket)
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET, value_parser = crate::flags::absolute_path)]
    pub socket: PathBuf,
    /// Log every answer and scan
    #[arg(long)]
    pub debug: bool,
}

pub fn run(o: &Options) -> Result<()> {
    let level = if o.debug {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    rdma_host_device_core::logging::init(level, None, " uppers-watch".into());
    serve(&o.socket)
}

/// Watch the calling thread's namespace (the host's) and answer on `socket` until killed.
pub fn serve(socket: &Path) -> Result<()> {
    let fail = |what: String| Error::Node(format!("uppers watcher: {what}"));
    let mut w = Watcher::new().map_err(|e| fail(format!("the link notifications: {e}")))?;
    let listener = listen(socket).map_err(|e| fail(format!("{}: {e}", socket.display())))?;
    let counter = socket.with_file_name(crate::uppers_guard::COUNTER_FILE);
    let mut guard = crate::uppers_guard::Guard::new(counter)
        .map_err(|e| fail(format!("the pods' link notifications: {e}")))?;
    log::info!("uppers watcher: answering on {}", socket.display());
    loop {
        let wait = w
            .next_due()
            .map(|t| t.saturating_duration_since(Instant::now()));
        let (query, notified, guarded) = wait_for(&listener, &w.nl, guard.fd(), wait)
            .map_err(|e| fail(format!("waiting for queries: {e}")))?;
        if guarded {
            guard
                .drain()
                .map_err(|e| fail(format!("reading the pods' link notifications: {e}")))?;
        }
        if notified {
            w.drain()
                .map_err(|e| fail(format!("reading link notifications: {e}")))?;
        }
        if query {
            match listener.accept() {
                Ok((client, _)) => {
                    if let Err(e) = rdma_host_device_core::files::check_peer(client.as_raw_fd()) {
                        log::warn!("uppers watcher: refused a client: {e}");
                    } else if let Err(e) = w.serve_client(client, &mut guard) {
                        log::debug!("uppers watcher: a client: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // A client gone before it was accepted, or no fd left for a moment: the
                // clients scan themselves meanwhile; the watcher carries on.
                Err(e) => {
                    log::warn!("uppers watcher: accepting a client: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        w.rescan_due()
            .map_err(|e| fail(format!("reading link notifications: {e}")))?;
    }
}

/// The listening socket at `path`, root-only: its directory made 0700 if missing, a stale
/// socket replaced, anything else there refused.
fn listen(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        rdma_host_device_core::files::create_dirs(dir, 0o700)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::other("another watcher answers there"));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => return Err(io::Error::other("something other than a socket is there")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let l = rdma_host_device_core::files::listen_unix(path, 0o600)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Wait until a client connects or a notification arrives, up to `timeout` (`None`: no limit):
/// (a client waits, the host's notifications wait, the pods' notifications wait).
fn wait_for(
    l: &UnixListener,
    nl: &Socket,
    pods: libc::c_int,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: nl.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: pods,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| t.as_millis().min(60_000) as libc::c_int + 1);
    // SAFETY: fds is a valid array of three pollfd for the call's duration.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok((false, false, false))
        } else {
            Err(e)
        };
    }
    Ok((
        fds[0].revents != 0,
        fds[1].revents != 0,
        fds[2].revents != 0,
    ))
}

struct Watcher {
    nl: Socket,
    buf: Vec<u8>,
    netns: (u64, u64),
    /// Links nothing of another namespace rides, by index.
    certified: HashSet<u32>,
    /// Links asked about and in the host: their names.
    asked: HashMap<u32, Vec<u8>>,
    /// Names of links asked about that left the host: to know them when they come home.
    away: HashSet<Vec<u8>>,
    /// Links to scan again, and from when.
    due: HashMap<u32, Instant>,
    /// The link being scanned, and whether a notification touched it since the scan began.
    scanning: Option<u32>,
    voided: bool,
}

impl Watcher {
    fn new() -> io::Result<Self> {
        let mut nl = Socket::new(NETLINK_ROUTE)?;
        nl.bind(&SocketAddr::new(0, 0))?;
        nl.add_membership(RTNLGRP_LINK)?;
        // SAFETY: a valid socket fd and a pointer to an int that outlives the call.
        let forced = unsafe {
            libc::setsockopt(
                nl.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&RCVBUF as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if forced < 0 {
            nl.set_rx_buf_sz(RCVBUF as usize)?;
        }
        nl.set_non_blocking(true)?;
        Ok(Watcher {
            nl,
            buf: Vec::with_capacity(DATAGRAM),
            netns: own_netns()?,
            certified: HashSet::new(),
            asked: HashMap::new(),
            away: HashSet::new(),
            due: HashMap::new(),
            scanning: None,
            voided: false,
        })
    }

    /// Read every notification queued so far.
    fn drain(&mut self) -> io::Result<()> {
        loop {
            self.buf.clear();
            match self.nl.recv_from(&mut self.buf, libc::MSG_TRUNC) {
                Ok((n, _)) if n > self.buf.len() => self.forget_all("a notification was cut short"),
                // Not the kernel's (CAP_NET_ADMIN in the host's namespace may send here): its
                // "gone" or "home again" is not believed (issue 36's attack pass).
                Ok((_, from)) if from.port_number() != 0 => {
                    self.forget_all("a message not from the kernel reached the notification socket")
                }
                Ok(_) => {
                    let buf = std::mem::take(&mut self.buf);
                    match raw::messages(&buf) {
                        Some(msgs) => {
                            for m in msgs {
                                if let Some((gone, l)) = raw::notification(m) {
                                    self.noted(gone, &l);
                                }
                            }
                        }
                        None => self.forget_all("a notification does not parse"),
                    }
                    self.buf = buf;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.forget_all("notifications were lost (ENOBUFS)")
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A notification about link `l` (`gone`: RTM_DELLINK).
    fn noted(&mut self, gone: bool, l: &raw::RawLink) {
        self.void(l.index);
        // A host link riding another (a macvlan leaving for a pod, a tunnel made or rebound on
        // the host): its lower is touched too.
        if l.lower_netnsid.is_none()
            && let Some(lower) = l.lower
            && lower != l.index
        {
            self.void(lower);
        }
        if gone {
            if let Some(name) = self.asked.remove(&l.index) {
                self.due.remove(&l.index);
                remember(&mut self.away, name);
            }
        } else if let Some(name) = self.asked.get_mut(&l.index) {
            l.name.clone_into(name);
        } else if self.away.remove(&l.name) {
            // Home again, perhaps under another index.
            self.asked.insert(l.index, l.name.clone());
            self.due.insert(l.index, Instant::now() + QUIET);
        }
    }

    /// Link `index`'s certificate is void; if it was asked about, scan it again once quiet.
    fn void(&mut self, index: u32) {
        self.certified.remove(&index);
        if self.scanning == Some(index) {
            self.voided = true;
        }
        if self.asked.contains_key(&index) {
            self.due.insert(index, Instant::now() + QUIET);
        }
    }

    fn forget_all(&mut self, why: &str) {
        log::warn!("uppers watcher: {why}; every link will be scanned again");
        self.certified.clear();
        self.voided = true;
        let when = Instant::now() + QUIET;
        for i in self.asked.keys() {
            self.due.insert(*i, when);
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// Scan the links that came home or changed once they have been quiet.
    fn rescan_due(&mut self) -> io::Result<()> {
        let now = Instant::now();
        let ready: Vec<u32> = self
            .due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(i, _)| *i)
            .collect();
        for index in ready {
            self.due.remove(&index);
            if self.certified.contains(&index) {
                continue;
            }
            let Some(name) = self.asked.get(&index).cloned() else {
                continue;
            };
            let name = String::from_utf8_lossy(&name).into_owned();
            let started = Instant::now();
            let answer = self.scan(index, &name)?;
            log::debug!(
                "{name} (index {index}) scanned again, unasked, in {:.1} ms: {answer:?}",
                started.elapsed().as_secs_f64() * 1e3
            );
            // A scan voided by its own link's notifications set it due again: that one waits
            // for the next notification or query, not a loop.
            self.due.remove(&index);
        }
        Ok(())
    }

    /// A full scan for link `index`, repeated while notifications void it; a clean one
    /// certifies it.
    fn scan(&mut self, index: u32, name: &str) -> io::Result<Answer> {
        for _ in 0..TRIES {
            self.drain()?;
            self.scanning = Some(index);
            self.voided = false;
            let found = scan::all(index, name);
            self.drain()?;
            self.scanning = None;
            if self.voided {
                continue;
            }
            return Ok(match found {
                Ok(why) => {
                    if why.is_empty() {
                        self.certified.insert(index);
                    }
                    Answer::Riding(why)
                }
                Err(e) => Answer::Unknown(e.msg),
            });
        }
        Ok(Answer::Unknown(format!(
            "{name}'s links changed during each of {TRIES} scans"
        )))
    }

    /// The answer to one query.
    fn answer(&mut self, q: Query) -> io::Result<Answer> {
        if q.netns != self.netns {
            return Ok(Answer::Unknown(
                "the watcher watches another network namespace".into(),
            ));
        }
        // Whatever happened before the query was sent is queued by now.
        self.drain()?;
        if self.asked.len() >= REMEMBERED && !self.asked.contains_key(&q.ifindex) {
            self.asked.clear();
        }
        self.asked.insert(q.ifindex, q.name.clone().into_bytes());
        if self.certified.contains(&q.ifindex) {
            log::debug!("{} (index {}): certified", q.name, q.ifindex);
            return Ok(Answer::Riding(Vec::new()));
        }
        let started = Instant::now();
        let a = self.scan(q.ifindex, &q.name)?;
        log::debug!(
            "{} (index {}): scanned in {:.1} ms: {a:?}",
            q.name,
            q.ifindex,
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(a)
    }

    /// One client: a question about a host link (ADD's policy check) or about a NIC a pod
    /// holds (DEL's and CHECK's, which the guard answers).
    fn serve_client(
        &mut self,
        client: UnixStream,
        guard: &mut crate::uppers_guard::Guard,
    ) -> io::Result<()> {
        client.set_nonblocking(false)?;
        client.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        client.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        let mut line = Vec::new();
        io::BufReader::new(&client)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)?;
        let answer = match serde_json::from_slice::<Query>(&line) {
            Ok(q) => self.answer(q)?,
            Err(e) => match serde_json::from_slice::<Watched>(&line) {
                Ok(Watched { watched }) if watched.netns != self.netns => {
                    Answer::Unknown("the watcher watches another network namespace".into())
                }
                Ok(Watched { watched }) => guard.vouch(&watched)?,
                Err(_) => Answer::Unknown(format!("the query does not parse: {e}")),
            },
        };
        let mut out = serde_json::to_vec(&answer).map_err(io::Error::other)?;
        out.push(b'\n');
        (&client).write_all(&out)
    }
}

/// Add `name` to a bounded set (cleared when full: it only saves a scan).
fn remember(set: &mut HashSet<Vec<u8>>, name: Vec<u8>) {
    if set.len() >= REMEMBERED {
        set.clear();
    }
    set.insert(name);
}
