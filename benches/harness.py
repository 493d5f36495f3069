#!/usr/bin/env python3
"""Side-by-side benchmark of two CNI plugins that move a host NIC into a pod: by default
rdma-host-device (A) against Debian's host-device (B). Run through benches/bench.sh.

Method (see docs/bench.md): every figure is A and B measured in the same run, interleaved
(A B, then B A, ...), reported as medians and as the ratio A/B. Each plugin process is started
with posix_spawn (env + stdin, as a runtime does) and reaped with wait4: wall time is spawn to
reap, peak RSS is the child's ru_maxrss (which includes the IPAM plugin it runs and reaps).

Isolation: the "host" of every case is a dedicated network namespace (rhdb-h*), so the 2,000
links of the scaling case, and our veths, never show up in the machine's own namespace, and
other users of the machine do not show up in ours. The harness setns()es into that namespace
before each spawn; children inherit it.
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
PREFIX = "rhdb"  # every netns and link this harness makes starts with it


# ------------------------------------------------------------------ plumbing

def sh(*args, check=True, stdin=None):
    p = subprocess.run(list(args), input=stdin, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed: {p.stderr.strip()}")
    return p


_ns_fds = {"home": os.open("/proc/self/ns/net", os.O_RDONLY)}  # where we started


def enter(ns):
    """Move this (single-threaded) process into netns `ns` (None: the machine's own)."""
    path = "home" if ns is None else f"/run/netns/{ns}"
    fd = _ns_fds.get(path)
    if fd is None:
        fd = _ns_fds[path] = os.open(path, os.O_RDONLY)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        sys.exit(f"bench: setns {path}: {os.strerror(e)}")


def netns_add(name):
    sh("ip", "netns", "del", name, check=False)
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")


SPAWN = None  # benches/spawn.c, built by bench.sh: fork/exec/wait4 from a small process


class Proc:
    """One plugin process, started through the spawn trampoline: start it, later reap it."""

    def __init__(self, argv, env, stdin_bytes):
        r, w = os.pipe()
        os.write(w, stdin_bytes)  # configs are far below the pipe buffer
        os.close(w)
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        fa = [
            (os.POSIX_SPAWN_DUP2, r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
            (os.POSIX_SPAWN_DUP2, rep_w, 3),
        ]
        self.pid = os.posix_spawn(SPAWN, [SPAWN] + argv, env, file_actions=fa)
        for fd in (r, out_w, err_w, rep_w):
            os.close(fd)
        self.argv = argv

    def reap(self):
        os.waitpid(self.pid, 0)
        self.out = _drain(self.out_r)
        self.err = _drain(self.err_r)
        rep = _drain(self.rep_r).split()
        if len(rep) not in (3, 4):
            sys.exit(f"bench: spawn trampoline failed for {self.argv}: {self.err}")
        self.ms = int(rep[0]) / 1e6
        self.rss_kb = int(rep[1])
        self.code = int(rep[2])
        # user + system CPU (an older trampoline does not report it)
        self.cpu_ms = int(rep[3]) / 1e3 if len(rep) == 4 else None
        return self


def _drain(fd):
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def run1(argv, env, stdin_bytes=b""):
    return Proc(argv, env, stdin_bytes).reap()


def must(p, what):
    if p.code != 0:
        sys.exit(f"bench: {what} failed (exit {p.code})\nstdout: {p.out}\nstderr: {p.err}")
    return p


# ------------------------------------------------------------------ the plugins

def bench_node(state_dir):
    """The node configuration ours runs under: its state and log dirs, and allowedNics naming
    the bench's NICs. They are veths whose peers sit in another namespace, which the node
    refuses unless allowedNics.names lists them (docs/configuration.md), as an operator would
    list such a pair."""
    names = [f"{PREFIX}nic0"] + [f"{PREFIX}pn{j:02d}" for j in range(16)]
    names += [f"{PREFIX}ln{c}" for c in (1, 100, 2000)]
    return {"stateDir": state_dir, "logDir": state_dir + ".log", "allowedNics": {"names": names}}


class Plugin:
    """A plugin under test: a label, its binary, and how its config looks."""

    def __init__(self, label, kind, exe, bindir, state_dir, version, extra=None, env=None):
        self.label, self.kind, self.exe = label, kind, exe
        self.extra_env = env or {}
        self.bindir, self.state_dir, self.version = bindir, state_dir, version
        self.extra = extra or {}

    @property
    def type_name(self):
        return os.path.basename(self.bindir_exe)

    @property
    def bindir_exe(self):
        return os.path.join(self.bindir, "rdma-host-device" if self.kind == "ours" else "host-device")

    def conf(self, device, ipam_addr=None, version=None):
        c = {
            "cniVersion": version or self.version,
            "name": "rhdbench",
            "type": self.type_name,
            "device": device,
        }
        if self.kind == "ours":
            # The node's stateDir (node.json, see env()), repeated so older builds use it too.
            c["stateDir"] = self.state_dir
        if ipam_addr:
            c["ipam"] = {
                "type": "static",
                "addresses": [{"address": ipam_addr + "/24", "gateway": ipam_addr.rsplit(".", 1)[0] + ".1"}],
                "routes": [{"dst": "0.0.0.0/0"}],
            }
        c.update(self.extra)  # last: an experiment may override anything, even "ipam"
        return c

    def env(self, cmd, cid, netns, ifname="net1", cni_path=None):
        return {
            "CNI_COMMAND": cmd,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": f"/run/netns/{netns}",
            "CNI_IFNAME": ifname,
            "CNI_PATH": cni_path or f"{self.bindir}:/usr/lib/cni",
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            **self.node_env(),
            **self.extra_env,
        }

    def node_env(self):
        """Ours reads its state dir from a node configuration, not from the network config."""
        if self.kind != "ours":
            return {}
        path = self.state_dir + ".node.json"
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump(bench_node(self.state_dir), f)
        return {"RDMA_HOST_DEVICE_NODE_CONFIG": path}

    def spawn(self, cmd, conf, cid, netns):
        return Proc([self.bindir_exe], self.env(cmd, cid, netns), json.dumps(conf).encode())


# ------------------------------------------------------------------ the world

class World:
    def __init__(self, args):
        self.args = args
        self.made_ns = []

    def ns(self, name):
        full = f"{PREFIX}-{name}"
        netns_add(full)
        self.made_ns.append(full)
        return full

    def nic(self, host_ns, far_ns, name, peer):
        """A veth standing in for a NIC: `name` in host_ns, its peer far away (not counted)."""
        sh("ip", "-n", host_ns, "link", "add", name, "mtu", "1400", "type", "veth",
           "peer", "name", peer, "netns", far_ns)
        sh("ip", "-n", far_ns, "link", "set", peer, "up")

    def filler(self, host_ns, far_ns, count, tag):
        """`count` unrelated links in host_ns (veth ends whose peers live in far_ns)."""
        lines = [f"link add {PREFIX}{tag}{i:04d} type veth peer name {PREFIX}{tag}q{i:04d} netns {far_ns}"
                 for i in range(count)]
        for i in range(0, len(lines), 500):
            sh("ip", "-n", host_ns, "-batch", "-", stdin="\n".join(lines[i:i + 500]) + "\n")

    def cleanup(self):
        enter(None)
        for n in reversed(self.made_ns):
            sh("ip", "netns", "del", n, check=False)


def link_count(ns):
    return len(json.loads(sh("ip", "-n", ns, "-j", "link", "show").stdout))


# ------------------------------------------------------------------ measurements

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def q(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


class Series:
    def __init__(self):
        self.add, self.dele, self.cycle, self.rss_add, self.rss_del = [], [], [], [], []


def cycle_direct(plugin, host_ns, pod_ns, device, cid, ipam_addr, version=None, hold=0.0):
    """ADD, then DEL `hold` seconds later (untimed)."""
    if plugin.kind == "ip":
        return cycle_ip(host_ns, pod_ns, device)
    conf = plugin.conf(device, ipam_addr, version)
    enter(host_ns)
    a = must(plugin.spawn("ADD", conf, cid, pod_ns).reap(), f"{plugin.label} ADD")
    if hold:
        time.sleep(hold)
    conf_del = dict(conf)
    if plugin.version != "0.1.0":
        conf_del["prevResult"] = json.loads(a.out)
    d = must(plugin.spawn("DEL", conf_del, cid, pod_ns).reap(), f"{plugin.label} DEL")
    enter(None)
    return a, d


class Floor:
    """Not a plugin: the kernel's own cost of the move, as `ip` does it in one RTM_NEWLINK
    (netns + name + up), and back. What no plugin can go below."""
    kind = "ip"
    label = "ip-floor"


def cycle_ip(host_ns, pod_ns, device):
    enter(host_ns)
    a = must(run1(["/usr/sbin/ip", "link", "set", device, "netns", pod_ns, "name", "net1", "up"],
                  {}), "ip move in")
    d = must(run1(["/usr/sbin/ip", "-n", pod_ns, "link", "set", "net1", "netns", host_ns,
                   "name", device, "down"], {}), "ip move out")
    enter(None)
    return a, d


def interleaved(n, pair, body):
    """Run body(plugin, i) for both plugins of `pair`, n times, alternating the order."""
    res = {p.label: Series() for p in pair}
    for i in range(n):
        order = pair if i % 2 == 0 else pair[::-1]
        for p in order:
            a, d = body(p, i)
            s = res[p.label]
            s.add.append(a.ms)
            s.dele.append(d.ms)
            s.cycle.append(a.ms + d.ms)
            if a.rss_kb is not None:
                s.rss_add.append(a.rss_kb)
                s.rss_del.append(d.rss_kb)
    return res


class Timed:
    def __init__(self, ms, rss_kb=None, out=""):
        self.ms, self.rss_kb, self.out = ms, rss_kb, out


def driver_call(driver, plugin, cmd, conf_path, cid, pod_ns, cache):
    argv = [driver, "-cmd", cmd, "-conf", conf_path, "-netns", f"/run/netns/{pod_ns}",
            "-cid", cid, "-ifname", "net1", "-path", f"{plugin.bindir}:/usr/lib/cni",
            "-cache", cache]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    p = must(run1(argv, env), f"libcni {plugin.label} {cmd}")
    return Timed(p.ms, None, p.out)


def parallel_round(plugin, host_ns, pods, nics, cmd, confs, cid_base):
    enter(host_ns)
    t0 = time.perf_counter_ns()
    if plugin.kind == "ip":
        if cmd == "ADD":
            argvs = [["/usr/sbin/ip", "link", "set", nics[k], "netns", pods[k], "name", "net1", "up"]
                     for k in range(len(pods))]
        else:
            argvs = [["/usr/sbin/ip", "-n", pods[k], "link", "set", "net1", "netns", host_ns,
                      "name", nics[k], "down"] for k in range(len(pods))]
        procs = [Proc(a, {}, b"") for a in argvs]
    else:
        procs = [plugin.spawn(cmd, confs[k], f"{cid_base}-{k}", pods[k]) for k in range(len(pods))]
    done = [p.reap() for p in procs]
    t1 = time.perf_counter_ns()
    enter(None)
    for p in done:
        must(p, f"{plugin.label} parallel {cmd}")
    return done, (t1 - t0) / 1e6


# ------------------------------------------------------------------ report

ROWS = []


def row(case, metric, a, b, unit="ms", target=None, note=""):
    ratio = a / b if b else float("nan")
    ROWS.append(dict(case=case, metric=metric, a=a, b=b, ratio=ratio, unit=unit,
                     target=target, note=note))
    flag = ""
    if target is not None:
        flag = "ok" if ratio <= target else f"MISS (target <= {target}x)"
    print(f"  {case:<34} {metric:<14} {a:>9.2f} {b:>9.2f} {unit:<3} {ratio:>6.3f}x  {flag} {note}",
          flush=True)


def header(title, a_label, b_label):
    print(f"\n== {title}", flush=True)
    print(f"  {'case':<34} {'metric':<14} {a_label:>9} {b_label:>9} {'':<3} {'A/B':>7}", flush=True)


def series_rows(case, res, A, B, n, target_cycle=None, rss_target=None):
    a, b = res[A.label], res[B.label]
    row(case, "ADD median", med(a.add), med(b.add))
    row(case, "DEL median", med(a.dele), med(b.dele))
    row(case, "ADD+DEL median", med(a.cycle), med(b.cycle), target=target_cycle,
        note=f"(n={n}; p90 {q(a.cycle, .9):.1f}/{q(b.cycle, .9):.1f})")
    if a.rss_add and rss_target is not None:
        row(case, "peak RSS ADD", med(a.rss_add) / 1024, med(b.rss_add) / 1024, "MiB",
            target=rss_target)
        row(case, "peak RSS DEL", med(a.rss_del) / 1024, med(b.rss_del) / 1024, "MiB",
            target=rss_target)


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="plugin A (rdma-host-device)")
    ap.add_argument("--a-label", default="ours")
    ap.add_argument("--a-extra", default="{}", help="JSON merged into A's configs")
    ap.add_argument("--a-env", default="{}", help="JSON: more environment for A (experiments)")
    ap.add_argument("--b-env", default="{}", help="JSON: more environment for B (experiments)")
    ap.add_argument("--b", default="/usr/lib/cni/host-device", help="plugin B")
    ap.add_argument("--b-label", default="hostdev")
    ap.add_argument("--b-kind", default="hostdev", choices=["hostdev", "ours"])
    ap.add_argument("--b-extra", default="{}")
    ap.add_argument("--driver", help="libcni driver binary (skip the libcni case without it)")
    ap.add_argument("--spawn", required=True, help="the spawn trampoline (benches/spawn.c)")
    ap.add_argument("--work", required=True, help="scratch dir (bin dirs, state, caches)")
    ap.add_argument("-n", type=int, default=40, help="interleaved iterations per case")
    ap.add_argument("--par-rounds", type=int, default=12)
    ap.add_argument("--cases", default="direct,noipam,v110,libcni,parallel,links,spawn")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    global SPAWN
    SPAWN = os.path.abspath(args.spawn)
    n = args.n

    if os.geteuid() != 0:
        sys.exit("bench: needs root (netns, links)")
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def mkbin(label, exe, name):
        d = os.path.join(work, f"bin-{label}")
        os.makedirs(d, exist_ok=True)
        os.symlink(os.path.abspath(exe), os.path.join(d, name))
        return d

    A = Plugin(args.a_label, "ours", args.a, mkbin(args.a_label, args.a, "rdma-host-device"),
               os.path.join(work, "state-a"), "1.0.0", json.loads(args.a_extra),
               json.loads(args.a_env))
    bname = "rdma-host-device" if args.b_kind == "ours" else "host-device"
    B = Plugin(args.b_label, args.b_kind, args.b, mkbin(args.b_label, args.b, bname),
               os.path.join(work, "state-b"), "1.0.0", json.loads(args.b_extra),
               json.loads(args.b_env))
    pair = [A, B]

    w = World(args)
    try:
        far = w.ns("far")
        h1 = w.ns("h1")
        pod = w.ns("pod")
        w.nic(h1, far, f"{PREFIX}nic0", f"{PREFIX}peer0")
        dev = f"{PREFIX}nic0"

        # warm-up: page cache, dentries, first-exec costs, for both
        for p in pair:
            for _ in range(3):
                cycle_direct(p, h1, pod, dev, "rhdb-warm", "10.99.0.2")
                cycle_direct(p, h1, pod, dev, "rhdb-warm", None)

        if "spawn" in cases:
            header("spawn floor (fork + exec + wait4 of /bin/true, same trampoline)", "true", "-")
            enter(h1)
            xs = [run1(["/bin/true"], {}).ms for _ in range(n)]
            enter(None)
            print(f"  {'spawn /bin/true':<34} {'median':<14} {med(xs):>9.2f} ms", flush=True)
            ROWS.append(dict(case="spawn floor", metric="median", a=med(xs), b=None, ratio=None,
                             unit="ms", target=None, note=""))

        if "direct" in cases:
            header("direct invocation, static IPAM, cniVersion 1.0.0", A.label, B.label)
            res = interleaved(n, pair, lambda p, i: cycle_direct(p, h1, pod, dev, f"rhdb-d{i}", "10.99.0.2"))
            series_rows("direct, static IPAM", res, A, B, n, target_cycle=0.3, rss_target=0.5)

        if "noipam" in cases:
            header("direct invocation, no IPAM, cniVersion 1.0.0", A.label, B.label)
            F = Floor()
            res = interleaved(n, [A, B, F], lambda p, i: cycle_direct(p, h1, pod, dev, f"rhdb-n{i}", None))
            series_rows("direct, no IPAM", res, A, B, n, target_cycle=0.1, rss_target=0.5)
            f = res[F.label]
            fa, fd_, fc = med(f.add), med(f.dele), med(f.cycle)
            print(f"  {'kernel floor (ip, one request)':<34} {'ADD / DEL':<14} {fa:>9.2f} {fd_:>9.2f} ms"
                  f"   (ADD+DEL {fc:.2f} ms; RSS {med(f.rss_add) / 1024:.2f} MiB)", flush=True)
            ROWS.append(dict(case="kernel floor (ip)", metric="ADD+DEL median", a=fc, b=None,
                             ratio=None, unit="ms", target=None, note=f"ADD {fa:.2f} DEL {fd_:.2f}"))
            a, b = res[A.label], res[B.label]
            row("direct, no IPAM, above the floor", "ADD+DEL median", med(a.cycle) - fc,
                med(b.cycle) - fc, target=0.1, note="(each median minus the ip floor's)")

        if "v110" in cases and B.kind == "hostdev":
            header("ours at cniVersion 1.1.0 (static IPAM stops at 1.0.0) vs ours at 1.0.0", "1.1.0", "1.0.0")
            A11 = Plugin(A.label + "@1.1.0", "ours", A.exe, A.bindir, A.state_dir, "1.1.0", A.extra,
                         A.extra_env)
            res = interleaved(n, [A11, A], lambda p, i: cycle_direct(p, h1, pod, dev, f"rhdb-v{i}", "10.99.0.2"))
            series_rows("ours static, 1.1.0 vs 1.0.0", res, A11, A, n)

        if "libcni" in cases and args.driver:
            header("through libcni (Go driver: AddNetwork/DelNetwork), cniVersion 1.0.0", A.label, B.label)
            for ipam, tag in (("10.99.0.2", "static IPAM"), (None, "no IPAM")):
                paths = {}
                for p in pair:
                    path = os.path.join(work, f"{p.label}-{'ipam' if ipam else 'none'}.conf")
                    with open(path, "w") as f:
                        json.dump(p.conf(dev, ipam), f)
                    paths[p.label] = path
                cache = os.path.join(work, "libcni-cache")

                def body(p, i, ipam=ipam, paths=paths):
                    cid = f"rhdb-l{i}-{1 if ipam else 0}"
                    enter(h1)
                    a = driver_call(args.driver, p, "add", paths[p.label], cid, pod, cache)
                    d = driver_call(args.driver, p, "del", paths[p.label], cid, pod, cache)
                    enter(None)
                    return a, d

                res = interleaved(n, pair, body)
                a, b = res[A.label], res[B.label]
                row(f"libcni, {tag}", "ADD median", med(a.add), med(b.add))
                row(f"libcni, {tag}", "DEL median", med(a.dele), med(b.dele))
                row(f"libcni, {tag}", "ADD+DEL median", med(a.cycle), med(b.cycle),
                    target=0.3 if ipam else 0.1, note=f"(n={n}; includes the Go driver's own start)")

        if "parallel" in cases:
            k = 16
            header(f"{k} NICs into {k} pods at once (static IPAM), wall time of the batch", A.label, B.label)
            hp = w.ns("hpar")
            pods = [w.ns(f"pp{j:02d}") for j in range(k)]
            nics = [f"{PREFIX}pn{j:02d}" for j in range(k)]
            for j in range(k):
                w.nic(hp, far, nics[j], f"{PREFIX}pq{j:02d}")
            F = Floor()
            walls = {p.label: ([], []) for p in pair + [F]}
            for r in range(args.par_rounds):
                order = [A, B, F] if r % 2 == 0 else [F, B, A]
                for p in order:
                    if p is F:
                        confs = dconfs = None
                        _, wa = parallel_round(p, hp, pods, nics, "ADD", None, "")
                        _, wd = parallel_round(p, hp, pods, nics, "DEL", None, "")
                    else:
                        confs = [p.conf(nics[j], f"10.98.{j}.2") for j in range(k)]
                        adds, wa = parallel_round(p, hp, pods, nics, "ADD", confs, f"rhdb-p{r}")
                        dconfs = [dict(confs[j], prevResult=json.loads(adds[j].out)) for j in range(k)]
                        _, wd = parallel_round(p, hp, pods, nics, "DEL", dconfs, f"rhdb-p{r}")
                    walls[p.label][0].append(wa)
                    walls[p.label][1].append(wd)
            (aa, ad), (ba, bd) = walls[A.label], walls[B.label]
            row(f"{k} in parallel, static IPAM", "ADD wall med", med(aa), med(ba),
                note=f"(rounds={args.par_rounds})")
            row(f"{k} in parallel, static IPAM", "DEL wall med", med(ad), med(bd))
            fa, fd_ = walls[F.label]
            print(f"  {'kernel floor: 16 ip moves at once':<34} {'ADD / DEL':<14} {med(fa):>9.2f} {med(fd_):>9.2f} ms"
                  "   (no IPAM: moves only)", flush=True)
            ROWS.append(dict(case="16 in parallel, kernel floor (ip)", metric="ADD / DEL wall", a=med(fa),
                             b=med(fd_), ratio=None, unit="ms", target=None, note=""))

        if "links" in cases:
            header("ADD latency (no IPAM) vs unrelated links on the host", A.label, B.label)
            levels = {}
            for count in (1, 100, 2000):
                hn = w.ns(f"hl{count}")
                # `lo` is the one unrelated link; add count-1 more
                if count > 1:
                    w.filler(hn, far, count - 1, f"f{count}x")
                w.nic(hn, far, f"{PREFIX}ln{count}", f"{PREFIX}lq{count}")
                podn = w.ns(f"lpod{count}")
                levels[count] = (hn, podn, link_count(hn) - 1)
            # interleave levels and plugins inside each iteration
            lat = {(p.label, c): [] for p in pair for c in levels}
            dlat = {(p.label, c): [] for p in pair for c in levels}
            for i in range(n):
                order_l = list(levels)
                random.Random(i).shuffle(order_l)
                for c in order_l:
                    hn, podn, _ = levels[c]
                    order = pair if i % 2 == 0 else pair[::-1]
                    for p in order:
                        a, d = cycle_direct(p, hn, podn, f"{PREFIX}ln{c}", f"rhdb-s{i}", None)
                        lat[(p.label, c)].append(a.ms)
                        dlat[(p.label, c)].append(d.ms)
            for c, (_, _, unrelated) in levels.items():
                row(f"{unrelated} unrelated links", "ADD median",
                    med(lat[(A.label, c)]), med(lat[(B.label, c)]))
                row(f"{unrelated} unrelated links", "DEL median",
                    med(dlat[(A.label, c)]), med(dlat[(B.label, c)]))
            for p in pair:
                r = med(lat[(p.label, 2000)]) / med(lat[(p.label, 1)])
                rd = med(dlat[(p.label, 2000)]) / med(dlat[(p.label, 1)])
                print(f"  {p.label}: ADD(2000 links) / ADD(1 link) = {r:.3f}x"
                      + ("  (target <= 1.2x)" if p is A else "") + f"; DEL: {rd:.3f}x", flush=True)
                ROWS.append(dict(case=f"{p.label} ADD 2000 links / 1 link", metric="ratio", a=r,
                                 b=None, ratio=r, unit="x", target=1.2 if p is A else None, note=""))
    finally:
        w.cleanup()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(ROWS, f, indent=1)


if __name__ == "__main__":
    main()
