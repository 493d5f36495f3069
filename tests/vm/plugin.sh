#!/usr/bin/env bash
# tests/vm/plugin.sh - the plugin's RDMA tests, run INSIDE the RDMA VM (tests/vm/run.sh boots
# it). Every ADD/CHECK/DEL goes through the libcni driver (the client containerd, CRI-O and
# Multus use); assertions look at what a user would: `rdma`, `ibv_devinfo` inside the pod,
# links on the host, the IPAM store.
#
#   plugin.sh GROUP      GROUP: shared | exclusive-stock | exclusive-move
#
# shared (netns mode shared, stock rdma_rxe + our siw.ko):
#   soft-rxe      softDevice rxe: the pod's IP shows as a RoCE v2 GID in ibv_devinfo inside the
#                 pod; CHECK verifies again; DEL leaves no RDMA device and the NIC home
#   soft-siw      softDevice siw: iWARP, port ACTIVE verified; DEL cleans up
#   siw-traffic   two pods, each given one end of a veth pair + softDevice siw: rping between them
#   rxe-on-host   a stock rxe already bound to the NIC would die with the move: refused (112),
#                 nothing changed; the same with rdma.isolation "none"
#   isolation     rdma.isolation "exclusive" in shared mode: refused (111), nothing changed
#   no-verbs      libibverbs hidden: ADD still verifies the GIDs through sysfs
#   soft-name-clash  the software device's name is taken by a device on another NIC: ADD fails
#                 (114, saying so) and its rollback leaves that device alone
#   gid-timeout   a too-short rdma.gidTimeoutMs on a netdev with no carrier: ADD fails with 113 and
#                 rolls back (NIC home, IP released, soft device gone)
#   rxe-port-down an rxe port without carrier (its GIDs still there): ADD 113 naming the carrier,
#                 STATUS 50 for the NIC up without carrier, CHECK 106 once the carrier goes
#   soft-held-open a process in another pod holds the pod's rxe open: DEL answers 11 at once
#                 naming it, keeping NIC, address and state; after it exits DEL deletes the device
#   rdma-name-swap a pod swaps two rxe devices' names: allowedNics.rdmaDevices (by name or GUID)
#                 still refuses the forbidden NIC (107), rdmaDevice by name is refused (111), by GUID
#                 it selects the right NIC
# exclusive-stock (netns mode exclusive, stock rdma_rxe):
#   move-refused  the kernel answers EOPNOTSUPP to moving rxe: ADD fails (112) before the NIC leaves;
#                 NIC home, IP released, rxe0 still on the host
#   none-keeps-rxe rdma.isolation "none" on a NIC with a host rxe: refused (112), rxe0 survives
#   soft-refused  softDevice in exclusive mode: refused (111)
# exclusive-move (netns mode exclusive, the test-only rdma_rxe_netns on the VM's virtio NIC):
#   move          pciBusID selects the virtio NIC; ADD moves the RDMA device into the pod (the
#                 host no longer lists it, the pod does), verbs in the pod show the GID, 1.1.0
#                 result has pciID; DEL brings both back under their own names
#   renamed-in-pod the pod renames its RDMA device: DEL brings it home under the node's name
#   used-on-host  a host process holds the RDMA device open: ADD refuses (107) naming it;
#                 after it exits ADD takes the device
#   rdma-selector the same NIC selected by "rdmaDevice"
#   device-info   deviceID + CNIDeviceInfoFile capabilities as Multus passes them: the file names
#                 the NIC's PCI address and RDMA device; DEL removes it
#   netns-death   deviceID capability; the pod's netns is deleted without DEL: both come back to
#                 the host (the NIC as net1); the next ADD restores the NIC's name and succeeds
#   crash         kill -9 at every ADD step boundary (RHD_FAULT, debug build), then DEL: RDMA
#                 device and NIC home, IP free, no state; an error after IPAM rolls back
# (shared also has crash-soft: kill -9 after the software device / after IPAM, then DEL)
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh" >&2
  exit 2
