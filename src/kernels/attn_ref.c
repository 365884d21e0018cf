/* The scalar reference of the attention kernels (attn.h): every float operation in a fixed,
 * simple order, expf from the C library. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gguf/types.h"
#include "kernels/attn_impl.h"
#include "kernels/quant.h"

/* Element d of row r of a cache (K or V) as float32. */
static float elem(const gm_attn_kv *kv, const uint8_t *base, uint32_t r, uint32_t d)
{
    const uint8_t *row = base + (uint64_t)r * kv->row_stride;
    if (kv->type == GM_TYPE_F32) {
        float f;
        memcpy(&f, row + 4u * d, sizeof f);
        return f;
    }
    if (kv->type == GM_TYPE_F16) {
        uint16_t h;
        memcpy(&h, row + 2u * d, sizeof h);
        return gm_f16_to_f32(h);
    }
    /* GM_TYPE_Q8_0: the block's scale times the code */
    const uint8_t *blk = row + (uint64_t)(d / GM_QK8_0) * sizeof(gm_block_q8_0);
    uint16_t h;
    memcpy(&h, blk + offsetof(gm_block_q8_0, d), sizeof h);
    const int8_t c = (int8_t)blk[offsetof(gm_block_q8_0, qs) + d % GM_QK8_0];
    return gm_f16_to_f32(h) * (float)c;
}

void gm_attn_load_ref(const gm_attn_kv *kv, uint32_t p, uint32_t n, float *kt, float *vb)
{
    const uint32_t hd = kv->head_dim;
    for (uint32_t j = 0; j < GM_ATTN_BLOCK; j++)
        for (uint32_t d = 0; d < hd; d++) {
            kt[(uint64_t)d * GM_ATTN_BLOCK + j] = j < n ? elem(kv, kv->k, p + j, d) : 0.0f;
            vb[(uint64_t)j * hd + d] = j < n ? elem(kv, kv->v, p + j, d) : 0.0f;
        }
}

void gm_attn_ref(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                 float *scratch)
{
    const uint32_t hd = kv->head_dim, B = GM_ATTN_BLOCK;
    /* the scratch: kt (16 hd floats), vb (16 hd), the block's weights of every query (16 n_q) */
    float *kt = scratch, *vb = scratch + (uint64_t)B * hd, *w = vb + (uint64_t)B * hd;
    for (uint32_t p = p0; p < p1; p += B) {
        const uint32_t n = p1 - p < B ? p1 - p : B;
        gm_attn_load_ref(kv, p, n, kt, vb);
        for (uint32_t i = 0; i < q->n_q; i++) {
            const uint32_t end = q->end[i];
            if (end <= p)
                continue;
            const uint32_t vis = end - p < n ? end - p : n;
            const float *qi = q->q + (uint64_t)i * hd;
            float *wi = w + (uint64_t)i * B;
            float mx = -INFINITY;
            for (uint32_t j = 0; j < vis; j++) {
                float s = 0.0f;
                for (uint32_t d = 0; d < hd; d++)
                    s += qi[d] * kt[(uint64_t)d * B + j];
                wi[j] = s;
                mx = s > mx ? s : mx;
            }
            const float m_old = q->m[i], m_new = mx > m_old ? mx : m_old;
            const float corr = m_old == m_new ? 1.0f : expf(m_old - m_new);
            float sum = 0.0f;
            for (uint32_t j = 0; j < vis; j++) {
                wi[j] = expf(wi[j] - m_new);
                sum += wi[j];
            }
            q->m[i] = m_new;
            q->l[i] = q->l[i] * corr + sum;
            float *oi = q->o + (uint64_t)i * hd;
            for (uint32_t d = 0; d < hd; d++) {
                float acc = oi[d] * corr;
                for (uint32_t j = 0; j < vis; j++)
                    acc += wi[j] * vb[(uint64_t)j * hd + d];
                oi[d] = acc;
            }
        }
    }
}

void gm_attn_merge(uint32_t n_q, uint32_t head_dim, float *o_a, float *m_a, float *l_a,
                   const float *o_b, const float *m_b, const float *l_b)
{
    for (uint32_t i = 0; i < n_q; i++) {
        if (m_b[i] == -INFINITY)
            continue; /* b saw nothing */
        const float m = m_a[i] > m_b[i] ? m_a[i] : m_b[i];
        const float ca = m_a[i] == m ? 1.0f : expf(m_a[i] - m);
        const float cb = m_b[i] == m ? 1.0f : expf(m_b[i] - m);
        float *oa = o_a + (uint64_t)i * head_dim;
        const float *ob = o_b + (uint64_t)i * head_dim;
        for (uint32_t d = 0; d < head_dim; d++)
            oa[d] = oa[d] * ca + ob[d] * cb;
        l_a[i] = l_a[i] * ca + l_b[i] * cb;
        m_a[i] = m;
    }
}

void gm_attn_finish(uint32_t n_q, uint32_t head_dim, const float *o, const float *l, float *out,
                    uint64_t out_stride)
{
    for (uint32_t i = 0; i < n_q; i++) {
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (uint32_t d = 0; d < head_dim; d++)
            out[(uint64_t)i * out_stride + d] = o[(uint64_t)i * head_dim + d] * inv;
    }
}
