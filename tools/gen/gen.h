/* tools/gen/gen: the random-weight MoE model generator (library gmlx_gen, tool gmlx-gen).
 *
 * Owns: turning options (a preset of a real model shape, scaled and overridden) into a GGUF v3
 * file that llama.cpp's converter could have written for that architecture: the same tensor
 * names, shapes and metadata keys, random weights. Used by plan tests (sparse files of real
 * shapes, hundreds of GB that cost no disk) and by streaming benchmarks (real files larger than
 * RAM, written at disk speed in constant memory).
 *
 * The weights are zero-mean with std 1/sqrt(fan_in) after dequantization, every expert is
 * distinct, and routers may be skewed (--skew) so that some experts are popular; see
 * docs/generator.md and tools/gen/blocks.h.
 *
 * Library code never prints: gm_gen_run reports notes and progress through a callback.
 * Threads: one caller thread per call (the writer uses two internal I/O threads).
 */
#ifndef GM_TOOLS_GEN_GEN_H
#define GM_TOOLS_GEN_GEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

typedef enum gm_gen_arch {
    GM_GEN_QWEN3MOE = 0,
    GM_GEN_DEEPSEEK2,
    GM_GEN_GPTOSS,
    GM_GEN_GLM4MOE,
    GM_GEN_LLAMA,      /* Mixtral: GGUF arch "llama" with expert tensors */
    GM_GEN_MINIMAX_M2,
    GM_GEN_QWEN3NEXT,  /* hybrid: Gated DeltaNet blocks between full-attention ones */
    GM_GEN_QWEN35MOE,  /* Qwen3.5 MoE: qwen3next's blocks, beta and alpha as two tensors, the
                        * value heads in tiled order (a layout fact, invisible in random data) */
    GM_GEN_ERNIE45MOE, /* ERNIE 4.5 MoE: adjacent-pair RoPE, softmax router with a selection
                        * bias, leading dense blocks, shared experts */
    GM_GEN_HYV3,       /* Hy3: qwen3moe's attention, sigmoid router with a selection bias
                        * named exp_probs_b, a shared expert, leading dense blocks */
    GM_GEN_HUNYUANMOE, /* Hunyuan-A13B: q/k norms after RoPE, softmax router, a shared expert
                        * in every block */
    GM_GEN_GLM_DSA,    /* GLM-5.2: deepseek2's latent attention and MoE, and a lightning
                        * indexer (DeepSeek sparse attention) in its full-indexer blocks */
    GM_GEN_MINIMAX_M3, /* MiniMax-M3: minimax-m2's attention with per-head q/k norms, leading
                        * dense blocks, a shared expert, clamped SwiGLU, and MiniMax sparse
                        * attention (an indexer head per kv head choosing blocks) in its MoE
                        * blocks */
    GM_GEN_HYV4,       /* Hy4: deepseek2's latent attention (with sinks and an output gate) and
                        * MoE (clamped routed SwiGLU) on hyper-connections; a lightning indexer
                        * in its full-indexer blocks when idx_topk is set */
    GM_GEN_KIMI_K3,    /* Kimi-K3: KDA linear-attention blocks between latent-attention ones
                        * (no RoPE, gated values), cross-layer residual attention, a latent MoE
                        * and the situ activation */
    GM_GEN_QWEN4EXP,   /* Qwen3.8-Flash-Next: qwen35moe's blocks on hyper-connections (low-rank
                        * gated mixers in place of every norm), block-sparse attention (QSA) with
                        * an indexer in the full-attention blocks, and n-gram hash embeddings
                        * (PLE) added to the streams of one Gated DeltaNet block */
    GM_GEN_DEEPSEEK4,  /* DeepSeek-V4: a query latent, one key/value row with sinks and a sliding
                        * window, a grouped low-rank output; sqrt-softplus routing, the leading
                        * blocks routed by token id, clamped SwiGLUs; Sinkhorn-mixed
                        * hyper-connections; compressed keys (CSA, HCA) where qsa_ratio is set */
    GM_GEN_ARCH_COUNT,
} gm_gen_arch;

/* GGUF value of general.architecture ("qwen3moe", "deepseek2", "gpt-oss", ...). */
const char *gm_gen_arch_name(gm_gen_arch arch);

