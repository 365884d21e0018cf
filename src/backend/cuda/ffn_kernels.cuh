/* backend/cuda/ffn_kernels: the kernels of one token's routed experts on the device (ffn.cu
 * launches them), apart from their launches so that tests/unit/test_cuda_emu.cpp can run the same
 * source on the CPU (internal to the module).
 *
 * Grouped products: one launch multiplies several matrices of one shape and type, each by its
 * own vector (an expert's gate and up by the token, its down by its own activation): job
 * blockIdx.y of the job table, its rows shared among blockIdx.x as in the single products
 * (internal.h's frames). */
#ifndef GM_BACKEND_CUDA_FFN_KERNELS_CUH
#define GM_BACKEND_CUDA_FFN_KERNELS_CUH

#include <cuda_runtime.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"
#include "backend/cuda/matvec_q8_kernels.cuh"

/* One product of a grouped launch: y = w x (device memory; x float32 or 8-bit blocks). */
struct gm_mv_job {
    const uint8_t *w;
    const void *x;
    float *y;
};

/* Expert j's three jobs of a grouped start of n experts (ffn.cu's layout): its gate and up, at
 * 2j and 2j + 1 when one launch takes both (one: their types agree), else at j and n + j, writing
 * gu[2j ff ..] and gu[(2j + 1) ff ..]; its down at 2n + j, from its activation h (8-bit blocks
 * hq[j ff / 32 ..] where hq is not NULL, else h[j ff ..]) into out[j dim ..]. xg and xu: the token
 * (float32 or 8-bit blocks) for the gate and the up products. */
static __host__ __device__ __forceinline__ void gm_expert_jobs(gm_mv_job *jobs, uint32_t j, uint32_t n, bool one,
                                                               const gm_cuda_expert &ex, const void *xg,
                                                               const void *xu, float *gu, const float *h,
                                                               const gm_cuda_q8_block *hq, float *out, uint64_t ff,
                                                               uint64_t dim)
{
    jobs[one ? 2 * j : j] = gm_mv_job{(const uint8_t *)ex.gate, xg, gu + 2 * j * ff};
    jobs[one ? 2 * j + 1 : n + j] = gm_mv_job{(const uint8_t *)ex.up, xu, gu + (2 * j + 1) * ff};
    jobs[2 * n + j] = gm_mv_job{(const uint8_t *)ex.down, hq ? (const void *)(hq + j * ff / 32) : (const void *)(h + j * ff),
                                out + j * dim};
}

/* The job table of a decode token's k routed experts, on the device, from the ids the routing
 * chose and the layer's table of every expert's matrices (route_kernels' route_topk_jobs): one
 * thread an expert. An entry without matrices (an expert the host computes) gives jobs without
 * one, which the products skip. */
struct gm_expert_jobs_args {
    const int32_t *ids;
    const gm_cuda_expert *table;
    gm_mv_job *jobs;
    uint32_t k;
    bool one;
    const void *xg, *xu;
    float *gu;
    const float *h;
    const gm_cuda_q8_block *hq;
    float *out;
    uint64_t ff, dim;
};

/* The job table of one expert given by value (a shared expert, a dense FFN): one thread. */
static __global__ void expert_jobs_one(gm_cuda_expert ex, gm_mv_job *jobs, bool one, const void *xg, const void *xu,
                                       float *gu, const float *h, const gm_cuda_q8_block *hq, float *out, uint64_t ff,
                                       uint64_t dim)
{
    if (threadIdx.x == 0)
        gm_expert_jobs(jobs, 0, 1, one, ex, xg, xu, gu, h, hq, out, ff, dim);
}

/* R rows a warp (internal.h's gm_rows_a_warp): WARPS * R rows a thread block. Two rows a warp
 * take their half-warp's steps three at a time (a 1536-column Q4_K row is three). */
template <typename T, unsigned R = 1>
static __global__ void matvec_q8_jobs(const gm_mv_job *jobs, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols)
{
    const gm_mv_job j = jobs[blockIdx.y];
    if (!j.w) /* an expert left to the host */
        return;
    gm_matvec_rows<WARPS, R == 1 ? 2 : 3, T, gm_cuda_q8_block, R>(j.w, row_bytes, n_rows, n_cols,
                                                                   (const gm_cuda_q8_block *)j.x, j.y);
}

template <typename D>
static __global__ void matvec_elem_jobs(const gm_mv_job *jobs, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols)
{
    const gm_mv_job j = jobs[blockIdx.y];
    if (!j.w)
        return;
    gm_matvec_elems<WARPS, D>(j.w, row_bytes, n_rows, n_cols, (const float *)j.x, j.y);
}

static __device__ __forceinline__ float gm_dev_silu(float x) { return x / (1.0f + expf(-x)); }

/* h[j ff + i] = act(gate) * up of expert j's value i, for n experts whose gate and up outputs
 * are gu[2 j ff ..] and gu[(2 j + 1) ff ..]: the CPU's glu (infer/moe.c), the same formulas; with
 * hq (not NULL; ff a multiple of 32, blocks of a multiple of 32 threads), h's 8-bit blocks too, a
 * warp's 32 values one block, as the quantize kernel makes them. */
static __global__ void glu_jobs(const float *gu, float *h, gm_cuda_q8_block *hq, uint64_t ff, uint64_t n,
                                gm_cuda_glu p)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * ff) /* whole warps: n ff is a multiple of 32 */
        return;
    const uint64_t j = i / ff, k = i % ff;
    const float g = gu[2 * j * ff + k], u = gu[(2 * j + 1) * ff + k];
    float r;
    switch (p.act) {
    case GM_CUDA_SITU: {
        const float a = tanhf(g * (1.0f / p.beta)) * p.beta * (1.0f / (1.0f + expf(-g)));
        r = a * (p.lbeta > 0.0f ? tanhf(u * (1.0f / p.lbeta)) * p.lbeta : u);
        break;
    }
    case GM_CUDA_SWIGLU_LIMIT: {
        const float a = g < p.limit ? g : p.limit;
        const float b = u < -p.limit ? -p.limit : u > p.limit ? p.limit : u;
        r = gm_dev_silu(a) * b;
        break;
    }
    case GM_CUDA_SWIGLU_OAI: {
        const float lim = 7.0f, alpha = 1.702f;
        const float a = g < lim ? g : lim;
        const float b = u < -lim ? -lim : u > lim ? lim : u;
        r = a / (1.0f + expf(-alpha * a)) * (b + 1.0f);
        break;
    }
    default: r = gm_dev_silu(g) * u;
    }
    h[i] = r;
    if (hq)
        gm_q8_quantize_warp(r, threadIdx.x % 32, &hq[i / 32]);
}

#endif
