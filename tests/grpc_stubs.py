"""Python gRPC stubs generated from a .proto at test time, for the tests' gRPC stand-ins
(tests/cri/cri.py for containerd's CRI, tests/device_plugin/kubelet.py for the device-plugin
API): generated with grpcio-tools when missing or older than the proto, renamed into place
atomically so concurrent runs share them, then imported.
"""
import importlib
import os
import sys

TARGET_TMP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "tmp")


def load(proto, out_env, out_name, who):
    """The (NAME_pb2, NAME_pb2_grpc) modules of `proto` (NAME.proto), generated into $out_env
    (default target/tmp/OUT_NAME) if needed; `who` names the caller in errors."""
    name = os.path.splitext(os.path.basename(proto))[0]
    modules = (f"{name}_pb2", f"{name}_pb2_grpc")
    out = os.path.abspath(os.environ.get(out_env) or os.path.join(TARGET_TMP, out_name))
    gen = os.path.join(out, f"{modules[1]}.py")
    if not os.path.exists(gen) or os.path.getmtime(gen) < os.path.getmtime(proto):
        from grpc_tools import protoc

        tmp = f"{out}.tmp.{os.getpid()}"
        os.makedirs(tmp, exist_ok=True)
        here = os.path.dirname(proto)
        rc = protoc.main(["protoc", f"-I{here}", f"--python_out={tmp}", f"--grpc_python_out={tmp}", proto])
        if rc != 0:
            sys.exit(f"{who}: protoc failed on {proto} ({rc})")
        os.makedirs(out, exist_ok=True)
        for m in modules:  # the service module last: it marks "done"
            os.replace(os.path.join(tmp, f"{m}.py"), os.path.join(out, f"{m}.py"))
        os.rmdir(tmp)
    sys.path.insert(0, out)
    return tuple(importlib.import_module(m) for m in modules)
