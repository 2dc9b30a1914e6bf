/*
 * ring.c -- io_uring setup, teardown and the three system calls.
 *
 * Written for uringloop from the kernel's documented ABI (io_uring_setup(2),
 * io_uring_enter(2), io_uring_register(2)).  See ring.h for the contract.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"
#include "readiness.h"
#include "zcrx.h"

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif
#ifndef __NR_io_uring_register
#define __NR_io_uring_register 427
#endif

static int sys_setup(unsigned entries, struct io_uring_params *p)
{
    long ret = syscall(__NR_io_uring_setup, entries, p);
    return ret < 0 ? -errno : (int)ret;
}

static int sys_enter(int fd, unsigned to_submit, unsigned min_complete,
                     unsigned flags, void *arg, size_t argsz)
{
    long ret = syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags,
                       arg, argsz);
    return ret < 0 ? -errno : (int)ret;
}

int ul_ring_register(ul_ring *r, unsigned opcode, void *arg, unsigned nr_args)
{
    if (r->driver)
        return ul_ready_register(r, opcode, arg, nr_args);
    long ret = syscall(__NR_io_uring_register, r->fd, opcode, arg, nr_args);
    return ret < 0 ? -errno : (int)ret;
}

int ul_ring_register_buffer_table(ul_ring *r, unsigned nr)
{
    struct io_uring_rsrc_register reg;
    memset(&reg, 0, sizeof(reg));
    reg.nr = nr;
    reg.flags = IORING_RSRC_REGISTER_SPARSE;
    return ul_ring_register(r, IORING_REGISTER_BUFFERS2, &reg, sizeof(reg));
}

int ul_ring_update_buffer(ul_ring *r, unsigned slot, void *addr, size_t len)
{
    struct iovec iov = { .iov_base = addr, .iov_len = addr ? len : 0 };
    struct io_uring_rsrc_update2 up;
    int ret;
    memset(&up, 0, sizeof(up));
    up.offset = slot;
    up.data = (uint64_t)(uintptr_t)&iov;
    up.nr = 1;
    ret = ul_ring_register(r, IORING_REGISTER_BUFFERS_UPDATE, &up, sizeof(up));
    return ret < 0 ? ret : 0;
}

/* The optional setup flags are tried in groups, newest kernel first: a kernel
 * that does not know a flag answers -EINVAL, and we retry without that
 * group.  Any other error (EPERM from seccomp or io_uring_disabled, ENOSYS,
 * ENOMEM) ends the attempt. */
static const unsigned drop_order[] = {
    IORING_SETUP_NO_SQARRAY,                                      /* 6.6 */
    IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER
        | IORING_SETUP_R_DISABLED,                                /* 6.1 */
    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,        /* 5.19 */
    IORING_SETUP_SUBMIT_ALL,                                      /* 5.18 */
};

static int map_rings(ul_ring *r, struct io_uring_params *p)
{
    size_t sq_len = p->sq_off.array + p->sq_entries * sizeof(unsigned);
    /* a CQE32 ring (zero-copy receive) has 32-byte completion entries */
    size_t cqe_size = sizeof(struct io_uring_cqe) << ((p->flags & UL_SETUP_CQE32) ? 1 : 0);
    size_t cq_len = p->cq_off.cqes + p->cq_entries * cqe_size;
    unsigned char *sq, *cq;

    if (p->flags & IORING_SETUP_NO_SQARRAY)
        sq_len = p->sq_off.array ? p->sq_off.array : p->sq_off.dropped + sizeof(unsigned);
    if (p->features & IORING_FEAT_SINGLE_MMAP) {
        if (cq_len > sq_len)
            sq_len = cq_len;
        cq_len = sq_len;
    }
    sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
              r->fd, IORING_OFF_SQ_RING);
    if (sq == MAP_FAILED)
        return -errno;
    r->sq_map = sq;
    r->sq_map_len = sq_len;
    if (p->features & IORING_FEAT_SINGLE_MMAP) {
        cq = sq;
        r->cq_map = NULL;
        r->cq_map_len = 0;
    } else {
        cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                  r->fd, IORING_OFF_CQ_RING);
        if (cq == MAP_FAILED)
            return -errno;
        r->cq_map = cq;
        r->cq_map_len = cq_len;
    }
    r->sqes_map_len = p->sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_map_len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) {
        r->sqes = NULL;
        return -errno;
    }

    r->sq_khead = (unsigned *)(sq + p->sq_off.head);
    r->sq_ktail = (unsigned *)(sq + p->sq_off.tail);
    r->sq_kflags = (unsigned *)(sq + p->sq_off.flags);
    r->sq_mask = *(unsigned *)(sq + p->sq_off.ring_mask);
    r->sq_entries = *(unsigned *)(sq + p->sq_off.ring_entries);
    r->sq_array = NULL;
    if (!(p->flags & IORING_SETUP_NO_SQARRAY)) {
        /* Identity map once: SQE i is always slot i. */
        unsigned i;
        r->sq_array = (unsigned *)(sq + p->sq_off.array);
        for (i = 0; i < r->sq_entries; i++)
            r->sq_array[i] = i;
    }
    r->sqe_tail = *r->sq_ktail;

    r->cq_khead = (unsigned *)(cq + p->cq_off.head);
    r->cq_ktail = (unsigned *)(cq + p->cq_off.tail);
    r->cq_koverflow = (unsigned *)(cq + p->cq_off.overflow);
    r->cq_mask = *(unsigned *)(cq + p->cq_off.ring_mask);
    r->cq_entries = *(unsigned *)(cq + p->cq_off.ring_entries);
    r->cqes = (struct io_uring_cqe *)(cq + p->cq_off.cqes);
    return 0;
}

