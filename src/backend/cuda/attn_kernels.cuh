/* backend/cuda/attn_kernels: the kernels of one token's attention on the device (attn.cu
 * launches them), apart from their launches so that tests/unit/test_cuda_emu.cpp can run the same
 * source on the CPU (internal to the module). Every kernel is one warp a thread block (attn_part
 * GM_ATTN_HEADS_PER_BLOCK warps, one head each; attn_merge GM_ATTN_MERGE_WARPS warps of one head,
 * which meet in shared memory once), and a warp's lanes meet only in shuffles.
 *
 * A head's hd values (hd a multiple of 32, at most GM_CUDA_ATTN_MAX_HD) are spread over the lanes
 * as value lane + 32 j, j < hd / 32, so that the loads of a row are coalesced and the partner of a
 * rotated pair is in the same lane (NeoX pairs i, i + n_rot / 2 with n_rot / 2 a multiple of 32)
 * or the next one (adjacent pairs 2i, 2i + 1). */
#ifndef GM_BACKEND_CUDA_ATTN_KERNELS_CUH
#define GM_BACKEND_CUDA_ATTN_KERNELS_CUH

#include <cuda_runtime.h>
#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

extern "C" {
#include "gguf/types.h"
#include "kernels/quant.h"
}
#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"

/* An f16 cache value as float: the conversion instruction on the device (exact, as
 * gm_f16_to_f32's bit manipulation, which the CPU emulation of these kernels runs). */
static __device__ __forceinline__ float gm_attn_f16(uint16_t h)
{
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return gm_f16_to_f32(h);
#endif
}

/* Query heads a thread block of attn_part takes, one warp each: a decode launches every possible
 * part of every head, most of which return at once, and fewer, larger blocks cost the block
 * scheduler less. */
#define GM_ATTN_HEADS_PER_BLOCK 4u

