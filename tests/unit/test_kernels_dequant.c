/* Tests of kernels/dequant and kernels/quant against tests/fixtures/quant (see its README in
 * the shared fixtures): for every block type in quant-fixture.gguf, decoding tensor q.<t> must
 * give the bits of deq.<t>.f32 (computed by gguf-py, equal to ggml's C decoders), and each
 * decoded row dotted with x.f32 in float64 must match expected.json's dot_with_x to 1e-9
 * relative. Also: the half-precision conversions exhaustively, block sizes against the type
 * table, unaligned sources and the error codes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "gguf/gguf.h"
#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/dequant.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"
#include "testutil.h"

/* The types of the fixture, by the suffix of their tensor names. */
static const char *const k_fixture_types[] = {
    "f16",    "bf16",   "q4_0",    "q4_1",   "q5_0",    "q5_1",   "q8_0",  "q2_K",
    "q3_K",   "q4_K",   "q5_K",    "q6_K",   "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs",
    "iq3_s",  "iq1_s",  "iq1_m",   "iq4_nl", "iq4_xs",  "mxfp4",  "tq1_0", "tq2_0",
};
#define N_FIXTURE_TYPES (sizeof k_fixture_types / sizeof k_fixture_types[0])

#define FIX_ROWS 16
#define FIX_COLS 512

typedef struct fixture {
    gm_gguf *g;
    json_t *expected;
    float *x; /* FIX_COLS */
} fixture;

static fixture g_fix;

