//! Announce the pod's addresses on its segment once they are applied, as sriov-cni does: a
//! gratuitous ARP for each IPv4 address and an unsolicited neighbour advertisement (Override
//! flag set) for each IPv6 address, sent from the pod's interface. A neighbour or switch that
//! knew the address at another MAC (the pod rescheduled, the NIC replaced) updates at once
//! instead of sending to the old MAC until its cache entry times out.
//!
//! The frames are built here and sent through one AF_PACKET raw socket opened inside the pod's
//! network namespace and addressed to the interface by index, so nothing depends on routes or
//! source-address selection. Announcing is best effort: a failure is logged as a warning and
//! never fails ADD (the addresses work without it; neighbours just learn them later).

use rdma_host_device_core::netns::Netns;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV6: u16 = 0x86dd;
const BROADCAST: [u8; 6] = [0xff; 6];
/// ff02::1, all nodes, and its Ethernet multicast MAC.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

/// Send one announcement per address in `addrs` out of interface `ifindex` (MAC `mac`, the
/// "aa:bb:..." form) in `ns`. Logs what was sent, and a warning for anything that could not be.
pub fn announce(ns: &Netns, ifname: &str, ifindex: u32, mac: &str, addrs: &[IpAddr]) {
    if addrs.is_empty() {
        return;
    }
    let Some(mac) = parse_mac(mac) else {
        log::warn!("not announcing {ifname}'s addresses: it has no Ethernet MAC ({mac:?})");
        return;
    };
    // The socket is made in the pod's namespace (and stays bound to it); it is used and
    // dropped from the plugin's own, so the child that `Linger` forks is no process of the
    // pod's netns (a DEL looking for processes that keep a pod's netns alive must not find
    // the plugin's).
    let sent = ns
        .within(open_packet_socket)
        .map(|opened| -> std::io::Result<Vec<String>> {
            let sock = Linger(Some(opened?));
            let sock = sock
                .0
                .as_ref()
                .ok_or_else(|| std::io::Error::other("no socket"))?;
            let mut failed = Vec::new();
            for ip in addrs {
                let (frame, dst, proto) = match ip {
                    IpAddr::V4(v4) => (garp(mac, *v4), BROADCAST, ETH_P_ARP),
                    IpAddr::V6(v6) => (unsolicited_na(mac, *v6), ALL_NODES_MAC, ETH_P_IPV6),
                };
                if let Err(e) = send(sock, ifindex, dst, proto, &frame) {
                    failed.push(format!("{ip}: {e}"));
                }
            }
            Ok(failed)
        });
    let kinds = "gratuitous ARP / unsolicited neighbour advertisement";
    match sent {
        Ok(Ok(failed)) if failed.is_empty() => {
            log::info!("announced {addrs:?} from {ifname} ({kinds})")
        }
        Ok(Ok(failed)) => log::warn!(
            "could not announce some of {ifname}'s addresses ({kinds}): {}; neighbours learn them on first use",
            failed.join("; ")
        ),
        Ok(Err(e)) => log::warn!(
            "could not announce {ifname}'s addresses ({kinds}): packet socket: {e}; neighbours learn them on first use"
        ),
        Err(e) => log::warn!("could not announce {ifname}'s addresses: {e}"),
    }
}

/// A packet socket whose last close costs the closer an RCU grace period (`packet_release`
/// calls `synchronize_net()`: 15 ms here, a third of an ADD+DEL). On drop, a forked child takes
/// over the last reference: it closes everything else (so the runtime's pipes see EOF), waits a
/// moment for the plugin's own close, and pays the grace period after the plugin has answered.
/// If fork fails, the plugin simply pays it itself.
struct Linger(Option<OwnedFd>);

impl Drop for Linger {
    fn drop(&mut self) {
        let Some(fd) = self.0.take() else { return };
        let raw = fd.as_raw_fd();
        // SAFETY: the child only makes async-signal-safe calls (close_range, nanosleep, _exit)
        // before it exits, as a child of a multi-threaded process must.
        if unsafe { libc::fork() } == 0 {
            unsafe {
                let max = libc::c_uint::MAX;
                if raw > 0 {
                    libc::syscall(libc::SYS_close_range, 0u32, (raw - 1) as libc::c_uint, 0u32);
                }
                libc::syscall(libc::SYS_close_range, (raw + 1) as libc::c_uint, max, 0u32);
                let t = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 300_000_000,
                };
                libc::nanosleep(&t, std::ptr::null_mut());
                libc::_exit(0);
            }
        }
        drop(fd);
    }
}

