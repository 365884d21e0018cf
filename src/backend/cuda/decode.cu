/* A decode token through whole layers on the device (see cuda.h): the token's embedding and its
 * rotation's cosines and sines go up in one copy; each layer then runs on the attention's stream
 * without the host: the residual add and the norm, the attention (attn.cu's queue), the residual
 * add and the norm, the router's product, the routing (route_kernels.cuh), the job table of the
 * chosen experts built on the device from the layer's table of every expert, the experts'
 * grouped products (ffn.cu's queue) and their weighted sum. The last residual add, the output
 * norm and the head follow, and one copy brings back the residual, its normalised row, every
 * layer's cached rows and choice of experts, and the logits. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/attn_kernels.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/ffn_kernels.cuh"
#include "backend/cuda/internal.h"
#include "backend/cuda/route_kernels.cuh"

/* Experts a token routes to, at most: the experts' sum orders them in shared memory. */
#define GM_DEC_MAX_K GM_COMBINE_MAX_K

static uint64_t up256(uint64_t b) { return (b + 255) / 256 * 256; }

/* What a layer of a token was queued with: a graph replays a token whose layers are the same. */
struct layer_args {
    const gm_cuda_attn_layer *w;
    const gm_cuda_moe_layer *m;
    void *kc, *vc;
    uint32_t cap;
};

enum dec_mode { DIRECT, CAPTURE, REPLAY };

struct gm_cuda_dec {
    gm_cuda_attn *a;
    cudaStream_t st;
    gm_cuda_dec_shape sh;
    uint32_t n_layer, n_embd, n_rot;
    uint64_t max_ff, n_vocab, kv_row; /* kv_row: a layer's cached rows of one token (K or V), bytes */
    /* the results' buffer, on the device (dres) and pinned on the host (hres), one layout:
     * [cs | pos | x | xn | ids | weights | K rows | V rows | logits], each part from x on at a
     * 256-byte boundary; a token's upload is [cs | pos | x], its download [x .. logits] (or
     * [x .. V rows]) */
    uint8_t *dres, *hres;
    uint64_t at_pos, at_x, at_xn, at_ids, at_w, at_k, at_v, at_logits, end;
    float *dattn, *dmoe, *dlogits_r;      /* device: the attention's and the block's outputs, router logits */
    gm_mv_job *djobs;                     /* device: the routed experts' job table, then the shared one's */
    float *dgu, *dh, *drows;              /* device: gate and up outputs, activations, experts' outputs */
    gm_cuda_q8_block *dhq;                /* device: the activations' 8-bit blocks */
    uint32_t next_layer;                  /* the layer a token expects next (UINT32_MAX: none begun) */
    /* the CUDA graph of a whole token: captured from the first token's launches (which read the
     * position from device memory, so that they are the same at every position), then replayed
     * for each token whose layers, norm and head are those it was captured from */
    enum dec_mode mode;
    layer_args *rec;                      /* [n_layer]: this token's layers (the graph's, replaying) */
    const float *rec_norm;
    gm_cuda_mat rec_head;                 /* data NULL: no logits */
    cudaGraphExec_t exec;                 /* NULL: none */
    bool no_graph;                        /* not wanted, or a capture failed */
    bool xq_made;                         /* the layer's FFN input in 8-bit blocks (the norm's) */
    uint64_t replays;
    /* a token split between the device and the host (gm_cuda_dec_route, gm_cuda_dec_rows): every
     * layer's table of the experts in VRAM, pinned (htab) and on the device (dtab), [n_layer][n_expert];
     * the host's experts' rows, pinned (hrows) and on the device (dhrows), [k][n_embd]; the event
     * after a layer's routing has come down */
    gm_cuda_expert *htab, *dtab;
    float *hrows, *dhrows;
    cudaEvent_t routed;
};

static int launched(const char *what, gm_err *err)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, what, err);
}

