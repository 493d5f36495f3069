//! The kernel's refusals, shown with shell scripts as the confined program (root: the tests
//! make PID namespaces). Each script ignores what it is told and tries to get out.

use super::*;
use std::fs;

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("rhd-confine-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn script(d: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = d.join("plugin.sh");
    fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Whether this test can run here (root, for PID namespaces; a kernel with Landlock): says
/// so when it cannot. The VM unit group and CI run them as root on kernels with Landlock.
fn can_confine() -> bool {
    // SAFETY: getuid has no preconditions.
    let ok = unsafe { libc::getuid() == 0 } && landlock_abi().is_some();
    if !ok {
        assert!(
            std::env::var_os("RHD_TESTS_MUST_RUN").is_none(),
            "cannot confine here (needs root and Landlock) and RHD_TESTS_MUST_RUN is set"
        );
        eprintln!("skipped: needs root and Landlock");
    }
    ok
}

/// The shell and its tools are the node's to allow: here /bin and /usr/bin, read-only.
fn policy<'a>(read: &'a [PathBuf], write: &'a [PathBuf], secs: u64) -> Policy<'a> {
    Policy {
        read,
        write,
        sockets: &[],
        required: true,
        deadline: Duration::from_secs(secs),
        max_output: 4096,
    }
}

#[test]
fn a_confined_program_writes_only_beneath_its_write_paths() {
    if !can_confine() {
        return;
    }
    let d = dir("write");
    let allowed = d.0.join("allowed");
    let outside = d.0.join("outside");
    fs::create_dir_all(&outside).unwrap();
    let exe = script(
        &d.0,
        &format!(
            "echo x > {a}/ok && echo wrote-allowed\n\
             echo x > {o}/escape && echo wrote-outside\n\
             mkdir tmp-relative && echo wrote-relative\n\
             cat /etc/shadow >/dev/null 2>&1 && echo read-shadow\n\
             echo done",
            a = allowed.display(),
            o = outside.display()
        ),
    );
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    let write = [allowed.clone()];
    let out = run(&exe, &[], b"", &policy(&read, &write, 10)).unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("wrote-allowed"), "{said}");
    assert!(!said.contains("wrote-outside"), "{said}");
    assert!(!said.contains("wrote-relative"), "{said}");
    assert!(!said.contains("read-shadow"), "{said}");
    assert!(said.contains("done"), "{said}");
    assert!(allowed.join("ok").exists());
    assert!(!outside.join("escape").exists());
    assert!(!Path::new(EMPTY_DIR).join("tmp-relative").exists());
}

#[test]
fn a_program_that_never_answers_is_killed_at_the_deadline_with_what_it_started() {
    if !can_confine() {
        return;
    }
    let d = dir("deadline");
    // A sleep of a length no other process has: its command line marks it.
    let secs = 100_000 + std::process::id();
    let marker = format!("sleep\0{secs}");
    // A child in a session of its own (out of the process group), then a block on stdin
    // that never ends (stdin is not closed before the deadline: the parent keeps writing
    // nothing more, but a read of a pipe still open blocks).
    let exe = script(&d.0, &format!("setsid sleep {secs} &\nsleep {secs}"));
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    let start = Instant::now();
    let err = run(&exe, &[], b"{}", &policy(&read, &[], 2)).unwrap_err();
    assert!(matches!(err, Failure::Deadline(_)), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // The kernel took the whole PID namespace: nothing of it is left.
    std::thread::sleep(Duration::from_millis(200));
    let left: Vec<u32> = rdma_host_device_core::process::pids()
        .into_iter()
        .filter(|p| {
            fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).starts_with(&marker))
        })
        .collect();
    assert!(left.is_empty(), "still running: {left:?}");
}

#[test]
fn output_beyond_the_bound_is_refused() {
    if !can_confine() {
        return;
    }
    let d = dir("output");
    let exe = script(&d.0, "yes x");
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    let err = run(&exe, &[], b"", &policy(&read, &[], 10)).unwrap_err();
    assert!(matches!(err, Failure::TooMuchOutput(4096)), "{err}");
}

