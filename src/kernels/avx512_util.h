/* kernels/avx512_util: private to src/kernels; the small inline helpers that every AVX-512 dot
 * file shares (unaligned loads, f16 scales, sign application, the Q8_K activation layout, the
 * IQ grid lookups). Include only from files compiled with the AVX-512 flags of
 * src/kernels/CMakeLists.txt; the VBMI helpers are functions with a target attribute, declared
 * only when the compiler has those flags (GM_KERNELS_HAVE_AVX512VBMI), and called only from
 * kernels that dispatch.c installs after it has seen VBMI and BITALG.
 *
 * Owns nothing: no state, no tables. */
#ifndef GM_KERNELS_AVX512_UTIL_H
#define GM_KERNELS_AVX512_UTIL_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/bytes.h"
#include "kernels/quant.h"

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

/* ---- Q8_K activations (gm_block_q8_K: float d, int8 qs[256], int16 bsums[16]) ------------ */

#define Q8K sizeof(gm_block_q8_K)
#define Q8K_QS 4u      /* offsetof(gm_block_q8_K, qs) */
#define Q8K_BSUMS 260u /* offsetof(gm_block_q8_K, bsums) */

/* ---- IQ grids: rows as 16-bit codes looked up from vectors -------------------------------- */

/* The codes of 32 rows whose indices are the 16-bit words of idx (0..255). */
static inline __m512i grid_lookup(const __m512i t[8], __m512i idx)
{
    const __m512i r0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);
    const __m512i r1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);
    const __m512i r2 = _mm512_permutex2var_epi16(t[4], idx, t[5]);
    const __m512i r3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    return _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, r0, r1),
                                   _mm512_mask_blend_epi16(b6, r2, r3));
}

static inline void load_codes(const uint16_t *code, __m512i t[8])
{
    for (int k = 0; k < 8; k++)
        t[k] = ldu512(code + 32 * k);
}

/* The sign and scale words of two IQ2_XXS/IQ3_XXS super-blocks (8 each, in the two 256-bit
 * halves of aux; per word 4 x 7 sign bits, then the 4-bit scale s) -> the sign bits of every
 * element, stored to m[0..3] (first super-block) and m[4..7] as the masks of sub-block pairs
 * (each group of 8 gets its 7 stored bits plus their parity as the 8th), and each super-block's
 * 8 sub-block scales 2s + 1 as int16 in every 128-bit lane of *sc0 and *sc1. */
static inline void iq_signs_scales2(__m512i aux, uint64_t m[8], __m512i *sc0, __m512i *sc1)
{
    /* the four 7-bit sign indices of a word to bytes 0..3 */
    __m512i s = _mm512_mask_blend_epi8(0x2222222222222222ull, aux, _mm512_slli_epi32(aux, 1));
    s = _mm512_mask_blend_epi8(0x4444444444444444ull, s, _mm512_slli_epi32(aux, 2));
    s = _mm512_mask_blend_epi8(0x8888888888888888ull, s, _mm512_slli_epi32(aux, 3));
    s = _mm512_and_si512(s, _mm512_set1_epi8(0x7f));
    /* bit 7 of each byte: the parity of its 7 bits */
    __m512i p = _mm512_xor_si512(s, _mm512_srli_epi32(s, 4));
    p = _mm512_xor_si512(p, _mm512_srli_epi32(p, 2));
    p = _mm512_xor_si512(p, _mm512_srli_epi32(p, 1));
    /* s | (p << 7 & 0x80 in every byte) */
    _mm512_storeu_si512(m, _mm512_ternarylogic_epi32(s, _mm512_slli_epi32(p, 7),
                                                     _mm512_set1_epi8((char)0x80), 0xf8));
    /* ((aux >> 27) & 0x1e) | 1 = 2 * (aux >> 28) + 1 */
    const __m512i ls = _mm512_ternarylogic_epi32(
        _mm512_srli_epi32(aux, 27), _mm512_set1_epi32(0x1e), _mm512_set1_epi32(1), 0xea);
    const __m512i w = _mm512_castsi256_si512(_mm512_cvtepi32_epi16(ls));
    *sc0 = _mm512_shuffle_i32x4(w, w, 0x00);
    *sc1 = _mm512_shuffle_i32x4(w, w, 0x55);
}

