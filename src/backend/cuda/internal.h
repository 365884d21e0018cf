/* backend/cuda/internal: shared by the module's .cu files (not a public header). */
#ifndef GM_BACKEND_CUDA_INTERNAL_H
#define GM_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
}

/* Records CUDA error e of the call described by what into err (the first error wins) and
 * returns its gm code. */
int gm_cuda_fail(cudaError_t e, const char *what, gm_err *err);

/* The sum of acc over the warp's lanes, in lane 0 (the matrix-vector kernels' last step). */
static __device__ __forceinline__ float gm_warp_sum(float acc)
{
    for (int off = 16; off > 0; off /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    return acc;
}

#endif
