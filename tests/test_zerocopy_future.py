"""ZeroCopyFuture, what write_zerocopy() and sendto_zerocopy() return, is
an asyncio.Future in all but its type.  Each scenario runs once with an
asyncio.Future that the test settles and once with a zero-copy send's
future that the kernel settles, and the two records must agree: what the
methods return and raise, which callbacks run, in which context, how a
task awaiting it is cancelled, and what the loop's exception handler hears
of an exception nobody retrieved."""
import asyncio
import contextvars
import gc
import socket

import pytest

import uringloop

VAR = contextvars.ContextVar("VAR", default="unset")


async def stream_pair(loop):
    server_side = loop.create_future()

    class Keep(asyncio.Protocol):
        def connection_made(self, transport):
            server_side.set_result(transport)

    server = await loop.create_server(Keep, "127.0.0.1", 0)
    transport, _ = await loop.create_connection(asyncio.Protocol,
                                                *server.sockets[0].getsockname())
    transport.peer = await server_side
    return server, transport


async def pending_future(kind, loop, transport):
    """(a pending future, a coroutine function that sees it settled with a
    ZeroCopyResult of 4096 bytes).  The zero-copy send stays pending behind
    8 MiB that the peer does not read until settle()."""
    if kind == "asyncio":
        fut = loop.create_future()

        async def settle():
            await asyncio.sleep(0)
            if not fut.done():     # (the loop, too, leaves a cancelled one be)
                fut.set_result(uringloop.ZeroCopyResult(4096, False))
            await asyncio.sleep(0)
    else:
        transport.peer.pause_reading()
        transport.write(b"x" * (8 << 20))
        fut = transport.write_zerocopy(bytearray(4096))

        async def settle():
            transport.peer.resume_reading()
            for _ in range(5000):
                # (a cancelled future is done at once; the send goes on)
                if fut.done() and transport.get_write_buffer_size() == 0:
                    break
                await asyncio.sleep(0.001)
            await asyncio.sleep(0)
    return fut, settle


def outcome(call):
    try:
        value = call()
    except BaseException as exc:
        return ("raises", type(exc).__name__, str(exc))
    return ("returns", value)


def scenario(body):
    """Run body(kind, loop, transport) -> record for both kinds; compare."""
    records = {}
    for kind in ("asyncio", "zerocopy"):
        async def main():
            loop = asyncio.get_running_loop()
            server, transport = await stream_pair(loop)
            try:
                return await body(kind, loop, transport)
            finally:
                transport.close()
                server.close()
                await server.wait_closed()
        records[kind] = uringloop.run(asyncio.wait_for(main(), 30))
    assert records["zerocopy"] == records["asyncio"]
    return records["zerocopy"]


def test_states_results_and_callbacks_match_asyncio_future():
    async def body(kind, loop, transport):
        log = []
        fut, settle = await pending_future(kind, loop, transport)
        log.append(("isfuture", asyncio.isfuture(fut)))
        log.append(("pending", fut.done(), fut.cancelled(), fut.get_loop() is loop))
        log.append(("result", outcome(fut.result)))
        log.append(("exception", outcome(fut.exception)))

        def callback(name):
            def cb(f):
                log.append(("callback", name, f is fut, VAR.get()))
            return cb
        first, second = callback("first"), callback("second")
        ctx = contextvars.copy_context()
        ctx.run(VAR.set, "in its context")
        fut.add_done_callback(first, context=ctx)
        fut.add_done_callback(second)
        fut.add_done_callback(second)
        log.append(("removed", fut.remove_done_callback(second)))
        log.append(("removed again", fut.remove_done_callback(second)))
        await settle()
        log.append(("done", fut.done(), fut.cancelled(), fut.result(), fut.exception()))
        fut.add_done_callback(callback("late"))
        log.append(("late not yet", [e for e in log if e[:2] == ("callback", "late")]))
        await asyncio.sleep(0)
        log.append(("cancel after done", fut.cancel()))
        log.append(("awaited", await fut))
        log.append(("ensure_future", asyncio.ensure_future(fut) is fut))
        log.append(("gather", await asyncio.gather(fut, asyncio.wait_for(fut, 5))))
        done, _ = await asyncio.wait([fut])
        log.append(("wait", done == {fut}))
        return log

    log = scenario(body)
    assert ("callback", "first", True, "in its context") in log
    assert not [e for e in log if e[:2] == ("callback", "second")]
    assert ("callback", "late", True, "unset") in log


