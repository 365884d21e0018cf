/* backend/cuda/matvec_q8_kernels: the 8-bit matrix-vector kernels (matvec_q8.cu launches them),
 * apart from their launches so that tests/unit/test_cuda_emu.cpp can run the same source on the
 * CPU, its warps emulated, where there is no device (internal to the module). */
#ifndef GM_BACKEND_CUDA_MATVEC_Q8_KERNELS_CUH
#define GM_BACKEND_CUDA_MATVEC_Q8_KERNELS_CUH

#include <cuda_runtime.h>
#include <type_traits>

extern "C" {
#include "gguf/types.h"
}
#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"

#define WARPS 8 /* rows (warps) a thread block */

/* One warp per block of 32 (internal.h's gm_q8_quantize_warp). */
static __global__ void quantize(const float *x, uint64_t n, gm_cuda_q8_block *out)
{
    const uint64_t b = (uint64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32;
    if (b * 32 >= n)
        return;
    gm_q8_quantize_warp(x[b * 32 + lane], lane, &out[b]);
}

/* The kernels: gm_matvec_rows (internal.h) with one of the block types below, each lane's part of
 * a block (lanes to a block: 8 for the 256-value super-blocks, so four of them a warp step; 4 for
 * Q8_0's blocks of 32, eight a step; 2 for MXFP4's, sixteen a step), two warp steps unrolled so
 * that more blocks' loads are in flight at once. Each type's align: what its loads need of the
 * rows' start and length (bytes). */
template <typename T>
static __global__ void matvec_q8(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                                 const gm_cuda_q8_block *xq, float *y)
{
    gm_matvec_rows<WARPS, 2, T>(w, row_bytes, n_rows, n_cols, xq, y);
}

/* Up to GM_MV_MULTI products of one type and row length by one 8-bit vector in one launch (a
 * layer's q, k and v): product j's rows in thread blocks first[j] .. first[j + 1] - 1, so that the
 * small ones run beside the large one instead of after it, each row as matvec_q8 computes it. */
#define GM_MV_MULTI 3
struct gm_mv_multi {
    const uint8_t *w[GM_MV_MULTI];
    float *y[GM_MV_MULTI];
    uint64_t n_rows[GM_MV_MULTI];
    uint32_t first[GM_MV_MULTI];
    uint32_t n;
};

/* Which of p's products thread block b takes: its index, the block's place in it; selected, not
 * indexed, so that the arguments stay in the constant bank instead of a copy in local memory. */
struct gm_mv_pick {
    const uint8_t *w;
    float *y;
    uint64_t n_rows, blk;
};
static __device__ __forceinline__ gm_mv_pick gm_mv_multi_pick(const gm_mv_multi &p, unsigned b)
{
    static_assert(GM_MV_MULTI == 3, "three products a launch");
    if (p.n > 2 && b >= p.first[2])
        return gm_mv_pick{p.w[2], p.y[2], p.n_rows[2], b - p.first[2]};
    if (p.n > 1 && b >= p.first[1])
        return gm_mv_pick{p.w[1], p.y[1], p.n_rows[1], b - p.first[1]};
    return gm_mv_pick{p.w[0], p.y[0], p.n_rows[0], b - p.first[0]};
}

template <typename T>
static __global__ void matvec_q8_multi(gm_mv_multi p, uint64_t row_bytes, uint64_t n_cols, const gm_cuda_q8_block *xq)
{
    const gm_mv_pick k = gm_mv_multi_pick(p, blockIdx.x);
    gm_matvec_rows_at<WARPS, 2, T>(k.blk, k.w, row_bytes, k.n_rows, n_cols, xq, k.y);
}

/* Long rows (at least GM_LONG_STEPS warp steps: an attention's Q8_0 products of 4096 columns and
 * more, an output head's) a thread block of GM_LONG_WARPS warps a row (internal.h's
 * gm_matvec_row_split), the row's loads in flight together rather than a warp's few steps at a
 * time; the same launches otherwise (matvec_q8_multi's products a row a block). */
#define GM_LONG_WARPS 4
#define GM_LONG_STEPS 16
static inline bool gm_q8_long_rows(uint64_t nb, unsigned lanes) { return nb * lanes >= 32ull * GM_LONG_STEPS; }

template <typename T>
static __global__ void matvec_q8_long(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                                      const gm_cuda_q8_block *xq, float *y)
{
    (void)n_rows; /* a block a row: the grid is the rows */
    gm_matvec_row_split<GM_LONG_WARPS, T>(w, row_bytes, n_cols, xq, y);
}

template <typename T>
static __global__ void matvec_q8_multi_long(gm_mv_multi p, uint64_t row_bytes, uint64_t n_cols,
                                            const gm_cuda_q8_block *xq)
{
    const gm_mv_pick k = gm_mv_multi_pick(p, blockIdx.x);
    gm_matvec_row_split_at<GM_LONG_WARPS, T>(k.blk, k.w, row_bytes, n_cols, xq, k.y);
}

namespace {

/* Q4_K and Q5_K: each lane one sub-block of 32: its 32 nibbles (two 16-byte loads), for Q5_K
 * given their fifth bit from the 32 bytes of qh (two more 16-byte loads, shared by the block's
 * eight lanes: bit sb of qh byte l for value l), in eight dp4a with the vector's bytes, scaled by
 * d * sc and the vector's d, less dmin * m times the vector block's sum. */
template <bool FIVE> struct q45_K {
    typedef typename std::conditional<FIVE, gm_block_q5_K, gm_block_q4_K>::type block_t;
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(block_t), lanes = 8, align = 16;
    unsigned sb, sh;
    __device__ explicit q45_K(unsigned i) : sb(i), sh(4 * (i & 1)) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const gm_cuda_q8_block *xb = x + sb;
        const uint4 ql0 = *(const uint4 *)(blk + offsetof(block_t, qs) + (sb / 2) * 32);
        const uint4 ql1 = *(const uint4 *)(blk + offsetof(block_t, qs) + (sb / 2) * 32 + 16);
        const uint32_t lo[8] = {ql0.x, ql0.y, ql0.z, ql0.w, ql1.x, ql1.y, ql1.z, ql1.w};
        uint32_t hi[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if constexpr (FIVE) {
            const uint4 qh0 = *(const uint4 *)(blk + offsetof(gm_block_q5_K, qh));
            const uint4 qh1 = *(const uint4 *)(blk + offsetof(gm_block_q5_K, qh) + 16);
            const uint32_t h[8] = {qh0.x, qh0.y, qh0.z, qh0.w, qh1.x, qh1.y, qh1.z, qh1.w};
            for (int g = 0; g < 8; g++)
                hi[g] = ((h[g] >> sb) & 0x01010101u) << 4;
        }
        const int4 x0 = *(const int4 *)(xb->qs), x1 = *(const int4 *)(xb->qs + 16);
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int sumi = 0;
#pragma unroll
        for (int g = 0; g < 8; g++)
            sumi = __dp4a((int)(((lo[g] >> sh) & 0x0f0f0f0fu) | hi[g]), xi[g], sumi);
        int sc, m;
        gm_q4_K_scale_min((int)sb, blk + offsetof(block_t, scales), &sc, &m);
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(block_t, d)));
        const float dmin = gm_f16_to_f32(gm_u16_at(blk + offsetof(block_t, dmin)));
        return xb->d * d * (float)sc * (float)sumi - dmin * (float)m * xb->s;
    }
};
typedef q45_K<false> q4_K;
typedef q45_K<true> q5_K;

