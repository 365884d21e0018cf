/* The forward pass against independent references: Hugging Face transformers (float32) logits
 * of the fixture models, and llama.cpp's logits on the same quantized files.
 *
 * Checks, per the fixtures' README: (1) prefill logits of prompt.ids within 1e-3 x max(1,
 * max|logit|) of logits.f32 with 100% top-1 agreement; (2) teacher-forced decode: feeding
 * greedy.ids one token at a time through the KV cache reproduces greedy-logits.f32; (3) free
 * greedy decoding reproduces greedy.ids; (4) prefill in chunks of any size computes the same
 * function; (5) quantized files agree with llama.cpp within 5e-2 x max(1, max|logit|), and at position
 * 0 (no attention arithmetic) within 1e-3; (6) Qwen3.5 MoE (no transformers fixture) agrees
 * with llama.cpp on a float file within 1e-2 x max(1, max|logit|) at every position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "infer/engine.h"
#include "model/model.h"
#include "testutil.h"

typedef struct ref {
    const char *model;     /* relative to the fixture cache, or committed when committed = 1 */
    int model_committed;
    const char *prefix;    /* "qwen3moe/" or "trained-qwen3moe/ref0." */
    int refs_committed;
    uint32_t n_vocab;
} ref;

static const ref k_float_refs[] = {
    {"qwen3moe/model-bf16.gguf", 0, "qwen3moe/", 0, 2000},
    {"mixtral/model-bf16.gguf", 0, "mixtral/", 0, 2000},
    {"glm4moe/model-bf16.gguf", 0, "glm4moe/", 0, 2000},
    {"minimax-m2/model-bf16.gguf", 0, "minimax-m2/", 0, 2000},
    {"deepseek-v3/model-bf16.gguf", 0, "deepseek-v3/", 0, 2000},
    {"gpt-oss/model-bf16.gguf", 0, "gpt-oss/", 0, 2000},
    {"qwen3next/model-bf16.gguf", 0, "qwen3next/", 0, 2000},
    {"trained-qwen3moe/model-bf16.gguf", 0, "trained-qwen3moe/ref0.", 1, 1014},
    {"trained-qwen3moe/model-bf16.gguf", 0, "trained-qwen3moe/ref1.", 1, 1014},
};

/* Path of a fixture, or NULL (a skip outside CI, a failure under CI). */
static const char *path_of(const char *rel, int committed, char *buf, size_t len)
{
    const char *p = committed ? gm_fixture(rel) : gm_fixture_cached(rel);
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("fixture %s missing: run scripts/fetch-fixtures.sh", rel);
        gm_test_skipped(rel);
        return NULL;
    }
    snprintf(buf, len, "%s", p);
    return buf;
}

static int32_t *read_ids(const char *path, uint32_t *n)
{
    int32_t *ids = gm_read_ids(path, n);
    assert_non_null(ids);
    return ids;
}

static float *read_f32(const char *path, size_t *n)
{
    size_t len;
    float *f = gm_read_file(path, &len);
    assert_non_null(f);
    *n = len / sizeof(float);
    return f;
}

