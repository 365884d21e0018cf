/* Matrix times vector with the vector quantized to 8 bits (see cuda.h): the vector goes once into
 * blocks of 32 signed bytes with a float scale (gm_cuda_q8_block), and each row's codes meet them
 * in integer dot products of four bytes at a time (dp4a), scaled once per 32 values. What the
 * CPU's kernels do (they quantize the vector too), and what lets the product keep up with the
 * memory instead of the decode of every value. */
#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"

#define WARPS 8 /* rows (warps) a thread block */

/* One warp per block of 32: d = max |x| / 127, q = round(x / d) (half away from zero), and
 * s = d * sum(q). */
static __global__ void quantize(const float *x, uint64_t n, gm_cuda_q8_block *out)
{
    const uint64_t b = (uint64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32;
    if (b * 32 >= n)
        return;
    const float v = x[b * 32 + lane];
    float amax = fabsf(v);
    for (int off = 16; off > 0; off /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = (int)roundf(v * id);
    int sum = q;
    for (int off = 16; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    out[b].qs[lane] = (int8_t)q;
    if (lane == 0) {
        out[b].d = d;
        out[b].s = d * (float)sum;
    }
}

/* Q4_K: four blocks of 256 a warp step, so that four blocks' loads are in flight at once; each
 * lane one sub-block of 32: its 32 nibbles (16 bytes, one load) in eight dp4a with the vector's
 * bytes, scaled by d * sc and the vector's d, less dmin * m times the vector block's sum. */
static __global__ void q4_K(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                            const gm_cuda_q8_block *xq, float *y)
{
    const uint64_t row = (uint64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32, sb = lane % 8, sh = 4 * (sb & 1);
    if (row >= n_rows)
        return;
    const uint8_t *r = w + row * row_bytes;
    const uint64_t nb = n_cols / GM_QK_K;
    float acc = 0.0f;
#pragma unroll 2
    for (uint64_t b = lane / 8; b < nb; b += 4) {
        const uint8_t *blk = r + b * sizeof(gm_block_q4_K);
        const gm_cuda_q8_block *xb = xq + b * 8 + sb;
        const uint4 q = *(const uint4 *)(blk + offsetof(gm_block_q4_K, qs) + (sb / 2) * 32);
        const uint4 q2 = *(const uint4 *)(blk + offsetof(gm_block_q4_K, qs) + (sb / 2) * 32 + 16);
        const int4 x0 = *(const int4 *)(xb->qs), x1 = *(const int4 *)(xb->qs + 16);
        int sumi = 0;
        sumi = __dp4a((int)((q.x >> sh) & 0x0f0f0f0fu), x0.x, sumi);
        sumi = __dp4a((int)((q.y >> sh) & 0x0f0f0f0fu), x0.y, sumi);
        sumi = __dp4a((int)((q.z >> sh) & 0x0f0f0f0fu), x0.z, sumi);
        sumi = __dp4a((int)((q.w >> sh) & 0x0f0f0f0fu), x0.w, sumi);
        sumi = __dp4a((int)((q2.x >> sh) & 0x0f0f0f0fu), x1.x, sumi);
        sumi = __dp4a((int)((q2.y >> sh) & 0x0f0f0f0fu), x1.y, sumi);
        sumi = __dp4a((int)((q2.z >> sh) & 0x0f0f0f0fu), x1.z, sumi);
        sumi = __dp4a((int)((q2.w >> sh) & 0x0f0f0f0fu), x1.w, sumi);
        int sc, m;
        gm_q4_K_scale_min((int)sb, blk + offsetof(gm_block_q4_K, scales), &sc, &m);
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q4_K, d)));
        const float dmin = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q4_K, dmin)));
        acc += xb->d * d * (float)sc * (float)sumi - dmin * (float)m * xb->s;
    }
    acc = gm_warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}

