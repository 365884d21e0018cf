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
 *
 * Prefill: every quantized type also has a multi-token kernel (kernels.h: gm_dot_multi_fn,
 * GM_DOT_MULTI tokens against one weight row). Both kernels of a type are one row driver
 * (NAME_rows, see ROW_KERNELS): per block the weight side (codes, signs, grid rows, scales) is
 * unpacked into registers once, then every token runs the same products and float operations in
 * the same order, so each token's result equals the single-token kernel's bit for bit, at both
 * levels.
 * TODO(kernels): read the regrouped Q8_0 activation groups (GM_ACT_Q8_0_GROUPS) as the avx512
 * level does; measure the multi-token kernels on an ARM machine (none has been timed yet). */
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

/* ---- one token or several ---------------------------------------------------------------- */

/* Every quantized type's kernel is a row driver NAME_rows(w, a, a_stride, n, n_tok, out) for
 * n_tok (1 or GM_DOT_MULTI, a constant once inlined) prepared activation rows a + t * a_stride
 * against one weight row w: each block's weight side is unpacked once, then every token runs
 * the same products and the same float operations in the same order. The single-token kernel
 * (gm_dot_fn) and the multi-token one (kernels.h: gm_dot_multi_fn) are that driver with 1 and
 * with GM_DOT_MULTI tokens, so each token's result of the latter equals the former's bit for
 * bit. */
#define ROW_KERNELS(name) GM_ROW_KERNELS(, dot_##name, dot_multi_##name, name##_rows)

/* For the row drivers: inlined into both kernels, so n_tok is a constant there, the token loops
 * unroll and the per-token accumulators stay in registers (and the unpack or block function a
 * driver takes becomes a direct, inlined call). */
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ---- Q8_0 activations ------------------------------------------------------------------- */

#define Q80 sizeof(gm_block_q8_0)

/* The weight side of one 32-element block with Q8_0 activations: the values of elements 0-15
 * and 16-31, the scale, and for Q4_1 and Q5_1 (x = d*q + m) the minimum. */
typedef struct q80_w {
    int8x16_t lo, hi;
    float d, m;
} q80_w;

typedef q80_w (*q80_unpack_fn)(const uint8_t *x);

/* The sum of 32 activation codes in 4 int32 lanes. */
static inline int32x4_t sum32(const uint8_t *y)
{
    return vpaddlq_s16(vpadalq_s8(vpaddlq_s8(ld_s8(y)), ld_s8(y + 16)));
}

/* n_tok prepared Q8_0 activation rows against one row of 32-element blocks of block_bytes,
 * each unpacked once by unpack: per block and token the 32 products, one float multiply-add by
 * the weight scale times the activation scale (the float copies after the blocks) and, with
 * with_min, the minimum times the block's activation sum into a second accumulator. */
static ALWAYS_INLINE void q80_rows(const uint8_t *w, const uint8_t *a, uint64_t a_stride,
                                   uint64_t n, int n_tok, size_t block_bytes, int with_min,
                                   q80_unpack_fn unpack, float *out)
{
    const uint64_t nb = n / 32;
    const uint8_t *asc[GM_DOT_MULTI];
    float32x4_t acc[GM_DOT_MULTI], acc_m[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++) {
        asc[t] = GM_ACT_Q8_0_SCALES(a + t * a_stride, n);
        acc[t] = acc_m[t] = vdupq_n_f32(0.0f);
    }
    for (uint64_t i = 0; i < nb; i++) {
        const q80_w v = unpack(w + i * block_bytes);
        for (int t = 0; t < n_tok; t++) {
            const uint8_t *y = a + t * a_stride + i * Q80 + 2;
            const float da = ld_f32(asc[t] + 4 * i);
            acc[t] = vmlaq_n_f32(acc[t], vcvtq_f32_s32(dot32(v.lo, v.hi, y)), v.d * da);
            if (with_min)
                acc_m[t] = vmlaq_n_f32(acc_m[t], vcvtq_f32_s32(sum32(y)), v.m * da);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = with_min ? vaddvq_f32(vaddq_f32(acc[t], acc_m[t])) : vaddvq_f32(acc[t]);
}

static inline q80_w q8_0_unpack(const uint8_t *x)
{
    return (q80_w){ld_s8(x + 2), ld_s8(x + 18), h2f(x), 0.0f};
}

static inline q80_w q4_0_unpack(const uint8_t *x)
{
    const uint8x16_t q = vld1q_u8(x + 2);
    const int8x16_t off = vdupq_n_s8(8);
    return (q80_w){vsubq_s8(as_s8(vandq_u8(q, vdupq_n_u8(0x0f))), off),
                   vsubq_s8(as_s8(vshrq_n_u8(q, 4)), off), h2f(x), 0.0f};
}

/* 4-bit codes mapped through a 16-entry signed table (IQ4_NL, MXFP4, IQ4_XS): the values of 16
 * bytes of nibbles, the low nibbles (elements 0-15) into *lo, the high ones into *hi. */
static inline void lut4(int8x16_t table, uint8x16_t q, int8x16_t *lo, int8x16_t *hi)
{
    *lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f)));
    *hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
}

