/* udp_chain_probe: how many io_uring_enter calls a chain of N linked UDP
 * sends (each MSG_DONTWAIT) needs under DEFER_TASKRUN, entering with
 * min_complete 1 or N, and the datagrams/s over loopback; `direct` instead
 * sends each datagram with send(2), as uvloop and the selector loop do.
 * Groundwork for issue #16 (batching sends), using the loop's ring layer:
 *
 *     cc -O2 -Isrc/uringloop/ring -o /tmp/udp_chain_probe bench/udp_chain_probe.c src/uringloop/ring/ring.c \
 *         src/uringloop/ring/readiness.c \
 *         src/uringloop/ring/threads.c -lpthread
 *     /tmp/udp_chain_probe CHAIN WAIT_ALL ZC SIZE     e.g.  32 1 0 1000
 *     /tmp/udp_chain_probe direct SIZE
 *
 * With min_complete 1 the kernel issues each next link from deferred task
 * work, one per enter (0.94 enters per datagram with 32 links); with
 * min_complete N it runs the whole chain in one enter. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "ring.h"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* A loopback UDP receiver with a 64 MiB buffer, and a sender connected to it. */
static void udp_pair(int *rx, int *tx)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int big = 64 << 20;
    *rx = socket(AF_INET, SOCK_DGRAM, 0);
    *tx = socket(AF_INET, SOCK_DGRAM, 0);
    bind(*rx, (void *)&a, al);
    getsockname(*rx, (void *)&a, &al);
    setsockopt(*rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    connect(*tx, (void *)&a, al);
}

static int direct(size_t size)
{
    int rx, tx;
    udp_pair(&rx, &tx);
    char *buf = calloc(1, size), *rbuf = malloc(65536);
    long sent = 0; double t0 = now();
    while (now() - t0 < 2.0) {
        for (int i = 0; i < 32; i++) if (send(tx, buf, size, MSG_DONTWAIT) >= 0) sent++;
        while (recv(rx, rbuf, 65536, MSG_DONTWAIT) > 0) ;
    }
    printf("direct send(2) size %zu: %.0f dgrams/s\n", size, sent / (now() - t0));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "direct") == 0)
        return direct(atoi(argv[2]));
    if (argc < 3) {
        fprintf(stderr, "usage: %s CHAIN WAIT_ALL [ZC [SIZE]] | direct SIZE\n", argv[0]);
        return 2;
    }
    int chain = atoi(argv[1]), wait_all = atoi(argv[2]), zc = argc > 3 ? atoi(argv[3]) : 0;
    size_t size = argc > 4 ? atoi(argv[4]) : 1000;
    ul_ring r;
    unsigned flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
                   | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_R_DISABLED | IORING_SETUP_NO_SQARRAY;
    int ret = ul_ring_init(&r, 2048, 16384, flags);
    if (ret < 0) { fprintf(stderr, "init %d\n", ret); return 1; }
    ul_ring_enable(&r);
    int rx, tx;
    udp_pair(&rx, &tx);
    char *buf = calloc(1, size), *rbuf = malloc(65536);
    long sent = 0, eagain = 0, cancelled = 0, enters = 0, cqes = 0, rounds = 0;
    double t0 = now();
    while (now() - t0 < 2.0) {
        for (int i = 0; i < chain; i++) {
            struct io_uring_sqe *sqe = ul_get_sqe(&r);
            if (zc) ul_prep_send_zc(sqe, tx, buf, size, MSG_DONTWAIT, 0);
            else ul_prep_send(sqe, tx, buf, size, MSG_DONTWAIT);
            ul_sqe_set_data(sqe, i + 1);
            if (i < chain - 1) ul_sqe_set_flags(sqe, IOSQE_IO_LINK);
        }
        unsigned want = chain, got = 0;   /* first CQEs (not notifications) */
        while (got < want) {
            ul_ring_enter(&r, wait_all ? want - got : 1, 1000000000);
            enters++;
            unsigned n = ul_cq_ready(&r);
            for (unsigned k = 0; k < n; k++) {
                struct io_uring_cqe *c = ul_cq_at(&r, k);
                cqes++;
                if (c->flags & IORING_CQE_F_NOTIF) continue;
                got++;
                if (c->res >= 0) sent++;
                else if (c->res == -EAGAIN) eagain++;
                else if (c->res == -ECANCELED) cancelled++;
            }
            ul_cq_advance(&r, n);
        }
        rounds++;
        while (recv(rx, rbuf, 65536, MSG_DONTWAIT) > 0) ;   /* drain */
    }
    double dt = now() - t0;
    printf("chain %d wait_all %d zc %d size %zu: %.0f dgrams/s, enters/dgram %.3f, enters/chain %.2f, eagain %ld cancelled %ld\n",
           chain, wait_all, zc, size, sent / dt, (double)enters / sent, (double)enters / rounds, eagain, cancelled);
    return 0;
}