#[test]
fn the_environment_is_the_cni_variables_and_path_only() {
    if !can_confine() {
        return;
    }
    let d = dir("env");
    let exe = script(&d.0, "env; pwd");
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    // SAFETY: a test-only variable; tests in this module do not read it concurrently.
    unsafe { std::env::set_var("RHD_CONFINE_SECRET", "leaked") };
    let out = run(
        &exe,
        &[("CNI_COMMAND", "ADD")],
        b"",
        &policy(&read, &[], 10),
    )
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("CNI_COMMAND=ADD"), "{said}");
    assert!(!said.contains("leaked"), "{said}");
    assert!(said.contains(EMPTY_DIR), "{said}");
}

/// What a root program without capabilities could still do, tried: set-id files, modes and
/// owners of files outside, a TCP listener, the host's name, descriptors it did not get.
#[test]
fn a_confined_program_has_no_privilege_left() {
    if !can_confine() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = dir("privilege");
    let allowed = d.0.join("allowed");
    let outside = d.0.join("outside");
    fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim");
    fs::write(&victim, "x").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    // A descriptor of ours that is not close-on-exec (a caller that leaks one).
    let secret = d.0.join("fd-secret");
    fs::write(&secret, "rhd-fd-secret").unwrap();
    let f = fs::File::open(&secret).unwrap();
    // SAFETY: dup2 onto a high descriptor number no test uses; not close-on-exec.
    let fd = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&f), 213) };
    assert_eq!(fd, 213);
    let exe = script(
        &d.0,
        &format!(
            "echo x > {a}/s; chmod 4755 {a}/s && echo chmod-setuid\n\
             chmod 777 {v} && echo chmod-outside\n\
             chown 4242 {v} && echo chown-outside\n\
             (cat <&213) 2>/dev/null && echo read-inherited-fd\n\
             hostname \"$(hostname)\" && echo set-hostname\n\
             python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); print(\"tcp-listen\")'\n\
             echo done",
            a = allowed.display(),
            v = victim.display(),
        ),
    );
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    let write = [allowed.clone()];
    let out = run(&exe, &[], b"", &policy(&read, &write, 20)).unwrap();
    // SAFETY: closing the descriptor made above.
    unsafe { libc::close(213) };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("done"),
        "{said} (exit {}, stderr {})",
        out.code,
        String::from_utf8_lossy(&out.stderr)
    );
    for what in [
        "chmod-setuid",
        "chmod-outside",
        "chown-outside",
        "rhd-fd-secret",
        "set-hostname",
        "tcp-listen",
    ] {
        assert!(!said.contains(what), "{what}: {said}");
    }
    let m = fs::metadata(allowed.join("s"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o6000, 0, "{m:o}");
    let m = fs::metadata(&victim).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&m), 0);
}

