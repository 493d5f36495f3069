#!/usr/bin/env bash
# Installs what one purpose needs on Debian 12 (run as root), and first prints the plan: which
# packages each set needs, which are missing, what apt would add, upgrade or replace, and how
# many MiB. Idempotent: what is present is not touched; no recommends; no upgrades of what is
# installed (only a dependency that needs a newer version of an installed library upgrades it,
# and the plan says so); never removes a package.
#
#   scripts/setup.sh [--for SET]... [--dry-run] [--packages-only] [--plan-from FILE]
#
#   --for SET        build     compiling the plugin (rdma-mummy-sys needs cmake and libclang)
#                    demo      build + the RDMA VM + Debian's IPAM plugins (scripts/demo.sh)
#                    test      demo + everything scripts/test.sh runs (the default)
#                    cluster   the real cluster of crates/agent/tests/real_cluster/pods.rs: Kubernetes 1.37, containerd
#                              2.4, the CNI plugins and Multus built from their Go modules
#                              (scripts/cluster-parts.sh: cached, seconds when nothing changed;
#                              needs Go 1.21+, 1.26 best) and what the harness runs beside them
#                    pictures  headless Chromium, for scripts/pictures.sh only
#   --dry-run        print the plan and change nothing (apt's package lists may be refreshed)
#   --packages-only  only the packages: no venv, no cluster parts, no Rust toolchain check (the
#                    cold check, scripts/cold-check.sh, plans so in a fresh Debian 12 root)
#   --plan-from F    take apt's simulated plan from F instead of asking apt, print what setup
#                    decides, change nothing (tests/shipped/setup.rs feeds it recorded plans)
#
# When apt would remove or downgrade something, setup resolves the cases it knows (today one:
# a backported qemu-utils, newer than Debian 12's QEMU allows, is replaced by Debian 12's
# qemu-utils of the same version as the qemu-system-x86 it installs) and refuses anything else,
# printing the exact apt command a person can run after deciding for themselves.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

declare -A SET
SET[build]="cmake clang libclang-dev make gcc libc6-dev"
# The RDMA VM (tests/vm/vm.sh): QEMU, a busybox initramfs, module tools, unpacking, gcc-12 and
# friends for the two test modules (Debian's 6.1 kernel is built with gcc-12), and the RDMA user
# space the guest runs straight from this root (rdma from iproute2, ibv_devinfo, the rxe/siw
# providers).
SET[vm]="qemu-system-x86 busybox-static kmod cpio xz-utils zstd gcc-12 binutils patch python3
  iproute2 util-linux ibverbs-utils ibverbs-providers"
SET[demo]="${SET[build]} ${SET[vm]} containernetworking-plugins"
# libcni (Go source) for the test client; dnsmasq for tests/attach/dhcp.rs; rping and perftest in the
# VM; Prometheus + node_exporter for tests/vm/metrics.sh; strace for benches/; containerd, runc
# and a venv (grpcio) for tests/runtimes/cri.rs; podman for tests/runtimes/image.rs; runc for crates/agent/tests/node_agent/nri.rs; curl
# and openssl for the DRA tests' REST calls and their stand-in API server's certificate;
# iputils-ping (ping -M do: a don't-fragment jumbo ping), and Open MPI with UCX (openmpi-bin;
# libopenmpi-dev's mpicc builds tests/vm/allreduce.c) in the two-node group's pods.
# For the style step and the cold check: Debian's shellcheck and debootstrap (scripts/lint-shell.sh,
# scripts/cold-check.sh).
SET[test]="${SET[demo]} golang-go golang-github-appc-cni-dev dnsmasq-base perftest rdmacm-utils
  iputils-ping openmpi-bin libopenmpi-dev prometheus prometheus-node-exporter strace containerd runc python3-venv podman curl openssl
  shellcheck debootstrap"
# The real cluster (tests/cluster/cluster.sh): runc under containerd 2.4, openssl for its
# certificates, nsenter/unshare, a static pause and busybox for its images, podman for ours.
SET[cluster]="runc openssl iproute2 util-linux gcc libc6-dev busybox-static podman python3"
SET[pictures]="chromium fonts-liberation"

# Removals and downgrades setup understands: the package apt wants to remove -> the package we
# install whose version it must then match (both from Debian 12's qemu source package).
declare -A REPLACE_TO_MATCH=([qemu-utils]=qemu-system-x86)

say() { echo "setup: $*" >&2; }
die() { say "$*"; exit 1; }

SETS=() DRY=0 PLAN_FROM= PACKAGES_ONLY=0
while (($#)); do
  case $1 in
    --for) [[ -n ${SET[${2:-}]:-} ]] || die "--for wants one of: ${!SET[*]}"; SETS+=("$2"); shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --packages-only) PACKAGES_ONLY=1; shift ;;
    --plan-from) PLAN_FROM=${2:?--plan-from wants a file}; DRY=1; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
