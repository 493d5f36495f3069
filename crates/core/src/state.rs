//! What ADD remembers so DEL can undo it, even if the plugin dies between any two steps:
//!
//! - a state file per attachment, `STATE_DIR/<containerID>:<ifname>.json` (a container ID too
//!   long for a file name is cut and hashed, see `stem`), written (atomically)
//!   before the first change to the host and removed after the last undo;
//! - a tag in the NIC's alias (IFLA_IFALIAS), set by the same request that moves the NIC, so
//!   the link itself says who holds it and what it was called. It travels with the NIC: into
//!   the pod, and back to the host when the pod's netns dies without a DEL.

use crate::error::{Result, io_error};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const TAG_PREFIX: &str = "rdma-host-device:v1:";

/// The alias tag: original name, MTU and admin state, and which attachment holds the NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub host_name: String,
    pub host_mtu: u32,
    pub host_up: bool,
    pub owner: String,
}

impl Tag {
    pub fn encode(&self) -> String {
        format!(
            "{TAG_PREFIX}{}:{}:{}:{}",
            self.host_name, self.host_mtu, self.host_up as u8, self.owner
        )
    }

    /// `None` for any alias that is not ours (operators use aliases too).
    pub fn decode(alias: &str) -> Option<Tag> {
        let rest = alias.strip_prefix(TAG_PREFIX)?;
        let mut it = rest.split(':');
        let host_name = it.next()?.to_string();
        let host_mtu = it.next()?.parse().ok()?;
        let host_up = match it.next()? {
            "1" => true,
            "0" => false,
            _ => return None,
        };
        let owner = it.next()?.to_string();
        if it.next().is_some() || crate::names::validate_ifname(&host_name).is_err() {
            return None;
        }
        Some(Tag {
            host_name,
            host_mtu,
            host_up,
            owner,
        })
    }
}

/// What the name of a NIC that came home while its own name was taken on the host ends with,
/// before the number the kernel gives it: `ens1f0np0~0`.
pub const DISPLACED_MARK: char = '~';
/// The alias such a NIC comes home with (when the node gave it none), its own name after it.
const DISPLACED_PREFIX: &str = "rdma-host-device:displaced:";
/// How much of its own name such a NIC keeps: with the mark and the kernel's number (up to
/// five digits) within IFNAMSIZ's 15 characters.
const DISPLACED_STEM: usize = 9;

/// The name pattern (the kernel's `%d`: the first number free) a NIC called `name` comes home
/// under when `name` is taken on the host.
pub fn displaced_pattern(name: &str) -> String {
    let mut cut = DISPLACED_STEM.min(name.len());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{DISPLACED_MARK}%d", &name[..cut])
}

/// The alias note of a NIC called `name` that came home under another name.
pub fn displaced_note(name: &str) -> String {
    format!("{DISPLACED_PREFIX}{name}")
}

/// The name a displaced NIC's alias note says is its own, if the alias is such a note.
pub fn displaced_from(alias: &str) -> Option<&str> {
    alias
        .strip_prefix(DISPLACED_PREFIX)
        .filter(|n| crate::names::validate_ifname(n).is_ok())
}

