/* tools/replay: trace parsing and the LRU / LFU / Belady replays (see replay.h). */
#include "replay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable arrays (parse time only) ---- */

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    if (c > SIZE_MAX / elem)
        return -1;
    void *q = realloc(*p, (size_t)(c * elem));
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

void gm_trace_free(gm_trace *t)
{
    if (!t)
        return;
    free(t->line_layer);
    free(t->line_off);
    free(t->ids);
    free(t->n_experts);
    free(t->layer_k_max);
    memset(t, 0, sizeof *t);
}

/* Reads the next decimal field of s at *pos; 1 and the value, 0 at the end of the line, -1 when
 * the field is not a decimal number at most max. */
static int next_field(const char *s, size_t *pos, uint64_t max, uint64_t *v, const char **bad)
{
    size_t i = *pos;
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    if (s[i] == '\0' || s[i] == '\n' || (s[i] == '\r' && (s[i + 1] == '\n' || s[i + 1] == '\0')))
        return 0;
    *bad = s + i;
    if (s[i] < '0' || s[i] > '9')
        return -1;
    uint64_t x = 0;
    while (s[i] >= '0' && s[i] <= '9') {
        x = x * 10 + (uint64_t)(s[i] - '0');
        if (x > max)
            return -1;
        i++;
    }
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' && s[i] != '\0')
        return -1;
    *pos = i;
    *v = x;
    return 1;
}

/* The first few characters of a bad field, for the message. */
static void field_text(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    while (s[n] && s[n] != ' ' && s[n] != '\t' && s[n] != '\n' && s[n] != '\r' && n + 1 < cap &&
           n < 24) {
        out[n] = s[n];
        n++;
    }
    out[n] = '\0';
}

static bool skip_line(const char *s)
{
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')
        i++;
    return s[i] == '\0' || s[i] == '\n' || s[i] == '#';
}

