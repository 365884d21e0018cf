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
 * the n/32 Q8_0 blocks followed by their n/32 scales as float32 (GM_ACT_Q8_0_SCALES), so a
 * kernel loads several block scales as one vector instead of converting f16 one at a time. The
 * reference kernels read the blocks only.
 *
 * Threads: the fill functions are called once, under dispatch.c's once-initialisation.
 */
#ifndef GM_KERNELS_DOT_IMPL_H
#define GM_KERNELS_DOT_IMPL_H

#include "gguf/types.h"
#include "kernels/dot.h"
#include "kernels/quant.h"

/* The float32 block scales that follow the blocks of a prepared Q8_0 activation row of n
 * elements (exact conversions of the blocks' f16 scales). */
#define GM_ACT_Q8_0_SCALES(a, n) ((const uint8_t *)(a) + ((n) / GM_QK8_0) * sizeof(gm_block_q8_0))

void gm_dot_fill_avx2(gm_dot_fn table[GM_TYPE_COUNT]);
void gm_dot_fill_avx512(gm_dot_fn table[GM_TYPE_COUNT]);
void gm_dot_fill_neon(gm_dot_fn table[GM_TYPE_COUNT]);

#endif