extern "C" void gm_cuda_dec_free(gm_cuda_dec *d)
{
    if (!d)
        return;
    if (d->st)
        cudaStreamSynchronize(d->st);
    if (d->exec)
        cudaGraphExecDestroy(d->exec);
    if (d->routed)
        cudaEventDestroy(d->routed);
    void *dev[] = {d->dres, d->dattn, d->dmoe, d->dlogits_r, d->djobs, d->dgu, d->dh, d->drows, d->dhq, d->dtab,
                   d->dhrows};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    cudaFreeHost(d->hres);
    cudaFreeHost(d->htab);
    cudaFreeHost(d->hrows);
    free(d->rec);
    free(d);
}

extern "C" int gm_cuda_dec_create(gm_cuda_dec **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, gm_err *err)
{
    *out = NULL;
    const gm_cuda_attn_shape *ash = gm_cuda_attn_shape_of(a);
    if (!sh->n_layer || !sh->n_expert || sh->n_expert > GM_ROUTE_MAX || !sh->k || sh->k > sh->n_expert ||
        sh->k > GM_DEC_MAX_K || !sh->max_ff || sh->max_ff % 32 || ash->n_embd > GM_NORM_PER * 1024)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: %u layers, %u of %u experts (at most %u of %u), experts of "
                          "%llu, a width of %u (at most %u)", sh->n_layer, sh->k, sh->n_expert, GM_DEC_MAX_K,
                          GM_ROUTE_MAX, (unsigned long long)sh->max_ff, ash->n_embd, GM_NORM_PER * 1024);
    gm_cuda_dec *d = (gm_cuda_dec *)calloc(1, sizeof *d);
    if (!d || !(d->rec = (layer_args *)calloc(sh->n_layer, sizeof *d->rec))) {
        free(d);
        return gm_err_set(err, GM_ENOMEM, "CUDA decode: out of host memory");
    }
    d->a = a;
    d->st = gm_cuda_attn_stream(a);
    d->sh = *sh;
    d->no_graph = !sh->graph;
    d->n_layer = sh->n_layer;
    d->n_embd = ash->n_embd;
    d->n_rot = ash->n_rot;
    d->max_ff = sh->max_ff;
    d->n_vocab = sh->n_vocab;
    d->kv_row = (uint64_t)ash->n_head_kv * ash->head_dim * (ash->cache_type == GM_TYPE_F16 ? 2 : 4);
    d->next_layer = UINT32_MAX;
    const uint64_t E = d->n_embd, L = sh->n_layer, K = sh->k, ff = sh->max_ff;
    d->at_pos = d->n_rot * sizeof(float);
    d->at_x = up256(d->at_pos + sizeof(uint32_t));
    d->at_xn = d->at_x + up256(E * sizeof(float));
    d->at_ids = d->at_xn + up256(E * sizeof(float));
    d->at_w = d->at_ids + up256(L * K * sizeof(int32_t));
    d->at_k = d->at_w + up256(L * K * sizeof(float));
    d->at_v = d->at_k + up256(L * d->kv_row);
    d->at_logits = d->at_v + up256(L * d->kv_row);
    d->end = d->at_logits + up256(sh->n_vocab * sizeof(float));
    cudaError_t e;
    if ((e = cudaMalloc((void **)&d->dres, d->end)) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dattn, E * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dmoe, E * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dlogits_r, sh->n_expert * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->djobs, 3 * (K + 1) * sizeof(gm_mv_job))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dgu, 2 * K * ff * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dh, K * ff * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->drows, K * E * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dhq, K * ff / 32 * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&d->hres, d->end)) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dtab, L * sh->n_expert * sizeof(gm_cuda_expert))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&d->htab, L * sh->n_expert * sizeof(gm_cuda_expert))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dhrows, K * E * sizeof(float))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&d->hrows, K * E * sizeof(float))) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&d->routed, cudaEventDisableTiming)) != cudaSuccess) {
        const int rc = gm_cuda_fail(e, "allocating the decode token's buffers", err);
        gm_cuda_dec_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* x += add (when add is not NULL), then xn = rms_norm(x) * w: one thread block (spread over
 * several blocks, each summing the whole row, it measured slower: 9.6 us against 5.9); with xq
 * (not NULL), xn's 8-bit blocks into it too (where the width is whole blocks; *xq_made says
 * whether). */