static inline q80_w iq4_nl_unpack(const uint8_t *x)
{
    q80_w v = {.d = h2f(x), .m = 0.0f};
    lut4(vld1q_s8(gm_kvalues_iq4nl), vld1q_u8(x + 2), &v.lo, &v.hi);
    return v;
}

static inline q80_w mxfp4_unpack(const uint8_t *x)
{
    q80_w v = {.d = gm_e8m0_to_f32_half(x[0]), .m = 0.0f};
    lut4(vld1q_s8(gm_kvalues_mxfp4), vld1q_u8(x + 1), &v.lo, &v.hi);
    return v;
}

/* The 32 bits at p (a little-endian uint32) as 32 bytes, 0xff where the bit is set: bytes 0-15
 * in lo (bits 0-15), bytes 16-31 in hi. */
static inline void bits_to_bytes(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi)
{
    *lo = sign_mask(p[0], p[1]);
    *hi = sign_mask(p[2], p[3]);
}

static inline q80_w q5_0_unpack(const uint8_t *x)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0f), hi4 = vdupq_n_u8(0xf0);
    const uint8x16_t q = vld1q_u8(x + 6);
    uint8x16_t h0, h1;
    bits_to_bytes(x + 2, &h0, &h1);
    /* q | 0xf0 is q - 16 as a signed byte: set where the fifth bit is clear */
    return (q80_w){as_s8(vorrq_u8(vandq_u8(q, m4), vbicq_u8(hi4, h0))),
                   as_s8(vorrq_u8(vshrq_n_u8(q, 4), vbicq_u8(hi4, h1))), h2f(x), 0.0f};
}

/* Q4_1 and Q5_1 (five_bits: the fifth bits after d and m): unsigned codes, d and m at 0, 2. */
static inline q80_w qx_1_unpack(const uint8_t *x, size_t block_bytes, int five_bits)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0f), bit4 = vdupq_n_u8(0x10);
    const uint8x16_t q = vld1q_u8(x + block_bytes - 16);
    uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
    if (five_bits) {
        uint8x16_t h0, h1;
        bits_to_bytes(x + 4, &h0, &h1);
        lo = vorrq_u8(lo, vandq_u8(h0, bit4));
        hi = vorrq_u8(hi, vandq_u8(h1, bit4));
    }
    return (q80_w){as_s8(lo), as_s8(hi), h2f(x), h2f(x + 2)};
}

static inline q80_w q4_1_unpack(const uint8_t *x)
{
    return qx_1_unpack(x, sizeof(gm_block_q4_1), 0);
}

static inline q80_w q5_1_unpack(const uint8_t *x)
{
    return qx_1_unpack(x, sizeof(gm_block_q5_1), 1);
}

