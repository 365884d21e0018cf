/* AVX-512 (F, BW, VL, VNNI; with AVX2, FMA, F16C) dot products; compiled with those target
 * flags and called only when dispatch.c has seen the features (see dot_impl.h). Types not
 * specialised here, in dot_avx512_k.c (the K-quants Q2_K-Q6_K) or in dot_avx512_iq2.c / _iq3s.c
 * / _iq1.c (the large-grid IQ types and TQ1_0), all installed by this file's fill functions, keep
 * the AVX2 kernels. At the end, the avx512vbmi
 * level's kernels (MXFP4, IQ4_NL, IQ2_XXS, IQ3_XXS), functions with a target attribute for VBMI
 * and BITALG on top. Most types also have a multi-token form (GM_DOT_MULTI tokens per weight
 * row, for prefill) built from the same weight-side unpack and per-token step as the
 * single-token kernel, so both give the same bits.
 *
 * Same arithmetic as dot_ref.c: exact integer sums inside a (sub-)block, one float multiply-add
 * per block. 512-bit vectors hold 64 weights: the two halves of a 32-byte nibble load
 * (low nibbles | high nibbles) or two 32-element blocks side by side. Unsigned codes times
 * signed activation codes go through maddubs (pair sums cannot saturate at these ranges, see
 * dot_avx2.c) and then vpdpwssd, which multiplies by the 16-bit sub-block scales and accumulates
 * in one step; signed table values (IQ4, MXFP4, Q8_0) use |w| times y negated under the sign
 * mask of w (AVX-512 has no vpsignb) and vpdpbusd. Constant offsets of the codes (Q3_K's -4,
 * Q6_K's -32) are taken out once per super-block through the activation group sums (bsums).
 * Blocks are read at any alignment, never past the end of the row. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dot_impl.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"

#include "kernels/avx512_util.h"


/* E8M0 exponent -> 2^(e-127)/2 (gm_e8m0_to_f32_half), one load instead of a branch. Filled
 * once in gm_dot_fill_avx512. */
static float g_e8m0_half[256];

/* ---- Q8_0 activations ------------------------------------------------------------------- */

#define Q80 sizeof(gm_block_q8_0)

/* Four block scales s -> [s0 x8 | s1 x8] and [s2 x8 | s3 x8]. */
static inline void spread4(__m128 s, __m512 *s01, __m512 *s23)
{
    const __m512 z = _mm512_castps128_ps512(s);
    *s01 = _mm512_permutexvar_ps(halves32(0, 1), z);
    *s23 = _mm512_permutexvar_ps(halves32(2, 3), z);
}

/* The f16 at p, p + stride, p + 2 stride, p + 3 stride as floats. */
static inline __m128 f16x4(const uint8_t *p, size_t stride)
{
    return _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, (short)ld_u16(p + 3 * stride),
                                      (short)ld_u16(p + 2 * stride), (short)ld_u16(p + stride),
                                      (short)ld_u16(p)));
}

static float dot_q8_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK8_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const uint8_t *w0 = w + i * Q80, *a0 = a + i * Q80;
        const __m512i x0 = join256(ldu256(w0 + 2), ldu256(w0 + Q80 + 2));
        const __m512i y0 = join256(ldu256(a0 + 2), ldu256(a0 + Q80 + 2));
        const __m512i x1 = join256(ldu256(w0 + 2 * Q80 + 2), ldu256(w0 + 3 * Q80 + 2));
        const __m512i y1 = join256(ldu256(a0 + 2 * Q80 + 2), ldu256(a0 + 3 * Q80 + 2));
        __m512 s01, s23;
        spread4(_mm_mul_ps(f16x4(w0, Q80), _mm_loadu_ps((const float *)(asc + 4 * i))), &s01,
                &s23);
        acc0 = _mm512_fmadd_ps(s01, _mm512_cvtepi32_ps(dot_ss8(x0, y0)), acc0);
        acc1 = _mm512_fmadd_ps(s23, _mm512_cvtepi32_ps(dot_ss8(x1, y1)), acc1);
    }
    __m256 acc2 = _mm256_setzero_ps();
    for (; i < nb; i++) {
        const uint8_t *w0 = w + i * Q80, *a0 = a + i * Q80;
        const __m256i x = ldu256(w0 + 2);
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x),
                                              _mm256_sign_epi8(ldu256(a0 + 2), x));
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * ld_f32(asc + 4 * i)),
                               _mm256_cvtepi32_ps(p), acc2);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum256_ps(acc2);
}

/* GM_DOT_MULTI activation rows (a + t * a_stride) against one Q8_0 row: the weight codes, their
 * absolute values and the block scales are loaded and converted once for all the tokens; every
 * token then runs dot_q8_0's operations in the same order, so out[t] equals it bit for bit. */
static void dot_multi_q8_0(const void *wv, const void *av, uint64_t a_stride, uint64_t n,
                           float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK8_0;
    const uint64_t sc_off = (uint64_t)(GM_ACT_Q8_0_SCALES(a, n) - a);
    __m512 acc0[GM_DOT_MULTI], acc1[GM_DOT_MULTI];
    __m256 acc2[GM_DOT_MULTI];
    for (int t = 0; t < GM_DOT_MULTI; t++) {
        acc0[t] = acc1[t] = _mm512_setzero_ps();
        acc2[t] = _mm256_setzero_ps();
    }
    uint64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const uint8_t *w0 = w + i * Q80;
        const __m512i x0 = join256(ldu256(w0 + 2), ldu256(w0 + Q80 + 2));
        const __m512i x1 = join256(ldu256(w0 + 2 * Q80 + 2), ldu256(w0 + 3 * Q80 + 2));
        const __m512i ax0 = _mm512_abs_epi8(x0), ax1 = _mm512_abs_epi8(x1);
        const __m128 wd = f16x4(w0, Q80);
        for (int t = 0; t < GM_DOT_MULTI; t++) {
            const uint8_t *at = a + t * a_stride, *a0 = at + i * Q80;
            const __m512i y0 = join256(ldu256(a0 + 2), ldu256(a0 + Q80 + 2));
            const __m512i y1 = join256(ldu256(a0 + 2 * Q80 + 2), ldu256(a0 + 3 * Q80 + 2));
            __m512 s01, s23;
            spread4(_mm_mul_ps(wd, _mm_loadu_ps((const float *)(at + sc_off + 4 * i))), &s01,
                    &s23);
            const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax0, apply_sign(y0, x0));
            const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax1, apply_sign(y1, x1));
            acc0[t] = _mm512_fmadd_ps(s01, _mm512_cvtepi32_ps(p0), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(s23, _mm512_cvtepi32_ps(p1), acc1[t]);
        }
    }
    for (; i < nb; i++) {
        const uint8_t *w0 = w + i * Q80;
        const __m256i x = ldu256(w0 + 2);
        const __m256i ax = _mm256_sign_epi8(x, x);
        const float wd = h2f(ld_u16(w0));
        for (int t = 0; t < GM_DOT_MULTI; t++) {
            const uint8_t *at = a + t * a_stride, *a0 = at + i * Q80;
            const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax,
                                                  _mm256_sign_epi8(ldu256(a0 + 2), x));
            acc2[t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * ld_f32(at + sc_off + 4 * i)),
                                      _mm256_cvtepi32_ps(p), acc2[t]);
        }
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t])) + hsum256_ps(acc2[t]);
}

static const int8_t k_values_q4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1,
                                         0,  1,  2,  3,  4,  5,  6,  7};

enum { LUT4_MXFP4, LUT4_IQ4_NL, LUT4_Q4_0 };

/* The 4-bit table types by 4 blocks at a time on the regrouped activations of the prepared row
 * (GM_ACT_Q8_0_GROUPS, dot_impl.h): the 16-byte nibble fields of 4 weight blocks are gathered
 * into one vector (fields4), the low and high nibbles are mapped to the table values plus an
 * offset that makes them unsigned (Q4_0's codes are that already), so they go straight into
 * vpdpbusd with the regrouped codes: each 128-bit lane of the sums is one block.
 * The offset comes out of the same 32-bit lanes first, by one vpdpwssd of the prepared sums of
 * 4 codes with -offset, so every lane holds an exact integer partial sum of its block, and one
 * float multiply-add scales the 4 blocks. */
