#!/usr/bin/env bash
# tests/vm/smoke.sh - prove the VM harness and its RDMA modules work.
#
#   tests/vm/smoke.sh                 all cases, one VM boot each
#   tests/vm/smoke.sh shared ...      only the named cases
#
# cases:
#   shared          rdma_rxe on a veth shows a GID in ibv_devinfo -v; siw loads and
#                   'rdma link add siw0 type siw netdev v1' works
#   exclusive       (--exclusive) rdma_rxe_netns on the virtio NIC: the device moves
#                   into a netns and back, GID ::ffff:10.9.9.2 RoCE v2 in the pod, both
#                   return to the host when the netns is deleted; a verbs user alive
#                   during the move exits cleanly
#   exclusive-slub  the same with slub_debug=FZP (catches use-after-free)
# Exits non-zero if any expectation fails; the last line is 'smoke: N passed, N failed'.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

# ------------------------------------------------------------------ guest side
if [[ ${RDMA_VM:-} == 1 ]]; then
  PASS=0 FAIL=0
  ok()   { echo "  ok   $*"; PASS=$((PASS+1)); }
  bad()  { echo "  FAIL $*"; FAIL=$((FAIL+1)); }
  # expect DESC CMD...: CMD must succeed
  expect() { local d=$1; shift; if out=$("$@" 2>&1); then ok "$d"; else bad "$d: $out"; fi; }
  # poll DESC SECONDS CMD...: CMD must succeed before the deadline
  poll() {
    local d=$1 t=$2 end; shift 2; end=$((SECONDS+t))
    while ! out=$("$@" 2>&1); do
      if ((SECONDS >= end)); then bad "$d (after ${t}s): $out"; return 1; fi
      sleep 0.3
    done
    ok "$d"
  }
  has()     { grep -qE -- "$2" <<<"$1"; }           # TEXT REGEX
  lists()   { rdma dev show | grep -w "$1" >/dev/null; }       # is RDMA device $1 visible here?
  no_oops() { ! dmesg | grep -E 'BUG:|Oops|general protection|WARNING:|Couldn.t create ib_mad QP1'; }
  finish()  { echo "  checks: $PASS passed, $FAIL failed"; [[ $FAIL == 0 ]]; exit; }

  case_shared() {
    expect "modprobe rdma_rxe" modprobe rdma_rxe
    expect "veth v0/v1 up with 10.7.7.1" sh -c 'ip link add v0 type veth peer name v1 &&
      ip link set v0 up && ip link set v1 up && ip addr add 10.7.7.1/24 dev v0'
    expect "rdma link add rxe0 type rxe netdev v0" rdma link add rxe0 type rxe netdev v0
    poll "ibv_devinfo -v -d rxe0 shows GID ::ffff:10.7.7.1 (RoCE v2)" 15 \
      sh -c 'ibv_devinfo -v -d rxe0 | grep -E "GID\[ *[0-9]+\]:.*::ffff:10\.7\.7\.1, RoCE v2"'
    expect "modprobe siw" modprobe siw
    expect "rdma link add siw0 type siw netdev v1" rdma link add siw0 type siw netdev v1
    poll "siw0/1 ACTIVE on v1" 10 sh -c 'rdma link show siw0/1 | grep -E "state ACTIVE.*netdev v1"'
    expect "ibv_devinfo -d siw0 (iWARP)" sh -c 'ibv_devinfo -d siw0 | grep "transport:.*iWARP" >/dev/null'
    expect "no oops/warning in dmesg" no_oops
    finish
  }

  case_exclusive() {
    local nic=$RDMA_VM_NIC gid='::ffff:10\.9\.9\.2, RoCE v2' pp
    echo "  NIC $nic at $RDMA_VM_NIC_PCI; kernel cmdline: $(cat /proc/cmdline)"
    expect "NIC $nic is the PCI function $RDMA_VM_NIC_PCI" \
      sh -c "readlink -f /sys/class/net/$nic/device | grep '/$RDMA_VM_NIC_PCI/' >/dev/null"
    expect "modprobe rdma_rxe_netns" modprobe rdma_rxe_netns
    expect "rdma system: netns exclusive" sh -c 'rdma system show | grep "netns exclusive" >/dev/null'
    expect "rdma link add rxe0 type rxe_ns netdev $nic" sh -c "ip link set $nic up && rdma link add rxe0 type rxe_ns netdev $nic"
    poll "rxe0 has the link-local GID in the host" 15 sh -c 'ibv_devinfo -v -d rxe0 | grep "GID\[ *0\]:.*fe80:" >/dev/null'
    # a verbs user alive across the move: it holds mmapped CQ/QP rings
    ibv_rc_pingpong -d rxe0 -g 0 >/tmp/pp.log 2>&1 &
    pp=$!
    poll "a verbs user (ibv_rc_pingpong server) has rxe0's rings mmapped" 10 grep -q uverbs "/proc/$pp/maps"
    expect "ip netns add pod" ip netns add pod
    expect "rdma dev set rxe0 netns pod" rdma dev set rxe0 netns pod
    if lists rxe0; then bad "host still lists rxe0"; else ok "host no longer lists rxe0"; fi
    expect "pod lists rxe0" ip netns exec pod sh -c 'rdma dev show | grep -w rxe0 >/dev/null'
    kill "$pp" 2>/dev/null; wait "$pp" 2>/dev/null
    ok "verbs user gone after the move (rc ignored)"
    expect "ip link set $nic netns pod; addr 10.9.9.2/24; up" sh -c "ip link set $nic netns pod &&
      ip -n pod addr add 10.9.9.2/24 dev $nic && ip -n pod link set $nic up"
    poll "pod: ibv_devinfo -v shows ::ffff:10.9.9.2 RoCE v2" 15 \
      sh -c "ip netns exec pod ibv_devinfo -v -d rxe0 | grep -E 'GID\[ *[0-9]+\]:.*$gid'"
    expect "pod: rdma link rxe0/1 ACTIVE on $nic" \
      sh -c "ip netns exec pod rdma link show rxe0/1 | grep -E 'state ACTIVE.*netdev $nic'"
    expect "ip netns del pod" ip netns del pod
    poll "rxe0 back in the host" 15 lists rxe0
    poll "$nic back in the host" 15 ip link show "$nic"
    expect "host: rdma link rxe0/1 on $nic again" sh -c "rdma link show rxe0/1 | grep 'netdev $nic' >/dev/null"
    expect "second move into a new netns works" sh -c 'ip netns add pod2 && rdma dev set rxe0 netns pod2 &&
      ip netns exec pod2 rdma dev show | grep -w rxe0 >/dev/null && ip netns del pod2'
    poll "rxe0 back after the second netns dies" 15 lists rxe0
    expect "no oops/warning (or ib_mad QP1 failure) in dmesg" no_oops
    finish
  }

  case "${1:-}" in
    shared) case_shared ;;
    exclusive) case_exclusive ;;
    *) echo "smoke.sh: unknown guest case '${1:-}'" >&2; exit 2 ;;
  esac
fi

# ------------------------------------------------------------------ host side
CASES=("$@")
[[ ${#CASES[@]} -eq 0 ]] && CASES=(shared exclusive exclusive-slub)
PASSED=0 FAILED=0
for c in "${CASES[@]}"; do
  case $c in
    shared)         args=() guest=shared ;;
    exclusive)      args=(--exclusive) guest=exclusive ;;
    exclusive-slub) args=(--exclusive --append slub_debug=FZP) guest=exclusive ;;
    *) echo "smoke.sh: unknown case $c" >&2; exit 2 ;;
  esac
  echo "== $c: vm.sh ${args[*]}"
  t=$SECONDS
  "$HERE/vm.sh" "${args[@]}" --timeout 300 "$HERE/smoke.sh" "$guest"
  rc=$?
  if [[ $rc == 0 ]]; then PASSED=$((PASSED+1)); echo "== $c: ok ($((SECONDS-t)) s)"
  else FAILED=$((FAILED+1)); echo "== $c: FAILED, exit $rc ($((SECONDS-t)) s)"; fi
done
echo "smoke: $PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
