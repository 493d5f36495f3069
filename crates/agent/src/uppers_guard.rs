//! The uppers watcher's guard of attached NICs: for the whole attachment, nothing another
//! namespace made rides a pod's NIC (issue 47). A pod with NET_ADMIN and no user namespace
//! gets an id for every pod's namespace from one dump of the host's links (IFLA_TARGET_NETNSID)
//! and can stack a `macvlan mode passthru` of its own namespace on a neighbour's NIC: it then
//! receives the neighbour's frames. Such a link is deleted as soon as the kernel reports it.
//!
//! How it is seen without a socket in every pod's namespace (a socket pins its namespace, and
//! a NIC comes home only when its pod's namespace dies): one route socket in the host's
//! namespace with NETLINK_LISTEN_ALL_NSID receives the link notifications of every namespace
//! the host has an id for, with that id; moving a NIC into a pod gives the pod's namespace one
//! (the move's RTM_DELLINK carries it). The kernel reports an upper linked to a NIC, from any
//! namespace, as an RTM_NEWLINK for the NIC in the NIC's namespace with no flag changed
//! (NETDEV_CHANGEUPPER) and nothing new in what the kernel announces of a link (its name, MTU
//! and state: `raw::Announced`), which tells it from ADD's own notifications of the NIC
//! (`Guard::could_be_an_upper`); our NICs in pods carry our tag as their alias. Such a
//! notification has the watcher look, for that NIC, in every other namespace
//! (`arrival::remove_foreign_riders`)
//! and delete what rides it there; lost notifications (ENOBUFS) have it look at every tagged
//! NIC of every namespace. A pod that rewrites its NIC's alias only drops its own guard (CHECK
//! and DEL still look); one that tags its own links only costs the watcher scans, one per
//! burst of notifications.
//!
//! DEL and CHECK ask it ([`Guard::vouch`]) before they search every namespace themselves: it
//! vouches for a NIC when it has heard every notification of the NIC's namespace since a
//! moment before the NIC left the host (no start and no loss since, or a search and removal
//! for that NIC after them), and each one about the NIC that could be an upper linked to it
//! was followed by a search and removal that succeeded. It remembers, per (namespace id, link
//! index), the last such notification and the last successful search, by the order it heard
//! them; every link of every namespace with an id counts, tagged or not, so a rewritten alias
//! makes it decline, never vouch wrongly.

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use rdma_host_device_core::link::raw::{self, RawLink};
use rdma_host_device_core::netlink_sync;
use rdma_host_device_core::netns::{self, Netns};
use rdma_host_device_core::state::{Tag, boottime_ns};
use rdma_host_device_core::uppers::{Answer, WatchedNic, arrival};
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// RTNLGRP_LINK: link notifications.
const RTNLGRP_LINK: u32 = 1;
/// SOL_NETLINK's NETLINK_LISTEN_ALL_NSID.
const NETLINK_LISTEN_ALL_NSID: libc::c_int = 8;
/// The receive buffer: link notifications of every pod's namespace.
const RCVBUF: libc::c_int = 16 << 20;
/// One notification datagram at most.
const DATAGRAM: usize = 64 << 10;
/// The file, beside the watcher's socket, that holds how many links the guard deleted: the
/// exporter serves it as `rdma_host_device_foreign_uppers_removed_total`.
pub const COUNTER_FILE: &str = "foreign-uppers-removed";
/// (namespace id, link index) pairs remembered: a bound, not a working size. Past it, the
/// guard forgets them all and counts that as a moment it might have missed something.
const REMEMBERED: usize = 1 << 16;

/// A link in a pod's namespace: the id the host has for that namespace, the link's index.
type Key = (i32, u32);

