#!/usr/bin/env python3
"""A kubelet stand-in for crates/agent/tests/node_agent/device_plugin.rs: the kubelet's half of the device-plugin API
(v1beta1) over real gRPC (grpcio), stubs generated from deviceplugin.proto beside this file.

    kubelet.py DIR      serve Registration on DIR/kubelet.sock; then read commands, one JSON
                        object a line on stdin, and answer each with one JSON line on stdout:

    {"cmd": "registered", "count": N}       wait for the Nth Register -> that request, "ms"
    {"cmd": "options", "resource": R}       GetDevicePluginOptions on R's endpoint
    {"cmd": "watch", "resource": R}         start ListAndWatch (a thread keeps the last list)
    {"cmd": "devices", "resource": R, "want": {ID: HEALTH or null}, "timeout": S}
                                            wait until the last list says so (null: ID absent)
                                            -> {"devices", "ms", "messages"}, or {"error": "timeout"}
    {"cmd": "preferred", "resource": R, "available": [..], "must": [..], "size": N}
    {"cmd": "allocate", "resource": R, "containers": [[ID, ..], ..]} -> {"responses", "ms"}
    {"cmd": "registrations"}                every RegisterRequest so far
    {"cmd": "history", "resource": R}      every (ID, health) change the streams showed
    {"cmd": "restart", "remove_all": B}     a kubelet restart: stop serving, delete kubelet.sock
                                            (and every other socket in DIR if remove_all), serve anew
    {"cmd": "quit"}

A failed call answers {"error": <gRPC status name>, "message": ...}. This is what the kubelet
does with a plugin (pkg/kubelet/cm/devicemanager), minus its checkpoint.

RHD_KUBELET_SLOW_REGISTER=S: a busy kubelet (1.37 under QEMU's TCG was one): its first answer
to a Register comes S seconds late, though the plugin is connected from the start; a Register
for an endpoint connected already is refused as the kubelet refuses it (manager.go
PluginConnected: "device plugin already connected: <socket path>", gRPC Unknown).
"""
import json
import os
import sys
import threading
import time
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "deviceplugin.proto")


def stubs():
    sys.path.insert(0, os.path.join(HERE, ".."))  # tests/grpc_stubs.py
    import grpc_stubs  # noqa: E402

    return grpc_stubs.load(PROTO, "RHD_DP_STUBS", "dp-stubs", "kubelet.py")


pb, rpc = stubs()
import grpc  # noqa: E402

DIR = sys.argv[1]
KUBELET_SOCK = os.path.join(DIR, "kubelet.sock")
lock = threading.Condition()
registrations = []  # every RegisterRequest, as dicts
endpoints = {}  # resource -> endpoint
lists = {}  # resource -> {"devices": [...], "messages": n}
history = {}  # resource -> every (ID, health) change seen on its streams, in order
stubs_by_endpoint = {}
SLOW_REGISTER = float(os.environ.get("RHD_KUBELET_SLOW_REGISTER", "0"))
connected = set()  # endpoints connected (only kept with RHD_KUBELET_SLOW_REGISTER)


class Registration(rpc.RegistrationServicer):
    def Register(self, request, context):
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"version {request.version}")
        r = {
            "version": request.version,
            "endpoint": request.endpoint,
            "resource_name": request.resource_name,
            "options": {
                "pre_start_required": request.options.pre_start_required,
                "get_preferred_allocation_available": request.options.get_preferred_allocation_available,
            },
        }
        with lock:
            registrations.append(r)
            endpoints[request.resource_name] = request.endpoint
            lock.notify_all()
            again = SLOW_REGISTER and request.endpoint in connected
            connected.add(request.endpoint)
        if again:
            path = os.path.join(DIR, request.endpoint)
            context.abort(grpc.StatusCode.UNKNOWN, f"device plugin already connected: {path}")
        if SLOW_REGISTER:
            time.sleep(SLOW_REGISTER)
        return pb.Empty()


def serve():
    if os.path.exists(KUBELET_SOCK):
        os.unlink(KUBELET_SOCK)
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_RegistrationServicer_to_server(Registration(), s)
    s.add_insecure_port(f"unix:{KUBELET_SOCK}")
    s.start()
    return s


