#!/usr/bin/env python3
"""A kubelet stand-in for tests/runtimes/cri.rs: calls containerd's CRI (runtime.v1.RuntimeService) over
its gRPC socket, sending what kubelet sends for a pod sandbox, and prints one JSON object.

    cri.py SOCK version | status
    cri.py SOCK run NAME [UID [NAMESPACE]]   -> {"id", "ms"}
    cri.py SOCK pod ID                        -> {"state", "ip", "netns", "ms"}
    cri.py SOCK stop ID | remove ID           -> {"ms"}
    cri.py SOCK list                          -> {"items": [{"id", "name", "state"}]}
    cri.py SOCK create POD_ID POD_NAME NAME IMAGE SPEC
                                              -> {"id"}: CreateContainer in the pod, SPEC a JSON
                                                 object {"command": [..], "envs": {K: V},
                                                 "devices": [{container_path, host_path,
                                                 permissions}], "cdi": [NAME], "uid": N}: what
                                                 the kubelet sends with a device plugin's answer
    cri.py SOCK start ID | cstop ID | cremove ID -> {"ms"}
    cri.py SOCK cstatus ID                    -> {"state", "exit_code", "reason", "message"}
    cri.py SOCK exec ID TIMEOUT CMD...        -> {"exit_code", "stdout", "stderr"} (ExecSync)
    cri.py - image PAUSE_BINARY NAME OUT.tar  -> an OCI image layout (tar) for `ctr images import`
    cri.py - files-image NAME OUT.tar ENTRY PATH... -> the same, one layer holding each PATH
                                                 (this machine's file at that path, ELF files
                                                 with their ldd closure), DST->TARGET symlinks,
                                                 or DST=SRC (this machine's file SRC at DST)
    cri.py - stubs                            -> generate the stubs now (for a read-only later run)

A failed call prints {"error": <gRPC status name>, "message": <containerd's message>, "ms"} and
exits 3. Stubs are generated from api.proto (beside this file) into $RHD_CRI_STUBS (default
target/tmp/cri-stubs) when missing or older than the proto; needs grpcio and grpcio-tools
(scripts/setup.sh installs them into a venv).
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "api.proto")


def stubs():
    """Import api_pb2 and api_pb2_grpc, generating them first if needed."""
    sys.path.insert(0, os.path.join(HERE, ".."))  # tests/grpc_stubs.py
    import grpc_stubs  # noqa: E402

    return grpc_stubs.load(PROTO, "RHD_CRI_STUBS", "cri-stubs", "cri.py")


def network_mode(pb):
    """The pod's network namespace: the node's for a hostNetwork pod (RHD_CRI_HOST_NETWORK set,
    as for a DaemonSet's pod), else its own."""
    return pb.NODE if os.environ.get("RHD_CRI_HOST_NETWORK") else pb.POD


def sandbox_config(pb, name, uid, namespace):
    """What kubelet 1.2x sends for a pod with the default (POD) network namespace, or with
    hostNetwork (see network_mode)."""
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
        # the kubelet names the hostname of a pod with its own network namespace only
        hostname="" if network_mode(pb) == pb.NODE else name,
        log_directory=f"/var/log/pods/{namespace}_{name}_{uid}",
        dns_config=pb.DNSConfig(),
        labels={
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid,
        },
        annotations={"kubernetes.io/config.source": "api"},
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=os.environ.get("RHD_CRI_CGROUP_PARENT", "/rhd-cri-test"),
            security_context=pb.LinuxSandboxSecurityContext(
                namespace_options=pb.NamespaceOption(network=network_mode(pb), pid=pb.CONTAINER, ipc=pb.POD)
            ),
        ),
    )


def netns_of(info):
    """The sandbox's netns path from containerd's verbose status (its OCI runtime spec)."""
    try:
        spec = json.loads(info.get("info", "{}")).get("runtimeSpec", {})
        for ns in spec.get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network":
                return ns.get("path", "")
    except ValueError:
        pass
    return ""


