//! `rdma-host-device-agent validate`: what an operator holds before deploying it, run through the
//! checks the plugin and the agent apply: a .conf, a .conflist, NetworkAttachmentDefinitions, a
//! ConfigMap holding node.json, or a List of those, as JSON or YAML (one document or many;
//! other kinds in a manifest are passed over).

pub mod yaml;

use rdma_host_device::cni::netconf::{MAX_CONFIG_LEN, NetConf, NicRequest};
use rdma_host_device_core::error::{Code, Error, Result, invalid_config};
use serde_json::Value;
use std::io::Read;

/// The most of one file (or stdin) `validate` reads: a conflist or a NAD around configs that ADD
/// takes only up to [`MAX_CONFIG_LEN`] each (a NAD's `spec.config` is an escaped string).
const MAX_DOC: u64 = 4 * MAX_CONFIG_LEN as u64;

/// One CNI config found in a file, as the plugin would receive it.
#[derive(Debug)]
pub struct ConfigInFile {
    /// Where in the file: "" for a plain config, "plugins[1]" in a list, "spec.config" ...
    pub place: String,
    pub config: Vec<u8>,
}

/// The configs for this plugin inside `doc` (a .conf, a .conflist, or a
/// NetworkAttachmentDefinition as JSON), each shaped as the plugin receives it. Errors are
/// what a person must fix before any plugin could be called.
pub fn configs_in(doc: &Value) -> Result<Vec<ConfigInFile>> {
    if doc.get("kind").and_then(Value::as_str) == Some("NetworkAttachmentDefinition") {
        let cfg = doc
            .pointer("/spec/config")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                invalid_config("NetworkAttachmentDefinition without a spec.config string")
            })?;
        let inner: Value = serde_json::from_str(cfg)
            .map_err(|e| Error::new(Code::Decode, format!("spec.config is not valid JSON: {e}")))?;
        let mut found = configs_in(&inner)?;
        if let [one] = found.as_mut_slice()
            && one.place.is_empty()
        {
            // Multus hands the delegate spec.config's bytes as they are: judge those (ADD's
            // size bound counts them, whitespace included).
            one.config = cfg.as_bytes().to_vec();
        }
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
        .ok_or_else(|| invalid_config("a network configuration is a JSON object"))?;
    let Some(plugins) = obj.get("plugins") else {
        return Ok(vec![ConfigInFile {
            place: String::new(),
            config: serde_json::to_vec(doc).unwrap_or_default(),
        }]);
    };
    let plugins = plugins
        .as_array()
        .ok_or_else(|| invalid_config("\"plugins\" must be a list"))?;
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
        found.push(ConfigInFile {
            place: format!("plugins[{i}]"),
            config: serde_json::to_vec(&one).unwrap_or_default(),
        });
    }
    if found.is_empty() {
        return Err(invalid_config(
            "no \"type\": \"rdma-host-device\" entry in \"plugins\"",
        ));
    }
    Ok(found)
}

/// What `validate` concluded about one config: Ok(summary) or the plugin's own error.
pub fn check_config(raw: &[u8]) -> Result<String> {
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
    let node = rdma_host_device_core::node::Node::load()?;
    let conf = NetConf::parse_strict(raw.to_vec(), &node)?;
    // As ADD's plan takes it: `draRequest` first, then a selector or a `deviceID`, then
    // `draExtendedResource`.
    let selector = match (&conf.dra_request, &conf.nic, &conf.dra_extended_resource) {
        (Some(r), _, _) => format!(
            "draRequest {r:?}: the NIC our DRA driver prepared for the pod's ResourceClaim under that request"
        ),
        (None, Some(NicRequest::DeviceId(d)), _) => format!("deviceID {d:?}"),
        (None, Some(s), _) => s.to_string(),
        (None, None, Some(x)) => format!(
            "draExtendedResource {x:?}: deviceID from Multus (a device plugin's resourceName annotation), else the NIC our DRA driver prepared for the pod's claim of that resource"
        ),
        (None, None, None) => {
            let capability = v
                .pointer("/capabilities/deviceID")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if capability {
                "no selector: deviceID comes from the runtime (capability) or Multus".to_owned()
            } else {
                "no selector: deviceID must come from Multus (a device plugin's resourceName annotation, or a ResourceClaim in Multus' DRA mode); ADD fails with code 7 without it".to_owned()
            }
        }
    };
    let mut parts = vec![
        format!("cniVersion {}", conf.cni_version.as_str()),
        selector,
    ];
    if let Some(i) = &conf.ipam_type {
        node.admit_ipam(i)?;
        node.admit_ipam_paths(v.get("ipam").unwrap_or(&Value::Null))?;
        parts.push(format!("ipam {i}"));
    }
    if let Some(s) = conf.rdma.soft_device {
        parts.push(format!("softDevice {}", format!("{s:?}").to_lowercase()));
    }
    Ok(parts.join(", "))
}

