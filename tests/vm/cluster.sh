#!/usr/bin/env bash
# tests/vm/cluster.sh - group `cluster` (tests/vm/run.sh): the real Kubernetes 1.37 kubelet and
# containerd 2.4 INSIDE the soft-RoCE VM, as the node of a control plane (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager) that tests/cluster/cluster.sh runs on this machine
# (RHD_CLUSTER_NODE=vm: its netns, no node of its own). The VM gets a second NIC on QEMU's user
# networking (vm.sh --uplink): the kubelet dials the API server at 198.51.100.2:443 through it,
# and the API server reaches the kubelet (exec, logs) at the node's address 198.51.100.1:10250,
# which is this machine's end of the cluster's veth, where QEMU listens and forwards into the
# guest. tests/vm/cluster-node.sh runs in the guest: the node, then the device plugin's and the
# DRA paths with conf/k8s as shipped (tests/vm/README.md, docs/testing.md).
#
# Needs root, the cluster parts (scripts/setup.sh --for cluster), podman, what run.sh makes in
# target/vm (rdma-tools.tar), and target/debug's plugin and agent (RHD_BIN names another plugin;
# its agent beside it).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
cd "$REPO" || exit 1
BIN=${RHD_BIN:-$REPO/target/debug/rdma-host-device}
AGENT=$(dirname "$BIN")/rdma-host-device-agent
say() { echo "vm cluster: $*" >&2; }
T0=$SECONDS

# The DaemonSet's image, by deploy/build-image.sh, from stripped copies (the debug binaries are
# ~400 MB; the guest keeps the image in its memory), in a private podman storage (vfs: no
# mounts left behind), saved as the OCI archive the guest imports.
W=$REPO/target/vm/cluster-image
rm -rf "$W"
mkdir -p "$W/bin"
strip -o "$W/bin/rdma-host-device" "$BIN" && strip -o "$W/bin/rdma-host-device-agent" "$AGENT" ||
  { say "cannot strip $BIN and $AGENT (cargo build first)"; exit 1; }
P=$(mktemp -d /tmp/rhd-vmimg.XXXXXX)
PODMAN_OPTS="--root=$P/storage --runroot=$P/run --tmpdir=$P/tmp --storage-driver=vfs --cgroup-manager=cgroupfs --events-backend=file"
cleanup_podman() { rm -rf "$P"; }
trap cleanup_podman EXIT
report=$(PODMAN_OPTS=$PODMAN_OPTS deploy/build-image.sh "$W/bin/rdma-host-device") || { say "deploy/build-image.sh failed"; exit 1; }
image=$(sed -n 's/^image: //p' <<<"$report")
# shellcheck disable=SC2086
podman $PODMAN_OPTS save --format oci-archive -o "$W/image.tar" "$image" >/dev/null ||
  { say "podman save $image failed"; exit 1; }
rm -rf "${P:?}" "${W:?}/bin"
say "image $image made in $((SECONDS - T0)) s"

# The control plane. Its DIR is under the repository, which the guest shares read-write: the
# guest reads its certificates and kubeconfigs and writes the node's logs there.
D=$REPO/target/vm/k8svm
tests/cluster/cluster.sh down "$D" >/dev/null 2>&1
rm -rf "$D"
down() { tests/cluster/cluster.sh down "$D" >&2; }
trap 'down; cleanup_podman' EXIT
t=$SECONDS
RHD_CLUSTER_NODE=vm tests/cluster/cluster.sh up "$D" || { say "the control plane did not come up"; exit 1; }
say "control plane up in $((SECONDS - t)) s"
# shellcheck disable=SC1091
. "$D/env"

# The node. Exclusive mode with the netns-capable rxe (rdma_rxe_netns); two vCPUs, memory for
# containerd's images on tmpfs and the kubelet.
t=$SECONDS
RHD_CLUSTER_DIR=$D RHD_CLUSTER_IMAGE=$W/image.tar "$HERE/vm.sh" --exclusive --mem 3072 --timeout 1500 \
  --uplink "tcp:$NODE_IP:10250-:10250" "$HERE/cluster-node.sh"
rc=$?
say "the VM ran $((SECONDS - t)) s (exit $rc); node logs in $D/logs"
exit $rc
