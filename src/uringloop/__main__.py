"""python -m uringloop: can io_uring be used here, and what will uringloop do?

    python -m uringloop            # a report to read
    python -m uringloop --json     # the same facts, for scripts

The answer comes from making a real Loop in this process, as uringloop.run()
does: on the kernel's io_uring, or on the epoll driver where io_uring is
refused.  The rest of the report says why: the kernel, the sysctl
kernel.io_uring_disabled, a seccomp filter, RLIMIT_MEMLOCK, the
capabilities that zero-copy receive and locked memory depend on, and what
the kernel's io_uring accepted.  Exit status 0 when a Loop can be made
(on either driver), 1 when not (a bad setting, or URINGLOOP_DRIVER=ring or
URINGLOOP_STRICT=1 where io_uring is refused).
"""
import argparse
import errno
import json
import os
import resource
import sys

import uringloop

# Capability bits (linux/capability.h).
CAP_NET_ADMIN = 12
CAP_IPC_LOCK = 14
CAP_SYS_ADMIN = 21
# What a loop's ring pins without CAP_IPC_LOCK (core.pyx: SQ_ENTRIES and
# CQ_ENTRIES); under a smaller limit the loop makes a smaller ring.
FULL_RING_LOCKED_BYTES = 400 * 1024
MIN_RING_LOCKED_BYTES = 12 * 1024


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def status_fields():
    """/proc/self/status as a dict of strings."""
    fields = {}
    for line in (read_text("/proc/self/status") or "").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def limit(value):
    return None if value == resource.RLIM_INFINITY else value


def gather():
    """Every fact the report shows, as plain data (the --json output)."""
    status = status_fields()
    cap_eff = int(status.get("CapEff", "0"), 16)
    disabled = read_text("/proc/sys/kernel/io_uring_disabled")
    group = read_text("/proc/sys/kernel/io_uring_group")
    seccomp_mode = int(status.get("Seccomp", "0"))
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    facts = {
        "uringloop": uringloop.__version__,
        "python": sys.version.split()[0],
        "kernel": os.uname().release,
        "io_uring_disabled": None if disabled is None else int(disabled),
        "io_uring_group": None if group is None else int(group),
        "seccomp": {0: "none", 1: "strict", 2: "filter"}.get(seccomp_mode, str(seccomp_mode)),
        "seccomp_filters": int(status.get("Seccomp_filters", "0")),
        "memlock_limit": limit(soft),
        "memlock_hard_limit": limit(hard),
        "capabilities": {
            "CAP_IPC_LOCK": bool(cap_eff >> CAP_IPC_LOCK & 1),
            "CAP_NET_ADMIN": bool(cap_eff >> CAP_NET_ADMIN & 1),
            "CAP_SYS_ADMIN": bool(cap_eff >> CAP_SYS_ADMIN & 1),
        },
    }
    facts["settings_error"] = None
    facts["driver"] = facts["driver_reason"] = None
    facts["error"] = facts["errno"] = None
    facts["usable"] = False
    try:
        loop = uringloop.loop_factory()
    except uringloop.RingUnavailableError as exc:
        facts["error"] = str(exc)
        facts["errno"] = exc.errno
    except ValueError as exc:
        # a URINGLOOP_* variable that cannot be read: run() raises this too
        facts["error"] = facts["settings_error"] = str(exc)
    else:
        stats = loop.stats()
        refusal = uringloop._ring_refusal(loop)
        loop.close()
        facts["driver"], facts["driver_reason"] = stats["driver"], stats["driver_reason"]
        facts["usable"] = refusal is None
        if refusal is not None:
            facts["error"], facts["errno"] = str(refusal), refusal.errno
    try:
        probe = uringloop.features()
    except ValueError:
        probe = {"setup_flags": [], "opcodes": {}, "last_opcode": None, "ring_entries": None}
    facts["setup_flags"] = probe["setup_flags"]
    facts["opcodes"] = probe["opcodes"]
    facts["last_opcode"] = probe["last_opcode"]
    facts["ring_entries"] = probe["ring_entries"]
    facts["zerocopy_send"] = bool(probe["opcodes"].get("SEND_ZC"))
    facts["zerocopy_receive"] = bool(probe["opcodes"].get("RECV_ZC"))
    facts["shortcuts"] = uringloop.shortcuts()
    facts["causes"] = causes(facts)
    if facts["driver"] == "epoll" and facts["usable"]:
        # forced: whether the kernel would allow the ring is the probe's word
        facts["usable"] = probe.get("error") is None
    if facts["driver"] is None:
        facts["verdict"] = "error"
    else:
        facts["verdict"] = {"ring": "io_uring", "epoll": "epoll driver"}.get(
            facts["driver"], "asyncio's loop")
    return facts


