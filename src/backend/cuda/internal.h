/* backend/cuda/internal: shared by the module's .cu files (not a public header). */
#ifndef GM_BACKEND_CUDA_INTERNAL_H
#define GM_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
}
#include "backend/cuda/cuda.h"

/* Records CUDA error e of the call described by what into err (the first error wins) and
 * returns its gm code. */
int gm_cuda_fail(cudaError_t e, const char *what, gm_err *err);

/* ---- shared between the module's files ---- */

/* attn.cu: y = m x on stream st, the 8-bit product where the type has one (x's blocks made into
 * xq once, *xq_made saying so), else the float one. */
int gm_cuda_product(cudaStream_t st, const gm_cuda_mat *m, const float *x, gm_cuda_q8_block *xq, bool *xq_made,
                    float *y, gm_err *err);
/* attn.cu: queues on a's stream layer w's attention of one token at pos from the normalised
 * residual dx and the rotation's cosines and sines dcs (device memory), its output into dout and
 * its cached rows also into dkrow and dvrow (device memory), as gm_cuda_attn_token computes it.
 * With dpos (device memory) the kernels read the position there instead, so that the launches
 * are the same whatever the position (a CUDA graph replays them); pos is then the most it holds.
 * xq_made: gm_cuda_attn_xq(a) holds dx's 8-bit blocks already. */
int gm_cuda_attn_queue(gm_cuda_attn *a, const gm_cuda_attn_layer *w, void *kc, void *vc, uint32_t cap, uint32_t pos,
                       const uint32_t *dpos, const float *dx, bool xq_made, const float *dcs, float *dout,
                       uint8_t *dkrow, uint8_t *dvrow, gm_err *err);
cudaStream_t gm_cuda_attn_stream(const gm_cuda_attn *a);
const gm_cuda_attn_shape *gm_cuda_attn_shape_of(const gm_cuda_attn *a);
/* attn.cu: a's scratch for 8-bit blocks of up to max(n_embd, heads x head dim) values. */
gm_cuda_q8_block *gm_cuda_attn_xq(gm_cuda_attn *a);

/* ffn.cu: whether the experts' product of type takes 8-bit blocks; the grouped products of n
 * experts on st from the job table jobs (device memory, ffn_kernels.cuh's gm_expert_jobs layout)
 * over the buffers b (device memory): x's n_x values quantized into xq where gate or up takes
 * blocks (unless b->xq_made), gate and up into gu, the activation into h (and, in the same
 * launch, hq where down takes blocks), down into what the jobs say. */
struct gm_mv_job;
struct gm_ffn_bufs {
    const float *x;
    uint64_t n_x;
    gm_cuda_q8_block *xq;
    bool xq_made; /* xq holds x's blocks already (the norm before made them) */
    float *gu, *h;
    gm_cuda_q8_block *hq;
};
bool gm_cuda_ffn_q8(uint32_t type);
int gm_cuda_ffn_queue(cudaStream_t st, const gm_cuda_ffn_shape *sh, const gm_mv_job *jobs, uint32_t n,
                      const gm_ffn_bufs *b, gm_err *err);

/* The sum of acc over each run of SUB lanes (32, 16, ...), in the run's first lane: the
 * matrix-vector kernels' last step (every lane of the warp taking part). */
