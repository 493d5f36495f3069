//! ADD: build the plan (flows/plan.rs: which NIC, which RDMA device, the record), then act on
//! it step by step: remember, move the RDMA device and the NIC into the pod renamed, get
//! addresses from IPAM and apply them, verify the GIDs, answer with the result. Every step
//! writes what it takes into ADD's ledger before it acts; any failure gives back everything taken.

use super::give_back::Places;
use super::give_back::ledger::{Ledger, Taken};
use super::give_back::lost;
use super::plan::{self, Plan, check_ipv6_mtu};
use super::rdma::{self, RdmaPlan};
use crate::cni::env::Env;
use crate::cni::netconf::{NetConf, SoftDevice};
use crate::cni::result::{CniResult, Interface};
use crate::ipam::Ipam;
use futures::FutureExt;
use rdma_host_device_core::device_info::{self, DeviceInfo};
use rdma_host_device_core::dra::metadata;
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::fault;
use rdma_host_device_core::link::Arrival;
use rdma_host_device_core::link::LinkInfo;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::{NetworkData, Record, Saving, Store};
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;

/// ADD: plan, then attach; on failure (or a panic) give back what was taken.
pub async fn add(env: &Env, conf: &NetConf, node: &Node) -> Result<CniResult> {
    let plan = plan::plan(env, conf, node).await?;
    let places = Places {
        env,
        conf,
        node,
        host_ns: &plan.host_ns,
        host: &plan.host,
        pod_ns: Some(&plan.pod_ns),
        pod: Some(&plan.pod),
    };
    let mut ledger = Ledger::default();
    // A panic is a bug, but it must not strand the NIC in the pod: roll back, then let the
    // panic go on to the hook in main.rs, which prints error 999.
    let attached = AssertUnwindSafe(attach(&places, &plan, &mut ledger))
        .catch_unwind()
        .await;
    match attached {
        Ok(Ok(result)) => {
            ledger.settle();
            log::info!("done");
            Ok(result)
        }
        Ok(Err(e)) => {
            log::error!("failed: {e}; rolling back");
            ledger.give_back(&places).await;
            Err(e)
        }
        Err(panic) => {
            log::error!("panicked; rolling back");
            ledger.give_back(&places).await;
            std::panic::resume_unwind(panic)
        }
    }
}

/// The steps that change the node, in order, each writing what it takes into the ledger
/// before it acts.
async fn attach(places: &Places<'_>, plan: &Plan, ledger: &mut Ledger) -> Result<CniResult> {
    let mut record = plan.record.clone();
    restore_lost(plan).await?;
    let saving = remember(places, &record, ledger)?;
    move_rdma_in(plan, ledger)?;
    let inside = move_nic_in(places, plan, &mut record, ledger).await?;
    make_soft_rdma(places, plan, &inside).await?;
    let (result, applied) = apply_addresses(places, plan, &inside, saving, ledger).await?;
    let attached = metadata::Attached {
        rdma_device: plan.rdma.as_ref().map(|p| p.device().to_owned()),
        gid_indices: verify_gids(places, plan, &inside, &applied.ips).await?,
        network: applied.network,
    };
    write_device_info(places, plan, &record, ledger)?;
    complete_claim_metadata(places, plan, &record, &attached, ledger)?;
    complete_nic_env(plan, &attached, ledger)?;
    note_network_data(places, &mut record, &attached.network, ledger)?;
    fault::hit("add:before-result")?;
    Ok(result)
}

/// What ADD applied to the NIC in the pod: its addresses, and the network data a claim's
/// status reports (the pod's name for it, its addresses as IPAM gave them, its MAC on arrival).
struct Applied {
    ips: Vec<IpAddr>,
    network: NetworkData,
}

/// Step 1: A NIC lost to a dead pod gets its own name, MTU and MAC back first.
async fn restore_lost(plan: &Plan) -> Result<()> {
    if let Some(r) = &plan.lost {
        lost::give_back_now(&plan.host, &plan.nic, r, "ADD").await?;
    }
    Ok(())
}

