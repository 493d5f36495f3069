//! The operator's command line: what a person gets when running the binary by hand
//! (`--version`, `--help`, `inspect`, `validate`). A runtime never gets here: it sets
//! CNI_COMMAND, and main.rs sends those calls to the CNI flows.

use crate::cni::netconf::{NetConf, Selector};
use crate::error::{Code, Error};
use crate::inspect::{self, Color};
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;

const HELP: &str = "\
rdma-host-device: a CNI plugin that moves a host NIC and its RDMA device into a pod.

A container runtime (containerd, CRI-O, Multus) runs it with CNI_COMMAND set and the
network configuration on stdin; install it in /opt/cni/bin and name it as \"type\" in a
network config. By hand:

  rdma-host-device inspect [--json] [--all] [--state-dir DIR] [--color auto|always|never]
      Every NIC of this node with its RDMA device, driver, PCI address, link state, MTU,
      GID table summary and the pod it is attached to; the RDMA netns mode and what it
      means. Run it first when a pod has no RDMA. --json for machines; --all also lists
      virtual links without RDMA; --state-dir to read another state directory
      (default: the node configuration's stateDir, /var/lib/cni/rdma-host-device). Colour only on a terminal (NO_COLOR works).

  rdma-host-device metrics [--listen ADDR] [--state-dir DIR] [--once]
      A Prometheus exporter (runs until killed): /metrics (OpenMetrics text) and /healthz
      on ADDR (default 0.0.0.0:9879; :PORT for every IPv4 address). Per scrape, for every
      attachment in the state directory (default: the node configuration's stateDir), the
      pod interface's netdev counters and its RDMA device's port state, hardware counters,
      port counters, resource counts and QP owners, read inside the pod's netns and labelled
      with the pod (namespace, pod, container_id, interface, network, host_nic, pci_address,
      rdma_device, netns_mode); then every RDMA device still on the host. --once prints one
      scrape and exits.

  rdma-host-device node-config [FILE]
      The node configuration (FILE, or what the plugin reads: $RDMA_HOST_DEVICE_NODE_CONFIG or
      /etc/rdma-host-device/node.json) with its defaults filled in, as JSON; exit 1 and the
      reason if it is invalid. The DaemonSet's installer checks a new one with it.

  rdma-host-device validate FILE|- ...
      Check network configurations as the plugin would on ADD: a .conf, a .conflist (each
      rdma-host-device entry, with the list's name and cniVersion, as libcni passes them),
      or a NetworkAttachmentDefinition as JSON (kubectl get net-attach-def NAME -o json).
      Exits 1 if any is rejected, printing the CNI error code and message.

  rdma-host-device --version   the version and the CNI versions it speaks
  rdma-host-device --help      this text

Node configuration: /etc/rdma-host-device/node.json (or $RDMA_HOST_DEVICE_NODE_CONFIG):
stateDir, logDir, allowedNics, allowedUplinks; see the README. Logs: one line per step with
the container ID, on stderr and in \"logFile\" (a file name in the node's logDir) if set
(rotated at 10 MiB). Error codes: 1-11 are the CNI spec's; 100+ are this plugin's
(100 NIC not found, 101 ambiguous, 102 busy, 107 refused by node policy, 110 no RDMA
device, 111 RDMA netns mode, 112 RDMA device cannot move, 113 GID timeout); see the README.
";

/// Returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    dispatch(&args)
}

fn dispatch(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("--version" | "-V" | "version") => {
            println!("{}", version_line());
            0
        }
        Some("--help" | "-h" | "help") => {
            print!("{HELP}");
            0
        }
        Some("inspect") => match inspect_options(&args[1..]) {
            Ok(opts) => inspect::run(&opts),
            Err(msg) => usage_error(&msg),
        },
        Some("metrics") => match crate::metrics::options(&args[1..]) {
            Ok(opts) => crate::metrics::run(&opts),
            Err(msg) => usage_error(&msg),
        },
        Some("node-config") => node_config(args.get(1).map(String::as_str)),
        Some("validate") => {
            if args.len() < 2 {
                return usage_error("validate needs at least one FILE (or - for stdin)");
            }
            validate_files(&args[1..])
        }
        Some(other) => usage_error(&format!("unknown command {other:?}")),
        None => usage_error("no command"),
    }
}

/// `node-config [FILE]`: the node configuration the plugin would use (FILE, or the one the
/// plugin finds), printed as JSON with the defaults filled in; exit 1 if it is invalid.
fn node_config(file: Option<&str>) -> i32 {
    let node = match file {
        Some(f) => crate::node::Node::load_from(std::path::Path::new(f)),
        None => crate::node::Node::load(),
    };
    match node {
        Ok(n) => {
            println!("{}", n.to_json());
            0
        }
        Err(e) => {
            eprintln!("rdma-host-device: {e}");
            1
        }
    }
}

fn version_line() -> String {
    format!(
        "rdma-host-device {} (CNI {})",
        env!("CARGO_PKG_VERSION"),
        crate::cni::version::supported_list()
    )
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("rdma-host-device: {msg}\n");
    eprint!("{HELP}");
    2
}

fn inspect_options(args: &[String]) -> Result<inspect::Options, String> {
    let mut opts = inspect::Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag {
            "--json" => opts.json = true,
            "--all" | "-a" => opts.all = true,
            "--state-dir" => opts.state_dir = PathBuf::from(value("--state-dir")?),
            "--color" | "--colour" => {
                opts.color = match value("--color")?.as_str() {
                    "auto" => Color::Auto,
                    "always" => Color::Always,
                    "never" => Color::Never,
                    v => return Err(format!("--color {v:?}: use auto, always or never")),
                }
            }
            "--no-color" => opts.color = Color::Never,
            other => return Err(format!("inspect: unknown option {other:?}")),
        }
    }
    if !opts.state_dir.is_absolute() {
        return Err("--state-dir must be an absolute path".into());
    }
    Ok(opts)
}

