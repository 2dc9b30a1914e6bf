# Unix stream sockets for Loop: create_unix_connection() and
# create_unix_server(), as the stdlib's Unix loop has them.  Included by
# core.pyx; Loop takes the methods below as they are.


def _reject_ssl_only(**arguments):
    for name, value in arguments.items():
        if value is not None:
            raise ValueError(f'{name} is only meaningful with ssl')


def _check_unix_stream_socket(sock):
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ValueError(f'A UNIX Domain Stream Socket was expected, got {sock!r}')


def _remove_stale_unix_socket(path):
    # stat(2) and unlink(2) called directly, as the stdlib calls os.stat and
    # os.remove: a checker of blocking calls in the loop (blockbuster, in
    # aiohttp's and anyio's suites) allows them in asyncio's own
    # create_unix_server and would flag them here.
    cdef struct_stat st
    cdef bytes raw = os.fsencode(path)
    cdef int code
    try:
        if c_stat(raw, &st) != 0 or (S_ISSOCK(st.st_mode) and c_unlink(raw) != 0):
            code = errno
            raise OSError(code, os.strerror(code), path)
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.error('Unable to check or remove stale UNIX socket %r: %r', path, err)


cdef object path_inode(object path):
    """The inode of the file at path, or None when there is none: stat(2)
    called directly, as _remove_stale_unix_socket() does (the stdlib's
    os.stat would be flagged here)."""
    cdef struct_stat st
    cdef int code
    if c_stat(os.fsencode(path), &st) == 0:
        return st.st_ino
    code = errno
    if code == _errno.ENOENT:
        return None
    raise OSError(code, os.strerror(code), path)


async def create_unix_connection(self, protocol_factory, path=None, *,
                                 ssl=None, sock=None, server_hostname=None,
                                 ssl_handshake_timeout=None,
                                 ssl_shutdown_timeout=None):
    """Connect to the Unix stream socket at path (or use sock);
    (transport, protocol).  Raises ValueError for inconsistent
    arguments, OSError when the connection fails."""
    if server_hostname is not None and not isinstance(server_hostname, str):
        raise TypeError("server_hostname must be a str")
    if ssl:
        if server_hostname is None:
            raise ValueError('you have to pass server_hostname when using ssl')
    else:
        _reject_ssl_only(server_hostname=server_hostname,
                         ssl_handshake_timeout=ssl_handshake_timeout,
                         ssl_shutdown_timeout=ssl_shutdown_timeout)
    if path is not None:
        if sock is not None:
            raise ValueError('path and sock can not be specified at the same time')
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
        try:
            sock.setblocking(False)
            await self.sock_connect(sock, os.fspath(path))
        except BaseException:
            sock.close()
            raise
    else:
        if sock is None:
            raise ValueError('no path and sock were specified')
        _check_unix_stream_socket(sock)
        sock.setblocking(False)
    return await self._create_connection_transport(
        sock, protocol_factory, ssl, server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout)


async def _create_unix_server(self, protocol_factory, path, sock, backlog, ssl,
                              ssl_handshake_timeout, ssl_shutdown_timeout,
                              start_serving, cleanup_socket):
    """Serve on a Unix stream socket bound to path (a stale socket file
    there is replaced; a path starting with NUL is abstract) or on
    sock.  Returns an asyncio Server.  With cleanup_socket (3.13 on),
    closing the server removes the socket's file, if it is still the
    one it bound."""
    if isinstance(ssl, bool):
        raise TypeError('ssl argument must be an SSLContext or None')
    if not ssl:
        _reject_ssl_only(ssl_handshake_timeout=ssl_handshake_timeout,
                         ssl_shutdown_timeout=ssl_shutdown_timeout)
    if path is not None:
        if sock is not None:
            raise ValueError('path and sock can not be specified at the same time')
        path = os.fspath(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if path[0] not in (0, '\x00'):
            _remove_stale_unix_socket(path)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            if exc.errno == _errno.EADDRINUSE:
                raise OSError(_errno.EADDRINUSE,
                              f'Address {path!r} is already in use') from None
            raise
        except BaseException:
            sock.close()
            raise
    else:
        if sock is None:
            raise ValueError('path was not specified, and no sock specified')
        _check_unix_stream_socket(sock)
    if cleanup_socket:
        name = sock.getsockname()
        if name and name[0] not in (0, '\x00'):       # not abstract
            inode = path_inode(name)
            if inode is not None:
                unix_server_sockets(self)[sock] = inode
    sock.setblocking(False)
    server = base_events.Server(self, [sock], protocol_factory, ssl, backlog,
                                ssl_handshake_timeout, ssl_shutdown_timeout)
    if start_serving:
        server._start_serving()
        await asyncio.sleep(0)
    return server


cdef dict unix_server_sockets(loop):
    """The loop's {listening socket: inode of its file} to remove when
    the server stops (create_unix_server's cleanup_socket)."""
    sockets = loop.__dict__.get('_unix_server_sockets')
    if sockets is None:
        sockets = loop.__dict__['_unix_server_sockets'] = {}
    return sockets


cdef int unlink_unix_server_socket(object loop, object sock, object path) except -1:
    """After sock stopped serving: remove its file if it is still the one
    it bound (the stdlib's _stop_serving on 3.13 on)."""
    inode = unix_server_sockets(loop).pop(sock)
    try:
        if path_inode(path) == inode and c_unlink(os.fsencode(path)) != 0:
            code = errno
            if code != _errno.ENOENT:
                raise OSError(code, os.strerror(code), path)
    except OSError as err:
        logger.error('Unable to clean up listening UNIX socket %r: %r', path, err)
    return 0


# the stdlib's signature on each version: cleanup_socket came with 3.13
if sys.version_info >= (3, 13):
    async def create_unix_server(self, protocol_factory, path=None, *,
                                 sock=None, backlog=100, ssl=None,
                                 ssl_handshake_timeout=None,
                                 ssl_shutdown_timeout=None,
                                 start_serving=True, cleanup_socket=True):
        """Serve on a Unix stream socket (see _create_unix_server)."""
        return await _create_unix_server(
            self, protocol_factory, path, sock, backlog, ssl, ssl_handshake_timeout,
            ssl_shutdown_timeout, start_serving, cleanup_socket)
else:
    async def create_unix_server(self, protocol_factory, path=None, *,
                                 sock=None, backlog=100, ssl=None,
                                 ssl_handshake_timeout=None,
                                 ssl_shutdown_timeout=None,
                                 start_serving=True):
        """Serve on a Unix stream socket (see _create_unix_server)."""
        return await _create_unix_server(
            self, protocol_factory, path, sock, backlog, ssl, ssl_handshake_timeout,
            ssl_shutdown_timeout, start_serving, False)
