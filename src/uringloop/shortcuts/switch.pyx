# The shortcuts into CPython's internals, and the one switch over them.
#
# The loop is correct without any of these: each one replaces a step of
# asyncio or of CPython's own (a method lookup, a malloc, a Python frame)
# by what that step is known to do on the CPython versions listed, read
# or written straight in the object's memory.  Each is on only on the
# versions whose suite ran with it (the whole suite on 3.11 to 3.15 in
# CI, .ci/run), off on any other, and off on all with
# URINGLOOP_SHORTCUTS=0; the suite runs once more that way in CI, so the
# code without them is tested too.  What each assumes, in one line, and
# the test that fails when the assumption breaks:
#
#   kept_methods    a type's version tag changes with any change to it or
#                   a class above it, and (3.11, 3.12) an object's own
#                   attributes sit in values beside the type's shared keys
#                   (method_cache.h): data_received() & co. called without
#                   the lookup.  tests/test_method_lookup.py
#   spare_bytes     a bytes object whose reference count is 1 is the
#                   loop's alone, and its length may shrink in place
#                   (read_bytes.h): read buffers reused, not freed.
#                   tests/test_read_bytes.py
#   handle_slots    asyncio.Handle's __slots__ are the seven it has on
#                   3.11 to 3.15 and its __init__ fills them as written:
#                   handles made and run at the slots' offsets.
#                   tests/test_loop.py, tests/test_cpython_asyncio.py
#   socket_objects  socket.socket's __init__ and close() set and read only
#                   _io_refs and _closed beside the C socket's own work:
#                   accepted sockets made without socket.py's Python.
#                   tests/test_servers.py, tests/test_sock_ops.py
#   loop_methods    the same type version tag as kept_methods, and one
#                   probe of the loop's instance dict: call_soon and
#                   create_future that are RingLoop's own are run without
#                   the method call.  tests/test_contract_edges.py
#   run_once_tag    the same type version tag as kept_methods, for the
#                   loop's own _run_once: iterations batched in C while it
#                   is not replaced.  tests/test_loop.py
#   ready_queue     collections.deque and list keep their length in
#                   ob_size: the ready queue and timer heap sized without a
#                   call.  tests/test_loop.py
#
# A free-threaded build needs more than a version check for most of these
# (docs/design.md, "A free-threaded CPython").

import sysconfig

# (major, minor) versions each shortcut is verified on: the suite's runs
VERIFIED = ((3, 11), (3, 12), (3, 13), (3, 14), (3, 15))

SHORTCUT_NAMES = ('kept_methods', 'spare_bytes', 'handle_slots', 'socket_objects',
                  'loop_methods', 'run_once_tag', 'ready_queue')

cdef bint SC_KEPT_METHODS = False
cdef bint SC_SPARE_BYTES = False
cdef bint SC_HANDLE_SLOTS = False
cdef bint SC_SOCKET_OBJECTS = False
cdef bint SC_LOOP_METHODS = False
cdef bint SC_RUN_ONCE_TAG = False
cdef bint SC_READY_QUEUE = False

# why each is on or off: name -> reason
cdef dict shortcut_reasons = {}
# the ValueError a bad URINGLOOP_SHORTCUTS gives: raised by new loops
cdef object shortcut_setting_error = None


def _read_shortcut_setting(value):
    """The shortcuts URINGLOOP_SHORTCUTS asks for (a set of names) and why:
    unset, empty or '1': all; '0': none; else a comma-separated list of
    names to keep on.  Raises ValueError naming the accepted values."""
    value = (value or '').strip()
    if value in ('', '1'):
        return set(SHORTCUT_NAMES), 'on'
    if value == '0':
        return set(), 'off: URINGLOOP_SHORTCUTS=0'
    names = {name.strip() for name in value.split(',') if name.strip()}
    unknown = sorted(names - set(SHORTCUT_NAMES))
    if unknown or not names:
        raise ValueError(
            f"URINGLOOP_SHORTCUTS must be '1' (all on where verified), '0' (all off) "
            f"or a comma-separated list of {', '.join(SHORTCUT_NAMES)}; not {value!r}")
    return names, f'off: not in URINGLOOP_SHORTCUTS={value}'


cdef int set_shortcuts() except -1:
    """Set the SC_* switches from the interpreter and the environment."""
    global SC_KEPT_METHODS, SC_SPARE_BYTES, SC_HANDLE_SLOTS, SC_SOCKET_OBJECTS
    global SC_LOOP_METHODS, SC_RUN_ONCE_TAG, SC_READY_QUEUE, shortcut_setting_error
    try:
        wanted, reason = _read_shortcut_setting(os.environ.get('URINGLOOP_SHORTCUTS'))
    except ValueError as exc:
        shortcut_setting_error = exc
        wanted, reason = set(), 'off: URINGLOOP_SHORTCUTS cannot be read'
    version = sys.version_info[:2]
    verified = version in VERIFIED
    free_threaded = bool(sysconfig.get_config_var('Py_GIL_DISABLED'))
    for name in SHORTCUT_NAMES:
        if name not in wanted:
            shortcut_reasons[name] = reason
        elif free_threaded:
            shortcut_reasons[name] = 'off: a free-threaded build (docs/design.md)'
        elif not verified:
            shortcut_reasons[name] = (f'off: not verified on CPython '
                                      f'{version[0]}.{version[1]}')
        else:
            shortcut_reasons[name] = 'on'
    on = {name for name, why in shortcut_reasons.items() if why == 'on'}
    SC_KEPT_METHODS = 'kept_methods' in on
    SC_SPARE_BYTES = 'spare_bytes' in on
    SC_HANDLE_SLOTS = 'handle_slots' in on
    SC_SOCKET_OBJECTS = 'socket_objects' in on
    SC_LOOP_METHODS = 'loop_methods' in on
    SC_RUN_ONCE_TAG = 'run_once_tag' in on
    SC_READY_QUEUE = 'ready_queue' in on
    return 0


cdef int check_shortcut_setting() except -1:
    """Raise the ValueError of a bad URINGLOOP_SHORTCUTS (a new loop)."""
    if shortcut_setting_error is not None:
        raise ValueError(str(shortcut_setting_error))
    return 0


def shortcuts():
    """Which shortcuts into CPython's internals this process runs with:
    {name: 'on' or 'off: <why>'}.  Fixed at import from the interpreter
    and URINGLOOP_SHORTCUTS (see the top of src/uringloop/shortcuts/switch.pyx)."""
    return dict(shortcut_reasons)


set_shortcuts()


# what the shortcuts read of a type and an object
cdef extern from "Python.h":
    ctypedef struct PyTypeVersion "PyTypeObject":
        unsigned long tp_flags
        unsigned int tp_version_tag
    unsigned long Py_TPFLAGS_VALID_VERSION_TAG
    PyObject **_PyObject_GetDictPtr(object)
    PyObject *_PyType_Lookup(PyTypeObject *type, object name)
    PyTypeObject *Py_TYPE(object o)
    Py_ssize_t Py_SIZE(object o)
