/* backend/cuda/blocks: element e of a row of blocks, decoded on the device with the CPU
 * reference's arithmetic (kernels/dequant_ref.c), one function per block type (internal to the
 * module; the layouts are kernels/quant.h's), and the device's copies of the value tables of
 * IQ4_NL, IQ4_XS and MXFP4 (kernels/quant_tables.c's; test_cuda checks that they are equal) and
 * of the IQ1, IQ2 and IQ3 grids (from the rows kernels/quant_tables.c is made of). */
#ifndef GM_BACKEND_CUDA_BLOCKS_CUH
#define GM_BACKEND_CUDA_BLOCKS_CUH

#include <stdint.h>

#include "kernels/quant.h"
#include "kernels/quant_tables.h"

/* The non-linear 4-bit values of IQ4_NL and IQ4_XS and the doubled E2M1 values of MXFP4, as
 * kernels/quant_tables.c (a host table is not visible to device code; each .cu file that includes
 * this header gets its own 16-byte copy, so no relocatable device code is needed). */
static __constant__ int8_t gm_dev_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                       1,    13,   25,  38,  53,  69,  89,  113};
static __constant__ int8_t gm_dev_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The IQ1, IQ2 and IQ3 grids and the IQ2/IQ3 sign table, the device's copies of
 * kernels/quant_tables.c's from the same generated rows (global memory, not constant: a warp's
 * lanes look up different rows; rows aligned for whole-row loads), one copy a .cu file that decodes
 * them. */
static __device__ __align__(8) const uint8_t gm_dev_iq2xxs_grid[256][8] = {
#include "kernels/quant_grid_iq2xxs_grid.inc"
};
static __device__ __align__(8) const uint8_t gm_dev_iq2xs_grid[512][8] = {
#include "kernels/quant_grid_iq2xs_grid.inc"
};
static __device__ __align__(8) const uint8_t gm_dev_iq2s_grid[1024][8] = {
#include "kernels/quant_grid_iq2s_grid.inc"
};
static __device__ __align__(4) const uint8_t gm_dev_iq3xxs_grid[256][4] = {
#include "kernels/quant_grid_iq3xxs_grid.inc"
};
static __device__ __align__(4) const uint8_t gm_dev_iq3s_grid[512][4] = {
#include "kernels/quant_grid_iq3s_grid.inc"
};
static __device__ __align__(8) const int8_t gm_dev_iq1s_grid[2048][8] = {
#include "kernels/quant_grid_iq1s_grid.inc"
};
static __device__ const uint8_t gm_dev_ksigns_iq2xs[128] = {
#include "kernels/quant_grid_ksigns_iq2xs.inc"
};

/* A little-endian 16-bit field at any byte offset. */
static __device__ __forceinline__ uint16_t gm_u16_at(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* A little-endian 32-bit field at any byte offset (the IQ blocks keep 2-byte alignment at best). */
static __device__ __forceinline__ uint32_t gm_u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The sign of element j of an IQ2/IQ3 sign byte: -1 where its bit is set. */
static __device__ __forceinline__ float gm_iq_sign(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }

struct gm_deq_f32 {
    static constexpr int block = 1, bytes = 4;
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        (void)e;
        return gm_bits_to_f32((uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24));
    }
};

struct gm_deq_f16 {
    static constexpr int block = 1, bytes = 2;
    static __device__ __forceinline__ float at(const uint8_t *b, int e) { (void)e; return gm_f16_to_f32(gm_u16_at(b)); }
};

struct gm_deq_bf16 {
    static constexpr int block = 1, bytes = 2;
    static __device__ __forceinline__ float at(const uint8_t *b, int e) { (void)e; return gm_bf16_to_f32(gm_u16_at(b)); }
};

/* x = d * q */
struct gm_deq_q8_0 {
    static constexpr int block = GM_QK8_0, bytes = sizeof(gm_block_q8_0);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q8_0, d)));
        return (float)(int8_t)b[offsetof(gm_block_q8_0, qs) + e] * d;
    }
};

