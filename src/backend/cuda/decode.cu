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

/* Experts a token routes to, at most (expert_jobs' one block). */
#define GM_DEC_MAX_K 64u

static uint64_t up256(uint64_t b) { return (b + 255) / 256 * 256; }

struct gm_cuda_dec {
    gm_cuda_attn *a;
    cudaStream_t st;
    gm_cuda_dec_shape sh;
    uint32_t n_layer, n_embd, n_rot;
    uint64_t max_ff, n_vocab, kv_row; /* kv_row: a layer's cached rows of one token (K or V), bytes */
    /* the results' buffer, on the device (dres) and pinned on the host (hres), one layout:
     * [cs | x | xn | ids | weights | K rows | V rows | logits], each part at a 256-byte boundary;
     * a token's upload is [cs | x], its download [x .. logits] (or [x .. V rows]) */
    uint8_t *dres, *hres;
    uint64_t at_x, at_xn, at_ids, at_w, at_k, at_v, at_logits, end;
    float *dattn, *dmoe, *dlogits_r;      /* device: the attention's and the block's outputs, router logits */
    gm_mv_job *djobs;                     /* device: the experts' job table */
    float *dgu, *dh, *drows;              /* device: gate and up outputs, activations, experts' outputs */
    gm_cuda_q8_block *dhq;                /* device: the activations' 8-bit blocks */
    uint32_t next_layer;                  /* the layer a token expects next (UINT32_MAX: none begun) */
    bool with_logits;
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
    void *dev[] = {d->dres, d->dattn, d->dmoe, d->dlogits_r, d->djobs, d->dgu, d->dh, d->drows, d->dhq};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    cudaFreeHost(d->hres);
    free(d);
}

