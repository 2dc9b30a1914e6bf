"""Every benchmark in one command: echo (with its plot), connection cost,
the cost of a callback and a task step, aiohttp under wrk, zero-copy, a
datagram burst.  Results and tables go to bench/results/
(connection cost: printed).  About 14 minutes.

    python3 bench/run_all.py [--quick]
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script, *args):
    print(f"== {script} {' '.join(args)}", flush=True)
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args]).returncode


def main():
    quick = "--quick" in sys.argv[1:]
    failed = 0
    failed |= run("run_echo.py", *(["--quick"] if quick else []))
    failed |= run("plot.py")
    failed |= run("run_connect.py", *(["--rounds", "1", "--batches", "4"] if quick else []))
    failed |= run("run_callbacks.py", *(["--rounds", "1", "--batches", "500"] if quick else []))
    if shutil.which("wrk"):
        failed |= run("run_http.py", *(["--rounds", "1", "--seconds", "3"] if quick else []))
    else:
        print("== run_http.py skipped: wrk not installed (apt-get install wrk)")
    if os.geteuid() == 0:
        failed |= run("run_zerocopy.py", *(["--rounds", "1", "--seconds", "1"] if quick else []))
    else:
        print("== run_zerocopy.py skipped: its sink namespaces need root")
    failed |= run("udp_burst.py", *(["--rounds", "1", "--seconds", "1"] if quick else []))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
