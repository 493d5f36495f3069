//! Every example in conf/ parses, and every CNI config in it is accepted by the plugin's own
//! validation (`rdma-host-device-agent validate`, which runs the same NetConf::parse as ADD). Also:
//! the DaemonSet's ConfigMap carries deploy/install.sh verbatim, the install script installs
//! into a directory on this machine (no Rust needed to run it), and the NCCL pod names a
//! network that conf/ defines. No root needed except for the install script's chroot check.

use test_support as common;

use common::{AGENT, PLUGIN, files_under, output_text, yaml};
use rdma_host_device::cni::netconf::SELECTOR_KEYS;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn conf_dir() -> PathBuf {
    Path::new(ROOT).join("conf")
}

fn ext(p: &Path) -> &str {
    p.extension().and_then(|e| e.to_str()).unwrap_or("")
}

fn rel(p: &Path) -> String {
    p.strip_prefix(ROOT).unwrap_or(p).display().to_string()
}

/// The documents of kind `kind` in the conf/ file whose path ends with `file`.
fn of_kind(docs: &[(PathBuf, Value)], file: &str, kind: &str) -> Vec<Value> {
    docs.iter()
        .filter(|(f, d)| f.ends_with(file) && d["kind"] == kind)
        .map(|(_, d)| d.clone())
        .collect()
}

/// Every document of every example file, as JSON, with the file it came from.
fn documents() -> Vec<(PathBuf, Value)> {
    let mut docs = Vec::new();
    for f in files_under(&conf_dir()) {
        let text = fs::read_to_string(&f).unwrap();
        match ext(&f) {
            "json" | "conf" | "conflist" => {
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", rel(&f)));
                docs.push((f, v));
            }
            "yaml" | "yml" => {
                let vs =
                    yaml::parse_all(&text).unwrap_or_else(|e| panic!("{}: YAML: {e}", rel(&f)));
                assert!(!vs.is_empty(), "{} holds no YAML document", rel(&f));
                docs.extend(vs.into_iter().map(|v| (f.clone(), v)));
            }
            "md" => {}
            other => panic!(
                "{}: unknown example type .{other}: teach tests/shipped/conf.rs to check it",
                rel(&f)
            ),
        }
    }
    docs
}

#[test]
fn every_example_file_parses() {
    let docs = documents();
    assert!(docs.len() >= 7, "conf/ looks empty: {docs:?}");
    for (f, d) in &docs {
        if ext(f).starts_with("y") {
            assert!(
                d["apiVersion"].is_string() && d["kind"].is_string(),
                "{}: a Kubernetes manifest needs apiVersion and kind: {d}",
                rel(f)
            );
            assert!(
                d["metadata"]["name"].is_string(),
                "{}: no metadata.name",
                rel(f)
            );
        }
    }
}

