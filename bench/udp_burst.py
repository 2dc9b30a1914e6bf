"""Busy sendto() on one UDP transport over loopback for 2 s: datagrams/s and
io_uring_enter calls per datagram.   python3 bench/udp_burst.py SIZE"""
import asyncio, socket, time, uringloop, sys
async def main():
    loop = asyncio.get_running_loop()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(('127.0.0.1', 0))
    tr, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=rx.getsockname())
    payload = bytes(int(sys.argv[1]))
    s0 = loop.stats(); t0 = time.perf_counter(); n = 0
    while time.perf_counter() - t0 < 2:
        for _ in range(64):                 # direct sends never fill the buffer
            if tr.get_write_buffer_size() >= 1 << 20:
                break
            tr.sendto(payload); n += 1
        while tr.get_write_buffer_size() > 1 << 18:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
    while tr.get_write_buffer_size():
        await asyncio.sleep(0)
    dt = time.perf_counter() - t0
    s1 = loop.stats()
    print(f"{n/dt:.0f} datagrams/s, enters/datagram {(s1['enter_calls']-s0['enter_calls'])/n:.3f}", tr.get_extra_info("zerocopy"))
    tr.close()
uringloop.run(main())
