/* The CUDA backend's device code run on the CPU, for machines without a device (CI): the block
 * decoders of backend/cuda/blocks.cuh and the 8-bit matrix-vector kernels of
 * backend/cuda/matvec_q8_kernels.cuh, compiled from their own source as C++ with the few CUDA
 * features they use emulated (tests/unit/cuda_emu: a warp is 32 host threads, the shuffles meet at
 * a barrier). It checks what can go wrong without a device, the index arithmetic: every decoder
 * gives the CPU reference's values bit for bit, the device's value tables equal the host's, the
 * vector's quantization is the reference's, and every kernel's product is within 1e-5 of the exact
 * product of the decoded rows and the quantized vector (relative to the row's sum of |w x|), over
 * shapes with a partial warp step and fewer blocks than one step. What it cannot check (timing,
 * memory coalescing, the real shuffles) is test_cuda's, on a device. */
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "backend/cuda/attn_kernels.cuh"
#include "backend/cuda/attn_prompt_kernels.cuh"
#include "backend/cuda/ffn_kernels.cuh"
#include "backend/cuda/prefill_kernels.cuh"
#include "backend/cuda/route_kernels.cuh"

extern "C" {
#include "kernels/dequant.h"
#include "kernels/quant_tables.h"
#include "block_scales.h"
}

thread_local dim3 threadIdx, blockIdx, blockDim;
static thread_local unsigned g_lane, g_warp_id;
/* a barrier a warp (launch_block runs a block's warps at once, the other launches one warp at a
 * time as warp 0), and the block's */
static std::barrier<> *g_warps[32];
static std::barrier<> *g_block;

/* Lane g_lane's value v given to its warp; lane src's taken back (src past the warp: v). */
template <class T> static T exchange(T v, unsigned src)
{
    static T slot[32][32];
    slot[g_warp_id][g_lane] = v;
    g_warps[g_warp_id]->arrive_and_wait();
    const T r = src < 32 ? slot[g_warp_id][src] : v;
    g_warps[g_warp_id]->arrive_and_wait();
    return r;
}

void __syncthreads() { g_block->arrive_and_wait(); }
void __syncwarp(unsigned) { g_warps[g_warp_id]->arrive_and_wait(); }

float __shfl_sync(unsigned, float v, int src) { return exchange(v, (unsigned)src % 32); }
float __shfl_down_sync(unsigned, float v, int off) { return exchange(v, g_lane + (unsigned)off); }
float __shfl_xor_sync(unsigned, float v, int off) { return exchange(v, g_lane ^ (unsigned)off); }
double __shfl_xor_sync(unsigned, double v, int off) { return exchange(v, g_lane ^ (unsigned)off); }
int __shfl_xor_sync(unsigned, int v, int off) { return exchange(v, g_lane ^ (unsigned)off); }
unsigned __ballot_sync(unsigned, int pred)
{
    unsigned r = 0;
    for (unsigned l = 0; l < 32; l++)
        r |= (unsigned)(exchange(pred ? 1 : 0, l) != 0) << l;
    return r;
}

/* A launch of grid x grid_y blocks of NW warps, one warp at a time (its 32 lanes as threads). */
template <unsigned NW, class K, class... A> static void launch_warps(unsigned grid, unsigned grid_y, K k, A... a)
{
    for (unsigned gy = 0; gy < grid_y; gy++)
        for (unsigned g = 0; g < grid; g++)
            for (unsigned w = 0; w < NW; w++) {
                std::vector<std::thread> lanes;
                for (unsigned l = 0; l < 32; l++)
                    lanes.emplace_back([=] {
                        blockIdx = {g, gy, 0};
                        threadIdx = {w * 32 + l, 0, 0};
                        blockDim = {32 * NW, 1, 1};
                        g_lane = l;
                        k(a...);
                    });
                for (auto &t : lanes)
                    t.join();
            }
}
/* The matrix kernels' blocks of WARPS warps. */
template <class K, class... A> static void launch2(unsigned grid, unsigned grid_y, K k, A... a)
{
    launch_warps<WARPS>(grid, grid_y, k, a...);
}
template <class K, class... A> static void launch(unsigned grid, K k, A... a) { launch2(grid, 1, k, a...); }

/* A launch of grid x grid_y blocks of `threads` threads, every thread of a block at once (as many
 * host threads, made once and taking the blocks in turn), for the kernels that meet across warps
 * (__syncthreads, __shared__): a block ends before the next begins, since a kernel's shared arrays
 * are its statics. */
template <class K, class... A>
static void launch_block3(unsigned grid, unsigned grid_y, unsigned grid_z, unsigned threads, K k, A... a)
{
    std::barrier<> block((std::ptrdiff_t)threads);
    g_block = &block;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; t++)
        ts.emplace_back([=, &block] {
            for (unsigned gz = 0; gz < grid_z; gz++)
            for (unsigned gy = 0; gy < grid_y; gy++)
                for (unsigned g = 0; g < grid; g++) {
                    blockIdx = {g, gy, gz};
                    threadIdx = {t, 0, 0};
                    blockDim = {threads, 1, 1};
                    g_lane = t % 32;
                    g_warp_id = t / 32;
                    k(a...);
                    block.arrive_and_wait();
                }
        });
    for (auto &th : ts)
        th.join();
}
template <class K, class... A> static void launch_block2(unsigned grid, unsigned grid_y, unsigned threads, K k, A... a)
{
    launch_block3(grid, grid_y, 1, threads, k, a...);
}
template <class K, class... A> static void launch_block(unsigned grid, unsigned threads, K k, A... a)
{
    launch_block2(grid, 1, threads, k, a...);
}

/* A launch of grid x grid_y blocks of one warp each. */
template <class K, class... A> static void launch_warp(unsigned grid, unsigned grid_y, K k, A... a)
{
    for (unsigned gy = 0; gy < grid_y; gy++)
        for (unsigned g = 0; g < grid; g++) {
            std::vector<std::thread> lanes;
            for (unsigned l = 0; l < 32; l++)
                lanes.emplace_back([=] {
                    blockIdx = {g, gy, 0};
                    threadIdx = {l, 0, 0};
                    blockDim = {32, 1, 1};
                    g_lane = l;
                    k(a...);
                });
            for (auto &t : lanes)
                t.join();
        }
}

/* A launch of attn_part: grid x grid_y blocks of GM_ATTN_HEADS_PER_BLOCK warps. */
template <class K, class... A> static void launch_heads(unsigned grid, unsigned grid_y, K k, A... a)
{
    launch_warps<GM_ATTN_HEADS_PER_BLOCK>(grid, grid_y, k, a...);
}

/* A launch of a kernel that uses no warp operations: its threads one after the other. */
template <class K, class... A> static void launch_flat(unsigned grid, unsigned threads, K k, A... a)
{
    for (unsigned g = 0; g < grid; g++)
        for (unsigned t = 0; t < threads; t++) {
            blockIdx = {g, 0, 0};
            threadIdx = {t, 0, 0};
            blockDim = {threads, 1, 1};
            k(a...);
        }
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t next()
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* A finite IEEE half of either sign. */
static uint16_t finite_half() { return (uint16_t)((next() & 0x8000) | ((1 + next() % 15) << 10) | (next() & 0x3ff)); }

/* Random blocks of type (n_elems values), with finite scales where the type has them. */
static void fill(uint32_t type, uint8_t *buf, uint64_t bytes, uint64_t n_elems)
{
    for (uint64_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)next();
    if (type == GM_TYPE_F16 || type == GM_TYPE_BF16) { /* finite values: an exponent of 2^-8 .. 2^3 */
        for (uint64_t i = 0; i < n_elems; i++) {
            const uint16_t v = type == GM_TYPE_F16 ? (uint16_t)((next() & 0x8000) | ((7 + next() % 12) << 10) | (next() & 0x3ff))
                                                   : (uint16_t)((next() & 0x8000) | ((119 + next() % 12) << 7) | (next() & 0x7f));
            memcpy(buf + 2 * i, &v, 2);
        }
        return;
    }
    const gm_type_info *ti = gm_type_get(type);
    for (uint64_t b = 0; b < n_elems / ti->block_elems; b++) {
        uint8_t *p = buf + b * ti->block_bytes;
        const uint16_t h[2] = {finite_half(), finite_half()};
        gm_test_block_scales(type, p, h, type == GM_TYPE_MXFP4 ? (uint8_t)(120 + next() % 15) : 0); /* 2^-8..2^6 */
    }
}

static int g_fails;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("test_cuda_emu: FAILED: " __VA_ARGS__);                                         \
            printf("\n");                                                                          \
            g_fails++;                                                                             \
        }                                                                                          \
    } while (0)

template <class D> static void check_decoder(uint32_t t)
{
    const uint64_t n = 256 * 64;
    uint64_t bytes = 0;
    gm_err err = {};
    CHECK(gm_type_row_bytes(t, n, &bytes, &err) == 0, "%s: %s", gm_type_name(t), err.msg);
    std::vector<uint8_t> src(bytes);
    std::vector<float> cpu(n);
    fill(t, src.data(), bytes, n);
    CHECK(gm_dequant_row(t, src.data(), cpu.data(), n) == 0, "%s: the CPU reference refused", gm_type_name(t));
    uint64_t diff = 0;
    for (uint64_t i = 0; i < n; i++) {
        const float v = D::at(src.data() + (i / D::block) * D::bytes, (int)(i % D::block));
        diff += memcmp(&v, &cpu[i], sizeof v) != 0;
    }
    CHECK(diff == 0, "%s decoder: %llu of %llu values differ from the CPU's", gm_type_name(t),
          (unsigned long long)diff, (unsigned long long)n);
}

typedef void (*jobs_fn)(const gm_mv_job *, uint64_t, uint64_t, uint64_t);
typedef void (*q8_kernel_fn)(const uint8_t *, uint64_t, uint64_t, uint64_t, const gm_cuda_q8_block *, float *);
typedef void (*q8_multi_fn)(gm_mv_multi, uint64_t, uint64_t, const gm_cuda_q8_block *);

/* internal.h's frame for a matrix of few rows (a thread block a row) with an 8-bit kernel. */
template <typename T>
static void matvec_q8_split(const uint8_t *w, uint64_t rb, uint64_t n_rows, uint64_t n_cols, const gm_cuda_q8_block *xq,
                            float *y)
{
    (void)n_rows;
    gm_matvec_row_split<WARPS, T>(w, rb, n_cols, xq, y);
}

