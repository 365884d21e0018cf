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
 * (test_kernels_matmul).
 *
 * A generated gpt-oss (sliding window 16 on even layers, sinks) checks the window's ring: a
 * sliding-window layer keeps window - 1 + 256 positions (rounded to 16), fewer than the
 * context, reused in turn. 300 ids in a 300-token context (a ring of 272 rows that wraps) as a
 * prefill of 20 ids then 280 (attended in steps of 256 and 24) and one token at a time on 8 threads
 * give the same logits bit for bit, and their first 260 positions equal those of a 260-token
 * context, whose window layers keep every position (no ring).
 *
 * A generated qwen3next checks the Gated DeltaNet layers the same way (test_delta_paths). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genmodel.h"
#include "infer/engine.h"
#include "testutil.h"

#define N_TOK 300

/* Logits of n_tok ids in a context of n_tok: the first `first` ids in one call, the rest in
 * chunks of `chunk`. */
static float *logits_ctx(const char *model, int n_threads, uint32_t first, uint32_t chunk,
                         const int32_t *ids, uint32_t n_tok, uint32_t *n_vocab)
{
    gm_err err = {0};
    gm_engine_opts eo = {.n_threads = n_threads, .max_chunk = chunk, .placement = GM_PLACE_CPU};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    if (gm_engine_load(&e, model, &eo, &err) != 0)
        fail_msg("load: %s", err.msg);
    if (gm_fwd_create(&s, e, n_tok, GM_KV_F32, &err) != 0)
        fail_msg("session: %s", err.msg);
    const uint32_t V = gm_engine_n_vocab(e);
    float *out = malloc(sizeof(float) * V * n_tok);
    assert_non_null(out);
    for (uint32_t at = 0, n; at < n_tok; at += n) {
        n = at == 0 ? first : chunk;
        n = n_tok - at < n ? n_tok - at : n;
        if (gm_fwd_eval(s, ids + at, n, out + (size_t)at * V, true, &err) != 0)
            fail_msg("eval at %u: %s", at, err.msg);
    }
    gm_fwd_free(s);
    gm_engine_free(e);
    *n_vocab = V;
    return out;
}

static float *logits_of(const char *model, int n_threads, uint32_t chunk, const int32_t *ids,
                        uint32_t *n_vocab)
{
    return logits_ctx(model, n_threads, chunk, chunk, ids, N_TOK, n_vocab);
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
    gm_test_gen_model((int)(sizeof argv / sizeof argv[0]), argv);

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

/* The first position where a and b (n floats of rows of V) differ, or -1. */
static long first_diff(const float *a, const float *b, size_t n, uint32_t V)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0)
            return (long)(i / V);
    return -1;
}

