/* Zero-copy receive (zcrx, Linux 6.15+): the kernel ABI and the refill queue.
 *
 * A NIC receive queue with header/data split writes packet payloads straight
 * into an "area" of user memory registered with IORING_REGISTER_ZCRX_IFQ.
 * A multishot IORING_OP_RECV_ZC then posts 32-byte CQEs whose second half,
 * struct ul_zcrx_cqe, names the bytes: off = area_id << 48 | offset in the
 * area, res = length.  The user hands each piece back through the refill
 * queue, a ring in a second user-memory region: it writes {off, len} at
 * rqes[tail & mask] and publishes tail with a release store; the kernel
 * consumes from head.  The layouts below are the kernel's (uapi
 * io_uring/zcrx.h); Debian 12's header predates them.
 */
#ifndef URINGLOOP_ZCRX_H
#define URINGLOOP_ZCRX_H

#include <stdint.h>
#include <errno.h>

#define UL_REGISTER_ZCRX_IFQ        32
#define UL_ZCRX_AREA_SHIFT          48
#define UL_ZCRX_OFFSET_MASK         ((((uint64_t)1) << UL_ZCRX_AREA_SHIFT) - 1)
#define UL_MEM_REGION_TYPE_USER     1
#define UL_SETUP_CQE32              (1U << 11)

struct ul_zcrx_rqe {             /* struct io_uring_zcrx_rqe */
    uint64_t off;
    uint32_t len;
    uint32_t pad;
};

struct ul_zcrx_cqe {             /* struct io_uring_zcrx_cqe: the CQE's 2nd half */
    uint64_t off;
    uint64_t pad;
};

struct ul_zcrx_offsets {         /* struct io_uring_zcrx_offsets */
    uint32_t head;
    uint32_t tail;
    uint32_t rqes;
    uint32_t resv2;
    uint64_t resv[2];
};

struct ul_zcrx_area_reg {        /* struct io_uring_zcrx_area_reg */
    uint64_t addr;
    uint64_t len;
    uint64_t rq_area_token;      /* out: area_id << 48 */
    uint32_t flags;
    uint32_t dmabuf_fd;
    uint64_t resv2[2];
};

struct ul_region_desc {          /* struct io_uring_region_desc */
    uint64_t user_addr;
    uint64_t size;
    uint32_t flags;
    uint32_t id;
    uint64_t mmap_offset;
    uint64_t resv[4];
};

struct ul_zcrx_ifq_reg {         /* struct io_uring_zcrx_ifq_reg */
    uint32_t if_idx;
    uint32_t if_rxq;
    uint32_t rq_entries;
    uint32_t flags;
    uint64_t area_ptr;
    uint64_t region_ptr;
    struct ul_zcrx_offsets offsets;   /* out */
    uint32_t zcrx_id;                 /* out */
    uint32_t rx_buf_len;
    uint64_t resv[3];
};

_Static_assert(sizeof(struct ul_zcrx_rqe) == 16, "rqe layout");
_Static_assert(sizeof(struct ul_zcrx_offsets) == 32, "offsets layout");
_Static_assert(sizeof(struct ul_zcrx_area_reg) == 48, "area layout");
_Static_assert(sizeof(struct ul_region_desc) == 64, "region layout");
_Static_assert(sizeof(struct ul_zcrx_ifq_reg) == 96, "ifq layout");

/* The user side of a refill queue laid out in `region` as the kernel said
 * in `offsets`. */
typedef struct {
    uint32_t *khead;             /* the kernel's consumer index */
    uint32_t *ktail;             /* ours, published with a release store */
    struct ul_zcrx_rqe *rqes;
    uint32_t entries;            /* a power of two */
    uint32_t tail;               /* entries written, not yet published */
} ul_zcrx_rq;

static inline void ul_zcrx_rq_init(ul_zcrx_rq *rq, void *region,
                                   const struct ul_zcrx_offsets *offsets,
                                   uint32_t entries)
{
    char *base = (char *)region;
    rq->khead = (uint32_t *)(base + offsets->head);
    rq->ktail = (uint32_t *)(base + offsets->tail);
    rq->rqes = (struct ul_zcrx_rqe *)(base + offsets->rqes);
    rq->entries = entries;
    rq->tail = __atomic_load_n(rq->ktail, __ATOMIC_RELAXED);
}

/* Entries the kernel has not consumed yet (published or not). */
static inline uint32_t ul_zcrx_rq_depth(const ul_zcrx_rq *rq)
{
    return rq->tail - __atomic_load_n(rq->khead, __ATOMIC_ACQUIRE);
}

/* Queue one piece (as the CQE named it) for return; -ENOSPC when full. */
static inline int ul_zcrx_rq_give(ul_zcrx_rq *rq, uint64_t off, uint32_t len)
{
    struct ul_zcrx_rqe *rqe;
    if (ul_zcrx_rq_depth(rq) >= rq->entries)
        return -ENOSPC;
    rqe = &rq->rqes[rq->tail & (rq->entries - 1)];
    rqe->off = off;
    rqe->len = len;
    rqe->pad = 0;
    rq->tail++;
    return 0;
}

/* Publish what ul_zcrx_rq_give queued: the kernel may refill from it. */
static inline void ul_zcrx_rq_commit(ul_zcrx_rq *rq)
{
    __atomic_store_n(rq->ktail, rq->tail, __ATOMIC_RELEASE);
}

/* Where the bytes a RECV_ZC completion names are, in an area mapped at
 * area_base: the offset part of off (the area id is in the top 16 bits). */
static inline void *ul_zcrx_data(void *area_base, uint64_t off)
{
    return (char *)area_base + (off & UL_ZCRX_OFFSET_MASK);
}

/* The refill entry for the piece a CQE named: the CQE's offset in the
 * area with the area's token (area_id << 48, from the registration). */
static inline uint64_t ul_zcrx_rqe_off(uint64_t cqe_off, uint64_t area_token)
{
    return (cqe_off & UL_ZCRX_OFFSET_MASK) | area_token;
}

#ifdef URINGLOOP_RING_H
/* Completion i of a CQE32 ring: 32-byte entries, two struct io_uring_cqe
 * slots each; the second half of a RECV_ZC one is struct ul_zcrx_cqe. */
static inline struct io_uring_cqe *ul_cq32_at(ul_ring *r, unsigned i)
{
    return &r->cqes[((*r->cq_khead + i) & r->cq_mask) << 1];
}

static inline uint64_t ul_zcrx_cqe_off(const struct io_uring_cqe *cqe)
{
    return ((const struct ul_zcrx_cqe *)(cqe + 1))->off;
}

/* Multishot RECV_ZC on socket fd through zcrx instance zcrx_id: payloads
 * land in the area; every completion names one piece.  addr, addr2, addr3,
 * len and msg_flags must stay zero (the kernel checks). */
static inline void ul_prep_recv_zc(struct io_uring_sqe *sqe, int fd, uint32_t zcrx_id)
{
    ul_prep_rw(sqe, UL_OP_RECV_ZC, fd, NULL, 0, 0);
    sqe->ioprio = IORING_RECV_MULTISHOT;
    sqe->file_index = zcrx_id;          /* the union's zcrx_ifq_idx */
}
#endif

#endif /* URINGLOOP_ZCRX_H */
