/*
 * readiness.c -- the epoll driver (readiness.h has the contract).
 *
 * Each SQE taken becomes a request the driver holds (struct ul_rop, with a
 * copy of the SQE, as the kernel copies what it needs at submission) and is
 * issued as the kernel issues it: tried at once, and, where it would block,
 * put on its fd's list of waiters until epoll says the fd is ready.  Every
 * fd a request waits on is registered once, edge-triggered for input and
 * output, so a report means something new happened; a request therefore
 * waits only after its system call said EAGAIN (or, for a stream
 * receive, read less than it asked: the socket was emptied), and anything
 * that comes later is reported.  A multishot receive that stops at its
 * share of one round while data remains goes on the ready list and is
 * tried again in the next enter without a report.  One that finds the
 * provided-buffer ring empty waits, off the ready list, for the next enter
 * (the loop gives buffers back between enters), where the kernel would end
 * it with -ENOBUFS for the loop to arm again: with many connections and
 * few buffers that was a new request, its first try and its registration
 * per message.
 *
 * What cannot wait on readiness goes to the driver's threads (threads.c:
 * an eventfd among the fds epoll watches says jobs finished): a READ or WRITE of
 * a regular file that would block (epoll refuses regular files: EPERM),
 * OPENAT, STATX, FSYNC, FTRUNCATE, SPLICE.  A page-cached READ completes
 * at once (preadv2 with RWF_NOWAIT), as the kernel completes it inline.
 *
 * Completions go to the completion ring in order; when it is full they
 * wait in an overflow list (IORING_SQ_CQ_OVERFLOW raised) that each enter
 * moves on.  Nothing here calls into Python: an enter may run with the GIL
 * released.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "readiness.h"
#include "threads.h"

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif
#ifndef SYS_openat2
#define SYS_openat2 437         /* (one number on every architecture) */
#endif
#define UL_RESOLVE_CACHED 0x20  /* openat2: the dentry cache alone (5.12) */

#define ROUND_SHARE 32          /* completions a multishot request posts per round */
#define EPOLL_BATCH 128

enum { W_NONE, W_FD, W_TIMER, W_THREAD };
enum { DONE, WAIT, AGAIN };

/* op->mode bits */
#define M_PLAIN_RW   1          /* RWF_NOWAIT refused: read/write after readiness */
#define M_STREAM     2          /* a stream socket: a short read empties it */
#define M_TYPE_KNOWN 4

typedef struct ul_rop ul_rop;
struct ul_rop {
    struct io_uring_sqe sqe;
    ul_rop *next, *prev;        /* its fd's waiters, or the timers */
    ul_rop *hnext;              /* its hash bucket (by user_data) */
    ul_rop *link;               /* the next link of its chain, not yet issued */
    ul_rop *rnext;              /* the ready list, the issue queue */
    ul_rop *snext;              /* the receives waiting for buffers */
    int64_t deadline;           /* TIMEOUT */
    unsigned want;              /* EPOLLIN / EPOLLOUT */
    unsigned char where;
    unsigned char on_ready;
    unsigned char starved;
    unsigned char mode;
    unsigned char link_cancelled;
    ul_job job;                 /* in the driver's threads (W_THREAD) */
};

#define OP_OF_JOB(j) ((ul_rop *)((char *)(j) - offsetof(ul_rop, job)))

typedef struct {
    ul_rop *head, *tail;
    unsigned char registered;
} ul_fdent;

typedef struct {
    struct io_uring_buf_ring *br;
    unsigned mask;
    unsigned short head;
    unsigned short bgid;
    int used;
} ul_group;

typedef struct ul_cqe_node {
    struct io_uring_cqe cqe;
    struct ul_cqe_node *next;
} ul_cqe_node;

typedef struct ul_ready ul_ready;

struct ul_ready {
    ul_ring *ring;              /* the ring this driver carries (its address is fixed) */
    int epfd;
    unsigned sq_head, sq_tail, sq_flags;
    unsigned cq_head, cq_tail, cq_overflow;
    ul_fdent *fds;
    int nfds;
    ul_rop **buckets;
    unsigned nbuckets, count;
    ul_rop *timers;
    ul_rop *ready_head, *ready_tail;
    ul_rop *starved;            /* multishot receives waiting for buffers */
    ul_rop *issue_head, *issue_tail;
    ul_group *groups;
    unsigned ngroups;
    ul_cqe_node *over_head, *over_tail;
    ul_pool *pool;
    pid_t pid;                  /* the process that made it (see ul_ready_exit) */
    int no_pwait2;
    int no_openat2;             /* openat2() or RESOLVE_CACHED unknown here */
};


static void finish(ul_ready *d, ul_rop *op, int res, unsigned cflags);

/* For the request functions below: op ends with res (and flags): DONE. */
static int end(ul_ready *d, ul_rop *op, int res, unsigned cflags)
{
    finish(d, op, res, cflags);
    return DONE;
}
static void start(ul_ready *d, ul_rop *op);
static void to_thread(ul_ready *d, ul_rop *op);

/* ---- completions ---------------------------------------------------- */

static unsigned cq_space(ul_ring *r)
{
    ul_ready *d = r->driver;
    return r->cq_entries - (d->cq_tail - __atomic_load_n(r->cq_khead, __ATOMIC_ACQUIRE));
}

static void flush_overflow(ul_ring *r)
{
    ul_ready *d = r->driver;
    while (d->over_head && cq_space(r)) {
        ul_cqe_node *n = d->over_head;
        r->cqes[d->cq_tail & r->cq_mask] = n->cqe;
        __atomic_store_n(&d->cq_tail, d->cq_tail + 1, __ATOMIC_RELEASE);
        d->over_head = n->next;
        free(n);
    }
    if (!d->over_head) {
        d->over_tail = NULL;
        d->sq_flags &= ~IORING_SQ_CQ_OVERFLOW;
    }
}

