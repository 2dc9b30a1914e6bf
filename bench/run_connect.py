"""Server CPU per connection: accept, one tiny echo, close (issue #15).

Each loop serves bench/echo_server.py (protocol style) pinned to CPU 0; a
client on CPU 1 opens `--batch` connections, sends one byte on each, reads
it back and closes them all, `--batches` times.  The server's user and
system CPU over that, divided by the connections, is what one connection
costs the loop beyond its requests (HTTP/1.0 clients, health checks and
short-lived RPC pay it per request).  Loops run interleaved, `--rounds`
times; the table gives medians.

Connections per second here are set by the accept queue more than by the
server's CPU: the client connects `--batch` times before it reads, and
every SYN the kernel drops with the queue full (a listen overflow, counted
per round) costs that connection a one-second retransmission.  The CPU
per connection is what compares loops; the overflows say how promptly
each drained its queue.

A loop that leaves accepted connections open after the peer's FIN spends
nothing on closing them, neither the close(2) nor the kernel's teardown of
both ends that runs in the closer's context on loopback: the last column
counts the server's sockets still open (CLOSE_WAIT) a moment after the
round.  rloop 0.5.0 closes one only when its transport map's deferred
reclamation drops it -- a quarter of a round's were still open after it,
a lone connection until the process exited (not after gc.collect() or the
server's close(); docs/benchmarks.md) -- so its CPU per connection here
is mostly without the close.  `--hold` keeps every
connection open until the round's CPU has been read, so no loop's close is
counted: accept and one echo, alike for all.

    python3 bench/run_connect.py
    python3 bench/run_connect.py --hold             # closing left out, for every loop
    python3 bench/run_connect.py --loops uringloop,asyncio --rounds 5
    python3 bench/run_connect.py --split perf     # user/system split from perf samples
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
from run_echo import (CLK_TCK, LOOPS, SERVER_ENV, SHIPPED_ENV, perf_user_share,  # noqa: E402
                      start_perf, stop_perf, wait_idle)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def listen_overflows():
    """TcpExt ListenOverflows (machine-wide, read only): each is a SYN the
    kernel dropped with the accept queue full, which the client sends again
    a second later.  They, not the server's CPU, decide connections/s here."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:]))["ListenOverflows"])
    return 0


def left_open(port):
    """The server's TCP sockets on `port` other than the listener, from
    /proc/net/tcp: after the client has closed every connection and the
    server has had time to see the FINs, a loop that closes its side has
    none; the ones counted here (in CLOSE_WAIT) are connections the loop
    kept open, and CPU it did not spend closing them.  (TIME_WAIT is left
    out: a closed client's end, whose ephemeral port may be this one.)"""
    count = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if (int(fields[1].split(":")[1], 16) == port
                    and fields[3] not in ("0A", "06")):     # LISTEN, TIME_WAIT
                count += 1
    return count


def one_round(loop, batch, batches, env, split="ticks", hold=False):
    server = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, os.path.join(HERE, "echo_server.py"),
         "--loop", loop, "--style", "protocol"],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(server.stdout.readline().split()[1])
        time.sleep(0.3)
        perf_path = f"/tmp/run_connect-{server.pid}.perf"
        perf = start_perf(server.pid, perf_path) if split == "perf" else None
        if perf is not None:
            time.sleep(0.5)             # perf attached before the first connection
        user0, sys0 = cpu_ticks(server.pid)
        overflows0 = listen_overflows()
        start = time.monotonic()
        held = []
        for _ in range(batches):
            socks = []
            for _ in range(batch):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"x")
                socks.append(s)
            for s in socks:
                if s.recv(1) != b"x":
                    raise RuntimeError(f"{loop}: no echo")
            if hold:
                held += socks
                continue
            for s in socks:
                s.close()
        elapsed = time.monotonic() - start
        time.sleep(0.3)     # the server sees the last FINs and closes
        user1, sys1 = cpu_ticks(server.pid)
        overflows = listen_overflows() - overflows0
        for s in held:      # closed after the count: no loop's closing is in it
            s.close()
        if held:
            time.sleep(0.3)
        still_open = left_open(port)
        if perf is not None:
            stop_perf(perf)
    finally:
        server.terminate()
        server.wait(timeout=10)
    n = batch * batches
    user, total = user1 - user0, (user1 - user0) + (sys1 - sys0)
    if perf is not None:
        # the total is exact to a tick; its split is sampled (run_echo.py)
        share, _ = perf_user_share(perf_path)
        os.unlink(perf_path)
        user = total * share
    return {"user_us": user / CLK_TCK / n * 1e6,
            "sys_us": (total - user) / CLK_TCK / n * 1e6,
            "conn_s": n / elapsed, "overflows": overflows, "left_open": still_open}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--hold", action="store_true",
                        help="keep every connection open until the round's CPU is "
                             "read: accept and one echo only, closing not counted "
                             "(compares with a loop that leaves connections open)")
    parser.add_argument("--malloc", choices=["equal", "shipped"], default="equal")
    parser.add_argument("--split", choices=["ticks", "perf"], default="ticks",
                        help="user/system split from the 250 Hz ticks, or from perf "
                             "samples (as bench/run_echo.py; perf slows the servers, "
                             "unequally: bench/perf_overhead.py; needs perf)")
    args = parser.parse_args()
    if os.cpu_count() >= 2:
        os.sched_setaffinity(0, {1})        # the client on CPU 1, the servers on 0
    env = SERVER_ENV if args.malloc == "equal" else SHIPPED_ENV
    loops = args.loops.split(",")
    cells = {loop: [] for loop in loops}
    for r in range(args.rounds):
        for loop in (loops if r % 2 == 0 else loops[::-1]):
            wait_idle()
            cell = one_round(loop, args.batch, args.batches, env, args.split, args.hold)
            cells[loop].append(cell)
            print(f"round {r + 1} {loop:10} {cell['user_us']:6.1f} user "
                  f"{cell['sys_us']:6.1f} sys us/conn  {cell['conn_s']:7.0f} conn/s  "
                  f"{cell['overflows']} listen overflows  {cell['left_open']} left open",
                  flush=True)
    print()
    print("| loop | server CPU us per connection, user / system | connections/s "
          "| listen overflows per round | connections left open per round |")
    print("|---|---|---|---|---|")
    for loop in loops:
        c = cells[loop]
        print(f"| {loop} | {statistics.median(x['user_us'] for x in c):.1f} / "
              f"{statistics.median(x['sys_us'] for x in c):.1f} | "
              f"{statistics.median(x['conn_s'] for x in c):.0f} | "
              f"{statistics.median(x['overflows'] for x in c):g} | "
              f"{statistics.median(x['left_open'] for x in c):g} |")


if __name__ == "__main__":
    main()
