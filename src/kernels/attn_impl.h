/* kernels/attn_impl: private to src/kernels; what the attention kernels of the SIMD files share
 * with the reference (attn_ref.c).
 *
 * Owns: nothing. */
#ifndef GM_KERNELS_ATTN_IMPL_H
#define GM_KERNELS_ATTN_IMPL_H

#include "kernels/attn.h"

/* Positions [p, p + n) (n <= GM_ATTN_BLOCK) of kv as float32: kt[d * 16 + j] the K element d of
 * position p + j, vb[j * head_dim + d] its V element; rows j >= n are zeros. */
void gm_attn_load_ref(const gm_attn_kv *kv, uint32_t p, uint32_t n, float *kt, float *vb);

/* The x86 SIMD levels (attn_avx2.c, attn_avx512.c): head_dim a multiple of 16. */
void gm_attn_avx2(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                  float *scratch);
void gm_attn_avx512(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                    float *scratch);
/* attn_neon.c: aarch64 baseline Advanced SIMD, head_dim a multiple of 16. */
void gm_attn_neon(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                  float *scratch);

#endif
