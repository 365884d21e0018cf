/* Hy3 (hy_v3): per-head q/k RMSNorm before NeoX RoPE, an optional output bias; a sigmoid router
 * whose selection adds exp_probs_b, the chosen scores renormalised (expert_weights_norm) and
 * scaled (expert_weights_scale) as the file states; an ungated shared expert; dense blocks where
 * a block has no router. Its MTP blocks are left to speculative decoding. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, false, o);
}

const gm_recipe gm_recipe_hy_v3 = {
    .arch = "hy_v3", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
