//! Landlock, spoken directly: a ruleset built in the parent (files opened, rules added), and
//! the two raw calls a freshly forked child makes to enter it (`no_new_privs`, then
//! `landlock_restrict_self`), which allocate nothing and are safe between fork and exec.
//!
//! Every filesystem right the running kernel knows is handled, so anything not granted by a
//! rule is refused by the kernel, whatever path string the confined program builds: relative
//! paths, `..`, symlinks and bind mounts all resolve to a file the rules do or do not cover.
//! From ABI 4 on, it may not bind TCP ports; from ABI 6 on, it may not signal processes
//! outside its domain nor connect to abstract unix sockets; from ABI 9 on, it may connect
//! only to the pathname unix sockets a rule grants.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

pub const EXECUTE: u64 = 1 << 0;
pub const WRITE_FILE: u64 = 1 << 1;
pub const READ_FILE: u64 = 1 << 2;
pub const READ_DIR: u64 = 1 << 3;
pub const REMOVE_DIR: u64 = 1 << 4;
pub const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
pub const MAKE_DIR: u64 = 1 << 7;
pub const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
/// ABI 2: linking or renaming a file into another directory.
pub const REFER: u64 = 1 << 13;
/// ABI 3.
pub const TRUNCATE: u64 = 1 << 14;
/// ABI 5.
const IOCTL_DEV: u64 = 1 << 15;
/// ABI 9 (Linux 7.1): connecting (or sending) to a pathname unix socket.
pub const RESOLVE_UNIX: u64 = 1 << 16;

/// Rights that make sense on a file (not a directory) in a path-beneath rule.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV | RESOLVE_UNIX;

/// ABI 4: binding a TCP socket to a port.
const NET_BIND_TCP: u64 = 1 << 0;

/// ABI 6 scopes.
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of the running kernel, `None` when it has none (not built in, or
/// not in the `lsm=` list).
pub fn abi() -> Option<u32> {
    // SAFETY: the documented version query: no pointers, no side effects.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).ok().filter(|v| *v >= 1)
}

/// Every filesystem right ABI `abi` knows.
fn handled_fs(abi: u32) -> u64 {
    let mut all = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        all |= REFER;
    }
    if abi >= 3 {
        all |= TRUNCATE;
    }
    if abi >= 5 {
        all |= IOCTL_DEV;
    }
    if abi >= 9 {
        all |= RESOLVE_UNIX;
    }
    all
}

/// A ruleset being built, then handed to a child (its fd is close-on-exec).
pub struct Ruleset {
    fd: OwnedFd,
    handled: u64,
}

impl Ruleset {
    /// A ruleset that handles every right the kernel knows (ABI `abi`) and grants none yet.
    pub fn new(abi: u32) -> io::Result<Ruleset> {
        let attr = RulesetAttr {
            handled_access_fs: handled_fs(abi),
            // ABI 4: TCP. Binding (listening) is refused; connecting is not handled (an
            // address manager may talk to an API server).
            handled_access_net: if abi >= 4 { NET_BIND_TCP } else { 0 },
            scoped: if abi >= 6 {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
        };
        // Older kernels read only the fields they know (and check the rest are zero).
        let size = if abi >= 6 {
            std::mem::size_of::<RulesetAttr>()
        } else if abi >= 4 {
            16
        } else {
            8
        };
        // SAFETY: `attr` lives across the call and `size` is within it.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("ruleset fd out of range"))?;
        // SAFETY: the kernel just gave us this fd (close-on-exec), owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Ruleset {
            fd,
            handled: attr.handled_access_fs,
        })
    }

    /// Grants `rights` on `path` and everything beneath it (a file: only the file rights).
    /// A path that does not exist grants nothing and is not an error (`Ok(false)`).
    pub fn allow(&mut self, path: &Path, rights: u64) -> io::Result<bool> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::other("path with a NUL byte"))?;
        // SAFETY: a valid C string; O_PATH opens nothing for reading or writing.
        let raw = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => Ok(false),
                _ => Err(e),
            };
        }
        // SAFETY: just opened, owned here.
        let file = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fstat into a zeroed struct on an fd we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut allowed = rights & self.handled;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            allowed &= FILE_RIGHTS;
        }
        if allowed == 0 {
            return Ok(false);
        }
        let attr = PathBeneathAttr {
            allowed_access: allowed,
            parent_fd: file.as_raw_fd(),
        };
        // SAFETY: `attr` lives across the call; both fds are open.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(true)
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// In a forked child: no new privileges, then the ruleset `fd`. Async-signal-safe.
pub fn restrict_self(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain syscalls on integers.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
