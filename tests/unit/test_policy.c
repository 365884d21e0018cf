/* The decode arena's replacement policy (src/stream/policy.c): decayed LFU bookkeeping.
 * Every expected slot, counter and statistic below is worked out by hand in the comments, from
 * the rules of policy.h: +1 per distinct expert of a call, counters halved after every
 * halve_every-th call of the layer (after that call's increments), misses take empty slots
 * lowest first, then the least popular READY slot not used by the call (ties: lowest slot), in
 * the order of the call's ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "stream/policy.h"

static gm_err E;

static gm_policy *make(uint32_t n_layers, const uint32_t *ne, const uint32_t *ns, uint32_t halve)
{
    gm_policy *p = NULL;
    memset(&E, 0, sizeof E);
    int rc = gm_policy_create(&p, n_layers, ne, ns, halve, &E);
    if (rc)
        fail_msg("create: %s", E.msg);
    return p;
}

/* One layer of ne experts and ns slots. */
static gm_policy *make1(uint32_t ne, uint32_t ns, uint32_t halve)
{
    return make(1, &ne, &ns, halve);
}

typedef struct call {
    int32_t slot[16];
    uint8_t hit[16];
    int32_t evicted[16];
    int rc;
} call;

/* Stages ids at layer l; every miss is then loaded successfully (unless keep_loading). */
static call stage_at(gm_policy *p, uint32_t l, const int32_t *ids, uint32_t k, bool keep_loading)
{
    call c;
    memset(&c, 0x7f, sizeof c);
    memset(&E, 0, sizeof E);
    c.rc = gm_policy_stage(p, l, ids, k, c.slot, c.hit, c.evicted);
    if (c.rc == 0 && !keep_loading)
        for (uint32_t j = 0; j < k; j++)
            if (c.hit[j] == GM_POLICY_MISS)
                assert_int_equal(gm_policy_loaded(p, l, (uint32_t)c.slot[j], true), 0);
    return c;
}

static call stage(gm_policy *p, const int32_t *ids, uint32_t k)
{
    return stage_at(p, 0, ids, k, false);
}

/* Stages the single expert e at layer 0 and checks the answer. */
static void one(gm_policy *p, int32_t e, uint8_t want_hit, int32_t want_slot, int32_t want_evicted)
{
    call c = stage(p, &e, 1);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.hit[0], want_hit);
    assert_int_equal(c.slot[0], want_slot);
    assert_int_equal(c.evicted[0], want_evicted);
}

static void test_empty_start(void **state)
{
    (void)state;
    gm_policy *p = make1(8, 4, GM_POLICY_HALVE_DEFAULT);
    assert_true(gm_policy_covers(p, 0));
    assert_int_equal(gm_policy_slots(p, 0), 4);
    for (uint32_t s = 0; s < 4; s++)
        assert_int_equal(gm_policy_owner(p, 0, s), -1);
    for (int32_t e = 0; e < 8; e++) {
        assert_int_equal(gm_policy_lookup(p, 0, e), -1);
        assert_true(gm_policy_count(p, 0, e) == 0.0f);
    }
    /* The first call misses everything and fills the lowest slots in id order. */
    int32_t ids[3] = {5, 2, 7};
    call c = stage_at(p, 0, ids, 3, true);
    assert_int_equal(c.rc, 0);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(c.hit[j], GM_POLICY_MISS);
        assert_int_equal(c.slot[j], j);
        assert_int_equal(c.evicted[j], -1);
    }
    /* LOADING: owned, but not readable yet. */
    assert_int_equal(gm_policy_owner(p, 0, 1), 2);
    assert_int_equal(gm_policy_lookup(p, 0, 2), -1);
    for (int j = 0; j < 3; j++)
        assert_int_equal(gm_policy_loaded(p, 0, (uint32_t)j, true), 0);
    assert_int_equal(gm_policy_lookup(p, 0, 2), 1);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.calls, 1);
    assert_int_equal(st.lookups, 3);
    assert_int_equal(st.hits, 0);
    assert_int_equal(st.misses, 3);
    assert_int_equal(st.evictions, 0);
    gm_policy_free(p);
}

