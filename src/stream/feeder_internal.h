/* stream/feeder_internal: what the feeder's files share (the decode feeder is one object, struct
 * gm_stream, split by concern): feeder.c (creation, expert reads and their completions, the
 * per-call stage/get/wait/end), ring.c (the prefill ring and the arena seeding it does),
 * lookahead.c (prediction, prestaging and its scoring), resize.c (the arena's slots under
 * memory pressure and while lending to the ring), stats.c (the figures and their lines).
 * Threads: a gm_stream belongs to its engine's thread. */
#ifndef GM_STREAM_FEEDER_INTERNAL_H
#define GM_STREAM_FEEDER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/strbuf.h"
#include "stream/policy.h"
#include "stream/pressure.h"
#include "stream/stream.h"
#include "stream/warm.h"

#define MAX_K 64

/* Ring reads carry this layer value; their slot field is (ring slot << 20) | chunk index. */
#define RING_TAG_LAYER 0xffffu
#define RING_CHUNK_BYTES (64ull << 20)
/* Experts a layer may have for the ring to read only the routed ones (a read's tag holds its
 * first expert and count in 10 bits each). */
#define RING_SPARSE_MAX 1024u

typedef struct kind_geom {
    bool present;
    uint32_t part;
    uint64_t stack_off;     /* file offset of expert 0's slice */
    uint64_t expert_bytes;  /* bytes of one expert's slice */
    uint64_t slot_off;      /* offset of this slice's region within a slot */
    uint64_t region_bytes;  /* room for the slice widened to the alignment */
    const uint8_t *mapped;  /* the slice stack in the file mapping (page-cache path) */
} kind_geom;

typedef struct layer_state {
    bool covered;
    uint32_t n_expert, n_slots;
    kind_geom kind[GM_EXP_KIND_COUNT];
    uint64_t slot_bytes;
    uint8_t *slots;         /* n_slots x slot_bytes within the arena */
    int32_t *slot_expert;   /* expert held (or loading) per slot, -1 */
    uint8_t *slot_bad;      /* quarantined: reads into it that were abandoned and may still land */
    uint8_t *inflight;      /* per slot: slice reads not yet completed */
    uint8_t *is_pre;        /* per slot: loading a prestage (2: one whose cancellation was asked) */
    uint32_t n_cancelling;  /* slots with is_pre == 2 */
    uint8_t *failed;        /* per slot: the latest load failed (fail_res, fail_kind say how) */
    int64_t *fail_res;
    uint8_t *fail_kind;
    /* lookahead */
    int32_t pre_slots[GM_STREAM_PREDICT_MAX]; /* prestages issued since the layer's last call */
    uint32_t n_pre_slots;
    float gate_ema[GM_STREAM_PREDICT_MAX];    /* per rank: the prediction was routed */
    int32_t pred[GM_STREAM_PREDICT_MAX];      /* the prediction for the layer's next call */
    uint32_t n_pred;
    bool noted;             /* this call's routing was scored by gm_stream_note_routing */
    int32_t prev[MAX_K];                      /* the previous decode call's experts */
    uint32_t n_prev;
    int32_t next_layer;                       /* the next covered MoE layer, -1 */
    /* pressure */
    uint32_t orig_slots;                      /* sized at load (the most it holds) */
    uint64_t applied_gen;                     /* the sizing generation its slot count reflects */
    int32_t *resize_src;                      /* [orig_slots] scratch of gm_policy_resize */
} layer_state;

typedef struct call_entry {
    int32_t expert;
    int32_t slot;
    bool hit;               /* readable in its slot */
    bool wedged;            /* computed from the page cache (abandoned read, or no slot) */
    bool joined_pre;        /* joined a lookahead read still in flight at the call */
    bool reread;            /* that read failed and the call read the expert again */
} call_entry;

