/*
 * threads.h -- the epoll driver's threads: what would block the loop's
 * thread and cannot wait on readiness (a regular file that must go to the
 * disk, open, stat, fsync, ftruncate, splice) runs in a few threads, as
 * io-wq's workers run it under the kernel's ring.  readiness.c hands jobs
 * over and takes them back; nothing here knows the driver's requests.
 */
#ifndef URINGLOOP_THREADS_H
#define URINGLOOP_THREADS_H

#include <sys/types.h>
#include "ring.h"

/* One blocking call: the SQE it carries out, and its result (-errno). */
typedef struct ul_job {
    struct ul_job *next;        /* the queue, or the finished list */
    const struct io_uring_sqe *sqe;
    int res;
} ul_job;

typedef struct ul_pool ul_pool;

/* A pool with no thread yet (they start as jobs come, up to four).
 * `drop` frees a job the pool holds when it ends (queued, or finished
 * after the driver went).  NULL with errno set when it cannot be made. */
ul_pool *ul_pool_new(void (*drop)(ul_job *));

/* An eventfd, readable when jobs have finished (for the driver's epoll). */
int ul_pool_fd(const ul_pool *p);

/* Queue job: 0; -1 when no thread runs and none could be made (the caller
 * then runs it itself, with ul_job_run()). */
int ul_pool_push(ul_pool *p, ul_job *job);

/* Take job out of the queue: 1, or 0 when a thread has it already (it
 * ends with its own result, as a request io-wq runs). */
int ul_pool_unqueue(ul_pool *p, ul_job *job);

/* The jobs finished since the last call, oldest first (linked by next). */
ul_job *ul_pool_finished(ul_pool *p);

/* The driver goes: queued jobs are dropped, threads end after the call
 * they are in, and the last of them frees the pool. */
void ul_pool_stop(ul_pool *p);

/* In a forked child, the driver goes: the threads are not in this
 * process, and one may have held the pool's lock at the fork; only this
 * process's copy of the eventfd is closed. */
void ul_pool_forget(ul_pool *p);

/* Make sqe's system call, blocking: its result or -errno. */
int ul_job_run(const struct io_uring_sqe *sqe);

/* read(2)/write(2) at off, or at the file's position when off is -1 (as
 * a READ or WRITE's offset says). */
ssize_t ul_read_at(int fd, void *buf, size_t len, off_t off);
ssize_t ul_write_at(int fd, const void *buf, size_t len, off_t off);

#endif /* URINGLOOP_THREADS_H */
