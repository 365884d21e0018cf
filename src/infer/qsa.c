/* QSA, qwen4exp's block-sparse attention: each query attends the incomplete tail of positions
 * and the whole blocks of compress_ratio (r) positions that its indexer scores best.
 *
 * For the token at position P of a layer with a ratio r (llama.cpp's src/models/qwen4exp.cpp,
 * build_qsa_top_k, and llama_memory_hybrid_idx::set_input_qsa, the reference):
 *   k_p     = indexer.k_proj x_p                       kept raw, one a position
 *   K_b     = rope(rms_norm(mean of k_p over block b) * k_norm, position b r)   a whole block
 *   q_h     = rope(rms_norm(indexer.q_proj x)_h * q_norm, position P)           per indexer head
 *   score_b = sum over heads of relu(q_h . K_b)
 * The positions from tail_start = (P + 1) / r * r to P (the incomplete block) always come first;
 * the positions of the whole blocks before it follow by their block's score; the query attends
 * the first top_k + r - 1 of them (all of them while they are no more: the dense attention), in
 * position order. Among equal scores (a relu gives many zeros) the choice is the reference's:
 * its CPU top-k is libstdc++'s std::partial_sort over the positions in order, whose heap this
 * file replays (select_cells), so that the same positions are chosen whenever the scores compare
 * the same.
 *
 * The raw keys are kept as float32, rounded through IEEE half when the session's cache is f16 (as
 * the reference's indexer cache is); a block's key is made once, when the chunk that completes it
 * runs. The work goes over the pool token by token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/recipe.h"
#include "kernels/quant.h"

typedef struct qsa_job {
    gm_fwd *s;
    uint32_t l, n;
    _Atomic uint32_t next;
} qsa_job;

static uint32_t ratio(const gm_fwd *s, uint32_t l) { return s->e->desc.layers[l].compress_ratio; }

/* Positions a query of layer l attends at most. */
static uint32_t width(const gm_fwd *s, uint32_t l) { return s->e->qsa_topk + ratio(s, l) - 1; }

/* Layer l's raw keys [n_ctx][idx_dim], then its block keys [n_ctx][idx_dim] (block b at row b). */
static float *raw_keys(const gm_fwd *s, uint32_t l)
{
    return s->idx_keys + (uint64_t)s->e->layers[l].idx_slot * 2 * s->n_ctx * s->e->idx_dim;
}

/* The rotation of v's first n_rot dims at position p, as the session's tables would give it. */
static void rope_at(const gm_engine *e, uint32_t p, float *v)
{
    float c[GM_MAX_HEAD_DIM / 2], sn[GM_MAX_HEAD_DIM / 2];
    gm_rope_angles(e, p, c, sn);
    gm_rope_rotate(e, c, sn, v);
}

/* The value of position j for the query's choice: the tail first, then its block's score. */
typedef struct cells {
    const float *block_score;
    uint32_t r, tail_start;
} cells;

static float cell_value(const cells *c, int32_t j)
{
    return (uint32_t)j >= c->tail_start ? INFINITY : c->block_score[(uint32_t)j / c->r];
}

/* libstdc++'s heap steps with the comparison "a's value is larger than b's" (a max-heap on that
 * order keeps the smallest value on top). */
static bool before(const cells *c, int32_t a, int32_t b) { return cell_value(c, a) > cell_value(c, b); }

static void push_heap(const cells *c, int32_t *h, int64_t hole, int64_t top, int32_t value)
{
    int64_t parent = (hole - 1) / 2;
    while (hole > top && before(c, h[parent], value)) {
        h[hole] = h[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    h[hole] = value;
}

static void adjust_heap(const cells *c, int32_t *h, int64_t hole, int64_t len, int32_t value)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (before(c, h[child], h[child - 1]))
            child--;
        h[hole] = h[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    push_heap(c, h, hole, top, value);
}

/* The k positions of 0..n_pos - 1 that std::partial_sort would put first, into h[0..k). */
static void select_cells(const cells *c, int32_t *h, uint32_t n_pos, uint32_t k)
{
    for (uint32_t j = 0; j < k; j++)
        h[j] = (int32_t)j;
    if (k >= 2)
        for (int64_t parent = ((int64_t)k - 2) / 2;; parent--) {
            adjust_heap(c, h, parent, k, h[parent]);
            if (parent == 0)
                break;
        }
    for (uint32_t j = k; j < n_pos; j++)
        if (before(c, (int32_t)j, h[0]))
            adjust_heap(c, h, 0, k, (int32_t)j); /* the top leaves, j takes its place */
}

/* Per token of the chunk that chooses (latest first): the block scores, the choice. */
static void select_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    qsa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t H = e->idx_heads, D = e->idx_dim, r = ratio(s, j->l), W = width(s, j->l);
    const float *blocks = raw_keys(s, j->l) + (uint64_t)s->n_ctx * D;
    float *bs = s->idx_score + (uint64_t)part * s->n_ctx;
    int32_t *heap = s->idx_pos + (uint64_t)part * s->n_ctx;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n)
            break;
        const uint32_t t = j->n - 1 - it, P = s->pos + t;
        if (!s->idx_nsel[t])
            continue; /* every position: the dense attention */
        const cells c = {.block_score = bs, .r = r, .tail_start = (P + 1) / r * r};
        const uint32_t nb = c.tail_start / r;
        for (uint32_t b = 0; b < nb; b++) {
            const float *kb = blocks + (uint64_t)b * D;
            float sum = 0.0f;
            for (uint32_t h = 0; h < H; h++) {
                const float *q = s->idx_q + ((uint64_t)t * H + h) * D;
                float dot = 0.0f;
                for (uint32_t d = 0; d < D; d++)
                    dot += q[d] * kb[d];
                sum += dot > 0.0f ? dot : 0.0f;
            }
            bs[b] = sum;
        }
        select_cells(&c, heap, P + 1, W);
        int32_t *sel = s->idx_sel + (uint64_t)t * e->idx_topk;
        memcpy(sel, heap, W * sizeof *sel);
        qsort(sel, W, sizeof *sel, gm_cmp_i32);
    }
}

