/* echo_client: a load generator for the echo benchmarks that checks every
 * byte.  Each of `conns` connections sends a `size`-byte message, waits
 * for all of it to come back, compares it, and repeats, for `seconds`.
 * Prints one JSON line: {"requests":..,"bytes":..,"seconds":..,"errors":..}
 *
 *     cc -O2 -o echo_client echo_client.c
 *     ./echo_client 127.0.0.1 25000 10 1024 5
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct conn {
    int fd;
    unsigned char *out;     /* the message in flight */
    unsigned char *in;      /* what came back so far */
    size_t sent, received;
    uint64_t round;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void new_message(struct conn *c, size_t size, unsigned id)
{
    /* a different message every round: the first bytes carry the round */
    c->round++;
    memcpy(c->out, &c->round, size < 8 ? size : 8);
    if (size > 8)
        c->out[8 % size] ^= (unsigned char)id;
    c->sent = c->received = 0;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s host port conns size seconds\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), nconn = atoi(argv[3]);
    size_t size = strtoul(argv[4], NULL, 10);
    double seconds = atof(argv[5]);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &sin.sin_addr);
    int ep = epoll_create1(0);
    struct conn *conns = calloc(nconn, sizeof(*conns));
    uint64_t requests = 0, errors = 0;
    unsigned i;

    srand(12345);
    for (i = 0; i < (unsigned)nconn; i++) {
        struct conn *c = &conns[i];
        int one = 1;
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c->fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
            perror("connect");
            return 1;
        }
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->out = malloc(size);
        c->in = malloc(size);
        for (size_t k = 0; k < size; k++)
            c->out[k] = (unsigned char)rand();
        new_message(c, size, i);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }

    double start = now(), deadline = start + seconds;
    struct epoll_event events[256];
    while (now() < deadline) {
        int n = epoll_wait(ep, events, 256, 100);
        for (int k = 0; k < n; k++) {
            struct conn *c = &conns[events[k].data.u32];
            if ((events[k].events & EPOLLOUT) && c->sent < size) {
                ssize_t w = send(c->fd, c->out + c->sent, size - c->sent, MSG_NOSIGNAL);
                if (w > 0)
                    c->sent += w;
                else if (w < 0 && errno != EAGAIN) {
                    perror("send");
                    return 1;
                }
                if (c->sent == size) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = events[k].data.u32};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }
            if (events[k].events & EPOLLIN) {
                ssize_t r = recv(c->fd, c->in + c->received, size - c->received, 0);
                if (r == 0) {
                    fprintf(stderr, "server closed the connection\n");
                    return 1;
                }
                if (r < 0) {
                    if (errno == EAGAIN)
                        continue;
                    perror("recv");
                    return 1;
                }
                c->received += r;
                if (c->received == size) {
                    if (memcmp(c->in, c->out, size) != 0)
                        errors++;
                    requests++;
                    new_message(c, size, events[k].data.u32);
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = events[k].data.u32};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }
        }
    }
    double elapsed = now() - start;
    printf("{\"requests\": %llu, \"bytes\": %llu, \"seconds\": %.4f, \"errors\": %llu}\n",
           (unsigned long long)requests, (unsigned long long)(requests * size),
           elapsed, (unsigned long long)errors);
    return errors ? 3 : 0;
}
