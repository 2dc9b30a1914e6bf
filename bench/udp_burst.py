"""Busy sendto() on one connected UDP transport over loopback: datagrams/s
per loop, uringloop's io_uring_enter calls per datagram, and the ratio to
uvloop in the same run (interleaved rounds, each loop in its own process
pinned to CPU 0, equal malloc settings).

    python3 bench/udp_burst.py [--size 1000] [--rounds 3] [--seconds 2]
        [--loops uringloop,uvloop,rloop,asyncio] [--mode ZC_NEVER]

The receiver is a plain socket that nobody reads: the kernel drops what
overflows its buffer, so the figure is the sender's alone.
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


async def burst(size, seconds, mode):
    loop = asyncio.get_running_loop()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(('127.0.0.1', 0))
    tr, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                remote_addr=rx.getsockname())
    ours = hasattr(loop, 'stats')
    if ours and mode:
        import uringloop
        tr.get_extra_info('socket').setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, getattr(uringloop, mode))
        tr.get_extra_info('socket').setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD, 0)
    payload = bytes(size)
    s0 = loop.stats() if ours else None
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        # 64 sendto() per callback: a loop that sends inside sendto() never
        # fills its buffer, and must still see the deadline
        for _ in range(64):
            if tr.get_write_buffer_size() >= 1 << 20:
                break
            tr.sendto(payload)
            n += 1
        while tr.get_write_buffer_size() > 1 << 18:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
    while tr.get_write_buffer_size():
        await asyncio.sleep(0)
    dt = time.perf_counter() - t0
    out = {'dgrams_s': n / dt, 'cpu_s_per_dgram': (time.process_time() - cpu0) / n}
    if ours:
        s1 = loop.stats()
        out['enters_per_dgram'] = (s1['enter_calls'] - s0['enter_calls']) / n
        out['zerocopy'] = tr.get_extra_info('zerocopy')
    tr.close()
    rx.close()
    print(json.dumps(out))


def one(loop_name, size, seconds, mode):
    sys.path.insert(0, HERE)
    from echo_server import loop_factory
    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
        runner.run(burst(size, seconds, mode))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument('--size', type=int, default=1000)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--seconds', type=float, default=2.0)
    parser.add_argument('--loops', default='uringloop,uvloop,rloop,asyncio')
    parser.add_argument('--mode', default='', help='uringloop ZC mode (default: as shipped)')
    parser.add_argument('--one', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args.one, args.size, args.seconds, args.mode)
    from run_echo import SERVER_ENV, wait_idle
    loops = args.loops.split(',')
    runs = {name: [] for name in loops}
    for _ in range(args.rounds):
        for name in loops:
            wait_idle()
            out = subprocess.run(
                ['taskset', '-c', '0', sys.executable, __file__, '--one', name,
                 '--size', str(args.size), '--seconds', str(args.seconds),
                 '--mode', args.mode],
                capture_output=True, text=True, timeout=args.seconds + 60, env=SERVER_ENV)
            if out.returncode:
                raise RuntimeError(out.stderr)
            r = json.loads(out.stdout)
            runs[name].append(r)
            extra = f" enters/dgram {r['enters_per_dgram']:.3f}" if 'enters_per_dgram' in r else ''
            print(f"{name:10s} {r['dgrams_s']:9.0f} dgrams/s "
                  f"{r['cpu_s_per_dgram'] * 1e6:6.2f} us CPU/dgram{extra}", flush=True)
    base = 'uvloop' if 'uvloop' in runs else loops[0]
    print(f"\n| loop | datagrams/s | CPU us/datagram | vs {base} |\n|---|---|---|---|")
    for name, rs in runs.items():
        rate = statistics.median(r['dgrams_s'] for r in rs)
        ratio = statistics.median(a['dgrams_s'] / b['dgrams_s'] for a, b in zip(rs, runs[base]))
        cpu = statistics.median(r['cpu_s_per_dgram'] for r in rs) * 1e6
        print(f"| {name} | {rate:.0f} | {cpu:.2f} | {ratio:.2f}x |")


if __name__ == '__main__':
    main()
