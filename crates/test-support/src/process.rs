//! Running things: commands (`ip`), the plugin exec'd as a runtime does, and what a run produced.

use crate::programs::plugin;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

// ---------------------------------------------------------------- commands

/// The checkout the tests run from.
pub fn repo() -> &'static Path {
    // This crate is crates/test-support.
    let me = Path::new(env!("CARGO_MANIFEST_DIR"));
    me.parent().and_then(Path::parent).unwrap_or(me)
}

/// The venv's python, with grpcio for the kubelet-side clients of the CRI and device-plugin
/// tests (scripts/setup.sh makes it: `$RHD_VENV`, default ~/.cache/rhd-venv).
pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("RHD_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/rhd-venv")
        });
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} missing: the CRI and device-plugin tests need a venv with grpcio and grpcio-tools (scripts/setup.sh makes it)",
        py.display()
    );
    py
}

/// Run a command, return its output; panic only if it cannot start.
pub fn run(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {prog} {args:?}: {e}"))
}

/// Run `cmd` with `stdin` written to it, stdout and stderr captured; panic only if it cannot
/// start. A program may exit before reading all its input: EPIPE is ignored.
pub fn output_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
    let _ = child.stdin.take().expect("piped stdin").write_all(stdin);
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {:?}: {e}", cmd.get_program()))
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

/// A finished command's exit status, stdout and stderr, for failure messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "exit {}\n---- stdout\n{}\n---- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

    /// The trace of each exec of our plugin with `command` (ADD, DEL, ...).
    fn plugin_execs<'a>(&'a self, command: &'a str) -> impl Iterator<Item = &'a Value> {
        self.trace.iter().filter(move |t| {
            t["command"] == command
                && t["plugin"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/rdma-host-device"))
        })
    }

    /// Raw stdout of each exec of our plugin with `command` (ADD, DEL, ...), as JSON.
    pub fn plugin_stdout(&self, command: &str) -> Vec<Value> {
        self.plugin_execs(command)
            .map(|t| {
                let s = t["stdout"].as_str().unwrap_or("");
                serde_json::from_str(s).unwrap_or(Value::Null)
            })
            .collect()
    }

    /// The stdin our plugin got for `command`.
    pub fn plugin_stdin(&self, command: &str) -> Vec<Value> {
        self.plugin_execs(command)
            .map(|t| t["stdin"].clone())
            .collect()
    }
}

// ---------------------------------------------------------------- direct calls

/// Run the plugin directly as a runtime would exec it: inherited environment minus every
/// CNI_* variable, plus `env` (a `None` value leaves that variable unset), `stdin` as given.
pub fn run_plugin(env: &[(&str, Option<&str>)], stdin: &[u8]) -> RunOut {
    run_plugin_at(&plugin(), env, stdin)
}

/// [`run_plugin`] with the plugin binary at `bin` (another build's: tests/give_back/upgrade.rs).
pub fn run_plugin_at(bin: &std::path::Path, env: &[(&str, Option<&str>)], stdin: &[u8]) -> RunOut {
    let mut cmd = Command::new(bin);
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
    let out = output_with_stdin(&mut cmd, stdin);
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

/// `cmd`, its process started with umask `mask`: set in the child between fork and exec, so
/// the test process's own umask, which every test thread shares, is left alone.
pub fn with_umask(cmd: &mut Command, mask: u32) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: umask(2) is async-signal-safe and the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(mask as libc::mode_t);
            Ok(())
        })
    }
}

/// Permission bits, shown in octal in an assertion's message (`0o755`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Mode(pub u32);

impl fmt::Debug for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0o{:o}", self.0)
    }
}

/// The permission bits of what is at `p` (not followed if a symlink), for a mode assertion's
/// message: `Err` says it is missing.
pub fn mode_of(p: &std::path::Path) -> Result<Mode, String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p)
        .map(|m| Mode(m.permissions().mode() & 0o7777))
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// Wait up to `secs` for `p` to exist.
pub fn wait_for_path(p: &std::path::Path, secs: u64) -> bool {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(secs) {
        if std::fs::symlink_metadata(p).is_ok() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}
