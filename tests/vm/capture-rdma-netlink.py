#!/usr/bin/env python3
"""Record real kernel RDMA netlink (NETLINK_RDMA, client RDMA_NL_NLDEV) replies
as byte files for the Rust unit tests in testdata/rdma-netlink/.

Runs inside the test VM (tests/vm/vm.sh), one boot per mode, because the netns
mode is fixed at boot and rdma_rxe and rdma_rxe_netns must not both be loaded:

    tests/vm/vm.sh tests/vm/capture-rdma-netlink.py shared testdata/rdma-netlink
    tests/vm/vm.sh --exclusive tests/vm/capture-rdma-netlink.py exclusive testdata/rdma-netlink
    tests/vm/vm.sh --exclusive tests/vm/capture-rdma-netlink.py exclusive-move testdata/rdma-netlink

For each capture NAME it writes NAME.req.bin (the request exactly as sent) and
NAME.bin (every byte read from the socket for that request, datagrams
concatenated, up to and including the NLMSG_DONE or NLMSG_ERROR).  It also
writes decoded-MODE.txt: the setup facts (ifindexes, MACs, device indexes) and
a decoding of every file.  `capture-rdma-netlink.py --decode FILE...` decodes
files anywhere (no VM needed).

The socket is bound to the fixed port id PORTID, so nlmsg_pid in replies is
deterministic; requests use fixed sequence numbers (one per capture).
Attribute numbers are from include/uapi/rdma/rdma_netlink.h of Linux 6.1.
"""
import ctypes
import json
import os
import socket
import struct
import subprocess
import sys
import time

NETLINK_RDMA = 20
PORTID = 0x4242            # our bound netlink port id: replies carry it in nlmsg_pid

NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK = 0x1, 0x2, 0x4
NLM_F_ROOT, NLM_F_MATCH = 0x100, 0x200
NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3

RDMA_NL_NLDEV = 5
CMD = {"GET": 1, "SET": 2, "NEWLINK": 3, "DELLINK": 4, "PORT_GET": 5, "SYS_GET": 6, "SYS_SET": 7}
CMD_NAME = {v: k for k, v in CMD.items()}


def nl_type(op):
    """RDMA_NL_GET_TYPE(client, op) = client << 10 | op."""
    return RDMA_NL_NLDEV << 10 | op


# enum rdma_nldev_attr (subset we send or decode), with a decode format:
# u8/u32/u64/str/nest/raw.
ATTR = {
    1: ("DEV_INDEX", "u32"), 2: ("DEV_NAME", "str"), 3: ("PORT_INDEX", "u32"),
    4: ("CAP_FLAGS", "u64"), 5: ("FW_VERSION", "str"), 6: ("NODE_GUID", "guid"),
    7: ("SYS_IMAGE_GUID", "guid"), 8: ("SUBNET_PREFIX", "u64"), 9: ("LID", "u32"),
    10: ("SM_LID", "u32"), 11: ("LMC", "u8"), 12: ("PORT_STATE", "u8"),
    13: ("PORT_PHYS_STATE", "u8"), 14: ("DEV_NODE_TYPE", "u8"),
    15: ("RES_SUMMARY", "nest"), 50: ("NDEV_INDEX", "u32"), 51: ("NDEV_NAME", "str"),
    52: ("DRIVER", "nest"), 65: ("LINK_TYPE", "str"), 66: ("SYS_ATTR_NETNS_MODE", "u8"),
    67: ("DEV_PROTOCOL", "str"), 68: ("NET_NS_FD", "u32"), 73: ("UVERBS_DRIVER_ID", "u32"),
    84: ("DEV_DIM", "u8"), 93: ("SYS_ATTR_COPY_ON_FORK", "u8"),
}
A = {name: num for num, (name, _) in ATTR.items()}


def nla(kind, payload):
    ln = 4 + len(payload)
    return struct.pack("=HH", ln, kind) + payload + b"\0" * ((4 - ln % 4) % 4)


def nla_u32(kind, v):
    return nla(kind, struct.pack("=I", v))


def nla_str(kind, s):
    return nla(kind, s.encode() + b"\0")


def nlmsg(op, flags, seq, payload=b""):
    return struct.pack("=IHHII", 16 + len(payload), nl_type(op), flags, seq, 0) + payload


