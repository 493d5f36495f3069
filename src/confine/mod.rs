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
//! - **Privilege**: no capabilities at all (bounding, inheritable, ambient sets emptied before
//!   exec: a root program without them still owns root's files, and nothing else), no new
//!   privileges, a seccomp **allow-list** (`seccomp.rs`: the system calls IPAM plugins make,
//!   traced; everything else EPERM, so no extended attributes, modes, owners, times, System V
//!   IPC, keys, inotify/fanotify, namespaces, and no call a newer kernel adds), no TCP
//!   listening (Landlock ABI 4+), no signals to or abstract sockets of anything outside (ABI
//!   6+), no file descriptor of ours but its three pipes. No unix socket at all unless the
//!   node names sockets for it (`ipamSockets`: dhcp's daemon), and then, from Landlock ABI 9
//!   (Linux 7.1), a connect to those paths only: a socket of root's (the kubelet's,
//!   containerd's, the agent's) is not its to speak through.
//! - **Namespaces**: IPC, UTS and cgroup namespaces of its own (root's System V objects, the
//!   host name and the cgroup tree are not shared), besides the PID namespace below. Not a
//!   mount namespace: its teardown waits for an RCU grace period, milliseconds per exec
//!   (docs/bench.md), and Landlock already decides what files it opens.
//! - **Processes**: the plugin is pid 2 of a new PID namespace whose pid 1 is our own code
//!   (a reaper the plugin cannot ptrace, signal or outlive), under a waiter in our namespace.
//!   When the plugin exits the reaper exits and the kernel kills everything left in the
//!   namespace; when this process dies (the runtime gave up on us) the waiter and the reaper
//!   get SIGKILL (PR_SET_PDEATHSIG, which the plugin cannot clear for them) and so does
//!   everything in the namespace.
//! - **Time and size**: one deadline for the whole exchange (stdin, stdout, stderr, exit);
//!   past it the waiter is killed, which takes the namespace. Stdout is read up to a bound;
//!   stderr is read through a pipe of its own, bounded, and logged escaped.
//! - **Surroundings**: an empty working directory of root's, an environment of the CNI
//!   variables and a fixed PATH only.
//!
//! Where the kernel cannot confine (no Landlock, no namespaces, or an architecture without a
//! seccomp allow-list: anything but x86_64), the node decides (`ipamConfinement`): refuse (the
//! default) or run without that part, with a warning.

mod landlock;
mod seccomp;

use rdma_host_device_core::node::{Confinement, MAX_IPAM_OUTPUT, Node};
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
    /// The unix sockets it may connect to. Empty: no AF_UNIX socket at all (seccomp); else
    /// these only, where the kernel can say so (Landlock ABI 9).
    pub sockets: &'a [PathBuf],
    /// Whether running without a part of the confinement the kernel lacks is refused.
    pub required: bool,
    pub deadline: Duration,
    /// Stdout beyond this many bytes is refused (the program is killed).
    pub max_output: usize,
}

