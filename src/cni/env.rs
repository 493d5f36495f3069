//! The CNI_* environment variables a runtime sets, validated per verb.

use rdma_host_device_core::error::{Result, invalid_env};
use rdma_host_device_core::names::PodRef;
use rdma_host_device_core::names::{validate_container_id, validate_ifname};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    Status,
    Gc,
}

impl Command {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            other => {
                return Err(invalid_env(format!(
                    "CNI_COMMAND {} is not one of ADD, DEL, CHECK, VERSION, STATUS, GC",
                    rdma_host_device_core::logging::shown(other)
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Status => "STATUS",
            Command::Gc => "GC",
        }
    }

    /// Verbs that act on one attachment (container + interface).
    fn per_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

/// The runtime's view of one call.
#[derive(Debug, Clone)]
pub struct Env {
    pub command: Command,
    pub container_id: String,
    /// Empty when the runtime did not give one (allowed for DEL).
    pub netns: String,
    pub ifname: String,
    pub args: String,
    pub path: Vec<PathBuf>,
}

/// Longest input we accept in any CNI_* variable: bounded, since it comes from the cluster.
const MAX_ENV_LEN: usize = 4096;

impl Env {
    pub fn from_process() -> Result<Self> {
        Self::from_lookup(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Read and validate the variables through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |k: &str| -> Result<String> {
            let v = get(k).unwrap_or_default();
            if v.len() > MAX_ENV_LEN {
                return Err(invalid_env(format!(
                    "{k} is {} bytes long; the limit is {MAX_ENV_LEN}",
                    v.len()
                )));
            }
            Ok(v)
        };
        let command = var("CNI_COMMAND")?;
        if command.is_empty() {
            return Err(invalid_env("CNI_COMMAND is not set"));
        }
        let command = Command::parse(&command)?;
        let env = Env {
            command,
            container_id: var("CNI_CONTAINERID")?,
            netns: var("CNI_NETNS")?,
            ifname: var("CNI_IFNAME")?,
            args: var("CNI_ARGS")?,
            path: var("CNI_PATH")?
                .split(':')
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .collect(),
        };
        env.validate()?;
        Ok(env)
    }

    fn validate(&self) -> Result<()> {
        if !self.command.per_attachment() {
            return Ok(());
        }
        let verb = self.command.name();
        if self.container_id.is_empty() {
            return Err(invalid_env(format!(
                "CNI_CONTAINERID is required for {verb}"
            )));
        }
        validate_container_id(&self.container_id)?;
        validate_ifname(&self.ifname).map_err(|m| invalid_env(format!("CNI_IFNAME: {m}")))?;
        if self.netns.is_empty() && self.command != Command::Del {
            return Err(invalid_env(format!("CNI_NETNS is required for {verb}")));
        }
        if self.path.is_empty() {
            return Err(invalid_env(format!(
                "CNI_PATH is required for {verb} (the IPAM plugin is looked up there)"
            )));
        }
        Ok(())
    }
}

impl Env {
    /// The pod from CNI_ARGS, if it names one. Values that could not be Kubernetes names
    /// (over 253 bytes, or characters outside `[A-Za-z0-9._-]`) are dropped, not trusted.
    pub fn pod(&self) -> Option<PodRef> {
        let mut pod = PodRef::default();
        for pair in self.args.split(';') {
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            let ok = !v.is_empty()
                && v.len() <= 253
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            let slot = match k.trim() {
                "K8S_POD_NAMESPACE" => &mut pod.namespace,
                "K8S_POD_NAME" => &mut pod.name,
                "K8S_POD_UID" => &mut pod.uid,
                _ => continue,
            };
            if ok {
                *slot = v.to_string();
            }
        }
        (!pod.namespace.is_empty() || !pod.name.is_empty()).then_some(pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ifname_the_kernel_reads_as_holding_a_space_is_refused() {
        // dev_valid_name checks bytes with the kernel's isspace, which counts 0xa0 (Latin-1
        // no-break space): "nà" is n, 0xc3, 0xa0. The kernel refused it only at the rename,
        // after the NIC had moved into the pod.
        for bad in ["nà", "a\u{a0}b", "x\u{b}y", "net 1", "a\u{1b}[2J"] {
            let e = validate_ifname(bad).expect_err(bad);
            assert!(!e.contains('\u{1b}'), "{e}");
        }
        for ok in ["net1", "é1", "eth0.100", "rhd-x_1"] {
            assert_eq!(validate_ifname(ok), Ok(()), "{ok}");
        }
    }
    use rdma_host_device_core::error::Code;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<Env> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::from_lookup(|k| m.get(k).cloned())
    }

    const GOOD: [(&str, &str); 5] = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc-123"),
        ("CNI_NETNS", "/var/run/netns/x"),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
    ];

    fn with(k: &str, v: &str) -> Result<Env> {
        let mut p: Vec<(&str, &str)> = GOOD.iter().filter(|(a, _)| *a != k).copied().collect();
        p.push((k, v));
        env(&p)
    }

    #[test]
    fn good_env_parses() {
        let e = env(&GOOD).unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.path.len(), 2);
    }

    #[test]
    fn bad_env_table() {
        for (k, v) in [
            ("CNI_COMMAND", ""),
            ("CNI_COMMAND", "FROB"),
            ("CNI_CONTAINERID", ""),
            ("CNI_CONTAINERID", "../etc"),
            ("CNI_IFNAME", ""),
            ("CNI_IFNAME", "../x"),
            ("CNI_IFNAME", "a/b"),
            ("CNI_IFNAME", "."),
            ("CNI_IFNAME", "toolongname12345"),
            ("CNI_IFNAME", "a b"),
            ("CNI_IFNAME", "net%d"),
            ("CNI_NETNS", ""),
            ("CNI_PATH", ""),
        ] {
            let err = with(k, v).expect_err(&format!("{k}={v:?} must be rejected"));
            assert_eq!(err.code, Code::InvalidEnv, "{k}={v:?}: {err}");
        }
    }

    #[test]
    fn del_allows_empty_netns_and_version_needs_nothing() {
        let mut p: Vec<(&str, &str)> = GOOD.to_vec();
        p[0] = ("CNI_COMMAND", "DEL");
        p[2] = ("CNI_NETNS", "");
        assert!(env(&p).is_ok());
        assert!(env(&[("CNI_COMMAND", "VERSION")]).is_ok());
    }

    #[test]
    fn pod_from_cni_args() {
        let e = with(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=trainer-0;K8S_POD_UID=1f2e-3d;K8S_POD_INFRA_CONTAINER_ID=abc",
        )
        .unwrap();
        let p = e.pod().unwrap();
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("team-a", "trainer-0")
        );
        assert_eq!(p.uid, "1f2e-3d");
        assert_eq!(with("CNI_ARGS", "IgnoreUnknown=1").unwrap().pod(), None);
        let odd = with("CNI_ARGS", "K8S_POD_NAMESPACE=a\"b;K8S_POD_NAME=ok").unwrap();
        assert_eq!(
            odd.pod().unwrap().namespace,
            "",
            "a value that is no k8s name is dropped"
        );
    }

    #[test]
    fn oversized_values_are_rejected() {
        let long = "a".repeat(5000);
        assert_eq!(with("CNI_ARGS", &long).unwrap_err().code, Code::InvalidEnv);
    }
}
