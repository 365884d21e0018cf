/* AVX-512 dot products of IQ2_XS and IQ2_S (see dot_impl.h: gm_dot_fill_avx512_iq2).
 *
 * Both types are IQ2_XXS with a larger grid (512 rows for IQ2_XS, 1024 for IQ2_S, 8 magnitudes
 * 8, 25 or 43 per row), 4-bit scales per 16 elements instead of per 32, and other sign storage
 * (IQ2_XS: a 7-bit sign index per row, the 8th sign the parity, as IQ2_XXS; IQ2_S: a plain sign
 * byte per row). The kernels follow those of IQ2_XXS in dot_avx512.c: grid rows as 16-bit codes
 * of 2-bit value indices held in vectors and looked up by permutes (avx512vbmi: the low and the
 * high code bytes in two tables, 64 rows at once by vpermt2b, 128 rows per pair of vectors;
 * avx512: 32 rows at once by vpermt2w, 64 rows per pair), the results of the pairs blended by the
 * index bits above; codes spread to one index per byte and mapped to magnitudes (avx512vbmi:
 * vpmultishiftqb and vpermb; avx512: vpermw, vpsrlvw and vpshufb); signs applied to the
 * activations under a mask, products by vpdpbusd, scales by vpdpwssd (sub-block scales taken
 * apart by rotates, not shuffles); two super-blocks per step, software-pipelined (the front of a
 * pair, its loads, lookups and signs, issued two pairs before its back, its products: see
 * iq2_dot_row). On the development machine (AMD Zen 5, where vpermt2b has half the throughput of
 * vpermb) the avx512vbmi kernels take about 9 ns (IQ2_XS) and 11 ns (IQ2_S) per pair of
 * super-blocks in long rows, plus about 12 ns per row; without the lookups they would take ~20%
 * (IQ2_XS) and ~35% (IQ2_S) less, without the sign masks ~20% less, while dropping the code
 * spreading (vpmultishiftqb, vpermb) saved nothing measurable. The two-row kernels (decode) run
 * the same steps for two rows, unpipelined (iq2_dot_rows2); there is none for the avx512vbmi
 * IQ2_XS, whose one-row kernel was faster in long rows. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

/* ---- shared by both levels ----------------------------------------------------------------- */

/* The grid magnitudes (both grids hold the same three), ascending: a code's 2-bit indices. */
static const uint8_t k_iq2_mags[16] = {8, 25, 43};

/* The index of magnitude v in k_iq2_mags. */
static uint32_t iq2_mag_index(uint8_t v)
{
    uint32_t k = 0;
    while (k < 2 && k_iq2_mags[k] != v)
        k++;
    return k;
}

/* The sub-block scales 2s + 1 of two super-blocks (the 64-bit scale fields at s0, s1) as
 * iq2_sums takes them: sc[2h + p] multiplies super-block h's sums of vectors 2p (low words) and
 * 2p + 1 (high words), whose 128-bit lane L holds 4 sums of 16-element group 8p + L and
 * 8p + 4 + L respectively. Group g's 4-bit scale s is bits 4g..4g+3 of the field: rotating
 * dword p of the field (groups 8p..8p+7) right by 4L - 1 (mod 32) puts 2s of group 8p + L at
 * bits 1-4 and, 16 bits = 4 groups above, 2s of group 8p + 4 + L at bits 17-20; then
 * (v & 0x1e001e) | 0x10001. No shuffles (the lookups keep the shuffle units busy). */
static inline void iq2_scales(const uint8_t *s0, const uint8_t *s1, __m512i sc[4])
{
    const __m512i rot = _mm512_set_epi32(11, 11, 11, 11, 7, 7, 7, 7, 3, 3, 3, 3, 31, 31, 31, 31);
    const __m512i m = _mm512_set1_epi32(0x001e001e), one = _mm512_set1_epi32(0x00010001);
    for (int h = 0; h < 2; h++)
        for (int p = 0; p < 2; p++) {
            const __m512i f = _mm512_set1_epi32((int)ld_u32((h ? s1 : s0) + 4 * p));
            sc[2 * h + p] = _mm512_ternarylogic_epi32(_mm512_rorv_epi32(f, rot), m, one, 0xea);
        }
}

/* The scaled integer sums of one super-block from its 4 vectors of magnitudes q[j] (elements
 * 64j..64j+63), the activation codes q8, the sign masks neg[j] (read by kmovq from memory
 * through a pointer gcc cannot follow, see iq2_dot_row: otherwise gcc takes a stored vector apart
 * in general registers, about 3 instructions a mask) and the scales of iq2_scales: vpdpbusd per
 * vector (sums of 4 products, at most 4 * 43 * 127: they fit 16 bits), vectors 2p and 2p + 1 as
 * the low and high words of one, vpdpwssd with the scales. */
