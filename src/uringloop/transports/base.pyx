# BaseTransport: what every uringloop transport shares -- extra info, the
# close sequence, and the rule that the fd is not closed while a request of
# ours may still name it (an SQE still queued resolves the fd number only when
# it is submitted; a reused number would point it at another file).


# asyncio.Server keeps its transports (for close_clients()) from 3.13 on:
# _attach(transport) / _detach(transport) instead of a bare count.
cdef bint SERVER_KNOWS_TRANSPORTS = sys.version_info >= (3, 13)

# CPython 3.15's socket transports keep one context (the one the loop gives
# them) and schedule connection_made(), their reads and connection_lost()
# all in it; before, connection_made() and connection_lost() each ran in a
# copy of the context current when they were scheduled.  Asked of the
# stdlib itself, so a backport is followed too.
cdef bint STDLIB_TRANSPORT_CONTEXT = (
    'context' in inspect.signature(selector_events._SelectorTransport.__init__).parameters)


cdef inline object handle_context(BaseTransport tr):
    """The context a transport's connection_made()/connection_lost() handle
    runs in: None for a copy of the current one, as before 3.15."""
    return tr.context if tr.shared_context else None

# Before 3.13 _attach() and _detach() only count (two Python frames per
# connection): for the stdlib's Server, as it is, the loop counts itself,
# and calls them where they do more (the last connection of a closed
# server wakes wait_closed()) or where they would fail their asserts.
cdef object ServerClass = base_events.Server
cdef object server_attach = ServerClass._attach
cdef object server_detach = ServerClass._detach


cdef int attach_to_server(object server, object transport) except -1:
    if SERVER_KNOWS_TRANSPORTS:
        server._attach(transport)
    elif (type(server) is ServerClass and ServerClass._attach is server_attach
            and server._sockets is not None):
        server._active_count += 1
    else:
        server._attach()
    return 0


def call_connection_lost(BaseTransport transport not None, exc):
    """What the loop schedules where the stdlib's transports schedule their
    _call_connection_lost(exc)."""
    transport.connection_lost_now(exc)


cdef int detach_from_server(object server, object transport) except -1:
    if SERVER_KNOWS_TRANSPORTS:
        server._detach(transport)
        return 0
    if type(server) is ServerClass and ServerClass._detach is server_detach:
        count = server._active_count
        if count > 1 or (count == 1 and server._sockets is not None):
            server._active_count = count - 1
            return 0
    server._detach()
    return 0


# Transports are made by the loop only (make_transport): one made from
# Python with __new__ alone would have no loop, socket or requests, and its
# methods would reach through NULL.
cdef bint making_transport = False


cdef inline int check_move(int moves, int to, const char *message) except -1:
    """The debug build's check of a state machine's move: `moves`, the
    bits of the states the current one may go to (a transport's table),
    must have `to`'s; else the process stops with `message`.  Nothing in
    the normal build."""
    if UL_DEBUG_BUILD and not (moves & (1 << to)):
        Py_FatalError(message)
    return 0


cdef object make_transport(type cls):
    global making_transport
    making_transport = True
    try:
        return cls.__new__(cls)
    finally:
        making_transport = False


