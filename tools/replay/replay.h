/* tools/replay: routing traces (GMLX_LOG_ROUTED) and their replay against arena policies.
 *
 * Owns: gm_trace (a parsed trace, immutable once loaded) and the three replays that gmlx-replay
 * compares at equal slots per layer:
 *   LRU     evict the slot used longest ago (ties: lowest slot);
 *   LFU     the engine's decayed LFU, run through src/stream/policy.c itself, so the tool
 *           measures the real policy;
 *   Belady  the optimal offline policy: evict the expert whose next use in that layer is the
 *           farthest in the future (never used again counts as infinitely far; ties: lowest
 *           slot).
 * All three: a layer's slots start empty, empty slots are filled lowest first, an expert used by
 * the current call is never evicted, every miss is loaded at once (no failed reads, no
 * prestage). A hit is a distinct expert of a call that was already in a slot.
 *
 * Trace format (docs/arena-policy.md): one text line per (decode token, MoE layer),
 *   TOKEN LAYER E1 E2 ... EK\n
 * decimal, separated by spaces or tabs; TOKEN counts decode tokens from 0 and each line's token
 * is the previous line's or the next one; the lines of one token come in strictly increasing
 * layer order; the ids of a line are distinct; K is the same on every line unless varying K is
 * allowed. Blank lines and lines starting with '#' are skipped.
 *
 * Threads: pure functions on caller-owned values; a gm_trace may be shared read-only.
 */
#ifndef GM_TOOLS_REPLAY_H
#define GM_TOOLS_REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "stream/policy.h"

#define GM_TRACE_MAX_LAYER 65535u    /* bounds what a hostile trace can make us allocate */
#define GM_TRACE_MAX_EXPERT 1048575u

typedef struct gm_trace {
    uint64_t n_lines;      /* calls (token-layers) */
    uint64_t n_ids;        /* ids over all lines */
    uint32_t n_tokens;     /* distinct tokens */
    uint32_t n_layers;     /* highest layer + 1 */
    uint32_t n_present;    /* layers that appear */
    uint32_t k_min, k_max; /* ids per line */
    uint32_t *line_layer;  /* [n_lines] */
    uint64_t *line_off;    /* [n_lines + 1]: the ids of line i are ids[line_off[i] .. line_off[i+1]) */
    int32_t *ids;          /* [n_ids] */
    uint32_t *n_experts;   /* [n_layers]: highest id seen in the layer + 1; 0: layer absent */
    uint32_t *layer_k_max; /* [n_layers]: most ids on one line of the layer */
} gm_trace;

/* Parses a trace from f. name prefixes error messages: "NAME:LINE: what is wrong" (GM_EFORMAT),
 * GM_EIO when f cannot be read, GM_ENOMEM. On error *t is left empty. */
int gm_trace_parse(FILE *f, const char *name, bool allow_varying_k, gm_trace *t, gm_err *err);
/* Opens and parses path. */
int gm_trace_load(const char *path, bool allow_varying_k, gm_trace *t, gm_err *err);
void gm_trace_free(gm_trace *t);

typedef enum gm_replay_kind {
    GM_REPLAY_LRU = 0,
    GM_REPLAY_LFU,
    GM_REPLAY_BELADY,
    GM_REPLAY_STATIC, /* hindsight: each layer keeps the N experts it routes most over the whole
                         trace, each loaded at its first use. Under independent routing (no
                         temporal locality) no online policy does better on average */
    GM_REPLAY_KINDS
} gm_replay_kind;

const char *gm_replay_kind_name(gm_replay_kind k);

typedef struct gm_replay_result {
    uint64_t calls, lookups, hits;
    uint32_t n_layers;
    uint64_t *layer_hits;    /* [n_layers] */
    uint64_t *layer_lookups; /* [n_layers] */
    gm_policy_spread spread; /* over the layers with lookups */
} gm_replay_result;

/* Replays t with slots[l] slots in layer l (n_layers entries; 0 leaves the layer out of the
 * replay; values above the layer's expert count are cut to it). halve_every is LFU's (0 =
 * never). GM_ERANGE when a covered layer has fewer slots than a line of it routes ids (the
 * message names the layer). Fills *r (free with gm_replay_result_free). */
int gm_replay_run(const gm_trace *t, gm_replay_kind kind, const uint32_t *slots,
                  uint32_t halve_every, gm_replay_result *r, gm_err *err);
void gm_replay_result_free(gm_replay_result *r);

/* Reads a per-layer slot file: lines "LAYER SLOTS" (decimal; blank and '#' lines skipped) into
 * slots[0..n_layers); layers the file does not name keep their value. Layers at or above
 * n_layers are ignored. GM_EFORMAT with "PATH:LINE: ...", GM_EIO. */
int gm_replay_load_slots(const char *path, uint32_t *slots, uint32_t n_layers, gm_err *err);

#endif