static inline __m512i iq2_sums(const __m512i q[4], const uint8_t *q8, const uint8_t *neg,
                               __m512i sc01, __m512i sc23)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i d[4];
    for (int j = 0; j < 4; j++) {
        const __m512i y8 = ldu512(q8 + 64 * j);
        uint64_t mv; /* gcc makes this one kmovq from memory */
        memcpy(&mv, neg + 8 * j, sizeof mv);
        const __mmask64 m = _cvtu64_mask64(mv);
        d[j] = _mm512_dpbusd_epi32(z, q[j], _mm512_mask_sub_epi8(y8, m, z, y8));
    }
    const __m512i s = _mm512_dpwssd_epi32(
        z, _mm512_mask_blend_epi16(0xaaaaaaaa, d[0], _mm512_slli_epi32(d[1], 16)), sc01);
    return _mm512_dpwssd_epi32(
        s, _mm512_mask_blend_epi16(0xaaaaaaaa, d[2], _mm512_slli_epi32(d[3], 16)), sc23);
}

/* The sign bits of super-block h of a pair x0, x1: in the block at offset moff (IQ2_S), or, for
 * moff 0, those the front stored to neg (IQ2_XS). */
static inline const uint8_t *iq2_signs(const uint8_t *x0, const uint8_t *x1, size_t moff,
                                       __mmask64 *neg, int h)
{
    return moff ? (h ? x1 : x0) + moff : (const uint8_t *)(neg + 4 * h);
}

/* acc + the sums of two super-blocks times their block scales d * (activation d); the second
 * weighted by yd1 (0 for a last odd super-block paired with itself). The / 8 of the block scale
 * d * (2s + 1) / 8 is applied once, at the end of the row (exact). d is at offset 0 in both
 * block types. */
static inline __m512 iq2_acc(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0, float yd1,
                             __m512i sums0, __m512i sums1, __m512 acc)
{
    const float d0 = ld_f32(y0) * h2f(ld_u16(x0));
    const float d1 = yd1 * h2f(ld_u16(x1));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sums0), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sums1), acc);
}

/* A front: the lookups of a pair of super-blocks x0, x1 to codes, for IQ2_XS their sign masks
 * stored to neg. A values function: the codes to the magnitudes q[4h + j] of output vector j
 * (elements 64j..64j+63) of super-block h. */
typedef void (*iq2_front_fn)(const uint8_t *x0, const uint8_t *x1, __mmask64 *neg,
                             __m512i codes[2]);
typedef void (*iq2_values_fn)(const __m512i codes[2], __m512i q[8]);

/* One token's products of a pair whose weight side is unpacked (magnitudes q, scales sc of
 * iq2_scales) with the activations y0, y1 (the second weighted by yd1), the sign bytes at offset
 * moff of a block (IQ2_S) or, for moff 0, stored by the front to neg (IQ2_XS), added to acc. */
static inline __m512 iq2_token(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0,
                               const uint8_t *y1, float yd1, const __m512i q[8],
                               const __m512i sc[4], size_t moff, __mmask64 *neg, __m512 acc)
{
    __m512i sums[2];
    for (int h = 0; h < 2; h++)
        sums[h] = iq2_sums(q + 4 * h, (h ? y1 : y0) + Q8K_QS, iq2_signs(x0, x1, moff, neg, h),
                           sc[2 * h], sc[2 * h + 1]);
    return iq2_acc(x0, x1, y0, yd1, sums[0], sums[1], acc);
}

/* The back of a pair for one token: scales (at offset soff of a block), magnitudes, products. */
static inline __attribute__((always_inline)) __m512
iq2_back(iq2_values_fn values, const uint8_t *x0, const uint8_t *x1, const uint8_t *y0,
         const uint8_t *y1, float yd1, const __m512i codes[2], size_t soff, size_t moff,
         __mmask64 *neg, __m512 acc)
{
    __m512i sc[4], q[8];
    iq2_scales(x0 + soff, x1 + soff, sc);
    values(codes, q);
    return iq2_token(x0, x1, y0, y1, yd1, q, sc, moff, neg, acc);
}

/* The back of pair q of a row of nb super-blocks of B bytes at w, activations a: super-blocks
 * 2q and 2q + 1, or for a last odd one 2q twice, the second weighted 0. */
static inline __attribute__((always_inline)) __m512
iq2_back_pair(iq2_values_fn values, const uint8_t *w, const uint8_t *a, size_t B, size_t soff,
              size_t moff, uint64_t nb, uint64_t q, const __m512i codes[2], __mmask64 *neg,
              __m512 acc)
{
    const uint64_t i = 2 * q, k = i + 1 < nb ? i + 1 : i;
    return iq2_back(values, w + i * B, w + k * B, a + i * Q8K, a + k * Q8K,
                    k > i ? ld_f32(a + k * Q8K) : 0.0f, codes, soff, moff, neg, acc);
}

