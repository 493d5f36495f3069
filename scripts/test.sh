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
step() { printf '\n=== %s\n' "$*"; }

step "setup: packages"
scripts/setup.sh

step "style: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

step "unit + integration tests (cargo test)"
cargo test --no-fail-fast

if [[ $VM == 1 ]]; then
  step "RDMA tests in a VM (tests/vm/run.sh)"
  tests/vm/run.sh
fi
step "all tests passed"
