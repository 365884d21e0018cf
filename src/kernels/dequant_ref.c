/* Scalar reference decoders, one per block type (see dequant.h).
 *
 * Float operations are written in the order of ggml's reference decoders (e.g. Q4_K:
 * (d*sc)*q - (dmin*m)) and this file is compiled without floating-point contraction, so a
 * multiply-add is never fused into one rounding: that keeps the results bit-identical to the
 * references. Each block is copied into a local struct first because mapped rows give no
 * alignment guarantee. */
#include "kernels/dequant.h"

#include <string.h>

#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"

typedef void (*deq_fn)(const uint8_t *src, float *y, uint64_t nb);

/* ---- plain scalar types ------------------------------------------------------------------ */

static void deq_f32(const uint8_t *src, float *y, uint64_t n)
{
    memcpy(y, src, n * sizeof(float));
}

static void deq_f16(const uint8_t *src, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = gm_f16_to_f32(h);
    }
}

static void deq_bf16(const uint8_t *src, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = gm_bf16_to_f32(h);
    }
}

/* ---- 32-element blocks ------------------------------------------------------------------- */

static void deq_q4_0(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK4_0) {
        gm_block_q4_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int j = 0; j < GM_QK4_0 / 2; j++) {
            y[j] = (float)((b.qs[j] & 0x0f) - 8) * d;
            y[j + GM_QK4_0 / 2] = (float)((b.qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK4_1) {
        gm_block_q4_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const float m = gm_f16_to_f32(b.m);
        for (int j = 0; j < GM_QK4_1 / 2; j++) {
            y[j] = (float)(b.qs[j] & 0x0f) * d + m;
            y[j + GM_QK4_1 / 2] = (float)(b.qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK5_0) {
        gm_block_q5_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const uint32_t qh = load_u32le(b.qh);
        for (int j = 0; j < GM_QK5_0 / 2; j++) {
            int q0 = (b.qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (b.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)(q0 - 16) * d;
            y[j + GM_QK5_0 / 2] = (float)(q1 - 16) * d;
        }
    }
}

static void deq_q5_1(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK5_1) {
        gm_block_q5_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const float m = gm_f16_to_f32(b.m);
        const uint32_t qh = load_u32le(b.qh);
        for (int j = 0; j < GM_QK5_1 / 2; j++) {
            int q0 = (b.qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (b.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)q0 * d + m;
            y[j + GM_QK5_1 / 2] = (float)q1 * d + m;
        }
    }
}

static void deq_q8_0(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK8_0) {
        gm_block_q8_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int j = 0; j < GM_QK8_0; j++)
            y[j] = (float)b.qs[j] * d;
    }
}

static void deq_q8_1(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK8_1) {
        gm_block_q8_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int j = 0; j < GM_QK8_1; j++)
            y[j] = (float)b.qs[j] * d;
    }
}

static void deq_iq4_nl(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK4_NL) {
        gm_block_iq4_nl b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int j = 0; j < GM_QK4_NL / 2; j++) {
            y[j] = d * (float)gm_kvalues_iq4nl[b.qs[j] & 0x0f];
            y[j + GM_QK4_NL / 2] = d * (float)gm_kvalues_iq4nl[b.qs[j] >> 4];
        }
    }
}

static void deq_mxfp4(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, y += GM_QK_MXFP4) {
        gm_block_mxfp4 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_e8m0_to_f32_half(b.e);
        for (int j = 0; j < GM_QK_MXFP4 / 2; j++) {
            y[j] = (float)gm_kvalues_mxfp4[b.qs[j] & 0x0f] * d;
            y[j + GM_QK_MXFP4 / 2] = (float)gm_kvalues_mxfp4[b.qs[j] >> 4] * d;
        }
    }
}

/* ---- K-quants ------------------------------------------------------------------------------ */