/* The front of pair q (as iq2_back_pair). */
static inline __attribute__((always_inline)) void
iq2_front_pair(iq2_front_fn front, const uint8_t *w, size_t B, uint64_t nb, uint64_t q,
               __mmask64 *neg, __m512i codes[2])
{
    const uint64_t i = 2 * q, k = i + 1 < nb ? i + 1 : i;
    front(w + i * B, w + k * B, neg, codes);
}

/* One row of n / 256 super-blocks of B bytes (scales at offset soff, sign bytes at moff or 0) in
 * pairs, the front of pair p + 2 issued before the back of pair p, so that the long chains of
 * loads, permutes and lookups overlap the products of earlier pairs (for IQ2_XS one pair ahead
 * gained ~12% over none, two another ~5%). IQ2_XS's sign masks of the three pairs in flight
 * rotate through three thirds of buf, read back through neg, a pointer gcc cannot follow: each
 * mask is then one kmovq from memory (otherwise gcc takes the stored vector apart in general
 * registers, about 3 instructions a mask). Inlined with constant front and back, which are
 * inlined in turn (the VBMI kernels pass VBMI functions, inlined into their VBMI caller). */
static inline __attribute__((always_inline)) float
iq2_dot_row(const void *wv, const void *av, uint64_t n, size_t B, size_t soff, size_t moff,
            iq2_front_fn front, iq2_values_fn values)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K, np = (nb + 1) / 2;
    if (nb == 0)
        return 0.0f;
    __mmask64 buf[24] __attribute__((aligned(64)));
    __mmask64 *neg = buf;
    __asm__("" : "+r"(neg));
    __m512 acc = _mm512_setzero_ps();
    __m512i c0[2], c1[2];
    iq2_front_pair(front, w, B, nb, 0, buf, c0);
    if (np == 1)
        return 0.125f * _mm512_reduce_add_ps(
                            iq2_back_pair(values, w, a, B, soff, moff, nb, 0, c0, neg, acc));
    iq2_front_pair(front, w, B, nb, 1, buf + 8, c1);
    size_t s0 = 0, s1 = 8, s2 = 16;
    uint64_t p = 0;
    for (; p + 2 < np; p++) { /* pairs p, p + 1 and p + 2 exist, p is whole */
        __m512i next[2];
        iq2_front_pair(front, w, B, nb, p + 2, buf + s2, next);
        const uint64_t i = 2 * p;
        acc = iq2_back(values, w + i * B, w + (i + 1) * B, a + i * Q8K, a + (i + 1) * Q8K,
                       ld_f32(a + (i + 1) * Q8K), c0, soff, moff, neg + s0, acc);
        c0[0] = c1[0];
        c0[1] = c1[1];
        c1[0] = next[0];
        c1[1] = next[1];
        const size_t t = s0;
        s0 = s1;
        s1 = s2;
        s2 = t;
    }
    acc = iq2_back_pair(values, w, a, B, soff, moff, nb, p, c0, neg + s0, acc);
    acc = iq2_back_pair(values, w, a, B, soff, moff, nb, p + 1, c1, neg + s1, acc);
    /* the / 8 of the block scales d * (2s + 1) / 8 (exact) */
    return 0.125f * _mm512_reduce_add_ps(acc);
}

/* One step of iq2_dot_rows2: super-blocks i and k (k = i + 1, or i for a last odd one, weighted
 * yd1 = 0) of both rows wr[r] (B bytes each), the fronts of both rows, then their backs. */
static inline __attribute__((always_inline)) void
iq2_rows2_step(const uint8_t *const wr[2], const uint8_t *a, uint64_t i, uint64_t k, float yd1,
               size_t B, size_t soff, size_t moff, iq2_front_fn front, iq2_values_fn values,
               __mmask64 *buf, __mmask64 *neg, __m512 acc[2])
{
    __m512i codes[2][2];
    /* unrolled: otherwise gcc loops over the rows, the codes in memory (up to 20% slower) */
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
        front(wr[r] + i * B, wr[r] + k * B, buf + 8 * r, codes[r]);
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
        acc[r] = iq2_back(values, wr[r] + i * B, wr[r] + k * B, a + i * Q8K, a + k * Q8K, yd1,
                          codes[r], soff, moff, neg + 8 * r, acc[r]);
}

/* Two rows w0, w1 against one activation row: per pair of super-blocks both rows' fronts, then
 * both backs, each row's steps those of iq2_dot_row in its order (so each result equals it bit
 * for bit). No software pipeline: the two rows' independent chains give the core its parallel
 * work (fronts issued a pair ahead, with the codes in registers or in memory, were slower). */
