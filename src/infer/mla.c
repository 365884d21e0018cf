/* Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2), in its absorbed form.
 *
 * The reference computes, per head h, k_h = [W_kn,h c | k_rope] and v_h = W_v,h c from a
 * position's latent c (kv_lora values after kv_a_norm) and its rotated key part k_rope, shared
 * by all heads. Since q_h . k_h = (W_kn,h^T q_nope,h) . c + q_rope,h . k_rope and the softmax
 * weights are shared by the two products, the attention runs on the latent itself:
 *   query of head h  = [attn_k_b,h q_nope,h | rope(q_rope,h)]   (kv_lora + n_rot)
 *   key = value      = [kv_a_norm(c) | rope(k_rope)]            (one row per position)
 *   output of head h = attn_v_b,h (the first kv_lora values of the attention result)
 * so the cache holds kv_lora + n_rot values a position instead of n_head (qk_nope + n_rot +
 * v_head), and the same attention kernels run it as one kv head shared by every query head
 * (the result's last n_rot values, the keys' rotated part averaged, are not used). The files of
 * current converters carry attn_k_b (kv_lora rows of qk_nope per head: W_kn,h transposed) and
 * attn_v_b (v_head rows of kv_lora per head); see gm_engine_bind. */
#include <math.h>
#include <string.h>

#include "infer/recipe.h"

int gm_grouped_project(gm_fwd *s, const gm_mat *w, uint32_t n_groups, uint64_t rows_per_head, const float *x,
                       uint64_t x_stride, uint64_t x_head, uint64_t d_in, uint32_t n, float *y, uint64_t y_stride,
                       uint64_t y_head, gm_err *err)
{
    gm_engine *e = s->e;
    for (uint32_t h = 0; h < n_groups; h++) {
        for (uint32_t t = 0; t < n; t++)
            memcpy(s->mla_in + (uint64_t)t * d_in, x + (uint64_t)t * x_stride + (uint64_t)h * x_head,
                   d_in * sizeof(float));
        int rc = gm_prepare(s, w->type, s->mla_in, d_in, n, s->act, s->act_stride, err);
        if (rc)
            return rc;
        rc = gm_matmul(e->k, w, (uint64_t)h * rows_per_head, (uint64_t)(h + 1) * rows_per_head,
                       s->act, s->act_stride, n, y + (uint64_t)h * y_head, y_stride,
                       e->pool, e->n_threads, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The latent attention of layer l; with dsa, its queries attend the positions the lightning
 * indexer (dsa.c) chooses, scored from the query latent before the heads' queries are formed. */
static int mla(gm_fwd *s, uint32_t l, uint32_t n, float *out, bool dsa, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t E = e->n_embd, hd = e->head_dim, nh = e->n_head, R = e->n_rot;
    const uint32_t lora = e->kv_lora, nope = e->qk_nope, qh = nope + R;
    int rc;
    /* the full queries [nope | rope] per head */
    if (e->q_lora) {
        if ((rc = gm_attn_project(s, &w->wq_a, s->xn, E, n, s->mla_in, err)))
            return rc;
        gm_rms_norm(s->mla_in, w->q_a_norm, s->mla_in, n, e->q_lora, e->rms_eps);
        if ((rc = gm_attn_project(s, &w->wq_b, s->mla_in, e->q_lora, n, s->mla_q, err)))
            return rc;
    } else if ((rc = gm_attn_project(s, &w->wq, s->xn, E, n, s->mla_q, err))) {
        return rc;
    }
    /* the latent and the shared rotated key part */
    if ((rc = gm_attn_project(s, &w->wkv_a, s->xn, E, n, s->mla_kv, err)))
        return rc;
    for (uint32_t t = 0; t < n; t++) {
        float *kv = s->mla_kv + (uint64_t)t * (lora + R);
        gm_rms_norm(kv, w->kv_a_norm, kv, 1, lora, e->rms_eps);
        if (!e->ops.mla_no_rope)
            gm_attn_rope_vec(s, t, kv + lora);
        gm_attn_cache_row(s, kv, (uint8_t *)s->k_cache + gm_kv_at(s, l, 0, s->pos + t));
    }
    /* s->mla_in still holds the normalised query latent (gm_grouped_project below reuses it) */
    if (dsa && (rc = gm_dsa_index(s, l, n, s->mla_in, err)))
        return rc;
    /* the absorbed queries: [k_b q_nope | rope(q_rope)] per head, scaled in the attention */
    if ((rc = gm_grouped_project(s, &w->k_b, nh, lora, s->mla_q, (uint64_t)nh * qh, qh, nope, n, s->q,
                       (uint64_t)nh * hd, hd, err)))
        return rc;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t h = 0; h < nh; h++) {
            float *q = s->q + ((uint64_t)t * nh + h) * hd + lora;
            memcpy(q, s->mla_q + ((uint64_t)t * nh + h) * qh + nope, R * sizeof(float));
            if (!e->ops.mla_no_rope)
                gm_attn_rope_vec(s, t, q);
        }
    if (dsa)
        gm_dsa_attend(s, l, n);
    else
        gm_attn_run(s, l, 0, n);
    /* each head's value from its latent result, then the output projection */
    if ((rc = gm_grouped_project(s, &w->v_b, nh, e->v_head, s->att, (uint64_t)nh * hd, hd, lora, n, s->mla_v,
                       (uint64_t)nh * e->v_head, e->v_head, err)))
        return rc;
    if (w->has_attn_gate) { /* Hy4: the values times sigmoid(attn_gate x), computed in s->att */
        const uint64_t vd = (uint64_t)nh * e->v_head;
        if ((rc = gm_attn_project(s, &w->attn_gate, s->xn, E, n, s->att, err)))
            return rc;
        for (uint64_t i = 0; i < vd * n; i++)
            s->mla_v[i] *= 1.0f / (1.0f + expf(-s->att[i]));
    }
    return gm_attn_project(s, &w->wo, s->mla_v, (uint64_t)nh * e->v_head, n, out, err);
}

int gm_mla_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    return mla(s, l, n, out, false, err);
}

int gm_dsa_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    return mla(s, l, n, out, true, err);
}
