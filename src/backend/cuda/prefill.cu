/* A prompt's chunk through whole layers on the device (see cuda.h): the chunk's embeddings and
 * their rotations go up in one copy; each layer then runs on the attention's stream without the
 * host, every step over all the chunk's tokens at once: the residual add and the norm (a block a
 * row), the q, k and v products (mm_kernels.cuh), the heads' biases, norms and rotation and the
 * cache's rows (attn_post, a token a block row), the causal attention over the cache (a block a
 * token and kv head: the group's query heads share each step's keys and values in shared
 * memory), the output product, the residual add and the norm, the router's product, the routing
 * (route_topk, a warp a token), the (token, expert) pairs grouped by expert on the device, the
 * experts' products over their pairs (mm_tc's grouped tiles), the activation, and each token's
 * weighted sum in ascending id order; then the shared expert over every token. The end adds the
 * last block's output, normalises the residual and computes the last token's logits; one copy
 * brings back the residual rows, the last normalised row and the logits. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/attn_kernels.cuh"
#include "backend/cuda/attn_prompt_kernels.cuh"
#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/ffn_kernels.cuh"
#include "backend/cuda/internal.h"
#include "backend/cuda/mm_kernels.cuh"
#include "backend/cuda/prefill_kernels.cuh"
#include "backend/cuda/route_kernels.cuh"

static uint64_t up256(uint64_t b) { return (b + 255) / 256 * 256; }

struct gm_cuda_pf {
    gm_cuda_attn *a;
    cudaStream_t st;
    gm_cuda_dec_shape sh;
    gm_cuda_attn_shape ash;
    uint32_t max_tokens, n, pos, next_layer; /* n tokens at pos; next_layer UINT32_MAX: none begun */
    uint32_t logit_rows;                     /* rows of logits dlogits holds */
    uint64_t max_pairs, max_tiles, row_bytes;
    uint32_t routed;                         /* the layer gm_cuda_pf_route routed; UINT32_MAX: none */
    /* device */
    float *dx, *dxn, *dcs, *dq, *dk, *dv, *datt, *dout, *dlog, *dwt, *dgu, *dh, *drows, *dgate, *dlogits;
    uint16_t *hxn, *hatt, *hh;             /* dxn, datt and dh as half (mm_to_half), for mm_tc */
    int32_t *dids;                         /* [max_tokens][k]: the layer's choices */
    uint32_t *dcnt, *doff, *dpair_tok, *dpair_at, *dn_tiles;
    gm_mm_tile *dtiles;
    gm_cuda_expert *dtable;                /* [n_expert]: gm_cuda_pf_experts's table */
    /* pinned host: the upload [cs | x], the download [x | xn | logits | counts] */
    uint8_t *hbuf;
    uint64_t at_x, at_xn, at_logits, at_cnt, end;
    /* pinned host: the staging copies' buffers (gm_cuda_pf_bounce), made at the first call;
     * sent[i]: recorded after the copies queued from buffer i */
    uint8_t *bounce[GM_CUDA_PF_BOUNCE];
    cudaEvent_t sent[GM_CUDA_PF_BOUNCE];
    uint32_t next_bounce;  /* the buffer the next call hands out */
    bool bounce_failed;    /* the host refused them once: not asked again */
};

/* The most tiles of MM_BN pairs of one expert that pairs (token, expert) pairs make: each expert
 * with pairs has one partial tile at most. */
static uint64_t tiles_bound(uint64_t pairs, uint32_t n_expert)
{
    return pairs / MM_BN + (pairs < n_expert ? pairs : n_expert);
}

static int launched(const char *what, gm_err *err)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, what, err);
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* ---- the products ------------------------------------------------------------------------- */

/* Y = X W^T (see mm_kernels.cuh): grid_y the tiles of X's rows (dense: its rows / MM_BN; grouped:
 * the most tiles the table may hold). Float32 dense weights in float32. */