/// The NIC's MAC, if it has one to announce from (not all zeros).
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    rdma_host_device_core::link::parse_mac(s).filter(|m| *m != [0; 6])
}

fn open_packet_socket() -> std::io::Result<OwnedFd> {
    // Protocol 0: a send-only packet socket (it receives nothing).
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn send(
    sock: &OwnedFd,
    ifindex: u32,
    dst: [u8; 6],
    proto: u16,
    frame: &[u8],
) -> std::io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto.to_be();
    sll.sll_ifindex = i32::try_from(ifindex).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&dst);
    // SAFETY: frame and sll are valid for the lengths given.
    let n = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn ethernet(dst: [u8; 6], src: [u8; 6], proto: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(86);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&proto.to_be_bytes());
    f
}

/// A gratuitous ARP (RFC 5227's announcement): a broadcast request whose sender and target
/// protocol address are both `ip`.
fn garp(mac: [u8; 6], ip: Ipv4Addr) -> Vec<u8> {
    let mut f = ethernet(BROADCAST, mac, ETH_P_ARP);
    f.extend_from_slice(&1u16.to_be_bytes()); // hardware: Ethernet
    f.extend_from_slice(&0x0800u16.to_be_bytes()); // protocol: IPv4
    f.extend_from_slice(&[6, 4]);
    f.extend_from_slice(&1u16.to_be_bytes()); // request
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip.octets());
    f
}

/// An unsolicited neighbour advertisement (RFC 4861 7.2.6): from `ip` to all nodes, hop limit
/// 255, Override set, with the target link-layer address option.
fn unsolicited_na(mac: [u8; 6], ip: Ipv6Addr) -> Vec<u8> {
    let mut icmp = vec![136, 0, 0, 0, 0x20, 0, 0, 0]; // type NA, code, checksum, flags O
    icmp.extend_from_slice(&ip.octets());
    icmp.extend_from_slice(&[2, 1]); // option: target link-layer address, 8 bytes
    icmp.extend_from_slice(&mac);
    let sum = icmpv6_checksum(ip, ALL_NODES, &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());

    let mut f = ethernet(ALL_NODES_MAC, mac, ETH_P_IPV6);
    f.extend_from_slice(&[0x60, 0, 0, 0]); // version 6, no traffic class or flow label
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]); // ICMPv6, hop limit 255
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&ALL_NODES.octets());
    f.extend_from_slice(&icmp);
    f
}

/// The ICMPv6 checksum over the IPv6 pseudo-header and the message (RFC 8200 8.1).
fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut data = Vec::with_capacity(40 + msg.len());
    data.extend_from_slice(&src.octets());
    data.extend_from_slice(&dst.octets());
    data.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    data.extend_from_slice(&[0, 0, 0, 58]);
    data.extend_from_slice(msg);
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x05];

    #[test]
    fn garp_names_the_address_twice() {
        let f = garp(MAC, Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(f.len(), 42);
        assert_eq!(&f[..6], &BROADCAST);
        assert_eq!(&f[12..14], &[0x08, 0x06]);
        assert_eq!(&f[20..22], &[0, 1]);
        assert_eq!(&f[22..28], &MAC);
        assert_eq!(&f[28..32], &[10, 1, 2, 3]);
        assert_eq!(&f[38..42], &[10, 1, 2, 3]);
    }

    #[test]
    fn na_checksum_verifies() {
        let ip: Ipv6Addr = "fd00::5".parse().unwrap();
        let f = unsolicited_na(MAC, ip);
        assert_eq!(f.len(), 14 + 40 + 32);
        assert_eq!(f[14 + 7], 255, "hop limit");
        let icmp = &f[54..];
        assert_eq!(icmp[0], 136);
        // Summing with the checksum in place gives 0xffff, i.e. a zero complement.
        assert_eq!(icmpv6_checksum(ip, ALL_NODES, icmp), 0);
    }

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:00:00:00:05"), Some(MAC));
        assert_eq!(parse_mac(""), None);
        assert_eq!(parse_mac("00:00:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:05:06"), None);
    }
}
