/* The lossy levers end to end (docs/streaming.md "Lossy settings"), on generated models:
 * - the expert cap computes what the trained top-k of the same value computes: a model whose
 *   metadata says k = 2 (in memory) against the same weights written with k = 4 and run
 *   streamed with --moe-experts 2, and the other way round, prefill and decode;
 * - expert mass at P = 1 is the lossless result bit for bit; at P = 0.5 on a first decode token
 *   (the arena empty, lookahead off: every expert a miss) it keeps what miss-shed at 0.5 keeps,
 *   two different rules that agree exactly there, and miss-shed then reads fewer bytes;
 * - miss-shed never drops an expert the arena holds: with every expert resident its decode is
 *   the lossless one bit for bit and nothing is shed;
 * - layer-shed skips only where a shared expert runs instead: nothing changes on a model
 *   without one; on a model with one, decode tokens change, prefill does not, and the same
 *   calls give the same result again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genmodel.h"
#include "infer/engine.h"
#include "testutil.h"

typedef struct lever_run {
    gm_placement placement;
    gm_shed_opts levers;
    uint32_t n_prefill;  /* tokens of the first call; the rest are decoded one at a time */
    bool no_lookahead;
    bool no_ring;
    const char *arena_gb; /* GMLX_DECODE_ARENA_GB, or NULL: the plan's */
} lever_run;

typedef struct lever_out {
    float *logits; /* n x vocab */
    uint32_t vocab;
    gm_stream_stats st;
    gm_shed_stats shed;
    bool streamed;
} lever_out;

static void run(const char *model, uint32_t n, const lever_run *cfg, lever_out *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->arena_gb)
        gm_test_arena(cfg->arena_gb);
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.lookahead = !cfg->no_lookahead;
    so.prefill_ring = !cfg->no_ring;
    so.ring_min_tokens = 2;
    so.buffered = true; /* the test directory may be a tmpfs */
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .placement = cfg->placement, .stream = &so, .levers = &cfg->levers};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    gm_err err = {0};
    if (gm_engine_load(&e, model, &eo, &err) != 0 || gm_fwd_create(&s, e, n + 4, GM_KV_F32, &err) != 0)
        fail_msg("load: %s", err.msg);
    gm_test_arena(NULL);
    out->vocab = gm_engine_n_vocab(e);
    out->logits = malloc((size_t)n * out->vocab * sizeof *out->logits);
    int32_t ids[64];
    assert_true(n <= 64);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 7919u + 29u) % 300u);
    for (uint32_t at = 0; at < n;) {
        uint32_t m = at == 0 && cfg->n_prefill ? cfg->n_prefill : 1;
        if (gm_fwd_eval(s, ids + at, m, out->logits + (size_t)at * out->vocab, true, &err) != 0)
            fail_msg("eval: %s", err.msg);
        at += m;
    }
    out->streamed = gm_engine_stream(e) != NULL;
    if (gm_engine_stream(e))
        gm_stream_get_stats(gm_engine_stream(e), &out->st);
    if (gm_engine_levers(e))
        gm_shed_get_stats(gm_engine_levers(e), &out->shed);
    gm_fwd_free(s);
    gm_engine_free(e);
}

/* The largest |a - b| over positions [p0, p1). */
static double max_diff(const lever_out *a, const lever_out *b, uint32_t p0, uint32_t p1)
{
    double d = 0;
    for (size_t i = (size_t)p0 * a->vocab; i < (size_t)p1 * a->vocab; i++) {
        double x = fabs((double)a->logits[i] - (double)b->logits[i]);
        d = x > d ? x : d;
    }
    return d;
}

static const char *const k_shape4[] = {"--layers", "3", "--experts", "16", "--experts-used", "4",
                                       "--hidden", "256", "--ffn", "256", "--expert-ffn", "128",
                                       "--heads", "4", "--kv-heads", "2", "--head-dim", "64", NULL};
static const char *const k_shape2[] = {"--layers", "3", "--experts", "16", "--experts-used", "2",
                                       "--hidden", "256", "--ffn", "256", "--expert-ffn", "128",
                                       "--heads", "4", "--kv-heads", "2", "--head-dim", "64", NULL};

