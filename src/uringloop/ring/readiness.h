/*
 * readiness.h -- the epoll driver: io_uring's requests, carried out with
 * readiness and system calls where the kernel refuses io_uring.
 *
 * A ring made with ul_ready_init() has the layout of a real one -- an
 * array of SQEs, a completion ring, heads and tails -- in our own memory,
 * so everything that writes SQEs and reads CQEs (ring.h's inline helpers,
 * the loop, the transports) runs unchanged above it.  ring.c sends the
 * ring's three system calls here instead (r->driver is set): "entering"
 * takes the SQEs, makes each request's system call when its fd is ready
 * (epoll, edge-triggered) and posts its completion as the kernel would --
 * its result, its flags, IORING_CQE_F_MORE for a multishot request,
 * provided buffers, the notification of a zero-copy send -- and
 * registering answers for the buffers and the probe.  Work that cannot
 * wait on readiness (a regular file that must go to the disk, open, stat,
 * fsync, splice) runs in a few threads of its own, as io-wq's workers do.
 * docs/design.md, "The epoll driver", has what it does and does not do.
 */
#ifndef URINGLOOP_READINESS_H
#define URINGLOOP_READINESS_H

#include "ring.h"

/* Make r an epoll-driven ring of `entries` SQEs and `cq_entries` CQEs.
 * Returns 0 or -errno. */
int ul_ready_init(ul_ring *r, unsigned entries, unsigned cq_entries);
void ul_ready_exit(ul_ring *r);

/* io_uring_enter(2) on a driven ring: take the SQEs handed out, then (not
 * submit_only) wait for wait_nr completions or timeout_ns (< 0: no end).
 * Returns the SQEs taken, or -ETIME / -EINTR / -errno as the kernel would. */
int ul_ready_enter(ul_ring *r, unsigned wait_nr, int64_t timeout_ns, int submit_only);

/* io_uring_register(2) on a driven ring: provided-buffer rings, the
 * registered-buffer table (accepted: the driver reads the addresses the
 * SQEs carry), the probe, enabling. */
int ul_ready_register(ul_ring *r, unsigned opcode, void *arg, unsigned nr_args);

#endif /* URINGLOOP_READINESS_H */