def image(pause, name, out):
    """An OCI image layout holding one layer with /pause, named `name` for containerd."""
    return image_of({"pause": ("file", pause)}, name, out, ["/pause"])


def ldd(path):
    """The shared objects `path` loads (the dynamic loader included), as absolute paths."""
    import subprocess

    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    if r.returncode != 0:  # static, or not ELF
        return []
    libs = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) > parts.index("=>") + 1 and parts[parts.index("=>") + 1].startswith("/"):
            libs.append(parts[parts.index("=>") + 1])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])
    return libs


def files_image(name, out, entry, *paths):
    """An image whose one layer holds each of `paths` (this machine's file at that path, with
    the ldd closure of ELF files), `DST->TARGET` symlinks and `DST=SRC` files (this machine's
    file SRC at DST, with its closure); `entry` is its entrypoint."""
    entries = {}
    todo = list(paths)
    while todo:
        p = todo.pop()
        if "->" in p:
            dst, target = p.split("->", 1)
            entries[dst.lstrip("/")] = ("link", target)
            continue
        dst, src = p.split("=", 1) if "=" in p else (p, p)
        if dst.lstrip("/") in entries:
            continue
        if not os.path.isfile(src):
            sys.exit(f"cri.py files-image: {src} is not a file on this machine")
        entries[dst.lstrip("/")] = ("file", src)
        todo.extend(ldd(src))
    return image_of(entries, name, out, [entry])


