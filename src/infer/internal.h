/* infer/internal: the engine's private structures, shared by its files (not a public header).
 * Owns nothing beyond the definitions; see engine.h for ownership and threads. */
#ifndef GM_INFER_INTERNAL_H
#define GM_INFER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "infer/engine.h"
#include "kernels/kernels.h"

#include "stream/pin.h"
#include "stream/stream.h"

#define GM_MAX_HEAD_DIM 1024
#define GM_MAX_EXPERTS_USED 64
#define GM_MAX_GROUP 256 /* query heads per kv head */
#define GM_MAX_GROUPS 64 /* expert groups of group-limited routing */
#define GM_MAX_HC 16     /* residual streams of hyper-connections */
#define GM_MAX_RES 256   /* banked layer inputs of cross-layer residual attention */
#define GM_PLE_GATHER 64u /* rows of the n-gram embedding's table one gather reads from the file */
/* A sliding-window layer attends its chunk in steps of at most this many tokens, so its cache
 * needs only window - 1 + this many positions (a ring; see gm_fwd_create). */
#define GM_WINDOW_STEP 256u

typedef enum gm_rope_style {
    GM_ROPE_NEOX = 0, /* pairs (i, i + n_rot/2) */
    GM_ROPE_NORM = 1, /* adjacent pairs (2i, 2i + 1) */
} gm_rope_style;

typedef enum gm_gating {
    GM_GATING_SOFTMAX = 0, /* softmax over all experts, then top-k */
    GM_GATING_SIGMOID = 1, /* sigmoid scores, top-k by score + selection bias */
    GM_GATING_SQRT_SOFTPLUS = 2, /* DeepSeek-V4: sqrt(softplus(logit)) scores, top-k by score +
                                  * selection bias */
} gm_gating;

/* What the shared blocks need to know of a family; filled by its recipe (infer/recipe.h). */
typedef struct gm_arch_ops {
    const char *name;
    gm_rope_style rope;
    gm_gating gating;
    bool norm_topk;          /* renormalise the top-k weights to sum 1 */
    float expert_scale;      /* routed weights are multiplied by this */
    bool shared_expert_gate; /* shared expert output x sigmoid(ffn_gate_inp_shexp . x) */
    bool qk_norm_joint;      /* q/k RMSNorm over all heads of a token, not per head */
    bool qk_norm_after_rope; /* Hunyuan: q/k RMSNorm on the rotated q/k, not before RoPE */
    bool swiglu_clamped;     /* gpt-oss: (clamp(up, +-7) + 1) * g sigmoid(1.702 g), g = min(gate, 7) */
    bool yarn_no_truncate;   /* YaRN's ramp ends used as computed, not rounded to whole dims */
    bool attn_out_gate;      /* Qwen3-Next: attn_q gives per head [query | gate] and the heads'
                              * outputs are multiplied by sigmoid(gate) */
    bool dn_tiled;           /* Qwen3.5: value head h reads key head h % n_k (the converter put
                              * the value heads in tiled order), not h / (n_v / n_k) */
    /* DeepSeek sparse attention's variants (dsa.c): Hy4's indexer rotates the last n_rot dims
     * of a head ([nope | rope]; GLM-5.2's the first), skips the Hadamard rotation, and its key
     * LayerNorm takes the model's rms epsilon (GLM-5.2's 1e-6) */
    bool idx_rope_tail, idx_no_hadamard, idx_norm_model_eps;
    bool mla_no_rope;        /* Kimi-K3: the latent attention's rotated part is not rotated */
    bool mla_plain_yarn;     /* Hy4: under YaRN the latent attention scales q.k by 1/sqrt(d) and its
                              * rotation by YaRN's usual magnitude, as other attentions; no
                              * yarn_log_multiplier mscale^2 (DeepSeek's) */
    bool kda;                /* Kimi-K3: the recurrent layers are KDA (kda.c), not Gated DeltaNet */
    bool head_norms;         /* qwen4exp: no output_norm; the recipe's head normalises the rows */
    bool dn_sigmoid_gate;    /* qwen4exp: the Gated DeltaNet's output gate is sigmoid(z), not silu(z) */
    bool qsa;                /* qwen4exp: the full-attention layers' indexer (indexer.q_proj/k_proj)
                              * is QSA's, which pools blocks of attention.compress_ratios positions */
    bool rope_plain;         /* DeepSeek-V4: the raw layers rotate by rope.freq_base unscaled (the
                              * file's YaRN is its compressed layers') */
    bool csa;                /* DeepSeek-V4: attention.indexer.* and compress_ratios are its
                              * compressed attention's (csa.c), not DeepSeek sparse attention */
} gm_arch_ops;

