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
 * vector of IQ1_S: the scales 8 (2s + 1) to the unsigned side of vpdpbusd by vpermb under the
 * nonzero mask, the signs to the activations by vpsubb under the negative mask; the delta goes
 * through the activations' sums: the grid part is kept times 8 (= 1 / delta) to stay an
 * integer, so the delta part is +-(2s + 1) times the activation sum of its sub-block (bsums).
 * IQ1_M, whose delta sign is per row: the element's whole (2s + 1) (8 g + delta) in one
 * vpdpbusd, |8 g + delta| (1, 7 or 9) times 2s + 1 by vpermb from a table of the pair's scales,
 * the sign to the activations (see iq1_m_back_vbmi). Two super-blocks per step (a pair); the
 * lookups (front) run ahead of the products (back), the fronts of two pairs (one row) or of two
 * rows (the two-row kernel) together, sharing the table loads. Installed at the avx512vbmi
 * level (vpermt2b, vpermb, vpmultishiftqb).
 *
 * The avx512 level (no byte permutes; iq1_rows_512: one row, for one token or GM_DOT_MULTI, no
 * two-row kernels) loads the rows one by one after all, as 8 (g + 1) from a table of 2048
 * qwords (g_iq1_u8), the indices computed in a vector and moved to general registers 4 at a
 * time; the unsigned bytes go to vpmaddubsw, the scales per 16 elements to vpdpwssd, and the
 * offsets (the 8 of 8 (g + 1), the delta) through the activation sums (bsums). Measured in
 * cache against the AVX2 kernels: ~2.1x for IQ1_S, ~3.9x for IQ1_M on Zen 5; ~1.6x and ~2.5x
 * on an Intel Xeon with AVX512-FP16. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

/* ---- The avx512 level (no VBMI): grid rows loaded one by one ------------------------------ */

/* The grid rows as the unsigned side of vpmaddubsw: each value g as 8 (g + 1) (0, 8 or 16), so
 * that IQ1_M can add its per-row delta + 1 (0 or 2) into the same byte (see dot_iq1_m_512).
 * Filled once by gm_dot_fill_avx512_iq1. */
static uint64_t g_iq1_u8[2048] __attribute__((aligned(64)));

/* The f16 block scale of IQ1_M: the top nibbles of the four scale words. */
static inline float iq1_m_d(const uint8_t *x)
{
    const uint64_t s = ld_u64(x + offsetof(gm_block_iq1_m, scales));
    const uint16_t bits = (uint16_t)(((s >> 12) & 0x000f) | ((s >> 24) & 0x00f0) |
                                     ((s >> 36) & 0x0f00) | ((s >> 48) & 0xf000));
    return h2f(bits);
}

/* The table rows of 8 indices (the words of lo, then of hi) in the qwords of one vector, by
 * scalar loads: the indices to general registers by vmovq / vpextrq and shifts (measured on
 * Zen 5: ~45% faster than vpextrw per index or than reloading the words from a stored vector,
 * ~80% faster than a gather of 8 qwords, which is slower still on Intel parts with the
 * gather-data-sampling fix). */
static inline __m512i iq1_rows8(const uint64_t *t, uint64_t lo, uint64_t hi)
{
#define IQ1_ROW(i)                                                                                 \
    _mm_loadl_epi64((const __m128i *)(t + (((i) < 4 ? lo : hi) >> (16 * ((i) % 4)) & 0xffff)))
    /* vpunpcklqdq rather than vpinsrq: it has an EVEX form (xmm16-31) in AVX512VL */
    const __m128i a = _mm_unpacklo_epi64(IQ1_ROW(0), IQ1_ROW(1));
    const __m128i b = _mm_unpacklo_epi64(IQ1_ROW(2), IQ1_ROW(3));
    const __m128i c = _mm_unpacklo_epi64(IQ1_ROW(4), IQ1_ROW(5));
    const __m128i d = _mm_unpacklo_epi64(IQ1_ROW(6), IQ1_ROW(7));
#undef IQ1_ROW
    return join256(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1),
                   _mm256_inserti128_si256(_mm256_castsi128_si256(c), d, 1));
}

/* The unsigned bytes of output vector j (elements 64j..64j+63) of a super-block of either type:
 * its 8 rows, indices v (words), looked up in g_iq1_u8, for IQ1_M the row's delta + 1 added (the
 * delta is negative where bit 4i + 3 of dword j of dn is set: row 8j + i). */
