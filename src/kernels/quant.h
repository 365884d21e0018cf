/* kernels/quant: the byte layout of every GGUF quantized block, declared once.
 *
 * Owns: one plain struct per block type (gm_block_<type>), its element count (GM_QK_*), and the
 * exact f16/bf16 <-> f32 conversions the formats are defined with. Every kernel (scalar, SIMD,
 * later CUDA) reads blocks through these structs; no other file restates a layout.
 *
 * Invariants: each struct has no padding and its size equals the table in gguf/types.c
 * (gm_type_get(type)->block_bytes), checked by the static asserts below; the types.c table stays
 * the single source of block geometry at run time. Half-precision values (f16, bf16) are kept
 * as their uint16_t bit patterns and multi-byte fields are little-endian, as in the file, so the
 * structs only describe the bytes of a little-endian host.
 *
 * Blocks inside a mapped tensor need not be aligned to the struct's alignment (a row of MXFP4
 * blocks is 17 bytes each; a tensor may start anywhere a caller points): kernels copy a block into
 * a local struct (memcpy) or read bytes, never dereference a cast pointer of unknown alignment.
 *
 * Threads: declarations and pure functions only; any thread.
 */
#ifndef GM_KERNELS_QUANT_H
#define GM_KERNELS_QUANT_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gmlx kernels read GGUF blocks in place and need a little-endian host"
#endif

/* Functions below are usable from host C and (later) CUDA device code. */
#if defined(__CUDACC__)
#define GM_HD __host__ __device__
#else
#define GM_HD
#endif

#if defined(__cplusplus)
#define GM_STATIC_ASSERT static_assert
#else
#define GM_STATIC_ASSERT _Static_assert
#endif

/* Elements per block. */
#define GM_QK4_0 32
#define GM_QK4_1 32
#define GM_QK5_0 32
#define GM_QK5_1 32
#define GM_QK8_0 32
#define GM_QK8_1 32
#define GM_QK4_NL 32
#define GM_QK_MXFP4 32
#define GM_QK_K 256                       /* super-block of the K, IQ and TQ types */
#define GM_K_SCALE_SIZE 12                /* packed 6-bit scales/mins of Q4_K and Q5_K */
#define GM_IQ3S_N_SCALE (GM_QK_K / 64)

/* ---- 32-element blocks ---------------------------------------------------------------- */

/* x = d * (q - 8); q: low nibbles are elements 0..15, high nibbles 16..31. */
typedef struct gm_block_q4_0 {
    uint16_t d;                  /* f16 scale */
    uint8_t qs[GM_QK4_0 / 2];
} gm_block_q4_0;

/* x = d * q + m. */
typedef struct gm_block_q4_1 {
    uint16_t d;                  /* f16 scale */
    uint16_t m;                  /* f16 minimum */
    uint8_t qs[GM_QK4_1 / 2];
} gm_block_q4_1;

/* x = d * (q - 16); q's fifth bit of element j is bit j of qh (a little-endian uint32). */
typedef struct gm_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[GM_QK5_0 / 2];
} gm_block_q5_0;

typedef struct gm_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[GM_QK5_1 / 2];
} gm_block_q5_1;

/* x = d * q. */
typedef struct gm_block_q8_0 {
    uint16_t d;
    int8_t qs[GM_QK8_0];
} gm_block_q8_0;

/* Activation block: s = d * sum(qs). */
typedef struct gm_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[GM_QK8_1];
} gm_block_q8_1;

/* x = d * kvalues_iq4nl[q]; nibble order as Q4_0. */
typedef struct gm_block_iq4_nl {
    uint16_t d;
    uint8_t qs[GM_QK4_NL / 2];
} gm_block_iq4_nl;

/* x = 2^(e-127) * kvalues_mxfp4[q] / 2 (the value table holds doubled E2M1 values);
 * nibble order as Q4_0. */
