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

/* ---- dispatch ---------------------------------------------------------------------------- */

typedef struct dot_entry {
    gm_dot_fn fn;
    uint32_t act_type;
} dot_entry;

static const dot_entry k_dot[GM_TYPE_COUNT] = {
    [GM_TYPE_Q8_0] = {dot_q8_0, GM_TYPE_Q8_0},   [GM_TYPE_MXFP4] = {dot_mxfp4, GM_TYPE_Q8_0},
    [GM_TYPE_Q2_K] = {dot_q2_K, GM_TYPE_Q8_K},   [GM_TYPE_Q3_K] = {dot_q3_K, GM_TYPE_Q8_K},
    [GM_TYPE_Q4_K] = {dot_q4_K, GM_TYPE_Q8_K},   [GM_TYPE_Q5_K] = {dot_q5_K, GM_TYPE_Q8_K},
    [GM_TYPE_Q6_K] = {dot_q6_K, GM_TYPE_Q8_K},   [GM_TYPE_IQ4_XS] = {dot_iq4_xs, GM_TYPE_Q8_K},
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
    else
        quantize_q8_K(x, dst, n / qk);
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
