/* MiniMax-M2 (minimax-m2): q/k RMSNorm over all heads of a token jointly; NeoX RoPE on the first
 * rope.dimension_count dims; a sigmoid router with exp_probs_b for selection, the chosen scores
 * renormalised. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    o->qk_norm_joint = true;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, true, o);
}

const gm_recipe gm_recipe_minimax_m2 = {
    .arch = "minimax-m2", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
