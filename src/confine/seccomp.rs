//! A seccomp filter for what Landlock does not cover and a root program without capabilities
//! can still do to files it owns, which are root's: change their modes anywhere (chmod 0777
//! /etc/shadow needs no capability when you are uid 0), set their extended attributes, or
//! create set-user-ID and set-group-ID files (a root-owned setuid file in `ipamPaths` is root
//! for whoever runs it later). The chmod and xattr-setting families are refused with EPERM
//! (address managers write files, they do not change modes); open, creat and mknod with
//! S_ISUID or S_ISGID in their mode likewise; io_uring (whose requests bypass seccomp) and
//! openat2 (whose mode is behind a pointer) answer ENOSYS, which programs treat as an old
//! kernel. Built before fork, installed between fork and exec.
//!
//! x86_64 only (the syscall numbers are the architecture's); elsewhere there is no filter and
//! [`filter`] says so.

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

#[cfg(target_arch = "x86_64")]
pub fn filter() -> Option<Filter> {
    // Classic BPF over struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }.
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    const X32_BIT: u32 = 0x4000_0000;
    const SETID: u32 = 0o6000;
    let st = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jmp = |code, k, jt, jf| libc::sock_filter { code, jt, jf, k };
    let arg = |n: u32| 16 + 8 * n; // the low 32 bits (little endian) of args[n]
    // (syscall, index of its mode argument); checked in this order.
    let moded: [(i64, u32); 5] = [
        (libc::SYS_open, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
        (libc::SYS_mknodat, 2),
    ];
    let enosys: [i64; 2] = [libc::SYS_io_uring_setup, libc::SYS_openat2];
    let eperm: [i64; 10] = [
        libc::SYS_chmod,
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        libc::SYS_fchmodat2,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
    ];
    let mut c = vec![
        st(LD_W_ABS, 4),
        // Another architecture's calling convention (x32, i386 via int 0x80): refused.
        jmp(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        st(RET_K, ERRNO | libc::ENOSYS as u32),
        st(LD_W_ABS, 0),
        jmp(JGE_K, X32_BIT, 0, 1),
        st(RET_K, ERRNO | libc::ENOSYS as u32),
    ];
    for nr in enosys {
        c.push(jmp(JEQ_K, nr as u32, 0, 1));
        c.push(st(RET_K, ERRNO | libc::ENOSYS as u32));
    }
    for nr in eperm {
        c.push(jmp(JEQ_K, nr as u32, 0, 1));
        c.push(st(RET_K, ERRNO | libc::EPERM as u32));
    }
    // For each moded call: if nr matches, load its mode and refuse set-id bits.
    for (nr, idx) in moded {
        c.push(jmp(JEQ_K, nr as u32, 0, 4));
        c.push(st(LD_W_ABS, arg(idx)));
        c.push(jmp(JSET_K, SETID, 0, 1));
        c.push(st(RET_K, ERRNO | libc::EPERM as u32));
        c.push(st(RET_K, ALLOW));
    }
    c.push(st(RET_K, ALLOW));
    Some(Filter { code: c })
}

#[cfg(not(target_arch = "x86_64"))]
pub fn filter() -> Option<Filter> {
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