static int mm(cudaStream_t st, uint32_t type, const gm_mm_args &a, uint32_t grid_y, const char *what, gm_err *err)
{
    if (!grid_y)
        return 0;
    if (type == GM_TYPE_F32 && !a.tiles) {
        const dim3 grid((unsigned)((a.n_rows + MM_F32_TILE - 1) / MM_F32_TILE),
                        (a.n + MM_F32_TILE - 1) / MM_F32_TILE);
        mm_f32<<<grid, MM_F32_THREADS, 0, st>>>(a);
        return launched(what, err);
    }
    if (a.n_cols % MM_BK || a.ldx % 8 || (uintptr_t)a.xh % 16)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: rows of %llu values, %llu apart, for the tensor cores' "
                          "product (%s)", (unsigned long long)a.n_cols, (unsigned long long)a.ldx, what);
    /* tiles of 128 weight rows (X read half as often) where they still make a few waves of blocks;
     * steps of 64 values where the rows have them */
    const bool wide_tiles = (a.n_rows + 127) / 128 * grid_y >= 256, long_steps = a.n_cols % 64 == 0;
    const unsigned bm = wide_tiles ? 128 : 64;
    const dim3 grid((unsigned)((a.n_rows + bm - 1) / bm), grid_y, a.n_mats ? a.n_mats : 1);
    cudaError_t e = cudaSuccess;
    const bool ok = gm_with_decoder(type, [&](auto d) {
        using D = decltype(d);
        bool wide = mm_wide_ok<D>(a.w, a.row_bytes);
        for (uint32_t i = 0; i < a.n_mats; i++)
            wide = wide && mm_wide_ok<D>(a.mat_w[i], a.row_bytes);
        auto go = [&](auto bm_c, auto bk_c) {
            constexpr unsigned BM = decltype(bm_c)::value, BK = decltype(bk_c)::value;
            constexpr size_t smem = mm_tc_smem<BM, BK>();
            auto k = wide ? mm_tc<D, true, BM, BK> : mm_tc<D, false, BM, BK>;
            if (smem > 48 * 1024)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (e == cudaSuccess)
                k<<<grid, 2 * BM, smem, st>>>(a);
        };
        using c64 = std::integral_constant<unsigned, 64>;
        using c128 = std::integral_constant<unsigned, 128>;
        using c32 = std::integral_constant<unsigned, 32>;
        if (wide_tiles)
            long_steps ? go(c128{}, c64{}) : go(c128{}, c32{});
        else
            long_steps ? go(c64{}, c64{}) : go(c64{}, c32{});
    });
    if (e != cudaSuccess)
        return gm_cuda_fail(e, what, err);
    if (!ok)
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA prefill: no product for type %u (%s)", type, what);
    return launched(what, err);
}

/* A product's arguments without its weights: rows of n_cols values of type (their bytes), X's rows
 * ldx values apart (as float in x, as half in xh), Y's ldy. */
static int mm_args(uint32_t type, uint64_t n_rows, uint64_t n_cols, const float *x, const uint16_t *xh,
                   uint64_t ldx, float *y, uint64_t ldy, gm_mm_args *a, gm_err *err)
{
    *a = gm_mm_args{};
    a->n_rows = n_rows;
    a->n_cols = n_cols;
    a->x = x;
    a->xh = xh;
    a->ldx = ldx;
    a->y = y;
    a->ldy = ldy;
    return gm_type_row_bytes(type, n_cols, &a->row_bytes, err);
}

/* Y (n rows, ldy apart) = X (n rows of m's columns, ldx apart) m^T + bias. */
static int mm_rows(cudaStream_t st, const gm_cuda_mat *m, const float *x, const uint16_t *xh, uint64_t ldx,
                   float *y, uint64_t ldy, uint32_t n, const float *bias, const char *what, gm_err *err)
{
    gm_mm_args a;
    int rc = mm_args(m->type, m->n_rows, m->n_cols, x, xh, ldx, y, ldy, &a, err);
    if (rc)
        return rc;
    a.w = (const uint8_t *)m->data;
    a.n = n;
    a.bias = bias;
    return mm(st, m->type, a, (n + MM_BN - 1) / MM_BN, what, err);
}

/* The same over the chunk's n rows. */
static int mm_dense(gm_cuda_pf *p, const gm_cuda_mat *m, const float *x, const uint16_t *xh, uint64_t ldx, float *y,
                    uint64_t ldy, const float *bias, const char *what, gm_err *err)
{
    return mm_rows(p->st, m, x, xh, ldx, y, ldy, p->n, bias, what, err);
}

/* The grouped product of matrix which (0 gate, 1 up, 2 down) of the experts in table over the
 * layer's tiles: pair i's row of X at x[xrow ? xrow[i] : i], its output row i of y. */
static int mm_experts(gm_cuda_pf *p, const gm_cuda_expert *table, uint32_t which, uint32_t type, uint64_t n_rows,
                      uint64_t n_cols, const float *x, const uint16_t *xh, uint64_t ldx, const uint32_t *xrow,
                      float *y, uint64_t ldy, const char *what, gm_err *err)
{
    gm_mm_args a;
    int rc = mm_args(type, n_rows, n_cols, x, xh, ldx, y, ldy, &a, err);
    if (rc)
        return rc;
    a.experts = table;
    a.which = which;
    a.tiles = p->dtiles;
    a.n_tiles = p->dn_tiles;
    a.xrow = xrow;
    return mm(p->st, type, a, (uint32_t)tiles_bound((uint64_t)p->n * p->sh.k, p->sh.n_expert), what, err);
}

/* ---- the chunk ---------------------------------------------------------------------------- */

extern "C" void gm_cuda_pf_free(gm_cuda_pf *p)
{
    if (!p)
        return;
    if (p->st)
        cudaStreamSynchronize(p->st);
    void *dev[] = {p->dx, p->dxn, p->dcs, p->dq, p->dk, p->dv, p->datt, p->dout, p->dlog, p->dwt, p->dgu, p->dh,
                   p->hxn, p->hatt, p->hh, p->drows, p->dgate, p->dlogits, p->dids, p->dcnt, p->doff,
                   p->dpair_tok, p->dpair_at, p->dn_tiles, p->dtiles, p->dtable};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    cudaFreeHost(p->hbuf);
    for (int i = 0; i < GM_CUDA_PF_BOUNCE; i++) {
        cudaFreeHost(p->bounce[i]);
        if (p->sent[i])
            cudaEventDestroy(p->sent[i]);
    }
    free(p);
}