/* Q2_K: each lane one run of 32 values (two 16-value scales and mins): run sb's codes are the
 * 2-bit fields at shift 2 * (sb % 4) of the 32 qs bytes of chunk sb / 4 (four-byte loads: the
 * 84-byte blocks keep 4-byte alignment), two dp4a sums per half, and the mins times the half's
 * sum of the vector's codes (a dp4a with ones). */
struct q2_K {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_q2_K), lanes = 8, align = 4;
    unsigned sb, c, sh;
    __device__ explicit q2_K(unsigned i) : sb(i), c(i / 4), sh(2 * (i % 4)) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint32_t *qs = (const uint32_t *)(blk + offsetof(gm_block_q2_K, qs) + c * 32);
        const gm_cuda_q8_block *xb = x + sb;
        const int4 x0 = *(const int4 *)(xb->qs), x1 = *(const int4 *)(xb->qs + 16);
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int sumi[2] = {0, 0}, sumx[2] = {0, 0};
#pragma unroll
        for (int g = 0; g < 8; g++) {
            sumi[g / 4] = __dp4a((int)((qs[g] >> sh) & 0x03030303u), xi[g], sumi[g / 4]);
            sumx[g / 4] = __dp4a(0x01010101, xi[g], sumx[g / 4]);
        }
        const uint8_t *sc = blk + offsetof(gm_block_q2_K, scales) + 2 * sb;
        const int isum = (int)(sc[0] & 0x0f) * sumi[0] + (int)(sc[1] & 0x0f) * sumi[1];
        const int msum = (int)(sc[0] >> 4) * sumx[0] + (int)(sc[1] >> 4) * sumx[1];
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q2_K, d)));
        const float dmin = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q2_K, dmin)));
        return xb->d * (d * (float)isum - dmin * (float)msum);
    }
};

