/* AVX2 (+FMA, F16C) dot products; compiled with -mavx2 -mfma -mf16c, called only when
 * dispatch.c has seen those features (see dot_impl.h).
 *
 * Same arithmetic as dot_ref.c: exact integer sums inside a block or sub-block, then one float
 * multiply-add per block into vector accumulators. Products of unsigned weight codes (at most 63)
 * with signed activation codes (at most 127 in magnitude: the activation quantizers clamp to
 * [-127, 127]) go through maddubs, whose 16-bit pair sums cannot saturate at these ranges;
 * signed weights use the sign trick (|w| times sign(w)*y). Blocks are read at any alignment
 * through unaligned loads and memcpy, never past the end of the row. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx2_util.h"
#include "kernels/bytes.h"
#include "kernels/dot_impl.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

static inline __m256i ldu256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i ldu128(const void *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

static inline float hsum_ps128(__m128 s)
{
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Unsigned bytes u times signed bytes s, summed in fours into 8 int32. */
static inline __m256i dot_us8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Signed bytes x times signed bytes y as 16 int16 pair sums (sign trick). */
static inline __m256i dot_ss8_i16(__m256i x, __m256i y)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline __m256i dot_ss8(__m256i x, __m256i y)
{
    return _mm256_madd_epi16(dot_ss8_i16(x, y), _mm256_set1_epi16(1));
}

/* 16 bytes of packed nibbles -> 32 bytes: the low nibbles, then the high nibbles (the element
 * order of the 32-element 4-bit blocks). */
static inline __m256i nibbles_lo_hi(__m128i q)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

/* A shuffle that broadcasts int16 element i of each 128-bit lane to the whole lane. */
static inline __m256i bcast16_mask(int i)
{
    return _mm256_set1_epi16((short)((2 * i + 1) << 8 | (2 * i)));
}

/* Q3_K-style scale shuffle: int16 element 2k in the low lane, 2k + 1 in the high lane, given
 * both lanes hold the same 8 scales. */
static inline __m256i pair16_mask(int k)
{
    const __m128i lo = _mm_set1_epi16((short)((4 * k + 1) << 8 | (4 * k)));
    const __m128i hi = _mm_set1_epi16((short)((4 * k + 3) << 8 | (4 * k + 2)));
    return _mm256_set_m128i(hi, lo);
}

/* Per 7-bit IQ2/IQ3 sign index: 8 bytes of +1 or -1 (the sign of each element), for
 * _mm256_sign_epi8. Derived once from gm_ksigns_iq2xs in gm_dot_fill_avx2 (init_tables). */
static uint64_t g_signs64[128];

/* E8M0 exponent -> 2^(e-127)/2 (gm_e8m0_to_f32_half) by one load; filled with g_signs64. */
static float g_e8m0_half[256];

static void init_tables(void)
{
    for (int e = 0; e < 256; e++)
        g_e8m0_half[e] = gm_e8m0_to_f32_half((uint8_t)e);
    for (int i = 0; i < 128; i++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            v |= (uint64_t)((gm_ksigns_iq2xs[i] >> j) & 1 ? 0xffu : 0x01u) << (8 * j);
        g_signs64[i] = v;
    }
}

/* ---- Q8_0 activations ------------------------------------------------------------------- */

#define Q80 sizeof(gm_block_q8_0)

static float dot_q8_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK8_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    uint64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const uint8_t *w0 = w + i * Q80, *a0 = a + i * Q80;
        const uint8_t *w1 = w0 + Q80, *a1 = a0 + Q80;
        const __m256i p0 = dot_ss8(ldu256(w0 + 2), ldu256(a0 + 2));
        const __m256i p1 = dot_ss8(ldu256(w1 + 2), ldu256(a1 + 2));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * ld_f32(asc + 4 * i)),
                               _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w1)) * ld_f32(asc + 4 * i + 4)),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const uint8_t *w0 = w + i * Q80, *a0 = a + i * Q80;
        const __m256i p0 = dot_ss8(ldu256(w0 + 2), ldu256(a0 + 2));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * ld_f32(asc + 4 * i)),
                               _mm256_cvtepi32_ps(p0), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* 4-bit codes mapped through a 16-entry signed table (IQ4_NL, MXFP4): 16 bytes of nibbles
 * dotted with 32 activation codes, as 8 int32. */
