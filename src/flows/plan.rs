//! ADD's plan: which NIC (and how a lost one is given back), which RDMA device, which
//! namespaces, and the record DEL will need, all decided and checked before the first change
//! (the only repairs it makes: a stale temp state file removed, lost NICs whose names are not
//! UTF-8 given readable ones).
//! `add::attach` only acts on it. Planning takes the attachment's and the NIC's locks and
//! keeps them in the plan, so nothing it decided can change under it.

use super::give_back::decide::record_for_lost;
use super::give_back::lost;
use super::rdma::{self, RdmaPlan};
use crate::cni::env::Env;
use crate::cni::netconf::{NetConf, NicRequest};
use crate::lock;
use crate::select::{self, Resolved};
use rdma_host_device_core::dra::checkpoint::{PreparedClaim, PreparedDevice};
use rdma_host_device_core::error::{Code, Error, Result};
use rdma_host_device_core::fault;
use rdma_host_device_core::inventory::Identity;
use rdma_host_device_core::link::{LinkInfo, Links};
use rdma_host_device_core::netns::Netns;
use rdma_host_device_core::node::Node;
use rdma_host_device_core::state::{DraAttachment, Record, Store};
use rdma_host_device_core::uppers::arrival::Sentry;
use std::path::Path;

/// Everything ADD will do, decided before it changes anything.
pub struct Plan {
    pub host_ns: Netns,
    pub pod_ns: Netns,
    /// rtnetlink sockets opened in each namespace.
    pub host: Links,
    pub pod: Links,
    /// The NIC as it is on the host now (a lost one still bears its pod-side name).
    pub nic: LinkInfo,
    /// A NIC lost to a pod deleted without DEL: the record to give it back from, first.
    pub lost: Option<Record>,
    /// The NIC's PCI address, for the result's `pciID`.
    pub pci: Option<String>,
    pub rdma: Option<RdmaPlan>,
    /// What DEL needs, written before the first change.
    pub record: Record,
    /// The KEP-5304 device metadata of the DRA claim this NIC is for, which ADD completes:
    /// where the node configuration (`dra.deviceMetadata`) and the claim's names put it.
    pub metadata: Option<rdma_host_device_core::dra::metadata::Files>,
    /// The device plugin's env spec of this NIC (`devicePlugin.nicEnv`), which ADD completes
    /// with the GID index if the device plugin wrote one.
    pub nic_env: Option<super::metadata::NicEnv>,
    /// The host's link notifications since before the policy check: what touched the NIC
    /// until it left (checked on arrival, `uppers::arrival`).
    pub sentry: Sentry,
    /// The attachment's and the NIC's locks, held until ADD ends.
    _locks: (lock::Guard, lock::Guard),
}

