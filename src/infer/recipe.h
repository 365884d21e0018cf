/* infer/recipe: a model family's forward pass, and the blocks and binders it composes.
 *
 * Owns: gm_recipe, one per family, defined in src/infer/models/<arch>.c and listed by the
 * registry (model/families.h; infer/registry.c binds the two). A recipe reads like llama.cpp's
 * src/models/<arch>.cpp: which tensors each layer binds, which blocks a layer runs, and the
 * residual stream between them. The blocks (attn.c, mla.c, delta.c, moe.c) take the normalised
 * stream s->xn of the chunk's n tokens and write their output, n rows of n_embd, to `out`; they
 * never touch the residual stream s->x, which the recipe owns.
 * Threads: recipes run on the session's thread (the blocks fan out on the engine's pool).
 */
#ifndef GM_INFER_RECIPE_H
#define GM_INFER_RECIPE_H

#include "infer/internal.h"

/* A block: reads s->xn (n rows), writes n rows of n_embd to out. */
typedef int (*gm_block_fn)(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);

typedef struct gm_recipe {
    const char *arch; /* general.architecture */
    /* What the shared blocks need to know of the family (RoPE style, routing, norms, gates);
     * ops arrives zeroed with name set and expert_scale 1. */
    void (*ops)(const gm_hparams *hp, gm_arch_ops *ops);
    /* Binds layer l's tensors into w. Every tensor the file holds must be bound by some step of
     * the recipe (the load refuses a file with one left over, naming it). */
    int (*bind_layer)(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
    /* Runs layer l for the chunk's n tokens on the residual stream s->x. */
    int (*layer)(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err);
    /* Optional (NULL: none). bind_model binds the tensors outside the blocks that the family
     * adds to the embedding, output norm and output (Hy4's output_hc_*); head writes the m rows
     * that the output norm reads for the chunk's tokens first.. (NULL: the residual rows). */
    int (*bind_model)(gm_engine *e, gm_err *err);
    int (*head)(gm_fwd *s, uint32_t first, uint32_t m, float *out, gm_err *err);
} gm_recipe;

/* The recipe of arch, or NULL for a family outside the registry. */
const gm_recipe *gm_recipe_find(const char *arch);

/* ---- blocks (input s->xn, output out) ---- */
int gm_attn_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);  /* attn.c: GQA */
int gm_mla_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);   /* mla.c */
int gm_delta_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err); /* delta.c */
int gm_kda_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);   /* delta.c: KDA */
/* mla.c with dsa.c: latent attention over the positions a lightning indexer chooses */
int gm_dsa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);
/* csa.c: DeepSeek-V4's attention (one key/value row a position, sinks, a window, the heads'
 * results rotated back and taken out through the grouped low-rank output) */
int gm_csa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);
/* csa.c: a session's compressed rows and compressor state (NULL out when the model has no
 * compressed layer), their bytes and their save/restore with the session's state (gm_fwd's
 * rings), the oldest position a rewind to pos needs kept */
int gm_csa_create(gm_fwd *s, gm_err *err);
void gm_csa_free(struct gm_csa *c);
uint64_t gm_csa_state_bytes(const gm_fwd *s);
void gm_csa_state_copy(gm_fwd *s, uint8_t *buf, bool save);
bool gm_csa_can_rewind(const gm_fwd *s, uint32_t pos);
/* mla.c: for each of n_groups blocks of rows_per_head rows of w, block h times column block h of
 * x: the n tokens' inputs (d_in values at x + t * x_stride + h * x_head) are gathered (through
 * s->mla_in), prepared and multiplied into y + t * y_stride + h * y_head. MLA's per-head
 * products, DeepSeek-V4's grouped output. */
int gm_grouped_project(gm_fwd *s, const gm_mat *w, uint32_t n_groups, uint64_t rows_per_head, const float *x,
                       uint64_t x_stride, uint64_t x_head, uint64_t d_in, uint32_t n, float *y, uint64_t y_stride,
                       uint64_t y_head, gm_err *err);
/* dsa.c, called by gm_dsa_block: the indexer of layer l for the chunk (its keys into the
 * session, each token's choice into s->idx_sel), from the normalised query latent qr; then the
 * attention of the chunk's queries in s->q into s->att */
int gm_dsa_index(gm_fwd *s, uint32_t l, uint32_t n, const float *qr, gm_err *err);
void gm_dsa_attend(gm_fwd *s, uint32_t l, uint32_t n);
/* attn.c with msa.c: GQA attention over the blocks an indexer head per kv head chooses */
int gm_msa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);
/* msa.c, called by gm_msa_block once the chunk's queries are in s->q and its K/V rows cached:
 * layer l's indexer (its keys into the session, each (token, kv head)'s blocks into
 * s->idx_sel), then the attention into s->att */
