/* AVX-512 dot products of IQ3_S and TQ1_0 (see dot_impl.h: gm_dot_fill_avx512_iq3s). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

/* ---- IQ3_S, plain AVX-512 -----------------------------------------------------------------------
 * As IQ3_XXS at the avx512 level (dot_avx512.c: iq3_xxs_pair): each grid row as a 16-bit code, k
 * (value 2k + 1) of row byte 2p at bit 3p and of byte 2p + 1 at bit 8 + 3p, so that a code
 * repeated in both words of a dword and shifted by 3 in the second gives every byte its k in its
 * low 3 bits; vpshufb maps k to 2k + 1. The 512 codes are 16 vectors, looked up 32 at a time by
 * eight vpermt2w (6 index bits) and a tree of blends on index bits 6, 7 and 8 (qh). Filled once.
 */
static uint16_t g_iq3s_code[512];
static const uint8_t k_iq3s_vals16[16] = {1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15};

static void iq3s_fill_codes(void)
{
    for (int r = 0; r < 512; r++) {
        unsigned c = 0;
        for (int b = 0; b < 4; b++)
            c |= (unsigned)((gm_iq3s_grid[r][b] - 1) / 2) << ((b & 1) * 8 + (b / 2) * 3);
        g_iq3s_code[r] = (uint16_t)c;
    }
}

/* The codes of the 32 rows whose 9-bit indices are the low bytes idx (zero-extended words) and
 * the bits b8. */
static inline __m512i iq3s_lookup32(const __m512i t[16], __m512i idx, __mmask32 b8)
{
    __m512i r[8];
    for (int p = 0; p < 8; p++)
        r[p] = _mm512_permutex2var_epi16(t[2 * p], idx, t[2 * p + 1]);
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    for (int p = 0; p < 4; p++)
        r[p] = _mm512_mask_blend_epi16(b6, r[2 * p], r[2 * p + 1]);
    for (int p = 0; p < 2; p++)
        r[p] = _mm512_mask_blend_epi16(b7, r[2 * p], r[2 * p + 1]);
    return _mm512_mask_blend_epi16(b8, r[0], r[1]);
}

/* The 8 sub-block scales 2s + 1 of an IQ3_S block (4 bytes, nibble s of sub-block k at bit 4k)
 * as int16 in every 128-bit lane. */
static inline __m512i iq3s_scales(const uint8_t *p)
{
    const __m128i v = _mm_set1_epi32((int)ld_u32(p));
    /* word k: the 16-bit half holding nibble k, shifted to it */
    const __m128i w = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3,
                                                        2, 3));
    const __m128i n = _mm_srlv_epi16(w, _mm_setr_epi16(0, 4, 8, 12, 0, 4, 8, 12));
    /* ((n << 1) & 0x1e) | 1 */
    const __m128i ls = _mm_ternarylogic_epi32(_mm_slli_epi16(n, 1), _mm_set1_epi16(0x1e),
                                              _mm_set1_epi16(1), 0xea);
    return _mm512_broadcast_i32x4(ls);
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one IQ3_S row: each
 * super-block's values, signs and scales unpacked once, then per token its integer sum and float
 * step, so every token's result equals the one-token call's bit for bit. */