static void test_eviction_order(void **state)
{
    (void)state;
    gm_policy *p = make1(8, 3, 0); /* 0: never halve */
    /* Fill: 0 -> s0, 1 -> s1, 2 -> s2; then counts c0=3, c1=2, c2=1. */
    one(p, 0, GM_POLICY_MISS, 0, -1);
    one(p, 1, GM_POLICY_MISS, 1, -1);
    one(p, 2, GM_POLICY_MISS, 2, -1);
    one(p, 0, GM_POLICY_HIT, 0, -1);
    one(p, 0, GM_POLICY_HIT, 0, -1);
    one(p, 1, GM_POLICY_HIT, 1, -1);
    assert_true(gm_policy_count(p, 0, 0) == 3.0f);
    assert_true(gm_policy_count(p, 0, 1) == 2.0f);
    assert_true(gm_policy_count(p, 0, 2) == 1.0f);
    /* 3 (c3=1) misses: least popular resident is 2 (c=1, s2). */
    one(p, 3, GM_POLICY_MISS, 2, 2);
    /* 4 (c4=1): residents 0 (3), 1 (2), 3 (1) -> 3 goes, from s2. */
    one(p, 4, GM_POLICY_MISS, 2, 3);
    /* Tie: 1 gets used once more -> c1=3 = c0. Make c4 = 3 as well: residents all at 3. */
    one(p, 1, GM_POLICY_HIT, 1, -1);
    one(p, 4, GM_POLICY_HIT, 2, -1);
    one(p, 4, GM_POLICY_HIT, 2, -1);
    /* 5 misses; c0 = c1 = c4 = 3: the tie goes to the lowest slot, s0 (expert 0). */
    one(p, 5, GM_POLICY_MISS, 0, 0);
    /* Two misses in one call: {6, 7}, c6 = c7 = 1. Candidates: s0 (5, c=1), s1 (1, c=3),
     * s2 (4, c=3). Ascending popularity, ties by slot: s0, then s1. Ids in order: 6 -> s0,
     * 7 -> s1. */
    int32_t ids[2] = {6, 7};
    call c = stage(p, ids, 2);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.slot[0], 0);
    assert_int_equal(c.evicted[0], 5);
    assert_int_equal(c.slot[1], 1);
    assert_int_equal(c.evicted[1], 1);
    gm_policy_stats st;
    gm_policy_layer_stats(p, 0, &st);
    /* Evictions: 2, 3, 0, 5, 1 = 5. Calls 13 (12 of one id, one of two): lookups 14; hits 6
     * (0, 0, 1 while filling, then 1, 4, 4); misses 8. */
    assert_int_equal(st.evictions, 5);
    assert_int_equal(st.calls, 13);
    assert_int_equal(st.lookups, 14);
    assert_int_equal(st.hits, 6);
    assert_int_equal(st.misses, 8);
    gm_policy_free(p);
}

static void test_halving(void **state)
{
    (void)state;
    /* halve_every = 4. Calls (k=1) and counters after each:
     *   1: {0}  c0=1
     *   2: {0}  c0=2
     *   3: {1}  c1=1
     *   4: {0}  c0=3, then the 4th call halves: c0=1.5, c1=0.5
     *   5: {2}  c2=1
     *   6: {2}  c2=2
     *   7: {2}  c2=3
     *   8: {1}  c1=1.5, halve: c0=0.75, c1=0.75, c2=1.5 */
    gm_policy *p = make1(4, 4, 4);
    const int32_t seq[8] = {0, 0, 1, 0, 2, 2, 2, 1};
    for (int i = 0; i < 8; i++) {
        call c = stage(p, &seq[i], 1);
        assert_int_equal(c.rc, 0);
        if (i == 3) {
            assert_true(gm_policy_count(p, 0, 0) == 1.5f);
            assert_true(gm_policy_count(p, 0, 1) == 0.5f);
        }
    }
    assert_true(gm_policy_count(p, 0, 0) == 0.75f);
    assert_true(gm_policy_count(p, 0, 1) == 0.75f);
    assert_true(gm_policy_count(p, 0, 2) == 1.5f);
    assert_true(gm_policy_count(p, 0, 3) == 0.0f);
    gm_policy_free(p);

    /* Halving is per layer: calls to layer 1 do not advance layer 0's period. Two layers,
     * halve_every 2: three calls to layer 1 then one to layer 0 leave c(L0, 0) = 1. */
    uint32_t ne[2] = {4, 4}, ns[2] = {2, 2};
    p = make(2, ne, ns, 2);
    int32_t e = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(stage_at(p, 1, &e, 1, false).rc, 0);
    /* layer 1: c=1, c=2 -> halve to 1, c=2 */
    assert_true(gm_policy_count(p, 1, 0) == 2.0f);
    assert_int_equal(stage_at(p, 0, &e, 1, false).rc, 0);
    assert_true(gm_policy_count(p, 0, 0) == 1.0f);
    /* The second call to layer 0 halves: 2 -> 1. */
    assert_int_equal(stage_at(p, 0, &e, 1, false).rc, 0);
    assert_true(gm_policy_count(p, 0, 0) == 1.0f);
    gm_policy_free(p);
}

static void test_never_evicts_current_call(void **state)
{
    (void)state;
    gm_policy *p = make1(4, 2, 0);
    /* 0 five times: c0 = 5, s0. Then 1: c1 = 1, s1. */
    for (int i = 0; i < 5; i++)
        one(p, 0, i ? GM_POLICY_HIT : GM_POLICY_MISS, 0, -1);
    one(p, 1, GM_POLICY_MISS, 1, -1);
    /* {1, 2}: 1 hits (s1, c1=2); 2 misses (c2=1). The least popular resident is 1 (c=2 < 5),
     * but this call uses it, so 0 goes, popular as it is. */
    int32_t ids[2] = {1, 2};
    call c = stage(p, ids, 2);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.hit[0], GM_POLICY_HIT);
    assert_int_equal(c.slot[0], 1);
    assert_int_equal(c.hit[1], GM_POLICY_MISS);
    assert_int_equal(c.slot[1], 0);
    assert_int_equal(c.evicted[1], 0);
    /* Prestage respects the current call too: 3 may not evict 1 or 2 while the call lasts,
     * even in hard mode. After gm_policy_end it may: 2 (c=1) is the least popular. */
    int32_t s = 99;
    assert_int_equal(gm_policy_prestage(p, 0, 3, GM_POLICY_PRESTAGE_HARD, &s), 0);
    assert_int_equal(s, -1);
    gm_policy_end(p, 0);
    assert_int_equal(gm_policy_prestage(p, 0, 3, GM_POLICY_PRESTAGE_HARD, &s), 0);
    assert_int_equal(s, 0);
    gm_policy_free(p);
}