/* x = (q - 8) * d; element j < 16 the low nibble of byte j, j >= 16 the high nibble of byte j - 16 */
struct gm_deq_q4_0 {
    static constexpr int block = GM_QK4_0, bytes = sizeof(gm_block_q4_0);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q4_0, d)));
        const int q = (b[offsetof(gm_block_q4_0, qs) + e % 16] >> (4 * (e / 16))) & 0x0f;
        return (float)(q - 8) * d;
    }
};

/* x = (q - 16) * d, nibbles as Q4_0 and the fifth bit of element e bit e of qh (little-endian) */
struct gm_deq_q5_0 {
    static constexpr int block = GM_QK5_0, bytes = sizeof(gm_block_q5_0);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q5_0, d)));
        const int lo = (b[offsetof(gm_block_q5_0, qs) + e % 16] >> (4 * (e / 16))) & 0x0f;
        const int hi = (b[offsetof(gm_block_q5_0, qh) + e / 8] >> (e % 8)) & 1;
        return (float)((lo | (hi << 4)) - 16) * d;
    }
};

/* x = d * kvalues_iq4nl[q], nibbles as Q4_0 */
struct gm_deq_iq4_nl {
    static constexpr int block = GM_QK4_NL, bytes = sizeof(gm_block_iq4_nl);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq4_nl, d)));
        const int q = (b[offsetof(gm_block_iq4_nl, qs) + e % 16] >> (4 * (e / 16))) & 0x0f;
        return d * (float)gm_dev_kvalues_iq4nl[q];
    }
};

/* x = kvalues_mxfp4[q] * 2^(e-127) / 2, nibbles as Q4_0 */
struct gm_deq_mxfp4 {
    static constexpr int block = GM_QK_MXFP4, bytes = sizeof(gm_block_mxfp4);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const float d = gm_e8m0_to_f32_half(b[offsetof(gm_block_mxfp4, e)]);
        const int q = (b[offsetof(gm_block_mxfp4, qs) + e % 16] >> (4 * (e / 16))) & 0x0f;
        return (float)gm_dev_kvalues_mxfp4[q] * d;
    }
};

/* 16 sub-blocks of 16: x = (d * (sc & 15)) * q - dmin * (sc >> 4), q 2 bits: element e in 128-chunk
 * c = e / 128, at shift 2 * ((e % 128) / 32) of qs byte c * 32 + e % 32 */
struct gm_deq_q2_K {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_q2_K);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int c = e / 128, s = (e % 128) / 32, l = e % 32;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q2_K, d)));
        const float dmin = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q2_K, dmin)));
        const uint8_t sc = b[offsetof(gm_block_q2_K, scales) + e / 16];
        const float dl = d * (float)(sc & 0x0f);
        const float ml = dmin * (float)(sc >> 4);
        const int q = (b[offsetof(gm_block_q2_K, qs) + c * 32 + l] >> (2 * s)) & 3;
        return dl * (float)q - ml;
    }
};

/* 16 sub-blocks of 16: x = (d * sc) * (q - (hbit ? 0 : 4)), q's 2 low bits as Q2_K's, its high bit
 * bit e / 32 of hmask byte e % 32 */
struct gm_deq_q3_K {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_q3_K);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int c = e / 128, s = (e % 128) / 32, l = e % 32;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q3_K, d)));
        const int sc = gm_q3_K_scale(b + offsetof(gm_block_q3_K, scales), e / 16);
        const int lo = (b[offsetof(gm_block_q3_K, qs) + c * 32 + l] >> (2 * s)) & 3;
        const int hbit = (b[offsetof(gm_block_q3_K, hmask) + l] >> (e / 32)) & 1;
        const float dl = d * (float)sc;
        return dl * (float)(lo - (hbit ? 0 : 4));
    }
};

