/* Qwen3 MoE (qwen3moe): pre-norm attention with per-head q/k RMSNorm before NeoX RoPE; a routed
 * MoE (softmax router, top-k renormalised) or, in a block without a router, a dense FFN. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    o->gating = GM_GATING_SOFTMAX;
    o->norm_topk = true;
}

const gm_recipe gm_recipe_qwen3moe = {
    .arch = "qwen3moe", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