static void test_k_equals_slots_and_over(void **state)
{
    (void)state;
    gm_policy *p = make1(16, 4, 0);
    int32_t a[4] = {0, 1, 2, 3}, b[4] = {4, 5, 6, 7}, c5[5] = {0, 8, 9, 10, 11};
    call c = stage(p, a, 4);
    assert_int_equal(c.rc, 0);
    /* k == n_slots: another 4 distinct experts replace all 4 (none is used by this call). */
    c = stage(p, b, 4);
    assert_int_equal(c.rc, 0);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(c.hit[j], GM_POLICY_MISS);
        assert_int_equal(c.slot[j], j);    /* all at c=1: ties by slot, ids in order */
        assert_int_equal(c.evicted[j], j); /* slot j held expert j */
    }
    /* 4 again, now hits. */
    c = stage(p, b, 4);
    for (int j = 0; j < 4; j++)
        assert_int_equal(c.hit[j], GM_POLICY_HIT);
    /* k = 5 > 4 slots: GM_ERANGE. Residency unchanged; popularity and lookups counted (0 and
     * 8..11 were used: 5 lookups, 5 misses); the call is counted refused. */
    c = stage(p, c5, 5);
    assert_int_equal(c.rc, GM_ERANGE);
    for (int j = 0; j < 5; j++) {
        assert_int_equal(c.hit[j], GM_POLICY_MISS);
        assert_int_equal(c.slot[j], -1);
    }
    for (uint32_t s = 0; s < 4; s++)
        assert_int_equal(gm_policy_owner(p, 0, s), (int32_t)s + 4);
    assert_true(gm_policy_count(p, 0, 0) == 2.0f);
    assert_true(gm_policy_count(p, 0, 8) == 1.0f);
    /* A refused call still reports its hits: {4, 5, 6, 7, 8} -> 4 hits, 8 missing. */
    int32_t d[5] = {4, 5, 6, 7, 8};
    c = stage(p, d, 5);
    assert_int_equal(c.rc, GM_ERANGE);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(c.hit[j], GM_POLICY_HIT);
        assert_int_equal(c.slot[j], j);
    }
    assert_int_equal(c.slot[4], -1);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    /* lookups 4 + 4 + 4 + 5 + 5 = 22; hits 4 + 4 = 8; refused 2. */
    assert_int_equal(st.calls, 5);
    assert_int_equal(st.lookups, 22);
    assert_int_equal(st.hits, 8);
    assert_int_equal(st.misses, 14);
    assert_int_equal(st.refused, 2);
    gm_policy_free(p);
}

static void test_not_enough_victims(void **state)
{
    (void)state;
    /* 3 slots; two still loading (a prestage and a demand read not yet ended): a call with 2
     * misses finds only one replaceable slot -> GM_ERANGE, nothing evicted. */
    gm_policy *p = make1(8, 3, 0);
    int32_t a[3] = {0, 1, 2};
    call c = stage_at(p, 0, a, 3, true);
    assert_int_equal(c.rc, 0);
    assert_int_equal(gm_policy_loaded(p, 0, 0, true), 0);
    int32_t b[2] = {3, 4};
    c = stage(p, b, 2);
    assert_int_equal(c.rc, GM_ERANGE);
    assert_int_equal(gm_policy_owner(p, 0, 0), 0);
    gm_policy_free(p);
}

static void test_duplicates_and_bad_args(void **state)
{
    (void)state;
    gm_policy *p = make1(8, 2, 0);
    /* {3, 3}: one lookup, one miss; the repeat joins the first copy's read. */
    int32_t d[2] = {3, 3};
    call c = stage_at(p, 0, d, 2, true);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.hit[0], GM_POLICY_MISS);
    assert_int_equal(c.hit[1], GM_POLICY_JOIN);
    assert_int_equal(c.slot[0], 0);
    assert_int_equal(c.slot[1], 0);
    assert_int_equal(c.evicted[1], -1);
    assert_true(gm_policy_count(p, 0, 3) == 1.0f);
    assert_int_equal(gm_policy_loaded(p, 0, 0, true), 0);
    c = stage(p, d, 2);
    assert_int_equal(c.hit[0], GM_POLICY_HIT);
    assert_int_equal(c.hit[1], GM_POLICY_HIT);
    /* 3 distinct in 2 slots fails, but {3,3,3} is one distinct expert. */
    int32_t t3[3] = {3, 3, 3};
    assert_int_equal(stage(p, t3, 3).rc, 0);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.lookups, 3);
    assert_int_equal(st.hits, 2);

    /* Bad arguments change nothing. */
    int32_t bad[2] = {1, 8};
    c = stage(p, bad, 2);
    assert_int_equal(c.rc, GM_EINVAL);
    assert_true(gm_policy_count(p, 0, 1) == 0.0f);
    int32_t neg = -1;
    assert_int_equal(stage(p, &neg, 1).rc, GM_EINVAL);
    assert_int_equal(stage_at(p, 1, d, 1, false).rc, GM_EINVAL); /* no layer 1 */
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.calls, 3);
    int32_t s;
    assert_int_equal(gm_policy_prestage(p, 0, 9, 0, &s), GM_EINVAL);
    assert_int_equal(gm_policy_loaded(p, 0, 1, true), GM_EINVAL); /* s1 is empty */
    assert_int_equal(gm_policy_loaded(p, 0, 0, true), GM_EINVAL); /* s0 is READY */
    assert_int_equal(gm_policy_loaded(p, 0, 7, true), GM_EINVAL); /* no such slot */
    gm_policy_free(p);

    /* Creation: uncovered layers, slots cut to experts, bad pointers. */
    uint32_t ne[3] = {8, 0, 4}, ns[3] = {0, 4, 9};
    p = make(3, ne, ns, 0);
    assert_false(gm_policy_covers(p, 0));
    assert_false(gm_policy_covers(p, 1));
    assert_true(gm_policy_covers(p, 2));
    assert_int_equal(gm_policy_slots(p, 2), 4);
    assert_int_equal(gm_policy_capacity(p, 2), 4);
    assert_false(gm_policy_covers(p, 3));
    gm_policy_free(p);
    assert_int_equal(gm_policy_create(&p, 1, NULL, ns, 0, &E), GM_EINVAL);
    assert_int_equal(gm_policy_create(NULL, 1, ne, ns, 0, &E), GM_EINVAL);
}

