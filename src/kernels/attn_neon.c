/* The NEON attention kernel (attn.h): the structure of the x86 ones (attn_avx512.c) on 4-lane
 * vectors: a block's K rows converted and transposed once to [head_dim][16] (four vectors per
 * element), its V rows converted once, then two queries at a time. Baseline Advanced SIMD of
 * aarch64; called only after dispatch.c checked the CPU. */
#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gguf/types.h"
#include "kernels/attn_impl.h"
#include "kernels/quant.h"

#define B GM_ATTN_BLOCK

/* exp(x) for x <= 0 (see attn_avx512.c); below -87 the result is 0. */
static inline float32x4_t exp_ps(float32x4_t x)
{
    const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(-87.0f));
    x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t y = vdupq_n_f32(1.9875691500e-4f);
    y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, r);
    y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, r);
    y = vfmaq_f32(r, y, vmulq_f32(r, r));
    y = vaddq_f32(y, vdupq_n_f32(1.0f));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t v = vmulq_f32(y, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(v), tiny));
}

/* Elements d..d+3 of a cache row as float32. */
static inline float32x4_t row4(uint32_t type, const uint8_t *row, uint32_t d)
{
    if (type == GM_TYPE_F32) {
        float f[4];
        memcpy(f, row + 4u * d, sizeof f);
        return vld1q_f32(f);
    }
    if (type == GM_TYPE_F16) {
        uint16_t h[4];
        memcpy(h, row + 2u * d, sizeof h);
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
    }
    const uint8_t *blk = row + (uint64_t)(d / GM_QK8_0) * sizeof(gm_block_q8_0);
    uint16_t h;
    memcpy(&h, blk + offsetof(gm_block_q8_0, d), sizeof h);
    uint32_t c4;
    memcpy(&c4, blk + offsetof(gm_block_q8_0, qs) + d % GM_QK8_0, sizeof c4);
    const int16x8_t w = vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(c4)));
    const float32x4_t c = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
    return vmulq_n_f32(c, gm_f16_to_f32(h));
}

static inline void load_block(const gm_attn_kv *kv, uint32_t p, uint32_t n, float *kt, float *vb)
{
    const uint32_t hd = kv->head_dim;
    for (uint32_t d = 0; d < hd; d += 4)
        for (uint32_t j0 = 0; j0 < B; j0 += 4) {
            float32x4_t r[4];
            for (uint32_t jj = 0; jj < 4; jj++) {
                const uint32_t j = j0 + jj;
                if (j < n) {
                    r[jj] = row4(kv->type, kv->k + (uint64_t)(p + j) * kv->row_stride, d);
                    vst1q_f32(vb + (uint64_t)j * hd + d,
                              row4(kv->type, kv->v + (uint64_t)(p + j) * kv->row_stride, d));
                } else {
                    r[jj] = vdupq_n_f32(0.0f);
                    vst1q_f32(vb + (uint64_t)j * hd + d, r[jj]);
                }
            }
            const float32x4x2_t t0 = vtrnq_f32(r[0], r[1]), t1 = vtrnq_f32(r[2], r[3]);
            float *o = kt + (uint64_t)d * B + j0;
            vst1q_f32(o, vcombine_f32(vget_low_f32(t0.val[0]), vget_low_f32(t1.val[0])));
            vst1q_f32(o + B, vcombine_f32(vget_low_f32(t0.val[1]), vget_low_f32(t1.val[1])));
            vst1q_f32(o + 2 * B, vcombine_f32(vget_high_f32(t0.val[0]), vget_high_f32(t1.val[0])));
            vst1q_f32(o + 3 * B, vcombine_f32(vget_high_f32(t0.val[1]), vget_high_f32(t1.val[1])));
        }
}

/* o[d..d + 4 NC) of NQ queries from i = o * corr + sum_j w_j v_j over the block's n rows. */
static inline __attribute__((always_inline)) void pv(const float *vb, uint32_t hd, uint32_t n,
                                                     const gm_attn_q *q, uint32_t i, int NQ,
                                                     uint32_t d, int NC, const float corr[2],
                                                     float wl[2][B], const uint32_t nv[2])
{
    float32x4_t acc[2][8];
    for (int u = 0; u < NQ; u++) {
        const float *o = q->o + (uint64_t)(i + u) * hd + d;
        for (int c = 0; c < NC; c++)
            acc[u][c] = vmulq_n_f32(vld1q_f32(o + 4 * c), corr[u]);
    }
    /* rows every query sees together, then each query's further rows alone: a row past a
     * query's causal end must not reach it even as 0 x (an inf or NaN of the cache) */
    uint32_t jmin = n;
    for (int u = 0; u < NQ; u++)
        jmin = nv[u] && nv[u] < jmin ? nv[u] : jmin;
    for (uint32_t j = 0; j < jmin; j++) {
        float32x4_t v[8];
        for (int c = 0; c < NC; c++)
            v[c] = vld1q_f32(vb + (uint64_t)j * hd + d + 4 * c);
        for (int u = 0; u < NQ; u++)
            for (int c = 0; c < NC; c++)
                acc[u][c] = vfmaq_n_f32(acc[u][c], v[c], wl[u][j]);
    }
    for (int u = 0; u < NQ; u++)
        for (uint32_t j = jmin; j < nv[u]; j++)
            for (int c = 0; c < NC; c++)
                acc[u][c] = vfmaq_n_f32(acc[u][c], vld1q_f32(vb + (uint64_t)j * hd + d + 4 * c),
                                        wl[u][j]);
    for (int u = 0; u < NQ; u++) {
        if (!nv[u])
            continue; /* left exactly as it was */
        float *o = q->o + (uint64_t)(i + u) * hd + d;
        for (int c = 0; c < NC; c++)
            vst1q_f32(o + 4 * c, acc[u][c]);
    }
}