#define Q80_ROWS(name, with_min)                                                               \
    static ALWAYS_INLINE void name##_rows(const void *w, const void *a, uint64_t a_stride,     \
                                          uint64_t n, int n_tok, float *out)                   \
    {                                                                                          \
        q80_rows(w, a, a_stride, n, n_tok, sizeof(gm_block_##name), with_min, name##_unpack,   \
                 out);                                                                         \
    }                                                                                          \
    ROW_KERNELS(name)

Q80_ROWS(q8_0, 0)
Q80_ROWS(q4_0, 0)
Q80_ROWS(iq4_nl, 0)
Q80_ROWS(mxfp4, 0)
Q80_ROWS(q5_0, 0)
Q80_ROWS(q4_1, 1)
Q80_ROWS(q5_1, 1)

/* ---- Q8_K activations ------------------------------------------------------------------- */

#define Q8K sizeof(gm_block_q8_K)
#define Q8K_QS 4u      /* offsetof(gm_block_q8_K, qs) */
#define Q8K_BSUMS 260u /* offsetof(gm_block_q8_K, bsums) */

/* The integer sums of one super-block x against the Q8_K activation blocks y[t] of n_tok
 * tokens: the scaled code products added into sumi[t] (zero on entry) and, for the types with a
 * minimum term, the minimums times the activation sums stored in msum[t]. The weight side is
 * unpacked once for all the tokens. */
typedef void (*k_block_fn)(const uint8_t *x, const uint8_t *const *y, int n_tok, int32x4_t *sumi,
                           int32_t *msum);

/* n_tok prepared Q8_K activation rows against one row of super-blocks of block_bytes, their
 * sums by block: per super-block and token one float multiply-add of sumi by dscale times the
 * activation scale times the f16 weight scale at d_off; with with_min, the activation scale
 * times the f16 minimum scale at dmin_off times msum summed in float and subtracted at the
 * end. */
static ALWAYS_INLINE void k_rows(const uint8_t *w, const uint8_t *a, uint64_t a_stride,
                                 uint64_t n, int n_tok, size_t block_bytes, size_t d_off,
                                 float dscale, int with_min, size_t dmin_off, k_block_fn block,
                                 float *out)
{
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc[GM_DOT_MULTI];
    float acc_m[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++) {
        acc[t] = vdupq_n_f32(0.0f);
        acc_m[t] = 0.0f;
    }
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * block_bytes;
        const uint8_t *y[GM_DOT_MULTI];
        int32x4_t sumi[GM_DOT_MULTI];
        int32_t msum[GM_DOT_MULTI];
        for (int t = 0; t < n_tok; t++) {
            y[t] = a + t * a_stride + i * Q8K;
            sumi[t] = vdupq_n_s32(0);
            msum[t] = 0;
        }
        block(x, y, n_tok, sumi, msum);
        const float wd = h2f(x + d_off), wmin = with_min ? h2f(x + dmin_off) : 0.0f;
        for (int t = 0; t < n_tok; t++) {
            const float yd = ld_f32(y[t]);
            if (with_min)
                acc_m[t] += yd * wmin * (float)msum[t];
            acc[t] = vmlaq_n_f32(acc[t], vcvtq_f32_s32(sumi[t]), dscale * yd * wd);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = with_min ? vaddvq_f32(acc[t]) - acc_m[t] : vaddvq_f32(acc[t]);
}

/* The row driver NAME_rows of a type's k_block_fn NAME_block (see k_rows), and its kernels. */
#define K_ROWS(name, dscale, with_min, dmin_off)                                               \
    static ALWAYS_INLINE void name##_rows(const void *w, const void *a, uint64_t a_stride,     \
                                          uint64_t n, int n_tok, float *out)                   \
    {                                                                                          \
        k_rows(w, a, a_stride, n, n_tok, sizeof(gm_block_##name), offsetof(gm_block_##name, d), \
               dscale, with_min, dmin_off, name##_block, out);                                 \
    }                                                                                          \
    ROW_KERNELS(name)

/* sumi[t] + ls times the 16 products of w with token t's codes at y[t] + off, for t < n_tok. */
static inline void tok_prod16(int8x16_t w, int32_t ls, const uint8_t *const *y, size_t off,
                              int n_tok, int32x4_t *sumi)
{
    for (int t = 0; t < n_tok; t++)
        sumi[t] = vmlaq_n_s32(sumi[t], prod16(w, ld_s8(y[t] + off)), ls);
}

/* The same for the 32 products of w0, w1 with the codes at y[t] + off, four per int16 lane
 * (prod32: the callers state the bound). */
static inline void tok_prod32(int8x16_t w0, int8x16_t w1, int32_t ls, const uint8_t *const *y,
                              size_t off, int n_tok, int32x4_t *sumi)
{
    for (int t = 0; t < n_tok; t++) {
        const uint8_t *q8 = y[t] + off;
        sumi[t] = vmlaq_n_s32(sumi[t], prod32(w0, ld_s8(q8), w1, ld_s8(q8 + 16)), ls);
    }
}

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

/* sum over the 8 sub-blocks of 32 of m[sb] * (bsums[2 sb] + bsums[2 sb + 1]) of the activation
 * block y, |m| <= 63 (the Q4_K and Q5_K mins, the signed IQ1_S delta scales). */
static inline int32_t k_min_sum(int16x8_t m, const uint8_t *y)
{
    const int16x8_t b0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
    const int16x8_t b1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
    const int16x8_t pairs = vpaddq_s16(b0, b1); /* |.| <= 32 * 127 */
    return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(m), vget_low_s16(pairs)), m, pairs));
}

/* Q4_K and Q5_K (five: the fifth bits from qh): the scales and mins unpacked once; per pair of
 * sub-blocks j the 64 codes once, then their products with every token's codes. */
static ALWAYS_INLINE void k45_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                                    int32x4_t *sumi, int32_t *msum, size_t scales_off,
                                    size_t qs_off, int five, size_t qh_off)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0f), b0 = vdupq_n_u8(0x01), b1 = vdupq_n_u8(0x02);
    uint8_t sm[16];
    k_scales_mins(x + scales_off, sm);
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
    for (int t = 0; t < n_tok; t++)
        msum[t] = k_min_sum(mins, y[t]);
    const uint8_t *q = x + qs_off;
    /* the fifth bit of sub-block sb is bit sb of each qh byte: ha, hb hold qh >> 2j */
    uint8x16_t ha = vdupq_n_u8(0), hb = vdupq_n_u8(0);
    if (five) {
        ha = vld1q_u8(x + qh_off);
        hb = vld1q_u8(x + qh_off + 16);
    }
    for (int j = 0; j < GM_QK_K / 64; j++) {
        const uint8x16_t qa = vld1q_u8(q + 32 * j), qb = vld1q_u8(q + 32 * j + 16);
        uint8x16_t la = vandq_u8(qa, m4), lb = vandq_u8(qb, m4);
        uint8x16_t ua = vshrq_n_u8(qa, 4), ub = vshrq_n_u8(qb, 4);
        if (five) {
            la = vorrq_u8(la, vshlq_n_u8(vandq_u8(ha, b0), 4));
            lb = vorrq_u8(lb, vshlq_n_u8(vandq_u8(hb, b0), 4));
            ua = vorrq_u8(ua, vshlq_n_u8(vandq_u8(ha, b1), 3));
            ub = vorrq_u8(ub, vshlq_n_u8(vandq_u8(hb, b1), 3));
            ha = vshrq_n_u8(ha, 2);
            hb = vshrq_n_u8(hb, 2);
        }
        /* four products of at most 31 * 127 per int16 lane */
        tok_prod32(as_s8(la), as_s8(lb), sm[2 * j], y, Q8K_QS + 64 * j, n_tok, sumi);
        tok_prod32(as_s8(ua), as_s8(ub), sm[2 * j + 1], y, Q8K_QS + 64 * j + 32, n_tok, sumi);
    }
}

