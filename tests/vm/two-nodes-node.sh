#!/usr/bin/env bash
# tests/vm/two-nodes-node.sh N - in one of the two RDMA VMs of group `two-nodes`
# (tests/vm/two-nodes.sh): node N (1: rhd-vm, 2: rhd-vm2) of the control plane on the host, its
# test NIC eth0 (0000:00:05.0) cabled to the other VM's, rxe0 (rdma_rxe_netns) on it in
# exclusive mode, rdma_ucm loaded (rping needs rdma_cm). Then it runs what the host asks of it
# (the measurements in the VM's own namespace, checks of the node) until the host says done:
# the host drives the test with kubectl, which is quick on the host and slow under TCG.
#
# The channel: the host writes $D/vmcmd/N/K.sh; this runs it with bash, its output in K.out and
# its exit status in K.rc; $D/vmcmd/done ends the loop.
#
# Env (from tests/vm/two-nodes.sh): RHD_CLUSTER_DIR, RHD_CLUSTER_IMAGE.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh two-nodes" >&2
  exit 2
fi
N=${1:?usage: two-nodes-node.sh 1|2}
D=${RHD_CLUSTER_DIR:?} IMAGE_TAR=${RHD_CLUSTER_IMAGE:?}
# shellcheck disable=SC1091
. "$D/env"
# shellcheck disable=SC2153 # NODE2_IP: from $D/env
[[ $N == 2 ]] && NODE_IP=$NODE2_IP
NIC=${RDMA_VM_NIC:-eth0}
say() { echo "node $N: $*" >&2; }
up() { cut -d' ' -f1 /proc/uptime; }
T0=$(up)

modprobe rdma_rxe_netns && modprobe rdma_ucm && rdma link add rxe0 type rxe_ns netdev "$NIC" &&
  ip link set "$NIC" up || { say "rxe0 on $NIC failed"; exit 1; }
ip addr add "$NODE_IP/32" dev lo
# What /run holds as the VM booted: a node's reboot (two-nodes.sh) empties it of all else.
mkdir -p "$D/vmcmd/$N" && ls -A /run >"$D/vmcmd/$N/run-at-boot"
mount --make-rshared /
mkdir -p /var/lib/containerd && mount -t tmpfs tmpfs /var/lib/containerd
if [[ $N == 2 ]]; then "$REPO/tests/cluster/cluster.sh" node "$D" 2 || exit 1
else "$REPO/tests/cluster/cluster.sh" node "$D" || exit 1; fi
for a in "$IMAGE_TAR" "$REPO/target/vm/rdma-tools.tar"; do
  "$D/bin/ctr" --address /run/rhd-k8s/containerd.sock -n k8s.io images import "$a" >/dev/null ||
    { say "ctr images import $a failed"; exit 1; }
done
say "Ready with its images $(awk -v a="$T0" -v b="$(up)" 'BEGIN{printf "%.1f", b-a}') s after the job started"
: >"$D/vmcmd/$N/ready"

Q=$D/vmcmd/$N
while [[ ! -e $D/vmcmd/done ]]; do
  for f in "$Q"/*.sh; do
    [[ -f $f && ! -e ${f%.sh}.rc ]] || continue
    bash "$f" >"${f%.sh}.out" 2>&1
    echo $? >"${f%.sh}.rc.tmp" && mv "${f%.sh}.rc.tmp" "${f%.sh}.rc"
  done
  sleep 0.5
done
say "done"
