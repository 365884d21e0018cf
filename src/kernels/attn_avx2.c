/* The AVX2 attention kernel (attn.h): the AVX-512 one's structure (attn_avx512.c) on 8-lane
 * vectors: a block's K rows converted and transposed once to [head_dim][16] (two vectors per
 * element), its V rows converted once, then two queries at a time. Built with the AVX2 flags of
 * src/kernels/CMakeLists.txt; called only after dispatch.c checked the CPU. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gguf/types.h"
#include "kernels/attn_impl.h"
#include "kernels/avx2_util.h"
#include "kernels/quant.h"

#define B GM_ATTN_BLOCK

/* exp(x) for x <= 0 (see attn_avx512.c); below -87 (where 2^n would leave the normal range)
 * the result is 0. */
static inline __m256 exp_ps(__m256 x)
{
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    /* 2^n: n + 127 in the exponent field (n >= -126 here) */
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

/* Elements d..d+7 of a cache row as float32. */
static inline __m256 row8(uint32_t type, const uint8_t *row, uint32_t d)
{
    if (type == GM_TYPE_F32)
        return _mm256_loadu_ps((const float *)(const void *)(row + 4u * d));
    if (type == GM_TYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2u * d)));
    const uint8_t *blk = row + (uint64_t)(d / GM_QK8_0) * sizeof(gm_block_q8_0);
    uint16_t h;
    memcpy(&h, blk + offsetof(gm_block_q8_0, d), sizeof h);
    const __m128i c = _mm_loadl_epi64(
        (const __m128i *)(blk + offsetof(gm_block_q8_0, qs) + d % GM_QK8_0));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)));
}

