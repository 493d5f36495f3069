//! Shared rig for the integration tests: temp dirs, named netns and veth "host NICs" with
//! RAII cleanup, link/route inspection through `ip -j`, the libcni driver (built once per
//! test binary), and direct plugin invocation.
//!
//! Tests run in parallel threads, so every name carries a per-process tag and a per-test
//! counter. Tests need root (netns, links); they fail loudly without it, and without `go`.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The plugin under test.
pub const PLUGIN: &str = env!("CARGO_BIN_EXE_rdma-host-device");

/// The binary the tests run: [`PLUGIN`], or `$RHD_TEST_PLUGIN` to aim the same suite at
/// another plugin (e.g. `/usr/lib/cni/host-device`, to see the suite catch its faults).
pub fn plugin() -> PathBuf {
    std::env::var_os("RHD_TEST_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(PLUGIN))
}
/// Cargo's scratch dir for integration tests (target/tmp).
pub const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");
/// Where Debian's plugins (static, host-local, loopback, tuning, ...) live.
pub const SYSTEM_CNI_DIR: &str = "/usr/lib/cni";
pub const ALL_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// The MTU every test NIC starts with, so a restored MTU is recognisable.
pub const ORIG_MTU: u64 = 1337;

static COUNTER: AtomicU32 = AtomicU32::new(1);

fn next_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// Short per-process tag (3 hex digits) so names from concurrent test binaries differ.
pub fn tag() -> String {
    format!("{:03x}", std::process::id() & 0xfff)
}

/// Where the plugin reads the node configuration from (see src/node.rs).
pub const NODE_CONFIG_ENV: &str = "RDMA_HOST_DEVICE_NODE_CONFIG";

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "these integration tests need root (netns, links)");
}

// ---------------------------------------------------------------- commands

/// Run a command, return its output; panic only if it cannot start.
pub fn run(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {prog} {args:?}: {e}"))
}

