/* Tests of the attention kernels (kernels/attn.h), at every kernel level this CPU has.
 *
 *  - against attention computed in double precision from the cache's values (softmax of q.k over
 *    the positions a query sees, times V), for F32, F16 and Q8_0 caches, head dims 16 to 256
 *    (72: not a multiple of 16, which every level leaves to the reference), 1 to 100 positions
 *    (partial blocks),
 *    1 to 9 queries with different causal ends, rows at a stride wider than a row, and scores
 *    spread wide enough that the running maximum moves from block to block;
 *  - a query gives the same bits alone as among others (the engine relies on it: a token's
 *    attention must not depend on how tokens are grouped into calls);
 *  - a run cut at a block boundary into two parts and merged (gm_attn_merge) equals the whole
 *    run within the same budget; a query that sees no position gives zeros; a position past a
 *    query's causal end does not reach it even when its V holds an infinity (f16 overflow).
 * Nothing here depends on timing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/types.h"
#include "kernels/attn.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

/* Error budget: |out - reference| <= BUDGET x (1 + max|score|) x max|v|. Each output is a
 * convex combination of V rows, and a score's float32 rounding (relative 1e-7 of its size) moves
 * its weight by as much: every level measured stays below 2e-7 of that (the scalar reference
 * summing in one chain is the least exact). */