static inline __m256i dot_lut4(__m256i table, __m128i q, const uint8_t *y)
{
    const __m256i v = _mm256_shuffle_epi8(table, nibbles_lo_hi(q));
    return dot_ss8(v, ldu256(y));
}

static float dot_mxfp4(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_MXFP4;
    const __m256i table = _mm256_broadcastsi128_si256(ldu128(gm_kvalues_mxfp4));
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const size_t WB = sizeof(gm_block_mxfp4);
    uint64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const uint8_t *w1 = w0 + WB, *a1 = a0 + Q80;
        const __m256i p0 = dot_lut4(table, ldu128(w0 + 1), a0 + 2);
        const __m256i p1 = dot_lut4(table, ldu128(w1 + 1), a1 + 2);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(g_e8m0_half[w0[0]] * ld_f32(asc + 4 * i)),
                               _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(g_e8m0_half[w1[0]] * ld_f32(asc + 4 * i + 4)),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const __m256i p0 = dot_lut4(table, ldu128(w0 + 1), a0 + 2);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(g_e8m0_half[w0[0]] * ld_f32(asc + 4 * i)),
                               _mm256_cvtepi32_ps(p0), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

static float dot_iq4_nl(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK4_NL;
    const __m256i table = _mm256_broadcastsi128_si256(ldu128(gm_kvalues_iq4nl));
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    __m256 acc = _mm256_setzero_ps();
    const size_t WB = sizeof(gm_block_iq4_nl);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const __m256i p = dot_lut4(table, ldu128(w0 + 2), a0 + 2);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * ld_f32(asc + 4 * i)),
                              _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_ps(acc);
}

static float dot_q4_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK4_0;
    const __m256i off = _mm256_set1_epi8(8);
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    __m256 acc = _mm256_setzero_ps();
    const size_t WB = sizeof(gm_block_q4_0);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        const __m256i q = _mm256_sub_epi8(nibbles_lo_hi(ldu128(w0 + 2)), off);
        const __m256i p = dot_ss8(q, ldu256(a0 + 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * ld_f32(asc + 4 * i)),
                              _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_ps(acc);
}


/* The 32 bits at p as 32 bytes: 0xff where the bit is set (byte j <- bit j). */
static inline __m256i bits_to_bytes(const uint8_t *p)
{
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                           0x0101010101010101ll, 0x0000000000000000ll);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)ld_u32(p)), shuf);
    const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell);
    return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
}

/* Q4_1 and Q5_1: x = d*q + m with unsigned q; the minimum term needs the block's activation sum,
 * taken from the same pass (maddubs with ones). */
static inline float dot_qx_1(const uint8_t *w, const uint8_t *a, uint64_t n, size_t block_bytes,
                             int five_bits)
{
    const uint64_t nb = n / 32;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const __m256i ones = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * block_bytes, *a0 = a + i * Q80;
        __m256i q = nibbles_lo_hi(ldu128(w0 + block_bytes - 16));
        if (five_bits)
            q = _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(w0 + 4), bit4));
        const __m256i y = ldu256(a0 + 2);
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones16);
        const __m256i ys = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, y), ones16);
        const float da = ld_f32(asc + 4 * i);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * da), _mm256_cvtepi32_ps(p), acc);
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0 + 2)) * da),
                                _mm256_cvtepi32_ps(ys), acc_m);
    }
    return hsum_ps(_mm256_add_ps(acc, acc_m));
}

static float dot_q4_1(const void *w, const void *a, uint64_t n)
{
    return dot_qx_1(w, a, n, sizeof(gm_block_q4_1), 0);
}

static float dot_q5_1(const void *w, const void *a, uint64_t n)
{
    return dot_qx_1(w, a, n, sizeof(gm_block_q5_1), 1);
}

