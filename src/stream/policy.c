/* stream/policy: decayed-LFU slot bookkeeping of the decode arena (see policy.h). */
#include "stream/policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"

enum { ST_EMPTY = 0, ST_READY = 1, ST_LOADING = 2, ST_QUARANTINED = 3 };

/* Slot flags. */
enum {
    FL_PRESTAGED = 1u << 0, /* an issued prestage not yet settled by a stage call */
};

typedef struct resident {
    float count;
    int32_t slot;
} resident;

typedef struct pol_layer {
    uint32_t n_experts;
    uint32_t n_slots;       /* current */
    uint32_t cap_slots;     /* at create: the tables' size */
    uint32_t since_halve;   /* stage calls since the last halving */
    uint32_t epoch;         /* stamp of the current call (0 = none yet) */
    uint32_t n_unsettled;   /* slots with FL_PRESTAGED */
    float *count;           /* [n_experts] popularity */
    int32_t *slot_of;       /* [n_experts] slot holding or loading e, else -1 */
    uint32_t *mark;         /* [n_experts] epoch of the latest call that routed e */
    int32_t *owner;         /* [cap] expert, or -1 */
    uint8_t *state;         /* [cap] ST_* */
    uint8_t *flags;         /* [cap] FL_* */
    uint32_t *prot;         /* [cap] epoch in which a prestage protected the slot */
    int32_t *victims;       /* [cap] scratch: victim slots of one call */
    int32_t *miss_idx;      /* [cap] scratch: indices into the call's ids of its misses */
    resident *res;          /* [cap] scratch for resize */
    gm_policy_stats st;
} pol_layer;

struct gm_policy {
    uint32_t n_layers;
    uint32_t halve_every;
    pol_layer *layers;
};

static pol_layer *covered(gm_policy *p, uint32_t l)
{
    if (!p || l >= p->n_layers || p->layers[l].cap_slots == 0)
        return NULL;
    return &p->layers[l];
}

static const pol_layer *covered_c(const gm_policy *p, uint32_t l)
{
    if (!p || l >= p->n_layers || p->layers[l].cap_slots == 0)
        return NULL;
    return &p->layers[l];
}

static void layer_free(pol_layer *L)
{
    free(L->count);
    free(L->slot_of);
    free(L->mark);
    free(L->owner);
    free(L->state);
    free(L->flags);
    free(L->prot);
    free(L->victims);
    free(L->miss_idx);
    free(L->res);
}

void gm_policy_free(gm_policy *p)
{
    if (!p)
        return;
    for (uint32_t l = 0; l < p->n_layers; l++)
        layer_free(&p->layers[l]);
    free(p->layers);
    free(p);
}

int gm_policy_create(gm_policy **out, uint32_t n_layers, const uint32_t *n_experts,
                     const uint32_t *n_slots, uint32_t halve_every, gm_err *err)
{
    if (!out)
        return gm_err_set(err, GM_EINVAL, "policy: no output pointer");
    *out = NULL;
    if (n_layers > 0 && (!n_experts || !n_slots))
        return gm_err_set(err, GM_EINVAL, "policy: no expert or slot counts");
    for (uint32_t l = 0; l < n_layers; l++)
        if (n_experts[l] > (uint32_t)INT32_MAX)
            return gm_err_set(err, GM_EINVAL, "policy: layer %u has %u experts (at most %d)", l,
                              n_experts[l], INT32_MAX);
    gm_policy *p = calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "policy: out of memory");
    p->n_layers = n_layers;
    p->halve_every = halve_every;
    if (n_layers > 0) {
        p->layers = calloc(n_layers, sizeof *p->layers);
        if (!p->layers) {
            free(p);
            return gm_err_set(err, GM_ENOMEM, "policy: out of memory");
        }
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        pol_layer *L = &p->layers[l];
        uint32_t ne = n_experts[l], ns = n_slots[l] < ne ? n_slots[l] : ne;
        if (ns == 0)
            continue; /* not covered */
        L->n_experts = ne;
        L->n_slots = L->cap_slots = ns;
        L->count = calloc(ne, sizeof *L->count);
        L->slot_of = malloc((size_t)ne * sizeof *L->slot_of);
        L->mark = calloc(ne, sizeof *L->mark);
        L->owner = malloc((size_t)ns * sizeof *L->owner);
        L->state = calloc(ns, sizeof *L->state);
        L->flags = calloc(ns, sizeof *L->flags);
        L->prot = calloc(ns, sizeof *L->prot);
        L->victims = malloc((size_t)ns * sizeof *L->victims);
        L->miss_idx = malloc((size_t)ns * sizeof *L->miss_idx);
        L->res = malloc((size_t)ns * sizeof *L->res);
        if (!L->count || !L->slot_of || !L->mark || !L->owner || !L->state || !L->flags ||
            !L->prot || !L->victims || !L->miss_idx || !L->res) {
            gm_policy_free(p);
            return gm_err_set(err, GM_ENOMEM, "policy: out of memory for layer %u (%u experts)",
                              l, ne);
        }
        for (uint32_t e = 0; e < ne; e++)
            L->slot_of[e] = -1;
        for (uint32_t s = 0; s < ns; s++)
            L->owner[s] = -1;
    }
    *out = p;
    return 0;
}