static int add_norm(gm_cuda_dec *d, const float *add, const float *w, gm_cuda_q8_block *xq, bool *xq_made,
                    gm_err *err)
{
    const bool q = xq && d->n_embd % 32 == 0;
    const uint32_t E = d->n_embd;
    gm_add_rmsnorm_for(E)<<<1, gm_norm_threads(E), 0, d->st>>>((float *)(d->dres + d->at_x), add, w, d->sh.eps, E,
                                                               (float *)(d->dres + d->at_xn), q ? xq : NULL);
    if (xq_made)
        *xq_made = q;
    return launched("launching the residual's norm", err);
}

static int queue_upload(gm_cuda_dec *d, gm_err *err)
{
    cudaError_t e = cudaMemcpyAsync(d->dres, d->hres, d->at_x + d->n_embd * sizeof(float), cudaMemcpyHostToDevice,
                                    d->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "uploading the decode token", err);
}

/* The job table of layer l's routed experts from table (device memory, n_expert entries; an
 * expert without a gate is skipped), as the routing builds it from the ids it chooses. */
static gm_expert_jobs_args jobs_args(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m,
                                     const gm_cuda_expert *table)
{
    const float *xn = (const float *)(d->dres + d->at_xn);
    gm_cuda_q8_block *xq = gm_cuda_attn_xq(d->a);
    const gm_cuda_ffn_shape *fs = &m->ffn;
    const bool gq = gm_cuda_ffn_q8(fs->gate_type), uq = gm_cuda_ffn_q8(fs->up_type);
    return gm_expert_jobs_args{(const int32_t *)(d->dres + d->at_ids) + (uint64_t)l * d->sh.k, table, d->djobs,
                               d->sh.k, fs->gate_type == fs->up_type, gq ? (const void *)xq : (const void *)xn,
                               uq ? (const void *)xq : (const void *)xn, d->dgu, d->dh,
                               gm_cuda_ffn_q8(fs->down_type) ? d->dhq : NULL, d->drows, fs->ff, d->n_embd};
}

/* Layer l's launches up to its routing (the position read from device memory): the attention,
 * the norm before the FFN, the block's output cleared, the router and the routing into the
 * layer's ids and weights, and the chosen experts' job table from table (queue_experts). */
static int queue_front(gm_cuda_dec *d, uint32_t l, const layer_args *r, const gm_cuda_expert *table, uint32_t pos,
                       gm_err *err)
{
    const gm_cuda_dec_shape *sh = &d->sh;
    const gm_cuda_moe_layer *m = r->m;
    const uint64_t E = d->n_embd, K = sh->k;
    float *xn = (float *)(d->dres + d->at_xn);
    const uint32_t *dpos = (const uint32_t *)(d->dres + d->at_pos);
    gm_cuda_q8_block *xq = gm_cuda_attn_xq(d->a);
    bool xq_made = false;
    int rc;
    if ((rc = add_norm(d, l ? d->dmoe : NULL, m->attn_norm, xq, &xq_made, err)) ||
        (rc = gm_cuda_attn_queue(d->a, r->w, r->kc, r->vc, r->cap, pos, dpos, xn, xq_made, (const float *)d->dres,
                                 d->dattn, d->dres + d->at_k + l * d->kv_row, d->dres + d->at_v + l * d->kv_row,
                                 err)) ||
        (rc = add_norm(d, d->dattn, m->ffn_norm, xq, &xq_made, err)))
        return rc;
    d->xq_made = xq_made; /* the FFN's input in 8-bit blocks already (queue_experts, queue_shared) */
    cudaError_t e = cudaMemsetAsync(d->dmoe, 0, E * sizeof(float), d->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "clearing the block's output", err);
    if (!m->router.data)
        return 0;
    if ((rc = gm_cuda_product(d->st, &m->router, xn, xq, &xq_made, d->dlogits_r, err)))
        return rc;
    d->xq_made = xq_made;
    if (m->router_b) {
        attn_add<<<(sh->n_expert + 255) / 256, 256, 0, d->st>>>(d->dlogits_r, m->router_b, sh->n_expert);
        if ((rc = launched("launching the router's bias", err)))
            return rc;
    }
    gm_route_args ra = {d->dlogits_r, m->sel_bias, sh->n_expert, sh->k, sh->softmax, sh->norm_topk, sh->scale,
                        (int32_t *)(d->dres + d->at_ids) + (uint64_t)l * K, (float *)(d->dres + d->at_w) + (uint64_t)l * K};
    gm_route_topk_jobs_for(sh->n_expert)<<<1, 32, 0, d->st>>>(ra, jobs_args(d, l, m, table));
    return launched("launching the routing", err);
}