// ---------------------------------------------------------------- validate

/// One CNI config found in a file, as the plugin would receive it.
#[derive(Debug)]
pub struct Found {
    /// Where in the file: "" for a plain config, "plugins[1]" in a list, "spec.config" ...
    pub place: String,
    pub config: Vec<u8>,
}

/// The configs for this plugin inside `doc` (a .conf, a .conflist, or a
/// NetworkAttachmentDefinition as JSON), each shaped as the plugin receives it. Errors are
/// what a person must fix before any plugin could be called.
pub fn configs_in(doc: &Value) -> Result<Vec<Found>, String> {
    if doc.get("kind").and_then(Value::as_str) == Some("NetworkAttachmentDefinition") {
        let cfg = doc
            .pointer("/spec/config")
            .and_then(Value::as_str)
            .ok_or("NetworkAttachmentDefinition without a spec.config string")?;
        let inner: Value =
            serde_json::from_str(cfg).map_err(|e| format!("spec.config is not valid JSON: {e}"))?;
        let mut found = configs_in(&inner)?;
        for f in &mut found {
            f.place = if f.place.is_empty() {
                "spec.config".into()
            } else {
                format!("spec.config {}", f.place)
            };
        }
        return Ok(found);
    }
    let obj = doc
        .as_object()
        .ok_or("a network configuration is a JSON object")?;
    let Some(plugins) = obj.get("plugins") else {
        return Ok(vec![Found {
            place: String::new(),
            config: serde_json::to_vec(doc).unwrap_or_default(),
        }]);
    };
    let plugins = plugins.as_array().ok_or("\"plugins\" must be a list")?;
    let mut found = Vec::new();
    for (i, p) in plugins.iter().enumerate() {
        if p.get("type").and_then(Value::as_str) != Some("rdma-host-device") {
            continue;
        }
        // libcni's buildOneConfig: the list's name and cniVersion go into each entry.
        let mut one = p.clone();
        if let Some(o) = one.as_object_mut() {
            for k in ["name", "cniVersion"] {
                if let Some(v) = obj.get(k) {
                    o.insert(k.to_owned(), v.clone());
                }
            }
        }
        found.push(Found {
            place: format!("plugins[{i}]"),
            config: serde_json::to_vec(&one).unwrap_or_default(),
        });
    }
    if found.is_empty() {
        return Err("no \"type\": \"rdma-host-device\" entry in \"plugins\"".into());
    }
    Ok(found)
}

/// What `validate` concluded about one config: Ok(summary) or the plugin's own error.
pub fn check_config(raw: &[u8]) -> Result<String, Error> {
    let v: Value = serde_json::from_slice(raw)
        .map_err(|e| Error::new(Code::Decode, format!("not valid JSON: {e}")))?;
    if let Some(t) = v.get("type").and_then(Value::as_str)
        && t != "rdma-host-device"
    {
        return Err(Error::new(
            Code::InvalidConfig,
            format!(
                "\"type\" is {t:?}, not \"rdma-host-device\": this config is for another plugin"
            ),
        ));
    }
    let node = crate::node::Node::load()?;
    let conf = NetConf::parse_strict(raw.to_vec(), &node)?;
    let selector = match &conf.selector {
        Some(Selector::DeviceId(d)) => format!("deviceID {d:?}"),
        Some(s) => s.to_string(),
        None => {
            let capability = v
                .pointer("/capabilities/deviceID")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if capability {
                "no selector: deviceID comes from the runtime (capability) or Multus".to_owned()
            } else {
                "no selector: deviceID must come from Multus (a device plugin's resourceName annotation); ADD fails with code 7 without it".to_owned()
            }
        }
    };
    let mut parts = vec![
        format!("cniVersion {}", conf.cni_version.as_str()),
        selector,
    ];
    if let Some(i) = &conf.ipam_type {
        parts.push(format!("ipam {i}"));
    }
    if let Some(s) = conf.rdma.soft_device {
        parts.push(format!("softDevice {}", format!("{s:?}").to_lowercase()));
    }
    Ok(parts.join(", "))
}