extern "C" bool gm_cuda_pf_supports(const gm_cuda_attn_shape *sh, const char **why)
{
    const uint32_t group = sh->n_head_kv ? sh->n_head / sh->n_head_kv : 0;
    if (!attn_prompt_for(sh->head_dim) || !group || group > PF_MAX_GROUP)
        *why = "a head dim or a group of query heads the prompt's attention does not take (more than 32 heads to "
               "a kv head)";
    else
        return true;
    return false;
}

extern "C" int gm_cuda_pf_create(gm_cuda_pf **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, uint32_t max_tokens,
                                 gm_err *err)
{
    *out = NULL;
    const gm_cuda_attn_shape *ash = gm_cuda_attn_shape_of(a);
    const char *why = NULL;
    if (!gm_cuda_pf_supports(ash, &why))
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA prefill: %s", why);
    if (!max_tokens || !sh->n_layer || !sh->n_expert || sh->n_expert > GM_ROUTE_MAX || !sh->k || sh->k > sh->n_expert ||
        sh->k > GM_COMBINE_MAX_K ||
        !sh->max_ff || sh->max_ff % 32 || ash->n_embd > GM_NORM_PER * 1024 || ash->n_embd % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: %u tokens, %u layers, %u of %u experts, experts of %llu, a "
                          "width of %u", max_tokens, sh->n_layer, sh->k, sh->n_expert,
                          (unsigned long long)sh->max_ff, ash->n_embd);
    gm_cuda_pf *p = (gm_cuda_pf *)calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "CUDA prefill: out of host memory");
    p->a = a;
    p->st = gm_cuda_attn_stream(a);
    p->sh = *sh;
    p->ash = *ash;
    p->max_tokens = max_tokens;
    p->next_layer = UINT32_MAX;
    p->row_bytes = (uint64_t)ash->head_dim * (ash->cache_type == GM_TYPE_F16 ? 2 : 4);
    const uint64_t T = max_tokens, E = ash->n_embd, K = sh->k, ff = sh->max_ff;
    const uint64_t qd = (uint64_t)ash->n_head * ash->head_dim, kvd = (uint64_t)ash->n_head_kv * ash->head_dim;
    p->max_pairs = T * K; /* at least T: the shared expert's rows use the pairs' buffers too */
    p->max_tiles = tiles_bound(p->max_pairs, sh->n_expert);
    p->at_x = 0;
    p->at_xn = up256(T * E * sizeof(float));
    p->at_logits = p->at_xn + up256(E * sizeof(float));
    /* the logits of every row go through dlogits a group of rows at a time (about 32 MB) */
    const uint64_t fit = ((uint64_t)32 << 20) / (sh->n_vocab * sizeof(float) + 1);
    p->logit_rows = (uint32_t)(fit < 1 ? 1 : fit > T ? T : fit);
    p->at_cnt = p->at_logits + up256((uint64_t)p->logit_rows * sh->n_vocab * sizeof(float));
    p->end = p->at_cnt + up256(sh->n_expert * sizeof(uint32_t));
    p->routed = UINT32_MAX;
    const uint64_t upload = up256(T * ash->n_rot * sizeof(float)) + T * E * sizeof(float);
    cudaError_t e = cudaSuccess;
#define PF_ALLOC(ptr, bytes) \
    if (e == cudaSuccess) \
        e = cudaMalloc((void **)&(ptr), (bytes))
    PF_ALLOC(p->dx, T * E * sizeof(float));
    PF_ALLOC(p->dxn, T * E * sizeof(float));
    PF_ALLOC(p->dcs, T * ash->n_rot * sizeof(float));
    PF_ALLOC(p->dq, T * qd * sizeof(float));
    PF_ALLOC(p->dk, T * kvd * sizeof(float));
    PF_ALLOC(p->dv, T * kvd * sizeof(float));
    PF_ALLOC(p->datt, T * qd * sizeof(float));
    PF_ALLOC(p->dout, T * E * sizeof(float));
    PF_ALLOC(p->dlog, T * sh->n_expert * sizeof(float));
    PF_ALLOC(p->dwt, T * K * sizeof(float));
    PF_ALLOC(p->dgu, p->max_pairs * 2 * ff * sizeof(float));
    PF_ALLOC(p->dh, p->max_pairs * ff * sizeof(float));
    PF_ALLOC(p->hxn, T * E * sizeof(uint16_t));
    PF_ALLOC(p->hatt, T * qd * sizeof(uint16_t));
    PF_ALLOC(p->hh, p->max_pairs * ff * sizeof(uint16_t));
    PF_ALLOC(p->drows, p->max_pairs * E * sizeof(float));
    PF_ALLOC(p->dgate, T * sizeof(float));
    PF_ALLOC(p->dlogits, (uint64_t)p->logit_rows * sh->n_vocab * sizeof(float));
    PF_ALLOC(p->dids, T * K * sizeof(int32_t));
    PF_ALLOC(p->dcnt, sh->n_expert * sizeof(uint32_t));
    PF_ALLOC(p->doff, sh->n_expert * sizeof(uint32_t));
    PF_ALLOC(p->dpair_tok, p->max_pairs * sizeof(uint32_t));
    PF_ALLOC(p->dpair_at, T * K * sizeof(uint32_t));
    PF_ALLOC(p->dn_tiles, sizeof(uint32_t));
    PF_ALLOC(p->dtiles, p->max_tiles * sizeof(gm_mm_tile));
    PF_ALLOC(p->dtable, sh->n_expert * sizeof(gm_cuda_expert));
