//! The RDMA steps of ADD, CHECK and STATUS: pair and check before any change
//! (`pair_and_check`), move the device in or create a software one, verify GIDs inside the pod
//! (ADD and CHECK), and STATUS's port check. Giving the device back is give_back/rdma.rs's.
//!
//! Order on ADD, exclusive mode: the RDMA device moves BEFORE the NIC. If the kernel refuses
//! (EOPNOTSUPP: the driver lacks `disassociate_ucontext`) the NIC has not left the host, so
//! nothing is lost; and a software device bound to the NIC would be destroyed by moving the NIC
//! first. On DEL the RDMA device goes back before the NIC (dranet#177).

use crate::cni::env::Env;
use crate::cni::netconf::{Isolation, NetConf, NicRequest, SoftDevice};
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::link::LinkInfo;
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::rdma::netlink::{NetnsMode, RdmaDevice, RdmaNlError, RdmaSocket};
use rdma_host_device_core::rdma::pair::{self, Nic, rdma_error};
use rdma_host_device_core::rdma::verbs::{self, Source, VerbsError, Verification};
use rdma_host_device_core::state::Record;
use std::net::IpAddr;
use std::time::Duration;

const EXCLUSIVE_HOWTO: &str = "set it at boot: `options ib_core netns_mode=0` in /etc/modprobe.d/ib_core.conf (then update the initramfs) or the kernel argument ib_core.netns_mode=0, and reboot; it cannot change while other network namespaces exist";

/// What ADD will do with RDMA, decided before the first change.
#[derive(Debug, Clone)]
pub enum RdmaPlan {
    /// Move this hardware device into the pod (exclusive mode).
    Move { device: String, index: u32 },
    /// Leave the device where it is (shared mode: the pod sees it anyway); verify it.
    Stay { device: String },
    /// Create a software device on the NIC inside the pod (shared mode).
    Soft { kind: SoftDevice, name: String },
}

impl RdmaPlan {
    pub fn device(&self) -> &str {
        match self {
            RdmaPlan::Move { device, .. } | RdmaPlan::Stay { device } => device,
            RdmaPlan::Soft { name, .. } => name,
        }
    }

    /// Fill the state record with the plan, before acting on it.
    pub fn record_into(&self, r: &mut Record) {
        r.rdma_device = Some(self.device().to_string());
        r.rdma_moved = matches!(self, RdmaPlan::Move { .. });
        r.soft_device = match self {
            RdmaPlan::Soft { name, .. } => Some(name.clone()),
            _ => None,
        };
    }
}

