"""Echo benchmark in the vmbench manner: each loop serves the same echo
server (protocol, streams, sock_* styles) pinned to CPU 0 while a C client
pinned to CPU 1 drives 10 (--conns) connections with 1, 10 and 100 KiB
messages and checks every byte.  Loops run interleaved, several rounds; the
medians and the ratios to uringloop (medians of the per-round ratios) go to
bench/results/echo-<date>.json and .md.  Server CPU per request is given as
total (user + system) and user alone: on loopback most of it is the
kernel's TCP work, and the loop's own cost shows in user time.

    python3 bench/run_echo.py                    # full run (~6 min)
    python3 bench/run_echo.py --quick            # one round, 2 s cells
    python3 bench/run_echo.py --styles protocol --sizes 1024,102400 --conns 10,1000
    python3 bench/run_echo.py --malloc shipped   # each loop's own malloc settings
    python3 bench/run_echo.py --split perf       # user/system split from perf samples
    python3 bench/run_echo.py --refuse-io-uring  # every server under a seccomp filter
                                                 # refusing io_uring: uringloop's epoll driver

The user/system split of /proc's process times is sampled: the kernel
(CONFIG_TICK_CPU_ACCOUNTING) charges each 250 Hz tick to one or the other,
so a 3 s cell of a server at 12% user time rests on some 90 user ticks,
about 10% error.  --split perf takes the user share from `perf record -F
4000 -e cpu-clock` samples of the server over the client's run (16 times
the samples; user and kernel told apart by address) and applies it to the
total CPU of the client's timed window, which /proc gives exactly.
But perf attached slows the server it watches, and unequally: on this VM
at 1 KiB x 10 it raised uringloop's CPU per request 1.43x, rloop's 1.22x,
uvloop's 1.11x (bench/perf_overhead.py; a per-task sampling event is
switched out and in with the task, and uringloop sleeps and wakes some
eight times as often per request there).  Compare loops' totals from
runs without it (the default); take --split perf's user share as a
profile, not as a comparison.
"""
import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
LOOPS = ["uringloop", "uvloop", "rloop", "asyncio"]
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Every server runs with the glibc malloc settings uringloop applies to
# itself (core.pyx, tune_malloc): with glibc's defaults a loop that
# allocates a large read buffer per receive maps and unmaps it each time
# (rloop 0.5: 37k req/s on protocol/1024, 108k with these), and the
# comparison would measure malloc, not the loop.
MALLOC_ENV = {"MALLOC_TRIM_THRESHOLD_": str(16 << 20), "MALLOC_MMAP_THRESHOLD_": str(4 << 20)}
SERVER_ENV = dict(os.environ, **MALLOC_ENV)
# --malloc shipped: each loop as installed (uringloop tunes glibc's malloc
# itself at import, the others run with glibc's defaults)
SHIPPED_ENV = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}


def paired_ratio(ours, theirs, metric):
    """Median over rounds of ours/theirs for one metric.  The loops run
    interleaved, so the cells of one round saw the same machine; pairing
    them cancels the drift between rounds (these machines swing by 20%
    and more), which a ratio of the two medians does not."""
    return statistics.median(a[metric] / b[metric] for a, b in zip(ours, theirs))


def save_results(kind, args, runs, median, table):
    """bench/results/<kind>-<date>.json (arguments, malloc settings, every
    round, medians) and .md (the table), and print the table."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{kind}-{stamp}.json"), "w") as f:
        json.dump({"args": vars(args), "malloc_env": MALLOC_ENV, "runs": runs,
                   "median": median}, f, indent=1)
    with open(os.path.join(RESULTS, f"{kind}-{stamp}.md"), "w") as f:
        f.write(table + "\n")
    print(table)


# --refuse-io-uring: each server runs under tests/helpers/deny_io_uring
# (a seccomp filter refusing io_uring_setup, as Docker's default profile
# does), every loop alike: uringloop then runs on its epoll driver.
SERVER_PREFIX = []


def refuse_io_uring():
    exe = os.path.join(RESULTS, "deny_io_uring")
    src = os.path.join(HERE, "..", "tests", "helpers", "deny_io_uring.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(RESULTS, exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    SERVER_PREFIX[:] = [exe]


def build_client():
    exe = os.path.join(RESULTS, "echo_client")
    src = os.path.join(HERE, "echo_client.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(RESULTS, exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    return exe


def cpu_seconds(pid):
    """(utime + stime, utime) of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[11]) / CLK_TCK


