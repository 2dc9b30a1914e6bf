"""Async file I/O: uringloop.open() on the ring against aiofiles and anyio
(threads), each on uvloop and on the stdlib loop (issue #37).

Workloads, on one page-cached 256 MiB file (made and read once first):
  rand4k     4 KiB reads at random 4 KiB-aligned offsets (seek + read), by
             `--readers` tasks, each with its own file object
  seq1m      1 MiB sequential reads (back to the start at the end)
  write1m    1 MiB sequential writes to a second file (back to the start
             every 256 MiB), flushed each time
  fsync1m    the same, with fsync() after each write

Each cell runs in a fresh process for `--seconds` after a short warm-up;
operations per second and the process's CPU per operation (user and system
apart, every thread counted: the executors' and the kernel's io-wq workers
alike) are reported.  Candidates run interleaved, `--rounds` times; the
tables give medians and each candidate's ratio to aiofiles on uvloop.

    python3 bench/run_files.py
    python3 bench/run_files.py --workloads rand4k --readers 1,64 --rounds 5
"""
import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_echo import save_results  # noqa: E402

SIZE = 256 << 20
CANDIDATES = ["uringloop", "uringloop-on-asyncio", "aiofiles-on-uvloop",
              "aiofiles-on-asyncio", "anyio-on-uvloop", "anyio-on-asyncio"]
WORKLOADS = ["rand4k", "seq1m", "write1m", "fsync1m"]
REFERENCE = "aiofiles-on-uvloop"


