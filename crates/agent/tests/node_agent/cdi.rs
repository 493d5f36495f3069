//! The CDI spec (`rdma-host-device-agent cdi`) consumed by a real runtime: Debian's podman runs a
//! container given only the CDI device name `rdma-host-device.io/rdma=uverbsN` (named after the
//! char device, which no pod can rename); inside it the RDMA
//! device's uverbs char device and rdma_cm are present, and the memlock hook has raised
//! `ulimit -l` to the node policy's value. Without the CDI name: neither. This kernel has no
//! RDMA, so the RDMA device is described by a sysfs tree of the test's own (`--sysfs`) and its
//! char devices are made with mknod (`--dev`, the real major/minor of uverbs0 and rdma_cm);
//! podman, runc and the hook are the real ones. Needs root and podman.

use test_support as common;

use common::*;
use serde_json::Value;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A fake node: sysfs naming one RDMA device's uverbs char device, /dev with it and rdma_cm,
/// a busybox root for the container, all under podman's own temp dir (its storage beside them).
/// The char device's number is the test's own (`uverbs<pid><n>`): podman reads every spec in
/// /var/run/cdi, and two specs of one kind naming the same device conflict.
struct World {
    podman: Podman,
    /// `uverbsN`: the char device, and the CDI device's name.
    uverbs: String,
    spec: PathBuf,
}

impl World {
    fn new(tag: &str) -> World {
        require_root();
        let podman = Podman::new(&format!("cdi-{tag}"));
        let d = podman.dir.path();
        let rdma = format!("rhdt{}{tag}", std::process::id());
        let n = tag.bytes().next().map_or(0, |b| b % 10);
        let uverbs = format!("uverbs{}{n}", std::process::id());
        let verbs = d.join("sys/class/infiniband_verbs").join(&uverbs);
        fs::create_dir_all(&verbs).unwrap();
        fs::write(verbs.join("ibdev"), format!("{rdma}\n")).unwrap();
        fs::create_dir_all(d.join("dev/infiniband")).unwrap();
        for (name, major, minor) in [(uverbs.as_str(), 231, 192), ("rdma_cm", 10, 58)] {
            let p = std::ffi::CString::new(d.join("dev/infiniband").join(name).to_str().unwrap())
                .unwrap();
            // SAFETY: mknod of a char device node in our own temp dir.
            let rc = unsafe {
                libc::mknod(
                    p.as_ptr(),
                    libc::S_IFCHR | 0o666,
                    libc::makedev(major, minor),
                )
            };
            assert_eq!(rc, 0, "mknod {name}: {}", std::io::Error::last_os_error());
        }
        let root = d.join("rootfs/bin");
        fs::create_dir_all(&root).unwrap();
        fs::copy("/bin/busybox", root.join("busybox")).expect("busybox-static (scripts/setup.sh)");
        std::os::unix::fs::symlink("busybox", root.join("sh")).unwrap();
        // podman 4.3 reads specs from /etc/cdi and /var/run/cdi only: one file of this test's.
        let spec = PathBuf::from(format!("/var/run/cdi/rhd-test-{rdma}.json"));
        World {
            podman,
            uverbs,
            spec,
        }
    }

    /// The CDI name a container asks for.
    fn cdi_name(&self) -> String {
        format!("rdma-host-device.io/rdma={}", self.uverbs)
    }

    /// `cdi` with the node configuration naming `hook` as cdiHook.
    fn cdi_with_hook(&self, memlock: &str, hook: &str) -> Output {
        self.cdi_with_node(memlock, serde_json::json!({ "cdiHook": hook }))
    }

    /// `cdi` with node configuration `node`.
    fn cdi_with_node(&self, memlock: &str, node_json: Value) -> Output {
        let d = self.dir();
        let node = d.join("node.json");
        fs::write(&node, node_json.to_string()).unwrap();
        Command::new(AGENT)
            .args(["cdi", "--out"])
            .arg(&self.spec)
            .args(["--memlock", memlock, "--sysfs"])
            .arg(d.join("sys"))
            .arg("--dev")
            .arg(d.join("dev"))
            .env("RDMA_HOST_DEVICE_NODE_CONFIG", &node)
            .output()
            .unwrap()
    }

