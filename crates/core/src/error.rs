//! The one error type of the plugin: a CNI error code, a message an operator can act on, and
//! optional details. It knows how to print itself as the spec's error JSON.

use serde::Serialize;
use std::fmt;

/// Error codes: the spec's (1-99) and ours (100+). See docs/DESIGN.md and docs/operations.md.
/// The whole table is public contract (docs/operations.md); not every code has a producer in every build.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    IncompatibleVersion = 1,
    UnsupportedField = 2,
    UnknownContainer = 3,
    InvalidEnv = 4,
    Io = 5,
    Decode = 6,
    InvalidConfig = 7,
    TryAgain = 11,
    /// STATUS: the plugin cannot serve ADD now.
    NotAvailable = 50,
    DeviceNotFound = 100,
    DeviceAmbiguous = 101,
    DeviceBusy = 102,
    IfnameExists = 103,
    Netlink = 104,
    Ipam = 105,
    CheckFailed = 106,
    /// The node policy does not allow handing this NIC to a pod.
    NotAllowed = 107,
    RdmaNotFound = 110,
    RdmaNetnsMode = 111,
    RdmaMoveUnsupported = 112,
    GidTimeout = 113,
    Rdma = 114,
    /// Only for bugs (a panic): everything we understand has its own code.
    Internal = 999,
}

/// One row of the error-code table: the table in docs/operations.md, `--help` and the error type all come
/// from [`TABLE`] (a test keeps that copy equal to it).
pub struct CodeInfo {
    pub code: Code,
    pub meaning: &'static str,
    pub action: &'static str,
}

/// Every code the plugin answers with, but 999 (a bug).
pub const TABLE: &[CodeInfo] = &[
    CodeInfo {
        code: Code::IncompatibleVersion,
        meaning: "unsupported or missing `cniVersion` (or a verb the version lacks)",
        action: "use 0.3.0-1.1.0",
    },
    CodeInfo {
        code: Code::UnsupportedField,
        meaning: "unknown field in the config",
        action: "the message names it; fix the typo",
    },
    CodeInfo {
        code: Code::UnknownContainer,
        meaning: "the pod's netns does not exist",
        action: "the runtime lost the sandbox",
    },
    CodeInfo {
        code: Code::InvalidEnv,
        meaning: "bad `CNI_*` variable (missing, invalid ifname, not a netns)",
        action: "runtime bug or misconfiguration",
    },
    CodeInfo {
        code: Code::Io,
        meaning: "I/O error (state dir, stdin)",
        action: "check `/var/lib/cni/rdma-host-device`",
    },
    CodeInfo {
        code: Code::Decode,
        meaning: "the config is not valid JSON",
        action: "",
    },
    CodeInfo {
        code: Code::InvalidConfig,
        meaning: "invalid config value (mtu, selector, ipam, paths)",
        action: "the message names the field",
    },
    CodeInfo {
        code: Code::TryAgain,
        meaning: "try again later: another call holds the NIC; DEL: processes (named) hold the pod's software RDMA device open, or the pod's netns lives on without its path",
        action: "retried by the runtime",
    },
    CodeInfo {
        code: Code::NotAvailable,
        meaning: "STATUS: the NIC or the IPAM plugin is not available",
        action: "",
    },
    CodeInfo {
        code: Code::DeviceNotFound,
        meaning: "no host NIC matches the selector",
        action: "check `ip link`, `rdma-host-device-agent inspect`",
    },
    CodeInfo {
        code: Code::DeviceAmbiguous,
        meaning: "ambiguous: several selectors, or one matching several NICs/RDMA devices",
        action: "give one precise selector",
    },
    CodeInfo {
        code: Code::DeviceBusy,
        meaning: "the NIC is attached to another pod",
        action: "DEL that attachment first",
    },
    CodeInfo {
        code: Code::IfnameExists,
        meaning: "`CNI_IFNAME` already exists in the pod",
        action: "pick another interface name",
    },
    CodeInfo {
        code: Code::Netlink,
        meaning: "a link/address/route netlink operation failed",
        action: "the message names it",
    },
    CodeInfo {
        code: Code::Ipam,
        meaning: "the IPAM plugin failed (its code and message in `details`)",
        action: "",
    },
    CodeInfo {
        code: Code::CheckFailed,
        meaning: "CHECK found a difference",
        action: "the message says which",
    },
    CodeInfo {
        code: Code::NotAllowed,
        meaning: "the node policy does not allow it: handing this NIC to a pod (not in `allowedNics`, or one the node or another pod uses, or, in exclusive mode, whose RDMA device host processes hold open: named), or running this `ipam.type` (not in `ipamPlugins`), or a path in `ipam` outside `ipamPaths`",
        action: "pick another NIC or IPAM plugin, or change the node configuration",
    },
    CodeInfo {
        code: Code::RdmaNotFound,
        meaning: "RDMA required but no RDMA device pairs with the NIC (or no RDMA in the kernel)",
        action: "load the RDMA driver, or `softDevice`, or `isolation: \"none\"`",
    },
    CodeInfo {
        code: Code::RdmaNetnsMode,
        meaning: "the RDMA netns mode does not allow what was asked (exclusive required, or `softDevice` in exclusive mode)",
        action: "see [RDMA modes](devices.md#rdma-modes)",
    },
    CodeInfo {
        code: Code::RdmaMoveUnsupported,
        meaning: "the RDMA device cannot change netns (EOPNOTSUPP), or a software device would die with the move",
        action: "`isolation: \"none\"`, shared mode, or `softDevice`",
    },
    CodeInfo {
        code: Code::GidTimeout,
        meaning: "verification timed out: missing RoCE v2 GIDs (named) or a port not ACTIVE (RoCE and iWARP alike; the message gives the netdev's carrier)",
        action: "check the link's carrier; raise `gidTimeoutMs`",
    },
    CodeInfo {
        code: Code::Rdma,
        meaning: "another RDMA netlink or verbs failure",
        action: "the message names it",
    },
];

