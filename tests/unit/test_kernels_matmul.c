/* Tests of kernels.h's matrix products, of the thread pool and of the kernel-level choice.
 *
 *  - matmul (batch of tokens) equals matvec (one token at a time) bit for bit, row by row, for
 *    every available level, with 1 thread and with several, on odd row counts, a single row and
 *    row sub-ranges; matvec equals the level's dot product of each row bit for bit.
 *  - every two-row kernel equals the level's dot product of each of its rows bit for bit, for
 *    1 to 9 blocks (odd and even super-block counts) and rows at any alignment; the same for
 *    every multi-token kernel and each of its tokens.
 *  - gm_act_quantize over threads equals it row by row, and its blocks are gm_quantize_act's.
 *  - the pool runs every part of every job exactly once (many short jobs, to shake races out).
 *  - GMLX_KERNELS: gm_kernels_init gives what gm_kernel_level_parse gives for the variable's
 *    value (ctest runs this program again with GMLX_KERNELS=scalar, avx2, avx512 and
 *    avx512vbmi); bad values are refused.
 * Nothing here depends on timing. With GMLX_TEST_THREADS=1 (scripts/neon-check.sh, under
 * qemu-user) no worker thread is started. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/sysinfo.h"
#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/dot.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/quant.h"

#define N_THREADS_MANY 3 /* more than this machine's cores is fine: results must not change */

/* GMLX_TEST_THREADS=1: no worker threads (scripts/neon-check.sh runs this program under
 * qemu-user, whose thread creation hangs in some sandboxes; the pool itself is tested
 * natively). The products' pools then have one thread, which runs every part, while the
 * products still split their work as for N_THREADS_MANY threads. */
static bool single_thread(void)
{
    const char *tt = getenv("GMLX_TEST_THREADS");
    return tt && strcmp(tt, "1") == 0;
}

static uint64_t g_rng = 0x13198a2e03707344ull;

static uint64_t rand_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static float rand_f(void)
{
    return (float)((double)(rand_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A weight matrix of random codes with small f16/bf16 scales: dequantize a random float matrix
 * is not available for every type, so fill bytes and patch the first f16 (the scale of most
 * types) to a sane value. Types whose scale lives elsewhere get all-random bytes, which can
 * decode to inf/NaN: the comparisons below are of bits with any two NaNs equal
 * (assert_same_floats), so that is harmless. */
static uint8_t *rand_matrix(uint32_t type, uint64_t n_cols, uint64_t n_rows, uint64_t *row_bytes)
{
    assert_int_equal(gm_type_row_bytes(type, n_cols, row_bytes, NULL), 0);
    const uint64_t bytes = *row_bytes * n_rows;
    uint8_t *m = malloc(bytes ? bytes : 1);
    assert_non_null(m);
    const gm_type_info *ti = gm_type_get(type);
    if (!ti->quantized) {
        for (uint64_t i = 0; i < n_cols * n_rows; i++) {
            const float v = rand_f();
            if (type == GM_TYPE_F32) {
                memcpy(m + 4 * i, &v, 4);
            } else {
                const uint16_t h = type == GM_TYPE_F16 ? gm_f32_to_f16(v) : gm_f32_to_bf16(v);
                memcpy(m + 2 * i, &h, 2);
            }
        }
        return m;
    }
    for (uint64_t i = 0; i < bytes; i++)
        m[i] = (uint8_t)rand_u64();
    if (type == GM_TYPE_Q8_0 || type == GM_TYPE_Q4_0 || type == GM_TYPE_Q4_K ||
        type == GM_TYPE_IQ4_XS || type == GM_TYPE_IQ2_XXS) {
        for (uint64_t b = 0; b < bytes / ti->block_bytes; b++) {
            const uint16_t h = gm_f32_to_f16(0.01f + 0.01f * rand_f());
            memcpy(m + b * ti->block_bytes, &h, 2);
        }
    }
    return m;
}

/* The n floats at a and b are equal bit for bit, except that any two NaNs count as equal: the
 * random scales of rand_matrix can make a row's result NaN, and which NaN payload an operation
 * returns when several operands are NaN depends on the operand order of the instruction the
 * compiler picked (vfmadd132/213/231 differ), not on what was computed. */
static void assert_same_floats(const gm_kernels *k, uint32_t type, const float *a, const float *b,
                               uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i]))
            continue;
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            print_error("%s %s: element %llu: %.9g vs %.9g\n",
                        gm_kernel_level_name(gm_kernels_level(k)), gm_type_name(type),
                        (unsigned long long)i, a[i], b[i]);
        assert_memory_equal(&a[i], &b[i], sizeof a[i]);
    }
}

