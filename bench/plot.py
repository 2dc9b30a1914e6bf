"""Plot the newest echo benchmark result: req/s per cell and loop, and
server CPU per request, as bench/results/echo-<stamp>.png.

    python3 bench/plot.py [bench/results/echo-....json]
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    paths = sys.argv[1:] or sorted(glob.glob(os.path.join(HERE, "results", "echo-*.json")))
    if not paths:
        sys.exit("no echo results: run bench/run_echo.py first")
    path = paths[-1]
    median = json.load(open(path))["median"]
    cells = list(median)
    loops = [loop for loop in ("uringloop", "uvloop", "rloop", "asyncio")
             if loop in median[cells[0]]]
    fig, axes = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    width = 0.8 / len(loops)
    for i, loop in enumerate(loops):
        xs = [c + (i - len(loops) / 2 + 0.5) * width for c in range(len(cells))]
        axes[0].bar(xs, [median[c][loop]["req_s"] / 1000 for c in cells], width, label=loop)
        axes[1].bar(xs, [median[c][loop]["cpu_us_per_req"] for c in cells], width, label=loop)
    axes[0].set_ylabel("thousand requests / s")
    axes[1].set_ylabel("server CPU us / request")
    axes[1].set_xticks(range(len(cells)))
    axes[1].set_xticklabels(cells, rotation=30, ha="right")
    axes[0].legend()
    axes[0].set_title("echo server, C client; 10 connections, or 1000 where a cell says x1000 "
                      "(req/s: higher is better; CPU: lower is better)")
    fig.tight_layout()
    out = path[:-5] + ".png"
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
