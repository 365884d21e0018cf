/* stream/stream: routed experts streamed from the SSD into the decode arena.
 *
 * Owns: the decode arena (one anonymous mapping, split evenly over the MoE layers into slots
 * that each hold one expert's gate, up and down slices), its replacement policy (policy.h:
 * decayed LFU), the read engine (io.h: O_DIRECT reads, io_uring or a pread pool), the routing
 * trace (GMLX_LOG_ROUTED) and the statistics printed at exit.
 *
 * The life of a decode call at one layer: the engine knows the token's k experts; gm_stream_begin
 * gives each expert a slot (a hit, or a miss whose three slices are read now, all in flight at
 * once); the engine computes the experts that are ready (gm_stream_get) while the others load,
 * then gm_stream_wait for each remaining one, and gm_stream_end. The arithmetic never changes:
 * an expert computed from a slot is the same bytes as from the file, so streaming is lossless.
 *
 * Slices are read with O_DIRECT, widened to the device's alignment: a slot keeps room for the
 * widening, and the expert's data starts at the slice's offset within the first aligned block.
 * A failed or short read gives GM_EIO naming the layer, expert and file offset; a read stuck
 * past the timeout is cancelled (its slot quarantined until the read ends; one the kernel never
 * returns is abandoned only at exit, see docs/io.md) and the expert is read through the page
 * cache instead, with a printed line, so the output stays exact.
 *
 * Memory pressure (pressure.h): every 64 decode stage calls the feeder reads PSI and
 * MemAvailable; a shrinking step cuts every layer to 75/50/25% of its sized slots, keeping its
 * most popular experts (copied down, the freed tail unlocked and returned to the kernel), each
 * layer at its next call; a regrow step adds empty slots back. Lossless either way.
 *
 * Threads: one owner thread (the engine's) calls everything; the read engine has its own threads.
 */
#ifndef GM_STREAM_STREAM_H
#define GM_STREAM_STREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "io/io.h"
#include "model/model.h"

typedef struct gm_stream gm_stream;

typedef struct gm_stream_opts {
    uint64_t arena_bytes;      /* the plan's decode arena */
    uint32_t k_route;          /* experts a decode call stages (--moe-experts; 0: the model's
                                  top-k): a covered layer holds at least this many slots */
    uint32_t halve_every;      /* popularity halving period in calls per layer (default 4096) */
    uint32_t read_timeout_ms;  /* GMLX_DECODE_READ_TIMEOUT; 0 = wait forever (default 5000) */
    gm_io_backend backend;     /* GM_IO_AUTO: io_uring when available, else the pread pool */
    uint32_t queue_depth;      /* reads on the device at once (default 96): a prompt's sparse ring
                                  reads, a hundred or more runs a layer, are queued while the layer
                                  before computes, and a read the device cannot take waits until
                                  the owner thread next waits on the queue */
    uint32_t spec_depth;       /* of them, the lookahead's speculative reads at most (default 24) */
    const gm_io_fault *fault;  /* tests only */
    bool buffered;             /* read through the page cache instead of O_DIRECT */
    const char *trace_path;    /* GMLX_LOG_ROUTED */
    bool lock_arena;           /* lock the arena at the first decode, its pages as they are first
                                  filled (default true) */
    bool arena_thp;            /* GMLX_DECODE_ARENA_THP: transparent huge pages for the arena
                                  (default on) */
    bool arena_warm;           /* GMLX_DECODE_ARENA_WARM: an idle-priority thread maps the arena's
                                  pages in ahead of use, and the prefill ring seeds only slots
                                  already mapped (default on; see warm.h) */
    bool lookahead;            /* GMLX_DECODE_LOOKAHEAD: prestage predicted experts (default on) */
    bool lookahead_probe;      /* GMLX_DECODE_LOOKAHEAD_PROBE: record predictions, read nothing */
    uint32_t lookahead_k;      /* GMLX_DECODE_LOOKAHEAD_K: prediction ranks read (default 6, max 8) */
    float lookahead_min_p;     /* GMLX_DECODE_LOOKAHEAD_MIN_P: rank gate (default 0.5) */
    float lookahead_hard_p;    /* GMLX_DECODE_LOOKAHEAD_HARD_P: a rank this reliable is read like a
                                  demand miss, evicting the least popular (default 0.9; 1 = never) */
    bool lookahead_cancel;     /* GMLX_DECODE_LOOKAHEAD_CANCEL: cancel unrouted reads (default on) */
    bool pressure;             /* GMLX_DECODE_PRESSURE: shrink/regrow under memory pressure (default on) */
    uint64_t pressure_floor_bytes; /* memory that must stay available (the plan's host floor) */
    uint32_t pressure_poll_every;  /* decode stage calls between polls (0: GM_PRESSURE_POLL_EVERY) */
    const char *psi_path, *meminfo_path; /* tests: stand-ins for /proc/pressure/memory, /proc/meminfo */
    bool prefill_ring;         /* GMLX_FEEDER_PREFILL: prefill chunks read whole layers through the
                                  two-slot ring (default on) */
    uint32_t ring_min_tokens;  /* chunks of at least this many tokens use the ring (default 8) */
    uint32_t ring_min_cover_pct; /* GMLX_FEEDER_PREFILL_COVER: ... and read the whole layer only when
                                    they route to at least this share of its experts (default 50;
                                    0: any) */
    bool ring_sparse;          /* GMLX_FEEDER_PREFILL_SPARSE: below that share, the ring reads only
                                  the routed experts (default on; off: such chunks go through the
                                  arena) */
    bool ring_seed;            /* GMLX_FEEDER_PREFILL_SEED: a layer served from the ring copies the
                                  chunk's experts, most used first, into empty arena slots
                                  (default on) */
} gm_stream_opts;

