/* The attention block: norm, q/k/v projections, per-head q/k norms, RoPE, the KV cache, causal
 * grouped-query attention and the output projection, added to the residual. */
#include <math.h>
#include <string.h>

#include "gguf/types.h"
#include "infer/internal.h"
#include "kernels/dequant.h"
#include "kernels/quant.h"

/* y = W x for the n rows of x (stride d_in), into y (stride w->n_rows). */
static int project(gm_session *s, const gm_mat *w, const float *x, uint64_t d_in, uint32_t n,
                   float *y, gm_err *err)
{
    gm_engine *e = s->e;
    int rc = gm_prepare(s, w->type, x, d_in, n, s->act, s->act_stride, err);
    if (rc)
        return rc;
    return gm_matmul(e->k, w, 0, w->n_rows, s->act, s->act_stride, n, y, w->n_rows, e->pool,
                     e->n_threads, err);
}

static void add_bias(float *y, const float *b, uint32_t n, uint64_t d)
{
    if (!b)
        return;
    for (uint32_t t = 0; t < n; t++)
        for (uint64_t i = 0; i < d; i++)
            y[t * d + i] += b[i];
}

/* Rotates the first n_rot dims of each head of n rows (n_heads heads of hd per row). */
static void rope(const gm_session *s, float *x, uint32_t n, uint32_t n_heads)
{
    const gm_engine *e = s->e;
    const uint32_t hd = e->head_dim, half = e->n_rot / 2;
    for (uint32_t t = 0; t < n; t++) {
        const float *c = s->rope_cos + (uint64_t)t * half, *sn = s->rope_sin + (uint64_t)t * half;
        for (uint32_t h = 0; h < n_heads; h++) {
            float *v = x + ((uint64_t)t * n_heads + h) * hd;
            for (uint32_t i = 0; i < half; i++) {
                uint32_t a = e->ops.rope == GM_ROPE_NEOX ? i : 2 * i;
                uint32_t b = e->ops.rope == GM_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * c[i];
            }
        }
    }
}

typedef struct attn_job {
    gm_session *s;
    uint32_t l, n;
} attn_job;

/* Row p of head kvh of a layer's cache (its bytes at cache) as float32: a pointer into an f32
 * cache, or the row converted into buf (f16, or Q8_0 blocks decoded as the format says). */
static const float *kv_row(const gm_session *s, const uint8_t *cache, uint32_t p, uint32_t kvh, float *buf)
{
    const gm_engine *e = s->e;
    const uint8_t *row = cache + ((uint64_t)p * e->n_head_kv + kvh) * s->kv_row_bytes;
    if (s->kv_type == GM_KV_F32)
        return (const float *)row;
    if (s->kv_type == GM_KV_Q8_0) {
        gm_dequant_row(GM_TYPE_Q8_0, row, buf, e->head_dim);
        return buf;
    }
    const uint16_t *h = (const uint16_t *)row;
    for (uint32_t i = 0; i < e->head_dim; i++)
        buf[i] = gm_f16_to_f32(h[i]);
    return buf;
}

/* One row of n floats (a multiple of 32) into Q8_0 blocks: scale max|x| / 127 (f16), values
 * rounded to nearest, as the format's reference quantizer does. */
static void q8_0_row(const float *x, uint8_t *dst, uint32_t n)
{
    for (uint32_t b = 0; b < n / GM_QK8_0; b++) {
        const float *v = x + (uint64_t)b * GM_QK8_0;
        gm_block_q8_0 *blk = (gm_block_q8_0 *)(dst + (uint64_t)b * sizeof *blk);
        float amax = 0;
        for (int i = 0; i < GM_QK8_0; i++)
            amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        blk->d = gm_f32_to_f16(d);
        for (int i = 0; i < GM_QK8_0; i++)
            blk->qs[i] = (int8_t)roundf(v[i] * id);
    }
}

/* q . k over hd floats; the simd reduction lets the compiler use vector lanes (the order of the
 * partial sums is fixed for a given build, so every path of the engine computes the same). */
static inline float dot_f(const float *a, const float *b, uint32_t n)
{
    float d = 0;
#pragma omp simd reduction(+ : d)
    for (uint32_t i = 0; i < n; i++)
        d += a[i] * b[i];
    return d;
}

/* Part of the (token, kv head) pairs: for each query head of the kv head's group,
 * softmax(q k^T / sqrt(hd)) v over positions 0..pos+t. Each cached row is read (and converted
 * from f16) once for the whole group. */