static uint32_t argmax(const float *v, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

/* Max |a - b| over a row, and the reference's largest |logit|. */
static double row_diff(const float *a, const float *b, uint32_t n, double *max_ref)
{
    double d = 0;
    for (uint32_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (x > d)
            d = x;
        if (fabs(b[i]) > *max_ref)
            *max_ref = fabs(b[i]);
    }
    return d;
}

static gm_engine *load(const char *path, uint32_t chunk)
{
    gm_engine *e = NULL;
    gm_err err = {0};
    gm_engine_opts o = {.n_threads = 2, .max_chunk = chunk};
    if (gm_engine_load(&e, path, &o, &err) != 0)
        fail_msg("load %s: %s", path, err.msg);
    return e;
}

/* Prefill of the prompt in chunks of `chunk`, all logits. */
static float *prefill_logits(gm_engine *e, const int32_t *ids, uint32_t n, uint32_t chunk, gm_fwd **keep)
{
    gm_fwd *s = NULL;
    gm_err err = {0};
    assert_int_equal(gm_fwd_create(&s, e, n + 64, GM_KV_F32, &err), 0);
    uint32_t V = gm_engine_n_vocab(e);
    float *out = malloc((size_t)n * V * sizeof *out);
    for (uint32_t at = 0; at < n; at += chunk) {
        uint32_t m = n - at < chunk ? n - at : chunk;
        if (gm_fwd_eval(s, ids + at, m, out + (size_t)at * V, true, &err) != 0)
            fail_msg("eval: %s", err.msg);
    }
    if (keep)
        *keep = s;
    else
        gm_fwd_free(s);
    return out;
}

static void check_float_ref(const ref *r)
{
    char mp[4096], pp[4096], lp[4096], gp[4096], glp[4096], rel[512];
    if (!path_of(r->model, r->model_committed, mp, sizeof mp))
        return;
    snprintf(rel, sizeof rel, "%sprompt.ids", r->prefix);
    if (!path_of(rel, r->refs_committed, pp, sizeof pp))
        return;
    snprintf(rel, sizeof rel, "%slogits.f32", r->prefix);
    path_of(rel, r->refs_committed, lp, sizeof lp);
    snprintf(rel, sizeof rel, "%sgreedy.ids", r->prefix);
    path_of(rel, r->refs_committed, gp, sizeof gp);
    snprintf(rel, sizeof rel, "%sgreedy-logits.f32", r->prefix);
    path_of(rel, r->refs_committed, glp, sizeof glp);

    uint32_t n, n_greedy;
    int32_t *ids = read_ids(pp, &n);
    int32_t *greedy = read_ids(gp, &n_greedy);
    size_t n_ref, n_gref;
    float *ref_logits = read_f32(lp, &n_ref);
    float *ref_greedy = read_f32(glp, &n_gref);
    const uint32_t V = r->n_vocab;
    assert_int_equal(n_ref, (size_t)n * V);
    assert_int_equal(n_gref, (size_t)n_greedy * V);

    gm_engine *e = load(mp, 64);
    assert_int_equal(gm_engine_n_vocab(e), V);
    gm_fwd *s = NULL;
    float *got = prefill_logits(e, ids, n, 64, &s);
    /* (1) prefill */
    double worst = 0, max_ref = 0;
    for (uint32_t t = 0; t < n; t++) {
        double d = row_diff(got + (size_t)t * V, ref_logits + (size_t)t * V, V, &max_ref);
        if (d > worst)
            worst = d;
        assert_int_equal(argmax(got + (size_t)t * V, V), argmax(ref_logits + (size_t)t * V, V));
    }
    double tol = 1e-3 * (max_ref > 1 ? max_ref : 1);
    print_message("%s%s: prefill max|dlogit| %.2e (tolerance %.2e)\n", r->prefix, "", worst, tol);
    assert_true(worst <= tol);

    /* (2) teacher-forced decode through the KV cache */
    float *row = malloc(V * sizeof *row);
    gm_err err = {0};
    worst = 0;
    /* row i of greedy-logits is the distribution greedy[i] is the argmax of: the logits after
     * prompt + greedy[0..i-1]; row 0 is the prompt's last row */
    for (uint32_t i = 0; i < n_greedy; i++) {
        const float *mine = i == 0 ? got + (size_t)(n - 1) * V : row;
        double d = row_diff(mine, ref_greedy + (size_t)i * V, V, &max_ref);
        if (d > worst)
            worst = d;
        assert_int_equal(argmax(mine, V), (uint32_t)greedy[i]);
        if (i + 1 < n_greedy && gm_fwd_eval(s, &greedy[i], 1, row, false, &err) != 0)
            fail_msg("decode: %s", err.msg);
    }
    print_message("%s: teacher-forced decode max|dlogit| %.2e\n", r->prefix, worst);
    assert_true(worst <= 1e-3 * (max_ref > 1 ? max_ref : 1));

    /* (3) free-running greedy from a fresh session equals greedy.ids */
    gm_fwd_reset(s);
    for (uint32_t at = 0; at < n; at += 64) {
        uint32_t m = n - at < 64 ? n - at : 64;
        assert_int_equal(gm_fwd_eval(s, ids + at, m, row, false, &err), 0);
    }
    for (uint32_t i = 0; i < n_greedy; i++) {
        int32_t tok = (int32_t)argmax(row, V);
        assert_int_equal(tok, greedy[i]);
        assert_int_equal(gm_fwd_eval(s, &tok, 1, row, false, &err), 0);
    }

    /* (4) chunk sizes 1, 5 and 7 compute the same function (reductions run in the same order
     * per token, so the results agree to float rounding) */
    static const uint32_t chunks[] = {1, 5, 7};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        float *other = prefill_logits(e, ids, n, chunks[c], NULL);
        double dd = 0, mr = 0;
        for (uint32_t t = 0; t < n; t++) {
            double d = row_diff(other + (size_t)t * V, got + (size_t)t * V, V, &mr);
            if (d > dd)
                dd = d;
        }
        assert_true(dd <= 1e-4);
        free(other);
    }
    free(row);
    free(got);
    gm_fwd_free(s);
    gm_engine_free(e);
    free(ids);
    free(greedy);
    free(ref_logits);
    free(ref_greedy);
}