int ul_ring_init(ul_ring *r, unsigned entries, unsigned cq_entries, unsigned wanted)
{
    struct io_uring_params p;
    unsigned flags = wanted;
    size_t step = 0;
    int fd, ret;

    memset(r, 0, sizeof(*r));
    r->fd = -1;
    for (;;) {
        memset(&p, 0, sizeof(p));
        p.flags = flags | IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP;
        p.cq_entries = cq_entries;
        fd = sys_setup(entries, &p);
        if (fd >= 0)
            break;
        if (fd != -EINVAL || step == sizeof(drop_order) / sizeof(drop_order[0]))
            return fd;
        flags &= ~drop_order[step++];
    }
    r->fd = fd;
    r->setup_flags = p.flags;
    r->features = p.features;
    if (!(p.features & IORING_FEAT_EXT_ARG)) {
        /* Older than 5.11: we cannot wait with a timeout in one call. */
        ul_ring_exit(r);
        return -ENOSYS;
    }
    ret = map_rings(r, &p);
    if (ret < 0) {
        ul_ring_exit(r);
        return ret;
    }
    return 0;
}

void ul_ring_exit(ul_ring *r)
{
    if (r->driver) {
        ul_ready_exit(r);
        return;
    }
    if (r->sqes)
        munmap(r->sqes, r->sqes_map_len);
    if (r->cq_map)
        munmap(r->cq_map, r->cq_map_len);
    if (r->sq_map)
        munmap(r->sq_map, r->sq_map_len);
    if (r->fd >= 0)
        close(r->fd);
    r->sqes = NULL;
    r->cq_map = r->sq_map = NULL;
    r->fd = -1;
}

int ul_ring_enable(ul_ring *r)
{
    return ul_ring_register(r, UL_REGISTER_ENABLE_RINGS, NULL, 0);
}

int ul_ring_probe(ul_ring *r, unsigned char *supported)
{
    size_t len = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
    struct io_uring_probe *probe = calloc(1, len);
    int ret, i;

    if (!probe)
        return -ENOMEM;
    memset(supported, 0, 256);
    ret = ul_ring_register(r, UL_REGISTER_PROBE, probe, 256);
    if (ret >= 0) {
        for (i = 0; i < probe->ops_len; i++)
            if (probe->ops[i].flags & IO_URING_OP_SUPPORTED)
                supported[probe->ops[i].op] = 1;
        ret = probe->last_op;
    }
    free(probe);
    return ret;
}

/* Hand the queued SQEs to the kernel and nothing else: no completion work
 * the kernel deferred to us runs (no IORING_ENTER_GETEVENTS), so what the
 * submission makes ready is posted at the next enter that asks for it. */
int ul_ring_submit_only(ul_ring *r)
{
    unsigned to_submit;

    __atomic_store_n(r->sq_ktail, r->sqe_tail, __ATOMIC_RELEASE);
    to_submit = ul_sq_pending(r);
    if (to_submit == 0)
        return 0;
    r->enter_calls++;
    if (r->driver)
        return ul_ready_enter(r, 0, 0, 1);
    int ret = sys_enter(r->fd, to_submit, 0, 0, NULL, 0);
    if (ret > 0)
        r->sqes_submitted += (unsigned)ret;
    return ret;
}