/* The 8-bit kernels of one type T, as matvec_q8.cu and ffn.cu launch them. */
struct q8_set {
    q8_kernel_fn k, ks, kl;     /* a warp a row; WARPS warps a row; GM_LONG_WARPS warps a row */
    q8_multi_fn km, kml;        /* three products in one launch: a warp a row; GM_LONG_WARPS a row */
    jobs_fn kj2;                /* the experts' job kernel with two rows a warp */
};
template <typename T> static q8_set q8_kernels()
{
    return q8_set{matvec_q8<T>, matvec_q8_split<T>, matvec_q8_long<T>, matvec_q8_multi<T>, matvec_q8_multi_long<T>,
                  matvec_q8_jobs<T, 2>};
}

static void check_q8_shape(uint32_t t, const q8_set &ks_, uint64_t rows, uint64_t cols)
{
    const q8_kernel_fn k = ks_.k, ks = ks_.ks;
    const q8_multi_fn km = ks_.km;
    uint64_t rb = 0;
    gm_err err = {};
    CHECK(gm_type_row_bytes(t, cols, &rb, &err) == 0, "%s: %s", gm_type_name(t), err.msg);
    std::vector<uint8_t> w(rb * rows);
    fill(t, w.data(), w.size(), rows * cols);
    std::vector<float> x(cols), y(rows, -1e30f), row(cols), xd(cols);
    for (auto &v : x)
        v = (float)((int)(next() % 2001) - 1000) / 1000.0f;
    std::vector<gm_cuda_q8_block> xq(cols / 32);
    launch((unsigned)((cols / 32 + WARPS - 1) / WARPS), quantize, (const float *)x.data(), cols, xq.data());
    int bad = 0;
    for (uint64_t b = 0; b < cols / 32; b++) {
        float amax = 0;
        int sum = 0;
        for (int i = 0; i < 32; i++)
            amax = fabsf(x[b * 32 + i]) > amax ? fabsf(x[b * 32 + i]) : amax;
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        bad += xq[b].d != d;
        for (int i = 0; i < 32; i++) {
            bad += xq[b].qs[i] != (int8_t)roundf(x[b * 32 + i] * id);
            xd[b * 32 + i] = d * xq[b].qs[i];
            sum += xq[b].qs[i];
        }
        bad += xq[b].s != d * (float)sum;
    }
    CHECK(bad == 0, "%s: the vector's quantization differs from the reference's in %d places", gm_type_name(t), bad);
    launch((unsigned)((rows + WARPS - 1) / WARPS), k, (const uint8_t *)w.data(), rb, rows, cols,
           (const gm_cuda_q8_block *)xq.data(), y.data());
    /* and through the few rows' frame: a thread block a row */
    std::vector<float> ysplit(rows, -1e30f);
    launch_block((unsigned)rows, 32 * WARPS, ks, (const uint8_t *)w.data(), rb, rows, cols,
                 (const gm_cuda_q8_block *)xq.data(), ysplit.data());
    /* long rows' frame (GM_LONG_WARPS warps a row), and the experts' job kernel with two rows a
     * warp (a half-warp a row; an odd number of rows leaves a half-warp past the last) */
    std::vector<float> ylong(rows, -1e30f), yj2(rows, -1e30f);
    launch_block((unsigned)rows, 32 * GM_LONG_WARPS, ks_.kl, (const uint8_t *)w.data(), rb, rows, cols,
                 (const gm_cuda_q8_block *)xq.data(), ylong.data());
    const gm_mv_job job = {w.data(), xq.data(), yj2.data()};
    launch2((unsigned)((rows + 2 * WARPS - 1) / (2 * WARPS)), 1, ks_.kj2, &job, rb, rows, cols);
    double worst = 0, worst_split = 0, worst_long = 0, worst_j2 = 0;
    for (uint64_t r = 0; r < rows; r++) {
        gm_dequant_row(t, w.data() + r * rb, row.data(), cols);
        double exact = 0, mag = 0;
        for (uint64_t i = 0; i < cols; i++) {
            exact += (double)row[i] * xd[i];
            mag += fabs((double)row[i] * xd[i]);
        }
        const double rel = fabs(y[r] - exact) / (mag > 0 ? mag : 1);
        worst = rel > worst || rel != rel ? rel : worst;
        const double rs = fabs(ysplit[r] - exact) / (mag > 0 ? mag : 1);
        worst_split = rs > worst_split || rs != rs ? rs : worst_split;
        const double rl = fabs(ylong[r] - exact) / (mag > 0 ? mag : 1);
        worst_long = rl > worst_long || rl != rl ? rl : worst_long;
        const double rj = fabs(yj2[r] - exact) / (mag > 0 ? mag : 1);
        worst_j2 = rj > worst_j2 || rj != rj ? rj : worst_j2;
    }
    CHECK(worst <= 1e-5 && worst_split <= 1e-5 && worst_long <= 1e-5 && worst_j2 <= 1e-5,
          "%s 8-bit kernel, %llu x %llu: off by %.3g of the row's |w x| sum (a block a row: %.3g, long rows' "
          "frame: %.3g, two rows a warp: %.3g)",
          gm_type_name(t), (unsigned long long)rows, (unsigned long long)cols, worst, worst_split, worst_long,
          worst_j2);
    /* the same rows as three products of one launch (a layer's q, k and v): each row as alone */
    gm_mv_multi p = {};
    std::vector<float> y3(rows, -1e30f);
    const uint64_t cut[4] = {0, rows / 2, rows / 2 + (rows - rows / 2) / 2, rows};
    uint32_t blocks = 0;
    for (unsigned j = 0; j < 3; j++) {
        p.w[j] = w.data() + cut[j] * rb;
        p.y[j] = y3.data() + cut[j];
        p.n_rows[j] = cut[j + 1] - cut[j];
        p.first[j] = blocks;
        blocks += (uint32_t)((p.n_rows[j] + WARPS - 1) / WARPS);
    }
    p.n = 3;
    launch(blocks, km, p, rb, cols, (const gm_cuda_q8_block *)xq.data());
    CHECK(memcmp(y3.data(), y.data(), rows * sizeof(float)) == 0, "%s: three products in one launch differ from one",
          gm_type_name(t));
    /* and with long rows' frame: a row a block */
    std::vector<float> y3l(rows, -1e30f);
    for (unsigned j = 0; j < 3; j++) {
        p.y[j] = y3l.data() + cut[j];
        p.first[j] = (uint32_t)cut[j];
    }
    launch_block((unsigned)rows, 32 * GM_LONG_WARPS, ks_.kml, p, rb, cols, (const gm_cuda_q8_block *)xq.data());
    CHECK(memcmp(y3l.data(), ylong.data(), rows * sizeof(float)) == 0,
          "%s: three long-row products in one launch differ from one", gm_type_name(t));
    printf("test_cuda_emu: %s 8-bit kernel %llu x %llu: within %.2g\n", gm_type_name(t), (unsigned long long)rows,
           (unsigned long long)cols, worst);
}

/* align: what the kernel needs of a row's bytes (its type's align): rows of blocks of 32 that are
 * not a multiple of it are left out, as gm_cuda_matvec_q8_fits leaves them to the float product. */
static void check_q8(uint32_t t, const q8_set &k, unsigned align)
{
    check_q8_shape(t, k, 19, 256 * 9); /* 9 super-blocks: a partial last warp step */
    check_q8_shape(t, k, 3, 256);      /* fewer blocks than one step */
    check_q8_shape(t, k, 5, 256 * 6);  /* an expert's down row of 1536: three half-warp steps */
    if (gm_type_get(t)->block_elems == 32) {
        const uint64_t bb = gm_type_get(t)->block_bytes;
        for (uint64_t nb : {13u, 3u, 14u, 2u})
            if (nb * bb % align == 0)
                check_q8_shape(t, k, 9 - (uint32_t)nb % 2, 32 * nb);
    }
}

/* The vector's 8-bit blocks as the kernels see them, and the values they stand for. */
static void quantize_ref(const std::vector<float> &x, std::vector<gm_cuda_q8_block> &xq, std::vector<float> &xd)
{
    xq.resize(x.size() / 32);
    xd.resize(x.size());
    launch((unsigned)((x.size() / 32 + WARPS - 1) / WARPS), quantize, (const float *)x.data(), (uint64_t)x.size(),
           xq.data());
    for (size_t i = 0; i < x.size(); i++)
        xd[i] = xq[i / 32].d * xq[i / 32].qs[i % 32];
}

/* One token's experts through the grouped kernels as ffn.cu queues them (gate j and up j
 * interleaved in one table, the activation, the activations quantized as one vector where the down
 * type takes blocks, the downs) against a reference in double from the decoded rows: n experts of
 * dim x ff, gate and up of type gu_t, down of type d_t. */
