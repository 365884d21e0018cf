/* Matrix times vector on the device (see cuda.h): one warp per row (a thread block a row for a
 * matrix of few rows). Q4_K, Q6_K, Q8_0 and float32
 * rows go a block at a time (below); the other types element by element, each lane taking every 32nd
 * element of the row, decoding it (blocks.cuh) and multiplying it by the activation. The warp
 * sums its lanes. Float32 activations, float32 sums (with fused multiply-add: not the CPU's
 * rounding, within the tolerance test_cuda states). A first, plain kernel: the measure of how
 * far it is from the memory's bandwidth is bench/cuda/matvec-bench.cu's. */
#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"

#define ROWS_PER_BLOCK 8


template <typename D>
static __global__ void matvec(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                              const float *x, float *y)
{
    gm_matvec_elems<ROWS_PER_BLOCK, D>(w, row_bytes, n_rows, n_cols, x, y);
}

/* The K-quant and Q8_0 rows, a block (or four Q8_0 blocks) per warp step: gm_matvec_rows
 * (internal.h) with the types below, four steps unrolled. Each lane takes 8 consecutive values
 * (Q8_0: 4), reads their codes in one load, the block's scales once, and adds
 * d1 * sum(q x) - m1 * sum(x) (Q6_K: d * sc * sum((q - 32) x); Q8_0: d * sum(q x)). */
template <typename T>
static __global__ void matvec_blocks(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                                     const float *x, float *y)
{
    gm_matvec_rows<ROWS_PER_BLOCK, 4, T>(w, row_bytes, n_rows, n_cols, x, y);
}

/* The same rows for a matrix of few rows: a thread block a row (internal.h). */
template <typename T>
static __global__ void matvec_blocks_split(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                                           const float *x, float *y)
{
    (void)n_rows;
    gm_matvec_row_split<ROWS_PER_BLOCK, T>(w, row_bytes, n_cols, x, y);
}

/* Fewer rows than this: a thread block a row (matvec_blocks_split). A router's 128 rows took 16
 * of an H100's 132 multiprocessors one warp a row (9.6 us for 2 MB). */
#define SPLIT_ROWS 1024u

namespace {

struct q4_K {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_q4_K), lanes = 32;
    unsigned sb, j;
    __device__ explicit q4_K(unsigned i) : sb(i / 4), j(i % 4) {}
    __device__ float dot(const uint8_t *blk, const float *x) const
    {
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q4_K, d)));
        const float dmin = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q4_K, dmin)));
        int sc, m;
        gm_q4_K_scale_min((int)sb, blk + offsetof(gm_block_q4_K, scales), &sc, &m);
        const uint2 q = *(const uint2 *)(blk + offsetof(gm_block_q4_K, qs) + (sb / 2) * 32 + j * 8);
        const float4 *xv = (const float4 *)(x + sb * 32 + j * 8);
        const float4 x0 = xv[0], x1 = xv[1];
        const unsigned sh = 4 * (sb & 1);
        const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float sqx = 0.0f, sx = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const unsigned word = k < 4 ? q.x : q.y;
            const float qk = (float)((word >> (8 * (k % 4) + sh)) & 0x0f);
            sqx += qk * xs[k];
            sx += xs[k];
        }
        return d * (float)sc * sqx - dmin * (float)m * sx;
    }
};

struct q6_K {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_q6_K), lanes = 32;
    unsigned e, c, rr;
    __device__ explicit q6_K(unsigned i) : e(i * 8), c(e / 128), rr(e % 128) {}
    __device__ float dot(const uint8_t *blk, const float *x) const
    {
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q6_K, d)));
        const float dl = d * (float)(int8_t)blk[offsetof(gm_block_q6_K, scales) + e / 16];
        const uint8_t *ql = blk + offsetof(gm_block_q6_K, ql) + c * 64 + rr % 64;
        const uint8_t *qh = blk + offsetof(gm_block_q6_K, qh) + c * 32 + rr % 32;
        const float *xs = x + e;
        float sqx = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int lo = (ql[k] >> (4 * (rr / 64))) & 0x0f, hi = (qh[k] >> (2 * (rr / 32))) & 3;
            sqx += (float)((lo | (hi << 4)) - 32) * xs[k];
        }
        return dl * sqx;
    }
};

