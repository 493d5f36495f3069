#!/bin/bash
# Derives the system calls IPAM plugins make: runs Debian's host-local, static and dhcp
# (containernetworking-plugins, /usr/lib/cni) and, as a script IPAM plugin is run, dash with
# the tools the tests' stand-ins use, through VERSION, ADD, CHECK, DEL, GC and STATUS under
# `strace -f`, and prints every system call name seen, one per line, sorted, with the
# programs that made it. The allow-list in src/confine/seccomp.rs is this list (see there).
# Root only (network namespaces, the dhcp daemon, dnsmasq). Usage:
#   scripts/trace-ipam-syscalls.sh [OUT_DIR]
set -euo pipefail
out=${1:-$(mktemp -d /tmp/rhd-trace.XXXXXX)}
mkdir -p "$out"
cni=/usr/lib/cni
work=$(mktemp -d /tmp/rhd-trace-work.XXXXXX)
pod=rhdtrace-pod-$$
srv=rhdtrace-srv-$$
cleanup() {
    [ -n "${dhcpd:-}" ] && kill "$dhcpd" 2>/dev/null || true
    [ -n "${dnsm:-}" ] && kill "$dnsm" 2>/dev/null || true
    ip netns del "$pod" 2>/dev/null || true
    ip netns del "$srv" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$pod"
ip netns add "$srv"
ip link add rhdt0 type veth peer name rhdt1
ip link set rhdt0 netns "$pod"
ip link set rhdt1 netns "$srv"
ip -n "$srv" addr add 10.231.0.1/24 dev rhdt1
ip -n "$srv" link set rhdt1 up
ip -n "$pod" link set rhdt0 up
ip netns exec "$srv" dnsmasq --keep-in-foreground --conf-file=/dev/null --port=0 \
    --user=root --group=root --interface=rhdt1 --bind-interfaces \
    --dhcp-range=10.231.0.10,10.231.0.50,255.255.255.0,1h \
    --dhcp-leasefile="$work/leases" --pid-file="$work/dnsmasq.pid" >/dev/null 2>&1 &
dnsm=$!
sock=$work/dhcp.sock
"$cni/dhcp" daemon -socketpath "$sock" -pidfile "$work/dhcp.pid" >"$work/dhcpd.log" 2>&1 &
dhcpd=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
sleep 1

cat >"$work/script-ipam" <<'SCRIPT'
#!/bin/sh
cat >/dev/null
echo x >"$RHD_DATA/f" && cat "$RHD_DATA/f" >/dev/null && rm -f "$RHD_DATA/f"
ls "$RHD_DATA" >/dev/null; mkdir -p "$RHD_DATA/d"; sleep 0.01 &
wait
case "$CNI_COMMAND" in
ADD) echo '{"cniVersion":"1.0.0","ips":[{"address":"10.9.9.9/24"}]}';;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]}';;
esac
SCRIPT
chmod 755 "$work/script-ipam"

conf() { # type ipam-json
    printf '{"cniVersion":"1.0.0","name":"trace","type":"rdma-host-device","ipam":%s,"cni.dev/valid-attachments":[],"prevResult":%s}' "$2" "$3"
}
run() { # label exe verb stdin ifname
    local label=$1 exe=$2 verb=$3 input=$4 ifn=$5
    strace -f -qq -o "$out/$label.$verb.strace" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        RHD_DATA="$work/data" CNI_COMMAND="$verb" CNI_CONTAINERID=trace-1 CNI_IFNAME="$ifn" \
        CNI_NETNS="/run/netns/$pod" CNI_ARGS= CNI_PATH="$cni" \
        "$exe" <<<"$input" >"$out/$label.$verb.out" 2>&1 || true
}
mkdir -p "$work/data"
hl=$(conf host-local '{"type":"host-local","dataDir":"'"$work"'/data","ranges":[[{"subnet":"10.230.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}' '{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"/x"}],"ips":[{"address":"10.230.0.2/24","interface":0}]}')
st=$(conf static '{"type":"static","addresses":[{"address":"10.230.1.2/24","gateway":"10.230.1.1"}],"routes":[{"dst":"0.0.0.0/0"}]}' '{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"/x"}],"ips":[{"address":"10.230.1.2/24","gateway":"10.230.1.1","interface":0}]}')
dh=$(conf dhcp '{"type":"dhcp","daemonSocketPath":"'"$sock"'"}' '{"cniVersion":"1.0.0","interfaces":[{"name":"rhdt0","sandbox":"/x"}],"ips":[{"address":"10.231.0.10/24","interface":0}]}')
sc=$(conf script-ipam '{"type":"script-ipam"}' '{}')
for verb in VERSION ADD CHECK GC STATUS DEL; do
    run host-local "$cni/host-local" "$verb" "$hl" net1
    run static "$cni/static" "$verb" "$st" net1
    run dhcp "$cni/dhcp" "$verb" "$dh" rhdt0
    run script "$work/script-ipam" "$verb" "$sc" net1
done
# One line per system call: its name, then the programs (label.VERB) that made it.
for f in "$out"/*.strace; do
    l=$(basename "$f" .strace)
    sed -nE 's/^[0-9]+ +([a-z_0-9]+)\(.*/\1/p; s/^[0-9]+ +<\.\.\. ([a-z_0-9]+) resumed>.*/\1/p' "$f" | sort -u | sed "s/\$/ $l/"
done | sort | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k":"a[k]}' | sort >"$out/syscalls.txt"
cut -d: -f1 "$out/syscalls.txt"
echo "traces and outputs in $out" >&2
