#!/usr/bin/env python3
"""benches/dra-prepare.py: how long the kubelet waits for the DRA driver
(`rdma-host-device-agent dra`) to prepare and unprepare a claim, measured at the kubelet's
side: the gRPC round trip of NodePrepareResources / NodeUnprepareResources as the kubelet
stand-in (tests/dra/kubelet.py, real gRPC over the driver's unix socket) times it. Claims come
from the kube-apiserver stand-in (tests/kube/apiserver.py), created and allocated with real REST
calls as a user and the scheduler would (a fresh claim, hence a fresh UID, every round).

Per round, for a claim of 1 NIC and one of 8 NICs (veths, no RDMA: no CDI spec refresh):
  prepare cold      the claim's first prepare: GET the claim, find its NICs on the host,
                    write the checkpoint (temp file fsync'd, renamed, directory fsync'd)
  prepare repeated  the same call again (idempotent: already in the checkpoint)
  unprepare         NodeUnprepareResources (checkpoint rewritten, fsync'd)
It prints min / median / p90 / max in ms over N rounds, the load average before and after,
and the agent's VmRSS (and peak, VmHWM) after the run.

usage (as root): benches/dra-prepare.py --agent PATH [--rounds N] [--uppers-watch]
    PATH: a release build (`cargo build --release --bin rdma-host-device-agent`); the bench
    builds nothing. The kubelet stand-in runs under the venv scripts/setup.sh makes ($RHD_VENV,
    default ~/.cache/rhd-venv: grpcio, grpcio-tools). --uppers-watch runs `uppers-watch` beside
    the driver as the DaemonSet does; without it each NIC prepare finds costs a namespace scan.
Everything it makes (veths rhdpbN / rhdpbpN in this netns, a temp dir) is deleted at the end,
also on failure or SIGTERM.
"""
import argparse
import json
import math
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = "rdma-host-device.io"
NODE = "bench"
NICS = 8
PREFIX = "rhdpb"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims"


def ip(*a):
    subprocess.run(["ip", *a], check=True)


def stats(xs):
    s = sorted(xs)
    p90 = s[max(0, math.ceil(0.9 * len(s)) - 1)]
    return f"{s[0]:7.2f} {statistics.median(s):7.2f} {p90:7.2f} {s[-1]:7.2f}"


