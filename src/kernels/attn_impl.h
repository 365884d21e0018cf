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

/* The body of a SIMD level's gm_attn_fn, in its file: blocks of GM_ATTN_BLOCK positions from p0,
 * each converted once by the file's load_block(kv, p, n, kt, vb), then the file's
 * queries(kt, vb, head_dim, p, n, q, i, NQ) for groups of NQ queries and one at a time for the
 * rest (kt and vb in the scratch: [head_dim][16] and [16][head_dim] floats). */
#define GM_ATTN_LEVEL_BODY(NQ)                                                                  \
    do {                                                                                        \
        const uint32_t hd_ = kv->head_dim;                                                      \
        float *kt_ = scratch, *vb_ = scratch + (uint64_t)GM_ATTN_BLOCK * hd_;                   \
        for (uint32_t p_ = p0; p_ < p1; p_ += GM_ATTN_BLOCK) {                                  \
            const uint32_t n_ = p1 - p_ < GM_ATTN_BLOCK ? p1 - p_ : GM_ATTN_BLOCK;              \
            load_block(kv, p_, n_, kt_, vb_);                                                   \
            uint32_t i_ = 0;                                                                    \
            for (; i_ + (NQ) <= q->n_q; i_ += (NQ))                                             \
                queries(kt_, vb_, hd_, p_, n_, q, i_, (NQ));                                    \
            for (; i_ < q->n_q; i_++)                                                           \
                queries(kt_, vb_, hd_, p_, n_, q, i_, 1);                                       \
        }                                                                                       \
    } while (0)

/* The x86 SIMD levels (attn_avx2.c, attn_avx512.c): head_dim a multiple of 16. */
void gm_attn_avx2(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                  float *scratch);
void gm_attn_avx512(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                    float *scratch);
/* attn_neon.c: aarch64 baseline Advanced SIMD, head_dim a multiple of 16. */
void gm_attn_neon(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                  float *scratch);

#endif