/// Step 2: Remember, before the first change, what DEL needs: the record's save begins here and is
/// made durable before the first step that outlives a node crash.
fn remember(places: &Places<'_>, record: &Record, ledger: &mut Ledger) -> Result<Saving> {
    ledger.took(Taken::StateFile {
        container_id: places.env.container_id.clone(),
        ifname: places.env.ifname.clone(),
    });
    let saving = Store::new(&places.node.state_dir).begin_save(record)?;
    fault::hit("add:after-state")?;
    Ok(saving)
}

/// Step 3: Exclusive mode: the RDMA device goes first (see flows/rdma.rs for why).
fn move_rdma_in(plan: &Plan, ledger: &mut Ledger) -> Result<()> {
    if let Some(RdmaPlan::Move { device, index }) = &plan.rdma {
        ledger.took(Taken::RdmaDevice {
            device: device.clone(),
        });
        rdma::move_in(device, *index, &plan.pod_ns)?;
        fault::hit("add:after-rdma-move")?;
    }
    Ok(())
}

/// Step 4: Move, rename, MTU and tag in one request; up in its own once nothing rides it (below).
/// The uppers guard tells ADD's notifications of the NIC from an upper linked to it by what each
/// says new (`raw::Announced`). A request that sets the alias of a link that is up by its end
/// closes with a notification that says nothing new, which would cost the guard a search of every
/// namespace. The NIC as it arrived in the pod.
async fn move_nic_in(
    places: &Places<'_>,
    plan: &Plan,
    record: &mut Record,
    ledger: &mut Ledger,
) -> Result<LinkInfo> {
    let (env, conf) = (places.env, places.conf);
    let (pod, nic) = (&plan.pod, &plan.nic);
    let tag = record.tag().encode();
    ledger.took(Taken::Nic {
        record: Box::new(record.clone()),
    });
    let moved = places
        .host
        .move_to(
            nic.index,
            &plan.pod_ns,
            &Arrival {
                name: &env.ifname,
                mtu: conf.mtu,
                alias: Some(&tag),
                up: false,
                mac: None,
            },
        )
        .await;
    if let Err(e) = moved {
        // The kernel moves a link before it renames it: a failed rename (the name taken in
        // the pod meanwhile) leaves the NIC in the pod under its host name. The rollback finds
        // a virtual NIC there only by its pod index: note it first.
        if let Ok(links) = pod.all().await
            && let Some(l) = links
                .iter()
                .find(|l| record.is_its_device(l) || (l.mac == nic.mac && l.kind == nic.kind))
        {
            record.pod_index = Some(l.index);
            ledger.update_record(record);
            if let Err(u) = Store::new(&places.node.state_dir).update(record) {
                log::warn!("noting {}'s index in the pod: {u}", nic.name);
            }
        }
        return Err(e);
    }
    fault::hit("add:after-nic-move")?;
    let inside = pod.by_name(&env.ifname).await?.ok_or_else(|| {
        Error::new(
            Code::Netlink,
            format!(
                "{} did not arrive in {} as {}",
                nic.name, env.netns, env.ifname
            ),
        )
    })?;
    // From now on DEL knows the NIC by its index in the pod, which the pod cannot change.
    record.pod_index = Some(inside.index);
    Store::new(&places.node.state_dir).update(record)?;
    ledger.update_record(record);
    // Nothing of another namespace came with it (stacked on it between the policy check and
    // the move, through a namespace id): else it goes home and ADD fails naming what.
    rdma_host_device_core::uppers::arrival::check(
        &plan.sentry,
        &plan.pod_ns,
        inside.index,
        &env.ifname,
    )?;
    pod.set_up(inside.index).await?;
    log::info!(
        "moved {} into {} as {} (index {}, mtu {})",
        record.host_name,
        env.netns,
        env.ifname,
        inside.index,
        inside.mtu
    );
    Ok(inside)
}

