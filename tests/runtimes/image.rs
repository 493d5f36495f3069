//! The DaemonSet's image, built offline and run the way conf/k8s/daemonset.yaml runs it.
//!
//! deploy/build-image.sh builds it with Debian's podman from the release binaries (`cargo build
//! --release`, run here: the CNI plugin and the node agent beside it), busybox-static and the
//! binaries' own libraries, `FROM scratch`. Each
//! container of the DaemonSet is then run by podman with what the YAML says: its command, env,
//! host network, privilege, and its volumes (hostPath volumes become directories of a stand-in
//! node root, the ConfigMap a directory holding its data), so the YAML itself is under test.
//! The stand-in node root carries this machine's glibc, so the installer's chroot check runs
//! the plugin with "the node's" libc. Podman uses a private storage root, removed at the end.
//! Needs root, podman (scripts/setup.sh), and the Rust toolchain for the release build.

use test_support as common;

use common::*;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn daemonset_names_the_image_the_build_produces() {
    let (_, ds) = manifests();
    let want = format!("localhost/rdma-host-device:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        daemonset_image(&ds),
        want,
        "conf/k8s/daemonset.yaml must name the image deploy/build-image.sh tags (the crate's version)"
    );
    let script = fs::read_to_string(repo().join("deploy/build-image.sh")).unwrap();
    assert!(
        script.contains("IMAGE=${IMAGE:-localhost/rdma-host-device:$version}"),
        "deploy/build-image.sh's default tag changed: change conf/k8s/daemonset.yaml with it"
    );
}

