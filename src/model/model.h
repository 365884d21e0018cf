/* model/model: what a GGUF file holds, described for planning and loading.
 *
 * Owns: gm_model_desc, built from an opened gm_gguf: the architecture (from
 * general.architecture, looked up in the family table of arch.c), its hyper-parameters, and the
 * class of every tensor:
 *   - routed expert stacks: blk.N.ffn_{gate,up,down}_exps.weight and blk.N.ffn_gate_up_exps.weight
 *     (3-D, expert index slowest, so expert e is one contiguous slice);
 *   - every-token weights, by group (attention, shared experts, dense ffn and routers,
 *     embeddings, output head, other);
 *   - lookup tables read by row gather (per-layer token embedding tables), which may stay on disk;
 *   - the MTP drafter layers (nextn), loaded only when speculative decoding uses them.
 * An architecture outside the table still gets a description from tensor names alone and is
 * marked not runnable.
 * Threads: a gm_model_desc is immutable after gm_model_describe; read it from any thread.
 */
#ifndef GM_MODEL_MODEL_H
#define GM_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

typedef enum gm_tensor_class {
    GM_TC_EVERY_TOKEN = 0, /* read by every token: resident and pinned */
    GM_TC_EXPERT,          /* a routed expert stack: streamed */
    GM_TC_LOOKUP,          /* a table read by row: may stay on disk */
    GM_TC_MTP,             /* the MTP drafter's layers */
} gm_tensor_class;

typedef enum gm_tensor_group {
    GM_TG_ATTENTION = 0,
    GM_TG_SHARED_EXPERTS,
    GM_TG_DENSE_FFN_ROUTERS,
    GM_TG_EMBEDDINGS,
    GM_TG_OUTPUT,
    GM_TG_OTHER,
    GM_TG_ROUTED_EXPERTS,
    GM_TG_LOOKUP_TABLES,
    GM_TG_MTP,
    GM_TG_COUNT,
} gm_tensor_group;

/* The kinds of expert stack a layer may hold. */
typedef enum gm_expert_kind {
    GM_EXP_GATE = 0,
    GM_EXP_UP,
    GM_EXP_DOWN,
    GM_EXP_GATE_UP, /* fused gate+up stack */
    GM_EXP_KIND_COUNT,
} gm_expert_kind;

typedef struct gm_tensor_desc {
    gm_tensor_class cls;
    gm_tensor_group group;
    int32_t layer;        /* blk.N index, -1 for tensors outside the blocks */
    int32_t expert_kind;  /* gm_expert_kind for GM_TC_EXPERT, else -1 */
} gm_tensor_desc;

typedef struct gm_layer_desc {
    bool is_moe;                    /* has routed expert stacks */
    bool is_mtp;                    /* an MTP drafter layer */
    bool is_recurrent;              /* linear attention / SSM: a fixed-size state, no KV */
    bool is_sliding;                /* sliding-window attention */
    bool indexer_full;              /* DeepSeek sparse attention: the layer runs its own lightning
                                     * indexer and keeps its keys (the others of a model with
                                     * hp.idx_topk reuse the last such layer's choice) */
    uint32_t n_head_kv;
    uint32_t compress_ratio;        /* attention.compress_ratios: positions a block of qwen4exp's
                                     * block-sparse attention pools, or a DeepSeek-V4 layer's
                                     * compressed keys (4 CSA, 128 HCA); 0 = dense */
    float swiglu_limit;             /* swiglu_clamp_exp: the routed experts' SwiGLU clamp (Hy4:
                                     * gate min(g, L), up clamp(u, -L, L)); 0 = none */
    float swiglu_limit_shexp;       /* swiglu_clamp_shexp: the shared expert's (DeepSeek-V4: the
                                     * routed experts' when the file does not say); 0 = none */
    uint32_t n_expert;              /* experts in this layer's stacks */
    int64_t stack[GM_EXP_KIND_COUNT]; /* tensor index of each stack, -1 when absent */
    uint64_t stack_bytes[GM_EXP_KIND_COUNT];
    uint64_t expert_bytes;          /* all stacks of this layer */
    uint64_t per_expert_bytes;      /* one expert: the sum of its slices of every stack */
} gm_layer_desc;

typedef struct gm_arch_info gm_arch_info;

#define GM_MAX_PLE_NGRAM 8
#define GM_MAX_PLE_HEADS 64

