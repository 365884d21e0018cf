/* kernels/attn: the attention kernels: softmax(q k^T) v of a group of query vectors against a
 * run of cached positions of one kv head, kept as an online softmax (a running maximum and sum
 * per query) so that a run can be cut into parts and the parts merged.
 *
 * Owns: nothing. The caller owns the cache rows, the queries, the outputs and the scratch; a
 * call writes only the outputs, the running maxima and sums, and the scratch.
 *
 * Positions are visited in blocks of GM_ATTN_BLOCK, at p0, p0 + 16, ...; each block's K rows are
 * converted to float32 and transposed once ([head_dim][16]) and its V rows converted once, then
 * every query of the call uses them: the cost of the conversion is shared by all the queries of
 * a call (the query heads of a kv head's group, of several tokens). A query's arithmetic does
 * not depend on the other queries of the call, so the same query against the same positions
 * gives the same result bit for bit however the queries are grouped into calls; it depends only
 * on p0 (the block boundaries): callers start runs at multiples of GM_ATTN_BLOCK. A position at
 * or past a query's end never enters its arithmetic, not even as a zero weight times the row
 * (so an infinity in a cached row cannot reach an earlier query).
 *
 * Levels: a scalar reference (any head_dim) and AVX2 and AVX-512 kernels (head_dim a multiple of
 * 16); they differ in the order of float additions and in exp (the SIMD kernels use a
 * polynomial within 2 ulp of expf), within the budget stated in tests/unit/test_kernels_attn.c.
 *
 * Threads: the functions are reentrant; concurrent calls need their own outputs and scratch. */
#ifndef GM_KERNELS_ATTN_H
#define GM_KERNELS_ATTN_H

#include <stdint.h>

#define GM_ATTN_BLOCK 16u

/* The cache of one kv head: position p's K row at k + p * row_stride, its V row at
 * v + p * row_stride, each head_dim elements of type (GM_TYPE_F32, GM_TYPE_F16, or GM_TYPE_Q8_0
 * with head_dim a multiple of 32). */
typedef struct gm_attn_kv {
    uint32_t type;
    uint32_t head_dim;
    const uint8_t *k, *v;
    uint64_t row_stride;
} gm_attn_kv;

/* n_q queries: row i of q (head_dim floats, the softmax scale already applied) sees the
 * positions below end[i]. o (n_q rows of head_dim floats), m and l are the online softmax's
 * state, read and updated: o the sum of exp(s - m) v over the positions seen so far, m the
 * largest score so far (-INFINITY before any), l the sum of exp(s - m). Start with o = 0,
 * m = -INFINITY, l = 0; the attention is then o / l (gm_attn_finish). */
typedef struct gm_attn_q {
    uint32_t n_q;
    const float *q;
    const uint32_t *end;
    float *o, *m, *l;
} gm_attn_q;

/* Floats of scratch one call needs (64-byte aligned): the converted K and V of one block and
 * the weights of n_q queries for it. */
#define GM_ATTN_SCRATCH_FLOATS(head_dim, n_q) \
    (2u * GM_ATTN_BLOCK * (uint64_t)(head_dim) + GM_ATTN_BLOCK * (uint64_t)(n_q))

/* Visits positions [p0, p1) (blocks at p0, p0 + 16, ...) for every query. */
typedef void (*gm_attn_fn)(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                           float *scratch);

/* The scalar reference (kernels/attn_ref.c). */
void gm_attn_ref(const gm_attn_kv *kv, uint32_t p0, uint32_t p1, const gm_attn_q *q,
                 float *scratch);

/* Merges part b's state into part a's for n_q queries (two runs of disjoint positions):
 * afterwards a holds the state of both runs. */
void gm_attn_merge(uint32_t n_q, uint32_t head_dim, float *o_a, float *m_a, float *l_a,
                   const float *o_b, const float *m_b, const float *l_b);

/* out row i = o row i / l[i] (a query that saw no position gives zeros). */
void gm_attn_finish(uint32_t n_q, uint32_t head_dim, const float *o, const float *l, float *out,
                    uint64_t out_stride);

#endif
