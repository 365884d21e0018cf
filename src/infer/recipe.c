/* The registry's recipes (model/families.h names one per family) and the layer shapes that
 * several families share. */
#include <stdio.h>
#include <string.h>
#include <time.h>

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
                  : hp->expert_gating_func == 4 ? GM_GATING_SQRT_SOFTPLUS
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

uint64_t gm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int gm_layer_prenorm(gm_fwd *s, uint32_t l, uint32_t n, gm_block_fn attn, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const bool timed = e->profile && n == 1;
    int rc;
    const uint64_t t0 = timed ? gm_now_ns() : 0;
    gm_rms_norm(s->x, w->attn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = attn(s, l, n, s->tmp, err)))
        return rc;
    residual(s, s->tmp, n);
    const uint64_t t1 = timed ? gm_now_ns() : 0;
    gm_rms_norm(s->x, w->ffn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = gm_ffn_block(s, l, n, s->moe_out, err)))
        return rc;
    residual(s, s->moe_out, n);
    if (timed) {
        e->prof_attn_ns[l] += t1 - t0;
        e->prof_ffn_ns[l] += gm_now_ns() - t1;
    }
    return 0;
}

/* The name of layer l's attention and FFN blocks in the profile. */
static const char *attn_name(const gm_engine *e, uint32_t l)
{
    if (e->layers[l].recurrent)
        return e->ops.kda ? "KDA" : "Gated DeltaNet";
    if (e->ops.qsa)
        return e->layers[l].idx_slot >= 0 ? "attention + QSA indexer" : "attention";
    if (e->idx_topk)
        return e->layers[l].idx_slot >= 0 ? "latent attention + indexer" : "latent attention (shared indexer)";
    return e->mla ? "latent attention" : "attention";
}

void gm_engine_print_profile(const gm_engine *e, gm_strbuf *out)
{
    if (!e->profile || !e->prof_tokens)
        return;
    const double per = 1e-6 / (double)e->prof_tokens;
    uint64_t attn = 0, ffn = 0, moe = 0;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        attn += e->prof_attn_ns[l];
        ffn += e->prof_ffn_ns[l];
        if (e->layers[l].is_moe)
            moe += e->prof_ffn_ns[l];
    }
    const uint64_t rest = e->prof_total_ns > attn + ffn ? e->prof_total_ns - attn - ffn : 0;
    gm_strbuf_putf(out, "[profile] decode per-token ms over %llu tokens: total %.3f | attention %.3f | ffn %.3f "
                   "(routed experts' layers %.3f) | embedding, head and the rest %.3f\n",
                   (unsigned long long)e->prof_tokens, (double)e->prof_total_ns * per, (double)attn * per,
                   (double)ffn * per, (double)moe * per, (double)rest * per);
    if (e->profile < 2)
        return;
    for (uint32_t l = 0; l < e->n_layer; l++)
        gm_strbuf_putf(out, "[profile] layer %u: %s %.3f ms, %s %.3f ms\n", l, attn_name(e, l),
                       (double)e->prof_attn_ns[l] * per, e->layers[l].is_moe ? "routed experts" : "dense ffn",
                       (double)e->prof_ffn_ns[l] * per);
}

int gm_layer_attn_ffn(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    return gm_layer_prenorm(s, l, n, gm_attn_block, err);
}
