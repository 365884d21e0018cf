/* backend/cuda/mm_kernels: matrix-matrix products of a prompt's chunk on the device (prefill.cu
 * launches them; internal to the module). Y = X W^T for n rows of X (tokens, or the (token,
 * expert) pairs of a layer's routed experts, gathered by index) and a weight matrix W of any type
 * blocks.cuh decodes:
 *
 *   mm_tc: the tensor cores' half-precision products. A thread block takes a tile of MM_BM weight
 *   rows by MM_BN rows of X, MM_BK values a step: it decodes its weights' values (blocks.cuh's
 *   D::at, the CPU reference's arithmetic) and loads X's into shared memory as half (saturated to
 *   its range), and four warps multiply them by WMMA fragments of 16 x 16 x 16, summed in float32.
 *   A weight tile is decoded once for MM_BN rows of X, so decoding costs a chunk's tokens or an
 *   expert's pairs little.
 *
 *   mm_f32: float32 weights (routers, a shared expert's gate) in float32 throughout, so that the
 *   routing sees the logits the CPU computes to rounding: 16 x 16 tiles of outputs, one thread each.
 *
 * Grouped products (the routed experts): MM_BN pairs of one expert a tile, from a tile table that
 * the device builds (prefill.cu's grouping); blocks past the table's count return at once, so that
 * a launch sized for the most tiles needs no count from the host. */
#ifndef GM_BACKEND_CUDA_MM_KERNELS_CUH
#define GM_BACKEND_CUDA_MM_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#ifdef __CUDACC__ /* the emulation of tests/unit/test_cuda_emu.cpp takes mm_f32 and the tiles only */
#include <cuda_fp16.h>
#include <mma.h>
#endif

#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"

#define MM_BM 64u /* weight rows a tile */
#define MM_BN 64u /* rows of X a tile */
#define MM_BK 32u /* values a step: every type's rows are whole blocks of 32 */
#define MM_THREADS 128u

/* A tile of a grouped product: n (<= MM_BN) pairs from pair first on, all of expert e. */
struct gm_mm_tile {
    uint32_t e, first, n;
};

struct gm_mm_args {
    const uint8_t *w;                /* W (dense), or NULL: the experts' */
    const gm_cuda_expert *experts;   /* grouped: the layer's table of every expert */
    uint32_t which;                  /* grouped: 0 gate, 1 up, 2 down */
    const gm_mm_tile *tiles;         /* grouped: the tiles, *n_tiles of them */
    const uint32_t *n_tiles;
    uint64_t row_bytes, n_rows, n_cols;
    const float *x;                  /* X's rows, ldx floats apart */
    uint64_t ldx;
    const uint32_t *xrow;            /* X's row of row i: xrow[i], or NULL: i */
    float *y;                        /* Y's rows (one per row of X, in the order of i), ldy floats apart */
    uint64_t ldy;
    uint32_t n;                      /* dense: rows of X */
    const float *bias;               /* added to Y's column r (n_rows floats), or NULL */
};

#ifdef __CUDACC__
static __device__ __forceinline__ __half mm_half(float v)
{
    const float lim = 65504.0f;
    return __float2half_rn(v > lim ? lim : v < -lim ? -lim : v);
}

