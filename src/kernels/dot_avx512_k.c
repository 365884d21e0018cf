/* AVX-512 dot products of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against Q8_K activations,
 * one token and GM_DOT_MULTI tokens per weight row (the same weight-side unpack and per-token
 * step, so both give the same bits); installed by gm_dot_fill_avx512 / gm_dot_multi_fill_avx512
 * (dot_avx512.c, whose header comment states the arithmetic these share: exact integer sums
 * inside a sub-block, maddubs then vpdpwssd by the 16-bit scales, constant code offsets taken
 * out through the activation sums, one float multiply-add per block). Compiled with the
 * AVX-512 flags, called only when dispatch.c has seen the features. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dot_impl.h"
#include "kernels/quant.h"

#include "kernels/avx512_util.h"

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

/* The packed 6-bit scales and mins of two Q4_K/Q5_K super-blocks (12 bytes at p0 and at p1;
 * 16 bytes are read from each, the 4 after the scales still inside the block) -> per 128-bit
 * lane [sc0..sc7 | m0..m7], one byte each, lane 0 for p0 and lane 1 for p1. */
static inline __m256i k4_scales_mins2(const uint8_t *p0, const uint8_t *p1)
{
    const __m256i raw = _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p0)), ldu128(p1), 1);
    /* per lane, output bytes 0-3 scales 0-3, 4-7 scales 4-7, 8-11 mins 0-3, 12-15 mins 4-7:
     * a holds the bytes with their low bits (6 for 0-3; the low or high nibble of bytes 8-11
     * for 4-7), b the bytes whose top 2 bits are the high bits of 4-7 */
    const __m256i a = _mm256_shuffle_epi8(
        raw, _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9,
                              10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m256i b = _mm256_shuffle_epi8(
        raw, _mm256_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1,
                              -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m256i lo = _mm256_and_si256(
        _mm256_srlv_epi32(a, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
        _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f,
                          0x3f3f3f3f, 0x0f0f0f0f));
    /* (byte >> 6) << 4 */
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(b, 2), _mm256_set1_epi8(0x30));
    return _mm256_or_si256(lo, hi);
}

/* Q4_K sub-block sums of one super-block times their scales, as 16 int32 to be added: the
 * nibbles [low | high] of each 32-byte group times the activations by vpdpbusd (sums of 4
 * products, |s| <= 4 * 15 * 128, so they pack to int16 without saturating), packed in pairs of
 * groups and multiplied by the scales with vpdpwssd. scb: [sc0..7 | m0..7] in every lane. */
static inline __m512i q4_K_block_sums(const uint8_t *q4, const uint8_t *q8, __m512i scb)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sh = halves16(0, 4);
    /* after packing groups (0, 1) or (2, 3): 128-bit lane L holds 4 words of sub-block
     * 2g + (L >= 2) for the first group g, then 4 of the second; these pick their scales */
    const __m512i s01 =
        _mm512_set_epi64(0x8003800380038003ll, 0x8001800180018001ll, 0x8003800380038003ll,
                         0x8001800180018001ll, 0x8002800280028002ll, 0x8000800080008000ll,
                         0x8002800280028002ll, 0x8000800080008000ll);
    const __m512i s23 = _mm512_add_epi16(s01, _mm512_set1_epi16(4));
    const __m512i z = _mm512_setzero_si512();
    __m512i d[4];
    for (int j = 0; j < 4; j++) {
        const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(bcast256(q4 + 32 * j), sh), m4);
        d[j] = _mm512_dpbusd_epi32(z, q, ldu512(q8 + 64 * j));
    }
    const __m512i s =
        _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d[0], d[1]), _mm512_shuffle_epi8(scb, s01));
    return _mm512_dpwssd_epi32(s, _mm512_packs_epi32(d[2], d[3]), _mm512_shuffle_epi8(scb, s23));
}