/* Q6_K: four blocks of 256 a warp step, each lane one run of 32 values (two 16-value scales):
 * its 6-bit codes rebuilt from ql and qh four at a time (the 210-byte blocks align nothing, so
 * byte loads), two dp4a sums per half, less 32 times the vector's sum. */
static __global__ void q6_K(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                            const gm_cuda_q8_block *xq, float *y)
{
    const uint64_t row = (uint64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32, sb = lane % 8, c = sb / 4, k = sb % 4;
    const unsigned lo_sh = 4 * (k / 2), hi_sh = 2 * k;
    if (row >= n_rows)
        return;
    const uint8_t *r = w + row * row_bytes;
    const uint64_t nb = n_cols / GM_QK_K;
    float acc = 0.0f;
#pragma unroll 2
    for (uint64_t b = lane / 8; b < nb; b += 4) {
        const uint8_t *blk = r + b * sizeof(gm_block_q6_K);
        const uint8_t *ql = blk + offsetof(gm_block_q6_K, ql) + c * 64 + (k % 2) * 32;
        const uint8_t *qh = blk + offsetof(gm_block_q6_K, qh) + c * 32;
        const gm_cuda_q8_block *xb = xq + b * 8 + sb;
        const int *xi = (const int *)xb->qs;
        int sumi[2] = {0, 0}, sumx[2] = {0, 0};
#pragma unroll
        for (int g = 0; g < 8; g++) {
            uint32_t packed = 0;
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int at = 4 * g + t;
                const uint32_t q = ((ql[at] >> lo_sh) & 0x0fu) | (((qh[at] >> hi_sh) & 3u) << 4);
                packed |= q << (8 * t);
            }
            sumi[g / 4] = __dp4a((int)packed, xi[g], sumi[g / 4]);
            sumx[g / 4] = __dp4a(0x01010101, xi[g], sumx[g / 4]);
        }
        const int8_t *sc = (const int8_t *)(blk + offsetof(gm_block_q6_K, scales)) + 2 * sb;
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q6_K, d)));
        acc += xb->d * d * ((float)sc[0] * (float)(sumi[0] - 32 * sumx[0]) + (float)sc[1] * (float)(sumi[1] - 32 * sumx[1]));
    }
    acc = gm_warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}

/* Q8_0: eight blocks of 32 a warp step, each lane 8 values of one block (two dp4a; the codes read
 * byte by byte: a 34-byte block aligns them on 2 bytes at best). */
static __global__ void q8_0(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                            const gm_cuda_q8_block *xq, float *y)
{
    const uint64_t row = (uint64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32, k0 = (lane % 4) * 8;
    if (row >= n_rows)
        return;
    const uint8_t *r = w + row * row_bytes;
    const uint64_t nb = n_cols / GM_QK8_0;
    float acc = 0.0f;
#pragma unroll 2
    for (uint64_t b = lane / 4; b < nb; b += 8) {
        const uint8_t *blk = r + b * sizeof(gm_block_q8_0);
        const uint8_t *qp = blk + offsetof(gm_block_q8_0, qs) + k0;
        const int q0 = (int)((uint32_t)qp[0] | ((uint32_t)qp[1] << 8) | ((uint32_t)qp[2] << 16) | ((uint32_t)qp[3] << 24));
        const int q1 = (int)((uint32_t)qp[4] | ((uint32_t)qp[5] << 8) | ((uint32_t)qp[6] << 16) | ((uint32_t)qp[7] << 24));
        const int2 xi = *(const int2 *)(xq[b].qs + k0);
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q8_0, d)));
        acc += d * xq[b].d * (float)__dp4a(q1, xi.y, __dp4a(q0, xi.x, 0));
    }
    acc = gm_warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}

