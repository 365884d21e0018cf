/* stream/policy: the decode arena's replacement policy, as bookkeeping only.
 *
 * Owns: per MoE layer, the map between that layer's experts and its arena slots (which expert
 * each slot holds, which slot holds each expert), the slot states, the popularity counters and
 * the hit statistics. It owns no weight memory and does no I/O: the arena (stream.c) owns the
 * slot bytes and the reads, and tells this module when a read ends (gm_policy_loaded).
 * docs/arena-policy.md explains the policy and its measurement with gmlx-replay.
 *
 * The policy is decayed LFU (spec 3.3):
 *   - popularity: count[layer][expert] += 1 for each distinct expert of a stage call (not per
 *     token row); every halve_every stage calls *to that layer* all of that layer's counters are
 *     halved (0 = never), so residency follows a recent window. Prestages never count.
 *   - a miss takes an empty slot first (lowest index first), else the READY slot whose expert
 *     is the least popular, ties to the lowest slot index; never a slot whose expert the current
 *     call uses, never a slot that is loading or quarantined. Misses are given their victims in
 *     the order of the call's ids.
 *   - the arena starts empty; there is no background seeder (gm_policy_seed places experts
 *     that a long prefill already holds in the prefill ring).
 *
 * Slot states: EMPTY -> LOADING (handed out for a miss or a prestage) -> READY (gm_policy_loaded
 * ok) or EMPTY (failed load) or QUARANTINED (a wedged read: the slot is not reused while the
 * kernel may still write into it; gm_policy_unquarantine empties it once the read has ended). "The current call" of a layer is its latest stage call,
 * until its next stage call or gm_policy_end: its experts are never evicted, by a stage or a
 * prestage, so a gather still reading them stays valid.
 *
 * Invariants: slot_of and owner are inverse on the slots that are LOADING or READY; the number
 * of such slots is at most the layer's slot count; lookups = hits + misses in every stats
 * record; prestage issued = adopted + unused + failed + (prestages not yet settled).
 * Nothing allocates after gm_policy_create (gm_policy_resize included: slot tables are sized
 * for the create-time slot count, which is the most a layer can regrow to).
 *
 * Threads: a gm_policy belongs to one thread (the engine's); no call is thread-safe.
 */
#ifndef GM_STREAM_POLICY_H
#define GM_STREAM_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define GM_POLICY_HALVE_DEFAULT 4096u

/* What gm_policy_stage says about each expert of a call. */
enum {
    GM_POLICY_MISS = 0, /* absent: the caller reads it into slot_out, then gm_policy_loaded */
    GM_POLICY_HIT = 1,  /* resident and readable now */
    GM_POLICY_JOIN = 2, /* in its slot but still loading (an earlier prestage or read, or the
                           first copy of an id repeated in the call): wait for that read */
};

/* gm_policy_prestage flags. */
enum {
    /* Evict the least popular candidate even when it is more popular than the predicted expert
     * (--moe-prestage keepers: the prediction was already filtered by miss-shed). */
    GM_POLICY_PRESTAGE_HARD = 1u << 0,
};

typedef struct gm_policy gm_policy;

typedef struct gm_policy_stats {
    uint64_t calls;            /* stage calls */
    uint64_t lookups;          /* distinct experts over all stage calls (= hits + misses) */
    uint64_t hits;             /* of them already in a slot (READY, or LOADING: a join) */
    uint64_t misses;           /* of them absent (counted also when the call was refused) */
    uint64_t refused;          /* stage calls answered GM_ERANGE (cannot serve) */
    uint64_t evictions;        /* resident experts displaced by a stage or a prestage */
    uint64_t load_failed;      /* loads that ended with ok = false (demand and prestage) */
    uint64_t quarantined;      /* slots quarantined */
    uint64_t resize_dropped;   /* residents dropped by a shrinking resize */
    uint64_t prestage_issued;  /* prestages that got a slot */
    uint64_t prestage_adopted; /* of them routed by the layer's next stage call */
    uint64_t prestage_done;    /*   of the adopted: already READY at that call */
    uint64_t prestage_joined;  /*   of the adopted: still loading at that call */
    uint64_t prestage_unused;  /* issued, settled by the next stage call without being routed
                                  (or dropped by a resize, or cancelled, first) */
    uint64_t prestage_failed;  /* issued, whose load failed or was quarantined before settling */
    uint64_t prestage_declined;/* prestages refused: no slot, or only more popular victims */
    uint64_t seeded;           /* experts placed by gm_policy_seed */
} gm_policy_stats;

/* Creates the bookkeeping of n_layers layers. Layer l has n_experts[l] experts and
 * n_slots[l] slots; a layer with 0 slots (or 0 experts) is not covered. n_slots above
 * n_experts is cut to n_experts (gm_policy_slots gives the count kept). halve_every: see
 * above; GM_POLICY_HALVE_DEFAULT is the seed's value. GM_EINVAL on a bad argument,
 * GM_ENOMEM. */
int gm_policy_create(gm_policy **out, uint32_t n_layers, const uint32_t *n_experts,
                     const uint32_t *n_slots, uint32_t halve_every, gm_err *err);