/* Layer l's routed experts (their job table built by the routing, queue_front): their grouped
 * products, their rows into drows. */
static int queue_experts(gm_cuda_dec *d, const gm_cuda_moe_layer *m, gm_err *err)
{
    const float *xn = (const float *)(d->dres + d->at_xn);
    const gm_ffn_bufs b = {xn, d->n_embd, gm_cuda_attn_xq(d->a), d->xq_made, d->dgu, d->dh, d->dhq};
    return gm_cuda_ffn_queue(d->st, &m->ffn, d->djobs, d->sh.k, &b, err);
}

/* The shared expert (or the dense FFN) added to the block's output, its gate's logit in
 * dlogits_r[0]; nothing for a layer without one. */
static int queue_shared(gm_cuda_dec *d, const gm_cuda_moe_layer *m, gm_err *err)
{
    if (!m->shared.gate)
        return 0;
    const uint64_t E = d->n_embd, K = d->sh.k;
    const float *xn = (const float *)(d->dres + d->at_xn);
    gm_cuda_q8_block *xq = gm_cuda_attn_xq(d->a);
    const gm_cuda_ffn_shape *ss = &m->shared_ffn;
    bool made = false;
    int rc;
    if (m->shared_gate.data && (rc = gm_cuda_product(d->st, &m->shared_gate, xn, xq, &made, d->dlogits_r, err)))
        return rc;
    const bool gq = gm_cuda_ffn_q8(ss->gate_type), uq = gm_cuda_ffn_q8(ss->up_type);
    gm_mv_job *jobs = d->djobs + 3 * K;
    expert_jobs_one<<<1, 32, 0, d->st>>>(m->shared, jobs, ss->gate_type == ss->up_type,
                                         gq ? (const void *)xq : (const void *)xn,
                                         uq ? (const void *)xq : (const void *)xn, d->dgu, d->dh,
                                         gm_cuda_ffn_q8(ss->down_type) ? d->dhq : NULL, d->drows, ss->ff, E);
    if ((rc = launched("launching the shared expert's job table", err)))
        return rc;
    const gm_ffn_bufs b = {xn, E, xq, d->xq_made, d->dgu, d->dh, d->dhq};
    if ((rc = gm_cuda_ffn_queue(d->st, ss, jobs, 1, &b, err)))
        return rc;
    add_shared<<<(unsigned)((E + 255) / 256), 256, 0, d->st>>>(d->dmoe, d->drows,
                                                                m->shared_gate.data ? d->dlogits_r : NULL, E);
    return launched("launching the shared expert's sum", err);
}

/* Layer l's launches, the position read from device memory. */
static int queue_layer(gm_cuda_dec *d, uint32_t l, const layer_args *r, uint32_t pos, gm_err *err)
{
    const gm_cuda_moe_layer *m = r->m;
    const uint64_t E = d->n_embd, K = d->sh.k;
    int rc;
    if ((rc = queue_front(d, l, r, m->experts, pos, err)))
        return rc;
    if (m->router.data) { /* the routed experts' sum */
        if ((rc = queue_experts(d, m, err)))
            return rc;
        combine_experts<<<(unsigned)((E + 255) / 256), 256, 0, d->st>>>(
            d->dmoe, d->drows, (const int32_t *)(d->dres + d->at_ids) + (uint64_t)l * K,
            (const float *)(d->dres + d->at_w) + (uint64_t)l * K, NULL, (uint32_t)K, E);
        if ((rc = launched("launching the experts' sum", err)))
            return rc;
    }
    return queue_shared(d, m, err);
}

/* The end's launches: the last residual add, the output norm, the head (rec_head.data NULL:
 * none), the download. */
