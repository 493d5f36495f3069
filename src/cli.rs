//! The operator's command line: what a person gets when running the binary by hand
//! (`--version`, `--help`, and the subcommands). A runtime never gets here: it sets
//! CNI_COMMAND, and main.rs sends those calls to the CNI flows.
//!
//! Every subcommand has one shape: its module's `options(&[String]) -> Result<Options>` (read
//! with `flags::Flags`) and `run(&Options) -> Result<_>`. This file alone turns the outcome into
//! the exit code and prints the error: a bad option is a usage error (the message, the help,
//! exit 2); a failed run is `rdma-host-device SUBCOMMAND: what failed`, exit 1.

use crate::error::{Error, Result};
use crate::{cdi, device_plugin, inspect, metrics, node, uppers, validate};
use std::io::Write;

const HELP: &str = "\
rdma-host-device: a CNI plugin that moves a host NIC and its RDMA device into a pod.

A container runtime (containerd, CRI-O, Multus) runs it with CNI_COMMAND set and the
network configuration on stdin; install it in /opt/cni/bin and name it as \"type\" in a
network config. By hand:

  rdma-host-device inspect [--json] [--all] [--watch [SECS]] [--state-dir DIR]
                           [--color auto|always|never]
      Every NIC of this node with its RDMA device, driver, PCI address, link state, MTU,
      GID table summary and the pod it is attached to; the RDMA netns mode and what it
      means; per attached NIC and RDMA device, the exporter's counters (rx/tx bytes and
      packets, QPs, driver hw counters). --watch samples them twice, SECS apart (default 2),
      and shows per-second rates. Run it first when a pod has no RDMA. --json for machines; --all also lists
      virtual links without RDMA; --state-dir to read another state directory
      (default: the node configuration's stateDir, /var/lib/cni/rdma-host-device). Colour only on a terminal (NO_COLOR works).

  rdma-host-device metrics [--listen ADDR] [--state-dir DIR] [--once] [--token-file FILE]
      A Prometheus exporter (runs until killed): /metrics (OpenMetrics text) and /healthz
      on ADDR (default 0.0.0.0:9879; :PORT for every IPv4 address). Per scrape, for every
      attachment in the state directory (default: the node configuration's stateDir), the
      pod interface's netdev counters and its RDMA device's port state, hardware counters,
      port counters, resource counts and QP owners, read inside the pod's netns and labelled
      with the pod (namespace, pod, container_id, interface, network, host_nic, pci_address,
      rdma_device, netns_mode); then every RDMA device still on the host. --once prints one
      scrape and exits. Anything that reaches ADDR reads those labels (pods too, with the
      DaemonSet's hostNetwork): --token-file serves /metrics only to a client sending the
      bearer token in FILE (read at every request; /healthz stays open).

  rdma-host-device device-plugin [--socket-dir DIR] [--device-info-dir DIR] [--state-dir DIR]
                                 [--cdi-spec FILE [--cdi-hook PATH]]
      A kubelet device plugin (runs until killed): each pool of the node configuration's
      devicePlugin is an extended resource whose devices are the NICs its selectors match
      (never the node's own uplinks). Registers on DIR/kubelet.sock (default
      /var/lib/kubelet/device-plugins), again whenever the kubelet restarts; reports NUMA
      nodes and health (link, RDMA port); Allocate hands out the NICs' RDMA char devices, sets
      RDMA_HOST_DEVICE_<POOL>_IDS and RDMA_HOST_DEVICE_<POOL>_RDMA, and writes the device-info
      files Multus reads (default /var/run/k8s.cni.cncf.io/devinfo/dp). With --cdi-spec, it
      also keeps that CDI spec current (as `cdi` writes it, the hook at PATH, default
      /opt/cni/bin/rdma-host-device), so an RDMA device loaded later gets its CDI name.

  rdma-host-device node-config [FILE]
      The node configuration (FILE, or what the plugin reads: $RDMA_HOST_DEVICE_NODE_CONFIG or
      /etc/rdma-host-device/node.json) with its defaults filled in, as JSON; exit 1 and the
      reason if it is invalid. The DaemonSet's installer checks a new one with it.

  rdma-host-device cdi [--out FILE|-] [--memlock BYTES|unlimited] [--hook PATH]
      Write the CDI spec of this node's RDMA devices (default /var/run/cdi/rdma-host-device.json)
      for runtimes that read CDI (CRI-O, containerd 1.7+, podman): one device per RDMA device,
      rdma-host-device.io/rdma=uverbsN after its char device /dev/infiniband/uverbsN (a name no
      pod can change), with that char device, rdma_cm, and a
      createRuntime hook (PATH, default /opt/cni/bin/rdma-host-device) that raises the
      container's RLIMIT_MEMLOCK (default: the node configuration's memlock, unlimited).

  rdma-host-device memlock-hook BYTES|unlimited
      The OCI hook the CDI spec names: sets RLIMIT_MEMLOCK of the container process whose
      OCI state is on stdin.

  rdma-host-device validate FILE|- ...
      Check network configurations as the plugin would on ADD: a .conf, a .conflist (each
      rdma-host-device entry, with the list's name and cniVersion, as libcni passes them),
      or a NetworkAttachmentDefinition as JSON (kubectl get net-attach-def NAME -o json).
      Exits 1 if any is rejected, printing the CNI error code and message.

  rdma-host-device --version   the version and the CNI versions it speaks
  rdma-host-device --help      this text

Node configuration: /etc/rdma-host-device/node.json (or $RDMA_HOST_DEVICE_NODE_CONFIG):
stateDir, logDir, allowedNics, allowedUplinks, ipamPlugins, ipamPaths, deviceInfoDir, memlock,
takeRdmaDevicesInUse, devicePlugin;
see the README. Logs: one line per step with
the container ID, on stderr and in \"logFile\" (a file name in the node's logDir) if set
(rotated at 10 MiB).

Error codes (1-99 are the CNI spec's, 100+ this plugin's; the README says what to do):
";

/// Returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    dispatch(&args, &mut std::io::stderr())
}

/// Run the command `args` name; errors go to `err`.
fn dispatch(args: &[String], err: &mut dyn Write) -> i32 {
    let Some((command, rest)) = args.split_first() else {
        return usage(err, "no command");
    };
    match command.as_str() {
        "--version" | "-V" | "version" => {
            println!("{}", version_line());
            0
        }
        "--help" | "-h" | "help" => {
            print!("{HELP}");
            for c in crate::error::TABLE {
                println!("  {:>3}  {}", c.code as u32, c.meaning.replace('`', ""));
            }
            0
        }
        "inspect" => subcommand(err, command, rest, inspect::options, inspect::run),
        "metrics" => subcommand(err, command, rest, metrics::options, metrics::run),
        "device-plugin" => subcommand(
            err,
            command,
            rest,
            device_plugin::options,
            device_plugin::run,
        ),
        "node-config" => subcommand(err, command, rest, node::show::options, node::show::run),
        "cdi" => subcommand(err, command, rest, cdi::options, cdi::run),
        "memlock-hook" => subcommand(err, command, rest, cdi::hook_options, cdi::run_hook),
        "validate" => subcommand(err, command, rest, validate::options, validate::run),
        // Not in the help: the node agent's, run by the DaemonSet (docs/DESIGN.md, `uppers/`).
        "uppers-watch" => subcommand(err, command, rest, uppers::options, uppers::run),
        other => usage(err, &format!("unknown command {other:?}")),
    }
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

/// One subcommand from options to exit code: a bad option is a usage error (2), a failed run
/// is printed with the subcommand's name (1).
fn subcommand<O, S: Status>(
    err: &mut dyn Write,
    name: &str,
    args: &[String],
    options: fn(&[String]) -> Result<O>,
    run: fn(&O) -> Result<S>,
) -> i32 {
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => return usage(err, &e.msg),
    };
    match run(&opts) {
        Ok(status) => status.code(),
        Err(e) => {
            let _ = writeln!(err, "rdma-host-device {name}: {}", operator_text(&e));
            1
        }
    }
}

/// An error as a person reads it: the message and its details. The CNI code is left out: it is
/// the runtime's contract (the error JSON); a person gets the exit code.
fn operator_text(e: &Error) -> String {
    let text = if e.details.is_empty() {
        e.msg.clone()
    } else {
        format!("{}: {}", e.msg, e.details)
    };
    // It may quote names a pod chose: escaped and bounded like a log line.
    crate::logging::line(&text, crate::logging::MAX_LINE)
}

fn version_line() -> String {
    format!(
        "rdma-host-device {} (CNI {})",
        env!("CARGO_PKG_VERSION"),
        crate::cni::version::supported_list()
    )
}

fn usage(err: &mut dyn Write, msg: &str) -> i32 {
    let _ = write!(err, "rdma-host-device: {msg}\n\n{HELP}");
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// The exit code and what went to stderr.
    fn call(a: &[&str]) -> (i32, String) {
        let mut err = Vec::new();
        let code = dispatch(&args(a), &mut err);
        (code, String::from_utf8_lossy(&err).into_owned())
    }

    #[test]
    fn unknown_command_is_a_usage_error() {
        assert_eq!(call(&["frobnicate"]).0, 2);
        assert_eq!(call(&[]).0, 2);
    }

    #[test]
    fn a_bad_option_of_any_subcommand_prints_the_message_and_the_help_and_exits_2() {
        for (a, says) in [
            (&["validate"][..], "validate needs at least one FILE"),
            (&["metrics", "--listen"], "metrics: --listen needs a value"),
            (
                &["metrics", "--listen", "nope"],
                "metrics: --listen: \"nope\"",
            ),
            (
                &["inspect", "--color", "purple"],
                "inspect: --color \"purple\"",
            ),
            (
                &["device-plugin", "--socket-dir", "rel"],
                "device-plugin: --socket-dir must be",
            ),
            (
                &["cdi", "--memlock", "0"],
                "cdi: --memlock: memlock \"0\" is less than one page",
            ),
            (&["cdi", "--bogus"], "cdi: unknown option \"--bogus\""),
            (&["memlock-hook"], "memlock-hook needs a LIMIT"),
            (&["memlock-hook", "1G"], "memlock-hook: memlock \"1G\""),
            (
                &["node-config", "a", "b"],
                "node-config takes at most one FILE",
            ),
        ] {
            let (code, err) = call(a);
            assert_eq!(code, 2, "{a:?}: {err}");
            assert!(
                err.starts_with(&format!("rdma-host-device: {says}")),
                "{a:?}: {err}"
            );
            assert!(
                err.contains("\n\nrdma-host-device: a CNI plugin"),
                "{a:?}: the help: {err}"
            );
        }
    }

    #[test]
    fn a_failed_run_is_named_by_its_subcommand_with_what_to_fix_and_exits_1() {
        let missing = "/nonexistent-rhd/node.json";
        let (code, err) = call(&["node-config", missing]);
        assert_eq!(code, 1, "{err}");
        assert!(err.starts_with("rdma-host-device node-config: "), "{err}");
        assert!(err.contains(missing), "names the file: {err}");
        assert!(
            !err.contains("a CNI plugin"),
            "no help for a run error: {err}"
        );

        let out = "/dev/null/cdi.json";
        let (code, err) = call(&[
            "cdi",
            "--out",
            out,
            "--memlock",
            "unlimited",
            "--sysfs",
            "/nonexistent-rhd",
            "--dev",
            "/nonexistent-rhd",
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.starts_with(&format!(
                "rdma-host-device cdi: cannot write CDI spec {out}"
            )),
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
}