/* acc + the dot of super-blocks x0, x1 with activation blocks y0, y1, the second weighted by
 * yd1 (its activation scale, or 0 to leave it out). The scale unpacking, the minimum terms (mins
 * times the activation group sums) and the float scaling each run once for both. */
static inline __m512 q4_K_pair(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0,
                               const uint8_t *y1, float yd1, __m512 acc)
{
    const __m256i mdup = _mm256_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15,
                                          15, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14,
                                          15, 15);
    const __m256i scm = k4_scales_mins2(x0 + offsetof(gm_block_q4_K, scales),
                                        x1 + offsetof(gm_block_q4_K, scales));
    /* per super-block: the sum of min[sb] * bsums (each min twice, once per group of 16) */
    const __m512i msum =
        _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm256_shuffle_epi8(scm, mdup)),
                          join256(ldu256(y0 + Q8K_BSUMS), ldu256(y1 + Q8K_BSUMS)));
    /* [d0, dmin0, d1, dmin1] times the activation scales, spread to [x0 x 8 | x1 x 8] */
    const __m512 dd = _mm512_castps128_ps512(
        _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)ld_u32(x1 + offsetof(gm_block_q4_K, d)),
                                   (int)ld_u32(x0 + offsetof(gm_block_q4_K, d)))));
    const __m512 yd = _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(_mm512_set1_ps(ld_f32(y0))), _mm256_castps_pd(_mm256_set1_ps(yd1)), 1));
    const __m512 vd = _mm512_mul_ps(_mm512_permutexvar_ps(halves32(0, 2), dd), yd);
    const __m512 vm = _mm512_mul_ps(_mm512_permutexvar_ps(halves32(1, 3), dd), yd);
    const __m512i scz = _mm512_castsi256_si512(scm);
    const __m512i s0 = q4_K_block_sums(x0 + offsetof(gm_block_q4_K, qs), y0 + Q8K_QS,
                                       _mm512_shuffle_i32x4(scz, scz, 0x00));
    const __m512i s1 = q4_K_block_sums(x1 + offsetof(gm_block_q4_K, qs), y1 + Q8K_QS,
                                       _mm512_shuffle_i32x4(scz, scz, 0x55));
    /* [s0 lanes 0-7 + 8-15 | s1 lanes 0-7 + 8-15] */
    const __m512i s = _mm512_add_epi32(_mm512_shuffle_i64x2(s0, s1, 0x44),
                                       _mm512_shuffle_i64x2(s0, s1, 0xee));
    acc = _mm512_fmadd_ps(vd, _mm512_cvtepi32_ps(s), acc);
    return _mm512_fnmadd_ps(vm, _mm512_cvtepi32_ps(msum), acc);
}

