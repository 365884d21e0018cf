/* Tests of kernels/dot: activation quantization and the reference fused dot products, on the
 * weight rows of tests/fixtures/quant/quant-fixture.gguf.
 *
 * For each weight type with a reference dot (every type of the fixture: the quantized types
 * and F16/BF16 with float32 activations) and each of its 16 rows, against activations x (the
 * fixture's x.f32 and seeded random vectors):
 *  - exactness: the fused dot equals the float64 dot of the dequantized weights with the
 *    dequantized quantized activations, up to float32 accumulation (2e-6 of sum |w_i xq_i|);
 *  - budget: it differs from the float dot with the unquantized x by at most
 *    sum |w_i| |x_i - xq_i| (the activation quantization error) plus that rounding.
 * The activation quantizers are checked to round each element to within half a step. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/dequant.h"
#include "kernels/dot.h"
#include "kernels/quant.h"
#include "testutil.h"

static const char *const k_dot_types[] = {
    "q8_0",    "mxfp4",  "q2_K",  "q3_K",    "q4_K",  "q5_K",  "q6_K",  "iq4_xs",
    "q4_0",    "q4_1",   "q5_0",  "q5_1",    "iq4_nl", "iq2_xxs", "iq2_xs", "iq2_s",
    "iq3_xxs", "iq3_s",  "iq1_s", "iq1_m",   "tq1_0", "tq2_0", "f16",   "bf16",
};
#define N_DOT_TYPES (sizeof k_dot_types / sizeof k_dot_types[0])

#define FIX_ROWS 16
#define FIX_COLS 512
#define N_X 4 /* x.f32 plus random vectors */

static gm_gguf *g_gguf;
static float g_x[N_X][FIX_COLS];

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double rand_unit(void) /* uniform [0, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static float rand_gauss(void)
{
    double u = rand_unit() + 1e-12, v = rand_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static int group_setup(void **state)
{
    (void)state;
    gm_err err = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s", gm_fixture("quant/quant-fixture.gguf"));
    if (gm_gguf_open(&g_gguf, path, &err) != 0) {
        fprintf(stderr, "open quant fixture: %s\n", err.msg);
        return -1;
    }
    size_t n = 0;
    float *x = gm_read_file(gm_fixture("quant/x.f32"), &n);
    if (!x || n != sizeof g_x[0]) {
        free(x);
        return -1;
    }
    memcpy(g_x[0], x, sizeof g_x[0]);
    free(x);
    /* 1: gaussian with outliers; 2: all positive with a negative extreme in each 256 block and a
     * zero 32-block; 3: tiny values (scales near f16 subnormals for Q8_0) */
    for (int i = 0; i < FIX_COLS; i++) {
        float v = rand_gauss();
        g_x[1][i] = (i % 97 == 0) ? 20.0f * v : v;
        g_x[2][i] = (i >= 64 && i < 96) ? 0.0f : fabsf(v) + 0.01f;
        g_x[3][i] = 1e-6f * v;
    }
    g_x[2][200] = -9.0f;
    g_x[2][300] = -9.0f;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    gm_gguf_close(g_gguf);
    g_gguf = NULL;
    return 0;
}

