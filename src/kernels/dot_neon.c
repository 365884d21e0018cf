/* NEON (aarch64 Advanced SIMD) dot products; compiled only on aarch64 (src/kernels/CMakeLists.txt),
 * twice: as itself for the neon level (no dot-product extension needed), and included by
 * dot_neon_dotprod.c with GM_NEON_DOTPROD defined for the neondot level, where the 8-bit
 * products go through vdotq_s32 (one instruction per 16 products instead of three). Called when
 * dispatch.c has seen NEON (and the extension; see dot_impl.h). Every weight type of dot_ref.c
 * has a kernel here: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (Q8_0 activations); Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0
 * (Q8_K activations); F32, F16, BF16 (float32 activations).
 *
 * Same arithmetic as dot_ref.c: 8-bit products widened to 16 bits (vmull_s8/vmlal_s8), a few per
 * 16-bit lane only where that cannot overflow (|y| <= 127: the activation quantizers clamp to
 * [-127, 127]; at most two products of |w| <= 128, four of |w| <= 62, more of smaller weights),
 * then pairwise into 32 bits; exact integer sums per (sub-)block, scaled by the integer
 * sub-block scales in 32-bit lanes, and one float multiply-add per block (per term: scale and
 * minimum, grid and delta) into vector accumulators. Offsets of unsigned codes (TQ1_0, TQ2_0)
 * come out through the activation sums (bsums). Sign patterns (IQ2, IQ3) and the fifth bits of
 * Q5_0/Q5_1 become byte masks by vtst against each lane's bit; the 4-bit tables (IQ4, MXFP4) are
 * looked up by vqtbl1q. Blocks are read at any alignment through byte loads and memcpy, never
 * past the end of the row.
 * TODO(kernels): read the regrouped Q8_0 activation groups (GM_ACT_Q8_0_GROUPS) and add
 * multi-token kernels as the avx512 level does. */
#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/bytes.h"
#include "kernels/dot_impl.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static inline float h2f(const uint8_t *p)
{
    __fp16 h;
    memcpy(&h, p, sizeof h);
    return (float)h;
}

static inline int8x16_t ld_s8(const uint8_t *p)
{
    return vreinterpretq_s8_u8(vld1q_u8(p));
}

static inline int8x16_t as_s8(uint8x16_t v)
{
    return vreinterpretq_s8_u8(v);
}

#if defined(GM_NEON_DOTPROD)

/* The dot-product extension (vsdot): four adjacent products summed into each int32 lane, no
 * 16-bit intermediate. Every kernel below only sums a vector's 4 lanes or scales them all alike,
 * so which products share a lane does not matter to the integer block sums; the lanes' float
 * partial sums do differ from the widening form's (other products share a lane), so results
 * agree with the neon level's within the rounding budget, not bit for bit. */

/* acc + x*y for 16 signed bytes each: the 16 products summed into the 4 int32 lanes. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t y)
{
    return vdotq_s32(acc, x, y);
}

/* The 16 products of x and y in 4 int32 lanes. */
static inline int32x4_t prod16(int8x16_t x, int8x16_t y)
{
    return vdotq_s32(vdupq_n_s32(0), x, y);
}

/* The 32 products of x0, y0 and x1, y1 in 4 int32 lanes. */
static inline int32x4_t prod32(int8x16_t x0, int8x16_t y0, int8x16_t x1, int8x16_t y1)
{
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), x0, y0), x1, y1);
}

/* acc + the 48 products of three pairs. */
static inline int32x4_t dot48(int32x4_t acc, int8x16_t x0, int8x16_t y0, int8x16_t x1,
                              int8x16_t y1, int8x16_t x2, int8x16_t y2)
{
    return vdotq_s32(vdotq_s32(vdotq_s32(acc, x0, y0), x1, y1), x2, y2);
}

#else

/* 16 signed bytes times 16 signed bytes, pairwise into 8 int16 (two products per lane). */
static inline int16x8_t mul16(int8x16_t x, int8x16_t y)
{
    return vmlal_s8(vmull_s8(vget_low_s8(x), vget_low_s8(y)), vget_high_s8(x), vget_high_s8(y));
}

/* acc + x*y for 16 signed bytes each: the 16 products summed into the 4 int32 lanes. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t y)
{
    return vpadalq_s16(acc, mul16(x, y));
}

/* The 16 products of x and y in 4 int32 lanes. */
static inline int32x4_t prod16(int8x16_t x, int8x16_t y)
{
    return vpaddlq_s16(mul16(x, y));
}

/* The 32 products of x0, y0 and x1, y1 in 4 int32 lanes, four per int16 lane first: the callers
 * keep |x * y| small enough (the bound is stated at each call). */
static inline int32x4_t prod32(int8x16_t x0, int8x16_t y0, int8x16_t x1, int8x16_t y1)
{
    return vpaddlq_s16(vaddq_s16(mul16(x0, y0), mul16(x1, y1)));
}

/* acc + the 48 products of three pairs, six per int16 lane first (as prod32). */
static inline int32x4_t dot48(int32x4_t acc, int8x16_t x0, int8x16_t y0, int8x16_t x1,
                              int8x16_t y1, int8x16_t x2, int8x16_t y2)
{
    return vpadalq_s16(acc, vaddq_s16(vaddq_s16(mul16(x0, y0), mul16(x1, y1)), mul16(x2, y2)));
}

#endif

/* The 32 products of a 32-element block (weights as elements 0-15 and 16-31) with the 32
 * activation codes at y, in 4 int32 lanes. */
