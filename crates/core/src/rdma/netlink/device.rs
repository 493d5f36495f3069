//! Which RDMA devices and ports this netns sees: `RDMA_NLDEV_CMD_GET` (devices),
//! `RDMA_NLDEV_CMD_PORT_GET` (ports, with the netdev each is paired with) and the uverbs
//! `GET_CHARDEV` query (a device's driver family), with the decoders of their replies.
//!
//! A port reports its netdev only if that netdev is in the socket's netns; in exclusive mode a
//! device is only listed in its own netns.

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

use super::wire::{
    ReqAttr, attr, cmd, decode_all, each_attr, get_str, get_u8, get_u32, get_u64, required,
};
use super::{RdmaNlError, RdmaSocket};

/// An RDMA device as `RDMA_NLDEV_CMD_GET` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    /// The kernel's device index; the first device is 0.
    pub index: u32,
    pub name: String,
    pub node_guid: Option<u64>,
    /// `RDMA_NODE_*`: 1 IB CA (also RoCE), 4 RNIC (iWARP).
    pub node_type: Option<u8>,
    /// "roce", "iw", "ib", "opa" or "usnic" (from the first port).
    pub protocol: Option<String>,
    /// Driver family ("mlx5", "rxe", "siw", ...) from the uverbs chardev query; None when
    /// ib_uverbs is absent or the kernel does not say. Filled by `devices()` only.
    pub driver: Option<String>,
    /// Its uverbs char device (`uverbs0`: `/dev/infiniband/uverbs0`), from the same query: the
    /// kernel numbers it, no pod can rename it (the CDI spec names devices by it).
    pub uverbs: Option<String>,
    pub port_count: Option<u32>,
}

/// One port of an RDMA device as `RDMA_NLDEV_CMD_PORT_GET` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    pub dev_index: u32,
    pub dev_name: String,
    pub port: u32,
    /// IB port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.
    pub state: Option<u8>,
    /// IB physical state: 3 DISABLED, 5 LINK_UP, ...
    pub phys_state: Option<u8>,
    /// The paired netdev; absent when it lives in another netns than the socket.
    pub netdev_index: Option<u32>,
    pub netdev_name: Option<String>,
}

impl RdmaSocket {
    /// Every RDMA device visible from this netns, with its driver and uverbs char device when
    /// the kernel says: one `GET` dump, then one uverbs `GET_CHARDEV` per device (which loads
    /// ib_uverbs if needed).
    pub fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaNlError> {
        let mut devices = self.device_list()?;
        for dev in &mut devices {
            // Best effort: needs ib_uverbs (the kernel loads it on demand).
            match self.uverbs_chardev(dev.index) {
                Ok(Some(body)) => {
                    dev.driver = driver_from_attrs(&body).unwrap_or(None);
                    dev.uverbs = uverbs_from_attrs(&body);
                }
                Ok(None) => {}
                Err(e) => {
                    log::debug!("no uverbs char device for RDMA device {}: {e}", dev.name)
                }
            }
        }
        Ok(devices)
    }

    /// The devices visible from this netns, without the per-device driver query (one dump).
    pub fn device_list(&mut self) -> Result<Vec<RdmaDevice>, RdmaNlError> {
        let bodies = self.request("dev get", cmd::GET, NLM_F_REQUEST | NLM_F_DUMP, &[])?;
        decode_all(&bodies, device_from_attrs)
    }

    pub fn device_by_name(&mut self, name: &str) -> Result<Option<RdmaDevice>, RdmaNlError> {
        Ok(self.devices()?.into_iter().find(|d| d.name == name))
    }

    /// Every port of every device visible from this netns. The kernel dumps ports one device
    /// at a time (`PORT_GET` without a device index is EINVAL), so this is one dump per device.
    pub fn ports(&mut self) -> Result<Vec<RdmaPort>, RdmaNlError> {
        let mut ports = Vec::new();
        for dev in self.device_list()? {
            match self.ports_of(dev.index) {
                Ok(some) => ports.extend(some),
                // The device went away between the two dumps.
                Err(RdmaNlError::Kernel {
                    errno: libc::EINVAL,
                    ..
                }) => {
                    log::debug!("RDMA device {} vanished while listing ports", dev.name)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(ports)
    }

    /// The ports of one device (one dump).
    pub fn ports_of(&mut self, dev_index: u32) -> Result<Vec<RdmaPort>, RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        let bodies = self.request("port get", cmd::PORT_GET, NLM_F_REQUEST | NLM_F_DUMP, &req)?;
        decode_all(&bodies, port_from_attrs)
    }

    /// The reply to a uverbs `GET_CHARDEV` of one device (driver ID, char device name).
    fn uverbs_chardev(&mut self, dev_index: u32) -> Result<Option<Vec<u8>>, RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::Str(attr::CHARDEV_TYPE, "uverbs"),
        ];
        let bodies = self.request(
            "chardev get",
            cmd::GET_CHARDEV,
            NLM_F_REQUEST | NLM_F_ACK,
            &req,
        )?;
        Ok(bodies.into_iter().next())
    }
}