/* One stack of routed experts: expert e's matrix has n_rows rows of n_cols at
 * data + e * expert_bytes. */
typedef struct gm_expert_stack {
    uint32_t type;
    uint64_t n_cols, n_rows;
    uint64_t row_bytes, expert_bytes;
    const uint8_t *data;
    uint32_t n_expert;
} gm_expert_stack;

typedef struct gm_layer_w {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* float32 copies; NULL when absent */
    const float *bq, *bk, *bv, *bo;
    gm_mat wq, wk, wv, wo;
    bool is_moe;
    gm_mat router;                /* n_expert rows of n_embd */
    const float *router_bias;     /* selection bias (sigmoid gating) */
    const float *router_b;        /* bias added to the router logits (gpt-oss), or NULL */
    const float *gate_b, *up_b, *down_b; /* per-expert biases [n_expert][rows], or NULL */
    const float *sinks;           /* per query head: a logit in every softmax's sum, or NULL */
    uint32_t window;              /* sliding-window attention: positions seen, 0 = all */
    gm_expert_stack gate, up, down;
    bool has_shexp;
    gm_mat sh_gate, sh_up, sh_down, sh_gate_inp;
    bool has_sh_gate_inp;
    gm_mat ffn_gate, ffn_up, ffn_down; /* dense FFN layers */
    /* MLA (e->mla): q = wq_b(norm(wq_a x)) or wq x, [nope | rope] per head; wkv_a x =
     * [latent | rope]; k_b: n_head blocks of kv_lora rows of qk_nope; v_b: n_head blocks of
     * v_head rows of kv_lora */
    gm_mat wq_a, wq_b, wkv_a, k_b, v_b;
    const float *q_a_norm, *kv_a_norm;
    /* Gated DeltaNet (a recurrent layer of Qwen3-Next: delta.c): dn_qkv x = the convolved
     * channels [q of every key head | k | v of every value head] and dn_z x the output gates, or
     * (dn_fused, ssm_in) one product whose rows are grouped per key head [q k v z]; dn_ba x =
     * per key head [beta of its value heads | alpha of them], or (dn_ba_split, Qwen3.5) dn_ba x
     * = beta and dn_alpha x = alpha, one per value head; the causal convolution's kernel
     * [channel][kconv], -exp(A_log) and dt bias per value head, the gated norm's weight */
    /* DeepSeek sparse attention (dsa.c): the lightning indexer's weights, and the layer's slot
     * among the session's indexer keys (-1: the layer reuses the last full layer's choice) */
    int32_t idx_slot;
    gm_mat idx_q_b, idx_k, idx_proj;
    const float *idx_k_norm, *idx_k_norm_b;
    gm_mat idx_q;                 /* MiniMax sparse attention (msa.c): the indexer's queries */
    const float *idx_q_norm;
    /* Hy4's gated latent attention: the heads' values times sigmoid(attn_gate x) before wo */
    gm_mat attn_gate;
    bool has_attn_gate;
    float exp_limit;              /* the routed experts' SwiGLU clamp (0: none), see moe.c */
    float sh_limit;               /* the shared expert's (DeepSeek-V4; 0: none) */
    /* DeepSeek-V4 (csa.c): the attention's key/value row wkv_a (head_dim rows), the grouped
     * low-rank output wo_a (o_groups blocks of o_lora rows, block g reading group g of the
     * heads) and wo_b; a hash-routed layer's experts per token id (tid2eid, [n_vocab][k], the
     * file's int32s), NULL where the router chooses */
    gm_mat wo_a, wo_b;
    const int32_t *tid2eid;
    /* its compressed keys (comp_ratio 4: CSA, overlapping windows and an indexer; 128: HCA; 0:
     * none), the layer's slot among the session's compressed layers, the compressor's key/value
     * and gate products, learnt position rows [ratio][width] and norm; CSA's indexer compressor
     * (its queries and weights are idx_q_b and idx_proj) */
    uint32_t comp_ratio;
    int32_t comp_slot;
    gm_mat comp_wkv, comp_wgate, idx_comp_wkv, idx_comp_wgate;
    const float *comp_ape, *comp_norm, *idx_comp_ape, *idx_comp_norm;
    /* Kimi-K3's latent MoE: the routed experts run on routed_down x (e->moe_dim wide); their sum
     * is RMSNorm'd (routed_norm, if any) and taken back by routed_up */
    gm_mat routed_down, routed_up;
    const float *routed_norm;
    /* KDA (kda.c): q, k, v projections (into dn_in's channels), each with its causal
     * convolution (dn_conv: [q | k | v] kernels); the decay's low-rank projections f_a, f_b
     * and dt bias, -exp(A_log) per head (dn_a), beta per head (dn_ba), the output gate (dn_z),
     * the per-head RMSNorm (dn_norm), the output (dn_out) */
    gm_mat kda_q, kda_k, kda_v, kda_fa, kda_fb;
    /* cross-layer residual attention (attnres.c): the scores of the attention's and the FFN's
     * input mixes */
    const float *res_attn_score, *res_ffn_score;
    /* hyper-connections (hc.c): the attention's and the FFN's mixing of the residual streams,
     * [2 n_hc] rows of n_hc n_embd, their bias [2 n_hc] and scales [2] (pre, post) */
    gm_mat hc_attn_fn, hc_ffn_fn;
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale;
    /* low-rank hyper-connections (qwen4exp, hc.c): per mixing its per-stream norm weights
     * [n_hc][n_embd], down [lr rows of n_hc n_embd], up [n_hc n_embd rows of lr] and inject
     * [n_hc rows of n_hc n_embd] */
    const float *hc_attn_norm, *hc_ffn_norm;
    gm_mat hc_attn_down, hc_attn_up, hc_attn_inject, hc_ffn_down, hc_ffn_up, hc_ffn_inject;
    bool recurrent;
    uint32_t dn_slot;             /* index among the recurrent layers (the session's state) */
    bool dn_fused, dn_ba_split;
    gm_mat dn_qkv, dn_z, dn_ba, dn_alpha, dn_out;
    const float *dn_conv, *dn_a, *dn_dt, *dn_norm;
    /* qwen4exp's n-gram embedding (ple.c) on its layer: key [n_hc n_embd rows of n_embd], value
     * [n_embd rows of n_embd], the per-stream norms [n_hc][n_embd] and the convolution's kernel
     * [n_hc n_embd][ple_conv] */
    gm_mat ple_key, ple_value;
    const float *ple_norm_key, *ple_norm_query, *ple_norm_conv, *ple_kernel;
} gm_layer_w;