uint32_t gm_policy_layers(const gm_policy *p) { return p ? p->n_layers : 0; }

bool gm_policy_covers(const gm_policy *p, uint32_t layer) { return covered_c(p, layer) != NULL; }

uint32_t gm_policy_slots(const gm_policy *p, uint32_t layer)
{
    const pol_layer *L = covered_c(p, layer);
    return L ? L->n_slots : 0;
}

uint32_t gm_policy_capacity(const gm_policy *p, uint32_t layer)
{
    const pol_layer *L = covered_c(p, layer);
    return L ? L->cap_slots : 0;
}

/* Starts a new call epoch; on wrap-around the stamps are cleared so none looks current. */
static void next_epoch(pol_layer *L)
{
    if (++L->epoch == 0) {
        memset(L->mark, 0, (size_t)L->n_experts * sizeof *L->mark);
        memset(L->prot, 0, (size_t)L->cap_slots * sizeof *L->prot);
        L->epoch = 1;
    }
}

static bool in_current_call(const pol_layer *L, int32_t e)
{
    return L->epoch != 0 && L->mark[e] == L->epoch;
}

/* Inserts slot s with popularity c into the sorted list v[0..*n) that keeps the `want` least
 * popular; a tie keeps the earlier (lower) slot first, which is the seed's stable sort. */
static void keep_least(const pol_layer *L, int32_t *v, uint32_t *n, uint32_t want, int32_t s)
{
    float c = L->count[L->owner[s]];
    if (*n == want && !(c < L->count[L->owner[v[*n - 1]]]))
        return;
    uint32_t i = *n < want ? (*n)++ : *n - 1;
    while (i > 0 && c < L->count[L->owner[v[i - 1]]]) {
        v[i] = v[i - 1];
        i--;
    }
    v[i] = s;
}

static void settle_prestages(pol_layer *L)
{
    for (uint32_t s = 0; s < L->n_slots && L->n_unsettled > 0; s++) {
        if (!(L->flags[s] & FL_PRESTAGED))
            continue;
        L->flags[s] &= (uint8_t)~FL_PRESTAGED;
        L->n_unsettled--;
        if (in_current_call(L, L->owner[s])) {
            L->st.prestage_adopted++;
            if (L->state[s] == ST_READY)
                L->st.prestage_done++;
            else
                L->st.prestage_joined++;
        } else {
            L->st.prestage_unused++;
        }
    }
}

static void halve_if_due(gm_policy *p, pol_layer *L)
{
    if (p->halve_every == 0 || ++L->since_halve < p->halve_every)
        return;
    L->since_halve = 0;
    for (uint32_t e = 0; e < L->n_experts; e++)
        L->count[e] *= 0.5f;
}