/// Our YAML reader agrees with a real YAML library on every file (when python3 has PyYAML;
/// the Debian CI image does: python3-yaml).
#[test]
fn yaml_reader_agrees_with_pyyaml() {
    let have = Command::new("python3")
        .args(["-c", "import yaml"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("python3 with PyYAML not found: cross-check skipped");
        return;
    }
    for f in files_under(&conf_dir()) {
        if !matches!(ext(&f), "yaml" | "yml") {
            continue;
        }
        let out = Command::new("python3")
            .args([
                "-c",
                "import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
            ])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "PyYAML rejects {}: {}",
            rel(&f),
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
        let ours = Value::Array(yaml::parse_all(&fs::read_to_string(&f).unwrap()).unwrap());
        assert_eq!(
            ours,
            theirs,
            "{}: our YAML reading differs from PyYAML's",
            rel(&f)
        );
    }
}

/// The CNI-config-bearing documents: (label, JSON document as `validate` takes it).
fn cni_documents() -> Vec<(String, Value)> {
    documents()
        .into_iter()
        .filter(|(_, d)| {
            d["kind"] == "NetworkAttachmentDefinition"
                || d["type"].is_string()
                || d["plugins"].is_array()
        })
        .map(|(f, d)| {
            let label = match d["metadata"]["name"].as_str() {
                Some(n) => format!("{} ({n})", rel(&f)),
                None => rel(&f),
            };
            (label, d)
        })
        .collect()
}

fn validate(doc: &Value) -> (bool, String) {
    let out = common::output_with_stdin(
        Command::new(AGENT)
            .args(["validate", "-"])
            .env_remove("CNI_COMMAND"),
        doc.to_string().as_bytes(),
    );
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn every_cni_config_is_accepted_by_the_plugin() {
    let docs = cni_documents();
    let nads = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "NetworkAttachmentDefinition")
        .count();
    assert!(nads >= 4, "expected the four NADs, found {nads}");
    assert!(
        docs.iter().any(|(_, d)| d["plugins"].is_array()),
        "no conflist in conf/"
    );
    for (label, doc) in &docs {
        let (ok, out) = validate(doc);
        assert!(ok, "{label}: the plugin rejects it:\n{out}");
        assert!(out.contains(": ok ("), "{label}: {out}");
    }
}

/// The check bites: a typo'd key in any example is rejected with the spec's code 2.
#[test]
fn a_typo_in_an_example_is_rejected_with_code_2() {
    for (label, mut doc) in cni_documents() {
        if doc["kind"] == "NetworkAttachmentDefinition" {
            let mut c: Value =
                serde_json::from_str(doc["spec"]["config"].as_str().unwrap()).unwrap();
            c["devcie"] = json!("eth9");
            doc["spec"]["config"] = json!(c.to_string());
        } else if let Some(ps) = doc["plugins"].as_array_mut() {
            for p in ps.iter_mut().filter(|p| p["type"] == "rdma-host-device") {
                p["devcie"] = json!("eth9");
            }
        } else {
            doc["devcie"] = json!("eth9");
        }
        let (ok, out) = validate(&doc);
        assert!(!ok, "{label} with a typo was accepted:\n{out}");
        assert!(out.contains("rejected with code 2"), "{label}: {out}");
    }
}

/// Issue 48: `validate FILE` reads what an operator holds, as shipped: each YAML file of conf/
/// that holds a NAD or a ConfigMap with node.json, whole (its other kinds passed over), one
/// line per such document, each ok.
#[test]
fn every_shipped_manifest_is_validated_as_it_is() {
    let mut seen = 0;
    for f in files_under(&conf_dir())
        .into_iter()
        .filter(|f| ext(f) == "yaml")
    {
        let docs = yaml::parse_all(&fs::read_to_string(&f).unwrap()).unwrap();
        let ours = docs
            .iter()
            .filter(|d| {
                d["kind"] == "NetworkAttachmentDefinition"
                    || (d["kind"] == "ConfigMap" && d["data"]["node.json"].is_string())
            })
            .count();
        if ours == 0 {
            continue;
        }
        seen += ours;
        let out = Command::new(AGENT)
            .arg("validate")
            .arg(&f)
            .env_remove("CNI_COMMAND")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {text}", rel(&f));
        assert_eq!(
            text.lines().filter(|l| l.contains(": ok (")).count(),
            ours,
            "{}: {text}",
            rel(&f)
        );
    }
    assert!(seen >= 5, "the NADs and the DaemonSet's node.json: {seen}");
}

/// `validate` says where each shipped NAD's NIC comes from as ADD would take it: a NAD with
/// `draRequest` from the pod's claim, never "deviceID must come from Multus", which it does
/// not need.
#[test]
fn validate_names_where_each_shipped_nads_nic_comes_from() {
    let mut by_claim = 0;
    for f in files_under(&conf_dir())
        .into_iter()
        .filter(|f| ext(f) == "yaml")
    {
        let docs = yaml::parse_all(&fs::read_to_string(&f).unwrap()).unwrap();
        let out = Command::new(AGENT)
            .arg("validate")
            .arg(&f)
            .env_remove("CNI_COMMAND")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for d in docs
            .iter()
            .filter(|d| d["kind"] == "NetworkAttachmentDefinition")
        {
            let name = d["metadata"]["name"].as_str().unwrap();
            let conf: Value = serde_json::from_str(d["spec"]["config"].as_str().unwrap()).unwrap();
            let line = text
                .lines()
                .find(|l| l.contains(&format!(" NetworkAttachmentDefinition/{name} ")))
                .unwrap_or_else(|| panic!("{}: no line for {name}: {text}", rel(&f)));
            if let Some(r) = conf["draRequest"].as_str() {
                by_claim += 1;
                assert!(
                    line.contains(&format!("draRequest {r:?}")) && !line.contains("must come from"),
                    "{line}"
                );
            } else if SELECTOR_KEYS
                .iter()
                .chain(&["draExtendedResource"])
                .all(|k| conf.get(k).is_none())
            {
                assert!(line.contains("Multus"), "{line}");
            }
        }
    }
    assert!(
        by_claim >= 8,
        "conf/k8s/dra-claims.yaml's rails: {by_claim}"
    );
}

/// A typo in a shipped YAML manifest is rejected with the spec's code 2, naming the line of
/// the config that holds it and the key; a typo in the DaemonSet's node.json too.
#[test]
fn a_typo_in_a_yaml_manifest_is_rejected_naming_its_line_and_key() {
    let dir = common::TempDir::new("validate-yaml");
    let nad = conf_dir().join("multus/rdma-nic-whereabouts.yaml");
    let text = fs::read_to_string(&nad).unwrap();
    let line = text
        .lines()
        .position(|l| l.trim_start().starts_with("config:"))
        .expect("a config: line")
        + 1;
    let typo = text.replacen(
        "\"type\": \"rdma-host-device\",",
        "\"type\": \"rdma-host-device\", \"devcie\": \"eth9\",",
        1,
    );
    assert_ne!(typo, text, "the NAD's config names its type as expected");
    let ds = fs::read_to_string(conf_dir().join("k8s/daemonset.yaml")).unwrap();
    let ds_typo = ds.replacen(
        "  node.json: |\n    {\n",
        "  node.json: |\n    {\n      \"stateDri\": \"/x\",\n",
        1,
    );
    assert_ne!(ds_typo, ds, "the DaemonSet's node.json opens as expected");
    for (name, body, want) in [
        (
            "nad.yaml",
            typo,
            format!("nad.yaml:{line} NetworkAttachmentDefinition/"),
        ),
        (
            "ds.yaml",
            ds_typo,
            "ConfigMap/rdma-host-device-install data.node.json: rejected".to_owned(),
        ),
    ] {
        let p = dir.path().join(name);
        fs::write(&p, body).unwrap();
        let out = Command::new(AGENT)
            .arg("validate")
            .arg(&p)
            .env_remove("CNI_COMMAND")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{name}: {text}");
        assert!(text.contains(&want), "{name}: {text}");
        let key = if name == "nad.yaml" {
            "devcie"
        } else {
            "stateDri"
        };
        assert!(text.contains(key), "{name}: {text}");
    }
}

#[test]
fn nad_names_match_their_cni_network_names() {
    for (label, d) in cni_documents() {
        if d["kind"] != "NetworkAttachmentDefinition" {
            continue;
        }
        let c: Value = serde_json::from_str(d["spec"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(
            c["name"], d["metadata"]["name"],
            "{label}: keep the CNI network name equal to the NAD name (logs and state records use it)"
        );
        assert_eq!(c["type"], "rdma-host-device", "{label}");
    }
}

#[test]
fn the_deviceid_nad_names_a_device_plugin_resource() {
    let docs = cni_documents();
    let (label, d) = docs
        .iter()
        .find(|(_, d)| d["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"].is_string())
        .expect("a NAD with a k8s.v1.cni.cncf.io/resourceName annotation");
    let c: Value = serde_json::from_str(d["spec"]["config"].as_str().unwrap()).unwrap();
    for k in rdma_host_device::cni::netconf::SELECTOR_KEYS
        .iter()
        .filter(|k| **k != "runtimeConfig")
    {
        assert!(
            c.get(k).is_none(),
            "{label}: the device plugin picks the NIC; drop {k}"
        );
    }
}

#[test]
fn daemonset_configmap_carries_the_install_script_verbatim() {
    let script = fs::read_to_string(Path::new(ROOT).join("deploy/install.sh")).unwrap();
    let docs = documents();
    let cm = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ConfigMap")
        .map(|(_, d)| d)
        .expect("a ConfigMap in conf/");
    assert_eq!(
        cm["data"]["install.sh"].as_str(),
        Some(script.as_str()),
        "the ConfigMap's install.sh differs from deploy/install.sh: copy it over"
    );
    let ds = docs
        .iter()
        .find(|(_, d)| d["kind"] == "DaemonSet")
        .map(|(_, d)| d)
        .expect("a DaemonSet in conf/");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(
        spec["hostNetwork"], true,
        "inspect must see the host's NICs"
    );
    let init = &spec["initContainers"][0];
    assert!(
        init["command"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "/install/install.sh"),
        "the init container runs the ConfigMap's script"
    );
    let vols = spec["volumes"].as_array().unwrap();
    assert!(
        vols.iter().any(|v| v["hostPath"]["path"] == "/opt/cni/bin"),
        "/opt/cni/bin is mounted from the host"
    );
    assert!(
        vols.iter()
            .any(|v| v["configMap"]["name"] == cm["metadata"]["name"]),
        "the DaemonSet mounts the ConfigMap"
    );
}

/// The device plugin runs as the DaemonSet's container with what it needs and nothing more:
/// the kubelet's device-plugins directory, Multus' devinfo directory, the CDI directory it
/// keeps the spec in, the state dir, the node configuration, the node's /dev read-only at
/// /host/dev (stat only; not /dev/infiniband, which devtmpfs removes when it empties, leaving a
/// mount of it stale) and the uppers watcher's socket directory read-only, and no privilege.
#[test]
fn daemonset_runs_the_device_plugin_unprivileged_beside_the_kubelet() {
    let docs = documents();
    let ds = docs
        .iter()
        .find(|(_, d)| d["kind"] == "DaemonSet")
        .map(|(_, d)| d)
        .expect("a DaemonSet in conf/");
    let spec = &ds["spec"]["template"]["spec"];
    let c = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "device-plugin")
        .expect("a device-plugin container");
    assert_eq!(
        c["command"],
        serde_json::json!([
            "/usr/local/bin/rdma-host-device-agent",
            "device-plugin",
            "--cdi-spec",
            "/var/run/cdi/rdma-host-device.json",
            "--dev",
            "/host/dev",
            "--node-dev",
            "/dev"
        ])
    );
    assert_ne!(c["securityContext"]["privileged"], true);
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    let host_path = |vol: &str| {
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == vol)
            .and_then(|v| v["hostPath"]["path"].as_str())
            .map(str::to_owned)
    };
    let mounts: Vec<(String, Option<String>, bool)> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap().to_owned(),
                host_path(m["name"].as_str().unwrap()),
                m["readOnly"] == true,
            )
        })
        .collect();
    for (path, ro) in [
        ("/var/lib/kubelet/device-plugins", false),
        ("/var/run/k8s.cni.cncf.io/devinfo", false),
        ("/var/lib/cni/rdma-host-device", true),
        ("/etc/rdma-host-device", true),
        ("/var/run/cdi", false),
        ("/run/rdma-host-device", true),
        // The pods' namespaces, where the health judge looks at a NIC in a pod.
        ("/run/netns", true),
    ] {
        assert!(
            mounts.contains(&(path.to_owned(), Some(path.to_owned()), ro)),
            "{path} from the host (read-only: {ro}): {mounts:?}"
        );
    }
    assert!(
        mounts.contains(&("/host/dev".to_owned(), Some("/dev".to_owned()), true)),
        "the node's /dev at /host/dev, read-only: {mounts:?}"
    );
    assert_eq!(mounts.len(), 8, "nothing more: {mounts:?}");
    // setns(2) into those namespaces, and no other capability.
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        serde_json::json!(["SYS_ADMIN"])
    );
    assert_eq!(spec["hostNetwork"], true, "it must see the host's NICs");
}

