/*
 * ring.h -- uringloop's io_uring ring layer.
 *
 * One struct ul_ring per io_uring instance: the mmapped submission and
 * completion rings, and the few system calls around them.  Its users are
 * ring.pyx's Ring, one for each event loop and one for each zero-copy
 * receive queue (zcrx.pyx), and the C benchmarks in bench/.  Each ring is
 * used by one thread at a time and is set up with SINGLE_ISSUER where the
 * kernel allows, so nothing here locks.
 *
 * Memory ordering follows the kernel's contract: we read the kernel's
 * sq head and cq tail with acquire loads and publish our sq tail and cq head
 * with release stores.
 *
 * Everything that returns int returns >= 0 on success or -errno.
 */
#ifndef URINGLOOP_RING_H
#define URINGLOOP_RING_H

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "abi.h"

typedef struct ul_ring {
    int fd;
    unsigned setup_flags;     /* flags the kernel accepted */
    unsigned features;        /* params.features */

    /* submission ring */
    unsigned *sq_khead;
    unsigned *sq_ktail;
    unsigned *sq_kflags;
    unsigned *sq_array;       /* NULL with IORING_SETUP_NO_SQARRAY */
    unsigned sq_mask;
    unsigned sq_entries;
    unsigned sqe_tail;        /* our private tail: SQEs handed out */
    struct io_uring_sqe *sqes;

    /* completion ring */
    unsigned *cq_khead;
    unsigned *cq_ktail;
    unsigned *cq_koverflow;
    unsigned cq_mask;
    unsigned cq_entries;
    struct io_uring_cqe *cqes;

    /* mappings, for ul_ring_exit */
    void *sq_map;
    size_t sq_map_len;
    void *cq_map;
    size_t cq_map_len;
    size_t sqes_map_len;

    /* the epoll driver that carries this ring's requests (readiness.h), or
     * NULL for a kernel io_uring */
    struct ul_ready *driver;

    /* counters a test or benchmark may read */
    uint64_t enter_calls;
    uint64_t sqes_submitted;
    uint64_t cqes_reaped;
} ul_ring;

/* Setup.  `wanted` is the set of optional setup flags to try; the ones the
 * kernel refuses with -EINVAL are dropped one group at a time (see ring.c).
 * Returns 0 or -errno of the last io_uring_setup attempt. */
int ul_ring_init(ul_ring *r, unsigned entries, unsigned cq_entries, unsigned wanted);
void ul_ring_exit(ul_ring *r);

/* IORING_REGISTER_ENABLE_RINGS for a ring made with IORING_SETUP_R_DISABLED:
 * the calling thread becomes its single issuer. */
int ul_ring_enable(ul_ring *r);

/* Fill supported[op] = 1 for each opcode the kernel supports (256 bytes).
 * Returns the last opcode number the kernel knows, or -errno. */
int ul_ring_probe(ul_ring *r, unsigned char *supported);

/* Submit every SQE handed out so far and wait for at least `wait_nr`
 * completions or `timeout_ns` (< 0: no timeout).  Returns the number of SQEs
 * the kernel consumed, or -errno (-ETIME on timeout, -EINTR on a signal). */
int ul_ring_enter(ul_ring *r, unsigned wait_nr, int64_t timeout_ns);
int ul_ring_submit_only(ul_ring *r);

int ul_ring_register(ul_ring *r, unsigned opcode, void *arg, unsigned nr_args);
/* Registered buffers: a sparse table of `nr` slots (5.19), then one region
 * put into (or, with addr NULL, taken out of) a slot (5.13).  Both return 0
 * or -errno: -ENOMEM when the pinned pages would pass RLIMIT_MEMLOCK. */
int ul_ring_register_buffer_table(ul_ring *r, unsigned nr);
struct ul_zcrx_ifq_reg;
struct ul_zcrx_area_reg;
int ul_zcrx_register(ul_ring *r, unsigned ifindex, unsigned rxq, unsigned rq_entries,
                     void *area, size_t area_len, void *region, size_t region_len,
                     struct ul_zcrx_ifq_reg *reg, struct ul_zcrx_area_reg *area_reg);
int ul_ring_update_buffer(ul_ring *r, unsigned slot, void *addr, size_t len);

static inline unsigned ul_sq_pending(ul_ring *r)
{
    return r->sqe_tail - __atomic_load_n(r->sq_khead, __ATOMIC_ACQUIRE);
}

static inline unsigned ul_sq_space(ul_ring *r)
{
    return r->sq_entries - ul_sq_pending(r);
}