static void test_float_references(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_float_refs / sizeof k_float_refs[0]; i++)
        check_float_ref(&k_float_refs[i]);
}

/* The 8-bit KV cache (Q8_0 blocks, --kv-bits 8) on the trained model against the transformers
 * references: every prompt position's top-1, the greedy continuation (greedy.ids), and the
 * typical position within the fixtures' 5e-2 bound for 16-bit KV caches (single positions may
 * move further where a routing decision is close: measured 0.56 at one position of ref0, where
 * an f16 cache moves 0.0015). */
static void test_kv_q8_0(void **state)
{
    (void)state;
    char mp[4096];
    if (!path_of("trained-qwen3moe/model-bf16.gguf", 0, mp, sizeof mp))
        return;
    gm_engine *e = load(mp, 64);
    const uint32_t V = 1014;
    for (int r = 0; r < 2; r++) {
        char rel[128];
        uint32_t n, n_greedy;
        snprintf(rel, sizeof rel, "trained-qwen3moe/ref%d.prompt.ids", r);
        int32_t *ids = read_ids(gm_fixture(rel), &n);
        snprintf(rel, sizeof rel, "trained-qwen3moe/ref%d.greedy.ids", r);
        int32_t *greedy = read_ids(gm_fixture(rel), &n_greedy);
        snprintf(rel, sizeof rel, "trained-qwen3moe/ref%d.logits.f32", r);
        size_t n_ref;
        float *want = read_f32(gm_fixture(rel), &n_ref);
        assert_int_equal(n_ref, (size_t)n * V);
        gm_fwd *s = NULL;
        gm_err err = {0};
        assert_int_equal(gm_fwd_create(&s, e, n + n_greedy, GM_KV_Q8_0, &err), 0);
        float *got = malloc((size_t)n * V * sizeof *got);
        if (gm_fwd_eval(s, ids, n, got, true, &err) != 0)
            fail_msg("eval: %s", err.msg);
        double d[64], max_ref = 0;
        uint32_t within = 0;
        for (uint32_t t = 0; t < n; t++) {
            d[t] = row_diff(got + (size_t)t * V, want + (size_t)t * V, V, &max_ref);
            within += d[t] <= 5e-2;
            assert_int_equal(argmax(got + (size_t)t * V, V), argmax(want + (size_t)t * V, V));
        }
        print_message("ref%d, q8_0 KV: %u/%u positions within 5e-2\n", r, within, n);
        assert_true(within * 2 > n);
        float *row = got + (size_t)(n - 1) * V;
        for (uint32_t i = 0; i < n_greedy; i++) {
            int32_t tok = (int32_t)argmax(row, V);
            assert_int_equal(tok, greedy[i]);
            if (i + 1 < n_greedy && gm_fwd_eval(s, &tok, 1, row, false, &err) != 0)
                fail_msg("decode: %s", err.msg);
        }
        gm_fwd_free(s);
        free(got);
        free(want);
        free(ids);
        free(greedy);
    }
    gm_engine_free(e);
}

