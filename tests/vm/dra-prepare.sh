#!/usr/bin/env bash
# tests/vm/dra-prepare.sh - the DRA driver's prepare with a real RDMA device, INSIDE the RDMA VM in shared
# netns mode (tests/vm/run.sh boots it: group dra-prepare). The VM's virtio NIC (PCI 0000:00:05.0) gets
# a stock rxe device; tests/kube/apiserver.py (the kube-apiserver stand-in) holds a claim the
# test seeds as a user and the scheduler would (curl: create, then PUT the allocation of device
# pci-0000-00-05-0 and reservedFor on /status); tests/dra/kubelet.py (the kubelet's side) finds
# `rdma-host-device-agent dra --cdi-spec` in the plugin registry and calls NodePrepareResources.
#
#   prepare   the answer names rxe0's uverbs char device as its CDI ID, and the spec the driver
#             brought up to date resolves it: podman (which reads CDI) given only the IDs the
#             kubelet got runs a container, as uid 1000, with uverbs0 and rdma_cm, `ulimit -l`
#             at node.json's memlock (the hook ran) and ibv_devinfo listing rxe0
#   restart   the driver killed and started again with no API server: unprepare from its
#             checkpoint alone, and the claim is gone from it
#
# Needs (prepared on the host by run.sh): target/vm/rdma-tools.tar, the venv at $RHD_VENV.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh dra-prepare" >&2
  exit 2
