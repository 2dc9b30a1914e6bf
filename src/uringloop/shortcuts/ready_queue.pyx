# ready_queue: the loop's ready deque and timer heap, sized from ob_size and
# their methods called without a lookup.  Included by core.pyx (the
# switch: SC_READY_QUEUE, shortcuts/switch.pyx).

# The loop's _ready is the deque BaseEventLoop.__init__ made: its methods
# are called as the functions they are, without a lookup on the instance
cdef object DEQUE = collections.deque
cdef object DEQUE_APPEND = collections.deque.append
cdef object DEQUE_POPLEFT = collections.deque.popleft


cdef inline bint queued(object queue) except -1:
    """bool(queue) for the loop's _ready deque and _scheduled list, read
    from their size (both keep their length in ob_size) rather than
    through PyObject_IsTrue: three tests an iteration."""
    if SC_READY_QUEUE and (type(queue) is DEQUE or type(queue) is list):
        return Py_SIZE(queue) != 0
    return bool(queue)


cdef inline int ready_append(object ready, object handle) except -1:
    """ready.append(handle), for the loop's _ready."""
    if type(ready) is DEQUE:
        DEQUE_APPEND(ready, handle)
    else:
        ready.append(handle)
    return 0
