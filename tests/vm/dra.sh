#!/usr/bin/env bash
# tests/vm/dra.sh - the DRA driver's ResourceSlice for a NIC with a real RDMA device, INSIDE the
# RDMA VM (shared netns mode): soft-RoCE (rxe0) on the VM's virtio NIC (PCI 0000:00:05.0), the
# kube-apiserver stand-in (tests/kube/apiserver.py) in the guest, and
# `rdma-host-device-agent dra` publishing to it with the node configuration's defaults (every
# NIC backed by a device).
#
#   slice   the slice's one device is pci-0000-00-05-0 with the standard attributes
#           (pciBusID, pcieRoot), Multus' deviceID (the PCI address), and the RDMA device's
#           own: rdmaDevice rxe0, nodeGUID as sysfs prints it, transport RoCE, rdma true;
#           then `rdma link delete rxe0` takes them out of the slice within 5 s (an RDMA
#           change the agent sees from sysfs; no link notification comes with it)
#
#   tests/vm/dra.sh          (host) boots the VM and runs the case; needs target/debug binaries
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)

if [[ ${RDMA_VM:-} != 1 ]]; then
  exec "$HERE/vm.sh" --timeout 300 "$HERE/dra.sh" "$@"
fi

AGENT=${RHD_AGENT:-$REPO/target/debug/rdma-host-device-agent}
NIC=${RDMA_VM_NIC:-eth0} PCI=${RDMA_VM_NIC_PCI:-0000:00:05.0}
PASS=0 FAIL=0
ok()  { echo "  ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "  FAIL $*"; FAIL=$((FAIL + 1)); }
check() { local d=$1; shift; if out=$("$@" 2>&1); then ok "$d"; else bad "$d: $out"; fi; }
poll() {
  local d=$1 t=$2 end; shift 2; end=$((SECONDS + t))
  while ! out=$("$@" 2>&1); do
    if ((SECONDS >= end)); then bad "$d (after ${t}s): $out"; return 1; fi
    sleep 0.3
  done
  ok "$d"
}

W=$(mktemp -d /tmp/rhd-dra.XXXX)
echo "--- slice"
check "modprobe rdma_rxe" modprobe rdma_rxe
check "$NIC up, rxe0 on it" sh -c "ip link set $NIC up && rdma link add rxe0 type rxe netdev $NIC"
GUID=$(cat /sys/class/infiniband/rxe0/node_guid)
cat >"$W/node.json" <<EOF
{"stateDir": "$W/state", "logDir": "$W/log", "dra": {"resourceName": "rdma-host-device.io/rail"}}
EOF
mkfifo "$W/hold"
python3 "$REPO/tests/kube/apiserver.py" "$W/kapi" <"$W/hold" >"$W/kapi.json" 2>"$W/kapi.log" &
exec 9>"$W/hold" # the stand-in serves until this closes
# Under TCG, python3 and openssl's key generation take a while.
poll "the API server stand-in is up" 90 test -s "$W/kapi.json" || { cat "$W/kapi.log"; exit 1; }
URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$W/kapi.json")
RDMA_HOST_DEVICE_NODE_CONFIG=$W/node.json "$AGENT" dra --node-name vm \
  --kube-server "$URL" --kube-ca "$W/kapi/ca.crt" --kube-token "$W/kapi/token" 2>"$W/agent.log" &
agent=$!

# device ATTR: the slice's device attribute ATTR (its one value), or fail.
slice() {
  python3 - "$URL" "$W/kapi" "$@" <<'PY'
import json, ssl, sys, urllib.request
url, kapi, want = sys.argv[1], sys.argv[2], sys.argv[3:]
ctx = ssl.create_default_context(cafile=f"{kapi}/ca.crt")
req = urllib.request.Request(
    f"{url}/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=vm",
    headers={"Authorization": "Bearer " + open(f"{kapi}/token").read()})
items = json.load(urllib.request.urlopen(req, context=ctx))["items"]
assert len(items) == 1, f"{len(items)} slices"
devs = items[0]["spec"].get("devices") or []
assert [d["name"] for d in devs] == ["pci-0000-00-05-0"], [d["name"] for d in devs]
attrs = devs[0].get("attributes") or {}
for w in want:                      # KEY=VALUE must hold; !KEY must be absent
    if w.startswith("!"):
        assert w[1:] not in attrs, f"{w[1:]} still there: {attrs.get(w[1:])}"
        continue
    k, v = w.split("=", 1)
    a = attrs.get(k)
    assert a is not None, f"no {k}: {sorted(attrs)}"
    got = str(next(iter(a.values()))).lower()
    assert got == v.lower(), f"{k} is {got}, not {v}"
PY
}
poll "the slice has $PCI with its RDMA device's attributes" 15 slice \
  "resource.kubernetes.io/pciBusID=$PCI" "resource.kubernetes.io/pcieRoot=pci0000:00" \
  "k8s.cni.cncf.io/deviceID=$PCI" "k8s.cni.cncf.io/resourceName=rdma-host-device.io/rail" \
  "rdma-host-device.io/rdmaDevice=rxe0" "rdma-host-device.io/nodeGUID=$GUID" \
  "rdma-host-device.io/transport=RoCE" "rdma-host-device.io/rdma=true" \
  "rdma-host-device.io/ifName=$NIC"
check "rdma link delete rxe0" rdma link delete rxe0
poll "within 5 s the slice no longer names rxe0" 5 slice \
  "!rdma-host-device.io/rdmaDevice" "!rdma-host-device.io/nodeGUID" "rdma-host-device.io/rdma=false"
kill "$agent" 2>/dev/null
if ((FAIL)); then echo "  agent log:"; sed 's/^/    /' "$W/agent.log"; fi
exec 9>&-
echo "  checks: $PASS passed, $FAIL failed"
[[ $FAIL == 0 ]]
