/* Generated models keep routing tokens to different experts in every layer, checked through the
 * engine: a 12-layer qwen3moe of 32 experts (top-4) written by the generator decodes a seeded
 * random token sequence with the routing trace on; in the last layer as in the first,
 * consecutive tokens must share few experts (mean Jaccard overlap under 0.5) and the sequence
 * must use most experts. With embeddings at 1/sqrt(hidden) every token routed alike in the deep
 * layers and a streaming benchmark measured nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "genmodel.h"
#include "infer/engine.h"
#include "testutil.h"

#define N_LAYERS 12
#define N_EXPERTS 32
#define K 4
#define N_TOK 40

static void test_deep_routing(void **state)
{
    (void)state;
    char model[512], trace[512];
    snprintf(model, sizeof model, "%s/routing.gguf", gm_test_tmpdir());
    snprintf(trace, sizeof trace, "%s/routing.trace", gm_test_tmpdir());
    char *argv[] = {"--arch", "qwen3moe", "--layers", "12", "--experts", "32", "--experts-used", "4",
                    "--expert-type", "Q4_K", "--seed", "3", "-q", "-o", model};
    gm_test_gen_model((int)(sizeof argv / sizeof argv[0]), argv);
    gm_err err = {0};

    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.trace_path = trace;
    so.buffered = true; /* the temp dir may be tmpfs */
    gm_test_arena("1");
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = 1, .placement = GM_PLACE_EXPERTS, .stream = &so};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    if (gm_engine_load(&e, model, &eo, &err) != 0)
        fail_msg("load: %s", err.msg);
    gm_test_arena(NULL);
    assert_int_equal(gm_fwd_create(&s, e, N_TOK + 1, GM_KV_F16, &err), 0);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    uint32_t V = gm_engine_n_vocab(e);
    for (int i = 0; i < N_TOK; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        int32_t tok = (int32_t)((x * 2685821657736338717ull >> 33) % V);
        assert_int_equal(gm_fwd_eval(s, &tok, 1, NULL, false, &err), 0);
    }
    gm_fwd_free(s);
    gm_engine_free(e); /* closes the trace */

    static int ids[N_TOK][N_LAYERS][K];
    FILE *f = fopen(trace, "r");
    assert_non_null(f);
    int lines = 0, t, l;
    while (fscanf(f, "%d %d", &t, &l) == 2) {
        assert_true(t >= 0 && t < N_TOK && l >= 0 && l < N_LAYERS);
        for (int j = 0; j < K; j++)
            assert_int_equal(fscanf(f, "%d", &ids[t][l][j]), 1);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, N_TOK * N_LAYERS);
    const int layers[] = {0, N_LAYERS / 2, N_LAYERS - 1};
    for (size_t li = 0; li < 3; li++) {
        l = layers[li];
        double jac = 0;
        int used[N_EXPERTS] = {0}, n_used = 0;
        for (t = 0; t < N_TOK; t++) {
            for (int j = 0; j < K; j++)
                if (!used[ids[t][l][j]]++)
                    n_used++;
            if (t == 0)
                continue;
            int common = 0;
            for (int a = 0; a < K; a++)
                for (int b = 0; b < K; b++)
                    common += ids[t][l][a] == ids[t - 1][l][b];
            jac += (double)common / (2 * K - common);
        }
        jac /= N_TOK - 1;
        print_message("layer %d: mean Jaccard of consecutive tokens %.3f, %d of %d experts used\n", l,
                      jac, n_used, N_EXPERTS);
        assert_true(jac < 0.5);
        assert_true(n_used >= N_EXPERTS / 2);
    }
    unlink(model);
    unlink(trace);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_deep_routing)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