static void check_ffn(uint32_t gu_t, uint32_t d_t, jobs_fn gu_k, bool gu_q8, jobs_fn d_k, bool d_q8, gm_cuda_act act)
{
    const uint64_t dim = 256, ff = 256;
    const uint32_t n = 2;
    uint64_t rb_gu = 0, rb_d = 0;
    gm_err err = {};
    gm_type_row_bytes(gu_t, dim, &rb_gu, &err);
    gm_type_row_bytes(d_t, ff, &rb_d, &err);
    std::vector<uint8_t> wg(n * ff * rb_gu), wu(n * ff * rb_gu), wd(n * dim * rb_d);
    fill(gu_t, wg.data(), wg.size(), n * ff * dim);
    fill(gu_t, wu.data(), wu.size(), n * ff * dim);
    fill(d_t, wd.data(), wd.size(), n * dim * ff);
    std::vector<float> x(dim), xd;
    for (auto &v : x)
        v = (float)((int)(next() % 2001) - 1000) / 1000.0f;
    std::vector<gm_cuda_q8_block> xq;
    quantize_ref(x, xq, xd);
    const gm_cuda_glu glu = {act, 7.0f, 1.5f, 2.0f};
    std::vector<float> gu(2 * n * ff, -1e30f), h(n * ff, -1e30f), out(n * dim, -1e30f);
    std::vector<gm_cuda_q8_block> hq(n * ff / 32);
    std::vector<gm_mv_job> jobs(3 * n);
    for (uint32_t j = 0; j < n; j++) {
        jobs[2 * j] = {wg.data() + j * ff * rb_gu, gu_q8 ? (const void *)xq.data() : x.data(), gu.data() + 2 * j * ff};
        jobs[2 * j + 1] = {wu.data() + j * ff * rb_gu, gu_q8 ? (const void *)xq.data() : x.data(),
                           gu.data() + (2 * j + 1) * ff};
        jobs[2 * n + j] = {wd.data() + j * dim * rb_d,
                           d_q8 ? (const void *)(hq.data() + j * ff / 32) : (const void *)(h.data() + j * ff),
                           out.data() + j * dim};
    }
    launch2((unsigned)((ff + WARPS - 1) / WARPS), 2 * n, gu_k, (const gm_mv_job *)jobs.data(), rb_gu, ff, dim);
    /* the activation's blocks made by glu_jobs itself where down takes blocks (ffn.cu), which must
     * be the quantize kernel's blocks of h bit for bit */
    launch_block((unsigned)((n * ff + 255) / 256), 256, glu_jobs, (const float *)gu.data(), h.data(),
                 d_q8 ? hq.data() : (gm_cuda_q8_block *)NULL, ff, (uint64_t)n, glu);
    if (d_q8) {
        std::vector<gm_cuda_q8_block> hq2(hq.size());
        launch((unsigned)((n * ff / 32 + WARPS - 1) / WARPS), quantize, (const float *)h.data(), (uint64_t)(n * ff),
               hq2.data());
        CHECK(memcmp(hq.data(), hq2.data(), hq.size() * sizeof hq[0]) == 0,
              "the activation's blocks from glu_jobs differ from the quantize kernel's");
    }
    launch2((unsigned)((dim + WARPS - 1) / WARPS), n, d_k, (const gm_mv_job *)(jobs.data() + 2 * n), rb_d, dim, ff);
    /* the reference: the decoded rows times the vector the kernels saw, the CPU's activation, the
     * activations as the down product saw them (their blocks where it takes blocks) */
    const std::vector<float> &xs = gu_q8 ? xd : x;
    std::vector<float> row(ff > dim ? ff : dim), hr(n * ff);
    double worst_gu = 0, worst = 0;
    for (uint32_t j = 0; j < n; j++)
        for (uint64_t r = 0; r < ff; r++) {
            double v[2], mag[2];
            for (int m = 0; m < 2; m++) {
                gm_dequant_row(gu_t, (m ? wu : wg).data() + (j * ff + r) * rb_gu, row.data(), dim);
                v[m] = mag[m] = 0;
                for (uint64_t i = 0; i < dim; i++) {
                    v[m] += (double)row[i] * xs[i];
                    mag[m] += fabs((double)row[i] * xs[i]);
                }
                const double rel = fabs(gu[(2 * j + m) * ff + r] - v[m]) / (mag[m] > 0 ? mag[m] : 1);
                worst_gu = rel > worst_gu || rel != rel ? rel : worst_gu;
            }
            /* the activation from the kernels' own gate and up (their error is checked above) */
            const float g = gu[2 * j * ff + r], u = gu[(2 * j + 1) * ff + r];
            float a;
            switch (act) {
            case GM_CUDA_SITU: a = tanhf(g / 1.5f) * 1.5f / (1 + expf(-g)) * (tanhf(u / 2.0f) * 2.0f); break;
            case GM_CUDA_SWIGLU_OAI: {
                const float c = g < 7 ? g : 7, b = u < -7 ? -7 : u > 7 ? 7 : u;
                a = c / (1 + expf(-1.702f * c)) * (b + 1);
                break;
            }
            default: a = g / (1 + expf(-g)) * u;
            }
            hr[j * ff + r] = a;
            worst = fabs(h[j * ff + r] - a) > 1e-5 * (fabs(a) + 1) ? 1 : worst;
        }
    CHECK(worst == 0, "experts %s/%s: the activation differs from the CPU's formula", gm_type_name(gu_t),
          gm_type_name(d_t));
    std::vector<float> hs = h;
    if (d_q8)
        for (size_t i = 0; i < hs.size(); i++)
            hs[i] = hq[i / 32].d * hq[i / 32].qs[i % 32];
    double worst_d = 0;
    for (uint32_t j = 0; j < n; j++)
        for (uint64_t r = 0; r < dim; r++) {
            gm_dequant_row(d_t, wd.data() + (j * dim + r) * rb_d, row.data(), ff);
            double v = 0, mag = 0;
            for (uint64_t i = 0; i < ff; i++) {
                v += (double)row[i] * hs[j * ff + i];
                mag += fabs((double)row[i] * hs[j * ff + i]);
            }
            const double rel = fabs(out[j * dim + r] - v) / (mag > 0 ? mag : 1);
            worst_d = rel > worst_d || rel != rel ? rel : worst_d;
        }
    CHECK(worst_gu <= 1e-5 && worst_d <= 1e-5, "experts %s/%s: gate/up off by %.3g, down by %.3g", gm_type_name(gu_t),
          gm_type_name(d_t), worst_gu, worst_d);
    /* a job without a matrix (an expert left to the host) is skipped: its row stays as it was */
    std::vector<float> kept(out);
    for (uint64_t r = 0; r < dim; r++)
        out[dim + r] = -7.0f;
    jobs[2 * n + 1].w = NULL;
    launch2((unsigned)((dim + WARPS - 1) / WARPS), n, d_k, (const gm_mv_job *)(jobs.data() + 2 * n), rb_d, dim, ff);
    bool skipped = memcmp(out.data(), kept.data(), dim * sizeof(float)) == 0;
    for (uint64_t r = 0; r < dim; r++)
        skipped &= out[dim + r] == -7.0f;
    CHECK(skipped, "experts %s/%s: a job without a matrix was not skipped", gm_type_name(gu_t), gm_type_name(d_t));
    printf("test_cuda_emu: %u experts %s/%s (%s, activation %d): products within %.2g and %.2g\n", n,
           gm_type_name(gu_t), gm_type_name(d_t), gu_q8 ? "8-bit vector" : "float vector", (int)act, worst_gu, worst_d);
}

static double frand() { return (double)(next() % 2000001) / 1000000.0 - 1.0; }

/* A cache of random rows (half or float32) for positions 0 .. rows, kv heads apart. */
static void fill_cache(std::vector<uint8_t> &kc, std::vector<uint8_t> &vc, uint32_t hd, uint64_t rb,
                       uint32_t cache_type)
{
    for (uint64_t i = 0; i < kc.size() / (rb / hd); i++) {
        const float a = (float)(2 * frand()), b = (float)(2 * frand());
        if (cache_type == GM_TYPE_F16) {
            ((uint16_t *)kc.data())[i] = gm_f32_to_f16(a);
            ((uint16_t *)vc.data())[i] = gm_f32_to_f16(b);
        } else {
            ((float *)kc.data())[i] = a;
            ((float *)vc.data())[i] = b;
        }
    }
}

/* One head's attention written out in double: query qh (times scale) over positions 0 .. n_pos - 1
 * of kv head kvh, the sink joined where sink is not NULL. */
static std::vector<double> attn_ref(const float *qh, double scale, const std::vector<uint8_t> &kc,
                                    const std::vector<uint8_t> &vc, uint32_t kvh, uint32_t cap, uint64_t rb,
                                    uint32_t hd, uint32_t n_pos, uint32_t cache_type, const float *sink)
{
    std::vector<double> sc(n_pos), o(hd, 0.0);
    double mx = sink ? *sink : -INFINITY, sum = 0;
    for (uint32_t p = 0; p < n_pos; p++) {
        const uint8_t *kr = kc.data() + ((uint64_t)kvh * cap + p) * rb;
        double d = 0;
        for (uint32_t i = 0; i < hd; i++)
            d += (double)qh[i] * scale * attn_cached(kr, i, cache_type);
        sc[p] = d;
        mx = std::max(mx, d);
    }
    for (uint32_t p = 0; p < n_pos; p++) {
        const double w = exp(sc[p] - mx);
        sum += w;
        const uint8_t *vr = vc.data() + ((uint64_t)kvh * cap + p) * rb;
        for (uint32_t i = 0; i < hd; i++)
            o[i] += w * attn_cached(vr, i, cache_type);
    }
    if (sink)
        sum += exp(*sink - mx);
    for (auto &v : o)
        v /= sum;
    return o;
}

/* One token's attention kernels (attn_kernels.cuh) against a double-precision reference: the
 * heads' bias, norm and rotation, the rows they cache, and the attention of the rotated queries
 * over the cached rows in parts of `part` positions merged with the sinks. */
