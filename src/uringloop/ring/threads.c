/*
 * threads.c -- the epoll driver's threads (threads.h has the contract).
 *
 * A queue of jobs, a list of finished ones and an eventfd that wakes the
 * driver's epoll, under one lock.  Threads start as jobs come, while none
 * is idle, up to MAX_THREADS, take no signal, and end after IDLE_SECONDS
 * without a job, as io-wq's workers do.  The pool is shared by the driver
 * and its threads and freed by the last of them to let go.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "threads.h"

#define MAX_THREADS 4
#define IDLE_SECONDS 5          /* io-wq's WORKER_IDLE_TIMEOUT */

struct ul_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ul_job *queue_head, *queue_tail;
    ul_job *done_head, *done_tail;
    void (*drop)(ul_job *);
    int wake_fd;
    int threads, idle, refs, stop;
};

static void push(ul_job **head, ul_job **tail, ul_job *job)
{
    job->next = NULL;
    if (*tail)
        (*tail)->next = job;
    else
        *head = job;
    *tail = job;
}

ssize_t ul_read_at(int fd, void *buf, size_t len, off_t off)
{
    return off == -1 ? read(fd, buf, len) : pread(fd, buf, len, off);
}

ssize_t ul_write_at(int fd, const void *buf, size_t len, off_t off)
{
    return off == -1 ? write(fd, buf, len) : pwrite(fd, buf, len, off);
}

int ul_job_run(const struct io_uring_sqe *sqe)
{
    void *addr = (void *)(uintptr_t)sqe->addr;
    off_t off = (off_t)sqe->off;
    ssize_t n;
    switch (sqe->opcode) {
    case IORING_OP_READ:
        n = ul_read_at(sqe->fd, addr, sqe->len, off);
        break;
    case IORING_OP_WRITE:
        n = ul_write_at(sqe->fd, addr, sqe->len, off);
        break;
    case IORING_OP_OPENAT:
        n = openat(sqe->fd, (const char *)addr, (int)sqe->open_flags | O_LARGEFILE,
                   (mode_t)sqe->len);
        break;
    case IORING_OP_STATX:
        n = statx(sqe->fd, (const char *)addr, (int)sqe->statx_flags, sqe->len,
                  (struct statx *)(uintptr_t)sqe->off);
        break;
    case IORING_OP_FSYNC:
        n = (sqe->fsync_flags & IORING_FSYNC_DATASYNC) ? fdatasync(sqe->fd) : fsync(sqe->fd);
        break;
    case UL_OP_FTRUNCATE:
        n = ftruncate(sqe->fd, (off_t)sqe->off);
        break;
    case IORING_OP_SPLICE: {
        loff_t in_off = (loff_t)sqe->splice_off_in, out_off = (loff_t)sqe->off;
        n = splice(sqe->splice_fd_in, in_off == -1 ? NULL : &in_off,
                   sqe->fd, out_off == -1 ? NULL : &out_off, sqe->len,
                   sqe->splice_flags & ~SPLICE_F_NONBLOCK);
        break;
    }
    default:
        errno = EINVAL;
        n = -1;
    }
    return n < 0 ? -errno : (int)n;
}

ul_pool *ul_pool_new(void (*drop)(ul_job *))
{
    ul_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->wake_fd < 0) {
        int err = errno;
        free(p);
        errno = err;
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    p->drop = drop;
    p->refs = 1;
    return p;
}

int ul_pool_fd(const ul_pool *p)
{
    return p->wake_fd;
}

/* Let go of p (called with p->mu held); the last one frees it. */
static void release(ul_pool *p)
{
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (last) {
        ul_job *job;
        while ((job = p->done_head)) {      /* finished after the driver went */
            p->done_head = job->next;
            p->drop(job);
        }
        close(p->wake_fd);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
    }
}

static void *worker_main(void *arg)
{
    ul_pool *p = arg;
    uint64_t one = 1;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        ul_job *job;
        int waited = 0;
        while (!p->queue_head && !p->stop && waited != ETIMEDOUT) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += IDLE_SECONDS;
            p->idle++;
            waited = pthread_cond_timedwait(&p->cv, &p->mu, &until);
            p->idle--;
        }
        if (p->stop || !p->queue_head)      /* stopped, or idle too long */
            break;
        job = p->queue_head;
        p->queue_head = job->next;
        if (!p->queue_head)
            p->queue_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        job->res = ul_job_run(job->sqe);
        pthread_mutex_lock(&p->mu);
        push(&p->done_head, &p->done_tail, job);
        if (!p->stop && write(p->wake_fd, &one, sizeof(one)) < 0) {
            /* (an eventfd write fails only at its counter's limit: already woken) */
        }
    }
    p->threads--;
    release(p);
    return NULL;
}

int ul_pool_push(ul_pool *p, ul_job *job)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_mutex_lock(&p->mu);
    if (p->idle == 0 && p->threads < MAX_THREADS) {
        /* A thread takes no signal (it inherits this mask): one delivered
         * there would cut its system call short with EINTR, which the
         * kernel's io-wq never answers. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (pthread_create(&t, &attr, worker_main, p) == 0) {
            p->threads++;
            p->refs++;
        }
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (p->threads == 0) {
        pthread_mutex_unlock(&p->mu);
        return -1;
    }
    push(&p->queue_head, &p->queue_tail, job);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int ul_pool_unqueue(ul_pool *p, ul_job *job)
{
    ul_job **at, *prev = NULL;
    int found = 0;
    pthread_mutex_lock(&p->mu);
    for (at = &p->queue_head; *at && *at != job; at = &(*at)->next)
        prev = *at;
    if (*at) {
        *at = job->next;
        if (p->queue_tail == job)
            p->queue_tail = prev;
        found = 1;
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

ul_job *ul_pool_finished(ul_pool *p)
{
    ul_job *done;
    uint64_t count;
    if (read(p->wake_fd, &count, sizeof(count)) < 0) {
        /* EAGAIN: an earlier call took the count */
    }
    pthread_mutex_lock(&p->mu);
    done = p->done_head;
    p->done_head = p->done_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    return done;
}

void ul_pool_stop(ul_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->queue_head) {
        ul_job *job = p->queue_head;
        p->queue_head = job->next;
        p->drop(job);
    }
    p->queue_tail = NULL;
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    release(p);
}

void ul_pool_forget(ul_pool *p)
{
    close(p->wake_fd);
}
