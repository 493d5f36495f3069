#!/usr/bin/env bash
# tests/vm/vm.sh - run a script inside a throw-away QEMU guest that boots a
# pinned Debian 6.1 kernel with RDMA (ib_core, ib_uverbs, rdma_rxe, plus our
# out-of-tree siw.ko and the test-only rdma_rxe_netns.ko).
#
# The guest's root filesystem is this machine's root, shared read-only over
# virtio-9p under a tmpfs overlay (writes vanish at power-off), so the guest
# runs the host's ip, rdma, ibv_devinfo, python3 ... unchanged.  The repository
# is shared READ-WRITE at its own path, so a freshly built plugin binary can be
# run and results written back.  The job runs as root (PID 1's child); its
# output streams to this terminal and its exit status is ours.
#
# The guest always has one UNCONNECTED virtio-net-pci NIC at the fixed PCI
# address 0000:00:05.0 with MAC 52:54:00:12:34:05 (kernel name eth0: no udev
# renames it).  It behaves like a physical NIC: it has a PCI device in sysfs
# and returns to init_net when the netns holding it dies.  Inside the guest
# RDMA_VM_NIC and RDMA_VM_NIC_PCI name it.
#
# usage: tests/vm/vm.sh [options] SCRIPT [ARGS...]
#        tests/vm/vm.sh [options] -c 'shell commands' [ARGS...]
#        tests/vm/vm.sh --prepare
set -euo pipefail

HARNESS_VERSION=2            # bump to invalidate prepared kernel caches
PROG=tests/vm/vm.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)

# The guest kernel, pinned: its whole set (kernel_set: the image, the flavour and common
# headers, kbuild and linux-source-6.1) must exist at one Debian version so our modules match
# the booted kernel exactly. If the archive no longer serves the whole pinned set, the newest
# whole set is used (with a warning); RDMA_VM_KERNEL_ABI + RDMA_VM_KERNEL_VERSION override.
PIN_ABI=${RDMA_VM_KERNEL_ABI:-6.1.0-57}
PIN_VERSION=${RDMA_VM_KERNEL_VERSION:-6.1.192-3}
FLAVOUR=amd64
SRC_PKG=linux-source-6.1

CACHE=${RDMA_VM_CACHE:-$HOME/.cache/rhd-vm}
TIMEOUT=${RDMA_VM_TIMEOUT:-300}
MEM=${RDMA_VM_MEM:-1024}
SMP=${RDMA_VM_SMP:-2}
VERBOSE=${RDMA_VM_VERBOSE:-0}
EXTRA_APPEND=${RDMA_VM_APPEND:-}
EXCLUSIVE=0
UPLINK=0
UPLINK_FWD=
WIRE=
PREPARE_ONLY=0
PRINT_URIS=0
CMD_STRING=
HAVE_CMD=0

# The guest NIC (see the header).
NIC_SLOT=05
NIC_PCI=0000:00:$NIC_SLOT.0
NIC_MAC=${RDMA_VM_NIC_MAC:-52:54:00:12:34:05}
# The opt-in uplink (--uplink): QEMU user networking (slirp) at 0000:00:06.0, static 10.0.2.15/24
# with the default route via slirp's 10.0.2.2, which NATs the guest's TCP to any address this
# machine reaches; its hostfwd rules forward this machine's ports into the guest.
UPLINK_SLOT=06
UPLINK_MAC=52:54:00:12:34:06

die()   { echo "$PROG: error: $*" >&2; exit 125; }
note()  { echo "$PROG: $*" >&2; }
vnote() { if [[ $VERBOSE == 1 ]]; then echo "$PROG: $*" >&2; fi; }

