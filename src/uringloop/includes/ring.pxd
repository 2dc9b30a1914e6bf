# The ring layer (uringloop/ring/ring.h), declared once for Cython.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, uint64_t, int64_t


cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    struct sockaddr:
        unsigned short sa_family
    struct msghdr:
        void *msg_name
        socklen_t msg_namelen
        void *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    int accept4(int fd, sockaddr *addr, socklen_t *addrlen, int flags)
    int getsockname(int fd, sockaddr *addr, socklen_t *addrlen)
    int getpeername(int fd, sockaddr *addr, socklen_t *addrlen)
    int setsockopt(int fd, int level, int optname, const void *optval, socklen_t optlen)
    enum:
        AF_UNIX
        AF_INET
        AF_INET6
        SOCK_STREAM
        SOCK_NONBLOCK
        SOCK_CLOEXEC


cdef extern from "<netinet/in.h>" nogil:
    enum:
        IPPROTO_TCP
    struct in_addr:
        uint32_t s_addr
    struct sockaddr_in:
        unsigned short sin_port
        in_addr sin_addr
    unsigned short ntohs(unsigned short)


cdef extern from "<netinet/tcp.h>" nogil:
    enum:
        TCP_NODELAY


cdef extern from "<arpa/inet.h>" nogil:
    int inet_pton(int af, const char *src, void *dst)


cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len


