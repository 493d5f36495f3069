#!/usr/bin/env bash
# The cold path, on every test run (scripts/test.sh's step "the cold path"). A machine that has
# never seen this project downloads what the warm machine cached long ago, from registries that
# move every week: a kernel package the archive superseded, a module the proxy dropped, a pip pin
# gone, an apt plan that no longer resolves. Each of these broke the README's commands on a
# fresh machine while the warm CI stayed green. This check takes each download path through the
# same code the commands run, in a sandbox with empty caches of its own (HOME, GOMODCACHE,
# GOCACHE, GOPATH, the pip cache, the VM cache, the cluster parts' cache, the venv):
#
#   kernel   tests/vm/vm.sh --print-uris: the VM kernel set vm.sh would choose on a fresh
#            machine (the pin when the archive serves it whole, else the newest whole set), and
#            apt-get download --print-uris of every package of it;
#   go       scripts/cluster-parts.sh --only cni-plugins: the smallest cluster part, built from
#            empty Go caches through the module proxy;
#   venv     scripts/setup.sh --for test's venv (grpcio, from PyPI), made anew;
#   plans    setup's apt plans for every set (--dry-run --packages-only) in a fresh Debian 12
#            minbase root (debootstrap; the root's tarball is cached a week in
#            $RHD_COLD_CACHE, default ~/.cache/rhd-cold, and its apt lists are always fetched).
#
#   scripts/cold-check.sh [STEP...]      (default: kernel go venv plans)
#
# Fails naming the package, module or pin the registry no longer serves, with what to do. Needs
# root (debootstrap, chroot) and the test set's packages. Leaves nothing behind but the tarball.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
say() { echo "cold-check: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[[ $(id -u) == 0 ]] || fail "run as root (debootstrap and chroot)"
STEPS=("$@")
((${#STEPS[@]})) || STEPS=(kernel go venv plans)
for s in "${STEPS[@]}"; do
  case $s in kernel | go | venv | plans) ;; *) fail "no step $s (steps: kernel go venv plans)" ;; esac
done

ROOT_CACHE=${RHD_COLD_CACHE:-$HOME/.cache/rhd-cold}
SANDBOX=$(mktemp -d /tmp/rhd-cold-XXXXXX)
trap 'rm -rf "${SANDBOX:?}"' EXIT
# Every cache the commands would fill, empty and ours. PATH stays: the Rust toolchain, Go and
# apt's packages are the machine's, as on a fresh machine of this kind.
export HOME=$SANDBOX/home XDG_CACHE_HOME=$SANDBOX/home/.cache
export GOMODCACHE=$SANDBOX/go/mod GOCACHE=$SANDBOX/go/build GOPATH=$SANDBOX/go/path
export PIP_CACHE_DIR=$SANDBOX/pip PIP_NO_CACHE_DIR=0
export RDMA_VM_CACHE=$SANDBOX/vm RHD_CLUSTER_CACHE=$SANDBOX/cluster RHD_VENV=$SANDBOX/venv
unset RDMA_VM_KERNEL_ABI RDMA_VM_KERNEL_VERSION
mkdir -p "$HOME"
T0=$SECONDS
declare -A TOOK

step_kernel() {
  local out
  out=$("$REPO/tests/vm/vm.sh" --print-uris) || fail "kernel: tests/vm/vm.sh could not choose and resolve a VM kernel set (its words above)"
  echo "$out" | sed 's/^/  /' >&2
  # One URI line per package of the set.
  [[ $(grep -c "^'http" <<<"$out") -ge 5 ]] || fail "kernel: apt-get download --print-uris listed fewer than the set's 5 packages"
}

step_go() {
  "$REPO/scripts/cluster-parts.sh" --only cni-plugins >/dev/null ||
    fail "go: the CNI plugins did not build from empty Go caches (cluster-parts' words above name the module)"
  [[ -x $RHD_CLUSTER_CACHE/bin/host-device ]] || fail "go: no host-device in $RHD_CLUSTER_CACHE/bin after the build"
}

step_venv() {
  "$REPO/scripts/setup.sh" --for test ||
    fail "venv: scripts/setup.sh --for test failed (its words above)"
  "$RHD_VENV/bin/python" -c 'import grpc, grpc_tools' || fail "venv: $RHD_VENV has no grpc after setup"
}

step_plans() {
  local week tar root
  week=$(date +%G-%V)
  tar=$ROOT_CACHE/bookworm-minbase-$week.tar
  mkdir -p "$ROOT_CACHE"
  if [[ ! -f $tar ]]; then
    say "plans: a Debian 12 minbase root with debootstrap (cached for the week $week)"
    root=$SANDBOX/bootstrap
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$SANDBOX/debootstrap.log" 2>&1 ||
      { tail -20 "$SANDBOX/debootstrap.log" >&2; fail "plans: debootstrap of bookworm failed (its log's end above)"; }
    tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$root"
    for old in "$ROOT_CACHE"/bookworm-minbase-*.tar; do [[ $old == "$tar" ]] || rm -f "$old"; done
  fi
  root=$SANDBOX/root
  mkdir -p "$root"
  tar -C "$root" -xf "$tar"
  # The archive as a fresh machine of this kind sees it: its Debian sources (the security suite
  # too) and its apt settings; the name server.
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  rm -f "$root/etc/apt/sources.list"
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
  else
    printf 'deb http://deb.debian.org/debian bookworm main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' >"$root/etc/apt/sources.list"
  fi
  cp /etc/apt/apt.conf.d/99artifact-registry "$root/etc/apt/apt.conf.d/" 2>/dev/null || true
  mkdir -p "$root/rhd/scripts"
  cp "$REPO/scripts/setup.sh" "$root/rhd/scripts/"
  chroot "$root" apt-get update -q >"$SANDBOX/update.log" 2>&1 ||
    { tail -20 "$SANDBOX/update.log" >&2; fail "plans: apt-get update in the fresh root failed"; }
  chroot "$root" /rhd/scripts/setup.sh --for demo --for test --for cluster --for pictures --dry-run --packages-only ||
    fail "plans: setup cannot plan its sets in a fresh Debian 12 root (its words above name the package)"
}

for s in "${STEPS[@]}"; do
  t=$SECONDS
  say "--- $s"
  "step_$s"
  TOOK[$s]=$((SECONDS - t))
done
summary=
for s in "${STEPS[@]}"; do summary+=" $s ${TOOK[$s]} s,"; done
say "passed in $((SECONDS - T0)) s:${summary%,}"