pub(super) fn device_from_attrs(body: &[u8]) -> Result<RdmaDevice, RdmaNlError> {
    let (mut index, mut name) = (None, None);
    let (mut node_guid, mut node_type, mut protocol, mut port_count) = (None, None, None, None);
    each_attr(body, |kind, v| {
        match kind {
            attr::DEV_INDEX => index = Some(get_u32(kind, v)?),
            attr::DEV_NAME => name = Some(get_str(v)),
            attr::PORT_INDEX => port_count = Some(get_u32(kind, v)?),
            attr::NODE_GUID => node_guid = Some(get_u64(kind, v)?),
            attr::DEV_NODE_TYPE => node_type = Some(get_u8(kind, v)?),
            attr::DEV_PROTOCOL => protocol = Some(get_str(v)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(RdmaDevice {
        index: required(index, "device index")?,
        name: required(name, "device name")?,
        node_guid,
        node_type,
        protocol,
        driver: None,
        uverbs: None,
        port_count,
    })
}

pub(super) fn port_from_attrs(body: &[u8]) -> Result<RdmaPort, RdmaNlError> {
    let (mut dev_index, mut dev_name, mut port) = (None, None, None);
    let (mut state, mut phys_state, mut netdev_index, mut netdev_name) = (None, None, None, None);
    each_attr(body, |kind, v| {
        match kind {
            attr::DEV_INDEX => dev_index = Some(get_u32(kind, v)?),
            attr::DEV_NAME => dev_name = Some(get_str(v)),
            attr::PORT_INDEX => port = Some(get_u32(kind, v)?),
            attr::PORT_STATE => state = Some(get_u8(kind, v)?),
            attr::PORT_PHYS_STATE => phys_state = Some(get_u8(kind, v)?),
            attr::NDEV_INDEX => netdev_index = Some(get_u32(kind, v)?),
            attr::NDEV_NAME => netdev_name = Some(get_str(v)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(RdmaPort {
        dev_index: required(dev_index, "device index")?,
        dev_name: required(dev_name, "device name")?,
        port: required(port, "port index")?,
        state,
        phys_state,
        netdev_index,
        netdev_name,
    })
}

/// The char device a uverbs chardev reply names (`RDMA_NLDEV_ATTR_CHARDEV_NAME`), if it is
/// one the kernel makes (`uverbs` and digits): it becomes a path and a CDI name.
pub(super) fn uverbs_from_attrs(body: &[u8]) -> Option<String> {
    let mut name = None;
    let _ = each_attr(body, |kind, v| {
        if kind == attr::CHARDEV_NAME {
            name = Some(get_str(v));
        }
        Ok(())
    });
    name.filter(|n| is_uverbs_name(n))
}

/// `uverbs` and one to ten digits: the kernel's name for a verbs char device.
pub fn is_uverbs_name(n: &str) -> bool {
    n.strip_prefix("uverbs")
        .is_some_and(|d| (1..=10).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The driver family from a uverbs chardev reply (`enum rdma_driver_id`).
pub(super) fn driver_from_attrs(body: &[u8]) -> Result<Option<String>, RdmaNlError> {
    let mut id = None;
    each_attr(body, |kind, v| {
        if kind == attr::UVERBS_DRIVER_ID {
            id = Some(match v.len() {
                8 => get_u64(kind, v)?,
                _ => u64::from(get_u32(kind, v)?),
            });
        }
        Ok(())
    })?;
    const NAMES: [&str; 23] = [
        "",
        "mlx5",
        "mlx4",
        "cxgb3",
        "cxgb4",
        "mthca",
        "bnxt_re",
        "ocrdma",
        "nes",
        "irdma",
        "vmw_pvrdma",
        "qedr",
        "hns",
        "usnic",
        "rxe",
        "hfi1",
        "qib",
        "efa",
        "siw",
        "erdma",
        "mana",
        "ionic",
        "hfi2",
    ];
    let name = id.and_then(|id| NAMES.get(usize::try_from(id).ok()?).copied());
    Ok(name.filter(|n| !n.is_empty()).map(str::to_string))
}
