/* AVX-512 (F, BW, VL, VNNI; with AVX2, FMA, F16C) dot products; compiled with those target
 * flags and called only when dispatch.c has seen the features (see dot_impl.h). Types not
 * specialised here keep the AVX2 kernels.
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

/* ---- helpers ------------------------------------------------------------------------------- */

static inline uint16_t ld_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t ld_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float ld_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

static inline __m512i ldu512(const void *p)
{
    return _mm512_loadu_si512(p);
}

static inline __m256i ldu256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i ldu128(const void *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

/* 32 bytes at p in both 256-bit halves. */
static inline __m512i bcast256(const void *p)
{
    return _mm512_broadcast_i64x4(ldu256(p));
}

/* 256-bit a in the low half, b in the high half. */
static inline __m512i join256(__m256i a, __m256i b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/* Per-16-bit-lane counts: lo in the low 256 bits, hi in the high 256 bits. */
static inline __m512i halves16(short lo, short hi)
{
    return join256(_mm256_set1_epi16(lo), _mm256_set1_epi16(hi));
}

static inline __m512i halves32(int lo, int hi)
{
    return join256(_mm256_set1_epi32(lo), _mm256_set1_epi32(hi));
}

/* y negated where the byte of w is negative (w's sign applied to y). */
static inline __m512i apply_sign(__m512i y, __m512i w)
{
    return _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(w), _mm512_setzero_si512(), y);
}

/* Signed bytes w times signed bytes y, summed in fours into 16 int32. */
static inline __m512i dot_ss8(__m512i w, __m512i y)
{
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), apply_sign(y, w));
}

static inline float hsum256_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A byte shuffle that, from 8 int16 repeated in every 128-bit lane, broadcasts element lo to
 * lanes 0-1 and element hi to lanes 2-3 (the scales of two consecutive 32-element sub-blocks). */
static inline __m512i scale_pair_mask(int lo, int hi)
{
    const __m256i l = _mm256_set1_epi16((short)((2 * lo + 1) << 8 | (2 * lo)));
    const __m256i h = _mm256_set1_epi16((short)((2 * hi + 1) << 8 | (2 * hi)));
    return join256(l, h);
}

/* vpermw indices: 128-bit lane L of the result holds int16 element first + L. */
static inline __m512i group4_index(int first)
{
    return _mm512_set_epi16(
        (short)(first + 3), (short)(first + 3), (short)(first + 3), (short)(first + 3),
        (short)(first + 3), (short)(first + 3), (short)(first + 3), (short)(first + 3),
        (short)(first + 2), (short)(first + 2), (short)(first + 2), (short)(first + 2),
        (short)(first + 2), (short)(first + 2), (short)(first + 2), (short)(first + 2),
        (short)(first + 1), (short)(first + 1), (short)(first + 1), (short)(first + 1),
        (short)(first + 1), (short)(first + 1), (short)(first + 1), (short)(first + 1),
        (short)first, (short)first, (short)first, (short)first, (short)first, (short)first,
        (short)first, (short)first);
}

/* E8M0 exponent -> 2^(e-127)/2 (gm_e8m0_to_f32_half), one load instead of a branch. Filled
 * once in gm_dot_fill_avx512. */
static float g_e8m0_half[256];

/* A grid row (8 or 4 bytes) as one integer, for building vectors without a memory round trip. */
static inline long long grid8(const uint8_t *row)
{
    uint64_t v;
    memcpy(&v, row, 8);
    return (long long)v;
}

static inline int grid4(const uint8_t *row)
{
    uint32_t v;
    memcpy(&v, row, 4);
    return (int)v;
}

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

enum { SCALE_F16, SCALE_E8M0 };

/* Dot of a row of 32-element 4-bit table blocks (block_bytes each, the scale at offset 0 as
 * f16 or E8M0, the nibbles at qs_off) with Q8_0 activations. */