impl<'a> Policy<'a> {
    /// What the node lets the IPAM plugin `plugin` do: read `ipamReadPaths`, write beneath
    /// `ipamPaths`, connect to its `ipamSockets` entry, for `ipamTimeoutSeconds`.
    pub fn ipam(node: &'a Node, plugin: &str) -> Policy<'a> {
        Policy {
            read: &node.ipam_read_paths,
            write: &node.ipam_paths,
            sockets: node.ipam_sockets.get(plugin).map_or(&[], Vec::as_slice),
            required: node.ipam_confinement == Confinement::Required,
            deadline: Duration::from_secs(node.ipam_timeout_seconds),
            max_output: MAX_IPAM_OUTPUT,
        }
    }
}

/// How a confined program ended.
#[derive(Debug)]
pub struct Output {
    /// Its exit code (128+N when a signal N ended it).
    pub code: i32,
    pub stdout: Vec<u8>,
    /// The first [`MAX_STDERR`] bytes it wrote to stderr.
    pub stderr: Vec<u8>,
}

/// How much of a confined program's stderr is kept (the rest is read and dropped).
pub const MAX_STDERR: usize = 16 * 1024;

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
                "no answer in the {:.1} s left of this call's ipamTimeoutSeconds; killed it and everything it started",
                d.as_secs_f64()
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
    let filter = seccomp::filter(!policy.sockets.is_empty());
    if filter.is_none() {
        let why = format!(
            "no seccomp allow-list for this architecture ({}; only x86_64 has one)",
            std::env::consts::ARCH
        );
        if policy.required {
            return Err(Failure::Unconfinable(why));
        }
        log::warn!(
            "running {} without a seccomp filter ({why}; ipamConfinement: bestEffort): it may use every system call root without capabilities can",
            exe.display()
        );
    }
    let prog = filter.as_ref().map(seccomp::Filter::prog);
    let last_cap = last_capability();
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .envs(env.iter().copied())
        .env("PATH", PATH)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let ruleset_fd = ruleset.as_ref().map(landlock::Ruleset::raw_fd);
    let parent = std::process::id() as libc::pid_t;
    let required = policy.required;
    // SAFETY: the closure runs between fork and exec and only makes raw syscalls
    // (no allocation, no locks): see `in_child`. `prog` points into `filter`, which lives
    // until after spawn returns.
    let prog_at = prog.as_ref().map(|p| p as *const libc::sock_fprog as usize);
    unsafe {
        cmd.pre_exec(move || {
            let prog = prog_at.map(|a| &*(a as *const libc::sock_fprog));
            in_child(ruleset_fd, prog, last_cap, parent, required)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::Start(format!("{}: {e}", exe.display())))?;
    drop(ruleset);
    drop(filter);
    let outcome = exchange(&mut child, stdin, policy);
    if outcome.is_err() {
        kill(&mut child);
    }
    outcome
}

/// The highest capability number this kernel knows (every one is dropped).
fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// The ruleset: read+execute on `exe`, the loader's paths and `policy.read`; read+write
/// beneath `policy.write`; /dev/null and the random devices.
fn ruleset(abi: u32, exe: &Path, policy: &Policy) -> io::Result<landlock::Ruleset> {
    use landlock::{
        EXECUTE, MAKE_DIR, MAKE_REG, READ_DIR, READ_FILE, REFER, REMOVE_DIR, REMOVE_FILE,
        RESOLVE_UNIX, Ruleset, TRUNCATE, WRITE_FILE,
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
    // Handled from ABI 9 on (connect to a pathname socket); a socket missing now grants
    // nothing (its daemon is not up: the connect would fail anyway).
    for p in policy.sockets {
        rs.allow(p, RESOLVE_UNIX)?;
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

/// Writes a fixed message to stderr from between fork and exec (no allocation).
fn say(msg: &[u8]) {
    // SAFETY: write(2) of a static buffer.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

/// Waits for `pid` (reaping any other child on the way, as a pid 1 must) and exits as it did.
/// Never returns.
fn wait_and_exit(pid: libc::pid_t, any: bool) -> ! {
    // SAFETY: raw syscalls on integers and a stack int.
    unsafe {
        let mut status = 0;
        loop {
            let r = libc::waitpid(if any { -1 } else { pid }, &mut status, 0);
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

/// Closes every descriptor but none, or all from 3 on (`keep_stdio`).
fn close_from(first: u32) {
    // SAFETY: close_range on our own descriptor table.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32);
    }
}

/// Between fork and exec, in the child (the waiter): die with our thread, then make a PID
/// namespace whose pid 1 (the reaper) is this code and whose pid 2 becomes the program, which
/// alone enters the confinement. Only raw syscalls.
fn in_child(
    ruleset: Option<RawFd>,
    filter: Option<&libc::sock_fprog>,
    last_cap: u32,
    parent: libc::pid_t,
    required: bool,
) -> io::Result<()> {
    // SAFETY (whole function): raw syscalls on integers and stack memory only.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            // We died before the line above: our death signal is lost; stop here.
            libc::_exit(1);
        }
        // Namespaces of its own for what root shares with the host beyond files: System V
        // IPC (root's shared memory, semaphores, queues), the host name, the cgroup view.
        if libc::unshare(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWCGROUP) != 0 {
            let e = io::Error::last_os_error();
            if required {
                say(b"rdma-host-device: cannot make IPC, UTS and cgroup namespaces for the IPAM plugin (ipamConfinement: required)\n");
                return Err(e);
            }
            say(b"rdma-host-device: warning: no IPC, UTS or cgroup namespace for the IPAM plugin (ipamConfinement: bestEffort)\n");
        }
        if libc::unshare(libc::CLONE_NEWPID) != 0 {
            if required {
                say(b"rdma-host-device: cannot make a PID namespace for the IPAM plugin (ipamConfinement: required)\n");
                return Err(io::Error::last_os_error());
            }
            say(b"rdma-host-device: warning: no PID namespace for the IPAM plugin (ipamConfinement: bestEffort): what it starts may outlive it\n");
            return confine_self(ruleset, filter, last_cap);
        }
        let reaper = libc::fork();
        if reaper < 0 {
            return Err(io::Error::last_os_error());
        }
        if reaper > 0 {
            // The waiter: keeps none of the program's pipes (nor std's exec-error pipe, so
            // spawn() returns now) and exits as the reaper does.
            close_from(0);
            wait_and_exit(reaper, false);
        }
        // Pid 1 of the new namespace: dies when the waiter does; its exit ends the namespace.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            libc::_exit(127);
        }
        let program = libc::fork();
        if program < 0 {
            libc::_exit(127);
        }
        if program > 0 {
            close_from(0);
            wait_and_exit(program, true);
        }
        confine_self(ruleset, filter, last_cap)
    }
}

/// The program's own confinement, entered last: no capabilities, no new privileges, the
/// Landlock ruleset, the seccomp filter, nothing open but stdio.
fn confine_self(
    ruleset: Option<RawFd>,
    filter: Option<&libc::sock_fprog>,
    last_cap: u32,
) -> io::Result<()> {
    const PR_CAPBSET_DROP: libc::c_int = 24;
    const PR_CAP_AMBIENT: libc::c_int = 47;
    const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: raw syscalls on integers and stack memory only.
    unsafe {
        for cap in 0..=last_cap {
            // EINVAL for a number this kernel does not know: nothing to drop.
            libc::prctl(PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let header = CapHeader {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(fd) = ruleset {
        landlock::restrict_self(fd)?;
    }
    if let Some(prog) = filter {
        seccomp::install(prog)?;
    }
    close_from(3);
    Ok(())
}

/// Writes `stdin`, reads stdout (up to the bound) and stderr (keeping the first
/// [`MAX_STDERR`] bytes), and waits for the exit, all by the deadline.
fn exchange(child: &mut Child, stdin: &[u8], policy: &Policy) -> Result<Output, Failure> {
    let start = Instant::now();
    let left = || policy.deadline.checked_sub(start.elapsed());
    let mut input = child.stdin.take();
    let mut output = child.stdout.take();
    let mut errors = child.stderr.take();
    for fd in [
        input.as_ref().map(AsRawFd::as_raw_fd),
        output.as_ref().map(AsRawFd::as_raw_fd),
        errors.as_ref().map(AsRawFd::as_raw_fd),
    ]
    .into_iter()
    .flatten()
    {
        set_nonblocking(fd).map_err(Failure::Io)?;
    }
    let mut written = 0;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while input.is_some() || output.is_some() || errors.is_some() {
        let Some(left) = left() else {
            return Err(Failure::Deadline(policy.deadline));
        };
        let mut fds = Vec::with_capacity(3);
        if let Some(i) = &input {
            fds.push(libc::pollfd {
                fd: i.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        for r in [
            output.as_ref().map(AsRawFd::as_raw_fd),
            errors.as_ref().map(AsRawFd::as_raw_fd),
        ]
        .into_iter()
        .flatten()
        {
            fds.push(libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        poll(&mut fds, left)?;
        for p in fds.iter().filter(|p| p.revents != 0) {
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
                continue;
            }
            let is_out = output.as_ref().is_some_and(|o| o.as_raw_fd() == p.fd);
            let (pipe, kept, bound) = if is_out {
                (
                    &mut output as &mut dyn Pipe,
                    &mut out,
                    Some(policy.max_output),
                )
            } else {
                (&mut errors as &mut dyn Pipe, &mut err, None)
            };
            match pipe.read_some(&mut buf) {
                Ok(0) => pipe.close(),
                Ok(n) => {
                    if let Some(max) = bound {
                        kept.extend_from_slice(&buf[..n]);
                        if kept.len() > max {
                            return Err(Failure::TooMuchOutput(max));
                        }
                    } else {
                        let room = MAX_STDERR.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
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
    // Stdout and stderr are closed: the exit follows, unless it closed them and carried on.
    let pidfd = pidfd_open(child.id()).map_err(Failure::Io)?;
    loop {
        if let Some(status) = child.try_wait().map_err(Failure::Io)? {
            use std::os::unix::process::ExitStatusExt;
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(128);
            return Ok(Output {
                code,
                stdout: out,
                stderr: err,
            });
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

/// One of the program's output pipes, read until it closes.
trait Pipe {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    fn close(&mut self);
}

impl<R: Read> Pipe for Option<R> {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Some(r) => r.read(buf),
            None => Ok(0),
        }
    }
    fn close(&mut self) {
        *self = None;
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

/// Kills the waiter's process group (the waiter: its death kills the reaper, whose death ends
/// the namespace and the program with everything it started) and reaps the waiter.
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
