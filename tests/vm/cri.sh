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
#   allocated     the device plugin's path as a kubelet drives it: `rdma-host-device
#                 device-plugin` registers with tests/device_plugin/kubelet.py (the kubelet's
#                 side), offers the NIC (pool by pciAddresses) with rxe0; Allocate, then the
#                 pod (the CNI moves the NIC and rxe0 in), then a container created as the
#                 kubelet creates it from Allocate's answer (DeviceSpecs as CRI `devices`, its
#                 envs), as uid 1000 with no capabilities: ibv_devinfo there lists rxe0 with
#                 its port ACTIVE, RDMA_HOST_DEVICE_RAIL_RDMA names it, `ulimit -l` is printed
#                 (containerd 1.6 has no CDI: the runtime's own limit). A second container of
#                 the same pod, not allocated the device (root, containerd's default
#                 capabilities), has no /dev/infiniband, and a uverbs node it makes itself
#                 (mknod) cannot be opened: the device cgroup refuses it. The device plugin
#                 keeps a CDI spec (--cdi-spec) naming rxe0's uverbs0, before and while it is in the pod
#   cdi           the same device through CDI, with a runtime that reads it (Debian's podman;
#                 containerd 1.6 reads none): `rdma-host-device-agent cdi` writes the spec from the
#                 guest's sysfs and /dev (rxe0's uverbs0, rdma_cm) with node.json's memlock
#                 (1 GiB); a container given only rdma-host-device.io/rdma=uverbs0, as uid 1000,
#                 has uverbs0 and rdma_cm, `ulimit -l` 1048576 (the hook ran) and ibv_devinfo
#                 lists rxe0; without the name: no device, the runtime's memlock
#   nri           the NRI plugin against tests/nri/runtime.py (a containerd 2.x stand-in; 1.6
#                 has no NRI) with the guest's runc: a container given rxe0's real uverbs node
#                 has ulimit -l at node.json's memlock (1 GiB) in its first process AND in one
#                 started by runc exec from the spec's process (as kubectl exec), which also
#                 opens rxe0; a container without it (only the env var) has neither
#
# Needs (prepared on the host by run.sh): target/vm/pause.tar (the sandbox image),
# target/vm/rdma-tools.tar (busybox, ibv_devinfo, rping, ibv_rc_pingpong, the rxe and siw
# providers), the CRI stubs in target/vm/cri-stubs, the venv at $RHD_VENV.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh cri-exclusive" >&2
  exit 2
fi
BIN=${RHD_BIN:-$REPO/target/debug/rdma-host-device}
AGENT=${RHD_AGENT:-$(dirname "$BIN")/rdma-host-device-agent}  # the node agent beside it
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
# ipamPaths: the defaults plus host-local's dataDir below ($D/ipam), never the stateDir or logDir.
# devicePlugin: one pool holding the VM's NIC (for the allocated case's device plugin).
echo "{\"stateDir\":\"$D/rhd-state\",\"logDir\":\"$D/log\",\"ipamPaths\":[\"/var/lib/cni/networks\",\"/run/cni\",\"/var/run/cni\",\"$D/ipam\"],\"memlock\":\"1073741824\",\"cdiHook\":\"$BIN\",
 \"devicePlugin\":{\"pools\":[{\"resourceName\":\"rdma-host-device.io/rail\",\"selectors\":{\"pciAddresses\":[\"$PCI\"]}}]}}" >"$D/node.json"
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
for _ in $(seq 100); do cri status 2>/dev/null | grep '"NetworkReady": true' >/dev/null && break; sleep 0.2; done
if cri status | grep '"NetworkReady": true' >/dev/null; then ok "containerd's CRI is ready"; else bad "containerd's CRI not ready"; fi
for img in pause rdma-tools; do
  ctr -a "$D/containerd.sock" -n k8s.io images import "$REPO/target/vm/$img.tar" >/dev/null ||
    bad "ctr images import $img.tar"
