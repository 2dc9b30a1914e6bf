"""One zero-copy benchmark cell: send for a fixed time with a ZC mode and
print one JSON line (bytes/s, the transport's zero-copy statistics).

    python3 bench/zc_sender.py udp  SIZE MODE SECONDS   # to 198.18.0.2:9999
    python3 bench/zc_sender.py tcp  SIZE MODE SECONDS   # loopback, own sink
MODE is ZC_NEVER, ZC_AUTO, ZC_ALWAYS, or REGISTERED: ZC_ALWAYS sending from
buffers of loop.zerocopy_buffer() with write_zerocopy()/sendto_zerocopy(),
each reused once its future says the kernel let go of it.  MODE uvloop,
rloop or asyncio runs the same ordinary sends on that loop instead.
"""
import asyncio
import json
import os
import sys
import time

import uringloop


async def pump(tr, payload, seconds, send):
    """Keep the transport's buffer between 256 KiB and 1 MiB for `seconds`
    (or, where sendto() never buffers, send as fast as the loop turns)."""
    loop = asyncio.get_running_loop()
    sent = 0
    start = loop.time()
    deadline = start + seconds
    while loop.time() < deadline:
        # at most 64 sends per turn: a loop whose UDP sendto() sends at once
        # (uvloop) never fills its buffer, and must still see the deadline
        for _ in range(64):
            if tr.get_write_buffer_size() >= 1 << 20:
                break
            waiting = send(payload)
            if waiting is not None:
                await waiting
            sent += len(payload)
        while tr.get_write_buffer_size() > 1 << 18:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
    while tr.get_write_buffer_size():
        await asyncio.sleep(0)
    return sent / (loop.time() - start), sent


def registered_sender(loop, tr, size, send_zc):
    """A send function over a ring of registered buffers: a buffer is
    written again only after the kernel released it (its future is done).
    Written as lean as a user's hot loop would be: its own Python cost is
    part of every REGISTERED figure."""
    count = max(8, (2 << 20) // size)
    bufs = [loop.zerocopy_buffer(size) for _ in range(count)]
    pending = [None] * count
    i = 0

    async def wait_then_send(fut):
        await fut
        send(None)

    def send(_payload):
        nonlocal i
        fut = pending[i]
        if fut is not None and not fut.done():
            return wait_then_send(fut)
        pending[i] = send_zc(bufs[i])
        i = i + 1 if i + 1 < count else 0
    return send


async def main(kind, size, mode, seconds):
    loop = asyncio.get_running_loop()
    payload = bytes(size)
    if kind == "udp":
        tr, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=("198.18.0.2", 9999))
        send = tr.sendto
    else:
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        tr, _ = await loop.create_connection(asyncio.Protocol,
                                             *server.sockets[0].getsockname())
        send = tr.write
    other_loop = mode in ("uvloop", "rloop", "asyncio")
    if mode == "REGISTERED":
        send = registered_sender(
            loop, tr, size, tr.sendto_zerocopy if kind == "udp" else tr.write_zerocopy)
        mode = "ZC_ALWAYS"
    if not other_loop and mode != "ZC_AUTO":
        # auto is measured as shipped: setting ZC_AUTO would turn zero-copy
        # back on for a loopback peer, for which auto starts with it off
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, getattr(uringloop, mode))
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD, 0)
    ours = hasattr(loop, "stats")
    enters0 = loop.stats()["enter_calls"] if ours else 0
    cpu0 = time.process_time()
    rate, sent = await pump(tr, payload, seconds, send)
    cpu = time.process_time() - cpu0
    enters = (loop.stats()["enter_calls"] - enters0) / max(1, sent // size) if ours else None
    stats = tr.get_extra_info("zerocopy") or {
        "zerocopy_sends": 0, "copied_reports": 0, "zerocopy_reports": 0}
    tr.close()
    print(json.dumps({"bytes_s": rate, "cpu_s": cpu, "enters_per_datagram": enters,
                      "zerocopy": stats}))


if __name__ == "__main__":
    kind, size, mode, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    if mode in ("uvloop", "rloop", "asyncio"):
        from echo_server import loop_factory
        with asyncio.Runner(loop_factory=loop_factory(mode)) as runner:
            runner.run(main(kind, size, mode, seconds))
    else:
        # on the ring unless told the epoll driver is meant (a refusal
        # must not pass for a figure of the ring)
        epoll = os.environ.get("URINGLOOP_DRIVER") == "epoll"
        uringloop.run(main(kind, size, mode, seconds), strict=not epoll)
