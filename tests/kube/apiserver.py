#!/usr/bin/env python3
"""A kube-apiserver STAND-IN for the DRA driver's tests (crates/agent/tests/real_cluster/dra_slices.rs, crates/agent/tests/node_agent/dra.rs,
crates/agent/tests/real_cluster/multus_dra.rs): the part of the Kubernetes REST contract the driver uses, for
`resource.k8s.io/v1` ResourceSlices (cluster-scoped) and ResourceClaims (namespaced, with
the /status subresource), with the API's own JSON. It is written apart from the driver (nothing here is imported from src/), from the
contract as kubernetes/kubernetes and kubernetes/api define it:

- HTTPS only, with a certificate signed by a CA made at start (the `openssl` CLI);
  bearer-token authentication (the token file is re-read at every request, so a test can rotate
  it): no or a wrong token is 401 with the authenticator's Status (`Unauthorized`).
- Paths: /apis/resource.k8s.io/v1/resourceslices[/NAME],
  /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims[/NAME[/status]],
  /apis/resource.k8s.io/v1/resourceclaims (every namespace), and the group-version's discovery
  document /apis/resource.k8s.io/v1. For what Multus reads (tests/kube/multus_dra.py), also
  /api/v1/namespaces/NS/pods[/NAME[/status]] and
  /apis/k8s.cni.cncf.io/v1/namespaces/NS/network-attachment-definitions[/NAME], stored as given.
- One resourceVersion counter for the store (etcd's revision); `metadata.generation` starts at
  1 and grows when the spec changes; uid and creationTimestamp set on create.
- GET a collection: a `*List` whose items carry no kind/apiVersion, with `labelSelector`
  (=, ==, !=, in, notin, exists, !exists) and `fieldSelector` (=, ==, != on the fields the API
  registers: metadata.name, metadata.namespace; for slices spec.nodeName, spec.driver,
  spec.pool.name); an unsupported field is 400.
- `watch=true`: a chunked stream of one JSON event per line, {"type": ADDED|MODIFIED|DELETED|
  BOOKMARK|ERROR, "object": ...}. Without resourceVersion (or "0") it opens with a synthetic
  ADDED per current object; with one, it replays what happened after it, or, if that is older
  than the history kept (--history), answers one ERROR event holding a 410 Expired Status.
  An object that stops (starts) matching the selectors is DELETED (ADDED) for that watcher.
  timeoutSeconds ends the stream cleanly.
- POST: 409 AlreadyExists on an existing name (generateName supported); PUT: 409 Conflict on a
  stale metadata.resourceVersion, 404 on a missing object, 400 when the body's name is not the
  URL's; the main resource ignores status and /status ignores everything else; DELETE returns
  the object (preconditions honoured) or 404.
- ResourceSlice validation of what a driver may get wrong (422 Invalid): device names DNS
  labels, attribute names `[domain/]C-identifier` (at most 32 characters), exactly one value
  per attribute, strings at most 64 characters, at most 32 attributes and capacities per
  device, at most 128 devices, taint effects. With --no-device-taints it behaves like a 1.34
  API server without the DRADeviceTaints gate: it silently drops `spec.devices[].taints`.
- ResourceClaim /status validation of `status.devices[]` (KEP-4817, 422 Invalid): each entry
  names a device of the claim's allocation (driver, pool, device, shareID), none twice, at
  most 8 conditions; `networkData.interfaceName` at most 256 bytes, `hardwareAddress` at most
  128, at most 16 `ips`, each an address with its prefix length in canonical form, none twice.
  Entries of devices the update deallocates are dropped. With --no-device-status it behaves
  like an API server without the DRAResourceClaimDeviceStatus gate (off by default before
  1.33): it silently drops `status.devices` unless the stored claim has some already. With
  --race-device-status N, the first N /status writes that change `status.devices` lose a race
  to another writer: the claim gets a new resourceVersion and the write a 409 Conflict.

    apiserver.py DIR [--history N] [--no-device-taints] [--no-device-status]
                 [--race-device-status N]

writes DIR/ca.crt and DIR/token (the bearer token it accepts), listens on 127.0.0.1 (a free
port), prints one line of JSON, {"url": ..., "ca": ..., "token": ...}, and serves until stdin
closes. Every request is logged to stderr as one line (method, path, status).
"""
import datetime
import json
import os
import re
import secrets
import ssl
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

