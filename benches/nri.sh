#!/usr/bin/env bash
# benches/nri.sh: the NRI plugin's figures as a runtime sees them. CreateContainer's round trip
# on NRI's socket (multiplexer + ttrpc + protobuf, CALLS calls one after the other: median, p90,
# max), for a container with the node's uverbs device (the plugin stats the node's uverbs nodes
# and answers with the rlimit) and one without; the plugin's RSS after serving; and how long a
# restarted runtime waits for the plugin to register again after AWAY seconds without it (the
# plugin's backoff: 200 ms doubling to 5 s). The runtime is tests/nri/runtime.py, as in
# crates/agent/tests/node_agent/nri.rs; the node's device is a char node the bench makes with mknod in its own dir.
#
# usage (as root): benches/nri.sh
# environment: RHD_AGENT (default target/release/rdma-host-device-agent, else target/debug),
#   CALLS (default 500), AWAY (default 10), RHD_VENV (default ~/.cache/rhd-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "nri bench: run as root (mknod)" >&2; exit 2; }
AGENT=${RHD_AGENT:-}
if [[ -z $AGENT ]]; then
  AGENT=target/release/rdma-host-device-agent
  [[ -x $AGENT ]] || AGENT=target/debug/rdma-host-device-agent
fi
AGENT=$(realpath "$AGENT")
PY=${RHD_VENV:-$HOME/.cache/rhd-venv}/bin/python
[[ -x $PY ]] || { echo "nri bench: $PY missing (scripts/setup.sh makes the venv)" >&2; exit 2; }
CALLS=${CALLS:-500}
AWAY=${AWAY:-10}
WORK=$(mktemp -d /tmp/rhd-nribench.XXXXXX)
PLUGIN= RT=
cleanup() {
  [[ -n $PLUGIN ]] && kill "$PLUGIN" 2>/dev/null || true
  [[ -n $RT ]] && kill "$RT" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/dev/infiniband"
mknod "$WORK/dev/infiniband/uverbs0" c 231 192
echo '{"memlock": "unlimited"}' >"$WORK/node.json"
coproc RUNTIME { RHD_NRI_STUBS=$PWD/target/tmp/nri-stubs exec "$PY" tests/nri/runtime.py "$WORK/nri.sock" 2>"$WORK/runtime.log"; }
RT=$RUNTIME_PID
# Plain descriptors: a coproc's are closed in the subshells $(ask ...) runs in.
exec 3>&"${RUNTIME[1]}" 4<&"${RUNTIME[0]}"
ask() {
  local l=
  printf '%s\n' "$1" >&3
  IFS= read -r -t 300 l <&4 || l='{"error": "runtime.py did not answer"}'
  printf '%s\n' "$l"
}
IFS= read -r -t 120 _ <&4
RDMA_HOST_DEVICE_NODE_CONFIG=$WORK/node.json "$AGENT" nri --socket "$WORK/nri.sock" --dev "$WORK/dev" 2>"$WORK/plugin.log" &
PLUGIN=$!
ask '{"cmd": "registered", "count": 1, "timeout": 30}' >/dev/null
stats() { python3 -c 'import json,sys
ms = sorted(json.loads(sys.stdin.read())["ms"])
p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
print(f"median {p(0.5):.3f} ms, p90 {p(0.9):.3f} ms, max {ms[-1]:.3f} ms ({len(ms)} calls)")'; }
POD='{"id": "p", "name": "bench", "namespace": "default"}'
WITH='{"id": "c", "name": "with", "linux": {"devices": [{"path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 192}]}}'
WITHOUT='{"id": "c", "name": "without", "env": ["A=b"]}'
echo "agent: $AGENT"
echo "CreateContainer, with the device:    $(ask "{\"cmd\": \"bench\", \"n\": $CALLS, \"pod\": $POD, \"container\": $WITH}" | stats)"
echo "CreateContainer, without the device: $(ask "{\"cmd\": \"bench\", \"n\": $CALLS, \"pod\": $POD, \"container\": $WITHOUT}" | stats)"
echo "plugin RSS after serving: $(awk '/VmRSS/ {print $2, $3}' "/proc/$PLUGIN/status"), threads $(awk '/Threads/ {print $2}' "/proc/$PLUGIN/status")"
ask '{"cmd": "stop"}' >/dev/null
sleep "$AWAY"
t0=$(date +%s.%N)
ask '{"cmd": "start"}' >/dev/null
ask '{"cmd": "registered", "count": 2, "timeout": 30}' >/dev/null
t1=$(date +%s.%N)
echo "runtime back after ${AWAY} s away: plugin registered again in $(python3 -c "print(f'{$t1 - $t0:.2f}')") s"
echo "plugin CPU time over the whole run: $(awk '{printf "%.2f s", ($14 + $15) / 100}' "/proc/$PLUGIN/stat")"
