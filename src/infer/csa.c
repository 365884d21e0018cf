/* DeepSeek-V4's attention (llama.cpp's src/models/deepseek4.cpp, build_attention_impl, and
 * src/llama-kv-cache-dsv4.cpp, which plans its compressed rows: the reference).
 *
 * Per token at position p, from the normalised block input x:
 *   q   = wq_b rms_norm(wq_a x) * q_a_norm                n_head heads of head_dim
 *   q_h = rms_norm(q_h) (no weight), its last n_rot dims rotated (adjacent pairs)
 *   kv  = rms_norm(wkv x) * kv_norm, its last n_rot dims rotated          one row
 * and kv is both the key and the value of every head: the cache is MLA's one row a position
 * (head_dim = kv_lora + n_rot, infer/mla.c's layout with the whole head as the latent), attended
 * with a sink logit per head, a sliding window of the raw rows and scale 1/sqrt(head_dim). The
 * heads' results, whose last n_rot dims carry the keys' rotation, are rotated back by their own
 * position (ggml's rope_ext_back), then leave through a grouped low-rank output: group g of
 * attention.output_group_count takes its n_head / groups heads' results (consecutive) through its
 * own block of output_lora_rank rows of wo_a, and wo_b takes the groups' rows side by side.
 *
 * A layer with attention.compress_ratios r > 0 rotates by its own RoPE (compress_rope_freq_base,
 * the file's YaRN, magnitude 1) and also attends compressed rows, one per window of r positions:
 *   per position: kv_c = comp_wkv x, sc = comp_wgate x + ape[p % r]     (width w each)
 *   window b (positions b r .. b r + r - 1, complete once p = b r + r - 1 is in):
 *     HCA (r = 128, w = head_dim): per channel d, softmax over the window's r positions of sc[.][d]
 *         weights the kv_c[.][d];
 *     CSA (r = 4, w = 2 head_dim): the same over 2 r positions: channels [0, head_dim) of window
 *         b - 1's positions (none for b = 0) and channels [head_dim, 2 head_dim) of window b's;
 *   then rms_norm * comp_norm and the rotation of position b r: the row, both key and value.
 * A query at p sees the rows of the windows complete by p (b < (p + 1) / r): HCA all of them, CSA
 * those its lightning indexer scores best (attention.indexer.top_k of them; all when fewer):
 *   keys  = CSA's compressor again with the indexer's tensors (width 2 idx_dim, idx_comp_norm,
 *           rotated the same way at b r)
 *   query = indexer.attn_q_b rms_norm(wq_a x) * q_a_norm, idx_heads heads of idx_dim, rotated
 *   score_b = sum_h relu(query_h . key_b) * (indexer.proj x)_h / sqrt(idx_dim idx_heads)
 * (the reference rotates the indexer's queries and keys by one Hadamard matrix, which leaves the
 * products as they are). The session keeps each compressed layer's compressor rows for the last
 * 2 r positions and a step (a ring), its rows and CSA's indexer keys for the whole context. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "infer/recipe.h"
#include "kernels/quant.h"

typedef struct csa_slot {
    uint32_t ratio, width; /* width: the compressor's values a position (2 head_dim CSA, head_dim HCA) */
    uint32_t cap;          /* ring positions: position p in row p % cap */
    float *st_kv, *st_sc;  /* [cap][width] */
    uint8_t *rows;         /* [n_ctx / ratio + 1][kv_row_bytes]: the compressed rows, as the cache keeps rows */
    float *lst_kv, *lst_sc; /* CSA: [cap][2 idx_dim], the indexer's compressor */
    float *lkeys;          /* CSA: [n_ctx / 4 + 1][idx_dim], the indexer's keys */
} csa_slot;

struct gm_csa {
    uint32_t n_slots;
    csa_slot *slot;
    uint32_t max_comp;   /* compressed rows one query may attend */
    uint32_t max_rows;   /* rows one query attends: the window's and those */
    uint32_t max_blocks; /* the most compressed rows a layer keeps for the context (a query's candidates) */
    /* a chunk's compressor inputs [T][2 head_dim] (kv, score) and the indexer's [T][2 idx_dim];
     * the indexer's queries [T][idx_heads][idx_dim] and weights [T][idx_heads]; the chunk's
     * rotation [T][n_rot / 2] (cos, sin) */
    float *c_kv, *c_sc, *l_kv, *l_sc, *lq, *lw, *cos, *sin;
    /* per pool part: a query's gathered rows, the indexer's scores and candidates */
    uint8_t *rows;
    float *score;
    int32_t *cand;
};

