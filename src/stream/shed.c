/* The lossy levers' rules, draws and counters (shed.h). */
#include "stream/shed.h"

#include <stdlib.h>
#include <string.h>

const float gm_shed_probe_p[GM_SHED_PROBE_N] = {0.70f, 0.80f, 0.82f, 0.85f, 0.87f, 0.90f, 0.95f, 0.99f};

struct gm_shed {
    gm_shed_opts o;
    uint32_t n_layer, k_route;
    uint64_t *rng; /* [n_layer] layer-shed generators */
    gm_shed_stats st;
    /* the probe: per phase (0 decode, 1 prefill) and share, tokens by experts kept (0 .. k) and
     * the sum of the dropped shares */
    uint64_t hist[2][GM_SHED_PROBE_N][GM_SHED_MAX_K + 1];
    double dropped[2][GM_SHED_PROBE_N];
};

bool gm_shed_opts_any(const gm_shed_opts *o)
{
    return o && (o->experts || o->expert_mass > 0 || o->probe || o->miss_shed > 0 || o->keepers ||
                 o->layer_shed > 0);
}

int gm_shed_opts_check(const gm_shed_opts *o, uint32_t n_expert, gm_err *err)
{
    if (o->experts > GM_SHED_MAX_K || (n_expert && o->experts > n_expert))
        return gm_err_set(err, GM_EINVAL, "--moe-experts %u: the model has %u experts per layer (at most %u "
                          "per token here)", o->experts, n_expert, GM_SHED_MAX_K);
    if (!(o->expert_mass >= 0 && o->expert_mass <= 1))
        return gm_err_set(err, GM_EINVAL, "--moe-expert-mass %g: a share above 0 and at most 1", o->expert_mass);
    if (!(o->miss_shed >= 0 && o->miss_shed <= 1))
        return gm_err_set(err, GM_EINVAL, "--moe-miss-shed %g: a share above 0 and at most 1", o->miss_shed);
    if (!(o->layer_shed >= 0 && o->layer_shed < 1))
        return gm_err_set(err, GM_EINVAL, "--moe-layer-shed %g: a probability above 0 and below 1", o->layer_shed);
    if (o->expert_mass > 0 && o->probe)
        return gm_err_set(err, GM_EINVAL, "--moe-expert-mass and --moe-expert-probe exclude each other (the "
                          "probe measures the trained routing)");
    return 0;
}

void gm_shed_opts_flags(const gm_shed_opts *o, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(buf + n, cap - n, "%s", n ? " " : "");                                   \
        n += w_ > 0 && (size_t)w_ < cap - n ? (size_t)w_ : 0;                                      \
        w_ = snprintf(buf + n, cap - n, __VA_ARGS__);                                              \
        n += w_ > 0 && (size_t)w_ < cap - n ? (size_t)w_ : 0;                                      \
    } while (0)
    if (o->experts)
        ADD("--moe-experts %u", o->experts);
    if (o->expert_mass > 0)
        ADD("--moe-expert-mass %g", o->expert_mass);
    if (o->probe)
        ADD("--moe-expert-probe");
    if (o->miss_shed > 0)
        ADD("--moe-miss-shed %g", o->miss_shed);
    if (o->keepers)
        ADD("--moe-prestage keepers");
    if (o->layer_shed > 0)
        ADD("--moe-layer-shed %g", o->layer_shed);
#undef ADD
}

/* Slot order by weight, highest first, ties in slot order (insertion sort: k <= 64). */
static void order_desc(const float *w, uint32_t k, uint8_t *ord)
{
    for (uint32_t i = 0; i < k; i++) {
        uint32_t j = i;
        while (j > 0 && w[ord[j - 1]] < w[i]) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = (uint8_t)i;
    }
}

uint32_t gm_shed_mass_count(const float *w, uint32_t k, float p, float *dropped)
{
    uint8_t ord[GM_SHED_MAX_K];
    if (k > GM_SHED_MAX_K)
        k = GM_SHED_MAX_K;
    order_desc(w, k, ord);
    float total = 0;
    for (uint32_t j = 0; j < k; j++)
        total += w[ord[j]];
    float prefix = 0;
    uint32_t n = 0;
    for (; n < k; n++) {
        if (n > 0 && !(prefix < p * total))
            break;
        prefix += w[ord[n]];
    }
    if (dropped)
        *dropped = total > 0 ? (total - prefix) / total : 0.0f;
    return n;
}