/// `validate FILE|- ...`: the files to check (`-`: stdin).
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// A .conf, a .conflist, NetworkAttachmentDefinitions, a ConfigMap holding node.json, or a
    /// List, as JSON or YAML (many documents too); - for stdin
    #[arg(value_name = "FILE|-", required = true)]
    pub files: Vec<String>,
}

/// Whether every config found was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Rejected,
}

/// Each config found, through the plugin's own checks, one line per config on stdout (a file
/// that cannot be read or holds no config is rejected too).
pub fn run(o: &Options) -> crate::error::Result<Verdict> {
    let mut verdict = Verdict::Accepted;
    for f in &o.files {
        for (v, line) in judge_file(f) {
            if v == Verdict::Rejected {
                verdict = v;
            }
            println!(
                "{}",
                rdma_host_device_core::logging::line(
                    &line,
                    rdma_host_device_core::logging::MAX_LINE
                )
            );
        }
    }
    Ok(verdict)
}

/// What `validate` says about one file: a line per config, with its verdict.
fn judge_file(f: &str) -> Vec<(Verdict, String)> {
    let rejected = |line: String| vec![(Verdict::Rejected, line)];
    // As ADD reads: within a bound, and (a file) only a regular one, opened without blocking.
    let text = if f == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .take(MAX_DOC + 1)
            .read_to_end(&mut b)
            .and_then(|_| {
                if b.len() as u64 > MAX_DOC {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::FileTooLarge,
                        format!("larger than {MAX_DOC} bytes"),
                    ))
                } else {
                    Ok(b)
                }
            })
    } else {
        rdma_host_device_core::files::read_regular(std::path::Path::new(f), MAX_DOC)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => return rejected(format!("{f}: cannot read: {e}")),
    };
    let docs = match documents(&text) {
        Ok(d) => d,
        Err(why) => return rejected(format!("{f}: {why}")),
    };
    let mut out = Vec::new();
    for (doc, value) in &docs {
        judge_document(f, &text, doc, value, &mut out);
    }
    if out.is_empty() {
        return rejected(format!(
            "{f}: holds no network configuration, NetworkAttachmentDefinition or ConfigMap with node.json"
        ));
    }
    out
}

/// Where a document is in its file.
enum Place {
    /// The whole file, as JSON.
    Json,
    /// A YAML document: its lines, 1-based.
    Yaml { first: usize, last: usize },
}

/// The documents of a file: JSON (one document), or else YAML. An error says where.
fn documents(text: &[u8]) -> std::result::Result<Vec<(Place, Value)>, String> {
    let json_err = match serde_json::from_slice::<Value>(text) {
        Ok(v) => return Ok(vec![(Place::Json, v)]),
        Err(e) => e,
    };
    let starts_like_json = matches!(
        text.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    );
    let Ok(s) = std::str::from_utf8(text) else {
        return Err(format!("neither JSON ({json_err}) nor YAML (not UTF-8)"));
    };
    match yaml::documents(s) {
        Ok(docs) if !starts_like_json => Ok(docs
            .into_iter()
            .map(|d| {
                let place = Place::Yaml {
                    first: d.first_line,
                    last: d.last_line,
                };
                (place, d.value)
            })
            .collect()),
        // What starts as JSON is JSON: its error is the one to fix.
        _ if starts_like_json => Err(format!("not valid JSON: {json_err}")),
        Ok(_) => Err(format!("not valid JSON: {json_err}")),
        Err(e) => Err(format!(
            "line {}: not YAML this reads ({}), nor JSON",
            e.line, e.msg
        )),
    }
}

