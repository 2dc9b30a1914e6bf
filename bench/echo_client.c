/* echo_client: a load generator for the echo benchmarks that checks every
 * byte.  Each of `conns` connections sends a `size`-byte message, waits
 * for all of it to come back, compares it, and repeats, for `seconds`.
 * Prints one JSON line: {"requests":..,"bytes":..,"seconds":..,"errors":..}
 * Given the server's pid as well, it adds the server's CPU time (user and
 * system clock ticks) spent inside the timed window: connecting, filling
 * the messages and one exchange on each connection happen before it, so
 * accepts and first reads do not count as request work.
 *
 *     cc -O2 -o echo_client echo_client.c
 *     ./echo_client 127.0.0.1 25000 10 1024 5 [server-pid]
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

/* utime and stime of a process, in clock ticks (fields 14 and 15 of
 * /proc/PID/stat, counted after the command name's closing parenthesis) */
static int cpu_ticks(int pid, unsigned long long *user, unsigned long long *sys)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                     user, sys) != 2)
        return -1;
    return 0;
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
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s host port conns size seconds [server-pid]\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), nconn = atoi(argv[3]);
    size_t size = strtoul(argv[4], NULL, 10);
    double seconds = atof(argv[5]);
    int server_pid = argc == 7 ? atoi(argv[6]) : 0;
    unsigned long long user0 = 0, sys0 = 0, user1 = 0, sys1 = 0;
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

    /* One exchange on every connection before the window, each in turn:
     * the server has then accepted it and read from it once, so neither
     * the accept nor whatever a loop does at a connection's first read
     * (uringloop's first read comes from a provided buffer) is counted as
     * request work.  Without it, at 1000 connections some of the accepts
     * fell inside the window (bench/run_connect.py measures them). */
    for (i = 0; i < (unsigned)nconn; i++) {
        struct conn *c = &conns[i];
        while (c->sent < size) {
            ssize_t w = send(c->fd, c->out + c->sent, size - c->sent, MSG_NOSIGNAL);
            if (w <= 0 && !(w < 0 && errno == EAGAIN)) {
                perror("send");
                return 1;
            }
            if (w > 0)
                c->sent += w;
        }
        while (c->received < size) {
            ssize_t r = recv(c->fd, c->in + c->received, size - c->received, 0);
            if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
                fprintf(stderr, "warm-up: %s\n", r == 0 ? "server closed the connection"
                                                         : strerror(errno));
                return 1;
            }
            if (r > 0)
                c->received += r;
        }
        if (memcmp(c->in, c->out, size) != 0)
            errors++;
        new_message(c, size, i);
    }

    if (server_pid)
        cpu_ticks(server_pid, &user0, &sys0);
    /* bench/run_echo.py --split perf starts its sampling here */
    fprintf(stderr, "window\n");
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
    if (server_pid)
        cpu_ticks(server_pid, &user1, &sys1);
    printf("{\"requests\": %llu, \"bytes\": %llu, \"seconds\": %.4f, \"errors\": %llu",
           (unsigned long long)requests, (unsigned long long)(requests * size),
           elapsed, (unsigned long long)errors);
    if (server_pid)
        printf(", \"server_user_ticks\": %llu, \"server_sys_ticks\": %llu",
               user1 - user0, sys1 - sys0);
    printf("}\n");
    return errors ? 3 : 0;
}