typedef struct gm_block_mxfp4 {
    uint8_t e;                   /* E8M0 shared exponent */
    uint8_t qs[GM_QK_MXFP4 / 2];
} gm_block_mxfp4;

/* ---- K-quants (256-element super-blocks) --------------------------------------------- */

/* 16 sub-blocks of 16: x = d*(sc&15)*q - dmin*(sc>>4), q 2 bits. */
typedef struct gm_block_q2_K {
    uint8_t scales[GM_QK_K / 16];
    uint8_t qs[GM_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} gm_block_q2_K;

/* 16 sub-blocks of 16: x = d*(s-32)*(q - (hbit ? 0 : 4)), s 6 bits packed in 12 bytes. */
typedef struct gm_block_q3_K {
    uint8_t hmask[GM_QK_K / 8];
    uint8_t qs[GM_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} gm_block_q3_K;

/* 8 sub-blocks of 32: x = d*sc*q - dmin*m, sc and m 6 bits packed in 12 bytes. */
typedef struct gm_block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[GM_K_SCALE_SIZE];
    uint8_t qs[GM_QK_K / 2];
} gm_block_q4_K;

typedef struct gm_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[GM_K_SCALE_SIZE];
    uint8_t qh[GM_QK_K / 8];
    uint8_t qs[GM_QK_K / 2];
} gm_block_q5_K;

/* 16 sub-blocks of 16: x = d*sc*(q - 32), q 6 bits (4 in ql, 2 in qh). */
typedef struct gm_block_q6_K {
    uint8_t ql[GM_QK_K / 2];
    uint8_t qh[GM_QK_K / 4];
    int8_t scales[GM_QK_K / 16];
    uint16_t d;
} gm_block_q6_K;

/* Activation block for the K-quant dot products: x = d * qs; bsums[g] = sum of qs of the
 * 16-element group g. */
typedef struct gm_block_q8_K {
    float d;
    int8_t qs[GM_QK_K];
    int16_t bsums[GM_QK_K / 16];
} gm_block_q8_K;

/* ---- i-quants ------------------------------------------------------------------------- */

/* Per 32 elements two uint32: 4 grid indices (bytes), then 4 x 7-bit sign indices and a
 * 4-bit scale (top bits). */
typedef struct gm_block_iq2_xxs {
    uint16_t d;
    uint16_t qs[GM_QK_K / 8];
} gm_block_iq2_xxs;

/* qs: 9-bit grid index | 7-bit sign index << 9; one 4-bit scale per 16 elements. */
typedef struct gm_block_iq2_xs {
    uint16_t d;
    uint16_t qs[GM_QK_K / 8];
    uint8_t scales[GM_QK_K / 32];
} gm_block_iq2_xs;

/* qs: 32 grid-index low bytes then 32 sign bytes; qh: 2 high index bits per group of 8. */
typedef struct gm_block_iq2_s {
    uint16_t d;
    uint8_t qs[GM_QK_K / 4];
    uint8_t qh[GM_QK_K / 32];
    uint8_t scales[GM_QK_K / 32];
} gm_block_iq2_s;

/* qs: 64 grid indices (4 elements each), then 8 uint32 of signs and scales as IQ2_XXS. */
typedef struct gm_block_iq3_xxs {
    uint16_t d;
    uint8_t qs[3 * GM_QK_K / 8];
} gm_block_iq3_xxs;

/* 9-bit grid indices (8 in qs, 1 in qh), explicit sign bits, 4-bit scales. */
typedef struct gm_block_iq3_s {
    uint16_t d;
    uint8_t qs[GM_QK_K / 4];
    uint8_t qh[GM_QK_K / 32];
    uint8_t signs[GM_QK_K / 8];
    uint8_t scales[GM_IQ3S_N_SCALE];
} gm_block_iq3_s;

/* 11-bit grid indices (8 in qs, 3 in qh); qh also holds a 3-bit scale and the delta sign. */
typedef struct gm_block_iq1_s {
    uint16_t d;
    uint8_t qs[GM_QK_K / 8];
    uint16_t qh[GM_QK_K / 32];
} gm_block_iq1_s;

