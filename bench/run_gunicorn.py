"""Two gunicorn workers sharing one listening socket: how the connections
spread over them, and requests per second under wrk.  One aiohttp app
(tests/apps/aiohttp_app.py answers with the worker's pid), three worker
classes: uringloop's, aiohttp's uvloop worker and aiohttp's stdlib worker.

For each worker class and round:
  burst  64 keep-alive connections opened at once, one request on each:
         how many went to each worker (the share of the busier one);
  wrk    wrk -t2 -c64 for --seconds: req/s, and the connections each
         worker holds halfway through (counted from /proc/PID/fd).

    python3 bench/run_gunicorn.py [--rounds 3] [--seconds 5] [--workers uringloop,uvloop,asyncio]
    python3 bench/run_gunicorn.py --reuse-port     # a listening socket per worker

With --reuse-port gunicorn gives each worker a listening socket of its own
(one SO_REUSEPORT group) and the kernel picks the socket by the
connection's addresses: the split no longer depends on which worker runs
first, nor on how busy it is.

Needs gunicorn, aiohttp, uvloop (bench/requirements.txt) and wrk.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, os.pardir, "tests", "apps")
WORKERS = {
    "uringloop": "uringloop.gunicorn.UringWebWorker",
    "uvloop": "aiohttp.worker.GunicornUVLoopWebWorker",
    "asyncio": "aiohttp.worker.GunicornWebWorker",
}
CONNS = 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(worker, port, reuse_port=False):
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "aiohttp_app:make_app", "-k", WORKERS[worker],
         "-w", "2", "-b", f"127.0.0.1:{port}", "--graceful-timeout", "2",
         "--keep-alive", "30", *(["--reuse-port"] if reuse_port else [])],
        cwd=APPS, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = worker_pids(proc.pid)
        if len(pids) == 2 and all(answers(port) for _ in range(4)):
            return proc, pids
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"gunicorn with {worker} did not start: {proc.stderr.read()[-2000:]}")


def stop(proc):
    """Stop gunicorn as an operator would: SIGTERM (its workers finish what
    they serve), SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def worker_pids(master):
    try:
        with open(f"/proc/{master}/task/{master}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return b"200" in s.recv(4096)
    except OSError:
        return False


def burst(port):
    """Open CONNS connections at once, then one request on each; returns
    {pid: connections}."""
    socks = []
    for _ in range(CONNS):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        socks.append(s)
    served = {}
    try:
        for s in socks:
            s.setblocking(True)
            s.settimeout(10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in socks:
            data = b""
            while b"\r\n\r\n" not in data or not re.search(rb"\d+ \S+$", data):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            pid = int(data.rsplit(b"\r\n\r\n", 1)[1].split()[0])
            served[pid] = served.get(pid, 0) + 1
    finally:
        for s in socks:
            s.close()
    return served


def tcp_sockets(pid):
    n = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    n += 1
            except OSError:
                pass
    except OSError:
        pass
    return n


def under_wrk(port, pids, seconds):
    base = {pid: tcp_sockets(pid) for pid in pids}
    held = {}

    def sample():
        time.sleep(seconds / 2)
        for pid in pids:
            held[pid] = tcp_sockets(pid) - base[pid]

    t = threading.Thread(target=sample)
    t.start()
    out = subprocess.run(["wrk", "-t2", f"-c{CONNS}", f"-d{seconds}s",
                          f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    t.join()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rps, held


def busier_share(counts):
    total = sum(counts.values())
    return max(counts.values()) / total if total else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--workers", default=",".join(WORKERS))
    parser.add_argument("--reuse-port", action="store_true",
                        help="gunicorn --reuse-port: a listening socket per worker")
    args = parser.parse_args()
    workers = args.workers.split(",")
    results = {w: {"burst": [], "wrk_share": [], "rps": []} for w in workers}
    for rnd in range(args.rounds):
        for w in workers:
            port = free_port()
            proc, pids = start(w, port, args.reuse_port)
            try:
                served = burst(port)
                time.sleep(0.3)
                rps, held = under_wrk(port, pids, args.seconds)
            finally:
                stop(proc)
            per_worker = [served.get(p, 0) for p in pids]
            held_list = [held.get(p, 0) for p in pids]
            results[w]["burst"].append(busier_share(served))
            results[w]["wrk_share"].append(busier_share(held))
            results[w]["rps"].append(rps)
            print(f"round {rnd + 1} {w:10s} burst {per_worker} "
                  f"under wrk {held_list} conns, {rps:.0f} req/s", flush=True)
    print()
    print("gunicorn -w 2" + (" --reuse-port" if args.reuse_port else ", one shared listening socket"))
    print("| worker | busier worker's share, burst of 64 (median, max) "
          "| busier share under wrk -c64 | req/s (median) |")
    print("|---|---|---|---|")
    for w in workers:
        r = results[w]
        print(f"| {w} | {statistics.median(r['burst']):.0%}, {max(r['burst']):.0%} "
              f"| {statistics.median(r['wrk_share']):.0%} "
              f"| {statistics.median(r['rps']):.0f} |")


if __name__ == "__main__":
    main()
