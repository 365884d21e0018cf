/* Dequantization on the device (see cuda.h): one thread per element, each computing its value
 * with the multiplies and adds of the CPU reference (kernels/dequant_ref.c) in the same order
 * (blocks.cuh). This file is compiled with -fmad=false, so no multiply and add fuse and the
 * results are the reference's bit for bit. */
#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"
#include "backend/cuda/blocks.cuh"

template <typename D> static __global__ void deq(const uint8_t *src, float *y, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = D::at(src + (i / D::block) * D::bytes, (int)(i % D::block));
}

typedef void (*deq_kernel)(const uint8_t *, float *, uint64_t);

static deq_kernel kernel_of(uint32_t type)
{
    deq_kernel k = NULL;
    gm_with_decoder(type, [&](auto d) { k = deq<decltype(d)>; });
    return k;
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
