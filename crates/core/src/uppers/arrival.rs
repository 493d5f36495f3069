//! Checked on arrival: nothing of another namespace rides the NIC when it reaches the pod.
//!
//! ADD's policy check (`select::admit`: sysfs, the watcher or the full scan) sees the NIC as it
//! is at that moment, and the move comes later. A pod with NET_ADMIN in the node's user
//! namespace reaches the host's links through its namespace id (IFLA_LINK_NETNSID,
//! IFLA_TARGET_NETNSID): between the check and the move it can stack a macvlan, ipvlan or VLAN
//! of its own on the free NIC, which then arrives in the victim's pod with the attacker's
//! device riding it. No lock keeps it out, so ADD watches the window instead:
//!
//! - [`Sentry::watch`], before the policy check, subscribes to the host's link notifications
//!   (RTNLGRP_LINK). The kernel reports every upper linked to or unlinked from a link, in any
//!   namespace, as an RTM_NEWLINK for that link in the link's own namespace (see the agent's
//!   `uppers_watch.rs`), queued before the change returns to whoever made it;
//! - after the move, [`Sentry::touched`] reads what was queued up to the RTM_DELLINK the move
//!   sent: nothing about the NIC (but the "went down" the move itself sends), and the window was
//!   clean; anything else (or notifications lost) and ADD asks [`riding_in`] where the NIC is
//!   now, the pod, through the full scan (every namespace of the node: the cost of the scan
//!   only when something touched the NIC during the window, never on a clean ADD).
//!
//! After the NIC arrived, for the whole attachment: an upper linked to it from another
//! namespace needs an id for the pod's namespace in the attacker's, which a NET_ADMIN pod
//! without a user namespace gets without any process or file of the pod's (one RTM_GETLINK
//! dump of the host with IFLA_TARGET_NETNSID 0 allocates, in its own namespace, an id for
//! every namespace a host veth's peer is in: every pod's). [`foreign_riders`] finds such
//! uppers (CHECK fails on them), [`remove_foreign_riders`] deletes them (DEL, before the NIC
//! leaves; the agent's uppers watcher, as soon as the kernel reports the NIC's new upper).
//! Both search every namespace, unless the watcher's guard vouches that it heard everything
//! about the NIC since ADD and followed up (so a DEL or CHECK costs the same beside 300 pods).

use crate::error::{Code, Error, Result};
use crate::link::raw::{self, RawLink};
use crate::netlink_sync;
use crate::netns::{self, Netns};
use crate::state::Since;
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// RTNLGRP_LINK: link notifications.
const RTNLGRP_LINK: u32 = 1;
/// The receive buffer asked for: the link notifications of a busy node during one ADD.
const RCVBUF: libc::c_int = 4 << 20;
/// One notification datagram at most.
const DATAGRAM: usize = 64 << 10;

/// Link notifications of the calling thread's namespace (the host's) since [`Sentry::watch`],
/// about one host link.
pub struct Sentry {
    nl: Socket,
    index: u32,
    name: String,
}

impl Sentry {
    /// Start listening, in the calling thread's namespace (the host's), for anything that
    /// touches host link `index` (`name` in messages). Before the policy check.
    pub fn watch(index: u32, name: &str) -> Result<Sentry> {
        let open = || -> io::Result<Socket> {
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
            Ok(nl)
        };
        let nl = open().map_err(|e| {
            Error::new(
                Code::Netlink,
                format!("cannot listen for the host's link notifications while {name} is handed over: {e}"),
            )
        })?;
        Ok(Sentry {
            nl,
            index,
            name: name.to_owned(),
        })
    }

