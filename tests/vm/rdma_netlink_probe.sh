#!/usr/bin/env bash
# rdma_netlink_probe.sh - run the RDMA netlink module's in-kernel tests inside an RDMA VM.
#
# Inside the guest (as root, RDMA_VM=1): load rdma_rxe, make veth v0/v1 with rxe0 on v0, then
# run the #[ignore]d `rdma::netlink::tests::vm` tests of the given unit-test binary.
#
# usage (on the host, from the repo root):
#   cargo test -p rdma-host-device-core --no-run      # prints the binary: target/debug/deps/rdma_host_device_core-HASH
#   RIG=tests/vm/vm.sh
#   $RIG            tests/vm/rdma_netlink_probe.sh target/debug/deps/rdma_host_device_core-HASH
#   $RIG --exclusive tests/vm/rdma_netlink_probe.sh target/debug/deps/rdma_host_device_core-HASH
set -euo pipefail
BIN=${1:?usage: $0 TEST-BINARY [FILTER]}
FILTER=${2:-rdma::netlink::tests::vm}
if [[ ${RDMA_VM:-} != 1 ]]; then
  echo "$0: run me inside the RDMA VM (RDMA_VM=1), e.g. via tests/vm/vm.sh" >&2
  exit 2
fi
modprobe rdma_rxe
ip link add v0 type veth peer name v1
ip link set v0 up
ip link set v1 up
rdma link add rxe0 type rxe netdev v0
echo "netns mode: $(rdma system show | sed -n 1p)"
exec "$BIN" --ignored --test-threads=1 --nocapture "$FILTER"