/* A zeroed SQE, or NULL when the submission ring is full. */
static inline struct io_uring_sqe *ul_get_sqe(ul_ring *r)
{
    struct io_uring_sqe *sqe;
    if (ul_sq_pending(r) >= r->sq_entries)
        return NULL;
    sqe = &r->sqes[r->sqe_tail & r->sq_mask];
    r->sqe_tail++;
    memset(sqe, 0, sizeof(*sqe));
    return sqe;
}

/* The i-th SQE the kernel has not consumed (i < ul_sq_pending(r)). */
static inline struct io_uring_sqe *ul_sq_unconsumed_at(ul_ring *r, unsigned i)
{
    return &r->sqes[(__atomic_load_n(r->sq_khead, __ATOMIC_ACQUIRE) + i) & r->sq_mask];
}

/* Take back every SQE the kernel has not consumed: it never will.  Only
   for a ring that nobody enters again (closing from a thread that cannot
   submit to it). */
static inline void ul_sq_take_back(ul_ring *r)
{
    r->sqe_tail = __atomic_load_n(r->sq_khead, __ATOMIC_ACQUIRE);
    __atomic_store_n(r->sq_ktail, r->sqe_tail, __ATOMIC_RELEASE);
}

/* Completions: ul_cq_ready() CQEs wait, the i-th from the head at
 * ul_cq_at(r, i); ul_cq_advance() hands n of them back to the kernel. */
static inline unsigned ul_cq_ready(ul_ring *r)
{
    return __atomic_load_n(r->cq_ktail, __ATOMIC_ACQUIRE) - *r->cq_khead;
}

static inline struct io_uring_cqe *ul_cq_at(ul_ring *r, unsigned i)
{
    return &r->cqes[(*r->cq_khead + i) & r->cq_mask];
}

static inline void ul_cq_advance(ul_ring *r, unsigned n)
{
    __atomic_store_n(r->cq_khead, *r->cq_khead + n, __ATOMIC_RELEASE);
    r->cqes_reaped += n;
}

/* With DEFER_TASKRUN|TASKRUN_FLAG the kernel raises IORING_SQ_TASKRUN when
 * completions wait to be run in our next io_uring_enter. */
static inline int ul_sq_taskrun(ul_ring *r)
{
    return (__atomic_load_n(r->sq_kflags, __ATOMIC_RELAXED) & IORING_SQ_TASKRUN) != 0;
}

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no system call). */
static inline int64_t ul_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Watch the ring, without sleeping, for up to budget_ns: 1 as soon as
 * completion work waits for us (IORING_SQ_TASKRUN, or CQEs posted), 0 when
 * the time is up.  For the loop's short waits (RingLoop.wait_and_reap):
 * going to sleep in io_uring_enter and being woken costs the wake-up's
 * latency, which a peer that answers within microseconds pays on every
 * round trip. */
static inline int ul_spin_for_work(ul_ring *r, int64_t budget_ns)
{
    int64_t end = ul_now_ns() + budget_ns;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            if (ul_sq_taskrun(r) || ul_cq_ready(r))
                return 1;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            __asm__ __volatile__("yield");
#endif
        }
        if (ul_now_ns() >= end)
            return 0;
    }
}

static inline int ul_cq_overflowed(ul_ring *r)
{
    return (__atomic_load_n(r->sq_kflags, __ATOMIC_RELAXED) & IORING_SQ_CQ_OVERFLOW) != 0;
}

/* ---- SQE preparation: one helper per operation, named after the opcode ---- */

/* The most one read, write, send or receive moves on Linux (MAX_RW_COUNT:
 * INT_MAX rounded down to a page).  sqe->len is 32 bits and a CQE's res an
 * int32, so a longer length would be truncated (2**32 became 0: a false end
 * of stream, a send of nothing that spins).  Every length-taking helper
 * clamps to it; callers loop on the short count as with read(2). */
#define UL_MAX_IO_LEN 0x7ffff000u

static inline unsigned ul_io_len(size_t len)
{
    return len > UL_MAX_IO_LEN ? UL_MAX_IO_LEN : (unsigned)len;
}

static inline void ul_prep_rw(struct io_uring_sqe *sqe, int op, int fd,
                              const void *addr, unsigned len, uint64_t off)
{
    sqe->opcode = (uint8_t)op;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)addr;
    sqe->len = len;
    sqe->off = off;
}

static inline void ul_prep_nop(struct io_uring_sqe *sqe)
{
    sqe->opcode = IORING_OP_NOP;
}

static inline void ul_prep_read(struct io_uring_sqe *sqe, int fd, void *buf,
                                size_t len, uint64_t off)
{
    ul_prep_rw(sqe, IORING_OP_READ, fd, buf, ul_io_len(len), off);
}

