/* Live-object counters of the debug build.
 *
 * `URINGLOOP_DEBUG=1 pip install -e .` compiles with -DURINGLOOP_DEBUG; then
 * the loop counts the objects that own something the kernel may touch or
 * that must be given back (operations, held buffer views, registered-buffer
 * regions, transports, loops, the loop's file descriptors), and
 * uringloop.core.debug_counters() returns them.  The test suite asserts
 * that all are back to zero after every test.  In the normal build the
 * counting compiles to nothing and debug_counters() returns None.
 */
#ifndef URINGLOOP_DEBUG_H
#define URINGLOOP_DEBUG_H

enum {
    UL_LIVE_LOOPS,
    UL_LIVE_LOOP_FDS,          /* ring fds and wakeup eventfds open */
    UL_LIVE_OPERATIONS,
    UL_LIVE_TRANSPORTS,
    UL_LIVE_BUFFER_VIEWS,      /* PyObject_GetBuffer exports held */
    UL_LIVE_POOL_REGIONS,      /* registered-buffer regions mapped */
    UL_LIVE_REGISTERED_BUFFERS,
    UL_LIVE_ZCRX_PIECES,       /* zero-copy receive pieces not given back */
    UL_LIVE_KINDS
};

#ifdef URINGLOOP_DEBUG
#define UL_DEBUG_BUILD 1
static long ul_live[UL_LIVE_KINDS];
#define UL_COUNT(kind, delta) (ul_live[(kind)] += (delta))
#define UL_LIVE(kind) (ul_live[(kind)])
#else
#define UL_DEBUG_BUILD 0
#define UL_COUNT(kind, delta) ((void)0)
#define UL_LIVE(kind) (0L)
#endif

/* Per loop, in every build: the transports a loop made that are not yet
 * collected (loop.stats()['transports']).  A transport may outlive its loop
 * or be collected after it in a cycle, so each holds a reference to the
 * cell, and the last of them frees it. */
#include <stdlib.h>

typedef struct {
    long refs;
    long transports;
} ul_loop_counts;

static inline ul_loop_counts *ul_loop_counts_new(void)
{
    ul_loop_counts *c = calloc(1, sizeof(*c));
    if (c != NULL)
        c->refs = 1;
    return c;
}

static inline void ul_loop_counts_release(ul_loop_counts *c)
{
    if (c != NULL && --c->refs == 0)
        free(c);
}

#endif /* URINGLOOP_DEBUG_H */