/// The NRI plugin runs unprivileged with the runtime's NRI socket directory (not the socket: a
/// restarted runtime's new socket must be seen), the node's /dev read-only at /host/dev (it
/// stats the uverbs nodes) and the node configuration (memlock) read-only, and nothing more.
#[test]
fn daemonset_runs_the_nri_plugin_unprivileged_on_the_runtimes_nri_socket() {
    let docs = documents();
    let ds = docs
        .iter()
        .find(|(_, d)| d["kind"] == "DaemonSet")
        .map(|(_, d)| d)
        .expect("a DaemonSet in conf/");
    let spec = &ds["spec"]["template"]["spec"];
    let c = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["command"][1] == "nri")
        .expect("a container running nri");
    assert_eq!(
        c["command"],
        serde_json::json!([
            "/usr/local/bin/rdma-host-device-agent",
            "nri",
            "--socket",
            rdma_host_device_agent::nri::DEFAULT_SOCKET,
            "--dev",
            "/host/dev"
        ])
    );
    assert_ne!(c["securityContext"]["privileged"], true);
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    let mounts: Vec<(String, Option<String>, bool)> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let host = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .and_then(|v| v["hostPath"]["path"].as_str())
                .map(str::to_owned);
            (
                m["mountPath"].as_str().unwrap().to_owned(),
                host,
                m["readOnly"] == true,
            )
        })
        .collect();
    let socket_dir = Path::new(rdma_host_device_agent::nri::DEFAULT_SOCKET)
        .parent()
        .unwrap()
        .to_str()
        .unwrap();
    for (path, ro) in [(socket_dir, false), ("/etc/rdma-host-device", true)] {
        assert!(
            mounts.contains(&(path.to_owned(), Some(path.to_owned()), ro)),
            "{path} from the host (read-only: {ro}): {mounts:?}"
        );
    }
    assert!(
        mounts.contains(&("/host/dev".to_owned(), Some("/dev".to_owned()), true)),
        "the node's /dev at /host/dev, read-only: {mounts:?}"
    );
    assert_eq!(mounts.len(), 3, "nothing more: {mounts:?}");
}

