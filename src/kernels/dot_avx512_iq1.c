/* AVX-512 dot products of IQ1_S and IQ1_M (see dot_impl.h: gm_dot_fill_avx512_iq1).
 *
 * Both types index one grid of 2048 rows of 8 values in {-1, 0, 1} (11-bit indices: a qs byte
 * and 3 bits of qh), scale them by 3-bit scales 2s + 1 and add a delta of +-1/8 (IQ1_S: scale
 * and delta sign per 32 elements, in the sub-block's qh word; IQ1_M: scales per 16 elements,
 * the delta sign per row (8 elements) in bit 3 of the row's qh nibble, the f16 block scale
 * spread over the scale words' top nibbles).
 *
 * The grid is too large for registers (the IQ2_XXS way) and scalar loads or gathers cost more
 * (measured: 8 64-bit loads into a vector ~1.7 ns, a 16-lane gather ~6 ns, against ~0.2 ns per
 * vpermt2b), so the rows are looked up by vpermt2b from tables in memory, 64 rows (two
 * super-blocks) at a time; the sorted grid lets half of each row come from small tables (see
 * g_iq1_tab), which leaves 19 vpermt2b per 64 rows. A row is looked up as its nonzero bits and
 * its negative bits: the 64 looked-up bytes of each kind are then the element masks of the 8
 * output vectors of 64 elements (qword v: vector v), stored and read back by kmovq. Per output
 * vector: the scales 8 (2s + 1) to the unsigned side of vpdpbusd by vpermb under the nonzero
 * mask, the signs to the activations by vpsubb under the negative mask. The delta goes through
 * the activations' sums: the grid part is kept times 8 (= 1 / delta) to stay an integer, so
 * the delta part is +-(2s + 1) times the activation sum of its group; from bsums (sums of 16)
 * for IQ1_S, for IQ1_M from bsums taken positive minus 2 (2s + 1) times the activations of the
 * delta-negative rows (one more vpdpbusd per vector, under the rows' mask). Two super-blocks
 * per step, the lookups (front) run two steps ahead of the products (back). Installed at the
 * avx512vbmi level only (vpermt2b, vpermb, vpmultishiftqb). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

#if defined(GM_KERNELS_HAVE_AVX512VBMI)

/* The grid rows split in their low half (elements 0-3) and high half (4-7), each half as its
 * nonzero bits and negative bits. The grid is sorted (as base-3 numbers, element 7 the most
 * significant), so the high half of row r is a step function of r: within each aligned block
 * of 16 rows it changes at most once (81 possible halves over 2048 rows; checked by
 * iq1_tables_init). So only the low half needs a table of 2048 (g_iq1_tab[0..2047]: nonzero
 * bits of elements 0-3 in bits 0-3, negative bits in bits 4-7); the high half is looked up by
 * r >> 4 from three tables of 128 (g_iq1_tab + 2048: the half at the block's start, + 2176:
 * after its change, + 2304: the row of the block where it changes, 16 for none; halves as
 * nonzero bits << 4 | negative bits).
 * Half the table bytes to look up, per 64 rows 19 vpermt2b instead of 32. Filled once by
 * gm_dot_fill_avx512_iq1. */
static uint8_t g_iq1_tab[2048 + 3 * 128] __attribute__((aligned(64)));
/* vpmultishiftqb controls that move the index bits 8-10 (and for IQ1_M the delta sign above
 * them) of row i' of a qword of 8 rows to the low bits of byte i', from the 32 qh bits of those
 * rows zero-extended to the qword: IQ1_S row 4m + l (m: sub-block of the two, l: row in it) at
 * bit 16m + 3l; IQ1_M row i' at bit 4i'. */
static uint8_t g_s_hsel[64], g_m_hsel[64];
/* vpermb indices of the 8 (2s + 1) scale bytes of output vector v = 4h + j (super-block h,
 * elements 64j..64j+63) from the words holding them (byte 2 * word): IQ1_S words 2k and 2k + 1
 * for sub-block k = 8h + sb (32 elements), IQ1_M word 16h + g (16-element group g). */
static uint8_t g_s_ctl[8][64], g_m_ctl[8][64];

