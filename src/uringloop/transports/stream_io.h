/* stream_io.h: the stream transport's recv(2) and send(2), made from C
 * straight into (or from) the bytes objects Python gets: the read modes
 * of transports/stream_readers.pyx, the stream's direct sends
 * (transports/stream.pyx) and sock_recv() (sockops.pyx).  Declared in
 * transports/stream.pxd. */
#ifndef URINGLOOP_STREAM_IO_H
#define URINGLOOP_STREAM_IO_H

#include <Python.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include "read_bytes.h"
#include "ring/buf_ring.h"

/* After a recv(2) into buf brought got bytes, fewer than want: recv(2)
 * into the rest of buf (size bytes in all) for as long as that brings
 * more and want is not reached.  Returns the bytes in buf now; *after
 * is what the caller has to pass on from the last call: 0 (end of
 * stream, which the next read sees again) or -errno (an error, which
 * the kernel reports once); 1 for nothing (none made, or the socket
 * empty for now). */
static Py_ssize_t ul_recv_more(int fd, char *buf, Py_ssize_t got,
                               Py_ssize_t size, Py_ssize_t want,
                               Py_ssize_t *after)
{
    ssize_t more;
    *after = 1;
    while (got < want && got < size) {
        do {
            more = recv(fd, buf + got, (size_t)(size - got), MSG_DONTWAIT);
        } while (more < 0 && errno == EINTR);
        if (more <= 0) {
            if (more == 0)
                *after = 0;
            else if (errno != EAGAIN)
                *after = -errno;
            break;
        }
        got += more;
    }
    return got;
}

/* Receive up to size bytes from fd, without blocking, into a bytes
 * object (ul_bytes_to_fill(): sp's spare or a new one; *room as
 * there): the kernel copies straight into the object Python gets.
 * When that recv(2) brings fewer than want bytes, ul_recv_more() into
 * the same object follows (*first: what the first call brought;
 * *after: as ul_recv_more's).  Returns the object, shrunk to what came
 * (ul_fit_bytes), with *res its length; or None with *res 0 (end of
 * stream) or -errno; NULL (exception set) only when memory ran out. */
static PyObject *ul_recv_stream(int fd, ul_spare_bytes *sp, Py_ssize_t size,
                                Py_ssize_t want, Py_ssize_t *res,
                                Py_ssize_t *first, Py_ssize_t *after,
                                Py_ssize_t *room)
{
    PyObject *b = ul_bytes_to_fill(sp, size, room);
    ssize_t n;
    *after = 1;
    if (b == NULL)
        return NULL;
    do {
        n = recv(fd, PyBytes_AS_STRING(b), (size_t)size, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        *res = *first = n < 0 ? -errno : 0;
        if (sp != NULL)
            ul_bytes_done(sp, b, *room);    /* back, unused */
        Py_DECREF(b);
        Py_RETURN_NONE;
    }
    *first = n;
    n = ul_recv_more(fd, PyBytes_AS_STRING(b), n, size, want, after);
    *res = n;
    if (ul_fit_bytes(&b, n, room) < 0)
        return NULL;
    return b;
}

/* One recv(2) into a new bytes object: ul_recv_stream() with nothing
 * to make up and no spare. */
static PyObject *ul_recv_bytes(int fd, Py_ssize_t size, Py_ssize_t *res)
{
    Py_ssize_t first, after, room;
    return ul_recv_stream(fd, NULL, size, 0, res, &first, &after, &room);
}

/* send(2) without blocking or SIGPIPE: bytes sent, or -errno. */
static Py_ssize_t ul_send_now(int fd, const char *buf, Py_ssize_t len)
{
    ssize_t n;
    do {
        n = send(fd, buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

/* The n bytes a provided buffer of ring received, copied into a bytes
 * object (ul_bytes_to_fill(): sp's spare or a new one, *room as
 * there), the buffer given back to the kernel either way.  When that
 * object cannot be made, returns the MemoryError instead, with *room
 * -1 (no exception left set): the caller, whose bytes are out of the
 * socket, fails the transport with it -- a try/except around the call
 * would save and restore the thread's exception state on every read. */
static PyObject *ul_bytes_from_buf_ring(ul_spare_bytes *sp, ul_buf_ring *ring,
                                        unsigned bid, Py_ssize_t n, Py_ssize_t *room)
{
    PyObject *b;
    if (n == 1) {
        /* CPython's own object for that byte, made once (a spare's
         * block would cost more than it saves) */
        b = PyBytes_FromStringAndSize((const char *)ul_buf_ring_addr(ring, bid), 1);
        *room = 0;
    } else {
        b = ul_bytes_to_fill(sp, n, room);
        if (b != NULL)
            memcpy(PyBytes_AS_STRING(b), ul_buf_ring_addr(ring, bid), (size_t)n);
    }
    ul_buf_ring_recycle(ring, bid);
    if (b == NULL) {
        *room = -1;
#if PY_VERSION_HEX >= 0x030C0000
        b = PyErr_GetRaisedException();
#else
        PyObject *type, *tb;
        PyErr_Fetch(&type, &b, &tb);
        PyErr_NormalizeException(&type, &b, &tb);
        if (tb != NULL)
            PyException_SetTraceback(b, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
#endif
    }
    return b;
}

#endif
