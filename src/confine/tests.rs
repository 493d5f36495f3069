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
    let left: Vec<u32> = crate::process::pids()
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
    let left: Vec<u32> = crate::process::pids()
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
