/* DeepSeek-V2/V3/R1, Kimi-K2 (deepseek2): pre-norm multi-head latent attention (mla.c) with
 * adjacent-pair RoPE on its rotated part, then the FFN. DeepSeek-V3 / Kimi-K2: a sigmoid router
 * with exp_probs_b for selection, expert groups, the chosen scores renormalised and scaled;
 * DeepSeek-V2: softmax, as the file states. A shared expert and leading dense blocks. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    gm_routing_from_file(hp, GM_GATING_SOFTMAX, false, o);
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_mla(e, l, w, err)) || (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_prenorm(s, l, n, gm_mla_block, err);
}

const gm_recipe gm_recipe_deepseek2 = {
    .arch = "deepseek2", .ops = ops, .bind_layer = bind_layer, .layer = layer
};
