/* The routing-trace replay (tools/replay): the trace parser's errors, each policy's hit count on
 * tiny traces worked out by hand, and Belady's optimality: never worse than LRU or the engine's
 * LFU on random traces, and equal to an exhaustive search on tiny ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "testutil.h"

static gm_err E;

static int parse(const char *text, bool varying, gm_trace *t)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    memset(&E, 0, sizeof E);
    int rc = gm_trace_parse(f, "T", varying, t, &E);
    fclose(f);
    return rc;
}

static void expect_error(const char *text, const char *msg)
{
    gm_trace t;
    int rc = parse(text, false, &t);
    if (rc != GM_EFORMAT || !strstr(E.msg, msg))
        fail_msg("trace %s: rc %d, message '%s', wanted '%s'", text, rc, E.msg, msg);
    assert_int_equal(t.n_lines, 0);
    assert_null(t.ids);
}

static void test_parse(void **state)
{
    (void)state;
    gm_trace t;
    const char *ok = "# a comment\n"
                     "0 3 1 2\n"
                     "0 5\t7 0\r\n"
                     "\n"
                     "1 3 2 9\n"
                     "1 4 0 1"; /* no final newline */
    assert_int_equal(parse(ok, false, &t), 0);
    assert_int_equal(t.n_lines, 4);
    assert_int_equal(t.n_tokens, 2);
    assert_int_equal(t.n_layers, 6);
    assert_int_equal(t.n_present, 3);
    assert_int_equal(t.k_min, 2);
    assert_int_equal(t.k_max, 2);
    assert_int_equal(t.n_experts[3], 10);
    assert_int_equal(t.n_experts[4], 2);
    assert_int_equal(t.n_experts[5], 8);
    assert_int_equal(t.n_experts[0], 0);
    assert_int_equal(t.line_layer[1], 5);
    assert_int_equal(t.ids[t.line_off[1]], 7);
    assert_int_equal(t.ids[t.line_off[3] + 1], 1);
    gm_trace_free(&t);

    expect_error("", "no trace lines");
    expect_error("0 1 2\n0 1 3\n", "T:2: layer 1 out of order");
    expect_error("0 1 2\n0 2 3\n0 0 4\n", "T:3: layer 0 out of order");
    expect_error("0 1 2\n2 1 3\n", "T:2: token 2 follows token 0");
    expect_error("1 1 2\n0 1 3\n", "T:2: token 0 follows token 1");
    expect_error("0 1 2 3\n1 1 3\n", "T:2: 1 expert ids where earlier lines have 2");
    expect_error("0 1 2\n# x\n1 1 x3\n", "T:3: the expert id 'x3' is not a decimal");
    expect_error("0 1 2 -3\n", "T:1: the expert id '-3'");
    expect_error("0 1 2 3x\n", "T:1: the expert id '3x'");
    expect_error("0 1 9999999\n", "T:1: the expert id '9999999'");
    expect_error("a 1 2\n", "T:1: the token 'a'");
    expect_error("0 70000 2\n", "T:1: the layer '70000'");
    expect_error("0\n", "T:1: the line ends after the token");
    expect_error("0 1\n", "T:1: no expert ids");
    expect_error("0 1 4 5 4\n", "T:1: expert 4 appears twice");
    expect_error("0 1 4\n1 1 5 6 7\n", "T:2: 3 expert ids");

    /* K may vary when allowed. */
    assert_int_equal(parse("0 1 4\n1 1 5 6 7\n", true, &t), 0);
    assert_int_equal(t.k_min, 1);
    assert_int_equal(t.k_max, 3);
    assert_int_equal(t.layer_k_max[1], 3);
    gm_trace_free(&t);

    /* A missing file is an I/O error naming it. */
    assert_int_equal(gm_trace_load("/nonexistent/trace.txt", false, &t, &E), GM_EIO);
    assert_non_null(strstr(E.msg, "/nonexistent/trace.txt"));
}

/* Replays t with the same slot count in every layer. */
static gm_replay_result run(const gm_trace *t, gm_replay_kind kind, uint32_t slots, uint32_t halve)
{
    uint32_t s[64];
    assert_true(t->n_layers <= 64);
    for (uint32_t l = 0; l < t->n_layers; l++)
        s[l] = slots;
    gm_replay_result r;
    memset(&E, 0, sizeof E);
    if (gm_replay_run(t, kind, s, halve, &r, &E))
        fail_msg("replay %s: %s", gm_replay_kind_name(kind), E.msg);
    return r;
}