/* The f16 scale is split over the top nibbles of the four uint16 of scales. */
typedef struct gm_block_iq1_m {
    uint8_t qs[GM_QK_K / 8];
    uint8_t qh[GM_QK_K / 16];
    uint8_t scales[GM_QK_K / 32];
} gm_block_iq1_m;

/* 8 sub-blocks of 32: x = d*(s-32)*kvalues_iq4nl[q], s 6 bits (4 in scales_l, 2 in scales_h). */
typedef struct gm_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[GM_QK_K / 64];
    uint8_t qs[GM_QK_K / 2];
} gm_block_iq4_xs;

/* ---- ternary ---------------------------------------------------------------------------- */

/* 5 trits per byte in qs (240 elements), 4 per byte in qh (16); x = d * (t - 1). */
typedef struct gm_block_tq1_0 {
    uint8_t qs[(GM_QK_K - 4 * GM_QK_K / 64) / 5];
    uint8_t qh[GM_QK_K / 64];
    uint16_t d;
} gm_block_tq1_0;

/* 2 bits per element; x = d * (q - 1). */
typedef struct gm_block_tq2_0 {
    uint8_t qs[GM_QK_K / 4];
    uint16_t d;
} gm_block_tq2_0;

/* Sizes as in gguf/types.c (block_bytes). */
GM_STATIC_ASSERT(sizeof(gm_block_q4_0) == 18, "Q4_0 block");
GM_STATIC_ASSERT(sizeof(gm_block_q4_1) == 20, "Q4_1 block");
GM_STATIC_ASSERT(sizeof(gm_block_q5_0) == 22, "Q5_0 block");
GM_STATIC_ASSERT(sizeof(gm_block_q5_1) == 24, "Q5_1 block");
GM_STATIC_ASSERT(sizeof(gm_block_q8_0) == 34, "Q8_0 block");
GM_STATIC_ASSERT(sizeof(gm_block_q8_1) == 36, "Q8_1 block");
GM_STATIC_ASSERT(sizeof(gm_block_q2_K) == 84, "Q2_K block");
GM_STATIC_ASSERT(sizeof(gm_block_q3_K) == 110, "Q3_K block");
GM_STATIC_ASSERT(sizeof(gm_block_q4_K) == 144, "Q4_K block");
GM_STATIC_ASSERT(sizeof(gm_block_q5_K) == 176, "Q5_K block");
GM_STATIC_ASSERT(sizeof(gm_block_q6_K) == 210, "Q6_K block");
GM_STATIC_ASSERT(sizeof(gm_block_q8_K) == 292, "Q8_K block");
GM_STATIC_ASSERT(sizeof(gm_block_iq2_xxs) == 66, "IQ2_XXS block");
GM_STATIC_ASSERT(sizeof(gm_block_iq2_xs) == 74, "IQ2_XS block");
GM_STATIC_ASSERT(sizeof(gm_block_iq2_s) == 82, "IQ2_S block");
GM_STATIC_ASSERT(sizeof(gm_block_iq3_xxs) == 98, "IQ3_XXS block");
GM_STATIC_ASSERT(sizeof(gm_block_iq3_s) == 110, "IQ3_S block");
GM_STATIC_ASSERT(sizeof(gm_block_iq1_s) == 50, "IQ1_S block");
GM_STATIC_ASSERT(sizeof(gm_block_iq1_m) == 56, "IQ1_M block");
GM_STATIC_ASSERT(sizeof(gm_block_iq4_nl) == 18, "IQ4_NL block");
GM_STATIC_ASSERT(sizeof(gm_block_iq4_xs) == 136, "IQ4_XS block");
GM_STATIC_ASSERT(sizeof(gm_block_tq1_0) == 54, "TQ1_0 block");
GM_STATIC_ASSERT(sizeof(gm_block_tq2_0) == 66, "TQ2_0 block");
GM_STATIC_ASSERT(sizeof(gm_block_mxfp4) == 17, "MXFP4 block");