/// Plan ADD of `env`'s attachment: resolve the selector under the NIC's lock, apply the node
/// policy, pair RDMA, and check every value the kernel could refuse half-way.
pub async fn plan(env: &Env, conf: &NetConf, node: &Node) -> Result<Plan> {
    // Our DRA driver's record of prepared claims, read once (absent: empty): `draRequest`
    // selects from it, and every ADD checks the NIC it resolves against it.
    let prepared = Prepared::read(node)?;
    let from_dra = match from_claim(conf) {
        FromClaim::Request(request) => Some(dra_nic(env, node, &prepared, request)?),
        FromClaim::ExtendedResource(resource) => {
            Some(dra_extended_nic(env, node, &prepared, resource)?)
        }
        FromClaim::No => None,
    };
    let request = match &from_dra {
        Some((s, _)) => s,
        None => conf.require_nic()?,
    };
    // The node decides what this root process may exec for the tenant: checked first.
    // The paths in `ipam` too: the plugin runs as root and writes, reads or connects there.
    // Found on CNI_PATH as well, before anything moves (7 otherwise).
    if let Some(t) = &conf.ipam_type {
        crate::ipam::Ipam::new(t, env, node)?.admit_paths(&conf.raw)?;
    }
    let ipam_conf = crate::ipam::ipam_object(&conf.raw);
    let pod_ns = Netns::open(Path::new(&env.netns))?;
    pod_ns.refuse_if_host()?;
    let host_ns = Netns::current()?;
    let host = Links::open()?;
    let pod = Links::open_in(&pod_ns)?;
    let store = Store::new(&node.state_dir);
    let attachment = lock::attachment(&node.state_dir, &env.container_id, &env.ifname)?;
    fault::hit("add:locked")?;
    // A temp file of ours can only be what an earlier call killed mid-write left (we hold the
    // lock every writer holds).
    store.remove_temp(&env.container_id, &env.ifname)?;
    if let Some(old) = store.load(&env.container_id, &env.ifname)? {
        return Err(Error::new(
            Code::DeviceBusy,
            format!(
                "container {} already has {} attached as {} (an earlier ADD that was not deleted); the runtime must DEL it first",
                env.container_id, old.host_name, env.ifname
            ),
        ));
    }
    let (resolved, nic_lock) = resolve_locked(request, &host, &host_ns, &store).await?;
    log::info!(
        "{request} is {} (mac {}, mtu {}{})",
        resolved.link.name,
        resolved.link.mac,
        resolved.link.mtu,
        resolved
            .pci
            .as_deref()
            .map(|p| format!(", pci {p}"))
            .unwrap_or_default()
    );
    let records = &resolved.records;
    // Listening before the policy looks: whatever rides the NIC from now until it leaves the
    // host is either seen by the policy or reported by the host's link notifications.
    let sentry = Sentry::watch(resolved.link.index, &resolved.link.name)?;
    select::admit(node, &host, &resolved, records).await?;
    refuse_another_pods_prepared_nic(env, &prepared, &resolved)?;
    if pod.by_name(&env.ifname).await?.is_some() {
        return Err(Error::new(
            Code::IfnameExists,
            format!(
                "interface {} already exists in {}; pick another CNI_IFNAME",
                env.ifname, env.netns
            ),
        ));
    }
    let lost = resolved
        .lost
        .as_ref()
        .and_then(|tag| record_for_lost(&resolved.link, tag, records, "ADD"));
    // The NIC as it will be once given back: what the record remembers as its own.
    let home = match &lost {
        Some(r) => LinkInfo {
            name: r.host_name.clone(),
            mtu: r.host_mtu,
            up: r.host_up,
            alias: r.host_alias.clone(),
            mac: r.mac.clone(),
            altnames: r.altnames.clone(),
            flags: r.host_flags.unwrap_or(resolved.link.flags),
            group: r.host_group.unwrap_or(resolved.link.group),
            txqlen: r.host_txqlen.unwrap_or(resolved.link.txqlen),
            ..resolved.link.clone()
        },
        None => resolved.link.clone(),
    };
    if let Some(mtu) = conf.mtu {
        check_mtu(&home, mtu)?;
    }
    if ipv6_declared(&ipam_conf) {
        check_ipv6_mtu(conf.mtu.unwrap_or(home.mtu), "the config's ipam")?;
    }
    // Pairing reads the kernel's view of the NIC as it is now (sysfs by its current name).
    let rdma = rdma::pair_and_check(env, conf, node, &resolved.link)?;
    let mut record = Record {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        network: conf.name.clone(),
        netns: env.netns.clone(),
        netns_id: Some(pod_ns.identity()?),
        pci: resolved.pci.clone(),
        ipam: ipam_recorded(conf),
        pod: env.pod(),
        device_info: match &conf.device_info_file {
            Some(p) => {
                rdma_host_device_core::device_info::check_owner(p, &env.container_id, &env.ifname)?;
                Some(p.clone())
            }
            None => None,
        },
        dra: from_dra.map(|(_, d)| d),
        moved_after: rdma_host_device_core::state::Since::now(),
        ..Record::of_home(&home)
    };
    if let Some(p) = &rdma {
        p.record_into(&mut record);
    }
    let metadata = super::metadata::files(node, record.dra.as_ref())?;
    let nic_env = super::metadata::nic_env_of(node, &record)?;
    Ok(Plan {
        host_ns,
        pod_ns,
        host,
        pod,
        nic: resolved.link.clone(),
        lost,
        pci: resolved.pci,
        rdma,
        record,
        metadata,
        nic_env,
        sentry,
        _locks: (attachment, nic_lock),
    })
}

