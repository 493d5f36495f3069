//! What lets a container *use* its RDMA device, for runtimes that read CDI specs (CRI-O,
//! containerd 1.7+, podman): `rdma-host-device-agent cdi` writes a Container Device Interface spec
//! with one device per RDMA device of the node (kind `rdma-host-device.io/rdma`, named after
//! the RDMA device), each granting its `/dev/infiniband/uverbsN`, all granting `rdma_cm`, and a
//! `createRuntime` hook, `rdma-host-device memlock-hook LIMIT`, that raises the container's
//! RLIMIT_MEMLOCK (memory registration pins pages; containerd's default 8 MiB makes
//! `ibv_reg_mr` fail and NCCL fall back to TCP without a word).
//!
//! Who writes what: the spec is the node's (the DaemonSet writes it from sysfs and the node
//! configuration's `memlock`); the hook's input is the runtime's OCI state on stdin (a pid),
//! read within a bound. A device moved into a pod (exclusive mode) vanishes from the host's
//! sysfs: its entry is kept from the previous spec while its char device exists, so a
//! restarted container of that pod still resolves its CDI name.

use crate::error::{Code, Error, Result, invalid_config};
use crate::node::Memlock;
use serde_json::{Value, json};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const KIND: &str = "rdma-host-device.io/rdma";
/// What podman 4.3 (Debian 12) and the runtimes of its time read.
pub const CDI_VERSION: &str = "0.5.0";
pub const DEFAULT_SPEC: &str = "/var/run/cdi/rdma-host-device.json";
pub const DEFAULT_HOOK: &str = "/opt/cni/bin/rdma-host-device";
const MAX_STATE: u64 = 1 << 20;

/// One RDMA device and the char device its user space opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsDevice {
    pub rdma_device: String,
    /// `/dev/infiniband/uverbsN` as the container sees it.
    pub path: String,
    /// Where it is on the node (the same, but under `dev_root`).
    pub host_path: PathBuf,
}

/// Every RDMA device's uverbs char device: `<sysfs>/class/infiniband_verbs/uverbsN/ibdev`
/// names the RDMA device, `<dev>/infiniband/uverbsN` is the node.
pub fn verbs_devices(sysfs: &Path, dev: &Path) -> Vec<VerbsDevice> {
    let mut out: Vec<VerbsDevice> = crate::sysfs::list_dir(&sysfs.join("class/infiniband_verbs"))
        .into_iter()
        .filter(|n| n.starts_with("uverbs"))
        .filter_map(|n| {
            let ibdev =
                fs::read_to_string(sysfs.join("class/infiniband_verbs").join(&n).join("ibdev"))
                    .ok()?;
            let host_path = dev.join("infiniband").join(&n);
            host_path.exists().then(|| VerbsDevice {
                rdma_device: ibdev.trim().to_owned(),
                path: format!("/dev/infiniband/{n}"),
                host_path,
            })
        })
        .collect();
    out.sort_by(|a, b| a.rdma_device.cmp(&b.rdma_device));
    out
}