#[test]
fn daemonset_image_builds_offline_and_installs_like_the_daemonset() {
    require_root();
    let bin = release_binary();
    let (cm, ds) = manifests();
    let podman = Podman::new("podman");

    // Build, offline, with the name the DaemonSet uses.
    let report = build_image(&podman, &bin);
    let image = daemonset_image(&ds);
    assert!(
        report.contains(&format!("image: {image}\n")),
        "the build tagged something else than the DaemonSet's {image}:\n{report}"
    );
    let size: u64 = report
        .lines()
        .find_map(|l| l.strip_prefix("size: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in:\n{report}"));
    assert!(
        size < 16 << 20,
        "the image grew to {size} bytes (deploy/Containerfile says why it is ~13 MB)"
    );

    // A node with an old plugin already installed, still open (as by a runtime executing it).
    let node = Node::new(podman.dir.path(), &cm, &bin);
    let dest = node.host("/opt/cni/bin/rdma-host-device");
    fs::write(&dest, "#!/bin/sh\necho old plugin\n").unwrap();
    fs::set_permissions(&dest, fs::Permissions::from_mode(0o755)).unwrap();
    let old_inode = fs::metadata(&dest).unwrap().ino();
    let old_open = fs::File::open(&dest).unwrap();

    // The init container, as the DaemonSet runs it.
    let out = podman.run(&podman_args(&ds, "install", &node, &image, false));
    let log = output_text(&out);
    assert!(out.status.success(), "the install container failed\n{log}");
    eprintln!(
        "the install container's log:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for want in [
        "install.sh: installed /host/opt/cni/bin/rdma-host-device",
        &format!(
            "install.sh: runs with the node's libc: rdma-host-device {}",
            env!("CARGO_PKG_VERSION")
        ),
        "install.sh: installed the node configuration /host/etc/rdma-host-device/node.json",
        "RDMA: ",
    ] {
        assert!(log.contains(want), "missing {want:?}\n{log}");
    }
    // Installed: the very binary, executable, answering CNI VERSION on the node.
    assert_eq!(fs::read(&dest).unwrap(), fs::read(&bin).unwrap());
    assert_eq!(fs::metadata(&dest).unwrap().mode() & 0o777, 0o755);
    let v = output_with_stdin(
        Command::new(&dest).env("CNI_COMMAND", "VERSION"),
        br#"{"cniVersion":"1.0.0"}"#,
    );
    let v: Value = serde_json::from_slice(&v.stdout).unwrap_or(Value::Null);
    assert!(
        v["supportedVersions"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("1.1.0"))),
        "installed plugin's VERSION: {v}"
    );
    // Atomically: a new file renamed over the old one, never the live file rewritten; the
    // old one is intact for whoever had it open; no temporary file is left.
    assert_ne!(fs::metadata(&dest).unwrap().ino(), old_inode);
    use std::io::Read;
    let mut old = String::new();
    (&old_open).read_to_string(&mut old).unwrap();
    assert_eq!(old, "#!/bin/sh\necho old plugin\n");
    let leftovers: Vec<PathBuf> = files_under(&node.host("/opt/cni/bin"))
        .into_iter()
        .chain(files_under(&node.host("/etc/rdma-host-device")))
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    // Only the plugin goes to the node: the agent runs from the image.
    assert_eq!(files_under(&node.host("/opt/cni/bin")), vec![dest.clone()]);
    // The node configuration is the ConfigMap's, where the plugin reads it.
    assert_eq!(
        fs::read_to_string(node.host("/etc/rdma-host-device/node.json")).unwrap(),
        cm["data"]["node.json"].as_str().unwrap()
    );

    // The CDI spec, where runtimes that read CDI look (/var/run/cdi on the node): kind
    // rdma-host-device.io/rdma, one device per RDMA device (none on this machine: no RDMA), and
    // the memlock hook at the plugin's path on the node with the node configuration's limit.
    let spec_path = node.host("/var/run/cdi/rdma-host-device.json");
    let spec: Value = serde_json::from_slice(
        &fs::read(&spec_path).unwrap_or_else(|e| panic!("{}: {e}\n{log}", spec_path.display())),
    )
    .unwrap();
    eprintln!("the CDI spec the install container wrote:\n{spec:#}");
    assert_eq!(spec["kind"], "rdma-host-device.io/rdma", "{spec:#}");
    let hook = &spec["containerEdits"]["hooks"][0];
    assert_eq!(hook["hookName"], "createRuntime", "{spec:#}");
    assert_eq!(hook["path"], "/opt/cni/bin/rdma-host-device", "{spec:#}");
    let memlock: Value = serde_json::from_str(cm["data"]["node.json"].as_str().unwrap()).unwrap();
    assert_eq!(
        hook["args"],
        json!([
            "rdma-host-device",
            "memlock-hook",
            memlock["memlock"].as_str().unwrap_or("unlimited")
        ]),
        "the hook carries the node configuration's memlock: {spec:#}"
    );
    assert!(log.contains("rdma-host-device.io/rdma=uverbsN"), "{log}");

    // A restart of the pod: nothing to do, the binary is not touched.
    let inode = fs::metadata(&dest).unwrap().ino();
    let out = podman.run(&podman_args(&ds, "install", &node, &image, false));
    assert!(
        out.status.success(),
        "second install\n{}",
        output_text(&out)
    );
    assert!(
        output_text(&out).contains("is already this build; left alone"),
        "{}",
        output_text(&out)
    );
    assert_eq!(fs::metadata(&dest).unwrap().ino(), inode);

    // A broken node configuration in the ConfigMap is refused; the installed one stays.
    let good = fs::read_to_string(node.host("/etc/rdma-host-device/node.json")).unwrap();
    fs::write(
        node.configmap.join("node.json"),
        r#"{"stateDir": "relative/dir"}"#,
    )
    .unwrap();
    let out = podman.run(&podman_args(&ds, "install", &node, &image, false));
    assert!(
        !out.status.success() && output_text(&out).contains("is not a valid node configuration"),
        "a bad node.json was not refused\n{}",
        output_text(&out)
    );
    assert_eq!(
        fs::read_to_string(node.host("/etc/rdma-host-device/node.json")).unwrap(),
        good
    );

    // The node-report container: its first report, with the installed plugin.
    let out = podman.run(&podman_args(&ds, "node-report", &node, &image, true));
    assert!(out.status.success(), "node-report\n{}", output_text(&out));
    let t0 = Instant::now();
    let logs = loop {
        let l = podman.run(&["logs", "node-report"]);
        let s = output_text(&l);
        if s.contains("attached to pods; state dir") || t0.elapsed() > Duration::from_secs(20) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = podman.run(&["rm", "--force", "--time=0", "node-report"]);
    assert!(
        logs.contains(&format!(
            "rdma-host-device {} inspect on",
            env!("CARGO_PKG_VERSION")
        )) && logs.contains("state dir /var/lib/cni/rdma-host-device"),
        "node-report's first report\n{logs}"
    );
}

