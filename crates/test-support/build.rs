//! Where this build's programs are, for the tests to run them. cargo names a package's binaries
//! (`CARGO_BIN_EXE_*`) and its scratch directory (`CARGO_TARGET_TMPDIR`) only to that package's
//! own integration tests, and this crate is a library they share. A build script's `OUT_DIR` is
//! `<target>/<profile>/build/<crate>-<hash>/out`: the profile's directory, where
//! `rdma-host-device` and `rdma-host-device-agent` are linked, is three levels up.

fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let profile = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out");
    let target = profile.parent().unwrap_or(profile);
    println!("cargo::rustc-env=RHD_PROFILE_DIR={}", profile.display());
    println!(
        "cargo::rustc-env=RHD_TARGET_TMP={}",
        target.join("tmp").display()
    );
    println!("cargo::rerun-if-changed=build.rs");
}
