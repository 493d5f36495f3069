//! The container runtimes on this node, the RLIMIT_MEMLOCK their containers inherit, and which
//! path gives a container with an RDMA device the node's `memlock`:
//! - NRI (the runtime's NRI socket is there: `rdma-host-device-agent nri` puts the limit in the
//!   container's OCI spec, so every process of the container has it, `kubectl exec`'d included);
//! - the CDI hook only (our CDI spec is there, no NRI: the hook raises the container's first
//!   process; processes started later by exec inherit the runtime's own limit);
//! - neither (containerd 1.6: no CDI, no NRI): every process inherits the runtime's limit.
//!
//! Where neither reaches every process and the inherited limit is too small for RDMA
//! (`ibv_reg_mr` beyond it fails for a non-root process; NCCL then falls back to TCP without a
//! word), the advice names the exact setting of that runtime. Read from `/proc/<pid>/limits` of
//! every process whose name is a runtime's, and the socket and spec through `/proc/<pid>/root`:
//! the runtime's own view of the paths (the DaemonSet's node report shares the host's pids).

use super::report::{MemlockPath, RuntimeMemlock};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The process names of the runtimes whose children are containers.
const RUNTIMES: &[&str] = &["containerd", "crio", "dockerd"];
/// Below this, RDMA memory registration of a real workload fails (NCCL registers GiBs).
const ENOUGH: u64 = 1 << 30;

/// Where to look, as the runtime sees its file system.
#[derive(Debug, Clone, Copy)]
pub struct Paths<'a> {
    /// The runtime's NRI socket (`/var/run/nri/nri.sock`).
    pub nri_socket: &'a Path,
    /// Our CDI spec (`/var/run/cdi/rdma-host-device.json`).
    pub cdi_spec: &'a Path,
}

/// Every runtime process found under `proc`, with its memlock limit, its memlock path and
/// what to do about it.
pub fn runtimes(proc: &Path, paths: Paths<'_>) -> Vec<RuntimeMemlock> {
    let mut out = Vec::new();
    // The node's root as init sees it (the node report shares the host's pids and may read
    // init's root); where init's cannot be read (a sandbox whose init is not ours to trace),
    // our own: then only a runtime beside us is read, and a real one elsewhere is not.
    let node_root = std::fs::metadata(proc.join("1").join("root"))
        .or_else(|_| std::fs::metadata(proc.join("self").join("root")))
        .ok();
    for pid in rdma_host_device_core::sysfs::list_dir(proc)
        .into_iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
    {
        let dir = proc.join(&pid);
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        if !RUNTIMES.contains(&comm) {
            continue;
        }
        let Some(soft) = std::fs::read_to_string(dir.join("limits"))
            .ok()
            .and_then(|l| memlock_soft(&l))
        else {
            continue;
        };
        let seen = |p: &Path| dir.join("root").join(p.strip_prefix("/").unwrap_or(p));
        let nri =
            std::fs::metadata(seen(paths.nri_socket)).is_ok_and(|m| m.file_type().is_socket());
        // Another process's root is readable only with ptrace rights over it (the DaemonSet's
        // privileged node-report has them; its unprivileged install container does not).
        let visible = std::fs::metadata(dir.join("root")).is_ok();
        let path = if !visible {
            MemlockPath::Unknown
        } else if nri {
            MemlockPath::Nri
        } else if seen(paths.cdi_spec).is_file() {
            MemlockPath::CdiHookOnly
        } else {
            MemlockPath::Neither
        };
        // containerd's fail-closed setting (docs/deploy.md), read from its configuration as it
        // sees it: the file its command line names, else the default. Only of a containerd
        // whose root is the node's (PID 1's): any process may call itself containerd and name
        // any file on its command line, and a pod's process has a root of its own. And then
        // only a regular file, bounded, opened without waiting: never a FIFO or /dev/zero.
        let nri_validator = (comm == "containerd"
            && visible
            && same_root(&dir, node_root.as_ref()))
        .then(|| {
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let config = containerd_config(&cmdline);
            let text =
                rdma_host_device_core::files::read_regular(&seen(Path::new(&config)), CONFIG_MAX)
                    .ok()?;
            Some(nri_validator_enabled(&String::from_utf8_lossy(&text)))
        })
        .flatten();
        out.push(RuntimeMemlock {
            runtime: comm.to_owned(),
            pid: pid.parse().unwrap_or(0),
            memlock_bytes: soft,
            nri_socket: paths.nri_socket.display().to_string(),
            nri,
            nri_validator,
            memlock_path: path,
            advice: advice(comm, soft, path),
        });
    }
    out.sort_by_key(|r| r.pid);
    out
}