    /// `cdi`, the hook being the plugin under test.
    fn cdi(&self, memlock: &str) -> Output {
        let out = self.cdi_with_hook(memlock, PLUGIN);
        assert!(
            out.status.success(),
            "cdi: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `sh -c SCRIPT` in a podman container, with `devices` (CDI names) added.
    fn podman(&self, devices: &[String], script: &str) -> Result<String, String> {
        self.podman_with(&[], devices, script)
    }

    /// `podman`, with `extra` options for `podman run`.
    fn podman_with(
        &self,
        extra: &[&str],
        devices: &[String],
        script: &str,
    ) -> Result<String, String> {
        let mut args: Vec<String> = ["run", "--rm", "--network=none"].map(String::from).into();
        args.extend(PODMAN_RUN_LIMITS.map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        for dev in devices {
            args.extend(["--device".into(), dev.clone()]);
        }
        args.push("--rootfs".into());
        args.push(self.dir().join("rootfs").to_string_lossy().into_owned());
        args.extend(["/bin/sh", "-c", script].map(String::from));
        let out = self.podman.run(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "podman: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The fake node's files (sys/, dev/, rootfs/), beside podman's storage.
    fn dir(&self) -> &std::path::Path {
        self.podman.dir.path()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.spec);
    }
}

/// Whether this process may raise a hard rlimit (CAP_SYS_RESOURCE, bit 24 of CapEff).
fn has_cap_sys_resource() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

const SHOW: &str = "/bin/busybox ls -l /dev/infiniband 2>&1; echo memlock=$(ulimit -l)";

#[test]
fn a_container_given_the_cdi_name_gets_the_char_devices_and_the_memlock_limit() {
    let w = World::new("a");
    // 4 MiB: below the 8 MiB every container inherits here, so the hook can set it even where
    // the runtime lacks CAP_SYS_RESOURCE (this build machine); raising it is the next test.
    w.cdi("4194304");
    let spec: Value = serde_json::from_slice(&fs::read(&w.spec).unwrap()).unwrap();
    assert_eq!(spec["devices"][0]["name"], w.uverbs.as_str(), "{spec:#}");
    let inside = w.podman(&[w.cdi_name()], SHOW).unwrap();
    assert!(
        inside.contains("231, 192") && inside.contains(&w.uverbs),
        "{inside}"
    );
    assert!(
        inside.contains("10,  58") && inside.contains("rdma_cm"),
        "{inside}"
    );
    assert!(
        inside.contains("memlock=4096"),
        "4 MiB is 4096 KiB in ulimit -l: {inside}"
    );
}

#[test]
fn unlimited_memlock_and_nothing_without_the_cdi_name() {
    let w = World::new("b");
    w.cdi("unlimited");
    let inside = w.podman(&[w.cdi_name()], SHOW);
    if has_cap_sys_resource() {
        let inside = inside.unwrap();
        assert!(inside.contains("memlock=unlimited"), "{inside}");
    } else {
        // Raising a hard limit needs CAP_SYS_RESOURCE, which a node's runtime has and this
        // sandbox does not: the container must then fail to start, saying why, rather than
        // start with 8 MiB and let NCCL fall back to TCP in silence.
        let err = inside.unwrap_err();
        assert!(
            err.contains("memlock-hook: setting RLIMIT_MEMLOCK"),
            "{err}"
        );
    }
    let without = w.podman(&[], SHOW).unwrap();
    assert!(!without.contains(&w.uverbs), "{without}");
    assert!(
        !without.contains("memlock=unlimited"),
        "the runtime's default stays: {without}"
    );
}

/// Fail-closed (node.json `memlockFailClosed`, issue 38 item 4): the hook refuses a container
/// whose OCI spec does not already give it the node's memlock, which on a node is the NRI
/// plugin's doing; here podman's `--ulimit` puts it in the spec the same way, and the runtime
/// (runc) is the real one that must not start the refused container.
#[test]
fn fail_closed_refuses_a_container_whose_spec_lacks_the_memlock_and_starts_one_whose_spec_has_it() {
    let w = World::new("f");
    // 4 MiB: below the 8 MiB the runtime gives, so the hook may set it without CAP_SYS_RESOURCE.
    let out = w.cdi_with_node(
        "4194304",
        serde_json::json!({ "cdiHook": PLUGIN, "memlockFailClosed": true }),
    );
    assert!(
        out.status.success(),
        "cdi: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("refuses a container whose OCI spec lacks it"),
        "{said}"
    );
    // Without the limit in its spec (the NRI plugin away): not started, and the error says why.
    let err = w
        .podman(&[w.cdi_name()], "echo started")
        .expect_err("a container without the memlock in its spec must not start");
    assert!(!err.contains("started\n"), "{err}");
    assert!(
        err.contains("memlock-hook: refusing container")
            && err.contains("gives it no RLIMIT_MEMLOCK of 4194304")
            && err.contains("memlockFailClosed"),
        "{err}"
    );
    // With it (as the NRI plugin writes it): started, with that limit.
    let inside = w
        .podman_with(&["--ulimit=memlock=4194304:4194304"], &[w.cdi_name()], SHOW)
        .unwrap();
    assert!(inside.contains("memlock=4096"), "{inside}");
    // A lower one in the spec is no better than none.
    let low = w.podman_with(&["--ulimit=memlock=1048576:1048576"], &[w.cdi_name()], SHOW);
    assert!(
        low.as_ref()
            .is_err_and(|e| e.contains("soft 1048576, hard 1048576")),
        "{low:?}"
    );
    // Containers without our CDI name are not the hook's: they start as before.
    assert!(w.podman(&[], "echo plain").unwrap().contains("plain"));
}

#[test]
fn the_hook_is_the_node_configurations_and_one_missing_on_the_node_is_refused_before_writing() {
    // The install container and the device plugin once took the hook from two flags; a node
    // whose CNI binaries live elsewhere got a spec naming a path that does not exist, and every
    // container given a CDI name failed to start. Now the node configuration's cdiHook is the
    // one setting, checked on the node before a spec naming it is written.
    let w = World::new("e");
    let out = w.cdi_with_hook("4194304", "/nonexistent-rhd/bin/rdma-host-device");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("cdiHook /nonexistent-rhd/bin/rdma-host-device does not exist on the node"),
        "{err}"
    );
    assert!(!w.spec.exists(), "no spec naming a missing hook is written");
    let out = w.cdi("4194304");
    let spec: Value = serde_json::from_slice(&fs::read(&w.spec).unwrap()).unwrap();
    assert_eq!(
        spec["containerEdits"]["hooks"][0]["path"], PLUGIN,
        "{spec:#}"
    );
    // And it says what the hook does not reach.
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("first process only") && said.contains("kubectl exec"),
        "{said}"
    );
}

#[test]
fn the_spec_keeps_a_device_gone_from_sysfs_while_its_char_device_exists() {
    // Exclusive mode: a device moved into a pod leaves the host's sysfs; a restarted container
    // of that pod must still resolve its CDI name.
    let w = World::new("c");
    w.cdi("unlimited");
    fs::remove_dir_all(w.dir().join("sys/class/infiniband_verbs").join(&w.uverbs)).unwrap();
    w.cdi("unlimited");
    let spec: Value = serde_json::from_slice(&fs::read(&w.spec).unwrap()).unwrap();
    assert_eq!(spec["devices"][0]["name"], w.uverbs.as_str(), "{spec:#}");
    fs::remove_file(w.dir().join("dev/infiniband").join(&w.uverbs)).unwrap();
    w.cdi("unlimited");
    let spec: Value = serde_json::from_slice(&fs::read(&w.spec).unwrap()).unwrap();
    assert_eq!(
        spec["devices"].as_array().map(Vec::len),
        Some(0),
        "{spec:#}"
    );
}

#[test]
fn a_device_a_pod_renames_to_a_name_cdi_refuses_leaves_the_spec_valid_for_every_container() {
    // Shared RDMA netns mode: any pod with NET_ADMIN renames any RDMA device
    // (`rdma dev set mlx5_0 name 'x y'`). The spec names devices by their char device, so the
    // rename changes nothing: the runtime still reads the spec and resolves the CDI name.
    let w = World::new("d");
    let ibdev = w
        .dir()
        .join("sys/class/infiniband_verbs")
        .join(&w.uverbs)
        .join("ibdev");
    fs::write(&ibdev, "x y/\u{1b}[2J\n").unwrap();
    w.cdi("4194304");
    let spec: Value = serde_json::from_slice(&fs::read(&w.spec).unwrap()).unwrap();
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(names, [w.uverbs.as_str()], "{spec:#}");
    let inside = w.podman(&[w.cdi_name()], SHOW).unwrap();
    assert!(
        inside.contains("231, 192") && inside.contains(&w.uverbs),
        "{inside}"
    );
}

/// Issue 36: the spec and the directories `cdi` makes have the modes the agent names (0644,
/// 0755), not the umask's: under umask 000 the directories were 0777 (anyone could have put a
/// spec of theirs beside ours), under 077 the spec was 0600 (a runtime not running as root
/// could not read it). No podman: a fake node of the test's own.
#[test]
fn the_spec_and_its_directories_have_their_modes_whatever_the_umask() {
    let dir = TempDir::new("cdi-modes");
    let d = dir.path();
    let verbs = d.join("sys/class/infiniband_verbs/uverbs0");
    fs::create_dir_all(&verbs).unwrap();
    fs::write(verbs.join("ibdev"), "rxe0\n").unwrap();
    fs::create_dir_all(d.join("dev/infiniband")).unwrap();
    fs::write(d.join("dev/infiniband/uverbs0"), "").unwrap();
    let node = d.join("node.json");
    fs::write(&node, serde_json::json!({ "cdiHook": PLUGIN }).to_string()).unwrap();
    for mask in [0o000, 0o077] {
        let top = d.join(format!("run-{mask:03o}"));
        let spec = top.join("cdi/rdma-host-device.json");
        let out = with_umask(&mut Command::new(AGENT), mask)
            .args(["cdi", "--memlock", "unlimited", "--out"])
            .arg(&spec)
            .arg("--sysfs")
            .arg(d.join("sys"))
            .arg("--dev")
            .arg(d.join("dev"))
            .env("RDMA_HOST_DEVICE_NODE_CONFIG", &node)
            .env_remove("CNI_COMMAND")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
        assert_eq!(
            [mode_of(&top), mode_of(&top.join("cdi")), mode_of(&spec)],
            [Ok(Mode(0o755)), Ok(Mode(0o755)), Ok(Mode(0o644))],
            "umask {mask:03o}: the directories `cdi` made, then the spec"
        );
    }
}

/// The memlock of `pid`: /proc/PID/limits' soft "Max locked memory".
fn memlock_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("?")
        .to_owned()
}

/// A process killed and reaped on drop.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A container's init as a runtime leaves it for a createRuntime hook: pid 1 of new mount and
/// PID namespaces (`unshare --fork`'s child, whose host pid is returned), in the host's
/// network namespace.
fn contained() -> (Proc, u32) {
    let p = Proc(
        Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--kill-child", "sleep", "60"])
            .spawn()
            .expect("unshare"),
    );
    let children = format!("/proc/{0}/task/{0}/children", p.0.id());
    for _ in 0..500 {
        let init = fs::read_to_string(&children)
            .unwrap_or_default()
            .split_whitespace()
            .find_map(|c| c.parse::<u32>().ok());
        if let Some(init) = init
            && fs::read_to_string(format!("/proc/{init}/comm")).is_ok_and(|c| c.trim() == "sleep")
        {
            return (p, init);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("unshare made no container init in 5 s");
}

/// A bundle whose config.json gives the container `namespaces`.
fn bundle(dir: &std::path::Path, name: &str, namespaces: Value) -> PathBuf {
    let b = dir.join(name);
    fs::create_dir_all(&b).unwrap();
    fs::write(
        b.join("config.json"),
        serde_json::json!({"ociVersion": "1.0.2", "linux": {"namespaces": namespaces}}).to_string(),
    )
    .unwrap();
    b
}

/// The hook as the CDI spec has the runtime run it, 4 MiB (below the 8 MiB default, so no
/// CAP_SYS_RESOURCE is needed), `state` on stdin.
fn hook(state: Value) -> Output {
    output_with_stdin(
        Command::new(PLUGIN)
            .args(["memlock-hook", "4194304"])
            .env_remove("CNI_COMMAND"),
        state.to_string().as_bytes(),
    )
}

/// Issue 36: the hook raises the limit of the container the runtime runs it for, and of no
/// other process. The pid of the state must be a process in the namespaces the bundle's
/// config.json gives the container (pid 1 of its new PID namespace); a host process, a
/// process in another network namespace than the one named, a container no longer being
/// created, a state without a bundle: refused, their limits untouched. Before, any positive
/// pid got the limit.
#[test]
fn the_memlock_hook_acts_only_on_the_container_the_runtime_runs_it_for() {
    require_root();
    let dir = TempDir::new("hook");
    let (_c, init) = contained();
    let new_ns = serde_json::json!([{"type": "mount"}, {"type": "pid"}]);
    let b = bundle(dir.path(), "c", new_ns.clone());
    let state = |pid: u32, status: &str, bundle: &std::path::Path| {
        serde_json::json!({"ociVersion": "1.0.2", "id": "ctr-1", "status": status,
            "pid": pid, "bundle": bundle})
    };

    // Not the container: a process of the host, named by a state of the container's.
    let host = Proc(Command::new("sleep").arg("60").spawn().unwrap());
    let before = memlock_of(host.0.id());
    let out = hook(state(host.0.id(), "creating", &b));
    let said = output_text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "not setting RLIMIT_MEMLOCK of pid {}",
            host.0.id()
        )) && said.contains("mount namespace"),
        "{said}"
    );
    assert_eq!(
        memlock_of(host.0.id()),
        before,
        "the host's process was changed"
    );

    // The container's init, but the bundle names a network namespace it is not in.
    let pod = Netns::new(&format!("hook{}", std::process::id()));
    let mut other = new_ns.as_array().unwrap().clone();
    other.push(serde_json::json!({"type": "network", "path": pod.path()}));
    let out = hook(state(
        init,
        "creating",
        &bundle(dir.path(), "n", other.into()),
    ));
    let said = output_text(&out);
    assert!(
        !out.status.success() && said.contains("network namespace"),
        "{said}"
    );
    // A state not of a container being created, one without a bundle.
    let out = hook(state(init, "running", &b));
    assert!(
        !out.status.success() && output_text(&out).contains("running"),
        "{}",
        output_text(&out)
    );
    let mut no_bundle = state(init, "creating", &b);
    no_bundle.as_object_mut().unwrap().remove("bundle");
    let out = hook(no_bundle);
    assert!(
        !out.status.success() && output_text(&out).contains("bundle"),
        "{}",
        output_text(&out)
    );
    assert_ne!(memlock_of(init), "4194304", "{}", memlock_of(init));

    // The container's own: set.
    let out = hook(state(init, "creating", &b));
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(memlock_of(init), "4194304");
}