typedef struct gm_hparams {
    uint32_t n_layer;            /* block_count (MTP layers included) */
    uint32_t n_embd;
    uint32_t n_head;
    uint32_t n_head_kv;          /* the largest per-layer value */
    uint32_t head_dim_k;         /* attention.key_length or n_embd / n_head */
    uint32_t head_dim_v;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_expert;
    uint32_t n_expert_used;
    uint32_t n_expert_shared;
    uint32_t n_ff;
    uint32_t n_ff_exp;
    uint32_t n_ff_shexp;         /* shared expert FFN width, when the file names it */
    uint32_t n_leading_dense;
    uint32_t n_nextn;            /* MTP drafter layers at the end of the blocks */
    uint32_t sliding_window;     /* 0 = none */
    uint32_t kv_lora_rank;       /* MLA latent width; 0 = not MLA */
    uint32_t q_lora_rank;
    uint32_t n_rot;              /* rope.dimension_count */
    uint32_t full_attn_interval; /* hybrid recurrent models: every Nth layer is full attention */
    float rms_eps;               /* attention.layer_norm_rms_epsilon (default 1e-6) */
    float rope_base;             /* rope.freq_base (default 10000) */
    /* rope.scaling.*: type ("none" when absent, or rope.scale_linear alone: "linear"), factor
     * (1 = none), the training context it extends (original_context_length, else
     * context_length), YaRN's attention factor and ramp (llama.cpp's defaults: 1, 32, 1; the
     * extrapolation mix ext_factor is 1 for YaRN). */
    char rope_scaling[16];
    float rope_scale_factor;
    uint32_t rope_ctx_orig;
    float yarn_attn_factor, yarn_beta_fast, yarn_beta_slow, yarn_ext_factor;
    float yarn_log_mul; /* rope.scaling.yarn_log_multiplier (MLA's attention scale), 0 when absent */
    bool yarn_no_truncate; /* YaRN's ramp ends not rounded to whole dims (set by the engine) */
    uint32_t ssm_conv_kernel, ssm_state_size, ssm_group_count, ssm_time_step_rank, ssm_inner_size;
    /* routing: expert_gating_func (0 = not stated, 1 = softmax, 2 = sigmoid), whether the
     * chosen experts' weights are renormalised (expert_weights_norm; has_expert_weights_norm
     * says whether the file states it) and their scale (expert_weights_scale, 1 when absent) */
    uint32_t expert_gating_func;
    uint32_t expert_group_count, expert_group_used_count; /* group-limited routing; 0 = absent */
    bool expert_weights_norm, has_expert_weights_norm;
    float expert_weights_scale;
    /* DeepSeek sparse attention (attention.indexer.*): the lightning indexer's heads, head dim,
     * and the past positions each query attends; 0 = dense attention */
    uint32_t idx_heads, idx_dim, idx_topk;
    /* MiniMax sparse attention: positions per block and the latest blocks every query attends
     * (idx_topk then counts blocks); 0 = DeepSeek's, position by position */
    uint32_t idx_block, idx_local;
    /* hyper-connections (hyper_connection.*): parallel residual streams (0 = the plain
     * residual), the epsilon added to their mixing weights and the post weights' magnitude */
    uint32_t hc_count;
    float hc_eps, hc_magnitude;
    uint32_t hc_low_rank;        /* hyper_connection.low_rank: qwen4exp's low-rank gated mixing
                                  * (0 = Hy4's full mixing) */
    /* qwen4exp's n-gram hash embedding (ple.*): the layer that adds it (-1: none), the n-gram
     * size, heads per n-gram (ple_n_heads = (ngram - 1) x per_ngram in all), the causal
     * convolution's kernel (dilated by ngram), the token that cuts an n-gram, the width of a
     * table row (embedding_length_per_layer_input), the hash's multipliers and each head's
     * range of rows of per_layer_token_embd */
    int32_t ple_layer;
    uint32_t ple_ngram, ple_per_ngram, ple_n_heads, ple_conv, ple_eos, ple_head_dim;
    uint64_t ple_mult[GM_MAX_PLE_NGRAM];
    uint32_t ple_offset[GM_MAX_PLE_HEADS], ple_vocab[GM_MAX_PLE_HEADS];
    char ple_bad[160];           /* why the ple.* keys cannot be used, "" when they can */
    /* Kimi-K3: KDA linear attention (kda.head_dim; kda.gate_lower_bound, has_kda_lower_bound
     * when the file states it), the routed experts' latent width (expert_latent_length, 0 =
     * n_embd), cross-layer residual attention's block (attn_res.block_size, 0 = none) and the
     * situ activation's betas (activation.situ_beta, situ_linear_beta; 0 = SwiGLU) */
    uint32_t kda_head_dim;
    float kda_lower_bound;
    bool has_kda_lower_bound;
    uint32_t n_expert_latent, attn_res_block;
    float situ_beta, situ_linear_beta;
    /* DeepSeek-V4: the Sinkhorn iterations that mix its hyper-connections' streams
     * (hyper_connection.sinkhorn_iterations; 0 = Hy4's independent streams), the leading layers
     * routed by token id (hash_layer_count), the grouped low-rank attention output
     * (attention.output_group_count, attention.output_lora_rank) and the RoPE base of its
     * compressed layers (attention.compress_rope_freq_base) */
    uint32_t hc_sinkhorn_iters, n_hash_layers, attn_out_groups, attn_out_lora;
    float compress_rope_base;
} gm_hparams;

