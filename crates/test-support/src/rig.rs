//! One test's world: temp dirs, names, the node configuration, IPAM configs, and calls through
//! libcni or directly.

use crate::client::driver;
use crate::net::{Netns, ORIG_MTU, Veth};
use crate::process::{RunOut, run_plugin_at};
use crate::programs::{AGENT, NODE_CONFIG_ENV, SYSTEM_CNI_DIR, plugin};
use crate::root::require_root;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::{fmt, fs};

// ---------------------------------------------------------------- temp dirs

/// Where every test's temp dirs live: a private directory made once per test binary by
/// `mkdtemp("/tmp/rhd-XXXXXX")` and removed when the binary exits. Never under the checkout,
/// whose path can be of any length: podman refuses a runroot over 50 characters and a unix
/// socket's path has 108 bytes (containerd's, the dhcp daemon's), so these paths stay short
/// wherever the repository is cloned (`scripts/test.sh` runs those tests from a 150+ character
/// checkout path to keep it so). `$TMPDIR` is not used: it can be as long as it likes.
pub fn short_tmp() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_root() {
        if let Some(p) = ROOT.get() {
            let _ = fs::remove_dir_all(p);
        }
    }
    ROOT.get_or_init(|| {
        let mut template = *b"/tmp/rhd-XXXXXX\0";
        // SAFETY: a NUL-terminated, writable template, as mkdtemp(3) wants.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        assert!(
            !p.is_null(),
            "mkdtemp /tmp/rhd-XXXXXX: {}",
            std::io::Error::last_os_error()
        );
        let path = PathBuf::from(String::from_utf8_lossy(&template[..template.len() - 1]).as_ref());
        // SAFETY: registers a plain function; the test harness exits through exit(3).
        unsafe { libc::atexit(remove_root) };
        path
    })
}

/// A directory under [`short_tmp`] removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let p = short_tmp().join(format!("{label}-{}", next_id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Every regular file (or symlink) below `dir`, recursively; empty if `dir` is missing.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_under(&p)),
            _ => out.push(p),
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------- the rig

/// One test's world: unique names, a temp dir holding the plugin's stateDir, host-local's
/// dataDir, libcni's cache, CNI_PATH dirs, config files and traces.
pub struct Rig {
    pub n: u32,
    pub dir: TempDir,
    calls: AtomicU32,
    /// IPAM plugins this rig's tests wrote (see [`Rig::allow_ipam`]) and the policy keys last
    /// given to [`Rig::set_node`]: the node file is written from both.
    node_keys: std::sync::Mutex<(Vec<String>, Value)>,
    /// The plugin binary this rig's calls run ([`plugin`] unless [`Rig::use_plugin`] said).
    bin: std::sync::Mutex<PathBuf>,
}

impl Rig {
    pub fn new() -> Rig {
        require_root();
        let n = next_id();
        let dir = TempDir::new(&format!("rig{n}"));
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(plugin(), bin.join("rdma-host-device")).unwrap();
        let rig = Rig {
            n,
            dir,
            calls: AtomicU32::new(0),
            node_keys: std::sync::Mutex::new((Vec::new(), json!({}))),
            bin: std::sync::Mutex::new(plugin()),
        };
        rig.set_node(json!({}));
        rig
    }

    /// Run `bin` as the plugin from now on, in [`Rig::call`] and in CNI_PATH ([`Rig::drive`]):
    /// what the DaemonSet's install container does when it replaces /opt/cni/bin's binary.
    pub fn use_plugin(&self, bin: &Path) {
        let link = self.bin_dir().join("rdma-host-device");
        let tmp = self.bin_dir().join(".rdma-host-device.new");
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(bin, &tmp).unwrap();
        fs::rename(&tmp, &link).unwrap();
        *self.bin.lock().unwrap_or_else(|e| e.into_inner()) = bin.to_path_buf();
    }