/* The low-half table byte (t: g_iq1_tab) of the 64 rows whose index bits 0-6 are the bytes of
 * idx: one vpermt2b per 128 rows (chunk c: rows 128c..128c + 127), the results combined by index
 * bits 7 (b[0]), 8, 9, 10 (b[3]).
 *
 * Rows 256k..256k + 255 (chunks 2k, 2k + 1): vpermi2b under a mask keeps the index where the
 * mask is clear, so the second lookup (index bit 7 set, b[0]) reads the indices that the first
 * (bit 7 clear, n7) left in place: two lookups and no blend. */
#define IQ1_LOOK(c, r, k) \
    _mm512_mask2_permutex2var_epi8(ldu512(t + 128 * (c)), r, k, ldu512(t + 128 * (c) + 64))
#define IQ1_PAIR(k) IQ1_LOOK(2 * (k) + 1, IQ1_LOOK(2 * (k), idx, n7), b[0])

VBMI static inline __attribute__((always_inline)) __m512i iq1_lookup_vbmi(const uint8_t *t,
                                                                          __m512i idx,
                                                                          const __mmask64 b[4])
{
    const __mmask64 n7 = _knot_mask64(b[0]);
    /* the 8 pairs of chunks blended by bit 8, then 9 and 10 */
    const __m512i q0 = _mm512_mask_blend_epi8(b[1], IQ1_PAIR(0), IQ1_PAIR(1));
    const __m512i q1 = _mm512_mask_blend_epi8(b[1], IQ1_PAIR(2), IQ1_PAIR(3));
    const __m512i q2 = _mm512_mask_blend_epi8(b[1], IQ1_PAIR(4), IQ1_PAIR(5));
    const __m512i q3 = _mm512_mask_blend_epi8(b[1], IQ1_PAIR(6), IQ1_PAIR(7));
    return _mm512_mask_blend_epi8(b[3], _mm512_mask_blend_epi8(b[2], q0, q1),
                                  _mm512_mask_blend_epi8(b[2], q2, q3));
}

#undef IQ1_PAIR
#undef IQ1_LOOK

/* The nonzero and negative bits of the 64 rows of two super-blocks (row order: row r of
 * super-block h in byte 32h + r), their index bits 0-7 in qs and bits 8-10 in bits 0-2 of x
 * (garbage above), stored to m[0..7] and m[8..15]: m[v] and m[8 + v] are the nonzero and
 * negative element masks of output vector v = 4h + j. */
VBMI static inline __attribute__((always_inline)) void iq1_masks_vbmi(__m512i qs, __m512i x,
                                                                     __mmask64 *m)
{
    /* the tables through a pointer gcc cannot follow: otherwise it hoists their loads out of
     * the row's loop and spills them to the stack, copying them per call */
    const uint8_t *tab = g_iq1_tab, *th = g_iq1_tab + 2048;
    __asm__("" : "+r"(tab), "+r"(th));
    const __mmask64 b[4] = {_mm512_movepi8_mask(qs),
                            _mm512_test_epi8_mask(x, _mm512_set1_epi8(1)),
                            _mm512_test_epi8_mask(x, _mm512_set1_epi8(2)),
                            _mm512_test_epi8_mask(x, _mm512_set1_epi8(4))};
    const __m512i lo = iq1_lookup_vbmi(tab, qs, b);
    /* r >> 4 = bits 8-10 << 4 | qs >> 4 (bit 7 of the byte is ignored by vpermt2b) */
    const __m512i blk = _mm512_ternarylogic_epi32(
        _mm512_slli_epi16(x, 4), _mm512_srli_epi16(qs, 4), _mm512_set1_epi8(0x70), 0xe4);
    const __m512i h0 = _mm512_permutex2var_epi8(ldu512(th), blk, ldu512(th + 64));
    const __m512i h1 = _mm512_permutex2var_epi8(ldu512(th + 128), blk, ldu512(th + 192));
    const __m512i at = _mm512_permutex2var_epi8(ldu512(th + 256), blk, ldu512(th + 320));
    const __m512i hi = _mm512_mask_blend_epi8(
        _mm512_cmpge_epu8_mask(_mm512_and_si512(qs, _mm512_set1_epi8(0x0f)), at), h0, h1);
    /* nonzero: lo & 0x0f | hi & 0xf0; negative: (lo >> 4) & 0x0f | (hi << 4) & 0xf0 */
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    _mm512_store_si512(m, _mm512_ternarylogic_epi32(lo, hi, m4, 0xe4));
    _mm512_store_si512(m + 8, _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo, 4),
                                                        _mm512_slli_epi16(hi, 4), m4, 0xe4));
}