/* 8 sub-blocks of 32: x = (d * (ls - 32)) * kvalues_iq4nl[q], ls 4 bits from scales_l and 2 from
 * scales_h; sub-block ib's 16 bytes of qs hold its elements 0..15 (low nibbles) and 16..31 (high) */
struct gm_deq_iq4_xs {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq4_xs);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, j = e % 32;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq4_xs, d)));
        const int ls = ((b[offsetof(gm_block_iq4_xs, scales_l) + ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                       (((gm_u16_at(b + offsetof(gm_block_iq4_xs, scales_h)) >> (2 * ib)) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        const int q = (b[offsetof(gm_block_iq4_xs, qs) + 16 * ib + j % 16] >> (4 * (j / 16))) & 0x0f;
        return dl * (float)gm_dev_kvalues_iq4nl[q];
    }
};

/* 8 sub-blocks of 32: x = (d * sc) * q - dmin * m; Q5_K adds a fifth bit from qh */
template <bool FIVE> struct gm_deq_q45_K {
    static constexpr int block = GM_QK_K;
    static constexpr int bytes = FIVE ? (int)sizeof(gm_block_q5_K) : (int)sizeof(gm_block_q4_K);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int sb = e / 32, l = e % 32;
        const size_t o_d = FIVE ? offsetof(gm_block_q5_K, d) : offsetof(gm_block_q4_K, d);
        const size_t o_dmin = FIVE ? offsetof(gm_block_q5_K, dmin) : offsetof(gm_block_q4_K, dmin);
        const size_t o_sc = FIVE ? offsetof(gm_block_q5_K, scales) : offsetof(gm_block_q4_K, scales);
        const size_t o_qs = FIVE ? offsetof(gm_block_q5_K, qs) : offsetof(gm_block_q4_K, qs);
        const float d = gm_f16_to_f32(gm_u16_at(b + o_d));
        const float dmin = gm_f16_to_f32(gm_u16_at(b + o_dmin));
        int sc, m;
        gm_q4_K_scale_min(sb, b + o_sc, &sc, &m);
        const float d1 = d * (float)sc;
        const float m1 = dmin * (float)m;
        int v = (b[o_qs + (sb / 2) * 32 + l] >> (4 * (sb & 1))) & 0x0f;
        if (FIVE)
            v |= ((b[offsetof(gm_block_q5_K, qh) + l] >> sb) & 1) << 4;
        return d1 * (float)v - m1;
    }
};

/* 16 sub-blocks of 16: x = (d * sc) * (q - 32), q 4 bits in ql and 2 in qh */
struct gm_deq_q6_K {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_q6_K);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int c = e / 128, r = e % 128;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_q6_K, d)));
        const int lo = (b[offsetof(gm_block_q6_K, ql) + c * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
        const int hi = (b[offsetof(gm_block_q6_K, qh) + c * 32 + r % 32] >> (2 * (r / 32))) & 3;
        const float dl = d * (float)(int8_t)b[offsetof(gm_block_q6_K, scales) + e / 16];
        return dl * (float)((lo | (hi << 4)) - 32);
    }
};

/* Calls F with the decoder of type, or returns false for a type without one. */
/* The i-quants: 8 sub-blocks of 32, each of four runs of 8 elements (element e: sub-block
 * ib = e / 32, run l = (e % 32) / 8, element j = e % 8 of the run), as kernels/dequant_ref.c
 * decodes them. IQ2_XXS: per sub-block two little-endian uint32, the 4 runs' grid rows (bytes),
 * then 4 x 7-bit sign indices and a 4-bit scale: x = d (0.5 + s) / 4 * grid * sign. */