/* The resolved shape of the model to write (a preset with scaling and overrides applied). */
typedef struct gm_gen_hparams {
    gm_gen_arch arch;
    const char *preset;        /* preset name */
    const char *name;          /* general.name */
    uint32_t n_layer;          /* blocks */
    uint32_t n_dense_lead;     /* leading blocks with a dense FFN instead of experts */
    uint32_t n_embd;           /* hidden size */
    uint32_t n_ff;             /* dense FFN size (leading dense blocks) */
    uint32_t n_ff_exp;         /* routed expert FFN size */
    uint32_t n_expert, n_expert_used, n_expert_shared;
    uint32_t n_head, n_head_kv;
    uint32_t head_dim_k, head_dim_v; /* per head; MLA: see below */
    uint32_t n_vocab, n_ctx;
    /* deepseek2 MLA (n_head_kv is 1 and head_dim_k/v are kv_lora + rope / kv_lora there) */
    uint32_t q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head_mla;
    /* glm-dsa: the indexer's heads, head dim and top-k; idx_shared_every > 0 writes
     * attention.indexer.types with blocks 0 and 1 full and then one full block in every
     * idx_shared_every (GLM-5.2's pattern for 4; the others reuse the last full block's top-k) */
    uint32_t idx_heads, idx_dim, idx_topk, idx_shared_every;
    /* minimax-m3: positions per block and the latest blocks always attended (idx_topk counts
     * blocks) */
    uint32_t idx_block, idx_local;
    /* hy_v4: residual streams, their epsilon and post magnitude; the routed SwiGLU clamp;
     * qwen4exp: residual streams and the rank of their mixers (hc_rank) */
    uint32_t hc_count, hc_rank;
    float hc_eps, hc_magnitude, swiglu_limit;
    /* qwen4exp: QSA attends blocks of qsa_ratio positions in the full-attention blocks (0:
     * dense attention there; idx_heads, idx_dim, idx_topk give the indexer, top-k in
     * positions); the n-gram hash embedding (PLE; ple_ngram 0: none) in block ple_layer hashes
     * the 2..ple_ngram-grams into ple_per_ngram heads each, rows of n_embd / heads values, the
     * head vocabularies the consecutive primes above ple_base, a causal convolution of ple_conv
     * taps; ple_eos (the tokenizer's EOS) resets the n-grams */
    uint32_t qsa_ratio, ple_layer, ple_ngram, ple_per_ngram, ple_conv, ple_base, ple_eos;
    /* kimi-k3: KDA head dim and decay bound, latent attention in every kda_every-th block
     * (il % kda_every == kda_every - 1), the routed experts' latent width, the residual
     * attention's block, situ's betas */
    uint32_t kda_head_dim, kda_every, latent, res_block;
    float kda_lb, situ_beta, situ_linear_beta;
    /* deepseek4: Sinkhorn iterations, hash-routed leading blocks, the output's groups and rank,
     * the compressed blocks' RoPE base (qsa_ratio > 0: blocks from 2 on compress their keys, 4
     * and 128 alternating; 0: every block raw) */
    uint32_t hc_sinkhorn, n_hash, o_groups, o_lora;
    float compress_rope_base;
    uint32_t rope_dim;         /* rope.dimension_count (0: key not written) */
    float rope_base, eps;
    /* routing */
    uint32_t gating_func;      /* expert_gating_func (0: key not written; 1 softmax, 2 sigmoid) */
    uint32_t n_group, n_group_used; /* expert groups (0: keys not written) */
    float weights_scale;       /* expert_weights_scale (0: not written) */
    bool weights_norm;         /* expert_weights_norm (written when gating_func is) */
    /* rope scaling (yarn_factor 0: none) */
    float yarn_factor, yarn_log_mul, yarn_beta_fast, yarn_beta_slow;
    uint32_t yarn_orig_ctx;
    uint32_t sliding_window;   /* gpt-oss */
    bool qk_norm;              /* per-head q/k RMSNorm (minimax-m2: over all heads) */
    bool qkv_bias;             /* glm4moe */
    /* qwen3next: every full_attn_interval-th block is full attention (its attn_q gives a gate
     * per head), the others Gated DeltaNet with ssm_nk key heads of ssm_dk, ssm_nv value heads
     * of ssm_dv and a convolution of ssm_conv; ssm_in_fused writes the q/k/v/z projection as
     * one ssm_in tensor grouped per key head (older converters) instead of attn_qkv + attn_gate,
     * with the same rows as the split file of the same seed */
    uint32_t full_attn_interval, ssm_nk, ssm_dk, ssm_nv, ssm_dv, ssm_conv;
    bool ssm_in_fused;
    uint32_t expert_type;      /* routed expert matrices */
    uint32_t dense_type;       /* every-token matrices, embeddings, output head */
} gm_gen_hparams;

/* qwen3next, qwen35moe and qwen4exp: Gated DeltaNet blocks between full-attention ones. */
bool gm_gen_hybrid(const gm_gen_hparams *hp);