static const uint32_t k_types[] = {
    GM_TYPE_Q8_0,    GM_TYPE_Q4_0,  GM_TYPE_MXFP4, GM_TYPE_Q4_K,  GM_TYPE_Q5_K,
    GM_TYPE_Q6_K,    GM_TYPE_Q3_K,  GM_TYPE_IQ4_XS, GM_TYPE_IQ2_XXS, GM_TYPE_IQ1_M,
    GM_TYPE_TQ2_0,   GM_TYPE_F32,   GM_TYPE_BF16,  GM_TYPE_Q2_K,  GM_TYPE_IQ3_XXS, GM_TYPE_IQ4_NL,
    GM_TYPE_IQ2_XS,  GM_TYPE_IQ2_S,  GM_TYPE_IQ3_S,  GM_TYPE_IQ1_S,  GM_TYPE_TQ1_0,
};

static void check_products(const gm_kernels *k, uint32_t type, uint64_t n_cols, uint64_t n_rows,
                           uint64_t n_tok, gm_pool *pool)
{
    gm_err err = {0};
    uint64_t row_bytes = 0, act_bytes = 0;
    uint8_t *wdata = rand_matrix(type, n_cols, n_rows, &row_bytes);
    gm_mat w;
    assert_int_equal(gm_mat_init(&w, type, wdata, n_cols, n_rows, &err), 0);
    assert_int_equal(w.row_bytes, row_bytes);
    assert_int_equal(gm_act_row_bytes(type, n_cols, &act_bytes, &err), 0);

    /* activations: n_tok rows with a padded stride, prepared over threads and one by one */
    const uint64_t x_stride = n_cols + 3, a_stride = act_bytes + 5;
    float *x = malloc(n_tok * x_stride * sizeof *x);
    uint8_t *a = malloc(n_tok * a_stride), *a1 = malloc(act_bytes), *a2 = malloc(act_bytes);
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(a1);
    assert_non_null(a2);
    uint64_t block_bytes = 0;
    assert_int_equal(
        gm_type_row_bytes((uint32_t)gm_dot_act_type(type), n_cols, &block_bytes, NULL), 0);
    for (uint64_t i = 0; i < n_tok * x_stride; i++)
        x[i] = rand_f() * ((i % 17 == 0) ? 8.0f : 1.0f);
    assert_int_equal(gm_act_quantize(type, x, x_stride, n_cols, n_tok, a, a_stride, pool,
                                     N_THREADS_MANY, &err),
                     0);
    for (uint64_t t = 0; t < n_tok; t++) {
        assert_int_equal(gm_act_quantize(type, x + t * x_stride, 0, n_cols, 1, a1, 0, NULL, 1,
                                         &err),
                         0);
        assert_memory_equal(a1, a + t * a_stride, act_bytes);
        assert_int_equal(gm_quantize_act((uint32_t)gm_dot_act_type(type), x + t * x_stride, a2,
                                         n_cols),
                         0);
        assert_memory_equal(a2, a1, block_bytes);
    }

    /* batch product, with a padded result stride, on 1 and on several threads */
    const uint64_t y_stride = n_rows + 2;
    float *y_mm = malloc(n_tok * y_stride * sizeof *y_mm);
    float *y_mm1 = malloc(n_tok * y_stride * sizeof *y_mm1);
    float *y_mv = malloc(n_rows * sizeof *y_mv);
    assert_non_null(y_mm);
    assert_non_null(y_mm1);
    assert_non_null(y_mv);
    memset(y_mm, 0, n_tok * y_stride * sizeof *y_mm);
    memset(y_mm1, 0, n_tok * y_stride * sizeof *y_mm1);
    assert_int_equal(gm_matmul(k, &w, 0, n_rows, a, a_stride, n_tok, y_mm, y_stride, pool,
                               N_THREADS_MANY, &err),
                     0);
    assert_int_equal(
        gm_matmul(k, &w, 0, n_rows, a, a_stride, n_tok, y_mm1, y_stride, NULL, 1, &err), 0);
    assert_same_floats(k, type, y_mm, y_mm1, n_tok * y_stride);

    const gm_dot_fn dot = gm_kernels_dot(k, type);
    for (uint64_t t = 0; t < n_tok; t++) {
        const uint8_t *at = a + t * a_stride;
        for (int threads = 1; threads <= N_THREADS_MANY; threads += N_THREADS_MANY - 1) {
            memset(y_mv, 0xff, n_rows * sizeof *y_mv);
            assert_int_equal(gm_matvec(k, &w, 0, n_rows, at, y_mv, pool, threads, &err), 0);
            assert_same_floats(k, type, y_mv, y_mm + t * y_stride, n_rows);
        }
        for (uint64_t r = 0; r < n_rows; r++) {
            const float d = dot(wdata + r * row_bytes, at, n_cols);
            assert_same_floats(k, type, &d, &y_mv[r], 1);
        }
        /* a sub-range of rows lands at y[0] */
        if (n_rows >= 3) {
            assert_int_equal(gm_matvec(k, &w, 1, n_rows - 1, at, y_mv, pool, N_THREADS_MANY, &err),
                             0);
            assert_same_floats(k, type, y_mv, y_mm + t * y_stride + 1, n_rows - 2);
        }
    }
    /* the padding of the result rows is untouched */
    for (uint64_t t = 0; t < n_tok; t++)
        for (uint64_t r = n_rows; r < y_stride; r++)
            assert_true(y_mm[t * y_stride + r] == 0.0f);
    free(wdata);
    free(x);
    free(a);
    free(a1);
    free(a2);
    free(y_mm);
    free(y_mm1);
    free(y_mv);
}

