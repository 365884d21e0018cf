/* One token's routed experts on the device, and the device memory their weights live in (see
 * cuda.h). A start queues, on the object's own stream: the token's upload, its quantization to
 * 8-bit blocks where a gate or up product takes them, every expert's gate and up products in one
 * grouped launch (two when their types differ), the activation, the activations' quantization
 * where the down product takes blocks, the down products in one grouped launch and the results'
 * download into pinned memory: five to seven launches a layer whatever the number of experts, so
 * that a token's many small products do not each pay a launch. */
#include <cuda_runtime.h>
#include <stdlib.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/ffn_kernels.cuh"
#include "backend/cuda/internal.h"

typedef void (*jobs_kernel)(const gm_mv_job *, uint64_t, uint64_t, uint64_t);

/* The grouped product of one weight type: the 8-bit one where there is one, else the
 * element-by-element one. */
struct product {
    jobs_kernel k;
    bool q8;
    unsigned align; /* what the 8-bit loads need of a row's start and length */
    jobs_kernel k2; /* the 8-bit one with two rows a warp */
    unsigned values, lanes; /* the 8-bit kernel's block: its values, the lanes it takes */
};

static bool product_of(uint32_t type, product *p)
{
    *p = product{NULL, false, 1, NULL, 1, 1};
    if (gm_with_q8_dot(type, [&](auto tag) {
            typedef typename decltype(tag)::type T;
            *p = product{matvec_q8_jobs<T>, true, T::align, matvec_q8_jobs<T, 2>, T::values, T::lanes};
        }))
        return true;
    return gm_with_decoder(type, [&](auto d) { *p = product{matvec_elem_jobs<decltype(d)>, false, 1, NULL, 1, 1}; });
}

/* Whether a matrix of n_cols-value rows of type has a product; why not in *why. */
static bool matrix_ok(uint32_t type, uint64_t n_cols, product *p, const char **why)
{
    if (!product_of(type, p)) {
        *why = "a weight type without a CUDA product";
        return false;
    }
    uint64_t rb;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_cols, &rb, &sub) != 0) {
        *why = "rows that are not whole blocks";
        return false;
    }
    if (p->q8 && (n_cols % 32 || rb % p->align)) {
        *why = "rows not aligned for the 8-bit product";
        return false;
    }
    return true;
}

extern "C" bool gm_cuda_ffn_supports(const gm_cuda_ffn_shape *sh, const char **why)
{
    const char *w = NULL;
    product p;
    const bool ok = matrix_ok(sh->gate_type, sh->dim, &p, &w) && matrix_ok(sh->up_type, sh->dim, &p, &w) &&
                    matrix_ok(sh->down_type, sh->ff, &p, &w);
    if (why)
        *why = w;
    return ok;
}

/* Where the job tables start after n_x float32 of tokens: the next 256-byte boundary. */
static uint64_t tokens_end(uint64_t n_x) { return (n_x * sizeof(float) + 255) / 256 * 256; }

struct gm_cuda_ffn {
    cudaStream_t st;
    uint64_t max_dim, max_ff;
    uint32_t max_n, max_tok;
    /* the tokens, then (from the first 256-byte boundary after this start's tokens) the job tables
     * of its launches: uploaded in one copy, on the device (dup) from pinned host memory (hup) */
    uint8_t *dup, *hup;
    float *dx, *hx;                       /* the tokens: dup's and hup's start */
    gm_mv_job *djobs, *hjobs;             /* the job tables of the start in flight, in dup and hup */
    float *dgu, *dh, *dout;               /* device: gate and up outputs, activations, results */
    gm_cuda_q8_block *dxq, *dhq;          /* device: the token's and the activations' 8-bit blocks */
    float *hout;                          /* pinned host: the results */
    uint32_t n;                           /* experts of the start in flight (0: none) */
    uint64_t dim;
};

