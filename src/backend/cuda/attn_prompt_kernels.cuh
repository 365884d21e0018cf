/* backend/cuda/attn_prompt_kernels: a prompt chunk's causal attention on the device (prefill.cu
 * launches it), apart from its launch so that tests/unit/test_cuda_emu.cpp runs the same source on
 * the CPU (internal to the module).
 *
 * Block (b, g) takes tokens T b .. (T = attn_prompt_tokens; those of the chunk) and their query heads of kv head g,
 * one warp a head, over the cached positions 0 .. pos + t of each token t (the chunk's rows
 * already cached), PF_POS positions a step: the block loads their keys and values into shared
 * memory once for its T tokens, lane j scores position j of the step against its head's
 * query of each token, and each warp keeps an online softmax a token (m the largest score, l the
 * sum of exp(score - m), o the values weighted by it); the head's sink joins at the end. A token's
 * sums are those of a block of one token, in the same order: the block's later positions, past a
 * token's own, weigh 0 in it. */
#ifndef GM_BACKEND_CUDA_ATTN_PROMPT_KERNELS_CUH
#define GM_BACKEND_CUDA_ATTN_PROMPT_KERNELS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/attn_kernels.cuh"
#include "backend/cuda/route_kernels.cuh"

#define PF_POS 32u /* positions of the cache one step holds in shared memory */
#define PF_TOK 4u  /* tokens a block takes, at most: each step's keys and values serve them all */
#define PF_MAX_GROUP 32u /* query heads a kv head has, at most (a warp each) */

struct gm_attn_prompt_args {
    const float *q;                   /* [n][n_head][hd], rotated */
    const uint8_t *kc, *vc;
    uint64_t row_bytes;
    uint32_t cap, n_head, n_kv, pos, n; /* the chunk: n tokens from pos on */
    float scale;
    uint32_t cache_type;
    const float *sinks;               /* n_head, or NULL */
    float *out;                       /* [n][n_head][hd] */
};

/* Tokens a block takes for heads of 32 nv values: PF_TOK, 2 for heads over 192 values (whose
 * four tokens' sums would not fit the registers of a block of 1024 threads). */
static constexpr __host__ __device__ unsigned attn_prompt_tokens(unsigned nv) { return nv <= 6 ? PF_TOK : 2; }

/* The shared memory of a block for heads of hd values, group query heads a kv head: the step's
 * keys (rows padded by 4 floats: 16-byte loads, a lane a row, without bank conflicts), its values,
 * and each warp's PF_TOK queries. */
static constexpr __host__ __device__ uint64_t attn_prompt_smem(uint32_t hd, uint32_t group)
{
    return ((uint64_t)PF_POS * (hd + 4) + (uint64_t)PF_POS * hd + (uint64_t)group * PF_TOK * hd) * sizeof(float);
}