static void test_matmul_equals_matvec(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_pool *pool = NULL;
    assert_int_equal(gm_pool_create(&pool, single_thread() ? 1 : N_THREADS_MANY, &err), 0);
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
            const uint32_t t = k_types[i];
            const uint64_t be = gm_type_get(t)->block_elems == 1 ? 32 : gm_type_get(t)->block_elems;
            check_products(k, t, 2 * be, 37, 5, pool); /* odd rows, a few tokens */
            check_products(k, t, be, 1, 3, pool);      /* a single row */
            check_products(k, t, 3 * be, 150, 40, pool); /* several tiles of tokens */
            check_products(k, t, be, 5, 1, pool);      /* fewer rows than items per thread */
            /* 9 blocks (whole groups of 4 and pairs, and a tail) x 9 tokens (two multi-token
             * calls and one left over) */
            check_products(k, t, 9 * be, 7, 9, pool);
        }
    }
    gm_pool_destroy(pool);
}

/* gm_matmul_multi: products of several types, shapes and token counts in one run equal
 * gm_matmul's one by one, bit for bit, on one thread and on several; too many products, or one
 * bad product, is an error. */
static void test_matmul_multi_equals_matmul(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_pool *pool = NULL;
    assert_int_equal(gm_pool_create(&pool, single_thread() ? 1 : N_THREADS_MANY, &err), 0);
    static const uint32_t types[] = {GM_TYPE_Q4_K, GM_TYPE_Q8_0, GM_TYPE_F32, GM_TYPE_Q6_K, GM_TYPE_MXFP4};
    static const uint64_t rows[] = {37, 1, 150, 5, 300, 2, 64};
    enum { N_OPS = 7 };
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        for (uint64_t n_tok = 1; n_tok <= 3; n_tok += 2) {
            gm_mat w[N_OPS];
            uint8_t *wd[N_OPS], *a[N_OPS];
            float *y_one[N_OPS], *y_many[N_OPS], *y_single[N_OPS];
            gm_mm_op ops[N_OPS];
            for (int i = 0; i < N_OPS; i++) {
                const uint32_t t = types[i % 5];
                const uint64_t be = gm_type_get(t)->block_elems == 1 ? 32 : gm_type_get(t)->block_elems;
                const uint64_t n_cols = (uint64_t)(1 + i % 3) * be;
                uint64_t rb = 0, act_bytes = 0;
                wd[i] = rand_matrix(t, n_cols, rows[i], &rb);
                assert_int_equal(gm_mat_init(&w[i], t, wd[i], n_cols, rows[i], &err), 0);
                assert_int_equal(gm_act_row_bytes(t, n_cols, &act_bytes, &err), 0);
                float *x = malloc(n_tok * n_cols * sizeof *x);
                a[i] = malloc(n_tok * act_bytes);
                const uint64_t ys = rows[i] + 1;
                y_one[i] = calloc(n_tok * ys, sizeof(float));
                y_many[i] = calloc(n_tok * ys, sizeof(float));
                y_single[i] = calloc(n_tok * ys, sizeof(float));
                assert_true(x && a[i] && y_one[i] && y_many[i] && y_single[i]);
                for (uint64_t v = 0; v < n_tok * n_cols; v++)
                    x[v] = rand_f();
                assert_int_equal(gm_act_quantize(t, x, n_cols, n_cols, n_tok, a[i], act_bytes, NULL, 1, &err), 0);
                free(x);
                ops[i] = (gm_mm_op){&w[i], a[i], act_bytes, n_tok, y_many[i], ys};
                assert_int_equal(gm_matmul(k, &w[i], 0, rows[i], a[i], act_bytes, n_tok, y_single[i], ys, pool,
                                           N_THREADS_MANY, &err),
                                 0);
            }
            assert_int_equal(gm_matmul_multi(k, ops, N_OPS, pool, N_THREADS_MANY, &err), 0);
            for (int i = 0; i < N_OPS; i++)
                ops[i].y = y_one[i];
            assert_int_equal(gm_matmul_multi(k, ops, N_OPS, NULL, 1, &err), 0);
            for (int i = 0; i < N_OPS; i++) {
                assert_same_floats(k, w[i].type, y_many[i], y_single[i], n_tok * (rows[i] + 1));
                assert_same_floats(k, w[i].type, y_one[i], y_single[i], n_tok * (rows[i] + 1));
            }
            /* one product without its matrix: an error, and nothing written */
            ops[3].w = NULL;
            for (int i = 0; i < N_OPS; i++) {
                memset(y_one[i], 0, n_tok * (rows[i] + 1) * sizeof(float));
                ops[i].y = y_one[i];
            }
            assert_int_equal(gm_matmul_multi(k, ops, N_OPS, pool, N_THREADS_MANY, &err), GM_EINVAL);
            for (uint64_t v = 0; v < n_tok * (rows[0] + 1); v++)
                assert_true(y_one[0][v] == 0.0f);
            for (int i = 0; i < N_OPS; i++) {
                free(wd[i]);
                free(a[i]);
                free(y_one[i]);
                free(y_many[i]);
                free(y_single[i]);
            }
        }
        gm_mm_op none[1] = {{0}};
        assert_int_equal(gm_matmul_multi(k, none, GM_MATMUL_MULTI_MAX + 1, pool, 2, &err), GM_EINVAL);
        assert_int_equal(gm_matmul_multi(k, none, 0, pool, 2, &err), 0); /* nothing to do */
    }
    gm_pool_destroy(pool);
}