# resource (plural) -> (Kind, namespaced, has a status subresource, field selectors)
RESOURCES = {
    "resourceslices": (
        "ResourceSlice",
        False,
        False,
        {"metadata.name", "spec.nodeName", "spec.driver", "spec.pool.name"},
    ),
    "resourceclaims": (
        "ResourceClaim",
        True,
        True,
        {"metadata.name", "metadata.namespace", "status.allocation.nodeName"},
    ),
    # What Multus reads besides (tests/kube/multus_dra.py): the pod (core v1, whose status the
    # kube-controller-manager fills with the claims it made from templates) and the
    # NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1). Stored as given, no validation.
    "pods": (
        "Pod",
        True,
        True,
        {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"},
    ),
    "network-attachment-definitions": (
        "NetworkAttachmentDefinition",
        True,
        False,
        {"metadata.name", "metadata.namespace"},
    ),
}

# resource -> its group/version ("v1" is the core group, served under /api/v1)
GROUP_VERSION = {
    "resourceslices": API_VERSION,
    "resourceclaims": API_VERSION,
    "pods": "v1",
    "network-attachment-definitions": "k8s.cni.cncf.io/v1",
}


def group_of(resource):
    gv = GROUP_VERSION[resource]
    return gv.rpartition("/")[0]


def prefix_of(gv):
    return "/api/v1" if gv == "v1" else f"/apis/{gv}"


# ---------------------------------------------------------------- certificates


def make_certs(dir_):
    """A CA and a server certificate for 127.0.0.1/localhost signed by it (P-256, one day),
    made with the openssl CLI; DIR/ca.crt is what a client trusts."""
    def run(*args, **kw):
        subprocess.run(["openssl", *args], check=True, cwd=dir_, capture_output=True, **kw)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=stand-in-kubernetes-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver")
    with open(os.path.join(dir_, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "server.ext")
    return (os.path.join(dir_, n) for n in ("ca.crt", "server.crt", "server.key"))


# ---------------------------------------------------------------- errors as the API returns them


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        if details is not None:
            self.status["details"] = details


def qualified(resource):
    group = group_of(resource)
    return f"{resource}.{group}" if group else resource


def not_found(resource, name):
    return ApiError(
        404, "NotFound", f'{qualified(resource)} "{name}" not found',
        {"name": name, "group": group_of(resource), "kind": resource},
    )


def already_exists(resource, name):
    return ApiError(
        409, "AlreadyExists", f'{qualified(resource)} "{name}" already exists',
        {"name": name, "group": group_of(resource), "kind": resource},
    )


def conflict(resource, name, why):
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {qualified(resource)} "{name}": {why}',
        {"name": name, "group": group_of(resource), "kind": resource},
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind, name, causes):
    """422 as NewInvalid builds it: one cause per field error."""
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return ApiError(
        422, "Invalid", f'{kind}.{GROUP} "{name}" is invalid: [{text}]',
        {
            "name": name, "group": GROUP, "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": c["message"], "field": c["field"]}
                for c in causes
            ],
        },
    )


def bad_request(message):
    return ApiError(400, "BadRequest", message)


# ---------------------------------------------------------------- selectors


def parse_label_selector(text):
    """A list of predicates over a labels dict (the apimachinery labels.Parse grammar)."""
    preds = []
    if not text:
        return preds
    # Split on commas outside parentheses.
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for p in (x.strip() for x in parts):
        m = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", p)
        if m:
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                preds.append(lambda l, k=key, v=vals: l.get(k) in v)
            else:
                preds.append(lambda l, k=key, v=vals: l.get(k) not in v)
            continue
        m = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)", p)
        if m:
            key, op, val = m.groups()
            if op == "!=":
                preds.append(lambda l, k=key, v=val: l.get(k) != v)
            else:
                preds.append(lambda l, k=key, v=val: l.get(k) == v)
            continue
        m = re.fullmatch(r"(!?)([\w./-]+)", p)
        if m:
            neg, key = m.groups()
            preds.append((lambda l, k=key: k not in l) if neg else (lambda l, k=key: k in l))
            continue
        raise bad_request(f"unable to parse requirement: {p!r}")
    return preds


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


