#!/usr/bin/env bash
# Installs what building, the demo and the tests need on Debian 12 (run as root). Idempotent:
# packages already present are not touched.
set -euo pipefail
PKGS=(
  # the real CNI world: libcni (Go source) for the test client, Debian's IPAM/meta plugins
  golang-go golang-github-appc-cni-dev containernetworking-plugins iproute2
  # tests/dhcp.rs: a DHCP server on the test NIC's wire, for the dhcp IPAM plugin's daemon
  dnsmasq-base
  # rdma-mummy-sys builds its bundled headers with cmake and bindgen (libclang)
  cmake clang libclang-dev make gcc
  # the RDMA VM: QEMU, a busybox initramfs, module tools, and the RDMA user space it runs
  qemu-system-x86 busybox-static kmod cpio xz-utils zstd
  rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils
  # tests/vm/metrics.sh: a real Prometheus and node_exporter, run inside the VM from this root
  prometheus prometheus-node-exporter
  # ... and headless Chromium (run in the VM too) for the README's picture of Prometheus' graph
  chromium fonts-liberation
  # benches/: strace for the step breakdown
  strace
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || { echo "setup: run as root to install: ${missing[*]}" >&2; exit 1; }
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${missing[@]}" >&2 || { apt-get update -q >&2 && apt-get install -y -q "${missing[@]}" >&2; }
fi
command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust (rustup.rs), 1.88 or newer" >&2; exit 1; }