static inline __m512i iq1_u8_512(__m128i v, const uint8_t *dn, int j, bool is_m)
{
    /* qword i of dword j's bits: 1 << (4i + 3) */
    const __m512i dbit = _mm512_set_epi64(1ll << 31, 1ll << 27, 1ll << 23, 1ll << 19, 1ll << 15,
                                          1ll << 11, 1ll << 7, 1ll << 3);
    const __m512i u = iq1_rows8(g_iq1_u8, (uint64_t)_mm_cvtsi128_si64(v),
                                (uint64_t)_mm_extract_epi64(v, 1));
    if (!is_m)
        return u;
    /* delta + 1 = 2 where the sign bit is clear */
    const __mmask8 k =
        _mm512_testn_epi64_mask(_mm512_set1_epi32((int)ld_u32(dn + 4 * j)), dbit);
    return _mm512_mask_or_epi64(u, k, u, _mm512_set1_epi8(2));
}

/* IQ1_S weight side: per element 8 (g + 1) (2s + 1) from the table and scale words, the delta
 * and the offset -8 through the activation sums: -(8 -+ 1)(2s + 1) per sub-block, so the
 * super-block's integer is 8 times its grid-and-delta sum (the delta is 1 / 8). Sets the row
 * indices ix (words), the scale words sw[j] of output vector j and the corrections corr (words
 * per 16 elements, against the bsums); returns the block scale. */
static inline float iq1_s_weights_512(const uint8_t *x, __m512i *ix, __m512i sw[4],
                                      __m512i *corr)
{
    const __m128i qh = ldu128(x + offsetof(gm_block_iq1_s, qh));
    /* index of row r: qs[r] | ((qh[r / 4] >> 3 (r % 4)) & 7) << 8 */
    const __m512i qhr =
        _mm512_permutexvar_epi16(word_repeat_index(0, 2), _mm512_castsi128_si512(qh));
    const __m512i hb = _mm512_srlv_epi16(qhr, _mm512_set1_epi64(0x0009000600030000ll));
    *ix = _mm512_ternarylogic_epi32(
        _mm512_slli_epi16(hb, 8), _mm512_set1_epi16(0x0700),
        _mm512_cvtepu8_epi16(ldu256(x + offsetof(gm_block_iq1_s, qs))), 0xea);
    /* 2s + 1 per sub-block word; the scale words of vector j: sub-blocks 2j, 2j + 1 */
    const __m128i ls = _mm_ternarylogic_epi32(_mm_srli_epi16(qh, 11), _mm_set1_epi16(0x0e),
                                              _mm_set1_epi16(1), 0xea);
    const __m512i lsz = _mm512_zextsi128_si512(ls);
    for (int j = 0; j < 4; j++)
        sw[j] = _mm512_permutexvar_epi16(word_repeat_index(2 * j, 4), lsz);
    /* -(8 -+ 1)(2s + 1) = -7 (2s + 1), or -9 (2s + 1) where the delta is negative */
    const __m128i m7 = _mm_sub_epi16(ls, _mm_slli_epi16(ls, 3));
    const __m128i mc = _mm_mask_sub_epi16(m7, _mm_movepi16_mask(qh), m7, _mm_add_epi16(ls, ls));
    *corr = _mm512_permutexvar_epi16(word_repeat_index(0, 1), _mm512_zextsi128_si512(mc));
    return h2f(ld_u16(x + offsetof(gm_block_iq1_s, d)));
}

/* IQ1_M weight side: per element (8 (g + 1) + delta + 1) (2s + 1) = (8 g + delta + 9) (2s + 1)
 * from the table (the delta of the row added), the offset -9 through the activation sums of 16
 * (one scale each); 8 times the super-block's sum as for IQ1_S. Sets ix, sw, corr and returns
 * the block scale as iq1_s_weights_512. */
