/* The engine's attention paths agree bit for bit: a generated qwen3moe (2 kv heads, 8 query
 * heads of 64, F32 every-token weights) evaluates 300 token ids
 *  (1) as a prefill in chunks of 64 with one thread (items of several tokens, their positions
 *      in parts of 256 merged within the item),
 *  (2) one token at a time with one thread (a decode: one token per item), and
 *  (3) one token at a time with 8 threads, where a decode runs each part of 256 positions as an
 *      item of its own (the kv heads are fewer than the threads) and merges them after.
 * All three must give the same logits bit for bit: the attention kernel's result for a query does
 * not depend on how queries are grouped, positions are always cut into the same parts and merged
 * in the same order, and the products are the same function for a batch as for one row
 * (test_kernels_matmul). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "infer/engine.h"
#include "testutil.h"

#define N_TOK 300

static float *logits_of(const char *model, int n_threads, uint32_t chunk, const int32_t *ids,
                        uint32_t *n_vocab)
{
    gm_err err = {0};
    gm_engine_opts eo = {.n_threads = n_threads, .max_chunk = chunk, .placement = GM_PLACE_CPU};
    gm_engine *e = NULL;
    gm_session *s = NULL;
    if (gm_engine_load(&e, model, &eo, &err) != 0)
        fail_msg("load: %s", err.msg);
    if (gm_session_create(&s, e, N_TOK, GM_KV_F32, &err) != 0)
        fail_msg("session: %s", err.msg);
    const uint32_t V = gm_engine_n_vocab(e);
    float *out = malloc(sizeof(float) * V * N_TOK);
    assert_non_null(out);
    for (uint32_t at = 0; at < N_TOK; at += chunk) {
        const uint32_t n = N_TOK - at < chunk ? N_TOK - at : chunk;
        if (gm_session_eval(s, ids + at, n, out + (size_t)at * V, true, &err) != 0)
            fail_msg("eval at %u: %s", at, err.msg);
    }
    gm_session_free(s);
    gm_engine_free(e);
    *n_vocab = V;
    return out;
}

static void test_attention_paths_agree(void **state)
{
    (void)state;
    char model[512];
    snprintf(model, sizeof model, "%s/attn.gguf", gm_test_tmpdir());
    char *argv[] = {"--arch", "qwen3moe", "--layers", "2", "--experts", "8", "--experts-used", "2",
                    "--hidden", "128", "--heads", "8", "--kv-heads", "2", "--head-dim", "64",
                    "--expert-ffn", "64", "--dense-type", "F32", "--expert-type", "F16",
                    "--vocab", "512", "--seed", "5", "-q", "-o", model};
    gm_gen_opts go;
    gm_gen_opts_init(&go);
    gm_err err = {0};
    assert_int_equal(gm_gen_parse_args(&go, (int)(sizeof argv / sizeof argv[0]), argv, &err),
                     GM_GEN_ARGS_RUN);
    if (gm_gen_run(&go, NULL, &err) != 0)
        fail_msg("gen: %s", err.msg);

    int32_t ids[N_TOK];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_TOK; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        ids[i] = (int32_t)((x * 2685821657736338717ull >> 33) % 512);
    }
    uint32_t V1, V2, V3;
    float *prefill = logits_of(model, 1, 64, ids, &V1);
    float *decode = logits_of(model, 1, 1, ids, &V2);
    float *split = logits_of(model, 8, 1, ids, &V3);
    assert_int_equal(V1, V2);
    assert_int_equal(V1, V3);
    const size_t n = (size_t)V1 * N_TOK;
    if (memcmp(prefill, decode, n * sizeof(float)) != 0) {
        size_t i = 0;
        while (prefill[i] == decode[i])
            i++;
        fail_msg("prefill and decode differ first at position %zu (%g vs %g)", i / V1,
                 (double)prefill[i], (double)decode[i]);
    }
    if (memcmp(split, decode, n * sizeof(float)) != 0) {
        size_t i = 0;
        while (split[i] == decode[i])
            i++;
        fail_msg("8-thread and 1-thread decodes differ first at position %zu (%g vs %g)", i / V1,
                 (double)split[i], (double)decode[i]);
    }
    free(prefill);
    free(decode);
    free(split);
    remove(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_attention_paths_agree)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
