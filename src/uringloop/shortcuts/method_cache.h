/* method_cache.h: what `obj.name(...)` would call, known without the
 * lookup while nothing it depends on has changed.
 *
 * CPython's method call (_PyObject_GetMethod) finds `name` on the type and,
 * when that is a method descriptor (a Python function, say), calls it with
 * obj as its first argument -- unless obj has an attribute of that name of
 * its own, which wins.  A transport calls protocol.data_received() on
 * every read, and that lookup was the largest cost left of a 10 KiB echo
 * request (docs/benchmarks.md).  A cache of it (transports/base.pyx,
 * look_up_method() and method_kept()) keeps the function the type gave and
 * checks, per call, what could have changed the answer:
 *
 *   the type:   obj's type and its version tag are the ones seen (any
 *               change to the class or a class above it gives it a new
 *               tag; assigning obj.__class__ changes the type);
 *   the object: it cannot have an attribute of its own (no instance dict:
 *               __slots__ all the way up, as aiohttp's protocols), or
 *               (CPython 3.11 and 3.12, where this header knows the layout)
 *               its attributes are still the type's shared-key values and
 *               the one for `name` is empty.
 *
 * Anything else -- a materialised instance __dict__, a custom
 * __getattribute__, a type without a tag, another CPython -- answers "look
 * it up", and the caller makes the method call as before.  The layouts
 * below are CPython's (Include/internal/pycore_dict.h and pycore_object.h
 * of each version), read, not included: those headers need Py_BUILD_CORE.
 */
#ifndef URINGLOOP_METHOD_CACHE_H
#define URINGLOOP_METHOD_CACHE_H

#include <Python.h>
#include <stdint.h>

/* How an object of a type can hold attributes of its own. */
enum {
    UL_MC_LOOKUP = 0,   /* in a way not checked here: look the name up */
    UL_MC_NO_DICT = 1,  /* it cannot */
    UL_MC_VALUES = 2,   /* in values beside the type's shared keys */
};

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define UL_MC_KNOWS_VALUES 1

/* The head of PyDictKeysObject, the same in 3.11 and 3.12. */
typedef struct {
    Py_ssize_t dk_refcnt;
    uint8_t dk_log2_size;
    uint8_t dk_log2_index_bytes;
    uint8_t dk_kind;
    uint32_t dk_version;
    Py_ssize_t dk_usable;
    Py_ssize_t dk_nentries;
    char dk_indices[];
} ul_dict_keys;

typedef struct {
    PyObject *me_key;
    PyObject *me_value;
} ul_unicode_entry;

#define UL_DICT_KEYS_SPLIT 2

static inline ul_dict_keys *ul_mc_shared_keys(PyTypeObject *tp)
{
    return (ul_dict_keys *)((PyHeapTypeObject *)tp)->ht_cached_keys;
}

/* obj's attribute values (an array indexed as the type's shared keys), or
 * NULL when its attributes are a dict of their own. */
static inline PyObject **ul_mc_values(PyObject *obj)
{
#if PY_VERSION_HEX < 0x030C0000
    /* 3.11: the values pointer four words before the object */
    return ((PyObject ***)obj)[-4];
#else
    /* 3.12: a dict or (tagged with 1, pointing one byte before) values */
    uintptr_t v = ((uintptr_t *)obj)[-3];
    return (v & 1) ? (PyObject **)(v + 1) : NULL;
#endif
}
#else
#define UL_MC_KNOWS_VALUES 0
#endif

/* The UL_MC_* kind of tp's objects. */
static inline int ul_mc_kind(PyTypeObject *tp)
{
    if (tp->tp_getattro != PyObject_GenericGetAttr)
        return UL_MC_LOOKUP;
    if (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
#if UL_MC_KNOWS_VALUES
        ul_dict_keys *keys = ul_mc_shared_keys(tp);
        if ((tp->tp_flags & Py_TPFLAGS_HEAPTYPE) && keys != NULL
                && keys->dk_kind == UL_DICT_KEYS_SPLIT)
            return UL_MC_VALUES;
#endif
        return UL_MC_LOOKUP;
    }
    return tp->tp_dictoffset == 0 ? UL_MC_NO_DICT : UL_MC_LOOKUP;
}

/* For a UL_MC_VALUES type: the index of `name` among its shared keys, or -1
 * when it is not one of them; *nentries: how many there are (they are only
 * ever added to, so while that number holds, a -1 holds). */