static inline float dot_lut4_row(const uint8_t *w, const uint8_t *a, uint64_t nb,
                                 const int8_t *values, size_t block_bytes, size_t qs_off,
                                 int scale_kind)
{
    const __m512i table = _mm512_broadcast_i32x4(ldu128(values));
    const uint8_t *asc = a + nb * Q80; /* GM_ACT_Q8_0_SCALES */
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const uint8_t *w0 = w + i * block_bytes, *a0 = a + i * Q80;
        const __m512i v0 = lut4_pair(table, w0 + qs_off, w0 + block_bytes + qs_off);
        const __m512i v1 =
            lut4_pair(table, w0 + 2 * block_bytes + qs_off, w0 + 3 * block_bytes + qs_off);
        const __m512i y0 = join256(ldu256(a0 + 2), ldu256(a0 + Q80 + 2));
        const __m512i y1 = join256(ldu256(a0 + 2 * Q80 + 2), ldu256(a0 + 3 * Q80 + 2));
        const __m128 ws = scale_kind == SCALE_E8M0
                              ? _mm_set_ps(g_e8m0_half[w0[3 * block_bytes]],
                                           g_e8m0_half[w0[2 * block_bytes]],
                                           g_e8m0_half[w0[block_bytes]], g_e8m0_half[w0[0]])
                              : f16x4(w0, block_bytes);
        __m512 s01, s23;
        spread4(_mm_mul_ps(ws, _mm_loadu_ps((const float *)(asc + 4 * i))), &s01, &s23);
        acc0 = _mm512_fmadd_ps(s01, _mm512_cvtepi32_ps(dot_ss8(v0, y0)), acc0);
        acc1 = _mm512_fmadd_ps(s23, _mm512_cvtepi32_ps(dot_ss8(v1, y1)), acc1);
    }
    for (; i < nb; i++) { /* one block: the pair helper with the block twice, half used */
        const uint8_t *w0 = w + i * block_bytes, *a0 = a + i * Q80;
        const __m512i v = lut4_pair(table, w0 + qs_off, w0 + qs_off);
        const __m512i y = _mm512_zextsi256_si512(ldu256(a0 + 2));
        const float ws = scale_kind == SCALE_E8M0 ? g_e8m0_half[w0[0]] : h2f(ld_u16(w0));
        const __m512 s = _mm512_set1_ps(ws * ld_f32(asc + 4 * i));
        acc0 = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot_ss8(v, y)), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

static const int8_t k_values_q4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1,
                                         0,  1,  2,  3,  4,  5,  6,  7};

static float dot_mxfp4(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n / GM_QK_MXFP4, gm_kvalues_mxfp4, sizeof(gm_block_mxfp4), 1,
                        SCALE_E8M0);
}

static float dot_iq4_nl(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n / GM_QK4_NL, gm_kvalues_iq4nl, sizeof(gm_block_iq4_nl), 2,
                        SCALE_F16);
}

static float dot_q4_0(const void *w, const void *a, uint64_t n)
{
    return dot_lut4_row(w, a, n / GM_QK4_0, k_values_q4_0, sizeof(gm_block_q4_0), 2, SCALE_F16);
}

/* ---- Q8_K activations ------------------------------------------------------------------- */

#define Q8K sizeof(gm_block_q8_K)
#define Q8K_QS 4u      /* offsetof(gm_block_q8_K, qs) */
#define Q8K_BSUMS 260u /* offsetof(gm_block_q8_K, bsums) */

/* Q4_K/Q5_K packed scales -> u[0..1] the 8 scales, u[2..3] the 8 mins, one byte each. */
static inline void k4_scales(const uint8_t *p, uint32_t u[4])
{
    memcpy(u, p, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins03 = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins03;
    u[0] &= 0x3f3f3f3fu;
}

/* sum over sub-blocks of min[sb] * (activation sum of sub-block sb), as 8 int32 to be added. */
static inline __m256i k4_min_sums(const uint32_t u[4], const uint8_t *y)
{
    /* each min twice: one per 16-element group of the sub-block */
    const __m128i mins = _mm_shuffle_epi8(_mm_set_epi32(0, 0, (int)u[3], (int)u[2]),
                                          _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1,
                                                       0, 0));
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(mins), ldu256(y + Q8K_BSUMS));
}

static float dot_q4_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sh = halves16(0, 4);
    const __m512i sm[4] = {scale_pair_mask(0, 1), scale_pair_mask(2, 3), scale_pair_mask(4, 5),
                           scale_pair_mask(6, 7)};
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q4_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q4_K, d)));
        const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q4_K, dmin)));
        uint32_t u[4];
        k4_scales(x + offsetof(gm_block_q4_K, scales), u);
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_min_sums(u, y)), acc_m);
        const __m512i sc = _mm512_broadcast_i32x4(
            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
        const uint8_t *q4 = x + offsetof(gm_block_q4_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(bcast256(q4 + 32 * j), sh), m4);
            const __m512i p = _mm512_maddubs_epi16(q, ldu512(q8 + 64 * j));
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_shuffle_epi8(sc, sm[j]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc) + hsum256_ps(acc_m);
}

