/* The weight pin (see pin.h). */
#include "stream/pin.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct gm_pin {
    uint8_t *base;
    uint64_t map_bytes;
    uint64_t n_tensors;
    uint64_t *offset; /* per tensor: offset in base, or UINT64_MAX when not pinned */
    gm_pin_info info;
};

typedef struct pin_job {
    const gm_gguf *g;
    gm_pin *p;
    int *fds;              /* one fd per part */
    uint64_t next;         /* next tensor index to take (under lock) */
    uint64_t done_bytes;   /* bytes copied so far (under lock) */
    int finished;          /* workers that have returned (under lock, signalled on cv) */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int rc;                /* first error */
    gm_err err;
} pin_job;

static int read_full(int fd, uint8_t *dst, uint64_t len, uint64_t off)
{
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t r = pread(fd, dst, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -ENODATA; /* the file is shorter than its header says */
        dst += r;
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    return 0;
}

static void *pin_worker(void *arg)
{
    pin_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        uint64_t i = j->next;
        while (i < j->p->n_tensors && j->p->offset[i] == UINT64_MAX)
            i++;
        j->next = i + 1;
        int stop = j->rc != 0 || i >= j->p->n_tensors;
        pthread_mutex_unlock(&j->lock);
        if (stop)
            break;
        const gm_gguf_tensor *t = gm_gguf_tensor_at(j->g, i);
        int r = read_full(j->fds[t->part], j->p->base + j->p->offset[i], t->n_bytes, t->file_offset);
        if (r != 0) {
            pthread_mutex_lock(&j->lock);
            if (j->rc == 0) {
                j->rc = GM_EIO;
                gm_err_set(&j->err, GM_EIO, "%s: reading tensor '%s' (%llu bytes at offset %llu) failed: %s",
                           gm_gguf_part_path(j->g, t->part), t->name, (unsigned long long)t->n_bytes,
                           (unsigned long long)t->file_offset,
                           r == -ENODATA ? "the file ends early" : strerror(-r));
            }
            pthread_mutex_unlock(&j->lock);
            break;
        }
        posix_fadvise(j->fds[t->part], (off_t)t->file_offset, (off_t)t->n_bytes, POSIX_FADV_DONTNEED);
        pthread_mutex_lock(&j->lock);
        j->done_bytes += t->n_bytes;
        pthread_mutex_unlock(&j->lock);
    }
    pthread_mutex_lock(&j->lock);
    j->finished++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

void gm_pin_free(gm_pin *p)
{
    if (!p)
        return;
    if (p->base) {
        if (p->info.locked_bytes)
            munlock(p->base, p->map_bytes);
        munmap(p->base, p->map_bytes);
    }
    free(p->offset);
    free(p);
}

int gm_pin_create(gm_pin **out, const gm_gguf *g, const gm_model_desc *m, int n_threads,
                  gm_gguf_progress_fn progress, void *ctx, gm_err *err)
{
    *out = NULL;
    gm_pin *p = calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    p->n_tensors = gm_gguf_n_tensors(g);
    p->offset = malloc((p->n_tensors ? p->n_tensors : 1) * sizeof *p->offset);
    if (!p->offset) {
        gm_pin_free(p);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    uint64_t total = 0;
    for (uint64_t i = 0; i < p->n_tensors; i++) {
        if (m->tensors[i].cls != GM_TC_EVERY_TOKEN) {
            p->offset[i] = UINT64_MAX;
            continue;
        }
        total = (total + 63) & ~63ull; /* cache-line aligned rows for the kernels */
        p->offset[i] = total;
        total += gm_gguf_tensor_at(g, i)->n_bytes;
    }
    p->info.bytes = total;
    long page = sysconf(_SC_PAGESIZE);
    p->map_bytes = (total + (uint64_t)page - 1) & ~((uint64_t)page - 1);
    if (p->map_bytes == 0) {
        *out = p;
        return 0;
    }
    void *base = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        int e = errno;
        gm_pin_free(p);
        return gm_err_errno(err, GM_ENOMEM, e, "cannot allocate %.1f GB for the every-token weights",
                            (double)total / 1e9);
    }
    p->base = base;
    /* lock before reading, so the pages are faulted in locked (MCL_ONFAULT-like behaviour of a
     * plain mlock on fresh anonymous memory: it populates them) */
    if (mlock(p->base, p->map_bytes) == 0)
        p->info.locked_bytes = p->map_bytes;
    else
        p->info.mlock_errno = errno;

    uint32_t n_parts = gm_gguf_n_parts(g);
    int *fds = calloc(n_parts, sizeof *fds);
    if (!fds) {
        gm_pin_free(p);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    int rc = 0;
    for (uint32_t i = 0; i < n_parts; i++)
        fds[i] = -1;
    for (uint32_t i = 0; i < n_parts && rc == 0; i++) {
        fds[i] = open(gm_gguf_part_path(g, i), O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0)
            rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot open", gm_gguf_part_path(g, i));
    }
    if (rc == 0) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pin_job job = {.g = g, .p = p, .fds = fds};
        pthread_mutex_init(&job.lock, NULL);
        pthread_cond_init(&job.cv, NULL);
        if (n_threads < 1)
            n_threads = 1;
        if (n_threads > 16)
            n_threads = 16;
        pthread_t th[16];
        int started = 0;
        for (int i = 0; i < n_threads; i++)
            if (pthread_create(&th[started], NULL, pin_worker, &job) == 0)
                started++;
        if (started == 0) {
            pin_worker(&job); /* no thread could start: read on this one */
        } else {
            /* this thread reports progress every quarter second until the workers are done */
            pthread_mutex_lock(&job.lock);
            while (job.finished < started) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 250000000L;
                if (until.tv_nsec >= 1000000000L) {
                    until.tv_sec++;
                    until.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&job.cv, &job.lock, &until);
                uint64_t done = job.done_bytes;
                pthread_mutex_unlock(&job.lock);
                if (progress)
                    progress(ctx, done, p->info.bytes);
                pthread_mutex_lock(&job.lock);
            }
            pthread_mutex_unlock(&job.lock);
        }
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        pthread_cond_destroy(&job.cv);
        pthread_mutex_destroy(&job.lock);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        p->info.read_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (job.rc) {
            rc = job.rc;
            gm_err_set(err, job.err.code, "%s", job.err.msg);
        }
    }
    for (uint32_t i = 0; i < n_parts; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    if (rc) {
        gm_pin_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

const void *gm_pin_data(const gm_pin *p, uint64_t i)
{
    if (!p || i >= p->n_tensors || p->offset[i] == UINT64_MAX)
        return NULL;
    return p->base + p->offset[i];
}

const gm_pin_info *gm_pin_get_info(const gm_pin *p) { return &p->info; }
