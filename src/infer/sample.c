/* Sampling chain (see sample.h). */
#include "infer/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct gm_sampler {
    gm_sample_opts o;
    uint32_t n_vocab;
    uint64_t rng;
    float *val;       /* [n_vocab] working logits */
    float *pen;       /* [n_vocab] the logits after the penalty (the nucleus search's source) */
    int32_t *idx;     /* [n_vocab] candidate ids */
    int32_t *recent;  /* ring of the last penalty_last_n tokens */
    uint8_t *seen;    /* [n_vocab / 8 + 1] bits: tokens already penalised this step (kept clear) */
    int32_t n_recent, recent_at;
};

void gm_sample_opts_default(gm_sample_opts *o)
{
    o->temp = 0.8f;
    o->top_k = 40;
    o->top_p = 0.95f;
    o->min_p = 0.05f;
    o->repeat_penalty = 1.0f;
    o->penalty_last_n = 64;
    o->seed = 0;
}

int gm_sampler_create(gm_sampler **out, uint32_t n_vocab, const gm_sample_opts *o, gm_err *err)
{
    *out = NULL;
    if (!(o->temp >= 0) || o->top_k < 0 || !(o->top_p >= 0 && o->top_p <= 1) ||
        !(o->min_p >= 0 && o->min_p <= 1) || !(o->repeat_penalty > 0) || o->penalty_last_n < 0 ||
        n_vocab == 0)
        return gm_err_set(err, GM_EINVAL, "sampling settings out of range (temp >= 0, top-k >= 0, "
                          "top-p and min-p in [0, 1], repeat penalty > 0)");
    gm_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    s->o = *o;
    s->n_vocab = n_vocab;
    /* splitmix64 of the seed, so seed 0 is a valid state too */
    uint64_t z = o->seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s->rng = (z ^ (z >> 31)) | 1;
    s->val = malloc(n_vocab * sizeof *s->val);
    s->pen = malloc(n_vocab * sizeof *s->pen);
    s->idx = malloc(n_vocab * sizeof *s->idx);
    s->recent = malloc((o->penalty_last_n ? (size_t)o->penalty_last_n : 1) * sizeof *s->recent);
    s->seen = calloc(n_vocab / 8 + 1, 1);
    if (!s->val || !s->pen || !s->idx || !s->recent || !s->seen) {
        gm_sampler_free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

void gm_sampler_free(gm_sampler *s)
{
    if (!s)
        return;
    free(s->val);
    free(s->pen);
    free(s->idx);
    free(s->recent);
    free(s->seen);
    free(s);
}

void gm_sampler_accept(gm_sampler *s, int32_t token)
{
    if (s->o.penalty_last_n <= 0)
        return;
    s->recent[s->recent_at] = token;
    s->recent_at = (s->recent_at + 1) % s->o.penalty_last_n;
    if (s->n_recent < s->o.penalty_last_n)
        s->n_recent++;
}

static double next_unit(gm_sampler *s)
{
    /* xorshift64*: 53 random bits in [0, 1) */
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (double)((s->rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* True when candidate (va, ia) ranks before (vb, ib): larger value, then lower id. */
static inline bool ranks_before(float va, int32_t ia, float vb, int32_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* Restores the heap below node i of the k-candidate heap in val/idx whose root is the candidate
 * ranked last. */
static void sift_down(float *val, int32_t *idx, uint32_t k, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && ranks_before(val[m], idx[m], val[l], idx[l]))
            m = l;
        if (r < k && ranks_before(val[m], idx[m], val[r], idx[r]))
            m = r;
        if (m == i)
            return;
        float tv = val[i];
        val[i] = val[m];
        val[m] = tv;
        int32_t ti = idx[i];
        idx[i] = idx[m];
        idx[m] = ti;
        i = m;
    }
}

/* Moves the k best of candidates [0, n) to [0, k), in rank order: a heap of the k best so far
 * (its root the one ranked last) over the candidates, then heap sort. O(n log k), in place. */
static void top_k_select(float *val, int32_t *idx, uint32_t n, uint32_t k)
{
    for (uint32_t i = k / 2; i-- > 0;)
        sift_down(val, idx, k, i);
    for (uint32_t j = k; j < n; j++)
        if (ranks_before(val[j], idx[j], val[0], idx[0])) {
            val[0] = val[j];
            idx[0] = idx[j];
            sift_down(val, idx, k, 0);
        }
    for (uint32_t end = k; end-- > 1;) {
        float tv = val[0];
        val[0] = val[end];
        val[end] = tv;
        int32_t ti = idx[0];
        idx[0] = idx[end];
        idx[end] = ti;
        sift_down(val, idx, end, 0);
    }
}

/* Sorts candidates [0, n) by value, descending (ties: lower id first). */
static void sort_desc(float *val, int32_t *idx, uint32_t n)
{
    /* shell sort on (val, idx) pairs: no allocation, fine for the few thousand candidates that
     * survive top-k; for the full vocabulary it is only used without top-k */
    static const uint32_t gaps[] = {1750, 701, 301, 132, 57, 23, 10, 4, 1};
    for (size_t gi = 0; gi < sizeof gaps / sizeof gaps[0]; gi++) {
        uint32_t gap = gaps[gi];
        for (uint32_t i = gap; i < n; i++) {
            float v = val[i];
            int32_t id = idx[i];
            uint32_t j = i;
            while (j >= gap && (val[j - gap] < v || (val[j - gap] == v && idx[j - gap] > id))) {
                val[j] = val[j - gap];
                idx[j] = idx[j - gap];
                j -= gap;
            }
            val[j] = v;
            idx[j] = id;
        }
    }
}

/* Without top-k: ranks only as many candidates as top-p and min-p can keep. The k best (k = 256,
 * then 4x) are selected until their mass at temperature 1 reaches top-p or the k-th falls below
 * min-p's floor; the cuts that follow then see the same prefix a full sort would give. Only
 * with neither cut (or a flat distribution) is the whole vocabulary sorted. Returns the count
 * ranked in val/idx; *mx is the largest logit and *sum the softmax denominator over all (with
 * top-p only: nothing else reads it). */
static uint32_t nucleus(gm_sampler *s, double *mx, double *sum)
{
    const uint32_t V = s->n_vocab;
    float m = s->val[0];
    for (uint32_t i = 1; i < V; i++)
        m = s->val[i] > m ? s->val[i] : m;
    const bool cut_p = s->o.top_p < 1.0f, cut_min = s->o.min_p > 0.0f;
    double z = 0;
    for (uint32_t i = 0; i < V && cut_p; i++) /* only top-p needs the whole denominator */
        z += exp((double)s->val[i] - m);
    *mx = m;
    *sum = z;
    const double floor_logit = cut_min ? m + log((double)s->o.min_p) : 0;
    if (cut_p || cut_min) {
        memcpy(s->pen, s->val, V * sizeof *s->pen);
        for (uint32_t k = 256; k < V / 2; k *= 4) {
            top_k_select(s->val, s->idx, V, k);
            double cum = 0;
            for (uint32_t i = 0; i < k && cut_p; i++)
                cum += exp((double)s->val[i] - m) / z;
            if ((cut_p && cum >= s->o.top_p) || (cut_min && s->val[k - 1] < floor_logit))
                return k;
            memcpy(s->val, s->pen, V * sizeof *s->val);
            for (uint32_t i = 0; i < V; i++)
                s->idx[i] = (int32_t)i;
        }
    }
    sort_desc(s->val, s->idx, V);
    return V;
}

int32_t gm_sampler_sample(gm_sampler *s, const float *logits)
{
    const uint32_t V = s->n_vocab;
    float *val = s->val;
    int32_t *idx = s->idx;
    memcpy(val, logits, V * sizeof *val);
    if (s->o.repeat_penalty != 1.0f) {
        /* each token once, however often it is in the window */
        for (int32_t i = 0; i < s->n_recent; i++) {
            int32_t t = s->recent[i];
            if (t < 0 || (uint32_t)t >= V || (s->seen[t / 8] >> (t % 8) & 1))
                continue;
            s->seen[t / 8] |= (uint8_t)(1u << (t % 8));
            val[t] = val[t] > 0 ? val[t] / s->o.repeat_penalty : val[t] * s->o.repeat_penalty;
        }
        for (int32_t i = 0; i < s->n_recent; i++)
            if (s->recent[i] >= 0 && (uint32_t)s->recent[i] < V)
                s->seen[s->recent[i] / 8] = 0;
    }
    if (s->o.temp <= 0) {
        uint32_t best = 0;
        for (uint32_t i = 1; i < V; i++)
            if (val[i] > val[best])
                best = i;
        return (int32_t)best;
    }
    uint32_t n = V;
    for (uint32_t i = 0; i < V; i++)
        idx[i] = (int32_t)i;
    /* probabilities at temperature 1 for top-p and min-p, as llama.cpp's chain does */
    double mx, sum = 0;
    if (s->o.top_k > 0 && (uint32_t)s->o.top_k < V) {
        n = (uint32_t)s->o.top_k;
        top_k_select(val, idx, V, n);
        mx = val[0];
        for (uint32_t i = 0; i < n; i++)
            sum += exp((double)val[i] - mx);
    } else {
        n = nucleus(s, &mx, &sum);
    }
    if (s->o.top_p < 1.0f) {
        double cum = 0;
        uint32_t keep = n;
        for (uint32_t i = 0; i < n; i++) {
            cum += exp((double)val[i] - mx) / sum;
            if (cum >= s->o.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (s->o.min_p > 0.0f) {
        double floor_logit = mx + log((double)s->o.min_p);
        uint32_t keep = 1;
        while (keep < n && val[keep] >= floor_logit)
            keep++;
        n = keep;
    }
    sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp(((double)val[i] - mx) / s->o.temp);
    double r = next_unit(s) * sum, cum = 0;
    for (uint32_t i = 0; i < n; i++) {
        cum += exp(((double)val[i] - mx) / s->o.temp);
        if (r < cum)
            return idx[i];
    }
    return idx[n - 1];
}
