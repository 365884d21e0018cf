/* infer/gpu_copy: the copies of a staged pass (infer/gpu_decode.c: a prompt's chunk on the device
 * when not every routed expert is in VRAM) from host memory into the device's staging slots, at
 * the bus's speed: the engine's threads copy the experts' bytes into the chunk's page-locked
 * buffers (backend/cuda's gm_cuda_pf_bounce), from which the device copies them while the threads
 * fill the next. From the file's pageable pages the driver copies through its own buffer on one
 * thread, about a fifth of what PCIe gen5 carries (docs/cuda.md).
 *
 * Owns: gm_gpu_copies, one session's list of a pass's copies (its room made once: nothing is
 * allocated per pass) and their statistics.
 *
 * A copy wider than a buffer, and every copy when the host refuses to page-lock the buffers or
 * bounce is off (GMLX_GPU_BOUNCE=0, or the experts already page-locked: GMLX_GPU_PIN_HOST), is
 * queued straight from host memory as before. The bytes that arrive are the same either way.
 *
 * Threads: the session's owner thread, which also owns the engine's pool (the threads' copies run
 * as one of its jobs). Built only with the CUDA backend. */
#ifndef GM_INFER_GPU_COPY_H
#define GM_INFER_GPU_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "kernels/pool.h"

typedef struct gm_gpu_copies gm_gpu_copies;
struct gm_cuda_pf;

/* What the copies took: bytes through the page-locked buffers, and the seconds the threads took
 * to fill them (waits for a free buffer included). */
typedef struct {
    uint64_t bounced;
    double fill_s;
} gm_gpu_copy_stats;

/* A list for up to max copies a pass; through the page-locked buffers when bounce. */
int gm_gpu_copies_create(gm_gpu_copies **out, uint32_t max, bool bounce, gm_err *err);
void gm_gpu_copies_free(gm_gpu_copies *c);

/* Adds a copy of rows rows of width bytes, packed at src (host memory that stays as it is until
 * the chunk's end), to dst (device memory, rows dpitch apart). GM_EINVAL when the list is full. */
int gm_gpu_copies_add(gm_gpu_copies *c, void *dst, uint64_t dpitch, const void *src, uint64_t width, uint64_t rows,
                      gm_err *err);

/* Queues the listed copies on pf's stream (between its gm_cuda_pf_route and gm_cuda_pf_experts),
 * in order, the buffers filled by pool's threads, adds what they took to *st, and empties the
 * list. */
int gm_gpu_copies_flush(gm_gpu_copies *c, struct gm_cuda_pf *pf, gm_pool *pool, gm_gpu_copy_stats *st, gm_err *err);

#endif