/// Whether ADD takes its NIC from a claim our DRA driver prepared, and how.
#[derive(Debug, PartialEq, Eq)]
enum FromClaim<'a> {
    Request(&'a str),
    ExtendedResource(&'a str),
    No,
}

/// `draRequest` always; `draExtendedResource` only when no `deviceID` came: "deviceID wins;
/// without it, the checkpoint" (the one NAD serves a node whose device plugin hands out the
/// resource, through Multus, and a node whose DRA driver does).
fn from_claim(conf: &NetConf) -> FromClaim<'_> {
    match (&conf.dra_request, &conf.nic, &conf.dra_extended_resource) {
        (Some(request), _, _) => FromClaim::Request(request),
        (None, None, Some(resource)) => FromClaim::ExtendedResource(resource),
        _ => FromClaim::No,
    }
}

/// The DRA driver's checkpoint as ADD reads it, with where it was read from (for messages).
struct Prepared {
    cp: rdma_host_device_core::dra::checkpoint::Checkpoint,
    path: std::path::PathBuf,
}

impl Prepared {
    fn read(node: &Node) -> Result<Prepared> {
        let path = rdma_host_device_core::dra::checkpoint::path(&node.state_dir);
        let cp = rdma_host_device_core::dra::checkpoint::Checkpoint::read(&path)
            .map_err(|e| Error::new(Code::Io, e.to_string()))?;
        Ok(Prepared { cp, path })
    }
}