/* check(k, type, n) for every available level k and every type that has(k, type) says has a
 * kernel of the kind tested, on rows of 1 to 9 blocks; returns the number of such kernels. */
static int for_each_kernel(bool (*has)(const gm_kernels *k, uint32_t t),
                           void (*check)(const gm_kernels *k, uint32_t t, uint64_t n))
{
    int n_kernels = 0;
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        for (uint32_t t = 0; t < GM_TYPE_COUNT; t++) {
            if (!has(k, t))
                continue;
            n_kernels++;
            assert_non_null(gm_kernels_dot(k, t));
            const uint64_t be = gm_type_get(t)->block_elems == 1 ? 32 : gm_type_get(t)->block_elems;
            for (uint64_t nblk = 1; nblk <= 9; nblk++)
                check(k, t, nblk * be);
        }
    }
    return n_kernels;
}

static bool has_rows2(const gm_kernels *k, uint32_t t)
{
    return gm_kernels_dot_rows2(k, t) != NULL;
}

/* The two-row kernel of rows of n elements against the dot product of each row: three rows,
 * the pairs (0, 2) and (1, 0) taken, the second from a copy one byte off. */
static void check_rows2(const gm_kernels *k, uint32_t t, uint64_t n)
{
    gm_err err = {0};
    const gm_dot_rows2_fn rows2 = gm_kernels_dot_rows2(k, t);
    const gm_dot_fn dot = gm_kernels_dot(k, t);
    uint64_t row_bytes = 0, act_bytes = 0;
    uint8_t *m = rand_matrix(t, n, 3, &row_bytes);
    uint8_t *off = malloc(3 * row_bytes + 1);
    assert_non_null(off);
    memcpy(off + 1, m, 3 * row_bytes);
    assert_int_equal(gm_act_row_bytes(t, n, &act_bytes, &err), 0);
    float *x = malloc(n * sizeof *x);
    uint8_t *a = malloc(act_bytes);
    assert_non_null(x);
    assert_non_null(a);
    for (uint64_t i = 0; i < n; i++)
        x[i] = rand_f() * ((i % 13 == 0) ? 8.0f : 1.0f);
    assert_int_equal(gm_act_quantize(t, x, 0, n, 1, a, 0, NULL, 1, &err), 0);
    float want[3], got[2];
    for (int r = 0; r < 3; r++)
        want[r] = dot(m + r * row_bytes, a, n);
    rows2(m, m + 2 * row_bytes, a, n, got);
    assert_same_floats(k, t, &want[0], &got[0], 1);
    assert_same_floats(k, t, &want[2], &got[1], 1);
    rows2(off + 1 + row_bytes, off + 1, a, n, got);
    assert_same_floats(k, t, &want[1], &got[0], 1);
    assert_same_floats(k, t, &want[0], &got[1], 1);
    free(m);
    free(off);
    free(x);
    free(a);
}