done

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
    "ip -n $NS -j addr show eth0 | grep '\"local\":\"$IP\"' >/dev/null && test \"\$(ip -n $NS -j link show eth0 | python3 -c 'import json,sys; l=json.load(sys.stdin)[0]; print(l[\"mtu\"], l[\"address\"])')\" = '1400 52:54:00:12:34:05'"
  check "the pod lists rxe0" test "$(pod_rdma "$NS")" = rxe0
  check "ibv_devinfo in the pod shows ::ffff:$IP as RoCE v2" bash -c \
    "ip netns exec $NS ibv_devinfo -v | grep '::ffff:$IP, RoCE v2' >/dev/null"
  check "the host lists neither the NIC nor rxe0" bash -c "! ip link show $NIC 2>/dev/null && test -z \"$(host_rdma)\""
}

case_ move
if run_pod nccl-0; then
  r=$(cri stop "$ID") && echo "    StopPodSandbox $(field ms <<<"$r") ms" || bad "StopPodSandbox: $r"
  home
  r=$(cri remove "$ID") && echo "    RemovePodSandbox $(field ms <<<"$r") ms" || bad "RemovePodSandbox: $r"
  check "the sandbox is gone" bash -c "! $PY $REPO/tests/cri/cri.py $D/containerd.sock list | grep $ID >/dev/null"
  home
fi

case_ netns-gone
if run_pod nccl-1; then
  ip netns delete "$NS"
  r=$(cri stop "$ID") || bad "StopPodSandbox after the netns was deleted: $r"
  r=$(cri remove "$ID") || bad "RemovePodSandbox after the netns was deleted: $r"
  check "the sandbox is gone" bash -c "! $PY $REPO/tests/cri/cri.py $D/containerd.sock list | grep $ID >/dev/null"
  home
fi

