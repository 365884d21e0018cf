/* A staged pass's copies through page-locked buffers (see gpu_copy.h). */
#include "infer/gpu_copy.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "base/log.h"
#include "stream/stream.h"

/* One copy: rows of width bytes, packed at src, to dst's rows dpitch apart; in a buffer, at
 * offset off. */
typedef struct {
    uint8_t *dst;
    uint64_t dpitch;
    const uint8_t *src;
    uint64_t width, rows, off;
} gm_copy;

struct gm_gpu_copies {
    gm_copy *list;  /* [max]: the pass's copies */
    gm_copy *segs;  /* [max]: the parts of them one buffer holds (each copy one part at most) */
    uint32_t n, max;
    bool bounce;
};

int gm_gpu_copies_create(gm_gpu_copies **out, uint32_t max, bool bounce, gm_err *err)
{
    *out = NULL;
    gm_gpu_copies *c = calloc(1, sizeof *c);
    if (!c || !max || !(c->list = calloc(max, sizeof *c->list)) || !(c->segs = calloc(max, sizeof *c->segs))) {
        gm_gpu_copies_free(c);
        return gm_err_set(err, max ? GM_ENOMEM : GM_EINVAL, "--gpu: the staging copies' list of %u", max);
    }
    c->max = max;
    c->bounce = bounce;
    *out = c;
    return 0;
}

void gm_gpu_copies_free(gm_gpu_copies *c)
{
    if (!c)
        return;
    free(c->list);
    free(c->segs);
    free(c);
}

int gm_gpu_copies_add(gm_gpu_copies *c, void *dst, uint64_t dpitch, const void *src, uint64_t width, uint64_t rows,
                      gm_err *err)
{
    if (c->n == c->max)
        return gm_err_set(err, GM_EINVAL, "--gpu: more than %u staging copies in a pass", c->max);
    if (rows)
        c->list[c->n++] = (gm_copy){(uint8_t *)dst, dpitch, (const uint8_t *)src, width, rows, 0};
    return 0;
}

/* A buffer's fill: n parts at consecutive offsets from 0, total bytes in all. */
typedef struct {
    uint8_t *buf;
    const gm_copy *segs;
    uint32_t n;
    uint64_t total;
} gm_fill_job;

/* Part part of n_parts copies its share of the buffer's bytes (4 KiB-aligned ranges). */
static void fill_part(void *ctx, int part, int n_parts)
{
    const gm_fill_job *j = ctx;
    const uint64_t page = 4096;
    uint64_t lo = j->total / page * (uint64_t)part / (uint64_t)n_parts * page;
    uint64_t hi = part + 1 == n_parts ? j->total : j->total / page * (uint64_t)(part + 1) / (uint64_t)n_parts * page;
    for (uint32_t k = 0; k < j->n && lo < hi; k++) {
        const gm_copy *s = &j->segs[k];
        const uint64_t end = s->off + s->width * s->rows;
        if (end <= lo)
            continue;
        const uint64_t b = end < hi ? end : hi;
        memcpy(j->buf + lo, s->src + (lo - s->off), b - lo);
        lo = b;
    }
}

/* Fills buf with the n parts (fill bytes), queues their copies from it and marks it sent. */
static int send(gm_gpu_copies *c, struct gm_cuda_pf *pf, gm_pool *pool, uint8_t *buf, uint64_t fill, uint32_t n,
                gm_gpu_copy_stats *st, gm_err *err)
{
    const double t0 = gm_stream_now_s();
    gm_fill_job j = {buf, c->segs, n, fill};
    gm_pool_run(pool, fill_part, &j, pool ? gm_pool_size(pool) : 1);
    st->fill_s += gm_stream_now_s() - t0;
    int rc = 0;
    for (uint32_t k = 0; k < n && !rc; k++) {
        const gm_copy *s = &c->segs[k];
        rc = gm_cuda_pf_upload(pf, s->dst, s->dpitch, buf + s->off, s->width, s->width, s->rows, err);
    }
    gm_err sub = {0};
    const int sent = gm_cuda_pf_bounce_sent(pf, rc ? &sub : err); /* marked even after a failed copy */
    st->bounced += rc ? 0 : fill;
    return rc ? rc : sent;
}

int gm_gpu_copies_flush(gm_gpu_copies *c, struct gm_cuda_pf *pf, gm_pool *pool, gm_gpu_copy_stats *st, gm_err *err)
{
    uint8_t *buf = NULL;
    uint64_t cap = 0, fill = 0;
    uint32_t n = 0;
    int rc = 0;
    for (uint32_t i = 0; i < c->n && !rc; i++) {
        const gm_copy *p = &c->list[i];
        for (uint64_t r = 0; r < p->rows && !rc;) {
            if (c->bounce && !buf) {
                const double t0 = gm_stream_now_s();
                gm_err sub = {0};
                if (gm_cuda_pf_bounce(pf, &buf, &cap, &sub)) {
                    gm_log(GM_LOG_NOTE, "[gpu] the staging copies go from the file's pages: %s", sub.msg);
                    c->bounce = false;
                }
                st->fill_s += gm_stream_now_s() - t0;
                fill = 0;
                n = 0;
            }
            if (!c->bounce || p->width > cap) { /* straight from host memory */
                rc = gm_cuda_pf_upload(pf, p->dst + r * p->dpitch, p->dpitch, p->src + r * p->width, p->width,
                                       p->width, p->rows - r, err);
                break;
            }
            const uint64_t room = (cap - fill) / p->width, rows = p->rows - r < room ? p->rows - r : room;
            if (!rows) {
                rc = send(c, pf, pool, buf, fill, n, st, err);
                buf = NULL;
                continue;
            }
            c->segs[n++] = (gm_copy){p->dst + r * p->dpitch, p->dpitch, p->src + r * p->width, p->width, rows, fill};
            fill += rows * p->width;
            r += rows;
        }
    }
    if (!rc && buf && n)
        rc = send(c, pf, pool, buf, fill, n, st, err);
    c->n = 0;
    return rc;
}
