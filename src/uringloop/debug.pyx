# The debug build's checks (-DURINGLOOP_DEBUG, debug.h): live-object
# counters the tests read after each test, and the rules whose breach
# stops the process.  In the normal build the counters compile to nothing.
# Included by core.pyx.

cdef extern from "debug.h":
    int UL_DEBUG_BUILD
    int UL_LIVE_KINDS
    enum:
        UL_LIVE_LOOPS
        UL_LIVE_LOOP_FDS
        UL_LIVE_OPERATIONS
        UL_LIVE_TRANSPORTS
        UL_LIVE_BUFFER_VIEWS
        UL_LIVE_POOL_REGIONS
        UL_LIVE_REGISTERED_BUFFERS
        UL_LIVE_ZCRX_PIECES
    void UL_COUNT(int kind, long delta)
    long UL_LIVE(int kind)

cdef extern from "Python.h":
    void Py_FatalError(const char *message) noexcept


def debug_counters():
    """The debug build's live-object counters (see debug.h), or None in the
    normal build.  After a loop is closed and collected every one is 0."""
    if not UL_DEBUG_BUILD:
        return None
    return {
        'loops': UL_LIVE(UL_LIVE_LOOPS),
        'loop_fds': UL_LIVE(UL_LIVE_LOOP_FDS),
        'operations': UL_LIVE(UL_LIVE_OPERATIONS),
        'transports': UL_LIVE(UL_LIVE_TRANSPORTS),
        'buffer_views': UL_LIVE(UL_LIVE_BUFFER_VIEWS),
        'pool_regions': UL_LIVE(UL_LIVE_POOL_REGIONS),
        'registered_buffers': UL_LIVE(UL_LIVE_REGISTERED_BUFFERS),
        'zcrx_pieces': UL_LIVE(UL_LIVE_ZCRX_PIECES),
    }


def _break_a_rule(str rule):
    """Tests of the debug build only (tests/test_life_cycle_checks.py):
    break one of the rules the debug build checks, which stops the process
    with Py_FatalError, as a bug that broke it would.  Raises RuntimeError
    in the normal build, which does not check (and would corrupt memory)."""
    cdef RingLoop loop
    cdef Operation op
    cdef StreamTransport tr
    if not UL_DEBUG_BUILD:
        raise RuntimeError('only the debug build checks these rules')
    loop = Loop()
    op = Operation.__new__(Operation)
    op.loop = loop
    if rule == 'submitted twice':
        ul_prep_nop(loop.sqe_for(op))
        ul_prep_nop(loop.sqe_for(op))
    elif rule == 'completed twice':
        loop.dispatch(op, 0, 0)
    elif rule == 'cancelled idle':
        set_life(op, OP_CANCELLING)         # a cancel of no request
    elif rule in ('read state', 'send state'):
        a, b = socket.socketpair()
        a.setblocking(False)
        tr = loop._make_socket_transport(a, protocols.Protocol())
        if rule == 'read state':
            tr.abort()                          # -> READ_CLOSED
            tr.set_read_state(READ_ON)          # a closed transport reads again
        else:
            tr.set_send_state(SEND_SENDING)     # a send never written from idle
    else:
        raise ValueError(f'no such rule: {rule!r}')
    raise AssertionError(f'the debug build did not stop at {rule!r}')


cdef inline int hold_view(object obj, Py_buffer *view, int flags) except -1:
    """PyObject_GetBuffer, counted in the debug build; pair with drop_view."""
    PyObject_GetBuffer(obj, view, flags)
    UL_COUNT(UL_LIVE_BUFFER_VIEWS, 1)
    return 0


cdef inline void drop_view(Py_buffer *view) noexcept:
    PyBuffer_Release(view)
    UL_COUNT(UL_LIVE_BUFFER_VIEWS, -1)
