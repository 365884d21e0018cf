/* tests/unit/test_gen_weights: what the generated weights look like after dequantization (with
 * the kernels' reference decoder): zero mean and std 1/sqrt(fan_in) for every supported type,
 * normal f16 scales, and routing that differs from token to token (popular experts with
 * --skew). These are the properties a streaming benchmark on generated files relies on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen.h"
#include "gguf/gguf.h"
#include "gguf/types.h"
#include "kernels/dequant.h"
#include "testutil.h"

static int gen(const char *path, const char *args, gm_err *err)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[64];
    int argc = 0;
    for (char *t = strtok(buf, " "); t && argc < 60; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc++] = "-o";
    argv[argc++] = (char *)path;
    gm_gen_opts o;
    gm_gen_opts_init(&o);
    int rc = gm_gen_parse_args(&o, argc, argv, err);
    if (rc != GM_GEN_ARGS_RUN)
        return rc;
    return gm_gen_run(&o, NULL, err);
}

static const char *tmp_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", gm_test_tmpdir(), name);
    return buf;
}

static const gm_gguf_tensor *tensor(const gm_gguf *g, const char *name)
{
    const gm_gguf_tensor *t = gm_gguf_find_tensor(g, name);
    if (!t)
        fail_msg("tensor %s is missing", name);
    return t;
}

/* The whole tensor as float32 (malloc'd). */
static float *dequant(const gm_gguf *g, const gm_gguf_tensor *t)
{
    float *out = malloc(t->n_elems * sizeof *out);
    assert_non_null(out);
    int rc = gm_dequant_row(t->type, gm_gguf_tensor_data(g, t), out, t->n_elems);
    if (rc)
        fail_msg("%s: dequant of %s failed (%d)", t->name, gm_type_name(t->type), rc);
    return out;
}

typedef struct stats {
    double mean, std;
} stats;

static stats stats_of(const float *v, uint64_t n)
{
    double s = 0, s2 = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            fail_msg("value %llu is not finite", (unsigned long long)i);
        s += v[i];
        s2 += (double)v[i] * v[i];
    }
    stats st;
    st.mean = s / (double)n;
    st.std = sqrt(s2 / (double)n - st.mean * st.mean);
    return st;
}

/* Offsets of the f16 scales in one block, -1 terminated. */
static const int *scale_offsets(uint32_t type)
{
    static const int q8[] = {0, -1}, q4k[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q6k[] = {208, -1},
                     none[] = {-1};
    switch (type) {
    case GM_TYPE_Q8_0:
    case GM_TYPE_Q4_0:
    case GM_TYPE_IQ2_XXS: return q8;
    case GM_TYPE_Q4_K:
    case GM_TYPE_Q5_K: return q4k;
    case GM_TYPE_Q2_K: return q2k;
    case GM_TYPE_Q6_K: return q6k;
    default: return none;
    }
}

/* Every f16 scale of the tensor is a normal number (not zero, subnormal, inf or NaN). */
static void check_scales(const gm_gguf *g, const gm_gguf_tensor *t)
{
    const gm_type_info *ti = gm_type_get(t->type);
    const uint8_t *d = gm_gguf_tensor_data(g, t);
    uint64_t nb = t->n_bytes / ti->block_bytes;
    for (const int *o = scale_offsets(t->type); *o >= 0; o++)
        for (uint64_t b = 0; b < nb; b++) {
            const uint8_t *p = d + b * ti->block_bytes + *o;
            unsigned e = ((unsigned)p[1] >> 2) & 31;
            if (e == 0 || e == 31)
                fail_msg("%s (%s): block %llu has a scale that is not a normal half (0x%02x%02x)",
                         t->name, ti->name, (unsigned long long)b, p[1], p[0]);
        }
    if (t->type == GM_TYPE_MXFP4)
        for (uint64_t b = 0; b < nb; b++) {
            uint8_t e = d[b * ti->block_bytes];
            if (e < 64 || e > 192)
                fail_msg("%s: MXFP4 block %llu has exponent %u", t->name, (unsigned long long)b,
                         e);
        }
}

/* The std the generator gives token embeddings: sqrt(block_count) (gen.c says why). */
static double embd_std_of(const gm_gguf *g)
{
    gm_gguf_str arch;
    assert_int_equal(gm_gguf_get_str(g, "general.architecture", &arch, NULL), 0);
    char key[128];
    snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
    uint64_t n = 0;
    assert_int_equal(gm_gguf_get_u64(g, key, &n, NULL), 0);
    return sqrt((double)(n > 1 ? n : 1));
}

/* Checks one tensor: mean small against std, std within 10% of 1/sqrt(fan_in) (the token
 * embedding: of sqrt(layers)) overall and within 30% for every expert. Returns std * sqrt(fan_in). */
static double check_tensor(const gm_gguf *g, const char *name)
{
    const gm_gguf_tensor *t = tensor(g, name);
    float *v = dequant(g, t);
    double want = strcmp(name, "token_embd.weight") == 0 ? embd_std_of(g) : 1.0 / sqrt((double)t->ne[0]);
    stats all = stats_of(v, t->n_elems);
    double ratio = all.std / want;
    if (fabs(all.mean) > 0.02 * all.std)
        fail_msg("%s (%s): mean %g against std %g", name, gm_type_name(t->type), all.mean,
                 all.std);
    if (fabs(ratio - 1.0) > 0.10)
        fail_msg("%s (%s): std %g, expected %g (ratio %.3f)", name, gm_type_name(t->type),
                 all.std, want, ratio);
    uint64_t E = t->ne[2], per = t->n_elems / E;
    for (uint64_t e = 0; e < E; e++) {
        stats s = stats_of(v + e * per, per);
        if (fabs(s.mean) > 0.05 * s.std || fabs(s.std / want - 1.0) > 0.30)
            fail_msg("%s (%s) expert %llu: mean %g std %g, expected std %g", name,
                     gm_type_name(t->type), (unsigned long long)e, s.mean, s.std, want);
    }
    check_scales(g, t);
    free(v);
    return ratio;
}

/* Every supported expert type, at a large and a small std (fan_in 256 and 512, then 16384 where
 * the K-quant scales must shrink to keep d a normal half). */
static void test_expert_stats(void **state)
{
    (void)state;
    static const char *const types[] = {"Q4_K", "Q2_K", "Q8_0", "MXFP4", "IQ2_XXS",
                                        "Q4_0", "Q5_K", "Q6_K", "F16",  "BF16"};
    const char *path = tmp_path("w.gguf");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        for (int big = 0; big < 2; big++) {
            char args[256];
            snprintf(args, sizeof args,
                     "--arch qwen3moe --layers 1 --experts %d --expert-ffn %d --expert-type %s "
                     "--seed %zu",
                     big ? 1 : 4, big ? 16384 : 512, types[i], 100 + i);
            gm_err err = {0};
            if (gen(path, args, &err) != 0)
                fail_msg("%s: %s", args, err.msg);
            gm_gguf *g = NULL;
            assert_int_equal(gm_gguf_open(&g, path, &err), 0);
            assert_int_equal(tensor(g, "blk.0.ffn_gate_exps.weight")->type,
                             (uint32_t)gm_type_from_name(types[i]));
            double r1 = check_tensor(g, "blk.0.ffn_gate_exps.weight");
            double r2 = check_tensor(g, "blk.0.ffn_down_exps.weight");
            print_message("  %-8s fan_in %5d: std/target %.3f, fan_in %5d: %.3f\n", types[i], 256,
                          r1, big ? 16384 : 512, r2);
            gm_gguf_close(g);
            unlink(path);
        }
    }
}

