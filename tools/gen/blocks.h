/* tools/gen/blocks: pools of valid random weight blocks, and the cheap variation that turns one
 * pool into any number of distinct tensors.
 *
 * Owns: a pool = a few MB of blocks of one tensor type whose dequantized values are zero-mean
 * with a chosen standard deviation sigma (the generator uses 1/sqrt(fan_in)). The blocks are
 * built deliberately, not from random bytes: normal f16 scales, quants drawn from a rounded
 * bell curve that is symmetric around zero after dequantization (for K-quants the mins are
 * chosen so that d*sc*q - dmin*m is centred), random signs for MXFP4 and IQ2_XXS.
 *
 * Every supported type has an exact, cheap negation of a block (flip the quants, the sign bits
 * or the scale signs). A tensor slice (one expert, or one whole dense tensor) is identified by a
 * 64-bit key; its bytes are the pool's blocks read cyclically from an offset that depends on the
 * key, each block negated or not by a bit of a hash of (key, block index). Two slices with
 * different keys therefore differ (with probability 1 - 2^-blocks), every row of an embedding
 * table is distinct, and generating costs a memcpy plus an xor per block: disk speed.
 *
 * "Block" for F32/F16/BF16 means a group of 32 elements.
 * Threads: a pool is immutable after creation; fill may run on any thread.
 */
#ifndef GM_TOOLS_GEN_BLOCKS_H
#define GM_TOOLS_GEN_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct gm_gen_pool gm_gen_pool;

/* Types this module can generate. */
bool gm_gen_type_supported(uint32_t type);
/* Comma-separated names of the supported types (static string). */
const char *gm_gen_supported_types(void);

/* Builds a pool of about pool_bytes (whole blocks) of type with dequantized std sigma (> 0),
 * deterministic for (type, sigma, seed). GM_EINVAL for an unsupported type or bad sigma. */
int gm_gen_pool_create(gm_gen_pool **out, uint32_t type, float sigma, uint64_t seed,
                       size_t pool_bytes, gm_err *err);
void gm_gen_pool_destroy(gm_gen_pool *p);

uint32_t gm_gen_pool_type(const gm_gen_pool *p);
float gm_gen_pool_sigma(const gm_gen_pool *p);
size_t gm_gen_pool_bytes(const gm_gen_pool *p);

/* Bytes [pos, pos + n) of the slice identified by key (any byte range; a slice is an endless
 * stream of blocks, the caller takes as many bytes as its tensor has). */
void gm_gen_pool_fill(const gm_gen_pool *p, uint64_t key, uint64_t pos, uint8_t *dst, size_t n);

/* Deterministic helpers shared with the generator. */
uint64_t gm_gen_mix64(uint64_t x);                 /* splitmix64 finaliser */
uint64_t gm_gen_hash_str(uint64_t seed, const char *s);

/* A small seeded generator (xoshiro256**) for values not taken from pools. */
typedef struct gm_gen_rng {
    uint64_t s[4];
} gm_gen_rng;
void gm_gen_rng_seed(gm_gen_rng *r, uint64_t seed);
uint64_t gm_gen_rng_next(gm_gen_rng *r);
float gm_gen_rng_unit(gm_gen_rng *r);    /* uniform in [0, 1) */
float gm_gen_rng_gauss(gm_gen_rng *r);   /* mean 0, std 1, bell-shaped, |x| <= 3.47 */

/* IEEE half conversions (round to nearest even). */
uint16_t gm_gen_f32_to_f16(float f);
float gm_gen_f16_to_f32(uint16_t h);

#endif