static inline void q4_K_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                              int32x4_t *sumi, int32_t *msum)
{
    k45_block(x, y, n_tok, sumi, msum, offsetof(gm_block_q4_K, scales),
              offsetof(gm_block_q4_K, qs), 0, 0);
}

static inline void q5_K_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                              int32x4_t *sumi, int32_t *msum)
{
    k45_block(x, y, n_tok, sumi, msum, offsetof(gm_block_q5_K, scales),
              offsetof(gm_block_q5_K, qs), 1, offsetof(gm_block_q5_K, qh));
}

K_ROWS(q4_K, 1.0f, 1, offsetof(gm_block_q4_K, dmin))
K_ROWS(q5_K, 1.0f, 1, offsetof(gm_block_q5_K, dmin))

static inline void q6_K_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                              int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30);
    const int8x16_t off = vdupq_n_s8(32);
    const uint8_t *ql = x + offsetof(gm_block_q6_K, ql);
    const uint8_t *qh = x + offsetof(gm_block_q6_K, qh);
    const int8_t *sc = (const int8_t *)(x + offsetof(gm_block_q6_K, scales));
    /* element 128 j + 32 k + 16 h + l (group 8 j + 2 k + h): low 4 bits from byte
     * ql[64 j + 32 (k % 2) + 16 h + l] (nibble k / 2), high 2 from qh[32 j + 16 h + l] at
     * bit 2 k */
    for (int j = 0; j < GM_QK_K / 128; j++) {
        for (int h = 0; h < 2; h++) {
            const uint8x16_t l0 = vld1q_u8(ql + 64 * j + 16 * h);
            const uint8x16_t l1 = vld1q_u8(ql + 64 * j + 32 + 16 * h);
            const uint8x16_t hb = vld1q_u8(qh + 32 * j + 16 * h);
            uint8x16_t v[4];
            v[0] = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30));
            v[1] = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30));
            v[2] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30));
            v[3] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30));
            for (int k = 0; k < 4; k++) {
                const int g = 8 * j + 2 * k + h;
                /* two products of at most 32 * 127 per int16 lane */
                tok_prod16(vsubq_s8(as_s8(v[k]), off), sc[g], y, Q8K_QS + 16 * g, n_tok, sumi);
            }
        }
    }
}

K_ROWS(q6_K, 1.0f, 0, 0)

/* sum over the 16 groups of 16 of m[g] * bsums[g] of the activation block y (Q2_K). */
static inline int32_t q2_K_min_sum(int16x8_t m0, int16x8_t m1, const uint8_t *y)
{
    const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
    const int16x8_t bs1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
    int32x4_t ms = vmull_s16(vget_low_s16(m0), vget_low_s16(bs0));
    ms = vmlal_high_s16(ms, m0, bs0);
    ms = vmlal_s16(ms, vget_low_s16(m1), vget_low_s16(bs1));
    return vaddvq_s32(vmlal_high_s16(ms, m1, bs1));
}

static inline void q2_K_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                              int32x4_t *sumi, int32_t *msum)
{
    const uint8x16_t m3 = vdupq_n_u8(0x03), m4 = vdupq_n_u8(0x0f);
    const uint8x16_t msc = vld1q_u8(x + offsetof(gm_block_q2_K, scales));
    /* minimum term: sum over the 16 groups of (scales[g] >> 4) * bsums[g] */
    const uint8x16_t mins = vshrq_n_u8(msc, 4);
    const int16x8_t mn0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
    const int16x8_t mn1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
    for (int t = 0; t < n_tok; t++)
        msum[t] = q2_K_min_sum(mn0, mn1, y[t]);
    uint8_t sc[16];
    vst1q_u8(sc, vandq_u8(msc, m4));
    const uint8_t *q2 = x + offsetof(gm_block_q2_K, qs);
    /* element 128 j + 32 k + l is bits 2k..2k+1 of byte 32 j + l; group 8 j + 2 k + l / 16 */
    for (int j = 0; j < GM_QK_K / 128; j++) {
        uint8x16_t b0 = vld1q_u8(q2 + 32 * j), b1 = vld1q_u8(q2 + 32 * j + 16);
        for (int k = 0; k < 4; k++) {
            const int g = 8 * j + 2 * k;
            tok_prod16(as_s8(vandq_u8(b0, m3)), sc[g], y, Q8K_QS + 16 * g, n_tok, sumi);
            tok_prod16(as_s8(vandq_u8(b1, m3)), sc[g + 1], y, Q8K_QS + 16 * g + 16, n_tok, sumi);
            b0 = vshrq_n_u8(b0, 2);
            b1 = vshrq_n_u8(b1, 2);
        }
    }
}

