//! rdma-host-device: a CNI plugin that gives a pod a whole host NIC and its RDMA device.
//! This file only decides who is calling (a runtime or a person) and prints the answer.

mod announce;
mod cli;
mod cni;
mod error;
mod fault;
mod flows;
#[cfg(test)]
mod fuzz;
mod inspect;
mod ipam;
mod link;
mod lock;
mod logging;
mod metrics;
mod netns;
mod node;
mod rdma;
mod select;
mod state;

use cni::env::{Command, Env};
use cni::netconf::{MAX_CONFIG_LEN, NetConf, peek_version};
use cni::version::{Version, version_json};
use error::{Code, Error};
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
    // A person (arguments, or a terminal on stdin) gets the operator CLI; a runtime, the CNI.
    let by_hand = std::env::args().len() > 1 || std::io::stdin().is_terminal();
    if std::env::var_os("CNI_COMMAND").is_none() && by_hand {
        std::process::exit(cli::main());
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
