"""aiohttp serving static files (web.FileResponse) under wrk: server CPU per
MiB sent and MiB/s, each loop pinned to CPU 0, wrk on CPU 1 (issue #37).

uringloop moves the file with SPLICE on its ring (no user-space copy); the
stdlib loop calls os.sendfile(); uvloop has no sendfile, so aiohttp reads
the file in chunks in a thread and writes them.  Files of --sizes MiB (1 and
64 by default), page-cached; loops interleaved, medians of --rounds.

    python3 bench/run_static.py [--rounds 3] [--seconds 5] [--loops uringloop,asyncio,uvloop]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

from run_echo import HERE, SERVER_ENV, cpu_seconds, save_results, wait_idle

LOOPS = ["uringloop", "asyncio", "uvloop"]


def one_cell(loop, directory, name, seconds, conns):
    server = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, os.path.join(HERE, "http_server.py"),
         "--loop", loop, "--static", directory], stdout=subprocess.PIPE, text=True,
        env=SERVER_ENV)
    url = None
    try:
        port = int(server.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}/static/{name}"
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c2", "-d1s", url],
                       capture_output=True)                       # warm-up
        cpu0 = cpu_seconds(server.pid)
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}",
                              f"-d{seconds}s", url],
                             capture_output=True, text=True, timeout=seconds + 60).stdout
        cpu1 = cpu_seconds(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=10)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    size = os.path.getsize(os.path.join(directory, name))
    mib = requests * size / (1 << 20)
    elapsed = float(re.search(r"requests in ([\d.]+)s", out).group(1))
    total, user = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    return {"mib_s": mib / elapsed, "req_s": requests / elapsed,
            "user_us_per_mib": user / max(mib, 1e-9) * 1e6,
            "sys_us_per_mib": (total - user) / max(mib, 1e-9) * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--sizes", default="1,64", help="file sizes in MiB")
    parser.add_argument("--conns", type=int, default=4)
    parser.add_argument("--dir", default="/var/tmp/uringloop-bench/static")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    names = []
    for mib in map(int, args.sizes.split(",")):
        name = f"file-{mib}m"
        path = os.path.join(args.dir, name)
        if not os.path.exists(path) or os.path.getsize(path) != mib << 20:
            with open(path, "wb") as f:
                f.write(os.urandom(mib << 20))
        with open(path, "rb") as f:
            f.read()                                       # page-cached
        names.append((mib, name))
    loops = args.loops.split(",")
    runs = {}
    for r in range(args.rounds):
        for mib, name in names:
            for loop in (loops if r % 2 == 0 else loops[::-1]):
                wait_idle()
                cell = one_cell(loop, args.dir, name, args.seconds, args.conns)
                runs.setdefault(f"{mib}MiB/{loop}", []).append(cell)
                print(f"round {r + 1} {mib:3} MiB {loop:10} {cell['mib_s']:8.0f} MiB/s "
                      f"{cell['user_us_per_mib']:8.0f} user {cell['sys_us_per_mib']:8.0f} "
                      f"sys us/MiB", flush=True)
    median = {key: {m: statistics.median(c[m] for c in cells) for m in cells[0]}
              for key, cells in runs.items()}
    lines = ["| file | loop | MiB/s | server CPU us per MiB, user / system | CPU per MiB "
             "vs asyncio (os.sendfile) |", "|---|---|---|---|---|"]
    for mib, name in names:
        base = runs.get(f"{mib}MiB/asyncio")
        for loop in loops:
            cells = runs[f"{mib}MiB/{loop}"]
            m = median[f"{mib}MiB/{loop}"]
            ratio = "-"
            if base:
                ratio = "%.2fx" % statistics.median(
                    (a["user_us_per_mib"] + a["sys_us_per_mib"])
                    / (b["user_us_per_mib"] + b["sys_us_per_mib"]) for a, b in zip(cells, base))
            lines.append(f"| {mib} MiB | {loop} | {m['mib_s']:.0f} | "
                         f"{m['user_us_per_mib']:.0f} / {m['sys_us_per_mib']:.0f} | {ratio} |")
    save_results("static", args, runs, median, "\n".join(lines))


if __name__ == "__main__":
    main()
