//! Logging for operators: one line per step, to stderr and, when the config names one, to a
//! size-bounded log file in the node's log directory. Never to stdout, which belongs to the CNI
//! protocol.
//!
//! The file name comes from a tenant's config, so the file is treated as hostile: opened with
//! O_NOFOLLOW|O_NONBLOCK (a symlink or a FIFO can neither redirect nor block us), used only if
//! it is a regular file that this plugin created (it starts with [`HEADER`]), and only such
//! files are ever rotated or replaced.

use log::{LevelFilter, Log, Metadata, Record};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The first line of every log file this plugin creates: what marks a file as ours.
pub const HEADER: &[u8] = b"# rdma-host-device log\n";

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

fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    o
}

/// Open `path` for reading without following a symlink or blocking; `Some` only for a regular
/// file that starts with our header.
fn open_ours(path: &Path) -> Option<File> {
    let mut f = options().read(true).open(path).ok()?;
    if !f.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut head = vec![0; HEADER.len()];
    f.read_exact(&mut head).ok()?;
    (head == HEADER).then_some(f)
}

fn rotated(path: &Path) -> PathBuf {
    let mut old = path.as_os_str().to_owned();
    old.push(".1");
    PathBuf::from(old)
}

/// Open the log file for appending, creating it (and the node's log directory) if needed.
/// Refuses anything that is not a regular file we created; rotates a file of ours that grew
/// past [`MAX_LOG_BYTES`], replacing only an old generation that is ours too.
pub fn open_confined(path: &Path) -> Result<File, String> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|e| format!("cannot create the log directory {}: {e}", dir.display()))?;
    }
    if let Some(f) = open_ours(path)
        && f.metadata().is_ok_and(|m| m.len() > MAX_LOG_BYTES)
    {
        let old = rotated(path);
        let old_is_free = matches!(std::fs::symlink_metadata(&old), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if old_is_free || open_ours(&old).is_some() {
            let _ = std::fs::rename(path, &old);
        }
    }
    let mut f = match options()
        .append(true)
        .create_new(true)
        .mode(0o640)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(HEADER)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            return Ok(f);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => options()
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?,
        Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
    };
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() == 0 {
        // Created by a concurrent call that has not written the header yet: write it too.
        f.write_all(HEADER)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    } else if open_ours(path).is_none() {
        return Err(format!(
            "{} was not created by rdma-host-device; not writing to it",
            path.display()
        ));
    }
    Ok(f)
}

/// Install the logger. `tag` names the call (command and container) on every line.
pub fn init(level: LevelFilter, file: Option<&Path>, tag: String) {
    let file = file.and_then(|p| match open_confined(p) {
        Ok(f) => Some(f),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "rdma-host-device: not logging to a file: {e}"
            );
            None
        }
    });
    let logger = Logger {
        level,
        file: file.map(Mutex::new),
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
