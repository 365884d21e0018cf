/* Tests of the SIMD dot products (kernels.h levels avx2, avx512, avx512vbmi, neon, neondot)
 * against the scalar reference of dot_ref.c, on random rows.
 *
 * Weights are random bytes (every bit pattern of the codes, scales and signs), with only the
 * float scale fields replaced by moderate values so that no block decodes to infinity or NaN.
 * Activations are random gaussians prepared by gm_act_quantize. Rows are copied to buffers of
 * exactly their size at an odd address, so an over-read or an aligned-load assumption fails
 * under AddressSanitizer or faults. Row lengths: one block, an odd number of blocks, an
 * expert-sized row; float rows also have lengths that leave a tail. Whole matrix x vector
 * products of each level (an odd row count on 3 threads, a single row on 1) are compared with
 * the scalar level's the same way.
 *
 * Error budget: every kernel sums exactly in integers inside a block (or adds float products,
 * for float weights); they differ only in how the float per-block terms are rounded and
 * accumulated (separate multiply and add vs fused, one sequential sum vs 8-16 lanes). For a row
 * of nb blocks the difference is at most about (nb + log2(lanes)) roundings of the largest
 * partial sums, so the budget is
 *     |simd - ref| <= ulps * (nb + 16) * 2^-24 * mag
 * where mag is the sum of |w_i * xq_i| with each weight split into its parts that the kernels
 * accumulate separately (the scale part and the minimum part of Q4_1, Q5_1, Q2_K, Q4_K, Q5_K),
 * so cancellation between parts cannot hide inside the bound; ulps per type is below. A wrong
 * element, scale or sign mapping gives errors of the order of mag, far outside. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/sysinfo.h"
#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/dequant.h"
#include "kernels/dot.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/quant.h"

/* Roundings allowed per block (see the file comment). 2: the scale product and the
 * accumulation; 4: also the conversion of a large integer sum and the split into lanes; 6: types
 * that accumulate two terms per block (scale and minimum, or grid and delta). Float weights: one
 * fused multiply-add per element in at least 8 lanes against a double sum, with "blocks" of
 * 8 elements. */
#define ULPS_ONE_SCALE 4.0
#define ULPS_TWO_TERMS 6.0
#define ULPS_FLOAT 2.0
#define FLOAT_BLOCK 8

typedef struct type_case {
    uint32_t type;
    double ulps;
} type_case;

