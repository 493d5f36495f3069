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
            "{}.{:03}Z {} rdma-host-device[{}]{}: {}\n",
            utc(now.as_secs()),
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

/// `YYYY-MM-DDTHH:MM:SS` in UTC (Howard Hinnant's civil-from-days), without a date crate.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let tod = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

fn open_bounded(path: &Path) -> Option<File> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        let _ = std::fs::rename(path, old);
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

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formatting() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00");
        assert_eq!(super::utc(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(super::utc(1_795_262_139), "2026-11-21T11:55:39");
    }
}
