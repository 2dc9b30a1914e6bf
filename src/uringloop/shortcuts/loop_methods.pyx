# loop_methods and run_once_tag: whether a lookup on the loop finds
# RingLoop's own call_soon, create_future or _run_once, answered from the
# class's version tag and one probe of the instance's dict, so that the
# loop may do what the method does without calling it.  Included by
# core.pyx after RingLoop (the switches: SC_LOOP_METHODS, SC_RUN_ONCE_TAG,
# shortcuts/switch.pyx).

# what a lookup on a loop finds when nothing replaced it
cdef object RUN_ONCE = RingLoop.__dict__['_run_once']
cdef object CREATE_FUTURE = RingLoop.__dict__['create_future']
cdef object CALL_SOON = RingLoop.__dict__['call_soon']


cdef bint run_once_is_ours(RingLoop loop) except -1:
    """loop._run_once is RingLoop._run_once: nothing on the instance
    or in a class above RingLoop replaces it."""
    if not SC_RUN_ONCE_TAG:
        return False        # one iteration per _run_once() call
    return method_is_ours(loop, '_run_once', RUN_ONCE, &loop.run_once_tag)


cdef bint futures_are_ours(RingLoop loop) except -1:
    """loop.create_future is RingLoop's: a future can be made without
    the call.  Asked at each use, so that one set on the loop or its
    class later (instrumentation does) is called where the stdlib
    calls it."""
    if not SC_LOOP_METHODS:
        return False
    return method_is_ours(loop, 'create_future', CREATE_FUTURE, &loop.create_future_tag)


cdef bint call_soon_is_ours(RingLoop loop) except -1:
    """loop.call_soon is RingLoop's (as futures_are_ours())."""
    if not SC_LOOP_METHODS:
        return False
    return method_is_ours(loop, 'call_soon', CALL_SOON, &loop.call_soon_tag)


cdef bint method_is_ours(RingLoop loop, str name, object ours, unsigned int *tag) except -1:
    """A lookup of `name` on this loop finds `ours`: the class's answer
    is kept with the class's version tag (any change to the class or
    one above it clears the tag), the instance's dict is asked each
    time (one probe of a dict whose keys are interned)."""
    cdef PyObject **dictptr
    cdef PyTypeVersion *t = <PyTypeVersion *>Py_TYPE(loop)
    if not (tag[0] != 0 and t.tp_flags & Py_TPFLAGS_VALID_VERSION_TAG
            and t.tp_version_tag == tag[0]):
        # the class (or one above it) changed since the last lookup:
        # look again, and note the version the answer holds for
        if _PyType_Lookup(Py_TYPE(loop), name) != <PyObject *>ours:
            return False
        tag[0] = (t.tp_version_tag if t.tp_flags & Py_TPFLAGS_VALID_VERSION_TAG
                  else 0)
    dictptr = _PyObject_GetDictPtr(loop)
    return (dictptr == NULL or dictptr[0] == NULL
            or PyDict_GetItemWithError(<object>dictptr[0], name) == NULL)
