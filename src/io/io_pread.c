/* io pread backend: a fixed pool of detached threads that take reads from a bounded queue
 * (demand before speculative) and complete them into a completion ring.
 *
 * Speculative reads may occupy at most spec_max threads, so some are always free for demand.
 *
 * Everything the threads touch lives in one block (struct pool) that is reference counted by
 * the threads alive and the owner: a thread stuck in the kernel can outlive gm_io_destroy and
 * frees the block itself when it finally returns. The threads never see struct gm_io.
 */
#include "io/io_impl.h"

#include <errno.h>
#include <linux/ioprio.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct pool_req {
    int fd;
    uint64_t off, len;
    void *buf;
    uint32_t prio, fault, stall_ms;
    uint32_t prev, next;
    bool queued, running, cancel, abandoned;
} pool_req;

typedef struct pool_list {
    uint32_t head, tail, count;
} pool_list;

typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers: work, shutdown, too many threads */
    pthread_cond_t done_cv;  /* owner: completions, threads leaving */
    pthread_cond_t stall_cv; /* stalled (fault) reads: cancel */
    uint32_t cap;
    pool_req *reqs; /* [cap], indexed like the front end's slots */
    pool_list demand, spec;
    uint32_t *done_slot; /* [cap] ring */
    int64_t *done_res;
    uint32_t *done_retries;
    uint32_t done_head, done_count;
    uint32_t live; /* threads alive */
    uint32_t busy; /* threads inside a read */
    uint32_t want; /* threads wanted: n_threads + abandoned reads still running */
    uint32_t spec_running, spec_max; /* threads inside a speculative read, and their limit */
    bool shutdown, owner_gone;
} pool;

static void plist_push(pool *p, pool_list *l, uint32_t s)
{
    p->reqs[s].prev = l->tail;
    p->reqs[s].next = GM_IO_NIL;
    if (l->tail != GM_IO_NIL)
        p->reqs[l->tail].next = s;
    else
        l->head = s;
    l->tail = s;
    l->count++;
}

static void plist_remove(pool *p, pool_list *l, uint32_t s)
{
    pool_req *r = &p->reqs[s];
    if (r->prev != GM_IO_NIL)
        p->reqs[r->prev].next = r->next;
    else
        l->head = r->next;
    if (r->next != GM_IO_NIL)
        p->reqs[r->next].prev = r->prev;
    else
        l->tail = r->prev;
    l->count--;
}

static void pool_free(pool *p)
{
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->stall_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->reqs);
    free(p->done_slot);
    free(p->done_res);
    free(p->done_retries);
    free(p);
}

/* Under p->mu. */
static void push_done(pool *p, uint32_t s, int64_t res, uint32_t retries)
{
    uint32_t at = (p->done_head + p->done_count) % p->cap;
    p->done_slot[at] = s;
    p->done_res[at] = res;
    p->done_retries[at] = retries;
    p->done_count++;
    pthread_cond_signal(&p->done_cv);
}

static struct timespec abs_time_ns(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000), .tv_nsec = (long)(t_ns % 1000000000)};
    return ts;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void set_thread_ioprio(uint32_t prio)
{
    /* Speculative reads in best-effort level 7: the I/O schedulers that honour priorities
     * (bfq, mq-deadline) then serve demand reads first; with "none" the queue order does it. */
    int v = prio == GM_IO_SPECULATIVE ? IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7)
                                      : IOPRIO_PRIO_VALUE(IOPRIO_CLASS_NONE, 0);
    (void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, v);
}