static inline __attribute__((always_inline)) void
iq2_dot_rows2(const void *w0, const void *w1, const void *av, uint64_t n, size_t B, size_t soff,
              size_t moff, iq2_front_fn front, iq2_values_fn values, float out[2])
{
    const uint8_t *const wr[2] = {w0, w1}, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __mmask64 buf[16] __attribute__((aligned(64)));
    __mmask64 *neg = buf; /* read back through a pointer gcc cannot follow (iq2_dot_row) */
    __asm__("" : "+r"(neg));
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    uint64_t i = 0;
    for (; i + 1 < nb; i += 2)
        iq2_rows2_step(wr, a, i, i + 1, ld_f32(a + (i + 1) * Q8K), B, soff, moff, front, values,
                       buf, neg, acc);
    if (i < nb)
        iq2_rows2_step(wr, a, i, i, 0.0f, B, soff, moff, front, values, buf, neg, acc);
    for (int r = 0; r < 2; r++)
        out[r] = 0.125f * _mm512_reduce_add_ps(acc[r]);
}

/* GM_DOT_MULTI activation rows a + t * a_stride against one row: per pair of super-blocks the
 * front, magnitudes and scales once, then iq2_dot_row's per-token step for each token in the
 * same order, so out[t] equals it bit for bit (no pipelining: the 4 tokens' products give the
 * lookups enough independent work). */
static inline __attribute__((always_inline)) void
iq2_dot_multi(const void *wv, const void *av, uint64_t a_stride, uint64_t n, size_t B,
              size_t soff, size_t moff, iq2_front_fn front, iq2_values_fn values, float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __mmask64 buf[8] __attribute__((aligned(64)));
    __mmask64 *neg = buf;
    __asm__("" : "+r"(neg));
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < GM_DOT_MULTI; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i += 2) {
        const uint64_t k = i + 1 < nb ? i + 1 : i;
        const uint8_t *x0 = w + i * B, *x1 = w + k * B;
        __m512i codes[2], sc[4], q[8];
        front(x0, x1, buf, codes);
        iq2_scales(x0 + soff, x1 + soff, sc);
        values(codes, q);
        for (int t = 0; t < GM_DOT_MULTI; t++) {
            const uint8_t *y = a + t * a_stride;
            acc[t] = iq2_token(x0, x1, y + i * Q8K, y + k * Q8K,
                               k > i ? ld_f32(y + k * Q8K) : 0.0f, q, sc, moff, neg, acc[t]);
        }
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = 0.125f * _mm512_reduce_add_ps(acc[t]);
}

/* ---- the avx512 level --------------------------------------------------------------------- */

/* The grid rows as 16-bit codes in the layout of dot_avx512.c's grid_codes (the index of row
 * byte b at bit 8 (b % 2) + 2 (b / 2), so that one shift by 2p serves both bytes of word p);
 * filled once by gm_dot_fill_avx512_iq2. */
static uint16_t g_iq2xs_wcodes[512], g_iq2s_wcodes[1024];

/* The codes of the 32 rows whose indices are the 16-bit words of idx (bits 0-8 for rows = 512,
 * 0-9 for 1024; the bits above ignored): grid_lookup per 256 rows, blended by bits 8 and 9. */
static inline __m512i iq2_lookup_w(const uint16_t *code, int rows, __m512i idx)
{
    /* gcc cannot follow the table pointer: it reloads the table vectors at each use (cheap)
     * instead of hoisting them out of the row's loop, which made it copy them all to the stack
     * at each call (about 1 KiB of stores per row: 3% of the time of 4096-column rows, 10% for
     * IQ2_S here) */
    __asm__("" : "+r"(code));
    __m512i r[4];
    for (int k = 0; k < rows / 256; k++) {
        __m512i t[8];
        load_codes(code + 256 * k, t);
        r[k] = grid_lookup(t, idx);
    }
    const __mmask32 b8 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x100));
    for (int k = 0; k < rows / 512; k++)
        r[k] = _mm512_mask_blend_epi16(b8, r[2 * k], r[2 * k + 1]);
    if (rows == 512)
        return r[0];
    return _mm512_mask_blend_epi16(_mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x200)), r[0],
                                   r[1]);
}

/* Front of IQ2_XS: per super-block its 32 qs words are the indices (iq2_lookup_w), codes[h]
 * those of super-block h in row order; the sign bytes (qword v of neg: the 64 signs of output
 * vector v = 4h + j), the 7 stored bits (word >> 9, narrowed by vpmovwb) and their parity as bit
 * 7 (vpshufb of a parity table, once per nibble). */
