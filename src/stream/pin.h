/* stream/pin: the every-token weights, read once at load into memory the kernel will not evict.
 *
 * Owns: one anonymous mapping holding a copy of every tensor the model description classes as
 * every-token (attention, shared experts, dense FFN and routers, embeddings, output head), read
 * from the file with parallel preads, then locked with mlock when RLIMIT_MEMLOCK (or
 * CAP_IPC_LOCK) allows. Unlocked anonymous memory is still never dropped like file pages: the
 * kernel can only swap it. The file pages the copy went through are dropped from the page
 * cache (posix_fadvise DONTNEED), so the weights are not held twice.
 *
 * Invariants: after gm_pin_create returns, the copy is complete and immutable.
 * Threads: created and freed on the engine's thread (its readers are threads of their own,
 * joined before it returns); gm_pin_data from any thread.
 */
#ifndef GM_STREAM_PIN_H
#define GM_STREAM_PIN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/model.h"

typedef struct gm_pin gm_pin;

typedef struct gm_pin_info {
    uint64_t bytes;        /* every-token bytes copied */
    uint64_t locked_bytes; /* of them locked with mlock (0 when refused) */
    int mlock_errno;       /* why mlock failed, 0 when it succeeded or was not tried */
    double read_s;         /* time the parallel read took */
} gm_pin_info;

/* Copies every-token tensors of g (classes from m) with n_threads readers; progress (may be
 * NULL) is called on the calling thread about every quarter second with the bytes copied so far.
 * GM_EIO names the tensor and offset of a failed or short read; GM_ENOMEM when the copy cannot
 * be allocated. */
int gm_pin_create(gm_pin **out, const gm_gguf *g, const gm_model_desc *m, int n_threads,
                  gm_gguf_progress_fn progress, void *ctx, gm_err *err);
void gm_pin_free(gm_pin *p);

/* The pinned copy of tensor i of g, or NULL when that tensor is not pinned. */
const void *gm_pin_data(const gm_pin *p, uint64_t tensor_index);
const gm_pin_info *gm_pin_get_info(const gm_pin *p);

#endif
