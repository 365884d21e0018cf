/* backend/cuda/mm_kernels: matrix-matrix products of a prompt's chunk on the device (prefill.cu
 * launches them; internal to the module). Y = X W^T for n rows of X (tokens, or the (token,
 * expert) pairs of a layer's routed experts, gathered by index) and a weight matrix W of any type
 * blocks.cuh decodes:
 *
 *   mm_tc: the tensor cores' half-precision products. A thread block takes a tile of BM weight
 *   rows by MM_BN rows of X, BK values a step (64, or 32 for rows of an odd number of 32): it decodes its weights' values (blocks.cuh's
 *   D::at, the CPU reference's arithmetic) into shared memory as half, beside X's rows, which
 *   mm_to_half made half (saturated to its range) once for every product that reads them, and
 *   its warps multiply them by WMMA fragments of 16 x 16 x 16, summed in float32. A weight tile is
 *   decoded once for MM_BN rows of X, so decoding costs a chunk's tokens or an expert's pairs
 *   little.
 *
 *   mm_f32: float32 weights (routers, a shared expert's gate) in float32 throughout, so that the
 *   routing sees the logits the CPU computes to rounding: 16 x 16 tiles of outputs, 4 sums a
 *   thread over a quarter of the columns.
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
#define MM_BK 32u /* values a step, at least: every type's rows are whole blocks of 32 */

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
 * aligned for them (mm_wide_ok; the VRAM tier's expert slots are 256-byte aligned): Q4_K here and
 * for steps of 64 (mm_loader2), Q8_0 for steps of 64 only (its wide rows, of an even number of
 * blocks, always take them; a frame of steps of 32 with WIDE, never launched, has the generic one). */
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
 * consecutive bytes of qs; two 16-byte loads (a block is 144 bytes, its header of d, dmin and the
 * 12 scale bytes at 0, its codes at 16, 48, ..., and a row of whole blocks starts 16-byte aligned
 * in the slabs): a load's rows are each a line of the cache, so that fewer, wider loads are what
 * the L1 cache, which bounds these products, serves fastest. */
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
        static_assert(offsetof(gm_block_q4_K, scales) == 4 && offsetof(gm_block_q4_K, qs) == 16, "Q4_K's header");
        raw r;
        const uint4 h = *(const uint4 *)b;
        r.dm = h.x, r.sc[0] = h.y, r.sc[1] = h.z, r.sc[2] = h.w;
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

/* Whether mm_tc's wide loader of type D takes rows of row_bytes from w on (w NULL: the experts',
 * whose slots are 256-byte aligned). */
template <typename D> static inline bool mm_wide_ok(const void *w, uint64_t row_bytes)
{
    constexpr uint64_t align = std::is_same<D, gm_deq_q45_K<false>>::value ? 16 : std::is_same<D, gm_deq_q8_0>::value ? 4 : 0;
    if constexpr (align == 0)
        return false;
    else
        return row_bytes % align == 0 && (uintptr_t)w % align == 0;
}

/* The step's column of a thread's values 8 q .. 8 q + 7 where it has 16 from lc on and 16 from lc +
 * 32 on (mm_loader2's default). */
static __device__ __forceinline__ unsigned mm_col2(unsigned lc, unsigned q) { return lc + 32 * (q / 2) + 8 * (q % 2); }

/* A thread's 32 values of a step of 64 (c0 = k0 + lc, lc 0 or 16): by default 16 from c0 on and 16
 * from c0 + 32 on, two of the loader's fetches; col(lc, q) is the step's column of the thread's
 * values 8 q .. 8 q + 7 (decode's v0 the first 16, v1 the others). */
template <typename D, bool WIDE> struct mm_loader2 {
    using L = mm_loader<D, WIDE>;
    static __device__ __forceinline__ unsigned col(unsigned lc, unsigned q) { return mm_col2(lc, q); }
    struct raw {
        typename L::raw a, b;
    };
    static __device__ __forceinline__ raw fetch(const uint8_t *row, uint64_t c0)
    {
        return raw{L::fetch(row, c0), L::fetch(row, c0 + 32)};
    }
    static __device__ __forceinline__ void decode(const raw &r, float v0[16], float v1[16])
    {
        L::decode(r.a, v0);
        L::decode(r.b, v1);
    }
};

/* Q4_K: c0 in an even sub-block, c0 + 32 in the odd one after it, whose codes are the high nibbles
 * of the same 16 bytes: one fetch. */
template <> struct mm_loader2<gm_deq_q45_K<false>, true> {
    using L = mm_loader<gm_deq_q45_K<false>, true>;
    using raw = L::raw;
    static __device__ __forceinline__ unsigned col(unsigned lc, unsigned q) { return mm_col2(lc, q); }
    static __device__ __forceinline__ raw fetch(const uint8_t *row, uint64_t c0) { return L::fetch(row, c0); }
    static __device__ __forceinline__ void decode(const raw &r, float v0[16], float v1[16])
    {
        L::decode(r, v0);
        raw odd = r;
        odd.sb = r.sb + 1;
        L::decode(odd, v1);
    }
};

/* Q8_0: the step's two blocks (68 bytes from a 4-byte boundary: rows of an even number of blocks),
 * a block a thread: lc 0 the first (d and the codes in words 0 .. 8, the codes two bytes off the
 * words), lc 16 the second (words 8 .. 16: d the high half of word 8, the codes whole words); nine
 * 4-byte loads where 16-value fetches take eighteen of 2 bytes. */
template <> struct mm_loader2<gm_deq_q8_0, true> {
    static __device__ __forceinline__ unsigned col(unsigned lc, unsigned q) { return 2 * lc + 8 * q; }
    struct raw {
        uint32_t w[9];
        bool second;
    };
    static __device__ __forceinline__ raw fetch(const uint8_t *row, uint64_t c0)
    {
        static_assert(sizeof(gm_block_q8_0) == 34, "Q8_0's block");
        raw r;
        r.second = c0 % 64 != 0;
        const uint32_t *w = (const uint32_t *)(row + c0 / 64 * 2 * sizeof(gm_block_q8_0)) + (r.second ? 8 : 0);
#pragma unroll
        for (int i = 0; i < 9; i++)
            r.w[i] = w[i];
        return r;
    }
    static __device__ __forceinline__ void decode(const raw &r, float v0[16], float v1[16])
    {
        const float d = gm_f16_to_f32((uint16_t)__byte_perm(r.w[0], 0, r.second ? 0x3232u : 0x1010u));
        const unsigned sel = r.second ? 0x7654u : 0x5432u; /* codes 4i .. 4i + 3: a word, or two halves */
#pragma unroll
        for (unsigned i = 0; i < 8; i++) {
            const uint32_t q4 = __byte_perm(r.w[i], r.w[i + 1], sel) ^ 0x80808080u; /* + 128 */
            float *v = i < 4 ? v0 + 4 * i : v1 + 4 * (i - 4);
#pragma unroll
            for (unsigned b = 0; b < 4; b++)
                v[b] = (mm_byte_f32(q4, b) - 128.0f) * d;
        }
    }
};

/* One step of mm_tc in shared memory: BK values of the tile's BM weight rows and of its rows of
 * X, as half, each row padded by 8 (16 bytes, so that the threads' 16-byte stores and the WMMA
 * loads spread over the banks). */
template <unsigned BM, unsigned BK> struct mm_stage {
    static constexpr unsigned ld = BK + 8;
    __half w[BM][ld];
    __half x[MM_BN][ld];
};

/* The shared memory mm_tc<., ., BM, BK> takes (dynamic: over the 48 KiB of a static array for BM
 * 128 and BK 64): its two stages, whose room the outputs then take. */
template <unsigned BM, unsigned BK> static constexpr size_t mm_tc_smem()
{
    const size_t stages = 2 * sizeof(mm_stage<BM, BK>), outs = (size_t)MM_BN * (BM + 4) * sizeof(float);
    return stages > outs ? stages : outs;
}

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
 * a tile of the table), by 2 BM threads: thread i decodes 16 values of weight row i / 2 a step for
 * every 32 of BK (two fetches for BK 64; one for Q4_K, whose 16 code bytes hold both) and loads
 * its share of X's (MM_BN BK / 2 BM values), and warp w multiplies rows 32 (w % (BM / 32)) .. of W
 * by rows 32 (w / (BM / 32)) .. of X. A tile of 128 rows reads its rows of X half as often (they
 * are most of a grouped tile's loads: 2 bytes a value against 0.56 for Q4_K's); a step of 64
 * values pays a barrier and a load's latency for twice the products of one of 32. Two stages in
 * shared memory (mm_tc_smem bytes, dynamic): while the warps multiply one step's halves, each
 * thread's loads of the next step are in flight, and it then decodes them into the other stage,
 * so that a step needs one barrier. A warp whose 32 rows of X are all past the tile's count skips
 * the products (a grouped tile of at most 32 pairs: half of them), one whose last 16 are skips
 * theirs, and X's rows past the count rounded up to 16 are never stored: a grouped tile's count
 * is often a few pairs, and shared memory's traffic is what bounds these products. */