# ----------------------------------------------------------------- decoding
def decode_attrs(buf, indent):
    out = []
    off = 0
    while off + 4 <= len(buf):
        ln, kind = struct.unpack_from("=HH", buf, off)
        if ln < 4:
            out.append(f"{indent}<bad nla len {ln}>")
            break
        data = buf[off + 4:off + ln]
        num = kind & 0x3FFF
        name, fmt = ATTR.get(num, (f"attr{num}", "raw"))
        flag = " NESTED" if kind & 0x8000 else ""
        if fmt == "u8" and len(data) == 1:
            val = str(data[0])
        elif fmt == "u32" and len(data) == 4:
            val = str(struct.unpack("=I", data)[0])
        elif fmt == "u64" and len(data) == 8:
            val = hex(struct.unpack("=Q", data)[0])
        elif fmt == "guid" and len(data) == 8:
            g = struct.unpack("=Q", data)[0]     # host order, like the kernel's u64
            val = ":".join(f"{g:016x}"[i:i + 4] for i in range(0, 16, 4))
        elif fmt == "str":
            val = repr(data.rstrip(b"\0").decode(errors="replace"))
        else:
            val = data.hex()
        out.append(f"{indent}[{num:3d}] {name:<22} len={ln - 4:<3} {val}{flag}")
        if fmt == "nest":
            out.extend(decode_attrs(data, indent + "    "))
        off += (ln + 3) & ~3
    return out


def decode(buf):
    out = []
    off = 0
    while off + 16 <= len(buf):
        ln, typ, flags, seq, pid = struct.unpack_from("=IHHII", buf, off)
        body = buf[off + 16:off + ln]
        # 0x100/0x200 mean ROOT/MATCH (= DUMP) in a GET request, CAPPED/ACK_TLVS in an NLMSG_ERROR
        high = ((0x100, "CAPPED"), (0x200, "ACK_TLVS")) if typ == NLMSG_ERROR else \
            ((0x100, "ROOT"), (0x200, "MATCH"))
        fl = "|".join(n for b, n in ((1, "REQUEST"), (2, "MULTI"), (4, "ACK")) + high
                      if flags & b) or "0"
        if typ == NLMSG_ERROR:
            err = struct.unpack_from("=i", body)[0]
            what = "ACK (error 0)" if err == 0 else f"ERROR {err} ({os.strerror(-err)})"
            out.append(f"@{off} NLMSG_ERROR len={ln} flags={fl} seq={seq} pid={pid:#x}: {what}; "
                       f"echoes the request's header + {ln - 16 - 4 - 16} bytes of its payload")
        elif typ == NLMSG_DONE:
            err = struct.unpack_from("=i", body)[0] if len(body) >= 4 else 0
            what = f": dump failed, error {err} ({os.strerror(-err)})" if err else ""
            out.append(f"@{off} NLMSG_DONE len={ln} flags={fl} seq={seq} pid={pid:#x} status={err}{what}")
        else:
            client, op = typ >> 10, typ & 0x3FF
            out.append(f"@{off} type={typ:#x} (client {client}, op {op} {CMD_NAME.get(op, '?')}) "
                       f"len={ln} flags={fl} seq={seq} pid={pid:#x}")
            out.extend(decode_attrs(body, "    "))
        if ln < 16:
            break
        off += (ln + 3) & ~3
    return out


# ----------------------------------------------------------------- capture
class Rdma:
    """A NETLINK_RDMA socket bound to PORTID in the netns current at creation."""

    def __init__(self, portid=PORTID):
        self.s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
        self.s.bind((portid, 0))
        self.s.settimeout(5)

    def exchange(self, req):
        """Send req, read until NLMSG_DONE or NLMSG_ERROR: (raw bytes, datagram sizes)."""
        self.s.send(req)
        raw, sizes, done = b"", [], False
        while not done:
            d = self.s.recv(1 << 20)
            raw += d
            sizes.append(len(d))
            off = 0
            while off + 16 <= len(d):
                ln, typ = struct.unpack_from("=IH", d, off)
                if typ in (NLMSG_DONE, NLMSG_ERROR):
                    done = True
                off += max((ln + 3) & ~3, 16)
        return raw, sizes