static void test_rows2_equals_dot(void **state)
{
    (void)state;
    print_message("%d two-row kernels checked\n", for_each_kernel(has_rows2, check_rows2));
}

static bool has_multi(const gm_kernels *k, uint32_t t)
{
    return gm_kernels_dot_multi(k, t) != NULL;
}

/* The multi-token kernel on a row of n elements against the dot product of each token, the
 * weight row and the activation rows at any alignment (an odd stride between the latter). */
static void check_multi(const gm_kernels *k, uint32_t t, uint64_t n)
{
    gm_err err = {0};
    const gm_dot_multi_fn multi = gm_kernels_dot_multi(k, t);
    const gm_dot_fn dot = gm_kernels_dot(k, t);
    uint64_t row_bytes = 0, act_bytes = 0;
    uint8_t *m = rand_matrix(t, n, 1, &row_bytes);
    uint8_t *off = malloc(row_bytes + 1);
    assert_non_null(off);
    memcpy(off + 1, m, row_bytes);
    assert_int_equal(gm_act_row_bytes(t, n, &act_bytes, &err), 0);
    const uint64_t a_stride = act_bytes + 3;
    float *x = malloc(GM_DOT_MULTI * n * sizeof *x);
    uint8_t *a = malloc(GM_DOT_MULTI * a_stride + 1);
    assert_non_null(x);
    assert_non_null(a);
    for (uint64_t i = 0; i < GM_DOT_MULTI * n; i++)
        x[i] = rand_f() * ((i % 13 == 0) ? 8.0f : 1.0f);
    assert_int_equal(
        gm_act_quantize(t, x, n, n, GM_DOT_MULTI, a + 1, a_stride, NULL, 1, &err), 0);
    float want[GM_DOT_MULTI], got[GM_DOT_MULTI];
    for (int u = 0; u < GM_DOT_MULTI; u++)
        want[u] = dot(m, a + 1 + u * a_stride, n);
    multi(m, a + 1, a_stride, n, got);
    assert_same_floats(k, t, want, got, GM_DOT_MULTI);
    multi(off + 1, a + 1, a_stride, n, got);
    assert_same_floats(k, t, want, got, GM_DOT_MULTI);
    free(m);
    free(off);
    free(x);
    free(a);
}

