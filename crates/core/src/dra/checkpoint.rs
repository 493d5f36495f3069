//! The DRA driver's record of the claims it prepared: `<stateDir>/dra/checkpoint.json`, one
//! file for the node, root's alone (mode 0600 in the state directory, which only root enters).
//!
//! Two readers, one writer:
//! - the driver (`dra::plugin`) writes it on every prepare and unprepare, whole, through a temp
//!   file and a rename (a reader sees the old record or the new one, never half), and reads it
//!   at start: unprepare works from it alone, after a restart or in a new DaemonSet pod;
//! - the CNI plugin reads it on ADD for a network configuration with `draRequest`: the NIC the
//!   driver prepared for *this* pod, the pod being the UID the runtime puts in CNI_ARGS; and,
//!   with `draExtendedResource` and no `deviceID`, the NIC of the claim the scheduler made for
//!   the pod's extended resource ([`Checkpoint::extended_for_pod`]), the same way.
//!
//! So this module stays small: serde and the file, nothing of the driver's (no gRPC, no API
//! client), so the core crate holds it: the CNI plugin reads it without linking the driver.
//!
//! Who writes what: every value here came from the driver (claims it read from the API
//! server, NICs it found on the node). A tenant writes none of it; a NAD only names a request,
//! and [`Checkpoint::for_pod`] answers from the entries whose pods include the caller's UID.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The format this code writes and reads. A file of another version is refused, not guessed at.
pub const VERSION: u32 = 1;
/// The most read: a claim is a few hundred bytes; this holds thousands.
pub const MAX_BYTES: u64 = 8 << 20;

/// Where the checkpoint of the node whose state directory is `state_dir` is.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("dra").join("checkpoint.json")
}

/// Every claim prepared on this node and not yet unprepared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub version: u32,
    /// By claim UID.
    #[serde(default)]
    pub claims: BTreeMap<String, PreparedClaim>,
}

/// One claim as it was prepared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    pub namespace: String,
    pub name: String,
    /// The UIDs of the pods the claim is reserved for (`status.reservedFor`, resource `pods`):
    /// the only pods whose ADD may take its NICs.
    #[serde(default)]
    pub pods: Vec<String>,
    /// Our devices of the claim (results of other drivers are not ours to record).
    #[serde(default)]
    pub devices: Vec<PreparedDevice>,
    /// The scheduler made this claim for a pod's extended resource (KEP-5004: a DeviceClass's
    /// `extendedResourceName` in a container's `resources.limits`): the claim carries
    /// `resource.kubernetes.io/extended-resource-claim: "true"`. A NAD's `draExtendedResource`
    /// takes its pod's NICs from such claims only. Absent in checkpoints written before it
    /// existed (read as false; the driver sets it when the kubelet prepares the claim again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub extended_resource: bool,
    /// Prepare wrote the KEP-5304 metadata file and CDI specs of each request
    /// (`dra::metadata`, where the node configuration's `dra.deviceMetadata` says): ADD
    /// completes them, unprepare removes them. Absent (false) in a checkpoint of an older driver.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub metadata: bool,
}

/// One device of a claim: the allocation result, the NIC it is, what the kubelet was told.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    /// The claim's request (`nic`, or `nic/subrequest` for a prioritized list).
    pub request: String,
    pub pool: String,
    /// The device's name in our ResourceSlice.
    pub device: String,
    /// The NIC: its PCI address, else its auxiliary-bus device, else (a virtual link) its
    /// interface name; what ADD resolves as `deviceID` (`inventory::device_id`).
    pub device_id: String,
    /// The CDI device IDs prepare returned.
    #[serde(default)]
    pub cdi_device_ids: Vec<String>,
}

/// Why a checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read the DRA checkpoint {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the DRA checkpoint {path} is not valid: {why}")]
    Invalid { path: String, why: String },
}

impl Checkpoint {
    pub fn empty() -> Checkpoint {
        Checkpoint {
            version: VERSION,
            claims: BTreeMap::new(),
        }
    }