int gm_policy_stage(gm_policy *p, uint32_t l, const int32_t *experts, uint32_t k,
                    int32_t *slot_out, uint8_t *hit_out, int32_t *evicted_out)
{
    pol_layer *L = covered(p, l);
    if (!L || (k > 0 && (!experts || !slot_out || !hit_out)))
        return GM_EINVAL;
    for (uint32_t j = 0; j < k; j++)
        if (experts[j] < 0 || (uint32_t)experts[j] >= L->n_experts)
            return GM_EINVAL;

    next_epoch(L);
    /* Distinct ids; a repeat is flagged by slot_out = -2 until the end. */
    uint32_t n_uniq = 0;
    for (uint32_t j = 0; j < k; j++) {
        int32_t e = experts[j];
        if (L->mark[e] == L->epoch) {
            slot_out[j] = -2;
            continue;
        }
        L->mark[e] = L->epoch;
        slot_out[j] = 0;
        n_uniq++;
    }
    if (L->n_unsettled)
        settle_prestages(L);

    /* Popularity and lookups count before any refusal: the experts were used either way. */
    for (uint32_t j = 0; j < k; j++)
        if (slot_out[j] != -2)
            L->count[experts[j]] += 1.0f;
    L->st.calls++;
    halve_if_due(p, L);

    uint32_t n_miss = 0;
    for (uint32_t j = 0; j < k; j++) {
        if (evicted_out)
            evicted_out[j] = -1;
        if (slot_out[j] == -2)
            continue;
        int32_t s = L->slot_of[experts[j]];
        if (s >= 0) {
            slot_out[j] = s;
            hit_out[j] = L->state[s] == ST_READY ? GM_POLICY_HIT : GM_POLICY_JOIN;
        } else {
            slot_out[j] = -1;
            hit_out[j] = GM_POLICY_MISS;
            if (n_miss < L->n_slots)
                L->miss_idx[n_miss] = (int32_t)j;
            n_miss++;
        }
    }
    L->st.lookups += n_uniq;
    L->st.hits += n_uniq - n_miss;
    L->st.misses += n_miss;

    int rc = 0;
    if (n_uniq > L->n_slots) {
        rc = GM_ERANGE; /* more distinct experts than slots */
    } else if (n_miss > 0) {
        /* Victims: empty slots, lowest first, then the least popular replaceable residents. */
        uint32_t nv = 0;
        for (uint32_t s = 0; s < L->n_slots && nv < n_miss; s++)
            if (L->state[s] == ST_EMPTY)
                L->victims[nv++] = (int32_t)s;
        if (nv < n_miss) {
            uint32_t want = n_miss - nv, nr = 0;
            int32_t *v = L->victims + nv;
            for (uint32_t s = 0; s < L->n_slots; s++)
                if (L->state[s] == ST_READY && !in_current_call(L, L->owner[s]))
                    keep_least(L, v, &nr, want, (int32_t)s);
            nv += nr;
        }
        if (nv < n_miss) {
            rc = GM_ERANGE; /* the other slots are loading, quarantined or used by this call */
        } else {
            for (uint32_t i = 0; i < n_miss; i++) {
                uint32_t j = (uint32_t)L->miss_idx[i];
                int32_t s = L->victims[i], old = L->owner[s];
                if (old >= 0) {
                    L->slot_of[old] = -1;
                    L->st.evictions++;
                }
                if (evicted_out)
                    evicted_out[j] = old;
                L->owner[s] = experts[j];
                L->slot_of[experts[j]] = s;
                L->state[s] = ST_LOADING;
                L->flags[s] = 0;
                slot_out[j] = s;
            }
        }
    }
    if (rc)
        L->st.refused++;

    /* Repeats take the first copy's answer; a first copy that misses now loads, so a repeat
     * joins it (or misses too when the call was refused). */
    for (uint32_t j = 0; j < k; j++) {
        if (slot_out[j] != -2)
            continue;
        int32_t s = L->slot_of[experts[j]];
        slot_out[j] = s;
        hit_out[j] = s < 0 ? GM_POLICY_MISS : L->state[s] == ST_READY ? GM_POLICY_HIT : GM_POLICY_JOIN;
    }
    return rc;
}

bool gm_policy_would_fit(const gm_policy *p, uint32_t l, const int32_t *experts, uint32_t k)
{
    const pol_layer *L = covered_c(p, l);
    if (!L || !experts)
        return false;
    uint32_t n_uniq = 0, n_miss = 0, room = 0;
    for (uint32_t j = 0; j < k; j++) {
        if (experts[j] < 0 || (uint32_t)experts[j] >= L->n_experts)
            return false;
        bool repeat = false;
        for (uint32_t i = 0; i < j; i++)
            repeat |= experts[i] == experts[j];
        if (repeat)
            continue;
        n_uniq++;
        n_miss += L->slot_of[experts[j]] < 0;
    }
    for (uint32_t s = 0; s < L->n_slots && room < n_miss; s++) {
        if (L->state[s] == ST_EMPTY) {
            room++;
        } else if (L->state[s] == ST_READY) {
            bool used = false;
            for (uint32_t j = 0; j < k; j++)
                used |= L->owner[s] == experts[j];
            room += !used;
        }
    }
    return n_uniq <= L->n_slots && room >= n_miss;
}

