//! The network data of attached NICs in their claims' status (KEP-4817): for each claim in
//! the driver's checkpoint, one `status.devices[]` entry per device of ours that a pod's ADD
//! took, `{driver, pool, device, networkData: {interfaceName, ips, hardwareAddress}}`, added
//! when ADD succeeds and removed when DEL forgets the attachment.
//!
//! The CNI has no API client: ADD writes what it applied into its state record
//! (`state::Record::dra`), and this watcher of the state directory (inotify; everything read
//! again at start and after the kernel's queue overflowed) turns records into entries:
//!
//! - only for claims in the driver's own checkpoint, and only for devices prepared there for
//!   that claim: a record naming anything else is ignored and logged (the records are root's,
//!   written by our CNI; the checkpoint is the driver's word on what it prepared);
//! - entries of other drivers, and fields of ours other than `networkData` (conditions, data),
//!   are left as they are; the claim is edited as the API server's JSON, so no field this
//!   build does not know is lost;
//! - a conflict (409: the claim changed meanwhile) is retried on the claim read again; an
//!   answer that is no answer (connection, 5xx, 403) is retried every [`RETRY`]; a refusal
//!   (422) or an API server that drops the field (the `DRAResourceClaimDeviceStatus` gate off)
//!   is logged once and not retried;
//! - idempotent: a claim whose entries are already right is not written, so a restarted
//!   driver reads each of its claims once and writes only what changed while it was away.
//!
//! [`merge`] is the pure part: the claim's entries in, the entries to write out.

use crate::kube::Kube;
use rdma_host_device_core::state::{DraAttachment, NetworkData, Store};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// How often a claim whose write got no answer is tried again.
pub const RETRY: Duration = Duration::from_secs(5);
/// Tries of one claim's write when the claim keeps changing under it (409).
const CONFLICT_TRIES: usize = 5;

/// A device by its pool and name (the driver is ours).
pub type DeviceKey = (String, String);

/// The entries `status.devices[]` should have after the write, given the entries it has,
/// `driver`'s devices allocated in the claim (`allocated`), those of them this driver
/// prepared (`owned`), and the network data of those attached (`attached`). `None` when
/// nothing changes.
///
/// Every entry of another driver, or of a device of ours not `owned`, stays as it is. An entry
/// of an owned device is kept (its networkData set) when the device is attached and allocated,
/// and removed otherwise; an attached device with no entry gets one. An attached device the
/// allocation does not have gets none (the API server would refuse the whole write).
pub fn merge(
    current: &[Value],
    driver: &str,
    allocated: &BTreeSet<DeviceKey>,
    owned: &BTreeSet<DeviceKey>,
    attached: &BTreeMap<DeviceKey, NetworkData>,
) -> Option<Vec<Value>> {
    let key_of = |e: &Value| -> Option<DeviceKey> {
        (e["driver"].as_str() == Some(driver)).then(|| {
            (
                e["pool"].as_str().unwrap_or_default().to_owned(),
                e["device"].as_str().unwrap_or_default().to_owned(),
            )
        })
    };
    let want = |k: &DeviceKey| attached.get(k).filter(|_| allocated.contains(k));
    let mut out = Vec::with_capacity(current.len() + attached.len());
    let mut present = BTreeSet::new();
    for e in current {
        let Some(k) = key_of(e).filter(|k| owned.contains(k) && e["shareID"].is_null()) else {
            out.push(e.clone());
            continue;
        };
        if let Some(net) = want(&k)
            && present.insert(k.clone())
        {
            let mut e = e.clone();
            e["networkData"] = network_json(net);
            out.push(e);
        }
    }
    for (k, net) in attached {
        if owned.contains(k) && want(k).is_some() && !present.contains(k) {
            out.push(json!({
                "driver": driver,
                "pool": k.0,
                "device": k.1,
                "networkData": network_json(net),
            }));
        }
    }
    (out != current).then_some(out)
}

/// `networkData` in the API's JSON; empty fields left out (they are optional).
fn network_json(n: &NetworkData) -> Value {
    serde_json::to_value(n).unwrap_or_else(|_| json!({}))
}