static inline Py_ssize_t ul_mc_shared_index(PyTypeObject *tp, PyObject *name,
                                            Py_ssize_t *nentries)
{
#if UL_MC_KNOWS_VALUES
    ul_dict_keys *keys = ul_mc_shared_keys(tp);
    ul_unicode_entry *entries =
        (ul_unicode_entry *)(keys->dk_indices + ((size_t)1 << keys->dk_log2_index_bytes));
    Py_ssize_t i;
    /* (two interned strings are equal only when they are the same object:
     * attribute names are interned as they are set, and so is `name`,
     * usually; compared by value otherwise) */
    int name_interned = PyUnicode_CHECK_INTERNED(name) != 0;
    *nentries = keys->dk_nentries;
    for (i = 0; i < keys->dk_nentries; i++) {
        PyObject *key = entries[i].me_key;
        if (key == name)
            return i;
        if (key != NULL && !(name_interned && PyUnicode_CHECK_INTERNED(key))
                && PyUnicode_Compare(key, name) == 0)
            return i;
    }
#else
    (void)tp; (void)name;
    *nentries = 0;
#endif
    return -1;
}

/* For a UL_MC_VALUES object: 1 when it has no attribute `name` of its own
 * (its values slot `ix` is empty, or with ix -1 the shared keys have not
 * grown past `nentries`); -1 when they have (look again); 0 when it may
 * (its attributes are a dict). */
static inline int ul_mc_values_lack(PyObject *obj, Py_ssize_t ix, Py_ssize_t nentries)
{
#if UL_MC_KNOWS_VALUES
    PyObject **values = ul_mc_values(obj);
    if (values == NULL)
        return 0;
    if (ix >= 0)
        return values[ix] == NULL;
    return ul_mc_shared_keys(Py_TYPE(obj))->dk_nentries == nentries ? 1 : -1;
#else
    (void)obj; (void)ix; (void)nentries;
    return 0;
#endif
}

/* A method descriptor: what a method call calls with the object as its
 * first argument, unbound (a Python function, a C method, a cyfunction). */
static inline int ul_mc_is_method(PyObject *descr)
{
    return descr != NULL && PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_METHOD_DESCRIPTOR);
}

/* func(obj, arg) / func(obj, arg, arg2) for a kept method: through its
 * vectorcall slot where it has one (a Python function, a cyfunction), as
 * PyObject_Vectorcall() would call it, without the generic call's steps
 * (__Pyx_PyObject_FastCallDict's; docs/benchmarks.md, "Behind the comments"). */
static inline PyObject *ul_mc_call_args(PyObject *func, PyObject *const *args, size_t n)
{
    vectorcallfunc call = PyVectorcall_Function(func);
    size_t nargsf = n | PY_VECTORCALL_ARGUMENTS_OFFSET;
    if (call != NULL)
        return call(func, args, nargsf, NULL);
    return PyObject_Vectorcall(func, args, nargsf, NULL);
}

static inline PyObject *ul_mc_call2(PyObject *func, PyObject *obj, PyObject *arg)
{
    PyObject *args[3] = {NULL, obj, arg};
    return ul_mc_call_args(func, args + 1, 2);
}

/* A call's result as a status, for a caller that handles an error out of
 * line: 0 with the result dropped, or -1 with the exception set (a try
 * block around the call would be set up on every read:
 * call_data_received).  ul_mc_call2_status() / ul_mc_call3_status()
 * for a kept method, ul_mc_method2_status() / ul_mc_method3_status() for
 * the same call through the lookup. */
static inline int ul_mc_status(PyObject *result)
{
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

static inline int ul_mc_call2_status(PyObject *func, PyObject *obj, PyObject *arg)
{
    return ul_mc_status(ul_mc_call2(func, obj, arg));
}

/* obj.name(arg) and obj.name(arg, arg2) by the lookup: the call a read
 * callback makes when its method cannot be kept, with the kept call's
 * status, so that both paths share one handler of what it raised. */
static inline int ul_mc_method2_status(PyObject *obj, PyObject *name, PyObject *arg)
{
    PyObject *args[3] = {NULL, obj, arg};
    return ul_mc_status(PyObject_VectorcallMethod(
        name, args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
}

static inline int ul_mc_method3_status(PyObject *obj, PyObject *name, PyObject *arg,
                                       PyObject *arg2)
{
    PyObject *args[4] = {NULL, obj, arg, arg2};
    return ul_mc_status(PyObject_VectorcallMethod(
        name, args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
}

/* -1, for the handler of an exception already set: the caller's except
 * clauses take it up (raised_exception). */
static inline int ul_mc_raised(void)
{
    return -1;
}

static inline PyObject *ul_mc_call3(PyObject *func, PyObject *obj, PyObject *arg,
                                    PyObject *arg2)
{
    PyObject *args[4] = {NULL, obj, arg, arg2};
    return ul_mc_call_args(func, args + 1, 3);
}

/* ul_mc_call3() so (datagram_received). */
static inline int ul_mc_call3_status(PyObject *func, PyObject *obj, PyObject *arg,
                                     PyObject *arg2)
{
    return ul_mc_status(ul_mc_call3(func, obj, arg, arg2));
}

/* tp's version tag, or 0 when it has none valid. */
static inline unsigned int ul_mc_type_tag(PyTypeObject *tp)
{
    return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
}

#endif
