/* backend/cuda/blocks: element e of a row of blocks, decoded on the device with the CPU
 * reference's arithmetic (kernels/dequant_ref.c), one function per block type (internal to the
 * module; the layouts are kernels/quant.h's). */
#ifndef GM_BACKEND_CUDA_BLOCKS_CUH
#define GM_BACKEND_CUDA_BLOCKS_CUH

#include <stdint.h>

#include "kernels/quant.h"

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
    case GM_TYPE_Q8_0: f(gm_deq_q8_0()); return true;
    case GM_TYPE_Q4_K: f(gm_deq_q45_K<false>()); return true;
    case GM_TYPE_Q5_K: f(gm_deq_q45_K<true>()); return true;
    case GM_TYPE_Q6_K: f(gm_deq_q6_K()); return true;
    default: return false;
    }
}

#endif