static float dot_q5_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    const __m512i sh = halves16(0, 4);
    const __m512i sm[4] = {scale_pair_mask(0, 1), scale_pair_mask(2, 3), scale_pair_mask(4, 5),
                           scale_pair_mask(6, 7)};
    /* rotate bit 2j (low half) and 2j+1 (high half) of every byte to bit 4 */
    const __m512i rot[4] = {halves32(4, 3), halves32(2, 1), halves32(0, 31), halves32(30, 29)};
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q5_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q5_K, d)));
        const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q5_K, dmin)));
        uint32_t u[4];
        k4_scales(x + offsetof(gm_block_q5_K, scales), u);
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_min_sums(u, y)), acc_m);
        const __m512i sc = _mm512_broadcast_i32x4(
            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
        const uint8_t *q5 = x + offsetof(gm_block_q5_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        const __m512i hb = bcast256(x + offsetof(gm_block_q5_K, qh));
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bcast256(q5 + 32 * j), sh), m4);
            const __m512i hi = _mm512_and_si512(_mm512_rolv_epi32(hb, rot[j]), bit4);
            const __m512i p = _mm512_maddubs_epi16(_mm512_or_si512(lo, hi), ldu512(q8 + 64 * j));
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_shuffle_epi8(sc, sm[j]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc) + hsum256_ps(acc_m);
}

static float dot_q6_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    /* bits (0,1) | (2,3) and (4,5) | (6,7) of qh to bits 4,5 */
    const __m512i rot_a = halves32(4, 2), rot_b = halves32(0, 30);
    const __m512i gidx[4] = {group4_index(0), group4_index(4), group4_index(8), group4_index(12)};
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q6_K), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_q6_K, d)));
        const __m256i sc16 = _mm256_cvtepi8_epi16(ldu128(x + offsetof(gm_block_q6_K, scales)));
        const __m512i scz = _mm512_zextsi256_si512(sc16);
        /* the codes are q - 32: take 32 * sum_g scale_g * bsum_g out once */
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, ldu256(y + Q8K_BSUMS)), 5);
        const uint8_t *ql = x + offsetof(gm_block_q6_K, ql);
        const uint8_t *qh = x + offsetof(gm_block_q6_K, qh);
        const uint8_t *q8 = y + Q8K_QS;
        __m512i sumi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));
        for (int j = 0; j < 2; j++) {
            const __m512i l = ldu512(ql + 64 * j);
            const __m512i h = bcast256(qh + 32 * j);
            const __m512i qa = _mm512_or_si512(_mm512_and_si512(l, m4),
                                               _mm512_and_si512(_mm512_rolv_epi32(h, rot_a), m30));
            const __m512i qb =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                _mm512_and_si512(_mm512_rolv_epi32(h, rot_b), m30));
            const __m512i pa = _mm512_maddubs_epi16(qa, ldu512(q8 + 128 * j));
            const __m512i pb = _mm512_maddubs_epi16(qb, ldu512(q8 + 128 * j + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(gidx[2 * j], scz));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(gidx[2 * j + 1], scz));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float dot_q2_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const __m512i sh_a = halves16(0, 2), sh_b = halves16(4, 6);
    const __m512i gidx[4] = {group4_index(0), group4_index(4), group4_index(8), group4_index(12)};
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q2_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q2_K, d)));
        const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q2_K, dmin)));
        const __m128i msc = ldu128(x + offsetof(gm_block_q2_K, scales));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(msc, 4), m4));
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin),
                                _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, ldu256(y + Q8K_BSUMS))),
                                acc_m);
        const __m512i scz = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(msc, m4)));
        const uint8_t *q2 = x + offsetof(gm_block_q2_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 2; j++) {
            const __m512i b = bcast256(q2 + 32 * j);
            const __m512i qa = _mm512_and_si512(_mm512_srlv_epi16(b, sh_a), m3);
            const __m512i qb = _mm512_and_si512(_mm512_srlv_epi16(b, sh_b), m3);
            const __m512i pa = _mm512_maddubs_epi16(qa, ldu512(q8 + 128 * j));
            const __m512i pb = _mm512_maddubs_epi16(qb, ldu512(q8 + 128 * j + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(gidx[2 * j], scz));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(gidx[2 * j + 1], scz));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc) + hsum256_ps(acc_m);
}