case_ allocated
# jget PATH: a field of the JSON on stdin (dot-separated keys and list indexes), JSON if not scalar.
jget() { python3 -c 'import json,sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[int(k)] if isinstance(v, list) else v.get(k)
print(json.dumps(v) if isinstance(v, (dict, list)) else v)' "$1"; }
modprobe rdma_ucm || bad "modprobe rdma_ucm (rdma_cm)"
mkdir -p "$D/dp" "$D/devinfo-dp"
coproc KUBELET { RHD_DP_STUBS=$D/dp-stubs exec "$PY" "$REPO/tests/device_plugin/kubelet.py" "$D/dp" 2>"$D/kubelet.log"; }
IFS= read -r -t 120 line <&"${KUBELET[0]}" || line=
check "kubelet.py serves kubelet.sock" grep -q listening <<<"$line"
# kub JSON: one command to kubelet.py, its one-line answer.
kub() {
  local l=
  printf '%s\n' "$1" >&"${KUBELET[1]}"
  IFS= read -r -t 180 l <&"${KUBELET[0]}" || l='{"error": "kubelet.py did not answer"}'
  printf '%s\n' "$l"
}
mkdir -p "$D/cdi"
RDMA_HOST_DEVICE_NODE_CONFIG=$D/node.json "$AGENT" device-plugin --socket-dir "$D/dp" \
  --device-info-dir "$D/devinfo-dp" --cdi-spec "$D/cdi/rdma-host-device.json" \
  >"$D/device-plugin.log" 2>&1 &
DP_PID=$!
R=rdma-host-device.io/rail
r=$(kub '{"cmd": "registered", "count": 1, "timeout": 120}')
check "the device plugin registered $R" test "$(jget resource_name <<<"$r")" = $R
kub "{\"cmd\": \"watch\", \"resource\": \"$R\"}" >/dev/null
r=$(kub "{\"cmd\": \"devices\", \"resource\": \"$R\", \"want\": {\"$PCI\": \"Healthy\"}, \"timeout\": 120}")
check "ListAndWatch offers $PCI, Healthy" test "$(jget error <<<"$r")" = None
check "the device plugin keeps a CDI spec naming rxe0's uverbs0" grep -q '"name": "uverbs0"' "$D/cdi/rdma-host-device.json"
# As the kubelet does: Allocate at admission, before the sandbox exists (rxe0 still on the host).
A=$(kub "{\"cmd\": \"allocate\", \"resource\": \"$R\", \"containers\": [[\"$PCI\"]]}")
echo "    Allocate: $A"
UVERBS=$(jget responses.0.devices <<<"$A" | python3 -c 'import json,sys; print(" ".join(d["container_path"] for d in json.load(sys.stdin)))')
has() { grep -q -- "$1" <<<"$2"; }
# has_all TEXT PATTERN...: every pattern is in TEXT (else names the first missing one).
has_all() { local t=$1 p; shift; for p; do grep -q -- "$p" <<<"$t" || { echo "missing: $p"; return 1; }; done; }
check "Allocate hands out rxe0's uverbs and rdma_cm ($UVERBS)" has '^/dev/infiniband/uverbs[0-9]* /dev/infiniband/rdma_cm$' "$UVERBS"
check "Allocate names rxe0 in RDMA_HOST_DEVICE_RAIL_RDMA" test "$(jget responses.0.envs.RDMA_HOST_DEVICE_RAIL_RDMA <<<"$A")" = rxe0
UV=${UVERBS%% *}
MAJMIN=$(stat -c '%t %T' "$UV" 2>/dev/null) || MAJMIN="0 0"
if run_pod nccl-2; then
  POD=$ID
  # The container the kubelet creates from Allocate's answer: its DeviceSpecs as CRI devices,
  # its envs, run as uid 1000 (no capabilities: a non-root process has none effective).
  SPEC=$(jget responses.0 <<<"$A" | python3 -c 'import json,sys
r = json.load(sys.stdin)
print(json.dumps({"command": ["/bin/sleep", "3600"], "envs": r["envs"], "devices": r["devices"], "uid": 1000}))')
  r=$(cri create "$POD" nccl-2 rdma localhost/rhd-rdma-tools:test "$SPEC") && C1=$(field id <<<"$r") &&
    cri start "$C1" >/dev/null || bad "CreateContainer/StartContainer with the allocation: $r"
  if [[ -n ${C1:-} ]]; then
    r=$(cri exec "$C1" 60 /bin/sh -c 'id -u; grep CapEff /proc/self/status; echo "memlock=$(ulimit -l)"; echo "rail=$RDMA_HOST_DEVICE_RAIL_RDMA"; ls /dev/infiniband; ibv_devinfo')
    seen=$(field stdout <<<"$r")
    echo "$seen" | sed 's/^/    | /'
    check "the allocated container runs as uid 1000 with no capabilities" has_all "$seen" '^1000$' 'CapEff:.0000000000000000'
    check "ibv_devinfo there exits 0 and shows rxe0" has_all "exit=$(field exit_code <<<"$r") $seen" '^exit=0 ' 'hca_id:.rxe0'
    check "the container's env names rxe0" has '^rail=rxe0$' "$seen"
    echo "    ulimit -l in the container: $(grep memlock= <<<"$seen") (containerd 1.6: no CDI, so no memlock hook)"
  fi
  # A second container of the same pod, without the allocation: root, containerd's default
  # capabilities (CAP_MKNOD among them), the pod's netns (rxe0 is listed in its sysfs).
  r=$(cri create "$POD" nccl-2 other localhost/rhd-rdma-tools:test '{"command": ["/bin/sleep", "3600"]}') &&
    C2=$(field id <<<"$r") && cri start "$C2" >/dev/null || bad "CreateContainer/StartContainer without the allocation: $r"
  if [[ -n ${C2:-} ]]; then
    r=$(cri exec "$C2" 60 /bin/sh -c "ls /dev/infiniband 2>&1; ibv_devinfo 2>&1; echo rc=\$?; mknod /dev/uverbs-own c $((0x${MAJMIN% *})) $((0x${MAJMIN#* })) 2>&1 && echo made && cat /dev/uverbs-own 2>&1; echo done")
    seen="$(field stdout <<<"$r")$(field stderr <<<"$r")"
    echo "$seen" | sed 's/^/    | /'
    check "without the allocation: no /dev/infiniband" has '/dev/infiniband: No such file' "$seen"
    check "without the allocation: ibv_devinfo shows no rxe0" bash -c "! grep -q 'hca_id:.rxe0'" <<<"$seen"
    check "without the allocation: a uverbs node it makes ($MAJMIN) cannot be opened" has_all "$seen" '^made$' "can't open.*Operation not permitted"
  fi
  sleep 6  # one discovery (5 s) with rxe0 in the pod, gone from the host's sysfs
  check "with rxe0 in the pod, the CDI spec still names it (a restarted container resolves it)" \
    grep -q '"name": "uverbs0"' "$D/cdi/rdma-host-device.json"
  for c in ${C1:-} ${C2:-}; do cri cstop "$c" >/dev/null; cri cremove "$c" >/dev/null || bad "RemoveContainer $c"; done
  r=$(cri stop "$POD") || bad "StopPodSandbox: $r"
  r=$(cri remove "$POD") || bad "RemovePodSandbox: $r"
  home
fi
kill "$DP_PID" 2>/dev/null
kill "$KUBELET_PID" 2>/dev/null
if ((FAIL)); then
  echo "--- device plugin log (last 20 lines)"; tail -20 "$D/device-plugin.log"
  echo "--- kubelet.py log (last 10 lines)"; tail -10 "$D/kubelet.log"
fi

case_ cdi
# podman's own storage on the tmpfs; the container's root is the rdma-tools image's layer.
ROOTFS=$D/tools-root
mkdir -p "$ROOTFS" "$D/oci"
tar -xf "$REPO/target/vm/rdma-tools.tar" -C "$D/oci"
for b in "$D"/oci/blobs/sha256/*; do tar -tzf "$b" >/dev/null 2>&1 && tar -xzf "$b" -C "$ROOTFS"; done
mkdir -p /var/run/cdi
check "rdma-host-device-agent cdi writes the spec with rxe0" bash -c \
  "RDMA_HOST_DEVICE_NODE_CONFIG=$D/node.json $AGENT cdi 2>&1 | grep '1 RDMA device' >/dev/null"
# pod: podman run as uid 1000 in the host's netns (exclusive mode: rxe0 is there), CDI names.
pod() {
  podman --root="$D/podman/storage" --runroot="$D/podman/run" --tmpdir="$D/podman/tmp" \
    --cgroup-manager=cgroupfs --events-backend=file run --rm --network=host --user 1000:1000 \
    "$@" --rootfs "$ROOTFS" /bin/sh -c 'echo "memlock=$(ulimit -l)"; ls /dev/infiniband 2>&1; ibv_devinfo 2>&1' 2>&1
}
seen=$(pod --device rdma-host-device.io/rdma=uverbs0)
echo "$seen" | sed 's/^/    | /'
check "given only the CDI name: uverbs0, rdma_cm, ulimit -l 1048576 (the hook), ibv_devinfo lists rxe0" \
  has_all "$seen" '^memlock=1048576$' '^uverbs0$' '^rdma_cm$' 'hca_id:.rxe0'
seen=$(pod)
echo "$seen" | sed 's/^/    | /'
check "without it: no /dev/infiniband, no rxe0, the runtime's own memlock" has_all "$seen" \
  '/dev/infiniband: No such file' '^memlock=[0-9]' 'No IB devices found'
check "without it: the memlock is not the policy's" bash -c "! grep -q '^memlock=1048576$'" <<<"$seen"
rm -f /var/run/cdi/rdma-host-device.json

case_ nri
# The NRI plugin against tests/nri/runtime.py (containerd 1.6 here has no NRI): the stand-in
# creates a container as containerd 2.x would, with rxe0's real uverbs node (its major:minor
# from this kernel) and rdma_cm among its devices, applies the plugin's adjustment to the OCI
# spec, runs it with the guest's runc in the host's netns (exclusive mode: rxe0 is there), and
# starts a second process with runc exec built from the spec's process, as kubectl exec is.
UV0=$(ls /dev/infiniband/uverbs* 2>/dev/null | sed -n 1p)
MM=$(stat -c '%t %T' "$UV0" 2>/dev/null) || MM="0 0"
MAJ=$((0x${MM% *})) MIN=$((0x${MM#* }))
coproc NRIRT { RHD_NRI_STUBS=$D/nri-stubs exec "$PY" "$REPO/tests/nri/runtime.py" "$D/nri.sock" 2>"$D/nri-runtime.log"; }
exec 5>&"${NRIRT[1]}" 6<&"${NRIRT[0]}"
IFS= read -r -t 120 line <&6 || line=
check "runtime.py listens on its NRI socket" grep -q listening <<<"$line"
nrt() { local l=; printf '%s\n' "$1" >&5; IFS= read -r -t 180 l <&6 || l='{"error": "runtime.py did not answer"}'; printf '%s\n' "$l"; }
RDMA_HOST_DEVICE_NODE_CONFIG=$D/node.json "$AGENT" nri --socket "$D/nri.sock" >"$D/nri.log" 2>&1 &
NRI_PID=$!
r=$(nrt '{"cmd": "registered", "count": 1, "timeout": 60}')
check "the plugin registered, subscribed to CreateContainer" has '"events": 8' "$r"
mkdir -p "$D/nri-work" "$ROOTFS/proc" "$ROOTFS/sys" "$ROOTFS/dev"
DEVS="[{\"path\": \"$UV0\", \"type\": \"c\", \"major\": $MAJ, \"minor\": $MIN}, {\"path\": \"/dev/infiniband/rdma_cm\", \"type\": \"c\", \"major\": 10, \"minor\": 58}]"
run_ctr() {
  nrt "{\"cmd\": \"run\", \"pod\": {\"id\": \"p\", \"name\": \"nccl\", \"namespace\": \"t\"}, \"container\": $1, \"rootfs\": \"$ROOTFS\", \"work\": \"$D/nri-work\", \"host_network\": true, \"exec\": \"echo memlock=\$(ulimit -l); ibv_devinfo 2>&1 | grep hca_id; true\"}"
}
r=$(run_ctr "{\"id\": \"rdma$$\", \"name\": \"rdma\", \"linux\": {\"devices\": $DEVS}}")
echo "    $r"
check "given rxe0's $UV0 ($MAJ:$MIN): the first process has ulimit -l 1048576" has '"first": "1048576"' "$r"
check "a process exec'd into it too, and it opens rxe0" has_all "$r" 'memlock=1048576' 'hca_id:.*rxe0'
r=$(run_ctr "{\"id\": \"plain$$\", \"name\": \"plain\", \"env\": [\"RDMA_HOST_DEVICE_RAIL_RDMA=rxe0\"]}")
echo "    $r"
check "without the device (its env var named): neither process has the policy" bash -c "! grep -q 1048576" <<<"$r"
kill "$NRI_PID" 2>/dev/null
nrt '{"cmd": "quit"}' >/dev/null
if ((FAIL)); then echo "--- nri plugin log"; tail -20 "$D/nri.log"; tail -20 "$D/nri-runtime.log"; fi

if ((FAIL)); then
  echo "--- plugin log (last 30 lines)"; tail -30 "$D/log/cri.log"
  echo "--- containerd log (last 20 lines)"; tail -20 "$D/containerd.log"
fi
echo "cri[exclusive]: $PASS passed, $FAIL failed"
((FAIL == 0))
