/* backend/cuda/route_kernels: the kernels that keep a decode token's MoE block on the device
 * between its attention and its experts: the residual add and the norm, the routing (scores,
 * top-k, weights) and the weighted sum of the experts' outputs back into the residual (internal
 * to the module; apart from launches so that tests/unit/test_cuda_emu.cpp runs the same source on
 * the CPU). They follow the CPU's arithmetic step for step (infer/fwd.c's gm_rms_norm, infer/moe.c's
 * scores, top_k, route_token and accumulate), so that from the same router logits the device
 * picks the same experts with the same weights, and from the same expert rows sums the same
 * block output bit for bit. Group-limited routing (DeepSeek-V3's expert groups) is not here: a layer
 * that has it routes on the host. */
#ifndef GM_BACKEND_CUDA_ROUTE_KERNELS_CUH
#define GM_BACKEND_CUDA_ROUTE_KERNELS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

#include "backend/cuda/cuda.h"
#include "backend/cuda/ffn_kernels.cuh"
#include "backend/cuda/internal.h"

/* Experts a routing kernel takes, at most (a lane holds GM_ROUTE_MAX / 32 of them). */
#define GM_ROUTE_MAX 1024u
#define GM_ROUTE_LANE (GM_ROUTE_MAX / 32)

static __device__ __forceinline__ double gm_warp_allsum_d(double v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

static __device__ __forceinline__ float gm_warp_allmax(float v)
{
    for (int off = 16; off > 0; off /= 2) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = o > v ? o : v;
    }
    return v;
}

/* Values one thread of add_rmsnorm holds: rows of up to GM_NORM_PER x 1024 values. */
#define GM_NORM_PER 16u

/* The threads add_rmsnorm takes for n values: a warp for every 8 x 32, from one warp to 1024
 * threads (n at most GM_NORM_PER x 1024). Eight values a thread rather than four: a decode's one
 * block is bound by its instructions, and each thread's share of the sums is paid once a thread. */
static inline unsigned gm_norm_threads(uint32_t n)
{
    const unsigned t = ((n + 7) / 8 + 31) / 32 * 32;
    return t < 32 ? 32 : t > 1024 ? 1024 : t;
}

/* PER values of row p from i0 on into v (0 past n), or v into the row (those below n): 16-byte
 * accesses where vec says the row's start and n allow them. */
