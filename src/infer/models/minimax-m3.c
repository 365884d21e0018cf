/* MiniMax-M3 (minimax-m3): MiniMax-M2's attention with per-head q/k RMSNorm (the converter folded
 * the reference's 1 + w into the weights) before NeoX RoPE on the first rope.dimension_count
 * dims; in the blocks past the leading dense ones, MiniMax sparse attention (msa.c: an indexer
 * head per kv head choosing blocks of positions). A dense FFN in the leading blocks, else a
 * sigmoid router with exp_probs_b for selection, the chosen scores renormalised and scaled, and
 * an ungated shared expert; every FFN with the clamped SwiGLU (swigluoai, gpt-oss's). */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    o->swiglu_clamped = true;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, true, o);
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_attn(e, l, w, err)) ||
        (rc = gm_bind_block_indexer(e, l, w, err)) || (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_prenorm(s, l, n, gm_msa_block, err);
}

const gm_recipe gm_recipe_minimax_m3 = {
    .arch = "minimax-m3", .ops = ops, .bind_layer = bind_layer, .layer = layer
};
