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
 * past the timeout is abandoned (its slot quarantined until the kernel answers) and the expert is
 * read through the page cache instead, with a printed line, so the output stays exact.
 *
 * Threads: one owner thread (the engine's) calls everything; the read engine has its own threads.
 */
#ifndef GM_STREAM_STREAM_H
#define GM_STREAM_STREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "io/io.h"
#include "model/model.h"

typedef struct gm_stream gm_stream;

typedef struct gm_stream_opts {
    uint64_t arena_bytes;      /* the plan's decode arena */
    uint32_t halve_every;      /* popularity halving period in calls per layer (default 4096) */
    uint32_t read_timeout_ms;  /* GMLX_DECODE_READ_TIMEOUT; 0 = wait forever (default 5000) */
    gm_io_backend backend;     /* GM_IO_AUTO: io_uring when available, else the pread pool */
    uint32_t queue_depth;      /* reads in flight (default 32) */
    const gm_io_fault *fault;  /* tests only */
    bool buffered;             /* read through the page cache instead of O_DIRECT */
    const char *trace_path;    /* GMLX_LOG_ROUTED */
    bool lock_arena;           /* mlock the arena at the first decode (default true) */
} gm_stream_opts;

/* Expert pointers of one call: slice data for gate, up and down (fused gate_up: [0] and [1]
 * point into the same slice). */
typedef struct gm_stream_expert {
    const uint8_t *data[GM_EXP_KIND_COUNT];
} gm_stream_expert;

void gm_stream_opts_default(gm_stream_opts *o);

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

/* Marks the start of a decode token (for the trace and the phase statistics). */
void gm_stream_token(gm_stream *s);
/* Marks the start of a prefill chunk: its calls are counted apart from the decode hit rate and
 * are not traced. */
void gm_stream_prefill(gm_stream *s);

typedef struct gm_stream_stats {
    uint64_t calls, lookups, hits, misses;   /* decode calls */
    uint64_t prefill_lookups, prefill_hits;   /* prefill chunks' expert lookups */
    uint64_t bytes_read, reads;
    double stall_s;            /* time the engine waited for reads */
    uint64_t tokens;
    uint64_t wedged;           /* reads abandoned past the timeout */
    uint64_t arena_bytes;      /* arena actually used by slots */
    uint32_t covered_layers, min_slots, max_slots;
} gm_stream_stats;

void gm_stream_get_stats(const gm_stream *s, gm_stream_stats *out);
/* The exit lines ("[stream] decode feeder arena hit rate: ..." and the per-layer spread, bytes
 * read, stall time). */
void gm_stream_print_stats(const gm_stream *s, FILE *f);
const char *gm_stream_backend_name(const gm_stream *s);

#endif
