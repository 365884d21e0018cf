/* infer/engine: a loaded model and the sessions that run it on the CPU.
 *
 * Owns: gm_engine (the opened GGUF, its description, the weights bound per layer, the kernel
 * table and the compute thread pool) and gm_session (the KV cache, the recurrent state of
 * Gated DeltaNet layers, the position, and every scratch buffer of the forward pass, sized once
 * at creation for the largest chunk, so the decode loop allocates nothing).
 *
 * The forward pass is one architecture-agnostic layer loop (engine.c): embedding, then per
 * layer attention (attn.c, mla.c) or a Gated DeltaNet block (delta.c) and a MoE or dense FFN
 * block (moe.c), then the output head. What
 * differs per family (norm layout, RoPE style, routing function, shared experts, biases) is
 * described by gm_arch_ops filled by the family's arch_<name>.c.
 *
 * Numerics: F32/F16/BF16 weights multiply float32 activations (never rounded to 16 bits);
 * quantized weights multiply activations quantized as their format intends (Q8_0/Q8_K). The KV
 * cache is float32, IEEE half or 8-bit blocks (gm_kv_type). Prefill groups a chunk's tokens by expert so each routed expert's weights
 * are read once per chunk; it computes the same function as decoding one token at a time, bit
 * for bit, whatever the thread count (attention takes positions in fixed parts merged in a fixed
 * order however its work is split: infer/attn.c).
 *
 * Threads: an engine and its sessions belong to the thread that created them (the pool's owner).
 */
#ifndef GM_INFER_ENGINE_H
#define GM_INFER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "stream/shed.h"
#include "stream/stream.h"

typedef struct gm_engine gm_engine;
typedef struct gm_session gm_session;

/* Where the weights live. */
typedef enum gm_placement {
    GM_PLACE_AUTO = 0,  /* stream the experts when the plan says they do not fit (default) */
    GM_PLACE_EXPERTS,   /* --stream-experts: every-token weights pinned, experts through the arena */
    GM_PLACE_CPU,       /* --stream-cpu: the whole model over mmap and the page cache */
} gm_placement;

/* --stream-fast-disk: AUTO tests the drive at load and reads ahead harder from
 * GM_STREAM_FAST_DISK_GB_S; ON always; OFF never. Read-ahead is lossless either way. */
typedef enum gm_fast_disk { GM_FAST_DISK_AUTO = 0, GM_FAST_DISK_ON, GM_FAST_DISK_OFF } gm_fast_disk;

/* The default prefill chunks. A streamed model reads every expert a chunk routes once per chunk
 * (a whole layer through the prefill ring for a long one), so its chunk is wide: a prompt of up
 * to 8192 tokens reads the model once, not once per 512 tokens. In memory, 512 (llama.cpp's
 * micro-batch) keeps the session's scratch small. */
#define GM_ENGINE_CHUNK_STREAMED 8192u
#define GM_ENGINE_CHUNK_MEMORY 512u

typedef struct gm_engine_opts {
    int n_threads;          /* 0 = all CPUs this process may use */
    uint32_t max_chunk;     /* largest number of tokens one eval call takes (prefill step); 0:
                               GM_ENGINE_CHUNK_STREAMED when the experts stream, else
                               GM_ENGINE_CHUNK_MEMORY */
    gm_placement placement;
    uint32_t kv_ctx;        /* tokens of KV room the plan reserves (0: the plan's default) */
    uint32_t kv_bits;       /* bits per KV element the plan reserves: 16 or 32 (0: 16) */
    const gm_stream_opts *stream; /* feeder settings (NULL: defaults and the environment) */
    gm_fast_disk fast_disk;       /* --stream-fast-disk: how hard decode reads ahead */
    const gm_shed_opts *levers;   /* the lossy levers (stream/shed.h; NULL: none); they act only
                                     when the model streams, else a line says they are ignored */
    bool verbose;           /* print the [stream] lines of the load */
} gm_engine_opts;

/* Opens path and binds the weights (mmap: the weights stay in the page cache). GM_EUNSUPPORTED
 * for an architecture the forward pass does not implement, GM_EFORMAT for a missing or
 * misshapen tensor. */
int gm_engine_load(gm_engine **out, const char *path, const gm_engine_opts *opts, gm_err *err);
void gm_engine_free(gm_engine *e);

const gm_model_desc *gm_engine_desc(const gm_engine *e);
const gm_gguf *gm_engine_gguf(const gm_engine *e);
uint32_t gm_engine_n_vocab(const gm_engine *e);
/* The most tokens one eval call takes (opts->max_chunk, or the default for the placement). */
uint32_t gm_engine_max_chunk(const gm_engine *e);
int gm_engine_n_threads(const gm_engine *e);
const char *gm_engine_kernel_level(const gm_engine *e);
/* The decode arena's feeder when the experts stream, else NULL. */
gm_stream *gm_engine_stream(gm_engine *e);
/* The lossy levers in force (NULL: none, or the model does not stream). */
gm_shed *gm_engine_levers(gm_engine *e);
/* True when the every-token weights were pinned (streamed placement). */
bool gm_engine_streams(const gm_engine *e);

typedef enum gm_kv_type {
    GM_KV_F32 = 0, /* float32 cache: the exact path (gmlx logits) */
    GM_KV_F16 = 1, /* IEEE half: half the memory, about 5e-4 relative rounding */
    GM_KV_Q8_0 = 2, /* blocks of 32 int8 with an f16 scale (34 bytes per 32, --kv-bits 8): about
                       a quarter of f32, rounding up to 0.4% of each block's largest value;
                       head dims must be multiples of 32 */
} gm_kv_type;

/* A session with room for n_ctx tokens and a KV cache of kv_type. */
int gm_session_create(gm_session **out, gm_engine *e, uint32_t n_ctx, gm_kv_type kv_type, gm_err *err);
void gm_session_free(gm_session *s);

/* Forgets every token (position 0, recurrent states zero). */
void gm_session_reset(gm_session *s);
uint32_t gm_session_pos(const gm_session *s);
/* The most tokens one eval call of this session takes: the engine's max chunk, at most n_ctx
 * (the session's scratch is sized for it). */
uint32_t gm_session_max_chunk(const gm_session *s);
uint32_t gm_session_n_ctx(const gm_session *s);

/* Runs n tokens at the next positions (n <= gm_session_max_chunk, pos + n <= n_ctx). When logits is not
 * NULL it receives n_vocab floats per token if all_logits, else only the last token's. GM_ERANGE
 * when the context is full, GM_EINVAL for a token id outside the vocabulary. A call that fails
 * part way leaves the position where it was; on a model with recurrent layers their state may
 * have moved on, so the session refuses further calls (GM_EINVAL) until gm_session_reset. */
int gm_session_eval(gm_session *s, const int32_t *tokens, uint32_t n, float *logits, bool all_logits,
                    gm_err *err);

#endif