#define BUDGET 1e-6

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static float rand_f(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct cache {
    uint32_t type, hd, n_pos;
    uint64_t stride;
    uint8_t *k, *v;
    double *kd, *vd; /* the values the cache holds, [n_pos][hd] */
} cache;

/* Row of hd values x into dst as type; the value it then holds into back. */
static void put_row(uint32_t type, const float *x, uint32_t hd, uint8_t *dst, double *back)
{
    if (type == GM_TYPE_F32) {
        memcpy(dst, x, hd * sizeof(float));
        for (uint32_t d = 0; d < hd; d++)
            back[d] = x[d];
    } else if (type == GM_TYPE_F16) {
        for (uint32_t d = 0; d < hd; d++) {
            const uint16_t h = gm_f32_to_f16(x[d]);
            memcpy(dst + 2 * d, &h, 2);
            back[d] = gm_f16_to_f32(h);
        }
    } else {
        for (uint32_t b = 0; b < hd / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fabsf(x[32 * b + i]) > amax ? fabsf(x[32 * b + i]) : amax;
            const uint16_t h = gm_f32_to_f16(amax / 127.0f);
            const float s = gm_f16_to_f32(h);
            gm_block_q8_0 blk;
            blk.d = h;
            for (int i = 0; i < 32; i++) {
                const float c = s != 0 ? roundf(x[32 * b + i] / s) : 0;
                blk.qs[i] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
                back[32 * b + i] = (double)s * blk.qs[i];
            }
            memcpy(dst + b * sizeof blk, &blk, sizeof blk);
        }
    }
}

static cache make_cache(uint32_t type, uint32_t hd, uint32_t n_pos, float v_scale)
{
    cache c = {type, hd, n_pos, 0, NULL, NULL, NULL, NULL};
    const uint64_t row = type == GM_TYPE_F32 ? 4ull * hd
                         : type == GM_TYPE_F16 ? 2ull * hd
                                               : hd / 32 * sizeof(gm_block_q8_0);
    c.stride = 2 * row + 6; /* rows of other heads in between, and no alignment */
    c.k = calloc(n_pos, c.stride);
    c.v = calloc(n_pos, c.stride);
    c.kd = malloc(sizeof(double) * n_pos * hd);
    c.vd = malloc(sizeof(double) * n_pos * hd);
    assert_true(c.k && c.v && c.kd && c.vd);
    float *x = malloc(sizeof(float) * hd);
    for (uint32_t p = 0; p < n_pos; p++) {
        for (uint32_t d = 0; d < hd; d++)
            x[d] = rand_f();
        put_row(type, x, hd, c.k + p * c.stride, c.kd + (uint64_t)p * hd);
        for (uint32_t d = 0; d < hd; d++)
            x[d] = v_scale * rand_f();
        put_row(type, x, hd, c.v + p * c.stride, c.vd + (uint64_t)p * hd);
    }
    free(x);
    return c;
}

static void free_cache(cache *c)
{
    free(c->k);
    free(c->v);
    free(c->kd);
    free(c->vd);
}

/* Query i's attention in double precision; *smax raised to the largest |score|. */
static void reference(const cache *c, const float *q, uint32_t end, double *out, double *smax)
{
    const uint32_t hd = c->hd;
    double mx = -INFINITY, sum = 0;
    double *s = malloc(sizeof(double) * (end ? end : 1));
    for (uint32_t p = 0; p < end; p++) {
        double d = 0;
        for (uint32_t e = 0; e < hd; e++)
            d += (double)q[e] * c->kd[(uint64_t)p * hd + e];
        s[p] = d;
        *smax = fabs(d) > *smax ? fabs(d) : *smax;
        mx = d > mx ? d : mx;
    }
    for (uint32_t e = 0; e < hd; e++)
        out[e] = 0;
    for (uint32_t p = 0; p < end; p++) {
        const double w = exp(s[p] - mx);
        sum += w;
        for (uint32_t e = 0; e < hd; e++)
            out[e] += w * c->vd[(uint64_t)p * hd + e];
    }
    for (uint32_t e = 0; e < hd; e++)
        out[e] = end ? out[e] / sum : 0;
    free(s);
}

typedef struct run_state {
    float *o, *m, *l;
} run_state;

static run_state new_state(uint32_t n_q, uint32_t hd)
{
    run_state s = {calloc((size_t)n_q * hd, sizeof(float)), malloc(n_q * sizeof(float)),
               calloc(n_q, sizeof(float))};
    assert_true(s.o && s.m && s.l);
    for (uint32_t i = 0; i < n_q; i++)
        s.m[i] = -INFINITY;
    return s;
}

static void free_state(run_state *s)
{
    free(s->o);
    free(s->m);
    free(s->l);
}

static float *scratch_for(uint32_t hd, uint32_t n_q)
{
    float *s = aligned_alloc(64, (GM_ATTN_SCRATCH_FLOATS(hd, n_q) * sizeof(float) + 63) / 64 * 64);
    assert_non_null(s);
    return s;
}

static void run(gm_attn_fn fn, const cache *c, uint32_t p0, uint32_t p1, uint32_t n_q,
                const float *q, const uint32_t *end, run_state *st)
{
    gm_attn_kv kv = {c->type, c->hd, c->k, c->v, c->stride};
    gm_attn_q aq = {n_q, q, end, st->o, st->m, st->l};
    float *scr = scratch_for(c->hd, n_q);
    fn(&kv, p0, p1, &aq, scr);
    free(scr);
}

/* max over queries and elements of |out - reference| / ((1 + max|score|) max|v|). */
static double check_against_reference(const cache *c, uint32_t n_q, const float *q,
                                      const uint32_t *end, const float *out)
{
    double vmax = 0, worst = 0, smax = 0;
    for (uint64_t i = 0; i < (uint64_t)c->n_pos * c->hd; i++)
        if (isfinite(c->vd[i]))
            vmax = fabs(c->vd[i]) > vmax ? fabs(c->vd[i]) : vmax;
    double *ref = malloc(sizeof(double) * c->hd);
    for (uint32_t i = 0; i < n_q; i++) {
        reference(c, q + (uint64_t)i * c->hd, end[i], ref, &smax);
        for (uint32_t d = 0; d < c->hd; d++) {
            const double e = fabs(out[(uint64_t)i * c->hd + d] - ref[d]) / (vmax ? vmax : 1);
            worst = e > worst ? e : worst;
        }
    }
    free(ref);
    return worst / (1 + smax);
}

static void one_case(const gm_kernels *k, uint32_t type, uint32_t hd, uint32_t n_pos,
                     uint32_t n_q, float q_scale)
{
    const gm_attn_fn fn = gm_kernels_attn(k, hd);
    cache c = make_cache(type, hd, n_pos, 3.0f);
    float *q = malloc(sizeof(float) * n_q * hd);
    uint32_t *end = malloc(sizeof(uint32_t) * n_q);
    for (uint32_t i = 0; i < n_q * hd; i++)
        q[i] = q_scale * rand_f();
    for (uint32_t i = 0; i < n_q; i++) /* causal ends; the first query sees everything */
        end[i] = i == 0 ? n_pos : 1 + (uint32_t)((rand_f() + 1.0f) * 0.5f * (float)(n_pos - 1));
    run_state st = new_state(n_q, hd);
    run(fn, &c, 0, n_pos, n_q, q, end, &st);
    float *out = malloc(sizeof(float) * n_q * hd);
    gm_attn_finish(n_q, hd, st.o, st.l, out, hd);
    const double err = check_against_reference(&c, n_q, q, end, out);
    if (err > BUDGET)
        fail_msg("%s: type %u hd %u positions %u queries %u q x %.1f: error %.3g over budget %.3g",
                 gm_kernel_level_name(gm_kernels_level(k)), type, hd, n_pos, n_q, q_scale, err,
                 BUDGET);

    /* each query alone: the same bits */
    for (uint32_t i = 0; i < n_q; i++) {
        run_state one = new_state(1, hd);
        run(fn, &c, 0, n_pos, 1, q + (uint64_t)i * hd, end + i, &one);
        if (memcmp(one.o, st.o + (uint64_t)i * hd, hd * sizeof(float)) != 0 ||
            memcmp(one.l, st.l + i, sizeof(float)) != 0 || memcmp(one.m, st.m + i, sizeof(float)) != 0)
            fail_msg("%s: query %u alone differs from the same query among %u",
                     gm_kernel_level_name(gm_kernels_level(k)), i, n_q);
        free_state(&one);
    }

    /* cut at a block boundary, merged */
    if (n_pos > GM_ATTN_BLOCK) {
        const uint32_t cut = GM_ATTN_BLOCK * (n_pos / GM_ATTN_BLOCK / 2 + (n_pos >= 48));
        run_state a = new_state(n_q, hd), b = new_state(n_q, hd);
        run(fn, &c, 0, cut, n_q, q, end, &a);
        run(fn, &c, cut, n_pos, n_q, q, end, &b);
        gm_attn_merge(n_q, hd, a.o, a.m, a.l, b.o, b.m, b.l);
        gm_attn_finish(n_q, hd, a.o, a.l, out, hd);
        const double e2 = check_against_reference(&c, n_q, q, end, out);
        if (e2 > BUDGET)
            fail_msg("%s: merged at %u of %u: error %.3g over budget",
                     gm_kernel_level_name(gm_kernels_level(k)), cut, n_pos, e2);
        free_state(&a);
        free_state(&b);
    }
    free_state(&st);
    free(out);
    free(q);
    free(end);
    free_cache(&c);
}

static void test_levels_against_reference(void **state)
{
    (void)state;
    static const uint32_t types[] = {GM_TYPE_F32, GM_TYPE_F16, GM_TYPE_Q8_0};
    static const uint32_t hds[] = {16, 64, 72, 80, 128, 256};
    static const uint32_t n_pos[] = {1, 15, 16, 17, 100};
    static const uint32_t n_q[] = {1, 3, 9};
    int levels = 0;
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        levels++;
        for (size_t t = 0; t < sizeof types / sizeof *types; t++)
            for (size_t h = 0; h < sizeof hds / sizeof *hds; h++) {
                if (types[t] == GM_TYPE_Q8_0 && hds[h] % 32 != 0)
                    continue;
                for (size_t p = 0; p < sizeof n_pos / sizeof *n_pos; p++)
                    for (size_t qi = 0; qi < sizeof n_q / sizeof *n_q; qi++) {
                        one_case(k, types[t], hds[h], n_pos[p], n_q[qi], 0.3f);
                        /* scores spread over tens of units: the maximum moves between blocks */
                        one_case(k, types[t], hds[h], n_pos[p], n_q[qi], 8.0f);
                    }
            }
    }
    assert_true(levels >= 1);
}