static inline __attribute__((always_inline)) void
iq3_s_rows(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, int n_tok,
           float *out)
{
    const uint64_t nb = n / GM_QK_K;
    __m512i t[16];
    for (int k = 0; k < 16; k++)
        t[k] = ldu512(g_iq3s_code + 32 * k);
    /* vector j holds rows 16j..16j+15 of a half super-block, each code in the 2 words of its
     * dword */
    const __m512i rep[2] = {word_repeat_index(0, 1), word_repeat_index(16, 1)};
    const __m512i vals = _mm512_broadcast_i32x4(ldu128(k_iq3s_vals16));
    const __m512i m7 = _mm512_set1_epi8(0x07);
    const __m512i shift = _mm512_set1_epi32(0x00030000);
    const __m512i sm01 = pack_scale_mask(0, 2), sm23 = pack_scale_mask(4, 6);
    const size_t B = sizeof(gm_block_iq3_s);
    __m512 acc[GM_DOT_MULTI];
    for (int k = 0; k < n_tok; k++)
        acc[k] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * B;
        const uint8_t *qs = x + offsetof(gm_block_iq3_s, qs);
        const uint8_t *qh = x + offsetof(gm_block_iq3_s, qh);
        uint64_t neg[4];
        memcpy(neg, x + offsetof(gm_block_iq3_s, signs), sizeof neg);
        const __m512i codes[2] = {
            iq3s_lookup32(t, _mm512_cvtepu8_epi16(ldu256(qs)), (__mmask32)ld_u32(qh)),
            iq3s_lookup32(t, _mm512_cvtepu8_epi16(ldu256(qs + 32)), (__mmask32)ld_u32(qh + 4))};
        __m512i q[4];
        for (int j = 0; j < 4; j++) {
            const __m512i c =
                _mm512_srlv_epi16(_mm512_permutexvar_epi16(rep[j & 1], codes[j >> 1]), shift);
            q[j] = _mm512_shuffle_epi8(vals, _mm512_and_si512(c, m7));
        }
        const __m512i sc = iq3s_scales(x + offsetof(gm_block_iq3_s, scales));
        const float wd = h2f(ld_u16(x + offsetof(gm_block_iq3_s, d)));
        for (int k = 0; k < n_tok; k++) {
            const uint8_t *y = a + k * a_stride + i * Q8K;
            const __m512i sum = iq_dot4(q, y + Q8K_QS, neg, sc, sm01, sm23);
            const float d = ld_f32(y) * wd;
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sum), acc[k]);
        }
    }
    for (int k = 0; k < n_tok; k++)
        out[k] = _mm512_reduce_add_ps(acc[k]);
}

GM_ROW_KERNELS(, dot_iq3_s, dot_multi_iq3_s, iq3_s_rows)

/* ---- TQ1_0, plain AVX-512 -----------------------------------------------------------------------
 * Without byte permutes the trits are computed as the reference does, 64 bytes at a time: the 52
 * bytes qs, qh are one masked load A, and Q_n = 3^n A (mod 256, by byte adds) for n = 0..4; trit
 * n of every byte is (3 Q_n) >> 8 = (Q_n >= 86) + (Q_n >= 171), from two compares. Rather than
 * moving the trits into element order, the activations are gathered to A's order by masked loads:
 * byte m of Q_n pairs with element 32 n + m (m < 32), 160 + 16 n + (m - 32) (m < 48) and
 * 240 + 4 n + (m - 48) (m < 52, n < 4); the bytes above 52 are 0, hence trit 0, and the
 * activations for them are never loaded (0). */
static inline __m512i mul3_epi8(__m512i v)
{
    return _mm512_add_epi8(v, _mm512_add_epi8(v, v));
}

static inline __m512i tq1_trits(__m512i q)
{
    const __m512i one = _mm512_set1_epi8(1);
    const __mmask64 k1 = _mm512_cmpge_epu8_mask(q, _mm512_set1_epi8(86));
    const __mmask64 k2 = _mm512_cmpge_epu8_mask(q, _mm512_set1_epi8((char)171));
    const __m512i t = _mm512_maskz_mov_epi8(k1, one);
    return _mm512_mask_add_epi8(t, k2, t, one);
}

/* The activations of a Q8_K block y that pair with trit n of A's bytes (0 for the bytes above
 * 52). */
static inline __m512i tq1_act(const uint8_t *y, int n)
{
    const uint8_t *q8 = y + Q8K_QS;
    __m512i a = _mm512_zextsi256_si512(ldu256(q8 + 32 * n));
    a = _mm512_mask_loadu_epi8(a, 0x0000ffff00000000ull, q8 + 128 + 16 * n);
    if (n < 4)
        a = _mm512_mask_loadu_epi8(a, 0x000f000000000000ull, q8 + 192 + 4 * n);
    return a;
}

/* s[t] = the integer sum of t - 1 times the activations y + t * a_stride of super-block x, 16
 * int32 lanes, for t < n_tok: each trit vector computed once, then used for every token. */
static inline __attribute__((always_inline)) void
tq1_sums(const uint8_t *x, const uint8_t *y, uint64_t a_stride, int n_tok, __m512i *s)
{
    __m512i q = _mm512_maskz_loadu_epi8(0x000fffffffffffffull, x);
    /* - the sum of the activations */
    for (int t = 0; t < n_tok; t++)
        s[t] = _mm512_zextsi256_si512(
            _mm256_madd_epi16(ldu256(y + t * a_stride + Q8K_BSUMS), _mm256_set1_epi16(-1)));
    for (int n = 0; n < 5; n++) {
        const __m512i tr = tq1_trits(q);
        for (int t = 0; t < n_tok; t++)
            s[t] = _mm512_dpbusd_epi32(s[t], tr, tq1_act(y + t * a_stride, n));
        if (n < 4)
            q = mul3_epi8(q);
    }
}

