/* Qwen3-Next (qwen3next) and Qwen3.5 MoE (qwen35moe): Gated DeltaNet layers (delta.c) between
 * full-attention ones (every full_attention_interval-th) whose query projection carries a sigmoid
 * output gate per head; per-head q/k RMSNorm (the converter folded the reference's 1 + w into
 * the weights), NeoX RoPE on the first rope.dimension_count dims; a softmax router, top-k
 * renormalised, and a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x).
 * Qwen3.5's converter writes beta and alpha as two tensors and the value heads in tiled order;
 * its multi-axis RoPE sections give every axis the token's position for text, which is the NeoX
 * rotation above. */
#include <string.h>

#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    gm_routing_from_file(hp, GM_GATING_SOFTMAX, true, o);
    o->shared_expert_gate = true;
    o->attn_out_gate = true;
    o->dn_tiled = strcmp(o->name, "qwen35moe") == 0;
}

static bool recurrent(const gm_engine *e, uint32_t l)
{
    return l < e->desc.n_layers && e->desc.layers[l].is_recurrent;
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) ||
        (rc = recurrent(e, l) ? gm_bind_delta(e, l, w, err) : gm_bind_attn(e, l, w, err)) ||
        (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_prenorm(s, l, n, s->e->layers[l].recurrent ? gm_delta_block : gm_attn_block, err);
}

const gm_recipe gm_recipe_qwen3next = {
    .arch = "qwen3next", .ops = ops, .bind_layer = bind_layer, .layer = layer
};
const gm_recipe gm_recipe_qwen35moe = {
    .arch = "qwen35moe", .ops = ops, .bind_layer = bind_layer, .layer = layer
};