int gm_trace_parse(FILE *f, const char *name, bool allow_varying_k, gm_trace *t, gm_err *err)
{
    memset(t, 0, sizeof *t);
    uint64_t cap_lines = 0, cap_off = 0, cap_ids = 0, cap_layers = 0, cap_kmax = 0;
    char *line = NULL;
    size_t line_cap = 0;
    uint64_t lineno = 0, prev_token = 0;
    uint32_t prev_layer = 0;
    uint32_t *seen = NULL; /* [GM_TRACE_MAX_EXPERT + 1] line stamp, to find repeated ids */
    int rc = 0;
    ssize_t got;
    char what[32];

    seen = calloc(GM_TRACE_MAX_EXPERT + 1, sizeof *seen);
    if (!seen || grow((void **)&t->line_off, &cap_off, 1, sizeof *t->line_off)) {
        rc = gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
        goto out;
    }
    t->line_off[0] = 0;
    errno = 0;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if ((size_t)got != strlen(line)) {
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: a NUL byte in the line", name,
                            (unsigned long long)lineno);
            goto out;
        }
        if (skip_line(line))
            continue;
        size_t pos = 0;
        uint64_t tok, lay, v;
        const char *bad = line;
        int r = next_field(line, &pos, UINT32_MAX - 1, &tok, &bad);
        if (r <= 0) {
            field_text(bad, what, sizeof what);
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: the token '%s' is not a decimal number",
                            name, (unsigned long long)lineno, what);
            goto out;
        }
        r = next_field(line, &pos, GM_TRACE_MAX_LAYER, &lay, &bad);
        if (r <= 0) {
            field_text(bad, what, sizeof what);
            rc = r == 0 ? gm_err_set(err, GM_EFORMAT, "%s:%llu: the line ends after the token; "
                                     "expected TOKEN LAYER E1 ... EK", name, (unsigned long long)lineno)
                        : gm_err_set(err, GM_EFORMAT, "%s:%llu: the layer '%s' is not a decimal "
                                     "number up to %u", name, (unsigned long long)lineno, what,
                                     GM_TRACE_MAX_LAYER);
            goto out;
        }
        if (t->n_lines > 0) {
            if (tok != prev_token && tok != prev_token + 1) {
                rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: token %llu follows token %llu (tokens "
                                "must count up by one)", name, (unsigned long long)lineno,
                                (unsigned long long)tok, (unsigned long long)prev_token);
                goto out;
            }
            if (tok == prev_token && lay <= prev_layer) {
                rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: layer %llu out of order (token %llu "
                                "already had layer %u; layers must increase within a token)",
                                name, (unsigned long long)lineno, (unsigned long long)lay,
                                (unsigned long long)tok, prev_layer);
                goto out;
            }
        }
        if (t->n_lines == 0 || tok != prev_token)
            t->n_tokens++;
        prev_token = tok;
        prev_layer = (uint32_t)lay;

        uint32_t k = 0;
        uint64_t stamp = t->n_lines + 1; /* fits: lines < 2^32 checked below */
        while ((r = next_field(line, &pos, GM_TRACE_MAX_EXPERT, &v, &bad)) == 1) {
            if (seen[v] == (uint32_t)stamp) {
                rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: expert %llu appears twice in the line",
                                name, (unsigned long long)lineno, (unsigned long long)v);
                goto out;
            }
            seen[v] = (uint32_t)stamp;
            if (grow((void **)&t->ids, &cap_ids, t->n_ids + 1, sizeof *t->ids)) {
                rc = gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
                goto out;
            }
            t->ids[t->n_ids++] = (int32_t)v;
            k++;
            if (lay >= t->n_layers) {
                uint64_t n = lay + 1;
                if (grow((void **)&t->n_experts, &cap_layers, n, sizeof *t->n_experts) ||
                    grow((void **)&t->layer_k_max, &cap_kmax, n, sizeof *t->layer_k_max)) {
                    rc = gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
                    goto out;
                }
                for (uint64_t l = t->n_layers; l < n; l++)
                    t->n_experts[l] = t->layer_k_max[l] = 0;
                t->n_layers = (uint32_t)n;
            }
            if (v + 1 > t->n_experts[lay])
                t->n_experts[lay] = (uint32_t)(v + 1);
        }
        if (r < 0) {
            field_text(bad, what, sizeof what);
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: the expert id '%s' is not a decimal number "
                            "up to %u", name, (unsigned long long)lineno, what, GM_TRACE_MAX_EXPERT);
            goto out;
        }
        if (k == 0) {
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: no expert ids; expected TOKEN LAYER E1 ... EK",
                            name, (unsigned long long)lineno);
            goto out;
        }
        if (t->n_lines > 0 && !allow_varying_k && k != t->k_max) {
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: %u expert ids where earlier lines have %u "
                            "(K must not vary; --varying-k accepts it)", name,
                            (unsigned long long)lineno, k, t->k_max);
            goto out;
        }
        if (t->n_lines == 0 || k < t->k_min)
            t->k_min = k;
        if (k > t->k_max)
            t->k_max = k;
        if (k > t->layer_k_max[lay])
            t->layer_k_max[lay] = k;
        if (t->n_lines + 1 >= UINT32_MAX) {
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: more than %u lines", name,
                            (unsigned long long)lineno, UINT32_MAX - 2);
            goto out;
        }
        if (grow((void **)&t->line_layer, &cap_lines, t->n_lines + 1, sizeof *t->line_layer) ||
            grow((void **)&t->line_off, &cap_off, t->n_lines + 2, sizeof *t->line_off)) {
            rc = gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
            goto out;
        }
        t->line_layer[t->n_lines] = (uint32_t)lay;
        t->line_off[++t->n_lines] = t->n_ids;
        errno = 0;
    }
    if (ferror(f)) {
        rc = gm_err_errno(err, GM_EIO, errno, "%s: read failed after line %llu", name,
                          (unsigned long long)lineno);
        goto out;
    }
    if (t->n_lines == 0) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: no trace lines (expected TOKEN LAYER E1 ... EK)", name);
        goto out;
    }
    for (uint32_t l = 0; l < t->n_layers; l++)
        t->n_present += t->n_experts[l] > 0;
out:
    free(seen);
    free(line);
    if (rc)
        gm_trace_free(t);
    return rc;
}

int gm_trace_load(const char *path, bool allow_varying_k, gm_trace *t, gm_err *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot open", path);
    int rc = gm_trace_parse(f, path, allow_varying_k, t, err);
    fclose(f);
    return rc;
}

