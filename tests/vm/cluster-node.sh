#!/usr/bin/env bash
# tests/vm/cluster-node.sh - in the RDMA VM (exclusive mode, rdma_rxe_netns): the node of the
# cluster tests/vm/cluster.sh runs on the host (group `cluster`), then, through it, with conf/k8s
# as shipped (node.json naming this node's NIC by PCI address, as an operator would):
#
#   device-plugin  conf/k8s/daemonset.yaml; an unprivileged pod (uid 1000, no capabilities)
#                  asking for rdma-host-device.io/rail with
#                  conf/multus/rdma-rail-device-plugin.yaml's NAD (host-local for whereabouts)
#                  gets eth0 (0000:00:05.0) and rxe0: Multus' network-status has the
#                  device-info, the env names the NIC and rxe0,
#                  /dev/infiniband holds uverbs (no rdma_cm: rdma_ucm is not loaded yet, so
#                  devtmpfs removes the directory while rxe0 moves), ibv_devinfo lists the RoCE v2 GID
#                  of the pod's address, `ulimit -l` is node.json's memlock in the main process
#                  and in a `kubectl exec` (the NRI plugin under containerd 2.4); a second pod
#                  stays Pending; on delete eth0 and rxe0 are home
#   fail-closed    conf/k8s/fail-closed.yaml with containerd's NRI validator: a rail pod created
#                  while the NRI plugin is killed again and again waits (its event says why),
#                  then starts with the node's memlock in kubectl exec
#   fail-closed-hook  node.json memlockFailClosed (and the device plugin's CDI names, which it
#                  needs), no validator: a rail pod (restartPolicy
#                  Always) created while the NRI plugin is killed again and again is refused by
#                  the CDI spec's memlock hook (its event says why), then starts with the node's
#                  memlock in kubectl exec (run last: the DaemonSets restart with it)
#   dra            conf/k8s/dra.yaml, dra-claims.yaml's one-rail template and NAD rail-0 as
#                  shipped: the scheduler allocates the NIC, the kubelet prepares it through our
#                  driver, the CNI takes it; the same checks in the pod; the pod's
#                  allocatedResourcesStatus Healthy, Unhealthy with our message while rxe0 is
#                  deleted in the pod's netns, Healthy when it is back there; home on delete
#
# Env (from tests/vm/cluster.sh): RHD_CLUSTER_DIR (the cluster's DIR), RHD_CLUSTER_IMAGE (the
# DaemonSet's image as an OCI archive).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh cluster" >&2
  exit 2