#undef PF_ALLOC
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&p->hbuf, p->end > upload ? p->end : upload);
    const uint64_t smem = attn_prompt_smem(ash->head_dim, ash->n_head / ash->n_head_kv);
    if (e == cudaSuccess && smem > 48 * 1024)
        e = cudaFuncSetAttribute(attn_prompt_for(ash->head_dim), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
    if (e != cudaSuccess) {
        const int rc = gm_cuda_fail(e, "allocating the prompt chunk's buffers", err);
        gm_cuda_pf_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

extern "C" uint32_t gm_cuda_pf_max_tokens(const gm_cuda_pf *p) { return p->max_tokens; }

extern "C" int gm_cuda_pf_begin(gm_cuda_pf *p, const float *x, const float *rope_cs, uint32_t pos, uint32_t n,
                                gm_err *err)
{
    if (!n || n > p->max_tokens)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: %u tokens in a chunk of at most %u", n, p->max_tokens);
    p->n = n;
    p->pos = pos;
    p->next_layer = 0;
    p->routed = UINT32_MAX;
    const uint64_t E = p->ash.n_embd, cs_bytes = (uint64_t)n * p->ash.n_rot * sizeof(float);
    const uint64_t at_x = up256(cs_bytes);
    memcpy(p->hbuf, rope_cs, cs_bytes);
    memcpy(p->hbuf + at_x, x, n * E * sizeof(float));
    cudaError_t e = cudaMemcpyAsync(p->dcs, p->hbuf, cs_bytes, cudaMemcpyHostToDevice, p->st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(p->dx, p->hbuf + at_x, n * E * sizeof(float), cudaMemcpyHostToDevice, p->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "uploading the prompt's chunk", err);
}

/* n floats of x into h as half (mm_to_half); what names the launch for an error */
static int pf_half(gm_cuda_pf *p, const float *x, uint16_t *h, uint64_t n, const char *what, gm_err *err)
{
    mm_to_half<<<(unsigned)((n / 4 + 255) / 256), 256, 0, p->st>>>(x, (__half *)h, n);
    return launched(what, err);
}

/* The residual (plus add) normalised into dxn, and as half into hxn. */
static int pf_norm(gm_cuda_pf *p, const float *add, const float *w, gm_err *err)
{
    gm_add_rmsnorm_for(p->ash.n_embd)<<<p->n, gm_norm_threads(p->ash.n_embd), 0, p->st>>>(p->dx, add, w, p->sh.eps, p->ash.n_embd, p->dxn,
                                                                    NULL);
    int rc = launched("launching the chunk's residual norms", err);
    return rc ? rc : pf_half(p, p->dxn, p->hxn, (uint64_t)p->n * p->ash.n_embd,
                             "launching the chunk's normalised rows as half", err);
}

/* Layer l's attention of the chunk: its output into dout. */
static int pf_attention(gm_cuda_pf *p, const gm_cuda_attn_layer *w, void *kc, void *vc, uint32_t cap, gm_err *err)
{
    const gm_cuda_attn_shape *sh = &p->ash;
    const uint32_t hd = sh->head_dim;
    const uint64_t E = sh->n_embd, qd = (uint64_t)sh->n_head * hd, kvd = (uint64_t)sh->n_head_kv * hd;
    int rc;
    if (w->wq.type == w->wk.type && w->wq.type == w->wv.type && w->wq.type != GM_TYPE_F32 &&
        w->wq.n_cols == E && w->wk.n_cols == E && w->wv.n_cols == E && w->wk.n_rows <= w->wq.n_rows &&
        w->wv.n_rows <= w->wq.n_rows) {
        /* one launch: k's and v's few tiles beside q's rather than after them, each alone too
         * small a launch to fill the device */
        gm_mm_args a;
        if ((rc = mm_args(w->wq.type, w->wq.n_rows, E, p->dxn, p->hxn, E, NULL, 0, &a, err)))
            return rc;
        a.n = p->n;
        a.n_mats = GM_MM_MATS;
        const gm_cuda_mat *m3[GM_MM_MATS] = {&w->wq, &w->wk, &w->wv};
        float *y3[GM_MM_MATS] = {p->dq, p->dk, p->dv};
        for (unsigned i = 0; i < GM_MM_MATS; i++) {
            a.mat_w[i] = (const uint8_t *)m3[i]->data;
            a.mat_y[i] = y3[i];
            a.mat_rows[i] = m3[i]->n_rows;
            a.mat_ldy[i] = i ? kvd : qd;
        }
        a.w = a.mat_w[0];
        if ((rc = mm(p->st, w->wq.type, a, (p->n + MM_BN - 1) / MM_BN,
                     "launching the chunk's q, k and v products", err)))
            return rc;
    } else if ((rc = mm_dense(p, &w->wq, p->dxn, p->hxn, E, p->dq, qd, NULL, "launching the chunk's q product",
                              err)) ||
               (rc = mm_dense(p, &w->wk, p->dxn, p->hxn, E, p->dk, kvd, NULL, "launching the chunk's k product",
                              err)) ||
               (rc = mm_dense(p, &w->wv, p->dxn, p->hxn, E, p->dv, kvd, NULL, "launching the chunk's v product",
                              err)))
        return rc;
    gm_attn_post_args pa = {p->dq, p->dk, p->dv, w->bq, w->bk, w->bv, w->q_norm, w->k_norm, p->dcs,
                            (uint8_t *)kc, (uint8_t *)vc, NULL, NULL, p->row_bytes, cap, p->pos,
                            sh->n_head, sh->n_head_kv, hd, sh->n_rot, sh->neox, sh->norm_after_rope, sh->eps,
                            sh->cache_type, NULL};
    gm_attn_kernels_for(hd).post<<<dim3(sh->n_head + 2 * sh->n_head_kv, p->n), 32, 0, p->st>>>(pa);
    if ((rc = launched("launching the chunk's heads' normalisation and rotation", err)))
        return rc;
    const uint32_t group = sh->n_head / sh->n_head_kv;
    gm_attn_prompt_args aa = {p->dq, (const uint8_t *)kc, (const uint8_t *)vc, p->row_bytes, cap, sh->n_head,
                              sh->n_head_kv, p->pos, p->n, sh->scale, sh->cache_type, w->sinks, p->datt};
    const unsigned tok = attn_prompt_tokens(hd / 32);
    attn_prompt_for(hd)<<<dim3((p->n + tok - 1) / tok, sh->n_head_kv), 32 * group, attn_prompt_smem(hd, group),
                          p->st>>>(aa);
    if ((rc = launched("launching the chunk's attention", err)))
        return rc;
    if ((rc = pf_half(p, p->datt, p->hatt, p->n * qd, "launching the chunk's attention output as half", err)))
        return rc;
    return mm_dense(p, &w->wo, p->datt, p->hatt, qd, p->dout, E, w->bo, "launching the chunk's output product",
                    err);
}

/* Layer m's routing of the chunk: each token's experts and weights, its pairs grouped by expert. */
static int pf_route(gm_cuda_pf *p, const gm_cuda_moe_layer *m, gm_err *err)
{
    const gm_cuda_dec_shape *sh = &p->sh;
    const uint64_t E = p->ash.n_embd;
    int rc;
    if ((rc = mm_dense(p, &m->router, p->dxn, p->hxn, E, p->dlog, sh->n_expert, m->router_b,
                       "launching the chunk's router", err)))
        return rc;
    gm_route_args ra = {p->dlog, m->sel_bias, sh->n_expert, sh->k, sh->softmax, sh->norm_topk, sh->scale, p->dids,
                        p->dwt};
    gm_route_topk_for(sh->n_expert)<<<p->n, 32, 0, p->st>>>(ra);
    if ((rc = launched("launching the chunk's routing", err)))
        return rc;
    const unsigned eb = (sh->n_expert + 7) / 8;
    pf_count<<<eb, 256, 0, p->st>>>(p->dids, p->n, sh->k, sh->n_expert, p->dcnt);
    pf_tiles<<<1, 32, 0, p->st>>>(p->dcnt, sh->n_expert, p->doff, p->dtiles, p->dn_tiles);
    pf_pairs<<<eb, 256, 0, p->st>>>(p->dids, p->n, sh->k, sh->n_expert, p->doff, p->dpair_tok, p->dpair_at);
    return launched("launching the chunk's grouping by expert", err);
}

/* The products of the experts of table (device memory; a NULL entry's pairs are left) over their
 * pairs: each pair's output row into drows. */
static int pf_products(gm_cuda_pf *p, const gm_cuda_moe_layer *m, const gm_cuda_expert *table, gm_err *err)
{
    const uint64_t E = p->ash.n_embd, pairs = (uint64_t)p->n * p->sh.k;
    const gm_cuda_ffn_shape *fs = &m->ffn;
    const uint64_t ff = fs->ff;
    int rc;
    if ((rc = mm_experts(p, table, 0, fs->gate_type, ff, E, p->dxn, p->hxn, E, p->dpair_tok, p->dgu, 2 * ff,
                         "launching the experts' gate products", err)) ||
        (rc = mm_experts(p, table, 1, fs->up_type, ff, E, p->dxn, p->hxn, E, p->dpair_tok, p->dgu + ff, 2 * ff,
                         "launching the experts' up products", err)))
        return rc;
    glu_jobs<<<(unsigned)((pairs * ff + 255) / 256), 256, 0, p->st>>>(p->dgu, p->dh, NULL, ff, pairs, fs->glu);
    if ((rc = launched("launching the experts' activations", err)) ||
        (rc = pf_half(p, p->dh, p->hh, pairs * ff, "launching the experts' activations as half", err)))
        return rc;
    return mm_experts(p, table, 2, fs->down_type, E, ff, p->dh, p->hh, ff, NULL, p->drows, E,
                      "launching the experts' down products", err);
}

/* Layer m's routed experts' rows summed into dout (which holds 0), each token's in ascending id. */
static int pf_combine(gm_cuda_pf *p, gm_err *err)
{
    const uint64_t E = p->ash.n_embd;
    combine_experts<<<dim3((unsigned)((E + 255) / 256), p->n), 256, 0, p->st>>>(p->dout, p->drows, p->dids, p->dwt,
                                                                                  p->dpair_at, p->sh.k, E);
    return launched("launching the experts' sums", err);
}

/* The shared expert (or a dense FFN) over the chunk, added into dout. */
static int pf_shared(gm_cuda_pf *p, const gm_cuda_moe_layer *m, gm_err *err)
{
    const gm_cuda_ffn_shape *ss = &m->shared_ffn;
    const uint64_t E = p->ash.n_embd, ff = ss->ff, n = p->n;
    int rc;
    const gm_cuda_mat g = {m->shared.gate, ss->gate_type, ff, E}, u = {m->shared.up, ss->up_type, ff, E},
                      d = {m->shared.down, ss->down_type, E, ff};
    if ((rc = mm_dense(p, &g, p->dxn, p->hxn, E, p->dgu, 2 * ff, NULL, "launching the shared expert's gate product", err)) ||
        (rc = mm_dense(p, &u, p->dxn, p->hxn, E, p->dgu + ff, 2 * ff, NULL, "launching the shared expert's up product", err)))
        return rc;
    glu_jobs<<<(unsigned)((n * ff + 255) / 256), 256, 0, p->st>>>(p->dgu, p->dh, NULL, ff, n, ss->glu);
    if ((rc = launched("launching the shared expert's activation", err)) ||
        (rc = pf_half(p, p->dh, p->hh, n * ff, "launching the shared expert's activation as half", err)) ||
        (rc = mm_dense(p, &d, p->dh, p->hh, ff, p->drows, E, NULL, "launching the shared expert's down product", err)))
        return rc;
    if (m->shared_gate.data &&
        (rc = mm_dense(p, &m->shared_gate, p->dxn, p->hxn, E, p->dgate, 1, NULL, "launching the shared expert's gate", err)))
        return rc;
    add_shared<<<dim3((unsigned)((E + 255) / 256), p->n), 256, 0, p->st>>>(
        p->dout, p->drows, m->shared_gate.data ? p->dgate : NULL, E);
    return launched("launching the shared expert's sum", err);
}

/* Whether layer l of the chunk may be queued: its weights fit the chunk's shape (the table of
 * experts too when experts), the rows fit the cache. */
static int pf_check(gm_cuda_pf *p, uint32_t l, const gm_cuda_moe_layer *m, uint32_t cap, bool experts, gm_err *err)
{
    const gm_cuda_dec_shape *sh = &p->sh;
    const uint64_t E = p->ash.n_embd;
    if (l != p->next_layer || l >= sh->n_layer || p->routed != UINT32_MAX)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: layer %u where layer %u was due", l, p->next_layer);
    if ((m->router.data && (m->router.n_rows != sh->n_expert || m->router.n_cols != E || (experts && !m->experts) ||
                            m->ffn.dim != E || m->ffn.ff > sh->max_ff || m->ffn.ff % 32 ||
                            !gm_cuda_can_dequant(m->ffn.gate_type) || !gm_cuda_can_dequant(m->ffn.up_type) ||
                            !gm_cuda_can_dequant(m->ffn.down_type))) ||
        (m->shared.gate && (m->shared_ffn.dim != E || m->shared_ffn.ff > sh->max_ff || m->shared_ffn.ff % 32)) ||
        (m->shared_gate.data && (m->shared_gate.n_rows != 1 || m->shared_gate.n_cols != E)) ||
        (!m->router.data && !m->shared.gate))
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: layer %u's experts, router or shared expert do not fit the "
                          "chunk's shape", l);
    if ((uint64_t)p->pos + p->n > cap)
        return gm_err_set(err, GM_ERANGE, "CUDA prefill: positions %u .. %u in a cache of %u rows", p->pos,
                          p->pos + p->n - 1, cap);
    return 0;
}

/* Layer l's attention, its residual added and normalised for the FFN, dout cleared for it. */
static int pf_front(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                    void *vc, uint32_t cap, gm_err *err)
{
    int rc;
    if ((rc = pf_norm(p, l ? p->dout : NULL, m->attn_norm, err)) || (rc = pf_attention(p, w, kc, vc, cap, err)) ||
        (rc = pf_norm(p, p->dout, m->ffn_norm, err)))
        return rc;
    cudaError_t e = cudaMemsetAsync(p->dout, 0, (uint64_t)p->n * p->ash.n_embd * sizeof(float), p->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "clearing the chunk's block output", err);
}

extern "C" int gm_cuda_pf_layer(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                                void *kc, void *vc, uint32_t cap, gm_err *err)
{
    int rc;
    if ((rc = pf_check(p, l, m, cap, true, err)) || (rc = pf_front(p, l, w, m, kc, vc, cap, err)))
        return rc;
    if (m->router.data && ((rc = pf_route(p, m, err)) || (rc = pf_products(p, m, m->experts, err)) ||
                           (rc = pf_combine(p, err))))
        return rc;
    if (m->shared.gate && (rc = pf_shared(p, m, err)))
        return rc;
    p->next_layer = l + 1;
    return 0;
}

extern "C" int gm_cuda_pf_route(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                                void *kc, void *vc, uint32_t cap, const uint32_t **count, gm_err *err)
{
    *count = NULL;
    int rc;
    if (!m->router.data)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: layer %u has no routed experts to route", l);
    if ((rc = pf_check(p, l, m, cap, false, err)) || (rc = pf_front(p, l, w, m, kc, vc, cap, err)) ||
        (rc = pf_route(p, m, err)))
        return rc;
    uint32_t *hcnt = (uint32_t *)(p->hbuf + p->at_cnt);
    cudaError_t e = cudaMemcpyAsync(hcnt, p->dcnt, p->sh.n_expert * sizeof(uint32_t), cudaMemcpyDeviceToHost, p->st);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(p->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "routing the prompt's chunk", err);
    p->routed = l;
    *count = hcnt;
    return 0;
}

extern "C" int gm_cuda_pf_upload(gm_cuda_pf *p, void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                                 uint64_t width, uint64_t rows, gm_err *err)
{
    if (p->routed == UINT32_MAX)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: a copy into the device outside a routed layer");
    cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyHostToDevice, p->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "copying experts into the device", err);
}

extern "C" int gm_cuda_pf_bounce(gm_cuda_pf *p, uint8_t **buf, uint64_t *bytes, gm_err *err)
{
    *buf = NULL;
    *bytes = 0;
    if (p->bounce_failed)
        return gm_err_set(err, GM_ENOMEM, "CUDA prefill: no page-locked staging buffers");
    cudaError_t e = cudaSuccess;
    const bool make = !p->bounce[0];
    for (int i = 0; make && i < GM_CUDA_PF_BOUNCE && e == cudaSuccess; i++) {
        e = cudaMallocHost((void **)&p->bounce[i], GM_CUDA_PF_BOUNCE_BYTES);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&p->sent[i], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventRecord(p->sent[i], p->st);
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the copies go from pageable memory instead */
        for (int i = 0; i < GM_CUDA_PF_BOUNCE; i++) {
            cudaFreeHost(p->bounce[i]);
            if (p->sent[i])
                cudaEventDestroy(p->sent[i]);
            p->bounce[i] = NULL;
            p->sent[i] = NULL;
        }
        p->bounce_failed = true;
        return gm_err_set(err, GM_ENOMEM, "CUDA prefill: page-locking %d staging buffers of %.0f MB: %s",
                          GM_CUDA_PF_BOUNCE, (double)GM_CUDA_PF_BOUNCE_BYTES / 1e6, cudaGetErrorString(e));
    }
    const uint32_t i = p->next_bounce;
    if ((e = cudaEventSynchronize(p->sent[i])) != cudaSuccess)
        return gm_cuda_fail(e, "waiting for a staging buffer's copies", err);
    *buf = p->bounce[i];
    *bytes = GM_CUDA_PF_BOUNCE_BYTES;
    return 0;
}

extern "C" int gm_cuda_pf_bounce_sent(gm_cuda_pf *p, gm_err *err)
{
    if (!p->bounce[0])
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: a staging buffer sent before one was handed out");
    const uint32_t i = p->next_bounce;
    p->next_bounce = (i + 1) % GM_CUDA_PF_BOUNCE;
    cudaError_t e = cudaEventRecord(p->sent[i], p->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "marking a staging buffer's copies", err);
}

extern "C" int gm_cuda_pf_copy(gm_cuda_pf *p, void *dst, const void *src, uint64_t bytes, gm_err *err)
{
    if (p->next_layer == UINT32_MAX)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: a copy within the device outside a chunk");
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, p->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "copying experts within the device", err);
}