static void test_failed_loads_and_quarantine(void **state)
{
    (void)state;
    gm_policy *p = make1(8, 2, 0);
    int32_t e = 4;
    call c = stage_at(p, 0, &e, 1, true);
    assert_int_equal(c.slot[0], 0);
    /* A read in flight: the next call to the layer joins it. */
    c = stage_at(p, 0, &e, 1, true);
    assert_int_equal(c.hit[0], GM_POLICY_JOIN);
    assert_int_equal(c.slot[0], 0);
    /* The read fails: the slot is empty, the expert absent; the next call misses again into
     * the same (lowest empty) slot, with nothing evicted. */
    assert_int_equal(gm_policy_loaded(p, 0, 0, false), 0);
    assert_int_equal(gm_policy_owner(p, 0, 0), -1);
    assert_int_equal(gm_policy_lookup(p, 0, 4), -1);
    c = stage_at(p, 0, &e, 1, true);
    assert_int_equal(c.hit[0], GM_POLICY_MISS);
    assert_int_equal(c.slot[0], 0);
    assert_int_equal(c.evicted[0], -1);
    /* This read wedges: the slot is quarantined; the expert goes to s1 next time, and later
     * misses can only use s1. */
    assert_int_equal(gm_policy_quarantine(p, 0, 0), 0);
    assert_int_equal(gm_policy_quarantine(p, 0, 0), GM_EINVAL);
    one(p, 4, GM_POLICY_MISS, 1, -1);
    one(p, 5, GM_POLICY_MISS, 1, 4);
    int32_t two[2] = {6, 7};
    assert_int_equal(stage(p, two, 2).rc, GM_ERANGE);
    /* A quarantined slot pins the layer's memory: no resize. */
    int32_t src[2];
    assert_int_equal(gm_policy_resize(p, 0, 1, src, NULL, NULL), GM_EUNSUPPORTED);
    /* The wedged read ends at last: s0 is empty again and takes the next miss. */
    assert_int_equal(gm_policy_unquarantine(p, 0, 1), GM_EINVAL);
    assert_int_equal(gm_policy_unquarantine(p, 0, 0), 0);
    assert_int_equal(gm_policy_unquarantine(p, 0, 0), GM_EINVAL);
    one(p, 6, GM_POLICY_MISS, 0, -1);
    assert_int_equal(gm_policy_resize(p, 0, 1, src, NULL, NULL), 0);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    /* Calls: 4, 4, 4, 4, 5, {6,7}, 6: lookups 8; hits 1 (the join). */
    assert_int_equal(st.load_failed, 1);
    assert_int_equal(st.quarantined, 1);
    assert_int_equal(st.calls, 7);
    assert_int_equal(st.lookups, 8);
    assert_int_equal(st.hits, 1);
    gm_policy_free(p);
}

/* A failed read the current call needs is taken again (gm_policy_retake): the slot is LOADING
 * for the same expert (READY once its read lands), and refused when it is not empty or the expert is
 * held elsewhere. */
static void test_retake(void **state)
{
    (void)state;
    gm_policy *p = make1(8, 2, 0);
    int32_t e = 3;
    call c = stage_at(p, 0, &e, 1, true);
    assert_int_equal(c.slot[0], 0);
    assert_int_equal(gm_policy_retake(p, 0, 0, 3), GM_EINVAL); /* still loading */
    assert_int_equal(gm_policy_loaded(p, 0, 0, false), 0);
    assert_int_equal(gm_policy_retake(p, 0, 1, 3), 0);         /* an empty slot, expert absent */
    assert_int_equal(gm_policy_owner(p, 0, 1), 3);
    assert_int_equal(gm_policy_lookup(p, 0, 3), -1);            /* loading */
    assert_int_equal(gm_policy_retake(p, 0, 0, 3), GM_EINVAL); /* held in slot 1 now */
    assert_int_equal(gm_policy_retake(p, 0, 0, 8), GM_EINVAL); /* id out of range */
    assert_int_equal(gm_policy_retake(p, 0, 2, 4), GM_EINVAL); /* slot out of range */
    assert_int_equal(gm_policy_loaded(p, 0, 1, true), 0);
    one(p, 3, GM_POLICY_HIT, 1, -1);
    gm_policy_free(p);
}

