//! The node agent's command line, `rdma-host-device-agent` (crates/agent/src/main.rs):
//! the subcommands a person or the DaemonSet runs on a node. The CNI binary the runtime execs
//! (src/main.rs, the plugin crate) never gets here: it reads only its environment and stdin.
//!
//! Every subcommand has one shape: its module's `Options` (derived with clap, the values read by
//! `flags.rs`) and `run(&Options) -> Result<_>`. From that one description clap gives each
//! subcommand its `--help`/`-h`, the errors, and `completions` and `man` their output. This file
//! alone turns the outcome into the exit code and prints the error: a bad option is a usage
//! error (`rdma-host-device-agent SUBCOMMAND: what is wrong`, the usage, exit 2); a failed run
//! is `rdma-host-device-agent SUBCOMMAND: what failed`, exit 1; `validate`'s rejection is its
//! answer on stdout, exit 1 with nothing on stderr.

use crate::error::Error;
use crate::{cdi, device_plugin, dra, inspect, metrics, node_config, nri, uppers_watch, validate};
use clap::{CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

/// The agent's executable name, as its usage, completions and man page call it.
pub(crate) const NAME: &str = "rdma-host-device-agent";

/// The agent: everything of rdma-host-device that runs on a node beside the CNI plugin.
#[derive(Debug, Parser)]
#[command(
    name = NAME,
    version,
    about = "The node agent of rdma-host-device: device plugin, exporter, CDI spec, inspect, checks",
    long_about = "\
The node agent of rdma-host-device, the CNI plugin that moves a host NIC and its RDMA device \
into a pod. The plugin itself is the rdma-host-device binary in /opt/cni/bin, which a container \
runtime runs per attachment; this binary, in the same image, holds what runs on the node beside \
it: the kubelet device plugin, the Prometheus exporter, the CDI spec writer, inspect, and the \
checks of node and network configurations, and the DRA driver.",
    after_long_help = after_long_help(),
    subcommand_required = true,
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The node configuration's keys (from its parser, so none is left out) and the exit status.
fn after_long_help() -> String {
    use rdma_host_device_core::node::{DEFAULT_PATH, Node, PATH_ENV, keys_of};
    format!(
        "Node configuration: {DEFAULT_PATH} (or ${PATH_ENV}): {}; see docs/configuration.md.\n\n\
         Exit status: 0 done; 1 the run failed (the reason on stderr) or validate rejected a \
         configuration; 2 a bad option or subcommand (the usage on stderr).",
        keys_of::<Node>().join(", ")
    )
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every NIC with its RDMA device, link and GID state, and the pod it is attached to
    ///
    /// Every NIC of this node with its RDMA device, driver, PCI address, link state, MTU, GID
    /// table summary and the pod it is attached to; the RDMA netns mode and what it means; per
    /// attached NIC and RDMA device, the exporter's counters (rx/tx bytes and packets, QPs,
    /// driver hw counters). --watch samples them twice and shows per-second rates. Run it first
    /// when a pod has no RDMA. Read-only.
    Inspect(inspect::Options),
    /// A Prometheus exporter of every attachment's netdev and RDMA counters (runs until killed)
    ///
    /// Serves /metrics (OpenMetrics text) and /healthz on ADDR. Per scrape, for every attachment
    /// in the state directory, the pod interface's netdev counters and its RDMA device's port
    /// state, hardware counters, port counters, resource counts and QP owners, read inside the
    /// pod's netns and labelled with the pod (namespace, pod, container_id, interface, network,
    /// host_nic, pci_address, rdma_device, netns_mode); then every RDMA device still on the
    /// host. Anything that reaches ADDR reads those labels (pods too, with the DaemonSet's
    /// hostNetwork): --token-file serves /metrics only to a client sending the bearer token in
    /// FILE (read at every request; /healthz stays open). With the node configuration's `gc`, it
    /// also collects leaked attachments: at start and every gc.periodSeconds it asks the
    /// runtime's CRI socket which pod sandboxes exist and gives back (IPAM released, NIC home)
    /// the attachments of no listed sandbox older than gc.graceSeconds.
    Metrics(metrics::Options),
    /// A kubelet device plugin offering the node's NICs as extended resources (runs until killed)
    ///
    /// Each pool of the node configuration's devicePlugin is an extended resource whose devices
    /// are the NICs its selectors match (never the node's own uplinks). Registers on
    /// DIR/kubelet.sock, again whenever the kubelet restarts; reports NUMA nodes and health
    /// (link, RDMA port); Allocate hands out the NICs' RDMA char devices, sets
    /// RDMA_HOST_DEVICE_<POOL>_IDS and RDMA_HOST_DEVICE_<POOL>_RDMA, and writes the device-info
    /// files Multus reads. With --cdi-spec, it also keeps that CDI spec current (as `cdi` writes
    /// it), so an RDMA device loaded later gets its CDI name.
    DevicePlugin(device_plugin::Options),
    /// The DRA driver: the node's NICs as a ResourceSlice, and the kubelet plugin preparing claims (runs until killed)
    ///
    /// Publishes one device per NIC the node policy lets ADD hand to a pod (the node
    /// configuration's dra.nics, default every NIC with a PCI or auxiliary device; never an
    /// uplink; only allowedNics) in the ResourceSlice NODE-rdma-host-device.io, with the
    /// attributes claims select by (PCIe root, PCI address, NUMA node, Multus' deviceID and
    /// resourceName, RDMA device, node GUID, transport, link speed, MTU, driver, link state,
    /// rail), and keeps it current: link changes, RDMA devices and ports, NICs coming and
    /// going. Talks to the in-cluster API server unless --kube-server is given.
    ///
    /// Beside it, the kubelet plugin: registers with the kubelet's plugin watcher
    /// (DIR/plugins_registry/rdma-host-device.io-reg.sock) and serves the DRA plugin API v1 on
    /// DIR/plugins/rdma-host-device.io/dra.sock. Prepare reads each claim, maps our allocated
    /// devices to the node's NICs, answers the CDI IDs of their RDMA devices' uverbs char
    /// devices (the spec `cdi` writes, with rdma_cm and the memlock hook), refuses a NIC another
    /// claim holds, and records the claim with the pods it is reserved for in
    /// STATEDIR/dra/checkpoint.json, where a NAD's draRequest finds it on ADD. Unprepare works
    /// from that checkpoint alone.
    Dra(dra::Options),
    /// The node configuration with its defaults filled in, as JSON
    ///
    /// The node configuration (FILE, or what the plugin reads) with its defaults filled in, as
    /// JSON; exit 1 and the reason if it is invalid. The DaemonSet's installer checks a new one
    /// with it.
    NodeConfig(node_config::Options),
    /// Write the CDI spec of this node's RDMA devices
    ///
    /// For runtimes that read CDI (CRI-O, containerd 1.7+, podman): one device per RDMA device,
    /// rdma-host-device.io/rdma=uverbsN after its char device /dev/infiniband/uverbsN (a name no
    /// pod can change), with that char device, rdma_cm, and a
    /// createRuntime hook (the node configuration's cdiHook, the CNI binary's `memlock-hook`)
    /// that raises the RLIMIT_MEMLOCK of the container's first process (exec'd ones: see nri).
    Cdi(cdi::Options),
    /// An NRI plugin giving containers with an RDMA device the memlock limit (runs until killed)
    ///
    /// Connects to the runtime's NRI socket (containerd 1.7.7+ with NRI enabled, 2.0+ by
    /// default; CRI-O 1.29+), registers, and for every container created with one of this
    /// node's /dev/infiniband/uverbsN among its devices (by the device plugin, DRA or a CDI
    /// name) sets RLIMIT_MEMLOCK in its OCI spec to the node configuration's memlock, so every
    /// process of the container has it, kubectl exec included. Other containers are left
    /// alone. Connects again whenever the runtime restarts.
    Nri(nri::Options),
    /// Check network configurations as the plugin would on ADD
    ///
    /// A .conf, a .conflist (each rdma-host-device entry, with the list's name and cniVersion,
    /// as libcni passes them), or a NetworkAttachmentDefinition as JSON (kubectl get
    /// net-attach-def NAME -o json). Prints one line per configuration; exits 1 if any is
    /// rejected, with the CNI error code and message.
    Validate(validate::Options),
    /// Keep the answer to "does anything of another namespace ride this NIC?" current
    ///
    /// Runs until killed, answering ADD on a unix socket from the kernel's own link
    /// notifications (docs/DESIGN.md, `uppers/`); the DaemonSet's uppers-watch container runs it.
    #[command(hide = true)]
    UppersWatch(uppers_watch::Options),
    /// A shell completion script for this command, on stdout
    ///
    /// For example: rdma-host-device-agent completions bash >
    /// /etc/bash_completion.d/rdma-host-device-agent
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff), on stdout, or one page per subcommand in a directory
    ///
    /// For example: rdma-host-device-agent man | man -l -
    Man {
        /// Write rdma-host-device-agent.1 and rdma-host-device-agent-SUBCOMMAND.1 into DIR
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

/// Returns the process exit code.
pub fn main() -> i32 {
    dispatch(
        std::env::args_os().skip(1).collect(),
        &mut std::io::stderr(),
    )
}

/// Run the command `args` name; errors go to `err`.
fn dispatch(args: Vec<OsString>, err: &mut dyn Write) -> i32 {
    let name = subcommand_name(&args);
    let cli = match Cli::try_parse_from(std::iter::once(OsString::from(NAME)).chain(args)) {
        Ok(c) => c,
        Err(e) => return parse_error(&e, name.as_deref(), err),
    };
    match cli.command {
        Command::Inspect(o) => subcommand(err, "inspect", &o, inspect::run),
        Command::Metrics(o) => subcommand(err, "metrics", &o, metrics::run),
        Command::DevicePlugin(o) => subcommand(err, "device-plugin", &o, device_plugin::run),
        Command::Dra(o) => subcommand(err, "dra", &o, dra::run),
        Command::NodeConfig(o) => subcommand(err, "node-config", &o, node_config::run),
        Command::Cdi(o) => subcommand(err, "cdi", &o, cdi::run),
        Command::Nri(o) => subcommand(err, "nri", &o, nri::run),
        Command::Validate(o) => subcommand(err, "validate", &o, validate::run),
        Command::UppersWatch(o) => subcommand(err, "uppers-watch", &o, uppers_watch::run),
        Command::Completions { shell } => {
            let mut out = std::io::stdout();
            clap_complete::generate(shell, &mut Cli::command(), NAME, &mut out);
            0
        }
        Command::Man { out_dir } => match man(out_dir.as_deref()) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(err, "{NAME} man: {e}");
                1
            }
        },
    }
}

