/* One token's attention on the device (see cuda.h): the token's upload with its rotation's
 * cosines and sines, its 8-bit quantization, the q, k and v products (one launch when they share a
 * type), one launch that adds the biases, normalises and rotates every head and writes the token's
 * K and V rows into the cache, the heads' attention over the cached positions in up to
 * GM_ATTN_SPLITS parts (a warp each, so that the positions' loads spread over the device), the
 * parts merged (four warps a head) with the heads' sinks, the output product and the download of the output
 * and the token's cached rows. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/attn_kernels.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"

struct gm_cuda_attn {
    gm_cuda_attn_shape sh;
    cudaStream_t st;
    uint32_t max_ctx;
    uint64_t row_bytes;
    float *dq, *dk, *dv, *datt, *dparts; /* device */
    gm_cuda_q8_block *dxq, *dattq;        /* device: x's and att's 8-bit blocks */
    float *din, *dx, *dcs;                /* device: din = [x | cs], each uploaded in one copy */
    float *dres, *dout;                   /* device: dres = [out | K rows | V rows], downloaded in one */
    uint8_t *dkrow, *dvrow;               /* device: the token's cached rows, in dres */
    float *hin, *hout;                    /* pinned host: [x | cs], [out | K rows | V rows] */
    uint8_t *hrows;                       /* pinned host: K rows, then V rows, in hout */
    gm_attn_kernels ks;                   /* the kernels of the shape's head width */
};

static bool mat_ok(const gm_cuda_mat *m, uint64_t rows, uint64_t cols, const char **why)
{
    if (m->n_rows != rows || m->n_cols != cols) {
        *why = "projections whose shapes do not agree with the heads";
        return false;
    }
    if (!gm_cuda_matvec_q8_fits(m->type, cols) && !gm_cuda_can_dequant(m->type)) {
        *why = "a projection type without a CUDA product";
        return false;
    }
    return true;
}

extern "C" bool gm_cuda_attn_supports(const gm_cuda_attn_shape *sh, const gm_cuda_attn_layer *w, const char **why)
{
    const char *y = NULL;
    const uint32_t hd = sh->head_dim;
    const uint64_t qd = (uint64_t)sh->n_head * hd, kvd = (uint64_t)sh->n_head_kv * hd;
    if (!hd || hd % 32 || hd > GM_CUDA_ATTN_MAX_HD)
        y = "a head dim that is not a multiple of 32 up to 256";
    else if (!sh->n_head_kv || sh->n_head % sh->n_head_kv)
        y = "query heads that are not groups of the kv heads";
    else if (sh->n_rot > hd || sh->n_rot % 2 || (sh->neox && (sh->n_rot / 2) % 32))
        y = "a rotation the kernels do not pair";
    else if (sh->cache_type != GM_TYPE_F32 && sh->cache_type != GM_TYPE_F16)
        y = "an 8-bit KV cache";
    else if (sh->n_embd % 32)
        y = "a width that is not whole blocks of 32";
    else if (mat_ok(&w->wq, qd, sh->n_embd, &y) && mat_ok(&w->wk, kvd, sh->n_embd, &y) &&
             mat_ok(&w->wv, kvd, sh->n_embd, &y) && mat_ok(&w->wo, sh->n_embd, qd, &y))
        y = NULL;
    if (why)
        *why = y;
    return y == NULL;
}

extern "C" void gm_cuda_attn_free(gm_cuda_attn *a)
{
    if (!a)
        return;
    if (a->st)
        cudaStreamSynchronize(a->st);
    void *dev[] = {a->din, a->dq, a->dk, a->dv, a->datt, a->dres, a->dparts, a->dxq, a->dattq};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    cudaFreeHost(a->hin);
    cudaFreeHost(a->hout);
    if (a->st)
        cudaStreamDestroy(a->st);
    free(a);
}

