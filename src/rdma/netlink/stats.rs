//! RDMA netlink statistics and resource tracking, for the metrics exporter: a port's hardware
//! counters (`RDMA_NLDEV_CMD_STAT_GET`, what `rdma statistic show link DEV/PORT` prints), a
//! device's resource counts (`RDMA_NLDEV_CMD_RES_GET`, `rdma resource show DEV`) and who owns
//! its QPs (`RDMA_NLDEV_CMD_RES_QP_GET`, `rdma resource show qp link DEV`).
//!
//! Read-only queries on the same socket as the rest of `netlink.rs`; the pure decoders are
//! tested on hand-built bytes shaped like the kernel's replies (nested attributes, u64 values
//! padded by `RDMA_NLDEV_ATTR_PAD`).

use super::*;

/// `enum rdma_nldev_command`: the statistics and resource queries.
mod stat_cmd {
    pub const RES_GET: u16 = 9;
    pub const RES_QP_GET: u16 = 10;
    pub const STAT_GET: u16 = 17;
}

/// `enum rdma_nldev_attr`: the statistics and resource attributes.
mod stat_attr {
    pub const RES_SUMMARY: u16 = 15; // nested
    pub const RES_SUMMARY_ENTRY: u16 = 16; // nested
    pub const RES_SUMMARY_ENTRY_NAME: u16 = 17; // string
    pub const RES_SUMMARY_ENTRY_CURR: u16 = 18; // u64
    pub const RES_QP: u16 = 19; // nested
    pub const RES_QP_ENTRY: u16 = 20; // nested
    pub const RES_LQPN: u16 = 21; // u32
    pub const RES_PID: u16 = 28; // u32
    pub const RES_KERN_NAME: u16 = 29; // string
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
    /// Give up on a reply after `timeout` (the exporter's scrape budget), not the CNI's 30 s.
    pub fn set_timeout(&mut self, timeout: std::time::Duration) -> Result<(), RdmaNlError> {
        self.socket.set_timeout(timeout).map_err(RdmaNlError::Io)
    }

    /// The devices visible from this netns, without the per-device driver query.
    pub fn device_list(&mut self) -> Result<Vec<RdmaDevice>, RdmaNlError> {
        self.dump_devices()
    }