K_ROWS(q2_K, 1.0f, 1, offsetof(gm_block_q2_K, dmin))

static inline void q3_K_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                              int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8x16_t m3 = vdupq_n_u8(0x03), one = vdupq_n_u8(0x01);
    const int8x16_t four = vdupq_n_s8(4);
    /* the 16 six-bit scales as bytes (see gm_q3_K_scale), then minus 32 */
    uint32_t u[4];
    memcpy(u, x + offsetof(gm_block_q3_K, scales), 12);
    const uint32_t s2 = u[2];
    u[2] = ((u[0] >> 4) & 0x0f0f0f0fu) | (((s2 >> 4) & 0x03030303u) << 4);
    u[3] = ((u[1] >> 4) & 0x0f0f0f0fu) | (((s2 >> 6) & 0x03030303u) << 4);
    u[0] = (u[0] & 0x0f0f0f0fu) | (((s2 >> 0) & 0x03030303u) << 4);
    u[1] = (u[1] & 0x0f0f0f0fu) | (((s2 >> 2) & 0x03030303u) << 4);
    int8_t sc[16];
    vst1q_s8(sc, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(u)), vdupq_n_s8(32)));
    /* the high bit of element 128 j + 32 k + l is bit 4 j + k of hmask[l]: h0, h1 hold
     * hmask >> (4 j + k) */
    uint8x16_t h0 = vld1q_u8(x + offsetof(gm_block_q3_K, hmask));
    uint8x16_t h1 = vld1q_u8(x + offsetof(gm_block_q3_K, hmask) + 16);
    const uint8_t *q3 = x + offsetof(gm_block_q3_K, qs);
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
            tok_prod16(v0, sc[g], y, Q8K_QS + 16 * g, n_tok, sumi);
            tok_prod16(v1, sc[g + 1], y, Q8K_QS + 16 * g + 16, n_tok, sumi);
        }
    }
}

K_ROWS(q3_K, 1.0f, 0, 0)

static inline void iq4_xs_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                                int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const int8x16_t table = vld1q_s8(gm_kvalues_iq4nl);
    unsigned sh = ld_u16(x + offsetof(gm_block_iq4_xs, scales_h));
    const uint8_t *sl = x + offsetof(gm_block_iq4_xs, scales_l);
    const uint8_t *qs = x + offsetof(gm_block_iq4_xs, qs);
    for (int ib = 0; ib < GM_QK_K / 32; ib++) {
        const int ls = (int)(((sl[ib / 2] >> (4 * (ib % 2))) & 0x0f) | ((sh & 3) << 4)) - 32;
        sh >>= 2;
        int8x16_t lo, hi;
        lut4(table, vld1q_u8(qs + 16 * ib), &lo, &hi);
        /* two products of at most 127 * 127 per int16 lane (dot32) */
        for (int t = 0; t < n_tok; t++)
            sumi[t] = vmlaq_n_s32(sumi[t], dot32(lo, hi, y[t] + Q8K_QS + 32 * ib), ls);
    }
}

K_ROWS(iq4_xs, 1.0f, 0, 0)

/* IQ2_XXS: block scale d * (2s + 1) / 8 */
static inline void iq2_xxs_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                                 int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8_t *q2 = x + offsetof(gm_block_iq2_xxs, qs);
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
        tok_prod32(apply_signs(g01, s01), apply_signs(g23, s23), (int32_t)(2 * (aux >> 28) + 1),
                   y, Q8K_QS + 32 * ib, n_tok, sumi);
    }
}

K_ROWS(iq2_xxs, 0.125f, 0, 0)

/* IQ3_XXS: block scale d * (2s + 1) / 4 */
static inline void iq3_xxs_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                                 int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8_t *q3 = x + offsetof(gm_block_iq3_xxs, qs);
    const uint8_t *gas = q3 + GM_QK_K / 4;
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
        tok_prod32(apply_signs(g01, s01), apply_signs(g23, s23), (int32_t)(2 * (aux >> 28) + 1),
                   y, Q8K_QS + 32 * ib, n_tok, sumi);
    }
}

K_ROWS(iq3_xxs, 0.25f, 0, 0)

/* 16 bytes: the 8-byte grid rows r0 and r1. */
static inline uint8x16_t rows2(const uint8_t *r0, const uint8_t *r1)
{
    return vcombine_u8(vld1_u8(r0), vld1_u8(r1));
}

/* IQ2_XS: block scale d * (2s + 1) / 8, one 4-bit s per 16 elements */
static inline void iq2_xs_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                                int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8_t *qs = x + offsetof(gm_block_iq2_xs, qs);
    const uint8_t *sc = x + offsetof(gm_block_iq2_xs, scales);
    for (int ib = 0; ib < GM_QK_K / 32; ib++) {
        uint16_t q[4];
        memcpy(q, qs + 8 * ib, 8);
        for (int h = 0; h < 2; h++) { /* 16 elements per 4-bit scale */
            const uint16_t q0 = q[2 * h], q1 = q[2 * h + 1];
            const uint8x16_t g = rows2(gm_iq2xs_grid[q0 & 511], gm_iq2xs_grid[q1 & 511]);
            const uint8x16_t m = sign_mask(gm_ksigns_iq2xs[q0 >> 9], gm_ksigns_iq2xs[q1 >> 9]);
            tok_prod16(apply_signs(g, m), 2 * ((sc[ib] >> (4 * h)) & 0x0f) + 1, y,
                       Q8K_QS + 32 * ib + 16 * h, n_tok, sumi);
        }
    }
}

