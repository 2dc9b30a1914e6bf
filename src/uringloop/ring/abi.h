/*
 * abi.h -- the io_uring kernel ABI as uringloop uses it.
 *
 * Debian 12 ships linux/io_uring.h from Linux 6.1.  The structures we need
 * from it (sqe, cqe, params, offsets, probe, buf_ring) have kept their layout
 * since; everything newer is defined here, guarded so that a newer system
 * header compiles too.  Opcodes are an enum in the kernel header, so a macro
 * with the same name and value is harmless when the header already has it.
 * Values come from the kernel's include/uapi/linux/io_uring.h.
 */
#ifndef URINGLOOP_ABI_H
#define URINGLOOP_ABI_H

#include <linux/io_uring.h>

/* io_uring_setup(2) flags newer than 6.1 */
#ifndef IORING_SETUP_NO_MMAP
#define IORING_SETUP_NO_MMAP            (1U << 14)   /* 6.5 */
#endif
#ifndef IORING_SETUP_REGISTERED_FD_ONLY
#define IORING_SETUP_REGISTERED_FD_ONLY (1U << 15)   /* 6.5 */
#endif
#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY         (1U << 16)   /* 6.6 */
#endif
#ifndef IORING_SETUP_CQE_MIXED
#define IORING_SETUP_CQE_MIXED          (1U << 18)   /* 6.18 */
#endif

#ifndef IORING_SQ_TASKRUN
#define IORING_SQ_TASKRUN               (1U << 2)
#endif

/* opcodes newer than 6.1 (enum values in the kernel) */
#define UL_OP_READ_MULTISHOT   49   /* 6.7 */
#define UL_OP_WAITID           50   /* 6.7 */
#define UL_OP_FUTEX_WAIT       51
#define UL_OP_FUTEX_WAKE       52
#define UL_OP_FUTEX_WAITV      53
#define UL_OP_FIXED_FD_INSTALL 54
#define UL_OP_FTRUNCATE        55
#define UL_OP_BIND             56   /* 6.11 */
#define UL_OP_LISTEN           57   /* 6.11 */
#define UL_OP_RECV_ZC          58   /* 6.15 */
#define UL_OP_EPOLL_WAIT       59
#define UL_OP_READV_FIXED      60
#define UL_OP_WRITEV_FIXED     61
#define UL_OP_PIPE             62

/* cqe->flags */
#ifndef IORING_CQE_F_NOTIF
#define IORING_CQE_F_NOTIF              (1U << 3)
#endif
#ifndef IORING_CQE_F_BUF_MORE
#define IORING_CQE_F_BUF_MORE           (1U << 4)    /* 6.12 */
#endif

/* send/recv ioprio flags */
#ifndef IORING_RECVSEND_POLL_FIRST
#define IORING_RECVSEND_POLL_FIRST      (1U << 0)
#endif
#ifndef IORING_RECV_MULTISHOT
#define IORING_RECV_MULTISHOT           (1U << 1)
#endif
#ifndef IORING_RECVSEND_FIXED_BUF
#define IORING_RECVSEND_FIXED_BUF       (1U << 2)
#endif
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE     (1U << 3)
#endif
#ifndef IORING_RECVSEND_BUNDLE
#define IORING_RECVSEND_BUNDLE          (1U << 4)    /* 6.10 */
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED    (1U << 31)
#endif

/* cancel flags */
#ifndef IORING_ASYNC_CANCEL_ALL
#define IORING_ASYNC_CANCEL_ALL         (1U << 0)
#endif
#ifndef IORING_ASYNC_CANCEL_FD
#define IORING_ASYNC_CANCEL_FD          (1U << 1)
#endif
#ifndef IORING_ASYNC_CANCEL_ANY
#define IORING_ASYNC_CANCEL_ANY         (1U << 2)
#endif

/* io_uring_register(2) opcodes (enum values; 6.1 already has these) */
#define UL_REGISTER_ENABLE_RINGS   12
#define UL_REGISTER_PROBE          8
#define UL_REGISTER_PBUF_RING      22
#define UL_UNREGISTER_PBUF_RING    23

/* provided-buffer ring registration flag, 6.12 */
#ifndef IOU_PBUF_RING_INC
#define IOU_PBUF_RING_INC               2
#endif

#endif /* URINGLOOP_ABI_H */