/* Progress and notes from gm_gen_run. */
typedef enum gm_gen_event_kind {
    GM_GEN_EV_NOTE = 0,      /* msg: one line worth telling (e.g. a type fallback) */
    GM_GEN_EV_PROGRESS = 1,  /* about twice a second while tensor data is written */
    GM_GEN_EV_DONE = 2,      /* once, after the file is complete */
} gm_gen_event_kind;

typedef struct gm_gen_event {
    gm_gen_event_kind kind;
    const char *msg;
    uint64_t done_bytes, total_bytes; /* tensor data */
    double elapsed_s;
} gm_gen_event;

typedef struct gm_gen_opts {
    const char *preset;        /* a preset name (see gm_gen_preset_names) */
    const char *output;        /* path of the GGUF file to write */
    /* Overrides; 0 (or -1 where signed) keeps the preset's value. */
    uint32_t n_layer, n_expert, n_expert_used, n_embd, n_ff, n_ff_exp, n_head, n_head_kv;
    uint32_t latent; /* --expert-latent: kimi-k3's routed experts' width */
    double yarn;     /* --yarn FACTOR[:LOG_MUL]: YaRN scaling of the context by FACTOR (0: the preset's) */
    double yarn_log_mul;
    uint32_t head_dim, n_vocab, n_ctx, q_lora_rank, kv_lora_rank;
    int32_t n_dense_lead, n_expert_shared;
    int32_t expert_type, dense_type; /* gm_type ids; -1: the preset's default */
    const char *tokenizer_from;      /* copy tokenizer.* from this GGUF (NULL: synthetic vocab) */
    double skew;                     /* router skew S >= 0 (0: none) */
    double embd_std;                 /* std of token embedding values (0: sqrt(layers), see gen.c) */
    uint64_t seed;
    bool sparse;                     /* leave the tensor data unwritten (a hole) */
    bool dry_run;                    /* resolve and size the file, write nothing */
    bool quiet;                      /* no PROGRESS events */
    bool direct;                     /* O_DIRECT writes (default: buffered, pages dropped) */
    bool ssm_in;                     /* qwen3next: the fused ssm_in layout (--ssm-in) */
    bool no_ple;                     /* qwen4exp: no n-gram hash embedding (--no-ple) */
    int32_t qsa_ratio;               /* qwen4exp: QSA block size, 0 dense (--compress-ratio; -1: preset's) */
    void (*on_event)(void *ctx, const gm_gen_event *ev);
    void *event_ctx;
} gm_gen_opts;

/* Defaults: preset NULL, every override kept, seed 1, no skew. */
void gm_gen_opts_init(gm_gen_opts *o);

/* What gm_gen_parse_args found besides options. */
enum { GM_GEN_ARGS_RUN = 0, GM_GEN_ARGS_HELP = 1, GM_GEN_ARGS_LIST = 2 };

/* Parses command-line arguments (argv[0..argc), without the program name) into o. Returns
 * GM_GEN_ARGS_RUN, GM_GEN_ARGS_HELP (--help), GM_GEN_ARGS_LIST (--list-presets), or GM_EINVAL
 * with a message naming the bad flag or value. String options point into argv. */
int gm_gen_parse_args(gm_gen_opts *o, int argc, char *const *argv, gm_err *err);

/* The --help text. */
const char *gm_gen_usage(void);

/* Number of presets and the name / one-line description of preset i. */
int gm_gen_n_presets(void);
const char *gm_gen_preset_name(int i);
const char *gm_gen_preset_desc(int i);

/* Applies o (preset, scaling, overrides, types) and checks the result. Does not read the
 * tokenizer file (n_vocab is then the preset's or --vocab). */
int gm_gen_resolve(const gm_gen_opts *o, gm_gen_hparams *hp, gm_err *err);

typedef struct gm_gen_result {
    gm_gen_hparams hp;
    uint64_t n_tensors;
    uint64_t file_bytes;      /* size of the GGUF file */
    uint64_t data_bytes;      /* tensor data section */
    uint64_t expert_bytes;    /* routed expert tensors */
    uint64_t expert_slice_bytes; /* one expert of one layer: gate + up + down */
    double seconds;           /* writing time (0 for sparse and dry runs) */
    bool direct_io;           /* tensor data went to the disk with O_DIRECT */
    bool sparse;              /* the tensor data was left unwritten */
} gm_gen_result;

/* Writes the file (or, with dry_run, only computes res). On failure no file is left at the
 * output path (nor its .tmp). */
int gm_gen_run(const gm_gen_opts *o, gm_gen_result *res, gm_err *err);

#endif
