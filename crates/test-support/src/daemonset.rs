//! The DaemonSet of conf/k8s/daemonset.yaml run by podman: its manifests, the image
//! deploy/build-image.sh builds from the release binaries, a stand-in node root (hostPath
//! volumes become its directories, the ConfigMap a directory holding its data), and each
//! container's `podman run` arguments from the YAML (tests/runtimes/image.rs, crates/agent/tests/real_cluster/quickstart.rs).

use crate::podman::{PODMAN_RUN_LIMITS, Podman};
use crate::process::{output_text, repo, run};
use rdma_host_device_agent::validate::yaml;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The DaemonSet YAML's documents: (ConfigMap, DaemonSet).
pub fn manifests() -> (Value, Value) {
    let text = fs::read_to_string(repo().join("conf/k8s/daemonset.yaml")).unwrap();
    let docs = yaml::parse_all(&text).unwrap_or_else(|e| panic!("daemonset.yaml: {e}"));
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == json!(kind))
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} in daemonset.yaml"))
    };
    (find("ConfigMap"), find("DaemonSet"))
}

/// The image name every container of the DaemonSet uses (they must agree).
pub fn daemonset_image(ds: &Value) -> String {
    let spec = &ds["spec"]["template"]["spec"];
    let mut images: Vec<String> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default())
        .map(|c| c["image"].as_str().unwrap_or("").to_owned())
        .collect();
    images.dedup();
    assert_eq!(
        images.len(),
        1,
        "the DaemonSet's containers use different images: {images:?}"
    );
    images.remove(0)
}

/// A stand-in for a node: its root (with this machine's glibc, so a chroot into it can run
/// the plugin) and the ConfigMap's data as files.
pub struct Node {
    pub root: PathBuf,
    pub configmap: PathBuf,
}

impl Node {
    pub fn new(dir: &Path, cm: &Value, bin: &Path) -> Node {
        let root = dir.join("node-root");
        for d in ["usr/bin", "bin", "opt/cni/bin", "etc"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let ldd = run("ldd", &[bin.to_str().unwrap()]);
        for line in String::from_utf8_lossy(&ldd.stdout).lines() {
            let lib = line
                .split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(str::to_owned);
            if let Some(lib) = lib {
                let dst = root.join(lib.trim_start_matches('/'));
                fs::create_dir_all(dst.parent().unwrap()).unwrap();
                fs::copy(fs::canonicalize(&lib).unwrap(), &dst).unwrap();
            }
        }
        let configmap = dir.join("configmap");
        fs::create_dir_all(&configmap).unwrap();
        for (k, v) in cm["data"].as_object().unwrap() {
            let p = configmap.join(k);
            fs::write(&p, v.as_str().unwrap()).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Node { root, configmap }
    }

    /// A host path as this node has it.
    pub fn host(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }
}

/// `podman run` arguments for DaemonSet container `name`, from the YAML: command (as the
/// entrypoint, which is what Kubernetes' `command` replaces), env, volumes, host network,
/// host PID namespace, privilege, capabilities, read-only root, no-new-privileges. `detach`
/// for a long-running container.
pub fn podman_args(ds: &Value, name: &str, node: &Node, image: &str, detach: bool) -> Vec<String> {
    let spec = &ds["spec"]["template"]["spec"];
    let c = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default())
        .find(|c| c["name"] == json!(name))
        .unwrap_or_else(|| panic!("no container {name} in the DaemonSet"));
    let mut a: Vec<String> = vec!["run".into(), format!("--name={name}")];
    a.push(if detach { "--detach" } else { "--rm" }.into());
    if spec["hostNetwork"] == json!(true) {
        a.push("--network=host".into());
    }
    if spec["hostPID"] == json!(true) {
        a.push("--pid=host".into());
    }
    let sc = &c["securityContext"];
    if sc["privileged"] == json!(true) {
        a.push("--privileged".into());
    }
    for cap in sc["capabilities"]["drop"].as_array().into_iter().flatten() {
        a.push(format!("--cap-drop={}", cap.as_str().unwrap()));
    }
    for cap in sc["capabilities"]["add"].as_array().into_iter().flatten() {
        a.push(format!("--cap-add={}", cap.as_str().unwrap()));
    }
    if sc["readOnlyRootFilesystem"] == json!(true) {
        a.push("--read-only".into());
    }
    if sc["allowPrivilegeEscalation"] == json!(false) {
        a.push("--security-opt=no-new-privileges".into());
    }
    a.extend(PODMAN_RUN_LIMITS.map(String::from));
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let vol = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap_or_else(|| panic!("volume {} is not declared", m["name"]));
        let src = if vol["configMap"].is_object() {
            node.configmap.clone()
        } else {
            let p = vol["hostPath"]["path"].as_str().expect("hostPath volume");
            let h = node.host(p);
            fs::create_dir_all(&h).unwrap(); // DirectoryOrCreate
            h
        };
        let ro = if m["readOnly"] == json!(true) {
            ":ro"
        } else {
            ""
        };
        a.push(format!(
            "--volume={}:{}{ro}",
            src.display(),
            m["mountPath"].as_str().unwrap()
        ));
    }
    for e in c["env"].as_array().into_iter().flatten() {
        a.push(format!(
            "--env={}={}",
            e["name"].as_str().unwrap(),
            e["value"].as_str().unwrap()
        ));
    }
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    a.push(format!(
        "--entrypoint={}",
        serde_json::to_string(&cmd).unwrap()
    ));
    a.push(image.to_owned());
    a
}

