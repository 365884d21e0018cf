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

template <typename T>
static __global__ void matvec_q8_jobs(const gm_mv_job *jobs, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols)
{
    const gm_mv_job j = jobs[blockIdx.y];
    gm_matvec_rows<WARPS, 2, T>(j.w, row_bytes, n_rows, n_cols, (const gm_cuda_q8_block *)j.x, j.y);
}

template <typename D>
static __global__ void matvec_elem_jobs(const gm_mv_job *jobs, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols)
{
    const gm_mv_job j = jobs[blockIdx.y];
    gm_matvec_elems<WARPS, D>(j.w, row_bytes, n_rows, n_cols, (const float *)j.x, j.y);
}

static __device__ __forceinline__ float gm_dev_silu(float x) { return x / (1.0f + expf(-x)); }

/* h[j ff + i] = act(gate) * up of expert j's value i, for n experts whose gate and up outputs
 * are gu[2 j ff ..] and gu[(2 j + 1) ff ..]: the CPU's glu (infer/moe.c), the same formulas. */
static __global__ void glu_jobs(const float *gu, float *h, uint64_t ff, uint64_t n, gm_cuda_glu p)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * ff)
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
}

#endif