/* r[j] (8 rows of 8) -> out + 16 i: column i (the 16-wide kt rows, one half). */
static inline void transpose8(const __m256 r[8], float *out)
{
    __m256 t[8], u[8];
    for (int m = 0; m < 4; m++) {
        t[2 * m] = _mm256_unpacklo_ps(r[2 * m], r[2 * m + 1]);
        t[2 * m + 1] = _mm256_unpackhi_ps(r[2 * m], r[2 * m + 1]);
    }
    for (int h = 0; h < 2; h++) { /* rows 0-3, rows 4-7 */
        u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) {
        _mm256_store_ps(out + 16 * c, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        _mm256_store_ps(out + 16 * (4 + c), _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
}

static inline void load_block(const gm_attn_kv *kv, uint32_t p, uint32_t n, float *kt, float *vb)
{
    const uint32_t hd = kv->head_dim;
    for (uint32_t d = 0; d < hd; d += 8)
        for (uint32_t h = 0; h < 2; h++) {
            __m256 r[8];
            for (uint32_t jj = 0; jj < 8; jj++) {
                const uint32_t j = 8 * h + jj;
                if (j < n) {
                    r[jj] = row8(kv->type, kv->k + (uint64_t)(p + j) * kv->row_stride, d);
                    _mm256_store_ps(vb + (uint64_t)j * hd + d,
                                    row8(kv->type, kv->v + (uint64_t)(p + j) * kv->row_stride, d));
                } else {
                    r[jj] = _mm256_setzero_ps();
                    _mm256_store_ps(vb + (uint64_t)j * hd + d, r[jj]);
                }
            }
            transpose8(r, kt + (uint64_t)d * B + 8 * h);
        }
}

static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* o[d..d + 8 NC) of NQ queries from i = o * corr + sum_j w_j v_j over the block's n rows
 * (NQ and NC constants where it is inlined, so the accumulators stay in registers). */
static inline __attribute__((always_inline)) void pv(const float *vb, uint32_t hd, uint32_t n,
                                                     const gm_attn_q *q, uint32_t i, int NQ,
                                                     uint32_t d, int NC, const float corr[2],
                                                     float wl[2][B], const uint32_t nv[2])
{
    __m256 acc[2][4];
    for (int u = 0; u < NQ; u++) {
        const float *o = q->o + (uint64_t)(i + u) * hd + d;
        for (int c = 0; c < NC; c++)
            acc[u][c] = _mm256_mul_ps(_mm256_loadu_ps(o + 8 * c), _mm256_set1_ps(corr[u]));
    }
    /* rows every query sees together, then each query's further rows alone: a row past a
     * query's causal end must not reach it even as 0 x (an inf or NaN of the cache) */
    uint32_t jmin = n;
    for (int u = 0; u < NQ; u++)
        jmin = nv[u] && nv[u] < jmin ? nv[u] : jmin;
    for (uint32_t j = 0; j < jmin; j++) {
        __m256 v[4];
        for (int c = 0; c < NC; c++)
            v[c] = _mm256_load_ps(vb + (uint64_t)j * hd + d + 8 * c);
        for (int u = 0; u < NQ; u++) {
            const __m256 wj = _mm256_broadcast_ss(&wl[u][j]);
            for (int c = 0; c < NC; c++)
                acc[u][c] = _mm256_fmadd_ps(wj, v[c], acc[u][c]);
        }
    }
    for (int u = 0; u < NQ; u++)
        for (uint32_t j = jmin; j < nv[u]; j++) {
            const __m256 wj = _mm256_broadcast_ss(&wl[u][j]);
            for (int c = 0; c < NC; c++)
                acc[u][c] = _mm256_fmadd_ps(wj, _mm256_load_ps(vb + (uint64_t)j * hd + d + 8 * c),
                                            acc[u][c]);
        }
    for (int u = 0; u < NQ; u++) {
        if (!nv[u])
            continue; /* left exactly as it was */
        float *o = q->o + (uint64_t)(i + u) * hd + d;
        for (int c = 0; c < NC; c++)
            _mm256_storeu_ps(o + 8 * c, acc[u][c]);
    }
}

/* NQ queries from i (see attn_avx512.c: each query's arithmetic does not depend on NQ). */
static inline __attribute__((always_inline)) void queries(const float *kt, const float *vb,
                                                          uint32_t hd, uint32_t p, uint32_t n,
                                                          const gm_attn_q *q, uint32_t i, int NQ)
{
    __m256 s[2][2], w[2][2];
    float corr[2];
    uint32_t nv[2]; /* rows of the block each query sees (0: none) */
    {
        __m256 a[2][4]; /* [query][half + 2 * (d odd)] */
        for (int u = 0; u < NQ; u++)
            for (int c = 0; c < 4; c++)
                a[u][c] = _mm256_setzero_ps();
        for (uint32_t d = 0; d < hd; d += 2) {
            const float *k0 = kt + (uint64_t)d * B, *k1 = k0 + B;
            const __m256 k00 = _mm256_load_ps(k0), k01 = _mm256_load_ps(k0 + 8);
            const __m256 k10 = _mm256_load_ps(k1), k11 = _mm256_load_ps(k1 + 8);
            for (int u = 0; u < NQ; u++) {
                const float *qr = q->q + (uint64_t)(i + u) * hd;
                const __m256 q0 = _mm256_broadcast_ss(qr + d), q1 = _mm256_broadcast_ss(qr + d + 1);
                a[u][0] = _mm256_fmadd_ps(q0, k00, a[u][0]);
                a[u][1] = _mm256_fmadd_ps(q0, k01, a[u][1]);
                a[u][2] = _mm256_fmadd_ps(q1, k10, a[u][2]);
                a[u][3] = _mm256_fmadd_ps(q1, k11, a[u][3]);
            }
        }
        for (int u = 0; u < NQ; u++) {
            s[u][0] = _mm256_add_ps(a[u][0], a[u][2]);
            s[u][1] = _mm256_add_ps(a[u][1], a[u][3]);
        }
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int u = 0; u < NQ; u++) {
        const uint32_t end = q->end[i + u];
        nv[u] = end <= p ? 0 : end - p < n ? end - p : n;
        if (!nv[u]) {
            corr[u] = 1.0f;
            w[u][0] = w[u][1] = _mm256_setzero_ps();
            continue;
        }
        const int vis = (int)nv[u];
        const __m256 k0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(vis), lane));
        const __m256 k1 = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(vis - 8), lane));
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        const __m256 s0 = _mm256_blendv_ps(ninf, s[u][0], k0);
        const __m256 s1 = _mm256_blendv_ps(ninf, s[u][1], k1);
        const float mx = hmax8(_mm256_max_ps(s0, s1));
        const float m_old = q->m[i + u], m_new = mx > m_old ? mx : m_old;
        corr[u] = m_old == m_new ? 1.0f : expf(m_old - m_new);
        const __m256 mn = _mm256_set1_ps(m_new);
        w[u][0] = _mm256_and_ps(k0, exp_ps(_mm256_sub_ps(s0, mn)));
        w[u][1] = _mm256_and_ps(k1, exp_ps(_mm256_sub_ps(s1, mn)));
        q->m[i + u] = m_new;
        q->l[i + u] = q->l[i + u] * corr[u] + hsum_ps(_mm256_add_ps(w[u][0], w[u][1]));
    }
    int any = 0;
    for (int u = 0; u < NQ; u++)
        any |= nv[u] != 0;
    if (!any)
        return;
    float wl[2][B] __attribute__((aligned(32)));
    for (int u = 0; u < NQ; u++) {
        _mm256_store_ps(wl[u], w[u][0]);
        _mm256_store_ps(wl[u] + 8, w[u][1]);
    }
    /* o = o * corr + sum_j w_j v_j, 32 elements (4 vectors) of every query per pass */
    uint32_t d = 0;
    for (; d + 32 <= hd; d += 32)
        pv(vb, hd, n, q, i, NQ, d, 4, corr, wl, nv);
    for (; d < hd; d += 8)
        pv(vb, hd, n, q, i, NQ, d, 1, corr, wl, nv);
}

void gm_attn_avx2(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                  float *scratch)
{
    GM_ATTN_LEVEL_BODY(2);
}