K_ROWS(iq2_xs, 0.125f, 0, 0)

/* IQ2_S: as IQ2_XS, with 10-bit grid indices and the signs stored */
static inline void iq2_s_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                               int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8_t *qs = x + offsetof(gm_block_iq2_s, qs);
    const uint8_t *signs = qs + GM_QK_K / 8;
    const uint8_t *qh = x + offsetof(gm_block_iq2_s, qh);
    const uint8_t *sc = x + offsetof(gm_block_iq2_s, scales);
    for (int ib = 0; ib < GM_QK_K / 32; ib++) {
        for (int h = 0; h < 2; h++) {
            const int l = 2 * h;
            const uint8x16_t g =
                rows2(gm_iq2s_grid[qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8)],
                      gm_iq2s_grid[qs[4 * ib + l + 1] | (((qh[ib] >> (2 * l + 2)) & 3) << 8)]);
            const uint8x16_t m = sign_mask(signs[4 * ib + l], signs[4 * ib + l + 1]);
            tok_prod16(apply_signs(g, m), 2 * ((sc[ib] >> (4 * h)) & 0x0f) + 1, y,
                       Q8K_QS + 32 * ib + 16 * h, n_tok, sumi);
        }
    }
}

K_ROWS(iq2_s, 0.125f, 0, 0)

static inline void iq3_s_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                               int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8_t *qs = x + offsetof(gm_block_iq3_s, qs);
    const uint8_t *qh = x + offsetof(gm_block_iq3_s, qh);
    const uint8_t *signs = x + offsetof(gm_block_iq3_s, signs);
    const uint8_t *sc = x + offsetof(gm_block_iq3_s, scales);
    for (int ib = 0; ib < GM_QK_K / 32; ib++) {
        uint32_t gr[8];
        for (int k = 0; k < 8; k++)
            memcpy(&gr[k], gm_iq3s_grid[qs[8 * ib + k] | (((qh[ib] >> k) & 1) << 8)], 4);
        const uint8x16_t m01 = sign_mask(signs[4 * ib], signs[4 * ib + 1]);
        const uint8x16_t m23 = sign_mask(signs[4 * ib + 2], signs[4 * ib + 3]);
        const uint8x16_t g01 = vreinterpretq_u8_u32(vld1q_u32(gr));
        const uint8x16_t g23 = vreinterpretq_u8_u32(vld1q_u32(gr + 4));
        const int ls = 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 0x0f) + 1;
        /* four products of at most 15 * 127 per int16 lane */
        tok_prod32(apply_signs(g01, m01), apply_signs(g23, m23), ls, y, Q8K_QS + 32 * ib, n_tok,
                   sumi);
    }
}

K_ROWS(iq3_s, 1.0f, 0, 0)

/* 16 bytes: the 8-byte IQ1 grid rows r0 and r1 (values -1, 0, 1). */
static inline int8x16_t rows2_s8(const int8_t *r0, const int8_t *r1)
{
    return vcombine_s8(vld1_s8(r0), vld1_s8(r1));
}

/* IQ1_S: grid rows of -1, 0, 1 and, per sub-block of 32, a delta of sign s times the scale;
 * the delta part is the scaled activation sum (see dot_ref.c), summed apart and weighted by
 * GM_IQ1S_DELTA at the end. */
static ALWAYS_INLINE void iq1_s_rows(const void *wv, const void *av, uint64_t a_stride,
                                     uint64_t n, int n_tok, float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc[GM_DOT_MULTI];
    float acc_d[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++) {
        acc[t] = vdupq_n_f32(0.0f);
        acc_d[t] = 0.0f;
    }
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq1_s);
        const uint8_t *y[GM_DOT_MULTI];
        int32x4_t sumi[GM_DOT_MULTI];
        for (int t = 0; t < n_tok; t++) {
            y[t] = a + t * a_stride + i * Q8K;
            sumi[t] = vdupq_n_s32(0);
        }
        const uint8_t *qs = x + offsetof(gm_block_iq1_s, qs);
        const uint8_t *qhp = x + offsetof(gm_block_iq1_s, qh);
        int16_t dls[8]; /* the signed delta scale of each sub-block */
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const unsigned qh = ld_u16(qhp + 2 * ib);
            const int8x16_t g01 =
                rows2_s8(gm_iq1s_grid[qs[4 * ib] | ((qh & 7) << 8)],
                         gm_iq1s_grid[qs[4 * ib + 1] | (((qh >> 3) & 7) << 8)]);
            const int8x16_t g23 =
                rows2_s8(gm_iq1s_grid[qs[4 * ib + 2] | (((qh >> 6) & 7) << 8)],
                         gm_iq1s_grid[qs[4 * ib + 3] | (((qh >> 9) & 7) << 8)]);
            const int ls = 2 * ((qh >> 12) & 7) + 1;
            dls[ib] = (int16_t)((qh & 0x8000) ? -ls : ls);
            tok_prod32(g01, g23, ls, y, Q8K_QS + 32 * ib, n_tok, sumi);
        }
        const int16x8_t dl = vld1q_s16(dls);
        const float wd = h2f(x + offsetof(gm_block_iq1_s, d));
        for (int t = 0; t < n_tok; t++) {
            const float d = ld_f32(y[t]) * wd;
            acc[t] = vmlaq_n_f32(acc[t], vcvtq_f32_s32(sumi[t]), d);
            acc_d[t] += d * (float)k_min_sum(dl, y[t]);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = vaddvq_f32(acc[t]) + GM_IQ1S_DELTA * acc_d[t];
}

