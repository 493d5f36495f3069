#!/usr/bin/env python3
"""A container runtime's NRI side, a stand-in for containerd 2.x (which no registry here ships),
for crates/agent/tests/node_agent/nri.rs. Written from containerd/nri's pkg/adaptation, pkg/net/multiplex and
containerd/ttrpc, apart from the plugin under test: it listens on an NRI socket, and for each
plugin that connects speaks NRI's real wire (the multiplexer's frames, ttrpc messages, protobuf
from nri.proto and ttrpc.proto beside this file, generated at test time by grpcio-tools):

  waits for Runtime.RegisterPlugin on connection 2 (checking name and two-digit index as
  NRI does), then calls Plugin.Configure and Plugin.Synchronize on connection 1 and checks the
  answers (a valid event mask; `more` echoed), then sends CreateContainer when told to.

Like containerd, it can apply a CreateContainer adjustment's rlimits to an OCI spec
(process.rlimits, appended, as NRI's generator does), run the container with the real runc, and
start a second process in it with `runc exec`, its process built as containerd builds an exec
process: the container spec's process with other args.

    runtime.py SOCKET     listen on SOCKET; then one JSON command a line on stdin, one JSON
                          answer a line on stdout. It says it is containerd v2.1.0 with NRI
                          v0.10.0, or $RHD_NRI_RUNTIME_VERSION and $RHD_NRI_VERSION:

    {"cmd": "registered", "count": N, "timeout": S}
                 wait until N plugin connections in all (since the start) have registered and
                 been configured and synchronized
                 -> {"plugins": [{"name", "idx", "events"}, ...] (those connected now), "total": N}
    {"cmd": "create", "pod": {...}, "container": {...}}
                 CreateContainer to the newest plugin (a dict in nri.proto's JSON names)
                 -> {"adjust": {...}, "ms": F}
    {"cmd": "run", "pod", "container", "rootfs": DIR, "work": DIR, "exec": SH, "host_network": B}
                 CreateContainer, then the container under runc with the adjustment applied:
                 -> {"adjust", "first": `ulimit -l` of its first process,
                     "exec": the output of `sh -c SH` (default `ulimit -l`) started with runc
                     exec}; host_network: the container stays in the runtime's netns
    {"cmd": "bench", "n": N, "pod", "container"}
                 N CreateContainer calls one after the other -> {"ms": [each round trip]}
    {"cmd": "stop"}      the runtime goes away: connections closed, socket removed
    {"cmd": "start"}     it comes back: listening on SOCKET again
    {"cmd": "refuse"}    a runtime whose NRI is not ready: SOCKET accepts and closes every
                         connection at once (counted as "refused"; "start" ends it)
    {"cmd": "connections"} -> {"accepted": N, "open": N, "refused": N}
    {"cmd": "quit"}

A failure answers {"error": ...}.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # tests/grpc_stubs.py
import grpc_stubs  # noqa: E402

nri, _ = grpc_stubs.load(os.path.join(HERE, "nri.proto"), "RHD_NRI_STUBS", "nri-stubs", "runtime.py")
ttrpc, _ = grpc_stubs.load(os.path.join(HERE, "ttrpc.proto"), "RHD_NRI_STUBS", "nri-stubs", "runtime.py")
from google.protobuf import json_format  # noqa: E402

SOCKET = sys.argv[1]
PLUGIN_CONN, RUNTIME_CONN = 1, 2  # pkg/net/multiplex/ttrpc.go
REQUEST, RESPONSE = 1, 2  # ttrpc message types
MAX_MESSAGE = 4 << 20
REQUEST_TIMEOUT = 2.0  # containerd's default plugin request timeout
REGISTRATION_TIMEOUT = 5.0
VALID_EVENTS = (1 << 14) - 1  # every Event up to VALIDATE_CONTAINER_ADJUSTMENT
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"

lock = threading.Condition()
plugins = []  # configured and synchronized: {"name", "idx", "events", "conn": Conn}
accepted = 0
refused = 0
total = 0  # plugin connections registered, configured and synchronized, ever
conns = []
listener = None


def log(*a):
    print("runtime.py:", *a, file=sys.stderr, flush=True)


class Conn:
    """One plugin's trunk: the multiplexer and the two ttrpc channels over it."""

    def __init__(self, sock):
        self.sock = sock
        self.wlock = threading.Lock()
        self.pending = {PLUGIN_CONN: b"", RUNTIME_CONN: b""}
        self.answers = {}  # stream id -> ttrpc.Response
        self.next_stream = 1
        self.registered = threading.Event()
        self.reg = None
        self.closed = False

    def send(self, conn, stream, kind, payload):
        msg = struct.pack(">IIBB", len(payload), stream, kind, 0) + payload
        # As Go's ttrpc over the multiplexer writes it: bufio hands 4096 bytes, then the rest.
        chunks = [msg[:4096], msg[4096:]] if len(msg) > 4096 else [msg]
        with self.wlock:
            for c in chunks:
                self.sock.sendall(struct.pack(">II", conn, len(c)) + c)

    def read_exact(self, n):
        b = b""
        while len(b) < n:
            got = self.sock.recv(n - len(b))
            if not got:
                raise EOFError
            b += got
        return b

    def reader(self):
        try:
            while True:
                cid, n = struct.unpack(">II", self.read_exact(8))
                if n > MAX_MESSAGE + 10:
                    raise ValueError(f"frame of {n} bytes")
                data = self.read_exact(n)
                if cid not in self.pending:
                    continue
                self.pending[cid] += data
                while len(self.pending[cid]) >= 10:
                    length, stream, kind, _flags = struct.unpack(">IIBB", self.pending[cid][:10])
                    if length > MAX_MESSAGE:
                        raise ValueError(f"ttrpc message of {length} bytes")
                    if len(self.pending[cid]) < 10 + length:
                        break
                    payload = self.pending[cid][10:10 + length]
                    self.pending[cid] = self.pending[cid][10 + length:]
                    self.dispatch(cid, stream, kind, payload)
        except (EOFError, OSError, ValueError) as e:
            log("plugin connection closed:", repr(e))
        finally:
            self.close()

    def dispatch(self, cid, stream, kind, payload):
        if cid == RUNTIME_CONN and kind == REQUEST:
            if stream % 2 != 1:
                return self.reply(stream, 3, "StreamID must be odd for client initiated streams")
            req = ttrpc.Request.FromString(payload)
            if (req.service, req.method) != (RUNTIME_SERVICE, "RegisterPlugin"):
                return self.reply(stream, 12, f"{req.service}.{req.method} not served")
            r = nri.RegisterPluginRequest.FromString(req.payload)
            err = check_name(r.plugin_name) or check_index(r.plugin_idx)
            if err:
                self.reply(stream, 3, err)
                return
            self.reg = r
            self.reply(stream, 0, "", nri.Empty().SerializeToString())
            self.registered.set()
        elif cid == PLUGIN_CONN and kind == RESPONSE:
            with lock:
                self.answers[stream] = ttrpc.Response.FromString(payload)
                lock.notify_all()

    def reply(self, stream, code, message, payload=b""):
        resp = ttrpc.Response(payload=payload)
        if code:
            resp.status.code = code
            resp.status.message = message
        self.send(RUNTIME_CONN, stream, RESPONSE, resp.SerializeToString())

    def call(self, method, req, resp_type, timeout=REQUEST_TIMEOUT):
        with lock:
            stream = self.next_stream
            self.next_stream += 2
        r = ttrpc.Request(service=PLUGIN_SERVICE, method=method, payload=req.SerializeToString(),
                          timeout_nano=int(timeout * 1e9))
        self.send(PLUGIN_CONN, stream, REQUEST, r.SerializeToString())
        deadline = time.monotonic() + timeout
        with lock:
            while stream not in self.answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise RuntimeError(f"{method}: no answer within {timeout}s" if left <= 0 else f"{method}: connection closed")
                lock.wait(left)
            a = self.answers.pop(stream)
        if a.status.code != 0:
            raise RuntimeError(f"{method}: status {a.status.code}: {a.status.message}")
        return resp_type.FromString(a.payload)

    def close(self):
        with lock:
            if self.closed:
                return
            self.closed = True
            lock.notify_all()
            for p in list(plugins):
                if p["conn"] is self:
                    plugins.remove(p)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def check_name(name):  # api.CheckPluginName
    ok = all(c.isascii() and (c.isalnum() or c in "-_.+") for c in name)
    return None if name and ok else f"invalid plugin name {name!r}"