def image_of(entries, name, out, entrypoint):
    """An OCI image layout (tar) of one layer: `entries` maps a path in the image to ("file",
    a file here) or ("link", a symlink target); parent directories are added."""

    def blob(data):
        return "sha256:" + hashlib.sha256(data).hexdigest(), data

    def info(arc, kind):
        ti = tarfile.TarInfo(arc)
        ti.uid = ti.gid = 0
        ti.mtime = 0
        ti.type = kind
        ti.mode = 0o755
        return ti

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        dirs = set()
        for a in entries:
            d = os.path.dirname(a)
            while d:
                dirs.add(d)
                d = os.path.dirname(d)
        for d in sorted(dirs):
            t.addfile(info(d, tarfile.DIRTYPE))
        for arc, (kind, src) in sorted(entries.items()):
            if kind == "link":
                ti = info(arc, tarfile.SYMTYPE)
                ti.linkname = src
                t.addfile(ti)
                continue
            with open(src, "rb") as f:
                data = f.read()
            ti = info(arc, tarfile.REGTYPE)
            ti.size = len(data)
            ti.mode = 0o755 if os.access(src, os.X_OK) else 0o644
            t.addfile(ti, io.BytesIO(data))
    raw = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    layer_digest, layer_gz = blob(gzip.compress(raw, mtime=0))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_digest, config_raw = blob(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config_raw)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": len(layer_gz)}],
    }
    manifest_digest, manifest_raw = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_raw),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]},
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
    }
    for digest, data in ((layer_digest, layer_gz), (config_digest, config_raw), (manifest_digest, manifest_raw)):
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    tmp = f"{out}.tmp"
    with tarfile.open(tmp, mode="w") as t:
        for path, data in files.items():
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
    os.replace(tmp, out)
    return {"image": name, "manifest": manifest_digest, "layerBytes": len(layer_gz)}


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    sock, cmd, args = argv[1], argv[2], argv[3:]
    if cmd == "image":
        print(json.dumps(image(*args)))
        return 0
    if cmd == "files-image":
        print(json.dumps(files_image(*args)))
        return 0
    if cmd == "stubs":
        stubs()
        print(json.dumps({"stubs": "ok"}))
        return 0
    pb, rpc = stubs()
    import grpc

    chan = grpc.insecure_channel(f"unix://{os.path.abspath(sock)}")
    rt = rpc.RuntimeServiceStub(chan)
    t0 = time.monotonic()
    ms = lambda: round((time.monotonic() - t0) * 1000, 1)  # noqa: E731
    try:
        if cmd == "version":
            r = rt.Version(pb.VersionRequest(version="v1"), timeout=10)
            out = {"runtime": r.runtime_name, "version": r.runtime_version, "api": r.runtime_api_version}
        elif cmd == "status":
            r = rt.Status(pb.StatusRequest(), timeout=10)
            out = {c.type: c.status for c in r.status.conditions}
        elif cmd == "run":
            name = args[0]
            uid = args[1] if len(args) > 1 else hashlib.sha1(name.encode()).hexdigest()[:16]
            ns = args[2] if len(args) > 2 else "default"
            r = rt.RunPodSandbox(pb.RunPodSandboxRequest(config=sandbox_config(pb, name, uid, ns)), timeout=120)
            out = {"id": r.pod_sandbox_id}
        elif cmd == "pod":
            r = rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=args[0], verbose=True), timeout=30)
            s = r.status
            out = {
                "state": pb.PodSandboxState.Name(s.state),
                "ip": s.network.ip,
                "additional_ips": [i.ip for i in s.network.additional_ips],
                "netns": netns_of(dict(r.info)),
                "name": s.metadata.name,
            }
        elif cmd == "stop":
            rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=args[0]), timeout=120)
            out = {}
        elif cmd == "remove":
            rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=args[0]), timeout=120)
            out = {}
        elif cmd == "create":
            pod_id, pod_name, name, image_name, spec = args[0], args[1], args[2], args[3], json.loads(args[4])
            uid = hashlib.sha1(pod_name.encode()).hexdigest()[:16]
            sc = pb.LinuxContainerSecurityContext(namespace_options=pb.NamespaceOption(network=network_mode(pb), pid=pb.CONTAINER, ipc=pb.POD))
            if "uid" in spec:
                sc.run_as_user.value = spec["uid"]
                sc.run_as_group.value = spec["uid"]
            config = pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name=name, attempt=0),
                image=pb.ImageSpec(image=image_name),
                command=spec.get("command", []),
                envs=[pb.KeyValue(key=k, value=v) for k, v in spec.get("envs", {}).items()],
                devices=[pb.Device(**d) for d in spec.get("devices", [])],
                CDI_devices=[pb.CDIDevice(name=n) for n in spec.get("cdi", [])],
                labels={"io.kubernetes.container.name": name},
                linux=pb.LinuxContainerConfig(security_context=sc),
            )
            r = rt.CreateContainer(
                pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=config, sandbox_config=sandbox_config(pb, pod_name, uid, "default")),
                timeout=120,
            )
            out = {"id": r.container_id}
        elif cmd == "start":
            rt.StartContainer(pb.StartContainerRequest(container_id=args[0]), timeout=120)
            out = {}
        elif cmd == "cstop":
            rt.StopContainer(pb.StopContainerRequest(container_id=args[0], timeout=5), timeout=60)
            out = {}
        elif cmd == "cremove":
            rt.RemoveContainer(pb.RemoveContainerRequest(container_id=args[0]), timeout=60)
            out = {}
        elif cmd == "cstatus":
            s = rt.ContainerStatus(pb.ContainerStatusRequest(container_id=args[0]), timeout=30).status
            out = {"state": pb.ContainerState.Name(s.state), "exit_code": s.exit_code, "reason": s.reason, "message": s.message}
        elif cmd == "exec":
            r = rt.ExecSync(pb.ExecSyncRequest(container_id=args[0], timeout=int(args[1]), cmd=args[2:]), timeout=int(args[1]) + 30)
            out = {"exit_code": r.exit_code, "stdout": r.stdout.decode(errors="replace"), "stderr": r.stderr.decode(errors="replace")}
        elif cmd == "list":
            r = rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=30)
            out = {"items": [{"id": i.id, "name": i.metadata.name, "state": pb.PodSandboxState.Name(i.state)} for i in r.items]}
        else:
            sys.exit(__doc__)
    except grpc.RpcError as e:
        print(json.dumps({"error": e.code().name, "message": e.details(), "ms": ms()}))
        return 3
    out["ms"] = ms()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
