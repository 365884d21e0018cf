/* infer/gpu_decode: a decode token through every layer on the CUDA device (--gpu; docs/cuda.md),
 * when the whole model runs there: one upload of the token's embedding, one download of its
 * logits, no host round trip between the layers.
 *
 * A prompt's chunk of such a model runs whole on the device as well (gm_gpu_chunk_run), where the
 * attention's shape allows (backend/cuda's gm_cuda_pf_supports).
 *
 * Owns: gm_gpu_dec, one engine's device copies of what the attention's and the experts' tiers
 * (gpu_attn.c, gpu.c) do not hold: each layer's norms, router, router biases, selection bias and
 * table of every expert's place in VRAM, and the output norm; gm_gpu_tok, one session's token
 * scratch (backend/cuda's gm_cuda_dec, on the session's device attention).
 *
 * When: a family whose layers are the shared pre-norm attention + routed experts
 * (gm_layer_attn_ffn) without latent or grouped routing, hyper-connections or lookup tables;
 * every layer's attention on the device and every routed expert in VRAM (so none ever moves); the
 * output head on the device; no lossy lever in force. Otherwise a decode token runs layer by
 * layer as before, and the load says why (gm_log).
 *
 * Not every routed expert in VRAM, the experts in host memory (not through the decode arena):
 * - a prompt's chunk still runs whole on the device, the experts the tier lacks copied in through
 *   the tier's staging slots layer by layer (gm_gpu_chunk_run);
 * - a decode token is split (split): each MoE layer's attention, routing and the chosen experts
 *   the tier holds run on the device; the routing comes down (one round trip a layer), the CPU
 *   computes the other chosen experts from host memory while the device computes its own, their
 *   rows go up and the device sums all of them in ascending id order. After the token, the
 *   experts the CPU computed are offered to the tier (promotions, as the layer-by-layer path
 *   offers them). Within the bound of the CPU's kernels against the device's, not bit for bit
 *   the all-VRAM run.
 *
 * What a token computes is what the layer-by-layer path computes with the same kernels: the
 * attention as gm_cuda_attn_token, the routing as infer/moe.c's (on the device: the router's
 * product and the softmax's sums are summed in another order, so a near tie may pick another
 * expert), every expert as the VRAM tier computes it, their sum in ascending id order. The
 * token's K and V rows go into the host's cache as well, its experts' uses into the tier's
 * counts, and its last residual row and normalised row into the session (s->x, s->xn).
 *
 * Threads: the engine's owner thread (gm_gpu_dec), the session's (gm_gpu_tok).
 */
#ifndef GM_INFER_GPU_DECODE_H
#define GM_INFER_GPU_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "base/strbuf.h"

typedef struct gm_gpu_dec gm_gpu_dec;
typedef struct gm_gpu_tok gm_gpu_tok;
struct gm_engine;
struct gm_fwd;

/* How engine e's device decode runs (gm_gpu_dec_create). */
typedef struct {
    bool graph;          /* each session's tokens replayed as a CUDA graph after its first (not a
                            split token's) */
    bool prompt;         /* a prompt's chunks on the device too */
    bool split;          /* a token split with the CPU when not every expert is in VRAM */
    bool split_promotes; /* the experts the CPU computed promoted into the tier after a split
                            token (an upload from pageable memory holds the next token's device
                            work, docs/cuda.md) */
    bool bounce;         /* a staged chunk's copies through page-locked buffers (gpu_copy.h) */
} gm_gpu_dec_opts;

/* Engine e's device decode (e->gpu and e->gpu_attn made), as o says; *out stays NULL, and 0 is
 * returned, when e's model cannot decode whole on the device (the reason through gm_log). */
int gm_gpu_dec_create(gm_gpu_dec **out, struct gm_engine *e, const gm_gpu_dec_opts *o, gm_err *err);
void gm_gpu_dec_free(gm_gpu_dec *d);

/* Session s's token scratch (s->gkv made); *out NULL, and 0, when e has no device decode or s's
 * attention does not run on the device. */
int gm_gpu_tok_create(gm_gpu_tok **out, gm_gpu_dec *d, struct gm_fwd *s, gm_err *err);
void gm_gpu_tok_free(gm_gpu_tok *t);
/* Whether s's next decode token runs whole on the device. */
bool gm_gpu_tok_on(const struct gm_fwd *s);
/* The decode token at s->pos (its embedding in s->x, its rotation in s->rope_cos, s->rope_sin)
 * through every layer, the output norm and head: its logits (n_vocab floats; NULL: none). */
int gm_gpu_tok_run(struct gm_fwd *s, float *logits, gm_err *err);

/* Whether s's next chunk of n > 1 tokens runs whole on the device (backend/cuda's gm_cuda_pf:
 * the layers' products as matrix-matrix products; a chunk of more than its scratch's tokens runs
 * as several). */
bool gm_gpu_chunk_on(const struct gm_fwd *s, uint32_t n);
/* The chunk of n tokens at s->pos (their embeddings in s->x, rotations in s->rope_cos, s->rope_sin)
 * through every layer: the rows' residuals into s->x, their K and V rows into both caches, the
 * last token's normalised row into s->xn and its logits into logits (n_vocab floats; all: every
 * token's, n rows; NULL: none). */
int gm_gpu_chunk_run(struct gm_fwd *s, uint32_t n, float *logits, bool all, gm_err *err);

/* The "[gpu]" exit lines of the device decode and prompts (nothing before their first token). */
void gm_gpu_dec_print_stats(const gm_gpu_dec *d, gm_strbuf *out);

#endif