struct gm_deq_iq2_xxs {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq2_xxs);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, j = e % 8;
        const uint8_t *q = b + offsetof(gm_block_iq2_xxs, qs) + 8 * ib;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq2_xxs, d)));
        const uint32_t aux = gm_u32_at(q + 4);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        const uint8_t signs = gm_dev_ksigns_iq2xs[(aux >> (7 * l)) & 127];
        return db * (float)gm_dev_iq2xxs_grid[q[l]][j] * gm_iq_sign(signs, j);
    }
};
/* IQ2_XS: a uint16 a run, 9 bits of grid row and 7 of sign index; two 4-bit scales a sub-block */
struct gm_deq_iq2_xs {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq2_xs);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, j = e % 8;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq2_xs, d)));
        const uint8_t sc = b[offsetof(gm_block_iq2_xs, scales) + ib];
        const float db = d * (0.5f + (float)(l / 2 ? sc >> 4 : sc & 0x0f)) * 0.25f;
        const uint16_t q = gm_u16_at(b + offsetof(gm_block_iq2_xs, qs) + 2 * (4 * ib + l));
        return db * (float)gm_dev_iq2xs_grid[q & 511][j] * gm_iq_sign(gm_dev_ksigns_iq2xs[q >> 9], j);
    }
};
/* IQ2_S: a run's grid row 8 bits of qs and 2 of qh, its signs a byte of their own */
struct gm_deq_iq2_s {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq2_s);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, j = e % 8;
        const uint8_t *qs = b + offsetof(gm_block_iq2_s, qs);
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq2_s, d)));
        const uint8_t sc = b[offsetof(gm_block_iq2_s, scales) + ib];
        const float db = d * (0.5f + (float)(l / 2 ? sc >> 4 : sc & 0x0f)) * 0.25f;
        const int idx = qs[4 * ib + l] | (((b[offsetof(gm_block_iq2_s, qh) + ib] >> (2 * l)) & 3) << 8);
        return db * (float)gm_dev_iq2s_grid[idx][j] * gm_iq_sign(qs[GM_QK_K / 8 + 4 * ib + l], j);
    }
};
/* IQ3_XXS: two grid rows of 4 a run (bytes of qs), then the sub-blocks' uint32 of signs and scale
 * as IQ2_XXS's: x = d (0.5 + s) / 2 * grid * sign */
struct gm_deq_iq3_xxs {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq3_xxs);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, h = (e % 8) / 4, j = e % 4;
        const uint8_t *qs = b + offsetof(gm_block_iq3_xxs, qs);
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq3_xxs, d)));
        const uint32_t aux = gm_u32_at(qs + GM_QK_K / 4 + 4 * ib);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        const uint8_t signs = gm_dev_ksigns_iq2xs[(aux >> (7 * l)) & 127];
        return db * (float)gm_dev_iq3xxs_grid[qs[8 * ib + 2 * l + h]][j] * gm_iq_sign(signs, 4 * h + j);
    }
};
/* IQ3_S: grid rows of 4 from 8 bits of qs and 1 of qh, a sign byte a run, 4-bit scales:
 * x = d (1 + 2 s) * grid * sign */
struct gm_deq_iq3_s {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq3_s);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, h = (e % 8) / 4, j = e % 4;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq3_s, d)));
        const int s = (b[offsetof(gm_block_iq3_s, scales) + ib / 2] >> (4 * (ib % 2))) & 0x0f;
        const float db = d * (float)(1 + 2 * s);
        const int k = 8 * ib + 2 * l + h;
        const int idx = b[offsetof(gm_block_iq3_s, qs) + k] | (((b[offsetof(gm_block_iq3_s, qh) + ib] >> (2 * l + h)) & 1) << 8);
        const uint8_t sg = b[offsetof(gm_block_iq3_s, signs) + 4 * ib + l];
        return db * (float)gm_dev_iq3s_grid[idx][j] * gm_iq_sign(sg, 4 * h + j);
    }
};
/* IQ1_S: grid rows of -1, 0, 1 from 8 bits of qs and 3 of the sub-block's uint16 qh, whose top
 * bits hold a 3-bit scale and the delta's sign: x = d (2 s + 1) (grid + delta) */
