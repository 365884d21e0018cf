/* infer/rope: RoPE rates and magnitude against values worked out by hand from the definitions
 * (RoPE: base^(-2i/d); position interpolation: / factor; YaRN, arXiv 2309.00071 as llama.cpp
 * applies it: the ramp between the correction dims, the 0.1 ln(s) + 1 temperature). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "infer/rope.h"

static gm_hparams hp_with(const char *type, float base, float factor, uint32_t ctx_orig)
{
    gm_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.rope_base = base;
    snprintf(hp.rope_scaling, sizeof hp.rope_scaling, "%s", type);
    hp.rope_scale_factor = factor;
    hp.rope_ctx_orig = ctx_orig;
    hp.yarn_attn_factor = 1.0f;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    hp.yarn_ext_factor = 1.0f;
    return hp;
}

static void close_to(double got, double want)
{
    if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-300))
        fail_msg("got %.17g, want %.17g", got, want);
}

static void test_plain_and_linear(void **state)
{
    (void)state;
    double inv[4];
    float ms;
    gm_err err = {0};
    gm_hparams hp = hp_with("none", 10000.0f, 1.0f, 4096);
    assert_int_equal(gm_rope_freqs(&hp, 8, NULL, inv, &ms, &err), 0);
    /* 10000^(-2i/8): 1, 0.1, 0.01, 0.001 */
    close_to(inv[0], 1.0);
    close_to(inv[1], 0.1);
    close_to(inv[2], 0.01);
    close_to(inv[3], 0.001);
    assert_true(ms == 1.0f);
    /* per-pair factors divide the rates */
    const float ff[4] = {1.0f, 2.0f, 4.0f, 8.0f};
    assert_int_equal(gm_rope_freqs(&hp, 8, ff, inv, &ms, &err), 0);
    close_to(inv[1], 0.05);
    close_to(inv[3], 0.000125);
    /* linear 4: every rate / 4, magnitude 1 */
    hp = hp_with("linear", 10000.0f, 4.0f, 4096);
    assert_int_equal(gm_rope_freqs(&hp, 8, NULL, inv, &ms, &err), 0);
    close_to(inv[0], 0.25);
    close_to(inv[2], 0.0025);
    assert_true(ms == 1.0f);
}

/* Qwen3-style YaRN: d = 128, base 1e6, factor 4 over 32768 training positions. Correction dims:
 * 128 ln(32768 / (2 pi 32)) / (2 ln 1e6) = 23.60 -> low 23; 128 ln(32768 / (2 pi)) / (2 ln 1e6)
 * = 39.65 -> high 40. Pairs up to 23 keep their rate, pairs from 40 on are interpolated (/ 4),
 * pair 30 mixes 7/17 interpolated and 10/17 original; magnitude 1 + 0.1 ln 4 = 1.138629. */
static void test_yarn(void **state)
{
    (void)state;
    double inv[64];
    float ms;
    gm_err err = {0};
    gm_hparams hp = hp_with("yarn", 1e6f, 4.0f, 32768);
    assert_int_equal(gm_rope_freqs(&hp, 128, NULL, inv, &ms, &err), 0);
    close_to(inv[0], 1.0);
    close_to(inv[23], pow(1e6, -46.0 / 128));
    close_to(inv[30], pow(1e6, -60.0 / 128) * (7.0 / 17 / 4 + 10.0 / 17));
    close_to(inv[40], pow(1e6, -80.0 / 128) / 4);
    close_to(inv[63], pow(1e6, -126.0 / 128) / 4);
    assert_true(fabsf(ms - 1.1386294f) < 1e-6f);
    /* ext_factor 0: plain interpolation, no temperature; attn_factor scales the magnitude */
    hp.yarn_ext_factor = 0.0f;
    hp.yarn_attn_factor = 0.5f;
    assert_int_equal(gm_rope_freqs(&hp, 128, NULL, inv, &ms, &err), 0);
    close_to(inv[0], 0.25);
    assert_true(ms == 0.5f);
}

static void test_refused(void **state)
{
    (void)state;
    double inv[4];
    float ms;
    gm_err err = {0};
    gm_hparams hp = hp_with("longrope", 10000.0f, 4.0f, 4096);
    assert_int_equal(gm_rope_freqs(&hp, 8, NULL, inv, &ms, &err), GM_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "rope scaling 'longrope' is not supported"));
    hp = hp_with("linear", 10000.0f, 0.0f, 4096);
    assert_int_equal(gm_rope_freqs(&hp, 8, NULL, inv, &ms, &err), GM_EFORMAT);
    hp = hp_with("yarn", 10000.0f, NAN, 4096);
    assert_int_equal(gm_rope_freqs(&hp, 8, NULL, inv, &ms, &err), GM_EFORMAT);
    hp = hp_with("yarn", 10000.0f, 4.0f, 0);
    assert_int_equal(gm_rope_freqs(&hp, 8, NULL, inv, &ms, &err), GM_EFORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_linear),
        cmocka_unit_test(test_yarn),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
