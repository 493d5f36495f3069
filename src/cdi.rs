//! What lets a container *use* its RDMA device, for runtimes that read CDI specs (CRI-O,
//! containerd 1.7+, podman): `rdma-host-device-agent cdi` writes a Container Device Interface spec
//! with one device per uverbs char device of the node (kind `rdma-host-device.io/rdma`, named
//! after the char device: `rdma-host-device.io/rdma=uverbs0`), each granting that
//! `/dev/infiniband/uverbsN`, all granting `rdma_cm`, and a
//! `createRuntime` hook, `rdma-host-device memlock-hook LIMIT`, that raises the container's
//! RLIMIT_MEMLOCK (memory registration pins pages; containerd's default 8 MiB makes
//! `ibv_reg_mr` fail and NCCL fall back to TCP without a word).
//!
//! Who writes what: the spec is the node's (the DaemonSet writes it from sysfs and the node
//! configuration's `memlock`); the hook's input is the runtime's OCI state on stdin (a pid),
//! read within a bound. A device moved into a pod (exclusive mode) vanishes from the host's
//! sysfs: its entry is kept from the previous spec while its char device exists, so a
//! restarted container of that pod still resolves its CDI name.
//!
//! Why the char device names the entry, not the RDMA device: in the kernel's default shared
//! netns mode any pod with `NET_ADMIN` renames any RDMA device. Named by RDMA device, one pod's
//! rename to a name CDI refuses made the runtime reject the whole spec (every pod asking for any
//! device failed to start), a swap made a name resolve to another device's `uverbs`, and every
//! name a device ever had stayed in the spec. `uverbsN` is the kernel's, one per device, and
//! always a valid CDI name; the device plugin reads which one a NIC's device has by the
//! device's index (RDMA netlink), never by its name.

use crate::error::{Code, Error, Result, invalid_config};
use crate::node::Memlock;
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};

pub const KIND: &str = "rdma-host-device.io/rdma";
/// What podman 4.3 (Debian 12) and the runtimes of its time read.
pub const CDI_VERSION: &str = "0.5.0";
pub const DEFAULT_SPEC: &str = "/var/run/cdi/rdma-host-device.json";
pub const DEFAULT_HOOK: &str = "/opt/cni/bin/rdma-host-device";
const MAX_STATE: u64 = 1 << 20;
/// The most of a previous spec read (ours is a few hundred bytes per device).
const MAX_SPEC: u64 = 4 << 20;

/// One RDMA device's uverbs char device, which its user space opens. It is also the CDI
/// device's name: the kernel numbers it and no pod can change it, whereas an RDMA device's name
/// is any pod's to change in shared netns mode (`rdma dev set`; see docs/trust.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsDevice {
    /// `uverbsN`: the char device's name, and the CDI name (`rdma-host-device.io/rdma=uverbsN`).
    pub name: String,
    /// `/dev/infiniband/uverbsN` as the container sees it.
    pub path: String,
    /// Where it is on the node (the same, but under `dev_root`).
    pub host_path: PathBuf,
}

impl VerbsDevice {
    /// `name` if it is a uverbs char device's name and its node exists under `dev`.
    fn at(dev: &Path, name: &str) -> Option<VerbsDevice> {
        let host_path = dev.join("infiniband").join(name);
        (crate::rdma::netlink::is_uverbs_name(name) && host_path.exists()).then(|| VerbsDevice {
            name: name.to_owned(),
            path: format!("/dev/infiniband/{name}"),
            host_path,
        })
    }

    /// The char device's number, for ordering (`uverbs2` before `uverbs10`).
    fn number(&self) -> u64 {
        self.name["uverbs".len()..].parse().unwrap_or(u64::MAX)
    }
}

/// Every uverbs char device the kernel lists (`<sysfs>/class/infiniband_verbs/uverbsN`) whose
/// node `<dev>/infiniband/uverbsN` exists, in number order.
pub fn verbs_devices(sysfs: &Path, dev: &Path) -> Vec<VerbsDevice> {
    let mut out: Vec<VerbsDevice> = crate::sysfs::list_dir(&sysfs.join("class/infiniband_verbs"))
        .into_iter()
        .filter_map(|n| VerbsDevice::at(dev, &n))
        .collect();
    out.sort_by_key(VerbsDevice::number);
    out
}