/// The table as docs/operations.md prints it (markdown, one row per code).
pub fn markdown_table() -> String {
    let mut out = String::from("| code | meaning | what to do |\n|---|---|---|\n");
    for c in TABLE {
        let action = if c.action.is_empty() {
            String::new()
        } else {
            format!("{} ", c.action)
        };
        out.push_str(&format!(
            "| {} | {} | {action}|\n",
            c.code as u32, c.meaning
        ));
    }
    out
}

#[derive(Debug, Clone)]
pub struct Error {
    pub code: Code,
    pub msg: String,
    pub details: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Prefix the message with what we were doing when it happened.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    /// The spec's error object, in the version the config asked for.
    pub fn to_json(&self, cni_version: &str) -> String {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(rename = "cniVersion")]
            cni_version: &'a str,
            code: u32,
            msg: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            details: &'a str,
        }
        // The runtime writes msg and details into its log and the pod's events as they are:
        // a name a pod chose must not carry an escape sequence there, nor a megabyte.
        let (msg, details) = (
            crate::logging::line(&self.msg, crate::logging::MAX_LINE),
            crate::logging::line(&self.details, crate::logging::MAX_LINE),
        );
        let out = Out {
            cni_version,
            code: self.code as u32,
            msg: &msg,
            details: &details,
        };
        serde_json::to_string(&out).unwrap_or_else(|_| {
            format!(
                "{{\"cniVersion\":\"{cni_version}\",\"code\":{},\"msg\":\"unprintable error\"}}",
                self.code as u32
            )
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.msg, self.code as u32)?;
        if !self.details.is_empty() {
            write!(f, ": {}", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Shorthand constructors, so call sites read as the failure they report.
pub fn invalid_config(msg: impl Into<String>) -> Error {
    Error::new(Code::InvalidConfig, msg)
}

pub fn invalid_env(msg: impl Into<String>) -> Error {
    Error::new(Code::InvalidEnv, msg)
}

pub fn io_error(what: impl fmt::Display, e: std::io::Error) -> Error {
    Error::new(Code::Io, format!("{what}: {e}"))
}

/// Combine errors from steps that all had to be tried.
pub fn first_error(errors: Vec<Error>) -> Result<()> {
    let mut it = errors.into_iter();
    match it.next() {
        None => Ok(()),
        Some(mut first) => {
            let rest: Vec<String> = it.map(|e| e.to_string()).collect();
            if !rest.is_empty() {
                let also = format!("{} more error(s): {}", rest.len(), rest.join("; "));
                first.details = if first.details.is_empty() {
                    also
                } else {
                    format!("{}; {also}", first.details)
                };
            }
            Err(first)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_json_carries_no_escape_sequence_a_pod_chose() {
        // The runtime copies msg into its log and the pod's events as it is.
        let e = Error::new(Code::Io, "link \u{1b}]0;owned\u{7} gone").with_details("\u{1b}[2J");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.1.0")).unwrap();
        let (msg, details) = (v["msg"].as_str().unwrap(), v["details"].as_str().unwrap());
        assert!(!msg.contains('\u{1b}') && !msg.contains('\u{7}'), "{msg}");
        assert!(!details.contains('\u{1b}'), "{details}");
        assert!(msg.contains("\\u{1b}]0;owned"), "{msg}");
    }

    #[test]
    fn the_operations_guide_prints_the_codes_table() {
        let readme = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/operations.md"
        ))
        .unwrap();
        let start = readme
            .find("| code | meaning | what to do |")
            .expect("docs/operations.md has the error-code table");
        let table: String = readme[start..]
            .lines()
            .take_while(|l| l.starts_with('|'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            table,
            markdown_table(),
            "docs/operations.md's error-code table differs from crates/core/src/error.rs TABLE: copy markdown_table() over"
        );
        // Every code of the enum but 999 is in the table.
        for c in TABLE {
            assert_ne!(c.code, Code::Internal);
        }
    }

    #[test]
    fn json_carries_code_msg_and_version() {
        let e = Error::new(Code::DeviceNotFound, "no link eth9").with_details("looked on host");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0")).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 100);
        assert_eq!(v["msg"], "no link eth9");
        assert_eq!(v["details"], "looked on host");
    }

    #[test]
    fn empty_details_are_omitted() {
        let e = invalid_env("CNI_IFNAME is empty");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("0.4.0")).unwrap();
        assert_eq!(v["code"], 4);
        assert!(v.get("details").is_none());
    }
}
