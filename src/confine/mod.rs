//! Running a program a network configuration names (an IPAM plugin) so that the kernel, not
//! our reading of its config, bounds what it does. The plugin runs as root with a tenant's
//! JSON on stdin and reads it with its own decoder, its own defaults and its own working
//! directory, so no check of that JSON can prove where it will write. Here:
//!
//! - **Files**: a Landlock ruleset that handles every filesystem right the kernel knows and
//!   grants only what the node lists: read and execute on the plugin itself, the dynamic
//!   loader's directories and `ipamReadPaths`; read and write (no device nodes, FIFOs,
//!   sockets, symlinks or executables made) beneath `ipamPaths`. Anything else is refused by
//!   the kernel, whatever path string the plugin builds (relative, `..`, symlinks).
//! - **Processes**: the plugin is pid 1 of a new PID namespace, held by an intermediate
//!   process that only waits for it. When the plugin exits the kernel kills everything it
//!   started; when this process dies (the runtime gave up on us) the intermediate gets
//!   SIGKILL (PR_SET_PDEATHSIG) and so does the plugin, taking the namespace with it.
//! - **Time and size**: one deadline for the whole exchange (stdin, stdout, exit); past it the
//!   process group is killed and reaped. Stdout is read up to a bound.
//! - **Surroundings**: an empty working directory of root's, an environment of the CNI
//!   variables and a fixed PATH only.
//!
//! Where the kernel cannot confine (no Landlock, or no PID namespace), the node decides
//! (`ipamConfinement`): refuse (the default) or run without that part, with a warning.

mod landlock;

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the dynamic loader reads (and maps executable) for any dynamically linked program.
const LOADER_PATHS: [&str; 5] = [
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/etc/ld.so.cache",
];
/// The PATH a confined program gets.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Its working directory: empty, root's, and granted nothing by the ruleset.
pub const EMPTY_DIR: &str = "/run/rdma-host-device/empty";

/// What a confined program may do, and for how long.
pub struct Policy<'a> {
    /// Read and execute beneath these.
    pub read: &'a [PathBuf],
    /// Read and write beneath these (created when missing).
    pub write: &'a [PathBuf],
    /// Whether running without a part of the confinement the kernel lacks is refused.
    pub required: bool,
    pub deadline: Duration,
    /// Stdout beyond this many bytes is refused (the program is killed).
    pub max_output: usize,
}

/// How a confined program ended.
#[derive(Debug)]
pub struct Output {
    /// Its exit code (128+N when a signal N ended it).
    pub code: i32,
    pub stdout: Vec<u8>,
}

/// Why a confined program gave no answer.
#[derive(Debug)]
pub enum Failure {
    /// The kernel cannot confine it and the node requires confinement.
    Unconfinable(String),
    /// It could not be started (the message says which step).
    Start(String),
    /// Past the deadline: killed, with its process group.
    Deadline(Duration),
    /// More than this much on stdout: killed.
    TooMuchOutput(usize),
    /// Talking to it failed.
    Io(io::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unconfinable(why) => write!(
                f,
                "cannot confine it ({why}); the node requires it (ipamConfinement: required)"
            ),
            Failure::Start(why) => write!(f, "cannot start it: {why}"),
            Failure::Deadline(d) => write!(
                f,
                "no answer within {} s (ipamTimeoutSeconds); killed it and everything it started",
                d.as_secs()
            ),
            Failure::TooMuchOutput(n) => {
                write!(f, "it wrote more than {n} bytes to stdout; killed it")
            }
            Failure::Io(e) => write!(f, "talking to it: {e}"),
        }
    }
}

/// Whether this kernel can confine as [`run`] does: the Landlock ABI, if any.
pub fn landlock_abi() -> Option<u32> {
    landlock::abi()
}

/// Runs `exe` with `env` (plus PATH) and `stdin`, confined by `policy`.
pub fn run(
    exe: &Path,
    env: &[(&str, &str)],
    stdin: &[u8],
    policy: &Policy,
) -> Result<Output, Failure> {
    let ruleset = match landlock::abi() {
        Some(abi) => Some(
            ruleset(abi, exe, policy)
                .map_err(|e| Failure::Start(format!("building its Landlock ruleset: {e}")))?,
        ),
        None if policy.required => {
            return Err(Failure::Unconfinable(
                "this kernel has no Landlock (not built in, or not in its lsm= list)".into(),
            ));
        }
        None => {
            log::warn!(
                "running {} without Landlock (the kernel has none; ipamConfinement: bestEffort): it may write anywhere root can",
                exe.display()
            );
            None
        }
    };
    let cwd = empty_dir().map_err(|e| Failure::Start(format!("its working directory: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .envs(env.iter().copied())
        .env("PATH", PATH)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    let ruleset_fd = ruleset.as_ref().map(landlock::Ruleset::raw_fd);
    let parent = std::process::id() as libc::pid_t;
    let required = policy.required;
    // SAFETY: the closure runs between fork and exec and only makes raw syscalls
    // (no allocation, no locks): see `in_child`.
    unsafe {
        cmd.pre_exec(move || in_child(ruleset_fd, parent, required));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::Start(format!("{}: {e}", exe.display())))?;
    drop(ruleset);
    let outcome = exchange(&mut child, stdin, policy);
    if outcome.is_err() {
        kill(&mut child);
    }
    outcome
}

/// The ruleset: read+execute on `exe`, the loader's paths and `policy.read`; read+write
/// beneath `policy.write`; /dev/null and the random devices.
fn ruleset(abi: u32, exe: &Path, policy: &Policy) -> io::Result<landlock::Ruleset> {
    use landlock::{
        EXECUTE, MAKE_DIR, MAKE_REG, READ_DIR, READ_FILE, REFER, REMOVE_DIR, REMOVE_FILE, Ruleset,
        TRUNCATE, WRITE_FILE,
    };
    let mut rs = Ruleset::new(abi)?;
    let read = READ_FILE | READ_DIR | EXECUTE;
    rs.allow(exe, READ_FILE | EXECUTE)?;
    for p in LOADER_PATHS {
        rs.allow(Path::new(p), read)?;
    }
    rs.allow(Path::new("/dev/null"), READ_FILE | WRITE_FILE)?;
    for p in ["/dev/urandom", "/dev/random"] {
        rs.allow(Path::new(p), READ_FILE)?;
    }
    for p in policy.read {
        rs.allow(p, read)?;
    }
    let write = READ_FILE
        | READ_DIR
        | WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_DIR
        | MAKE_REG
        | REFER
        | TRUNCATE;
    for p in policy.write {
        // The node's own directories: made here, since the plugin may not make their parents.
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(p)
        {
            log::warn!("cannot create ipamPaths entry {}: {e}", p.display());
        }
        rs.allow(p, write)?;
    }
    Ok(rs)
}

/// The working directory: a directory of root's that nothing may write (a plugin resolving a
/// relative path lands there, where the ruleset grants nothing).
fn empty_dir() -> io::Result<&'static Path> {
    let p = Path::new(EMPTY_DIR);
    if let Some(parent) = p.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o555).create(p) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(p)?;
    if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{EMPTY_DIR} is not a directory of root's that only root may write"
        )));
    }
    Ok(p)
}

