# kept_methods: the function a protocol's data_received() & co. call finds,
# kept between reads while method_cache.h says the lookup would find it
# still.  Included by core.pyx (the switch: SC_KEPT_METHODS,
# shortcuts/switch.pyx); the transports call it through base.pyx's
# read_method_kept().

cdef object look_up_method(MethodCheck *check, object obj, str name):
    """The function obj.<name>(...) calls with obj as its first argument, as
    a method call looks it up, and in `check` what must hold for the next
    calls to call it without the lookup (method_kept()).  None, and a check
    that says "look it up", where the name gives no such function or the
    type is not one whose lookup is checked so (method_cache.h)."""
    cdef PyTypeObject *tp = Py_TYPE(obj)
    cdef PyObject *descr = _PyType_Lookup(tp, name)     # (gives tp a tag)
    cdef unsigned int tag = ul_mc_type_tag(tp)
    check.type = <size_t>tp if tag != 0 else 0
    check.name = <PyObject *>name
    check.tag = tag
    check.kind = (ul_mc_kind(tp) if SC_KEPT_METHODS and ul_mc_is_method(descr)
                  else UL_MC_LOOKUP)
    if check.kind == UL_MC_LOOKUP:
        return None
    if check.kind == UL_MC_VALUES:
        check.ix = ul_mc_shared_index(tp, name, &check.nentries)
    return <object>descr


cdef inline int method_kept(MethodCheck *check, object obj, str name) noexcept:
    """For a function look_up_method(check, obj's type, name) gave: 1 when
    it is still what obj.<name> finds (the type and its version tag as seen,
    and no attribute of obj's own in the way); 0 when the lookup must be
    made; -1 when look_up_method() must be asked again (also for another
    name: a StreamTransport's read_method is data_received or
    buffer_updated, as its protocol is)."""
    cdef PyTypeObject *tp = Py_TYPE(obj)
    if (<size_t>tp != check.type or ul_mc_type_tag(tp) != check.tag
            or check.name != <PyObject *>name):
        return -1
    if check.kind == UL_MC_NO_DICT:
        return 1
    if check.kind == UL_MC_LOOKUP:
        return 0
    # -1 here: the type's shared keys grew (is the name one of them now?)
    return ul_mc_values_lack(obj, check.ix, check.nentries)
