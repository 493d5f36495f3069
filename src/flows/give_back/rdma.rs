//! Giving back the RDMA side of an attachment, before its NIC leaves the pod: a software
//! device this attachment created is deleted (never while processes hold it open: the
//! kernel's delete would sleep until they close it), a moved device goes home under the
//! node's name.

use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::rdma::netlink::{NetnsMode, RdmaDevice, RdmaNlError, RdmaSocket};
use rdma_host_device_core::rdma::pair::rdma_error;
use rdma_host_device_core::state::Record;

/// 11 when processes hold software device `dev` open: deleting it would sleep in the kernel
/// (uninterruptibly, in `ib_uverbs_remove_one`) until every one of them closes it.
fn refuse_deleting_a_used_soft_device(sock: &mut RdmaSocket, dev: &RdmaDevice) -> Result<()> {
    let users = rdma_host_device_core::rdma::users::holders(sock, dev)?;
    if users.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        Code::TryAgain,
        format!(
            "software RDMA device {} is held open by {}: deleting it now would block in the kernel until they close it, so nothing was changed and the attachment (NIC, address, device, state) is kept; DEL succeeds once they exit (in shared mode any pod can open it: stop them, or let the runtime retry)",
            dev.name,
            rdma_host_device_core::process::describe(&users)
        ),
    ))
}

/// DEL's first step for an attachment with a software device, before IPAM lets its address
/// go: the device must be deletable without blocking (see
/// [`refuse_deleting_a_used_soft_device`]). Only a device of the recorded name bound to a
/// netdev in the pod is ours (the kernel names a port's netdev only to a socket in its netns).
pub fn refuse_releasing_a_used_soft_device(pod_ns: &Netns, record: &Record) -> Result<()> {
    let Some(name) = record.soft_device.as_deref() else {
        return Ok(());
    };
    pod_ns.within(|| -> Result<()> {
        let mut sock = match RdmaSocket::open() {
            Ok(s) => s,
            Err(RdmaNlError::Unavailable(_)) => return Ok(()),
            Err(e) => return Err(rdma_error("opening RDMA netlink in the pod", e)),
        };
        let Some(dev) = sock
            .device_by_name(name)
            .map_err(|e| rdma_error(format!("looking up {name}"), e))?
        else {
            return Ok(());
        };
        let ports = sock
            .ports()
            .map_err(|e| rdma_error("listing RDMA ports", e))?;
        if ports
            .iter()
            .any(|p| p.dev_index == dev.index && p.netdev_index.is_some())
        {
            refuse_deleting_a_used_soft_device(&mut sock, &dev)?;
        }
        Ok(())
    })?
}

/// DEL or a failed ADD, before the NIC (pod index `nic_index`, if it is in the pod) leaves: delete the
/// software device we created, and give a moved device back to the host. Without the NIC in
/// the pod (ADD killed between moving the RDMA device and the NIC) only the recorded moved
/// device is looked for.
pub fn release(
    pod_ns: &Netns,
    host_ns: &Netns,
    nic_index: Option<u32>,
    record: Option<&Record>,
) -> Result<()> {
    pod_ns.within(|| -> Result<()> {
        let mut sock = match RdmaSocket::open() {
            Ok(s) => s,
            // No RDMA in this kernel: nothing of ours can be there.
            Err(RdmaNlError::Unavailable(_)) => return Ok(()),
            Err(e) => return Err(rdma_error("opening RDMA netlink in the pod", e)),
        };
        if let Some(name) = record.and_then(|r| r.soft_device.as_deref())
            && nic_index.is_some()
            && let Some(dev) = sock
                .device_by_name(name)
                .map_err(|e| rdma_error(format!("looking up {name}"), e))?
        {
            // Ours only if bound to our NIC (the kernel names a port's netdev only to a socket
            // in the netdev's netns: here, the pod's). A device of that name on another netdev
            // is not ours: ADD's creation failed on the clash, and its rollback must not take
            // the device that caused it.
            let ports = sock
                .ports()
                .map_err(|e| rdma_error("listing RDMA ports", e))?;
            let bound = ports
                .iter()
                .any(|p| p.dev_index == dev.index && p.netdev_index == nic_index);
            if bound {
                refuse_deleting_a_used_soft_device(&mut sock, &dev)?;
                sock.delete_device(dev.index).map_err(|e| {
                    rdma_error(format!("deleting software RDMA device {name}"), e)
                })?;
                log::info!("deleted software RDMA device {name}");
            } else {
                log::warn!(
                    "leaving RDMA device {name} (index {}) alone: it is not bound to this attachment's NIC (index in the pod: {nic_index:?}), so this attachment did not create it",
                    dev.index
                );
            }
        }
        let mode = sock
            .netns_mode()
            .map_err(|e| rdma_error("reading the RDMA netns mode", e))?;
        if mode == NetnsMode::Shared {
            return Ok(());
        }
        // Exclusive: what is visible here lives here. Ours is the one paired with our NIC, or
        // the one the record names (its port may have lost the netdev already). It goes home
        // under the name the node gave it: a pod may have renamed it (`rdma dev set NAME name
        // X`), and NADs by rdmaDevice or NCCL_IB_HCA settings name the node's name.
        let ports = sock
            .ports()
            .map_err(|e| rdma_error("listing RDMA ports", e))?;
        let mut ours: Vec<(u32, String)> = ports
            .into_iter()
            .filter(|p| nic_index.is_some() && p.netdev_index == nic_index)
            .map(|p| (p.dev_index, p.dev_name))
            .collect();
        let recorded = record
            .filter(|r| r.rdma_moved)
            .and_then(|r| r.rdma_device.clone());
        if let Some(name) = &recorded
            && let Some(dev) = sock
                .device_by_name(name)
                .map_err(|e| rdma_error(format!("looking up {name}"), e))?
        {
            ours.push((dev.index, dev.name));
        }
        ours.sort();
        ours.dedup_by_key(|(index, _)| *index);
        for (index, name) in ours {
            let home = recorded.as_deref().unwrap_or(&name);
            if name != home {
                sock.rename(index, home).map_err(|e| {
                    rdma_error(
                        format!(
                            "giving RDMA device {name} (renamed in the pod) its name {home} back before it goes home"
                        ),
                        e,
                    )
                })?;
                log::info!("RDMA device {name} renamed back to {home}");
            }
            sock.move_to_netns(index, host_ns.fd()).map_err(|e| {
                rdma_error(format!("returning RDMA device {home} to the host"), e)
            })?;
            log::info!("returned RDMA device {home} to the host");
        }
        Ok(())
    })?
}

/// Gives back `move_in`'s device when the NIC never reached the pod.
pub fn give_back_device(device: &str, pod_ns: &Netns, host_ns: &Netns) -> Result<()> {
    pod_ns.within(|| -> Result<()> {
        let mut sock =
            RdmaSocket::open().map_err(|e| rdma_error("opening RDMA netlink in the pod", e))?;
        if let Some(dev) = sock
            .device_by_name(device)
            .map_err(|e| rdma_error(format!("looking up {device}"), e))?
        {
            sock.move_to_netns(dev.index, host_ns.fd()).map_err(|e| {
                rdma_error(format!("returning RDMA device {device} to the host"), e)
            })?;
        }
        Ok(())
    })?
}
