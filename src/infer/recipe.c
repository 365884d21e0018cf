/* The registry's recipes (model/families.h names one per family) and the layer shapes that
 * several families share. */
#include <string.h>

#include "infer/recipe.h"

#define GM_FAMILY(arch, human, mla, alt_sliding, hybrid, recipe) extern const gm_recipe gm_recipe_##recipe;
#include "model/families.h"
#undef GM_FAMILY

static const gm_recipe *const k_recipes[] = {
#define GM_FAMILY(arch, human, mla, alt_sliding, hybrid, recipe) &gm_recipe_##recipe,
#include "model/families.h"
#undef GM_FAMILY
};

const gm_recipe *gm_recipe_find(const char *arch)
{
    for (size_t i = 0; i < sizeof k_recipes / sizeof k_recipes[0]; i++)
        if (strcmp(k_recipes[i]->arch, arch) == 0)
            return k_recipes[i];
    return NULL;
}

void gm_routing_from_file(const gm_hparams *hp, gm_gating dflt, bool norm_dflt, gm_arch_ops *ops)
{
    ops->gating = hp->expert_gating_func == 1   ? GM_GATING_SOFTMAX
                  : hp->expert_gating_func == 2 ? GM_GATING_SIGMOID
                                                : dflt;
    ops->norm_topk = hp->has_expert_weights_norm ? hp->expert_weights_norm : norm_dflt;
    ops->expert_scale = hp->expert_weights_scale > 0.0f ? hp->expert_weights_scale : 1.0f;
}

/* x += out for n rows */
static void residual(gm_fwd *s, const float *out, uint32_t n)
{
    const uint64_t m = (uint64_t)n * s->e->n_embd;
    for (uint64_t i = 0; i < m; i++)
        s->x[i] += out[i];
}

int gm_layer_prenorm(gm_fwd *s, uint32_t l, uint32_t n, gm_block_fn attn, gm_err *err)
{
    const gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    int rc;
    gm_rms_norm(s->x, w->attn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = attn(s, l, n, s->tmp, err)))
        return rc;
    residual(s, s->tmp, n);
    gm_rms_norm(s->x, w->ffn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = gm_ffn_block(s, l, n, s->moe_out, err)))
        return rc;
    residual(s, s->moe_out, n);
    return 0;
}

int gm_layer_attn_ffn(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_prenorm(s, l, n, gm_attn_block, err);
}