static float dot_q4_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512 acc = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const uint8_t *x = w + i * sizeof(gm_block_q4_K), *y = a + i * Q8K;
        acc = q4_K_pair(x, x + sizeof(gm_block_q4_K), y, y + Q8K, ld_f32(y + Q8K), acc);
    }
    if (i < nb) { /* an odd last super-block: paired with itself, the copy weighted 0 */
        const uint8_t *x = w + i * sizeof(gm_block_q4_K), *y = a + i * Q8K;
        acc = q4_K_pair(x, x, y, y, 0.0f, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* ---- several tokens per weight row (prefill) ---------------------------------------------- */

/* GM_DOT_MULTI activation rows (a + t * a_stride) against one Q4_K row: the scales, mins, block
 * scales and nibbles of each pair of super-blocks are unpacked once for all the tokens, then
 * every token runs exactly the per-token operations of q4_K_pair in the same order, so out[t]
 * equals dot_q4_K of row t bit for bit. */
static void dot_multi_q4_K(const void *wv, const void *av, uint64_t a_stride, uint64_t n,
                           float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i mdup = _mm256_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15,
                                          15, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14,
                                          15, 15);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sh = halves16(0, 4);
    const __m512i s01 =
        _mm512_set_epi64(0x8003800380038003ll, 0x8001800180018001ll, 0x8003800380038003ll,
                         0x8001800180018001ll, 0x8002800280028002ll, 0x8000800080008000ll,
                         0x8002800280028002ll, 0x8000800080008000ll);
    const __m512i s23 = _mm512_add_epi16(s01, _mm512_set1_epi16(4));
    const __m512i z = _mm512_setzero_si512();
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < GM_DOT_MULTI; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i += 2) {
        const bool pair = i + 1 < nb; /* an odd last super-block: paired with itself, weighted 0 */
        const uint8_t *x0 = w + i * sizeof(gm_block_q4_K);
        const uint8_t *x1 = pair ? x0 + sizeof(gm_block_q4_K) : x0;
        const uint64_t o0 = i * Q8K, o1 = pair ? o0 + Q8K : o0;
        const __m256i scm = k4_scales_mins2(x0 + offsetof(gm_block_q4_K, scales),
                                            x1 + offsetof(gm_block_q4_K, scales));
        const __m512i mins = _mm512_cvtepu8_epi16(_mm256_shuffle_epi8(scm, mdup));
        const __m512 dd = _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)ld_u32(x1 + offsetof(gm_block_q4_K, d)),
                                       (int)ld_u32(x0 + offsetof(gm_block_q4_K, d)))));
        const __m512 dw = _mm512_permutexvar_ps(halves32(0, 2), dd);
        const __m512 mw = _mm512_permutexvar_ps(halves32(1, 3), dd);
        const __m512i scz = _mm512_castsi256_si512(scm);
        const __m512i sb0 = _mm512_shuffle_i32x4(scz, scz, 0x00);
        const __m512i sb1 = _mm512_shuffle_i32x4(scz, scz, 0x55);
        const __m512i sc0a = _mm512_shuffle_epi8(sb0, s01), sc0b = _mm512_shuffle_epi8(sb0, s23);
        const __m512i sc1a = _mm512_shuffle_epi8(sb1, s01), sc1b = _mm512_shuffle_epi8(sb1, s23);
        __m512i q0[4], q1[4];
        for (int j = 0; j < 4; j++) {
            q0[j] = _mm512_and_si512(
                _mm512_srlv_epi16(bcast256(x0 + offsetof(gm_block_q4_K, qs) + 32 * j), sh), m4);
            q1[j] = _mm512_and_si512(
                _mm512_srlv_epi16(bcast256(x1 + offsetof(gm_block_q4_K, qs) + 32 * j), sh), m4);
        }
        for (int t = 0; t < GM_DOT_MULTI; t++) {
            const uint8_t *y0 = a + t * a_stride + o0, *y1 = a + t * a_stride + o1;
            __m512i d0[4], d1[4];
            for (int j = 0; j < 4; j++) {
                d0[j] = _mm512_dpbusd_epi32(z, q0[j], ldu512(y0 + Q8K_QS + 64 * j));
                d1[j] = _mm512_dpbusd_epi32(z, q1[j], ldu512(y1 + Q8K_QS + 64 * j));
            }
            const __m512i s0 = _mm512_dpwssd_epi32(
                _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d0[0], d0[1]), sc0a),
                _mm512_packs_epi32(d0[2], d0[3]), sc0b);
            const __m512i s1 = _mm512_dpwssd_epi32(
                _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d1[0], d1[1]), sc1a),
                _mm512_packs_epi32(d1[2], d1[3]), sc1b);
            const __m512i msum = _mm512_madd_epi16(
                mins, join256(ldu256(y0 + Q8K_BSUMS), ldu256(y1 + Q8K_BSUMS)));
            const __m512 yd = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_set1_ps(ld_f32(y0))),
                _mm256_castps_pd(_mm256_set1_ps(pair ? ld_f32(y1) : 0.0f)), 1));
            const __m512 vd = _mm512_mul_ps(dw, yd);
            const __m512 vm = _mm512_mul_ps(mw, yd);
            const __m512i s = _mm512_add_epi32(_mm512_shuffle_i64x2(s0, s1, 0x44),
                                               _mm512_shuffle_i64x2(s0, s1, 0xee));
            acc[t] = _mm512_fmadd_ps(vd, _mm512_cvtepi32_ps(s), acc[t]);
            acc[t] = _mm512_fnmadd_ps(vm, _mm512_cvtepi32_ps(msum), acc[t]);
        }
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
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