static inline int32x4_t dot32(int8x16_t w0, int8x16_t w1, const uint8_t *y)
{
    return dot16(prod16(w0, ld_s8(y)), w1, ld_s8(y + 16));
}

/* Byte j of the result is 0xff where bit j % 8 of s0 (j < 8) or s1 (j >= 8) is set, else 0. */
static inline uint8x16_t sign_mask(uint8_t s0, uint8_t s1)
{
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    return vtstq_u8(vcombine_u8(vdup_n_u8(s0), vdup_n_u8(s1)), vld1q_u8(bits));
}

/* The unsigned bytes g (at most 127) negated where m is 0xff: (g ^ m) - m. */
static inline int8x16_t apply_signs(uint8x16_t g, uint8x16_t m)
{
    return vsubq_s8(as_s8(veorq_u8(g, m)), as_s8(m));
}

/* ---- Q8_0 activations ------------------------------------------------------------------- */

#define Q80 sizeof(gm_block_q8_0)

static float dot_q8_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK8_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * Q80, *a0 = a + i * Q80;
        const int32x4_t s = dot32(ld_s8(w0 + 2), ld_s8(w0 + 18), a0 + 2);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), h2f(w0) * ld_f32(asc + 4 * i));
    }
    return vaddvq_f32(acc);
}

static float dot_q4_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK4_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const int8x16_t off = vdupq_n_s8(8);
    const size_t WB = sizeof(gm_block_q4_0);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const uint8x16_t q = vld1q_u8(w0 + 2);
        const int8x16_t lo = vsubq_s8(as_s8(vandq_u8(q, m4)), off);
        const int8x16_t hi = vsubq_s8(as_s8(vshrq_n_u8(q, 4)), off);
        const int32x4_t s = dot32(lo, hi, a0 + 2);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), h2f(w0) * ld_f32(asc + 4 * i));
    }
    return vaddvq_f32(acc);
}

/* 4-bit codes mapped through a 16-entry signed table (IQ4_NL, MXFP4, IQ4_XS): the 32 values of
 * 16 bytes of nibbles (low nibbles first) times the 32 activation codes at y. */
static inline int32x4_t dot_lut4(int8x16_t table, uint8x16_t q, const uint8_t *y)
{
    const int8x16_t lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f)));
    const int8x16_t hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
    return dot32(lo, hi, y);
}

static float dot_iq4_nl(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK4_NL;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const int8x16_t table = vld1q_s8(gm_kvalues_iq4nl);
    const size_t WB = sizeof(gm_block_iq4_nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const int32x4_t s = dot_lut4(table, vld1q_u8(w0 + 2), a0 + 2);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), h2f(w0) * ld_f32(asc + 4 * i));
    }
    return vaddvq_f32(acc);
}

static float dot_mxfp4(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_MXFP4;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const int8x16_t table = vld1q_s8(gm_kvalues_mxfp4);
    const size_t WB = sizeof(gm_block_mxfp4);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const int32x4_t s = dot_lut4(table, vld1q_u8(w0 + 1), a0 + 2);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s),
                          gm_e8m0_to_f32_half(w0[0]) * ld_f32(asc + 4 * i));
    }
    return vaddvq_f32(acc);
}

/* The 32 bits at p (a little-endian uint32) as 32 bytes, 0xff where the bit is set: bytes 0-15
 * in lo (bits 0-15), bytes 16-31 in hi. */
static inline void bits_to_bytes(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi)
{
    *lo = sign_mask(p[0], p[1]);
    *hi = sign_mask(p[2], p[3]);
}

/* The sum of 32 activation codes in 4 int32 lanes. */
static inline int32x4_t sum32(const uint8_t *y)
{
    return vpaddlq_s16(vpadalq_s8(vpaddlq_s8(ld_s8(y)), ld_s8(y + 16)));
}

static float dot_q5_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK5_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const uint8x16_t m4 = vdupq_n_u8(0x0f), hi4 = vdupq_n_u8(0xf0);
    const size_t WB = sizeof(gm_block_q5_0);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const uint8x16_t q = vld1q_u8(w0 + 6);
        uint8x16_t h0, h1;
        bits_to_bytes(w0 + 2, &h0, &h1);
        /* q | 0xf0 is q - 16 as a signed byte: set where the fifth bit is clear */
        const int8x16_t lo = as_s8(vorrq_u8(vandq_u8(q, m4), vbicq_u8(hi4, h0)));
        const int8x16_t hi = as_s8(vorrq_u8(vshrq_n_u8(q, 4), vbicq_u8(hi4, h1)));
        const int32x4_t s = dot32(lo, hi, a0 + 2);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), h2f(w0) * ld_f32(asc + 4 * i));
    }
    return vaddvq_f32(acc);
}

/* Q4_1 and Q5_1: x = d*q + m with unsigned q; the minimum term needs the block's activation
 * sum. */
static inline float dot_qx_1(const uint8_t *w, const uint8_t *a, uint64_t n, size_t block_bytes,
                             int five_bits)
{
    const uint64_t nb = n / 32;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const uint8x16_t m4 = vdupq_n_u8(0x0f), bit4 = vdupq_n_u8(0x10);
    float32x4_t acc = vdupq_n_f32(0.0f), acc_m = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * block_bytes, *a0 = a + i * Q80;
        const uint8x16_t q = vld1q_u8(w0 + block_bytes - 16);
        uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
        if (five_bits) {
            uint8x16_t h0, h1;
            bits_to_bytes(w0 + 4, &h0, &h1);
            lo = vorrq_u8(lo, vandq_u8(h0, bit4));
            hi = vorrq_u8(hi, vandq_u8(h1, bit4));
        }
        const int32x4_t s = dot32(as_s8(lo), as_s8(hi), a0 + 2);
        const float da = ld_f32(asc + 4 * i);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), h2f(w0) * da);
        acc_m = vmlaq_n_f32(acc_m, vcvtq_f32_s32(sum32(a0 + 2)), h2f(w0 + 2) * da);
    }
    return vaddvq_f32(vaddq_f32(acc, acc_m));
}

