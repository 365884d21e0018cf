/* The attention block: norm, q/k/v projections, per-head q/k norms, RoPE, the KV cache, causal
 * grouped-query attention and the output projection, added to the residual. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "gguf/types.h"
#include "infer/gpu_attn.h"
#include "infer/recipe.h"
#include "kernels/quant.h"

int gm_project(gm_fwd *s, const gm_mat *w, const float *x, uint64_t d_in, uint32_t n, float *y,
               uint64_t ldy, gm_err *err)
{
    gm_engine *e = s->e;
    int rc = gm_prepare(s, w->type, x, d_in, n, s->act, s->act_stride, err);
    if (rc)
        return rc;
    return gm_matmul(e->k, w, 0, w->n_rows, s->act, s->act_stride, n, y, ldy, e->pool, e->n_threads,
                     err);
}

/* y = W x for the n rows of x (stride d_in), into y (stride w->n_rows). */
int gm_attn_project(gm_fwd *s, const gm_mat *w, const float *x, uint64_t d_in, uint32_t n,
                    float *y, gm_err *err)
{
    return gm_project(s, w, x, d_in, n, y, w->n_rows, err);
}

void gm_attn_rope_vec(const gm_fwd *s, uint32_t t, float *v)
{
    const uint32_t half = s->e->n_rot / 2;
    gm_rope_rotate(s->e, s->rope_cos + (uint64_t)t * half, s->rope_sin + (uint64_t)t * half, v);
}

void gm_rope_rotate(const gm_engine *e, const float *c, const float *sn, float *v)
{
    const uint32_t half = e->n_rot / 2;
    for (uint32_t i = 0; i < half; i++) {
        uint32_t a = e->ops.rope == GM_ROPE_NEOX ? i : 2 * i;
        uint32_t b = e->ops.rope == GM_ROPE_NEOX ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * c[i];
    }
}

/* Rotates the first n_rot dims of each head of n rows (n_heads heads of hd per row). */
static void rope(const gm_fwd *s, float *x, uint32_t n, uint32_t n_heads)
{
    const uint32_t hd = s->e->head_dim;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t h = 0; h < n_heads; h++)
            gm_attn_rope_vec(s, t, x + ((uint64_t)t * n_heads + h) * hd);
}

typedef struct attn_job {
    gm_fwd *s;
    uint32_t l, t_base, n; /* the chunk's tokens t_base .. t_base + n */
    gm_attn_fn fn;
    uint32_t tb;      /* tokens per item: s->attn_tb, 1 under a sliding window */
    uint32_t n_tb;    /* token blocks of tb tokens */
    uint32_t n_split; /* 1, or (a decode) the position parts, one item each */
    uint32_t n_items;
    _Atomic uint32_t next;
} attn_job;

