/* infer/gpu: the VRAM tier's bookkeeping (gm_vram_tier), which needs no device: free slots are
 * taken lowest first; a full tier takes an expert only when it has been used more than the least
 * used resident by 2, and evicts that resident (the lowest slot among equals), whose map entry
 * goes; counts halve every halve_every uses; a dropped slot is free again; a grown tier's new slots
 * are free; out-of-range experts are never placed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "infer/gpu.h"

static void test_init_refuses(void **state)
{
    (void)state;
    gm_vram_tier t;
    gm_err err = {0};
    assert_int_equal(gm_vram_tier_init(&t, 0, 8, 4, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_vram_tier_init(&t, 2, 8, 0, &err), GM_EINVAL);
}

static void test_fill_then_replace(void **state)
{
    (void)state;
    gm_vram_tier t;
    gm_err err = {0};
    assert_int_equal(gm_vram_tier_init(&t, 2, 8, 3, &err), 0);
    /* free slots, lowest first */
    assert_int_equal(gm_vram_tier_claim(&t, 0, 5), 0);
    assert_int_equal(gm_vram_tier_claim(&t, 1, 2), 1);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 5), -1); /* already in */
    assert_int_equal(gm_vram_tier_claim(&t, 0, 7), 2);
    assert_int_equal(gm_vram_tier_slot(&t, 0, 5), 0);
    assert_int_equal(gm_vram_tier_slot(&t, 1, 2), 1);
    assert_int_equal(gm_vram_tier_slot(&t, 1, 3), -1);
    assert_int_equal(t.n_used, 3);
    /* full: residents used 1 (0/5), 3 (1/2) and 0 (0/7) times */
    gm_vram_tier_use(&t, 0, 5);
    for (int i = 0; i < 3; i++)
        gm_vram_tier_use(&t, 1, 2);
    /* a newcomer used once does not beat the unused resident by 2; used twice it does */
    gm_vram_tier_use(&t, 1, 6);
    assert_int_equal(gm_vram_tier_claim(&t, 1, 6), -1);
    gm_vram_tier_use(&t, 1, 6);
    assert_int_equal(gm_vram_tier_claim(&t, 1, 6), 2); /* 0/7's slot */
    assert_int_equal(gm_vram_tier_slot(&t, 0, 7), -1);
    assert_int_equal(gm_vram_tier_slot(&t, 1, 6), 2);
    assert_int_equal(t.n_used, 3);
    /* the least used is now 0/5 (1 use); a tie among the least goes to the lowest slot */
    for (int i = 0; i < 3; i++)
        gm_vram_tier_use(&t, 0, 1);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 1), 0);
    assert_int_equal(gm_vram_tier_slot(&t, 0, 5), -1);
    /* a dropped slot is free again */
    gm_vram_tier_drop(&t, 1);
    assert_int_equal(gm_vram_tier_slot(&t, 1, 2), -1);
    assert_int_equal(t.n_used, 2);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 3), 1);
    gm_vram_tier_drop(&t, 7);  /* out of range: nothing */
    gm_vram_tier_drop(&t, -1);
    assert_int_equal(t.n_used, 3);
    gm_vram_tier_free(&t);
}

/* Grown (staging slots given back): the new slots are free and taken next, the residents stay. */
static void test_grow(void **state)
{
    (void)state;
    gm_vram_tier t;
    gm_err err = {0};
    assert_int_equal(gm_vram_tier_init(&t, 2, 8, 2, &err), 0);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 1), 0);
    assert_int_equal(gm_vram_tier_claim(&t, 1, 1), 1);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 2), -1); /* full, nothing used more */
    assert_int_equal(gm_vram_tier_grow(&t, 2, &err), 0);
    assert_int_equal(t.n_slots, 4);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 2), 2);
    assert_int_equal(gm_vram_tier_claim(&t, 1, 2), 3);
    assert_int_equal(gm_vram_tier_slot(&t, 0, 1), 0);
    assert_int_equal(gm_vram_tier_slot(&t, 1, 1), 1);
    assert_int_equal(t.n_used, 4);
    gm_vram_tier_drop(&t, 3);
    assert_int_equal(gm_vram_tier_slot(&t, 1, 2), -1);
    gm_vram_tier_free(&t);
}

static void test_halving(void **state)
{
    (void)state;
    gm_vram_tier t;
    gm_err err = {0};
    assert_int_equal(gm_vram_tier_init(&t, 1, 4, 1, &err), 0);
    assert_int_equal(t.halve_every, 4096);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 0), 0);
    for (int i = 0; i < 4095; i++)
        gm_vram_tier_use(&t, 0, 0);
    gm_vram_tier_use(&t, 0, 1); /* use 4096: every count halves */
    assert_int_equal(t.count[0], 2047);
    assert_int_equal(t.count[1], 0);
    gm_vram_tier_free(&t);
}

static void test_out_of_range(void **state)
{
    (void)state;
    gm_vram_tier t;
    gm_err err = {0};
    assert_int_equal(gm_vram_tier_init(&t, 2, 4, 2, &err), 0);
    assert_int_equal(gm_vram_tier_claim(&t, 2, 0), -1);
    assert_int_equal(gm_vram_tier_claim(&t, 0, 4), -1);
    assert_int_equal(gm_vram_tier_claim(&t, 0, -1), -1);
    assert_int_equal(gm_vram_tier_slot(&t, 9, 0), -1);
    gm_vram_tier_use(&t, 5, 0); /* ignored */
    assert_int_equal(t.uses, 0);
    assert_int_equal(t.n_used, 0);
    gm_vram_tier_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_refuses),
        cmocka_unit_test(test_fill_then_replace),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_halving),
        cmocka_unit_test(test_out_of_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