static void deq_q2_K(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q2_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const float dmin = gm_f16_to_f32(b.dmin);
        /* element e: 128-chunk c, shift s (2 bits each), byte l of the chunk's 32 qs bytes;
         * sub-block of 16 = e / 16 */
        for (int e = 0; e < GM_QK_K; e++) {
            const int c = e / 128, s = (e % 128) / 32, l = e % 32;
            const uint8_t sc = b.scales[e / 16];
            const float dl = d * (float)(sc & 0x0f);
            const float ml = dmin * (float)(sc >> 4);
            const int q = (b.qs[c * 32 + l] >> (2 * s)) & 3;
            *y++ = dl * (float)q - ml;
        }
    }
}

static void deq_q3_K(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q3_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        int sc[16];
        for (int g = 0; g < 16; g++)
            sc[g] = gm_q3_K_scale(b.scales, g);
        for (int e = 0; e < GM_QK_K; e++) {
            const int c = e / 128, s = (e % 128) / 32, l = e % 32;
            const int lo = (b.qs[c * 32 + l] >> (2 * s)) & 3;
            const int hbit = (b.hmask[l] >> (e / 32)) & 1;
            const float dl = d * (float)sc[e / 16];
            *y++ = dl * (float)(lo - (hbit ? 0 : 4));
        }
    }
}

static void deq_q4_K(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q4_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const float dmin = gm_f16_to_f32(b.dmin);
        for (int sb = 0; sb < 8; sb++) { /* 32 elements: nibble half (sb&1) of 32 bytes */
            int sc, m;
            gm_q4_K_scale_min(sb, b.scales, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = dmin * (float)m;
            const uint8_t *q = b.qs + (sb / 2) * 32;
            const int shift = 4 * (sb & 1);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] >> shift) & 0x0f) - m1;
        }
    }
}

static void deq_q5_K(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q5_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const float dmin = gm_f16_to_f32(b.dmin);
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            gm_q4_K_scale_min(sb, b.scales, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = dmin * (float)m;
            const uint8_t *q = b.qs + (sb / 2) * 32;
            const int shift = 4 * (sb & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0f) | (((b.qh[l] >> sb) & 1) << 4);
                *y++ = d1 * (float)v - m1;
            }
        }
    }
}

static void deq_q6_K(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q6_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        /* element e: 128-chunk c; low nibble from ql byte c*64 + e%64 (high nibble for the
         * second 64); 2 high bits from qh byte c*32 + e%32 at shift 2*((e%128)/32) */
        for (int e = 0; e < GM_QK_K; e++) {
            const int c = e / 128, r = e % 128;
            const int lo = (b.ql[c * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
            const int hi = (b.qh[c * 32 + r % 32] >> (2 * (r / 32))) & 3;
            const float dl = d * (float)b.scales[e / 16];
            *y++ = dl * (float)((lo | (hi << 4)) - 32);
        }
    }
}

static void deq_q8_K(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_q8_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        for (int j = 0; j < GM_QK_K; j++)
            *y++ = b.d * (float)b.qs[j];
    }
}

/* ---- i-quants -------------------------------------------------------------------------------- */

static float sign_of(uint8_t signs, int j)
{
    return (signs & gm_kmask_iq2xs[j]) ? -1.0f : 1.0f;
}

static void deq_iq2_xxs(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq2_xxs b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            /* two little-endian uint32: grid indices (4 bytes), then signs and scale */
            uint8_t idx[4];
            memcpy(idx, &b.qs[4 * ib], 4);
            const uint32_t aux = (uint32_t)b.qs[4 * ib + 2] | (uint32_t)b.qs[4 * ib + 3] << 16;
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint8_t *grid = gm_iq2xxs_grid[idx[l]];
                const uint8_t signs = gm_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++)
                    *y++ = db * (float)grid[j] * sign_of(signs, j);
            }
        }
    }
}

static void deq_iq2_xs(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq2_xs b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const float db[2] = {
                d * (0.5f + (float)(b.scales[ib] & 0x0f)) * 0.25f,
                d * (0.5f + (float)(b.scales[ib] >> 4)) * 0.25f,
            };
            for (int l = 0; l < 4; l++) {
                const uint16_t q = b.qs[4 * ib + l];
                const uint8_t *grid = gm_iq2xs_grid[q & 511];
                const uint8_t signs = gm_ksigns_iq2xs[q >> 9];
                for (int j = 0; j < 8; j++)
                    *y++ = db[l / 2] * (float)grid[j] * sign_of(signs, j);
            }
        }
    }
}