extern "C" int gm_cuda_attn_create(gm_cuda_attn **out, const gm_cuda_attn_shape *sh, uint32_t max_ctx, gm_err *err)
{
    *out = NULL;
    const uint32_t hd = sh->head_dim;
    if (!max_ctx || !hd || hd % 32 || hd > GM_CUDA_ATTN_MAX_HD || !sh->n_head || !sh->n_head_kv || sh->n_embd % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA attention: %u heads of %u, a context of %u", sh->n_head, hd, max_ctx);
    gm_cuda_attn *a = (gm_cuda_attn *)calloc(1, sizeof *a);
    if (!a)
        return gm_err_set(err, GM_ENOMEM, "CUDA attention: out of host memory");
    a->sh = *sh;
    a->max_ctx = max_ctx;
    a->row_bytes = (uint64_t)hd * (sh->cache_type == GM_TYPE_F16 ? 2 : 4);
    const uint64_t E = sh->n_embd, qd = (uint64_t)sh->n_head * hd, kvd = (uint64_t)sh->n_head_kv * hd;
    const uint64_t n_split = GM_ATTN_SPLITS;
    const uint64_t big = qd > E ? qd : E;
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&a->st, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->din, (E + sh->n_rot + 2) * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dq, qd * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dk, kvd * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dv, kvd * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->datt, qd * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dres, E * sizeof(float) + 2 * sh->n_head_kv * a->row_bytes)) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dparts, n_split * sh->n_head * (hd + 2) * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dxq, big / 32 * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMalloc((void **)&a->dattq, big / 32 * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&a->hin, (E + sh->n_rot + 2) * sizeof(float))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&a->hout, E * sizeof(float) + 2 * sh->n_head_kv * a->row_bytes)) != cudaSuccess) {
        const int rc = gm_cuda_fail(e, "allocating the attention's buffers", err);
        gm_cuda_attn_free(a);
        return rc;
    }
    a->ks = gm_attn_kernels_for(hd); /* hd checked above */
    a->dx = a->din;
    a->dcs = a->din + E;
    a->dout = a->dres;
    a->dkrow = (uint8_t *)(a->dres + E); /* E is a multiple of 32: the rows stay 128-byte aligned */
    a->dvrow = a->dkrow + sh->n_head_kv * a->row_bytes;
    a->hrows = (uint8_t *)(a->hout + E);
    *out = a;
    return 0;
}

int gm_cuda_product(cudaStream_t st, const gm_cuda_mat *m, const float *x, gm_cuda_q8_block *xq, bool *xq_made,
                    float *y, gm_err *err)
{
    if (gm_cuda_matvec_q8_fits(m->type, m->n_cols)) {
        int rc;
        if (!*xq_made && (rc = gm_cuda_quantize_q8(x, m->n_cols, xq, st, err)))
            return rc;
        *xq_made = true;
        return gm_cuda_matvec_q8(m->type, m->data, m->n_rows, m->n_cols, xq, y, st, err);
    }
    return gm_cuda_matvec(m->type, m->data, m->n_rows, m->n_cols, x, y, st, err);
}

static int launched(const char *what, gm_err *err)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, what, err);
}

cudaStream_t gm_cuda_attn_stream(const gm_cuda_attn *a) { return a->st; }
const gm_cuda_attn_shape *gm_cuda_attn_shape_of(const gm_cuda_attn *a) { return &a->sh; }
gm_cuda_q8_block *gm_cuda_attn_xq(gm_cuda_attn *a) { return a->dxq; }