    /// The node configuration file every call of this rig uses (through
    /// [`NODE_CONFIG_ENV`]): this rig's stateDir and logDir, plus `extra` keys (a policy).
    /// Unless `extra` says `ipamPlugins`, the node allows the default IPAM plugins plus those
    /// given to [`Rig::allow_ipam`].
    pub fn set_node(&self, extra: Value) {
        let mut keys = self.node_keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.1 = extra.clone();
        // IPAM paths: the node's defaults plus this rig's dataDir (where the tests' host-local
        // writes), unless the test sets ipamPaths itself; what IPAM may read: the defaults
        // plus the shell and its tools, which the tests' own IPAM scripts (fixed_ipam) run.
        let mut ipam_paths: Vec<Value> = rdma_host_device_core::node::DEFAULT_IPAM_PATHS
            .iter()
            .map(|p| json!(p))
            .collect();
        ipam_paths.push(json!(self.data_dir()));
        let mut ipam_read: Vec<Value> = rdma_host_device_core::node::DEFAULT_IPAM_READ_PATHS
            .iter()
            .map(|p| json!(p))
            .collect();
        ipam_read.extend([json!("/bin"), json!("/usr/bin")]);
        let mut node = json!({
            "stateDir": self.state_dir(),
            "logDir": self.log_dir(),
            "ipamPaths": ipam_paths,
            "ipamReadPaths": ipam_read,
        });
        if !keys.0.is_empty() {
            let mut allowed: Vec<String> = rdma_host_device_core::node::DEFAULT_IPAM_PLUGINS
                .iter()
                .map(|s| s.to_string())
                .collect();
            allowed.extend(keys.0.iter().cloned());
            node["ipamPlugins"] = json!(allowed);
        }
        if let Value::Object(m) = extra {
            for (k, v) in m {
                node[k] = v;
            }
        }
        fs::write(
            self.node_config(),
            serde_json::to_vec_pretty(&node).unwrap(),
        )
        .unwrap();
    }
    /// Let this rig's node run `name` as IPAM (a test plugin), besides the default ones.
    pub fn allow_ipam(&self, name: &str) {
        let extra = {
            let mut keys = self.node_keys.lock().unwrap_or_else(|e| e.into_inner());
            if !keys.0.iter().any(|n| n == name) {
                keys.0.push(name.to_owned());
            }
            keys.1.clone()
        };
        self.set_node(extra);
    }
    pub fn node_config(&self) -> PathBuf {
        self.dir.path().join("node.json")
    }
    /// The node's log directory: the only place a config's `logFile` lands.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Host NIC name for slot `i` (a test may need several).
    pub fn nic_name(&self, i: u32) -> String {
        format!("rh{}n{}x{}", tag(), self.n, i)
    }
    pub fn peer_name(&self, i: u32) -> String {
        format!("rh{}p{}x{}", tag(), self.n, i)
    }
    /// A veth host NIC with MTU [`ORIG_MTU`].
    pub fn nic(&self, i: u32) -> Veth {
        Veth::new(&self.nic_name(i), &self.peer_name(i), ORIG_MTU)
    }
    pub fn netns(&self, i: u32) -> Netns {
        Netns::new(&format!("rhd-{}-{}-{}", std::process::id(), self.n, i))
    }
    pub fn cid(&self, i: u32) -> String {
        format!("cid-{}-{}-{}", std::process::id(), self.n, i)
    }
    pub fn net_name(&self) -> String {
        format!("rhdnet-{}-{}", std::process::id(), self.n)
    }
    /// Third octet for this test's 10.77.X.0/24.
    pub fn octet(&self) -> u32 {
        self.n % 250 + 1
    }
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("ipam-data")
    }
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("libcni-cache")
    }
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// Dir with the driver symlinked as `loopback` and `tuning`: the version shim in front of
    /// Debian's chained plugins (which stop at 1.0.0), see tests/libcni-driver/main.go. The
    /// IPAM plugins are NOT shimmed: our plugin negotiates their version itself, and the
    /// 1.1.0 tests prove that against Debian's real `static` and `host-local`.
    pub fn shim_dir(&self) -> PathBuf {
        let d = self.dir.path().join("ipam-shim");
        if !d.exists() {
            fs::create_dir_all(&d).unwrap();
            for n in ["loopback", "tuning"] {
                std::os::unix::fs::symlink(driver(), d.join(n)).unwrap();
            }
        }
        d
    }

    /// CNI_PATH for a config of `version`: our binary, then (1.1.0 only) the version shim,
    /// then Debian's plugins.
    pub fn cni_path(&self, version: &str) -> String {
        let mut p = vec![self.bin_dir().display().to_string()];
        if version == "1.1.0" {
            p.push(self.shim_dir().display().to_string());
        }
        p.push(SYSTEM_CNI_DIR.to_owned());
        p.join(":")
    }

    /// Files left in the plugin's stateDir.
    pub fn state_files(&self) -> Vec<PathBuf> {
        files_under(&self.state_dir())
    }

    pub fn assert_state_empty(&self, ctx: &dyn fmt::Display) {
        let f = self.state_files();
        assert!(f.is_empty(), "stateDir not empty: {f:?}\n{ctx}");
    }

    /// What a user checks once an attachment is undone (DEL, or an ADD that failed): the NIC
    /// home with its name, MAC and MTU (and not in `pod`), and nothing left in the stateDir.
    pub fn assert_detached(&self, nic: &Veth, pod: Option<&Netns>, ctx: &dyn fmt::Display) {
        nic.assert_home(pod, ctx);
        self.assert_state_empty(ctx);
    }

    /// host-local allocations for `net` in this rig's dataDir: (ip file, content).
    pub fn allocations(&self, net: &str) -> Vec<(String, String)> {
        let d = self.data_dir().join(net);
        let Ok(rd) = fs::read_dir(&d) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if name == "lock" || name.starts_with("last_reserved_ip") {
                    return None;
                }
                let content = fs::read_to_string(e.path()).unwrap_or_default();
                Some((name, content))
            })
            .collect()
    }

    /// host-local allocations belonging to container `cid`.
    pub fn allocations_of(&self, net: &str, cid: &str) -> Vec<(String, String)> {
        self.allocations(net)
            .into_iter()
            .filter(|(_, c)| c.lines().next().map(str::trim) == Some(cid))
            .collect()
    }

    /// A test IPAM plugin `name`, written into this rig's CNI_PATH (bin dir): a shell script
    /// that answers ADD with `result` as given (a 1.1.0-style result, e.g. routes with
    /// `table`/`mtu`/`tos`, which Debian's 1.0.0-era plugins never emit), VERSION with every
    /// version, and DEL/CHECK with nothing. The rig's node allows it (`ipamPlugins`). Returns
    /// the config's `ipam` object for it.
    pub fn fixed_ipam(&self, name: &str, result: &Value) -> Value {
        use std::os::unix::fs::PermissionsExt;
        let p = self.bin_dir().join(name);
        let script = format!(
            "#!/bin/sh\n\
             cat >/dev/null\n\
             case \"$CNI_COMMAND\" in\n\
             ADD) cat <<'RESULT_EOF'\n{result}\nRESULT_EOF\n;;\n\
             VERSION) echo '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}}';;\n\
             esac\n"
        );
        fs::write(&p, script).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        self.allow_ipam(name);
        json!({ "type": name })
    }

    /// Static IPAM: 10.77.X.2/24 via 10.77.X.1, plus a gateway-less route to 10.78.0.0/16.
    pub fn static_ipam(&self) -> Value {
        let o = self.octet();
        json!({
            "type": "static",
            "addresses": [{"address": format!("10.77.{o}.2/24"), "gateway": format!("10.77.{o}.1")}],
            "routes": [{"dst": "10.78.0.0/16"}]
        })
    }

    /// host-local IPAM on 10.77.X.0/24 with this rig's dataDir.
    pub fn host_local_ipam(&self) -> Value {
        let o = self.octet();
        json!({
            "type": "host-local",
            "dataDir": self.data_dir(),
            "ranges": [[{"subnet": format!("10.77.{o}.0/24"), "rangeStart": format!("10.77.{o}.10"),
                          "rangeEnd": format!("10.77.{o}.50"), "gateway": format!("10.77.{o}.1")}]],
            "routes": [{"dst": "10.78.0.0/16"}]
        })
    }

    /// Our plugin's config: `selector` (an object of selector keys) merged in, static IPAM.
    /// (The stateDir is the node's: see [`Rig::set_node`].)
    pub fn conf(&self, version: &str, selector: Value) -> Value {
        let mut c = json!({
            "cniVersion": version,
            "name": self.net_name(),
            "type": "rdma-host-device",
            "ipam": self.static_ipam(),
        });
        if let Value::Object(sel) = selector {
            for (k, v) in sel {
                c[k] = v;
            }
        }
        c
    }

    /// [`Rig::conf`] with host-local IPAM ([`Rig::host_local_ipam`]) instead of static: what a
    /// test uses where an address leaked on the node must show.
    pub fn host_local_conf(&self, version: &str, selector: Value) -> Value {
        let mut c = self.conf(version, selector);
        c["ipam"] = self.host_local_ipam();
        c
    }

    /// Write a config file (`file` must end in .conf or .conflist).
    pub fn write(&self, file: &str, conf: &Value) -> PathBuf {
        let p = self.dir.path().join(file);
        fs::write(&p, serde_json::to_vec_pretty(conf).unwrap()).unwrap();
        p
    }

    /// Run the libcni driver. `extra` are more flags (`-cap`, `-args`, `-valid`).
    pub fn drive(
        &self,
        cmd: &str,
        conf: &Path,
        netns: &str,
        cid: &str,
        ifname: &str,
        extra: &[&str],
    ) -> RunOut {
        let text = fs::read_to_string(conf).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let version = v["cniVersion"].as_str().unwrap_or("").to_owned();
        let k = self.calls.fetch_add(1, Ordering::SeqCst);
        let trace = self.dir.path().join(format!("trace-{k}.jsonl"));
        let path = self.cni_path(&version);
        let cache = self.cache_dir();
        let mut args: Vec<String> = vec![
            "-cmd".into(),
            cmd.into(),
            "-conf".into(),
            conf.display().to_string(),
            "-netns".into(),
            netns.into(),
            "-cid".into(),
            cid.into(),
            "-ifname".into(),
            ifname.into(),
            "-path".into(),
            path,
            "-cache".into(),
            cache.display().to_string(),
            "-trace".into(),
            trace.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = Command::new(driver())
            .args(&args)
            .env(NODE_CONFIG_ENV, self.node_config())
            .stdin(Stdio::null())
            .output()
            .expect("run libcni driver");
        let trace_v = fs::read_to_string(&trace)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        RunOut {
            what: format!("driver {} (config: {})", args.join(" "), text),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            trace: trace_v,
        }
    }
}