/* qh of two super-blocks (16 bytes at p0 and p1), the 32 bits of rows 8q..8q+7 (one dword) in
 * qword q. */
static inline __m512i iq1_qh(const uint8_t *p0, const uint8_t *p1)
{
    return _mm512_cvtepu32_epi64(
        _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p0)), ldu128(p1), 1));
}

/* Front of IQ1_S for super-blocks x0, x1: the masks of their rows stored to mst (see
 * iq1_masks_vbmi). Issued IQ1_AHEAD pairs ahead of the back (iq1_dot_vbmi): the back reads the
 * masks by kmovq from memory, which would otherwise wait for the just-stored vectors, and the
 * long lookup chains of one pair overlap the products of another (measured: front and back of
 * the same pair in sequence ~12% slower, one pair ahead ~4%). */
VBMI static inline __attribute__((always_inline)) void
iq1_s_front_vbmi(const uint8_t *x0, const uint8_t *x1, __mmask64 *mst)
{
    const size_t oqs = offsetof(gm_block_iq1_s, qs), oqh = offsetof(gm_block_iq1_s, qh);
    const __m512i qhq = iq1_qh(x0 + oqh, x1 + oqh);
    const __m512i x = _mm512_multishift_epi64_epi8(ldu512(g_s_hsel), qhq);
    iq1_masks_vbmi(join256(ldu256(x0 + oqs), ldu256(x1 + oqs)), x, mst);
}

/* Back of IQ1_S, super-blocks x0, x1 with activations y0, y1 (the second weighted by its scale
 * yd1, 0 for a last odd one paired with itself), the masks m of their front (read through a
 * pointer gcc cannot follow, so that each mask is one kmovq from memory, see dot_avx512.c). */
VBMI static inline __attribute__((always_inline)) __m512
iq1_s_back_vbmi(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0, const uint8_t *y1,
                float yd1, __mmask64 *m, __m512 acc)
{
    const __m512i z = _mm512_setzero_si512();
    const size_t oqh = offsetof(gm_block_iq1_s, qh);
    /* the 16 sub-block words of qh (scale s in bits 12-14, delta sign in bit 15), each twice:
     * words 2k, 2k + 1 for sub-block k (8h + sb) */
    const __m512i qh = _mm512_permutexvar_epi16(
        word_repeat_index(0, 1),
        _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(x0 + oqh)),
                                                       ldu128(x1 + oqh), 1)));
    /* 2s + 1 = ((qh >> 11) & 0x0e) | 1; times 8 (at most 120) in the low byte for vpdpbusd */
    const __m512i ls = _mm512_ternarylogic_epi32(
        _mm512_srli_epi16(qh, 11), _mm512_set1_epi16(0x0e), _mm512_set1_epi16(1), 0xea);
    const __m512i ls8 = _mm512_slli_epi16(ls, 3);
    __m512i sum[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint8_t *q8 = (h ? y1 : y0) + Q8K_QS;
        __m512i s = z;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int v = 4 * h + j;
            const __m512i y8 = ldu512(q8 + 64 * j);
            const __m512i u = _mm512_maskz_permutexvar_epi8(_load_mask64(&m[v]),
                                                            ldu512(g_s_ctl[v]), ls8);
            const __m512i sy = _mm512_mask_sub_epi8(y8, _load_mask64(&m[8 + v]), z, y8);
            s = _mm512_dpbusd_epi32(s, u, sy);
        }
        sum[h] = s;
    }
    /* delta * 8: +-(2s + 1) (negative where the sign bit is set) times the sub-block's two
     * bsums: dword k of vpdpwssd is sub-block k's term, k < 8 for super-block 0 */
    const __m512i mul = _mm512_mask_sub_epi16(ls, _mm512_movepi16_mask(qh), z, ls);
    const __m512i bs = join256(ldu256(y0 + Q8K_BSUMS), ldu256(y1 + Q8K_BSUMS));
    sum[0] = _mm512_mask_dpwssd_epi32(sum[0], 0x00ff, bs, mul);
    sum[1] = _mm512_mask_dpwssd_epi32(sum[1], 0xff00, bs, mul);
    const float d0 = GM_IQ1S_DELTA * ld_f32(y0) * h2f(ld_u16(x0 + offsetof(gm_block_iq1_s, d)));
    const float d1 = GM_IQ1S_DELTA * yd1 * h2f(ld_u16(x1 + offsetof(gm_block_iq1_s, d)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sum[0]), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sum[1]), acc);
}