ROW_KERNELS(iq1_s)

/* IQ1_M: as IQ1_S with a scale and two delta signs per 16 elements; the block scale is spread
 * over the top nibbles of the scales. */
static ALWAYS_INLINE void iq1_m_rows(const void *wv, const void *av, uint64_t a_stride,
                                     uint64_t n, int n_tok, float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    float32x4_t acc[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[t] = vdupq_n_f32(0.0f);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq1_m);
        const uint8_t *y[GM_DOT_MULTI];
        int32x4_t sumi[GM_DOT_MULTI], sumd[GM_DOT_MULTI];
        for (int t = 0; t < n_tok; t++) {
            y[t] = a + t * a_stride + i * Q8K;
            sumi[t] = sumd[t] = vdupq_n_s32(0);
        }
        const uint8_t *qs = x + offsetof(gm_block_iq1_m, qs);
        const uint8_t *qhp = x + offsetof(gm_block_iq1_m, qh);
        uint16_t sc[4];
        memcpy(sc, x + offsetof(gm_block_iq1_m, scales), 8);
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                          ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        uint8_t dh[2];
        memcpy(dh, &dbits, 2);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int shift = 6 * (ib % 2);
            for (int h = 0; h < 2; h++) { /* 16 elements: two grid rows, one scale */
                const uint8_t qh = qhp[2 * ib + h];
                const int8x16_t g =
                    rows2_s8(gm_iq1s_grid[qs[4 * ib + 2 * h] | ((qh & 7) << 8)],
                             gm_iq1s_grid[qs[4 * ib + 2 * h + 1] | (((qh >> 4) & 7) << 8)]);
                const int ls = 2 * ((sc[ib / 2] >> (shift + 3 * h)) & 7) + 1;
                /* the delta's sign per row of 8: bit 3 of each nibble of qh */
                const uint8x16_t m = vcombine_u8(vdup_n_u8((qh & 0x08) ? 0xff : 0),
                                                 vdup_n_u8((qh & 0x80) ? 0xff : 0));
                for (int t = 0; t < n_tok; t++) {
                    const int8x16_t y8 = ld_s8(y[t] + Q8K_QS + 32 * ib + 16 * h);
                    const int8x16_t ys = vsubq_s8(veorq_s8(y8, as_s8(m)), as_s8(m));
                    sumi[t] = vmlaq_n_s32(sumi[t], prod16(g, y8), ls);
                    sumd[t] = vmlaq_n_s32(sumd[t], vpaddlq_s16(vpaddlq_s8(ys)), ls);
                }
            }
        }
        const float wd = h2f(dh);
        for (int t = 0; t < n_tok; t++) {
            const float32x4_t s =
                vmlaq_n_f32(vcvtq_f32_s32(sumi[t]), vcvtq_f32_s32(sumd[t]), GM_IQ1M_DELTA);
            acc[t] = vmlaq_n_f32(acc[t], s, ld_f32(y[t]) * wd);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = vaddvq_f32(acc[t]);
}

ROW_KERNELS(iq1_m)

/* The sum of the 256 codes of the activation block y (from its bsums) in 4 int32 lanes. */
static inline int32x4_t bsum_all(const uint8_t *y)
{
    const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS));
    const int16x8_t bs1 = vreinterpretq_s16_u8(vld1q_u8(y + Q8K_BSUMS + 16));
    return vpadalq_s16(vpaddlq_s16(bs0), bs1);
}

/* The TQ1_0 trit of each byte q already multiplied by its power of 3: (q * 3) >> 8. */
static inline int8x16_t tq1_trits(uint8x16_t q)
{
    const uint8x8_t lo = vshrn_n_u16(vmull_u8(vget_low_u8(q), vdup_n_u8(3)), 8);
    return as_s8(vshrn_high_n_u16(lo, vmull_high_u8(q, vdupq_n_u8(3)), 8));
}

