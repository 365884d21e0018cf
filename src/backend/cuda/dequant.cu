/* Dequantization on the device (see cuda.h): one thread per element, each computing its value
 * with the multiplies and adds of the CPU reference (kernels/dequant_ref.c) in the same order.
 * The module is compiled with -fmad=false, so no multiply and add fuse and the results are the
 * reference's bit for bit. */
#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"
#include "kernels/quant.h"

/* A little-endian 16-bit field at any byte offset. */
static __device__ uint16_t u16_at(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static __global__ void deq_f32(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = gm_bits_to_f32((uint32_t)src[4 * i] | ((uint32_t)src[4 * i + 1] << 8) |
                              ((uint32_t)src[4 * i + 2] << 16) | ((uint32_t)src[4 * i + 3] << 24));
}

static __global__ void deq_f16(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = gm_f16_to_f32(u16_at(src + 2 * i));
}

static __global__ void deq_bf16(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = gm_bf16_to_f32(u16_at(src + 2 * i));
}

/* x = d * q */
static __global__ void deq_q8_0(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint8_t *b = src + (i / GM_QK8_0) * sizeof(gm_block_q8_0);
    const float d = gm_f16_to_f32(u16_at(b + offsetof(gm_block_q8_0, d)));
    const int8_t q = (int8_t)b[offsetof(gm_block_q8_0, qs) + i % GM_QK8_0];
    y[i] = (float)q * d;
}

/* 8 sub-blocks of 32: x = (d * sc) * q - dmin * m; Q5_K adds a fifth bit from qh */
template <bool FIVE>
static __global__ void deq_q45_K(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const int e = (int)(i % GM_QK_K), sb = e / 32, l = e % 32;
    const size_t bytes = FIVE ? sizeof(gm_block_q5_K) : sizeof(gm_block_q4_K);
    const uint8_t *b = src + (i / GM_QK_K) * bytes;
    const size_t o_d = FIVE ? offsetof(gm_block_q5_K, d) : offsetof(gm_block_q4_K, d);
    const size_t o_dmin = FIVE ? offsetof(gm_block_q5_K, dmin) : offsetof(gm_block_q4_K, dmin);
    const size_t o_sc = FIVE ? offsetof(gm_block_q5_K, scales) : offsetof(gm_block_q4_K, scales);
    const size_t o_qs = FIVE ? offsetof(gm_block_q5_K, qs) : offsetof(gm_block_q4_K, qs);
    const float d = gm_f16_to_f32(u16_at(b + o_d));
    const float dmin = gm_f16_to_f32(u16_at(b + o_dmin));
    int sc, m;
    gm_q4_K_scale_min(sb, b + o_sc, &sc, &m);
    const float d1 = d * (float)sc;
    const float m1 = dmin * (float)m;
    int v = (b[o_qs + (sb / 2) * 32 + l] >> (4 * (sb & 1))) & 0x0f;
    if (FIVE)
        v |= ((b[offsetof(gm_block_q5_K, qh) + l] >> sb) & 1) << 4;
    y[i] = d1 * (float)v - m1;
}

/* 16 sub-blocks of 16: x = (d * sc) * (q - 32), q 4 bits in ql and 2 in qh */
static __global__ void deq_q6_K(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const int e = (int)(i % GM_QK_K), c = e / 128, r = e % 128;
    const uint8_t *b = src + (i / GM_QK_K) * sizeof(gm_block_q6_K);
    const float d = gm_f16_to_f32(u16_at(b + offsetof(gm_block_q6_K, d)));
    const int lo = (b[offsetof(gm_block_q6_K, ql) + c * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
    const int hi = (b[offsetof(gm_block_q6_K, qh) + c * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const float dl = d * (float)(int8_t)b[offsetof(gm_block_q6_K, scales) + e / 16];
    y[i] = dl * (float)((lo | (hi << 4)) - 32);
}

typedef void (*deq_kernel)(const uint8_t *, float *, uint64_t);

static deq_kernel kernel_of(uint32_t type)
{
    switch (type) {
    case GM_TYPE_F32: return deq_f32;
    case GM_TYPE_F16: return deq_f16;
    case GM_TYPE_BF16: return deq_bf16;
    case GM_TYPE_Q8_0: return deq_q8_0;
    case GM_TYPE_Q4_K: return deq_q45_K<false>;
    case GM_TYPE_Q5_K: return deq_q45_K<true>;
    case GM_TYPE_Q6_K: return deq_q6_K;
    default: return NULL;
    }
}

extern "C" bool gm_cuda_can_dequant(uint32_t type) { return kernel_of(type) != NULL; }

extern "C" int gm_cuda_dequant(uint32_t type, const void *src, uint64_t n_elems, float *dst, gm_err *err)
{
    const deq_kernel k = kernel_of(type);
    if (!k)
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: no dequantization kernel for %s", gm_type_name(type));
    uint64_t src_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_elems, &src_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA dequantization: %s", sub.msg);
    if (n_elems == 0)
        return 0;
    uint8_t *d_src = NULL;
    float *d_dst = NULL;
    int rc = 0;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&d_src, src_bytes)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "allocating the blocks", err);
        goto out;
    }
    if ((e = cudaMalloc((void **)&d_dst, n_elems * sizeof(float))) != cudaSuccess) {
        rc = gm_cuda_fail(e, "allocating the values", err);
        goto out;
    }
    if ((e = cudaMemcpy(d_src, src, src_bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        rc = gm_cuda_fail(e, "uploading the blocks", err);
        goto out;
    }
    {
        const unsigned threads = 256;
        const uint64_t grid = (n_elems + threads - 1) / threads;
        if (grid > 0x7fffffffull) {
            rc = gm_err_set(err, GM_ERANGE, "CUDA dequantization: %llu values in one call",
                            (unsigned long long)n_elems);
            goto out;
        }
        k<<<(unsigned)grid, threads>>>(d_src, d_dst, n_elems);
    }
    if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) {
        rc = gm_cuda_fail(e, "running the dequantization kernel", err);
        goto out;
    }
    if ((e = cudaMemcpy(dst, d_dst, n_elems * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = gm_cuda_fail(e, "downloading the values", err);
out:
    cudaFree(d_src);
    cudaFree(d_dst);
    return rc;
}