/* The running maximum rises block after block (scores growing with the position), which
 * exercises the rescaling of earlier blocks' sums. */
static void test_rising_scores(void **state)
{
    (void)state;
    const uint32_t hd = 64, n_pos = 70;
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        cache c = make_cache(GM_TYPE_F32, hd, n_pos, 1.0f);
        float q[64];
        for (uint32_t d = 0; d < hd; d++)
            q[d] = d == 0 ? 1.0f : 0.0f;
        for (uint32_t p = 0; p < n_pos; p++) { /* K element 0 = p / 4: scores 0 .. 17 */
            const float kv0 = (float)p / 4.0f;
            memcpy(c.k + p * c.stride, &kv0, sizeof kv0);
            c.kd[(uint64_t)p * hd] = kv0;
        }
        const uint32_t end = n_pos;
        run_state st = new_state(1, hd);
        run(gm_kernels_attn(k, hd), &c, 0, n_pos, 1, q, &end, &st);
        float out[64];
        gm_attn_finish(1, hd, st.o, st.l, out, hd);
        const double err = check_against_reference(&c, 1, q, &end, out);
        if (err > BUDGET)
            fail_msg("%s: rising scores: error %.3g", gm_kernel_level_name(gm_kernels_level(k)),
                     err);
        assert_true(st.m[0] == (float)(n_pos - 1) / 4.0f);
        free_state(&st);
        free_cache(&c);
    }
}