/// The CDI spec for `devices`: one entry per uverbs char device, named after it. `previous`
/// (the spec written before) keeps the entries of char devices gone from sysfs (a device moved
/// into a pod in exclusive mode) while their node exists; an entry is rebuilt from its name,
/// never copied, and a name that is not a uverbs char device's (an RDMA device name an older
/// version wrote, or anything else) is dropped.
pub fn spec(
    devices: &[VerbsDevice],
    dev: &Path,
    memlock: Memlock,
    hook: &Path,
    previous: Option<&Value>,
) -> Value {
    let mut all: Vec<VerbsDevice> = devices.to_vec();
    let kept = previous
        .and_then(|p| p["devices"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .filter_map(|n| VerbsDevice::at(dev, n));
    for k in kept {
        if !all.iter().any(|d| d.name == k.name) {
            all.push(k);
        }
    }
    // By number: a device leaving for a pod (kept) or coming home changes nothing in the file.
    all.sort_by_key(VerbsDevice::number);
    let entries: Vec<Value> = all
        .iter()
        .map(|d| {
            let mut n = json!({"path": d.path});
            if d.host_path != Path::new(&d.path) {
                n["hostPath"] = json!(d.host_path);
            }
            json!({"name": d.name, "containerEdits": {"deviceNodes": [n]}})
        })
        .collect();
    let rdma_cm = dev.join("infiniband/rdma_cm");
    let mut common = json!({
        "hooks": [{
            "hookName": "createRuntime",
            "path": hook,
            "args": ["rdma-host-device", "memlock-hook", memlock.as_arg()],
        }]
    });
    if rdma_cm.exists() {
        let mut n = json!({"path": "/dev/infiniband/rdma_cm"});
        if rdma_cm != Path::new("/dev/infiniband/rdma_cm") {
            n["hostPath"] = json!(rdma_cm);
        }
        common["deviceNodes"] = json!([n]);
    }
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": entries,
        "containerEdits": common,
    })
}

/// Write `spec` to `path` through a temp file and a rename.
pub fn write_spec(path: &Path, spec: &Value) -> Result<()> {
    let body = serde_json::to_vec_pretty(spec).unwrap_or_default();
    crate::files::replace(path, &body).map_err(|e| {
        Error::new(
            Code::Io,
            format!("cannot write CDI spec {}: {e}", path.display()),
        )
    })
}

/// The spec for the devices now under `sysfs`/`dev`, and the one at `out` it replaces (whose
/// entries of devices moved into pods are kept, as `spec` says).
fn current(
    out: Option<&Path>,
    sysfs: &Path,
    dev: &Path,
    memlock: Memlock,
    hook: &Path,
) -> (Option<Value>, Value) {
    // Only a regular file within the bound, read without blocking: a FIFO at the path must
    // not stall the installer or the device plugin's loop.
    let previous: Option<Value> = out
        .and_then(|p| crate::files::read_regular(p, MAX_SPEC).ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
    let spec = spec(
        &verbs_devices(sysfs, dev),
        dev,
        memlock,
        hook,
        previous.as_ref(),
    );
    (previous, spec)
}

fn device_count(spec: &Value) -> usize {
    spec["devices"].as_array().map_or(0, Vec::len)
}

/// Bring the spec at `out` up to date with the devices now under `sysfs`/`dev`: written only
/// when it changed. Returns the number of devices when it wrote, `None` when the file already
/// said so. The device plugin calls it every discovery, so a device that appears after the
/// DaemonSet's pod started gets its CDI name.
pub fn refresh(
    out: &Path,
    sysfs: &Path,
    dev: &Path,
    memlock: Memlock,
    hook: &Path,
) -> Result<Option<usize>> {
    let (previous, spec) = current(Some(out), sysfs, dev, memlock, hook);
    if previous.as_ref() == Some(&spec) {
        return Ok(None);
    }
    write_spec(out, &spec)?;
    Ok(Some(device_count(&spec)))
}

/// `cdi [--out FILE|-] [--memlock LIMIT] [--host-root DIR] [--sysfs DIR] [--dev DIR]`. The
/// hook's path is the node configuration's `cdiHook`, the one place both writers of the spec
/// (this and the device plugin's `--cdi-spec`) take it from.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// Where the spec goes; `None` (`--out -`): printed on stdout.
    // The qualified `Option` is clap's way to say the parser gives the whole value (`-`: None).
    #[arg(long, value_name = "FILE|-", default_value = DEFAULT_SPEC, value_parser = out_arg)]
    pub out: ::std::option::Option<PathBuf>,
    /// The containers' RLIMIT_MEMLOCK: bytes or unlimited [default: the node configuration's
    /// memlock]
    #[arg(long, value_name = "BYTES|unlimited", value_parser = crate::flags::memlock)]
    pub memlock: Option<Memlock>,
    /// Where the node's root file system is (the DaemonSet's install container: /host): the
    /// node configuration's cdiHook must exist there before a spec naming it is written
    #[arg(long, value_name = "DIR", default_value = "/", value_parser = crate::flags::absolute_path)]
    pub host_root: PathBuf,
    #[arg(long, value_name = "DIR", default_value = "/sys", hide = true)]
    pub sysfs: PathBuf,
    #[arg(long, value_name = "DIR", default_value = "/dev", hide = true)]
    pub dev: PathBuf,
}