/* ---- packed scales ------------------------------------------------------------------------ */

/* Scale and min (6 bits each) of sub-block j (0..7) of a Q4_K or Q5_K block: bytes 0..3 hold the
 * scales of sub-blocks 0..3, bytes 4..7 their mins, each with 2 spare top bits; bytes 8..11
 * hold the low 4 bits of sub-blocks 4..7 (scale in the low nibble, min in the high), whose top 2
 * bits are the spare bits of bytes 0..3 (scale) and 4..7 (min). */
static inline GM_HD void gm_q4_K_scale_min(int j, const uint8_t q[GM_K_SCALE_SIZE], int *sc,
                                           int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The same from the 12 bytes read as three little-endian words w (as a GPU thread holds them):
 * sub-block j's three bytes are byte j % 4 of each word, so no byte is indexed by j. */
static inline GM_HD void gm_q4_K_scale_min_w(int j, const uint32_t w[3], int *sc, int *m)
{
    const unsigned sh = 8 * ((unsigned)j & 3);
    const int a = (int)((w[0] >> sh) & 0xff), b = (int)((w[1] >> sh) & 0xff), c = (int)((w[2] >> sh) & 0xff);
    if (j < 4) {
        *sc = a & 63;
        *m = b & 63;
    } else {
        *sc = (c & 0x0f) | ((a >> 6) << 4);
        *m = (c >> 4) | ((b >> 6) << 4);
    }
}

/* Signed scale (-32..31) of 16-element group g (0..15) of a Q3_K block: low 4 bits from bytes
 * 0..7 (group g < 8 in the low nibble of byte g, else the high nibble of byte g-8), high 2 bits
 * from byte 8 + g%4 at bit 2*(g/4); stored with an offset of 32. */
static inline GM_HD int gm_q3_K_scale(const uint8_t q[12], int g)
{
    const int lo = (g < 8) ? (q[g] & 0x0f) : (q[g - 8] >> 4);
    const int hi = (q[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* ---- half-precision conversions (exact; subnormals, infinities and NaN payloads kept) ---- */

static inline GM_HD float gm_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline GM_HD uint32_t gm_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE binary16 -> binary32: every f16 value is exactly representable. */
static inline GM_HD float gm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf, or NaN with its payload */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* subnormal mant * 2^-24: normalize so the leading one becomes the implicit bit */
        uint32_t e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    return gm_bits_to_f32(bits);
}

/* binary32 -> binary16, round to nearest even; overflow gives infinity, NaN stays NaN (quiet,
 * top payload bits kept). */
static inline GM_HD uint16_t gm_f32_to_f16(float f)
{
    uint32_t x = gm_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* at or past the midpoint between 65504 and 65536 */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: an f16 subnormal or zero */
        if (ax <= 0x33000000u) /* at most 2^-25, which rounds (to even) to zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u; /* value = m * 2^(e-150) */
        uint32_t shift = 126u - e;                 /* in units of 2^-24: 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the correct rounding, up to infinity */
    return (uint16_t)(sign | h);
}

static inline GM_HD float gm_bf16_to_f32(uint16_t b)
{
    return gm_bits_to_f32((uint32_t)b << 16);
}

/* binary32 -> bfloat16, round to nearest even; NaN is kept NaN and made quiet (as ggml). */
static inline GM_HD uint16_t gm_f32_to_bf16(float f)
{
    uint32_t x = gm_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/* E8M0 exponent e -> 2^(e-127) / 2, the MXFP4 block scale with the table's factor 2 taken out.
 * e = 0 and 1 give subnormals; e = 255 gives 2^127 (E8M0's NaN code is not special-cased, as in
 * ggml). */
static inline GM_HD float gm_e8m0_to_f32_half(uint8_t e)
{
    uint32_t bits = e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1u) << 23);
    return gm_bits_to_f32(bits);
}

#endif