/* Top-1 agreement over the positions where the reference's margin between its first and second
 * token exceeds twice our difference d[t] there (a closer race is a near-tie either engine may
 * call); the number of those positions in *counted. */
static uint32_t decisive_top1(const float *got, const float *want, uint32_t n, uint32_t V, const double *d,
                              uint32_t *counted)
{
    uint32_t agree = 0;
    *counted = 0;
    for (uint32_t t = 0; t < n; t++) {
        const float *rr = want + (size_t)t * V;
        uint32_t top = argmax(rr, V);
        float second = -INFINITY;
        for (uint32_t i = 0; i < V; i++)
            if (i != top && rr[i] > second)
                second = rr[i];
        if (rr[top] - second > 2 * d[t]) {
            (*counted)++;
            agree += argmax(got + (size_t)t * V, V) == top;
        }
    }
    return agree;
}

/* Quantized files against llama.cpp on the same file. llama.cpp keeps its KV cache in 16 bits
 * and its CPU flash attention (on by default) rounds Q to f16 and sums softmax(QK)V in an f16
 * buffer; emulating that with our f16 KV cache reproduces its first positions to ~1e-6, yet no
 * attention arithmetic meets a per-position bound: this random-weight quantized model is
 * chaotic (a 1e-6 relative change of our own attention scale moves single positions by up to
 * 2.5 through an int8 rounding flip in a quantized activation, carried on through K/V), so the
 * kernels' last bits decide individual positions. Checked: the median position is within
 * 5e-2 x max(1, max|logit|); at least 90% of positions are; top-1 agrees on at least 95% of
 * the positions where llama.cpp's top1-top2 gap exceeds twice our difference there (a closer
 * race is a near-tie that either engine may call). */
static void test_quantized_vs_llamacpp(void **state)
{
    (void)state;
    static const char *types[] = {"q8_0", "q4_k_m", "q2_k", "iq4_xs"};
    char mp[4096], pp[4096], lp[4096], rel[256];
    if (!path_of("qwen3moe/prompt.ids", 0, pp, sizeof pp))
        return;
    uint32_t n;
    int32_t *ids = read_ids(pp, &n);
    const uint32_t V = 2000;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        snprintf(rel, sizeof rel, "qwen3moe/model-%s.gguf", types[ti]);
        if (!path_of(rel, 0, mp, sizeof mp))
            continue;
        snprintf(rel, sizeof rel, "qwen3moe/llamacpp-logits-%s.f32", types[ti]);
        path_of(rel, 0, lp, sizeof lp);
        size_t n_ref;
        float *ref_logits = read_f32(lp, &n_ref);
        assert_int_equal(n_ref, (size_t)n * V);
        gm_engine *e = load(mp, 64);
        float *got = prefill_logits(e, ids, n, 64, NULL);
        double max_ref = 0, d[256];
        for (uint32_t t = 0; t < n; t++)
            d[t] = row_diff(got + (size_t)t * V, ref_logits + (size_t)t * V, V, &max_ref);
        double tol = 5e-2 * (max_ref > 1 ? max_ref : 1);
        uint32_t within = 0, counted = 0, agree = 0;
        double sorted[256];
        memcpy(sorted, d, n * sizeof *d);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = i + 1; j < n; j++)
                if (sorted[j] < sorted[i]) {
                    double x = sorted[i];
                    sorted[i] = sorted[j];
                    sorted[j] = x;
                }
        for (uint32_t t = 0; t < n; t++)
            within += d[t] <= tol;
        agree = decisive_top1(got, ref_logits, n, V, d, &counted);
        print_message("%s vs llama.cpp: median max|dlogit| %.3f, worst %.3f (tolerance %.3f), "
                      "%u/%u positions within, top-1 %u/%u decisive positions\n",
                      types[ti], sorted[n / 2], sorted[n - 1], tol, within, n, agree, counted);
        assert_true(sorted[n / 2] <= tol);
        assert_true(within * 10 >= n * 9);
        assert_true(agree * 100 >= counted * 95);

        /* Position 0 attends only to itself, so no attention arithmetic is involved there: with
         * llama.cpp's 16-bit V (our f16 cache) it must agree to float rounding. Any difference in
         * what is computed (a weight type's dot product, the embedding lookup, the norms' scale
         * rounding that decides an int8 activation at an exact .5) shows up here, far above 1e-3. */
        gm_fwd *s0 = NULL;
        gm_err err = {0};
        float *row0 = malloc((size_t)V * sizeof *row0);
        assert_int_equal(gm_fwd_create(&s0, e, 8, GM_KV_F16, &err), 0);
        if (gm_fwd_eval(s0, ids, 1, row0, false, &err) != 0)
            fail_msg("eval: %s", err.msg);
        double mr0 = 0, d0 = row_diff(row0, ref_logits, V, &mr0);
        print_message("%s vs llama.cpp: position 0 (f16 KV) max|dlogit| %.2e\n", types[ti], d0);
        assert_true(d0 <= 1e-3);
        gm_fwd_free(s0);
        free(row0);
        free(got);
        free(ref_logits);
        gm_engine_free(e);
    }
    free(ids);
}