/// Pair and check. `None`: RDMA is not involved in this attachment.
pub fn pair_and_check(
    env: &Env,
    conf: &NetConf,
    node: &Node,
    nic: &LinkInfo,
) -> Result<Option<RdmaPlan>> {
    let rdma_conf = &conf.rdma;
    if rdma_conf.isolation == Isolation::None {
        // "Do not touch RDMA" cannot protect a software device bound to the NIC: the kernel
        // destroys it when its netdev changes namespace, in either mode.
        refuse_destroying_a_soft_device(nic, "rdma.isolation \"none\" does not keep it alive")?;
        return Ok(None);
    }
    let required = rdma_conf.soft_device.is_some()
        || rdma_conf.isolation == Isolation::Exclusive
        || matches!(conf.nic, Some(NicRequest::RdmaDevice(_)));
    let mut sock = match RdmaSocket::open() {
        Ok(s) => s,
        Err(e @ RdmaNlError::Unavailable(_)) if !required => {
            log::info!(
                "no RDMA on this node ({e}); attaching {} without RDMA",
                nic.name
            );
            return Ok(None);
        }
        Err(e @ RdmaNlError::Unavailable(_)) => {
            return Err(Error::new(
                Code::RdmaNotFound,
                format!(
                    "the network asks for RDMA but this node's kernel has none ({e}): load ib_core and the NIC's RDMA driver, or set rdma.isolation to \"none\""
                ),
            ));
        }
        Err(e) => return Err(rdma_error("opening RDMA netlink", e)),
    };
    let mode = sock
        .netns_mode()
        .map_err(|e| rdma_error("reading the RDMA netns mode", e))?;
    if let Some(kind) = rdma_conf.soft_device {
        if mode == NetnsMode::Exclusive {
            return Err(Error::new(
                Code::RdmaNetnsMode,
                format!(
                    "rdma.softDevice \"{}\" needs the RDMA netns mode \"shared\", but this node runs \"exclusive\": a software device created for the pod would land in the host's namespace, invisible to the pod. Use a NIC with RDMA hardware, or run the node in shared mode (the kernel default)",
                    kind.name()
                ),
            ));
        }
        return Ok(Some(RdmaPlan::Soft {
            kind,
            name: soft_name(kind, env),
        }));
    }
    let Some(dev) = paired_with(&mut sock, nic)? else {
        if required {
            return Err(Error::new(
                Code::RdmaNotFound,
                format!(
                    "no RDMA device pairs with {} (looked at RDMA netlink ports, sysfs and node GUIDs; see `rdma link show`): load the NIC's RDMA driver, use rdma.softDevice, or set rdma.isolation to \"none\"",
                    nic.name
                ),
            ));
        }
        log::info!("{} has no RDMA device; attaching it without RDMA", nic.name);
        return Ok(None);
    };
    if mode == NetnsMode::Shared && rdma_conf.isolation == Isolation::Exclusive {
        return Err(Error::new(
            Code::RdmaNetnsMode,
            format!(
                "rdma.isolation is \"exclusive\" but the RDMA netns mode is shared, so {} would stay visible to every pod; {EXCLUSIVE_HOWTO}. Or set rdma.isolation to \"auto\" to share it",
                dev.name
            ),
        ));
    }
    if mode == NetnsMode::Shared && pair::is_soft_driver(&dev) {
        return Err(destroyed_by_the_move(
            &dev,
            nic,
            "in shared mode only the NIC moves",
        ));
    }
    if mode == NetnsMode::Exclusive {
        refuse_taking_a_used_device(&mut sock, &dev, nic, node)?;
    }
    Ok(Some(match mode {
        NetnsMode::Exclusive => RdmaPlan::Move {
            device: dev.name,
            index: dev.index,
        },
        NetnsMode::Shared => RdmaPlan::Stay { device: dev.name },
    }))
}

/// Exclusive mode: the move takes the device from whoever uses it on the host (the kernel
/// disassociates their verbs contexts, and their RDMA stops). 107 naming them, unless the
/// node allows it (`takeRdmaDevicesInUse`).
fn refuse_taking_a_used_device(
    sock: &mut RdmaSocket,
    dev: &RdmaDevice,
    nic: &LinkInfo,
    node: &Node,
) -> Result<()> {
    let users = rdma_host_device_core::rdma::users::holders(sock, dev)?;
    if users.is_empty() {
        return Ok(());
    }
    let who = rdma_host_device_core::process::describe(&users);
    if node.take_rdma_devices_in_use {
        log::warn!(
            "RDMA device {} is in use on the host by {who}; moving it into the pod anyway (the node's takeRdmaDevicesInUse): their RDMA stops",
            dev.name
        );
        return Ok(());
    }
    Err(Error::new(
        Code::NotAllowed,
        format!(
            "RDMA device {} (paired with {}) is in use on the host by {who}: moving it into the pod would cut them off (the kernel disassociates their verbs contexts); nothing was changed. Stop them or pick another NIC; a node that wants the move anyway sets \"takeRdmaDevicesInUse\": true in its node configuration",
            dev.name, nic.name
        ),
    ))
}

/// STATUS, for a NIC waiting on the host: why ADD's verification would fail now, if it would.
/// A RoCE or iWARP port follows its netdev: with the netdev up, a port that is not ACTIVE (or,
/// for a software device still to be created, no carrier) will not carry RDMA. A NIC that is
/// down says nothing yet: ADD brings it up.
pub fn not_ready_on_host(conf: &NetConf, nic: &LinkInfo) -> Result<Option<String>> {
    if conf.rdma.isolation == Isolation::None || !nic.up {
        return Ok(None);
    }
    if conf.rdma.soft_device.is_some() {
        return Ok((!nic.carrier).then(|| {
            format!(
                "{} is up without carrier: the {} device ADD would create on it would have its port DOWN",
                nic.name,
                conf.rdma.soft_device.map_or("software", |k| k.name())
            )
        }));
    }
    let Ok(mut sock) = RdmaSocket::open() else {
        return Ok(None);
    };
    let Some(dev) = paired_with(&mut sock, nic)? else {
        return Ok(None);
    };
    let ports = sock
        .ports()
        .map_err(|e| rdma_error("listing RDMA ports", e))?;
    Ok(ports
        .iter()
        .find(|p| p.dev_index == dev.index && p.state != Some(4))
        .map(|p| {
            format!(
                "port {} of RDMA device {} (paired with {}) is {}, not ACTIVE; {} is up {}",
                p.port,
                dev.name,
                nic.name,
                p.state.map_or("of unknown state".into(), |s| match s {
                    1 => "DOWN".to_string(),
                    2 => "INIT".into(),
                    3 => "ARMED".into(),
                    other => format!("in state {other}"),
                }),
                nic.name,
                if nic.carrier {
                    "with carrier"
                } else {
                    "without carrier"
                }
            )
        }))
}

