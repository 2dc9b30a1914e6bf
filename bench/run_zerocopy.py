"""Zero-copy benchmark: uringloop with ZC never / auto / always / always from
registered buffers, and uvloop and rloop with the same ordinary sends,
ratios against uringloop's ZC never in the same run.

- UDP, 4000/16000/60000-byte datagrams from one network namespace over veth
  (MTU 65535) into a sink namespace that drops UDP in its nftables input
  hook: the path where the kernel really sends without copying.  Needs
  root, ip and nft.
- TCP over loopback, 4 KiB to 256 KiB writes: the kernel copies anyway
  (auto mode must notice and cost nothing).
- UDP only: the same sends from C on the loop's ring layer
  (bench/zc_c_sender.c), the kernel's own limit in the same rounds: C_COPY
  a sendto(2) each, C_CHAIN 64 linked SENDs per enter (as ZC_NEVER's chain),
  C_ZC 64 SEND_ZCs per enter (ZC_ALWAYS), C_ZCREG from registered buffers
  (REGISTERED), C_MSGZC send(2) with MSG_ZEROCOPY and the socket's error
  queue (what the epoll driver could do in place of SEND_ZC).
- --refuse-io-uring: the Python senders under a seccomp filter refusing
  io_uring (uringloop on its epoll driver, where every zero-copy send is a
  copy); the C ring modes are left out then.

    python3 bench/run_zerocopy.py [--rounds 3] [--seconds 2] [--refuse-io-uring]
Results to bench/results/zerocopy-<date>.json and .md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import run_echo
from run_echo import HERE, RESULTS, SERVER_ENV, save_results, wait_idle

sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "helpers"))
from netns import SINK_ADDR, drop_namespaces, make_udp_sink  # noqa: E402  (shared with the tests)

RING_DIR = os.path.join(HERE, os.pardir, "src", "uringloop", "ring")

MODES = ["ZC_NEVER", "ZC_AUTO", "ZC_ALWAYS", "REGISTERED", "uvloop", "rloop",
         "C_COPY", "C_CHAIN", "C_ZC", "C_ZCREG", "C_MSGZC"]
RING_C_MODES = {"C_CHAIN", "C_ZC", "C_ZCREG"}
NS_SRC, NS_SINK = "ulbench_src", "ulbench_sink"


def build_c_sender():
    exe = os.path.join(RESULTS, "zc_c_sender")
    srcs = [os.path.join(HERE, "zc_c_sender.c"), os.path.join(RING_DIR, "ring.c"),
            os.path.join(RING_DIR, "readiness.c"), os.path.join(RING_DIR, "threads.c")]
    newest = max(os.path.getmtime(p) for p in srcs + [os.path.join(RING_DIR, "ring.h"),
                                                      os.path.join(RING_DIR, "readiness.h"),
                                                      os.path.join(RING_DIR, "threads.h")])
    if not os.path.exists(exe) or os.path.getmtime(exe) < newest:
        os.makedirs(RESULTS, exist_ok=True)
        subprocess.run(["cc", "-O2", "-I", RING_DIR, "-o", exe, *srcs, "-lpthread"],
                       check=True)
    return exe


def cell(kind, size, mode, seconds):
    if mode.startswith("C_"):
        cmd = ["taskset", "-c", "0", build_c_sender(), mode[2:].lower(), str(size),
               str(seconds), SINK_ADDR, "9999"]
    else:
        cmd = run_echo.SERVER_PREFIX + [
            "taskset", "-c", "0", sys.executable, os.path.join(HERE, "zc_sender.py"),
            kind, str(size), mode, str(seconds)]
    if kind == "udp":
        cmd = ["ip", "netns", "exec", NS_SRC] + cmd
    env = dict(SERVER_ENV, URINGLOOP_DRIVER="epoll") if run_echo.SERVER_PREFIX else SERVER_ENV
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, env=env)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def enters_cell(rs):
    """Median io_uring_enter calls per send of a mode's rounds ('-' where the
    loop does not count them)."""
    got = [r["enters_per_datagram"] for r in rs if r.get("enters_per_datagram") is not None]
    return f"{statistics.median(got):.3f}" if got else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--kinds", default="udp,tcp", help="udp, tcp or both")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--udp-sizes", default="4000,16000,60000")
    parser.add_argument("--tcp-sizes", default="4096,16384,65536,262144")
    parser.add_argument("--refuse-io-uring", action="store_true",
                        help="the Python senders under a seccomp filter refusing io_uring")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if args.refuse_io_uring:
        run_echo.refuse_io_uring()
        modes = [m for m in modes if m not in RING_C_MODES]
    plan = [("udp", int(s)) for s in args.udp_sizes.split(",")] + \
           [("tcp", int(s)) for s in args.tcp_sizes.split(",")]
    plan = [p for p in plan if p[0] in args.kinds.split(",")]
    try:
        make_udp_sink(NS_SRC, NS_SINK, "ulb")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"no UDP sink ({exc}); TCP only")
        plan = [p for p in plan if p[0] == "tcp"]
    runs = {}
    try:
        for kind, size in plan:
            for _ in range(args.rounds):
                for mode in modes:
                    if kind == "tcp" and mode.startswith("C_"):
                        continue          # the C sender is UDP only
                    wait_idle()
                    r = cell(kind, size, mode, args.seconds)
                    runs.setdefault(f"{kind}/{size}", {}).setdefault(mode, []).append(r)
                    z = r["zerocopy"]
                    print(f"{kind} {size:6d} {mode:9s} {r['bytes_s'] / 1e6:9.1f} MB/s "
                          f"zc={z['zerocopy_sends']} copied={z['copied_reports']} "
                          f"clean={z['zerocopy_reports']}", flush=True)
    finally:
        drop_namespaces(NS_SRC, NS_SINK)
    lines = ["| cell | mode | MB/s | ratio to never | enters per send | ZC sends | copied reports |",
             "|---|---|---|---|---|---|---|"]
    median = {}
    for key, per_mode in runs.items():
        median[key] = {m: statistics.median(r["bytes_s"] for r in rs) for m, rs in per_mode.items()}
        for mode, rs in per_mode.items():
            z = rs[-1]["zerocopy"]
            lines.append(f"| {key} | {mode} | {median[key][mode] / 1e6:.1f} | "
                         f"{median[key][mode] / median[key]['ZC_NEVER']:.2f}x | "
                         f"{enters_cell(rs)} | "
                         f"{z['zerocopy_sends']} | {z['copied_reports']} |")
    save_results("zerocopy", args, runs, median, "\n".join(lines))


if __name__ == "__main__":
    main()
