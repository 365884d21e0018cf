/* Scalar reference activation quantizers and fused dot products (see dot.h).
 *
 * Each dot product sums integer products inside a block (or sub-block) and applies the block's
 * float scales once; products of 8-bit values over a 256-element block stay far inside int32. */
#include "kernels/dot.h"

#include <math.h>
#include <string.h>

#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"

/* Round to nearest, ties to even (as ggml's nearest_int), for |v| < 2^22; NaN gives 0. */
static int round_even(float v)
{
    if (!(v == v))
        return 0;
    if (v > 4194303.0f)
        v = 4194303.0f;
    if (v < -4194303.0f)
        v = -4194303.0f;
    /* adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits */
    const float biased = v + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (int)(bits & 0x007fffffu) - 0x00400000;
}

/* Round half away from zero (roundf) into [-127, 127]; NaN gives 0. */
static int8_t round_away_i8(float v)
{
    if (!(v == v))
        return 0;
    if (v > 127.0f)
        return 127;
    if (v < -127.0f)
        return -127;
    return (int8_t)roundf(v);
}

/* ---- activation quantizers ---------------------------------------------------------------- */

static void quantize_q8_0(const float *x, uint8_t *dst, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += GM_QK8_0) {
        gm_block_q8_0 b;
        float amax = 0.0f;
        for (int j = 0; j < GM_QK8_0; j++) {
            const float a = fabsf(x[j]);
            if (a > amax)
                amax = a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = gm_f32_to_f16(d);
        for (int j = 0; j < GM_QK8_0; j++)
            b.qs[j] = round_away_i8(x[j] * id);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

static void quantize_q8_K(const float *x, uint8_t *dst, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += GM_QK_K) {
        gm_block_q8_K b;
        memset(&b, 0, sizeof b);
        float amax = 0.0f, max = 0.0f; /* the element of largest magnitude, with its sign */
        for (int j = 0; j < GM_QK_K; j++) {
            const float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        if (amax != 0.0f) {
            /* the largest element maps to -127 (its sign flipped into the scale), so the
             * full int8 range [-127, 127] is used whichever its sign */
            const float iscale = -127.0f / max;
            for (int j = 0; j < GM_QK_K; j++) {
                int v = round_even(iscale * x[j]);
                b.qs[j] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
            for (int g = 0; g < GM_QK_K / 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += b.qs[16 * g + j];
                b.bsums[g] = (int16_t)s;
            }
            b.d = 1.0f / iscale;
        }
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- dot products with Q8_0 activations ------------------------------------------------- */

static float dot_q8_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK8_0; i++) {
        gm_block_q8_0 bw, ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK8_0; j++)
            isum += bw.qs[j] * ba.qs[j];
        sum += (float)isum * (gm_f16_to_f32(bw.d) * gm_f16_to_f32(ba.d));
    }
    return sum;
}

static float dot_mxfp4(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_MXFP4; i++) {
        gm_block_mxfp4 bw;
        gm_block_q8_0 ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK_MXFP4 / 2; j++) {
            isum += gm_kvalues_mxfp4[bw.qs[j] & 0x0f] * ba.qs[j];
            isum += gm_kvalues_mxfp4[bw.qs[j] >> 4] * ba.qs[j + GM_QK_MXFP4 / 2];
        }
        sum += (float)isum * (gm_e8m0_to_f32_half(bw.e) * gm_f16_to_f32(ba.d));
    }
    return sum;
}

/* ---- dot products with Q8_K activations ------------------------------------------------- */

static void load_q8_K(const uint8_t *a, uint64_t i, gm_block_q8_K *b)
{
    memcpy(b, a + i * sizeof *b, sizeof *b);
}

static float dot_q2_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_q2_K bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < GM_QK_K / 16; g++) { /* 16-element group g uses scales[g] */
            int32_t gs = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * g + k;
                const int q = (bw.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                gs += q * ba.qs[e];
            }
            isum += (bw.scales[g] & 0x0f) * gs;
            msum += (bw.scales[g] >> 4) * ba.bsums[g];
        }
        sum += ba.d * gm_f16_to_f32(bw.d) * (float)isum -
               ba.d * gm_f16_to_f32(bw.dmin) * (float)msum;
    }
    return sum;
}