static void check_attn(uint32_t hd, uint32_t n_head, uint32_t n_kv, uint32_t n_rot, bool neox, bool after,
                       uint32_t cache_type, uint32_t n_pos, uint32_t part, bool extras)
{
    const uint32_t cap = n_pos + 3, pos = n_pos - 1, group = n_head / n_kv;
    const uint64_t rb = (uint64_t)hd * (cache_type == GM_TYPE_F16 ? 2 : 4);
    std::vector<float> q(n_head * hd), k(n_kv * hd), v(n_kv * hd), bq(q.size()), bk(k.size()), bv(v.size());
    std::vector<float> qn(hd), kn(hd), cs(n_rot), sinks(n_head);
    for (auto *vec : {&q, &k, &v, &bq, &bk, &bv})
        for (auto &x : *vec)
            x = (float)frand();
    for (uint32_t i = 0; i < hd; i++) {
        qn[i] = (float)(1 + 0.5 * frand());
        kn[i] = (float)(1 + 0.5 * frand());
    }
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        const double a = 3.0 * frand();
        cs[i] = (float)cos(a);
        cs[n_rot / 2 + i] = (float)sin(a);
    }
    for (auto &x : sinks)
        x = (float)(2 * frand());
    std::vector<uint8_t> kc(n_kv * cap * rb), vc(kc.size()), krow(n_kv * rb), vrow(n_kv * rb);
    fill_cache(kc, vc, hd, rb, cache_type); /* the earlier positions' rows */
    /* the reference of the heads' step, from the inputs */
    auto head = [&](const float *x, const float *b, const float *nw, std::vector<double> &out) {
        out.assign(x, x + hd);
        for (uint32_t i = 0; i < hd; i++)
            out[i] += extras ? b[i] : 0.0;
        auto norm = [&] {
            double ss = 0;
            for (double y : out)
                ss += y * y;
            const double sc = 1 / sqrt(ss / hd + 1e-6);
            for (uint32_t i = 0; i < hd; i++)
                out[i] *= sc * nw[i];
        };
        if (nw && extras && !after)
            norm();
        for (uint32_t i = 0; nw && i < n_rot / 2; i++) {
            const uint32_t a = neox ? i : 2 * i, c = neox ? i + n_rot / 2 : 2 * i + 1;
            const double x0 = out[a], x1 = out[c];
            out[a] = x0 * cs[i] - x1 * cs[n_rot / 2 + i];
            out[c] = x0 * cs[n_rot / 2 + i] + x1 * cs[i];
        }
        if (nw && extras && after)
            norm();
    };
    std::vector<std::vector<double>> ref(n_head + 2 * n_kv);
    for (uint32_t h = 0; h < n_head; h++)
        head(&q[h * hd], &bq[h * hd], qn.data(), ref[h]);
    for (uint32_t h = 0; h < n_kv; h++) {
        head(&k[h * hd], &bk[h * hd], kn.data(), ref[n_head + h]);
        head(&v[h * hd], &bv[h * hd], NULL, ref[n_head + n_kv + h]);
    }
    gm_attn_post_args pa = {q.data(), k.data(), v.data(), extras ? bq.data() : NULL, extras ? bk.data() : NULL,
                            extras ? bv.data() : NULL, extras ? qn.data() : NULL, extras ? kn.data() : NULL,
                            cs.data(), kc.data(), vc.data(), krow.data(), vrow.data(), rb, cap, pos % cap,
                            n_head, n_kv, hd, n_rot, neox, after, 1e-6f, cache_type};
    const uint32_t dev_pos = pos;
    if (extras) { /* the position read from "device memory", the row given left wrong */
        pa.pos = &dev_pos;
        pa.row = cap + 1;
    }
    const gm_attn_kernels ks = gm_attn_kernels_for(hd);
    launch_warp(n_head + 2 * n_kv, 1, ks.post, pa);
    double worst_h = 0;
    uint64_t row_diff = 0;
    for (uint32_t h = 0; h < n_head + 2 * n_kv; h++) {
        const bool is_q = h < n_head, is_k = !is_q && h < n_head + n_kv;
        const uint32_t kh = is_q ? 0 : is_k ? h - n_head : h - n_head - n_kv;
        const uint8_t *cached = (is_k ? kc.data() : vc.data()) + ((uint64_t)kh * cap + pos % cap) * rb;
        const uint8_t *copy = (is_k ? krow.data() : vrow.data()) + kh * rb;
        if (!is_q)
            row_diff += memcmp(cached, copy, rb) != 0;
        for (uint32_t i = 0; i < hd; i++) {
            const double got = is_q ? q[h * hd + i] : attn_cached(cached, i, cache_type);
            const double tol = cache_type == GM_TYPE_F16 && !is_q ? 1e-3 : 1e-5;
            worst_h = std::max(worst_h, fabs(got - ref[h][i]) / (1 + fabs(ref[h][i])) / tol * 1e-5);
        }
    }
    CHECK(worst_h <= 1e-5 && row_diff == 0, "attention heads (hd %u): off by %.3g, %llu copied rows differ", hd,
          worst_h, (unsigned long long)row_diff);
    /* the attention over the cache as the kernels left it */
    const uint32_t n_split = (n_pos + part - 1) / part;
    std::vector<float> parts(n_split * n_head * (hd + 2)), att(n_head * hd);
    gm_attn_dec_args da = {q.data(), kc.data(), vc.data(), rb, cap, n_head, n_kv, hd, n_pos, part, 0.125f, cache_type,
                           parts.data()};
    const unsigned head_blocks = (n_head + GM_ATTN_HEADS_PER_BLOCK - 1) / GM_ATTN_HEADS_PER_BLOCK;
    launch_heads(head_blocks, n_split, ks.part, da);
    std::vector<gm_cuda_q8_block> attq(n_head * hd / 32), attq_ref(n_head * hd / 32);
    launch_block(n_head, 32 * GM_ATTN_MERGE_WARPS, ks.merge, (const float *)parts.data(), n_split, n_head, hd,
                (const float *)(extras ? sinks.data() : NULL), att.data(), (const uint32_t *)NULL, attq.data());
    /* the merge's 8-bit blocks: the quantize kernel's blocks of its output, bit for bit */
    launch((unsigned)((n_head * hd / 32 + WARPS - 1) / WARPS), quantize, (const float *)att.data(),
           (uint64_t)(n_head * hd), attq_ref.data());
    CHECK(memcmp(attq.data(), attq_ref.data(), attq.size() * sizeof attq[0]) == 0,
          "attention (hd %u): the merge's 8-bit blocks differ from the quantize kernel's", hd);
    /* the same with the position in device memory: every possible part launched, gm_attn_part_len's
     * positions each, those past the last returning (their parts' memory left as it was) */
    std::vector<float> parts2(GM_ATTN_SPLITS * n_head * (hd + 2), NAN), att2(n_head * hd);
    da.pos = &dev_pos;
    da.n_pos = da.part = 0;
    da.parts = parts2.data();
    launch_heads(head_blocks, GM_ATTN_SPLITS, ks.part, da);
    launch_block(n_head, 32 * GM_ATTN_MERGE_WARPS, ks.merge, (const float *)parts2.data(), 0u, n_head, hd,
                (const float *)(extras ? sinks.data() : NULL), att2.data(), &dev_pos, (gm_cuda_q8_block *)NULL);
    CHECK(std::all_of(att2.begin(), att2.end(), [](float v) { return std::isfinite(v); }),
          "attention with the position in device memory: a value that is not finite");
    double worst_a = 0;
    for (uint32_t h = 0; h < n_head; h++) {
        const std::vector<double> o = attn_ref(&q[h * hd], 0.125, kc, vc, h / group, cap, rb, hd, n_pos, cache_type,
                                               extras ? &sinks[h] : NULL);
        for (uint32_t i = 0; i < hd; i++)
            worst_a = std::max({worst_a, fabs(att[h * hd + i] - o[i]), fabs(att2[h * hd + i] - o[i])});
    }
    std::vector<float> y(att), b(att.size(), 0.5f); /* the output's bias */
    launch_flat(1, (unsigned)att.size() + 5, attn_add, y.data(), (const float *)b.data(), (uint64_t)att.size());
    for (size_t i = 0; i < y.size(); i++)
        CHECK(y[i] == att[i] + 0.5f, "the output's bias at %zu", i);
    CHECK(worst_a <= 1e-5, "attention (hd %u, %u positions in parts of %u): off by %.3g", hd, n_pos, part, worst_a);
    printf("test_cuda_emu: attention hd %u, %u/%u heads, rotation %u %s, %s cache, %u positions in %u parts%s: heads "
           "within %.2g, attention within %.2g\n", hd, n_head, n_kv, n_rot, neox ? "neox" : "adjacent",
           cache_type == GM_TYPE_F16 ? "half" : "float32", n_pos, n_split,
           extras ? " (biases, norms, sinks)" : "", worst_h, worst_a);
}

/* attn_prompt (a chunk's causal attention, PF_TOK tokens a block) against the attention written
 * out in double: token t of n at position pos + t over the cached positions 0 .. pos + t (the
 * later rows of the cache, the chunk's next tokens', left out), the sink joined where there is one;
 * within 1e-5. */
static void check_attn_prompt(uint32_t hd, uint32_t n_head, uint32_t n_kv, uint32_t cache_type, uint32_t pos,
                              uint32_t n, bool sinks_on)
{
    const uint32_t cap = pos + n + 2, group = n_head / n_kv;
    const uint64_t rb = (uint64_t)hd * (cache_type == GM_TYPE_F16 ? 2 : 4);
    std::vector<float> q((uint64_t)n * n_head * hd), sinks(n_head), out(q.size(), NAN);
    for (auto &x : q)
        x = (float)(2 * frand());
    for (auto &x : sinks)
        x = (float)(2 * frand());
    std::vector<uint8_t> kc(n_kv * cap * rb), vc(kc.size());
    fill_cache(kc, vc, hd, rb, cache_type);
    const float scale = 0.125f;
    gm_attn_prompt_args a = {q.data(), kc.data(), vc.data(), rb, cap, n_head, n_kv, pos, n, scale, cache_type,
                             sinks_on ? sinks.data() : NULL, out.data()};
    const unsigned tok = attn_prompt_tokens(hd / 32);
    launch_block3((n + tok - 1) / tok, n_kv, 1, 32 * group, attn_prompt_for(hd), a);
    double worst = 0;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t h = 0; h < n_head; h++) {
            const std::vector<double> o = attn_ref(&q[((uint64_t)t * n_head + h) * hd], scale, kc, vc, h / group, cap,
                                                   rb, hd, pos + t + 1, cache_type, sinks_on ? &sinks[h] : NULL);
            for (uint32_t i = 0; i < hd; i++) {
                const double got = out[((uint64_t)t * n_head + h) * hd + i];
                worst = std::isfinite(got) ? std::max(worst, fabs(got - o[i])) : INFINITY;
            }
        }
    CHECK(worst <= 1e-5, "the prompt's attention (hd %u, %u/%u heads, %u tokens at %u): off by %.3g", hd, n_head,
          n_kv, n, pos, worst);
    printf("test_cuda_emu: the prompt's attention hd %u, %u/%u heads, %s cache, %u tokens at %u%s: within %.2g\n", hd,
           n_head, n_kv, cache_type == GM_TYPE_F16 ? "half" : "float32", n, pos, sinks_on ? ", sinks" : "", worst);
}

/* The residual add and norm of route_kernels.cuh against gm_rms_norm's arithmetic written out:
 * the residual bit for bit, the normed values within a rounding of the mean (its double sum runs
 * in another order). */