template <typename D> static __global__ void __launch_bounds__(MM_THREADS) mm_tc(gm_mm_args a)
{
    using namespace nvcuda;
    __shared__ __align__(32) __half ws[MM_BM][MM_BK + 8];
    __shared__ __align__(32) __half xs[MM_BN][MM_BK + 8];
    __shared__ __align__(32) float cs[MM_BN][MM_BM + 4];
    const unsigned tid = threadIdx.x, warp = tid / 32;
    const uint64_t r0 = (uint64_t)blockIdx.x * MM_BM;
    const uint8_t *w = a.w;
    uint32_t first, cnt;
    if (a.tiles) {
        if (blockIdx.y >= *a.n_tiles)
            return;
        const gm_mm_tile t = a.tiles[blockIdx.y];
        const gm_cuda_expert ex = a.experts[t.e];
        w = (const uint8_t *)(a.which == 0 ? ex.gate : a.which == 1 ? ex.up : ex.down);
        first = t.first;
        cnt = t.n;
    } else {
        first = blockIdx.y * MM_BN;
        if (first >= a.n)
            return;
        cnt = a.n - first < MM_BN ? a.n - first : MM_BN;
    }
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    /* each thread: 16 values of weight row tid / 2 and of X's row tid / 2, from (tid % 2) 16 on */
    const unsigned lr = tid / 2, lc = (tid % 2) * 16;
    const uint64_t wr = r0 + lr;
    const uint8_t *wrow = wr < a.n_rows ? w + wr * a.row_bytes : NULL;
    const float *xrow = NULL;
    if (lr < cnt)
        xrow = a.x + (uint64_t)(a.xrow ? a.xrow[first + lr] : first + lr) * a.ldx;
    const unsigned wm = (warp % 2) * 32, wn = (warp / 2) * 32;
    for (uint64_t k0 = 0; k0 < a.n_cols; k0 += MM_BK) {
        /* the 16 values decoded into registers first, so that what they share (a block's scales)
         * is loaded once: no store between the loads; a block of 16 or more values holds all 16
         * (c0 a multiple of 16), and (e0 & ~15) | e tells the compiler so */
        float v[16];
        const uint64_t c0 = k0 + lc;
        if (wrow && D::block >= 16) {
            const uint8_t *blk = wrow + c0 / D::block * D::bytes;
            const int e0 = (int)(c0 % D::block) & ~15;
#pragma unroll
            for (unsigned e = 0; e < 16; e++)
                v[e] = D::at(blk, e0 | (int)e);
        } else {
#pragma unroll
            for (unsigned e = 0; e < 16; e++)
                v[e] = wrow ? D::at(wrow + (c0 + e) / D::block * D::bytes, (int)((c0 + e) % D::block)) : 0.0f;
        }
#pragma unroll
        for (unsigned e = 0; e < 16; e++)
            ws[lr][lc + e] = __float2half_rn(v[e]);
        if (xrow) {
            const float4 *src = (const float4 *)(xrow + k0 + lc);
#pragma unroll
            for (unsigned q = 0; q < 4; q++) {
                const float4 v = src[q];
                xs[lr][lc + 4 * q] = mm_half(v.x);
                xs[lr][lc + 4 * q + 1] = mm_half(v.y);
                xs[lr][lc + 4 * q + 2] = mm_half(v.z);
                xs[lr][lc + 4 * q + 3] = mm_half(v.w);
            }
        } else {
#pragma unroll
            for (unsigned e = 0; e < 16; e++)
                xs[lr][lc + e] = __float2half_rn(0.0f);
        }
        __syncthreads();
#pragma unroll
        for (unsigned kk = 0; kk < MM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(fa[i], &ws[wm + 16 * i][kk], MM_BK + 8);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], &xs[wn + 16 * j][kk], MM_BK + 8);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++)
                    wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&cs[wn + 16 * j][wm + 16 * i], acc[i][j], MM_BM + 4, wmma::mem_col_major);
    __syncthreads();
    for (unsigned i = tid; i < MM_BN * MM_BM; i += MM_THREADS) {
        const unsigned t = i / MM_BM, r = i % MM_BM;
        if (t < cnt && r0 + r < a.n_rows)
            a.y[(uint64_t)(first + t) * a.ldy + r0 + r] = cs[t][r] + (a.bias ? a.bias[r0 + r] : 0.0f);
    }
}

#endif

/* Float32 weights, float32 arithmetic: block (bx, by) the outputs of rows 16 bx .. and tokens
 * 16 by .., thread (tx, ty) one of them; 16 values of each a step through shared memory. */
#define MM_F32_T 16u
static __global__ void mm_f32(gm_mm_args a)
{
    __shared__ float wsh[MM_F32_T][MM_F32_T + 1], xsh[MM_F32_T][MM_F32_T + 1];
    const unsigned tx = threadIdx.x % MM_F32_T, ty = threadIdx.x / MM_F32_T;
    const uint64_t r = (uint64_t)blockIdx.x * MM_F32_T + tx;
    const uint32_t t = blockIdx.y * MM_F32_T + ty;
    const uint64_t lr = (uint64_t)blockIdx.x * MM_F32_T + ty; /* the row this thread loads */
    const uint32_t lt = blockIdx.y * MM_F32_T + ty;           /* the token this thread loads */
    const float *w = (const float *)a.w;
    float acc = 0.0f;
    for (uint64_t k0 = 0; k0 < a.n_cols; k0 += MM_F32_T) {
        const uint64_t c = k0 + tx;
        wsh[ty][tx] = lr < a.n_rows && c < a.n_cols ? w[lr * (a.row_bytes / 4) + c] : 0.0f;
        xsh[ty][tx] = lt < a.n && c < a.n_cols ? a.x[(uint64_t)(a.xrow ? a.xrow[lt] : lt) * a.ldx + c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (unsigned k = 0; k < MM_F32_T; k++)
            acc += wsh[tx][k] * xsh[ty][k];
        __syncthreads();
    }
    if (r < a.n_rows && t < a.n)
        a.y[(uint64_t)t * a.ldy + r] = acc + (a.bias ? a.bias[r] : 0.0f);
}

#endif