static void test_expert_cap_is_top_k(void **state)
{
    (void)state;
    char m4[512], m2[512];
    gm_test_gen_arch(m4, sizeof m4, "cap-k4", "qwen3moe", "21", k_shape4);
    gm_test_gen_arch(m2, sizeof m2, "cap-k2", "qwen3moe", "21", k_shape2);
    const uint32_t n = 12;
    lever_out mem2, mem4, cap2, cap4;
    lever_run plain = {.placement = GM_PLACE_AUTO, .n_prefill = 8};
    run(m2, n, &plain, &mem2);
    run(m4, n, &plain, &mem4);
    assert_false(mem2.streamed);
    lever_run capped = {.placement = GM_PLACE_EXPERTS, .n_prefill = 8, .levers = {.experts = 2}};
    run(m4, n, &capped, &cap2);
    assert_true(cap2.streamed);
    capped.levers.experts = 4;
    run(m2, n, &capped, &cap4);
    print_message("cap 4->2 vs k=2: %.3g; cap 2->4 vs k=4: %.3g; k=2 vs k=4: %.3g\n",
                  max_diff(&cap2, &mem2, 0, n), max_diff(&cap4, &mem4, 0, n), max_diff(&mem2, &mem4, 0, n));
    assert_true(max_diff(&cap2, &mem2, 0, n) == 0.0);
    assert_true(max_diff(&cap4, &mem4, 0, n) == 0.0);
    assert_true(max_diff(&mem2, &mem4, 0, n) > 1e-3); /* the check can tell k = 2 from k = 4 */

    /* the cap then the mass cut within it: the trained k = 2 with the same cut */
    lever_out both, mass2;
    capped.levers = (gm_shed_opts){.experts = 2, .expert_mass = 0.6f};
    run(m4, n, &capped, &both);
    capped.levers = (gm_shed_opts){.expert_mass = 0.6f};
    run(m2, n, &capped, &mass2);
    assert_true(both.shed.mass_kept < both.shed.mass_routed);
    assert_true(max_diff(&both, &mass2, 0, n) == 0.0);
    free(both.logits), free(mass2.logits);
    free(mem2.logits), free(mem4.logits), free(cap2.logits), free(cap4.logits);
}

static void test_mass_and_miss_shed(void **state)
{
    (void)state;
    char m[512];
    gm_test_gen_arch(m, sizeof m, "mass", "qwen3moe", "22", k_shape4);
    const uint32_t n = 6;
    lever_run cfg = {.placement = GM_PLACE_EXPERTS, .no_lookahead = true};
    lever_out lossless, full, mass, miss;
    run(m, n, &cfg, &lossless);
    cfg.levers.expert_mass = 1.0f;
    run(m, n, &cfg, &full);
    assert_true(max_diff(&full, &lossless, 0, n) == 0.0);
    cfg.levers.expert_mass = 0.5f;
    run(m, n, &cfg, &mass);
    cfg.levers = (gm_shed_opts){.miss_shed = 0.5f};
    run(m, n, &cfg, &miss);
    print_message("mass 0.5 vs lossless %.3g, kept %.2f of %.2f per token-layer; first token: miss-shed 0.5 "
                  "vs mass 0.5 %.3g; miss-shed %llu shed, %.3f vs %.3f GB read\n",
                  max_diff(&mass, &lossless, 0, n), (double)mass.shed.mass_kept / mass.shed.mass_tokens,
                  (double)mass.shed.mass_routed / mass.shed.mass_tokens, max_diff(&miss, &mass, 0, 1),
                  (unsigned long long)miss.shed.miss_shed, miss.st.bytes_read / 1e9, lossless.st.bytes_read / 1e9);
    assert_true(max_diff(&mass, &lossless, 0, n) > 1e-3);
    assert_true(mass.shed.mass_kept < mass.shed.mass_routed);
    assert_int_equal(mass.shed.mass_routed, 4ull * 3 * n);
    assert_true(max_diff(&miss, &mass, 0, 1) < 1e-4);
    assert_true(miss.shed.miss_shed > 0);
    assert_true(miss.st.bytes_read < lossless.st.bytes_read);
    free(lossless.logits), free(full.logits), free(mass.logits), free(miss.logits);
}

/* Prefill through the arena (no ring) stages every expert the prompt routes into an arena that
 * holds them all; the decode after it has nothing to shed. */