/* Every-token matrices in each dense type; norms near 1. */
static void test_dense_stats(void **state)
{
    (void)state;
    static const char *const types[] = {"Q8_0", "F16", "F32", "BF16", "Q4_K", "Q6_K"};
    const char *path = tmp_path("d.gguf");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--arch glm4moe --layers 2 --dense-type %s", types[i]);
        gm_err err = {0};
        if (gen(path, args, &err) != 0)
            fail_msg("%s: %s", args, err.msg);
        gm_gguf *g = NULL;
        assert_int_equal(gm_gguf_open(&g, path, &err), 0);
        check_tensor(g, "blk.0.attn_q.weight");
        check_tensor(g, "blk.0.ffn_down.weight");
        check_tensor(g, "blk.1.ffn_gate_shexp.weight");
        check_tensor(g, "token_embd.weight");
        check_tensor(g, "output.weight");
        const gm_gguf_tensor *n = tensor(g, "blk.1.post_attention_norm.weight");
        assert_int_equal(n->type, GM_TYPE_F32);
        stats s = stats_of(gm_gguf_tensor_data(g, n), n->n_elems);
        assert_true(fabs(s.mean - 1.0) < 0.01 && s.std < 0.05);
        gm_gguf_close(g);
        unlink(path);
    }
}

typedef struct route_stats {
    double jaccard;       /* mean overlap of consecutive top-k sets */
    double cos;           /* mean |cosine| of consecutive token embeddings */
    double top_share;     /* selections taken by the most popular eighth of the experts */
    double logit_std;     /* mean over tokens of the std of the router logits */
} route_stats;

/* Routes a seeded random token sequence through block 0's router: x = rmsnorm(embedding) *
 * ffn_norm, logits = router x, top-k. */