cdef class BaseTransport:

    def __cinit__(self):
        if not making_transport:
            raise TypeError("transports are made by the loop")
        self.made_by_loop = True
        UL_COUNT(UL_LIVE_TRANSPORTS, 1)

    def __dealloc__(self):
        if self.made_by_loop:
            UL_COUNT(UL_LIVE_TRANSPORTS, -1)
        if self.counts != NULL:
            self.counts.transports -= 1
            ul_loop_counts_release(self.counts)
            self.counts = NULL

    def __init__(self, *args, **kwargs):
        raise TypeError("transports are made by the loop")

    cdef int count_in(self, RingLoop loop) except -1:
        """Belong to loop: set self.loop and count this transport in the
        loop's stats()['transports'] until it is collected."""
        self.loop = loop
        if self.counts == NULL and loop.counts != NULL:
            self.counts = loop.counts
            self.counts.refs += 1
            self.counts.transports += 1
        return 0

    @cython.final
    cdef int op_started(self) except -1:
        self.ops_pending += 1
        return 0

    @cython.final
    cdef int op_finished(self) except -1:
        self.ops_pending -= 1
        if self.ops_pending == 0:
            if self.sock_close_pending:
                self.sock_close_pending = False
                if self.sock is not None:
                    close_socket_object(self.sock)
            if self.lost_reported:
                self.release_ops()
        return 0

    cdef int close_socket(self) except -1:
        if self.ops_pending:
            # closed by the completion that brings ops_pending to 0, which
            # settle() dispatches now where the kernel lets go at once
            self.sock_close_pending = True
            self.loop.settle(self)
        elif self.sock is not None:
            close_socket_object(self.sock)
        return 0

    cdef int stop_io(self) except -1:
        """Cancel reading and writing requests (transport-specific)."""
        return 0

    cdef int enter_closed(self) except -1:
        """Move the transport's state values to their closed states, as
        `closing` is set: stop_io() does it first, and closed_with_loop()
        for a transport whose loop closed under it (transport-specific)."""
        return 0

    cdef int flush_sends(self) except -1:
        """The loop's hook before its io_uring_enter, for a transport that
        put itself in loop.send_flushes: write the send requests for what
        was written since (transport-specific)."""
        return 0

    cdef int release_ops(self) except -1:
        """Connection lost and no request in flight: let the operations
        go of the transport, so that the two, which hold each other, are
        freed by their reference counts as the selector loop's transports
        are (transport-specific; every path that could arm an operation
        again checks `closing` or `conn_lost` first)."""
        return 0

    # -- write flow control, as asyncio's _FlowControlMixin ---------------

    @cython.final
    cdef int maybe_pause_protocol(self) except -1:
        if (self.write_buffer_size - self.presumed_sent <= self.high_water
                or self.protocol_paused):
            return 0
        return self.pause_protocol()

    cdef int pause_protocol(self) except -1:
        """(maybe_pause_protocol(), apart: a call's temporaries are set
        up on every call of the function they are written in)"""
        self.protocol_paused = True
        try:
            self.protocol.pause_writing()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.loop.call_exception_handler({
                'message': 'protocol.pause_writing() failed',
                'exception': exc,
                'transport': self,
                'protocol': self.protocol,
            })
        return 0

    @cython.final
    cdef int maybe_resume_protocol(self) except -1:
        if (not self.protocol_paused
                or self.write_buffer_size - self.presumed_sent > self.low_water):
            return 0
        return self.resume_protocol()

    cdef int resume_protocol(self) except -1:
        self.protocol_paused = False
        try:
            self.protocol.resume_writing()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.loop.call_exception_handler({
                'message': 'protocol.resume_writing() failed',
                'exception': exc,
                'transport': self,
                'protocol': self.protocol,
            })
        return 0

    cdef int set_limits(self, object high, object low) except -1:
        if high is None and low is None:        # (every new transport)
            self.high_water = DEFAULT_HIGH_WATER
            self.low_water = DEFAULT_HIGH_WATER // 4
            return 0
        if high is None:
            high = DEFAULT_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f'high ({high!r}) must be >= low ({low!r}) must be >= 0')
        # the stdlib takes any number: a limit beyond what can be queued
        # (2**63, inf) means no limit; a float is taken whole
        self.high_water = PY_SSIZE_T_MAX if high >= PY_SSIZE_T_MAX else int(high)
        self.low_water = PY_SSIZE_T_MAX if low >= PY_SSIZE_T_MAX else int(low)
        return 0

    def set_write_buffer_limits(self, high=None, low=None):
        self.set_limits(high, low)
        self.maybe_pause_protocol()

    def get_write_buffer_limits(self):
        return (self.low_water, self.high_water)

    def get_write_buffer_size(self):
        """Bytes queued and not yet confirmed written by the kernel, but
        for small writes to an idle stream that the iteration's submit
        hands the kernel (the selector loop's write() sent those itself:
        they were never buffered there; stream.pyx, flow control)."""
        return self.write_buffer_size - self.presumed_sent

    @property
    def _protocol_paused(self):
        return self.protocol_paused

    # -- asyncio.BaseTransport -------------------------------------------

    def get_extra_info(self, name, default=None):
        """Information about the transport: 'socket' (a TransportSocket),
        'sockname', 'peername', and what its kind adds."""
        return default if self.extra is None else self.extra.get(name, default)

    def is_closing(self):
        return self.closing

    def set_protocol(self, protocol):
        self.protocol = protocol

    def get_protocol(self):
        return self.protocol

    cdef bint socket_holds_fd(self) except -1:
        """The socket object still holds this transport's fd, so a direct
        send(2) on self.fd reaches this connection (once the user closed
        the socket, the number may name another file)."""
        return self.sock is not None and self.sock.fileno() == self.fd

    cdef bint closed_with_loop(self) except -1:
        """The loop is closed (its ring too, so no request of ours is left
        to name the fd): just close the file.  (The loop's `_closed`, which
        is_closed() returns, read directly: a Python method call on every
        connection's close path; docs/benchmarks.md, "Figures behind the
        code's constants".)"""
        if not self.loop._closed:
            return False
        self.closing = True
        self.enter_closed()
        self.sock_close_pending = False
        if self.sock is not None:
            self.sock.close()
        return True

    def close(self):
        """Close the transport: buffered data is still sent, then
        protocol.connection_lost(None) is called."""
        if self.closing or self.closed_with_loop():
            return
        self.closing = True
        self.stop_io()
        self.conn_lost += 1
        self.loop.soon(call_connection_lost, (self, None), handle_context(self))

    def abort(self):
        """Close at once; buffered data is lost."""
        self.force_close(None)

    def _force_close(self, exc):
        # sslproto.SSLProtocol closes its transport through this name.
        self.force_close(exc)

    cdef int fatal_error(self, object exc, str message) except -1:
        if isinstance(exc, OSError):
            if self.loop._debug:
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self.loop.call_exception_handler({
                'message': message,
                'exception': exc,
                'transport': self,
                'protocol': self.protocol,
            })
        self.force_close(exc)
        return 0

    cdef int force_close(self, object exc) except -1:
        if self.conn_lost or self.closed_with_loop():
            return 0
        self.closing = True
        self.stop_io()
        self.conn_lost += 1
        self.loop.soon(call_connection_lost, (self, exc), handle_context(self))
        return 0

    def _call_connection_lost(self, exc):
        self.connection_lost_now(exc)

    cdef int connection_lost_now(self, object exc) except -1:
        """protocol.connection_lost(exc), then the socket closed and the
        transport let go of its server, requests and protocol.  Scheduled
        as call_connection_lost(transport, exc), a module function: the
        bound method `self._call_connection_lost` was made for each
        handle (and StreamTransport's reached this one through a lookup on
        the class; docs/benchmarks.md, "Figures behind the code's
        constants")."""
        try:
            if self.protocol_connected:
                self.protocol.connection_lost(exc)
        finally:
            self.close_socket()
            # the requests' back-references go with the last of them
            # (op_finished() when some are still in flight)
            self.lost_reported = True
            if not self.ops_pending:
                self.release_ops()
            self.protocol = None
            server = self.server
            if server is not None:
                self.server = None
                detach_from_server(server, self)
        return 0

    @property
    def _loop(self):
        return self.loop

    @property
    def _pipe(self):
        # the stdlib's pipe transports' name for the pipe object; setting it
        # to None (as CPython's tests do) detaches the transport from it
        if (self.extra is None or 'pipe' not in self.extra or self.sock is None
                or _is_closed(self.sock)):
            return None
        return self.sock

    @_pipe.setter
    def _pipe(self, value):
        if value is None:
            self.sock = None

    @property
    def _sock(self):
        return self.sock

    @property
    def _sock_fd(self):
        return self.fd

    cdef int register(self) except -1:
        # A plain dict of weak references (a WeakValueDictionary costs a
        # Python-level call per connection); an entry may outlive its
        # transport until the fd is used again: a dead or closing transport
        # does not hold its fd (_ensure_fd_no_transport).
        self.loop._transports[self.fd] = PyWeakref_NewRef(self, None)
        return 0

    def __del__(self):
        if self.sock is not None and not self.closing and not _is_closed(self.sock):
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            if not self.ops_pending:
                self.sock.close()

    def __repr__(self):
        state = 'closing' if self.closing else 'open'
        return f'<{type(self).__name__} fd={self.fd} {state}>'


