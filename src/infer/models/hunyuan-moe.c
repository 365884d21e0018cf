/* Hunyuan-A13B (hunyuan-moe): per-head q/k RMSNorm on the rotated q/k (after NeoX RoPE);
 * softmax router, top-k renormalised; an ungated shared expert in every block. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    o->gating = GM_GATING_SOFTMAX;
    o->norm_topk = true;
    o->qk_norm_after_rope = true;
}

const gm_recipe gm_recipe_hunyuan_moe = {
    .arch = "hunyuan-moe", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
