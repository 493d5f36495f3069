#!/usr/bin/env bash
# tests/vm/metrics.sh - the metrics exporter against real RDMA devices, scraped by a real
# Prometheus, run INSIDE the RDMA VM (tests/vm/run.sh metrics boots it, netns mode shared).
#
# Pods attached through the libcni driver with CNI_ARGS as kubelet passes them:
#   pod-r (team-r)  softDevice rxe on a veth
#   pod-a, pod-b    (team-s) the two ends of a veth pair, softDevice siw each (RDMA traffic)
# Then `rdma-host-device-agent metrics` on :9879, Debian's prometheus-node-exporter (infiniband and
# netdev collectors) on :9100, and Debian's Prometheus scraping both every 2 s. Every
# assertion is PromQL through Prometheus' HTTP API:
#   - each pod's series carry its namespace/pod labels;
#   - rxe's driver counters are there with pod-r's labels;
#   - a pod's QP count rises while ibv_rc_pingpong (pod-r) or rping (pod-a/pod-b) runs in it
#     and falls back after;
#   - siw's netdev counters rise with rping;
#   - pod-r's netns deleted without DEL: the exporter stays up, attachment_up 0, errors counted;
#   - what node_exporter's infiniband collector shows for the same devices (no pod, no QPs,
#     no hw counters), with the sysfs it reads and its own debug log;
#   - `inspect --watch` during rping: pod-a's tx rate and QPs, pod-r's rxe hw counters;
#   - with RHD_PICTURES=1 (scripts/pictures.sh), headless Chromium (Debian's) screenshots
#     Prometheus' own /graph of two per-pod queries over the whole run:
#     target/vm/prometheus-graph-{tx-rate,qps}.png (docs/img/ holds the README's copies).
# The Prometheus server runs in the guest: it is one static Go binary from the host's root,
# which the guest mounts read-only, so nothing needs installing inside.
# Findings go to target/vm/metrics-report.txt (and a raw scrape to target/vm/metrics-scrape.txt).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: runs inside the RDMA VM; use tests/vm/run.sh metrics" >&2
  exit 2