static void test_by_hand_k1(void **state)
{
    (void)state;
    /* Two layers, k = 1, 2 slots. Layer 3 routes 0 0 0 1 2 1 2 0 1 2; layer 5 routes 7 ten
     * times (one miss, nine hits for every policy).
     * LRU on layer 3 (slot contents after each call, time of last use):
     *   1 0 miss [0 -]   2 0 hit   3 0 hit (0@3)   4 1 miss [0 1] (1@4)
     *   5 2 miss: LRU is 0 (@3) -> [2 1]           6 1 hit (1@6)   7 2 hit (2@7)
     *   8 0 miss: LRU is 1 (@6) -> [2 0]           9 1 miss: LRU is 2 (@7) -> [1 0]
     *  10 2 miss: LRU is 0 (@8) -> [1 2]           hits: 2 3 6 7 = 4
     * LFU (never halving in this run; counters after the call's +1):
     *   1-3 as LRU (c0=3)  4 1 miss -> s1 [0 1]
     *   5 2 (c2=1) miss: 0 (3) vs 1 (1) -> evict 1 [0 2]
     *   6 1 (c1=2) miss: 0 (3) vs 2 (1) -> evict 2 [0 1]
     *   7 2 (c2=2) miss: 0 (3) vs 1 (2) -> evict 1 [0 2]
     *   8 0 hit  9 1 (c1=3) miss: 0 (4) vs 2 (2) -> evict 2 [0 1]
     *  10 2 (c2=3) miss: 0 (4) vs 1 (3) -> evict 1 [0 2]        hits: 2 3 8 = 3
     * Belady (next use in the layer's sequence; never = infinitely far):
     *   1-4 as LRU [0 1]; 5 2 miss: 0 next at 8, 1 at 6 -> evict 0 [2 1]
     *   6 1 hit  7 2 hit  8 0 miss: 2 next at 10, 1 at 9 -> evict 2 [0 1]
     *   9 1 hit 10 2 miss: 0 never, 1 never: tie -> lowest slot [2 1]   hits: 2 3 6 7 9 = 5
     * LFU with halve_every 4 on layer 3 gets 2 hits (worked out in test_policy.c).
     * Static keeps 0 (4 uses) and 1 (3 uses; 2 also has 3, ties to the lower id) in L3 and 7 in
     * L5, each loaded at its first use: L3 3 + 2 = 5, L5 9.
     * Totals over 20 lookups: LRU 4 + 9 = 13, LFU 3 + 9 = 12, Belady 5 + 9 = 14, LFU/4 11,
     * Static 5 + 9 = 14. */
    char text[512] = "";
    const int seq[10] = {0, 0, 0, 1, 2, 1, 2, 0, 1, 2};
    for (int i = 0; i < 10; i++) {
        char line[64];
        snprintf(line, sizeof line, "%d 3 %d\n%d 5 7\n", i, seq[i], i);
        strcat(text, line);
    }
    gm_trace t;
    assert_int_equal(parse(text, false, &t), 0);
    const uint64_t want[5] = {13, 12, 14, 11, 14}, want_l3[5] = {4, 3, 5, 2, 5};
    for (int kind = 0; kind < 5; kind++) {
        gm_replay_kind kd = kind == 3 ? GM_REPLAY_LFU : kind == 4 ? GM_REPLAY_STATIC : (gm_replay_kind)kind;
        gm_replay_result r = run(&t, kd, 2, kind == 3 ? 4 : 0);
        assert_int_equal(r.lookups, 20);
        assert_int_equal(r.calls, 20);
        assert_int_equal(r.hits, want[kind]);
        assert_int_equal(r.layer_hits[3], want_l3[kind]);
        assert_int_equal(r.layer_lookups[3], 10);
        assert_int_equal(r.layer_hits[5], 9);
        assert_int_equal(r.spread.n_layers, 2);
        assert_int_equal(r.spread.min_layer, 3);
        assert_int_equal(r.spread.max_layer, 5);
        assert_true(r.spread.max_pct == 90.0);
        gm_replay_result_free(&r);
    }
    /* Layers left out (0 slots) are not replayed. */
    uint32_t s[6] = {0, 0, 0, 0, 0, 2};
    gm_replay_result r;
    assert_int_equal(gm_replay_run(&t, GM_REPLAY_BELADY, s, 0, &r, &E), 0);
    assert_int_equal(r.lookups, 10);
    assert_int_equal(r.hits, 9);
    gm_replay_result_free(&r);
    gm_trace_free(&t);
}