/* Expert x of layer w's stacks in the model's memory (the file mapping, or the pinned stacks). */
static inline gm_stream_expert gm_layer_expert(const gm_layer_w *w, int32_t x)
{
    return (gm_stream_expert){{w->gate.data + (uint64_t)x * w->gate.expert_bytes,
                               w->up.data + (uint64_t)x * w->up.expert_bytes,
                               w->down.data + (uint64_t)x * w->down.expert_bytes, NULL}};
}

struct gm_recipe;

struct gm_engine {
    gm_gguf *g;
    gm_model_desc desc;
    const struct gm_recipe *recipe; /* the family's forward pass (infer/recipe.h) */
    gm_arch_ops ops;
    const gm_kernels *k;
    gm_pool *pool;
    int n_threads;
    uint32_t max_chunk;
    uint64_t plan_chunk_bytes; /* the streamed plan's room for a prefill chunk's activations */
    /* hyper-parameters used by the forward pass */
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_vocab, n_expert, n_expert_used;
    uint32_t n_ff_exp, n_ff, n_ff_shexp, n_rot;
    uint32_t n_group, n_group_used; /* group-limited routing (1, 1: none) */
    /* multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): the cache holds one row per
     * position, [the normalised latent (kv_lora) | its rotated key part (n_rot)], which is both
     * the key and the value of every head (head_dim = kv_lora + n_rot, n_head_kv = 1); a query is
     * absorbed into the latent by attn_k_b and a head's output leaves it by attn_v_b (mla.c) */
    bool mla;
    uint32_t kv_lora, q_lora, qk_nope, v_head;
    /* Gated DeltaNet layers: key heads, value heads, their dims, the convolution's width */
    uint32_t dn_nk, dn_nv, dn_dk, dn_dv, dn_kconv, n_recurrent;
    /* DeepSeek sparse attention: indexer heads, head dim, positions a query attends, layers
     * with their own indexer (0 when the model has none) */
    uint32_t idx_heads, idx_dim, idx_topk, n_idx_layers;
    uint32_t idx_block, idx_local; /* MiniMax sparse attention: positions a block, latest blocks kept */
    uint32_t qsa_topk;              /* QSA (qsa.c): positions of whole blocks a query attends besides the
                                     * tail (idx_topk is then the most it attends in all) */
    /* hyper-connections (hc.c): n_hc parallel residual streams (1: the plain residual), the
     * epsilon of their weights, the post weights' magnitude; the output head's mixing (n_hc rows
     * of n_hc n_embd, n_hc biases, one scale) */
    uint32_t n_hc;
    float hc_eps, hc_magnitude;
    uint32_t hc_lr; /* low-rank hyper-connections' rank (qwen4exp; 0: Hy4's form) */
    uint32_t hc_sinkhorn; /* DeepSeek-V4: Sinkhorn iterations of the streams' mixing (0: Hy4's form);
                           * a chunk's mixing weights are then [pre n_hc | post n_hc | comb n_hc^2] */
    uint32_t o_groups, o_lora; /* DeepSeek-V4's grouped low-rank attention output (0: none) */
    /* DeepSeek-V4's compressed layers (csa.c): how many, the compressed rows CSA's indexer keeps
     * for a query (idx_heads and idx_dim give its heads), the RoPE rates of those layers
     * (attention.compress_rope_freq_base with the file's scaling; magnitude 1) */
    uint32_t n_comp, csa_topk;
    double *comp_rope_inv;
    /* Kimi-K3: the routed experts' width (n_embd unless latent), the situ activation's betas
     * (situ_beta 0: SwiGLU), KDA's decay lower bound (kda_lb: set), cross-layer residual
     * attention's block (0: none), its checkpoints at most, the output's mix score */
    uint32_t moe_dim;
    float situ_beta, situ_linear_beta, kda_lower_bound;
    bool kda_lb;
    uint32_t res_block, res_max;
    const float *res_out_score;
    gm_mat hc_head_fn;
    const float *hc_head_base, *hc_head_scale;
    const float *hc_head_norm;      /* low-rank: the output head's mixing (output_hc_*) */
    /* qwen4exp's n-gram embedding (ple.c): its layer (-1: none), its table (per_layer_token_embd,
     * a lookup table: rows of ple_head_dim read by row) and a row's bytes; the sizes are
     * desc.hp's ple_* */
    int32_t ple_layer;
    const gm_gguf_tensor *ple_table;
    uint64_t ple_row_bytes;
    uint32_t ple_hist;              /* positions of the convolution's history: (ple_conv - 1) ngram */
    struct gm_table *ple_rows;      /* the table read from the file by row (stream/table.h) when the
                                     * experts stream or tables_from_file, else NULL (rows from the
                                     * mapping) */
    bool tables_from_file;          /* the in-memory load left the lookup tables on disk (the plan's
                                     * tables_from_file_now) */
    /* its gathers' time: a decode token's (count, sum, worst) and the prefill chunks' (ns) */
    uint64_t ple_decode_calls, ple_decode_ns, ple_decode_max_ns, ple_prefill_ns;
    gm_mat hc_head_down, hc_head_up;
    float attn_scale; /* the softmax scale of q.k: 1/sqrt(head dim), YaRN's mscale^2 for MLA */
    float rms_eps, rope_base;
    double *rope_inv;               /* [n_rot / 2] angle rate per rotated pair (infer/rope.h) */
    float rope_mscale;              /* magnitude of the rotation's cos and sin (YaRN) */
    /* weights */
    const gm_gguf_tensor *tok_embd;
    const float *out_norm;
    gm_mat output;
    gm_layer_w *layers;
    gm_pin *pin;         /* every-token weights pinned (streamed placement), else NULL */
    gm_stream *stream;   /* the decode arena and its feeder (streamed placement), else NULL */
    struct gm_gpu *gpu;  /* the VRAM tier of experts (--gpu; infer/gpu.h), else NULL */
    struct gm_gpu_attn *gpu_attn; /* attention on the device (--gpu; infer/gpu_attn.h), else NULL */
    struct gm_gpu_dec *gpu_dec;   /* decode whole on the device (--gpu; infer/gpu_decode.h), else NULL */
    bool lookahead_on;   /* the feeder reads predicted experts ahead */
    bool fast_disk;      /* the fast-disk read-ahead recipe is in force */
    bool streamed;       /* the experts stream (an arena, or --stream-cpu's page cache) */
    uint32_t split_max;  /* arena token split: a prefill chunk of 2..split_max tokens after a decode
                            goes through the decode arena, not the ring (0: off) */
    gm_shed *shed;       /* the lossy levers in force (a streamed model only), else NULL */
    uint32_t k_route;    /* experts a token routes to: --moe-experts, else n_expert_used */
    uint32_t k_max;      /* the most of n_expert_used and k_route: the routing buffers' width */
    float **la_ratio;    /* per streamed MoE layer: next layer's norm gain / this one's (NULL: raw) */
    float **f32_copies; /* owned float32 copies of 1-D weights */
    uint8_t *bound;     /* [n_tensors] set for each tensor a binder took (weights.c) */
    /* GMLX_DECODE_LAYER_PROFILE (recipe.c): the level (0: off), decode tokens timed, their whole
     * time and each layer's attention (its norm included) and FFN time, in ns */
    int profile;
    uint64_t prof_tokens, prof_total_ns;
    uint64_t *prof_attn_ns, *prof_ffn_ns;
    uint32_t n_bound_recurrent; /* recurrent layers bound so far: the next one's state slot */
    uint32_t n_f32_copies, cap_f32_copies;
};

