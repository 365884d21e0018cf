/* GLM-5.2 (glm-dsa): DeepSeek-V3's blocks with DeepSeek sparse attention. Pre-norm latent
 * attention (mla.c, always through the query latent) whose queries attend the positions a
 * lightning indexer chooses (dsa.c: its own in the layers attention.indexer.types marks, the
 * last one's choice in the others), adjacent-pair RoPE; then a dense FFN in the leading blocks,
 * else a sigmoid router with exp_probs_b for selection, the chosen scores renormalised and
 * scaled, and an ungated shared expert. Its MTP block is left to speculative decoding. */
#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, true, o);
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_mla(e, l, w, err)) ||
        (rc = gm_bind_indexer(e, l, w, err)) || (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    return 0;
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_prenorm(s, l, n, gm_dsa_block, err);
}

const gm_recipe gm_recipe_glm_dsa = {.arch = "glm-dsa", .ops = ops, .bind_layer = bind_layer, .layer = layer};