# isinstance() targets.  The transports are Cython types and cannot inherit
# from asyncio's Python transport classes, yet code (CPython's tests,
# sendfile's fall-back protocol, users) checks isinstance(t, asyncio.Transport).
# Each transport reports one of these as its __class__ -- the mechanism
# unittest.mock uses for spec'd mocks -- so those checks hold as for the
# stdlib's transports.  type(t) still gives the real type; no instance of
# these classes is ever made.
class AsyncioStreamTransport(transports._FlowControlMixin, transports.Transport):
    __slots__ = ()


class AsyncioDatagramTransport(transports._FlowControlMixin, transports.DatagramTransport):
    __slots__ = ()


class AsyncioReadPipeTransport(transports.ReadTransport):
    __slots__ = ()


class AsyncioWritePipeTransport(transports._FlowControlMixin, transports.WriteTransport):
    __slots__ = ()


# A C global, not the module's warnings.warn: a transport collected while
# the interpreter finalizes may find the module's dict cleared (the
# stdlib's transports bind it as a default argument for the same reason).
cdef object _warn = warnings.warn


cdef bint _is_closed(object fileobj):
    closed = getattr(fileobj, 'closed', None)    # file objects
    if closed is not None:
        return closed
    return fileobj.fileno() == -1                 # sockets


# socket.socket's family and type properties make an enum member each time
# (a Python-level call); the _socket base type's members are the
# plain ints.  A socket-like object of another type answers as it can.
cdef object RAW_FAMILY = _socket.socket.__dict__['family']
cdef object RAW_TYPE = _socket.socket.__dict__['type']


cdef int socket_family(object sock) except? -1:
    if isinstance(sock, _socket.socket):
        return RAW_FAMILY.__get__(sock)
    return sock.family


