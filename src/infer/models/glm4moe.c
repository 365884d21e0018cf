/* GLM-4.5/4.6 MoE (glm4moe): pre-norm attention with q/k/v biases and per-head q/k RMSNorm,
 * NeoX RoPE on the first rope.dimension_count dims of each head; a sigmoid router whose
 * selection adds exp_probs_b, the chosen scores renormalised and scaled by expert_weights_scale;
 * an ungated shared expert; leading dense blocks. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, true, o);
}

const gm_recipe gm_recipe_glm4moe = {
    .arch = "glm4moe", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