/* Q3_K: each lane one run of 32 values (two 16-value scales): run sb's low 2 bits as Q2_K's, its
 * third bit bit sb of the 32 hmask bytes, read two bytes at a time (the 110-byte blocks keep
 * 2-byte alignment); q - (hbit ? 0 : 4) = (lo | hbit << 2) - 4, so two dp4a sums per half, less
 * 4 times the vector's sum. */
struct q3_K {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_q3_K), lanes = 8, align = 2;
    unsigned sb, c, sh;
    __device__ explicit q3_K(unsigned i) : sb(i), c(i / 4), sh(2 * (i % 4)) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint16_t *qs = (const uint16_t *)(blk + offsetof(gm_block_q3_K, qs) + c * 32);
        const uint16_t *hm = (const uint16_t *)(blk + offsetof(gm_block_q3_K, hmask));
        const gm_cuda_q8_block *xb = x + sb;
        const int4 x0 = *(const int4 *)(xb->qs), x1 = *(const int4 *)(xb->qs + 16);
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int sumi[2] = {0, 0}, sumx[2] = {0, 0};
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const uint32_t lo = (uint32_t)qs[2 * g] | ((uint32_t)qs[2 * g + 1] << 16);
            const uint32_t hb = (uint32_t)hm[2 * g] | ((uint32_t)hm[2 * g + 1] << 16);
            const uint32_t q = ((lo >> sh) & 0x03030303u) | (((hb >> sb) & 0x01010101u) << 2);
            sumi[g / 4] = __dp4a((int)q, xi[g], sumi[g / 4]);
            sumx[g / 4] = __dp4a(0x01010101, xi[g], sumx[g / 4]);
        }
        const uint8_t *scales = blk + offsetof(gm_block_q3_K, scales);
        const int sc0 = gm_q3_K_scale(scales, (int)(2 * sb)), sc1 = gm_q3_K_scale(scales, (int)(2 * sb + 1));
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q3_K, d)));
        return xb->d * d * (float)(sc0 * (sumi[0] - 4 * sumx[0]) + sc1 * (sumi[1] - 4 * sumx[1]));
    }
};

/* The four table values (int8, packed) of the four nibbles of bytes 0 and 1 of q, low nibble
 * first: byte 2i of the result is t[q's byte i & 15], byte 2i + 1 t[q's byte i >> 4]; t is the
 * 16-entry table packed little-endian into four words. Two byte permutations look each nibble up
 * in entries 0..7 and 8..15 (by its low 3 bits), a third keeps the one its top bit names. */