/// `driver`'s devices in the claim's `status.allocation.devices.results[]`.
pub fn allocated_of(claim: &Value, driver: &str) -> BTreeSet<DeviceKey> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["driver"].as_str() == Some(driver))
        .map(|r| {
            (
                r["pool"].as_str().unwrap_or_default().to_owned(),
                r["device"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Whether the stored claim has every entry of `attached` (a server without the
/// `DRAResourceClaimDeviceStatus` gate drops `status.devices` and answers 200).
fn has_entries(stored: &Value, driver: &str, attached: &BTreeMap<DeviceKey, NetworkData>) -> bool {
    let got = allocated_entries(stored, driver);
    attached.keys().all(|k| got.contains(k))
}

fn allocated_entries(claim: &Value, driver: &str) -> BTreeSet<DeviceKey> {
    claim["status"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["driver"].as_str() == Some(driver) && e["networkData"].is_object())
        .map(|e| {
            (
                e["pool"].as_str().unwrap_or_default().to_owned(),
                e["device"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// An inotify watch of one directory, read on the runtime.
struct Inotify {
    fd: AsyncFd<OwnedFd>,
}

/// What one read of the watch said.
#[derive(Debug, Default)]
struct Heard {
    /// Names of files created, replaced, written or removed.
    names: BTreeSet<String>,
    /// Events were lost (the queue overflowed), or the directory itself went: read it all.
    rescan: bool,
}

impl Inotify {
    fn watch(dir: &Path) -> std::io::Result<Inotify> {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain syscalls; the fd is owned at once.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other("a NUL in the path"))?;
        let mask = libc::IN_MOVED_TO
            | libc::IN_MOVED_FROM
            | libc::IN_DELETE
            | libc::IN_CLOSE_WRITE
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF
            | libc::IN_ONLYDIR
            | libc::IN_DONT_FOLLOW;
        // SAFETY: a valid fd and NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the OwnedFd is moved in, so the fd stays open (and is not another file's)
        // as long as it is registered.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)?;
        Ok(Inotify { fd })
    }

    /// What happened since the last read (waits for something).
    async fn read(&self) -> std::io::Result<Heard> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut guard = self.fd.readable().await?;
            let n = match guard.try_io(|fd| {
                // SAFETY: reading into a buffer we own, within its length.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(r) => r?,
                Err(_would_block) => continue,
            };
            return Ok(parse_events(&buf[..n]));
        }
    }
}

/// `struct inotify_event` records: wd, mask, cookie, len, then `len` bytes of NUL-padded name.
fn parse_events(mut b: &[u8]) -> Heard {
    let mut heard = Heard::default();
    let word = |b: &[u8], at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    while b.len() >= 16 {
        let mask = word(b, 4);
        let len = word(b, 12) as usize;
        let Some(name) = b.get(16..16 + len) else {
            heard.rescan = true;
            break;
        };
        if mask
            & (libc::IN_Q_OVERFLOW | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED)
            != 0
        {
            heard.rescan = true;
        }
        let name = name.split(|&c| c == 0).next().unwrap_or_default();
        if let Ok(name) = std::str::from_utf8(name)
            && !name.is_empty()
        {
            heard.names.insert(name.to_owned());
        }
        b = &b[16 + len..];
    }
    heard
}

/// The watcher's memory: the attachments of DRA claims by record file, and what it last
/// wrote (or found right) per claim.
pub struct Reporter {
    kube: Kube,
    driver: String,
    store: Store,
    state_dir: PathBuf,
    checkpoint: PathBuf,
    records: HashMap<String, DraAttachment>,
    written: HashMap<String, BTreeMap<DeviceKey, NetworkData>>,
    /// Claims to look at: changed records, failed writes, records naming unknown claims.
    dirty: BTreeSet<String>,
    /// Claim UIDs already logged as not this driver's (logged once each).
    unknown_logged: BTreeSet<String>,
    /// The API server dropped `status.devices` once: said once.
    dropped_logged: bool,
    /// Claims whose last write got no answer: their failure was logged, the next is not.
    failing: BTreeSet<String>,
}

/// What became of one claim's write.
enum Outcome {
    /// Written, or right already, or nothing more to do (gone, refused, dropped).
    Settled,
    /// No answer: try again later.
    Retry,
}

impl Reporter {
    pub fn new(kube: Kube, driver: &str, state_dir: &Path) -> Reporter {
        Reporter {
            kube,
            driver: driver.to_owned(),
            store: Store::new(state_dir),
            state_dir: state_dir.to_path_buf(),
            checkpoint: super::checkpoint::path(state_dir),
            records: HashMap::new(),
            written: HashMap::new(),
            dirty: BTreeSet::new(),
            unknown_logged: BTreeSet::new(),
            dropped_logged: false,
            failing: BTreeSet::new(),
        }
    }

    /// Watch and report until the process ends.
    pub async fn run(mut self) {
        loop {
            // The state directory may not be there yet (no ADD on this node so far).
            if let Err(e) = rdma_host_device_core::files::private_dir(&self.state_dir) {
                log::warn!(
                    "claim status: cannot create {}: {e}; trying again in {}s",
                    self.state_dir.display(),
                    RETRY.as_secs()
                );
                tokio::time::sleep(RETRY).await;
                continue;
            }
            let watch = match Inotify::watch(&self.state_dir) {
                Ok(w) => w,
                Err(e) => {
                    log::warn!(
                        "claim status: cannot watch {}: {e}; trying again in {}s",
                        self.state_dir.display(),
                        RETRY.as_secs()
                    );
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            self.rescan();
            self.reconcile().await;
            loop {
                let heard = if self.dirty.is_empty() {
                    watch.read().await
                } else {
                    match tokio::time::timeout(RETRY, watch.read()).await {
                        Ok(h) => h,
                        Err(_) => Ok(Heard::default()),
                    }
                };
                match heard {
                    Ok(h) if h.rescan => {
                        log::info!(
                            "claim status: events of {} were lost; reading it again",
                            self.state_dir.display()
                        );
                        break;
                    }
                    Ok(h) => {
                        for name in &h.names {
                            self.reread(name);
                        }
                    }
                    Err(e) => {
                        log::warn!("claim status: reading the watch: {e}; watching anew");
                        break;
                    }
                }
                self.reconcile().await;
            }
        }
    }

    /// Everything again: every record, every claim of the checkpoint looked at (at start,
    /// after lost events).
    fn rescan(&mut self) {
        self.records = match self.store.all_named() {
            Ok(all) => all
                .into_iter()
                .filter_map(|(name, r)| Some((name, r.dra?)))
                .collect(),
            Err(e) => {
                log::warn!("claim status: {e}");
                HashMap::new()
            }
        };
        self.written.clear();
        self.dirty
            .extend(self.records.values().map(|a| a.uid.clone()));
        match super::checkpoint::Checkpoint::read(&self.checkpoint) {
            Ok(cp) => self.dirty.extend(cp.claims.into_keys()),
            Err(e) => log::warn!("claim status: {e}"),
        }
    }

    /// File `name` changed: its record read again (one bounded read).
    fn reread(&mut self, name: &str) {
        if !Store::is_record_name(name) {
            return;
        }
        let now = self.store.load_file(name).and_then(|r| r.dra);
        let before = match &now {
            Some(a) => self.records.insert(name.to_owned(), a.clone()),
            None => self.records.remove(name),
        };
        if before != now {
            self.dirty.extend(before.map(|a| a.uid));
            self.dirty.extend(now.map(|a| a.uid));
        }
    }

    /// Each dirty claim brought to what its records say.
    async fn reconcile(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let cp = match super::checkpoint::Checkpoint::read(&self.checkpoint) {
            Ok(cp) => cp,
            Err(e) => {
                log::warn!("claim status: {e}; trying again in {}s", RETRY.as_secs());
                return;
            }
        };
        // What no longer needs remembering: claims unprepared, records gone.
        self.written.retain(|uid, _| cp.claims.contains_key(uid));
        self.failing.retain(|uid| cp.claims.contains_key(uid));
        let records = &self.records;
        self.unknown_logged
            .retain(|k| records.values().any(|a| k.starts_with(&a.uid)));
        let mut retry = BTreeSet::new();
        for uid in std::mem::take(&mut self.dirty) {
            let named: Vec<&DraAttachment> =
                self.records.values().filter(|a| a.uid == uid).collect();
            let Some(claim) = cp.claims.get(&uid) else {
                if !named.is_empty() && self.unknown_logged.insert(uid.clone()) {
                    log::warn!(
                        "claim status: state record(s) name claim {}/{} ({uid}), which this driver did not prepare (not in {}): ignored",
                        named[0].namespace,
                        named[0].name,
                        self.checkpoint.display()
                    );
                }
                self.written.remove(&uid);
                continue;
            };
            let owned: BTreeSet<DeviceKey> = claim
                .devices
                .iter()
                .map(|d| (d.pool.clone(), d.device.clone()))
                .collect();
            let mut attached = BTreeMap::new();
            for a in named {
                let k = (a.pool.clone(), a.device.clone());
                let Some(net) = &a.network else { continue };
                if a.driver != self.driver || !owned.contains(&k) {
                    if self.unknown_logged.insert(format!("{uid}/{}/{}", k.0, k.1)) {
                        log::warn!(
                            "claim status: a state record names device {}/{}/{} of claim {}/{}, which this driver did not prepare for it: ignored",
                            a.driver,
                            k.0,
                            k.1,
                            claim.namespace,
                            claim.name
                        );
                    }
                    continue;
                }
                attached.insert(k, net.clone());
            }
            if self.written.get(&uid) == Some(&attached) {
                continue;
            }
            match self
                .write(&claim.namespace, &claim.name, &uid, &owned, &attached)
                .await
            {
                Outcome::Settled => {
                    self.failing.remove(&uid);
                    self.written.insert(uid, attached);
                }
                Outcome::Retry => {
                    self.failing.insert(uid.clone());
                    retry.insert(uid);
                }
            }
        }
        self.dirty = retry;
    }

    /// A write of claim `uid` got no answer (or a 403: RBAC may be fixed meanwhile): said the
    /// first time, retried quietly until it settles.
    fn retry_log(&self, uid: &str, e: &crate::kube::ApiError) {
        if !self.failing.contains(uid) {
            log::warn!(
                "claim status: {e}; trying again every {}s (said once)",
                RETRY.as_secs()
            );
        }
    }

    /// One claim's entries written (read, merged, written back; again on a conflict).
    async fn write(
        &mut self,
        namespace: &str,
        name: &str,
        uid: &str,
        owned: &BTreeSet<DeviceKey>,
        attached: &BTreeMap<DeviceKey, NetworkData>,
    ) -> Outcome {
        for _ in 0..CONFLICT_TRIES {
            let mut claim = match self.kube.get_claim_json(namespace, name).await {
                Ok(c) => c,
                Err(e) if e.is_not_found() => return Outcome::Settled,
                Err(e) => {
                    self.retry_log(uid, &e);
                    return Outcome::Retry;
                }
            };
            if claim["metadata"]["uid"].as_str() != Some(uid) {
                // Deleted and made anew under the same name: another claim, not ours.
                return Outcome::Settled;
            }
            let current = claim["status"]["devices"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let allocated = allocated_of(&claim, &self.driver);
            let Some(devices) = merge(&current, &self.driver, &allocated, owned, attached) else {
                return Outcome::Settled;
            };
            if devices.is_empty() {
                if let Some(s) = claim["status"].as_object_mut() {
                    s.remove("devices");
                }
            } else {
                claim["status"]["devices"] = Value::Array(devices);
            }
            match self.kube.replace_claim_status_json(&claim).await {
                Ok(stored) => {
                    let want: BTreeMap<DeviceKey, NetworkData> = attached
                        .iter()
                        .filter(|(k, _)| allocated.contains(*k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    if !has_entries(&stored, &self.driver, &want) {
                        if !self.dropped_logged {
                            self.dropped_logged = true;
                            log::warn!(
                                "claim status: the API server dropped status.devices of claim {namespace}/{name}: its DRAResourceClaimDeviceStatus feature gate is off (on by default from Kubernetes 1.33); the network data is not reported, and not asked again"
                            );
                        }
                    } else {
                        log::info!(
                            "claim status: {namespace}/{name}: {} device(s) of ours with network data",
                            want.len()
                        );
                    }
                    return Outcome::Settled;
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) if e.code == Some(422) || e.code == Some(404) => {
                    log::error!("claim status: {e}; not retried");
                    return Outcome::Settled;
                }
                Err(e) => {
                    self.retry_log(uid, &e);
                    return Outcome::Retry;
                }
            }
        }
        log::warn!(
            "claim status: claim {namespace}/{name} kept changing under {CONFLICT_TRIES} writes; trying again in {}s",
            RETRY.as_secs()
        );
        Outcome::Retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "rdma-host-device.io";

    fn key(d: &str) -> DeviceKey {
        ("node-a".into(), d.into())
    }

    fn set(ds: &[&str]) -> BTreeSet<DeviceKey> {
        ds.iter().map(|d| key(d)).collect()
    }

    fn net(ifname: &str, ip: &str) -> NetworkData {
        NetworkData {
            interface_name: ifname.into(),
            ips: vec![ip.into()],
            hardware_address: "02:00:00:00:00:01".into(),
        }
    }

    fn gpu() -> Value {
        json!({"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Up",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "message": ""}]})
    }

    #[test]
    fn an_attached_device_gets_an_entry_beside_other_drivers_and_loses_it_when_detached() {
        let attached: BTreeMap<_, _> = [(key("net-a"), net("net1", "10.0.0.5/24"))].into();
        let owned = set(&["net-a"]);
        let allocated = set(&["net-a"]);
        let added = merge(&[gpu()], D, &allocated, &owned, &attached).unwrap();
        assert_eq!(
            added,
            [
                gpu(),
                json!({"driver": D, "pool": "node-a", "device": "net-a", "networkData": {
                    "interfaceName": "net1", "ips": ["10.0.0.5/24"],
                    "hardwareAddress": "02:00:00:00:00:01"}})
            ]
        );
        // Again: nothing to write (idempotent).
        assert_eq!(merge(&added, D, &allocated, &owned, &attached), None);
        // Detached: ours goes, the GPU's stays.
        assert_eq!(
            merge(&added, D, &allocated, &owned, &BTreeMap::new()),
            Some(vec![gpu()])
        );
        assert_eq!(
            merge(&[gpu()], D, &allocated, &owned, &BTreeMap::new()),
            None
        );
    }

    #[test]
    fn only_devices_this_driver_prepared_and_the_claim_allocated_are_touched() {
        // An entry of ours for a device not in the checkpoint's claim: not ours to remove.
        let stranger = json!({"driver": D, "pool": "node-b", "device": "net-z",
            "networkData": {"interfaceName": "x"}});
        let owned = set(&["net-a"]);
        assert_eq!(
            merge(&[stranger], D, &set(&["net-a"]), &owned, &BTreeMap::new()),
            None
        );
        // Attached but not allocated (a stale record): no entry, which the server would refuse.
        let attached: BTreeMap<_, _> = [(key("net-a"), net("net1", "10.0.0.5/24"))].into();
        assert_eq!(merge(&[], D, &BTreeSet::new(), &owned, &attached), None);
        // Attached but not owned: nothing either.
        assert_eq!(
            merge(&[], D, &set(&["net-a"]), &BTreeSet::new(), &attached),
            None
        );
    }

    #[test]
    fn an_existing_entry_keeps_its_other_fields_and_gets_the_new_network_data() {
        let ours = json!({"driver": D, "pool": "node-a", "device": "net-a",
            "data": {"k": 1}, "networkData": {"interfaceName": "old"}});
        let dup = ours.clone();
        let attached: BTreeMap<_, _> = [(key("net-a"), net("net1", "fd00::5/64"))].into();
        let out = merge(
            &[ours, dup],
            D,
            &set(&["net-a"]),
            &set(&["net-a"]),
            &attached,
        )
        .unwrap();
        assert_eq!(out.len(), 1, "a duplicate entry is dropped: {out:?}");
        assert_eq!(out[0]["data"], json!({"k": 1}));
        assert_eq!(out[0]["networkData"]["interfaceName"], "net1");
        assert_eq!(out[0]["networkData"]["ips"], json!(["fd00::5/64"]));
    }

    #[test]
    fn empty_network_fields_are_left_out() {
        let n = NetworkData {
            interface_name: "net1".into(),
            ..Default::default()
        };
        assert_eq!(network_json(&n), json!({"interfaceName": "net1"}));
    }

    #[test]
    fn inotify_records_are_parsed_and_an_overflow_asks_for_a_rescan() {
        let ev = |mask: u32, name: &[u8]| {
            let mut b = Vec::new();
            b.extend_from_slice(&1i32.to_ne_bytes());
            b.extend_from_slice(&mask.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            let padded = name.len().div_ceil(16) * 16;
            b.extend_from_slice(&(padded as u32).to_ne_bytes());
            b.extend_from_slice(name);
            b.resize(16 + padded, 0);
            b
        };
        let mut b = ev(libc::IN_MOVED_TO, b"c1:net1.json");
        b.extend(ev(libc::IN_DELETE, b"c2:net1.json"));
        let h = parse_events(&b);
        assert!(!h.rescan);
        assert_eq!(
            h.names.iter().map(String::as_str).collect::<Vec<_>>(),
            ["c1:net1.json", "c2:net1.json"]
        );
        let h = parse_events(&ev(libc::IN_Q_OVERFLOW, b""));
        assert!(h.rescan && h.names.is_empty());
        // A record cut short: read everything again rather than guess.
        assert!(parse_events(&b[..20]).rescan);
    }

    #[test]
    fn the_allocation_and_the_stored_entries_are_read_for_our_driver_only() {
        let claim = json!({"status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"},
                {"request": "nic", "driver": D, "pool": "node-a", "device": "net-a"}]}},
            "devices": [gpu(), {"driver": D, "pool": "node-a", "device": "net-a",
                "networkData": {"interfaceName": "net1"}}]}});
        assert_eq!(allocated_of(&claim, D), set(&["net-a"]));
        let want: BTreeMap<_, _> = [(key("net-a"), net("net1", "10.0.0.5/24"))].into();
        assert!(has_entries(&claim, D, &want));
        assert!(!has_entries(&json!({"status": {}}), D, &want));
        assert!(has_entries(&json!({"status": {}}), D, &BTreeMap::new()));
    }
}