static inline float iq1_m_weights_512(const uint8_t *x, __m512i *ix, __m512i sw[4],
                                      __m512i *corr)
{
    const uint8_t *qh = x + offsetof(gm_block_iq1_m, qh);
    /* index of row r: qs[r] | ((qh[r / 2] >> 4 (r % 2)) & 7) << 8 */
    const __m512i qhr = _mm512_permutexvar_epi16(
        word_repeat_index(0, 1), _mm512_castsi256_si512(_mm256_cvtepu8_epi16(ldu128(qh))));
    const __m512i hb = _mm512_srlv_epi16(qhr, _mm512_set1_epi32(0x00040000));
    *ix = _mm512_ternarylogic_epi32(
        _mm512_slli_epi16(hb, 8), _mm512_set1_epi16(0x0700),
        _mm512_cvtepu8_epi16(ldu256(x + offsetof(gm_block_iq1_m, qs))), 0xea);
    /* the 3-bit scale of 16-element group g: bits 3 (g % 4) of scale word g / 4, as 2s + 1 in
     * word g; the scale words of vector j: groups 4j..4j + 3 */
    const __m512i sc = _mm512_srlv_epi16(
        _mm512_permutexvar_epi16(word_repeat_index(0, 2),
                                 _mm512_zextsi128_si512(_mm_loadl_epi64(
                                     (const __m128i *)(x + offsetof(gm_block_iq1_m, scales))))),
        _mm512_set1_epi64(0x0009000600030000ll));
    const __m512i ls = _mm512_ternarylogic_epi32(_mm512_slli_epi16(sc, 1), _mm512_set1_epi16(0x0e),
                                                 _mm512_set1_epi16(1), 0xea);
    for (int j = 0; j < 4; j++)
        sw[j] = _mm512_permutexvar_epi16(word_repeat_index(4 * j, 3), ls);
    /* -9 (2s + 1) per group (words 16..31 meet the zero upper half of the bsums) */
    *corr = _mm512_sub_epi16(_mm512_setzero_si512(),
                             _mm512_add_epi16(ls, _mm512_slli_epi16(ls, 3)));
    return iq1_m_d(x);
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one IQ1_S or IQ1_M row.
 * Per super-block: the weight side once (indices, scales, corrections, then each output vector's
 * rows, looked up once for all tokens), and per token the integer sum (the bsums times the
 * corrections, then per output vector the vpmaddubsw products times its scale words, exact: the
 * pairs are at most 2 * 18 * 128 in size) and one float step, so every token's result equals
 * the one-token call's bit for bit. */
static inline __attribute__((always_inline)) void
iq1_rows_512(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, bool is_m,
             int n_tok, float *out)
{
    const uint64_t nb = n / GM_QK_K;
    const size_t B = is_m ? sizeof(gm_block_iq1_m) : sizeof(gm_block_iq1_s);
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * B, *y = a + i * Q8K;
        __m512i ix, sw[4], corr, sum[GM_DOT_MULTI];
        const float wd = is_m ? iq1_m_weights_512(x, &ix, sw, &corr)
                              : iq1_s_weights_512(x, &ix, sw, &corr);
        for (int t = 0; t < n_tok; t++)
            sum[t] = _mm512_dpwssd_epi32(
                _mm512_setzero_si512(),
                _mm512_zextsi256_si512(ldu256(y + t * a_stride + Q8K_BSUMS)), corr);
        const __m128i v[4] = {_mm512_castsi512_si128(ix), _mm512_extracti32x4_epi32(ix, 1),
                              _mm512_extracti32x4_epi32(ix, 2), _mm512_extracti32x4_epi32(ix, 3)};
        const uint8_t *dn = is_m ? x + offsetof(gm_block_iq1_m, qh) : NULL;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i u = iq1_u8_512(v[j], dn, j, is_m);
            for (int t = 0; t < n_tok; t++) {
                const __m512i p =
                    _mm512_maddubs_epi16(u, ldu512(y + t * a_stride + Q8K_QS + 64 * j));
                sum[t] = _mm512_dpwssd_epi32(sum[t], p, sw[j]);
            }
        }
        for (int t = 0; t < n_tok; t++) {
            const float d = (is_m ? GM_IQ1M_DELTA : GM_IQ1S_DELTA) * ld_f32(y + t * a_stride) * wd;
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sum[t]), acc[t]);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

static float dot_iq1_s_512(const void *w, const void *a, uint64_t n)
{
    float r;
    iq1_rows_512(w, a, 0, n, false, 1, &r);
    return r;
}

static float dot_iq1_m_512(const void *w, const void *a, uint64_t n)
{
    float r;
    iq1_rows_512(w, a, 0, n, true, 1, &r);
    return r;
}

static void dot_multi_iq1_s_512(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                                float *out)
{
    iq1_rows_512(w, a, a_stride, n, false, GM_DOT_MULTI, out);
}

static void dot_multi_iq1_m_512(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                                float *out)
{
    iq1_rows_512(w, a, a_stride, n, true, GM_DOT_MULTI, out);
}

/* g_iq1_u8 from the grid. */
static void iq1_u8_init(void)
{
    for (int r = 0; r < 2048; r++) {
        uint8_t b[8];
        for (int j = 0; j < 8; j++)
            b[j] = (uint8_t)(8 * (gm_iq1s_grid[r][j] + 1));
        memcpy(&g_iq1_u8[r], b, 8);
    }
}

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
/* vpermb indices of the 8 (2s + 1) scale bytes of IQ1_S output vector v = 4h + j (super-block
 * h, elements 64j..64j+63) from the words holding them (byte 2 * word): words 2k and 2k + 1 for
 * sub-block k = 8h + sb (32 elements). */
static uint8_t g_s_ctl[8][64];
/* IQ1_M: the vpermb indices into its table (see iq1_m_back_vbmi) of output vector 4h + j with
 * multiple 1 (g_m_gi[0]) and 7 (g_m_gi[1]): the element's 16-element group of the super-block,
 * 4j + e / 16, plus 16 for 7; and the vpermt2b indices that make the table of super-block h
 * from the scale words (byte 16l + g: multiple l of group g's scale) */
static uint8_t g_m_gi[2][4][64], g_m_tidx[2][64];

