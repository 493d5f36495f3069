#!/usr/bin/env bash
# Runs every test, as root, on Debian 12: style gates, unit tests, the integration tests
# (real network namespaces and veth pairs, the real libcni client, Debian's IPAM plugins, a real
# containerd CRI driven as kubelet drives it, the DaemonSet image built and run by podman),
# and the RDMA tests inside a QEMU VM running a Debian kernel with soft-RoCE/soft-iWARP.
#
#   scripts/test.sh            everything
#   scripts/test.sh --no-vm    skip the RDMA VM tests (quick local loop)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VM=1
for a in "$@"; do
  case $a in
    --no-vm) VM=0 ;;
    *) echo "usage: scripts/test.sh [--no-vm]" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "test: run as root (the tests create network namespaces)" >&2; exit 1; }
export RHD_TESTS_MUST_RUN=1 # an integration test that cannot run fails, never skips (crates/test-support/src/root.rs)
# Every build here is from a clean target on CI: incremental state would only cost disk (a third
# of a cold debug target) and time.
export CARGO_INCREMENTAL=0
# Free space on this checkout's disk, in GiB, shown at each step: a fresh machine's disk is
# not a setting (docs/testing.md, "Disk").
free_gib() { df -BG --output=avail . | tail -n +2 | tr -dc 0-9; }
step() { printf '\n=== %s (%s GiB free)\n' "$*" "$(free_gib)"; }
# What a cold run of this script takes at its peak, measured (docs/testing.md, "Disk"), and a
# margin. Below it, say so now rather than as a linker's bus error twenty minutes in.
NEED_GIB=${RHD_TEST_NEED_GIB:-20}
HAVE_GIB=$(free_gib)
((HAVE_GIB >= NEED_GIB)) || {
  echo "test: $HAVE_GIB GiB free on $(df --output=target . | tail -n +2), and a cold run needs $NEED_GIB GiB (docs/testing.md, \"Disk\"); free some, or set RHD_TEST_NEED_GIB to try with less" >&2
  exit 1
}

step "setup: the plan for each set, then the test set's packages"
scripts/setup.sh --for demo --for pictures --dry-run
scripts/setup.sh --for test --for cluster

step "the cold path: what a fresh machine downloads, from empty caches (scripts/cold-check.sh)"
scripts/cold-check.sh

step "style: shellcheck and whole pipelines (scripts/lint-shell.sh), cargo fmt --check, cargo clippy -D warnings"
scripts/lint-shell.sh
cargo fmt --check
cargo clippy --workspace --all-targets -- -D warnings

step "the previous release's plugin, for the upgrade and rollback test (scripts/previous-release.sh)"
RHD_PREVIOUS_PLUGIN=$(scripts/previous-release.sh)
export RHD_PREVIOUS_PLUGIN

step "unit + integration tests of the three crates (cargo test --workspace)"
cargo test --workspace --no-fail-fast

# Nothing may depend on where the checkout is (podman's 50-character runroot, unix sockets'
# 108 bytes): the tests that make such paths, built and run again from a copy of this tree at a
# path of over 150 characters.
step "path-sensitive tests from a checkout path of 150+ characters"
LONGTOP=$(mktemp -d /tmp/rhd-long-XXXXXX)
trap 'rm -rf "$LONGTOP"' EXIT
LONG=$LONGTOP/$(printf 'a-checkout-as-deep-as-a-home-directory-makes-it-%s/' 1 2 3)rdma-host-device
mkdir -p "$LONG"
git ls-files -z --cached --others --exclude-standard |
  tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$LONG"
echo "checkout copied to $LONG (${#LONG} characters)"
# `--test` selects the plugin crate's tests only, which run the agent's binary beside the
# plugin's (crates/test-support/src/lib.rs): build both binaries first.
(cd "$LONG" && export CARGO_TARGET_DIR=$LONG/target &&
  cargo build -q --workspace --bins && cargo test -q --test runtimes &&
  cargo test -q --test attach dhcp::)
rm -rf "$LONGTOP" # its target directory is a second build's worth of disk

if [[ $VM == 1 ]]; then
  step "RDMA tests in a VM (tests/vm/run.sh)"
  tests/vm/run.sh
fi
step "all tests passed"