/// A program that clears its own death signal, leaves its session and keeps running past the
/// deadline is killed with its namespace all the same: pid 1 there is ours, not its.
#[test]
fn a_program_that_clears_its_death_signal_is_still_killed_at_the_deadline() {
    if !can_confine() {
        return;
    }
    let d = dir("pdeathsig");
    let marker = format!("rhd-confine-immortal-{}", std::process::id());
    let exe = script(
        &d.0,
        &format!(
            "exec /usr/bin/python3 -c 'import ctypes, os, time\n\
             ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\n\
             os.setsid()\n\
             os.close(1)\n\
             time.sleep(600)' {marker}"
        ),
    );
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    let err = run(&exe, &[], b"", &policy(&read, &[], 2)).unwrap_err();
    assert!(matches!(err, Failure::Deadline(_)), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    let left: Vec<u32> = rdma_host_device_core::process::pids()
        .into_iter()
        .filter(|p| {
            fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        })
        .collect();
    for p in &left {
        // SAFETY: killing what the test itself started.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "still running: {left:?}");
}

/// What a program writes to stderr comes back, bounded, for the log.
#[test]
fn stderr_is_kept_up_to_its_bound() {
    if !can_confine() {
        return;
    }
    let d = dir("stderr");
    let exe = script(
        &d.0,
        "echo first-line >&2; yes y | head -c 100000 >&2; echo ok",
    );
    let read = [PathBuf::from("/bin"), PathBuf::from("/usr/bin")];
    let out = run(&exe, &[], b"", &policy(&read, &[], 10)).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    assert!(
        out.stderr.starts_with(b"first-line"),
        "{:?}",
        &out.stderr[..20]
    );
    assert_eq!(out.stderr.len(), MAX_STDERR);
}

/// Builds testdata/confine/probe.c into `d` with the node's C compiler; `None` (and why, or a
/// failure under RHD_TESTS_MUST_RUN) when there is none.
fn build_probe(d: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/confine/probe.c");
    let exe = d.join("probe");
    match std::process::Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
    {
        Ok(o) if o.status.success() => Some(exe),
        other => {
            assert!(
                std::env::var_os("RHD_TESTS_MUST_RUN").is_none(),
                "cannot build {}: {other:?}",
                src.display()
            );
            eprintln!("skipped: no C compiler to build the probe ({other:?})");
            None
        }
    }
}

/// What root made on the host for the probe to reach: a System V shared memory segment,
/// semaphore set and message queue, and a key in its session keyring that uid 0 may read
/// without possessing it. Removed on drop.
struct HostObjects {
    shmid: i32,
    shmkey: i32,
    semid: i32,
    semkey: i32,
    msgid: i32,
    msgkey: i32,
    key: i64,
    desc: String,
}

impl HostObjects {
    fn new() -> HostObjects {
        let base = 0x5248_0000 | (std::process::id() as i32 & 0xfff0);
        let desc = format!("rhd-probe-key-{}", std::process::id());
        // SAFETY: System V and keyring calls on integers and buffers that outlive them.
        unsafe {
            let shmkey = base;
            let shmid = libc::shmget(shmkey, 4096, libc::IPC_CREAT | 0o600);
            assert!(shmid >= 0, "shmget: {}", io::Error::last_os_error());
            let at = libc::shmat(shmid, std::ptr::null(), 0);
            assert_ne!(at as isize, -1, "shmat: {}", io::Error::last_os_error());
            std::ptr::copy_nonoverlapping(b"rhd-shm-secret".as_ptr(), at.cast(), 14);
            libc::shmdt(at);
            let semkey = base + 1;
            let semid = libc::semget(semkey, 1, libc::IPC_CREAT | 0o600);
            assert!(semid >= 0, "semget: {}", io::Error::last_os_error());
            let msgkey = base + 2;
            let msgid = libc::msgget(msgkey, libc::IPC_CREAT | 0o600);
            assert!(msgid >= 0, "msgget: {}", io::Error::last_os_error());
            let cdesc = std::ffi::CString::new(desc.clone()).unwrap();
            let payload = b"rhd-key-secret";
            let key = libc::syscall(
                libc::SYS_add_key,
                c"user".as_ptr(),
                cdesc.as_ptr(),
                payload.as_ptr(),
                payload.len(),
                -3i32, // KEY_SPEC_SESSION_KEYRING
            );
            assert!(key > 0, "add_key: {}", io::Error::last_os_error());
            // KEYCTL_SETPERM: possessor and user (uid 0) may view, read, search.
            libc::syscall(libc::SYS_keyctl, 5, key, 0x3f0b_0000u32);
            HostObjects {
                shmid,
                shmkey,
                semid,
                semkey,
                msgid,
                msgkey,
                key,
                desc,
            }
        }
    }
}

impl Drop for HostObjects {
    fn drop(&mut self) {
        // SAFETY: removing what new() made.
        unsafe {
            libc::shmctl(self.shmid, libc::IPC_RMID, std::ptr::null_mut());
            libc::semctl(self.semid, 0, libc::IPC_RMID);
            libc::msgctl(self.msgid, libc::IPC_RMID, std::ptr::null_mut());
            libc::syscall(libc::SYS_keyctl, 21, self.key); // KEYCTL_INVALIDATE
        }
    }
}

/// Issue 36: from inside the confinement an attack pass reached root's data through kernel
/// interfaces the deny-list did not name (setxattrat, System V IPC, keys, inotify). A probe
/// tries each against what root made on the host; each must be refused, and root's objects
/// must be as they were.
#[test]
fn a_confined_program_reaches_no_kernel_interface_outside_its_grants() {
    if !can_confine() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = dir("probe");
    let Some(exe) = build_probe(&d.0) else {
        return;
    };
    let allowed = d.0.join("allowed");
    let outside = d.0.join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("name-of-a-secret"), "").unwrap();
    let victim = outside.join("victim");
    fs::write(&victim, "x").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let cvictim = std::ffi::CString::new(victim.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: setxattr on a path and buffers that outlive the call.
    let has_user_xattrs = unsafe {
        libc::setxattr(
            cvictim.as_ptr(),
            c"user.rhd-root".as_ptr(),
            b"root".as_ptr().cast(),
            4,
            0,
        ) == 0
    };
    let host = HostObjects::new();
    let stdin = format!(
        "{} {} {} {} {} {} {} {} {}\n",
        victim.display(),
        outside.display(),
        allowed.display(),
        host.shmid,
        host.shmkey,
        host.semkey,
        host.msgkey,
        host.key,
        host.desc
    );
    let write = [allowed.clone()];
    let out = run(&exe, &[], stdin.as_bytes(), &policy(&[], &write, 10)).unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let why = format!(
        "{said}(exit {}, stderr {})",
        out.code,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("control-write ok"), "{why}");
    assert!(said.contains("done"), "{why}");
    for what in [
        "setxattr",
        "lsetxattr",
        "fsetxattr",
        "setxattrat",
        "getxattrat",
        "listxattrat",
        "removexattrat",
        "getxattr",
        "listxattr",
        "shmget",
        "shmat",
        "shmctl-rmid",
        "semget",
        "msgget",
        "keyctl-read",
        "add_key",
        "request_key",
        "keyctl-join",
        "open-denied-dir",
        "getdents64",
        "inotify_init1",
        "inotify_add_watch",
        "fanotify_init",
        "unshare-user",
        "socket-netlink",
        "io_uring_setup",
        "fchmodat2",
    ] {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("{what} refused"))),
            "{what} was not refused: {why}"
        );
    }
    // Root's things are as they were.
    let m = fs::metadata(&victim).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    if has_user_xattrs {
        let mut buf = [0u8; 64];
        // SAFETY: getxattr into a stack buffer.
        let n = unsafe {
            libc::getxattr(
                cvictim.as_ptr(),
                c"user.rhd-probe".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        assert!(n < 0, "the probe set an extended attribute on root's file");
    }
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT into a zeroed struct.
    let r = unsafe { libc::shmctl(host.shmid, libc::IPC_STAT, &mut ds) };
    assert_eq!(r, 0, "root's shared memory segment is gone");
    assert_eq!(ds.shm_nattch, 0, "the probe attached root's segment");
}

/// The Debian IPAM plugins the allow-list was traced from (scripts/trace-ipam-syscalls.sh)
/// do under the real confinement, verb by verb, exactly what they do without it: the same
/// exit code and the same answer. A system call they need outside the list would show here.
#[test]
fn debian_ipam_plugins_do_under_the_allow_list_what_they_do_without_it() {
    if !can_confine() {
        return;
    }
    let cni = Path::new("/usr/lib/cni");
    if !cni.join("host-local").exists() {
        assert!(
            std::env::var_os("RHD_TESTS_MUST_RUN").is_none(),
            "Debian's containernetworking-plugins are not installed"
        );
        eprintln!("skipped: no /usr/lib/cni/host-local");
        return;
    }
    let d = dir("debian-plugins");
    let prev = |addr: &str, gw: &str| {
        serde_json::json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "sandbox": "/x"}],
            "ips": [{"address": addr, "gateway": gw, "interface": 0}]})
    };
    for plugin in ["host-local", "static", "dhcp"] {
        let mut outcomes = Vec::new();
        for confined in [false, true] {
            let data = d.0.join(format!("{plugin}-{confined}"));
            fs::create_dir_all(&data).unwrap();
            let ipam = match plugin {
                "host-local" => serde_json::json!({"type": plugin, "dataDir": data,
                    "ranges": [[{"subnet": "10.230.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}),
                "static" => serde_json::json!({"type": plugin,
                    "addresses": [{"address": "10.230.1.2/24", "gateway": "10.230.1.1"}]}),
                // No daemon at this socket: every verb but VERSION fails, alike both ways
                // (tests/attach/dhcp.rs runs it against a daemon and dnsmasq through the plugin).
                _ => serde_json::json!({"type": plugin,
                    "daemonSocketPath": data.join("dhcp.sock")}),
            };
            let conf = serde_json::json!({"cniVersion": "1.0.0", "name": "rhd-trace",
            "type": "rdma-host-device", "ipam": ipam,
            "cni.dev/valid-attachments": [],
            "prevResult": if plugin == "static" {
                prev("10.230.1.2/24", "10.230.1.1")
            } else {
                prev("10.230.0.2/24", "10.230.0.1")
            }});
            let stdin = conf.to_string();
            for verb in ["VERSION", "ADD", "CHECK", "GC", "STATUS", "DEL"] {
                let env = [
                    ("CNI_COMMAND", verb),
                    ("CNI_CONTAINERID", "rhd-trace-1"),
                    ("CNI_IFNAME", "net1"),
                    ("CNI_NETNS", "/var/run/netns/rhd-trace"),
                    ("CNI_ARGS", ""),
                    ("CNI_PATH", "/usr/lib/cni"),
                ];
                let exe = cni.join(plugin);
                let (code, stdout) = if confined {
                    let write = [data.clone()];
                    // dhcp, as the node names its daemon's socket for it (ipamSockets).
                    let sockets: Vec<PathBuf> = match plugin {
                        "dhcp" => vec![data.join("dhcp.sock")],
                        _ => Vec::new(),
                    };
                    let p = Policy {
                        sockets: &sockets,
                        ..policy(&[], &write, 20)
                    };
                    let o = run(&exe, &env, stdin.as_bytes(), &p)
                        .unwrap_or_else(|e| panic!("{plugin} {verb}: {e}"));
                    (o.code, o.stdout)
                } else {
                    use std::io::Write as _;
                    let mut c = std::process::Command::new(&exe)
                        .env_clear()
                        .envs(env)
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .unwrap();
                    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
                    let o = c.wait_with_output().unwrap();
                    (o.status.code().unwrap_or(128), o.stdout)
                };
                // The paths differ only by the directory each run got.
                let stdout =
                    String::from_utf8_lossy(&stdout).replace(&data.display().to_string(), "DATA");
                outcomes.push(format!("{verb}: exit {code}: {stdout}"));
            }
        }
        let (plain, confined) = outcomes.split_at(outcomes.len() / 2);
        assert_eq!(
            plain, confined,
            "{plugin}: without (left) and with (right) confinement"
        );
        if plugin != "dhcp" {
            assert!(plain[1].starts_with("ADD: exit 0"), "{plugin}: {plain:?}");
            assert!(plain[5].starts_with("DEL: exit 0"), "{plugin}: {plain:?}");
        }
    }
}

/// What one ADD+DEL pays for the confinement of its two IPAM execs, without the rest of the
/// plugin: Debian's static through ADD and DEL under [`run`], `RHD_COST_ROUNDS` pairs (default
/// 200), median and quartiles printed. Ignored: a measurement, run by hand against another
/// commit's build of the same test (docs/bench.md, issue 36).
#[test]
#[ignore]
fn cost_of_the_confinement_per_add_and_del() {
    if !can_confine() {
        return;
    }
    let rounds: usize = std::env::var("RHD_COST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let exe = Path::new("/usr/lib/cni/static");
    let conf = br#"{"cniVersion":"1.0.0","name":"rhd-cost","type":"rdma-host-device","ipam":{"type":"static","addresses":[{"address":"10.230.1.2/24"}]}}"#;
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        for verb in ["ADD", "DEL"] {
            let env = [
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", "rhd-cost"),
                ("CNI_IFNAME", "net1"),
                ("CNI_NETNS", "/var/run/netns/rhd-cost"),
                ("CNI_ARGS", ""),
                ("CNI_PATH", "/usr/lib/cni"),
            ];
            let out = run(exe, &env, conf, &policy(&[], &[], 10)).unwrap();
            assert_eq!(
                out.code,
                0,
                "{verb}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        took.push(start.elapsed());
    }
    took.sort();
    let q = |f: f64| took[((took.len() - 1) as f64 * f) as usize].as_secs_f64() * 1e3;
    println!(
        "confined static ADD+DEL, {rounds} rounds: median {:.3} ms (q1 {:.3}, q3 {:.3})",
        q(0.5),
        q(0.25),
        q(0.75)
    );
}

/// Issue 36's outside attack pass: a hostile program tries the calls and arguments an
/// allow-list most likely forgot (namespaces through clone's flags, in the upper half of its
/// argument and behind clone3's pointer; ptrace, process_vm_readv, kcmp and pidfds against its
/// reaper; bpf, perf, userfaultfd, the mount API, file handles; netlink, packet, vsock, alg
/// sockets by socket and socketpair; raw sockets; TIOCSTI; prctl options; an abstract socket
/// of the host's; leases and signals on descriptors; other conventions). Each must be
/// refused. Since issue 47 that includes a pathname socket of root's (0600, as the agent's and
/// the kubelet's are): a plugin the node names no socket for gets no unix socket at all, so it
/// cannot relay the kubelet's or our sockets; one it names it for reaches it. What it may still
/// do (flock a file it may read, lower its reaper's limits) is printed for
/// docs/attack-review.md, not asserted.
#[test]
fn a_hostile_ipam_program_finds_no_call_the_allow_list_forgot() {
    if !can_confine() {
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::fs::PermissionsExt;
    let d = dir("attack36");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/confine/attack36.c");
    let exe = d.0.join("attack36");
    let built = std::process::Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output();
    match built {
        Ok(o) if o.status.success() => {}
        other => {
            assert!(
                std::env::var_os("RHD_TESTS_MUST_RUN").is_none(),
                "cannot build {}: {other:?}",
                src.display()
            );
            eprintln!("skipped: no C compiler ({other:?})");
            return;
        }
    }
    let abstract_name = format!("rhd-attack36-{}", std::process::id());
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let sock = d.0.join("root.sock");
    let _pathname = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    // As the agent's own sockets are (files::listen_unix): root's, 0600.
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600)).unwrap();
    let ro = d.0.join("ro");
    fs::create_dir_all(&ro).unwrap();
    let readfile = ro.join("roots-file");
    fs::write(&readfile, "x").unwrap();
    let stdin = format!(
        "{} {} {}\n",
        abstract_name,
        sock.display(),
        readfile.display()
    );
    let read = [ro.clone()];
    // With the socket named for it (as ipamSockets names dhcp's daemon), it is reached: the
    // refusal below is the node's choice, not a side effect.
    let named = [sock.clone()];
    let granted = Policy {
        sockets: &named,
        ..policy(&read, &[], 10)
    };
    let out = run(&exe, &[], stdin.as_bytes(), &granted).unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.lines().any(|l| l.starts_with("connect-pathname ok")),
        "a socket named for it: {said}"
    );
    let out = run(&exe, &[], stdin.as_bytes(), &policy(&read, &[], 10)).unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    eprintln!("{said}");
    let why = format!(
        "{said}(exit {}, stderr {})",
        out.code,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("done"), "{why}");
    assert!(said.contains("clone-plain ok"), "{why}");
    assert!(said.contains("open-readfile ok"), "{why}");
    assert!(said.contains("fcntl-getfl ok"), "{why}");
    for what in [
        "clone-newuser",
        "clone-newuser-newns",
        "clone-newnet",
        "clone3-newuser",
        "unshare-user",
        "setns",
        "personality",
        "ptrace-traceme",
        "ptrace-attach-reaper",
        "process_vm_readv-reaper",
        "kcmp",
        "pidfd_open-reaper",
        "pidfd_getfd",
        "pidfd_send_signal",
        "bpf-prog-load",
        "perf_event_open",
        "userfaultfd",
        "mount-tmpfs",
        "umount2",
        "open_tree",
        "fsopen",
        "name_to_handle_at",
        "open_by_handle_at",
        "socket-packet",
        "socket-netlink-route",
        "socket-vsock",
        "socket-alg",
        "socket-family-upper-half",
        "socketpair-netlink",
        "socketpair-inet",
        "socket-inet-raw",
        "socket-inet6-raw",
        "listen-tcp",
        "bind-udp",
        "connect-abstract",
        "connect-pathname",
        "ioctl-tiocsti",
        "ioctl-tioclinux",
        "ioctl-siocsifflags",
        "prctl-set-dumpable",
        "prctl-set-mm",
        "prctl-set-ptracer-any",
        "prctl-child-subreaper",
        "prctl-capbset-drop",
        "prlimit-self-raise-memlock",
        "fcntl-setlease-read",
        "fcntl-setown-reaper",
        "fcntl-setsig",
        "fcntl-notify",
        "syscall-500",
        "x32-read",
        "io_uring_register",
        "memfd_create",
        "execveat",
    ] {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("{what} refused"))),
            "{what} was not refused: {why}"
        );
    }
}
