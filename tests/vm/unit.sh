#!/usr/bin/env bash
# tests/vm/unit.sh TEST-BINARY - inside the RDMA VM: run the unit-test binary's #[ignore]d tests
# that need a real RDMA kernel (rdma::netlink, rdma::verbs), with and without libibverbs.
# Setup they expect: rdma_rxe loaded, veth v0/v1 up, 10.9.9.1/24 on v0, rxe0 on v0.
set -euo pipefail
BIN=${1:?usage: unit.sh TEST-BINARY}
[[ ${RDMA_VM:-} == 1 ]] || { echo "$0: runs inside the RDMA VM; use tests/vm/run.sh" >&2; exit 2; }
modprobe rdma_rxe
ip link add v0 type veth peer name v1
ip link set v0 up
ip link set v1 up
ip addr add 10.9.9.1/24 dev v0
rdma link add rxe0 type rxe netdev v0
echo "netns mode: $(rdma system show | sed -n 1p)"
# run FILTER [ENV...]: the #[ignore]d tests matching FILTER; running none is a failure (a
# renamed module or the wrong binary would otherwise pass by testing nothing).
run() {
  local filter=$1 out; shift
  out=$(env "$@" "$BIN" --ignored --test-threads=1 "$filter" 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  grep -Eq '^running [1-9]' <<<"$out" || { echo "unit.sh: no test matched $filter in $BIN" >&2; return 1; }
}
run rdma::
echo "--- again with libibverbs hidden (the sysfs fallback)"
mkdir -p /tmp/hidden-verbs
mv /usr/lib/x86_64-linux-gnu/libibverbs.so.1* /tmp/hidden-verbs/
run verbs RDMA_VM_NO_VERBS=1
