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
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const bool timed = e->profile && n == 1;
    int rc;
    const uint64_t t0 = timed ? gm_now_ns() : 0;
    if ((rc = gm_hcs_pre(s, &w->hc_attn_fn, w->hc_attn_base, w->hc_attn_scale, n, s->xn, err)))
        return rc;
    gm_rms_norm(s->xn, w->attn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = gm_csa_block(s, l, n, s->tmp, err)))
        return rc;
    gm_hcs_post(s, s->tmp, n);
    const uint64_t t1 = timed ? gm_now_ns() : 0;
    if ((rc = gm_hcs_pre(s, &w->hc_ffn_fn, w->hc_ffn_base, w->hc_ffn_scale, n, s->xn, err)))
        return rc;
    gm_rms_norm(s->xn, w->ffn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = gm_ffn_block(s, l, n, s->moe_out, err)))
        return rc;
    gm_hcs_post(s, s->moe_out, n);
    if (timed) {
        e->prof_attn_ns[l] += t1 - t0;
        e->prof_ffn_ns[l] += gm_now_ns() - t1;
    }
    return 0;
}

const gm_recipe gm_recipe_deepseek4 = {
    .arch = "deepseek4", .ops = ops, .bind_layer = bind_layer, .layer = layer, .bind_model = gm_bind_hc_head,
    .head = gm_hc_head
};