uint32_t gm_shed_mass(int32_t *ids, float *w, uint32_t k, float p)
{
    if (k == 0)
        return 0;
    if (k > GM_SHED_MAX_K)
        k = GM_SHED_MAX_K;
    uint8_t ord[GM_SHED_MAX_K];
    order_desc(w, k, ord);
    int32_t id2[GM_SHED_MAX_K];
    float w2[GM_SHED_MAX_K];
    float total = 0;
    for (uint32_t j = 0; j < k; j++) {
        id2[j] = ids[ord[j]];
        w2[j] = w[ord[j]];
        total += w2[j];
    }
    float prefix = 0;
    uint32_t n = 0;
    for (; n < k; n++) {
        if (n > 0 && !(prefix < p * total))
            break;
        prefix += w2[n];
    }
    const float scale = total / (prefix + 1e-20f);
    for (uint32_t j = 0; j < k; j++) {
        ids[j] = id2[j];
        w[j] = j < n ? w2[j] * scale : 0.0f;
    }
    return n;
}

uint32_t gm_shed_miss(int32_t *ids, float *w, bool *miss, uint32_t k, float p, float *shed_frac)
{
    *shed_frac = 0;
    if (k == 0)
        return 0;
    if (k > GM_SHED_MAX_K)
        k = GM_SHED_MAX_K;
    float total = 0;
    bool any = false;
    for (uint32_t j = 0; j < k; j++) {
        total += w[j];
        any |= miss[j];
    }
    if (!any)
        return k;
    /* ascending weight, ties in slot order: the descending order read backwards would put ties
     * in reverse, so sort ascending directly */
    uint8_t asc[GM_SHED_MAX_K];
    for (uint32_t i = 0; i < k; i++) {
        uint32_t j = i;
        while (j > 0 && w[asc[j - 1]] > w[i]) {
            asc[j] = asc[j - 1];
            j--;
        }
        asc[j] = (uint8_t)i;
    }
    const float budget = (1.0f - p) * total;
    bool drop[GM_SHED_MAX_K] = {0};
    float shed = 0;
    uint32_t kept = k;
    for (uint32_t i = 0; i < k && kept > 1; i++) {
        const uint32_t j = asc[i];
        if (!miss[j])
            continue;
        if (shed + w[j] > budget)
            break;
        shed += w[j];
        drop[j] = true;
        kept--;
    }
    if (kept == k)
        return k;
    const float scale = total / (total - shed);
    int32_t id2[GM_SHED_MAX_K];
    float w2[GM_SHED_MAX_K];
    bool m2[GM_SHED_MAX_K];
    uint32_t a = 0, b = kept;
    for (uint32_t j = 0; j < k; j++) {
        const uint32_t to = drop[j] ? b++ : a++;
        id2[to] = ids[j];
        w2[to] = drop[j] ? 0.0f : w[j] * scale;
        m2[to] = drop[j] ? false : miss[j];
    }
    memcpy(ids, id2, k * sizeof *ids);
    memcpy(w, w2, k * sizeof *w);
    memcpy(miss, m2, k * sizeof *miss);
    *shed_frac = total > 0 ? shed / total : 0.0f;
    return kept;
}

uint32_t gm_shed_keepers(int32_t *ids, float *w, bool *miss, uint32_t k, float p, int32_t *keep)
{
    float frac;
    const uint32_t kept = gm_shed_miss(ids, w, miss, k, p, &frac);
    uint32_t n = 0;
    for (uint32_t j = 0; j < kept; j++)
        if (miss[j])
            keep[n++] = ids[j];
    return n;
}

int gm_shed_create(gm_shed **out, const gm_shed_opts *o, uint32_t n_layer, uint32_t k_route, gm_err *err)
{
    *out = NULL;
    int rc = gm_shed_opts_check(o, 0, err);
    if (rc)
        return rc;
    gm_shed *s = calloc(1, sizeof *s);
    if (!s || !(s->rng = calloc(n_layer ? n_layer : 1, sizeof *s->rng))) {
        free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory for the lossy levers' state");
    }
    s->o = *o;
    s->n_layer = n_layer;
    s->k_route = k_route > GM_SHED_MAX_K ? GM_SHED_MAX_K : k_route;
    for (uint32_t l = 0; l < n_layer; l++)
        s->rng[l] = 0x5EEDull ^ l;
    *out = s;
    return 0;
}

void gm_shed_free(gm_shed *s)
{
    if (!s)
        return;
    free(s->rng);
    free(s);
}

const gm_shed_opts *gm_shed_get_opts(const gm_shed *s) { return &s->o; }

/* splitmix64: a full-period generator whose every output is well mixed, seedable from any
 * value (the per-layer seeds differ in their low bits only). */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