/* acc[t] + token t's dot with super-block x (y: the token 0 activation block) for t < n_tok. */
static inline __attribute__((always_inline)) void
tq1_tokens(const uint8_t *x, const uint8_t *y, uint64_t a_stride, int n_tok, __m512 *acc)
{
    __m512i s[GM_DOT_MULTI];
    tq1_sums(x, y, a_stride, n_tok, s);
    const float wd = h2f(ld_u16(x + offsetof(gm_block_tq1_0, d)));
    for (int t = 0; t < n_tok; t++) {
        const float d = ld_f32(y + t * a_stride) * wd;
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(s[t]), acc[t]);
    }
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one TQ1_0 row: the trits of
 * each super-block computed once, then the per-token steps; two super-blocks per step (even ones
 * into one accumulator, odd ones into another: two independent chains), so every token's result
 * equals the one-token call's. */
static inline __attribute__((always_inline)) void
tq1_rows(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, int n_tok, float *out)
{
    const uint64_t nb = n / GM_QK_K;
    const size_t B = sizeof(gm_block_tq1_0);
    __m512 acc[2][GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        tq1_tokens(w + i * B, a + i * Q8K, a_stride, n_tok, acc[0]);
        tq1_tokens(w + (i + 1) * B, a + (i + 1) * Q8K, a_stride, n_tok, acc[1]);
    }
    if (i < nb)
        tq1_tokens(w + i * B, a + i * Q8K, a_stride, n_tok, acc[0]);
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
}

GM_ROW_KERNELS(, dot_tq1_0, dot_multi_tq1_0, tq1_rows)

#if defined(GM_KERNELS_HAVE_AVX512VBMI)

/* ---- IQ3_S, avx512vbmi -----------------------------------------------------------------------
 * 64 rows per super-block, each 4 bytes from 8 odd values 2k + 1 (k < 8), indexed by 9 bits (qs
 * byte, one bit of qh). A row as a 12-bit code, k of byte b at bit 3b: then every row byte is
 * spread from its code word by vpmultishiftqb, as in IQ3_XXS (dot_avx512.c), and made 2k + 1 by
 * one vpternlogd. The 512 codes are looked up from registers: the low bytes from four 128-byte
 * tables (vpermt2b reads 7 index bits; bits 7 and 8 choose the table by blends), the high
 * nibbles from one 256-byte table holding the nibble of row b in its low half and that of row
 * 256 + b in its high half (bit 8 then picks the half by a shift under a blend; the bits left
 * above the nibble are never used: they land above k of the last row byte and are masked off).
 * Filled once. */
static uint8_t g_iq3s_lo[512], g_iq3s_hi[256];
/* The order in which a super-block's rows are looked up (vpermb of the qs bytes, vpshufbitqmb of
 * the qh bits): position p = 16 L + 8 v + 4 h + w (w < 4) holds row
 * 32 v + 16 (w >= 2) + 2 (2 L + h) + w % 2, so that after vpunpcklbw (v = 0) and vpunpckhbw
 * (v = 1) of the low bytes and high nibbles, whose qword k = 2 L + h then holds the 16-bit codes of
 * positions 16 L + 8 v + 4 h + 0..3, words 0-1 of qword k are rows 2k, 2k + 1 of output vector
 * 2v and words 2-3 rows 2k, 2k + 1 of vector 2v + 1: what vpmultishiftqb needs to spread them to
 * bytes 8k..8k+7 (no permute per output vector). */
static uint8_t g_iq3s_order[64];
/* vpmultishiftqb controls for the scales (see iq3_s_pair_vbmi). */
static uint8_t g_iq3s_sctl[4][64];

