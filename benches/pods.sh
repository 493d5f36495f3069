#!/usr/bin/env bash
# benches/pods.sh: ADD+DEL of one NIC with 0, 100, 300 other pods on the node, a main build,
# this tree (with its uppers watcher) and Debian's host-device side by side (benches/pods.py
# says how). Figures and method: docs/bench.md, "Pods on the node".
#
# usage (as root): benches/pods.sh --main BIN [--no-build] [-n ROUNDS] [--pods 0,100,300]
#                                  [--settle SECS] [--hold SECS] [--neighbour LINKS] [--json FILE]
#   BIN: an rdma-host-device built from the commit to compare with, e.g.
#     git worktree add /tmp/main-X X && (cd /tmp/main-X && cargo build --release)
# environment: CARGO_TARGET_DIR (default ./target), BENCH_WORK (default $CARGO_TARGET_DIR/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
WORK=${BENCH_WORK:-$TARGET/bench}
BUILD=1
ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-build) BUILD=0; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "pods: run as root (it makes netns and links)" >&2; exit 2; }
[[ -x /usr/lib/cni/host-device ]] || { echo "pods: needs Debian's containernetworking-plugins" >&2; exit 2; }
mkdir -p "$WORK"
[[ $BUILD == 0 ]] || cargo build --release --quiet
SPAWN=$WORK/spawn
[[ -x $SPAWN && ! benches/spawn.c -nt $SPAWN ]] || cc -O2 -o "$SPAWN" benches/spawn.c
echo "rdma-host-device pods bench, $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src Cargo.toml 2>/dev/null || echo '+dirty')"
echo "machine: $(uname -r), $(nproc) CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
HOSTDEV=/usr/lib/cni/host-device
for ((i = 0; i < ${#ARGS[@]} - 1; i++)); do
  [[ ${ARGS[i]} != --hostdev ]] || HOSTDEV=${ARGS[i + 1]}
done
if [[ $HOSTDEV == /usr/lib/cni/host-device ]]; then
  hd="Debian's $(dpkg-query -W -f='${Version}' containernetworking-plugins 2>/dev/null || echo '?')"
else
  # A host-device built from its Go module names the module's version in its build info.
  hd="$HOSTDEV, $(go version -m "$HOSTDEV" 2>/dev/null | awk '$1 == "mod" {print $2, $3}')"
fi
echo "hostdev: $hd; load before: $(uptime | sed 's/.*load average/load average/')"
exec python3 benches/pods.py --ours "$TARGET/release/rdma-host-device" --spawn "$SPAWN" \
  --work "$WORK/pods" "${ARGS[@]}"