/// The CDI spec for `devices`; `previous` (the spec written before) keeps the entries of
/// devices now in pods whose char device still exists.
pub fn spec(
    devices: &[VerbsDevice],
    dev: &Path,
    memlock: Memlock,
    hook: &Path,
    previous: Option<&Value>,
) -> Value {
    let node = |d: &VerbsDevice| {
        let mut n = json!({"path": d.path});
        if d.host_path != Path::new(&d.path) {
            n["hostPath"] = json!(d.host_path);
        }
        n
    };
    let mut entries: Vec<Value> = devices
        .iter()
        .map(|d| json!({"name": d.rdma_device, "containerEdits": {"deviceNodes": [node(d)]}}))
        .collect();
    let kept = previous
        .and_then(|p| p["devices"].as_array())
        .into_iter()
        .flatten()
        .filter(|e| {
            let name = e["name"].as_str().unwrap_or("");
            !name.is_empty() && !devices.iter().any(|d| d.rdma_device == name)
        })
        .filter(|e| {
            e["containerEdits"]["deviceNodes"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|n| {
                    n["hostPath"]
                        .as_str()
                        .or(n["path"].as_str())
                        .is_some_and(|p| Path::new(p).exists())
                })
        })
        .cloned()
        .collect::<Vec<_>>();
    entries.extend(kept);
    // By name: a device leaving for a pod (kept) or coming home changes nothing in the file.
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
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
    let previous: Option<Value> = out
        .and_then(|p| fs::read(p).ok())
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

/// `cdi [--out FILE|-] [--memlock LIMIT] [--hook PATH] [--sysfs DIR] [--dev DIR]`.
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
    /// The memlock hook's path, as the node's runtime sees it (the CNI binary)
    #[arg(long, value_name = "PATH", default_value = DEFAULT_HOOK)]
    pub hook: PathBuf,
    #[arg(long, value_name = "DIR", default_value = "/sys", hide = true)]
    pub sysfs: PathBuf,
    #[arg(long, value_name = "DIR", default_value = "/dev", hide = true)]
    pub dev: PathBuf,
}

/// `--out`'s value: `-` is stdout.
fn out_arg(s: &str) -> std::result::Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(s)).filter(|p| p.as_os_str() != "-"))
}

/// `cdi`: the CDI spec of this node's RDMA devices, written to the file (a line on stderr says
/// what it holds) or printed. The memlock limit defaults to the node configuration's.
pub fn run(o: &Options) -> Result<()> {
    let memlock = match o.memlock {
        Some(m) => m,
        None => {
            let node = crate::node::Node::load()?;
            Memlock::parse(&node.memlock).map_err(|e| e.context(&node.source))?
        }
    };
    let (_, spec) = current(o.out.as_deref(), &o.sysfs, &o.dev, memlock, &o.hook);
    let Some(out) = &o.out else {
        println!(
            "{}",
            serde_json::to_string_pretty(&spec).unwrap_or_default()
        );
        return Ok(());
    };
    write_spec(out, &spec)?;
    eprintln!(
        "rdma-host-device: {} written: {} RDMA device(s) as {KIND}=NAME, memlock {memlock:?}",
        out.display(),
        device_count(&spec),
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
        .ok_or_else(|| Error::new(Code::Decode, "the OCI state has no pid"))?;
    let lim = libc::rlimit {
        rlim_cur: limit.as_rlim(),
        rlim_max: limit.as_rlim(),
    };
    // SAFETY: prlimit with a valid rlimit struct and no old-limit pointer.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_MEMLOCK,
            &lim,
            std::ptr::null_mut(),
        )
    };
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_refuses_a_state_without_a_pid() {
        for bad in [&b"{}"[..], b"not json", br#"{"pid": 0}"#, br#"{"pid": -5}"#] {
            assert!(memlock_hook(Memlock::Unlimited, &mut &bad[..]).is_err());
        }
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
        let add = |n: &str, ibdev: &str| {
            let d = sys.join("class/infiniband_verbs").join(n);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("ibdev"), format!("{ibdev}\n")).unwrap();
            fs::create_dir_all(dev.join("infiniband")).unwrap();
            fs::write(dev.join("infiniband").join(n), "").unwrap();
        };
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
        assert_eq!(names(), ["mlx5_0", "mlx5_1"]);
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
        let dev = Path::new("/dev");
        let prev = json!({"devices": [
            {"name": "in_pod", "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}},
            {"name": "unplugged", "containerEdits": {"deviceNodes": [{"path": "/dev/rhd-no-such"}]}},
        ]});
        let s = spec(
            &[],
            dev,
            Memlock::Unlimited,
            Path::new(DEFAULT_HOOK),
            Some(&prev),
        );
        let names: Vec<&str> = s["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert_eq!(names, ["in_pod"]);
        assert_eq!(s["kind"], KIND);
        assert_eq!(s["containerEdits"]["hooks"][0]["args"][2], "unlimited");
    }
}