cdef extern from "ring/ring.h" nogil:
    enum: UL_OP_READV_FIXED      # opcode 60, 6.15: vectored registered buffers

    struct io_uring_sqe:
        uint8_t opcode
        uint8_t flags
        uint16_t ioprio
        int32_t fd
        uint64_t user_data

    struct io_uring_cqe:
        uint64_t user_data
        int32_t res
        uint32_t flags

    ctypedef struct ul_ring:
        int fd
        unsigned setup_flags
        unsigned features
        unsigned sq_entries
        unsigned cq_entries
        void *driver                 # the epoll driver's, or NULL
        uint64_t enter_calls
        uint64_t sqes_submitted
        uint64_t cqes_reaped

    # setup flags
    unsigned IORING_SETUP_CQSIZE
    unsigned IORING_SETUP_CLAMP
    unsigned IORING_SETUP_SUBMIT_ALL
    unsigned IORING_SETUP_COOP_TASKRUN
    unsigned IORING_SETUP_TASKRUN_FLAG
    unsigned IORING_SETUP_SINGLE_ISSUER
    unsigned IORING_SETUP_DEFER_TASKRUN
    unsigned IORING_SETUP_R_DISABLED
    unsigned IORING_SETUP_NO_SQARRAY
    unsigned IORING_FEAT_NODROP
    unsigned IORING_FEAT_EXT_ARG

    # sqe flags
    unsigned IOSQE_IO_LINK
    unsigned IOSQE_ASYNC
    unsigned IOSQE_CQE_SKIP_SUCCESS

    # cqe flags
    unsigned IORING_CQE_F_BUFFER
    unsigned IORING_CQE_F_MORE
    unsigned IORING_CQE_F_NOTIF
    unsigned IORING_SEND_ZC_REPORT_USAGE
    unsigned IORING_NOTIF_USAGE_ZC_COPIED

    unsigned IORING_REGISTER_EVENTFD
    unsigned IORING_ASYNC_CANCEL_ALL
    unsigned IORING_ASYNC_CANCEL_ANY
    unsigned IORING_ASYNC_CANCEL_FD

    int ul_ring_init(ul_ring *r, unsigned entries, unsigned cq_entries, unsigned wanted)
    void ul_ring_exit(ul_ring *r)
    int ul_ring_enable(ul_ring *r)
    int ul_ring_probe(ul_ring *r, unsigned char *supported)
    int ul_ring_enter(ul_ring *r, unsigned wait_nr, int64_t timeout_ns)
    int ul_ring_submit_only(ul_ring *r)
    int ul_ring_register(ul_ring *r, unsigned opcode, void *arg, unsigned nr_args)
    int ul_ring_register_buffer_table(ul_ring *r, unsigned nr)
    int ul_ring_update_buffer(ul_ring *r, unsigned slot, void *addr, size_t len)

    unsigned ul_sq_pending(ul_ring *r)
    unsigned ul_sq_space(ul_ring *r)
    io_uring_sqe *ul_sq_unconsumed_at(ul_ring *r, unsigned i)
    void ul_sq_take_back(ul_ring *r)
    io_uring_sqe *ul_get_sqe(ul_ring *r)
    unsigned ul_cq_ready(ul_ring *r)
    io_uring_cqe *ul_cq_at(ul_ring *r, unsigned i)
    void ul_cq_advance(ul_ring *r, unsigned n)
    int ul_cq_overflowed(ul_ring *r)
    int ul_sq_taskrun(ul_ring *r)
    int64_t ul_now_ns()
    int ul_spin_for_work(ul_ring *r, int64_t budget_ns) nogil

    unsigned UL_MAX_IO_LEN
    void ul_prep_nop(io_uring_sqe *sqe)
    struct __kernel_timespec:
        int64_t tv_sec
        long long tv_nsec
    void ul_prep_timeout_keep_link(io_uring_sqe *sqe, const __kernel_timespec *ts)
    void ul_prep_read(io_uring_sqe *sqe, int fd, void *buf, size_t len, uint64_t off)
    void ul_prep_write(io_uring_sqe *sqe, int fd, const void *buf, size_t len, uint64_t off)
    void ul_prep_recv(io_uring_sqe *sqe, int fd, void *buf, size_t len, int flags)
    void ul_prep_recv_multishot(io_uring_sqe *sqe, int fd, unsigned short buf_group, int flags)
    void ul_prep_send(io_uring_sqe *sqe, int fd, const void *buf, size_t len, int flags)
    void ul_prep_send_zc(io_uring_sqe *sqe, int fd, const void *buf, size_t len, int flags, unsigned zc_flags)
    void ul_prep_send_zc_fixed(io_uring_sqe *sqe, int fd, const void *buf, size_t len,
                               int flags, unsigned zc_flags, unsigned index)
    void ul_prep_send_set_addr(io_uring_sqe *sqe, const sockaddr *addr, socklen_t len)
    void ul_prep_recvmsg(io_uring_sqe *sqe, int fd, msghdr *msg, int flags)
    void ul_prep_sendmsg(io_uring_sqe *sqe, int fd, const msghdr *msg, int flags)
    void ul_prep_sendmsg_zc(io_uring_sqe *sqe, int fd, const msghdr *msg, int flags,
                            unsigned zc_flags)
    void ul_prep_sendmsg_zc_fixed(io_uring_sqe *sqe, int fd, const msghdr *msg, int flags,
                                  unsigned zc_flags, unsigned index)
    void ul_prep_recvmsg_multishot(io_uring_sqe *sqe, int fd, msghdr *msg, int flags,
                                   unsigned short buf_group)
    void ul_prep_poll_add(io_uring_sqe *sqe, int fd, unsigned mask)
    void ul_prep_poll_multishot(io_uring_sqe *sqe, int fd, unsigned mask)
    unsigned UL_POLLRDHUP
    void ul_prep_cancel(io_uring_sqe *sqe, uint64_t target, int flags)
    void ul_prep_openat(io_uring_sqe *sqe, int dfd, const char *path, int flags, unsigned mode)
    void ul_prep_close(io_uring_sqe *sqe, int fd)
    void ul_prep_fsync(io_uring_sqe *sqe, int fd, unsigned flags)
    void ul_prep_statx(io_uring_sqe *sqe, int dfd, const char *path, int flags,
                       unsigned mask, void *statxbuf)
    void ul_prep_ftruncate(io_uring_sqe *sqe, int fd, uint64_t length)
    void ul_prep_splice(io_uring_sqe *sqe, int fd_in, int64_t off_in, int fd_out,
                        int64_t off_out, unsigned len, unsigned flags)
    unsigned IORING_FSYNC_DATASYNC
    enum: UL_OP_FTRUNCATE        # opcode 55, 6.9
    void ul_sqe_set_data(io_uring_sqe *sqe, uint64_t user_data)
    void ul_sqe_set_flags(io_uring_sqe *sqe, unsigned flags)


cdef extern from "ring/sockaddr.h" nogil:
    struct sockaddr_storage:
        unsigned short ss_family

    int ul_sockaddr_inet4(sockaddr_storage *ss, const char *host, unsigned port)
    int ul_sockaddr_inet6(sockaddr_storage *ss, const char *host, unsigned port,
                          unsigned flowinfo, unsigned scope_id)
    int ul_sockaddr_unix(sockaddr_storage *ss, const char *path, size_t len)
    int ul_sockaddr_family(const sockaddr_storage *ss)
    int ul_sockaddr_inet_parts(const sockaddr_storage *ss, char *buf, unsigned *port,
                               unsigned *flowinfo, unsigned *scope_id)
    const char *ul_sockaddr_unix_path(const sockaddr_storage *ss, socklen_t addrlen,
                                      size_t *len)