typedef struct lut4_consts {
    __m512i table;  /* the values + off as unsigned bytes, in every 128-bit lane */
    __m512i negoff; /* -off in both int16 of every 32-bit lane */
    __m512i didx;   /* vpermw indices of the 4 f16 scales (18-byte blocks); vpshufb pattern
                     * of the 4 E8M0 exponents (MXFP4) */
    __m512i spread; /* float lane k of the 4 scales to 128-bit lane k */
} lut4_consts;

/* The 16 bytes at p, p + stride, p + 2 stride, p + 3 stride as one vector. (Two 64-byte loads
 * and one vpermt2w instead took as long in cache but a third less from memory on 1 thread.) */
static inline __m512i fields4(const uint8_t *p, size_t stride)
{
    const __m256i a =
        _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p)), ldu128(p + stride), 1);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p + 2 * stride)),
                                              ldu128(p + 3 * stride), 1);
    return join256(a, b);
}

static inline lut4_consts lut4_init(int kind, const int8_t *values, int off)
{
    lut4_consts c;
    c.table = _mm512_broadcast_i32x4(_mm_add_epi8(ldu128(values), _mm_set1_epi8((char)off)));
    c.negoff = _mm512_set1_epi32((int)(((uint32_t)(-off) & 0xffffu) * 0x10001u));
    int16_t d[32] = {0};
    if (kind == LUT4_MXFP4) { /* vpshufb: byte k of lane k to byte 0 of each dword */
        int8_t e[64];
        for (int i = 0; i < 64; i++)
            e[i] = (int8_t)(i % 4 == 0 ? i / 16 : -1);
        c.didx = ldu512(e);
    } else {
        for (int k = 0; k < 4; k++)
            d[k] = (int16_t)(9 * k);
        c.didx = ldu512(d);
    }
    c.spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return c;
}

#if defined(GM_KERNELS_HAVE_AVX512VBMI)
/* The table values of the low and the high nibbles of q by vpermb, which reads 6 index bits:
 * the table repeats every 16 bytes, so the bits above a nibble need no masking. */
__attribute__((target("avx512vbmi"))) static inline void lut4_map_vbmi(__m512i table, __m512i q,
                                                                       __m512i *lo, __m512i *hi)
{
    *lo = _mm512_permutexvar_epi8(q, table);
    *hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(q, 4), table);
}
#endif

/* The weight side of 4 blocks at w0 (block_bytes each): the mapped low and high nibbles (vbmi:
 * by lut4_map_vbmi, only in functions compiled for VBMI) and the per-block scale part in the
 * 128-bit lane of its block: MXFP4 the exponent e - 128 as float (applied by vscalefps), the
 * others the f16 scale as float. */
typedef struct lut4_w {
    __m512i lo, hi;
    __m512 ws;
} lut4_w;

static inline __attribute__((always_inline)) lut4_w lut4_weights(const lut4_consts *c, int kind,
                                                                 int vbmi, const uint8_t *w0)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    lut4_w r;
    __m512i q;
    if (kind == LUT4_MXFP4) {
        q = fields4(w0 + 1, sizeof(gm_block_mxfp4));
        /* exponent e of block k is byte k of 128-bit lane k of the 64 bytes at w0: to every
         * 32-bit lane of lane k */
        const __m512i e = _mm512_shuffle_epi8(ldu512(w0), c->didx);
        r.ws = _mm512_sub_ps(_mm512_cvtepi32_ps(e), _mm512_set1_ps(128.0f));
    } else {
        const __m512i x = ldu512(w0);
        q = fields4(w0 + 2, 18);
        const __m128 ws =
            _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(c->didx, x)));
        r.ws = _mm512_permutexvar_ps(c->spread, _mm512_castps128_ps512(ws));
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (vbmi && kind != LUT4_Q4_0) {
        lut4_map_vbmi(c->table, q, &r.lo, &r.hi);
    } else
#endif
    {
        (void)vbmi;
        r.lo = _mm512_and_si512(q, m4);
        r.hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        if (kind != LUT4_Q4_0) {
            r.lo = _mm512_shuffle_epi8(c->table, r.lo);
            r.hi = _mm512_shuffle_epi8(c->table, r.hi);
        }
    }
    return r;
}

/* acc + the dot of 4 weight blocks (their weight side wv) with their regrouped activation codes
 * grp and float activation scales as4. MXFP4's block scale is as * 2^(e - 128) by vscalefps
 * (exact, subnormals too: the one rounding of the reference's product). */
static inline __attribute__((always_inline)) __m512 lut4_token(const lut4_consts *c, int kind,
                                                               const lut4_w *wv,
                                                               const uint8_t *grp,
                                                               const uint8_t *as4, __m512 acc)
{
    const __m512 as = _mm512_permutexvar_ps(
        c->spread, _mm512_castps128_ps512(_mm_loadu_ps((const float *)as4)));
    const __m512 sc =
        kind == LUT4_MXFP4 ? _mm512_scalef_ps(as, wv->ws) : _mm512_mul_ps(wv->ws, as);
    __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), ldu512(grp + 128), c->negoff);
    s = _mm512_dpbusd_epi32(s, wv->lo, ldu512(grp));
    s = _mm512_dpbusd_epi32(s, wv->hi, ldu512(grp + 64));
    return _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(s), acc);
}

/* 4-bit codes mapped through a 16-entry signed table, two 32-element blocks per vector:
 * [low nibbles of block 0 | high nibbles of block 0 | low of block 1 | high of block 1]. */
static inline __m512i lut4_pair(__m512i table, const uint8_t *q0, const uint8_t *q1)
{
    const __m512i q = join256(_mm256_broadcastsi128_si256(ldu128(q0)),
                              _mm256_broadcastsi128_si256(ldu128(q1)));
    const __m512i sh = _mm512_set_epi64(4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0,
                                        4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0);
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(q, sh), _mm512_set1_epi8(0x0f));
    return _mm512_shuffle_epi8(table, nib);
}

/* Dots of a row of 32-element 4-bit table blocks (kind: the block layout, the scale at offset 0
 * as E8M0 or f16, the 16 nibble bytes after it) with n_tok (1 or GM_DOT_MULTI) Q8_0 activation
 * rows a + t * a_stride: groups of 4 blocks (the weight side once for all the tokens), the last
 * nb % 4 blocks one at a time on the plain blocks of the row; every token's operations are the
 * one-token call's, so the results are equal bit for bit. */