/// Step 5: No RDMA hardware: a software device on the NIC, made inside the pod.
async fn make_soft_rdma(places: &Places<'_>, plan: &Plan, inside: &LinkInfo) -> Result<()> {
    let Some(RdmaPlan::Soft { kind, name }) = &plan.rdma else {
        return Ok(());
    };
    let (env, conf) = (places.env, places.conf);
    // siw ignores carrier changes (NETDEV_CHANGE is "not handled" in siw_main.c): a device
    // made before the link has carrier stays DOWN for good. Wait for it (a NIC whose wire
    // comes up with another pod's ADD, as a veth pair does), within the GID deadline.
    if *kind == SoftDevice::Siw
        && !plan
            .pod
            .wait_for_carrier(
                inside.index,
                std::time::Duration::from_millis(conf.rdma.gid_timeout_ms),
            )
            .await?
    {
        log::warn!(
            "{} has no carrier after {} ms; creating {name} anyway (its port will stay DOWN)",
            env.ifname,
            conf.rdma.gid_timeout_ms
        );
    }
    rdma::create_soft(*kind, name, &env.ifname, &plan.pod_ns)?;
    fault::hit("add:after-soft-rdma")
}

/// Step 6: Addresses from IPAM, applied inside the pod: the result ADD answers with, and what it
/// applied.
async fn apply_addresses(
    places: &Places<'_>,
    plan: &Plan,
    inside: &LinkInfo,
    saving: Saving,
    ledger: &mut Ledger,
) -> Result<(CniResult, Applied)> {
    let (env, conf) = (places.env, places.conf);
    let mut result = conf.prev_result.clone().unwrap_or_default();
    let ours = result.push_interface(Interface {
        name: env.ifname.clone(),
        mac: inside.mac.clone(),
        mtu: Some(inside.mtu),
        sandbox: env.netns.clone(),
        pci_id: plan.pci.clone().unwrap_or_default(),
        socket_path: String::new(),
    });
    // The record on the disk before anything that outlives a node crash, and before answering.
    saving.durable()?;
    if let Some(t) = &conf.ipam_type {
        let ipam = Ipam::new(t, env, places.node)?;
        // Registered first: a plugin may allocate and then fail.
        ledger.took(Taken::Lease);
        let got = ipam.add(&conf.raw)?;
        fault::hit("add:after-ipam")?;
        if got.ips.iter().any(|ip| ip.address.addr().is_ipv6()) {
            check_ipv6_mtu(inside.mtu, &format!("IPAM plugin {t:?}'s result"))?;
        }
        super::address::apply_ipam(&plan.pod, inside.index, &got, ours, &mut result).await?;
        if conf.dns.is_none() && !got.dns.is_empty() {
            result.dns = got.dns;
        }
    }
    if let Some(dns) = &conf.dns {
        result.dns = dns.clone();
    }
    let ours_ips: Vec<_> = result
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(ours))
        .collect();
    let applied = Applied {
        ips: ours_ips.iter().map(|ip| ip.address.addr()).collect(),
        network: NetworkData {
            interface_name: env.ifname.clone(),
            ips: ours_ips.iter().map(|ip| ip.address.to_string()).collect(),
            hardware_address: inside.mac.clone(),
        },
    };
    crate::announce::announce(
        &plan.pod_ns,
        &env.ifname,
        inside.index,
        &inside.mac,
        &applied.ips,
    );
    fault::hit("add:after-addresses")?;
    Ok((result, applied))
}

/// Step 7: The RDMA device, seen from inside the pod, has a RoCE v2 GID for every address: each
/// address with its GID's index.
async fn verify_gids(
    places: &Places<'_>,
    plan: &Plan,
    inside: &LinkInfo,
    ips: &[IpAddr],
) -> Result<Vec<(IpAddr, u32)>> {
    let Some(p) = &plan.rdma else {
        return Ok(Vec::new());
    };
    match rdma::verify(
        p.device(),
        ips,
        places.conf.rdma.gid_timeout_ms,
        &plan.pod_ns,
    ) {
        Ok(g) => Ok(g),
        Err(e) => {
            let netdev = plan.pod.by_index(inside.index).await.ok().flatten();
            Err(rdma::with_netdev_state(e, netdev.as_ref()))
        }
    }
}