static void test_miss_shed_keeps_resident(void **state)
{
    (void)state;
    char m[512];
    gm_test_gen_arch(m, sizeof m, "resident", "qwen3moe", "23", k_shape4);
    const uint32_t n = 40;
    lever_run cfg = {.placement = GM_PLACE_EXPERTS, .n_prefill = 36, .no_ring = true, .no_lookahead = true,
                     .arena_gb = "1"};
    lever_out lossless, shed;
    run(m, n, &cfg, &lossless);
    cfg.levers.miss_shed = 0.3f;
    run(m, n, &cfg, &shed);
    print_message("arena misses in decode %llu; shed %llu\n", (unsigned long long)lossless.st.misses,
                  (unsigned long long)shed.shed.miss_shed);
    assert_int_equal(lossless.st.misses, 0); /* the prompt routed every expert */
    assert_int_equal(shed.shed.miss_shed, 0);
    assert_true(max_diff(&shed, &lossless, 0, n) == 0.0);
    free(lossless.logits), free(shed.logits);
}

static void test_layer_shed(void **state)
{
    (void)state;
    char plain[512], shared[512];
    gm_test_gen_arch(plain, sizeof plain, "lshed-plain", "qwen3moe", "24", k_shape4);
    const char *const sh[] = {"--layers", "4", "--dense-layers", "1", "--experts", "16", "--experts-used",
                              "4", "--shared-experts", "1", "--hidden", "256", "--ffn", "256",
                              "--expert-ffn", "128", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
                              NULL};
    gm_test_gen_arch(shared, sizeof shared, "lshed-shared", "glm4moe", "24", sh);
    const uint32_t n = 10;
    lever_run cfg = {.placement = GM_PLACE_EXPERTS, .n_prefill = 6};
    lever_out a, b, c, d, e2;
    run(plain, n, &cfg, &a);
    cfg.levers.layer_shed = 0.9f;
    run(plain, n, &cfg, &b);
    assert_int_equal(b.shed.layer_skips, 0);
    assert_true(max_diff(&a, &b, 0, n) == 0.0);

    cfg.levers.layer_shed = 0;
    run(shared, n, &cfg, &c);
    cfg.levers.layer_shed = 0.6f;
    run(shared, n, &cfg, &d);
    run(shared, n, &cfg, &e2);
    print_message("layer-shed 0.6: %llu of %u decode token-layers skipped; decode vs lossless %.3g\n",
                  (unsigned long long)d.shed.layer_skips, 3 * (n - 6), max_diff(&d, &c, 6, n));
    assert_true(d.shed.layer_skips > 0 && d.shed.layer_skips <= 3 * (n - 6));
    assert_true(max_diff(&d, &c, 0, 6) == 0.0); /* the prompt's call is not a decode */
    assert_true(max_diff(&d, &c, 6, n) > 1e-3);
    assert_true(max_diff(&d, &e2, 0, n) == 0.0);
    assert_int_equal(d.shed.layer_skips, e2.shed.layer_skips);
    free(a.logits), free(b.logits), free(c.logits), free(d.logits), free(e2.logits);
}

/* Keeper prestage reads ahead only what miss-shed keeps: the lookahead issues no more reads
 * than the keepers it was handed, and the filter drops some predicted misses. */
static void test_keepers_read_ahead(void **state)
{
    (void)state;
    char m[512];
    gm_test_gen_arch(m, sizeof m, "keepers", "qwen3moe", "25", k_shape4);
    const uint32_t n = 12;
    lever_run cfg = {.placement = GM_PLACE_EXPERTS, .n_prefill = 2, .arena_gb = "0.004",
                     .levers = {.miss_shed = 0.6f, .keepers = true}};
    lever_out k;
    run(m, n, &cfg, &k);
    print_message("keepers: %llu of %llu predicted misses kept over %llu predictions; %llu read ahead, %llu "
                  "adopted; %llu shed\n", (unsigned long long)k.shed.keeper_kept,
                  (unsigned long long)k.shed.keeper_misses, (unsigned long long)k.shed.keeper_calls,
                  (unsigned long long)k.st.la_issued, (unsigned long long)k.st.la_adopted,
                  (unsigned long long)k.shed.miss_shed);
    assert_true(k.shed.keeper_calls > 0);
    assert_true(k.shed.keeper_kept < k.shed.keeper_misses); /* the filter dropped some */
    assert_true(k.st.la_issued > 0);
    assert_true(k.st.la_issued <= k.shed.keeper_kept);      /* only keepers were read ahead */
    for (size_t i = 0; i < (size_t)n * k.vocab; i++)
        assert_true(isfinite(k.logits[i]));
    free(k.logits);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expert_cap_is_top_k),
        cmocka_unit_test(test_mass_and_miss_shed),
        cmocka_unit_test(test_miss_shed_keeps_resident),
        cmocka_unit_test(test_layer_shed),
        cmocka_unit_test(test_keepers_read_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