static float dot_q3_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const __m512i bit2 = _mm512_set1_epi8(0x04);
    const __m512i sh_a = halves16(0, 2), sh_b = halves16(4, 6);
    /* rotate hmask bit 4j+k to bit 2: k = 0,1 for the first vector, 2,3 for the second */
    const __m512i rot[4] = {halves32(2, 1), halves32(0, 31), halves32(30, 29), halves32(28, 27)};
    const __m512i gidx[4] = {group4_index(0), group4_index(4), group4_index(8), group4_index(12)};
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q3_K), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_q3_K, d)));
        uint32_t u[4];
        memcpy(u, x + offsetof(gm_block_q3_K, scales), 12);
        const uint32_t t = u[2];
        u[2] = ((u[0] >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
        u[3] = ((u[1] >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
        u[0] = (u[0] & 0x0f0f0f0fu) | (((t >> 0) & 0x03030303u) << 4);
        u[1] = (u[1] & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(
            _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]), _mm_set1_epi8(32)));
        const __m512i scz = _mm512_zextsi256_si512(sc16);
        /* codes are (q | 4h) - 4: take 4 * sum_g scale_g * bsum_g out once */
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, ldu256(y + Q8K_BSUMS)), 2);
        const __m512i hm = bcast256(x + offsetof(gm_block_q3_K, hmask));
        const uint8_t *q3 = x + offsetof(gm_block_q3_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m512i sumi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));
        for (int j = 0; j < 2; j++) {
            const __m512i b = bcast256(q3 + 32 * j);
            const __m512i qa =
                _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(b, sh_a), m3),
                                _mm512_and_si512(_mm512_rolv_epi32(hm, rot[2 * j]), bit2));
            const __m512i qb =
                _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(b, sh_b), m3),
                                _mm512_and_si512(_mm512_rolv_epi32(hm, rot[2 * j + 1]), bit2));
            const __m512i pa = _mm512_maddubs_epi16(qa, ldu512(q8 + 128 * j));
            const __m512i pb = _mm512_maddubs_epi16(qb, ldu512(q8 + 128 * j + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(gidx[2 * j], scz));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(gidx[2 * j + 1], scz));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float dot_iq4_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i table = _mm512_broadcast_i32x4(ldu128(gm_kvalues_iq4nl));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sh = _mm512_set_epi64(4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0,
                                        4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0);
    const __m512i sm[4] = {scale_pair_mask(0, 1), scale_pair_mask(2, 3), scale_pair_mask(4, 5),
                           scale_pair_mask(6, 7)};
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq4_xs), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq4_xs, d)));
        const unsigned shi = ld_u16(x + offsetof(gm_block_iq4_xs, scales_h));
        const uint32_t slo = ld_u32(x + offsetof(gm_block_iq4_xs, scales_l));
        /* 6-bit scales of the 8 sub-blocks, minus 32, as int16 in every 128-bit lane */
        int16_t ls[8];
        for (int ib = 0; ib < 8; ib++)
            ls[ib] = (int16_t)((int)(((slo >> (4 * ib)) & 0x0f) | (((shi >> (2 * ib)) & 3) << 4)) -
                               32);
        const __m512i sc = _mm512_broadcast_i32x4(ldu128(ls));
        const uint8_t *qs = x + offsetof(gm_block_iq4_xs, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            /* sub-blocks 2j, 2j+1: [lo(2j) | hi(2j) | lo(2j+1) | hi(2j+1)] */
            const __m512i q2 = _mm512_castsi256_si512(ldu256(qs + 32 * j));
            const __m512i q = _mm512_shuffle_i64x2(q2, q2, _MM_SHUFFLE(1, 1, 0, 0));
            const __m512i v =
                _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi16(q, sh), m4));
            const __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(v),
                                                   apply_sign(ldu512(q8 + 64 * j), v));
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_shuffle_epi8(sc, sm[j]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* The sign words of the 8 sub-blocks of an IQ2_XXS/IQ3_XXS super-block -> 256 sign bits (one
 * per element, iq_signs32 on each lane), stored to m[4] as the masks of sub-block pairs; and
 * the 8 sub-block scales 2s + 1 as int16 in every 128-bit lane. */
static inline __m512i iq_signs_scales(__m256i aux, uint64_t m[4])
{
    const __m256i s = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(aux, _mm256_set1_epi32(0x7f)),
                        _mm256_and_si256(_mm256_slli_epi32(aux, 1), _mm256_set1_epi32(0x7f00))),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_slli_epi32(aux, 2), _mm256_set1_epi32(0x7f0000)),
            _mm256_and_si256(_mm256_slli_epi32(aux, 3), _mm256_set1_epi32(0x7f000000))));
    __m256i p = _mm256_xor_si256(s, _mm256_srli_epi32(s, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    const __m256i bits = _mm256_or_si256(
        s, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(0x01010101)), 7));
    _mm256_storeu_si256((__m256i *)m, bits);
    const __m256i ls = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(aux, 28), 1),
                                       _mm256_set1_epi32(1));
    return _mm512_broadcast_i32x4(_mm256_cvtepi32_epi16(ls));
}