impl Default for Rig {
    fn default() -> Self {
        Rig::new()
    }
}

// ---------------------------------------------------------------- direct calls per verb

impl Rig {
    /// Call the plugin directly (no libcni) with `cmd` (ADD, DEL, ...), the config `conf`, and
    /// `extra` environment variables (e.g. `RHD_FAULT`). CNI_PATH is this rig's for the config's
    /// version.
    pub fn call(
        &self,
        cmd: &str,
        conf: &Value,
        netns: &str,
        cid: &str,
        ifname: &str,
        extra: &[(&str, &str)],
    ) -> RunOut {
        let version = conf["cniVersion"].as_str().unwrap_or("1.0.0");
        let path = self.cni_path(version);
        let mut env: Vec<(&str, Option<&str>)> = vec![
            ("CNI_COMMAND", Some(cmd)),
            ("CNI_CONTAINERID", Some(cid)),
            ("CNI_NETNS", Some(netns)),
            ("CNI_IFNAME", Some(ifname)),
            ("CNI_PATH", Some(&path)),
        ];
        let node = self.node_config().display().to_string();
        env.push((NODE_CONFIG_ENV, Some(&node)));
        env.extend(extra.iter().map(|(k, v)| (*k, Some(*v))));
        let bin = self.bin.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out = run_plugin_at(&bin, &env, &serde_json::to_vec(conf).unwrap());
        out.what = format!("{cmd} {cid}/{ifname} in {netns:?} env {extra:?}\n  conf {conf}");
        out
    }

