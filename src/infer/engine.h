/* infer/engine: a loaded model and the sessions that run it on the CPU.
 *
 * Owns: gm_engine (the opened GGUF, its description, the weights bound per layer, the kernel
 * table and the compute thread pool) and gm_fwd (the KV cache, the recurrent state of
 * Gated DeltaNet layers, the position, and every scratch buffer of the forward pass, sized once
 * at creation for the largest chunk, so the decode loop allocates nothing).
 *
 * The forward pass (fwd.c): embedding, then per layer the family's recipe (infer/recipe.h,
 * src/infer/models/<arch>.c), which binds the layer's tensors and composes its blocks on the
 * residual stream: attention (attn.c, mla.c) or a Gated DeltaNet block (delta.c), a MoE or dense
 * FFN block (moe.c); then the output head. What the shared blocks need to know of a family (RoPE
 * style, routing function, gates, norm placement) is gm_arch_ops, filled by the recipe. A file
 * with a tensor no binder of its recipe took is refused at load, naming the tensor.
 *
 * Numerics: F32/F16/BF16 weights multiply float32 activations (never rounded to 16 bits);
 * quantized weights multiply activations quantized as their format intends (Q8_0/Q8_K). The KV
 * cache is float32, IEEE half or 8-bit blocks (gm_kv_type). Prefill groups a chunk's tokens by expert so each routed expert's weights
 * are read once per chunk; it computes the same function as decoding one token at a time, bit
 * for bit, whatever the thread count (attention takes positions in fixed parts merged in a fixed
 * order however its work is split: infer/attn.c).
 *
 * Threads: an engine and its forward states belong to one owner thread at a time: the creator,
 * or the thread that last called gm_engine_adopt (the pool's owner).
 */
#ifndef GM_INFER_ENGINE_H
#define GM_INFER_ENGINE_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "stream/shed.h"
#include "stream/stream.h"

typedef struct gm_engine gm_engine;
typedef struct gm_fwd gm_fwd;

/* The default prefill chunks. A streamed model reads every expert a chunk routes once per chunk
 * (a whole layer through the prefill ring for a long one), so its chunk is wide: a prompt of up
 * to 8192 tokens reads the model once, not once per 512 tokens. In memory, 512 (llama.cpp's
 * micro-batch) keeps the session's scratch small. */
#define GM_ENGINE_CHUNK_STREAMED 8192u
#define GM_ENGINE_CHUNK_MEMORY 512u
/* The arena token split's default: prefills of up to this many tokens after a decode go through
 * the decode arena (GMLX_ARENA_TOKEN_SPLIT). */
#define GM_ENGINE_SPLIT_DEFAULT 256u

typedef struct gm_engine_opts {
    int n_threads;          /* 0 = all CPUs this process may use */
    uint32_t max_chunk;     /* largest number of tokens one eval call takes (prefill step); 0:
                               GM_ENGINE_CHUNK_STREAMED when the experts stream, else
                               GM_ENGINE_CHUNK_MEMORY */
    gm_placement placement;
    uint32_t kv_ctx;        /* tokens of KV room the plan reserves (0: the plan's default) */
    uint32_t kv_bits;       /* bits per KV element the plan reserves: 16 or 32 (0: 16) */
    const gm_stream_opts *stream; /* feeder settings replacing the tuning's (tests; NULL: the
                                     defaults and the tuning) */
    gm_fast_disk fast_disk;       /* --stream-fast-disk: how hard decode reads ahead */
    const gm_shed_opts *levers;   /* the lossy levers (stream/shed.h; NULL: none); they act only
                                     when the model streams, else a line says they are ignored */
    const gm_tuning *tuning;      /* the GMLX_* settings (NULL: gm_tuning_default) */
    gm_progress_fn progress;      /* load progress (NULL: none) */
    void *progress_user;
    int gpu;                      /* 1: the CUDA device's VRAM tier of experts (infer/gpu.h) and
                                     attention (infer/gpu_attn.h); 0: none; -1: those when the
                                     experts stream through an arena and a device is found (a
                                     device that cannot take them is then left unused, a note
                                     says why) */
    double vram_gb;               /* its most device memory; <= 0: what the device has free */
} gm_engine_opts;

/* Opens path and binds the weights (mmap: the weights stay in the page cache). GM_EUNSUPPORTED
 * for an architecture the forward pass does not implement, GM_EFORMAT for a missing or
 * misshapen tensor. */
int gm_engine_load(gm_engine **out, const char *path, const gm_engine_opts *opts, gm_err *err);
void gm_engine_free(gm_engine *e);
/* Makes the calling thread the engine's owner (its compute pool's): for a caller that lets one
 * thread at a time use the engine, under its own lock. */