template <typename D, bool WIDE, unsigned BM, unsigned BK>
static __global__ void __launch_bounds__(2 * BM) mm_tc(gm_mm_args a)
{
    using namespace nvcuda;
    static_assert(BK == 32 || BK == 64, "a step is one or two fetches of 16 values a thread");
    using L = mm_loader<D, WIDE>;
    using L2 = mm_loader2<D, WIDE>;
    using S = mm_stage<BM, BK>;
    constexpr unsigned XV = MM_BN * BK / (2 * BM); /* X's values a thread loads a step: 8 to 32 */
#ifdef __CUDACC__
    extern __shared__ __align__(32) unsigned char smem[];
#else
    __shared__ __align__(32) unsigned char smem[mm_tc_smem<BM, BK>()];
#endif
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
    /* the thread's weights: 16 values of row lr from lc on (and from lc + 32 on); its X: XV values
     * of row xr from xc on */
    const unsigned lr = tid / 2, lc = (tid % 2) * 16;
    const unsigned xr = tid / (BK / XV), xc = (tid % (BK / XV)) * XV;
    const uint64_t wr = r0 + lr;
    const uint8_t *wrow = wr < n_rows ? w + wr * a.row_bytes : NULL;
    const __half *xrow = NULL;
    if (xr < cnt)
        xrow = (const __half *)a.xh + (uint64_t)(a.xrow ? a.xrow[first + xr] : first + xr) * a.ldx;
    const unsigned wm = (warp % (BM / 32)) * 32, wn = (warp / (BM / 32)) * 32;
    const bool live = wn < cnt;
    /* the warp's 16-row halves of X that hold pairs (a grouped tile's count is often small): 2, or 1
     * when its second half is past the count, whose fragments it then neither loads nor multiplies */
    const int nj = wn + 16 < cnt ? 2 : 1;
    const bool xlive = xr < (cnt + 15) / 16 * 16; /* X's rows the products read (the others not stored) */
    using raw_t = typename std::conditional<BK == 64, typename L2::raw, typename L::raw>::type;
    raw_t rw{};
    uint4 rx[XV / 8];
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (unsigned q = 0; q < XV / 8; q++)
        rx[q] = zero;
    /* the step's halves into stage s: the weights decoded, X's as loaded (zeros past the rows) */
    auto put = [&](S &s) {
        uint4 hw[BK / 16];
#pragma unroll
        for (unsigned q = 0; q < BK / 16; q++)
            hw[q] = zero;
        if (wrow) {
            if constexpr (BK == 64) {
                float v0[16], v1[16];
                L2::decode(rw, v0, v1);
                mm_pack(v0, hw);
                mm_pack(v1, hw + 2);
            } else {
                float v[16];
                L::decode(rw, v);
                mm_pack(v, hw);
            }
        }
#pragma unroll
        for (unsigned q = 0; q < BK / 16; q++)
            *(uint4 *)&s.w[lr][BK == 64 ? L2::col(lc, q) : lc + 8 * q] = hw[q];
        if (xlive)
#pragma unroll
            for (unsigned q = 0; q < XV / 8; q++)
                *(uint4 *)&s.x[xr][xc + 8 * q] = rx[q];
    };
    auto fetch = [&](uint64_t k0) {
        if (wrow) {
            if constexpr (BK == 64)
                rw = L2::fetch(wrow, k0 + lc);
            else
                rw = L::fetch(wrow, k0 + lc);
        }
        if (xrow)
#pragma unroll
            for (unsigned q = 0; q < XV / 8; q++)
                rx[q] = *(const uint4 *)(xrow + k0 + xc + 8 * q);
    };
    fetch(0);
    put(stage[0]);
    __syncthreads();
    const uint64_t steps = a.n_cols / BK;
    for (uint64_t s = 0; s < steps; s++) {
        const S &cur = stage[s & 1];
        const bool more = s + 1 < steps;
        if (more)
            fetch((s + 1) * BK);
        if (live) {
#pragma unroll
            for (unsigned kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
                for (int i = 0; i < 2; i++)
                    wmma::load_matrix_sync(fa[i], &cur.w[wm + 16 * i][kk], S::ld);
#pragma unroll
                for (int j = 0; j < 2; j++)
                    if (j < nj)
                        wmma::load_matrix_sync(fb[j], &cur.x[wn + 16 * j][kk], S::ld);
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        if (j < nj)
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

/* Float32 weights, float32 arithmetic: block (bx, by) the outputs of rows 16 bx .. and rows of X
 * 16 by .., in MM_F32_SPLIT groups of 64 threads, group g the g-th quarter of the columns (rounded
 * up to whole steps); thread (tx, ty) = (i % 8, i / 8) of a group the sums of rows 2 tx, 2 tx + 1
 * and of X's rows 2 ty, 2 ty + 1 over its columns (4 chains of its own, in column order), 64
 * values of each row a step through shared memory, a warp's load of a row 32 consecutive values
 * (one cache line), the next step's loads in flight while the thread sums this one; then the
 * groups' sums added in group order. Small tiles and four groups for many warps: a router's 128
 * rows by a chunk's 512 tokens make 256 blocks of 8 warps, where tiles of 64 x 64 made 16 blocks
 * (373 us a layer on an H100) and tiles of 16 x 16 in one group 256 blocks of 2 warps (80 us). */
#define MM_F32_TILE 16u
#define MM_F32_K 64u
#define MM_F32_SPLIT 4u
#define MM_F32_THREADS (MM_F32_K * MM_F32_SPLIT)
static __global__ void __launch_bounds__(MM_F32_THREADS) mm_f32(gm_mm_args a)
{
    static_assert(MM_F32_TILE == 16, "a group's thread loads one column of every row");
    /* [group][column][row], rows 18 apart: a thread's store of its column meets another's bank at
     * most twice, and a thread's two rows are one 8-byte load */
    __shared__ __align__(16) float wsh[MM_F32_SPLIT][MM_F32_K][MM_F32_TILE + 2],
        xsh[MM_F32_SPLIT][MM_F32_K][MM_F32_TILE + 2];
    const unsigned g = threadIdx.x / MM_F32_K, lk = threadIdx.x % MM_F32_K, tx = lk % 8, ty = lk / 8;
    const uint64_t r0 = (uint64_t)blockIdx.x * MM_F32_TILE;
    const uint32_t t0 = blockIdx.y * MM_F32_TILE;
    const float *w = (const float *)a.w;
    const uint64_t wstride = a.row_bytes / 4;
    /* the group's columns: every group the same number of steps (the barriers), those past its end 0 */
    const uint64_t per = (a.n_cols + MM_F32_SPLIT * MM_F32_K - 1) / (MM_F32_SPLIT * MM_F32_K) * MM_F32_K;
    const uint64_t c_begin = g * per, c_end = c_begin + per < a.n_cols ? c_begin + per : a.n_cols;
    const float *xr[MM_F32_TILE]; /* the tile's rows of X (NULL past them) */
#pragma unroll
    for (unsigned q = 0; q < MM_F32_TILE; q++)
        xr[q] = t0 + q < a.n ? a.x + (uint64_t)(a.xrow ? a.xrow[t0 + q] : t0 + q) * a.ldx : NULL;
    float wn[MM_F32_TILE], xn[MM_F32_TILE];
    /* the thread's loads: column k0 + lk of every row of the tile (0 past the matrix or the group's columns) */
    auto fetch = [&](uint64_t k0) {
        const uint64_t c = k0 + lk;
        const bool in = c < c_end;
#pragma unroll
        for (unsigned q = 0; q < MM_F32_TILE; q++) {
            wn[q] = in && r0 + q < a.n_rows ? w[(r0 + q) * wstride + c] : 0.0f;
            xn[q] = in && xr[q] ? xr[q][c] : 0.0f;
        }
    };
    float acc[2][2] = {};
    fetch(c_begin);
    for (uint64_t k0 = 0; k0 < per; k0 += MM_F32_K) {
#pragma unroll
        for (unsigned q = 0; q < MM_F32_TILE; q++)
            wsh[g][lk][q] = wn[q], xsh[g][lk][q] = xn[q];
        __syncthreads();
        if (k0 + MM_F32_K < per)
            fetch(c_begin + k0 + MM_F32_K);
#pragma unroll 16
        for (unsigned k = 0; k < MM_F32_K; k++) {
            const float2 wv = *(const float2 *)&wsh[g][k][2 * tx], xv = *(const float2 *)&xsh[g][k][2 * ty];
            acc[0][0] += wv.x * xv.x;
            acc[0][1] += wv.x * xv.y;
            acc[1][0] += wv.y * xv.x;
            acc[1][1] += wv.y * xv.y;
        }
        __syncthreads();
    }
    /* the groups' sums through shared memory (the tiles' room, free after the loop's last barrier) */
    float(*sum)[MM_F32_K][4] = (float(*)[MM_F32_K][4])wsh;
    static_assert(sizeof wsh >= sizeof(float) * MM_F32_SPLIT * MM_F32_K * 4, "the groups' sums");
#pragma unroll
    for (unsigned i = 0; i < 2; i++)
#pragma unroll
        for (unsigned j = 0; j < 2; j++)
            sum[g][lk][2 * i + j] = acc[i][j];
    __syncthreads();
    if (g)
        return;
#pragma unroll
    for (unsigned i = 0; i < 2; i++)
#pragma unroll
        for (unsigned j = 0; j < 2; j++) {
            float v = sum[0][lk][2 * i + j];
#pragma unroll
            for (unsigned h = 1; h < MM_F32_SPLIT; h++)
                v += sum[h][lk][2 * i + j];
            const uint64_t r = r0 + 2 * tx + i;
            const uint32_t t = t0 + 2 * ty + j;
            if (r < a.n_rows && t < a.n)
                a.y[(uint64_t)t * a.ldy + r] = v + (a.bias ? a.bias[r] : 0.0f);
        }
}

#endif
