//! RDMA netlink statistics and resource tracking, for the metrics exporter: a port's hardware
//! counters (`RDMA_NLDEV_CMD_STAT_GET`, what `rdma statistic show link DEV/PORT` prints), a
//! device's resource counts (`RDMA_NLDEV_CMD_RES_GET`, `rdma resource show DEV`) and who owns
//! its QPs (`RDMA_NLDEV_CMD_RES_QP_GET`, `rdma resource show qp link DEV`).
//!
//! Read-only queries on the same socket as the rest of `rdma::netlink` (`mod.rs`); the pure
//! decoders are tested (`crates/core/src/rdma/netlink/tests/stats.rs`) on hand-built bytes
//! shaped like the kernel's replies (nested attributes, u64 values padded by
//! `RDMA_NLDEV_ATTR_PAD`).

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

use super::wire::{ReqAttr, attr, each_attr, get_str, get_u64, nested_entries, owned_entry};
use super::{RdmaNlError, RdmaSocket};

/// `enum rdma_nldev_command`: the statistics and resource queries.
pub(super) mod stat_cmd {
    pub const RES_GET: u16 = 9;
    pub const RES_QP_GET: u16 = 10;
    pub const STAT_GET: u16 = 17;
}

/// `enum rdma_nldev_attr`: the statistics and resource attributes.
pub(super) mod stat_attr {
    pub const RES_SUMMARY: u16 = 15; // nested
    pub const RES_SUMMARY_ENTRY: u16 = 16; // nested
    pub const RES_SUMMARY_ENTRY_NAME: u16 = 17; // string
    pub const RES_SUMMARY_ENTRY_CURR: u16 = 18; // u64
    pub const RES_QP: u16 = 19; // nested
    pub const RES_QP_ENTRY: u16 = 20; // nested
    pub const RES_LQPN: u16 = 21; // u32
    pub const STAT_HWCOUNTERS: u16 = 80; // nested
    pub const STAT_HWCOUNTER_ENTRY: u16 = 81; // nested
    pub const STAT_HWCOUNTER_ENTRY_NAME: u16 = 82; // string
    pub const STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83; // u64
}

/// One QP as resource tracking reports it: its number and its owner (a user process by pid, in
/// the pid namespace of the socket's opener, or a kernel module by name: "ib_core" for QP1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpOwner {
    pub lqpn: Option<u32>,
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

impl RdmaSocket {
    /// A port's hardware counters by the driver's names, in the driver's order. `Ok(None)`
    /// when the device keeps none (siw; the kernel answers EINVAL or EOPNOTSUPP).
    pub fn hw_counters(
        &mut self,
        dev_index: u32,
        port: u32,
    ) -> Result<Option<Vec<(String, u64)>>, RdmaNlError> {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, dev_index),
            ReqAttr::U32(attr::PORT_INDEX, port),
        ];
        match self.request(
            "stat get",
            stat_cmd::STAT_GET,
            NLM_F_REQUEST | NLM_F_ACK,
            &req,
        ) {
            Ok(bodies) => hw_counters_from_bodies(&bodies).map(Some),
            Err(RdmaNlError::Kernel {
                errno: libc::EINVAL | libc::EOPNOTSUPP,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// How many of each resource the device holds now ("pd", "cq", "qp", "cm_id", "mr",
    /// "ctx", "srq": whatever this kernel tracks).
    pub fn resource_summary(&mut self, dev_index: u32) -> Result<Vec<(String, u64)>, RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        let bodies = self.request(
            "res get",
            stat_cmd::RES_GET,
            NLM_F_REQUEST | NLM_F_ACK,
            &req,
        )?;
        summary_from_bodies(&bodies)
    }

    /// Every QP of the device with its owner.
    pub fn qp_owners(&mut self, dev_index: u32) -> Result<Vec<QpOwner>, RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        let bodies = self.request(
            "res qp get",
            stat_cmd::RES_QP_GET,
            NLM_F_REQUEST | NLM_F_DUMP,
            &req,
        )?;
        qps_from_bodies(&bodies)
    }
}

/// The (name, value) pairs of every `entry` of the `table` nest: counters by the driver's
/// names, resource counts by the kernel's.
fn name_values(
    bodies: &[Vec<u8>],
    table: u16,
    entry: u16,
    name_kind: u16,
    value_kind: u16,
) -> Result<Vec<(String, u64)>, RdmaNlError> {
    nested_entries(bodies, table, entry, |e| {
        let (mut name, mut value) = (None, None);
        each_attr(e, |kind, v| {
            if kind == name_kind {
                name = Some(get_str(v));
            } else if kind == value_kind {
                value = Some(get_u64(kind, v)?);
            }
            Ok(())
        })?;
        Ok(name.zip(value))
    })
}

pub(super) fn hw_counters_from_bodies(
    bodies: &[Vec<u8>],
) -> Result<Vec<(String, u64)>, RdmaNlError> {
    name_values(
        bodies,
        stat_attr::STAT_HWCOUNTERS,
        stat_attr::STAT_HWCOUNTER_ENTRY,
        stat_attr::STAT_HWCOUNTER_ENTRY_NAME,
        stat_attr::STAT_HWCOUNTER_ENTRY_VALUE,
    )
}

pub(super) fn summary_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<(String, u64)>, RdmaNlError> {
    name_values(
        bodies,
        stat_attr::RES_SUMMARY,
        stat_attr::RES_SUMMARY_ENTRY,
        stat_attr::RES_SUMMARY_ENTRY_NAME,
        stat_attr::RES_SUMMARY_ENTRY_CURR,
    )
}

pub(super) fn qps_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<QpOwner>, RdmaNlError> {
    nested_entries(bodies, stat_attr::RES_QP, stat_attr::RES_QP_ENTRY, |e| {
        let o = owned_entry(e, stat_attr::RES_LQPN)?;
        Ok(Some(QpOwner {
            lqpn: o.number,
            pid: o.pid,
            kern_name: o.kernel_name,
        }))
    })
}