/// The uppers watcher runs where it sees what the scan it saves would see: the host's link
/// notifications (hostNetwork), every process's namespace (hostPID) and /run/netns, and it
/// listens where the CNI binary on the host looks by default.
#[test]
fn daemonset_runs_the_uppers_watcher_where_add_looks_for_it() {
    let docs = documents();
    let ds = docs
        .iter()
        .find(|(_, d)| d["kind"] == "DaemonSet")
        .map(|(_, d)| d)
        .expect("a DaemonSet in conf/");
    let spec = &ds["spec"]["template"]["spec"];
    let c = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["command"][1] == "uppers-watch")
        .expect("a container running uppers-watch");
    assert_eq!(
        c["command"][3],
        rdma_host_device_core::uppers::DEFAULT_SOCKET,
        "{c}"
    );
    let mounted = |path: &str| {
        c["volumeMounts"].as_array().unwrap().iter().any(|m| {
            m["mountPath"] == path
                && spec["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["name"] == m["name"] && v["hostPath"]["path"] == path)
        })
    };
    assert!(
        mounted("/run/rdma-host-device") && mounted("/run/netns"),
        "{c}"
    );
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["hostPID"], true);
    // With exactly the capabilities the container is given (a root process's effective set is
    // its bounding set after exec), the watcher starts and answers: without NET_BROADCAST the
    // kernel refuses it the notifications of every namespace, and the shipped container
    // crash-looped (found by the two-node group's rolling update).
    if !common::root_for("the uppers watcher under the container's capabilities") {
        return;
    }
    let caps: Vec<String> = c["securityContext"]["capabilities"]["add"]
        .as_array()
        .expect("capabilities.add")
        .iter()
        .map(|v| format!("+{}", v.as_str().unwrap_or_default().to_lowercase()))
        .collect();
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        json!(["ALL"]),
        "{c}"
    );
    let dir = std::env::temp_dir().join(format!("rhd-uw-caps-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("uppers.sock");
    let mut child = Command::new("setpriv")
        .arg(format!("--bounding-set=-all,{}", caps.join(",")))
        .args([AGENT, "uppers-watch", "--socket"])
        .arg(&sock)
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv runs");
    let mut answered = false;
    for _ in 0..100 {
        if sock.exists() {
            answered = std::os::unix::net::UnixStream::connect(&sock).is_ok();
            break;
        }
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let _ = fs::remove_dir_all(&dir);
    assert!(
        answered,
        "the uppers watcher with {caps:?} did not answer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn nccl_pod_uses_a_network_conf_defines_and_its_interface() {
    let docs = documents();
    let pod = docs
        .iter()
        .find(|(f, d)| f.ends_with("k8s/pod-nccl.yaml") && d["kind"] == "Pod")
        .map(|(_, d)| d)
        .expect("a Pod in conf/k8s/pod-nccl.yaml");
    let nets: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .expect("networks annotation"),
    )
    .expect("the networks annotation is JSON");
    let net = &nets[0];
    let nad_names: Vec<&str> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "NetworkAttachmentDefinition")
        .filter_map(|(_, d)| d["metadata"]["name"].as_str())
        .collect();
    assert!(
        nad_names.contains(&net["name"].as_str().unwrap()),
        "pod asks for {} but conf/ defines {nad_names:?}",
        net["name"]
    );
    let env: Vec<(String, String)> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("pod env lacks {k}"))
    };
    assert_eq!(
        get("NCCL_SOCKET_IFNAME").trim_start_matches('='),
        net["interface"].as_str().unwrap(),
        "NCCL_SOCKET_IFNAME must be the attached interface"
    );
    // Its NIC comes from our device plugin: the resource it requests is a pool of the
    // DaemonSet's node configuration, the network it attaches names that resource (Multus then
    // passes the allocated NIC as deviceID).
    let c = &pod["spec"]["containers"][0];
    let limits = c["resources"]["limits"]
        .as_object()
        .expect("resource limits");
    let cm = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ConfigMap")
        .map(|(_, d)| d)
        .expect("the DaemonSet's ConfigMap");
    let node: Value = serde_json::from_str(cm["data"]["node.json"].as_str().unwrap()).unwrap();
    let pools: Vec<rdma_host_device_core::node::Pool> =
        serde_json::from_value(node["devicePlugin"]["pools"].clone())
            .expect("the DaemonSet's node.json has devicePlugin pools");
    let pool = pools
        .iter()
        .find(|p| limits.contains_key(&p.resource_name))
        .unwrap_or_else(|| panic!("the pod requests none of the pools {pools:?}: {limits:?}"));
    let nad = docs
        .iter()
        .find(|(_, d)| {
            d["kind"] == "NetworkAttachmentDefinition" && d["metadata"]["name"] == net["name"]
        })
        .map(|(_, d)| d)
        .unwrap();
    assert_eq!(
        nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"],
        pool.resource_name.as_str(),
        "the pod's network must name the resource it requests"
    );
    // The same pod on a node whose DRA driver serves the resource (issue 38 item 3): the
    // DeviceClass names it as its extendedResourceName, and the same NAD finds the NIC of the
    // scheduler's claim when no deviceID came.
    let nad_conf: Value =
        serde_json::from_str(nad["spec"]["config"].as_str().expect("the NAD's config")).unwrap();
    assert_eq!(
        nad_conf["draExtendedResource"],
        pool.resource_name.as_str(),
        "the pod's network finds the NIC on a DRA node too"
    );
    let class = docs
        .iter()
        .find(|(f, d)| f.ends_with("k8s/dra.yaml") && d["kind"] == "DeviceClass")
        .map(|(_, d)| d)
        .expect("conf/k8s/dra.yaml's DeviceClass");
    assert_eq!(
        class["spec"]["extendedResourceName"],
        pool.resource_name.as_str(),
        "the DeviceClass serves the pod's resource on DRA nodes"
    );
    // NCCL_IB_HCA and NCCL_IB_GID_INDEX come from CDI on both paths (issue 38 item 2): the
    // device plugin's per-NIC env (devicePlugin.nicEnv) and the claim's (dra.deviceMetadata),
    // both on in the DaemonSet's node.json. The pod neither sets them nor reads a device
    // plugin's variable (empty on a DRA node).
    for k in ["NCCL_IB_HCA", "NCCL_IB_GID_INDEX"] {
        assert!(
            env.iter().all(|(n, _)| n != k),
            "{k} comes from the node's CDI env, not the pod spec"
        );
    }
    let nic_env: rdma_host_device_core::node::NicEnvConfig =
        serde_json::from_value(node["devicePlugin"]["nicEnv"].clone())
            .expect("the DaemonSet's node.json has devicePlugin.nicEnv");
    assert!(nic_env.place().is_some(), "devicePlugin.nicEnv is enabled");
    assert!(
        node["dra"]["deviceMetadata"].is_object(),
        "the DaemonSet's node.json has dra.deviceMetadata"
    );
    let (_, rdma_var) = rdma_host_device_agent::device_plugin::allocate::env_names(pool);
    let script = c["command"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_str()
        .unwrap();
    assert!(
        !script.contains(&rdma_var),
        "the entrypoint reads {rdma_var}, which a DRA node does not set: {script}"
    );
    assert!(
        script.contains("$NCCL_IB_HCA") && script.contains("$NCCL_IB_GID_INDEX"),
        "the entrypoint shows the env both paths set: {script}"
    );
}

// ---------------------------------------------------------------- the install script

fn install(src: &Path, bin_dir: &Path, host_root: &str) -> std::process::Output {
    Command::new("sh")
        .arg(Path::new(ROOT).join("deploy/install.sh"))
        .env("SRC", src)
        .env("CNI_BIN_DIR", bin_dir)
        .env("HOST_ROOT", host_root)
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap()
}

/// The binary a release would ship: dist/rdma-host-device when scripts/release.sh made one (with
/// the agent beside it, which install.sh runs), else the one cargo built for this test.
fn release_binary() -> PathBuf {
    let dist = Path::new(ROOT).join("dist/rdma-host-device");
    if dist.is_file() && dist.with_file_name("rdma-host-device-agent").is_file() {
        dist
    } else {
        PathBuf::from(PLUGIN)
    }
}

