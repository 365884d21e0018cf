/* DeepSeek-V4 (deepseek4): its attention and MoE on Sinkhorn-mixed hyper-connections.
 *
 * The residual is hyper_connection.count streams (hc.c). Each block's input is the streams mixed
 * by the layer's hc_*_fn weights, then RMSNorm'd; after the block every stream is rebuilt from
 * all the streams, through a doubly stochastic matrix (Sinkhorn), plus its share of the output.
 * Attention (csa.c): a query latent, one key/value row a position with sinks and a sliding
 * window, the heads' results rotated back and a grouped low-rank output. FFN: routed experts
 * scored by sqrt(softplus(logit)), chosen by score plus exp_probs_b (in the first
 * hash_layer_count layers by the token's id through ffn_gate_tid2eid), the chosen scores
 * renormalised and scaled as the file states, SwiGLUs clamped by swiglu_clamp_exp (the routed
 * experts) and swiglu_clamp_shexp (the shared one). The output norm reads the streams mixed by
 * the output head's weights (output_hc_*, as Hy4's). */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    o->rope_plain = true;
    o->csa = true;
    gm_routing_from_file(hp, GM_GATING_SQRT_SOFTPLUS, true, o);
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_csa(e, l, w, err)) ||
        (rc = gm_bind_hc_sinkhorn(e, l, w, err)) || (rc = gm_bind_ffn(e, l, w, err)) ||
        (l < e->desc.hp.n_hash_layers && (rc = gm_bind_hash_routing(e, l, w, err))) ||
        (rc = gm_bind_unused(e, l, "exp_probs_b_vl.bias", err)))
        return rc;
    w->exp_limit = e->desc.layers[l].swiglu_limit;
    w->sh_limit = e->desc.layers[l].swiglu_limit_shexp;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_hc(s, l, n, gm_csa_block, err);
}

const gm_recipe gm_recipe_deepseek4 = {
    .arch = "deepseek4", .ops = ops, .bind_layer = bind_layer, .layer = layer, .bind_model = gm_bind_hc_head,
    .head = gm_hc_head
};