/* GM_DOT_MULTI activation rows (a + t * a_stride) against one Q5_K row: the scales, mins and
 * 5-bit codes of each super-block are unpacked once for all the tokens; every token then runs
 * dot_q5_K's operations in the same order, so out[t] equals it bit for bit. */
static void dot_multi_q5_K(const void *wv, const void *av, uint64_t a_stride, uint64_t n,
                           float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    const __m512i sh = halves16(0, 4);
    const __m512i sm[4] = {scale_pair_mask(0, 1), scale_pair_mask(2, 3), scale_pair_mask(4, 5),
                           scale_pair_mask(6, 7)};
    const __m512i rot[4] = {halves32(4, 3), halves32(2, 1), halves32(0, 31), halves32(30, 29)};
    __m512 acc[GM_DOT_MULTI];
    __m256 acc_m[GM_DOT_MULTI];
    for (int t = 0; t < GM_DOT_MULTI; t++) {
        acc[t] = _mm512_setzero_ps();
        acc_m[t] = _mm256_setzero_ps();
    }
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q5_K);
        const float wd = h2f(ld_u16(x + offsetof(gm_block_q5_K, d)));
        const float wm = h2f(ld_u16(x + offsetof(gm_block_q5_K, dmin)));
        uint32_t u[4];
        k4_scales(x + offsetof(gm_block_q5_K, scales), u);
        const __m512i sc = _mm512_broadcast_i32x4(
            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
        const uint8_t *q5 = x + offsetof(gm_block_q5_K, qs);
        const __m512i hb = bcast256(x + offsetof(gm_block_q5_K, qh));
        __m512i q[4], scj[4];
        for (int j = 0; j < 4; j++) {
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bcast256(q5 + 32 * j), sh), m4);
            const __m512i hi = _mm512_and_si512(_mm512_rolv_epi32(hb, rot[j]), bit4);
            q[j] = _mm512_or_si512(lo, hi);
            scj[j] = _mm512_shuffle_epi8(sc, sm[j]);
        }
        for (int t = 0; t < GM_DOT_MULTI; t++) {
            const uint8_t *y = a + t * a_stride + i * Q8K;
            const float yd = ld_f32(y);
            const float d = yd * wd;
            const float dmin = -yd * wm;
            acc_m[t] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_min_sums(u, y)),
                                       acc_m[t]);
            const uint8_t *q8 = y + Q8K_QS;
            __m512i sumi = _mm512_setzero_si512();
            for (int j = 0; j < 4; j++)
                sumi = _mm512_dpwssd_epi32(
                    sumi, _mm512_maddubs_epi16(q[j], ldu512(q8 + 64 * j)), scj[j]);
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]) + hsum256_ps(acc_m[t]);
}

/* sumi + the scaled code products of one K-quant super-block whose weight side is unpacked
 * as 4 code vectors q (elements 128j + 32k..: q[2j] k = 0, 1; q[2j + 1] k = 2, 3) and their
 * permuted scales sc, against the 256 activation codes q8. */
static inline __m512i k_block_sums(const __m512i q[4], const __m512i sc[4], const uint8_t *q8,
                                   __m512i sumi)
{
    for (int j = 0; j < 2; j++) {
        const __m512i pa = _mm512_maddubs_epi16(q[2 * j], ldu512(q8 + 128 * j));
        const __m512i pb = _mm512_maddubs_epi16(q[2 * j + 1], ldu512(q8 + 128 * j + 64));
        sumi = _mm512_dpwssd_epi32(sumi, pa, sc[2 * j]);
        sumi = _mm512_dpwssd_epi32(sumi, pb, sc[2 * j + 1]);
    }
    return sumi;
}