cdef int socket_type(object sock) except? -1:
    if isinstance(sock, _socket.socket):
        return RAW_TYPE.__get__(sock) & 0xf      # SOCK_TYPE_MASK
    return sock.type


cdef int set_nodelay(object sock, int fd, int family, int type, int proto=-1) except -1:
    """TCP_NODELAY on a TCP socket, as asyncio's _set_nodelay() sets it for
    every stream transport (that helper is Python); `proto`
    sock.proto when known (-1: asked)."""
    cdef int one = 1
    if ((family == AF_INET or family == AF_INET6) and type == SOCK_STREAM
            and (proto if proto >= 0 else sock.proto) == IPPROTO_TCP):
        if setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0:
            raise OSError(errno, os.strerror(errno))
    return 0


cdef object peer_name(object sock):
    """sock.getpeername(), or None when it is not connected."""
    try:
        return sock.getpeername()
    except OSError:
        return None


cdef tuple socket_names(object sock, object extra):
    """(sockname, peername) of sock; a peername already in extra (the
    SSL accept path has it) is kept."""
    try:
        sockname = sock.getsockname()
    except OSError:
        sockname = None
    if extra is not None and 'peername' in extra:
        return sockname, extra['peername']
    return sockname, peer_name(sock)


cdef int renew_read_method(BaseTransport tr, object protocol, str name) noexcept:
    """Look protocol.<name> up again for the transport's read_method
    (look_up_method()): what method_kept() says of it now, 1 or 0."""
    tr.read_method = look_up_method(&tr.read_method_check, protocol, name)
    return method_kept(&tr.read_method_check, protocol, name) > 0


cdef inline int read_method_kept(BaseTransport tr, object protocol, str name) noexcept:
    """1 when tr.read_method is what protocol.<name> finds (looked up again
    first if the check says so), 0 when the call must make the lookup.  For
    the one protocol method each read calls: data_received,
    datagram_received or buffer_updated."""
    cdef int kept = method_kept(&tr.read_method_check, protocol, name)
    return kept if kept >= 0 else renew_read_method(tr, protocol, name)


cdef inline int read_method_status(BaseTransport tr, object protocol, str name,
                                   object arg) noexcept:
    """protocol.<name>(arg) for a read callback of one argument
    (data_received, buffer_updated): the function kept in tr.read_method
    while read_method_kept() says the lookup would find it still, else
    the call through the lookup.  0, or -1 with what it raised set, for
    raised_exception()."""
    if read_method_kept(tr, protocol, name):
        method = tr.read_method      # (a reference of its own for the call)
        return ul_mc_call2_status(method, protocol, arg)
    return ul_mc_method2_status(protocol, name, arg)


cdef inline bint call_data_received(BaseTransport tr, object data) except -1:
    """tr.protocol.data_received(data), as the stdlib's transports call it:
    anything but SystemExit/KeyboardInterrupt it raises is the transport's
    fatal error.  False then.  (Inline: it is on every read's path.)
    The method is kept (read_method_status()): the lookup was the largest
    cost left of a 10 KiB echo request (docs/benchmarks.md, "The kept
    data_received")."""
    if read_method_status(tr, tr.protocol, 'data_received', data) == 0:
        return True
    return protocol_call_failed(tr, 'Fatal error: protocol.data_received() call failed.')


cdef object raised_exception():
    """The exception a protocol method called through a ul_mc_*_status()
    call (read_method_status()) left set, taken up and returned;
    SystemExit and KeyboardInterrupt go on.  (Out of the callers' way: their try block
    is set up only when the call failed.)"""
    try:
        ul_mc_raised()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        return exc


cdef bint protocol_call_failed(BaseTransport tr, str message) except -1:
    """A stream's read callback raised (raised_exception()): the
    transport's fatal error, as the stdlib's stream transports treat it.
    False."""
    tr.fatal_error(raised_exception(), message)
    return False


cdef int report_callback_error(BaseTransport tr, object exc, str name) except -1:
    """What the protocol's `name` callback raised where the selector loop
    calls it outside its _read_ready()'s try block (datagram_received(),
    a read pipe's data_received()): to the exception handler, as its
    Handle reports it ('Exception in callback ...'), and the transport
    reads on.  The protocol is named by its type, whose repr cannot
    raise."""
    protocol = tr.protocol
    tr.loop.call_exception_handler({
        'message': f'Exception in callback {type(protocol).__qualname__}.{name}()',
        'exception': exc,
        'transport': tr,
        'protocol': protocol,
    })
    return 0


cdef dict socket_extra(object sock, object extra):
    cdef dict info = {} if extra is None else dict(extra)
    info['socket'] = trsock.TransportSocket(sock)
    info['sockname'], info['peername'] = socket_names(sock, extra)
    return info