class Capture:
    def __init__(self, mode, outdir):
        self.mode, self.outdir = mode, outdir
        self.lines = []
        self.seq = {"shared": 100, "exclusive": 200, "exclusive-move": 300}[mode]
        os.makedirs(outdir, exist_ok=True)

    def take(self, sock, name, op, flags, attrs=b"", what=""):
        self.seq += 1
        req = nlmsg(op, flags, self.seq, attrs)
        raw, sizes = sock.exchange(req)
        with open(os.path.join(self.outdir, name + ".req.bin"), "wb") as f:
            f.write(req)
        with open(os.path.join(self.outdir, name + ".bin"), "wb") as f:
            f.write(raw)
        self.lines += [f"== {name}.bin  ({len(raw)} bytes in {len(sizes)} datagram(s): {sizes})",
                       f"   {what}", f"-- request {name}.req.bin ({len(req)} bytes)"]
        self.lines += decode(req)
        self.lines += ["-- reply"] + decode(raw) + [""]
        print(f"captured {name}: {len(raw)} bytes", flush=True)
        return raw

    def fact(self, text):
        self.lines.append("# " + text)

    def write(self):
        path = os.path.join(self.outdir, f"decoded-{self.mode}.txt")
        with open(path, "w") as f:
            f.write("\n".join(self.lines) + "\n")


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True)


