//! The requests that change what the kernel's RDMA stack holds, and the mode they depend on:
//! the RDMA netns mode (`SYS_GET`), moving a device to another netns and renaming it (`SET`),
//! adding and deleting soft devices such as rxe and siw (`NEWLINK`, `DELLINK`).

use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST};

use super::wire::{ReqAttr, attr, checked_name, cmd, each_attr, get_u8, required};
use super::{RdmaNlError, RdmaSocket};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// Every RDMA device is visible in every netns (the kernel default).
    Shared,
    /// A device is visible only in its own netns; devices can be moved.
    Exclusive,
}

impl NetnsMode {
    /// The name `rdma system` and the kernel's `netns_mode` documentation use.
    pub fn name(self) -> &'static str {
        match self {
            NetnsMode::Shared => "shared",
            NetnsMode::Exclusive => "exclusive",
        }
    }
}

impl RdmaSocket {
    pub fn netns_mode(&mut self) -> Result<NetnsMode, RdmaNlError> {
        let bodies = self.request("sys get", cmd::SYS_GET, NLM_F_REQUEST | NLM_F_ACK, &[])?;
        sys_from_bodies(&bodies)
    }

    /// Move a device (looked up in this socket's netns) into the netns of `netns_fd`; to give
    /// it back, ask from a socket opened in the netns it is in. EOPNOTSUPP (95) in shared
    /// mode, or when the driver cannot disassociate its users (stock rxe and siw).
    pub fn move_to_netns(
        &mut self,
        dev_index: u32,
        netns_fd: BorrowedFd,
    ) -> Result<(), RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::U32(attr::NET_NS_FD, netns_fd.as_raw_fd() as u32),
        ];
        self.request("dev set netns", cmd::SET, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// `rdma dev set OLD name NAME`, for a device in this socket's netns.
    pub fn rename(&mut self, dev_index: u32, name: &str) -> Result<(), RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::Str(attr::DEV_NAME, checked_name(name)?),
        ];
        self.request("dev set name", cmd::SET, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// `rdma link add NAME type LINK_TYPE netdev NETDEV`; the netdev is looked up in this
    /// socket's netns, the new device lands in init_net (visible everywhere in shared mode).
    pub fn add_soft_device(
        &mut self,
        name: &str,
        link_type: &str,
        netdev: &str,
    ) -> Result<(), RdmaNlError> {
        let req = [
            ReqAttr::Str(attr::DEV_NAME, checked_name(name)?),
            ReqAttr::Str(attr::LINK_TYPE, checked_name(link_type)?),
            ReqAttr::Str(attr::NDEV_NAME, checked_name(netdev)?),
        ];
        self.request("link add", cmd::NEWLINK, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }

    /// `rdma link delete`: only soft devices allow it (others answer EINVAL).
    pub fn delete_device(&mut self, dev_index: u32) -> Result<(), RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        self.request("link delete", cmd::DELLINK, NLM_F_REQUEST | NLM_F_ACK, &req)
            .map(drop)
    }
}

pub(super) fn sys_from_bodies(bodies: &[Vec<u8>]) -> Result<NetnsMode, RdmaNlError> {
    let mut mode = None;
    for body in bodies {
        each_attr(body, |kind, v| {
            if kind == attr::SYS_NETNS_MODE {
                mode = Some(get_u8(kind, v)?);
            }
            Ok(())
        })?;
    }
    match required(mode, "netns mode")? {
        0 => Ok(NetnsMode::Exclusive),
        _ => Ok(NetnsMode::Shared),
    }
}