extern "C" int gm_cuda_pf_experts(gm_cuda_pf *p, uint32_t l, const gm_cuda_moe_layer *m, const gm_cuda_expert *table,
                                  bool last, gm_err *err)
{
    if (p->routed != l)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: layer %u's experts before its routing", l);
    /* from pageable memory: table is copied out before the call returns */
    cudaError_t e = cudaMemcpyAsync(p->dtable, table, p->sh.n_expert * sizeof *table, cudaMemcpyHostToDevice, p->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "copying the experts' table into the device", err);
    int rc = pf_products(p, m, p->dtable, err);
    if (rc || !last)
        return rc;
    if ((rc = pf_combine(p, err)) || (m->shared.gate && (rc = pf_shared(p, m, err))))
        return rc;
    p->routed = UINT32_MAX;
    p->next_layer = l + 1;
    return 0;
}

extern "C" int gm_cuda_pf_end(gm_cuda_pf *p, const float *out_norm, const gm_cuda_mat *head, float *logits, bool all,
                              gm_err *err)
{
    if (p->next_layer != p->sh.n_layer)
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: the chunk ends after %u of %u layers", p->next_layer,
                          p->sh.n_layer);
    p->next_layer = UINT32_MAX;
    const uint64_t E = p->ash.n_embd, n = p->n;
    const bool with = head && logits;
    if (with && (head->n_cols != E || head->n_rows > p->sh.n_vocab))
        return gm_err_set(err, GM_EINVAL, "CUDA prefill: an output head of %llu x %llu",
                          (unsigned long long)head->n_rows, (unsigned long long)head->n_cols);
    int rc = pf_norm(p, p->dout, out_norm, err);
    const float *last = p->dxn + (n - 1) * E;
    cudaError_t e = rc ? cudaSuccess : cudaMemcpyAsync(p->hbuf + p->at_x, p->dx, n * E * sizeof(float),
                                                       cudaMemcpyDeviceToHost, p->st);
    if (e == cudaSuccess && !rc)
        e = cudaMemcpyAsync(p->hbuf + p->at_xn, last, E * sizeof(float), cudaMemcpyDeviceToHost, p->st);
    /* the logits: the last row's, or every row's a group at a time */
    const uint64_t V = with ? head->n_rows : 0;
    const uint32_t first = all ? 0 : (uint32_t)n - 1;
    for (uint32_t r = first; with && !rc && e == cudaSuccess && r < n; r += p->logit_rows) {
        const uint32_t m = (uint32_t)(n - r < p->logit_rows ? n - r : p->logit_rows);
        if (m == 1) {
            bool made = false;
            rc = gm_cuda_product(p->st, head, p->dxn + r * E, gm_cuda_attn_xq(p->a), &made, p->dlogits, err);
        } else {
            rc = mm_rows(p->st, head, p->dxn + r * E, p->hxn + r * E, E, p->dlogits, V, m, NULL,
                         "launching the chunk's output head", err);
        }
        if (!rc)
            e = cudaMemcpyAsync(p->hbuf + p->at_logits, p->dlogits, m * V * sizeof(float), cudaMemcpyDeviceToHost,
                                p->st);
        if (!rc && e == cudaSuccess && (e = cudaStreamSynchronize(p->st)) == cudaSuccess)
            memcpy(logits + (uint64_t)(r - first) * V, p->hbuf + p->at_logits, m * V * sizeof(float));
    }
    if (rc)
        return rc;
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "running the prompt's chunk and downloading its results", err);
    if ((e = cudaStreamSynchronize(p->st)) != cudaSuccess)
        return gm_cuda_fail(e, "running the prompt's chunk", err);
    return 0;
}