def check_index(idx):  # api.CheckPluginIndex
    return None if len(idx) == 2 and idx.isdigit() else f"invalid plugin index {idx!r}, must be 2 digits"


def existing_state():
    """What Synchronize tells a new plugin: a pod with a container that has an RDMA device."""
    pod = nri.PodSandbox(id="sync-pod", name="running", uid="u-sync", namespace="default")
    c = nri.Container(id="sync-ctr", pod_sandbox_id="sync-pod", name="old", args=["sleep"])
    c.linux.devices.add(path="/dev/infiniband/uverbs0", type="c", major=231, minor=192)
    return [pod], [c]


def serve_plugin(conn):
    """A plugin connected: the runtime's half of pkg/adaptation's plugin start."""
    threading.Thread(target=conn.reader, daemon=True).start()
    if not conn.registered.wait(REGISTRATION_TIMEOUT):
        log("plugin did not register in time")
        conn.close()
        return
    try:
        cfg = conn.call("Configure", nri.ConfigureRequest(
            runtime_name="containerd",
            runtime_version=os.environ.get("RHD_NRI_RUNTIME_VERSION", "v2.1.0-standin"),
            registration_timeout=int(REGISTRATION_TIMEOUT * 1000),
            request_timeout=int(REQUEST_TIMEOUT * 1000),
            NRI_version=os.environ.get("RHD_NRI_VERSION", "v0.10.0")),
            nri.ConfigureResponse)
        events = cfg.events or VALID_EVENTS
        if events & ~VALID_EVENTS:
            raise RuntimeError(f"invalid plugin events: 0x{events & ~VALID_EVENTS:x}")
        pods, ctrs = existing_state()
        sync = conn.call("Synchronize", nri.SynchronizeRequest(pods=pods, containers=ctrs, more=False),
                         nri.SynchronizeResponse)
        if sync.more:
            raise RuntimeError("plugin answered Synchronize with more=true to more=false")
    except Exception as e:  # noqa: BLE001 - any failure drops the plugin, as NRI does
        log("plugin setup failed:", e)
        conn.close()
        return
    global total
    with lock:
        if conn.closed:
            return
        plugins.append({"name": conn.reg.plugin_name, "idx": conn.reg.plugin_idx, "events": events, "conn": conn})
        total += 1
        lock.notify_all()