static float dot_q5_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK5_0;
    const uint8_t *asc = GM_ACT_Q8_0_SCALES(a, n);
    const __m256i hi = _mm256_set1_epi8((char)0xf0);
    __m256 acc = _mm256_setzero_ps();
    const size_t WB = sizeof(gm_block_q5_0);
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *w0 = w + i * WB, *a0 = a + i * Q80;
        /* q | 0xf0 is q - 16 as a signed byte: set where the fifth bit is clear */
        const __m256i q = _mm256_or_si256(nibbles_lo_hi(ldu128(w0 + 6)),
                                          _mm256_andnot_si256(bits_to_bytes(w0 + 2), hi));
        const __m256i p = dot_ss8(q, ldu256(a0 + 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld_u16(w0)) * ld_f32(asc + 4 * i)),
                              _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_ps(acc);
}

/* ---- Q8_K activations ------------------------------------------------------------------- */

#define Q8K sizeof(gm_block_q8_K)
#define Q8K_QS 4u      /* offsetof(gm_block_q8_K, qs) */
#define Q8K_BSUMS 260u /* offsetof(gm_block_q8_K, bsums) */

static float dot_q4_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q4_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q4_K, d)));
        const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q4_K, dmin)));
        /* the 8 six-bit scales, then the 8 mins, as bytes (see gm_q4_K_scale_min) */
        uint32_t u[4];
        memcpy(u, x + offsetof(gm_block_q4_K, scales), 12);
        u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
        const uint32_t mins03 = u[1] & 0x3f3f3f3fu;
        u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
        u[2] = mins03;
        u[0] &= 0x3f3f3f3fu;
        const __m256i ms = _mm256_cvtepu8_epi16(
            _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
        const __m128i bs = ldu128(y + Q8K_BSUMS), bs2 = ldu128(y + Q8K_BSUMS + 16);
        const __m128i pair_sums = _mm_hadd_epi16(bs, bs2); /* per 32-element sub-block */
        const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), pair_sums);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);

        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));
        const uint8_t *q4 = x + offsetof(gm_block_q4_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < GM_QK_K / 64; j++) {
            const __m256i sl = _mm256_shuffle_epi8(scales, bcast16_mask(2 * j));
            const __m256i sh = _mm256_shuffle_epi8(scales, bcast16_mask(2 * j + 1));
            const __m256i q4b = ldu256(q4 + 32 * j);
            const __m256i ql = _mm256_and_si256(q4b, m4);
            const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(q4b, 4), m4);
            const __m256i pl = _mm256_maddubs_epi16(ql, ldu256(q8 + 64 * j));
            const __m256i ph = _mm256_maddubs_epi16(qh, ldu256(q8 + 64 * j + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sl, pl));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sh, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) + hsum_ps128(acc_m);
}

static float dot_q5_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q5_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q5_K, d)));
        const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q5_K, dmin)));
        uint32_t u[4];
        memcpy(u, x + offsetof(gm_block_q5_K, scales), 12);
        u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
        const uint32_t mins03 = u[1] & 0x3f3f3f3fu;
        u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
        u[2] = mins03;
        u[0] &= 0x3f3f3f3fu;
        const __m256i ms = _mm256_cvtepu8_epi16(
            _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
        const __m128i bs = ldu128(y + Q8K_BSUMS), bs2 = ldu128(y + Q8K_BSUMS + 16);
        const __m128i prod =
            _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), _mm_hadd_epi16(bs, bs2));
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);

        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));
        const uint8_t *q5 = x + offsetof(gm_block_q5_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        /* the fifth bit of sub-block sb is bit sb of each qh byte; shift it up to bit 4 */
        __m256i hb = ldu256(x + offsetof(gm_block_q5_K, qh));
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < GM_QK_K / 64; j++) {
            const __m256i sl = _mm256_shuffle_epi8(scales, bcast16_mask(2 * j));
            const __m256i sh = _mm256_shuffle_epi8(scales, bcast16_mask(2 * j + 1));
            const __m256i q5b = ldu256(q5 + 32 * j);
            /* hb holds qh >> 2j: bit 0 is sub-block 2j's fifth bit, bit 1 sub-block 2j+1's */
            const __m256i hl = _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4);
            const __m256i hh = _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4);
            hb = _mm256_srli_epi16(hb, 2);
            const __m256i ql = _mm256_or_si256(_mm256_and_si256(q5b, m4), hl);
            const __m256i qh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5b, 4), m4), hh);
            const __m256i pl = _mm256_maddubs_epi16(ql, ldu256(q8 + 64 * j));
            const __m256i ph = _mm256_maddubs_epi16(qh, ldu256(q8 + 64 * j + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sl, pl));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sh, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) + hsum_ps128(acc_m);
}

