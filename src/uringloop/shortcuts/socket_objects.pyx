# socket_objects: accepted sockets made and closed as socket.socket's
# __init__ and close() would, without their Python frames.  Included by
# core.pyx (the switch: SC_SOCKET_OBJECTS, shortcuts/switch.pyx).
#
# socket.socket's __init__ and close() are Python code (two frames each,
# per accepted connection): for the stdlib's own class, as it is, the loop
# takes the same steps itself -- the C socket's __init__ and the two
# attributes; the closed flag, then the C close() unless makefile() holds
# the socket.  A socket.socket replaced or patched (mock.patch.object(
# socket.socket, 'close')) is called as it is.  The steps go straight to
# the type's slots and the attributes' member descriptors (ul_socket_new,
# ul_socket_closing) rather than as Python calls -- __new__ looked up and
# called with a tuple, __init__ through its wrapper, two setattrs (what
# they cost: docs/benchmarks.md, "Behind the comments").
cdef object SocketClass = socket.socket
cdef object socket_init = SocketClass.__init__
cdef object socket_close = SocketClass.close
cdef dict socket_module_dict = socket.__dict__
cdef dict socket_class_dict = <dict>(<PyTypeObject *>SocketClass).tp_dict

cdef extern from "shortcuts/socket_objects.h":
    object ul_socket_new(PyTypeObject *cls, PyTypeObject *base, object args,
                         object io_refs, object closed)
    int ul_socket_closing(object sock, object io_refs, object closed) except -1

cdef object C_SOCKET_CLASS = _socket.socket
cdef object c_socket_close = _socket.socket.close
cdef object SOCKET_IO_REFS = socket_class_dict['_io_refs']      # member descriptors
cdef object SOCKET_CLOSED = socket_class_dict['_closed']


cdef bint socket_class_as_is(str method, object original) except -1:
    """socket.socket is the class it was, with `method` as it was.  (The
    lookups are PyDict_GetItemWithError's: PyDict_GetItem saves and
    restores the thread's exception around each.)"""
    return (PyDict_GetItemWithError(socket_module_dict, 'socket') == <PyObject *>SocketClass
            and PyDict_GetItemWithError(socket_class_dict, method) == <PyObject *>original)


cdef object new_socket_object(int family, int type, int proto, int fd):
    """socket.socket(family, type | SOCK_NONBLOCK, proto, fileno=fd), for
    an fd accept4(2) made non-blocking: the flag makes the object's
    timeout 0.0, as the selector loop's setblocking(False) does, without
    a system call (sock.type leaves it out); without it the timeout was
    socket.getdefaulttimeout()."""
    type |= SOCK_NONBLOCK
    if not SC_SOCKET_OBJECTS or not socket_class_as_is('__init__', socket_init):
        return socket.socket(family, type, proto, fileno=fd)
    return ul_socket_new(<PyTypeObject *>SocketClass, <PyTypeObject *>C_SOCKET_CLASS,
                         (family, type, proto, fd), SOCKET_IO_REFS, SOCKET_CLOSED)


cdef int close_socket_object(object sock) except -1:
    """sock.close()."""
    if (not SC_SOCKET_OBJECTS or type(sock) is not SocketClass
            or not socket_class_as_is('close', socket_close)):
        sock.close()
    elif ul_socket_closing(sock, SOCKET_IO_REFS, SOCKET_CLOSED):
        c_socket_close(sock)
    return 0
