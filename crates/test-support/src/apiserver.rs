//! The API server a test talks to: the real kube-apiserver of the cluster that is up
//! (tests/cluster/cluster.sh through `Cluster::api`), or tests/kube/apiserver.py (the
//! stand-in) for the faults the real one is not made to show (a server that drops a field,
//! a write refused on demand).

use crate::cluster::{ApiUse, Cluster};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct ApiServer {
    /// The process started for this test (the stand-in, or a second real API server); None
    /// for the cluster's own.
    child: Option<Child>,
    /// Whether `log` is a real API server's audit log (else the stand-in's request log).
    audited: bool,
    pub url: String,
    pub ca: PathBuf,
    pub token: PathBuf,
    /// The stand-in's request log, or the real server's audit log (users' requests only).
    pub log: PathBuf,
    /// A real server's cluster, kept up while this lives (held, never read).
    _cluster: Option<ApiUse>,
}

impl ApiServer {
    /// The real kube-apiserver of the cluster that is up, as its admin. The store is shared by
    /// the tests that talk to it: each names its objects (nodes, slices, claims) its own way.
    /// API objects only: the node and its NICs stay free for tests that work them.
    pub fn real() -> ApiServer {
        let (c, using) = Cluster::api();
        ApiServer::of_cluster(c, using, 443, c.dir.join("logs/audit.log"), None)
    }

    /// A real API server of cluster `c` on `port`, as its admin (the cluster's CA and token),
    /// `log` its audit log, `child` its process if this test started it.
    fn of_cluster(
        c: &Cluster,
        using: ApiUse,
        port: u16,
        log: PathBuf,
        child: Option<Child>,
    ) -> ApiServer {
        ApiServer {
            _cluster: Some(using),
            child,
            audited: true,
            url: format!("https://{}:{port}", c.node_ip),
            ca: c.dir.join("pki/ca.crt"),
            token: c.dir.join("pki/admin.token"),
            log,
        }
    }

    /// The same server's CA and token at an address where nothing listens: no API server at
    /// all, for a client started while it is away.
    pub fn nowhere(&self) -> ApiServer {
        let host = self.url.rsplit_once(':').map_or(&*self.url, |(h, _)| h);
        ApiServer {
            _cluster: None,
            child: None,
            audited: self.audited,
            url: format!("{host}:1"),
            ca: self.ca.clone(),
            token: self.token.clone(),
            log: self.log.clone(),
        }
    }

    /// A second real kube-apiserver on the cluster's etcd, started with the cluster's own
    /// options (read from the running one) and `--feature-gates GATES`, on `port`: a server
    /// with another release's features, e.g. `DRADeviceTaints=false` (GA in 1.37, still
    /// switchable) for one that drops device taints. Stopped when dropped.
    pub fn real_with_feature_gates(gates: &str, port: u16) -> ApiServer {
        let (c, using) = Cluster::api();
        let pid = std::fs::read_to_string(c.dir.join("pids/kube-apiserver"))
            .expect("the cluster's kube-apiserver pid");
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim()))
            .expect("the cluster's kube-apiserver command line");
        let mut args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert!(
            args.first().is_some_and(|a| a.ends_with("kube-apiserver")),
            "pid {pid} is not the API server: {args:?}"
        );
        let audit = c.dir.join(format!("logs/audit-{port}.log"));
        for (flag, value) in [
            ("--secure-port", port.to_string()),
            ("--audit-log-path", audit.display().to_string()),
        ] {
            let i = args.iter().position(|a| a == flag).expect(flag);
            args[i + 1] = value;
        }
        // The cluster's own server keeps the `kubernetes` Service's endpoints.
        args.extend(["--endpoint-reconciler-type".into(), "none".into()]);
        args.extend(["--feature-gates".into(), gates.into()]);
        let log = c.dir.join(format!("logs/kube-apiserver-{port}.log"));
        let child = c
            .inside(&args[0])
            .args(&args[1..])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start a second kube-apiserver");
        let mut api = ApiServer::of_cluster(c, using, port, audit, Some(child));
        let t = std::time::Instant::now();
        while !api.try_call("GET", "/readyz", None).0 {
            if let Some(st) = api.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "the second kube-apiserver exited ({st}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(90),
                "the second kube-apiserver is not ready; its log: {}",
                log.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        api
    }

    /// A fresh stand-in with an empty store, its files (CA, token, log) in `dir`; `args` are
    /// its options (`--no-device-taints`, `--no-device-status`, `--history N`).
    pub fn start(dir: &Path, args: &[&str]) -> ApiServer {
        let script = crate::process::repo().join("tests/kube/apiserver.py");
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
            _cluster: None,
            child: Some(child),
            audited: false,
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

    /// The requests it served so far, one line each (method, path, status). For the real
    /// server, from its audit log: the verb as the HTTP method it came as, the request URI and
    /// the answer's code.
    pub fn requests(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        if !self.audited {
            return text;
        }
        let mut out = String::new();
        for e in text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        {
            let method = match e["verb"].as_str().unwrap_or_default() {
                "get" | "list" | "watch" => "GET",
                "create" => "POST",
                "update" => "PUT",
                "patch" => "PATCH",
                "delete" | "deletecollection" => "DELETE",
                other => other,
            };
            out += &format!(
                "{method} {} {}\n",
                e["requestURI"].as_str().unwrap_or_default(),
                e["responseStatus"]["code"]
            );
        }
        out
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
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