static void test_dot_type(void **state)
{
    const char *t = *state;
    char name[64];
    snprintf(name, sizeof name, "q.%s", t);
    const gm_gguf_tensor *ten = gm_gguf_find_tensor(g_gguf, name);
    assert_non_null(ten);
    const uint32_t wtype = ten->type;
    const int act = gm_dot_act_type(wtype);
    assert_true(act == GM_TYPE_Q8_0 || act == GM_TYPE_Q8_K || act == GM_TYPE_F32);
    assert_non_null(gm_dot_ref_fn(wtype));

    uint64_t wrow_bytes = 0, arow_bytes = 0;
    assert_int_equal(gm_type_row_bytes(wtype, FIX_COLS, &wrow_bytes, NULL), 0);
    assert_int_equal(gm_type_row_bytes((uint32_t)act, FIX_COLS, &arow_bytes, NULL), 0);
    const uint8_t *wdata = gm_gguf_tensor_data(g_gguf, ten);
    uint8_t *aq = malloc(arow_bytes);
    assert_non_null(aq);

    double worst_exact = 0.0, worst_budget = 0.0;
    for (int xi = 0; xi < N_X; xi++) {
        const float *x = g_x[xi];
        float xq[FIX_COLS];
        assert_int_equal(gm_quantize_act((uint32_t)act, x, aq, FIX_COLS), 0);
        assert_int_equal(gm_dequant_row((uint32_t)act, aq, xq, FIX_COLS), 0);
        for (int r = 0; r < FIX_ROWS; r++) {
            const uint8_t *wrow = wdata + r * wrow_bytes;
            float wf[FIX_COLS];
            assert_int_equal(gm_dequant_row(wtype, wrow, wf, FIX_COLS), 0);
            double ref_q = 0, ref_x = 0, l1 = 0, qerr = 0;
            for (int c = 0; c < FIX_COLS; c++) {
                ref_q += (double)wf[c] * xq[c];
                ref_x += (double)wf[c] * x[c];
                l1 += fabs((double)wf[c] * xq[c]);
                qerr += fabs((double)wf[c]) * fabs((double)x[c] - xq[c]);
            }
            float got = 0;
            assert_int_equal(gm_dot_row(wtype, wrow, aq, FIX_COLS, &got), 0);
            assert_true(got == gm_dot_ref_fn(wtype)(wrow, aq, FIX_COLS));
            const double tol = 2e-6 * l1 + 1e-30;
            const double e_exact = fabs(got - ref_q) / tol;
            const double e_budget = fabs(got - ref_x) / (qerr + tol);
            if (e_exact > worst_exact)
                worst_exact = e_exact;
            if (e_budget > worst_budget)
                worst_budget = e_budget;
            if (!(e_exact <= 1.0) || !(e_budget <= 1.0))
                print_error("%s x%d row %d: dot %.9g, dequantized dot %.9g, float dot %.9g "
                            "(budget %.3g)\n",
                            t, xi, r, got, ref_q, ref_x, qerr + tol);
            assert_true(e_exact <= 1.0);
            assert_true(e_budget <= 1.0);
        }
    }
    print_message("%-7s worst |dot - dequantized dot| = %.3f of 2e-6*l1; worst |dot - float dot| "
                  "= %.3f of budget\n",
                  t, worst_exact, worst_budget);
    free(aq);
}

/* Each element lands within half a quantization step (plus, for Q8_0, the f16 rounding of the
 * scale times the largest code). */
static void test_quantize_act_error(void **state)
{
    (void)state;
    for (int xi = 0; xi < N_X; xi++) {
        const float *x = g_x[xi];
        gm_block_q8_0 b0[FIX_COLS / GM_QK8_0];
        gm_block_q8_K bk[FIX_COLS / GM_QK_K];
        float y[FIX_COLS];
        assert_int_equal(gm_quantize_act(GM_TYPE_Q8_0, x, b0, FIX_COLS), 0);
        assert_int_equal(gm_dequant_row(GM_TYPE_Q8_0, b0, y, FIX_COLS), 0);
        for (int i = 0; i < FIX_COLS / GM_QK8_0; i++) {
            double amax = 0;
            for (int j = 0; j < GM_QK8_0; j++) { /* not fmax: gcc 12 for aarch64 fails
                                                   * vectorising that reduction (internal error) */
                const double a = fabs(x[i * GM_QK8_0 + j]);
                if (a > amax)
                    amax = a;
            }
            const double step = amax / 127.0;
            const double d16 = gm_f16_to_f32(b0[i].d);
            for (int j = 0; j < GM_QK8_0; j++)
                assert_true(fabs(x[i * GM_QK8_0 + j] - y[i * GM_QK8_0 + j]) <=
                            0.5 * step * (1 + 1e-6) + 127 * fabs(d16 - step) + 1e-45);
        }
        assert_int_equal(gm_quantize_act(GM_TYPE_Q8_K, x, bk, FIX_COLS), 0);
        assert_int_equal(gm_dequant_row(GM_TYPE_Q8_K, bk, y, FIX_COLS), 0);
        for (int i = 0; i < FIX_COLS / GM_QK_K; i++) {
            for (int j = 0; j < GM_QK_K; j++)
                assert_true(fabs(x[i * GM_QK_K + j] - y[i * GM_QK_K + j]) <=
                            0.5 * fabs(bk[i].d) * (1 + 1e-5) + 1e-45);
            for (int g = 0; g < GM_QK_K / 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += bk[i].qs[16 * g + j];
                assert_int_equal(bk[i].bsums[g], s);
            }
        }
    }
    /* an all-zero vector gives zero scales and codes */
    float z[GM_QK_K] = {0};
    gm_block_q8_K bz;
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_K, z, &bz, GM_QK_K), 0);
    assert_true(bz.d == 0.0f);
    for (int j = 0; j < GM_QK_K; j++)
        assert_int_equal(bz.qs[j], 0);
    /* the element of largest magnitude maps to +-127 whatever its sign */
    float v[GM_QK_K];
    for (int j = 0; j < GM_QK_K; j++)
        v[j] = 0.01f * (float)(j % 7);
    v[5] = -3.0f;
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_K, v, &bz, GM_QK_K), 0);
    assert_true(abs(bz.qs[5]) == 127);
    assert_true(bz.qs[5] * bz.d < 0);
}