/* The sum of v over the warp's lanes, in every lane. */
static __device__ __forceinline__ float gm_warp_allsum(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The parts a head's positions are cut into, at most: each part a warp of attn_part, of at least
 * GM_ATTN_PART_MIN positions (a multiple of it). */
#define GM_ATTN_SPLITS 64u
#define GM_ATTN_PART_MIN 16u

/* The positions of a part over n_pos positions, and the parts: as many as keep every part at least
 * GM_ATTN_PART_MIN positions, up to GM_ATTN_SPLITS (the host's choice for a launch, and the
 * kernels' own where they read the position from device memory). */
static __host__ __device__ __forceinline__ uint32_t gm_attn_part_len(uint32_t n_pos)
{
    const uint32_t per = (n_pos + GM_ATTN_SPLITS - 1) / GM_ATTN_SPLITS;
    return (per + GM_ATTN_PART_MIN - 1) / GM_ATTN_PART_MIN * GM_ATTN_PART_MIN;
}
static __host__ __device__ __forceinline__ uint32_t gm_attn_n_split(uint32_t n_pos)
{
    const uint32_t part = gm_attn_part_len(n_pos);
    return (n_pos + part - 1) / part;
}

/* The token's rows after the projections: what attn_post does to them and where they go. */
struct gm_attn_post_args {
    float *q, *k, *v;                     /* n_head, n_kv, n_kv rows of hd */
    const float *bq, *bk, *bv;            /* biases, or NULL */
    const float *q_norm, *k_norm;         /* per-head RMSNorm weights [hd], or NULL */
    const float *cs;                      /* n_rot / 2 cosines, then n_rot / 2 sines */
    uint8_t *kc, *vc;                     /* the layer's cache: [n_kv][cap] rows of row_bytes */
    uint8_t *krow, *vrow;                 /* the token's cached rows, [n_kv] each, for the host (NULL:
                                           * none, a chunk's tokens) */
    uint64_t row_bytes;
    uint32_t cap, row;                    /* the token's row: its position % cap */
    uint32_t n_head, n_kv, hd, n_rot;
    bool neox, norm_after_rope;
    float eps;
    uint32_t cache_type;                  /* GM_TYPE_F32 or GM_TYPE_F16 */
    const uint32_t *pos;                  /* device memory: the token's position (row = *pos % cap),
                                           * or NULL: row as given (a launch that does not change) */
    /* a chunk's tokens: blockIdx.y token t, its q, k, v rows t heads' rows further, its rotation
     * cs + t n_rot, its cached row row + t (a decode launches one) */
};

static __device__ __forceinline__ void attn_rms(float *x, const float *w, unsigned lane, unsigned nv, float eps,
                                               unsigned hd)
{
    float ss = 0.0f;
    for (unsigned j = 0; j < nv; j++)
        ss += x[j] * x[j];
    ss = gm_warp_allsum(ss);
    const float scale = 1.0f / sqrtf(ss / (float)hd + eps);
    for (unsigned j = 0; j < nv; j++)
        x[j] = x[j] * scale * w[lane + 32 * j];
}

static __device__ __forceinline__ void attn_rope(float *x, const float *cs, unsigned lane, unsigned nv,
                                                unsigned n_rot, bool neox)
{
    const unsigned half = n_rot / 2;
    const float *c = cs, *s = cs + half;
    if (neox) { /* value e < half pairs with e + half, half / 32 steps of j further in this lane */
        const unsigned dj = half / 32;
        for (unsigned j = 0; j < dj && j + dj < nv; j++) {
            const unsigned i = lane + 32 * j;
            const float x0 = x[j], x1 = x[j + dj];
            x[j] = x0 * c[i] - x1 * s[i];
            x[j + dj] = x0 * s[i] + x1 * c[i];
        }
        return;
    }
    for (unsigned j = 0; j < nv; j++) { /* 2i in an even lane, 2i + 1 in the next */
        const unsigned e = lane + 32 * j;
        const float other = __shfl_xor_sync(0xffffffffu, x[j], 1);
        if (e >= n_rot)
            continue;
        const unsigned i = e / 2;
        x[j] = lane % 2 == 0 ? x[j] * c[i] - other * s[i] : other * s[i] + x[j] * c[i];
    }
}

static __device__ __forceinline__ void attn_store(const float *x, uint8_t *dst, uint8_t *copy, unsigned lane,
                                                 unsigned nv, uint32_t cache_type)
{
    for (unsigned j = 0; j < nv; j++) {
        const unsigned e = lane + 32 * j;
        if (cache_type == GM_TYPE_F16) {
            const uint16_t h = gm_f32_to_f16(x[j]);
            ((uint16_t *)dst)[e] = h;
            if (copy)
                ((uint16_t *)copy)[e] = h;
        } else {
            ((float *)dst)[e] = x[j];
            if (copy)
                ((float *)copy)[e] = x[j];
        }
    }
}

/* One warp per head: blocks 0 .. n_head - 1 the query heads (biased, normalised, rotated in
 * place), then the n_kv key heads (the same, then cached) and the n_kv value heads (biased,
 * cached). */
template <unsigned NV>
static __global__ void attn_post(gm_attn_post_args a)
{
    const unsigned b = blockIdx.x, lane = threadIdx.x % 32, nv = NV;
    const bool is_q = b < a.n_head, is_k = !is_q && b < a.n_head + a.n_kv;
    const unsigned h = is_q ? b : is_k ? b - a.n_head : b - a.n_head - a.n_kv, t = blockIdx.y;
    const uint64_t heads = is_q ? a.n_head : a.n_kv;
    float *row = (is_q ? a.q : is_k ? a.k : a.v) + ((uint64_t)t * heads + h) * a.hd;
    a.cs += (uint64_t)t * a.n_rot;
    const float *bias = is_q ? a.bq : is_k ? a.bk : a.bv;
    float x[NV];
#pragma unroll
    for (unsigned j = 0; j < nv; j++)
        x[j] = row[lane + 32 * j] + (bias ? bias[(uint64_t)h * a.hd + lane + 32 * j] : 0.0f);
    if (is_q || is_k) {
        const float *nw = is_q ? a.q_norm : a.k_norm;
        if (nw && !a.norm_after_rope)
            attn_rms(x, nw, lane, nv, a.eps, a.hd);
        attn_rope(x, a.cs, lane, nv, a.n_rot, a.neox);
        if (nw && a.norm_after_rope)
            attn_rms(x, nw, lane, nv, a.eps, a.hd);
    }
    if (is_q) {
        for (unsigned j = 0; j < nv; j++)
            row[lane + 32 * j] = x[j];
        return;
    }
    const uint32_t r = a.pos ? *a.pos % a.cap : (a.row + t) % a.cap;
    const uint64_t at = ((uint64_t)h * a.cap + r) * a.row_bytes;
    uint8_t *copy = is_k ? a.krow : a.vrow;
    attn_store(x, (is_k ? a.kc : a.vc) + at, copy ? copy + (uint64_t)h * a.row_bytes : NULL, lane, nv, a.cache_type);
}

static __device__ __forceinline__ float attn_cached(const uint8_t *row, unsigned e, uint32_t cache_type)
{
    return cache_type == GM_TYPE_F16 ? gm_attn_f16(((const uint16_t *)row)[e]) : ((const float *)row)[e];
}

/* The token's queries over the cached positions 0 .. n_pos - 1. */
struct gm_attn_dec_args {
    const float *q;                       /* n_head rows of hd (rotated) */
    const uint8_t *kc, *vc;               /* the layer's cache, as gm_attn_post_args */
    uint64_t row_bytes;
    uint32_t cap, n_head, n_kv, hd, n_pos, part;
    float scale;
    uint32_t cache_type;
    float *parts;                         /* [n_split][n_head][hd + 2]: o, then m and l */
    const uint32_t *pos;                  /* device memory: the token's position, n_pos = *pos + 1 and
                                           * part gm_attn_part_len's (blocks past the last part
                                           * return), or NULL: n_pos and part as given */
};

/* Block (g, s), warp w: query head h = g GM_ATTN_HEADS_PER_BLOCK + w (those below n_head) over
 * positions s part .. (s + 1) part - 1 (those below n_pos), an
 * online softmax from a fresh state, B positions a step: m the largest score, l the sum of
 * exp(score - m), o the values weighted by it. NV (hd / 32, each lane's values of a head) is a
 * constant of the kernel, so that its loops unroll and every array stays in registers: all of a
 * step's 2 B NV loads are issued before the first is used, B positions' latency paid once (with
 * NV a run-time bound the arrays lived in local memory and each load waited for the one before:
 * about 60 us a layer at any context on an H100). */
template <unsigned NV, unsigned B>
static __global__ void attn_part(gm_attn_dec_args a)
{
    const unsigned h = blockIdx.x * GM_ATTN_HEADS_PER_BLOCK + threadIdx.x / 32, sp = blockIdx.y, lane = threadIdx.x % 32;
    const uint32_t n_pos = a.pos ? *a.pos + 1 : a.n_pos, part = a.pos ? gm_attn_part_len(n_pos) : a.part;
    if (h >= a.n_head || sp * part >= n_pos) /* the whole warp: no lane is left waiting at a shuffle */
        return;
    const unsigned kvh = h / (a.n_head / a.n_kv);
    float q[NV], o[NV];
#pragma unroll
    for (unsigned j = 0; j < NV; j++) {
        q[j] = a.q[(uint64_t)h * a.hd + lane + 32 * j] * a.scale;
        o[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const uint32_t p0 = sp * part, p1 = p0 + part < n_pos ? p0 + part : n_pos;
    const uint8_t *kh = a.kc + (uint64_t)kvh * a.cap * a.row_bytes, *vh = a.vc + (uint64_t)kvh * a.cap * a.row_bytes;
    const bool f16 = a.cache_type == GM_TYPE_F16;
    for (uint32_t p = p0; p < p1; p += B) {
        const unsigned nb = p1 - p < B ? p1 - p : B;
        float kx[B][NV], vx[B][NV], sc[B];
#pragma unroll
        for (unsigned b = 0; b < B; b++) {
            const uint64_t at = (uint64_t)((p + (b < nb ? b : 0)) % a.cap) * a.row_bytes;
#pragma unroll
            for (unsigned j = 0; j < NV; j++) {
                if (f16) {
                    kx[b][j] = gm_attn_f16(((const uint16_t *)(kh + at))[lane + 32 * j]);
                    vx[b][j] = gm_attn_f16(((const uint16_t *)(vh + at))[lane + 32 * j]);
                } else {
                    kx[b][j] = ((const float *)(kh + at))[lane + 32 * j];
                    vx[b][j] = ((const float *)(vh + at))[lane + 32 * j];
                }
            }
        }
        float mb = m;
#pragma unroll
        for (unsigned b = 0; b < B; b++) {
            float dot = 0.0f;
#pragma unroll
            for (unsigned j = 0; j < NV; j++)
                dot += q[j] * kx[b][j];
            sc[b] = gm_warp_allsum(dot);
            mb = b < nb && sc[b] > mb ? sc[b] : mb;
        }
        const float corr = m == mb ? 1.0f : expf(m - mb);
#pragma unroll
        for (unsigned j = 0; j < NV; j++)
            o[j] *= corr;
        l *= corr;
#pragma unroll
        for (unsigned b = 0; b < B; b++) {
            const float w = b < nb ? expf(sc[b] - mb) : 0.0f;
#pragma unroll
            for (unsigned j = 0; j < NV; j++)
                o[j] += w * vx[b][j];
            l += w;
        }
        m = mb;
    }
    float *dst = a.parts + ((uint64_t)sp * a.n_head + h) * (a.hd + 2);
#pragma unroll
    for (unsigned j = 0; j < NV; j++)
        dst[lane + 32 * j] = o[j];
    if (lane == 0) {
        dst[a.hd] = m;
        dst[a.hd + 1] = l;
    }
}

/* A head's sink logit sk joined to its online softmax (o the weighted values, m the largest score,
 * l the sum of exp(score - m)), as one more score whose value is 0. */
template <unsigned NV> static __device__ __forceinline__ void gm_attn_join_sink(float *o, float &m, float &l, float sk)
{
    const float mn = sk > m ? sk : m;
    const float corr = m == mn ? 1.0f : expf(m - mn);
#pragma unroll
    for (unsigned j = 0; j < NV; j++)
        o[j] *= corr;
    l = l * corr + expf(sk - mn);
}

/* Warps a block of attn_merge takes: each merges a quarter of a head's parts. */
#define GM_ATTN_MERGE_WARPS 4u
#define GM_ATTN_MERGE_PER (GM_ATTN_SPLITS / GM_ATTN_MERGE_WARPS) /* parts a warp merges, at most */

/* n (<= N, the same in every lane) softmax states (m_i the largest score, l_i the sum of
 * exp(score - m_i), o_i the values weighted by it; lane i holds m_i and l_i, and every lane its
 * values of each o_i, o[i][j]) merged into one over the largest m: m = max m_i, l = sum c_i l_i,
 * o = sum c_i o_i with c_i = exp(m_i - m), the sums in order of i. Every lane ends with m, l and
 * its values of o. */
template <unsigned N, unsigned NV>
static __device__ __forceinline__ void gm_attn_merge_n(const float (*oi)[NV], float mi, float li, unsigned n,
                                                       unsigned lane, float *o, float &m, float &l)
{
    m = lane < n ? mi : -INFINITY;
    for (int off = 16; off > 0; off /= 2) {
        const float x = __shfl_xor_sync(0xffffffffu, m, off);
        m = x > m ? x : m;
    }
    const float c = lane < n ? (mi == m ? 1.0f : expf(mi - m)) : 0.0f;
    l = 0.0f;
#pragma unroll
    for (unsigned j = 0; j < NV; j++)
        o[j] = 0.0f;
#pragma unroll
    for (unsigned i = 0; i < N; i++) {
        const float ci = __shfl_sync(0xffffffffu, c, i), lc = __shfl_sync(0xffffffffu, li, i);
        if (i < n) {
            l += ci * lc;
#pragma unroll
            for (unsigned j = 0; j < NV; j++)
                o[j] += ci * oi[i][j];
        }
    }
}

/* Block h (GM_ATTN_MERGE_WARPS warps): head h's n_split parts (pos not NULL: gm_attn_n_split(*pos +
 * 1) of them) merged, its sink (or NULL) joined to the softmax, the weighted values divided by the
 * sum into att; with attq (not NULL), att's 8-bit blocks too (a head's NV blocks of 32, as the
 * quantize kernel makes them), so that the output's product needs no launch of their own. Warp w
 * merges parts w P .. (w + 1) P - 1 (P = GM_ATTN_MERGE_PER), every part's loads issued at once (a
 * warp that merged the parts one after another paid a load's latency for each: 21 us a layer at
 * 512 positions on an H100), then warp 0 the warps' states in order. */
template <unsigned NV>
static __global__ void __launch_bounds__(32 * GM_ATTN_MERGE_WARPS)
attn_merge(const float *parts, uint32_t n_split, uint32_t n_head, uint32_t hd, const float *sinks, float *att,
           const uint32_t *pos, gm_cuda_q8_block *attq)
{
    constexpr unsigned P = GM_ATTN_MERGE_PER, W = GM_ATTN_MERGE_WARPS;
    static_assert(P <= 32 && W <= 32, "a lane holds a part's m and l, and then a warp's");
    __shared__ float so[W][NV * 32], sm[W], sl[W];
    const unsigned h = blockIdx.x, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    if (pos)
        n_split = gm_attn_n_split(*pos + 1);
    const unsigned k0 = w * P, n = n_split > k0 ? (n_split - k0 < P ? n_split - k0 : P) : 0;
    float oi[P][NV], mi = -INFINITY, li = 0.0f;
#pragma unroll
    for (unsigned i = 0; i < P; i++) {
        const float *r = parts + ((uint64_t)(k0 + i) * n_head + h) * (hd + 2);
#pragma unroll
        for (unsigned j = 0; j < NV; j++)
            oi[i][j] = i < n ? r[lane + 32 * j] : 0.0f;
        if (lane == i && i < n) {
            mi = r[hd];
            li = r[hd + 1];
        }
    }
    float o[NV], m, l;
    gm_attn_merge_n<P, NV>(oi, mi, li, n, lane, o, m, l);
#pragma unroll
    for (unsigned j = 0; j < NV; j++)
        so[w][lane + 32 * j] = o[j];
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
    }
    __syncthreads();
    if (w)
        return;
    const unsigned nw = (n_split + P - 1) / P;
    float ow[W][NV];
#pragma unroll
    for (unsigned i = 0; i < W; i++)
#pragma unroll
        for (unsigned j = 0; j < NV; j++)
            ow[i][j] = so[i][lane + 32 * j];
    gm_attn_merge_n<W, NV>(ow, lane < W ? sm[lane % W] : -INFINITY, lane < W ? sl[lane % W] : 0.0f, nw, lane, o, m,
                           l);
    if (sinks)
        gm_attn_join_sink<NV>(o, m, l, sinks[h]);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (unsigned j = 0; j < NV; j++) {
        o[j] = o[j] * inv;
        att[(uint64_t)h * hd + lane + 32 * j] = o[j];
    }
    if (attq)
        gm_q8_quantize_warp_n<NV>(o, NV, lane, attq + (uint64_t)h * NV, 1);
}

/* y[i] += b[i] for i < n. */
static __global__ void attn_add(float *y, const float *b, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += b[i];
}

/* The kernels for heads of hd values (a multiple of 32 up to GM_CUDA_ATTN_MAX_HD: NV = hd / 32),
 * else NULL; attn_part takes eight positions a step where a lane holds up to four values of a
 * head, four where it holds more. */
struct gm_attn_kernels {
    void (*post)(gm_attn_post_args);
    void (*part)(gm_attn_dec_args);
    void (*merge)(const float *, uint32_t, uint32_t, uint32_t, const float *, float *, const uint32_t *,
                  gm_cuda_q8_block *);
};
template <unsigned NV> static inline gm_attn_kernels gm_attn_kernels_nv()
{
    return {attn_post<NV>, attn_part<NV, (NV <= 4 ? 8 : 4)>, attn_merge<NV>};
}
static inline gm_attn_kernels gm_attn_kernels_for(uint32_t hd)
{
    switch (hd % 32 ? 0 : hd / 32) {
    case 1: return gm_attn_kernels_nv<1>();
    case 2: return gm_attn_kernels_nv<2>();
    case 3: return gm_attn_kernels_nv<3>();
    case 4: return gm_attn_kernels_nv<4>();
    case 5: return gm_attn_kernels_nv<5>();
    case 6: return gm_attn_kernels_nv<6>();
    case 7: return gm_attn_kernels_nv<7>();
    case 8: return gm_attn_kernels_nv<8>();
    default: return {NULL, NULL, NULL};
    }
}

#endif