static inline void iq2_xs_front(const uint8_t *x0, const uint8_t *x1, __mmask64 *neg,
                                __m512i codes[2])
{
    /* 0x80 where the nibble i has odd parity */
    const __m512i par = _mm512_broadcast_i32x4(_mm_set_epi8(
        0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0));
    const __m512i m15 = _mm512_set1_epi8(15);
    const __m512i q0 = ldu512(x0 + offsetof(gm_block_iq2_xs, qs));
    const __m512i q1 = ldu512(x1 + offsetof(gm_block_iq2_xs, qs));
    const __m512i s = join256(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q0, 9)),
                              _mm512_cvtepi16_epi8(_mm512_srli_epi16(q1, 9)));
    const __m512i plo = _mm512_shuffle_epi8(par, _mm512_and_si512(s, m15));
    const __m512i phi = _mm512_shuffle_epi8(par, _mm512_and_si512(_mm512_srli_epi16(s, 4), m15));
    _mm512_store_si512(neg, _mm512_ternarylogic_epi32(s, plo, phi, 0x96)); /* s ^ plo ^ phi */
    codes[0] = iq2_lookup_w(g_iq2xs_wcodes, 512, q0);
    codes[1] = iq2_lookup_w(g_iq2xs_wcodes, 512, q1);
}

/* Front of IQ2_S, as iq2_xs_front: the index of row r is qs[r] | ((qh[r / 4] >> 2 (r % 4)) & 3)
 * << 8: qh[r / 4] to byte r by vpshufb, widened to words, shifted left by 8 - 2 (r % 4); the
 * sign bytes stay in the block (the back reads them there). */
static inline void iq2_s_front(const uint8_t *x0, const uint8_t *x1, __mmask64 *neg,
                               __m512i codes[2])
{
    (void)neg;
    static const int8_t k_qh_byte[32] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                         4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7};
    const __m512i shift = _mm512_set1_epi64(0x0002000400060008ll);
    for (int h = 0; h < 2; h++) {
        const uint8_t *x = h ? x1 : x0;
        const __m256i qh = _mm256_shuffle_epi8(
            _mm256_set1_epi64x((long long)ld_u64(x + offsetof(gm_block_iq2_s, qh))),
            ldu256(k_qh_byte));
        const __m512i hb = _mm512_sllv_epi16(_mm512_cvtepu8_epi16(qh), shift);
        const __m512i lo = _mm512_cvtepu8_epi16(ldu256(x + offsetof(gm_block_iq2_s, qs)));
        /* (hb & 0x300) | lo */
        const __m512i idx = _mm512_ternarylogic_epi32(hb, _mm512_set1_epi16(0x300), lo, 0xea);
        codes[h] = iq2_lookup_w(g_iq2s_wcodes, 1024, idx);
    }
}

/* Magnitudes of both types: per output vector j of super-block h the codes of its rows 8j + k
 * repeated over the 4 words of qword k (vpermw), shifted by 2p in word p, masked to 2 bits and
 * mapped to magnitudes (vpshufb). */
static inline void iq2_values(const __m512i codes[2], __m512i q[8])
{
    const __m512i vals = _mm512_broadcast_i32x4(ldu128(k_iq2_mags));
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const __m512i shift = _mm512_set1_epi64(0x0006000400020000ll);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_srlv_epi16(
                _mm512_permutexvar_epi16(word_repeat_index(8 * j, 2), codes[h]), shift);
            q[4 * h + j] = _mm512_shuffle_epi8(vals, _mm512_and_si512(c, m3));
        }
}

static float dot_iq2_xs(const void *w, const void *a, uint64_t n)
{
    return iq2_dot_row(w, a, n, sizeof(gm_block_iq2_xs), offsetof(gm_block_iq2_xs, scales), 0,
                       iq2_xs_front, iq2_values);
}

static float dot_iq2_s(const void *w, const void *a, uint64_t n)
{
    return iq2_dot_row(w, a, n, sizeof(gm_block_iq2_s), offsetof(gm_block_iq2_s, scales),
                       offsetof(gm_block_iq2_s, qs) + GM_QK_K / 8,
                       iq2_s_front, iq2_values);
}

static void dot_multi_iq2_xs(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                             float *out)
{
    iq2_dot_multi(w, a, a_stride, n, sizeof(gm_block_iq2_xs), offsetof(gm_block_iq2_xs, scales),
                  0, iq2_xs_front, iq2_values, out);
}

static void dot_multi_iq2_s(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                            float *out)
{
    iq2_dot_multi(w, a, a_stride, n, sizeof(gm_block_iq2_s), offsetof(gm_block_iq2_s, scales),
                  offsetof(gm_block_iq2_s, qs) + GM_QK_K / 8, iq2_s_front, iq2_values, out);
}