#[test]
fn install_script_installs_atomically_and_idempotently() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("install-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let bin_dir = dir.join("opt/cni/bin");
    let src = release_binary();

    // HOST_ROOT empty: no chroot (this is how it runs in a container without /host).
    let o = install(&src, &bin_dir, "");
    assert!(o.status.success(), "install failed:\n{}", output_text(&o));
    let dest = bin_dir.join("rdma-host-device");
    assert_eq!(
        fs::read(&dest).unwrap(),
        fs::read(&src).unwrap(),
        "copied bytes differ"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o755
    );
    let text = output_text(&o);
    assert!(text.contains("installed "), "{text}");
    assert!(
        text.contains("RDMA"),
        "the node report (inspect) is missing:\n{text}"
    );
    assert!(
        files_under(&bin_dir).len() == 1,
        "temporary files left behind: {:?}",
        files_under(&bin_dir)
    );

    // Again: nothing to do.
    let o = install(&src, &bin_dir, "");
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("already this build"),
        "{}",
        output_text(&o)
    );

    // A different old binary is replaced.
    fs::write(&dest, b"#!/bin/sh\necho old\n").unwrap();
    let o = install(&src, &bin_dir, "");
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(fs::read(&dest).unwrap(), fs::read(&src).unwrap());

    // The installed plugin answers the CNI VERSION verb as a runtime calls it.
    let out = common::output_with_stdin(
        Command::new(&dest).env("CNI_COMMAND", "VERSION"),
        br#"{"cniVersion":"1.0.0"}"#,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("1.1.0"))
    );

    // A missing source fails and leaves the installed plugin alone.
    let o = install(&dir.join("nope"), &bin_dir, "");
    assert!(!o.status.success());
    assert_eq!(fs::read(&dest).unwrap(), fs::read(&src).unwrap());

    // A checksum mismatch is refused before anything is copied.
    let o = Command::new("sh")
        .arg(Path::new(ROOT).join("deploy/install.sh"))
        .env("SRC", &src)
        .env("CNI_BIN_DIR", dir.join("other"))
        .env("HOST_ROOT", "")
        .env("SHA256", "0".repeat(64))
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", output_text(&o));
    assert!(!dir.join("other/rdma-host-device").exists());
    let _ = fs::remove_dir_all(&dir);
}

