/* kernels/avx2_util: private to src/kernels; small inline helpers shared by the files compiled
 * with the AVX2 flags of src/kernels/CMakeLists.txt (dot_avx2.c, attn_avx2.c). Include only
 * from those files.
 *
 * Owns nothing: no state, no tables. */
#ifndef GM_KERNELS_AVX2_UTIL_H
#define GM_KERNELS_AVX2_UTIL_H

#include <immintrin.h>

/* The sum of the 8 lanes, in a fixed order (halves, then pairs, then the last two). */
static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