/// A short, stable name for one attachment (container + interface), fit for the alias.
pub fn owner_key(container_id: &str, ifname: &str) -> String {
    // FNV-1a, 64 bit: stable across releases, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in container_id
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(ifname.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The state record format this binary writes, and the newest it acts on.
///
/// The rule that keeps upgrades and rollbacks of the DaemonSet safe while pods hold NICs: a
/// field is added with a serde default (an older binary ignores what it does not know, a newer
/// one reads old records), and the format stays. It goes up only when a binary that ignored a
/// new field would undo an attachment wrongly; a binary then refuses a record of a newer format
/// with TryAgain (11), touching nothing, until a version that reads it runs. Records written
/// before the format was noted (the releases up to 7362751) are format 1.
pub(crate) const FORMAT: u32 = 1;

fn first_format() -> u32 {
    1
}

/// The state file's content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The record's format ([`FORMAT`] when this binary writes it).
    #[serde(default = "first_format")]
    pub format: u32,
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    pub netns: String,
    /// The namespace ADD found at `netns` (nsfs device, inode): DEL and CHECK act only on that
    /// namespace, whatever the path names by then (a symlink or mount retargeted to another
    /// pod's). `None` in records of versions before this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_id: Option<(u64, u64)>,
    pub host_name: String,
    pub host_mtu: u32,
    pub host_up: bool,
    #[serde(default)]
    pub host_alias: Option<String>,
    pub mac: String,
    /// The permanent MAC (IFLA_PERM_ADDRESS) of a real NIC: what a pod cannot change. Empty
    /// for virtual links.
    #[serde(default)]
    pub perm_mac: String,
    /// The device behind the NIC, `bus/device` (`pci/0000:3b:00.1`): what identifies a
    /// hardware NIC wherever it is. `None` for virtual links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The link kind of a virtual NIC (`veth`); `None` for hardware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The NIC's alternative names: a selector may name it by any of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub altnames: Vec<String>,
    /// The NIC's interface flags that a pod can flip ([`crate::link::POD_FLAGS`]: promisc,
    /// allmulticast, NOARP, multicast, ...), its device group and transmit queue length, as
    /// the node had them: DEL puts them back. `None` in records of versions before this rule
    /// (DEL then leaves them as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_flags: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_txqlen: Option<u32>,
    /// The NIC's ifindex on the host when ADD found it.
    #[serde(default)]
    pub host_index: u32,
    /// Its ifindex inside the pod, once ADD saw it arrive: a pod cannot change an ifindex.
    #[serde(default)]
    pub pod_index: Option<u32>,
    /// The NIC's PCI address, when it has one.
    #[serde(default)]
    pub pci: Option<String>,
    /// RDMA device paired with the NIC, if any.
    #[serde(default)]
    pub rdma_device: Option<String>,
    /// The RDMA device was moved into the pod (exclusive mode).
    #[serde(default)]
    pub rdma_moved: bool,
    /// The `ipam` object ADD allocated with: DEL releases with it, whatever the config says by
    /// then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<serde_json::Value>,
    /// A software RDMA device we created in the pod (deleted on DEL).
    #[serde(default)]
    pub soft_device: Option<String>,
    /// The Kubernetes pod (from CNI_ARGS at ADD), for the metrics exporter's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<crate::names::PodRef>,
    /// The device-info file ADD writes (the `CNIDeviceInfoFile` capability); DEL removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_info: Option<std::path::PathBuf>,
    /// A NIC taken through `draRequest`: the claim and allocation result it came from, and
    /// (once ADD succeeded) what ADD applied. The DRA driver reports it in the claim's
    /// `status.devices[]` (`dra::status`); DEL needs none of it, so an older binary that
    /// ignores it still undoes the attachment right (no new format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dra: Option<DraAttachment>,
    /// A moment before the NIC left the host (ADD's plan): DEL and CHECK ask the uppers
    /// guard whether it has watched the NIC in the pod, without a break, since then; if it
    /// has, they need not search every namespace for riders themselves. `None` in records of
    /// versions before this rule (they search).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_after: Option<Since>,
}

/// A moment on this machine's clock that counts through suspend (CLOCK_BOOTTIME), with the
/// boot it belongs to: comparable only within that boot, and never across a reboot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Since {
    /// /proc/sys/kernel/random/boot_id.
    pub boot: String,
    /// Nanoseconds since that boot.
    pub ns: u64,
}

impl Since {
    /// Now; `None` when the clock or the boot id cannot be read (the caller then never
    /// relies on a comparison).
    pub fn now() -> Option<Since> {
        Some(Since {
            boot: boot_id()?,
            ns: boottime_ns()?,
        })
    }

    /// Whether this moment belongs to the running boot.
    pub fn this_boot(&self) -> bool {
        boot_id().is_some_and(|b| b == self.boot)
    }
}

/// The running boot's id (/proc/sys/kernel/random/boot_id).
fn boot_id() -> Option<String> {
    let b = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(b.trim().to_owned())
}

/// CLOCK_BOOTTIME in nanoseconds.
pub fn boottime_ns() -> Option<u64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec that outlives the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut t) } != 0 {
        return None;
    }
    let s = u64::try_from(t.tv_sec).ok()?;
    let n = u64::try_from(t.tv_nsec).ok()?;
    s.checked_mul(1_000_000_000)?.checked_add(n)
}

/// Which DRA claim's device an attachment is, and the network data ADD gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DraAttachment {
    /// The claim, as the driver's checkpoint names it (its UID is the key there).
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The claim's request (or `request/subrequest`) the NIC was allocated for.
    pub request: String,
    /// The allocation result: driver, pool and device (in the driver's ResourceSlice).
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// What ADD applied, recorded as its last step; `None` while ADD is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkData>,
    /// The driver wrote the claim's KEP-5304 device metadata (the checkpoint says so): ADD
    /// completed this device's entry, DEL takes ADD's part out again (`dra::metadata`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub metadata: bool,
}

/// KEP-4817's `networkData` (the API's `NetworkDeviceData`), one type wherever it goes: as ADD
/// applied it, in the record, in a claim's device metadata and in its `status.devices[]`. The
/// interface name in the pod (CNI_IFNAME), the addresses in CIDR form (address/prefix, as IPAM
/// gave them), the MAC the NIC had when it arrived. What the pod may change afterwards is not
/// looked at again. Empty fields are left out, as the API's optional ones are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkData {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hardware_address: String,
}