static void check_add_rmsnorm(uint32_t n, bool add)
{
    std::vector<float> x(n), a(n), w(n), y(n), rx(n), ry(n);
    for (uint32_t i = 0; i < n; i++) {
        x[i] = (float)((int)(next() % 2001) - 1000) / 250.0f;
        a[i] = (float)((int)(next() % 2001) - 1000) / 500.0f;
        w[i] = 0.5f + (float)(next() % 1000) / 1000.0f;
    }
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) {
        rx[i] = add ? x[i] + a[i] : x[i];
        const float sq = rx[i] * rx[i];
        ss += (double)sq;
    }
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + 1e-6f);
    for (uint32_t i = 0; i < n; i++)
        ry[i] = rx[i] * scale * w[i];
    const std::vector<float> x0 = x;
    launch_block(1, gm_norm_threads(n), gm_add_rmsnorm_for(n), x.data(), (const float *)(add ? a.data() : NULL),
                 (const float *)w.data(), 1e-6f, n, y.data(), (gm_cuda_q8_block *)NULL);
    double worst = 0;
    for (uint32_t i = 0; i < n; i++)
        worst = std::max(worst, fabs((double)y[i] - ry[i]) / (1e-30 + fabs((double)ry[i])));
    CHECK(memcmp(x.data(), rx.data(), n * sizeof(float)) == 0 && worst <= 1e-6,
          "add_rmsnorm over %u values%s: residual %s, norm off by %.3g", n, add ? " (added)" : "",
          memcmp(x.data(), rx.data(), n * sizeof(float)) ? "differs" : "equal", worst);
    if (n % 32)
        return;
    /* with the 8-bit blocks made in the same launch: the same rows, and the quantize kernel's
     * blocks of y bit for bit */
    std::vector<float> x2 = x0, y2(n);
    std::vector<gm_cuda_q8_block> yq(n / 32), ref(n / 32);
    launch_block(1, gm_norm_threads(n), gm_add_rmsnorm_for(n), x2.data(), (const float *)(add ? a.data() : NULL),
                 (const float *)w.data(), 1e-6f, n, y2.data(), yq.data());
    launch((unsigned)((n / 32 + WARPS - 1) / WARPS), quantize, (const float *)y.data(), (uint64_t)n, ref.data());
    CHECK(x2 == x && y2 == y && memcmp(yq.data(), ref.data(), yq.size() * sizeof yq[0]) == 0,
          "add_rmsnorm over %u values with its 8-bit blocks: rows %s, blocks %s", n,
          x2 == x && y2 == y ? "equal" : "differ",
          memcmp(yq.data(), ref.data(), yq.size() * sizeof yq[0]) ? "differ from the quantize kernel's" : "equal");
}

/* route_topk against infer/moe.c's routing written out (softmax summed in double in id order or
 * sigmoid, the selection bias, the first-found highest score, renormalised in double, scaled):
 * the same experts in the same order, weights within a rounding of the softmax's sum. Ties (runs
 * of equal logits) must go to the lower id. */
static void check_route(uint32_t N, uint32_t K, bool softmax, bool bias, bool norm, float scale, bool ties)
{
    std::vector<float> lg(N), sb(N), w(K), rw(K), prob(N), sel(N);
    std::vector<int32_t> ids(K), rid(K);
    for (uint32_t i = 0; i < N; i++) {
        lg[i] = (float)((int)(next() % 4001) - 2000) / 500.0f;
        sb[i] = (float)(next() % 1000) / 4000.0f;
    }
    if (ties)
        for (uint32_t i = 1; i < N; i += 3)
            lg[i] = lg[i - 1];
    if (softmax) {
        float mx = -INFINITY;
        for (uint32_t i = 0; i < N; i++)
            mx = std::max(mx, lg[i]);
        double sum = 0;
        for (uint32_t i = 0; i < N; i++) {
            prob[i] = expf(lg[i] - mx);
            sum += prob[i];
        }
        for (uint32_t i = 0; i < N; i++)
            prob[i] = (float)(prob[i] / sum);
    } else {
        for (uint32_t i = 0; i < N; i++)
            prob[i] = 1.0f / (1.0f + expf(-lg[i]));
    }
    for (uint32_t i = 0; i < N; i++)
        sel[i] = prob[i] + (bias ? sb[i] : 0.0f);
    for (uint32_t j = 0; j < K; j++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < N; i++) {
            bool taken = false;
            for (uint32_t q = 0; q < j; q++)
                taken |= rid[q] == (int32_t)i;
            if (!taken && (best < 0 || sel[i] > sel[best]))
                best = (int32_t)i;
        }
        rid[j] = best;
        rw[j] = prob[best];
    }
    if (norm) {
        double sum = 0;
        for (uint32_t j = 0; j < K; j++)
            sum += rw[j];
        for (uint32_t j = 0; j < K; j++)
            rw[j] = (float)(rw[j] / sum);
    }
    for (uint32_t j = 0; j < K; j++)
        rw[j] *= scale;
    gm_route_args ra = {lg.data(), bias ? sb.data() : NULL, N, K, softmax, norm, scale, ids.data(), w.data()};
    launch_warp(1, 1, gm_route_topk_for(N), ra);
    double worst = 0;
    for (uint32_t j = 0; j < K; j++)
        worst = std::max(worst, fabs((double)w[j] - rw[j]) / (1e-30 + fabs((double)rw[j])));
    CHECK(ids == rid && worst <= 1e-6, "routing %u experts top-%u (%s%s%s%s): %s, weights off by %.3g", N, K,
          softmax ? "softmax" : "sigmoid", bias ? ", bias" : "", norm ? ", renormalised" : "", ties ? ", ties" : "",
          ids == rid ? "the same experts" : "other experts", worst);
}

/* A chunk's rows through the row-batched kernels: add_rmsnorm a block a row and route_topk a warp
 * a token give each row what a launch of that row alone gives, bit for bit. */
static void check_rows(uint32_t rows)
{
    const uint32_t n = 300, N = 64, K = 6;
    std::vector<float> x(rows * n), a(rows * n), w(n), y(rows * n), lg(rows * N), wt(rows * K);
    std::vector<int32_t> ids(rows * K);
    for (auto &v : x)
        v = (float)((int)(next() % 2001) - 1000) / 250.0f;
    for (auto &v : a)
        v = (float)((int)(next() % 2001) - 1000) / 500.0f;
    for (auto &v : w)
        v = 0.5f + (float)(next() % 1000) / 1000.0f;
    for (auto &v : lg)
        v = (float)((int)(next() % 4001) - 2000) / 500.0f;
    std::vector<float> x1 = x;
    launch_block(rows, gm_norm_threads(n), gm_add_rmsnorm_for(n), x.data(), (const float *)a.data(), (const float *)w.data(),
                 1e-6f, n, y.data(), (gm_cuda_q8_block *)NULL);
    gm_route_args ra = {lg.data(), NULL, N, K, true, true, 1.0f, ids.data(), wt.data()};
    launch_warp(rows, 1, gm_route_topk_for(N), ra);
    bool same = true;
    for (uint32_t r = 0; r < rows; r++) {
        std::vector<float> y1(n), w1(K);
        std::vector<int32_t> i1(K);
        launch_block(1, gm_norm_threads(n), gm_add_rmsnorm_for(n), x1.data() + r * n, (const float *)a.data() + r * n,
                     (const float *)w.data(), 1e-6f, n, y1.data(), (gm_cuda_q8_block *)NULL);
        gm_route_args r1 = {lg.data() + r * N, NULL, N, K, true, true, 1.0f, i1.data(), w1.data()};
        launch_warp(1, 1, gm_route_topk_for(N), r1);
        same = same && memcmp(y1.data(), y.data() + r * n, n * 4) == 0 &&
               memcmp(x1.data() + r * n, x.data() + r * n, n * 4) == 0 &&
               memcmp(i1.data(), ids.data() + r * K, K * 4) == 0 && memcmp(w1.data(), wt.data() + r * K, K * 4) == 0;
    }
    CHECK(same, "%u rows of add_rmsnorm and route_topk in one launch differ from the rows one by one", rows);
}

/* A chunk's grouping by expert (pf_count, pf_tiles, pf_pairs) against the pairs listed on the host:
 * each expert's pairs contiguous in id order, in token order within, the tiles MM_BN pairs of one
 * expert covering them, pair_at the inverse of pair_tok; then combine_experts over the pairs
 * against each token's accumulate in ascending id, bit for bit. */
static void check_grouping(uint32_t n, uint32_t k, uint32_t N)
{
    std::vector<int32_t> ids(n * k);
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < k; j++) {
            int32_t e;
            bool taken;
            do { /* distinct within a token, some experts popular (more than a tile of pairs) */
                e = next() % 3 ? (int32_t)(next() % 4) : (int32_t)(next() % N);
                taken = false;
                for (uint32_t q = 0; q < j; q++)
                    taken |= ids[t * k + q] == e;
            } while (taken);
            ids[t * k + j] = e;
        }
    const uint32_t P = n * k, max_tiles = P / MM_BN + std::min(P, N);
    std::vector<uint32_t> cnt(N), off(N), pair_tok(P, ~0u), pair_at(P, ~0u), n_tiles(1);
    std::vector<gm_mm_tile> tiles(max_tiles);
    const unsigned eb = (N + 7) / 8;
    launch_warps<8>(eb, 1, pf_count, (const int32_t *)ids.data(), n, k, N, cnt.data());
    launch_flat(1, 1, pf_tiles, (const uint32_t *)cnt.data(), N, off.data(), tiles.data(), n_tiles.data());
    launch_warps<8>(eb, 1, pf_pairs, (const int32_t *)ids.data(), n, k, N, (const uint32_t *)off.data(),
                    pair_tok.data(), pair_at.data());
    std::vector<uint32_t> rtok;
    std::vector<gm_mm_tile> rtiles;
    bool ok = true;
    for (uint32_t e = 0; e < N; e++) {
        const uint32_t first = (uint32_t)rtok.size();
        ok = ok && off[e] == first;
        for (uint32_t t = 0; t < n; t++)
            for (uint32_t j = 0; j < k; j++)
                if (ids[t * k + j] == (int32_t)e) {
                    ok = ok && pair_at[t * k + j] == rtok.size();
                    rtok.push_back(t);
                }
        const uint32_t c = (uint32_t)rtok.size() - first;
        ok = ok && cnt[e] == c;
        for (uint32_t i = 0; i < c; i += MM_BN)
            rtiles.push_back({e, first + i, std::min(c - i, MM_BN)});
    }
    ok = ok && rtok == pair_tok && n_tiles[0] == rtiles.size() && rtiles.size() <= max_tiles;
    for (size_t i = 0; ok && i < rtiles.size(); i++)
        ok = tiles[i].e == rtiles[i].e && tiles[i].first == rtiles[i].first && tiles[i].n == rtiles[i].n;
    CHECK(ok, "grouping %u tokens' %u experts of %u: the pairs or tiles differ from the host's", n, k, N);
    const uint64_t E = 300;
    std::vector<float> rows(P * E), w(n * k), out(n * E), ref(n * E);
    for (auto &v : rows)
        v = (float)((int)(next() % 2001) - 1000) / 300.0f;
    for (auto &v : w)
        v = (float)(next() % 1000) / 997.0f;
    for (size_t i = 0; i < out.size(); i++)
        out[i] = ref[i] = (float)((int)(next() % 2001) - 1000) / 700.0f;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t e = 0; e < N; e++)
            for (uint32_t j = 0; j < k; j++)
                if (ids[t * k + j] == (int32_t)e)
                    for (uint64_t i = 0; i < E; i++)
                        ref[t * E + i] = ref[t * E + i] + w[t * k + j] * rows[(uint64_t)pair_at[t * k + j] * E + i];
    launch_block2((unsigned)((E + 255) / 256), n, 256, combine_experts, out.data(), (const float *)rows.data(),
                  (const int32_t *)ids.data(), (const float *)w.data(), (const uint32_t *)pair_at.data(), k, E);
    CHECK(out == ref, "combine_experts over the pairs of %u tokens differs from their accumulate", n);
}