static void deq_iq2_s(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq2_s b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const uint8_t *qs = b.qs;
        const uint8_t *signs = b.qs + GM_QK_K / 8;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const float db[2] = {
                d * (0.5f + (float)(b.scales[ib] & 0x0f)) * 0.25f,
                d * (0.5f + (float)(b.scales[ib] >> 4)) * 0.25f,
            };
            for (int l = 0; l < 4; l++) {
                const int idx = qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
                const uint8_t *grid = gm_iq2s_grid[idx];
                const uint8_t sg = signs[4 * ib + l];
                for (int j = 0; j < 8; j++)
                    *y++ = db[l / 2] * (float)grid[j] * sign_of(sg, j);
            }
        }
    }
}

static void deq_iq3_xxs(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq3_xxs b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        const uint8_t *qs = b.qs;
        const uint8_t *scales_signs = b.qs + GM_QK_K / 4;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint32_t aux = load_u32le(scales_signs + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t signs = gm_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                const uint8_t *g1 = gm_iq3xxs_grid[qs[8 * ib + 2 * l + 0]];
                const uint8_t *g2 = gm_iq3xxs_grid[qs[8 * ib + 2 * l + 1]];
                for (int j = 0; j < 4; j++)
                    *y++ = db * (float)g1[j] * sign_of(signs, j);
                for (int j = 0; j < 4; j++)
                    *y++ = db * (float)g2[j] * sign_of(signs, j + 4);
            }
        }
    }
}

static void deq_iq3_s(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq3_s b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0f;
            const float db = d * (float)(1 + 2 * s);
            for (int l = 0; l < 4; l++) { /* 8 elements: two grid points of 4 */
                const uint8_t sg = b.signs[4 * ib + l];
                for (int h = 0; h < 2; h++) {
                    const int k = 8 * ib + 2 * l + h; /* grid index number within the block */
                    const int idx = b.qs[k] | (((b.qh[ib] >> (2 * l + h)) & 1) << 8);
                    const uint8_t *grid = gm_iq3s_grid[idx];
                    for (int j = 0; j < 4; j++)
                        *y++ = db * (float)grid[j] * sign_of(sg, 4 * h + j);
                }
            }
        }
    }
}

static void deq_iq1_s(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq1_s b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint16_t qh = b.qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = (qh & 0x8000) ? -GM_IQ1S_DELTA : GM_IQ1S_DELTA;
            for (int l = 0; l < 4; l++) {
                const int idx = b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                const int8_t *grid = gm_iq1s_grid[idx];
                for (int j = 0; j < 8; j++)
                    *y++ = dl * ((float)grid[j] + delta);
            }
        }
    }
}

static void deq_iq1_m(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq1_m b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        uint16_t sc[4];
        for (int k = 0; k < 4; k++)
            sc[k] = (uint16_t)(b.scales[2 * k] | b.scales[2 * k + 1] << 8);
        /* the f16 block scale is the top nibble of each of the four scale words */
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                          ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = gm_f16_to_f32(dbits);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int sshift = 6 * (ib % 2);
            const float dl[2] = {
                d * (float)(2 * ((sc[ib / 2] >> (sshift + 0)) & 7) + 1),
                d * (float)(2 * ((sc[ib / 2] >> (sshift + 3)) & 7) + 1),
            };
            for (int l = 0; l < 4; l++) {
                const uint8_t qh = (uint8_t)(b.qh[2 * ib + l / 2] >> (4 * (l % 2)));
                const int idx = b.qs[4 * ib + l] | ((qh & 7) << 8);
                const float delta = (qh & 8) ? -GM_IQ1M_DELTA : GM_IQ1M_DELTA;
                const int8_t *grid = gm_iq1s_grid[idx]; /* IQ1_M shares IQ1_S's grid */
                for (int j = 0; j < 8; j++)
                    *y++ = dl[l / 2] * ((float)grid[j] + delta);
            }
        }
    }
}

