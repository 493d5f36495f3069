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

use crate::error::{Result, failed, invalid};
use rdma_host_device_core::node::Memlock;
use serde_json::{Value, json};

use std::path::{Path, PathBuf};

pub const KIND: &str = "rdma-host-device.io/rdma";
/// What podman 4.3 (Debian 12) and the runtimes of its time read.
pub const CDI_VERSION: &str = "0.5.0";
pub(crate) const DEFAULT_SPEC: &str = rdma_host_device_core::node::DEFAULT_CDI_SPEC;
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
    /// Where it is on the node (`/dev/infiniband/uverbsN` unless `--node-dev` says otherwise).
    pub host_path: PathBuf,
}

/// The node's /dev: where this process reads it (`--dev`), and what the node calls it
/// (`--node-dev`), which is what a CDI spec names. The DaemonSet mounts the node's /dev at
/// /host/dev rather than /dev/infiniband: on a node without rdma_cm, moving the only RDMA device
/// into a pod empties /dev/infiniband, devtmpfs removes the directory, and a mount of the
/// directory itself keeps showing the removed one for good (no device seen again until the
/// container restarts: no CDI entry, no memlock from the NRI plugin).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DevDir {
    /// The node's /dev as this process sees it (the DaemonSet's containers: /host/dev, a
    /// read-only mount of the node's /dev; stat only, no device is opened)
    #[arg(long = "dev", value_name = "DIR", default_value = "/dev", value_parser = crate::flags::absolute_path)]
    pub seen: PathBuf,
    /// What the node calls that directory, for the paths a CDI spec names [default: --dev]
    #[arg(long = "node-dev", value_name = "DIR", value_parser = crate::flags::absolute_path)]
    pub on_node: Option<PathBuf>,
}

impl DevDir {
    /// The node's own /dev, read where it is.
    pub fn node_root() -> DevDir {
        DevDir::at(Path::new("/dev"))
    }

    /// A /dev read and named at `dir` (a test's tree).
    pub fn at(dir: &Path) -> DevDir {
        DevDir {
            seen: dir.to_owned(),
            on_node: None,
        }
    }

    /// `infiniband/NAME` as this process reads it and as the node names it, if it exists.
    fn infiniband(&self, name: &str) -> Option<PathBuf> {
        let rel = Path::new("infiniband").join(name);
        self.seen
            .join(&rel)
            .exists()
            .then(|| self.on_node.as_deref().unwrap_or(&self.seen).join(rel))
    }
}