bool gm_shed_layer_draw(gm_shed *s, uint32_t layer)
{
    if (s->o.layer_shed <= 0 || layer >= s->n_layer)
        return false;
    const double u = (double)(next_u64(&s->rng[layer]) >> 11) * 0x1.0p-53; /* [0, 1) */
    const bool skip = u < s->o.layer_shed;
    s->st.layer_skips += skip;
    return skip;
}

void gm_shed_probe_add(gm_shed *s, const float *w, uint32_t k, bool decode)
{
    const int ph = decode ? 0 : 1;
    if (k > GM_SHED_MAX_K)
        k = GM_SHED_MAX_K;
    s->st.probe_calls[ph]++;
    for (int i = 0; i < GM_SHED_PROBE_N; i++) {
        float dropped;
        uint32_t n = gm_shed_mass_count(w, k, gm_shed_probe_p[i], &dropped);
        s->hist[ph][i][n]++;
        s->dropped[ph][i] += dropped;
    }
}

void gm_shed_count_mass(gm_shed *s, uint32_t routed, uint32_t kept)
{
    s->st.mass_tokens++;
    s->st.mass_routed += routed;
    s->st.mass_kept += kept;
}

void gm_shed_count_miss(gm_shed *s, uint32_t shed, float shed_frac)
{
    if (!shed)
        return;
    s->st.miss_shed += shed;
    s->st.miss_token_layers++;
    s->st.miss_frac_sum += shed_frac;
}

void gm_shed_count_keepers(gm_shed *s, uint32_t misses, uint32_t kept)
{
    s->st.keeper_calls++;
    s->st.keeper_misses += misses;
    s->st.keeper_kept += kept;
}

void gm_shed_get_stats(const gm_shed *s, gm_shed_stats *out) { *out = s->st; }

/* The first count whose cumulative share of the tokens reaches q. */
static uint32_t quantile(const uint64_t *hist, uint32_t k, uint64_t n, double q)
{
    uint64_t acc = 0;
    for (uint32_t c = 0; c <= k; c++) {
        acc += hist[c];
        if ((double)acc >= q * (double)n)
            return c;
    }
    return k;
}

void gm_shed_print(const gm_shed *s, gm_strbuf *out)
{
    const gm_shed_stats *st = &s->st;
    if (st->miss_shed)
        gm_strbuf_putf(out, "[stream] miss-shed: %llu experts shed over %llu token-layers (avg %.1f%% of routed mass "
                       "where shed)\n", (unsigned long long)st->miss_shed, (unsigned long long)st->miss_token_layers,
                       100.0 * st->miss_frac_sum / (double)st->miss_token_layers);
    if (st->layer_skips)
        gm_strbuf_putf(out, "[stream] layer-shed: %llu token-layer routed paths skipped (shared expert only)\n",
                       (unsigned long long)st->layer_skips);
    if (st->keeper_calls)
        gm_strbuf_putf(out, "[stream] keeper prestage: %llu of %llu predicted misses kept for read-ahead over %llu "
                       "predictions\n", (unsigned long long)st->keeper_kept, (unsigned long long)st->keeper_misses,
                       (unsigned long long)st->keeper_calls);
    if (st->mass_tokens)
        gm_strbuf_putf(out, "[stream] expert-mass %g: %.2f of %.2f experts/token kept over %llu token-layers\n",
                       s->o.expert_mass, (double)st->mass_kept / (double)st->mass_tokens,
                       (double)st->mass_routed / (double)st->mass_tokens, (unsigned long long)st->mass_tokens);
    static const char *phase[2] = {"decode", "prefill"};
    for (int ph = 0; ph < 2; ph++) {
        const uint64_t n = st->probe_calls[ph];
        if (!n)
            continue;
        gm_strbuf_putf(out, "[experts] %s fan-out probe over %llu token-layer router calls (selection k=%u):\n",
                       phase[ph], (unsigned long long)n, s->k_route);
        gm_strbuf_putf(out, "  P      avg   p10  p50  p90  expert reads  dropped mass\n");
        for (int i = 0; i < GM_SHED_PROBE_N; i++) {
            const uint64_t *h = s->hist[ph][i];
            double sum = 0;
            for (uint32_t c = 0; c <= s->k_route; c++)
                sum += (double)c * (double)h[c];
            const double avg = sum / (double)n;
            gm_strbuf_putf(out, "  %.2f  %5.1f %4u %4u %4u %11.0f%% %11.2f%%\n", gm_shed_probe_p[i], avg,
                           quantile(h, s->k_route, n, 0.10), quantile(h, s->k_route, n, 0.50),
                           quantile(h, s->k_route, n, 0.90), s->k_route ? 100.0 * avg / s->k_route : 0.0,
                           100.0 * s->dropped[ph][i] / (double)n);
        }
    }
}