static void test_by_hand_k2(void **state)
{
    (void)state;
    /* One layer, k = 2, 3 slots: {0,1} {2,3} {0,2} {1,3}.
     * LRU:    1 -> s0=0 s1=1. 2: 2 -> s2; 3: 0 (@1) and 1 (@1) tie -> s0 [3 1 2].
     *         3: 2 hit; 0: 3 (@2) vs 1 (@1) -> s1 [3 0 2]. 4: 3 hit; 1: 0 (@3) vs 2 (@3) tie
     *         -> s1 [3 1 2]. Hits 2.
     * LFU:    1 -> [0 1]. 2: 2 -> s2; 3: c0 = c1 = 1 tie -> s0 [3 1 2]. 3: c0=2 c2=2; 2 hit;
     *         0: 3 (1) vs 1 (1) tie -> s0 [0 1 2]. 4: c1=2 c3=2; 1 hit; 3: 0 (2) vs 2 (2) tie
     *         -> s0 [3 1 2]. Hits 2.
     * Belady: 1 -> [0 1]. 2: 2 -> s2; 3: 0 next at 3, 1 at 4 -> evict 1 [0 3 2]. 3: both hit.
     *         4: 3 hit; 1: 0 never, 2 never: tie -> s0 [1 3 2]. Hits 3.
     * Static: every expert is routed twice; it keeps 0, 1, 2 (ties to the lower id), one hit
     *         each after its first load. Hits 3.
     * No policy may evict the call's own experts: in call 2, 2 was just loaded into s2, and
     * LRU's candidates exclude it although it is not older. */
    gm_trace t;
    assert_int_equal(parse("0 0 0 1\n1 0 2 3\n2 0 0 2\n3 0 1 3\n", false, &t), 0);
    const uint64_t want[GM_REPLAY_KINDS] = {2, 2, 3, 3};
    for (int kind = 0; kind < GM_REPLAY_KINDS; kind++) {
        gm_replay_result r = run(&t, (gm_replay_kind)kind, 3, 0);
        assert_int_equal(r.lookups, 8);
        assert_int_equal(r.hits, want[kind]);
        gm_replay_result_free(&r);
    }
    /* Fewer slots than a call's experts: refused, naming the layer. */
    uint32_t one = 1;
    gm_replay_result r;
    assert_int_equal(gm_replay_run(&t, GM_REPLAY_LRU, &one, 0, &r, &E), GM_ERANGE);
    assert_non_null(strstr(E.msg, "layer 0: 1 slots"));
    /* Slots above the expert count are cut to it: 4 experts, everything fits after the first
     * use: misses 0, 1, 2, 3 -> hits 4 of 8. */
    for (int kind = 0; kind < GM_REPLAY_KINDS; kind++) {
        r = run(&t, (gm_replay_kind)kind, 100, 0);
        assert_int_equal(r.hits, 4);
        gm_replay_result_free(&r);
    }
    gm_trace_free(&t);
}

/* xorshift64*: the same sequence everywhere. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

/* A random trace: n_layers layers, k ids per line out of ne experts, skewed towards low ids
 * (the min of two draws) so that popularity matters. */
static char *random_trace(uint32_t n_tokens, uint32_t n_layers, uint32_t ne, uint32_t k)
{
    size_t cap = (size_t)n_tokens * n_layers * (16 + 8 * k) + 1, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    for (uint32_t tok = 0; tok < n_tokens; tok++)
        for (uint32_t l = 0; l < n_layers; l++) {
            len += (size_t)snprintf(s + len, cap - len, "%u %u", tok, l * 2 + 1);
            uint32_t ids[16] = {0}, n = 0;
            while (n < k) {
                uint32_t a = rnd(ne), b = rnd(ne), e = a < b ? a : b;
                if (l % 2)
                    e = (e + tok / 50) % ne; /* a drifting layer */
                bool dup = false;
                for (uint32_t i = 0; i < n; i++)
                    dup |= ids[i] == e;
                if (!dup)
                    ids[n++] = e;
            }
            for (uint32_t i = 0; i < k; i++)
                len += (size_t)snprintf(s + len, cap - len, " %u", ids[i]);
            len += (size_t)snprintf(s + len, cap - len, "\n");
        }
    return s;
}

static void test_belady_never_worse(void **state)
{
    (void)state;
    const uint32_t halves[3] = {0, 3, GM_POLICY_HALVE_DEFAULT};
    for (int round = 0; round < 40; round++) {
        uint32_t k = 1 + rnd(4), ne = k + 2 + rnd(20), n_layers = 1 + rnd(3);
        char *text = random_trace(150 + rnd(150), n_layers, ne, k);
        gm_trace t;
        assert_int_equal(parse(text, false, &t), 0);
        free(text);
        uint32_t slots = k + rnd(ne - k + 1);
        gm_replay_result opt = run(&t, GM_REPLAY_BELADY, slots, 0);
        gm_replay_result lru = run(&t, GM_REPLAY_LRU, slots, 0);
        gm_replay_result lfu = run(&t, GM_REPLAY_LFU, slots, halves[round % 3]);
        assert_int_equal(opt.lookups, lru.lookups);
        assert_int_equal(opt.lookups, lfu.lookups);
        for (uint32_t l = 0; l < t.n_layers; l++) {
            if (opt.layer_hits[l] < lru.layer_hits[l] || opt.layer_hits[l] < lfu.layer_hits[l])
                fail_msg("round %d layer %u (k %u, %u experts, %u slots): Belady %llu, LRU %llu, "
                         "LFU %llu", round, l, k, ne, slots, (unsigned long long)opt.layer_hits[l],
                         (unsigned long long)lru.layer_hits[l],
                         (unsigned long long)lfu.layer_hits[l]);
        }
        /* With every expert fitting, all three only miss each expert's first use. */
        if (slots >= ne) {
            assert_int_equal(opt.hits, lru.hits);
            assert_int_equal(opt.hits, lfu.hits);
        }
        gm_replay_result_free(&opt);
        gm_replay_result_free(&lru);
        gm_replay_result_free(&lfu);
        gm_trace_free(&t);
    }
}