static const type_case k_cases[] = {
    {GM_TYPE_Q8_0, ULPS_ONE_SCALE},    {GM_TYPE_Q4_0, ULPS_ONE_SCALE},
    {GM_TYPE_Q4_1, ULPS_TWO_TERMS},    {GM_TYPE_Q5_0, ULPS_ONE_SCALE},
    {GM_TYPE_Q5_1, ULPS_TWO_TERMS},    {GM_TYPE_IQ4_NL, ULPS_ONE_SCALE},
    {GM_TYPE_MXFP4, ULPS_ONE_SCALE},   {GM_TYPE_Q2_K, ULPS_TWO_TERMS},
    {GM_TYPE_Q3_K, ULPS_ONE_SCALE},    {GM_TYPE_Q4_K, ULPS_TWO_TERMS},
    {GM_TYPE_Q5_K, ULPS_TWO_TERMS},    {GM_TYPE_Q6_K, ULPS_ONE_SCALE},
    {GM_TYPE_IQ4_XS, ULPS_ONE_SCALE},  {GM_TYPE_IQ2_XXS, ULPS_ONE_SCALE},
    {GM_TYPE_IQ2_XS, ULPS_ONE_SCALE},  {GM_TYPE_IQ2_S, ULPS_ONE_SCALE},
    {GM_TYPE_IQ3_XXS, ULPS_ONE_SCALE}, {GM_TYPE_IQ3_S, ULPS_ONE_SCALE},
    {GM_TYPE_IQ1_S, ULPS_TWO_TERMS},   {GM_TYPE_IQ1_M, ULPS_TWO_TERMS},
    {GM_TYPE_TQ1_0, ULPS_ONE_SCALE},   {GM_TYPE_TQ2_0, ULPS_ONE_SCALE},
    {GM_TYPE_F32, ULPS_FLOAT},         {GM_TYPE_F16, ULPS_FLOAT},
    {GM_TYPE_BF16, ULPS_FLOAT},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

/* Types every x86 SIMD level must specialise (the rest may fall back to a lower level). */
static const uint32_t k_required_x86[] = {
    GM_TYPE_Q8_0,  GM_TYPE_Q4_K,   GM_TYPE_Q5_K,    GM_TYPE_Q6_K,    GM_TYPE_Q2_K,
    GM_TYPE_Q3_K,  GM_TYPE_IQ4_XS, GM_TYPE_MXFP4,   GM_TYPE_IQ2_XXS, GM_TYPE_IQ3_XXS,
    GM_TYPE_BF16,  GM_TYPE_F16,    GM_TYPE_F32,
};

/* Types the neon level must specialise (dot_neon.c); the rest may fall back to scalar code. */
static const uint32_t k_required_neon[] = {
    GM_TYPE_Q8_0,   GM_TYPE_Q4_K,   GM_TYPE_Q5_K,    GM_TYPE_Q6_K,    GM_TYPE_Q2_K,
    GM_TYPE_Q3_K,   GM_TYPE_IQ4_XS, GM_TYPE_MXFP4,   GM_TYPE_IQ2_XXS, GM_TYPE_IQ3_XXS,
    GM_TYPE_IQ4_NL, GM_TYPE_Q4_0,   GM_TYPE_BF16,    GM_TYPE_F16,     GM_TYPE_F32,
};

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint64_t rand_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double rand_unit(void)
{
    return (double)(rand_u64() >> 11) / 9007199254740992.0;
}

static float rand_gauss(void)
{
    const double u = rand_unit() + 1e-12, v = rand_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void put_u16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

/* A moderate f16 scale: magnitude 2^-8..2^-4, random sign. */
static uint16_t rand_scale16(void)
{
    const float m = (float)ldexp(1.0 + rand_unit(), -8 + (int)(rand_u64() % 4));
    return gm_f32_to_f16((rand_u64() & 1) ? -m : m);
}

/* Offsets of the f16 scale fields of a block (the minimum field second), -1 when none. */
static void scale_fields(uint32_t type, int *d, int *m)
{
    *d = -1;
    *m = -1;
    switch (type) {
    case GM_TYPE_Q4_1:
    case GM_TYPE_Q5_1:
    case GM_TYPE_Q4_K:
    case GM_TYPE_Q5_K:
        *d = 0;
        *m = 2;
        break;
    case GM_TYPE_Q2_K:
        *d = offsetof(gm_block_q2_K, d);
        *m = offsetof(gm_block_q2_K, dmin);
        break;
    case GM_TYPE_Q3_K:
        *d = offsetof(gm_block_q3_K, d);
        break;
    case GM_TYPE_Q6_K:
        *d = offsetof(gm_block_q6_K, d);
        break;
    case GM_TYPE_TQ1_0:
        *d = offsetof(gm_block_tq1_0, d);
        break;
    case GM_TYPE_TQ2_0:
        *d = offsetof(gm_block_tq2_0, d);
        break;
    case GM_TYPE_Q8_0:
    case GM_TYPE_Q4_0:
    case GM_TYPE_Q5_0:
    case GM_TYPE_IQ4_NL:
    case GM_TYPE_IQ4_XS:
    case GM_TYPE_IQ2_XXS:
    case GM_TYPE_IQ2_XS:
    case GM_TYPE_IQ2_S:
    case GM_TYPE_IQ3_XXS:
    case GM_TYPE_IQ3_S:
    case GM_TYPE_IQ1_S:
        *d = 0;
        break;
    default:
        break;
    }
}

/* Fills a row of type with random content and sane scales. */
static void rand_row(uint32_t type, uint8_t *row, uint64_t n)
{
    const gm_type_info *ti = gm_type_get(type);
    if (type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16) {
        for (uint64_t i = 0; i < n; i++) {
            const float v = rand_gauss();
            if (type == GM_TYPE_F32)
                memcpy(row + 4 * i, &v, 4);
            else
                put_u16(row + 2 * i, type == GM_TYPE_F16 ? gm_f32_to_f16(v) : gm_f32_to_bf16(v));
        }
        return;
    }
    const uint64_t nb = n / ti->block_elems;
    for (uint64_t i = 0; i < nb * ti->block_bytes; i++)
        row[i] = (uint8_t)rand_u64();
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *blk = row + b * ti->block_bytes;
        int d, m;
        scale_fields(type, &d, &m);
        if (d >= 0)
            put_u16(blk + d, rand_scale16());
        if (m >= 0)
            put_u16(blk + m, rand_scale16());
        if (type == GM_TYPE_MXFP4)
            blk[0] = (uint8_t)(120 + rand_u64() % 8); /* 2^-7 .. 2^0 */
        if (type == GM_TYPE_IQ1_M) {
            /* the f16 scale is the top nibble of the four scale words */
            const uint16_t h = rand_scale16();
            uint8_t *sc = blk + offsetof(gm_block_iq1_m, scales);
            for (int k = 0; k < 4; k++)
                sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | (((h >> (4 * k)) & 0x0f) << 4));
        }
    }
}