def parse_field_selector(text, allowed, kind):
    preds = []
    if not text:
        return preds
    for p in text.split(","):
        m = re.fullmatch(r"([\w.]+)(==|=|!=)(.*)", p.strip())
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{p}'")
        key, op, val = m.groups()
        if key not in allowed:
            raise bad_request(
                f'"{key}" is not a known field selector: only "{", ".join(sorted(allowed))}"'
            )
        if op == "!=":
            preds.append(lambda o, k=key, v=val: field_value(o, k) != v)
        else:
            preds.append(lambda o, k=key, v=val: field_value(o, k) == v)
    return preds


# ---------------------------------------------------------------- validation


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_qualified_attr(name):
    """An attribute or capacity name: optional DNS-subdomain domain, then a C identifier of
    at most 32 characters."""
    domain, _, ident = name.rpartition("/")
    if domain and (len(domain) > 63 or not DNS_SUBDOMAIN.fullmatch(domain)):
        return f"the domain {domain!r} must be a DNS subdomain of at most 63 characters"
    if not C_IDENT.fullmatch(ident) or len(ident) > 32:
        return f"{ident!r} must be a C identifier of at most 32 characters"
    return None


def validate_slice(obj, server):
    causes = []

    def bad(field, message):
        causes.append({"field": field, "message": message})

    name = obj["metadata"].get("name", "")
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        bad("metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        bad("spec", "Required value")
        raise invalid("ResourceSlice", name, causes)
    driver = spec.get("driver", "")
    if not driver or len(driver) > 63 or not DNS_SUBDOMAIN.fullmatch(driver):
        bad("spec.driver", f"Invalid value: {driver!r}: a DNS subdomain of at most 63 characters")
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        bad("spec.pool.name", "Required value")
    if int(pool.get("resourceSliceCount", 0)) < 1:
        bad("spec.pool.resourceSliceCount", "Invalid value: must be greater than zero")
    if int(pool.get("generation", -1)) < 0:
        bad("spec.pool.generation", "Invalid value: must be greater than or equal to 0")
    owners = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
              if spec.get(k) not in (None, False, "")]
    if len(owners) != 1:
        bad("spec", f"Invalid value: exactly one of nodeName, nodeSelector, allNodes, "
                    f"perDeviceNodeSelection is required, got {owners}")
    devices = spec.get("devices") or []
    if len(devices) > 128:
        bad("spec.devices", f"Too many: {len(devices)}: must have at most 128 items")
    seen = set()
    for i, d in enumerate(devices):
        f = f"spec.devices[{i}]"
        dn = d.get("name", "")
        if len(dn) > 63 or not DNS_LABEL.fullmatch(dn):
            bad(f"{f}.name", f"Invalid value: {dn!r}: a lowercase RFC 1123 label")
        if dn in seen:
            bad(f"{f}.name", f"Duplicate value: {dn!r}")
        seen.add(dn)
        attrs = d.get("attributes") or {}
        caps = d.get("capacity") or {}
        if len(attrs) + len(caps) > 32:
            bad(f, f"Too many: {len(attrs) + len(caps)}: attributes and capacities at most 32")
        for k, v in attrs.items():
            why = validate_qualified_attr(k)
            if why:
                bad(f"{f}.attributes[{k}]", f"Invalid value: {why}")
            kinds = [t for t in ("int", "bool", "string", "version") if t in (v or {})]
            if len(kinds) != 1:
                bad(f"{f}.attributes[{k}]", "Invalid value: exactly one value must be specified")
            elif kinds[0] == "string" and len(str(v["string"])) > 64:
                bad(f"{f}.attributes[{k}].string", "Too long: may not be more than 64 bytes")
        for j, t in enumerate(d.get("taints") or []):
            if t.get("effect") not in ("NoSchedule", "NoExecute"):
                bad(f"{f}.taints[{j}].effect", f"Unsupported value: {t.get('effect')!r}")
            if validate_qualified_attr(t.get("key", "x/!")) and not re.fullmatch(
                r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", t.get("key", "")
            ):
                bad(f"{f}.taints[{j}].key", "Invalid value: a qualified name")
    if causes:
        raise invalid("ResourceSlice", name, causes)
    if server.no_device_taints:
        for d in devices:
            d.pop("taints", None)
    else:
        stamp = now_rfc3339()
        for d in devices:
            for t in d.get("taints") or []:
                t.setdefault("timeAdded", stamp)