static float dot_q3_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_q3_K bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t isum = 0;
        for (int g = 0; g < GM_QK_K / 16; g++) {
            const int sc = gm_q3_K_scale(bw.scales, g);
            int32_t gs = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * g + k;
                const int q = (bw.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                const int h = (bw.hmask[e % 32] >> (e / 32)) & 1;
                gs += (q - (h ? 0 : 4)) * ba.qs[e];
            }
            isum += sc * gs;
        }
        sum += ba.d * gm_f16_to_f32(bw.d) * (float)isum;
    }
    return sum;
}

static float dot_q4_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_q4_K bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            gm_q4_K_scale_min(sb, bw.scales, &sc, &m);
            const uint8_t *q = bw.qs + (sb / 2) * 32;
            const int shift = 4 * (sb & 1);
            int32_t s = 0;
            for (int l = 0; l < 32; l++)
                s += ((q[l] >> shift) & 0x0f) * ba.qs[32 * sb + l];
            isum += sc * s;
            msum += m * (ba.bsums[2 * sb] + ba.bsums[2 * sb + 1]);
        }
        sum += ba.d * gm_f16_to_f32(bw.d) * (float)isum -
               ba.d * gm_f16_to_f32(bw.dmin) * (float)msum;
    }
    return sum;
}

static float dot_q5_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_q5_K bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            gm_q4_K_scale_min(sb, bw.scales, &sc, &m);
            const uint8_t *q = bw.qs + (sb / 2) * 32;
            const int shift = 4 * (sb & 1);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0x0f) | (((bw.qh[l] >> sb) & 1) << 4);
                s += v * ba.qs[32 * sb + l];
            }
            isum += sc * s;
            msum += m * (ba.bsums[2 * sb] + ba.bsums[2 * sb + 1]);
        }
        sum += ba.d * gm_f16_to_f32(bw.d) * (float)isum -
               ba.d * gm_f16_to_f32(bw.dmin) * (float)msum;
    }
    return sum;
}

static float dot_q6_K(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_q6_K bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t isum = 0;
        for (int g = 0; g < GM_QK_K / 16; g++) {
            int32_t gs = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * g + k, c = e / 128, r = e % 128;
                const int lo = (bw.ql[c * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
                const int hi = (bw.qh[c * 32 + r % 32] >> (2 * (r / 32))) & 3;
                gs += ((lo | (hi << 4)) - 32) * ba.qs[e];
            }
            isum += bw.scales[g] * gs;
        }
        sum += ba.d * gm_f16_to_f32(bw.d) * (float)isum;
    }
    return sum;
}

static float dot_iq4_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq4_xs bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t isum = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int ls = ((bw.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                           (((bw.scales_h >> (2 * ib)) & 3) << 4);
            const uint8_t *q = bw.qs + 16 * ib;
            const int8_t *y = ba.qs + 32 * ib;
            int32_t s = 0;
            for (int j = 0; j < 16; j++) {
                s += gm_kvalues_iq4nl[q[j] & 0x0f] * y[j];
                s += gm_kvalues_iq4nl[q[j] >> 4] * y[j + 16];
            }
            isum += (ls - 32) * s;
        }
        sum += ba.d * gm_f16_to_f32(bw.d) * (float)isum;
    }
    return sum;
}

/* ---- more dot products with Q8_0 activations --------------------------------------------- */

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Sum of the 32 activation codes of a Q8_0 block: the minimum terms of Q4_1 and Q5_1 need it
 * (ggml stores it rounded to f16 in a Q8_1 block; summing exactly here is more accurate and
 * saves a third activation format). */
static int32_t q8_0_sum(const gm_block_q8_0 *b)
{
    int32_t s = 0;
    for (int j = 0; j < GM_QK8_0; j++)
        s += b->qs[j];
    return s;
}

static float dot_q4_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK4_0; i++) {
        gm_block_q4_0 bw;
        gm_block_q8_0 ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK4_0 / 2; j++) {
            isum += ((bw.qs[j] & 0x0f) - 8) * ba.qs[j];
            isum += ((bw.qs[j] >> 4) - 8) * ba.qs[j + GM_QK4_0 / 2];
        }
        sum += (float)isum * (gm_f16_to_f32(bw.d) * gm_f16_to_f32(ba.d));
    }
    return sum;
}

