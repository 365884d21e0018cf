/* tools/gen/model: presets of real MoE shapes, and per architecture the tensor table and the
 * metadata keys that llama.cpp's converter writes (internal to gmlx_gen).
 *
 * Owns: the preset table, the plan (ordered list of tensors with name, kind, type, dims) and the
 * architecture metadata. Tensor names, dims (ggml order, innermost first) and keys follow the
 * converter's output for each architecture (see tests/fixtures and docs/generator.md).
 * Threads: pure functions and read-only tables.
 */
#ifndef GM_TOOLS_GEN_MODEL_H
#define GM_TOOLS_GEN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gen.h"
#include "ggufw.h"

/* What a tensor holds, which decides its type and how its values are drawn. */
typedef enum gen_kind {
    GEN_EXPERT = 0,   /* routed expert matrices [in, out, n_expert]: expert type */
    GEN_MATRIX,       /* every-token matrices: dense type */
    GEN_EMBD,         /* token embedding: dense type */
    GEN_OUTPUT,       /* output head: dense type */
    GEN_NORM,         /* RMSNorm weights: F32, about 1 */
    GEN_ROUTER,       /* ffn_gate_inp: F32, rows scaled by the skew */
    GEN_BIAS,         /* biases: F32, small */
    GEN_SINKS,        /* gpt-oss attention sinks: F32 */
    GEN_PROBS_B,      /* exp_probs_b (selection bias of sigmoid routers): F32, small */
    GEN_CONV,         /* ssm_conv1d kernels: F32, std 1/sqrt(kernel) */
    GEN_SSM_A,        /* ssm_a = -exp(A_log): F32, -1 to -16 */
    GEN_HC_FN,        /* hyper-connection mixing matrices, residual-attention scores: F32,
                       * std 1/sqrt(fan_in) */
    GEN_PLE_EMBD,     /* qwen4exp's n-gram hash embedding table: expert type (bulk data read a
                       * few rows a token, as the experts are), values of std 1 */
    GEN_HC_MIX,       /* qwen4exp's stream mixers' matrices whose outputs the model divides by
                       * hc_count (the read gate's down, inject): dense type, std
                       * hc_count/sqrt(fan_in) */
    GEN_HASH,         /* deepseek4's ffn_gate_tid2eid: I32 [k, n_vocab], k distinct expert ids a
                       * token */
} gen_kind;

typedef struct gen_tensor {
    char name[64];
    gen_kind kind;
    uint32_t type;       /* type written */
    uint32_t want_type;  /* type asked for (differs when rows do not fit its blocks) */
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t layer;      /* block index; UINT32_MAX for the global tensors */
    uint64_t n_bytes;
} gen_tensor;

typedef struct gen_plan {
    gen_tensor *t;
    size_t n, cap;
} gen_plan;

/* Preset lookup; NULL when unknown. */
const gm_gen_hparams *gm_gen_preset_find(const char *name);

/* Builds the tensor list of hp. */
int gm_gen_plan_build(const gm_gen_hparams *hp, gen_plan *plan, gm_err *err);
void gm_gen_plan_free(gen_plan *plan);

/* The type that a tensor of row length ne0 gets when want does not fit (a whole number of
 * blocks per row is required): Q4_0 for the 2-bit and 4-bit super-block types, Q8_0 for the
 * 5- and 6-bit ones, F16 when nothing quantized fits. */
uint32_t gm_gen_fit_type(uint32_t want, uint64_t ne0);

/* general.file_type (llama_ftype) of a file whose experts have this type. */
uint32_t gm_gen_file_type(uint32_t expert_type);

/* Latent attention (deepseek2, glm-dsa); a glm-dsa block with its own indexer (the others reuse
 * the last one's top-k). */
bool gm_gen_mla(const gm_gen_hparams *hp);
/* deepseek4: block il's attention.compress_ratios entry (0: raw attention). */
uint32_t gm_gen_dsv4_ratio(const gm_gen_hparams *hp, uint32_t il);
bool gm_gen_indexer_full(const gm_gen_hparams *hp, uint32_t il);
/* A kimi-k3 block of KDA linear attention (the others: latent attention). */
bool gm_gen_kda(const gm_gen_hparams *hp, uint32_t il);
/* A hybrid block of full attention (the others: Gated DeltaNet). */
bool gm_gen_full_attn(const gm_gen_hparams *hp, uint32_t il);

/* qwen4exp's n-gram hash embedding: the number of heads ((ngram - 1) * per ngram; 0 without
 * one), and the rows of its table (the heads' vocabularies, consecutive primes from ple_base,
 * end to end, padded to a multiple of 128 as the checkpoint is); sizes and offsets (of
 * GM_GEN_PLE_MAX_HEADS entries, may be NULL) get each head's vocabulary and first row. */
#define GM_GEN_PLE_MAX_HEADS 64
uint32_t gm_gen_ple_heads(const gm_gen_hparams *hp);
uint64_t gm_gen_ple_rows(const gm_gen_hparams *hp, uint64_t *sizes, uint64_t *offsets);
/* The hash's multipliers (ple_ngram of them), as the model's reference draws them: seed 1234,
 * splitmix64, odd, below (2^63 - 1) / n_vocab. */
void gm_gen_ple_multipliers(const gm_gen_hparams *hp, uint64_t *out);

/* Writes the "<arch>.*" hyper-parameter keys of hp. */
int gm_gen_write_arch_kv(gm_ggufw *w, const gm_gen_hparams *hp, gm_err *err);

#endif