/// The most of a containerd configuration read (they are a few KiB).
const CONFIG_MAX: u64 = 1 << 20;

/// Whether the process at `dir` (`/proc/PID`) has the node's root (`node_root`, PID 1's, see
/// [`runtimes`]): the
/// same directory, by device and inode, so paths it names mean what they mean on the node.
fn same_root(dir: &Path, node_root: Option<&std::fs::Metadata>) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Some(node), Ok(its)) = (node_root, std::fs::metadata(dir.join("root"))) else {
        return false;
    };
    (node.dev(), node.ino()) == (its.dev(), its.ino())
}

/// The configuration file of a containerd whose `/proc/PID/cmdline` is `cmdline`: its
/// `--config`/`-c` value, else the default `/etc/containerd/config.toml`.
fn containerd_config(cmdline: &[u8]) -> String {
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--config=") {
            return v.to_owned();
        }
        if (a == "--config" || a == "-c")
            && let Some(v) = args.get(i + 1)
        {
            return v.clone();
        }
    }
    "/etc/containerd/config.toml".to_owned()
}

/// Whether a containerd configuration turns on NRI's default validator (the section
/// `[plugins."io.containerd.nri.v1.nri".default_validator]`, either quoting, with `enable =
/// true`): what makes a pod conf/k8s/fail-closed.yaml marks wait for our NRI plugin. Read as
/// text, not as TOML: a file it `imports` is not followed (it then says off).
pub fn nri_validator_enabled(config: &str) -> bool {
    let mut inside = false;
    for line in config.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            let header: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            inside = header == "[plugins.\"io.containerd.nri.v1.nri\".default_validator]"
                || header == "[plugins.'io.containerd.nri.v1.nri'.default_validator]";
            continue;
        }
        if inside
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == "enable"
        {
            return v.trim() == "true";
        }
    }
    false
}

/// The soft "Max locked memory" of a `/proc/<pid>/limits` text: `None` if absent, `u64::MAX`
/// for unlimited.
pub fn memlock_soft(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(u64::MAX)
    } else {
        soft.parse().ok()
    }
}

/// What a person changes so that every process of a container has enough memlock, where NRI
/// does not put it in the spec: `None` when NRI does, or the inherited limit is enough.
fn advice(runtime: &str, soft: u64, path: MemlockPath) -> Option<String> {
    if path == MemlockPath::Nri || soft >= ENOUGH {
        return None;
    }
    let who = match path {
        MemlockPath::Unknown => format!(
            "this process cannot see {runtime}'s files (/proc/PID/root: run inspect privileged, as the DaemonSet's node-report container does) to tell whether NRI is on; without NRI, processes exec'd into a container inherit {runtime}'s RLIMIT_MEMLOCK {}",
            human(soft)
        ),
        MemlockPath::CdiHookOnly => format!(
            "the CDI hook raises only a container's first process; processes started by exec (kubectl exec, mpirun's launchers) inherit {runtime}'s RLIMIT_MEMLOCK {}",
            human(soft)
        ),
        _ => format!(
            "neither NRI nor our CDI spec is here: every container process inherits {runtime}'s RLIMIT_MEMLOCK {}",
            human(soft)
        ),
    };
    let fix = match runtime {
        "containerd" => {
            "either turn on NRI (containerd 1.7.7+: in /etc/containerd/config.toml, [plugins.\"io.containerd.nri.v1.nri\"] disable = false; on by default from 2.0) and run the DaemonSet's nri container; or give every container the limit: a base_runtime_spec (a whole OCI spec, e.g. `ctr oci spec`, with {\"type\": \"RLIMIT_MEMLOCK\", \"hard\": 18446744073709551615, \"soft\": 18446744073709551615} added to process.rlimits) named in the runc runtime's section ([plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc] base_runtime_spec = \"/etc/containerd/memlock-spec.json\"; containerd 2.x: [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]), or raise containerd's own limit, which containers inherit: `systemctl edit containerd` with [Service] LimitMEMLOCK=infinity; then restart containerd"
        }
        "crio" => {
            "either turn on NRI (CRI-O 1.29+: [crio.nri] enable_nri = true) and run the DaemonSet's nri container; or give every container the limit: [crio.runtime] default_ulimits = [\"memlock=-1:-1\"] in a file under /etc/crio/crio.conf.d/; then restart crio"
        }
        _ => {
            "give every container the limit: \"default-ulimits\": {\"memlock\": {\"Name\": \"memlock\", \"Hard\": -1, \"Soft\": -1}} in /etc/docker/daemon.json, or `systemctl edit docker` with [Service] LimitMEMLOCK=infinity; then restart docker"
        }
    };
    Some(format!(
        "{who}: RDMA memory registration beyond it fails for non-root processes (NCCL falls back to TCP). To fix, {fix}"
    ))
}