/// `--out`'s value: `-` is stdout.
fn out_arg(s: &str) -> std::result::Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(s)).filter(|p| p.as_os_str() != "-"))
}

/// Whether `hook` (a path as the node's runtime sees it) is an executable file under `host_root`
/// (the node's root as this process sees it): a spec naming a missing hook makes the runtime
/// fail every container given a CDI name ("error running hook #0: fork/exec ...: no such file
/// or directory").
pub fn check_hook(hook: &Path, host_root: &Path, source: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let on_node = host_root.join(hook.strip_prefix("/").unwrap_or(hook));
    match std::fs::metadata(&on_node) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        found => Err(invalid_config(format!(
            "cdiHook {} {} on the node ({}): the runtime would fail every container given a CDI name (\"error running hook #0: fork/exec\"); set cdiHook in the node configuration ({source}) to where the CNI binary rdma-host-device is installed",
            hook.display(),
            match found {
                Ok(_) => "is not an executable file",
                Err(_) => "does not exist",
            },
            on_node.display(),
        ))),
    }
}

/// What the hook reaches, said wherever the spec is written.
pub const HOOK_REACH: &str = "the hook raises each such container's first process only: processes started in it later (kubectl exec) keep the runtime's limit unless the runtime has NRI and `rdma-host-device-agent nri` runs (`inspect` says which)";

/// `cdi`: the CDI spec of this node's RDMA devices, written to the file (a line on stderr says
/// what it holds) or printed. The memlock limit defaults to the node configuration's; the
/// hook is the node configuration's `cdiHook`, which must exist on the node to be written.
pub fn run(o: &Options) -> Result<()> {
    let node = crate::node::Node::load()?;
    let memlock = match o.memlock {
        Some(m) => m,
        None => Memlock::parse(&node.memlock).map_err(|e| e.context(&node.source))?,
    };
    let hook = &node.cdi_hook;
    let (_, spec) = current(o.out.as_deref(), &o.sysfs, &o.dev, memlock, hook);
    let Some(out) = &o.out else {
        println!(
            "{}",
            serde_json::to_string_pretty(&spec).unwrap_or_default()
        );
        return Ok(());
    };
    check_hook(hook, &o.host_root, &node.source)?;
    write_spec(out, &spec)?;
    eprintln!(
        "rdma-host-device: {} written: {} RDMA device(s) as {KIND}=uverbsN, memlock {} by the hook {}; {HOOK_REACH}",
        out.display(),
        device_count(&spec),
        memlock.as_arg(),
        hook.display(),
    );
    Ok(())
}

/// `memlock-hook BYTES|unlimited`: the limit the hook sets.
pub fn hook_options(args: &[String]) -> Result<Memlock> {
    match args {
        [limit] => Memlock::parse(limit).map_err(|e| e.context("memlock-hook")),
        [] => Err(invalid_config(
            "memlock-hook needs a LIMIT (bytes or unlimited)",
        )),
        [_, extra, ..] => Err(invalid_config(format!(
            "memlock-hook takes one LIMIT, not also {extra:?}"
        ))),
    }
}

/// `memlock-hook`: as the runtime runs it, with the container's OCI state on stdin.
pub fn run_hook(limit: &Memlock) -> Result<()> {
    memlock_hook(*limit, &mut std::io::stdin())
}

