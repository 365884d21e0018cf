/* tests/unit/block_scales: finite scales written into a random block of a quantized type, for the
 * tests that decode random blocks on the CPU and on the device (test_cuda, test_cuda_emu): a NaN
 * or infinite scale's payload is not portable. C and C++. */
#ifndef GM_TESTS_BLOCK_SCALES_H
#define GM_TESTS_BLOCK_SCALES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/types.h"
#include "kernels/quant.h"

/* Block p of type gets finite scales: h the block's d (and dmin where it has both), e8 MXFP4's
 * E8M0 exponent; a type without scales (F32, F16, BF16) is left as it is. */
static inline void gm_test_block_scales(uint32_t type, uint8_t *p, const uint16_t h[2], uint8_t e8)
{
    switch (type) {
    case GM_TYPE_Q4_0: memcpy(p + offsetof(gm_block_q4_0, d), h, 2); break;
    case GM_TYPE_Q5_0: memcpy(p + offsetof(gm_block_q5_0, d), h, 2); break;
    case GM_TYPE_Q8_0: memcpy(p + offsetof(gm_block_q8_0, d), h, 2); break;
    case GM_TYPE_IQ4_NL: memcpy(p + offsetof(gm_block_iq4_nl, d), h, 2); break;
    case GM_TYPE_MXFP4: p[offsetof(gm_block_mxfp4, e)] = e8; break;
    case GM_TYPE_Q2_K: memcpy(p + offsetof(gm_block_q2_K, d), h, 4); break; /* d, dmin */
    case GM_TYPE_Q3_K: memcpy(p + offsetof(gm_block_q3_K, d), h, 2); break;
    case GM_TYPE_Q4_K: memcpy(p + offsetof(gm_block_q4_K, d), h, 4); break;
    case GM_TYPE_Q5_K: memcpy(p + offsetof(gm_block_q5_K, d), h, 4); break;
    case GM_TYPE_Q6_K: memcpy(p + offsetof(gm_block_q6_K, d), h, 2); break;
    case GM_TYPE_IQ4_XS: memcpy(p + offsetof(gm_block_iq4_xs, d), h, 2); break;
    case GM_TYPE_IQ2_XXS: memcpy(p + offsetof(gm_block_iq2_xxs, d), h, 2); break;
    case GM_TYPE_IQ2_XS: memcpy(p + offsetof(gm_block_iq2_xs, d), h, 2); break;
    case GM_TYPE_IQ2_S: memcpy(p + offsetof(gm_block_iq2_s, d), h, 2); break;
    case GM_TYPE_IQ3_XXS: memcpy(p + offsetof(gm_block_iq3_xxs, d), h, 2); break;
    case GM_TYPE_IQ3_S: memcpy(p + offsetof(gm_block_iq3_s, d), h, 2); break;
    case GM_TYPE_IQ1_S: memcpy(p + offsetof(gm_block_iq1_s, d), h, 2); break;
    case GM_TYPE_IQ1_M: /* the f16 scale over the top nibbles of the four scale words */
        for (int k = 0; k < 4; k++) {
            uint8_t *hi = p + offsetof(gm_block_iq1_m, scales) + 2 * k + 1;
            *hi = (uint8_t)((*hi & 0x0f) | (((h[0] >> (4 * k)) & 0x0f) << 4));
        }
        break;
    default: break;
    }
}

#endif