/* Qwen3.5 MoE against llama.cpp (tests/fixtures/llamacpp-qwen35moe: a generated 4-block file
 * with F16 experts and F32 everything else, and llama.cpp's logits for it). The file's layout
 * facts are what this checks: beta and alpha as two tensors, value head h reading key head
 * h % n_k (the converter's tiled order; h / (n_v / n_k), qwen3next's order, is off by 1.3 at
 * the median position), the shared expert's gate as a vector. Float weights leave only
 * llama.cpp's 16-bit rounding of activations and of its KV cache between the two (about 8e-4
 * here), so every position is held to 1e-2 x max(1, max|logit|), prefilled in one chunk and
 * in chunks of 5, and top-1 agrees wherever llama.cpp's own margin is not a tie. */
/* A float file's logits against llama.cpp's (tests/fixtures/DIR: model-f16.gguf, prompt.ids,
 * llamacpp-logits.f32), prefilled in one chunk and in chunks of 5: every position within
 * 1e-2 x max(1, max|logit|), top-1 equal wherever llama.cpp's own margin is not a tie. */
static void check_vs_llamacpp(const char *dir)
{
    char mp[4096], pp[4096], lp[4096], rel[256];
    snprintf(rel, sizeof rel, "%s/model-f16.gguf", dir);
    if (!path_of(rel, 1, mp, sizeof mp))
        return;
    snprintf(rel, sizeof rel, "%s/prompt.ids", dir);
    if (!path_of(rel, 1, pp, sizeof pp))
        return;
    snprintf(rel, sizeof rel, "%s/llamacpp-logits.f32", dir);
    if (!path_of(rel, 1, lp, sizeof lp))
        return;
    uint32_t n;
    int32_t *ids = read_ids(pp, &n);
    size_t n_ref;
    float *ref_logits = read_f32(lp, &n_ref);
    gm_engine *e = load(mp, 64);
    const uint32_t V = gm_engine_n_vocab(e);
    assert_int_equal(n_ref, (size_t)n * V);
    const uint32_t chunks[] = {64, 5};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        float *got = prefill_logits(e, ids, n, chunks[c], NULL);
        double max_ref = 0, worst = 0;
        uint32_t worst_at = 0, agree = 0, counted = 0;
        double d[256];
        for (uint32_t t = 0; t < n; t++) {
            d[t] = row_diff(got + (size_t)t * V, ref_logits + (size_t)t * V, V, &max_ref);
            if (d[t] > worst)
                worst = d[t], worst_at = t;
        }
        const double tol = 1e-2 * (max_ref > 1 ? max_ref : 1);
        agree = decisive_top1(got, ref_logits, n, V, d, &counted);
        print_message("%s vs llama.cpp, chunks of %u: worst max|dlogit| %.2e at position "
                      "%u (tolerance %.3f), top-1 %u/%u\n",
                      dir, chunks[c], worst, worst_at, tol, agree, counted);
        assert_true(worst <= tol);
        assert_true(counted * 10 >= n * 9);
        assert_int_equal(agree, counted);
        free(got);
    }
    gm_engine_free(e);
    free(ref_logits);
    free(ids);
}