/* Ranks of a prediction that are recorded (recall @1..@8). */
#define GM_STREAM_PREDICT_MAX 8

/* Expert pointers of one call: slice data for gate, up and down (fused gate_up: [0] and [1]
 * point into the same slice). */
typedef struct gm_stream_expert {
    const uint8_t *data[GM_EXP_KIND_COUNT];
} gm_stream_expert;

void gm_stream_opts_default(gm_stream_opts *o);

/* --stream-fast-disk: the read-ahead a fast drive affords (every predicted rank up to
 * GM_STREAM_PREDICT_MAX read without the rank gate, a rank routed half the time evicting like a
 * demand miss, 64 reads on the device), written into o's lookahead and queue fields. */
void gm_stream_fast_recipe(gm_stream_opts *o);
/* The drive under the model: 64 MiB of the first expert stack (less when it is shorter) in
 * 4 MiB O_DIRECT reads, 8 in flight (through the page cache where the filesystem refuses
 * O_DIRECT). GB/s in *gb_s, -1 when the stack is shorter than one read (nothing measured);
 * GM_EIO when a read fails. */
int gm_stream_drive_test(const gm_gguf *g, const gm_model_desc *m, double *gb_s, gm_err *err);
/* The drive speed from which --stream-fast-disk auto reads ahead harder. */
#define GM_STREAM_FAST_DISK_GB_S 5.0

/* Builds the arena for the MoE layers of m. GM_ENOMEM when the arena cannot be allocated,
 * GM_EINVAL when it holds fewer slots than a token's experts in some layer (such a layer is
 * then not covered: its experts come from the page cache). */
int gm_stream_create(gm_stream **out, const gm_gguf *g, const gm_model_desc *m, const gm_stream_opts *o,
                     gm_err *err);
void gm_stream_free(gm_stream *s);

/* True when layer l's experts go through the arena. */
bool gm_stream_covers(const gm_stream *s, uint32_t layer);
/* Slots of layer l (0 when not covered): the most experts one call may stage. */
uint32_t gm_stream_layer_slots(const gm_stream *s, uint32_t layer);