void gm_policy_end(gm_policy *p, uint32_t l)
{
    pol_layer *L = covered(p, l);
    if (L)
        next_epoch(L);
}

int gm_policy_prestage(gm_policy *p, uint32_t l, int32_t expert, uint32_t flags,
                       int32_t *slot_out)
{
    pol_layer *L = covered(p, l);
    if (!L || !slot_out)
        return GM_EINVAL;
    *slot_out = -1;
    if (expert < 0 || (uint32_t)expert >= L->n_experts)
        return GM_EINVAL;
    int32_t have = L->slot_of[expert];
    if (have >= 0) {
        if (L->state[have] == ST_READY)
            L->prot[have] = L->epoch;
        return 0;
    }
    int32_t s = -1;
    for (uint32_t i = L->n_slots; i-- > 0;)
        if (L->state[i] == ST_EMPTY) {
            s = (int32_t)i;
            break;
        }
    if (s < 0) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < L->n_slots; i++)
            if (L->state[i] == ST_READY && !in_current_call(L, L->owner[i]) &&
                !(L->prot[i] == L->epoch && L->epoch) && !(L->flags[i] & FL_PRESTAGED))
                keep_least(L, &s, &n, 1, (int32_t)i);
        if (n == 0 || (!(flags & GM_POLICY_PRESTAGE_HARD) &&
                       L->count[L->owner[s]] > L->count[expert])) {
            L->st.prestage_declined++;
            return 0;
        }
        L->slot_of[L->owner[s]] = -1;
        L->st.evictions++;
    }
    L->owner[s] = expert;
    L->slot_of[expert] = s;
    L->state[s] = ST_LOADING;
    L->flags[s] = FL_PRESTAGED;
    L->n_unsettled++;
    L->st.prestage_issued++;
    *slot_out = s;
    return 0;
}

int gm_policy_seed(gm_policy *p, uint32_t l, int32_t expert, int32_t *slot_out)
{
    pol_layer *L = covered(p, l);
    if (!L || !slot_out)
        return GM_EINVAL;
    *slot_out = -1;
    if (expert < 0 || (uint32_t)expert >= L->n_experts)
        return GM_EINVAL;
    if (L->slot_of[expert] >= 0)
        return 0;
    for (uint32_t i = 0; i < L->n_slots; i++)
        if (L->state[i] == ST_EMPTY) {
            L->owner[i] = expert;
            L->slot_of[expert] = (int32_t)i;
            L->state[i] = ST_READY;
            L->flags[i] = 0;
            L->count[expert] += 1.0f;
            L->st.seeded++;
            *slot_out = (int32_t)i;
            return 0;
        }
    return 0;
}

/* Empties a LOADING slot whose read did not complete; state is EMPTY or QUARANTINED. */
static void unload(pol_layer *L, uint32_t s, uint8_t state)
{
    int32_t e = L->owner[s];
    L->slot_of[e] = -1;
    L->owner[s] = -1;
    L->state[s] = state;
    if (L->flags[s] & FL_PRESTAGED) {
        L->n_unsettled--;
        L->st.prestage_failed++;
    }
    L->flags[s] = 0;
}

/* The layer of a LOADING slot, or NULL. */
static pol_layer *loading_slot(gm_policy *p, uint32_t l, uint32_t s)
{
    pol_layer *L = covered(p, l);
    return L && s < L->n_slots && L->state[s] == ST_LOADING ? L : NULL;
}

int gm_policy_loaded(gm_policy *p, uint32_t l, uint32_t s, bool ok)
{
    pol_layer *L = loading_slot(p, l, s);
    if (!L)
        return GM_EINVAL;
    if (ok) {
        L->state[s] = ST_READY;
    } else {
        L->st.load_failed++;
        unload(L, s, ST_EMPTY);
    }
    return 0;
}