static void dot_rows2_iq2_xs(const void *w0, const void *w1, const void *a, uint64_t n,
                             float out[2])
{
    iq2_dot_rows2(w0, w1, a, n, sizeof(gm_block_iq2_xs), offsetof(gm_block_iq2_xs, scales), 0,
                  iq2_xs_front, iq2_values, out);
}

static void dot_rows2_iq2_s(const void *w0, const void *w1, const void *a, uint64_t n,
                            float out[2])
{
    iq2_dot_rows2(w0, w1, a, n, sizeof(gm_block_iq2_s), offsetof(gm_block_iq2_s, scales),
                  offsetof(gm_block_iq2_s, qs) + GM_QK_K / 8, iq2_s_front, iq2_values, out);
}

/* The word codes of a grid of n rows (g_iq2xs_wcodes). */
static void iq2_grid_wcodes(const uint8_t *grid, int n, uint16_t *code)
{
    for (int r = 0; r < n; r++) {
        uint32_t c = 0;
        for (int b = 0; b < 8; b++)
            c |= iq2_mag_index(grid[8 * r + b]) << (8 * (b % 2) + 2 * (b / 2));
        code[r] = (uint16_t)c;
    }
}

/* ---- the avx512vbmi level ----------------------------------------------------------------- */

#if defined(GM_KERNELS_HAVE_AVX512VBMI)

/* The grid rows as codes (the index of row byte b at bit 2b), low code bytes then high code
 * bytes: IQ2_XS 512 + 512, IQ2_S 1024 + 1024. Filled once by gm_dot_fill_avx512_iq2. */
static uint8_t g_iq2xs_codes[2][512] __attribute__((aligned(64)));
static uint8_t g_iq2s_codes[2][1024] __attribute__((aligned(64)));
/* The magnitudes, index i at byte i, repeated with period 4: vpermb reads 6 index bits, of which
 * the 4 above an index's own belong to the next one. */
static uint8_t g_iq2_vals[64];

/* vpermt2b indices of the rows of two super-blocks h = 0, 1 in row order (row r of super-block h
 * to byte 32h + r) from the two blocks' qs loaded as two vectors: the low (g_xs_lo) and high
 * (g_xs_hi) bytes of IQ2_XS's 16-bit words (grid index bits 0-7; bit 8 and the 7 sign bits). */
static uint8_t g_xs_lo[64], g_xs_hi[64];
/* IQ2_S, byte 32h + r for row r of super-block h: the vpshufb index of qh[r / 4] (g_s_qh_byte),
 * the bit of index bit 8 (g_s_bit8) and 9 (g_s_bit9) in it. */
static uint8_t g_s_qh_byte[64], g_s_bit8[64], g_s_bit9[64];
/* vpermt2b indices of the looked-up low and high code bytes (row order) that give super-block
 * h's codes (g_arrange[h]) with those of rows 8m + k (m < 4) in word m of qword k: so that word
 * j of every qword serves output vector j (elements 64j..64j+63, rows 8j..8j+7). */
static uint8_t g_arrange[2][64];

/* One code byte (low or high: t = that table) of the 64 rows whose indices are idx (bits 0-7)
 * plus the index bits 8 (b8) and, for IQ2_S (rows = 1024), 9 (b9): vpermt2b per 128 rows, the
 * results blended by bits 7, 8 and 9. */
VBMI static inline __m512i iq2_lookup_vbmi(const uint8_t *t, int rows, __m512i idx, __mmask64 b7,
                                           __mmask64 b8, __mmask64 b9)
{
    __m512i r[4];
    for (int k = 0; k < rows / 256; k++) /* r[k]: rows 256k..256k + 255 */
        r[k] = _mm512_mask_blend_epi8(
            b7, _mm512_permutex2var_epi8(ldu512(t + 256 * k), idx, ldu512(t + 256 * k + 64)),
            _mm512_permutex2var_epi8(ldu512(t + 256 * k + 128), idx,
                                     ldu512(t + 256 * k + 192)));
    for (int k = 0; k < rows / 512; k++)
        r[k] = _mm512_mask_blend_epi8(b8, r[2 * k], r[2 * k + 1]);
    return rows == 1024 ? _mm512_mask_blend_epi8(b9, r[0], r[1]) : r[0];
}

/* The codes of the 64 rows of two super-blocks (row order, index bits 0-7 in idx, bits 8 and 9
 * in the masks b8, b9), in the layout of g_arrange. */