/// `cargo build --release` (a no-op when up to date): the binaries users ship; the plugin's path
/// (deploy/build-image.sh takes the agent from beside it). The release profile has its own build
/// lock, so this does not wait on the test build.
pub fn release_binary() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    // As from a shell, whichever package's test asks: cargo gives a test the variables of its
    // package (CARGO_PKG_NAME, CARGO_MANIFEST_DIR, ...), and ring's build script asks to run
    // again when they change (rerun-if-env-changed), and with it all that links ring (the
    // agent, with LTO). The plugin's tests and the agent's would each build it anew.
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str()
            && (k.starts_with("CARGO_PKG_")
                || matches!(
                    k,
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_MANIFEST_LINKS"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_BIN_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_TARGET_TMPDIR"
                ))
        {
            build.env_remove(k);
        }
    }
    let out = build
        .args(["build", "--release", "--quiet"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo build --release\n{}",
        output_text(&out)
    );
    repo().join("target/release/rdma-host-device")
}

/// deploy/build-image.sh with `bin`, into `podman`'s storage: its report (image, size).
pub fn build_image(podman: &Podman, bin: &Path) -> String {
    let t0 = Instant::now();
    let out = Command::new(repo().join("deploy/build-image.sh"))
        .arg(bin)
        .env("PODMAN_OPTS", podman.opts().join(" "))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "deploy/build-image.sh\n{}",
        output_text(&out)
    );
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{report}built in {:.1} s", t0.elapsed().as_secs_f64());
    report
}

/// deploy/build-image.sh with this plugin and this agent, tagged `image` (its IMAGE), into
/// `podman`'s storage: its report. An image of two builds (say the previous release's plugin
/// with this build's agent) gets a tag of its own so both can be on a node at once.
pub fn build_image_tagged(podman: &Podman, bin: &Path, agent: &Path, image: &str) -> String {
    let t0 = Instant::now();
    let out = Command::new(repo().join("deploy/build-image.sh"))
        .arg(bin)
        .arg(agent)
        .env("IMAGE", image)
        .env("PODMAN_OPTS", podman.opts().join(" "))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "deploy/build-image.sh {} {} (IMAGE={image})\n{}",
        bin.display(),
        agent.display(),
        output_text(&out)
    );
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{report}built in {:.1} s", t0.elapsed().as_secs_f64());
    report
}
