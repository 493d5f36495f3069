//! The operator's command line: what a person gets when running the binary by hand
//! (`--version`, `--help`, `inspect`, `validate`). A runtime never gets here: it sets
//! CNI_COMMAND, and main.rs sends those calls to the CNI flows.

use crate::flags::Flags;
use crate::inspect::{self, Color};
use std::path::PathBuf;

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

  rdma-host-device metrics [--listen ADDR] [--state-dir DIR] [--once]
      A Prometheus exporter (runs until killed): /metrics (OpenMetrics text) and /healthz
      on ADDR (default 0.0.0.0:9879; :PORT for every IPv4 address). Per scrape, for every
      attachment in the state directory (default: the node configuration's stateDir), the
      pod interface's netdev counters and its RDMA device's port state, hardware counters,
      port counters, resource counts and QP owners, read inside the pod's netns and labelled
      with the pod (namespace, pod, container_id, interface, network, host_nic, pci_address,
      rdma_device, netns_mode); then every RDMA device still on the host. --once prints one
      scrape and exits.

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
      rdma-host-device.io/rdma=NAME, with its /dev/infiniband/uverbsN, rdma_cm, and a
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
devicePlugin;
see the README. Logs: one line per step with
the container ID, on stderr and in \"logFile\" (a file name in the node's logDir) if set
(rotated at 10 MiB).

Error codes (1-99 are the CNI spec's, 100+ this plugin's; the README says what to do):
";

/// Returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    dispatch(&args)
}

fn dispatch(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("--version" | "-V" | "version") => {
            println!("{}", version_line());
            0
        }
        Some("--help" | "-h" | "help") => {
            print!("{HELP}");
            for c in crate::error::TABLE {
                println!("  {:>3}  {}", c.code as u32, c.meaning.replace('`', ""));
            }
            0
        }
        Some("inspect") => match inspect_options(&args[1..]) {
            Ok(opts) => inspect::run(&opts),
            Err(msg) => usage_error(&msg),
        },
        Some("metrics") => match crate::metrics::options(&args[1..]) {
            Ok(opts) => crate::metrics::run(&opts),
            Err(msg) => usage_error(&msg),
        },
        Some("device-plugin") => match crate::device_plugin::options(&args[1..]) {
            Ok(opts) => crate::device_plugin::run(&opts),
            Err(msg) => usage_error(&msg),
        },
        Some("node-config") => node_config(args.get(1).map(String::as_str)),
        Some("cdi") => cdi(&args[1..]),
        Some("memlock-hook") => match args.get(1).map(|l| crate::cdi::Memlock::parse(l)) {
            Some(Ok(limit)) => match crate::cdi::memlock_hook(limit, &mut std::io::stdin()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("rdma-host-device: {e}");
                    1
                }
            },
            Some(Err(e)) => usage_error(&e.msg),
            None => usage_error("memlock-hook needs a LIMIT (bytes or unlimited)"),
        },
        Some("validate") => {
            if args.len() < 2 {
                return usage_error("validate needs at least one FILE (or - for stdin)");
            }
            crate::validate::files(&args[1..])
        }
        Some(other) => usage_error(&format!("unknown command {other:?}")),
        None => usage_error("no command"),
    }
}

/// `cdi [--out FILE|-] [--memlock LIMIT] [--hook PATH] [--sysfs DIR] [--dev DIR]`: the CDI
/// spec of this node's RDMA devices, written to FILE (default /var/run/cdi/rdma-host-device.json;
/// `-` prints it). The memlock limit defaults to the node configuration's.
fn cdi(args: &[String]) -> i32 {
    use crate::cdi;
    let mut out = PathBuf::from(cdi::DEFAULT_SPEC);
    let mut memlock = None;
    let mut hook = PathBuf::from(cdi::DEFAULT_HOOK);
    let mut sysfs = PathBuf::from("/sys");
    let mut dev = PathBuf::from("/dev");
    let mut f = Flags::new("cdi", args);
    while let Some(flag) = f.next_flag() {
        let parsed = match flag.as_str() {
            "--out" => f.value().map(|v| out = PathBuf::from(v)),
            "--memlock" => f.value().map(|v| memlock = Some(v)),
            "--hook" => f.value().map(|v| hook = PathBuf::from(v)),
            "--sysfs" => f.value().map(|v| sysfs = PathBuf::from(v)),
            "--dev" => f.value().map(|v| dev = PathBuf::from(v)),
            _ => Err(f.unknown()),
        };
        if let Err(msg) = parsed {
            return usage_error(&msg);
        }
    }
    let limit = match memlock.map_or_else(|| crate::node::Node::load().map(|n| n.memlock), Ok) {
        Ok(m) => match cdi::Memlock::parse(&m) {
            Ok(l) => l,
            Err(e) => return usage_error(&e.msg),
        },
        Err(e) => {
            eprintln!("rdma-host-device: {e}");
            return 1;
        }
    };
    let devices = cdi::verbs_devices(&sysfs, &dev);
    let previous = (out.as_os_str() != "-")
        .then(|| std::fs::read(&out).ok())
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let spec = cdi::spec(&devices, &dev, limit, &hook, previous.as_ref());
    if out.as_os_str() == "-" {
        println!(
            "{}",
            serde_json::to_string_pretty(&spec).unwrap_or_default()
        );
        return 0;
    }
    match cdi::write_spec(&out, &spec) {
        Ok(()) => {
            eprintln!(
                "rdma-host-device: {} written: {} RDMA device(s) as {}=NAME, memlock {limit:?}",
                out.display(),
                spec["devices"].as_array().map_or(0, Vec::len),
                cdi::KIND
            );
            0
        }
        Err(e) => {
            eprintln!("rdma-host-device: {e}");
            1
        }
    }
}

