/* backend/cuda/blocks: element e of a row of blocks, decoded on the device with the CPU
 * reference's arithmetic (kernels/dequant_ref.c), one function per block type (internal to the
 * module; the layouts are kernels/quant.h's), and the device's copies of the value tables of
 * IQ4_NL, IQ4_XS and MXFP4 (kernels/quant_tables.c's; test_cuda checks that they are equal). */
#ifndef GM_BACKEND_CUDA_BLOCKS_CUH
#define GM_BACKEND_CUDA_BLOCKS_CUH

#include <stdint.h>

#include "kernels/quant.h"

/* The non-linear 4-bit values of IQ4_NL and IQ4_XS and the doubled E2M1 values of MXFP4, as
 * kernels/quant_tables.c (a host table is not visible to device code; each .cu file that includes
 * this header gets its own 16-byte copy, so no relocatable device code is needed). */
static __constant__ int8_t gm_dev_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                       1,    13,   25,  38,  53,  69,  89,  113};
static __constant__ int8_t gm_dev_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* A little-endian 16-bit field at any byte offset. */
static __device__ __forceinline__ uint16_t gm_u16_at(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

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
    default: return false;
    }
}

#endif
