/* kernels/dequant: scalar reference dequantization of GGUF tensor rows to float32.
 *
 * Owns: the definition of what every supported block type decodes to. The results are the
 * bits that ggml's reference C decoders and gguf-py's numpy decoders give (same formulas, same
 * float32 operation order, no fused multiply-add), so they serve as the reference for faster
 * kernels and for tests. Speed is not a goal here.
 *
 * Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * Q8_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4.
 *
 * Source blocks may be at any address (no alignment needed). Every byte pattern decodes to some
 * float (NaN or infinity included when a scale's bits say so); nothing is rejected for content.
 * Threads: pure functions, any thread.
 */
#ifndef GM_KERNELS_DEQUANT_H
#define GM_KERNELS_DEQUANT_H

#include <stdbool.h>
#include <stdint.h>

/* True when gm_dequant_row can decode type (a gm_type id). */
bool gm_dequant_supported(uint32_t type);

/* Decodes n_elems elements of type from src (n_elems / block_elems whole blocks) into dst.
 * Returns 0; GM_EUNSUPPORTED when the type has no decoder (unknown ids included); GM_EINVAL when
 * n_elems is not a multiple of the type's block size, or src or dst is NULL while n_elems > 0.
 * src and dst must not overlap. */
int gm_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n_elems);

#endif
