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

#endif
