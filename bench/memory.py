"""Memory per connection, each loop in the same run (issue #15):

  idle   N connections opened to an echo server (protocol style) and left
         idle: the server's RSS growth per connection, in KiB.
  burst  N connections each ask for one 256 KiB reply at once and read it
         slowly: the server's peak RSS while the replies wait in its write
         buffers and socket queues, in MiB.

    python3 bench/memory.py                       # 8000 idle, 4000 burst
    python3 bench/memory.py --idle 2000 --burst 1000 --loops uringloop,asyncio

The client is a separate process that holds the sockets (RLIMIT_NOFILE is
raised to fit).  Every server runs with the malloc settings of
bench/run_echo.py unless --malloc shipped.
"""
import argparse
import os
import resource
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_echo  # noqa: E402

SERVER = r'''
import asyncio, os, sys
sys.path.insert(0, %(here)r)
from echo_server import loop_factory

REPLY = b"r" * (256 * 1024)

class Proto(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        if data.startswith(b"burst"):
            self.tr.write(REPLY)

async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Proto, "127.0.0.1", 0, backlog=4096)
    print("READY", server.sockets[0].getsockname()[1], flush=True)
    await loop.create_future()

loop = loop_factory(sys.argv[1])()
asyncio.set_event_loop(loop)
loop.run_until_complete(main())
'''


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start_server(loop, env):
    proc = subprocess.Popen([sys.executable, "-c", SERVER % {"here": HERE}, loop],
                            stdout=subprocess.PIPE, text=True, env=env)
    port = int(proc.stdout.readline().split()[1])
    return proc, port


def settle(pid, seconds=1.0):
    """RSS once it has stopped moving (the server has handled the burst of
    connections), bounded in time."""
    last, deadline = -1, time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(seconds / 4)
        now = rss_kib(pid)
        if now == last:
            return now
        last = now
    return last


def idle_cell(loop, n, env):
    proc, port = start_server(loop, env)
    socks = []
    try:
        # a few connections first, so one-off costs (first transport, the
        # ring's buffers) are in the baseline
        for _ in range(16):
            socks.append(socket.create_connection(("127.0.0.1", port)))
        base = settle(proc.pid)
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", port)))
        after = settle(proc.pid)
        return (after - base) / n
    finally:
        for s in socks:
            s.close()
        proc.kill()
        proc.wait()


def burst_cell(loop, n, env):
    proc, port = start_server(loop, env)
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            socks.append(s)
        settle(proc.pid)
        for s in socks:
            s.sendall(b"burst")
        peak = 0
        pending = {s: 256 * 1024 for s in socks}
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            peak = max(peak, rss_kib(proc.pid))
            for s in list(pending):         # read slowly: a little from each
                s.setblocking(False)
                try:
                    got = len(s.recv(65536))
                except BlockingIOError:
                    continue
                pending[s] -= got
                if pending[s] <= 0 or got == 0:
                    del pending[s]
        return peak / 1024
    finally:
        for s in socks:
            s.close()
        proc.kill()
        proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default="uringloop,uvloop,rloop,asyncio")
    parser.add_argument("--idle", type=int, default=8000)
    parser.add_argument("--burst", type=int, default=4000)
    parser.add_argument("--malloc", choices=["equal", "shipped"], default="equal")
    args = parser.parse_args()
    need = max(args.idle, args.burst) + 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    env = run_echo.SERVER_ENV if args.malloc == "equal" else run_echo.SHIPPED_ENV
    print("| loop | idle KiB/connection | burst peak RSS MiB |")
    print("|---|---|---|")
    for loop in args.loops.split(","):
        idle = idle_cell(loop, args.idle, env) if args.idle else float("nan")
        burst = burst_cell(loop, args.burst, env) if args.burst else float("nan")
        print(f"| {loop} | {idle:.2f} | {burst:.1f} |", flush=True)


if __name__ == "__main__":
    main()
