#!/usr/bin/env bash
# release.sh: build dist/rdma-host-device (the CNI plugin) and dist/rdma-host-device-agent (the
# node agent), release binaries for the node OSes our users run (RHEL 8.x with glibc 2.28,
# Ubuntu 20.04-24.04, Debian 12), and prove each:
#
#   - built with cargo-zigbuild against a glibc 2.28 baseline (target
#     x86_64-unknown-linux-gnu.2.28): zig links against stub libraries of exactly that glibc
#     version, so no symbol newer than GLIBC_2.28 can sneak in;
#   - checked with objdump: the highest GLIBC_x.y symbol version it needs is <= the baseline;
#   - checked with readelf: the only NEEDED libraries are glibc's own (libc, libm, libdl,
#     libpthread, librt, the loader) and libgcc_s (unwinding); libibverbs is NOT among them:
#     rdma-mummy-sys dlopens it at start-up, so nodes without rdma-core still run the plugin.
#
# Why not a static musl binary: it cannot dlopen libibverbs, and the GID check would lose its
# verbs path (the sysfs fallback would be the only one). The glibc baseline keeps both.
#
# usage: scripts/release.sh [--install-tools] [--glibc 2.28] [--skip-build]
#   --install-tools  pip-install the pinned zig (PyPI "ziglang") and cargo-zigbuild first
#   --glibc V        the glibc baseline (default 2.28, RHEL 8)
#   --skip-build     only verify the existing dist/ binaries
# environment: CARGO_TARGET_DIR (default target/zigbuild, kept apart from the dev build so a
#   slow LTO build never holds the dev build's lock), RELEASE_JOBS (cargo -j, default 2).
#
# Output: dist/rdma-host-device, dist/rdma-host-device-agent, their .sha256 files, dist/BUILDINFO
# (the figures).
set -euo pipefail

ZIGLANG_VERSION=0.17.0
ZIGBUILD_VERSION=0.24.0
GLIBC=2.28
INSTALL_TOOLS=0
SKIP_BUILD=0
ARCH_TARGET=x86_64-unknown-linux-gnu

die() { echo "release.sh: error: $*" >&2; exit 1; }
say() { echo "release.sh: $*" >&2; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --install-tools) INSTALL_TOOLS=1; shift ;;
    --glibc) GLIBC=${2:?--glibc needs a version}; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$ROOT/dist
BINS=(rdma-host-device rdma-host-device-agent)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/zigbuild}

if [[ $SKIP_BUILD == 0 ]]; then
  if [[ $INSTALL_TOOLS == 1 ]]; then
    say "installing ziglang==$ZIGLANG_VERSION cargo-zigbuild==$ZIGBUILD_VERSION from PyPI"
    python3 -m pip install --quiet "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION"
  fi
  command -v cargo-zigbuild >/dev/null ||
    die "cargo-zigbuild not found: run with --install-tools (pip) or 'cargo install cargo-zigbuild'"
  # cargo-zigbuild finds zig on PATH or as the PyPI package (python3 -m ziglang).
  command -v zig >/dev/null || python3 -c 'import ziglang' 2>/dev/null ||
    die "zig not found: run with --install-tools, or pip install ziglang==$ZIGLANG_VERSION"
  rustup target list --installed 2>/dev/null | grep -x "$ARCH_TARGET" >/dev/null ||
    die "rust target $ARCH_TARGET is not installed (rustup target add $ARCH_TARGET)"

  say "building $ARCH_TARGET.$GLIBC (release, LTO) into $CARGO_TARGET_DIR"
  start=$(date +%s)
  # rdma-mummy-sys compiles its C with cmake: cargo-zigbuild points CC/CXX (and thus cmake)
  # at `zig cc`, so that C is linked against the same glibc baseline. bindgen only reads
  # headers (libclang), it links nothing.
  nice -n 10 cargo zigbuild --release --locked -j "${RELEASE_JOBS:-2}" \
    --target "$ARCH_TARGET.$GLIBC" --bin rdma-host-device --bin rdma-host-device-agent
  secs=$(( $(date +%s) - start ))
  mkdir -p "$DIST"
  for name in "${BINS[@]}"; do
    install -m 0755 "$CARGO_TARGET_DIR/$ARCH_TARGET/release/$name" "$DIST/$name.tmp"
    mv -f "$DIST/$name.tmp" "$DIST/$name"
  done
  say "built in ${secs}s"
fi

# ---- verify
# verify NAME: dist/NAME's glibc symbol versions and NEEDED libraries; sets max_glibc, needed.
verify() {
  BIN=$DIST/$1
  [[ -x $BIN ]] || die "$BIN is missing (build it first)"
  max_glibc=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
  max_v=${max_glibc#GLIBC_}
  [[ -n $max_v ]] || die "objdump found no GLIBC symbol versions in $BIN (not a glibc binary?)"
  if [[ $(printf '%s\n%s\n' "$max_v" "$GLIBC" | sort -V | tail -1) != "$GLIBC" ]]; then
    die "$BIN needs $max_glibc, newer than the baseline GLIBC_$GLIBC"
  fi

  mapfile -t needed < <(readelf -d "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2)$'
  for lib in "${needed[@]}"; do
    [[ $lib =~ $allowed ]] || die "$BIN needs $lib: only glibc's libraries and libgcc_s are allowed"
  done
  if printf '%s\n' "${needed[@]}" | grep ibverbs >/dev/null; then
    die "libibverbs is NEEDED: it must stay dlopened (optional on the node)"
  fi
  # The dlopen must still be there (rdma-mummy-sys's constructor names the library).
  grep -qa 'libibverbs.so.1' "$BIN" || die "$BIN does not mention libibverbs.so.1: the verbs path is gone"
  (cd "$DIST" && sha256sum "$1" > "$1.sha256")
}

{
  for name in "${BINS[@]}"; do
    verify "$name"
    echo "binary: dist/$name"
    echo "version: $("$BIN" --version)"
    echo "max glibc symbol version: $max_glibc"
    echo "needed: ${needed[*]}"
    echo "size: $(stat -c %s "$BIN") bytes"
    echo "sha256: $(cut -d' ' -f1 "$DIST/$name.sha256")"
  done
  echo "target: $ARCH_TARGET.$GLIBC"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(cargo --version 2>/dev/null), cargo-zigbuild $(cargo-zigbuild --version 2>/dev/null | awk '{print $2}'), zig $( (zig version || python3 -m ziglang version) 2>/dev/null)"
} > "$DIST/BUILDINFO"
cat "$DIST/BUILDINFO"