static float dot_q4_1(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK4_1; i++) {
        gm_block_q4_1 bw;
        gm_block_q8_0 ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK4_1 / 2; j++) {
            isum += (bw.qs[j] & 0x0f) * ba.qs[j];
            isum += (bw.qs[j] >> 4) * ba.qs[j + GM_QK4_1 / 2];
        }
        const float da = gm_f16_to_f32(ba.d);
        sum += (float)isum * (gm_f16_to_f32(bw.d) * da) +
               gm_f16_to_f32(bw.m) * (da * (float)q8_0_sum(&ba));
    }
    return sum;
}

static float dot_q5_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK5_0; i++) {
        gm_block_q5_0 bw;
        gm_block_q8_0 ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        const uint32_t qh = load_u32le(bw.qh);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK5_0 / 2; j++) {
            const int q0 = (bw.qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (bw.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            isum += (q0 - 16) * ba.qs[j] + (q1 - 16) * ba.qs[j + GM_QK5_0 / 2];
        }
        sum += (float)isum * (gm_f16_to_f32(bw.d) * gm_f16_to_f32(ba.d));
    }
    return sum;
}

static float dot_q5_1(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK5_1; i++) {
        gm_block_q5_1 bw;
        gm_block_q8_0 ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        const uint32_t qh = load_u32le(bw.qh);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK5_1 / 2; j++) {
            const int q0 = (bw.qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (bw.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            isum += q0 * ba.qs[j] + q1 * ba.qs[j + GM_QK5_1 / 2];
        }
        const float da = gm_f16_to_f32(ba.d);
        sum += (float)isum * (gm_f16_to_f32(bw.d) * da) +
               gm_f16_to_f32(bw.m) * (da * (float)q8_0_sum(&ba));
    }
    return sum;
}

static float dot_iq4_nl(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK4_NL; i++) {
        gm_block_iq4_nl bw;
        gm_block_q8_0 ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        memcpy(&ba, a + i * sizeof ba, sizeof ba);
        int32_t isum = 0;
        for (int j = 0; j < GM_QK4_NL / 2; j++) {
            isum += gm_kvalues_iq4nl[bw.qs[j] & 0x0f] * ba.qs[j];
            isum += gm_kvalues_iq4nl[bw.qs[j] >> 4] * ba.qs[j + GM_QK4_NL / 2];
        }
        sum += (float)isum * (gm_f16_to_f32(bw.d) * gm_f16_to_f32(ba.d));
    }
    return sum;
}

/* ---- i-quants and ternary types with Q8_K activations ------------------------------------ */

/* Signed dot of 8 grid magnitudes with 8 activation codes; bit j of signs negates element j. */
static int32_t grid_dot8(const uint8_t *grid, uint8_t signs, const int8_t *y)
{
    int32_t s = 0;
    for (int j = 0; j < 8; j++)
        s += (signs & gm_kmask_iq2xs[j]) ? -(grid[j] * y[j]) : grid[j] * y[j];
    return s;
}

static float dot_iq2_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq2_xxs bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t bsum = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            uint8_t idx[4];
            memcpy(idx, &bw.qs[4 * ib], 4);
            const uint32_t aux = (uint32_t)bw.qs[4 * ib + 2] | (uint32_t)bw.qs[4 * ib + 3] << 16;
            int32_t s = 0;
            for (int l = 0; l < 4; l++)
                s += grid_dot8(gm_iq2xxs_grid[idx[l]], gm_ksigns_iq2xs[(aux >> (7 * l)) & 127],
                               ba.qs + 32 * ib + 8 * l);
            bsum += s * (int32_t)(2 * (aux >> 28) + 1);
        }
        /* block scale d * (2s + 1) / 8 */
        sum += gm_f16_to_f32(bw.d) * ba.d * (float)bsum * 0.125f;
    }
    return sum;
}

static float dot_iq2_xs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq2_xs bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t bsum = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) { /* 16 elements per 4-bit scale */
                int32_t s = 0;
                for (int l = 2 * h; l < 2 * h + 2; l++) {
                    const uint16_t q = bw.qs[4 * ib + l];
                    s += grid_dot8(gm_iq2xs_grid[q & 511], gm_ksigns_iq2xs[q >> 9],
                                   ba.qs + 32 * ib + 8 * l);
                }
                bsum += s * (2 * ((bw.scales[ib] >> (4 * h)) & 0x0f) + 1);
            }
        }
        sum += gm_f16_to_f32(bw.d) * ba.d * (float)bsum * 0.125f;
    }
    return sum;
}