/// Step 8: The device-info file Multus asked for: which PCI function and RDMA device are the pod's
/// (Multus puts it in the pod's network-status annotation).
fn write_device_info(
    places: &Places<'_>,
    plan: &Plan,
    record: &Record,
    ledger: &mut Ledger,
) -> Result<()> {
    let Some(path) = &places.conf.device_info_file else {
        return Ok(());
    };
    let info = DeviceInfo {
        pf_pci_address: plan
            .pci
            .as_deref()
            .and_then(rdma_host_device_core::sysfs::physfn_of),
        pci_address: plan.pci.clone(),
        rdma_device: plan.rdma.as_ref().map(|p| p.device().to_owned()),
    };
    if info.is_empty() {
        log::info!(
            "device-info: {} has no PCI address and no RDMA device; {} not written",
            record.host_name,
            path.display()
        );
    } else {
        ledger.took(Taken::DeviceInfo { path: path.clone() });
        device_info::write(path, &info)?;
        log::info!("device-info: {} written ({info:?})", path.display());
    }
    Ok(())
}

/// Step 9: The claim's KEP-5304 device metadata and its env (`NCCL_IB_GID_INDEX`): this device's
/// entry completed with what ADD applied and verified. Containers are created after ADD, so they
/// mount and read this generation.
fn complete_claim_metadata(
    places: &Places<'_>,
    plan: &Plan,
    record: &Record,
    attached: &metadata::Attached,
    ledger: &mut Ledger,
) -> Result<()> {
    let (Some(files), Some(dra)) = (&plan.metadata, &record.dra) else {
        return Ok(());
    };
    ledger.took(Taken::Metadata {
        files: Box::new(files.clone()),
        pool: dra.pool.clone(),
        device: dra.device.clone(),
    });
    let generation = metadata::update_device(files, &dra.pool, &dra.device, Some(attached))
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!(
                    "completing the device metadata of claim {}/{}: {e}",
                    dra.namespace, dra.name
                ),
            )
        })?;
    match generation {
        Some(g) => {
            log::info!(
                "device metadata {} at generation {g}: ifName {}, GID indices {:?}",
                files.file.display(),
                places.env.ifname,
                attached.gid_indices
            );
            Ok(())
        }
        None => Err(Error::new(
            Code::Io,
            format!(
                "the device metadata {} the DRA driver recorded for claim {}/{} is missing",
                files.file.display(),
                dra.namespace,
                dra.name
            ),
        )),
    }
}

/// Step 9b: The device plugin's env spec of this NIC (`nic_env`), if its Allocate wrote one:
/// generation 2 with the GID index verified above (`NCCL_IB_GID_INDEX`). Containers are created
/// after ADD, and containerd's CDI cache reloads a spec on its rename.
fn complete_nic_env(plan: &Plan, attached: &metadata::Attached, ledger: &mut Ledger) -> Result<()> {
    let Some(ne) = &plan.nic_env else {
        return Ok(());
    };
    let rdma = attached.rdma_device.clone();
    ledger.took(Taken::NicEnv {
        env: ne.clone(),
        rdma: rdma.clone(),
    });
    match rdma_host_device_core::nic_env::update(&ne.place, &ne.id, rdma.as_deref(), Some(attached))
    {
        Ok(Some(g)) => log::info!(
            "env {} at generation {g}: GID indices {:?}",
            rdma_host_device_core::nic_env::cdi_id(&ne.id),
            attached.gid_indices
        ),
        Ok(None) => log::info!(
            "no env spec for {} in {} (not allocated by a device plugin with nicEnv): none written",
            ne.id,
            ne.place.cdi_dir.display()
        ),
        Err(e) => {
            return Err(Error::new(
                Code::Io,
                format!(
                    "completing the env of {} for the pod's containers: {e}",
                    rdma_host_device_core::nic_env::cdi_id(&ne.id)
                ),
            ));
        }
    }
    Ok(())
}

/// Step 10: A NIC of a DRA claim: what ADD applied, for the driver to report in the claim's status.
/// Written last, so a record with it is an attachment that succeeded; the pod may change any of it
/// later, and what is reported stays what ADD did.
fn note_network_data(
    places: &Places<'_>,
    record: &mut Record,
    network: &NetworkData,
    ledger: &mut Ledger,
) -> Result<()> {
    if let Some(dra) = &mut record.dra {
        dra.network = Some(network.clone());
        // Like the NIC's index, worth something only while the pod's netns lives: no fsync.
        Store::new(&places.node.state_dir).update(record)?;
        ledger.update_record(record);
    }
    Ok(())
}