static inline __attribute__((always_inline)) void dot_lut4_rows(const uint8_t *w, const uint8_t *a,
                                                                uint64_t a_stride, uint64_t n,
                                                                int kind, int vbmi, int n_tok,
                                                                float *out)
{
    const int8_t *values = kind == LUT4_MXFP4    ? gm_kvalues_mxfp4
                           : kind == LUT4_IQ4_NL ? gm_kvalues_iq4nl
                                                 : k_values_q4_0;
    const int off = kind == LUT4_MXFP4 ? 12 : kind == LUT4_IQ4_NL ? 128 : 8;
    const size_t block_bytes = kind == LUT4_MXFP4 ? sizeof(gm_block_mxfp4) : 18;
    const size_t qs_off = kind == LUT4_MXFP4 ? 1 : 2;
    const uint64_t nb = n / GM_QK8_0;
    const lut4_consts c = lut4_init(kind, values, off);
    __m512 acc0[GM_DOT_MULTI], acc1[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc0[t] = acc1[t] = _mm512_setzero_ps();
    /* token t's float scales and regrouped groups (dot_impl.h) */
#define ASC(t) GM_ACT_Q8_0_SCALES(a + (t) * a_stride, n)
#define GRP(t) GM_ACT_Q8_0_GROUPS(a + (t) * a_stride, n)
    uint64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        const lut4_w w0 = lut4_weights(&c, kind, vbmi, w + i * block_bytes);
        const lut4_w w1 = lut4_weights(&c, kind, vbmi, w + (i + 4) * block_bytes);
        const uint64_t g = (i / 4) * GM_ACT_Q8_0_GROUP;
        for (int t = 0; t < n_tok; t++) {
            acc0[t] = lut4_token(&c, kind, &w0, GRP(t) + g, ASC(t) + 4 * i, acc0[t]);
            acc1[t] = lut4_token(&c, kind, &w1, GRP(t) + g + GM_ACT_Q8_0_GROUP,
                                 ASC(t) + 4 * (i + 4), acc1[t]);
        }
    }
    if (i + 4 <= nb) {
        const lut4_w w0 = lut4_weights(&c, kind, vbmi, w + i * block_bytes);
        const uint64_t g = (i / 4) * GM_ACT_Q8_0_GROUP;
        for (int t = 0; t < n_tok; t++)
            acc0[t] = lut4_token(&c, kind, &w0, GRP(t) + g, ASC(t) + 4 * i, acc0[t]);
        i += 4;
    }
    if (i < nb) {
        const __m512i table = _mm512_broadcast_i32x4(ldu128(values));
        for (; i < nb; i++) { /* one block: the pair helper with the block twice, half used */
            const uint8_t *w0 = w + i * block_bytes;
            const __m512i v = lut4_pair(table, w0 + qs_off, w0 + qs_off);
            const float ws = kind == LUT4_MXFP4 ? g_e8m0_half[w0[0]] : h2f(ld_u16(w0));
            for (int t = 0; t < n_tok; t++) {
                const uint8_t *a0 = a + t * a_stride + i * Q80;
                const __m512i y = _mm512_zextsi256_si512(ldu256(a0 + 2));
                const __m512 s = _mm512_set1_ps(ws * ld_f32(ASC(t) + 4 * i));
                acc1[t] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot_ss8(v, y)), acc1[t]);
            }
        }
    }
#undef ASC
#undef GRP
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

static inline __attribute__((always_inline)) float
dot_lut4_row(const uint8_t *w, const uint8_t *a, uint64_t n, int kind, int vbmi)
{
    float r;
    dot_lut4_rows(w, a, 0, n, kind, vbmi, 1, &r);
    return r;
}

static float dot_mxfp4(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n, LUT4_MXFP4, 0);
}

static float dot_iq4_nl(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n, LUT4_IQ4_NL, 0);
}

static void dot_multi_mxfp4(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                            float *out)
{
    dot_lut4_rows(w, a, a_stride, n, LUT4_MXFP4, 0, GM_DOT_MULTI, out);
}

static void dot_multi_iq4_nl(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                             float *out)
{
    dot_lut4_rows(w, a, a_stride, n, LUT4_IQ4_NL, 0, GM_DOT_MULTI, out);
}

static void dot_multi_q4_0(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                           float *out)
{
    dot_lut4_rows(w, a, a_stride, n, LUT4_Q4_0, 0, GM_DOT_MULTI, out);
}

static float dot_q4_0(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n, LUT4_Q4_0, 0);
}

/* ---- Q8_K activations: IQ4_XS, TQ2_0 and the grid types (the K-quants: dot_avx512_k.c) ---- */

/* One IQ4_XS super-block's weight side: per vector j (sub-blocks 2j, 2j + 1 as [lo(2j) | hi(2j)
 * | lo(2j + 1) | hi(2j + 1)]) the absolute table values va[j] and their sign masks neg[j], and
 * the sub-block scales minus 32 permuted for its vpdpwssd (sc[j]). */
static inline void iq4_xs_unpack(const uint8_t *x, __m512i va[4], __mmask64 neg[4], __m512i sc[4])
{
    const __m512i table = _mm512_broadcast_i32x4(ldu128(gm_kvalues_iq4nl));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sh = _mm512_set_epi64(4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0,
                                        4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0);
    /* 6-bit scales of the 8 sub-blocks, minus 32, as int16 in every 128-bit lane: low 4 bits of
     * sub-block ib at bit 4 ib of scales_l, high 2 at bit 2 ib of scales_h, taken apart by vector
     * shifts (a scalar loop through a stack array stalled on store forwarding) */
    const __m256i lo =
        _mm256_srlv_epi32(_mm256_set1_epi32((int)ld_u32(x + offsetof(gm_block_iq4_xs, scales_l))),
                          _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(
            _mm256_set1_epi32((int)ld_u16(x + offsetof(gm_block_iq4_xs, scales_h)) << 4),
            _mm256_set_epi32(14, 12, 10, 8, 6, 4, 2, 0)),
        _mm256_set1_epi32(0x30));
    /* (lo & 0x0f) | hi */
    const __m256i ls = _mm256_ternarylogic_epi32(lo, hi, _mm256_set1_epi32(0x0f), 0xec);
    const __m512i s8 =
        _mm512_broadcast_i32x4(_mm_sub_epi16(_mm256_cvtepi32_epi16(ls), _mm_set1_epi16(32)));
    const uint8_t *qs = x + offsetof(gm_block_iq4_xs, qs);
    for (int j = 0; j < 4; j++) {
        const __m512i q2 = _mm512_castsi256_si512(ldu256(qs + 32 * j));
        const __m512i q = _mm512_shuffle_i64x2(q2, q2, _MM_SHUFFLE(1, 1, 0, 0));
        const __m512i v =
            _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi16(q, sh), m4));
        va[j] = _mm512_abs_epi8(v);
        neg[j] = _mm512_movepi8_mask(v);
        sc[j] = _mm512_shuffle_epi8(s8, scale_pair_mask(2 * j, 2 * j + 1));
    }
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one IQ4_XS row: each
 * super-block unpacked once, then the same per-token operations, so every token's result
 * equals the one-token call's bit for bit. */
static inline __attribute__((always_inline)) void iq4_xs_rows(const uint8_t *w, const uint8_t *a,
                                                              uint64_t a_stride, uint64_t n,
                                                              int n_tok, float *out)
{
    const uint64_t nb = n / GM_QK_K;
    const __m512i z = _mm512_setzero_si512();
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq4_xs);
        __m512i va[4], sc[4];
        __mmask64 neg[4];
        iq4_xs_unpack(x, va, neg, sc);
        const float wd = h2f(ld_u16(x + offsetof(gm_block_iq4_xs, d)));
        for (int t = 0; t < n_tok; t++) {
            const uint8_t *y = a + t * a_stride + i * Q8K;
            const uint8_t *q8 = y + Q8K_QS;
            __m512i sumi = z;
            for (int j = 0; j < 4; j++) {
                const __m512i y8 = ldu512(q8 + 64 * j);
                const __m512i p =
                    _mm512_maddubs_epi16(va[j], _mm512_mask_sub_epi8(y8, neg[j], z, y8));
                sumi = _mm512_dpwssd_epi32(sumi, p, sc[j]);
            }
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(ld_f32(y) * wd), _mm512_cvtepi32_ps(sumi),
                                     acc[t]);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

GM_ROW_KERNELS(, dot_iq4_xs, dot_multi_iq4_xs, iq4_xs_rows)

/* TQ2_0 (ternary codes q in 2 bits, value q - 1; element 128c + 32k + m is bits 2k of byte
 * 32c + m): n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one row. Per
 * super-block the codes of vector 2c + h (k = 2h, 2h + 1) from its 32 bytes in both halves,
 * shifted by 4h and 4h + 2; the -1 comes out once through the activation sums. The codes are
 * unpacked once for all the tokens, so every token's result equals the one-token call's. */