def make_file(path):
    if not os.path.exists(path) or os.path.getsize(path) != SIZE:
        with open(path, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(SIZE >> 20):
                f.write(block)
    with open(path, "rb") as f:            # into the page cache
        while f.read(1 << 24):
            pass


def opener(candidate):
    lib = candidate.split("-on-")[0]
    if lib == "uringloop":
        import uringloop
        return uringloop.open
    if lib == "aiofiles":
        import aiofiles
        return aiofiles.open
    import anyio
    return anyio.open_file


def loop_factory(candidate):
    if candidate == "uringloop":
        import uringloop
        return uringloop.new_event_loop
    if candidate.endswith("uvloop"):
        import uvloop
        return uvloop.new_event_loop
    return asyncio.SelectorEventLoop


async def rand4k(open_, path, readers, deadline, counts):
    async def reader(i):
        rng = random.Random(i)
        blocks = SIZE // 4096
        f = await open_(path, "rb")
        try:
            while time.monotonic() < deadline:
                await f.seek(rng.randrange(blocks) * 4096)
                data = await f.read(4096)
                assert len(data) == 4096
                counts[0] += 1
        finally:
            await _close(f)
    await asyncio.gather(*(reader(i) for i in range(readers)))


async def seq1m(open_, path, readers, deadline, counts):
    f = await open_(path, "rb")
    try:
        while time.monotonic() < deadline:
            data = await f.read(1 << 20)
            if len(data) < 1 << 20:
                await f.seek(0)
            counts[0] += 1
    finally:
        await _close(f)


async def write1m(open_, path, readers, deadline, counts, sync=False):
    block = os.urandom(1 << 20)
    written = 0
    f = await open_(path + ".out", "wb")
    try:
        while time.monotonic() < deadline:
            await f.write(block)
            await f.flush()
            if sync:
                await (f.fsync() if hasattr(f, "fsync") else _fsync(f))
            written += len(block)
            if written >= SIZE:
                await f.seek(0)
                written = 0
            counts[0] += 1
    finally:
        await _close(f)


async def _fsync(f):
    # aiofiles and anyio have no fsync(): os.fsync in a thread, as their
    # users write it
    fileno = f.wrapped.fileno() if hasattr(f, "wrapped") else f.fileno()
    await asyncio.get_running_loop().run_in_executor(None, os.fsync, fileno)


async def fsync1m(open_, path, readers, deadline, counts):
    await write1m(open_, path, readers, deadline, counts, sync=True)


async def _close(f):
    # (anyio's files close with aclose(), the others' with close())
    await (f.aclose() if hasattr(f, "aclose") else f.close())


def worker(spec):
    candidate, workload, readers, seconds, path = (
        spec["candidate"], spec["workload"], spec["readers"], spec["seconds"], spec["path"])
    open_ = opener(candidate)
    body = globals()[workload]

    async def main():
        # warm-up (threads started, files opened), then the timed window
        counts = [0]
        await body(open_, path, readers, time.monotonic() + 0.3, counts)
        counts = [0]
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        await body(open_, path, readers, t0 + seconds, counts)
        t1 = time.monotonic()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        return {"ops": counts[0], "seconds": t1 - t0,
                "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime}

    with asyncio.Runner(loop_factory=loop_factory(candidate)) as runner:
        print(json.dumps(runner.run(main())))


def run_cell(candidate, workload, readers, seconds, path):
    spec = json.dumps({"candidate": candidate, "workload": workload, "readers": readers,
                       "seconds": seconds, "path": path})
    out = subprocess.run([sys.executable, __file__, "--worker", spec], capture_output=True,
                         text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    ops = max(r["ops"], 1)
    return {"ops_s": r["ops"] / r["seconds"], "user_us": r["user"] / ops * 1e6,
            "sys_us": r["sys"] / ops * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--readers", default="1,64",
                        help="concurrent readers of rand4k (the others use one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--dir", default="/var/tmp/uringloop-bench",
                        help="where the 256 MiB file lives (a disk, not tmpfs)")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "file-256m")
    make_file(path)
    candidates = args.candidates.split(",")
    cells = []
    for workload in args.workloads.split(","):
        for readers in (map(int, args.readers.split(",")) if workload == "rand4k" else [1]):
            cells.append((workload, readers))
    results = {}
    for r in range(args.rounds):
        for workload, readers in cells:
            order = candidates if r % 2 == 0 else candidates[::-1]
            for candidate in order:
                cell = run_cell(candidate, workload, readers, args.seconds, path)
                results.setdefault((workload, readers, candidate), []).append(cell)
                print(f"round {r + 1} {workload}x{readers:<3} {candidate:22} "
                      f"{cell['ops_s']:9.0f} ops/s  {cell['user_us']:8.1f} user "
                      f"{cell['sys_us']:8.1f} sys us/op", flush=True)
    lines = ["| cell | candidate | ops/s | CPU us/op, user / system | ops/s vs "
             f"{REFERENCE} | CPU/op vs {REFERENCE} |", "|---|---|---|---|---|---|"]
    for workload, readers in cells:
        ref = results.get((workload, readers, REFERENCE))
        for candidate in candidates:
            c = results[(workload, readers, candidate)]
            ops = statistics.median(x["ops_s"] for x in c)
            user = statistics.median(x["user_us"] for x in c)
            sys_ = statistics.median(x["sys_us"] for x in c)
            if ref:
                # paired by round: the cells of one round saw the same machine
                rate = statistics.median(a["ops_s"] / b["ops_s"] for a, b in zip(c, ref))
                cpu = statistics.median((a["user_us"] + a["sys_us"]) / (b["user_us"] + b["sys_us"])
                                        for a, b in zip(c, ref))
                ratios = f"{rate:.2f}x | {cpu:.2f}x"
            else:
                ratios = "- | -"
            lines.append(f"| {workload} x{readers} | {candidate} | {ops:.0f} | "
                         f"{user:.1f} / {sys_:.1f} | {ratios} |")
    print()
    runs = {f"{w}/x{n}/{c}": cells for (w, n, c), cells in results.items()}
    median = {key: {m: statistics.median(x[m] for x in cells) for m in cells[0]}
              for key, cells in runs.items()}
    save_results("files", args, runs, median, "\n".join(lines))


if __name__ == "__main__":
    main()
