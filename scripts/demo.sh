#!/usr/bin/env bash
# The plugin's job, shown on built-in demos, as root on Debian 12:
#   1. the headline, in a QEMU VM with a real RDMA kernel stack in exclusive netns mode: a PCI
#      NIC with its own RDMA device (the VM's virtio NIC and a netns-capable soft-RoCE device
#      on it) is moved into a pod by its PCI address, as a NetworkAttachmentDefinition asks;
#      the pod sees the RDMA device and the RoCE v2 GID of its address, the host no longer sees
#      either; DEL gives both back;
#   2. shared netns mode, in the VM: a NIC without RDMA hardware, `rdma.softDevice: rxe`: the
#      NIC moves, a soft-RoCE device is made on it inside the pod;
#   3. on this machine (its kernel has no RDMA): a veth end plays the NIC: ADD, CHECK, DEL.
#
#   scripts/demo.sh            all three
#   scripts/demo.sh --no-vm    only part 3
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BIN=$REPO/target/release/rdma-host-device
AGENT=$REPO/target/release/rdma-host-device-agent

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
# Only the lines of a command's output that matter here, indented.
show() { printf '$ %s\n' "$1"; { bash -c "$1" 2>&1 || true; } | sed 's/^/  /'; }
# conf CONFIG: the network config as the NAD would carry it, on one line.
conf() { python3 -c 'import json,sys; print("  " + json.dumps(json.loads(sys.argv[1]), separators=(",", ":")))' "$1"; }

# cni VERB CONFIG: call the plugin as a runtime does (env + config on stdin).
cni() {
  local verb=$1 conf=$2
  echo "$conf" | CNI_COMMAND=$verb CNI_CONTAINERID=$CID CNI_NETNS=$NETNS CNI_IFNAME=net1 \
    CNI_PATH=$CNI_PATH "$BIN"
}
# summary RESULT: the CNI result in one line per interface and address.
summary() {
  python3 -c 'import json,sys
r = json.loads(sys.argv[1])
for i in r.get("interfaces", []):
    where = "in the pod (%s)" % i["sandbox"] if i.get("sandbox") else "host"
    print("  interface %s %s%s" % (i["name"], where, ", PCI " + i["pciID"] if i.get("pciID") else ""))
for ip in r.get("ips", []):
    print("  address   %s" % ip["address"])' "$1"
}

# ------------------------------------------------------------------ in the guest
if [[ ${RDMA_VM:-} == 1 ]]; then
  set +e
  WORK=$(mktemp -d)
  echo "{\"stateDir\":\"$WORK/state\",\"logDir\":\"$WORK\"}" >"$WORK/node.json"
  export RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json
  CNI_PATH=$WORK/bin:/usr/lib/cni
  mkdir -p "$WORK/bin" && ln -s "$BIN" "$WORK/bin/rdma-host-device"
  ip netns add pod
  NETNS=/var/run/netns/pod

  case ${1:-} in
  exclusive)
    NIC=$RDMA_VM_NIC PCI=$RDMA_VM_NIC_PCI CID=demo-exclusive
    modprobe rdma_rxe_netns
    rdma link add rxe0 type rxe_ns netdev "$NIC"
    say "1. The headline: a PCI NIC and its own RDMA device, moved into a pod together"
    echo "The node: $NIC at PCI $PCI, its RDMA device rxe0; the kernel in exclusive RDMA netns mode."
    show "rdma system show"
    show "rdma link show"
    CONF='{"cniVersion":"1.1.0","name":"rdma-rail0","type":"rdma-host-device","pciBusID":"'$PCI'",
           "rdma":{"isolation":"exclusive"},"logLevel":"warn",
           "ipam":{"type":"static","addresses":[{"address":"10.56.0.2/24"}]}}'
    say "ADD: the NAD selects the NIC by pciBusID $PCI (rdma.isolation exclusive)"
    conf "$CONF"
    RESULT=$(cni ADD "$CONF") || { echo "ADD failed: $RESULT"; exit 1; }
    summary "$RESULT"
    say "inside the pod: the NIC as net1, its RDMA device, the RoCE v2 GID of 10.56.0.2"
    show "ip netns exec pod ip -br addr show net1"
    show "ip netns exec pod rdma link show"
    show "ip netns exec pod ibv_devinfo -v | grep -E 'hca_id|port_state|::ffff:10.56.0.2'"
    say "on the host: neither the NIC nor its RDMA device"
    show "ip -br link show $NIC"
    show "rdma link show; echo \"(\$(rdma dev show | wc -l) RDMA devices on the host)\""
    say "DEL: both come home"
    cni DEL "$CONF" && echo "DEL ok"
    show "ip -br link show $NIC"
    show "rdma link show"
    show "ip netns exec pod rdma dev show | wc -l | sed 's/\$/ RDMA devices left in the pod/'"
    ;;
  soft)
    CID=demo-soft
    modprobe rdma_rxe
    ip link add eth-demo type veth peer eth-peer
    ip link set eth-peer up
    CONF='{"cniVersion":"1.1.0","name":"demo-rdma","type":"rdma-host-device","device":"eth-demo",
           "rdma":{"softDevice":"rxe"},"logLevel":"warn",
           "ipam":{"type":"static","addresses":[{"address":"10.57.0.2/24"}]}}'
    say "2. Shared RDMA netns mode, a NIC without RDMA hardware: rdma.softDevice rxe"
    show "rdma system show"
    say "ADD: the NIC (a veth end here) moves, a soft-RoCE device is made on it in the pod"
    RESULT=$(cni ADD "$CONF") || { echo "ADD failed: $RESULT"; exit 1; }
    summary "$RESULT"
    show "ip netns exec pod rdma link show"
    show "ip netns exec pod ibv_devinfo -v | grep -E 'hca_id|port_state|::ffff:10.57.0.2'"
    say "the operator's view"
    show "$AGENT inspect | sed -n '/^NIC/,\$p'"
    PREV=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c["prevResult"]=json.loads(sys.argv[2]); print(json.dumps(c))' "$CONF" "$RESULT")
    say "CHECK (the GIDs verified again from inside the pod), then DEL"
    cni CHECK "$PREV" && echo "CHECK ok"
    cni DEL "$CONF" && echo "DEL ok: the rxe device is deleted, the NIC is home"
    show "rdma link show | wc -l | sed 's/\$/ RDMA links left/'; ip -br link show eth-demo"
    ;;
  esac
  exit 0