const char *gm_replay_kind_name(gm_replay_kind k)
{
    switch (k) {
    case GM_REPLAY_LRU: return "LRU";
    case GM_REPLAY_LFU: return "LFU";
    case GM_REPLAY_BELADY: return "Belady";
    case GM_REPLAY_STATIC: return "Static";
    default: return "?";
    }
}

void gm_replay_result_free(gm_replay_result *r)
{
    if (!r)
        return;
    free(r->layer_hits);
    free(r->layer_lookups);
    memset(r, 0, sizeof *r);
}

/* ---- LRU and Belady: one slot table per layer ---- */

typedef struct sim_layer {
    uint32_t n_slots, n_experts;
    int32_t *owner;   /* [n_slots] expert or -1 */
    uint64_t *key;    /* [n_slots] LRU: last use (line index + 1); Belady: unused */
    int32_t *slot_of; /* [n_experts] */
    uint64_t *mark;   /* [n_experts] line index + 1 of the latest call that routed e */
    uint64_t *next;   /* [n_experts] Belady: next line that routes e (UINT64_MAX: never) */
} sim_layer;

static void sim_free(sim_layer *s, uint32_t n)
{
    for (uint32_t l = 0; s && l < n; l++) {
        free(s[l].owner);
        free(s[l].key);
        free(s[l].slot_of);
        free(s[l].mark);
        free(s[l].next);
    }
    free(s);
}

/* The victim slot of a miss: an empty slot (lowest first), else the slot not used by the call
 * with the least LRU key, or (Belady) the farthest next use; ties to the lowest slot. */
static int32_t sim_victim(const sim_layer *L, bool belady, uint64_t stamp)
{
    int32_t best = -1;
    uint64_t best_v = 0;
    for (uint32_t s = 0; s < L->n_slots; s++) {
        int32_t e = L->owner[s];
        if (e < 0)
            return (int32_t)s;
        if (L->mark[e] == stamp)
            continue;
        uint64_t v = belady ? L->next[e] : L->key[s];
        if (best < 0 || (belady ? v > best_v : v < best_v)) {
            best = (int32_t)s;
            best_v = v;
        }
    }
    return best;
}

static int run_sim(const gm_trace *t, bool belady, const uint32_t *slots, gm_replay_result *r,
                   gm_err *err)
{
    int rc = 0;
    uint64_t *next_use = NULL; /* [n_ids]: Belady: the next line routing the same (layer, id) */
    uint64_t **last = NULL;    /* per layer [n_experts]: scratch for next_use */
    sim_layer *S = calloc(t->n_layers, sizeof *S);
    if (!S)
        goto nomem;
    for (uint32_t l = 0; l < t->n_layers; l++) {
        sim_layer *L = &S[l];
        uint32_t ne = t->n_experts[l], ns = slots[l] < ne ? slots[l] : ne;
        if (ns == 0)
            continue;
        L->n_slots = ns;
        L->n_experts = ne;
        L->owner = malloc(ns * sizeof *L->owner);
        L->key = calloc(ns, sizeof *L->key);
        L->slot_of = malloc(ne * sizeof *L->slot_of);
        L->mark = calloc(ne, sizeof *L->mark);
        L->next = malloc(ne * sizeof *L->next);
        if (!L->owner || !L->key || !L->slot_of || !L->mark || !L->next)
            goto nomem;
        for (uint32_t s = 0; s < ns; s++)
            L->owner[s] = -1;
        for (uint32_t e = 0; e < ne; e++) {
            L->slot_of[e] = -1;
            L->next[e] = UINT64_MAX;
        }
    }
    if (belady) {
        next_use = malloc((t->n_ids ? t->n_ids : 1) * sizeof *next_use);
        last = calloc(t->n_layers, sizeof *last);
        if (!next_use || !last)
            goto nomem;
        for (uint32_t l = 0; l < t->n_layers; l++) {
            if (S[l].n_slots == 0)
                continue;
            last[l] = malloc(t->n_experts[l] * sizeof **last);
            if (!last[l])
                goto nomem;
            for (uint32_t e = 0; e < t->n_experts[l]; e++)
                last[l][e] = UINT64_MAX;
        }
        for (uint64_t i = t->n_lines; i-- > 0;) {
            uint32_t l = t->line_layer[i];
            if (S[l].n_slots == 0)
                continue;
            for (uint64_t j = t->line_off[i]; j < t->line_off[i + 1]; j++) {
                next_use[j] = last[l][t->ids[j]];
                last[l][t->ids[j]] = i;
            }
        }
    }
    for (uint64_t i = 0; i < t->n_lines; i++) {
        uint32_t l = t->line_layer[i];
        sim_layer *L = &S[l];
        if (L->n_slots == 0)
            continue;
        uint64_t stamp = i + 1, a = t->line_off[i], b = t->line_off[i + 1];
        for (uint64_t j = a; j < b; j++) {
            int32_t e = t->ids[j];
            L->mark[e] = stamp;
            if (belady)
                L->next[e] = next_use[j];
        }
        r->calls++;
        r->lookups += b - a;
        r->layer_lookups[l] += b - a;
        for (uint64_t j = a; j < b; j++) {
            int32_t e = t->ids[j], s = L->slot_of[e];
            if (s >= 0) {
                r->hits++;
                r->layer_hits[l]++;
            } else {
                s = sim_victim(L, belady, stamp);
                if (s < 0) { /* only when the layer has fewer slots than the line's ids */
                    rc = gm_err_set(err, GM_ERANGE, "layer %u: %u slots cannot hold the %llu experts "
                                    "of one call", l, L->n_slots, (unsigned long long)(b - a));
                    goto out;
                }
                if (L->owner[s] >= 0)
                    L->slot_of[L->owner[s]] = -1;
                L->owner[s] = e;
                L->slot_of[e] = s;
            }
            L->key[s] = stamp;
        }
    }
    goto out;
nomem:
    rc = gm_err_set(err, GM_ENOMEM, "replay: out of memory");
out:
    if (last)
        for (uint32_t l = 0; l < t->n_layers; l++)
            free(last[l]);
    free(last);
    free(next_use);
    sim_free(S, t->n_layers);
    return rc;
}

