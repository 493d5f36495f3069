//! `CniResult`: the ADD result (and `prevResult`), read from any version 0.3.0-1.1.0 and written
//! in the version the config asked for.

use super::version::Version;
use ipnet::IpNet;
use rdma_host_device_core::error::{Result, invalid_config};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    #[serde(rename = "pciID", default, skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IpConfig {
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
    /// The route's TOS (rtm_tos, IPv4 only); a 1.1.0 field like the five above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        *self == Dns::default()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    #[serde(default, skip_serializing)]
    pub cni_version: String,
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    #[serde(default)]
    pub ips: Vec<IpConfig>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

impl CniResult {
    /// Read a result of any version we speak (unknown fields such as 0.x's per-IP `version`
    /// are ignored).
    pub fn from_value(v: Value) -> Result<Self> {
        serde_json::from_value(v).map_err(|e| invalid_config(format!("malformed result: {e}")))
    }

    pub fn from_slice(b: &[u8]) -> Result<Self> {
        serde_json::from_slice(b).map_err(|e| invalid_config(format!("malformed result: {e}")))
    }

    /// Add our interface and return its index for the IPs that belong to it.
    pub fn push_interface(&mut self, iface: Interface) -> usize {
        self.interfaces.push(iface);
        self.interfaces.len() - 1
    }

    /// The result as JSON in `version`'s shape.
    pub fn to_json(&self, version: Version) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(obj) = v.as_object_mut() {
            obj.insert("cniVersion".into(), Value::from(version.as_str()));
            if version.ip_has_version_field()
                && let Some(Value::Array(ips)) = obj.get_mut("ips")
            {
                for ip in ips.iter_mut().filter_map(Value::as_object_mut) {
                    let fam = match ip.get("address").and_then(Value::as_str) {
                        Some(a) if a.contains(':') => "6",
                        _ => "4",
                    };
                    ip.insert("version".into(), Value::from(fam));
                }
            }
            if !version.has_1_1_fields() {
                strip(obj.get_mut("interfaces"), &["mtu", "pciID", "socketPath"]);
                strip(
                    obj.get_mut("routes"),
                    &["mtu", "advmss", "priority", "table", "scope", "tos"],
                );
            }
        }
        v.to_string()
    }
}

fn strip(list: Option<&mut Value>, keys: &[&str]) {
    if let Some(Value::Array(items)) = list {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            for k in keys {
                item.remove(*k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CniResult {
        let mut r = CniResult::default();
        let i = r.push_interface(Interface {
            name: "net1".into(),
            mac: "aa:bb:cc:dd:ee:ff".into(),
            mtu: Some(9000),
            sandbox: "/var/run/netns/p".into(),
            pci_id: "0000:3b:00.1".into(),
            socket_path: String::new(),
        });
        r.ips.push(IpConfig {
            address: "10.1.0.5/24".parse().unwrap(),
            gateway: Some("10.1.0.1".parse().unwrap()),
            interface: Some(i),
        });
        r.ips.push(IpConfig {
            address: "fd00::5/64".parse().unwrap(),
            gateway: None,
            interface: Some(i),
        });
        r.routes.push(Route {
            dst: "10.2.0.0/16".parse().unwrap(),
            gw: Some("10.1.0.1".parse().unwrap()),
            mtu: Some(1400),
            advmss: None,
            priority: None,
            table: Some(100),
            scope: Some(0),
            tos: Some(8),
        });
        r
    }

    fn json(r: &CniResult, v: Version) -> Value {
        serde_json::from_str(&r.to_json(v)).unwrap()
    }

    #[test]
    fn old_versions_carry_ip_version_and_no_1_1_fields() {
        for v in [Version::V0_3_0, Version::V0_3_1, Version::V0_4_0] {
            let j = json(&sample(), v);
            assert_eq!(j["cniVersion"], v.as_str());
            assert_eq!(j["ips"][0]["version"], "4");
            assert_eq!(j["ips"][1]["version"], "6");
            assert!(j["interfaces"][0].get("mtu").is_none());
            assert!(j["interfaces"][0].get("pciID").is_none());
            for k in ["mtu", "table", "scope", "tos"] {
                assert!(j["routes"][0].get(k).is_none(), "{k} in {v:?}");
            }
        }
    }

    #[test]
    fn v1_0_drops_ip_version() {
        let j = json(&sample(), Version::V1_0_0);
        assert!(j["ips"][0].get("version").is_none());
        assert!(j["routes"][0].get("tos").is_none());
        assert!(j["routes"][0].get("table").is_none());
        assert_eq!(j["ips"][0]["interface"], 0);
        assert!(j["interfaces"][0].get("mtu").is_none());
    }

    #[test]
    fn v1_1_adds_mtu_and_pci_id() {
        let j = json(&sample(), Version::V1_1_0);
        assert_eq!(j["interfaces"][0]["mtu"], 9000);
        assert_eq!(j["interfaces"][0]["pciID"], "0000:3b:00.1");
        assert_eq!(j["routes"][0]["mtu"], 1400);
        assert_eq!(j["routes"][0]["table"], 100);
        assert_eq!(j["routes"][0]["scope"], 0);
        assert_eq!(j["routes"][0]["tos"], 8);
        assert!(j.get("dns").is_none());
    }

    #[test]
    fn reads_every_version_back() {
        for v in crate::cni::version::SUPPORTED {
            let back = CniResult::from_slice(sample().to_json(v).as_bytes()).unwrap();
            assert_eq!(back.ips, sample().ips);
            assert_eq!(back.cni_version, v.as_str());
        }
    }

    #[test]
    fn malformed_results_are_errors_not_panics() {
        for bad in [
            r#"{"ips":[{"address":"10.0.0.1"}]}"#,
            r#"{"ips":[{"address":"10.0.0.1/24","gateway":"x"}]}"#,
            r#"{"interfaces":[{"mac":"x"}]}"#,
            r#"{"routes":[{"gw":"10.0.0.1"}]}"#,
            r#"[1,2]"#,
        ] {
            assert!(CniResult::from_slice(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