pub struct Guard {
    nl: Socket,
    buf: Vec<u8>,
    /// Links deleted since the watcher started.
    removed: u64,
    counter: PathBuf,
    /// Datagrams read (and losses): the order in which it heard things.
    heard: u64,
    /// The latest moment it may have missed a notification (its start, a loss, a forgetting):
    /// CLOCK_BOOTTIME, and `heard` then.
    blind_ns: u64,
    blind_heard: u64,
    /// Per link: the last notification that could be an upper linked to it (`heard`).
    touched_at: HashMap<Key, u64>,
    /// Per link: where the last search and removal that succeeded began (`heard`).
    cleared_at: HashMap<Key, u64>,
    /// Per link: what its last notification said ([`raw::Announced`]), as a fingerprint.
    /// Fingerprints that collide make two notifications look alike, which costs a search.
    said: HashMap<Key, u64>,
    fingerprints: RandomState,
}

impl Guard {
    /// Listen to every namespace's link notifications; count into `counter`.
    pub fn new(counter: PathBuf) -> io::Result<Guard> {
        let mut nl = Socket::new(NETLINK_ROUTE)?;
        nl.bind(&SocketAddr::new(0, 0))?;
        nl.add_membership(RTNLGRP_LINK)?;
        let on: libc::c_int = 1;
        for (level, opt, v) in [
            (libc::SOL_NETLINK, NETLINK_LISTEN_ALL_NSID, on),
            (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF),
        ] {
            // SAFETY: a valid socket fd and a pointer to an int that outlives the call.
            let rc = unsafe {
                libc::setsockopt(
                    nl.as_raw_fd(),
                    level,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc < 0 && opt == NETLINK_LISTEN_ALL_NSID {
                return Err(io::Error::last_os_error());
            }
        }
        nl.set_non_blocking(true)?;
        let g = Guard {
            nl,
            buf: vec![0; DATAGRAM],
            removed: 0,
            counter,
            heard: 0,
            blind_ns: now_ns(),
            blind_heard: 0,
            touched_at: HashMap::new(),
            cleared_at: HashMap::new(),
            said: HashMap::new(),
            fingerprints: RandomState::new(),
        };
        g.write_counter();
        Ok(g)
    }

    pub fn fd(&self) -> libc::c_int {
        self.nl.as_raw_fd()
    }

    /// Read what is queued; delete what another namespace stacked on a tagged NIC.
    pub fn drain(&mut self) -> io::Result<()> {
        // (the namespace's id in the host's, the NIC's index there, its name there)
        let mut touched: BTreeSet<(i32, u32, String)> = BTreeSet::new();
        let mut lost = false;
        loop {
            self.heard += 1;
            match self.recv() {
                Ok(None) => break,
                Ok(Some((n, nsid))) => {
                    // Messages of the host's own namespace carry no id: the watcher's other
                    // socket reads those.
                    let Some(nsid) = nsid else { continue };
                    let buf = std::mem::take(&mut self.buf);
                    let whole = self.heard_datagram(&buf[..n], nsid, &mut touched);
                    self.buf = buf;
                    lost |= !whole;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => lost = true,
                Err(e) => return Err(e),
            }
        }
        if lost {
            self.blind();
            log::warn!(
                "uppers guard: link notifications of the pods' namespaces were lost; looking at every attached NIC"
            );
            self.sweep();
        } else if !touched.is_empty() {
            self.look(&touched);
        }
        Ok(())
    }

    /// Whether nothing of another namespace rides `nic` as far as the guard can vouch (see
    /// the module's doc): [`Answer::Riding`] with nothing when it can, [`Answer::Unknown`]
    /// saying why not. What was queued before the question is read first.
    pub fn vouch(&mut self, nic: &WatchedNic) -> io::Result<Answer> {
        self.drain()?;
        let key = (nic.nsid, nic.ifindex);
        let cleared = self.cleared_at.get(&key).copied();
        let why_not = if let Some(t) = self.touched_at.get(&key)
            && cleared.is_none_or(|c| c < *t)
        {
            Some("something touched it that the guard did not follow with a search")
        } else if nic.since_ns < self.blind_ns && cleared.is_none_or(|c| c < self.blind_heard) {
            Some("the guard may have missed notifications since the NIC left the host")
        } else {
            None
        };
        Ok(match why_not {
            Some(w) => Answer::Unknown(format!("{} (index {}): {w}", nic.name, nic.ifindex)),
            None => Answer::Riding(Vec::new()),
        })
    }

    /// The messages of one datagram from namespace `nsid`: each that could be an upper linked
    /// to a link is a touch, and a tagged link so touched goes into `touched`. False when the
    /// datagram is cut short (as good as lost).
    fn heard_datagram(
        &mut self,
        datagram: &[u8],
        nsid: i32,
        touched: &mut BTreeSet<(i32, u32, String)>,
    ) -> bool {
        let Some(msgs) = raw::messages(datagram) else {
            return false;
        };
        for m in msgs {
            let Some((gone, l)) = raw::notification(m) else {
                continue;
            };
            let key = (nsid, l.index);
            if gone {
                self.said.remove(&key);
            } else if self.could_be_an_upper(key, m, &l) {
                self.touch(key);
                if l.alias.as_deref().and_then(Tag::decode).is_some() {
                    touched.insert((nsid, l.index, l.shown()));
                }
            }
        }
        true
    }

    /// Whether notification `m` of link `key` (`l`, as parsed) could be an upper linked to it or unlinked
    /// from it (and remember what it says). The kernel sends that as an RTM_NEWLINK for the
    /// link with no flag changed (NETDEV_CHANGEUPPER) that says what the link's previous
    /// notification said, as far as [`raw::Announced`] goes. So do other changes with no flag
    /// to show, but ADD's own (the link's name, MTU, operational state: ADD makes the first
    /// two, linkwatch the last) each say something new there, and the kernel makes no such
    /// change without a notification of its own after it. So a notification that says
    /// something new announces a change and costs no search; one that says nothing new, or
    /// follows nothing the guard heard of that link, could be an upper. An upper linked while
    /// such a change is under way (its notification then says the change) is searched for at
    /// the change's own notification, which then says nothing new: each change explains one
    /// notification, and the upper makes one more.
    fn could_be_an_upper(&mut self, key: Key, m: &[u8], l: &RawLink) -> bool {
        let said = self.fingerprints.hash_one(l.announced());
        if self.said.len() >= REMEMBERED && !self.said.contains_key(&key) {
            self.blind();
        }
        let before = self.said.insert(key, said);
        let announces = before.is_some_and(|b| b != said);
        netlink_sync::u32_at(m, 28) == Some(0) && !announces
    }

    /// A notification that could be an upper linked to `key`.
    fn touch(&mut self, key: Key) {
        if self.touched_at.len() >= REMEMBERED && !self.touched_at.contains_key(&key) {
            self.blind();
        }
        self.touched_at.insert(key, self.heard);
    }

    /// From here on, it vouches only for links it searched after this moment.
    fn blind(&mut self) {
        self.heard += 1;
        self.blind_ns = now_ns();
        self.blind_heard = self.heard;
        self.touched_at.clear();
        self.cleared_at.clear();
        self.said.clear();
    }

    /// One datagram: its length and the id of the namespace it comes from (`None`: the
    /// host's, or not the kernel's); `Ok(None)` when nothing is queued.
    fn recv(&mut self) -> io::Result<Option<(usize, Option<i32>)>> {
        // SAFETY: zeroed sockaddr_nl/msghdr/cmsg buffer are valid; the iovec and buffers
        // outlive the call.
        let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        let mut cbuf = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: self.buf.as_mut_ptr().cast(),
            iov_len: self.buf.len(),
        };
        // SAFETY: as above.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_name = (&mut from as *mut libc::sockaddr_nl).cast();
        hdr.msg_namelen = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = cbuf.as_mut_ptr().cast();
        hdr.msg_controllen = size_of_val(&cbuf) as _;
        loop {
            // SAFETY: hdr points at live buffers of the sizes it states.
            let n = unsafe { libc::recvmsg(self.nl.as_raw_fd(), &mut hdr, libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => return Ok(None),
                    _ => return Err(e),
                }
            }
            if hdr.msg_flags & libc::MSG_TRUNC != 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
            }
            // Not the kernel's (CAP_NET_ADMIN in the host may send here): no id is believed.
            if from.nl_pid != 0 {
                return Ok(Some((0, None)));
            }
            let mut nsid = None;
            // SAFETY: the CMSG_* walk stays within msg_control/msg_controllen the kernel set.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_NETLINK
                        && (*c).cmsg_type == NETLINK_LISTEN_ALL_NSID
                    {
                        nsid = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()));
                    }
                    c = libc::CMSG_NXTHDR(&hdr, c);
                }
            }
            return Ok(Some((n as usize, nsid)));
        }
    }

    /// For each (namespace id, NIC index, name): find that namespace and delete what rides
    /// the NIC from every other one.
    fn look(&mut self, touched: &BTreeSet<(i32, u32, String)>) {
        let host = match netlink_sync::route_socket() {
            Ok(s) => s,
            Err(e) => {
                log::warn!("uppers guard: a route socket: {e}");
                return;
            }
        };
        let mut host = host;
        for (path, label) in netns::others_on_node() {
            let Ok(ns) = Netns::open(&path) else { continue };
            let Ok(Some(id)) = raw::nsid_of(&mut host, ns.raw_fd()) else {
                continue;
            };
            for (_, index, name) in touched.iter().filter(|(n, _, _)| *n == id) {
                self.remove(&ns, &label, (id, *index), name);
            }
        }
    }

    /// Every tagged NIC of every namespace (after lost notifications).
    fn sweep(&mut self) {
        let Ok(mut host) = netlink_sync::route_socket() else {
            return;
        };
        for (path, label) in netns::others_on_node() {
            let Ok(ns) = Netns::open(&path) else { continue };
            let Ok(Some(id)) = raw::nsid_of(&mut host, ns.raw_fd()) else {
                continue;
            };
            let ours: Vec<(u32, String)> = match ns.within(raw::dump) {
                Ok(Ok(Some(links))) => links
                    .into_iter()
                    .filter(|l| l.alias.as_deref().and_then(Tag::decode).is_some())
                    .map(|l| (l.index, l.shown()))
                    .collect(),
                _ => continue,
            };
            for (index, name) in ours {
                self.remove(&ns, &label, (id, index), &name);
            }
        }
    }

    /// Search every other namespace for what rides link `key.1` of `ns` and delete it.
    fn remove(&mut self, ns: &Netns, label: &str, key: Key, name: &str) {
        let (began, index) = (self.heard, key.1);
        log::debug!(
            "uppers guard: searching every namespace for what rides {name} (index {index}) in {label}"
        );
        match arrival::scan_and_remove_foreign_riders(ns, index, name) {
            Ok(gone) => {
                if self.cleared_at.len() >= REMEMBERED && !self.cleared_at.contains_key(&key) {
                    self.blind();
                } else {
                    self.cleared_at.insert(key, began);
                }
                for what in &gone {
                    log::warn!(
                        "uppers guard: {name} (index {index}) in {label}, an attached NIC: {what} (something with NET_ADMIN in that namespace stacked it on another pod's NIC)"
                    );
                }
                if !gone.is_empty() {
                    self.removed += gone.len() as u64;
                    self.write_counter();
                }
            }
            Err(e) => log::warn!("uppers guard: {name} in {label}: {}", e.msg),
        }
    }

    /// The count, for the exporter: written to a temp file and renamed (root's 0700
    /// directory, beside the socket).
    fn write_counter(&self) {
        let tmp = self.counter.with_extension("tmp");
        let r = std::fs::write(&tmp, format!("{}\n", self.removed))
            .and_then(|()| std::fs::rename(&tmp, &self.counter));
        if let Err(e) = r {
            log::warn!("uppers guard: writing {}: {e}", self.counter.display());
        }
    }
}

/// CLOCK_BOOTTIME now; the end of time when it cannot be read (nothing is vouched for).
fn now_ns() -> u64 {
    boottime_ns().unwrap_or(u64::MAX)
}
