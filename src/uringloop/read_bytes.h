/* read_bytes.h: the bytes objects a stream read is made into -- shrunk to
 * what came, and the loop's spares, blocks given on to the next reads.
 *
 * A stream transport hands data_received() a new bytes object per read:
 * made before the read (recv(2) straight into it, or the copy out of a
 * provided buffer), shrunk to what came, dropped when the protocol (or,
 * for what it wrote back, the write queue) is done with it.  Made and
 * freed once per read, that object cost glibc's malloc() and free() a
 * good part of an echo request's user-space instructions (blocks of 1 KiB
 * and more are sorted through malloc's unsorted and large bins each time:
 * docs/benchmarks.md, "The loop's spare bytes objects").  So the loop
 * keeps a few spares
 * (ul_spare_bytes, RingLoop.spare_bytes): bytes objects that nothing but
 * the loop refers to any more -- a read's object once data_received() has
 * returned, a written chunk once the write queue has let it go.  What a
 * protocol keeps, queues or takes a view of holds a reference, and is
 * left to it.  An object nobody refers to is dead to Python; giving its
 * block to the next read is what freeing it and allocating the next would
 * have done, minus the two calls.  A read takes a spare whose block fits
 * the size asked (no more than UL_SHRINK_IN_PLACE - 1 bytes over, so what
 * a protocol keeps is never much larger than what it holds), else it
 * makes a new object.  Up to UL_SPARES of them, UL_SPARE_BYTES in all:
 * the reads of one iteration's completions come in a row, and the writes
 * they echo leave in a row.
 */
#ifndef URINGLOOP_READ_BYTES_H
#define URINGLOOP_READ_BYTES_H

#include <Python.h>
#include <string.h>

/* Shrinking a bytes object to what a read brought: when that leaves less
 * than UL_SHRINK_IN_PLACE unused, its length is set in place -- a
 * realloc() then can split off a block too small for malloc to reuse at
 * once, and the next large malloc() or free() stops to merge such blocks
 * (glibc's malloc_consolidate(), once per read: docs/benchmarks.md, "Behind the comments").
 * Else _PyBytes_Resize(), which may move it. */
#define UL_SHRINK_IN_PLACE 256

/* The spare_bytes shortcut (shortcuts/switch.pyx): 0 keeps no spares and shrinks
 * with _PyBytes_Resize() alone. */
static int ul_rb_shortcut = 1;

/* Shrink b, made with size bytes (its block holds that many), new and
 * referred to by the caller alone, to its first n. */
static int ul_shrink_bytes(PyObject **b, Py_ssize_t n, Py_ssize_t size)
{
    if (n >= size)
        return 0;
    if (ul_rb_shortcut && size - n < UL_SHRINK_IN_PLACE) {
        Py_SET_SIZE(*b, n);
        PyBytes_AS_STRING(*b)[n] = 0;
        return 0;
    }
    return _PyBytes_Resize(b, n);
}

#define UL_SPARES 32
#define UL_SPARE_BYTES (1024 * 1024)

typedef struct {
    PyObject *obj[UL_SPARES];       /* bytes objects only this refers to */
    Py_ssize_t room[UL_SPARES];     /* the length each block was made for */
    int count;                      /* obj[0..count) */
    Py_ssize_t total;               /* their rooms added up */
} ul_spare_bytes;

/* Take spare i out of sp (the last takes its place): its reference is
 * the caller's now. */
static inline PyObject *ul_spare_take(ul_spare_bytes *sp, int i)
{
    PyObject *b = sp->obj[i];
    int last = --sp->count;
    sp->total -= sp->room[i];
    sp->obj[i] = sp->obj[last];
    sp->room[i] = sp->room[last];
    return b;
}

/* Drop every spare (the loop closes or goes away). */
static void ul_spare_clear(ul_spare_bytes *sp)
{
    while (sp->count > 0)
        Py_DECREF(ul_spare_take(sp, sp->count - 1));
}

/* A bytes object of length size, its contents for the caller to write:
 * one of sp's spares (the last kept first) whose room is size or up to
 * UL_SHRINK_IN_PLACE - 1 more (sp may be NULL: none), else a new one.
 * *room: the length its block was made for (pass it to ul_fit_bytes()
 * and ul_bytes_done()).  NULL with an exception set when memory ran out. */
static inline PyObject *ul_bytes_to_fill(ul_spare_bytes *sp, Py_ssize_t size,
                                         Py_ssize_t *room)
{
    int i = sp == NULL ? 0 : sp->count;
    while (i-- > 0) {           /* (a take moves the last into i: seen) */
        PyObject *b = sp->obj[i];
        Py_ssize_t r = sp->room[i];
        if (Py_REFCNT(b) != 1) {
            /* referred to since it was kept (a reference of the loop's own
             * not yet dropped): not to be written, left to the others */
            Py_DECREF(ul_spare_take(sp, i));
            continue;
        }
        if (r < size || r - size >= UL_SHRINK_IN_PLACE)
            continue;
        b = ul_spare_take(sp, i);
        *room = r;
        Py_SET_SIZE(b, size);
        PyBytes_AS_STRING(b)[size] = 0;
        /* its hash, if one was taken, was of what it held */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
        ((PyBytesObject *)b)->ob_shash = -1;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
        return b;
    }
    *room = size;
    return PyBytes_FromStringAndSize(NULL, size);
}

/* Shrink b (from ul_bytes_to_fill(), *room) to the n bytes a read
 * brought (ul_shrink_bytes()); *room follows when it is made anew. */
static inline int ul_fit_bytes(PyObject **b, Py_ssize_t n, Py_ssize_t *room)
{
    if (ul_shrink_bytes(b, n, *room) < 0)
        return -1;
    if (n < *room && (!ul_rb_shortcut || *room - n >= UL_SHRINK_IN_PLACE))
        *room = n;                  /* resized, not set in place */
    return 0;
}

/* b (from ul_bytes_to_fill(), room) was handed over and the callee has
 * returned: if the caller's is the only reference left, b becomes one
 * of sp's spares (others dropped to make room).  The caller then drops
 * its own reference as usual.  (A free-threaded build's reference
 * count does not say that nobody else holds b: there it is never kept.) */
static inline void ul_bytes_done(ul_spare_bytes *sp, PyObject *b, Py_ssize_t room)
{
#ifndef Py_GIL_DISABLED
    if (!ul_rb_shortcut || Py_REFCNT(b) != 1 || !PyBytes_CheckExact(b)
            || room > UL_SPARE_BYTES)
        return;
    while (sp->count == UL_SPARES || sp->total + room > UL_SPARE_BYTES)
        Py_DECREF(ul_spare_take(sp, 0));
    Py_INCREF(b);
    sp->obj[sp->count] = b;
    sp->room[sp->count] = room;
    sp->count++;
    sp->total += room;
#else
    (void)sp; (void)b; (void)room;
#endif
}

/* b, a bytes chunk the write queue has just let go, is kept for the
 * next reads as a read's object would be (ul_bytes_done()'s checks): its
 * block holds its length at least. */
static inline void ul_bytes_sent(ul_spare_bytes *sp, PyObject *b)
{
    ul_bytes_done(sp, b, Py_SIZE(b));
}


#endif
