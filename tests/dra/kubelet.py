#!/usr/bin/env python3
"""A kubelet stand-in for crates/agent/tests/node_agent/dra.rs: the kubelet's half of a DRA driver's two gRPC APIs over
real gRPC (grpcio; stubs generated at test time from pluginregistration.proto and dra.proto
beside this file, our own copies of the kubelet's).

    kubelet.py DIR      act as the kubelet whose root directory is DIR: watch
                        DIR/plugins_registry for sockets as the plugin watcher does (a new
                        socket, or one recreated, is a plugin to register: GetInfo, check it,
                        NotifyRegistrationStatus), then read commands, one JSON object a line
                        on stdin, and answer each with one JSON line on stdout:

    {"cmd": "registered", "count": N, "timeout": S}
                                wait for the Nth registration -> its PluginInfo and verdict
    {"cmd": "prepare", "driver": D, "claims": [{"namespace", "name", "uid"}, ..]}
                                NodePrepareResources on D's endpoint -> {"claims": {uid: {"devices",
                                "error"}}, "ms"}; as the kubelet, a claim of the request missing
                                from the answer is an error ("missing")
    {"cmd": "unprepare", "driver": D, "claims": [..]}   NodeUnprepareResources, the same way
    {"cmd": "quit"}

A failed call answers {"error": <gRPC status name>, "message": ...}. This is what the kubelet
does with a DRA plugin (pkg/kubelet/pluginmanager and pkg/kubelet/cm/dra/plugin): it chooses the
service it speaks from supported_versions ("v1.DRAPlugin") and dials the endpoint GetInfo names.
"""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def stubs(proto, env, out):
    sys.path.insert(0, os.path.join(HERE, ".."))  # tests/grpc_stubs.py
    import grpc_stubs  # noqa: E402

    return grpc_stubs.load(os.path.join(HERE, proto), env, out, "dra/kubelet.py")


reg_pb, reg_rpc = stubs("pluginregistration.proto", "RHD_REG_STUBS", "reg-stubs")
dra_pb, dra_rpc = stubs("dra.proto", "RHD_DRA_STUBS", "dra-stubs")
import grpc  # noqa: E402

ROOT = sys.argv[1]
REGISTRY = os.path.join(ROOT, "plugins_registry")
SERVICES_WE_SPEAK = ["v1.DRAPlugin"]
lock = threading.Condition()
registrations = []  # every registration attempt: PluginInfo as a dict, plus "verdict"
drivers = {}  # driver name -> endpoint of its latest registration
channels = {}  # endpoint -> DRAPlugin stub


def channel(path, authority):
    return grpc.insecure_channel(f"unix:{path}", options=[("grpc.default_authority", authority)])


def registration_channel(path):
    # As the kubelet's plugin watcher: it dials the registration socket by its path
    # (grpc.DialContext(ctx, socketPath, ...) with a unix dialer, no WithAuthority), so grpc-go's
    # passthrough resolver names the path as HTTP/2 :authority, which is no URI authority.
    return channel(path, path)


def dra_channel(path):
    # As the kubelet's DRA plugin manager: grpc.NewClient("unix:" + endpoint), whose unix
    # resolver names "localhost" as HTTP/2 :authority.
    return channel(path, "localhost")


def register(sock):
    """What the plugin watcher and the DRA plugin manager do with a new registration socket."""
    ch = registration_channel(sock)
    try:
        reg = reg_rpc.RegistrationStub(ch)
        info = reg.GetInfo(reg_pb.InfoRequest(), timeout=5)
        r = {"type": info.type, "name": info.name, "endpoint": info.endpoint,
             "supported_versions": list(info.supported_versions), "socket": os.path.basename(sock)}
        chosen = next((s for s in info.supported_versions if s in SERVICES_WE_SPEAK), None)
        if info.type != "DRAPlugin":
            error = f"type {info.type!r} is not DRAPlugin"
        elif chosen is None:
            error = f"none of {list(info.supported_versions)} is a service this kubelet speaks"
        elif not os.path.isabs(info.endpoint):
            error = f"endpoint {info.endpoint!r} is not an absolute path"
        else:
            error = ""
        reg.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=not error, error=error), timeout=5)
        r["verdict"] = error or "registered"
        with lock:
            if not error:
                drivers[info.name] = info.endpoint
                channels.pop(info.endpoint, None)  # a new plugin instance: dial anew
            registrations.append(r)
            lock.notify_all()
    except grpc.RpcError as e:
        with lock:
            registrations.append({"socket": os.path.basename(sock), "verdict": f"{e.code().name}: {e.details()}"})
            lock.notify_all()
    finally:
        ch.close()


def watch():
    """The plugin watcher: a socket file that appears (or is replaced) is registered once."""
    seen = {}
    while True:
        try:
            names = os.listdir(REGISTRY)
        except FileNotFoundError:
            names = []
        now = {}
        for n in names:
            p = os.path.join(REGISTRY, n)
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            if n.startswith(".") or (st.st_mode & 0o170000) != 0o140000:
                continue
            now[p] = (st.st_ino, st.st_ctime_ns)
            if seen.get(p) != now[p]:
                register(p)
        seen = now
        time.sleep(0.1)


def stub(driver):
    with lock:
        ep = drivers.get(driver)
    if ep is None:
        raise KeyError(f"DRA driver {driver} is not registered")
    if ep not in channels:
        channels[ep] = dra_rpc.DRAPluginStub(dra_channel(ep))
    return channels[ep]


def claims(c):
    return [dra_pb.Claim(namespace=x["namespace"], name=x["name"], uid=x["uid"]) for x in c["claims"]]


def handle(c):
    cmd = c["cmd"]
    t0 = time.monotonic()
    ms = lambda: round((time.monotonic() - t0) * 1000, 1)  # noqa: E731
    if cmd == "registered":
        want = c.get("count", 1)
        with lock:
            if not lock.wait_for(lambda: len(registrations) >= want, c.get("timeout", 10)):
                return {"error": "timeout", "registrations": registrations}
            return dict(registrations[want - 1], ms=ms(), count=len(registrations))
    if cmd == "prepare":
        r = stub(c["driver"]).NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=claims(c)), timeout=45)
        out = {}
        for x in c["claims"]:
            if x["uid"] not in r.claims:
                out[x["uid"]] = {"error": "missing", "devices": []}
                continue
            a = r.claims[x["uid"]]
            out[x["uid"]] = {"error": a.error, "devices": [
                {"request_names": list(d.request_names), "pool_name": d.pool_name, "device_name": d.device_name,
                 "cdi_device_ids": list(d.cdi_device_ids)} for d in a.devices]}
        return {"claims": out, "ms": ms()}
    if cmd == "unprepare":
        r = stub(c["driver"]).NodeUnprepareResources(dra_pb.NodeUnprepareResourcesRequest(claims=claims(c)), timeout=45)
        out = {x["uid"]: ({"error": r.claims[x["uid"]].error} if x["uid"] in r.claims else {"error": "missing"})
               for x in c["claims"]}
        return {"claims": out, "ms": ms()}
    if cmd == "quit":
        sys.exit(0)
    return {"error": "unknown command", "cmd": cmd}


threading.Thread(target=watch, daemon=True).start()
print(json.dumps({"watching": REGISTRY}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        reply = handle(json.loads(line))
    except grpc.RpcError as e:
        reply = {"error": e.code().name, "message": e.details()}
    except KeyError as e:
        reply = {"error": "not registered", "message": str(e)}
    print(json.dumps(reply), flush=True)