def accept_loop(sock):
    global accepted
    while True:
        try:
            s, _ = sock.accept()
        except OSError:
            return
        with lock:
            accepted += 1
        c = Conn(s)
        conns.append(c)
        threading.Thread(target=serve_plugin, args=(c,), daemon=True).start()


def refuse_loop(sock):
    global refused
    while True:
        try:
            s, _ = sock.accept()
        except OSError:
            return
        with lock:
            refused += 1
        s.close()


def start(loop=None):
    global listener
    stop()
    try:
        os.unlink(SOCKET)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCKET)
    listener.listen(8)
    threading.Thread(target=loop or accept_loop, args=(listener,), daemon=True).start()


def stop():
    global listener
    if listener:
        # shutdown wakes the thread blocked in accept (close alone does not, on Linux).
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
        listener = None
    try:
        os.unlink(SOCKET)
    except FileNotFoundError:
        pass
    for c in list(conns):
        c.close()


def newest():
    with lock:
        if not plugins:
            raise RuntimeError("no plugin registered")
        return plugins[-1]


def create(pod, container):
    p = newest()
    req = nri.CreateContainerRequest()
    json_format.ParseDict(pod, req.pod)
    json_format.ParseDict(container, req.container)
    if not p["events"] & (1 << (4 - 1)):
        return req, nri.ContainerAdjustment(), 0.0
    t = time.monotonic()
    r = conn_call(p, req)
    return req, r.adjust, (time.monotonic() - t) * 1000


def conn_call(p, req):
    return p["conn"].call("CreateContainer", req, nri.CreateContainerResponse)