static void test_window_ring(void **state)
{
    (void)state;
    char model[512];
    snprintf(model, sizeof model, "%s/window.gguf", gm_test_tmpdir());
    char *argv[] = {"--arch", "gpt-oss", "--layers", "2", "--experts", "4", "--experts-used", "2",
                    "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                    "--expert-ffn", "32", "--dense-type", "F32", "--expert-type", "F16",
                    "--vocab", "300", "--seed", "7", "-q", "-o", model};
    gm_test_gen_model((int)(sizeof argv / sizeof argv[0]), argv);
    int32_t ids[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        ids[i] = (int32_t)((i * 7919u + 13u) % 300u);
    uint32_t V1, V2, V3;
    /* 20 ids, then 280 in one call: attended in steps of 256 (positions 20..275, the ring's
     * whole span with the window of position 20) and 24 */
    float *ring_prefill = logits_ctx(model, 1, 20, 280, ids, N_TOK, &V1);
    float *ring_decode = logits_ctx(model, 8, 1, 1, ids, N_TOK, &V2);
    float *whole = logits_ctx(model, 1, 64, 64, ids, 260, &V3);
    assert_int_equal(V1, V2);
    assert_int_equal(V1, V3);
    long d = first_diff(ring_prefill, ring_decode, (size_t)V1 * N_TOK, V1);
    if (d >= 0)
        fail_msg("prefill and decode through the ring differ first at position %ld", d);
    d = first_diff(ring_prefill, whole, (size_t)V1 * 260, V1);
    if (d >= 0)
        fail_msg("the ring and the whole context differ first at position %ld", d);
    free(ring_prefill);
    free(ring_decode);
    free(whole);
    remove(model);
}

/* Gated DeltaNet layers keep a convolution window and a recurrent state between calls: MODEL's
 * logits for N_TOK ids are the same bit for bit as a prefill in chunks of 64 on one thread,
 * token by token on 2 threads (the value heads split between them) and in chunks of 7 (the
 * convolution reaches back into the previous chunk) on 3 threads. Returns the prefill's. */
static float *check_delta_chunks(const char *model, const int32_t *ids, uint32_t *V)
{
    uint32_t V2, V3;
    float *prefill = logits_ctx(model, 1, 64, 64, ids, N_TOK, V);
    float *decode = logits_ctx(model, 2, 1, 1, ids, N_TOK, &V2);
    float *sevens = logits_ctx(model, 3, 7, 7, ids, N_TOK, &V3);
    assert_int_equal(*V, V2);
    assert_int_equal(*V, V3);
    const size_t n = (size_t)*V * N_TOK;
    long d;
    if ((d = first_diff(prefill, decode, n, *V)) >= 0)
        fail_msg("%s: prefill and decode differ first at position %ld", model, d);
    if ((d = first_diff(prefill, sevens, n, *V)) >= 0)
        fail_msg("%s: chunks of 64 and of 7 differ first at position %ld", model, d);
    free(decode);
    free(sevens);
    return prefill;
}

/* A generated qwen3next (2 recurrent blocks and a full-attention one) and a generated qwen35moe
 * (3 and 1, beta and alpha as two tensors) across chunkings and threads (above), and the
 * qwen3next file of the same seed written with the older fused ssm_in layout (rows grouped per
 * key head, taken apart at load) gives the same logits bit for bit as the split layout. */
static void test_delta_paths(void **state)
{
    (void)state;
    char split_model[512], fused_model[512], q35_model[512];
    snprintf(split_model, sizeof split_model, "%s/delta.gguf", gm_test_tmpdir());
    snprintf(fused_model, sizeof fused_model, "%s/delta-fused.gguf", gm_test_tmpdir());
    snprintf(q35_model, sizeof q35_model, "%s/delta-q35.gguf", gm_test_tmpdir());
    char *argv[] = {"--arch", "qwen3next", "--hidden", "128", "--expert-ffn", "64",
                    "--dense-type", "F32", "--expert-type", "F16", "--vocab", "512",
                    "--seed", "11", "-q", "-o", split_model, "--ssm-in"};
    const int argc = (int)(sizeof argv / sizeof argv[0]);
    gm_test_gen_model(argc - 1, argv);
    argv[argc - 2] = fused_model;
    gm_test_gen_model(argc, argv);
    argv[1] = "qwen35moe";
    argv[argc - 2] = q35_model;
    gm_test_gen_model(argc - 1, argv);
    int32_t ids[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        ids[i] = (int32_t)((i * 4099u + 5u) % 512u);
    uint32_t V1, V4, V5;
    float *prefill = check_delta_chunks(split_model, ids, &V1);
    free(check_delta_chunks(q35_model, ids, &V5));
    float *fused = logits_ctx(fused_model, 1, 64, 64, ids, N_TOK, &V4);
    assert_int_equal(V1, V4);
    long d;
    if ((d = first_diff(prefill, fused, (size_t)V1 * N_TOK, V1)) >= 0)
        fail_msg("the split and the fused ssm_in layouts differ first at position %ld", d);
    free(prefill);
    free(fused);
    remove(split_model);
    remove(fused_model);
    remove(q35_model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_attention_paths_agree),
                                       cmocka_unit_test(test_window_ring),
                                       cmocka_unit_test(test_delta_paths)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
