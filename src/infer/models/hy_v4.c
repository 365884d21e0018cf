/* Hy4 (hy_v4): DeepSeek-V3's latent attention and MoE on independent hyper-connections.
 *
 * The residual is hyper_connection.count streams (hc.c). Each block's input is the streams mixed
 * by the layer's hc_*_fn weights, then RMSNorm'd; its output goes back to every stream, scaled
 * by that stream's post weight. Attention: latent attention through the query latent (mla.c),
 * adjacent-pair RoPE on the last n_rot dims, a sink logit per head, and the heads' values gated
 * by sigmoid(attn_gate x) before the output projection; in checkpoints with
 * attention.indexer.*, DeepSeek sparse attention (dsa.c) whose indexer rotates the last n_rot
 * dims of a head, has no Hadamard rotation and a LayerNorm with the model's epsilon. FFN: dense
 * in the leading blocks, else a sigmoid router with exp_probs_b for selection, the chosen
 * scores renormalised and scaled as the file states, routed experts whose SwiGLU is clamped by
 * swiglu_clamp_exp, and an ungated shared expert. The output norm reads the streams mixed by the
 * output head's weights (output_hc_*). */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    o->idx_rope_tail = true;
    o->idx_no_hadamard = true;
    o->idx_norm_model_eps = true;
    o->mla_plain_yarn = true;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, true, o);
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_mla(e, l, w, err)) ||
        (rc = gm_bind_mla_gate_sinks(e, l, w, err)) || (rc = gm_bind_hc(e, l, w, err)) ||
        (e->idx_topk && (rc = gm_bind_indexer(e, l, w, err))) || (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    w->exp_limit = e->desc.layers[l].swiglu_limit;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_hc(s, l, n, s->e->idx_topk ? gm_dsa_block : gm_mla_block, err);
}

const gm_recipe gm_recipe_hy_v4 = {
    .arch = "hy_v4", .ops = ops, .bind_layer = bind_layer, .layer = layer, .bind_model = gm_bind_hc_head,
    .head = gm_hc_head
};