static __device__ __forceinline__ uint32_t gm_table16_pair(uint32_t q, const uint32_t t[4])
{
    const uint32_t idx = q & 0x7777u, top = (q & 0x8888u) >> 1; /* top: 4 where the nibble is 8..15 */
    const uint32_t lo8 = __byte_perm(t[0], t[1], idx), hi8 = __byte_perm(t[2], t[3], idx);
    return __byte_perm(lo8, hi8, 0x3210u | top);
}

/* The table values of the 8 nibbles of q (4 bytes of a Q4_0-ordered block): .x those of the low
 * nibbles (bytes 0..3 in order), .y those of the high nibbles. */
static __device__ __forceinline__ int2 gm_table16(uint32_t q, const uint32_t t[4])
{
    const uint32_t a = gm_table16_pair(q, t), b = gm_table16_pair(q >> 16, t);
    return make_int2((int)__byte_perm(a, b, 0x6420u), (int)__byte_perm(a, b, 0x7531u));
}

/* A 16-entry int8 table from constant memory into four words, as gm_table16 takes it. */
static __device__ __forceinline__ void gm_table16_load(const int8_t *kv, uint32_t t[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        t[i] = (uint32_t)(uint8_t)kv[4 * i] | ((uint32_t)(uint8_t)kv[4 * i + 1] << 8) |
               ((uint32_t)(uint8_t)kv[4 * i + 2] << 16) | ((uint32_t)(uint8_t)kv[4 * i + 3] << 24);
}

/* IQ4_XS: each lane one sub-block of 32: its 16 bytes of nibbles (two 8-byte loads: the
 * 136-byte blocks keep 8-byte alignment) mapped through the table to int8 values four at a time,
 * eight dp4a (low nibbles with the vector's bytes 0..15, high with 16..31), scaled by
 * d * (ls - 32). */
struct iq4_xs {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq4_xs), lanes = 8, align = 8;
    unsigned ib;
    uint32_t t[4];
    __device__ explicit iq4_xs(unsigned i) : ib(i) { gm_table16_load(gm_dev_kvalues_iq4nl, t); }
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint2 q0 = *(const uint2 *)(blk + offsetof(gm_block_iq4_xs, qs) + 16 * ib);
        const uint2 q1 = *(const uint2 *)(blk + offsetof(gm_block_iq4_xs, qs) + 16 * ib + 8);
        const uint32_t q[4] = {q0.x, q0.y, q1.x, q1.y};
        const gm_cuda_q8_block *xb = x + ib;
        const int4 x0 = *(const int4 *)(xb->qs), x1 = *(const int4 *)(xb->qs + 16);
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int sumi = 0;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int2 v = gm_table16(q[g], t);
            sumi = __dp4a(v.x, xi[g], sumi);
            sumi = __dp4a(v.y, xi[g + 4], sumi);
        }
        const int ls = ((blk[offsetof(gm_block_iq4_xs, scales_l) + ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                       (((gm_u16_at(blk + offsetof(gm_block_iq4_xs, scales_h)) >> (2 * ib)) & 3) << 4);
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq4_xs, d)));
        return xb->d * d * (float)(ls - 32) * (float)sumi;
    }
};

/* MXFP4 (a block is one of the vector's): each lane half a block: 8 of its 16 bytes (byte loads:
 * the 17-byte blocks align nothing), their nibbles mapped through the table, four dp4a (low
 * nibbles with the vector's bytes 8h.., high with 16 + 8h..), scaled by the E8M0 exponent's
 * 2^(e-127) / 2. */
struct mxfp4 {
    static constexpr unsigned values = GM_QK_MXFP4, bytes = sizeof(gm_block_mxfp4), lanes = 2, align = 1;
    unsigned h;
    uint32_t t[4];
    __device__ explicit mxfp4(unsigned i) : h(i) { gm_table16_load(gm_dev_kvalues_mxfp4, t); }
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *qp = blk + offsetof(gm_block_mxfp4, qs) + 8 * h;
        const int *xi = (const int *)x->qs;
        int sumi = 0;
#pragma unroll
        for (int g = 0; g < 2; g++) {
            const uint8_t *p = qp + 4 * g;
            const uint32_t q = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
            const int2 v = gm_table16(q, t);
            sumi = __dp4a(v.x, xi[2 * h + g], sumi);
            sumi = __dp4a(v.y, xi[4 + 2 * h + g], sumi);
        }
        const float d = gm_e8m0_to_f32_half(blk[offsetof(gm_block_mxfp4, e)]);
        return d * x->d * (float)sumi;
    }
};