static float dot_iq2_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq2_s bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        const uint8_t *signs = bw.qs + GM_QK_K / 8;
        int32_t bsum = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                int32_t s = 0;
                for (int l = 2 * h; l < 2 * h + 2; l++) {
                    const int idx = bw.qs[4 * ib + l] | (((bw.qh[ib] >> (2 * l)) & 3) << 8);
                    s += grid_dot8(gm_iq2s_grid[idx], signs[4 * ib + l], ba.qs + 32 * ib + 8 * l);
                }
                bsum += s * (2 * ((bw.scales[ib] >> (4 * h)) & 0x0f) + 1);
            }
        }
        sum += gm_f16_to_f32(bw.d) * ba.d * (float)bsum * 0.125f;
    }
    return sum;
}

static float dot_iq3_xxs(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq3_xxs bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        const uint8_t *qs = bw.qs, *scales_signs = bw.qs + GM_QK_K / 4;
        int32_t bsum = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint32_t aux = load_u32le(scales_signs + 4 * ib);
            int32_t s = 0;
            for (int l = 0; l < 4; l++) {
                uint8_t grid[8];
                memcpy(grid, gm_iq3xxs_grid[qs[8 * ib + 2 * l]], 4);
                memcpy(grid + 4, gm_iq3xxs_grid[qs[8 * ib + 2 * l + 1]], 4);
                s += grid_dot8(grid, gm_ksigns_iq2xs[(aux >> (7 * l)) & 127],
                               ba.qs + 32 * ib + 8 * l);
            }
            bsum += s * (int32_t)(2 * (aux >> 28) + 1);
        }
        /* block scale d * (2s + 1) / 4 */
        sum += gm_f16_to_f32(bw.d) * ba.d * (float)bsum * 0.25f;
    }
    return sum;
}

static float dot_iq3_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq3_s bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t bsum = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            int32_t s = 0;
            for (int l = 0; l < 4; l++) {
                uint8_t grid[8];
                for (int h = 0; h < 2; h++) {
                    const int k = 8 * ib + 2 * l + h;
                    const int idx = bw.qs[k] | (((bw.qh[ib] >> (2 * l + h)) & 1) << 8);
                    memcpy(grid + 4 * h, gm_iq3s_grid[idx], 4);
                }
                s += grid_dot8(grid, bw.signs[4 * ib + l], ba.qs + 32 * ib + 8 * l);
            }
            bsum += s * (2 * ((bw.scales[ib / 2] >> (4 * (ib % 2))) & 0x0f) + 1);
        }
        sum += gm_f16_to_f32(bw.d) * ba.d * (float)bsum;
    }
    return sum;
}

static int32_t grid1_dot8(const int8_t *grid, const int8_t *y)
{
    int32_t s = 0;
    for (int j = 0; j < 8; j++)
        s += grid[j] * y[j];
    return s;
}

/* IQ1 elements are dl * (grid + delta): the grid part is an integer dot, the delta part the
 * scaled sum of the activation codes (bsums), combined once per block in float. */
static float dot_iq1_s(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq1_s bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        int32_t sumi = 0, sumd = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const uint16_t qh = bw.qh[ib];
            const int32_t ls = 2 * ((qh >> 12) & 7) + 1;
            int32_t s = 0;
            for (int l = 0; l < 4; l++) {
                const int idx = bw.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                s += grid1_dot8(gm_iq1s_grid[idx], ba.qs + 32 * ib + 8 * l);
            }
            sumi += ls * s;
            const int32_t ys = ba.bsums[2 * ib] + ba.bsums[2 * ib + 1];
            sumd += (qh & 0x8000) ? -ls * ys : ls * ys;
        }
        sum += gm_f16_to_f32(bw.d) * ba.d * ((float)sumi + GM_IQ1S_DELTA * (float)sumd);
    }
    return sum;
}

static float dot_iq1_m(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_iq1_m bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        uint16_t sc[4];
        for (int k = 0; k < 4; k++)
            sc[k] = (uint16_t)(bw.scales[2 * k] | bw.scales[2 * k + 1] << 8);
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                          ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        int32_t sumi = 0, sumd = 0;
        for (int ib = 0; ib < GM_QK_K / 32; ib++) {
            const int sshift = 6 * (ib % 2);
            const int32_t ls[2] = {2 * ((sc[ib / 2] >> sshift) & 7) + 1,
                                   2 * ((sc[ib / 2] >> (sshift + 3)) & 7) + 1};
            for (int l = 0; l < 4; l++) {
                const uint8_t qh = (uint8_t)(bw.qh[2 * ib + l / 2] >> (4 * (l % 2)));
                const int idx = bw.qs[4 * ib + l] | ((qh & 7) << 8);
                const int8_t *y = ba.qs + 32 * ib + 8 * l;
                int32_t ys = 0;
                for (int j = 0; j < 8; j++)
                    ys += y[j];
                sumi += ls[l / 2] * grid1_dot8(gm_iq1s_grid[idx], y);
                sumd += (qh & 8) ? -ls[l / 2] * ys : ls[l / 2] * ys;
            }
        }
        sum += gm_f16_to_f32(dbits) * ba.d * ((float)sumi + GM_IQ1M_DELTA * (float)sumd);
    }
    return sum;
}