/* mm_f32 against the products written out in double: within 1e-5 of each output's sum of |w x|
 * (tiles with partial edges, a partial step, groups of several steps and groups past the row,
 * gathered rows, a bias). */
static void check_mm_f32(uint64_t R, uint64_t C, uint32_t n)
{
    std::vector<float> w(R * C), x(2 * n * C), y(n * R), bias(R);
    std::vector<uint32_t> xrow(n);
    for (auto &v : w)
        v = (float)((int)(next() % 2001) - 1000) / 1000.0f;
    for (auto &v : x)
        v = (float)((int)(next() % 2001) - 1000) / 700.0f;
    for (auto &v : bias)
        v = (float)((int)(next() % 2001) - 1000) / 100.0f;
    for (uint32_t t = 0; t < n; t++)
        xrow[t] = (uint32_t)(next() % (2 * n));
    gm_mm_args a = {};
    a.w = (const uint8_t *)w.data();
    a.row_bytes = C * 4;
    a.n_rows = R;
    a.n_cols = C;
    a.x = x.data();
    a.ldx = C;
    a.xrow = xrow.data();
    a.y = y.data();
    a.ldy = R;
    a.n = n;
    a.bias = bias.data();
    for (unsigned by = 0; by < (n + MM_F32_TILE - 1) / MM_F32_TILE; by++)
        for (unsigned bx = 0; bx < (R + MM_F32_TILE - 1) / MM_F32_TILE; bx++) {
            std::barrier<> block((std::ptrdiff_t)MM_F32_THREADS);
            g_block = &block;
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < MM_F32_THREADS; t++)
                ts.emplace_back([=] {
                    blockIdx = {bx, by, 0};
                    threadIdx = {t, 0, 0};
                    blockDim = {MM_F32_THREADS, 1, 1};
                    mm_f32(a);
                });
            for (auto &th : ts)
                th.join();
        }
    double worst = 0;
    for (uint32_t t = 0; t < n; t++)
        for (uint64_t r = 0; r < R; r++) {
            double ref = bias[r], mag = fabs(bias[r]);
            for (uint64_t c = 0; c < C; c++) {
                ref += (double)w[r * C + c] * x[(uint64_t)xrow[t] * C + c];
                mag += fabs((double)w[r * C + c] * x[(uint64_t)xrow[t] * C + c]);
            }
            worst = std::max(worst, fabs(y[(uint64_t)t * R + r] - ref) / (mag + 1e-30));
        }
    CHECK(worst <= 1e-5, "mm_f32 of %llu x %llu by %u rows: off by %.3g", (unsigned long long)R,
          (unsigned long long)C, n, worst);
}

/* mm_tc (the tensor cores' tiles, WMMA emulated by tests/unit/cuda_emu/mma.h) against the exact
 * products of the CPU's decoded rows and X, both rounded to half as the tiles take them: within
 * 1e-5 of each output's sum of |w x|. Dense with tiles of 64 and of 128 weight rows and steps of
 * 64 and of 32 values (partial tiles both ways, a bias); q, k and v in one launch (n_mats: the
 * shorter matrices' extra tiles return); grouped tiles of a table of experts over gathered rows of
 * X, an expert without weights (its outputs left as they were) and tiles past the table's count. */
static std::vector<float> mm_half_rows(uint32_t t, const uint8_t *w, uint64_t rb, uint64_t rows, uint64_t cols)
{
    std::vector<float> out(rows * cols);
    for (uint64_t r = 0; r < rows; r++) {
        gm_dequant_row(t, w + r * rb, &out[r * cols], cols);
        for (uint64_t c = 0; c < cols; c++)
            out[r * cols + c] = gm_f16_to_f32(gm_f32_to_f16(out[r * cols + c]));
    }
    return out;
}
template <unsigned BM, unsigned BK>
static void mm_tc_launch(uint32_t t, bool wide, const gm_mm_args &a, unsigned gy, unsigned gz)
{
    const unsigned gx = (unsigned)((a.n_rows + BM - 1) / BM);
    gm_with_decoder(t, [&](auto d) {
        using D = decltype(d);
        launch_block3(gx, gy, gz, 2 * BM, wide ? mm_tc<D, true, BM, BK> : mm_tc<D, false, BM, BK>, a);
    });
}
/* mm_tc's frame: tiles of bm (64, 128) weight rows, steps of bk (32, 64) values */
static void mm_tc_frame(unsigned bm, unsigned bk, uint32_t t, bool wide, const gm_mm_args &a, unsigned gy, unsigned gz)
{
    if (bm == 64)
        bk == 64 ? mm_tc_launch<64, 64>(t, wide, a, gy, gz) : mm_tc_launch<64, 32>(t, wide, a, gy, gz);
    else
        bk == 64 ? mm_tc_launch<128, 64>(t, wide, a, gy, gz) : mm_tc_launch<128, 32>(t, wide, a, gy, gz);
}
/* y (rows of ldy) against W's rows wh (rows x cols, half-rounded) times X's rows (xh, gathered
 * through xrow) for outputs [first, first + n) of rows; returns the worst relative error */
