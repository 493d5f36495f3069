#!/usr/bin/env bash
# benches/bench.sh: rdma-host-device against Debian's host-device, side by side, in one run.
# Builds the release binary and the libcni driver, then runs benches/harness.py and prints a
# table of medians and ratios (A = rdma-host-device, B = /usr/lib/cni/host-device).
# Method and the last recorded results: docs/bench.md.
#
# usage (as root, from anywhere):
#   benches/bench.sh [-n ITER] [--cases direct,noipam,v110,libcni,parallel,links,spawn]
#                    [--no-build] [--a BIN] [--b BIN --b-kind ours|hostdev] [...harness flags]
# environment: CARGO_TARGET_DIR (default ./target), BENCH_WORK (scratch, default
#   $CARGO_TARGET_DIR/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=${BENCH_WORK:-$TARGET/bench}
BUILD=1
ARGS=()
HAVE_A=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-build) BUILD=0; shift ;;
    --a) HAVE_A=1; ARGS+=("$1" "$2"); shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

[[ $(id -u) == 0 ]] || { echo "bench: run as root (it makes netns and links)" >&2; exit 2; }
[[ -x /usr/lib/cni/host-device && -x /usr/lib/cni/static ]] ||
  { echo "bench: needs Debian's containernetworking-plugins in /usr/lib/cni" >&2; exit 2; }
mkdir -p "$WORK"

if [[ $BUILD == 1 ]]; then
  cargo build --release --quiet
fi
PLUGIN=$TARGET/release/rdma-host-device
[[ $HAVE_A == 1 ]] || ARGS+=(--a "$PLUGIN")

SPAWN=$WORK/spawn
if [[ ! -x $SPAWN || benches/spawn.c -nt $SPAWN ]]; then
  cc -O2 -o "$SPAWN" benches/spawn.c
fi
ARGS+=(--spawn "$SPAWN")

DRIVER=$WORK/libcni-driver
if command -v go >/dev/null && [[ -d /usr/share/gocode/src/github.com/containernetworking/cni ]]; then
  if [[ ! -x $DRIVER || tests/libcni-driver/main.go -nt $DRIVER ]]; then
    GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=${GOCACHE:-$TARGET/tmp/go-cache} GOFLAGS= \
      go build -o "$DRIVER" ./tests/libcni-driver
  fi
  ARGS+=(--driver "$DRIVER")
else
  echo "bench: no go / golang-github-appc-cni-dev: skipping the libcni case" >&2
fi

echo "rdma-host-device bench, $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src Cargo.toml 2>/dev/null || echo '+dirty')"
echo "machine: $(uname -r), $(nproc) CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "B: $(/usr/lib/cni/host-device 2>&1 | sed -n 1p) ($(dpkg-query -W -f='${Version}' containernetworking-plugins 2>/dev/null || echo '?'))"
echo "load before: $(uptime | sed 's/.*load average/load average/')"
RC=0
python3 benches/harness.py --work "$WORK/run" --json "$WORK/results.json" "${ARGS[@]}" || RC=$?
echo "load after:  $(uptime | sed 's/.*load average/load average/')"
exit $RC