static route_stats route(const char *args)
{
    const char *path = tmp_path("r.gguf");
    gm_err err = {0};
    if (gen(path, args, &err) != 0)
        fail_msg("%s: %s", args, err.msg);
    gm_gguf *g = NULL;
    assert_int_equal(gm_gguf_open(&g, path, &err), 0);
    const gm_gguf_tensor *te = tensor(g, "token_embd.weight");
    const gm_gguf_tensor *tn = tensor(g, "blk.0.ffn_norm.weight");
    const gm_gguf_tensor *tr = tensor(g, "blk.0.ffn_gate_inp.weight");
    uint64_t H = te->ne[0], V = te->ne[1], E = tr->ne[1];
    uint64_t K;
    assert_int_equal(gm_gguf_get_u64(g, "qwen3moe.expert_used_count", &K, NULL), 0);
    assert_int_equal(tr->type, GM_TYPE_F32);
    float *emb = dequant(g, te);
    const float *nw = gm_gguf_tensor_data(g, tn), *W = gm_gguf_tensor_data(g, tr);

    enum { T = 1024 };
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int *sel = calloc(T * K, sizeof *sel);
    int *count = calloc(E, sizeof *count);
    float *x = malloc(H * sizeof *x), *logit = malloc(E * sizeof *logit);
    uint64_t prev_tok = 0;
    route_stats rs = {0};
    for (int t = 0; t < T; t++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        uint64_t tok = rng % V;
        const float *e = emb + tok * H;
        double ss = 0;
        for (uint64_t i = 0; i < H; i++)
            ss += (double)e[i] * e[i];
        float inv = (float)(1.0 / sqrt(ss / (double)H + 1e-6));
        for (uint64_t i = 0; i < H; i++)
            x[i] = e[i] * inv * nw[i];
        if (t > 0) {
            const float *p = emb + prev_tok * H;
            double dot = 0, pp = 0;
            for (uint64_t i = 0; i < H; i++) {
                dot += (double)e[i] * p[i];
                pp += (double)p[i] * p[i];
            }
            rs.cos += fabs(dot / sqrt(ss * pp));
        }
        prev_tok = tok;
        double ls = 0, ls2 = 0;
        for (uint64_t j = 0; j < E; j++) {
            double acc = 0;
            for (uint64_t i = 0; i < H; i++)
                acc += (double)W[j * H + i] * x[i];
            logit[j] = (float)acc;
            ls += acc;
            ls2 += acc * acc;
        }
        rs.logit_std += sqrt(ls2 / (double)E - (ls / (double)E) * (ls / (double)E));
        for (uint64_t k = 0; k < K; k++) { /* top-k by repeated arg-max */
            int best = -1;
            for (uint64_t j = 0; j < E; j++)
                if (best < 0 || logit[j] > logit[best])
                    best = (int)j;
            sel[t * K + k] = best;
            count[best]++;
            logit[best] = -INFINITY;
        }
        if (t > 0) {
            int inter = 0;
            for (uint64_t a = 0; a < K; a++)
                for (uint64_t b = 0; b < K; b++)
                    inter += sel[t * K + a] == sel[(t - 1) * K + b];
            rs.jaccard += (double)inter / (double)(2 * K - (uint64_t)inter);
        }
    }
    rs.jaccard /= T - 1;
    rs.cos /= T - 1;
    rs.logit_std /= T;
    /* share of the top E/8 experts */
    for (uint64_t a = 0; a < E; a++) /* sort counts descending */
        for (uint64_t b = a + 1; b < E; b++)
            if (count[b] > count[a]) {
                int tmp = count[a];
                count[a] = count[b];
                count[b] = tmp;
            }
    long top = 0;
    for (uint64_t a = 0; a < E / 8; a++)
        top += count[a];
    rs.top_share = (double)top / (double)(T * K);
    free(sel);
    free(count);
    free(x);
    free(logit);
    free(emb);
    gm_gguf_close(g);
    unlink(path);
    return rs;
}

/* Consecutive tokens route to different experts; with --skew a few experts take most tokens. */
static void test_routing(void **state)
{
    (void)state;
    route_stats flat = route("--arch qwen3moe --layers 1 --experts 64 --experts-used 4 "
                             "--vocab 8192 --seed 5");
    route_stats skew = route("--arch qwen3moe --layers 1 --experts 64 --experts-used 4 "
                             "--vocab 8192 --seed 5 --skew 1");
    print_message("  no skew: Jaccard %.3f, |cos| %.3f, logit std %.2f, top-8 share %.3f\n",
                  flat.jaccard, flat.cos, flat.logit_std, flat.top_share);
    print_message("  skew 1:  Jaccard %.3f, |cos| %.3f, logit std %.2f, top-8 share %.3f\n",
                  skew.jaccard, skew.cos, skew.logit_std, skew.top_share);
    /* Unrelated tokens: embeddings nearly orthogonal, top-4 of 64 sets nearly disjoint. */
    assert_true(flat.cos < 0.15);
    assert_true(flat.jaccard < 0.15);
    assert_true(flat.logit_std > 0.5 && flat.logit_std < 2.0);
    assert_true(flat.top_share < 0.25); /* uniform: 0.125 */
    /* Skewed: the 8 most popular of 64 experts take most selections, still varying. */
    assert_true(skew.top_share > 0.45);
    assert_true(skew.jaccard < 0.5);
    /* The embedding type does not matter: the same with a 4-bit K-quant embedding. */
    route_stats q4 = route("--arch qwen3moe --layers 1 --experts 64 --experts-used 4 "
                           "--vocab 8192 --seed 6 --dense-type Q4_K");
    assert_true(q4.cos < 0.15 && q4.jaccard < 0.15);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expert_stats),
        cmocka_unit_test(test_dense_stats),
        cmocka_unit_test(test_routing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(gm_test_tmpdir());
    return rc;
}