/* Scratch for a chunk of up to T tokens (all float32 unless said). */
struct gm_fwd {
    gm_engine *e;
    uint32_t n_ctx, pos;
    uint32_t max_chunk;             /* tokens one eval takes: the engine's, at most n_ctx */
    gm_kv_type kv_type;
    uint64_t kv_row_bytes;          /* one cached row: a position's K (or V) of one kv head */
    void *k_cache, *v_cache;       /* per layer [n_head_kv][kv_cap[l]] rows of kv_row_bytes at
                                     * kv_off[l]; position p in row p % kv_cap[l] */
    uint32_t *kv_cap;               /* [n_layer] positions a layer keeps: n_ctx, or for a sliding
                                     * window a ring of window - 1 + GM_WINDOW_STEP (16s) */
    uint64_t *kv_off;               /* [n_layer] byte offset of the layer's rows */
    float *x, *xn, *q, *kk, *vv, *att, *tmp; /* x: [T][n_hc][n_embd], the residual streams */
    float *hc_mix;                  /* hyper-connections: [T][2 n_hc] a chunk's mixing weights
                                     * ([T][(2 + n_hc) n_hc] with Sinkhorn mixing) */
    float *hc_gate;                 /* low-rank: [T][n_hc n_embd + lr] the gates, the low-rank rows */
    float *moe_in, *lat_out;        /* the routed experts' input rows and their sum: s->xn and
                                     * s->moe_out, or for a latent MoE lat_in and lat_buf */
    float *lat_in, *lat_buf;        /* [T][moe_dim] (owned; 1 byte when the MoE is not latent) */
    float *kda_g;                   /* KDA: [T][n_head * head_dim] the decay's log per channel */
    float *res_stack;               /* cross-layer residual attention: [T][res_max][n_embd] the
                                     * banked layer inputs, res_n of them this eval */
    uint32_t res_n;
    float *rope_cos, *rope_sin;     /* [T][n_rot/2] for the chunk's positions */
    uint8_t *act;                   /* prepared activation rows: [T][act_stride] */
    uint64_t act_stride;
    uint8_t *act2;                  /* a second set (the expert hidden rows) */
    uint64_t act2_stride;
    float *attn_scratch;            /* [n_threads][attn_part_floats], 64-byte aligned: each pool
                                     * part's attention queries, state and kernel scratch */
    uint64_t attn_part_floats;
    uint32_t attn_tb;               /* tokens per attention item (about 64 queries an item) */
    uint32_t attn_part_pos;         /* positions per attention part (a multiple of 16) */
    float *attn_split;              /* [n_ctx / attn_part_pos][n_head][head_dim + 2]: the state
                                     * (o, m, l) of a decode's position parts, merged after */
    float *router_logits;           /* [T][n_expert] */
    int32_t *topk_ids;              /* [T][k] */
    float *topk_w;                  /* [T][k] */
    uint32_t *topk_n;               /* [T]: the slots a token keeps (k, fewer after a lever) */
    int32_t *exp_count, *exp_start; /* [n_expert] */
    int32_t *pred_count;            /* [n_expert]: the next layer's routing of a chunk, predicted */
    int32_t *exp_tok;               /* [T * k]: token index of each (expert, slot) pair */
    float *exp_wt;                  /* [T * k]: its routing weight */
    uint8_t *act_gather;            /* [T][act_stride] rows of one expert's tokens */
    float *g_out, *u_out, *d_out;   /* [T][max ff], [T][max ff], [T][n_embd] */
    float *moe_out;                 /* [T][n_embd] */
    float *exp_rows;                /* [k][n_embd]: a streamed decode's expert outputs */
    float *gpu_rows;                /* [k][n_embd]: those of the experts the device computed */
    uint32_t layer;                 /* the layer the FFN block is running */
    float *logits_last;             /* [n_vocab] */
    float *la_x, *la_logits;        /* lookahead: [n_embd] router input, [n_expert] logits */
    float *mla_q;                   /* MLA: [T][n_head][qk_nope + n_rot] the full queries */
    float *mla_kv;                  /* MLA: [T][kv_lora + n_rot] wkv_a's rows */
    float *mla_in;                  /* MLA: [T][max(qk_nope, kv_lora, q_lora)] one head's input */
    float *mla_v;                   /* MLA: [T][n_head][v_head] the heads' values */
    uint8_t *la_act;                /* [act_stride] its prepared row */
    float *q_gate;                  /* attn_out_gate: [T][2 * n_head * head_dim] wq's rows, then
                                     * [T][n_head * head_dim] the gates */
    /* Gated DeltaNet: per recurrent layer its last kconv - 1 convolution inputs and its state
     * [n_v][d_k][d_v]; a chunk's [T][channels + gates] projections, convolved channels, outputs */
    float *dn_conv_state, *dn_state;
    /* DeepSeek sparse attention (dsa.c): the indexer keys [n_idx_layers][n_ctx][idx_dim]; a
     * chunk's queries [T][heads][dim], weights [T][heads], new keys [T][dim]; each token's
     * choice [T][idx_topk] (ascending positions) and its size (0: every position); per pool
     * part the scores and positions [n_ctx] and the gathered cache rows [idx_topk] */
    float *idx_keys, *idx_q, *idx_w, *idx_knew, *idx_score;
    int32_t *idx_sel, *idx_pos;
    uint32_t *idx_nsel;
    uint8_t *idx_rows;
    float *dn_in, *dn_mixed, *dn_o, *dn_row;
    /* qwen4exp's n-gram embedding (ple.c): the token at each position [n_ctx]; the convolution's
     * history then the chunk's rows [ple_hist + T][n_hc n_embd]; a chunk's gathered rows,
     * values, keys [T][n_embd], [T][n_embd], [T][n_hc n_embd] */
    int32_t *tok_hist;              /* (also kept for hash-routed layers: DeepSeek-V4) */
    float *ple_conv_rows, *ple_buf;
    uint8_t *ple_raw;               /* GM_PLE_GATHER rows as the table stores them (e->ple_rows) */
    bool ple_started;               /* gm_ple_start queued this chunk's rows */
    bool broken;                    /* a failed eval left a recurrent state half updated */
    bool decoded;                   /* a decode token ran since the last reset (arena token split) */
    bool split;                     /* this eval is a short prefill through the arena */
    uint32_t hw;                    /* positions written at least once since the state was last
                                     * whole: a ring row of a position at or past pos may have
                                     * overwritten one before it (gm_fwd_can_rewind) */
    const atomic_int *cancel;       /* set by another thread: stop at the next layer (NULL: none) */
    struct gm_gpu_kv *gkv;          /* the cache on the device (infer/gpu_attn.h), else NULL */
    struct gm_gpu_tok *gtok;        /* a decode token's scratch on the device (infer/gpu_decode.h), else NULL */
    struct gm_csa *csa;             /* DeepSeek-V4's compressed keys and their state (csa.c), else NULL */
};

