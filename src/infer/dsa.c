/* DeepSeek sparse attention (GLM-5.2, glm-dsa; Hy4, hy_v4): a lightning indexer picks, for each
 * query, the idx_topk past positions its latent attention (mla.c) reads.
 *
 * For the token at position P (llama.cpp's src/models/glm-dsa.cpp, the reference):
 *   q_h  = H rope(indexer.attn_q_b qr)_h         idx_heads heads of idx_dim; qr the normalised
 *                                                query latent (attn_q_a_norm(attn_q_a x))
 *   k_P  = H rope(LayerNorm(indexer.attn_k x))   one key a position, kept for the later tokens
 *   w_h  = (indexer.proj x)_h / sqrt(idx_dim idx_heads)
 *   score(p) = sum_h relu(q_h . k_p) w_h         for p <= P
 * with x the normalised hidden state, RoPE on the first n_rot dims of each head (adjacent pairs,
 * as the latent attention's) and H the orthonormal Walsh-Hadamard rotation of idx_dim: it leaves
 * the dot products as they are, and is kept so that the keys round as the reference's do in a
 * 16-bit cache. The query then attends the idx_topk positions of highest score (ties to the
 * earlier position), in position order; while it sees no more than idx_topk positions it attends
 * them all, the dense attention. A layer without its own indexer (attention.indexer.types)
 * reuses the choice of the last layer that has one, token by token. Hy4's variant (its recipe's
 * ops): RoPE on the last n_rot dims of each head, no Hadamard rotation, and the key LayerNorm
 * with the model's rms epsilon.
 *
 * The keys are kept as float32 (rounded through IEEE half when the session's cache is f16, as
 * the reference's cache is). Scoring a token reads every earlier key: idx_heads x idx_dim
 * multiply-adds a position, spread over the pool token by token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/recipe.h"
#include "kernels/quant.h"

/* LayerNorm's epsilon: the models' own (torch's LayerNorm in their indexer, 1e-6). */
#define IDX_NORM_EPS 1e-6

/* v = H v for the orthonormal Walsh-Hadamard matrix of n (a power of two) in Sylvester's order. */
static void hadamard(float *v, uint32_t n)
{
    for (uint32_t h = 1; h < n; h *= 2)
        for (uint32_t i = 0; i < n; i += 2 * h)
            for (uint32_t j = i; j < i + h; j++) {
                const float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
    const float sc = 1.0f / sqrtf((float)n);
    for (uint32_t i = 0; i < n; i++)
        v[i] *= sc;
}

/* y = LayerNorm(x) * w + b over n values (mean and variance summed in double). */
static void layer_norm(float *x, const float *w, const float *b, uint32_t n, double eps)
{
    double sum = 0, sq = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += x[i];
    const float mean = (float)(sum / n);
    for (uint32_t i = 0; i < n; i++) {
        const float d = x[i] - mean;
        sq += (double)d * d;
    }
    const float scale = (float)(1.0 / sqrt(sq / n + eps));
    for (uint32_t i = 0; i < n; i++)
        x[i] = (x[i] - mean) * scale * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

/* Orders (score, position) pairs: higher score first, then the earlier position. A NaN score
 * sorts last. */
static bool before(float sa, int32_t pa, float sb, int32_t pb)
{
    const bool na = sa != sa, nb = sb != sb;
    if (na || nb)
        return !na && nb;
    return sa > sb || (sa == sb && pa < pb);
}

void gm_top_scores(const float *sc, int32_t *pos, uint32_t n, uint32_t k)
{
    uint32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        const int32_t pv = pos[lo + (hi - 1 - lo) / 2]; /* never the last: the split is proper */
        const float ps = sc[pv];
        uint32_t i = lo, j = hi - 1;
        for (;;) { /* Hoare partition: [lo, i) before the pivot, (j, hi) not before it */
            while (before(sc[pos[i]], pos[i], ps, pv))
                i++;
            while (before(ps, pv, sc[pos[j]], pos[j]))
                j--;
            if (i >= j)
                break;
            const int32_t t = pos[i];
            pos[i++] = pos[j];
            pos[j--] = t;
        }
        const uint32_t mid = j + 1; /* [lo, mid) are at least as good as [mid, hi), both non-empty */
        if (k < mid)
            hi = mid;
        else if (k > mid)
            lo = mid;
        else
            return;
    }
}

int gm_cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

float gm_indexer_score(const float *q, const float *w, const float *k, uint32_t H, uint32_t D)
{
    float acc = 0.0f;
    for (uint32_t h = 0; h < H; h++) {
        const float *qh = q + (uint64_t)h * D;
        float dot = 0.0f;
        for (uint32_t d = 0; d < D; d++)
            dot += qh[d] * k[d];
        acc += (dot > 0.0f ? dot : 0.0f) * w[h];
    }
    return acc;
}

typedef struct dsa_job {
    gm_fwd *s;
    uint32_t l, n;
    _Atomic uint32_t next;
} dsa_job;

/* Per token of the chunk (latest first): the scores of every position it sees, the best
 * idx_topk of them in position order. */
static void select_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    dsa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t H = e->idx_heads, D = e->idx_dim, K = e->idx_topk;
    const float *keys = s->idx_keys + (uint64_t)e->layers[j->l].idx_slot * s->n_ctx * D;
    float *sc = s->idx_score + (uint64_t)part * s->n_ctx;
    int32_t *pos = s->idx_pos + (uint64_t)part * s->n_ctx;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n)
            break;
        const uint32_t t = j->n - 1 - it, seen = s->pos + t + 1;
        if (seen <= K) {
            s->idx_nsel[t] = 0; /* every position: the dense attention */
            continue;
        }
        const float *q = s->idx_q + (uint64_t)t * H * D, *w = s->idx_w + (uint64_t)t * H;
        for (uint32_t p = 0; p < seen; p++) {
            sc[p] = gm_indexer_score(q, w, keys + (uint64_t)p * D, H, D);
            pos[p] = (int32_t)p;
        }
        gm_top_scores(sc, pos, seen, K);
        int32_t *sel = s->idx_sel + (uint64_t)t * K;
        memcpy(sel, pos, K * sizeof *sel);
        qsort(sel, K, sizeof *sel, gm_cmp_i32);
        s->idx_nsel[t] = K;
    }
}