/// `bus/device`, how a record keeps a link's parent device (`IFLA_PARENT_DEV_*`).
pub fn parent_key((dev, bus): &(String, String)) -> String {
    format!("{bus}/{dev}")
}

/// The record a lost NIC `l` (back on the host, bearing `tag`) belongs to: its tag owner's if
/// that record can be this NIC (its device, or a virtual NIC, which has none to tell by), else,
/// since a pod can rewrite its NIC's alias (with another live attachment's owner too), the
/// record whose NIC `l` is by its device (a parent device no pod can create, and the permanent
/// MAC where there is one).
pub fn record_of_lost<'a>(
    l: &crate::link::LinkInfo,
    tag: &Tag,
    records: &'a [Record],
) -> Option<&'a Record> {
    records
        .iter()
        .find(|r| r.owner() == tag.owner && (r.parent.is_none() || r.is_its_device(l)))
        .or_else(|| records.iter().find(|r| r.is_its_device(l)))
}

impl Record {
    /// Whether link `l` is this record's hardware NIC: the same parent device (and permanent
    /// MAC, where the record has one). Never true for a virtual NIC, which has no device.
    pub fn is_its_device(&self, l: &crate::link::LinkInfo) -> bool {
        self.parent.is_some()
            && l.parent.as_ref().map(parent_key) == self.parent
            && (self.perm_mac.is_empty() || l.perm_mac == self.perm_mac)
    }

    /// What a record says about NIC `home` as the host has it: its name, MTU, admin state,
    /// alias, MACs, altnames, the flags a pod can flip, group, queue length, parent device,
    /// kind and index. The attachment's own fields are the caller's.
    pub fn of_home(home: &crate::link::LinkInfo) -> Record {
        Record {
            host_name: home.name.clone(),
            host_mtu: home.mtu,
            host_up: home.up,
            host_alias: home.alias.clone().filter(|a| !a.is_empty()),
            mac: home.mac.clone(),
            perm_mac: home.perm_mac.clone(),
            altnames: home.altnames.clone(),
            host_flags: Some(home.flags & crate::link::POD_FLAGS),
            host_group: Some(home.group),
            host_txqlen: Some(home.txqlen),
            parent: home.parent.as_ref().map(parent_key),
            kind: home.kind.clone(),
            host_index: home.index,
            ..Record::default()
        }
    }

    pub fn owner(&self) -> String {
        owner_key(&self.container_id, &self.ifname)
    }

    /// What DEL restores beyond name, MTU, MAC and alias: flags, group, queue length and
    /// altnames as the node had them. Records from before ADD noted the NIC's identity
    /// (`host_index` 0) did not note its altnames either: those are left as they are.
    pub fn settings(&self) -> crate::link::Settings {
        crate::link::Settings {
            flags: self.host_flags.map(|f| f & crate::link::POD_FLAGS),
            group: self.host_group,
            txqlen: self.host_txqlen,
            altnames: (self.host_index != 0).then(|| self.altnames.clone()),
        }
    }

    pub fn tag(&self) -> Tag {
        Tag {
            host_name: self.host_name.clone(),
            host_mtu: self.host_mtu,
            host_up: self.host_up,
            owner: self.owner(),
        }
    }
}

const TEMP_SUFFIX: &str = ".json.tmp";

/// The most of a state record read. A record is written pretty when that fits, else compact
/// (its `ipam` comes from a config of at most 1 MiB), so every record written is read back.
const MAX_RECORD: u64 = 4 << 20;

/// NAME_MAX: the longest file name Linux filesystems take.
const NAME_MAX: usize = 255;

/// How much of a long container ID a hashed state file name keeps, for people reading the
/// directory.
const LONG_ID_KEPT: usize = 64;

/// An attachment's state file name without its suffix: `<containerID>:<ifname>`, or, when a
/// file of that name (with the longer, temp suffix) would not fit NAME_MAX (a container ID of
/// 230 bytes or more: the spec sets no limit), `<the ID's first 64 bytes>~<owner key>:<ifname>`.
/// `~` is no character of a container ID, so a hashed name never equals a plain one; the owner
/// key is the attachment lock's.
fn stem(container_id: &str, ifname: &str) -> String {
    let plain = format!("{container_id}:{ifname}");
    if plain.len() + TEMP_SUFFIX.len() <= NAME_MAX {
        return plain;
    }
    let mut cut = LONG_ID_KEPT.min(container_id.len());
    while !container_id.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}~{}:{ifname}",
        &container_id[..cut],
        owner_key(container_id, ifname)
    )
}

/// A temp file a killed write left: whose (the attachment's lock key, and a label for
/// messages) and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Temp {
    /// The attachment's [`owner_key`]: what its lock is named by.
    pub owner: String,
    /// `<containerID>/<ifname>`, the ID cut short in a hashed name.
    pub label: String,
    path: PathBuf,
}

