#!/usr/bin/env bash
# The plugin's main job, shown on a built-in demo, as root on Debian 12:
#   1. on this machine: a veth end plays the host NIC; the plugin moves it into a pod netns
#      (ADD), we look at the pod side, CHECK it, and give it back (DEL);
#   2. in a QEMU VM with a real RDMA kernel stack: the same with soft-RoCE, where the pod sees
#      the RDMA device and its RoCE v2 GID for the pod's address.
#
#   scripts/demo.sh            both parts
#   scripts/demo.sh --no-vm    only the veth part
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BIN=$REPO/target/release/rdma-host-device

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

# cni VERB CONFIG: call the plugin as a runtime does (env + config on stdin).
cni() {
  local verb=$1 conf=$2
  printf '$ CNI_COMMAND=%s ... rdma-host-device <<< config\n' "$verb" >&2
  echo "$conf" | CNI_COMMAND=$verb CNI_CONTAINERID=$CID CNI_NETNS=$NETNS CNI_IFNAME=net1 \
    CNI_PATH=$CNI_PATH "$BIN"
}

# ------------------------------------------------------------------ RDMA part, in the guest
if [[ ${RDMA_VM:-} == 1 ]]; then
  set +e
  modprobe rdma_rxe
  CID=demo-rdma NETNS=/var/run/netns/pod CNI_PATH=$(mktemp -d):/usr/lib/cni
  ln -s "$BIN" "${CNI_PATH%%:*}/rdma-host-device"
  ip netns add pod
  ip link add eth-demo type veth peer eth-peer
  ip link set eth-peer up
  CONF='{"cniVersion":"1.1.0","name":"demo-rdma","type":"rdma-host-device","device":"eth-demo",
         "rdma":{"softDevice":"rxe"},"logLevel":"warn",
         "ipam":{"type":"static","addresses":[{"address":"10.56.0.2/24"}]}}'
  say "RDMA netns mode of this kernel"
  run rdma system show
  say "ADD with softDevice rxe: the NIC moves into the pod, an rxe device is made on it there"
  RESULT=$(cni ADD "$CONF") || { echo "$RESULT"; exit 1; }
  echo "$RESULT"
  say "inside the pod: the RDMA device and its GIDs, as verbs sees them"
  run ip netns exec pod rdma link show
  run ip netns exec pod ibv_devinfo -v | grep -E 'hca_id|state|GID\['
  say "the operator's view"
  run "$BIN" inspect
  PREV=$(echo "$CONF" | python3 -c 'import json,sys; c=json.load(sys.stdin); c["prevResult"]=json.loads(sys.argv[1]); print(json.dumps(c))' "$RESULT")
  say "CHECK: the GIDs are verified again from inside the pod"
  cni CHECK "$PREV" && echo "CHECK ok (exit 0, nothing on stdout)"
  say "DEL: the rxe device is deleted, the NIC goes home"
  cni DEL "$CONF" && echo "DEL ok (exit 0)"
  run rdma link show
  run ip link show eth-demo
  exit 0
fi

# ------------------------------------------------------------------ host part
VM=1
[[ ${1:-} == --no-vm ]] && VM=0
[[ $(id -u) == 0 ]] || { echo "demo: run as root (it creates network namespaces)" >&2; exit 1; }
"$HERE/setup.sh"
say "building the plugin (release)"
(cd "$REPO" && cargo build --release -q)

POD=rhd-demo-pod NIC=rhd-demo0
CID=demo-$$ NETNS=/var/run/netns/$POD
BINDIR=$(mktemp -d)
CNI_PATH=$BINDIR:/usr/lib/cni
ln -s "$BIN" "$BINDIR/rdma-host-device"
cleanup() {
  ip netns del "$POD" 2>/dev/null || true
  ip link del "$NIC" 2>/dev/null || true
  rm -rf "$BINDIR"
}
trap cleanup EXIT
cleanup
# Node settings (where state and logs go) belong to the node, not to the network config.
mkdir -p "$BINDIR"
echo "{\"stateDir\":\"$BINDIR/state\",\"logDir\":\"$BINDIR/log\"}" >"$BINDIR/node.json"
export RDMA_HOST_DEVICE_NODE_CONFIG=$BINDIR/node.json
ip netns add "$POD"
ip link add "$NIC" mtu 1500 type veth peer "$NIC-peer"
ip link set "$NIC-peer" up

CONF=$(cat <<EOF
{"cniVersion":"1.1.0","name":"demo","type":"rdma-host-device","device":"$NIC","mtu":9000,
 "ipam":{"type":"static","addresses":[{"address":"10.55.0.2/24","gateway":"10.55.0.1"}],
         "routes":[{"dst":"10.56.0.0/16"}]}}
EOF
)
say "the host NIC before ADD"
run ip link show "$NIC"
say "ADD: move $NIC into pod $POD as net1, MTU 9000, static IPAM"
RESULT=$(cni ADD "$CONF")
echo "$RESULT" | python3 -m json.tool
say "the pod side"
run ip -n "$POD" addr show net1
run ip -n "$POD" route
say "the host side: $NIC is gone from the host"
run ip link show "$NIC" || true
PREV=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c["prevResult"]=json.loads(sys.argv[2]); print(json.dumps(c))' "$CONF" "$RESULT")
say "CHECK"
cni CHECK "$PREV" && echo "CHECK ok (exit 0, nothing on stdout)"
say "DEL: $NIC comes home under its own name and MTU"
cni DEL "$CONF" && echo "DEL ok (exit 0)"
run ip link show "$NIC"

if [[ $VM == 1 ]]; then
  say "RDMA part: booting a Debian kernel with soft-RoCE in QEMU (first run downloads and prepares it)"
  "$REPO/tests/vm/vm.sh" "$HERE/demo.sh"
fi