static char *fixture_path(const char *rel)
{
    const char *p = gm_fixture(rel);
    char *s = malloc(strlen(p) + 1);
    if (s)
        strcpy(s, p);
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    gm_err err = {0};
    char *path = fixture_path("quant/quant-fixture.gguf");
    if (!path)
        return -1;
    int rc = gm_gguf_open(&g_fix.g, path, &err);
    free(path);
    if (rc != 0) {
        fprintf(stderr, "open quant fixture: %s\n", err.msg);
        return -1;
    }
    json_error_t jerr;
    path = fixture_path("quant/expected.json");
    g_fix.expected = path ? json_load_file(path, 0, &jerr) : NULL;
    free(path);
    if (!g_fix.expected) {
        fprintf(stderr, "expected.json: %s\n", jerr.text);
        return -1;
    }
    size_t n = 0;
    g_fix.x = gm_read_file(gm_fixture("quant/x.f32"), &n);
    if (!g_fix.x || n != FIX_COLS * sizeof(float)) {
        fprintf(stderr, "x.f32: missing or not %d floats\n", FIX_COLS);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    gm_gguf_close(g_fix.g);
    json_decref(g_fix.expected);
    free(g_fix.x);
    memset(&g_fix, 0, sizeof g_fix);
    return 0;
}

/* Decodes tensor q.<t> row by row into a FIX_ROWS x FIX_COLS buffer. */
static float *decode_fixture_tensor(const char *t, uint32_t *type_out)
{
    char name[64];
    snprintf(name, sizeof name, "q.%s", t);
    const gm_gguf_tensor *ten = gm_gguf_find_tensor(g_fix.g, name);
    assert_non_null(ten);
    assert_int_equal(ten->n_dims, 2);
    assert_int_equal(ten->ne[0], FIX_COLS);
    assert_int_equal(ten->ne[1], FIX_ROWS);
    assert_true(gm_dequant_supported(ten->type));

    uint64_t row_bytes = 0;
    gm_err err = {0};
    assert_int_equal(gm_type_row_bytes(ten->type, FIX_COLS, &row_bytes, &err), 0);
    assert_int_equal(row_bytes * FIX_ROWS, ten->n_bytes);
    const uint8_t *data = gm_gguf_tensor_data(g_fix.g, ten);
    assert_non_null(data);

    float *out = malloc(sizeof(float) * FIX_ROWS * FIX_COLS);
    assert_non_null(out);
    for (int r = 0; r < FIX_ROWS; r++)
        assert_int_equal(gm_dequant_row(ten->type, data + r * row_bytes, out + r * FIX_COLS,
                                        FIX_COLS),
                         0);
    *type_out = ten->type;
    return out;
}

static void test_fixture_type(void **state)
{
    const char *t = *state;
    json_t *ex = json_object_get(g_fix.expected, t);
    assert_non_null(ex);

    uint32_t type = 0;
    float *got = decode_fixture_tensor(t, &type);
    assert_int_equal(type, json_integer_value(json_object_get(ex, "ggml_type")));
    assert_int_equal(gm_type_get(type)->block_bytes * (FIX_ROWS * FIX_COLS) /
                         gm_type_get(type)->block_elems,
                     json_integer_value(json_object_get(ex, "bytes")));

    char rel[64];
    snprintf(rel, sizeof rel, "quant/deq.%s.f32", t);
    size_t n = 0;
    float *want = gm_read_file(gm_fixture(rel), &n);
    assert_non_null(want);
    assert_int_equal(n, sizeof(float) * FIX_ROWS * FIX_COLS);

    int mismatches = 0;
    for (int i = 0; i < FIX_ROWS * FIX_COLS; i++) {
        uint32_t a = gm_f32_to_bits(got[i]), b = gm_f32_to_bits(want[i]);
        if (a != b && mismatches++ < 5)
            print_error("%s: element %d (row %d col %d): got %.9g (0x%08x) want %.9g (0x%08x)\n",
                        t, i, i / FIX_COLS, i % FIX_COLS, got[i], a, want[i], b);
    }
    assert_int_equal(mismatches, 0);

    json_t *dots = json_object_get(ex, "dot_with_x");
    assert_true(json_is_array(dots));
    assert_int_equal(json_array_size(dots), FIX_ROWS);
    for (int r = 0; r < FIX_ROWS; r++) {
        double dot = 0.0;
        for (int c = 0; c < FIX_COLS; c++)
            dot += (double)got[r * FIX_COLS + c] * (double)g_fix.x[c];
        double ref = json_number_value(json_array_get(dots, (size_t)r));
        double rel_err = fabs(dot - ref) / fabs(ref);
        if (!(rel_err <= 1e-9))
            print_error("%s row %d: dot %.17g want %.17g (rel %.3g)\n", t, r, dot, ref, rel_err);
        assert_true(rel_err <= 1e-9);
    }
    free(want);
    free(got);
}

/* The fixture's expected.json and our list name the same types, so a type added to the fixture
 * is not silently left untested. */
static void test_fixture_covers_all_types(void **state)
{
    (void)state;
    assert_int_equal(json_object_size(g_fix.expected), N_FIXTURE_TYPES);
    for (size_t i = 0; i < N_FIXTURE_TYPES; i++)
        assert_non_null(json_object_get(g_fix.expected, k_fixture_types[i]));
}

/* Decoding from an odd address gives the same bits (blocks are copied, never cast). */
static void test_unaligned_source(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_FIXTURE_TYPES; k++) {
        char name[64];
        snprintf(name, sizeof name, "q.%s", k_fixture_types[k]);
        const gm_gguf_tensor *ten = gm_gguf_find_tensor(g_fix.g, name);
        assert_non_null(ten);
        uint64_t row_bytes = 0;
        assert_int_equal(gm_type_row_bytes(ten->type, FIX_COLS, &row_bytes, NULL), 0);
        uint8_t *buf = malloc(row_bytes + 3);
        assert_non_null(buf);
        memcpy(buf + 3, gm_gguf_tensor_data(g_fix.g, ten), row_bytes);
        float a[FIX_COLS], b[FIX_COLS];
        assert_int_equal(gm_dequant_row(ten->type, gm_gguf_tensor_data(g_fix.g, ten), a,
                                        FIX_COLS),
                         0);
        assert_int_equal(gm_dequant_row(ten->type, buf + 3, b, FIX_COLS), 0);
        assert_memory_equal(a, b, sizeof a);
        free(buf);
    }
}