static float dot_q4_1(const void *w, const void *a, uint64_t n)
{
    return dot_qx_1(w, a, n, sizeof(gm_block_q4_1), 0);
}

static float dot_q5_1(const void *w, const void *a, uint64_t n)
{
    return dot_qx_1(w, a, n, sizeof(gm_block_q5_1), 1);
}

/* ---- Q8_K activations ------------------------------------------------------------------- */

#define Q8K sizeof(gm_block_q8_K)
#define Q8K_QS 4u      /* offsetof(gm_block_q8_K, qs) */
#define Q8K_BSUMS 260u /* offsetof(gm_block_q8_K, bsums) */

/* The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K or Q5_K block (see
 * gm_q4_K_scale_min). */
static inline void k_scales_mins(const uint8_t *packed, uint8_t out[16])
{
    uint32_t u[4];
    memcpy(u, packed, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins03 = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins03;
    u[0] &= 0x3f3f3f3fu;
    memcpy(out, u, 16);
}

/* sum over the 8 sub-blocks of 32 of mins[sb] * (bsums[2 sb] + bsums[2 sb + 1]). */
static inline int32_t k_min_sum(const uint8_t mins[8], const uint8_t *y)
{
    const int16x8_t b0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
    const int16x8_t b1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
    const int16x8_t pairs = vpaddq_s16(b0, b1); /* |.| <= 32 * 127 */
    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins)));
    return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(m), vget_low_s16(pairs)), m, pairs));
}

static float dot_q4_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float acc_m = 0.0f;
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q4_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        uint8_t sm[16];
        k_scales_mins(x + offsetof(gm_block_q4_K, scales), sm);
        acc_m += yd * h2f(x + offsetof(gm_block_q4_K, dmin)) * (float)k_min_sum(sm + 8, y);
        const uint8_t *q4 = x + offsetof(gm_block_q4_K, qs), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int j = 0; j < GM_QK_K / 64; j++) {
            const uint8x16_t qa = vld1q_u8(q4 + 32 * j), qb = vld1q_u8(q4 + 32 * j + 16);
            const uint8_t *y8 = q8 + 64 * j;
            /* four products of at most 15 * 127 per int16 lane */
            const int32x4_t lo =
                prod32(as_s8(vandq_u8(qa, m4)), ld_s8(y8), as_s8(vandq_u8(qb, m4)), ld_s8(y8 + 16));
            const int32x4_t hi = prod32(as_s8(vshrq_n_u8(qa, 4)), ld_s8(y8 + 32),
                                        as_s8(vshrq_n_u8(qb, 4)), ld_s8(y8 + 48));
            sumi = vmlaq_n_s32(sumi, lo, sm[2 * j]);
            sumi = vmlaq_n_s32(sumi, hi, sm[2 * j + 1]);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), yd * h2f(x + offsetof(gm_block_q4_K, d)));
    }
    return vaddvq_f32(acc) - acc_m;
}

static float dot_q5_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), b0 = vdupq_n_u8(0x01), b1 = vdupq_n_u8(0x02);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float acc_m = 0.0f;
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q5_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        uint8_t sm[16];
        k_scales_mins(x + offsetof(gm_block_q5_K, scales), sm);
        acc_m += yd * h2f(x + offsetof(gm_block_q5_K, dmin)) * (float)k_min_sum(sm + 8, y);
        const uint8_t *q5 = x + offsetof(gm_block_q5_K, qs), *q8 = y + Q8K_QS;
        /* the fifth bit of sub-block sb is bit sb of each qh byte: ha, hb hold qh >> 2j */
        uint8x16_t ha = vld1q_u8(x + offsetof(gm_block_q5_K, qh));
        uint8x16_t hb = vld1q_u8(x + offsetof(gm_block_q5_K, qh) + 16);
        int32x4_t sumi = vdupq_n_s32(0);
        for (int j = 0; j < GM_QK_K / 64; j++) {
            const uint8x16_t qa = vld1q_u8(q5 + 32 * j), qb = vld1q_u8(q5 + 32 * j + 16);
            const uint8x16_t la = vorrq_u8(vandq_u8(qa, m4), vshlq_n_u8(vandq_u8(ha, b0), 4));
            const uint8x16_t lb = vorrq_u8(vandq_u8(qb, m4), vshlq_n_u8(vandq_u8(hb, b0), 4));
            const uint8x16_t ua = vorrq_u8(vshrq_n_u8(qa, 4), vshlq_n_u8(vandq_u8(ha, b1), 3));
            const uint8x16_t ub = vorrq_u8(vshrq_n_u8(qb, 4), vshlq_n_u8(vandq_u8(hb, b1), 3));
            ha = vshrq_n_u8(ha, 2);
            hb = vshrq_n_u8(hb, 2);
            const uint8_t *y8 = q8 + 64 * j;
            /* four products of at most 31 * 127 per int16 lane */
            const int32x4_t lo = prod32(as_s8(la), ld_s8(y8), as_s8(lb), ld_s8(y8 + 16));
            const int32x4_t hi = prod32(as_s8(ua), ld_s8(y8 + 32), as_s8(ub), ld_s8(y8 + 48));
            sumi = vmlaq_n_s32(sumi, lo, sm[2 * j]);
            sumi = vmlaq_n_s32(sumi, hi, sm[2 * j + 1]);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), yd * h2f(x + offsetof(gm_block_q5_K, d)));
    }
    return vaddvq_f32(acc) - acc_m;
}