/* The read of slot s (a copy of its request), with short reads continued. */
static int64_t run_read(pool *p, uint32_t s, const pool_req *r, uint32_t *retries)
{
    if (r->fault & GM_IO_FAULT_STALL) {
        pthread_mutex_lock(&p->mu);
        struct timespec until = abs_time_ns(gm_io_now_ns() + (int64_t)r->stall_ms * 1000000);
        while (!p->reqs[s].cancel && !p->shutdown)
            if (pthread_cond_timedwait(&p->stall_cv, &p->mu, &until) == ETIMEDOUT)
                break;
        bool cancelled = p->reqs[s].cancel || p->shutdown;
        pthread_mutex_unlock(&p->mu);
        if (cancelled)
            return -ECANCELED;
    }
    if (r->fault & GM_IO_FAULT_WEDGE)
        sleep_ms(r->stall_ms); /* deaf to cancel, as a read stuck in the kernel */
    uint64_t done = 0;
    bool first = true;
    while (done < r->len) {
        ssize_t n = pread(r->fd, (char *)r->buf + done, (size_t)(r->len - done),
                          (off_t)(r->off + done));
        if (n < 0 && errno == EINTR)
            continue;
        int64_t res = n < 0 ? -(int64_t)errno : (int64_t)n;
        if (r->fault)
            res = gm_io_fault_result(r->fault, first, r->len, res);
        first = false;
        if (res < 0)
            return res;
        if (res == 0)
            break; /* end of file */
        done += (uint64_t)res;
        if (done < r->len) {
            if (gm_io_at_eof(r->fd, r->off + done))
                break;
            (*retries)++;
        }
    }
    return (int64_t)done;
}

static void *worker(void *arg)
{
    pool *p = arg;
    uint32_t cur_prio = GM_IO_DEMAND;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->shutdown && p->live <= p->want && p->demand.count == 0 &&
               (p->spec.count == 0 || p->spec_running >= p->spec_max))
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->shutdown || p->live > p->want)
            break;
        pool_list *l = p->demand.count ? &p->demand : &p->spec;
        if (l == &p->spec)
            p->spec_running++;
        uint32_t s = l->head;
        plist_remove(p, l, s);
        pool_req *pr = &p->reqs[s];
        pr->queued = false;
        pr->running = true;
        pool_req r = *pr;
        p->busy++;
        pthread_mutex_unlock(&p->mu);

        if (r.prio != cur_prio) {
            set_thread_ioprio(r.prio);
            cur_prio = r.prio;
        }
        uint32_t retries = 0;
        int64_t res = run_read(p, s, &r, &retries);

        pthread_mutex_lock(&p->mu);
        p->busy--;
        pr->running = false;
        if (pr->abandoned) {
            pr->abandoned = false;
            p->want--; /* the thread that replaced this read's thread is enough now */
        } else if (r.prio == GM_IO_SPECULATIVE && p->spec_running-- == p->spec_max) {
            pthread_cond_signal(&p->work_cv); /* an idle thread may take the next one */
        }
        push_done(p, s, res, retries);
    }
    p->live--;
    bool last = p->live == 0 && p->owner_gone;
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
    if (last)
        pool_free(p);
    return NULL;
}

/* Under p->mu. Starts one detached worker; false when the system refuses. */
static bool spawn(pool *p)
{
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t t;
    p->live++;
    bool ok = pthread_create(&t, &attr, worker, p) == 0;
    if (!ok)
        p->live--;
    pthread_attr_destroy(&attr);
    return ok;
}

static void pool_release(pool *p, bool wait_idle)
{
    pthread_mutex_lock(&p->mu);
    p->shutdown = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_cond_broadcast(&p->stall_cv);
    /* Idle threads leave at once; threads inside a read are left behind (detached). */
    while (wait_idle && p->live > p->busy)
        pthread_cond_wait(&p->done_cv, &p->mu);
    p->owner_gone = true;
    bool last = p->live == 0;
    pthread_mutex_unlock(&p->mu);
    if (last)
        pool_free(p);
}

