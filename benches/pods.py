#!/usr/bin/env python3
"""ADD+DEL of one NIC (a veth, no IPAM) with N other pods on the node: how an attachment's
cost grows with the pods beside it (issue 26). Run through benches/pods.sh.

Three plugins side by side in one run, rounds interleaved (the order rotates every round):
`main` (a build of the main branch to compare with), `ours` (this tree, with its uppers
watcher running, as the DaemonSet runs it), Debian's host-device and the kernel's own move
(`ip`, the floor). The node is the machine's own namespace (as on a node, the plugins' sysfs
is that namespace's): the NIC is a veth there, and a pod is what a node holds per pod, a
network namespace with lo and eth0 up, eth0 a veth whose peer is in the host with a /32 route
through it. The levels are cumulative (0, then 100 more, ...): every scan of the node's
namespaces sees every namespace of the machine, so two levels cannot coexist. Every link and
namespace made starts with "rhdp" and is deleted at the end.

After each plugin's DEL the harness waits --settle seconds before the next ADD (untimed): a
NIC that a pod gave back is attached again no sooner than a pod is scheduled, seconds later.
The watcher scans a NIC that came home in that time. `--settle 0` measures the worst case, an
ADD right behind a DEL, which waits for that scan (or makes it).

Between an ADD and its DEL the harness waits --hold seconds (untimed; default 0, a DEL right
behind its ADD). Before 8bc9c5d the watcher's guard searched every namespace once after each
ADD (the kernel's notification of the NIC's tag looked, to it, like an upper linked to the NIC),
and a DEL within that search waited for it; it still does so for a `main` older than that, which
tags its NIC and brings it up in one request. Its searches are in the watcher's log
(`watcher.log` under --work, "searching every namespace").

Also printed per level: the watcher's CPU per ADD+DEL pair of all three plugins (every DEL
brings the NIC home and it scans again), its answer to a NIC it had certified, and to one
whose certificate a notification just voided (a full scan of the node's namespaces); each
plugin's peak RSS for ADD and DEL (the spawn trampoline's ru_maxrss). At the end, one line holds
issue 26's goals as this run measured them: ours on the fullest level against ours on an empty
node, and, on the empty node, ours against host-device above the floor (CPU, wall) and in RSS.

Plumbing (spawn trampoline, netns handling, plugin configs) is benches/harness.py's.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# Names of our own, apart from bench.sh's (rhdb), which may run at the same time on a shared
# machine: harness.World names its namespaces after harness.PREFIX.
PREFIX = harness.PREFIX = "rhdp"
from harness import Plugin, World, bench_node, cycle_direct, enter, med, must, q, run1, sh  # noqa: E402


class Ours(Plugin):
    """This tree's plugin: its node configuration also names the watcher's socket."""

    def __init__(self, *a, socket_path=None, **kw):
        super().__init__(*a, **kw)
        self.socket_path = socket_path

    def node_env(self):
        path = self.state_dir + ".node.json"
        if not os.path.exists(path):
            node = bench_node(self.state_dir)
            if self.socket_path:
                node["uppersSocket"] = self.socket_path
            with open(path, "w") as f:
                json.dump(node, f)
        return {"RDMA_HOST_DEVICE_NODE_CONFIG": path}


def ipn(ns, *args, **kw):
    """`ip` in netns `ns` (None: the machine's own)."""
    return sh("ip", *(["-n", ns] if ns else []), *args, **kw)


class HostFloor:
    """The kernel's own move there and back (`ip`, one request each way), from and to the
    machine's namespace: what no plugin goes below."""
    kind = "ip"
    label = "ip-floor"


def cycle_floor(pod_ns, device):
    a = must(run1(["/usr/sbin/ip", "link", "set", device, "netns", pod_ns, "name", "net1", "up"],
                  {}), "ip move in")
    d = must(run1(["/usr/sbin/ip", "-n", pod_ns, "link", "set", "net1", "netns", "1",
                   "name", device, "down"], {}), "ip move out")
    return a, d


def namespaces_seen():
    """How many network namespaces a scan of the node finds (/run/netns and every pid's)."""
    ids = set()
    for d in ["/run/netns"]:
        for n in os.listdir(d):
            try:
                s = os.stat(os.path.join(d, n))
                ids.add((s.st_dev, s.st_ino))
            except OSError:
                pass
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                s = os.stat(f"/proc/{p}/ns/net")
                ids.add((s.st_dev, s.st_ino))
            except OSError:
                pass
    return len(ids)


def add_pods(host_ns, start, count):
    """Pods start..start+count-1: a netns each, lo and eth0 up, eth0's peer in host_ns with a
    /32 route through it."""
    names = [f"{PREFIX}-p{i:04d}" for i in range(start, start + count)]
    for n in names:
        sh("ip", "netns", "add", n)
    lines = []
    for i, n in zip(range(start, start + count), names):
        v = f"{PREFIX}v{i:04d}"
        lines += [f"link add {v} type veth peer name eth0 netns {n}",
                  f"link set {v} up",
                  f"route add 10.250.{i // 250}.{i % 250 + 1}/32 dev {v}"]
    for k in range(0, len(lines), 600):
        ipn(host_ns, "-batch", "-", stdin="\n".join(lines[k:k + 600]) + "\n")
    for n in names:
        sh("ip", "-n", n, "link", "set", "lo", "up")
        sh("ip", "-n", n, "link", "set", "eth0", "up")
    return names


def ask(sock_path, netns_id, ifindex, name, timeout=30.0):
    """One query to the watcher, as ADD asks it: (answer line, ms)."""
    t0 = time.perf_counter()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    s.sendall((json.dumps({"ifindex": ifindex, "name": name, "netns": list(netns_id)}) + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        b = s.recv(65536)
        if not b:
            break
        buf += b
    s.close()
    return buf.decode().strip(), (time.perf_counter() - t0) * 1e3


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def cycle(p, host_ns, pod_ns, device, cid, hold):
    if p.kind == "ip":
        return cycle_floor(pod_ns, device)
    return cycle_direct(p, host_ns, pod_ns, device, cid, None, hold=hold)


def goals(rows, floor):
    """Issue 26's goals, from this one run: ours on the fullest level against ours on the first
    (the empty node with the default levels), and ours against Debian's host-device on the first
    level (above the ip floor)."""
    empty, full = rows[0], [r for r in rows if r["pods"].isdigit()][-1]
    m, c = empty["median"], empty["cpu_median"]
    cpu_ratio = (c["ours"] - c[floor]) / (c["hostdev"] - c[floor])
    rss = empty["rss_mib_median"]
    print(f"goals: {full['pods']} pods / {empty['pods']} pods, ours' ADD+DEL wall"
          f" {full['ours_vs_empty']:.3f}x (<= 1.05x), CPU {full['ours_cpu_vs_empty']:.3f}x;"
          f" {empty['pods']} pods: CPU above the floor {cpu_ratio:.2f}x host-device's (<= 0.3x),"
          f" wall above the floor {m['ours'] - m[floor]:.2f} ms (<= 1 ms; host-device"
          f" {m['hostdev'] - m[floor]:.2f}), peak RSS ADD {rss['ours'][0] / rss['hostdev'][0]:.2f}x,"
          f" DEL {rss['ours'][1] / rss['hostdev'][1]:.2f}x host-device's (<= 1.0x)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--main", required=True, help="rdma-host-device built from main")
    ap.add_argument("--ours", required=True, help="rdma-host-device built from this tree")
    ap.add_argument("--agent", help="rdma-host-device-agent built from this tree (runs the uppers"
                    " watcher; default: beside --ours)")
    ap.add_argument("--hostdev", default="/usr/lib/cni/host-device")
    ap.add_argument("--spawn", required=True, help="the spawn trampoline (benches/spawn.c)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--pods", default="0,100,300", help="cumulative levels")
    ap.add_argument("-n", type=int, default=12, help="interleaved rounds per level")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds between a DEL and the next ADD")
    ap.add_argument("--hold", type=float, default=0.0,
                    help="seconds between an ADD and its DEL (untimed): a pod's life")
    ap.add_argument("--neighbour", type=int, default=40000,
                    help="links in one more pod's namespace after the last level (0: skip)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.agent:
        args.agent = os.path.join(os.path.dirname(os.path.abspath(args.ours)),
                                  "rdma-host-device-agent")
    harness.SPAWN = args.spawn
    work = os.path.abspath(args.work)
    subprocess.run(["rm", "-rf", work])
    os.makedirs(work)

    def mkbin(label, exe, name):
        d = os.path.join(work, f"bin-{label}")
        os.makedirs(d, exist_ok=True)
        os.symlink(os.path.abspath(exe), os.path.join(d, name))
        return d

    sock = os.path.join(work, "uppers.sock")
    M = Plugin("main", "ours", args.main, mkbin("main", args.main, "rdma-host-device"),
               os.path.join(work, "state-main"), "1.0.0")
    O = Ours("ours", "ours", args.ours, mkbin("ours", args.ours, "rdma-host-device"),
             os.path.join(work, "state-ours"), "1.0.0", socket_path=sock)
    H = Plugin("hostdev", "hostdev", args.hostdev, mkbin("hostdev", args.hostdev, "host-device"),
               os.path.join(work, "state-hostdev"), "1.0.0")
    F = HostFloor()
    plugins = [M, O, H, F]
    rows = []
    w = World(args)
    watcher = None
    pods = []
    try:
        far = w.ns("far")
        # The node's namespace is the machine's own: the plugins read what it shows (sysfs
        # included) as on a node. Every link made here starts with PREFIX and goes at the end.
        h = None
        pod = w.ns("pod")
        dev = f"{PREFIX}nic0"
        sh("ip", "link", "del", dev, check=False)
        sh("ip", "link", "add", dev, "mtu", "1400", "type", "veth", "peer", "name",
           f"{PREFIX}peer0", "netns", far)
        sh("ip", "-n", far, "link", "set", f"{PREFIX}peer0", "up")
        enter(h)
        netns_id = (os.stat("/proc/self/ns/net").st_dev, os.stat("/proc/self/ns/net").st_ino)
        wlog = os.path.join(work, "watcher.log")
        watcher = subprocess.Popen([args.agent, "uppers-watch", "--socket", sock, "--debug"],
                                   stdout=subprocess.DEVNULL, stderr=open(wlog, "w"))
        enter(None)
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        else:
            sys.exit("bench: the watcher made no socket")

        def ifindex():
            return json.loads(ipn(h, "-j", "link", "show", "dev", dev).stdout)[0]["ifindex"]

        for p in plugins:  # warm-up
            for _ in range(3):
                cycle(p, h, pod, dev, "rhdb-warm", 0.0)
        print(f"pods on the node: ADD+DEL of one veth NIC, no IPAM, n={args.n} rounds per point, "
              f"settle {args.settle} s, hold {args.hold} s", flush=True)
        print("  medians in ms: ADD+DEL (ADD alone); ours/@0: ours' ADD+DEL over its 0-pod figure;"
              " above: ours minus the ip floor; watcher: its CPU per pair, its answer certified"
              " (warm) and after a notification (cold: a full scan)", flush=True)
        print(f"  {'pods':>5} {'netns':>6} " + " ".join(f"{p.label:>21}" for p in plugins)
              + f" {'ours/@0':>7} {'above':>6} {'wCPU':>7} {'warm':>5} {'cold':>6}", flush=True)
        base = None
        base_cpu = None
        levels = [int(x) for x in args.pods.split(",")]
        made = 0
        for level in levels + ([f"{levels[-1]}+{args.neighbour}"] if args.neighbour else []):
            if isinstance(level, int):
                if level > made:
                    pods += add_pods(h, made, level - made)
                    made = level
                label = str(level)
            else:
                big = w.ns("big")
                lines = [f"link add x{i} type veth peer name y{i}" for i in range(args.neighbour // 2)]
                for k in range(0, len(lines), 5000):
                    sh("ip", "-n", big, "-batch", "-", stdin="\n".join(lines[k:k + 5000]) + "\n")
                label = level
            time.sleep(1.0)
            seen = namespaces_seen()
            res = {p.label: [] for p in plugins}
            adds = {p.label: [] for p in plugins}
            cpus = {p.label: [] for p in plugins}
            rss = {p.label: ([], []) for p in plugins}
            log_at = os.path.getsize(wlog)
            c0 = cpu_ms(watcher.pid)
            for i in range(args.n):
                order = plugins[i % len(plugins):] + plugins[:i % len(plugins)]
                for p in order:
                    a, d = cycle(p, h, pod, dev, f"rhdb-c{i}", args.hold)
                    res[p.label].append(a.ms + d.ms)
                    adds[p.label].append(a.ms)
                    if a.cpu_ms is not None:
                        cpus[p.label].append(a.cpu_ms + d.cpu_ms)
                    rss[p.label][0].append(a.rss_kb / 1024)
                    rss[p.label][1].append(d.rss_kb / 1024)
                    time.sleep(args.settle)
            # Per plugin pair (the floor's moves bring the NIC home too).
            cpu = (cpu_ms(watcher.pid) - c0) / (args.n * len(plugins))
            # How the watcher answered ours' ADDs in these rounds (its debug lines).
            with open(wlog) as f:
                f.seek(log_at)
                told = f.read()
            certified = told.count("): certified")
            scanned = told.count("): scanned in")
            # The watcher's answers, 5 of each: certified, and just voided (an MTU change
            # notifies), which is a full scan of the node's namespaces.
            time.sleep(1.0)
            warm, cold = [], []
            for k in range(5):
                a, ms = ask(sock, netns_id, ifindex(), dev)
                warm.append(ms)
                ipn(h, "link", "set", dev, "mtu", str(1401 + k))
                b, ms = ask(sock, netns_id, ifindex(), dev)
                cold.append(ms)
                if a != '{"riding":[]}' or b != '{"riding":[]}':
                    sys.exit(f"bench: the watcher answered {a!r} / {b!r}")
            ipn(h, "link", "set", dev, "mtu", "1400")
            m = {k: med(v) for k, v in res.items()}
            above = m["ours"] - m[F.label]
            if base is None:
                base = (m["ours"], above, m["hostdev"], m[F.label])
            print(f"  {label:>5} {seen:>6} " + " ".join(
                f"{m[p.label]:>7.2f} (ADD {med(adds[p.label]):>5.2f})" for p in plugins)
                + f" {m['ours'] / base[0]:>6.3f}x {above:>6.2f} {cpu:>7.2f} {med(warm):>5.2f} {med(cold):>6.2f}",
                flush=True)
            c = {k: med(v) for k, v in cpus.items()}
            if base_cpu is None:
                base_cpu = c
            print(f"  {'':>5} {'CPU':>6} " + " ".join(f"{c[p.label]:>21.2f}" for p in plugins)
                  + f" {c['ours'] / base_cpu['ours']:>6.3f}x   (ours' ADDs: {certified} answered from a"
                  f" certificate, {scanned} after a scan)", flush=True)
            r = {k: (med(a), med(d)) for k, (a, d) in rss.items()}
            print(f"  {'':>5} {'RSS':>6} " + " ".join(
                f"{'':>9}{r[p.label][0]:>5.2f} /{r[p.label][1]:>5.2f}" for p in plugins if p is not F)
                + "   (peak RSS MiB, ADD / DEL)", flush=True)
            rows.append(dict(pods=label, netns=seen, settle=args.settle, hold=args.hold, n=args.n,
                             median=m, p90={k: q(v, .9) for k, v in res.items()},
                             add_median={k: med(v) for k, v in adds.items()},
                             ours_vs_empty=m["ours"] / base[0], ours_above_floor=above,
                             hostdev_vs_empty=m["hostdev"] / base[2],
                             floor_vs_empty=m[F.label] / base[3], watcher_cpu_ms_per_pair=cpu,
                             watcher_warm_ms=med(warm), watcher_cold_ms=med(cold),
                             cpu_median=c, ours_cpu_vs_empty=c["ours"] / base_cpu["ours"],
                             rss_mib_median={k: v for k, v in r.items() if k != F.label},
                             answered_certified=certified, answered_after_scan=scanned))
        goals(rows, F.label)
    finally:
        if watcher:
            watcher.kill()
            watcher.wait()
        enter(None)
        for n in pods:
            sh("ip", "netns", "del", n, check=False)
        sh("ip", "link", "del", f"{PREFIX}nic0", check=False)
        w.cleanup()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
