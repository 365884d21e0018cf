/* backend/cuda/mm_kernels: matrix-matrix products of a prompt's chunk on the device (prefill.cu
 * launches them; internal to the module). Y = X W^T for n rows of X (tokens, or the (token,
 * expert) pairs of a layer's routed experts, gathered by index) and a weight matrix W of any type
 * blocks.cuh decodes:
 *
 *   mm_tc: the tensor cores' half-precision products. A thread block takes a tile of BM weight
 *   rows by MM_BN rows of X, MM_BK values a step: it decodes its weights' values (blocks.cuh's
 *   D::at, the CPU reference's arithmetic) into shared memory as half, beside X's rows, which
 *   mm_to_half made half (saturated to its range) once for every product that reads them, and
 *   its warps multiply them by WMMA fragments of 16 x 16 x 16, summed in float32. A weight tile is
 *   decoded once for MM_BN rows of X, so decoding costs a chunk's tokens or an expert's pairs
 *   little.
 *
 *   mm_f32: float32 weights (routers, a shared expert's gate) in float32 throughout, so that the
 *   routing sees the logits the CPU computes to rounding: 64 x 64 tiles of outputs, 16 a thread.
 *
 * Grouped products (the routed experts): MM_BN pairs of one expert a tile, from a tile table that
 * the device builds (prefill.cu's grouping); blocks past the table's count return at once, so that
 * a launch sized for the most tiles needs no count from the host. */
#ifndef GM_BACKEND_CUDA_MM_KERNELS_CUH
#define GM_BACKEND_CUDA_MM_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <type_traits>

#include "backend/cuda/blocks.cuh"
#include "backend/cuda/cuda.h"

#define MM_BN 64u /* rows of X a tile (weight rows: mm_tc's BM, 64 or 128) */
#define MM_BK 32u /* values a step: every type's rows are whole blocks of 32 */

/* A tile of a grouped product: n (<= MM_BN) pairs from pair first on, all of expert e. */
struct gm_mm_tile {
    uint32_t e, first, n;
};

#define GM_MM_MATS 3u /* matrices one launch of mm_tc takes (q, k and v) */

struct gm_mm_args {
    const uint8_t *w;                /* W (dense), or NULL: the experts' */
    const gm_cuda_expert *experts;   /* grouped: the layer's table of every expert (NULL: skipped) */
    uint32_t which;                  /* grouped: 0 gate, 1 up, 2 down */
    const gm_mm_tile *tiles;         /* grouped: the tiles, *n_tiles of them */
    const uint32_t *n_tiles;
    uint64_t row_bytes, n_rows, n_cols;
    const float *x;                  /* X's rows, ldx floats apart (mm_f32) */
    const uint16_t *xh;              /* X's rows as half, ldx apart, 16-byte aligned (mm_tc) */
    uint64_t ldx;                    /* a multiple of 8 for mm_tc */
    const uint32_t *xrow;            /* X's row of row i: xrow[i], or NULL: i */
    float *y;                        /* Y's rows (one per row of X, in the order of i), ldy floats apart */
    uint64_t ldy;
    uint32_t n;                      /* dense: rows of X */
    const float *bias;               /* added to Y's column r (n_rows floats), or NULL */
    /* dense, mm_tc: up to GM_MM_MATS matrices of one type and width over the same X in one launch
     * (blockIdx.z picks one; n_rows is the most rows, bias NULL); n_mats 0: w, y, n_rows, ldy */
    uint32_t n_mats;
    const uint8_t *mat_w[GM_MM_MATS];
    float *mat_y[GM_MM_MATS];
    uint64_t mat_rows[GM_MM_MATS], mat_ldy[GM_MM_MATS];
};

static __device__ __forceinline__ __half mm_half(float v)
{
    const float lim = 65504.0f;
    return __float2half_rn(v > lim ? lim : v < -lim ? -lim : v);
}

/* Byte b of q as a float, exactly: its bits put under the exponent of 2^23, which is then taken
 * away (one byte permutation and one addition where a conversion from integer takes several). */