int gm_policy_cancelled(gm_policy *p, uint32_t l, uint32_t s)
{
    pol_layer *L = loading_slot(p, l, s);
    if (!L)
        return GM_EINVAL;
    if (L->flags[s] & FL_PRESTAGED) {
        L->flags[s] &= (uint8_t)~FL_PRESTAGED;
        L->n_unsettled--;
        L->st.prestage_unused++;
    }
    unload(L, s, ST_EMPTY);
    return 0;
}

int gm_policy_retake(gm_policy *p, uint32_t l, uint32_t s, int32_t expert)
{
    pol_layer *L = covered(p, l);
    if (!L || s >= L->n_slots || L->state[s] != ST_EMPTY || expert < 0 ||
        (uint32_t)expert >= L->n_experts || L->slot_of[expert] >= 0)
        return GM_EINVAL;
    L->owner[s] = expert;
    L->slot_of[expert] = (int32_t)s;
    L->state[s] = ST_LOADING;
    L->flags[s] = 0;
    return 0;
}

int gm_policy_quarantine(gm_policy *p, uint32_t l, uint32_t s)
{
    pol_layer *L = loading_slot(p, l, s);
    if (!L)
        return GM_EINVAL;
    L->st.quarantined++;
    unload(L, s, ST_QUARANTINED);
    return 0;
}

int gm_policy_unquarantine(gm_policy *p, uint32_t l, uint32_t s)
{
    pol_layer *L = covered(p, l);
    if (!L || s >= L->n_slots || L->state[s] != ST_QUARANTINED)
        return GM_EINVAL;
    L->state[s] = ST_EMPTY;
    return 0;
}

int32_t gm_policy_lookup(const gm_policy *p, uint32_t l, int32_t expert)
{
    const pol_layer *L = covered_c(p, l);
    if (!L || expert < 0 || (uint32_t)expert >= L->n_experts)
        return -1;
    int32_t s = L->slot_of[expert];
    return s >= 0 && L->state[s] == ST_READY ? s : -1;
}

int32_t gm_policy_slot(const gm_policy *p, uint32_t l, int32_t expert)
{
    const pol_layer *L = covered_c(p, l);
    if (!L || expert < 0 || (uint32_t)expert >= L->n_experts)
        return -1;
    int32_t s = L->slot_of[expert];
    return s >= 0 && (L->state[s] == ST_READY || L->state[s] == ST_LOADING) ? s : -1;
}

int32_t gm_policy_owner(const gm_policy *p, uint32_t l, uint32_t s)
{
    const pol_layer *L = covered_c(p, l);
    if (!L || s >= L->n_slots)
        return -1;
    return L->owner[s];
}

float gm_policy_count(const gm_policy *p, uint32_t l, int32_t expert)
{
    const pol_layer *L = covered_c(p, l);
    if (!L || expert < 0 || (uint32_t)expert >= L->n_experts)
        return 0.0f;
    return L->count[expert];
}