/* Q6_K: each lane one run of 32 values (two 16-value scales): its 6-bit codes rebuilt from ql and
 * qh four at a time (the 210-byte blocks align nothing, so byte loads), two dp4a sums per half,
 * less 32 times the vector's sum. */
struct q6_K {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_q6_K), lanes = 8, align = 1;
    unsigned sb, c, k, lo_sh, hi_sh;
    __device__ explicit q6_K(unsigned i) : sb(i), c(i / 4), k(i % 4), lo_sh(4 * (k / 2)), hi_sh(2 * k) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *ql = blk + offsetof(gm_block_q6_K, ql) + c * 64 + (k % 2) * 32;
        const uint8_t *qh = blk + offsetof(gm_block_q6_K, qh) + c * 32;
        const gm_cuda_q8_block *xb = x + sb;
        const int *xi = (const int *)xb->qs;
        int sumi[2] = {0, 0}, sumx[2] = {0, 0};
#pragma unroll
        for (int g = 0; g < 8; g++) {
            uint32_t packed = 0;
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int at = 4 * g + t;
                const uint32_t q = ((ql[at] >> lo_sh) & 0x0fu) | (((qh[at] >> hi_sh) & 3u) << 4);
                packed |= q << (8 * t);
            }
            sumi[g / 4] = __dp4a((int)packed, xi[g], sumi[g / 4]);
            sumx[g / 4] = __dp4a(0x01010101, xi[g], sumx[g / 4]);
        }
        const int8_t *sc = (const int8_t *)(blk + offsetof(gm_block_q6_K, scales)) + 2 * sb;
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_q6_K, d)));
        return xb->d * d * ((float)sc[0] * (float)(sumi[0] - 32 * sumx[0]) + (float)sc[1] * (float)(sumi[1] - 32 * sumx[1]));
    }
};

/* Q8_0: each lane 8 values of a block (two dp4a; the codes read byte by byte: a 34-byte block
 * aligns them on 2 bytes at best). */
/* Q8_0's blocks are 34 bytes, so in rows that start on a 4-byte boundary (align 4) every other
 * block starts 2 bytes past one: a lane reads the aligned 32-bit words around its 8 codes and
 * shifts them into place (two or three words, where byte loads took eight), and the scale from the
 * aligned word that holds it (the block's first, or the one before, inside the previous block). */
struct q8_0 {
    static constexpr unsigned values = GM_QK8_0, bytes = sizeof(gm_block_q8_0), lanes = 4, align = 4;
    unsigned k0;
    __device__ explicit q8_0(unsigned i) : k0(i * 8) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uintptr_t at = (uintptr_t)(blk + offsetof(gm_block_q8_0, qs) + k0);
        const uint32_t *p = (const uint32_t *)(at & ~(uintptr_t)3);
        const unsigned sh = (unsigned)(at & 3) * 8;
        const uint32_t w0 = p[0], w1 = p[1], w2 = sh ? p[2] : 0u;
        const int q0 = (int)(uint32_t)((((uint64_t)w1 << 32) | w0) >> sh);
        const int q1 = (int)(uint32_t)((((uint64_t)w2 << 32) | w1) >> sh);
        const uintptr_t b = (uintptr_t)blk;
        const uint32_t dw = *(const uint32_t *)(b & ~(uintptr_t)3);
        const uint16_t dbits = (uint16_t)((b & 2) ? dw >> 16 : dw & 0xffffu);
        const int2 xi = *(const int2 *)(x->qs + k0);
        const float d = gm_f16_to_f32(dbits);
        return d * x->d * (float)__dp4a(q1, xi.y, __dp4a(q0, xi.x, 0));
    }
};

