#!/usr/bin/env bash
# Draws the README's pictures of Prometheus' graphs (docs/img/prometheus-graph-*.png): installs
# headless Chromium (scripts/setup.sh --for pictures, beside the test set the metrics VM run
# needs), runs the metrics VM group with RHD_PICTURES=1, and copies the two PNGs it drew into
# docs/img/. The only script that installs a browser. As root, on Debian 12.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$REPO"
[[ $(id -u) == 0 ]] || { echo "pictures: run as root (the VM run creates network namespaces)" >&2; exit 1; }
scripts/setup.sh --for test --for pictures
RHD_PICTURES=1 tests/vm/run.sh metrics
for p in prometheus-graph-tx-rate prometheus-graph-qps; do
  cp "target/vm/$p.png" "docs/img/$p.png"
  echo "pictures: docs/img/$p.png ($(stat -c %s "docs/img/$p.png") bytes)"
done