/// The OCI hook: the container's process (the `pid` of the runtime's state on stdin) gets
/// RLIMIT_MEMLOCK `limit` (soft and hard) before it starts; its program inherits it.
///
/// Only that container's: the state must be of a container being created (the hook is a
/// `createRuntime` hook) and its pid a process in that container's namespaces as its bundle's
/// `config.json` gives them (`namespace_mismatch`), held by a pidfd from before the check until
/// after the limit is set, so a pid the process left and another took is never acted on.
pub fn memlock_hook(limit: Memlock, state: &mut dyn Read) -> Result<()> {
    let mut body = Vec::new();
    state
        .take(MAX_STATE)
        .read_to_end(&mut body)
        .map_err(|e| Error::new(Code::Io, format!("reading the OCI state: {e}")))?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        Error::new(
            Code::Decode,
            format!("the OCI state on stdin is not JSON: {e}"),
        )
    })?;
    let pid = v["pid"]
        .as_i64()
        .filter(|&p| p > 0 && p <= i64::from(i32::MAX))
        .ok_or_else(|| Error::new(Code::Decode, "the OCI state has no pid"))?
        as libc::pid_t;
    let id = crate::logging::shown(v["id"].as_str().unwrap_or("(no id)"));
    let refuse = |why: String| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "not setting RLIMIT_MEMLOCK of pid {pid} for container {id}: {why}; the hook acts only on the container the runtime runs it for (a createRuntime hook, CDI spec {DEFAULT_SPEC})"
            ),
        )
    };
    match v["status"].as_str() {
        Some("creating" | "created") => {}
        Some(other) => {
            return Err(refuse(format!(
                "the state's status is {}, not creating or created",
                crate::logging::shown(other)
            )));
        }
        None => return Err(refuse("the state has no status".into())),
    }
    let bundle = v["bundle"]
        .as_str()
        .map(Path::new)
        .filter(|b| b.is_absolute())
        .ok_or_else(|| refuse("the state has no absolute bundle path".into()))?;
    let config_path = bundle.join("config.json");
    let config: Value = crate::files::read_regular(&config_path, MAX_CONFIG)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            refuse(format!(
                "cannot read the bundle's {}: {e}",
                crate::logging::shown(config_path.as_os_str().as_encoded_bytes())
            ))
        })?;
    let pidfd = Pidfd::open(pid).map_err(|e| refuse(format!("no such process: {e}")))?;
    if let Some(why) = namespace_mismatch(pid, &config) {
        return Err(refuse(why));
    }
    let lim = libc::rlimit {
        rlim_cur: limit.as_rlim(),
        rlim_max: limit.as_rlim(),
    };
    // SAFETY: prlimit with a valid rlimit struct and no old-limit pointer.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_MEMLOCK, &lim, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(Error::new(
            Code::Io,
            format!(
                "setting RLIMIT_MEMLOCK of pid {pid} to {}: {}",
                limit.as_arg(),
                std::io::Error::last_os_error()
            ),
        ));
    }
    if !pidfd.alive() {
        return Err(refuse(
            "the process exited while the hook ran (its pid may be another's now)".into(),
        ));
    }
    Ok(())
}

/// The most of a bundle's config.json read (Kubernetes' are tens of KiB).
const MAX_CONFIG: u64 = 16 << 20;

/// The namespaces a container's init is in once the runtime has created it (when
/// `createRuntime` hooks run), by OCI type and /proc/PID/ns name. The user, cgroup and time
/// namespaces are left out: some runtimes enter them later, and they say nothing the others
/// do not.
const NAMESPACES: [(&str, &str); 5] = [
    ("mount", "mnt"),
    ("pid", "pid"),
    ("network", "net"),
    ("ipc", "ipc"),
    ("uts", "uts"),
];

