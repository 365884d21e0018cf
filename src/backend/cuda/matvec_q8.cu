/* Matrix times vector with the vector quantized to 8 bits (see cuda.h): the vector goes once into
 * blocks of 32 signed bytes with a float scale (gm_cuda_q8_block), and each row's codes meet them
 * in integer dot products of four bytes at a time (dp4a), scaled once per 16 or 32 values (the
 * codes of the non-linear types, IQ4_XS and MXFP4, mapped through their tables to int8 first).
 * What the CPU's kernels do (they quantize the vector too), and what lets the product keep up
 * with the memory instead of the decode of every value. */
#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/matvec_q8_kernels.cuh"

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

typedef void (*q8_kernel)(const uint8_t *, uint64_t, uint64_t, uint64_t, const gm_cuda_q8_block *, float *);

/* The kernel of type for rows of n_cols values (a warp a row, or a block a row for long rows:
 * *long_rows says which) and the alignment (bytes) its loads need of the rows' start and length. */
static q8_kernel kernel_of(uint32_t type, uint64_t n_cols, unsigned *align, bool *long_rows = NULL)
{
    q8_kernel k = NULL;
    bool lr = false;
    *align = 1;
    gm_with_q8_dot(type, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        lr = gm_q8_long_rows(n_cols / T::values, T::lanes);
        k = lr ? matvec_q8_long<T> : matvec_q8<T>;
        *align = T::align;
    });
    if (long_rows)
        *long_rows = lr;
    return k;
}

extern "C" bool gm_cuda_matvec_q8_has(uint32_t type)
{
    unsigned align;
    return kernel_of(type, 0, &align) != NULL;
}

extern "C" int gm_cuda_matvec_q8(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols,
                                 const gm_cuda_q8_block *xq, float *y, void *stream, gm_err *err)
{
    unsigned align;
    bool long_rows;
    const q8_kernel k = kernel_of(type, n_cols, &align, &long_rows);
    if (!k)
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: no 8-bit matrix-vector kernel for %s", gm_type_name(type));
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, n_cols, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA matrix-vector product: %s", sub.msg);
    if ((uintptr_t)w % align || row_bytes % align)
        return gm_err_set(err, GM_EINVAL, "CUDA: %s rows must start %u-byte aligned", gm_type_name(type), align);
    const unsigned warps = long_rows ? GM_LONG_WARPS : WARPS, rows_a_block = long_rows ? 1 : WARPS;
    const uint64_t grid = (n_rows + rows_a_block - 1) / rows_a_block;
    if (!grid)
        return 0;
    if (grid > 0x7fffffffull)
        return gm_err_set(err, GM_ERANGE, "CUDA matrix-vector product: %llu rows", (unsigned long long)n_rows);
    k<<<(unsigned)grid, 32 * warps, 0, (cudaStream_t)stream>>>((const uint8_t *)w, row_bytes, n_rows, n_cols, xq, y);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the 8-bit matrix-vector product", err);
}

extern "C" int gm_cuda_matvec_q8_multi(uint32_t type, const void *const *w, const uint64_t *n_rows, float *const *y,
                                       uint32_t n, uint64_t n_cols, const gm_cuda_q8_block *xq, void *stream,
                                       gm_err *err)
{
    unsigned align = 1;
    uint64_t row_bytes;
    gm_err sub = {0};
    if (n == 0 || n > GM_MV_MULTI)
        return gm_err_set(err, GM_EINVAL, "CUDA: %u products in one launch (1 to %u)", n, GM_MV_MULTI);
    bool long_rows;
    if (!kernel_of(type, n_cols, &align, &long_rows))
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: no 8-bit matrix-vector kernel for %s", gm_type_name(type));
    const unsigned rows_a_block = long_rows ? 1 : WARPS;
    if (gm_type_row_bytes(type, n_cols, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "CUDA matrix-vector product: %s", sub.msg);
    gm_mv_multi p = {};
    uint64_t blocks = 0;
    for (uint32_t j = 0; j < n; j++) {
        if ((uintptr_t)w[j] % align || row_bytes % align)
            return gm_err_set(err, GM_EINVAL, "CUDA: %s rows must start %u-byte aligned", gm_type_name(type), align);
        p.w[j] = (const uint8_t *)w[j];
        p.y[j] = y[j];
        p.n_rows[j] = n_rows[j];
        p.first[j] = (uint32_t)blocks;
        blocks += (n_rows[j] + rows_a_block - 1) / rows_a_block;
        if (blocks > 0x7fffffffull)
            return gm_err_set(err, GM_ERANGE, "CUDA matrix-vector products: %llu rows", (unsigned long long)n_rows[j]);
    }
    p.n = n;
    if (!blocks)
        return 0;
    gm_with_q8_dot(type, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        if (long_rows)
            matvec_q8_multi_long<T><<<(unsigned)blocks, 32 * GM_LONG_WARPS, 0, (cudaStream_t)stream>>>(p, row_bytes,
                                                                                                      n_cols, xq);
        else
            matvec_q8_multi<T><<<(unsigned)blocks, 32 * WARPS, 0, (cudaStream_t)stream>>>(p, row_bytes, n_cols, xq);
    });
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : gm_cuda_fail(e, "launching the 8-bit matrix-vector products", err);
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

extern "C" bool gm_cuda_matvec_q8_fits(uint32_t type, uint64_t n_cols)
{
    unsigned align;
    uint64_t row_bytes;
    gm_err sub = {0};
    return kernel_of(type, n_cols, &align) && n_cols % 32 == 0 && gm_type_row_bytes(type, n_cols, &row_bytes, &sub) == 0 &&
           row_bytes % align == 0;
}