static void test_dot_errors(void **state)
{
    (void)state;
    uint8_t w[512] = {0}, a[600] = {0};
    float x[256] = {0}, out = 1.0f;
    assert_int_equal(gm_dot_act_type(GM_TYPE_Q8_1), GM_EUNSUPPORTED);
    assert_int_equal(gm_dot_act_type(GM_TYPE_Q8_K), GM_EUNSUPPORTED);
    assert_int_equal(gm_dot_act_type(GM_TYPE_I8), GM_EUNSUPPORTED);
    assert_int_equal(gm_dot_act_type(0xffffffffu), GM_EUNSUPPORTED);
    assert_int_equal(gm_dot_act_type(GM_TYPE_MXFP4), GM_TYPE_Q8_0);
    assert_int_equal(gm_dot_act_type(GM_TYPE_Q4_1), GM_TYPE_Q8_0);
    assert_int_equal(gm_dot_act_type(GM_TYPE_IQ4_XS), GM_TYPE_Q8_K);
    assert_int_equal(gm_dot_act_type(GM_TYPE_TQ1_0), GM_TYPE_Q8_K);
    assert_int_equal(gm_dot_act_type(GM_TYPE_F32), GM_TYPE_F32);
    assert_int_equal(gm_dot_act_type(GM_TYPE_BF16), GM_TYPE_F32);
    assert_non_null(gm_dot_ref_fn(GM_TYPE_IQ2_XXS));
    assert_null(gm_dot_ref_fn(GM_TYPE_Q8_K));
    assert_null(gm_dot_ref_fn(GM_TYPE_COUNT));
    assert_int_equal(gm_dot_row(GM_TYPE_Q8_1, w, a, 32, &out), GM_EUNSUPPORTED);
    assert_int_equal(gm_dot_row(GM_TYPE_Q4_K, w, a, 32, &out), GM_EINVAL);
    assert_int_equal(gm_dot_row(GM_TYPE_Q8_0, w, a, 33, &out), GM_EINVAL);
    assert_int_equal(gm_dot_row(GM_TYPE_Q8_0, NULL, a, 32, &out), GM_EINVAL);
    assert_int_equal(gm_dot_row(GM_TYPE_Q8_0, w, a, 32, NULL), GM_EINVAL);
    assert_int_equal(gm_dot_row(GM_TYPE_Q8_0, w, a, 0, &out), 0);
    assert_true(out == 0.0f);
    assert_int_equal(gm_dot_row(GM_TYPE_Q6_K, w, a, 256, &out), 0); /* zero blocks */
    assert_true(out == 0.0f);
    assert_int_equal(gm_quantize_act(GM_TYPE_Q4_0, x, a, 32), GM_EUNSUPPORTED);
    /* float32 activations are copied unchanged, any length */
    x[0] = 1.0f + 0x1p-20f; /* not representable in 16 bits */
    assert_int_equal(gm_quantize_act(GM_TYPE_F32, x, a, 3), 0);
    assert_memory_equal(a, x, 3 * sizeof(float));
    float f32w[3] = {2.0f, 0.0f, 0.0f};
    assert_int_equal(gm_dot_row(GM_TYPE_F32, f32w, a, 3, &out), 0);
    assert_true(out == 2.0f + 0x1p-19f);
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_K, x, a, 128), GM_EINVAL);
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_0, NULL, a, 32), GM_EINVAL);
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_0, x, NULL, 32), GM_EINVAL);
    /* non-finite activations give defined blocks, not a crash */
    x[3] = NAN;
    x[40] = INFINITY;
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_0, x, a, 64), 0);
    assert_int_equal(gm_quantize_act(GM_TYPE_Q8_K, x, a, 256), 0);
}

int main(void)
{
    struct CMUnitTest tests[N_DOT_TYPES + 2];
    size_t n = 0;
    for (size_t i = 0; i < N_DOT_TYPES; i++) {
        tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(test_dot_type,
                                                                (void *)k_dot_types[i]);
        tests[n].name = k_dot_types[i];
        n++;
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_quantize_act_error);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_dot_errors);
    assert_int_equal(n, sizeof tests / sizeof tests[0]);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