/// Why `pid` is not the init of the container `config` (its bundle's config.json) describes,
/// if it is not: for each namespace type, one the config names by path must be that one; one
/// it asks for without a path must be another than the hook's own (the runtime's); one it
/// leaves out must be the runtime's. A new PID namespace's init is its pid 1.
pub fn namespace_mismatch(pid: libc::pid_t, config: &Value) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let listed = config["linux"]["namespaces"].as_array();
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    for (oci, proc_name) in NAMESPACES {
        let theirs = match id(Path::new(&format!("/proc/{pid}/ns/{proc_name}"))) {
            Ok(i) => i,
            Err(e) => return Some(format!("cannot read its {oci} namespace: {e}")),
        };
        let own = match id(Path::new(&format!("/proc/self/ns/{proc_name}"))) {
            Ok(i) => i,
            Err(e) => return Some(format!("cannot read the hook's own {oci} namespace: {e}")),
        };
        let entry = listed
            .into_iter()
            .flatten()
            .find(|n| n["type"].as_str() == Some(oci));
        match entry.map(|n| n["path"].as_str().filter(|p| !p.is_empty())) {
            None if theirs != own => {
                return Some(format!(
                    "its {oci} namespace is not the runtime's, which the bundle's config gives the container"
                ));
            }
            None => {}
            Some(None) if theirs == own => {
                return Some(format!(
                    "it is in the runtime's own {oci} namespace, and the bundle's config gives the container a new one"
                ));
            }
            Some(None) => {}
            Some(Some(path)) => match id(Path::new(path)) {
                Ok(want) if want == theirs => {}
                Ok(_) => {
                    return Some(format!(
                        "its {oci} namespace is not {}, the container's in the bundle's config",
                        crate::logging::shown(path)
                    ));
                }
                Err(e) => {
                    return Some(format!(
                        "cannot read the container's {oci} namespace {}: {e}",
                        crate::logging::shown(path)
                    ));
                }
            },
        }
        if oci == "pid" && matches!(entry.map(|n| n["path"].as_str()), Some(None | Some(""))) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let in_ns = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_whitespace().last());
            if in_ns != Some("1") {
                return Some(
                    "it is not pid 1 of the new PID namespace the bundle's config gives the container"
                        .into(),
                );
            }
        }
    }
    None
}

/// A pidfd (pidfd_open(2)): what says a pid is still the process it was when opened. Without
/// pidfds (kernels before 5.3), the pid alone.
struct Pidfd(Option<std::os::fd::OwnedFd>);

impl Pidfd {
    fn open(pid: libc::pid_t) -> std::io::Result<Pidfd> {
        use std::os::fd::FromRawFd;
        let no_flags: libc::c_long = 0;
        // SAFETY: pidfd_open(2) with a pid and no flags; the fd is owned at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::c_long::from(pid), no_flags) };
        if fd >= 0 {
            // SAFETY: a new descriptor no one else owns.
            return Ok(Pidfd(Some(unsafe {
                std::os::fd::OwnedFd::from_raw_fd(fd as i32)
            })));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return Ok(Pidfd(None));
        }
        Err(e)
    }

