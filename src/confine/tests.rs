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

fn root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
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
    if !root() || landlock_abi().is_none() {
        eprintln!("skipped: needs root and Landlock");
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
    if !root() || landlock_abi().is_none() {
        eprintln!("skipped: needs root and Landlock");
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
    if !root() || landlock_abi().is_none() {
        eprintln!("skipped: needs root and Landlock");
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
    if !root() || landlock_abi().is_none() {
        eprintln!("skipped: needs root and Landlock");
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