int gm_msa_index(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err);
void gm_msa_attend(gm_fwd *s, uint32_t l, uint32_t n);
/* qsa.c (qwen4exp), called from attn.c like msa.c once the chunk's queries are in s->q and its
 * K/V rows cached: layer l's indexer (its raw keys and completed blocks' keys into the session,
 * each token's positions into s->idx_sel), then the attention into s->att */
int gm_qsa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);
int gm_qsa_index(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err);
void gm_qsa_attend(gm_fwd *s, uint32_t l, uint32_t n);
/* dsa.c, for both: moves the k best of the n pairs (sc[pos[i]], pos[i]) to pos[0..k) in no order
 * (higher score first, then the lower position; NaN last); qsort's comparison of int32s */
void gm_top_scores(const float *sc, int32_t *pos, uint32_t n, uint32_t k);
/* dsa.c, for DeepSeek's lightning indexers (dsa.c, csa.c): a key k's score for a query of H heads
 * of D (q) with weights w, sum_h relu(q_h . k) w_h */
float gm_indexer_score(const float *q, const float *w, const float *k, uint32_t H, uint32_t D);
int gm_cmp_i32(const void *a, const void *b);
/* moe.c: the routed experts and shared expert, or a dense SwiGLU FFN where the layer has no
 * router; out may be s->moe_out (no copy) or any buffer the block does not use itself */
int gm_ffn_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err);
/* Routed experts xs[0..n) of MoE layer l (not latent) for one token whose FFN input is x (moe_dim
 * floats), from the model's stacks in memory, into outs[i] (moe_dim floats each): what a decode
 * token computes on the CPU for them, bit for bit (s->moe_in takes x). For a decode token whose
 * other experts run on the device (infer/gpu_decode.c). */
int gm_moe_token_experts(gm_fwd *s, uint32_t l, const float *x, const int32_t *xs, uint32_t n, float *const *outs,
                         gm_err *err);

/* hc.c, hyper-connections over the e->n_hc residual streams of s->x: gm_hc_pre writes the n rows
 * of a block's input (the streams weighted by fn's mixing, before the block's norm) to out and
 * keeps the post weights in s->hc_mix; gm_hc_post adds each stream's share of the block's output
 * (n rows of n_embd); gm_hc_head is a recipe's head: the streams of tokens first..first + m
 * mixed by the output head's weights (e->hc_head_*). out must not be s->tmp (their staging). */
int gm_hc_pre(gm_fwd *s, const gm_mat *fn, const float *base, const float *scale, uint32_t n, float *out,
              gm_err *err);
void gm_hc_post(gm_fwd *s, const float *out, uint32_t n);
int gm_hc_head(gm_fwd *s, uint32_t first, uint32_t m, float *out, gm_err *err);
/* The Sinkhorn form (DeepSeek-V4): gm_hcs_pre as gm_hc_pre, keeping pre, post and the streams'
 * combination matrix in s->hc_mix; gm_hcs_post rebuilds every stream from all of them and the
 * block's output (staged in s->xn, which the block has consumed). The head is gm_hc_head. */
int gm_hcs_pre(gm_fwd *s, const gm_mat *fn, const float *base, const float *scale, uint32_t n, float *out,
               gm_err *err);
void gm_hcs_post(gm_fwd *s, const float *out, uint32_t n);
/* A layer on hyper-connections (Hy4's form, or Sinkhorn's where e->hc_sinkhorn): the attention
 * block attn between the mixing of the streams into its input (then attn_norm) and back, then the
 * FFN block the same way around ffn_norm; timed as gm_layer_prenorm times its blocks. */
int gm_layer_hc(gm_fwd *s, uint32_t l, uint32_t n, gm_block_fn attn, gm_err *err);
/* The low-rank form (qwen4exp): gm_hcl_pre writes the n rows of a block's input (the streams
 * RMSNorm'd one by one, gated and averaged) to out and keeps each stream's injection in
 * s->hc_mix; gm_hcl_post adds each stream's share, 2 sigmoid(inject / n_hc), of the block's
 * output; gm_hcl_head is the recipe's head (the output mixing, which is the output norm). */
int gm_hcl_pre(gm_fwd *s, const float *norm, const gm_mat *down, const gm_mat *up, const gm_mat *inject, uint32_t n,
               float *out, gm_err *err);
void gm_hcl_post(gm_fwd *s, const float *out, uint32_t n);
int gm_hcl_head(gm_fwd *s, uint32_t first, uint32_t m, float *out, gm_err *err);