/// `node-config [FILE]`: the node configuration the plugin would use (FILE, or the one the
/// plugin finds), printed as JSON with the defaults filled in; exit 1 if it is invalid.
fn node_config(file: Option<&str>) -> i32 {
    let node = match file {
        Some(f) => crate::node::Node::load_from(std::path::Path::new(f)),
        None => crate::node::Node::load(),
    };
    match node.and_then(|n| n.device_plugin().map(|_| n)) {
        Ok(n) => {
            println!("{}", n.to_json());
            0
        }
        Err(e) => {
            eprintln!("rdma-host-device: {e}");
            1
        }
    }
}

fn version_line() -> String {
    format!(
        "rdma-host-device {} (CNI {})",
        env!("CARGO_PKG_VERSION"),
        crate::cni::version::supported_list()
    )
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("rdma-host-device: {msg}\n");
    eprint!("{HELP}");
    2
}

fn inspect_options(args: &[String]) -> Result<inspect::Options, String> {
    let mut opts = inspect::Options::default();
    let mut f = Flags::new("inspect", args);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            "--json" => opts.json = true,
            "--watch" | "-w" => {
                // SECS is optional: the next argument only if it is a number.
                let secs = match f.optional_value(|n| n.parse::<f64>().is_ok()) {
                    None => 2.0,
                    Some(s) => s
                        .parse::<f64>()
                        .ok()
                        .filter(|s| (0.1..=3600.0).contains(s))
                        .ok_or_else(|| format!("--watch {s:?}: want seconds, 0.1 to 3600"))?,
                };
                opts.watch = Some(std::time::Duration::from_secs_f64(secs));
            }
            "--all" | "-a" => opts.all = true,
            "--state-dir" => opts.state_dir = f.absolute_path()?,
            "--color" | "--colour" => {
                opts.color = match f.value()?.as_str() {
                    "auto" => Color::Auto,
                    "always" => Color::Always,
                    "never" => Color::Never,
                    v => return Err(format!("--color {v:?}: use auto, always or never")),
                }
            }
            "--no-color" => opts.color = Color::Never,
            _ => return Err(f.unknown()),
        }
    }
    if !opts.state_dir.is_absolute() {
        return Err("--state-dir must be an absolute path".into());
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn inspect_flags() {
        let o = inspect_options(&args(&["--json", "--all", "--state-dir", "/x"])).unwrap();
        assert!(o.json && o.all);
        assert_eq!(o.state_dir, PathBuf::from("/x"));
        let o = inspect_options(&args(&["--state-dir=/y", "--color=never"])).unwrap();
        assert_eq!(o.state_dir, PathBuf::from("/y"));
        assert_eq!(o.color, Color::Never);
        assert!(inspect_options(&args(&["--state-dir"])).is_err());
        assert!(inspect_options(&args(&["--state-dir", "rel"])).is_err());
        assert!(inspect_options(&args(&["--bogus"])).is_err());
        assert!(inspect_options(&args(&["--color", "purple"])).is_err());
        assert_eq!(inspect_options(&[]).unwrap().watch, None);
        let secs = |a: &[&str]| inspect_options(&args(a)).map(|o| o.watch.unwrap().as_secs_f64());
        assert_eq!(secs(&["--watch"]), Ok(2.0));
        assert_eq!(secs(&["--watch", "--json"]), Ok(2.0));
        assert_eq!(secs(&["--watch", "0.5", "--json"]), Ok(0.5));
        assert_eq!(secs(&["--watch=5"]), Ok(5.0));
        assert!(inspect_options(&args(&["--watch=0"])).is_err());
        assert!(inspect_options(&args(&["--watch=x"])).is_err());
    }

    #[test]
    fn unknown_command_is_a_usage_error() {
        assert_eq!(dispatch(&args(&["frobnicate"])), 2);
        assert_eq!(dispatch(&args(&["validate"])), 2);
    }
}
