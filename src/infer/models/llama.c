/* Llama / Mixtral (llama): pre-norm attention with adjacent-pair RoPE (the converter permuted Q
 * and K so that it reproduces the reference), softmax over the top-k router logits (= the
 * renormalised top-k); Llama 3's rope_freqs factors where the file has them. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    o->gating = GM_GATING_SOFTMAX;
    o->norm_topk = true;
}

const gm_recipe gm_recipe_llama = {
    .arch = "llama", .ops = ops, .bind_layer = gm_bind_attn_ffn, .layer = gm_layer_attn_ffn
};
