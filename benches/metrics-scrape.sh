#!/usr/bin/env bash
# benches/metrics-scrape.sh: how long one /metrics scrape takes against the number of
# attachments. For each N (default 1 16 256): N veth "NICs" attached by the plugin (ADD, no
# IPAM) into N pod netns, with the pod's identity in CNI_ARGS; the exporter on a loopback
# port; SCRAPES scrapes timed with curl; the median, p90 and max printed with the exporter's
# own rdma_host_device_scrape_duration_seconds, its fds and RSS. Everything is DEL'd after.
#
# usage (as root): benches/metrics-scrape.sh [N ...]
# environment: RHD_BIN (default target/release/rdma-host-device, else target/debug), RHD_AGENT
#   (default: rdma-host-device-agent beside RHD_BIN),
#   SCRAPES (default 50), PORT (default 19879).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "metrics-scrape: run as root (it makes netns and links)" >&2; exit 2; }
BIN=${RHD_BIN:-}
if [[ -z $BIN ]]; then
  BIN=target/release/rdma-host-device
  [[ -x $BIN ]] || BIN=target/debug/rdma-host-device
fi
BIN=$(realpath "$BIN")
AGENT=${RHD_AGENT:-$(dirname "$BIN")/rdma-host-device-agent}
SCRAPES=${SCRAPES:-50}
PORT=${PORT:-19879}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(1 16 256)
WORK=$(mktemp -d /tmp/rhd-mbench.XXXXXX)
TAG=mb$$
EXPORTER=
N=0

cleanup() {
  [[ -n $EXPORTER ]] && kill "$EXPORTER" 2>/dev/null && wait "$EXPORTER" 2>/dev/null
  EXPORTER=
  local conf='{"cniVersion":"1.0.0","name":"mbench","type":"rdma-host-device"}'
  for ((i = 0; i < N; i++)); do
    CNI_COMMAND=DEL CNI_CONTAINERID=$TAG-$i CNI_NETNS=/run/netns/$TAG-$i CNI_IFNAME=net1 \
      CNI_PATH=/usr/lib/cni RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json \
      "$BIN" <<<"$conf" >/dev/null 2>&1 || true
    ip netns del "$TAG-$i" 2>/dev/null || true
    ip link del "${TAG}n$i" 2>/dev/null || true
  done
  N=0
}
trap 'cleanup; rm -rf "$WORK"' EXIT

echo "{\"stateDir\":\"$WORK/state\",\"logDir\":\"$WORK/log\"}" >"$WORK/node.json"
printf '%-12s %10s %10s %10s %14s %5s %9s\n' attachments median_ms p90_ms max_ms exporter_ms fds rss_kib
for size in "${SIZES[@]}"; do
  conf='{"cniVersion":"1.0.0","name":"mbench","type":"rdma-host-device"}'
  for ((i = N; i < size; i++)); do
    ip netns add "$TAG-$i"
    ip link add "${TAG}n$i" type veth peer name "${TAG}p$i"
    CNI_COMMAND=ADD CNI_CONTAINERID=$TAG-$i CNI_NETNS=/run/netns/$TAG-$i CNI_IFNAME=net1 \
      CNI_PATH=/usr/lib/cni CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-$i" \
      RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json \
      "$BIN" <<<"${conf%\}},\"device\":\"${TAG}n$i\"}" >/dev/null 2>>"$WORK/add.log" ||
      { echo "ADD $i failed:" >&2; tail -3 "$WORK/add.log" >&2; exit 1; }
    N=$((i + 1))
  done
  RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json "$AGENT" metrics --listen "127.0.0.1:$PORT" 2>"$WORK/exporter.log" &
  EXPORTER=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$PORT/metrics" >/dev/null # warm up
  times=()
  for _ in $(seq "$SCRAPES"); do
    times+=("$(curl -s -o "$WORK/last" -w '%{time_total}' "http://127.0.0.1:$PORT/metrics")")
  done
  got=$(grep -c '^rdma_host_device_attachment_up{.*} 1' "$WORK/last" || true)
  [[ $got == "$size" ]] || { echo "expected $size attachments up, the scrape shows $got" >&2; exit 1; }
  own=$(awk '/^rdma_host_device_scrape_duration_seconds /{printf "%.2f", $2*1000}' "$WORK/last")
  fds=$(ls "/proc/$EXPORTER/fd" | wc -l)
  rss=$(awk '/^VmRSS:/{print $2}' "/proc/$EXPORTER/status")
  printf '%s\n' "${times[@]}" | sort -n | awk -v n="$size" -v own="$own" -v fds="$fds" -v rss="$rss" '
    { t[NR] = $1 * 1000 }
    END { printf "%-12d %10.2f %10.2f %10.2f %14s %5d %9d\n", n, t[int((NR + 1) / 2)], t[int(NR * 0.9)], t[NR], own, fds, rss }'
  kill "$EXPORTER"; wait "$EXPORTER" 2>/dev/null || true; EXPORTER=
done
echo "binary: $BIN; $SCRAPES scrapes per size; $(nproc) cores; kernel $(uname -r)"