/// The RDMA device paired with `nic`, if any.
fn paired_with(sock: &mut RdmaSocket, nic: &LinkInfo) -> Result<Option<RdmaDevice>> {
    pair::pair(
        sock,
        &Nic {
            index: nic.index,
            name: &nic.name,
            mac: &nic.mac,
        },
    )
}

/// 112 for a software RDMA device (rxe, siw) bound to `nic` on the host: moving the NIC
/// would destroy it.
fn destroyed_by_the_move(dev: &RdmaDevice, nic: &LinkInfo, why_here: &str) -> Error {
    Error::new(
        Code::RdmaMoveUnsupported,
        format!(
            "RDMA device {} is a software device ({}) bound to {}: the kernel destroys it when {} changes namespace ({why_here}). Delete it (`rdma link delete {}`) and set rdma.softDevice to create one inside the pod instead",
            dev.name,
            dev.driver.as_deref().unwrap_or("?"),
            nic.name,
            nic.name,
            dev.name
        ),
    )
}

/// Refuse a NIC with a software RDMA device bound to it on the host, whatever the config
/// says. Without RDMA on the node there is nothing to protect.
fn refuse_destroying_a_soft_device(nic: &LinkInfo, why_here: &str) -> Result<()> {
    let Ok(mut sock) = RdmaSocket::open() else {
        return Ok(());
    };
    match paired_with(&mut sock, nic)? {
        Some(dev) if pair::is_soft_driver(&dev) => Err(destroyed_by_the_move(&dev, nic, why_here)),
        _ => Ok(()),
    }
}

/// A node-unique name for a software device (names are global in shared mode): the kind and
/// the attachment's key, e.g. `rxe_3f2a9c0d1b7e4a55`.
fn soft_name(kind: SoftDevice, env: &Env) -> String {
    format!(
        "{}_{}",
        kind.name(),
        rdma_host_device_core::state::owner_key(&env.container_id, &env.ifname)
    )
}

/// Exclusive mode: move the device into the pod (before the NIC).
pub fn move_in(device: &str, index: u32, pod_ns: &Netns) -> Result<()> {
    let mut sock = RdmaSocket::open().map_err(|e| rdma_error("opening RDMA netlink", e))?;
    sock.move_to_netns(index, pod_ns.fd()).map_err(|e| {
        if e.errno() == Some(libc::EOPNOTSUPP) {
            Error::new(
                Code::RdmaMoveUnsupported,
                format!(
                    "RDMA device {device} cannot change network namespace: its driver lacks netns support (the kernel answered EOPNOTSUPP); nothing was changed. Drivers that can: mlx4, mlx5, hns, irdma, erdma. Set rdma.isolation to \"none\" to attach the NIC alone (a hardware device stays on the host; a software rxe/siw device bound to the NIC would be destroyed by the move, so it is refused: delete it first)"
                ),
            )
        } else {
            rdma_error(format!("moving RDMA device {device} into {}", pod_ns.path().display()), e)
        }
    })?;
    log::info!(
        "moved RDMA device {device} into {}",
        pod_ns.path().display()
    );
    Ok(())
}