/// Between fork and exec, in the child: die with our thread, enter the ruleset, and become
/// the parent of the program, which runs as pid 1 of a new PID namespace. Only raw syscalls.
fn in_child(ruleset: Option<RawFd>, parent: libc::pid_t, required: bool) -> io::Result<()> {
    // SAFETY (whole function): raw syscalls on integers and stack memory only.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            // We died before the line above: our death signal is lost; stop here.
            libc::_exit(1);
        }
        if let Some(fd) = ruleset {
            landlock::restrict_self(fd)?;
        }
        if libc::unshare(libc::CLONE_NEWPID) != 0 {
            if required {
                return Err(io::Error::last_os_error());
            }
            return Ok(());
        }
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // Pid 1 of the new namespace: dies when its waiter does.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(());
        }
        // The waiter: keeps no copy of the program's pipes (nor of std's exec-error pipe, so
        // spawn() returns now), waits for it and exits as it did.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        libc::close(0);
        libc::close(1);
        let mut status = 0;
        loop {
            let r = libc::waitpid(pid, &mut status, 0);
            if r == pid {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(128 + libc::WTERMSIG(status));
    }
}

/// Writes `stdin`, reads stdout up to the bound, and waits for the exit, all by the deadline.
fn exchange(child: &mut Child, stdin: &[u8], policy: &Policy) -> Result<Output, Failure> {
    let start = Instant::now();
    let left = || policy.deadline.checked_sub(start.elapsed());
    let mut input = child.stdin.take();
    let mut output = child.stdout.take();
    for fd in [
        input.as_ref().map(AsRawFd::as_raw_fd),
        output.as_ref().map(AsRawFd::as_raw_fd),
    ]
    .into_iter()
    .flatten()
    {
        set_nonblocking(fd).map_err(Failure::Io)?;
    }
    let mut written = 0;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while input.is_some() || output.is_some() {
        let Some(left) = left() else {
            return Err(Failure::Deadline(policy.deadline));
        };
        let mut fds = Vec::with_capacity(2);
        if let Some(i) = &input {
            fds.push(libc::pollfd {
                fd: i.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        if let Some(o) = &output {
            fds.push(libc::pollfd {
                fd: o.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        poll(&mut fds, left)?;
        for p in &fds {
            if p.revents == 0 {
                continue;
            }
            if input.as_ref().is_some_and(|i| i.as_raw_fd() == p.fd) {
                let Some(w) = input.as_mut() else { continue };
                match w.write(&stdin[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // It closed stdin (read what it wanted, or nothing): not ours to report.
                    Err(_) => written = stdin.len(),
                }
                if written >= stdin.len() {
                    input = None;
                }
            } else if let Some(r) = output.as_mut() {
                match r.read(&mut buf) {
                    Ok(0) => output = None,
                    Ok(n) => {
                        out.extend_from_slice(&buf[..n]);
                        if out.len() > policy.max_output {
                            return Err(Failure::TooMuchOutput(policy.max_output));
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    Err(e) => return Err(Failure::Io(e)),
                }
            }
        }
    }
    // Stdout is closed: the exit follows, unless it closed stdout and carried on.
    let pidfd = pidfd_open(child.id()).map_err(Failure::Io)?;
    loop {
        if let Some(status) = child.try_wait().map_err(Failure::Io)? {
            use std::os::unix::process::ExitStatusExt;
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(128);
            return Ok(Output { code, stdout: out });
        }
        let Some(left) = left() else {
            return Err(Failure::Deadline(policy.deadline));
        };
        let mut fds = [libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        poll(&mut fds, left)?;
    }
}

fn poll(fds: &mut [libc::pollfd], left: Duration) -> Result<(), Failure> {
    let ms = libc::c_int::try_from(left.as_millis().saturating_add(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` is a valid slice of pollfd for the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(Failure::Io(e));
        }
    }
    Ok(())
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we hold.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn pidfd_open(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open on our own child's pid (not yet reaped, so not reused).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel, owned here.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Kills the waiter's process group (the waiter, and the program unless it left the group;
/// then its death signal does it) and reaps the waiter.
fn kill(child: &mut Child) {
    // SAFETY: a signal to our own child's process group (its pid, process_group(0)).
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests;
