# handle_slots: asyncio.Handle made and run at its slots' offsets.
# Included by core.pyx (shortcuts/switch.pyx has the switch, SC_HANDLE_SLOTS).
#
# call_soon makes a Handle per callback, and Handle.__init__ (Python) was
# half of call_soon's cost.  Outside debug mode it only stores seven slots,
# so new_handle() allocates the instance and stores them itself, at the
# offsets of Handle's slot descriptors -- the same object, made the same
# way, without the frame.  setup_fast_handles() checks the layout it relies
# on and compares one handle made each way; on any difference (another
# Python, a patched Handle) call_soon keeps calling Handle().

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    object PyType_GenericAlloc(PyTypeObject *t, Py_ssize_t nitems)
    bint PyContext_CheckExact(PyObject *o)
    bint PyTuple_CheckExact(PyObject *o)
    PyObject *PY_TRUE "Py_True"
    PyObject *PY_FALSE "Py_False"



cdef Py_ssize_t H_CALLBACK, H_ARGS, H_CANCELLED, H_LOOP, H_TRACEBACK, H_REPR, H_CONTEXT
cdef bint fast_handles = False
HANDLE_INIT = Handle.__init__
# Handle's type version tag when its __init__ was last seen to be
# HANDLE_INIT: any assignment to the class (a patch) changes the tag, so
# while it is the same, the lookup of Handle.__init__ need not be made
cdef unsigned int handle_init_tag = 0


cdef inline bint handle_init_as_is() except -1:
    """Handle.__init__ is the stdlib's."""
    global handle_init_tag
    cdef PyTypeVersion *t = <PyTypeVersion *><PyObject *>Handle
    if (handle_init_tag != 0 and t.tp_flags & Py_TPFLAGS_VALID_VERSION_TAG
            and t.tp_version_tag == handle_init_tag):
        return True
    if Handle.__init__ is not HANDLE_INIT:
        return False
    # (the lookup gave the type a valid tag, unless the tags ran out)
    handle_init_tag = t.tp_version_tag if t.tp_flags & Py_TPFLAGS_VALID_VERSION_TAG else 0
    return True


cdef inline void store_slot(object obj, Py_ssize_t offset, object value) noexcept:
    """Store value in a still-empty slot of a fresh object."""
    Py_INCREF(value)
    (<PyObject **>((<char *><PyObject *>obj) + offset))[0] = <PyObject *>value


cdef object new_handle(type kind, object callback, object args, object loop, object context):
    """kind(callback, args, loop, context) for a loop not in debug mode:
    a Handle, or ReadingHandle (which adds no slot)."""
    if not fast_handles or not handle_init_as_is():
        return kind(callback, args, loop, context)
    if context is None:
        context = PyContext_CopyCurrent()
    handle = PyType_GenericAlloc(<PyTypeObject *>kind, 0)
    store_slot(handle, H_CONTEXT, context)
    store_slot(handle, H_LOOP, loop)
    store_slot(handle, H_CALLBACK, callback)
    store_slot(handle, H_ARGS, args)
    store_slot(handle, H_CANCELLED, False)
    store_slot(handle, H_REPR, None)
    store_slot(handle, H_TRACEBACK, None)
    return handle


class _NotDebugging:
    def get_debug(self):
        return False


cdef setup_fast_handles():
    global fast_handles, H_CALLBACK, H_ARGS, H_CANCELLED, H_LOOP, H_TRACEBACK, H_REPR, H_CONTEXT
    names = ('_callback', '_args', '_cancelled', '_loop', '_source_traceback', '_repr',
             '_context')
    offsets = []
    if not SC_HANDLE_SLOTS:
        return
    if set(getattr(Handle, '__slots__', ())) != set(names) | {'__weakref__'}:
        return
    for name in names:
        desc = Handle.__dict__.get(name)
        if type(desc) is not types.MemberDescriptorType:
            return
        offsets.append((<PyMemberDescrObject *><PyObject *>desc).d_member.offset)
    H_CALLBACK, H_ARGS, H_CANCELLED, H_LOOP, H_TRACEBACK, H_REPR, H_CONTEXT = offsets
    fast_handles = True
    loop, context, args = _NotDebugging(), contextvars.copy_context(), (1, 2)
    made, reference = new_handle(Handle, print, args, loop, context), Handle(print, args, loop, context)
    if (type(made) is not Handle or
            any(getattr(made, name) is not getattr(reference, name) for name in names)):
        fast_handles = False

setup_fast_handles()


cdef inline PyObject *handle_slot(object handle, Py_ssize_t offset):
    """What a slot of a Handle holds, borrowed (NULL when it is empty);
    only with fast_handles, for a Handle, TimerHandle or ReadingHandle."""
    return (<PyObject **>((<char *><PyObject *>handle) + offset))[0]


cdef int run_handle(object handle) except -1:
    """What asyncio.Handle._run does, without its Python frame: run the
    callback in its context, hand an exception to the exception handler.
    For a Handle, TimerHandle or ReadingHandle only (run_ready()).  With
    fast_handles, the slots are read at their offsets and the context is
    entered here, where handle._context.run(handle._callback, *handle._args)
    looked up four attributes and a method and built a tuple of the
    arguments (docs/benchmarks.md, "Behind the comments"); anything
    unusual in them (an empty slot, a context or arguments of another
    type) takes that line as it is."""
    cdef PyObject *context_slot
    cdef PyObject *callback_slot
    cdef PyObject *args_slot
    cdef object context, callback
    try:
        if fast_handles:
            context_slot = handle_slot(handle, H_CONTEXT)
            callback_slot = handle_slot(handle, H_CALLBACK)
            args_slot = handle_slot(handle, H_ARGS)
            if (context_slot != NULL and callback_slot != NULL and args_slot != NULL
                    and PyContext_CheckExact(context_slot) and PyTuple_CheckExact(args_slot)):
                # references of our own: the callback may cancel its handle,
                # which (in debug mode) empties these slots
                context, callback = <object>context_slot, <object>callback_slot
                args = <tuple>args_slot
                PyContext_Enter(context)
                try:
                    callback(*args)
                finally:
                    PyContext_Exit(context)
                return 0
        handle._context.run(handle._callback, *handle._args)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        callback = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {'message': f'Exception in callback {callback}',
                   'exception': exc, 'handle': handle}
        if handle._source_traceback:
            context['source_traceback'] = handle._source_traceback
        handle._loop.call_exception_handler(context)
    return 0


cdef inline bint handle_cancelled(object handle) except -1:
    """handle._cancelled, true or not, for a handle run_handle() runs."""
    cdef PyObject *flag
    if fast_handles:
        flag = handle_slot(handle, H_CANCELLED)
        if flag == PY_FALSE:
            return False
        if flag == PY_TRUE:
            return True
    return bool(handle._cancelled)