/* The low-half table bytes (t: g_iq1_tab) of R (1 or 2) sets of 64 rows, set r's index bits 0-6
 * in the bytes of idx[r] and bits 7 (b[r][0]), 8, 9, 10 (b[r][3]) in masks, to lo[r]: one
 * vpermt2b per 128 rows (chunk c: rows 128c..128c + 127), the results blended by index bits 8,
 * 9, 10. Each chunk is loaded once for the R sets.
 *
 * Rows 256k..256k + 255 (chunks 2k, 2k + 1): vpermi2b under a mask keeps the index where the
 * mask is clear, so the second lookup (index bit 7 set, b[0]) reads the indices that the first
 * (bit 7 clear, n7) left in place: two lookups and no blend. */
VBMI static inline __attribute__((always_inline)) void
iq1_lookup_vbmi(const uint8_t *t, const __m512i *idx, __mmask64 (*b)[4], __m512i *lo, int R)
{
    __m512i q[2][4], pk[2][2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const uint8_t *c = t + 256 * k;
        __m512i c0 = ldu512(c), c1 = ldu512(c + 64), c2 = ldu512(c + 128), c3 = ldu512(c + 192);
        /* in registers: else gcc loads them again for each set (memory operands) */
        __asm__("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3));
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const __m512i l0 =
                _mm512_mask2_permutex2var_epi8(c0, idx[r], _knot_mask64(b[r][0]), c1);
            const __m512i l = _mm512_mask2_permutex2var_epi8(c2, l0, b[r][0], c3);
            /* the 8 pairs of chunks blended by bit 8, then 9 and 10 */
            if (k % 2 == 0)
                pk[r][0] = l;
            else
                q[r][k / 2] = _mm512_mask_blend_epi8(b[r][1], pk[r][0], l);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
        lo[r] = _mm512_mask_blend_epi8(b[r][3], _mm512_mask_blend_epi8(b[r][2], q[r][0], q[r][1]),
                                       _mm512_mask_blend_epi8(b[r][2], q[r][2], q[r][3]));
}

/* qh of two super-blocks (16 bytes at p0 and p1), the 32 bits of rows 8q..8q+7 (one dword) in
 * qword q. */
static inline __m512i iq1_qh(const uint8_t *p0, const uint8_t *p1)
{
    return _mm512_cvtepu32_epi64(
        _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p0)), ldu128(p1), 1));
}

/* Front of either type for R (1 or 2) pairs: pair p[r] (super-blocks 2p and 2p + 1, or 2p twice
 * for a last odd one) of row w[r], its 24 masks to slot[r]. The grid rows of a pair (row i of
 * super-block h in byte 32h + i) as their nonzero bits (nz) and negative bits (neg), stored as
 * slot[r][0..7] = nz and for IQ1_S slot[r][8..15] = neg: slot[r][v] and slot[r][8 + v] are the
 * element masks of output vector v = 4h + j; for IQ1_M slot[r][8 + v] is where 8 g + delta < 0
 * and slot[r][16 + v] where |8 g + delta| = 9 (see iq1_m_back_vbmi). The back reads them by
 * kmovq from memory; issued ahead of the back, as the back would otherwise wait for the
 * just-stored vectors and the long lookup chains of one pair overlap the products of another
 * (measured: front and back of the same pair in sequence ~12% slower, one pair ahead ~4%). */