/* The f16 block scale of IQ1_M: the top nibbles of the four scale words. */
static inline float iq1_m_d(const uint8_t *x)
{
    const uint64_t s = ld_u64(x + offsetof(gm_block_iq1_m, scales));
    const uint16_t bits = (uint16_t)(((s >> 12) & 0x000f) | ((s >> 24) & 0x00f0) |
                                     ((s >> 36) & 0x0f00) | ((s >> 48) & 0xf000));
    return h2f(bits);
}

/* Front of IQ1_M, as iq1_s_front_vbmi; mst[16..23] get the rows' delta-negative masks. */
VBMI static inline __attribute__((always_inline)) void
iq1_m_front_vbmi(const uint8_t *x0, const uint8_t *x1, __mmask64 *mst)
{
    const size_t oqs = offsetof(gm_block_iq1_m, qs), oqh = offsetof(gm_block_iq1_m, qh);
    const __m512i qhq = iq1_qh(x0 + oqh, x1 + oqh);
    const __m512i x = _mm512_multishift_epi64_epi8(ldu512(g_m_hsel), qhq);
    iq1_masks_vbmi(join256(ldu256(x0 + oqs), ldu256(x1 + oqs)), x, mst);
    /* the delta sign, bit 3 of x, to all bits of the row's byte */
    _mm512_store_si512(mst + 16,
                       _mm512_movm_epi8(_mm512_test_epi8_mask(x, _mm512_set1_epi8(8))));
}

/* Back of IQ1_M, as iq1_s_back_vbmi. */
VBMI static inline __attribute__((always_inline)) __m512
iq1_m_back_vbmi(const uint8_t *x0, const uint8_t *x1, const uint8_t *y0, const uint8_t *y1,
                float yd1, __mmask64 *m, __m512 acc)
{
    const __m512i z = _mm512_setzero_si512();
    const size_t osc = offsetof(gm_block_iq1_m, scales);
    /* the 3-bit scale of 16-element group g (0..15) of super-block h: bits 3 (g % 4) of scale
     * word g / 4; word 16h + g of sc gets that word, shifted right by 3 (g % 4) */
    const __m128i w = _mm_set_epi64x((long long)ld_u64(x1 + osc), (long long)ld_u64(x0 + osc));
    const __m512i sc = _mm512_srlv_epi16(
        _mm512_permutexvar_epi16(word_repeat_index(0, 2), _mm512_castsi128_si512(w)),
        _mm512_set1_epi64(0x0009000600030000ll));
    /* 2s + 1 per word: ((sc << 1) & 0x0e) | 1 */
    const __m512i ls = _mm512_ternarylogic_epi32(
        _mm512_slli_epi16(sc, 1), _mm512_set1_epi16(0x0e), _mm512_set1_epi16(1), 0xea);
    const __m512i ls8 = _mm512_slli_epi16(ls, 3), ls2 = _mm512_slli_epi16(ls, 1);
    __m512i sum[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint8_t *q8 = (h ? y1 : y0) + Q8K_QS;
        __m512i s = z, sd = z;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int v = 4 * h + j;
            const __m512i y8 = ldu512(q8 + 64 * j);
            const __m512i ctl = ldu512(g_m_ctl[v]);
            const __m512i u = _mm512_maskz_permutexvar_epi8(_load_mask64(&m[v]), ctl, ls8);
            const __m512i sy = _mm512_mask_sub_epi8(y8, _load_mask64(&m[8 + v]), z, y8);
            s = _mm512_dpbusd_epi32(s, u, sy);
            /* 2 (2s + 1) times the activations of delta-negative rows, subtracted below */
            const __m512i ud =
                _mm512_maskz_permutexvar_epi8(_load_mask64(&m[16 + v]), ctl, ls2);
            sd = _mm512_dpbusd_epi32(sd, ud, y8);
        }
        sum[h] = _mm512_sub_epi32(s, sd);
    }
    /* delta * 8 with all signs positive: (2s + 1) times the group's bsum; word 16h + g of ls is
     * the multiplier of bsum g of super-block h, dword k of vpdpwssd holds groups 2k, 2k + 1 */
    const __m512i bs = join256(ldu256(y0 + Q8K_BSUMS), ldu256(y1 + Q8K_BSUMS));
    sum[0] = _mm512_mask_dpwssd_epi32(sum[0], 0x00ff, bs, ls);
    sum[1] = _mm512_mask_dpwssd_epi32(sum[1], 0xff00, bs, ls);
    const float d0 = GM_IQ1M_DELTA * ld_f32(y0) * iq1_m_d(x0);
    const float d1 = GM_IQ1M_DELTA * yd1 * iq1_m_d(x1);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sum[0]), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sum[1]), acc);
}