static void test_qwen35moe_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-qwen35moe");
}

/* ERNIE 4.5 MoE against llama.cpp (tests/fixtures/llamacpp-ernie45moe: a generated 3-block file,
 * one dense block then two MoE blocks of 8 experts top-2 and a shared expert, F16 experts and
 * F32 everything else). What it pins down: adjacent-pair RoPE (NeoX pairs are off by 1.86 at
 * the worst position), the softmax router's selection bias exp_probs_b (without it: 1.12),
 * the renormalised top-k, the ungated shared expert. gmlx is within 1.5e-3 of llama.cpp's
 * flash-attention logits, as close as llama.cpp's other attention path (1.5e-3). */
static void test_ernie45moe_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-ernie45moe");
}

/* Hy3 (hy_v3) against llama.cpp (tests/fixtures/llamacpp-hyv3: a generated 3-block file, one
 * dense block then two MoE blocks of 8 experts top-2 and a shared expert, F16 experts and F32
 * everything else). What it pins down: the sigmoid router's selection bias, named exp_probs_b
 * without the .bias suffix (without it: 2.15 at the worst position), the renormalisation the
 * file's expert_weights_norm asks for (without it: 1.67), the scale, per-head q/k norms. gmlx
 * is within 2.1e-3, as close as llama.cpp's other attention path (2.4e-3). */
static void test_hyv3_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-hyv3");
}

/* Hunyuan-A13B (hunyuan-moe) against llama.cpp (tests/fixtures/llamacpp-hunyuanmoe: a generated
 * 3-block file of 8 experts top-2 and a shared expert in every block, F16 experts and F32
 * everything else). What it pins down: the q/k RMSNorm applied to the rotated q/k (before
 * RoPE, as Qwen3 does it, the worst position is 0.58 off), the renormalised softmax top-k, the
 * ungated shared expert. gmlx is within 1.5e-3 (llama.cpp's two attention paths: 1.7e-3). */
static void test_hunyuanmoe_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-hunyuanmoe");
}

/* Bad input: a token id outside the vocabulary, a full context, too many tokens per call. */
/* GLM-5.2 (glm-dsa) against llama.cpp (tests/fixtures/llamacpp-glmdsa: a generated 4-block file,
 * one dense block then three MoE blocks of 4 experts top-2 and a shared expert, latent attention,
 * a lightning indexer of 16 heads of 64 choosing 16 positions, block 3 reusing block 2's choice;
 * F16 experts and F32 everything else). What it pins down: the indexer's choice from the 17th
 * position on (attending every position instead is 2.3 off with 10 top-1 changes), its RoPE,
 * LayerNorm and Hadamard rotation, the shared blocks, the sigmoid router with its selection
 * bias. gmlx is within 1.7e-3 of llama.cpp's flash-attention logits, as close as llama.cpp's
 * other attention path (2.7e-3). */
static void test_glmdsa_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-glmdsa");
}

/* MiniMax-M3 (minimax-m3) against llama.cpp's MiniMax sparse attention (flash attention on;
 * tests/fixtures/llamacpp-minimaxm3: a generated 3-block file, one dense block then two MoE blocks
 * of 4 experts top-2 and a shared expert, an indexer head per kv head choosing 3 blocks of 4
 * positions, the latest always; F16 experts and F32 everything else). What it pins down: the
 * blocks each kv head's queries attend from the 13th position on (attending every position, as
 * llama.cpp does with flash attention off, is 2.8 off with 13 top-1 changes), the indexer's
 * RMSNorms and RoPE, per-head q/k norms, the clamped SwiGLU of every FFN, the sigmoid router.
 * gmlx is within 1.8e-3. */
static void test_minimaxm3_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-minimaxm3");
}