void gm_policy_free(gm_policy *p);

uint32_t gm_policy_layers(const gm_policy *p);
bool gm_policy_covers(const gm_policy *p, uint32_t layer);
/* The layer's current slot count (0 when not covered) and the most it can grow to. */
uint32_t gm_policy_slots(const gm_policy *p, uint32_t layer);
uint32_t gm_policy_capacity(const gm_policy *p, uint32_t layer);

/* The per-call functions below fail only on a caller's mistake (GM_EINVAL) or on capacity
 * (GM_ERANGE); they return the code without a gm_err, so nothing is formatted in the per-token
 * path: the caller words the message (it knows the layer and the file).
 *
 * One call of the layer: the k experts a token routes (ids may repeat: a repeat is counted
 * once and gets the first copy's slot, as GM_POLICY_HIT or GM_POLICY_JOIN).
 * First settles the prestages issued since the layer's previous call (routed: adopted, else
 * unused), then counts popularity and lookups, then gives each expert j its slot:
 *   hit_out[j]     GM_POLICY_HIT / GM_POLICY_JOIN / GM_POLICY_MISS
 *   slot_out[j]    the slot (a miss: the slot to read it into, now LOADING)
 *   evicted_out[j] for a miss, the expert that slot held (-1 when it was empty); else -1.
 *                  May be NULL.
 * Returns 0, or:
 *   GM_ERANGE  cannot serve: more distinct experts than slots (gm_policy_slots), or too few
 *              slots that may be replaced (the others are loading, quarantined or used by this
 *              call). Residency is unchanged, but popularity and lookups were counted (the
 *              experts were used; the caller computes them another way), and hits are reported
 *              as usual: misses get slot -1 and GM_POLICY_MISS.
 *   GM_EINVAL  the layer is not covered, an id is out of range or an array is missing; nothing
 *              was changed.
 * Allocates nothing. */
int gm_policy_stage(gm_policy *p, uint32_t layer, const int32_t *experts, uint32_t k,
                    int32_t *slot_out, uint8_t *hit_out, int32_t *evicted_out);

/* Whether gm_policy_stage of these experts would find a slot for each miss now (no change, no
 * count): false when it would answer GM_ERANGE or GM_EINVAL. Lets the caller first wait for
 * loads that hold slots (speculative reads still in flight). */
bool gm_policy_would_fit(const gm_policy *p, uint32_t layer, const int32_t *experts, uint32_t k);

/* Ends the layer's current call early: its experts may be evicted by prestages again. (The next
 * stage call of the layer ends it anyway.) */
void gm_policy_end(gm_policy *p, uint32_t layer);

/* A speculative load of a predicted expert. *slot_out = the slot to read it into (now LOADING),
 * or -1 when nothing is to be done:
 *   - the expert is in a slot already (a READY one is then protected from the prestages that
 *     follow until the layer's next stage call) or loading;
 *   - no slot may be taken: an empty slot is taken first (highest index first, to stay apart
 *     from the demand misses, which take the lowest), else the least popular READY expert that
 *     is not used by the current call, not protected and not itself an unsettled prestage;
 *   - that victim is more popular than the predicted expert (a wrong guess may cost only a cold
 *     slot), unless flags has GM_POLICY_PRESTAGE_HARD.
 * Popularity is never changed. Returns 0, or GM_EINVAL (layer not covered, id out of range). */
int gm_policy_prestage(gm_policy *p, uint32_t layer, int32_t expert, uint32_t flags,
                       int32_t *slot_out);

/* An expert whose bytes the caller copies into the arena from memory it already holds (the
 * prefill ring): it takes the lowest EMPTY slot, READY at once (the caller copies before the
 * next call of the layer), and its popularity counts +1, as a stage call that routed it would.
 * Nothing is evicted: *slot_out = -1 when the expert is in a slot already or no slot is empty.
 * Counts no lookup. GM_EINVAL when the layer is not covered or the id is out of range. */
int gm_policy_seed(gm_policy *p, uint32_t layer, int32_t expert, int32_t *slot_out);

/* The read into a LOADING slot ended: ok -> READY; failed -> EMPTY (the expert is absent again;
 * a later call misses it and reads it again). GM_EINVAL when the slot is not LOADING. A slot
 * handed out by gm_policy_stage or gm_policy_prestage stays LOADING, and out of every victim
 * choice, until this call (or gm_policy_quarantine). */
int gm_policy_loaded(gm_policy *p, uint32_t layer, uint32_t slot, bool ok);

/* The read into a LOADING slot ended cancelled (a prestage the caller gave up as unrouted): the
 * slot goes EMPTY as with gm_policy_loaded false, but a prestage not settled yet counts as
 * unused, not failed. GM_EINVAL when the slot is not LOADING. */
int gm_policy_cancelled(gm_policy *p, uint32_t layer, uint32_t slot);

/* The read of expert into slot failed (gm_policy_loaded false emptied the slot) and the current
 * call uses the expert: takes the slot again for it, LOADING, so the caller reads it once more.
 * GM_EINVAL unless the slot is EMPTY and the expert absent. */