/// A NIC our DRA driver prepared for a claim goes to that claim's pods only, whatever selected
/// it: a `deviceID` Multus read from the claim (its DRA mode), or one a tenant's NAD wrote
/// itself. The pod is the runtime's `K8S_POD_UID`, which no NAD sets; the claim's pods are
/// those its `status.reservedFor` named when the driver prepared it (the checkpoint). No
/// checkpoint, or a NIC no claim holds: nothing to say.
fn refuse_another_pods_prepared_nic(env: &Env, prepared: &Prepared, r: &Resolved) -> Result<()> {
    let Prepared { cp, path } = prepared;
    if cp.claims.is_empty() {
        return Ok(());
    }
    // Named as the DRA driver named it when it prepared the claim (`inventory`).
    let Identity {
        device_id: id,
        name: host_name,
        ..
    } = Identity::of_link(&r.link);
    let uid = env.pod().map(|p| p.uid).unwrap_or_default();
    match cp.holder(&id, "") {
        Some((claim_uid, c)) if uid.is_empty() || !c.pods.contains(&uid) => Err(Error::new(
            Code::DeviceBusy,
            format!(
                "{host_name} (device {id}) is prepared for ResourceClaim {}/{} ({claim_uid}) of pod(s) {}; {} is not one of them ({})",
                c.namespace,
                c.name,
                c.pods.join(", "),
                if uid.is_empty() {
                    "this call, which names no pod UID (K8S_POD_UID),".to_owned()
                } else {
                    format!("pod {uid}")
                },
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// `draRequest`: the NIC our DRA driver prepared for this pod under `request`, as a `deviceID`
/// selector. The pod is the UID the runtime puts in CNI_ARGS (`K8S_POD_UID`), which the NAD
/// cannot set; the driver's checkpoint lists each prepared claim's pods, and only the claims
/// of this pod are looked at, so no request name reaches another pod's NIC. Of several NICs
/// under one request, the first not already attached (one ADD per NIC). With it, which claim
/// and allocation result it is, for the record (the driver reports the NIC's network data in
/// that claim's status).
fn dra_nic(
    env: &Env,
    node: &Node,
    prepared: &Prepared,
    request: &str,
) -> Result<(NicRequest, DraAttachment)> {
    let Prepared { cp, path } = prepared;
    let uid = env.pod().map(|p| p.uid).unwrap_or_default();
    if uid.is_empty() {
        return Err(Error::new(
            Code::InvalidEnv,
            format!(
                "draRequest {request}: CNI_ARGS names no pod UID (K8S_POD_UID), which the runtime passes for a Kubernetes pod; the NIC a DRA claim prepared is found by it"
            ),
        ));
    }
    let devices = cp.claims_for_pod(&uid, request);
    if devices.is_empty() {
        let has = cp.requests_of(&uid);
        return Err(Error::new(
            Code::DeviceNotFound,
            format!(
                "draRequest {request}: the DRA driver prepared no NIC for pod {uid} under that request ({}; {})",
                if has.is_empty() {
                    "none for this pod at all: does its ResourceClaim use rdma-host-device.io?"
                        .to_owned()
                } else {
                    format!("this pod's requests: {}", has.join(", "))
                },
                path.display()
            ),
        ));
    }
    first_unattached(
        &format!("draRequest {request}"),
        &uid,
        &devices,
        &attached_ids(node)?,
    )
}

/// The device IDs of every NIC attached now (the records), as `inventory` names them.
fn attached_ids(node: &Node) -> Result<Vec<String>> {
    Ok(Store::new(&node.state_dir)
        .all()?
        .iter()
        .map(|r| Identity::of_record(r).device_id)
        .collect())
}

/// Of `devices` (prepared for pod `uid`, found by `what`), the first whose NIC is not in
/// `attached` (one ADD per NIC), as a `deviceID` selector, with which claim and allocation
/// result it is, for the record (the driver reports the NIC's network data in that claim's
/// status). All attached: 102.
fn first_unattached(
    what: &str,
    uid: &str,
    devices: &[(&str, &PreparedClaim, &PreparedDevice)],
    attached: &[String],
) -> Result<(NicRequest, DraAttachment)> {
    match devices
        .iter()
        .find(|(_, _, d)| !attached.contains(&d.device_id))
    {
        Some((claim_uid, claim, d)) => {
            log::info!(
                "{what} of pod {uid}: device {} ({}), pool {}, claim {}/{}",
                d.device,
                d.device_id,
                d.pool,
                claim.namespace,
                claim.name
            );
            let dra = DraAttachment {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                uid: (*claim_uid).to_owned(),
                request: d.request.clone(),
                driver: rdma_host_device_core::dra::DRIVER.to_owned(),
                pool: d.pool.clone(),
                device: d.device.clone(),
                network: None,
                metadata: claim.metadata,
            };
            Ok((NicRequest::DeviceId(d.device_id.clone()), dra))
        }
        None => Err(Error::new(
            Code::DeviceBusy,
            format!(
                "{what}: every NIC prepared for pod {uid} is attached already ({})",
                devices
                    .iter()
                    .map(|(_, _, d)| d.device_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// `draExtendedResource`, when no `deviceID` came: the NIC our DRA driver prepared for this
/// pod in the claim the scheduler made for its extended resources (KEP-5004: a container's
/// `resources.limits` of a DeviceClass's `extendedResourceName`, on a node whose allocatable
/// has none of it). Multus 4.x passes no `deviceID` for such a claim (its pod-resources entry
/// is keyed by the claim's generated name, not the resource's), so the claim is found as
/// `draRequest` finds one: by the UID the runtime puts in CNI_ARGS, never by anything the NAD
/// says, among the claims the driver recorded as extended-resource claims reserved for that
/// pod. Of several NICs (several networks, or `limits` > 1), the first not attached.
fn dra_extended_nic(
    env: &Env,
    node: &Node,
    prepared: &Prepared,
    resource: &str,
) -> Result<(NicRequest, DraAttachment)> {
    let Prepared { cp, path } = prepared;
    let what = format!("draExtendedResource {resource}");
    let uid = env.pod().map(|p| p.uid).unwrap_or_default();
    if uid.is_empty() {
        return Err(Error::new(
            Code::InvalidEnv,
            format!(
                "{what}: no deviceID came and CNI_ARGS names no pod UID (K8S_POD_UID), which the runtime passes for a Kubernetes pod; the NIC of its extended-resource claim is found by it"
            ),
        ));
    }
    let devices = cp.extended_for_pod(&uid);
    if devices.is_empty() {
        return Err(Error::new(
            Code::DeviceNotFound,
            format!(
                "{what}: no deviceID came (on a node whose device plugin serves it, Multus passes one when the NAD's k8s.v1.cni.cncf.io/resourceName annotation names it), and the DRA driver prepared no extended-resource claim for pod {uid} ({}; {})",
                if cp.requests_of(&uid).is_empty() {
                    format!(
                        "does the pod's container have {resource} in resources.limits, and does this node serve it through DRA?"
                    )
                } else {
                    "this pod's claims are ones it names itself: use draRequest".to_owned()
                },
                path.display()
            ),
        ));
    }
    first_unattached(&what, &uid, &devices, &attached_ids(node)?)
}

/// Resolve the selector and lock the NIC it names (by its original host name); what decides is
/// the resolution made under the lock, since every call that moves a NIC holds its lock. A
/// loser of a race for the NIC gets "device busy" (102) from it, or 11 if the wait ran out,
/// and has changed nothing.
async fn resolve_locked(
    sel: &NicRequest,
    host: &Links,
    host_ns: &Netns,
    store: &Store,
) -> Result<(Resolved, lock::Guard)> {
    fn nic_name(r: &Resolved) -> &str {
        r.lost.as_ref().map_or(&r.link.name, |t| &t.host_name)
    }
    // Look first, without the lock, to learn which NIC the selector names: the lock is on the
    // NIC's own (primary, original) name, never the selector's string, which may be an altname.
    // A NIC being moved by another call is briefly in no namespace at all, so "not found"
    // there is only believed when it lasts.
    // A NIC lost to a dead pod under a name that is not UTF-8 is invisible to every lookup
    // until renamed (its own selector then finds nothing, or only its record): looked for only
    // when the selector fails, since a selector that finds a link has found its NIC, and the
    // pass reads a line per link of the host (a veth per pod), which an ADD must not pay on
    // every call.
    let guess = {
        let (mut tries, mut named) = (0, false);
        loop {
            match select::resolve(sel, host, store).await {
                Ok(r) => break nic_name(&r).to_string(),
                Err(_) if !named => {
                    lost::name_lost_unreadable(host, host_ns).await?;
                    named = true;
                }
                Err(e) if e.code == Code::DeviceNotFound && tries < 3 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    };
    let guard = lock::device(&guess)?;
    let now = select::resolve(sel, host, store).await?;
    if nic_name(&now) != guess {
        return Err(Error::new(
            Code::TryAgain,
            format!(
                "{sel} was {guess} and became {} while this call waited for it; try again",
                nic_name(&now)
            ),
        ));
    }
    Ok((now, guard))
}

/// The kernel applies a move's MTU after the move itself: an MTU the driver refuses would
/// fail half-way, so it is checked against the driver's range before anything changes.
fn check_mtu(nic: &LinkInfo, mtu: u32) -> Result<()> {
    let (lo, hi) = (nic.min_mtu.unwrap_or(68), nic.max_mtu.unwrap_or(u32::MAX));
    if (lo..=hi).contains(&mtu) {
        return Ok(());
    }
    Err(rdma_host_device_core::error::invalid_config(format!(
        "mtu {mtu} is outside what {}'s driver accepts ({lo} to {hi})",
        nic.name
    )))
}

/// IPv6 needs a link MTU of at least 1280 (RFC 8200): below it the kernel disables IPv6 on
/// the link and drops its addresses, so a pod would come up without the address its result
/// promises.
const IPV6_MIN_MTU: u32 = 1280;

pub(super) fn check_ipv6_mtu(mtu: u32, whence: &str) -> Result<()> {
    if mtu >= IPV6_MIN_MTU {
        return Ok(());
    }
    Err(rdma_host_device_core::error::invalid_config(format!(
        "{whence} has an IPv6 address, and IPv6 needs MTU >= {IPV6_MIN_MTU}, but the pod's MTU would be {mtu}; raise mtu or drop the IPv6 address"
    )))
}

/// Does the ipam config name IPv6 addresses or ranges (static `addresses`, host-local
/// `ranges`/`subnet`, whereabouts `range`/`ipRanges`)? Checked before anything changes; the
/// IPAM result is checked again once it is known.
fn ipv6_declared(ipam: &serde_json::Value) -> bool {
    use serde_json::Value;
    const KEYS: [&str; 6] = [
        "addresses",
        "address",
        "ranges",
        "subnet",
        "range",
        "ipRanges",
    ];
    fn any_v6(v: &Value) -> bool {
        match v {
            Value::String(s) => {
                let ip = s.split('/').next().unwrap_or(s);
                ip.parse::<std::net::Ipv6Addr>().is_ok()
            }
            Value::Array(a) => a.iter().any(any_v6),
            Value::Object(o) => o
                .iter()
                .any(|(k, v)| KEYS.contains(&k.as_str()) && any_v6(v)),
            _ => false,
        }
    }
    ipam.as_object().is_some_and(|o| {
        o.iter()
            .any(|(k, v)| KEYS.contains(&k.as_str()) && any_v6(v))
    })
}

/// The `ipam` object to release with on DEL, when the config has a usable one.
fn ipam_recorded(conf: &NetConf) -> Option<serde_json::Value> {
    conf.ipam_type.as_ref()?;
    let v: serde_json::Value = serde_json::from_slice(&conf.raw).ok()?;
    v.get("ipam").cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_host_device_core::dra::checkpoint::Checkpoint;

    fn nad(extra: &str) -> NetConf {
        NetConf::parse(
            format!(r#"{{"cniVersion":"1.0.0","name":"rail","type":"rdma-host-device"{extra}}}"#)
                .into_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn a_device_id_wins_over_the_extended_resource_claim() {
        let key = r#","draExtendedResource":"rdma-host-device.io/rail""#;
        assert_eq!(
            from_claim(&nad(key)),
            FromClaim::ExtendedResource("rdma-host-device.io/rail")
        );
        // What Multus adds on a device-plugin node: deviceID, pciBusID, runtimeConfig.deviceID.
        let multus = r#","deviceID":"0000:3b:00.0","pciBusID":"0000:3b:00.0","runtimeConfig":{"deviceID":"0000:3b:00.0"}"#;
        let c = nad(&format!("{key}{multus}"));
        assert_eq!(from_claim(&c), FromClaim::No);
        assert_eq!(c.nic, Some(NicRequest::DeviceId("0000:3b:00.0".into())));
        assert_eq!(
            from_claim(&nad(r#","draRequest":"nic""#)),
            FromClaim::Request("nic")
        );
        assert_eq!(from_claim(&nad(r#","device":"eth1""#)), FromClaim::No);
    }

    /// Pod a: an extended-resource claim of two NICs and a claim of its own; pod b: an
    /// extended-resource claim of one.
    fn extended_claims() -> Prepared {
        let dev = |request: &str, id: &str| PreparedDevice {
            request: request.into(),
            pool: "node-a".into(),
            device: id.replace([':', '.'], "-"),
            device_id: id.into(),
            cdi_device_ids: vec![],
        };
        let mut cp = Checkpoint::empty();
        for (uid, name, pod, ext, devices) in [
            (
                "uid-1",
                "a-extended-resources-x1",
                "pod-a",
                true,
                vec![
                    dev("container-0-request-0", "0000:3b:00.0"),
                    dev("container-1-request-0", "0000:3b:00.1"),
                ],
            ),
            (
                "uid-2",
                "rails",
                "pod-a",
                false,
                vec![dev("nic", "0000:af:00.0")],
            ),
            (
                "uid-3",
                "b-extended-resources-x2",
                "pod-b",
                true,
                vec![dev("container-0-request-0", "0000:5e:00.0")],
            ),
            (
                "uid-4",
                "own",
                "pod-c",
                false,
                vec![dev("nic", "0000:d8:00.0")],
            ),
        ] {
            cp.claims.insert(
                uid.into(),
                PreparedClaim {
                    namespace: "team".into(),
                    name: name.into(),
                    pods: vec![pod.into()],
                    devices,
                    extended_resource: ext,
                    metadata: false,
                },
            );
        }
        Prepared {
            cp,
            path: "/nonexistent/dra/checkpoint.json".into(),
        }
    }

    fn env_of(args: &str) -> Env {
        Env {
            command: crate::cni::env::Command::Add,
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            ifname: "net1".into(),
            args: args.into(),
            path: vec![],
        }
    }

    #[test]
    fn the_extended_resource_claim_gives_its_own_pods_nics_only_each_once() {
        let state = std::env::temp_dir().join(format!("rhd-plan-ext-{}", std::process::id()));
        let node = Node {
            state_dir: state.clone(),
            ..Node::default()
        };
        let p = extended_claims();
        let pod = |uid: &str| {
            env_of(&format!(
                "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;K8S_POD_UID={uid}"
            ))
        };
        let r = "rdma-host-device.io/rail";
        let (sel, dra) = dra_extended_nic(&pod("pod-b"), &node, &p, r).unwrap();
        assert_eq!(sel, NicRequest::DeviceId("0000:5e:00.0".into()));
        assert_eq!(
            (dra.name.as_str(), dra.uid.as_str(), dra.request.as_str()),
            ("b-extended-resources-x2", "uid-3", "container-0-request-0")
        );
        // Pod a: its extended claim's first NIC, never its own claim's (that is draRequest's).
        let (sel, _) = dra_extended_nic(&pod("pod-a"), &node, &p, r).unwrap();
        assert_eq!(sel, NicRequest::DeviceId("0000:3b:00.0".into()));
        // The next ADD of the pod (another network) gets the next NIC; then none is left.
        let devices = p.cp.extended_for_pod("pod-a");
        let (sel, dra) =
            first_unattached("x", "pod-a", &devices, &["0000:3b:00.0".to_owned()]).unwrap();
        assert_eq!(sel, NicRequest::DeviceId("0000:3b:00.1".into()));
        assert_eq!(dra.request, "container-1-request-0");
        let all = ["0000:3b:00.0".to_owned(), "0000:3b:00.1".to_owned()];
        let e = first_unattached("x", "pod-a", &devices, &all).unwrap_err();
        assert_eq!(e.code, Code::DeviceBusy);
        // A pod with only claims it names, a pod with none, a call with no pod UID.
        let e = dra_extended_nic(&pod("pod-c"), &node, &p, r).unwrap_err();
        assert_eq!(e.code, Code::DeviceNotFound);
        assert!(e.msg.contains("use draRequest"), "{}", e.msg);
        let e = dra_extended_nic(&pod("pod-z"), &node, &p, r).unwrap_err();
        assert_eq!(e.code, Code::DeviceNotFound);
        assert!(
            e.msg
                .contains("rdma-host-device.io/rail in resources.limits"),
            "{}",
            e.msg
        );
        let e = dra_extended_nic(&env_of("K8S_POD_NAME=p"), &node, &p, r).unwrap_err();
        assert_eq!(e.code, Code::InvalidEnv);
        let _ = std::fs::remove_dir_all(&state);
    }

    #[test]
    fn mtu_outside_the_drivers_range_is_refused_before_any_change() {
        let nic = LinkInfo {
            index: 3,
            name: "ens1".into(),
            mac: String::new(),
            mtu: 1500,
            up: false,
            flags: 0,
            group: 0,
            txqlen: 0,
            alias: None,
            min_mtu: Some(68),
            max_mtu: Some(1500),
            master: None,
            perm_mac: String::new(),
            altnames: Vec::new(),
            parent: None,
            kind: None,
            lower: None,
            lower_netnsid: None,
            carrier: false,
        };
        assert!(check_mtu(&nic, 1500).is_ok());
        let e = check_mtu(&nic, 9000).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(
            e.msg.contains("ens1") && e.msg.contains("1500"),
            "{}",
            e.msg
        );
        let unknown = LinkInfo {
            max_mtu: None,
            ..nic
        };
        assert!(check_mtu(&unknown, 9000).is_ok());
    }

    #[test]
    fn ipv6_in_the_ipam_config_is_seen() {
        use serde_json::json;
        for (ipam, want) in [
            (
                json!({"type": "static", "addresses": [{"address": "fd00::2/64"}]}),
                true,
            ),
            (
                json!({"type": "static", "addresses": [{"address": "10.0.0.2/24"}]}),
                false,
            ),
            (
                json!({"type": "host-local", "ranges": [[{"subnet": "fd00::/64"}]]}),
                true,
            ),
            (
                json!({"type": "host-local", "subnet": "10.0.0.0/24"}),
                false,
            ),
            (json!({"type": "whereabouts", "range": "fd00::/120"}), true),
            (
                json!({"type": "whereabouts", "ipRanges": [{"range": "fd00::/120"}]}),
                true,
            ),
            (json!({"type": "dhcp", "dataDir": "/var/a:b"}), false),
            (json!(null), false),
        ] {
            assert_eq!(ipv6_declared(&ipam), want, "{ipam}");
        }
        assert!(check_ipv6_mtu(1280, "x").is_ok());
        let e = check_ipv6_mtu(1279, "x").unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(e.msg.contains("IPv6 needs MTU >= 1280"), "{}", e.msg);
    }
}
