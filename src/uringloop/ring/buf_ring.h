/*
 * buf_ring.h -- a provided-buffer ring (IORING_REGISTER_PBUF_RING, 5.19).
 *
 * The loop hands the kernel `entries` buffers of `buf_size` bytes under one
 * buffer group id; a multishot RECV picks a buffer for each completion and
 * names it in cqe->flags >> IORING_CQE_BUFFER_SHIFT.  Once we have copied
 * the data out, the buffer goes back with ul_buf_ring_recycle().
 *
 * Layout (kernel uapi): the ring is `entries` struct io_uring_buf of 16
 * bytes; the ring's tail is the `resv` field of entry 0 (offset 14), which
 * we publish with a release store.
 */
#ifndef URINGLOOP_BUF_RING_H
#define URINGLOOP_BUF_RING_H

#include <stdint.h>
#include "ring.h"

typedef struct ul_buf_ring {
    struct io_uring_buf_ring *br;
    unsigned char *base;        /* entries * buf_size bytes of buffers */
    size_t ring_len;
    size_t base_len;
    unsigned entries;
    unsigned mask;
    unsigned buf_size;
    unsigned short bgid;
    unsigned short tail;
    int registered;
} ul_buf_ring;

/* entries must be a power of two (<= 32768).  Returns 0 or -errno. */
int ul_buf_ring_init(ul_ring *r, ul_buf_ring *b, unsigned short bgid,
                     unsigned entries, unsigned buf_size);
void ul_buf_ring_free(ul_ring *r, ul_buf_ring *b);

static inline unsigned char *ul_buf_ring_addr(ul_buf_ring *b, unsigned bid)
{
    return b->base + (size_t)bid * b->buf_size;
}

/* Give buffer `bid` back to the kernel. */
static inline void ul_buf_ring_recycle(ul_buf_ring *b, unsigned bid)
{
    struct io_uring_buf *buf = &b->br->bufs[b->tail & b->mask];
    buf->addr = (uint64_t)(uintptr_t)ul_buf_ring_addr(b, bid);
    buf->len = b->buf_size;
    buf->bid = (uint16_t)bid;
    b->tail++;
    __atomic_store_n(&b->br->tail, b->tail, __ATOMIC_RELEASE);
}

static inline unsigned ul_cqe_buffer_id(uint32_t cqe_flags)
{
    return cqe_flags >> IORING_CQE_BUFFER_SHIFT;
}

/* A multishot RECVMSG completion in buffer `buf` (of `len` bytes, as the
 * CQE's res says), for a msghdr with `namelen` and `controllen`: where the
 * name and the payload are.  Returns the payload length present in the
 * buffer, or -1 when the layout does not fit. */
static inline int ul_recvmsg_parse(unsigned char *buf, int len, unsigned namelen,
                                   unsigned controllen, unsigned char **name,
                                   unsigned *name_used, unsigned char **payload,
                                   unsigned *msg_flags)
{
    struct io_uring_recvmsg_out *out = (struct io_uring_recvmsg_out *)buf;
    size_t head = sizeof(*out) + namelen + controllen;
    if (len < 0 || (size_t)len < head)
        return -1;
    *name = buf + sizeof(*out);
    *name_used = out->namelen < namelen ? out->namelen : namelen;
    *payload = buf + head;
    *msg_flags = out->flags;
    return (int)((size_t)len - head);
}

#endif