/* How many pairs the fronts run ahead of the backs. */
#define IQ1_AHEAD 2

/* The front of pair p (super-blocks 2p and 2p + 1, or 2p twice for a last odd one) into slot
 * p % (IQ1_AHEAD + 1) of buf. */
VBMI static inline __attribute__((always_inline)) void iq1_front_vbmi(const uint8_t *w, size_t B,
                                                                     uint64_t nb, uint64_t p,
                                                                     __mmask64 *buf, bool is_m)
{
    const uint8_t *x0 = w + 2 * p * B, *x1 = 2 * p + 1 < nb ? x0 + B : x0;
    __mmask64 *slot = buf + 24 * (p % (IQ1_AHEAD + 1));
    if (is_m)
        iq1_m_front_vbmi(x0, x1, slot);
    else
        iq1_s_front_vbmi(x0, x1, slot);
}

/* One row of either type: pairs of super-blocks (a last odd one paired with itself, weighted
 * 0), the front of pair p + IQ1_AHEAD issued before the back of pair p. is_m picks the type; a
 * constant after inlining. */
VBMI static inline __attribute__((always_inline)) float iq1_dot_vbmi(const void *wv, const void *av,
                                                                     uint64_t n, bool is_m)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const size_t B = is_m ? sizeof(gm_block_iq1_m) : sizeof(gm_block_iq1_s);
    /* the masks of IQ1_AHEAD + 1 pairs, stored through buf, read through m */
    __mmask64 buf[24 * (IQ1_AHEAD + 1)] __attribute__((aligned(64)));
    __mmask64 *m = buf;
    __asm__("" : "+r"(m));
    const uint64_t np = (nb + 1) / 2;
    for (uint64_t p = 0; p < IQ1_AHEAD && p < np; p++)
        iq1_front_vbmi(w, B, nb, p, buf, is_m);
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t p = 0; p < np; p++) {
        if (p + IQ1_AHEAD < np)
            iq1_front_vbmi(w, B, nb, p + IQ1_AHEAD, buf, is_m);
        const uint64_t i = 2 * p;
        const uint8_t *x0 = w + i * B, *y0 = a + i * Q8K;
        const bool two = i + 1 < nb;
        const uint8_t *x1 = two ? x0 + B : x0, *y1 = two ? y0 + Q8K : y0;
        const float yd1 = two ? ld_f32(y1) : 0.0f;
        __mmask64 *slot = m + 24 * (p % (IQ1_AHEAD + 1));
        if (is_m)
            acc = iq1_m_back_vbmi(x0, x1, y0, y1, yd1, slot, acc);
        else
            acc = iq1_s_back_vbmi(x0, x1, y0, y1, yd1, slot, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

VBMI static float dot_iq1_s_vbmi(const void *w, const void *a, uint64_t n)
{
    return iq1_dot_vbmi(w, a, n, false);
}

VBMI static float dot_iq1_m_vbmi(const void *w, const void *a, uint64_t n)
{
    return iq1_dot_vbmi(w, a, n, true);
}

/* GM_DOT_MULTI activation rows a + t * a_stride against one row of either type: per pair the
 * front once, then the back for each token (the same function as iq1_dot_vbmi's, so out[t]
 * equals its result bit for bit); the 4 tokens' backs overlap the next front. */
VBMI static inline __attribute__((always_inline)) void
iq1_multi_vbmi(const void *wv, const void *av, uint64_t a_stride, uint64_t n, bool is_m,
               float *out)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const size_t B = is_m ? sizeof(gm_block_iq1_m) : sizeof(gm_block_iq1_s);
    __mmask64 buf[24] __attribute__((aligned(64)));
    __mmask64 *m = buf;
    __asm__("" : "+r"(m));
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < GM_DOT_MULTI; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i += 2) {
        const bool two = i + 1 < nb;
        const uint8_t *x0 = w + i * B, *x1 = two ? x0 + B : x0;
        if (is_m)
            iq1_m_front_vbmi(x0, x1, buf);
        else
            iq1_s_front_vbmi(x0, x1, buf);
        for (int t = 0; t < GM_DOT_MULTI; t++) {
            const uint8_t *y0 = a + t * a_stride + i * Q8K, *y1 = two ? y0 + Q8K : y0;
            const float yd1 = two ? ld_f32(y1) : 0.0f;
            acc[t] = is_m ? iq1_m_back_vbmi(x0, x1, y0, y1, yd1, m, acc[t])
                          : iq1_s_back_vbmi(x0, x1, y0, y1, yd1, m, acc[t]);
        }
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

VBMI static void dot_multi_iq1_s_vbmi(const void *w, const void *a, uint64_t a_stride,
                                      uint64_t n, float *out)
{
    iq1_multi_vbmi(w, a, a_stride, n, false, out);
}

VBMI static void dot_multi_iq1_m_vbmi(const void *w, const void *a, uint64_t a_stride,
                                      uint64_t n, float *out)
{
    iq1_multi_vbmi(w, a, a_stride, n, true, out);
}

/* The tables above; false if the grid's high halves change more than once in some block of 16
 * rows (not so for gm_iq1s_grid: then the kernels are not installed). */
static bool iq1_tables_init(void)
{
    uint8_t half[2][2048]; /* [0]: the low half as stored, [1]: the high half */
    for (int r = 0; r < 2048; r++) {
        uint8_t nz = 0, neg = 0;
        for (int j = 0; j < 8; j++) {
            nz |= (uint8_t)((gm_iq1s_grid[r][j] != 0) << j);
            neg |= (uint8_t)((gm_iq1s_grid[r][j] < 0) << j);
        }
        half[0][r] = (uint8_t)((nz & 0x0f) | (neg & 0x0f) << 4);
        half[1][r] = (uint8_t)((nz & 0xf0) | neg >> 4);
        g_iq1_tab[r] = half[0][r];
    }
    for (int k = 0; k < 128; k++) {
        int at = 16, changes = 0;
        for (int i = 15; i > 0; i--) {
            if (half[1][16 * k + i] != half[1][16 * k])
                at = i;
            changes += half[1][16 * k + i] != half[1][16 * k + i - 1];
        }
        if (changes > 1)
            return false;
        g_iq1_tab[2048 + k] = half[1][16 * k];
        g_iq1_tab[2048 + 128 + k] = half[1][16 * k + (at < 16 ? at : 0)];
        g_iq1_tab[2048 + 256 + k] = (uint8_t)at;
    }
    for (int e = 0; e < 64; e++) {
        const int i = e % 8; /* row of the qword */
        g_s_hsel[e] = (uint8_t)(16 * (i / 4) + 3 * (i % 4));
        g_m_hsel[e] = (uint8_t)(4 * i);
    }
    for (int v = 0; v < 8; v++) {
        const int h = v / 4, j = v % 4;
        for (int e = 0; e < 64; e++) {
            g_s_ctl[v][e] = (uint8_t)(4 * (8 * h + 2 * j + e / 32));
            g_m_ctl[v][e] = (uint8_t)(2 * (16 * h + 4 * j + e / 16));
        }
    }
    return true;
}

#endif /* GM_KERNELS_HAVE_AVX512VBMI */

/* Whether the avx512vbmi kernels are installed (iq1_tables_init succeeded), for the multi fill. */
static bool g_iq1_vbmi;

void gm_dot_fill_avx512_iq1(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (vbmi && iq1_tables_init()) {
        g_iq1_vbmi = true;
        t[GM_TYPE_IQ1_S] = dot_iq1_s_vbmi;
        t[GM_TYPE_IQ1_M] = dot_iq1_m_vbmi;
    }
#else
    (void)t;
    (void)vbmi;
#endif
}

void gm_dot_multi_fill_avx512_iq1(gm_dot_multi_fn t[GM_TYPE_COUNT], bool vbmi)
{
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (vbmi && g_iq1_vbmi) {
        t[GM_TYPE_IQ1_S] = dot_multi_iq1_s_vbmi;
        t[GM_TYPE_IQ1_M] = dot_multi_iq1_m_vbmi;
    }
#else
    (void)t;
    (void)vbmi;
#endif
}

void gm_dot_rows2_fill_avx512_iq1(gm_dot_rows2_fn t[GM_TYPE_COUNT], bool vbmi)
{
    (void)t;
    (void)vbmi;
}
