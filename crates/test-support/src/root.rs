//! Root or not. The integration tests need root (network namespaces, links). Without it a
//! developer's plain `cargo test` skips them, loudly and counted; a CI run (`$CI`, or
//! `$RHD_TESTS_MUST_RUN` that scripts/test.sh sets) fails instead: there a skip would print
//! green while testing nothing.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Set (to anything but empty, `0` or `false`) by scripts/test.sh: a test that cannot run here
/// is an error, not a skip. `CI`, which CI services set, does the same.
pub const MUST_RUN_ENV: &str = "RHD_TESTS_MUST_RUN";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The variable that makes a skip an error here (`CI` or [`MUST_RUN_ENV`]), if one is set.
pub fn must_run() -> Option<&'static str> {
    [MUST_RUN_ENV, "CI"]
        .into_iter()
        .find(|k| std::env::var(k).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "False")))
}

/// This test binary's name as cargo prints it (`cri` for target/debug/deps/cri-0123abcd).
fn binary() -> String {
    let exe = std::env::args().next().unwrap_or_default();
    let file = std::path::Path::new(&exe)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or(exe);
    match file.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
        _ => file,
    }
}

/// How many tests this run of the binary selects: the harness asked again with `--list`, with
/// the same filters. `None` if it cannot say.
fn tests_selected() -> Option<usize> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe)
        .args(std::env::args().skip(1))
        .arg("--list")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    out.status
        .success()
        .then(|| text.lines().filter(|l| l.ends_with(": test")).count())
}

/// Write straight to fd 2: the harness captures `eprintln!` inside a test.
fn say(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// The whole binary needs root. Without it: in CI, end the binary as failed (exit 101, as the
/// harness does when a test fails); elsewhere, end it successfully, having said how many of its
/// tests did not run. The first test to get here decides; the others wait for the exit.
pub fn require_root() {
    static DECIDING: Mutex<()> = Mutex::new(());
    if is_root() {
        return;
    }
    let _only_one = DECIDING.lock();
    let me = binary();
    let selected = tests_selected();
    let count = match selected {
        Some(1) => "its 1 test needs".to_owned(),
        Some(n) => format!("its {n} tests need"),
        None => "its tests need".to_owned(),
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if let Some(var) = must_run() {
        say(&format!(
            "\nFAILED {me}: {count} root (network namespaces and links) and this is uid {uid}; \
             ${var} is set, and a CI run that skipped them would pass without testing anything. \
             Run the suite as root (scripts/test.sh).\n"
        ));
        std::process::exit(101);
    }
    say(&format!(
        "\n==== SKIPPED {me}: {count} root (network namespaces and links) and this is \
         uid {uid}. The binary stops at the first test to find that out: tests not \
         finished by then did not run.\n==== Its green result tested nothing: run \
         scripts/test.sh as root. (With $CI or ${MUST_RUN_ENV} set, this is a failure.)\n{}\n",
        run_so_far(&me, selected.unwrap_or(0))
    ));
    std::process::exit(0);
}

/// The running total of this `cargo test` run: every binary of one run has the same parent
/// (cargo), so each skipping binary adds its count to a file named after that process (its
/// pid and start time, so a recycled pid starts afresh) and says the sum. Empty if the file
/// cannot be written.
fn run_so_far(me: &str, tests: usize) -> String {
    use std::io::Read;
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    // Field 22 of /proc/PID/stat, after the parenthesised command name.
    let started = std::fs::read_to_string(format!("/proc/{parent}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(19).map(str::to_owned))
        })
        .unwrap_or_default();
    let path = std::path::Path::new(crate::programs::TARGET_TMP)
        .join(format!("skipped-without-root-{parent}-{started}"));
    let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&path)
    else {
        return String::new();
    };
    if writeln!(f, "{me} {tests}").is_err() {
        return String::new();
    }
    let mut text = String::new();
    let _ = std::fs::File::open(&path).and_then(|mut f| f.read_to_string(&mut text));
    let counts: Vec<usize> = text
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    format!(
        "==== This cargo test run so far: {} integration binaries skipped, {} tests not run.\n",
        counts.len(),
        counts.iter().sum::<usize>()
    )
}

/// One check of a test that needs root where the rest does not: true to go on. Without root it
/// says the check was skipped and returns false; in CI it fails the test instead.
pub fn root_for(check: &str) -> bool {
    if is_root() {
        return true;
    }
    if let Some(var) = must_run() {
        panic!("{check} needs root and ${var} is set: run the suite as root (scripts/test.sh)");
    }
    say(&format!("SKIPPED in {}: {check} (needs root)\n", binary()));
    false
}
