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
User-space instructions are not time (cache misses and the kernel's work
are not in them), but a change that takes instructions off the path shows
here by the percent, which the timed A/B (bench/ab_builds.py) cannot
resolve below 5-10%.

    python3 bench/count_instructions.py [--loops uringloop,uvloop,rloop]
        [--sizes 1024,10240] [--conns 1,10] [--repeat 1] [--keep DIR]

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


def serve(loop, out_file, tool):
    """Start the echo server under `tool` ("callgrind" or "strace"), return
    (process, port)."""
    server = [sys.executable, os.path.join(HERE, "echo_server.py"), "--loop", loop,
              "--style", "protocol", "--port", "0"]
    if tool == "callgrind":
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
               "--dump-instr=no", "--quiet"] + server
    else:
        cmd = ["strace", "-f", "-c", "-o", out_file] + server
    env = dict(SERVER_ENV, PYTHONHASHSEED="0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{loop} server did not start under {tool}: {line!r}")
    return proc, int(line.split()[1])


def drive(port, conns, size, rounds):
    """`rounds` lockstep rounds of one `size`-byte message per connection;
    every reply is compared with what was sent."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    try:
        for s in socks:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(120)
        buf = bytearray(size)
        for r in range(rounds):
            msg = bytes([(r + i) & 0xFF for i in range(256)]) * (size // 256) + b"x" * (size % 256)
            for s in socks:
                s.sendall(msg)
            for s in socks:
                view = memoryview(buf)
                got = 0
                while got < size:
                    n = s.recv_into(view[got:])
                    if n == 0:
                        raise RuntimeError("server closed the connection")
                    got += n
                if buf != msg:
                    raise RuntimeError("echo corrupted")
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


def instructions(path):
    """The total of a callgrind output file (its `totals:` or `summary:`
    line, event Ir)."""
    with open(path) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def syscalls(path):
    """The total count of system calls in an `strace -c` summary."""
    with open(path) as f:
        for line in f:
            m = re.match(r"^100\.00\s+\S+\s+\S+\s+(\d+)", line.strip())
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no total in {path}")


def measure(loop, size, conns, short, long, tool, keep):
    """Per request: (long run - short run) / (their difference in requests)."""
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for rounds in (short, long):
            out = os.path.join(tmp, f"{loop}-{size}-{conns}-{rounds}.out")
            proc, port = serve(loop, out, tool)
            try:
                drive(port, conns, size, rounds)
            finally:
                stop(proc, port)
            totals.append(instructions(out) if tool == "callgrind" else syscalls(out))
            if keep and tool == "callgrind":
                os.makedirs(keep, exist_ok=True)
                run = "short" if rounds == short else "long"
                shutil.copy(out, os.path.join(keep, f"{loop}-{size}-{conns}-{run}.out"))
    return (totals[1] - totals[0]) / ((long - short) * conns)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default="uringloop,uvloop,rloop")
    parser.add_argument("--sizes", default="1024,10240")
    parser.add_argument("--conns", default="1,10")
    parser.add_argument("--short", type=int, default=500, help="rounds of the first run")
    parser.add_argument("--long", type=int, default=2500, help="rounds of the second run")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--syscalls", action="store_true", help="also count system calls (strace)")
    parser.add_argument("--keep", metavar="DIR")
    parser.add_argument("--top", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found: apt-get install valgrind")
    loops = args.loops.split(",")
    runs = {}
    for size in map(int, args.sizes.split(",")):
        for conns in map(int, args.conns.split(",")):
            for _ in range(args.repeat):
                for loop in loops:
                    cell = {"instructions_per_req": measure(loop, size, conns, args.short,
                                                            args.long, "callgrind", args.keep)}
                    if args.syscalls:
                        cell["syscalls_per_req"] = measure(loop, size, conns, args.short,
                                                           args.long, "strace", None)
                    runs.setdefault(f"{size}/{conns}/{loop}", []).append(cell)
                    if args.keep and args.top:
                        print_top(args.keep, f"{loop}-{size}-{conns}",
                                  (args.long - args.short) * conns, args.top)
                    print(f"{size:7d} x {conns:4d} {loop:9s} "
                          f"{cell['instructions_per_req']:9.0f} instructions/req"
                          + (f" {cell['syscalls_per_req']:6.2f} syscalls/req"
                             if args.syscalls else ""), flush=True)
    median = {key: {m: statistics.median(c[m] for c in cells) for m in cells[0]}
              for key, cells in runs.items()}
    save_results("instructions", args, runs, median, render(runs, median, loops))


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


def render(runs, median, loops):
    lines = ["| message x connections | "
             + " | ".join(loops + [f"uringloop vs {loop}" for loop in loops[1:]]) + " |",
             "|---" * (2 * len(loops)) + "|"]
    cells = sorted({key.rsplit("/", 1)[0] for key in median},
                   key=lambda c: tuple(map(int, c.split("/"))))
    for cell in cells:
        size, conns = cell.split("/")
        values = [median.get(f"{cell}/{loop}", {}).get("instructions_per_req") for loop in loops]
        text = [f"{v:.0f}" if v is not None else "" for v in values]
        ratios = [f"{values[0] / v:.2f}x" if values[0] and v else "" for v in values[1:]]
        spread = ""
        if len(runs.get(f"{cell}/{loops[0]}", [])) > 1:
            got = [c["instructions_per_req"] for c in runs[f"{cell}/{loops[0]}"]]
            spread = f" ({min(got):.0f}-{max(got):.0f})"
        lines.append(" | ".join([f"| {int(size) // 1024} KiB x {conns}", text[0] + spread]
                                + text[1:] + ratios) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