def wait_idle(limit=0.5, timeout=10):
    """Wait until the machine is quiet: the load of the last second below
    `limit` CPUs, from /proc/stat."""
    def busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v) - v[3] - v[4], sum(v)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        b0, t0 = busy()
        time.sleep(0.3)
        b1, t1 = busy()
        ncpu = os.cpu_count()
        if t1 > t0 and (b1 - b0) / (t1 - t0) * ncpu < limit:
            return
    # go on anyway; the run records that it was not idle


PERF_HZ = 4000


def start_perf(pid, path, hz=PERF_HZ):
    """perf record of the server's CPU samples, both modes, until
    stop_perf(): from the start of the client's timed window (its
    "window" line) to its exit."""
    return subprocess.Popen(["perf", "record", "-q", "-F", str(hz), "-e", "cpu-clock",
                             "-p", str(pid), "-o", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_perf(perf):
    perf.send_signal(signal.SIGINT)
    perf.wait(timeout=60)


def perf_user_share(path):
    """The share of a perf record's samples taken in user space (kernel
    addresses start with ffff on x86-64)."""
    out = subprocess.run(["perf", "script", "-F", "ip", "-i", path],
                         capture_output=True, text=True).stdout.split()
    kernel = sum(1 for ip in out if ip.startswith("ffff"))
    return (len(out) - kernel) / max(len(out), 1), len(out)


def one_cell(client, loop, style, size, seconds, conns, env=SERVER_ENV, split="ticks",
             perf_hz=PERF_HZ):
    return measure_cell(["--loop", loop, "--style", style], [client], size, seconds, conns,
                        env, split, perf_hz)


def measure_cell(server_args, client_cmd, size, seconds, conns, env=SERVER_ENV, split="ticks",
                 perf_hz=PERF_HZ):
    """echo_server.py with server_args on CPU 0, driven by client_cmd (this
    echo_client, or bench/tls_client.py: the same arguments, output and
    "window" line) on CPU 1; the cell's rates and CPU per request."""
    server = subprocess.Popen(
        ["taskset", "-c", "0", *SERVER_PREFIX, sys.executable,
         os.path.join(HERE, "echo_server.py"), *server_args],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = server.stdout.readline()
        port = int(line.split()[1])
        # the client reads the server's CPU time at the start and the end of
        # its timed window: accepting the connections is not request work
        # (bench/run_connect.py measures it)
        perf_path = f"/tmp/run_echo-{server.pid}.perf"
        perf = None
        run = subprocess.Popen(
            ["taskset", "-c", "1", *client_cmd, "127.0.0.1", str(port), str(conns),
             str(size), str(seconds), str(server.pid)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if split == "perf" and run.stderr.readline() == "window\n":
            perf = start_perf(server.pid, perf_path, perf_hz)   # the timed window begins
        stdout, _ = run.communicate(timeout=seconds + 60)
        if perf is not None:
            stop_perf(perf)
        result = json.loads(stdout)
        server.terminate()
        stats_line = server.stdout.readline()
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
    stats = json.loads(stats_line) if stats_line.strip() else {}
    n = max(result["requests"], 1)
    cell = {
        "req_s": result["requests"] / result["seconds"],
        "mb_s": result["bytes"] / result["seconds"] / 1e6,
        "cpu_us_per_req": (result["server_user_ticks"] + result["server_sys_ticks"])
                          / CLK_TCK / n * 1e6,
        "user_us_per_req": result["server_user_ticks"] / CLK_TCK / n * 1e6,
        "errors": result["errors"],
    }
    if stats:
        cell["enter_per_req"] = stats["enter_calls"] / n
    if perf is not None:
        share, samples = perf_user_share(perf_path)
        os.unlink(perf_path)
        cell["user_us_per_req_ticks"] = cell["user_us_per_req"]
        cell["user_us_per_req"] = cell["cpu_us_per_req"] * share
        cell["perf_samples"] = samples
    return cell


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--styles", default="protocol,streams,sock")
    parser.add_argument("--sizes", default="1024,10240,102400")
    parser.add_argument("--conns", default="10", help="connections per cell, a list")
    parser.add_argument("--malloc", choices=["equal", "shipped"], default="equal",
                        help="equal: every server with uringloop's malloc settings "
                             "(default); shipped: each loop as installed")
    parser.add_argument("--split", choices=["ticks", "perf"], default="ticks",
                        help="user/system split from /proc's ticks (default) or "
                             "from perf samples (see above: perf slows the servers, "
                             "unequally; needs perf)")
    parser.add_argument("--refuse-io-uring", action="store_true",
                        help="run every server under a seccomp filter refusing io_uring")
    parser.add_argument("--render", metavar="JSON", help="print the table of a saved run")
    args = parser.parse_args()
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        print(render(saved["runs"], saved["median"]))
        return
    if args.quick:
        args.rounds, args.seconds = 1, 2.0
    if args.refuse_io_uring:
        refuse_io_uring()
    loops = args.loops.split(",")
    client = build_client()
    runs = {}
    env = SERVER_ENV if args.malloc == "equal" else SHIPPED_ENV
    cells = [(style, size, conns) for style in args.styles.split(",")
             for size in map(int, args.sizes.split(","))
             for conns in map(int, args.conns.split(","))]
    for style, size, conns in cells:
        key = f"{style}/{size}" if conns == 10 else f"{style}/{size}/x{conns}"
        for rnd in range(args.rounds):
            for loop in loops:      # interleaved: A B C D A B C D ...
                wait_idle()
                cell = one_cell(client, loop, style, size, args.seconds, conns, env, args.split)
                runs.setdefault(key, {}).setdefault(loop, []).append(cell)
                print(f"{key:22s} {loop:9s} {cell['req_s']:9.0f} req/s "
                      f"{cell['cpu_us_per_req']:6.2f} / {cell['user_us_per_req']:5.2f} us cpu/user per req"
                      + (f" {cell['enter_per_req']:.3f} enter/req" if 'enter_per_req' in cell else ""),
                      flush=True)
    summary = {}
    for key, per_loop in runs.items():
        summary[key] = {}
        for loop, cells in per_loop.items():
            summary[key][loop] = {m: statistics.median(c[m] for c in cells)
                                  for m in cells[0]}
    save_results("echo", args, runs, summary, render(runs, summary))


def render(runs, summary):
    """The markdown table of one run (also: --render FILE.json).  The
    ratios are uringloop's to each other loop, paired per round: req/s,
    server CPU per request, and its user part alone (the loop's own
    cost)."""
    lines = ["| cell | loop | req/s | MB/s | server CPU us/req total / user | uringloop req/s ratio "
             "| uringloop CPU/req ratio | uringloop user CPU/req ratio | enter/req |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, per_loop in summary.items():
        u = runs[key].get("uringloop")
        for loop, m in per_loop.items():
            ratio = cratio = uratio = ""
            if u and loop != "uringloop":
                ratio = f"{paired_ratio(u, runs[key][loop], 'req_s'):.2f}x"
                cratio = f"{paired_ratio(u, runs[key][loop], 'cpu_us_per_req'):.2f}x"
                if "user_us_per_req" in m and "user_us_per_req" in u[0]:
                    uratio = f"{paired_ratio(u, runs[key][loop], 'user_us_per_req'):.2f}x"
            enter = f"{m['enter_per_req']:.3f}" if "enter_per_req" in m else ""
            user = f" / {m['user_us_per_req']:.2f}" if "user_us_per_req" in m else ""
            lines.append(f"| {key} | {loop} | {m['req_s']:.0f} | {m['mb_s']:.1f} | "
                         f"{m['cpu_us_per_req']:.2f}{user} | {ratio} | {cratio} | {uratio} | {enter} |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