static inline __attribute__((always_inline)) void tq2_0_rows(const uint8_t *w, const uint8_t *a,
                                                             uint64_t a_stride, uint64_t n,
                                                             int n_tok, float *out)
{
    const uint64_t nb = n / GM_QK_K;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_tq2_0);
        const float wd = h2f(ld_u16(x + offsetof(gm_block_tq2_0, d)));
        __m512i q[4];
        for (int c = 0; c < 2; c++) {
            const __m512i b = bcast256(x + offsetof(gm_block_tq2_0, qs) + 32 * c);
            q[2 * c] = _mm512_and_si512(_mm512_srlv_epi16(b, halves16(0, 2)), m3);
            q[2 * c + 1] = _mm512_and_si512(_mm512_srlv_epi16(b, halves16(4, 6)), m3);
        }
        for (int t = 0; t < n_tok; t++) {
            const uint8_t *y = a + t * a_stride + i * Q8K;
            __m512i sumi = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_zextsi256_si512(_mm256_madd_epi16(ldu256(y + Q8K_BSUMS), ones16)));
            for (int v = 0; v < 4; v++)
                sumi = _mm512_dpbusd_epi32(sumi, q[v], ldu512(y + Q8K_QS + 64 * v));
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(ld_f32(y) * wd), _mm512_cvtepi32_ps(sumi),
                                     acc[t]);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

GM_ROW_KERNELS(, dot_tq2_0, dot_multi_tq2_0, tq2_0_rows)

/* Grid rows held in registers instead of loaded one by one (the loads and inserts of 32 or 64
 * rows per super-block bounded these kernels): each row is a 16-bit code of 2-bit (IQ2_XXS) or
 * 3-bit (IQ3_XXS) value indices, 256 codes in 8 vectors looked up 32 at a time by vpermt2w;
 * a code is then repeated across its row's bytes, shifted per 16-bit word so that every byte
 * holds its own index in its low bits, masked, and mapped to the value by vpshufb. Code layout:
 * the index of row byte 2p (p = 0, 1, ...) at bit s*p, of byte 2p+1 at bit 8 + s*p, where s is
 * the index width, so one shift by s*p serves both bytes of word p. Filled once in
 * gm_dot_fill_avx512. */
static uint16_t g_iq2xxs_code[256], g_iq3xxs_code[256];
static uint8_t g_iq2xxs_vals[16], g_iq3xxs_vals[16];

static void grid_codes(const uint8_t *grid, int row_bytes, int width, uint16_t *code,
                       uint8_t *vals)
{
    int n_vals = 0;
    memset(vals, 0, 16);
    for (int i = 0; i < 256 * row_bytes; i++) { /* the distinct values, ascending */
        int k = 0;
        while (k < n_vals && vals[k] < grid[i])
            k++;
        if (k < n_vals && vals[k] == grid[i])
            continue;
        memmove(vals + k + 1, vals + k, (size_t)(n_vals - k));
        vals[k] = grid[i];
        n_vals++;
    }
    for (int r = 0; r < 256; r++) {
        uint16_t c = 0;
        for (int b = 0; b < row_bytes; b++) {
            int k = 0;
            while (vals[k] != grid[r * row_bytes + b])
                k++;
            c |= (uint16_t)(k << ((b & 1) * 8 + (b / 2) * width));
        }
        code[r] = c;
    }
}

/* IQ2_XXS, two super-blocks per step (the second weighted by its activation scale yd1, 0 for a
 * last odd one paired with itself). */
static inline __m512 iq2_xxs_pair(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0,
                                  const uint8_t *y1, float yd1, const __m512i t[8],
                                  const __m512i rep[4], __m512 acc)
{
    const __m512i vals = _mm512_broadcast_i32x4(ldu128(g_iq2xxs_vals));
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const __m512i shift = _mm512_set1_epi64(0x0006000400020000ll);
    const __m512i sm01 = pack_scale_mask(0, 2), sm23 = pack_scale_mask(4, 6);
    /* per sub-block 8 bytes: 4 grid indices, then the sign and scale word */
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i a0 = ldu512(x0 + offsetof(gm_block_iq2_xxs, qs));
    const __m512i a1 = ldu512(x1 + offsetof(gm_block_iq2_xxs, qs));
    const __m512i idx = _mm512_permutex2var_epi32(a0, even, a1);
    const __m512i aux =
        _mm512_permutex2var_epi32(a0, _mm512_add_epi32(even, _mm512_set1_epi32(1)), a1);
    uint64_t neg[8];
    __m512i sc0, sc1;
    iq_signs_scales2(aux, neg, &sc0, &sc1);
    const __m512i codes[2] = {
        grid_lookup(t, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(idx))),
        grid_lookup(t, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(idx, 1)))};
    __m512i sums[2];
    for (int h = 0; h < 2; h++) {
        __m512i q[4];
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_srlv_epi16(_mm512_permutexvar_epi16(rep[j], codes[h]), shift);
            q[j] = _mm512_shuffle_epi8(vals, _mm512_and_si512(c, m3));
        }
        sums[h] = iq_dot4(q, (h ? y1 : y0) + Q8K_QS, neg + 4 * h, h ? sc1 : sc0, sm01, sm23);
    }
    /* block scale d * (2s + 1) / 8 */
    const float d0 = 0.125f * ld_f32(y0) * h2f(ld_u16(x0 + offsetof(gm_block_iq2_xxs, d)));
    const float d1 = 0.125f * yd1 * h2f(ld_u16(x1 + offsetof(gm_block_iq2_xxs, d)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sums[0]), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sums[1]), acc);
}

static float dot_iq2_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512i t[8];
    load_codes(g_iq2xxs_code, t);
    /* vector j holds rows 8j..8j+7 of the super-block, each code in the 4 words of its qword */
    __m512i rep[4];
    for (int j = 0; j < 4; j++)
        rep[j] = word_repeat_index(8 * j, 2);
    const size_t B = sizeof(gm_block_iq2_xxs);
    __m512 acc = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 2 <= nb; i += 2)
        acc = iq2_xxs_pair(w + i * B, w + (i + 1) * B, a + i * Q8K, a + (i + 1) * Q8K,
                           ld_f32(a + (i + 1) * Q8K), t, rep, acc);
    if (i < nb)
        acc = iq2_xxs_pair(w + i * B, w + i * B, a + i * Q8K, a + i * Q8K, 0.0f, t, rep, acc);
    return _mm512_reduce_add_ps(acc);
}

/* IQ3_XXS, two super-blocks per step as iq2_xxs_pair. */
static inline __m512 iq3_xxs_pair(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0,
                                  const uint8_t *y1, float yd1, const __m512i t[8],
                                  const __m512i rep[2], __m512 acc)
{
    const __m512i vals = _mm512_broadcast_i32x4(ldu128(g_iq3xxs_vals));
    const __m512i m7 = _mm512_set1_epi8(0x07);
    const __m512i shift = _mm512_set1_epi32(0x00030000);
    const __m512i sm01 = pack_scale_mask(0, 2), sm23 = pack_scale_mask(4, 6);
    const uint8_t *q30 = x0 + offsetof(gm_block_iq3_xxs, qs);
    const uint8_t *q31 = x1 + offsetof(gm_block_iq3_xxs, qs);
    uint64_t neg[8];
    __m512i sc0, sc1;
    iq_signs_scales2(join256(ldu256(q30 + GM_QK_K / 4), ldu256(q31 + GM_QK_K / 4)), neg, &sc0,
                     &sc1);
    __m512i sums[2];
    for (int h = 0; h < 2; h++) {
        const uint8_t *q3 = h ? q31 : q30;
        const __m512i codes[2] = {grid_lookup(t, _mm512_cvtepu8_epi16(ldu256(q3))),
                                  grid_lookup(t, _mm512_cvtepu8_epi16(ldu256(q3 + 32)))};
        __m512i q[4];
        for (int j = 0; j < 4; j++) {
            const __m512i c =
                _mm512_srlv_epi16(_mm512_permutexvar_epi16(rep[j & 1], codes[j >> 1]), shift);
            q[j] = _mm512_shuffle_epi8(vals, _mm512_and_si512(c, m7));
        }
        sums[h] = iq_dot4(q, (h ? y1 : y0) + Q8K_QS, neg + 4 * h, h ? sc1 : sc0, sm01, sm23);
    }
    /* block scale d * (2s + 1) / 4 */
    const float d0 = 0.25f * ld_f32(y0) * h2f(ld_u16(x0 + offsetof(gm_block_iq3_xxs, d)));
    const float d1 = 0.25f * yd1 * h2f(ld_u16(x1 + offsetof(gm_block_iq3_xxs, d)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sums[0]), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sums[1]), acc);
}

