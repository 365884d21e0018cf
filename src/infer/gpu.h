/* infer/gpu: the VRAM tier of routed experts on the CUDA device (issue [cuda], docs/cuda.md).
 *
 * Owns: gm_gpu, one engine's device memory for experts (one slab of equal slots, each an expert's
 * gate, up and down matrices), the map of which expert lives in which slot, the experts' decayed
 * use counts, and the device scratch that computes a token's experts (backend/cuda's gm_cuda_ffn).
 *
 * Placement: when every routed expert of the layers the device can run fits the memory given,
 * all of them are uploaded at load; otherwise as many as fit, the same number of each layer, and
 * decode then promotes into the tier the experts it uses most (a use counts +1, every count
 * halves each 4096 x layers uses; an expert the CPU computed replaces the least used resident
 * when it has been used more by 2, at most GM_GPU_UPLOADS_PER_TOKEN uploads a token so that a
 * token never waits long for them). The host keeps its copy (the arena or the file's pages).
 * When not every expert fits and the experts are in host memory (no arena), stage_slots slots of
 * the same memory are kept apart as staging: a prompt's chunk on the device copies the experts
 * it needs that the tier lacks through them (infer/gpu_decode.c); with pin_host the host's experts
 * are page-locked for those copies.
 *
 * Decode (moe.c): a token's experts found here are computed on the device, started before the
 * CPU computes the others and collected after; their outputs are added in ascending id order
 * with the CPU's, as in every other path. Prefill (a chunk computed from memory or the prefill
 * ring): the (expert, token) pairs of the chunk's experts found here, up to GM_GPU_PAIRS of them
 * (the experts in ascending id while they fit), are computed on the device while the CPU computes
 * the other experts; the CPU's are added first, then the device's, each in ascending id. Each
 * pair is computed alone, so a token's expert gives the same output in prefill as in decode.
 *
 * Without the CUDA backend in the build, gm_gpu_create fails (GM_EUNSUPPORTED, saying so) and
 * nothing else is reachable. The bookkeeping (gm_vram_tier) is plain C, tested without a device.
 *
 * Threads: the engine's owner thread.
 */
#ifndef GM_INFER_GPU_H
#define GM_INFER_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "stream/stream.h"

/* Uploads into the tier a decode token may make (each is an expert's bytes over PCIe from
 * pageable memory, about a millisecond for 10 MB). */
#define GM_GPU_UPLOADS_PER_TOKEN 8u
/* The most (expert, token) pairs one prefill layer computes on the device (its scratch: about
 * 3 ff + dim floats a pair). */
#define GM_GPU_PAIRS 4096u

/* The tier's bookkeeping: which (layer, expert) each of n_slots slots holds, and use counts. */
typedef struct gm_vram_tier {
    uint32_t n_layer, n_expert, n_slots, n_used;
    int32_t *slot_of;   /* [n_layer * n_expert]: the expert's slot, or -1 */
    int64_t *owner;     /* [n_slots]: layer * n_expert + expert, or -1 for a free slot */
    uint32_t *count;    /* [n_layer * n_expert]: decayed uses */
    uint64_t uses, halve_every;
} gm_vram_tier;

int gm_vram_tier_init(gm_vram_tier *t, uint32_t n_layer, uint32_t n_expert, uint32_t n_slots, gm_err *err);
void gm_vram_tier_free(gm_vram_tier *t);
/* Expert x of layer l's slot, or -1. */
int32_t gm_vram_tier_slot(const gm_vram_tier *t, uint32_t l, int32_t x);
/* Counts a use of expert x of layer l (and halves every count each halve_every uses). */
void gm_vram_tier_use(gm_vram_tier *t, uint32_t l, int32_t x);
/* The slot expert x of layer l goes into, claimed for it (the map holds it from now on): a free
 * one, else the least used resident's (the lowest slot among equals) when x's count exceeds that
 * resident's by more than 1; -1 when x stays out (or is in already). */
int32_t gm_vram_tier_claim(gm_vram_tier *t, uint32_t l, int32_t x);
/* Frees slot (its upload failed). */
void gm_vram_tier_drop(gm_vram_tier *t, int32_t slot);
/* extra more slots, free, after the others. */
int gm_vram_tier_grow(gm_vram_tier *t, uint32_t extra, gm_err *err);

typedef struct gm_gpu gm_gpu;
struct gm_engine;

/* The device (0) the tier would use (gmlx.h's gm_gpu_device): its name, memory, versions.
 * GM_EUNSUPPORTED without a CUDA build, a driver or a device, saying which. */
int gm_gpu_probe(gm_gpu_device *out, gm_err *err);

/* What the tier is given: at most vram_gb of device memory (<= 0: what the device has free less
 * 1.5 GB for the CUDA context and scratch), less what the device's attention holds already
 * (held_bytes, inside vram_gb) and will take for a session's cache (later_bytes); stage_slots
 * staging slots and pin_host (above); at most uploads_per_token promotions a decode token;
 * progress reports the uploads at load. */
typedef struct gm_gpu_opts {
    double vram_gb;
    uint64_t held_bytes, later_bytes;
    uint32_t stage_slots;
    bool pin_host;
    uint32_t uploads_per_token;
    void (*progress)(void *user, const char *what, uint64_t done, uint64_t total);
    void *user;
} gm_gpu_opts;