fn human(bytes: u64) -> String {
    match bytes {
        u64::MAX => "unlimited".into(),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max locked memory         8388608              8388608              bytes     
Max address space         unlimited            unlimited            bytes     
";

    /// A /proc of four processes called containerd: two with the node's root (PID 1's), one
    /// with a root of its own (a pod's), one whose configuration is a FIFO.
    #[test]
    fn the_validator_is_read_only_of_a_containerd_with_the_nodes_root_and_never_waits() {
        let tmp = std::env::temp_dir().join(format!("rhd-inspect-rt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let (node, pod, proc) = (tmp.join("node"), tmp.join("pod"), tmp.join("proc"));
        let on = "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\nenable = true\n";
        for root in [&node, &pod] {
            std::fs::create_dir_all(root.join("etc/containerd")).unwrap();
            std::fs::write(root.join("etc/containerd/config.toml"), on).unwrap();
        }
        nix::unistd::mkfifo(&node.join("fifo.toml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let process = |pid: &str, comm: &str, root: &Path, cmdline: &[u8]| {
            let d = proc.join(pid);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(d.join("limits"), LIMITS).unwrap();
            std::fs::write(d.join("cmdline"), cmdline).unwrap();
            std::os::unix::fs::symlink(root, d.join("root")).unwrap();
        };
        process("1", "init", &node, b"/sbin/init\0");
        process("10", "containerd", &node, b"/usr/bin/containerd\0");
        process("11", "containerd", &pod, b"/usr/bin/containerd\0");
        process(
            "12",
            "containerd",
            &node,
            b"containerd\0--config\0/fifo.toml\0",
        );
        let paths = Paths {
            nri_socket: Path::new("/run/nri/nri.sock"),
            cdi_spec: Path::new("/run/cdi/rdma-host-device.json"),
        };
        let seen: Vec<(u32, Option<bool>)> = runtimes(&proc, paths)
            .iter()
            .map(|r| (r.pid, r.nri_validator))
            .collect();
        let _ = std::fs::remove_dir_all(&tmp);
        assert!(seen.contains(&(10, Some(true))), "{seen:?}");
        assert!(
            seen.contains(&(11, None)),
            "a root not the node's: {seen:?}"
        );
        assert!(
            seen.contains(&(12, None)),
            "a FIFO, not waited on: {seen:?}"
        );
    }

    #[test]
    fn the_nri_validator_is_read_from_containerds_configuration() {
        let on = "version = 3\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  [plugins.\"io.containerd.nri.v1.nri\".default_validator]\n    enable = true\n";
        assert!(nri_validator_enabled(on));
        assert!(nri_validator_enabled(
            "[plugins.'io.containerd.nri.v1.nri'.default_validator]\nenable=true # fail closed\n"
        ));
        for off in [
            "",
            "[plugins.\"io.containerd.nri.v1.nri\"]\n  enable = true\n",
            "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n",
            "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n# enable = true\n",
            "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n[other]\nenable = true\n",
        ] {
            assert!(!nri_validator_enabled(off), "{off}");
        }
        assert_eq!(
            containerd_config(b"/usr/bin/containerd\0--config\0/run/c.toml\0"),
            "/run/c.toml"
        );
        assert_eq!(containerd_config(b"containerd\0-c\0/x.toml\0"), "/x.toml");
        assert_eq!(
            containerd_config(b"containerd\0--config=/y.toml\0"),
            "/y.toml"
        );
        assert_eq!(
            containerd_config(b"/usr/bin/containerd\0"),
            "/etc/containerd/config.toml"
        );
    }

    #[test]
    fn the_soft_memlock_limit_is_read_and_a_small_one_gets_advice() {
        assert_eq!(memlock_soft(LIMITS), Some(8 << 20));
        let unlimited = LIMITS.replace(
            "8388608              8388608",
            "unlimited            unlimited",
        );
        assert_eq!(memlock_soft(&unlimited), Some(u64::MAX));
        assert_eq!(memlock_soft("nothing here"), None);
        let a = advice("containerd", 8 << 20, MemlockPath::Neither).unwrap();
        assert!(
            a.contains("8 MiB") && a.contains("LimitMEMLOCK=infinity"),
            "{a}"
        );
        assert_eq!(advice("crio", u64::MAX, MemlockPath::Neither), None);
        assert_eq!(advice("crio", 8 << 20, MemlockPath::Nri), None);
        let a = advice("containerd", 8 << 20, MemlockPath::Unknown).unwrap();
        assert!(
            a.contains("cannot see containerd's files") && a.contains("base_runtime_spec"),
            "{a}"
        );
    }
}
