/* ERNIE 4.5 MoE (ernie4_5-moe): adjacent-pair RoPE; a softmax router whose selection adds
 * exp_probs_b, the chosen probabilities renormalised (its reference fixes both, whatever the
 * file says); ungated shared experts; leading dense blocks. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    o->gating = GM_GATING_SOFTMAX;
    o->norm_topk = true;
}

const gm_recipe gm_recipe_ernie4_5_moe = {
    .arch = "ernie4_5-moe", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