usage() {
  cat <<EOF
usage: $PROG [options] SCRIPT [ARGS...]
       $PROG [options] -c 'shell commands' [ARGS...]
       $PROG --prepare

Boots Debian's linux-image-$PIN_ABI-$FLAVOUR ($PIN_VERSION) under QEMU and runs
SCRIPT (or bash -c CMDS) inside as root.  The host root is visible read-only
(tmpfs overlay on top), the repository $REPO read-write.
Exits with the job's status.

options:
  --exclusive      boot with ib_core.netns_mode=0 (RDMA netns exclusive mode)
  --append ARGS    extra kernel command line arguments (repeatable),
                   e.g. --append slub_debug=FZP
  --timeout SEC    kill the guest after SEC seconds (default $TIMEOUT; exit 124)
  --uplink FWD     a second NIC at 0000:00:06.0 on QEMU user networking (slirp): 10.0.2.15/24,
                   default route via 10.0.2.2 (the guest reaches this machine's addresses);
                   FWD is slirp's hostfwd list, comma-separated (e.g.
                   tcp:198.51.100.1:10250-:10250), or "" for none; \$RDMA_VM_UPLINK names it
  --wire listen:SOCK|connect:SOCK
                   connect the test NIC (0000:00:05.0) to another guest's: a QEMU stream
                   netdev on the unix socket SOCK; the listening guest first (its socket must
                   exist before the other connects); give the two NICs different MACs
  --nic-mac MAC    the test NIC's MAC (default $NIC_MAC; \$RDMA_VM_NIC_MAC)
  -c CMDS          run CMDS with bash -c instead of a script file
  --mem MB         guest memory (default $MEM)
  --smp N          guest vCPUs (default $SMP)
  --prepare        install host packages (scripts/setup.sh --for vm), download the kernel, build the
                   initramfs, siw.ko and rdma_rxe_netns.ko; then exit
  --print-uris     choose the kernel set as --prepare would (from the cache, else from what apt
                   serves today), print it and apt-get download --print-uris of every package of
                   it; download nothing; then exit (scripts/cold-check.sh)
  -v, --verbose    progress and timings on stderr
  -h, --help       this text

guest: NIC $NIC_PCI (MAC $NIC_MAC, name in \$RDMA_VM_NIC, normally eth0),
  unconnected; RDMA_VM=1, RDMA_VM_KVER, RDMA_VM_NIC, RDMA_VM_NIC_PCI are set;
  'modprobe rdma_rxe', 'modprobe siw', 'modprobe rdma_rxe_netns' work (load
  only one of the two rxe modules per boot).  Variables named RHD_* and RUST_*
  are passed through.
environment: RDMA_VM_CACHE (default \$HOME/.cache/rhd-vm), RDMA_VM_TIMEOUT,
  RDMA_VM_MEM, RDMA_VM_SMP, RDMA_VM_APPEND, RDMA_VM_VERBOSE=1,
  RDMA_VM_KERNEL_ABI + RDMA_VM_KERNEL_VERSION (override the pinned kernel)
exit status: the job's; 124 timeout; 125 harness failure (or guest panic).
EOF
}

while [[ $# -gt 0 ]]; do
  case $1 in
    --exclusive) EXCLUSIVE=1; shift ;;
    --append) [[ $# -ge 2 ]] || die "--append needs an argument"; EXTRA_APPEND="$EXTRA_APPEND $2"; shift 2 ;;
    --timeout) [[ $# -ge 2 ]] || die "--timeout needs an argument"; TIMEOUT=$2; shift 2 ;;
    --uplink) [[ $# -ge 2 ]] || die "--uplink needs an argument"; UPLINK=1; UPLINK_FWD=$2; shift 2 ;;
    --wire) [[ $# -ge 2 && $2 =~ ^(listen|connect):. ]] || die "--wire wants listen:SOCK or connect:SOCK"; WIRE=$2; shift 2 ;;
    --nic-mac) NIC_MAC=${2:?}; shift 2 ;;
    -c) [[ $# -ge 2 ]] || die "-c needs an argument"; CMD_STRING=$2; HAVE_CMD=1; shift 2 ;;
    --mem) MEM=${2:?}; shift 2 ;;
    --smp) SMP=${2:?}; shift 2 ;;
    --prepare) PREPARE_ONLY=1; shift ;;
    --print-uris) PRINT_URIS=1; shift ;;
    -v|--verbose) VERBOSE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) break ;;
  esac
done
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds"