fi
GROUP=${1:?usage: plugin.sh shared|exclusive-stock|exclusive-move}
BIN=${RHD_BIN:-$REPO/target/debug/rdma-host-device}
DRIVER=${RHD_DRIVER:-$REPO/target/vm/libcni-driver}
WORK=$(mktemp -d)
# The node's settings (state and log directories) come from the node configuration, not the NAD.
# ipamPaths: the defaults plus host-local's dataDir below ($WORK/ipam), never the stateDir or logDir.
echo "{\"stateDir\":\"$WORK/state\",\"logDir\":\"$WORK\",\"deviceInfoDir\":\"$WORK/devinfo\",\"ipamPaths\":[\"/var/lib/cni/networks\",\"/run/cni\",\"/var/run/cni\",\"$WORK/ipam\"]}" >"$WORK/node.json"
export RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json
PLUGINS=$WORK/bin
mkdir -p "$PLUGINS"
ln -s "$BIN" "$PLUGINS/rdma-host-device"
CNI_PATH=$PLUGINS:/usr/lib/cni
PASS=0 FAIL=0
ok()  { echo "  ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "  FAIL $*"; FAIL=$((FAIL + 1)); }
case_() { echo "--- $*"; }

# check DESC CMD...: CMD must succeed.
check() { local d=$1; shift; if out=$("$@" 2>&1); then ok "$d"; else bad "$d: $out"; fi; }
# check_not DESC CMD...: CMD must fail.
check_not() { local d=$1; shift; if out=$("$@" 2>&1); then bad "$d: $out"; else ok "$d"; fi; }

# cni VERB CONF CID [extra driver args]: run the libcni driver; stdout in $OUT, status in $RC.
cni() {
  local verb=$1 conf=$2 cid=$3; shift 3
  OUT=$("$DRIVER" -cmd "$verb" -conf "$conf" -netns "${NETNS:-}" -cid "$cid" -ifname "${IFNAME:-net1}" \
        -path "$CNI_PATH" -cache "$WORK/cache" "$@" 2>"$WORK/stderr")
  RC=$?
  [[ $RC == 0 ]] || { echo "    driver $verb exit $RC: $OUT"; sed 's/^/    | /' "$WORK/stderr" | tail -15; }
}
# expect_code N: the last cni call failed with plugin error code N.
expect_code() {
  local got
  got=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("code"))' "$OUT" 2>/dev/null)
  if [[ $RC != 0 && $got == "$1" ]]; then ok "error code $1"; else bad "expected error code $1, got exit $RC: $OUT"; fi
}
json() { python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(eval(sys.argv[2], {"r": r}))' "$1" "$2"; }

conf() {  # conf FILE NAME SELECTOR-JSON RDMA-JSON IPAM-JSON [VERSION]
  cat >"$1" <<EOF
{"cniVersion":"${6:-1.0.0}","name":"$2","type":"rdma-host-device",$3,
 "rdma":$4,"ipam":$5,"logFile":"plugin.log","logLevel":"debug"}
EOF
}
host_local() { echo "{\"type\":\"host-local\",\"subnet\":\"$1\",\"dataDir\":\"$WORK/ipam\"}"; }
ips_left() { find "$WORK/ipam" -type f -name '*.*.*.*' 2>/dev/null | wc -l; }
rdma_devs() { rdma -j dev show 2>/dev/null | python3 -c 'import json,sys; print(" ".join(d["ifname"] for d in json.load(sys.stdin)))'; }
pod_rdma_devs() { ip netns exec "$1" rdma -j dev show 2>/dev/null | python3 -c 'import json,sys; print(" ".join(d["ifname"] for d in json.load(sys.stdin)))'; }
has_gid() {  # has_gid NETNS ADDRESS: ibv_devinfo -v inside NETNS lists ::ffff:ADDRESS as RoCE v2
  ip netns exec "$1" ibv_devinfo -v 2>/dev/null | grep "::ffff:$2, RoCE v2" >/dev/null
}
link_is() {  # link_is NAME MTU: on the host with that name and MTU
  ip -j link show "$1" 2>/dev/null | python3 -c "import json,sys; l=json.load(sys.stdin)[0]; sys.exit(0 if l['mtu']==$2 else 1)"
}
# wait_ctx DEV: until `rdma res show ctx` (iproute2's own view) lists a verbs context on DEV.
wait_ctx() { for _ in $(seq 100); do rdma res show ctx dev "$1" 2>/dev/null | grep pid >/dev/null && return 0; sleep 0.1; done; return 1; }
veth() { ip link add "$1" mtu "${3:-1500}" type veth peer "$2" && ip link set "$2" up; }

shared() {
  modprobe rdma_rxe || { bad "modprobe rdma_rxe"; return; }
  modprobe siw || { bad "modprobe siw"; return; }

  case_ soft-rxe
  ip netns add p1; NETNS=/var/run/netns/p1
  veth nic1 peer1 1400
  conf "$WORK/rxe.conf" rxe-net '"device":"nic1"' '{"softDevice":"rxe"}' "$(host_local 10.60.0.0/24)"
  cni add "$WORK/rxe.conf" c-rxe
  check "ADD succeeds" test "$RC" = 0
  IP=$(json "$OUT" 'r["ips"][0]["address"].split("/")[0]')
  check "result names net1 in the pod" test "$(json "$OUT" 'r["interfaces"][0]["name"]')" = net1
  check "ibv_devinfo -v in the pod shows ::ffff:$IP as RoCE v2" has_gid p1 "$IP"
  check "the pod lists the rxe device" bash -c "ip netns exec p1 rdma link show | grep 'netdev net1' >/dev/null"
  cni check "$WORK/rxe.conf" c-rxe
  check "CHECK succeeds (GIDs verified again)" test "$RC" = 0
  cni del "$WORK/rxe.conf" c-rxe
  check "DEL succeeds" test "$RC" = 0
  check "no RDMA device is left" test -z "$(rdma_devs)"
  check "nic1 is home with MTU 1400" link_is nic1 1400
  check "the IP is released" test "$(ips_left)" = 0
  check "no state file is left" test -z "$(find "$WORK/state" -name '*.json')"
  ip netns del p1; ip link del nic1

  case_ soft-siw
  ip netns add p2; NETNS=/var/run/netns/p2
  veth nic2 peer2
  conf "$WORK/siw.conf" siw-net '"device":"nic2"' '{"softDevice":"siw"}' "$(host_local 10.61.0.0/24)"
  cni add "$WORK/siw.conf" c-siw
  check "ADD with siw succeeds" test "$RC" = 0
  check "the pod lists a siw device on net1" bash -c "ip netns exec p2 rdma link show | grep 'netdev net1' >/dev/null"
  check "the plugin verified the iWARP port state" grep -q "port is ACTIVE" "$WORK/plugin.log"
  cni del "$WORK/siw.conf" c-siw
  check "DEL succeeds" test "$RC" = 0
  check "no RDMA device is left" test -z "$(rdma_devs)"
  check "nic2 is home" link_is nic2 1500
  ip netns del p2; ip link del nic2

  case_ siw-traffic
  ip netns add pa; ip netns add pb
  ip link add nica type veth peer nicb
  # A veth whose peer is in another namespace (the second ADD's) may have been made from
  # there (docs/trust.md): this node names the pair in allowedNics.
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["allowedNics"]={"names":["nica","nicb"]}; json.dump(c,open(sys.argv[2],"w"))' "$WORK/node.json" "$WORK/pair-node.json"
  conf "$WORK/ta.conf" traffic '"device":"nica"' '{"softDevice":"siw"}' \
    '{"type":"static","addresses":[{"address":"10.62.0.1/24"}]}'
  conf "$WORK/tb.conf" traffic '"device":"nicb"' '{"softDevice":"siw"}' \
    '{"type":"static","addresses":[{"address":"10.62.0.2/24"}]}'
  # Each end has carrier only once the other is up in its pod, so the two pods come up
  # together, as pods of one job do: each ADD waits for its port to become ACTIVE.
  # shellcheck disable=SC2030,SC2031 # each ADD's own node configuration, in its subshell
  (export RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/pair-node.json
   NETNS=/var/run/netns/pa cni add "$WORK/ta.conf" c-ta; echo "$RC" >"$WORK/rc-a") &
  # shellcheck disable=SC2030,SC2031
  (export RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/pair-node.json
   NETNS=/var/run/netns/pb cni add "$WORK/tb.conf" c-tb; echo "$RC" >"$WORK/rc-b") &
  wait
  check "both ADDs succeed (run in parallel)" test "$(cat "$WORK/rc-a")$(cat "$WORK/rc-b")" = 00
  ip netns exec pb rping -s -a 10.62.0.2 -C 5 >"$WORK/rping-server" 2>&1 &
  SERVER=$!
  sleep 1
  if timeout 60 ip netns exec pa rping -c -a 10.62.0.2 -C 5 -v >"$WORK/rping-client" 2>&1; then
    ok "rping pod a -> pod b over siw: $(grep -c 'ping data' "$WORK/rping-client") exchanges"
  else
    bad "rping failed: $(tail -5 "$WORK/rping-client")"
  fi
  wait $SERVER 2>/dev/null
  NETNS=/var/run/netns/pa cni del "$WORK/ta.conf" c-ta; A=$RC
  NETNS=/var/run/netns/pb cni del "$WORK/tb.conf" c-tb; B=$RC
  check "both DELs succeed" test "$A$B" = 00
  check "no RDMA device is left" test -z "$(rdma_devs)"
  check "both NICs are home" bash -c "ip link show nica && ip link show nicb" 
  ip netns del pa; ip netns del pb; ip link del nica

  case_ rxe-on-host
  ip netns add p3; NETNS=/var/run/netns/p3
  veth nic3 peer3
  rdma link add rxe3 type rxe netdev nic3
  conf "$WORK/h.conf" host-rxe '"device":"nic3"' '{}' "$(host_local 10.63.0.0/24)"
  cni add "$WORK/h.conf" c-h
  expect_code 112
  check "nic3 stayed on the host" link_is nic3 1500
  check "rxe3 still exists" bash -c "rdma dev show rxe3"
  check "no IP was taken" test "$(ips_left)" = 0
  # "Do not touch RDMA" must not mean "destroy the node's rxe3" (issue 17, case 4).
  conf "$WORK/hn.conf" host-rxe-none '"device":"nic3"' '{"isolation":"none"}' "$(host_local 10.63.0.0/24)"
  cni add "$WORK/hn.conf" c-hn
  expect_code 112
  check "with isolation none too: nic3 stayed on the host and rxe3 still exists" bash -c "ip link show nic3 && rdma dev show rxe3"
  rdma link delete rxe3; ip netns del p3; ip link del nic3

  case_ isolation
  ip netns add p4; NETNS=/var/run/netns/p4
  veth nic4 peer4
  rdma link add rxe4 type rxe netdev nic4
  conf "$WORK/i.conf" iso '"device":"nic4"' '{"isolation":"exclusive"}' "$(host_local 10.64.0.0/24)"
  cni add "$WORK/i.conf" c-i
  expect_code 111
  check "the message says how to set exclusive mode" bash -c "grep -q 'netns_mode=0' <<<'$OUT'"
  check "nic4 stayed on the host" link_is nic4 1500
  rdma link delete rxe4; ip netns del p4; ip link del nic4

  case_ no-verbs
  mkdir -p "$WORK/hidden"
  mv /usr/lib/x86_64-linux-gnu/libibverbs.so.1* "$WORK/hidden/"
  ip netns add p5; NETNS=/var/run/netns/p5
  veth nic5 peer5
  : >"$WORK/plugin.log"
  conf "$WORK/nv.conf" noverbs '"device":"nic5"' '{"softDevice":"rxe"}' "$(host_local 10.65.0.0/24)"
  cni add "$WORK/nv.conf" c-nv
  check "ADD succeeds without libibverbs" test "$RC" = 0
  check "the log says verbs were not available" grep -q "libibverbs was not available" "$WORK/plugin.log"
  check "the log names the verified GID" grep -q "::ffff:10.65.0" "$WORK/plugin.log"
  cni del "$WORK/nv.conf" c-nv
  check "DEL succeeds" test "$RC" = 0
  mv "$WORK/hidden/"* /usr/lib/x86_64-linux-gnu/
  ip netns del p5; ip link del nic5

  case_ crash-soft
  # kill -9 after the software device was made and after IPAM, then DEL: no RDMA device left.
  for point in add:after-soft-rdma add:after-ipam; do
    ip netns add pc; NETNS=/var/run/netns/pc
    veth nic7 peer7
    conf "$WORK/c.conf" crash '"device":"nic7"' '{"softDevice":"rxe"}' "$(host_local 10.67.0.0/24)"
    RHD_FAULT=$point:kill cni add "$WORK/c.conf" c-c >/dev/null
    check_not "ADD killed at $point reports failure" test "$RC" = 0
    cni del "$WORK/c.conf" c-c
    check "DEL after a kill at $point succeeds" test "$RC" = 0
    check "after $point: no RDMA device is left" test -z "$(rdma_devs)"
    check "after $point: nic7 is home, no IP, no state" bash -c "ip link show nic7 >/dev/null && test \"$(ips_left)\" = 0 && test -z \"\$(find $WORK/state -name '*.json')\""
    ip netns del pc; ip link del nic7
  done

  case_ soft-name-clash
  # The software device's name (rxe_<attachment key>) is already a device on another NIC: ADD
  # fails with its own message, and its rollback leaves that device alone (it used to delete it).
  ip netns add p8; NETNS=/var/run/netns/p8
  veth nic8 peer8; veth nic9 peer9
  KEY=$(python3 -c 'import sys
h = 0xcbf29ce484222325
for b in (sys.argv[1] + "/" + sys.argv[2]).encode():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
print("%016x" % h)' c-clash net1)
  rdma link add "rxe_$KEY" type rxe netdev nic9
  conf "$WORK/cl.conf" clash '"device":"nic8"' '{"softDevice":"rxe"}' "$(host_local 10.68.0.0/24)"
  cni add "$WORK/cl.conf" c-clash
  expect_code 114
  check "the message says the name is taken" bash -c "grep -q 'rxe_$KEY' <<<'$OUT' && grep -q 'already exists' <<<'$OUT'"
  check "rxe_$KEY is still there, on nic9" bash -c "rdma link show | grep 'rxe_$KEY/1 .*netdev nic9' >/dev/null"
  check "nic8 is home, no IP, no state" bash -c "ip link show nic8 >/dev/null && test \"$(ips_left)\" = 0 && test -z \"\$(find $WORK/state -name '*.json')\""
  rdma link delete "rxe_$KEY"; ip netns del p8; ip link del nic8; ip link del nic9

  case_ gid-timeout
  ip netns add p6; NETNS=/var/run/netns/p6
  ip link add nic6 type veth peer peer6   # peer left DOWN: no carrier, the port never goes ACTIVE
  conf "$WORK/gt.conf" gidto '"device":"nic6"' '{"softDevice":"siw","gidTimeoutMs":300}' "$(host_local 10.66.0.0/24)"
  cni add "$WORK/gt.conf" c-gt
  expect_code 113
  check "the message says the port is not ACTIVE" bash -c "grep -q 'not ACTIVE' <<<'$OUT'"
  check "no RDMA device is left" test -z "$(rdma_devs)"
  check "nic6 is home" link_is nic6 1500
  check "the IP is released" test "$(ips_left)" = 0
  ip netns del p6; ip link del nic6

  case_ rxe-port-down
  # A RoCE port keeps its GIDs without carrier: ADD must still fail on the DOWN port (113,
  # naming the carrier), STATUS must say so for the NIC up on the host, and CHECK must catch a
  # port that went DOWN after ADD (issue 17, case 3).
  ip netns add pd; NETNS=/var/run/netns/pd
  ip link add nicd type veth peer peerd   # peer left DOWN: no carrier
  conf "$WORK/pd.conf" rxedown '"device":"nicd"' '{"softDevice":"rxe","gidTimeoutMs":300}' "$(host_local 10.69.0.0/24)"
  cni add "$WORK/pd.conf" c-pd
  expect_code 113
  check "the message says the port is not ACTIVE and the netdev has no carrier" bash -c "grep -q 'not ACTIVE' <<<'$OUT' && grep -q 'without carrier' <<<'$OUT'"
  check "no RDMA device is left, nicd is home, no IP" bash -c "test -z \"\$(rdma link show)\" && ip link show nicd >/dev/null && test \"$(ips_left)\" = 0"
  ip link set nicd up
  conf "$WORK/ps.conf" rxedown '"device":"nicd"' '{"softDevice":"rxe","gidTimeoutMs":300}' "$(host_local 10.69.0.0/24)" 1.1.0
  cni status "$WORK/ps.conf" c-pd   # libcni calls STATUS for 1.1.0 configurations only
  expect_code 50
  check "STATUS names the missing carrier" grep -q "without carrier" <<<"$OUT"
  ip link set nicd down
  ip link set peerd up
  conf "$WORK/pu.conf" rxeup '"device":"nicd"' '{"softDevice":"rxe","gidTimeoutMs":3000}' "$(host_local 10.69.0.0/24)"
  cni add "$WORK/pu.conf" c-pu
  check "with carrier, ADD succeeds" test "$RC" = 0
  ip link set peerd down
  cni check "$WORK/pu.conf" c-pu
  expect_code 106
  check "CHECK says the port is not ACTIVE" grep -q "not ACTIVE" <<<"$OUT"
  cni del "$WORK/pu.conf" c-pu
  check "DEL succeeds, no RDMA device is left" bash -c "test $RC = 0 && test -z \"\$(rdma link show)\""
  ip netns del pd; ip link del nicd

  case_ soft-held-open
  # Shared mode shows every device to every pod: a process in ANOTHER pod opens this pod's rxe
  # device. DEL must not sleep in the kernel until it exits: 11 at once, naming it, with the
  # NIC, its address and the state kept; once it exits, DEL deletes the device (issue 17, case 1).
  ip netns add ph; ip netns add pother; NETNS=/var/run/netns/ph
  veth nich peerh
  conf "$WORK/ho.conf" held '"device":"nich"' '{"softDevice":"rxe"}' "$(host_local 10.70.0.0/24)"
  cni add "$WORK/ho.conf" c-ho
  check "ADD succeeds" test "$RC" = 0
  DEV=$(rdma_devs)
  ip netns exec pother ibv_rc_pingpong -d "$DEV" -g 0 >"$WORK/holder.log" 2>&1 &
  HOLDER=$!
  check "a process in another pod holds $DEV open (rdma res show ctx)" wait_ctx "$DEV"
  T0=$(date +%s%N)
  cni del "$WORK/ho.conf" c-ho
  MS=$(( ($(date +%s%N) - T0) / 1000000 ))
  expect_code 11
  check "DEL answered (in $MS ms, driver included) while the holder still runs" kill -0 "$HOLDER"
  check "the message names the holder's pid and command" bash -c "grep -q 'pid $HOLDER (ibv_rc_pingpong)' <<<'$OUT'"
  check "the NIC, its address, the device and the state are kept" bash -c "ip -n ph -4 addr show net1 | grep 10.70.0 >/dev/null && rdma dev show $DEV >/dev/null && test \"$(ips_left)\" = 1 && test -n \"\$(find $WORK/state -name 'c-ho:*.json')\""
  kill "$HOLDER"; wait "$HOLDER" 2>/dev/null
  cni del "$WORK/ho.conf" c-ho
  check "once the holder exits, DEL succeeds" test "$RC" = 0
  check "the device is gone, nich home, no IP, no state" bash -c "test -z \"\$(rdma_devs)\" && ip link show nich >/dev/null && test \"$(ips_left)\" = 0 && test -z \"\$(find $WORK/state -name '*.json')\""
  ip netns del ph; ip netns del pother; ip link del nich

  case_ rdma-name-swap
  # A pod swaps two RDMA device names (shared mode lets it); the node's policy and the
  # rdmaDevice selector go by node GUID, never by a name a pod gave (issue 18 case 5).
  ip netns add p9; NETNS=/var/run/netns/p9
  veth nicok peerok; veth nicbad peerbad
  rdma link add rxok type rxe netdev nicok; rdma link add rxbad type rxe netdev nicbad
  GOK=$(cat /sys/class/infiniband/rxok/node_guid)
  ip netns exec p9 rdma dev set rxok name rxtmp && ip netns exec p9 rdma dev set rxbad name rxok &&
    ip netns exec p9 rdma dev set rxtmp name rxbad
  check "the pod swapped the names (nicbad's device is now rxok)" bash -c "rdma link show | grep 'rxok/1 .*netdev nicbad' >/dev/null"
  for policy in "\"rxok\"" "\"$GOK\""; do
    echo "{\"stateDir\":\"$WORK/state\",\"logDir\":\"$WORK\",\"ipamPaths\":[\"$WORK/ipam\"],\"allowedNics\":{\"rdmaDevices\":[$policy]}}" >"$WORK/swap-node.json"
    conf "$WORK/sw.conf" swap '"device":"nicbad"' '{}' "$(host_local 10.71.0.0/24)"
    RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/swap-node.json cni add "$WORK/sw.conf" c-sw
    expect_code 107
    # (the message has quotes and parentheses: grep it from stdin, never inside bash -c)
    check "rdmaDevices [$policy]: the refusal names nicbad's node GUID" grep -qF "$(cat /sys/class/infiniband/rxok/node_guid)" <<<"$OUT"
  done
  conf "$WORK/sw.conf" swap '"rdmaDevice":"rxok"' '{}' "$(host_local 10.71.0.0/24)"
  RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/swap-node.json cni add "$WORK/sw.conf" c-sw
  expect_code 111
  check "rdmaDevice by name in shared mode: refused, naming the GUID to use" grep -q rename <<<"$OUT"
  # By GUID, the selector finds nicok (whose device the pod renamed rxbad) and the policy
  # admits it: what stops ADD now is only that a host rxe dies with the move (112).
  conf "$WORK/sw.conf" swap "\"rdmaDevice\":\"$GOK\"" '{}' "$(host_local 10.71.0.0/24)"
  RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/swap-node.json cni add "$WORK/sw.conf" c-sw
  expect_code 112
  check "rdmaDevice by GUID selected nicok" grep -q "bound to nicok" <<<"$OUT"
  check "both NICs stayed on the host, no IP taken" bash -c "ip link show nicok >/dev/null && ip link show nicbad >/dev/null && test \"$(ips_left)\" = 0"
  rdma link delete rxok; rdma link delete rxbad; ip netns del p9; ip link del nicok; ip link del nicbad

  case_ tunnel-riding
  # An IP tunnel bound to a NIC by `dev` rides it without the kernel listing it as an upper
  # (this kernel has the tunnel modules; the build machine's has none). ADD refuses the NIC
  # both when it scans itself and when the uppers watcher answers, including for a tunnel made
  # after the watcher certified the NIC: the tunnel's own notification must void that.
  local kind mod agent=${BIN%/*}/rdma-host-device-agent wpid
  ip netns add pt; NETNS=/var/run/netns/pt
  veth nict peert
  conf "$WORK/t.conf" tunnel '"device":"nict"' '{}' "$(host_local 10.72.0.0/24)"
  cni add "$WORK/t.conf" c-t
  check "without a tunnel ADD succeeds" test "$RC" = 0
  cni del "$WORK/t.conf" c-t
  for kind in ipip:ipip gre:ip_gre sit:sit ip6tnl:ip6_tunnel; do
    mod=${kind#*:}; kind=${kind%%:*}
    modprobe "$mod" || { bad "modprobe $mod"; continue; }
    ip link add "t-$kind" type "$kind" remote 10.72.9.2 local 10.72.9.1 dev nict 2>/dev/null ||
      ip link add "t-$kind" type "$kind" remote 2001:db8::2 local 2001:db8::1 dev nict
    cni add "$WORK/t.conf" c-t
    expect_code 107
    check "$kind t-$kind bound to nict is named (no watcher)" grep -qF "$kind t-$kind is stacked on it" <<<"$OUT"
    check "nict stayed on the host" link_is nict 1500
    ip link del "t-$kind"
  done
  "$agent" uppers-watch --socket "$WORK/uppers.sock" & wpid=$!
  for _ in $(seq 100); do [[ -S $WORK/uppers.sock ]] && break; sleep 0.1; done
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["uppersSocket"]=sys.argv[2]; json.dump(c,open(sys.argv[1],"w"))' "$WORK/node.json" "$WORK/uppers.sock"
  for _ in 1 2; do  # the first ADD has the watcher certify nict, the second is answered from it
    cni add "$WORK/t.conf" c-t
    check "with the watcher and no tunnel ADD succeeds" test "$RC" = 0
    cni del "$WORK/t.conf" c-t
  done
  ip link add t-gre type gre remote 10.72.9.2 local 10.72.9.1 dev nict
  : >"$WORK/plugin.log"
  cni add "$WORK/t.conf" c-t
  expect_code 107
  check "a tunnel made after the watcher certified nict is named" grep -qF "gre t-gre is stacked on it" <<<"$OUT"
  check "the watcher answered (ADD did not scan itself)" grep -q "the uppers watcher answered for nict" "$WORK/plugin.log"
  ip link del t-gre
  cni add "$WORK/t.conf" c-t
  check "with the tunnel gone ADD succeeds again" test "$RC" = 0
  cni del "$WORK/t.conf" c-t
  kill "$wpid"; wait "$wpid" 2>/dev/null
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c.pop("uppersSocket"); json.dump(c,open(sys.argv[1],"w"))' "$WORK/node.json"
  ip netns del pt; ip link del nict
}

exclusive_stock() {
  modprobe rdma_rxe || { bad "modprobe rdma_rxe"; return; }
  check "the kernel is in exclusive mode" bash -c "rdma system show | grep 'netns exclusive' >/dev/null"

  case_ move-refused
  ip netns add p1; NETNS=/var/run/netns/p1
  veth nic1 peer1 1450
  rdma link add rxe0 type rxe netdev nic1
  conf "$WORK/m.conf" refused '"device":"nic1"' '{}' "$(host_local 10.70.0.0/24)"
  cni add "$WORK/m.conf" c-m
  expect_code 112
  check "the message names the device and EOPNOTSUPP" bash -c "grep -q 'rxe0' <<<'$OUT' && grep -q EOPNOTSUPP <<<'$OUT'"
  check "nic1 is home with MTU 1450" link_is nic1 1450
  check "rxe0 is still on the host" bash -c "rdma dev show rxe0"
  check "the IP is not held" test "$(ips_left)" = 0
  check "no state file" test -z "$(find "$WORK/state" -name '*.json' 2>/dev/null)"

  case_ none-keeps-rxe
  # rdma.isolation "none" would move nic1 alone, and the kernel would destroy rxe0 with it.
  conf "$WORK/n.conf" nonex '"device":"nic1"' '{"isolation":"none"}' "$(host_local 10.72.0.0/24)"
  cni add "$WORK/n.conf" c-n
  expect_code 112
  check "nic1 is home and rxe0 still exists" bash -c "ip link show nic1 && rdma dev show rxe0"

  case_ soft-refused
  conf "$WORK/s.conf" softx '"device":"nic1"' '{"softDevice":"rxe"}' "$(host_local 10.71.0.0/24)"
  rdma link delete rxe0
  cni add "$WORK/s.conf" c-s
  expect_code 111
  check "nic1 stayed on the host" link_is nic1 1450
  ip netns del p1; ip link del nic1
}

exclusive_move() {
  modprobe rdma_rxe_netns || { bad "modprobe rdma_rxe_netns"; return; }
  NIC=${RDMA_VM_NIC:-eth0} PCI=${RDMA_VM_NIC_PCI:-0000:00:05.0}
  ip link set "$NIC" mtu 1480
  rdma link add rxens0 type rxe_ns netdev "$NIC" || { bad "rdma link add rxens0"; return; }

  case_ move
  ip netns add p1; NETNS=/var/run/netns/p1
  conf "$WORK/x.conf" xmove "\"pciBusID\":\"$PCI\"" '{}' "$(host_local 10.80.0.0/24)" 1.1.0
  cni add "$WORK/x.conf" c-x
  check "ADD succeeds" test "$RC" = 0
  IP=$(json "$OUT" 'r["ips"][0]["address"].split("/")[0]' 2>/dev/null)
  check "1.1.0 result carries pciID $PCI" test "$(json "$OUT" 'r["interfaces"][0].get("pciID")' 2>/dev/null)" = "$PCI"
  check "the host no longer lists rxens0" bash -c "! rdma dev show rxens0 2>/dev/null"
  check "the pod lists rxens0" test "$(pod_rdma_devs p1)" = rxens0
  check "ibv_devinfo -v in the pod shows ::ffff:$IP as RoCE v2" has_gid p1 "$IP"
  cni check "$WORK/x.conf" c-x
  check "CHECK succeeds" test "$RC" = 0
  cni del "$WORK/x.conf" c-x
  check "DEL succeeds" test "$RC" = 0
  check "rxens0 is back on the host" bash -c "rdma dev show rxens0"
  check "$NIC is back with MTU 1480" link_is "$NIC" 1480
  check "the pod has no RDMA device" test -z "$(pod_rdma_devs p1)"
  check "the IP is released" test "$(ips_left)" = 0
  ip netns del p1

  case_ pod-tampering
  # A pod with NET_ADMIN rewrites its interface's MAC, alias and name, then hides the NIC in a
  # netns of its own: DEL must not say success while the NIC is held, and must bring it home
  # (with its own MAC) once it can see it again. A real NIC has a permanent MAC; veths do not.
  ip netns add p5; NETNS=/var/run/netns/p5
  MAC=$(cat /sys/class/net/"$NIC"/address)
  conf "$WORK/t.conf" xtamper "\"pciBusID\":\"$PCI\"" '{}' "$(host_local 10.85.0.0/24)"
  cni add "$WORK/t.conf" c-t
  check "ADD succeeds" test "$RC" = 0
  TAG=$(ip -n p5 -j link show net1 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0].get("ifalias",""))')
  ip -n p5 link set net1 down
  ip -n p5 link set net1 address 02:00:00:00:00:99 alias "mine now" name eth9
  ip netns add p5in
  ip -n p5 link set eth9 netns p5in
  # ... and puts a link of its own at the NIC's index, with the NIC's MAC and our tag.
  IDX=$(python3 -c 'import json,glob; print(json.load(open(glob.glob("'"$WORK"'/state/c-t:*.json")[0]))["podIndex"])')
  ip -n p5 link add decoy index "$IDX" address "$MAC" type veth peer decoyp index $((IDX + 100))
  ip -n p5 link set decoy alias "$TAG"
  cni del "$WORK/t.conf" c-t
  check_not "DEL with the NIC hidden by the pod fails" test "$RC" = 0
  check "it says where the NIC is not" grep -q "neither in pod" <<<"$OUT"
  check "the state is kept" test "$(find "$WORK/state" -name 'c-t:*.json' | wc -l)" = 1
  check "the decoy at the NIC's index stayed in the pod" ip -n p5 link show decoy
  ip -n p5 link del decoy
  ip -n p5in link set eth9 netns p5
  cni del "$WORK/t.conf" c-t
  check "DEL once the NIC is back in the pod succeeds" test "$RC" = 0
  check "$NIC is home with MTU 1480" link_is "$NIC" 1480
  check "$NIC has its own MAC again" test "$(cat /sys/class/net/"$NIC"/address)" = "$MAC"
  check "rxens0 is home" bash -c "rdma dev show rxens0"
  check "no IP held, no state" test "$(ips_left)$(find "$WORK/state" -name '*.json' | wc -l)" = 00
  ip netns del p5in; ip netns del p5

  case_ renamed-in-pod
  # The pod renames its RDMA device; DEL brings it home under the node's name (issue 17 case 5).
  ip netns add p6; NETNS=/var/run/netns/p6
  conf "$WORK/rn.conf" xrename "\"pciBusID\":\"$PCI\"" '{"isolation":"exclusive"}' "$(host_local 10.85.0.0/24)"
  cni add "$WORK/rn.conf" c-rn
  check "ADD succeeds" test "$RC" = 0
  ip netns exec p6 rdma dev set rxens0 name podrdma
  check "the pod renamed it" test "$(pod_rdma_devs p6)" = podrdma
  cni del "$WORK/rn.conf" c-rn
  check "DEL succeeds" test "$RC" = 0
  check "it is home as rxens0, and no podrdma" bash -c "rdma dev show rxens0 && ! rdma dev show podrdma 2>/dev/null"
  check "$NIC is home" link_is "$NIC" 1480
  ip netns del p6

  case_ used-on-host
  # A host process holds rxens0 open: the exclusive move would cut it off, so ADD refuses (107)
  # naming it, and nothing moves; once it exits, ADD takes the device (issue 17, case 6).
  ip netns add p7; NETNS=/var/run/netns/p7
  ibv_rc_pingpong -d rxens0 -g 0 >"$WORK/holder.log" 2>&1 &
  HOLDER=$!
  check "a host process holds rxens0 open (rdma res show ctx)" wait_ctx rxens0
  conf "$WORK/u.conf" xused "\"pciBusID\":\"$PCI\"" '{}' "$(host_local 10.86.0.0/24)"
  cni add "$WORK/u.conf" c-u
  expect_code 107
  check "the message names the holder's pid and command" bash -c "grep -q 'pid $HOLDER (ibv_rc_pingpong)' <<<'$OUT'"
  check "rxens0 and $NIC stayed on the host, no IP, no state" bash -c "rdma dev show rxens0 >/dev/null && ip link show $NIC >/dev/null && test \"$(ips_left)\" = 0 && test -z \"\$(find $WORK/state -name '*.json')\""
  check "the holder still runs" kill -0 "$HOLDER"
  kill "$HOLDER"; wait "$HOLDER" 2>/dev/null
  cni add "$WORK/u.conf" c-u
  check "once it exits, ADD succeeds" test "$RC" = 0
  cni del "$WORK/u.conf" c-u
  check "DEL succeeds; rxens0 and $NIC are home" bash -c "test $RC = 0 && rdma dev show rxens0 >/dev/null && ip link show $NIC >/dev/null"
  ip netns del p7

  case_ rdma-selector
  ip netns add p2; NETNS=/var/run/netns/p2
  conf "$WORK/r.conf" xsel '"rdmaDevice":"rxens0"' '{"isolation":"exclusive"}' "$(host_local 10.81.0.0/24)"
  cni add "$WORK/r.conf" c-r
  check "ADD by rdmaDevice succeeds" test "$RC" = 0
  check "the pod lists rxens0" test "$(pod_rdma_devs p2)" = rxens0
  cni del "$WORK/r.conf" c-r
  check "DEL succeeds" test "$RC" = 0
  check "rxens0 and $NIC are home" bash -c "rdma dev show rxens0 && ip link show $NIC"
  ip netns del p2

  case_ device-info
  # As Multus calls it for a NAD with a resourceName: deviceID and CNIDeviceInfoFile offered as
  # capability args; the file tells the pod its PCI function and RDMA device (network-status).
  ip netns add p5; NETNS=/var/run/netns/p5
  cat >"$WORK/i.conf" <<EOF
{"cniVersion":"1.0.0","name":"xinfo","type":"rdma-host-device",
 "capabilities":{"deviceID":true,"CNIDeviceInfoFile":true},
 "ipam":$(host_local 10.84.0.0/24),"logFile":"plugin.log"}
EOF
  INFO=$WORK/devinfo/xinfo-c-i_net1   # Multus names it <network>-<containerID>_<ifname>
  cni add "$WORK/i.conf" c-i -cap "deviceID=$PCI" -cap "CNIDeviceInfoFile=$INFO"
  check "ADD with the CNIDeviceInfoFile capability succeeds" test "$RC" = 0
  check "the device-info file names $PCI and rxens0 (spec 1.1.0, type pci)" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["type"] == "pci" and d["version"] == "1.1.0", d
assert d["pci"]["pci-address"] == sys.argv[2] and d["pci"]["rdma-device"] == "rxens0", d' "$INFO" "$PCI"
  cni del "$WORK/i.conf" c-i -cap "deviceID=$PCI" -cap "CNIDeviceInfoFile=$INFO"
  check "DEL succeeds" test "$RC" = 0
  check "DEL removed the device-info file" test ! -e "$INFO"
  check "rxens0 and $NIC are home" bash -c "rdma dev show rxens0 && ip link show $NIC"
  ip netns del p5

  case_ netns-death
  ip netns add p3; NETNS=/var/run/netns/p3
  cat >"$WORK/d.conf" <<EOF
{"cniVersion":"1.0.0","name":"xdeath","type":"rdma-host-device","capabilities":{"deviceID":true},
 "ipam":$(host_local 10.82.0.0/24),"logFile":"plugin.log"}
EOF
  cni add "$WORK/d.conf" c-d -cap "deviceID=$PCI"
  check "ADD by the deviceID capability succeeds" test "$RC" = 0
  ip netns del p3
  check "the RDMA device came back to the host" bash -c "for i in \$(seq 50); do rdma dev show rxens0 >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
  check "the NIC came back to the host as net1" bash -c "for i in \$(seq 50); do ip link show net1 >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
  ip netns add p4; NETNS=/var/run/netns/p4
  conf "$WORK/e.conf" xagain "\"pciBusID\":\"$PCI\"" '{}' "$(host_local 10.83.0.0/24)"
  cni add "$WORK/e.conf" c-e
  check "the next ADD for the same NIC succeeds" test "$RC" = 0
  check "the pod lists rxens0" test "$(pod_rdma_devs p4)" = rxens0
  cni del "$WORK/e.conf" c-e
  check "after DEL the NIC has its own name and MTU again" link_is "$NIC" 1480
  check "rxens0 is home" bash -c "rdma dev show rxens0"
  NETNS= cni del "$WORK/d.conf" c-d
  check "DEL of the dead pod succeeds and releases its IP" test "$RC" = 0
  check "no IP is held" test "$(ips_left)" = 0
  ip netns del p4

  case_ forged-tag-del-first
  # The pod writes a tag of our form on its NIC naming another NIC (victim0, MTU 1280) and an
  # owner no record has, then dies; its attachment's DEL comes before any GC (attack review
  # L1). The NIC is still this attachment's by its device: DEL brings it home under its own
  # name and MTU, and nothing later renames it to the forged one.
  ip netns add p8; NETNS=/var/run/netns/p8
  conf "$WORK/f.conf" xforge "\"pciBusID\":\"$PCI\"" '{}' "$(host_local 10.86.0.0/24)"
  cni add "$WORK/f.conf" c-f
  check "ADD succeeds" test "$RC" = 0
  ip -n p8 link set net1 alias "rdma-host-device:v1:victim0:1280:1:0000000000000000"
  ip netns del p8
  check "the NIC came back to the host as net1" bash -c "for i in \$(seq 50); do ip link show net1 >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
  NETNS= cni del "$WORK/f.conf" c-f
  check "DEL of the dead pod succeeds" test "$RC" = 0
  check "$NIC is home with its own name and MTU 1480" link_is "$NIC" 1480
  check "no link bears the forged name" bash -c "! ip link show victim0 2>/dev/null"
  check "no IP held, no state" test "$(ips_left)$(find "$WORK/state" -name '*.json' | wc -l)" = 00
  check "rxens0 is on the host" bash -c "for i in \$(seq 50); do rdma dev show rxens0 >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"

  case_ crash
  # kill -9 the plugin at every step boundary of an exclusive-mode ADD (the debug build honours
  # RHD_FAULT), then DEL: the RDMA device and the NIC are home under their own names and MTU,
  # the IP is free, no state is left; then an ADD succeeds again.
  conf "$WORK/k.conf" xcrash "\"pciBusID\":\"$PCI\"" '{}' "$(host_local 10.84.0.0/24)"
  for point in add:after-state add:after-rdma-move add:after-nic-move add:after-ipam add:after-addresses add:before-result; do
    ip netns add pk; NETNS=/var/run/netns/pk
    RHD_FAULT=$point:kill cni add "$WORK/k.conf" c-k >/dev/null
    check_not "ADD killed at $point reports failure" test "$RC" = 0
    cni del "$WORK/k.conf" c-k
    check "DEL after a kill at $point succeeds" test "$RC" = 0
    check "after $point: rxens0 is on the host" bash -c "rdma dev show rxens0"
    check "after $point: $NIC is home with MTU 1480" link_is "$NIC" 1480
    check "after $point: no IP held, no state" test "$(ips_left)$(find "$WORK/state" -name '*.json' | wc -l)" = 00
    ip netns del pk
  done
  ip netns add pk; NETNS=/var/run/netns/pk
  RHD_FAULT=add:after-ipam:error cni add "$WORK/k.conf" c-k >/dev/null
  check "an error after IPAM rolls back: rxens0 and $NIC home" bash -c "rdma dev show rxens0 && ip link show $NIC"
  cni add "$WORK/k.conf" c-k
  check "then ADD succeeds" test "$RC" = 0
  check "and the pod lists rxens0" test "$(pod_rdma_devs pk)" = rxens0
  cni del "$WORK/k.conf" c-k
  check "DEL succeeds" test "$RC" = 0
  ip netns del pk
  rdma link delete rxens0
}

case $GROUP in
  shared) shared ;;
  exclusive-stock) exclusive_stock ;;
  exclusive-move) exclusive_move ;;
  *) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
if ((FAIL)); then
  echo "--- plugin log (last 40 lines)"; tail -40 "$WORK/plugin.log" 2>/dev/null
fi
echo "plugin[$GROUP]: $PASS passed, $FAIL failed"
((FAIL == 0))
