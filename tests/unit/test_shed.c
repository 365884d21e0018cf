/* The lossy levers' rules (src/stream/shed.h) against the specification's own statements and
 * worked examples (spec section 6, docs/streaming.md): the expert-mass cut and its
 * renormalisation, the miss-shed walk (ascending weight, misses only, within the budget, one
 * survivor at least, the whole weight kept), the layer-shed draws, the probe's table and the
 * option checks. Expected values are worked out by hand from those statements. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/shed.h"

#define NEAR(a, b) assert_true(fabsf((float)(a) - (float)(b)) < 1e-6f)

/* The spec's example: [0.5, 0.3, 0.15, 0.05] at P = 0.7 has prefixes [0, 0.5, 0.8, 0.95]: keep
 * 2, with weights [0.625, 0.375, 0, 0]. Flat weights (four x 0.25) at 0.7 keep 3. */
static void test_mass_examples(void **state)
{
    (void)state;
    int32_t ids[4] = {7, 3, 9, 1};
    float w[4] = {0.5f, 0.3f, 0.15f, 0.05f};
    assert_int_equal(gm_shed_mass(ids, w, 4, 0.7f), 2);
    assert_int_equal(ids[0], 7);
    assert_int_equal(ids[1], 3);
    NEAR(w[0], 0.625f);
    NEAR(w[1], 0.375f);
    assert_true(w[2] == 0.0f && w[3] == 0.0f);

    int32_t fid[4] = {0, 1, 2, 3};
    float fw[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    assert_int_equal(gm_shed_mass(fid, fw, 4, 0.7f), 3);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(fid[j], j); /* ties keep their order */
        NEAR(fw[j], 1.0f / 3.0f);
    }

    /* unsorted slots: sorted by weight first; the kept weights sum to the original total (here
     * a scaled one, as routing with an expert scale leaves it) */
    int32_t uid[5] = {10, 11, 12, 13, 14};
    float uw[5] = {0.2f, 1.0f, 0.1f, 0.6f, 0.1f}; /* total 2.0 */
    assert_int_equal(gm_shed_mass(uid, uw, 5, 0.75f), 2); /* prefixes 0, 1.0, 1.6 >= 1.5 */
    assert_int_equal(uid[0], 11);
    assert_int_equal(uid[1], 13);
    NEAR(uw[0], 1.25f);
    NEAR(uw[1], 0.75f);

    /* slot 0 is always kept; P = 1 keeps every slot of non-zero weight, weights unchanged */
    int32_t oid[3] = {4, 5, 6};
    float ow[3] = {0.4f, 0.35f, 0.25f};
    assert_int_equal(gm_shed_mass(oid, ow, 3, 1e-6f), 1);
    NEAR(ow[0], 1.0f);
    int32_t pid[3] = {4, 5, 6};
    float pw[3] = {0.4f, 0.35f, 0.25f};
    assert_int_equal(gm_shed_mass(pid, pw, 3, 1.0f), 3);
    assert_true(pw[0] == 0.4f && pw[1] == 0.35f && pw[2] == 0.25f);

    float dropped;
    const float cw[4] = {0.05f, 0.3f, 0.5f, 0.15f};
    assert_int_equal(gm_shed_mass_count(cw, 4, 0.7f, &dropped), 2);
    NEAR(dropped, 0.2f);
    assert_int_equal(gm_shed_mass_count(cw, 4, 0.99f, &dropped), 4);
    NEAR(dropped, 0.0f);
}