/// One document's verdicts into `out`: a CNI config or conflist (no `kind`), a NAD, a ConfigMap
/// holding node.json, or a List of those; any other kind is passed over.
fn judge_document(
    f: &str,
    text: &[u8],
    place: &Place,
    doc: &Value,
    out: &mut Vec<(Verdict, String)>,
) {
    let kind = doc.get("kind").and_then(Value::as_str);
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(|n| format!(" {}/{}", kind.unwrap_or_default(), shown(n)))
        .unwrap_or_default();
    // Where a key's line is: the first line of the document that holds it, for YAML.
    let at = |key: &str| -> String {
        match place {
            Place::Json => f.to_owned(),
            Place::Yaml { first, last } => {
                let line = line_of(text, *first, *last, key).unwrap_or(*first);
                format!("{f}:{line}")
            }
        }
    };
    match kind {
        None | Some("NetworkAttachmentDefinition") => {
            let here = if kind.is_some() {
                format!("{}{name}", at("config"))
            } else {
                at("")
            };
            let mut found = match configs_in(doc) {
                Ok(found) => found,
                Err(e) => {
                    out.push((Verdict::Rejected, format!("{here}: {}", e.msg)));
                    return;
                }
            };
            if let (Place::Json, [one]) = (place, found.as_mut_slice())
                && one.place.is_empty()
            {
                // A plain config reaches the plugin as the file's bytes: judge those, as ADD
                // would.
                one.config = text.to_vec();
            }
            for c in found {
                let sep = if c.place.is_empty() { "" } else { " " };
                let here = format!("{here}{sep}{}", c.place);
                out.push(match check_config(&c.config) {
                    Ok(summary) => (Verdict::Accepted, format!("{here}: ok ({summary})")),
                    Err(e) => (
                        Verdict::Rejected,
                        format!("{here}: rejected with code {}: {}", e.code as u32, e.msg),
                    ),
                });
            }
        }
        Some("ConfigMap") => {
            let Some(body) = doc.pointer("/data/node.json") else {
                return;
            };
            let here = format!("{}{name} data.node.json", at("node.json"));
            let Some(body) = body.as_str() else {
                out.push((Verdict::Rejected, format!("{here}: not a string")));
                return;
            };
            out.push(match check_node(body.as_bytes(), "node.json") {
                Ok(()) => (
                    Verdict::Accepted,
                    format!("{here}: ok (node configuration)"),
                ),
                Err(e) => (Verdict::Rejected, format!("{here}: rejected: {e}")),
            });
        }
        Some("List") => {
            for item in doc
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                judge_document(f, text, place, item, out);
            }
        }
        Some(_) => {}
    }
}

/// A node configuration, checked as `node-config` checks a file (the agent's sections too).
fn check_node(body: &[u8], source: &str) -> crate::error::Result<()> {
    let node = rdma_host_device_core::node::Node::from_json(body, source)?;
    node.device_plugin()?;
    node.dra()?;
    node.gc()?;
    Ok(())
}

/// The first of lines `first..=last` (1-based) of `text` that holds `key` as a mapping key.
fn line_of(text: &[u8], first: usize, last: usize, key: &str) -> Option<usize> {
    if key.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    text.lines()
        .enumerate()
        .skip(first.saturating_sub(1))
        .take(last.saturating_sub(first) + 1)
        .find(|(_, l)| {
            let t = l.trim_start().trim_start_matches("- ");
            t.strip_prefix(key)
                .or_else(|| t.strip_prefix(&format!("\"{key}\"")))
                .is_some_and(|r| r.starts_with(':'))
        })
        .map(|(i, _)| i + 1)
}