/* attnres.c, cross-layer residual attention (Kimi-K3): gm_res_mix writes to out the m rows of
 * tokens t0.. mixed from the residual stream s->x and the layer inputs banked so far, scored by
 * w; gm_res_push banks the chunk's n rows of s->x. */
void gm_res_mix(gm_fwd *s, const float *w, uint32_t t0, uint32_t m, float *out);
void gm_res_push(gm_fwd *s, uint32_t n);

/* ---- layers ---- */
/* The pre-norm layer most families share:
 *   x += attn(rms_norm(x) * attn_norm);  x += ffn(rms_norm(x) * ffn_norm) */
int gm_layer_prenorm(gm_fwd *s, uint32_t l, uint32_t n, gm_block_fn attn, gm_err *err);
/* With GMLX_DECODE_LAYER_PROFILE (e->profile), gm_layer_prenorm times a decode token's blocks
 * per layer; gm_engine_print_profile (engine.h) prints them. A recipe with a layer of its own
 * shape times it the same way. */
uint64_t gm_now_ns(void);
/* gm_layer_prenorm with the GQA attention block. */
int gm_layer_attn_ffn(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err);

/* ---- binders (weights.c) ---- */
int gm_bind_norms(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err); /* attn_norm, ffn_norm */
int gm_bind_attn(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);  /* q/k/v/o, norms, biases, sinks */
int gm_bind_mla(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_delta(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_indexer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err); /* indexer.* (glm-dsa) */
int gm_bind_block_indexer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err); /* indexer.* (minimax-m3) */
int gm_bind_ffn(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);   /* routed + shared, or dense */
/* gm_bind_norms, gm_bind_attn and gm_bind_ffn: the tensors of gm_layer_attn_ffn. */
int gm_bind_attn_ffn(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
/* Hyper-connections (Hy4): a layer's mixing (hc_attn_*, hc_ffn_*), the output head's
 * (output_hc_*). The latent attention's sinks and output gate (attn_sinks, attn_gate: Hy4). */
int gm_bind_hc(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_hc_head(gm_engine *e, gm_err *err);
/* DeepSeek-V4: the Sinkhorn mixing (hc_attn_*, hc_ffn_*: (2 + n_hc) n_hc outputs, 3 scales); the
 * attention (attn_q_a, attn_q_a_norm, attn_q_b, attn_kv, attn_kv_a_norm, attn_output_a,
 * attn_output_b, attn_sinks); a hash-routed layer's ffn_gate_tid2eid */
int gm_bind_hc_sinkhorn(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_csa(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_hash_routing(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
/* Takes layer l's tensor blk.l.<suffix> if the file has it, for a tensor the family's recipe
 * knows and leaves unused (DeepSeek-V4's exp_probs_b_vl: the routing bias of image tokens, which
 * gmlx does not take). */
int gm_bind_unused(gm_engine *e, uint32_t l, const char *suffix, gm_err *err);
/* Low-rank hyper-connections (qwen4exp): a layer's hc_attn_* and hc_ffn_* {norm, down, up,
 * inject}, the output head's output_hc_{norm, down, up}; QSA's indexer (indexer.q_proj, k_proj,
 * q_norm, k_norm) */
int gm_bind_hc_low_rank(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_hc_low_rank_head(gm_engine *e, gm_err *err);
int gm_bind_qsa_indexer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
/* qwen4exp's n-gram embedding: the layer's ple_* (nothing on other layers) and the table
 * per_layer_token_embd; the block (ple.c), which adds its output to every residual stream */
int gm_bind_ple(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_ple_table(gm_engine *e, gm_err *err);
int gm_ple_block(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err);
/* ple.c, called by fwd.c once the chunk's tokens are in the session: when the table is read from
 * the file and the chunk's rows fit one gather, queues their reads so that they run while the
 * layers before the embedding's compute (gm_ple_block collects them). */
int gm_ple_start(gm_fwd *s, uint32_t n, gm_err *err);
int gm_bind_mla_gate_sinks(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_mla_gate(gm_engine *e, uint32_t l, gm_layer_w *w, bool required, gm_err *err);
/* Kimi-K3's: a KDA layer (delta.c); a latent MoE's routed_down/up/norm (after gm_bind_ffn);
 * cross-layer residual attention's scores, per layer and the output's */
int gm_bind_kda(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_latent(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_res(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err);
int gm_bind_res_out(gm_engine *e, gm_err *err);

/* Routing as the file states it (expert_gating_func, expert_weights_norm, expert_weights_scale),
 * the family's defaults where it does not. */
void gm_routing_from_file(const gm_hparams *hp, gm_gating dflt, bool norm_dflt, gm_arch_ops *ops);

#endif
