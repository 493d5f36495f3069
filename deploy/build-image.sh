#!/usr/bin/env bash
# Builds the DaemonSet's image offline with podman (Debian's), from the plugin and agent
# binaries and this machine's libraries: no registry, no base image. Prints the image name and
# its size.
#
#   deploy/build-image.sh [BINARY [AGENT]]
#
# BINARY: the plugin to ship (default dist/rdma-host-device from scripts/release.sh, for glibc
# 2.28 nodes; else target/release/rdma-host-device); AGENT: the node agent (default
# rdma-host-device-agent beside BINARY). IMAGE overrides the tag (default
# localhost/rdma-host-device:<version>, the name conf/k8s/daemonset.yaml uses). Extra podman
# global options (say a private --root) go in PODMAN_OPTS. Load it onto nodes without a
# registry with `podman save --format oci-archive IMAGE | ctr -n k8s.io images import -`.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
BIN=${1:-}
if [[ -z $BIN ]]; then
  BIN=$REPO/dist/rdma-host-device
  [[ -x $BIN ]] || BIN=$REPO/target/release/rdma-host-device
fi
[[ -x $BIN ]] || { echo "build-image: $BIN missing: cargo build --release (or scripts/release.sh)" >&2; exit 1; }
AGENT=${2:-$(dirname "$BIN")/rdma-host-device-agent}
[[ -x $AGENT ]] || { echo "build-image: $AGENT missing: cargo build --release (or scripts/release.sh)" >&2; exit 1; }
BUSYBOX=/bin/busybox # busybox-static: one static file, no libraries
[[ -x $BUSYBOX ]] && ! ldd "$BUSYBOX" >/dev/null 2>&1 ||
  { echo "build-image: $BUSYBOX is not static busybox (apt-get install busybox-static)" >&2; exit 1; }
version=$("$BIN" --version | awk '{print $2}')
IMAGE=${IMAGE:-localhost/rdma-host-device:$version}
# shellcheck disable=SC2206
PODMAN=(podman ${PODMAN_OPTS:-})

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
install -D -m 0755 "$BIN" "$root/usr/local/bin/rdma-host-device"
install -D -m 0755 "$AGENT" "$root/usr/local/bin/rdma-host-device-agent"
install -D -m 0755 "$REPO/deploy/install.sh" "$root/install/install.sh"
install -D -m 0755 "$BUSYBOX" "$root/bin/busybox"
for applet in sh cat chmod chroot cmp cp cut echo ls mkdir mv rm sha256sum sleep; do
  ln -s busybox "$root/bin/$applet"
done
# /var/run -> /run, as on the node: runtimes give CNI the pod's netns as /var/run/netns/NAME
# (containerd, CRI-O), the plugin records that path, and the metrics container, which mounts
# the node's /run/netns, opens it as recorded.
mkdir -p "$root/run" "$root/var"
ln -s ../run "$root/var/run"
# The binaries' shared libraries at the paths their loader looks for them (ldd: libc, libgcc_s,
# the dynamic loader; a glibc 2.28 release build also names libpthread and libdl).
ldd "$BIN" "$AGENT" | awk '/=> \// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' | sort -u | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
cp "$REPO/deploy/Containerfile" "$ctx/Containerfile"
"${PODMAN[@]}" build -q --timestamp 0 -f "$ctx/Containerfile" -t "$IMAGE" "$ctx" >/dev/null
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")
echo "image: $IMAGE"
echo "size: $size bytes ($(( (size + 524288) / 1048576 )) MB): plugin $(stat -c %s "$BIN"), agent $(stat -c %s "$AGENT"), busybox $(stat -c %s "$BUSYBOX"), libraries $(du -cb "$root/lib" "$root/lib64" | tail -1 | cut -f1)"