static void deq_iq4_xs(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_iq4_xs b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                           (((b.scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *qs = b.qs + 16 * ib;
            for (int j = 0; j < 16; j++)
                y[j] = dl * (float)gm_kvalues_iq4nl[qs[j] & 0x0f];
            for (int j = 0; j < 16; j++)
                y[j + 16] = dl * (float)gm_kvalues_iq4nl[qs[j] >> 4];
            y += 32;
        }
    }
}

/* ---- ternary --------------------------------------------------------------------------------- */

/* Trit n (0 = most significant) of a byte holding 5 (or 4) base-3 digits scaled to 0..255:
 * multiplying by 3^n moves digit n to the top, (q * 3) >> 8 reads it. */
static int tq1_trit(uint8_t byte, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(byte * pow3[n]);
    return (int)(((uint16_t)q * 3) >> 8);
}

static void deq_tq1_0(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_tq1_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 32; m++)
                *y++ = (float)(tq1_trit(b.qs[m], n) - 1) * d;
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 16; m++)
                *y++ = (float)(tq1_trit(b.qs[32 + m], n) - 1) * d;
        for (int n = 0; n < 4; n++)
            for (int m = 0; m < 4; m++)
                *y++ = (float)(tq1_trit(b.qh[m], n) - 1) * d;
    }
}

static void deq_tq2_0(const uint8_t *src, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        gm_block_tq2_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = gm_f16_to_f32(b.d);
        for (int c = 0; c < 2; c++)
            for (int s = 0; s < 4; s++)
                for (int m = 0; m < 32; m++)
                    *y++ = (float)(((b.qs[32 * c + m] >> (2 * s)) & 3) - 1) * d;
    }
}

/* ---- dispatch -------------------------------------------------------------------------------- */

/* Indexed by gm_type id. For plain scalar types the "block" is one element. */
static const deq_fn k_deq[GM_TYPE_COUNT] = {
    [GM_TYPE_F32] = deq_f32,         [GM_TYPE_F16] = deq_f16,
    [GM_TYPE_BF16] = deq_bf16,       [GM_TYPE_Q4_0] = deq_q4_0,
    [GM_TYPE_Q4_1] = deq_q4_1,       [GM_TYPE_Q5_0] = deq_q5_0,
    [GM_TYPE_Q5_1] = deq_q5_1,       [GM_TYPE_Q8_0] = deq_q8_0,
    [GM_TYPE_Q8_1] = deq_q8_1,       [GM_TYPE_Q2_K] = deq_q2_K,
    [GM_TYPE_Q3_K] = deq_q3_K,       [GM_TYPE_Q4_K] = deq_q4_K,
    [GM_TYPE_Q5_K] = deq_q5_K,       [GM_TYPE_Q6_K] = deq_q6_K,
    [GM_TYPE_Q8_K] = deq_q8_K,       [GM_TYPE_IQ2_XXS] = deq_iq2_xxs,
    [GM_TYPE_IQ2_XS] = deq_iq2_xs,   [GM_TYPE_IQ2_S] = deq_iq2_s,
    [GM_TYPE_IQ3_XXS] = deq_iq3_xxs, [GM_TYPE_IQ3_S] = deq_iq3_s,
    [GM_TYPE_IQ1_S] = deq_iq1_s,     [GM_TYPE_IQ1_M] = deq_iq1_m,
    [GM_TYPE_IQ4_NL] = deq_iq4_nl,   [GM_TYPE_IQ4_XS] = deq_iq4_xs,
    [GM_TYPE_TQ1_0] = deq_tq1_0,     [GM_TYPE_TQ2_0] = deq_tq2_0,
    [GM_TYPE_MXFP4] = deq_mxfp4,
};

bool gm_dequant_supported(uint32_t type)
{
    return type < GM_TYPE_COUNT && k_deq[type] != NULL && gm_type_get(type) != NULL;
}

int gm_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n_elems)
{
    if (!gm_dequant_supported(type))
        return GM_EUNSUPPORTED;
    const gm_type_info *ti = gm_type_get(type);
    if (n_elems % ti->block_elems != 0)
        return GM_EINVAL;
    if (n_elems == 0)
        return 0;
    if (!src || !dst)
        return GM_EINVAL;
    k_deq[type]((const uint8_t *)src, dst, n_elems / ti->block_elems);
    return 0;
}