def runc(*args, stdout=subprocess.PIPE, **kw):
    return subprocess.run(["runc", *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=30, **kw)


def run_container(req, adjust, rootfs, work, exec_cmd="ulimit -l", host_network=False):
    """The container as containerd runs it: the OCI spec with the adjustment, runc run, runc exec."""
    cid = req.container.id
    bundle = os.path.join(work, f"bundle-{cid}")
    root = os.path.join(work, "runc-root")
    os.makedirs(bundle, exist_ok=True)
    os.makedirs(root, exist_ok=True)
    if os.path.exists(os.path.join(bundle, "config.json")):
        os.unlink(os.path.join(bundle, "config.json"))
    r = runc("spec", "--bundle", bundle)
    if r.returncode != 0:
        raise RuntimeError(f"runc spec: {r.stderr}")
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    spec["root"] = {"path": os.path.abspath(rootfs), "readonly": True}
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/bin/sh", "-c", "ulimit -l; exec sleep 60"]
    spec["hostname"] = cid
    spec["linux"]["cgroupsPath"] = f"/rhd-nri-test-{cid}"
    if host_network:
        spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"] if n["type"] != "network"]
    # The container's devices, as the runtime put them in the spec before asking NRI.
    for d in req.container.linux.devices:
        spec["linux"].setdefault("devices", []).append(
            {"path": d.path, "type": d.type, "major": d.major, "minor": d.minor, "fileMode": 0o666})
        spec["linux"]["resources"].setdefault("devices", []).append(
            {"allow": True, "type": d.type, "major": d.major, "minor": d.minor, "access": "rwm"})
    # NRI's generator: AdjustRlimits appends to process.rlimits.
    for l in adjust.rlimits:
        spec["process"].setdefault("rlimits", []).append({"type": l.type, "hard": l.hard, "soft": l.soft})
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f)
    first_out = os.path.join(work, f"first-{cid}.out")
    try:
        # The container keeps runc's stdio: files, not pipes (a pipe's reader would wait for
        # the container to end).
        with open(first_out, "w") as out, open(first_out + ".err", "w+") as err:
            r = subprocess.run(["runc", "--root", root, "run", "--detach", "--bundle", bundle, cid],
                               stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=30)
            if r.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"runc run: {err.read()}")
        deadline = time.monotonic() + 10
        first = ""
        while not first.strip() and time.monotonic() < deadline:
            time.sleep(0.05)
            with open(first_out) as f:
                first = f.read()
        # containerd's exec: the container spec's process, other args (kubectl exec's command).
        proc = dict(spec["process"])
        proc["args"] = ["/bin/sh", "-c", exec_cmd]
        proc_file = os.path.join(work, f"exec-{cid}.json")
        with open(proc_file, "w") as f:
            json.dump(proc, f)
        r = runc("--root", root, "exec", "--process", proc_file, cid, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"runc exec: {r.stderr}")
        return first.strip(), r.stdout.strip()
    finally:
        runc("--root", root, "kill", cid, "KILL")
        runc("--root", root, "delete", "--force", cid)


def main():
    start()
    print(json.dumps({"listening": SOCKET}), flush=True)
    for line in sys.stdin:
        try:
            c = json.loads(line)
            cmd = c["cmd"]
            if cmd == "registered":
                deadline = time.monotonic() + c.get("timeout", 20)
                with lock:
                    while total < c["count"] and time.monotonic() < deadline:
                        lock.wait(max(0, deadline - time.monotonic()))
                    ans = {"plugins": [{k: p[k] for k in ("name", "idx", "events")} for p in plugins],
                           "total": total}
                    if total < c["count"]:
                        ans["error"] = "timeout"
            elif cmd == "create":
                _, adjust, ms = create(c["pod"], c["container"])
                ans = {"adjust": json_format.MessageToDict(adjust), "ms": ms}
            elif cmd == "run":
                req, adjust, _ = create(c["pod"], c["container"])
                first, exec_ = run_container(req, adjust, c["rootfs"], c["work"],
                                             c.get("exec", "ulimit -l"), c.get("host_network", False))
                ans = {"adjust": json_format.MessageToDict(adjust), "first": first, "exec": exec_}
            elif cmd == "bench":
                ms = []
                for _ in range(c["n"]):
                    ms.append(create(c["pod"], c["container"])[2])
                ans = {"ms": ms}
            elif cmd == "stop":
                stop()
                ans = {"stopped": True}
            elif cmd == "start":
                start()
                ans = {"listening": SOCKET}
            elif cmd == "refuse":
                start(refuse_loop)
                ans = {"refusing": SOCKET}
            elif cmd == "connections":
                with lock:
                    ans = {"accepted": accepted, "refused": refused,
                           "open": sum(1 for x in conns if not x.closed)}
            elif cmd == "quit":
                stop()
                print(json.dumps({"bye": True}), flush=True)
                return
            else:
                ans = {"error": f"unknown command {cmd}"}
        except Exception as e:  # noqa: BLE001 - every command gets an answer
            ans = {"error": str(e)}
        print(json.dumps(ans), flush=True)


main()