/* Trit n (0 = most significant) of a TQ1_0 byte (see dequant_ref.c). */
static int tq1_trit(uint8_t byte, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(byte * pow3[n]);
    return (int)(((uint16_t)q * 3) >> 8);
}

static float dot_tq1_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_tq1_0 bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        const int8_t *y = ba.qs;
        int32_t isum = 0;
        /* element order as the decoder: 5 x 32 from qs[0..32), 5 x 16 from qs[32..48),
         * 4 x 4 from qh */
        for (int t = 0; t < 5; t++)
            for (int m = 0; m < 32; m++)
                isum += (tq1_trit(bw.qs[m], t) - 1) * *y++;
        for (int t = 0; t < 5; t++)
            for (int m = 0; m < 16; m++)
                isum += (tq1_trit(bw.qs[32 + m], t) - 1) * *y++;
        for (int t = 0; t < 4; t++)
            for (int m = 0; m < 4; m++)
                isum += (tq1_trit(bw.qh[m], t) - 1) * *y++;
        sum += (float)isum * (gm_f16_to_f32(bw.d) * ba.d);
    }
    return sum;
}

static float dot_tq2_0(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n / GM_QK_K; i++) {
        gm_block_tq2_0 bw;
        gm_block_q8_K ba;
        memcpy(&bw, w + i * sizeof bw, sizeof bw);
        load_q8_K(a, i, &ba);
        const int8_t *y = ba.qs;
        int32_t isum = 0;
        /* element 128 c + 32 s + m is bits 2s..2s+1 of byte 32 c + m, minus 1. The sum is
         * taken as sum(q y) - sum(y): gcc 12 with -O2 -march=native (AVX-512) vectorises the
         * direct form sum((q - 1) y) wrongly (checked by test_kernels_dot). */
        int32_t ysum = 0;
        for (int c = 0; c < 2; c++)
            for (int s = 0; s < 4; s++)
                for (int m = 0; m < 32; m++) {
                    int32_t yv = y[128 * c + 32 * s + m];
                    isum += (int32_t)((bw.qs[32 * c + m] >> (2 * s)) & 3) * yv;
                    ysum += yv;
                }
        isum -= ysum;
        sum += (float)isum * (gm_f16_to_f32(bw.d) * ba.d);
    }
    return sum;
}

/* ---- float weights times float32 activations -------------------------------------------- */

/* The activations stay float32 (no 16-bit rounding) and the sum is accumulated in double, so
 * this reference is accurate to float32 whatever n; the SIMD kernels accumulate float32 in
 * many lanes and are checked against it within a named budget. */
static float dot_f32(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    double sum = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        float x, y;
        memcpy(&x, w + 4 * i, 4);
        memcpy(&y, a + 4 * i, 4);
        sum += (double)x * (double)y;
    }
    return (float)sum;
}

static float dot_f16(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    double sum = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        float y;
        memcpy(&h, w + 2 * i, 2);
        memcpy(&y, a + 4 * i, 4);
        sum += (double)gm_f16_to_f32(h) * (double)y;
    }
    return (float)sum;
}

static float dot_bf16(const void *wv, const void *av, uint64_t n)
{
    const uint8_t *w = wv, *a = av;
    double sum = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        float y;
        memcpy(&h, w + 2 * i, 2);
        memcpy(&y, a + 4 * i, 4);
        sum += (double)gm_bf16_to_f32(h) * (double)y;
    }
    return (float)sum;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

typedef struct dot_entry {
    gm_dot_fn fn;
    uint32_t act_type;
} dot_entry;