((${#SETS[@]})) || SETS=(test)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep "install ok installed" >/dev/null; }

# The union of the asked sets, in order, once each; and what of it is missing.
declare -A seen
want=() missing=()
for s in "${SETS[@]}"; do
  n=0 m=0
  for p in ${SET[$s]}; do
    n=$((n + 1))
    installed "$p" || m=$((m + 1))
    [[ -n ${seen[$p]:-} ]] && continue
    seen[$p]=1 want+=("$p")
    installed "$p" || missing+=("$p")
  done
  say "set $s: $n packages, $m missing"
done

# decide PLAN: apt's simulated plan (apt-get -s install) -> one line per change:
#   new PKG VERSION | upgrade PKG OLD NEW | downgrade PKG OLD NEW | remove PKG OLD
decide() {
  awk '
    /^The following packages will be DOWNGRADED:/ { sect = "down"; next }
    /^The following / || /^[0-9]+ upgraded,/ { sect = ""; next }
    sect == "down" && /^  / { for (i = 1; i <= NF; i++) down[$i] = 1; next }
    /^Remv / { gsub(/[][]/, "", $3); print "remove", $2, $3; next }
    /^Inst / {
      pkg = $2
      if ($3 ~ /^\[/) { old = $3; gsub(/[][]/, "", old); new = $4 } else { old = ""; new = $3 }
      gsub(/^\(/, "", new)
      if (old == "") print "new", pkg, new
      else if (pkg in down) print "downgrade", pkg, old, new
      else print "upgrade", pkg, old, new
    }' <<<"$1"
}

# resolve DECISIONS: for each removal or downgrade setup knows, "replace PKG OLD NEW PARTNER";
# for anything else, "refuse KIND PKG OLD". Reads the versions the plan installs.
resolve() {
  local d=$1 kind pkg old new partner v
  while read -r kind pkg old new; do
    case $kind in
      remove | downgrade)
        partner=${REPLACE_TO_MATCH[$pkg]:-}
        v=
        [[ -n $partner ]] && v=$(awk -v p="$partner" '$1 == "new" && $2 == p {print $3}' <<<"$d")
        if [[ -n $v ]]; then echo "replace $pkg $old $v $partner"; else echo "refuse $kind $pkg $old"; fi
        ;;
    esac
  done <<<"$d"
}

APT=(apt-get -q -o Dpkg::Use-Pty=0 --no-install-recommends)
simulate() { "${APT[@]}" -s install "$@" 2>&1; }

# When the newer package comes from a source apt still has (bookworm-backports enabled), it is
# apt's candidate, and apt finds no plan at all rather than one that replaces it. Ask again with
# each known replacement pinned to its partner's candidate version; the plan that comes back is
# judged like any other (a downgrade setup knows, nothing else).
simulate_replacing() {
  local pkg partner v pins=()
  for pkg in "${!REPLACE_TO_MATCH[@]}"; do
    partner=${REPLACE_TO_MATCH[$pkg]}
    installed "$pkg" && [[ " ${missing[*]} " == *" $partner "* ]] || continue
    v=$(apt-cache policy "$partner" | awk '$1 == "Candidate:" {print $2}')
    [[ -n $v && $v != "(none)" ]] && pins+=("$pkg=$v")
  done
  ((${#pins[@]})) || return 1
  say "apt found no plan with the installed ${pins[*]%%=*}; asking again with ${pins[*]}"
  simulate --allow-downgrades "${missing[@]}" "${pins[@]}"
}

# mib LINES: MiB on disk of the "new PKG VERSION" lines, from apt's own records.
mib() {
  local specs
  specs=$(awk '$1 == "new" {print $2 "=" $3}' <<<"$1")
  [[ -n $specs ]] || { echo 0; return; }
  # shellcheck disable=SC2086
  apt-cache show --no-all-versions $specs 2>/dev/null |
    awk '/^Installed-Size:/ {s += $2} END {if (s) printf "%d", s / 1024; else print "?"}'
}

# show DECISIONS: the plan, as a person reads it.
show() {
  local d=$1 new upg
  new=$(awk '$1 == "new" {print $2}' <<<"$d" | xargs)
  upg=$(awk '$1 == "upgrade" {print $2 " " $3 " -> " $4 ","}' <<<"$d" | xargs)
  say "plan: $(wc -w <<<"$new") new packages, $(mib "$d") MiB on disk (no recommends): $new"
  [[ -z $upg ]] || say "plan: upgrading, because a new package needs their newer version: ${upg%,}"
  awk '$1 == "replace" {printf "setup: plan: replacing %s %s by Debian 12'"'"'s %s, the version of the %s it installs (the newer one breaks it)\n", $2, $3, $4, $5}' <<<"$d" >&2
}

if [[ -n $PLAN_FROM ]]; then
  plan=$(cat -- "$PLAN_FROM")
elif ((${#missing[@]} == 0)); then
  say "plan: nothing to install: all ${#want[@]} packages present"
  plan=
else
  say "missing: ${missing[*]}"
  [[ $(id -u) == 0 ]] || die "run as root to install: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  plan=$(simulate "${missing[@]}") || {
    apt-get update -q >&2
    plan=$(simulate "${missing[@]}") || plan=$(simulate_replacing) ||
      { echo "$plan" >&2; die "apt cannot plan: ${missing[*]}"; }
  }
fi

if [[ -n $plan ]]; then
  decisions=$(decide "$plan")
  actions=$(resolve "$decisions")
  pins=() downgrade=()
  while read -r what a b c _; do
    case $what in
      replace) pins+=("$a=$c"); downgrade=(--allow-downgrades) ;;
      refuse)
        say "refusing: apt would $a $b $c to install what is missing, and setup does not know that case."
        say "nothing was changed. If $b can go, run this yourself, then setup again:"
        say "  apt-get install --no-install-recommends ${missing[*]:-<the missing packages>}"
        echo "refuse $a $b $c"
        exit 1
        ;;
    esac
  done <<<"$actions"
  if ((${#pins[@]})) && [[ -z $PLAN_FROM ]]; then
    # Ask apt again with the replacements pinned: the plan must now remove nothing and
    # downgrade only what setup asked for.
    plan=$(simulate --allow-downgrades "${missing[@]}" "${pins[@]}") || { echo "$plan" >&2; die "apt cannot plan with ${pins[*]}"; }
    decisions=$(decide "$plan")
    bad=$(awk -v ok=" ${pins[*]%%=*} " '$1 == "remove" || ($1 == "downgrade" && index(ok, " " $2 " ") == 0)' <<<"$decisions")
    [[ -z $bad ]] || die "refusing: even with ${pins[*]}, apt would: $(xargs <<<"$bad"). Nothing was changed."
  fi
  show "$decisions"$'\n'"$actions"
  if [[ -n $PLAN_FROM ]]; then
    # What setup would do, one line each, for tests/shipped/setup.rs.
    printf '%s\n' "$decisions" "$actions" | awk 'NF'
    exit 0
  fi
  if ((DRY)); then say "dry run: nothing changed"; else
    "${APT[@]}" install -y --no-remove "${downgrade[@]}" "${missing[@]}" "${pins[@]}" >&2 ||
      { apt-get update -q >&2 && "${APT[@]}" install -y --no-remove "${downgrade[@]}" "${missing[@]}" "${pins[@]}" >&2; }
    say "installed ${#missing[@]} asked-for packages and their dependencies"
  fi
fi

for s in "${SETS[@]}"; do [[ $s == test ]] && NEED_VENV=1; done
if [[ -n ${NEED_VENV:-} && -z $PLAN_FROM && $PACKAGES_ONLY == 0 ]]; then
  # The CRI tests' gRPC client (tests/cri/cri.py): grpcio + grpcio-tools from PyPI, pinned, in
  # a venv of Debian's python3 (not whatever python3 is first on PATH).
  VENV=${RHD_VENV:-$HOME/.cache/rhd-venv}
  REQ=$REPO/tests/cri/requirements.txt
  if ! "$VENV/bin/python" -c 'import grpc, grpc_tools' 2>/dev/null ||
    ! cmp -s "$REQ" "$VENV/.rhd-requirements.txt"; then
    if ((DRY)); then say "plan: a venv at $VENV with $(grep -v '^#' "$REQ" | xargs) (PyPI)"; else
      say "making $VENV: $(grep -v '^#' "$REQ" | xargs)"
      /usr/bin/python3 -m venv "$VENV" || die "python3 -m venv $VENV failed (python3-venv is in the test set)"
      "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2 ||
        die "pip cannot install $(grep -v '^#' "$REQ" | xargs) from PyPI (see pip's words above): if PyPI no longer serves a pin, move it in tests/cri/requirements.txt"
      cp "$REQ" "$VENV/.rhd-requirements.txt"
      say "venv: $(du -sh "$VENV" | cut -f1)"
    fi
  fi
fi
for s in "${SETS[@]}"; do [[ $s == cluster ]] && NEED_PARTS=1; done
if [[ -n ${NEED_PARTS:-} && -z $PLAN_FROM && $PACKAGES_ONLY == 0 ]]; then
  if ((DRY)); then "$REPO/scripts/cluster-parts.sh" --dry-run >/dev/null; else "$REPO/scripts/cluster-parts.sh" >/dev/null; fi
fi
if ((!DRY && !PACKAGES_ONLY)); then command -v cargo >/dev/null || die "cargo not found: install Rust (rustup.rs), 1.89 or newer"; fi
exit 0