/* A query whose end is at or before the run's first position is left untouched, and one that
 * saw nothing finishes as zeros. */
static void test_no_visible_position(void **state)
{
    (void)state;
    const uint32_t hd = 32;
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        cache c = make_cache(GM_TYPE_F16, hd, 40, 1.0f);
        float q[2 * 32];
        for (int i = 0; i < 64; i++)
            q[i] = rand_f();
        const uint32_t end[2] = {16, 40};
        run_state st = new_state(2, hd);
        run(gm_kernels_attn(k, hd), &c, 16, 40, 2, q, end, &st);
        assert_true(st.m[0] == -INFINITY && st.l[0] == 0.0f);
        for (uint32_t d = 0; d < hd; d++)
            assert_true(st.o[d] == 0.0f);
        assert_true(st.l[1] > 0.0f);
        float out[2 * 32];
        gm_attn_finish(2, hd, st.o, st.l, out, hd);
        for (uint32_t d = 0; d < hd; d++)
            assert_true(out[d] == 0.0f);
        free_state(&st);
        free_cache(&c);
    }
}

/* Position 9's V row is infinite (an f16 cache overflows past 65504); a query whose causal end
 * is 6 shares the block but must not see it: its output stays finite and correct, alone or
 * among queries that see the whole block. */
static void test_inf_past_the_end(void **state)
{
    (void)state;
    const uint32_t hd = 64, n_pos = 16;
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        const gm_kernels *k = gm_kernels_for_level((gm_kernel_level)l);
        if (!k)
            continue;
        cache c = make_cache(GM_TYPE_F16, hd, n_pos, 1.0f);
        const uint16_t inf = 0x7c00;
        for (uint32_t d = 0; d < hd; d++) {
            memcpy(c.v + 9 * c.stride + 2 * d, &inf, 2);
            c.vd[9ull * hd + d] = INFINITY;
        }
        float q[3 * 64];
        for (int i = 0; i < 3 * 64; i++)
            q[i] = rand_f();
        const uint32_t end[3] = {16, 6, 6};
        run_state st = new_state(3, hd);
        run(gm_kernels_attn(k, hd), &c, 0, n_pos, 3, q, end, &st);
        float out[3 * 64];
        gm_attn_finish(3, hd, st.o, st.l, out, hd);
        for (uint32_t d = 0; d < hd; d++)
            if (!isfinite(out[64 + d]) || !isfinite(out[128 + d]))
                fail_msg("%s: a position past the causal end reached the query",
                         gm_kernel_level_name(gm_kernels_level(k)));
        const double err = check_against_reference(&c, 2, q + 64, end + 1, out + 64);
        if (err > BUDGET)
            fail_msg("%s: inf past the end: error %.3g", gm_kernel_level_name(gm_kernels_level(k)),
                     err);
        free_state(&st);
        free_cache(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_against_reference),
        cmocka_unit_test(test_rising_scores),
        cmocka_unit_test(test_no_visible_position),
        cmocka_unit_test(test_inf_past_the_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