    /// Whether the process has not been reaped (a pid is never reused before).
    fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.0 else {
            return true;
        };
        let (no_signal, no_flags): (libc::c_long, libc::c_long) = (0, 0);
        // SAFETY: pidfd_send_signal(2) of signal 0 (no signal, a check) on a pidfd we own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                libc::c_long::from(fd.as_raw_fd()),
                no_signal,
                std::ptr::null::<libc::siginfo_t>(),
                no_flags,
            )
        };
        rc == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn the_hook_refuses_a_state_without_a_pid() {
        for bad in [&b"{}"[..], b"not json", br#"{"pid": 0}"#, br#"{"pid": -5}"#] {
            assert!(memlock_hook(Memlock::Unlimited, &mut &bad[..]).is_err());
        }
    }

    /// A uverbs char device `n` of RDMA device `ibdev`, as sysfs and /dev show it, under the
    /// test's own `sys` and `dev` trees.
    fn fake_uverbs(sys: &Path, dev: &Path, n: &str, ibdev: &str) {
        let d = sys.join("class/infiniband_verbs").join(n);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("ibdev"), format!("{ibdev}\n")).unwrap();
        fs::create_dir_all(dev.join("infiniband")).unwrap();
        fs::write(dev.join("infiniband").join(n), "").unwrap();
    }

    #[test]
    fn refresh_writes_only_what_changed_and_follows_new_devices() {
        let root = std::env::temp_dir().join(format!("rhd-cdi-refresh-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (sys, dev, out) = (
            root.join("sys"),
            root.join("dev"),
            root.join("cdi/spec.json"),
        );
        let add = |n: &str, ibdev: &str| fake_uverbs(&sys, &dev, n, ibdev);
        let hook = Path::new(DEFAULT_HOOK);
        let names = || -> Vec<String> {
            let v: Value = serde_json::from_slice(&fs::read(&out).unwrap()).unwrap();
            v["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect()
        };
        add("uverbs0", "mlx5_0");
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            Some(1)
        );
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            None
        );
        // A device loaded later: its name appears.
        add("uverbs1", "mlx5_1");
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            Some(2)
        );
        assert_eq!(names(), ["uverbs0", "uverbs1"]);
        // mlx5_0 moved into a pod (gone from this sysfs, its node still there): kept.
        fs::remove_dir_all(sys.join("class/infiniband_verbs/uverbs0")).unwrap();
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            None
        );
        // A new memlock policy is a change.
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Bytes(1 << 30), hook).unwrap(),
            Some(2)
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_device_in_a_pod_keeps_its_entry_while_its_char_device_exists() {
        let root = std::env::temp_dir().join(format!("rhd-cdi-kept-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dev = root.join("dev");
        fs::create_dir_all(dev.join("infiniband")).unwrap();
        fs::write(dev.join("infiniband/uverbs0"), "").unwrap();
        let node = |p: &str| json!({"deviceNodes": [{"path": p}]});
        let prev = json!({"devices": [
            // In a pod: gone from sysfs, its node still there.
            {"name": "uverbs0", "containerEdits": node("/dev/null")},
            // Unplugged: no node.
            {"name": "uverbs7", "containerEdits": node("/dev/infiniband/uverbs7")},
            // What an older version wrote (an RDMA device's name): never carried over.
            {"name": "mlx5_0", "containerEdits": node("/dev/null")},
        ]});
        let s = spec(
            &[],
            &dev,
            Memlock::Unlimited,
            Path::new(DEFAULT_HOOK),
            Some(&prev),
        );
        assert_eq!(s["devices"].as_array().unwrap().len(), 1, "{s:#}");
        assert_eq!(s["devices"][0]["name"], "uverbs0");
        // Rebuilt from the name: the previous file's edits (/dev/null) are not copied.
        assert_eq!(
            s["devices"][0]["containerEdits"]["deviceNodes"][0],
            json!({"path": "/dev/infiniband/uverbs0", "hostPath": dev.join("infiniband/uverbs0")})
        );
        assert_eq!(s["kind"], KIND);
        assert_eq!(s["containerEdits"]["hooks"][0]["args"][2], "unlimited");
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn renaming_rdma_devices_changes_nothing_in_the_spec() {
        // Shared RDMA netns mode: any pod with NET_ADMIN renames any RDMA device. Neither a
        // swap of two names nor a name CDI refuses may change what a CDI name resolves to or
        // make the spec invalid.
        let root = std::env::temp_dir().join(format!("rhd-cdi-rename-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (sys, dev, out) = (
            root.join("sys"),
            root.join("dev"),
            root.join("cdi/spec.json"),
        );
        let name = |n: &str, ibdev: &str| fake_uverbs(&sys, &dev, n, ibdev);
        let hook = Path::new(DEFAULT_HOOK);
        name("uverbs0", "mlx5_0");
        name("uverbs1", "mlx5_1");
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            Some(2)
        );
        let before = fs::read(&out).unwrap();
        name("uverbs0", "mlx5_1");
        name("uverbs1", "mlx5_0");
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            None,
            "a swap of names is no change"
        );
        name("uverbs1", "bad name/\u{1b}[31m");
        assert_eq!(
            refresh(&out, &sys, &dev, Memlock::Unlimited, hook).unwrap(),
            None,
            "a name CDI refuses is no change"
        );
        assert_eq!(fs::read(&out).unwrap(), before);
        let v: Value = serde_json::from_slice(&before).unwrap();
        let entries: Vec<(&str, &str)> = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["name"].as_str().unwrap(),
                    d["containerEdits"]["deviceNodes"][0]["path"]
                        .as_str()
                        .unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("uverbs0", "/dev/infiniband/uverbs0"),
                ("uverbs1", "/dev/infiniband/uverbs1")
            ]
        );
        let _ = fs::remove_dir_all(&root);
    }
}
