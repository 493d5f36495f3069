//! What Multus does to a delegate before libcni runs it, reproduced from its source
//! (pkg/types/conf.go LoadDelegateNetConf, CreateCNIRuntimeConf; pkg/multus/multus.go): shared
//! by tests/attach/multus.rs (a device plugin's deviceID, Multus 4.x) and crates/agent/tests/real_cluster/multus_dra.rs (a
//! deviceID Multus read from a ResourceClaim and a ResourceSlice, Multus main): both end in the
//! same delegate.

use serde_json::{Value, json};
use std::path::Path;

/// Multus's default cniVersion (its daemon config) when a delegate list has none.
pub const MULTUS_CNI_VERSION: &str = "0.3.1";

/// What Multus's LoadDelegateNetConf does to a delegate's bytes: a device's ID as `deviceID`
/// AND `pciBusID` (same value) at the top level of the config (of every plugin, for a list),
/// the network selection element's `cni-args` merged into `args.cni`, and a list without
/// `cniVersion` given Multus' own.
pub fn multus_delegate(mut conf: Value, device_id: Option<&str>, cni_args: Option<Value>) -> Value {
    let targets: Vec<&mut Value> = if conf["plugins"].is_array() {
        conf["plugins"].as_array_mut().unwrap().iter_mut().collect()
    } else {
        vec![&mut conf]
    };
    for p in targets {
        if let Some(id) = device_id {
            p["deviceID"] = json!(id);
            p["pciBusID"] = json!(id);
        }
        if let Some(a) = &cni_args {
            if !p["args"].is_object() {
                p["args"] = json!({});
            }
            let merged = match p["args"]["cni"].take() {
                Value::Object(mut m) => {
                    m.extend(a.as_object().unwrap().clone());
                    Value::Object(m)
                }
                _ => a.clone(),
            };
            p["args"]["cni"] = merged;
        }
    }
    if conf["plugins"].is_array() && conf.get("cniVersion").is_none() {
        conf["cniVersion"] = json!(MULTUS_CNI_VERSION);
    }
    conf
}

/// CNI_ARGS exactly as Multus builds them (CreateCNIRuntimeConf's order).
pub fn multus_k8s_args(namespace: &str, pod: &str, uid: &str, cid: &str) -> String {
    format!(
        "IgnoreUnknown=true;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID={uid}"
    )
}

/// The capability args Multus offers for a delegate with a device (libcni keeps the ones the
/// config declares in "capabilities"): `deviceID`, and `CNIDeviceInfoFile` under Multus'
/// device-info directory (`devinfo_dir`), named `NET-CID_IFNAME`.
pub fn multus_device_caps(
    devinfo_dir: &Path,
    net: &str,
    cid: &str,
    ifname: &str,
    device_id: &str,
) -> Vec<String> {
    vec![
        "-cap".into(),
        format!("deviceID={device_id}"),
        "-cap".into(),
        format!(
            "CNIDeviceInfoFile={}",
            devinfo_dir.join(format!("{net}-{cid}_{ifname}")).display()
        ),
    ]
}
