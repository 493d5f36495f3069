//! Logging for operators: one line per step, to stderr and, when the config names one, to a
//! size-bounded log file. Never to stdout, which belongs to the CNI protocol.

use log::{LevelFilter, Log, Metadata, Record};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// When the log file grows past this, it is rotated to `<file>.1` (one generation kept).
const MAX_LOG_BYTES: u64 = 10 << 20;

struct Logger {
    level: LevelFilter,
    file: Option<Mutex<File>>,
    tag: String,
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let line = format!(
            "{}.{:03} {} rdma-host-device[{}]{}: {}\n",
            now.as_secs(),
            now.subsec_millis(),
            r.level(),
            std::process::id(),
            self.tag,
            r.args()
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
        if let Some(f) = &self.file
            && let Ok(mut f) = f.lock()
        {
            let _ = f.write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

fn open_bounded(path: &Path) -> Option<File> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let _ = std::fs::rename(path, path.with_extension("1"));
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    OpenOptions::new().create(true).append(true).open(path).ok()
}

/// Install the logger. `tag` names the call (command and container) on every line.
pub fn init(level: LevelFilter, file: Option<&Path>, tag: String) {
    let logger = Logger {
        level,
        file: file.and_then(open_bounded).map(Mutex::new),
        tag,
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(level);
    }
}