/* The ring a compressed layer keeps: the compressor rows of two windows and an attention step. */
static uint32_t ring_cap(uint32_t ratio) { return 2 * ratio + GM_WINDOW_STEP; }

void gm_csa_free(struct gm_csa *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; c->slot && i < c->n_slots; i++) {
        csa_slot *sl = &c->slot[i];
        free(sl->st_kv);
        free(sl->st_sc);
        free(sl->rows);
        free(sl->lst_kv);
        free(sl->lst_sc);
        free(sl->lkeys);
    }
    free(c->slot);
    free(c->c_kv);
    free(c->c_sc);
    free(c->l_kv);
    free(c->l_sc);
    free(c->lq);
    free(c->lw);
    free(c->cos);
    free(c->sin);
    free(c->rows);
    free(c->score);
    free(c->cand);
    free(c);
}

int gm_csa_create(gm_fwd *s, gm_err *err)
{
    const gm_engine *e = s->e;
    s->csa = NULL;
    if (!e->n_comp)
        return 0;
    struct gm_csa *c = calloc(1, sizeof *c);
    if (!c)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    const uint64_t T = s->max_chunk, hd = e->head_dim, D = e->idx_dim, H = e->idx_heads, nt = (uint64_t)e->n_threads;
    c->n_slots = e->n_comp;
    c->slot = calloc(c->n_slots, sizeof *c->slot);
    bool ok = c->slot != NULL;
    uint32_t window = 0, most = 0;
    for (uint32_t l = 0; ok && l < e->n_layer; l++) {
        const gm_layer_w *w = &e->layers[l];
        window = w->window > window ? w->window : window;
        if (w->comp_slot < 0)
            continue;
        csa_slot *sl = &c->slot[w->comp_slot];
        const uint64_t r = w->comp_ratio, blocks = s->n_ctx / r + 1;
        sl->ratio = (uint32_t)r;
        sl->width = (uint32_t)((r == 4 ? 2 : 1) * hd);
        sl->cap = ring_cap(sl->ratio);
        sl->st_kv = calloc((uint64_t)sl->cap * sl->width, sizeof(float));
        sl->st_sc = calloc((uint64_t)sl->cap * sl->width, sizeof(float));
        sl->rows = calloc(blocks, s->kv_row_bytes);
        ok = sl->st_kv && sl->st_sc && sl->rows;
        const uint64_t visible = r == 4 ? (blocks < e->csa_topk ? blocks : e->csa_topk) : blocks;
        most = visible > most ? (uint32_t)visible : most;
        c->max_blocks = blocks > c->max_blocks ? (uint32_t)blocks : c->max_blocks;
        if (ok && r == 4) {
            sl->lst_kv = calloc((uint64_t)sl->cap * 2 * D, sizeof(float));
            sl->lst_sc = calloc((uint64_t)sl->cap * 2 * D, sizeof(float));
            sl->lkeys = calloc(blocks * D, sizeof(float));
            ok = sl->lst_kv && sl->lst_sc && sl->lkeys;
        }
    }
    c->max_comp = most;
    c->max_rows = window + most;
    const uint64_t half = e->n_rot / 2 + 1, nb = c->max_blocks ? c->max_blocks : 1;
    if (ok) {
        c->c_kv = malloc(T * 2 * hd * sizeof(float));
        c->c_sc = malloc(T * 2 * hd * sizeof(float));
        c->l_kv = malloc(T * 2 * (D ? D : 1) * sizeof(float));
        c->l_sc = malloc(T * 2 * (D ? D : 1) * sizeof(float));
        c->lq = malloc(T * (H * D > 0 ? H * D : 1) * sizeof(float));
        c->lw = malloc(T * (H ? H : 1) * sizeof(float));
        c->cos = malloc(T * half * sizeof(float));
        c->sin = malloc(T * half * sizeof(float));
        c->rows = malloc(nt * c->max_rows * s->kv_row_bytes);
        c->score = malloc(nt * nb * sizeof(float));
        c->cand = malloc(nt * nb * sizeof(int32_t));
        ok = c->c_kv && c->c_sc && c->l_kv && c->l_sc && c->lq && c->lw && c->cos && c->sin && c->rows && c->score &&
             c->cand;
    }
    if (!ok) {
        gm_csa_free(c);
        return gm_err_set(err, GM_ENOMEM, "out of memory for the compressed attention of a session of %u tokens",
                          s->n_ctx);
    }
    s->csa = c;
    return 0;
}