static void test_error_codes(void **state)
{
    (void)state;
    uint8_t src[512] = {0};
    float dst[256];
    assert_int_equal(gm_dequant_row(GM_TYPE_Q4_K, src, dst, 255), GM_EINVAL);
    assert_int_equal(gm_dequant_row(GM_TYPE_Q4_0, src, dst, 48), GM_EINVAL);
    assert_int_equal(gm_dequant_row(GM_TYPE_Q4_0, NULL, dst, 32), GM_EINVAL);
    assert_int_equal(gm_dequant_row(GM_TYPE_Q4_0, src, NULL, 32), GM_EINVAL);
    assert_int_equal(gm_dequant_row(GM_TYPE_Q4_0, NULL, NULL, 0), 0);
    assert_int_equal(gm_dequant_row(GM_TYPE_I32, src, dst, 4), GM_EUNSUPPORTED);
    assert_int_equal(gm_dequant_row(4, src, dst, 32), GM_EUNSUPPORTED);  /* retired id */
    assert_int_equal(gm_dequant_row(GM_TYPE_COUNT, src, dst, 32), GM_EUNSUPPORTED);
    assert_int_equal(gm_dequant_row(0xffffffffu, src, dst, 32), GM_EUNSUPPORTED);
    assert_false(gm_dequant_supported(GM_TYPE_I8));
    assert_false(gm_dequant_supported(GM_TYPE_F64));
    assert_true(gm_dequant_supported(GM_TYPE_F32));
    assert_true(gm_dequant_supported(GM_TYPE_Q8_K));
    assert_true(gm_dequant_supported(GM_TYPE_Q8_1));

    /* an all-zero block decodes to zeros for every supported type */
    for (uint32_t t = 0; t < GM_TYPE_COUNT; t++) {
        if (!gm_dequant_supported(t))
            continue;
        const gm_type_info *ti = gm_type_get(t);
        assert_true(ti->block_bytes <= sizeof src && ti->block_elems <= 256);
        assert_int_equal(gm_dequant_row(t, src, dst, ti->block_elems), 0);
        for (uint32_t i = 0; i < ti->block_elems; i++) {
            /* IQ1 grids are offset by a delta, but their scale d = 0 still zeroes them */
            assert_true(dst[i] == 0.0f);
        }
    }
}

