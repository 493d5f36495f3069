//! The seccomp filter of a confined program: an **allow-list**. A root program without
//! capabilities still owns root's files and shares the kernel's other interfaces with root:
//! extended attributes (a POSIX ACL makes root's 0600 file world-writable), System V IPC,
//! keyrings, inotify and fanotify (names in directories Landlock will not list), and whatever
//! system call the next kernel adds (`setxattrat`, 463, came after the first version of this
//! filter named the xattr calls it knew). So the filter names what IPAM plugins do and
//! refuses everything else with EPERM (not a kill: Go's runtime and glibc probe system calls
//! and carry on when told EPERM or ENOSYS).
//!
//! Where the list comes from: `scripts/trace-ipam-syscalls.sh` runs Debian's host-local,
//! static and dhcp (containernetworking-plugins, /usr/lib/cni) and a shell-script plugin (dash
//! and the tools the tests' stand-ins use) through VERSION, ADD, CHECK, DEL, GC and STATUS
//! under `strace -f`; [`ALLOWED`] is the union of what they made, plus the few calls of the
//! same families a libc or Go runtime of another build makes instead (`open` for `openat`,
//! `epoll_wait` for `epoll_pwait`, `exit` for a thread, `restart_syscall` for the kernel's own
//! restarts), each marked. Whereabouts is not packaged in Debian and was not traced: it is a
//! Go program like the three above, plus TCP to its API server (`socket` AF_INET/AF_INET6,
//! `connect`, the send/receive calls), which the list allows. The test
//! `confine::tests::debian_ipam_plugins_do_under_the_allow_list_what_they_do_without_it`
//! runs the traced plugins through every verb under the real confinement.
//!
//! Some allowed calls are narrowed by an argument: `clone` without namespace flags (a user
//! namespace would hand the program every capability inside it), `clone3` answers ENOSYS (its
//! flags are behind a pointer; glibc then falls back to `clone`), `socket` for unix, IPv4 and
//! IPv6 only (no netlink, packet or other families' kernel code), `ioctl` for the terminal and
//! descriptor queries libc makes only, `prctl` for a handful of harmless options, `fcntl`
//! without leases, dnotify or signals on a descriptor's events, and `open`,
//! `openat` and `creat` without S_ISUID or S_ISGID in their mode (a root-owned set-id file in
//! `ipamPaths` would be root for whoever runs it later). `openat2` and io_uring answer ENOSYS
//! (a mode behind a pointer; requests that bypass seccomp), which programs take for an old
//! kernel. No chmod, chown, xattr, utimes, link or symlink call is allowed at all. Built before
//! fork, installed between fork and exec.
//!
//! x86_64 only (the numbers are the architecture's): elsewhere [`filter`] is `None` and the
//! caller refuses to run the program unless the node said `ipamConfinement: bestEffort`. Calls
//! made through another architecture's convention (i386's `int 0x80`, x32) answer ENOSYS.

/// The program, owned by the parent; the child installs it by pointer.
pub struct Filter {
    code: Vec<libc::sock_filter>,
}

impl Filter {
    pub fn prog(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            len: self.code.len() as libc::c_ushort,
            filter: self.code.as_ptr() as *mut libc::sock_filter,
        }
    }
}

/// What the filter does with one system call.
#[derive(Clone, Copy, Debug)]
pub enum Rule {
    Allow,
    /// Refused with this errno (ENOSYS where a program should fall back to another call).
    Errno(i32),
    /// Allowed unless the low 32 bits of argument `arg` have any bit of `mask` (EPERM).
    Without {
        arg: u32,
        mask: u32,
    },
    /// Allowed only when the low 32 bits of argument `arg` are one of `values` (EPERM).
    OneOf {
        arg: u32,
        values: &'static [u32],
    },
    /// Allowed unless the low 32 bits of argument `arg` are one of `values` (EPERM).
    NoneOf {
        arg: u32,
        values: &'static [u32],
    },
}

