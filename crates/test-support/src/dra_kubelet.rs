//! The kubelet stand-in (tests/dra/kubelet.py) as the DRA tests drive it, and our driver
//! started the way they start it.

use crate::apiserver::ApiServer;
use crate::programs::{AGENT, NODE_CONFIG_ENV, TARGET_TMP};
use crate::rig::Rig;
use crate::standin::{Logged, StandIn};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

pub const DRIVER: &str = "rdma-host-device.io";

/// The kubelet stand-in (tests/dra/kubelet.py).
pub struct Kubelet(pub StandIn);

impl Kubelet {
    pub fn start(root: &Path) -> Kubelet {
        let reg = Path::new(TARGET_TMP).join("reg-stubs");
        let dra = Path::new(TARGET_TMP).join("dra-stubs");
        Kubelet(StandIn::start(
            "dra/kubelet.py",
            &[root.as_os_str()],
            &[
                ("RHD_REG_STUBS", reg.as_os_str()),
                ("RHD_DRA_STUBS", dra.as_os_str()),
            ],
            "watching",
        ))
    }

    pub fn ask(&mut self, cmd: Value) -> Value {
        self.0.ask(cmd)
    }

    /// NodePrepareResources for `claims` ((name, uid) in namespace `team`): the answer by UID.
    pub fn prepare(&mut self, claims: &[(&str, &str)]) -> Value {
        self.prepare_in("team", claims)
    }

    /// [`prepare`](Self::prepare) for claims in namespace `ns`.
    pub fn prepare_in(&mut self, ns: &str, claims: &[(&str, &str)]) -> Value {
        let r = self.ask(json!({"cmd": "prepare", "driver": DRIVER, "claims": refs(ns, claims)}));
        assert!(r["error"].is_null(), "{r}");
        r["claims"].clone()
    }

    /// NodeUnprepareResources for `claims` ((name, uid) in namespace `ns`): the answer by UID.
    pub fn unprepare_in(&mut self, ns: &str, claims: &[(&str, &str)]) -> Value {
        let r = self.ask(json!({"cmd": "unprepare", "driver": DRIVER, "claims": refs(ns, claims)}));
        assert!(r["error"].is_null(), "{r}");
        r["claims"].clone()
    }
}

pub fn refs(ns: &str, claims: &[(&str, &str)]) -> Value {
    claims
        .iter()
        .map(|(name, uid)| json!({"namespace": ns, "name": name, "uid": uid}))
        .collect()
}

/// The driver under test (node `node-a`), its log in a file of `rig`'s directory.
pub fn start_driver(rig: &Rig, kubelet: &Path, api: &ApiServer) -> Logged {
    start_driver_on(rig, kubelet, api, "node-a")
}

/// [`start_driver`] for node `node`.
pub fn start_driver_on(rig: &Rig, kubelet: &Path, api: &ApiServer, node: &str) -> Logged {
    let log = rig.dir.path().join(format!(
        "dra-{}.log",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut cmd = Command::new(AGENT);
    cmd.args(["dra", "--node-name", node, "--kubelet-dir"])
        .arg(kubelet)
        .arg("--kube-server")
        .arg(&api.url)
        .arg("--kube-ca")
        .arg(&api.ca)
        .arg("--kube-token")
        .arg(&api.token)
        .env(NODE_CONFIG_ENV, rig.node_config());
    Logged::spawn(&mut cmd, log, "the DRA driver")
}
