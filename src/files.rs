//! Files the plugin writes for others to read (the device-info file, the CDI spec): replaced
//! whole through a temp file of our own and a rename, so a reader sees the old file or the new
//! one, and a symlink at the path is replaced, never followed.
//!
//! And the one reader of files the node's tools and the verbs take in (the node configuration,
//! `validate`'s files, state records, the previous CDI spec, a device plugin's device-info
//! file, the metrics token): a regular file only, opened without blocking (a FIFO put at the
//! path cannot stall a tool or the one thread that answers scrapes), at most a bound.
//!
//! And directories only root may read (the state directory, which holds every attachment's
//! `ipam` object).

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What kind of file `t` is, for a message (`a FIFO`).
fn kind(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The whole of the regular file at `path` (symlinks followed: ConfigMap mounts are symlinks),
/// at most `max` bytes. A FIFO, device, socket or directory is refused without waiting
/// (`InvalidInput`, naming what it is), a longer file too (`FileTooLarge`); a missing one is
/// `NotFound` as usual.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_bounded(path, max, 0)
}

/// [`read_regular`], but a symlink at `path` is not followed (`ELOOP`): for files in
/// directories others may write to.
pub fn read_regular_nofollow(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_bounded(path, max, libc::O_NOFOLLOW)
}

fn read_bounded(path: &Path, max: u64, flags: i32) -> std::io::Result<Vec<u8>> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind(t)),
        ));
    }
    let mut body = Vec::new();
    f.take(max + 1).read_to_end(&mut body)?;
    if body.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(body)
}

/// Make `dir` (and missing parents) a directory only its owner may enter: created 0700, and
/// an existing one with group or other bits (as versions before this one made the state
/// directory: 0755) tightened to 0700. A symlink or a directory of another owner is left as it
/// is (the node's choice).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let m = fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if m.is_dir()
        && m.permissions().mode() & 0o077 != 0
        && std::os::unix::fs::MetadataExt::uid(&m) == me
    {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Put `body` at `path` (mode 0644), making its directory if needed.
pub fn replace(path: &Path, body: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = Path::new(&tmp);
    let _ = fs::remove_file(tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .and_then(|mut f| f.write_all(body).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rhd-files-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_reader_takes_regular_files_within_the_bound_and_never_waits_on_a_fifo() {
        let d = tmp("read");
        let f = d.join("f");
        fs::write(&f, b"12345").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"12345");
        let e = read_regular(&f, 4).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("larger than 4 bytes"), "{e}");
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        let e = read_regular(&fifo, 100).unwrap_err();
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(
            read_regular(&d, 100)
                .unwrap_err()
                .to_string()
                .contains("a directory")
        );
        let e = read_regular(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_regular(&link, 5).unwrap(), b"12345");
        assert_eq!(
            read_regular_nofollow(&link, 5).unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_private_dir_is_made_0700_and_an_open_one_tightened() {
        let d = tmp("private");
        let new = d.join("a/b");
        private_dir(&new).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&new), 0o700);
        let old = d.join("old");
        fs::create_dir(&old).unwrap();
        fs::set_permissions(&old, fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&old).unwrap();
        assert_eq!(mode(&old), 0o700);
        let _ = fs::remove_dir_all(&d);
    }
}