/* sum |w_i xq_i| with the minimum part of the "min" types counted apart (file comment). */
static double magnitude(uint32_t type, const uint8_t *row, const float *xq, uint64_t n)
{
    const gm_type_info *ti = gm_type_get(type);
    const uint64_t bytes = (n / ti->block_elems) * ti->block_bytes;
    float *wf = malloc(n * sizeof *wf);
    uint8_t *tmp = malloc(bytes);
    assert_non_null(wf);
    assert_non_null(tmp);
    double mag = 0;
    int d, m;
    scale_fields(type, &d, &m);
    if (m < 0 || !ti->quantized) {
        assert_int_equal(gm_dequant_row(type, row, wf, n), 0);
        for (uint64_t i = 0; i < n; i++)
            mag += fabs((double)wf[i] * xq[i]);
    } else {
        for (int part = 0; part < 2; part++) { /* zero d, then the minimum */
            memcpy(tmp, row, bytes);
            for (uint64_t b = 0; b < n / ti->block_elems; b++)
                put_u16(tmp + b * ti->block_bytes + (part ? m : d), 0);
            assert_int_equal(gm_dequant_row(type, tmp, wf, n), 0);
            for (uint64_t i = 0; i < n; i++)
                mag += fabs((double)wf[i] * xq[i]);
        }
    }
    free(wf);
    free(tmp);
    return mag;
}

/* Lengths to test for a type: one block, an odd count, an expert-sized row; float rows also
 * lengths with a tail and shorter than one SIMD step. */
static int row_lengths(uint32_t type, uint64_t out[8])
{
    const uint64_t be = gm_type_get(type)->block_elems;
    if (be == 1) {
        const uint64_t l[] = {1, 7, 33, 100, 1027, 7168};
        memcpy(out, l, sizeof l);
        return 6;
    }
    out[0] = be;
    out[1] = 7 * be;
    out[2] = be == 32 ? 33 * be : 9 * be;
    out[3] = 7168;
    return 4;
}

static void check_level(gm_kernel_level level)
{
    const gm_kernels *k = gm_kernels_for_level(level);
    if (!k) {
        print_message("level %s not available here: skipped\n", gm_kernel_level_name(level));
        skip();
    }
    for (size_t c = 0; c < N_CASES; c++) {
        const uint32_t type = k_cases[c].type;
        const gm_dot_fn ref = gm_dot_ref_fn(type), fast = gm_kernels_dot(k, type);
        assert_non_null(ref);
        assert_non_null(fast);
        const uint32_t act = (uint32_t)gm_dot_act_type(type);
        uint64_t lens[8];
        const int n_lens = row_lengths(type, lens);
        double worst = 0;
        for (int li = 0; li < n_lens; li++) {
            const uint64_t n = lens[li];
            uint64_t wbytes = 0, abytes = 0;
            assert_int_equal(gm_type_row_bytes(type, n, &wbytes, NULL), 0);
            assert_int_equal(gm_act_row_bytes(type, n, &abytes, NULL), 0);
            const int n_rows = n > 2048 ? 3 : 13;
            /* exact-size buffers at an odd address */
            uint8_t *wbuf = malloc(wbytes + 1), *abuf = malloc(abytes + 1);
            float *x = malloc(n * sizeof *x), *xq = malloc(n * sizeof *xq);
            assert_non_null(wbuf);
            assert_non_null(abuf);
            assert_non_null(x);
            assert_non_null(xq);
            uint8_t *w = wbuf + 1, *aq = abuf + 1;
            for (int r = 0; r < n_rows; r++) {
                for (uint64_t i = 0; i < n; i++)
                    x[i] = (r % 4 == 3 && i % 61 == 0) ? 30.0f * rand_gauss() : rand_gauss();
                assert_int_equal(gm_act_quantize(type, x, n, n, 1, aq, abytes, NULL, 1, NULL), 0);
                assert_int_equal(gm_dequant_row(act, aq, xq, n), 0);
                rand_row(type, w, n);
                const float want = ref(w, aq, n), got = fast(w, aq, n);
                const double mag = magnitude(type, w, xq, n);
                const double nb = (double)(gm_type_get(type)->block_elems == 1
                                               ? n / FLOAT_BLOCK
                                               : n / gm_type_get(type)->block_elems);
                const double tol = k_cases[c].ulps * (nb + 16) * 0x1p-24 * mag + 1e-30;
                const double e = fabs((double)got - (double)want) / tol;
                if (!(e <= 1.0))
                    print_error("%s %s n=%llu row %d: got %.9g, reference %.9g, budget %.3g\n",
                                gm_kernel_level_name(level), gm_type_name(type),
                                (unsigned long long)n, r, got, want, tol);
                assert_true(e <= 1.0);
                if (e > worst)
                    worst = e;
            }
            free(wbuf);
            free(abuf);
            free(x);
            free(xq);
        }
        print_message("%-6s %-8s (%s code) worst error %.4f of budget\n",
                      gm_kernel_level_name(level), gm_type_name(type),
                      gm_kernel_level_name(gm_kernels_dot_level(k, type)), worst);
    }
}