static float dot_iq3_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512i t[8];
    load_codes(g_iq3xxs_code, t);
    /* vector j holds rows 16j..16j+15 of a half super-block, each code in the 2 words of its
     * dword */
    __m512i rep[2];
    for (int j = 0; j < 2; j++)
        rep[j] = word_repeat_index(16 * j, 1);
    const size_t B = sizeof(gm_block_iq3_xxs);
    __m512 acc = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 2 <= nb; i += 2)
        acc = iq3_xxs_pair(w + i * B, w + (i + 1) * B, a + i * Q8K, a + (i + 1) * Q8K,
                           ld_f32(a + (i + 1) * Q8K), t, rep, acc);
    if (i < nb)
        acc = iq3_xxs_pair(w + i * B, w + i * B, a + i * Q8K, a + i * Q8K, 0.0f, t, rep, acc);
    return _mm512_reduce_add_ps(acc);
}

/* ---- float weights times float32 activations -------------------------------------------- */

/* Four accumulators of 16 lanes; the tail goes through masked loads (masked-off elements are
 * neither read nor faulted on). */
#define FLOAT_DOT(name, LOAD16, LOAD16_MASKED, ESIZE)                                          \
    static float name(const void *wv, const void *av, uint64_t n)                            \
    {                                                                                          \
        const uint8_t *w = wv;                                                                 \
        const float *a = av;                                                                   \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                         \
        __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();                         \
        uint64_t i = 0;                                                                        \
        for (; i + 64 <= n; i += 64) {                                                         \
            acc0 = _mm512_fmadd_ps(LOAD16(w + (i + 0) * ESIZE), _mm512_loadu_ps(a + i), acc0); \
            acc1 = _mm512_fmadd_ps(LOAD16(w + (i + 16) * ESIZE), _mm512_loadu_ps(a + i + 16),  \
                                   acc1);                                                      \
            acc2 = _mm512_fmadd_ps(LOAD16(w + (i + 32) * ESIZE), _mm512_loadu_ps(a + i + 32),  \
                                   acc2);                                                      \
            acc3 = _mm512_fmadd_ps(LOAD16(w + (i + 48) * ESIZE), _mm512_loadu_ps(a + i + 48),  \
                                   acc3);                                                      \
        }                                                                                      \
        for (; i + 16 <= n; i += 16)                                                           \
            acc0 = _mm512_fmadd_ps(LOAD16(w + i * ESIZE), _mm512_loadu_ps(a + i), acc0);       \
        if (i < n) {                                                                           \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                             \
            acc1 = _mm512_fmadd_ps(LOAD16_MASKED(m, w + i * ESIZE),                           \
                                   _mm512_maskz_loadu_ps(m, a + i), acc1);                     \
        }                                                                                      \
        return _mm512_reduce_add_ps(                                                           \
            _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));              \
    }

static inline __m512 load16_f32(const uint8_t *p)
{
    return _mm512_loadu_ps(p);
}

static inline __m512 load16_f32_masked(__mmask16 m, const uint8_t *p)
{
    return _mm512_maskz_loadu_ps(m, p);
}

static inline __m512 load16_f16(const uint8_t *p)
{
    return _mm512_cvtph_ps(ldu256(p));
}

static inline __m512 load16_f16_masked(__mmask16 m, const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static inline __m512 load16_bf16(const uint8_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ldu256(p)), 16));
}

static inline __m512 load16_bf16_masked(__mmask16 m, const uint8_t *p)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

FLOAT_DOT(dot_f32, load16_f32, load16_f32_masked, 4)
FLOAT_DOT(dot_f16, load16_f16, load16_f16_masked, 2)
FLOAT_DOT(dot_bf16, load16_bf16, load16_bf16_masked, 2)

/* ---- table ------------------------------------------------------------------------------- */

void gm_dot_fill_avx512(gm_dot_fn t[GM_TYPE_COUNT])
{
    for (int e = 0; e < 256; e++)
        g_e8m0_half[e] = gm_e8m0_to_f32_half((uint8_t)e);
    grid_codes(&gm_iq2xxs_grid[0][0], 8, 2, g_iq2xxs_code, g_iq2xxs_vals);
    grid_codes(&gm_iq3xxs_grid[0][0], 4, 3, g_iq3xxs_code, g_iq3xxs_vals);
    t[GM_TYPE_F32] = dot_f32;
    t[GM_TYPE_F16] = dot_f16;
    t[GM_TYPE_BF16] = dot_bf16;
    t[GM_TYPE_Q8_0] = dot_q8_0;
    t[GM_TYPE_Q4_0] = dot_q4_0;
    t[GM_TYPE_IQ4_NL] = dot_iq4_nl;
    t[GM_TYPE_MXFP4] = dot_mxfp4;
    t[GM_TYPE_IQ4_XS] = dot_iq4_xs;
    t[GM_TYPE_IQ2_XXS] = dot_iq2_xxs;
    t[GM_TYPE_IQ3_XXS] = dot_iq3_xxs;
    t[GM_TYPE_TQ2_0] = dot_tq2_0;
    gm_dot_fill_avx512_k(t);
    gm_dot_fill_avx512_iq2(t, false);
    gm_dot_fill_avx512_iq3s(t, false);
    gm_dot_fill_avx512_iq1(t, false);
}
/* ---- the avx512vbmi level: VBMI and BITALG on top ------------------------------------------ */

#if defined(GM_KERNELS_HAVE_AVX512VBMI)


/* The grid rows of IQ2_XXS (8 bytes, 2-bit value indices) and IQ3_XXS (4 bytes, 3-bit) as
 * compact codes, the index of row byte b at bit width * b, split into a table of the low bytes
 * and one of the high bytes (256 each, 4 vectors: vpermt2b looks up 64 rows in two steps).
 * Filled once in gm_dot_fill_avx512vbmi. */
static uint8_t g_iq2xxs_lo[256], g_iq2xxs_hi[256], g_iq3xxs_lo[256], g_iq3xxs_hi[256];
/* The values, index i at byte i for i < 16 and repeated: vpermb reads 6 index bits, so the bits
 * above an index's own (those of the next index) must not matter. */
static uint8_t g_iq2xxs_vals64[64], g_iq3xxs_vals64[64];
/* vpermw indices of iq_signs_scales2_vbmi: word 2 (8h + sb) holds the scale of sub-block sb of
 * super-block h; vector 2h + p picks, as pack_scale_mask(4p, 4p + 2), in 128-bit lane L 4 words
 * of sub-block 4p + (L >= 2), then 4 of sub-block 4p + 2 + (L >= 2). */
static int16_t g_scale_idx[4][32];
/* The 64 sign bytes of two super-blocks (byte 8v + k: group k of the 8 of vector v = 4h + j)
 * transposed by vpermb (g_sign_t: byte 8k + v from byte 8v + k), so that qword k holds group k
 * of every vector; vpshufbitqmb with g_sign_bits[v] (byte 8k + i: 8v + i) then gives vector v's
 * mask, element 8k + i from bit i of its group's byte. */
static uint8_t g_sign_t[64], g_sign_bits[8][64];

static void grid_codes_compact(const uint8_t *grid, int row_bytes, int width, const uint8_t *vals,
                               uint8_t *lo, uint8_t *hi, uint8_t *vals64)
{
    for (int r = 0; r < 256; r++) {
        uint32_t c = 0;
        for (int b = 0; b < row_bytes; b++) {
            int k = 0;
            while (vals[k] != grid[r * row_bytes + b])
                k++;
            c |= (uint32_t)k << (width * b);
        }
        lo[r] = (uint8_t)c;
        hi[r] = (uint8_t)(c >> 8);
    }
    for (int i = 0; i < 64; i++)
        vals64[i] = vals[i % (1 << width)];
}

