//! Lost NICs: back on the host from a pod's netns that died without DEL, still bearing our
//! tag. They are given back (name, MTU, MAC, settings) from their attachment's record, under
//! the NIC's lock, by whichever verb meets them first: ADD, DEL, GC or STATUS.

use super::decide::{Where, find_nic, given_back, lost_to_give_back, record_for_lost, tagged_by};
use crate::cni::netconf::ValidAttachment;
use crate::lock;
use rdma_host_device_core::error::{Error, Result};
use rdma_host_device_core::fault;
use rdma_host_device_core::link::{LinkInfo, Links};
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::state::{Record, Tag, owner_key};
use std::collections::HashSet;

/// Give every NIC lost to a dead pod (back on the host, bearing our tag) whose name is not
/// UTF-8 a readable name, so that ADD, GC and STATUS see it and give it back from its record.
pub(in crate::flows) async fn name_lost_unreadable(host: &Links, host_ns: &Netns) -> Result<()> {
    host.name_unreadable(host_ns, |u| tagged_by(u, None))
        .await
        .map(drop)
}

/// Give lost NIC `l` back as `r` says, where it is (on the host).
pub(in crate::flows) async fn give_back_now(
    host: &Links,
    l: &LinkInfo,
    r: &Record,
    who: &str,
) -> Result<()> {
    log::info!(
        "{who}: {} is a lost NIC (back from a pod deleted without DEL); giving it back as {} (mtu {})",
        l.name,
        r.host_name,
        r.host_mtu
    );
    host.restore_settings(l.index, &r.settings()).await?;
    host.restore_in_place(l.index, &given_back(r, r.host_alias.as_deref(), l))
        .await
}

/// Give a lost NIC its own name, MTU and admin state back (see [`record_for_lost`]), under its
/// lock, if it is still lost once the lock is held (an ADD, DEL, GC or STATUS may have
/// given it back meanwhile). GC, STATUS and DEL (a lost NIC holding the home name as an
/// altname) call this; ADD plans and acts in two steps.
pub(in crate::flows) async fn give_back_lost(
    host: &Links,
    l: &LinkInfo,
    tag: &Tag,
    records: &[Record],
    who: &str,
) -> Result<()> {
    let Some(r) = record_for_lost(l, tag, records, who) else {
        return Ok(());
    };
    let _nic = lock::device(&r.host_name)?;
    let Some(now) = host.by_index(l.index).await? else {
        return Ok(());
    };
    if find_nic(std::slice::from_ref(&now), &r, &tag.owner, Where::Host).is_none() {
        return Ok(());
    }
    give_back_now(host, &now, &r, who).await
}

/// Tagged links on the host whose attachment is not valid (and not another network's, in
/// `others`): NICs that came back from a pod
/// deleted without DEL (or after a DEL that ran before the kernel returned them). Give each
/// back under its original name, MTU and admin state.
pub(in crate::flows) async fn give_back_all_lost(
    valid: &[ValidAttachment],
    tried: &HashSet<String>,
    others: &HashSet<String>,
    records: &[Record],
    errors: &mut Vec<Error>,
) -> Result<()> {
    let valid: HashSet<String> = valid
        .iter()
        .map(|a| owner_key(&a.container_id, &a.ifname))
        .collect();
    let host = Links::open()?;
    name_lost_unreadable(&host, &rdma_host_device_core::netns::Netns::current()?).await?;
    for l in host.all().await? {
        let Some(tag) = lost_to_give_back(&l, &valid, tried) else {
            continue;
        };
        if others.contains(&tag.owner) {
            log::info!(
                "GC: {} is a lost NIC of another network's attachment; leaving it to that network's GC or DEL",
                l.name
            );
            continue;
        }
        let given = match fault::hit("gc:lost-nic") {
            Ok(()) => give_back_lost(&host, &l, &tag, records, "GC").await,
            Err(e) => Err(e),
        };
        if let Err(e) = given {
            errors.push(e.context(format!(
                "GC: giving back lost NIC {} (originally {})",
                l.name, tag.host_name
            )));
        }
    }
    Ok(())
}