VBMI static inline void iq2_codes_vbmi(const uint8_t *table, int rows, __m512i idx, __mmask64 b8,
                                       __mmask64 b9, __m512i codes[2])
{
    __asm__("" : "+r"(table)); /* as in iq2_lookup_w */
    const __mmask64 b7 = _mm512_movepi8_mask(idx);
    const __m512i lo = iq2_lookup_vbmi(table, rows, idx, b7, b8, b9);
    const __m512i hi = iq2_lookup_vbmi(table + rows, rows, idx, b7, b8, b9);
    codes[0] = _mm512_permutex2var_epi8(lo, ldu512(g_arrange[0]), hi);
    codes[1] = _mm512_permutex2var_epi8(lo, ldu512(g_arrange[1]), hi);
}

/* Front of IQ2_XS for super-blocks x0, x1: the low and high bytes of the 64 qs words gathered;
 * the codes of the rows (iq2_codes_vbmi); the sign bytes of the rows to neg (qword v: the 64 sign
 * bits of output vector v = 4h + j), the 7 stored bits from the high bytes shifted right by one
 * (bit 7 then holds garbage) and bit 7 replaced by the parity of the 7 (bit 7 xor the parity of
 * all 8 bits, vpopcntb). */
VBMI static inline void iq2_xs_front_vbmi(const uint8_t *x0, const uint8_t *x1, __mmask64 *neg,
                                          __m512i codes[2])
{
    const __m512i a0 = ldu512(x0 + offsetof(gm_block_iq2_xs, qs));
    const __m512i a1 = ldu512(x1 + offsetof(gm_block_iq2_xs, qs));
    const __m512i il = _mm512_permutex2var_epi8(a0, ldu512(g_xs_lo), a1);
    const __m512i ih = _mm512_permutex2var_epi8(a0, ldu512(g_xs_hi), a1);
    const __m512i s = _mm512_srli_epi16(ih, 1);
    const __m512i par = _mm512_popcnt_epi8(s);
    _mm512_store_si512(neg, _mm512_ternarylogic_epi32(s, _mm512_slli_epi16(par, 7),
                                                      _mm512_set1_epi8((char)0x80), 0x78));
    iq2_codes_vbmi(&g_iq2xs_codes[0][0], 512, il, _mm512_test_epi8_mask(ih, _mm512_set1_epi8(1)),
                   0, codes);
}

/* Front of IQ2_S, as iq2_xs_front_vbmi: the index bytes of the two super-blocks taken as they
 * are (no vpermt2b: IQ2_S's lookups already take twice the permutes of IQ2_XS's, and vpermt2b
 * has half the throughput of the other shuffles here), the sign bytes left in the blocks (the
 * back reads them there: no store and reload); index bits 8 and 9 of row r of super-block h by
 * vptestmb of qh[r / 4] (vpshufb) at byte 32h + r. */
VBMI static inline void iq2_s_front_vbmi(const uint8_t *x0, const uint8_t *x1, __mmask64 *neg,
                                         __m512i codes[2])
{
    /* per super-block 32 index bytes, then 32 sign bytes */
    const size_t oqs = offsetof(gm_block_iq2_s, qs), oqh = offsetof(gm_block_iq2_s, qh);
    (void)neg;
    /* the 64-bit qh of x0 in qwords 0-3, of x1 in qwords 4-7 */
    const __m512i qh = _mm512_shuffle_epi8(
        _mm512_mask_set1_epi64(_mm512_set1_epi64((long long)ld_u64(x0 + oqh)), 0xf0,
                               (long long)ld_u64(x1 + oqh)),
        ldu512(g_s_qh_byte));
    iq2_codes_vbmi(&g_iq2s_codes[0][0], 1024, join256(ldu256(x0 + oqs), ldu256(x1 + oqs)),
                   _mm512_test_epi8_mask(qh, ldu512(g_s_bit8)),
                   _mm512_test_epi8_mask(qh, ldu512(g_s_bit9)), codes);
}

/* Magnitudes of both types (avx512_util.h's iq2_values_vbmi on the magnitude table). */
VBMI static inline void iq2_mags_vbmi(const __m512i codes[2], __m512i q[8])
{
    iq2_values_vbmi(g_iq2_vals, codes, q);
}

VBMI static float dot_iq2_xs_vbmi(const void *w, const void *a, uint64_t n)
{
    return iq2_dot_row(w, a, n, sizeof(gm_block_iq2_xs), offsetof(gm_block_iq2_xs, scales), 0,
                       iq2_xs_front_vbmi, iq2_mags_vbmi);
}

VBMI static float dot_iq2_s_vbmi(const void *w, const void *a, uint64_t n)
{
    return iq2_dot_row(w, a, n, sizeof(gm_block_iq2_s), offsetof(gm_block_iq2_s, scales),
                       offsetof(gm_block_iq2_s, qs) + GM_QK_K / 8,
                       iq2_s_front_vbmi, iq2_mags_vbmi);
}

