#!/usr/bin/env bash
# Builds the real cluster parts the cluster tests run (crates/agent/tests/real_cluster/pods.rs) from their Go modules,
# once per machine: Kubernetes 1.37 (kube-apiserver, kubelet, kube-scheduler,
# kube-controller-manager, kubectl) and the etcd it is built against, containerd 2.4 (daemon,
# runc shim, ctr), the CNI plugins 1.10.0, Multus' thin plugin 4.3.0 and whereabouts 0.9.2 (the
# IPAM the shipped NAD names). Each module's go.mod
# and go.sum (tests/cluster/build/*/) pin its version; its binaries go to
# $RHD_CLUSTER_CACHE/<module>-<hash of go.mod+go.sum>/ (default ~/.cache/rhd-cluster), with
# Go's module and build caches in their usual home directories, so a second run takes seconds
# and a rebuild happens only when a pin changes. Prints what it builds and how long it took;
# the last line is the directory holding every binary (bin/, symlinks).
#
#   scripts/cluster-parts.sh [--dry-run] [--only PART]
#
# --only PART builds that one part (kubernetes, containerd, cni-plugins, multus or whereabouts)
# the same way;
# scripts/cold-check.sh builds the CNI plugins so from empty Go caches on every test run.
#
# Needs Go 1.26 or newer (the machines carry it in /usr/local/go); an older Go of 1.21 or newer
# fetches the toolchain the go.mod names from the Go module proxy. Nothing of the modules'
# source or binaries is kept in this repository.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
CACHE=${RHD_CLUSTER_CACHE:-$HOME/.cache/rhd-cluster}
DRY=0 ONLY=
say() { echo "cluster-parts: $*" >&2; }
die() { say "$*"; exit 1; }
while (($#)); do
  case $1 in
    --dry-run) DRY=1; shift ;;
    --only) ONLY=${2:-}; shift 2 || die "--only wants a part" ;;
    *) die "usage: scripts/cluster-parts.sh [--dry-run] [--only PART]" ;;
  esac
done

# module dir -> the packages to build (binary name = last path element, or NAME=PACKAGE)
declare -A PARTS=(
  [kubernetes]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubelet
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kubectl etcd=go.etcd.io/etcd/server/v3"
  [containerd]="github.com/containerd/containerd/v2/cmd/containerd
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
    github.com/containerd/containerd/v2/cmd/ctr"
  [cni-plugins]="github.com/containernetworking/plugins/plugins/main/bridge
    github.com/containernetworking/plugins/plugins/ipam/host-local
    github.com/containernetworking/plugins/plugins/main/host-device
    github.com/containernetworking/plugins/plugins/main/loopback"
  [multus]="gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
  [whereabouts]="whereabouts=github.com/k8snetworkplumbingwg/whereabouts/cmd"
)
# Files of a part's module copied beside its binaries (and linked in bin/ like them): the CRDs
# whereabouts' pools are kept in, which the cluster applies.
declare -A FILES=(
  [whereabouts]="doc/crds/whereabouts.cni.cncf.io_ippools.yaml
    doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml"
)
# Build tags: containerd without the snapshotters whose C headers a plain machine lacks.
declare -A TAGS=([containerd]="no_btrfs no_devmapper no_zfs")
# Version stamps a release build sets (the kubelet reports its version to the API server, which
# a built-from-module binary would otherwise give as v0.0.0-master).
declare -A STAMP=(
  [kubernetes]="k8s.io/component-base/version.gitVersion=v{v} k8s.io/component-base/version.gitMajor={major}
    k8s.io/component-base/version.gitMinor={minor} k8s.io/client-go/pkg/version.gitVersion=v{v}"
  [containerd]="github.com/containerd/containerd/v2/version.Version=v{v}"
)
ORDER=(kubernetes containerd cni-plugins multus whereabouts)
if [[ -n $ONLY ]]; then
  [[ -n ${PARTS[$ONLY]:-} ]] || die "--only: no part $ONLY (parts: ${ORDER[*]})"
  ORDER=("$ONLY")
fi
# The module whose version each part is named by, in the build's message.
declare -A PIN=([kubernetes]=^k8s.io/kubernetes [containerd]=^github.com/containerd/containerd/v2
  [cni-plugins]=^github.com/containernetworking/plugins [multus]=multus-cni
  [whereabouts]=^github.com/k8snetworkplumbingwg/whereabouts)

