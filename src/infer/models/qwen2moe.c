/* Qwen2 MoE (qwen2moe): pre-norm attention with q/k/v biases and NeoX RoPE; softmax top-k
 * without renormalisation, and a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x). */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    o->gating = GM_GATING_SOFTMAX;
    o->norm_topk = false;
    o->shared_expert_gate = true;
}

const gm_recipe gm_recipe_qwen2moe = {
    .arch = "qwen2moe", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