/* One Q6_K super-block's weight side: the 6-bit codes (unsigned, 0..63) as 4 vectors in
 * k_block_sums' order, the 16 signed scales as int16 (*sc16) and permuted for vpdpwssd. */
static inline void q6_K_unpack(const uint8_t *x, __m512i q[4], __m512i sc[4], __m256i *sc16)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    /* bits (0,1) | (2,3) and (4,5) | (6,7) of qh to bits 4,5 */
    const __m512i rot_a = halves32(4, 2), rot_b = halves32(0, 30);
    *sc16 = _mm256_cvtepi8_epi16(ldu128(x + offsetof(gm_block_q6_K, scales)));
    const __m512i scz = _mm512_zextsi256_si512(*sc16);
    const uint8_t *ql = x + offsetof(gm_block_q6_K, ql);
    const uint8_t *qh = x + offsetof(gm_block_q6_K, qh);
    for (int j = 0; j < 2; j++) {
        const __m512i l = ldu512(ql + 64 * j);
        const __m512i h = bcast256(qh + 32 * j);
        q[2 * j] = _mm512_or_si512(_mm512_and_si512(l, m4),
                                   _mm512_and_si512(_mm512_rolv_epi32(h, rot_a), m30));
        q[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                       _mm512_and_si512(_mm512_rolv_epi32(h, rot_b), m30));
        sc[2 * j] = _mm512_permutexvar_epi16(group4_index(8 * j), scz);
        sc[2 * j + 1] = _mm512_permutexvar_epi16(group4_index(8 * j + 4), scz);
    }
}

/* The per-token step of K-quants whose codes carry a constant offset (Q3_K: codes (q | 4h) - 4,
 * Q6_K: q - 32, off = 1 << log2_off): the scaled code products of the super-block (weight scale
 * wd) against the Q8_K activation block y, with off * sum_g scale_g * bsum_g taken out once. */
static inline __m512 k_offset_token(const uint8_t *y, float wd, const __m512i q[4],
                                    const __m512i sc[4], __m256i sc16, int log2_off, __m512 acc)
{
    const float d = ld_f32(y) * wd;
    const __m256i corr = _mm256_sll_epi32(_mm256_madd_epi16(sc16, ldu256(y + Q8K_BSUMS)),
                                          _mm_cvtsi32_si128(log2_off));
    const __m512i sumi = k_block_sums(
        q, sc, y + Q8K_QS, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr)));
    return _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one row of an offset
 * K-quant (blocks of block_bytes, f16 scale at d_off, unpacked by unpack): each super-block
 * unpacked once, then k_offset_token per token, so every token's result equals the one-token
 * call's bit for bit. */
typedef void (*k_unpack_fn)(const uint8_t *x, __m512i q[4], __m512i sc[4], __m256i *sc16);