def status_of(pid):
    lines = open(f"/proc/{pid}/status").read().splitlines()
    return {l.split(":")[0]: l.split(":")[1].strip() for l in lines if ":" in l}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", required=True, help="rdma-host-device-agent (release build)")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--uppers-watch", action="store_true",
                   help="run the agent's uppers watcher beside the driver, as the DaemonSet does "
                        "(without it, prepare scans every namespace for uppers of each NIC)")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("dra-prepare bench: run as root (it makes links)")
    agent_bin = os.path.abspath(args.agent)
    venv = os.environ.get("RHD_VENV") or os.path.expanduser("~/.cache/rhd-venv")
    py = os.path.join(venv, "bin/python")
    if not os.path.exists(py):
        sys.exit(f"{py} missing: the kubelet stand-in needs a venv with grpcio (scripts/setup.sh)")
    # SIGTERM cleans up like an error does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("dra-prepare bench: terminated"))

    work = tempfile.mkdtemp(prefix="rhd-draprep.")
    names = [f"{PREFIX}{i}" for i in range(NICS)]
    procs = []
    try:
        for i, n in enumerate(names):
            subprocess.run(["ip", "link", "del", n], capture_output=True)
            ip("link", "add", n, "type", "veth", "peer", "name", f"{PREFIX}p{i}")
            ip("link", "set", f"{PREFIX}p{i}", "up")
            ip("link", "set", n, "up")
        with open(f"{work}/node.json", "w") as f:
            json.dump({"stateDir": f"{work}/state", "logDir": f"{work}/log",
                       "uppersSocket": f"{work}/uppers.sock",
                       "dra": {"nics": {"names": names}}}, f)
        if args.uppers_watch:
            procs.append(subprocess.Popen(
                [agent_bin, "uppers-watch", "--socket", f"{work}/uppers.sock"],
                stdout=subprocess.DEVNULL, stderr=open(f"{work}/uppers.log", "w"),
                start_new_session=True))
            t0 = time.monotonic()
            while not os.path.exists(f"{work}/uppers.sock"):
                if time.monotonic() - t0 > 30:
                    raise SystemExit("no uppers watcher socket: " + open(f"{work}/uppers.log").read())
                time.sleep(0.05)
        api = subprocess.Popen([sys.executable, f"{ROOT}/tests/kube/apiserver.py",
                                f"{work}/kapi"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=open(f"{work}/kapi.log", "w"), text=True,
                               start_new_session=True)
        procs.append(api)
        conf = json.loads(api.stdout.readline())
        url, ca, token = conf["url"], conf["ca"], conf["token"]
        ctx = ssl.create_default_context(cafile=ca)
        auth = {"Authorization": "Bearer " + open(token).read().strip(),
                "Content-Type": "application/json"}

        def rest(method, path, body=None):
            req = urllib.request.Request(f"{url}{path}", method=method, headers=auth,
                                         data=None if body is None else json.dumps(body).encode())
            return json.load(urllib.request.urlopen(req, context=ctx))

        kdir = f"{work}/kubelet"
        os.makedirs(kdir)
        kubelet = subprocess.Popen(
            [py, f"{ROOT}/tests/dra/kubelet.py", kdir], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=open(f"{work}/kubelet.log", "w"), text=True,
            start_new_session=True,
            env=dict(os.environ, RHD_REG_STUBS=f"{work}/reg-stubs", RHD_DRA_STUBS=f"{work}/dra-stubs"))
        procs.append(kubelet)
        if "watching" not in json.loads(kubelet.stdout.readline() or "{}"):
            raise SystemExit("the kubelet stand-in did not start: " + open(f"{work}/kubelet.log").read())

        def ask(cmd):
            kubelet.stdin.write(json.dumps(cmd) + "\n")
            kubelet.stdin.flush()
            return json.loads(kubelet.stdout.readline())

        agent = subprocess.Popen(
            [agent_bin, "dra", "--node-name", NODE, "--kubelet-dir", kdir, "--kube-server", url,
             "--kube-ca", ca, "--kube-token", token],
            env=dict(os.environ, RDMA_HOST_DEVICE_NODE_CONFIG=f"{work}/node.json"),
            stdout=subprocess.DEVNULL, stderr=open(f"{work}/agent.log", "w"),
            start_new_session=True)
        procs.append(agent)

        def fail(what):
            raise SystemExit(f"{what}\nagent log:\n" + open(f"{work}/agent.log").read()[-4000:])

        r = ask({"cmd": "registered", "count": 1, "timeout": 30})
        if r.get("verdict") != "registered":
            fail(f"the driver did not register: {r}")
        # Let start-up settle: the node's ResourceSlice published.
        t0 = time.monotonic()
        while not rest("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={NODE}")["items"]:
            if time.monotonic() - t0 > 30:
                fail("no ResourceSlice after 30 s")
            time.sleep(0.05)
        time.sleep(1)

        def seed(name, devices):
            """A user creates the claim; the scheduler allocates `devices` and reserves it."""
            reqs = [f"nic{i}" for i in range(len(devices))]
            c = rest("POST", CLAIMS, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"namespace": "team", "name": name},
                "spec": {"devices": {"requests": [
                    {"name": r, "exactly": {"deviceClassName": "rdma-nic"}} for r in reqs]}}})
            c["status"] = {
                "allocation": {"devices": {"results": [
                    {"request": r, "driver": DRIVER, "pool": NODE, "device": f"net-{d}"}
                    for r, d in zip(reqs, devices)]}},
                "reservedFor": [{"resource": "pods", "name": f"pod-{name}", "uid": f"uid-{name}"}]}
            rest("PUT", f"{CLAIMS}/{name}/status", c)
            return {"namespace": "team", "name": name, "uid": c["metadata"]["uid"]}

        def call(cmd, ref, want_devices):
            r = ask({"cmd": cmd, "driver": DRIVER, "claims": [ref]})
            a = (r.get("claims") or {}).get(ref["uid"])
            if r.get("error") or a is None or a["error"]:
                fail(f"{cmd} {ref['name']}: {r}")
            if cmd == "prepare" and len(a["devices"]) != want_devices:
                fail(f"prepare {ref['name']}: {len(a['devices'])} devices, not {want_devices}: {r}")
            return r["ms"]

        load_before = open("/proc/loadavg").read().split()[:3]
        figures = {k: {"prepare cold": [], "prepare repeated": [], "unprepare": []} for k in (1, NICS)}
        for i in range(args.rounds):
            for k in (1, NICS):
                ref = seed(f"c{k}-r{i}", names[:k])
                f = figures[k]
                f["prepare cold"].append(call("prepare", ref, k))
                f["prepare repeated"].append(call("prepare", ref, k))
                f["unprepare"].append(call("unprepare", ref, k))
        load_after = open("/proc/loadavg").read().split()[:3]
        st = status_of(agent.pid)

        print(f"agent: {agent_bin}")
        print(f"{args.rounds} rounds; veth NICs; checkpoint in {tempfile.gettempdir()} "
              f"(fsync'd); {os.cpu_count()} CPUs")
        links = len(os.listdir("/sys/class/net"))
        print(f"{links} links in the agent's netns (prepare reads them all per NIC); uppers: "
              + ("the uppers watcher" if args.uppers_watch else
                 f"no watcher, each NIC a scan of every namespace "
                 f"({len(os.listdir('/run/netns')) if os.path.isdir('/run/netns') else 0} in /run/netns, "
                 f"{sum(n.isdigit() for n in os.listdir('/proc'))} pids)"))
        print(f"load average before: {' '.join(load_before)}, after: {' '.join(load_after)}")
        print(f"{'claim':<7} {'call':<17} {'min':>7} {'median':>7} {'p90':>7} {'max':>7}   (ms)")
        for k in (1, NICS):
            for what, xs in figures[k].items():
                print(f"{k} NIC{'s' if k > 1 else ' '}  {what:<17} {stats(xs)}")
        print(f"agent after the run: VmRSS {st['VmRSS']}, VmHWM {st['VmHWM']}, "
              f"{st['Threads']} threads")
    finally:
        for proc in reversed(procs):
            # Each in a session of its own: its whole group goes (a wrapper's child too).
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        for n in names:
            subprocess.run(["ip", "link", "del", n], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