static float dot_iq2_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i sm[4] = {scale_pair_mask(0, 1), scale_pair_mask(2, 3), scale_pair_mask(4, 5),
                           scale_pair_mask(6, 7)};
    const __m512i odd = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_xxs), *y = a + i * Q8K;
        /* block scale d * (2s + 1) / 8 */
        const float d = 0.125f * ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq2_xxs, d)));
        const uint8_t *q2 = x + offsetof(gm_block_iq2_xxs, qs);
        const uint8_t *q8 = y + Q8K_QS;
        /* per sub-block 8 bytes: 4 grid indices, then the sign and scale word */
        const __m256i aux = _mm512_castsi512_si256(_mm512_permutexvar_epi32(odd, ldu512(q2)));
        uint64_t neg[4];
        const __m512i sc = iq_signs_scales(aux, neg);
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const uint8_t *g0 = q2 + 16 * j, *g1 = g0 + 8;
            const __m512i q = _mm512_set_epi64(
                grid8(gm_iq2xxs_grid[g1[3]]), grid8(gm_iq2xxs_grid[g1[2]]),
                grid8(gm_iq2xxs_grid[g1[1]]), grid8(gm_iq2xxs_grid[g1[0]]),
                grid8(gm_iq2xxs_grid[g0[3]]), grid8(gm_iq2xxs_grid[g0[2]]),
                grid8(gm_iq2xxs_grid[g0[1]]), grid8(gm_iq2xxs_grid[g0[0]]));
            const __m512i y8 = ldu512(q8 + 64 * j);
            const __m512i ys =
                _mm512_mask_sub_epi8(y8, (__mmask64)neg[j], _mm512_setzero_si512(), y8);
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q, ys),
                                       _mm512_shuffle_epi8(sc, sm[j]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float dot_iq3_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i sm[4] = {scale_pair_mask(0, 1), scale_pair_mask(2, 3), scale_pair_mask(4, 5),
                           scale_pair_mask(6, 7)};
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq3_xxs), *y = a + i * Q8K;
        /* block scale d * (2s + 1) / 4 */
        const float d = 0.25f * ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq3_xxs, d)));
        const uint8_t *q3 = x + offsetof(gm_block_iq3_xxs, qs);
        const uint8_t *q8 = y + Q8K_QS;
        uint64_t neg[4];
        const __m512i sc = iq_signs_scales(ldu256(q3 + GM_QK_K / 4), neg);
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const uint8_t *g = q3 + 16 * j;
            const __m512i q = _mm512_set_epi32(
                grid4(gm_iq3xxs_grid[g[15]]), grid4(gm_iq3xxs_grid[g[14]]),
                grid4(gm_iq3xxs_grid[g[13]]), grid4(gm_iq3xxs_grid[g[12]]),
                grid4(gm_iq3xxs_grid[g[11]]), grid4(gm_iq3xxs_grid[g[10]]),
                grid4(gm_iq3xxs_grid[g[9]]), grid4(gm_iq3xxs_grid[g[8]]),
                grid4(gm_iq3xxs_grid[g[7]]), grid4(gm_iq3xxs_grid[g[6]]),
                grid4(gm_iq3xxs_grid[g[5]]), grid4(gm_iq3xxs_grid[g[4]]),
                grid4(gm_iq3xxs_grid[g[3]]), grid4(gm_iq3xxs_grid[g[2]]),
                grid4(gm_iq3xxs_grid[g[1]]), grid4(gm_iq3xxs_grid[g[0]]));
            const __m512i y8 = ldu512(q8 + 64 * j);
            const __m512i ys =
                _mm512_mask_sub_epi8(y8, (__mmask64)neg[j], _mm512_setzero_si512(), y8);
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q, ys),
                                       _mm512_shuffle_epi8(sc, sm[j]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
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
}