/* The signs and scales of two super-blocks from their 16 sign and scale words aux (as
 * iq_signs_scales2). Signs: the four 7-bit fields of each word to bytes by vpmultishiftqb (bit 7
 * then holds the next field's bit 0), the parity of the 7 as bit 7 by vpopcntb (bit 7 xor the
 * popcount of all 8 bits), returned in place: qword v holds the 64 sign bits of vector v = 4h + j
 * in element order. Scales 2s + 1: the four vectors that vpdpwssd takes after the packs of
 * iq_dot4 (vpermw from the 32-bit scales, see pack_scale_mask), sc[2h] for vectors 0, 1 of
 * super-block h, sc[2h + 1] for 2, 3. */
VBMI static inline __m512i iq_signs_raw_vbmi(__m512i aux, __m512i sc[4])
{
    const __m512i ctl = _mm512_set1_epi64(0x352e2720150e0700ll); /* 0,7,14,21, 32,39,46,53 */
    const __m512i s = _mm512_multishift_epi64_epi8(ctl, aux);
    const __m512i p = _mm512_popcnt_epi8(s);
    /* s ^ (p << 7 & 0x80 in every byte) */
    const __m512i sg = _mm512_ternarylogic_epi32(s, _mm512_slli_epi16(p, 7),
                                                 _mm512_set1_epi8((char)0x80), 0x78);
    /* ((aux >> 27) & 0x1e) | 1 = 2 * (aux >> 28) + 1 */
    const __m512i ls = _mm512_ternarylogic_epi32(
        _mm512_srli_epi32(aux, 27), _mm512_set1_epi32(0x1e), _mm512_set1_epi32(1), 0xea);
    for (int k = 0; k < 4; k++)
        sc[k] = _mm512_permutexvar_epi16(ldu512(g_scale_idx[k]), ls);
    return sg;
}

/* iq_signs_raw_vbmi with the sign bytes transposed for iq_dot4_vbmi (g_sign_t). */
VBMI static inline __m512i iq_signs_scales2_vbmi(__m512i aux, __m512i sc[4])
{
    return _mm512_permutexvar_epi8(ldu512(g_sign_t), iq_signs_raw_vbmi(aux, sc));
}

/* iq_dot4 with the scales in pair order (sc01, sc23) and the sign masks of vector 4h + j made
 * from the transposed sign bytes sgt by one vpshufbitqmb each (g_sign_bits), in mask registers:
 * no round trip through memory or general registers (gcc moved the stored masks of iq_dot4
 * through general registers, ~3 instructions a mask). */
VBMI static inline __m512i iq_dot4_vbmi(const __m512i q[4], const uint8_t *q8, __m512i sgt, int h,
                                        __m512i sc01, __m512i sc23)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i d[4];
    for (int j = 0; j < 4; j++) {
        const __m512i y8 = ldu512(q8 + 64 * j);
        const __mmask64 neg = _mm512_bitshuffle_epi64_mask(sgt, ldu512(g_sign_bits[4 * h + j]));
        d[j] = _mm512_dpbusd_epi32(z, q[j], _mm512_mask_sub_epi8(y8, neg, z, y8));
    }
    const __m512i s = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d[0], d[1]), sc01);
    return _mm512_dpwssd_epi32(s, _mm512_packs_epi32(d[2], d[3]), sc23);
}

/* vpermt2b indices of iq2_xxs_pair_vbmi: the 64 grid indices of two super-blocks (h = 0, 1)
 * from their 128 qs bytes, in the order that makes vpunpcklbw / vpunpckhbw of the looked-up code
 * bytes give super-block h's row codes with those of rows 8m + k (m < 4) in word m of qword k:
 * index byte 16 (k / 2) + 8h + 4 (k % 2) + m. */
static uint8_t g_iq2xxs_perm[64];

/* IQ2_XXS, two super-blocks per step as iq2_xxs_pair, in two halves software-pipelined by
 * dot_iq2_xxs_vbmi (the front of the next pair is issued before the back of this one, so that
 * the long chains of loads, permutes and lookups overlap the products; one pair per iteration
 * left the kernel bound by latency, not by instruction count). Front: the 64 grid indices of
 * both looked up at once (grid_lookup64, in g_iq2xxs_perm's order), the code bytes interleaved
 * (vpunpck*bw) so that a qword holds the codes of 4 rows, one from each output vector of its
 * super-block; the sign bytes (iq_signs_raw_vbmi) stored to neg, the mask of vector v being
 * qword v (read back by kmovq); the scales. */
VBMI static inline void iq2_xxs_front_vbmi(const uint8_t *x0, const uint8_t *x1,
                                           const __m512i t[8], __mmask64 *neg, __m512i codes[2],
                                           __m512i sc[4])
{
    const __m512i odd =
        _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i a0 = ldu512(x0 + offsetof(gm_block_iq2_xxs, qs));
    const __m512i a1 = ldu512(x1 + offsetof(gm_block_iq2_xxs, qs));
    const __m512i idx = _mm512_permutex2var_epi8(a0, ldu512(g_iq2xxs_perm), a1);
    const __m512i aux = _mm512_permutex2var_epi32(a0, odd, a1);
    _mm512_store_si512(neg, iq_signs_raw_vbmi(aux, sc));
    __m512i lo, hi;
    grid_lookup64(t, idx, &lo, &hi);
    codes[0] = _mm512_unpacklo_epi8(lo, hi);
    codes[1] = _mm512_unpackhi_epi8(lo, hi);
}

/* Back, one token: the products as iq_dot4 and the block scales; neg is read through a pointer
 * gcc cannot follow (see dot_iq2_xxs_vbmi), so that each mask is one kmovq from memory:
 * otherwise gcc takes the stored vector apart in registers (vmovq, vpextrq, valignq, then kmovq
 * from a general register, about 3 instructions a mask). */
VBMI static inline __m512 iq2_xxs_token_vbmi(const uint8_t *x0, const uint8_t *x1,
                                             const uint8_t *y0, const uint8_t *y1, float yd1,
                                             const __m512i q[8], const __m512i sc[4],
                                             __mmask64 *neg, __m512 acc)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i sums[2];
    for (int h = 0; h < 2; h++) {
        const uint8_t *q8 = (h ? y1 : y0) + Q8K_QS;
        __m512i d[4];
        for (int j = 0; j < 4; j++) {
            const __m512i y8 = ldu512(q8 + 64 * j);
            const __mmask64 m = _load_mask64(&neg[4 * h + j]);
            d[j] = _mm512_dpbusd_epi32(z, q[4 * h + j], _mm512_mask_sub_epi8(y8, m, z, y8));
        }
        const __m512i s = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d[0], d[1]), sc[2 * h]);
        sums[h] = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(d[2], d[3]), sc[2 * h + 1]);
    }
    const float d0 = 0.125f * ld_f32(y0) * h2f(ld_u16(x0 + offsetof(gm_block_iq2_xxs, d)));
    const float d1 = 0.125f * yd1 * h2f(ld_u16(x1 + offsetof(gm_block_iq2_xxs, d)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sums[0]), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sums[1]), acc);
}

/* Back of one token: values, then products. */
VBMI static inline __m512 iq2_xxs_back_vbmi(const uint8_t *x0, const uint8_t *x1,
                                            const uint8_t *y0, const uint8_t *y1, float yd1,
                                            const __m512i codes[2], const __m512i sc[4],
                                            __mmask64 *neg, __m512 acc)
{
    __m512i q[8];
    iq2_values_vbmi(g_iq2xxs_vals64, codes, q);
    return iq2_xxs_token_vbmi(x0, x1, y0, y1, yd1, q, sc, neg, acc);
}

VBMI static float dot_mxfp4_vbmi(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n, LUT4_MXFP4, 1);
}

VBMI static float dot_iq4_nl_vbmi(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n, LUT4_IQ4_NL, 1);
}

