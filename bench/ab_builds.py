"""A/B two builds of uringloop on the same cells, interleaved, to show what a
change costs: req/s as a paired ratio, server user and total CPU per
request apart (the loop's own cost shows in user time).

    git worktree add /tmp/before <commit> && (cd /tmp/before && python3 setup.py build_ext --inplace)
    python3 bench/ab_builds.py --before /tmp/before --after . --rounds 7
    python3 bench/ab_builds.py --before /tmp/before --after . --http      # wrk, aiohttp and raw
    python3 bench/ab_builds.py --before /tmp/before --after . --http --close  # a connection per request
    python3 bench/ab_builds.py --before /tmp/before --after . --tls       # TLS echo, 1 and 100 KiB
    python3 bench/ab_builds.py --before /tmp/before --after . --connect --split perf  # per connection
    python3 bench/ab_builds.py --before /tmp/before --after . --split perf  # user CPU from perf samples

With --split perf the servers are watched by perf, which slows a server
more the more often it sleeps (bench/perf_overhead.py): a change that
alters how often the loop sleeps is then measured with a bias; compare
totals without it.

Each build is used through PYTHONPATH (an in-place build of each tree);
servers are pinned to CPU 0 and the load generator to CPU 1, with the
malloc settings of bench/run_echo.py.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_echo  # noqa: E402  (build_client, wait_idle, SERVER_ENV)
import run_tls  # noqa: E402  (make_certificate, one_cell)
import run_connect  # noqa: E402  (one_round)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    """(user, user + system) seconds of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_env(tree):
    """The servers' environment with this tree's build first on the path
    (src/ since the src layout; a tree from before it has the package at
    its top)."""
    src = os.path.join(os.path.abspath(tree), "src")
    return dict(run_echo.SERVER_ENV,
                PYTHONPATH=src if os.path.isdir(os.path.join(src, "uringloop")) else
                os.path.abspath(tree))


def server(tree, argv):
    env = tree_env(tree)
    proc = subprocess.Popen(["taskset", "-c", "0", sys.executable] + argv,
                            stdout=subprocess.PIPE, text=True, env=env, cwd="/tmp")
    return proc, int(proc.stdout.readline().split()[1])


def echo_cell(client, tree, style, size, seconds, conns, split="ticks"):
    """run_echo.py's cell on one tree's build (its user/system split too)."""
    env = tree_env(tree)
    cell = run_echo.one_cell(client, "uringloop", style, size, seconds, conns, env, split)
    return cell["req_s"], cell["user_us_per_req"], cell["cpu_us_per_req"]


def http_cell(tree, app, seconds, conns, close=False):
    proc, port = server(tree, [os.path.join(HERE, "http_server.py"),
                               "--loop", "uringloop", "--app", app])
    url = f"http://127.0.0.1:{port}/"
    try:
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c8", "-d1s", url],
                       capture_output=True)                      # warm-up
        u0, t0 = cpu(proc.pid)
        # (--close: the server closes each connection after its response,
        # with its receive armed: what closing a transport costs)
        headers = ["-H", "Connection: close"] if close else []
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}",
                              f"-d{seconds}s", *headers, url],
                             capture_output=True, text=True).stdout
        u1, t1 = cpu(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    n = max(int(re.search(r"(\d+) requests in", out).group(1)), 1)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rps, (u1 - u0) / n * 1e6, (t1 - t0) / n * 1e6


def tls_cell(tree, size, seconds, tls, split="ticks"):
    env = tree_env(tree)
    cell = run_tls.one_cell("uringloop", size, seconds, 10, tls, env, split)
    return cell["req_s"], cell["user_us_per_req"], cell["cpu_us_per_req"]


def connect_cell(tree, split="ticks"):
    """bench/run_connect.py's round on one tree's build: connections per
    second, and user and total CPU per connection."""
    cell = run_connect.one_round("uringloop", 500, 10, tree_env(tree), split)
    return cell["conn_s"], cell["user_us"], cell["user_us"] + cell["sys_us"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="tree with an in-place build")
    parser.add_argument("--after", required=True, help="tree with an in-place build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--http", action="store_true", help="wrk cells instead of echo")
    parser.add_argument("--tls", action="store_true", help="TLS echo cells (bench/run_tls.py)")
    parser.add_argument("--connect", action="store_true",
                        help="per connection: accept, one echo, close (bench/run_connect.py)")
    parser.add_argument("--split", choices=["ticks", "perf"], default="ticks",
                        help="echo and TLS cells: user/system split as run_echo.py --split")
    parser.add_argument("--close", action="store_true",
                        help="with --http: 'Connection: close', one connection per request")
    parser.add_argument("--cells", help="echo cells, style/size[/connections], "
                                        "e.g. protocol/1024,streams/1024,protocol/10240/1000; "
                                        "with --tls, sizes: 1024,102400")
    args = parser.parse_args()
    if args.http:
        cells = [("aiohttp", None), ("raw", None)]
        run = lambda tree, cell: http_cell(tree, cell[0], int(args.seconds), 64, args.close)
    elif args.connect:
        cells = [("connect", None)]
        run = lambda tree, cell: connect_cell(tree, args.split)
    elif args.tls:
        tls = ",".join(run_tls.make_certificate(tempfile.mkdtemp()))
        cells = [("tls", int(size)) for size in (args.cells or "1024,102400").split(",")]
        run = lambda tree, cell: tls_cell(tree, cell[1], args.seconds, tls, args.split)
    else:
        client = run_echo.build_client()
        cells = [("protocol", 1024, 10), ("protocol", 10240, 10), ("streams", 1024, 10),
                 ("protocol", 102400, 10)]
        if args.cells:
            cells = [(c.split("/") + ["10"])[:3] for c in args.cells.split(",")]
            cells = [(style, int(size), int(conns)) for style, size, conns in cells]
        run = lambda tree, cell: echo_cell(client, tree, cell[0], cell[1], args.seconds,
                                           cell[2], args.split)
    results = {}
    trees = [("before", args.before), ("after", args.after)]
    for rnd in range(args.rounds):
        for cell in cells:
            # which build goes first alternates, so that neither always
            # runs on a machine just warmed (or disturbed) by the other
            for name, tree in (trees if rnd % 2 == 0 else trees[::-1]):
                run_echo.wait_idle()
                results.setdefault((cell, name), []).append(run(tree, cell))
    unit = "connection" if args.connect else "req"
    print(f"| cell | {'conn' if args.connect else 'req'}/s after/before | user us/{unit} before -> after "
          f"| total us/{unit} before -> after |")
    print("|---|---|---|---|")
    for cell in cells:
        b, a = results[(cell, "before")], results[(cell, "after")]
        ratio = statistics.median(x[0] / y[0] for x, y in zip(a, b))
        label = "/".join(str(c) for c in cell if c is not None)
        print(f"| {label} | {ratio:.3f}x | {statistics.median(x[1] for x in b):.2f} -> "
              f"{statistics.median(x[1] for x in a):.2f} | {statistics.median(x[2] for x in b):.2f}"
              f" -> {statistics.median(x[2] for x in a):.2f} |")


if __name__ == "__main__":
    main()