static __device__ __forceinline__ float mm_byte_f32(uint32_t q, unsigned b)
{
    return __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7440u | b)) - 8388608.0f;
}

/* How a thread of mm_tc gets its 16 values of a weight row, from value c0 (a multiple of 16) on:
 * fetch loads what they need into registers (issued before the step before it computes, so that
 * the loads' latency is hidden behind its products), decode makes the values. The generic loader
 * leaves the loads to D::at; the types real files use most have their own (WIDE), with wide loads
 * of the block's codes and scales (their arithmetic is D::at's), for matrices whose rows start
 * aligned for them (mm_wide_ok; the VRAM tier's expert slots are 256-byte aligned). */
template <typename D, bool WIDE> struct mm_loader {
    struct raw {
        const uint8_t *row;
        uint64_t c0;
    };
    static __device__ __forceinline__ raw fetch(const uint8_t *row, uint64_t c0) { return raw{row, c0}; }
    static __device__ __forceinline__ void decode(const raw &r, float v[16])
    {
        if (D::block >= 16) { /* the 16 values in one block: its scales loaded once */
            const uint8_t *blk = r.row + r.c0 / D::block * D::bytes;
            const int e0 = (int)(r.c0 % D::block) & ~15;
#pragma unroll
            for (unsigned e = 0; e < 16; e++)
                v[e] = D::at(blk, e0 | (int)e);
        } else {
#pragma unroll
            for (unsigned e = 0; e < 16; e++)
                v[e] = D::at(r.row + (r.c0 + e) / D::block * D::bytes, (int)((r.c0 + e) % D::block));
        }
    }
};

/* Q4_K: 16 values of sub-block sb = (c0 % 256) / 32, codes the low or high nibbles of 16
 * consecutive bytes of qs (one 16-byte load: a block is 144 bytes, its codes at 16, 48, ..., and a
 * row of whole blocks starts 16-byte aligned in the slabs), d and dmin in one word, the 12 scale
 * bytes in three. */
template <> struct mm_loader<gm_deq_q45_K<false>, true> {
    struct raw {
        uint32_t dm, sc[3];
        uint4 q;
        unsigned sb;
    };
    static __device__ __forceinline__ raw fetch(const uint8_t *row, uint64_t c0)
    {
        const uint8_t *b = row + c0 / GM_QK_K * sizeof(gm_block_q4_K);
        const unsigned e = (unsigned)(c0 % GM_QK_K), sb = e / 32;
        raw r;
        r.dm = *(const uint32_t *)(b + offsetof(gm_block_q4_K, d));
        const uint32_t *sc = (const uint32_t *)(b + offsetof(gm_block_q4_K, scales));
        r.sc[0] = sc[0], r.sc[1] = sc[1], r.sc[2] = sc[2];
        r.q = *(const uint4 *)(b + offsetof(gm_block_q4_K, qs) + (sb / 2) * 32 + e % 32);
        r.sb = sb;
        return r;
    }
    static __device__ __forceinline__ void decode(const raw &r, float v[16])
    {
        int sc, m;
        gm_q4_K_scale_min_w((int)r.sb, r.sc, &sc, &m);
        const float d1 = gm_f16_to_f32((uint16_t)r.dm) * (float)sc;
        const float m1 = gm_f16_to_f32((uint16_t)(r.dm >> 16)) * (float)m;
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        const unsigned sh = 4 * (r.sb & 1);
#pragma unroll
        for (unsigned e = 0; e < 16; e += 4) {
            const uint32_t q4 = (w[e / 4] >> sh) & 0x0f0f0f0fu;
#pragma unroll
            for (unsigned b = 0; b < 4; b++)
                v[e + b] = d1 * mm_byte_f32(q4, b) - m1;
        }
    }
};

