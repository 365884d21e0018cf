/* The AVX-512 attention kernel (attn.h): a block's 16 K rows are converted and transposed once
 * to [head_dim][16] so that a query's 16 scores are 16 lanes of one vector (multiply-adds with
 * the query's elements broadcast, no horizontal sums), its V rows converted once; then four
 * queries at a time: scores, the online softmax update, and the weighted sum of V rows. Built
 * with the AVX-512 flags of src/kernels/CMakeLists.txt; called only after dispatch.c checked the
 * CPU. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gguf/types.h"
#include "kernels/attn_impl.h"
#include "kernels/quant.h"

#define B GM_ATTN_BLOCK

/* exp(x) for x <= 0 (-INFINITY included, which gives a value below 1e-44, not 0: callers zero
 * masked lanes themselves): n = round(x / ln 2), r = x - n ln 2 in two parts, a degree-7
 * polynomial for exp(r) on |r| <= ln(2)/2 (the coefficients of the classic single-precision
 * one), times 2^n by vscalefps. */
static inline __m512 exp_ps(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* Elements d..d+15 of a cache row as float32. */
static inline __m512 row16(uint32_t type, const uint8_t *row, uint32_t d)
{
    if (type == GM_TYPE_F32)
        return _mm512_loadu_ps(row + 4u * d);
    if (type == GM_TYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2u * d)));
    /* GM_TYPE_Q8_0: 16 codes of one block times its scale, as the reference rounds it */
    const uint8_t *blk = row + (uint64_t)(d / GM_QK8_0) * sizeof(gm_block_q8_0);
    uint16_t h;
    memcpy(&h, blk + offsetof(gm_block_q8_0, d), sizeof h);
    const __m128i c = _mm_loadu_si128(
        (const __m128i *)(blk + offsetof(gm_block_q8_0, qs) + d % GM_QK8_0));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)));
}