static void test_prestage(void **state)
{
    (void)state;
    gm_policy *p = make1(16, 4, 0);
    /* Residents: 0 (c=3, s0), 1 (c=2, s1); s2, s3 empty. */
    one(p, 0, GM_POLICY_MISS, 0, -1);
    one(p, 1, GM_POLICY_MISS, 1, -1);
    one(p, 0, GM_POLICY_HIT, 0, -1);
    one(p, 1, GM_POLICY_HIT, 1, -1);
    one(p, 0, GM_POLICY_HIT, 0, -1);
    gm_policy_end(p, 0);
    int32_t s;
    /* Resident: nothing to do. */
    assert_int_equal(gm_policy_prestage(p, 0, 1, 0, &s), 0);
    assert_int_equal(s, -1);
    /* Empty slots are taken from the top: 5 -> s3, 6 -> s2. Popularity is not touched. */
    assert_int_equal(gm_policy_prestage(p, 0, 5, 0, &s), 0);
    assert_int_equal(s, 3);
    assert_int_equal(gm_policy_prestage(p, 0, 6, 0, &s), 0);
    assert_int_equal(s, 2);
    assert_true(gm_policy_count(p, 0, 5) == 0.0f);
    /* Pending: nothing to do. */
    assert_int_equal(gm_policy_prestage(p, 0, 5, 0, &s), 0);
    assert_int_equal(s, -1);
    /* Full. Candidates: 0 (c=3) and 1 (c=2; but 1 was predicted above, so it is protected),
     * 5 and 6 are unsettled prestages. 7 (c=0) would evict 0 (c=3): declined. Hard mode
     * evicts it. */
    assert_int_equal(gm_policy_prestage(p, 0, 7, 0, &s), 0);
    assert_int_equal(s, -1);
    assert_int_equal(gm_policy_prestage(p, 0, 7, GM_POLICY_PRESTAGE_HARD, &s), 0);
    assert_int_equal(s, 0);
    assert_int_equal(gm_policy_lookup(p, 0, 0), -1);
    /* Reads end: 5 ok, 7 fails; 6 still loading. */
    assert_int_equal(gm_policy_loaded(p, 0, 3, true), 0);
    assert_int_equal(gm_policy_loaded(p, 0, 0, false), 0);
    /* Routing {5, 6, 1}: 5 adopted (already done), 6 adopted (joined), 1 a plain hit. */
    int32_t r[3] = {5, 6, 1};
    call c = stage_at(p, 0, r, 3, true);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.hit[0], GM_POLICY_HIT);
    assert_int_equal(c.hit[1], GM_POLICY_JOIN);
    assert_int_equal(c.hit[2], GM_POLICY_HIT);
    assert_int_equal(gm_policy_loaded(p, 0, 2, true), 0);
    gm_policy_end(p, 0);
    /* Now c0=3, c1=3, c5=1, c6=1; s0 empty (failed read). A prestage of 8 takes s0; one of 9
     * must evict: the least popular unprotected READY resident is 5 (c=1, s3) vs 6 (c=1, s2):
     * the tie goes to s2, but 9 has c=0 < 1: declined. Then routing {0}: 8 was not routed ->
     * unused. */
    assert_int_equal(gm_policy_prestage(p, 0, 8, 0, &s), 0);
    assert_int_equal(s, 0);
    assert_int_equal(gm_policy_prestage(p, 0, 9, 0, &s), 0);
    assert_int_equal(s, -1);
    assert_int_equal(gm_policy_loaded(p, 0, 0, true), 0);
    int32_t z = 1;
    assert_int_equal(stage(p, &z, 1).rc, 0);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    /* issued: 5, 6, 7, 8 = 4 = adopted 2 (done 1, joined 1) + unused 1 (8) + failed 1 (7). */
    assert_int_equal(st.prestage_issued, 4);
    assert_int_equal(st.prestage_adopted, 2);
    assert_int_equal(st.prestage_done, 1);
    assert_int_equal(st.prestage_joined, 1);
    assert_int_equal(st.prestage_unused, 1);
    assert_int_equal(st.prestage_failed, 1);
    assert_int_equal(st.prestage_declined, 2);
    assert_int_equal(st.load_failed, 1);
    /* Adopted prestages count as hits: lookups 5 + 3 + 1 = 9, hits 3 + 3 + 1 = 7. */
    assert_int_equal(st.lookups, 9);
    assert_int_equal(st.hits, 7);
    char buf[1024];
    gm_policy_format_stats(p, buf, sizeof buf);
    assert_non_null(strstr(buf, "[stream] lookahead prestage: 4 predicted expert reads, 2 adopted by "
                                "routing (1 already done, 1 joined), 1 unused, 1 discarded (failed)\n"));
    gm_policy_free(p);
}

/* A prestage whose read ends cancelled before the next stage call settles it (the feeder gave
 * it up as unrouted) counts as unused, not failed, and its slot is free again. */
static void test_prestage_cancelled(void **state)
{
    (void)state;
    gm_policy *p = make1(16, 4, 0);
    int32_t s;
    assert_int_equal(gm_policy_prestage(p, 0, 5, 0, &s), 0);
    assert_int_equal(s, 3);
    assert_int_equal(gm_policy_cancelled(p, 0, 3), 0);
    assert_int_equal(gm_policy_lookup(p, 0, 5), -1);
    assert_int_equal(gm_policy_cancelled(p, 0, 3), GM_EINVAL); /* no longer LOADING */
    /* the next call misses 5 and may take the slot; nothing is left unsettled */
    int32_t e = 5;
    call c = stage(p, &e, 1);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.hit[0], GM_POLICY_MISS);
    assert_true(c.slot[0] >= 0);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.prestage_issued, 1);
    assert_int_equal(st.prestage_unused, 1);
    assert_int_equal(st.prestage_adopted, 0);
    assert_int_equal(st.prestage_failed, 0);
    assert_int_equal(st.load_failed, 0);
    gm_policy_free(p);
}