VBMI static inline __attribute__((always_inline)) void
iq1_front_vbmi(const uint8_t *const *w, size_t B, uint64_t nb, const uint64_t *p,
               __mmask64 *const *slot, bool is_m, int R)
{
    /* the tables through a pointer gcc cannot follow: otherwise it hoists their loads out of
     * the row's loop and spills them to the stack, copying them per call */
    const uint8_t *tab = g_iq1_tab, *th = g_iq1_tab + 2048;
    __asm__("" : "+r"(tab), "+r"(th));
    const size_t oqs = is_m ? offsetof(gm_block_iq1_m, qs) : offsetof(gm_block_iq1_s, qs);
    const size_t oqh = is_m ? offsetof(gm_block_iq1_m, qh) : offsetof(gm_block_iq1_s, qh);
    __m512i qs[2], x[2], lo[2];
    __mmask64 b[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const uint8_t *x0 = w[r] + 2 * p[r] * B, *x1 = 2 * p[r] + 1 < nb ? x0 + B : x0;
        /* index bits 8-10 (and for IQ1_M the delta sign above them) of each row in its byte */
        x[r] = _mm512_multishift_epi64_epi8(ldu512(is_m ? g_m_hsel : g_s_hsel),
                                            iq1_qh(x0 + oqh, x1 + oqh));
        qs[r] = join256(ldu256(x0 + oqs), ldu256(x1 + oqs));
        b[r][0] = _mm512_movepi8_mask(qs[r]);
        b[r][1] = _mm512_test_epi8_mask(x[r], _mm512_set1_epi8(1));
        b[r][2] = _mm512_test_epi8_mask(x[r], _mm512_set1_epi8(2));
        b[r][3] = _mm512_test_epi8_mask(x[r], _mm512_set1_epi8(4));
    }
    iq1_lookup_vbmi(tab, qs, b, lo, R);
    __m512i th0 = ldu512(th), th1 = ldu512(th + 64), th2 = ldu512(th + 128),
            th3 = ldu512(th + 192), th4 = ldu512(th + 256), th5 = ldu512(th + 320);
    __asm__("" : "+v"(th0), "+v"(th1), "+v"(th2), "+v"(th3), "+v"(th4), "+v"(th5));
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        /* r >> 4 = bits 8-10 << 4 | qs >> 4 (bit 7 of the byte is ignored by vpermt2b) */
        const __m512i blk = _mm512_ternarylogic_epi32(_mm512_slli_epi16(x[r], 4),
                                                      _mm512_srli_epi16(qs[r], 4),
                                                      _mm512_set1_epi8(0x70), 0xe4);
        const __m512i h0 = _mm512_permutex2var_epi8(th0, blk, th1);
        const __m512i h1 = _mm512_permutex2var_epi8(th2, blk, th3);
        const __m512i at = _mm512_permutex2var_epi8(th4, blk, th5);
        const __m512i hi = _mm512_mask_blend_epi8(
            _mm512_cmpge_epu8_mask(_mm512_and_si512(qs[r], _mm512_set1_epi8(0x0f)), at), h0, h1);
        /* nonzero: lo & 0x0f | hi & 0xf0; negative: (lo >> 4) & 0x0f | (hi << 4) & 0xf0 */
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        const __m512i nz = _mm512_ternarylogic_epi32(lo[r], hi, m4, 0xe4);
        const __m512i neg = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo[r], 4),
                                                      _mm512_slli_epi16(hi, 4), m4, 0xe4);
        _mm512_store_si512(slot[r], nz);
        if (is_m) {
            /* the row's delta sign (bit 3 of x) to all bits of its byte; 8 g + delta < 0 where
             * g < 0 or g = 0 and delta < 0 (neg | ~nz & dn), |8 g + delta| = 9 where g != 0 has
             * the sign of delta (nz & ~(neg ^ dn)) */
            const __m512i dn =
                _mm512_movm_epi8(_mm512_test_epi8_mask(x[r], _mm512_set1_epi8(8)));
            _mm512_store_si512(slot[r] + 8, _mm512_ternarylogic_epi32(nz, neg, dn, 0xce));
            _mm512_store_si512(slot[r] + 16, _mm512_ternarylogic_epi32(nz, neg, dn, 0x90));
        } else {
            _mm512_store_si512(slot[r] + 8, neg);
        }
    }
}

/* Back of IQ1_S for R (1 or 2) rows: super-blocks x0[r], x1[r] of row r with activations y0,
 * y1 (the second weighted by its scale yd1, 0 for a last odd one paired with itself), the masks
 * m[r] of their front (read through a pointer gcc cannot follow, so that each mask is one kmovq
 * from memory, see dot_avx512.c), into acc[r]. The rows share the activations and their
 * negations. */
VBMI static inline __attribute__((always_inline)) void
iq1_s_back_vbmi(const uint8_t *const *x0, const uint8_t *const *x1, const uint8_t *y0,
                const uint8_t *y1, float yd1, __mmask64 *const *m, __m512 *acc, int R)
{
    const __m512i z = _mm512_setzero_si512();
    const size_t oqh = offsetof(gm_block_iq1_s, qh);
    __m512i qh[2], ls[2], ls8[2], sum[2][2];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        /* the 16 sub-block words of qh (scale s in bits 12-14, delta sign in bit 15), each
         * twice: words 2k, 2k + 1 for sub-block k (8h + sb) */
        qh[r] = _mm512_permutexvar_epi16(
            word_repeat_index(0, 1),
            _mm512_castsi256_si512(_mm256_inserti128_si256(
                _mm256_castsi128_si256(ldu128(x0[r] + oqh)), ldu128(x1[r] + oqh), 1)));
        /* 2s + 1 = ((qh >> 11) & 0x0e) | 1; times 8 (at most 120) in the low byte */
        ls[r] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(qh[r], 11), _mm512_set1_epi16(0x0e),
                                          _mm512_set1_epi16(1), 0xea);
        ls8[r] = _mm512_slli_epi16(ls[r], 3);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint8_t *q8 = (h ? y1 : y0) + Q8K_QS;
        __m512i s[2] = {z, z};
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int v = 4 * h + j;
            const __m512i y8 = ldu512(q8 + 64 * j), ny = _mm512_sub_epi8(z, y8);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                const __m512i u = _mm512_maskz_permutexvar_epi8(_load_mask64(&m[r][v]),
                                                                ldu512(g_s_ctl[v]), ls8[r]);
                const __mmask64 k = _load_mask64(&m[r][8 + v]);
                const __m512i sy = R == 1 ? _mm512_mask_sub_epi8(y8, k, z, y8)
                                          : _mm512_mask_blend_epi8(k, y8, ny);
                s[r] = _mm512_dpbusd_epi32(s[r], u, sy);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            sum[r][h] = s[r];
    }
    const __m512i bs = join256(ldu256(y0 + Q8K_BSUMS), ldu256(y1 + Q8K_BSUMS));
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        /* delta * 8: +-(2s + 1) (negative where the sign bit is set) times the sub-block's two
         * bsums: dword k of vpdpwssd is sub-block k's term, k < 8 for super-block 0 */
        const __m512i mul = _mm512_mask_sub_epi16(ls[r], _mm512_movepi16_mask(qh[r]), z, ls[r]);
        sum[r][0] = _mm512_mask_dpwssd_epi32(sum[r][0], 0x00ff, bs, mul);
        sum[r][1] = _mm512_mask_dpwssd_epi32(sum[r][1], 0xff00, bs, mul);
        const float d0 =
            GM_IQ1S_DELTA * ld_f32(y0) * h2f(ld_u16(x0[r] + offsetof(gm_block_iq1_s, d)));
        const float d1 = GM_IQ1S_DELTA * yd1 * h2f(ld_u16(x1[r] + offsetof(gm_block_iq1_s, d)));
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sum[r][0]), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sum[r][1]), acc[r]);
    }
}

