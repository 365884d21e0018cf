/* MiniMax sparse attention (MiniMax-M3, minimax-m3): each query head group attends the blocks of
 * positions that its indexer head chooses.
 *
 * For the token at position P (llama.cpp's src/models/minimax-m3.cpp, the reference), per kv
 * head h (one indexer head per group of query heads):
 *   q_h  = rope(rms_norm(indexer.q_proj x)_h)      idx_dim values; x the normalised hidden state
 *   k_P  = rope(rms_norm(indexer.k_proj x))        one key a position, kept for the later tokens
 *   score(p) = q_h . k_p  for p <= P;  a block's score: the largest of its positions'
 * with RoPE on the first n_rot dims as the attention's. The idx_local latest blocks (the one that
 * holds P and those before it) are always chosen, then the best-scoring others (ties to the
 * earlier block) up to idx_topk blocks; the group's queries attend the chosen blocks' positions
 * up to P, in position order. While P's blocks are no more than idx_topk the query attends every
 * position: the dense attention. The layers before the first with an indexer (the leading dense
 * blocks) attend densely.
 *
 * The keys are kept as float32 (rounded through IEEE half when the session's cache is f16, as the
 * reference's cache is). Scoring reads every earlier key once per indexer head; the work goes
 * over the pool token by token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/recipe.h"
#include "kernels/quant.h"

typedef struct msa_job {
    gm_fwd *s;
    uint32_t l, n;
    _Atomic uint32_t next;
} msa_job;

/* Blocks that hold the positions up to p. */
static uint32_t blocks_seen(const gm_engine *e, uint32_t p) { return p / e->idx_block + 1; }

/* Per (token, kv head) of the chunk, latest tokens first: the block scores, the choice. */
static void select_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    msa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t H = e->idx_heads, D = e->idx_dim, K = e->idx_topk, B = e->idx_block;
    const float *keys = s->idx_keys + (uint64_t)e->layers[j->l].idx_slot * s->n_ctx * D;
    float *bs = s->idx_score + (uint64_t)part * s->n_ctx;
    int32_t *blk = s->idx_pos + (uint64_t)part * s->n_ctx;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n * H)
            break;
        const uint32_t t = j->n - 1 - it / H, h = it % H, P = s->pos + t, nb = blocks_seen(e, P);
        if (!s->idx_nsel[t])
            continue; /* every block: the dense attention */
        const float *q = s->idx_q + ((uint64_t)t * H + h) * D;
        for (uint32_t b = 0; b < nb; b++) {
            float best = -INFINITY;
            const uint32_t p1 = (b + 1) * B - 1 < P ? (b + 1) * B - 1 : P;
            for (uint32_t p = b * B; p <= p1; p++) {
                const float *k = keys + (uint64_t)p * D;
                float dot = 0.0f;
                for (uint32_t d = 0; d < D; d++)
                    dot += q[d] * k[d];
                best = dot > best ? dot : best;
            }
            bs[b] = b + e->idx_local >= nb ? INFINITY : best; /* the latest blocks come first */
            blk[b] = (int32_t)b;
        }
        gm_top_scores(bs, blk, nb, K);
        int32_t *sel = s->idx_sel + ((uint64_t)t * H + h) * K;
        memcpy(sel, blk, K * sizeof *sel);
        qsort(sel, K, sizeof *sel, gm_cmp_i32);
    }
}

int gm_msa_index(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t H = e->idx_heads, D = e->idx_dim, E = e->n_embd;
    int rc;
    if ((rc = gm_attn_project(s, &w->idx_q, s->xn, E, n, s->idx_q, err)) ||
        (rc = gm_attn_project(s, &w->idx_k, s->xn, E, n, s->idx_knew, err)))
        return rc;
    gm_rms_norm(s->idx_q, w->idx_q_norm, s->idx_q, n * H, D, e->rms_eps);
    gm_rms_norm(s->idx_knew, w->idx_k_norm, s->idx_knew, n, D, e->rms_eps);
    float *keys = s->idx_keys + (uint64_t)w->idx_slot * s->n_ctx * D;
    for (uint32_t t = 0; t < n; t++) {
        for (uint32_t h = 0; h < H; h++)
            gm_attn_rope_vec(s, t, s->idx_q + ((uint64_t)t * H + h) * D);
        float *k = s->idx_knew + (uint64_t)t * D;
        gm_attn_rope_vec(s, t, k);
        float *dst = keys + (uint64_t)(s->pos + t) * D;
        for (uint32_t d = 0; d < D; d++)
            dst[d] = s->kv_type == GM_KV_F16 ? gm_f16_to_f32(gm_f32_to_f16(k[d])) : k[d];
    }
    for (uint32_t t = 0; t < n; t++)
        s->idx_nsel[t] = blocks_seen(e, s->pos + t) <= e->idx_topk ? 0 : e->idx_topk;
    msa_job job = {.s = s, .l = l, .n = n};
    atomic_init(&job.next, 0);
    gm_pool_run(e->pool, select_part, &job, e->n_threads);
    return 0;
}

/* The attention of the chunk's tokens that choose, per (token, kv head): the chosen blocks' K and
 * V rows up to the token's position gathered in position order, the group's query heads run
 * over them. */
static void attend_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    msa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t nkv = e->n_head_kv, group = e->n_head / nkv, K = e->idx_topk, B = e->idx_block;
    const uint64_t rb = s->kv_row_bytes, span = (uint64_t)K * B * rb;
    uint8_t *krows = s->idx_rows + (uint64_t)part * 2 * span, *vrows = krows + span;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n * nkv)
            break;
        const uint32_t t = j->n - 1 - it / nkv, h = it % nkv, P = s->pos + t;
        if (!s->idx_nsel[t])
            continue;
        const int32_t *sel = s->idx_sel + ((uint64_t)t * nkv + h) * K;
        uint32_t cnt = 0;
        for (uint32_t i = 0; i < K; i++)
            for (uint32_t p = (uint32_t)sel[i] * B; p < ((uint32_t)sel[i] + 1) * B && p <= P; p++, cnt++) {
                const uint64_t at = gm_kv_at(s, j->l, h, p);
                memcpy(krows + cnt * rb, (const uint8_t *)s->k_cache + at, rb);
                memcpy(vrows + cnt * rb, (const uint8_t *)s->v_cache + at, rb);
            }
        gm_attn_gathered(s, part, (uint64_t)t * e->n_head + (uint64_t)h * group, group, krows, vrows, cnt,
                         e->layers[j->l].sinks);
    }
}

void gm_msa_attend(gm_fwd *s, uint32_t l, uint32_t n)
{
    /* the tokens whose blocks are no more than idx_topk come first: the dense attention */
    uint32_t n_dense = 0;
    while (n_dense < n && blocks_seen(s->e, s->pos + n_dense) <= s->e->idx_topk)
        n_dense++;
    if (n_dense)
        gm_attn_run(s, l, 0, n_dense);
    if (n_dense == n)
        return;
    msa_job job = {.s = s, .l = l, .n = n};
    atomic_init(&job.next, 0);
    gm_pool_run(s->e->pool, attend_part, &job, s->e->n_threads);
}