/// The DaemonSet's `metrics` container, from the real image with the YAML's volumes, scrapes
/// pods whose netns the runtime gave as `/var/run/netns/NAME` (containerd's and CRI-O's form)
/// and as `/run/netns/NAME`: both attachments are up. Issue 18: the image had no `/var`, so
/// every pod attached through a runtime showed `attachment_up 0` and no counters.
#[test]
fn the_metrics_container_enters_pods_at_the_netns_paths_runtimes_give() {
    require_root();
    let bin = release_binary();
    let (cm, ds) = manifests();
    let podman = Podman::new("podman");
    build_image(&podman, &bin);
    let image = daemonset_image(&ds);
    let node = Node::new(podman.dir.path(), &cm, &bin);
    // Two pods attached by the plugin (this build) on this machine, recording their netns as a
    // runtime gave it, into the state directory the DaemonSet mounts from the node.
    let rig = Rig::new();
    let state = node.host("/var/lib/cni/rdma-host-device");
    rig.set_node(json!({ "stateDir": state }));
    let nics = [rig.nic(0), rig.nic(1)];
    let pods = [rig.netns(0), rig.netns(1)];
    let paths = [
        format!("/var/run/netns/{}", pods[0].name),
        format!("/run/netns/{}", pods[1].name),
    ];
    let confs: Vec<Value> = nics
        .iter()
        .map(|nic| rig.conf("1.0.0", json!({ "device": nic.name })))
        .collect();
    for (i, (conf, path)) in confs.iter().zip(&paths).enumerate() {
        rig.call("ADD", conf, path, &rig.cid(i as u32), "net1", &[])
            .ok();
    }
    // The node's /run/netns, where the runtime mounts pods' netns, is the stand-in node's: an
    // rbind, made a slave at once. The host's /run/netns is shared (`ip netns add` makes it
    // so) and a bind of a shared mount joins its peer group, so unmounting the copy's netns
    // (Podman's drop, `unmount_under`) unmounted every netns of the host's /run/netns, other
    // tests' and the node's, leaving their files empty ("not a network namespace"). A slave
    // still sees the host's new netns, and what happens to it stays its own.
    let netns_dir = node.host("/run/netns");
    fs::create_dir_all(&netns_dir).unwrap();
    let bound = run(
        "mount",
        &["--rbind", "/run/netns", netns_dir.to_str().unwrap()],
    );
    assert!(
        bound.status.success(),
        "mount --rbind /run/netns\n{}",
        output_text(&bound)
    );
    let slave = run("mount", &["--make-rslave", netns_dir.to_str().unwrap()]);
    assert!(
        slave.status.success(),
        "mount --make-rslave {}\n{}",
        netns_dir.display(),
        output_text(&slave)
    );
    // The container as the YAML runs it, but printing one scrape instead of listening on the
    // node's port 9879 (which another test or a real exporter may hold).
    let mut args = podman_args(&ds, "metrics", &node, &image, false);
    let entry = args
        .iter_mut()
        .find(|a| a.starts_with("--entrypoint="))
        .expect("an entrypoint");
    let cmd: Vec<String> = serde_json::from_str(&entry["--entrypoint=".len()..]).unwrap();
    let metrics = cmd
        .iter()
        .position(|a| a == "metrics")
        .expect("runs metrics");
    let once: Vec<&str> = cmd[..=metrics]
        .iter()
        .map(String::as_str)
        .chain(["--once"])
        .collect();
    *entry = format!("--entrypoint={}", serde_json::to_string(&once).unwrap());
    let out = podman.run(&args);
    let scrape = String::from_utf8_lossy(&out.stdout).into_owned();
    for (i, path) in paths.iter().enumerate() {
        let cid = rig.cid(i as u32);
        let up: Vec<&str> = scrape
            .lines()
            .filter(|l| {
                l.starts_with("rdma_host_device_attachment_up{")
                    && l.contains(&format!("container_id=\"{cid}\""))
            })
            .collect();
        assert!(
            up.len() == 1
                && up[0].rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) == Some(1.0),
            "the pod at {path} is not up in the metrics container's scrape: {up:?}\n{}",
            output_text(&out)
        );
    }
    let netns_errors: Vec<&str> = scrape
        .lines()
        .filter(|l| l.starts_with("rdma_host_device_scrape_errors_total{stage=\"netns\"}"))
        .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) != Some(0.0))
        .collect();
    assert!(netns_errors.is_empty(), "{netns_errors:?}\n{scrape}");
    for (i, (conf, path)) in confs.iter().zip(&paths).enumerate() {
        rig.call("DEL", conf, path, &rig.cid(i as u32), "net1", &[])
            .ok();
    }
}

