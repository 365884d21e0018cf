/* kernels/dot: activation quantization and the scalar reference fused dot products.
 *
 * Owns: how an f32 activation vector is quantized for a weight type's dot product (to Q8_0
 * blocks for the 32-element weight types, to Q8_K blocks for the K and IQ types), and the
 * reference dot product of one quantized weight row with a quantized activation row. Integer
 * sums inside a block, one float multiply-add per block or sub-block: the structure the SIMD
 * and CUDA kernels follow. Faster kernels are checked against these.
 *
 * Weight types with a reference dot: Q8_0, MXFP4 (activations Q8_0); Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K, IQ4_XS (activations Q8_K).
 *
 * Accuracy: the result equals the dot of the dequantized weights with the dequantized
 * activations up to float32 accumulation error; against the unquantized activations it differs
 * by at most sum_i |w_i| * |x_i - xq_i| (the activation quantization error) plus that rounding.
 *
 * Buffers need no particular alignment. Threads: pure functions, any thread.
 */
#ifndef GM_KERNELS_DOT_H
#define GM_KERNELS_DOT_H

#include <stdint.h>

/* One row's dot product: n elements (a multiple of the weight type's block size) of weight
 * blocks w and activation blocks a of the matching activation type. */
typedef float (*gm_dot_fn)(const void *w, const void *a, uint64_t n);

/* The activation type (GM_TYPE_Q8_0 or GM_TYPE_Q8_K) that weight type wtype's dot product
 * takes, or GM_EUNSUPPORTED when wtype has no reference dot. */
int gm_dot_act_type(uint32_t wtype);

/* The reference dot product of weight type wtype, or NULL when there is none. */
gm_dot_fn gm_dot_ref_fn(uint32_t wtype);

/* Quantizes n floats of x into activation blocks of act_type (GM_TYPE_Q8_0 or GM_TYPE_Q8_K) at
 * dst (n / block_elems blocks of gm_type_get(act_type)->block_bytes). Rounding follows ggml's
 * reference quantizers (Q8_0: half away from zero; Q8_K: half to even). Returns 0, GM_EUNSUPPORTED for another
 * act_type, GM_EINVAL when n is not a multiple of the block size or a pointer is NULL with
 * n > 0. Non-finite inputs give unspecified (but defined) block contents. */
int gm_quantize_act(uint32_t act_type, const float *x, void *dst, uint64_t n);

/* *out = w . a for one row through gm_dot_ref_fn(wtype). Returns 0, GM_EUNSUPPORTED when wtype
 * has no reference dot, GM_EINVAL when n is not a multiple of both block sizes or a pointer is
 * NULL. */
int gm_dot_row(uint32_t wtype, const void *w, const void *a, uint64_t n, float *out);

#endif