static float dot_q6_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    const __m256i m32 = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q6_K), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_q6_K, d)));
        const __m128i sc8 = ldu128(x + offsetof(gm_block_q6_K, scales));
        const uint8_t *ql = x + offsetof(gm_block_q6_K, ql);
        const uint8_t *qh = x + offsetof(gm_block_q6_K, qh);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < GM_QK_K / 128; j++) {
            const __m256i b1 = ldu256(ql + 64 * j), b2 = ldu256(ql + 64 * j + 32);
            const __m256i bh = ldu256(qh + 32 * j);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(b2, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                const __m256i y8 = ldu256(q8 + 128 * j + 32 * k);
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], y8),
                                                   _mm256_maddubs_epi16(m32, y8));
                /* groups 8j + 2k and 8j + 2k + 1: scale bytes to int16, 8 of each */
                const int g = 8 * j + 2 * k;
                const __m128i sel = _mm_set_epi8(
                    (char)(g + 1), (char)(g + 1), (char)(g + 1), (char)(g + 1), (char)(g + 1),
                    (char)(g + 1), (char)(g + 1), (char)(g + 1), (char)g, (char)g, (char)g,
                    (char)g, (char)g, (char)g, (char)g, (char)g);
                const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, sel));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_q2_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i m3 = _mm256_set1_epi8(0x03);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q2_K), *y = a + i * Q8K;
        const float yd = ld_f32(y);
        const float d = yd * h2f(ld_u16(x + offsetof(gm_block_q2_K, d)));
        const float dmin = -yd * h2f(ld_u16(x + offsetof(gm_block_q2_K, dmin)));
        const __m128i msc = ldu128(x + offsetof(gm_block_q2_K, scales));
        const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(msc, 4), m4));
        const __m256i prod = _mm256_madd_epi16(mins, ldu256(y + Q8K_BSUMS));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);

        const __m256i all = _mm256_cvtepi8_epi16(_mm_and_si128(msc, m4));
        const __m256i scales[2] = {
            _mm256_broadcastsi128_si256(_mm256_castsi256_si128(all)),
            _mm256_broadcastsi128_si256(_mm256_extracti128_si256(all, 1)),
        };
        const uint8_t *q2 = x + offsetof(gm_block_q2_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < GM_QK_K / 128; j++) {
            const __m256i b = ldu256(q2 + 32 * j);
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(b, 2 * k), m3);
                const __m256i p = _mm256_maddubs_epi16(q, ldu256(q8 + 128 * j + 32 * k));
                const __m256i sc = _mm256_shuffle_epi8(scales[j], pair16_mask(k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_q3_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i m3 = _mm256_set1_epi8(0x03);
    const __m256i four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_q3_K), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_q3_K, d)));
        /* the 16 six-bit scales as bytes (see gm_q3_K_scale), then minus 32 */
        uint32_t u[4];
        memcpy(u, x + offsetof(gm_block_q3_K, scales), 12);
        const uint32_t t = u[2];
        u[2] = ((u[0] >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
        u[3] = ((u[1] >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
        u[0] = (u[0] & 0x0f0f0f0fu) | (((t >> 0) & 0x03030303u) << 4);
        u[1] = (u[1] & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
        const __m128i sc8 = _mm_sub_epi8(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]),
                                         _mm_set1_epi8(32));
        const __m256i all = _mm256_cvtepi8_epi16(sc8);
        const __m256i scales[2] = {
            _mm256_broadcastsi128_si256(_mm256_castsi256_si128(all)),
            _mm256_broadcastsi128_si256(_mm256_extracti128_si256(all, 1)),
        };
        const __m256i hbits = ldu256(x + offsetof(gm_block_q3_K, hmask));
        const uint8_t *q3 = x + offsetof(gm_block_q3_K, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < GM_QK_K / 128; j++) {
            const __m256i b = ldu256(q3 + 32 * j);
            for (int k = 0; k < 4; k++) {
                const int bit = 4 * j + k;
                const __m256i ql = _mm256_and_si256(_mm256_srli_epi16(b, 2 * k), m3);
                /* 4 where the high bit is clear: q - 4 */
                const __m256i hm = _mm256_set1_epi8((char)(1 << bit));
                const __m256i hc = _mm256_andnot_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(hbits, hm), hm), four);
                const __m256i y8 = ldu256(q8 + 128 * j + 32 * k);
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(ql, y8),
                                                   _mm256_maddubs_epi16(hc, y8));
                const __m256i sc = _mm256_shuffle_epi8(scales[j], pair16_mask(k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_iq4_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i table = _mm256_broadcastsi128_si256(ldu128(gm_kvalues_iq4nl));
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq4_xs), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq4_xs, d)));
        unsigned sh = ld_u16(x + offsetof(gm_block_iq4_xs, scales_h));
        const uint8_t *sl = x + offsetof(gm_block_iq4_xs, scales_l);
        const uint8_t *qs = x + offsetof(gm_block_iq4_xs, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib += 2) {
            const __m256i v1 = _mm256_shuffle_epi8(table, nibbles_lo_hi(ldu128(qs + 16 * ib)));
            const __m256i v2 = _mm256_shuffle_epi8(table, nibbles_lo_hi(ldu128(qs + 16 * ib + 16)));
            const __m256i p1 = dot_ss8_i16(v1, ldu256(q8 + 32 * ib));
            const __m256i p2 = dot_ss8_i16(v2, ldu256(q8 + 32 * ib + 32));
            const int ls1 = (int)((sl[ib / 2] & 0x0f) | ((sh << 4) & 0x30)) - 32;
            const int ls2 = (int)((sl[ib / 2] >> 4) | ((sh << 2) & 0x30)) - 32;
            sh >>= 4;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p1, _mm256_set1_epi16((short)ls1)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p2, _mm256_set1_epi16((short)ls2)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_iq2_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_xxs), *y = a + i * Q8K;
        /* block scale d * (2s + 1) / 8 */
        const float d = 0.125f * ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq2_xxs, d)));
        const uint8_t *q2 = x + offsetof(gm_block_iq2_xxs, qs);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint8_t *g = q2 + 8 * ib; /* 4 grid indices, then signs and scale */
            const uint32_t aux = ld_u32(g + 4);
            uint64_t gr[4];
            for (int l = 0; l < 4; l++)
                memcpy(&gr[l], gm_iq2xxs_grid[g[l]], 8);
            const __m256i q = _mm256_set_epi64x((long long)gr[3], (long long)gr[2],
                                                (long long)gr[1], (long long)gr[0]);
            const __m256i s = _mm256_set_epi64x(
                (long long)g_signs64[(aux >> 21) & 127], (long long)g_signs64[(aux >> 14) & 127],
                (long long)g_signs64[(aux >> 7) & 127], (long long)g_signs64[aux & 127]);
            const __m256i p = _mm256_maddubs_epi16(q, _mm256_sign_epi8(ldu256(q8 + 32 * ib), s));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(2 * (aux >> 28) + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_iq3_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq3_xxs), *y = a + i * Q8K;
        /* block scale d * (2s + 1) / 4 */
        const float d = 0.25f * ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq3_xxs, d)));
        const uint8_t *q3 = x + offsetof(gm_block_iq3_xxs, qs);
        const uint8_t *gas = q3 + GM_QK_K / 4;
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint8_t *g = q3 + 8 * ib;
            uint32_t gr[8];
            for (int l = 0; l < 8; l++)
                memcpy(&gr[l], gm_iq3xxs_grid[g[l]], 4);
            const __m256i q = _mm256_set_epi32((int)gr[7], (int)gr[6], (int)gr[5], (int)gr[4],
                                               (int)gr[3], (int)gr[2], (int)gr[1], (int)gr[0]);
            const uint32_t aux = ld_u32(gas + 4 * ib);
            const __m256i s = _mm256_set_epi64x(
                (long long)g_signs64[(aux >> 21) & 127], (long long)g_signs64[(aux >> 14) & 127],
                (long long)g_signs64[(aux >> 7) & 127], (long long)g_signs64[aux & 127]);
            const __m256i p = _mm256_maddubs_epi16(q, _mm256_sign_epi8(ldu256(q8 + 32 * ib), s));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(2 * (aux >> 28) + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* [lo x8 int16 | hi x8 int16]: the scales of the two 16-element halves of a 32-element group. */
static inline __m256i scale_halves(int lo, int hi)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

static float dot_iq2_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_xs), *y = a + i * Q8K;
        const float d = 0.125f * ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq2_xs, d)));
        const uint8_t *qs = x + offsetof(gm_block_iq2_xs, qs);
        const uint8_t *sc = x + offsetof(gm_block_iq2_xs, scales);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            uint16_t q[4];
            memcpy(q, qs + 8 * ib, 8);
            uint64_t g[4];
            for (int l = 0; l < 4; l++)
                memcpy(&g[l], gm_iq2xs_grid[q[l] & 511], 8);
            const __m256i gv = _mm256_set_epi64x((long long)g[3], (long long)g[2], (long long)g[1],
                                                 (long long)g[0]);
            const __m256i sv = _mm256_set_epi64x(
                (long long)g_signs64[q[3] >> 9], (long long)g_signs64[q[2] >> 9],
                (long long)g_signs64[q[1] >> 9], (long long)g_signs64[q[0] >> 9]);
            const __m256i p = _mm256_maddubs_epi16(gv, _mm256_sign_epi8(ldu256(q8 + 32 * ib), sv));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(p, scale_halves(2 * (sc[ib] & 0x0f) + 1,
                                                        2 * (sc[ib] >> 4) + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_iq2_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq2_s), *y = a + i * Q8K;
        const float d = 0.125f * ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq2_s, d)));
        const uint8_t *qs = x + offsetof(gm_block_iq2_s, qs);
        const uint8_t *signs = qs + GM_QK_K / 8;
        const uint8_t *qh = x + offsetof(gm_block_iq2_s, qh);
        const uint8_t *sc = x + offsetof(gm_block_iq2_s, scales);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            uint64_t g[4];
            for (int l = 0; l < 4; l++)
                memcpy(&g[l], gm_iq2s_grid[qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8)], 8);
            const __m256i gv = _mm256_set_epi64x((long long)g[3], (long long)g[2], (long long)g[1],
                                                 (long long)g[0]);
            const __m256i sv = _mm256_or_si256(bits_to_bytes(signs + 4 * ib), one);
            const __m256i p = _mm256_maddubs_epi16(gv, _mm256_sign_epi8(ldu256(q8 + 32 * ib), sv));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(p, scale_halves(2 * (sc[ib] & 0x0f) + 1,
                                                        2 * (sc[ib] >> 4) + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static float dot_iq3_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq3_s), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq3_s, d)));
        const uint8_t *qs = x + offsetof(gm_block_iq3_s, qs);
        const uint8_t *qh = x + offsetof(gm_block_iq3_s, qh);
        const uint8_t *signs = x + offsetof(gm_block_iq3_s, signs);
        const uint8_t *sc = x + offsetof(gm_block_iq3_s, scales);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            uint32_t g[8];
            for (int k = 0; k < 8; k++)
                memcpy(&g[k], gm_iq3s_grid[qs[8 * ib + k] | (((qh[ib] >> k) & 1) << 8)], 4);
            const __m256i gv = _mm256_set_epi32((int)g[7], (int)g[6], (int)g[5], (int)g[4],
                                                (int)g[3], (int)g[2], (int)g[1], (int)g[0]);
            const __m256i sv = _mm256_or_si256(bits_to_bytes(signs + 4 * ib), one);
            const __m256i p = _mm256_maddubs_epi16(gv, _mm256_sign_epi8(ldu256(q8 + 32 * ib), sv));
            const int ls = 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 0x0f) + 1;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* IQ1 grid rows hold -1, 0, 1; the delta part is the scaled activation sum (see dot_ref.c). */