static inline void tq1_0_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                               int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    /* qh byte k % 4 times 3^(k / 4) for the last 16 elements (element 240 + 4 t + m is trit t
     * of qh[m]) */
    static const uint8_t pow3_qh[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    const uint8_t *qs = x + offsetof(gm_block_tq1_0, qs);
    const uint8x16_t b0 = vld1q_u8(qs), b1 = vld1q_u8(qs + 16), b2 = vld1q_u8(qs + 32);
    /* codes are t - 1: take the activation sum (from bsums) out once */
    for (int t = 0; t < n_tok; t++)
        sumi[t] = vsubq_s32(sumi[t], bsum_all(y[t]));
    /* products of trits (0..2) and codes: six per int16 lane (dot48), at most 2 * 127 * 6 */
    for (int k = 0; k < 5; k++) {
        const uint8x16_t p3 = vdupq_n_u8(pow3[k]);
        const int8x16_t w0 = tq1_trits(vmulq_u8(b0, p3)), w1 = tq1_trits(vmulq_u8(b1, p3));
        const int8x16_t w2 = tq1_trits(vmulq_u8(b2, p3));
        for (int t = 0; t < n_tok; t++) {
            const uint8_t *q8 = y[t] + Q8K_QS;
            sumi[t] = dot48(sumi[t], w0, ld_s8(q8 + 32 * k), w1, ld_s8(q8 + 32 * k + 16), w2,
                            ld_s8(q8 + 160 + 16 * k));
        }
    }
    uint8_t qh4[16];
    for (int k = 0; k < 16; k++)
        qh4[k] = x[offsetof(gm_block_tq1_0, qh) + k % 4];
    const int8x16_t wh = tq1_trits(vmulq_u8(vld1q_u8(qh4), vld1q_u8(pow3_qh)));
    for (int t = 0; t < n_tok; t++)
        sumi[t] = dot16(sumi[t], wh, ld_s8(y[t] + Q8K_QS + 240));
}

K_ROWS(tq1_0, 1.0f, 0, 0)

static inline void tq2_0_block(const uint8_t *x, const uint8_t *const *y, int n_tok,
                               int32x4_t *sumi, int32_t *msum)
{
    (void)msum;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8_t *q2 = x + offsetof(gm_block_tq2_0, qs);
    /* codes are q - 1: take the activation sum (from bsums) out once */
    for (int t = 0; t < n_tok; t++)
        sumi[t] = vsubq_s32(sumi[t], bsum_all(y[t]));
    /* element 128 c + 32 s + m is bits 2s..2s+1 of byte 32 c + m */
    for (int c = 0; c < 2; c++) {
        uint8x16_t b0 = vld1q_u8(q2 + 32 * c), b1 = vld1q_u8(q2 + 32 * c + 16);
        for (int s = 0; s < 4; s++) {
            /* four products of at most 3 * 127 per int16 lane, unscaled */
            tok_prod32(as_s8(vandq_u8(b0, m3)), as_s8(vandq_u8(b1, m3)), 1, y,
                       Q8K_QS + 128 * c + 32 * s, n_tok, sumi);
            b0 = vshrq_n_u8(b0, 2);
            b1 = vshrq_n_u8(b1, 2);
        }
    }
}

K_ROWS(tq2_0, 1.0f, 0, 0)

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

/* The multi-token kernels of the same level: every quantized type's (the float types have
 * none). */
#if defined(GM_NEON_DOTPROD)
void gm_dot_multi_fill_neondot(gm_dot_multi_fn t[GM_TYPE_COUNT])
#else
void gm_dot_multi_fill_neon(gm_dot_multi_fn t[GM_TYPE_COUNT])
#endif
{
    t[GM_TYPE_Q8_0] = dot_multi_q8_0;
    t[GM_TYPE_Q4_0] = dot_multi_q4_0;
    t[GM_TYPE_IQ4_NL] = dot_multi_iq4_nl;
    t[GM_TYPE_MXFP4] = dot_multi_mxfp4;
    t[GM_TYPE_Q2_K] = dot_multi_q2_K;
    t[GM_TYPE_Q3_K] = dot_multi_q3_K;
    t[GM_TYPE_Q4_K] = dot_multi_q4_K;
    t[GM_TYPE_Q5_K] = dot_multi_q5_K;
    t[GM_TYPE_Q6_K] = dot_multi_q6_K;
    t[GM_TYPE_IQ4_XS] = dot_multi_iq4_xs;
    t[GM_TYPE_IQ2_XXS] = dot_multi_iq2_xxs;
    t[GM_TYPE_IQ3_XXS] = dot_multi_iq3_xxs;
    t[GM_TYPE_Q4_1] = dot_multi_q4_1;
    t[GM_TYPE_Q5_0] = dot_multi_q5_0;
    t[GM_TYPE_Q5_1] = dot_multi_q5_1;
    t[GM_TYPE_IQ2_XS] = dot_multi_iq2_xs;
    t[GM_TYPE_IQ2_S] = dot_multi_iq2_s;
    t[GM_TYPE_IQ3_S] = dot_multi_iq3_s;
    t[GM_TYPE_IQ1_S] = dot_multi_iq1_s;
    t[GM_TYPE_IQ1_M] = dot_multi_iq1_m;
    t[GM_TYPE_TQ1_0] = dot_multi_tq1_0;
    t[GM_TYPE_TQ2_0] = dot_multi_tq2_0;
}