    /// The ports of one device (one dump).
    pub fn ports_of(&mut self, dev_index: u32) -> Result<Vec<RdmaPort>, RdmaNlError> {
        let req = [ReqAttr::U32(attr::DEV_INDEX, dev_index)];
        let bodies = self.request("port get", cmd::PORT_GET, NLM_F_REQUEST | NLM_F_DUMP, &req)?;
        decode_all(&bodies, port_from_attrs)
    }

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

/// Name/value pairs from the entries of one nest (`entry` kind) inside `body`'s `table` nest.
fn nested_entries<T>(
    body: &[u8],
    table: u16,
    entry: u16,
    mut one: impl FnMut(&[u8]) -> Result<Option<T>, RdmaNlError>,
) -> Result<Vec<T>, RdmaNlError> {
    let mut out = Vec::new();
    each_attr(body, |kind, v| {
        if kind != table {
            return Ok(());
        }
        each_attr(v, |kind, e| {
            if kind == entry
                && let Some(t) = one(e)?
            {
                out.push(t);
            }
            Ok(())
        })
    })?;
    Ok(out)
}

fn name_value(
    e: &[u8],
    name_kind: u16,
    value_kind: u16,
) -> Result<Option<(String, u64)>, RdmaNlError> {
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
}

fn hw_counters_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<(String, u64)>, RdmaNlError> {
    let mut out = Vec::new();
    for b in bodies {
        out.extend(nested_entries(
            b,
            stat_attr::STAT_HWCOUNTERS,
            stat_attr::STAT_HWCOUNTER_ENTRY,
            |e| {
                name_value(
                    e,
                    stat_attr::STAT_HWCOUNTER_ENTRY_NAME,
                    stat_attr::STAT_HWCOUNTER_ENTRY_VALUE,
                )
            },
        )?);
    }
    Ok(out)
}

fn summary_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<(String, u64)>, RdmaNlError> {
    let mut out = Vec::new();
    for b in bodies {
        out.extend(nested_entries(
            b,
            stat_attr::RES_SUMMARY,
            stat_attr::RES_SUMMARY_ENTRY,
            |e| {
                name_value(
                    e,
                    stat_attr::RES_SUMMARY_ENTRY_NAME,
                    stat_attr::RES_SUMMARY_ENTRY_CURR,
                )
            },
        )?);
    }
    Ok(out)
}

fn qps_from_bodies(bodies: &[Vec<u8>]) -> Result<Vec<QpOwner>, RdmaNlError> {
    let mut out = Vec::new();
    for b in bodies {
        out.extend(nested_entries(
            b,
            stat_attr::RES_QP,
            stat_attr::RES_QP_ENTRY,
            |e| {
                let mut qp = QpOwner {
                    lqpn: None,
                    pid: None,
                    kern_name: None,
                };
                each_attr(e, |kind, v| {
                    match kind {
                        stat_attr::RES_LQPN => qp.lqpn = Some(get_u32(kind, v)?),
                        stat_attr::RES_PID => qp.pid = Some(get_u32(kind, v)?),
                        stat_attr::RES_KERN_NAME => qp.kern_name = Some(get_str(v)),
                        _ => {}
                    }
                    Ok(())
                })?;
                Ok(Some(qp))
            },
        )?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NLA_F_NESTED: u16 = 1 << 15;

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(4 + value.len() as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    fn nest(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
        nla(kind | NLA_F_NESTED, &parts.concat())
    }

    fn s(v: &str) -> Vec<u8> {
        format!("{v}\0").into_bytes()
    }

    /// A u64 as the kernel puts it: nla_put_u64_64bit may precede it with a PAD attribute.
    fn u64_padded(kind: u16, v: u64) -> Vec<u8> {
        [nla(0, &[]), nla(kind, &v.to_ne_bytes())].concat()
    }

    fn reply_bodies(head: &[Vec<u8>], tail: Vec<u8>) -> Vec<Vec<u8>> {
        let mut b = head.concat();
        b.extend(tail);
        vec![b]
    }

    #[test]
    fn decodes_hw_counters_in_driver_order() {
        let entry = |n: &str, v: u64| {
            nest(
                stat_attr::STAT_HWCOUNTER_ENTRY,
                &[
                    nla(stat_attr::STAT_HWCOUNTER_ENTRY_NAME, &s(n)),
                    u64_padded(stat_attr::STAT_HWCOUNTER_ENTRY_VALUE, v),
                ],
            )
        };
        let bodies = reply_bodies(
            &[
                nla(attr::DEV_INDEX, &3u32.to_ne_bytes()),
                nla(attr::PORT_INDEX, &1u32.to_ne_bytes()),
            ],
            nest(
                stat_attr::STAT_HWCOUNTERS,
                &[entry("sent_pkts", 12), entry("rcvd_pkts", 1 << 40)],
            ),
        );
        assert_eq!(
            hw_counters_from_bodies(&bodies).unwrap(),
            vec![("sent_pkts".into(), 12), ("rcvd_pkts".into(), 1 << 40)]
        );
        // A reply without the table (a driver with no counters enabled): none, not an error.
        assert!(hw_counters_from_bodies(&[vec![]]).unwrap().is_empty());
    }

    #[test]
    fn decodes_the_resource_summary() {
        let entry = |n: &str, v: u64| {
            nest(
                stat_attr::RES_SUMMARY_ENTRY,
                &[
                    nla(stat_attr::RES_SUMMARY_ENTRY_NAME, &s(n)),
                    u64_padded(stat_attr::RES_SUMMARY_ENTRY_CURR, v),
                ],
            )
        };
        let bodies = reply_bodies(
            &[nla(attr::DEV_NAME, &s("rxe0"))],
            nest(
                stat_attr::RES_SUMMARY,
                &[entry("pd", 1), entry("qp", 3), entry("cm_id", 0)],
            ),
        );
        assert_eq!(
            summary_from_bodies(&bodies).unwrap(),
            vec![("pd".into(), 1), ("qp".into(), 3), ("cm_id".into(), 0)]
        );
    }

    #[test]
    fn decodes_qp_owners_user_and_kernel() {
        let qp = |n: u32, owner: Vec<u8>| {
            nest(
                stat_attr::RES_QP_ENTRY,
                &[nla(stat_attr::RES_LQPN, &n.to_ne_bytes()), owner],
            )
        };
        let bodies = vec![
            [
                nla(attr::DEV_INDEX, &1u32.to_ne_bytes()),
                nest(
                    stat_attr::RES_QP,
                    &[
                        qp(1, nla(stat_attr::RES_KERN_NAME, &s("ib_core"))),
                        qp(17, nla(stat_attr::RES_PID, &4242u32.to_ne_bytes())),
                    ],
                ),
            ]
            .concat(),
        ];
        let qps = qps_from_bodies(&bodies).unwrap();
        assert_eq!(qps.len(), 2);
        assert_eq!(qps[0].kern_name.as_deref(), Some("ib_core"));
        assert_eq!((qps[1].lqpn, qps[1].pid), (Some(17), Some(4242)));
    }

    #[test]
    fn malformed_values_are_decode_errors_not_panics() {
        let bad = nest(
            stat_attr::STAT_HWCOUNTERS,
            &[nest(
                stat_attr::STAT_HWCOUNTER_ENTRY,
                &[
                    nla(stat_attr::STAT_HWCOUNTER_ENTRY_NAME, &s("x")),
                    nla(stat_attr::STAT_HWCOUNTER_ENTRY_VALUE, &[1, 2, 3]),
                ],
            )],
        );
        assert!(matches!(
            hw_counters_from_bodies(&[bad]),
            Err(RdmaNlError::Decode(_))
        ));
    }

    #[test]
    fn encodes_stat_get_for_one_port() {
        let req = [
            ReqAttr::U32(attr::DEV_INDEX, 2),
            ReqAttr::U32(attr::PORT_INDEX, 1),
        ];
        let bytes = encode_request(stat_cmd::STAT_GET, NLM_F_REQUEST | NLM_F_ACK, 5, &req);
        // RDMA_NL_GET_TYPE(5, 17) = 0x1411
        assert_eq!(&bytes[4..6], &[0x11, 0x14]);
        assert_eq!(
            &bytes[16..],
            &[8, 0, 1, 0, 2, 0, 0, 0, 8, 0, 3, 0, 1, 0, 0, 0]
        );
    }
}