uint64_t gm_csa_state_bytes(const gm_fwd *s)
{
    const struct gm_csa *c = s->csa;
    uint64_t b = 0;
    for (uint32_t i = 0; c && i < c->n_slots; i++) {
        const csa_slot *sl = &c->slot[i];
        b += 2ull * sl->cap * sl->width * sizeof(float);
        if (sl->lst_kv)
            b += 2ull * sl->cap * 2 * s->e->idx_dim * sizeof(float);
    }
    return b;
}

/* The rings (the compressed rows and indexer keys are indexed by window and stay where they are). */
void gm_csa_state_copy(gm_fwd *s, uint8_t *buf, bool save)
{
    struct gm_csa *c = s->csa;
    uint64_t at = 0;
    for (uint32_t i = 0; c && i < c->n_slots; i++) {
        csa_slot *sl = &c->slot[i];
        float *parts[4] = {sl->st_kv, sl->st_sc, sl->lst_kv, sl->lst_sc};
        const uint64_t bytes[4] = {(uint64_t)sl->cap * sl->width * sizeof(float),
                                   (uint64_t)sl->cap * sl->width * sizeof(float),
                                   (uint64_t)sl->cap * 2 * s->e->idx_dim * sizeof(float),
                                   (uint64_t)sl->cap * 2 * s->e->idx_dim * sizeof(float)};
        for (int k = 0; k < 4; k++) {
            if (!parts[k])
                continue;
            if (save)
                memcpy(buf + at, parts[k], bytes[k]);
            else
                memcpy(parts[k], buf + at, bytes[k]);
            at += bytes[k];
        }
    }
}

/* A rewind to pos needs the compressor rows of positions from two windows before pos's on (the
 * ring keeps the cap positions before the highest written, s->hw). */
bool gm_csa_can_rewind(const gm_fwd *s, uint32_t pos)
{
    const struct gm_csa *c = s->csa;
    for (uint32_t i = 0; c && i < c->n_slots; i++) {
        const csa_slot *sl = &c->slot[i];
        const uint64_t oldest = pos / sl->ratio * sl->ratio; /* the window pos is in */
        const uint64_t need = oldest >= sl->ratio ? oldest - sl->ratio : 0;
        if (s->hw > need + sl->cap)
            return false;
    }
    return true;
}

/* ---- rotation ---- */

/* The rotation of v's n_rot dims by (c, sn), or (back) its inverse. */
static void rotate(const gm_engine *e, const float *c, const float *sn, float *v, bool back)
{
    if (!back) {
        gm_rope_rotate(e, c, sn, v);
        return;
    }
    const uint32_t half = e->n_rot / 2;
    for (uint32_t i = 0; i < half; i++) {
        const uint32_t a = e->ops.rope == GM_ROPE_NEOX ? i : 2 * i;
        const uint32_t b = e->ops.rope == GM_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] + x1 * sn[i];
        v[b] = x1 * c[i] - x0 * sn[i];
    }
}

/* The compressed layers' rotation at position pos into c, sn (n_rot / 2 each), magnitude 1. */
static void comp_angles(const gm_engine *e, uint64_t pos, float *c, float *sn)
{
    gm_rope_angles_of(e->comp_rope_inv, 1.0f, e->n_rot, pos, c, sn);
}

/* Token t's rotation in layer w: the session's tables, or a compressed layer's (in s->csa). */
static void angles_of(const gm_fwd *s, const gm_layer_w *w, uint32_t t, const float **c, const float **sn)
{
    const uint64_t half = s->e->n_rot / 2;
    if (w->comp_ratio) {
        *c = s->csa->cos + t * half;
        *sn = s->csa->sin + t * half;
    } else {
        *c = s->rope_cos + t * half;
        *sn = s->rope_sin + t * half;
    }
}

