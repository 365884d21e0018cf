/* kernels/dot_impl: private to src/kernels; how the SIMD files hand their kernels to dispatch.c.
 *
 * Owns: one function per SIMD file that writes the dot products it implements into a table
 * indexed by weight type, leaving the other entries alone (dispatch.c fills a level's table
 * from the levels below it first, so a level only overrides the types it specialises). Each
 * SIMD file is compiled with its own target flags (src/kernels/CMakeLists.txt); nothing in it
 * may run before dispatch.c has checked the CPU features.
 *
 * Every kernel has the gm_dot_fn contract of dot.h: n is a positive multiple of the weight
 * type's block (any n for F32, F16, BF16 weights), pointers have any alignment; and the
 * activation row is one prepared by gm_act_quantize (kernels.h): for Q8_0 activations that is
 * the nb = n/32 Q8_0 blocks, then their nb scales as float32 (GM_ACT_Q8_0_SCALES), so a kernel
 * loads several block scales as one vector instead of converting f16 one at a time, then for
 * every full group of 4 blocks (nb/4 groups, a last nb % 4 blocks have none) GM_ACT_Q8_0_GROUP
 * bytes (GM_ACT_Q8_0_GROUPS): the 128 codes of the 4 blocks once more, regrouped as the nibbles
 * of 4 weight blocks fall in one vector (bytes 16k..16k+15: codes 0-15 of block k, bytes
 * 64+16k..64+16k+15: codes 16-31 of block k), then 32 int16 sums of those codes in the same
 * order, 4 codes each (int16 2j: codes 4(j%4)..+3 of block j/4, int16 2j+1: codes 16+4(j%4)..+3),
 * so a kernel with unsigned, offset weight values (value + off) takes the offset out of its
 * 32-bit lanes of vpdpbusd sums by one vpdpwssd with -off. The layout does not depend on the
 * weight type (one prepared row serves all weight types with Q8_0 activations). The reference
 * kernels read the blocks only; the AVX2 and NEON kernels the blocks and scales.
 *
 * Threads: the fill functions are called once, under dispatch.c's once-initialisation.
 */
#ifndef GM_KERNELS_DOT_IMPL_H
#define GM_KERNELS_DOT_IMPL_H

#include <stdbool.h>

#include "gguf/types.h"
#include "kernels/dot.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

/* The float32 block scales that follow the blocks of a prepared Q8_0 activation row of n
 * elements (exact conversions of the blocks' f16 scales). */
#define GM_ACT_Q8_0_SCALES(a, n) ((const uint8_t *)(a) + ((n) / GM_QK8_0) * sizeof(gm_block_q8_0))

/* Bytes of one group of 4 regrouped blocks: 128 codes and 32 int16 sums. */
#define GM_ACT_Q8_0_GROUP 192u

/* The regrouped codes and sums (GM_ACT_Q8_0_GROUP bytes per full group of 4 blocks) that follow
 * the float scales of a prepared Q8_0 activation row of n elements. */
#define GM_ACT_Q8_0_GROUPS(a, n) \
    ((const uint8_t *)(a) + ((n) / GM_QK8_0) * (sizeof(gm_block_q8_0) + sizeof(float)))

/* The single-token kernel dot_name (gm_dot_fn) and the multi-token one multi_name
 * (kernels.h: gm_dot_multi_fn) of a type whose kernels are one row driver
 * rows(w, a, a_stride, n, n_tok, out) for n_tok = 1 or GM_DOT_MULTI activation rows (the weight
 * side unpacked once, every token's steps in the same order, so the two agree bit for bit).
 * attr: a target attribute for both (avx512_util.h's VBMI) or nothing. */
#define GM_ROW_KERNELS(attr, dot_name, multi_name, rows)                                       \
    attr static float dot_name(const void *w, const void *a, uint64_t n)                       \
    {                                                                                          \
        float r;                                                                               \
        rows(w, a, 0, n, 1, &r);                                                               \
        return r;                                                                              \
    }                                                                                          \
    attr static void multi_name(const void *w, const void *a, uint64_t a_stride, uint64_t n,   \
                                float *out)                                                    \
    {                                                                                          \
        rows(w, a, a_stride, n, GM_DOT_MULTI, out);                                            \
    }