static void test_prestage_protect_ties(void **state)
{
    (void)state;
    /* Protection lasts until the next stage call; a prestage may evict a resident as popular as
     * the predicted expert (only a more popular one is spared). */
    gm_policy *p = make1(8, 2, 0);
    one(p, 0, GM_POLICY_MISS, 0, -1);
    one(p, 1, GM_POLICY_MISS, 1, -1); /* c0 = c1 = 1 */
    one(p, 2, GM_POLICY_MISS, 0, 0);  /* c2 = 1: evicts 0 (tie, s0) */
    gm_policy_end(p, 0);
    int32_t s;
    assert_int_equal(gm_policy_prestage(p, 0, 2, 0, &s), 0); /* protects s0 */
    assert_int_equal(s, -1);
    /* 0 has c=1, the candidate 1 has c=1: equal, so it may go. */
    assert_int_equal(gm_policy_prestage(p, 0, 0, 0, &s), 0);
    assert_int_equal(s, 1);
    /* Nothing left: s0 protected, s1 an unsettled prestage. */
    assert_int_equal(gm_policy_prestage(p, 0, 3, GM_POLICY_PRESTAGE_HARD, &s), 0);
    assert_int_equal(s, -1);
    gm_policy_free(p);
}

static void test_resize(void **state)
{
    (void)state;
    gm_policy *p = make1(16, 6, 0);
    /* Fill s0..s5 with 10..15, then make popularity: c10=1, c11=4, c12=2, c13=1, c14=5,
     * c15=3. */
    int32_t fill[6] = {10, 11, 12, 13, 14, 15};
    assert_int_equal(stage(p, fill, 6).rc, 0);
    const int32_t more[] = {11, 11, 11, 12, 14, 14, 14, 14, 15, 15};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        one(p, more[i], GM_POLICY_HIT, more[i] - 10, -1);
    /* Shrink to 3: keep the 3 most popular: 14 (5, s4), 11 (4, s1), 15 (3, s5). Drop 12, 10,
     * 13 (in popularity order, ties by slot: 10 (s0) before 13 (s3)). 11 stays in s1; 14 and 15
     * move into the holes s0, s2, lowest first, in old-slot order: s4 -> s0, s5 -> s2. */
    int32_t src[6], ev[6];
    uint32_t n_ev = 99;
    assert_int_equal(gm_policy_resize(p, 0, 3, src, ev, &n_ev), 0);
    assert_int_equal(gm_policy_slots(p, 0), 3);
    assert_int_equal(src[0], 4);
    assert_int_equal(src[1], 1);
    assert_int_equal(src[2], 5);
    assert_int_equal(n_ev, 3);
    assert_int_equal(ev[0], 12);
    assert_int_equal(ev[1], 10);
    assert_int_equal(ev[2], 13);
    assert_int_equal(gm_policy_lookup(p, 0, 14), 0);
    assert_int_equal(gm_policy_lookup(p, 0, 11), 1);
    assert_int_equal(gm_policy_lookup(p, 0, 15), 2);
    assert_int_equal(gm_policy_lookup(p, 0, 12), -1);
    /* The call after the shrink: a miss evicts the least popular of the three (15, s2). */
    one(p, 12, GM_POLICY_MISS, 2, 15);
    /* Grow back to 5: old slots stay, s3 and s4 empty and used first. */
    assert_int_equal(gm_policy_resize(p, 0, 5, src, ev, &n_ev), 0);
    assert_int_equal(n_ev, 0);
    const int32_t want[5] = {0, 1, 2, -1, -1};
    for (int s = 0; s < 5; s++)
        assert_int_equal(src[s], want[s]);
    one(p, 13, GM_POLICY_MISS, 3, -1);
    /* Limits: 0 and above the capacity (6) are out of range; a loading slot refuses. */
    assert_int_equal(gm_policy_resize(p, 0, 0, src, NULL, NULL), GM_ERANGE);
    assert_int_equal(gm_policy_resize(p, 0, 7, src, NULL, NULL), GM_ERANGE);
    int32_t e = 9;
    call c = stage_at(p, 0, &e, 1, true);
    assert_int_equal(c.slot[0], 4);
    assert_int_equal(gm_policy_resize(p, 0, 2, src, NULL, NULL), GM_EINVAL);
    assert_int_equal(gm_policy_slots(p, 0), 5);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.resize_dropped, 3);
    gm_policy_free(p);
}

/* Seeding (experts copied in from the prefill ring): lowest empty slot, READY at once, +1
 * popularity, no lookup counted; an expert already present or a full layer gets -1 and nothing
 * is evicted; a later call hits the seeded experts. */