static void post(ul_ready *d, uint64_t user_data, int res, unsigned flags)
{
    ul_ring *r = d->ring;
    if (!d->over_head && cq_space(r)) {
        struct io_uring_cqe *cqe = &r->cqes[d->cq_tail & r->cq_mask];
        cqe->user_data = user_data;
        cqe->res = res;
        cqe->flags = flags;
        __atomic_store_n(&d->cq_tail, d->cq_tail + 1, __ATOMIC_RELEASE);
        return;
    }
    ul_cqe_node *n = malloc(sizeof(*n));
    if (!n)
        abort();                /* a completion lost would leak its request forever */
    n->cqe.user_data = user_data;
    n->cqe.res = res;
    n->cqe.flags = flags;
    n->next = NULL;
    if (d->over_tail)
        d->over_tail->next = n;
    else
        d->over_head = n;
    d->over_tail = n;
    d->sq_flags |= IORING_SQ_CQ_OVERFLOW;
    d->cq_overflow++;
}

/* ---- the requests held, by user_data --------------------------------- */

static unsigned bucket_of(ul_ready *d, uint64_t user_data)
{
    return (unsigned)((user_data >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (d->nbuckets - 1);
}

static int hash_grow(ul_ready *d)
{
    unsigned n = d->nbuckets ? d->nbuckets * 2 : 256, i;
    ul_rop **b = calloc(n, sizeof(*b));
    if (!b)
        return -ENOMEM;
    ul_rop **old = d->buckets;
    unsigned old_n = d->nbuckets;
    d->buckets = b;
    d->nbuckets = n;
    for (i = 0; i < old_n; i++) {
        ul_rop *op = old[i];
        while (op) {
            ul_rop *next = op->hnext;
            unsigned k = bucket_of(d, op->sqe.user_data);
            op->hnext = b[k];
            b[k] = op;
            op = next;
        }
    }
    free(old);
    return 0;
}

static void hash_add(ul_ready *d, ul_rop *op)
{
    if (d->count >= d->nbuckets && hash_grow(d) < 0 && !d->nbuckets)
        abort();
    unsigned k = bucket_of(d, op->sqe.user_data);
    op->hnext = d->buckets[k];
    d->buckets[k] = op;
    d->count++;
}

static void hash_remove(ul_ready *d, ul_rop *op)
{
    ul_rop **p = &d->buckets[bucket_of(d, op->sqe.user_data)];
    while (*p && *p != op)
        p = &(*p)->hnext;
    if (*p) {
        *p = op->hnext;
        d->count--;
    }
}

/* ---- where a request waits ------------------------------------------ */

static int fd_table(ul_ready *d, int fd)
{
    if (fd < d->nfds)
        return 0;
    int n = d->nfds ? d->nfds : 64;
    while (n <= fd)
        n *= 2;
    ul_fdent *t = realloc(d->fds, (size_t)n * sizeof(*t));
    if (!t)
        return -ENOMEM;
    memset(t + d->nfds, 0, (size_t)(n - d->nfds) * sizeof(*t));
    d->fds = t;
    d->nfds = n;
    return 0;
}

/* Register fd with epoll, edge-triggered for both directions, once while
 * requests wait on it.  (When none waits, the fd may be closed and its
 * number reused: the next waiter registers again, EEXIST meaning the
 * registration is still ours.)  -EPERM: a regular file, which epoll
 * refuses. */
static int watch_fd(ul_ready *d, int fd)
{
    struct epoll_event ev;
    int ret;
    if (fd < 0)
        return -EBADF;
    if ((ret = fd_table(d, fd)) < 0)
        return ret;
    if (d->fds[fd].registered)
        return 0;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST)
        return -errno;
    d->fds[fd].registered = 1;
    return 0;
}

/* The queues linked by rnext (the ready list, the issue queue): append
 * op; take op out (if it is there). */
static void fifo_push(ul_rop **head, ul_rop **tail, ul_rop *op)
{
    op->rnext = NULL;
    if (*tail)
        (*tail)->rnext = op;
    else
        *head = op;
    *tail = op;
}

static void fifo_remove(ul_rop **head, ul_rop **tail, ul_rop *op)
{
    ul_rop **p = head, *prev = NULL;
    while (*p && *p != op) {
        prev = *p;
        p = &(*p)->rnext;
    }
    if (!*p)
        return;
    *p = op->rnext;
    if (*tail == op)
        *tail = prev;
}

static void ready_remove(ul_ready *d, ul_rop *op)
{
    fifo_remove(&d->ready_head, &d->ready_tail, op);
    op->on_ready = 0;
}

static void make_ready(ul_ready *d, ul_rop *op)
{
    if (op->on_ready)
        return;
    op->on_ready = 1;
    fifo_push(&d->ready_head, &d->ready_tail, op);
}

/* Take op out of the place it waits in (not the threads'). */
static void unstarve(ul_ready *d, ul_rop *op)
{
    ul_rop **p = &d->starved;
    while (*p && *p != op)
        p = &(*p)->snext;
    if (*p)
        *p = op->snext;
    op->starved = 0;
}

static void detach(ul_ready *d, ul_rop *op)
{
    if (op->on_ready)
        ready_remove(d, op);
    if (op->starved)
        unstarve(d, op);
    if (op->where == W_FD) {
        ul_fdent *e = &d->fds[op->sqe.fd];
        if (op->prev)
            op->prev->next = op->next;
        else
            e->head = op->next;
        if (op->next)
            op->next->prev = op->prev;
        else
            e->tail = op->prev;
        if (!e->head)
            e->registered = 0;
    } else if (op->where == W_TIMER) {
        if (op->prev)
            op->prev->next = op->next;
        else
            d->timers = op->next;
        if (op->next)
            op->next->prev = op->prev;
    }
    op->next = op->prev = NULL;
    op->where = W_NONE;
}

/* Wait for fd readiness `want`; 0, or -errno when fd cannot be watched. */
static int wait_on_fd(ul_ready *d, ul_rop *op, unsigned want)
{
    int ret;
    op->want = want;
    if (op->where == W_FD)
        return 0;
    if ((ret = watch_fd(d, op->sqe.fd)) < 0)
        return ret;
    ul_fdent *e = &d->fds[op->sqe.fd];
    op->prev = e->tail;
    op->next = NULL;
    if (e->tail)
        e->tail->next = op;
    else
        e->head = op;
    e->tail = op;
    op->where = W_FD;
    return 0;
}

static void add_timer(ul_ready *d, ul_rop *op)
{
    ul_rop **p = &d->timers, *prev = NULL;
    while (*p && (*p)->deadline <= op->deadline) {
        prev = *p;
        p = &(*p)->next;
    }
    op->next = *p;
    op->prev = prev;
    if (*p)
        (*p)->prev = op;
    *p = op;
    op->where = W_TIMER;
}

/* ---- provided buffers ------------------------------------------------ */

static ul_group *group_of(ul_ready *d, unsigned bgid)
{
    unsigned i;
    for (i = 0; i < d->ngroups; i++)
        if (d->groups[i].used && d->groups[i].bgid == bgid)
            return &d->groups[i];
    return NULL;
}

/* The next buffer the user gave group g, or NULL when it has none. */
static struct io_uring_buf *next_buffer(ul_group *g)
{
    unsigned short tail;
    if (!g)
        return NULL;
    tail = __atomic_load_n(&g->br->tail, __ATOMIC_ACQUIRE);
    if (g->head == tail)
        return NULL;
    return &g->br->bufs[g->head & g->mask];
}

/* ---- the system calls ------------------------------------------------ */

static int is_zc(const ul_rop *op)
{
    return op->sqe.opcode == IORING_OP_SEND_ZC || op->sqe.opcode == IORING_OP_SENDMSG_ZC;
}

/* Wait for `want` on op's fd: WAIT, or DONE with the error that kept it
 * from waiting. */
static int wait_or_fail(ul_ready *d, ul_rop *op, unsigned want)
{
    int ret = wait_on_fd(d, op, want);
    return ret < 0 ? end(d, op, ret, 0) : WAIT;
}

/* A request that would block: wait for `want`, unless its flags asked
 * not to (MSG_DONTWAIT: -EAGAIN, as the kernel answers). */
static int would_block(ul_ready *d, ul_rop *op, unsigned want, int dontwait)
{
    if (dontwait)
        return end(d, op, -EAGAIN, 0);
    return wait_or_fail(d, op, want);
}

/* A multishot receive found no buffer: wait for the next enter (and for
 * readiness, as before); a single-shot one, or one whose buffer group is
 * gone (multi 0 then), ends with -ENOBUFS as in the kernel. */
static int no_buffer(ul_ready *d, ul_rop *op, int multi)
{
    int ret;
    if (!multi)
        return end(d, op, -ENOBUFS, 0);
    if ((ret = wait_on_fd(d, op, EPOLLIN)) < 0)
        return end(d, op, ret, 0);
    if (!op->starved) {
        op->starved = 1;
        op->snext = d->starved;
        d->starved = op;
    }
    return WAIT;
}

static void stream_or_not(ul_rop *op)
{
    int type = 0;
    socklen_t len = sizeof(type);
    if (op->mode & M_TYPE_KNOWN)
        return;
    op->mode |= M_TYPE_KNOWN;
    if (getsockopt(op->sqe.fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM)
        op->mode |= M_STREAM;
}

static int do_recv(ul_ready *d, ul_rop *op, unsigned events)
{
    struct io_uring_sqe *sqe = &op->sqe;
    int flags = (int)sqe->msg_flags;
    int multi = (sqe->ioprio & IORING_RECV_MULTISHOT) != 0;
    int select = (sqe->flags & IOSQE_BUFFER_SELECT) != 0;
    int i;
    for (i = 0; i < ROUND_SHARE; i++) {
        void *buf = (void *)(uintptr_t)sqe->addr;
        size_t len = sqe->len;
        ul_group *g = NULL;
        struct io_uring_buf *b = NULL;
        unsigned cflags = 0;
        ssize_t n;
        if (select) {
            g = group_of(d, sqe->buf_group);
            if (!(b = next_buffer(g)))
                return no_buffer(d, op, multi && g);
            buf = (void *)(uintptr_t)b->addr;
            len = (sqe->len && sqe->len < b->len) ? sqe->len : b->len;
        }
        n = recv(sqe->fd, buf, len, flags | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return would_block(d, op, EPOLLIN, flags & MSG_DONTWAIT);
            return end(d, op, -errno, 0);
        }
        if (b && n > 0) {
            cflags = IORING_CQE_F_BUFFER | ((unsigned)b->bid << IORING_CQE_BUFFER_SHIFT);
            g->head++;
        }
        if (!multi || n == 0)
            return end(d, op, (int)n, cflags);
        post(d, sqe->user_data, (int)n, cflags | IORING_CQE_F_MORE);
        /* A short read of a stream emptied it; what comes later is a new
         * report.  Not so for a first try, whose report may have gone
         * by, nor after a report of the peer's end (a read stops at it). */
        if ((size_t)n < len && events && !(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
            stream_or_not(op);
            if (op->mode & M_STREAM)
                return would_block(d, op, EPOLLIN, 0);
        }
    }
    return AGAIN;
}

static int do_recvmsg(ul_ready *d, ul_rop *op)
{
    struct io_uring_sqe *sqe = &op->sqe;
    struct msghdr *tmpl = (struct msghdr *)(uintptr_t)sqe->addr;
    int flags = (int)sqe->msg_flags;
    int multi = (sqe->ioprio & IORING_RECV_MULTISHOT) != 0;
    int i;
    if (!(sqe->flags & IOSQE_BUFFER_SELECT)) {
        ssize_t n;
        do {
            n = recvmsg(sqe->fd, tmpl, flags | MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return would_block(d, op, EPOLLIN, flags & MSG_DONTWAIT);
        return end(d, op, n < 0 ? -errno : (int)n, 0);
    }
    for (i = 0; i < ROUND_SHARE; i++) {
        ul_group *g = group_of(d, sqe->buf_group);
        struct io_uring_buf *b = next_buffer(g);
        struct io_uring_recvmsg_out *out;
        struct msghdr m;
        struct iovec iov;
        unsigned char *buf;
        size_t head = sizeof(*out) + tmpl->msg_namelen + tmpl->msg_controllen;
        ssize_t n;
        if (!b)
            return no_buffer(d, op, multi && g);
        if (b->len < head)
            return end(d, op, -EFAULT, 0);
        buf = (unsigned char *)(uintptr_t)b->addr;
        out = (struct io_uring_recvmsg_out *)buf;
        memset(&m, 0, sizeof(m));
        m.msg_name = tmpl->msg_namelen ? buf + sizeof(*out) : NULL;
        m.msg_namelen = tmpl->msg_namelen;
        m.msg_control = tmpl->msg_controllen ? buf + sizeof(*out) + tmpl->msg_namelen : NULL;
        m.msg_controllen = tmpl->msg_controllen;
        iov.iov_base = buf + head;
        iov.iov_len = b->len - head;
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        n = recvmsg(sqe->fd, &m, flags | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return would_block(d, op, EPOLLIN, flags & MSG_DONTWAIT);
            return end(d, op, -errno, 0);
        }
        out->namelen = m.msg_namelen;
        out->controllen = (unsigned)m.msg_controllen;
        out->payloadlen = (unsigned)n;
        out->flags = (unsigned)m.msg_flags;
        g->head++;
        unsigned cflags = IORING_CQE_F_BUFFER | ((unsigned)b->bid << IORING_CQE_BUFFER_SHIFT);
        int res = (int)(head + ((size_t)n < iov.iov_len ? (size_t)n : iov.iov_len));
        if (!multi)
            return end(d, op, res, cflags);
        post(d, sqe->user_data, res, cflags | IORING_CQE_F_MORE);
    }
    return AGAIN;
}

static int do_send(ul_ready *d, ul_rop *op)
{
    struct io_uring_sqe *sqe = &op->sqe;
    int flags = (int)sqe->msg_flags;
    ssize_t n;
    for (;;) {
        if (sqe->opcode == IORING_OP_SENDMSG || sqe->opcode == IORING_OP_SENDMSG_ZC)
            n = sendmsg(sqe->fd, (struct msghdr *)(uintptr_t)sqe->addr,
                        flags | MSG_DONTWAIT | MSG_NOSIGNAL);
        else
            n = sendto(sqe->fd, (void *)(uintptr_t)sqe->addr, sqe->len,
                       flags | MSG_DONTWAIT | MSG_NOSIGNAL,
                       sqe->addr2 ? (struct sockaddr *)(uintptr_t)sqe->addr2 : NULL,
                       sqe->addr2 ? sqe->addr_len : 0);
        if (n >= 0 || errno != EINTR)
            break;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return would_block(d, op, EPOLLOUT, flags & MSG_DONTWAIT);
    return end(d, op, n < 0 ? -errno : (int)n, 0);
}

/* Wait for `want` on op's fd, or, where epoll refuses the fd (a regular
 * file: EPERM), hand op to a thread: WAIT, or DONE when op went to a thread
 * or ended with the error that kept it from waiting. */
static int wait_or_thread(ul_ready *d, ul_rop *op, unsigned want)
{
    int ret = wait_on_fd(d, op, want);
    if (ret == -EPERM) {
        to_thread(d, op);
        return DONE;
    }
    return ret < 0 ? end(d, op, ret, 0) : WAIT;
}

static int do_rw(ul_ready *d, ul_rop *op)
{
    struct io_uring_sqe *sqe = &op->sqe;
    int writing = sqe->opcode == IORING_OP_WRITE;
    struct iovec iov = { (void *)(uintptr_t)sqe->addr, sqe->len };
    off_t off = (off_t)sqe->off;
    ssize_t n;
    int fl;
    for (;;) {
        if (op->mode & M_PLAIN_RW)
            n = writing ? ul_write_at(sqe->fd, iov.iov_base, iov.iov_len, off)
                        : ul_read_at(sqe->fd, iov.iov_base, iov.iov_len, off);
        else
            n = writing ? pwritev2(sqe->fd, &iov, 1, off, RWF_NOWAIT)
                      : preadv2(sqe->fd, &iov, 1, off, RWF_NOWAIT);
        if (n >= 0 || errno != EINTR)
            break;
    }
    if (n >= 0)
        return end(d, op, (int)n, 0);
    if (errno == EOPNOTSUPP && !(op->mode & M_PLAIN_RW)) {
        /* no RWF_NOWAIT for this file: a pollable one is read or written
         * when ready, any other one in a thread */
        if (wait_or_thread(d, op, writing ? EPOLLOUT : EPOLLIN) == DONE)
            return DONE;
        op->mode |= M_PLAIN_RW;
        struct pollfd p = { sqe->fd, (short)(writing ? POLLOUT : POLLIN), 0 };
        if (poll(&p, 1, 0) > 0)
            return do_rw(d, op);
        return WAIT;
    }
    if (errno != EAGAIN)
        return end(d, op, -errno, 0);
    if (wait_or_thread(d, op, writing ? EPOLLOUT : EPOLLIN) == DONE)
        return DONE;                    /* (a regular file: to the disk) */
    fl = fcntl(sqe->fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
        /* io_uring answers -EAGAIN for an O_NONBLOCK file (design.md, fact 7) */
        detach(d, op);
        return end(d, op, -EAGAIN, 0);
    }
    return WAIT;
}

/* A POLL_ADD's report: the events asked for, and errors and hang-ups. */
static unsigned poll_hits(const ul_rop *op, unsigned events)
{
    return events & (op->sqe.poll32_events | POLLERR | POLLHUP);
}

static int do_poll_report(ul_ready *d, ul_rop *op, unsigned events)
{
    unsigned hits = poll_hits(op, events);
    if (!hits)
        return WAIT;
    if (op->sqe.len & IORING_POLL_ADD_MULTI) {
        post(d, op->sqe.user_data, (int)hits, IORING_CQE_F_MORE);
        return WAIT;
    }
    return end(d, op, (int)hits, 0);
}

static int do_poll_start(ul_ready *d, ul_rop *op)
{
    unsigned mask = op->sqe.poll32_events;
    unsigned want = ((mask & (POLLIN | POLLPRI | UL_POLLRDHUP)) ? EPOLLIN : 0)
                    | ((mask & POLLOUT) ? EPOLLOUT : 0);
    struct pollfd p = { op->sqe.fd, (short)(mask & 0xffff), 0 };
    /* a poll checks readiness when armed */
    if (poll(&p, 1, 0) > 0) {
        if (p.revents & POLLNVAL)
            return end(d, op, -EBADF, 0);
        if (do_poll_report(d, op, (unsigned)p.revents) == DONE)
            return DONE;
    }
    return wait_or_fail(d, op, want);
}

/* Try a request that waits on its fd; `events` is what epoll reported
 * (0: tried without a report). */
static int attempt(ul_ready *d, ul_rop *op, unsigned events)
{
    switch (op->sqe.opcode) {
    case IORING_OP_RECV:
        return do_recv(d, op, events);
    case IORING_OP_RECVMSG:
        return do_recvmsg(d, op);
    case IORING_OP_SEND:
    case IORING_OP_SEND_ZC:
    case IORING_OP_SENDMSG:
    case IORING_OP_SENDMSG_ZC:
        return do_send(d, op);
    case IORING_OP_READ:
    case IORING_OP_WRITE:
        return do_rw(d, op);
    case IORING_OP_POLL_ADD:
        return do_poll_report(d, op, events);
    }
    return end(d, op, -EINVAL, 0);
}

/* ---- the end of a request -------------------------------------------- */

/* A link fails its chain when it fails, except a TIMEOUT that asked for
 * its expiry to count as success. */
static int fails_chain(const ul_rop *op, int res)
{
    if (op->sqe.opcode == IORING_OP_TIMEOUT && res == -ETIME
            && (op->sqe.timeout_flags & IORING_TIMEOUT_ETIME_SUCCESS))
        return 0;
    return res < 0;
}

static void queue_issue(ul_ready *d, ul_rop *op)
{
    fifo_push(&d->issue_head, &d->issue_tail, op);
}

/* Post op's final completion and let it go; then its next link is issued
 * (from the issue queue, so that a long chain does not recurse), or, when
 * op failed, every later link completes with -ECANCELED. */
static void finish(ul_ready *d, ul_rop *op, int res, unsigned cflags)
{
    ul_rop *link = op->link;
    int zc = is_zc(op);
    detach(d, op);
    hash_remove(d, op);
    if (!((op->sqe.flags & IOSQE_CQE_SKIP_SUCCESS) && res >= 0))
        post(d, op->sqe.user_data, res,
             cflags | ((zc && !op->link_cancelled) ? IORING_CQE_F_MORE : 0));
    if (zc)     /* the copy is made: the kernel no longer reads the pages */
        post(d, op->sqe.user_data,
             (res > 0 && (op->sqe.ioprio & IORING_SEND_ZC_REPORT_USAGE))
                 ? (int)IORING_NOTIF_USAGE_ZC_COPIED : 0,
             IORING_CQE_F_NOTIF);
    if (link && fails_chain(op, res)) {
        while (link) {
            ul_rop *next = link->link;
            link->link = NULL;
            link->link_cancelled = 1;
            finish(d, link, -ECANCELED, 0);
            link = next;
        }
    } else if (link) {
        queue_issue(d, link);
    }
    free(op);
}

static void issue(ul_ready *d, ul_rop *op)
{
    hash_add(d, op);
    start(d, op);
}

static void drain_issue(ul_ready *d)
{
    while (d->issue_head) {
        ul_rop *op = d->issue_head;
        d->issue_head = op->rnext;
        if (!d->issue_head)
            d->issue_tail = NULL;
        issue(d, op);
    }
}

/* ---- cancels --------------------------------------------------------- */

/* End op with -ECANCELED: 0, or -EALREADY when a thread runs it (it ends
 * with its own result). */
static int cancel_one(ul_ready *d, ul_rop *op)
{
    if (op->where == W_THREAD) {
        if (!ul_pool_unqueue(d->pool, &op->job))
            return -EALREADY;
        op->where = W_NONE;
    }
    finish(d, op, -ECANCELED, 0);
    return 0;
}

static int cancel_matches(const ul_rop *op, const ul_rop *cancel)
{
    unsigned flags = cancel->sqe.cancel_flags;
    if (op == cancel || op->sqe.opcode == IORING_OP_ASYNC_CANCEL)
        return 0;
    if (flags & IORING_ASYNC_CANCEL_ANY)
        return 1;
    if (flags & IORING_ASYNC_CANCEL_FD)
        return op->sqe.fd == cancel->sqe.fd;
    return op->sqe.user_data == cancel->sqe.addr;
}

static void do_cancel(ul_ready *d, ul_rop *cancel)
{
    unsigned flags = cancel->sqe.cancel_flags, i, n = 0, cap = 0;
    int all = (flags & IORING_ASYNC_CANCEL_ALL) != 0, done = 0, running = 0;
    ul_rop **found = NULL, *op;
    if (!all && !(flags & (IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_FD))) {
        /* the one request of a user_data, the loop's cancel: its bucket */
        for (op = d->buckets[bucket_of(d, cancel->sqe.addr)]; op; op = op->hnext)
            if (cancel_matches(op, cancel))
                break;
        if (op)
            found = &op;
        n = op != NULL;
    } else {
        /* by fd, any or all: collected first, as each cancel changes the table */
        for (i = 0; i < d->nbuckets; i++)
            for (op = d->buckets[i]; op; op = op->hnext) {
                if (!cancel_matches(op, cancel))
                    continue;
                if (n == cap) {
                    unsigned more_cap = cap ? cap * 2 : 16;
                    ul_rop **more = realloc(found, more_cap * sizeof(*found));
                    if (!more)
                        goto collected;     /* cancel what was found */
                    found = more;
                    cap = more_cap;
                }
                found[n++] = op;
            }
    }
collected:
    for (i = 0; i < n && (all || i == 0); i++) {
        if (cancel_one(d, found[i]) == 0)
            done++;
        else
            running++;
    }
    if (cap)
        free(found);
    finish(d, cancel, done ? (all ? done : 0) : running ? -EALREADY : -ENOENT, 0);
}

/* ---- the driver's threads (threads.c) ------------------------------- */

static void to_thread(ul_ready *d, ul_rop *op)
{
    detach(d, op);
    op->job.sqe = &op->sqe;
    op->where = W_THREAD;
    if (ul_pool_push(d->pool, &op->job) < 0) {
        /* no thread could be made: run it here rather than never */
        op->where = W_NONE;
        finish(d, op, ul_job_run(&op->sqe), 0);
    }
}

static void collect_threads(ul_ready *d)
{
    ul_job *job = ul_pool_finished(d->pool);
    while (job) {
        ul_job *next = job->next;
        ul_rop *op = OP_OF_JOB(job);
        op->where = W_NONE;
        finish(d, op, job->res, 0);
        job = next;
    }
}

/* A job the pool lets go of when the driver is gone: its request. */
static void drop_job(ul_job *job)
{
    free(OP_OF_JOB(job));
}

/* ---- issuing ---------------------------------------------------------- */

/* OPENAT as the kernel issues it: first without blocking, O_NONBLOCK and
 * a path the dentry cache resolves alone, unless O_CREAT, O_TRUNC or
 * O_TMPFILE send it to io-wq at once; O_NONBLOCK is cleared again unless
 * asked for.  So a FIFO opens for reading without waiting for a writer,
 * as on the ring, and a cached open needs no thread.  AGAIN: for a
 * thread. */
static int open_first(ul_ready *d, ul_rop *op)
{
    struct io_uring_sqe *sqe = &op->sqe;
    unsigned flags = sqe->open_flags;
    struct { uint64_t flags, mode, resolve; } how;
    long fd;
    if (d->no_openat2 || (flags & (O_CREAT | O_TRUNC | __O_TMPFILE)))
        return AGAIN;
    how.flags = flags | O_NONBLOCK | O_LARGEFILE;
    how.mode = 0;
    how.resolve = UL_RESOLVE_CACHED;
    fd = syscall(SYS_openat2, sqe->fd, (const char *)(uintptr_t)sqe->addr, &how, sizeof(how));
    if (fd < 0) {
        /* ENOSYS: no openat2 (before 5.6, a sandbox); EINVAL: no
         * RESOLVE_CACHED (before 5.12); EAGAIN: not all cached; EPERM
         * may be a seccomp filter's.  The thread's openat() answers. */
        if (errno == ENOSYS || errno == EINVAL)
            d->no_openat2 = 1;
        if (errno == EAGAIN || errno == ENOSYS || errno == EINVAL || errno == EPERM)
            return AGAIN;
        return end(d, op, -errno, 0);
    }
    /* (F_SETFL takes the status flags asked for: the file has just these
     * and O_NONBLOCK.)  Where O_NONBLOCK cannot be cleared (an append-only
     * file opened without O_APPEND: EPERM), the thread's open answers. */
    if (!(flags & O_NONBLOCK) && fcntl((int)fd, F_SETFL, (int)flags) < 0) {
        close((int)fd);
        return AGAIN;
    }
    return end(d, op, (int)fd, 0);
}

static void start(ul_ready *d, ul_rop *op)
{
    struct io_uring_sqe *sqe = &op->sqe;
    int res;
    switch (sqe->opcode) {
    case IORING_OP_NOP:
        finish(d, op, 0, 0);
        return;
    case IORING_OP_ASYNC_CANCEL:
        do_cancel(d, op);
        return;
    case IORING_OP_CLOSE:
        res = close(sqe->fd) < 0 ? -errno : 0;
        finish(d, op, res, 0);
        return;
    case IORING_OP_TIMEOUT: {
        const struct __kernel_timespec *ts = (const void *)(uintptr_t)sqe->addr;
        op->deadline = ul_now_ns() + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
        add_timer(d, op);
        return;
    }
    case IORING_OP_OPENAT:
        if (open_first(d, op) == DONE)
            return;
        to_thread(d, op);
        return;
    case IORING_OP_STATX:
    case IORING_OP_FSYNC:
    case UL_OP_FTRUNCATE:
    case IORING_OP_SPLICE:
        to_thread(d, op);
        return;
    case IORING_OP_POLL_ADD:
        do_poll_start(d, op);
        return;
    case IORING_OP_RECV:
    case IORING_OP_RECVMSG:
    case IORING_OP_SEND:
    case IORING_OP_SEND_ZC:
    case IORING_OP_SENDMSG:
    case IORING_OP_SENDMSG_ZC:
    case IORING_OP_READ:
    case IORING_OP_WRITE:
        if (attempt(d, op, 0) == AGAIN)
            make_ready(d, op);
        return;
    }
    finish(d, op, -EINVAL, 0);
}

/* Take every SQE handed out; a chain is issued from its head, its later
 * links as each one before ends well. */
static unsigned take_sqes(ul_ring *r)
{
    ul_ready *d = r->driver;
    unsigned head = d->sq_head, tail = __atomic_load_n(r->sq_ktail, __ATOMIC_ACQUIRE);
    unsigned taken = 0;
    ul_rop *chain = NULL, *last = NULL;
    while (head != tail) {
        struct io_uring_sqe *sqe = &r->sqes[head & r->sq_mask];
        ul_rop *op = calloc(1, sizeof(*op));
        head++;
        taken++;
        if (!op) {
            post(d, sqe->user_data, -ENOMEM, 0);
            continue;
        }
        op->sqe = *sqe;
        if (last)
            last->link = op;
        else
            chain = op;
        last = op;
        if (!(sqe->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK))) {
            queue_issue(d, chain);
            chain = last = NULL;
        }
    }
    if (chain)      /* a chain cut by the end of the submission ends there */
        queue_issue(d, chain);
    __atomic_store_n(&d->sq_head, head, __ATOMIC_RELEASE);
    drain_issue(d);
    return taken;
}

/* ---- waiting ----------------------------------------------------------- */

static void on_event(ul_ready *d, int fd, unsigned events)
{
    ul_rop *op, *last;
    if (fd < 0 || fd >= d->nfds)
        return;
    op = d->fds[fd].head;
    last = d->fds[fd].tail;
    while (op) {
        ul_rop *next = op == last ? NULL : op->next;
        if ((events & op->want) || (events & (EPOLLERR | EPOLLHUP))) {
            if (attempt(d, op, events) == AGAIN)
                make_ready(d, op);
        }
        op = next;
    }
}

static void run_ready(ul_ready *d)
{
    ul_rop *op = d->ready_head, *last = d->ready_tail;
    while (op) {
        ul_rop *next = op == last ? NULL : op->rnext;
        ready_remove(d, op);
        if (attempt(d, op, 0) == AGAIN)
            make_ready(d, op);
        op = next;
    }
}

static void expire_timers(ul_ready *d, int64_t now)
{
    while (d->timers && d->timers->deadline <= now)
        finish(d, d->timers, -ETIME, 0);
}

static int epoll_wait_ns(ul_ready *d, struct epoll_event *evs, int n, int64_t wait_ns)
{
    if (!d->no_pwait2) {
        struct timespec ts;
        if (wait_ns >= 0) {
            ts.tv_sec = wait_ns / 1000000000;
            ts.tv_nsec = wait_ns % 1000000000;
        }
        int ret = epoll_pwait2(d->epfd, evs, n, wait_ns >= 0 ? &ts : NULL, NULL);
        if (ret >= 0 || errno != ENOSYS)
            return ret;
        d->no_pwait2 = 1;   /* before 5.11, or a sandbox without it */
    }
    return epoll_wait(d->epfd, evs, n,
                      wait_ns < 0 ? -1 : (int)((wait_ns + 999999) / 1000000));
}

int ul_ready_enter(ul_ring *r, unsigned wait_nr, int64_t timeout_ns, int submit_only)
{
    ul_ready *d = r->driver;
    struct epoll_event evs[EPOLL_BATCH];
    int64_t deadline = timeout_ns < 0 ? -1 : ul_now_ns() + timeout_ns;
    unsigned taken;
    int i, n, polled = 0;

    flush_overflow(r);
    while (d->starved) {        /* the loop may have given buffers back */
        ul_rop *op = d->starved;
        d->starved = op->snext;
        op->starved = 0;
        make_ready(d, op);
    }
    taken = take_sqes(r);
    r->sqes_submitted += taken;
    if (submit_only)
        return (int)taken;
    for (;;) {
        int64_t now = ul_now_ns(), wait_ns;
        flush_overflow(r);
        if (polled && (ul_cq_ready(r) >= wait_nr || (deadline >= 0 && now >= deadline)))
            break;
        if (ul_cq_ready(r) >= wait_nr || d->ready_head || d->over_head)
            wait_ns = 0;
        else
            wait_ns = deadline < 0 ? -1 : (deadline > now ? deadline - now : 0);
        if (d->timers && wait_ns != 0) {
            int64_t t = d->timers->deadline > now ? d->timers->deadline - now : 0;
            if (wait_ns < 0 || t < wait_ns)
                wait_ns = t;
        }
        n = epoll_wait_ns(d, evs, EPOLL_BATCH, wait_ns);
        polled = 1;
        if (n < 0) {
            if (errno == EINTR)
                return taken ? (int)taken : -EINTR;
            return -errno;
        }
        for (i = 0; i < n; i++) {
            if (evs[i].data.fd == ul_pool_fd(d->pool))
                collect_threads(d);
            else
                on_event(d, evs[i].data.fd, evs[i].events);
        }
        run_ready(d);
        expire_timers(d, ul_now_ns());
        drain_issue(d);
    }
    if (taken)
        return (int)taken;
    return ul_cq_ready(r) >= wait_nr ? 0 : -ETIME;
}

/* ---- setting up, registering, ending ------------------------------------- */

static unsigned pow2_at_least(unsigned n)
{
    unsigned p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

int ul_ready_init(ul_ring *r, unsigned entries, unsigned cq_entries)
{
    ul_ready *d;
    struct epoll_event ev;

    memset(r, 0, sizeof(*r));
    r->fd = -1;
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    r->driver = d;
    d->ring = r;
    d->pid = getpid();
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd < 0 || !(d->pool = ul_pool_new(drop_job))) {
        int err = errno;
        ul_ready_exit(r);
        return -err;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.fd = ul_pool_fd(d->pool);
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, ev.data.fd, &ev) < 0 || hash_grow(d) < 0) {
        int err = errno ? errno : ENOMEM;
        ul_ready_exit(r);
        return -err;
    }
    r->sq_entries = pow2_at_least(entries ? entries : 1);
    r->cq_entries = pow2_at_least(cq_entries > r->sq_entries ? cq_entries : r->sq_entries);
    r->sq_mask = r->sq_entries - 1;
    r->cq_mask = r->cq_entries - 1;
    r->sqes = calloc(r->sq_entries, sizeof(struct io_uring_sqe));
    r->cqes = calloc(r->cq_entries, sizeof(struct io_uring_cqe));
    if (!r->sqes || !r->cqes) {
        ul_ready_exit(r);
        return -ENOMEM;
    }
    r->sq_khead = &d->sq_head;
    r->sq_ktail = &d->sq_tail;
    r->sq_kflags = &d->sq_flags;
    r->sq_array = NULL;
    r->cq_khead = &d->cq_head;
    r->cq_ktail = &d->cq_tail;
    r->cq_koverflow = &d->cq_overflow;
    r->fd = d->epfd;
    /* what the driver's requests are like: completions come only inside
     * an enter, one thread submits */
    r->setup_flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER
                     | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_NO_SQARRAY;
    r->features = IORING_FEAT_EXT_ARG;
    return 0;
}

void ul_ready_exit(ul_ring *r)
{
    ul_ready *d = r->driver;
    unsigned i;
    if (!d)
        return;
    /* Requests still held go with the driver; one a thread runs is freed
     * by the pool when it ends (its buffers are the loop's, which keeps
     * what it could not drain). */
    for (i = 0; i < d->nbuckets; i++) {
        ul_rop *op = d->buckets[i];
        while (op) {
            ul_rop *next = op->hnext;
            if (op->where != W_THREAD)
                free(op);
            op = next;
        }
    }
    while (d->over_head) {
        ul_cqe_node *n = d->over_head;
        d->over_head = n->next;
        free(n);
    }
    if (d->pool && d->pid != getpid())
        ul_pool_forget(d->pool);    /* a forked child: threads.h */
    else if (d->pool)
        ul_pool_stop(d->pool);
    if (d->epfd >= 0)
        close(d->epfd);
    free(d->fds);
    free(d->buckets);
    free(d->groups);
    free(r->sqes);
    free(r->cqes);
    free(d);
    r->driver = NULL;
    r->sqes = NULL;
    r->cqes = NULL;
    r->fd = -1;
}

static const unsigned char supported_ops[] = {
    IORING_OP_NOP, IORING_OP_READ, IORING_OP_WRITE, IORING_OP_FSYNC,
    IORING_OP_POLL_ADD, IORING_OP_SENDMSG, IORING_OP_RECVMSG, IORING_OP_TIMEOUT,
    IORING_OP_ASYNC_CANCEL, IORING_OP_OPENAT, IORING_OP_CLOSE, IORING_OP_STATX,
    IORING_OP_SEND, IORING_OP_RECV, IORING_OP_SPLICE, IORING_OP_SEND_ZC,
    IORING_OP_SENDMSG_ZC, UL_OP_FTRUNCATE,
};

static int register_probe(struct io_uring_probe *probe, unsigned nr)
{
    unsigned i, last = UL_OP_PIPE;
    memset(probe, 0, sizeof(*probe) + nr * sizeof(probe->ops[0]));
    probe->last_op = (uint8_t)last;
    probe->ops_len = (uint8_t)(nr < last + 1 ? nr : last + 1);
    for (i = 0; i < probe->ops_len; i++)
        probe->ops[i].op = (uint8_t)i;
    for (i = 0; i < sizeof(supported_ops); i++)
        if (supported_ops[i] < probe->ops_len)
            probe->ops[supported_ops[i]].flags = IO_URING_OP_SUPPORTED;
    return 0;
}

static int register_group(ul_ready *d, const struct io_uring_buf_reg *reg)
{
    ul_group *g;
    unsigned i;
    if (!reg->ring_entries || (reg->ring_entries & (reg->ring_entries - 1)))
        return -EINVAL;
    if (group_of(d, reg->bgid))
        return -EEXIST;
    for (i = 0; i < d->ngroups && d->groups[i].used; i++)
        ;
    if (i == d->ngroups) {
        g = realloc(d->groups, (d->ngroups + 1) * sizeof(*g));
        if (!g)
            return -ENOMEM;
        d->groups = g;
        d->ngroups++;
    }
    g = &d->groups[i];
    g->br = (struct io_uring_buf_ring *)(uintptr_t)reg->ring_addr;
    g->mask = reg->ring_entries - 1;
    g->head = 0;
    g->bgid = reg->bgid;
    g->used = 1;
    return 0;
}

int ul_ready_register(ul_ring *r, unsigned opcode, void *arg, unsigned nr_args)
{
    ul_ready *d = r->driver;
    ul_group *g;
    switch (opcode) {
    case UL_REGISTER_PROBE:
        return register_probe(arg, nr_args);
    case UL_REGISTER_ENABLE_RINGS:
        return 0;
    case UL_REGISTER_PBUF_RING:
        return register_group(d, arg);
    case UL_UNREGISTER_PBUF_RING:
        g = group_of(d, ((struct io_uring_buf_reg *)arg)->bgid);
        if (!g)
            return -EINVAL;
        g->used = 0;
        return 0;
    case IORING_REGISTER_BUFFERS2:
    case IORING_REGISTER_BUFFERS_UPDATE:
        /* the driver reads the addresses the SQEs carry: nothing to pin */
        return 0;
    }
    return -EINVAL;
}