/// Shared mode, no RDMA hardware: create a software device on the pod's interface, from a
/// socket inside the pod's namespace (the kernel looks the netdev up in the caller's netns).
pub fn create_soft(kind: SoftDevice, name: &str, ifname: &str, pod_ns: &Netns) -> Result<()> {
    let link_type = kind.name();
    pod_ns.within(|| -> Result<()> {
        let mut sock = RdmaSocket::open().map_err(|e| rdma_error("opening RDMA netlink", e))?;
        sock.add_soft_device(name, link_type, ifname).map_err(|e| {
            // A taken name (the kernel answers ENFILE, "too many open files in system"): its
            // own error, and the device that has it is someone else's (see `release`).
            if let Ok(Some(other)) = sock.device_by_name(name) {
                return Error::new(
                    Code::Rdma,
                    format!(
                        "cannot create {link_type} device {name} on {ifname}: an RDMA device of that name already exists ({} device, index {}), not bound to this NIC; it is left alone. If it is a stale leftover, remove it (`rdma link delete {name}`) and retry",
                        other.driver.as_deref().unwrap_or("unknown"),
                        other.index
                    ),
                );
            }
            let hint = if e.errno() == Some(libc::EOPNOTSUPP) || e.errno() == Some(libc::ENOENT) {
                format!(
                    " (is the {link_type} driver available? `modprobe {}`)",
                    if link_type == "rxe" {
                        "rdma_rxe"
                    } else {
                        "siw"
                    }
                )
            } else {
                String::new()
            };
            let mut err = rdma_error(format!("creating {link_type} device {name} on {ifname}"), e);
            err.msg.push_str(&hint);
            err
        })
    })??;
    log::info!("created {link_type} device {name} on {ifname} inside the pod");
    Ok(())
}

/// Verify inside the pod: the device is visible, its port ACTIVE, and its GID table holds a
/// RoCE v2 GID for every address (iWARP: port state only). Waits up to the configured deadline.
/// Returns the index of the RoCE v2 GID of each address in `addrs` (in order; none for iWARP
/// or InfiniBand), which the device metadata and `NCCL_IB_GID_INDEX` report.
pub fn verify(
    device: &str,
    addrs: &[IpAddr],
    timeout_ms: u64,
    pod_ns: &Netns,
) -> Result<Vec<(IpAddr, u32)>> {
    let report = pod_ns
        .within(|| verbs::wait_for_gids(device, addrs, Duration::from_millis(timeout_ms)))?
        .map_err(verbs_error)?;
    if report.source == Source::Sysfs {
        log::warn!(
            "libibverbs was not available; verified {device} through the kernel's sysfs GID table"
        );
    }
    match report.verified {
        Verification::PortActiveOnly => log::info!(
            "{device} has no per-IP GIDs (iWARP or InfiniBand): verified that a port is ACTIVE"
        ),
        _ => log::info!(
            "{device} verified in the pod: RoCE v2 GIDs {}",
            report
                .gids
                .iter()
                .filter(|g| g.gid_type == verbs::GidType::RoceV2)
                .map(|g| g.gid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    Ok(gid_indices(&report, addrs))
}

/// The index of the RoCE v2 GID of each address (the first port's that has one), in order.
pub fn gid_indices(report: &verbs::DeviceReport, addrs: &[IpAddr]) -> Vec<(IpAddr, u32)> {
    addrs
        .iter()
        .filter_map(|a| {
            let want = match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => *v6,
            };
            report
                .gids
                .iter()
                .filter(|g| g.gid_type == verbs::GidType::RoceV2 && g.gid == want)
                .min_by_key(|g| (g.port, g.index))
                .map(|g| (*a, g.index))
        })
        .collect()
}

/// A failed verification says what the paired netdev looks like: a RoCE port follows its
/// netdev, so "port DOWN" with "no carrier" points at the cable or the peer, not at RDMA.
pub fn with_netdev_state(mut e: Error, netdev: Option<&LinkInfo>) -> Error {
    if let (Code::GidTimeout, Some(l)) = (e.code, netdev) {
        e.msg.push_str(&format!(
            "; its netdev {} is {}, {}",
            l.name,
            if l.up { "up" } else { "down" },
            if l.carrier {
                "with carrier"
            } else {
                "without carrier"
            }
        ));
    }
    e
}

fn verbs_error(e: VerbsError) -> Error {
    let code = match e {
        VerbsError::GidTimeout { .. } | VerbsError::PortNotActive { .. } => Code::GidTimeout,
        _ => Code::Rdma,
    };
    Error::new(code, e.to_string())
}