/* Hy4 (hy_v4) against llama.cpp (tests/fixtures/llamacpp-hyv4: a generated 4-block file, one
 * dense block then three MoE blocks of 4 experts top-2 and a shared expert, on 4 residual
 * streams; a lightning indexer of 16 heads choosing 16 positions, block 3 reusing block 2's
 * choice; YaRN scaling by 8; F16 experts and F32 everything else). What it pins down: the
 * hyper-connections (streams mixed into each block's input and weighted back out, the output
 * head's mixing), the sink logit of each head (without: 1.02 off), the sigmoid gate of the heads'
 * values (without: 1.39), the routed experts' clamped SwiGLU (without: 1.84), the indexer's
 * rotation of the last n_rot dims of its heads (of the first, as GLM-5.2's: 1.41), YaRN as
 * llama.cpp's hy_v4 applies it (DeepSeek's mscale^2 instead: 1.04). gmlx is within 9.3e-4 of
 * llama.cpp's flash-attention logits (its other attention path: 1.2e-3). */
static void test_hyv4_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-hyv4");
}

/* DeepSeek-V4 (deepseek4) against llama.cpp (tests/fixtures/llamacpp-deepseek4: a generated 4-block
 * file on 4 residual streams mixed by 20 Sinkhorn iterations; 2 heads of 128 (32 rotated) with
 * sinks and a sliding window of 8, an output of 2 groups of rank 32; block 0 routed by token id,
 * the others by sqrt-softplus scores, 4 experts top-2 and a shared expert, SwiGLUs clamped at 1;
 * block 2 CSA (an indexer of 16 heads of 64 choosing 8 compressed rows), block 3 HCA; F16 experts
 * and F32 everything else; 160 positions, so that HCA's first window completes). What it pins
 * down: the compressed rows (without them: 0.93 off), the rotation of the heads' results back
 * (without: 1.62), Sinkhorn (one iteration instead of 20: 0.59), hash routing (by score instead:
 * 1.51), the shared expert's clamp (without: 2.32), sqrt-softplus (sigmoid: 0.56). gmlx is within
 * 9.6e-4 of llama.cpp's flash-attention logits (its other attention path: 1.1e-3). The indexer has
 * 16 heads so that no two rows score exactly 0 at the top-k boundary: such ties go to the lower
 * window here and wherever llama.cpp's partial sort puts them there (with 4 heads, a file of this
 * shape was 0.34 off at one position for that reason). */
static void test_deepseek4_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-deepseek4");
}

/* Kimi-K3 (kimi-k3) against llama.cpp (tests/fixtures/llamacpp-kimik3: a generated 4-block file,
 * KDA linear attention in blocks 0 and 2, latent attention in 1 and 3, one dense block then three
 * MoE blocks of 4 latent experts top-2 and a shared expert, a checkpoint of cross-layer residual
 * attention every 2 blocks; F16 experts and F32 everything else). What it pins down: the
 * residual attention's mixes (without them: 5.0 off), KDA's decay per key channel (per head: 3.8)
 * and its lower bound (without: 3.7), the latent MoE's norm (without: 3.5), situ (SwiGLU
 * instead: 3.7), latent attention without RoPE (with: 1.2). gmlx is within 3.0e-3 of llama.cpp's
 * flash-attention logits (its other attention path: 4.1e-3). */
static void test_kimik3_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-kimik3");
}

/* qwen4exp against llama.cpp (tests/fixtures/llamacpp-qwen4exp: a generated 4-block file,
 * Gated DeltaNet in blocks 0 and 2, full attention in 1 and 3 with QSA choosing 8 positions of
 * whole blocks of 4 besides the tail, 4 residual streams of low-rank hyper-connections, the
 * n-gram hash embedding on block 0 (n-grams of 3, 2 heads each, a kernel of 4; the prompt's
 * end-of-text token at position 5 cuts the n-grams after it), 4 experts top-2 and a gated shared
 * expert; F16 experts and F32 everything else). What it pins down: the n-gram embedding
 * (without it: 0.94 off; without its convolution: 0.67; without the cut at end-of-text: 0.44),
 * the Gated DeltaNet's sigmoid output gate (SiLU: 0.80) and tiled value heads (0.90), the
 * hyper-connections' injection weights (all 1: 0.21), QSA (dense attention instead: 0.16) and
 * its choice among equal scores as llama.cpp's top-k makes it (ties to the lower position: 0.14).
 * gmlx is within 1.2e-4 of llama.cpp's flash-attention logits. */