VBMI static void dot_multi_mxfp4_vbmi(const void *w, const void *a, uint64_t a_stride,
                                      uint64_t n, float *out)
{
    dot_lut4_rows(w, a, a_stride, n, LUT4_MXFP4, 1, GM_DOT_MULTI, out);
}

VBMI static void dot_multi_iq4_nl_vbmi(const void *w, const void *a, uint64_t a_stride,
                                       uint64_t n, float *out)
{
    dot_lut4_rows(w, a, a_stride, n, LUT4_IQ4_NL, 1, GM_DOT_MULTI, out);
}

VBMI static float dot_iq2_xxs_vbmi(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    if (nb == 0)
        return 0.0f;
    __m512i t[8];
    load_codes64(g_iq2xxs_lo, g_iq2xxs_hi, t);
    const size_t B = sizeof(gm_block_iq2_xxs);
    /* the sign bytes of this pair and the next, stored through buf, read through neg */
    __mmask64 buf[16] __attribute__((aligned(64)));
    __mmask64 *neg = buf;
    __asm__("" : "+r"(neg));
    __m512i codes[2], sc[4];
    /* pair p: super-blocks 2p and 2p + 1 (a last odd one paired with itself, weighted 0) */
    const uint64_t np = (nb + 1) / 2;
    iq2_xxs_front_vbmi(w, w + (nb > 1 ? B : 0), t, buf, codes, sc);
    __m512 acc = _mm512_setzero_ps();
    uint64_t p = 0;
    for (; p + 1 < np; p++) { /* pair p is whole, pair p + 1 exists */
        const uint64_t i = 2 * p, k = i + 2;
        __m512i next_codes[2], next_sc[4];
        iq2_xxs_front_vbmi(w + k * B, w + (k + 1 < nb ? k + 1 : k) * B, t,
                           buf + 8 * ((p + 1) & 1), next_codes, next_sc);
        acc = iq2_xxs_back_vbmi(w + i * B, w + (i + 1) * B, a + i * Q8K, a + (i + 1) * Q8K,
                                ld_f32(a + (i + 1) * Q8K), codes, sc, neg + 8 * (p & 1), acc);
        codes[0] = next_codes[0];
        codes[1] = next_codes[1];
        for (int j = 0; j < 4; j++)
            sc[j] = next_sc[j];
    }
    const uint64_t i = 2 * p;
    if (i + 1 < nb)
        acc = iq2_xxs_back_vbmi(w + i * B, w + (i + 1) * B, a + i * Q8K, a + (i + 1) * Q8K,
                                ld_f32(a + (i + 1) * Q8K), codes, sc, neg + 8 * (p & 1), acc);
    else
        acc = iq2_xxs_back_vbmi(w + i * B, w + i * B, a + i * Q8K, a + i * Q8K, 0.0f, codes, sc,
                                neg + 8 * (p & 1), acc);
    return _mm512_reduce_add_ps(acc);
}

/* Two IQ2_XXS rows against one activation row: per pair of super-blocks both rows' fronts, then
 * both backs, each row's steps those of dot_iq2_xxs_vbmi in its order (so each result equals it
 * bit for bit). No software pipeline: the two rows' independent chains fill the core (a
 * pipelined form ran out of registers and was slower). */
VBMI static void dot_rows2_iq2_xxs_vbmi(const void *w0v, const void *w1v, const void *av,
                                        uint64_t n, float out[2])
{
    const uint8_t *wr[2] = {w0v, w1v}, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512i t[8];
    load_codes64(g_iq2xxs_lo, g_iq2xxs_hi, t);
    const size_t B = sizeof(gm_block_iq2_xxs);
    __mmask64 buf[16] __attribute__((aligned(64)));
    __mmask64 *neg = buf; /* read back through a pointer gcc cannot follow (dot_iq2_xxs_vbmi) */
    __asm__("" : "+r"(neg));
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (uint64_t i = 0; i < nb; i += 2) {
        const bool whole = i + 1 < nb; /* else the last odd one paired with itself, weighted 0 */
        __m512i codes[2][2], sc[2][4];
        for (int r = 0; r < 2; r++) {
            const uint8_t *x0 = wr[r] + i * B, *x1 = whole ? x0 + B : x0;
            iq2_xxs_front_vbmi(x0, x1, t, buf + 8 * r, codes[r], sc[r]);
        }
        const uint8_t *y0 = a + i * Q8K, *y1 = whole ? y0 + Q8K : y0;
        for (int r = 0; r < 2; r++) {
            const uint8_t *x0 = wr[r] + i * B, *x1 = whole ? x0 + B : x0;
            acc[r] = iq2_xxs_back_vbmi(x0, x1, y0, y1, whole ? ld_f32(y1) : 0.0f, codes[r], sc[r],
                                       neg + 8 * r, acc[r]);
        }
    }
    out[0] = _mm512_reduce_add_ps(acc[0]);
    out[1] = _mm512_reduce_add_ps(acc[1]);
}

/* GM_DOT_MULTI activation rows against one IQ2_XXS row: per pair of super-blocks the front
 * and the values once, then dot_iq2_xxs_vbmi's per-token step (iq2_xxs_token_vbmi) for each
 * token in the same order, so out[t] equals it bit for bit. No pipelining: the 4 tokens' products
 * give the lookups enough independent work. */
VBMI static void dot_multi_iq2_xxs_vbmi(const void *wv, const void *av, uint64_t a_stride,
                                        uint64_t n, float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512i t[8];
    load_codes64(g_iq2xxs_lo, g_iq2xxs_hi, t);
    const size_t B = sizeof(gm_block_iq2_xxs);
    __mmask64 buf[8] __attribute__((aligned(64)));
    __mmask64 *neg = buf;
    __asm__("" : "+r"(neg));
    __m512 acc[GM_DOT_MULTI];
    for (int k = 0; k < GM_DOT_MULTI; k++)
        acc[k] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i += 2) {
        const bool whole = i + 1 < nb; /* else the last odd one paired with itself, weighted 0 */
        const uint8_t *x0 = w + i * B, *x1 = whole ? x0 + B : x0;
        __m512i codes[2], sc[4], q[8];
        iq2_xxs_front_vbmi(x0, x1, t, buf, codes, sc);
        iq2_values_vbmi(g_iq2xxs_vals64, codes, q);
        for (int k = 0; k < GM_DOT_MULTI; k++) {
            const uint8_t *y0 = a + k * a_stride + i * Q8K, *y1 = whole ? y0 + Q8K : y0;
            acc[k] = iq2_xxs_token_vbmi(x0, x1, y0, y1, whole ? ld_f32(y1) : 0.0f, q, sc, neg,
                                        acc[k]);
        }
    }
    for (int k = 0; k < GM_DOT_MULTI; k++)
        out[k] = _mm512_reduce_add_ps(acc[k]);
}

/* IQ3_XXS, two super-blocks per step: per super-block its 64 indices looked up at once, then
 * per vector of 16 rows the codes of rows 2k, 2k + 1 to qword k (bytes 0-1 and 2-3; vpermt2b
 * indices g_iq3xxs_rows[j]: [lo, hi, lo, hi] of rows 16j + 2k and 16j + 2k + 1). Weight side of
 * a pair: the values q[4h + j] of vector j of super-block h, the transposed sign bytes and the
 * scales. */
static uint8_t g_iq3xxs_rows[4][64];

VBMI static inline void iq3_xxs_unpack_vbmi(const uint8_t *x0, const uint8_t *x1,
                                            const __m512i t[8], __m512i q[8], __m512i *sgt,
                                            __m512i sc[4])
{
    const __m512i vals = ldu512(g_iq3xxs_vals64);
    const __m512i ctl = _mm512_set1_epi64(0x1916131009060300ll); /* 3b, 16 + 3b */
    const uint8_t *q30 = x0 + offsetof(gm_block_iq3_xxs, qs);
    const uint8_t *q31 = x1 + offsetof(gm_block_iq3_xxs, qs);
    *sgt = iq_signs_scales2_vbmi(join256(ldu256(q30 + GM_QK_K / 4), ldu256(q31 + GM_QK_K / 4)), sc);
    for (int h = 0; h < 2; h++) {
        __m512i lo, hi;
        grid_lookup64(t, ldu512(h ? q31 : q30), &lo, &hi);
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_permutex2var_epi8(lo, ldu512(g_iq3xxs_rows[j]), hi);
            q[4 * h + j] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(ctl, c), vals);
        }
    }
}