/* ---- the compressor ---- */

/* A window's compressed row of width out_w from the ring (kv, sc of width ring_w, cap rows): per
 * channel d, the softmax over the window's positions (with overlap, also the previous window's,
 * reading channels [0, out_w) there and [out_w, 2 out_w) in this one) weighting the values; then
 * rms_norm * norm and the rotation of the window's first position on the last n_rot dims. */
static void compress(const gm_engine *e, const float *kv, const float *sc, uint32_t ring_w, uint32_t cap,
                     uint64_t block, uint32_t r, bool overlap, uint32_t out_w, const float *norm, float *out)
{
    const uint64_t start = block * r;
    for (uint32_t d = 0; d < out_w; d++) {
        float mx = -INFINITY;
        const uint32_t off = overlap ? out_w : 0;
        for (int pass = 0; pass < 2; pass++) { /* 0: the maximum, 1: the weighted sum */
            double sum = 0, acc = 0;
            for (int half = overlap ? 0 : 1; half < 2; half++) {
                if (half == 0 && block == 0)
                    continue; /* no window before the first: the reference's -inf scores */
                const uint64_t p0 = half == 0 ? start - r : start;
                const uint32_t ch = half == 0 ? d : off + d;
                for (uint32_t j = 0; j < r; j++) {
                    const uint64_t row = (p0 + j) % cap;
                    const float v = sc[row * ring_w + ch];
                    if (pass == 0) {
                        mx = v > mx ? v : mx;
                    } else {
                        const float wgt = expf(v - mx);
                        sum += wgt;
                        acc += (double)wgt * kv[row * ring_w + ch];
                    }
                }
            }
            if (pass == 1)
                out[d] = (float)(acc / sum);
        }
    }
    gm_rms_norm(out, norm, out, 1, out_w, e->rms_eps);
    float c[GM_MAX_HEAD_DIM / 2], sn[GM_MAX_HEAD_DIM / 2];
    comp_angles(e, start, c, sn);
    rotate(e, c, sn, out + out_w - e->n_rot, false);
}

/* The chunk's tokens t0..t1 into layer l's rings, then the rows of the windows they complete. */
static void compress_step(gm_fwd *s, uint32_t l, uint32_t t0, uint32_t t1)
{
    const gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    struct gm_csa *c = s->csa;
    csa_slot *sl = &c->slot[w->comp_slot];
    const uint32_t r = sl->ratio, W = sl->width, D = e->idx_dim, hd = e->head_dim;
    const bool csa = r == 4;
    for (uint32_t t = t0; t < t1; t++) {
        const uint64_t row = (uint64_t)(s->pos + t) % sl->cap;
        memcpy(sl->st_kv + row * W, c->c_kv + (uint64_t)t * W, W * sizeof(float));
        memcpy(sl->st_sc + row * W, c->c_sc + (uint64_t)t * W, W * sizeof(float));
        if (csa) {
            memcpy(sl->lst_kv + row * 2 * D, c->l_kv + (uint64_t)t * 2 * D, 2ull * D * sizeof(float));
            memcpy(sl->lst_sc + row * 2 * D, c->l_sc + (uint64_t)t * 2 * D, 2ull * D * sizeof(float));
        }
    }
    float out[GM_MAX_HEAD_DIM];
    for (uint32_t t = t0; t < t1; t++) {
        const uint64_t p = (uint64_t)s->pos + t;
        if ((p + 1) % r != 0)
            continue;
        const uint64_t b = p / r;
        compress(e, sl->st_kv, sl->st_sc, W, sl->cap, b, r, csa, hd, w->comp_norm, out);
        gm_attn_cache_row(s, out, sl->rows + b * s->kv_row_bytes);
        if (csa) {
            float *k = sl->lkeys + b * D;
            compress(e, sl->lst_kv, sl->lst_sc, 2 * D, sl->cap, b, r, true, D, w->idx_comp_norm, k);
            if (s->kv_type == GM_KV_F16) /* the reference keeps them in an f16 cache */
                for (uint32_t d = 0; d < D; d++)
                    k[d] = gm_f16_to_f32(gm_f32_to_f16(k[d]));
        }
    }
}