/* Exhaustive optimum: the most hits any demand policy can get on layer-0 lines from `line`
 * (id j of it), with owner[] the slot contents, never evicting an id of the current line. */
static uint32_t best_hits(const gm_trace *t, uint64_t line, uint64_t j, int32_t *owner, uint32_t ns)
{
    if (line == t->n_lines)
        return 0;
    uint64_t a = t->line_off[line], b = t->line_off[line + 1];
    if (a + j == b)
        return best_hits(t, line + 1, 0, owner, ns);
    int32_t e = t->ids[a + j];
    for (uint32_t s = 0; s < ns; s++)
        if (owner[s] == e)
            return 1 + best_hits(t, line, j + 1, owner, ns);
    for (uint32_t s = 0; s < ns; s++)
        if (owner[s] < 0) { /* an empty slot is never worse than an eviction */
            owner[s] = e;
            uint32_t h = best_hits(t, line, j + 1, owner, ns);
            owner[s] = -1;
            return h;
        }
    uint32_t best = 0;
    for (uint32_t s = 0; s < ns; s++) {
        bool in_line = false;
        for (uint64_t i = a; i < b; i++)
            in_line |= t->ids[i] == owner[s];
        if (in_line)
            continue;
        int32_t old = owner[s];
        owner[s] = e;
        uint32_t h = best_hits(t, line, j + 1, owner, ns);
        owner[s] = old;
        if (h > best)
            best = h;
    }
    return best;
}

static void test_belady_is_optimal(void **state)
{
    (void)state;
    for (int round = 0; round < 60; round++) {
        uint32_t k = 1 + rnd(2), ns = k + rnd(2), ne = ns + 1 + rnd(3);
        char *text = random_trace(8, 1, ne, k);
        gm_trace t;
        assert_int_equal(parse(text, false, &t), 0);
        free(text);
        /* random_trace names the layer 1; replay it alone. */
        uint32_t slots[2] = {0, ns};
        gm_replay_result r;
        assert_int_equal(gm_replay_run(&t, GM_REPLAY_BELADY, slots, 0, &r, &E), 0);
        int32_t owner[4] = {-1, -1, -1, -1};
        uint32_t opt = best_hits(&t, 0, 0, owner, ns);
        if (r.hits != opt)
            fail_msg("round %d (k %u, %u slots, %u experts): Belady %llu, optimum %u", round, k, ns,
                     ne, (unsigned long long)r.hits, opt);
        gm_replay_result_free(&r);
        gm_trace_free(&t);
    }
}

static void test_slot_file(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/slots.txt", gm_test_tmpdir());
    const char *ok = "# layer slots\n3 16\n\n5 8\n900 4\n";
    assert_int_equal(gm_write_file(path, ok, strlen(ok)), 0);
    uint32_t s[6] = {1, 1, 1, 1, 1, 1};
    assert_int_equal(gm_replay_load_slots(path, s, 6, &E), 0);
    const uint32_t want[6] = {1, 1, 1, 16, 1, 8};
    for (int l = 0; l < 6; l++)
        assert_int_equal(s[l], want[l]);
    const char *bad = "3 16\n4\n";
    assert_int_equal(gm_write_file(path, bad, strlen(bad)), 0);
    memset(&E, 0, sizeof E);
    assert_int_equal(gm_replay_load_slots(path, s, 6, &E), GM_EFORMAT);
    assert_non_null(strstr(E.msg, "slots.txt:2: expected 'LAYER SLOTS'"));
    const char *bad2 = "3 16 2\n";
    assert_int_equal(gm_write_file(path, bad2, strlen(bad2)), 0);
    memset(&E, 0, sizeof E);
    assert_int_equal(gm_replay_load_slots(path, s, 6, &E), GM_EFORMAT);
    assert_non_null(strstr(E.msg, "slots.txt:1:"));
    remove(path);
    assert_int_equal(gm_replay_load_slots(path, s, 6, &E), GM_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_by_hand_k1),
        cmocka_unit_test(test_by_hand_k2),
        cmocka_unit_test(test_belady_never_worse),
        cmocka_unit_test(test_belady_is_optimal),
        cmocka_unit_test(test_slot_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
