//! The configuration reference cannot drift from the parsers: every key the plugin's NAD
//! parser and the node configuration's parsers accept is named, in backquotes, in
//! docs/configuration.md's "Configuration" and "Node configuration" sections (issue 28: "every key in the configuration
//! reference is checked against the parser by a test"). The keys come from the parsers
//! themselves: the NAD's key lists, and serde's own list of the fields a node-configuration
//! struct accepts (its answer to an unknown field), so a key added to either shows up here.

mod conf_yaml;

use rdma_host_device::cni::netconf::{OTHER_KEYS, RdmaConf, SELECTOR_KEYS};
use rdma_host_device_core::node::{
    CharDevices, DeviceMetadataConfig, DevicePluginConfig, DraConfig, NicEnvConfig, NicPolicy,
    Node, Pool, Rail,
};
use serde::de::DeserializeOwned;

/// The fields `T` accepts, as serde names them when it refuses an unknown one.
fn fields<T: DeserializeOwned>() -> Vec<String> {
    let e = match serde_json::from_str::<T>(r#"{"\u0001": 0}"#) {
        Ok(_) => panic!("{} took an unknown field", std::any::type_name::<T>()),
        Err(e) => e.to_string(),
    };
    let list = e
        .split_once("expected one of ")
        .or_else(|| e.split_once("expected "))
        .unwrap_or_else(|| panic!("{}: {e}", std::any::type_name::<T>()))
        .1;
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// docs/configuration.md's text from heading `from` to the next heading of the same level.
fn section(from: &str) -> String {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let start = readme
        .find(&format!("\n{from}\n"))
        .unwrap_or_else(|| panic!("docs/configuration.md has no {from:?}"));
    let rest = &readme[start + from.len() + 2..];
    let level = from.split(' ').next().unwrap();
    let end = rest.find(&format!("\n{level} ")).unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// The keys `text` names nowhere: as `key`, as the head of `key.sub`, or as a key of a JSON
/// example (`"key":`).
fn undocumented(keys: &[String], text: &str) -> Vec<String> {
    keys.iter()
        .filter(|k| {
            !text.contains(&format!("`{k}`"))
                && !text.contains(&format!("`{k}."))
                && !text.contains(&format!("\"{k}\":"))
        })
        .cloned()
        .collect()
}

#[test]
fn every_nad_key_the_parser_accepts_is_in_the_configuration_reference() {
    let text = section("## Configuration");
    let mut keys: Vec<String> = SELECTOR_KEYS.iter().map(|k| k.to_string()).collect();
    keys.extend(OTHER_KEYS.iter().map(|k| k.to_string()));
    keys.extend(fields::<RdmaConf>().iter().map(|k| format!("rdma.{k}")));
    assert!(keys.len() > 20, "{keys:?}");
    let missing = undocumented(&keys, &text);
    assert!(
        missing.is_empty(),
        "docs/configuration.md's Configuration section does not name {missing:?}"
    );
}

#[test]
fn every_node_configuration_key_the_parser_accepts_is_in_the_reference() {
    let text = section("## Node configuration");
    let mut keys = fields::<Node>();
    assert!(keys.contains(&"stateDir".to_owned()), "{keys:?}");
    for (parent, sub) in [
        ("allowedNics", fields::<NicPolicy>()),
        ("devicePlugin", fields::<DevicePluginConfig>()),
        ("devicePlugin.pools[]", fields::<Pool>()),
        ("devicePlugin.charDevices", fields::<CharDevices>()),
        ("devicePlugin.nicEnv", fields::<NicEnvConfig>()),
        ("dra", fields::<DraConfig>()),
        ("dra.rails[]", fields::<Rail>()),
        ("dra.deviceMetadata", fields::<DeviceMetadataConfig>()),
    ] {
        assert!(!sub.is_empty(), "{parent}");
        // A nested key is named as itself in its parent's paragraph or example.
        keys.extend(sub);
    }
    let missing = undocumented(&keys, &text);
    assert!(
        missing.is_empty(),
        "docs/configuration.md's Node configuration section does not name {missing:?}"
    );
}

/// The front page's picture (docs/img/architecture.svg) is current with the DaemonSets: it
/// names both binaries and every container the two DaemonSets run, by the name in their
/// manifests.
#[test]
fn the_picture_names_every_container_the_daemonsets_run() {
    let root = env!("CARGO_MANIFEST_DIR");
    let svg = std::fs::read_to_string(format!("{root}/docs/img/architecture.svg")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    assert!(
        readme.contains("](docs/img/architecture.svg)"),
        "README shows the picture"
    );
    let mut containers = Vec::new();
    for file in ["conf/k8s/daemonset.yaml", "conf/k8s/dra.yaml"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        for doc in conf_yaml::parse_all(&text).unwrap() {
            if doc["kind"] != "DaemonSet" {
                continue;
            }
            assert!(
                svg.contains(&format!(
                    "DaemonSet {}",
                    doc["metadata"]["name"].as_str().unwrap()
                )),
                "the picture does not name DaemonSet {}",
                doc["metadata"]["name"]
            );
            let spec = &doc["spec"]["template"]["spec"];
            for list in ["initContainers", "containers"] {
                for c in spec[list].as_array().into_iter().flatten() {
                    containers.push(c["name"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    assert!(containers.len() >= 7, "{containers:?}");
    for c in &containers {
        assert!(
            svg.contains(&format!(">{c}:")),
            "the picture does not show container {c} (as \"{c}: what it does\")"
        );
    }
    for bin in ["rdma-host-device<", "rdma-host-device-agent"] {
        assert!(svg.contains(bin), "the picture does not name {bin}");
    }
}
