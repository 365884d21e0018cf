/* kernels/pool: a small persistent thread pool for the compute kernels.
 *
 * Owns: n_threads - 1 worker threads created once; gm_pool_run hands them one function to run
 * as parts 1..n-1 of a job while the calling thread runs part 0, and returns when all parts are
 * done. Between jobs the workers spin for a short while (GM_POOL_SPIN_US), so the next layer's
 * job starts without a wake-up, and then sleep on a condition variable, so an idle engine uses
 * no CPU.
 *
 * Invariants: one owner thread (the creator) calls gm_pool_run and gm_pool_destroy; a job's
 * function must not call gm_pool_run (both are caught: abort). Nothing is allocated per job.
 * Jobs never run concurrently, and the memory written by a part is visible to the owner when
 * gm_pool_run returns.
 *
 * Threads: gm_pool_create, gm_pool_run, gm_pool_destroy on the owner thread only (gm_pool_adopt
 * moves the ownership); gm_pool_size on any thread.
 */
#ifndef GM_KERNELS_POOL_H
#define GM_KERNELS_POOL_H

#include "base/err.h"

/* How long a worker keeps polling for the next job before it sleeps. */
#define GM_POOL_SPIN_US 200

typedef struct gm_pool gm_pool;

/* One part of a job: part (0..n_parts-1) of n_parts; part 0 runs on the owner thread. */
typedef void (*gm_pool_fn)(void *ctx, int part, int n_parts);

/* Creates a pool for up to n_threads threads in all (the caller counts as one; n_threads 1
 * creates no worker). GM_EINVAL when n_threads < 1 or > 1024; GM_ENOMEM or GM_EIO when memory or
 * a thread cannot be had (then nothing is left behind). */
int gm_pool_create(gm_pool **out, int n_threads, gm_err *err);

/* Stops and joins the workers and frees the pool. NULL is ignored. */
void gm_pool_destroy(gm_pool *pool);

/* Makes the calling thread the owner: a caller that serialises the pool's users itself (the
 * public API's model lock) hands the pool to the thread that holds its lock. Never while a job
 * runs. */
void gm_pool_adopt(gm_pool *pool);

/* Threads the pool can use in all (workers + the owner). */
int gm_pool_size(const gm_pool *pool);

/* Runs fn(ctx, part, n) for part = 0..n-1 with n = min(n_threads, gm_pool_size(pool)) (at least
 * 1), part 0 on the calling thread, and waits for all parts. pool NULL runs fn(ctx, 0, 1). */
void gm_pool_run(gm_pool *pool, gm_pool_fn fn, void *ctx, int n_threads);

#endif
