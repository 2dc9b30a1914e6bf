"""TLS echo client for bench/run_tls.py: CONNS connections, each sending a
SIZE-byte message and reading the whole echo back before the next, for
SECONDS after a one-second warm-up.  It reads the server's CPU time (from
/proc) at the start and the end of its timed window, as bench/echo_client.c
does, and prints one JSON line in that client's shape.  Runs on uvloop when
it is installed (the load generator should cost the server nothing).

    python3 bench/tls_client.py HOST PORT CONNS SIZE SECONDS SERVER_PID
"""
import asyncio
import json
import ssl
import sys
import time


def server_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


async def connection(host, port, size, state):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    message = bytes(range(256)) * (size // 256) + bytes(size % 256)
    try:
        while not state["stop"]:
            writer.write(message)
            echo = await reader.readexactly(size)
            if echo != message:
                state["errors"] += 1
            if state["timing"]:
                state["requests"] += 1
                state["bytes"] += size
    finally:
        writer.close()


async def main(host, port, conns, size, seconds, pid):
    state = {"stop": False, "timing": False, "requests": 0, "bytes": 0, "errors": 0}
    tasks = [asyncio.create_task(connection(host, port, size, state)) for _ in range(conns)]
    await asyncio.sleep(1.0)                    # handshakes and warm-up
    user0, sys0 = server_ticks(pid)
    print("window", file=sys.stderr, flush=True)     # (run_echo.py --split perf)
    start = time.monotonic()
    state["timing"] = True
    await asyncio.sleep(seconds)
    state["timing"] = False
    elapsed = time.monotonic() - start
    user1, sys1 = server_ticks(pid)
    state["stop"] = True
    await asyncio.wait(tasks, timeout=5)
    print(json.dumps({"requests": state["requests"], "bytes": state["bytes"],
                      "seconds": round(elapsed, 4), "errors": state["errors"],
                      "server_user_ticks": user1 - user0,
                      "server_sys_ticks": sys1 - sys0}))


if __name__ == "__main__":
    host, port, conns, size, seconds, pid = sys.argv[1:7]
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(main(host, int(port), int(conns), int(size), float(seconds), int(pid)))