/* One decode call: the k experts of the token at layer l. Misses are read now. */
int gm_stream_begin(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k, gm_err *err);
/* Expert j of the call when it is already resident (a hit or a finished read): true and its
 * pointers; false while it loads. */
bool gm_stream_get(gm_stream *s, uint32_t j, gm_stream_expert *out);
/* Waits for expert j of the call; fills its pointers. GM_EIO on a failed read. */
int gm_stream_wait(gm_stream *s, uint32_t j, gm_stream_expert *out, gm_err *err);
/* Ends the call (slots are released for replacement). */
void gm_stream_end(gm_stream *s);

/* Lookahead prestage (spec 4.4). While layer l's decode call runs, the engine applies the next
 * covered MoE layer's router to l's normed input (scaled by the ratio of the two layers' norm
 * gains) and hands the ranked prediction here. It is recorded for the recall figures, and, when
 * lookahead is on, the first ranks whose rank gate holds (an EMA per rank of "the prediction at
 * this rank was routed", alpha 1/64, kept at >= lookahead_min_p) that are not resident are read
 * at speculative priority into slots the policy gives (never a more popular expert's, unless the
 * rank's EMA is at least lookahead_hard_p: then the prediction is as good as the routing, and it
 * evicts what the demand miss would), once the
 * current call's demand reads have landed. At the predicted layer's next call, unrouted reads
 * still in flight are cancelled and routed ones are joined. Lossless: predictions move bytes,
 * never routing. */
/* The next covered MoE layer after l, or -1. */
int32_t gm_stream_next_layer(const gm_stream *s, uint32_t l);
/* True when predictions are wanted (lookahead or its probe). */
bool gm_stream_wants_prediction(const gm_stream *s);
/* ranked: up to GM_STREAM_PREDICT_MAX expert ids, most likely first. Call after gm_stream_begin
 * of the current decode call and before its gm_stream_end. */
int gm_stream_predict(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t n, gm_err *err);

/* --moe-prestage keepers: records the ranked prediction as gm_stream_predict does, then reads
 * ahead exactly the keep ids (the predicted experts miss-shed would keep; at most
 * GM_STREAM_PREDICT_MAX), without the rank gate, evicting the least popular slot even when it is
 * more popular than the prediction (GM_POLICY_PRESTAGE_HARD). Needs lookahead on. */
int gm_stream_predict_keepers(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t n,
                              const int32_t *keep, uint32_t n_keep, gm_err *err);
/* True when layer l's expert is in the arena or on its way there (a read or prestage in flight,
 * neither failed nor being cancelled): what miss-shed never drops. */
bool gm_stream_present(const gm_stream *s, uint32_t layer, int32_t expert);
/* A decode call's routing before a lever dropped some of it (miss-shed): the layer's
 * prediction is scored against it (recall, rank gate) instead of against the ids the call's
 * gm_stream_begin then stages. */
void gm_stream_note_routing(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k);
/* A decode call that does not route at layer l (layer-shed): its pending prediction is
 * dropped unscored and its read-ahead still in flight is cancelled. */
void gm_stream_skip(gm_stream *s, uint32_t layer);

/* Per-token phase split (GMLX_DECODE_PHASE_STATS): the engine adds the time of the phases it
 * runs; the stream adds its own (stage bookkeeping, demand waits, prestage submission). Tokens
 * are delimited by gm_stream_token; a window that contains a prefill call is not counted. */
typedef enum gm_stream_phase {
    GM_PHASE_STAGE = 0,  /* staging bookkeeping and demand submission */
    GM_PHASE_WAIT,       /* waiting for expert reads (disk stalls) */
    GM_PHASE_PRESTAGE,   /* lookahead prestage submission */
    GM_PHASE_PREDICT,    /* the lookahead router (engine) */
    GM_PHASE_EXPERTS,    /* routed expert compute of streamed layers (engine) */
    GM_PHASE_COUNT
} gm_stream_phase;
void gm_stream_phase_add(gm_stream *s, gm_stream_phase ph, double seconds);
double gm_stream_now_s(void);
/* Appends "[phase] decode per-token ms over N tokens: ..." to out (nothing when no window was
 * counted). */