static void test_miss_walk(void **state)
{
    (void)state;
    float frac;
    /* all misses, P = 0.75: budget 0.25 of 1.0; 0.1 goes (0.1), 0.2 would make 0.3: stop */
    int32_t ids[4] = {1, 2, 3, 4};
    float w[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    bool miss[4] = {true, true, true, true};
    assert_int_equal(gm_shed_miss(ids, w, miss, 4, 0.75f, &frac), 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 3);
    assert_int_equal(ids[3], 4); /* the dropped slot follows, weight 0 */
    NEAR(w[0], 0.4f / 0.9f);
    NEAR(w[1], 0.3f / 0.9f);
    NEAR(w[2], 0.2f / 0.9f);
    assert_true(w[3] == 0.0f && !miss[3]);
    NEAR(frac, 0.1f);

    /* a resident expert is never dropped: the walk passes over 0.1 and drops 0.2 */
    int32_t id2[4] = {1, 2, 3, 4};
    float w2[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    bool m2[4] = {true, true, true, false};
    assert_int_equal(gm_shed_miss(id2, w2, m2, 4, 0.75f, &frac), 3);
    assert_int_equal(id2[0], 1);
    assert_int_equal(id2[1], 2);
    assert_int_equal(id2[2], 4);
    assert_int_equal(id2[3], 3);
    NEAR(w2[0], 0.4f / 0.8f);
    NEAR(w2[2], 0.1f / 0.8f);
    assert_true(!m2[2]);
    NEAR(frac, 0.2f);

    /* no miss: nothing changes */
    int32_t id3[3] = {5, 6, 7};
    float w3[3] = {0.5f, 0.3f, 0.2f};
    bool m3[3] = {false, false, false};
    assert_int_equal(gm_shed_miss(id3, w3, m3, 3, 0.1f, &frac), 3);
    assert_true(w3[0] == 0.5f && w3[1] == 0.3f && w3[2] == 0.2f && frac == 0.0f);

    /* at least one survives, even when the budget would take everything */
    int32_t id4[2] = {8, 9};
    float w4[2] = {0.9f, 0.1f};
    bool m4[2] = {true, true};
    assert_int_equal(gm_shed_miss(id4, w4, m4, 2, 0.01f, &frac), 1);
    assert_int_equal(id4[0], 8);
    NEAR(w4[0], 1.0f);

    /* P = 1: no budget, nothing shed */
    int32_t id5[2] = {8, 9};
    float w5[2] = {0.9f, 0.1f};
    bool m5[2] = {true, true};
    assert_int_equal(gm_shed_miss(id5, w5, m5, 2, 1.0f, &frac), 2);

    /* equal weights are walked in slot order, and the walk stops at the first miss that would
     * pass the budget */
    int32_t id6[4] = {1, 2, 3, 4};
    float w6[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    bool m6[4] = {true, true, true, true};
    assert_int_equal(gm_shed_miss(id6, w6, m6, 4, 0.5f, &frac), 2); /* budget 0.5: two go */
    assert_int_equal(id6[0], 3);
    assert_int_equal(id6[1], 4);
    NEAR(w6[0], 0.5f);
}

/* Keeper prestage reads the misses miss-shed keeps: of [0.4 miss, 0.3 resident, 0.2 miss,
 * 0.1 miss] at P = 0.75 the walk drops 0.1 and stops at 0.2 (0.3 > 0.25): the reads are the
 * experts of 0.4 and 0.2, not the resident one, not the dropped one. */
static void test_keepers(void **state)
{
    (void)state;
    int32_t ids[4] = {1, 2, 3, 4}, keep[4];
    float w[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    bool miss[4] = {true, false, true, true};
    assert_int_equal(gm_shed_keepers(ids, w, miss, 4, 0.75f, keep), 2);
    assert_int_equal(keep[0], 1);
    assert_int_equal(keep[1], 3);
    int32_t id2[3] = {5, 6, 7}, keep2[3];
    float w2[3] = {0.5f, 0.3f, 0.2f};
    bool m2[3] = {false, false, false};
    assert_int_equal(gm_shed_keepers(id2, w2, m2, 3, 0.5f, keep2), 0); /* all resident: no read */
}

/* Each layer's generator: the same sequence for the same calls, its own per layer, and a skip
 * share near P over many calls. */
static void test_layer_draws(void **state)
{
    (void)state;
    gm_shed_opts o = {.layer_shed = 0.25f};
    gm_shed *a, *b;
    gm_err err = {0};
    assert_int_equal(gm_shed_create(&a, &o, 4, 8, &err), 0);
    assert_int_equal(gm_shed_create(&b, &o, 4, 8, &err), 0);
    uint32_t skips[4] = {0}, same = 0, differ01 = 0;
    const uint32_t N = 20000;
    for (uint32_t i = 0; i < N; i++) {
        bool d[4];
        for (uint32_t l = 0; l < 4; l++) {
            d[l] = gm_shed_layer_draw(a, l);
            same += d[l] == gm_shed_layer_draw(b, l);
            skips[l] += d[l];
        }
        differ01 += d[0] != d[1];
    }
    assert_int_equal(same, 4 * N);
    for (uint32_t l = 0; l < 4; l++)
        assert_true(skips[l] > N / 4 - N / 50 && skips[l] < N / 4 + N / 50);
    /* independent layers disagree on about 2 p (1 - p) = 37.5 % of calls */
    assert_true(differ01 > N / 4 && differ01 < N / 2);
    gm_shed_stats st;
    gm_shed_get_stats(a, &st);
    assert_int_equal(st.layer_skips, skips[0] + skips[1] + skips[2] + skips[3]);
    assert_false(gm_shed_layer_draw(a, 4)); /* no such layer */
    gm_shed_free(a);
    gm_shed_free(b);

    gm_shed_opts off = {.miss_shed = 0.8f};
    gm_shed *c;
    assert_int_equal(gm_shed_create(&c, &off, 2, 8, &err), 0);
    for (int i = 0; i < 100; i++)
        assert_false(gm_shed_layer_draw(c, 0));
    gm_shed_free(c);
}

/* The probe's table for ten tokens of the spec's example weights (k = 4): at 0.70 two experts
 * (half the reads) and 20 % dropped; at 0.99 all four. */
static void test_probe_table(void **state)
{
    (void)state;
    gm_shed_opts o = {.probe = true};
    gm_shed *s;
    gm_err err = {0};
    assert_int_equal(gm_shed_create(&s, &o, 2, 4, &err), 0);
    const float w[4] = {0.5f, 0.3f, 0.15f, 0.05f};
    for (int i = 0; i < 10; i++)
        gm_shed_probe_add(s, w, 4, true);
    gm_strbuf sb = GM_STRBUF_INIT;
    gm_shed_print(s, &sb);
    char *buf = gm_strbuf_take(&sb);
    assert_non_null(buf);
    assert_non_null(strstr(buf, "[experts] decode fan-out probe over 10 token-layer router calls (selection k=4):"));
    assert_null(strstr(buf, "prefill fan-out"));
    /* the spec's layout: "  0.70    3.1    2    3    5          39%        8.12%" */
    assert_non_null(strstr(buf, "  P      avg   p10  p50  p90  expert reads  dropped mass\n"));
    assert_non_null(strstr(buf, "  0.70    2.0    2    2    2          50%       20.00%\n"));
    assert_non_null(strstr(buf, "  0.90    3.0    3    3    3          75%        5.00%\n"));
    assert_non_null(strstr(buf, "  0.99    4.0    4    4    4         100%        0.00%\n"));
    free(buf);
    gm_shed_free(s);
}

static void test_opts(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_shed_opts o = {0};
    assert_false(gm_shed_opts_any(&o));
    assert_false(gm_shed_opts_any(NULL));
    assert_int_equal(gm_shed_opts_check(&o, 128, &err), 0);
    o.experts = 129;
    assert_int_equal(gm_shed_opts_check(&o, 128, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "--moe-experts 129"));
    o.experts = 6;
    o.expert_mass = 0.9f;
    o.probe = true;
    err = (gm_err){0};
    assert_int_equal(gm_shed_opts_check(&o, 128, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "exclude each other"));
    o.probe = false;
    o.layer_shed = 1.0f;
    err = (gm_err){0};
    assert_int_equal(gm_shed_opts_check(&o, 128, &err), GM_EINVAL);
    o.layer_shed = 0.1f;
    o.miss_shed = 0.9f;
    o.keepers = true;
    assert_int_equal(gm_shed_opts_check(&o, 128, &err), 0);
    assert_true(gm_shed_opts_any(&o));
    char flags[256];
    gm_shed_opts_flags(&o, flags, sizeof flags);
    assert_string_equal(flags, "--moe-experts 6 --moe-expert-mass 0.9 --moe-miss-shed 0.9 --moe-prestage "
                               "keepers --moe-layer-shed 0.1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mass_examples),
        cmocka_unit_test(test_miss_walk),
        cmocka_unit_test(test_keepers),
        cmocka_unit_test(test_layer_draws),
        cmocka_unit_test(test_probe_table),
        cmocka_unit_test(test_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