int gm_cuda_attn_queue(gm_cuda_attn *a, const gm_cuda_attn_layer *w, void *kc, void *vc, uint32_t cap, uint32_t pos,
                       const uint32_t *dpos, const float *dx, bool xq_made, const float *dcs, float *dout,
                       uint8_t *dkrow, uint8_t *dvrow, gm_err *err)
{
    const gm_cuda_attn_shape *sh = &a->sh;
    const uint32_t hd = sh->head_dim;
    const uint64_t E = sh->n_embd, rb = a->row_bytes;
    const uint32_t n_pos = pos + 1;
    if (!cap || n_pos > a->max_ctx || n_pos > cap)
        return gm_err_set(err, GM_ERANGE, "CUDA attention: position %u of a context of %u (%u rows)", pos,
                          a->max_ctx, cap);
    bool xq = xq_made, attq = false;
    int rc;
    if (w->wk.type == w->wq.type && w->wv.type == w->wq.type && gm_cuda_matvec_q8_fits(w->wq.type, E)) {
        /* one launch for the three: k's and v's few rows beside q's many */
        const void *mw[3] = {w->wq.data, w->wk.data, w->wv.data};
        const uint64_t rows[3] = {w->wq.n_rows, w->wk.n_rows, w->wv.n_rows};
        float *const ys[3] = {a->dq, a->dk, a->dv};
        if ((!xq && (rc = gm_cuda_quantize_q8(dx, E, a->dxq, a->st, err))) ||
            (rc = gm_cuda_matvec_q8_multi(w->wq.type, mw, rows, ys, 3, E, a->dxq, a->st, err)))
            return rc;
    } else if ((rc = gm_cuda_product(a->st, &w->wq, dx, a->dxq, &xq, a->dq, err)) ||
               (rc = gm_cuda_product(a->st, &w->wk, dx, a->dxq, &xq, a->dk, err)) ||
               (rc = gm_cuda_product(a->st, &w->wv, dx, a->dxq, &xq, a->dv, err))) {
        return rc;
    }
    gm_attn_post_args pa = {a->dq, a->dk, a->dv, w->bq, w->bk, w->bv, w->q_norm, w->k_norm, dcs,
                            (uint8_t *)kc, (uint8_t *)vc, dkrow, dvrow, rb, cap, pos % cap,
                            sh->n_head, sh->n_head_kv, hd, sh->n_rot, sh->neox, sh->norm_after_rope, sh->eps,
                            sh->cache_type, dpos};
    const gm_attn_kernels ks = a->ks;
    ks.post<<<sh->n_head + 2 * sh->n_head_kv, 32, 0, a->st>>>(pa);
    if ((rc = launched("launching the heads' normalisation and rotation", err)))
        return rc;
    /* with the position in device memory every possible part is launched, and those past the
     * position's last return at once */
    const uint32_t part = gm_attn_part_len(n_pos), n_split = dpos ? GM_ATTN_SPLITS : gm_attn_n_split(n_pos);
    gm_attn_dec_args da = {a->dq, (const uint8_t *)kc, (const uint8_t *)vc, rb, cap, sh->n_head, sh->n_head_kv,
                           hd, n_pos, part, sh->scale, sh->cache_type, a->dparts, dpos};
    ks.part<<<dim3((sh->n_head + GM_ATTN_HEADS_PER_BLOCK - 1) / GM_ATTN_HEADS_PER_BLOCK, n_split),
              32 * GM_ATTN_HEADS_PER_BLOCK, 0, a->st>>>(da);
    if ((rc = launched("launching the attention", err)))
        return rc;
    /* the output's 8-bit blocks made by the merge where its product takes them */
    attq = gm_cuda_matvec_q8_fits(w->wo.type, w->wo.n_cols) && w->wo.n_cols == (uint64_t)sh->n_head * hd;
    ks.merge<<<sh->n_head, 32 * GM_ATTN_MERGE_WARPS, 0, a->st>>>(a->dparts, n_split, sh->n_head, hd, w->sinks, a->datt, dpos,
                                           attq ? a->dattq : NULL);
    if ((rc = launched("launching the attention's merge", err)))
        return rc;
    if ((rc = gm_cuda_product(a->st, &w->wo, a->datt, a->dattq, &attq, dout, err)))
        return rc;
    if (w->bo) {
        attn_add<<<(unsigned)((E + 255) / 256), 256, 0, a->st>>>(dout, w->bo, E);
        if ((rc = launched("launching the output's bias", err)))
            return rc;
    }
    return 0;
}