int gm_policy_retake(gm_policy *p, uint32_t layer, uint32_t slot, int32_t expert);

/* A read into a LOADING slot is wedged: the expert is absent again (a later call misses it into
 * another slot) and the slot is not used until gm_policy_unquarantine (the kernel may still
 * write into it). GM_EINVAL when the slot is not LOADING. */
int gm_policy_quarantine(gm_policy *p, uint32_t layer, uint32_t slot);
/* The kernel finally answered a quarantined slot's read: the slot is EMPTY and usable again.
 * GM_EINVAL when the slot is not quarantined. */
int gm_policy_unquarantine(gm_policy *p, uint32_t layer, uint32_t slot);

/* The slot whose bytes hold the expert now (READY), or -1 (absent, loading). */
int32_t gm_policy_lookup(const gm_policy *p, uint32_t layer, int32_t expert);
/* The slot that holds the expert, READY or still loading (a read, or a prestage, on the way),
 * or -1. */
int32_t gm_policy_slot(const gm_policy *p, uint32_t layer, int32_t expert);
/* The expert a slot holds or loads, or -1 (empty, quarantined, out of range). */
int32_t gm_policy_owner(const gm_policy *p, uint32_t layer, uint32_t slot);
/* The expert's popularity counter (0 when out of range). */
float gm_policy_count(const gm_policy *p, uint32_t layer, int32_t expert);

/* Changes the layer's slot count to n_slots (1 .. capacity), for memory-pressure shrink and
 * regrow (spec 3.6), between two calls. Shrinking keeps the most popular residents (ties: the
 * lower slot); kept residents already below n_slots stay where they are, the others move into
 * the freed slots below n_slots, lowest first, so only they need copying and the tail can be
 * released. Growing adds empty slots. Outputs:
 *   src_slot_out[s] (n_slots entries): the old slot whose bytes the new slot s must hold (s
 *                   itself when unmoved), or -1 for an empty slot. Copies never overlap: a
 *                   source at or above n_slots is never a destination.
 *   evicted_out     (capacity for the old slot count; may be NULL): experts dropped, count in
 *                   *n_evicted (may be NULL).
 * GM_ERANGE when n_slots is 0 or above the capacity; GM_EINVAL when the layer is not covered or
 * has a slot LOADING (let the reads end first); GM_EUNSUPPORTED, for good, when it has a
 * quarantined slot (a wedged read may still write into its buffer, so the layer's memory must
 * not move). Nothing changes on an error. */
int gm_policy_resize(gm_policy *p, uint32_t layer, uint32_t n_slots, int32_t *src_slot_out,
                     int32_t *evicted_out, uint32_t *n_evicted);

/* Statistics of one layer (zeros when out of range) and the sum over layers. */
void gm_policy_layer_stats(const gm_policy *p, uint32_t layer, gm_policy_stats *out);
void gm_policy_total_stats(const gm_policy *p, gm_policy_stats *out);

/* Spread of per-layer hit rates (hits / lookups in %) over the layers with lookups > 0. The
 * median is the seed's: the element at index n/2 of the rates sorted ascending (ties by layer
 * index). coldest[] lists up to 3 layers of lowest rate, coldest first. */
typedef struct gm_policy_spread {
    uint32_t n_layers;         /* layers with lookups */
    double min_pct, median_pct, max_pct;
    uint32_t min_layer, median_layer, max_layer;
    uint32_t n_coldest;
    uint32_t coldest[3];
    double coldest_pct[3];
} gm_policy_spread;

/* Pure: the spread of hits[l] / lookups[l] over l < n. Also used by gmlx-replay for the
 * policies it simulates itself. */
void gm_policy_spread_of(const uint64_t *hits, const uint64_t *lookups, uint32_t n,
                         gm_policy_spread *out);
void gm_policy_get_spread(const gm_policy *p, gm_policy_spread *out);

/* Writes the exit lines into buf (snprintf rules: returns the length the whole text needs,
 * writes at most cap bytes, NUL-terminated when cap > 0), each ending with '\n'; nothing when
 * no lookup was made:
 *   [stream] decode feeder arena hit rate: 87.5% (7 of 8 expert lookups)
 *   [stream] decode feeder per-layer hit rate: min 50.0% / median 90.0% / max 100.0% over 58 MoE
 *            layers; coldest: L3 50.0%, L7 61.2%, L9 70.0%              (one line)
 *   [stream] lookahead prestage: 12 predicted expert reads, 9 adopted by routing (7 already
 *            done, 2 joined), 2 unused, 1 discarded (failed)            (only when issued > 0)
 * Allocates nothing. */
size_t gm_policy_format_stats(const gm_policy *p, char *buf, size_t cap);

/* The per-layer part alone, same rules: "min 50.0% / median 90.0% / max 100.0% over 58 MoE
 * layers; coldest: L3 50.0%, L7 61.2%, L9 70.0%" (no newline). */
size_t gm_policy_format_spread(const gm_policy *p, char *buf, size_t cap);

#endif