static void test_qwen4exp_vs_llamacpp(void **state)
{
    (void)state;
    check_vs_llamacpp("llamacpp-qwen4exp");
}

static void test_eval_errors(void **state)
{
    (void)state;
    gm_engine *e = load(gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"), 8);
    gm_fwd *s = NULL;
    gm_err err = {0};
    assert_int_equal(gm_fwd_create(&s, e, 4, GM_KV_F16, &err), 0);
    int32_t bad = 5000, ok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_int_equal(gm_fwd_eval(s, &bad, 1, NULL, false, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    gm_err_clear(&err);
    assert_int_equal(gm_fwd_eval(s, ok, 9, NULL, false, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_fwd_eval(s, ok, 4, NULL, false, &err), 0);
    assert_int_equal(gm_fwd_eval(s, ok, 1, NULL, false, &err), GM_ERANGE);
    assert_non_null(strstr(err.msg, "context is full"));
    gm_fwd_free(s);
    gm_engine_free(e);

}

/* `gmlx validate` calls a file runnable exactly when the engine loads it: for every fixture
 * family the model description's verdict and the engine's agree (every one runs now; a family
 * gmlx describes but does not run is refused by both: test_engine_load). */
static void check_runnable(const char *rel, const char *p)
{
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, p, &err), 0);
    gm_model_desc m;
    assert_int_equal(gm_model_describe(g, &m, &err), 0);
    const bool runnable = m.runnable;
    gm_model_desc_free(&m);
    gm_gguf_close(g);
    gm_engine *x = NULL;
    gm_engine_opts o = {.n_threads = 1, .max_chunk = 8};
    const int rc = gm_engine_load(&x, p, &o, &err);
    print_message("%s: %s\n", rel, rc == 0 ? "runs" : err.msg);
    assert_int_equal(rc == 0, runnable);
    assert_int_equal(rc, 0);
    gm_engine_free(x);
}

static void test_runnable_matches_engine(void **state)
{
    (void)state;
    static const char *const models[] = {
        "qwen3moe/model-bf16.gguf", "deepseek-v3/model-bf16.gguf", "gpt-oss/model-bf16.gguf",
        "glm4moe/model-bf16.gguf",  "mixtral/model-bf16.gguf",     "qwen3next/model-bf16.gguf",
        "minimax-m2/model-bf16.gguf",
    };
    char p[4096];
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (path_of(models[i], 0, p, sizeof p))
            check_runnable(models[i], p);
    if (path_of("llamacpp-qwen35moe/model-f16.gguf", 1, p, sizeof p))
        check_runnable("llamacpp-qwen35moe/model-f16.gguf", p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_references),
        cmocka_unit_test(test_quantized_vs_llamacpp),
        cmocka_unit_test(test_qwen35moe_vs_llamacpp),
        cmocka_unit_test(test_ernie45moe_vs_llamacpp),
        cmocka_unit_test(test_hyv3_vs_llamacpp),
        cmocka_unit_test(test_hunyuanmoe_vs_llamacpp),
        cmocka_unit_test(test_glmdsa_vs_llamacpp),
        cmocka_unit_test(test_minimaxm3_vs_llamacpp),
        cmocka_unit_test(test_hyv4_vs_llamacpp),
        cmocka_unit_test(test_deepseek4_vs_llamacpp),
        cmocka_unit_test(test_kimik3_vs_llamacpp),
        cmocka_unit_test(test_qwen4exp_vs_llamacpp),
        cmocka_unit_test(test_kv_q8_0),
        cmocka_unit_test(test_eval_errors),
        cmocka_unit_test(test_runnable_matches_engine),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
