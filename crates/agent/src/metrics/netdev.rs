//! A pod interface's netdev counters (IFLA_STATS64), read with one synchronous RTM_GETLINK on
//! a route netlink socket ([`SyncSocket`]) opened in the calling thread's netns (the exporter calls it from
//! inside the pod's netns). The socket lives for one query and is closed on every way out.

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage, State};
use netlink_sys::protocols::NETLINK_ROUTE;
use std::time::Duration;

use rdma_host_device_core::netlink_sync::SyncSocket;

/// What the exporter reports about one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetdevStats {
    pub name: String,
    pub index: u32,
    pub oper_up: bool,
    /// IFF_UP: set up by whoever holds it.
    pub admin_up: bool,
    /// IFF_LOWER_UP: the carrier (the device health judge reads it in the pod's netns).
    pub carrier: bool,
    pub mtu: u32,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub multicast: u64,
}

/// Why a lookup failed: the interface is not there (ENODEV), or anything else.
#[derive(Debug, PartialEq, Eq)]
pub enum NetdevError {
    NotFound,
    Other(String),
}

impl std::fmt::Display for NetdevError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetdevError::NotFound => f.write_str("no such interface"),
            NetdevError::Other(m) => f.write_str(m),
        }
    }
}

/// The interface with ifindex `index` (when known: a pod cannot change it) or else by `name`,
/// in the calling thread's netns.
pub fn stats(
    index: Option<u32>,
    name: &str,
    timeout: Duration,
) -> Result<NetdevStats, NetdevError> {
    let other = |what: &str, e: std::io::Error| NetdevError::Other(format!("{what}: {e}"));
    let mut socket =
        SyncSocket::open(NETLINK_ROUTE, timeout).map_err(|e| other("rtnetlink socket", e))?;
    let seq = socket.next_seq();
    let mut msg = LinkMessage::default();
    match index {
        Some(i) => msg.header.index = i,
        None => msg.attributes.push(LinkAttribute::IfName(name.to_string())),
    }
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = seq;
    let mut req = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetLink(msg)),
    );
    req.finalize();
    let mut bytes = vec![0; req.buffer_len()];
    req.serialize(&mut bytes);
    socket.send(&bytes).map_err(|e| other("send", e))?;
    loop {
        let buf = socket.recv("RTM_GETLINK").map_err(|e| other("recv", e))?;
        let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(buf)
            .map_err(|e| NetdevError::Other(format!("decode: {e}")))?;
        if reply.header.sequence_number != seq {
            continue;
        }
        return match reply.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => Ok(from_message(&m)),
            NetlinkPayload::Error(e) => match e.code.map(|c| c.get().saturating_abs()) {
                Some(libc::ENODEV) => Err(NetdevError::NotFound),
                Some(n) => Err(NetdevError::Other(
                    std::io::Error::from_raw_os_error(n).to_string(),
                )),
                None => Err(NetdevError::NotFound),
            },
            other => Err(NetdevError::Other(format!("unexpected reply {other:?}"))),
        };
    }
}

fn from_message(m: &LinkMessage) -> NetdevStats {
    let mut s = NetdevStats {
        index: m.header.index,
        admin_up: m.header.flags.contains(LinkFlags::Up),
        carrier: m.header.flags.contains(LinkFlags::LowerUp),
        ..Default::default()
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => s.name = n.clone(),
            LinkAttribute::Mtu(v) => s.mtu = *v,
            LinkAttribute::OperState(st) => s.oper_up = matches!(st, State::Up | State::Unknown),
            LinkAttribute::Stats64(st) => {
                s.rx_bytes = st.rx_bytes;
                s.tx_bytes = st.tx_bytes;
                s.rx_packets = st.rx_packets;
                s.tx_packets = st.tx_packets;
                s.rx_errors = st.rx_errors;
                s.tx_errors = st.tx_errors;
                s.rx_dropped = st.rx_dropped;
                s.tx_dropped = st.tx_dropped;
                s.multicast = st.multicast;
            }
            _ => {}
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_of_this_netns_has_counters() {
        // Every netns has lo at index 1; root is not needed to read it.
        let s = stats(Some(1), "lo", Duration::from_secs(2)).unwrap();
        assert_eq!(s.name, "lo");
        assert_eq!(s.index, 1);
        let by_name = stats(None, "lo", Duration::from_secs(2)).unwrap();
        assert_eq!(by_name.index, 1);
        assert_eq!(
            stats(None, "no-such-if0", Duration::from_secs(2)),
            Err(NetdevError::NotFound)
        );
        assert_eq!(
            stats(Some(999_999), "x", Duration::from_secs(2)),
            Err(NetdevError::NotFound)
        );
    }
}