static float dot_q6_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30);
    const int8x16_t off = vdupq_n_s8(32);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q6_K), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_q6_K, d));
        const uint8_t *ql = x + offsetof(gm_block_q6_K, ql);
        const uint8_t *qh = x + offsetof(gm_block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(x + offsetof(gm_block_q6_K, scales));
        const uint8_t *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        /* element 128 j + 32 k + 16 h + l (group 8 j + 2 k + h): low 4 bits from byte
         * ql[64 j + 32 (k % 2) + 16 h + l] (nibble k / 2), high 2 from qh[32 j + 16 h + l] at
         * bit 2 k */
        for (int j = 0; j < GM_QK_K / 128; j++) {
            for (int h = 0; h < 2; h++) {
                const uint8x16_t l0 = vld1q_u8(ql + 64 * j + 16 * h);
                const uint8x16_t l1 = vld1q_u8(ql + 64 * j + 32 + 16 * h);
                const uint8x16_t hb = vld1q_u8(qh + 32 * j + 16 * h);
                int8x16_t v[4];
                v[0] = as_s8(vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30)));
                v[1] = as_s8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30)));
                v[2] = as_s8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30)));
                v[3] = as_s8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30)));
                for (int k = 0; k < 4; k++) {
                    const int g = 8 * j + 2 * k + h;
                    /* two products of at most 32 * 127 per int16 lane */
                    const int32x4_t p = prod16(vsubq_s8(v[k], off), ld_s8(q8 + 16 * g));
                    sumi = vmlaq_n_s32(sumi, p, sc[g]);
                }
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_q2_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m3 = vdupq_n_u8(0x03), m4 = vdupq_n_u8(0x0f);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float acc_m = 0.0f;
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q2_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const uint8x16_t msc = vld1q_u8(x + offsetof(gm_block_q2_K, scales));
        /* minimum term: sum over the 16 groups of (scales[g] >> 4) * bsums[g] */
        const uint8x16_t mins = vshrq_n_u8(msc, 4);
        const int16x8_t mn0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        const int16x8_t mn1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
        const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
        const int16x8_t bs1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
        int32x4_t ms = vmull_s16(vget_low_s16(mn0), vget_low_s16(bs0));
        ms = vmlal_high_s16(ms, mn0, bs0);
        ms = vmlal_s16(ms, vget_low_s16(mn1), vget_low_s16(bs1));
        ms = vmlal_high_s16(ms, mn1, bs1);
        acc_m += yd * h2f(x + offsetof(gm_block_q2_K, dmin)) * (float)vaddvq_s32(ms);

        uint8_t sc[16];
        vst1q_u8(sc, vandq_u8(msc, m4));
        const uint8_t *q2 = x + offsetof(gm_block_q2_K, qs), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        /* element 128 j + 32 k + l is bits 2k..2k+1 of byte 32 j + l; group 8 j + 2 k + l / 16 */
        for (int j = 0; j < GM_QK_K / 128; j++) {
            uint8x16_t b0 = vld1q_u8(q2 + 32 * j), b1 = vld1q_u8(q2 + 32 * j + 16);
            for (int k = 0; k < 4; k++) {
                const int g = 8 * j + 2 * k;
                const int32x4_t p0 = prod16(as_s8(vandq_u8(b0, m3)), ld_s8(q8 + 16 * g));
                const int32x4_t p1 = prod16(as_s8(vandq_u8(b1, m3)), ld_s8(q8 + 16 * g + 16));
                b0 = vshrq_n_u8(b0, 2);
                b1 = vshrq_n_u8(b1, 2);
                sumi = vmlaq_n_s32(sumi, p0, sc[g]);
                sumi = vmlaq_n_s32(sumi, p1, sc[g + 1]);
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), yd * h2f(x + offsetof(gm_block_q2_K, d)));
    }
    return vaddvq_f32(acc) - acc_m;
}

