/* How near the CUDA backend's matrix-vector product comes to the device's memory bandwidth:
 * COPIES matrices of ROWS x COLS values of TYPE (together far larger than the L2 cache), each
 * multiplied by a vector in turn, timed with CUDA events over ITERS passes, against a
 * device-to-device copy of the same bytes timed the same way (which reads and writes them: its
 * rate counts both); for the types that have it, the product with the vector quantized to 8 bits
 * too. Built by bench/cuda/device-check.sh.
 *   matvec-bench [TYPE [ROWS [COLS [COPIES [ITERS]]]]]   (defaults: q4_k 4096 14336 16 20)
 * TYPE is any type gm_cuda_matvec decodes, by its name in any case (q4_k, q2_k, q3_k, q5_k, q6_k,
 * q8_0, iq4_xs, mxfp4, bf16...); the 8-bit path is timed where gm_cuda_matvec_q8_has(TYPE). The
 * matrices are bytes 0x11: finite scales (an f16 0x1111, an E8M0 exponent 17) for every type. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/err.h"
#include "gguf/types.h"
}
#include "backend/cuda/cuda.h"

#define CHECK_CUDA(x)                                                                                          \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "matvec-bench: %s: %s\n", #x, cudaGetErrorString(e_));                            \
            return 1;                                                                                          \
        }                                                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    const char *tname = argc > 1 ? argv[1] : "q4_k";
    const uint64_t rows = argc > 2 ? strtoull(argv[2], NULL, 10) : 4096;
    const uint64_t cols = argc > 3 ? strtoull(argv[3], NULL, 10) : 14336;
    const int copies = argc > 4 ? atoi(argv[4]) : 16, iters = argc > 5 ? atoi(argv[5]) : 20;
    int type = -1;
    for (uint32_t t = 0; t < 64; t++)
        if (gm_type_get(t) && strcasecmp(gm_type_name(t), tname) == 0)
            type = (int)t;
    uint64_t row_bytes;
    gm_err err = {0};
    if (type < 0 || gm_type_row_bytes((uint32_t)type, cols, &row_bytes, &err) != 0 || copies < 1 || iters < 1) {
        fprintf(stderr, "matvec-bench: bad arguments (type %s, %llu columns)\n", tname, (unsigned long long)cols);
        return 2;
    }
    const uint64_t mat = row_bytes * rows;
    gm_cuda_info info;
    if (gm_cuda_probe(&info, &err) != 0) {
        fprintf(stderr, "matvec-bench: %s\n", err.msg);
        return 1;
    }
    uint8_t *w, *copy;
    float *x, *y;
    CHECK_CUDA(cudaMalloc((void **)&w, mat * copies));
    CHECK_CUDA(cudaMalloc((void **)&copy, mat * copies));
    CHECK_CUDA(cudaMalloc((void **)&x, cols * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&y, rows * sizeof(float) * copies));
    CHECK_CUDA(cudaMemset(w, 0x11, mat * copies)); /* small finite scales and codes */
    CHECK_CUDA(cudaMemset(x, 0, cols * sizeof(float)));
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    float ms_mv = 0, ms_cp = 0;
    for (int pass = 0; pass < 2; pass++) { /* the first pass warms up, the second is timed */
        CHECK_CUDA(cudaEventRecord(a));
        for (int it = 0; it < iters; it++)
            for (int c = 0; c < copies; c++)
                if (gm_cuda_matvec((uint32_t)type, w + mat * c, rows, cols, x, y + rows * c, NULL, &err) != 0) {
                    fprintf(stderr, "matvec-bench: %s\n", err.msg);
                    return 1;
                }
        CHECK_CUDA(cudaEventRecord(b));
        CHECK_CUDA(cudaEventSynchronize(b));
        CHECK_CUDA(cudaEventElapsedTime(&ms_mv, a, b));
        CHECK_CUDA(cudaEventRecord(a));
        for (int it = 0; it < iters; it++)
            CHECK_CUDA(cudaMemcpyAsync(copy, w, mat * copies, cudaMemcpyDeviceToDevice));
        CHECK_CUDA(cudaEventRecord(b));
        CHECK_CUDA(cudaEventSynchronize(b));
        CHECK_CUDA(cudaEventElapsedTime(&ms_cp, a, b));
    }
    /* the 8-bit path where the type has it: the vector quantized once a pass */
    float ms_q8 = 0;
    gm_cuda_q8_block *xq = NULL;
    const bool q8 = gm_cuda_matvec_q8_has((uint32_t)type) && cols % 32 == 0;
    if (q8) {
        CHECK_CUDA(cudaMalloc((void **)&xq, cols / 32 * sizeof *xq));
        for (int pass = 0; pass < 2; pass++) {
            CHECK_CUDA(cudaEventRecord(a));
            for (int it = 0; it < iters; it++) {
                if (gm_cuda_quantize_q8(x, cols, xq, NULL, &err) != 0) {
                    fprintf(stderr, "matvec-bench: %s\n", err.msg);
                    return 1;
                }
                for (int c = 0; c < copies; c++)
                    if (gm_cuda_matvec_q8((uint32_t)type, w + mat * c, rows, cols, xq, y + rows * c, NULL, &err) != 0) {
                        fprintf(stderr, "matvec-bench: %s\n", err.msg);
                        return 1;
                    }
            }
            CHECK_CUDA(cudaEventRecord(b));
            CHECK_CUDA(cudaEventSynchronize(b));
            CHECK_CUDA(cudaEventElapsedTime(&ms_q8, a, b));
        }
    }
    const double bytes = (double)mat * copies * iters;
    const double mv = bytes / (ms_mv * 1e-3) / 1e9, cp = 2 * bytes / (ms_cp * 1e-3) / 1e9;
    printf("matvec-bench: %s, %s %llux%llu x %d copies (%.2f GB), %d passes: matvec reads %.0f GB/s "
           "(%.1f us a matrix); device copy moves %.0f GB/s; matvec at %.0f %% of the copy's rate\n",
           info.name, gm_type_name((uint32_t)type), (unsigned long long)rows, (unsigned long long)cols, copies,
           mat * copies / 1e9, iters, mv, ms_mv * 1e3 / (iters * copies), cp, 100.0 * mv / cp);
    if (q8) {
        const double v8 = bytes / (ms_q8 * 1e-3) / 1e9;
        printf("matvec-bench: %s with the vector quantized to 8 bits: %.0f GB/s (%.1f us a matrix), %.0f %% of the copy's rate\n",
               gm_type_name((uint32_t)type), v8, ms_q8 * 1e3 / (iters * copies), 100.0 * v8 / cp);
    }
    return 0;
}
