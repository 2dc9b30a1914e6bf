"""TLS echo benchmark (issue #36): each loop serves bench/echo_server.py's
protocol echo over TLS (asyncio's SSLProtocol on every loop but uvloop,
whose SSL protocol is compiled; rloop 0.5 raises NotImplementedError for
ssl=) pinned to CPU 0, while bench/tls_client.py
on CPU 1 drives 10 connections with 1 and 100 KiB messages.  Loops run
interleaved, several rounds; server CPU per request is given as total and
user alone, with the paired ratios to uringloop, as bench/run_echo.py does
(its results files: bench/results/tls-<date>.json and .md).

    python3 bench/run_tls.py
    python3 bench/run_tls.py --loops uringloop,uvloop --rounds 5 --sizes 1024
    python3 bench/run_tls.py --malloc shipped
    python3 bench/run_tls.py --split perf    # user/system split from perf samples
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_echo import (SERVER_ENV, SHIPPED_ENV, measure_cell, render,  # noqa: E402
                      save_results, wait_idle)


def make_certificate(directory):
    """A self-signed certificate and key for 127.0.0.1 (openssl(1))."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def one_cell(loop, size, seconds, conns, tls, env, split="ticks"):
    return measure_cell(["--loop", loop, "--tls", tls],
                        [sys.executable, os.path.join(HERE, "tls_client.py")],
                        size, seconds, conns, env, split)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default="uringloop,uvloop,asyncio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sizes", default="1024,102400")
    parser.add_argument("--conns", type=int, default=10)
    parser.add_argument("--malloc", choices=["equal", "shipped"], default="equal")
    parser.add_argument("--split", choices=["ticks", "perf"], default="ticks",
                        help="user/system split as bench/run_echo.py --split")
    args = parser.parse_args()
    env = SERVER_ENV if args.malloc == "equal" else SHIPPED_ENV
    loops = args.loops.split(",")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        tls = ",".join(make_certificate(tmp))
        for size in map(int, args.sizes.split(",")):
            key = f"tls/{size}"
            for rnd in range(args.rounds):
                for loop in (loops if rnd % 2 == 0 else loops[::-1]):
                    wait_idle()
                    cell = one_cell(loop, size, args.seconds, args.conns, tls, env, args.split)
                    if cell["errors"]:
                        raise RuntimeError(f"{loop}: {cell['errors']} echoes differed")
                    runs.setdefault(key, {}).setdefault(loop, []).append(cell)
                    print(f"{key:12s} {loop:9s} {cell['req_s']:8.0f} req/s "
                          f"{cell['cpu_us_per_req']:7.2f} / {cell['user_us_per_req']:7.2f} "
                          f"us cpu/user per req", flush=True)
    summary = {key: {loop: {m: statistics.median(c[m] for c in cells) for m in cells[0]}
                     for loop, cells in per_loop.items()}
               for key, per_loop in runs.items()}
    save_results("tls", args, runs, summary, render(runs, summary))


if __name__ == "__main__":
    main()