def stub(resource):
    """One channel per endpoint, as the kubelet keeps one per plugin (dropped on restart). The
    kubelet of today dials with grpc.WithAuthority("localhost")
    (devicemanager/plugin/v1beta1/client.go), as here; older ones named the socket's path, which
    crates/agent/tests/node_agent/device_plugin.rs sends on the wire itself (a_kubelet_naming_the_socket_path_...)."""
    ep = endpoints[resource]
    if ep not in stubs_by_endpoint:
        ch = grpc.insecure_channel(f"unix:{os.path.join(DIR, ep)}", options=[("grpc.default_authority", "localhost")])
        stubs_by_endpoint[ep] = rpc.DevicePluginStub(ch)
    return stubs_by_endpoint[ep]


def device(d):
    return {"id": d.ID, "health": d.health, "numa": [n.ID for n in d.topology.nodes]}


def watch(resource):
    def run():
        try:
            for msg in stub(resource).ListAndWatch(pb.Empty()):
                with lock:
                    cur = lists.setdefault(resource, {"devices": [], "messages": 0})
                    new = [device(d) for d in msg.devices]
                    old = {d["id"]: d["health"] for d in cur["devices"]}
                    for d in new:
                        if old.get(d["id"]) != d["health"]:
                            history.setdefault(resource, []).append([d["id"], d["health"]])
                    cur["devices"] = new
                    cur["messages"] += 1
                    lock.notify_all()
        except grpc.RpcError:
            pass  # the plugin went away or the "kubelet" restarted

    threading.Thread(target=run, daemon=True).start()


def matches(devs, want):
    by_id = {d["id"]: d["health"] for d in devs}
    return all(by_id.get(i) == h for i, h in want.items())


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
    if cmd == "registrations":
        with lock:
            return {"registrations": registrations}
    if cmd == "history":
        with lock:
            return {"changes": history.get(c["resource"], [])}
    if cmd == "options":
        o = stub(c["resource"]).GetDevicePluginOptions(pb.Empty(), timeout=5)
        return {"pre_start_required": o.pre_start_required, "get_preferred_allocation_available": o.get_preferred_allocation_available}
    if cmd == "watch":
        watch(c["resource"])
        return {}
    if cmd == "devices":
        r = c["resource"]
        with lock:
            ok = lock.wait_for(lambda: r in lists and matches(lists[r]["devices"], c["want"]), c.get("timeout", 5))
            cur = lists.get(r, {"devices": [], "messages": 0})
            out = {"devices": cur["devices"], "messages": cur["messages"], "ms": ms()}
            if not ok:
                out["error"] = "timeout"
            return out
    if cmd == "preferred":
        req = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=c["available"], must_include_deviceIDs=c.get("must", []), allocation_size=c["size"])])
        r = stub(c["resource"]).GetPreferredAllocation(req, timeout=5)
        return {"ids": [list(x.deviceIDs) for x in r.container_responses], "ms": ms()}
    if cmd == "allocate":
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in c["containers"]])
        r = stub(c["resource"]).Allocate(req, timeout=5)
        return {"ms": ms(), "responses": [{
            "envs": dict(x.envs),
            "devices": [{"container_path": d.container_path, "host_path": d.host_path, "permissions": d.permissions} for d in x.devices],
            "mounts": len(x.mounts), "cdi_devices": [d.name for d in x.cdi_devices]} for x in r.container_responses]}
    if cmd == "restart":
        global server
        server.stop(0).wait()
        if c.get("remove_all"):
            for f in os.listdir(DIR):
                os.unlink(os.path.join(DIR, f))
        with lock:
            lists.clear()
            stubs_by_endpoint.clear()
        server = serve()
        return {}
    if cmd == "quit":
        server.stop(0)
        sys.exit(0)
    return {"error": "unknown command", "cmd": cmd}


server = serve()
print(json.dumps({"listening": KUBELET_SOCK}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        reply = handle(json.loads(line))
    except grpc.RpcError as e:
        reply = {"error": e.code().name, "message": e.details()}
    print(json.dumps(reply), flush=True)