fi

# ------------------------------------------------------------------ on this machine
VM=1
[[ ${1:-} == --no-vm ]] && VM=0
[[ $(id -u) == 0 ]] || { echo "demo: run as root (it creates network namespaces)" >&2; exit 1; }
"$HERE/setup.sh" --for demo
# The two programs it runs, nothing else (no tests), with cargo's progress: a first release
# build takes minutes (docs/testing.md has the figures).
(cd "$REPO" && cargo build --release --bin rdma-host-device --bin rdma-host-device-agent)

if [[ $VM == 1 ]]; then
  "$REPO/tests/vm/vm.sh" --prepare >/dev/null ||
    { echo "demo: preparing the VM failed: tests/vm/vm.sh's last words above say what and what to do." >&2
      echo "demo: 'tests/vm/vm.sh --print-uris' shows the kernel set it chooses and where apt fetches it;" >&2
      echo "demo: 'scripts/cold-check.sh kernel' checks it from an empty cache; scripts/demo.sh --no-vm skips the VM." >&2
      exit 1; }
  "$REPO/tests/vm/vm.sh" --exclusive "$HERE/demo.sh" exclusive
  "$REPO/tests/vm/vm.sh" "$HERE/demo.sh" soft
fi

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
{"cniVersion":"1.1.0","name":"demo","type":"rdma-host-device","device":"$NIC","mtu":9000,"logLevel":"warn",
 "ipam":{"type":"static","addresses":[{"address":"10.55.0.2/24","gateway":"10.55.0.1"}],
         "routes":[{"dst":"10.56.0.0/16"}]}}
EOF
)
say "3. On this machine (no RDMA in its kernel): $NIC, a veth end, plays the NIC"
show "ip -br link show $NIC"
say "ADD: $NIC into pod $POD as net1, MTU 9000, static IPAM"
RESULT=$(cni ADD "$CONF")
summary "$RESULT"
show "ip -n $POD -br addr show net1; ip -n $POD route"
show "ip -br link show $NIC"
PREV=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c["prevResult"]=json.loads(sys.argv[2]); print(json.dumps(c))' "$CONF" "$RESULT")
say "CHECK, then DEL: $NIC comes home under its own name and MTU"
cni CHECK "$PREV" && echo "CHECK ok"
cni DEL "$CONF" && echo "DEL ok"
show "ip -br link show $NIC; ip link show $NIC | grep -o 'mtu [0-9]*'"