static void test_level(void **state)
{
    check_level((gm_kernel_level)(uintptr_t)*state);
}

/* A level, where this machine has it, has its own kernel for each of the n types. */
static void check_required(gm_kernel_level level, const uint32_t *types, size_t n)
{
    const gm_kernels *k = gm_kernels_for_level(level);
    if (!k)
        return;
    for (size_t i = 0; i < n; i++) {
        const uint32_t t = types[i];
        if (gm_kernels_dot_level(k, t) != level)
            print_error("%s has no own kernel for %s\n", gm_kernel_level_name(level),
                        gm_type_name(t));
        assert_int_equal(gm_kernels_dot_level(k, t), level);
    }
}

/* The x86 levels and the neon levels specialise the types the engine's models use most. */
static void test_required_types(void **state)
{
    (void)state;
    for (int l = GM_KERNEL_AVX2; l <= GM_KERNEL_AVX512; l++)
        check_required((gm_kernel_level)l, k_required_x86,
                       sizeof k_required_x86 / sizeof k_required_x86[0]);
    check_required(GM_KERNEL_NEON, k_required_neon,
                   sizeof k_required_neon / sizeof k_required_neon[0]);
    check_required(GM_KERNEL_NEONDOT, k_required_neon,
                   sizeof k_required_neon / sizeof k_required_neon[0]);
}

/* Zero scales and zero activations give exactly zero; large codes do not overflow. */
static void test_extremes(void **state)
{
    (void)state;
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        for (size_t c = 0; c < N_CASES; c++) {
            const uint32_t type = k_cases[c].type;
            const uint32_t act = (uint32_t)gm_dot_act_type(type);
            const uint64_t n = 512;
            uint64_t wbytes = 0, abytes = 0;
            assert_int_equal(gm_type_row_bytes(type, n, &wbytes, NULL), 0);
            assert_int_equal(gm_act_row_bytes(type, n, &abytes, NULL), 0);
            uint8_t *w = malloc(wbytes), *aq = malloc(abytes);
            float *x = malloc(n * sizeof *x);
            assert_non_null(w);
            assert_non_null(aq);
            assert_non_null(x);
            rand_row(type, w, n);
            memset(x, 0, n * sizeof *x);
            assert_int_equal(gm_act_quantize(type, x, n, n, 1, aq, abytes, NULL, 1, NULL), 0);
            assert_true(gm_kernels_dot(k, type)(w, aq, n) == 0.0f);
            /* extreme activations: every code at +-127 */
            for (uint64_t i = 0; i < n; i++)
                x[i] = (i % 3) ? 1.0f : -1.0f;
            assert_int_equal(gm_act_quantize(type, x, n, n, 1, aq, abytes, NULL, 1, NULL), 0);
            const float want = gm_dot_ref_fn(type)(w, aq, n);
            const float got = gm_kernels_dot(k, type)(w, aq, n);
            float *xq = malloc(n * sizeof *xq);
            assert_non_null(xq);
            assert_int_equal(gm_dequant_row(act, aq, xq, n), 0);
            const double tol = k_cases[c].ulps * (n + 16) * 0x1p-24 * magnitude(type, w, xq, n);
            if (!(fabs(got - want) <= tol + 1e-30))
                print_error("%s %s extreme: got %.9g want %.9g\n",
                            gm_kernel_level_name((gm_kernel_level)l), gm_type_name(type), got,
                            want);
            assert_true(fabs(got - want) <= tol + 1e-30);
            free(xq);
            free(w);
            free(aq);
            free(x);
        }
    }
}