static float dot_iq1_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    __m256 acc = _mm256_setzero_ps();
    float acc_d = 0.0f;
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq1_s), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_iq1_s, d)));
        const uint8_t *qs = x + offsetof(gm_block_iq1_s, qs);
        const uint8_t *qhp = x + offsetof(gm_block_iq1_s, qh);
        const uint8_t *q8 = y + Q8K_QS;
        int16_t bsums[16];
        memcpy(bsums, y + Q8K_BSUMS, sizeof bsums);
        __m256i sumi = _mm256_setzero_si256();
        int32_t sumd = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const unsigned qh = ld_u16(qhp + 2 * ib);
            uint64_t g[4];
            for (int l = 0; l < 4; l++)
                memcpy(&g[l], gm_iq1s_grid[qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], 8);
            const __m256i gv = _mm256_set_epi64x((long long)g[3], (long long)g[2], (long long)g[1],
                                                 (long long)g[0]);
            const int ls = 2 * ((qh >> 12) & 7) + 1;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(dot_ss8_i16(gv, ldu256(q8 + 32 * ib)),
                                                            _mm256_set1_epi16((short)ls)));
            /* negated when the delta's sign bit is set; without a branch (random signs) */
            const int32_t t = ls * (bsums[2 * ib] + bsums[2 * ib + 1]);
            const int32_t neg = -(int32_t)(qh >> 15);
            sumd += (t ^ neg) - neg;
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_d += d * (float)sumd;
    }
    return hsum_ps(acc) + GM_IQ1S_DELTA * acc_d;
}