static int pread_init(gm_io *io, gm_err *err)
{
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "io: out of memory");
    p->cap = io->cap;
    p->reqs = calloc(p->cap, sizeof *p->reqs);
    p->done_slot = calloc(p->cap, sizeof *p->done_slot);
    p->done_res = calloc(p->cap, sizeof *p->done_res);
    p->done_retries = calloc(p->cap, sizeof *p->done_retries);
    if (!p->reqs || !p->done_slot || !p->done_res || !p->done_retries) {
        free(p->reqs);
        free(p->done_slot);
        free(p->done_res);
        free(p->done_retries);
        free(p);
        return gm_err_set(err, GM_ENOMEM, "io: out of memory");
    }
    p->demand.head = p->demand.tail = GM_IO_NIL;
    p->spec.head = p->spec.tail = GM_IO_NIL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, &ca);
    pthread_cond_init(&p->done_cv, &ca);
    pthread_cond_init(&p->stall_cv, &ca);
    pthread_condattr_destroy(&ca);
    p->want = io->n_threads;
    /* Threads kept for demand reads, in the proportion the device keeps slots for them, so a
     * pool full of speculative reads never makes a demand read wait for a thread. */
    uint32_t keep = (uint32_t)((uint64_t)io->n_threads * io->reserve / io->depth);
    if (keep == 0 && io->reserve > 0)
        keep = 1;
    p->spec_max = io->n_threads > keep ? io->n_threads - keep : 1;

    pthread_mutex_lock(&p->mu);
    bool ok = true;
    for (uint32_t i = 0; i < io->n_threads && ok; i++)
        ok = spawn(p);
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        pool_release(p, true);
        return gm_err_set(err, GM_EIO, "io: cannot start %u read threads", io->n_threads);
    }
    io->be = p;
    return 0;
}

static void pread_start(gm_io *io, uint32_t s)
{
    pool *p = io->be;
    const gm_io_slot *sl = &io->slots[s];
    pthread_mutex_lock(&p->mu);
    pool_req *r = &p->reqs[s];
    r->fd = sl->req.fd;
    r->off = sl->req.offset;
    r->len = sl->req.len;
    r->buf = sl->req.buf;
    r->prio = sl->req.prio;
    r->fault = sl->fault;
    r->stall_ms = io->fault.stall_ms;
    r->queued = true;
    r->running = r->cancel = r->abandoned = false;
    plist_push(p, r->prio == GM_IO_SPECULATIVE ? &p->spec : &p->demand, s);
    pthread_cond_signal(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

static void pread_flush(gm_io *io)
{
    (void)io;
}

static void pread_reap(gm_io *io, bool block, int64_t deadline_ns)
{
    pool *p = io->be;
    pthread_mutex_lock(&p->mu);
    if (block) {
        struct timespec until = abs_time_ns(deadline_ns);
        while (p->done_count == 0) {
            if (deadline_ns < 0)
                pthread_cond_wait(&p->done_cv, &p->mu);
            else if (pthread_cond_timedwait(&p->done_cv, &p->mu, &until) == ETIMEDOUT)
                break;
        }
    }
    while (p->done_count > 0) {
        uint32_t at = p->done_head;
        p->done_head = (p->done_head + 1) % p->cap;
        p->done_count--;
        gm_io_impl_complete(io, p->done_slot[at], p->done_res[at], p->done_retries[at]);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Under p->mu: a read still in the pool queue completes at once. */
static bool unqueue(pool *p, uint32_t s)
{
    pool_req *r = &p->reqs[s];
    if (!r->queued)
        return false;
    plist_remove(p, r->prio == GM_IO_SPECULATIVE ? &p->spec : &p->demand, s);
    r->queued = false;
    push_done(p, s, -ECANCELED, 0);
    return true;
}

static void pread_cancel(gm_io *io, uint32_t s)
{
    pool *p = io->be;
    pthread_mutex_lock(&p->mu);
    if (!unqueue(p, s) && p->reqs[s].running) {
        p->reqs[s].cancel = true;
        pthread_cond_broadcast(&p->stall_cv);
    }
    pthread_mutex_unlock(&p->mu);
}

static void pread_abandon(gm_io *io, uint32_t s)
{
    pool *p = io->be;
    pthread_mutex_lock(&p->mu);
    if (!unqueue(p, s) && p->reqs[s].running && !p->reqs[s].abandoned) {
        /* Its thread may never come back: start one more so the pool keeps its size. */
        p->reqs[s].abandoned = true;
        if (p->reqs[s].prio == GM_IO_SPECULATIVE)
            p->spec_running--;
        p->want++;
        spawn(p);
    }
    pthread_mutex_unlock(&p->mu);
}

static void pread_fini(gm_io *io)
{
    pool_release(io->be, true);
    io->be = NULL;
}

const gm_io_ops gm_io_pread_ops = {
    .name = "pread",
    .init = pread_init,
    .start = pread_start,
    .flush = pread_flush,
    .reap = pread_reap,
    .cancel = pread_cancel,
    .abandon = pread_abandon,
    .fini = pread_fini,
};
