/* backend/cuda/prefill_kernels: the kernels of a prompt's chunk that group its (token, expert)
 * pairs by expert and sum each token's experts (prefill.cu launches them), apart from their
 * launches so that tests/unit/test_cuda_emu.cpp runs the same source on the CPU (internal to the
 * module; the sums are route_kernels.cuh's combine_experts, a block row a token). The pairs of an
 * expert are contiguous, the experts in id order and each expert's pairs
 * in token order, so that the grouping is the same at every run; the tiles of mm_kernels.cuh's
 * grouped products are MM_BN pairs of one expert. */
#ifndef GM_BACKEND_CUDA_PREFILL_KERNELS_CUH
#define GM_BACKEND_CUDA_PREFILL_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/mm_kernels.cuh"

/* Which of token t's k choices (ids distinct) is expert e: its slot, or -1 (t past n: -1). */
static __device__ __forceinline__ int pf_slot(const int32_t *ids, uint32_t t, uint32_t n, uint32_t k, int32_t e)
{
    for (uint32_t j = 0; t < n && j < k; j++)
        if (ids[(uint64_t)t * k + j] == e)
            return (int)j;
    return -1;
}

/* Warp e (of 8 a block): how many of the n tokens chose expert e. */
static __global__ void pf_count(const int32_t *ids, uint32_t n, uint32_t k, uint32_t n_expert, uint32_t *cnt)
{
    const uint32_t e = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (e >= n_expert)
        return;
    uint32_t c = 0;
    for (uint32_t t0 = 0; t0 < n; t0 += 32) {
        c += __popc(__ballot_sync(0xffffffffu, pf_slot(ids, t0 + lane, n, k, (int32_t)e) >= 0));
    }
    if (lane == 0)
        cnt[e] = c;
}

/* One thread: each expert's first pair (the experts in id order, their pairs in token order) and
 * the tiles of MM_BN pairs of one expert. */
static __global__ void pf_tiles(const uint32_t *cnt, uint32_t n_expert, uint32_t *off, gm_mm_tile *tiles,
                                uint32_t *n_tiles)
{
    if (threadIdx.x || blockIdx.x)
        return;
    uint32_t at = 0, nt = 0;
    for (uint32_t e = 0; e < n_expert; e++) {
        off[e] = at;
        for (uint32_t i = 0; i < cnt[e]; i += MM_BN)
            tiles[nt++] = gm_mm_tile{e, at + i, cnt[e] - i < MM_BN ? cnt[e] - i : MM_BN};
        at += cnt[e];
    }
    *n_tiles = nt;
}

/* Warp e (of 8 a block): expert e's pairs in token order: pair_tok[p] the token of pair p,
 * pair_at[t k + j] the pair of token t's choice j. */
static __global__ void pf_pairs(const int32_t *ids, uint32_t n, uint32_t k, uint32_t n_expert, const uint32_t *off,
                                uint32_t *pair_tok, uint32_t *pair_at)
{
    const uint32_t e = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (e >= n_expert)
        return;
    uint32_t at = off[e];
    for (uint32_t t0 = 0; t0 < n; t0 += 32) {
        const uint32_t t = t0 + lane;
        const int slot = pf_slot(ids, t, n, k, (int32_t)e);
        const uint32_t mask = __ballot_sync(0xffffffffu, slot >= 0);
        if (slot >= 0) {
            const uint32_t p = at + __popc(mask & ((1u << lane) - 1u));
            pair_tok[p] = t;
            pair_at[(uint64_t)t * k + (uint32_t)slot] = p;
        }
        at += __popc(mask);
    }
}

#endif
