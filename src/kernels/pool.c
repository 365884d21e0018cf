/* The compute thread pool (see pool.h).
 *
 * A job is announced by one atomic word holding a sequence number and the job's part count, so
 * a worker that is not needed for a job never reads the job's other fields (which the owner may
 * already be rewriting for the next job); a needed worker reads them after an acquire load of
 * that word and the owner waits for it before it writes them again. */
#include "kernels/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "base/err.h"

#define MAX_THREADS 1024
#define PARTS_BITS 16
#define PARTS_MASK ((1u << PARTS_BITS) - 1u)

typedef struct worker {
    struct gm_pool *pool;
    int part; /* 1..n_workers */
} worker;

struct gm_pool {
    int n_workers;
    pthread_t owner;
    pthread_t *threads;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* a job (or stop) was posted */
    pthread_cond_t cv_done; /* pending reached 0 */
    _Atomic uint64_t job;   /* seq << PARTS_BITS | n_parts */
    _Atomic int pending;    /* needed workers that have not finished the current job */
    _Atomic int stop;
    _Atomic int busy;       /* a job is running (a job that runs one itself is caught) */
    gm_pool_fn fn; /* the current job; see the file comment for who may read them when */
    void *ctx;
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Polls until the job word's sequence differs from seen_seq, for GM_POOL_SPIN_US, then sleeps.
 * Returns the new word. */
static uint64_t wait_job(gm_pool *p, uint64_t seen_seq)
{
    uint64_t start = 0;
    for (unsigned i = 0;; i++) {
        const uint64_t j = atomic_load_explicit(&p->job, memory_order_acquire);
        if ((j >> PARTS_BITS) != seen_seq)
            return j;
        cpu_relax();
        if ((i & 63u) == 63u) {
            const uint64_t t = now_us();
            if (start == 0)
                start = t;
            else if (t - start > GM_POOL_SPIN_US)
                break;
            sched_yield(); /* let a thread with work run on this CPU (more threads than CPUs) */
        }
    }
    pthread_mutex_lock(&p->mu);
    uint64_t j;
    while (((j = atomic_load_explicit(&p->job, memory_order_acquire)) >> PARTS_BITS) == seen_seq)
        pthread_cond_wait(&p->cv_work, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return j;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    gm_pool *p = w->pool;
    uint64_t seen_seq = 0;
    for (;;) {
        const uint64_t j = wait_job(p, seen_seq);
        seen_seq = j >> PARTS_BITS;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            break;
        const int n_parts = (int)(j & PARTS_MASK);
        if (w->part >= n_parts)
            continue; /* not needed for this job: the owner does not wait for this worker */
        p->fn(p->ctx, w->part, n_parts);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static void post_job(gm_pool *p, uint64_t word)
{
    atomic_store_explicit(&p->job, word, memory_order_seq_cst);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
}

static void stop_workers(gm_pool *p, int n_started)
{
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    const uint64_t seq = (atomic_load_explicit(&p->job, memory_order_relaxed) >> PARTS_BITS) + 1;
    post_job(p, seq << PARTS_BITS);
    for (int i = 0; i < n_started; i++)
        pthread_join(p->threads[i], NULL);
}

static void free_pool(gm_pool *p)
{
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_work);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int gm_pool_create(gm_pool **out, int n_threads, gm_err *err)
{
    if (!out)
        return gm_err_set(err, GM_EINVAL, "thread pool: no output pointer");
    *out = NULL;
    if (n_threads < 1 || n_threads > MAX_THREADS)
        return gm_err_set(err, GM_EINVAL, "thread pool: %d threads (want 1..%d)", n_threads,
                          MAX_THREADS);
    gm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "thread pool: out of memory");
    p->n_workers = n_threads - 1;
    p->owner = pthread_self();
    atomic_init(&p->job, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (p->n_workers > 0) {
        p->threads = calloc((size_t)p->n_workers, sizeof *p->threads);
        p->workers = calloc((size_t)p->n_workers, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            free_pool(p);
            return gm_err_set(err, GM_ENOMEM, "thread pool: out of memory");
        }
    }
    /* workers take no signals: they go to the threads that handle them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < p->n_workers; i++) {
        p->workers[i].pool = p;
        p->workers[i].part = i + 1;
        const int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            stop_workers(p, i);
            free_pool(p);
            return gm_err_errno(err, rc == EAGAIN ? GM_ENOMEM : GM_EIO, rc,
                                "thread pool: cannot start thread %d of %d", i + 1, n_threads);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    *out = p;
    return 0;
}

void gm_pool_destroy(gm_pool *pool)
{
    if (!pool)
        return;
    if (!pthread_equal(pthread_self(), pool->owner))
        abort(); /* programmer error: only the owner may destroy the pool */
    stop_workers(pool, pool->n_workers);
    free_pool(pool);
}

void gm_pool_adopt(gm_pool *pool)
{
    if (pool)
        pool->owner = pthread_self();
}

int gm_pool_size(const gm_pool *pool)
{
    return pool ? pool->n_workers + 1 : 1;
}

void gm_pool_run(gm_pool *pool, gm_pool_fn fn, void *ctx, int n_threads)
{
    int n = n_threads < 1 ? 1 : n_threads;
    if (!pool || n == 1 || pool->n_workers == 0) {
        fn(ctx, 0, 1);
        return;
    }
    if (!pthread_equal(pthread_self(), pool->owner))
        abort(); /* programmer error: one owner thread runs jobs */
    if (atomic_exchange_explicit(&pool->busy, 1, memory_order_relaxed))
        abort(); /* programmer error: a job's function ran a job of the same pool */
    if (n > pool->n_workers + 1)
        n = pool->n_workers + 1;
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, n - 1, memory_order_relaxed);
    const uint64_t seq = (atomic_load_explicit(&pool->job, memory_order_relaxed) >> PARTS_BITS) + 1;
    post_job(pool, seq << PARTS_BITS | (uint64_t)n);

    fn(ctx, 0, n);

    uint64_t start = 0;
    for (unsigned i = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; i++) {
        cpu_relax();
        if ((i & 63u) == 63u) {
            const uint64_t t = now_us();
            if (start == 0) {
                start = t;
            } else if (t - start > GM_POOL_SPIN_US) {
                pthread_mutex_lock(&pool->mu);
                while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0)
                    pthread_cond_wait(&pool->cv_done, &pool->mu);
                pthread_mutex_unlock(&pool->mu);
                break;
            }
            sched_yield();
        }
    }
    atomic_store_explicit(&pool->busy, 0, memory_order_relaxed);
}
