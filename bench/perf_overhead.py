"""What attaching `perf record` does to the CPU it is meant to split.

`--split perf` (bench/run_echo.py, run_connect.py, ab_builds.py) samples
the server with `perf record -F 4000 -e cpu-clock` over the client's timed
window and applies the user share to the window's total CPU from /proc.
On a VM every sample is a timer interrupt, and a per-task sampling event
is taken off the CPU and put back at every context switch, so the server
runs slower while it is watched -- and a loop that goes to sleep more often
(one that catches up with its client sooner) is slowed more.  This runs
each loop's echo cell with and without perf attached, interleaved, and
prints the server's total and user CPU per request (both from /proc's
ticks) in each case.

    python3 bench/perf_overhead.py
    python3 bench/perf_overhead.py --loops uringloop,rloop --size 1024 --conns 10 --hz 4000,200
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_echo  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default="uringloop,rloop")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--conns", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hz", default="4000", help="perf frequencies to try, a list")
    args = parser.parse_args()
    if os.cpu_count() >= 2:
        os.sched_setaffinity(0, {1})
    client = run_echo.build_client()
    settings = [None] + [int(hz) for hz in args.hz.split(",")]
    cells = {}
    for rnd in range(args.rounds):
        for loop in args.loops.split(","):
            for hz in settings:
                run_echo.wait_idle()
                cell = run_echo.one_cell(client, loop, "protocol", args.size, args.seconds,
                                         args.conns, split="ticks" if hz is None else "perf",
                                         perf_hz=hz or run_echo.PERF_HZ)
                # the ticks' user time, whichever way the cell ran
                user = cell.get("user_us_per_req_ticks", cell["user_us_per_req"])
                cells.setdefault((loop, hz), []).append((cell["cpu_us_per_req"], user,
                                                         cell["req_s"]))
                print(f"round {rnd + 1} {loop:10} perf {hz or 'off':>5}: "
                      f"{cell['cpu_us_per_req']:6.2f} total {user:5.2f} user us/req "
                      f"{cell['req_s']:8.0f} req/s", flush=True)
    print()
    print("| loop | perf | server CPU us/req, total / user (ticks) | req/s | total vs unwatched |")
    print("|---|---|---|---|---|")
    for loop in args.loops.split(","):
        base = statistics.median(c[0] for c in cells[(loop, None)])
        for hz in settings:
            c = cells[(loop, hz)]
            total = statistics.median(x[0] for x in c)
            print(f"| {loop} | {hz or 'off'} | {total:.2f} / "
                  f"{statistics.median(x[1] for x in c):.2f} | "
                  f"{statistics.median(x[2] for x in c):.0f} | {total / base:.2f}x |")


if __name__ == "__main__":
    main()