/* Q8_0: a block of 34 bytes (d, then 32 codes), so 2-byte loads: d, and the 16 codes in eight. */
template <> struct mm_loader<gm_deq_q8_0, true> {
    struct raw {
        uint16_t d, q[8];
    };
    static __device__ __forceinline__ raw fetch(const uint8_t *row, uint64_t c0)
    {
        const uint8_t *b = row + c0 / GM_QK8_0 * sizeof(gm_block_q8_0);
        const uint16_t *q = (const uint16_t *)(b + offsetof(gm_block_q8_0, qs) + c0 % GM_QK8_0);
        raw r;
        r.d = *(const uint16_t *)(b + offsetof(gm_block_q8_0, d));
#pragma unroll
        for (int i = 0; i < 8; i++)
            r.q[i] = q[i];
        return r;
    }
    static __device__ __forceinline__ void decode(const raw &r, float v[16])
    {
        const float d = gm_f16_to_f32(r.d);
#pragma unroll
        for (unsigned e = 0; e < 16; e += 4) {
            const uint32_t q4 = ((uint32_t)r.q[e / 2] | (uint32_t)r.q[e / 2 + 1] << 16) ^ 0x80808080u; /* + 128 */
#pragma unroll
            for (unsigned b = 0; b < 4; b++)
                v[e + b] = (mm_byte_f32(q4, b) - 128.0f) * d;
        }
    }
};

/* Whether mm_tc's wide loader of type D takes rows of row_bytes from w on (w NULL: the experts',
 * whose slots are 256-byte aligned). */
template <typename D> static inline bool mm_wide_ok(const void *w, uint64_t row_bytes)
{
    constexpr uint64_t align = std::is_same<D, gm_deq_q45_K<false>>::value ? 16 : std::is_same<D, gm_deq_q8_0>::value ? 2 : 0;
    if constexpr (align == 0)
        return false;
    else
        return row_bytes % align == 0 && (uintptr_t)w % align == 0;
}

/* One step of mm_tc in shared memory: MM_BK values of the tile's BM weight rows and of its rows
 * of X, as half, each row padded by 8 (16 bytes, so that the threads' 16-byte stores and the WMMA
 * loads spread over the banks). */
#define MM_LD (MM_BK + 8u)
template <unsigned BM> struct mm_stage {
    __half w[BM][MM_LD];
    __half x[MM_BN][MM_LD];
};

/* 16 values as 8 half pairs, rounded to nearest (the weights' halves: a value past the range is
 * infinite, as __float2half_rn makes it) */
