"""Run inside a network namespace by tests/test_ecosystem.py: gunicorn -w 2
--reuse-port (each worker listens on a socket of its own, in one
SO_REUSEPORT group) with uringloop's aiohttp worker, then one scenario;
prints one JSON line.

    python3 reuseport_probe.py spread|term|kill PORT [WORKER_CLASS]

spread:    the listening sockets on PORT, and which worker served each of
           64 connections.
term/kill: one worker is stopped (SIGSTOP), 40 connections each send a
           request, then that worker is told to exit (SIGTERM and SIGCONT:
           its loop closes its server) or killed: how many got their
           answer.  Those queued on its socket move to another listener
           where net.ipv4.tcp_migrate_req is 1, and are reset otherwise.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, os.pardir, "apps")
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "bench"))
from run_gunicorn import stop, worker_pids  # noqa: E402  (the gunicorn benchmark's)


def listeners(port):
    """LISTEN sockets bound to port, counted from /proc/net/tcp."""
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
                n += 1
    return n


def ask(sock):
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.rsplit(b"\r\n\r\n", 1)[1].split()[0].decode()


def main():
    scenario, port = sys.argv[1], int(sys.argv[2])
    worker = sys.argv[3] if len(sys.argv) > 3 else "uringloop.gunicorn.UringWebWorker"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "aiohttp_app:make_app",
         "-k", worker, "-w", "2", "--reuse-port",
         "-b", f"127.0.0.1:{port}", "--graceful-timeout", "5", "--timeout", "60"],
        cwd=APPS, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pids = worker_pids(proc.pid)
            if len(pids) == 2 and listeners(port) == 2:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                        s.settimeout(5)
                        ask(s)
                    time.sleep(0.5)     # the other worker's listener too
                    break
                except OSError:
                    pass
            time.sleep(0.1)
        else:
            raise SystemExit("gunicorn did not start: " + proc.stderr.read()[-2000:])
        pids = worker_pids(proc.pid)
        if scenario == "spread":
            served = {}
            socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(64)]
            for s in socks:
                s.settimeout(10)
                pid = ask(s)
                served[pid] = served.get(pid, 0) + 1
                s.close()
            out = {"listeners": listeners(port), "served": served}
        else:
            stopped = pids[0]
            os.kill(stopped, signal.SIGSTOP)
            socks = []
            for _ in range(40):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                socks.append(s)
            time.sleep(0.3)
            if scenario == "kill":
                os.kill(stopped, signal.SIGKILL)
            else:
                os.kill(stopped, signal.SIGTERM)
                os.kill(stopped, signal.SIGCONT)
            answered, failed = 0, []
            for s in socks:
                s.settimeout(20)
                data = b""
                try:
                    while True:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except OSError as exc:
                    failed.append(type(exc).__name__)
                else:
                    if b" 200 " in data:
                        answered += 1
                    else:
                        failed.append(repr(data[:40]))
                s.close()
            out = {"listeners": listeners(port), "answered": answered, "failed": failed}
        print(json.dumps(out), flush=True)
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