static inline void ul_prep_write(struct io_uring_sqe *sqe, int fd, const void *buf,
                                 size_t len, uint64_t off)
{
    ul_prep_rw(sqe, IORING_OP_WRITE, fd, buf, ul_io_len(len), off);
}

static inline void ul_prep_recv(struct io_uring_sqe *sqe, int fd, void *buf,
                                size_t len, int flags)
{
    ul_prep_rw(sqe, IORING_OP_RECV, fd, buf, ul_io_len(len), 0);
    sqe->msg_flags = (uint32_t)flags;
}

static inline void ul_prep_recv_multishot(struct io_uring_sqe *sqe, int fd,
                                          unsigned short buf_group, int flags)
{
    ul_prep_rw(sqe, IORING_OP_RECV, fd, NULL, 0, 0);
    sqe->msg_flags = (uint32_t)flags;
    sqe->ioprio |= IORING_RECV_MULTISHOT;
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = buf_group;
}

static inline void ul_prep_send(struct io_uring_sqe *sqe, int fd, const void *buf,
                                size_t len, int flags)
{
    ul_prep_rw(sqe, IORING_OP_SEND, fd, buf, ul_io_len(len), 0);
    sqe->msg_flags = (uint32_t)flags;
}

static inline void ul_prep_send_zc(struct io_uring_sqe *sqe, int fd, const void *buf,
                                   size_t len, int flags, unsigned zc_flags)
{
    ul_prep_rw(sqe, IORING_OP_SEND_ZC, fd, buf, ul_io_len(len), 0);
    sqe->msg_flags = (uint32_t)flags;
    sqe->ioprio = (uint16_t)zc_flags;
}

/* SEND_ZC from a buffer registered with ul_ring_update_buffer(): the pages
 * were pinned once at registration, so this send pins (and charges to
 * RLIMIT_MEMLOCK) nothing.  buf must lie inside registered buffer `index`. */
static inline void ul_prep_send_zc_fixed(struct io_uring_sqe *sqe, int fd,
                                         const void *buf, size_t len, int flags,
                                         unsigned zc_flags, unsigned index)
{
    ul_prep_send_zc(sqe, fd, buf, len, flags, zc_flags | IORING_RECVSEND_FIXED_BUF);
    sqe->buf_index = (uint16_t)index;
}

/* The destination of an unconnected datagram socket's SEND/SEND_ZC (6.0). */
static inline void ul_prep_send_set_addr(struct io_uring_sqe *sqe,
                                         const struct sockaddr *addr, socklen_t len)
{
    sqe->addr2 = (uint64_t)(uintptr_t)addr;
    sqe->addr_len = (uint16_t)len;
}

static inline void ul_prep_recvmsg(struct io_uring_sqe *sqe, int fd,
                                   struct msghdr *msg, int flags)
{
    ul_prep_rw(sqe, IORING_OP_RECVMSG, fd, msg, 1, 0);
    sqe->msg_flags = (uint32_t)flags;
}

/* Multishot RECVMSG (6.0): each datagram lands in a provided buffer laid out
 * as struct io_uring_recvmsg_out, the name area (msg->msg_namelen bytes),
 * the control area (msg->msg_controllen bytes), then the payload. */
static inline void ul_prep_recvmsg_multishot(struct io_uring_sqe *sqe, int fd,
                                             struct msghdr *msg, int flags,
                                             unsigned short buf_group)
{
    ul_prep_recvmsg(sqe, fd, msg, flags);
    sqe->ioprio |= IORING_RECV_MULTISHOT;
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = buf_group;
}

static inline void ul_prep_sendmsg(struct io_uring_sqe *sqe, int fd,
                                   const struct msghdr *msg, int flags)
{
    ul_prep_rw(sqe, IORING_OP_SENDMSG, fd, msg, 1, 0);
    sqe->msg_flags = (uint32_t)flags;
}

static inline void ul_prep_sendmsg_zc(struct io_uring_sqe *sqe, int fd,
                                      const struct msghdr *msg, int flags,
                                      unsigned zc_flags)
{
    ul_prep_rw(sqe, IORING_OP_SENDMSG_ZC, fd, msg, 1, 0);
    sqe->msg_flags = (uint32_t)flags;
    sqe->ioprio = (uint16_t)zc_flags;
}

/* SENDMSG_ZC whose iovecs all lie in registered buffer `index` (6.15, the
 * kernel that brought READV_FIXED): nothing pinned per send, as with
 * ul_prep_send_zc_fixed, for many buffers in one request. */