static float dot_q3_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m3 = vdupq_n_u8(0x03), one = vdupq_n_u8(0x01);
    const int8x16_t four = vdupq_n_s8(4);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q3_K), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_q3_K, d));
        /* the 16 six-bit scales as bytes (see gm_q3_K_scale), then minus 32 */
        uint32_t u[4];
        memcpy(u, x + offsetof(gm_block_q3_K, scales), 12);
        const uint32_t t = u[2];
        u[2] = ((u[0] >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
        u[3] = ((u[1] >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
        u[0] = (u[0] & 0x0f0f0f0fu) | (((t >> 0) & 0x03030303u) << 4);
        u[1] = (u[1] & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
        int8_t sc[16];
        vst1q_s8(sc, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(u)), vdupq_n_s8(32)));
        /* the high bit of element 128 j + 32 k + l is bit 4 j + k of hmask[l]: h0, h1 hold
         * hmask >> (4 j + k) */
        uint8x16_t h0 = vld1q_u8(x + offsetof(gm_block_q3_K, hmask));
        uint8x16_t h1 = vld1q_u8(x + offsetof(gm_block_q3_K, hmask) + 16);
        const uint8_t *q3 = x + offsetof(gm_block_q3_K, qs), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int j = 0; j < GM_QK_K / 128; j++) {
            uint8x16_t b0 = vld1q_u8(q3 + 32 * j), b1 = vld1q_u8(q3 + 32 * j + 16);
            for (int k = 0; k < 4; k++) {
                const int g = 8 * j + 2 * k;
                /* q - 4 + 4 h = (q | h << 2) - 4 */
                const int8x16_t v0 = vsubq_s8(
                    as_s8(vorrq_u8(vandq_u8(b0, m3), vshlq_n_u8(vandq_u8(h0, one), 2))), four);
                const int8x16_t v1 = vsubq_s8(
                    as_s8(vorrq_u8(vandq_u8(b1, m3), vshlq_n_u8(vandq_u8(h1, one), 2))), four);
                b0 = vshrq_n_u8(b0, 2);
                b1 = vshrq_n_u8(b1, 2);
                h0 = vshrq_n_u8(h0, 1);
                h1 = vshrq_n_u8(h1, 1);
                const int32x4_t p0 = prod16(v0, ld_s8(q8 + 16 * g));
                const int32x4_t p1 = prod16(v1, ld_s8(q8 + 16 * g + 16));
                sumi = vmlaq_n_s32(sumi, p0, sc[g]);
                sumi = vmlaq_n_s32(sumi, p1, sc[g + 1]);
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_iq4_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const int8x16_t table = vld1q_s8(gm_kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq4_xs), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_iq4_xs, d));
        unsigned sh = ld_u16(x + offsetof(gm_block_iq4_xs, scales_h));
        const uint8_t *sl = x + offsetof(gm_block_iq4_xs, scales_l);
        const uint8_t *qs = x + offsetof(gm_block_iq4_xs, qs), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int ls = (int)(((sl[ib / 2] >> (4 * (ib % 2))) & 0x0f) | ((sh & 3) << 4)) - 32;
            sh >>= 2;
            const int32x4_t s = dot_lut4(table, vld1q_u8(qs + 16 * ib), q8 + 32 * ib);
            sumi = vmlaq_n_s32(sumi, s, ls);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_iq2_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_xxs), *y = a + i * Q8K;
        /* block scale d * (2s + 1) / 8 */
        const float d = 0.125f * ld_f32(y) * h2f(x + offsetof(gm_block_iq2_xxs, d));
        const uint8_t *q2 = x + offsetof(gm_block_iq2_xxs, qs), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint8_t *g = q2 + 8 * ib; /* 4 grid indices, then signs and scale */
            const uint32_t aux = ld_u32(g + 4);
            const uint8x16_t g01 =
                vcombine_u8(vld1_u8(gm_iq2xxs_grid[g[0]]), vld1_u8(gm_iq2xxs_grid[g[1]]));
            const uint8x16_t g23 =
                vcombine_u8(vld1_u8(gm_iq2xxs_grid[g[2]]), vld1_u8(gm_iq2xxs_grid[g[3]]));
            const uint8x16_t s01 =
                sign_mask(gm_ksigns_iq2xs[aux & 127], gm_ksigns_iq2xs[(aux >> 7) & 127]);
            const uint8x16_t s23 =
                sign_mask(gm_ksigns_iq2xs[(aux >> 14) & 127], gm_ksigns_iq2xs[(aux >> 21) & 127]);
            /* four products of at most 43 * 127 per int16 lane */
            const int32x4_t p = prod32(apply_signs(g01, s01), ld_s8(q8 + 32 * ib),
                                       apply_signs(g23, s23), ld_s8(q8 + 32 * ib + 16));
            sumi = vmlaq_n_s32(sumi, p, (int32_t)(2 * (aux >> 28) + 1));
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_iq3_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq3_xxs), *y = a + i * Q8K;
        /* block scale d * (2s + 1) / 4 */
        const float d = 0.25f * ld_f32(y) * h2f(x + offsetof(gm_block_iq3_xxs, d));
        const uint8_t *q3 = x + offsetof(gm_block_iq3_xxs, qs);
        const uint8_t *gas = q3 + GM_QK_K / 4, *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint8_t *g = q3 + 8 * ib;
            uint32_t gr[8];
            for (int l = 0; l < 8; l++)
                memcpy(&gr[l], gm_iq3xxs_grid[g[l]], 4);
            const uint32_t aux = ld_u32(gas + 4 * ib);
            const uint8x16_t s01 =
                sign_mask(gm_ksigns_iq2xs[aux & 127], gm_ksigns_iq2xs[(aux >> 7) & 127]);
            const uint8x16_t s23 =
                sign_mask(gm_ksigns_iq2xs[(aux >> 14) & 127], gm_ksigns_iq2xs[(aux >> 21) & 127]);
            const uint8x16_t g01 = vreinterpretq_u8_u32(vld1q_u32(gr));
            const uint8x16_t g23 = vreinterpretq_u8_u32(vld1q_u32(gr + 4));
            /* four products of at most 62 * 127 per int16 lane */
            const int32x4_t p = prod32(apply_signs(g01, s01), ld_s8(q8 + 32 * ib),
                                       apply_signs(g23, s23), ld_s8(q8 + 32 * ib + 16));
            sumi = vmlaq_n_s32(sumi, p, (int32_t)(2 * (aux >> 28) + 1));
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

/* 16 bytes: the 8-byte grid rows r0 and r1. */
static inline uint8x16_t rows2(const uint8_t *r0, const uint8_t *r1)
{
    return vcombine_u8(vld1_u8(r0), vld1_u8(r1));
}