/* Binding (weights.c). gm_engine_tensor_data: a tensor's bytes, pinned copy first. */
const void *gm_engine_tensor_data(const gm_engine *e, const gm_gguf_tensor *t);
int gm_engine_bind(gm_engine *e, gm_err *err);

/* Gated DeltaNet sizes: the convolved channels, the value width (= the gates'). */
uint64_t gm_delta_channels(const gm_engine *e);
uint64_t gm_delta_values(const gm_engine *e);

/* y (row stride ldy) = W x for n rows of x (d_in floats each), through s->act (attn.c). */
int gm_project(gm_fwd *s, const gm_mat *w, const float *x, uint64_t d_in, uint32_t n, float *y,
               uint64_t ldy, gm_err *err);

/* Shared by attn.c and mla.c: y = W x for n rows of x (d_in floats each) through s->act; the
 * rotation of n_rot dims at v for token t of the chunk; a row into the KV cache; the attention
 * of the chunk's tokens t0..t0 + n over layer l's cache into s->att (queries in s->q). */
int gm_attn_project(gm_fwd *s, const gm_mat *w, const float *x, uint64_t d_in, uint32_t n,
                    float *y, gm_err *err);
void gm_attn_rope_vec(const gm_fwd *s, uint32_t t, float *v);
/* The rotation's cos and sin (n_rot / 2 of each) at position pos (fwd.c, which fills the
 * session's tables with them), and the rotation of v's first n_rot dims by given ones (attn.c). */
