#!/bin/sh
# install.sh: put rdma-host-device (the CNI plugin) into the node's CNI bin dir and report
# whether the node is ready for RDMA. Run by the DaemonSet's init container
# (conf/k8s/daemonset.yaml, which carries a copy of this file in its ConfigMap), or by hand on a
# node: it needs only a POSIX shell and coreutils, no Rust toolchain.
#
#   sudo SRC=dist/rdma-host-device CNI_BIN_DIR=/opt/cni/bin HOST_ROOT=/ sh deploy/install.sh
#
# environment:
#   SRC          the binary to install (default /usr/local/bin/rdma-host-device, the image's)
#   AGENT        the node agent, rdma-host-device-agent, which checks the node configuration,
#                writes the CDI spec and reports on the node; it runs from where it is, never
#                installed on the node (default: beside SRC)
#   CNI_BIN_DIR  where runtimes look for plugins (default /host/opt/cni/bin: the node's
#                /opt/cni/bin as the DaemonSet mounts it)
#   HOST_ROOT    the node's root filesystem, if mounted (default /host; / on the node itself;
#                empty to skip): the installed plugin is then also run with the NODE's own
#                libc (chroot), which proves the node's glibc is new enough (2.28 or later)
#   SHA256       expected sha256 of SRC (optional; dist/rdma-host-device.sha256 has it)
#   NODE_CONFIG  a node configuration to install (optional; the DaemonSet's ConfigMap has one;
#                set but missing, the install fails): checked with
#                `rdma-host-device-agent node-config`, then put atomically into
#   NODE_CONFIG_DIR  (default $HOST_ROOT/etc/rdma-host-device) as node.json
#   CDI_SPEC     where to write the CDI spec of the node's RDMA devices (optional; the DaemonSet
#                sets /var/run/cdi/rdma-host-device.json, a hostPath): `rdma-host-device-agent cdi`,
#                with the node configuration's memlock, so a runtime that reads CDI resolves
#                rdma-host-device.io/rdma=uverbsN and runs the memlock hook: the node
#                configuration's cdiHook (default /opt/cni/bin/rdma-host-device, the installed
#                plugin), which must exist under HOST_ROOT, or the install fails
#
# It replaces the plugin atomically (copy to a temporary name in the same directory, then
# rename), so a runtime executing the plugin during an upgrade runs the old or the new binary,
# never a half-written one; an identical binary is left alone. Exit status: 0 installed (or
# already up to date), 1 anything failed (the old plugin, if any, is still in place), among it
# anything it was told to install or run that is not there (SRC, NODE_CONFIG, AGENT).
#
# What it makes has the mode it names, whatever umask it was started with: the plugin 0755, the
# node configuration 0644, directories it makes 0755 (the CDI spec's modes are the agent's).
# Under its own umask 077, a file is created private and then given its mode: never, even for
# a moment, writable by others (a umask of 000 made the copy world-writable until its chmod).
set -eu
umask 077

SRC=${SRC:-/usr/local/bin/rdma-host-device}
case $SRC in
  */*) AGENT=${AGENT:-${SRC%/*}/rdma-host-device-agent} ;;
  *) AGENT=${AGENT:-./rdma-host-device-agent} ;;
esac
CNI_BIN_DIR=${CNI_BIN_DIR:-/host/opt/cni/bin}
HOST_ROOT=${HOST_ROOT-/host}
NAME=rdma-host-device
DEST=$CNI_BIN_DIR/$NAME

say() { echo "install.sh: $*"; }
fail() { echo "install.sh: error: $*" >&2; exit 1; }
# mkdirs DIR: DIR and its missing parents, each one made here 0755.
mkdirs() {
  [ -z "$1" ] || [ -d "$1" ] && return 0
  case $1 in */*) mkdirs "${1%/*}" ;; esac
  mkdir -m 0755 "$1" 2>/dev/null || [ -d "$1" ] || fail "cannot create the directory $1"
}

[ -f "$SRC" ] || fail "SRC=$SRC does not exist or is not a file: nothing to install"
if [ -n "${NODE_CONFIG:-}" ] && [ ! -f "$NODE_CONFIG" ]; then
  fail "NODE_CONFIG=$NODE_CONFIG does not exist or is not a file (the DaemonSet's: the ConfigMap rdma-host-device-install lacks node.json?); unset NODE_CONFIG to keep the node's configuration as it is"