impl VerbsDevice {
    /// `name` if it is a uverbs char device's name and its node exists under `dev`.
    fn at(dev: &DevDir, name: &str) -> Option<VerbsDevice> {
        if !rdma_host_device_core::rdma::netlink::is_uverbs_name(name) {
            return None;
        }
        dev.infiniband(name).map(|host_path| VerbsDevice {
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
pub fn verbs_devices(sysfs: &Path, dev: &DevDir) -> Vec<VerbsDevice> {
    let mut out: Vec<VerbsDevice> =
        rdma_host_device_core::sysfs::list_dir(&sysfs.join("class/infiniband_verbs"))
            .into_iter()
            .filter_map(|n| VerbsDevice::at(dev, &n))
            .collect();
    out.sort_by_key(VerbsDevice::number);
    out
}

/// The spec's `createRuntime` hook, all from the node configuration: the program (`cdiHook`),
/// the limit it gives (`memlock`, or `cdi --memlock`), and whether it refuses a container whose
/// OCI spec does not already carry that limit (`memlockFailClosed`: what the NRI plugin puts
/// there, so such a container waits for the plugin rather than run its exec'd processes with
/// the runtime's 8 MiB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub path: PathBuf,
    pub memlock: Memlock,
    pub fail_closed: bool,
}

impl Hook {
    /// The node's hook; `memlock` overrides the node's limit (`cdi --memlock`).
    pub fn of(node: &rdma_host_device_core::node::Node, memlock: Option<Memlock>) -> Result<Hook> {
        let memlock = match memlock {
            Some(m) => m,
            None => Memlock::parse(&node.memlock).map_err(|e| e.context(&node.source))?,
        };
        Ok(Hook {
            path: node.cdi_hook.clone(),
            memlock,
            fail_closed: node.memlock_fail_closed,
        })
    }

    /// The hook's command line (`memlock-hook LIMIT [--fail-closed]`, the plugin's
    /// `memlock_hook::hook_options`).
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "rdma-host-device".into(),
            "memlock-hook".into(),
            self.memlock.as_arg(),
        ];
        if self.fail_closed {
            a.push(rdma_host_device_core::node::FAIL_CLOSED_ARG.into());
        }
        a
    }

    /// For the line said wherever the spec is written.
    pub fn describe(&self) -> String {
        if self.fail_closed {
            format!(
                "memlock {} by the hook {}, which refuses a container whose OCI spec lacks it (memlockFailClosed: it waits for the NRI plugin)",
                self.memlock.as_arg(),
                self.path.display()
            )
        } else {
            format!(
                "memlock {} by the hook {}; {HOOK_REACH}",
                self.memlock.as_arg(),
                self.path.display()
            )
        }
    }
}

/// The CDI spec for `devices`: one entry per uverbs char device, named after it. `previous`
/// (the spec written before) keeps the entries of char devices gone from sysfs (a device moved
/// into a pod in exclusive mode) while their node exists; an entry is rebuilt from its name,
/// never copied, and a name that is not a uverbs char device's (an RDMA device name an older
/// version wrote, or anything else) is dropped.
pub fn spec(devices: &[VerbsDevice], dev: &DevDir, hook: &Hook, previous: Option<&Value>) -> Value {
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
    let mut common = json!({
        "hooks": [{
            "hookName": "createRuntime",
            "path": hook.path,
            "args": hook.args(),
        }]
    });
    if let Some(rdma_cm) = dev.infiniband("rdma_cm") {
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
    rdma_host_device_core::files::replace(path, &body)
        .map_err(|e| failed(format_args!("cannot write CDI spec {}", path.display()), e))
}

/// The spec for the devices now under `sysfs`/`dev`, and the one at `out` it replaces (whose
/// entries of devices moved into pods are kept, as `spec` says).
fn current(out: Option<&Path>, sysfs: &Path, dev: &DevDir, hook: &Hook) -> (Option<Value>, Value) {
    // Only a regular file within the bound, read without blocking: a FIFO at the path must
    // not stall the installer or the device plugin's loop.
    let previous: Option<Value> = out
        .and_then(|p| rdma_host_device_core::files::read_regular(p, MAX_SPEC).ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
    let spec = spec(&verbs_devices(sysfs, dev), dev, hook, previous.as_ref());
    (previous, spec)
}

fn device_count(spec: &Value) -> usize {
    spec["devices"].as_array().map_or(0, Vec::len)
}

/// Bring the spec at `out` up to date with the devices now under `sysfs`/`dev`: written only
/// when it changed. Returns the number of devices when it wrote, `None` when the file already
/// said so. The device plugin calls it every discovery, so a device that appears after the
/// DaemonSet's pod started gets its CDI name.
pub fn refresh(out: &Path, sysfs: &Path, dev: &DevDir, hook: &Hook) -> Result<Option<usize>> {
    let (previous, spec) = current(Some(out), sysfs, dev, hook);
    if previous.as_ref() == Some(&spec) {
        return Ok(None);
    }
    write_spec(out, &spec)?;
    Ok(Some(device_count(&spec)))
}

/// `cdi [--out FILE|-] [--memlock LIMIT] [--host-root DIR] [--sysfs DIR] [--dev DIR]
/// [--node-dev DIR]`. The
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
    #[command(flatten)]
    pub dev: DevDir,
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
        found => Err(invalid(format!(
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
    let node = rdma_host_device_core::node::Node::load()?;
    let hook = Hook::of(&node, o.memlock)?;
    let (_, spec) = current(o.out.as_deref(), &o.sysfs, &o.dev, &hook);
    let Some(out) = &o.out else {
        println!(
            "{}",
            serde_json::to_string_pretty(&spec).unwrap_or_default()
        );
        return Ok(());
    };
    check_hook(&hook.path, &o.host_root, &node.source)?;
    write_spec(out, &spec)?;
    eprintln!(
        "rdma-host-device: {} written: {} RDMA device(s) as {KIND}=uverbsN, {}",
        out.display(),
        device_count(&spec),
        hook.describe(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A uverbs char device `n` of RDMA device `ibdev`, as sysfs and /dev show it, under the
    /// test's own `sys` and `dev` trees.
    fn fake_uverbs(sys: &Path, dev: &Path, n: &str, ibdev: &str) {
        let d = sys.join("class/infiniband_verbs").join(n);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("ibdev"), format!("{ibdev}\n")).unwrap();
        fs::create_dir_all(dev.join("infiniband")).unwrap();
        fs::write(dev.join("infiniband").join(n), "").unwrap();
    }

    /// The node's default hook with `memlock`, not fail-closed.
    fn test_hook(memlock: Memlock) -> Hook {
        Hook {
            path: PathBuf::from(rdma_host_device_core::node::DEFAULT_HOOK),
            memlock,
            fail_closed: false,
        }
    }

    #[test]
    fn the_hook_is_the_nodes_and_fail_closed_only_where_the_node_says_so() {
        let node: rdma_host_device_core::node::Node = serde_json::from_str(
            r#"{"memlock": "1073741824", "cdiHook": "/srv/bin/rdma-host-device"}"#,
        )
        .unwrap();
        let dev = DevDir::at(Path::new("/nonexistent-rhd-dev"));
        let args = |n: &rdma_host_device_core::node::Node| {
            spec(&[], &dev, &Hook::of(n, None).unwrap(), None)["containerEdits"]["hooks"][0].clone()
        };
        assert_eq!(
            args(&node),
            json!({"hookName": "createRuntime", "path": "/srv/bin/rdma-host-device",
                   "args": ["rdma-host-device", "memlock-hook", "1073741824"]})
        );
        let closed = rdma_host_device_core::node::Node {
            memlock_fail_closed: true,
            ..node.clone()
        };
        assert_eq!(
            args(&closed)["args"],
            json!([
                "rdma-host-device",
                "memlock-hook",
                "1073741824",
                "--fail-closed"
            ])
        );
        // `cdi --memlock` overrides the limit, not the rest.
        let h = Hook::of(&closed, Some(Memlock::Unlimited)).unwrap();
        assert_eq!(h.args()[2..], ["unlimited", "--fail-closed"]);
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
        let refresh_now =
            |m: Memlock| refresh(&out, &sys, &DevDir::at(&dev), &test_hook(m)).unwrap();
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
        assert_eq!(refresh_now(Memlock::Unlimited), Some(1));
        assert_eq!(refresh_now(Memlock::Unlimited), None);
        // A device loaded later: its name appears.
        add("uverbs1", "mlx5_1");
        assert_eq!(refresh_now(Memlock::Unlimited), Some(2));
        assert_eq!(names(), ["uverbs0", "uverbs1"]);
        // mlx5_0 moved into a pod (gone from this sysfs, its node still there): kept.
        fs::remove_dir_all(sys.join("class/infiniband_verbs/uverbs0")).unwrap();
        assert_eq!(refresh_now(Memlock::Unlimited), None);
        // A new memlock policy is a change.
        assert_eq!(refresh_now(Memlock::Bytes(1 << 30)), Some(2));
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
            &DevDir::at(&dev),
            &test_hook(Memlock::Unlimited),
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
    fn the_node_dev_read_elsewhere_is_named_as_the_node_names_it() {
        // The DaemonSet's containers read the node's /dev at /host/dev (`--dev /host/dev
        // --node-dev /dev`): the spec names what the runtime opens on the node.
        let root = std::env::temp_dir().join(format!("rhd-cdi-seen-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (sys, seen) = (root.join("sys"), root.join("host/dev"));
        fake_uverbs(&sys, &seen, "uverbs3", "rxe0");
        fs::write(seen.join("infiniband/rdma_cm"), "").unwrap();
        let dev = DevDir {
            seen: seen.clone(),
            on_node: Some(PathBuf::from("/dev")),
        };
        let s = spec(
            &verbs_devices(&sys, &dev),
            &dev,
            &test_hook(Memlock::Unlimited),
            None,
        );
        assert_eq!(
            s["devices"][0]["containerEdits"]["deviceNodes"],
            json!([{"path": "/dev/infiniband/uverbs3"}]),
            "{s:#}"
        );
        assert_eq!(
            s["containerEdits"]["deviceNodes"],
            json!([{"path": "/dev/infiniband/rdma_cm"}]),
            "{s:#}"
        );
        // What is not under --dev is not in the spec, whatever the node calls it.
        fs::remove_file(seen.join("infiniband/uverbs3")).unwrap();
        let s = spec(
            &verbs_devices(&sys, &dev),
            &dev,
            &test_hook(Memlock::Unlimited),
            None,
        );
        assert_eq!(s["devices"], json!([]), "{s:#}");
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
        let refresh_now =
            |m: Memlock| refresh(&out, &sys, &DevDir::at(&dev), &test_hook(m)).unwrap();
        name("uverbs0", "mlx5_0");
        name("uverbs1", "mlx5_1");
        assert_eq!(refresh_now(Memlock::Unlimited), Some(2));
        let before = fs::read(&out).unwrap();
        name("uverbs0", "mlx5_1");
        name("uverbs1", "mlx5_0");
        assert_eq!(
            refresh_now(Memlock::Unlimited),
            None,
            "a swap of names is no change"
        );
        name("uverbs1", "bad name/\u{1b}[31m");
        assert_eq!(
            refresh_now(Memlock::Unlimited),
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