void gm_stream_print_phases(const gm_stream *s, gm_strbuf *out);

/* Prefill ring (spec 4.1): two slots, each holding one MoE layer's whole expert stacks. A
 * prefill chunk of at least ring_min_tokens tokens gets layer l's stacks from a slot
 * (gm_stream_ring_layer: they were read while the previous layer computed, or are read now) and
 * the next covered layer is read into the other slot at once, in 64 MiB O_DIRECT reads, so
 * reading layer l+1 overlaps computing layer l. A chunk that routes to fewer than
 * ring_min_cover_pct of a layer's experts gets only those read into the slot (ring_sparse: runs
 * of consecutive experts a read each, at their places in the stacks), once the layer's routing
 * is known: the ring's memory is mapped once and reused, where reads into the arena's fresh
 * slots pay for mapping each page (on a virtual machine about as long as the read). The arena is not touched (no popularity, no
 * slots). The ring is allocated at its first use and released at the first decode token, before
 * the arena is wired. A later long prefill maps it again when the memory free holds it above the
 * host floor; otherwise the arena lends it the memory (every layer shrinks at once, keeping its
 * most popular experts, with a printed line) and regrows at the next decode token. */
/* True when a chunk of n tokens routing to n_used distinct experts at this layer should take the
 * ring (it may still be refused: then gm_stream_ring_layer returns GM_ENOMEM and the caller uses
 * the arena). A whole layer is read only when the chunk uses at least ring_min_cover_pct of its
 * experts (with many experts and few tokens, 512 experts, top-10, 32 tokens, often a tenth of
 * them); below that share the ring reads only the routed ones (ring_sparse), or, with that off,
 * the chunk goes through the arena. The next layer is read ahead only after a whole one. */
bool gm_stream_ring_wanted(const gm_stream *s, uint32_t layer, uint32_t n, uint32_t n_used);
/* Whether the ring reads layer l only for its routed experts when a chunk routes to n_used of
 * them (then the caller may pass a prediction of the next layer's: gm_stream_ring_layer). */
bool gm_stream_ring_sparse(const gm_stream *s, uint32_t layer, uint32_t n_used);
/* Layer l's stacks in a ring slot for a chunk that routes use_count[x] tokens to expert x
 * (n_expert entries; NULL: the whole layer): out->data[kind] is expert 0's slice of each stack
 * (expert x at + x * the kind's expert bytes; only the routed experts' bytes are read when the
 * layer is read sparse). Reads the layer now when it was not prefetched (or the experts a
 * prediction missed), waits for it, and starts reading the next covered layer: whole after a
 * whole layer, else the experts next_use predicts it routes to (n_expert entries of the layer
 * gm_stream_next_layer names; NULL: none). GM_EIO on a failed read (naming the layer and offset),
 * GM_ENOMEM when the ring cannot be had (nothing changed). */
int gm_stream_ring_layer(gm_stream *s, uint32_t layer, const int32_t *use_count, const int32_t *next_use,
                         gm_stream_expert *out, gm_err *err);

/* Seeds the arena from the ring (the seed documents' "arena seeded from the prefill ring"): right after the
 * engine computed layer l's chunk from the ring slot gm_stream_ring_layer gave, the experts the
 * chunk routed (use_count[x]: tokens that routed expert x, n_expert entries), most used first,
 * are copied from that slot into the layer's empty arena slots, READY with one use each
 * (gm_policy_seed): decode then finds them resident instead of reading them again. Never
 * evicts; stops when no slot is empty, when the filled slots would pass the arena's size less
 * the ring's (the ring is still mapped, on memory the plan counted as the arena's), or when the
 * memory available would fall below the host floor. Does nothing when ring_seed is off, the layer is not in the
 * ring, or a resize of the arena is pending. Lossless: the bytes are the file's. */
