"""Server CPU per connection: accept, one tiny echo, close (issue #15).

Each loop serves bench/echo_server.py (protocol style) pinned to CPU 0; a
client on CPU 1 opens `--batch` connections, sends one byte on each, reads
it back and closes them all, `--batches` times.  The server's user and
system CPU over that, divided by the connections, is what one connection
costs the loop beyond its requests (HTTP/1.0 clients, health checks and
short-lived RPC pay it per request).  Loops run interleaved, `--rounds`
times; the table gives medians.

    python3 bench/run_connect.py
    python3 bench/run_connect.py --loops uringloop,asyncio --rounds 5
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_echo import CLK_TCK, LOOPS, SERVER_ENV, SHIPPED_ENV, wait_idle  # noqa: E402


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def one_round(loop, batch, batches, env):
    server = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, os.path.join(HERE, "echo_server.py"),
         "--loop", loop, "--style", "protocol"],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(server.stdout.readline().split()[1])
        time.sleep(0.3)
        user0, sys0 = cpu_ticks(server.pid)
        start = time.monotonic()
        for _ in range(batches):
            socks = []
            for _ in range(batch):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"x")
                socks.append(s)
            for s in socks:
                if s.recv(1) != b"x":
                    raise RuntimeError(f"{loop}: no echo")
            for s in socks:
                s.close()
        elapsed = time.monotonic() - start
        time.sleep(0.3)     # the server sees the last FINs and closes
        user1, sys1 = cpu_ticks(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=10)
    n = batch * batches
    return {"user_us": (user1 - user0) / CLK_TCK / n * 1e6,
            "sys_us": (sys1 - sys0) / CLK_TCK / n * 1e6,
            "conn_s": n / elapsed}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--malloc", choices=["equal", "shipped"], default="equal")
    args = parser.parse_args()
    if os.cpu_count() >= 2:
        os.sched_setaffinity(0, {1})        # the client on CPU 1, the servers on 0
    env = SERVER_ENV if args.malloc == "equal" else SHIPPED_ENV
    loops = args.loops.split(",")
    cells = {loop: [] for loop in loops}
    for r in range(args.rounds):
        for loop in (loops if r % 2 == 0 else loops[::-1]):
            wait_idle()
            cell = one_round(loop, args.batch, args.batches, env)
            cells[loop].append(cell)
            print(f"round {r + 1} {loop:10} {cell['user_us']:6.1f} user "
                  f"{cell['sys_us']:6.1f} sys us/conn  {cell['conn_s']:7.0f} conn/s",
                  flush=True)
    print()
    print("| loop | server CPU us per connection, user / system | connections/s |")
    print("|---|---|---|")
    for loop in loops:
        c = cells[loop]
        print(f"| {loop} | {statistics.median(x['user_us'] for x in c):.1f} / "
              f"{statistics.median(x['sys_us'] for x in c):.1f} | "
              f"{statistics.median(x['conn_s'] for x in c):.0f} |")


if __name__ == "__main__":
    main()
