/* The device probe and the translation of CUDA's errors into gm_err (see cuda.h). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "base/err.h"
}
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"

int gm_cuda_fail(cudaError_t e, const char *what, gm_err *err)
{
    const int code = e == cudaErrorMemoryAllocation                                  ? GM_ENOMEM
                     : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? GM_EUNSUPPORTED
                                                                                    : GM_EIO;
    (void)cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
    return gm_err_set(err, code, "CUDA: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int gm_cuda_probe(gm_cuda_info *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    cudaError_t e = cudaGetDeviceCount(&out->n_devices);
    if (e != cudaSuccess)
        return gm_cuda_fail(e, "counting the devices", err);
    if (out->n_devices == 0)
        return gm_err_set(err, GM_EUNSUPPORTED, "CUDA: no device");
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess)
        return gm_cuda_fail(e, "reading device 0's properties", err);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->n_sms = p.multiProcessorCount;
    size_t fr = 0, tot = 0;
    if ((e = cudaMemGetInfo(&fr, &tot)) != cudaSuccess)
        return gm_cuda_fail(e, "reading device 0's memory", err);
    out->free_bytes = fr;
    out->total_bytes = tot;
    cudaDriverGetVersion(&out->driver_version);
    cudaRuntimeGetVersion(&out->runtime_version);
    return 0;
}