static double mm_worst(const std::vector<float> &wh, uint64_t rows, uint64_t cols, const std::vector<float> &xh,
                       const uint32_t *xrow, const float *y, uint64_t ldy, uint32_t first, uint32_t n,
                       const float *bias)
{
    double worst = 0;
    for (uint32_t i = first; i < first + n; i++)
        for (uint64_t r = 0; r < rows; r++) {
            const float *x = &xh[(uint64_t)(xrow ? xrow[i] : i) * cols];
            double ref = bias ? bias[r] : 0, mag = bias ? fabs(bias[r]) : 0;
            for (uint64_t c = 0; c < cols; c++) {
                ref += (double)wh[r * cols + c] * x[c];
                mag += fabs((double)wh[r * cols + c] * x[c]);
            }
            worst = std::max(worst, fabs(y[(uint64_t)i * ldy + r] - ref) / (mag + 1e-30));
        }
    return worst;
}
static void check_mm_tc(uint32_t t, bool all)
{
    const uint64_t R = 130, C = 256, KV = 40;
    const uint32_t n = 70;
    uint64_t rb = 0;
    gm_err err = {};
    if (gm_type_row_bytes(t, C, &rb, &err)) {
        CHECK(false, "%s: %s", gm_type_name(t), err.msg);
        return;
    }
    std::vector<uint8_t> wbuf(R * rb + 64); /* 16-byte aligned rows, as the wide loaders want */
    uint8_t *w = wbuf.data() + 16;
    fill(t, w, R * rb, R * C);
    if (t == GM_TYPE_F32)
        for (uint64_t i = 0; i < R * C; i++) {
            const float v = (float)((int)(next() % 2001) - 1000) / 1000.0f;
            memcpy(w + 4 * i, &v, 4);
        }
    const std::vector<float> wh = mm_half_rows(t, w, rb, R, C);
    std::vector<float> x(2 * n * C), xh(2 * n * C), bias(R);
    std::vector<uint16_t> xbits(2 * n * C);
    /* X as half by mm_to_half: saturated to the range (a few values past it), else rounded to
     * nearest as the reference rounds */
    bool same = true;
    for (uint64_t i = 0; i < x.size(); i++)
        x[i] = i % 97 == 5 ? (i % 2 ? 1e5f : -7e4f) : (float)((int)(next() % 2001) - 1000) / 700.0f;
    launch_flat((unsigned)(x.size() / 4 + 63) / 64, 64, mm_to_half, (const float *)x.data(), (__half *)xbits.data(),
                (uint64_t)x.size());
    for (uint64_t i = 0; i < x.size(); i++) {
        const uint16_t ref = gm_f32_to_f16(std::min(65504.0f, std::max(-65504.0f, x[i])));
        same = same && xbits[i] == ref;
        xh[i] = gm_f16_to_f32(ref);
    }
    CHECK(same, "mm_to_half: halves other than the saturated, rounded values");
    for (auto &v : bias)
        v = (float)((int)(next() % 2001) - 1000) / 100.0f;
    gm_mm_args a = {};
    a.row_bytes = rb;
    a.n_rows = R;
    a.n_cols = C;
    a.x = x.data();
    a.xh = xbits.data();
    a.ldx = C;
    a.n = n;
    std::vector<float> y(n * R);
    const unsigned gy = (n + MM_BN - 1) / MM_BN;
    if (t != GM_TYPE_F32) /* dense: mm() takes F32 to mm_f32 */
        for (unsigned bm : {64u, 128u})
        for (unsigned bk : {64u, 32u}) {
            if ((bm == 128 || bk == 32) && !all)
                continue;
            for (bool wide : {true, false}) {
                bool can = false; /* the type's wide loader, where it has one */
                gm_with_decoder(t, [&](auto d) { can = mm_wide_ok<decltype(d)>(w, rb); });
                if (wide && !can)
                    continue;
                std::fill(y.begin(), y.end(), NAN);
                a.w = w;
                a.y = y.data();
                a.ldy = R;
                a.bias = bias.data();
                mm_tc_frame(bm, bk, t, wide, a, gy, 1);
                const double worst = mm_worst(wh, R, C, xh, NULL, y.data(), R, 0, n, bias.data());
                CHECK(worst <= 1e-5, "%s mm_tc<%u, %u%s> dense %llux%llu by %u: off by %.3g", gm_type_name(t), bm, bk,
                      wide ? ", wide" : "", (unsigned long long)R, (unsigned long long)C, n, worst);
                printf("test_cuda_emu: %s mm_tc<%u, %u%s> dense within %.2g\n", gm_type_name(t), bm, bk,
                       wide ? ", wide" : "", worst);
                if (!all)
                    break;
            }
        }
    a.bias = NULL;
    if (!all)
        return;
    if (t != GM_TYPE_F32) { /* q, k and v in one launch: k and v the first KV rows of other matrices */
        std::vector<uint8_t> kbuf(KV * rb + 64), vbuf(KV * rb + 64);
        uint8_t *wk = kbuf.data() + 16, *wv = vbuf.data() + 16;
        fill(t, wk, KV * rb, KV * C);
        fill(t, wv, KV * rb, KV * C);
        const std::vector<float> kh = mm_half_rows(t, wk, rb, KV, C), vh = mm_half_rows(t, wv, rb, KV, C);
        std::vector<float> yk(n * (KV + 3), NAN), yv(n * (KV + 5), NAN);
        std::fill(y.begin(), y.end(), NAN);
        a.n_mats = 3;
        a.mat_w[0] = w, a.mat_w[1] = wk, a.mat_w[2] = wv;
        a.mat_y[0] = y.data(), a.mat_y[1] = yk.data(), a.mat_y[2] = yv.data();
        a.mat_rows[0] = R, a.mat_rows[1] = KV, a.mat_rows[2] = KV;
        a.mat_ldy[0] = R, a.mat_ldy[1] = KV + 3, a.mat_ldy[2] = KV + 5;
        a.w = w;
        for (unsigned bm : {64u, 128u}) {
            mm_tc_frame(bm, bm == 64 ? 32 : 64, t, false, a, gy, 3);
            const double worst = std::max({mm_worst(wh, R, C, xh, NULL, y.data(), R, 0, n, NULL),
                                           mm_worst(kh, KV, C, xh, NULL, yk.data(), KV + 3, 0, n, NULL),
                                           mm_worst(vh, KV, C, xh, NULL, yv.data(), KV + 5, 0, n, NULL)});
            CHECK(worst <= 1e-5, "%s mm_tc<%u, %u> of three matrices: off by %.3g", gm_type_name(t), bm,
                  bm == 64 ? 32 : 64, worst);
        }
        a.n_mats = 0;
    }
    /* grouped: experts 0 (70 pairs in tiles of 40 and 30: a warp's rows of X a half or wholly past
     * the count), 1 (5), 2 (3, no weights); dense, above: a full tile and one of 6 */
    std::vector<uint8_t> w1buf(R * rb + 64);
    uint8_t *w1 = w1buf.data() + 16;
    fill(t, w1, R * rb, R * C);
    if (t == GM_TYPE_F32)
        memcpy(w1, w, R * rb);
    const std::vector<float> w1h = mm_half_rows(t, w1, rb, R, C);
    std::vector<gm_cuda_expert> table(3);
    table[0].gate = w, table[1].gate = w1, table[2].gate = NULL;
    std::vector<gm_mm_tile> tiles = {{0, 0, 40}, {0, 40, 30}, {1, 70, 5}, {2, 75, 3}};
    const uint32_t pairs = 78, n_tiles = (uint32_t)tiles.size();
    std::vector<uint32_t> xrow(pairs);
    for (auto &v : xrow)
        v = next() % (2 * n);
    std::vector<float> yp(pairs * R, NAN);
    a.w = NULL;
    a.experts = table.data();
    a.which = 0;
    a.tiles = tiles.data();
    a.n_tiles = &n_tiles;
    a.xrow = xrow.data();
    a.y = yp.data();
    a.ldy = R;
    for (unsigned bm : {64u, 128u}) {
        std::fill(yp.begin(), yp.end(), NAN);
        mm_tc_frame(bm, bm == 64 ? 32 : 64, t, false, a, n_tiles + 2, 1);
        const double worst = std::max(mm_worst(wh, R, C, xh, xrow.data(), yp.data(), R, 0, 70, NULL),
                                      mm_worst(w1h, R, C, xh, xrow.data(), yp.data(), R, 70, 5, NULL));
        bool left = true;
        for (uint64_t i = 75 * R; i < yp.size(); i++)
            left = left && std::isnan(yp[i]);
        CHECK(worst <= 1e-5 && left, "%s mm_tc<%u> grouped: off by %.3g%s", gm_type_name(t), bm, worst,
              left ? "" : ", an expert without weights written");
        printf("test_cuda_emu: %s mm_tc<%u> grouped tiles within %.2g\n", gm_type_name(t), bm, worst);
    }
}

/* combine_experts against infer/moe.c's accumulate written out: bit for bit. */
static void check_combine(uint32_t k, uint64_t n)
{
    std::vector<float> rows(k * n), w(k), out(n), ref(n);
    std::vector<int32_t> ids(k);
    for (uint32_t j = 0; j < k; j++) {
        ids[j] = (int32_t)(next() % 64) * 8 + (int32_t)j; /* distinct, in no order */
        w[j] = (float)(next() % 1000) / 997.0f;
    }
    for (auto &v : rows)
        v = (float)((int)(next() % 2001) - 1000) / 300.0f;
    for (uint64_t i = 0; i < n; i++)
        out[i] = ref[i] = (float)((int)(next() % 2001) - 1000) / 700.0f;
    for (int32_t x = 0; x < 64 * 8 + 8; x++)
        for (uint32_t j = 0; j < k; j++)
            if (ids[j] == x)
                for (uint64_t i = 0; i < n; i++)
                    ref[i] += w[j] * rows[j * n + i];
    std::vector<float> start(out);
    launch_block((unsigned)((n + 255) / 256), 256, combine_experts, out.data(), (const float *)rows.data(),
                (const int32_t *)ids.data(), (const float *)w.data(), (const uint32_t *)NULL, k, n);
    CHECK(memcmp(out.data(), ref.data(), n * sizeof(float)) == 0, "combining %u experts of %llu values differs", k,
          (unsigned long long)n);
    /* split with the host: every other choice's expert lacks a gate in the table, its row comes
     * from host_rows; the other buffer's row is noise the sum must not read */
    std::vector<gm_cuda_expert> table(64 * 8 + 8, gm_cuda_expert{NULL, NULL, NULL});
    std::vector<float> dev(rows), host(rows);
    static uint8_t here;
    for (uint32_t j = 0; j < k; j++) {
        const bool on_dev = j % 2 == 1;
        if (on_dev)
            table[(size_t)ids[j]] = gm_cuda_expert{&here, &here, &here};
        for (uint64_t i = 0; i < n; i++)
            (on_dev ? host : dev)[j * n + i] = NAN;
    }
    launch_block((unsigned)((n + 255) / 256), 256, combine_split, start.data(), (const float *)dev.data(),
                (const float *)host.data(), (const int32_t *)ids.data(), (const float *)w.data(),
                (const gm_cuda_expert *)table.data(), k, n);
    CHECK(memcmp(start.data(), ref.data(), n * sizeof(float)) == 0,
          "combining %u experts of %llu values split with the host differs", k, (unsigned long long)n);
}

/* route_topk_jobs' job table against ffn.cu's table written out: gates and ups interleaved (one
 * launch) or in two runs, downs after them, each reading the expert the routing chose from the
 * layer's table (logits that make it choose ids (7 j + 3) mod 128 in that order). */
static void check_expert_jobs(uint32_t k, bool one, bool down_q8)
{
    const uint64_t ff = 96, dim = 64;
    const uint32_t N = 128;
    std::vector<gm_cuda_expert> table(N);
    static uint8_t mats[N][3];
    for (uint32_t x = 0; x < N; x++)
        table[x] = gm_cuda_expert{&mats[x][0], &mats[x][1], &mats[x][2]};
    std::vector<float> lg(N, -20.0f), w(k);
    for (uint32_t j = 0; j < k; j++)
        lg[(j * 7 + 3) % N] = 10.0f - 0.1f * (float)j;
    std::vector<int32_t> ids(k, -1);
    std::vector<gm_mv_job> jobs(3 * k);
    std::vector<float> gu(2 * k * ff), h(k * ff), out(k * dim);
    std::vector<gm_cuda_q8_block> hq(k * ff / 32), xq(dim / 32);
    std::vector<float> xf(dim);
    const void *xg = xq.data(), *xu = one ? (const void *)xq.data() : (const void *)xf.data();
    gm_expert_jobs_args a = {ids.data(), table.data(), jobs.data(), k, one, xg, xu, gu.data(), h.data(),
                             down_q8 ? hq.data() : NULL, out.data(), ff, dim};
    gm_route_args ra = {lg.data(), NULL, N, k, true, true, 1.0f, ids.data(), w.data()};
    launch_warp(1, 1, gm_route_topk_jobs_for(N), ra, a);
    for (uint32_t j = 0; j < k; j++)
        CHECK(ids[j] == (int32_t)((j * 7 + 3) % N), "the routing chose expert %d for choice %u", ids[j], j);
    bool ok = true;
    for (uint32_t j = 0; j < k; j++) {
        const gm_cuda_expert &e = table[ids[j]];
        const gm_mv_job &g = jobs[one ? 2 * j : j], &u = jobs[one ? 2 * j + 1 : k + j], &d = jobs[2 * k + j];
        ok &= g.w == e.gate && g.x == xg && g.y == gu.data() + 2 * j * ff;
        ok &= u.w == e.up && u.x == xu && u.y == gu.data() + (2 * j + 1) * ff;
        ok &= d.w == e.down && d.y == out.data() + j * dim &&
              d.x == (down_q8 ? (const void *)(hq.data() + j * ff / 32) : (const void *)(h.data() + j * ff));
    }
    CHECK(ok, "the job table of %u experts (gate and up %s, down %s) differs", k, one ? "together" : "apart",
          down_q8 ? "8-bit" : "float");
}