/* Whole products: each level's matvec over an odd number of rows on several threads (and a
 * single row on one) agrees with the scalar level's, row by row, within the same budget. */
static void test_matvec_levels(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_pool *pool = NULL;
    /* GMLX_TEST_THREADS=1: no worker threads (scripts/neon-check.sh runs this program under
     * qemu-user, whose thread creation hangs in some sandboxes; the pool itself is tested
     * natively) */
    const char *tt = getenv("GMLX_TEST_THREADS");
    const int threads_many = tt && strcmp(tt, "1") == 0 ? 1 : 3;
    assert_int_equal(gm_pool_create(&pool, threads_many, &err), 0);
    const gm_kernels *ref = gm_kernels_for_level(GM_KERNEL_SCALAR);
    const uint64_t n = 1024;
    for (int l = GM_KERNEL_AVX2; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        for (size_t c = 0; c < N_CASES; c++) {
            const uint32_t type = k_cases[c].type;
            const uint32_t act = (uint32_t)gm_dot_act_type(type);
            for (int shape = 0; shape < 2; shape++) {
                const uint64_t rows = shape == 0 ? 37 : 1;
                const int threads = shape == 0 ? threads_many : 1;
                uint64_t rb = 0, abytes = 0;
                assert_int_equal(gm_type_row_bytes(type, n, &rb, NULL), 0);
                assert_int_equal(gm_act_row_bytes(type, n, &abytes, NULL), 0);
                uint8_t *w = malloc(rb * rows), *aq = malloc(abytes);
                float *x = malloc(n * sizeof *x), *xq = malloc(n * sizeof *xq);
                float *y = malloc(rows * sizeof *y), *yr = malloc(rows * sizeof *yr);
                assert_true(w && aq && x && xq && y && yr);
                for (uint64_t r = 0; r < rows; r++)
                    rand_row(type, w + r * rb, n);
                for (uint64_t i = 0; i < n; i++)
                    x[i] = rand_gauss();
                assert_int_equal(gm_act_quantize(type, x, n, n, 1, aq, abytes, NULL, 1, &err), 0);
                assert_int_equal(gm_dequant_row(act, aq, xq, n), 0);
                gm_mat m;
                assert_int_equal(gm_mat_init(&m, type, w, n, rows, &err), 0);
                assert_int_equal(gm_matvec(k, &m, 0, rows, aq, y, pool, threads, &err), 0);
                assert_int_equal(gm_matvec(ref, &m, 0, rows, aq, yr, NULL, 1, &err), 0);
                const double nb = (double)(gm_type_get(type)->block_elems == 1
                                               ? n / FLOAT_BLOCK
                                               : n / gm_type_get(type)->block_elems);
                for (uint64_t r = 0; r < rows; r++) {
                    const double tol = k_cases[c].ulps * (nb + 16) * 0x1p-24 *
                                           magnitude(type, w + r * rb, xq, n) +
                                       1e-30;
                    if (!(fabs((double)y[r] - yr[r]) <= tol))
                        print_error("%s %s matvec row %llu: %.9g vs scalar %.9g\n",
                                    gm_kernel_level_name((gm_kernel_level)l), gm_type_name(type),
                                    (unsigned long long)r, y[r], yr[r]);
                    assert_true(fabs((double)y[r] - yr[r]) <= tol);
                }
                free(w);
                free(aq);
                free(x);
                free(xq);
                free(y);
                free(yr);
            }
        }
    }
    gm_pool_destroy(pool);
}

int main(void)
{
    /* exactly the entries filled below: cmocka_run_group_tests runs the whole array */
    struct CMUnitTest tests[GM_KERNEL_LEVEL_COUNT - GM_KERNEL_AVX2 + 3];
    size_t n = 0;
    for (int l = GM_KERNEL_AVX2; l < GM_KERNEL_LEVEL_COUNT; l++) {
        tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(test_level, (void *)(uintptr_t)l);
        tests[n].name = gm_kernel_level_name((gm_kernel_level)l);
        n++;
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_required_types);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_extremes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_matvec_levels);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