extern "C" void gm_cuda_ffn_free(gm_cuda_ffn *f)
{
    if (!f)
        return;
    if (f->st)
        cudaStreamSynchronize(f->st);
    cudaFree(f->dup);
    cudaFree(f->dgu);
    cudaFree(f->dh);
    cudaFree(f->dout);
    cudaFree(f->dxq);
    cudaFree(f->dhq);
    cudaFreeHost(f->hup);
    cudaFreeHost(f->hout);
    if (f->st)
        cudaStreamDestroy(f->st);
    free(f);
}

extern "C" int gm_cuda_ffn_create(gm_cuda_ffn **out, uint64_t max_dim, uint64_t max_ff, uint32_t max_pairs,
                                  uint32_t max_tokens, gm_err *err)
{
    *out = NULL;
    /* a grouped launch takes up to 65535 jobs (its grid's y), and gate and up share one: 2n */
    if (!max_dim || !max_ff || !max_pairs || max_pairs > 32767 || !max_tokens)
        return gm_err_set(err, GM_EINVAL, "CUDA experts: a shape of %llu x %llu, %u pairs of %u tokens",
                          (unsigned long long)max_dim, (unsigned long long)max_ff, max_pairs, max_tokens);
    gm_cuda_ffn *f = (gm_cuda_ffn *)calloc(1, sizeof *f);
    if (!f)
        return gm_err_set(err, GM_ENOMEM, "CUDA experts: out of host memory");
    f->max_dim = max_dim;
    f->max_ff = max_ff;
    f->max_n = max_pairs;
    f->max_tok = max_tokens;
    const uint64_t n = max_pairs, nx = (uint64_t)max_tokens * max_dim, hq = (n * max_ff + 31) / 32;
    const uint64_t up = tokens_end(nx) + 3 * n * sizeof(gm_mv_job);
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&f->st, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&f->dup, up)) != cudaSuccess ||
        (e = cudaMalloc((void **)&f->dgu, 2 * n * max_ff * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&f->dh, n * max_ff * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&f->dout, n * max_dim * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&f->dxq, (nx + 31) / 32 * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMalloc((void **)&f->dhq, hq * sizeof(gm_cuda_q8_block))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&f->hup, up)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&f->hout, n * max_dim * sizeof(float))) != cudaSuccess) {
        const int rc = gm_cuda_fail(e, "allocating the experts' scratch", err);
        gm_cuda_ffn_free(f);
        return rc;
    }
    f->dx = (float *)f->dup;
    f->hx = (float *)f->hup;
    *out = f;
    return 0;
}