static void iq3s_fill(void)
{
    for (int r = 0; r < 512; r++) {
        unsigned c = 0;
        for (int b = 0; b < 4; b++)
            c |= (unsigned)((gm_iq3s_grid[r][b] - 1) / 2) << (3 * b);
        g_iq3s_lo[r] = (uint8_t)c;
        if (r < 256)
            g_iq3s_hi[r] = (uint8_t)(c >> 8);
        else
            g_iq3s_hi[r - 256] |= (uint8_t)((c >> 8) << 4);
    }
    for (int p = 0; p < 64; p++) {
        const int l = p / 16, v = (p / 8) % 2, h = (p / 4) % 2, w = p % 4;
        g_iq3s_order[p] = (uint8_t)(32 * v + 16 * (w >= 2) + 2 * (2 * l + h) + w % 2);
    }
    /* Vector v = 2h + p is the int16 scales 2s + 1 that vpdpwssd takes after
     * vpackssdw(sums of vector 2p, of vector 2p + 1) of super-block h: word w of 128-bit lane L =
     * w / 8 belongs to sub-block sb = 4p + 2 (w % 8 >= 4) + (L >= 2) (see pack_scale_mask), whose
     * 4-bit scale is nibble n = 8h + sb of the qword of both blocks' scales. The low byte takes
     * bits 4n - 1 .. 4n + 6 (rotating: bit 63 for n = 0), so that s * 2 is at bits 1..4; the
     * stray bit 0 and the bits above are masked off. */
    for (int v = 0; v < 4; v++)
        for (int w = 0; w < 32; w++) {
            const int h = v / 2, p = v % 2, l = w / 8;
            const int sb = 4 * p + (w % 8 >= 4 ? 2 : 0) + (l >= 2);
            g_iq3s_sctl[v][2 * w] = (uint8_t)((4 * (8 * h + sb) + 63) % 64);
            g_iq3s_sctl[v][2 * w + 1] = 0;
        }
}

/* The 64 row codes of one super-block in g_iq3s_order: low bytes *lo, high nibbles (low 4 bits,
 * above them garbage) *hi. */
VBMI static inline void iq3s_lookup(const __m512i tl[8], const __m512i th[4], __m512i order,
                                    const uint8_t *x, __m512i *lo, __m512i *hi)
{
    const __m512i idx = _mm512_permutexvar_epi8(order, ldu512(x + offsetof(gm_block_iq3_s, qs)));
    const __mmask64 b8 = _mm512_bitshuffle_epi64_mask(
        _mm512_set1_epi64((long long)ld_u64(x + offsetof(gm_block_iq3_s, qh))), order);
    const __mmask64 b7 = _mm512_movepi8_mask(idx);
    const __m512i l0 = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(tl[0], idx, tl[1]),
                                              _mm512_permutex2var_epi8(tl[2], idx, tl[3]));
    const __m512i l1 = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(tl[4], idx, tl[5]),
                                              _mm512_permutex2var_epi8(tl[6], idx, tl[7]));
    *lo = _mm512_mask_blend_epi8(b8, l0, l1);
    const __m512i hh = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(th[0], idx, th[1]),
                                              _mm512_permutex2var_epi8(th[2], idx, th[3]));
    *hi = _mm512_mask_blend_epi8(b8, hh, _mm512_srli_epi16(hh, 4));
}

/* IQ3_S, two super-blocks per step. Weight side of a pair: the values 2k + 1 of output vector j
 * of super-block h as q[4h + j], and the scales of super-block h's vector pairs as sc[2h],
 * sc[2h + 1]. */
VBMI static inline void iq3_s_unpack_vbmi(const uint8_t *x0, const uint8_t *x1,
                                          const __m512i tl[8], const __m512i th[4], __m512i order,
                                          __m512i q[8], __m512i sc[4])
{
    const __m512i m0e = _mm512_set1_epi8(0x0e), one = _mm512_set1_epi8(1);
    const uint64_t s2 = (uint64_t)ld_u32(x0 + offsetof(gm_block_iq3_s, scales)) |
                        (uint64_t)ld_u32(x1 + offsetof(gm_block_iq3_s, scales)) << 32;
    const __m512i sraw = _mm512_set1_epi64((long long)s2);
    for (int h = 0; h < 2; h++) {
        __m512i lo, hi;
        iq3s_lookup(tl, th, order, h ? x1 : x0, &lo, &hi);
        const __m512i c[2] = {_mm512_unpacklo_epi8(lo, hi), _mm512_unpackhi_epi8(lo, hi)};
        for (int j = 0; j < 4; j++) {
            /* byte b of row 0 and 1 of words 0-1 (j even) or 2-3: bits 3b - 1 and 16 + 3b - 1
             * (+ 32), so that k is at bits 1..3; the bit below (bit 63 of the qword for the
             * first byte) and those above are masked off: (s & 0x0e) | 1 = 2k + 1 */
            const uint64_t ctl = 0x1815120f0805023full + (j % 2) * 0x2020202020202020ull;
            const __m512i k = _mm512_multishift_epi64_epi8(_mm512_set1_epi64((long long)ctl),
                                                           c[j / 2]);
            q[4 * h + j] = _mm512_ternarylogic_epi32(k, m0e, one, 0xea);
        }
        for (int p = 0; p < 2; p++) {
            const __m512i s = _mm512_maskz_multishift_epi64_epi8(
                0x5555555555555555ull, ldu512(g_iq3s_sctl[2 * h + p]), sraw);
            /* (s & 0x1e) | 1 */
            sc[2 * h + p] = _mm512_ternarylogic_epi32(s, _mm512_set1_epi16(0x1e),
                                                      _mm512_set1_epi16(1), 0xea);
        }
    }
}