/* The eight int8 values of a grid row of magnitudes up to 127 (g: four bytes) with the signs of
 * bits 0..3 of s applied, as one word for dp4a: a set bit's byte negated (~g + 1, which does not
 * carry out of its byte for 0 < g < 128). */
static __device__ __forceinline__ uint32_t gm_signed4(uint32_t g, uint32_t s)
{
    const uint32_t m = ((s & 0x0fu) * 0x00204081u) & 0x01010101u; /* bit k of s to byte k's low bit */
    return (g ^ (m * 0xffu)) + m;
}

/* The IQ2 and IQ3 types: each lane one sub-block of 32 (four runs of 8), its grid rows read whole
 * from the device's grids (blocks.cuh), their signs applied four bytes at a time (gm_signed4),
 * eight dp4a with the vector's bytes, scaled once (IQ2_XS and IQ2_S twice: a scale a half). The
 * blocks keep 2-byte alignment: their fields are read 16 bits at a time. */
static __device__ __forceinline__ uint32_t gm_u32_at2(const uint8_t *p)
{
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

/* A run of 8: grid row g (two words) with the signs of byte s, against the vector's 8 bytes at
 * xi, added to acc. */
static __device__ __forceinline__ int gm_iq_run8(uint2 g, uint32_t s, const int *xi, int acc)
{
    return __dp4a((int)gm_signed4(g.y, s >> 4), xi[1], __dp4a((int)gm_signed4(g.x, s), xi[0], acc));
}

/* IQ2_XS's and IQ2_S's sub-block: runs 0-1 and 2-3 (sums sumi) under the low and the high nibble
 * of scale byte sc, each d (0.5 + s) / 4. */
static __device__ __forceinline__ float gm_iq2_halves(float d, uint8_t sc, const int sumi[2])
{
    const float db0 = d * (0.5f + (float)(sc & 0x0f)) * 0.25f, db1 = d * (0.5f + (float)(sc >> 4)) * 0.25f;
    return db0 * (float)sumi[0] + db1 * (float)sumi[1];
}

/* IQ2_XXS: a sub-block's 4 grid rows (bytes), then 4 x 7-bit sign indices and a 4-bit scale. */
struct iq2_xxs {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq2_xxs), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq2_xxs(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *q = blk + offsetof(gm_block_iq2_xxs, qs) + 8 * ib;
        const uint32_t idx = gm_u32_at2(q), aux = gm_u32_at2(q + 4);
        const int *xi = (const int *)x[ib].qs;
        int sumi = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint2 g = *(const uint2 *)gm_dev_iq2xxs_grid[(idx >> (8 * l)) & 0xff];
            sumi = gm_iq_run8(g, gm_dev_ksigns_iq2xs[(aux >> (7 * l)) & 127], xi + 2 * l, sumi);
        }
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq2_xxs, d)));
        return x[ib].d * (d * (0.5f + (float)(aux >> 28)) * 0.25f) * (float)sumi;
    }
};

/* IQ2_XS: a uint16 a run (9 bits of grid row, 7 of sign index), two 4-bit scales a sub-block. */
struct iq2_xs {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq2_xs), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq2_xs(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint16_t *q = (const uint16_t *)(blk + offsetof(gm_block_iq2_xs, qs)) + 4 * ib;
        const int *xi = (const int *)x[ib].qs;
        int sumi[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint2 g = *(const uint2 *)gm_dev_iq2xs_grid[q[l] & 511];
            sumi[l / 2] = gm_iq_run8(g, gm_dev_ksigns_iq2xs[q[l] >> 9], xi + 2 * l, sumi[l / 2]);
        }
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq2_xs, d)));
        return x[ib].d * gm_iq2_halves(d, blk[offsetof(gm_block_iq2_xs, scales) + ib], sumi);
    }
};

/* IQ3_XXS: two grid rows of 4 a run (bytes of qs), the sub-blocks' uint32 of signs and scale
 * after the 64 indices. */