/* Queues n_jobs products of n_rows x n_cols matrices of type (the job table jobs, device memory). */
static int launch_jobs(cudaStream_t st, const gm_mv_job *jobs, uint32_t type, uint64_t n_rows, uint64_t n_cols,
                       uint32_t n_jobs, gm_err *err)
{
    product p;
    uint64_t rb;
    gm_err sub = {0};
    if (!product_of(type, &p) || gm_type_row_bytes(type, n_cols, &rb, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA experts: no product for %s", gm_type_name(type));
    const unsigned r = p.k2 ? gm_rows_a_warp(n_cols / p.values, p.lanes) : 1;
    const dim3 grid((unsigned)((n_rows + WARPS * r - 1) / (WARPS * r)), n_jobs);
    (r == 2 ? p.k2 : p.k)<<<grid, 32 * WARPS, 0, st>>>(jobs, rb, n_rows, n_cols);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the experts' products", err);
}

static int launch_quantize(cudaStream_t st, const float *x, uint64_t n, gm_cuda_q8_block *out, gm_err *err)
{
    quantize<<<(unsigned)((n / 32 + WARPS - 1) / WARPS), 32 * WARPS, 0, st>>>(x, n, out);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching a quantization", err);
}

bool gm_cuda_ffn_q8(uint32_t type)
{
    product p;
    return product_of(type, &p) && p.q8;
}

int gm_cuda_ffn_queue(cudaStream_t st, const gm_cuda_ffn_shape *sh, const gm_mv_job *jobs, uint32_t n,
                      const gm_ffn_bufs *b, gm_err *err)
{
    product pg, pu, pd;
    if (!product_of(sh->gate_type, &pg) || !product_of(sh->up_type, &pu) || !product_of(sh->down_type, &pd))
        return gm_err_set(err, GM_EINVAL, "CUDA experts: a weight type without a product");
    const uint64_t dim = sh->dim, ff = sh->ff;
    int rc = 0;
    if ((pg.q8 || pu.q8) && !b->xq_made && (rc = launch_quantize(st, b->x, b->n_x, b->xq, err)))
        return rc;
    if (sh->gate_type == sh->up_type ? (rc = launch_jobs(st, jobs, sh->gate_type, ff, dim, 2 * n, err))
                                     : ((rc = launch_jobs(st, jobs, sh->gate_type, ff, dim, n, err)) ||
                                        (rc = launch_jobs(st, jobs + n, sh->up_type, ff, dim, n, err))))
        return rc;
    const uint64_t nh = (uint64_t)n * ff;
    glu_jobs<<<(unsigned)((nh + 255) / 256), 256, 0, st>>>(b->gu, b->h, pd.q8 ? b->hq : NULL, ff, n, sh->glu);
    cudaError_t e;
    if ((e = cudaGetLastError()) != cudaSuccess)
        return gm_cuda_fail(e, "launching the experts' activation", err);
    return launch_jobs(st, jobs + 2 * n, sh->down_type, dim, ff, n, err);
}

extern "C" int gm_cuda_ffn_start(gm_cuda_ffn *f, const gm_cuda_ffn_shape *sh, const gm_cuda_expert *ex,
                                 const uint32_t *tok, uint32_t n, const float *x, uint32_t n_tok, gm_err *err)
{
    const char *why = NULL;
    if (f->n)
        return gm_err_set(err, GM_EINVAL, "CUDA experts: a start before the last one finished");
    if (n == 0 || n > f->max_n || n_tok == 0 || n_tok > f->max_tok || (!tok && n_tok != 1) || sh->dim > f->max_dim ||
        sh->ff > f->max_ff)
        return gm_err_set(err, GM_EINVAL, "CUDA experts: %u pairs of %u tokens of %llu x %llu (room for %u of %u, "
                          "%llu x %llu)", n, n_tok, (unsigned long long)sh->dim, (unsigned long long)sh->ff, f->max_n,
                          f->max_tok, (unsigned long long)f->max_dim, (unsigned long long)f->max_ff);
    if (!gm_cuda_ffn_supports(sh, &why))
        return gm_err_set(err, GM_EINVAL, "CUDA experts: %s", why);
    const bool gq = gm_cuda_ffn_q8(sh->gate_type), uq = gm_cuda_ffn_q8(sh->up_type), dq = gm_cuda_ffn_q8(sh->down_type);
    const uint64_t dim = sh->dim, ff = sh->ff;
    for (uint32_t j = 0; tok && j < n; j++)
        if (tok[j] >= n_tok)
            return gm_err_set(err, GM_EINVAL, "CUDA experts: pair %u takes token %u of %u", j, tok[j], n_tok);
    memcpy(f->hx, x, (uint64_t)n_tok * dim * sizeof(float));
    const uint64_t jobs_at = tokens_end((uint64_t)n_tok * dim);
    f->djobs = (gm_mv_job *)(f->dup + jobs_at);
    f->hjobs = (gm_mv_job *)(f->hup + jobs_at);
    for (uint32_t j = 0; j < n; j++) {
        const uint64_t t = tok ? tok[j] : 0;
        const void *xg = gq ? (const void *)(f->dxq + t * dim / 32) : (const void *)(f->dx + t * dim);
        const void *xu = uq ? (const void *)(f->dxq + t * dim / 32) : (const void *)(f->dx + t * dim);
        gm_expert_jobs(f->hjobs, j, n, sh->gate_type == sh->up_type, ex[j], xg, xu, f->dgu, f->dh,
                       dq ? f->dhq : NULL, f->dout, ff, dim);
    }
    cudaError_t e;
    if ((e = cudaMemcpyAsync(f->dup, f->hup, jobs_at + 3 * n * sizeof(gm_mv_job), cudaMemcpyHostToDevice, f->st)) !=
        cudaSuccess)
        return gm_cuda_fail(e, "uploading the token", err);
    const gm_ffn_bufs b = {f->dx, (uint64_t)n_tok * dim, f->dxq, false, f->dgu, f->dh, f->dhq};
    int rc = gm_cuda_ffn_queue(f->st, sh, f->djobs, n, &b, err);
    if (rc)
        return rc;
    if ((e = cudaMemcpyAsync(f->hout, f->dout, (uint64_t)n * dim * sizeof(float), cudaMemcpyDeviceToHost, f->st)) !=
        cudaSuccess)
        return gm_cuda_fail(e, "downloading the experts' outputs", err);
    f->n = n;
    f->dim = dim;
    return 0;
}

extern "C" int gm_cuda_ffn_finish(gm_cuda_ffn *f, float *out, gm_err *err)
{
    if (!f->n)
        return gm_err_set(err, GM_EINVAL, "CUDA experts: nothing started");
    const uint32_t n = f->n;
    f->n = 0;
    cudaError_t e = cudaStreamSynchronize(f->st);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "computing the experts", err);
    if (out)
        memcpy(out, f->hout, (uint64_t)n * f->dim * sizeof(float));
    return 0;
}

extern "C" const float *gm_cuda_ffn_rows(const gm_cuda_ffn *f) { return f->hout; }

struct gm_cuda_slab {
    uint8_t *base;
    uint64_t bytes;
};

extern "C" int gm_cuda_slab_create(gm_cuda_slab **out, uint64_t want_bytes, uint64_t min_bytes, gm_err *err)
{
    *out = NULL;
    gm_cuda_slab *s = (gm_cuda_slab *)calloc(1, sizeof *s);
    if (!s)
        return gm_err_set(err, GM_ENOMEM, "CUDA: out of host memory");
    uint64_t b = want_bytes;
    cudaError_t e = cudaErrorMemoryAllocation;
    while (b >= min_bytes && b > 0) {
        if ((e = cudaMalloc((void **)&s->base, b)) == cudaSuccess)
            break;
        if (e != cudaErrorMemoryAllocation)
            break;
        (void)cudaGetLastError();
        b -= b / 8 > 0 ? b / 8 : b;
    }
    if (e != cudaSuccess) {
        free(s);
        if (e == cudaErrorMemoryAllocation)
            return gm_err_set(err, GM_ENOMEM, "CUDA: no %.2f GB of device memory free (asked %.2f GB)",
                              (double)min_bytes / 1e9, (double)want_bytes / 1e9);
        return gm_cuda_fail(e, "allocating device memory for weights", err);
    }
    s->bytes = b;
    *out = s;
    return 0;
}

extern "C" void gm_cuda_slab_free(gm_cuda_slab *s)
{
    if (!s)
        return;
    cudaFree(s->base);
    free(s);
}

extern "C" uint64_t gm_cuda_slab_bytes(const gm_cuda_slab *s) { return s->bytes; }
extern "C" uint8_t *gm_cuda_slab_base(gm_cuda_slab *s) { return s->base; }

extern "C" int gm_cuda_host_pin(const void *p, uint64_t bytes, gm_err *err)
{
    int dev = 0, ro = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, dev);
    if (e == cudaSuccess)
        e = cudaHostRegister((void *)p, bytes, cudaHostRegisterPortable | (ro ? cudaHostRegisterReadOnly : 0));
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError(); /* not sticky: the device goes on */
    return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: page-locking %.2f GB of host memory: %s", (double)bytes / 1e9,
                      cudaGetErrorString(e));
}

extern "C" void gm_cuda_host_unpin(const void *p)
{
    if (p)
        cudaHostUnregister((void *)p);
}

extern "C" int gm_cuda_upload(void *dst, const void *src, uint64_t bytes, gm_err *err)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "copying weights to the device", err);
}