fn remove_if_present(p: &Path, what: &str) -> Result<()> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(format!("removing {what} {}", p.display()), e)),
    }
}

/// When a record written reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// Before it is renamed into place, and its directory entry before the write returns.
    Now,
    /// After it is in place, in a thread of its own ([`Store::begin_save`]).
    Background,
    /// Whenever the kernel writes it back ([`Store::update`]).
    Never,
}

type SyncThread = std::thread::JoinHandle<std::io::Result<()>>;

/// A record in place whose way to the disk may still be under way ([`Store::begin_save`]).
#[must_use = "the record is durable only once `durable` has returned"]
pub struct Saving(Option<SyncThread>, PathBuf);

impl Saving {
    /// Wait until the record and its directory entry are on the disk.
    pub fn durable(self) -> Result<()> {
        let Some(t) = self.0 else { return Ok(()) };
        let what = || format!("writing state file {} to the disk", self.1.display());
        match t.join() {
            Ok(r) => r.map_err(|e| io_error(what(), e)),
            Err(_) => Err(io_error(
                what(),
                std::io::Error::other("the thread syncing it panicked"),
            )),
        }
    }
}

/// The directory of state files.
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(dir: &Path) -> Self {
        Store {
            dir: dir.to_path_buf(),
        }
    }

    /// IDs and names were validated (no '/', no ':' in interface names), so the name is safe;
    /// a long ID is hashed (see [`stem`]).
    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir
            .join(format!("{}.json", stem(container_id, ifname)))
    }

    pub fn load(&self, container_id: &str, ifname: &str) -> Result<Option<Record>> {
        let p = self.path(container_id, ifname);
        // A regular file within the bound, read without blocking (`files::read_regular`).
        match crate::files::read_regular_nofollow(&p, MAX_RECORD) {
            // Empty or zero-filled: a write renamed into place before its data reached the
            // disk (`begin_save`, `update`), cut short by a node crash. Writes are whole for
            // every process, so nothing else makes one. For ADD's first write nothing of ADD's
            // outlived the crash; for its second, DEL releases with the network's IPAM.
            Ok(b) if b.iter().all(|&c| c == 0) => {
                log::warn!(
                    "state file {} is {}: a node crash cut its write short; taken as no record",
                    p.display(),
                    if b.is_empty() { "empty" } else { "zero-filled" }
                );
                Ok(None)
            }
            // Writes are atomic, so any other unreadable file is foreign or damaged: say so
            // rather than guess (without the record DEL could not tell whether the NIC is
            // still held).
            Ok(b) => {
                let r: Record = serde_json::from_slice(&b).map_err(|e| {
                    crate::error::Error::new(
                        crate::error::Code::Io,
                        format!(
                            "state file {} is unreadable ({e}); check where its NIC is (`rdma-host-device-agent inspect`), then remove the file",
                            p.display()
                        ),
                    )
                })?;
                if r.format > FORMAT {
                    return Err(crate::error::Error::new(
                        crate::error::Code::TryAgain,
                        format!(
                            "state file {} was written by a newer rdma-host-device (record format {}; this {} reads up to {FORMAT}): nothing was touched; run the newer version (roll the DaemonSet forward) to act on this attachment",
                            p.display(),
                            r.format,
                            env!("CARGO_PKG_VERSION")
                        ),
                    ));
                }
                Ok(Some(r))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(format!("reading state file {}", p.display()), e)),
        }
    }

    /// Where [`save`](Self::save) writes before renaming. A writer killed in between leaves it
    /// behind; only ever useless (the state file is the old one or none), so it is removed
    /// under the attachment's lock by the next ADD, DEL or GC.
    fn temp_path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir
            .join(format!("{}{TEMP_SUFFIX}", stem(container_id, ifname)))
    }

    /// Write atomically: a crash leaves the old file or the new one, never half of one. The
    /// caller holds the attachment's lock, which is what keeps GC off the temp file.
    ///
    /// Only root reads records (they hold the NAD's `ipam`, which some IPAM plugins fill with
    /// credentials): the file is 0600 and the state directory 0700, tightened here if an older
    /// version made it 0755 (its 0644 records are then out of other users' reach too).
    pub fn save(&self, r: &Record) -> Result<()> {
        self.write(r, Sync::Now).map(drop)
    }

    /// ADD's first record: written and renamed into place at once (a plugin killed from here on
    /// leaves it for DEL), on the disk in the background while ADD goes on to move the NIC (the
    /// kernel's move waits ~20 ms for RCU grace periods; the two fsyncs, ~1 ms on a node's
    /// ext4, need not wait before it). [`Saving::durable`] must come before the first change
    /// that outlives a node crash (the IPAM allocation) and before ADD answers. A crash before
    /// then may leave the file empty or zero-filled (renamed before its data reached the
    /// disk), which [`load`](Self::load) reads as no record: by then nothing of ADD's outlives
    /// the crash (the NIC is home after a reboot, and no address was allocated yet).
    pub fn begin_save(&self, r: &Record) -> Result<Saving> {
        self.write(r, Sync::Background)
            .map(|t| Saving(t, self.path(&r.container_id, &r.ifname)))
    }

    /// [`save`](Self::save) without waiting for the disk: for a record saved before whose
    /// change matters only while the pod's netns lives (ADD's second write, the NIC's index in
    /// the pod). The write is as atomic for every process (rename); only a crash of the whole
    /// node can lose it, and that takes every pod's netns with it, so the durable first record
    /// (which holds what DEL and GC need after a reboot: the IPAM to release) is what stays,
    /// on a file system that writes a file renamed over another first (ext4); elsewhere the
    /// crash may leave it zero-filled, read as no record (DEL then releases with the network's
    /// current IPAM).
    pub fn update(&self, r: &Record) -> Result<()> {
        self.write(r, Sync::Never).map(drop)
    }

    /// Write `r` atomically; `sync` says when it reaches the disk (with [`Sync::Background`],
    /// the thread doing it).
    fn write(&self, r: &Record, sync: Sync) -> Result<Option<SyncThread>> {
        crate::files::private_dir(&self.dir)
            .map_err(|e| io_error(format!("creating state dir {}", self.dir.display()), e))?;
        let p = self.path(&r.container_id, &r.ifname);
        let tmp = self.temp_path(&r.container_id, &r.ifname);
        let r = &Record {
            format: FORMAT,
            ..r.clone()
        };
        let mut body = serde_json::to_vec_pretty(r).unwrap_or_default();
        if body.len() as u64 > MAX_RECORD {
            body = serde_json::to_vec(r).unwrap_or_default();
        }
        let write = || -> std::io::Result<Option<SyncThread>> {
            let _ = fs::remove_file(&tmp);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            crate::files::set_mode(&f, 0o600)?;
            f.write_all(&body)?;
            if sync == Sync::Now {
                f.sync_all()?;
            }
            crate::fault::hit("state:before-rename")
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            fs::rename(&tmp, &p)?;
            match sync {
                Sync::Now => fs::File::open(&self.dir)?.sync_all().map(|()| None),
                Sync::Never => Ok(None),
                Sync::Background => {
                    let dir = fs::File::open(&self.dir)?;
                    Ok(Some(std::thread::spawn(move || {
                        f.sync_all()?;
                        dir.sync_all()
                    })))
                }
            }
        };
        write().map_err(|e| io_error(format!("writing state file {}", p.display()), e))
    }

    /// Forget the attachment: its state file and any temp file a killed write left.
    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<()> {
        self.remove_temp(container_id, ifname)?;
        remove_if_present(&self.path(container_id, ifname), "state file")
    }

    /// Remove the temp file a write killed before its rename left behind, if any. Only under
    /// the attachment's lock: without it, the file may be a live call's write in progress.
    pub fn remove_temp(&self, container_id: &str, ifname: &str) -> Result<()> {
        self.remove_temp_at(&self.temp_path(container_id, ifname))
    }

    /// Remove temp file `t` (from [`temps`](Self::temps)); the same rule as
    /// [`remove_temp`](Self::remove_temp): only under its attachment's lock.
    pub fn remove_temp_file(&self, t: &Temp) -> Result<()> {
        self.remove_temp_at(&t.path)
    }

    fn remove_temp_at(&self, p: &Path) -> Result<()> {
        if p.exists() {
            log::info!(
                "removing {}, left by a plugin killed while writing it",
                p.display()
            );
        }
        remove_if_present(p, "stale temp state file")
    }

    /// The files in the store's directory; none when it does not exist yet.
    fn entries(&self) -> Result<Vec<fs::DirEntry>> {
        match fs::read_dir(&self.dir) {
            Ok(rd) => Ok(rd.filter_map(|e| e.ok()).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_error(
                format!("listing state dir {}", self.dir.display()),
                e,
            )),
        }
    }

    /// The temp files in the store: writes in progress, or left by a killed writer. Foreign
    /// files are skipped.
    pub fn temps(&self) -> Result<Vec<Temp>> {
        Ok(self
            .entries()?
            .into_iter()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (head, ifname) = name.strip_suffix(TEMP_SUFFIX)?.rsplit_once(':')?;
                crate::names::validate_ifname(ifname).ok()?;
                let (owner, label) = match head.rsplit_once('~') {
                    // A long container ID's hashed name: its first bytes and the owner key.
                    Some((kept, key))
                        if key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()) =>
                    {
                        crate::names::validate_container_id(kept).ok()?;
                        (key.to_string(), format!("{kept}.../{ifname}"))
                    }
                    Some(_) => return None,
                    None => {
                        crate::names::validate_container_id(head).ok()?;
                        (owner_key(head, ifname), format!("{head}/{ifname}"))
                    }
                };
                Some(Temp {
                    owner,
                    label,
                    path: e.path(),
                })
            })
            .collect())
    }

    /// Every record in the store (for GC, STATUS and busy checks). Unreadable files, and
    /// records of a newer format than this binary's (a rollback's: a newer version undoes
    /// them), are skipped: nothing acts on what it cannot read.
    pub fn all(&self) -> Result<Vec<Record>> {
        Ok(self.all_named()?.into_iter().map(|(_, r)| r).collect())
    }

    /// [`all`](Self::all), each record with its file name (for a watcher of the directory,
    /// which hears of files by name).
    pub fn all_named(&self) -> Result<Vec<(String, Record)>> {
        Ok(self
            .entries()?
            .into_iter()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                Some((name.clone(), self.load_file(&name)?))
            })
            .collect())
    }

    /// The record in file `name` of the directory (a record's file name, as a watcher of the
    /// directory hears it), read as [`all`](Self::all) reads: within the bound, no symlink,
    /// nothing unreadable or of a newer format. `None` for anything else, or no such file.
    pub fn load_file(&self, name: &str) -> Option<Record> {
        if !Self::is_record_name(name) {
            return None;
        }
        let b = crate::files::read_regular_nofollow(&self.dir.join(name), MAX_RECORD).ok()?;
        serde_json::from_slice::<Record>(&b)
            .ok()
            .filter(|r| r.format <= FORMAT)
    }

    /// Whether `name` is a record's file name (not a temp file, nothing with a '/').
    pub fn is_record_name(name: &str) -> bool {
        name.ends_with(".json") && !name.contains('/') && !name.starts_with('.')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_displaced_nics_name_keeps_its_own_and_fits_ifnamsiz_with_any_number() {
        assert_eq!(displaced_pattern("eth1"), "eth1~%d");
        assert_eq!(displaced_pattern("ens1f0np0"), "ens1f0np0~%d");
        let p = displaced_pattern("enp175s0f1np1v1");
        assert_eq!(p, "enp175s0f~%d");
        // The kernel's largest number (32767) still fits 15 characters.
        assert!(p.replace("%d", "32767").len() <= 15);
        assert_eq!(
            displaced_from(&displaced_note("ens1f0")),
            Some("ens1f0"),
            "the note names the NIC's own name"
        );
        assert_eq!(displaced_from("rdma-host-device:displaced:a/b"), None);
        assert_eq!(displaced_from("an operator's alias"), None);
        assert!(
            Tag::decode(&displaced_note("ens1f0")).is_none(),
            "never our tag"
        );
    }

    #[test]
    fn tag_round_trip() {
        let t = Tag {
            host_name: "ens1f0".into(),
            host_mtu: 9000,
            host_up: true,
            owner: owner_key("abc", "net1"),
        };
        assert_eq!(Tag::decode(&t.encode()), Some(t.clone()));
        assert!(t.encode().len() < 128, "alias must stay short");
    }

    #[test]
    fn foreign_or_torn_aliases_are_not_ours() {
        for a in [
            "uplink to switch 3",
            "rdma-host-device:v1:eth0",
            "rdma-host-device:v1:eth0:x:1:ab",
            "rdma-host-device:v1:a/b:1500:1:ab",
            "rdma-host-device:v1:eth0:1500:2:ab",
            "rdma-host-device:v1:eth0:1500:1:ab:extra",
        ] {
            assert_eq!(Tag::decode(a), None, "{a}");
        }
    }

    #[test]
    fn owner_key_is_stable_and_distinct() {
        assert_eq!(owner_key("a", "b"), owner_key("a", "b"));
        assert_ne!(owner_key("a", "bc"), owner_key("ab", "c"));
        assert_eq!(owner_key("a", "b").len(), 16);
    }

    #[test]
    fn store_round_trip() {
        let dir = std::env::temp_dir().join(format!("rhd-state-test-{}", std::process::id()));
        let s = Store::new(&dir);
        let r = Record {
            format: FORMAT,
            container_id: "c1".into(),
            ifname: "net1".into(),
            network: "n".into(),
            netns: "/var/run/netns/p".into(),
            host_name: "eth1".into(),
            host_mtu: 1500,
            host_up: false,
            host_alias: None,
            mac: "aa:bb:cc:dd:ee:ff".into(),
            perm_mac: String::new(),
            altnames: Vec::new(),
            host_flags: Some(0x1002),
            host_group: Some(0),
            host_txqlen: Some(1000),
            parent: None,
            kind: Some("veth".into()),
            host_index: 7,
            pod_index: Some(7),
            netns_id: None,
            pci: None,
            rdma_device: None,
            rdma_moved: false,
            ipam: None,
            soft_device: None,
            pod: None,
            device_info: None,
            dra: None,
            moved_after: Since::now(),
        };
        assert!(r.moved_after.as_ref().is_some_and(Since::this_boot));
        // A state dir an older version made 0755: tightened by the next save.
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), None);
        s.save(&r).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), Some(r.clone()));
        assert_eq!(s.all().unwrap(), vec![r.clone()]);
        // Records hold the NAD's ipam object: only root reads them.
        let mode = |p: &Path| {
            std::os::unix::fs::PermissionsExt::mode(&fs::metadata(p).unwrap().permissions()) & 0o777
        };
        assert_eq!(mode(&dir), 0o700, "the state dir");
        assert_eq!(mode(&s.path("c1", "net1")), 0o600, "a record");
        // A FIFO named like a record stalls neither a listing nor a load.
        let fifo = dir.join("c9:net1.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(s.all().unwrap(), vec![r]);
        let e = s.load("c9", "net1").unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        fs::remove_file(&fifo).unwrap();
        s.remove("c1", "net1").unwrap();
        s.remove("c1", "net1").unwrap();
        // A damaged record is an error naming the file, never "nothing attached".
        fs::write(dir.join("c2:net1.json"), b"{\"containerId\":").unwrap();
        let e = s.load("c2", "net1").unwrap_err();
        assert!(e.msg.contains("c2:net1.json"), "{}", e.msg);
        fs::remove_file(dir.join("c2:net1.json")).unwrap();
        assert!(s.all().unwrap().is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_container_id_of_any_length_has_a_state_file_name_that_fits() {
        let short = stem("abc", "net1");
        assert_eq!(short, "abc:net1");
        for len in [229, 230, 243, 255, 4096] {
            let id = "a".repeat(len);
            let s = stem(&id, "net123456789012");
            assert!(s.len() + TEMP_SUFFIX.len() <= NAME_MAX, "{len}: {s}");
            // Two long IDs that share their first bytes still differ.
            let other = format!("{}b", "a".repeat(len - 1));
            assert_ne!(s, stem(&other, "net123456789012"), "{len}");
        }
    }

    #[test]
    fn a_record_saved_in_the_background_is_in_place_at_once_and_a_torn_one_is_no_record() {
        let dir = std::env::temp_dir().join(format!("rhd-state-bg-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let s = Store::new(&dir);
        let r = Record {
            container_id: "c1".into(),
            ifname: "net1".into(),
            host_name: "eth1".into(),
            ..Record::default()
        };
        let saving = s.begin_save(&r).unwrap();
        // In place before it is durable: a plugin killed now leaves it for DEL.
        let loaded = s.load("c1", "net1").unwrap().expect("in place");
        assert_eq!(loaded.host_name, "eth1");
        saving.durable().unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), Some(loaded));
        // What a node crash may leave of a write renamed before its data reached the disk.
        let p = s.path("c1", "net1");
        for torn in [Vec::new(), vec![0u8; 300]] {
            fs::write(&p, &torn).unwrap();
            assert_eq!(s.load("c1", "net1").unwrap(), None, "{} bytes", torn.len());
        }
        // Anything else that does not parse is still refused, not guessed at.
        fs::write(&p, b"{\"containerId\":").unwrap();
        let e = s.load("c1", "net1").unwrap_err();
        assert!(e.msg.contains("is unreadable"), "{}", e.msg);
        fs::write(&p, b"\0\0x").unwrap();
        assert!(s.load("c1", "net1").is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_record_of_an_older_version_still_loads_without_settings() {
        // Written before ADD recorded flags, group and txqueuelen: DEL leaves those alone.
        let old = br#"{"containerId":"c1","ifname":"net1","network":"n","netns":"/x",
            "hostName":"eth1","hostMtu":1500,"hostUp":true,"mac":"aa:bb:cc:dd:ee:ff"}"#;
        let r: Record = serde_json::from_slice(old).unwrap();
        let s = r.settings();
        assert_eq!((s.flags, s.group, s.txqlen), (None, None, None));
        assert_eq!(s.altnames, None, "altnames were not recorded then");
        // Written after altnames (with the NIC's identity) but before flags, group, txqlen.
        let mid = br#"{"containerId":"c1","ifname":"net1","network":"n","netns":"/x",
            "hostName":"eth1","hostMtu":1500,"hostUp":true,"mac":"aa:bb:cc:dd:ee:ff",
            "hostIndex":7,"podIndex":7,"kind":"veth"}"#;
        let r: Record = serde_json::from_slice(mid).unwrap();
        let s = r.settings();
        assert_eq!((s.flags, s.group, s.txqlen), (None, None, None));
        assert_eq!(
            s.altnames,
            Some(Vec::new()),
            "no altnames: the NIC had none"
        );
    }

    #[test]
    fn a_dra_attachment_round_trips_and_older_records_have_none() {
        let old = br#"{"containerId":"c1","ifname":"net1","network":"n","netns":"/x",
            "hostName":"eth1","hostMtu":1500,"hostUp":true,"mac":"aa:bb:cc:dd:ee:ff"}"#;
        let r: Record = serde_json::from_slice(old).unwrap();
        assert_eq!(r.dra, None);
        assert!(
            !serde_json::to_string(&r).unwrap().contains("dra"),
            "a record without one writes none"
        );
        let with = Record {
            dra: Some(DraAttachment {
                namespace: "team".into(),
                name: "rail".into(),
                uid: "u1".into(),
                request: "nic".into(),
                driver: "rdma-host-device.io".into(),
                pool: "node-a".into(),
                device: "pci-0000-3b-00-1".into(),
                network: Some(NetworkData {
                    interface_name: "net1".into(),
                    ips: vec!["10.0.0.5/24".into()],
                    hardware_address: "aa:bb:cc:dd:ee:ff".into(),
                }),
                metadata: false,
            }),
            ..r
        };
        let v = serde_json::to_value(&with).unwrap();
        assert_eq!(v["dra"]["network"]["interfaceName"], "net1");
        assert_eq!(v["dra"]["network"]["hardwareAddress"], "aa:bb:cc:dd:ee:ff");
        assert_eq!(serde_json::from_value::<Record>(v).unwrap(), with);
    }

    #[test]
    fn records_carry_their_format_and_a_newer_one_is_refused_untouched() {
        let dir = std::env::temp_dir().join(format!("rhd-state-format-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let s = Store::new(&dir);
        let r = Record {
            container_id: "c1".into(),
            ifname: "net1".into(),
            host_name: "eth1".into(),
            ..Record::default()
        };
        s.save(&r).unwrap();
        let written: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("c1:net1.json")).unwrap()).unwrap();
        assert_eq!(written["format"], FORMAT, "{written}");
        assert_eq!(s.load("c1", "net1").unwrap().unwrap().format, FORMAT);
        // A record from before the format was noted is format 1.
        let mut old = written.clone();
        old.as_object_mut().unwrap().remove("format");
        fs::write(dir.join("c1:net1.json"), old.to_string()).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap().unwrap().format, 1);
        // One a newer version wrote (with a field this one does not know): refused with
        // TryAgain, naming the file and what to do, and left out of the store's listing.
        let mut newer = written;
        newer["format"] = (FORMAT + 1).into();
        newer["fieldOfTheFuture"] = true.into();
        fs::write(dir.join("c1:net1.json"), newer.to_string()).unwrap();
        let e = s.load("c1", "net1").unwrap_err();
        assert_eq!(e.code, crate::error::Code::TryAgain);
        assert!(
            e.msg.contains("c1:net1.json") && e.msg.contains("newer") && e.msg.contains("forward"),
            "{}",
            e.msg
        );
        assert!(s.all().unwrap().is_empty());
        assert!(dir.join("c1:net1.json").exists(), "left as it was");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn temp_files_are_listed_and_removed_with_the_attachment() {
        let dir = std::env::temp_dir().join(format!("rhd-state-temps-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for f in [
            "c1:net1.json.tmp",
            "c2:net2.json.tmp",
            "c1:net1.json",
            "junk.json.tmp",
            ":net1.json.tmp",
            "c3:bad name.json.tmp",
        ] {
            let _ = fs::write(dir.join(f), b"{");
        }
        let s = Store::new(&dir);
        let long = "l".repeat(300);
        fs::write(s.temp_path(&long, "net3"), b"{").unwrap();
        let mut t = s.temps().unwrap();
        t.sort_by(|a, b| a.label.cmp(&b.label));
        let owners: Vec<&str> = t.iter().map(|t| t.owner.as_str()).collect();
        let labels: Vec<&str> = t.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels[..2], ["c1/net1", "c2/net2"]);
        assert!(labels[2].starts_with("llll") && labels[2].ends_with(".../net3"));
        let keys = [
            owner_key("c1", "net1"),
            owner_key("c2", "net2"),
            owner_key(&long, "net3"),
        ];
        assert_eq!(owners, keys);
        s.remove("c1", "net1").unwrap();
        s.remove_temp("c2", "net2").unwrap();
        s.remove_temp("c2", "net2").unwrap();
        s.remove_temp_file(&t[2]).unwrap();
        assert!(s.temps().unwrap().is_empty());
        assert!(!dir.join("c1:net1.json").exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
