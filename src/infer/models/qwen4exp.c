/* qwen4exp: Qwen3.5's hybrid layers (Gated DeltaNet between full-attention ones) on low-rank
 * hyper-connections, with a MoE and a gated shared expert in every layer.
 *
 * The residual is hyper_connection.count streams (hc.c, the low-rank form). A block's input is
 * the streams RMSNorm'd one by one, gated by a low-rank product of them and averaged (there are
 * no attn_norm or ffn_norm: the mixing carries the norm); its output goes back to every stream,
 * scaled by 2 sigmoid(inject / n_hc). The output head's mixing is the output norm.
 * Linear-attention layers (every layer but each full_attention_interval-th, 4 when the file
 * does not say): Qwen3.5's Gated DeltaNet with a sigmoid output gate (not SiLU). Full-attention
 * layers: a sigmoid output gate per head from attn_q ([query | gate] per head), per-head q/k
 * RMSNorm, NeoX RoPE on the first rope.dimension_count dims (the multi-axis sections give every
 * axis the token's position for text), and QSA's indexer tensors, which choose blocks of
 * attention.compress_ratios positions where a layer has one. FFN: a softmax router, top-k
 * renormalised, and a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x). The reference is
 * llama.cpp's src/models/qwen4exp.cpp. The layer named by ple.layers first adds the n-gram hash
 * embedding (ple.c) to the streams. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    gm_routing_from_file(hp, GM_GATING_SOFTMAX, true, o);
    o->shared_expert_gate = true;
    o->attn_out_gate = true;
    o->dn_tiled = true;
    o->dn_sigmoid_gate = true;
    o->qsa = true;
    o->head_norms = true;
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if (!e->hc_lr)
        return gm_err_set(err, GM_EFORMAT, "%s: qwen4exp without hyper_connection.count > 1 and "
                          "hyper_connection.low_rank", gm_gguf_path(e->g));
    const bool recurrent = l < e->desc.n_layers && e->desc.layers[l].is_recurrent;
    if ((rc = gm_bind_hc_low_rank(e, l, w, err)) || (recurrent && (rc = gm_bind_delta(e, l, w, err))) ||
        (!recurrent && ((rc = gm_bind_attn(e, l, w, err)) || (rc = gm_bind_qsa_indexer(e, l, w, err)))) ||
        (rc = gm_bind_ple(e, l, w, err)) || (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    return 0;
}

static int bind_model(gm_engine *e, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_hc_low_rank_head(e, err)) || (rc = gm_bind_ple_table(e, err)))
        return rc;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const bool timed = e->profile && n == 1;
    int rc;
    const uint64_t t0 = timed ? gm_now_ns() : 0;
    if ((int32_t)l == e->ple_layer && (rc = gm_ple_block(s, l, n, err)))
        return rc;
    if ((rc = gm_hcl_pre(s, w->hc_attn_norm, &w->hc_attn_down, &w->hc_attn_up, &w->hc_attn_inject, n, s->xn, err)) ||
        (rc = (w->recurrent ? gm_delta_block : gm_qsa_block)(s, l, n, s->tmp, err)))
        return rc;
    gm_hcl_post(s, s->tmp, n);
    const uint64_t t1 = timed ? gm_now_ns() : 0;
    if ((rc = gm_hcl_pre(s, w->hc_ffn_norm, &w->hc_ffn_down, &w->hc_ffn_up, &w->hc_ffn_inject, n, s->xn, err)) ||
        (rc = gm_ffn_block(s, l, n, s->moe_out, err)))
        return rc;
    gm_hcl_post(s, s->moe_out, n);
    if (timed) {
        e->prof_attn_ns[l] += t1 - t0;
        e->prof_ffn_ns[l] += gm_now_ns() - t1;
    }
    return 0;
}

const gm_recipe gm_recipe_qwen4exp = {
    .arch = "qwen4exp", .ops = ops, .bind_layer = bind_layer, .layer = layer,
    .bind_model = bind_model, .head = gm_hcl_head
};