static inline void ul_prep_sendmsg_zc_fixed(struct io_uring_sqe *sqe, int fd,
                                            const struct msghdr *msg, int flags,
                                            unsigned zc_flags, unsigned index)
{
    ul_prep_sendmsg_zc(sqe, fd, msg, flags, zc_flags | IORING_RECVSEND_FIXED_BUF);
    sqe->buf_index = (uint16_t)index;
}






static inline void ul_prep_poll_add(struct io_uring_sqe *sqe, int fd, unsigned mask)
{
    ul_prep_rw(sqe, IORING_OP_POLL_ADD, fd, NULL, 0, 0);
    sqe->poll32_events = mask;   /* little-endian hosts only (x86_64, arm64) */
}

/* A POLL_ADD that stays armed (IORING_POLL_ADD_MULTI, 5.13): a completion
 * with IORING_CQE_F_MORE for each wakeup after the mask it reported was
 * taken, the events in res. */
static inline void ul_prep_poll_multishot(struct io_uring_sqe *sqe, int fd, unsigned mask)
{
    ul_prep_poll_add(sqe, fd, mask);
    sqe->len = IORING_POLL_ADD_MULTI;
}

/* poll.h defines POLLRDHUP only with _GNU_SOURCE */
#define UL_POLLRDHUP 0x2000


/* A relative timeout of ts whose expiry (res -ETIME) counts as success, so
 * a request linked behind it runs once it expires: a delay
 * (IORING_TIMEOUT_ETIME_SUCCESS, 5.16).  The kernel copies ts at submit. */
static inline void ul_prep_timeout_keep_link(struct io_uring_sqe *sqe,
                                           const struct __kernel_timespec *ts)
{
    ul_prep_rw(sqe, IORING_OP_TIMEOUT, -1, ts, 1, 0);
    sqe->timeout_flags = IORING_TIMEOUT_ETIME_SUCCESS;
}

/* Cancel the operation whose user_data is `target`. */
static inline void ul_prep_cancel(struct io_uring_sqe *sqe, uint64_t target, int flags)
{
    ul_prep_rw(sqe, IORING_OP_ASYNC_CANCEL, -1, (void *)(uintptr_t)target, 0, 0);
    sqe->cancel_flags = (uint32_t)flags;
}


/* ---- files: OPENAT, CLOSE, FSYNC, STATX, FTRUNCATE, SPLICE ----------------
 * The path, the statx buffer and the offsets below are read or written by the
 * kernel until the request completes: the Operation holds them (file_requests.pyx). */

static inline void ul_prep_openat(struct io_uring_sqe *sqe, int dfd, const char *path,
                                  int flags, unsigned mode)
{
    ul_prep_rw(sqe, IORING_OP_OPENAT, dfd, path, mode, 0);
    sqe->open_flags = (uint32_t)flags;
}

static inline void ul_prep_close(struct io_uring_sqe *sqe, int fd)
{
    ul_prep_rw(sqe, IORING_OP_CLOSE, fd, NULL, 0, 0);
}

static inline void ul_prep_fsync(struct io_uring_sqe *sqe, int fd, unsigned flags)
{
    ul_prep_rw(sqe, IORING_OP_FSYNC, fd, NULL, 0, 0);
    sqe->fsync_flags = flags;
}

static inline void ul_prep_statx(struct io_uring_sqe *sqe, int dfd, const char *path,
                                 int flags, unsigned mask, void *statxbuf)
{
    ul_prep_rw(sqe, IORING_OP_STATX, dfd, path, mask, (uint64_t)(uintptr_t)statxbuf);
    sqe->statx_flags = (uint32_t)flags;
}

static inline void ul_prep_ftruncate(struct io_uring_sqe *sqe, int fd, uint64_t length)
{
    ul_prep_rw(sqe, UL_OP_FTRUNCATE, fd, NULL, 0, length);
}

/* Move up to len bytes from fd_in (at off_in, or its position when -1) to
 * fd_out (likewise); one of the two must be a pipe. */
static inline void ul_prep_splice(struct io_uring_sqe *sqe, int fd_in, int64_t off_in,
                                  int fd_out, int64_t off_out, unsigned len,
                                  unsigned flags)
{
    ul_prep_rw(sqe, IORING_OP_SPLICE, fd_out, NULL, len, (uint64_t)off_out);
    sqe->splice_off_in = (uint64_t)off_in;
    sqe->splice_fd_in = fd_in;
    sqe->splice_flags = flags;
}


static inline void ul_sqe_set_data(struct io_uring_sqe *sqe, uint64_t user_data)
{
    sqe->user_data = user_data;
}

static inline void ul_sqe_set_flags(struct io_uring_sqe *sqe, unsigned flags)
{
    sqe->flags |= (uint8_t)flags;
}

#endif /* URINGLOOP_RING_H */