fi
D=${RHD_CLUSTER_DIR:?} IMAGE_TAR=${RHD_CLUSTER_IMAGE:?}
# shellcheck disable=SC1091
. "$D/env"
NIC=${RDMA_VM_NIC:-eth0} PCI=${RDMA_VM_NIC_PCI:-0000:00:05.0}
PASS=0 FAIL=0
ok() { echo "  ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "  FAIL $*"; FAIL=$((FAIL + 1)); }
case_() { echo "--- $*"; }
up() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(up)" 'BEGIN{printf "%.1f", b-a}'; }
kc() { "$D/bin/kubectl" --kubeconfig "$D/admin.kubeconfig" --request-timeout 60s "$@"; }
# wait_until SECONDS CMD...: poll every second (a kubectl call alone takes 1-2 s under TCG)
wait_until() {
  local end=$(($(date +%s) + $1))
  shift
  while (($(date +%s) < end)); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}
finish() {
  echo "=== cluster: $PASS passed, $FAIL failed"
  if ((FAIL)); then
    echo "--- pods"; kc get pods -A -o wide 2>&1
    echo "--- events"; kc get events -A --sort-by=.lastTimestamp 2>&1 | tail -30
    echo "--- kubelet (last 30 lines)"; tail -30 "$D/logs/kubelet.log"
    for c in device-plugin nri; do
      echo "--- ds/rdma-host-device -c $c"; kc -n kube-system logs ds/rdma-host-device -c "$c" 2>&1 | tail -20
    done
    echo "--- ds/rdma-host-device-dra"; kc -n kube-system logs ds/rdma-host-device-dra 2>&1 | tail -20
  fi
  [[ $FAIL == 0 ]]
}

# ---- the node: rxe0 on the NIC, first without rdma_ucm (no /dev/infiniband/rdma_cm: then
# /dev/infiniband empties and devtmpfs removes the directory whenever the only uverbs node goes
# with rxe0 into a pod; the DaemonSet reads the node's /dev, not that directory, so the NRI
# plugin and the CDI spec still see uverbs0 once it is back; the device plugin's pod proves it),
# rdma_ucm loaded before the DRA path (as rdma-core loads it on most RDMA nodes), the node's
# address (the kubelet wants it on an interface),
# containerd's directory on a tmpfs (its overlayfs snapshotter cannot stack on the guest's
# overlay root), then containerd and the kubelet as the host's node runs them
T0=$(up)
modprobe -r rdma_ucm 2>/dev/null
modprobe rdma_rxe_netns && rdma link add rxe0 type rxe_ns netdev "$NIC" && ip link set "$NIC" up ||
  { echo "rxe0 on $NIC failed"; exit 1; }
ip addr add "$NODE_IP/32" dev lo
# Mounts shared, as systemd leaves them on a node: the kubelet's HostToContainer volumes (the
# DaemonSet's /run/netns) refuse a private source.
mount --make-rshared /
mkdir -p /var/lib/containerd && mount -t tmpfs tmpfs /var/lib/containerd
"$REPO/tests/cluster/cluster.sh" node "$D" || { FAIL=1; finish; exit 1; }
ok "node $NODE Ready $(since "$T0") s after the guest's job started"
ctr() { "$D/bin/ctr" --address /run/rhd-k8s/containerd.sock -n k8s.io "$@"; }
for a in "$IMAGE_TAR" "$REPO/target/vm/rdma-tools.tar"; do
  ctr images import "$a" >/dev/null || bad "ctr images import $a"
done

# ---- the DaemonSet, node.json naming the NIC by PCI address (never the uplink)
kc label node "$NODE" feature.node.kubernetes.io/rdma.capable=true >/dev/null
python3 - "$REPO/conf/k8s/daemonset.yaml" "$PCI" <<'EOF' | kc apply -f - >/dev/null || bad "apply daemonset.yaml"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "ConfigMap" and "node.json" in d.get("data", {}):
        n = json.loads(d["data"]["node.json"])
        sel = {"pciAddresses": [sys.argv[2]]}
        n["allowedNics"] = sel
        n["devicePlugin"]["pools"][0]["selectors"] = sel
        n["dra"]["nics"] = sel
        d["data"]["node.json"] = json.dumps(n)
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
EOF
ds_ready() { [[ $(kc -n kube-system get ds "$1" -o jsonpath='{.status.numberReady}') == 1 ]]; }
t=$(up)
if wait_until 300 ds_ready rdma-host-device; then ok "DaemonSet rdma-host-device ready in $(since "$t") s"
else bad "DaemonSet rdma-host-device not ready"; finish; exit 1; fi
MEMLOCK=$(python3 -c 'import json; print(json.load(open("/etc/rdma-host-device/node.json"))["memlock"])')

# ---- checks in a running pod NAME whose net1 is the NIC
# ulimit -l as the shell prints it for node.json's memlock ("unlimited" or bytes)
want_l() { if [[ $MEMLOCK == unlimited ]]; then echo unlimited; else echo $((MEMLOCK / 1024)); fi; }
in_pod() { kc exec "$1" -- "${@:2}"; }
# pod_checks NAME DEVINFO: DEVINFO=1 when the NAD asks for the device-info (CNIDeviceInfoFile)
pod_checks() {
  local pod=$1 want_di=$2 st ip di devs gids l1 l2
  st=$(kc get pod "$pod" -o jsonpath='{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}')
  ip=$(python3 -c 'import json,sys; n=[s for s in json.loads(sys.argv[1]) if s.get("interface")=="net1"]; print(n[0]["ips"][0] if n else "")' "$st")
  di=$(python3 -c 'import json,sys; n=[s for s in json.loads(sys.argv[1]) if s.get("interface")=="net1"]; p=(n[0].get("device-info") or {}).get("pci", {}) if n else {}; print(p.get("pci-address",""), p.get("rdma-device",""))' "$st")
  if [[ -n $ip && ($want_di == 0 || $di == "$PCI rxe0") ]]; then ok "$pod: network-status net1 $ip, device-info '$di'"
  else bad "$pod: network-status: $st"; fi
  devs=$(in_pod "$pod" ls /dev/infiniband | sort | xargs)
  if [[ $devs == "$WANT_DEVS" ]]; then ok "$pod: /dev/infiniband: $devs"; else bad "$pod: /dev/infiniband: '$devs'"; fi
  # the GID table fills asynchronously after the address: poll
  gid_ok() { in_pod "$pod" ibv_devinfo -v -d rxe0 | grep -E "::ffff:$ip, RoCE v2"; }
  if gids=$(wait_until 20 gid_ok && gid_ok); then ok "$pod: ibv_devinfo (uid 1000): rxe0 $(xargs <<<"$gids")"
  else bad "$pod: no RoCE v2 GID for $ip: $(in_pod "$pod" ibv_devinfo -v 2>&1 | grep -E 'hca_id|state|GID' | xargs)"; fi
  l1=$(in_pod "$pod" cat /proc/1/limits | sed -n 's/^Max locked memory *\([^ ]*\).*/\1/p')
  l2=$(in_pod "$pod" sh -c 'ulimit -l')
  if [[ $l1 == "$MEMLOCK" || ($MEMLOCK == unlimited && $l1 == unlimited) ]]; then ok "$pod: memlock of the main process $l1"
  else bad "$pod: memlock of the main process $l1, node.json says $MEMLOCK"; fi
  if [[ $l2 == "$(want_l)" ]]; then ok "$pod: ulimit -l in kubectl exec: $l2"
  else bad "$pod: ulimit -l in kubectl exec: $l2, node.json says $MEMLOCK"; fi
  if ! ip link show "$NIC" >/dev/null 2>&1 && ! rdma dev show rxe0 >/dev/null 2>&1; then
    ok "$pod: $NIC and rxe0 left the node's namespace"
  else bad "$pod: $NIC or rxe0 still in the node's namespace"; fi
}
home() {
  local what=$1
  nic_home() { [[ $(ip -j link show "$NIC" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["mtu"])') == 1500 ]]; }
  if wait_until 60 nic_home; then ok "$what: $NIC home with MTU 1500"; else bad "$what: $NIC not home: $(ip -br link)"; fi
  if wait_until 30 rdma dev show rxe0; then ok "$what: rxe0 home"; else bad "$what: rxe0 not home: $(rdma dev)"; fi
}
pod_json() { # NAME NETWORK RESOURCES CLAIMS
  python3 - "$@" <<'EOF'
import json, sys
name, net, res, claims = sys.argv[1:5]
print(json.dumps({"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": name, "namespace": "default", "annotations": {
    "k8s.v1.cni.cncf.io/networks": json.dumps([{"name": net, "interface": "net1"}])}},
  "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
    "resourceClaims": json.loads(claims),
    "containers": [{"name": "c", "image": "localhost/rhd-rdma-tools:test",
      "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"], "resources": json.loads(res),
      "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}))
EOF
}
ready() { [[ $(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].ready}') == true ]]; }

# gid_agrees POD IP IDX: ibv_devinfo -v and the GID table in sysfs, read in POD's container,
# agree that index IDX holds the RoCE v2 GID of IP
gid_agrees() {
  local pod=$1 ip=$2 genv=$3 sysgid systype want_gid
  if [[ -n $genv ]] && in_pod "$pod" ibv_devinfo -v -d rxe0 | grep -E "GID\[ *$genv\]:[[:space:]]*::ffff:$ip, RoCE v2" >/dev/null; then
    ok "$pod: ibv_devinfo -v: GID[$genv] is ::ffff:$ip, RoCE v2"
  else bad "$pod: ibv_devinfo -v has no RoCE v2 GID of $ip at index '$genv': $(in_pod "$pod" ibv_devinfo -v -d rxe0 | grep GID | xargs)"; fi
  sysgid=$(in_pod "$pod" cat "/sys/class/infiniband/rxe0/ports/1/gids/$genv" 2>/dev/null)
  systype=$(in_pod "$pod" cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$genv" 2>/dev/null)
  want_gid=$(python3 -c 'import ipaddress,sys; b=ipaddress.IPv6Address("::ffff:"+sys.argv[1]).packed.hex(); print(":".join(b[i:i+4] for i in range(0,32,4)))' "$ip")
  if [[ $sysgid == "$want_gid" && $systype == "RoCE v2" ]]; then ok "$pod: sysfs gids/$genv $sysgid, types/$genv $systype"
  else bad "$pod: sysfs gids/$genv '$sysgid' types/$genv '$systype' (want $want_gid, RoCE v2)"; fi
}
# The device plugin's per-NIC env (node.json's devicePlugin.nicEnv, as shipped; issue 38 item
# 2): Allocate named rdma-host-device.io/nic=$PCI and wrote generation 1 (NCCL_IB_HCA) before
# the sandbox; ADD rewrote it with the GID index it verified; the container, created after ADD,
# has NCCL_IB_GID_INDEX, and ibv_devinfo -v and sysfs in it agree with it.
NIC_SPEC=/var/run/cdi/rdma-host-device.io_nic_$PCI.json
spec_env() { python3 -c 'import json,sys; print(*json.load(open(sys.argv[1]))["devices"][0]["containerEdits"]["env"])' "$NIC_SPEC" 2>&1; }
dp_env_checks() {
  local st ip env hca genv spec
  st=$(kc get pod dp-a -o jsonpath='{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}')
  ip=$(python3 -c 'import json,sys; n=[s for s in json.loads(sys.argv[1]) if s.get("interface")=="net1"]; print(n[0]["ips"][0] if n else "")' "$st")
  env=$(in_pod dp-a env | grep -E '^(NCCL_|RDMA_HOST_DEVICE_METADATA)' | sort | xargs)
  hca=$(in_pod dp-a sh -c 'echo "$NCCL_IB_HCA"')
  genv=$(in_pod dp-a sh -c 'echo "$NCCL_IB_GID_INDEX"')
  spec=$(spec_env)
  if [[ $hca == "=rxe0" && -n $genv && $env == *RDMA_HOST_DEVICE_METADATA_GENERATION=2* ]]; then ok "dp-a: env $env"
  else bad "dp-a: env '$env'; $NIC_SPEC: $spec"; fi
  if [[ $spec == "RDMA_HOST_DEVICE_METADATA_GENERATION=2 NCCL_IB_HCA==rxe0 NCCL_IB_GID_INDEX=$genv" ]]; then ok "dp-a: $NIC_SPEC: $spec"
  else bad "dp-a: $NIC_SPEC: '$spec'"; fi
  gid_agrees dp-a "$ip" "$genv"
}

# ---- the device plugin's path, on a node without rdma_cm
case_ "device-plugin"
WANT_DEVS=uverbs0
t=$(up)
alloc() { [[ $(kc get node "$NODE" -o jsonpath='{.status.allocatable.rdma-host-device\.io/rail}') == 1 ]]; }
if wait_until 120 alloc; then ok "the node offers rdma-host-device.io/rail: 1 ($(since "$t") s)"
else bad "the node does not offer rdma-host-device.io/rail"; fi
python3 - "$REPO/conf/multus/rdma-rail-device-plugin.yaml" <<'EOF' | kc apply -f - >/dev/null || bad "apply the NAD rdma-rail"
import json, sys, yaml
nad = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d)
c = json.loads(nad["spec"]["config"])
c["ipam"] = {"type": "host-local", "ranges": [[{"subnet": c["ipam"]["range"]}]]}  # no whereabouts here
nad["spec"]["config"] = json.dumps(c)
print(json.dumps(nad))
EOF
t=$(up)
pod_json dp-a rdma-rail '{"limits": {"rdma-host-device.io/rail": "1"}}' '[]' | kc apply -f - >/dev/null
if wait_until 240 ready dp-a; then
  ok "dp-a Ready $(since "$t") s after apply"
  env=$(in_pod dp-a env)
  if grep -qx "RDMA_HOST_DEVICE_RAIL_RDMA=rxe0" <<<"$env" && grep -q "^RDMA_HOST_DEVICE_RAIL_IDS=." <<<"$env"; then
    ok "dp-a: env $(grep ^RDMA_HOST_DEVICE_RAIL <<<"$env" | xargs)"
  else bad "dp-a: env: $(grep ^RDMA <<<"$env" | xargs)"; fi
  pod_checks dp-a 1
  dp_env_checks
else bad "dp-a not Ready"; fi
pod_json dp-b rdma-rail '{"limits": {"rdma-host-device.io/rail": "1"}}' '[]' | kc apply -f - >/dev/null
sleep 10
phase=$(kc get pod dp-b -o jsonpath='{.status.phase}')
if [[ $phase == Pending ]]; then ok "dp-b, asking for the NIC dp-a holds, is Pending"; else bad "dp-b is $phase"; fi
kc delete pod dp-a dp-b --wait=true --timeout=120s >/dev/null || bad "delete dp-a dp-b"
home "device-plugin"
gen1=$(spec_env)
if [[ $gen1 == "RDMA_HOST_DEVICE_METADATA_GENERATION=1 NCCL_IB_HCA==rxe0" ]]; then ok "after DEL: $NIC_SPEC back to generation 1: $gen1"
else bad "after DEL: $NIC_SPEC: '$gen1'"; fi
# What the DaemonSet's containers see of the node's /dev/infiniband after devtmpfs removed it
# (rxe0 went into dp-a and came back; dp-a's exec'd memlock above is the NRI plugin's view then):
# a mount of the directory itself would show the removed one for good, the CDI spec would lose
# uverbs0 and a DRA pod could not start
dev_seen=$(kc -n kube-system exec ds/rdma-host-device -c nri -- ls /host/dev/infiniband | xargs)
if [[ $dev_seen == *uverbs0* ]]; then ok "the nri container still sees the node's /dev/infiniband: $dev_seen"
else bad "the nri container's /host/dev/infiniband: '$dev_seen'"; fi
if kc -n kube-system exec ds/rdma-host-device -c node-report -- cat /var/run/cdi/rdma-host-device.json | grep '"name": *"uverbs0"' >/dev/null; then
  ok "the CDI spec still names uverbs0"
else bad "the CDI spec lost uverbs0: $(kc -n kube-system exec ds/rdma-host-device -c node-report -- cat /var/run/cdi/rdma-host-device.json | xargs)"; fi

# ---- fail-closed (docs/deploy.md): containerd's NRI validator is on (cluster.sh), and
# conf/k8s/fail-closed.yaml marks rail pods as needing our plugin. With the plugin killed again
# and again (a crash loop, an upgrade), a rail pod does not start without it; once it is back,
# the pod starts and its exec'd processes have the node's memlock.
case_ "fail-closed"
kc apply -f "$REPO/conf/k8s/fail-closed.yaml" >/dev/null || bad "apply fail-closed.yaml"
marked() {
  pod_json fc-probe rdma-rail '{"limits": {"rdma-host-device.io/rail": "1"}}' '[]' |
    kc create --dry-run=server -o json -f - | grep '"required-plugins.noderesource.dev/pod": "\[\\"rdma-host-device\\"\]"' >/dev/null
}
if wait_until 60 marked; then ok "the policy marks a rail pod as needing the NRI plugin"
else bad "the policy does not mark a rail pod"; fi
# the DaemonSet's NRI plugin, by its command line
nri_kill() {
  local p a
  for p in /proc/[0-9]*; do
    { mapfile -d '' a <"$p/cmdline"; } 2>/dev/null || continue
    [[ ${a[0]:-} == /usr/local/bin/rdma-host-device-agent && ${a[1]:-} == nri ]] &&
      kill -KILL "${p#/proc/}" 2>/dev/null && echo x
  done
}
KILLS=/tmp/nri-kills KILLING=/tmp/nri-killing
# nri_back POD: stop killing the NRI plugin; POD must then start, its kubectl exec'd processes
# with the node's memlock; then it is deleted.
nri_back() {
  local pod=$1 l2
  rm -f "$KILLING"
  wait "$KILLER"
  echo "  ..   the NRI plugin killed $(wc -l <"$KILLS") time(s) in $(since "$t") s"
  if wait_until 300 ready "$pod"; then
    ok "$pod Ready $(since "$t") s after apply, once the NRI plugin was back"
    l2=$(in_pod "$pod" sh -c 'ulimit -l')
    if [[ $l2 == "$(want_l)" ]]; then ok "$pod: ulimit -l in kubectl exec: $l2"
    else bad "$pod: ulimit -l in kubectl exec: $l2, node.json says $MEMLOCK"; fi
  else bad "$pod not Ready after the NRI plugin came back"; fi
  kc delete pod "$pod" --wait=true --timeout=120s >/dev/null || bad "delete $pod"
}
: >"$KILLS"
touch "$KILLING"
# Killed until fc-a has been refused (at most 150 s): under TCG a pod's sandbox (ADD, Multus)
# can take longer than a fixed window, and a container created after the window rightly gets
# the plugin and its memlock, which would prove nothing about the refusal.
(end=$(($(date +%s) + 150)); while [[ -e $KILLING ]] && (($(date +%s) < end)); do nri_kill >>"$KILLS"; sleep 0.2; done) &
KILLER=$!
t=$(up)
pod_json fc-a rdma-rail '{"limits": {"rdma-host-device.io/rail": "1"}}' '[]' | kc apply -f - >/dev/null
refused() {
  kc get events --field-selector involvedObject.name=fc-a -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' |
    grep -q 'required plugin "rdma-host-device" not present'
}
if wait_until 140 refused; then ok "fc-a refused while the NRI plugin is away: required plugin \"rdma-host-device\" not present"
else bad "fc-a: no refusal in its events: $(kc get events --field-selector involvedObject.name=fc-a 2>&1 | tail -5)"; fi
if ready fc-a; then bad "fc-a started while the NRI plugin was being killed"; fi
nri_back fc-a
kc delete -f "$REPO/conf/k8s/fail-closed.yaml" >/dev/null || bad "delete fail-closed.yaml"
home "fail-closed"

# ---- the DRA path, on a node with rdma_cm
case_ "dra"
modprobe rdma_ucm || bad "modprobe rdma_ucm"
WANT_DEVS="rdma_cm uverbs0"
kc apply -f "$REPO/conf/k8s/dra.yaml" >/dev/null || bad "apply dra.yaml"
t=$(up)
if wait_until 300 ds_ready rdma-host-device-dra; then ok "DaemonSet rdma-host-device-dra ready in $(since "$t") s"
else bad "DaemonSet rdma-host-device-dra not ready"; fi
# slice_has KEY=VALUE|!KEY...: our slice for this node has the one device for $PCI, and each
# attribute holds (KEY=VALUE) or is absent (!KEY); else it says what it found, and fails.
slice_has() {
  kc get resourceslices -o json | python3 -c '
import json, sys
node, pci, want = sys.argv[1], sys.argv[2], sys.argv[3:]
ours = [s for s in json.load(sys.stdin)["items"]
        if s["spec"]["driver"] == "rdma-host-device.io" and s["spec"].get("nodeName") == node]
assert len(ours) == 1, f"{len(ours)} slices for {node}"
devs = ours[0]["spec"].get("devices") or []
name = "pci-" + pci.replace(":", "-").replace(".", "-")
assert [d["name"] for d in devs] == [name], [d["name"] for d in devs]
attrs = devs[0].get("attributes") or {}
for w in want:
    if w.startswith("!"):
        assert w[1:] not in attrs, f"{w[1:]} still there: {attrs.get(w[1:])}"
        continue
    k, v = w.split("=", 1)
    a = attrs.get(k)
    assert a is not None, f"no {k}: {sorted(attrs)}"
    got = str(next(iter(a.values()))).lower()
    assert got == v.lower(), f"{k} is {got}, not {v}"
' "$NODE" "$PCI" "$@"
}
GUID=$(cat /sys/class/infiniband/rxe0/node_guid)
with_rdma=("resource.kubernetes.io/pciBusID=$PCI" "resource.kubernetes.io/pcieRoot=pci0000:00"
  "k8s.cni.cncf.io/deviceID=$PCI" "rdma-host-device.io/rdmaDevice=rxe0" "rdma-host-device.io/nodeGUID=$GUID"
  "rdma-host-device.io/transport=RoCE" "rdma-host-device.io/rdma=true" "rdma-host-device.io/linkUp=true"
  "rdma-host-device.io/ifName=$NIC")
# resource.kubernetes.io/numaNode as Kubernetes 1.37 defines it: the function's numa_node, and
# none at all where sysfs says -1 (no topology: QEMU's virtio NIC here)
NUMA=$(cat "/sys/bus/pci/devices/$PCI/numa_node" 2>/dev/null || echo -1)
if [[ $NUMA == -1 ]]; then with_rdma+=("!resource.kubernetes.io/numaNode"); else with_rdma+=("resource.kubernetes.io/numaNode=$NUMA"); fi
if wait_until 60 slice_has "${with_rdma[@]}"; then ok "ResourceSlice: $PCI with rxe0's attributes (nodeGUID $GUID, RoCE, pciBusID, pcieRoot, Multus deviceID, numaNode per sysfs $NUMA)"
else bad "the ResourceSlice: $(slice_has "${with_rdma[@]}" 2>&1 | tail -1)"; fi
python3 - "$REPO/conf/k8s/dra-claims.yaml" <<'EOF' | kc apply -f - >/dev/null || bad "apply one-rail and rail-0"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
want = {("ResourceClaimTemplate", "one-rail"), ("NetworkAttachmentDefinition", "rail-0")}
print(json.dumps({"apiVersion": "v1", "kind": "List",
  "items": [d for d in docs if (d["kind"], d["metadata"]["name"]) in want]}))
EOF
# health_is WANT [TEXT]: dra-a's allocatedResourcesStatus (KEP-4680, from our driver's health
# stream through the kubelet) shows its claim's device as WANT, its message holding TEXT; prints
# the resource ID and the message
health_is() {
  kc get pod dra-a -o json | python3 -c '
import json, sys
want, text = sys.argv[1], sys.argv[2]
st = json.load(sys.stdin)["status"]["containerStatuses"][0].get("allocatedResourcesStatus") or []
r = [x for e in st if e["name"] == "claim:rails" for x in e.get("resources") or []]
assert r and r[0]["health"] == want and text in r[0].get("message", ""), r
print(r[0]["resourceID"], repr(r[0].get("message", "")))
' "$1" "${2:-}"
}
# The device's health in the pod's status; its RDMA device deleted in the pod's netns (where the
# driver looks at it: exclusive mode) makes it Unhealthy with our sentence; made again and moved
# into the pod's netns, Healthy.
health_checks() {
  local ns t
  if wait_until 60 health_is Healthy; then ok "dra-a: allocatedResourcesStatus $(health_is Healthy)"
  else bad "dra-a: not Healthy in allocatedResourcesStatus: $(health_is Healthy 2>&1 | tail -1)"; return; fi
  ns=$(python3 -c 'import glob, json; print(*[json.load(open(f))["netns"] for f in glob.glob("/var/lib/cni/rdma-host-device/*.json")])')
  t=$(up)
  nsenter --net="$ns" rdma link delete rxe0 || { bad "rdma link delete rxe0 in dra-a's netns $ns"; return; }
  local gone="rdma-device-gone: its RDMA device rxe0 is gone"
  if wait_until 30 health_is Unhealthy "$gone"; then ok "rxe0 deleted in the pod: Unhealthy in $(since "$t") s: $(health_is Unhealthy "$gone")"
  else bad "rxe0 deleted in the pod, after 30 s: $(health_is Unhealthy "$gone" 2>&1 | tail -1)"; fi
  # Made again on net1, the new rxe0 registers in the node's namespace (rxe_ns keeps its
  # sockets in init_net): the pod does not see it, so it is still gone there; moved into the
  # pod's netns, as ADD moves it, it is back.
  nsenter --net="$ns" rdma link add rxe0 type rxe_ns netdev net1 || { bad "rdma link add rxe0 on dra-a's net1"; return; }
  sleep 3
  if health_is Unhealthy "$gone" >/dev/null; then ok "rxe0 made again outside the pod: still gone in the pod"
  else bad "rxe0 made again outside the pod: $(health_is Unhealthy "$gone" 2>&1 | tail -1)"; fi
  t=$(up)
  rdma dev set rxe0 netns "$(basename "$ns")" || { bad "rdma dev set rxe0 netns $(basename "$ns")"; return; }
  if wait_until 30 health_is Healthy; then ok "rxe0 back in the pod's netns: Healthy in $(since "$t") s"
  else bad "rxe0 back in the pod's netns, after 30 s: $(health_is Healthy 2>&1 | tail -1)"; fi
}
# KEP-5304 (issue 38 item 2): dra-a's container reads its device metadata, which prepare wrote
# and ADD completed (generation 2, ifName net1, the RoCE v2 GID index of its address), and
# NCCL_IB_HCA / NCCL_IB_GID_INDEX from our CDI env; ibv_devinfo -v and the GID table in sysfs,
# read in the same container, agree that this index holds the RoCE v2 GID of its address.
META=/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rails/nic-0/rdma-host-device.io-metadata.json
meta_checks() {
  local st ip m idx env hca genv sysgid systype
  st=$(kc get pod dra-a -o jsonpath='{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}')
  ip=$(python3 -c 'import json,sys; n=[s for s in json.loads(sys.argv[1]) if s.get("interface")=="net1"]; print(n[0]["ips"][0] if n else "")' "$st")
  m=$(in_pod dra-a cat "$META") || { bad "dra-a: cannot read $META"; return; }
  echo "--- $META in dra-a:"; echo "$m"
  # generation, ifName, gidIndex, gidIndices, rdmaDevice, uverbs, pciBusID of the first device
  read -r gen ifn idx idxs rdev uv pci < <(python3 -c '
import json, sys
d = json.JSONDecoder().raw_decode(sys.stdin.read().lstrip())[0]
dev = d["requests"][0]["devices"][0]
a = dev.get("attributes", {})
v = lambda k: str(list(a.get(k, {"-": "-"}).values())[0])
print(d["metadata"]["generation"], v("rdma-host-device.io/ifName"), v("rdma-host-device.io/gidIndex"),
      v("rdma-host-device.io/gidIndices"), v("rdma-host-device.io/rdmaDevice"), v("rdma-host-device.io/uverbs"),
      v("resource.kubernetes.io/pciBusID"))' <<<"$m")
  if [[ $gen == 2 && $ifn == net1 && $rdev == rxe0 && $uv == uverbs0 && $pci == "$PCI" && $idxs == "$ip=$idx" ]]; then
    ok "dra-a: metadata generation $gen, ifName $ifn, rdmaDevice $rdev, uverbs $uv, pciBusID $pci, gidIndex $idx, gidIndices $idxs"
  else bad "dra-a: metadata generation=$gen ifName=$ifn rdmaDevice=$rdev uverbs=$uv pciBusID=$pci gidIndex=$idx gidIndices=$idxs (address $ip)"; fi
  env=$(in_pod dra-a env | grep -E '^(NCCL_|RDMA_HOST_DEVICE_METADATA)' | sort | xargs)
  hca=$(in_pod dra-a sh -c 'echo "$NCCL_IB_HCA"')
  genv=$(in_pod dra-a sh -c 'echo "$NCCL_IB_GID_INDEX"')
  if [[ $hca == "=rxe0" && $genv == "$idx" ]]; then ok "dra-a: env $env"
  else bad "dra-a: env '$env' (metadata gidIndex $idx)"; fi
  gid_agrees dra-a "$ip" "$genv"
}
t=$(up)
pod_json dra-a rail-0 '{"claims": [{"name": "rails"}]}' '[{"name": "rails", "resourceClaimTemplateName": "one-rail"}]' |
  kc apply -f - >/dev/null
if wait_until 240 ready dra-a; then
  ok "dra-a Ready $(since "$t") s after apply"
  # no device-info: Multus 4.3 passes a device-info path only with a deviceID (pkg/types/conf.go,
  # delegateRuntimeConfig), and a draRequest network gets none from it
  pod_checks dra-a 0
  meta_checks
  health_checks
else bad "dra-a not Ready"; fi
kc delete pod dra-a --wait=true --timeout=120s >/dev/null || bad "delete dra-a"
home "dra"
# The RDMA device deleted on the node: the slice follows from sysfs (no link notification comes
# with it) within 5 s; added again, it comes back.
t=$(up)
rdma link delete rxe0 || bad "rdma link delete rxe0"
without=("!rdma-host-device.io/rdmaDevice" "!rdma-host-device.io/nodeGUID" "rdma-host-device.io/rdma=false")
if wait_until 5 slice_has "${without[@]}"; then ok "rxe0 deleted: the slice no longer names it ($(since "$t") s)"
else bad "rxe0 deleted, the slice after 5 s: $(slice_has "${without[@]}" 2>&1 | tail -1)"; fi
rdma link add rxe0 type rxe_ns netdev "$NIC" || bad "rdma link add rxe0 again"
if wait_until 15 slice_has "rdma-host-device.io/rdmaDevice=rxe0" "rdma-host-device.io/rdma=true"; then ok "rxe0 added again: back in the slice"
else bad "rxe0 added again, the slice: $(slice_has "rdma-host-device.io/rdmaDevice=rxe0" 2>&1 | tail -1)"; fi

# ---- fail-closed by the hook (node.json memlockFailClosed, docs/deploy.md): no validator, no
# admission policy; the CDI spec's hook refuses a rail container whose OCI spec lacks the node's
# memlock (the NRI plugin away), so it cannot start the way the validator's gap lets one start.
case_ "fail-closed-hook"
cm=$(kc -n kube-system get cm rdma-host-device-install -o json)
python3 -c 'import json,sys; c=json.loads(sys.argv[1]); n=json.loads(c["data"]["node.json"]); n["memlockFailClosed"]=True; n["devicePlugin"].setdefault("charDevices", {})["cdi"]=True; c["data"]["node.json"]=json.dumps(n); print(json.dumps(c))' "$cm" |
  kc apply -f - >/dev/null || bad "memlockFailClosed into the ConfigMap"
t=$(up)
for ds in rdma-host-device rdma-host-device-dra; do
  kc -n kube-system rollout restart ds "$ds" >/dev/null || bad "rollout restart $ds"
  kc -n kube-system rollout status ds "$ds" --timeout=300s >/dev/null || bad "rollout status $ds"
done
spec_closed() { grep -q -- '"--fail-closed"' /var/run/cdi/rdma-host-device.json; }
if wait_until 60 spec_closed; then ok "DaemonSets restarted with memlockFailClosed in $(since "$t") s: the CDI spec's hook has --fail-closed"
else bad "the CDI spec's hook: $(grep -A3 '"args"' /var/run/cdi/rdma-host-device.json | xargs)"; fi
: >"$KILLS"
touch "$KILLING"
(end=$(($(date +%s) + 150)); while [[ -e $KILLING ]] && (($(date +%s) < end)); do nri_kill >>"$KILLS"; sleep 0.2; done) &
KILLER=$!
t=$(up)
# restartPolicy Always, as a Deployment's: the kubelet starts the refused container again
pod_json fh-a rdma-rail '{"limits": {"rdma-host-device.io/rail": "1"}}' '[]' |
  python3 -c 'import json,sys; p=json.load(sys.stdin); p["spec"]["restartPolicy"]="Always"; print(json.dumps(p))' |
  kc apply -f - >/dev/null
hook_refused() {
  kc get events --field-selector involvedObject.name=fh-a -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' |
    grep -m1 'memlockFailClosed'
}
if wait_until 140 hook_refused; then ok "fh-a refused by the hook while the NRI plugin is away: $(hook_refused | grep -o 'memlock-hook: refusing container[^:]*: its OCI spec gives it no RLIMIT_MEMLOCK of [^ ]* ([^)]*)' | sed -n 1p)"
else bad "fh-a: no refusal by the hook in its events: $(kc get events --field-selector involvedObject.name=fh-a 2>&1 | tail -5)"; fi
nri_back fh-a
home "fail-closed-hook"

echo "=== the whole job: $(since "$T0") s"
finish
