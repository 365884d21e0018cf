/* stream/shed: the lossy levers (docs/streaming.md "Lossy settings"; spec section 6).
 *
 * Owns: the levers' options and their checks, the selection rules as pure functions (the expert
 * mass cut, the miss-shed walk), the layer-shed draws (one generator per layer), the expert
 * probe's histograms, and the counters and lines printed at exit. The engine (infer/moe.c)
 * decides where each lever acts and calls these.
 *
 * All levers are off by default and act only on a streamed model's MoE layers (--stream-experts
 * or --stream-cpu, or the automatic placement when the experts do not fit):
 * - expert cap (--moe-experts K): each token routes to K experts, prefill and decode;
 * - expert mass (--moe-expert-mass P): each token keeps the fewest of its experts, highest
 *   weight first, that cover share P of its routing weight, prefill and decode;
 * - expert probe (--moe-expert-probe, lossless): records what each P of a grid would keep;
 * - miss-shed (--moe-miss-shed P): a decode token drops experts that are neither in the arena
 *   nor being read into it, lowest weight first, while the dropped weight stays within 1 - P;
 * - keeper prestage (--moe-prestage keepers, needs miss-shed): lookahead reads only the
 *   predicted experts that miss-shed would keep;
 * - layer-shed (--moe-layer-shed P): a decode token skips a layer's routed experts with
 *   probability P where the layer has a shared expert (which still runs).
 *
 * Threads: a gm_shed belongs to the engine's thread; the pure functions have no state.
 */
#ifndef GMLX_STREAM_SHED_H
#define GMLX_STREAM_SHED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "base/strbuf.h"

/* The probe's grid of shares. */
#define GM_SHED_PROBE_N 8
extern const float gm_shed_probe_p[GM_SHED_PROBE_N];
/* The most experts one token routes to that the levers handle. */
#define GM_SHED_MAX_K GM_LEVERS_MAX_EXPERTS

/* The levers' settings (gmlx.h gm_levers: field by field what each flag sets). */
typedef gm_levers gm_shed_opts;

/* True when any lever (or the probe) is set. */
bool gm_shed_opts_any(const gm_shed_opts *o);
/* The ranges above, and the rules between levers (mass and probe exclude each other). K is
 * checked against n_expert (0: not known yet, only K >= 1). GM_EINVAL naming the flag. */
int gm_shed_opts_check(const gm_shed_opts *o, uint32_t n_expert, gm_err *err);
/* The flags set, as a user typed them ("--moe-experts 6 --moe-layer-shed 0.1"), for messages. */
void gm_shed_opts_flags(const gm_shed_opts *o, char *buf, size_t cap);

/* Expert mass: the k slots (ids, w) are sorted by weight, highest first (ties keep their
 * order); slot j is kept while the weights before it sum to less than p x the total (slot 0
 * always); the kept weights are scaled back to the whole total (w x total / (kept + 1e-20)),
 * the dropped ones set to 0 after them. Returns the number kept (>= 1 when k >= 1). */
uint32_t gm_shed_mass(int32_t *ids, float *w, uint32_t k, float p);

/* How many slots expert mass would keep at share p, and the share of the weight it would drop;
 * w need not be sorted (the probe). */
uint32_t gm_shed_mass_count(const float *w, uint32_t k, float p, float *dropped);

/* Miss-shed of one token: miss[j] marks the slots whose expert would wait for the disk. Walking
 * the slots by ascending weight (ties in slot order), a miss is dropped while the dropped weight
 * stays within (1 - p) x the total; the walk stops at the first miss that would pass it, and
 * when one slot is left. Kept slots move to the front in their order, the dropped ones follow
 * (weight 0, miss cleared); when something was dropped the kept weights are scaled back to the
 * whole total. Returns the number kept; *shed_frac = dropped weight / total. */
uint32_t gm_shed_miss(int32_t *ids, float *w, bool *miss, uint32_t k, float p, float *shed_frac);

/* Keeper prestage: a prediction routed as if now (k slots; miss[j]: its expert is not present)
 * goes through gm_shed_miss at p; the misses it keeps (the reads the lookahead may issue) go to
 * keep[] in slot order. Returns their count. ids, w and miss are left as gm_shed_miss leaves
 * them. */
uint32_t gm_shed_keepers(int32_t *ids, float *w, bool *miss, uint32_t k, float p, int32_t *keep);

typedef struct gm_shed gm_shed;

/* k_route: the experts a token routes to after the cap (for the probe's "expert reads"). */
int gm_shed_create(gm_shed **out, const gm_shed_opts *o, uint32_t n_layer, uint32_t k_route, gm_err *err);
void gm_shed_free(gm_shed *s);
const gm_shed_opts *gm_shed_get_opts(const gm_shed *s);

/* Layer-shed's draw for one decode call at layer l: true when its routed experts are skipped.
 * Each layer has its own generator (seeded 0x5EED ^ l): the pattern repeats for the same
 * sequence of calls. Counts the skips. */
bool gm_shed_layer_draw(gm_shed *s, uint32_t layer);

/* The probe: one token's routing weights (k of them) at a call of n_tok tokens (1: decode). */
void gm_shed_probe_add(gm_shed *s, const float *w, uint32_t k, bool decode);
/* Counts for the exit lines. */
void gm_shed_count_mass(gm_shed *s, uint32_t routed, uint32_t kept);
void gm_shed_count_miss(gm_shed *s, uint32_t shed, float shed_frac);
void gm_shed_count_keepers(gm_shed *s, uint32_t misses, uint32_t kept);

typedef struct gm_shed_stats {
    uint64_t mass_tokens, mass_routed, mass_kept; /* expert mass: token-layers, experts before, after */
    uint64_t miss_shed, miss_token_layers;        /* miss-shed: experts dropped, token-layers with one */
    double miss_frac_sum;                         /* sum of the dropped share over those token-layers */
    uint64_t layer_skips;                         /* layer-shed: routed paths skipped */
    uint64_t keeper_calls, keeper_misses, keeper_kept; /* keepers: predictions, their misses, kept */
    uint64_t probe_calls[2];                      /* the probe's token-layers: [0] decode, [1] prefill */
} gm_shed_stats;
void gm_shed_get_stats(const gm_shed *s, gm_shed_stats *out);

/* Appends the exit lines to out: "[stream] miss-shed: ...", "[stream] layer-shed: ...",
 * "[stream] keeper prestage: ...", "[stream] expert-mass: ..." (each when its counter is not zero)
 * and the probe's tables. */
void gm_shed_print(const gm_shed *s, gm_strbuf *out);

#endif
