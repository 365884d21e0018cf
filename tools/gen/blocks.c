#include "blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/types.h"

/* Smallest super-block scale d we aim for: twice the smallest normal half (2^-14), so that the
 * +-15% per-block jitter keeps every d a normal number. */
#define D_MIN (1.0f / 8192.0f)
#define MAX_VB_BYTES 256 /* largest block handled (Q6_K: 210; 32 x F32: 128) */
#define SCALAR_GROUP 32  /* elements per "block" of F32/F16/BF16 */

/* The 256 x 8 magnitudes of ggml's IQ2_XXS grid (iq2xxs_grid) take the values 8, 25 and 43,
 * 1127, 556 and 365 times: the mean square of a grid value under a uniform index is this. */
#define IQ2XXS_GRID_MEAN_SQ (1094513.0 / 2048.0)

/* MXFP4 (e2m1) magnitudes in ggml's doubled units; value = kval * 2^(e - 128). */
static const float k_mxfp4_mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};

struct gm_gen_pool {
    uint32_t type;
    float sigma;
    uint32_t vb_bytes;  /* bytes of one block (or of one group of 32 scalars) */
    uint64_t n_vb;      /* blocks in the pool */
    uint8_t *data;      /* n_vb * vb_bytes */
};

/* ---- small deterministic helpers ----------------------------------------------------------- */

uint64_t gm_gen_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t gm_gen_hash_str(uint64_t seed, const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull ^ gm_gen_mix64(seed); /* FNV-1a, then mixed */
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    return gm_gen_mix64(h);
}