template <unsigned PER>
static __device__ __forceinline__ void gm_norm_load(const float *__restrict__ p, uint32_t i0, uint32_t n, bool vec,
                                                    float *v)
{
    if (vec && i0 + PER <= n) {
#pragma unroll
        for (unsigned j = 0; j < PER; j += 4) {
            const float4 f = *(const float4 *)(p + i0 + j);
            v[j] = f.x, v[j + 1] = f.y, v[j + 2] = f.z, v[j + 3] = f.w;
        }
        return;
    }
#pragma unroll
    for (unsigned j = 0; j < PER; j++)
        v[j] = i0 + j < n ? p[i0 + j] : 0.0f;
}
template <unsigned PER>
static __device__ __forceinline__ void gm_norm_store(float *__restrict__ p, uint32_t i0, uint32_t n, bool vec,
                                                     const float *v)
{
    if (vec && i0 + PER <= n) {
#pragma unroll
        for (unsigned j = 0; j < PER; j += 4)
            *(float4 *)(p + i0 + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
        return;
    }
#pragma unroll
    for (unsigned j = 0; j < PER; j++)
        if (i0 + j < n)
            p[i0 + j] = v[j];
}

/* One thread block (gm_norm_threads(n) threads, thread t values t PER .. t PER + PER - 1) a row:
 * x += a (when a is not NULL: the residual takes a block's output, as x[i] + a[i]), then y = x /
 * sqrt(mean(x^2) + eps) * w over n values (y apart from x), the squares summed in double as
 * gm_rms_norm sums them (in another order: the mean can differ from the CPU's in its last bit):
 * each thread's values, then its warp's, then the warps' sums as a warp sums them. A thread's
 * values are loaded at once, so that the loads' latency is paid once (a warp that walked the row
 * paid it 128 times for 4096 values, 40 us and more). With yq (not NULL; n a multiple of 32), y's
 * 8-bit blocks too, as the quantize kernel makes them, so that the products after the norm need
 * no launch of their own: a block is 32 / PER consecutive threads' values (gm_q8_quantize_lanes),
 * where blocks spread one value a lane took each thread a block's five shuffles of its largest
 * magnitude and five of its sum for each of its PER values (about 1500 instructions a warp on an
 * H100 for 4096 values, 9.2 us). gm_add_rmsnorm_for picks PER: 8 up to 8192 values, so that a
 * thread keeps no registers for values it does not have. */
template <unsigned PER>
static __global__ void __launch_bounds__(1024) add_rmsnorm(float *__restrict__ x, const float *__restrict__ a, const float *__restrict__ w,
                                   float eps, uint32_t n, float *__restrict__ y, gm_cuda_q8_block *__restrict__ yq)
{
    static_assert(PER % 4 == 0 && 32 % PER == 0, "whole 16-byte accesses, blocks of whole threads");
    __shared__ double part[32];
    const unsigned t = threadIdx.x, nt = blockDim.x;
    /* block b takes row b of a chunk's rows (n values apart): a decode launches one block */
    x += (uint64_t)blockIdx.x * n;
    y += (uint64_t)blockIdx.x * n;
    if (a)
        a += (uint64_t)blockIdx.x * n;
    const bool vec = n % 4 == 0 && (((uintptr_t)x | (uintptr_t)y | (uintptr_t)a | (uintptr_t)w) & 15) == 0;
    const uint32_t i0 = t * PER;
    float v[PER], wv[PER];
    gm_norm_load<PER>(x, i0, n, vec, v);
    if (a) {
        float av[PER];
        gm_norm_load<PER>(a, i0, n, vec, av);
#pragma unroll
        for (unsigned j = 0; j < PER; j++)
            v[j] = v[j] + av[j];
        gm_norm_store<PER>(x, i0, n, vec, v);
    }
    if (w) /* loaded before the sums, so that its latency is paid with theirs */
        gm_norm_load<PER>(w, i0, n, vec, wv);
    double ss = 0;
#pragma unroll
    for (unsigned j = 0; j < PER; j++) {
        const float sq = v[j] * v[j]; /* 0 past the row */
        ss += (double)sq;
    }
    ss = gm_warp_allsum_d(ss);
    if (t % 32 == 0)
        part[t / 32] = ss;
    __syncthreads();
    /* every warp sums the warps' sums the same way: the same mean in every thread */
    const double tot = gm_warp_allsum_d(t % 32 < nt / 32 ? part[t % 32] : 0.0);
    const float mean = (float)(tot / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
#pragma unroll
    for (unsigned j = 0; j < PER; j++)
        v[j] = v[j] * scale * (w ? wv[j] : 1.0f);
    gm_norm_store<PER>(y, i0, n, vec, v);
    if (yq) /* the thread's values are part of block i0 / 32, whole within the row when i0 < n */
        gm_q8_quantize_lanes<PER>(v, i0 < n, t % 32, yq + (uint64_t)blockIdx.x * (n / 32) + i0 / 32);
}

/* add_rmsnorm for rows of n values (at most GM_NORM_PER x 1024). */
typedef void (*gm_add_rmsnorm_fn)(float *, const float *, const float *, float, uint32_t, float *, gm_cuda_q8_block *);
static inline gm_add_rmsnorm_fn gm_add_rmsnorm_for(uint32_t n)
{
    return n <= 8 * 1024 ? add_rmsnorm<8> : add_rmsnorm<GM_NORM_PER>;
}

/* A token's routing, as infer/moe.c's route_token: probabilities (softmax of the logits, summed
 * in double, or their sigmoid), selection scores (plus the selection bias, when there is one),
 * the k experts of the highest scores (ties to the lower id, in order of choice), their
 * probabilities as weights, renormalised over the k (in double, in choice order) when norm_topk,
 * times scale. */
struct gm_route_args {
    const float *logits;   /* n_expert router logits (biases added) */
    const float *sel_bias; /* n_expert, or NULL */
    uint32_t n_expert, k;  /* n_expert <= GM_ROUTE_MAX, k <= n_expert */
    bool softmax, norm_topk;
    float scale;
    int32_t *ids; /* out: k expert ids */
    float *w;     /* out: k weights */
};

/* One warp a token; lane l holds experts l, l + 32, ... (slot s: expert l + 32 s), S slots (at least
 * n_expert / 32: gm_route_topk_for picks the fewest), so that a scan of the slots costs what the
 * experts need (for 128 experts 4 slots, not GM_ROUTE_LANE). */
template <unsigned S> static __device__ __forceinline__ void gm_route_topk(gm_route_args a)
{
    const unsigned lane = threadIdx.x % 32;
    /* block b routes token b of a chunk (its logits n_expert apart, its ids and weights k apart) */
    a.logits += (uint64_t)blockIdx.x * a.n_expert;
    a.ids += (uint64_t)blockIdx.x * a.k;
    a.w += (uint64_t)blockIdx.x * a.k;
    const uint32_t N = a.n_expert;
    float prob[S], sel[S];
    float mx = -INFINITY;
#pragma unroll
    for (unsigned s = 0; s < S; s++) {
        const uint32_t i = lane + 32 * s;
        prob[s] = i < N ? a.logits[i] : -INFINITY;
        mx = prob[s] > mx ? prob[s] : mx;
    }
    if (a.softmax) {
        mx = gm_warp_allmax(mx);
        double sum = 0;
#pragma unroll
        for (unsigned s = 0; s < S; s++) {
            const uint32_t i = lane + 32 * s;
            prob[s] = i < N ? expf(prob[s] - mx) : 0.0f;
            sum += prob[s];
        }
        sum = gm_warp_allsum_d(sum);
#pragma unroll
        for (unsigned s = 0; s < S; s++)
            prob[s] = (float)(prob[s] / sum);
    } else {
#pragma unroll
        for (unsigned s = 0; s < S; s++)
            prob[s] = 1.0f / (1.0f + expf(-prob[s]));
    }
#pragma unroll
    for (unsigned s = 0; s < S; s++) {
        const uint32_t i = lane + 32 * s;
        sel[s] = i < N ? prob[s] + (a.sel_bias ? a.sel_bias[i] : 0.0f) : -INFINITY;
    }
    uint32_t taken = 0; /* this lane's slots already chosen, one bit each */
    for (uint32_t j = 0; j < a.k; j++) {
        /* this lane's best untaken slot (the lowest on ties), then the warp's (the lowest id) */
        float best = -INFINITY, bp = 0.0f;
        int bi = -1;
#pragma unroll
        for (unsigned s = 0; s < S; s++) {
            const uint32_t i = lane + 32 * s;
            if (i < N && !(taken >> s & 1u) && (bi < 0 || sel[s] > best)) {
                best = sel[s];
                bp = prob[s];
                bi = (int)i;
            }
        }
        for (int off = 16; off > 0; off /= 2) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            const float op = __shfl_xor_sync(0xffffffffu, bp, off);
            if (oi >= 0 && (bi < 0 || ob > best || (ob == best && oi < bi))) {
                best = ob;
                bi = oi;
                bp = op;
            }
        }
        if ((uint32_t)bi % 32 == lane)
            taken |= 1u << ((uint32_t)bi / 32);
        if (lane == 0) {
            a.ids[j] = bi;
            a.w[j] = bp;
        }
    }
    if (lane == 0) {
        if (a.norm_topk) {
            double sum = 0;
            for (uint32_t j = 0; j < a.k; j++)
                sum += a.w[j];
            for (uint32_t j = 0; j < a.k; j++)
                a.w[j] = (float)(a.w[j] / sum);
        }
        for (uint32_t j = 0; j < a.k; j++)
            a.w[j] *= a.scale;
    }
}

template <unsigned S> static __global__ void route_topk(gm_route_args a) { gm_route_topk<S>(a); }

/* A decode token's routing (one warp) and then the job table of the experts it chose
 * (ffn_kernels' gm_expert_jobs, lane j the choice j, j + 32, ...: ja.ids are a.ids), so that the
 * products after it need no launch of their own to learn their matrices. */
template <unsigned S> static __global__ void route_topk_jobs(gm_route_args a, gm_expert_jobs_args ja)
{
    gm_route_topk<S>(a);
    __syncwarp(); /* lane 0 wrote the ids */
    for (uint32_t j = threadIdx.x % 32; j < ja.k; j += 32)
        gm_expert_jobs(ja.jobs, j, ja.k, ja.one, ja.table[ja.ids[j]], ja.xg, ja.xu, ja.gu, ja.h, ja.hq, ja.out, ja.ff,
                       ja.dim);
}

/* Calls f with std::integral_constant<unsigned, S> of the fewest slots a lane S that hold
 * n_expert experts (at most GM_ROUTE_MAX): the routing kernels' S. */
template <typename F> static inline void gm_with_route_slots(uint32_t n_expert, F f)
{
    const uint32_t per = (n_expert + 31) / 32;
    if (per <= 1)
        f(std::integral_constant<unsigned, 1>());
    else if (per <= 2)
        f(std::integral_constant<unsigned, 2>());
    else if (per <= 4)
        f(std::integral_constant<unsigned, 4>());
    else if (per <= 8)
        f(std::integral_constant<unsigned, 8>());
    else if (per <= 16)
        f(std::integral_constant<unsigned, 16>());
    else
        f(std::integral_constant<unsigned, GM_ROUTE_LANE>());
}

/* route_topk and route_topk_jobs for n_expert experts. */
typedef void (*gm_route_topk_fn)(gm_route_args);
typedef void (*gm_route_topk_jobs_fn)(gm_route_args, gm_expert_jobs_args);
static inline gm_route_topk_fn gm_route_topk_for(uint32_t n_expert)
{
    gm_route_topk_fn k = NULL;
    gm_with_route_slots(n_expert, [&](auto s) { k = route_topk<decltype(s)::value>; });
    return k;
}
static inline gm_route_topk_jobs_fn gm_route_topk_jobs_for(uint32_t n_expert)
{
    gm_route_topk_jobs_fn k = NULL;
    gm_with_route_slots(n_expert, [&](auto s) { k = route_topk_jobs<decltype(s)::value>; });
    return k;
}

/* The choices in ascending id order (ids distinct, k at most GM_COMBINE_MAX_K) into the block's
 * order[]: thread j < k places choice j at its rank; then the block meets. */
#define GM_COMBINE_MAX_K 64u
static __device__ __forceinline__ void gm_choice_order(const int32_t *ids, uint32_t k, uint32_t *order)
{
    const uint32_t j = threadIdx.x;
    if (j < k) {
        uint32_t rank = 0;
        for (uint32_t m = 0; m < k; m++)
            rank += ids[m] < ids[j];
        order[rank] = j;
    }
    __syncthreads();
}

/* out[i] += w[j] rows[j][i] over the k experts in ascending id order (ids distinct), one thread a
 * value: infer/moe.c's accumulate into the block's output (which holds 0, or the shared expert's
 * output, before), the same multiplies and adds in the same order, never fused (__fmul_rn,
 * __fadd_rn); add_rmsnorm then adds the output to the residual as the CPU does. A chunk's tokens:
 * block row t takes token t (out, ids and w its rows), whose choice j's row is rows' row
 * pair_at[t k + j] (pair_at NULL: row j; a decode token launches one block row). */
static __global__ void combine_experts(float *out, const float *rows, const int32_t *ids, const float *w,
                                       const uint32_t *pair_at, uint32_t k, uint64_t n)
{
    __shared__ uint32_t order[GM_COMBINE_MAX_K];
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    ids += t * k;
    w += t * k;
    gm_choice_order(ids, k, order);
    if (i >= n)
        return;
    out += t * n;
    float o = out[i];
    for (uint32_t c = 0; c < k; c++) {
        const uint32_t jn = order[c];
        const uint64_t r = pair_at ? pair_at[t * k + jn] : jn;
        o = __fadd_rn(o, __fmul_rn(w[jn], rows[r * n + i]));
    }
    out[i] = o;
}

/* combine_experts for a decode token split between the device and the host: choice j's row is
 * rows' row j where table[ids[j]] has a gate (the device computed the expert), else host_rows'
 * row j (the host did); the same sum in the same order. */
static __global__ void combine_split(float *out, const float *rows, const float *host_rows, const int32_t *ids,
                                     const float *w, const gm_cuda_expert *table, uint32_t k, uint64_t n)
{
    __shared__ uint32_t order[GM_COMBINE_MAX_K];
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    gm_choice_order(ids, k, order);
    if (i >= n)
        return;
    float o = out[i];
    for (uint32_t c = 0; c < k; c++) {
        const uint32_t jn = order[c];
        const float *r = table[ids[jn]].gate ? rows : host_rows;
        o = __fadd_rn(o, __fmul_rn(w[jn], r[(uint64_t)jn * n + i]));
    }
    out[i] = o;
}

/* out[i] += g row[i], g = sigmoid(*gate) (gate NULL: 1), one thread a value: infer/moe.c's
 * shared expert added to the routed sum (or to 0: a dense FFN), the same formula. A chunk's
 * tokens: block row t takes token t (out's and row's rows t, its gate gate[t]). */
static __global__ void add_shared(float *out, const float *row, const float *gate, uint64_t n)
{
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (i >= n)
        return;
    const float g = gate ? 1.0f / (1.0f + expf(-gate[t])) : 1.0f;
    out[t * n + i] = __fadd_rn(out[t * n + i], __fmul_rn(g, row[t * n + i]));
}

#endif
