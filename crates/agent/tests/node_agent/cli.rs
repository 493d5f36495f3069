//! The two executables as a person meets them, no root needed: the CNI plugin answers only
//! `--version`, `--help` and the memlock hook without CNI_COMMAND and sends node tools to the
//! agent; the agent's every subcommand answers `--help` and `-h`, and its completions and man
//! page come out of the binary (issue 26).

use test_support as common;

use common::{AGENT, PLUGIN, output_text};
use std::process::{Command, Output, Stdio};

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_plugins_help_says_what_it_is_and_where_the_node_tools_are() {
    let o = run(PLUGIN, &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(out.contains("a CNI plugin"), "{out}");
    assert!(out.contains("rdma-host-device-agent --help"), "{out}");
    assert!(out.contains("memlock-hook"), "{out}");
    let o = run(PLUGIN, &["--version"]);
    assert!(text(&o.stdout).starts_with("rdma-host-device 0."), "{o:?}");
}

#[test]
fn a_node_tool_named_to_the_plugin_is_sent_to_the_agent() {
    for tool in [
        "inspect",
        "metrics",
        "device-plugin",
        "cdi",
        "nri",
        "node-config",
        "validate",
    ] {
        let o = run(PLUGIN, &[tool, "--help"]);
        assert_eq!(o.status.code(), Some(2), "{tool}: {o:?}");
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!("run rdma-host-device-agent {tool}")),
            "{tool}: {err}"
        );
        assert!(o.stdout.is_empty(), "{tool}: stdout is the CNI's: {o:?}");
    }
    let o = run(PLUGIN, &["memlock-hook"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        text(&o.stderr).contains("memlock-hook needs a LIMIT"),
        "{o:?}"
    );
}

#[test]
fn every_agent_subcommand_answers_help_and_h_with_its_own_usage() {
    for sub in [
        "inspect",
        "metrics",
        "device-plugin",
        "cdi",
        "nri",
        "node-config",
        "validate",
        "completions",
        "man",
    ] {
        for h in ["--help", "-h"] {
            let o = run(AGENT, &[sub, h]);
            assert_eq!(o.status.code(), Some(0), "{sub} {h}: {o:?}");
            let out = text(&o.stdout);
            assert!(
                out.contains(&format!("Usage: rdma-host-device-agent {sub}")),
                "{sub} {h}: {out}"
            );
        }
    }
    let o = run(AGENT, &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stdout).contains("device-plugin"), "{o:?}");
}

#[test]
fn the_agent_prints_completions_and_its_man_page() {
    let o = run(AGENT, &["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(text(&o.stdout).contains("rdma-host-device-agent"), "{o:?}");
    let o = run(AGENT, &["man"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        text(&o.stdout).contains(".TH rdma-host-device-agent"),
        "{o:?}"
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = run(AGENT, &["man", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    for page in [
        "rdma-host-device-agent.1",
        "rdma-host-device-agent-inspect.1",
    ] {
        assert!(dir.join(page).is_file(), "{page} in {}", dir.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_agent_option_exits_2_naming_its_subcommand() {
    let o = run(AGENT, &["cdi", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.starts_with("rdma-host-device-agent cdi: "), "{err}");
    assert!(err.contains("Usage: rdma-host-device-agent cdi"), "{err}");
}

/// The agent as cargo built it for this package's tests names itself and its version, and it
/// is the file every test runs (test-support's `AGENT`, which its build script locates).
#[test]
fn the_binary_names_itself_and_its_version() {
    let cargos = env!("CARGO_BIN_EXE_rdma-host-device-agent");
    assert_eq!(
        std::fs::canonicalize(AGENT).expect("the agent the tests run"),
        std::fs::canonicalize(cargos).expect("the agent cargo built"),
    );
    let out = Command::new(cargos)
        .arg("--version")
        .output()
        .expect("running the agent");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        concat!("rdma-host-device-agent ", env!("CARGO_PKG_VERSION")),
    );
}

/// The agent a plain `cargo build --release` makes, the one the image ships, is built without
/// the `test-support` feature the tests' harness turns on: the harness crate is no default
/// member of the workspace, so cargo does not unify its features into that build.
#[test]
fn the_shipped_build_of_the_agent_carries_nothing_of_the_tests() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal,build,features"])
        .args(["-i", "rdma-host-device-agent"])
        .current_dir(common::repo())
        .output()
        .expect("cargo tree");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(text.contains("rdma-host-device-agent"), "{text}");
    assert!(!text.contains("test-support"), "{text}");
}
