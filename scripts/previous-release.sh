#!/usr/bin/env bash
# previous-release.sh: build the CNI plugin of the previous release and print its path, for
# tests/give_back/upgrade.rs (upgrade and rollback of the DaemonSet while pods hold NICs; scripts/test.sh
# exports it as RHD_PREVIOUS_PLUGIN).
#
# The previous release is the commit in PREVIOUS: move it forward at each release. It is taken
# from this clone's history (git archive: no network but crates.io's, for its Cargo.lock pins)
# and built in a target directory of its own: two versions of one package must never share
# one (cargo names their artifacts alike and each would take the other's as fresh).
#
# usage: scripts/previous-release.sh      environment: CARGO_TARGET_DIR (default ./target)
set -euo pipefail
PREVIOUS=7362751751d7e76801fe657fabb668d8c7f30cb7
cd "$(dirname "${BASH_SOURCE[0]}")/.."
die() { echo "previous-release.sh: $*" >&2; exit 1; }
OUT=${CARGO_TARGET_DIR:-$PWD/target}/previous/$PREVIOUS
BIN=$OUT/target/debug/rdma-host-device
if [[ ! -x $BIN ]]; then
  git cat-file -e "$PREVIOUS^{commit}" 2>/dev/null ||
    die "commit $PREVIOUS is not in this clone (a shallow one? git fetch --unshallow)"
  rm -rf "$OUT/src"
  mkdir -p "$OUT/src"
  git archive "$PREVIOUS" | tar -x -C "$OUT/src"
  # A package of its own, not a member of the workspace it sits under (./target is inside
  # this one): without this cargo refuses to build it.
  printf '\n[workspace]\n' >>"$OUT/src/Cargo.toml"
  echo "previous-release.sh: building ${PREVIOUS:0:12}'s plugin in $OUT" >&2
  # Line tables only, as this workspace's own debug profile (Cargo.toml): the old commit's
  # profile keeps full debug info, a gigabyte of disk for one binary.
  (cd "$OUT/src" && CARGO_TARGET_DIR=$OUT/target CARGO_PROFILE_DEV_DEBUG=line-tables-only cargo build --locked --quiet --bin rdma-host-device) >&2 ||
    die "building $PREVIOUS failed"
fi
echo "$BIN"
