//! rdma-host-device: a CNI plugin that gives a pod a whole host NIC and its RDMA device.
//! This file only decides who is calling (a runtime, the CDI spec's memlock hook, or a person)
//! and prints the answer. It is the binary the runtime execs per attachment, so it holds only
//! the CNI: it reads its environment and stdin, and its few words by hand need no option
//! parser. The node tools are the agent's (crates/agent).

use cni::env::{Command, Env};
use cni::netconf::{MAX_CONFIG_LEN, NetConf, peek_version};
use cni::version::{Version, version_json};
use error::{Code, Error};
use rdma_host_device::{cni, flows, memlock_hook};
use rdma_host_device_core::{error, logging, node};
use std::io::{IsTerminal, Read, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The cniVersion errors are reported in: the config's, once known.
static REPLY_VERSION: OnceLock<String> = OnceLock::new();

fn reply_version() -> &'static str {
    REPLY_VERSION
        .get()
        .map(String::as_str)
        .unwrap_or(Version::LATEST.as_str())
}

/// Set by the panic hook: its error JSON is the answer, whatever happens next.
static PANICKED: AtomicBool = AtomicBool::new(false);

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let e = Error::new(
            Code::Internal,
            format!("rdma-host-device hit a bug: {info}; please report it"),
        );
        if !PANICKED.swap(true, Ordering::SeqCst) {
            let _ = writeln!(std::io::stdout(), "{}", e.to_json(reply_version()));
        }
        let _ = writeln!(std::io::stderr(), "rdma-host-device: {e}");
    }));
    // A person (arguments, or a terminal on stdin) or the memlock hook gets `by_hand`; a
    // runtime, the CNI.
    let by_hand = std::env::args_os().len() > 1 || std::io::stdin().is_terminal();
    if std::env::var_os("CNI_COMMAND").is_none() && by_hand {
        let args: Vec<String> = std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        std::process::exit(self::by_hand(&args));
    }
    let code = match run() {
        // A panic caught on the way (a runtime task) already printed error 999.
        _ if PANICKED.load(Ordering::SeqCst) => 1,
        Ok(out) => {
            let _ = std::io::stdout().write_all(out.as_bytes());
            0
        }
        Err(e) => {
            log::error!("{e}");
            let _ = writeln!(std::io::stdout(), "{}", e.to_json(reply_version()));
            1
        }
    };
    std::process::exit(code);
}

fn read_stdin() -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_CONFIG_LEN as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| error::io_error("reading the network configuration from stdin", e))?;
    Ok(buf)
}

/// One CNI call: returns what goes on stdout.
fn run() -> Result<String, Error> {
    let stdin = if std::env::var("CNI_COMMAND").as_deref() == Ok("VERSION") {
        read_stdin().unwrap_or_default()
    } else {
        read_stdin()?
    };
    if let Some(v) = peek_version(&stdin).filter(|v| Version::parse(v).is_ok()) {
        let _ = REPLY_VERSION.set(v);
    }
    let env = Env::from_process()?;
    if env.command == Command::Version {
        return Ok(version_json(peek_version(&stdin).as_deref()));
    }
    let node = node::Node::load()?;
    // ADD is strict; DEL is lenient: it must undo what ADD did even if the config changed since.
    let (conf, ignored) = if env.command == Command::Del {
        NetConf::parse_lenient(stdin, &node)?
    } else {
        (NetConf::parse_strict(stdin, &node)?, Vec::new())
    };
    logging::init(
        conf.log_level.unwrap_or(log::LevelFilter::Info),
        conf.log_file.as_deref(),
        format!(" {} {}", env.command.name(), env.container_id),
    );
    for i in &ignored {
        log::warn!("ignoring in the network configuration: {i}");
    }
    if matches!(env.command, Command::Status | Command::Gc) && !conf.cni_version.has_status_and_gc()
    {
        return Err(Error::new(
            Code::IncompatibleVersion,
            format!(
                "{} needs cniVersion 1.1.0; the config says {}",
                env.command.name(),
                conf.cni_version.as_str()
            ),
        ));
    }
    match flows::run(&env, &conf, &node)? {
        flows::Output::Result(r) => Ok(r.to_json(conf.cni_version)),
        flows::Output::Nothing => Ok(String::new()),
    }
}