/* A fresh online-softmax state for n_q queries. */
static void state_init(uint32_t n_q, uint32_t hd, float *o, float *m, float *l)
{
    memset(o, 0, (uint64_t)n_q * hd * sizeof(float));
    for (uint32_t i = 0; i < n_q; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
}

/* Items (token block, kv head, position part), taken one at a time by the pool's parts, the
 * latest tokens (which see the most positions) first. An item runs the attention kernel for the
 * group's query heads of its tokens (queries scaled by e->attn_scale as they are copied).
 * Positions are always taken in parts of s->attn_part_pos, each from a fresh state, merged in
 * order into the first: the arithmetic of a query is the same whether its parts run in one
 * item (then the result goes to s->att) or, in a decode with fewer kv heads than threads, one
 * part per item (the state goes to s->attn_split and gm_attn_block merges the parts in the same
 * order). So logits depend neither on the thread count nor on how tokens are chunked. */
/* A sink logit (gpt-oss) joins the softmax's sum of n_q queries of one head each (head
 * h0 + i % step for query i, step the heads of a token in the state) without a value. */
static void add_sinks(const float *sinks, uint32_t n_q, uint32_t step, uint32_t h0, uint32_t hd,
                      float *o, float *m, float *l)
{
    if (!sinks)
        return;
    for (uint32_t i = 0; i < n_q; i++) {
        const float sk = sinks[h0 + i % step];
        const float m_new = sk > m[i] ? sk : m[i];
        const float corr = m[i] == m_new ? 1.0f : expf(m[i] - m_new);
        for (uint32_t d = 0; d < hd; d++)
            o[(uint64_t)i * hd + d] *= corr;
        l[i] = l[i] * corr + expf(sk - m_new);
        m[i] = m_new;
    }
}

/* The cache rows' gm type. */
static uint32_t cache_type(const gm_fwd *s)
{
    return s->kv_type == GM_KV_F32 ? GM_TYPE_F32 : s->kv_type == GM_KV_F16 ? GM_TYPE_F16 : GM_TYPE_Q8_0;
}

void gm_attn_gathered(gm_fwd *s, int part, uint64_t q_row, uint32_t n_q, const uint8_t *krows, const uint8_t *vrows,
                      uint32_t cnt, const float *sinks)
{
    const gm_engine *e = s->e;
    const uint32_t hd = e->head_dim, max_q = s->attn_tb * (e->n_head / e->n_head_kv);
    float *scratch = s->attn_scratch + (uint64_t)part * s->attn_part_floats;
    float *qs = scratch + GM_ATTN_SCRATCH_FLOATS(hd, max_q);
    float *o = qs + (uint64_t)max_q * hd, *m = o + (uint64_t)max_q * hd, *lsum = m + max_q;
    uint32_t *end = (uint32_t *)(lsum + max_q);
    for (uint32_t i = 0; i < n_q; i++) {
        const float *src = s->q + (q_row + i) * hd;
        for (uint32_t d = 0; d < hd; d++)
            qs[(uint64_t)i * hd + d] = src[d] * e->attn_scale;
        end[i] = cnt;
    }
    state_init(n_q, hd, o, m, lsum);
    const gm_attn_kv kv = {cache_type(s), hd, krows, vrows, s->kv_row_bytes};
    const gm_attn_q aq = {n_q, qs, end, o, m, lsum};
    gm_kernels_attn(e->k, hd)(&kv, 0, cnt, &aq, scratch);
    /* the n_q heads are consecutive heads of one token, from head q_row % n_head */
    add_sinks(sinks, n_q, n_q, (uint32_t)(q_row % e->n_head), hd, o, m, lsum);
    gm_attn_finish(n_q, hd, o, lsum, s->att + q_row * hd, hd);
}

static void attn_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    attn_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t hd = e->head_dim, nh = e->n_head, nkv = e->n_head_kv, group = nh / nkv;
    const uint32_t tb = j->tb, max_q = s->attn_tb * group, P = s->attn_part_pos;
    const gm_layer_w *lw = &e->layers[j->l];
    const uint32_t cap = s->kv_cap[j->l];
    const uint64_t head_bytes = (uint64_t)cap * s->kv_row_bytes; /* a kv head's rows */
    const uint8_t *kc = (const uint8_t *)s->k_cache + s->kv_off[j->l];
    /* MLA: the latent row is the value as well as the key */
    const uint8_t *vc = (const uint8_t *)(e->mla ? s->k_cache : s->v_cache) + s->kv_off[j->l];
    float *base = s->attn_scratch + (uint64_t)part * s->attn_part_floats;
    float *scratch = base; /* the kernel's: GM_ATTN_SCRATCH_FLOATS(hd, max_q), 64-byte aligned */
    float *qs = base + GM_ATTN_SCRATCH_FLOATS(hd, max_q);
    float *o = qs + (uint64_t)max_q * hd, *m = o + (uint64_t)max_q * hd, *lsum = m + max_q;
    float *o2 = lsum + max_q, *m2 = o2 + (uint64_t)max_q * hd, *l2 = m2 + max_q;
    uint32_t *end = (uint32_t *)(l2 + max_q);
    const float scale = e->attn_scale;
    const uint32_t kv_type = cache_type(s);
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n_items)
            break;
        const uint32_t split = it % j->n_split, kvh = it / j->n_split % nkv;
        const uint32_t blk = j->n_tb - 1 - it / j->n_split / nkv;
        const uint32_t t0 = j->t_base + blk * tb;
        const uint32_t t1 = t0 + tb < j->t_base + j->n ? t0 + tb : j->t_base + j->n;
        const uint32_t n_q = (t1 - t0) * group;
        for (uint32_t t = t0; t < t1; t++)
            for (uint32_t g = 0; g < group; g++) {
                const uint32_t i = (t - t0) * group + g;
                const float *src = s->q + ((uint64_t)t * nh + (uint64_t)kvh * group + g) * hd;
                for (uint32_t d = 0; d < hd; d++)
                    qs[(uint64_t)i * hd + d] = src[d] * scale;
                end[i] = s->pos + t + 1;
            }
        const gm_attn_kv kv = {kv_type, hd, kc + (uint64_t)kvh * head_bytes,
                               vc + (uint64_t)kvh * head_bytes, s->kv_row_bytes};
        const uint32_t p_end = s->pos + t1, n_pp = (p_end + P - 1) / P;
        if (lw->window) {
            /* one token's window, block by block (16 aligned positions, the first and last
             * cut to the window), each block's rows where the ring keeps them: whatever the
             * ring's size, the same blocks in the same order */
            state_init(n_q, hd, o, m, lsum);
            const gm_attn_q aq = {n_q, qs, end, o, m, lsum};
            for (uint32_t p = p_end > lw->window ? p_end - lw->window : 0; p < p_end;) {
                const uint32_t pe = (p / GM_ATTN_BLOCK + 1) * GM_ATTN_BLOCK;
                const uint32_t p1 = pe < p_end ? pe : p_end, shift = p - p % cap;
                for (uint32_t i = 0; i < n_q; i++)
                    end[i] = p_end - shift;
                j->fn(&kv, p - shift, p1 - shift, &aq, scratch);
                p = p1;
            }
        }
        /* the parts: everything the last token sees, or (split) this item's one part */
        const uint32_t k0 = j->n_split > 1 ? split : 0;
        const uint32_t k1 = lw->window ? 0 : j->n_split > 1 ? split + 1 : n_pp;
        for (uint32_t k = k0; k < k1; k++) {
            const uint32_t p0 = k * P, p1 = p_end - p0 < P ? p_end : p0 + P;
            const bool first = k == k0;
            float *to = first ? o : o2, *tm = first ? m : m2, *tl = first ? lsum : l2;
            state_init(n_q, hd, to, tm, tl);
            const gm_attn_q aq = {n_q, qs, end, to, tm, tl};
            j->fn(&kv, p0, p1, &aq, scratch);
            if (!first)
                gm_attn_merge(n_q, hd, o, m, lsum, o2, m2, l2);
        }
        if (j->n_split == 1) {
            add_sinks(lw->sinks, n_q, group, kvh * group, hd, o, m, lsum);
            for (uint32_t t = t0; t < t1; t++)
                gm_attn_finish(group, hd, o + (uint64_t)(t - t0) * group * hd,
                               lsum + (t - t0) * group,
                               s->att + ((uint64_t)t * nh + (uint64_t)kvh * group) * hd, hd);
        } else { /* one token: its group's state, [part][head] rows of hd + 2 */
            for (uint32_t g = 0; g < group; g++) {
                float *dst = s->attn_split +
                             ((uint64_t)split * nh + (uint64_t)kvh * group + g) * (hd + 2);
                memcpy(dst, o + (uint64_t)g * hd, hd * sizeof(float));
                dst[hd] = m[g];
                dst[hd + 1] = lsum[g];
            }
        }
    }
}