/* The tier for engine e (its weights bound) on dev (as gm_gpu_probe found it), preloaded when
 * every expert fits. GM_EUNSUPPORTED without a CUDA build, a device, or a layer the device can
 * run; GM_ENOMEM when not even one slot fits. Says what it placed through gm_log. */
int gm_gpu_create(gm_gpu **out, struct gm_engine *e, const gm_gpu_device *dev, const gm_gpu_opts *o, gm_err *err);
void gm_gpu_free(gm_gpu *g);
/* Whether layer l's experts can run on the device (its weight types, no per-expert biases). */
bool gm_gpu_layer(const gm_gpu *g, uint32_t l);
/* Expert x of layer l is in VRAM. */
bool gm_gpu_has(const gm_gpu *g, uint32_t l, int32_t x);
/* Counts a decode lookup of expert x of layer l (found here or not); n (expert, token) pairs of
 * a prompt computed on the device by the device's own chunk (infer/gpu_decode.c). */
void gm_gpu_note(gm_gpu *g, uint32_t l, int32_t x);
void gm_gpu_count_pairs(gm_gpu *g, uint64_t n);
/* Queues experts ids[0..n) of layer l (all in VRAM) for the token x (moe_dim floats). */
int gm_gpu_start(gm_gpu *g, uint32_t l, const int32_t *ids, uint32_t n, const float *x, gm_err *err);
/* Prefill: the pairs of a chunk, built expert by expert (reset, then add each expert in VRAM with
 * its c tokens of the chunk: false, nothing added, when they would not fit), then started for
 * the chunk's n_tok tokens x (n_tok rows of moe_dim floats). */
void gm_gpu_pairs_reset(gm_gpu *g);
bool gm_gpu_pairs_add(gm_gpu *g, uint32_t l, int32_t x, const int32_t *toks, uint32_t c);
int gm_gpu_pairs_start(gm_gpu *g, uint32_t l, const float *x, uint32_t n_tok, gm_err *err);
/* Waits for the last start: its rows (moe_dim floats each, in the order of the ids or the pairs
 * added) copied to rows when it is not NULL, and in place at gm_gpu_rows until the next start. */
int gm_gpu_finish(gm_gpu *g, float *rows, gm_err *err);
const float *gm_gpu_rows(const gm_gpu *g);
/* Expert x of layer l was computed on the CPU from src (valid during the call): uploads it when
 * the policy promotes it and the token's upload budget allows. */
int gm_gpu_offer(gm_gpu *g, uint32_t l, int32_t x, const gm_stream_expert *src, gm_err *err);
/* For the device decode (infer/gpu_decode.c): whether every routed expert of every MoE layer the
 * device runs is in VRAM (then none ever moves); layer l's table of every expert's matrices in
 * VRAM (n_expert entries into table; NULL: only the shape) and their shape, GM_EINVAL when the
 * layer's experts do not run on the device or one is not in VRAM; a decode token's use of expert x of layer l computed
 * by the device decode (counted as gm_gpu_note counts a lookup found here). */
struct gm_cuda_expert;
struct gm_cuda_ffn_shape;
bool gm_gpu_all_resident(const gm_gpu *g);
int gm_gpu_expert_table(gm_gpu *g, uint32_t l, struct gm_cuda_expert *table, struct gm_cuda_ffn_shape *shape,
                        gm_err *err);
/* For a prompt's chunk on the device when not every expert is in VRAM (infer/gpu_decode.c): expert
 * x of layer l's matrices in VRAM into *out (false: not there); the staging slots (0: none), and
 * slot i's matrices for an expert of layer l: the slots' gates lie one after the other (pitch[0]
 * bytes apart), then their ups (pitch[1]), then their downs (pitch[2]), so that consecutive
 * experts of the file go into consecutive slots with one copy a matrix. */
bool gm_gpu_find(gm_gpu *g, uint32_t l, int32_t x, struct gm_cuda_expert *out);
/* A staged chunk's layer l: count[x] (n_expert entries) of its (token, expert) pairs each
 * counted as a use (the tier learns what the prompt routes to); then, for an expert x it staged
 * (not in the tier), a slot of the tier claimed as a decode miss's promotion would claim one
 * (false: x stays out), its matrices into *to, for the caller to copy the staged ones into and
 * count (gm_gpu_count_seeded) or give back on a failure (gm_gpu_unclaim). */
void gm_gpu_count_prompt(gm_gpu *g, uint32_t l, const uint32_t *count);
bool gm_gpu_claim(gm_gpu *g, uint32_t l, int32_t x, struct gm_cuda_expert *to);
void gm_gpu_count_seeded(gm_gpu *g, uint32_t l);
void gm_gpu_unclaim(gm_gpu *g, uint32_t l, int32_t x);
/* Gives the staging slots to the tier (no prompt's chunk will stage through them): they take
 * experts now, in the load's order. */
int gm_gpu_unstage(gm_gpu *g, gm_err *err);
uint32_t gm_gpu_stage_slots(const gm_gpu *g);
/* Whether the host's experts are page-locked (GMLX_GPU_PIN_HOST took). */
bool gm_gpu_pinned(const gm_gpu *g);
struct gm_cuda_expert gm_gpu_stage_expert(gm_gpu *g, uint32_t l, uint32_t i, uint64_t pitch[3]);

/* The "[gpu]" exit lines (nothing before the first decode token). */
void gm_gpu_print_stats(const gm_gpu *g, gm_strbuf *out);

#endif
