#!/usr/bin/env bash
# tests/vm/cri.sh - the headline through a real containerd CRI, INSIDE the RDMA VM in exclusive
# netns mode (tests/vm/run.sh boots it: group cri-exclusive). Debian's containerd 1.6 runs in the
# guest with a private config on a tmpfs; tests/cri/cri.py plays kubelet; the NIC is the VM's
# virtio NIC (a PCI function that returns to the host when its netns dies, as a physical one
# does) with the test-only netns-capable rxe on it, selected by pciBusID as a NAD would.
#
#   move          RunPodSandbox: the pod's eth0 is the NIC with the CRI's pod IP, the pod
#                 lists rxe0 with the RoCE v2 GID of that IP, the host lists neither; Stop and
#                 Remove: both home under their names, MTU restored, IP released, no state
#   netns-gone    the sandbox netns is deleted behind containerd's back (`ip netns delete`):
#                 the pod still deletes, and the NIC and rxe0 are home again, named as before
#
# Needs (prepared on the host by run.sh): target/vm/pause.tar (the sandbox image), the CRI
# stubs in target/vm/cri-stubs, the venv at $RHD_VENV.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh cri-exclusive" >&2
  exit 2
fi
BIN=${RHD_BIN:-$REPO/target/debug/rdma-host-device}
NIC=${RDMA_VM_NIC:-eth0} PCI=${RDMA_VM_NIC_PCI:-0000:00:05.0}
PASS=0 FAIL=0
ok()  { echo "  ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "  FAIL $*"; FAIL=$((FAIL + 1)); }
case_() { echo "--- $*"; }
check() { local d=$1; shift; if out=$("$@" 2>&1); then ok "$d"; else bad "$d: $out"; fi; }

# containerd's own directories on a fresh tmpfs (its overlayfs snapshotter cannot use the
# guest's overlay root as an upper layer).
D=$(mktemp -d)
mount -t tmpfs tmpfs "$D"
mkdir -p "$D/bin" "$D/net.d" "$D/ipam" "$D/state" "$D/log"
cp /usr/lib/cni/loopback /usr/lib/cni/host-local "$D/bin/"
ln -s "$BIN" "$D/bin/rdma-host-device"
# ipamPaths: the defaults plus $D (host-local's dataDir below is $D/ipam).
echo "{\"stateDir\":\"$D/rhd-state\",\"logDir\":\"$D/log\",\"ipamPaths\":[\"/var/lib/cni\",\"/run/cni\",\"/var/run/cni\",\"/etc/cni\",\"$D\"]}" >"$D/node.json"
cat >"$D/config.toml" <<EOF
version = 2
root = "$D/root"
state = "$D/state"
[grpc]
  address = "$D/containerd.sock"
[ttrpc]
  address = "$D/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/rhd-pause:test"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$D/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$D/bin"
    conf_dir = "$D/net.d"
EOF
cat >"$D/net.d/10-rdma.conflist" <<EOF
{"cniVersion":"1.0.0","name":"rdma-rail0","plugins":[
 {"type":"rdma-host-device","pciBusID":"$PCI","mtu":1400,"rdma":{"isolation":"exclusive"},
  "logFile":"cri.log","ipam":{"type":"host-local","ranges":[[{"subnet":"10.58.0.0/24"}]],"dataDir":"$D/ipam"}}]}
EOF

modprobe rdma_rxe_netns || { echo "modprobe rdma_rxe_netns failed"; exit 1; }
rdma link add rxe0 type rxe_ns netdev "$NIC" || { echo "rdma link add rxe0 failed"; exit 1; }
RDMA_HOST_DEVICE_NODE_CONFIG=$D/node.json containerd --config "$D/config.toml" >"$D/containerd.log" 2>&1 &
export RHD_CRI_STUBS=$REPO/target/vm/cri-stubs
PY=${RHD_VENV:-/root/.cache/rhd-venv}/bin/python
cri() { "$PY" "$REPO/tests/cri/cri.py" "$D/containerd.sock" "$@"; }
field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1"; }
for _ in $(seq 100); do cri status 2>/dev/null | grep -q '"NetworkReady": true' && break; sleep 0.2; done
if cri status | grep -q '"NetworkReady": true'; then ok "containerd's CRI is ready"; else bad "containerd's CRI not ready"; fi
ctr -a "$D/containerd.sock" -n k8s.io images import "$REPO/target/vm/pause.tar" >/dev/null ||
  bad "ctr images import"

host_rdma() { rdma -j dev show 2>/dev/null | python3 -c 'import json,sys; print(" ".join(d["ifname"] for d in json.load(sys.stdin)))'; }
pod_rdma() { ip netns exec "$1" rdma -j dev show 2>/dev/null | python3 -c 'import json,sys; print(" ".join(d["ifname"] for d in json.load(sys.stdin)))'; }
mtu_of() { ip -j link show "$1" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["mtu"])'; }
leases() { find "$D/ipam" -type f -name '*.*.*.*' | wc -l; }
states() { find "$D/rhd-state" -name '*.json' 2>/dev/null | wc -l; }
home() {  # both home: the NIC under its name and MTU, rxe0 on the host, no lease, no state
  check "$NIC is home with MTU 1500" test "$(mtu_of "$NIC")" = 1500
  check "rxe0 is on the host again" test "$(host_rdma)" = rxe0
  check "the IP is released and the plugin's state forgotten" test "$(leases)$(states)" = 00
}
# run_pod NAME: RunPodSandbox, then the pod as the CRI reports it in ID, IP, NS.
run_pod() {
  local r p
  r=$(cri run "$1") || { bad "RunPodSandbox $1: $r"; return 1; }
  ID=$(field id <<<"$r")
  echo "    RunPodSandbox $(field ms <<<"$r") ms"
  p=$(cri pod "$ID")
  IP=$(field ip <<<"$p") NS=$(field netns <<<"$p") NS=${NS##*/}
  check "the sandbox is READY with IP $IP" test "$(field state <<<"$p")" = SANDBOX_READY
  check "the pod's eth0 is the NIC ($PCI) with $IP and MTU 1400" bash -c \
    "ip -n $NS -j addr show eth0 | grep -q '\"local\":\"$IP\"' && test \"\$(ip -n $NS -j link show eth0 | python3 -c 'import json,sys; l=json.load(sys.stdin)[0]; print(l[\"mtu\"], l[\"address\"])')\" = '1400 52:54:00:12:34:05'"
  check "the pod lists rxe0" test "$(pod_rdma "$NS")" = rxe0
  check "ibv_devinfo in the pod shows ::ffff:$IP as RoCE v2" bash -c \
    "ip netns exec $NS ibv_devinfo -v | grep -q '::ffff:$IP, RoCE v2'"
  check "the host lists neither the NIC nor rxe0" bash -c "! ip link show $NIC 2>/dev/null && test -z \"$(host_rdma)\""
}

case_ move
if run_pod nccl-0; then
  r=$(cri stop "$ID") && echo "    StopPodSandbox $(field ms <<<"$r") ms" || bad "StopPodSandbox: $r"
  home
  r=$(cri remove "$ID") && echo "    RemovePodSandbox $(field ms <<<"$r") ms" || bad "RemovePodSandbox: $r"
  check "the sandbox is gone" bash -c "! $PY $REPO/tests/cri/cri.py $D/containerd.sock list | grep -q $ID"
  home
fi

case_ netns-gone
if run_pod nccl-1; then
  ip netns delete "$NS"
  r=$(cri stop "$ID") || bad "StopPodSandbox after the netns was deleted: $r"
  r=$(cri remove "$ID") || bad "RemovePodSandbox after the netns was deleted: $r"
  check "the sandbox is gone" bash -c "! $PY $REPO/tests/cri/cri.py $D/containerd.sock list | grep -q $ID"
  home
fi

if ((FAIL)); then
  echo "--- plugin log (last 30 lines)"; tail -30 "$D/log/cri.log"
  echo "--- containerd log (last 20 lines)"; tail -20 "$D/containerd.log"
fi
echo "cri[exclusive]: $PASS passed, $FAIL failed"
((FAIL == 0))