static inline __attribute__((always_inline)) void
offset_k_rows(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, int n_tok,
              size_t block_bytes, size_t d_off, int log2_off, k_unpack_fn unpack, float *out)
{
    const uint64_t nb = n / GM_QK_K;
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * block_bytes;
        __m512i q[4], sc[4];
        __m256i sc16;
        unpack(x, q, sc, &sc16);
        const float wd = h2f(ld_u16(x + d_off));
        for (int t = 0; t < n_tok; t++)
            acc[t] = k_offset_token(a + t * a_stride + i * Q8K, wd, q, sc, sc16, log2_off, acc[t]);
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

/* Q6_K rows: one token, or GM_DOT_MULTI (each super-block's codes and permuted scales built once
 * for all the tokens). */
static float dot_q6_K(const void *wv, const void *av, uint64_t n)
{
    float r;
    offset_k_rows(wv, av, 0, n, 1, sizeof(gm_block_q6_K), offsetof(gm_block_q6_K, d), 5,
                  q6_K_unpack, &r);
    return r;
}

static void dot_multi_q6_K(const void *wv, const void *av, uint64_t a_stride, uint64_t n,
                           float *out)
{
    offset_k_rows(wv, av, a_stride, n, GM_DOT_MULTI, sizeof(gm_block_q6_K),
                  offsetof(gm_block_q6_K, d), 5, q6_K_unpack, out);
}


/* One Q2_K super-block's weight side: the 2-bit codes of elements 128j + 32k.. as 4 vectors
 * (q[2j]: k = 0, 1; q[2j + 1]: k = 2, 3), the 16 sub-block scales permuted for the vpdpwssd of
 * each vector, and the 16 mins as int16. */
static inline void q2_K_unpack(const uint8_t *x, __m512i q[4], __m512i sc[4], __m256i *mins)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const __m512i sh_a = halves16(0, 2), sh_b = halves16(4, 6);
    const __m128i msc = ldu128(x + offsetof(gm_block_q2_K, scales));
    *mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(msc, 4), m4));
    const __m512i scz = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(msc, m4)));
    const uint8_t *q2 = x + offsetof(gm_block_q2_K, qs);
    for (int j = 0; j < 2; j++) {
        const __m512i b = bcast256(q2 + 32 * j);
        q[2 * j] = _mm512_and_si512(_mm512_srlv_epi16(b, sh_a), m3);
        q[2 * j + 1] = _mm512_and_si512(_mm512_srlv_epi16(b, sh_b), m3);
        sc[2 * j] = _mm512_permutexvar_epi16(group4_index(8 * j), scz);
        sc[2 * j + 1] = _mm512_permutexvar_epi16(group4_index(8 * j + 4), scz);
    }
}

/* dot_q2_K's per-token step: the min term into *acc_m, the scaled products into acc. */
static inline __m512 q2_K_token(const uint8_t *x, const uint8_t *y, const __m512i q[4],
                                const __m512i sc[4], __m256i mins, __m256 *acc_m, __m512 acc)
{
    const float yd = ld_f32(y);
    const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q2_K, d)));
    const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q2_K, dmin)));
    *acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin),
                             _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, ldu256(y + Q8K_BSUMS))),
                             *acc_m);
    const __m512i sumi = k_block_sums(q, sc, y + Q8K_QS, _mm512_setzero_si512());
    return _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
}

static float dot_q2_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q2_K);
        __m512i q[4], sc[4];
        __m256i mins;
        q2_K_unpack(x, q, sc, &mins);
        acc = q2_K_token(x, a + i * Q8K, q, sc, mins, &acc_m, acc);
    }
    return _mm512_reduce_add_ps(acc) + hsum256_ps(acc_m);
}

/* GM_DOT_MULTI activation rows against one Q2_K row: each super-block unpacked once for all the
 * tokens, then dot_q2_K's per-token step, so out[t] equals dot_q2_K bit for bit. */
static void dot_multi_q2_K(const void *wv, const void *av, uint64_t a_stride, uint64_t n,
                           float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m512 acc[GM_DOT_MULTI];
    __m256 acc_m[GM_DOT_MULTI];
    for (int t = 0; t < GM_DOT_MULTI; t++) {
        acc[t] = _mm512_setzero_ps();
        acc_m[t] = _mm256_setzero_ps();
    }
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q2_K);
        __m512i q[4], sc[4];
        __m256i mins;
        q2_K_unpack(x, q, sc, &mins);
        for (int t = 0; t < GM_DOT_MULTI; t++)
            acc[t] = q2_K_token(x, a + t * a_stride + i * Q8K, q, sc, mins, &acc_m[t], acc[t]);
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]) + hsum256_ps(acc_m[t]);
}