/* Back of IQ1_M, as iq1_s_back_vbmi. The element's part, (2s + 1) (8 g + delta) times 1 / 8,
 * is (2s + 1) |8 g + delta| (at most 135: the unsigned side of vpdpbusd) with the sign of
 * 8 g + delta (on the activation): |8 g + delta| is 1 (g = 0), 7 (g != 0 against the sign of
 * delta) or 9 (with it); so one vpdpbusd per vector and no activation sums. */
VBMI static inline __attribute__((always_inline)) void
iq1_m_back_vbmi(const uint8_t *const *x0, const uint8_t *const *x1, const uint8_t *y0,
                const uint8_t *y1, float yd1, __mmask64 *const *m, __m512 *acc, int R)
{
    const __m512i z = _mm512_setzero_si512();
    const size_t osc = offsetof(gm_block_iq1_m, scales);
    __m512i l17[2], l9[2], sum[2][2];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        /* the 3-bit scale of 16-element group g (0..15) of super-block h: bits 3 (g % 4) of
         * scale word g / 4; word 16h + g of sc gets that word, shifted right by 3 (g % 4) */
        const __m128i w =
            _mm_set_epi64x((long long)ld_u64(x1[r] + osc), (long long)ld_u64(x0[r] + osc));
        const __m512i sc = _mm512_srlv_epi16(
            _mm512_permutexvar_epi16(word_repeat_index(0, 2), _mm512_castsi128_si512(w)),
            _mm512_set1_epi64(0x0009000600030000ll));
        /* 2s + 1 per word: ((sc << 1) & 0x0e) | 1 */
        const __m512i ls = _mm512_ternarylogic_epi32(
            _mm512_slli_epi16(sc, 1), _mm512_set1_epi16(0x0e), _mm512_set1_epi16(1), 0xea);
        /* per word: low byte 2s + 1, high byte 7 (2s + 1); and 9 (2s + 1) */
        const __m512i ls8 = _mm512_slli_epi16(ls, 3);
        l17[r] = _mm512_or_si512(ls, _mm512_slli_epi16(_mm512_sub_epi16(ls8, ls), 8));
        l9[r] = _mm512_add_epi16(ls8, ls);
    }
    const __m512i c16 = _mm512_set1_epi8(16);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint8_t *q8 = (h ? y1 : y0) + Q8K_QS;
        __m512i tab[2], s[2] = {z, z};
        /* byte 16 l + g: (2s + 1) times 1, 7, 9 (l = 0, 1, 2) for group g of super-block h */
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            tab[r] = _mm512_permutex2var_epi8(l17[r], ldu512(g_m_tidx[h]), l9[r]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int v = 4 * h + j;
            const __m512i y8 = ldu512(q8 + 64 * j), ny = _mm512_sub_epi8(z, y8);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                /* table byte 16l + g: l = 1 where g != 0, 2 where |8 g + delta| = 9 */
                __m512i idx = _mm512_mask_blend_epi8(_load_mask64(&m[r][v]),
                                                     ldu512(g_m_gi[0][j]), ldu512(g_m_gi[1][j]));
                idx = _mm512_mask_add_epi8(idx, _load_mask64(&m[r][16 + v]), idx, c16);
                const __m512i u = _mm512_permutexvar_epi8(idx, tab[r]);
                const __mmask64 k = _load_mask64(&m[r][8 + v]);
                const __m512i sy = R == 1 ? _mm512_mask_sub_epi8(y8, k, z, y8)
                                          : _mm512_mask_blend_epi8(k, y8, ny);
                s[r] = _mm512_dpbusd_epi32(s[r], u, sy);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            sum[r][h] = s[r];
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const float d0 = GM_IQ1M_DELTA * ld_f32(y0) * iq1_m_d(x0[r]);
        const float d1 = GM_IQ1M_DELTA * yd1 * iq1_m_d(x1[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sum[r][0]), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sum[r][1]), acc[r]);
    }
}