def causes(facts):
    """The likely reasons a Loop cannot be made, or features are missing,
    each with what to do about it."""
    found = []
    if facts["settings_error"]:
        return [f"{facts['settings_error']}: fix or unset it (run(), Loop() and "
                "new_event_loop() raise ValueError while it is set)"]
    if not facts["usable"] and facts["errno"] is not None:
        err = facts["errno"]
        disabled = facts["io_uring_disabled"]
        caps = facts["capabilities"]
        if err == errno.EPERM:
            if disabled == 2:
                found.append("kernel.io_uring_disabled is 2: io_uring is off for every "
                             "process; set it to 0 (sysctl -w kernel.io_uring_disabled=0)")
            elif disabled == 1 and not caps["CAP_SYS_ADMIN"] \
                    and facts["io_uring_group"] not in os.getgroups():
                found.append("kernel.io_uring_disabled is 1 and this process is neither in "
                             f"kernel.io_uring_group ({facts['io_uring_group']}) nor has "
                             "CAP_SYS_ADMIN; add it to that group or set the sysctl to 0")
            if facts["seccomp"] == "filter":
                found.append(f"a seccomp filter is active ({facts['seccomp_filters']} "
                             "filter(s); Docker's default profile refuses io_uring): allow "
                             "io_uring_setup, io_uring_enter and io_uring_register, e.g. "
                             "docker run --security-opt seccomp=<profile>")
            if not found:
                found.append("io_uring_setup was refused (EPERM) by a security module "
                             "or policy this report cannot see")
        elif err in (errno.ENOSYS, errno.EINVAL):
            found.append(f"kernel {facts['kernel']} is too old or built without "
                         "io_uring: uringloop needs Linux 6.1 or newer")
        elif err == errno.ENOMEM:
            found.append(f"RLIMIT_MEMLOCK ({fmt_bytes(facts['memlock_limit'])}) is too "
                         f"small even for the smallest ring ({fmt_bytes(MIN_RING_LOCKED_BYTES)}); "
                         "raise it (ulimit -l, docker --ulimit memlock=...) or grant "
                         "CAP_IPC_LOCK")
        else:
            found.append(f"io_uring_setup failed: {facts['error']}")
        return found
    caps = facts["capabilities"]
    memlock = facts["memlock_limit"]
    if not caps["CAP_IPC_LOCK"] and memlock is not None and memlock < FULL_RING_LOCKED_BYTES:
        found.append(f"RLIMIT_MEMLOCK is {fmt_bytes(memlock)}: loops get a smaller ring "
                     f"than the full {fmt_bytes(FULL_RING_LOCKED_BYTES)} one (more "
                     "io_uring_enter calls when busy); registered buffers for "
                     "zero-copy send will stay unregistered")
    if not facts["zerocopy_send"]:
        found.append("no IORING_OP_SEND_ZC (Linux 6.0): zero-copy send falls back to copying")
    if not facts["zerocopy_receive"]:
        found.append("no IORING_OP_RECV_ZC (Linux 6.15): zero-copy receive is unavailable")
    elif not caps["CAP_NET_ADMIN"]:
        found.append("no CAP_NET_ADMIN: registering a NIC queue for zero-copy receive "
                     "will be refused (its servers then receive ordinarily)")
    return found


def fmt_bytes(n):
    if n is None:
        return "unlimited"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024