void gm_stream_ring_seed(gm_stream *s, uint32_t layer, const int32_t *use_count, uint32_t n_expert);

/* Marks the start of a decode token (for the trace and the phase statistics). */
void gm_stream_token(gm_stream *s);
/* Marks the start of a prefill chunk: its calls are counted apart from the decode hit rate and
 * are not traced. split_tokens: the chunk's tokens when it is a short prefill after decode that
 * goes through the arena (the arena token split, counted apart), else 0. */
void gm_stream_prefill(gm_stream *s, uint32_t split_tokens);

typedef struct gm_stream_stats {
    uint64_t calls, lookups, hits, misses;   /* decode calls */
    uint64_t prefill_lookups, prefill_hits;   /* prefill chunks' expert lookups */
    uint64_t split_calls, split_tokens;       /* short prefills after decode through the arena */
    uint64_t bytes_read, reads;
    double stall_s;            /* time the engine waited for reads */
    uint64_t tokens;
    uint64_t wedged;           /* reads given up on past the timeout (cancelled, slot set aside) */
    uint64_t arena_bytes;      /* arena used by slots now (after any pressure resize) */
    uint64_t arena_sized_bytes;/* arena as sized at load */
    uint32_t pressure_steps;   /* current shrink steps (0 = sized capacity) */
    uint64_t pressure_shrinks, pressure_regrows, resized_layers;
    /* lookahead */
    uint64_t la_predictions;   /* token-layers predicted */
    uint64_t la_actual;        /* distinct routed experts of predicted token-layers */
    uint64_t la_recall_hits[5];/* of them in the top 1, 2, 4, 6, 8 predictions */
    uint64_t la_prev_hits;     /* of them routed by the previous token at the same layer */
    uint64_t la_prev_actual;   /* distinct routed experts of token-layers with a previous token */
    uint64_t la_issued, la_adopted, la_done, la_joined, la_unused, la_declined;
    uint64_t la_cancelled;     /* issued prestages ended by cancellation (unrouted, or given up
                                  with their call when another read of it failed) */
    uint64_t la_failed;        /* issued prestages whose read failed */
    uint64_t la_bytes;         /* bytes read by prestages (also in bytes_read) */
    /* prefill ring */
    uint64_t ring_bytes;       /* ring size (2 slots) when last allocated */
    uint64_t ring_layers;      /* layers served from the ring */
    uint64_t ring_sparse;      /* ... of them, read only for the chunk's routed experts */
    uint64_t ring_predicted;   /* sparse layers read ahead on a prediction of their routing */
    uint64_t ring_missed;      /* ... that then read more experts once the routing was known */
    uint64_t ring_read_bytes;  /* bytes read into the ring (not in bytes_read) */
    double ring_wait_s;        /* time prefill waited for ring reads */
    uint64_t ring_refused;     /* ring allocations refused (memory) */
    uint64_t ring_lends;       /* times the arena shrank to lend the ring its memory */
    uint64_t ring_seeded;      /* experts copied from the ring into the arena */
    uint64_t ring_seeded_bytes;
    double ring_seed_s;        /* time the copies took (their page faults included) */
    uint64_t ring_seed_cold;   /* layers whose seeding stopped at the slots not yet mapped */
    /* the arena's pages mapped ahead (arena_warm) */
    uint64_t warm_bytes;       /* mapped by the thread so far */
    bool warm_finished;        /* it has ended (all mapped, stopped, or unsupported) */
    uint32_t covered_layers, min_slots, max_slots;
    bool arena_locked;         /* the arena was locked at the first decode token (on fault: a page
                                  is mapped and locked when a read first fills it) */
} gm_stream_stats;

void gm_stream_get_stats(const gm_stream *s, gm_stream_stats *out);
/* Appends the exit lines ("[stream] decode feeder arena hit rate: ..." and the per-layer spread,
 * bytes read, stall time) to out. */
void gm_stream_print_stats(const gm_stream *s, gm_strbuf *out);
const char *gm_stream_backend_name(const gm_stream *s);

#endif