/* One token of a pair (the second super-block weighted by its activation scale yd1, 0 for a
 * last odd one paired with itself). The sign bits are in element order: the mask of vector j
 * is the qword at signs + 8j. */
VBMI static inline __m512 iq3_s_token_vbmi(const uint8_t *x0, const uint8_t *x1,
                                           const uint8_t *y0, const uint8_t *y1, float yd1,
                                           const __m512i q[8], const __m512i sc[4], __m512 acc)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i sums[2];
    for (int h = 0; h < 2; h++) {
        const uint8_t *q8 = (h ? y1 : y0) + Q8K_QS;
        const uint8_t *sg = (h ? x1 : x0) + offsetof(gm_block_iq3_s, signs);
        __m512i d[4];
        for (int j = 0; j < 4; j++) {
            const __m512i y8 = ldu512(q8 + 64 * j);
            const __mmask64 neg = (__mmask64)ld_u64(sg + 8 * j);
            d[j] = _mm512_dpbusd_epi32(z, q[4 * h + j], _mm512_mask_sub_epi8(y8, neg, z, y8));
        }
        const __m512i s = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d[0], d[1]), sc[2 * h]);
        sums[h] = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(d[2], d[3]), sc[2 * h + 1]);
    }
    const float d0 = ld_f32(y0) * h2f(ld_u16(x0 + offsetof(gm_block_iq3_s, d)));
    const float d1 = yd1 * h2f(ld_u16(x1 + offsetof(gm_block_iq3_s, d)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d0), _mm512_cvtepi32_ps(sums[0]), acc);
    return _mm512_fmadd_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(sums[1]), acc);
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one IQ3_S row: each pair
 * unpacked once, then the per-token step, so every token's result equals the one-token call's
 * bit for bit. */