cdef extern from "ring/buf_ring.h" nogil:
    ctypedef struct ul_buf_ring:
        unsigned entries
        unsigned buf_size
        unsigned short bgid

    int ul_buf_ring_init(ul_ring *r, ul_buf_ring *b, unsigned short bgid,
                         unsigned entries, unsigned buf_size)
    void ul_buf_ring_free(ul_ring *r, ul_buf_ring *b)
    unsigned char *ul_buf_ring_addr(ul_buf_ring *b, unsigned bid)
    void ul_buf_ring_recycle(ul_buf_ring *b, unsigned bid)
    unsigned ul_cqe_buffer_id(uint32_t cqe_flags)
    int ul_recvmsg_parse(unsigned char *buf, int len, unsigned namelen,
                         unsigned controllen, unsigned char **name,
                         unsigned *name_used, unsigned char **payload,
                         unsigned *msg_flags)


cdef extern from "ring/zcrx.h" nogil:
    unsigned UL_SETUP_CQE32
    unsigned UL_ZCRX_AREA_SHIFT
    uint64_t UL_ZCRX_OFFSET_MASK

    struct ul_zcrx_rqe:
        uint64_t off
        uint32_t len

    struct ul_zcrx_offsets:
        uint32_t head
        uint32_t tail
        uint32_t rqes

    struct ul_zcrx_area_reg:
        uint64_t addr
        uint64_t len
        uint64_t rq_area_token

    struct ul_zcrx_ifq_reg:
        uint32_t if_idx
        uint32_t if_rxq
        uint32_t rq_entries
        ul_zcrx_offsets offsets
        uint32_t zcrx_id

    ctypedef struct ul_zcrx_rq:
        uint32_t *khead
        uint32_t *ktail
        ul_zcrx_rqe *rqes
        uint32_t entries
        uint32_t tail

    void ul_zcrx_rq_init(ul_zcrx_rq *rq, void *region, const ul_zcrx_offsets *offsets,
                         uint32_t entries)
    uint32_t ul_zcrx_rq_depth(const ul_zcrx_rq *rq)
    int ul_zcrx_rq_give(ul_zcrx_rq *rq, uint64_t off, uint32_t len)
    void ul_zcrx_rq_commit(ul_zcrx_rq *rq)
    void *ul_zcrx_data(void *area_base, uint64_t off)
    uint64_t ul_zcrx_rqe_off(uint64_t cqe_off, uint64_t area_token)
    io_uring_cqe *ul_cq32_at(ul_ring *r, unsigned i)
    uint64_t ul_zcrx_cqe_off(const io_uring_cqe *cqe)
    void ul_prep_recv_zc(io_uring_sqe *sqe, int fd, uint32_t zcrx_id)
    int ul_zcrx_register(ul_ring *r, unsigned ifindex, unsigned rxq, unsigned rq_entries,
                         void *area, size_t area_len, void *region, size_t region_len,
                         ul_zcrx_ifq_reg *reg, ul_zcrx_area_reg *area_reg)



# Files on the ring (file_requests.pyx): openat's and statx's constants and the
# statx buffer the kernel fills.
cdef extern from "<fcntl.h>" nogil:
    enum:
        AT_FDCWD
        AT_EMPTY_PATH
        AT_SYMLINK_NOFOLLOW


cdef extern from "<sys/sysmacros.h>" nogil:
    unsigned long long makedev(unsigned int major, unsigned int minor)


cdef extern from "<sys/stat.h>" nogil:
    enum:
        STATX_BASIC_STATS
    struct statx_timestamp:
        int64_t tv_sec
        uint32_t tv_nsec
    struct statx:
        uint32_t stx_mask
        uint32_t stx_blksize
        uint64_t stx_attributes
        uint32_t stx_nlink
        uint32_t stx_uid
        uint32_t stx_gid
        uint16_t stx_mode
        uint64_t stx_ino
        uint64_t stx_size
        uint64_t stx_blocks
        statx_timestamp stx_atime
        statx_timestamp stx_ctime
        statx_timestamp stx_mtime
        uint32_t stx_rdev_major
        uint32_t stx_rdev_minor
        uint32_t stx_dev_major
        uint32_t stx_dev_minor


cdef extern from "<fcntl.h>" nogil:
    enum:
        SPLICE_F_MOVE
        SPLICE_F_NONBLOCK
        SPLICE_F_MORE


cdef extern from "ring/readiness.h" nogil:
    int ul_ready_init(ul_ring *r, unsigned entries, unsigned cq_entries)