def test_cancelled_while_a_task_awaits_it():
    """task.cancel(msg) reaches the future it waits for, as with a Future;
    a cancelled zero-copy future still keeps its buffer until the kernel
    lets go (the send goes on)."""
    async def body(kind, loop, transport):
        log = []
        fut, settle = await pending_future(kind, loop, transport)

        async def waiter():
            return await fut
        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)
        task.cancel("stop waiting")
        try:
            await task
        except asyncio.CancelledError as exc:
            log.append(("task", "cancelled", exc.args))
        log.append(("future", fut.done(), fut.cancelled()))
        log.append(("result", outcome(fut.result)))
        log.append(("exception", outcome(fut.exception)))
        log.append(("cancel again", fut.cancel()))
        if kind == "zerocopy":
            await settle()          # the send goes on all the same
            assert transport.get_write_buffer_size() == 0
        return log

    log = scenario(body)
    assert ("future", True, True) in log


def test_cancel_with_a_message_and_callbacks():
    async def body(kind, loop, transport):
        log = []
        fut, settle = await pending_future(kind, loop, transport)
        fut.add_done_callback(lambda f: log.append(("callback", f.cancelled())))
        log.append(("cancel", fut.cancel(msg="no longer")))
        log.append(("cancel twice", fut.cancel()))
        log.append(("result", outcome(fut.result)))
        await asyncio.sleep(0)
        await settle()
        log.append(("still cancelled", fut.cancelled()))
        return log

    log = scenario(body)
    assert ("callback", True) in log
    assert ("result", ("raises", "CancelledError", "no longer")) in log


def test_an_unretrieved_exception_reaches_the_exception_handler():
    """A failed send whose exception nobody looked at is reported when the
    future goes, as a Future's is; one that was looked at is not."""
    async def body(kind, loop, transport):
        heard = []
        loop.set_exception_handler(lambda loop, ctx: heard.append(
            (type(ctx.get("exception")).__name__, ctx["message"].split()[1:])))
        error = ConnectionError("the transport is closed")
        for retrieve in (False, True):
            if kind == "asyncio":
                fut = loop.create_future()
                fut.set_exception(error)
            else:
                transport.abort()
                await asyncio.sleep(0)
                fut = transport.write_zerocopy(b"x" * 100)
            assert fut.done()
            if retrieve:
                assert outcome(fut.result)[:2] == ("raises", "ConnectionError")
            del fut
            gc.collect()
            await asyncio.sleep(0)
        loop.set_exception_handler(None)
        return heard

    heard = scenario(body)
    assert heard == [("ConnectionError", ["exception", "was", "never", "retrieved"])]


def test_made_only_by_a_send():
    with pytest.raises(TypeError):
        uringloop.ZeroCopyFuture()


def test_a_datagram_send_returns_one_too():
    async def main():
        loop = asyncio.get_running_loop()
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        receiver.bind(("127.0.0.1", 0))
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=receiver.getsockname())
        fut = transport.sendto_zerocopy(b"d" * 2000)
        assert type(fut) is uringloop.ZeroCopyFuture
        result = await asyncio.wait_for(fut, 5)
        assert result.nbytes == 2000
        assert receiver.recv(4096) == b"d" * 2000
        assert repr(fut).startswith("<ZeroCopyFuture finished 2000 bytes")
        transport.close()
        receiver.close()
    uringloop.run(main())