static int queue_end(gm_cuda_dec *d, gm_err *err)
{
    int rc;
    if ((rc = add_norm(d, d->dmoe, d->rec_norm, NULL, NULL, err)))
        return rc;
    const bool with = d->rec_head.data != NULL;
    bool made = false;
    if (with && (rc = gm_cuda_product(d->st, &d->rec_head, (const float *)(d->dres + d->at_xn), gm_cuda_attn_xq(d->a),
                                      &made, (float *)(d->dres + d->at_logits), err)))
        return rc;
    const uint64_t to = with ? d->at_logits + d->rec_head.n_rows * sizeof(float) : d->at_logits;
    cudaError_t e = cudaMemcpyAsync(d->hres + d->at_x, d->dres + d->at_x, to - d->at_x, cudaMemcpyDeviceToHost, d->st);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "downloading the decode token", err);
}

/* Ends a capture that failed or is not wanted: no graph from now on. */
static void abandon_capture(gm_cuda_dec *d)
{
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(d->st, &g);
    if (g)
        cudaGraphDestroy(g);
    (void)cudaGetLastError();
    d->no_graph = true;
    d->mode = DIRECT;
}

/* Queues, without the graph, the token so far: its upload and layers 0 .. n - 1 as recorded. */
static int queue_recorded(gm_cuda_dec *d, uint32_t n, uint32_t pos, gm_err *err)
{
    int rc = queue_upload(d, err);
    for (uint32_t l = 0; l < n && !rc; l++)
        rc = queue_layer(d, l, &d->rec[l], pos, err);
    return rc;
}

/* A replayed token that differs from the graph's: the graph goes, the token runs without it. */
static int leave_graph(gm_cuda_dec *d, uint32_t n, uint32_t pos, gm_err *err)
{
    cudaGraphExecDestroy(d->exec);
    d->exec = NULL;
    d->mode = DIRECT;
    return queue_recorded(d, n, pos, err);
}

static uint32_t token_pos(const gm_cuda_dec *d)
{
    uint32_t p;
    memcpy(&p, d->hres + d->at_pos, sizeof p);
    return p;
}

extern "C" int gm_cuda_dec_begin(gm_cuda_dec *d, const float *x, const float *rope_cs, uint32_t pos, gm_err *err)
{
    if (d->mode == CAPTURE) /* a token left unfinished while capturing */
        abandon_capture(d);
    memcpy(d->hres, rope_cs, d->n_rot * sizeof(float));
    memcpy(d->hres + d->at_pos, &pos, sizeof pos);
    memcpy(d->hres + d->at_x, x, d->n_embd * sizeof(float));
    d->next_layer = 0;
    if (d->exec) {
        d->mode = REPLAY;
        return 0;
    }
    d->mode = DIRECT;
    if (!d->no_graph) {
        if (cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal) == cudaSuccess)
            d->mode = CAPTURE;
        else
            (void)cudaGetLastError(), d->no_graph = true;
    }
    int rc = queue_upload(d, err);
    if (rc && d->mode == CAPTURE)
        abandon_capture(d);
    return rc;
}

/* Whether layer l of the token at pos fits its shape and is the one due. */
static int check_layer(const gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m, uint32_t cap, uint32_t pos,
                       gm_err *err)
{
    const gm_cuda_dec_shape *sh = &d->sh;
    if (l != d->next_layer || l >= d->n_layer)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: layer %u where layer %u was due", l, d->next_layer);
    const gm_cuda_ffn_shape *fs = m->router.data ? &m->ffn : &m->shared_ffn;
    if ((m->router.data && (m->router.n_rows != sh->n_expert || m->router.n_cols != d->n_embd)) ||
        (m->shared.gate && (m->shared_ffn.dim != d->n_embd || m->shared_ffn.ff > d->max_ff || m->shared_ffn.ff % 32)) ||
        (m->shared_gate.data && (m->shared_gate.n_rows != 1 || m->shared_gate.n_cols != d->n_embd)) ||
        (!m->router.data && !m->shared.gate) || fs->dim != d->n_embd || fs->ff > d->max_ff || fs->ff % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: layer %u's experts (%llu x %llu), router (%llu x %llu) or "
                          "shared expert do not fit the token's shape", l, (unsigned long long)fs->dim,
                          (unsigned long long)fs->ff, (unsigned long long)m->router.n_rows,
                          (unsigned long long)m->router.n_cols);
    if (pos != token_pos(d) || pos + 1 > cap)
        return gm_err_set(err, GM_ERANGE, "CUDA decode: layer %u at position %u of a token at %u (%u rows)", l, pos,
                          token_pos(d), cap);
    return 0;
}