/* vpshufb pattern that picks, from 8 int16 sub-block scales in every 128-bit lane, the scales
 * of vpackssdw(sums of vector j, sums of vector j + 1) (vector j holds sub-blocks 2j | 2j + 1):
 * 128-bit lane L holds 4 words of sub-block lo + (L >= 2), then 4 of sub-block hi + (L >= 2),
 * with lo = 2j and hi = 2j + 2. */
static inline __m512i pack_scale_mask(int lo, int hi)
{
    int8_t m[64];
    for (int l = 0; l < 4; l++)
        for (int k = 0; k < 8; k++) {
            const int sb = (k < 4 ? lo : hi) + (l >= 2);
            m[16 * l + 2 * k] = (int8_t)(2 * sb);
            m[16 * l + 2 * k + 1] = (int8_t)(2 * sb + 1);
        }
    return ldu512(m);
}

/* The scaled integer sum of one super-block from its 4 weight vectors q[j] (unsigned bytes,
 * sub-blocks 2j | 2j+1, values <= 62 so that sums of 4 products fit int16), its sign masks and
 * its int16 sub-block scales sc (8 in every lane): vpdpbusd per vector, packed in pairs, then
 * multiplied by the scales with vpdpwssd. */
static inline __m512i iq_dot4(const __m512i q[4], const uint8_t *q8, const uint64_t neg[4],
                              __m512i sc, __m512i sm01, __m512i sm23)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i d[4];
    for (int j = 0; j < 4; j++) {
        const __m512i y8 = ldu512(q8 + 64 * j);
        d[j] = _mm512_dpbusd_epi32(z, q[j], _mm512_mask_sub_epi8(y8, (__mmask64)neg[j], z, y8));
    }
    const __m512i s =
        _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d[0], d[1]), _mm512_shuffle_epi8(sc, sm01));
    return _mm512_dpwssd_epi32(s, _mm512_packs_epi32(d[2], d[3]), _mm512_shuffle_epi8(sc, sm23));
}

/* Word indices for vpermw: word k of the result is first + (k >> log2_repeat), so each source
 * word is repeated 1 << log2_repeat times. Three instructions, no per-call table. */
static inline __m512i word_repeat_index(int first, int log2_repeat)
{
    static const int16_t k_iota[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                       11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                       22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    return _mm512_add_epi16(_mm512_set1_epi16((short)first),
                            _mm512_srli_epi16(ldu512(k_iota), (unsigned)log2_repeat));
}

#if defined(GM_KERNELS_HAVE_AVX512VBMI)

#define VBMI __attribute__((target("avx512vbmi,avx512bitalg")))

/* The 16-bit codes of the 64 rows whose indices are the bytes of idx, as the low bytes *lo and
 * the high bytes *hi (byte r for row r). */
VBMI static inline void grid_lookup64(const __m512i t[8], __m512i idx, __m512i *lo, __m512i *hi)
{
    const __mmask64 b7 = _mm512_movepi8_mask(idx);
    *lo = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[0], idx, t[1]),
                                 _mm512_permutex2var_epi8(t[2], idx, t[3]));
    *hi = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[4], idx, t[5]),
                                 _mm512_permutex2var_epi8(t[6], idx, t[7]));
}

VBMI static inline void load_codes64(const uint8_t *lo, const uint8_t *hi, __m512i t[8])
{
    for (int k = 0; k < 4; k++) {
        t[k] = ldu512(lo + 64 * k);
        t[4 + k] = ldu512(hi + 64 * k);
    }
}

/* The values of the 8 output vectors of a pair of IQ2 super-blocks (IQ2_XXS, IQ2_XS, IQ2_S)
 * from their row codes (codes[h]: qword k holds in word j the 2-bit indices of row 8j + k of
 * super-block h): q[4h + j] = vector j (elements 64j..64j+63) of super-block h, each byte's index
 * moved to its byte by vpmultishiftqb, then looked up in vals64 by vpermb (64 bytes: the values
 * at index i % 4, so the index bits above a byte's own do not matter). */
VBMI static inline void iq2_values_vbmi(const uint8_t *vals64, const __m512i codes[2],
                                        __m512i q[8])
{
    const __m512i vals = ldu512(vals64);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            /* byte i: bits 16j + 2i */
            const __m512i ctl =
                _mm512_set1_epi64(0x0e0c0a0806040200ll + 0x1010101010101010ll * j);
            q[4 * h + j] =
                _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(ctl, codes[h]), vals);
        }
}

#endif /* GM_KERNELS_HAVE_AVX512VBMI */

#endif
