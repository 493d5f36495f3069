#!/usr/bin/env bash
# A one-node Kubernetes 1.37 cluster for the tests, from the real parts scripts/cluster-parts.sh
# builds: etcd, kube-apiserver, kube-scheduler, kube-controller-manager, containerd 2.4 (CRI,
# CDI and NRI on) and the kubelet, all in a network namespace of their own (the node's address
# on a veth, not the loopback) and a private mount namespace in which the node's well-known
# directories (/opt/cni/bin, /etc/cni/net.d, /var/lib/kubelet, /etc/cdi, /var/run/cdi, /run/nri,
# /var/log/pods, /var/log/containers, /var/lib/cni, /run/rdma-host-device...) are directories of
# the cluster's own. Nothing of the host is changed but what `down` undoes: the veth and the
# named netns, the empty mount points it had to make, the sysctls the kubelet rewrites, and the
# cgroups of the pods.
#
#   tests/cluster/cluster.sh up DIR      start it (DIR: a short, empty or missing directory)
#   tests/cluster/cluster.sh down DIR    stop it and remove what it made (idempotent)
#   tests/cluster/cluster.sh exec DIR CMD...  run CMD inside the node (its netns and mounts)
#   tests/cluster/cluster.sh kubectl DIR ARGS...
#   RHD_CLUSTER_NODE=vm tests/cluster/cluster.sh up DIR
#                                        the control plane only (etcd, API server, scheduler,
#                                        controller-manager); the node is a VM that runs
#   tests/cluster/cluster.sh node DIR [2]  there: containerd and the kubelet, with DIR's
#                                        certificates and kubeconfigs (tests/vm/cluster.sh);
#                                        2: the second node of RHD_CLUSTER_NODES=2
#   RHD_CLUSTER_NODE=vm RHD_CLUSTER_NODES=2 tests/cluster/cluster.sh up DIR
#                                        room for two VM nodes, rhd-vm at 198.51.100.1 and
#                                        rhd-vm2 at 198.51.100.3 (tests/vm/two-nodes.sh)
#
# DIR/env has what a caller needs (KUBECONFIG, NODE, NODE_IP, the netns, the holder's pid);
# DIR/logs/ every component's log. Needs root; the parts (RHD_CLUSTER_BIN or
# scripts/cluster-parts.sh's output), runc, openssl, podman's or cri.py's images.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 1; }

cmd=${1:?usage: cluster.sh up|down|node|exec|kubectl DIR ...}
D=${2:?usage: cluster.sh $cmd DIR}
shift 2
D=$(mkdir -p "$D" && cd "$D" && pwd -P)

NODE=rhd-node
# TEST-NET-2: the documentation range, nobody's network; the machine's own address is elsewhere.
# The API server listens on the netns' veth address; the node's kubelet on the same address when
# the node is the netns, on the host's end of the veth when it is a VM (QEMU forwards that
# address's 10250 into the guest: tests/vm/README.md).
HOST_IP=198.51.100.1 APISERVER_IP=198.51.100.2 SERVICE_CIDR=10.96.0.0/24 SERVICE_IP=10.96.0.1
NODE_MODE=${RHD_CLUSTER_NODE:-netns}
case $NODE_MODE in
netns) NODE_IP=$APISERVER_IP ;;
vm) NODE=rhd-vm NODE_IP=$HOST_IP ;;
*) die "RHD_CLUSTER_NODE=$NODE_MODE: netns or vm" ;;
esac
# A second VM node (RHD_CLUSTER_NODES=2): its own name, its own token, and its own address on
# this machine's end of the veth, where its VM's QEMU forwards 10250 into it.
NODES=${RHD_CLUSTER_NODES:-1}
[[ $NODES == 1 || ($NODES == 2 && $NODE_MODE == vm) ]] || die "RHD_CLUSTER_NODES=$NODES: 1, or 2 with RHD_CLUSTER_NODE=vm"
NODE2=rhd-vm2 NODE2_IP=198.51.100.3
# The node's well-known paths, each backed by DIR/node/<path> inside the cluster's mount namespace.
NODE_PATHS=(/opt/cni/bin /etc/cni/net.d /var/lib/kubelet /etc/cdi /var/run/cdi /run/nri
  /var/log/pods /var/log/containers /var/lib/cni /run/rdma-host-device /var/lib/rdma-host-device
  /var/log/rdma-host-device /etc/rdma-host-device /run/containerd /var/lib/containerd
  /var/run/k8s.cni.cncf.io /dev/infiniband)
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes vm.panic_on_oom)