extern "C" int gm_cuda_dec_layer(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                                 void *kc, void *vc, uint32_t cap, uint32_t pos, gm_err *err)
{
    int rc = check_layer(d, l, m, cap, pos, err);
    if (rc)
        return rc;
    if (m->router.data && !m->experts)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: layer %u has no table of its experts", l);
    const layer_args r = {w, m, kc, vc, cap};
    if (d->mode == REPLAY) {
        const layer_args *g = &d->rec[l];
        if (g->w == w && g->m == m && g->kc == kc && g->vc == vc && g->cap == cap) {
            d->next_layer = l + 1;
            return 0;
        }
        if ((rc = leave_graph(d, l, pos, err)))
            return rc;
    }
    d->rec[l] = r;
    if ((rc = queue_layer(d, l, &r, pos, err))) {
        if (d->mode == CAPTURE)
            abandon_capture(d);
        return rc;
    }
    d->next_layer = l + 1;
    return 0;
}

extern "C" int gm_cuda_dec_route(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                                 const gm_cuda_expert *table, void *kc, void *vc, uint32_t cap, uint32_t pos,
                                 gm_err *err)
{
    int rc = check_layer(d, l, m, cap, pos, err);
    if (rc)
        return rc;
    if (!m->router.data || !table)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: layer %u has no routed experts to split", l);
    if (d->mode != DIRECT)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: a token split with the host runs without a graph");
    const uint64_t N = d->sh.n_expert, K = d->sh.k;
    gm_cuda_expert *ht = d->htab + l * N, *dt = d->dtab + l * N;
    memcpy(ht, table, N * sizeof *ht);
    cudaError_t e = cudaMemcpyAsync(dt, ht, N * sizeof *dt, cudaMemcpyHostToDevice, d->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "uploading a layer's table of experts", err);
    const layer_args r = {w, m, kc, vc, cap};
    if ((rc = queue_front(d, l, &r, dt, pos, err)))
        return rc;
    /* the FFN's input, then every layer's ids and weights (this one's are new), come down */
    const uint64_t from = d->at_xn, to = d->at_w + d->n_layer * K * sizeof(float);
    if ((e = cudaMemcpyAsync(d->hres + from, d->dres + from, to - from, cudaMemcpyDeviceToHost, d->st)) !=
            cudaSuccess ||
        (e = cudaEventRecord(d->routed, d->st)) != cudaSuccess)
        return gm_cuda_fail(e, "downloading a layer's routing", err);
    if ((rc = queue_experts(d, m, err)))
        return rc;
    if ((e = cudaEventSynchronize(d->routed)) != cudaSuccess)
        return gm_cuda_fail(e, "routing a layer", err);
    return 0;
}

extern "C" float *gm_cuda_dec_host_rows(gm_cuda_dec *d) { return d->hrows; }

extern "C" int gm_cuda_dec_rows(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m, bool any, gm_err *err)
{
    if (l != d->next_layer || l >= d->n_layer || !m->router.data)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: the rows of layer %u where layer %u was due", l,
                          d->next_layer);
    const uint64_t N = d->sh.n_expert, K = d->sh.k, E = d->n_embd;
    cudaError_t e;
    if (any && (e = cudaMemcpyAsync(d->dhrows, d->hrows, K * E * sizeof(float), cudaMemcpyHostToDevice, d->st)) !=
                   cudaSuccess)
        return gm_cuda_fail(e, "uploading the host's experts", err);
    combine_split<<<(unsigned)((E + 255) / 256), 256, 0, d->st>>>(
        d->dmoe, d->drows, d->dhrows, (const int32_t *)(d->dres + d->at_ids) + (uint64_t)l * K,
        (const float *)(d->dres + d->at_w) + (uint64_t)l * K, d->dtab + l * N, (uint32_t)K, E);
    int rc = launched("launching the experts' sum", err);
    if (rc || (rc = queue_shared(d, m, err)))
        return rc;
    d->next_layer = l + 1;
    return 0;
}