/* Causal grouped-query attention of the chunk's n tokens over the layer's cache, into s->att.
 * A decode whose kv heads are fewer than the threads runs its position parts as items of their
 * own and merges them here, in the order one item would have. */
void gm_attn_run(gm_fwd *s, uint32_t l, uint32_t t0, uint32_t n)
{
    gm_engine *e = s->e;
    const uint32_t hd = e->head_dim, nh = e->n_head, nkv = e->n_head_kv;
    const uint32_t window = e->layers[l].window;
    attn_job job = {.s = s, .l = l, .t_base = t0, .n = n, .fn = gm_kernels_attn(e->k, hd)};
    job.tb = window ? 1 : s->attn_tb;
    job.n_tb = (n + job.tb - 1) / job.tb;
    job.n_split = 1;
    const uint32_t n_pp = (s->pos + t0 + n + s->attn_part_pos - 1) / s->attn_part_pos;
    if (n == 1 && nkv < (uint32_t)e->n_threads && n_pp > 1 && !window)
        job.n_split = n_pp;
    job.n_items = job.n_tb * nkv * job.n_split;
    atomic_init(&job.next, 0);
    gm_pool_run(e->pool, attn_part, &job, e->n_threads);
    if (job.n_split == 1)
        return;
    const uint64_t row = hd + 2;
    for (uint32_t h = 0; h < nh; h++) {
        float *a = s->attn_split + (uint64_t)h * row;
        for (uint32_t k = 1; k < job.n_split; k++) {
            const float *b = s->attn_split + ((uint64_t)k * nh + h) * row;
            gm_attn_merge(1, hd, a, a + hd, a + hd + 1, b, b + hd, b + hd + 1);
        }
        add_sinks(e->layers[l].sinks, 1, 1, h, hd, a, a + hd, a + hd + 1);
        gm_attn_finish(1, hd, a, a + hd + 1, s->att + (uint64_t)h * hd, hd);
    }
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

uint64_t gm_kv_at(const gm_fwd *s, uint32_t l, uint32_t h, uint32_t p)
{
    const uint32_t cap = s->kv_cap[l];
    return s->kv_off[l] + ((uint64_t)h * cap + p % cap) * s->kv_row_bytes;
}

void gm_attn_cache_row(const gm_fwd *s, const float *src, uint8_t *dst)
{
    const uint32_t hd = s->e->head_dim;
    if (s->kv_type == GM_KV_F32) {
        memcpy(dst, src, hd * sizeof(float));
    } else if (s->kv_type == GM_KV_F16) {
        for (uint32_t i = 0; i < hd; i++)
            ((uint16_t *)dst)[i] = gm_f32_to_f16(src[i]);
    } else {
        q8_0_row(src, dst, hd);
    }
}

/* The chunk's q/k RMSNorm per head, or (qk_norm_joint) over all heads of a token at once. */
static void qk_norms(gm_fwd *s, const gm_layer_w *w, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t hd = e->head_dim;
    const bool joint = e->ops.qk_norm_joint;
    if (w->q_norm)
        gm_rms_norm(s->q, w->q_norm, s->q, joint ? n : n * e->n_head, joint ? e->n_head * hd : hd,
                    e->rms_eps);
    if (w->k_norm)
        gm_rms_norm(s->kk, w->k_norm, s->kk, joint ? n : n * e->n_head_kv,
                    joint ? e->n_head_kv * hd : hd, e->rms_eps);
}

/* Layer l's attention; with msa, a layer with an indexer attends the blocks it chooses (msa.c,
 * or qsa.c for qwen4exp). */
static int attn(gm_fwd *s, uint32_t l, uint32_t n, float *out, bool msa, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t E = e->n_embd, hd = e->head_dim;
    const uint64_t qd = (uint64_t)e->n_head * hd, kvd = (uint64_t)e->n_head_kv * hd;
    int rc;
    /* a decode token's attention on the device where it runs there (infer/gpu_attn.h) */
    const bool dev = s->gkv && gm_gpu_attn_layer(e->gpu_attn, l) && !(msa && w->idx_slot >= 0);
    if (dev && n == 1)
        return gm_gpu_attn_token(e->gpu_attn, s, l, out, err);
    /* attn_out_gate: wq gives per head [query | gate]; the gates wait in s->q_gate + 2 qd n */
    float *gate = s->q_gate + 2 * qd * n;
    if (e->ops.attn_out_gate) {
        if ((rc = gm_attn_project(s, &w->wq, s->xn, E, n, s->q_gate, err)))
            return rc;
        for (uint64_t th = 0; th < (uint64_t)n * e->n_head; th++) {
            memcpy(s->q + th * hd, s->q_gate + th * 2 * hd, hd * sizeof(float));
            memcpy(gate + th * hd, s->q_gate + th * 2 * hd + hd, hd * sizeof(float));
        }
    } else if ((rc = gm_attn_project(s, &w->wq, s->xn, E, n, s->q, err))) {
        return rc;
    }
    if ((rc = gm_attn_project(s, &w->wk, s->xn, E, n, s->kk, err)) ||
        (rc = gm_attn_project(s, &w->wv, s->xn, E, n, s->vv, err)))
        return rc;
    gm_add_bias(s->q, w->bq, n, qd);
    gm_add_bias(s->kk, w->bk, n, kvd);
    gm_add_bias(s->vv, w->bv, n, kvd);
    /* q/k RMSNorm before RoPE (after it for Hunyuan) */
    if (!e->ops.qk_norm_after_rope)
        qk_norms(s, w, n);
    rope(s, s->q, n, e->n_head);
    rope(s, s->kk, n, e->n_head_kv);
    if (e->ops.qk_norm_after_rope)
        qk_norms(s, w, n);
    /* the chunk's rows into the cache (rows by layer, kv head, position, so that the positions of
     * one kv head, which attention reads in order, are contiguous), then its attention; a
     * sliding-window layer's ring holds GM_WINDOW_STEP tokens beyond the window, so its chunk
     * goes in steps of that many */
    const uint32_t step = w->window ? GM_WINDOW_STEP : n;
    const bool sparse = msa && w->idx_slot >= 0;
    for (uint32_t t0 = 0; t0 < n; t0 += step) {
        const uint32_t t1 = n - t0 < step ? n : t0 + step;
        for (uint32_t t = t0; t < t1; t++)
            for (uint32_t h = 0; h < e->n_head_kv; h++) {
                const uint64_t at = gm_kv_at(s, l, h, s->pos + t);
                gm_attn_cache_row(s, s->kk + ((uint64_t)t * e->n_head_kv + h) * hd,
                                  (uint8_t *)s->k_cache + at);
                gm_attn_cache_row(s, s->vv + ((uint64_t)t * e->n_head_kv + h) * hd,
                                  (uint8_t *)s->v_cache + at);
            }
        if (!sparse)
            gm_attn_run(s, l, t0, t1 - t0);
    }
    if (dev && (rc = gm_gpu_kv_put(e->gpu_attn, s, l, n, err)))
        return rc;
    if (sparse && e->ops.qsa) { /* qwen4exp's blocks (qsa.c) */
        if ((rc = gm_qsa_index(s, l, n, err)))
            return rc;
        gm_qsa_attend(s, l, n);
    } else if (sparse) { /* no window: the whole chunk's rows are cached above */
        if ((rc = gm_msa_index(s, l, n, err)))
            return rc;
        gm_msa_attend(s, l, n);
    }
    if (e->ops.attn_out_gate)
        for (uint64_t i = 0; i < qd * n; i++)
            s->att[i] *= 1.0f / (1.0f + expf(-gate[i]));
    if ((rc = gm_attn_project(s, &w->wo, s->att, qd, n, out, err)))
        return rc;
    gm_add_bias(out, w->bo, n, E);
    return 0;
}

int gm_attn_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    return attn(s, l, n, out, false, err);
}

int gm_msa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    return attn(s, l, n, out, true, err);
}

int gm_qsa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    return attn(s, l, n, out, true, err);
}
