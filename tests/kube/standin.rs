//! Start tests/kube/apiserver.py (the kube-apiserver stand-in) for a test, and stop it when the
//! test is done. Shared by the test binaries that talk to the API (`#[path]`-included).
#![allow(dead_code)] // each test binary uses part of it

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct ApiServer {
    child: Child,
    pub url: String,
    pub ca: PathBuf,
    pub token: PathBuf,
    pub log: PathBuf,
}

impl ApiServer {
    /// A fresh stand-in with an empty store, its files (CA, token, log) in `dir`; `args` are
    /// its options (`--no-device-taints`, `--no-device-status`, `--history N`).
    pub fn start(dir: &Path, args: &[&str]) -> ApiServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube/apiserver.py");
        let log = dir.join("apiserver.log");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start tests/kube/apiserver.py (python3)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!(
                "apiserver.py said {line:?} ({e}); its log: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        ApiServer {
            child,
            url: v["url"].as_str().unwrap().to_owned(),
            ca: v["ca"].as_str().unwrap().into(),
            token: v["token"].as_str().unwrap().into(),
            log,
        }
    }

    pub fn endpoint(&self) -> rdma_host_device_agent::kube::Endpoint {
        rdma_host_device_agent::kube::Endpoint::Explicit {
            server: self.url.clone(),
            ca: self.ca.clone(),
            token: self.token.clone(),
        }
    }

    /// The requests it served so far, one line each (method, path, status).
    pub fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One REST call as a user or the scheduler makes it (curl, with the stand-in's CA and
    /// token): `method path`, `body` as JSON if any. Whether it succeeded, and the answer's
    /// JSON (Null if it is none).
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (bool, serde_json::Value) {
        use std::io::Write;
        let token = std::fs::read_to_string(&self.token).unwrap();
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--fail-with-body", "-X", method, "--cacert"])
            .arg(&self.ca)
            .args(["-H", &format!("Authorization: Bearer {}", token.trim())])
            .args(["-H", "Content-Type: application/json"]);
        if body.is_some() {
            cmd.args(["--data-binary", "@-"]);
        }
        let out = cmd
            .arg(format!("{}{path}", self.url))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                let mut stdin = c.stdin.take().unwrap();
                if let Some(b) = body {
                    stdin.write_all(b.to_string().as_bytes())?;
                }
                drop(stdin);
                c.wait_with_output()
            })
            .expect("curl");
        (
            out.status.success(),
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
        )
    }

    /// [`try_call`](Self::try_call) for a call that must succeed: the answer's JSON.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> serde_json::Value {
        let (ok, v) = self.try_call(method, path, body);
        assert!(ok, "{method} {path}: {v}");
        v
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