int ul_ring_enter(ul_ring *r, unsigned wait_nr, int64_t timeout_ns)
{
    struct io_uring_getevents_arg arg;
    struct __kernel_timespec ts;
    unsigned to_submit;

    /* Publish everything handed out by ul_get_sqe. */
    __atomic_store_n(r->sq_ktail, r->sqe_tail, __ATOMIC_RELEASE);
    if (r->driver) {
        r->enter_calls++;
        return ul_ready_enter(r, wait_nr, timeout_ns, 0);
    }
    to_submit = ul_sq_pending(r);

    memset(&arg, 0, sizeof(arg));
    arg.sigmask_sz = _NSIG / 8;
    if (timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        arg.ts = (uint64_t)(uintptr_t)&ts;
    }
    r->enter_calls++;
    int ret = sys_enter(r->fd, to_submit, wait_nr,
                        IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                        &arg, sizeof(arg));
    if (ret > 0)
        r->sqes_submitted += (unsigned)ret;
    return ret;
}

/* ---- provided-buffer rings (buf_ring.h) ---- */

#include "buf_ring.h"

int ul_buf_ring_init(ul_ring *r, ul_buf_ring *b, unsigned short bgid,
                     unsigned entries, unsigned buf_size)
{
    struct io_uring_buf_reg reg;
    unsigned i;
    int ret;

    memset(b, 0, sizeof(*b));
    if (entries == 0 || (entries & (entries - 1)) || entries > 32768)
        return -EINVAL;
    b->ring_len = entries * sizeof(struct io_uring_buf);
    b->br = mmap(NULL, b->ring_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->br == MAP_FAILED) {
        b->br = NULL;
        return -errno;
    }
    b->base_len = (size_t)entries * buf_size;
    b->base = mmap(NULL, b->base_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->base == MAP_FAILED) {
        b->base = NULL;
        ul_buf_ring_free(r, b);
        return -errno;
    }
    b->entries = entries;
    b->mask = entries - 1;
    b->buf_size = buf_size;
    b->bgid = bgid;

    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)b->br;
    reg.ring_entries = entries;
    reg.bgid = bgid;
    ret = ul_ring_register(r, UL_REGISTER_PBUF_RING, &reg, 1);
    if (ret < 0) {
        ul_buf_ring_free(r, b);
        return ret;
    }
    b->registered = 1;
    for (i = 0; i < entries; i++)
        ul_buf_ring_recycle(b, i);
    return 0;
}

void ul_buf_ring_free(ul_ring *r, ul_buf_ring *b)
{
    if (b->registered && r->fd >= 0) {
        struct io_uring_buf_reg reg;
        memset(&reg, 0, sizeof(reg));
        reg.bgid = b->bgid;
        ul_ring_register(r, UL_UNREGISTER_PBUF_RING, &reg, 1);
    }
    b->registered = 0;
    if (b->base)
        munmap(b->base, b->base_len);
    if (b->br)
        munmap(b->br, b->ring_len);
    b->base = NULL;
    b->br = NULL;
}


/* IORING_REGISTER_ZCRX_IFQ: bind NIC receive queue `rxq` of interface
 * `ifindex` to `area` (payload memory) with a refill queue of `rq_entries`
 * in `region`.  The ring must have DEFER_TASKRUN and CQE32.  On success the
 * kernel fills reg->offsets, reg->zcrx_id and area_reg->rq_area_token.
 * Returns 0 or -errno: -EPERM without CAP_NET_ADMIN, -EOPNOTSUPP (or
 * -EINVAL) for a device without queue management (loopback, veth,
 * virtio-net), -ENODEV for a queue that does not exist. */
int ul_zcrx_register(ul_ring *r, unsigned ifindex, unsigned rxq, unsigned rq_entries,
                     void *area, size_t area_len, void *region, size_t region_len,
                     struct ul_zcrx_ifq_reg *reg, struct ul_zcrx_area_reg *area_reg)
{
    struct ul_region_desc rd;
    memset(reg, 0, sizeof(*reg));
    memset(area_reg, 0, sizeof(*area_reg));
    memset(&rd, 0, sizeof(rd));
    area_reg->addr = (uint64_t)(uintptr_t)area;
    area_reg->len = area_len;
    rd.user_addr = (uint64_t)(uintptr_t)region;
    rd.size = region_len;
    rd.flags = UL_MEM_REGION_TYPE_USER;
    reg->if_idx = ifindex;
    reg->if_rxq = rxq;
    reg->rq_entries = rq_entries;
    reg->area_ptr = (uint64_t)(uintptr_t)area_reg;
    reg->region_ptr = (uint64_t)(uintptr_t)&rd;
    return ul_ring_register(r, UL_REGISTER_ZCRX_IFQ, reg, 1);
}