fi
BIN=${RHD_BIN:-$REPO/target/debug/rdma-host-device}
AGENT=${RHD_AGENT:-$(dirname "$BIN")/rdma-host-device-agent}
PCI=${RDMA_VM_NIC_PCI:-0000:00:05.0} NIC=${RDMA_VM_NIC:-eth0}
DEVICE=pci-${PCI//[:.]/-}
PY=${RHD_VENV:-/root/.cache/rhd-venv}/bin/python
PASS=0 FAIL=0
ok()  { echo "  ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "  FAIL $*"; FAIL=$((FAIL + 1)); }
case_() { echo "--- $*"; }
check() { local d=$1; shift; if out=$("$@" 2>&1); then ok "$d"; else bad "$d: $out"; fi; }
has_all() { local text=$1; shift; for p in "$@"; do grep -qE -- "$p" <<<"$text" || { echo "no /$p/"; return 1; }; done; }
js() { "$PY" -c "import json,sys; v=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

D=$(mktemp -d)
mount -t tmpfs tmpfs "$D"
mkdir -p "$D/log" "$D/kubelet" "$D/api" /var/run/cdi
echo "{\"stateDir\":\"$D/rhd-state\",\"logDir\":\"$D/log\",\"memlock\":\"1073741824\",\"cdiHook\":\"$BIN\"}" >"$D/node.json"
export RDMA_HOST_DEVICE_NODE_CONFIG=$D/node.json
modprobe rdma_rxe && modprobe rdma_ucm || { echo "modprobe rdma_rxe rdma_ucm failed"; exit 1; }
rdma link add rxe0 type rxe netdev "$NIC" || { echo "rdma link add rxe0 failed"; exit 1; }
ip link set "$NIC" up

# The API server stand-in: serves while its stdin is open.
mkfifo "$D/api.in"
"$PY" "$REPO/tests/kube/apiserver.py" "$D/api" <"$D/api.in" >"$D/api.out" 2>"$D/api.log" &
APIPID=$!
exec 7>"$D/api.in"
for _ in $(seq 100); do [[ -s $D/api.out ]] && break; sleep 0.1; done
URL=$(js 'v["url"]' <"$D/api.out")
TOKEN=$(cat "$D/api/token")
rest() {  # METHOD PATH BODY
  curl -sS --fail-with-body -X "$1" --cacert "$D/api/ca.crt" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' --data-binary "$3" "$URL$2"
}
BASE=/apis/resource.k8s.io/v1/namespaces/team/resourceclaims
made=$(rest POST "$BASE" '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"namespace":"team","name":"rail"},"spec":{"devices":{"requests":[{"name":"nic","exactly":{"deviceClassName":"rdma-nic"}}]}}}')
UID_=$(js 'v["metadata"]["uid"]' <<<"$made")
status=$(js 'json.dumps(dict(v, status={"allocation": {"devices": {"results": [{"request": "nic", "driver": "rdma-host-device.io", "pool": "vm", "device": "'"$DEVICE"'"}]}}, "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "pod-vm"}]}))' <<<"$made")
check "the claim is created and allocated through the API" rest PUT "$BASE/rail/status" "$status"

driver() {
  "$AGENT" dra --node-name vm --kubelet-dir "$D/kubelet" --cdi-spec /var/run/cdi/rdma-host-device.json \
    --kube-server "$URL" --kube-ca "$D/api/ca.crt" --kube-token "$D/api/token" \
    2>>"$D/dra.log" &
  DRA=$!
}
export RHD_REG_STUBS=$REPO/target/tmp/reg-stubs RHD_DRA_STUBS=$REPO/target/tmp/dra-stubs
coproc KUBELET { "$PY" "$REPO/tests/dra/kubelet.py" "$D/kubelet"; }
ask() { echo "$1" >&"${KUBELET[1]}"; local l; read -r -t 60 l <&"${KUBELET[0]}"; echo "$l"; }
read -r -t 60 first <&"${KUBELET[0]}"
check "the kubelet stand-in watches the registry" grep -q watching <<<"$first"
driver

case_ prepare
reg=$(ask '{"cmd": "registered", "count": 1, "timeout": 20}')
check "registered: $reg" test "$(js 'v.get("verdict")' <<<"$reg")" = registered
r=$(ask '{"cmd": "prepare", "driver": "rdma-host-device.io", "claims": [{"namespace": "team", "name": "rail", "uid": "'"$UID_"'"}]}')
echo "    prepare: $r"
ids=$(js '" ".join(v["claims"]["'"$UID_"'"]["devices"][0]["cdi_device_ids"]) if v["claims"]["'"$UID_"'"]["devices"] else v' <<<"$r")
check "the answer's CDI ID is rxe0's uverbs char device" test "$ids" = rdma-host-device.io/rdma=uverbs0
check "the spec the driver refreshed names uverbs0 and the memlock hook" bash -c \
  "grep -q '\"uverbs0\"' /var/run/cdi/rdma-host-device.json && grep -q memlock-hook /var/run/cdi/rdma-host-device.json"
ROOTFS=$D/tools-root
mkdir -p "$ROOTFS" "$D/oci"
tar -xf "$REPO/target/vm/rdma-tools.tar" -C "$D/oci"
for b in "$D"/oci/blobs/sha256/*; do tar -tzf "$b" >/dev/null 2>&1 && tar -xzf "$b" -C "$ROOTFS"; done
devs=()
for id in $ids; do devs+=(--device "$id"); done
seen=$(podman --root="$D/podman/storage" --runroot="$D/podman/run" --tmpdir="$D/podman/tmp" \
  --cgroup-manager=cgroupfs --events-backend=file run --rm --network=host --user 1000:1000 \
  "${devs[@]}" --rootfs "$ROOTFS" /bin/sh -c 'echo "memlock=$(ulimit -l)"; ls /dev/infiniband 2>&1; ibv_devinfo 2>&1' 2>&1)
echo "$seen" | sed 's/^/    | /'
check "a container given the prepared CDI IDs has uverbs0, rdma_cm, memlock 1 GiB and rxe0" \
  has_all "$seen" '^memlock=1048576$' '^uverbs0$' '^rdma_cm$' 'hca_id:.rxe0'
again=$(ask '{"cmd": "prepare", "driver": "rdma-host-device.io", "claims": [{"namespace": "team", "name": "rail", "uid": "'"$UID_"'"}]}')
check "prepare again answers the same" test "$(js 'v["claims"]' <<<"$again")" = "$(js 'v["claims"]' <<<"$r")"

case_ restart
kill "$DRA"; wait "$DRA" 2>/dev/null
kill "$APIPID"; wait "$APIPID" 2>/dev/null  # the API server is gone
driver
reg=$(ask '{"cmd": "registered", "count": 2, "timeout": 20}')
check "registered again" test "$(js 'v.get("verdict")' <<<"$reg")" = registered
u=$(ask '{"cmd": "unprepare", "driver": "rdma-host-device.io", "claims": [{"namespace": "team", "name": "rail", "uid": "'"$UID_"'"}]}')
check "unprepare from the checkpoint alone: $u" test "$(js 'v["claims"]["'"$UID_"'"]["error"]' <<<"$u")" = ""
check "the checkpoint no longer holds the claim" bash -c "! grep -q '$UID_' $D/rhd-state/dra/checkpoint.json"
kill "$DRA"; echo '{"cmd": "quit"}' >&"${KUBELET[1]}"
rm -f /var/run/cdi/rdma-host-device.json

if ((FAIL)); then
  echo "--- driver log"; tail -30 "$D/dra.log"
  echo "--- apiserver log (last 10 lines)"; tail -10 "$D/api.log"
fi
echo "dra[shared]: $PASS passed, $FAIL failed"
((FAIL == 0))
