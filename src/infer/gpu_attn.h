/* infer/gpu_attn: a decode token's attention and output head on the CUDA device (--gpu;
 * docs/cuda.md): the every-token weights it reads most.
 *
 * Owns: gm_gpu_attn, one engine's device copy of the attention weights (q, k, v and output
 * projections, their biases, the per-head q/k norms, the sinks) of every layer whose attention the
 * device can run, and of the output head (the logits of a decode token); gm_gpu_kv, one session's KV cache in device memory for those layers (the same
 * rows, of the same type, as the session's cache on the host) and its scratch.
 *
 * Which layers: grouped-query attention over the whole context (no sliding window), with or
 * without biases, per-head q/k RMSNorm before or after the rotation, sinks; head dims that are
 * whole warps up to 256, a float32 or half cache. Latent attention, recurrent layers, sparse
 * attention, output gates and an 8-bit cache stay on the CPU.
 *
 * A decode token's attention of such a layer runs on the device (backend/cuda's
 * gm_cuda_attn_token): its normalised residual goes up, the output comes back with the token's
 * K and V rows, which also go into the host's cache, so that both caches hold the same rows. A
 * prompt's chunk runs on the CPU as before, and its rows are then copied into the device's cache
 * (gm_gpu_kv_put). The rows before a session's position are never rewritten elsewhere (the
 * excluded windowed layers are the only ones whose state is saved and restored), so a rewind
 * keeps the two caches equal.
 *
 * Threads: the engine's owner thread.
 */
#ifndef GM_INFER_GPU_ATTN_H
#define GM_INFER_GPU_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "base/strbuf.h"

typedef struct gm_gpu_attn gm_gpu_attn;
typedef struct gm_gpu_kv gm_gpu_kv;
struct gm_engine;
struct gm_fwd;

/* Engine e's attention on dev (as gm_gpu_probe found it; its weights bound, e->attn_scale set): the weights of every
 * layer it can run and the output head uploaded. *out stays NULL, and 0 is returned, when neither
 * can run there or the weights
 * and the caches of kv_ctx positions (kv_bits 16 or 32) do not fit vram_gb (> 0) or the device
 * (the reason through gm_log). *held_bytes is the device memory taken now, *later_bytes what a
 * session of kv_ctx positions will take. */
int gm_gpu_attn_create(gm_gpu_attn **out, struct gm_engine *e, const gm_gpu_device *dev, double vram_gb,
                       uint32_t kv_ctx, uint32_t kv_bits, uint64_t *held_bytes, uint64_t *later_bytes, gm_err *err);
void gm_gpu_attn_free(gm_gpu_attn *a);
/* Whether layer l's attention runs on the device. */
bool gm_gpu_attn_layer(const gm_gpu_attn *a, uint32_t l);

/* Session s's cache on the device (s's kv_cap, kv_type); NULL, and 0, when no layer's attention
 * runs there. GM_ENOMEM when the device has no room,
 * GM_EUNSUPPORTED for a cache type the kernels do not read (8-bit). */
int gm_gpu_kv_create(gm_gpu_kv **out, gm_gpu_attn *a, const struct gm_fwd *s, gm_err *err);
void gm_gpu_kv_free(gm_gpu_kv *kv);

/* Layer l's attention of the token at s->pos (s->xn in), n_embd floats into out; the token's
 * K and V rows into both caches. */
int gm_gpu_attn_token(gm_gpu_attn *a, struct gm_fwd *s, uint32_t l, float *out, gm_err *err);
/* Copies the rows of positions s->pos .. s->pos + n of layer l from the host's cache into the
 * device's (after the CPU computed a chunk); gm_gpu_kv_get the rows of positions pos .. pos + n
 * back into the host's (after the device computed a chunk). */
int gm_gpu_kv_put(gm_gpu_attn *a, struct gm_fwd *s, uint32_t l, uint32_t n, gm_err *err);
int gm_gpu_kv_get(struct gm_fwd *s, uint32_t l, uint32_t pos, uint32_t n, gm_err *err);

/* The output head on the device (loaded with the attention when its type has a product): the
 * logits of one token, x its n_embd floats after the output norm (host memory), n_vocab floats
 * into logits (host memory). */
bool gm_gpu_head_on(const gm_gpu_attn *a);
int gm_gpu_head(gm_gpu_attn *a, const float *x, float *logits, gm_err *err);

/* For the device decode (infer/gpu_decode.c): layer l's attention weights on the device (NULL
 * when its attention runs on the CPU), the output head's (NULL when on the CPU); a session's cache
 * of layer l on the device (GM_EINVAL when it has none there) and its attention scratch. */
struct gm_cuda_attn_layer;
struct gm_cuda_mat;
struct gm_cuda_attn;
const struct gm_cuda_attn_layer *gm_gpu_attn_weights(const gm_gpu_attn *a, uint32_t l);
const struct gm_cuda_mat *gm_gpu_head_weights(const gm_gpu_attn *a);
int gm_gpu_kv_layer(gm_gpu_kv *kv, const struct gm_fwd *s, uint32_t l, void **kc, void **vc, gm_err *err);
struct gm_cuda_attn *gm_gpu_kv_attn(gm_gpu_kv *kv);
/* Token t's rotation of the chunk (0: a decode token's) as the device takes it: its n_rot / 2
 * cosines of s->rope_cos, then its sines of s->rope_sin, into cs (n_rot floats). The token's
 * cached rows of layer l (n_head_kv rows each, as the device gives them) into the host's cache at
 * s->pos. */
void gm_gpu_rope_cs(const struct gm_fwd *s, uint32_t t, float *cs);
void gm_gpu_kv_store(struct gm_fwd *s, uint32_t l, const void *k_rows, const void *v_rows);

/* The "[gpu]" exit line of the attention (nothing before the first token on the device). */
void gm_gpu_attn_print_stats(const gm_gpu_attn *a, gm_strbuf *out);

#endif