fi
if [ -n "${NODE_CONFIG:-}" ] || [ -n "${CDI_SPEC:-}" ]; then
  [ -x "$AGENT" ] || fail "AGENT=$AGENT (the node agent, rdma-host-device-agent) is missing or not executable: it checks NODE_CONFIG and writes CDI_SPEC"
fi
if [ -n "${SHA256:-}" ]; then
  got=$(sha256sum "$SRC" | cut -d' ' -f1)
  [ "$got" = "$SHA256" ] || fail "$SRC has sha256 $got, expected $SHA256"
fi
version=$("$SRC" --version) || fail "$SRC does not run here"
say "installing $version into $CNI_BIN_DIR"

mkdirs "$CNI_BIN_DIR"
if [ -f "$DEST" ] && cmp -s "$SRC" "$DEST"; then
  say "$DEST is already this build; left alone"
else
  tmp=$CNI_BIN_DIR/.$NAME.install.$$
  trap 'rm -f "$tmp"' EXIT
  cp "$SRC" "$tmp"
  chmod 0755 "$tmp"
  # The CNI VERSION verb, as a runtime would call it, on the new copy before it goes live.
  echo '{"cniVersion":"1.0.0"}' | CNI_COMMAND=VERSION "$tmp" >/dev/null ||
    fail "the copied plugin does not answer CNI VERSION"
  mv -f "$tmp" "$DEST"
  trap - EXIT
  say "installed $DEST"
fi

# With the node's own libc: what the runtime on the node will do.
if [ -n "$HOST_ROOT" ]; then
  case $HOST_ROOT in
    /) rel=$DEST ;;
    *) rel=${DEST#"${HOST_ROOT%/}"} ;;
  esac
  if [ "$HOST_ROOT" != / ] && [ "$rel" = "$DEST" ]; then
    say "CNI_BIN_DIR is not under HOST_ROOT; skipping the run with the node's libc"
  elif [ ! -d "$HOST_ROOT/bin" ] && [ ! -d "$HOST_ROOT/usr/bin" ]; then
    say "$HOST_ROOT does not look like a root filesystem; skipping the run with the node's libc"
  elif out=$(chroot "$HOST_ROOT" "$rel" --version 2>&1); then
    say "runs with the node's libc: $out"
  else
    fail "the plugin does not run with the node's libc (it needs glibc 2.28 or later): $out"
  fi
fi

# The node configuration (which NICs pods may have, where state and logs go): checked by the
# agent of the same build, then installed atomically where the plugin reads it. Without one,
# the plugin's defaults apply (any NIC but the node's own uplinks).
if [ -n "${NODE_CONFIG:-}" ]; then
  NODE_CONFIG_DIR=${NODE_CONFIG_DIR:-${HOST_ROOT%/}/etc/rdma-host-device}
  "$AGENT" node-config "$NODE_CONFIG" >/dev/null || fail "$NODE_CONFIG is not a valid node configuration"
  mkdirs "$NODE_CONFIG_DIR"
  ntmp=$NODE_CONFIG_DIR/.node.json.install.$$
  cp "$NODE_CONFIG" "$ntmp"
  chmod 0644 "$ntmp"
  mv -f "$ntmp" "$NODE_CONFIG_DIR/node.json"
  say "installed the node configuration $NODE_CONFIG_DIR/node.json"
fi

# The CDI spec: one device per RDMA device whose /dev/infiniband/uverbsN exists on the node
# (read through HOST_ROOT: a mount of /dev/infiniband itself goes stale when devtmpfs removes
# the directory), the memlock hook with the node configuration's limit. A spec that cannot be written fails the install: pods given CDI names would not start.
if [ -n "${CDI_SPEC:-}" ]; then
  cfg=${NODE_CONFIG_DIR:-${HOST_ROOT%/}/etc/rdma-host-device}/node.json
  [ -f "$cfg" ] && export RDMA_HOST_DEVICE_NODE_CONFIG="$cfg"
  "$AGENT" cdi --out "$CDI_SPEC" --host-root "${HOST_ROOT:-/}" --dev "${HOST_ROOT%/}/dev" --node-dev /dev ||
    fail "cannot write the CDI spec $CDI_SPEC"
fi

# What the node offers: NICs, RDMA devices, the RDMA netns mode and what it means.
if [ -x "$AGENT" ]; then
  "$AGENT" inspect --color=never || say "inspect failed (the plugin is installed nonetheless)"
else
  say "no node agent at $AGENT: no report on the node (the plugin is installed nonetheless)"
fi