extern "C" int gm_cuda_quantize_q8(const float *x, uint64_t n, gm_cuda_q8_block *out, void *stream, gm_err *err)
{
    if (n % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA: %llu values do not fill blocks of 32", (unsigned long long)n);
    const uint64_t grid = (n / 32 + WARPS - 1) / WARPS;
    if (!grid)
        return 0;
    if (grid > 0x7fffffffull)
        return gm_err_set(err, GM_ERANGE, "CUDA: %llu values to quantize", (unsigned long long)n);
    quantize<<<(unsigned)grid, 32 * WARPS, 0, (cudaStream_t)stream>>>(x, n, out);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the vector's quantization", err);
}

extern "C" bool gm_cuda_matvec_q8_has(uint32_t type)
{
    return type == GM_TYPE_Q4_K || type == GM_TYPE_Q6_K || type == GM_TYPE_Q8_0;
}

extern "C" int gm_cuda_matvec_q8(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols,
                                 const gm_cuda_q8_block *xq, float *y, void *stream, gm_err *err)
{
    if (!gm_cuda_matvec_q8_has(type))
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: no 8-bit matrix-vector kernel for %s", gm_type_name(type));
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_cols, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA matrix-vector product: %s", sub.msg);
    if (type == GM_TYPE_Q4_K && ((uintptr_t)w % 16 || row_bytes % 16))
        return gm_err_set(err, GM_EINVAL, "CUDA: Q4_K rows must start 16-byte aligned");
    const uint64_t grid = (n_rows + WARPS - 1) / WARPS;
    if (!grid)
        return 0;
    if (grid > 0x7fffffffull)
        return gm_err_set(err, GM_ERANGE, "CUDA matrix-vector product: %llu rows", (unsigned long long)n_rows);
    cudaStream_t s = (cudaStream_t)stream;
    if (type == GM_TYPE_Q4_K)
        q4_K<<<(unsigned)grid, 32 * WARPS, 0, s>>>((const uint8_t *)w, row_bytes, n_rows, n_cols, xq, y);
    else if (type == GM_TYPE_Q6_K)
        q6_K<<<(unsigned)grid, 32 * WARPS, 0, s>>>((const uint8_t *)w, row_bytes, n_rows, n_cols, xq, y);
    else
        q8_0<<<(unsigned)grid, 32 * WARPS, 0, s>>>((const uint8_t *)w, row_bytes, n_rows, n_cols, xq, y);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the 8-bit matrix-vector product", err);
}

extern "C" int gm_cuda_matvec_q8_host(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x,
                                      float *y, gm_cuda_q8_block *xq_out, gm_err *err)
{
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_cols, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA matrix-vector product: %s", sub.msg);
    if (n_cols % 32)
        return gm_err_set(err, GM_EINVAL, "CUDA: %llu columns do not fill blocks of 32", (unsigned long long)n_cols);
    const uint64_t nq = n_cols / 32;
    uint8_t *dw = NULL;
    float *dx = NULL, *dy = NULL;
    gm_cuda_q8_block *dq = NULL;
    int rc = 0;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&dw, row_bytes * n_rows + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dx, n_cols * sizeof(float) + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dy, n_rows * sizeof(float) + 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dq, nq * sizeof(gm_cuda_q8_block) + 1)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "allocating the product's buffers", err);
        goto out;
    }
    if ((e = cudaMemcpy(dw, w, row_bytes * n_rows, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(dx, x, n_cols * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "uploading the matrix and the vector", err);
        goto out;
    }
    if ((rc = gm_cuda_quantize_q8(dx, n_cols, dq, NULL, err)) ||
        (rc = gm_cuda_matvec_q8(type, dw, n_rows, n_cols, dq, dy, NULL, err)))
        goto out;
    if ((e = cudaDeviceSynchronize()) != cudaSuccess ||
        (e = cudaMemcpy(y, dy, n_rows * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess ||
        (xq_out && (e = cudaMemcpy(xq_out, dq, nq * sizeof(gm_cuda_q8_block), cudaMemcpyDeviceToHost)) != cudaSuccess))
        rc = gm_cuda_fail(e, "running the 8-bit matrix-vector product", err);
out:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dq);
    return rc;
}
