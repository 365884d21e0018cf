/* kernels/dot: activation quantization and the scalar reference fused dot products.
 *
 * Owns: how an f32 activation vector is prepared for a weight type's dot product (quantized to
 * Q8_0 blocks for the 32-element weight types, to Q8_K blocks for the K, IQ and TQ types; kept
 * float32 for F32, F16 and BF16 weights), and the reference dot product of one weight row with
 * one activation row. Integer sums inside a block, one float multiply-add per block or
 * sub-block: the structure the SIMD and CUDA kernels follow. Faster kernels (kernels.h) are
 * checked against these.
 *
 * Weight types with a reference dot:
 *   activations Q8_0: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 (Q4_1 and Q5_1 take their
 *     minimum term from the exact sum of the activation codes, not from a Q8_1 block);
 *   activations Q8_K: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
 *     IQ1_S, IQ1_M, IQ4_XS, TQ1_0, TQ2_0;
 *   activations F32 (never rounded to 16 bits): F32, F16, BF16, summed in double.
 *
 * Accuracy: the result equals the dot of the dequantized weights with the dequantized
 * activations up to float32 accumulation error; against the unquantized activations it differs
 * by at most sum_i |w_i| * |x_i - xq_i| (the activation quantization error; 0 for F32
 * activations) plus that rounding.
 *
 * Buffers need no particular alignment. Threads: pure functions, any thread.
 */
#ifndef GM_KERNELS_DOT_H
#define GM_KERNELS_DOT_H

#include <stdint.h>

/* One row's dot product: n elements (a multiple of the weight type's block size) of weight
 * blocks w and activation blocks a of the matching activation type. */
typedef float (*gm_dot_fn)(const void *w, const void *a, uint64_t n);

/* The activation type (GM_TYPE_Q8_0, GM_TYPE_Q8_K or GM_TYPE_F32) that weight type wtype's dot
 * product takes, or GM_EUNSUPPORTED when wtype has no reference dot. */
int gm_dot_act_type(uint32_t wtype);

/* The reference dot product of weight type wtype, or NULL when there is none. */
gm_dot_fn gm_dot_ref_fn(uint32_t wtype);

/* Quantizes n floats of x into activation blocks of act_type (GM_TYPE_Q8_0 or GM_TYPE_Q8_K) at
 * dst (n / block_elems blocks of gm_type_get(act_type)->block_bytes); GM_TYPE_F32 copies x.
 * Rounding follows ggml's reference quantizers (Q8_0: half away from zero; Q8_K: half to
 * even). Returns 0, GM_EUNSUPPORTED for another act_type, GM_EINVAL when n is not a multiple of
 * the block size or a pointer is NULL with n > 0. Non-finite inputs give unspecified (but
 * defined) block contents. */
int gm_quantize_act(uint32_t act_type, const float *x, void *dst, uint64_t n);

/* *out = w . a for one row through gm_dot_ref_fn(wtype). Returns 0, GM_EUNSUPPORTED when wtype
 * has no reference dot, GM_EINVAL when n is not a multiple of both block sizes or a pointer is
 * NULL. */
int gm_dot_row(uint32_t wtype, const void *w, const void *a, uint64_t n, float *out);

#endif