struct gm_stream {
    const gm_gguf *g;
    gm_stream_opts o;
    uint32_t n_layers;
    layer_state *layers;
    gm_policy *policy;
    gm_io *io;
    int *fds;
    bool direct;
    uint32_t align;
    uint8_t *arena;
    uint64_t arena_map_bytes;
    bool locked_tried, locked;
    gm_warm *warm;          /* maps the arena's pages ahead (NULL: off) */
    bool warm_paused;       /* paused by a decode token until the next prefill */
    uint64_t warm_cap_bytes; /* the cap the thread was given last */
    gm_pressure pr;
    uint64_t stage_calls;   /* decode stage calls (the pressure poll clock) */
    /* prefill ring: two slots of ring_slot_bytes, each holding one layer's whole stacks */
    uint8_t *ring;
    uint64_t ring_slot_bytes, ring_map_bytes;
    int32_t ring_layer[2];  /* layer held or being read, -1 */
    uint32_t ring_pending[2];
    bool ring_failed[2];
    int64_t ring_fail_res[2];
    uint64_t ring_fail_off[2];
    uint32_t ring_fail_part[2];
    bool ring_sparse[2];    /* the slot holds only some experts of its layer: ring_has, of which
                               ring_req were read last (its reads in flight while ring_pending) */
    uint8_t ring_has[2][RING_SPARSE_MAX], ring_req[2][RING_SPARSE_MAX];
    bool ring_dead;         /* a ring read was abandoned: the ring is not used again */
    bool ring_said;         /* the allocation line was printed */
    double lend_frac;       /* share of its sized slots each layer keeps while lending to the ring */
    uint64_t resize_gen;    /* bumped whenever the pressure steps or the lend change */
    uint32_t min_slots_k;   /* a token's experts: the fewest slots a layer keeps */
    /* the current call */
    uint32_t cur_layer;
    uint32_t cur_k;
    call_entry cur[MAX_K];
    bool prefill;           /* the current calls belong to a prefill chunk */
    /* the prestage waiting for the current call's demand reads */
    bool la_queued;
    uint32_t la_layer, la_n;
    int32_t la_ids[GM_STREAM_PREDICT_MAX];
    uint8_t la_hard[GM_STREAM_PREDICT_MAX];
    /* phases: the open token window and the committed sums */
    double ph_win[GM_PHASE_COUNT], ph_sum[GM_PHASE_COUNT];
    double ph_mark, ph_total;
    bool ph_dirty;
    uint64_t ph_tokens;
    uint64_t *dec_hits, *dec_lookups; /* per layer, decode calls only */
    /* stats */
    gm_stream_stats st;
    /* GMLX_LOG_ROUTED: the trace file (-1: none) and its lines not yet written */
    int trace_fd;
    gm_strbuf trace_buf;
    uint64_t token;
};

double gm_feed_now(void);
double gm_feed_read_deadline(const gm_stream *s);
int gm_feed_timeout_until(const gm_stream *s, double deadline);
bool gm_feed_past(const gm_stream *s, double deadline);
uint64_t gm_feed_tag(uint32_t layer, uint32_t slot, uint32_t kd);
int gm_feed_read_expert(gm_stream *s, uint32_t layer, uint32_t slot, int32_t expert, gm_io_prio prio,
                       gm_err *err);
void gm_feed_quarantine(gm_stream *s, uint32_t layer, uint32_t slot, bool stalled);
int gm_feed_pump(gm_stream *s, int timeout_ms, uint32_t *n_out, gm_err *err);
int gm_feed_submit_demand(gm_stream *s, const gm_io_req *reqs, uint32_t n, gm_err *err);
void gm_feed_ring_done(gm_stream *s, const gm_io_done *d);
void gm_feed_ring_release(gm_stream *s);
void gm_feed_warm_cap(gm_stream *s); /* the warm thread's cap for the ring's state now */
int gm_feed_lock_range(void *p, uint64_t bytes);
bool gm_feed_routed(const int32_t *ids, uint32_t k, int32_t x);
void gm_feed_score_prediction(gm_stream *s, layer_state *ls, const int32_t *ids, uint32_t k);
void gm_feed_settle_prestages(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k);
void gm_feed_await_cancelled(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k);
void gm_feed_pressure_poll(gm_stream *s);
void gm_feed_resize_layer(gm_stream *s, uint32_t layer);
void gm_feed_submit_prestage(gm_stream *s);
bool gm_feed_call_loading(const gm_stream *s);
uint64_t gm_feed_align_up(uint64_t v, uint64_t a);

#endif