/// A tenant's or operator's name, escaped for a line a person reads.
fn shown(s: &str) -> String {
    rdma_host_device_core::logging::escaped(s.as_bytes(), rdma_host_device_core::logging::MAX_SHOWN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn validate_reads_as_add_does_and_its_verdict_is_adds() {
        let dir = std::env::temp_dir().join(format!("rhd-validate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let at = |name: &str, body: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p.to_str().unwrap().to_owned()
        };
        let verdicts =
            |f: &str| -> Vec<Verdict> { judge_file(f).into_iter().map(|(v, _)| v).collect() };
        let conf = r#"{"cniVersion":"1.0.0","name":"a","type":"rdma-host-device","device":"eth1"}"#;
        assert_eq!(
            verdicts(&at("small.conf", conf.as_bytes())),
            [Verdict::Accepted]
        );
        // Past ADD's bound with whitespace, which a compact re-encoding would have dropped:
        // ADD refuses these bytes, so validate does.
        let padded = conf.replacen('{', &format!("{{{}", " ".repeat(MAX_CONFIG_LEN)), 1);
        let add = NetConf::parse_strict(
            padded.clone().into_bytes(),
            &rdma_host_device_core::node::Node::default(),
        );
        assert!(add.is_err());
        assert_eq!(
            verdicts(&at("padded.conf", padded.as_bytes())),
            [Verdict::Rejected]
        );
        let nad = json!({"kind": "NetworkAttachmentDefinition", "spec": {"config": padded}});
        let nad = at("nad.json", nad.to_string().as_bytes());
        assert_eq!(verdicts(&nad), [Verdict::Rejected]);
        // What is not a regular file is refused at once, without reading it.
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (f, what) in [
            (fifo.to_str().unwrap(), "a FIFO"),
            ("/dev/zero", "a device"),
        ] {
            let t = std::time::Instant::now();
            let out = judge_file(f);
            assert!(t.elapsed() < std::time::Duration::from_secs(1), "{f}");
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].0, Verdict::Rejected);
            assert!(out[0].1.contains(what), "{}", out[0].1);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn list_without_our_plugin_is_an_error() {
        let list = json!({"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "bridge"}]});
        assert!(configs_in(&list).is_err());
    }

    /// `judge_file` on `body` written to a file of its own: its lines.
    fn judged(name: &str, body: &str) -> Vec<(Verdict, String)> {
        let dir = std::env::temp_dir().join(format!("rhd-validate-yaml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let out = judge_file(p.to_str().unwrap());
        let _ = std::fs::remove_file(&p);
        out
    }

    #[test]
    fn yaml_manifests_are_read_document_by_document_naming_lines() {
        let manifest = r#"apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: other
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: good
spec:
  config: |
    {"cniVersion": "1.0.0", "name": "good", "type": "rdma-host-device", "device": "eth1"}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: bad
spec:
  config: '{"cniVersion": "1.0.0", "name": "bad", "type": "rdma-host-device", "devcie": "eth1"}'
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: node
data:
  node.json: |
    {"stateDir": "/var/lib/cni/rdma-host-device", "memlock": "nonsense"}
"#;
        let out = judged("m.yaml", manifest);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out[0].0, Verdict::Accepted, "{out:?}");
        assert!(
            out[0]
                .1
                .contains("m.yaml:11 NetworkAttachmentDefinition/good spec.config: ok"),
            "{out:?}"
        );
        assert_eq!(out[1].0, Verdict::Rejected);
        assert!(
            out[1].1.contains(
                "m.yaml:19 NetworkAttachmentDefinition/bad spec.config: rejected with code 2"
            ),
            "{out:?}"
        );
        assert!(out[1].1.contains("devcie"), "{out:?}");
        assert_eq!(out[2].0, Verdict::Rejected);
        assert!(
            out[2]
                .1
                .contains("m.yaml:26 ConfigMap/node data.node.json: rejected"),
            "{out:?}"
        );
        assert!(out[2].1.contains("memlock"), "{out:?}");
        // A List of them (kubectl get -o yaml) is read item by item.
        let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: k8s.cni.cncf.io/v1\n  kind: NetworkAttachmentDefinition\n  metadata:\n    name: good\n  spec:\n    config: '{\"cniVersion\": \"1.0.0\", \"name\": \"good\", \"type\": \"rdma-host-device\", \"device\": \"eth1\"}'\n";
        let out = judged("l.yaml", list);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, Verdict::Accepted, "{out:?}");
    }

    #[test]
    fn a_file_with_nothing_to_validate_or_bad_yaml_is_rejected_saying_why() {
        let out = judged(
            "ds.yaml",
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\n",
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Verdict::Rejected);
        assert!(
            out[0].1.contains("holds no network configuration"),
            "{out:?}"
        );
        let out = judged("bad.yaml", "kind: ConfigMap\ndata:\n  a: &anchor 1\n");
        assert_eq!(out[0].0, Verdict::Rejected);
        assert!(out[0].1.contains("line 3"), "{out:?}");
        // What starts as JSON is judged as JSON.
        let out = judged("bad.json", "{\"cniVersion\": ");
        assert_eq!(out[0].0, Verdict::Rejected);
        assert!(out[0].1.contains("not valid JSON"), "{out:?}");
    }
}