# The daemons' pids: DIR/pids on the host; a VM node's own elsewhere (pids of the guest, which
# `down` on the host must never kill).
PIDS=$D/pids
holder() { cat "$D/holder.pid" 2>/dev/null; }
inside() { nsenter -t "$(holder)" --net --mount -- "$@" 9>&-; }

case $cmd in
exec) inside "$@"; exit ;;
node) ;;
kubectl) exec "$D/bin/kubectl" --kubeconfig "$D/admin.kubeconfig" "$@" ;;
down)
  [[ -f $D/env ]] || exit 0
  node_down() { # the node's pods (their CNI DEL) and daemons, in the netns
    kc() { "$D/bin/kubectl" --kubeconfig "$D/admin.kubeconfig" --request-timeout 10s "$@"; }
    kc delete daemonsets --all -A --wait=false >/dev/null 2>&1 || true
    kc delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 120); do
      [[ -z $(kc get pods -A -o name 2>/dev/null) ]] && break
      sleep 0.5
    done
    for c in kubelet kube-controller-manager kube-scheduler; do
      [[ -f $D/pids/$c ]] && kill "$(cat "$D/pids/$c")" 2>/dev/null || true
    done
    sleep 1
    # Whatever sandboxes are left: stop and remove them through containerd's CRI, so the CNI
    # DEL runs and the NICs come home, then containerd and the shims.
    inside "$D/bin/ctr" --address "$D/run/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null |
      while read -r t; do inside "$D/bin/ctr" --address "$D/run/containerd.sock" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done || true
  }

  # shellcheck disable=SC1091
  . "$D/env"
  # The holder only if it still is one: a pid reused by a process of this machine's own mount
  # namespace would make the loop below kill every process of the host.
  if [[ -n $(holder) ]] && kill -0 "$(holder)" 2>/dev/null &&
    [[ $(readlink "/proc/$(holder)/ns/mnt") != "$(readlink /proc/self/ns/mnt)" ]]; then
    # Pods first, through the kubelet and CRI (their CNI DEL runs), then the daemons; a VM
    # node is gone with its pods and its daemons (nothing would ever finish deleting them).
    [[ ${NODE_MODE:-netns} == vm ]] || node_down
    for c in containerd kube-apiserver etcd kube-controller-manager kube-scheduler; do
      [[ -f $D/pids/$c ]] && kill "$(cat "$D/pids/$c")" 2>/dev/null || true
    done
    sleep 1
    for c in "$D"/pids/*; do [[ -f $c ]] && kill -9 "$(cat "$c")" 2>/dev/null || true; done
    # Shims and containers: every process whose mount namespace is the holder's.
    mnt=$(readlink "/proc/$(holder)/ns/mnt")
    for p in /proc/[0-9]*; do
      [[ ${p#/proc/} == "$(holder)" ]] && continue
      [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "$mnt" ]] && kill -9 "${p#/proc/}" 2>/dev/null || true
    done
    kill -9 "$(holder)" 2>/dev/null || true
  fi
  # The pods' cgroups (cgroupfs driver: kubepods under every v1 hierarchy).
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h/kubepods ]] || continue
    find "$h/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip link del "rhd-k8s-$(basename "$D" | tail -c 6)" 2>/dev/null || true
  [[ -n ${NETNS:-} ]] && ip netns del "$NETNS" 2>/dev/null || true
  # The sysctls the kubelet rewrote, as they were.
  if [[ -f $D/sysctls ]]; then
    while read -r k v; do sysctl -qw "$k=$v" 2>/dev/null || true; done <"$D/sysctls"
  fi
  # The mount points made on the host for the node's paths, if they were made here and are empty.
  if [[ -f $D/made-dirs ]]; then
    tac "$D/made-dirs" | while read -r p; do rmdir "$p" 2>/dev/null || true; done
  fi
  rm -f "$D/env"
  # Everything but the logs (the images and containers' layers are hundreds of MB a cluster).
  find "$D" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} + 2>/dev/null || true
  say "down: $D (its logs kept in $D/logs)"
  exit 0
  ;;
up) ;;
*) die "unknown command $cmd" ;;
esac

daemon() { # NAME CMD...: started inside the node, its log in DIR/logs/NAME.log
  local n=$1
  shift
  setsid "${IN[@]}" "$@" </dev/null >"$LOGS/$n.log" 2>&1 9>&- &
  echo $! >"$PIDS/$n"
}
wait_for() { # WHAT SECONDS CMD...
  local what=$1 t=$2
  shift 2
  for _ in $(seq $((t * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  die "$what not up after ${t} s; logs in $D/logs"
}
kc() { "$D/bin/kubectl" --kubeconfig "$D/admin.kubeconfig" "$@"; }

# ---- the node: containerd, the images, the pods' networks, the kubelet. Inside the netns (up),
# or on the machine it runs on (node: a VM, tests/vm/cluster.sh). IN: the command prefix that
# runs a program in the node; ROOT: where the node's well-known paths are, seen from here; RUN:
# the node's sockets and configuration (never a 9p share: no unix sockets there).
node_up() {
  # ---- containerd 2.4: CRI with CDI, NRI on, runc from Debian, the images imported, no registry
  mkdir -p "$ROOT/var/lib/containerd" "$ROOT/run/containerd" "$RUN"
  cat >"$RUN/containerd.toml" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "localhost/rhd-pause:test"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/run/nri/nri.sock"
  # docs/deploy.md's fail-closed setting: pods conf/k8s/fail-closed.yaml marks wait for our plugin
  [plugins."io.containerd.nri.v1.nri".default_validator]
    enable = true
EOF
  daemon containerd env PATH="$D/bin:$PATH" "$D/bin/containerd" --config "$RUN/containerd.toml"
  wait_for containerd 60 "${IN[@]}" "$D/bin/ctr" --address "$RUN/containerd.sock" version
  # containerd's well-known socket path, where conf/k8s/daemonset.yaml mounts it from (the agent's
  # leak collector asks it which sandboxes exist): a symlink to this containerd's socket.
  ln -sfn "$RUN/containerd.sock" "$ROOT/run/containerd/containerd.sock"

  for t in pause busybox; do
    "${IN[@]}" "$D/bin/ctr" --address "$RUN/containerd.sock" -n k8s.io images import --no-unpack=false "$D/$t.tar" >/dev/null
  done

  # ---- the pods' networks: Multus' thin plugin (4.3.0) as the node's CNI, delegating the
  # cluster network to bridge + host-local (1.10.0), reading NADs from the API server as the admin
  # (a test cluster; a real one gives Multus a ServiceAccount) and the kubelet's pod-resources
  # socket for device plugin allocations.
  for p in multus bridge host-local loopback host-device whereabouts; do
    [[ -x $BIN/$p ]] || die "$BIN/$p missing: scripts/cluster-parts.sh builds it"
    cp "$(readlink -f "$BIN/$p")" "$ROOT/opt/cni/bin/$p"
  done
  mkdir -p "$ROOT/etc/cni/net.d/multus.d" "$ROOT/etc/cni/net.d/whereabouts.d"
  cp "$D/admin.kubeconfig" "$ROOT/etc/cni/net.d/multus.d/multus.kubeconfig"
  # whereabouts (the shipped NAD's IPAM): one pool for the cluster, kept in the API server
  # (its CRDs applied by `up`), reached with the admin's kubeconfig, as Multus is here.
  # The CA inline: the plugin confines whereabouts to the node's ipamReadPaths (/etc/cni), and
  # the cluster's pki directory is not among them.
  install -m 0600 /dev/null "$ROOT/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"
  sed "s|certificate-authority: \"$D/pki/ca.crt\"|certificate-authority-data: \"$(base64 -w0 "$D/pki/ca.crt")\"|" \
    "$D/admin.kubeconfig" >"$ROOT/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"
  cat >"$ROOT/etc/cni/net.d/whereabouts.d/whereabouts.conf" <<EOF
{"datastore": "kubernetes", "kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"}}
EOF
  cat >"$ROOT/etc/cni/net.d/00-multus.conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
  "delegates": [{
    "cniVersion": "1.0.0",
    "name": "cbr0",
    "plugins": [{
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]]}
    }]
  }]
}
EOF

  # ---- the kubelet
  cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$RUN/containerd.sock
# The API server reaches the kubelet (logs, exec) without a client certificate; the kubelet
# listens only where only this machine reaches it: the node's veth, or a VM's NICs behind QEMU's
# user networking.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: $KUBELET_ADDRESS
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
failSwapOn: false
cgroupsPerQOS: true
enforceNodeAllocatable: []
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
protectKernelDefaults: false
makeIPTablesUtilChains: false
localStorageCapacityIsolation: false
resolvConf: ""
EOF
  daemon kubelet "$D/bin/kubelet" --config "$RUN/kubelet.yaml" --kubeconfig "$NODE_KUBECONFIG" \
    --hostname-override "$NODE" --node-ip "$NODE_IP" --root-dir /var/lib/kubelet \
    --cert-dir "$RUN/kubelet-pki" --v 2
  node_ready() { kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -x True >/dev/null; }
  wait_for "the node $NODE (Ready)" 120 node_ready
  kc create serviceaccount default >/dev/null 2>&1 || true
}

if [[ $cmd == node ]]; then
  # On the VM: DIR is the host's, shared with the guest; its env names the node and the parts.
  [[ -f $D/env ]] || die "$D has no cluster (cluster.sh up first, on the host)"
  # shellcheck disable=SC1091
  . "$D/env"
  [[ $NODE_MODE == vm ]] || die "$D's cluster has its node already (RHD_CLUSTER_NODE=vm up makes one without)"
  IN=() ROOT= RUN=/run/rhd-k8s KUBELET_ADDRESS=0.0.0.0 start=$SECONDS PIDS=/run/rhd-k8s/pids
  NODE_KUBECONFIG=$D/node.kubeconfig LOGS=$D/logs
  if [[ ${1:-1} == 2 ]]; then
    [[ -f $D/node2.kubeconfig ]] || die "$D's cluster has no second node (RHD_CLUSTER_NODES=2 up makes room for one)"
    NODE=$NODE2 NODE_IP=$NODE2_IP NODE_KUBECONFIG=$D/node2.kubeconfig LOGS=$D/logs/node2
  fi
  RUNC=$(command -v runc) || die "runc missing"
  mkdir -p "$LOGS" "$PIDS"
  node_up
  say "node $NODE Ready in $((SECONDS - start)) s"
  exit 0
fi

# ------------------------------------------------------------------------------------- up
[[ $(id -u) == 0 ]] || die "run as root"
[[ ! -f $D/env ]] || die "$D holds a cluster already (cluster.sh down $D first)"
trap 'say "up failed; what it started is stopped by: tests/cluster/cluster.sh down $D"' ERR
# One cluster on a machine at a time: they would share the node's address, its route and the
# kubepods cgroups. The lock is taken here and kept by the holder process (below) until `down`
# ends it; the daemons do not inherit it.
# In /run itself (root's alone): /run/lock and /tmp are writable by every user, who could hold
# the lock, or plant the name, first.
LOCK=/run/rhd-cluster.lock
exec 9>"$LOCK"
if ! flock -n 9; then
  say "another cluster is up on this machine ($(ip netns list | grep -o 'rhd-k8s-[^ ]*' | xargs)); waiting up to 15 min for it to go down"
  flock -w 900 9 || die "another cluster held $LOCK for 15 min: tests/cluster/cluster.sh down its DIR"
fi
BIN=${RHD_CLUSTER_BIN:-$("$REPO/scripts/cluster-parts.sh")}
mkdir -p "$D"/{bin,logs,pids,pki,run,etcd,node}
# The keys, the tokens and the kubeconfigs carrying them: root's only (a throw-away cluster's
# admin token under /tmp is still an admin token for as long as the cluster is up).
chmod 0700 "$D/pki"
for b in kube-apiserver kubelet kube-scheduler kube-controller-manager kubectl etcd containerd \
  containerd-shim-runc-v2 ctr; do
  [[ -x $BIN/$b ]] || die "$BIN/$b missing: scripts/cluster-parts.sh builds it"
  ln -sfn "$(readlink -f "$BIN/$b")" "$D/bin/$b"
done
RUNC=$(command -v runc) || die "runc missing: scripts/setup.sh --for test installs it"
start=$SECONDS

# The sysctls the kubelet may rewrite, to be put back by `down`.
for k in "${SYSCTLS[@]}"; do v=$(sysctl -n "$k" 2>/dev/null) && echo "$k $v"; done >"$D/sysctls"

# ---- the network namespace, a veth to the host
tag=$(basename "$D" | tail -c 6)
NETNS=rhd-k8s-$tag
ip netns add "$NETNS"
echo "NETNS=$NETNS" >"$D/env" # what `down` needs from here on; the rest is added when up
ip link add "rhd-k8s-$tag" type veth peer name eth0 netns "$NETNS"
ip addr add "$HOST_IP/24" dev "rhd-k8s-$tag"
if [[ $NODES == 2 ]]; then ip addr add "$NODE2_IP/24" dev "rhd-k8s-$tag"; fi
ip link set "rhd-k8s-$tag" up
ip -n "$NETNS" addr add "$APISERVER_IP/24" dev eth0
ip -n "$NETNS" link set eth0 up
ip -n "$NETNS" link set lo up
ip -n "$NETNS" route add default via "$HOST_IP"
# The kubernetes Service's address is the node's own (no kube-proxy here): what in-cluster
# clients dial reaches the API server, which listens on 443 on every address.
ip -n "$NETNS" addr add "$SERVICE_IP/32" dev lo
# A VM node's pods (the DRA driver) dial the Service's address too: through QEMU's user
# networking, from this machine, routed to the netns (the route goes with the veth).
if [[ $NODE_MODE == vm ]]; then ip route add "$SERVICE_IP/32" via "$APISERVER_IP"; fi

# ---- certificates: one CA; the API server's serving certificate names every address it is
# dialled by; service-account keys
cat >"$D/pki/openssl.cnf" <<EOF
[req]
distinguished_name = dn
[dn]
[v3]
subjectAltName = IP:$APISERVER_IP,IP:$SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
(
  cd "$D/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=rhd-test-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
    -days 2 -extfile openssl.cnf -extensions v3 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)
# Static tokens: the test's admin, the node, the scheduler, the controller-manager.
ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
{
  echo "$ADMIN_TOKEN,admin,admin,system:masters"
  echo "node-$ADMIN_TOKEN,system:node:$NODE,node,system:nodes"
  if [[ $NODES == 2 ]]; then echo "node2-$ADMIN_TOKEN,system:node:$NODE2,node2,system:nodes"; fi
  echo "sched-$ADMIN_TOKEN,system:kube-scheduler,sched,"
  echo "cm-$ADMIN_TOKEN,system:kube-controller-manager,cm,"
} >"$D/pki/tokens.csv"
# The admin's token alone, for clients that take a token file (crates/test-support/src/apiserver.rs).
printf '%s' "$ADMIN_TOKEN" >"$D/pki/admin.token"
# An audit log of what users (not the node's own components) asked of the API server: the
# tests read it to show a request never reached the server (crates/agent/tests/real_cluster/kube_api.rs).
cat >"$D/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [system:kube-scheduler, system:kube-controller-manager, system:apiserver]
- level: None
  userGroups: [system:nodes, system:serviceaccounts]
- level: Metadata
EOF
kubeconfig() { # FILE TOKEN
  install -m 0600 /dev/null "$1"
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rhd
  cluster: {server: "https://$APISERVER_IP:443", certificate-authority: "$D/pki/ca.crt"}
users:
- name: u
  user: {token: "$2"}
contexts:
- name: rhd
  context: {cluster: rhd, user: u}
current-context: rhd
EOF
}
kubeconfig "$D/admin.kubeconfig" "$ADMIN_TOKEN"
kubeconfig "$D/node.kubeconfig" "node-$ADMIN_TOKEN"
if [[ $NODES == 2 ]]; then kubeconfig "$D/node2.kubeconfig" "node2-$ADMIN_TOKEN"; fi
kubeconfig "$D/scheduler.kubeconfig" "sched-$ADMIN_TOKEN"
kubeconfig "$D/cm.kubeconfig" "cm-$ADMIN_TOKEN"

# ---- the holder: a process in the netns with a private mount namespace, in which /sys is the
# netns' own (as the plugin reads /sys/class/net) with the cgroup hierarchies kept, and the
# node's paths are the cluster's directories.
: >"$D/made-dirs"
for p in "${NODE_PATHS[@]}"; do
  mkdir -p "$D/node$p"
  # The mount point on the host, and each missing parent, noted for `down` to remove.
  missing=()
  q=$p
  while [[ ! -e $q ]]; do missing=("$q" "${missing[@]}"); q=$(dirname "$q"); done
  for m in "${missing[@]}"; do mkdir "$m" && echo "$m" >>"$D/made-dirs"; done
done
cat >"$D/holder.sh" <<EOF
set -e
mount --make-rprivate /
mkdir -p "$D/cg"
mount --rbind /sys/fs/cgroup "$D/cg"
mount -t sysfs sysfs /sys
mount --move "$D/cg" /sys/fs/cgroup
for p in ${NODE_PATHS[*]}; do mount --bind "$D/node\$p" "\$p"; done
mkdir -p /var/run/netns
mount --bind "$D/node/run-netns" /var/run/netns 2>/dev/null || true
# Shared, as on a node booted by systemd: the kubelet's HostToContainer volumes (the
# DaemonSet's /run/netns) need a shared or slave source. New peer groups: none is the host's.
mount --make-rshared /
echo ready >"$D/holder.ready"
exec sleep infinity
EOF
mkdir -p "$D/node/run-netns"
setsid nsenter --net="/run/netns/$NETNS" unshare --mount --propagation private bash "$D/holder.sh" \
  </dev/null >"$D/logs/holder.log" 2>&1 &
echo $! >"$D/holder.pid"
for _ in $(seq 100); do [[ -f $D/holder.ready ]] && break; sleep 0.05; done
[[ -f $D/holder.ready ]] || die "the node's namespaces did not come up: $(cat "$D/logs/holder.log")"
# setsid, nsenter, unshare and bash each exec the next: the pid is the holder's.
hp=$(cat "$D/holder.pid")
[[ $(readlink "/proc/$hp/ns/mnt") != "$(readlink /proc/self/ns/mnt)" ]] ||
  die "the holder $hp is not in a mount namespace of its own"

cat >"$D/env" <<EOF
KUBECONFIG=$D/admin.kubeconfig
NODE=$NODE
NODE_IP=$NODE_IP
HOST_IP=$HOST_IP
NETNS=$NETNS
HOLDER=$hp
CONTAINERD_SOCK=$D/run/containerd.sock
NODE_MODE=$NODE_MODE
BIN=$BIN
NODES=$NODES
EOF
if [[ $NODES == 2 ]]; then printf 'NODE2=%s\nNODE2_IP=%s\n' "$NODE2" "$NODE2_IP" >>"$D/env"; fi

IN=(nsenter -t "$hp" --net --mount --) LOGS=$D/logs NODE_KUBECONFIG=$D/node.kubeconfig
# ---- etcd, the API server
daemon etcd "$D/bin/etcd" --data-dir "$D/etcd" --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster default=http://127.0.0.1:2380 \
  --unsafe-no-fsync --quota-backend-bytes 1073741824
daemon kube-apiserver "$D/bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
  --bind-address 0.0.0.0 --secure-port 443 --advertise-address "$APISERVER_IP" \
  --tls-cert-file "$D/pki/apiserver.crt" --tls-private-key-file "$D/pki/apiserver.key" \
  --client-ca-file "$D/pki/ca.crt" --token-auth-file "$D/pki/tokens.csv" \
  --authorization-mode Node,RBAC --service-cluster-ip-range "$SERVICE_CIDR" \
  --service-account-key-file "$D/pki/sa.pub" --service-account-signing-key-file "$D/pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --kubelet-preferred-address-types InternalIP --allow-privileged \
  --enable-admission-plugins NodeRestriction --profiling=false \
  --audit-policy-file "$D/audit-policy.yaml" --audit-log-path "$D/logs/audit.log"
wait_for "kube-apiserver" 120 kc get --raw /readyz
say "API server ready after $((SECONDS - start)) s"

# ---- the scheduler and the controller-manager (DaemonSets, ServiceAccounts, claim templates)
daemon kube-scheduler "$D/bin/kube-scheduler" --kubeconfig "$D/scheduler.kubeconfig" \
  --authentication-kubeconfig "$D/scheduler.kubeconfig" --authorization-kubeconfig "$D/scheduler.kubeconfig" \
  --leader-elect=false --secure-port 10259 --bind-address 127.0.0.1
daemon kube-controller-manager "$D/bin/kube-controller-manager" --kubeconfig "$D/cm.kubeconfig" \
  --authentication-kubeconfig "$D/cm.kubeconfig" --authorization-kubeconfig "$D/cm.kubeconfig" \
  --leader-elect=false --secure-port 10257 --bind-address 127.0.0.1 \
  --service-account-private-key-file "$D/pki/sa.key" --root-ca-file "$D/pki/ca.crt" \
  --use-service-account-credentials=true

# The images: the sandbox's pause and a busybox for test pods, as single-layer OCI archives.
PY=${RHD_VENV:-$HOME/.cache/rhd-venv}/bin/python
[[ -x $PY ]] || PY=python3
if [[ ! -f $D/pause.tar ]]; then
  cc -static -Os -s -o "$D/pause" "$REPO/tests/cri/pause.c"
  "$PY" "$REPO/tests/cri/cri.py" - image "$D/pause" localhost/rhd-pause:test "$D/pause.tar" >/dev/null
  "$PY" "$REPO/tests/cri/cri.py" - files-image localhost/rhd-busybox:test "$D/busybox.tar" /bin/sh \
    /bin/busybox "/bin/sh->busybox" "/bin/sleep->busybox" "/bin/cat->busybox" "/bin/ls->busybox" \
    "/bin/ip->busybox" "/bin/grep->busybox" "/bin/env->busybox" >/dev/null 2>&1 ||
    "$PY" "$REPO/tests/cri/cri.py" - files-image localhost/rhd-busybox:test "$D/busybox.tar" /bin/sh \
      /bin/busybox "/bin/sleep->busybox" "/bin/cat->busybox" "/bin/ls->busybox" "/bin/ip->busybox" \
      "/bin/grep->busybox" "/bin/env->busybox" >/dev/null
fi
kc apply -f "$REPO/tests/cluster/nad-crd.yaml" >/dev/null
kc apply -f "$BIN/whereabouts.cni.cncf.io_ippools.yaml" \
  -f "$BIN/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml" >/dev/null

if [[ $NODE_MODE == vm ]]; then
  say "control plane up in $((SECONDS - start)) s; the node: cluster.sh node $D (in the VM)"
  exit 0
fi
ROOT=$D/node RUN=$D/run KUBELET_ADDRESS=$NODE_IP
node_up
say "up in $((SECONDS - start)) s: node $NODE Ready at $NODE_IP; KUBECONFIG=$D/admin.kubeconfig"