def yes(flag):
    return "yes" if flag else "no"


def report(facts):
    lines = [f"uringloop {facts['uringloop']} on Python {facts['python']}, "
             f"Linux {facts['kernel']}", ""]
    if facts["usable"]:
        lines.append("io_uring: usable")
    elif facts["error"] and not facts["settings_error"]:
        lines.append(f"io_uring: NOT usable -- {facts['error']}")
    if facts["driver"] == "ring":
        lines.append("driver: ring -- uringloop.run() runs on io_uring")
    elif facts["driver"] == "epoll":
        lines.append(f"driver: epoll ({facts['driver_reason']}) -- uringloop.run() runs "
                     "the same operations on epoll; URINGLOOP_DRIVER=ring or "
                     "URINGLOOP_STRICT=1 makes a refusal an error")
    elif facts["driver"] == "asyncio":
        lines.append("driver: asyncio -- this install has no extension; uringloop.run() "
                     "gives asyncio's own loop")
    elif facts["settings_error"]:
        lines.append(f"driver: none -- {facts['settings_error']}: uringloop.run() raises "
                     "ValueError until the setting is fixed")
    else:
        lines.append("driver: none -- URINGLOOP_DRIVER=ring or URINGLOOP_STRICT=1 is set: "
                     "uringloop.run() raises RingUnavailableError")
    disabled = facts["io_uring_disabled"]
    lines += [
        "",
        "kernel.io_uring_disabled  "
        + ("(not in this kernel)" if disabled is None else
           f"{disabled} ({['allowed', 'only for io_uring_group / CAP_SYS_ADMIN', 'off'][disabled] if 0 <= disabled <= 2 else '?'})"),
        f"seccomp                   {facts['seccomp']}"
        + (f" ({facts['seccomp_filters']} filter(s))" if facts["seccomp"] == "filter" else ""),
        f"RLIMIT_MEMLOCK            {fmt_bytes(facts['memlock_limit'])} "
        f"(hard {fmt_bytes(facts['memlock_hard_limit'])}; a full ring pins "
        f"~{fmt_bytes(FULL_RING_LOCKED_BYTES)})",
        "capabilities              "
        + ", ".join(f"{name} {yes(v)}" for name, v in facts["capabilities"].items()),
    ]
    if facts["usable"] or facts["opcodes"]:
        ops = facts["opcodes"]
        lines += [
            f"ring                      {facts['ring_entries'][0]} SQ / "
            f"{facts['ring_entries'][1]} CQ entries" if facts["ring_entries"] else
            "ring                      -",
            f"setup flags accepted      {' '.join(facts['setup_flags']) or '-'}",
            f"opcodes                   {sum(ops.values())} of the {len(ops)} uringloop "
            f"uses (highest the kernel knows: {facts['last_opcode']})",
        ]
        missing = [name for name, ok in ops.items() if not ok]
        if missing:
            lines.append(f"  missing: {' '.join(missing)}")
        lines += [
            f"zero-copy send (SEND_ZC)  {yes(facts['zerocopy_send'])}",
            f"zero-copy receive (zcrx)  {yes(facts['zerocopy_receive'])}"
            + ("" if not facts["zerocopy_receive"] else
               f" (kernel side; CAP_NET_ADMIN {yes(facts['capabilities']['CAP_NET_ADMIN'])}, "
               "and a NIC queue with header split and flow steering)"),
        ]
    on = [name for name, why in facts["shortcuts"].items() if why == "on"]
    off = {why for why in facts["shortcuts"].values() if why != "on"}
    lines.append(f"CPython shortcuts         {' '.join(on) or 'none'}"
                 + (f" ({'; '.join(sorted(off))})" if off else ""))
    if facts["causes"]:
        lines += ["", "why / what to do:"]
        lines += [f"  - {cause}" for cause in facts["causes"]]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m uringloop",
        description="Report whether uringloop can use io_uring here, and why not.")
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    args = parser.parse_args(argv)
    facts = gather()
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        print(report(facts))
    return 0 if facts["driver"] else 1


if __name__ == "__main__":
    sys.exit(main())