extern "C" int gm_cuda_mm_host(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x,
                               uint32_t n, float *y, gm_err *err)
{
    gm_mm_args a;
    int rc = mm_args(type, n_rows, n_cols, NULL, NULL, n_cols, NULL, n_rows, &a, err);
    if (rc)
        return rc;
    const uint64_t xs = (uint64_t)n * n_cols;
    uint8_t *dw = NULL;
    float *dx = NULL, *dy = NULL;
    uint16_t *dh = NULL;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&dw, a.row_bytes * n_rows + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dx, xs * sizeof(float) + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dh, xs * sizeof(uint16_t) + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dy, (uint64_t)n * n_rows * sizeof(float) + 1)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "allocating the product's buffers", err);
        goto out;
    }
    if ((e = cudaMemcpy(dw, w, a.row_bytes * n_rows, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(dx, x, xs * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "uploading the matrix and the rows", err);
        goto out;
    }
    a.w = dw;
    a.x = dx;
    a.xh = dh;
    a.y = dy;
    a.n = n;
    mm_to_half<<<(unsigned)((xs / 4 + 255) / 256), 256>>>(dx, (__half *)dh, xs);
    if ((rc = launched("launching the rows' conversion to half", err)) ||
        (rc = mm(0, type, a, (n + MM_BN - 1) / MM_BN, "launching the product", err)))
        goto out;
    if ((e = cudaDeviceSynchronize()) != cudaSuccess ||
        (e = cudaMemcpy(y, dy, (uint64_t)n * n_rows * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = gm_cuda_fail(e, "running the product", err);
out:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dh);
    cudaFree(dy);
    return rc;
}

extern "C" const float *gm_cuda_pf_x(const gm_cuda_pf *p) { return (const float *)(p->hbuf + p->at_x); }
extern "C" const float *gm_cuda_pf_xn(const gm_cuda_pf *p) { return (const float *)(p->hbuf + p->at_xn); }

extern "C" int gm_cuda_download(void *dst, const void *src, uint64_t bytes, gm_err *err)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "copying from the device", err);
}