struct iq3_xxs {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq3_xxs), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq3_xxs(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *qs = blk + offsetof(gm_block_iq3_xxs, qs);
        const uint32_t aux = gm_u32_at2(qs + GM_QK_K / 4 + 4 * ib);
        const int *xi = (const int *)x[ib].qs;
        int sumi = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t s = gm_dev_ksigns_iq2xs[(aux >> (7 * l)) & 127];
            const uint2 g = {*(const uint32_t *)gm_dev_iq3xxs_grid[qs[8 * ib + 2 * l]],
                             *(const uint32_t *)gm_dev_iq3xxs_grid[qs[8 * ib + 2 * l + 1]]};
            sumi = gm_iq_run8(g, s, xi + 2 * l, sumi);
        }
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq3_xxs, d)));
        return x[ib].d * (d * (0.5f + (float)(aux >> 28)) * 0.5f) * (float)sumi;
    }
};

/* IQ2_S: a run's grid row 8 bits of qs and 2 of qh, its signs a byte of their own. */
struct iq2_s {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq2_s), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq2_s(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *qs = blk + offsetof(gm_block_iq2_s, qs);
        const uint32_t qh = blk[offsetof(gm_block_iq2_s, qh) + ib];
        const int *xi = (const int *)x[ib].qs;
        int sumi[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint2 g = *(const uint2 *)gm_dev_iq2s_grid[qs[4 * ib + l] | (((qh >> (2 * l)) & 3) << 8)];
            sumi[l / 2] = gm_iq_run8(g, qs[GM_QK_K / 8 + 4 * ib + l], xi + 2 * l, sumi[l / 2]);
        }
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq2_s, d)));
        return x[ib].d * gm_iq2_halves(d, blk[offsetof(gm_block_iq2_s, scales) + ib], sumi);
    }
};

/* IQ3_S: grid rows of 4 from 8 bits of qs and 1 of qh, a sign byte a run, a 4-bit scale a
 * sub-block: d (1 + 2 s). */
struct iq3_s {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq3_s), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq3_s(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *qs = blk + offsetof(gm_block_iq3_s, qs);
        const uint32_t qh = blk[offsetof(gm_block_iq3_s, qh) + ib];
        const int *xi = (const int *)x[ib].qs;
        int sumi = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t s = blk[offsetof(gm_block_iq3_s, signs) + 4 * ib + l];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int k = 8 * ib + 2 * l + h;
                const uint32_t g = *(const uint32_t *)gm_dev_iq3s_grid[qs[k] | (((qh >> (2 * l + h)) & 1) << 8)];
                sumi = __dp4a((int)gm_signed4(g, s >> (4 * h)), xi[2 * l + h], sumi);
            }
        }
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq3_s, d)));
        const int sc = (blk[offsetof(gm_block_iq3_s, scales) + ib / 2] >> (4 * (ib % 2))) & 0x0f;
        return x[ib].d * (d * (float)(1 + 2 * sc)) * (float)sumi;
    }
};

/* IQ1_S and IQ1_M: grid rows of -1, 0 and 1 (int8 already) plus a delta: a run's sum is
 * sum(grid q) + delta sum(q), the vector's sum of a run by a dp4a with ones. IQ1_S: a scale and a
 * delta sign a sub-block (the top bits of its uint16 qh). */
struct iq1_s {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq1_s), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq1_s(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *qs = blk + offsetof(gm_block_iq1_s, qs) + 4 * ib;
        const uint32_t qh = *(const uint16_t *)(blk + offsetof(gm_block_iq1_s, qh) + 2 * ib);
        const int *xi = (const int *)x[ib].qs;
        int sumi = 0, sumx = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint2 g = *(const uint2 *)gm_dev_iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
            sumi = __dp4a((int)g.y, xi[2 * l + 1], __dp4a((int)g.x, xi[2 * l], sumi));
            sumx = __dp4a(0x01010101, xi[2 * l + 1], __dp4a(0x01010101, xi[2 * l], sumx));
        }
        const float d = gm_f16_to_f32(gm_u16_at(blk + offsetof(gm_block_iq1_s, d)));
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = (qh & 0x8000) ? -GM_IQ1S_DELTA : GM_IQ1S_DELTA;
        return x[ib].d * dl * ((float)sumi + delta * (float)sumx);
    }
};

