"""The loop's own cost per ready callback and per task step (issue #36).

No sockets: each loop runs, in a fresh process, batches of `call_soon()`
callbacks (100 then a sleep(0), so that the ready queue stays as short as
an asyncio server's) and batches of tasks that each await `sleep(0)`
twice; the process's user CPU over the timed part, divided by the
callbacks or task steps, is what the loop spends on each (the callback
itself is empty).  Loops run interleaved, `--rounds` times; the table
gives medians and the ratio to uringloop.

    python3 bench/run_callbacks.py
    python3 bench/run_callbacks.py --loops uringloop,uvloop --rounds 7
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_echo import LOOPS, SERVER_ENV  # noqa: E402

CHILD = r"""
import asyncio, json, resource, sys
name, batches = sys.argv[1], int(sys.argv[2])
if name == "uringloop":
    import uringloop; loop = uringloop.new_event_loop()
elif name == "uvloop":
    import uvloop; loop = uvloop.new_event_loop()
elif name == "rloop":
    import rloop; loop = rloop.new_event_loop()
else:
    loop = asyncio.SelectorEventLoop()

def nothing(i):
    pass

async def step():
    await asyncio.sleep(0)
    await asyncio.sleep(0)

def user():
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime

async def main():
    # warm-up: the first batches fill the allocator's free lists
    for _ in range(batches // 10):
        for i in range(100):
            loop.call_soon(nothing, i)
        await asyncio.sleep(0)
    t = user()
    for _ in range(batches):
        for i in range(100):
            loop.call_soon(nothing, i)
        await asyncio.sleep(0)
    soon = (user() - t) / (batches * 100)
    t = user()
    for _ in range(batches // 10):
        await asyncio.gather(*[step() for _ in range(100)])
    # each task: its first step, two after each sleep(0), and the step
    # that ends it after the gather's own wakeup
    tasks = (user() - t) / (batches // 10 * 100 * 3)
    print(json.dumps({"soon_ns": soon * 1e9, "task_step_ns": tasks * 1e9}))

loop.run_until_complete(main())
loop.close()
"""


def one_run(loop, batches):
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", CHILD, loop, str(batches)],
                         env=SERVER_ENV, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=5000)
    args = parser.parse_args()
    loops = args.loops.split(",")
    runs = {loop: [] for loop in loops}
    for _ in range(args.rounds):
        for loop in loops:
            runs[loop].append(one_run(loop, args.batches))
    print(f"user CPU in ns, median of {args.rounds} interleaved rounds "
          f"({args.batches} x 100 callbacks, {args.batches // 10} x 100 tasks)")
    print("| loop | per call_soon() callback | vs uringloop | per task step | vs uringloop |")
    print("|---|---|---|---|---|")
    base = {key: statistics.median(r[key] for r in runs[loops[0]]) for key in ("soon_ns", "task_step_ns")}
    for loop in loops:
        soon = statistics.median(r["soon_ns"] for r in runs[loop])
        step = statistics.median(r["task_step_ns"] for r in runs[loop])
        print(f"| {loop} | {soon:.0f} | {soon / base['soon_ns']:.2f}x "
              f"| {step:.0f} | {step / base['task_step_ns']:.2f}x |")


if __name__ == "__main__":
    main()