/* add_shared against infer/moe.c's shared expert written out (with and without its gate), and
 * expert_jobs_one against the table ffn.cu writes for one expert: bit for bit. */
static void check_shared(uint64_t n)
{
    std::vector<float> out(n), ref(n), row(n);
    for (uint64_t i = 0; i < n; i++) {
        out[i] = ref[i] = (float)((int)(next() % 2001) - 1000) / 700.0f;
        row[i] = (float)((int)(next() % 2001) - 1000) / 300.0f;
    }
    const float logit = -0.37f, g = 1.0f / (1.0f + expf(-logit));
    for (uint64_t i = 0; i < n; i++)
        ref[i] += g * row[i];
    launch_flat((unsigned)((n + 255) / 256), 256, add_shared, out.data(), (const float *)row.data(), &logit, n);
    CHECK(memcmp(out.data(), ref.data(), n * sizeof(float)) == 0, "the gated shared expert's sum of %llu differs",
          (unsigned long long)n);
    std::vector<float> zero(n, 0.0f);
    launch_flat((unsigned)((n + 255) / 256), 256, add_shared, zero.data(), (const float *)row.data(),
                (const float *)NULL, n);
    CHECK(memcmp(zero.data(), row.data(), n * sizeof(float)) == 0, "a dense FFN's output added to 0 differs");
    static uint8_t mats[3];
    const gm_cuda_expert ex = {&mats[0], &mats[1], &mats[2]};
    std::vector<gm_mv_job> jobs(3);
    std::vector<float> gu(2 * 64), h(64), dout(32);
    float x[4];
    launch_flat(1, 32, expert_jobs_one, ex, jobs.data(), true, (const void *)x, (const void *)x, gu.data(),
                (const float *)h.data(), (const gm_cuda_q8_block *)NULL, dout.data(), (uint64_t)64, (uint64_t)32);
    CHECK(jobs[0].w == ex.gate && jobs[0].y == gu.data() && jobs[1].w == ex.up && jobs[1].y == gu.data() + 64 &&
              jobs[2].w == ex.down && jobs[2].x == h.data() && jobs[2].y == dout.data(),
          "one expert's job table differs");
}

int main()
{
    for (auto &b : g_warps)
        b = new std::barrier<>(32);
    CHECK(memcmp(gm_dev_kvalues_iq4nl, gm_kvalues_iq4nl, 16) == 0, "the device's IQ4_NL table differs");
    CHECK(memcmp(gm_dev_kvalues_mxfp4, gm_kvalues_mxfp4, 16) == 0, "the device's MXFP4 table differs");
    check_decoder<gm_deq_q4_0>(GM_TYPE_Q4_0);
    check_decoder<gm_deq_q5_0>(GM_TYPE_Q5_0);
    check_decoder<gm_deq_q8_0>(GM_TYPE_Q8_0);
    check_decoder<gm_deq_iq4_nl>(GM_TYPE_IQ4_NL);
    check_decoder<gm_deq_mxfp4>(GM_TYPE_MXFP4);
    check_decoder<gm_deq_q2_K>(GM_TYPE_Q2_K);
    check_decoder<gm_deq_q3_K>(GM_TYPE_Q3_K);
    check_decoder<gm_deq_q45_K<false>>(GM_TYPE_Q4_K);
    check_decoder<gm_deq_q45_K<true>>(GM_TYPE_Q5_K);
    check_decoder<gm_deq_q6_K>(GM_TYPE_Q6_K);
    check_decoder<gm_deq_iq4_xs>(GM_TYPE_IQ4_XS);
    check_decoder<gm_deq_iq2_xxs>(GM_TYPE_IQ2_XXS);
    check_decoder<gm_deq_iq2_xs>(GM_TYPE_IQ2_XS);
    check_decoder<gm_deq_iq2_s>(GM_TYPE_IQ2_S);
    check_decoder<gm_deq_iq3_xxs>(GM_TYPE_IQ3_XXS);
    check_decoder<gm_deq_iq3_s>(GM_TYPE_IQ3_S);
    check_decoder<gm_deq_iq1_s>(GM_TYPE_IQ1_S);
    check_decoder<gm_deq_iq1_m>(GM_TYPE_IQ1_M);
    check_q8(GM_TYPE_Q4_K, q8_kernels<q4_K>(), q4_K::align);
    check_q8(GM_TYPE_Q5_K, q8_kernels<q5_K>(), q5_K::align);
    check_q8(GM_TYPE_Q6_K, q8_kernels<q6_K>(), q6_K::align);
    check_q8(GM_TYPE_Q8_0, q8_kernels<q8_0>(), q8_0::align);
    check_q8(GM_TYPE_Q2_K, q8_kernels<q2_K>(), q2_K::align);
    check_q8(GM_TYPE_Q3_K, q8_kernels<q3_K>(), q3_K::align);
    check_q8(GM_TYPE_IQ4_XS, q8_kernels<iq4_xs>(), iq4_xs::align);
    check_q8(GM_TYPE_MXFP4, q8_kernels<mxfp4>(), mxfp4::align);
    check_q8(GM_TYPE_IQ2_XXS, q8_kernels<iq2_xxs>(), iq2_xxs::align);
    check_q8(GM_TYPE_IQ2_XS, q8_kernels<iq2_xs>(), iq2_xs::align);
    check_q8(GM_TYPE_IQ3_XXS, q8_kernels<iq3_xxs>(), iq3_xxs::align);
    check_q8(GM_TYPE_IQ2_S, q8_kernels<iq2_s>(), iq2_s::align);
    check_q8(GM_TYPE_IQ3_S, q8_kernels<iq3_s>(), iq3_s::align);
    check_q8(GM_TYPE_IQ1_S, q8_kernels<iq1_s>(), iq1_s::align);
    check_q8(GM_TYPE_IQ1_M, q8_kernels<iq1_m>(), iq1_m::align);
    check_ffn(GM_TYPE_Q4_K, GM_TYPE_Q6_K, matvec_q8_jobs<q4_K>, true, matvec_q8_jobs<q6_K>, true, GM_CUDA_SWIGLU);
    check_ffn(GM_TYPE_Q8_0, GM_TYPE_Q5_K, matvec_q8_jobs<q8_0>, true, matvec_q8_jobs<q5_K>, true, GM_CUDA_SITU);
    check_ffn(GM_TYPE_F16, GM_TYPE_BF16, matvec_elem_jobs<gm_deq_f16>, false, matvec_elem_jobs<gm_deq_bf16>, false,
              GM_CUDA_SWIGLU_OAI);
    check_attn(128, 8, 2, 128, true, false, GM_TYPE_F16, 40, 16, true);
    check_attn(64, 4, 4, 32, false, true, GM_TYPE_F32, 21, 128, true);
    check_attn(64, 6, 2, 64, true, false, GM_TYPE_F32, 7, 4, false);
    check_attn(256, 4, 1, 64, true, true, GM_TYPE_F16, 45, 16, true); /* four positions a step */
    check_attn(96, 3, 3, 96, false, false, GM_TYPE_F32, 30, 16, false);
    check_attn(64, 4, 2, 64, true, false, GM_TYPE_F32, 250, 4, true); /* 63 parts: every warp of the merge */
    check_attn(128, 2, 1, 128, false, true, GM_TYPE_F16, 1100, 64, false); /* 18 parts; 35 from the position */
    check_attn_prompt(128, 16, 4, GM_TYPE_F16, 37, 10, false); /* a later chunk; its last block of 2 tokens */
    check_attn_prompt(64, 6, 2, GM_TYPE_F32, 0, 33, true);     /* token 31's positions end a step before its block's */
    check_attn_prompt(96, 3, 3, GM_TYPE_F32, 5, 3, false);     /* one block, short of its tokens */
    check_attn_prompt(256, 8, 2, GM_TYPE_F16, 30, 5, true);    /* two tokens a block */
    check_add_rmsnorm(4096, true);  /* 512 threads, 8 values each */
    check_add_rmsnorm(100, false);  /* one warp, a partial step */
    check_add_rmsnorm(260, true);   /* a warp's 256 values and 4 more: a second warp */
    check_add_rmsnorm(7168, true);  /* Kimi's and DeepSeek's width: 896 threads, 8 values each */
    check_add_rmsnorm(16384, true); /* the widest */
    check_route(128, 8, true, false, true, 1.0f, false);   /* Qwen3-MoE */
    check_route(128, 8, true, false, true, 1.0f, true);
    check_route(256, 8, false, true, true, 2.5f, false);   /* sigmoid, bias, scaled (DeepSeek-V3, GLM) */
    check_route(896, 16, false, true, true, 2.827f, true); /* Kimi-K3's width */
    check_route(1024, 10, true, false, false, 1.0f, true); /* the widest, not renormalised */
    check_route(10, 10, true, false, true, 1.0f, false);   /* every expert */
    check_combine(8, 4096);
    check_combine(1, 300);
    check_rows(5);
    check_grouping(100, 8, 10); /* popular experts: several tiles each */
    check_grouping(37, 4, 128); /* most experts with few pairs or none */
    check_mm_f32(40, 100, 19);  /* partial tiles both ways, a partial step */
    check_mm_f32(128, 256, 33);
    check_mm_f32(150, 100, 70); /* several tiles both ways, partial at both ends */
    check_mm_f32(40, 700, 19);  /* a group's columns several steps, the last group's partly past the row */
    check_mm_tc(GM_TYPE_Q4_K, true); /* every frame, the wide loader and the generic one */
    check_mm_tc(GM_TYPE_Q8_0, false);
    check_mm_tc(GM_TYPE_Q6_K, false);
    check_mm_tc(GM_TYPE_IQ2_XXS, false);
    check_mm_tc(GM_TYPE_BF16, false);
    check_mm_tc(GM_TYPE_F32, true); /* grouped only: a dense F32 product is mm_f32's */
    check_shared(4096);
    check_shared(300);
    check_expert_jobs(8, true, true);
    check_expert_jobs(3, false, false);
    check_expert_jobs(64, true, false);
    printf(g_fails ? "test_cuda_emu: %d checks failed\n" : "test_cuda_emu: passed\n", g_fails);
    return g_fails != 0;
}