    /// After the move: why the NIC may have been touched between [`Sentry::watch`] and the
    /// move (a notification about it, or about a host link riding it; notifications lost; no
    /// sign of the move), `None` when nothing did.
    pub fn touched(&self) -> Option<String> {
        let mut buf: Vec<u8> = Vec::with_capacity(DATAGRAM);
        let mut why = None;
        loop {
            buf.clear();
            match self.nl.recv_from(&mut buf, libc::MSG_TRUNC) {
                Ok((n, _)) if n > buf.len() => {
                    why.get_or_insert_with(|| "a link notification was cut short".to_owned());
                }
                // Not the kernel's (a process with CAP_NET_ADMIN in the host's namespace may
                // send to this socket): never read as the move, which would end the window
                // early; the full scan decides instead.
                Ok((_, from)) if from.port_number() != 0 => {
                    why.get_or_insert_with(|| {
                        format!(
                            "a message not from the kernel (netlink port {}) reached the link notification socket",
                            from.port_number()
                        )
                    });
                }
                Ok(_) => {
                    let Some(msgs) = raw::messages(&buf) else {
                        why.get_or_insert_with(|| "a link notification does not parse".to_owned());
                        continue;
                    };
                    for m in msgs {
                        let Some((gone, l)) = raw::notification(m) else {
                            continue;
                        };
                        match self.judge(gone, &l, m) {
                            Seen::Moved => return why,
                            Seen::Touched(w) => {
                                why.get_or_insert(w);
                            }
                            Seen::Nothing => {}
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    why.get_or_insert_with(|| "link notifications were lost (ENOBUFS)".to_owned());
                }
                Err(e) => {
                    return Some(format!("reading the host's link notifications: {e}"));
                }
            }
        }
        Some(why.unwrap_or_else(|| {
            format!(
                "no notification of {}'s move was read: what happened to it meanwhile is not known",
                self.name
            )
        }))
    }

    /// One notification, `msg`, about link `l` (`gone`: RTM_DELLINK).
    fn judge(&self, gone: bool, l: &RawLink, msg: &[u8]) -> Seen {
        if l.index == self.index {
            if gone {
                return Seen::Moved;
            }
            if raw::went_down(msg) {
                return Seen::Nothing;
            }
            return Seen::Touched(format!(
                "the host reported a change of {} (an upper linked to or unlinked from it, or another change) while it was handed over",
                self.name
            ));
        }
        // A veth's IFLA_LINK is its peer, not a lower: a peer's carrier follows the NIC's.
        if l.rides(self.index, None) {
            return Seen::Touched(format!(
                "the host reported a change of {} {}, which rides {}, while it was handed over",
                l.kind.as_deref().unwrap_or("link"),
                l.shown(),
                self.name
            ));
        }
        Seen::Nothing
    }
}

enum Seen {
    /// The RTM_DELLINK of the move: what comes after is not the window's.
    Moved,
    Touched(String),
    Nothing,
}

/// What rides link `index` of namespace `ns` (`name` there, for messages) from anywhere on
/// the node, in words: links of `ns` stacked on it, and links of every other namespace (the
/// host's among them) whose lower is that index in the namespace they number as `ns`'s. Run
/// in the host's namespace. The full scan: one setns and a raw link dump per namespace.
pub fn riding_in(ns: &Netns, index: u32, name: &str) -> Result<Vec<String>> {
    let label = ns.path().display().to_string();
    // Its own namespace: whatever rides it there (a device made there from outside).
    let own = ns
        .within(|| {
            raw::dump_where(&mut netlink_sync::route_socket()?, |upper| {
                upper.rides(index, None) && upper.index != index
            })
        })?
        .map_err(|e| failed(name, &label, e))?;
    let mut why: Vec<String> = own
        .into_iter()
        .map(|upper| {
            format!(
                "{} {} in {label} rides it",
                upper.kind.as_deref().unwrap_or("link"),
                upper.shown()
            )
        })
        .collect();
    why.extend(foreign(ns, index, name, false)?);
    Ok(why)
}

/// While the NIC is attached (CHECK): the links of the node's other namespaces (the host's
/// among them) that ride link `index` of the pod's namespace `ns` (`name` there), in words;
/// empty when none. Something another namespace made rides a pod's NIC only through an id
/// that namespace was given for the pod's (RTM_NEWNSID, or one the kernel allocates when a
/// NET_ADMIN pod dumps the host's links with IFLA_TARGET_NETNSID): it gets the pod's frames
/// (a `macvlan mode passthru` gets all of them). Run in the host's namespace. The watcher's
/// guard at `socket` answers when it can vouch for the NIC since `since` (see [`guarded`]);
/// else the full scan.
pub fn foreign_riders(
    socket: &Path,
    since: Option<&Since>,
    ns: &Netns,
    index: u32,
    name: &str,
) -> Result<Vec<String>> {
    guarded_or_searched(socket, since, ns, index, name, false)
}

/// The same, each one found deleted in its own namespace (DEL, before the NIC leaves the
/// pod): what was removed, in words. A link that cannot be deleted is an error naming it; one
/// gone meanwhile is not.
pub fn remove_foreign_riders(
    socket: &Path,
    since: Option<&Since>,
    ns: &Netns,
    index: u32,
    name: &str,
) -> Result<Vec<String>> {
    guarded_or_searched(socket, since, ns, index, name, true)
}

/// Nothing when the guard vouches for the NIC; else the search (and removal when `remove`).
fn guarded_or_searched(
    socket: &Path,
    since: Option<&Since>,
    ns: &Netns,
    index: u32,
    name: &str,
    remove: bool,
) -> Result<Vec<String>> {
    if guarded(socket, since, ns, index, name) {
        return Ok(Vec::new());
    }
    foreign(ns, index, name, remove)
}

/// The full scan and removal, without asking anyone: the guard's own, when a notification
/// says something was stacked on a NIC it watches.
pub fn scan_and_remove_foreign_riders(ns: &Netns, index: u32, name: &str) -> Result<Vec<String>> {
    foreign(ns, index, name, true)
}

/// Whether the uppers watcher's guard vouches that nothing of another namespace rides link
/// `index` of `ns`: it has heard every link notification of `ns` since `since` (a moment
/// before the NIC left the host, from ADD's record; the host has had an id for `ns`, and so
/// heard it, since the move at the latest), and every one about this link that could be an
/// upper linked to it was followed by its search and removal, which succeeded. The kernel
/// queues a notification before the change returns to whoever made it, so whatever was
/// stacked before this question is among what the guard read before answering. Anything less
/// (no record of when, another boot, no id for `ns`, no guard, a guard that started later or
/// lost notifications since, a notification it did not follow: the pod rewrote its NIC's
/// alias, which the guard goes by) and the caller searches itself. The cost of the search,
/// which grows with the pods, is paid only then.
fn guarded(socket: &Path, since: Option<&Since>, ns: &Netns, index: u32, name: &str) -> bool {
    let Some(since) = since.filter(|s| s.this_boot()) else {
        return false;
    };
    let nsid = netlink_sync::route_socket().and_then(|mut s| raw::nsid_of(&mut s, ns.raw_fd()));
    let asked = match nsid {
        Ok(Some(nsid)) => super::own_netns().and_then(|netns| {
            super::client::ask_guard(
                socket,
                &super::WatchedNic {
                    netns,
                    nsid,
                    ifindex: index,
                    name: name.to_owned(),
                    since_ns: since.ns,
                },
                super::DEADLINE,
            )
        }),
        Ok(None) => Err(io::Error::other(
            "the host has no id for the pod's namespace",
        )),
        Err(e) => Err(e),
    };
    match asked {
        Ok(()) => {
            log::debug!(
                "the uppers guard vouches for {name}: nothing of another namespace rides it"
            );
            true
        }
        Err(e) => {
            log::debug!(
                "the uppers guard does not vouch for {name} ({e}); searching every namespace for devices riding it"
            );
            false
        }
    }
}

fn failed(name: &str, label: &str, e: io::Error) -> Error {
    Error::new(
        Code::Netlink,
        format!("looking for devices riding {name} in {label}: {e}"),
    )
}

/// Links of every namespace but `ns` whose lower is link `index` of `ns`; deleted there when
/// `remove`.
fn foreign(ns: &Netns, index: u32, name: &str, remove: bool) -> Result<Vec<String>> {
    let mut others = vec![(Netns::current()?, "the host".to_owned())];
    for (path, label) in netns::others_on_node() {
        // Gone since it was listed: nothing rides the NIC from there any more.
        if let Ok(other) = Netns::open(&path) {
            others.push((other, label));
        }
    }
    let mut why = Vec::new();
    for (other, label) in others {
        if other.same_as(ns) {
            continue;
        }
        let seen: io::Result<Vec<(RawLink, io::Result<()>)>> = other.within(|| {
            let mut sock = netlink_sync::route_socket()?;
            // The dump first: filling in a link whose lower is in another namespace gives
            // that namespace an id here if it had none, which the question then reads. Read
            // to its end whatever its size, keeping only the candidates: a namespace is never
            // passed over for holding many links.
            let candidates = raw::dump_where(&mut sock, |u| {
                u.lower_netnsid
                    .is_some_and(|other| u.rides(index, Some(other)))
            })?;
            if candidates.is_empty() {
                return Ok(Vec::new());
            }
            let Some(id) = raw::nsid_of(&mut sock, ns.raw_fd())? else {
                return Ok(Vec::new());
            };
            Ok(candidates
                .into_iter()
                .filter(|u| u.lower_netnsid == Some(id))
                .map(|u| {
                    let done = if remove {
                        raw::delete_on(&mut sock, u.index)
                    } else {
                        Ok(())
                    };
                    (u, done)
                })
                .collect())
        })?;
        for (upper, done) in seen.map_err(|e| failed(name, &label, e))? {
            let what = format!(
                "{} {} (index {}) in {label}",
                upper.kind.as_deref().unwrap_or("link"),
                upper.shown(),
                upper.index
            );
            if let Err(e) = done {
                return Err(Error::new(
                    Code::Netlink,
                    format!("{what} rides {name} and cannot be deleted: {e}"),
                ));
            }
            why.push(if remove {
                format!("{what} rode it and was deleted")
            } else {
                format!(
                    "{} {} in {label} rides it",
                    upper.kind.as_deref().unwrap_or("link"),
                    upper.shown()
                )
            });
        }
    }
    Ok(why)
}

/// ADD, right after the NIC arrived in the pod (`pod_ns`) at `index` as `name`: refuse (107)
/// if anything of another namespace rides it, naming what, so that ADD rolls back and brings
/// it home. Scans only when `sentry` saw the NIC touched during the window.
pub fn check(sentry: &Sentry, pod_ns: &Netns, index: u32, name: &str) -> Result<()> {
    let Some(why) = sentry.touched() else {
        return Ok(());
    };
    log::info!("{why}; looking for devices riding {name} from anywhere on the node");
    let riding = riding_in(pod_ns, index, name)?;
    if riding.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        Code::NotAllowed,
        format!(
            "{} arrived in {} with devices of other namespaces riding it ({}): something with NET_ADMIN on this node (a pod without a user namespace, through a network namespace id) stacked them on it while it was handed over; giving it back",
            sentry.name,
            pod_ns.path().display(),
            riding.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36's attack pass: a forged RTM_DELLINK for the NIC's index, sent to the sentry's
    /// socket by a process (root here; CAP_NET_ADMIN in the host's namespace) before the real
    /// move, was read as the move: the window ended there, "clean", and whatever came after
    /// (an upper stacked meanwhile) was never looked at. Only the kernel's messages count now.
    #[test]
    fn a_forged_dellink_is_not_taken_for_the_move() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("RHD_TESTS_MUST_RUN").is_none(),
                "needs root (CAP_NET_ADMIN to send to a netlink socket)"
            );
            eprintln!("skipped: not root");
            return;
        }
        // Index 1 (lo): no link is touched, the message is only sent.
        let sentry = Sentry::watch(1, "lo").unwrap();
        let mut at = SocketAddr::new(0, 0);
        sentry.nl.get_address(&mut at).unwrap();
        let mut msg = Vec::new();
        msg.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
        msg.extend_from_slice(&libc::RTM_DELLINK.to_ne_bytes()); // nlmsg_type
        msg.extend_from_slice(&[0; 10]); // flags, seq, pid
        msg.extend_from_slice(&[0; 4]); // ifi_family, pad, ifi_type
        msg.extend_from_slice(&1i32.to_ne_bytes()); // ifi_index
        msg.extend_from_slice(&[0; 8]); // ifi_flags, ifi_change
        let mut forger = Socket::new(NETLINK_ROUTE).unwrap();
        forger.bind_auto().unwrap();
        let sent = forger.send_to(&msg, &SocketAddr::new(at.port_number(), 0), 0);
        sent.unwrap();
        let why = sentry.touched();
        let why = why.expect("the forged move is not taken for a clean window");
        assert!(why.contains("not from the kernel"), "{why}");
    }
}