def out(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout.strip()


libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def links(ns=None):
    pre = f"ip -n {ns} " if ns else "ip "
    info = json.loads(out(pre + "-j link show"))
    return ", ".join(f"{l['ifname']}=ifindex {l['ifindex']} ({l.get('address', '-')})" for l in info)


def rdma_dev_index(name, ns=None):
    pre = f"ip netns exec {ns} " if ns else ""
    for d in json.loads(out(pre + "rdma -j dev show")):
        if d["ifname"] == name:
            return d["ifindex"]
    raise SystemExit(f"no RDMA device {name}")


def wait_port_active(dev, ns=None, deadline=10.0):
    pre = f"ip netns exec {ns} " if ns else ""
    end = time.time() + deadline
    while time.time() < end:
        if "ACTIVE" in out(pre + f"rdma link show {dev}/1"):
            return
        time.sleep(0.2)


def veth_pair():
    # fixed MACs so node GUIDs (derived from the MAC) are stable across runs
    sh("ip link add v0 address 02:00:00:00:00:10 type veth peer name v1 address 02:00:00:00:00:11")
    sh("ip link set v0 up && ip link set v1 up")


def run_shared(c):
    sh("modprobe rdma_rxe && modprobe siw")
    sock = Rdma()
    c.fact(f"kernel {os.uname().release}; netns mode shared (default); modules rdma_rxe, siw")
    c.take(sock, "sys_get_shared", CMD["SYS_GET"], NLM_F_REQUEST | NLM_F_ACK,
           what="SYS_GET doit in shared mode: NETNS_MODE=1 (+COPY_ON_FORK), then the ACK")
    c.take(sock, "dev_get_dump_empty", CMD["GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="GET dump with no RDMA device at all: only NLMSG_DONE")
    veth_pair()
    c.fact("links: " + links())
    c.take(sock, "newlink_ack", CMD["NEWLINK"], NLM_F_REQUEST | NLM_F_ACK,
           nla_str(A["DEV_NAME"], "rxe0") + nla_str(A["LINK_TYPE"], "rxe") + nla_str(A["NDEV_NAME"], "v0"),
           what="NEWLINK rxe0 type rxe netdev v0 (= rdma link add rxe0 type rxe netdev v0): ACK")
    wait_port_active("rxe0")
    rxe = rdma_dev_index("rxe0")
    c.fact(f"rxe0: RDMA dev index {rxe}, port 1 on v0; rdma link: {out('rdma link show')!r}")
    c.take(sock, "dev_get_dump_rxe", CMD["GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="GET dump: one device rxe0 (rdma_rxe on veth v0), then NLMSG_DONE")
    c.take(sock, "dev_get_rxe0", CMD["GET"], NLM_F_REQUEST | NLM_F_ACK, nla_u32(A["DEV_INDEX"], rxe),
           what=f"GET doit DEV_INDEX={rxe} (rxe0): the device message, then the ACK")
    c.take(sock, "port_get_dump_rxe", CMD["PORT_GET"], NLM_F_REQUEST | NLM_F_DUMP,
           nla_u32(A["DEV_INDEX"], rxe),
           what=f"PORT_GET dump DEV_INDEX={rxe}: port 1 of rxe0 with NDEV_INDEX/NDEV_NAME of v0, DONE")
    c.take(sock, "port_get_dump_no_index", CMD["PORT_GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="PORT_GET dump WITHOUT DEV_INDEX: the dump fails: NLMSG_DONE carrying -22")
    c.take(sock, "dev_get_enodev", CMD["GET"], NLM_F_REQUEST | NLM_F_ACK, nla_u32(A["DEV_INDEX"], 77),
           what="GET doit for a device index that does not exist (77): NLMSG_ERROR")
    # a second, iWARP device for multi-device dumps
    c.take(sock, "newlink_siw_ack", CMD["NEWLINK"], NLM_F_REQUEST | NLM_F_ACK,
           nla_str(A["DEV_NAME"], "siw0") + nla_str(A["LINK_TYPE"], "siw") + nla_str(A["NDEV_NAME"], "v1"),
           what="NEWLINK siw0 type siw netdev v1: ACK")
    wait_port_active("siw0")
    siw = rdma_dev_index("siw0")
    c.fact(f"siw0: RDMA dev index {siw}, port 1 on v1")
    c.take(sock, "dev_get_dump_rxe_siw", CMD["GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="GET dump: rxe0 (RoCE, on v0) and siw0 (iWARP, on v1), then NLMSG_DONE")
    c.take(sock, "port_get_dump_siw", CMD["PORT_GET"], NLM_F_REQUEST | NLM_F_DUMP,
           nla_u32(A["DEV_INDEX"], siw), what=f"PORT_GET dump DEV_INDEX={siw} (siw0 on v1)")
    c.take(sock, "dellink_ack", CMD["DELLINK"], NLM_F_REQUEST | NLM_F_ACK, nla_u32(A["DEV_INDEX"], siw),
           what=f"DELLINK DEV_INDEX={siw} (= rdma link delete siw0): ACK")
    c.take(sock, "dev_set_netns_shared_eopnotsupp", CMD["SET"], NLM_F_REQUEST | NLM_F_ACK,
           nla_u32(A["DEV_INDEX"], rxe) + nla_u32(A["NET_NS_FD"], os.open("/proc/1/ns/net", os.O_RDONLY)),
           what="SET DEV_INDEX=rxe0 NET_NS_FD=<fd of init_net> in SHARED mode: NLMSG_ERROR")


def run_exclusive(c):
    sh("modprobe rdma_rxe")
    sock = Rdma()
    c.fact(f"kernel {os.uname().release}; booted with ib_core.netns_mode=0 (exclusive); module rdma_rxe (stock)")
    c.take(sock, "sys_get_exclusive", CMD["SYS_GET"], NLM_F_REQUEST | NLM_F_ACK,
           what="SYS_GET doit in exclusive mode: NETNS_MODE=0, then the ACK")
    veth_pair()
    sh("rdma link add rxe0 type rxe netdev v0")
    rxe = rdma_dev_index("rxe0")
    sh("ip netns add pod")
    fd = os.open("/run/netns/pod", os.O_RDONLY)
    c.fact("links: " + links() + f"; netns 'pod' created; rxe0 (stock rxe) is RDMA dev index {rxe} on v0")
    c.take(sock, "dev_set_netns_eopnotsupp", CMD["SET"], NLM_F_REQUEST | NLM_F_ACK,
           nla_u32(A["DEV_INDEX"], rxe) + nla_u32(A["NET_NS_FD"], fd),
           what=f"SET DEV_INDEX={rxe} NET_NS_FD={fd} (fd of /run/netns/pod, process-local number) "
                "with stock rxe in exclusive mode: NLMSG_ERROR -95 EOPNOTSUPP")


def run_exclusive_move(c):
    """rdma_rxe_netns (tests/vm/rxe-netns.patch) on the virtio NIC: a move that succeeds."""
    nic = os.environ.get("RDMA_VM_NIC", "eth0")
    sh("modprobe rdma_rxe_netns")
    host_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    sock = Rdma()
    sh(f"ip link set {nic} up")
    c.take(sock, "newlink_rxe_ns_ack", CMD["NEWLINK"], NLM_F_REQUEST | NLM_F_ACK,
           nla_str(A["DEV_NAME"], "rxe0") + nla_str(A["LINK_TYPE"], "rxe_ns") + nla_str(A["NDEV_NAME"], nic),
           what=f"NEWLINK rxe0 type rxe_ns netdev {nic} (test-only netns-capable rxe): ACK")
    rxe = rdma_dev_index("rxe0")
    sh("ip netns add pod")
    pod_fd = os.open("/run/netns/pod", os.O_RDONLY)
    c.fact(f"kernel {os.uname().release}; exclusive mode; module rdma_rxe_netns; guest NIC {nic} "
           f"(virtio-net-pci {os.environ.get('RDMA_VM_NIC_PCI')}); rxe0 is RDMA dev index {rxe}")
    c.fact("host links: " + links())
    c.take(sock, "port_get_dump_rxe_ns_host", CMD["PORT_GET"], NLM_F_REQUEST | NLM_F_DUMP,
           nla_u32(A["DEV_INDEX"], rxe), what=f"PORT_GET dump DEV_INDEX={rxe} in the host: port 1 on {nic}")
    c.take(sock, "dev_set_netns_ok", CMD["SET"], NLM_F_REQUEST | NLM_F_ACK,
           nla_u32(A["DEV_INDEX"], rxe) + nla_u32(A["NET_NS_FD"], pod_fd),
           what=f"SET DEV_INDEX={rxe} NET_NS_FD={pod_fd} (fd of /run/netns/pod): ACK, rxe0 now in pod")
    c.take(sock, "dev_get_dump_host_after_move", CMD["GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="GET dump in the host after the move: no device, only NLMSG_DONE")
    setns(pod_fd)
    psock = Rdma()            # bound to the pod's netns for life
    setns(host_fd)
    c.take(psock, "dev_get_dump_pod", CMD["GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="GET dump from a socket opened inside pod: rxe0, then DONE")
    c.take(psock, "port_get_dump_pod_no_netdev", CMD["PORT_GET"], NLM_F_REQUEST | NLM_F_DUMP,
           nla_u32(A["DEV_INDEX"], rxe),
           what=f"PORT_GET dump in pod before {nic} follows: port 1 with NO NDEV_INDEX/NDEV_NAME")
    sh(f"ip link set {nic} netns pod && ip -n pod addr add 10.9.9.2/24 dev {nic} && ip -n pod link set {nic} up")
    wait_port_active("rxe0", ns="pod")
    c.fact(f"after 'ip link set {nic} netns pod' + addr 10.9.9.2/24 + up: pod links: " + links("pod"))
    c.take(psock, "port_get_dump_pod", CMD["PORT_GET"], NLM_F_REQUEST | NLM_F_DUMP,
           nla_u32(A["DEV_INDEX"], rxe),
           what=f"PORT_GET dump in pod after {nic} moved in: NDEV_INDEX/NDEV_NAME in the pod's index space")
    # ib_core compares the device's netns with the CALLING THREAD's netns
    # (current->nsproxy->net_ns in rdma_dev_change_netns), not the socket's:
    # a pod socket used from a thread in the host finds the device, then fails.
    c.take(psock, "dev_set_netns_back_enodev", CMD["SET"], NLM_F_REQUEST | NLM_F_ACK,
           nla_u32(A["DEV_INDEX"], rxe) + nla_u32(A["NET_NS_FD"], host_fd),
           what=f"SET DEV_INDEX={rxe} NET_NS_FD={host_fd} (fd of init_net) on the pod's socket but from a "
                "thread in init_net: NLMSG_ERROR -19 ENODEV (the thread must be in the device's netns)")
    setns(pod_fd)
    c.take(psock, "dev_set_netns_back_ok", CMD["SET"], NLM_F_REQUEST | NLM_F_ACK,
           nla_u32(A["DEV_INDEX"], rxe) + nla_u32(A["NET_NS_FD"], host_fd),
           what=f"the same SET, thread setns()'d into pod: ACK, rxe0 back in init_net")
    setns(host_fd)
    c.take(sock, "dev_get_dump_host_after_return", CMD["GET"], NLM_F_REQUEST | NLM_F_DUMP,
           what="GET dump in the host after the return: rxe0 again, then DONE")


def main(argv):
    if len(argv) >= 2 and argv[1] == "--decode":
        for path in argv[2:]:
            print(f"== {path}")
            print("\n".join(decode(open(path, "rb").read())))
        return 0
    if len(argv) != 3 or argv[1] not in ("shared", "exclusive", "exclusive-move"):
        print(__doc__, file=sys.stderr)
        return 2
    c = Capture(argv[1], argv[2])
    {"shared": run_shared, "exclusive": run_exclusive, "exclusive-move": run_exclusive_move}[argv[1]](c)
    c.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
