/* infer/sample: the sampling chain against its definition. Expected values are worked out here
 * from the chain's definition (softmax probabilities, the top-k/top-p/min-p rules as llama.cpp
 * applies them, the repetition penalty's sign rule), not taken from the sampler's output. Draws
 * use fixed seeds, so the frequency checks are deterministic; their bounds are 5 standard
 * deviations of a binomial count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/sample.h"

static gm_sampler *make(uint32_t V, float temp, int32_t top_k, float top_p, float min_p,
                        float penalty, int32_t last_n, uint64_t seed)
{
    gm_sample_opts o = {.temp = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p,
                        .repeat_penalty = penalty, .penalty_last_n = last_n, .seed = seed};
    gm_sampler *s = NULL;
    gm_err err = {0};
    if (gm_sampler_create(&s, V, &o, &err) != 0)
        fail_msg("create: %s", err.msg);
    return s;
}

/* Counts of n draws from logits. */
static void draw(gm_sampler *s, const float *logits, uint32_t V, int n, int *count)
{
    memset(count, 0, V * sizeof *count);
    for (int i = 0; i < n; i++) {
        int32_t t = gm_sampler_sample(s, logits);
        assert_true(t >= 0 && (uint32_t)t < V);
        count[t]++;
    }
}

/* count is a plausible binomial(n, p) draw (within 5 standard deviations). */
static void assert_freq(int count, int n, double p)
{
    double mean = n * p, sd = sqrt(n * p * (1 - p));
    if (fabs(count - mean) > 5 * sd + 1e-9)
        fail_msg("count %d of %d draws, expected %.1f +- %.1f", count, n, mean, 5 * sd);
}

static void test_greedy(void **state)
{
    (void)state;
    const float logits[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -7.0f};
    gm_sampler *s = make(6, 0.0f, 40, 0.95f, 0.05f, 1.0f, 64, 1);
    assert_int_equal(gm_sampler_sample(s, logits), 1); /* a tie goes to the lower id */
    gm_sampler_free(s);
}

/* Temperature only: the draw follows softmax(logits / T). */
static void test_temperature_distribution(void **state)
{
    (void)state;
    const float logits[4] = {1.0f, 0.0f, -0.5f, 2.0f};
    const float T = 0.7f;
    const int n = 40000;
    int count[4];
    gm_sampler *s = make(4, T, 0, 1.0f, 0.0f, 1.0f, 0, 42);
    draw(s, logits, 4, n, count);
    double z = 0;
    for (int i = 0; i < 4; i++)
        z += exp(logits[i] / T);
    for (int i = 0; i < 4; i++)
        assert_freq(count[i], n, exp(logits[i] / T) / z);
    gm_sampler_free(s);
}

/* top-k keeps the k highest logits (ties: lower ids), then renormalises. */
static void test_top_k(void **state)
{
    (void)state;
    enum { V = 1000 };
    static float logits[V];
    /* a spread of values with a 4-way tie at the cut: ids 500..503 share 1.0 */
    for (int i = 0; i < V; i++)
        logits[i] = -(float)((i * 7919) % V) / 100.0f;
    logits[10] = 3.0f;
    logits[20] = 2.0f;
    for (int i = 500; i < 504; i++)
        logits[i] = 1.0f;
    const int n = 20000;
    static int count[V];
    gm_sampler *s = make(V, 1.0f, 4, 1.0f, 0.0f, 1.0f, 0, 7);
    draw(s, logits, V, n, count);
    /* the four best: 10, 20, 500, 501 */
    const double z = exp(3.0) + exp(2.0) + 2 * exp(1.0);
    assert_freq(count[10], n, exp(3.0) / z);
    assert_freq(count[20], n, exp(2.0) / z);
    assert_freq(count[500], n, exp(1.0) / z);
    assert_freq(count[501], n, exp(1.0) / z);
    assert_int_equal(count[10] + count[20] + count[500] + count[501], n);
    gm_sampler_free(s);

    /* k = 1 is greedy at any temperature */
    s = make(V, 1.5f, 1, 1.0f, 0.0f, 1.0f, 0, 8);
    for (int i = 0; i < 100; i++)
        assert_int_equal(gm_sampler_sample(s, logits), 10);
    gm_sampler_free(s);
}