/// The man page on stdout, or every page (the agent's and one per subcommand) into `dir`.
fn man(dir: Option<&std::path::Path>) -> std::io::Result<()> {
    match dir {
        Some(d) => clap_mangen::generate_to(Cli::command(), d),
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
    }
}

/// The subcommand `args` start with, if it is one of ours: what a usage error is named by.
fn subcommand_name(args: &[OsString]) -> Option<String> {
    let first = args.first()?.to_str()?;
    Cli::command()
        .get_subcommands()
        .any(|s| s.get_name() == first)
        .then(|| first.to_owned())
}

/// What clap refused, or the help and version it was asked for: help and version on stdout
/// (exit 0); an error named by its subcommand, with the usage, on `err` (exit 2).
fn parse_error(e: &clap::Error, subcommand: Option<&str>, err: &mut dyn Write) -> i32 {
    if !e.use_stderr() {
        let _ = e.print();
        return e.exit_code();
    }
    let text = e.render().to_string();
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = write!(err, "{text}");
        return 2;
    }
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let who = match subcommand {
        Some(s) => format!("{NAME} {s}"),
        None => NAME.to_owned(),
    };
    let hint = "For more information, try '--help'.";
    let (said, _) = text.split_once(hint).unwrap_or((text, ""));
    let mut said = said.trim_end().to_owned();
    // Every error shows the usage of the command it is about (clap leaves it out of some).
    if !said.contains("\nUsage: ") {
        let mut cmd = Cli::command();
        cmd.build();
        let c = match subcommand {
            Some(s) => cmd.find_subcommand_mut(s),
            None => Some(&mut cmd),
        };
        if let Some(c) = c {
            said = format!("{said}\n\n{}", c.render_usage());
        }
    }
    let _ = write!(
        err,
        "{who}: {said}\n\nFor more information, try '{who} --help'.\n"
    );
    2
}