/* matmul uses the multi-token kernels only for whole groups of GM_DOT_MULTI tokens; this also
 * covers the types test_matmul_equals_matvec does not list. */
static void test_multi_equals_dot(void **state)
{
    (void)state;
    print_message("%d multi-token kernels checked\n", for_each_kernel(has_multi, check_multi));
}

static void test_matmul_errors(void **state)
{
    (void)state;
    const gm_kernels *k = gm_kernels_for_level(GM_KERNEL_SCALAR);
    assert_non_null(k);
    gm_err err = {0};
    gm_mat w;
    uint8_t data[34 * 4] = {0};
    float y[8];
    uint8_t a[64] = {0};
    assert_int_equal(gm_mat_init(&w, GM_TYPE_Q8_0, data, 33, 4, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_mat_init(&w, GM_TYPE_Q8_K, data, 256, 1, &err), GM_EUNSUPPORTED);
    gm_err_clear(&err);
    assert_int_equal(gm_mat_init(&w, GM_TYPE_Q8_0, NULL, 32, 4, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_mat_init(&w, GM_TYPE_Q8_0, data, 32, 4, &err), 0);
    assert_int_equal(gm_matvec(k, &w, 0, 5, a, y, NULL, 1, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_matvec(k, &w, 3, 2, a, y, NULL, 1, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_matvec(k, &w, 0, 4, NULL, y, NULL, 1, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_matmul(k, &w, 0, 4, a, 34, 2, y, 3, NULL, 1, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_matmul(k, &w, 0, 4, a, 10, 2, y, 4, NULL, 1, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_matvec(k, &w, 2, 2, a, y, NULL, 1, &err), 0); /* empty range */
    assert_int_equal(gm_matvec(k, &w, 0, 4, a, y, NULL, 1, &err), 0);
    for (int i = 0; i < 4; i++)
        assert_true(y[i] == 0.0f);
    uint64_t bytes = 0;
    assert_int_equal(gm_act_row_bytes(GM_TYPE_Q4_K, 512, &bytes, &err), 0);
    assert_int_equal(bytes, 2 * 292);
    assert_int_equal(gm_act_row_bytes(GM_TYPE_MXFP4, 64, &bytes, &err), 0);
    assert_int_equal(bytes, 2 * 34 + 2 * 4); /* Q8_0 blocks, then their float scales */
    /* from 4 blocks on, each whole group of 4 also has its 128 codes regrouped and 32 int16
     * sums of 4 codes (dot_impl.h): 2.6875 bytes per element; the same for every weight type
     * with Q8_0 activations (one prepared row serves them all) */
    assert_int_equal(gm_act_row_bytes(GM_TYPE_MXFP4, 160, &bytes, &err), 0);
    assert_int_equal(bytes, 5 * 34 + 5 * 4 + 192);
    assert_int_equal(gm_act_row_bytes(GM_TYPE_Q8_0, 7168, &bytes, &err), 0);
    assert_int_equal(bytes, 7168 * 43 / 16);
    assert_int_equal(gm_act_row_bytes(GM_TYPE_Q4_0, 7168, &bytes, &err), 0);
    assert_int_equal(bytes, 7168 * 43 / 16);
    assert_int_equal(gm_act_row_bytes(GM_TYPE_BF16, 7, &bytes, &err), 0);
    assert_int_equal(bytes, 28);
    assert_int_equal(gm_act_row_bytes(GM_TYPE_Q4_K, 100, &bytes, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_act_row_bytes(GM_TYPE_I32, 100, &bytes, &err), GM_EUNSUPPORTED);
    gm_err_clear(&err);
    float x[32] = {0};
    assert_int_equal(gm_act_quantize(GM_TYPE_Q8_0, x, 32, 32, 2, a, 10, NULL, 1, &err),
                     GM_EINVAL);
}

/* ---- pool -------------------------------------------------------------------------------- */

typedef struct count_job {
    _Atomic int hits[8];
    _Atomic int calls;
    int n_parts_seen;
} count_job;

static void count_part(void *ctx, int part, int n_parts)
{
    count_job *j = ctx;
    atomic_fetch_add(&j->hits[part], 1);
    atomic_fetch_add(&j->calls, 1);
    if (part == 0)
        j->n_parts_seen = n_parts;
}

/* A pool of 4 threads runs every part of every job exactly once: many short jobs, some asking
 * for more parts than the pool has. */
static void check_pool_of_4(void)
{
    gm_err err = {0};
    gm_pool *pool = NULL;
    assert_int_equal(gm_pool_create(&pool, 4, &err), 0);
    assert_int_equal(gm_pool_size(pool), 4);
    for (int rep = 0; rep < 20000; rep++) {
        const int want = 1 + rep % 6; /* 5 and 6 ask for more than the pool has */
        count_job j;
        memset(&j, 0, sizeof j);
        gm_pool_run(pool, count_part, &j, want);
        const int n = want > 4 ? 4 : want;
        assert_int_equal(j.n_parts_seen, n);
        assert_int_equal(atomic_load(&j.calls), n);
        for (int p = 0; p < 8; p++)
            assert_int_equal(atomic_load(&j.hits[p]), p < n ? 1 : 0);
    }
    gm_pool_destroy(pool);
}

static void test_pool(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_pool *pool = NULL;
    assert_int_equal(gm_pool_create(&pool, 0, &err), GM_EINVAL);
    gm_err_clear(&err);
    if (single_thread())
        print_message("GMLX_TEST_THREADS=1: the pool of 4 threads is not run\n");
    else
        check_pool_of_4();
    /* no pool, and a pool of one thread, run part 0 only */
    count_job j;
    memset(&j, 0, sizeof j);
    gm_pool_run(NULL, count_part, &j, 3);
    assert_int_equal(atomic_load(&j.calls), 1);
    assert_int_equal(gm_pool_create(&pool, 1, &err), 0);
    assert_int_equal(gm_pool_size(pool), 1);
    memset(&j, 0, sizeof j);
    gm_pool_run(pool, count_part, &j, 3);
    assert_int_equal(atomic_load(&j.calls), 1);
    gm_pool_destroy(pool);
    gm_pool_destroy(NULL);
}

/* ---- kernel levels ------------------------------------------------------------------------ */

static void test_dispatch(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_kernel_level l;
    const uint32_t f = gm_kernels_cpu_features();
    assert_true((f & ~GM_KERNELS_CPU_AVX512VBMI_BITALG) == gm_cpu_features());
    assert_int_equal(gm_kernel_level_parse("scalar", f, &l, &err), 0);
    assert_int_equal(l, GM_KERNEL_SCALAR);
    assert_int_equal(gm_kernel_level_parse(NULL, f, &l, &err), 0);
    assert_int_equal(l, gm_kernel_level_best(f));
    assert_int_equal(gm_kernel_level_parse("auto", f, &l, &err), 0);
    assert_int_equal(l, gm_kernel_level_best(f));
    assert_int_equal(gm_kernel_level_parse("fastest", f, &l, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "GMLX_KERNELS"));
    gm_err_clear(&err);
    /* a CPU without features runs only the scalar level; a forced level is refused, not
     * replaced */
    assert_int_equal(gm_kernel_level_best(0), GM_KERNEL_SCALAR);
    assert_int_equal(gm_kernel_level_parse("avx2", 0, &l, &err), GM_EUNSUPPORTED);
    gm_err_clear(&err);
    assert_int_equal(gm_kernel_level_parse("avx512", GM_CPU_AVX512F, &l, &err), GM_EUNSUPPORTED);
    gm_err_clear(&err);
    /* avx512vbmi needs its own bit on top of avx512's */
    assert_int_equal(gm_kernel_level_parse("avx512vbmi", f & ~GM_KERNELS_CPU_AVX512VBMI_BITALG,
                                           &l, &err),
                     GM_EUNSUPPORTED);
    gm_err_clear(&err);
    /* neondot needs the dot-product extension on top of neon */
    assert_int_equal(gm_kernel_level_parse("neondot", GM_CPU_NEON, &l, &err), GM_EUNSUPPORTED);
    gm_err_clear(&err);
    assert_null(gm_kernels_for_level(GM_KERNEL_LEVEL_COUNT));

    /* every available level covers every type the reference covers, with code of its own
     * level or a lower one */
    for (int lv = 0; lv < GM_KERNEL_LEVEL_COUNT; lv++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)lv);
        assert_true((k != NULL) == gm_kernel_level_available((gm_kernel_level)lv, f));
        if (!k)
            continue;
        assert_int_equal(gm_kernels_level(k), lv);
        for (uint32_t t = 0; t < GM_TYPE_COUNT; t++) {
            assert_true((gm_kernels_dot(k, t) != NULL) == (gm_dot_ref_fn(t) != NULL));
            if (gm_dot_ref_fn(t))
                assert_true((int)gm_kernels_dot_level(k, t) <= lv);
        }
    }

    /* the process's choice follows GMLX_KERNELS (this program also runs with it set) */
    const char *env = getenv("GMLX_KERNELS");
    gm_kernel_level want = GM_KERNEL_SCALAR;
    gm_err perr = {0};
    const int want_rc = gm_kernel_level_parse(env, f, &want, &perr);
    const gm_kernels *k = NULL;
    const int rc = gm_kernels_init(env, &k, &err);
    print_message("GMLX_KERNELS=%s -> %s\n", env ? env : "(unset)",
                  rc == 0 ? gm_kernel_level_name(gm_kernels_level(k)) : err.msg);
    assert_int_equal(rc, want_rc);
    if (rc == 0) {
        assert_non_null(k);
        assert_int_equal(gm_kernels_level(k), want);
    } else {
        assert_null(k);
    }
    /* and stays the same */
    const gm_kernels *k2 = NULL;
    gm_err_clear(&err);
    assert_int_equal(gm_kernels_init(env, &k2, &err), rc);
    assert_ptr_equal(k, k2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_matmul_equals_matvec),
        cmocka_unit_test(test_matmul_multi_equals_matmul),
        cmocka_unit_test(test_rows2_equals_dot),
        cmocka_unit_test(test_multi_equals_dot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