static const dot_entry k_dot[GM_TYPE_COUNT] = {
    [GM_TYPE_F32] = {dot_f32, GM_TYPE_F32},         [GM_TYPE_F16] = {dot_f16, GM_TYPE_F32},
    [GM_TYPE_BF16] = {dot_bf16, GM_TYPE_F32},       [GM_TYPE_Q8_0] = {dot_q8_0, GM_TYPE_Q8_0},
    [GM_TYPE_Q4_0] = {dot_q4_0, GM_TYPE_Q8_0},      [GM_TYPE_Q4_1] = {dot_q4_1, GM_TYPE_Q8_0},
    [GM_TYPE_Q5_0] = {dot_q5_0, GM_TYPE_Q8_0},      [GM_TYPE_Q5_1] = {dot_q5_1, GM_TYPE_Q8_0},
    [GM_TYPE_IQ4_NL] = {dot_iq4_nl, GM_TYPE_Q8_0},  [GM_TYPE_MXFP4] = {dot_mxfp4, GM_TYPE_Q8_0},
    [GM_TYPE_Q2_K] = {dot_q2_K, GM_TYPE_Q8_K},      [GM_TYPE_Q3_K] = {dot_q3_K, GM_TYPE_Q8_K},
    [GM_TYPE_Q4_K] = {dot_q4_K, GM_TYPE_Q8_K},      [GM_TYPE_Q5_K] = {dot_q5_K, GM_TYPE_Q8_K},
    [GM_TYPE_Q6_K] = {dot_q6_K, GM_TYPE_Q8_K},      [GM_TYPE_IQ4_XS] = {dot_iq4_xs, GM_TYPE_Q8_K},
    [GM_TYPE_IQ2_XXS] = {dot_iq2_xxs, GM_TYPE_Q8_K}, [GM_TYPE_IQ2_XS] = {dot_iq2_xs, GM_TYPE_Q8_K},
    [GM_TYPE_IQ2_S] = {dot_iq2_s, GM_TYPE_Q8_K},    [GM_TYPE_IQ3_XXS] = {dot_iq3_xxs, GM_TYPE_Q8_K},
    [GM_TYPE_IQ3_S] = {dot_iq3_s, GM_TYPE_Q8_K},    [GM_TYPE_IQ1_S] = {dot_iq1_s, GM_TYPE_Q8_K},
    [GM_TYPE_IQ1_M] = {dot_iq1_m, GM_TYPE_Q8_K},    [GM_TYPE_TQ1_0] = {dot_tq1_0, GM_TYPE_Q8_K},
    [GM_TYPE_TQ2_0] = {dot_tq2_0, GM_TYPE_Q8_K},
};

int gm_dot_act_type(uint32_t wtype)
{
    if (wtype >= GM_TYPE_COUNT || !k_dot[wtype].fn)
        return GM_EUNSUPPORTED;
    return (int)k_dot[wtype].act_type;
}

gm_dot_fn gm_dot_ref_fn(uint32_t wtype)
{
    return wtype < GM_TYPE_COUNT ? k_dot[wtype].fn : NULL;
}

int gm_quantize_act(uint32_t act_type, const float *x, void *dst, uint64_t n)
{
    uint32_t qk;
    if (act_type == GM_TYPE_Q8_0)
        qk = GM_QK8_0;
    else if (act_type == GM_TYPE_Q8_K)
        qk = GM_QK_K;
    else if (act_type == GM_TYPE_F32)
        qk = 1;
    else
        return GM_EUNSUPPORTED;
    if (n % qk != 0)
        return GM_EINVAL;
    if (n == 0)
        return 0;
    if (!x || !dst)
        return GM_EINVAL;
    if (act_type == GM_TYPE_Q8_0)
        quantize_q8_0(x, dst, n / qk);
    else if (act_type == GM_TYPE_Q8_K)
        quantize_q8_K(x, dst, n / qk);
    else
        memmove(dst, x, n * sizeof(float));
    return 0;
}

int gm_dot_row(uint32_t wtype, const void *w, const void *a, uint64_t n, float *out)
{
    gm_dot_fn fn = gm_dot_ref_fn(wtype);
    if (!fn)
        return GM_EUNSUPPORTED;
    const gm_type_info *wi = gm_type_get(wtype);
    const gm_type_info *ai = gm_type_get(k_dot[wtype].act_type);
    if (!out || n % wi->block_elems != 0 || n % ai->block_elems != 0)
        return GM_EINVAL;
    if (n > 0 && (!w || !a))
        return GM_EINVAL;
    *out = n > 0 ? fn(w, a, n) : 0.0f;
    return 0;
}