/// With HOST_ROOT the installed copy runs under chroot, with the node's own libc: here the node
/// is this machine itself (HOST_ROOT=/, CNI_BIN_DIR under it).
#[test]
fn install_script_runs_the_plugin_with_the_nodes_libc() {
    if !common::root_for("the install script's chroot check") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("install-chroot-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let o = install(&release_binary(), &dir, "/");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("runs with the node's libc: rdma-host-device"),
        "{text}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn install_script_installs_a_valid_node_configuration_and_refuses_a_broken_one() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("install-node-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let bin_dir = dir.join("opt/cni/bin");
    let conf_dir = dir.join("etc/rdma-host-device");
    let run = |node: &str| {
        let src = dir.join("node-src.json");
        fs::write(&src, node).unwrap();
        Command::new("sh")
            .arg(Path::new(ROOT).join("deploy/install.sh"))
            .env("SRC", release_binary())
            .env("CNI_BIN_DIR", &bin_dir)
            .env("HOST_ROOT", "")
            .env("NODE_CONFIG", &src)
            .env("NODE_CONFIG_DIR", &conf_dir)
            .env_remove("CNI_COMMAND")
            .output()
            .unwrap()
    };
    // The DaemonSet's own ConfigMap node.json is what a first install puts in place.
    let cm = fs::read_to_string(Path::new(ROOT).join("conf/k8s/daemonset.yaml")).unwrap();
    let start = cm
        .find("  node.json: |\n")
        .expect("the ConfigMap carries node.json")
        + 15;
    let body: String = cm[start..]
        .lines()
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    let o = run(&body);
    assert!(o.status.success(), "{o:?}");
    let installed = conf_dir.join("node.json");
    assert_eq!(fs::read_to_string(&installed).unwrap(), body);
    // A broken one is refused and the installed one stays.
    let o = run(r#"{"stateDir": "relative", "typo": 1}"#);
    assert!(
        !o.status.success(),
        "a broken node configuration was installed"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a valid node configuration"));
    assert_eq!(fs::read_to_string(&installed).unwrap(), body);
    assert_eq!(
        files_under(&conf_dir),
        vec![installed],
        "temporary files left"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// Issue 36: the installer makes what it installs with the modes it names whatever umask it is
/// started with (the plugin 0755, the node configuration 0644, the directories it makes
/// 0755), and refuses, loudly and without installing anything, when what it was told to
/// install or run is not there: a NODE_CONFIG that does not exist (it was skipped in silence,
/// the install "succeeding" with the node's old configuration or none), an AGENT that does not.
#[test]
fn install_script_makes_what_it_installs_with_its_modes_and_refuses_what_is_missing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("install-modes-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let node = dir.join("node-src.json");
    fs::write(&node, "{}\n").unwrap();
    // A source as a careless build leaves it: writable by anyone.
    let src = dir.join("src/rdma-host-device");
    fs::create_dir_all(src.parent().unwrap()).unwrap();
    fs::copy(release_binary(), &src).unwrap();
    fs::copy(
        release_binary().with_file_name("rdma-host-device-agent"),
        src.with_file_name("rdma-host-device-agent"),
    )
    .unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(&node, fs::Permissions::from_mode(0o666)).unwrap();
    let mode = |p: &Path| {
        fs::symlink_metadata(p)
            .map(|m| format!("{:04o}", m.permissions().mode() & 0o7777))
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let run = |mask: u32, top: &Path, env: &[(&str, &std::ffi::OsStr)]| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("umask {mask:03o}; exec sh \"$0\""))
            .arg(Path::new(ROOT).join("deploy/install.sh"))
            .env("SRC", &src)
            .env("CNI_BIN_DIR", top.join("opt/cni/bin"))
            .env("HOST_ROOT", "")
            .env("NODE_CONFIG", &node)
            .env("NODE_CONFIG_DIR", top.join("etc/rdma-host-device"))
            .env_remove("CNI_COMMAND")
            .env_remove("RDMA_HOST_DEVICE_NODE_CONFIG");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    for mask in [0o000, 0o077] {
        let top = dir.join(format!("node-{mask:03o}"));
        let o = run(mask, &top, &[]);
        assert!(o.status.success(), "{}", output_text(&o));
        assert_eq!(
            [
                mode_of_all(&mode, &top, "opt/cni/bin"),
                vec![mode(&top.join("opt/cni/bin/rdma-host-device"))],
                mode_of_all(&mode, &top, "etc/rdma-host-device"),
                vec![mode(&top.join("etc/rdma-host-device/node.json"))],
            ],
            [
                vec![Ok("0755".to_owned()); 3],
                vec![Ok("0755".to_owned())],
                vec![Ok("0755".to_owned()); 2],
                vec![Ok("0644".to_owned())]
            ],
            "umask {mask:03o}: the plugin's directories and the plugin, the node configuration's \
             directories and the node configuration\n{}",
            output_text(&o)
        );
    }
    // Told to install a node configuration that is not there: refused, nothing installed.
    let top = dir.join("node-missing-config");
    let missing = dir.join("no-such-node.json");
    let o = run(0o022, &top, &[("NODE_CONFIG", missing.as_os_str())]);
    let text = output_text(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains(&format!("NODE_CONFIG={} does not exist", missing.display())),
        "{text}"
    );
    assert!(!top.join("opt/cni/bin/rdma-host-device").exists(), "{text}");
    // Told to run an agent that is not there: refused before anything is installed.
    let top = dir.join("node-missing-agent");
    let agent = dir.join("no-such-agent");
    let o = run(0o022, &top, &[("AGENT", agent.as_os_str())]);
    let text = output_text(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains(&format!("AGENT={} (the node agent", agent.display())),
        "{text}"
    );
    assert!(!top.join("opt/cni/bin/rdma-host-device").exists(), "{text}");
    // The source itself missing: refused, saying so.
    let o = Command::new("sh")
        .arg(Path::new(ROOT).join("deploy/install.sh"))
        .env("SRC", dir.join("no-such-plugin"))
        .env("CNI_BIN_DIR", dir.join("node-missing-src/opt/cni/bin"))
        .env("HOST_ROOT", "")
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(
        !o.status.success() && text.contains("does not exist or is not a file: nothing to install"),
        "{text}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// The modes of `rel`'s components under `top`, outermost first.
fn mode_of_all(
    mode: &dyn Fn(&Path) -> Result<String, String>,
    top: &Path,
    rel: &str,
) -> Vec<Result<String, String>> {
    let mut at = top.to_path_buf();
    rel.split('/')
        .map(|c| {
            at.push(c);
            mode(&at)
        })
        .collect()
}

/// The install container writes the CDI spec with the node configuration's cdiHook, the one
/// place the hook's path comes from, and refuses (failing the install, the spec left as it
/// was) a hook that does not exist under HOST_ROOT: a spec naming it would make the runtime
/// fail every container given a CDI name.
#[test]
fn install_script_writes_the_cdi_spec_with_the_nodes_hook_and_refuses_one_not_on_the_node() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("install-cdi-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("var/run/cdi/rdma-host-device.json");
    let run = |hook: &str| {
        let src = dir.join("node-src.json");
        fs::write(&src, json!({ "cdiHook": hook }).to_string()).unwrap();
        Command::new("sh")
            .arg(Path::new(ROOT).join("deploy/install.sh"))
            .env("SRC", release_binary())
            .env("CNI_BIN_DIR", dir.join("opt/cni/bin"))
            // Not a root file system (no bin/): the libc check is skipped, the hook's is not.
            .env("HOST_ROOT", &dir)
            .env("NODE_CONFIG", &src)
            .env("NODE_CONFIG_DIR", dir.join("etc/rdma-host-device"))
            .env("CDI_SPEC", &spec)
            .env_remove("CNI_COMMAND")
            .env_remove("RDMA_HOST_DEVICE_NODE_CONFIG")
            .output()
            .unwrap()
    };
    let o = run("/opt/cni/bin/rdma-host-device");
    assert!(o.status.success(), "{}", output_text(&o));
    let written: Value = serde_json::from_slice(&fs::read(&spec).unwrap()).unwrap();
    assert_eq!(
        written["containerEdits"]["hooks"][0]["path"],
        "/opt/cni/bin/rdma-host-device"
    );
    assert!(
        output_text(&o).contains("first process only"),
        "the install log says what the hook reaches: {}",
        output_text(&o)
    );
    // A node whose CNI binaries live elsewhere, the configuration naming a path that is not
    // there: the install fails, saying which key to change, and the spec stays as it was.
    let before = fs::read(&spec).unwrap();
    let o = run("/home/kubernetes/bin/rdma-host-device");
    let text = output_text(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("cdiHook /home/kubernetes/bin/rdma-host-device does not exist on the node")
            && text.contains("cannot write the CDI spec"),
        "{text}"
    );
    assert_eq!(fs::read(&spec).unwrap(), before);
    let _ = fs::remove_dir_all(&dir);
}

/// The node's tools read as strictly as ADD: `node-config` and `validate` given a FIFO answer
/// at once (the old ones blocked in open() until a writer came: a watchdog opens the FIFO after
/// 3 s so they fail on time rather than hang the suite), `/dev/zero` is refused rather than
/// read for ever, and a config ADD refuses as too large is rejected by `validate` too.
#[test]
fn the_node_tools_refuse_what_is_not_a_regular_file_at_once_and_judge_size_as_add() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("rhd-node-tools-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, fifo) = (done.clone(), fifo.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(3));
                let _ = fs::OpenOptions::new().read(true).write(true).open(&fifo);
            }
        })
    };
    let f = fifo.to_str().unwrap();
    for (args, what) in [
        (vec!["node-config", f], "FIFO"),
        (vec!["validate", f], "FIFO"),
        (vec!["validate", "/dev/zero"], "a device"),
        (vec!["node-config", "/dev/zero"], "a device"),
    ] {
        let t = Instant::now();
        let out = Command::new(AGENT)
            .args(&args)
            .env_remove("CNI_COMMAND")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let took = t.elapsed();
        let text = output_text(&out);
        assert!(
            took < Duration::from_secs(1),
            "{args:?} took {took:?}: {text}"
        );
        assert!(!out.status.success(), "{args:?}: {text}");
        assert!(text.contains(what), "{args:?}: {text}");
    }
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    // 1 MiB of whitespace inside a config: ADD refuses these bytes (over MAX_CONFIG_LEN), so
    // validate must not say ok.
    let conf = r#"{"cniVersion":"1.0.0","name":"a","type":"rdma-host-device","device":"eth1"}"#;
    let padded = conf.replacen('{', &format!("{{{}", " ".repeat(1 << 20)), 1);
    let p = dir.join("padded.conf");
    fs::write(&p, &padded).unwrap();
    let out = Command::new(AGENT)
        .args(["validate", p.to_str().unwrap()])
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("rejected"), "{text}");
    let _ = fs::remove_dir_all(&dir);
}

/// The DRA driver's RBAC grants what its client calls (crates/agent/src/kube/) and nothing
/// more: its slices' CRUD, a claim's get and its status update (with 1.36's per-driver check on
/// `resourceclaims/driver`, for our driver only), no other resource; the DeviceClass
/// selects our driver; the admission policy holds the agent's ServiceAccount (the one the role
/// is bound to) to slices of our driver on its own node.
#[test]
fn dra_rbac_grants_only_what_the_driver_uses_and_the_policy_binds_it_to_its_node() {
    let docs: Vec<Value> = documents()
        .into_iter()
        .filter(|(f, _)| f.ends_with("k8s/dra.yaml"))
        .map(|(_, d)| d)
        .collect();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("conf/k8s/dra.yaml has no {k}"))
    };
    let driver = rdma_host_device_agent::dra::DRIVER;
    let mut rules: Vec<(String, String, Vec<String>)> = kind("ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let verbs: Vec<String> = r["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            let groups = r["apiGroups"].as_array().unwrap().clone();
            let res = r["resources"].as_array().unwrap().clone();
            groups.into_iter().flat_map(move |g| {
                let verbs = verbs.clone();
                res.clone().into_iter().map(move |x| {
                    (
                        g.as_str().unwrap().to_owned(),
                        x.as_str().unwrap().to_owned(),
                        verbs.clone(),
                    )
                })
            })
        })
        .collect();
    rules.sort();
    let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        [
            (
                "resource.k8s.io".into(),
                "resourceclaims".into(),
                v(&["get"])
            ),
            (
                "resource.k8s.io".into(),
                "resourceclaims/driver".into(),
                v(&["associated-node:update"])
            ),
            (
                "resource.k8s.io".into(),
                "resourceclaims/status".into(),
                v(&["update"])
            ),
            (
                "resource.k8s.io".into(),
                "resourceslices".into(),
                v(&["get", "list", "watch", "create", "update", "delete"])
            ),
        ]
    );
    // The claims' status entries (1.36's per-driver check): our driver's, no other's.
    let per_driver: Vec<&Value> = kind("ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"] == json!(["resourceclaims/driver"]))
        .collect();
    assert_eq!(per_driver.len(), 1);
    assert_eq!(per_driver[0]["resourceNames"], json!([driver]));
    for r in kind("ClusterRole")["rules"].as_array().unwrap() {
        if r["resources"] != json!(["resourceclaims/driver"]) {
            assert!(r["resourceNames"].is_null(), "{r}");
        }
    }
    let sa = kind("ServiceAccount");
    let who = format!(
        "system:serviceaccount:{}:{}",
        sa["metadata"]["namespace"].as_str().unwrap(),
        sa["metadata"]["name"].as_str().unwrap()
    );
    let subject = &kind("ClusterRoleBinding")["subjects"][0];
    assert_eq!(subject["name"], sa["metadata"]["name"]);
    assert_eq!(subject["namespace"], sa["metadata"]["namespace"]);
    assert_eq!(
        kind("ClusterRoleBinding")["roleRef"]["name"],
        kind("ClusterRole")["metadata"]["name"]
    );

    let class = kind("DeviceClass");
    assert_eq!(class["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(class["metadata"]["name"], driver);
    assert_eq!(
        class["spec"]["selectors"][0]["cel"]["expression"],
        format!("device.driver == \"{driver}\"")
    );

    let vap = kind("ValidatingAdmissionPolicy");
    let spec = &vap["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["matchConstraints"]["resourceRules"][0]["resources"],
        json!(["resourceslices"])
    );
    assert_eq!(
        spec["matchConstraints"]["resourceRules"][0]["operations"],
        json!(["CREATE", "UPDATE", "DELETE"])
    );
    assert!(
        spec["matchConditions"][0]["expression"]
            .as_str()
            .unwrap()
            .contains(&format!("\"{who}\"")),
        "the policy holds the role's ServiceAccount: {spec}"
    );
    let checks: Vec<&str> = spec["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["expression"].as_str().unwrap())
        .collect();
    assert!(
        checks.iter().any(|c| c.contains(&format!("'{driver}'"))),
        "{checks:?}"
    );
    assert!(
        checks
            .iter()
            .any(|c| c.contains("nodeName") && c.contains("variables.tokenNode")),
        "{checks:?}"
    );
    let binding = kind("ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], vap["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
}

/// conf/k8s/dra-claims.yaml hangs together: its claims ask our DeviceClass (dra.yaml's, named
/// as the driver), each GPU/NIC pair is constrained on the standard PCIe-root attribute, every
/// NAD's `draRequest` is a request of a template, and the pod's networks are those NADs, each
/// naming a request of the template the pod claims.
#[test]
fn dra_claims_ask_our_class_and_each_nad_names_a_request_the_pod_claims() {
    let docs = documents();
    let driver = rdma_host_device_agent::dra::DRIVER;
    let of = |file: &str, kind: &str| of_kind(&docs, file, kind);
    let classes = of("k8s/dra.yaml", "DeviceClass");
    assert!(
        classes.iter().any(|c| c["metadata"]["name"] == driver),
        "dra.yaml has no DeviceClass {driver}"
    );
    let name = |d: &Value| d["metadata"]["name"].as_str().unwrap().to_owned();
    let templates = of("k8s/dra-claims.yaml", "ResourceClaimTemplate");
    assert!(templates.len() >= 2, "{templates:?}");
    let mut ours_of: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for t in &templates {
        let devices = &t["spec"]["spec"]["devices"];
        let mut ours = Vec::new();
        let mut all = Vec::new();
        for r in devices["requests"].as_array().unwrap() {
            let req = r["name"].as_str().unwrap().to_owned();
            all.push(req.clone());
            if r["exactly"]["deviceClassName"] == driver {
                ours.push(req);
            }
        }
        assert!(!ours.is_empty(), "{}: asks nothing of ours", name(t));
        for c in devices["constraints"].as_array().into_iter().flatten() {
            assert_eq!(
                c["matchAttribute"],
                "resource.kubernetes.io/pcieRoot",
                "{}: {c}",
                name(t)
            );
            for r in c["requests"].as_array().unwrap() {
                assert!(
                    all.iter().any(|a| a == r),
                    "{}: constraint names {r}",
                    name(t)
                );
            }
        }
        ours_of.insert(name(t), ours);
    }
    let nads: std::collections::BTreeMap<String, String> =
        of("k8s/dra-claims.yaml", "NetworkAttachmentDefinition")
            .iter()
            .map(|n| {
                let c: Value = serde_json::from_str(n["spec"]["config"].as_str().unwrap()).unwrap();
                let req = c["draRequest"].as_str().expect("a draRequest").to_owned();
                assert!(
                    ours_of.values().flatten().any(|r| *r == req),
                    "{}: draRequest {req} is no template's request",
                    name(n)
                );
                (name(n), req)
            })
            .collect();
    for p in of("k8s/dra-claims.yaml", "Pod") {
        let claims = p["spec"]["resourceClaims"].as_array().unwrap();
        let template = claims[0]["resourceClaimTemplateName"].as_str().unwrap();
        let requests = ours_of
            .get(template)
            .unwrap_or_else(|| panic!("{}: no template {template}", name(&p)));
        let networks = p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .unwrap();
        let mut asked = Vec::new();
        for n in networks.split(',') {
            let nad = n.trim().split('@').next().unwrap();
            let req = nads
                .get(nad)
                .unwrap_or_else(|| panic!("{}: no NAD {nad}", name(&p)));
            assert!(requests.contains(req), "{}: {nad} asks {req}", name(&p));
            asked.push(req.clone());
        }
        asked.sort();
        let mut all = requests.clone();
        all.sort();
        assert_eq!(asked, all, "{}: one network per NIC it claims", name(&p));
        for c in p["spec"]["containers"].as_array().unwrap() {
            assert_eq!(
                c["resources"]["claims"][0]["name"],
                claims[0]["name"],
                "{}",
                name(&p)
            );
        }
    }
}

/// The DRA driver's DaemonSet (conf/k8s/dra.yaml) runs `dra` for its own node with the driver's
/// ServiceAccount, whose token only its container mounts (the pod does not automount it), with
/// no privilege or capability, the kubelet's plugin directories, the stateDir writable (the
/// checkpoint the CNI's draRequest reads) and the node's configuration read-only.
#[test]
fn the_dra_daemonset_runs_the_driver_for_its_node_with_the_token_in_its_container_alone() {
    let docs = documents();
    let of = |kind: &str| {
        docs.iter()
            .find(|(f, d)| f.ends_with("k8s/dra.yaml") && d["kind"] == kind)
            .map(|(_, d)| d.clone())
            .unwrap_or_else(|| panic!("conf/k8s/dra.yaml has no {kind}"))
    };
    let ds = of("DaemonSet");
    let sa = of("ServiceAccount");
    assert_eq!(ds["metadata"]["namespace"], sa["metadata"]["namespace"]);
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["hostNetwork"], true, "it publishes the host's NICs");
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "the token's pod runs the driver alone");
    let c = &containers[0];
    assert_eq!(
        c["command"],
        json!([
            "/usr/local/bin/rdma-host-device-agent",
            "dra",
            "--node-name",
            "$(NODE_NAME)",
            "--cdi-spec",
            "/var/run/cdi/rdma-host-device.json",
            "--dev",
            "/host/dev",
            "--node-dev",
            "/dev"
        ])
    );
    assert_eq!(c["env"][0]["name"], "NODE_NAME");
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    assert_ne!(c["securityContext"]["privileged"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        json!(["SYS_ADMIN"]),
        "setns(2) into the pods holding our NICs, for their health, and nothing more"
    );
    let volume = |name: &str| {
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut mounts: Vec<(String, String, bool)> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let v = volume(m["name"].as_str().unwrap());
            let from = v["hostPath"]["path"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| "projected".to_owned());
            (
                m["mountPath"].as_str().unwrap().to_owned(),
                from,
                m["readOnly"] == true,
            )
        })
        .collect();
    mounts.sort();
    let want = |p: &str, ro: bool| (p.to_owned(), p.to_owned(), ro);
    let mut expected = vec![
        want("/var/lib/kubelet/plugins_registry", false),
        want("/var/lib/kubelet/plugins/rdma-host-device.io", false),
        want("/var/lib/cni/rdma-host-device", false),
        want("/var/run/cdi", false),
        ("/host/dev".to_owned(), "/dev".to_owned(), true),
        want("/etc/rdma-host-device", true),
        want("/run/rdma-host-device", true),
        // The pods' namespaces, where the health judge looks at a NIC in a pod (SYS_ADMIN).
        want("/run/netns", true),
        (
            "/var/run/secrets/kubernetes.io/serviceaccount".to_owned(),
            "projected".to_owned(),
            true,
        ),
    ];
    expected.sort();
    assert_eq!(mounts, expected);
    let token = volume("token");
    let sources = token["projected"]["sources"].as_array().unwrap();
    assert!(
        sources
            .iter()
            .any(|s| s["serviceAccountToken"]["path"] == "token")
    );
    assert!(
        sources
            .iter()
            .any(|s| s["configMap"]["name"] == "kube-root-ca.crt")
    );
}

/// conf/k8s/dra-multus.yaml, the NAD for Multus' DRA mode: it names no NIC and no `draRequest`
/// (the deviceID comes from Multus), its `resourceName` annotation is one a node configuration
/// accepts as `dra.resourceName` (what the driver publishes and Multus matches), and its pod
/// claims a template of dra-claims.yaml asking our DeviceClass and attaches this NAD.
#[test]
fn dra_multus_nad_takes_its_nic_from_multus_by_a_resource_name_the_node_publishes() {
    let docs = documents();
    let driver = rdma_host_device_agent::dra::DRIVER;
    let of = |file: &str, kind: &str| of_kind(&docs, file, kind);
    let nads = of("k8s/dra-multus.yaml", "NetworkAttachmentDefinition");
    assert_eq!(nads.len(), 1, "{nads:?}");
    let nad = &nads[0];
    let rname = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
        .as_str()
        .expect("the NAD's resourceName annotation");
    let c: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    for k in rdma_host_device::cni::netconf::SELECTOR_KEYS
        .iter()
        .chain(&["draRequest"])
        .filter(|k| **k != "runtimeConfig")
    {
        assert!(c.get(k).is_none(), "Multus picks the NIC; drop {k}");
    }
    // The node configuration the file's comment tells the operator to set.
    let dir = std::env::temp_dir().join(format!("rhd-dra-multus-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let node = dir.join("node.json");
    fs::write(&node, json!({"dra": {"resourceName": rname}}).to_string()).unwrap();
    let loaded = rdma_host_device_core::node::Node::load_from(&node);
    fs::remove_dir_all(&dir).ok();
    let dra = loaded
        .and_then(|n| n.dra())
        .unwrap_or_else(|e| panic!("dra.resourceName {rname:?}: {e}"))
        .expect("a dra section");
    assert_eq!(dra.resource_name.as_deref(), Some(rname));

    let templates = of("k8s/dra-claims.yaml", "ResourceClaimTemplate");
    let pods = of("k8s/dra-multus.yaml", "Pod");
    assert_eq!(pods.len(), 1);
    let p = &pods[0];
    let claims = p["spec"]["resourceClaims"].as_array().unwrap();
    let template = claims[0]["resourceClaimTemplateName"]
        .as_str()
        .expect("a claim from a template: Multus sees only those (pod status)");
    let t = templates
        .iter()
        .find(|t| t["metadata"]["name"] == template)
        .unwrap_or_else(|| panic!("no template {template} in dra-claims.yaml"));
    assert!(
        t["spec"]["spec"]["devices"]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["exactly"]["deviceClassName"] == driver),
        "{template} asks nothing of ours"
    );
    let networks = p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap();
    assert_eq!(
        networks.split('@').next(),
        nad["metadata"]["name"].as_str(),
        "the pod attaches the NAD"
    );
    assert_eq!(
        p["spec"]["containers"][0]["resources"]["claims"][0]["name"],
        claims[0]["name"]
    );
}
