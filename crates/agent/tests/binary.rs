//! The agent's binary as cargo builds it. Most of the agent's end-to-end tests are the root
//! package's (tests/, beside the plugin's, since they drive both programs); they find this
//! binary next to the plugin's in the shared target directory. This file also makes
//! `cargo test` build the binary: cargo builds a package's binaries for its integration tests.

use std::process::Command;

#[test]
fn the_binary_names_itself_and_its_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-host-device-agent"))
        .arg("--version")
        .output()
        .expect("running the agent");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        concat!("rdma-host-device-agent ", env!("CARGO_PKG_VERSION")),
    );
}