fn validate_files(files: &[String]) -> i32 {
    let mut failed = false;
    for f in files {
        let text = if f == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(f)
        };
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                println!("{f}: cannot read: {e}");
                failed = true;
                continue;
            }
        };
        let doc: Value = match serde_json::from_str(&text) {
            Ok(d) => d,
            Err(e) => {
                println!(
                    "{f}: not JSON ({e}); YAML manifests: kubectl get net-attach-def NAME -o json | rdma-host-device validate -"
                );
                failed = true;
                continue;
            }
        };
        match configs_in(&doc) {
            Err(e) => {
                println!("{f}: {e}");
                failed = true;
            }
            Ok(found) => {
                for c in found {
                    let place = if c.place.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", c.place)
                    };
                    match check_config(&c.config) {
                        Ok(summary) => println!("{f}{place}: ok ({summary})"),
                        Err(e) => {
                            println!(
                                "{f}{place}: rejected with code {}: {}",
                                e.code as u32, e.msg
                            );
                            failed = true;
                        }
                    }
                }
            }
        }
    }
    i32::from(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn inspect_flags() {
        let o = inspect_options(&args(&["--json", "--all", "--state-dir", "/x"])).unwrap();
        assert!(o.json && o.all);
        assert_eq!(o.state_dir, PathBuf::from("/x"));
        let o = inspect_options(&args(&["--state-dir=/y", "--color=never"])).unwrap();
        assert_eq!(o.state_dir, PathBuf::from("/y"));
        assert_eq!(o.color, Color::Never);
        assert!(inspect_options(&args(&["--state-dir"])).is_err());
        assert!(inspect_options(&args(&["--state-dir", "rel"])).is_err());
        assert!(inspect_options(&args(&["--bogus"])).is_err());
        assert!(inspect_options(&args(&["--color", "purple"])).is_err());
    }

    #[test]
    fn unknown_command_is_a_usage_error() {
        assert_eq!(dispatch(&args(&["frobnicate"])), 2);
        assert_eq!(dispatch(&args(&["validate"])), 2);
    }

    #[test]
    fn conflist_entries_get_the_list_name_and_version() {
        let list = json!({"cniVersion": "1.0.0", "name": "rdma", "plugins": [
            {"type": "tuning"},
            {"type": "rdma-host-device", "device": "eth1"}
        ]});
        let found = configs_in(&list).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].place, "plugins[1]");
        let v: Value = serde_json::from_slice(&found[0].config).unwrap();
        assert_eq!(v["name"], "rdma");
        assert_eq!(v["cniVersion"], "1.0.0");
        assert!(check_config(&found[0].config).is_ok());
    }

    #[test]
    fn nad_json_is_unwrapped() {
        let cfg = json!({"cniVersion": "1.0.0", "name": "a", "type": "rdma-host-device",
                         "rdmaDevice": "mlx5_0"});
        let nad = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                         "metadata": {"name": "a"}, "spec": {"config": cfg.to_string()}});
        let found = configs_in(&nad).unwrap();
        assert_eq!(found[0].place, "spec.config");
        assert!(
            check_config(&found[0].config)
                .unwrap()
                .contains("rdmaDevice")
        );
    }

    #[test]
    fn validate_reports_the_plugins_code() {
        let bad = br#"{"cniVersion":"1.0.0","name":"a","type":"rdma-host-device","devcie":"x"}"#;
        assert_eq!(check_config(bad).unwrap_err().code, Code::UnsupportedField);
        let other = br#"{"cniVersion":"1.0.0","name":"a","type":"macvlan"}"#;
        assert_eq!(check_config(other).unwrap_err().code, Code::InvalidConfig);
        let no_sel = br#"{"cniVersion":"1.0.0","name":"a","type":"rdma-host-device"}"#;
        assert!(check_config(no_sel).unwrap().contains("Multus"));
    }

    #[test]
    fn list_without_our_plugin_is_an_error() {
        let list = json!({"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "bridge"}]});
        assert!(configs_in(&list).is_err());
    }
}