/// What a subcommand's run answers when it did not fail, as an exit code.
trait Status {
    fn code(self) -> i32;
}

impl Status for () {
    fn code(self) -> i32 {
        0
    }
}

/// `validate`'s answer: a rejected configuration is what it was asked to find, not a failure
/// of its own (each is printed with its reason); the exit code says whether there was one.
impl Status for validate::Verdict {
    fn code(self) -> i32 {
        match self {
            validate::Verdict::Accepted => 0,
            validate::Verdict::Rejected => 1,
        }
    }
}

/// One subcommand's run to exit code: a failed run is printed with the subcommand's name (1).
fn subcommand<O, S: Status>(
    err: &mut dyn Write,
    name: &str,
    opts: &O,
    run: fn(&O) -> crate::error::Result<S>,
) -> i32 {
    match run(opts) {
        Ok(status) => status.code(),
        Err(e) => {
            let _ = writeln!(err, "{NAME} {name}: {}", operator_text(&e));
            1
        }
    }
}

/// An error as a person reads it: the message and its details. The CNI code is left out: it is
/// the runtime's contract (the error JSON); a person gets the exit code.
fn operator_text(e: &Error) -> String {
    let text = e.to_string();
    // It may quote names a pod chose: escaped and bounded like a log line.
    rdma_host_device_core::logging::line(&text, rdma_host_device_core::logging::MAX_LINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit code and what went to stderr.
    fn call(a: &[&str]) -> (i32, String) {
        let mut err = Vec::new();
        let code = dispatch(a.iter().map(OsString::from).collect(), &mut err);
        (code, String::from_utf8_lossy(&err).into_owned())
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn unknown_command_is_a_usage_error() {
        let (code, err) = call(&["frobnicate"]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.starts_with(&format!("{NAME}: unrecognized subcommand")),
            "{err}"
        );
        assert_eq!(call(&[]).0, 2);
    }

    #[test]
    fn a_bad_option_of_any_subcommand_is_named_by_it_with_its_usage_and_exits_2() {
        for (a, says) in [
            (&["validate"][..], "the following required arguments"),
            (
                &["metrics", "--listen"],
                "a value is required for '--listen <ADDR>'",
            ),
            (
                &["metrics", "--listen", "nope"],
                "invalid value 'nope' for '--listen <ADDR>'",
            ),
            (
                &["inspect", "--color", "purple"],
                "invalid value 'purple' for '--color <WHEN>'",
            ),
            (
                &["device-plugin", "--socket-dir", "rel"],
                "\"rel\" must be an absolute path",
            ),
            (
                &["cdi", "--memlock", "0"],
                "memlock \"0\" is less than one page",
            ),
            (&["cdi", "--bogus"], "unexpected argument '--bogus'"),
            (
                &["nri", "--index", "9"],
                "an NRI plugin index is two digits",
            ),
            (
                &["nri", "--socket", "rel"],
                "\"rel\" must be an absolute path",
            ),
            (&["node-config", "a", "b"], "unexpected argument 'b'"),
        ] {
            let (code, err) = call(a);
            assert_eq!(code, 2, "{a:?}: {err}");
            assert!(
                err.starts_with(&format!("{NAME} {}: ", a[0])),
                "{a:?}: {err}"
            );
            assert!(err.contains(says), "{a:?}: {err}");
            assert!(
                err.contains(&format!("Usage: {NAME} {} ", a[0])),
                "{a:?}: the usage: {err}"
            );
        }
    }

    #[test]
    fn the_help_names_every_node_configuration_key() {
        let long = Cli::command().render_long_help().to_string();
        for k in [
            "stateDir",
            "memlockFailClosed",
            "ipamSockets",
            "devicePlugin",
            "dra",
            "gc",
        ] {
            assert!(
                long.contains(&format!("{k},")) || long.contains(&format!("{k};")),
                "{k}: {long}"
            );
        }
    }

    #[test]
    fn every_subcommand_has_its_own_help() {
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let mut sub = sub.clone();
            let long = sub.render_long_help().to_string();
            assert!(
                long.contains(&format!("Usage: {}", sub.get_name())),
                "{long}"
            );
            assert!(long.contains("-h, --help"), "{long}");
        }
        for a in [
            "inspect",
            "node-config",
            "validate",
            "cdi",
            "nri",
            "metrics",
            "device-plugin",
        ] {
            for h in ["--help", "-h"] {
                let e = Cli::try_parse_from([NAME, a, h]).unwrap_err();
                assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{a} {h}");
                assert_eq!(e.exit_code(), 0);
                let text = e.render().to_string();
                assert!(
                    text.contains(&format!("Usage: {NAME} {a}")),
                    "{a} {h}: {text}"
                );
            }
        }
    }

    #[test]
    fn a_failed_run_is_named_by_its_subcommand_with_what_to_fix_and_exits_1() {
        let missing = "/nonexistent-rhd/node.json";
        let (code, err) = call(&["node-config", missing]);
        assert_eq!(code, 1, "{err}");
        assert!(err.starts_with(&format!("{NAME} node-config: ")), "{err}");
        assert!(err.contains(missing), "names the file: {err}");
        assert!(!err.contains("Usage"), "no usage for a run error: {err}");

        let out = "/dev/null/cdi.json";
        let cdi = |host_root: &str| {
            call(&[
                "cdi",
                "--out",
                out,
                "--memlock",
                "unlimited",
                "--host-root",
                host_root,
                "--sysfs",
                "/nonexistent-rhd",
                "--dev",
                "/nonexistent-rhd",
            ])
        };
        // The node has no hook where the node configuration says: refused before writing.
        let (code, err) = cdi("/nonexistent-rhd");
        assert_eq!(code, 1, "{err}");
        assert!(
            err.starts_with(&format!("{NAME} cdi: cdiHook ")) && err.contains("does not exist"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        // With the hook there, the write itself fails and says so.
        let root = std::env::temp_dir().join(format!("rhd-cli-hook-{}", std::process::id()));
        let hook = rdma_host_device_core::node::Node::load()
            .unwrap_or_default()
            .cdi_hook;
        let on_node = root.join(hook.strip_prefix("/").unwrap());
        std::fs::create_dir_all(on_node.parent().unwrap()).unwrap();
        std::fs::write(&on_node, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&on_node, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (code, err) = cdi(root.to_str().unwrap());
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.starts_with(&format!("{NAME} cdi: cannot write CDI spec {out}")),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }

    #[test]
    fn a_rejected_config_is_validates_answer_exit_1_and_not_an_error() {
        let (code, err) = call(&["validate", "/nonexistent-rhd/net.conf"]);
        assert_eq!(code, 1);
        assert_eq!(err, "", "the verdict is on stdout, nothing on stderr");
    }

    #[test]
    fn cdi_reads_out_dash_as_stdout_and_defaults_as_documented() {
        let Command::Cdi(o) = Cli::try_parse_from([NAME, "cdi", "--out", "-"])
            .unwrap()
            .command
        else {
            panic!("not cdi")
        };
        assert_eq!(o.out, None);
        assert_eq!(o.host_root, PathBuf::from("/"));
        let Command::Cdi(o) = Cli::try_parse_from([NAME, "cdi"]).unwrap().command else {
            panic!("not cdi")
        };
        assert_eq!(o.out, Some(PathBuf::from(cdi::DEFAULT_SPEC)));
        assert_eq!(o.memlock, None);
    }

    #[test]
    fn completions_and_the_man_page_come_from_the_same_definition() {
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            NAME,
            &mut bash,
        );
        let bash = String::from_utf8(bash).unwrap();
        for word in [
            "device-plugin",
            "node-config",
            "--state-dir",
            "--token-file",
        ] {
            assert!(bash.contains(word), "bash completion lacks {word}");
        }
        let mut page = Vec::new();
        clap_mangen::Man::new(Cli::command())
            .render(&mut page)
            .unwrap();
        let page = String::from_utf8(page).unwrap();
        assert!(page.contains(".TH rdma-host-device-agent"), "{page}");
        assert!(page.contains("device\\-plugin"), "{page}");
    }
}