/* The structs of quant.h and the block table of gguf/types.c agree. */
static void test_block_sizes_match_type_table(void **state)
{
    (void)state;
    static const struct {
        uint32_t type;
        size_t bytes;
        uint32_t elems;
    } k[] = {
        {GM_TYPE_Q4_0, sizeof(gm_block_q4_0), GM_QK4_0},
        {GM_TYPE_Q4_1, sizeof(gm_block_q4_1), GM_QK4_1},
        {GM_TYPE_Q5_0, sizeof(gm_block_q5_0), GM_QK5_0},
        {GM_TYPE_Q5_1, sizeof(gm_block_q5_1), GM_QK5_1},
        {GM_TYPE_Q8_0, sizeof(gm_block_q8_0), GM_QK8_0},
        {GM_TYPE_Q8_1, sizeof(gm_block_q8_1), GM_QK8_1},
        {GM_TYPE_Q2_K, sizeof(gm_block_q2_K), GM_QK_K},
        {GM_TYPE_Q3_K, sizeof(gm_block_q3_K), GM_QK_K},
        {GM_TYPE_Q4_K, sizeof(gm_block_q4_K), GM_QK_K},
        {GM_TYPE_Q5_K, sizeof(gm_block_q5_K), GM_QK_K},
        {GM_TYPE_Q6_K, sizeof(gm_block_q6_K), GM_QK_K},
        {GM_TYPE_Q8_K, sizeof(gm_block_q8_K), GM_QK_K},
        {GM_TYPE_IQ2_XXS, sizeof(gm_block_iq2_xxs), GM_QK_K},
        {GM_TYPE_IQ2_XS, sizeof(gm_block_iq2_xs), GM_QK_K},
        {GM_TYPE_IQ2_S, sizeof(gm_block_iq2_s), GM_QK_K},
        {GM_TYPE_IQ3_XXS, sizeof(gm_block_iq3_xxs), GM_QK_K},
        {GM_TYPE_IQ3_S, sizeof(gm_block_iq3_s), GM_QK_K},
        {GM_TYPE_IQ1_S, sizeof(gm_block_iq1_s), GM_QK_K},
        {GM_TYPE_IQ1_M, sizeof(gm_block_iq1_m), GM_QK_K},
        {GM_TYPE_IQ4_NL, sizeof(gm_block_iq4_nl), GM_QK4_NL},
        {GM_TYPE_IQ4_XS, sizeof(gm_block_iq4_xs), GM_QK_K},
        {GM_TYPE_TQ1_0, sizeof(gm_block_tq1_0), GM_QK_K},
        {GM_TYPE_TQ2_0, sizeof(gm_block_tq2_0), GM_QK_K},
        {GM_TYPE_MXFP4, sizeof(gm_block_mxfp4), GM_QK_MXFP4},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const gm_type_info *ti = gm_type_get(k[i].type);
        assert_non_null(ti);
        assert_int_equal(ti->block_bytes, k[i].bytes);
        assert_int_equal(ti->block_elems, k[i].elems);
    }
}

static void test_tables(void **state)
{
    (void)state;
    /* spot values that the formats are known by */
    assert_int_equal(gm_kvalues_iq4nl[0], -127);
    assert_int_equal(gm_kvalues_iq4nl[15], 113);
    assert_int_equal(gm_kvalues_mxfp4[7], 12);
    assert_int_equal(gm_kvalues_mxfp4[15], -12);
    assert_int_equal(gm_ksigns_iq2xs[1], 0x81);
    assert_int_equal(gm_ksigns_iq2xs[127], 0xff);
    assert_true(GM_IQ1S_DELTA == 0.125f);
    for (int j = 0; j < 8; j++)
        assert_int_equal(gm_kmask_iq2xs[j], 1 << j);
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 8; j++) {
            uint8_t v = gm_iq2xxs_grid[i][j];
            assert_true(v == 8 || v == 25 || v == 43);
        }
}

/* ---- half precision ---------------------------------------------------------------------- */

static int f16_is_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

/* Every f16 survives f16 -> f32 -> f16; NaNs stay NaN with sign; values are right. */
static void test_f16_roundtrip_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gm_f16_to_f32((uint16_t)h);
        uint16_t back = gm_f32_to_f16(f);
        if (f16_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            assert_true(f16_is_nan(back));
            assert_int_equal(back & 0x8000, h & 0x8000);
            assert_int_equal(back, h | 0x200); /* payload kept, made quiet */
        } else {
            assert_int_equal(back, h);
        }
        /* value check against the definition */
        int e = (h >> 10) & 31, m = h & 1023;
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                       : ldexp(1024 + m, e - 25);
        if (h & 0x8000)
            want = -want;
        if (!isnan(want))
            assert_true((double)f == want && !signbit(f) == !signbit(want));
    }
}

/* Rounding: at each midpoint between neighbouring f16 values, ties go to even and the nearest
 * f32 on either side goes to the nearer f16. */