struct gm_deq_iq1_s {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq1_s);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, j = e % 8;
        const float d = gm_f16_to_f32(gm_u16_at(b + offsetof(gm_block_iq1_s, d)));
        const uint16_t qh = gm_u16_at(b + offsetof(gm_block_iq1_s, qh) + 2 * ib);
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = (qh & 0x8000) ? -GM_IQ1S_DELTA : GM_IQ1S_DELTA;
        const int idx = b[offsetof(gm_block_iq1_s, qs) + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
        return dl * ((float)gm_dev_iq1s_grid[idx][j] + delta);
    }
};
/* IQ1_M: IQ1_S's grid; a run's 3 high index bits and delta sign a nibble of qh; two 3-bit scales
 * a sub-block in the four uint16 of scales, whose top nibbles hold the block's f16 scale */
struct gm_deq_iq1_m {
    static constexpr int block = GM_QK_K, bytes = sizeof(gm_block_iq1_m);
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int ib = e / 32, l = (e % 32) / 8, j = e % 8;
        const uint8_t *scp = b + offsetof(gm_block_iq1_m, scales);
        const uint16_t s0 = gm_u16_at(scp), s1 = gm_u16_at(scp + 2), s2 = gm_u16_at(scp + 4), s3 = gm_u16_at(scp + 6);
        const uint16_t dbits = (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
        const float d = gm_f16_to_f32(dbits);
        const uint16_t sc = gm_u16_at(scp + 2 * (ib / 2));
        const float dl = d * (float)(2 * ((sc >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1);
        const uint8_t qh = (uint8_t)(b[offsetof(gm_block_iq1_m, qh) + 2 * ib + l / 2] >> (4 * (l % 2)));
        const int idx = b[offsetof(gm_block_iq1_m, qs) + 4 * ib + l] | ((qh & 7) << 8);
        const float delta = (qh & 8) ? -GM_IQ1M_DELTA : GM_IQ1M_DELTA;
        return dl * ((float)gm_dev_iq1s_grid[idx][j] + delta);
    }
};

template <typename F> static bool gm_with_decoder(uint32_t type, F f)
{
    switch (type) {
    case GM_TYPE_F32: f(gm_deq_f32()); return true;
    case GM_TYPE_F16: f(gm_deq_f16()); return true;
    case GM_TYPE_BF16: f(gm_deq_bf16()); return true;
    case GM_TYPE_Q4_0: f(gm_deq_q4_0()); return true;
    case GM_TYPE_Q5_0: f(gm_deq_q5_0()); return true;
    case GM_TYPE_Q8_0: f(gm_deq_q8_0()); return true;
    case GM_TYPE_IQ4_NL: f(gm_deq_iq4_nl()); return true;
    case GM_TYPE_MXFP4: f(gm_deq_mxfp4()); return true;
    case GM_TYPE_Q2_K: f(gm_deq_q2_K()); return true;
    case GM_TYPE_Q3_K: f(gm_deq_q3_K()); return true;
    case GM_TYPE_Q4_K: f(gm_deq_q45_K<false>()); return true;
    case GM_TYPE_Q5_K: f(gm_deq_q45_K<true>()); return true;
    case GM_TYPE_Q6_K: f(gm_deq_q6_K()); return true;
    case GM_TYPE_IQ4_XS: f(gm_deq_iq4_xs()); return true;
    case GM_TYPE_IQ2_XXS: f(gm_deq_iq2_xxs()); return true;
    case GM_TYPE_IQ2_XS: f(gm_deq_iq2_xs()); return true;
    case GM_TYPE_IQ2_S: f(gm_deq_iq2_s()); return true;
    case GM_TYPE_IQ3_XXS: f(gm_deq_iq3_xxs()); return true;
    case GM_TYPE_IQ3_S: f(gm_deq_iq3_s()); return true;
    case GM_TYPE_IQ1_S: f(gm_deq_iq1_s()); return true;
    case GM_TYPE_IQ1_M: f(gm_deq_iq1_m()); return true;
    default: return false;
    }
}

#endif