fi
BIN=${RHD_BIN:-$REPO/target/debug/rdma-host-device}
AGENT=${RHD_AGENT:-$(dirname "$BIN")/rdma-host-device-agent}  # the node agent beside it
DRIVER=${RHD_DRIVER:-$REPO/target/vm/libcni-driver}
OUTDIR=$REPO/target/vm
mkdir -p "$OUTDIR"
REPORT=$OUTDIR/metrics-report.txt
: >"$REPORT"
WORK=$(mktemp -d)
# nica and nicb are the two ends of one veth pair, each moved into its own pod: a veth whose peer
# is in another namespace may have been made from there (docs/trust.md), so this node names the
# pair in allowedNics (nicr, whose peer stays here, needs no entry but is named with them).
echo "{\"stateDir\":\"$WORK/state\",\"logDir\":\"$WORK\",\"allowedNics\":{\"names\":[\"nicr\",\"nica\",\"nicb\"]}}" >"$WORK/node.json"
export RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json
PLUGINS=$WORK/bin
mkdir -p "$PLUGINS"
ln -s "$BIN" "$PLUGINS/rdma-host-device"
CNI_PATH=$PLUGINS:/usr/lib/cni
PASS=0 FAIL=0
ok()  { echo "  ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "  FAIL $*"; FAIL=$((FAIL + 1)); }
case_() { echo "--- $* (at ${SECONDS}s)"; }
note() { echo "$*" | tee -a "$REPORT"; }

cni() {  # cni VERB CONF CID NETNS ARGS
  OUT=$("$DRIVER" -cmd "$1" -conf "$2" -netns "$4" -cid "$3" -ifname net1 -args "$5" \
        -path "$CNI_PATH" -cache "$WORK/cache" 2>"$WORK/stderr")
  RC=$?
  [[ $RC == 0 ]] || { echo "    driver $1 exit $RC: $OUT"; tail -15 "$WORK/stderr" | sed 's/^/    | /'; }
}
# gidTimeoutMs 90 s: under TCG on a loaded machine the siw pair may take far over the default
# 5 s to bring both ports ACTIVE (each end has carrier only once the other ADD has moved its
# NIC; 30 s was seen to run out while CI ran beside another VM).
conf() {  # conf FILE NAME DEVICE SOFT ADDRESS
  cat >"$1" <<EOF
{"cniVersion":"1.0.0","name":"$2","type":"rdma-host-device","device":"$3",
 "rdma":{"softDevice":"$4","gidTimeoutMs":90000},"ipam":{"type":"static","addresses":[{"address":"$5"}]},
 "logFile":"plugin.log","logLevel":"debug"}
EOF
}
args() { echo "IgnoreUnknown=1;K8S_POD_NAMESPACE=$1;K8S_POD_NAME=$2;K8S_POD_UID=uid-$2"; }

# promql EXPR: the result vector as lines "LABELS VALUE" (labels as k=v,... sorted).
promql() {
  python3 - "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
q = urllib.parse.urlencode({"query": sys.argv[1]})
r = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/query?" + q, timeout=10))
for s in r["data"]["result"]:
    m = s["metric"]
    print(",".join(f"{k}={m[k]}" for k in sorted(m)), s["value"][1])
EOF
}
# value EXPR: the single value of EXPR ("" if none).
value() { promql "$1" | awk 'NR==1{print $NF}'; }
# wait_for DESC SECONDS EXPR: until EXPR has a non-empty result.
wait_for() {
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    [[ -n $(promql "$3" 2>/dev/null) ]] && { ok "$1"; return 0; }
    sleep 0.5
  done
  bad "$1: no result for $3 within $2 s"
  return 1
}
# stop PID...: SIGKILL, then wait at most 20 s for each (a task stuck in the kernel is reported,
# not waited for forever).
stop() {
  local p i
  for p in "$@"; do kill -9 "$p" 2>/dev/null; done
  for p in "$@"; do
    for ((i = 0; i < 40; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$p" 2>/dev/null; then
      echo "  process $p did not exit: $(ps -o stat=,wchan:32=,args= -p "$p")"
    else
      wait "$p" 2>/dev/null
    fi
  done
}
# Prometheus scrapes every 2 s: wait for two more scrapes.
settle() { sleep "${1:-5}"; }

modprobe rdma_rxe || { echo "modprobe rdma_rxe failed"; exit 1; }
modprobe siw || { echo "modprobe siw failed"; exit 1; }
ip link set lo up

case_ attach
ip netns add pr; ip netns add pa; ip netns add pb
ip link add nicr type veth peer peerr; ip link set peerr up
ip link add nica type veth peer nicb
conf "$WORK/r.conf" rxe-net nicr rxe 10.90.0.2/24
conf "$WORK/a.conf" siw-net nica siw 10.91.0.1/24
conf "$WORK/b.conf" siw-net nicb siw 10.91.0.2/24
cni add "$WORK/r.conf" c-r /var/run/netns/pr "$(args team-r pod-r)"
RC_R=$RC
# The two siw pods come up together (each end has carrier only once the other is up; the
# plugin creates a siw device only once its link has carrier: siw ignores NETDEV_CHANGE).
(cni add "$WORK/a.conf" c-a /var/run/netns/pa "$(args team-s pod-a)"; echo "$RC" >"$WORK/rc-a") &
(cni add "$WORK/b.conf" c-b /var/run/netns/pb "$(args team-s pod-b)"; echo "$RC" >"$WORK/rc-b") &
wait
if [[ $RC_R$(cat "$WORK/rc-a")$(cat "$WORK/rc-b") == 000 ]]; then ok "three pods attached (rxe, siw, siw)"; else
  bad "ADD failed"; grep -E " ADD c-(a|b)" "$WORK/plugin.log" | cut -c1-220 | sed 's/^/    | /'; fi
RXE=$(ip netns exec pr rdma -j link show | python3 -c 'import json,sys; print([l["ifname"] for l in json.load(sys.stdin) if l.get("netdev")=="net1"][0])' 2>/dev/null)
note "rxe device of pod-r: $RXE; rdma link on the host: $(rdma link show | tr '\n' ';')"

case_ exporters
"$AGENT" metrics --listen 127.0.0.1:9879 2>"$WORK/exporter.log" &
EXPORTER=$!
prometheus-node-exporter --web.listen-address=127.0.0.1:9100 --collector.disable-defaults \
  --collector.infiniband --collector.netdev --log.level=debug >"$WORK/node-exporter.log" 2>&1 &
NODE_EXPORTER=$!
cat >"$WORK/prometheus.yml" <<EOF
global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: rdma-host-device
    honor_labels: true
    static_configs: [{targets: ["127.0.0.1:9879"]}]
  - job_name: node
    static_configs: [{targets: ["127.0.0.1:9100"]}]
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address=127.0.0.1:9090 >"$WORK/prometheus.log" 2>&1 &
PROMETHEUS=$!
PROM_START=$SECONDS
for _ in $(seq 120); do curl -sf http://127.0.0.1:9090/-/ready >/dev/null && break; sleep 0.5; done
if curl -sf http://127.0.0.1:9090/-/ready >/dev/null; then ok "Prometheus $(prometheus --version 2>&1 | awk 'NR==1{print $3}') is ready"; else bad "Prometheus did not start: $(tail -5 "$WORK/prometheus.log")"; fi
wait_for "Prometheus scrapes the exporter (up == 1)" 60 'up{job="rdma-host-device"} == 1'
wait_for "and node_exporter" 60 'up{job="node"} == 1'
curl -s http://127.0.0.1:9879/metrics >"$OUTDIR/metrics-scrape.txt"
settle 5

case_ labels
for p in team-r/pod-r team-s/pod-a team-s/pod-b; do
  ns=${p%/*} pod=${p#*/}
  if [[ $(value "rdma_host_device_attachment_up{namespace=\"$ns\",pod=\"$pod\"}") == 1 ]]; then
    ok "$pod: attachment_up 1 with namespace=$ns"
  else
    bad "$pod: no attachment_up 1 for namespace=$ns: $(promql 'rdma_host_device_attachment_up')"
  fi
done
note "PromQL: rdma_host_device_attachment_info"
promql 'rdma_host_device_attachment_info' | sed 's/^/  /' | tee -a "$REPORT"
N=$(promql "rdma_host_device_rdma_hw_counter_total{pod=\"pod-r\",namespace=\"team-r\",rdma_device=\"$RXE\"}" | wc -l)
if ((N > 0)); then ok "rxe's hw counters carry pod-r's labels ($N counters)"; else bad "no rxe hw counters for pod-r"; fi
note "PromQL: rdma_host_device_rdma_hw_counter_total{pod=\"pod-r\"}"
promql 'rdma_host_device_rdma_hw_counter_total{pod="pod-r"}' | sed 's/^/  /' | tee -a "$REPORT"
N=$(promql 'rdma_host_device_rdma_hw_counter_total{pod=~"pod-a|pod-b"}' | wc -l)
note "siw hw counters: $N series (siw keeps none)"

case_ qp-rxe
QP_R='rdma_host_device_rdma_resources{pod="pod-r",resource="qp"}'
BASE_R=$(value "$QP_R")
note "pod-r QPs before ibv_rc_pingpong: $BASE_R"
# The server side creates its PD, CQ and QP, then waits for a client that never comes.
ip netns exec pr ibv_rc_pingpong -d "$RXE" -g 1 >"$WORK/pingpong.log" 2>&1 &
PP=$!
wait_for "pod-r's QP count rises above $BASE_R while ibv_rc_pingpong runs" 30 "$QP_R > ${BASE_R:-0}"
DURING_R=$(value "$QP_R")
OWNER=$(promql 'rdma_host_device_rdma_qps{pod="pod-r",owner="ibv_rc_pingpong"}')
if [[ -n $OWNER ]]; then ok "the QP's owner is named: $OWNER"; else bad "no rdma_qps with owner ibv_rc_pingpong: $(promql 'rdma_host_device_rdma_qps')"; fi
stop "$PP"
wait_for "and falls back to $BASE_R after it exits" 30 "$QP_R == ${BASE_R:-0}"
note "pod-r QPs: before $BASE_R, during $DURING_R, after $(value "$QP_R")"

case_ qp-siw-traffic
QP_B='rdma_host_device_rdma_resources{pod="pod-b",resource="qp"}'
TX_A='rdma_host_device_netdev_transmit_bytes_total{pod="pod-a"}'
BASE_B=$(value "$QP_B")
TXA0=$(value "$TX_A")
# rping runs until we stop it: long enough for Prometheus to see its QPs and its bytes.
ip netns exec pb rping -s -a 10.91.0.2 -S 4000 -C 1000000 >"$WORK/rping-server" 2>&1 &
SERVER=$!
sleep 1
ip netns exec pa rping -c -a 10.91.0.2 -S 4000 -C 1000000 >"$WORK/rping-client" 2>&1 &
CLIENT=$!
wait_for "pod-b's QP count rises above $BASE_B while rping runs" 60 "$QP_B > ${BASE_B:-0}"
DURING_B=$(value "$QP_B")
wait_for "pod-a's netdev tx bytes rise by over 2 MB with rping" 120 "$TX_A > ${TXA0:-0} + 2e6"
if kill -0 "$CLIENT" 2>/dev/null; then ok "rping pod-a -> pod-b over siw still running"; else bad "rping ended early: $(tail -3 "$WORK/rping-client")"; fi
# inspect, for a person at a terminal, while rping runs: the table, then the same as JSON.
"$AGENT" inspect --watch 2 --color never >"$OUTDIR/inspect-watch.txt" 2>"$WORK/inspect.err"
"$AGENT" inspect --json --watch 2 >"$WORK/inspect.json" 2>>"$WORK/inspect.err"
read -r TXRATE QPS_A HW_R < <(python3 - "$WORK/inspect.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
by = {(n.get("attachment") or {}).get("containerID"): n.get("counters") or {} for n in r["nics"]}
a, pr = by.get("c-a", {}), by.get("c-r", {})
print(a.get("rates", {}).get("netdev", {}).get("txBytes", 0), a.get("qps", 0),
      sum(len(c) for c in pr.get("hwCounters", {}).values()))
EOF
)
note "inspect --watch 2 during rping: pod-a tx ${TXRATE} B/s, pod-a QPs ${QPS_A}, pod-r (rxe) ${HW_R} hw counters"
if python3 -c "import sys; sys.exit(0 if float('${TXRATE:-0}') > 0 else 1)"; then ok "inspect --watch: pod-a's tx rate ${TXRATE} B/s"; else bad "inspect --watch: no tx rate for pod-a: $(cat "$WORK/inspect.err")"; fi
if ((${QPS_A:-0} >= 1 && ${HW_R:-0} > 0)); then ok "inspect: pod-a's QPs ($QPS_A) and pod-r's rxe hw counters ($HW_R)"; else bad "inspect: QPs $QPS_A, hw counters $HW_R"; fi
stop "$CLIENT" "$SERVER"
wait_for "and falls back to $BASE_B after" 30 "$QP_B == ${BASE_B:-0}"
TXA1=$(value "$TX_A")
note "pod-b QPs: before $BASE_B, during $DURING_B, after $(value "$QP_B"); pod-a tx bytes $TXA0 -> $TXA1"
note "PromQL: rate(rdma_host_device_netdev_transmit_bytes_total{namespace=\"team-s\"}[30s])"
promql 'rate(rdma_host_device_netdev_transmit_bytes_total{namespace="team-s"}[30s])' | sed 's/^/  /' | tee -a "$REPORT"

case_ node-exporter
note "node_exporter's infiniband collector, same moment ($(curl -s http://127.0.0.1:9100/metrics | grep -c '^node_infiniband') node_infiniband samples; its log: $(grep -i infiniband "$WORK/node-exporter.log" | tail -2))"
promql '{__name__=~"node_infiniband_.*"}' | sed 's/^/  /' | tee -a "$REPORT"
N=$(promql '{__name__=~"node_infiniband_.*", pod!=""}' | wc -l)
if [[ $N == 0 ]]; then ok "node_exporter: no series knows a pod"; else bad "node_exporter has pod labels?"; fi
N=$(promql 'count by (__name__) ({__name__=~"node_infiniband_.*"})' | wc -l)
note "node_exporter: $N infiniband metric names; ours: $(promql 'count by (__name__) ({__name__=~"rdma_host_device_.*"})' | wc -l)"
# Why: the sysfs it reads (procfs' InfiniBandClass needs board_id and ports/N/counters of every
# device, and one missing file fails the whole class), and what it says itself.
for d in /sys/class/infiniband/*; do
  note "  sysfs $d: $(ls "$d" | tr '\n' ' ')| ports/1: $(ls "$d/ports/1" | tr '\n' ' ')"
done
note "node_scrape_collector_success{collector=\"infiniband\"} = $(value 'node_scrape_collector_success{collector="infiniband"}')"
note "node_exporter's debug log: $(grep -m1 'infiniband statistics not found' "$WORK/node-exporter.log")"

case_ netns-death
ip netns del pr
settle 5
if [[ $(value 'up{job="rdma-host-device"}') == 1 ]]; then ok "the exporter still answers (up 1) with pod-r's netns gone"; else bad "exporter down"; fi
if [[ $(value 'rdma_host_device_attachment_up{pod="pod-r"}') == 0 ]]; then ok "pod-r: attachment_up 0"; else bad "pod-r attachment_up: $(value 'rdma_host_device_attachment_up{pod="pod-r"}')"; fi
E=$(value 'increase(rdma_host_device_scrape_errors_total{stage="netns"}[10s])')
if python3 -c "import sys; sys.exit(0 if float('${E:-0}') > 0 else 1)"; then ok "netns errors counted ($E in 10 s)"; else bad "no netns errors counted"; fi
if [[ $(value 'rdma_host_device_attachment_up{pod="pod-a"}') == 1 ]]; then ok "pod-a is unaffected"; else bad "pod-a affected"; fi
curl -s http://127.0.0.1:9879/metrics >"$OUTDIR/metrics-scrape-after-death.txt"

case_ graph
# shot NAME EXPR: headless Chromium's picture of Prometheus' own /graph page of EXPR (graph
# tab) over the whole run, and the page's DOM once its JavaScript has drawn it.
shot() {
  local mins=$(( (SECONDS - PROM_START) / 60 + 1 )) url how size
  url="http://127.0.0.1:9090/graph?g0.expr=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$2")&g0.tab=0&g0.stacked=0&g0.range_input=${mins}m"
  note "graph $1: $url"
  rm -f "$OUTDIR/$1.png"
  for how in "--screenshot=$OUTDIR/$1.png" --dump-dom; do
    rm -rf "$WORK/chromium"; mkdir "$WORK/chromium"
    timeout 180 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
      --disable-background-networking --disable-component-update --disable-sync \
      --disable-dev-shm-usage --user-data-dir="$WORK/chromium" --window-size=1280,960 \
      --virtual-time-budget=20000 "$how" "$url" >"$WORK/$1.out" 2>>"$WORK/chromium.log"
  done
  size=$(stat -c %s "$OUTDIR/$1.png" 2>/dev/null || echo 0)
  # The legend names every pod: the page queried Prometheus and drew the series.
  if ((size > 20000)) && grep -q 'pod-a' "$WORK/$1.out" && grep -q 'pod-b' "$WORK/$1.out"; then
    ok "Chromium drew Prometheus' graph of $2 ($OUTDIR/$1.png, $size bytes)"
  else
    bad "no graph for $2: PNG $size bytes; $(grep -v -i dbus "$WORK/chromium.log" | tail -3)"
  fi
}
# Only scripts/pictures.sh asks for the pictures (RHD_PICTURES=1): the tests do not need a browser.
if [[ ${RHD_PICTURES:-0} != 1 ]]; then
  note "graphs: not drawn (scripts/pictures.sh draws the README's)"
elif command -v chromium >/dev/null; then
  shot prometheus-graph-tx-rate 'sum by (namespace, pod) (rate(rdma_host_device_netdev_transmit_bytes_total[20s]))'
  shot prometheus-graph-qps 'sum by (namespace, pod) (rdma_host_device_rdma_resources{resource="qp"})'
else
  bad "no chromium (scripts/setup.sh --for pictures installs it)"
fi

case_ cleanup
stop "$PROMETHEUS" "$NODE_EXPORTER" "$EXPORTER"
ps -eo pid,stat,wchan:32,args | awk '$2 ~ /D/' | sed 's/^/  D-state: /'
timeout 60 "$DRIVER" -cmd del -conf "$WORK/r.conf" -netns "" -cid c-r -ifname net1 -path "$CNI_PATH" -cache "$WORK/cache" >/dev/null 2>&1
echo "  DEL c-r: exit $? (at ${SECONDS}s)"
cni del "$WORK/a.conf" c-a /var/run/netns/pa "$(args team-s pod-a)"; A=$RC
cni del "$WORK/b.conf" c-b /var/run/netns/pb "$(args team-s pod-b)"; B=$RC
if [[ $A$B == 00 ]]; then ok "DELs succeed"; else bad "DEL failed"; fi
ip netns del pa; ip netns del pb; ip link del nica 2>/dev/null
echo "  cleanup done (at ${SECONDS}s)"
if ((FAIL)); then
  echo "--- exporter log"; tail -20 "$WORK/exporter.log"
  echo "--- plugin log"; tail -20 "$WORK/plugin.log" 2>/dev/null
fi
echo "metrics: $PASS passed, $FAIL failed" | tee -a "$REPORT"
((FAIL == 0))