    /// The checkpoint at `path`; an empty one when there is no file yet. A symlink at the path
    /// is refused (nobody but the driver puts a file there).
    pub fn read(path: &Path) -> Result<Checkpoint, ReadError> {
        let body = match crate::files::read_regular_nofollow(path, MAX_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Checkpoint::empty()),
            Err(source) => {
                return Err(ReadError::Io {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        Self::parse(&body).map_err(|why| ReadError::Invalid {
            path: path.display().to_string(),
            why,
        })
    }

    fn parse(body: &[u8]) -> Result<Checkpoint, String> {
        #[derive(Deserialize)]
        struct Head {
            version: Option<u32>,
        }
        let head: Head = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        match head.version {
            Some(VERSION) => serde_json::from_slice(body).map_err(|e| e.to_string()),
            Some(v) => Err(format!(
                "format version {v}; this build reads version {VERSION} (a newer driver wrote it?)"
            )),
            None => Err("no format version".into()),
        }
    }

    /// Replace the file at `path` with this checkpoint: a temp file (0600) beside it, synced,
    /// renamed over it, the directory synced, so a crash leaves the old record or the new one.
    /// The directory is made root's alone if it is new.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        crate::files::private_dir(dir)?;
        let body = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::files::write_atomic(path, &body, 0o600)?;
        fs::File::open(dir).and_then(|d| d.sync_all())
    }

    /// The claim (UID and record) holding the NIC `device_id`, other than `except`.
    pub fn holder(&self, device_id: &str, except: &str) -> Option<(&str, &PreparedClaim)> {
        self.claims
            .iter()
            .filter(|(uid, _)| uid.as_str() != except)
            .find(|(_, c)| c.devices.iter().any(|d| d.device_id == device_id))
            .map(|(uid, c)| (uid.as_str(), c))
    }

    /// The devices prepared for pod `pod_uid` under request `request` (or one of its
    /// subrequests, `request/...`), in claim then device order. Entries of other pods are
    /// never returned, whatever the request is called.
    pub fn for_pod(&self, pod_uid: &str, request: &str) -> Vec<&PreparedDevice> {
        self.claims_for_pod(pod_uid, request)
            .into_iter()
            .map(|(_, _, d)| d)
            .collect()
    }

    /// [`for_pod`](Self::for_pod), each device with its claim (UID and record).
    pub fn claims_for_pod(
        &self,
        pod_uid: &str,
        request: &str,
    ) -> Vec<(&str, &PreparedClaim, &PreparedDevice)> {
        if pod_uid.is_empty() {
            return Vec::new();
        }
        self.claims
            .iter()
            .filter(|(_, c)| c.pods.iter().any(|p| p == pod_uid))
            .flat_map(|(uid, c)| c.devices.iter().map(move |d| (uid.as_str(), c, d)))
            .filter(|(_, _, d)| {
                d.request == request
                    || d.request
                        .strip_prefix(request)
                        .is_some_and(|rest| rest.starts_with('/'))
            })
            .collect()
    }

    /// The devices prepared for pod `pod_uid` in its extended-resource claims
    /// ([`PreparedClaim::extended_resource`]), in claim then device order. As with
    /// [`for_pod`](Self::for_pod), only claims reserved for that pod are looked at, and no UID
    /// is nobody's.
    pub fn extended_for_pod(&self, pod_uid: &str) -> Vec<(&str, &PreparedClaim, &PreparedDevice)> {
        if pod_uid.is_empty() {
            return Vec::new();
        }
        self.claims
            .iter()
            .filter(|(_, c)| c.extended_resource && c.pods.iter().any(|p| p == pod_uid))
            .flat_map(|(uid, c)| c.devices.iter().map(move |d| (uid.as_str(), c, d)))
            .collect()
    }

    /// Every request name prepared for pod `pod_uid`, for a message.
    pub fn requests_of(&self, pod_uid: &str) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .claims
            .values()
            .filter(|c| c.pods.iter().any(|p| p == pod_uid))
            .flat_map(|c| c.devices.iter().map(|d| d.request.as_str()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(request: &str, id: &str) -> PreparedDevice {
        PreparedDevice {
            request: request.into(),
            pool: "node-a".into(),
            device: id.replace([':', '.'], "-"),
            device_id: id.into(),
            cdi_device_ids: vec![],
        }
    }

    fn two_pods() -> Checkpoint {
        let mut c = Checkpoint::empty();
        c.claims.insert(
            "claim-1".into(),
            PreparedClaim {
                namespace: "team-a".into(),
                name: "rail".into(),
                pods: vec!["pod-a".into()],
                devices: vec![
                    device("nic", "0000:3b:00.0"),
                    device("gpu-nic/rail0", "0000:3b:00.1"),
                ],
                extended_resource: false,
                metadata: true,
            },
        );
        c.claims.insert(
            "claim-2".into(),
            PreparedClaim {
                namespace: "team-b".into(),
                name: "rail".into(),
                pods: vec!["pod-b".into()],
                devices: vec![device("nic", "0000:5e:00.0")],
                extended_resource: false,
                metadata: false,
            },
        );
        c
    }

    /// [`two_pods`] and the scheduler's extended-resource claims of pods b and c.
    fn with_extended() -> Checkpoint {
        let mut c = two_pods();
        for (uid, pod, ids) in [
            ("claim-3", "pod-b", &["0000:af:00.0", "0000:af:00.1"][..]),
            ("claim-4", "pod-c", &["0000:d8:00.0"][..]),
        ] {
            c.claims.insert(
                uid.into(),
                PreparedClaim {
                    namespace: "team-b".into(),
                    name: format!("{pod}-extended-resources-x7k2p"),
                    pods: vec![pod.into()],
                    devices: ids
                        .iter()
                        .enumerate()
                        .map(|(j, id)| device(&format!("container-0-request-{j}"), id))
                        .collect(),
                    extended_resource: true,
                    metadata: false,
                },
            );
        }
        c
    }

    #[test]
    fn a_pod_finds_only_its_own_extended_resource_claims_devices() {
        let c = with_extended();
        let ids = |pod| {
            c.extended_for_pod(pod)
                .iter()
                .map(|(uid, _, d)| format!("{uid} {}", d.device_id))
                .collect::<Vec<_>>()
        };
        // Pod b's claim-2 (a claim it named) is not an extended-resource claim.
        assert_eq!(
            ids("pod-b"),
            ["claim-3 0000:af:00.0", "claim-3 0000:af:00.1"]
        );
        assert_eq!(ids("pod-c"), ["claim-4 0000:d8:00.0"]);
        assert!(ids("pod-a").is_empty(), "pod a has claims, none extended");
        assert!(ids("").is_empty(), "no UID is nobody's");
        assert!(ids("pod-z").is_empty());
    }

    #[test]
    fn a_checkpoint_of_the_previous_format_reads_as_no_extended_claims_and_round_trips() {
        // What the driver wrote before `extendedResource` existed: the same version.
        let old = br#"{"version": 1, "claims": {"claim-1": {"namespace": "t", "name": "r",
            "pods": ["pod-a"], "devices": [{"request": "nic", "pool": "n", "device": "d",
            "deviceId": "0000:3b:00.0", "cdiDeviceIds": []}]}}}"#;
        let c = Checkpoint::parse(old).unwrap();
        assert!(!c.claims["claim-1"].extended_resource);
        assert_eq!(c.for_pod("pod-a", "nic").len(), 1);
        // An ordinary claim is written as before (an older driver reads it), an extended one
        // with the key (an older driver ignores it).
        let body = serde_json::to_string(&with_extended()).unwrap();
        assert_eq!(body.matches("extendedResource").count(), 2, "{body}");
        assert_eq!(Checkpoint::parse(body.as_bytes()).unwrap(), with_extended());
    }

    #[test]
    fn a_pod_finds_only_its_own_devices_whatever_the_request_is_called() {
        let c = two_pods();
        let ids = |pod, req| {
            c.for_pod(pod, req)
                .iter()
                .map(|d| d.device_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("pod-a", "nic"), ["0000:3b:00.0"]);
        assert_eq!(ids("pod-b", "nic"), ["0000:5e:00.0"]);
        // A subrequest answers to its request's name, not to a prefix of it.
        assert_eq!(ids("pod-a", "gpu-nic"), ["0000:3b:00.1"]);
        assert!(ids("pod-a", "gpu").is_empty());
        assert!(ids("pod-c", "nic").is_empty());
        assert!(ids("", "nic").is_empty(), "no UID is nobody's");
        assert_eq!(c.requests_of("pod-a"), ["gpu-nic/rail0", "nic"]);
    }

    #[test]
    fn the_holder_of_a_nic_is_found_except_the_claim_asking() {
        let c = two_pods();
        assert_eq!(
            c.holder("0000:5e:00.0", "claim-1").map(|h| h.0),
            Some("claim-2")
        );
        assert_eq!(c.holder("0000:5e:00.0", "claim-2"), None);
        assert_eq!(c.holder("0000:af:00.0", ""), None);
    }

    #[test]
    fn it_round_trips_through_a_private_file_and_refuses_other_versions() {
        let dir = std::env::temp_dir().join(format!("rhd-dra-cp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let p = path(&dir);
        assert_eq!(Checkpoint::read(&p).unwrap(), Checkpoint::empty());
        let c = two_pods();
        c.write(&p).unwrap();
        assert_eq!(Checkpoint::read(&p).unwrap(), c);
        // The metadata flag is written only when set, and read as false when absent (an
        // older driver's checkpoint).
        let text = fs::read_to_string(&p).unwrap();
        assert_eq!(text.matches("\"metadata\": true").count(), 1, "{text}");
        assert!(!text.contains("\"metadata\": false"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(p.parent().unwrap()), 0o700);
        let leftovers: Vec<_> = fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["checkpoint.json"], "no temp file left");

        fs::write(&p, br#"{"version": 2, "claims": {}}"#).unwrap();
        let e = Checkpoint::read(&p).unwrap_err().to_string();
        assert!(e.contains("format version 2"), "{e}");
        fs::write(&p, br#"{"claims": {}}"#).unwrap();
        assert!(Checkpoint::read(&p).is_err());
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &p).unwrap();
        assert!(Checkpoint::read(&p).is_err(), "a symlink is not followed");
        let _ = fs::remove_dir_all(&dir);
    }
}