if [[ $PREPARE_ONLY == 0 && $PRINT_URIS == 0 && $HAVE_CMD == 0 ]]; then
  [[ $# -ge 1 ]] || { usage >&2; exit 125; }
  SCRIPT=$1; shift
  [[ -f $SCRIPT ]] || die "script '$SCRIPT' not found"
  SCRIPT=$(realpath -- "$SCRIPT")
fi

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# ------------------------------------------------------------------ host packages
# What the VM needs on this machine (QEMU, busybox, module tools, gcc-12 for our modules, the
# RDMA user space the guest runs from this root) is scripts/setup.sh's "vm" set: --prepare
# installs it there (one list, one place that resolves apt's conflicts); a plain run only
# checks the VMM is there.
APT_UPDATED=0
apt_update() { if [[ $APT_UPDATED == 0 ]]; then apt-get update -q >&2 || true; APT_UPDATED=1; fi; }
ensure_packages() {
  if [[ $PREPARE_ONLY == 1 ]]; then
    "$REPO/scripts/setup.sh" --for vm || die "scripts/setup.sh --for vm failed"
  else
    command -v qemu-system-x86_64 >/dev/null || die "no qemu-system-x86_64: run $0 --prepare (or scripts/setup.sh --for vm)"
  fi
}
command -v dpkg-query >/dev/null || die "needs a Debian host (dpkg/apt)"
[[ $PRINT_URIS == 1 ]] || ensure_packages

# ------------------------------------------------------------------ kernel choice
img_pkg() { echo "linux-image-$1-$FLAVOUR"; }
hdr_pkg() { echo "linux-headers-$1-$FLAVOUR"; }
# kernel_set ABI: every package a prepared kernel is made of, each downloaded at one version
# (prepare_kernel: the image; build_modules: the rest). The availability check, the download
# and scripts/cold-check.sh all read this one list.
kernel_set() { echo "$(img_pkg "$1") $(hdr_pkg "$1") linux-headers-$1-common linux-kbuild-6.1 $SRC_PKG"; }
versions_of() { apt-cache madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}'; }
has_version() {  # PKG VERSION: does apt serve PKG at exactly VERSION?
  local all
  all=$(versions_of "$1")
  grep -qxF "$2" <<<"$all"
}
missing_from_set() {  # ABI VERSION: the packages of the set apt does not serve at VERSION
  local p
  for p in $(kernel_set "$1"); do has_version "$p" "$2" || echo "$p=$2"; done
}
kernel_set_available() { [[ -z $(missing_from_set "$1" "$2") ]]; }
# Newest ABI whose whole set shares one version.
resolve_fallback() {
  local abi ver names
  names=$(apt-cache pkgnames "linux-image-6.1.0-" 2>/dev/null)
  # shellcheck disable=SC2013 # one word a line
  for abi in $(sed -nE "s/^linux-image-(6\.1\.0-[0-9]+)-$FLAVOUR\$/\1/p" <<<"$names" | sort -t- -k2,2nr); do
    for ver in $(versions_of "$(img_pkg "$abi")"); do
      if kernel_set_available "$abi" "$ver"; then echo "$abi $ver"; return 0; fi
    done
  done
  return 1
}
# Our modules' recipe (build_modules): a change of it, the patch or the version rebuilds them.
MODS_RECIPE=1
mods_stamp() { echo "$MODS_RECIPE $1 $(sha256sum "$HERE/rxe-netns.patch" | cut -d' ' -f1)"; }
# prepared ABI VERSION: is this set's kernel AND its modules in the cache, for this harness?
# (Half a preparation, the image without the modules, is not: its set is chosen again.)
prepared() {
  local k=$CACHE/k-$1-$2
  [[ -f $k/.ready && $(cat "$k/.ready") == "$HARNESS_VERSION" &&
     -f $k/.mods-ready && $(cat "$k/.mods-ready") == "$(mods_stamp "$2")" ]]
}
no_set_advice="what to do: run 'apt-get update' and check that this machine reaches deb.debian.org \
(debian-security serves the kernel updates); 'apt-cache madison linux-image-6.1.0-NN-$FLAVOUR \
linux-kbuild-6.1' lists what is served, and RDMA_VM_KERNEL_ABI=6.1.0-NN \
RDMA_VM_KERNEL_VERSION=V chooses a whole set by hand; the pin is PIN_ABI/PIN_VERSION in $PROG"

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9        # one preparation at a time; runs share the finished cache

# The set: the pin when it is prepared or whole in the archive today; else the fallback this
# cache prepared before; else the newest whole set the archive serves.
ABI=$PIN_ABI VERSION=$PIN_VERSION
if ! prepared "$ABI" "$VERSION"; then
  if [[ -n ${RDMA_VM_KERNEL_ABI:-} ]]; then
    kernel_set_available "$ABI" "$VERSION" || { apt_update; kernel_set_available "$ABI" "$VERSION"; } ||
      die "kernel $ABI $VERSION: apt does not serve $(missing_from_set "$ABI" "$VERSION" | xargs); $no_set_advice"
  else
    fb=
    [[ -f $CACHE/fallback ]] && read -r fb_abi fb_ver <"$CACHE/fallback" && prepared "$fb_abi" "$fb_ver" && fb="$fb_abi $fb_ver"
    if [[ -n $fb ]]; then
      ABI=$fb_abi VERSION=$fb_ver
    elif ! { kernel_set_available "$ABI" "$VERSION" || { apt_update; kernel_set_available "$ABI" "$VERSION"; }; }; then
      gone=$(missing_from_set "$ABI" "$VERSION" | xargs)
      read -r ABI VERSION < <(resolve_fallback) ||
        die "no whole kernel set ($(kernel_set 6.1.0-NN | xargs) at one version) in apt; $no_set_advice"
      note "warning: the archive no longer serves the pinned kernel set $PIN_ABI $PIN_VERSION (gone: $gone); using $ABI $VERSION"
      echo "$ABI $VERSION" >"$CACHE/fallback"
    fi
  fi
fi
KVER=$ABI-$FLAVOUR
KDIR=$CACHE/k-$ABI-$VERSION
DEBS=$CACHE/debs

if [[ $PRINT_URIS == 1 ]]; then
  # shellcheck disable=SC2046 # the set is a list of words
  set -- $(kernel_set "$ABI")
  echo "kernel set: $ABI $VERSION$(prepared "$ABI" "$VERSION" && echo " (prepared in $KDIR)")"
  uris=$(apt-get download --print-uris -o APT::Sandbox::User=root "${@/%/=$VERSION}" 2>&1) ||
    die "apt-get download --print-uris failed for the kernel set $ABI $VERSION: $(grep -E '^E:' <<<"$uris" | xargs); $no_set_advice"
  echo "$uris"
  exit 0
fi

fetch_debs() {  # PKG... (each pinned at $VERSION) into $DEBS
  local p f want=()
  mkdir -p "$DEBS"
  for p in "$@"; do
    f=("$DEBS/${p}_${VERSION}_"*.deb)
    [[ -f ${f[0]} ]] || want+=("$p=$VERSION")
  done
  [[ ${#want[@]} -eq 0 ]] && return 0
  note "downloading ${want[*]} ..."
  ( cd "$DEBS" && apt-get download -q -o APT::Sandbox::User=root "${want[@]}" >&2 ) \
    || { apt_update; ( cd "$DEBS" && apt-get download -q -o APT::Sandbox::User=root "${want[@]}" >&2 ); } \
    || die "apt-get download ${want[*]} failed; $no_set_advice"
}
deb_of() {  # PKG: its downloaded .deb at $VERSION
  local f=("$DEBS/${1}_${VERSION}_"*.deb)
  [[ -f ${f[0]} ]] || die "no ${1}_${VERSION} in $DEBS"
  echo "${f[0]}"
}

# modules the initramfs loads: virtio transport, 9p + overlay for the root,
# virtio_net for the test NIC
INITRD_MODS=(virtio_pci 9pnet_virtio 9p overlay virtio_net)

write_init() {  # $1 = file: the initramfs /init (busybox)
  cat >"$1" <<'INIT_EOF'
#!/bin/busybox sh
# rhd-vm initramfs: host root (9p, ro) under a tmpfs overlay, the per-run share,
# the guest modules and the repository; then switch_root into stage2.sh.
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
fail() { echo "rhd-vm initramfs: $*"; echo o >/proc/sysrq-trigger; $B sleep 5; $B poweroff -f; }
for m in $($B cat /modules.list); do $B insmod /lib/modules/$m || fail "insmod $m failed"; done
O="trans=virtio,version=9p2000.L,msize=512000"
R=/newroot
$B mount -t 9p -o $O,ro,cache=loose hostroot /mnt/lower || fail "mount hostroot failed"
$B mount -t tmpfs -o mode=755 tmpfs /mnt/rw
$B mkdir -p /mnt/rw/upper /mnt/rw/work
$B mount -t overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work overlay $R \
  || fail "overlay mount failed"
$B mount -t tmpfs -o mode=755,nosuid,nodev tmpfs $R/run
$B mkdir -p $R/run/rhd-vm
$B mount -t 9p -o $O,cache=none vmrun $R/run/rhd-vm || fail "mount of the run share failed"
{ IFS= read -r KVER; IFS= read -r MODDIR; IFS= read -r REPO; } <$R/run/rhd-vm/init.env || fail "no init.env"
$B mount --move /dev $R/dev
$B mount --move /sys $R/sys
$B mount --move /proc $R/proc
$B mkdir -p $R/dev/pts $R/dev/shm
$B mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts
$B mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $R/dev/shm
$B mount -t cgroup2 cgroup2 $R/sys/fs/cgroup 2>/dev/null
$B mount -t debugfs debugfs $R/sys/kernel/debug 2>/dev/null
$B mount -t bpf bpf $R/sys/fs/bpf 2>/dev/null
$B ln -sfn /proc/self/fd $R/dev/fd
$B ln -sfn /proc/self/fd/0 $R/dev/stdin
$B ln -sfn /proc/self/fd/1 $R/dev/stdout
$B ln -sfn /proc/self/fd/2 $R/dev/stderr
$B mkdir -p "$R/lib/modules/$KVER"
# from the lower (host) tree: $MODDIR may be under a path the overlay shadows (/run)
$B mount --bind "/mnt/lower$MODDIR" "$R/lib/modules/$KVER" || fail "bind mount of $MODDIR failed"
$B mkdir -p "$R$REPO"
$B mount -t 9p -o $O,cache=mmap repo "$R$REPO" || fail "mount of the repository share failed"
$B hostname rhd-vm
$B ip link set lo up
$B stty -onlcr </dev/console 2>/dev/null
exec $B switch_root $R /bin/bash /run/rhd-vm/stage2.sh
INIT_EOF
  chmod 755 "$1"
}

# The uncompressed ELF vmlinux inside a bzImage: QEMU boots it through its PVH
# entry point, skipping in-guest decompression (seconds under TCG).
extract_vmlinux() {  # vmlinuz out
  local img=$1 out=$2 spec tool off offs
  for spec in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
    tool=${spec%%:*}
    offs=$(LC_ALL=C grep -obUaP "${spec#*:}" "$img" 2>/dev/null | cut -d: -f1) || true
    # shellcheck disable=SC2013 # one number a line
    for off in $(sed -n 1,3p <<<"$offs"); do
      tail -c +$((off+1)) "$img" | "$tool" -dc 2>/dev/null >"$out" || true
      [[ $(head -c 4 "$out" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 7f454c46 ]] && return 0
    done
  done
  rm -f "$out"; return 1
}

prepare_kernel() {
  local t=$SECONDS tmp img vmlinuz moddir m ko name n=0 ir
  fetch_debs "$(img_pkg "$ABI")"
  note "preparing kernel $(img_pkg "$ABI") $VERSION in $KDIR ..."
  tmp=$(mktemp -d "$CACHE/.prep.XXXXXX"); chmod 755 "$tmp"
  img=$(deb_of "$(img_pkg "$ABI")")
  dpkg-deb -x "$img" "$tmp/root"
  vmlinuz=$tmp/root/boot/vmlinuz-$KVER
  [[ -f $vmlinuz ]] || die "no /boot/vmlinuz-$KVER in $img"
  moddir=$tmp/root/lib/modules/$KVER
  [[ -d $moddir ]] || die "no modules directory in $img"
  depmod -b "$tmp/root" "$KVER"
  ir=$tmp/initramfs
  mkdir -p "$ir"/{bin,dev,proc,sys,mnt/lower,mnt/rw,newroot,lib/modules}
  cp /bin/busybox "$ir/bin/busybox"
  : >"$ir/modules.list"
  declare -A seen=()
  for m in "${INITRD_MODS[@]}"; do
    grep -qE "/$m\.ko" "$moddir/modules.builtin" && continue
    modprobe -d "$tmp/root" -S "$KVER" --show-depends "$m" >/dev/null 2>&1 || die "module $m not in $img"
    while read -r ko; do
      [[ -n ${seen[$ko]:-} ]] && continue; seen[$ko]=1
      n=$((n+1)); name=$(printf '%02d-%s' "$n" "$(basename "${ko%.xz}")")
      case $ko in *.xz) xz -dc "$ko" >"$ir/lib/modules/$name" ;; *) cp "$ko" "$ir/lib/modules/$name" ;; esac
      echo "$name" >>"$ir/modules.list"
    done < <(modprobe -d "$tmp/root" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}')
  done
  write_init "$ir/init"
  ( cd "$ir" && find . | cpio -o -H newc --quiet ) | gzip -1 >"$tmp/initramfs.gz"
  rm -rf "$ir"
  if extract_vmlinux "$vmlinuz" "$tmp/vmlinux"; then ln -s vmlinux "$tmp/kernel"
  else ln -s "root/boot/vmlinuz-$KVER" "$tmp/kernel"; fi
  echo "$KVER" >"$tmp/KVER"
  echo "$(img_pkg "$ABI") $VERSION" >"$tmp/PACKAGE"
  echo "$HARNESS_VERSION" >"$tmp/.ready"
  rm -rf "$KDIR"; mv "$tmp" "$KDIR"
  note "kernel $KVER ($VERSION) prepared in $((SECONDS-t)) s"
}

# ------------------------------------------------------------------ our modules
# siw.ko (Debian builds the kernel without CONFIG_RDMA_SIW) and the test-only
# rdma_rxe_netns.ko (rxe + tests/vm/rxe-netns.patch), built out of tree from
# linux-source-6.1 against linux-headers at exactly the booted version, and
# installed as updates/ in the cached modules tree.  Rebuilt when the patch or
# this script's module recipe changes (MODS_STAMP).
build_modules() {
  local t=$SECONDS src=$KDIR/src hdr x p mm=6.1 upd=$KDIR/root/lib/modules/$KVER/updates
  # shellcheck disable=SC2046 # the set is a list of words
  fetch_debs $(kernel_set "$ABI")
  note "building siw.ko and rdma_rxe_netns.ko for $KVER ..."
  rm -rf "$src"; mkdir -p "$src"; x=$src/x
  # headers: the flavour tree includes the -common tree and kbuild by absolute
  # path; unpack all three into $x and point the include there
  for p in "$(hdr_pkg "$ABI")" "linux-headers-$ABI-common" "linux-kbuild-$mm"; do
    dpkg-deb -x "$(deb_of "$p")" "$x"
  done
  hdr=$x/usr/src/linux-headers-$KVER
  sed -i "s|^include /usr/src/|include $x/usr/src/|" "$hdr/Makefile"
  # only the two driver directories out of the 140 MB source tarball
  dpkg-deb --fsys-tarfile "$(deb_of "$SRC_PKG")" \
    | tar -x -O "./usr/src/linux-source-$mm.tar.xz" \
    | tar -xJ -C "$src" "linux-source-$mm/drivers/infiniband/sw/rxe" "linux-source-$mm/drivers/infiniband/sw/siw" \
    || die "rxe/siw sources not found in $SRC_PKG"
  ( cd "$src/linux-source-$mm" && patch -s -p1 <"$HERE/rxe-netns.patch" ) \
    || die "tests/vm/rxe-netns.patch does not apply to $SRC_PKG $VERSION"
  mv "$src/linux-source-$mm/drivers/infiniband/sw/siw" "$src/siw"
  mv "$src/linux-source-$mm/drivers/infiniband/sw/rxe" "$src/rxe_netns"
  rm -rf "$src/linux-source-$mm"
  for p in siw rxe_netns; do
    # BTF for modules needs pahole + vmlinux BTF: not wanted for test modules
    nice make -s -C "$hdr" M="$src/$p" CONFIG_RDMA_SIW=m CONFIG_DEBUG_INFO_BTF_MODULES= \
      -j"$(nproc)" modules >&2 || die "building $p failed"
  done
  mkdir -p "$upd"
  for ko in "$src/siw/siw.ko" "$src/rxe_netns/rdma_rxe_netns.ko"; do
    strip --strip-debug "$ko"
    install -m 644 "$ko" "$upd/"
  done
  depmod -b "$KDIR/root" "$KVER"
  rm -rf "$x"        # keep the patched sources (small) for reference, drop headers
  mods_stamp "$VERSION" >"$KDIR/.mods-ready"
  note "modules built and installed in $((SECONDS-t)) s (updates/siw.ko, updates/rdma_rxe_netns.ko)"
}

if [[ ! -f $KDIR/.ready || $(cat "$KDIR/.ready") != "$HARNESS_VERSION" ]]; then prepare_kernel; fi
if [[ ! -f $KDIR/.mods-ready || $(cat "$KDIR/.mods-ready") != "$(mods_stamp "$VERSION")" ]]; then build_modules; fi
flock -u 9
vnote "kernel $(cat "$KDIR/PACKAGE") ready at $(elapsed) s"
if [[ $PREPARE_ONLY == 1 ]]; then note "ready: $(cat "$KDIR/PACKAGE") ($KVER) in $KDIR"; exit 0; fi

# ------------------------------------------------------------------ one run
# /dev/kvm here may be PVM (cannot run a stock kernel); use KVM only when it is
# a normal kvm_intel/kvm_amd, else TCG.
if [[ -r /dev/kvm && -w /dev/kvm && ( -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ) && ! -d /sys/module/kvm_pvm && ${RDMA_VM_ACCEL:-} != tcg ]]; then
  ACCEL=(-accel kvm -cpu host); ACCEL_NAME=kvm
else
  ACCEL=(-accel tcg,thread=multi -cpu max); ACCEL_NAME=tcg
fi

RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/rhd-vm.XXXXXX")
QPID=
cleanup() { if [[ -n $QPID ]]; then kill "$QPID" 2>/dev/null || true; fi; rm -rf "$RUNDIR"; }
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM HUP

CWD=$(pwd -P)
if [[ $HAVE_CMD == 1 ]]; then ARGV=(/bin/bash -c "$CMD_STRING" vm.sh "$@")
elif [[ -x $SCRIPT ]]; then  ARGV=("$SCRIPT" "$@")
else                         ARGV=(/bin/bash "$SCRIPT" "$@"); fi
{
  printf 'VM_KVER=%q\nVM_CWD=%q\nVM_TERM=%q\nVM_VERBOSE=%q\n' "$KVER" "$CWD" "${TERM:-dumb}" "$VERBOSE"
  printf 'VM_NIC_PCI=%q\n' "$NIC_PCI"
  printf 'VM_UPLINK=%q\nVM_UPLINK_PCI=%q\n' "$UPLINK" "0000:00:$UPLINK_SLOT.0"
  printf 'VM_ARGV=('; printf '%q ' "${ARGV[@]}"; printf ')\n'
  # pass-through environment
  while IFS= read -r v; do printf 'export %s=%q\n' "$v" "${!v}"; done < <(compgen -e | grep -E '^(RHD_|RUST_)' || true)
} >"$RUNDIR/job.sh"
printf '%s\n' "$KVER" "$(realpath "$KDIR/root/lib/modules/$KVER")" "$REPO" >"$RUNDIR/init.env"

cat >"$RUNDIR/stage2.sh" <<'STAGE2_EOF'
#!/bin/bash
# rhd-vm stage 2: PID 1 on the overlay root.  Runs the job, reports its status
# through the run share, then makes QEMU exit (isa-debug-exit).
. /run/rhd-vm/job.sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=$VM_TERM
export LANG=C.UTF-8 RDMA_VM=1 RDMA_VM_KVER=$VM_KVER RDMA_VM_NIC_PCI=$VM_NIC_PCI
# a virtio NIC's netdev hangs off the virtio device under the PCI function
first() { echo "$1"; }
RDMA_VM_NIC=$(first "/sys/bus/pci/devices/$VM_NIC_PCI"/virtio*/net/*)
RDMA_VM_NIC=${RDMA_VM_NIC##*/}
export RDMA_VM_NIC
if [[ $VM_UPLINK == 1 ]]; then
  RDMA_VM_UPLINK=$(first "/sys/bus/pci/devices/$VM_UPLINK_PCI"/virtio*/net/*)
  RDMA_VM_UPLINK=${RDMA_VM_UPLINK##*/}
  ip addr add 10.0.2.15/24 dev "$RDMA_VM_UPLINK" && ip link set "$RDMA_VM_UPLINK" up &&
    ip route add default via 10.0.2.2 || echo "vm.sh: the uplink $RDMA_VM_UPLINK did not come up" >&2
  export RDMA_VM_UPLINK
fi
cd "$VM_CWD" 2>/dev/null || cd /
[[ $VM_VERBOSE == 1 ]] && echo "vm.sh: guest $(uname -r) up at $(cut -d' ' -f1 /proc/uptime) s (NIC $RDMA_VM_NIC at $VM_NIC_PCI)" >&2
"${VM_ARGV[@]}" </dev/null
rc=$?
[[ $VM_VERBOSE == 1 ]] && echo "vm.sh: job exited $rc at guest uptime $(cut -d' ' -f1 /proc/uptime) s" >&2
echo "$rc" >/run/rhd-vm/status
sync
/bin/busybox dd if=/dev/zero of=/dev/port bs=1 seek=244 count=1 2>/dev/null  # isa-debug-exit
echo o >/proc/sysrq-trigger; sleep 10; /bin/busybox poweroff -f
STAGE2_EOF
chmod 755 "$RUNDIR/stage2.sh"

# quiet console; any oops panics and the guest stops (-no-reboot): we then
# report "no exit status" (125) with the console showing the oops
APPEND="console=ttyS0 quiet loglevel=4 panic=-1 oops=panic rdinit=/init"
[[ $EXCLUSIVE == 1 ]] && APPEND="$APPEND ib_core.netns_mode=0"
APPEND="$APPEND $EXTRA_APPEND"

# The test NIC has no -netdev peer: unconnected, like a cable-less port; with --wire, a cable
# to another guest's test NIC (a QEMU stream netdev over a unix socket, no host bridge).
NIC_DEV="virtio-net-pci,addr=0x$NIC_SLOT,mac=$NIC_MAC"
WIRE_NET=()
if [[ -n $WIRE ]]; then
  server=on
  [[ $WIRE == connect:* ]] && server=off
  WIRE_NET=(-netdev "stream,id=wire,server=$server,addr.type=unix,addr.path=${WIRE#*:}")
  NIC_DEV="$NIC_DEV,netdev=wire"
fi
QEMU=(qemu-system-x86_64 "${ACCEL[@]}" -M pc -m "$MEM" -smp "$SMP"
      -nodefaults -no-user-config -display none -no-reboot
      -serial stdio -device isa-debug-exit,iobase=0xf4,iosize=0x04
      -kernel "$KDIR/kernel" -initrd "$KDIR/initramfs.gz" -append "$APPEND"
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
      -virtfs "local,path=${RUNDIR//,/,,},mount_tag=vmrun,security_model=none"
      -virtfs "local,path=${REPO//,/,,},mount_tag=repo,security_model=none,multidevs=remap"
      "${WIRE_NET[@]}" -device "$NIC_DEV")
if [[ $UPLINK == 1 ]]; then
  fwd=
  IFS=, read -ra rules <<<"$UPLINK_FWD"
  for r in "${rules[@]}"; do fwd="$fwd,hostfwd=$r"; done
  QEMU+=(-netdev "user,id=uplink,net=10.0.2.0/24$fwd" -device "virtio-net-pci,netdev=uplink,addr=0x$UPLINK_SLOT,mac=$UPLINK_MAC")
fi

vnote "booting ($ACCEL_NAME, $SMP vCPU, $MEM MiB) at $(elapsed) s: $APPEND"
set +e
timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>"$RUNDIR/qemu.err" &
QPID=$!
wait "$QPID"; qrc=$?
QPID=
set -e
vnote "guest gone (qemu rc $qrc) at $(elapsed) s"
if [[ $qrc == 124 || $qrc == 137 ]]; then note "timed out after ${TIMEOUT} s"; exit 124; fi
if [[ -f $RUNDIR/status ]]; then exit "$(cat "$RUNDIR/status")"; fi
note "guest did not report an exit status (qemu rc $qrc; kernel panic?); qemu stderr:"
sed 's/^/  /' "$RUNDIR/qemu.err" >&2
exit 125