typedef struct gm_model_desc {
    char arch_name[64];           /* general.architecture, or "" when absent */
    const gm_arch_info *arch;     /* NULL for an architecture outside the table */
    bool runnable;                /* the engine supports this family and every tensor type */
    char not_runnable[512];       /* why not, when !runnable */
    char name[128];               /* general.name, if any */
    gm_hparams hp;

    uint64_t n_tensors;
    gm_tensor_desc *tensors;      /* one per tensor of the gm_gguf, same order */
    uint32_t n_layers;            /* entries of layers (= hp.n_layer, or blocks seen) */
    gm_layer_desc *layers;

    uint64_t group_bytes[GM_TG_COUNT];
    uint64_t every_token_bytes;   /* sum of the every-token groups */
    uint64_t expert_bytes;        /* routed expert stacks (MTP layers excluded) */
    uint64_t lookup_bytes;
    uint64_t mtp_bytes;
    uint64_t tensor_bytes;        /* all tensors */
    uint64_t file_bytes;          /* all parts, headers included */
    uint32_t n_moe_layers;        /* layers with routed experts (MTP excluded) */
    uint32_t max_expert_count;    /* the largest n_expert over MoE layers */
    uint64_t max_layer_expert_bytes; /* the largest layer's expert stacks */
    uint64_t cold_token_bytes;    /* sum over MoE layers of n_expert_used x per_expert_bytes */
    uint64_t types_present;       /* bit t set when some tensor has gm_type t */
} gm_model_desc;

/* Describes the model in g. Fails only on inconsistent files (an expert stack whose shape
 * disagrees with its layer) or out of memory; an unknown architecture is not an error. */
int gm_model_describe(const gm_gguf *g, gm_model_desc *out, gm_err *err);
void gm_model_desc_free(gm_model_desc *m);

/* KV-cache bytes for n_ctx tokens: kv_bits 32 stores 4-byte elements, 16 2-byte ones, 8 blocks of 32
 * int8 with an f16 scale (34 bytes per 32); plus the fixed f32 state of linear-attention
 * (recurrent) layers. MTP layers hold no cache. */
uint64_t gm_model_kv_bytes(const gm_model_desc *m, uint64_t n_ctx, uint32_t kv_bits);

/* The decode arena's slot geometry, shared by the plan (which sizes the arena) and the feeder
 * (which lays it out). A slot holds one expert of a layer: its slice of every stack, each slice
 * in a region of its length plus one alignment unit, rounded up to the alignment (a slice read
 * with O_DIRECT starts anywhere in an aligned block). GM_SLOT_ALIGN_BYTES is the alignment the
 * plan assumes; the feeder raises it where a device needs more. */
#define GM_SLOT_ALIGN_BYTES 4096u
uint64_t gm_slot_region_bytes(uint64_t slice_bytes, uint64_t align_bytes);
/* One slot of layer L (0 for a layer without expert stacks). */
uint64_t gm_layer_slot_bytes(const gm_layer_desc *L, uint64_t align_bytes);
/* The VRAM tier's slot (infer/gpu.c, planned by plan.c): one expert of layer L, each of its
 * slices rounded up to GM_VRAM_SLOT_ALIGN bytes. */
#define GM_VRAM_SLOT_ALIGN 256u
uint64_t gm_layer_vram_slot_bytes(const gm_layer_desc *L);
/* The slots the VRAM tier keeps apart as staging for a prompt's chunk when not every expert fits
 * and the experts are in host memory (infer/gpu.c; GMLX_GPU_STAGE changes it). */
#define GM_VRAM_STAGE_SLOTS 32u

const char *gm_tensor_group_name(gm_tensor_group g);
const char *gm_tensor_class_name(gm_tensor_class c);

/* The family table. */
struct gm_arch_info {
    const char *name;       /* general.architecture */
    const char *family;     /* human name */
    bool mla;               /* DeepSeek multi-head latent attention: KV is the latent */
    bool alternate_sliding; /* sliding window on even layers (gpt-oss) */
    bool hybrid_recurrent;  /* linear-attention layers except every full_attention_interval-th
                             * (or, without that key, those whose head_count_kv is 0: Kimi) */
    bool runnable;          /* the engine's forward pass implements it */
};

const gm_arch_info *gm_arch_find(const char *name);
/* Entries of the table, for listings. */
const gm_arch_info *gm_arch_at(int i);
int gm_arch_count(void);
/* The families the engine runs, for messages: "qwen3moe, qwen2moe, ... and minimax-m2". */
void gm_arch_runnable_list(char *buf, size_t len);

#endif