/* ---- attention over the window and the compressed rows ---- */

typedef struct csa_job {
    gm_fwd *s;
    uint32_t l, t0, n;
    _Atomic uint32_t next;
} csa_job;

/* For each token: its window's raw rows and the compressed rows it sees (CSA: the indexer's
 * best), gathered, and the attention kernel over them for every head at once. */
static void attend_part(void *ctx, int part, int n_parts)
{
    (void)n_parts;
    csa_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[j->l];
    struct gm_csa *c = s->csa;
    const csa_slot *sl = &c->slot[w->comp_slot];
    const uint64_t rb = s->kv_row_bytes, nb = c->max_blocks ? c->max_blocks : 1;
    const uint32_t H = e->idx_heads, D = e->idx_dim;
    uint8_t *rows = c->rows + (uint64_t)part * c->max_rows * rb;
    float *score = c->score + (uint64_t)part * nb;
    int32_t *cand = c->cand + (uint64_t)part * nb;
    for (;;) {
        const uint32_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n)
            break;
        const uint32_t t = j->t0 + j->n - 1 - it;
        const uint64_t p = (uint64_t)s->pos + t;
        uint32_t cnt = 0;
        for (uint64_t q = p + 1 > w->window ? p + 1 - w->window : 0; q <= p; q++)
            memcpy(rows + (uint64_t)cnt++ * rb, (const uint8_t *)s->k_cache + gm_kv_at(s, j->l, 0, (uint32_t)q), rb);
        uint32_t nv = (uint32_t)((p + 1) / sl->ratio);
        for (uint32_t b = 0; b < nv; b++)
            cand[b] = (int32_t)b;
        if (sl->ratio == 4 && nv > e->csa_topk) {
            const float *qt = c->lq + (uint64_t)t * H * D, *wt = c->lw + (uint64_t)t * H;
            for (uint32_t b = 0; b < nv; b++)
                score[b] = gm_indexer_score(qt, wt, sl->lkeys + (uint64_t)b * D, H, D);
            gm_top_scores(score, cand, nv, e->csa_topk);
            nv = e->csa_topk;
            qsort(cand, nv, sizeof *cand, gm_cmp_i32);
        }
        for (uint32_t i = 0; i < nv; i++)
            memcpy(rows + (uint64_t)cnt++ * rb, sl->rows + (uint64_t)cand[i] * rb, rb);
        /* one kv head: every query head of the token, the rows also the values */
        gm_attn_gathered(s, part, (uint64_t)t * e->n_head, e->n_head, rows, rows, cnt, w->sinks);
    }
}

/* ---- the block ---- */