static float dot_iq1_m(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i plus = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_iq1_m), *y = a + i * Q8K;
        const uint8_t *qs = x + offsetof(gm_block_iq1_m, qs);
        const uint8_t *qhp = x + offsetof(gm_block_iq1_m, qh);
        uint16_t sc[4];
        memcpy(sc, x + offsetof(gm_block_iq1_m, scales), 8);
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                          ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = ld_f32(y) * h2f(dbits);
        const uint8_t *q8 = y + Q8K_QS;
        __m256i sumi = _mm256_setzero_si256(), sumd = _mm256_setzero_si256();
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint8_t qh0 = qhp[2 * ib], qh1 = qhp[2 * ib + 1];
            uint64_t g[4];
            memcpy(&g[0], gm_iq1s_grid[qs[4 * ib + 0] | ((qh0 & 7) << 8)], 8);
            memcpy(&g[1], gm_iq1s_grid[qs[4 * ib + 1] | (((qh0 >> 4) & 7) << 8)], 8);
            memcpy(&g[2], gm_iq1s_grid[qs[4 * ib + 2] | ((qh1 & 7) << 8)], 8);
            memcpy(&g[3], gm_iq1s_grid[qs[4 * ib + 3] | (((qh1 >> 4) & 7) << 8)], 8);
            const __m256i gv = _mm256_set_epi64x((long long)g[3], (long long)g[2], (long long)g[1],
                                                 (long long)g[0]);
            /* +1 or -1 per group of 8 (the delta's sign), without branches */
            const long long one8 = 0x0101010101010101ll;
            const __m256i dv = _mm256_set_epi64x(one8 | -(long long)((qh1 >> 7) & 1),
                                                 one8 | -(long long)((qh1 >> 3) & 1),
                                                 one8 | -(long long)((qh0 >> 7) & 1),
                                                 one8 | -(long long)((qh0 >> 3) & 1));
            const int shift = 6 * (ib % 2);
            const __m256i ls = scale_halves(2 * ((sc[ib / 2] >> shift) & 7) + 1,
                                            2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1);
            const __m256i y8 = ldu256(q8 + 32 * ib);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(dot_ss8_i16(gv, y8), ls));
            sumd = _mm256_add_epi32(
                sumd, _mm256_madd_epi16(_mm256_maddubs_epi16(plus, _mm256_sign_epi8(y8, dv)), ls));
        }
        const __m256 t = _mm256_fmadd_ps(_mm256_set1_ps(GM_IQ1M_DELTA), _mm256_cvtepi32_ps(sumd),
                                         _mm256_cvtepi32_ps(sumi));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), t, acc);
    }
    return hsum_ps(acc);
}

