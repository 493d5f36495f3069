#!/usr/bin/env python3
"""Split one rdma-host-device call, traced with `strace [-f] -tt -T -o FILE`, into steps.

    strace_steps.py FILE...      one row per file, then the median of each step

Steps (marks found in the main thread's syscalls, in order):
  start       execve -> first socket()            (loader, config parse, runtime)
  pre-move    first socket() -> RTM_SETLINK sent  (lookups, RDMA plan, state file)
    fsync       of which: fsync() time           (state file + its directory)
  move        RTM_SETLINK sent -> its ack         (one request: netns+name+mtu+alias+up)
  rdma-pod    setns() windows between the move and IPAM (soft device create)
  ipam        IPAM child spawned -> reaped        (exec of e.g. static)
  addr        IPAM reaped -> next setns()         (addresses and routes in the pod)
  gid-wait    the setns() window after IPAM       (verify: GIDs present, port ACTIVE)
    sleeps      of which: time asleep (backoff)
  finish      -> exit_group
DEL has no IPAM before its move: its steps are start, pre-move (incl. RDMA release), move, ipam.
"""
import re
import statistics
import sys

LINE = re.compile(r"^(?:(\d+)\s+)?(\d+):(\d+):(\d+\.\d+)\s+(.*)$")
DUR = re.compile(r"<(\d+\.\d+)>\s*$")


def ts(h, m, s):
    return int(h) * 3600 + int(m) * 60 + float(s)


def parse(path):
    lines = []
    with open(path) as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if m:
                pid, h, mi, s, rest = m.groups()
                d = DUR.search(rest)
                lines.append((int(pid or 0), ts(h, mi, s), rest, float(d.group(1)) if d else 0.0))
    return lines


def steps(path):
    lines = parse(path)
    if not lines:
        return {}
    main = lines[0][0]
    t_exec = lines[0][1]
    marks = {}
    setns = []
    fsync = 0.0
    sleeps = []
    pending_move_fd = None
    t_exit = None
    for pid, t, rest, dur in lines:
        if pid != main:
            continue
        name = rest.split("(", 1)[0]
        if rest.startswith("<..."):
            name = rest.split()[1]
        if name == "socket" and "first_socket" not in marks:
            marks["first_socket"] = t
        elif name in ("sendto", "sendmsg") and ("RTM_SETLINK" in rest or "nlmsg_type=0x13" in rest) and "move_send" not in marks:
            marks["move_send"] = t
            pending_move_fd = rest.split("(", 1)[1].split(",", 1)[0]
        elif name in ("recvfrom", "recvmsg") and pending_move_fd is not None \
                and rest.startswith(f"{name}({pending_move_fd},") and "EAGAIN" not in rest:
            marks["move_ack"] = t
            pending_move_fd = None
        elif name in ("clone3", "clone", "vfork") and "CLONE_VFORK" in rest and "ipam_start" not in marks:
            marks["ipam_start"] = t
        elif name == "wait4" and "ipam_start" in marks and "ipam_end" not in marks and "=" in rest:
            marks["ipam_end"] = t + dur
        elif name == "setns":
            setns.append(t)
        elif name == "fsync":
            fsync += dur
        elif name in ("nanosleep", "clock_nanosleep"):
            sleeps.append((t, dur))
        elif name == "exit_group":
            t_exit = t
    t_exit = t_exit or lines[-1][1]
    out = {}
    ms = lambda a, b: (b - a) * 1000  # noqa: E731
    fs = marks.get("first_socket")
    if fs:
        out["start"] = ms(t_exec, fs)
    if fs and "move_send" in marks:
        out["pre-move"] = ms(fs, marks["move_send"])
        out["  fsync"] = fsync * 1000
    if "move_ack" in marks:
        out["move"] = ms(marks["move_send"], marks["move_ack"])
    windows = [(setns[i], setns[i + 1]) for i in range(0, len(setns) - 1, 2)]
    ma, ipa, ipe = marks.get("move_ack"), marks.get("ipam_start"), marks.get("ipam_end")
    if ma and ipa:
        out["rdma-pod"] = sum(ms(a, b) for a, b in windows if a > ma and b < ipa)
    if ipa and ipe:
        out["ipam"] = ms(ipa, ipe)
    if ipe and ma and ipa > ma:
        after = [(a, b) for a, b in windows if a > ipe]
        if after:
            out["addr"] = ms(ipe, after[0][0])
            out["gid-wait"] = ms(*after[0])
            out["  sleeps"] = sum(d for t, d in sleeps if after[0][0] <= t <= after[0][1]) * 1000
            out["  polls"] = 1 + sum(1 for t, _ in sleeps if after[0][0] <= t <= after[0][1])
            out["finish"] = ms(after[0][1], t_exit)
    out["total"] = ms(t_exec, t_exit)
    return out


def main():
    rows = [(p, steps(p)) for p in sys.argv[1:]]
    keys = []
    for _, r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    print("  " + " ".join(f"{k.strip():>9}" for k in keys) + "   (ms; polls = count)")
    for p, r in rows:
        print("  " + " ".join(f"{r.get(k, float('nan')):9.2f}" for k in keys) + f"   {p.rsplit('/', 1)[-1]}")
    meds = {k: statistics.median([r[k] for _, r in rows if k in r]) for k in keys}
    print("  " + " ".join(f"{meds[k]:9.2f}" for k in keys) + "   median")
    tot = meds.get("total") or 1
    print("  " + " ".join(f"{100 * meds[k] / tot:8.0f}%" if not k.startswith("  ") and k != "total"
                          else f"{'':>9}" for k in keys) + "   share of total (median)")


if __name__ == "__main__":
    main()
