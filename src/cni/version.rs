//! CNI spec versions we speak, and what each one changes in the protocol.

use rdma_host_device_core::error::{Code, Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

pub const SUPPORTED: [Version; 5] = [
    Version::V0_3_0,
    Version::V0_3_1,
    Version::V0_4_0,
    Version::V1_0_0,
    Version::V1_1_0,
];

impl Version {
    pub const LATEST: Version = Version::V1_1_0;

    pub fn parse(s: &str) -> Result<Self> {
        SUPPORTED
            .iter()
            .copied()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                let what = if s.is_empty() {
                    "cniVersion is missing".to_string()
                } else {
                    format!("cniVersion {s:?} is not supported")
                };
                Error::new(
                    Code::IncompatibleVersion,
                    format!("{what}; this plugin speaks {}", supported_list()),
                )
            })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn has_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// STATUS and GC exist from 1.1.0 on.
    pub fn has_status_and_gc(self) -> bool {
        self >= Version::V1_1_0
    }

    /// 0.3.x and 0.4.0 results carry `"version": "4"|"6"` on each IP; 1.0.0 dropped it.
    pub fn ip_has_version_field(self) -> bool {
        self < Version::V1_0_0
    }

    /// 1.1.0 added interface `mtu`, `pciID`, `socketPath` and route `mtu`, `advmss`,
    /// `priority`, `table`, `scope` (and our route `tos`, which older results never carry).
    pub fn has_1_1_fields(self) -> bool {
        self >= Version::V1_1_0
    }
}

pub fn supported_list() -> String {
    SUPPORTED.map(Version::as_str).join(", ")
}

/// The VERSION verb's answer.
pub fn version_json(asked: Option<&str>) -> String {
    let v = asked
        .and_then(|s| Version::parse(s).ok())
        .unwrap_or(Version::LATEST);
    serde_json::json!({
        "cniVersion": v.as_str(),
        "supportedVersions": SUPPORTED.map(Version::as_str),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_supported_versions_round_trip() {
        for v in SUPPORTED {
            assert_eq!(Version::parse(v.as_str()).unwrap(), v);
        }
        assert_eq!(
            Version::parse("0.2.0").unwrap_err().code,
            Code::IncompatibleVersion
        );
        assert_eq!(
            Version::parse("").unwrap_err().code,
            Code::IncompatibleVersion
        );
    }

    #[test]
    fn version_json_lists_everything() {
        let v: serde_json::Value = serde_json::from_str(&version_json(None)).unwrap();
        let list: Vec<&str> = v["supportedVersions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert_eq!(list, ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
    }

    #[test]
    fn feature_gates() {
        assert!(!Version::V0_3_1.has_check());
        assert!(Version::V0_4_0.has_check());
        assert!(Version::V0_4_0.ip_has_version_field());
        assert!(!Version::V1_0_0.ip_has_version_field());
        assert!(!Version::V1_0_0.has_status_and_gc());
        assert!(Version::V1_1_0.has_1_1_fields());
    }
}