/* Most popular first; ties: the lower slot first. A total order, so qsort is deterministic. */
static int by_popularity(const void *a, const void *b)
{
    const resident *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

int gm_policy_resize(gm_policy *p, uint32_t l, uint32_t n, int32_t *src_slot_out,
                     int32_t *evicted_out, uint32_t *n_evicted)
{
    pol_layer *L = covered(p, l);
    if (!L || !src_slot_out)
        return GM_EINVAL;
    if (n == 0 || n > L->cap_slots)
        return GM_ERANGE;
    for (uint32_t s = 0; s < L->n_slots; s++)
        if (L->state[s] == ST_QUARANTINED)
            return GM_EUNSUPPORTED;
    for (uint32_t s = 0; s < L->n_slots; s++)
        if (L->state[s] == ST_LOADING)
            return GM_EINVAL;
    uint32_t old = L->n_slots, dropped = 0;
    if (n >= old) {
        for (uint32_t s = 0; s < n; s++) {
            src_slot_out[s] = s < old ? (int32_t)s : -1;
            if (s >= old) {
                L->owner[s] = -1;
                L->state[s] = ST_EMPTY;
                L->flags[s] = 0;
                L->prot[s] = 0;
            }
        }
    } else {
        uint32_t nr = 0;
        for (uint32_t s = 0; s < old; s++)
            if (L->state[s] == ST_READY)
                L->res[nr++] = (resident){L->count[L->owner[s]], (int32_t)s};
        qsort(L->res, nr, sizeof *L->res, by_popularity);
        /* Drop everything past the first n, then move kept residents from the tail into the
         * holes below n. victims[] marks which old slots are kept (1) for the move pass. */
        for (uint32_t s = 0; s < old; s++)
            L->victims[s] = 0;
        for (uint32_t i = 0; i < nr; i++) {
            int32_t s = L->res[i].slot;
            if (i < n) {
                L->victims[s] = 1;
                continue;
            }
            int32_t e = L->owner[s];
            if (evicted_out)
                evicted_out[dropped] = e;
            dropped++;
            L->slot_of[e] = -1;
            L->owner[s] = -1;
            L->state[s] = ST_EMPTY;
            if (L->flags[s] & FL_PRESTAGED) {
                L->n_unsettled--;
                L->st.prestage_unused++;
            }
            L->flags[s] = 0;
        }
        uint32_t hole = 0;
        for (uint32_t s = 0; s < n; s++)
            src_slot_out[s] = L->victims[s] ? (int32_t)s : -1;
        for (uint32_t s = n; s < old; s++) {
            if (!L->victims[s])
                continue;
            while (L->victims[hole])
                hole++; /* a hole below n exists: at most n residents are kept */
            L->victims[hole] = 1;
            src_slot_out[hole] = (int32_t)s;
            L->owner[hole] = L->owner[s];
            L->state[hole] = ST_READY;
            L->flags[hole] = L->flags[s];
            L->slot_of[L->owner[hole]] = (int32_t)hole;
            L->owner[s] = -1;
            L->state[s] = ST_EMPTY;
            L->flags[s] = 0;
        }
        for (uint32_t s = 0; s < L->cap_slots; s++)
            L->prot[s] = 0;
        L->st.resize_dropped += dropped;
    }
    L->n_slots = n;
    if (n_evicted)
        *n_evicted = dropped;
    return 0;
}

static void add_stats(gm_policy_stats *a, const gm_policy_stats *b)
{
    a->calls += b->calls;
    a->lookups += b->lookups;
    a->hits += b->hits;
    a->misses += b->misses;
    a->refused += b->refused;
    a->evictions += b->evictions;
    a->load_failed += b->load_failed;
    a->quarantined += b->quarantined;
    a->resize_dropped += b->resize_dropped;
    a->prestage_issued += b->prestage_issued;
    a->prestage_adopted += b->prestage_adopted;
    a->prestage_done += b->prestage_done;
    a->prestage_joined += b->prestage_joined;
    a->prestage_unused += b->prestage_unused;
    a->prestage_failed += b->prestage_failed;
    a->prestage_declined += b->prestage_declined;
    a->seeded += b->seeded;
}

void gm_policy_layer_stats(const gm_policy *p, uint32_t l, gm_policy_stats *out)
{
    memset(out, 0, sizeof *out);
    const pol_layer *L = covered_c(p, l);
    if (L)
        *out = L->st;
}

void gm_policy_total_stats(const gm_policy *p, gm_policy_stats *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t l = 0; p && l < p->n_layers; l++)
        add_stats(out, &p->layers[l].st);
}

/* Compares a/b with c/d exactly (b, d > 0) by their continued fractions: -1, 0 or 1. */
static int frac_cmp(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    int sign = 1;
    for (;;) {
        uint64_t qa = a / b, qc = c / d;
        if (qa != qc)
            return qa < qc ? -sign : sign;
        uint64_t ra = a % b, rc = c % d;
        if (ra == 0 || rc == 0)
            return sign * ((ra != 0) - (rc != 0));
        /* ra/b vs rc/d is the reverse of b/ra vs d/rc. */
        a = b;
        b = ra;
        c = d;
        d = rc;
        sign = -sign;
    }
}

/* Where the per-layer counts come from: two arrays, or a policy's stats. */
typedef struct rate_src {
    const uint64_t *hits, *lookups;
    const gm_policy *p;
    uint32_t n;
} rate_src;

static void rate_get(const rate_src *r, uint32_t l, uint64_t *h, uint64_t *k)
{
    if (r->p) {
        *h = r->p->layers[l].st.hits;
        *k = r->p->layers[l].st.lookups;
    } else {
        *h = r->hits[l];
        *k = r->lookups[l];
    }
}