/* top-p keeps the smallest prefix (by probability at temperature 1) whose mass reaches p; min-p
 * keeps tokens whose probability is at least min_p times the largest. Probabilities here:
 * 0.5, 0.25, 0.15, 0.1. */
static void test_top_p_and_min_p(void **state)
{
    (void)state;
    const float logits[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.1f)};
    const int n = 20000;
    int count[4];
    /* p = 0.7: 0.5 < 0.7 <= 0.75, two tokens, renormalised 2/3 and 1/3 */
    gm_sampler *s = make(4, 1.0f, 0, 0.7f, 0.0f, 1.0f, 0, 3);
    draw(s, logits, 4, n, count);
    assert_freq(count[0], n, 2.0 / 3);
    assert_int_equal(count[0] + count[1], n);
    gm_sampler_free(s);
    /* min-p 0.25: floor 0.125, three tokens (0.5, 0.25, 0.15) */
    s = make(4, 1.0f, 0, 1.0f, 0.25f, 1.0f, 0, 4);
    draw(s, logits, 4, n, count);
    assert_int_equal(count[3], 0);
    assert_freq(count[2], n, 0.15 / 0.9);
    gm_sampler_free(s);
}

/* Ids in rank order (larger logit, then lower id), by a plain insertion into a sorted list. */
static void rank_ids(const float *logits, uint32_t V, int32_t *order)
{
    for (uint32_t i = 0; i < V; i++) {
        uint32_t j = i;
        while (j > 0 && (logits[order[j - 1]] < logits[i] ||
                         (logits[order[j - 1]] == logits[i] && order[j - 1] > (int32_t)i))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = (int32_t)i;
    }
}

/* Over a large vocabulary without top-k (the sampler then ranks only part of it): the kept set
 * and its probabilities follow the definition, worked out here over the fully ranked list. */
static void check_nucleus(const float *logits, uint32_t V, float top_p, float min_p, int n, uint64_t seed)
{
    int32_t *order = calloc(V, sizeof *order);
    int *count = malloc(V * sizeof *count);
    double *p = malloc(V * sizeof *p);
    assert_true(order && count && p);
    rank_ids(logits, V, order);
    double mx = logits[order[0]], z = 0;
    for (uint32_t i = 0; i < V; i++)
        z += exp((double)logits[i] - mx);
    uint32_t keep = V;
    double cum = 0;
    for (uint32_t i = 0; i < V && top_p < 1.0f; i++) {
        cum += exp((double)logits[order[i]] - mx) / z;
        if (cum >= top_p) {
            keep = i + 1;
            break;
        }
    }
    uint32_t kmin = 1;
    while (min_p > 0 && kmin < keep && logits[order[kmin]] >= mx + log(min_p))
        kmin++;
    if (min_p > 0)
        keep = kmin;
    assert_true(keep > 256); /* more than the sampler's first selection */
    double zk = 0, zhalf = 0;
    for (uint32_t i = 0; i < keep; i++) {
        p[i] = exp((double)logits[order[i]] - mx);
        zk += p[i];
        zhalf += i < keep / 2 ? p[i] : 0;
    }
    gm_sampler *s = make(V, 1.0f, 0, top_p, min_p, 1.0f, 0, seed);
    draw(s, logits, V, n, count);
    int inside = 0, first_half = 0;
    for (uint32_t i = 0; i < keep; i++) {
        inside += count[order[i]];
        first_half += i < keep / 2 ? count[order[i]] : 0;
    }
    assert_int_equal(inside, n); /* nothing outside the kept set */
    assert_freq(first_half, n, zhalf / zk);
    assert_freq(count[order[0]], n, p[0] / zk);
    gm_sampler_free(s);
    free(order);
    free(count);
    free(p);
}

static void test_nucleus_large_vocab(void **state)
{
    (void)state;
    enum { V = 6007 };
    static float logits[V];
    /* top-p 0.5 over 1500 tied tokens and a tail: 751 kept, the tie broken by id */
    for (uint32_t i = 0; i < V; i++)
        logits[(i * 7919u) % V] = i < 1500 ? 0.0f : -10.0f - (float)(i % 13);
    check_nucleus(logits, V, 0.5f, 0.0f, 2000, 11);
    /* min-p 0.05 over a slow decline: 749 kept (the sampler ranks 1024) */
    for (uint32_t i = 0; i < V; i++)
        logits[(i * 7919u) % V] = -0.004f * (float)i;
    check_nucleus(logits, V, 1.0f, 0.05f, 2000, 12);
    /* both: top-p 0.9 cuts first */
    check_nucleus(logits, V, 0.9f, 0.05f, 2000, 13);
    /* top-p near 1 over a flat distribution: the whole vocabulary is ranked */
    for (uint32_t i = 0; i < V; i++)
        logits[i] = (float)(i % 5) * 0.01f;
    check_nucleus(logits, V, 0.999f, 0.0f, 500, 14);
}

/* The repetition penalty divides a positive logit and multiplies a negative one, once per token
 * however often it is in the window, and only over the last penalty_last_n tokens. */
static void test_repetition_penalty(void **state)
{
    (void)state;
    /* 2.0 / 1.1 = 1.82 > 1.7 (once), 2.0 / 1.21 = 1.65 < 1.7 (twice) */
    const float pos[2] = {2.0f, 1.7f};
    gm_sampler *s = make(2, 0.0f, 0, 1.0f, 0.0f, 1.1f, 4, 1);
    gm_sampler_accept(s, 0);
    gm_sampler_accept(s, 0);
    assert_int_equal(gm_sampler_sample(s, pos), 0);
    gm_sampler_free(s);
    /* -1.0 x 1.1 = -1.1 < -1.05 */
    const float neg[2] = {-1.0f, -1.05f};
    s = make(2, 0.0f, 0, 1.0f, 0.0f, 1.1f, 4, 1);
    gm_sampler_accept(s, 0);
    assert_int_equal(gm_sampler_sample(s, neg), 1);
    /* token 0 leaves a window of 4 after four other tokens */
    for (int i = 0; i < 4; i++)
        gm_sampler_accept(s, 1);
    const float pos2[2] = {2.0f, 1.9f}; /* token 1 penalised: 1.9 / 1.1 = 1.73 */
    assert_int_equal(gm_sampler_sample(s, pos2), 0);
    const float neg2[2] = {-1.0f, -1.05f};
    assert_int_equal(gm_sampler_sample(s, neg2), 0);
    /* the same call again: the once-per-token bookkeeping is reset between calls */
    assert_int_equal(gm_sampler_sample(s, neg2), 0);
    gm_sampler_free(s);
}

/* The same seed gives the same draws; another seed, other ones. */
static void test_seed(void **state)
{
    (void)state;
    enum { V = 50 };
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)(i % 7) * 0.3f;
    gm_sampler *a = make(V, 1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 99);
    gm_sampler *b = make(V, 1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 99);
    gm_sampler *c = make(V, 1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 100);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = gm_sampler_sample(a, logits), y = gm_sampler_sample(b, logits);
        assert_int_equal(x, y);
        differ += gm_sampler_sample(c, logits) != x;
    }
    assert_true(differ > 0);
    gm_sampler_free(a);
    gm_sampler_free(b);
    gm_sampler_free(c);
}

static void test_bad_settings(void **state)
{
    (void)state;
    const gm_sample_opts bad[] = {
        {.temp = -1, .top_p = 1, .repeat_penalty = 1},
        {.temp = 1, .top_k = -1, .top_p = 1, .repeat_penalty = 1},
        {.temp = 1, .top_p = 1.5f, .repeat_penalty = 1},
        {.temp = 1, .top_p = 1, .min_p = -0.1f, .repeat_penalty = 1},
        {.temp = 1, .top_p = 1, .repeat_penalty = 0},
        {.temp = NAN, .top_p = 1, .repeat_penalty = 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gm_sampler *s = NULL;
        gm_err err = {0};
        assert_int_equal(gm_sampler_create(&s, 10, &bad[i], &err), GM_EINVAL);
        assert_null(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_temperature_distribution),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_nucleus_large_vocab),
        cmocka_unit_test(test_top_p_and_min_p),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