void gm_gen_rng_seed(gm_gen_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ull;
        r->s[i] = gm_gen_mix64(x);
    }
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t gm_gen_rng_next(gm_gen_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float gm_gen_rng_unit(gm_gen_rng *r) { return (float)(gm_gen_rng_next(r) >> 40) * 0x1.0p-24f; }

/* Integer in [0, n). */
static uint32_t rng_below(gm_gen_rng *r, uint32_t n)
{
    return (uint32_t)(((gm_gen_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

float gm_gen_rng_gauss(gm_gen_rng *r)
{
    /* Sum of four uniforms (Irwin-Hall), rescaled to unit variance: bell-shaped, no libm, the
     * same on every machine. */
    uint64_t x = gm_gen_rng_next(r);
    uint32_t s = (uint32_t)(x & 0xffff) + (uint32_t)((x >> 16) & 0xffff) +
                 (uint32_t)((x >> 32) & 0xffff) + (uint32_t)(x >> 48);
    return ((float)s - 2.0f * 65535.0f) * (1.7320508f / 65536.0f);
}

uint16_t gm_gen_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0));
    if (mag >= 0x477ff000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (mag < 0x38800000u) { /* below 2^-14: subnormal half or zero */
        if (mag < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = mag >> 23;
        uint32_t m = (mag & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((mag >> 13) - (112u << 10));
    uint32_t rem = mag & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

float gm_gen_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1f;
    uint32_t m = h & 0x3ffu;
    uint32_t x;
    if (e == 0) {
        if (m == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            e = 113;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            x = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* The half nearest to v with only `bits` significant bits (so that small integer multiples of
 * it, such as 7.5 * d, are exact halves too). */
static uint16_t f16_coarse(float v, int bits)
{
    uint16_t h = gm_gen_f32_to_f16(v);
    if ((h & 0x7c00u) == 0) /* subnormal: leave as is */
        return h;
    int drop = 11 - bits;
    uint16_t mask = (uint16_t)((1u << drop) - 1);
    uint16_t r = (uint16_t)((h + (1u << (drop - 1))) & ~mask);
    return r;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- types --------------------------------------------------------------------------------- */

static const uint32_t k_supported[] = {
    GM_TYPE_F32,  GM_TYPE_F16,  GM_TYPE_BF16, GM_TYPE_Q4_0,    GM_TYPE_Q8_0, GM_TYPE_Q2_K,
    GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K, GM_TYPE_IQ2_XXS, GM_TYPE_MXFP4,
};

bool gm_gen_type_supported(uint32_t type)
{
    for (size_t i = 0; i < sizeof k_supported / sizeof k_supported[0]; i++)
        if (k_supported[i] == type)
            return true;
    return false;
}

const char *gm_gen_supported_types(void)
{
    return "F32, F16, BF16, Q4_0, Q8_0, Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, MXFP4";
}

static uint32_t vb_bytes_of(uint32_t type)
{
    switch (type) {
    case GM_TYPE_F32: return SCALAR_GROUP * 4;
    case GM_TYPE_F16:
    case GM_TYPE_BF16: return SCALAR_GROUP * 2;
    default: return gm_type_get(type)->block_bytes;
    }
}

/* Xors n bytes (a multiple of 8) with the byte pattern pat where mask is all ones. */
static inline void xor_bytes(uint8_t *p, int n, uint8_t pat, uint64_t mask)
{
    uint64_t mm = 0x0101010101010101ull * pat & mask;
    for (int i = 0; i < n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        x ^= mm;
        memcpy(p + i, &x, 8);
    }
}

/* Negates n int8 values (n a multiple of 8) where mask is all ones: -x = ~x + 1 in each byte,
 * without carries between bytes (the low 7 bits are added, the top bit fixed with an xor). */
static inline void neg_i8(uint8_t *p, int n, uint64_t mask)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full, one = 0x0101010101010101ull;
    for (int i = 0; i < n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t c = ~x;
        c = ((c & lo7) + one) ^ (c & ~lo7);
        x = (x & ~mask) | (c & mask);
        memcpy(p + i, &x, 8);
    }
}

/* Exact negation of one block (every dequantized value changes sign) where mask is all ones,
 * nothing where it is zero: branch-free, as the choice is a coin flip per block. */
static inline void negate_vb(uint32_t type, uint8_t *b, uint64_t mask)
{
    switch (type) {
    case GM_TYPE_F32:
        for (int i = 0; i < SCALAR_GROUP * 4; i += 8) {
            uint64_t x;
            memcpy(&x, b + i, 8);
            x ^= 0x8000000080000000ull & mask;
            memcpy(b + i, &x, 8);
        }
        break;
    case GM_TYPE_F16:
    case GM_TYPE_BF16:
        for (int i = 0; i < SCALAR_GROUP * 2; i += 8) {
            uint64_t x;
            memcpy(&x, b + i, 8);
            x ^= 0x8000800080008000ull & mask;
            memcpy(b + i, &x, 8);
        }
        break;
    case GM_TYPE_Q4_0: /* d * (q - 8): flip the sign of d */
        b[1] ^= (uint8_t)(0x80 & mask);
        break;
    case GM_TYPE_Q8_0: /* symmetric int8 quants in [-127, 127] */
        neg_i8(b + 2, 32, mask);
        break;
    case GM_TYPE_Q2_K: /* q -> 3 - q, with dmin * m = 1.5 * d * sc */
        xor_bytes(b + 16, 64, 0xff, mask);
        break;
    case GM_TYPE_Q4_K: /* q -> 15 - q, with dmin * m = 7.5 * d * sc */
        xor_bytes(b + 16, 128, 0xff, mask);
        break;
    case GM_TYPE_Q5_K: /* q -> 31 - q (qh and qs), with dmin * m = 15.5 * d * sc */
        xor_bytes(b + 16, 160, 0xff, mask);
        break;
    case GM_TYPE_Q6_K: /* d * sc * (q - 32): negate the int8 scales (|sc| <= 127) */
        neg_i8(b + 192, 16, mask);
        break;
    case GM_TYPE_IQ2_XXS:
        /* Each 7-bit sign index i encodes the 8 signs i | parity(i) << 7; i ^ 127 encodes the
         * complement (all eight signs flipped). Bits 28..31 (the scale) stay. */
        for (int g = 0; g < 8; g += 2) {
            uint64_t x;
            memcpy(&x, b + 2 + 8 * g + 4, 8); /* sign word of group g, grid bytes of g + 1 */
            x ^= 0x000000000fffffffull & mask;
            memcpy(b + 2 + 8 * g + 4, &x, 8);
            memcpy(&x, b + 2 + 8 * (g + 1), 8); /* grid bytes and sign word of group g + 1 */
            x ^= 0x0fffffff00000000ull & mask;
            memcpy(b + 2 + 8 * (g + 1), &x, 8);
        }
        break;
    case GM_TYPE_MXFP4: /* bit 3 of each e2m1 nibble is its sign */
        xor_bytes(b + 1, 16, 0x88, mask);
        break;
    default:
        break;
    }
}

/* ---- level draws --------------------------------------------------------------------------- */

/* Symmetric integer level round(s * g) clamped to [-m, m]. */
static inline int lvl_int(gm_gen_rng *r, float s, int m)
{
    float x = s * gm_gen_rng_gauss(r);
    int v = (int)(x + (x >= 0 ? 0.5f : -0.5f));
    return v < -m ? -m : (v > m ? m : v);
}

/* Unsigned quant q in [0, 2k) whose level q - (k - 0.5) is symmetric: floor(s * g) + k. */
static inline int lvl_half(gm_gen_rng *r, float s, int k)
{
    float x = s * gm_gen_rng_gauss(r);
    int v = (int)floorf(x) + k;
    return v < 0 ? 0 : (v > 2 * k - 1 ? 2 * k - 1 : v);
}

/* Jitter of a block's scale around the pool's: uniform in [0.85, 1.15]. */
static inline float jitter(gm_gen_rng *r) { return 0.85f + 0.3f * gm_gen_rng_unit(r); }
#define JITTER_MEAN_SQ (0.85 * 0.85 + 0.85 * 0.3 + 0.09 / 3.0)

/* Mean square of an integer uniform on [lo, hi]. */
static double uni_mean_sq(int lo, int hi)
{
    double s = 0;
    for (int v = lo; v <= hi; v++)
        s += (double)v * v;
    return s / (hi - lo + 1);
}

/* Picks the largest sub-block scale range [hi/2, hi] (hi from cands, descending) for which
 * d = sigma / (rms(scale * mult) * level_rms) stays >= D_MIN. */
static void pick_scale_range(const int *cands, int n, double mult, double lvl_ms, double sigma,
                             int *lo, int *hi, double *d)
{
    for (int i = 0; i < n; i++) {
        int h = cands[i], l = h / 2;
        double ms = uni_mean_sq(l, h) * mult * mult * lvl_ms * JITTER_MEAN_SQ;
        *lo = l;
        *hi = h;
        *d = sigma / sqrt(ms);
        if (*d >= D_MIN)
            return;
    }
}

/* Mean square of the levels a draw function gives, measured on the pool's own stream. */
typedef struct lvlspec {
    int kind;  /* 0: lvl_int(s, m); 1: lvl_half(s, k) - (k - 0.5) */
    float s;
    int m;
} lvlspec;

static double level_mean_sq(uint64_t seed, lvlspec ls, uint64_t n)
{
    gm_gen_rng r;
    gm_gen_rng_seed(&r, seed);
    double acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        double v = ls.kind == 0 ? lvl_int(&r, ls.s, ls.m)
                                : lvl_half(&r, ls.s, ls.m) - (ls.m - 0.5);
        acc += v * v;
    }
    return acc / (double)n;
}

/* ---- pool builders (one per type) ---------------------------------------------------------- */

typedef struct build {
    uint8_t *data;
    uint64_t n_vb;
    float sigma;
    gm_gen_rng lv;   /* stream of quant levels */
    gm_gen_rng aux;  /* stream of scales, jitter, signs, grid indices */
    uint64_t lv_seed;
} build;

static void build_scalar(build *b, uint32_t type)
{
    uint32_t es = type == GM_TYPE_F32 ? 4 : 2;
    for (uint64_t i = 0; i < b->n_vb * SCALAR_GROUP; i++) {
        float v = b->sigma * gm_gen_rng_gauss(&b->lv);
        uint8_t *p = b->data + i * es;
        if (type == GM_TYPE_F32)
            memcpy(p, &v, 4);
        else
            put16(p, type == GM_TYPE_F16 ? gm_gen_f32_to_f16(v) : f32_to_bf16(v));
    }
}

static void build_q8_0(build *b)
{
    lvlspec ls = {0, 36.0f, 127};
    double ms = level_mean_sq(b->lv_seed, ls, b->n_vb * 32);
    double d0 = b->sigma / sqrt(ms * JITTER_MEAN_SQ);
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * 34;
        put16(p, gm_gen_f32_to_f16((float)(d0 * jitter(&b->aux))));
        for (int j = 0; j < 32; j++)
            p[2 + j] = (uint8_t)(int8_t)lvl_int(&b->lv, ls.s, ls.m);
    }
}

static void build_q4_0(build *b)
{
    lvlspec ls = {0, 2.5f, 7};
    double ms = level_mean_sq(b->lv_seed, ls, b->n_vb * 32);
    double d0 = b->sigma / sqrt(ms * JITTER_MEAN_SQ);
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * 18;
        float d = (float)(d0 * jitter(&b->aux));
        if (gm_gen_rng_next(&b->aux) & 1) /* quantizers give d either sign */
            d = -d;
        put16(p, gm_gen_f32_to_f16(d));
        int q[32];
        for (int j = 0; j < 32; j++)
            q[j] = lvl_int(&b->lv, ls.s, ls.m) + 8; /* 1..15 */
        for (int j = 0; j < 16; j++)
            p[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

/* 6-bit scales and mins of Q4_K/Q5_K, 8 of each, packed into 12 bytes. */
static void pack_scales_k4(uint8_t *q, const int *sc, const int *m)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

static void build_q2_k(build *b)
{
    lvlspec ls = {1, 1.2f, 2}; /* q in 0..3, level q - 1.5 */
    double ms = level_mean_sq(b->lv_seed, ls, b->n_vb * 256);
    static const int cands[] = {15, 7, 3};
    int lo, hi;
    double d0;
    pick_scale_range(cands, 3, 1.0, ms, b->sigma, &lo, &hi, &d0);
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * 84;
        uint16_t dh = f16_coarse((float)(d0 * jitter(&b->aux)), 9);
        uint16_t mh = gm_gen_f32_to_f16(1.5f * gm_gen_f16_to_f32(dh)); /* exact */
        for (int j = 0; j < 16; j++) {
            int sc = lo + (int)rng_below(&b->aux, (uint32_t)(hi - lo + 1));
            p[j] = (uint8_t)(sc | (sc << 4)); /* m = sc: value = d * sc * (q - 1.5) */
        }
        memset(p + 16, 0, 64);
        for (int e = 0; e < 256; e++) {
            int q = lvl_half(&b->lv, ls.s, ls.m);
            int n = e / 128, r = e % 128, j = r / 32, l = r % 32;
            p[16 + 32 * n + l] |= (uint8_t)(q << (2 * j));
        }
        put16(p + 80, dh);
        put16(p + 82, mh);
    }
}

static void build_q45_k(build *b, bool five)
{
    lvlspec ls = five ? (lvlspec){1, 6.0f, 16} : (lvlspec){1, 3.0f, 8};
    double ms = level_mean_sq(b->lv_seed, ls, b->n_vb * 256);
    static const int cands[] = {63, 31, 15, 7};
    int lo, hi;
    double d0;
    pick_scale_range(cands, 4, 1.0, ms, b->sigma, &lo, &hi, &d0);
    uint32_t bb = five ? 176 : 144;
    float center = (float)ls.m - 0.5f; /* 7.5 or 15.5 */
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * bb;
        uint16_t dh = f16_coarse((float)(d0 * jitter(&b->aux)), five ? 6 : 7);
        uint16_t mh = gm_gen_f32_to_f16(center * gm_gen_f16_to_f32(dh)); /* exact */
        put16(p, dh);
        put16(p + 2, mh);
        int sc[8];
        for (int j = 0; j < 8; j++)
            sc[j] = lo + (int)rng_below(&b->aux, (uint32_t)(hi - lo + 1));
        pack_scales_k4(p + 4, sc, sc); /* m = sc: value = d * sc * (q - center) */
        uint8_t *qh = p + 16, *qs = p + (five ? 48 : 16);
        if (five)
            memset(qh, 0, 32);
        memset(qs, 0, 128);
        for (int e = 0; e < 256; e++) {
            int q = lvl_half(&b->lv, ls.s, ls.m);
            int c = e / 64, hi_half = (e % 64) / 32, l = e % 32;
            qs[32 * c + l] |= (uint8_t)((q & 15) << (4 * hi_half));
            if (five && (q & 16))
                qh[l] |= (uint8_t)(1u << (2 * c + hi_half));
        }
    }
}

static void build_q6_k(build *b)
{
    lvlspec ls = {0, 10.0f, 31}; /* q - 32 in [-31, 31] */
    double ms = level_mean_sq(b->lv_seed, ls, b->n_vb * 256);
    static const int cands[] = {127, 63, 31, 15, 7};
    int lo, hi;
    double d0;
    pick_scale_range(cands, 5, 1.0, ms, b->sigma, &lo, &hi, &d0);
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * 210;
        uint8_t *ql = p, *qh = p + 128;
        int8_t *scales = (int8_t *)(p + 192);
        memset(p, 0, 192);
        for (int j = 0; j < 16; j++) {
            int sc = lo + (int)rng_below(&b->aux, (uint32_t)(hi - lo + 1));
            scales[j] = (int8_t)((gm_gen_rng_next(&b->aux) & 1) ? -sc : sc);
        }
        put16(p + 208, gm_gen_f32_to_f16((float)(d0 * jitter(&b->aux))));
        for (int e = 0; e < 256; e++) {
            int q = lvl_int(&b->lv, ls.s, ls.m) + 32; /* 1..63 */
            int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
            int lq = 64 * h + l + (quarter & 1) * 32; /* quarters 1, 3 use ql[l + 32] */
            ql[lq] |= (uint8_t)((q & 15) << ((quarter >> 1) * 4));
            qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * quarter));
        }
    }
}

static void build_iq2_xxs(build *b)
{
    /* value = d * 0.25 * (0.5 + ls) * grid * sign; ls is a 4-bit group scale. */
    static const int cands[] = {15, 11, 7, 3};
    int lo = 7, hi = 15;
    double d0 = 0;
    for (int i = 0; i < 4; i++) {
        hi = cands[i];
        lo = hi / 2;
        double s = 0;
        for (int v = lo; v <= hi; v++)
            s += (0.25 * (0.5 + v)) * (0.25 * (0.5 + v));
        s /= hi - lo + 1;
        d0 = b->sigma / sqrt(s * IQ2XXS_GRID_MEAN_SQ * JITTER_MEAN_SQ);
        if (d0 >= D_MIN)
            break;
    }
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * 66;
        put16(p, gm_gen_f32_to_f16((float)(d0 * jitter(&b->aux))));
        for (int g = 0; g < 8; g++) {
            uint8_t *q = p + 2 + 8 * g;
            uint64_t x = gm_gen_rng_next(&b->lv);
            for (int k = 0; k < 4; k++)
                q[k] = (uint8_t)(x >> (8 * k)); /* grid indices */
            uint32_t ls = (uint32_t)lo + rng_below(&b->aux, (uint32_t)(hi - lo + 1));
            uint32_t aux = (uint32_t)(x >> 32) & 0x0fffffffu; /* 4 x 7-bit sign indices */
            aux |= ls << 28;
            for (int k = 0; k < 4; k++)
                q[4 + k] = (uint8_t)(aux >> (8 * k));
        }
    }
}

/* Index 0..7 of the e2m1 magnitude nearest |x| (midpoints between 0 1 2 3 4 6 8 12), with the
 * sign in bit 3. */
static int mxfp4_nearest(float x)
{
    float a = x < 0 ? -x : x;
    int k = (a > 0.5f) + (a > 1.5f) + (a > 2.5f) + (a > 3.5f) + (a > 5.0f) + (a > 7.0f) +
            (a > 10.0f);
    return k | (x < 0 && k ? 8 : 0);
}

static void build_mxfp4(build *b)
{
    /* The scale is a power of two: pick e so that sigma / 2^(e-128) lies in [2, 4), then find
     * the spread s of the bell curve whose rounded e2m1 values have exactly that rms. */
    int ex;
    frexpf(b->sigma, &ex); /* sigma = f * 2^ex, f in [0.5, 1) */
    int e = 128 + ex - 2;
    if (e < 1)
        e = 1;
    if (e > 254)
        e = 254;
    double unit = ldexp(1.0, e - 128);
    double target = (double)b->sigma / unit;
    enum { NS = 16384 };
    float lo = 0.1f, hi = 12.0f;
    for (int it = 0; it < 24; it++) {
        float mid = 0.5f * (lo + hi);
        gm_gen_rng r;
        gm_gen_rng_seed(&r, b->lv_seed ^ 0x5bd1e995u);
        double acc = 0;
        for (int i = 0; i < NS; i++) {
            int n = mxfp4_nearest(mid * gm_gen_rng_gauss(&r));
            acc += (double)k_mxfp4_mag[n & 7] * k_mxfp4_mag[n & 7];
        }
        if (sqrt(acc / NS) < target)
            lo = mid;
        else
            hi = mid;
    }
    float s = 0.5f * (lo + hi);
    for (uint64_t i = 0; i < b->n_vb; i++) {
        uint8_t *p = b->data + i * 17;
        p[0] = (uint8_t)e;
        int q[32];
        for (int j = 0; j < 32; j++)
            q[j] = mxfp4_nearest(s * gm_gen_rng_gauss(&b->lv));
        for (int j = 0; j < 16; j++)
            p[1 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

/* ---- pool API ------------------------------------------------------------------------------ */

int gm_gen_pool_create(gm_gen_pool **out, uint32_t type, float sigma, uint64_t seed,
                       size_t pool_bytes, gm_err *err)
{
    *out = NULL;
    if (!gm_gen_type_supported(type))
        return gm_err_set(err, GM_EINVAL, "cannot generate tensors of type %s (supported: %s)",
                          gm_type_name(type), gm_gen_supported_types());
    if (!(sigma > 0.0f) || !(sigma < 1e4f))
        return gm_err_set(err, GM_EINVAL, "weight std %g out of range", (double)sigma);
    gm_gen_pool *p = calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    p->type = type;
    p->sigma = sigma;
    p->vb_bytes = vb_bytes_of(type);
    p->n_vb = pool_bytes / p->vb_bytes;
    if (p->n_vb < 64)
        p->n_vb = 64;
    p->data = malloc((size_t)(p->n_vb * p->vb_bytes));
    if (!p->data) {
        free(p);
        return gm_err_set(err, GM_ENOMEM, "out of memory for a %zu-byte block pool", pool_bytes);
    }
    uint32_t sbits;
    memcpy(&sbits, &sigma, 4);
    uint64_t s = gm_gen_mix64(seed ^ gm_gen_mix64(((uint64_t)type << 32) | sbits));
    build b = {.data = p->data, .n_vb = p->n_vb, .sigma = sigma, .lv_seed = s};
    gm_gen_rng_seed(&b.lv, s);
    gm_gen_rng_seed(&b.aux, gm_gen_mix64(s ^ 0xa5a5a5a5a5a5a5a5ull));
    switch (type) {
    case GM_TYPE_F32:
    case GM_TYPE_F16:
    case GM_TYPE_BF16: build_scalar(&b, type); break;
    case GM_TYPE_Q8_0: build_q8_0(&b); break;
    case GM_TYPE_Q4_0: build_q4_0(&b); break;
    case GM_TYPE_Q2_K: build_q2_k(&b); break;
    case GM_TYPE_Q4_K: build_q45_k(&b, false); break;
    case GM_TYPE_Q5_K: build_q45_k(&b, true); break;
    case GM_TYPE_Q6_K: build_q6_k(&b); break;
    case GM_TYPE_IQ2_XXS: build_iq2_xxs(&b); break;
    case GM_TYPE_MXFP4: build_mxfp4(&b); break;
    default: break;
    }
    *out = p;
    return 0;
}

void gm_gen_pool_destroy(gm_gen_pool *p)
{
    if (!p)
        return;
    free(p->data);
    free(p);
}

uint32_t gm_gen_pool_type(const gm_gen_pool *p) { return p->type; }
float gm_gen_pool_sigma(const gm_gen_pool *p) { return p->sigma; }
size_t gm_gen_pool_bytes(const gm_gen_pool *p) { return (size_t)(p->n_vb * p->vb_bytes); }

/* Negation bits of blocks 64*w .. 64*w+63 of slice key. */
static inline uint64_t neg_word(uint64_t key, uint64_t w)
{
    return gm_gen_mix64(key ^ gm_gen_mix64(w + 0x632be59bd9b4e019ull));
}

static void one_vb(const gm_gen_pool *p, uint64_t key, uint64_t start, uint64_t i, uint8_t *dst)
{
    memcpy(dst, p->data + ((start + i) % p->n_vb) * p->vb_bytes, p->vb_bytes);
    negate_vb(p->type, dst, 0 - ((neg_word(key, i / 64) >> (i % 64)) & 1));
}

void gm_gen_pool_fill(const gm_gen_pool *p, uint64_t key, uint64_t pos, uint8_t *dst, size_t n)
{
    const uint64_t vb = p->vb_bytes;
    const uint64_t start = gm_gen_mix64(key) % p->n_vb;
    uint64_t i = pos / vb;
    size_t skip = (size_t)(pos % vb);
    while (n > 0) {
        if (skip || n < vb) { /* a partial block at either end */
            uint8_t tmp[MAX_VB_BYTES];
            one_vb(p, key, start, i, tmp);
            size_t k = (size_t)vb - skip;
            if (k > n)
                k = n;
            memcpy(dst, tmp + skip, k);
            dst += k;
            n -= k;
            skip = 0;
            i++;
            continue;
        }
        /* A run of whole blocks, contiguous in the pool up to its end. */
        uint64_t count = n / vb;
        uint64_t at = (start + i) % p->n_vb;
        if (count > p->n_vb - at)
            count = p->n_vb - at;
        memcpy(dst, p->data + at * vb, (size_t)(count * vb));
        uint64_t word_idx = UINT64_MAX, word = 0;
        for (uint64_t k = 0; k < count; k++) {
            uint64_t bi = i + k;
            if (bi / 64 != word_idx) {
                word_idx = bi / 64;
                word = neg_word(key, word_idx);
            }
            negate_vb(p->type, dst + k * vb, 0 - ((word >> (bi % 64)) & 1));
        }
        dst += count * vb;
        n -= (size_t)(count * vb);
        i += count;
    }
}
