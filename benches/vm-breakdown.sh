#!/usr/bin/env bash
# benches/vm-breakdown.sh: where does an RDMA ADD spend its time? Boots the RDMA VM
# (tests/vm/vm.sh, the project's harness; shared RDMA netns mode, soft device rxe), runs
# ADD+DEL of one veth NIC with static IPAM and "rdma":{"softDevice":"rxe"} a few times under
# `strace --seccomp-bpf` on the step-marking syscalls only, and splits each ADD into steps (benches/strace_steps.py).
#
#   benches/vm-breakdown.sh [PLUGIN] [ITERATIONS]     (run as root from the repo root)
#
# PLUGIN defaults to target/release/rdma-host-device. The guest runs under TCG unless KVM is
# usable, so absolute times are inflated; read the shares, and compare steps with each other.
set -euo pipefail
if [[ ${RDMA_VM:-} != 1 ]]; then
  cd "$(dirname "$0")/.."
  PLUGIN=$(readlink -f "${1:-target/release/rdma-host-device}")
  exec tests/vm/vm.sh --timeout "${RDMA_VM_TIMEOUT:-600}" \
    "$PWD/benches/vm-breakdown.sh" "$PLUGIN" "${2:-7}"
fi

# ------------------------------------------------------------------ guest side
PLUGIN=$1 N=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
W=$HERE/../target/bench/vm  # in the shared (read-write) repo, to read traces afterwards
rm -rf "$W"; mkdir -p "$W"
# state and log on the guest's own (tmpfs-backed) filesystem: the shared repo is 9p, whose
# slow metadata and fsync would be charged to the plugin
L=/run/rhdb-vm; mkdir -p "$L"
modprobe rdma_rxe
ip link add rbv0 type veth peer name rbv1
ip link set rbv1 up
ip addr add 10.66.0.1/24 dev rbv1
ip netns add rbvpod
ip -n rbvpod link set lo up
mkdir -p "$W/bin"
ln -s "$PLUGIN" "$W/bin/rdma-host-device"
echo "{\"stateDir\":\"$L/state\",\"logDir\":\"$L\"}" >"$L/node.json"
export RDMA_HOST_DEVICE_NODE_CONFIG=$L/node.json
cat >"$W/conf.json" <<EOF
{"cniVersion":"1.0.0","name":"vmbench","type":"rdma-host-device","device":"rbv0",
 "rdma":{"softDevice":"rxe"},"logLevel":"debug","logFile":"plugin.log",
 "ipam":{"type":"static","addresses":[{"address":"10.66.0.2/24","gateway":"10.66.0.1"}],
         "routes":[{"dst":"0.0.0.0/0"}]}}
EOF
export CNI_NETNS=/run/netns/rbvpod CNI_IFNAME=net1 CNI_PATH=$W/bin:/usr/lib/cni
echo "guest: $(uname -r), $(nproc) vCPU, accel: $(grep -qw hypervisor /proc/cpuinfo && echo vm), rdma netns mode: $(rdma system show netns 2>/dev/null | awk '{print $2}')"
# Variant "nolib": libibverbs hidden (a private mount namespace binds /dev/null over it), so
# the plugin starts without it and verifies GIDs through sysfs: what a lazy libibverbs load,
# or a sysfs-only GID check, would cost.
LIB=$(readlink -f /lib/x86_64-linux-gnu/libibverbs.so.1 2>/dev/null || true)
nolib() { unshare -m sh -c "mount --bind /dev/null '$LIB' && exec \"\$0\" \"\$@\"" "$@"; }
# the same wrapper, binding over a dummy file instead, so untraced times carry the same overhead
touch "$L/dummy"
asis() { unshare -m sh -c "mount --bind /dev/null '$L/dummy' && exec \"\$0\" \"\$@\"" "$@"; }
# Only the syscalls that mark a step are traced, and through a seccomp filter, so every other
# syscall (the loader's mmaps, libibverbs' provider dlopens, sysfs reads) runs at full speed:
# a plain `strace -f` inflates syscall-heavy steps several times over and skews the split.
TRACE=(strace -f --seccomp-bpf -tt -T -e trace=execve,socket,sendto,sendmsg,recvfrom,recvmsg,setns,clone,clone3,vfork,wait4,fsync,exit_group)
plain_add=() plain_del=() nolib_add=() nolib_del=()
for i in $(seq "$N"); do
  export CNI_CONTAINERID=vmb$i
  # one plain cycle (no strace) for the total, one traced cycle for the split
  s=$(date +%s%N)
  CNI_COMMAND=ADD asis "$PLUGIN" <"$W/conf.json" >"$W/add$i.json"
  m=$(date +%s%N)
  CNI_COMMAND=DEL asis "$PLUGIN" <"$W/conf.json" >/dev/null
  e=$(date +%s%N)
  plain_add+=($(( (m - s) / 1000 ))) plain_del+=($(( (e - m) / 1000 )))
  export CNI_CONTAINERID=vmbn$i
  s=$(date +%s%N)
  CNI_COMMAND=ADD nolib "$PLUGIN" <"$W/conf.json" >/dev/null
  m=$(date +%s%N)
  CNI_COMMAND=DEL nolib "$PLUGIN" <"$W/conf.json" >/dev/null
  e=$(date +%s%N)
  nolib_add+=($(( (m - s) / 1000 ))) nolib_del+=($(( (e - m) / 1000 )))
  CNI_CONTAINERID=vmbnt$i CNI_COMMAND=ADD nolib "${TRACE[@]}" -o "$W/nolib-add$i.st" "$PLUGIN" <"$W/conf.json" >/dev/null
  CNI_CONTAINERID=vmbnt$i CNI_COMMAND=DEL nolib "${TRACE[@]}" -o "$W/nolib-del$i.st" "$PLUGIN" <"$W/conf.json" >/dev/null
  export CNI_CONTAINERID=vmbt$i
  CNI_COMMAND=ADD asis "${TRACE[@]}" -o "$W/add$i.st" "$PLUGIN" <"$W/conf.json" >/dev/null
  CNI_COMMAND=DEL asis "${TRACE[@]}" -o "$W/del$i.st" "$PLUGIN" <"$W/conf.json" >/dev/null
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END{printf "%.0f ms", a[int((NR+1)/2)]/1000}'; }
echo "untraced (both through the same unshare wrapper), as is:          ADD $(med "${plain_add[@]}")  DEL $(med "${plain_del[@]}")   (us: ${plain_add[*]} / ${plain_del[*]})"
echo "untraced, no libibverbs:  ADD $(med "${nolib_add[@]}")  DEL $(med "${nolib_del[@]}")   (us: ${nolib_add[*]} / ${nolib_del[*]})"
echo "-- ADD steps, as is (libibverbs loaded at start, GIDs through verbs)"
python3 "$HERE/strace_steps.py" "$W"/add*.st
echo "-- ADD steps, no libibverbs (GIDs through sysfs)"
python3 "$HERE/strace_steps.py" "$W"/nolib-add*.st
echo "-- DEL steps, as is"
python3 "$HERE/strace_steps.py" "$W"/del*.st
echo "-- DEL steps, no libibverbs"
python3 "$HERE/strace_steps.py" "$W"/nolib-del*.st
echo "-- plugin log of the last traced ADD/DEL (debug)"
cp "$L/plugin.log" "$W/plugin.log"
grep -E "vmbt$N" "$W/plugin.log" | tail -12