const HELP: &str = "\
A container runtime (containerd, CRI-O, Multus) runs it with CNI_COMMAND set (ADD, DEL, CHECK,
STATUS, GC, VERSION) and the network configuration on stdin; install it in /opt/cni/bin and
name it as \"type\" in a network config. It takes no options: it reads its environment and stdin.
By hand:

  rdma-host-device memlock-hook BYTES|unlimited [--fail-closed]
      The OCI createRuntime hook the CDI spec names: sets RLIMIT_MEMLOCK of the container
      process whose OCI state is on stdin (its first; processes exec'd into the container
      later do not get it: rdma-host-device-agent nri puts it in the container's spec).
      --fail-closed (node.json memlockFailClosed): refuse the container if its spec does not
      already give it that limit, so it waits for the NRI plugin.
  rdma-host-device --version   the version and the CNI versions it speaks
  rdma-host-device --help      this text

The node tools (inspect, metrics, device-plugin, cdi, nri, node-config, validate) are the node
agent's, rdma-host-device-agent, in the same image: see rdma-host-device-agent --help.

Node configuration: /etc/rdma-host-device/node.json (or $RDMA_HOST_DEVICE_NODE_CONFIG); see
docs/configuration.md. Logs: one line per step with the container ID, on stderr and in \"logFile\" (a file
name in the node's logDir) if set (rotated at 10 MiB).

Error codes (1-99 are the CNI spec's, 100+ this plugin's; docs/operations.md says what to do):
";

/// The agent's subcommands, which this binary once had: named, a person is sent there.
const AGENT_COMMANDS: [&str; 7] = [
    "inspect",
    "metrics",
    "device-plugin",
    "cdi",
    "nri",
    "node-config",
    "validate",
];

/// What runs without CNI_COMMAND: `--version`, `--help`, and the memlock hook as the CDI spec
/// runs it (`rdma-host-device memlock-hook LIMIT`, the container's OCI state on stdin). Returns
/// the exit code: 0 done, 1 the hook failed, 2 a usage error.
fn by_hand(args: &[String]) -> i32 {
    let version = format!(
        "rdma-host-device {} (CNI {})",
        env!("CARGO_PKG_VERSION"),
        cni::version::supported_list()
    );
    match args.first().map(String::as_str) {
        Some("--version" | "-V" | "version") => {
            println!("{version}");
            0
        }
        Some("--help" | "-h" | "help") => {
            print!(
                "{version}: a CNI plugin that moves a host NIC and its RDMA device into a pod.\n\n{HELP}"
            );
            for c in error::TABLE {
                println!("  {:>3}  {}", c.code as u32, c.meaning.replace('`', ""));
            }
            0
        }
        Some("memlock-hook") => {
            let options = match memlock_hook::hook_options(&args[1..]) {
                Ok(o) => o,
                Err(e) => return usage(&e.msg),
            };
            match memlock_hook::run_hook(&options) {
                Ok(()) => 0,
                Err(e) => {
                    let why = match e.details.as_str() {
                        "" => e.msg,
                        d => format!("{}: {d}", e.msg),
                    };
                    eprintln!("rdma-host-device memlock-hook: {why}");
                    1
                }
            }
        }
        Some(tool) if AGENT_COMMANDS.contains(&tool) => usage(&format!(
            "{tool} is a node tool: run rdma-host-device-agent {tool} (the same image has it)"
        )),
        Some(other) => usage(&format!("unknown command {other:?}")),
        None => usage("no CNI_COMMAND in the environment"),
    }
}

fn usage(msg: &str) -> i32 {
    eprintln!(
        "rdma-host-device: {msg}\n\nrdma-host-device is a CNI plugin: a runtime runs it with CNI_COMMAND set. \
         By hand: rdma-host-device --help; node tools: rdma-host-device-agent --help."
    );
    2
}