static void test_seed(void **state)
{
    (void)state;
    gm_policy *p = make1(8, 3, GM_POLICY_HALVE_DEFAULT);
    one(p, 6, GM_POLICY_MISS, 0, -1); /* slot 0: expert 6, count 1 */
    int32_t slot = 99;
    assert_int_equal(gm_policy_seed(p, 0, 3, &slot), 0);
    assert_int_equal(slot, 1);
    assert_int_equal(gm_policy_lookup(p, 0, 3), 1); /* READY: readable now */
    assert_true(gm_policy_count(p, 0, 3) == 1.0f);
    assert_int_equal(gm_policy_seed(p, 0, 3, &slot), 0); /* present already */
    assert_int_equal(slot, -1);
    assert_int_equal(gm_policy_seed(p, 0, 6, &slot), 0); /* present (from a call) */
    assert_int_equal(slot, -1);
    assert_int_equal(gm_policy_seed(p, 0, 0, &slot), 0);
    assert_int_equal(slot, 2);
    assert_int_equal(gm_policy_seed(p, 0, 5, &slot), 0); /* full: nothing evicted */
    assert_int_equal(slot, -1);
    assert_int_equal(gm_policy_lookup(p, 0, 5), -1);
    assert_int_equal(gm_policy_owner(p, 0, 0), 6);
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.seeded, 2);
    assert_int_equal(st.lookups, 1);
    assert_int_equal(st.evictions, 0);
    /* a call of 3 and 5: 3 hits in slot 1; 5 misses and evicts the least popular of the others
     * (6 and 0 both count 1: the lower slot, 0, holding 6) */
    int32_t ids[2] = {3, 5};
    call c = stage(p, ids, 2);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.hit[0], GM_POLICY_HIT);
    assert_int_equal(c.slot[0], 1);
    assert_int_equal(c.hit[1], GM_POLICY_MISS);
    assert_int_equal(c.slot[1], 0);
    assert_int_equal(c.evicted[1], 6);
    /* bad arguments */
    assert_int_equal(gm_policy_seed(p, 0, 8, &slot), GM_EINVAL);
    assert_int_equal(gm_policy_seed(p, 1, 0, &slot), GM_EINVAL);
    assert_int_equal(gm_policy_seed(p, 0, 0, NULL), GM_EINVAL);
    gm_policy_free(p);
}

static void test_hit_rate_by_hand(void **state)
{
    (void)state;
    /* One layer, 6 experts, 3 slots, no halving, k = 2:
     *   1 {0,1}: c0=1 c1=1; both miss -> s0, s1.                  lookups 2,  hits 0
     *   2 {0,2}: c0=2 c2=1; 0 hit; 2 miss -> empty s2.             lookups 4,  hits 1
     *   3 {1,3}: c1=2 c3=1; 1 hit; 3 miss; candidates s0 (0, c2),
     *            s2 (2, c1) -> s2, evicts 2.                       lookups 6,  hits 2
     *   4 {0,1}: c0=3 c1=3; both hit.                              lookups 8,  hits 4
     *   5 {2,4}: c2=2 c4=1; both miss; candidates s0 (0, 3),
     *            s1 (1, 3), s2 (3, 1) -> s2 then s0 (tie with s1):
     *            2 -> s2 evicts 3, 4 -> s0 evicts 0.               lookups 10, hits 4
     *   6 {0,2}: c0=4 c2=3; 2 hit (s2); 0 miss; candidates s0
     *            (4, c1), s1 (1, c3) -> s0, evicts 4.              lookups 12, hits 5
     * Total 5 of 12 = 41.666..% -> "41.7%"; misses 7; evictions 4. */
    gm_policy *p = make1(6, 3, 0);
    const int32_t calls[6][2] = {{0, 1}, {0, 2}, {1, 3}, {0, 1}, {2, 4}, {0, 2}};
    const int32_t want_slot[6][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 1}, {2, 0}, {0, 2}};
    const int32_t want_ev[6][2] = {{-1, -1}, {-1, -1}, {-1, 2}, {-1, -1}, {3, 0}, {4, -1}};
    for (int i = 0; i < 6; i++) {
        call c = stage(p, calls[i], 2);
        assert_int_equal(c.rc, 0);
        for (int j = 0; j < 2; j++) {
            assert_int_equal(c.slot[j], want_slot[i][j]);
            assert_int_equal(c.evicted[j], want_ev[i][j]);
        }
    }
    gm_policy_stats st;
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.calls, 6);
    assert_int_equal(st.lookups, 12);
    assert_int_equal(st.hits, 5);
    assert_int_equal(st.misses, 7);
    assert_int_equal(st.evictions, 4);
    char buf[512];
    size_t n = gm_policy_format_stats(p, buf, sizeof buf);
    const char *want = "[stream] decode feeder arena hit rate: 41.7% (5 of 12 expert lookups)\n"
                       "[stream] decode feeder per-layer hit rate: min 41.7% / median 41.7% / "
                       "max 41.7% over 1 MoE layers; coldest: L0 41.7%\n";
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
    /* Truncation follows snprintf: the needed length, a NUL-terminated prefix. */
    char small[10];
    assert_int_equal(gm_policy_format_stats(p, small, sizeof small), strlen(want));
    assert_string_equal(small, "[stream] ");
    assert_int_equal(gm_policy_format_stats(p, NULL, 0), strlen(want));
    gm_policy_free(p);

    /* halve_every = 4, k = 1, 2 slots, sequence 0 0 0 1 2 1 2 0 1 2 (the same one
     * test_policy_replay works out for LRU and Belady):
     *   1 {0} c0=1 miss -> s0         2 {0} c0=2 hit          3 {0} c0=3 hit
     *   4 {1} c1=1, halve: c0=1.5 c1=0.5; miss -> s1
     *   5 {2} c2=1; miss; s0 (0, 1.5), s1 (1, 0.5) -> s1, evicts 1
     *   6 {1} c1=1.5; miss; s0 (0, 1.5), s1 (2, 1) -> s1, evicts 2
     *   7 {2} c2=2; miss; s0 (0, 1.5), s1 (1, 1.5): tie -> s0, evicts 0
     *   8 {0} c0=2.5, halve: c0=1.25 c1=0.75 c2=1; miss; s0 (2, 1), s1 (1, 0.75) -> s1
     *   9 {1} c1=1.75; miss; s0 (2, 1), s1 (0, 1.25) -> s0, evicts 2
     *  10 {2} c2=2; miss; s0 (1, 1.75), s1 (0, 1.25) -> s1, evicts 0
     * Hits: 2 of 10. */
    p = make1(3, 2, 4);
    const int32_t seq[10] = {0, 0, 0, 1, 2, 1, 2, 0, 1, 2};
    const int32_t slot2[10] = {0, 0, 0, 1, 1, 1, 0, 1, 0, 1};
    const int32_t ev2[10] = {-1, -1, -1, -1, 1, 2, 0, 1, 2, 0};
    for (int i = 0; i < 10; i++) {
        call c = stage(p, &seq[i], 1);
        assert_int_equal(c.slot[0], slot2[i]);
        assert_int_equal(c.evicted[0], ev2[i]);
    }
    gm_policy_total_stats(p, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.lookups, 10);
    gm_policy_free(p);
}