# Limits of AllocatedDeviceStatus (k8s.io/api/resource/v1 types.go).
DEVICE_STATUS_MAX_CONDITIONS = 8
NETWORK_MAX_IPS = 16
NETWORK_INTERFACE_NAME_MAX = 256
NETWORK_HARDWARE_ADDRESS_MAX = 128


def interface_address_error(value):
    """validation.IsValidInterfaceAddress: an address with its prefix length ("10.9.8.7/24",
    "2001:db8::1/64"), written in canonical form; None when it is one."""
    import ipaddress
    if not isinstance(value, str) or "/" not in value:
        return "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
    try:
        iface = ipaddress.ip_interface(value)
        int(value.rsplit("/", 1)[1])  # a netmask ("/255.255.255.0") is no prefix length
    except ValueError:
        return "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
    canonical = f"{iface.ip}/{iface.network.prefixlen}"
    if value != canonical:
        return f'must be in canonical form ("{canonical}")'  # 1.37's words, double quotes
    return None


def device_key(entry):
    return (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", ""),
            entry.get("shareID") or "")


def key_text(key):
    return "/".join(k for k in key if k)


def drop_claim_status_fields(new, old, server):
    """The claim strategy's PrepareForUpdate of /status: without the
    DRAResourceClaimDeviceStatus gate (--no-device-status) status.devices is dropped unless
    the stored claim has it already; entries of devices no longer allocated are dropped."""
    status = new.get("status") or {}
    old_status = (old or {}).get("status") or {}
    if server.no_device_status and not old_status.get("devices"):
        status.pop("devices", None)
        return
    gone = {device_key(r) for r in
            (((old_status.get("allocation") or {}).get("devices") or {}).get("results") or [])}
    gone -= {device_key(r) for r in
             (((status.get("allocation") or {}).get("devices") or {}).get("results") or [])}
    if gone and status.get("devices"):
        status["devices"] = [d for d in status["devices"] if device_key(d) not in gone]


def validate_claim_status(obj):
    """validateResourceClaimStatusUpdate's rules for status.devices (validateDeviceStatus,
    validateNetworkDeviceData): each entry one of the allocation's devices, no entry twice,
    at most 8 conditions, networkData's limits, IPs unique and in CIDR form."""
    causes = []

    def bad(field, message):
        causes.append({"field": field, "message": message})

    status = obj.get("status") or {}
    allocated = {device_key(r) for r in
                 (((status.get("allocation") or {}).get("devices") or {}).get("results") or [])}
    seen = set()
    for i, d in enumerate(status.get("devices") or []):
        f = f"status.devices[{i}]"
        if not isinstance(d, dict):
            bad(f, "Invalid value: must be an object")
            continue
        for k in ("driver", "pool", "device"):
            if not d.get(k):
                bad(f"{f}.{k}", "Required value")
        key = device_key(d)
        if key not in allocated:
            bad(f, f"Invalid value: {key_text(key)!r}: must be an allocated device in the claim")
        if key in seen:
            bad(f, f"Duplicate value: {key_text(key)!r}")  # the entry, as 1.37 names it
        seen.add(key)
        conditions = d.get("conditions") or []
        if len(conditions) > DEVICE_STATUS_MAX_CONDITIONS:
            bad(f"{f}.conditions",
                f"Too many: {len(conditions)}: must have at most {DEVICE_STATUS_MAX_CONDITIONS} items")
        net = d.get("networkData")
        if net is None:
            continue
        if not isinstance(net, dict):
            bad(f"{f}.networkData", "Invalid value: must be an object")
            continue
        if len(net.get("interfaceName") or "") > NETWORK_INTERFACE_NAME_MAX:
            bad(f"{f}.networkData.interfaceName",
                f"Too long: may not be more than {NETWORK_INTERFACE_NAME_MAX} bytes")
        if len(net.get("hardwareAddress") or "") > NETWORK_HARDWARE_ADDRESS_MAX:
            bad(f"{f}.networkData.hardwareAddress",
                f"Too long: may not be more than {NETWORK_HARDWARE_ADDRESS_MAX} bytes")
        ips = net.get("ips") or []
        if len(ips) > NETWORK_MAX_IPS:
            bad(f"{f}.networkData.ips", f"Too many: {len(ips)}: must have at most {NETWORK_MAX_IPS} items")
        seen_ips = set()
        for j, ip in enumerate(ips):
            why = interface_address_error(ip)
            if why:
                bad(f"{f}.networkData.ips[{j}]", f"Invalid value: {ip!r}: {why}")
            if ip in seen_ips:
                bad(f"{f}.networkData.ips[{j}]", f"Duplicate value: {ip!r}")
            seen_ips.add(ip)
    if causes:
        raise invalid("ResourceClaim", obj["metadata"].get("name", ""), causes)


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- the store


