//! A stand-in for a peer no registry ships (the kubelet's device-plugin and DRA sides,
//! containerd's NRI side), written in Python apart from our code: one JSON command a line on
//! its stdin, one JSON answer a line on its stdout, and a first line saying it is ready.
//! Killed when dropped.

use crate::process::venv_python;
use serde_json::Value;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct StandIn {
    script: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl StandIn {
    /// Start tests/`script` with `args` and `env` under the tests' Python (grpcio's venv) and
    /// wait for its first line, which must say `ready` (its own word for it).
    pub fn start(script: &str, args: &[&OsStr], env: &[(&str, &OsStr)], ready: &str) -> StandIn {
        let path = crate::process::repo().join("tests").join(script);
        let mut child = Command::new(venv_python())
            .arg(&path)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {script}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.contains(ready), "{script}: {line:?}");
        StandIn {
            script: script.to_owned(),
            child,
            stdin,
            stdout,
        }
    }

    /// One command, its answer.
    pub fn ask(&mut self, cmd: Value) -> Value {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{} said {line:?} ({e})", self.script))
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node-agent subcommand under test, run as the DaemonSet runs it (no CNI_COMMAND, no
/// stdin), its stderr in a log file the test reads. Killed when dropped.
pub struct Logged {
    child: Child,
    log: std::path::PathBuf,
}

impl Logged {
    /// Spawn `cmd` (`what` in the panic if it cannot start) logging to `log`.
    pub fn spawn(cmd: &mut Command, log: std::path::PathBuf, what: &str) -> Logged {
        let child = cmd
            .env_remove("CNI_COMMAND")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Logged { child, log }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        self.stop();
    }
}