/* The back of pair p of R (1 or 2) rows w[r] with activation row a, the masks of their fronts in
 * slot[r] (a last odd super-block paired with itself, weighted 0), into acc[r]. */
VBMI static inline __attribute__((always_inline)) void
iq1_back_vbmi(const uint8_t *const *w, const uint8_t *a, size_t B, uint64_t nb, uint64_t p,
              __mmask64 *const *slot, bool is_m, __m512 *acc, int R)
{
    const uint64_t i = 2 * p;
    const bool two = i + 1 < nb;
    const uint8_t *x0[2], *x1[2], *y0 = a + i * Q8K, *y1 = two ? y0 + Q8K : y0;
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        x0[r] = w[r] + i * B;
        x1[r] = two ? x0[r] + B : x0[r];
    }
    const float yd1 = two ? ld_f32(y1) : 0.0f;
    if (is_m)
        iq1_m_back_vbmi(x0, x1, y0, y1, yd1, slot, acc, R);
    else
        iq1_s_back_vbmi(x0, x1, y0, y1, yd1, slot, acc, R);
}

/* One row of either type: pairs of super-blocks (a last odd one paired with itself, weighted
 * 0) in groups of two pairs, whose fronts run together (sharing the table loads); the front of
 * group g + 1 issued before the backs of group g. is_m picks the type; a constant after
 * inlining. */
VBMI static inline __attribute__((always_inline)) float iq1_dot_vbmi(const void *wv, const void *av,
                                                                     uint64_t n, bool is_m)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const size_t B = is_m ? sizeof(gm_block_iq1_m) : sizeof(gm_block_iq1_s);
    /* the masks of two groups, stored through buf, read through m (see iq1_s_back_vbmi) */
    __mmask64 buf[2 * 2 * 24] __attribute__((aligned(64)));
    __mmask64 *m = buf;
    __asm__("" : "+r"(m));
    const uint8_t *const ws[2] = {w, w};
    const uint64_t np = (nb + 1) / 2, ng = (np + 1) / 2;
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t g = 0; g <= ng; g++) {
        if (g < ng) {
            const uint64_t ps[2] = {2 * g, 2 * g + 1};
            __mmask64 *const slot[2] = {buf + 48 * (g % 2), buf + 48 * (g % 2) + 24};
            if (2 * g + 1 < np)
                iq1_front_vbmi(ws, B, nb, ps, slot, is_m, 2);
            else /* a last lone pair */
                iq1_front_vbmi(ws, B, nb, ps, slot, is_m, 1);
        }
        if (g == 0)
            continue;
        const uint64_t h = g - 1;
        __mmask64 *const slot[2] = {m + 48 * (h % 2), m + 48 * (h % 2) + 24};
        iq1_back_vbmi(&w, a, B, nb, 2 * h, &slot[0], is_m, &acc, 1);
        if (2 * h + 1 < np)
            iq1_back_vbmi(&w, a, B, nb, 2 * h + 1, &slot[1], is_m, &acc, 1);
    }
    return _mm512_reduce_add_ps(acc);
}

/* How many pairs the two-row kernel's fronts run ahead of its backs (measured: 0 up to 15%
 * slower, 1 up to 5%, 3 no faster). */
#define IQ1_R2_AHEAD 2

/* Two rows of either type against one activation row: per pair of super-blocks both rows'
 * fronts together (sharing the table loads) for pair p + IQ1_R2_AHEAD, then both rows' backs of
 * pair p together (sharing the activations), each row's steps those of iq1_dot_vbmi in its order
 * (so each result equals it bit for bit; a front's masks are the same whichever pairs run
 * together). */
