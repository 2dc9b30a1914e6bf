/* zc_c_sender: the kernel's own limit for the zero-copy benchmark's UDP
 * cells, written in C on the loop's ring layer with nothing in between.
 * bench/run_zerocopy.py runs it beside uringloop in the same rounds so the
 * distance between the loop and the kernel is visible:
 *
 *     cc -O2 -Isrc/uringloop/ring -o zc_c_sender bench/zc_c_sender.c src/uringloop/ring/ring.c \
 *         src/uringloop/ring/readiness.c \
 *         src/uringloop/ring/threads.c -lpthread
 *     ip netns exec SRC ./zc_c_sender MODE SIZE SECONDS ADDR PORT
 *
 * MODE copy:   sendto(2) per datagram, 64 per round (the copying path).
 *      chain:  64 SENDs per io_uring_enter, linked, MSG_DONTWAIT (what
 *              uringloop's ZC_NEVER chain does).
 *      zc:     64 SEND_ZCs per enter from 64 ordinary buffers, each written
 *              again only after its notification (ZC_ALWAYS).
 *      zcreg:  the same from 64 registered buffers (REGISTERED).
 *      msgzc:  send(2) with MSG_ZEROCOPY from 64 buffers, each written again
 *              only after the socket's error queue says the kernel let it
 *              go (what an epoll driver could do in place of SEND_ZC; no
 *              ring).
 * Prints one JSON line as bench/zc_sender.py does. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/errqueue.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "ring.h"

#define BATCH 64

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s copy|chain|zc|zcreg|msgzc SIZE SECONDS ADDR PORT\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    size_t size = (size_t)atol(argv[2]);
    double seconds = atof(argv[3]);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[5]))};
    inet_pton(AF_INET, argv[4], &to.sin_addr);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || connect(fd, (void *)&to, sizeof to) < 0) {
        perror("socket");
        return 1;
    }
    int msgzc = strcmp(mode, "msgzc") == 0;
    int zc = strncmp(mode, "zc", 2) == 0 || msgzc, reg = strcmp(mode, "zcreg") == 0;
    char *bufs[BATCH];
    int busy[BATCH] = {0};           /* 1 while the kernel may read bufs[i] */
    for (int i = 0; i < BATCH; i++)
        bufs[i] = calloc(1, size);
    long sent = 0, notifs = 0, copied = 0, enters = 0;
    double t0 = now(), t;

    if (strcmp(mode, "copy") == 0) {
        while ((t = now()) - t0 < seconds)
            for (int i = 0; i < BATCH; i++)
                if (send(fd, bufs[0], size, MSG_DONTWAIT) >= 0)
                    sent++;
    } else if (msgzc) {
        /* the n-th MSG_ZEROCOPY send of the socket is notification n; a
         * notification names a range of them */
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) < 0) {
            perror("SO_ZEROCOPY");
            return 1;
        }
        unsigned next_id = 0;
        unsigned ids[BATCH];
        while ((t = now()) - t0 < seconds) {
            int queued = 0;
            for (int i = 0; i < BATCH; i++) {
                if (busy[i])
                    continue;
                if (send(fd, bufs[i], size, MSG_DONTWAIT | MSG_ZEROCOPY) >= 0) {
                    sent++;
                    busy[i] = 1;
                    ids[i] = next_id++;
                    queued++;
                }
            }
            struct pollfd p = {fd, 0, 0};
            if (!queued)   /* every buffer in the kernel: wait for its word */
                poll(&p, 1, 1000);
            enters++;
            for (;;) {
                char control[128];
                struct msghdr m = {.msg_control = control, .msg_controllen = sizeof control};
                if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
                    break;
                struct cmsghdr *c = CMSG_FIRSTHDR(&m);
                if (!c)
                    continue;
                struct sock_extended_err *e = (void *)CMSG_DATA(c);
                if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                    continue;
                unsigned lo = e->ee_info, hi = e->ee_data;
                notifs++;
                if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                    copied++;
                for (int i = 0; i < BATCH; i++)
                    if (busy[i] && ids[i] - lo <= hi - lo)
                        busy[i] = 0;
            }
        }
    } else {
        ul_ring r;
        unsigned flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER
                       | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG
                       | IORING_SETUP_R_DISABLED | IORING_SETUP_NO_SQARRAY;
        int ret = ul_ring_init(&r, 256, 1024, flags);
        if (ret == 0)
            ret = ul_ring_enable(&r);
        if (ret == 0 && reg) {
            ret = ul_ring_register_buffer_table(&r, BATCH);
            for (int i = 0; ret == 0 && i < BATCH; i++)
                ret = ul_ring_update_buffer(&r, i, bufs[i], size);
        }
        if (ret < 0) {
            fprintf(stderr, "ring: %s\n", strerror(-ret));
            return 1;
        }
        unsigned zc_flags = IORING_SEND_ZC_REPORT_USAGE;
        while ((t = now()) - t0 < seconds) {
            unsigned queued = 0;
            struct io_uring_sqe *last = NULL;
            for (int i = 0; i < BATCH; i++) {
                if (zc && busy[i])
                    continue;
                struct io_uring_sqe *sqe = ul_get_sqe(&r);
                if (reg)
                    ul_prep_send_zc_fixed(sqe, fd, bufs[i], size, MSG_DONTWAIT, zc_flags, i);
                else if (zc)
                    ul_prep_send_zc(sqe, fd, bufs[i], size, MSG_DONTWAIT, zc_flags);
                else
                    ul_prep_send(sqe, fd, bufs[0], size, MSG_DONTWAIT);
                ul_sqe_set_data(sqe, (uint64_t)i + 1);
                ul_sqe_set_flags(sqe, IOSQE_IO_LINK);
                busy[i] = zc;
                queued++;
                last = sqe;
            }
            if (last)
                ul_sqe_set_flags(last, 0);     /* the chain ends here */
            /* with every buffer still in the kernel, wait for a notification */
            ul_ring_enter(&r, queued ? queued : 1, 1000000000);
            enters++;
            unsigned n = ul_cq_ready(&r);
            for (unsigned k = 0; k < n; k++) {
                struct io_uring_cqe *c = ul_cq_at(&r, k);
                unsigned i = (unsigned)c->user_data - 1;
                if (c->flags & IORING_CQE_F_NOTIF) {
                    notifs++;
                    if (c->res & IORING_NOTIF_USAGE_ZC_COPIED)
                        copied++;
                    busy[i] = 0;
                    continue;
                }
                if (c->res >= 0)
                    sent++;
                if (zc && !(c->flags & IORING_CQE_F_MORE))
                    busy[i] = 0;     /* failed: no notification follows */
            }
            ul_cq_advance(&r, n);
        }
    }
    double dt = t - t0;
    printf("{\"bytes_s\": %.1f, \"cpu_s\": 0, \"enters_per_datagram\": %.4f, "
           "\"zerocopy\": {\"zerocopy_sends\": %ld, \"copied_reports\": %ld, "
           "\"zerocopy_reports\": %ld}}\n",
           sent * (double)size / dt, sent ? (double)enters / sent : 0.0,
           zc ? sent : 0, copied, notifs - copied);
    return 0;
}