static void spread(const rate_src *r, gm_policy_spread *out)
{
    memset(out, 0, sizeof *out);
    uint32_t m = 0;
    for (uint32_t l = 0; l < r->n; l++) {
        uint64_t h, k;
        rate_get(r, l, &h, &k);
        m += k > 0;
    }
    out->n_layers = m;
    if (m == 0)
        return;
    /* The rank of each layer in (rate, layer index) order; O(m^2), m being a layer count. */
    for (uint32_t a = 0; a < r->n; a++) {
        uint64_t ha, ka;
        rate_get(r, a, &ha, &ka);
        if (ka == 0)
            continue;
        uint32_t rank = 0;
        for (uint32_t b = 0; b < r->n; b++) {
            uint64_t hb, kb;
            rate_get(r, b, &hb, &kb);
            if (b == a || kb == 0)
                continue;
            int c = frac_cmp(hb, kb, ha, ka);
            rank += c < 0 || (c == 0 && b < a);
        }
        double pct = 100.0 * (double)ha / (double)ka;
        if (rank == 0) {
            out->min_pct = pct;
            out->min_layer = a;
        }
        if (rank == m / 2) {
            out->median_pct = pct;
            out->median_layer = a;
        }
        if (rank == m - 1) {
            out->max_pct = pct;
            out->max_layer = a;
        }
        if (rank < 3) {
            out->coldest[rank] = a;
            out->coldest_pct[rank] = pct;
        }
    }
    out->n_coldest = m < 3 ? m : 3;
}

void gm_policy_spread_of(const uint64_t *hits, const uint64_t *lookups, uint32_t n,
                         gm_policy_spread *out)
{
    rate_src r = {hits, lookups, NULL, (hits && lookups) ? n : 0};
    spread(&r, out);
}

void gm_policy_get_spread(const gm_policy *p, gm_policy_spread *out)
{
    rate_src r = {NULL, NULL, p, p ? p->n_layers : 0};
    spread(&r, out);
}

/* snprintf into buf at *len, tracking the length the whole text needs. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) GM_PRINTF(4, 5);
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *at = *len < cap ? buf + *len : NULL;
    int w = vsnprintf(at, at ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (w > 0)
        *len += (size_t)w;
}

/* The spread text shared by gm_policy_format_spread and gm_policy_format_stats. */
static void put_spread(const gm_policy *p, char *buf, size_t cap, size_t *len)
{
    gm_policy_spread sp;
    gm_policy_get_spread(p, &sp);
    put(buf, cap, len, "min %.1f%% / median %.1f%% / max %.1f%% over %u MoE layers; coldest:",
        sp.min_pct, sp.median_pct, sp.max_pct, sp.n_layers);
    for (uint32_t i = 0; i < sp.n_coldest; i++)
        put(buf, cap, len, "%s L%u %.1f%%", i ? "," : "", sp.coldest[i], sp.coldest_pct[i]);
}

size_t gm_policy_format_spread(const gm_policy *p, char *buf, size_t cap)
{
    size_t len = 0;
    if (!buf)
        cap = 0;
    if (cap > 0)
        buf[0] = '\0';
    put_spread(p, buf, cap, &len);
    return len;
}

size_t gm_policy_format_stats(const gm_policy *p, char *buf, size_t cap)
{
    size_t len = 0;
    if (!buf)
        cap = 0;
    if (cap > 0)
        buf[0] = '\0';
    gm_policy_stats t;
    gm_policy_total_stats(p, &t);
    if (t.lookups == 0)
        return 0;
    put(buf, cap, &len, "[stream] decode feeder arena hit rate: %.1f%% (%llu of %llu expert lookups)\n",
        100.0 * (double)t.hits / (double)t.lookups, (unsigned long long)t.hits,
        (unsigned long long)t.lookups);
    put(buf, cap, &len, "[stream] decode feeder per-layer hit rate: ");
    put_spread(p, buf, cap, &len);
    put(buf, cap, &len, "\n");
    if (t.prestage_issued > 0)
        put(buf, cap, &len, "[stream] lookahead prestage: %llu predicted expert reads, %llu adopted "
            "by routing (%llu already done, %llu joined), %llu unused, %llu discarded (failed)\n",
            (unsigned long long)t.prestage_issued, (unsigned long long)t.prestage_adopted,
            (unsigned long long)t.prestage_done, (unsigned long long)t.prestage_joined,
            (unsigned long long)t.prestage_unused, (unsigned long long)t.prestage_failed);
    return len;
}
