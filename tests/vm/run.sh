#!/usr/bin/env bash
# tests/vm/run.sh - every RDMA test, each group in a fresh VM boot of a Debian kernel with a
# real RDMA stack (tests/vm/vm.sh). Called by scripts/test.sh; prepares the VM on first use.
#
#   tests/vm/run.sh [GROUP...]   groups: smoke unit shared exclusive-stock exclusive-move
#                                exclusive-move-slub metrics cri-exclusive cluster
#                                two-nodes (default: all of them)
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
cd "$REPO" || exit 1
GROUPS_=("$@")
((${#GROUPS_[@]})) || GROUPS_=(smoke unit shared exclusive-stock exclusive-move exclusive-move-slub metrics cri-exclusive cluster two-nodes)

"$HERE/vm.sh" --prepare || { echo "run: preparing the VM failed" >&2; exit 1; }
cargo build -q || exit 1
# The core crate's unit tests: the RDMA netlink and verbs code (crates/core/src/rdma/) is there.
UNIT=$(cargo test -p rdma-host-device-core --no-run --message-format=json -q 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "rdma_host_device_core" and m["target"]["kind"] == ["lib"] and m["profile"]["test"]:
        print(m["executable"])' | sed -n 1p)
[[ -x $UNIT ]] || { echo "run: cannot find the unit-test binary" >&2; exit 1; }
mkdir -p target/vm
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$REPO/target/tmp/go-cache \
  go build -o target/vm/libcni-driver ./tests/libcni-driver || exit 1

# For cri-exclusive (tests/vm/cri.sh): the sandbox image, an image with this machine's RDMA
# tools (busybox, ibverbs-utils, rdmacm-utils, perftest, iputils' ping, the rxe and siw
# providers, their libraries; Debian's Open MPI with UCX and our allreduce for two-nodes) and
# the CRI client's stubs, made here because the guest sees this machine's files read-only and
# has no compiler run to spare.
export RHD_VENV=${RHD_VENV:-$HOME/.cache/rhd-venv}
VERBS=/usr/lib/x86_64-linux-gnu/libibverbs
# Open MPI loads its components, PMIx's and UCX's modules by name at run time, and reads its
# help texts: their whole directories (files and the soname links), not an ldd closure.
LIB=/usr/lib/x86_64-linux-gnu
mapfile -t MPI_PARTS < <(find "$LIB/openmpi/lib/openmpi3" "$LIB/pmix2/lib/pmix" "$LIB/pmix2/share" "$LIB/ucx" \
  /usr/share/openmpi /etc/openmpi \( -type f -o -type l \) | sort)
mpicc -O2 -o target/vm/allreduce tests/vm/allreduce.c &&
cc -static -Os -s -o target/vm/pause tests/cri/pause.c &&
  "$RHD_VENV/bin/python" tests/cri/cri.py - image target/vm/pause localhost/rhd-pause:test target/vm/pause.tar >/dev/null &&
  "$RHD_VENV/bin/python" tests/cri/cri.py - files-image localhost/rhd-rdma-tools:test target/vm/rdma-tools.tar /bin/sh \
    /bin/busybox '/bin/sh->busybox' '/bin/sleep->busybox' '/bin/cat->busybox' '/bin/ls->busybox' \
    '/bin/env->busybox' /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ibv_ud_pingpong \
    /usr/bin/rping /usr/bin/ib_write_bw /usr/bin/ib_read_lat /usr/bin/ping /etc/libibverbs.d/rxe.driver /etc/libibverbs.d/siw.driver \
    /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 \
    $VERBS/librxe-rdmav34.so $VERBS/libsiw-rdmav34.so \
    /usr/bin/mpirun /usr/bin/orted "/bin/allreduce=$REPO/target/vm/allreduce" \
    "/bin/mpi-rsh=$HERE/mpi-rsh.sh" '/bin/nc->busybox' '/bin/setsid->busybox' "${MPI_PARTS[@]}" >/dev/null &&
  RHD_CRI_STUBS=$REPO/target/vm/cri-stubs "$RHD_VENV/bin/python" tests/cri/cri.py - stubs >/dev/null ||
  { echo "run: cannot make the CRI test's pause image or stubs (scripts/setup.sh)" >&2; exit 1; }

declare -A RESULT
for g in "${GROUPS_[@]}"; do
  echo
  echo "=== VM: $g"
  start=$SECONDS
  case $g in
    smoke) "$HERE/smoke.sh" ;;
    unit) "$HERE/vm.sh" "$HERE/unit.sh" "$UNIT" && "$HERE/vm.sh" --exclusive "$HERE/unit.sh" "$UNIT" ;;
    # ~2.5 min on an idle machine; 9 min seen while three builds ran beside it.
    shared) "$HERE/vm.sh" --timeout 900 "$HERE/plugin.sh" shared ;;
    exclusive-stock) "$HERE/vm.sh" --exclusive "$HERE/plugin.sh" exclusive-stock ;;
    # The move group runs ~70 cases under TCG (4-5 min on an idle 2-core machine, more when the
    # machine is busy, more again with slub_debug): give it room rather than fail on load.
    exclusive-move) "$HERE/vm.sh" --exclusive --timeout 900 "$HERE/plugin.sh" exclusive-move ;;
    exclusive-move-slub) "$HERE/vm.sh" --exclusive --timeout 900 --append slub_debug=FZP "$HERE/plugin.sh" exclusive-move ;;
    metrics) "$HERE/vm.sh" --timeout 600 "$HERE/metrics.sh" ;;
    # One vCPU: with two, runc creating the sandbox was once seen to livelock the TCG guest
    # (soft lockups on both CPUs before any CNI call); the plugin is not involved there.
    cri-exclusive) "$HERE/vm.sh" --exclusive --smp 1 --timeout 600 "$HERE/cri.sh" ;;
    # The real kubelet and containerd in the VM, the control plane on this machine.
    cluster) "$HERE/cluster.sh" ;;
    # Two VMs as two kubelet nodes, their NICs cabled: a job across them (tests/vm/two-nodes.sh).
    two-nodes) "$HERE/two-nodes.sh" ;;
    *) echo "unknown group $g"; false ;;
  esac
  rc=$?
  RESULT[$g]="$([[ $rc == 0 ]] && echo pass || echo "FAIL (exit $rc)") in $((SECONDS - start))s"
done
echo
echo "=== VM summary"
fail=0
for g in "${GROUPS_[@]}"; do
  echo "  $g: ${RESULT[$g]}"
  [[ ${RESULT[$g]} == pass* ]] || fail=1
done
exit $fail