VBMI static inline __attribute__((always_inline)) void
iq3_s_rows_vbmi(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, int n_tok,
                float *out)
{
    const uint64_t nb = n / GM_QK_K;
    __m512i tl[8], th[4];
    for (int k = 0; k < 8; k++)
        tl[k] = ldu512(g_iq3s_lo + 64 * k);
    for (int k = 0; k < 4; k++)
        th[k] = ldu512(g_iq3s_hi + 64 * k);
    const __m512i order = ldu512(g_iq3s_order);
    const size_t B = sizeof(gm_block_iq3_s);
    __m512 acc[GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i += 2) {
        const uint64_t k = i + 1 < nb ? i + 1 : i;
        const uint8_t *x0 = w + i * B, *x1 = w + k * B;
        __m512i q[8], sc[4];
        iq3_s_unpack_vbmi(x0, x1, tl, th, order, q, sc);
        for (int t = 0; t < n_tok; t++) {
            const uint8_t *y = a + t * a_stride;
            acc[t] = iq3_s_token_vbmi(x0, x1, y + i * Q8K, y + k * Q8K,
                                      k > i ? ld_f32(y + k * Q8K) : 0.0f, q, sc, acc[t]);
        }
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

GM_ROW_KERNELS(VBMI, dot_iq3_s_vbmi, dot_multi_iq3_s_vbmi, iq3_s_rows_vbmi)

/* ---- TQ1_0, avx512vbmi -----------------------------------------------------------------------
 * Elements: 32 t + m is trit t of qs[m] (m < 32), 160 + 16 t + m trit t of qs[32 + m] (m < 16),
 * 240 + 4 t + m trit t of qh[m] (t, m < 4); trit n of a byte b is 3 (b 3^n mod 256) >> 8
 * (dot_ref.c). Two 256-byte tables of 4 trits of b (2 bits each, field f at bits 2f):
 * g_tq1_ta[b] holds trits 0, 2, 4, 3, g_tq1_tb[b] trits 1, 3, 4, 0 (k_tq1_fields). The 52 bytes
 * qs, qh are one masked load A; vpermt2b looks up both tables for A (each in 4 registers, bit 7
 * of A choosing between two lookups of 7 bits): L and M. Vector 0 (elements 0..63: trits 0 and 1
 * of qs[0..31]) is then the low halves of L and M (vshufi64x2) AND 3, their field 0; vector 1
 * (trits 2, 3) the same shifted right by 2; vector 2 a byte permutation of M, vector 3 one of L
 * and M, each shifted per 16-bit word by twice its field's number (both bytes of a word share
 * it) and ANDed with 3. The trits t in 0..2 are summed against the activations by vpdpbusd; the
 * -1 of t - 1 is taken out once per super-block through the activation sums (bsums). Filled
 * once. */
static const uint8_t k_tq1_fields[2][4] = {{0, 2, 4, 3}, {1, 3, 4, 0}};
static uint8_t g_tq1_ta[256], g_tq1_tb[256];
/* vpermb (vector 2, of M) and vpermt2b (vector 3, of L then M) indices */
static uint8_t g_tq1_perm[2][64];
/* vectors 2, 3: per 16-bit word, twice the field number of both its bytes */
static uint16_t g_tq1_shift[2][32];

/* The field of trit n in table k (0: g_tq1_ta, 1: g_tq1_tb), -1 if absent. */
static int tq1_field(int k, int n)
{
    for (int f = 0; f < 4; f++)
        if (k_tq1_fields[k][f] == n)
            return f;
    return -1;
}

static void tq1_fill(void)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    for (int b = 0; b < 256; b++) {
        unsigned t[5];
        for (int n = 0; n < 5; n++)
            t[n] = ((unsigned)(uint8_t)(b * pow3[n]) * 3) >> 8;
        unsigned va = 0, vb = 0;
        for (int f = 0; f < 4; f++) {
            va |= t[k_tq1_fields[0][f]] << (2 * f);
            vb |= t[k_tq1_fields[1][f]] << (2 * f);
        }
        g_tq1_ta[b] = (uint8_t)va;
        g_tq1_tb[b] = (uint8_t)vb;
    }
    for (int v = 2; v < 4; v++)
        for (int i = 0; i < 64; i++) {
            const int e = 64 * v + i;
            int m, n; /* byte of A, trit */
            if (e < 160)
                m = e - 128, n = 4;
            else if (e < 240)
                m = 32 + (e - 160) % 16, n = (e - 160) / 16;
            else
                m = 48 + (e - 240) % 4, n = (e - 240) / 4;
            const int k = v == 2 ? 1 : (tq1_field(0, n) >= 0 ? 0 : 1);
            g_tq1_perm[v - 2][i] = (uint8_t)(v == 3 && k == 1 ? 64 + m : m);
            g_tq1_shift[v - 2][i / 2] = (uint16_t)(2 * tq1_field(k, n));
        }
}

/* One TQ1_0 super-block's trits t (0..2) as the 4 vectors e[j] of elements 64j..64j+63. */
VBMI static inline void tq1_trits_vbmi(const uint8_t *x, const __m512i ta[4], const __m512i tb[4],
                                       const __m512i sh[2], const __m512i perm[2], __m512i e[4])
{
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i a = _mm512_maskz_loadu_epi8(0x000fffffffffffffull, x);
    const __mmask64 b7 = _mm512_movepi8_mask(a);
    const __m512i l = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(ta[0], a, ta[1]),
                                             _mm512_permutex2var_epi8(ta[2], a, ta[3]));
    const __m512i m = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(tb[0], a, tb[1]),
                                             _mm512_permutex2var_epi8(tb[2], a, tb[3]));
    const __m512i b = _mm512_shuffle_i64x2(l, m, 0x44);
    e[0] = _mm512_and_si512(b, m3);
    e[1] = _mm512_and_si512(_mm512_srli_epi16(b, 2), m3);
    e[2] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(perm[0], m), sh[0]), m3);
    e[3] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutex2var_epi8(l, perm[1], m), sh[1]), m3);
}

