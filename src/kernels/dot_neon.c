/* NEON (aarch64 Advanced SIMD, no dot-product extension needed) dot products for Q8_0, Q4_K and
 * F32 weights; compiled only on aarch64 (src/kernels/CMakeLists.txt) and called when
 * dispatch.c has seen NEON (see dot_impl.h). Other types keep the scalar reference on this level.
 *
 * Same arithmetic as dot_ref.c: 8-bit products widened to 16 bits (at most two or four per
 * 16-bit lane, which cannot overflow: |q8| <= 127 and |w| <= 128 or <= 15), exact integer sums
 * per (sub-)block, one float multiply-add per block.
 * TODO(kernels): use vdotq_s32 when GM_CPU_DOTPROD is set; F16/BF16; the other K and IQ types. */
#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dot_impl.h"
#include "kernels/quant.h"

static inline float h2f(const uint8_t *p)
{
    __fp16 h;
    memcpy(&h, p, sizeof h);
    return (float)h;
}

static inline float ld_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 16 signed bytes times 16 signed bytes, pairwise into 8 int16 (two products per lane). */
static inline int16x8_t mul16(int8x16_t x, int8x16_t y)
{
    return vmlal_s8(vmull_s8(vget_low_s8(x), vget_low_s8(y)), vget_high_s8(x), vget_high_s8(y));
}

#define Q80 sizeof(gm_block_q8_0)

static float dot_q8_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK8_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * Q80, *a0 = a + i * Q80;
        const int16x8_t p0 = mul16(vld1q_s8((const int8_t *)(w0 + 2)),
                                   vld1q_s8((const int8_t *)(a0 + 2)));
        const int16x8_t p1 = mul16(vld1q_s8((const int8_t *)(w0 + 18)),
                                   vld1q_s8((const int8_t *)(a0 + 18)));
        const int32x4_t s = vpadalq_s16(vpaddlq_s16(p0), p1);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), h2f(w0) * ld_f32(asc + 4 * i));
    }
    return vaddvq_f32(acc);
}

#define Q8K sizeof(gm_block_q8_K)

static float dot_q4_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    float sum = 0.0f;
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q4_K x;
        gm_block_q8_K y;
        memcpy(&x, w + i * sizeof x, sizeof x);
        memcpy(&y, a + i * Q8K, sizeof y);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 4; j++) {
            int sc0, m0, sc1, m1;
            gm_q4_K_scale_min(2 * j, x.scales, &sc0, &m0);
            gm_q4_K_scale_min(2 * j + 1, x.scales, &sc1, &m1);
            const uint8x16_t qa = vld1q_u8(x.qs + 32 * j), qb = vld1q_u8(x.qs + 32 * j + 16);
            const int8_t *q8 = y.qs + 64 * j;
            int16x8_t lo = mul16(vreinterpretq_s8_u8(vandq_u8(qa, m4)), vld1q_s8(q8));
            lo = vaddq_s16(lo, mul16(vreinterpretq_s8_u8(vandq_u8(qb, m4)), vld1q_s8(q8 + 16)));
            int16x8_t hi = mul16(vreinterpretq_s8_u8(vshrq_n_u8(qa, 4)), vld1q_s8(q8 + 32));
            hi = vaddq_s16(hi, mul16(vreinterpretq_s8_u8(vshrq_n_u8(qb, 4)), vld1q_s8(q8 + 48)));
            isum += sc0 * vaddvq_s32(vpaddlq_s16(lo)) + sc1 * vaddvq_s32(vpaddlq_s16(hi));
            msum += m0 * (y.bsums[4 * j] + y.bsums[4 * j + 1]) +
                    m1 * (y.bsums[4 * j + 2] + y.bsums[4 * j + 3]);
        }
        sum += y.d * h2f((const uint8_t *)&x.d) * (float)isum -
               y.d * h2f((const uint8_t *)&x.dmin) * (float)msum;
    }
    return sum;
}

static float dot_f32(const void *wv, const void *av, uint64_t n)
{
    const float *w = wv, *a = av;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        acc0 = vfmaq_f32(acc0, vld1q_f32(w + i), vld1q_f32(a + i));
        acc1 = vfmaq_f32(acc1, vld1q_f32(w + i + 4), vld1q_f32(a + i + 4));
    }
    float tail = 0.0f;
    for (; i < n; i++)
        tail += w[i] * a[i];
    return vaddvq_f32(vaddq_f32(acc0, acc1)) + tail;
}

void gm_dot_fill_neon(gm_dot_fn t[GM_TYPE_COUNT])
{
    t[GM_TYPE_Q8_0] = dot_q8_0;
    t[GM_TYPE_Q4_K] = dot_q4_K;
    t[GM_TYPE_F32] = dot_f32;
}
