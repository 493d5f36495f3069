//! The libcni test client (tests/libcni-driver), built once per test binary.

use crate::process::repo;
use crate::programs::TARGET_TMP;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

// ---------------------------------------------------------------- the driver

/// Build tests/libcni-driver once per test binary, into target/tmp. Fails loudly if `go` or
/// Debian's golang-github-appc-cni-dev is missing (CI installs both).
pub fn driver() -> &'static Path {
    static DRIVER: OnceLock<PathBuf> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let dir = Path::new(TARGET_TMP).join("libcni-driver-bin");
        fs::create_dir_all(&dir).expect("mkdir target/tmp/libcni-driver-bin");
        let out = dir.join("libcni-driver");
        let tmp = dir.join(format!("libcni-driver.{}", std::process::id()));
        let gocache = std::env::var_os("GOCACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(TARGET_TMP).join("go-cache"));
        let res = Command::new("go")
            .args(["build", "-o"])
            .arg(&tmp)
            .arg("./tests/libcni-driver")
            .current_dir(repo())
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", &gocache)
            .env("GOFLAGS", "")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `go` ({e}): the libcni tests need golang-go and \
                     golang-github-appc-cni-dev (apt-get install golang-go golang-github-appc-cni-dev)"
                )
            });
        assert!(
            res.status.success(),
            "building the libcni driver failed:\n{}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
        fs::rename(&tmp, &out).expect("install libcni driver");
        out
    })
}
