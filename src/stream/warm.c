/* stream/warm: the arena's pages mapped in ahead of use (see warm.h). */
#include "stream/warm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Slots mapped per step (then the hint is read again). */
#define SLOTS_PER_STEP 2u

struct gm_warm {
    gm_warm_layer *layers;
    _Atomic uint32_t *done;   /* per layer: slots mapped */
    uint32_t n_layers;
    _Atomic uint64_t bytes;   /* mapped so far */
    _Atomic uint64_t cap;
    _Atomic uint32_t hint;    /* the layer to map first */
    _Atomic bool stop, finished, paused;
    pthread_mutex_t mu;       /* guards the wait at the cap */
    pthread_cond_t cv;
    pthread_t th;
    bool joined;
};

/* Waits while paused or the bytes mapped have reached the cap; false when asked to stop. */
static bool under_cap(gm_warm *w, uint64_t want)
{
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->stop) &&
           (atomic_load(&w->paused) || atomic_load(&w->bytes) + want > atomic_load(&w->cap)))
        pthread_cond_wait(&w->cv, &w->mu);
    bool go = !atomic_load(&w->stop);
    pthread_mutex_unlock(&w->mu);
    return go;
}

/* Maps [p, p + bytes) in GM_WARM_STEP_BYTES calls; false when asked to stop or the kernel
 * refuses the call (then nothing more is tried). */
static bool populate(gm_warm *w, uint8_t *p, uint64_t bytes)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p / page * page, hi = ((uintptr_t)p + bytes + page - 1) / page * page;
    while (lo < hi) {
        if (atomic_load_explicit(&w->stop, memory_order_acquire))
            return false;
        if (atomic_load_explicit(&w->paused, memory_order_acquire) && !under_cap(w, 0))
            return false;
        uintptr_t n = hi - lo < GM_WARM_STEP_BYTES ? hi - lo : GM_WARM_STEP_BYTES;
        if (madvise((void *)lo, n, MADV_POPULATE_WRITE) != 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue; /* interrupted: the same range again */
            return false; /* EINVAL: no such call here; ENOMEM/EFAULT: the memory is not there */
        }
        lo += n;
    }
    return true;
}

static void *warm_main(void *arg)
{
    gm_warm *w = arg;
    struct sched_param sp = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp); /* only idle CPU time */
    for (;;) {
        /* the first layer from the hint on (wrapping) with slots left */
        const uint32_t h = atomic_load_explicit(&w->hint, memory_order_relaxed);
        uint32_t l = UINT32_MAX;
        for (uint32_t i = 0; i < w->n_layers && l == UINT32_MAX; i++) {
            uint32_t c = (h + i) % w->n_layers;
            if (w->layers[c].slots && atomic_load_explicit(&w->done[c], memory_order_relaxed) < w->layers[c].n_slots)
                l = c;
        }
        if (l == UINT32_MAX)
            break;
        const gm_warm_layer *L = &w->layers[l];
        const uint32_t from = atomic_load_explicit(&w->done[l], memory_order_relaxed);
        const uint32_t to = from + SLOTS_PER_STEP < L->n_slots ? from + SLOTS_PER_STEP : L->n_slots;
        const uint64_t bytes = (uint64_t)(to - from) * L->slot_bytes;
        if (!under_cap(w, bytes))
            break;
        if (atomic_load_explicit(&w->hint, memory_order_relaxed) != h)
            continue; /* a new hint came while it waited */
        if (!populate(w, L->slots + (uint64_t)from * L->slot_bytes, bytes))
            break;
        atomic_fetch_add(&w->bytes, bytes);
        atomic_store_explicit(&w->done[l], to, memory_order_release);
    }
    atomic_store(&w->finished, true);
    return NULL;
}

int gm_warm_start(gm_warm **out, const gm_warm_layer *layers, uint32_t n_layers, uint64_t cap_bytes,
                  gm_err *err)
{
    *out = NULL;
    gm_warm *w = calloc(1, sizeof *w);
    if (!w)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    w->layers = malloc((n_layers ? n_layers : 1) * sizeof *w->layers);
    w->done = calloc(n_layers ? n_layers : 1, sizeof *w->done);
    if (!w->layers || !w->done) {
        free(w->layers);
        free((void *)w->done);
        free(w);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    memcpy(w->layers, layers, n_layers * sizeof *layers);
    w->n_layers = n_layers;
    atomic_init(&w->cap, cap_bytes);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->th, NULL, warm_main, w);
    if (rc) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w->layers);
        free((void *)w->done);
        free(w);
        return gm_err_errno(err, GM_EIO, rc, "cannot start the arena's page-mapping thread");
    }
    *out = w;
    return 0;
}

void gm_warm_set_cap(gm_warm *w, uint64_t cap_bytes)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->cap, cap_bytes);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void gm_warm_hint(gm_warm *w, uint32_t layer)
{
    if (w && w->n_layers)
        atomic_store_explicit(&w->hint, layer % w->n_layers, memory_order_relaxed);
}

void gm_warm_pause(gm_warm *w, bool paused)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->paused, paused);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

uint32_t gm_warm_slots(const gm_warm *w, uint32_t layer)
{
    if (!w || layer >= w->n_layers)
        return 0;
    return atomic_load_explicit(&((gm_warm *)w)->done[layer], memory_order_acquire);
}

uint64_t gm_warm_bytes(const gm_warm *w) { return w ? atomic_load(&((gm_warm *)w)->bytes) : 0; }

bool gm_warm_finished(const gm_warm *w) { return !w || atomic_load(&((gm_warm *)w)->finished); }

void gm_warm_stop(gm_warm *w)
{
    if (!w || w->joined)
        return;
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stop, true);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    w->joined = true;
}

void gm_warm_free(gm_warm *w)
{
    if (!w)
        return;
    gm_warm_stop(w);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->layers);
    free((void *)w->done);
    free(w);
}