/// Issue 36 item 5: what a test's directory holds is unmounted without touching the mounts it
/// was bound from. A shared mount (as `ip netns add` makes /run/netns) holding an nsfs mount,
/// rbound into a test's directory as the metrics test above does with the host's /run/netns:
/// `unmount_under` of the directory leaves the source's netns mounted. Before, it unmounted
/// them through the peer group, which emptied every netns of the host's /run/netns at once.
/// Run again as a process of its own in a private mount namespace (`unshare`), so nothing here
/// touches the host's mounts and `unmount_under` sees the namespace it runs in.
#[test]
fn unmounting_a_tests_directory_leaves_the_mounts_it_was_bound_from() {
    // The harness names a test by its path inside the binary: `image::...`.
    const NAME: &str = "image::unmounting_a_tests_directory_leaves_the_mounts_it_was_bound_from";
    const INSIDE: &str = "RHD_TEST_IN_PRIVATE_MOUNT_NS";
    require_root();
    if std::env::var_os(INSIDE).is_none() {
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(INSIDE, "1")
            .output()
            .expect("unshare");
        let text = output_text(&out);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "in a mount namespace of its own:\n{text}"
        );
        return;
    }
    let dir = TempDir::new("unmount-peers");
    let netns = dir.path().join("netns");
    let copy = dir.path().join("test/node/run/netns");
    fs::create_dir_all(&netns).unwrap();
    fs::create_dir_all(&copy).unwrap();
    let pod = netns.join("pod");
    let sh = |script: &str| {
        let out = run("sh", &["-ec", script]);
        assert!(out.status.success(), "{script}\n{}", output_text(&out));
    };
    sh(&format!(
        "mount -t tmpfs tmpfs {n}; mount --make-shared {n}; : > {p}; \
         mount --bind /proc/self/ns/net {p}; mount --rbind {n} {c}",
        n = netns.display(),
        p = pod.display(),
        c = copy.display()
    ));
    let nsfs_at = |p: &std::path::Path| {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == p.to_str() && l.contains(" - nsfs "))
    };
    assert!(
        nsfs_at(&copy.join("pod")),
        "the rbind copied the nsfs mount"
    );
    unmount_under(&dir.path().join("test"));
    assert!(!nsfs_at(&copy.join("pod")), "the copy's netns is unmounted");
    assert!(
        nsfs_at(&pod),
        "unmount_under of a directory holding an rbind of a shared mount unmounted the \
         source's netns"
    );
}
