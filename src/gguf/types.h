/* gguf/types: the one table of GGUF tensor types (ggml type ids, block geometry).
 *
 * Owns: type ids as stored in GGUF tensor infos, their names, elements per block and bytes per
 * block. Every other module asks this table; no block size is written anywhere else.
 * Ids that ggml retired (4, 5, 31-33, 36-38) and ids past the table are unknown types.
 * Threads: read-only data, any thread.
 */
#ifndef GM_GGUF_TYPES_H
#define GM_GGUF_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef enum gm_type {
    GM_TYPE_F32 = 0,
    GM_TYPE_F16 = 1,
    GM_TYPE_Q4_0 = 2,
    GM_TYPE_Q4_1 = 3,
    GM_TYPE_Q5_0 = 6,
    GM_TYPE_Q5_1 = 7,
    GM_TYPE_Q8_0 = 8,
    GM_TYPE_Q8_1 = 9,
    GM_TYPE_Q2_K = 10,
    GM_TYPE_Q3_K = 11,
    GM_TYPE_Q4_K = 12,
    GM_TYPE_Q5_K = 13,
    GM_TYPE_Q6_K = 14,
    GM_TYPE_Q8_K = 15,
    GM_TYPE_IQ2_XXS = 16,
    GM_TYPE_IQ2_XS = 17,
    GM_TYPE_IQ3_XXS = 18,
    GM_TYPE_IQ1_S = 19,
    GM_TYPE_IQ4_NL = 20,
    GM_TYPE_IQ3_S = 21,
    GM_TYPE_IQ2_S = 22,
    GM_TYPE_IQ4_XS = 23,
    GM_TYPE_I8 = 24,
    GM_TYPE_I16 = 25,
    GM_TYPE_I32 = 26,
    GM_TYPE_I64 = 27,
    GM_TYPE_F64 = 28,
    GM_TYPE_IQ1_M = 29,
    GM_TYPE_BF16 = 30,
    GM_TYPE_TQ1_0 = 34,
    GM_TYPE_TQ2_0 = 35,
    GM_TYPE_MXFP4 = 39,
    GM_TYPE_COUNT = 40, /* one past the largest id in the table */
} gm_type;

typedef struct gm_type_info {
    const char *name;       /* upper-case ggml name, e.g. "Q4_K" */
    uint32_t block_elems;   /* elements per block (1 for plain scalar types) */
    uint32_t block_bytes;   /* bytes per block */
    bool quantized;         /* block-quantized (not a plain scalar type) */
} gm_type_info;

/* The entry for a type id, or NULL when the id is unknown or retired. */
const gm_type_info *gm_type_get(uint32_t type);

/* The type whose name matches (case-insensitive), or -1. */
int gm_type_from_name(const char *name);

/* Name of a type id, or "unknown" for an id without an entry. */
const char *gm_type_name(uint32_t type);

/* Bytes of a row of n_elems elements. Fails (GM_EFORMAT) when the type is unknown, n_elems is
 * not a multiple of the block size or the size overflows. */
int gm_type_row_bytes(uint32_t type, uint64_t n_elems, uint64_t *bytes, gm_err *err);

#endif