extern "C" int gm_cuda_dec_end(gm_cuda_dec *d, const float *out_norm, const gm_cuda_mat *head, float *logits,
                               gm_err *err)
{
    if (d->next_layer != d->n_layer)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: the token ends after %u of %u layers", d->next_layer,
                          d->n_layer);
    d->next_layer = UINT32_MAX;
    const bool with = head && logits;
    if (with && (head->n_cols != d->n_embd || head->n_rows > d->n_vocab)) {
        if (d->mode == CAPTURE)
            abandon_capture(d);
        return gm_err_set(err, GM_EINVAL, "CUDA decode: an output head of %llu x %llu",
                          (unsigned long long)head->n_rows, (unsigned long long)head->n_cols);
    }
    const gm_cuda_mat h = with ? *head : gm_cuda_mat{NULL, 0, 0, 0};
    const uint32_t pos = token_pos(d);
    int rc = 0;
    if (d->mode == REPLAY && (d->rec_norm != out_norm || d->rec_head.data != h.data || d->rec_head.type != h.type ||
                              d->rec_head.n_rows != h.n_rows || d->rec_head.n_cols != h.n_cols) &&
        (rc = leave_graph(d, d->n_layer, pos, err)))
        return rc;
    cudaError_t e = cudaSuccess;
    if (d->mode == REPLAY) {
        e = cudaGraphLaunch(d->exec, d->st);
        d->replays++;
    } else {
        d->rec_norm = out_norm;
        d->rec_head = h;
        rc = queue_end(d, err);
        if (d->mode == CAPTURE) {
            cudaGraph_t g = NULL;
            const cudaError_t ce = cudaStreamEndCapture(d->st, &g);
            if (rc || ce != cudaSuccess || !g || cudaGraphInstantiate(&d->exec, g, 0) != cudaSuccess) {
                (void)cudaGetLastError();
                d->exec = NULL;
                d->no_graph = true;
            }
            if (g)
                cudaGraphDestroy(g);
            d->mode = DIRECT;
            if (rc)
                return rc;
            /* nothing ran while capturing: the graph runs the token, or without one, its launches */
            if (d->exec)
                e = cudaGraphLaunch(d->exec, d->st);
            else if ((rc = queue_recorded(d, d->n_layer, pos, err)) || (rc = queue_end(d, err)))
                return rc;
        } else if (rc) {
            return rc;
        }
    }
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "launching the decode token's graph", err);
    if ((e = cudaStreamSynchronize(d->st)) != cudaSuccess)
        return gm_cuda_fail(e, "running the decode token", err);
    if (with)
        memcpy(logits, d->hres + d->at_logits, head->n_rows * sizeof(float));
    return 0;
}

extern "C" bool gm_cuda_dec_graph(const gm_cuda_dec *d) { return d->exec != NULL; }
extern "C" uint64_t gm_cuda_dec_replays(const gm_cuda_dec *d) { return d->replays; }
extern "C" const float *gm_cuda_dec_x(const gm_cuda_dec *d) { return (const float *)(d->hres + d->at_x); }
extern "C" const float *gm_cuda_dec_xn(const gm_cuda_dec *d) { return (const float *)(d->hres + d->at_xn); }
extern "C" const void *gm_cuda_dec_k_rows(const gm_cuda_dec *d, uint32_t l) { return d->hres + d->at_k + l * d->kv_row; }
extern "C" const void *gm_cuda_dec_v_rows(const gm_cuda_dec *d, uint32_t l) { return d->hres + d->at_v + l * d->kv_row; }
extern "C" const int32_t *gm_cuda_dec_ids(const gm_cuda_dec *d, uint32_t l)
{
    return (const int32_t *)(d->hres + d->at_ids) + (uint64_t)l * d->sh.k;
}
extern "C" const float *gm_cuda_dec_weights(const gm_cuda_dec *d, uint32_t l)
{
    return (const float *)(d->hres + d->at_w) + (uint64_t)l * d->sh.k;
}