extern "C" int gm_cuda_dec_create(gm_cuda_dec **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, gm_err *err)
{
    *out = NULL;
    const gm_cuda_attn_shape *ash = gm_cuda_attn_shape_of(a);
    if (!sh->n_layer || !sh->n_expert || sh->n_expert > GM_ROUTE_MAX || !sh->k || sh->k > sh->n_expert ||
        sh->k > GM_DEC_MAX_K || !sh->max_ff || sh->max_ff % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: %u layers, %u of %u experts (at most %u of %u), experts of "
                          "%llu", sh->n_layer, sh->k, sh->n_expert, GM_DEC_MAX_K, GM_ROUTE_MAX,
                          (unsigned long long)sh->max_ff);
    gm_cuda_dec *d = (gm_cuda_dec *)calloc(1, sizeof *d);
    if (!d)
        return gm_err_set(err, GM_ENOMEM, "CUDA decode: out of host memory");
    d->a = a;
    d->st = gm_cuda_attn_stream(a);
    d->sh = *sh;
    d->n_layer = sh->n_layer;
    d->n_embd = ash->n_embd;
    d->n_rot = ash->n_rot;
    d->max_ff = sh->max_ff;
    d->n_vocab = sh->n_vocab;
    d->kv_row = (uint64_t)ash->n_head_kv * ash->head_dim * (ash->cache_type == GM_TYPE_F16 ? 2 : 4);
    d->next_layer = UINT32_MAX;
    const uint64_t E = d->n_embd, L = sh->n_layer, K = sh->k, ff = sh->max_ff;
    d->at_x = up256(d->n_rot * sizeof(float));
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
        (e = cudaMalloc((void **)&d->djobs, 3 * K * sizeof(gm_mv_job))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dgu, 2 * K * ff * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dh, K * ff * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->drows, K * E * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->dhq, K * ff / 32 * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&d->hres, d->end)) != cudaSuccess) {
        const int rc = gm_cuda_fail(e, "allocating the decode token's buffers", err);
        gm_cuda_dec_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

extern "C" int gm_cuda_dec_begin(gm_cuda_dec *d, const float *x, const float *rope_cs, gm_err *err)
{
    const uint64_t E = d->n_embd;
    memcpy(d->hres, rope_cs, d->n_rot * sizeof(float));
    memcpy(d->hres + d->at_x, x, E * sizeof(float));
    cudaError_t e = cudaMemcpyAsync(d->dres, d->hres, d->at_x + E * sizeof(float), cudaMemcpyHostToDevice, d->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "uploading the decode token", err);
    d->next_layer = 0;
    return 0;
}

/* x += add (when add is not NULL), then xn = rms_norm(x) * w: one warp */
static int add_norm(gm_cuda_dec *d, const float *add, const float *w, gm_err *err)
{
    add_rmsnorm<<<1, 32, 0, d->st>>>((float *)(d->dres + d->at_x), add, w, d->sh.eps, d->n_embd,
                                      (float *)(d->dres + d->at_xn));
    return launched("launching the residual's norm", err);
}

extern "C" int gm_cuda_dec_layer(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                                 void *kc, void *vc, uint32_t cap, uint32_t pos, gm_err *err)
{
    const gm_cuda_dec_shape *sh = &d->sh;
    const uint64_t E = d->n_embd, K = sh->k;
    if (l != d->next_layer || l >= d->n_layer)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: layer %u where layer %u was due", l, d->next_layer);
    if (m->ffn.dim != E || m->ffn.ff > d->max_ff || m->ffn.ff % 32 || m->router.n_rows != sh->n_expert ||
        m->router.n_cols != E)
        return gm_err_set(err, GM_EINVAL, "CUDA decode: layer %u's experts (%llu x %llu) or router (%llu x %llu) do "
                          "not fit the token's shape", l, (unsigned long long)m->ffn.dim,
                          (unsigned long long)m->ffn.ff, (unsigned long long)m->router.n_rows,
                          (unsigned long long)m->router.n_cols);
    float *xn = (float *)(d->dres + d->at_xn);
    int32_t *ids = (int32_t *)(d->dres + d->at_ids) + (uint64_t)l * K;
    float *wt = (float *)(d->dres + d->at_w) + (uint64_t)l * K;
    int rc;
    /* the attention */
    if ((rc = add_norm(d, l ? d->dmoe : NULL, m->attn_norm, err)) ||
        (rc = gm_cuda_attn_queue(d->a, w, kc, vc, cap, pos, xn, (const float *)d->dres, d->dattn,
                                 d->dres + d->at_k + l * d->kv_row, d->dres + d->at_v + l * d->kv_row, err)))
        return rc;
    /* the routing */
    gm_cuda_q8_block *xq = gm_cuda_attn_xq(d->a);
    bool xq_made = false;
    if ((rc = add_norm(d, d->dattn, m->ffn_norm, err)) ||
        (rc = gm_cuda_product(d->st, &m->router, xn, xq, &xq_made, d->dlogits_r, err)))
        return rc;
    if (m->router_b) {
        attn_add<<<(sh->n_expert + 255) / 256, 256, 0, d->st>>>(d->dlogits_r, m->router_b, sh->n_expert);
        if ((rc = launched("launching the router's bias", err)))
            return rc;
    }
    gm_route_args ra = {d->dlogits_r, m->sel_bias, sh->n_expert, sh->k, sh->softmax, sh->norm_topk, sh->scale, ids,
                        wt};
    route_topk<<<1, 32, 0, d->st>>>(ra);
    if ((rc = launched("launching the routing", err)))
        return rc;
    /* the experts */
    const gm_cuda_ffn_shape *fs = &m->ffn;
    const uint64_t ff = fs->ff;
    const bool gq = gm_cuda_ffn_q8(fs->gate_type), uq = gm_cuda_ffn_q8(fs->up_type), dq = gm_cuda_ffn_q8(fs->down_type);
    gm_expert_jobs_args ja = {ids, m->experts, d->djobs, sh->k, fs->gate_type == fs->up_type,
                              gq ? (const void *)xq : (const void *)xn, uq ? (const void *)xq : (const void *)xn,
                              d->dgu, d->dh, dq ? d->dhq : NULL, d->drows, ff, E};
    expert_jobs<<<1, GM_DEC_MAX_K, 0, d->st>>>(ja);
    if ((rc = launched("launching the experts' job table", err)))
        return rc;
    const gm_ffn_bufs b = {xn, E, xq, d->dgu, d->dh, d->dhq};
    if ((rc = gm_cuda_ffn_queue(d->st, fs, d->djobs, sh->k, &b, err)))
        return rc;
    cudaError_t e = cudaMemsetAsync(d->dmoe, 0, E * sizeof(float), d->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "clearing the block's output", err);
    combine_experts<<<(unsigned)((E + 255) / 256), 256, 0, d->st>>>(d->dmoe, d->drows, ids, wt, sh->k, E);
    if ((rc = launched("launching the experts' sum", err)))
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
    int rc;
    if ((rc = add_norm(d, d->dmoe, out_norm, err)))
        return rc;
    const bool with = head && logits;
    if (with) {
        if (head->n_cols != d->n_embd || head->n_rows > d->n_vocab)
            return gm_err_set(err, GM_EINVAL, "CUDA decode: an output head of %llu x %llu",
                              (unsigned long long)head->n_rows, (unsigned long long)head->n_cols);
        bool made = false;
        if ((rc = gm_cuda_product(d->st, head, (const float *)(d->dres + d->at_xn), gm_cuda_attn_xq(d->a), &made,
                                  (float *)(d->dres + d->at_logits), err)))
            return rc;
    }
    const uint64_t to = with ? d->at_logits + head->n_rows * sizeof(float) : d->at_logits;
    cudaError_t e = cudaMemcpyAsync(d->hres + d->at_x, d->dres + d->at_x, to - d->at_x, cudaMemcpyDeviceToHost, d->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "downloading the decode token", err);
    if ((e = cudaStreamSynchronize(d->st)) != cudaSuccess)
        return gm_cuda_fail(e, "running the decode token", err);
    if (with)
        memcpy(logits, d->hres + d->at_logits, head->n_rows * sizeof(float));
    return 0;
}

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