void gm_rope_angles(const gm_engine *e, uint32_t pos, float *c, float *sn);
/* The same from a table of angle rates inv (n_rot / 2) and a magnitude (DeepSeek-V4's compressed
 * layers rotate by their own). */
void gm_rope_angles_of(const double *inv, float mscale, uint32_t n_rot, uint64_t pos, float *c, float *sn);
void gm_rope_rotate(const gm_engine *e, const float *c, const float *sn, float *v);
void gm_attn_cache_row(const gm_fwd *s, const float *src, uint8_t *dst);
void gm_attn_run(gm_fwd *s, uint32_t l, uint32_t t0, uint32_t n);
/* The sparse attentions' (dsa.c, msa.c) kernel call: n_q consecutive query heads (the rows of
 * s->q from q_row, at most a kv head's group) over cnt gathered cache rows (K rows at krows, V at
 * vrows, s->kv_row_bytes apart), into the same rows of s->att, with pool part part's scratch; the
 * layer's sinks (or NULL) join each head's softmax. */
void gm_attn_gathered(gm_fwd *s, int part, uint64_t q_row, uint32_t n_q, const uint8_t *krows, const uint8_t *vrows,
                      uint32_t cnt, const float *sinks);
/* Byte offset in the caches of layer l, kv head h, position p. */
uint64_t gm_kv_at(const gm_fwd *s, uint32_t l, uint32_t h, uint32_t p);

/* y[t] += b for n rows of d (nothing when b is NULL). */
void gm_add_bias(float *y, const float *b, uint32_t n, uint64_t d);

/* y[t] = rms_norm(x[t]) * w for n rows of dim d. */
void gm_rms_norm(const float *x, const float *w, float *y, uint32_t n, uint32_t d, float eps);

/* Prepares n rows of x (stride d floats) for weight type wtype into s->act (or dst). */
int gm_prepare(gm_fwd *s, uint32_t wtype, const float *x, uint64_t d, uint32_t n, uint8_t *dst,
               uint64_t dst_stride, gm_err *err);

/* Scratch bytes one prompt token takes in a session (fwd.c); the load (engine.c) sizes a streamed
 * model's default chunk by it. */
uint64_t gm_fwd_scratch_token_bytes(const gm_engine *e);

#endif