class Store:
    def __init__(self, history):
        self.lock = threading.Condition()
        self.rv = 1
        self.objects = {}  # (resource, namespace, name) -> object
        self.events = []  # (rv, resource, type, old, new), the last `history`
        self.history = history
        self.oldest = 1  # the oldest resourceVersion a watch may start after
        self.no_device_taints = False
        self.no_device_status = False
        self.races_left = 0

    def bump(self):
        self.rv += 1
        return self.rv

    def record(self, resource, kind, old, new):
        self.events.append((self.rv, resource, kind, old, new))
        if len(self.events) > self.history:
            dropped = self.events.pop(0)
            self.oldest = dropped[0]
        self.lock.notify_all()


def strip_for_list(obj):
    o = dict(obj)
    o.pop("kind", None)
    o.pop("apiVersion", None)
    return o


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stand-in-kube-apiserver"
    # TCP_NODELAY, as Go's net package sets on every connection of the real server: with Nagle
    # on, an answer's two writes (headers, body) wait out the client's delayed ACK (+40 ms).
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        sys.stderr.write("apiserver.py: " + (fmt % args) + "\n")

    # -- plumbing

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            raise bad_request("the body of the request was empty")
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise bad_request(f"the object provided is unrecognized (must be of type JSON): {e}")
        if not isinstance(obj, dict):
            raise bad_request("the object provided is not an object")
        return obj

    def authenticate(self):
        want = open(self.server.token_path).read().strip()
        got = self.headers.get("Authorization", "")
        if not (got.startswith("Bearer ") and secrets.compare_digest(got[7:].strip(), want)):
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def route(self):
        """-> (resource, namespace, name, subresource, query)"""
        u = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        parts = [unquote(p) for p in u.path.split("/") if p]
        gv = next((g for g in sorted(set(GROUP_VERSION.values()))
                   if parts[: len(prefix_of(g).split("/")) - 1]
                   == [p for p in prefix_of(g).split("/") if p]), None)
        if gv is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        rest = parts[len(prefix_of(gv).split("/")) - 1:]
        if not rest:
            return None, None, None, None, dict(q, _gv=gv)
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        resource = rest[0]
        if (resource not in RESOURCES or GROUP_VERSION[resource] != gv
                or (ns is not None and not RESOURCES[resource][1])):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub is not None and (sub != "status" or not RESOURCES[resource][2])):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if RESOURCES[resource][1] and name is not None and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return resource, ns, name, sub, q

    def handle_any(self, method):
        try:
            self.authenticate()
            resource, ns, name, sub, q = self.route()
            if resource is None:
                if method != "GET":
                    raise ApiError(405, "MethodNotAllowed", "method not allowed")
                return self.send_json(200, self.discovery(q["_gv"]))
            if method == "GET" and name is None:
                if q.get("watch") in ("true", "1"):
                    return self.watch(resource, ns, q)
                return self.send_json(200, self.list(resource, ns, q))
            if method == "GET":
                return self.send_json(200, self.get(resource, ns, name))
            if method == "POST" and name is None:
                return self.send_json(201, self.create(resource, ns, self.read_body()))
            if method == "PUT" and name is not None:
                return self.send_json(200, self.update(resource, ns, name, sub, self.read_body()))
            if method == "DELETE" and name is not None and sub is None:
                n = int(self.headers.get("Content-Length") or 0)
                opts = json.loads(self.rfile.read(n)) if n else {}
                return self.send_json(200, self.delete(resource, ns, name, opts))
            raise ApiError(
                405, "MethodNotAllowed",
                f"{method} is not supported on resources of kind \"{qualified(resource)}\"",
            )
        except ApiError as e:
            self.send_json(e.status["code"], e.status)

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def do_PATCH(self):
        self.handle_any("PATCH")

    # -- verbs

    def discovery(self, gv):
        res = []
        for plural, (kind, namespaced, status, _) in RESOURCES.items():
            if GROUP_VERSION[plural] != gv:
                continue
            res.append({
                "name": plural, "singularName": kind.lower(), "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch",
                          "update", "watch"],
            })
            if status:
                res.append({"name": f"{plural}/status", "singularName": "",
                            "namespaced": namespaced, "kind": kind,
                            "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": res}

    def matcher(self, resource, ns, q):
        kind, namespaced, _, fields = RESOURCES[resource]
        lp = parse_label_selector(q.get("labelSelector", ""))
        fp = parse_field_selector(q.get("fieldSelector", ""), fields, kind)

        def match(obj):
            if ns is not None and obj["metadata"].get("namespace") != ns:
                return False
            labels = obj["metadata"].get("labels") or {}
            return all(p(labels) for p in lp) and all(p(obj) for p in fp)

        return match

    def list(self, resource, ns, q):
        match = self.matcher(resource, ns, q)
        st = self.server.store
        with st.lock:
            items = [
                strip_for_list(o) for (r, _, _), o in sorted(st.objects.items())
                if r == resource and match(o)
            ]
            rv = st.rv
        return {
            "kind": RESOURCES[resource][0] + "List",
            "apiVersion": GROUP_VERSION[resource],
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }

    def get(self, resource, ns, name):
        st = self.server.store
        with st.lock:
            obj = st.objects.get((resource, ns, name))
        if obj is None:
            raise not_found(resource, name)
        return obj

    def create(self, resource, ns, body):
        kind, namespaced, has_status, _ = RESOURCES[resource]
        gv = GROUP_VERSION[resource]
        if body.get("kind", kind) != kind or body.get("apiVersion", gv) != gv:
            raise bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                f"expected API version ({gv})"
            )
        meta = dict(body.get("metadata") or {})
        st = self.server.store
        with st.lock:
            name = meta.get("name")
            if not name and meta.get("generateName"):
                name = meta["generateName"] + secrets.token_hex(3)[:5]
            if not name:
                raise invalid(kind, "", [{"field": "metadata.name",
                                          "message": "Required value: name or generateName is required"}])
            if namespaced and meta.get("namespace", ns) != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            if (resource, ns, name) in st.objects:
                raise already_exists(resource, name)
            obj = dict(body)
            obj["kind"], obj["apiVersion"] = kind, gv
            if has_status:
                obj.pop("status", None)  # status is set only through /status
            if resource == "resourceslices":
                obj["metadata"] = dict(meta, name=name)
                validate_slice(obj, st)
            meta.update({
                "name": name, "uid": str(uuid.uuid4()), "generation": 1,
                "creationTimestamp": now_rfc3339(),
                "resourceVersion": str(st.bump()),
            })
            if namespaced:
                meta["namespace"] = ns
            obj["metadata"] = meta
            st.objects[(resource, ns, name)] = obj
            st.record(resource, "ADDED", None, obj)
            return obj

    def update(self, resource, ns, name, sub, body):
        kind, _, has_status, _ = RESOURCES[resource]
        meta = body.get("metadata") or {}
        if meta.get("name", name) != name:
            raise bad_request("the name of the object "
                              f"({meta.get('name')}) does not match the name on the URL ({name})")
        st = self.server.store
        with st.lock:
            old = st.objects.get((resource, ns, name))
            if old is None:
                raise not_found(resource, name)
            want_rv = meta.get("resourceVersion")
            if (resource == "resourceclaims" and sub == "status" and st.races_left > 0
                    and (body.get("status") or {}).get("devices")
                    != (old.get("status") or {}).get("devices")):
                # --race-device-status: another writer changed the claim just before this
                # write (a new resourceVersion, as its update would give it), so this one is
                # stale.
                st.races_left -= 1
                raced = json.loads(json.dumps(old))
                raced["metadata"]["resourceVersion"] = str(st.bump())
                st.objects[(resource, ns, name)] = raced
                st.record(resource, "MODIFIED", old, raced)
                raise conflict(resource, name, STALE)
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise conflict(resource, name, STALE)
            new = json.loads(json.dumps(old))
            if sub == "status":
                new["status"] = body.get("status")
                if new["status"] is None:
                    new.pop("status")
                if resource == "resourceclaims":
                    drop_claim_status_fields(new, old, st)
                    validate_claim_status(new)
            else:
                for k, v in body.items():
                    if k not in ("metadata", "status", "kind", "apiVersion"):
                        new[k] = v
                for k in ("labels", "annotations", "ownerReferences", "finalizers"):
                    if k in meta:
                        new["metadata"][k] = meta[k]
                    else:
                        new["metadata"].pop(k, None)
                if resource == "resourceslices":
                    validate_slice(new, st)
                if new.get("spec") != old.get("spec"):
                    new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if new == old:
                return old  # a no-op update does not move the resourceVersion
            new["metadata"]["resourceVersion"] = str(st.bump())
            st.objects[(resource, ns, name)] = new
            st.record(resource, "MODIFIED", old, new)
            return new

    def delete(self, resource, ns, name, opts):
        st = self.server.store
        with st.lock:
            old = st.objects.get((resource, ns, name))
            if old is None:
                raise not_found(resource, name)
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise conflict(resource, name, "Precondition failed: UID in precondition: "
                               f"{pre['uid']}, UID in object meta: {old['metadata']['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(resource, name, STALE)
            del st.objects[(resource, ns, name)]
            st.bump()
            gone = json.loads(json.dumps(old))
            gone["metadata"]["resourceVersion"] = str(st.rv)
            st.record(resource, "DELETED", old, gone)
            return gone

    # -- watch

    def watch(self, resource, ns, q):
        match = self.matcher(resource, ns, q)
        timeout = float(q.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        st = self.server.store
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(kind, obj):
            line = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        rv_param = q.get("resourceVersion", "")
        try:
            with st.lock:
                if rv_param in ("", "0"):
                    pending = [("ADDED", o) for (r, _, _), o in sorted(st.objects.items())
                               if r == resource and match(o)]
                    since = st.rv
                else:
                    try:
                        since = int(rv_param)
                    except ValueError:
                        raise bad_request(f"invalid resource version: {rv_param!r}")
                    if since < st.oldest - 1:
                        err = ApiError(410, "Expired",
                                       f"too old resource version: {since} ({st.oldest - 1})")
                        pending = [("ERROR", err.status)]
                        since = None
                    else:
                        pending = []
            for kind, obj in pending:
                emit(kind, obj)
            if since is None:
                return self.end_chunks()
            while True:
                with st.lock:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.server.stopping:
                        break
                    news = [e for e in st.events if e[0] > since and e[1] == resource]
                    if not news:
                        st.lock.wait(min(left, 1.0))
                        continue
                    since = news[-1][0]
                out = []
                for _, _, kind, old, new in news:
                    was = old is not None and match(old)
                    now = kind != "DELETED" and match(new)
                    if kind == "DELETED":
                        if was:
                            out.append(("DELETED", new))
                    elif was and now:
                        out.append(("MODIFIED", new))
                    elif now:
                        out.append(("ADDED", new))
                    elif was:
                        out.append(("DELETED", new))
                for kind, obj in out:
                    emit(kind, obj)
            self.end_chunks()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except ApiError as e:
            emit("ERROR", e.status)
            self.end_chunks()

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    dir_ = args[0]
    history = 1000
    no_taints = "--no-device-taints" in args
    no_status = "--no-device-status" in args
    if "--history" in args:
        history = int(args[args.index("--history") + 1])
    os.makedirs(dir_, exist_ok=True)
    ca_path, cert_path, key_path = make_certs(dir_)
    token_path = os.path.join(dir_, "token")
    with open(token_path, "w") as f:
        f.write(secrets.token_urlsafe(32))  # as the kubelet writes a projected token: no newline
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_path, key_path)
    ctx.set_alpn_protocols(["http/1.1"])
    srv = Server(("127.0.0.1", 0), Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.store = Store(history)
    srv.store.no_device_taints = no_taints
    srv.store.no_device_status = no_status
    if "--race-device-status" in args:
        srv.store.races_left = int(args[args.index("--race-device-status") + 1])
    srv.token_path = token_path
    srv.stopping = False
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    print(json.dumps({"url": f"https://127.0.0.1:{port}", "ca": ca_path, "token": token_path}),
          flush=True)
    sys.stdin.read()  # until the test closes our stdin (or dies)
    srv.stopping = True
    with srv.store.lock:
        srv.store.lock.notify_all()
    srv.shutdown()


if __name__ == "__main__":
    main()