static float dot_iq2_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_xs), *y = a + i * Q8K;
        const float d = 0.125f * ld_f32(y) * h2f(x + offsetof(gm_block_iq2_xs, d));
        const uint8_t *qs = x + offsetof(gm_block_iq2_xs, qs);
        const uint8_t *sc = x + offsetof(gm_block_iq2_xs, scales), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            uint16_t q[4];
            memcpy(q, qs + 8 * ib, 8);
            for (int h = 0; h < 2; h++) { /* 16 elements per 4-bit scale */
                const uint16_t q0 = q[2 * h], q1 = q[2 * h + 1];
                const uint8x16_t g = rows2(gm_iq2xs_grid[q0 & 511], gm_iq2xs_grid[q1 & 511]);
                const uint8x16_t m = sign_mask(gm_ksigns_iq2xs[q0 >> 9], gm_ksigns_iq2xs[q1 >> 9]);
                const int32x4_t p = prod16(apply_signs(g, m), ld_s8(q8 + 32 * ib + 16 * h));
                sumi = vmlaq_n_s32(sumi, p, 2 * ((sc[ib] >> (4 * h)) & 0x0f) + 1);
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_iq2_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_s), *y = a + i * Q8K;
        const float d = 0.125f * ld_f32(y) * h2f(x + offsetof(gm_block_iq2_s, d));
        const uint8_t *qs = x + offsetof(gm_block_iq2_s, qs);
        const uint8_t *signs = qs + GM_QK_K / 8;
        const uint8_t *qh = x + offsetof(gm_block_iq2_s, qh);
        const uint8_t *sc = x + offsetof(gm_block_iq2_s, scales), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                const int l = 2 * h;
                const uint8x16_t g =
                    rows2(gm_iq2s_grid[qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8)],
                          gm_iq2s_grid[qs[4 * ib + l + 1] | (((qh[ib] >> (2 * l + 2)) & 3) << 8)]);
                const uint8x16_t m = sign_mask(signs[4 * ib + l], signs[4 * ib + l + 1]);
                const int32x4_t p = prod16(apply_signs(g, m), ld_s8(q8 + 32 * ib + 16 * h));
                sumi = vmlaq_n_s32(sumi, p, 2 * ((sc[ib] >> (4 * h)) & 0x0f) + 1);
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_iq3_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq3_s), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_iq3_s, d));
        const uint8_t *qs = x + offsetof(gm_block_iq3_s, qs);
        const uint8_t *qh = x + offsetof(gm_block_iq3_s, qh);
        const uint8_t *signs = x + offsetof(gm_block_iq3_s, signs);
        const uint8_t *sc = x + offsetof(gm_block_iq3_s, scales), *q8 = y + Q8K_QS;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            uint32_t gr[8];
            for (int k = 0; k < 8; k++)
                memcpy(&gr[k], gm_iq3s_grid[qs[8 * ib + k] | (((qh[ib] >> k) & 1) << 8)], 4);
            const uint8x16_t m01 = sign_mask(signs[4 * ib], signs[4 * ib + 1]);
            const uint8x16_t m23 = sign_mask(signs[4 * ib + 2], signs[4 * ib + 3]);
            const uint8x16_t g01 = vreinterpretq_u8_u32(vld1q_u32(gr));
            const uint8x16_t g23 = vreinterpretq_u8_u32(vld1q_u32(gr + 4));
            /* four products of at most 15 * 127 per int16 lane */
            const int32x4_t p = prod32(apply_signs(g01, m01), ld_s8(q8 + 32 * ib),
                                       apply_signs(g23, m23), ld_s8(q8 + 32 * ib + 16));
            const int ls = 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 0x0f) + 1;
            sumi = vmlaq_n_s32(sumi, p, ls);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

/* 16 bytes: the 8-byte IQ1 grid rows r0 and r1 (values -1, 0, 1). */
static inline int8x16_t rows2_s8(const int8_t *r0, const int8_t *r1)
{
    return vcombine_s8(vld1_s8(r0), vld1_s8(r1));
}

/* IQ1 grid rows hold -1, 0, 1; the delta part is the scaled activation sum (see dot_ref.c). */
static float dot_iq1_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float acc_d = 0.0f;
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq1_s), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_iq1_s, d));
        const uint8_t *qs = x + offsetof(gm_block_iq1_s, qs);
        const uint8_t *qhp = x + offsetof(gm_block_iq1_s, qh), *q8 = y + Q8K_QS;
        int16_t bsums[16];
        memcpy(bsums, y + Q8K_BSUMS, sizeof bsums);
        int32x4_t sumi = vdupq_n_s32(0);
        int32_t sumd = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const unsigned qh = ld_u16(qhp + 2 * ib);
            const int8x16_t g01 =
                rows2_s8(gm_iq1s_grid[qs[4 * ib] | ((qh & 7) << 8)],
                         gm_iq1s_grid[qs[4 * ib + 1] | (((qh >> 3) & 7) << 8)]);
            const int8x16_t g23 =
                rows2_s8(gm_iq1s_grid[qs[4 * ib + 2] | (((qh >> 6) & 7) << 8)],
                         gm_iq1s_grid[qs[4 * ib + 3] | (((qh >> 9) & 7) << 8)]);
            const int ls = 2 * ((qh >> 12) & 7) + 1;
            const int32x4_t p = prod32(g01, ld_s8(q8 + 32 * ib), g23, ld_s8(q8 + 32 * ib + 16));
            sumi = vmlaq_n_s32(sumi, p, ls);
            const int32_t t = ls * (bsums[2 * ib] + bsums[2 * ib + 1]);
            sumd += (qh & 0x8000) ? -t : t;
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
        acc_d += d * (float)sumd;
    }
    return vaddvq_f32(acc) + GM_IQ1S_DELTA * acc_d;
}