/* ---- LFU: the engine's policy module ---- */

static int run_lfu(const gm_trace *t, const uint32_t *slots, uint32_t halve_every,
                   gm_replay_result *r, gm_err *err)
{
    gm_policy *p = NULL;
    int rc = gm_policy_create(&p, t->n_layers, t->n_experts, slots, halve_every, err);
    if (rc)
        return rc;
    int32_t *slot = malloc((t->k_max ? t->k_max : 1) * sizeof *slot);
    uint8_t *hit = malloc(t->k_max ? t->k_max : 1);
    if (!slot || !hit) {
        rc = gm_err_set(err, GM_ENOMEM, "replay: out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < t->n_lines; i++) {
        uint32_t l = t->line_layer[i];
        if (!gm_policy_covers(p, l))
            continue;
        uint64_t a = t->line_off[i];
        uint32_t k = (uint32_t)(t->line_off[i + 1] - a);
        rc = gm_policy_stage(p, l, t->ids + a, k, slot, hit, NULL);
        if (rc) {
            rc = gm_err_set(err, rc, "layer %u: the policy refused the call of trace line %llu (%u "
                            "ids, %u slots)", l, (unsigned long long)i + 1, k, gm_policy_slots(p, l));
            goto out;
        }
        for (uint32_t j = 0; j < k; j++)
            if (hit[j] == GM_POLICY_MISS && (rc = gm_policy_loaded(p, l, (uint32_t)slot[j], true))) {
                rc = gm_err_set(err, rc, "layer %u: slot %d was not loading", l, (int)slot[j]);
                goto out;
            }
    }
    for (uint32_t l = 0; l < t->n_layers; l++) {
        gm_policy_stats st;
        gm_policy_layer_stats(p, l, &st);
        r->layer_hits[l] = st.hits;
        r->layer_lookups[l] = st.lookups;
        r->calls += st.calls;
        r->hits += st.hits;
        r->lookups += st.lookups;
    }
out:
    free(slot);
    free(hit);
    gm_policy_free(p);
    return rc;
}

/* Static: per layer, the slots most-routed experts (ties to the lower id) stay resident; every
 * use of them after the first is a hit. Lookups count distinct ids per line, as the policy does. */
static int run_static(const gm_trace *t, const uint32_t *slots, gm_replay_result *r, gm_err *err)
{
    for (uint32_t l = 0; l < t->n_layers; l++) {
        uint32_t ne = t->n_experts[l], ns = slots[l] < ne ? slots[l] : ne;
        if (ns == 0)
            continue;
        uint64_t *count = calloc(ne, sizeof *count);
        uint8_t *kept = calloc(ne, 1);
        if (!count || !kept) {
            free(count);
            free(kept);
            return gm_err_set(err, GM_ENOMEM, "replay: out of memory");
        }
        for (uint64_t i = 0; i < t->n_lines; i++) {
            if (t->line_layer[i] != l)
                continue;
            r->calls++;
            for (uint64_t a = t->line_off[i]; a < t->line_off[i + 1]; a++) {
                bool repeat = false;
                for (uint64_t b = t->line_off[i]; b < a; b++)
                    repeat |= t->ids[b] == t->ids[a];
                if (!repeat) {
                    count[t->ids[a]]++;
                    r->layer_lookups[l]++;
                }
            }
        }
        for (uint32_t n = 0; n < ns; n++) {
            int64_t best = -1;
            for (uint32_t e = 0; e < ne; e++)
                if (!kept[e] && (best < 0 || count[e] > count[best]))
                    best = e;
            if (best < 0 || count[best] == 0)
                break;
            kept[best] = 1;
            r->layer_hits[l] += count[best] - 1; /* loaded at its first use */
        }
        r->hits += r->layer_hits[l];
        r->lookups += r->layer_lookups[l];
        free(count);
        free(kept);
    }
    return 0;
}

int gm_replay_run(const gm_trace *t, gm_replay_kind kind, const uint32_t *slots,
                  uint32_t halve_every, gm_replay_result *r, gm_err *err)
{
    memset(r, 0, sizeof *r);
    if (kind >= GM_REPLAY_KINDS)
        return gm_err_set(err, GM_EINVAL, "replay: unknown policy %d", (int)kind);
    for (uint32_t l = 0; l < t->n_layers; l++) {
        uint32_t ns = slots[l] < t->n_experts[l] ? slots[l] : t->n_experts[l];
        if (ns > 0 && ns < t->layer_k_max[l])
            return gm_err_set(err, GM_ERANGE, "layer %u: %u slots cannot hold the %u experts one "
                              "call routes", l, ns, t->layer_k_max[l]);
    }
    r->n_layers = t->n_layers;
    r->layer_hits = calloc(t->n_layers ? t->n_layers : 1, sizeof *r->layer_hits);
    r->layer_lookups = calloc(t->n_layers ? t->n_layers : 1, sizeof *r->layer_lookups);
    if (!r->layer_hits || !r->layer_lookups) {
        gm_replay_result_free(r);
        return gm_err_set(err, GM_ENOMEM, "replay: out of memory");
    }
    int rc = kind == GM_REPLAY_LFU      ? run_lfu(t, slots, halve_every, r, err)
             : kind == GM_REPLAY_STATIC ? run_static(t, slots, r, err)
                                        : run_sim(t, kind == GM_REPLAY_BELADY, slots, r, err);
    if (rc) {
        gm_replay_result_free(r);
        return rc;
    }
    gm_policy_spread_of(r->layer_hits, r->layer_lookups, r->n_layers, &r->spread);
    return 0;
}

int gm_replay_load_slots(const char *path, uint32_t *slots, uint32_t n_layers, gm_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    uint64_t lineno = 0;
    int rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        if (skip_line(line))
            continue;
        size_t pos = 0;
        uint64_t lay, ns, extra;
        const char *bad = line;
        int r1 = next_field(line, &pos, GM_TRACE_MAX_LAYER, &lay, &bad);
        int r2 = r1 == 1 ? next_field(line, &pos, UINT32_MAX, &ns, &bad) : -1;
        int r3 = r2 == 1 ? next_field(line, &pos, UINT64_MAX, &extra, &bad) : -1;
        if (r1 != 1 || r2 != 1 || r3 != 0) {
            rc = gm_err_set(err, GM_EFORMAT, "%s:%llu: expected 'LAYER SLOTS' (two decimal numbers, "
                            "the layer at most %u)", path, (unsigned long long)lineno,
                            GM_TRACE_MAX_LAYER);
            break;
        }
        if (lay < n_layers)
            slots[lay] = (uint32_t)ns;
    }
    if (!rc && ferror(f))
        rc = gm_err_errno(err, GM_EIO, errno, "%s: read failed", path);
    free(line);
    fclose(f);
    return rc;
}
