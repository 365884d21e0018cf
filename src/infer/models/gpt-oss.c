/* gpt-oss (gpt-oss): biases everywhere, attention sinks, sliding-window attention on even
 * layers, NeoX RoPE with YaRN (ramp ends not rounded, as its reference configures it); softmax
 * over the top-k router logits (= renormalised top-k of the softmax); clamped SwiGLU experts. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NEOX;
    o->gating = GM_GATING_SOFTMAX;
    o->norm_topk = true;
    o->swiglu_clamped = true;
    o->yarn_no_truncate = true;
}

const gm_recipe gm_recipe_gpt_oss = {
    .arch = "gpt-oss", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