static __device__ __forceinline__ void mm_pack(const float v[16], uint4 out[2])
{
    uint32_t h[8];
#pragma unroll
    for (unsigned i = 0; i < 8; i++) {
        const __half2 p = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        h[i] = *(const uint32_t *)&p;
    }
    out[0] = make_uint4(h[0], h[1], h[2], h[3]);
    out[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

/* X (n floats) as half, saturated to its range (mm_half), four values a thread: mm_tc's rows of X.
 * n is a multiple of 4 (rows of whole blocks of 32). */
static __global__ void mm_to_half(const float *x, __half *h, uint64_t n)
{
    const uint64_t i = 4 * ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n)
        return;
    const float4 v = *(const float4 *)(x + i);
    __half2 p[2];
    p[0] = __halves2half2(mm_half(v.x), mm_half(v.y));
    p[1] = __halves2half2(mm_half(v.z), mm_half(v.w));
    *(uint2 *)(h + i) = *(const uint2 *)p;
}

/* Y = X W^T over one tile (blockIdx.x: BM weight rows, 64 or 128; blockIdx.y: MM_BN rows of X, or
 * a tile of the table), by 2 BM threads: thread i decodes 16 values of weight row i / 2 a step and
 * loads its share of X's (16 values for BM 64, 8 for 128), and warp w multiplies rows
 * 32 (w % (BM / 32)) .. of W by rows 32 (w / (BM / 32)) .. of X. A tile of 128 rows reads its rows
 * of X half as often (they are most of a grouped tile's loads: 2 bytes a value against 0.56 for
 * Q4_K's). Two stages in shared memory: while the warps multiply one step's halves, each
 * thread's loads of the next step are in flight, and it then decodes them into the other stage,
 * so that a step needs one barrier. A warp whose 32 rows of X are all past the tile's count skips
 * the products (a grouped tile of at most 32 pairs: half of them). */
template <typename D, bool WIDE, unsigned BM> static __global__ void __launch_bounds__(2 * BM) mm_tc(gm_mm_args a)
{
    using namespace nvcuda;
    using L = mm_loader<D, WIDE>;
    using S = mm_stage<BM>;
    constexpr unsigned XV = MM_BN * MM_BK / (2 * BM); /* X's values a thread loads a step: 16 or 8 */
    constexpr size_t stages = 2 * sizeof(S), outs = (size_t)MM_BN * (BM + 4) * sizeof(float);
    __shared__ __align__(32) unsigned char smem[stages > outs ? stages : outs];
    S *stage = (S *)smem;
    const unsigned tid = threadIdx.x, warp = tid / 32;
    const uint64_t r0 = (uint64_t)blockIdx.x * BM;
    const uint8_t *w = a.w;
    float *y = a.y;
    uint64_t n_rows = a.n_rows, ldy = a.ldy;
    if (a.n_mats) {
        w = a.mat_w[blockIdx.z], y = a.mat_y[blockIdx.z];
        n_rows = a.mat_rows[blockIdx.z], ldy = a.mat_ldy[blockIdx.z];
        if (r0 >= n_rows) /* a shorter matrix's: its rows end before this tile */
            return;
    }
    uint32_t first, cnt;
    if (a.tiles) {
        if (blockIdx.y >= *a.n_tiles)
            return;
        const gm_mm_tile t = a.tiles[blockIdx.y];
        const gm_cuda_expert ex = a.experts[t.e];
        w = (const uint8_t *)(a.which == 0 ? ex.gate : a.which == 1 ? ex.up : ex.down);
        if (!w) /* an expert another call computes */
            return;
        first = t.first;
        cnt = t.n;
    } else {
        first = blockIdx.y * MM_BN;
        if (first >= a.n)
            return;
        cnt = a.n - first < MM_BN ? a.n - first : MM_BN;
    }
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    /* the thread's weights: 16 values of row lr from lc on; its X: XV values of row xr from xc on */
    const unsigned lr = tid / 2, lc = (tid % 2) * 16;
    const unsigned xr = tid / (MM_BK / XV), xc = (tid % (MM_BK / XV)) * XV;
    const uint64_t wr = r0 + lr;
    const uint8_t *wrow = wr < n_rows ? w + wr * a.row_bytes : NULL;
    const __half *xrow = NULL;
    if (xr < cnt)
        xrow = (const __half *)a.xh + (uint64_t)(a.xrow ? a.xrow[first + xr] : first + xr) * a.ldx;
    const unsigned wm = (warp % (BM / 32)) * 32, wn = (warp / (BM / 32)) * 32;
    const bool live = wn < cnt;
    typename L::raw rw{};
    uint4 rx[XV / 8];
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (unsigned q = 0; q < XV / 8; q++)
        rx[q] = zero;
    /* the step's halves into stage s: the weights decoded, X's as loaded (zeros past the rows) */
    auto put = [&](S &s) {
        uint4 hw[2] = {zero, zero};
        if (wrow) {
            float v[16];
            L::decode(rw, v);
            mm_pack(v, hw);
        }
        *(uint4 *)&s.w[lr][lc] = hw[0];
        *(uint4 *)&s.w[lr][lc + 8] = hw[1];
#pragma unroll
        for (unsigned q = 0; q < XV / 8; q++)
            *(uint4 *)&s.x[xr][xc + 8 * q] = rx[q];
    };
    auto fetch = [&](uint64_t k0) {
        if (wrow)
            rw = L::fetch(wrow, k0 + lc);
        if (xrow)
#pragma unroll
            for (unsigned q = 0; q < XV / 8; q++)
                rx[q] = *(const uint4 *)(xrow + k0 + xc + 8 * q);
    };
    fetch(0);
    put(stage[0]);
    __syncthreads();
    const uint64_t steps = a.n_cols / MM_BK;
    for (uint64_t s = 0; s < steps; s++) {
        const S &cur = stage[s & 1];
        const bool more = s + 1 < steps;
        if (more)
            fetch((s + 1) * MM_BK);
        if (live) {
#pragma unroll
            for (unsigned kk = 0; kk < MM_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
                for (int i = 0; i < 2; i++)
                    wmma::load_matrix_sync(fa[i], &cur.w[wm + 16 * i][kk], MM_LD);
#pragma unroll
                for (int j = 0; j < 2; j++)
                    wmma::load_matrix_sync(fb[j], &cur.x[wn + 16 * j][kk], MM_LD);
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
        }
        if (more)
            put(stage[(s + 1) & 1]); /* read by every warp before the barrier that ended step s - 1 */
        __syncthreads();
    }
    /* the stages are used up (the loop's last barrier): the outputs take their room */
    float(*cs)[BM + 4] = (float(*)[BM + 4])smem;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&cs[wn + 16 * j][wm + 16 * i], acc[i][j], BM + 4, wmma::mem_col_major);
    __syncthreads();
    for (unsigned i = tid; i < MM_BN * BM; i += 2 * BM) {
        const unsigned t = i / BM, r = i % BM;
        if (t < cnt && r0 + r < n_rows)
            y[(uint64_t)(first + t) * ldy + r0 + r] = cs[t][r] + (a.bias ? a.bias[r0 + r] : 0.0f);
    }
}


/* Float32 weights, float32 arithmetic: block (bx, by) the outputs of rows 64 bx .. and rows of X
 * 64 by .., thread (tx, ty) = (i % 16, i / 16) those of rows tx + 16 i' and ty + 16 j' (4 x 4 of
 * them); 16 values of each row a step through shared memory, each output summed in column order. */
#define MM_F32_TILE 64u
#define MM_F32_THREADS 256u
#define MM_F32_K 16u
static __global__ void __launch_bounds__(MM_F32_THREADS) mm_f32(gm_mm_args a)
{
    __shared__ float wsh[MM_F32_K][MM_F32_TILE + 4], xsh[MM_F32_K][MM_F32_TILE + 4];
    const unsigned tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const uint64_t r0 = (uint64_t)blockIdx.x * MM_F32_TILE;
    const uint32_t t0 = blockIdx.y * MM_F32_TILE;
    /* the thread's loads: 4 values of row (or row of X) threadIdx.x / 4, from (threadIdx.x % 4) 4 on */
    const unsigned lr = threadIdx.x / 4, lk = (threadIdx.x % 4) * 4;
    const float *w = (const float *)a.w;
    const float *wrow = r0 + lr < a.n_rows ? w + (r0 + lr) * (a.row_bytes / 4) : NULL;
    const float *xrow = t0 + lr < a.n ? a.x + (uint64_t)(a.xrow ? a.xrow[t0 + lr] : t0 + lr) * a.ldx : NULL;
    float acc[4][4] = {};
    for (uint64_t k0 = 0; k0 < a.n_cols; k0 += MM_F32_K) {
#pragma unroll
        for (unsigned q = 0; q < 4; q++) {
            const uint64_t c = k0 + lk + q;
            wsh[lk + q][lr] = wrow && c < a.n_cols ? wrow[c] : 0.0f;
            xsh[lk + q][lr] = xrow && c < a.n_cols ? xrow[c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (unsigned k = 0; k < MM_F32_K; k++) {
            float wv[4], xv[4];
#pragma unroll
            for (unsigned i = 0; i < 4; i++)
                wv[i] = wsh[k][tx + 16 * i], xv[i] = xsh[k][ty + 16 * i];
#pragma unroll
            for (unsigned i = 0; i < 4; i++)
#pragma unroll
                for (unsigned j = 0; j < 4; j++)
                    acc[i][j] += wv[i] * xv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (unsigned i = 0; i < 4; i++)
#pragma unroll
        for (unsigned j = 0; j < 4; j++) {
            const uint64_t r = r0 + tx + 16 * i;
            const uint32_t t = t0 + ty + 16 * j;
            if (r < a.n_rows && t < a.n)
                a.y[(uint64_t)t * a.ldy + r] = acc[i][j] + (a.bias ? a.bias[r] : 0.0f);
        }
}

#endif
