/* socket_objects.h: socket.socket objects made and closed without
 * socket.py's Python (the socket_objects shortcut; the switch and what it
 * assumes: shortcuts/switch.pyx; the callers: shortcuts/socket_objects.pyx). */
#ifndef URINGLOOP_SOCKET_OBJECTS_H
#define URINGLOOP_SOCKET_OBJECTS_H

#include <Python.h>
#include "structmember.h"   /* PyMember_GetOne/SetOne (3.11) */

/* socket.socket(family, type, proto, fileno) for the class as it is:
 * its tp_new (the C socket's, inherited), the C socket's own tp_init
 * (socket.socket's is slot_tp_init, which calls its Python __init__),
 * then what that __init__ sets: _io_refs = 0, _closed = False, through
 * the slots' member descriptors. */
static PyObject *ul_socket_new(PyTypeObject *cls, PyTypeObject *base,
                               PyObject *args, PyObject *io_refs,
                               PyObject *closed)
{
    PyObject *no_args = PyTuple_New(0), *zero = PyLong_FromLong(0), *sock = NULL;
    if (no_args == NULL || zero == NULL)
        goto done;
    sock = cls->tp_new(cls, no_args, NULL);
    if (sock == NULL)
        goto done;
    if (base->tp_init(sock, args, NULL) < 0
            || PyMember_SetOne((char *)sock,
                               ((PyMemberDescrObject *)io_refs)->d_member, zero) < 0
            || PyMember_SetOne((char *)sock,
                               ((PyMemberDescrObject *)closed)->d_member,
                               Py_False) < 0)
        Py_CLEAR(sock);
done:
    Py_XDECREF(no_args);
    Py_XDECREF(zero);
    return sock;
}

/* socket.socket.close() as written: the closed flag, then the C
 * close() unless makefile()'s objects still hold the socket.
 * 1: close it (the caller calls the C close()); 0: not yet; -1: error */
static int ul_socket_closing(PyObject *sock, PyObject *io_refs,
                             PyObject *closed)
{
    PyObject *refs, *zero;
    int held;
    if (PyMember_SetOne((char *)sock, ((PyMemberDescrObject *)closed)->d_member,
                        Py_True) < 0)
        return -1;
    refs = PyMember_GetOne((char *)sock, ((PyMemberDescrObject *)io_refs)->d_member);
    if (refs == NULL)
        return -1;
    zero = PyLong_FromLong(0);
    held = zero == NULL ? -1 : PyObject_RichCompareBool(refs, zero, Py_GT);
    Py_DECREF(refs);
    Py_XDECREF(zero);
    return held < 0 ? -1 : !held;
}

#endif
