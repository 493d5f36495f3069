#!/usr/bin/env bash
# Installs what building, the demo and the tests need on Debian 12 (run as root), and says what
# it installs and how big it is. Idempotent: packages already present are not touched, and
# nothing else is: no recommends (--no-install-recommends), no upgrades of what is installed
# (only a dependency that needs a newer version of an installed library can upgrade it; that is
# printed), and it refuses to go on if apt would remove anything.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
PKGS=(
  # the real CNI world: libcni (Go source) for the test client, Debian's IPAM/meta plugins
  golang-go golang-github-appc-cni-dev containernetworking-plugins iproute2
  # tests/dhcp.rs: a DHCP server on the test NIC's wire, for the dhcp IPAM plugin's daemon
  dnsmasq-base
  # rdma-mummy-sys builds its bundled headers with cmake and bindgen (libclang)
  cmake clang libclang-dev make gcc libc6-dev
  # the RDMA VM: QEMU, a busybox initramfs, module tools, and the RDMA user space it runs
  qemu-system-x86 busybox-static kmod cpio xz-utils zstd
  rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils
  # tests/vm/metrics.sh: a real Prometheus and node_exporter, run inside the VM from this root
  prometheus prometheus-node-exporter
  # ... and headless Chromium (run in the VM too) for the README's picture of Prometheus' graph
  chromium fonts-liberation
  # benches/: strace for the step breakdown
  strace
  # tests/cri.rs: a real containerd CRI (containerd 1.6 + runc), its Python gRPC client's venv
  containerd runc python3-venv
  # tests/image.rs: the DaemonSet image, built and run by podman (busybox-static above is its shell)
  podman
)
say() { echo "setup: $*" >&2; }

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || { say "run as root to install: ${missing[*]}"; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  APT=(apt-get -q -o Dpkg::Use-Pty=0 --no-install-recommends)
  plan=$("${APT[@]}" -s install "${missing[@]}" 2>&1) || {
    apt-get update -q >&2
    plan=$("${APT[@]}" -s install "${missing[@]}" 2>&1)
  }
  if grep -q '^Remv ' <<<"$plan"; then
    say "refusing: installing ${missing[*]} would remove:"
    grep '^Remv ' <<<"$plan" >&2
    exit 1
  fi
  new=$(awk '/^Inst / && $3 !~ /^\[/ {print $2}' <<<"$plan")
  upg=$(awk '/^Inst / && $3 ~ /^\[/ {print $2}' <<<"$plan")
  say "asked for: ${missing[*]}"
  say "installing $(wc -w <<<"$new") new packages (no recommends): $(echo $new)"
  [[ -z $upg ]] || say "upgrading, because a new package needs their newer version: $(echo $upg)"
  "${APT[@]}" install -y "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && "${APT[@]}" install -y "${missing[@]}" >&2; }
  # shellcheck disable=SC2086
  kib=$(dpkg-query -W -f='${Installed-Size}\n' $new $upg 2>/dev/null | awk '{s+=$1} END {print s+0}')
  say "installed: $((kib / 1024)) MiB on disk"
fi
command -v cargo >/dev/null || { say "cargo not found: install Rust (rustup.rs), 1.88 or newer"; exit 1; }

# The CRI tests' gRPC client (tests/cri/cri.py): grpcio + grpcio-tools from PyPI, pinned, in a
# venv of Debian's python3 (not whatever python3 is first on PATH).
VENV=${RHD_VENV:-$HOME/.cache/rhd-venv}
REQ=$REPO/tests/cri/requirements.txt
if ! "$VENV/bin/python" -c 'import grpc, grpc_tools' 2>/dev/null ||
  ! cmp -s "$REQ" "$VENV/.rhd-requirements.txt"; then
  say "making $VENV: $(grep -v '^#' "$REQ" | tr '\n' ' ')"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  cp "$REQ" "$VENV/.rhd-requirements.txt"
  say "venv: $(du -sh "$VENV" | cut -f1)"
fi