static float dot_iq1_m(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq1_m), *y = a + i * Q8K;
        const uint8_t *qs = x + offsetof(gm_block_iq1_m, qs);
        const uint8_t *qhp = x + offsetof(gm_block_iq1_m, qh), *q8 = y + Q8K_QS;
        uint16_t sc[4];
        memcpy(sc, x + offsetof(gm_block_iq1_m, scales), 8);
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                          ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        uint8_t dh[2];
        memcpy(dh, &dbits, 2);
        const float d = ld_f32(y) * h2f(dh);
        int32x4_t sumi = vdupq_n_s32(0), sumd = vdupq_n_s32(0);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int shift = 6 * (ib % 2);
            for (int h = 0; h < 2; h++) { /* 16 elements: two grid rows, one scale */
                const uint8_t qh = qhp[2 * ib + h];
                const int8x16_t g =
                    rows2_s8(gm_iq1s_grid[qs[4 * ib + 2 * h] | ((qh & 7) << 8)],
                             gm_iq1s_grid[qs[4 * ib + 2 * h + 1] | (((qh >> 4) & 7) << 8)]);
                const int ls = 2 * ((sc[ib / 2] >> (shift + 3 * h)) & 7) + 1;
                const int8x16_t y8 = ld_s8(q8 + 32 * ib + 16 * h);
                /* the delta's sign per row of 8: bit 3 of each nibble of qh */
                const uint8x16_t m = vcombine_u8(vdup_n_u8((qh & 0x08) ? 0xff : 0),
                                                 vdup_n_u8((qh & 0x80) ? 0xff : 0));
                const int8x16_t ys = vsubq_s8(veorq_s8(y8, as_s8(m)), as_s8(m));
                sumi = vmlaq_n_s32(sumi, prod16(g, y8), ls);
                sumd = vmlaq_n_s32(sumd, vpaddlq_s16(vpaddlq_s8(ys)), ls);
            }
        }
        const float32x4_t t =
            vmlaq_n_f32(vcvtq_f32_s32(sumi), vcvtq_f32_s32(sumd), GM_IQ1M_DELTA);
        acc = vmlaq_n_f32(acc, t, d);
    }
    return vaddvq_f32(acc);
}

/* The TQ1_0 trit of each byte q already multiplied by its power of 3: (q * 3) >> 8. */
static inline int8x16_t tq1_trits(uint8x16_t q)
{
    const uint8x8_t lo = vshrn_n_u16(vmull_u8(vget_low_u8(q), vdup_n_u8(3)), 8);
    return as_s8(vshrn_high_n_u16(lo, vmull_high_u8(q, vdupq_n_u8(3)), 8));
}

static float dot_tq1_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    /* qh byte k % 4 times 3^(k / 4) for the last 16 elements (element 240 + 4 t + m is trit t
     * of qh[m]) */
    static const uint8_t pow3_qh[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_tq1_0), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_tq1_0, d));
        const uint8_t *qs = x + offsetof(gm_block_tq1_0, qs), *q8 = y + Q8K_QS;
        const uint8x16_t b0 = vld1q_u8(qs), b1 = vld1q_u8(qs + 16), b2 = vld1q_u8(qs + 32);
        /* codes are t - 1: take the activation sum (from bsums) out once */
        const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
        const int16x8_t bs1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
        int32x4_t sumi = vnegq_s32(vpadalq_s16(vpaddlq_s16(bs0), bs1));
        /* products of trits (0..2) and codes: six per int16 lane (dot48), at most 2 * 127 * 6 */
        for (int t = 0; t < 5; t++) {
            const uint8x16_t p3 = vdupq_n_u8(pow3[t]);
            sumi = dot48(sumi, tq1_trits(vmulq_u8(b0, p3)), ld_s8(q8 + 32 * t),
                         tq1_trits(vmulq_u8(b1, p3)), ld_s8(q8 + 32 * t + 16),
                         tq1_trits(vmulq_u8(b2, p3)), ld_s8(q8 + 160 + 16 * t));
        }
        uint8_t qh4[16];
        for (int k = 0; k < 16; k++)
            qh4[k] = x[offsetof(gm_block_tq1_0, qh) + k % 4];
        const uint8x16_t bh = vmulq_u8(vld1q_u8(qh4), vld1q_u8(pow3_qh));
        sumi = dot16(sumi, tq1_trits(bh), ld_s8(q8 + 240));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

static float dot_tq2_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_tq2_0), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(x + offsetof(gm_block_tq2_0, d));
        const uint8_t *q2 = x + offsetof(gm_block_tq2_0, qs), *q8 = y + Q8K_QS;
        /* codes are q - 1: take the activation sum (from bsums) out once */
        const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
        const int16x8_t bs1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
        int32x4_t sumi = vnegq_s32(vpadalq_s16(vpaddlq_s16(bs0), bs1));
        /* element 128 c + 32 s + m is bits 2s..2s+1 of byte 32 c + m */
        for (int c = 0; c < 2; c++) {
            uint8x16_t b0 = vld1q_u8(q2 + 32 * c), b1 = vld1q_u8(q2 + 32 * c + 16);
            for (int s = 0; s < 4; s++) {
                /* four products of at most 3 * 127 per int16 lane */
                const int32x4_t p =
                    prod32(as_s8(vandq_u8(b0, m3)), ld_s8(q8 + 128 * c + 32 * s),
                           as_s8(vandq_u8(b1, m3)), ld_s8(q8 + 128 * c + 32 * s + 16));
                b0 = vshrq_n_u8(b0, 2);
                b1 = vshrq_n_u8(b1, 2);
                sumi = vaddq_s32(sumi, p);
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc);
}