template <unsigned NV> static __global__ void __launch_bounds__(32 * PF_MAX_GROUP) attn_prompt(gm_attn_prompt_args a)
{
    constexpr unsigned hd = 32 * NV, kld = hd + 4, TT = attn_prompt_tokens(NV);
#ifdef __CUDACC__
    extern __shared__ __align__(16) float sm[];
#else
    __shared__ __align__(16) float sm[attn_prompt_smem(hd, PF_MAX_GROUP) / sizeof(float)];
#endif
    const unsigned G = a.n_head / a.n_kv, t0 = blockIdx.x * TT, g = blockIdx.y, w = threadIdx.x / 32,
                   lane = threadIdx.x % 32;
    const unsigned nt = a.n - t0 < TT ? a.n - t0 : TT;
    float *ks = sm, *vs = ks + PF_POS * kld, *qs = vs + PF_POS * hd + w * TT * hd;
    const unsigned h = g * G + w;
    const uint32_t n_pos = a.pos + t0 + nt; /* the block's last token's */
#pragma unroll
    for (unsigned i = 0; i < TT; i++) {
        const float *q = a.q + ((uint64_t)(t0 + i) * a.n_head + h) * hd;
#pragma unroll
        for (unsigned j = 0; j < NV; j++)
            qs[i * hd + lane + 32 * j] = i < nt ? q[lane + 32 * j] * a.scale : 0.0f;
    }
    float o[TT][NV], m[TT], l[TT];
#pragma unroll
    for (unsigned i = 0; i < TT; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (unsigned j = 0; j < NV; j++)
            o[i][j] = 0.0f;
    }
    const uint8_t *kh = a.kc + (uint64_t)g * a.cap * a.row_bytes, *vh = a.vc + (uint64_t)g * a.cap * a.row_bytes;
    for (uint32_t p0 = 0; p0 < n_pos; p0 += PF_POS) {
        __syncthreads(); /* the step before is used up (and the queries written) */
        for (unsigned i = threadIdx.x; i < PF_POS * hd; i += blockDim.x) {
            const unsigned r = i / hd, c = i % hd;
            const uint32_t p = p0 + r;
            float kv = 0.0f, vv = 0.0f;
            if (p < n_pos) {
                kv = attn_cached(kh + (uint64_t)p * a.row_bytes, c, a.cache_type);
                vv = attn_cached(vh + (uint64_t)p * a.row_bytes, c, a.cache_type);
            }
            ks[r * kld + c] = kv;
            vs[r * hd + c] = vv;
        }
        __syncthreads();
        const uint32_t p = p0 + lane;
        /* the scores of position p: each key value loaded once for the block's tokens, each dot
         * product summed in column order */
        float d[TT];
#pragma unroll
        for (unsigned i = 0; i < TT; i++)
            d[i] = 0.0f;
#pragma unroll 1
        for (unsigned c = 0; c < hd; c += 4) {
            const float4 kv = *(const float4 *)&ks[lane * kld + c];
#pragma unroll
            for (unsigned i = 0; i < TT; i++) {
                const float4 qv = *(const float4 *)&qs[i * hd + c];
                d[i] += qv.x * kv.x;
                d[i] += qv.y * kv.y;
                d[i] += qv.z * kv.z;
                d[i] += qv.w * kv.w;
            }
        }
        float pe[TT];
#pragma unroll
        for (unsigned i = 0; i < TT; i++) {
            pe[i] = 0.0f;
            if (i >= nt)
                continue;
            const uint32_t n_i = a.pos + t0 + i + 1; /* token i's positions */
            const float s = p < n_i ? d[i] : -INFINITY;
            /* finite: position 0 is below n_i, and a step past token i's positions leaves m */
            const float mb = fmaxf(m[i], gm_warp_allmax(s));
            const float corr = m[i] == mb ? 1.0f : expf(m[i] - mb);
            pe[i] = p < n_i ? expf(s - mb) : 0.0f;
            l[i] = l[i] * corr + gm_warp_allsum(pe[i]);
#pragma unroll
            for (unsigned j = 0; j < NV; j++)
                o[i][j] *= corr;
            m[i] = mb;
        }
        const unsigned nb = n_pos - p0 < PF_POS ? n_pos - p0 : PF_POS;
        for (unsigned r = 0; r < nb; r++) {
            float v[NV];
#pragma unroll
            for (unsigned j = 0; j < NV; j++)
                v[j] = vs[r * hd + lane + 32 * j];
#pragma unroll
            for (unsigned i = 0; i < TT; i++) {
                const float pr = __shfl_sync(0xffffffffu, pe[i], r);
                if (p0 + r < a.pos + t0 + i + 1) /* its own positions: a later one weighs 0, but 0 x inf would be NaN */
#pragma unroll
                    for (unsigned j = 0; j < NV; j++)
                        o[i][j] += pr * v[j];
            }
        }
    }
#pragma unroll
    for (unsigned i = 0; i < TT; i++) {
        if (i >= nt)
            continue;
        if (a.sinks)
            gm_attn_join_sink<NV>(o[i], m[i], l[i], a.sinks[h]);
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *dst = a.out + ((uint64_t)(t0 + i) * a.n_head + h) * hd;
#pragma unroll
        for (unsigned j = 0; j < NV; j++)
            dst[lane + 32 * j] = o[i][j] * inv;
    }
}

typedef void (*attn_prompt_fn)(gm_attn_prompt_args);
static inline attn_prompt_fn attn_prompt_for(uint32_t hd)
{
    switch (hd % 32 ? 0 : hd / 32) {
    case 1: return attn_prompt<1>;
    case 2: return attn_prompt<2>;
    case 3: return attn_prompt<3>;
    case 4: return attn_prompt<4>;
    case 5: return attn_prompt<5>;
    case 6: return attn_prompt<6>;
    case 7: return attn_prompt<7>;
    case 8: return attn_prompt<8>;
    default: return NULL;
    }
}

#endif
