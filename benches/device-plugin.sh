#!/usr/bin/env bash
# benches/device-plugin.sh: the device plugin's figures as the kubelet sees them, for a pool of
# N veth "NICs" (default 1 16 64): Allocate's latency (gRPC round trip on the unix socket, one
# device per call, ALLOCS calls: median, p90, max), the plugin's idle RSS (VmRSS after it has
# served, 10 s idle) and its threads, and health propagation (a NIC's peer set down, then up:
# the time until kubelet.py's ListAndWatch stream shows Unhealthy, then Healthy; FLIPS flips,
# median and max). The kubelet is tests/device_plugin/kubelet.py (grpcio), as in
# crates/agent/tests/node_agent/device_plugin.rs. Everything it makes starts with `rhddp` and is deleted at the end.
#
# usage (as root): benches/device-plugin.sh [N ...]
# environment: RHD_BIN (default target/release/rdma-host-device, else target/debug), RHD_AGENT
#   (default: rdma-host-device-agent beside RHD_BIN),
#   ALLOCS (default 200), FLIPS (default 10), RHD_VENV (default ~/.cache/rhd-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "device-plugin bench: run as root (it makes links)" >&2; exit 2; }
BIN=${RHD_BIN:-}
if [[ -z $BIN ]]; then
  BIN=target/release/rdma-host-device
  [[ -x $BIN ]] || BIN=target/debug/rdma-host-device
fi
BIN=$(realpath "$BIN")
AGENT=${RHD_AGENT:-$(dirname "$BIN")/rdma-host-device-agent}
PY=${RHD_VENV:-$HOME/.cache/rhd-venv}/bin/python
[[ -x $PY ]] || { echo "device-plugin bench: $PY missing (scripts/setup.sh makes the venv)" >&2; exit 2; }
ALLOCS=${ALLOCS:-200}
FLIPS=${FLIPS:-10}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(1 16 64)
WORK=$(mktemp -d /tmp/rhd-dpbench.XXXXXX)
R=rdma-host-device.io/bench
DP= KPID= N=0

cleanup() {
  if [[ -n $DP ]]; then kill "$DP" 2>/dev/null || true; wait "$DP" 2>/dev/null || true; fi
  if [[ -n $KPID ]]; then kill "$KPID" 2>/dev/null || true; fi
  DP= KPID=
  for ((i = 0; i < N; i++)); do ip link del "rhddp$i" 2>/dev/null || true; done
  N=0
}
trap 'cleanup; rm -rf "$WORK"' EXIT

# kub JSON: one command to kubelet.py, its one-line answer.
kub() {
  local l=
  printf '%s\n' "$1" >&"${KUBELET[1]}"
  IFS= read -r -t 60 l <&"${KUBELET[0]}" || { echo "kubelet.py did not answer $1" >&2; exit 1; }
  printf '%s\n' "$l"
}
# stats: median, p90 and max of the numbers on stdin.
stats() { sort -g | awk '{v[NR]=$1} END {printf "%.2f %.2f %.2f", v[int((NR+1)/2)], v[int(NR*0.9+0.5)], v[NR]}'; }

echo "device-plugin bench: $BIN ($("$BIN" --version)); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-28s %-14s %-8s %-26s\n' NICs "Allocate ms (med/p90/max)" "idle RSS" threads "health ms (down/up, med/max)"
for n in "${SIZES[@]}"; do
  names=()
  for ((i = 0; i < n; i++)); do
    ip link add "rhddp$i" type veth peer name "rhddq$i"
    ip link set "rhddp$i" up
    ip link set "rhddq$i" up
    names+=("\"rhddp$i\"")
    N=$((i + 1))
  done
  mkdir -p "$WORK/$n/sock" "$WORK/$n/info" "$WORK/$n/state"
  sel=$(IFS=,; echo "${names[*]}")
  echo "{\"stateDir\":\"$WORK/$n/state\",\"logDir\":\"$WORK/$n\",\"devicePlugin\":{\"pools\":[{\"resourceName\":\"$R\",\"selectors\":{\"names\":[$sel]}}]}}" >"$WORK/$n/node.json"
  coproc KUBELET { RHD_DP_STUBS=$PWD/target/tmp/dp-stubs exec "$PY" tests/device_plugin/kubelet.py "$WORK/$n/sock" 2>"$WORK/$n/kubelet.log"; }
  KPID=$KUBELET_PID
  IFS= read -r -t 60 _ <&"${KUBELET[0]}"
  RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/$n/node.json "$AGENT" device-plugin --socket-dir "$WORK/$n/sock" \
    --device-info-dir "$WORK/$n/info" 2>"$WORK/$n/plugin.log" &
  DP=$!
  kub '{"cmd": "registered", "count": 1, "timeout": 30}' >/dev/null
  kub "{\"cmd\": \"watch\", \"resource\": \"$R\"}" >/dev/null
  kub "{\"cmd\": \"devices\", \"resource\": \"$R\", \"want\": {\"rhddp0\": \"Healthy\"}, \"timeout\": 30}" >/dev/null
  # (kub in this shell: a subshell does not inherit the coprocess' descriptors)
  : >"$WORK/$n/alloc"
  for ((i = 0; i < ALLOCS; i++)); do
    kub "{\"cmd\": \"allocate\", \"resource\": \"$R\", \"containers\": [[\"rhddp$((i % n))\"]]}" >>"$WORK/$n/alloc"
  done
  alloc=$(python3 -c 'import json,sys
for l in sys.stdin: print(json.loads(l)["ms"])' <"$WORK/$n/alloc" | stats)
  down=() up=()
  for ((f = 0; f < FLIPS; f++)); do
    for state in down up; do
      want=$([[ $state == down ]] && echo Unhealthy || echo Healthy)
      t0=$(date +%s%N)
      ip link set rhddq0 "$state"
      kub "{\"cmd\": \"devices\", \"resource\": \"$R\", \"want\": {\"rhddp0\": \"$want\"}, \"timeout\": 5}" >"$WORK/r"
      ! grep -q '"error"' "$WORK/r" || { echo "no $want within 5 s: $(cat "$WORK/r")" >&2; exit 1; }
      ms=$((($(date +%s%N) - t0) / 1000000))
      if [[ $state == down ]]; then down+=("$ms"); else up+=("$ms"); fi
    done
  done
  sleep 10
  rss=$(awk '/^VmRSS/ {printf "%.2f MiB", $2 / 1024}' "/proc/$DP/status")
  threads=$(awk '/^Threads/ {print $2}' "/proc/$DP/status")
  hd=$(printf '%s\n' "${down[@]}" | stats | awk '{printf "%d/%d", $1, $3}')
  hu=$(printf '%s\n' "${up[@]}" | stats | awk '{printf "%d/%d", $1, $3}')
  printf '%-5s %-28s %-14s %-8s %-26s\n' "$n" "$(tr ' ' / <<<"$alloc")" "$rss" "$threads" "$hd, $hu"
  cleanup
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