/* One token of a pair (the second super-block weighted by yd1, 0 for a last odd one paired with
 * itself). */
VBMI static inline __m512 iq3_xxs_token_vbmi(const uint8_t *x0, const uint8_t *x1,
                                             const uint8_t *y0, const uint8_t *y1, float yd1,
                                             const __m512i q[8], __m512i sgt, const __m512i sc[4],
                                             __m512 acc)
{
    const __m512i s0 = iq_dot4_vbmi(q, y0 + Q8K_QS, sgt, 0, sc[0], sc[1]);
    const __m512i s1 = iq_dot4_vbmi(q + 4, y1 + Q8K_QS, sgt, 1, sc[2], sc[3]);
    const float d0 = 0.25f * ld_f32(y0) * h2f(ld_u16(x0 + offsetof(gm_block_iq3_xxs, d)));
    const float d1 = 0.25f * yd1 * h2f(ld_u16(x1 + offsetof(gm_block_iq3_xxs, d)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(s0), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(s1), acc);
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one IQ3_XXS row: each pair
 * unpacked once, then the per-token step, so every token's result equals the one-token call's
 * bit for bit. */
VBMI static inline __attribute__((always_inline)) void
iq3_xxs_rows_vbmi(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, int n_tok,
                  float *out)
{
    const uint64_t nb = n / GM_QK_K;
    __m512i t[8];
    load_codes64(g_iq3xxs_lo, g_iq3xxs_hi, t);
    const size_t B = sizeof(gm_block_iq3_xxs);
    __m512 acc[GM_DOT_MULTI];
    for (int k = 0; k < n_tok; k++)
        acc[k] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i += 2) {
        const bool whole = i + 1 < nb; /* else the last odd one paired with itself, weighted 0 */
        const uint8_t *x0 = w + i * B, *x1 = whole ? x0 + B : x0;
        __m512i q[8], sgt, sc[4];
        iq3_xxs_unpack_vbmi(x0, x1, t, q, &sgt, sc);
        for (int k = 0; k < n_tok; k++) {
            const uint8_t *y0 = a + k * a_stride + i * Q8K, *y1 = whole ? y0 + Q8K : y0;
            acc[k] = iq3_xxs_token_vbmi(x0, x1, y0, y1, whole ? ld_f32(y1) : 0.0f, q, sgt, sc,
                                        acc[k]);
        }
    }
    for (int k = 0; k < n_tok; k++)
        out[k] = _mm512_reduce_add_ps(acc[k]);
}

GM_ROW_KERNELS(VBMI, dot_iq3_xxs_vbmi, dot_multi_iq3_xxs_vbmi, iq3_xxs_rows_vbmi)

void gm_dot_fill_avx512vbmi(gm_dot_fn t[GM_TYPE_COUNT])
{
    /* the avx512 table was filled first (dispatch.c): g_iq2xxs_vals and g_iq3xxs_vals are set */
    grid_codes_compact(&gm_iq2xxs_grid[0][0], 8, 2, g_iq2xxs_vals, g_iq2xxs_lo, g_iq2xxs_hi,
                       g_iq2xxs_vals64);
    grid_codes_compact(&gm_iq3xxs_grid[0][0], 4, 3, g_iq3xxs_vals, g_iq3xxs_lo, g_iq3xxs_hi,
                       g_iq3xxs_vals64);
    for (int k = 0; k < 4; k++)
        for (int w = 0; w < 32; w++) {
            const int l = w / 8, sb = 4 * (k % 2) + (w % 8 < 4 ? 0 : 2) + (l >= 2);
            g_scale_idx[k][w] = (int16_t)(2 * (8 * (k / 2) + sb));
        }
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 8; k++)
            for (int m = 0; m < 4; m++) {
                const int r = 8 * m + k; /* row r of super-block h: byte 8 (r / 4) + r % 4 */
                g_iq2xxs_perm[16 * (k / 2) + 8 * h + 4 * (k % 2) + m] =
                    (uint8_t)(64 * h + 8 * (r / 4) + r % 4);
            }
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 64; i++) {
            const int r = 16 * j + 2 * (i / 8) + (i % 8 >= 2);
            g_iq3xxs_rows[j][i] = (uint8_t)(i % 2 == 1 ? 64 + r : r);
        }
    for (int v = 0; v < 8; v++)
        for (int k = 0; k < 8; k++)
            g_sign_t[8 * k + v] = (uint8_t)(8 * v + k);
    for (int v = 0; v < 8; v++)
        for (int e = 0; e < 64; e++)
            g_sign_bits[v][e] = (uint8_t)(8 * v + e % 8);
    t[GM_TYPE_MXFP4] = dot_mxfp4_vbmi;
    t[GM_TYPE_IQ4_NL] = dot_iq4_nl_vbmi;
    t[GM_TYPE_IQ2_XXS] = dot_iq2_xxs_vbmi;
    t[GM_TYPE_IQ3_XXS] = dot_iq3_xxs_vbmi;
    gm_dot_fill_avx512_iq2(t, true);
    gm_dot_fill_avx512_iq3s(t, true);
    gm_dot_fill_avx512_iq1(t, true);
}

void gm_dot_multi_fill_avx512vbmi(gm_dot_multi_fn t[GM_TYPE_COUNT])
{
    t[GM_TYPE_IQ2_XXS] = dot_multi_iq2_xxs_vbmi;
    t[GM_TYPE_IQ3_XXS] = dot_multi_iq3_xxs_vbmi;
    t[GM_TYPE_MXFP4] = dot_multi_mxfp4_vbmi;
    t[GM_TYPE_IQ4_NL] = dot_multi_iq4_nl_vbmi;
    gm_dot_multi_fill_avx512_iq2(t, true);
    gm_dot_multi_fill_avx512_iq3s(t, true);
    gm_dot_multi_fill_avx512_iq1(t, true);
}

void gm_dot_rows2_fill_avx512vbmi(gm_dot_rows2_fn t[GM_TYPE_COUNT])
{
    t[GM_TYPE_IQ2_XXS] = dot_rows2_iq2_xxs_vbmi;
    gm_dot_rows2_fill_avx512_iq2(t, true);
    gm_dot_rows2_fill_avx512_iq3s(t, true);
    gm_dot_rows2_fill_avx512_iq1(t, true);
}

#endif /* GM_KERNELS_HAVE_AVX512VBMI */

void gm_dot_rows2_fill_avx512(gm_dot_rows2_fn t[GM_TYPE_COUNT])
{
    gm_dot_rows2_fill_avx512_iq2(t, false);
    gm_dot_rows2_fill_avx512_iq3s(t, false);
    gm_dot_rows2_fill_avx512_iq1(t, false);
}

void gm_dot_multi_fill_avx512(gm_dot_multi_fn t[GM_TYPE_COUNT])
{
    t[GM_TYPE_Q8_0] = dot_multi_q8_0;
    t[GM_TYPE_IQ4_XS] = dot_multi_iq4_xs;
    t[GM_TYPE_MXFP4] = dot_multi_mxfp4;
    t[GM_TYPE_IQ4_NL] = dot_multi_iq4_nl;
    t[GM_TYPE_Q4_0] = dot_multi_q4_0;
    t[GM_TYPE_TQ2_0] = dot_multi_tq2_0;
    gm_dot_multi_fill_avx512_k(t);
    gm_dot_multi_fill_avx512_iq2(t, false);
    gm_dot_multi_fill_avx512_iq3s(t, false);
    gm_dot_multi_fill_avx512_iq1(t, false);
}
