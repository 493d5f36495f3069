#!/usr/bin/env python3
"""benches/dra-slices.py: the DRA driver's ResourceSlice figures, against the kube-apiserver
stand-in (tests/kube/apiserver.py): how long after a NIC's link goes down (its veth peer set
down) the slice says linkUp=false, and after it comes back up, linkUp=true (FLIPS flips each
way, polled every 10 ms: median and max); the agent's idle RSS and threads (10 s after its
first publication); and the requests it sends the API server while nothing changes (10 s).

usage (as root): benches/dra-slices.py [N]     N veth NICs in the slice (default 4)
environment: RHD_AGENT (default target/release/rdma-host-device-agent, else target/debug),
             FLIPS (default 10)
Everything it makes starts with `rhdra` and is deleted at the end.
"""
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4
FLIPS = int(os.environ.get("FLIPS", "10"))
AGENT = os.environ.get("RHD_AGENT") or next(
    p for p in (f"{ROOT}/target/release/rdma-host-device-agent",
                f"{ROOT}/target/debug/rdma-host-device-agent") if os.path.exists(p))


def ip(*a):
    subprocess.run(["ip", *a], check=True)


def main():
    if os.geteuid() != 0:
        sys.exit("dra-slices bench: run as root (it makes links)")
    work = tempfile.mkdtemp(prefix="rhd-drabench.")
    names = [f"rhdra{i}" for i in range(N)]
    for i, n in enumerate(names):
        subprocess.run(["ip", "link", "del", n], capture_output=True)
        ip("link", "add", n, "type", "veth", "peer", "name", f"rhdrap{i}")
        ip("link", "set", f"rhdrap{i}", "up")
        ip("link", "set", n, "up")
    with open(f"{work}/node.json", "w") as f:
        json.dump({"stateDir": f"{work}/state", "logDir": f"{work}/log",
                   "dra": {"nics": {"names": names}}}, f)
    api = subprocess.Popen([sys.executable, f"{ROOT}/tests/kube/apiserver.py", f"{work}/kapi"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=open(f"{work}/kapi.log", "w"), text=True)
    conf = json.loads(api.stdout.readline())
    url, ca, token = conf["url"], conf["ca"], conf["token"]
    ctx = ssl.create_default_context(cafile=ca)
    auth = {"Authorization": "Bearer " + open(token).read()}
    agent = subprocess.Popen(
        [AGENT, "dra", "--node-name", "bench", "--kube-server", url, "--kube-ca", ca,
         "--kube-token", token],
        env=dict(os.environ, RDMA_HOST_DEVICE_NODE_CONFIG=f"{work}/node.json"),
        stderr=open(f"{work}/agent.log", "w"))

    def link_up(dev):
        req = urllib.request.Request(
            f"{url}/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=bench",
            headers=auth)
        items = json.load(urllib.request.urlopen(req, context=ctx))["items"]
        for d in (items[0]["spec"].get("devices") or []) if items else []:
            if d["name"] == dev:
                return d.get("attributes", {}).get("rdma-host-device.io/linkUp", {}).get("bool")
        return None

    def wait(dev, want, limit=10.0):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if link_up(dev) == want:
                return time.monotonic() - t0
            time.sleep(0.01)
        raise SystemExit(f"{dev}: linkUp never became {want}; agent log: "
                         + open(f"{work}/agent.log").read())

    try:
        dev = "net-" + names[0]
        t0 = time.monotonic()
        wait(dev, True, 30)
        first = time.monotonic() - t0
        # Idle: memory, threads, and what it asks the API server while nothing changes.
        time.sleep(10)
        status = open(f"/proc/{agent.pid}/status").read()
        rss = next(l.split()[1] for l in status.splitlines() if l.startswith("VmRSS"))
        threads = next(l.split()[1] for l in status.splitlines() if l.startswith("Threads"))
        before = open(f"{work}/kapi.log").read().count("\n")
        time.sleep(10)
        idle_requests = open(f"{work}/kapi.log").read().count("\n") - before
        down, up = [], []
        for _ in range(FLIPS):
            ip("link", "set", f"rhdrap0", "down")
            t = time.monotonic()
            wait(dev, False)
            down.append(time.monotonic() - t)
            ip("link", "set", f"rhdrap0", "up")
            t = time.monotonic()
            wait(dev, True)
            up.append(time.monotonic() - t)
        ms = lambda xs: f"median {statistics.median(xs) * 1000:.0f} ms, max {max(xs) * 1000:.0f} ms"
        print(f"agent: {AGENT}")
        print(f"{N} NICs; first slice {first * 1000:.0f} ms after start")
        print(f"link down -> linkUp=false in the slice: {ms(down)} ({FLIPS} flips)")
        print(f"link up   -> linkUp=true in the slice:  {ms(up)}")
        print(f"idle: VmRSS {rss} kB, {threads} threads, {idle_requests} API requests in 10 s")
    finally:
        agent.kill()
        agent.wait()
        api.kill()
        api.wait()
        for n in names:
            subprocess.run(["ip", "link", "del", n], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
