"""Instructions per echo request in the server's own process (user space),
counted by valgrind's callgrind: a count, where the timed benchmarks on
this machine swing by 10-20% from run to run.

Each loop serves bench/echo_server.py (protocol style) under callgrind;
this script is the client, outside valgrind: `--conns` connections in
lockstep (a message on each, then every reply read whole and checked),
twice -- `--short` rounds, then `--long` rounds -- and the difference of
the two runs' totals over the difference of their requests is the cost of
one request in the steady state (start, connects and exit cancel out).
With one connection each iteration of the loop serves one request; with
more, how many one iteration serves depends on when the replies are read,
so those counts move a little between runs (--repeat gives the spread).
System calls per request come from `strace -c -f` the same way (--syscalls).
With --connect each round is one connection instead (connect, one
`size`-byte echo, the client closes): instructions per connection, the cost issue #36's
goal 3 is about, which the timed bench/run_connect.py shows only within
its rounds' swing.  rloop 0.5.0 leaves the connection open after the
EOF (docs/benchmarks.md), so its count is without the close.  With --app aiohttp (or raw) the server is
bench/http_server.py's app and each request a keep-alive GET of its
hello-world page (what bench/run_http.py times under wrk); --sizes is
unused then.
User-space instructions are not time (cache misses and the kernel's work
are not in them), but a change that takes instructions off the path shows
here by the percent, which the timed A/B (bench/ab_builds.py) cannot
resolve below 5-10%.

    python3 bench/count_instructions.py [--loops uringloop,uvloop,rloop]
        [--sizes 1024,10240] [--conns 1,10] [--repeat 1] [--keep DIR]

--cache-sim adds callgrind's cache simulation (L1 32 KiB instruction and
data caches, the last level as the machine's): L1 instruction and data read
misses per request too -- whether a loop's steady-state path fits in the
instruction cache, which no instruction count shows (this machine has no
hardware counters to measure it).
--keep DIR leaves the callgrind files there (<loop>-<size>-<conns>-short.out
and -long.out); `--top N` then prints each cell's N functions with the most
instructions per request (self, the two runs' difference).
Needs valgrind (Debian package).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile

from run_echo import HERE, SERVER_ENV, save_results

LOOPS = ["uringloop", "uvloop", "rloop", "asyncio"]


def serve(loop, out_file, tool, app=None, cache_sim=False):
    """Start the echo server (or http_server.py's `app`) under `tool`
    ("callgrind" or "strace"), return (process, port)."""
    if app:
        server = [sys.executable, os.path.join(HERE, "http_server.py"), "--loop", loop,
                  "--app", app]
    else:
        server = [sys.executable, os.path.join(HERE, "echo_server.py"), "--loop", loop,
                  "--style", "protocol", "--port", "0"]
    if tool == "callgrind":
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
               "--dump-instr=no", "--quiet"] + (
                   ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64"] if cache_sim else []
               ) + server
    else:
        cmd = ["strace", "-f", "-c", "-o", out_file] + server
    env = dict(SERVER_ENV, PYTHONHASHSEED="0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{loop} server did not start under {tool}: {line!r}")
    return proc, int(line.split()[1])


def clients(port, conns):
    """`conns` connections to the server, Nagle off, a generous timeout."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(120)
    return socks


def recv_into_exactly(s, view):
    """Fill `view` from s; the server closing first is an error."""
    got = 0
    while got < len(view):
        n = s.recv_into(view[got:])
        if n == 0:
            raise RuntimeError("server closed the connection")
        got += n


def recv_exactly(s, size):
    buf = bytearray(size)
    recv_into_exactly(s, memoryview(buf))
    return bytes(buf)


def drive(port, conns, size, rounds):
    """`rounds` lockstep rounds of one `size`-byte message per connection;
    every reply is compared with what was sent."""
    socks = clients(port, conns)
    try:
        buf = bytearray(size)
        for r in range(rounds):
            msg = bytes([(r + i) & 0xFF for i in range(256)]) * (size // 256) + b"x" * (size % 256)
            for s in socks:
                s.sendall(msg)
            for s in socks:
                recv_into_exactly(s, memoryview(buf))
                if buf != msg:
                    raise RuntimeError("echo corrupted")
    finally:
        for s in socks:
            s.close()


def drive_connect(port, size, rounds):
    """`rounds` connections one after the other: connect, one `size`-byte
    echo checked, close.  (The server's side closes on the EOF, as
    bench/run_connect.py has it; not awaited, since rloop's transport does
    not close on EOF.)"""
    msg = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    for _ in range(rounds):
        s = socket.create_connection(("127.0.0.1", port))
        try:
            s.settimeout(120)
            s.sendall(msg)
            if recv_exactly(s, size) != msg:
                raise RuntimeError("echo corrupted")
        finally:
            s.close()


HTTP_REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def drive_http(port, conns, rounds):
    """`rounds` lockstep rounds of one keep-alive GET per connection; each
    response read whole (headers, then Content-Length bytes) and checked."""
    socks = clients(port, conns)
    try:
        for _ in range(rounds):
            for s in socks:
                s.sendall(HTTP_REQUEST)
            for s in socks:
                got = b""
                while b"\r\n\r\n" not in got:
                    data = s.recv(65536)
                    if not data:
                        raise RuntimeError("server closed the connection")
                    got += data
                head, body = got.split(b"\r\n\r\n", 1)
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                if len(body) < length:
                    body += recv_exactly(s, length - len(body))
                if not head.startswith(b"HTTP/1.1 200") or body != b"Hello, World!":
                    raise RuntimeError(f"unexpected response {got!r}")
    finally:
        for s in socks:
            s.close()


def stop(proc, port):
    """SIGTERM, then a connection to wake the loop: valgrind holds a
    signal back while its process sleeps in io_uring_enter, which it does
    not count among the system calls that may block."""
    target = proc.pid
    if os.path.basename(proc.args[0]) == "strace":
        # the server is strace's child (strace leaves it running on SIGTERM)
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            target = int(f.read().split()[0])
    os.kill(target, signal.SIGTERM)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            pass
        try:
            proc.communicate(timeout=0.5)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    raise RuntimeError("the server did not stop")


def events(path):
    """The totals of a callgrind output file, {event: count} (its `events:`
    line names them, its `totals:` or `summary:` line counts them; Ir is
    instructions, I1mr and D1mr L1 instruction and data read misses)."""
    names = ["Ir"]
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                names = line.split()[1:]
            if line.startswith(("totals:", "summary:")):
                return dict(zip(names, map(int, line.split()[1:])))
    raise RuntimeError(f"no totals in {path}")


def syscalls(path):
    """The total count of system calls in an `strace -c` summary."""
    with open(path) as f:
        for line in f:
            m = re.match(r"^100\.00\s+\S+\s+\S+\s+(\d+)", line.strip())
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no total in {path}")


def measure(loop, size, conns, short, long, tool, keep, app=None, cache_sim=False):
    """Per request: (long run - short run) / (their difference in requests),
    {event: count} for callgrind, {"syscalls": count} for strace.
    conns == 0: per connection (drive_connect)."""
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for rounds in (short, long):
            out = os.path.join(tmp, f"{loop}-{size}-{conns}-{rounds}.out")
            proc, port = serve(loop, out, tool, app, cache_sim)
            try:
                if app:
                    drive_http(port, conns, rounds)
                elif conns:
                    drive(port, conns, size, rounds)
                else:
                    drive_connect(port, size, rounds)
            finally:
                stop(proc, port)
            totals.append(events(out) if tool == "callgrind" else {"syscalls": syscalls(out)})
            if keep and tool == "callgrind":
                os.makedirs(keep, exist_ok=True)
                run = "short" if rounds == short else "long"
                shutil.copy(out, os.path.join(keep, f"{loop}-{size}-{conns}-{run}.out"))
    return {name: (totals[1][name] - totals[0][name]) / ((long - short) * max(conns, 1))
            for name in totals[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default="uringloop,uvloop,rloop")
    parser.add_argument("--sizes", default="1024,10240")
    parser.add_argument("--conns", default="1,10")
    parser.add_argument("--short", type=int, default=500, help="rounds of the first run")
    parser.add_argument("--long", type=int, default=2500, help="rounds of the second run")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--syscalls", action="store_true", help="also count system calls (strace)")
    parser.add_argument("--connect", action="store_true",
                        help="per connection (connect, one echo, close) instead of per request")
    parser.add_argument("--app", choices=["aiohttp", "raw"],
                        help="per HTTP request to bench/http_server.py's app instead")
    parser.add_argument("--cache-sim", action="store_true",
                        help="also L1 instruction and data read misses (callgrind's simulation)")
    parser.add_argument("--keep", metavar="DIR")
    parser.add_argument("--top", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found: apt-get install valgrind")
    loops = args.loops.split(",")
    runs = {}
    if args.connect:
        args.conns = "0"
    if args.app:
        args.sizes = "0"
    for size in map(int, args.sizes.split(",")):
        for conns in map(int, args.conns.split(",")):
            for _ in range(args.repeat):
                for loop in loops:
                    counted = measure(loop, size, conns, args.short, args.long, "callgrind",
                                      args.keep, args.app, args.cache_sim)
                    cell = {"instructions_per_req": counted["Ir"]}
                    if args.cache_sim:
                        cell["i1_misses_per_req"] = counted["I1mr"]
                        cell["d1_read_misses_per_req"] = counted["D1mr"]
                    if args.syscalls:
                        cell["syscalls_per_req"] = measure(loop, size, conns, args.short,
                                                           args.long, "strace", None,
                                                           args.app)["syscalls"]
                    runs.setdefault(f"{size}/{conns}/{loop}", []).append(cell)
                    if args.keep and args.top:
                        print_top(args.keep, f"{loop}-{size}-{conns}",
                                  (args.long - args.short) * max(conns, 1), args.top)
                    print(f"{label(size, conns, args.app):22s} {loop:9s} "
                          f"{cell['instructions_per_req']:9.0f} instructions/"
                          + ("req" if conns else "connection")
                          + (f" {cell['syscalls_per_req']:6.2f} syscalls/"
                             + ("req" if conns else "connection")
                             if args.syscalls else "")
                          + (f" {cell['i1_misses_per_req']:6.1f} L1i misses,"
                             f" {cell['d1_read_misses_per_req']:6.1f} L1d read misses"
                             if args.cache_sim else ""), flush=True)
    median = {key: {m: statistics.median(c[m] for c in cells) for m in cells[0]}
              for key, cells in runs.items()}
    save_results("instructions", args, runs, median, render(runs, median, loops, args.app))


def by_function(path):
    """{function: self instructions} from callgrind_annotate."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", path],
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \([\s\d.]+%\)\s+(\S.*?)(?: \[.*\])?$", line)
        if m and "PROGRAM TOTALS" not in line:
            name = m.group(2).rsplit(":", 1)[-1]
            found[name] = found.get(name, 0) + int(m.group(1).replace(",", ""))
    return found


def print_top(keep, stem, requests, n):
    short = by_function(os.path.join(keep, f"{stem}-short.out"))
    long = by_function(os.path.join(keep, f"{stem}-long.out"))
    per = {f: (long.get(f, 0) - short.get(f, 0)) / requests for f in set(short) | set(long)}
    for f, v in sorted(per.items(), key=lambda kv: -kv[1])[:n]:
        print(f"    {v:8.1f}  {f}")


def label(size, conns, app):
    """A cell's name: "1 KiB x 10", "1 KiB per connection", "aiohttp x 10"."""
    size, conns = int(size), int(conns)
    if app:
        return f"{app} x {conns}"
    what = f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
    return f"{what} x {conns}" if conns else f"{what} per connection"


def render(runs, median, loops, app=None):
    lines = table(runs, median, loops, app, "instructions_per_req")
    for metric, what in (("i1_misses_per_req", "L1 instruction misses"),
                         ("d1_read_misses_per_req", "L1 data read misses")):
        if any(metric in m for m in median.values()):
            lines += ["", f"{what} per request (callgrind's simulation):", ""]
            lines += table(runs, median, loops, app, metric, "{:.1f}")
    return "\n".join(lines)


def table(runs, median, loops, app, metric, fmt="{:.0f}"):
    lines = ["| cell | "
             + " | ".join(loops + [f"uringloop vs {loop}" for loop in loops[1:]]) + " |",
             "|---" * (2 * len(loops)) + "|"]
    cells = sorted({key.rsplit("/", 1)[0] for key in median},
                   key=lambda c: tuple(map(int, c.split("/"))))
    for cell in cells:
        size, conns = cell.split("/")
        values = [median.get(f"{cell}/{loop}", {}).get(metric) for loop in loops]
        text = [fmt.format(v) if v is not None else "" for v in values]
        ratios = [f"{values[0] / v:.2f}x" if values[0] and v else "" for v in values[1:]]
        spread = ""
        if len(runs.get(f"{cell}/{loops[0]}", [])) > 1:
            got = [c[metric] for c in runs[f"{cell}/{loops[0]}"]]
            spread = f" ({fmt.format(min(got))}-{fmt.format(max(got))})"
        lines.append(" | ".join([f"| {label(size, conns, app)}", text[0] + spread]
                                + text[1:] + ratios) + " |")
    return lines


if __name__ == "__main__":
    main()