/* acc + one super-block's dot (its trits e, scale x's d) with the Q8_K activation block y:
 * the integer sum of t - 1 times the activations (the -1 through the activation sums), 16 int32
 * lanes, then one float multiply-add. */
VBMI static inline __m512 tq1_token_vbmi(const uint8_t *x, const uint8_t *y, const __m512i e[4],
                                         __m512 acc)
{
    __m512i s = _mm512_zextsi256_si512(
        _mm256_madd_epi16(ldu256(y + Q8K_BSUMS), _mm256_set1_epi16(-1)));
    for (int j = 0; j < 4; j++)
        s = _mm512_dpbusd_epi32(s, e[j], ldu512(y + Q8K_QS + 64 * j));
    const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_tq1_0, d)));
    return _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(s), acc);
}

/* n_tok (1 or GM_DOT_MULTI) activation rows a + t * a_stride against one TQ1_0 row: the trits of
 * each super-block decoded once, then the per-token step (even super-blocks into one
 * accumulator, odd ones into another), so every token's result equals the one-token call's. */
VBMI static inline __attribute__((always_inline)) void
tq1_rows_vbmi(const uint8_t *w, const uint8_t *a, uint64_t a_stride, uint64_t n, int n_tok,
              float *out)
{
    const uint64_t nb = n / GM_QK_K;
    __m512i ta[4], tb[4], sh[2], perm[2];
    for (int k = 0; k < 4; k++) {
        ta[k] = ldu512(g_tq1_ta + 64 * k);
        tb[k] = ldu512(g_tq1_tb + 64 * k);
    }
    for (int k = 0; k < 2; k++) {
        sh[k] = ldu512(g_tq1_shift[k]);
        perm[k] = ldu512(g_tq1_perm[k]);
    }
    const size_t B = sizeof(gm_block_tq1_0);
    __m512 acc[2][GM_DOT_MULTI];
    for (int t = 0; t < n_tok; t++)
        acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * B;
        __m512i e[4];
        tq1_trits_vbmi(x, ta, tb, sh, perm, e);
        for (int t = 0; t < n_tok; t++)
            acc[i & 1][t] = tq1_token_vbmi(x, a + t * a_stride + i * Q8K, e, acc[i & 1][t]);
    }
    for (int t = 0; t < n_tok; t++)
        out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
}

GM_ROW_KERNELS(VBMI, dot_tq1_0_vbmi, dot_multi_tq1_0_vbmi, tq1_rows_vbmi)

#endif /* GM_KERNELS_HAVE_AVX512VBMI */

void gm_dot_fill_avx512_iq3s(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        iq3s_fill_codes();
        t[GM_TYPE_IQ3_S] = dot_iq3_s;
        t[GM_TYPE_TQ1_0] = dot_tq1_0;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    iq3s_fill();
    tq1_fill();
    t[GM_TYPE_IQ3_S] = dot_iq3_s_vbmi;
    t[GM_TYPE_TQ1_0] = dot_tq1_0_vbmi;
#else
    (void)t;
#endif
}

void gm_dot_multi_fill_avx512_iq3s(gm_dot_multi_fn t[GM_TYPE_COUNT], bool vbmi)
{
    if (!vbmi) {
        t[GM_TYPE_IQ3_S] = dot_multi_iq3_s;
        t[GM_TYPE_TQ1_0] = dot_multi_tq1_0;
        return;
    }
#if defined(GM_KERNELS_HAVE_AVX512VBMI)
    t[GM_TYPE_IQ3_S] = dot_multi_iq3_s_vbmi;
    t[GM_TYPE_TQ1_0] = dot_multi_tq1_0_vbmi;
#endif
}

/* No two-row kernels here: for IQ3_S (both levels) and TQ1_0 the two-row forms were faster in
 * L1 (up to 1.1-1.3x) but slower from memory on 2 threads (IQ3_S 25-29 -> 18-21 GB/s), see
 * docs/performance.md. */
void gm_dot_rows2_fill_avx512_iq3s(gm_dot_rows2_fn t[GM_TYPE_COUNT], bool vbmi)
{
    (void)t;
    (void)vbmi;
}