VBMI static inline __attribute__((always_inline)) void
iq1_rows2_vbmi(const void *w0, const void *w1, const void *av, uint64_t n, bool is_m,
               float out[2])
{
    const uint8_t *wr[2] = {w0, w1}, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const size_t B = is_m ? sizeof(gm_block_iq1_m) : sizeof(gm_block_iq1_s);
    enum { SLOTS = IQ1_R2_AHEAD + 1 };
    __mmask64 buf[2 * 24 * SLOTS] __attribute__((aligned(64)));
    __mmask64 *m = buf;
    __asm__("" : "+r"(m));
    const uint64_t np = (nb + 1) / 2;
    for (int p = 0; p < IQ1_R2_AHEAD && (uint64_t)p < np; p++) {
        __mmask64 *slot[2] = {buf + 48 * p, buf + 48 * p + 24};
        const uint64_t ps[2] = {(uint64_t)p, (uint64_t)p};
        iq1_front_vbmi(wr, B, nb, ps, slot, is_m, 2);
    }
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (uint64_t p = 0; p < np; p++) {
        const uint64_t q = p + IQ1_R2_AHEAD;
        if (q < np) {
            __mmask64 *slot[2] = {buf + 48 * (q % SLOTS), buf + 48 * (q % SLOTS) + 24};
            const uint64_t ps[2] = {q, q};
            iq1_front_vbmi(wr, B, nb, ps, slot, is_m, 2);
        }
        __mmask64 *const slot[2] = {m + 48 * (p % SLOTS), m + 48 * (p % SLOTS) + 24};
        iq1_back_vbmi(wr, a, B, nb, p, slot, is_m, acc, 2);
    }
    out[0] = _mm512_reduce_add_ps(acc[0]);
    out[1] = _mm512_reduce_add_ps(acc[1]);
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
    for (uint64_t p = 0; p < (nb + 1) / 2; p++) {
        __mmask64 *slot = buf;
        iq1_front_vbmi(&w, B, nb, &p, &slot, is_m, 1);
        for (int t = 0; t < GM_DOT_MULTI; t++)
            iq1_back_vbmi(&w, a + t * a_stride, B, nb, p, &m, is_m, &acc[t], 1);
    }
    for (int t = 0; t < GM_DOT_MULTI; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

VBMI static void dot_rows2_iq1_s_vbmi(const void *w0, const void *w1, const void *a, uint64_t n,
                                      float out[2])
{
    iq1_rows2_vbmi(w0, w1, a, n, false, out);
}

VBMI static void dot_rows2_iq1_m_vbmi(const void *w0, const void *w1, const void *a, uint64_t n,
                                      float out[2])
{
    iq1_rows2_vbmi(w0, w1, a, n, true, out);
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
    for (int e = 0; e < 64; e++) {
        const int l = e / 16, g = e % 16; /* g_m_tidx: multiple l of group g */
        for (int j = 0; j < 4; j++) {
            g_m_gi[0][j][e] = (uint8_t)(4 * j + e / 16);
            g_m_gi[1][j][e] = (uint8_t)(16 + 4 * j + e / 16);
        }
        /* 1 and 7: low and high byte of l17's word 16h + g; 9: low byte of l9's; 3 unused */
        for (int h = 0; h < 2; h++)
            g_m_tidx[h][e] = (uint8_t)(l == 3 ? 0 : (l == 2 ? 64 : l) + 2 * (16 * h + g));
    }
    for (int v = 0; v < 8; v++) {
        const int h = v / 4, j = v % 4;
        for (int e = 0; e < 64; e++) {
            g_s_ctl[v][e] = (uint8_t)(4 * (8 * h + 2 * j + e / 32));
        }
    }
    return true;
}

#endif /* GM_KERNELS_HAVE_AVX512VBMI */

#if defined(GM_KERNELS_HAVE_AVX512VBMI)
/* Whether the avx512vbmi kernels are installed (iq1_tables_init succeeded), for the multi fill. */
static bool g_iq1_vbmi;
#endif

void gm_dot_fill_avx512_iq1(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        iq1_u8_init();
        t[GM_TYPE_IQ1_S] = dot_iq1_s_512;
        t[GM_TYPE_IQ1_M] = dot_iq1_m_512;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (iq1_tables_init()) {
        g_iq1_vbmi = true;
        t[GM_TYPE_IQ1_S] = dot_iq1_s_vbmi;
        t[GM_TYPE_IQ1_M] = dot_iq1_m_vbmi;
    }
#endif
}

void gm_dot_multi_fill_avx512_iq1(gm_dot_multi_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        t[GM_TYPE_IQ1_S] = dot_multi_iq1_s_512;
        t[GM_TYPE_IQ1_M] = dot_multi_iq1_m_512;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (g_iq1_vbmi) {
        t[GM_TYPE_IQ1_S] = dot_multi_iq1_s_vbmi;
        t[GM_TYPE_IQ1_M] = dot_multi_iq1_m_vbmi;
    }
#endif
}

void gm_dot_rows2_fill_avx512_iq1(gm_dot_rows2_fn t[GM_TYPE_COUNT], bool vbmi)
{
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (vbmi && g_iq1_vbmi) {
        t[GM_TYPE_IQ1_S] = dot_rows2_iq1_s_vbmi;
        t[GM_TYPE_IQ1_M] = dot_rows2_iq1_m_vbmi;
    }
#else
    (void)t;
    (void)vbmi;
#endif
}