static inline __m512 unpacklo_pd(__m512 a, __m512 b)
{
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

static inline __m512 unpackhi_pd(__m512 a, __m512 b)
{
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

/* r[j] (16 rows of 16) -> out + 16 i: column i. */
static inline void transpose16(const __m512 r[16], float *out)
{
    __m512 a[16], b[16];
    for (int m = 0; m < 8; m++) {
        a[2 * m] = _mm512_unpacklo_ps(r[2 * m], r[2 * m + 1]);
        a[2 * m + 1] = _mm512_unpackhi_ps(r[2 * m], r[2 * m + 1]);
    }
    /* b[4q + c], 128-bit lane L: column 4L + c of rows 4q..4q+3 */
    for (int q = 0; q < 4; q++) {
        b[4 * q + 0] = unpacklo_pd(a[4 * q], a[4 * q + 2]);
        b[4 * q + 1] = unpackhi_pd(a[4 * q], a[4 * q + 2]);
        b[4 * q + 2] = unpacklo_pd(a[4 * q + 1], a[4 * q + 3]);
        b[4 * q + 3] = unpackhi_pd(a[4 * q + 1], a[4 * q + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512 e0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44);
        const __m512 e1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xee);
        const __m512 f0 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
        const __m512 f1 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xee);
        _mm512_store_ps(out + 16 * (0 + c), _mm512_shuffle_f32x4(e0, f0, 0x88));
        _mm512_store_ps(out + 16 * (4 + c), _mm512_shuffle_f32x4(e0, f0, 0xdd));
        _mm512_store_ps(out + 16 * (8 + c), _mm512_shuffle_f32x4(e1, f1, 0x88));
        _mm512_store_ps(out + 16 * (12 + c), _mm512_shuffle_f32x4(e1, f1, 0xdd));
    }
}

/* Positions [p, p + n) into kt ([head_dim][16]) and vb ([16][head_dim]), rows >= n zero. */
static inline void load_block(const gm_attn_kv *kv, uint32_t p, uint32_t n, float *kt, float *vb)
{
    const uint32_t hd = kv->head_dim;
    for (uint32_t d = 0; d < hd; d += 16) {
        __m512 r[16];
        for (uint32_t j = 0; j < B; j++) {
            if (j < n) {
                r[j] = row16(kv->type, kv->k + (uint64_t)(p + j) * kv->row_stride, d);
                _mm512_store_ps(vb + (uint64_t)j * hd + d,
                                row16(kv->type, kv->v + (uint64_t)(p + j) * kv->row_stride, d));
            } else {
                r[j] = _mm512_setzero_ps();
                _mm512_store_ps(vb + (uint64_t)j * hd + d, r[j]);
            }
        }
        transpose16(r, kt + (uint64_t)d * B);
    }
}

/* o[d..d + 16 NC) of NQ queries from i = o * corr + sum_j w_j v_j over the block's n rows
 * (NQ and NC constants where it is inlined, so the accumulators stay in registers). */
static inline __attribute__((always_inline)) void pv(const float *vb, uint32_t hd, uint32_t n,
                                                     const gm_attn_q *q, uint32_t i, int NQ,
                                                     uint32_t d, int NC, const float corr[4],
                                                     float wl[4][B], const uint32_t nv[4])
{
    __m512 acc[4][4];
    for (int u = 0; u < NQ; u++) {
        const float *o = q->o + (uint64_t)(i + u) * hd + d;
        for (int c = 0; c < NC; c++)
            acc[u][c] = _mm512_mul_ps(_mm512_loadu_ps(o + 16 * c), _mm512_set1_ps(corr[u]));
    }
    /* rows every query sees together, then each query's further rows alone: a row past a
     * query's causal end must not reach it even as 0 x (an inf or NaN of the cache) */
    uint32_t jmin = n;
    for (int u = 0; u < NQ; u++)
        jmin = nv[u] && nv[u] < jmin ? nv[u] : jmin;
    for (uint32_t j = 0; j < jmin; j++) {
        __m512 v[4];
        for (int c = 0; c < NC; c++)
            v[c] = _mm512_load_ps(vb + (uint64_t)j * hd + d + 16 * c);
        for (int u = 0; u < NQ; u++) {
            const __m512 wj = _mm512_set1_ps(wl[u][j]);
            for (int c = 0; c < NC; c++)
                acc[u][c] = _mm512_fmadd_ps(wj, v[c], acc[u][c]);
        }
    }
    for (int u = 0; u < NQ; u++)
        for (uint32_t j = jmin; j < nv[u]; j++) {
            const __m512 wj = _mm512_set1_ps(wl[u][j]);
            for (int c = 0; c < NC; c++)
                acc[u][c] = _mm512_fmadd_ps(wj, _mm512_load_ps(vb + (uint64_t)j * hd + d + 16 * c),
                                            acc[u][c]);
        }
    for (int u = 0; u < NQ; u++) {
        if (!nv[u])
            continue; /* left exactly as it was */
        float *o = q->o + (uint64_t)(i + u) * hd + d;
        for (int c = 0; c < NC; c++)
            _mm512_storeu_ps(o + 16 * c, acc[u][c]);
    }
}

/* NQ queries from i: scores, online softmax update, weighted V rows. Each query's arithmetic is
 * the same whatever NQ is (the loops over queries only interleave independent chains). */
static inline __attribute__((always_inline)) void queries(const float *kt, const float *vb,
                                                          uint32_t hd, uint32_t p, uint32_t n,
                                                          const gm_attn_q *q, uint32_t i, int NQ)
{
    __m512 s[4], w[4];
    float corr[4];
    uint32_t nv[4]; /* rows of the block each query sees (0: none) */
    {
        __m512 a0[4], a1[4];
        for (int u = 0; u < NQ; u++)
            a0[u] = a1[u] = _mm512_setzero_ps();
        const float *qr[4];
        for (int u = 0; u < NQ; u++)
            qr[u] = q->q + (uint64_t)(i + u) * hd;
        for (uint32_t d = 0; d < hd; d += 2) {
            const __m512 k0 = _mm512_load_ps(kt + (uint64_t)d * B);
            const __m512 k1 = _mm512_load_ps(kt + (uint64_t)(d + 1) * B);
            for (int u = 0; u < NQ; u++) {
                a0[u] = _mm512_fmadd_ps(_mm512_set1_ps(qr[u][d]), k0, a0[u]);
                a1[u] = _mm512_fmadd_ps(_mm512_set1_ps(qr[u][d + 1]), k1, a1[u]);
            }
        }
        for (int u = 0; u < NQ; u++)
            s[u] = _mm512_add_ps(a0[u], a1[u]);
    }
    for (int u = 0; u < NQ; u++) {
        const uint32_t end = q->end[i + u];
        nv[u] = end <= p ? 0 : end - p < n ? end - p : n;
        if (!nv[u]) {
            corr[u] = 1.0f;
            w[u] = _mm512_setzero_ps();
            continue;
        }
        const uint32_t vis = nv[u];
        const __mmask16 k = (__mmask16)((1u << vis) - 1u);
        const __m512 sm = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), k, s[u]);
        const float mx = _mm512_reduce_max_ps(sm);
        const float m_old = q->m[i + u], m_new = mx > m_old ? mx : m_old;
        corr[u] = m_old == m_new ? 1.0f : expf(m_old - m_new);
        w[u] = _mm512_maskz_mov_ps(k, exp_ps(_mm512_sub_ps(sm, _mm512_set1_ps(m_new))));
        q->m[i + u] = m_new;
        q->l[i + u] = q->l[i + u] * corr[u] + _mm512_reduce_add_ps(w[u]);
    }
    float wl[4][B] __attribute__((aligned(64)));
    for (int u = 0; u < NQ; u++)
        _mm512_store_ps(wl[u], w[u]);
    int any = 0;
    for (int u = 0; u < NQ; u++)
        any |= nv[u] != 0;
    if (!any)
        return;
    /* o = o * corr + sum_j w_j v_j, 64 elements (4 vectors) of every query per pass */
    uint32_t d = 0;
    for (; d + 64 <= hd; d += 64)
        pv(vb, hd, n, q, i, NQ, d, 4, corr, wl, nv);
    for (; d < hd; d += 16)
        pv(vb, hd, n, q, i, NQ, d, 1, corr, wl, nv);
}

void gm_attn_avx512(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                    float *scratch)
{
    GM_ATTN_LEVEL_BODY(4);
}