/* IQ1_M: a run's 3 high index bits and delta sign a nibble of qh, two 3-bit scales a sub-block,
 * the block's f16 scale over the top nibbles of the four scale words. */
struct iq1_m {
    static constexpr unsigned values = GM_QK_K, bytes = sizeof(gm_block_iq1_m), lanes = 8, align = 2;
    unsigned ib;
    __device__ explicit iq1_m(unsigned i) : ib(i) {}
    __device__ float dot(const uint8_t *blk, const gm_cuda_q8_block *x) const
    {
        const uint8_t *qs = blk + offsetof(gm_block_iq1_m, qs) + 4 * ib;
        const uint8_t *qh = blk + offsetof(gm_block_iq1_m, qh) + 2 * ib;
        const int *xi = (const int *)x[ib].qs;
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t h = qh[l / 2] >> (4 * (l % 2));
            const uint2 g = *(const uint2 *)gm_dev_iq1s_grid[qs[l] | ((h & 7) << 8)];
            const int si = __dp4a((int)g.y, xi[2 * l + 1], __dp4a((int)g.x, xi[2 * l], 0));
            const int sx = __dp4a(0x01010101, xi[2 * l + 1], __dp4a(0x01010101, xi[2 * l], 0));
            sum[l / 2] += (float)si + ((h & 8) ? -GM_IQ1M_DELTA : GM_IQ1M_DELTA) * (float)sx;
        }
        const uint16_t *sc = (const uint16_t *)(blk + offsetof(gm_block_iq1_m, scales));
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = gm_f16_to_f32(dbits);
        const uint32_t w = sc[ib / 2] >> (6 * (ib % 2));
        const float dl0 = d * (float)(2 * (w & 7) + 1), dl1 = d * (float)(2 * ((w >> 3) & 7) + 1);
        return x[ib].d * (dl0 * sum[0] + dl1 * sum[1]);
    }
};

} // namespace

/* The type T, as a value a generic lambda can take (the kernels' T are built on the device only). */
template <typename T> struct gm_tag {
    typedef T type;
};

/* Calls f with gm_tag<T> of type's 8-bit kernel T, or returns false for a type without one. */
template <typename F> static bool gm_with_q8_dot(uint32_t type, F f)
{
    switch (type) {
    case GM_TYPE_Q4_K: f(gm_tag<q4_K>()); return true;
    case GM_TYPE_Q5_K: f(gm_tag<q5_K>()); return true;
    case GM_TYPE_IQ4_XS: f(gm_tag<iq4_xs>()); return true;
    case GM_TYPE_Q2_K: f(gm_tag<q2_K>()); return true;
    case GM_TYPE_Q3_K: f(gm_tag<q3_K>()); return true;
    case GM_TYPE_Q6_K: f(gm_tag<q6_K>()); return true;
    case GM_TYPE_Q8_0: f(gm_tag<q8_0>()); return true;
    case GM_TYPE_MXFP4: f(gm_tag<mxfp4>()); return true;
    case GM_TYPE_IQ2_XXS: f(gm_tag<iq2_xxs>()); return true;
    case GM_TYPE_IQ2_XS: f(gm_tag<iq2_xs>()); return true;
    case GM_TYPE_IQ3_XXS: f(gm_tag<iq3_xxs>()); return true;
    case GM_TYPE_IQ2_S: f(gm_tag<iq2_s>()); return true;
    case GM_TYPE_IQ3_S: f(gm_tag<iq3_s>()); return true;
    case GM_TYPE_IQ1_S: f(gm_tag<iq1_s>()); return true;
    case GM_TYPE_IQ1_M: f(gm_tag<iq1_m>()); return true;
    default: return false;
    }
}

#endif
