/* Kimi-K3 (kimi-k3): hybrid KDA linear attention and latent attention, cross-layer residual
 * attention, a latent MoE, the situ activation (llama.cpp's src/models/kimi-k3.cpp).
 *
 * A layer whose attention.head_count_kv is 0 is a KDA layer (delta.c), the others latent
 * attention (mla.c) without RoPE on its rotated part and, where the file has attn_gate, its heads'
 * values gated by sigmoid(attn_gate x). With attn_res.block_size, each block's input is mixed
 * from the residual stream and the banked layer inputs (attnres.c); every block_size-th layer
 * banks its raw input and the stream restarts from its attention's output. FFN: dense in the
 * leading blocks, else a sigmoid router with exp_probs_b on the full-width input, routed experts
 * in the latent width (ffn_routed_down, their sum RMSNorm'd and taken back by ffn_routed_up) and
 * a shared expert on the full width; every FFN with situ instead of SwiGLU. The output norm reads
 * the stream mixed with the banked inputs by output_res_score. */
#include <string.h>

#include "infer/recipe.h"

static void ops(const gm_hparams *hp, gm_arch_ops *o)
{
    o->rope = GM_ROPE_NORM;
    o->mla_no_rope = true;
    o->kda = true;
    gm_routing_from_file(hp, GM_GATING_SIGMOID, true, o);
}

static int bind_layer(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_res(e, l, w, err)))
        return rc;
    if (l < e->desc.n_layers && e->desc.layers[l].is_recurrent)
        rc = gm_bind_kda(e, l, w, err);
    else if (!(rc = gm_bind_mla(e, l, w, err)))
        rc = gm_bind_mla_gate(e, l, w, false, err);
    if (rc || (rc = gm_bind_ffn(e, l, w, err)) || (rc = gm_bind_latent(e, l, w, err)))
        return rc;
    return 0;
}

/* The n rows a block reads: the stream, or its mix with the banked inputs; then the norm. */
static void block_input(gm_fwd *s, const float *score, const float *norm, uint32_t n)
{
    gm_engine *e = s->e;
    if (e->res_block)
        gm_res_mix(s, score, 0, n, s->xn);
    else
        memcpy(s->xn, s->x, (uint64_t)n * e->n_embd * sizeof(float));
    gm_rms_norm(s->xn, norm, s->xn, n, e->n_embd, e->rms_eps);
}

static int layer(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint64_t m = (uint64_t)n * e->n_embd;
    const bool timed = e->profile && n == 1;
    int rc;
    const uint64_t t0 = timed ? gm_now_ns() : 0;
    if (l == 0)
        s->res_n = 0;
    block_input(s, w->res_attn_score, w->attn_norm, n);
    const bool banked = e->res_block && l % e->res_block == 0;
    if (banked)
        gm_res_push(s, n);
    if ((rc = (w->recurrent ? gm_kda_block : gm_mla_block)(s, l, n, s->tmp, err)))
        return rc;
    if (banked) /* the stream restarts from the attention's output */
        memcpy(s->x, s->tmp, m * sizeof(float));
    else
        for (uint64_t i = 0; i < m; i++)
            s->x[i] += s->tmp[i];
    const uint64_t t1 = timed ? gm_now_ns() : 0;
    block_input(s, w->res_ffn_score, w->ffn_norm, n);
    if ((rc = gm_ffn_block(s, l, n, s->moe_out, err)))
        return rc;
    for (uint64_t i = 0; i < m; i++)
        s->x[i] += s->moe_out[i];
    if (timed) {
        e->prof_attn_ns[l] += t1 - t0;
        e->prof_ffn_ns[l] += gm_now_ns() - t1;
    }
    return 0;
}

/* The output norm's rows: the stream mixed with the banked inputs by output_res_score. */
static int head(gm_fwd *s, uint32_t first, uint32_t m, float *out, gm_err *err)
{
    (void)err;
    gm_engine *e = s->e;
    if (e->res_block)
        gm_res_mix(s, e->res_out_score, first, m, out);
    else
        memcpy(out, s->x + (uint64_t)first * e->n_embd, (uint64_t)m * e->n_embd * sizeof(float));
    return 0;
}

const gm_recipe gm_recipe_kimi_k3 = {.arch = "kimi-k3", .ops = ops, .bind_layer = bind_layer, .layer = layer,
                                     .bind_model = gm_bind_res_out, .head = head};