/* Float32 rows (routers), four values a lane a step in one 16-byte load. */
struct f32 {
    static constexpr unsigned values = 4, bytes = 16, lanes = 1;
    __device__ explicit f32(unsigned) {}
    __device__ float dot(const uint8_t *blk, const float *x) const
    {
        const float4 w = *(const float4 *)blk, v = *(const float4 *)x;
        return w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
    }
};

struct q8_0 {
    static constexpr unsigned values = GM_QK8_0, bytes = sizeof(gm_block_q8_0), lanes = 8;
    unsigned k0;
    __device__ explicit q8_0(unsigned i) : k0(i * 4) {}
    __device__ float dot(const uint8_t *blk, const float *x) const
    {
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q8_0, d)));
        const int8_t *q = (const int8_t *)(blk + offsetof(gm_block_q8_0, qs) + k0);
        const float *xs = x + k0;
        const float s = (float)q[0] * xs[0] + (float)q[1] * xs[1] + (float)q[2] * xs[2] + (float)q[3] * xs[3];
        return d * s;
    }
};

} // namespace

extern "C" int gm_cuda_matvec(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x,
                              float *y, void *stream, gm_err *err)
{
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_cols, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA matrix-vector product: %s", sub.msg);
    const uint64_t grid = (n_rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (grid > 0x7fffffffull)
        return gm_err_set(err, GM_ERANGE, "CUDA matrix-vector product: %llu rows", (unsigned long long)n_rows);
    if (!grid)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    const bool few = n_rows < SPLIT_ROWS;
    void (*special)(const uint8_t *, uint64_t, uint64_t, uint64_t, const float *, float *) =
        type == GM_TYPE_Q4_K   ? (few ? matvec_blocks_split<q4_K> : matvec_blocks<q4_K>)
        : type == GM_TYPE_Q6_K ? (few ? matvec_blocks_split<q6_K> : matvec_blocks<q6_K>)
        : type == GM_TYPE_Q8_0 ? (few ? matvec_blocks_split<q8_0> : matvec_blocks<q8_0>)
        : type == GM_TYPE_F32 && n_cols % 4 == 0 ? (few ? matvec_blocks_split<f32> : matvec_blocks<f32>)
                               : NULL;
    /* the block kernels load 8 codes and 8 values at once: rows and the vector aligned for it */
    if (special && ((uintptr_t)w % 16 || row_bytes % 16 || (uintptr_t)x % 16))
        special = type == GM_TYPE_Q8_0 ? special : NULL;
    if (special) {
        special<<<(unsigned)(few ? n_rows : grid), 32 * ROWS_PER_BLOCK, 0, s>>>((const uint8_t *)w, row_bytes, n_rows,
                                                                                n_cols, x, y);
        cudaError_t e = cudaGetLastError();
        return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the matrix-vector product", err);
    }
    const bool known = gm_with_decoder(type, [&](auto d) {
        matvec<decltype(d)><<<(unsigned)grid, 32 * ROWS_PER_BLOCK, 0, s>>>((const uint8_t *)w, row_bytes, n_rows,
                                                                           n_cols, x, y);
    });
    if (!known)
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: no matrix-vector kernel for %s", gm_type_name(type));
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the matrix-vector product", err);
}

extern "C" int gm_cuda_matvec_host(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x,
                                   float *y, gm_err *err)
{
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_cols, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA matrix-vector product: %s", sub.msg);
    uint8_t *dw = NULL;
    float *dx = NULL, *dy = NULL;
    int rc = 0;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&dw, row_bytes * n_rows + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dx, n_cols * sizeof(float) + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dy, n_rows * sizeof(float) + 1)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "allocating the product's buffers", err);
        goto out;
    }
    if ((e = cudaMemcpy(dw, w, row_bytes * n_rows, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(dx, x, n_cols * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "uploading the matrix and the vector", err);
        goto out;
    }
    if ((rc = gm_cuda_matvec(type, dw, n_rows, n_cols, dx, dy, NULL, err)))
        goto out;
    if ((e = cudaDeviceSynchronize()) != cudaSuccess ||
        (e = cudaMemcpy(y, dy, n_rows * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = gm_cuda_fail(e, "running the matrix-vector product", err);
out:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    return rc;
}