template <unsigned SUB> static __device__ __forceinline__ float gm_lanes_sum(float acc)
{
    for (int off = SUB / 2; off > 0; off /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    return acc;
}

/* The sum of acc over the warp's lanes, in lane 0. */
static __device__ __forceinline__ float gm_warp_sum(float acc) { return gm_lanes_sum<32>(acc); }

/* An 8-bit block's scale d = max |x| / 127 and its inverse (0 for a block of zeros): the codes are
 * round(x id), half away from zero. */
static __device__ __forceinline__ void gm_q8_scale(float amax, float &d, float &id)
{
    d = amax / 127.0f;
    id = d != 0.0f ? 1.0f / d : 0.0f;
}

/* N of a warp's blocks of 32 values at once (v[b], lane l's value l of block b; blocks b < nb,
 * nb the same in every lane, into out[b * stride]), every lane taking part: d = max |x| / 127,
 * q = round(x / d) (half away from zero), and s = d * sum(q). The one formula of every kernel that
 * makes the 8-bit products' blocks; the N blocks' shuffles go together, so that their latency is
 * paid once, not N times. */
template <unsigned N>
static __device__ __forceinline__ void gm_q8_quantize_warp_n(const float *v, unsigned nb, unsigned lane,
                                                             gm_cuda_q8_block *out, uint64_t stride)
{
    float amax[N], d[N];
    int q[N], sum[N];
#pragma unroll
    for (unsigned b = 0; b < N; b++)
        amax[b] = fabsf(v[b]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
#pragma unroll
        for (unsigned b = 0; b < N; b++)
            if (b < nb)
                amax[b] = fmaxf(amax[b], __shfl_xor_sync(0xffffffffu, amax[b], off));
#pragma unroll
    for (unsigned b = 0; b < N; b++) {
        float id;
        gm_q8_scale(amax[b], d[b], id);
        sum[b] = q[b] = (int)roundf(v[b] * id);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
#pragma unroll
        for (unsigned b = 0; b < N; b++)
            if (b < nb)
                sum[b] += __shfl_xor_sync(0xffffffffu, sum[b], off);
#pragma unroll
    for (unsigned b = 0; b < N; b++)
        if (b < nb) {
            gm_cuda_q8_block *o = out + b * stride;
            o->qs[lane] = (int8_t)q[b];
            if (lane == 0) {
                o->d = d[b];
                o->s = d[b] * (float)sum[b];
            }
        }
}

/* One block of 32 values held by G = 32 / PER consecutive lanes (aligned to G), PER consecutive
 * values each (v: lane l's values (l % G) PER ..), into out where store (the same in every lane of
 * the group); every lane of the warp taking part. gm_q8_quantize_warp_n's formula: the largest
 * magnitude and the codes' integer sum do not depend on the order, so the blocks are equal bit for
 * bit, for log2 G shuffles a block where a block a lane takes five. */
template <unsigned PER>
static __device__ __forceinline__ void gm_q8_quantize_lanes(const float *v, bool store, unsigned lane,
                                                            gm_cuda_q8_block *out)
{
    static_assert(PER >= 1 && PER <= 32 && 32 % PER == 0, "a block over whole lanes");
    constexpr unsigned G = 32 / PER;
    float amax = 0.0f;
#pragma unroll
    for (unsigned j = 0; j < PER; j++)
        amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
    for (unsigned off = G / 2; off > 0; off /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, (int)off));
    float d, id;
    gm_q8_scale(amax, d, id);
    int q[PER], sum = 0;
#pragma unroll
    for (unsigned j = 0; j < PER; j++)
        sum += q[j] = (int)roundf(v[j] * id);
#pragma unroll
    for (unsigned off = G / 2; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, (int)off);
    if (!store)
        return;
    const unsigned g = lane % G;
#pragma unroll
    for (unsigned j = 0; j < PER; j++)
        out->qs[g * PER + j] = (int8_t)q[j];
    if (g == 0) {
        out->d = d;
        out->s = d * (float)sum;
    }
}

/* One block: the warp's 32 values v into out. */
static __device__ __forceinline__ void gm_q8_quantize_warp(float v, unsigned lane, gm_cuda_q8_block *out)
{
    gm_q8_quantize_warp_n<1>(&v, 1, lane, out, 0);
}

/* How many of the vector's values one element of the matrix-vector kernels' x holds: a float
 * one, an 8-bit block (gm_cuda_quantize_q8's) 32. */
template <typename X> struct gm_vec_values;
template <> struct gm_vec_values<float> { static constexpr unsigned n = 1; };
template <> struct gm_vec_values<gm_cuda_q8_block> { static constexpr unsigned n = 32; };

/* The frame of the matrix-vector kernels that go a block at a time (matvec.cu's with float32
 * activations, matvec_q8.cu's with 8-bit ones): one warp per row, row blockIdx.x * WARPS +
 * threadIdx.x / 32; the row's blocks shared out among the lanes, T::lanes to a block and so
 * 32 / T::lanes blocks a warp step (UNROLL steps unrolled); each lane adds up T's dot products of
 * its part of its blocks, and gm_warp_sum of the lanes' sums is y[row]. With R = 2, two rows a
 * warp, each a half-warp's (16 lanes, 16 / T::lanes blocks a step): for rows whose last warp
 * step would leave half the lanes idle (an expert's down product of 1536 columns: six Q4_K
 * blocks, two steps of four), so that every lane loads and twice the rows' bytes are in flight.
 * T, one per block type:
 *   values, bytes, lanes (static constexpr unsigned): a block's values, its bytes, lanes to a block;
 *   T(i) (__device__): lane i (0 .. lanes - 1) of each of its blocks: its constants (the part of
 *   the block it takes, shifts, value tables), made once a row;
 *   float dot(const uint8_t *blk, const X *xb) const (__device__): that lane's part of block blk
 *   times the vector's values from xb on (the block's first value), the lane's addend. */
template <unsigned WARPS, unsigned UNROLL, typename T, typename X, unsigned R = 1>
static __device__ __forceinline__ void gm_matvec_rows_at(uint64_t blk, const uint8_t *w, uint64_t row_bytes,
                                                         uint64_t n_rows, uint64_t n_cols, const X *x, float *y)
{
    static_assert(R == 1 || R == 2, "one or two rows a warp");
    constexpr unsigned SUB = 32 / R; /* lanes a row */
    const uint64_t row = (blk * WARPS + threadIdx.x / 32) * R + (threadIdx.x % 32) / SUB;
    const unsigned lane = threadIdx.x % SUB;
    if (R == 1 && row >= n_rows)
        return;
    const T t(lane % T::lanes);
    const uint8_t *r = w + row * row_bytes;
    /* a half-warp past the last row adds nothing but takes part in the sum's shuffles */
    const uint64_t nb = row < n_rows ? n_cols / T::values : 0;
    float acc = 0.0f;
#pragma unroll(UNROLL)
    for (uint64_t b = lane / T::lanes; b < nb; b += SUB / T::lanes)
        acc += t.dot(r + b * T::bytes, x + b * (T::values / gm_vec_values<X>::n));
    acc = gm_lanes_sum<SUB>(acc);
    if (lane == 0 && row < n_rows)
        y[row] = acc;
}

/* Rows a warp (gm_matvec_rows_at's R) for rows of nb blocks of a type of lanes lanes to a block:
 * two where a warp a row would leave half the lanes idle in its last step and a half-warp none. */
static inline unsigned gm_rows_a_warp(uint64_t nb, unsigned lanes)
{
    const uint64_t lane_steps = nb * lanes;
    return lane_steps % 32 != 0 && lane_steps % 16 == 0 ? 2 : 1;
}

/* The same for the rows of thread block blockIdx.x. */
template <unsigned WARPS, unsigned UNROLL, typename T, typename X, unsigned R = 1>
static __device__ __forceinline__ void gm_matvec_rows(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows,
                                                      uint64_t n_cols, const X *x, float *y)
{
    gm_matvec_rows_at<WARPS, UNROLL, T, X, R>(blockIdx.x, w, row_bytes, n_rows, n_cols, x, y);
}

/* A row a thread block, for a matrix of few rows (a router's: a warp a row leaves most of the
 * device idle) or of long rows (an attention's 8-bit products of 4096 and more columns, where a
 * warp walking the row alone has a few of its blocks' loads in flight at a time, not its whole
 * row): row `row`, its warp steps shared among the block's WARPS warps (warp w takes steps w,
 * w + WARPS, ...), then each warp's sum and the warps' sums in warp order (another order of the
 * same terms). Four warps a row for every matrix, short rows too, measured slower than a warp a
 * row on an H100 (docs/dev/performance-history.md, 2026-12-07). */
template <unsigned WARPS, typename T, typename X>
static __device__ __forceinline__ void gm_matvec_row_split_at(uint64_t row, const uint8_t *w, uint64_t row_bytes,
                                                              uint64_t n_cols, const X *x, float *y)
{
    __shared__ float part[WARPS];
    const unsigned lane = threadIdx.x % 32, wi = threadIdx.x / 32;
    const T t(lane % T::lanes);
    const uint8_t *r = w + row * row_bytes;
    const uint64_t nb = n_cols / T::values, per = 32 / T::lanes;
    float acc = 0.0f;
#pragma unroll(4)
    for (uint64_t b = (uint64_t)wi * per + lane / T::lanes; b < nb; b += (uint64_t)WARPS * per)
        acc += t.dot(r + b * T::bytes, x + b * (T::values / gm_vec_values<X>::n));
    acc = gm_warp_sum(acc);
    if (lane == 0)
        part[wi] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = part[0];
        for (unsigned k = 1; k < WARPS; k++)
            s += part[k];
        y[row] = s;
    }
}

/* The same for row blockIdx.x. */
template <unsigned WARPS, typename T, typename X>
static __device__ __forceinline__ void gm_matvec_row_split(const uint8_t *w, uint64_t row_bytes, uint64_t n_cols,
                                                           const X *x, float *y)
{
    gm_matvec_row_split_at<WARPS, T, X>(blockIdx.x, w, row_bytes, n_cols, x, y);
}

/* The frame of the element-by-element kernels (any type blocks.cuh decodes, float32 x): one warp
 * per row, as above; each lane takes every 32nd value of the row, decodes it with D::at and
 * multiplies it by x's. */
template <unsigned WARPS, typename D>
static __device__ __forceinline__ void gm_matvec_elems(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows,
                                                       uint64_t n_cols, const float *x, float *y)
{
    const uint64_t row = (uint64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32;
    if (row >= n_rows)
        return;
    const uint8_t *r = w + row * row_bytes;
    float acc = 0.0f;
    for (uint64_t e = lane; e < n_cols; e += 32)
        acc += D::at(r + (e / D::block) * D::bytes, (int)(e % D::block)) * x[e];
    acc = gm_warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}

#endif