void gm_engine_adopt(gm_engine *e);

const gm_model_desc *gm_engine_desc(const gm_engine *e);
const gm_gguf *gm_engine_gguf(const gm_engine *e);
uint32_t gm_engine_n_vocab(const gm_engine *e);
/* The most tokens one eval call takes (opts->max_chunk, or the default for the placement). */
uint32_t gm_engine_max_chunk(const gm_engine *e);
int gm_engine_n_threads(const gm_engine *e);
const char *gm_engine_kernel_level(const gm_engine *e);
/* The decode arena's feeder when the experts stream, else NULL. */
gm_stream *gm_engine_stream(gm_engine *e);
/* GMLX_DECODE_LAYER_PROFILE: the "[profile]" lines of the decode tokens timed so far (nothing
 * when the profile is off or no token ran), appended to out. */
void gm_engine_print_profile(const gm_engine *e, gm_strbuf *out);
/* The lossy levers in force (NULL: none, or the model does not stream). */
gm_shed *gm_engine_levers(gm_engine *e);
/* The "[gpu]" exit lines of the VRAM tier (nothing without one), appended to out. */
void gm_engine_print_gpu(const gm_engine *e, gm_strbuf *out);
/* The lookup table's gathers from the file (rows asked, bytes the drive was asked for) when the
 * model reads one that way (its experts stream); false otherwise. */
bool gm_engine_table_stats(const gm_engine *e, uint64_t *rows, uint64_t *bytes_read);
/* The "[stream] per-layer embedding table" exit line (nothing unless the table is read from the
 * file), appended to out. */
void gm_engine_print_tables(const gm_engine *e, gm_strbuf *out);
/* True when the every-token weights were pinned (streamed placement). */
bool gm_engine_streams(const gm_engine *e);


/* A session with room for n_ctx tokens and a KV cache of kv_type. */
int gm_fwd_create(gm_fwd **out, gm_engine *e, uint32_t n_ctx, gm_kv_type kv_type, gm_err *err);
void gm_fwd_free(gm_fwd *s);

/* Forgets every token (position 0, recurrent states zero). */
void gm_fwd_reset(gm_fwd *s);
uint32_t gm_fwd_pos(const gm_fwd *s);
/* The most tokens one eval call of this session takes: the engine's max chunk, at most n_ctx
 * (the session's scratch is sized for it). */
uint32_t gm_fwd_max_chunk(const gm_fwd *s);
uint32_t gm_fwd_n_ctx(const gm_fwd *s);

/* Runs n tokens at the next positions (n <= gm_fwd_max_chunk, pos + n <= n_ctx). When logits is not
 * NULL it receives n_vocab floats per token if all_logits, else only the last token's. GM_ERANGE
 * when the context is full, GM_EINVAL for a token id outside the vocabulary. A call that fails
 * part way leaves the position where it was; on a model with recurrent layers their state may
 * have moved on, so the session refuses further calls (GM_EINVAL) until gm_fwd_reset. */
int gm_fwd_eval(gm_fwd *s, const int32_t *tokens, uint32_t n, float *logits, bool all_logits,
                    gm_err *err);

/* Cancel: while *flag is nonzero, an eval stops at its next layer with GM_ECANCELED (the position
 * stays; a model with recurrent layers then needs a snapshot restored or a reset). NULL: none. */
void gm_fwd_set_cancel(gm_fwd *s, const atomic_int *flag);

/* Rewinding. gm_fwd_can_rewind: whether the state at pos can be had by moving the position back
 * (attention caches keep every position; a ring keeps its window only while nothing past it was
 * written over it; a recurrent state holds only the current position). gm_fwd_rewind does it
 * (when can_rewind). Otherwise a snapshot is restored: gm_fwd_state_save copies the rings and
 * the recurrent states (gm_fwd_state_bytes of them) and gm_fwd_state_load puts them back with
 * the position they were saved at (attention rows before it are never overwritten). */
bool gm_fwd_can_rewind(const gm_fwd *s, uint32_t pos);
/* True when the state is that of its position (no failed or canceled eval left a ring or a
 * recurrent state past it): gm_fwd_can_rewind at the position itself. */
bool gm_fwd_whole(const gm_fwd *s);
void gm_fwd_rewind(gm_fwd *s, uint32_t pos);
uint64_t gm_fwd_state_bytes(const gm_fwd *s);
void gm_fwd_state_save(const gm_fwd *s, void *buf);
void gm_fwd_state_load(gm_fwd *s, const void *buf, uint32_t pos);

#endif