/* One Q3_K super-block's weight side: the 3-bit codes (q | 4h, as unsigned 0..7) in
 * q2_K_unpack's order, the 16 signed scales as int16 (*sc16) and permuted for vpdpwssd. */
static inline void q3_K_unpack(const uint8_t *x, __m512i q[4], __m512i sc[4], __m256i *sc16)
{
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const __m512i bit2 = _mm512_set1_epi8(0x04);
    const __m512i sh_a = halves16(0, 2), sh_b = halves16(4, 6);
    /* rotate hmask bit 4j+k to bit 2: k = 0,1 for the first vector, 2,3 for the second */
    const __m512i rot[4] = {halves32(2, 1), halves32(0, 31), halves32(30, 29), halves32(28, 27)};
    uint32_t u[4];
    memcpy(u, x + offsetof(gm_block_q3_K, scales), 12);
    const uint32_t t = u[2];
    u[2] = ((u[0] >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
    u[3] = ((u[1] >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
    u[0] = (u[0] & 0x0f0f0f0fu) | (((t >> 0) & 0x03030303u) << 4);
    u[1] = (u[1] & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
    *sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(
        _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]), _mm_set1_epi8(32)));
    const __m512i scz = _mm512_zextsi256_si512(*sc16);
    const __m512i hm = bcast256(x + offsetof(gm_block_q3_K, hmask));
    const uint8_t *q3 = x + offsetof(gm_block_q3_K, qs);
    for (int j = 0; j < 2; j++) {
        const __m512i b = bcast256(q3 + 32 * j);
        q[2 * j] = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(b, sh_a), m3),
                                   _mm512_and_si512(_mm512_rolv_epi32(hm, rot[2 * j]), bit2));
        q[2 * j + 1] =
            _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(b, sh_b), m3),
                            _mm512_and_si512(_mm512_rolv_epi32(hm, rot[2 * j + 1]), bit2));
        sc[2 * j] = _mm512_permutexvar_epi16(group4_index(8 * j), scz);
        sc[2 * j + 1] = _mm512_permutexvar_epi16(group4_index(8 * j + 4), scz);
    }
}

/* Q3_K rows: one token, or GM_DOT_MULTI (each super-block unpacked once, every token then
 * dot_q3_K's step in the same order, so the results are equal bit for bit). */
static float dot_q3_K(const void *wv, const void *av, uint64_t n)
{
    float r;
    offset_k_rows(wv, av, 0, n, 1, sizeof(gm_block_q3_K), offsetof(gm_block_q3_K, d), 2,
                  q3_K_unpack, &r);
    return r;
}

static void dot_multi_q3_K(const void *wv, const void *av, uint64_t a_stride, uint64_t n,
                           float *out)
{
    offset_k_rows(wv, av, a_stride, n, GM_DOT_MULTI, sizeof(gm_block_q3_K),
                  offsetof(gm_block_q3_K, d), 2, q3_K_unpack, out);
}

void gm_dot_fill_avx512_k(gm_dot_fn t[GM_TYPE_COUNT])
{
    t[GM_TYPE_Q2_K] = dot_q2_K;
    t[GM_TYPE_Q3_K] = dot_q3_K;
    t[GM_TYPE_Q4_K] = dot_q4_K;
    t[GM_TYPE_Q5_K] = dot_q5_K;
    t[GM_TYPE_Q6_K] = dot_q6_K;
}

void gm_dot_multi_fill_avx512_k(gm_dot_multi_fn t[GM_TYPE_COUNT])
{
    t[GM_TYPE_Q2_K] = dot_multi_q2_K;
    t[GM_TYPE_Q3_K] = dot_multi_q3_K;
    t[GM_TYPE_Q4_K] = dot_multi_q4_K;
    t[GM_TYPE_Q5_K] = dot_multi_q5_K;
    t[GM_TYPE_Q6_K] = dot_multi_q6_K;
}