int gm_dsa_index(gm_fwd *s, uint32_t l, uint32_t n, const float *qr, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    if (w->idx_slot < 0)
        return 0; /* a shared layer: the last full layer's choice stands */
    const uint32_t H = e->idx_heads, D = e->idx_dim, E = e->n_embd;
    int rc;
    if ((rc = gm_attn_project(s, &w->idx_q_b, qr, e->q_lora, n, s->idx_q, err)) ||
        (rc = gm_attn_project(s, &w->idx_k, s->xn, E, n, s->idx_knew, err)) ||
        (rc = gm_attn_project(s, &w->idx_proj, s->xn, E, n, s->idx_w, err)))
        return rc;
    const float wscale = 1.0f / sqrtf((float)D * (float)H);
    /* the rotated dims: the first n_rot of a head, or (Hy4) the last */
    const uint32_t rot_at = e->ops.idx_rope_tail ? D - e->n_rot : 0;
    const bool had = !e->ops.idx_no_hadamard;
    const double ln_eps = e->ops.idx_norm_model_eps ? (double)e->rms_eps : IDX_NORM_EPS;
    float *keys = s->idx_keys + (uint64_t)w->idx_slot * s->n_ctx * D;
    for (uint32_t t = 0; t < n; t++) {
        for (uint32_t h = 0; h < H; h++) {
            float *q = s->idx_q + ((uint64_t)t * H + h) * D;
            gm_attn_rope_vec(s, t, q + rot_at);
            if (had)
                hadamard(q, D);
        }
        for (uint32_t h = 0; h < H; h++)
            s->idx_w[(uint64_t)t * H + h] *= wscale;
        float *k = s->idx_knew + (uint64_t)t * D;
        layer_norm(k, w->idx_k_norm, w->idx_k_norm_b, D, ln_eps);
        gm_attn_rope_vec(s, t, k + rot_at);
        if (had)
            hadamard(k, D);
        float *dst = keys + (uint64_t)(s->pos + t) * D;
        for (uint32_t d = 0; d < D; d++)
            dst[d] = s->kv_type == GM_KV_F16 ? gm_f16_to_f32(gm_f32_to_f16(k[d])) : k[d];
    }
    dsa_job job = {.s = s, .l = l, .n = n};
    atomic_init(&job.next, 0);
    gm_pool_run(e->pool, select_part, &job, e->n_threads);
    return 0;
}

/* The attention of the chunk's tokens that choose (idx_nsel > 0): each token's chosen rows of
 * the latent cache gathered in position order, and the attention kernel run over them for
 * every head at once. */
static void attend_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    dsa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t K = e->idx_topk;
    uint8_t *rows = s->idx_rows + (uint64_t)part * K * s->kv_row_bytes;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n)
            break;
        const uint32_t t = j->n - 1 - it, nsel = s->idx_nsel[t];
        if (!nsel)
            continue;
        const int32_t *sel = s->idx_sel + (uint64_t)t * K;
        for (uint32_t i = 0; i < nsel; i++)
            memcpy(rows + (uint64_t)i * s->kv_row_bytes,
                   (const uint8_t *)s->k_cache + gm_kv_at(s, j->l, 0, (uint32_t)sel[i]), s->kv_row_bytes);
        /* MLA: one kv head, every query head in its group; the latent row is also the value */
        gm_attn_gathered(s, part, (uint64_t)t * e->n_head, e->n_head, rows, rows, nsel, e->layers[j->l].sinks);
    }
}

void gm_dsa_attend(gm_fwd *s, uint32_t l, uint32_t n)
{
    /* the tokens that see no more than idx_topk positions come first in the chunk: the dense
     * attention, as gm_mla_block runs it */
    uint32_t n_dense = 0;
    while (n_dense < n && s->idx_nsel[n_dense] == 0)
        n_dense++;
    if (n_dense)
        gm_attn_run(s, l, 0, n_dense);
    if (n_dense == n)
        return;
    dsa_job job = {.s = s, .l = l, .n = n};
    atomic_init(&job.next, 0);
    gm_pool_run(s->e->pool, attend_part, &job, s->e->n_threads);
}