    /// [`Rig::call`] on a thread of its own, for a test that acts while the call is held at a
    /// fault point (`extra` naming `RHD_FAULT`).
    pub fn call_on_thread(
        self: &std::sync::Arc<Self>,
        cmd: &'static str,
        conf: &Value,
        netns: String,
        cid: String,
        ifname: &'static str,
        extra: &'static [(&'static str, &'static str)],
    ) -> std::thread::JoinHandle<RunOut> {
        let (rig, conf) = (self.clone(), conf.clone());
        std::thread::spawn(move || rig.call(cmd, &conf, &netns, &cid, ifname, extra))
    }
}

// ---------------------------------------------------------------- the inspect subcommand

impl Rig {
    /// `rdma-host-device-agent inspect ARGS --state-dir RIG'S`, on the host or inside `node` (a
    /// netns standing for another node): its stdout. Panics if inspect fails.
    pub fn inspect(&self, node: Option<&Netns>, args: &[&str]) -> String {
        let mut c = match node {
            Some(n) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &n.name]).arg(AGENT);
                c
            }
            None => Command::new(AGENT),
        };
        let out = c
            .arg("inspect")
            .args(args)
            .arg("--state-dir")
            .arg(self.state_dir())
            .env_remove("CNI_COMMAND")
            .output()
            .expect("run inspect");
        assert!(out.status.success(), "inspect failed: {out:?}");
        String::from_utf8(out.stdout).expect("inspect prints UTF-8")
    }

    /// `inspect --json`'s report, on the host or inside `node`.
    pub fn inspect_json(&self, node: Option<&Netns>) -> Value {
        serde_json::from_str(&self.inspect(node, &["--json"])).expect("inspect --json prints JSON")
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(1);

/// A number of this process's own for each thing a test makes.
pub(crate) fn next_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// Short per-process tag (3 hex digits) so names from concurrent test binaries differ.
pub fn tag() -> String {
    format!("{:03x}", std::process::id() & 0xfff)
}