int gm_csa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    struct gm_csa *c = s->csa;
    const uint32_t E = e->n_embd, hd = e->head_dim, nh = e->n_head, nope = hd - e->n_rot;
    const uint64_t qd = (uint64_t)nh * hd, G = e->o_groups, lo = e->o_lora, half = e->n_rot / 2;
    const uint32_t r = w->comp_ratio, H = e->idx_heads, D = e->idx_dim;
    int rc;
    if (r)
        for (uint32_t t = 0; t < n; t++)
            comp_angles(e, (uint64_t)s->pos + t, c->cos + t * half, c->sin + t * half);
    /* the queries, through the query latent (kept in s->mla_in for the indexer) */
    if ((rc = gm_attn_project(s, &w->wq_a, s->xn, E, n, s->mla_in, err)))
        return rc;
    gm_rms_norm(s->mla_in, w->q_a_norm, s->mla_in, n, e->q_lora, e->rms_eps);
    if ((rc = gm_attn_project(s, &w->wq_b, s->mla_in, e->q_lora, n, s->q, err)))
        return rc;
    gm_rms_norm(s->q, NULL, s->q, n * nh, hd, e->rms_eps);
    for (uint32_t t = 0; t < n; t++) {
        const float *cs, *sn;
        angles_of(s, w, t, &cs, &sn);
        for (uint32_t h = 0; h < nh; h++)
            rotate(e, cs, sn, s->q + ((uint64_t)t * nh + h) * hd + nope, false);
    }
    /* the key/value rows */
    if ((rc = gm_attn_project(s, &w->wkv_a, s->xn, E, n, s->mla_kv, err)))
        return rc;
    gm_rms_norm(s->mla_kv, w->kv_a_norm, s->mla_kv, n, hd, e->rms_eps);
    for (uint32_t t = 0; t < n; t++) {
        const float *cs, *sn;
        angles_of(s, w, t, &cs, &sn);
        rotate(e, cs, sn, s->mla_kv + (uint64_t)t * hd + nope, false);
    }
    if (r) {
        /* the compressor's rows; CSA's indexer: its compressor's rows, its rotated queries and
         * their weights */
        const uint64_t W = (uint64_t)(r == 4 ? 2 : 1) * hd;
        if ((rc = gm_attn_project(s, &w->comp_wkv, s->xn, E, n, c->c_kv, err)) ||
            (rc = gm_attn_project(s, &w->comp_wgate, s->xn, E, n, c->c_sc, err)))
            return rc;
        for (uint32_t t = 0; t < n; t++) {
            const float *ape = w->comp_ape + (uint64_t)((s->pos + t) % r) * W;
            for (uint64_t d = 0; d < W; d++)
                c->c_sc[t * W + d] += ape[d];
        }
        if (r == 4) {
            if ((rc = gm_attn_project(s, &w->idx_comp_wkv, s->xn, E, n, c->l_kv, err)) ||
                (rc = gm_attn_project(s, &w->idx_comp_wgate, s->xn, E, n, c->l_sc, err)) ||
                (rc = gm_attn_project(s, &w->idx_q_b, s->mla_in, e->q_lora, n, c->lq, err)) ||
                (rc = gm_attn_project(s, &w->idx_proj, s->xn, E, n, c->lw, err)))
                return rc;
            const float wscale = 1.0f / sqrtf((float)D * (float)H);
            for (uint32_t t = 0; t < n; t++) {
                const float *ape = w->idx_comp_ape + (uint64_t)((s->pos + t) % r) * 2 * D;
                for (uint64_t d = 0; d < 2ull * D; d++)
                    c->l_sc[t * 2ull * D + d] += ape[d];
                for (uint32_t h = 0; h < H; h++) {
                    rotate(e, c->cos + t * half, c->sin + t * half, c->lq + ((uint64_t)t * H + h) * D + D - e->n_rot,
                           false);
                    c->lw[(uint64_t)t * H + h] *= wscale;
                }
            }
        }
    }
    /* into the cache, then the attention: a window's ring holds GM_WINDOW_STEP positions beyond
     * the window, so the chunk goes in steps of that many (as attn.c's) */
    const uint32_t step = w->window || r ? GM_WINDOW_STEP : n;
    for (uint32_t t0 = 0; t0 < n; t0 += step) {
        const uint32_t t1 = n - t0 < step ? n : t0 + step;
        for (uint32_t t = t0; t < t1; t++)
            gm_attn_cache_row(s, s->mla_kv + (uint64_t)t * hd, (uint8_t *)s->k_cache + gm_kv_at(s, l, 0, s->pos + t));
        if (!r) {
            gm_attn_run(s, l, t0, t1 - t0);
            continue;
        }
        compress_step(s, l, t0, t1);
        csa_job job = {.s = s, .l = l, .t0 = t0, .n = t1 - t0};
        atomic_init(&job.next, 0);
        gm_pool_run(e->pool, attend_part, &job, e->n_threads);
    }
    for (uint32_t t = 0; t < n; t++) {
        const float *cs, *sn;
        angles_of(s, w, t, &cs, &sn);
        for (uint32_t h = 0; h < nh; h++)
            rotate(e, cs, sn, s->att + ((uint64_t)t * nh + h) * hd + nope, true);
    }
    /* the grouped low-rank output, then wo_b */
    if ((rc = gm_grouped_project(s, &w->wo_a, (uint32_t)G, lo, s->att, qd, qd / G, qd / G, n, s->mla_v, G * lo, lo,
                                 err)))
        return rc;
    return gm_attn_project(s, &w->wo_b, s->mla_v, G * lo, n, out, err);
}