static float dot_tq2_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    const uint64_t nb = n / GM_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *x = w + i * sizeof(gm_block_tq2_0), *y = a + i * Q8K;
        const float d = ld_f32(y) * h2f(ld_u16(x + offsetof(gm_block_tq2_0, d)));
        const uint8_t *q8 = y + Q8K_QS;
        /* codes are q - 1: take the activation sum (from bsums) out once */
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        _mm256_madd_epi16(ldu256(y + Q8K_BSUMS), ones16));
        for (int c = 0; c < 2; c++) {
            const __m256i b = ldu256(x + offsetof(gm_block_tq2_0, qs) + 32 * c);
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(b, 2 * k), m3);
                sumi = _mm256_add_epi32(sumi, dot_us8(q, ldu256(q8 + 128 * c + 32 * k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* ---- float weights times float32 activations -------------------------------------------- */

/* Four accumulators of 8 lanes: each lane sums about n/32 products. The tail (n % 8) is
 * summed in scalar float. */
#define FLOAT_DOT(name, LOAD8, LOAD1, ESIZE)                                                   \
    static float name(const void *wv, const void *av, uint64_t n)                            \
    {                                                                                          \
        const uint8_t *w = wv, *a = av;                                                        \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                         \
        __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();                         \
        uint64_t i = 0;                                                                        \
        for (; i + 32 <= n; i += 32) {                                                         \
            acc0 = _mm256_fmadd_ps(LOAD8(w + (i + 0) * ESIZE),                                 \
                                   _mm256_loadu_ps((const float *)(a + 4 * (i + 0))), acc0);   \
            acc1 = _mm256_fmadd_ps(LOAD8(w + (i + 8) * ESIZE),                                 \
                                   _mm256_loadu_ps((const float *)(a + 4 * (i + 8))), acc1);   \
            acc2 = _mm256_fmadd_ps(LOAD8(w + (i + 16) * ESIZE),                                \
                                   _mm256_loadu_ps((const float *)(a + 4 * (i + 16))), acc2);  \
            acc3 = _mm256_fmadd_ps(LOAD8(w + (i + 24) * ESIZE),                                \
                                   _mm256_loadu_ps((const float *)(a + 4 * (i + 24))), acc3);  \
        }                                                                                      \
        for (; i + 8 <= n; i += 8)                                                             \
            acc0 = _mm256_fmadd_ps(LOAD8(w + i * ESIZE),                                       \
                                   _mm256_loadu_ps((const float *)(a + 4 * i)), acc0);         \
        float tail = 0.0f;                                                                     \
        for (; i < n; i++)                                                                     \
            tail += LOAD1(w + i * ESIZE) * ld_f32(a + 4 * i);                                  \
        return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3))) +  \
               tail;                                                                           \
    }

static inline __m256 load8_f32(const uint8_t *p)
{
    return _mm256_loadu_ps((const float *)p);
}

static inline __m256 load8_f16(const uint8_t *p)
{
    return _mm256_cvtph_ps(ldu128(p));
}

static inline __m256 load8_bf16(const uint8_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ldu128(p)), 16));
}

static inline float load1_f16(const uint8_t *p)
{
    return h2f(ld_u16(p));
}

static inline float load1_bf16(const uint8_t *p)
{
    return gm_bf16_to_f32(ld_u16(p));
}

FLOAT_DOT(dot_f32, load8_f32, ld_f32, 4)
FLOAT_DOT(dot_f16, load8_f16, load1_f16, 2)
FLOAT_DOT(dot_bf16, load8_bf16, load1_bf16, 2)

/* ---- table ------------------------------------------------------------------------------- */

void gm_dot_fill_avx2(gm_dot_fn t[GM_TYPE_COUNT])
{
    init_tables();
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
    t[GM_TYPE_TQ2_0] = dot_tq2_0;
}