/// `ip ARGS`, panicking with stderr on failure.
pub fn ip(args: &[&str]) -> String {
    let out = run("ip", args);
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip [-n NS] ARGS`.
pub fn ip_in(ns: Option<&str>, args: &[&str]) -> Output {
    let mut full: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        full.extend(["-n", ns]);
    }
    full.extend(args);
    run("ip", &full)
}

// ---------------------------------------------------------------- temp dirs

/// A directory under target/tmp removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let p =
            Path::new(TARGET_TMP).join(format!("rhd-{label}-{}-{}", std::process::id(), next_id()));
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

// ---------------------------------------------------------------- netns

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        let _ = run("ip", &["netns", "del", name]);
        ip(&["netns", "add", name]);
        // lo up, like a runtime's sandbox would have it
        let _ = run("ip", &["-n", name, "link", "set", "lo", "up"]);
        Netns {
            name: name.to_owned(),
        }
    }
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
    /// Delete it now (idempotent; drop does it again harmlessly).
    pub fn delete(&self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.delete();
    }
}

// ---------------------------------------------------------------- links

/// A veth pair standing in for a host NIC: `name` is the NIC, `peer` stays on the host.
/// Drop deletes whatever is left of it on the host, found by name or by its MAC (so a NIC
/// that came home under a wrong name is cleaned too). Create it before the pod netns so the
/// netns is dropped first (a veth in a dying netns is destroyed with it).
pub struct Veth {
    pub name: String,
    pub peer: String,
    pub mac: String,
    pub mtu: u64,
}

impl Veth {
    pub fn new(name: &str, peer: &str, mtu: u64) -> Veth {
        assert!(name.len() <= 15 && peer.len() <= 15, "ifname too long");
        let _ = run("ip", &["link", "del", name]);
        let _ = run("ip", &["link", "del", peer]);
        let m = mtu.to_string();
        ip(&[
            "link", "add", name, "mtu", &m, "type", "veth", "peer", "name", peer, "mtu", &m,
        ]);
        let mac = link(None, name).expect("new veth").mac;
        Veth {
            name: name.to_owned(),
            peer: peer.to_owned(),
            mac,
            mtu,
        }
    }

    /// The NIC as seen on the host under any name (by MAC).
    pub fn on_host(&self) -> Option<Link> {
        link_by_mac(None, &self.mac)
    }

    /// Assert the NIC is on the host with its original name and MTU, and not in `pod`.
    pub fn assert_home(&self, pod: Option<&Netns>, ctx: &dyn fmt::Display) {
        let l = link(None, &self.name);
        let Some(l) = l else {
            panic!(
                "NIC {} ({}) is not on the host under its original name; host has it as {:?}; pod has {:?}\n{ctx}",
                self.name,
                self.mac,
                self.on_host().map(|l| l.name),
                pod.map(|p| links(Some(&p.name))
                    .into_iter()
                    .map(|l| l.name)
                    .collect::<Vec<_>>())
            )
        };
        assert!(
            l.mac.eq_ignore_ascii_case(&self.mac),
            "host link {} has MAC {}, expected {}\n{ctx}",
            self.name,
            l.mac,
            self.mac
        );
        assert_eq!(
            l.mtu, self.mtu,
            "NIC {} is home but with MTU {} instead of its original {}\n{ctx}",
            self.name, l.mtu, self.mtu
        );
        if let Some(pod) = pod {
            assert!(
                link_by_mac(Some(&pod.name), &self.mac).is_none(),
                "the NIC's MAC is still present in the pod netns\n{ctx}"
            );
        }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        if let Some(l) = self.on_host() {
            let _ = run("ip", &["link", "del", &l.name]);
        }
        let _ = run("ip", &["link", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.peer]);
    }
}

/// One link as `ip -j addr show` reports it.
#[derive(Debug, Clone)]
pub struct Link {
    pub index: u64,
    pub name: String,
    pub mac: String,
    pub mtu: u64,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// "addr/prefix" strings.
    pub addrs: Vec<String>,
    pub alias: Option<String>,
}

fn parse_link(v: &Value) -> Link {
    let flags: Vec<&str> = v["flags"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Link {
        index: v["ifindex"].as_u64().unwrap_or(0),
        name: v["ifname"].as_str().unwrap_or("").to_owned(),
        mac: v["address"].as_str().unwrap_or("").to_lowercase(),
        mtu: v["mtu"].as_u64().unwrap_or(0),
        up: flags.contains(&"UP"),
        addrs: v["addr_info"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|ai| {
                        format!(
                            "{}/{}",
                            ai["local"].as_str().unwrap_or(""),
                            ai["prefixlen"].as_u64().unwrap_or(0)
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        alias: v["ifalias"].as_str().map(str::to_owned),
    }
}

/// All links in the host (`None`) or in netns `ns`.
pub fn links(ns: Option<&str>) -> Vec<Link> {
    let out = ip_in(ns, &["-j", "addr", "show"]);
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut all: Vec<Link> = v
        .as_array()
        .map(|a| a.iter().map(parse_link).collect())
        .unwrap_or_default();
    // `ip -j addr show` leaves out the alias; `ip -j link show` has it.
    let out = ip_in(ns, &["-j", "link", "show"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    for l in v.as_array().into_iter().flatten() {
        if let (Some(i), Some(a)) = (l["ifindex"].as_u64(), l["ifalias"].as_str())
            && let Some(link) = all.iter_mut().find(|x| x.index == i)
        {
            link.alias = Some(a.to_owned());
        }
    }
    all
}

/// The link called `name`, if any.
pub fn link(ns: Option<&str>, name: &str) -> Option<Link> {
    links(ns).into_iter().find(|l| l.name == name)
}

/// The link with MAC `mac` (any case), if any.
pub fn link_by_mac(ns: Option<&str>, mac: &str) -> Option<Link> {
    links(ns)
        .into_iter()
        .find(|l| l.mac.eq_ignore_ascii_case(mac))
}

/// IPv4 routes in the host (`None`) or in netns `ns`, as `ip -j route show` objects.
pub fn routes(ns: Option<&str>) -> Vec<Value> {
    let out = ip_in(ns, &["-j", "route", "show"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array().cloned().unwrap_or_default()
}

/// A human-readable dump of a netns (or the host) for failure messages.
pub fn dump(ns: Option<&str>) -> String {
    let a = ip_in(ns, &["addr", "show"]);
    let r = ip_in(ns, &["route", "show"]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&r.stdout)
    )
}

// ---------------------------------------------------------------- the driver

/// Build tests/libcni-driver once per test binary, into target/tmp. Fails loudly if `go` or
/// Debian's golang-github-appc-cni-dev is missing (CI installs both).
pub fn driver() -> &'static Path {
    static DRIVER: OnceLock<PathBuf> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let dir = Path::new(TARGET_TMP).join("libcni-driver-bin");
        fs::create_dir_all(&dir).expect("mkdir target/tmp/libcni-driver-bin");
        let out = dir.join("libcni-driver");
        let tmp = dir.join(format!("libcni-driver.{}", std::process::id()));
        let gocache = std::env::var_os("GOCACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(TARGET_TMP).join("go-cache"));
        let res = Command::new("go")
            .args(["build", "-o"])
            .arg(&tmp)
            .arg("./tests/libcni-driver")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", &gocache)
            .env("GOFLAGS", "")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `go` ({e}): the libcni tests need golang-go and \
                     golang-github-appc-cni-dev (apt-get install golang-go golang-github-appc-cni-dev)"
                )
            });
        assert!(
            res.status.success(),
            "building the libcni driver failed:\n{}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
        fs::rename(&tmp, &out).expect("install libcni driver");
        out
    })
}

/// What one driver (or direct plugin) run produced. Display shows everything, for failure
/// messages.
pub struct RunOut {
    pub what: String,
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The driver's trace: one JSON object per plugin exec.
    pub trace: Vec<Value>,
}

impl fmt::Display for RunOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "---- {}", self.what)?;
        writeln!(f, "---- exit: {}", self.status)?;
        writeln!(f, "---- stdout:\n{}", self.stdout.trim_end())?;
        writeln!(f, "---- stderr:\n{}", self.stderr.trim_end())?;
        for t in &self.trace {
            writeln!(
                f,
                "---- exec {} {} (exit: {})\n  stdin:  {}\n  stdout: {}",
                t["command"].as_str().unwrap_or("?"),
                t["plugin"].as_str().unwrap_or("?"),
                t["exitErr"].as_str().unwrap_or("ok"),
                t["stdin"],
                t["stdout"].as_str().unwrap_or("").trim_end(),
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for RunOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl RunOut {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// stdout as JSON (Null when empty); panics with the whole run if it is not JSON.
    pub fn json(&self) -> Value {
        if self.stdout.trim().is_empty() {
            return Value::Null;
        }
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON value ({e})\n{self}"))
    }

    /// Assert success; return stdout's JSON.
    pub fn ok(&self) -> Value {
        assert!(self.success(), "expected success\n{self}");
        self.json()
    }

    /// Assert failure; return the error JSON.
    pub fn err(&self) -> Value {
        assert!(!self.success(), "expected failure\n{self}");
        let v = self.json();
        assert!(v.is_object(), "error output is not a JSON object\n{self}");
        v
    }

    /// Assert failure with error `code`; return the error JSON.
    pub fn err_code(&self, code: i64) -> Value {
        let v = self.err();
        assert_eq!(
            v["code"].as_i64(),
            Some(code),
            "expected error code {code}\n{self}"
        );
        v
    }

    /// Raw stdout of each exec of our plugin with `command` (ADD, DEL, ...), as JSON.
    pub fn plugin_stdout(&self, command: &str) -> Vec<Value> {
        self.trace
            .iter()
            .filter(|t| {
                t["command"] == command
                    && t["plugin"]
                        .as_str()
                        .is_some_and(|p| p.ends_with("/rdma-host-device"))
            })
            .map(|t| {
                let s = t["stdout"].as_str().unwrap_or("");
                serde_json::from_str(s).unwrap_or(Value::Null)
            })
            .collect()
    }

    /// The stdin our plugin got for `command`.
    pub fn plugin_stdin(&self, command: &str) -> Vec<Value> {
        self.trace
            .iter()
            .filter(|t| {
                t["command"] == command
                    && t["plugin"]
                        .as_str()
                        .is_some_and(|p| p.ends_with("/rdma-host-device"))
            })
            .map(|t| t["stdin"].clone())
            .collect()
    }
}

// ---------------------------------------------------------------- the rig

/// One test's world: unique names, a temp dir holding the plugin's stateDir, host-local's
/// dataDir, libcni's cache, CNI_PATH dirs, config files and traces.
pub struct Rig {
    pub n: u32,
    pub dir: TempDir,
    calls: AtomicU32,
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
        };
        rig.set_node(json!({}));
        rig
    }

    /// The node configuration file every call of this rig uses (through
    /// [`NODE_CONFIG_ENV`]): this rig's stateDir and logDir, plus `extra` keys (a policy).
    pub fn set_node(&self, extra: Value) {
        let mut node = json!({"stateDir": self.state_dir(), "logDir": self.log_dir()});
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
    /// version, and DEL/CHECK with nothing. Returns the config's `ipam` object for it.
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

// ---------------------------------------------------------------- direct calls

/// Run the plugin directly as a runtime would exec it: inherited environment minus every
/// CNI_* variable, plus `env` (a `None` value leaves that variable unset), `stdin` as given.
pub fn run_plugin(env: &[(&str, Option<&str>)], stdin: &[u8]) -> RunOut {
    use std::io::Write;
    let mut cmd = Command::new(plugin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plugin");
    // The plugin may exit before reading stdin; ignore EPIPE.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().expect("wait plugin");
    RunOut {
        what: format!(
            "plugin env {:?} stdin {}",
            env,
            String::from_utf8_lossy(stdin)
        ),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace: Vec::new(),
    }
}

/// Compare CNI versions like "0.3.1" < "1.0.0".
pub fn version_ge(a: &str, b: &str) -> bool {
    let p = |s: &str| -> Vec<u32> { s.split('.').map(|x| x.parse().unwrap_or(0)).collect() };
    p(a) >= p(b)
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
        let mut out = run_plugin(&env, &serde_json::to_vec(conf).unwrap());
        out.what = format!("{cmd} {cid}/{ifname} in {netns:?} env {extra:?}\n  conf {conf}");
        out
    }
}

impl RunOut {
    /// Killed by SIGKILL (a `:kill` fault)?
    pub fn killed(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal() == Some(libc::SIGKILL)
    }

    /// Failed with exactly one JSON error object on stdout carrying a non-empty msg; returns it.
    pub fn one_error(&self) -> Value {
        assert!(!self.success(), "expected failure\n{self}");
        let v: Value = serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout must be exactly one JSON error object ({e})\n{self}")
        });
        assert!(
            v["code"].as_u64().is_some()
                && v["msg"].as_str().is_some_and(|m| !m.trim().is_empty())
                && v["cniVersion"].as_str().is_some(),
            "error object lacks cniVersion/code/msg\n{self}"
        );
        v
    }
}

/// What the kernel does to a physical NIC when the netns holding it dies: it goes down and
/// back to the host netns under the name it had in the pod, keeping its alias and MTU; then
/// the netns goes away. Virtual links cannot show this here: veth, ifb and vxlan die with the
/// netns and bridges cannot change netns at all, so the test does the kernel's part by hand.
pub fn kill_netns_refunding(pod: &Netns, ifname: &str) {
    let me = std::process::id().to_string();
    ip(&["-n", &pod.name, "link", "set", "dev", ifname, "down"]);
    ip(&["-n", &pod.name, "link", "set", "dev", ifname, "netns", &me]);
    pod.delete();
}

/// The randomised tests' PRNG, the library's own (src/fuzz/mutate.rs).
#[allow(unused_imports)]
pub use rdma_host_device::mutate::Rng;

/// Held by tests that leave a NIC lost on the host or that run GC (which restores every lost
/// NIC on the node, whoever lost it), so that they do not restore each other's lost NICs. A
/// file lock, so it also holds across test binaries and checkouts running at once.
pub fn lost_nic_lock() -> std::fs::File {
    use std::os::fd::AsRawFd;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/rhd-tests-lost-nics.lock")
        .expect("open /tmp/rhd-tests-lost-nics.lock");
    // SAFETY: flock on our own fd; released when the File drops.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock /tmp/rhd-tests-lost-nics.lock");
    f
}