static void attn_part(void *ctx, int part, int n_parts)
{
    attn_job *j = ctx;
    gm_session *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t hd = e->head_dim, nh = e->n_head, nkv = e->n_head_kv, group = nh / nkv;
    const uint64_t layer_bytes = (uint64_t)s->n_ctx * nkv * s->kv_row_bytes;
    const uint8_t *kc = (const uint8_t *)s->k_cache + (uint64_t)j->l * layer_bytes;
    const uint8_t *vc = (const uint8_t *)s->v_cache + (uint64_t)j->l * layer_bytes;
    float *sc = s->scores + (uint64_t)part * group * s->n_ctx; /* [group][n_ctx] */
    float buf[GM_MAX_HEAD_DIM];
    const float scale = 1.0f / sqrtf((float)hd);
    uint64_t total = (uint64_t)j->n * nkv;
    uint64_t lo = total * (uint64_t)part / (uint64_t)n_parts;
    uint64_t hi = total * (uint64_t)(part + 1) / (uint64_t)n_parts;
    for (uint64_t it = lo; it < hi; it++) {
        uint32_t t = (uint32_t)(it / nkv), kvh = (uint32_t)(it % nkv);
        uint32_t n_pos = s->pos + t + 1;
        const float *q0 = s->q + ((uint64_t)t * nh + (uint64_t)kvh * group) * hd;
        for (uint32_t p = 0; p < n_pos; p++) {
            const float *k = kv_row(s, kc, p, kvh, buf);
            for (uint32_t g = 0; g < group; g++)
                sc[(uint64_t)g * s->n_ctx + p] = dot_f(q0 + (uint64_t)g * hd, k, hd) * scale;
        }
        float inv[GM_MAX_GROUP];
        for (uint32_t g = 0; g < group; g++) {
            float *row = sc + (uint64_t)g * s->n_ctx;
            float mx = -INFINITY;
            for (uint32_t p = 0; p < n_pos; p++)
                mx = row[p] > mx ? row[p] : mx;
            double sum = 0;
            for (uint32_t p = 0; p < n_pos; p++) {
                row[p] = expf(row[p] - mx);
                sum += row[p];
            }
            inv[g] = (float)(1.0 / sum);
            memset(s->att + ((uint64_t)t * nh + (uint64_t)kvh * group + g) * hd, 0, hd * sizeof(float));
        }
        for (uint32_t p = 0; p < n_pos; p++) {
            const float *v = kv_row(s, vc, p, kvh, buf);
            for (uint32_t g = 0; g < group; g++) {
                float w = sc[(uint64_t)g * s->n_ctx + p] * inv[g];
                float *o = s->att + ((uint64_t)t * nh + (uint64_t)kvh * group + g) * hd;
#pragma omp simd
                for (uint32_t i = 0; i < hd; i++)
                    o[i] += w * v[i];
            }
        }
    }
}

int gm_attn_block(gm_session *s, uint32_t l, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t E = e->n_embd, hd = e->head_dim;
    const uint64_t qd = (uint64_t)e->n_head * hd, kvd = (uint64_t)e->n_head_kv * hd;
    int rc;
    gm_rms_norm(s->x, w->attn_norm, s->xn, n, E, e->rms_eps);
    if ((rc = project(s, &w->wq, s->xn, E, n, s->q, err)) ||
        (rc = project(s, &w->wk, s->xn, E, n, s->kk, err)) ||
        (rc = project(s, &w->wv, s->xn, E, n, s->vv, err)))
        return rc;
    add_bias(s->q, w->bq, n, qd);
    add_bias(s->kk, w->bk, n, kvd);
    add_bias(s->vv, w->bv, n, kvd);
    if (w->q_norm)
        gm_rms_norm(s->q, w->q_norm, s->q, n * e->n_head, hd, e->rms_eps);
    if (w->k_norm)
        gm_rms_norm(s->kk, w->k_norm, s->kk, n * e->n_head_kv, hd, e->rms_eps);
    rope(s, s->q, n, e->n_head);
    rope(s, s->kk, n, e->n_head_kv);
    /* the chunk's rows into the cache: (layer, position, kv head) rows of kv_row_bytes */
    const uint64_t at = ((uint64_t)l * s->n_ctx + s->pos) * e->n_head_kv * s->kv_row_bytes;
    uint8_t *kc = (uint8_t *)s->k_cache + at, *vc = (uint8_t *)s->v_cache + at;
    const uint64_t cnt = (uint64_t)n * kvd;
    if (s->kv_type == GM_KV_F32) {
        memcpy(kc, s->kk, cnt * sizeof(float));
        memcpy(vc, s->vv, cnt * sizeof(float));
    } else if (s->kv_type == GM_KV_F16) {
        for (uint64_t i = 0; i < cnt; i++) {
            ((uint16_t *)kc)[i] = gm_f32_to_f16(s->kk[i]);
            ((uint16_t *)vc)[i] = gm_f32_to_f16(s->vv[i]);
        }
    } else {
        for (uint64_t r = 0; r < (uint64_t)n * e->n_head_kv; r++) {
            q8_0_row(s->kk + r * hd, kc + r * s->kv_row_bytes, hd);
            q8_0_row(s->vv + r * hd, vc + r * s->kv_row_bytes, hd);
        }
    }
    attn_job job = {s, l, n};
    gm_pool_run(e->pool, attn_part, &job, e->n_threads);
    if ((rc = project(s, &w->wo, s->att, qd, n, s->tmp, err)))
        return rc;
    add_bias(s->tmp, w->bo, n, E);
    for (uint64_t i = 0; i < (uint64_t)n * E; i++)
        s->x[i] += s->tmp[i];
    return 0;
}
