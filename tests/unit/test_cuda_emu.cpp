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
#include <barrier>
#include <cstdio>
#include <thread>
#include <vector>

#include "backend/cuda/matvec_q8_kernels.cuh"

extern "C" {
#include "kernels/dequant.h"
#include "kernels/quant_tables.h"
}

thread_local dim3 threadIdx, blockIdx;
static thread_local unsigned g_lane;
static std::barrier<> g_warp(32);
static float g_f[32];
static int g_i[32];

float __shfl_down_sync(unsigned, float v, int off)
{
    g_f[g_lane] = v;
    g_warp.arrive_and_wait();
    const float r = g_lane + (unsigned)off < 32 ? g_f[g_lane + (unsigned)off] : v;
    g_warp.arrive_and_wait();
    return r;
}

float __shfl_xor_sync(unsigned, float v, int off)
{
    g_f[g_lane] = v;
    g_warp.arrive_and_wait();
    const float r = g_f[g_lane ^ (unsigned)off];
    g_warp.arrive_and_wait();
    return r;
}

int __shfl_xor_sync(unsigned, int v, int off)
{
    g_i[g_lane] = v;
    g_warp.arrive_and_wait();
    const int r = g_i[g_lane ^ (unsigned)off];
    g_warp.arrive_and_wait();
    return r;
}

/* A launch of grid blocks of WARPS warps, one warp at a time (its 32 lanes as threads). */
template <class K, class... A> static void launch(unsigned grid, K k, A... a)
{
    for (unsigned g = 0; g < grid; g++)
        for (unsigned w = 0; w < WARPS; w++) {
            std::vector<std::thread> lanes;
            for (unsigned l = 0; l < 32; l++)
                lanes.emplace_back([=] {
                    blockIdx = {g, 0, 0};
                    threadIdx = {w * 32 + l, 0, 0};
                    g_lane = l;
                    k(a...);
                });
            for (auto &t : lanes)
                t.join();
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
    const gm_type_info *ti = gm_type_get(type);
    for (uint64_t b = 0; b < n_elems / ti->block_elems; b++) {
        uint8_t *p = buf + b * ti->block_bytes;
        const uint16_t h[2] = {finite_half(), finite_half()};
        switch (type) {
        case GM_TYPE_Q4_0: memcpy(p + offsetof(gm_block_q4_0, d), h, 2); break;
        case GM_TYPE_Q5_0: memcpy(p + offsetof(gm_block_q5_0, d), h, 2); break;
        case GM_TYPE_Q8_0: memcpy(p + offsetof(gm_block_q8_0, d), h, 2); break;
        case GM_TYPE_IQ4_NL: memcpy(p + offsetof(gm_block_iq4_nl, d), h, 2); break;
        case GM_TYPE_MXFP4: p[offsetof(gm_block_mxfp4, e)] = (uint8_t)(120 + next() % 15); break;
        case GM_TYPE_Q2_K: memcpy(p + offsetof(gm_block_q2_K, d), h, 4); break;
        case GM_TYPE_Q3_K: memcpy(p + offsetof(gm_block_q3_K, d), h, 2); break;
        case GM_TYPE_Q4_K: memcpy(p + offsetof(gm_block_q4_K, d), h, 4); break;
        case GM_TYPE_Q5_K: memcpy(p + offsetof(gm_block_q5_K, d), h, 4); break;
        case GM_TYPE_Q6_K: memcpy(p + offsetof(gm_block_q6_K, d), h, 2); break;
        case GM_TYPE_IQ4_XS: memcpy(p + offsetof(gm_block_iq4_xs, d), h, 2); break;
        default: break;
        }
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

typedef void (*q8_kernel_fn)(const uint8_t *, uint64_t, uint64_t, uint64_t, const gm_cuda_q8_block *, float *);

static void check_q8_shape(uint32_t t, q8_kernel_fn k, uint64_t rows, uint64_t cols)
{
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
    double worst = 0;
    for (uint64_t r = 0; r < rows; r++) {
        gm_dequant_row(t, w.data() + r * rb, row.data(), cols);
        double exact = 0, mag = 0;
        for (uint64_t i = 0; i < cols; i++) {
            exact += (double)row[i] * xd[i];
            mag += fabs((double)row[i] * xd[i]);
        }
        const double rel = fabs(y[r] - exact) / (mag > 0 ? mag : 1);
        worst = rel > worst || rel != rel ? rel : worst;
    }
    CHECK(worst <= 1e-5, "%s 8-bit kernel, %llu x %llu: off by %.3g of the row's |w x| sum", gm_type_name(t),
          (unsigned long long)rows, (unsigned long long)cols, worst);
    printf("test_cuda_emu: %s 8-bit kernel %llu x %llu: within %.2g\n", gm_type_name(t), (unsigned long long)rows,
           (unsigned long long)cols, worst);
}

static void check_q8(uint32_t t, q8_kernel_fn k)
{
    check_q8_shape(t, k, 19, 256 * 9); /* 9 super-blocks: a partial last warp step */
    check_q8_shape(t, k, 3, 256);      /* fewer blocks than one step */
    if (gm_type_get(t)->block_elems == 32) {
        check_q8_shape(t, k, 9, 32 * 13);
        check_q8_shape(t, k, 8, 32 * 3);
    }
}

int main()
{
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
    check_q8(GM_TYPE_Q4_K, matvec_q8<q4_K>);
    check_q8(GM_TYPE_Q5_K, matvec_q8<q5_K>);
    check_q8(GM_TYPE_Q6_K, matvec_q8<q6_K>);
    check_q8(GM_TYPE_Q8_0, matvec_q8<q8_0>);
    check_q8(GM_TYPE_Q2_K, matvec_q8<q2_K>);
    check_q8(GM_TYPE_Q3_K, matvec_q8<q3_K>);
    check_q8(GM_TYPE_IQ4_XS, matvec_q8<iq4_xs>);
    check_q8(GM_TYPE_MXFP4, matvec_q8<mxfp4>);
    printf(g_fails ? "test_cuda_emu: %d checks failed\n" : "test_cuda_emu: passed\n", g_fails);
    return g_fails != 0;
}
