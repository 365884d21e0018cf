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

/* The sum of acc over the warp's lanes, in lane 0 (the matrix-vector kernels' last step). */
static __device__ __forceinline__ float gm_warp_sum(float acc)
{
    for (int off = 16; off > 0; off /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    return acc;
}

/* A warp's 32 values (v, lane l's value l of the block) as one 8-bit block into out, every lane
 * taking part: d = max |x| / 127, q = round(x / d) (half away from zero), and s = d * sum(q). The
 * one formula of every kernel that makes the 8-bit products' blocks. */
static __device__ __forceinline__ void gm_q8_quantize_warp(float v, unsigned lane, gm_cuda_q8_block *out)
{
    float amax = fabsf(v);
    for (int off = 16; off > 0; off /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = (int)roundf(v * id);
    int sum = q;
    for (int off = 16; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    out->qs[lane] = (int8_t)q;
    if (lane == 0) {
        out->d = d;
        out->s = d * (float)sum;
    }
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
 * its part of its blocks, and gm_warp_sum of the lanes' sums is y[row]. T, one per block type:
 *   values, bytes, lanes (static constexpr unsigned): a block's values, its bytes, lanes to a block;
 *   T(i) (__device__): lane i (0 .. lanes - 1) of each of its blocks: its constants (the part of
 *   the block it takes, shifts, value tables), made once a row;
 *   float dot(const uint8_t *blk, const X *xb) const (__device__): that lane's part of block blk
 *   times the vector's values from xb on (the block's first value), the lane's addend. */
template <unsigned WARPS, unsigned UNROLL, typename T, typename X>
static __device__ __forceinline__ void gm_matvec_rows_at(uint64_t blk, const uint8_t *w, uint64_t row_bytes,
                                                         uint64_t n_rows, uint64_t n_cols, const X *x, float *y)
{
    const uint64_t row = blk * WARPS + threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32;
    if (row >= n_rows)
        return;
    const T t(lane % T::lanes);
    const uint8_t *r = w + row * row_bytes;
    const uint64_t nb = n_cols / T::values;
    float acc = 0.0f;
#pragma unroll(UNROLL)
    for (uint64_t b = lane / T::lanes; b < nb; b += 32 / T::lanes)
        acc += t.dot(r + b * T::bytes, x + b * (T::values / gm_vec_values<X>::n));
    acc = gm_warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}

/* The same for the rows of thread block blockIdx.x. */
template <unsigned WARPS, unsigned UNROLL, typename T, typename X>
static __device__ __forceinline__ void gm_matvec_rows(const uint8_t *w, uint64_t row_bytes, uint64_t n_rows,
                                                      uint64_t n_cols, const X *x, float *y)
{
    gm_matvec_rows_at<WARPS, UNROLL, T, X>(blockIdx.x, w, row_bytes, n_rows, n_cols, x, y);
}

/* gm_matvec_rows for a matrix of few rows (a router's), where a warp a row leaves most of the
 * device idle: row blockIdx.x, its warp steps shared among the block's WARPS warps (warp w takes
 * steps w, w + WARPS, ...), then each warp's sum and the warps' sums in warp order (another order
 * of the same terms). Four warps a row for every matrix measured slower than a warp a row on an
 * H100 (docs/dev/performance-history.md, 2026-12-07). */
template <unsigned WARPS, typename T, typename X>
static __device__ __forceinline__ void gm_matvec_row_split(const uint8_t *w, uint64_t row_bytes, uint64_t n_cols,
                                                           const X *x, float *y)
{
    __shared__ float part[WARPS];
    const uint64_t row = blockIdx.x;
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