VBMI static void dot_multi_iq2_xs_vbmi(const void *w, const void *a, uint64_t a_stride,
                                       uint64_t n, float *out)
{
    iq2_dot_multi(w, a, a_stride, n, sizeof(gm_block_iq2_xs), offsetof(gm_block_iq2_xs, scales),
                  0, iq2_xs_front_vbmi, iq2_mags_vbmi, out);
}

VBMI static void dot_multi_iq2_s_vbmi(const void *w, const void *a, uint64_t a_stride,
                                      uint64_t n, float *out)
{
    iq2_dot_multi(w, a, a_stride, n, sizeof(gm_block_iq2_s), offsetof(gm_block_iq2_s, scales),
                  offsetof(gm_block_iq2_s, qs) + GM_QK_K / 8, iq2_s_front_vbmi, iq2_mags_vbmi,
                  out);
}

VBMI static void dot_rows2_iq2_s_vbmi(const void *w0, const void *w1, const void *a,
                                      uint64_t n, float out[2])
{
    iq2_dot_rows2(w0, w1, a, n, sizeof(gm_block_iq2_s), offsetof(gm_block_iq2_s, scales),
                  offsetof(gm_block_iq2_s, qs) + GM_QK_K / 8, iq2_s_front_vbmi, iq2_mags_vbmi,
                  out);
}

/* The codes of a grid of n rows (g_iq2xs_codes). */
static void iq2_grid_codes(const uint8_t *grid, int n, uint8_t *lo, uint8_t *hi)
{
    for (int r = 0; r < n; r++) {
        uint32_t c = 0;
        for (int b = 0; b < 8; b++)
            c |= iq2_mag_index(grid[8 * r + b]) << (2 * b);
        lo[r] = (uint8_t)c;
        hi[r] = (uint8_t)(c >> 8);
    }
}

/* The tables of the avx512vbmi level. */
static void iq2_tables_init_vbmi(void)
{
    for (int i = 0; i < 64; i++)
        g_iq2_vals[i] = k_iq2_mags[i % 4];
    iq2_grid_codes(&gm_iq2xs_grid[0][0], 512, g_iq2xs_codes[0], g_iq2xs_codes[1]);
    iq2_grid_codes(&gm_iq2s_grid[0][0], 1024, g_iq2s_codes[0], g_iq2s_codes[1]);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 32; r++) {
            g_xs_lo[32 * h + r] = (uint8_t)(64 * h + 2 * r);
            g_xs_hi[32 * h + r] = (uint8_t)(64 * h + 2 * r + 1);
            g_s_qh_byte[32 * h + r] = (uint8_t)(r / 4);
            g_s_bit8[32 * h + r] = (uint8_t)(1u << (2 * (r % 4)));
            g_s_bit9[32 * h + r] = (uint8_t)(2u << (2 * (r % 4)));
        }
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 8; k++)
            for (int m = 0; m < 4; m++) {
                const int r = 32 * h + 8 * m + k;
                g_arrange[h][8 * k + 2 * m] = (uint8_t)r;
                g_arrange[h][8 * k + 2 * m + 1] = (uint8_t)(64 + r);
            }
}

#endif /* GM_KERNELS_HAVE_AVX512VBMI */

void gm_dot_fill_avx512_iq2(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        iq2_grid_wcodes(&gm_iq2xs_grid[0][0], 512, g_iq2xs_wcodes);
        iq2_grid_wcodes(&gm_iq2s_grid[0][0], 1024, g_iq2s_wcodes);
        t[GM_TYPE_IQ2_XS] = dot_iq2_xs;
        t[GM_TYPE_IQ2_S] = dot_iq2_s;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    iq2_tables_init_vbmi();
    t[GM_TYPE_IQ2_XS] = dot_iq2_xs_vbmi;
    t[GM_TYPE_IQ2_S] = dot_iq2_s_vbmi;
#endif
}

void gm_dot_multi_fill_avx512_iq2(gm_dot_multi_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        t[GM_TYPE_IQ2_XS] = dot_multi_iq2_xs;
        t[GM_TYPE_IQ2_S] = dot_multi_iq2_s;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    t[GM_TYPE_IQ2_XS] = dot_multi_iq2_xs_vbmi;
    t[GM_TYPE_IQ2_S] = dot_multi_iq2_s_vbmi;
#endif
}

void gm_dot_rows2_fill_avx512_iq2(gm_dot_rows2_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        t[GM_TYPE_IQ2_XS] = dot_rows2_iq2_xs;
        t[GM_TYPE_IQ2_S] = dot_rows2_iq2_s;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    /* none for IQ2_XS: its software-pipelined one-row kernel keeps the core as busy as two rows
     * without a pipeline do (the two-row form was 3-6% slower from 4096 columns on) */
    t[GM_TYPE_IQ2_S] = dot_rows2_iq2_s_vbmi;
#endif
}