# A Go that builds go 1.26 modules: $RHD_GO, the machine's /usr/local/go, then PATH's.
GO=
for g in "${RHD_GO:-}" /usr/local/go/bin/go "$(command -v go || true)"; do
  [[ -n $g && -x $g ]] || continue
  v=$("$g" env GOVERSION 2>/dev/null || true) # go1.26.8; empty for a Go too old to know it
  minor=$(sed -n 's/^go1\.\([0-9]*\).*/\1/p' <<<"$v")
  [[ -n $minor ]] && ((minor >= 21)) && { GO=$g; break; }
done
[[ -n $GO ]] || die "no Go 1.21 or newer (found: $(go version 2>/dev/null || echo none)); install Go 1.26 (/usr/local/go) or set RHD_GO"
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} CGO_ENABLED=0 GOFLAGS=-buildvcs=false
say "Go: $GO ($("$GO" env GOVERSION)); caches: $("$GO" env GOMODCACHE), $("$GO" env GOCACHE)"

mkdir -p "$CACHE/bin"
total_start=$SECONDS
for m in "${ORDER[@]}"; do
  dir=$REPO/tests/cluster/build/$m
  # The pins and how they are built: a change of either is a new directory.
  key=$({ cat "$dir/go.mod" "$dir/go.sum"; echo "${TAGS[$m]:-} ${STAMP[$m]:-} ${FILES[$m]:-}"; } | sha256sum | cut -c1-12)
  out=$CACHE/$m-$key
  names=()
  for p in ${PARTS[$m]}; do names+=("$(if [[ $p == *=* ]]; then echo "${p%%=*}"; else basename "$p"; fi)"); done
  have=1
  for n in "${names[@]}"; do [[ -x $out/$n ]] || have=0; done
  files=()
  for f in ${FILES[$m]:-}; do files+=("$(basename "$f")"); done
  for f in "${files[@]}"; do [[ -f $out/$f ]] || have=0; done
  if ((have)); then
    say "$m: cached in $out (${names[*]})"
  elif ((DRY)); then
    say "plan: build $m (${names[*]}) into $out"
    continue
  else
    # The pinned module's version, read whole (awk reads to the end: a reader that stopped at the
    # first match would kill `go list` with SIGPIPE, which pipefail turns into the script's end).
    # go list also downloads the module graph: a module the proxy no longer serves fails here, named.
    mods=$(cd "$dir" && "$GO" list -m -f '{{.Path}} {{.Version}}' all) ||
      die "$m: the Go module proxy does not serve what tests/cluster/build/$m/go.mod pins (go list -m all failed above); check GOPROXY, or move the pin to a version the proxy serves"
    pin=$(awk -v p="${PIN[$m]}" '$1 ~ p && !found {found = $1 " " $2} END {print found}' <<<"$mods")
    [[ -n $pin ]] || die "$m: no module matching ${PIN[$m]} in tests/cluster/build/$m/go.mod"
    say "$m: building ${names[*]} ($pin)"
    start=$SECONDS
    tmp=$out.tmp
    rm -rf "$tmp" && mkdir -p "$tmp"
    v=${pin#* }
    v=${v#v}
    ldflags="-s -w"
    for x in ${STAMP[$m]:-}; do
      x=${x//\{v\}/$v} x=${x//\{major\}/${v%%.*}}
      minor=${v#*.} x=${x//\{minor\}/${minor%%.*}}
      ldflags+=" -X $x"
    done
    for p in ${PARTS[$m]}; do
      n=$(if [[ $p == *=* ]]; then echo "${p%%=*}"; else basename "$p"; fi)
      (cd "$dir" && "$GO" build -trimpath -tags "${TAGS[$m]:-}" -ldflags "$ldflags" -o "$tmp/$n" "${p#*=}") ||
        die "$m: go build ${p#*=} failed (module $dir)"
    done
    if [[ -n ${FILES[$m]:-} ]]; then
      moddir=$(cd "$dir" && "$GO" list -m -f '{{.Dir}}' "${pin%% *}") || die "$m: cannot find the module ${pin%% *}"
      for f in ${FILES[$m]}; do cp "$moddir/$f" "$tmp/" || die "$m: $f is not in ${pin}"; done
    fi
    rm -rf "$out" && mv "$tmp" "$out"
    # Builds of earlier pins of this module: nothing links to them any more.
    for old in "$CACHE/$m"-*; do [[ $old == "$out" ]] || rm -rf "$old"; done
    say "$m: built in $((SECONDS - start)) s into $out"
  fi
  for n in "${names[@]}" "${files[@]}"; do ln -sfn "$out/$n" "$CACHE/bin/$n"; done
done
((DRY)) || say "all parts ready in $((SECONDS - total_start)) s"
echo "$CACHE/bin"