int gm_qsa_index(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t H = e->idx_heads, D = e->idx_dim, E = e->n_embd, r = ratio(s, l);
    int rc;
    if ((rc = gm_attn_project(s, &w->idx_q, s->xn, E, n, s->idx_q, err)) ||
        (rc = gm_attn_project(s, &w->idx_k, s->xn, E, n, s->idx_knew, err)))
        return rc;
    gm_rms_norm(s->idx_q, w->idx_q_norm, s->idx_q, n * H, D, e->rms_eps);
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t h = 0; h < H; h++)
            gm_attn_rope_vec(s, t, s->idx_q + ((uint64_t)t * H + h) * D);
    float *raw = raw_keys(s, l), *blocks = raw + (uint64_t)s->n_ctx * D;
    for (uint32_t t = 0; t < n; t++) {
        const float *k = s->idx_knew + (uint64_t)t * D;
        float *dst = raw + (uint64_t)(s->pos + t) * D;
        for (uint32_t d = 0; d < D; d++)
            dst[d] = s->kv_type == GM_KV_F16 ? gm_f16_to_f32(gm_f32_to_f16(k[d])) : k[d];
    }
    /* the blocks this chunk completes: their mean key, normalised and rotated at their start */
    for (uint32_t b = s->pos / r; (b + 1) * r <= s->pos + n; b++) {
        float *kb = blocks + (uint64_t)b * D;
        memcpy(kb, raw + (uint64_t)b * r * D, D * sizeof(float));
        for (uint32_t i = 1; i < r; i++)
            for (uint32_t d = 0; d < D; d++)
                kb[d] += raw[((uint64_t)b * r + i) * D + d];
        for (uint32_t d = 0; d < D; d++)
            kb[d] *= 1.0f / (float)r;
        gm_rms_norm(kb, w->idx_k_norm, kb, 1, D, e->rms_eps);
        rope_at(e, b * r, kb);
    }
    const uint32_t W = width(s, l);
    for (uint32_t t = 0; t < n; t++)
        s->idx_nsel[t] = s->pos + t + 1 <= W ? 0 : W;
    qsa_job job = {.s = s, .l = l, .n = n};
    atomic_init(&job.next, 0);
    gm_pool_run(e->pool, select_part, &job, e->n_threads);
    return 0;
}

/* Per (token, kv head) of the tokens that choose: the chosen positions' K and V rows gathered in
 * position order, the group's query heads run over them. */
static void attend_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    qsa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const uint32_t nkv = e->n_head_kv, group = e->n_head / nkv;
    const uint64_t rb = s->kv_row_bytes, span = (uint64_t)e->idx_topk * rb;
    uint8_t *krows = s->idx_rows + (uint64_t)part * 2 * span, *vrows = krows + span;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n * nkv)
            break;
        const uint32_t t = j->n - 1 - it / nkv, h = it % nkv, cnt = s->idx_nsel[t];
        if (!cnt)
            continue;
        const int32_t *sel = s->idx_sel + (uint64_t)t * e->idx_topk;
        for (uint32_t i = 0; i < cnt; i++) {
            const uint64_t at = gm_kv_at(s, j->l, h, (uint32_t)sel[i]);
            memcpy(krows + i * rb, (const uint8_t *)s->k_cache + at, rb);
            memcpy(vrows + i * rb, (const uint8_t *)s->v_cache + at, rb);
        }
        gm_attn_gathered(s, part, (uint64_t)t * e->n_head + (uint64_t)h * group, group, krows, vrows, cnt,
                         e->layers[j->l].sinks);
    }
}

void gm_qsa_attend(gm_fwd *s, uint32_t l, uint32_t n)
{
    /* the tokens that see no more positions than they may attend come first: the dense attention */
    uint32_t n_dense = 0;
    while (n_dense < n && !s->idx_nsel[n_dense])
        n_dense++;
    if (n_dense)
        gm_attn_run(s, l, 0, n_dense);
    if (n_dense == n)
        return;
    qsa_job job = {.s = s, .l = l, .n = n};
    atomic_init(&job.next, 0);
    gm_pool_run(s->e->pool, attend_part, &job, s->e->n_threads);
}