static void test_f32_to_f16_rounding(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int s = 0; s < 2; s++) {
            uint16_t lo = (uint16_t)(h | (s ? 0x8000 : 0));
            uint16_t hi = (uint16_t)(lo + 1); /* 0x7bff + 1 = infinity */
            double a = gm_f16_to_f32(lo);
            double b = h == 0x7bff ? (s ? -65536.0 : 65536.0) : gm_f16_to_f32(hi);
            float mid = (float)((a + b) / 2); /* exact: 12 significant bits */
            uint16_t even = (lo & 1) ? hi : lo;
            assert_int_equal(gm_f32_to_f16(mid), even);
            float toward_a = nextafterf(mid, (float)a);
            float toward_b = nextafterf(mid, (float)b);
            assert_int_equal(gm_f32_to_f16(toward_a), lo);
            assert_int_equal(gm_f32_to_f16(toward_b), hi);
            assert_int_equal(gm_f32_to_f16((float)a), lo);
        }
    }
    assert_int_equal(gm_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(gm_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(gm_f32_to_f16(1e30f), 0x7c00);
    assert_int_equal(gm_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(gm_f32_to_f16(1e-30f), 0x0000);
    assert_int_equal(gm_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);           /* tie to even 0 */
    assert_int_equal(gm_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);           /* above the tie */
    assert_int_equal(gm_f32_to_f16(ldexpf(1.0f, -24) * 1.5f), 0x0002);    /* tie 1|2 -> 2 */
    assert_true(f16_is_nan(gm_f32_to_f16(NAN)));
}

static void test_bf16(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = gm_bf16_to_f32((uint16_t)b);
        uint16_t back = gm_f32_to_bf16(f);
        if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) {
            assert_true(isnan(f));
            assert_int_equal(back, b | 0x40); /* made quiet */
        } else {
            assert_int_equal(back, b);
        }
    }
    /* ties to even, and just past the tie */
    assert_int_equal(gm_f32_to_bf16(gm_bits_to_f32(0x3f808000u)), 0x3f80);
    assert_int_equal(gm_f32_to_bf16(gm_bits_to_f32(0x3f818000u)), 0x3f82);
    assert_int_equal(gm_f32_to_bf16(gm_bits_to_f32(0x3f808001u)), 0x3f81);
    assert_int_equal(gm_f32_to_bf16(gm_bits_to_f32(0x7f7fffffu)), 0x7f80); /* to infinity */
}

static void test_e8m0(void **state)
{
    (void)state;
    for (int e = 0; e <= 255; e++)
        assert_true((double)gm_e8m0_to_f32_half((uint8_t)e) == ldexp(1.0, e - 128));
}

/* The scales read from three words (a GPU thread's) equal those read from the bytes, which the
 * fixtures check through Q4_K's and Q5_K's rows: every sub-block, every value of each byte. */
static void test_q4_K_scale_min_words(void **state)
{
    (void)state;
    uint8_t q[GM_K_SCALE_SIZE];
    uint32_t w[3];
    for (unsigned v = 0; v < 256; v++)
        for (unsigned at = 0; at < GM_K_SCALE_SIZE; at++) {
            for (unsigned i = 0; i < GM_K_SCALE_SIZE; i++)
                q[i] = (uint8_t)(i == at ? v : (v * 37u + i * 101u) & 0xff);
            memcpy(w, q, sizeof w);
            for (int j = 0; j < 8; j++) {
                int sc, m, scw, mw;
                gm_q4_K_scale_min(j, q, &sc, &m);
                gm_q4_K_scale_min_w(j, w, &scw, &mw);
                assert_int_equal(scw, sc);
                assert_int_equal(mw, m);
            }
        }
}

int main(void)
{
    struct CMUnitTest tests[N_FIXTURE_TYPES + 10];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fixture_covers_all_types);
    for (size_t i = 0; i < N_FIXTURE_TYPES; i++) {
        tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(test_fixture_type,
                                                                (void *)k_fixture_types[i]);
        tests[n].name = k_fixture_types[i];
        n++;
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_unaligned_source);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_error_codes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_block_sizes_match_type_table);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_tables);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_f16_roundtrip_exhaustive);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_f32_to_f16_rounding);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_bf16);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_e8m0);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_q4_K_scale_min_words);
    assert_int_equal(n, sizeof tests / sizeof tests[0]);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