extern "C" int gm_cuda_attn_token(gm_cuda_attn *a, const gm_cuda_attn_layer *w, void *kc, void *vc, uint32_t cap,
                                  uint32_t pos, const float *rope_cs, const float *x, float *out, void *k_rows,
                                  void *v_rows, gm_err *err)
{
    const gm_cuda_attn_shape *sh = &a->sh;
    const uint64_t E = sh->n_embd, rb = a->row_bytes;
    if (!cap || pos + 1 > a->max_ctx || pos + 1 > cap)
        return gm_err_set(err, GM_ERANGE, "CUDA attention: position %u of a context of %u (%u rows)", pos,
                          a->max_ctx, cap);
    memcpy(a->hin, x, E * sizeof(float));
    memcpy(a->hin + E, rope_cs, sh->n_rot * sizeof(float));
    cudaError_t e;
    if ((e = cudaMemcpyAsync(a->din, a->hin, (E + sh->n_rot) * sizeof(float), cudaMemcpyHostToDevice, a->st)) !=
        cudaSuccess)
        return gm_cuda_fail(e, "uploading the attention's token", err);
    int rc = gm_cuda_attn_queue(a, w, kc, vc, cap, pos, NULL, a->dx, false, a->dcs, a->dout, a->dkrow, a->dvrow, err);
    if (rc)
        return rc;
    if ((e = cudaMemcpyAsync(a->hout, a->dres, E * sizeof(float) + 2 * sh->n_head_kv * rb, cudaMemcpyDeviceToHost,
                             a->st)) != cudaSuccess)
        return gm_cuda_fail(e, "downloading the attention's output", err);
    if ((e = cudaStreamSynchronize(a->st)) != cudaSuccess)
        return gm_cuda_fail(e, "running the attention", err);
    memcpy(out, a->hout, E * sizeof(float));
    memcpy(k_rows, a->hrows, sh->n_head_kv * rb);
    memcpy(v_rows, a->hrows + sh->n_head_kv * rb, sh->n_head_kv * rb);
    return 0;
}

/* ---- a matrix times a vector from host memory ---- */

struct gm_cuda_mv {
    cudaStream_t st;
    uint64_t max_rows, max_cols;
    float *dx, *dy, *hx, *hy;
    gm_cuda_q8_block *dxq;
};

extern "C" void gm_cuda_mv_free(gm_cuda_mv *v)
{
    if (!v)
        return;
    if (v->st)
        cudaStreamSynchronize(v->st);
    cudaFree(v->dx);
    cudaFree(v->dy);
    cudaFree(v->dxq);
    cudaFreeHost(v->hx);
    cudaFreeHost(v->hy);
    if (v->st)
        cudaStreamDestroy(v->st);
    free(v);
}

extern "C" int gm_cuda_mv_create(gm_cuda_mv **out, uint64_t max_rows, uint64_t max_cols, gm_err *err)
{
    *out = NULL;
    if (!max_rows || !max_cols || max_cols % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA product: %llu rows of %llu values", (unsigned long long)max_rows,
                          (unsigned long long)max_cols);
    gm_cuda_mv *v = (gm_cuda_mv *)calloc(1, sizeof *v);
    if (!v)
        return gm_err_set(err, GM_ENOMEM, "CUDA product: out of host memory");
    v->max_rows = max_rows;
    v->max_cols = max_cols;
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&v->st, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&v->dx, max_cols * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&v->dy, max_rows * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&v->dxq, max_cols / 32 * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&v->hx, max_cols * sizeof(float))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&v->hy, max_rows * sizeof(float))) != cudaSuccess) {
        const int rc = gm_cuda_fail(e, "allocating the product's buffers", err);
        gm_cuda_mv_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

extern "C" bool gm_cuda_mv_supports(const gm_cuda_mat *m)
{
    return m->n_cols % 32 == 0 && (gm_cuda_matvec_q8_fits(m->type, m->n_cols) || gm_cuda_can_dequant(m->type));
}

extern "C" int gm_cuda_mv_run(gm_cuda_mv *v, const gm_cuda_mat *m, const float *x, float *y, gm_err *err)
{
    if (m->n_rows > v->max_rows || m->n_cols > v->max_cols || !gm_cuda_mv_supports(m))
        return gm_err_set(err, GM_EINVAL, "CUDA product: a matrix of %llu x %llu %s", (unsigned long long)m->n_rows,
                          (unsigned long long)m->n_cols, gm_type_name(m->type));
    memcpy(v->hx, x, m->n_cols * sizeof(float));
    cudaError_t e = cudaMemcpyAsync(v->dx, v->hx, m->n_cols * sizeof(float), cudaMemcpyHostToDevice, v->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "uploading the product's vector", err);
    bool xq = false;
    int rc = gm_cuda_product(v->st, m, v->dx, v->dxq, &xq, v->dy, err);
    if (rc)
        return rc;
    if ((e = cudaMemcpyAsync(v->hy, v->dy, m->n_rows * sizeof(float), cudaMemcpyDeviceToHost, v->st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(v->st)) != cudaSuccess)
        return gm_cuda_fail(e, "running the product", err);
    memcpy(y, v->hy, m->n_rows * sizeof(float));
    return 0;
}