static void test_spread_and_format(void **state)
{
    (void)state;
    /* Rates L0 50, L1 none, L2 100, L3 0, L4 75: sorted L3, L0, L4, L2; the median is the
     * element at 4/2 = 2: L4. */
    uint64_t h[5] = {1, 0, 2, 0, 3}, n[5] = {2, 0, 2, 2, 4};
    gm_policy_spread sp;
    gm_policy_spread_of(h, n, 5, &sp);
    assert_int_equal(sp.n_layers, 4);
    assert_int_equal(sp.min_layer, 3);
    assert_int_equal(sp.median_layer, 4);
    assert_int_equal(sp.max_layer, 2);
    assert_true(sp.median_pct == 75.0);
    assert_int_equal(sp.n_coldest, 3);
    assert_int_equal(sp.coldest[0], 3);
    assert_int_equal(sp.coldest[1], 0);
    assert_int_equal(sp.coldest[2], 4);
    /* Exact ties (1/3 = 2/6) order by layer; near-equal rates a double cannot tell apart are
     * still ordered: (M-1)/M > (M-2)/(M-1). */
    uint64_t h2[2] = {1, 2}, n2[2] = {3, 6};
    gm_policy_spread_of(h2, n2, 2, &sp);
    assert_int_equal(sp.min_layer, 0);
    assert_int_equal(sp.max_layer, 1);
    uint64_t M = UINT64_MAX, h3[2] = {M - 1, M - 2}, n3[2] = {M, M - 1};
    gm_policy_spread_of(h3, n3, 2, &sp);
    assert_int_equal(sp.min_layer, 1);
    assert_int_equal(sp.max_layer, 0);
    gm_policy_spread_of(h, n, 0, &sp);
    assert_int_equal(sp.n_layers, 0);

    /* Through a policy: layers 0 and 2 covered (1 is not). L0: {0} twice: 1 of 2; L2: {1}
     * once: 0 of 1. Total 1 of 3 = 33.3%. Sorted: L2 0%, L0 50%; median = index 1 = 50%. */
    uint32_t ne[3] = {4, 4, 4}, ns[3] = {2, 0, 2};
    gm_policy *p = make(3, ne, ns, 0);
    char buf[512];
    assert_int_equal(gm_policy_format_stats(p, buf, sizeof buf), 0); /* no lookups: nothing */
    assert_string_equal(buf, "");
    int32_t e0 = 0, e1 = 1;
    assert_int_equal(stage_at(p, 0, &e0, 1, false).rc, 0);
    assert_int_equal(stage_at(p, 0, &e0, 1, false).rc, 0);
    assert_int_equal(stage_at(p, 2, &e1, 1, false).rc, 0);
    gm_policy_format_stats(p, buf, sizeof buf);
    assert_string_equal(buf, "[stream] decode feeder arena hit rate: 33.3% (1 of 3 expert lookups)\n"
                             "[stream] decode feeder per-layer hit rate: min 0.0% / median 50.0% / "
                             "max 50.0% over 2 MoE layers; coldest: L2 0.0%, L0 50.0%\n");
    const char *spread = "min 0.0% / median 50.0% / max 50.0% over 2 MoE layers; coldest: L2 0.0%, "
                         "L0 50.0%";
    assert_int_equal(gm_policy_format_spread(p, buf, sizeof buf), strlen(spread));
    assert_string_equal(buf, spread);
    gm_policy_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_start),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_halving),
        cmocka_unit_test(test_never_evicts_current_call),
        cmocka_unit_test(test_k_equals_slots_and_over),
        cmocka_unit_test(test_not_enough_victims),
        cmocka_unit_test(test_duplicates_and_bad_args),
        cmocka_unit_test(test_failed_loads_and_quarantine),
        cmocka_unit_test(test_prestage),
        cmocka_unit_test(test_prestage_cancelled),
        cmocka_unit_test(test_prestage_protect_ties),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_retake),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_hit_rate_by_hand),
        cmocka_unit_test(test_spread_and_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
