# Declarations of the kept_methods shortcut (shortcuts/method_cache.h and
# kept_methods.pyx): the cache a transport keeps of its protocol's read method.

cdef extern from "shortcuts/method_cache.h":
    enum:
        UL_MC_LOOKUP
        UL_MC_NO_DICT
        UL_MC_VALUES
    int ul_mc_kind(PyTypeObject *tp) noexcept
    Py_ssize_t ul_mc_shared_index(PyTypeObject *tp, object name, Py_ssize_t *nentries) noexcept
    int ul_mc_values_lack(object obj, Py_ssize_t ix, Py_ssize_t nentries) noexcept
    bint ul_mc_is_method(PyObject *descr) noexcept
    unsigned int ul_mc_type_tag(PyTypeObject *tp) noexcept
    object ul_mc_call2(object func, object obj, object arg)
    int ul_mc_call2_status(object func, object obj, object arg) noexcept
    int ul_mc_call3_status(object func, object obj, object arg, object arg2) noexcept
    int ul_mc_method2_status(object obj, object name, object arg) noexcept
    int ul_mc_method3_status(object obj, object name, object arg, object arg2) noexcept
    int ul_mc_raised() except -1
    object ul_mc_call3(object func, object obj, object arg, object arg2)

ctypedef struct MethodCheck:
    # what a cached method (the function a type gave for a name) holds for:
    size_t type             # the type's address (0: nothing cached)
    PyObject *name          # the name looked up (an interned constant)
    unsigned int tag        # its version tag then
    int kind                # UL_MC_*: how its objects could override it
    Py_ssize_t ix           # UL_MC_VALUES: the name's shared-key index or -1,
    Py_ssize_t nentries     # and how many shared keys there were
