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
use std::os::unix::fs::OpenOptionsExt;
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
            line(&r.args().to_string(), MAX_LINE)
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

// ---------------------------------------------------------------- untrusted text

/// The most of one untrusted value (a name, a tenant's string) a message quotes.
pub const MAX_SHOWN: usize = 256;

/// The most of one log line (or one line printed for a person) written.
pub const MAX_LINE: usize = 8 << 10;

/// Untrusted text (an interface or RDMA device name a pod chose, a tenant's value) quoted for
/// a person, as `{:?}` would, but safe for a terminal and bounded: control characters, escape
/// sequences and bidi overrides escaped (`\u{1b}`), bytes that are not UTF-8 as `\xff`, at most
/// [`MAX_SHOWN`] bytes of it, then how long it was. Every message that quotes such text uses
/// this (or [`escaped`]); every log line and error line passes [`line`] besides.
pub fn shown(raw: impl AsRef<[u8]>) -> String {
    let raw = raw.as_ref();
    let (body, cut) = escape(raw, MAX_SHOWN, true);
    if cut {
        format!("\"{body}\"... ({} bytes)", raw.len())
    } else {
        format!("\"{body}\"")
    }
}

/// Like [`shown`] without the quotes, at most `max` bytes (a name in a table cell).
pub fn escaped(raw: impl AsRef<[u8]>, max: usize) -> String {
    let raw = raw.as_ref();
    let (body, cut) = escape(raw, max, true);
    if cut { format!("{body}...") } else { body }
}

/// A whole line for a person (a log line, an error on stderr, a line of `inspect` or
/// `validate`): control characters and bidi overrides escaped, a newline too (one record, one
/// line), other text (quotes, backslashes of `{:?}` output) as it is; at most `max` bytes.
pub fn line(text: &str, max: usize) -> String {
    let (body, cut) = escape(text.as_bytes(), max, false);
    if cut {
        format!("{body}... ({} bytes)", text.len())
    } else {
        body
    }
}

/// Characters a terminal acts on or that reorder what follows: C0/C1 controls, DEL, and the
/// invisible formatting and bidi controls.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// The one escaper: `raw` escaped (`quoted`: as `{:?}` escapes a string's body, else only
/// unsafe characters), cut at `max` bytes of output on a character boundary; true if cut.
fn escape(raw: &[u8], max: usize, quoted: bool) -> (String, bool) {
    // Nearly every line and name is printable ASCII: taken as it is, without the Unicode
    // tables `escape_debug` consults.
    if raw.len() <= max
        && raw
            .iter()
            .all(|&b| (0x20..0x7f).contains(&b) && !(quoted && matches!(b, b'"' | b'\\')))
    {
        return (String::from_utf8_lossy(raw).into_owned(), false);
    }
    let mut out = String::with_capacity(raw.len().min(max));
    let mut push = |piece: &str| -> bool {
        if out.len() + piece.len() > max {
            return false;
        }
        out.push_str(piece);
        true
    };
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            let piece: String = if quoted && c != '\'' || !quoted && unsafe_char(c) {
                let e: String = c.escape_debug().collect();
                if e.len() == c.len_utf8() && unsafe_char(c) {
                    c.escape_unicode().collect()
                } else {
                    e
                }
            } else {
                c.to_string()
            };
            if !push(&piece) {
                return (out, true);
            }
        }
        for b in chunk.invalid() {
            if !push(&format!("\\x{b:02x}")) {
                return (out, true);
            }
        }
    }
    (out, false)
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
        crate::files::create_dirs(dir, 0o750)
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
            crate::files::set_mode(&f, 0o640)
                .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
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
                "rdma-host-device: not logging to a file: {}",
                line(&e, MAX_LINE)
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
    use super::*;

    #[test]
    fn names_a_pod_chose_reach_a_terminal_escaped() {
        // An interface name may hold any byte but '/', ':', whitespace; an RDMA device name
        // any at all. Nothing a terminal acts on comes through.
        assert_eq!(shown("mlx5_0"), "\"mlx5_0\"");
        assert_eq!(shown("a\x1b[2Jb"), "\"a\\u{1b}[2Jb\"");
        assert_eq!(shown(b"pod\xff\xfe1"), "\"pod\\xff\\xfe1\"");
        assert_eq!(shown("evil\u{202e}txt"), "\"evil\\u{202e}txt\"");
        assert_eq!(shown("q\"b\\n"), "\"q\\\"b\\\\n\"");
        assert_eq!(shown("it's"), "\"it's\"");
        assert_eq!(shown("\u{9b}31m"), "\"\\u{9b}31m\"", "the C1 CSI too");
        assert_eq!(shown("é"), "\"é\"");
        assert_eq!(escaped(b"pod\xff\xfe1", 64), "pod\\xff\\xfe1");
        for s in [shown("\x1b]0;x\x07\r\n"), line("a\x1b[31m\nb\rc", MAX_LINE)] {
            assert!(!s.chars().any(unsafe_char), "{s}");
        }
        // A line keeps what {:?} already escaped, and its quotes.
        assert_eq!(
            line("device \"a\\u{1b}\" gone", 100),
            "device \"a\\u{1b}\" gone"
        );
    }

    #[test]
    fn a_tenants_megabyte_is_not_echoed() {
        let big = "x".repeat(1 << 20);
        let s = shown(&big);
        assert!(s.len() < MAX_SHOWN + 32, "{}", s.len());
        assert!(s.ends_with("... (1048576 bytes)"), "{}", &s[s.len() - 30..]);
        let l = line(&big, MAX_LINE);
        assert!(l.len() < MAX_LINE + 32);
        // Cut on a character boundary, escapes whole.
        let s = shown("\x1b".repeat(1000));
        assert!(s.contains("\\u{1b}\"..."), "{s}");
        let s = shown("é".repeat(1000));
        assert!(s.starts_with("\"é"));
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00");
        assert_eq!(super::utc(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(super::utc(1_795_262_139), "2026-11-21T11:55:39");
    }
}
