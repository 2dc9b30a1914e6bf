"""HTTP benchmark: a hello-world server on each loop (pinned to CPU 0)
under wrk -t1 -c64 (pinned to CPU 1), loops interleaved, medians of rounds;
the server's system calls per request are counted with perf stat.  Two
apps: aiohttp, and a raw asyncio.Protocol with the httptools parser.
Needs wrk (Debian package).  Results to bench/results/http-<date>.json/.md.

    python3 bench/run_http.py [--rounds 3] [--seconds 5] [--apps aiohttp,raw]
    python3 bench/run_http.py --refuse-io-uring    # servers under a seccomp filter
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import run_echo
from run_echo import HERE, SERVER_ENV, cpu_seconds, paired_ratio, save_results, wait_idle

LOOPS = ["uringloop", "uvloop", "rloop", "asyncio"]


APPS = ["aiohttp", "raw"]


def one_cell(app, loop, seconds, conns):
    server = subprocess.Popen(
        ["taskset", "-c", "0", *run_echo.SERVER_PREFIX, sys.executable,
         os.path.join(HERE, "http_server.py"),
         "--loop", loop, "--app", app], stdout=subprocess.PIPE, text=True, env=SERVER_ENV)
    try:
        port = int(server.stdout.readline().split()[1])
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c8", "-d1s",
                        f"http://127.0.0.1:{port}/"], capture_output=True)  # warm-up
        counting = count_syscalls(server.pid)
        cpu0 = cpu_seconds(server.pid)
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}",
                              f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
                             capture_output=True, text=True, timeout=seconds + 30).stdout
        cpu1 = cpu_seconds(server.pid)
        syscalls = stop_counting(counting)
    finally:
        server.terminate()
        server.wait(timeout=10)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    cell = {"req_s": rps, "cpu_us_per_req": (cpu1[0] - cpu0[0]) / max(total, 1) * 1e6,
            "user_us_per_req": (cpu1[1] - cpu0[1]) / max(total, 1) * 1e6,
            "non_2xx": int(errors.group(1)) if errors else 0}
    if syscalls is not None:
        cell["syscalls_per_req"] = syscalls / max(total, 1)
    return cell


def count_syscalls(pid):
    """perf stat counting the server's system calls (all of them, for every
    loop alike), or None without perf."""
    if shutil.which("perf") is None:
        return None
    return subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter",
                             "-p", str(pid)], stderr=subprocess.PIPE, text=True)


def stop_counting(perf):
    if perf is None:
        return None
    perf.send_signal(2)                 # SIGINT: perf prints its counts
    err = perf.communicate(timeout=10)[1]
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and "raw_syscalls:sys_enter" in fields[2] and fields[0].isdigit():
            return int(fields[0])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--refuse-io-uring", action="store_true",
                        help="run every server under a seccomp filter refusing io_uring")
    parser.add_argument("--render", metavar="JSON", help="print the table of a saved run")
    args = parser.parse_args()
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        print(render(saved["runs"], saved["median"]))
        return
    if args.refuse_io_uring:
        run_echo.refuse_io_uring()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk")
    runs = {}
    for rnd in range(args.rounds):
        for app in args.apps.split(","):
            for loop in args.loops.split(","):
                wait_idle()
                cell = one_cell(app, loop, args.seconds, 64)
                runs.setdefault(f"{app}/{loop}", []).append(cell)
                print(f"{app:7s} {loop:9s} {cell['req_s']:9.0f} req/s "
                      f"{cell['cpu_us_per_req']:6.1f} us cpu/req "
                      f"{cell.get('syscalls_per_req', float('nan')):5.2f} syscalls/req",
                      flush=True)
    median = {key: {m: statistics.median(c[m] for c in cells) for m in cells[0]}
              for key, cells in runs.items()}
    save_results("http", args, runs, median, render(runs, median))


def render(runs, median):
    """The markdown table of one run (also: --render FILE.json)."""
    lines = ["| app | loop | req/s | server CPU us/req | syscalls/req "
             "| uringloop req/s ratio | uringloop CPU/req ratio |",
             "|---|---|---|---|---|---|---|"]
    for key, m in median.items():
        app, loop = key.split("/")
        u = runs.get(f"{app}/uringloop")
        ratio = cpu_ratio = ""
        if u and loop != "uringloop":
            ratio = f"{paired_ratio(u, runs[key], 'req_s'):.2f}x"
            cpu_ratio = f"{paired_ratio(u, runs[key], 'cpu_us_per_req'):.2f}x"
        lines.append(f"| {app} | {loop} | {m['req_s']:.0f} | {m['cpu_us_per_req']:.1f} | "
                     f"{m.get('syscalls_per_req', float('nan')):.2f} | {ratio} | {cpu_ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