void gm_dot_fill_avx2(gm_dot_fn table[GM_TYPE_COUNT]);
void gm_dot_fill_avx512(gm_dot_fn table[GM_TYPE_COUNT]);
/* In dot_avx512.c too, its functions compiled for VBMI and BITALG on top (target attribute);
 * filled over the avx512 table. */
void gm_dot_fill_avx512vbmi(gm_dot_fn table[GM_TYPE_COUNT]);
void gm_dot_fill_neon(gm_dot_fn table[GM_TYPE_COUNT]);
/* dot_neon.c again, built with the dot-product extension (dot_neon_dotprod.c). */
void gm_dot_fill_neondot(gm_dot_fn table[GM_TYPE_COUNT]);
/* The multi-token kernels (kernels.h: gm_dot_multi_fn) of the neon and neondot levels (the same
 * file, built twice), each filled right after its level's dot table. */
void gm_dot_multi_fill_neon(gm_dot_multi_fn table[GM_TYPE_COUNT]);
void gm_dot_multi_fill_neondot(gm_dot_multi_fn table[GM_TYPE_COUNT]);

/* The AVX-512 kernels of the K-quants (dot_avx512_k.c), single- and multi-token, installed by
 * gm_dot_fill_avx512 and gm_dot_multi_fill_avx512. */
void gm_dot_fill_avx512_k(gm_dot_fn table[GM_TYPE_COUNT]);
void gm_dot_multi_fill_avx512_k(gm_dot_multi_fn table[GM_TYPE_COUNT]);

/* The AVX-512 kernels of the IQ types with large grids and of TQ1_0, one file per family
 * (dot_avx512_iq2.c: IQ2_XS, IQ2_S; dot_avx512_iq3s.c: IQ3_S, TQ1_0; dot_avx512_iq1.c: IQ1_S,
 * IQ1_M), compiled with the AVX-512 flags. Called by gm_dot_fill_avx512 with vbmi false and by
 * gm_dot_fill_avx512vbmi with vbmi true (then a file may install kernels with the VBMI target
 * attribute of avx512_util.h). */
void gm_dot_fill_avx512_iq2(gm_dot_fn table[GM_TYPE_COUNT], bool vbmi);
void gm_dot_fill_avx512_iq3s(gm_dot_fn table[GM_TYPE_COUNT], bool vbmi);
void gm_dot_fill_avx512_iq1(gm_dot_fn table[GM_TYPE_COUNT], bool vbmi);
/* Their multi-token kernels (kernels.h: gm_dot_multi_fn), called by gm_dot_multi_fill_avx512 and
 * gm_dot_multi_fill_avx512vbmi the same way. */
void gm_dot_multi_fill_avx512_iq2(gm_dot_multi_fn table[GM_TYPE_COUNT], bool vbmi);
void gm_dot_multi_fill_avx512_iq3s(gm_dot_multi_fn table[GM_TYPE_COUNT], bool vbmi);
void gm_dot_multi_fill_avx512_iq1(gm_dot_multi_fn table[GM_TYPE_COUNT], bool vbmi);

/* The multi-token kernels (kernels.h: gm_dot_multi_fn) of the avx512 level; a level above that
 * overrides a type's single-token kernel drops its multi-token one (dispatch.c). */
void gm_dot_multi_fill_avx512(gm_dot_multi_fn table[GM_TYPE_COUNT]);
/* The same for the avx512vbmi level, filled after its dot table (so over the entries that
 * dispatch.c cleared for the types the level overrides). */
void gm_dot_multi_fill_avx512vbmi(gm_dot_multi_fn table[GM_TYPE_COUNT]);

/* The two-row kernels (kernels.h: gm_dot_rows2_fn) of the avx512 and avx512vbmi levels, filled
 * as their multi-token ones; and those of the family files, called by these two with vbmi false
 * and true. */
void gm_dot_rows2_fill_avx512(gm_dot_rows2_fn table[GM_TYPE_COUNT]);
void gm_dot_rows2_fill_avx512vbmi(gm_dot_rows2_fn table[GM_TYPE_COUNT]);
void gm_dot_rows2_fill_avx512_iq2(gm_dot_rows2_fn table[GM_TYPE_COUNT], bool vbmi);
void gm_dot_rows2_fill_avx512_iq3s(gm_dot_rows2_fn table[GM_TYPE_COUNT], bool vbmi);
void gm_dot_rows2_fill_avx512_iq1(gm_dot_rows2_fn table[GM_TYPE_COUNT], bool vbmi);

#endif