/* ---- float weights times float32 activations -------------------------------------------- */

static inline float32x4_t ld4_f32(const uint8_t *p)
{
    return vreinterpretq_f32_u8(vld1q_u8(p));
}

/* Four accumulators of 4 lanes, 16 elements a step, then steps of 4; the tail (n % 4) is
 * summed in scalar float. LOAD8 gives elements 0-3 and 4-7 of the 8 weights at p. */
#define FLOAT_DOT(name, LOAD8, LOAD1, ESIZE)                                                   \
    static float name(const void *wv, const void *av, uint64_t n)                            \
    {                                                                                          \
        const uint8_t *w = wv, *a = av;                                                        \
        float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);                        \
        float32x4_t acc2 = vdupq_n_f32(0.0f), acc3 = vdupq_n_f32(0.0f);                        \
        float32x4_t x0, x1, x2, x3;                                                            \
        uint64_t i = 0;                                                                        \
        for (; i + 16 <= n; i += 16) {                                                         \
            LOAD8(w + i * ESIZE, &x0, &x1);                                                    \
            LOAD8(w + (i + 8) * ESIZE, &x2, &x3);                                              \
            acc0 = vfmaq_f32(acc0, x0, ld4_f32(a + 4 * i));                                    \
            acc1 = vfmaq_f32(acc1, x1, ld4_f32(a + 4 * (i + 4)));                              \
            acc2 = vfmaq_f32(acc2, x2, ld4_f32(a + 4 * (i + 8)));                              \
            acc3 = vfmaq_f32(acc3, x3, ld4_f32(a + 4 * (i + 12)));                             \
        }                                                                                      \
        for (; i + 8 <= n; i += 8) {                                                           \
            LOAD8(w + i * ESIZE, &x0, &x1);                                                    \
            acc0 = vfmaq_f32(acc0, x0, ld4_f32(a + 4 * i));                                    \
            acc1 = vfmaq_f32(acc1, x1, ld4_f32(a + 4 * (i + 4)));                              \
        }                                                                                      \
        float tail = 0.0f;                                                                     \
        for (; i < n; i++)                                                                     \
            tail += LOAD1(w + i * ESIZE) * ld_f32(a + 4 * i);                                  \
        return vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3))) + tail;     \
    }

static inline void load8_f32(const uint8_t *p, float32x4_t *lo, float32x4_t *hi)
{
    *lo = ld4_f32(p);
    *hi = ld4_f32(p + 16);
}

static inline void load8_f16(const uint8_t *p, float32x4_t *lo, float32x4_t *hi)
{
    const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(p));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}

static inline void load8_bf16(const uint8_t *p, float32x4_t *lo, float32x4_t *hi)
{
    const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(p));
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

static inline float load1_bf16(const uint8_t *p)
{
    return gm_bf16_to_f32(ld_u16(p));
}

FLOAT_DOT(dot_f32, load8_f32, ld_f32, 4)
FLOAT_DOT(dot_f16, load8_f16, h2f, 2)
FLOAT_DOT(dot_bf16, load8_bf16, load1_bf16, 2)

/* ---- table ------------------------------------------------------------------------------- */

#if defined(GM_NEON_DOTPROD)
void gm_dot_fill_neondot(gm_dot_fn t[GM_TYPE_COUNT])
#else
void gm_dot_fill_neon(gm_dot_fn t[GM_TYPE_COUNT])
#endif
{
    t[GM_TYPE_F32] = dot_f32;
    t[GM_TYPE_F16] = dot_f16;
    t[GM_TYPE_BF16] = dot_bf16;
    t[GM_TYPE_Q8_0] = dot_q8_0;
    t[GM_TYPE_Q4_0] = dot_q4_0;
    t[GM_TYPE_IQ4_NL] = dot_iq4_nl;
    t[GM_TYPE_MXFP4] = dot_mxfp4;
    t[GM_TYPE_Q2_K] = dot_q2_K;
    t[GM_TYPE_Q3_K] = dot_q3_K;
    t[GM_TYPE_Q4_K] = dot_q4_K;
    t[GM_TYPE_Q5_K] = dot_q5_K;
    t[GM_TYPE_Q6_K] = dot_q6_K;
    t[GM_TYPE_IQ4_XS] = dot_iq4_xs;
    t[GM_TYPE_IQ2_XXS] = dot_iq2_xxs;
    t[GM_TYPE_IQ3_XXS] = dot_iq3_xxs;
    t[GM_TYPE_Q4_1] = dot_q4_1;
    t[GM_TYPE_Q5_0] = dot_q5_0;
    t[GM_TYPE_Q5_1] = dot_q5_1;
    t[GM_TYPE_IQ2_XS] = dot_iq2_xs;
    t[GM_TYPE_IQ2_S] = dot_iq2_s;
    t[GM_TYPE_IQ3_S] = dot_iq3_s;
    t[GM_TYPE_IQ1_S] = dot_iq1_s;
    t[GM_TYPE_IQ1_M] = dot_iq1_m;
    t[GM_TYPE_TQ1_0] = dot_tq1_0;
    t[GM_TYPE_TQ2_0] = dot_tq2_0;
}