/* NQ queries from i (see attn_avx512.c: each query's arithmetic does not depend on NQ). */
static inline __attribute__((always_inline)) void queries(const float *kt, const float *vb,
                                                          uint32_t hd, uint32_t p, uint32_t n,
                                                          const gm_attn_q *q, uint32_t i, int NQ)
{
    float32x4_t s[2][4];
    float corr[2];
    uint32_t nv[2]; /* rows of the block each query sees (0: none) */
    float wl[2][B];
    {
        float32x4_t a[2][8]; /* [query][4 (d odd) + lane group] */
        for (int u = 0; u < NQ; u++)
            for (int c = 0; c < 8; c++)
                a[u][c] = vdupq_n_f32(0.0f);
        for (uint32_t d = 0; d < hd; d += 2) {
            const float *k0 = kt + (uint64_t)d * B, *k1 = k0 + B;
            float32x4_t kv0[4], kv1[4];
            for (int c = 0; c < 4; c++) {
                kv0[c] = vld1q_f32(k0 + 4 * c);
                kv1[c] = vld1q_f32(k1 + 4 * c);
            }
            for (int u = 0; u < NQ; u++) {
                const float *qr = q->q + (uint64_t)(i + u) * hd;
                for (int c = 0; c < 4; c++) {
                    a[u][c] = vfmaq_n_f32(a[u][c], kv0[c], qr[d]);
                    a[u][4 + c] = vfmaq_n_f32(a[u][4 + c], kv1[c], qr[d + 1]);
                }
            }
        }
        for (int u = 0; u < NQ; u++)
            for (int c = 0; c < 4; c++)
                s[u][c] = vaddq_f32(a[u][c], a[u][4 + c]);
    }
    const int32x4_t lane = {0, 1, 2, 3};
    for (int u = 0; u < NQ; u++) {
        const uint32_t end = q->end[i + u];
        nv[u] = end <= p ? 0 : end - p < n ? end - p : n;
        if (!nv[u]) {
            corr[u] = 1.0f;
            memset(wl[u], 0, sizeof wl[u]);
            continue;
        }
        const int vis = (int)nv[u];
        uint32x4_t k[4];
        float32x4_t sm[4];
        float32x4_t mxv = vdupq_n_f32(-INFINITY);
        for (int c = 0; c < 4; c++) {
            k[c] = vcltq_s32(vaddq_s32(lane, vdupq_n_s32(4 * c)), vdupq_n_s32(vis));
            sm[c] = vbslq_f32(k[c], s[u][c], vdupq_n_f32(-INFINITY));
            mxv = vmaxq_f32(mxv, sm[c]);
        }
        const float mx = vmaxvq_f32(mxv);
        const float m_old = q->m[i + u], m_new = mx > m_old ? mx : m_old;
        corr[u] = m_old == m_new ? 1.0f : expf(m_old - m_new);
        float32x4_t sum = vdupq_n_f32(0.0f);
        for (int c = 0; c < 4; c++) {
            const float32x4_t w = vreinterpretq_f32_u32(vandq_u32(
                k[c], vreinterpretq_u32_f32(exp_ps(vsubq_f32(sm[c], vdupq_n_f32(m_new))))));
            vst1q_f32(wl[u] + 4 * c, w);
            sum = vaddq_f32(sum, w);
        }
        q->m[i + u] = m_new;
        q->l[i + u] = q->l[i + u] * corr[u] + vaddvq_f32(sum);
    }
    int any = 0;
    for (int u = 0; u < NQ; u++)
        any |= nv[u] != 0;
    if (!any)
        return;
    uint32_t d = 0;
    for (; d + 32 <= hd; d += 32)
        pv(vb, hd, n, q, i, NQ, d, 8, corr, wl, nv);
    for (; d < hd; d += 4)
        pv(vb, hd, n, q, i, NQ, d, 1, corr, wl, nv);
}

void gm_attn_neon(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                  float *scratch)
{
    GM_ATTN_LEVEL_BODY(2);
}