/// The name of a system call [`ALLOWED`] lists, for tests and messages.
pub type Named = (&'static str, i64, Rule);

#[cfg(target_arch = "x86_64")]
mod list {
    use super::{Named, Rule};
    use libc::*;

    const SETID: u32 = 0o6000;
    /// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
    /// CLONE_NEWPID | CLONE_NEWNET (clone's low byte is the exit signal, not CLONE_NEWTIME).
    const NEW_NAMESPACES: u32 = 0x7e02_0000;
    const A: Rule = Rule::Allow;
    const ENOSYS_: Rule = Rule::Errno(libc::ENOSYS);
    /// TCGETS, TIOCGPGRP, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX: what libc, the
    /// shell and Go ask of their descriptors (a pipe answers ENOTTY to the terminal ones).
    const IOCTLS: &[u32] = &[0x5401, 0x540f, 0x5413, 0x541b, 0x5421, 0x5450, 0x5451];
    /// PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_NAME, PR_GET_NAME,
    /// PR_CAPBSET_READ, PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS, PR_SET_VMA (glibc names its
    /// mappings).
    const PRCTLS: &[u32] = &[1, 2, 3, 15, 16, 23, 38, 39, 0x5356_4d41];
    /// AF_UNIX (the dhcp daemon's socket), AF_INET, AF_INET6 (whereabouts' API server, DNS).
    const FAMILIES: &[u32] = &[1, 2, 10];
    /// AF_INET, AF_INET6: a plugin the node names no unix socket for (`ipamSockets`).
    const FAMILIES_WITHOUT_UNIX: &[u32] = &[2, 10];
    const OPEN_MODE_1: Rule = Rule::Without {
        arg: 1,
        mask: SETID,
    };
    const OPEN_MODE_2: Rule = Rule::Without {
        arg: 2,
        mask: SETID,
    };
    const OPEN_MODE_3: Rule = Rule::Without {
        arg: 3,
        mask: SETID,
    };
    const CLONE: Rule = Rule::Without {
        arg: 0,
        mask: NEW_NAMESPACES,
    };
    const IOCTL: Rule = Rule::OneOf {
        arg: 1,
        values: IOCTLS,
    };
    const SOCKET: Rule = Rule::OneOf {
        arg: 0,
        values: FAMILIES,
    };
    /// `socket` for a plugin without unix sockets: in place of [`SOCKET`].
    pub const SOCKET_WITHOUT_UNIX: Rule = Rule::OneOf {
        arg: 0,
        values: FAMILIES_WITHOUT_UNIX,
    };
    const SOCKETPAIR: Rule = Rule::OneOf {
        arg: 0,
        values: &[1],
    };
    const PRCTL: Rule = Rule::OneOf {
        arg: 0,
        values: PRCTLS,
    };
    /// F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY: signals on a descriptor's
    /// events and leases, none of which an IPAM plugin uses. A lease needs only ownership of
    /// the file, which uid 0 has of root's files it may read (the loader's, `ipamReadPaths`,
    /// the pools beneath `ipamPaths`): a read lease made every writer of such a file on the
    /// node wait up to the deadline (issue 36's attack pass); F_NOTIFY is dnotify, the
    /// inotify the list leaves out.
    const FCNTL: Rule = Rule::NoneOf {
        arg: 1,
        values: &[8, 10, 15, 1024, 1026],
    };

    /// Every system call a confined program may make (in any order: the filter is a search
    /// tree by number). Unmarked: seen in the traces (see the module's header);
    /// `(family)`: not seen, the same call under another name or by another runtime.
    pub const ALLOWED: &[Named] = &[
        ("read", SYS_read, A),
        ("write", SYS_write, A),
        ("futex", SYS_futex, A),
        ("epoll_pwait", SYS_epoll_pwait, A),
        ("nanosleep", SYS_nanosleep, A),
        ("rt_sigreturn", SYS_rt_sigreturn, A),
        ("rt_sigprocmask", SYS_rt_sigprocmask, A),
        ("rt_sigaction", SYS_rt_sigaction, A),
        ("sched_yield", SYS_sched_yield, A),
        ("mmap", SYS_mmap, A),
        ("munmap", SYS_munmap, A),
        ("mprotect", SYS_mprotect, A),
        ("madvise", SYS_madvise, A),
        ("brk", SYS_brk, A),
        ("close", SYS_close, A),
        ("fcntl", SYS_fcntl, FCNTL),
        ("openat", SYS_openat, OPEN_MODE_3),
        ("newfstatat", SYS_newfstatat, A),
        ("fstat", SYS_fstat, A),
        ("statx", SYS_statx, A),
        ("pread64", SYS_pread64, A),
        ("lseek", SYS_lseek, A),
        ("getdents64", SYS_getdents64, A),
        ("getrandom", SYS_getrandom, A),
        ("epoll_ctl", SYS_epoll_ctl, A),
        ("epoll_create1", SYS_epoll_create1, A),
        ("pipe2", SYS_pipe2, A),
        ("getpid", SYS_getpid, A),
        ("gettid", SYS_gettid, A),
        ("getppid", SYS_getppid, A),
        ("getuid", SYS_getuid, A),
        ("geteuid", SYS_geteuid, A),
        ("getgid", SYS_getgid, A),
        ("getegid", SYS_getegid, A),
        ("tgkill", SYS_tgkill, A),
        ("sigaltstack", SYS_sigaltstack, A),
        ("clone", SYS_clone, CLONE),
        ("clone3", SYS_clone3, ENOSYS_),
        ("vfork", SYS_vfork, A),
        ("execve", SYS_execve, A),
        ("wait4", SYS_wait4, A),
        ("exit_group", SYS_exit_group, A),
        ("exit", SYS_exit, A), // (family) a thread's end
        ("set_robust_list", SYS_set_robust_list, A),
        ("set_tid_address", SYS_set_tid_address, A),
        ("rseq", SYS_rseq, A),
        ("arch_prctl", SYS_arch_prctl, A),
        ("prlimit64", SYS_prlimit64, A),
        ("getrlimit", SYS_getrlimit, A),
        ("sched_getaffinity", SYS_sched_getaffinity, A),
        ("rt_sigsuspend", SYS_rt_sigsuspend, A),
        ("clock_nanosleep", SYS_clock_nanosleep, A),
        ("access", SYS_access, A),
        ("faccessat", SYS_faccessat, A),   // (family)
        ("faccessat2", SYS_faccessat2, A), // (family)
        ("dup2", SYS_dup2, A),
        ("dup", SYS_dup, A),   // (family)
        ("dup3", SYS_dup3, A), // (family)
        ("ioctl", SYS_ioctl, IOCTL),
        ("getcwd", SYS_getcwd, A),
        ("chdir", SYS_chdir, A),
        ("umask", SYS_umask, A),
        ("statfs", SYS_statfs, A),
        ("fadvise64", SYS_fadvise64, A),
        ("flock", SYS_flock, A),
        ("mkdirat", SYS_mkdirat, A),
        ("mkdir", SYS_mkdir, A),
        ("unlinkat", SYS_unlinkat, A),
        ("socket", SYS_socket, SOCKET),
        ("connect", SYS_connect, A),
        ("getsockname", SYS_getsockname, A),
        ("getpeername", SYS_getpeername, A),
        // (family) below: the same work by other names, other runtimes, other plugins.
        ("open", SYS_open, OPEN_MODE_2),
        ("creat", SYS_creat, OPEN_MODE_1),
        ("openat2", SYS_openat2, ENOSYS_),
        ("readv", SYS_readv, A),
        ("writev", SYS_writev, A),
        ("pwrite64", SYS_pwrite64, A),
        ("stat", SYS_stat, A),
        ("lstat", SYS_lstat, A),
        ("fstatfs", SYS_fstatfs, A),
        ("readlink", SYS_readlink, A),
        ("readlinkat", SYS_readlinkat, A),
        ("fchdir", SYS_fchdir, A),
        ("rename", SYS_rename, A),
        ("renameat", SYS_renameat, A),
        ("renameat2", SYS_renameat2, A),
        ("unlink", SYS_unlink, A),
        ("rmdir", SYS_rmdir, A),
        ("ftruncate", SYS_ftruncate, A),
        ("fsync", SYS_fsync, A),
        ("fdatasync", SYS_fdatasync, A),
        ("copy_file_range", SYS_copy_file_range, ENOSYS_),
        ("pipe", SYS_pipe, A),
        ("poll", SYS_poll, A),
        ("ppoll", SYS_ppoll, A),
        ("select", SYS_select, A),
        ("pselect6", SYS_pselect6, A),
        ("epoll_wait", SYS_epoll_wait, A),
        ("epoll_create", SYS_epoll_create, A),
        ("eventfd2", SYS_eventfd2, A),
        ("restart_syscall", SYS_restart_syscall, A),
        ("rt_sigtimedwait", SYS_rt_sigtimedwait, A),
        ("rt_sigpending", SYS_rt_sigpending, A),
        ("kill", SYS_kill, A),
        ("tkill", SYS_tkill, A),
        ("fork", SYS_fork, A),
        ("waitid", SYS_waitid, A),
        ("setsid", SYS_setsid, A),
        ("setpgid", SYS_setpgid, A),
        ("getpgid", SYS_getpgid, A),
        ("getpgrp", SYS_getpgrp, A),
        ("getsid", SYS_getsid, A),
        ("getgroups", SYS_getgroups, A),
        ("getresuid", SYS_getresuid, A),
        ("getresgid", SYS_getresgid, A),
        ("prctl", SYS_prctl, PRCTL),
        ("uname", SYS_uname, A),
        ("sysinfo", SYS_sysinfo, A),
        ("getrusage", SYS_getrusage, A),
        ("times", SYS_times, A),
        ("clock_gettime", SYS_clock_gettime, A),
        ("clock_getres", SYS_clock_getres, A),
        ("gettimeofday", SYS_gettimeofday, A),
        ("time", SYS_time, A),
        ("mremap", SYS_mremap, A),
        ("close_range", SYS_close_range, A),
        ("socketpair", SYS_socketpair, SOCKETPAIR),
        ("setsockopt", SYS_setsockopt, A),
        ("getsockopt", SYS_getsockopt, A),
        ("sendto", SYS_sendto, A),
        ("recvfrom", SYS_recvfrom, A),
        ("sendmsg", SYS_sendmsg, A),
        ("recvmsg", SYS_recvmsg, A),
        ("shutdown", SYS_shutdown, A),
        ("io_uring_setup", SYS_io_uring_setup, ENOSYS_),
    ];
}

#[cfg(target_arch = "x86_64")]
pub use list::ALLOWED;

/// Classic BPF over struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }.
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;

fn st(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jmp(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The offset of the low 32 bits (little endian) of args[n] in seccomp_data.
fn arg(n: u32) -> u32 {
    16 + 8 * n
}

/// The instructions that decide one call whose number matched (each ends in a return).
fn body(rule: Rule) -> Vec<libc::sock_filter> {
    let eperm = st(RET_K, RET_ERRNO | libc::EPERM as u32);
    match rule {
        Rule::Allow => vec![st(RET_K, RET_ALLOW)],
        Rule::Errno(e) => vec![st(RET_K, RET_ERRNO | (e as u32 & 0xffff))],
        Rule::Without { arg: a, mask } => vec![
            st(LD_W_ABS, arg(a)),
            jmp(JSET_K, mask, 0, 1),
            eperm,
            st(RET_K, RET_ALLOW),
        ],
        Rule::OneOf { arg: a, values } => {
            let n = values.len();
            let mut c = vec![st(LD_W_ABS, arg(a))];
            for (i, v) in values.iter().enumerate() {
                // To the RET_ALLOW after the EPERM (n - i instructions on).
                c.push(jmp(JEQ_K, *v, (n - i) as u8, 0));
            }
            c.push(eperm);
            c.push(st(RET_K, RET_ALLOW));
            c
        }
        Rule::NoneOf { arg: a, values } => {
            let n = values.len();
            let mut c = vec![st(LD_W_ABS, arg(a))];
            for (i, v) in values.iter().enumerate() {
                // To the EPERM after the RET_ALLOW (n - i instructions on).
                c.push(jmp(JEQ_K, *v, (n - i) as u8, 0));
            }
            c.push(st(RET_K, RET_ALLOW));
            c.push(eperm);
            c
        }
    }
}

/// A search tree over `sorted` (by number): a few compares per call whatever the list's
/// length. That matters beyond the call itself: on installing a filter the kernel runs it for
/// every system call number of each architecture to fill its cache of calls always allowed,
/// and JITs it; with a linear list of 136 that cost about 0.35 ms of system time per exec
/// (docs/bench.md, issue 36).
fn tree(sorted: &[(u32, Rule)]) -> Vec<libc::sock_filter> {
    const JA: u16 = 0x05; // BPF_JMP | BPF_JA
    let eperm = st(RET_K, RET_ERRNO | libc::EPERM as u32);
    if sorted.len() <= 4 {
        let mut c = Vec::new();
        for (nr, rule) in sorted {
            let b = body(*rule);
            c.push(jmp(JEQ_K, *nr, 0, b.len() as u8));
            c.extend(b);
        }
        c.push(eperm);
        return c;
    }
    let (left, right) = sorted.split_at(sorted.len() / 2);
    let (l, r) = (tree(left), tree(right));
    // nr >= the right half's first: on to the long jump over the left half; else into it.
    let mut c = vec![jmp(JGE_K, right[0].0, 0, 1), st(JA, l.len() as u32)];
    c.extend(l);
    c.extend(r);
    c
}

/// The filter for `allowed` on an architecture `audit_arch` (AUDIT_ARCH_*): anything else,
/// and any call through another convention, refused.
fn build(audit_arch: u32, allowed: &[Named]) -> Filter {
    const X32_BIT: u32 = 0x4000_0000;
    let enosys = st(RET_K, RET_ERRNO | libc::ENOSYS as u32);
    let mut c = vec![
        st(LD_W_ABS, 4),
        // Another architecture's calling convention (i386 via int 0x80): refused.
        jmp(JEQ_K, audit_arch, 1, 0),
        enosys,
        st(LD_W_ABS, 0),
        jmp(JGE_K, X32_BIT, 0, 1),
        enosys,
    ];
    let mut sorted: Vec<(u32, Rule)> = allowed.iter().map(|(_, n, r)| (*n as u32, *r)).collect();
    sorted.sort_by_key(|(n, _)| *n);
    c.extend(tree(&sorted));
    Filter { code: c }
}

/// The allow-list filter, `None` on an architecture it does not know. Without `unix`,
/// `socket(AF_UNIX)` is refused too (a plugin the node names no unix socket for).
#[cfg(target_arch = "x86_64")]
pub fn filter(unix: bool) -> Option<Filter> {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    if unix {
        return Some(build(AUDIT_ARCH_X86_64, ALLOWED));
    }
    let list: Vec<Named> = ALLOWED
        .iter()
        .map(|&(name, nr, rule)| match name {
            "socket" => (name, nr, list::SOCKET_WITHOUT_UNIX),
            _ => (name, nr, rule),
        })
        .collect();
    Some(build(AUDIT_ARCH_X86_64, &list))
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn filter(_unix: bool) -> Option<Filter> {
    None
}

/// In a forked child (after no_new_privs): installs `prog`. Async-signal-safe.
pub fn install(prog: &libc::sock_fprog) -> std::io::Result<()> {
    // SAFETY: `prog` points at a filter the parent keeps alive until after the fork.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            prog as *const libc::sock_fprog,
            0,
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Runs `f` on a call `nr` of architecture `arch` whose every argument is `a` (the classic
    /// BPF subset the filter uses).
    fn run(f: &Filter, arch: u32, nr: u32, a: u32) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = f.code[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    acc = match i.k {
                        0 => nr,
                        4 => arch,
                        _ => a,
                    }
                }
                RET_K => return i.k,
                0x05 => pc += i.k as usize,
                JEQ_K | JGE_K | JSET_K => {
                    let hit = match i.code {
                        JEQ_K => acc == i.k,
                        JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += if hit { i.jt } else { i.jf } as usize;
                }
                c => panic!("unexpected BPF code {c:#x}"),
            }
        }
    }

    #[test]
    fn the_list_names_each_call_once_and_leaves_out_what_the_attack_pass_reached() {
        let mut seen = std::collections::HashSet::new();
        for (name, nr, _) in ALLOWED {
            assert!(seen.insert(*nr), "{name} listed twice");
        }
        for (name, nr) in [
            ("setxattr", libc::SYS_setxattr),
            ("fsetxattr", libc::SYS_fsetxattr),
            ("setxattrat", 463),
            ("getxattrat", 464),
            ("listxattrat", 465),
            ("removexattrat", 466),
            ("shmget", libc::SYS_shmget),
            ("shmat", libc::SYS_shmat),
            ("semget", libc::SYS_semget),
            ("msgget", libc::SYS_msgget),
            ("keyctl", libc::SYS_keyctl),
            ("add_key", libc::SYS_add_key),
            ("request_key", libc::SYS_request_key),
            ("inotify_init1", libc::SYS_inotify_init1),
            ("inotify_add_watch", libc::SYS_inotify_add_watch),
            ("fanotify_init", libc::SYS_fanotify_init),
            ("chmod", libc::SYS_chmod),
            ("fchmodat2", libc::SYS_fchmodat2),
            ("chown", libc::SYS_chown),
            ("utimensat", libc::SYS_utimensat),
            ("unshare", libc::SYS_unshare),
            ("setns", libc::SYS_setns),
            ("mount", libc::SYS_mount),
            ("ptrace", libc::SYS_ptrace),
            ("bpf", libc::SYS_bpf),
            ("userfaultfd", libc::SYS_userfaultfd),
            ("io_uring_enter", libc::SYS_io_uring_enter),
            ("bind", libc::SYS_bind),
            ("listen", libc::SYS_listen),
        ] {
            assert!(!seen.contains(&nr), "{name} ({nr}) must not be allowed");
        }
        // Every call the traces saw is listed (allowed, narrowed, or ENOSYS for a fallback).
        let traced = include_str!("../../testdata/confine/traced-syscalls.txt");
        for line in traced.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(':').next().unwrap_or_default();
            assert!(
                ALLOWED.iter().any(|(n, _, _)| *n == name),
                "{name} was traced (testdata/confine/traced-syscalls.txt) but is not in ALLOWED"
            );
        }
        // The tree decides every number as the list says (args zero: a narrowed call's
        // argument rules are the probe's and the plugins' tests).
        let f = filter(true).expect("x86_64 has a filter");
        for nr in 0..600u32 {
            let want = match ALLOWED.iter().find(|(_, n, _)| *n as u32 == nr) {
                None => RET_ERRNO | libc::EPERM as u32,
                Some((_, _, Rule::Errno(e))) => RET_ERRNO | *e as u32,
                Some((_, _, Rule::OneOf { .. })) => RET_ERRNO | libc::EPERM as u32,
                Some(_) => RET_ALLOW,
            };
            assert_eq!(run(&f, 0xc000_003e, nr, 0), want, "nr {nr}");
        }
        // An argument rule, both ways: socket(AF_UNIX) yes, socket(AF_NETLINK) no.
        assert_eq!(run(&f, 0xc000_003e, libc::SYS_socket as u32, 1), RET_ALLOW);
        assert_ne!(run(&f, 0xc000_003e, libc::SYS_socket as u32, 16), RET_ALLOW);
        // For a plugin the node names no unix socket for: AF_UNIX no, AF_INET and AF_INET6
        // yes, and every other call as before.
        let without = filter(false).expect("x86_64 has a filter");
        assert_ne!(
            run(&without, 0xc000_003e, libc::SYS_socket as u32, 1),
            RET_ALLOW
        );
        for family in [2, 10] {
            assert_eq!(
                run(&without, 0xc000_003e, libc::SYS_socket as u32, family),
                RET_ALLOW
            );
        }
        for nr in (0..600u32).filter(|nr| *nr != libc::SYS_socket as u32) {
            assert_eq!(
                run(&without, 0xc000_003e, nr, 0),
                run(&f, 0xc000_003e, nr, 0)
            );
        }
        // fcntl: F_GETFL yes, F_SETLEASE and F_NOTIFY no.
        assert_eq!(run(&f, 0xc000_003e, libc::SYS_fcntl as u32, 3), RET_ALLOW);
        for cmd in [8, 10, 15, 1024, 1026] {
            assert_ne!(run(&f, 0xc000_003e, libc::SYS_fcntl as u32, cmd), RET_ALLOW);
        }
        // clone with CLONE_NEWUSER no; another architecture's convention no.
        assert_ne!(
            run(&f, 0xc000_003e, libc::SYS_clone as u32, 0x1000_0000),
            RET_ALLOW
        );
        assert_ne!(run(&f, 0x4000_0003, libc::SYS_read as u32, 0), RET_ALLOW);
        // Jumps are 8 bits: every body fits.
        let f = filter(true).expect("x86_64 has a filter");
        assert!(f.code.len() < u16::MAX as usize);
    }
}
