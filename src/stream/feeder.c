/* The decode feeder: the arena's memory, slots and reads (see stream.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "stream/policy.h"
#include "stream/pressure.h"
#include "stream/stream.h"

#define MAX_K 64

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
    FILE *trace;
    uint64_t token;
};

void gm_stream_opts_default(gm_stream_opts *o)
{
    memset(o, 0, sizeof *o);
    o->halve_every = 4096;
    o->read_timeout_ms = 5000;
    o->backend = GM_IO_AUTO;
    o->queue_depth = 32;
    o->lock_arena = true;
    o->arena_thp = true;
    o->lookahead = true;
    o->lookahead_k = 6;
    o->lookahead_min_p = 0.5f;
    o->lookahead_hard_p = 0.9f;
    o->lookahead_cancel = true;
    o->ring_seed = true;
    o->pressure = true;
    o->pressure_floor_bytes = 1ull << 30;
    o->prefill_ring = true;
    o->ring_min_tokens = 32;
    o->ring_min_cover_pct = 50;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gm_stream_free(gm_stream *s)
{
    if (!s)
        return;
    /* reads the kernel never answered may still land in the arena: then it is left mapped */
    uint32_t abandoned = gm_io_destroy(s->io);
    if (s->fds) {
        for (uint32_t i = 0; i < gm_gguf_n_parts(s->g); i++)
            if (s->fds[i] >= 0)
                close(s->fds[i]);
        free(s->fds);
    }
    if (s->arena && abandoned == 0)
        munmap(s->arena, s->arena_map_bytes);
    if (s->ring && abandoned == 0)
        munmap(s->ring, s->ring_map_bytes);
    for (uint32_t l = 0; s->layers && l < s->n_layers; l++) {
        layer_state *ls = &s->layers[l];
        free(ls->slot_expert);
        free(ls->slot_bad);
        free(ls->inflight);
        free(ls->is_pre);
        free(ls->failed);
        free(ls->fail_res);
        free(ls->fail_kind);
        free(ls->resize_src);
    }
    free(s->layers);
    free(s->dec_hits);
    free(s->dec_lookups);
    gm_policy_free(s->policy);
    if (s->trace)
        fclose(s->trace);
    free(s);
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* The moment a wait for reads gives up (the read timeout from now), or 0: never. */
static double read_deadline(const gm_stream *s)
{
    return s->o.read_timeout_ms ? now_s() + s->o.read_timeout_ms * 1e-3 : 0;
}

/* gm_io_wait's timeout until deadline: -1 (none), 0 (passed) or the milliseconds left. */
static int timeout_until(double deadline)
{
    if (deadline <= 0)
        return -1;
    double left = deadline - now_s();
    return left > 0 ? (int)(left * 1e3) + 1 : 0;
}

/* Ring reads carry this layer value; their slot field is (ring slot << 20) | chunk index. */
#define RING_TAG_LAYER 0xffffu
#define RING_CHUNK_BYTES (64ull << 20)

/* A read's user tag: layer (16 bits), slot (24), kind (4). A slot has at most one load in flight
 * (a quarantined slot is not reused until its abandoned reads have come back), so the tag names
 * one read. */
static uint64_t tag(uint32_t layer, uint32_t slot, uint32_t kd)
{
    return ((uint64_t)(layer & 0xffff) << 28) | ((uint64_t)(slot & 0xffffff) << 4) | (kd & 0xf);
}

/* File range of one slice read: [*start, *start + *len), and the bytes of it that must arrive. */
static uint64_t slice_range(const gm_stream *s, const kind_geom *kg, int32_t expert, uint64_t *start,
                            uint64_t *len)
{
    uint64_t off = kg->stack_off + (uint64_t)expert * kg->expert_bytes;
    *start = s->direct ? off / s->align * s->align : off;
    *len = s->direct ? align_up(off + kg->expert_bytes, s->align) - *start : kg->expert_bytes;
    return off + kg->expert_bytes - *start;
}

static int submit_demand(gm_stream *s, const gm_io_req *reqs, uint32_t n, gm_err *err);

/* Queues the slice reads of expert into slot (its counters set); 0 or the submit error (a
 * demand read waits for request slots; a speculative one is refused when they are full). */
static int read_expert(gm_stream *s, uint32_t layer, uint32_t slot, int32_t expert, gm_io_prio prio,
                       gm_err *err)
{
    layer_state *ls = &s->layers[layer];
    gm_io_req reqs[GM_EXP_KIND_COUNT];
    uint32_t n_req = 0;
    uint64_t bytes = 0;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        const kind_geom *kg = &ls->kind[kd];
        if (!kg->present)
            continue;
        gm_io_req *r = &reqs[n_req++];
        uint64_t start, len;
        slice_range(s, kg, expert, &start, &len);
        r->fd = s->fds[kg->part];
        r->offset = start;
        r->len = len;
        r->buf = ls->slots + (uint64_t)slot * ls->slot_bytes + kg->slot_off;
        r->user = tag(layer, slot, kd);
        r->prio = prio;
        bytes += len;
    }
    int rc = prio == GM_IO_DEMAND ? submit_demand(s, reqs, n_req, err)
                                  : gm_io_submit(s->io, reqs, n_req, err);
    if (rc)
        return rc;
    ls->slot_expert[slot] = expert;
    ls->inflight[slot] = (uint8_t)n_req;
    ls->failed[slot] = 0;
    ls->is_pre[slot] = prio == GM_IO_SPECULATIVE;
    s->st.reads += n_req;
    s->st.bytes_read += bytes;
    if (prio == GM_IO_SPECULATIVE)
        s->st.la_bytes += bytes;
    return 0;
}

/* Sets a slot aside while its reads may still land (a wedged or cut-short load). A prestage
 * given up on counts as failed when its read stalled, as cancelled when it was cancelled already
 * or its call was cut short by another read's error (its own read did not fail). */
static void quarantine(gm_stream *s, uint32_t layer, uint32_t slot, bool stalled)
{
    layer_state *ls = &s->layers[layer];
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
        if (ls->kind[kd].present)
            gm_io_cancel(s->io, tag(layer, slot, kd));
    ls->slot_bad[slot] = ls->inflight[slot];
    ls->inflight[slot] = 0;
    if (ls->is_pre[slot] == 1 && stalled)
        s->st.la_failed++;
    else if (ls->is_pre[slot])
        s->st.la_cancelled++;
    if (ls->is_pre[slot] == 2)
        ls->n_cancelling--;
    ls->is_pre[slot] = 0;
    gm_policy_quarantine(s->policy, layer, slot);
}

/* One completed read: counts it against its slot; when the slot's last read lands, the policy
 * learns whether the load succeeded. A completion for a quarantined slot frees the slot once
 * its last abandoned read is back. */
static void ring_done(gm_stream *s, const gm_io_done *d);

static void on_done(gm_stream *s, const gm_io_done *d)
{
    uint32_t layer = (uint32_t)(d->user >> 28) & 0xffff, slot = (uint32_t)(d->user >> 4) & 0xffffff;
    uint32_t kd = (uint32_t)(d->user & 0xf);
    if (layer == RING_TAG_LAYER) {
        ring_done(s, d);
        return;
    }
    if (layer >= s->n_layers || !s->layers[layer].covered || slot >= s->layers[layer].n_slots ||
        kd >= GM_EXP_KIND_COUNT)
        return;
    layer_state *ls = &s->layers[layer];
    if (ls->slot_bad[slot]) {
        if (--ls->slot_bad[slot] == 0) {
            ls->slot_expert[slot] = -1;
            gm_policy_unquarantine(s->policy, layer, slot);
        }
        return;
    }
    if (!ls->inflight[slot])
        return;
    uint64_t start, len;
    uint64_t need = slice_range(s, &ls->kind[kd], ls->slot_expert[slot], &start, &len);
    if ((d->result < 0 || (uint64_t)d->result < need) && !ls->failed[slot]) {
        ls->failed[slot] = 1;
        ls->fail_res[slot] = d->result;
        ls->fail_kind[slot] = (uint8_t)kd;
    }
    if (--ls->inflight[slot])
        return;
    bool ok = !ls->failed[slot];
    if (!ok && ls->is_pre[slot] == 2 && ls->fail_res[slot] == -ECANCELED)
        gm_policy_cancelled(s->policy, layer, slot); /* unrouted, given up: unused */
    else
        gm_policy_loaded(s->policy, layer, slot, ok);
    if (ls->is_pre[slot] && !ok) {
        if (ls->fail_res[slot] == -ECANCELED)
            s->st.la_cancelled++;
        else
            s->st.la_failed++;
    }
    if (ls->is_pre[slot] == 2)
        ls->n_cancelling--;
    ls->is_pre[slot] = 0;
}

/* Takes the completions available within timeout_ms (-1: wait for one; 0: poll). */
static int pump(gm_stream *s, int timeout_ms, uint32_t *n_out, gm_err *err)
{
    gm_io_done done[64];
    uint32_t n = 0;
    int rc = gm_io_wait(s->io, done, 64, timeout_ms == 0 ? 0 : 1, timeout_ms, &n, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < n; i++)
        on_done(s, &done[i]);
    if (n_out)
        *n_out = n;
    return 0;
}

/* Submits demand reads, taking completions first while the io's request slots are full (a
 * prefill group of many misses, or lookahead reads holding slots): a demand read waits for room,
 * it is never refused. */
static int submit_demand(gm_stream *s, const gm_io_req *reqs, uint32_t n, gm_err *err)
{
    int rc;
    while ((rc = gm_io_submit(s->io, reqs, n, err)) == GM_ERANGE) {
        gm_err_clear(err);
        if ((rc = pump(s, -1, NULL, err)))
            return rc;
    }
    return rc;
}

int gm_stream_create(gm_stream **out, const gm_gguf *g, const gm_model_desc *m, const gm_stream_opts *o,
                     gm_err *err)
{
    *out = NULL;
    gm_stream *s = calloc(1, sizeof *s);
    if (!s)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    s->g = g;
    s->o = *o;
    s->n_layers = m->n_layers;
    s->layers = calloc(s->n_layers ? s->n_layers : 1, sizeof *s->layers);
    s->dec_hits = calloc(s->n_layers ? s->n_layers : 1, sizeof *s->dec_hits);
    s->dec_lookups = calloc(s->n_layers ? s->n_layers : 1, sizeof *s->dec_lookups);
    uint32_t n_parts = gm_gguf_n_parts(g);
    s->fds = malloc(n_parts * sizeof *s->fds);
    int rc = 0;
    if (!s->layers || !s->fds || !s->dec_hits || !s->dec_lookups) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n_parts; i++)
        s->fds[i] = -1;
    s->direct = !o->buffered;
    s->align = GM_SLOT_ALIGN_BYTES;
    for (uint32_t i = 0; i < n_parts; i++) {
        bool direct = false;
        if (o->buffered) {
            s->fds[i] = open(gm_gguf_part_path(g, i), O_RDONLY | O_CLOEXEC);
            if (s->fds[i] < 0) {
                rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot open", gm_gguf_part_path(g, i));
                goto fail;
            }
        } else {
            if ((rc = gm_io_open_direct(gm_gguf_part_path(g, i), &s->fds[i], &direct, err)))
                goto fail;
            if (!direct)
                s->direct = false;
            uint32_t a = gm_io_dio_align(s->fds[i]);
            if (a > s->align)
                s->align = a;
        }
    }

    /* geometry of every covered layer; the arena is split evenly */
    uint32_t n_moe = 0;
    for (uint32_t l = 0; l < m->n_layers; l++)
        n_moe += m->layers[l].is_moe && !m->layers[l].is_mtp;
    uint64_t per_layer = n_moe ? o->arena_bytes / n_moe : 0;
    uint32_t k = o->k_route ? o->k_route : m->hp.n_expert_used ? m->hp.n_expert_used : 1;
    uint64_t total = 0;
    uint32_t *n_experts = calloc(s->n_layers ? s->n_layers : 1, sizeof *n_experts);
    uint32_t *n_slots = calloc(s->n_layers ? s->n_layers : 1, sizeof *n_slots);
    if (!n_experts || !n_slots) {
        free(n_experts);
        free(n_slots);
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t l = 0; l < m->n_layers; l++) {
        const gm_layer_desc *L = &m->layers[l];
        layer_state *ls = &s->layers[l];
        if (!L->is_moe || L->is_mtp)
            continue;
        ls->n_expert = L->n_expert;
        uint64_t off = 0;
        for (int kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
            if (L->stack[kd] < 0)
                continue;
            const gm_gguf_tensor *t = gm_gguf_tensor_at(g, (uint64_t)L->stack[kd]);
            kind_geom *kg = &ls->kind[kd];
            kg->present = true;
            kg->part = t->part;
            kg->stack_off = t->file_offset;
            kg->expert_bytes = t->n_bytes / t->ne[2];
            kg->slot_off = off;
            kg->region_bytes = gm_slot_region_bytes(kg->expert_bytes, s->align);
            kg->mapped = gm_gguf_tensor_data(g, t);
            off += kg->region_bytes;
        }
        ls->slot_bytes = off;
        uint64_t slots = off ? per_layer / off : 0;
        if (slots > L->n_expert)
            slots = L->n_expert;
        if (slots < k)
            slots = 0; /* cannot hold one token's experts: this layer reads the page cache */
        ls->n_slots = (uint32_t)slots;
        ls->covered = slots > 0;
        n_experts[l] = L->n_expert;
        n_slots[l] = ls->n_slots;
        total += slots * off;
        if (ls->covered) {
            s->st.covered_layers++;
            if (!s->st.min_slots || ls->n_slots < s->st.min_slots)
                s->st.min_slots = ls->n_slots;
            if (ls->n_slots > s->st.max_slots)
                s->st.max_slots = ls->n_slots;
        }
    }
    rc = gm_policy_create(&s->policy, s->n_layers, n_experts, n_slots, o->halve_every, err);
    free(n_experts);
    free(n_slots);
    if (rc)
        goto fail;
    s->st.arena_bytes = total;
    if (total) {
        s->arena_map_bytes = align_up(total, 1u << 21);
        void *a = mmap(NULL, s->arena_map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (a == MAP_FAILED) {
            s->arena_map_bytes = 0;
            rc = gm_err_errno(err, GM_ENOMEM, errno, "cannot allocate the %.1f GB decode arena",
                              (double)total / 1e9);
            goto fail;
        }
        /* transparent huge pages unless GMLX_DECODE_ARENA_THP=0: on the 24 GiB test machine the
         * experts' compute from a 4 KiB-page arena took 1264 ms per token against 146 ms with
         * huge pages (cold tokens of the same run otherwise); wiring 18.7 GB of huge pages at
         * the first decode token takes 37.5 s there (4.0 s for 4 KiB pages), once */
        s->arena = a;
        if (o->arena_thp)
            madvise(s->arena, s->arena_map_bytes, MADV_HUGEPAGE);
    }
    uint64_t at = 0;
    for (uint32_t l = 0; l < s->n_layers; l++) {
        layer_state *ls = &s->layers[l];
        if (!ls->covered)
            continue;
        ls->slots = s->arena + at;
        at += (uint64_t)ls->n_slots * ls->slot_bytes;
        ls->slot_expert = malloc(ls->n_slots * sizeof *ls->slot_expert);
        ls->slot_bad = calloc(ls->n_slots, 1);
        ls->inflight = calloc(ls->n_slots, 1);
        ls->is_pre = calloc(ls->n_slots, 1);
        ls->failed = calloc(ls->n_slots, 1);
        ls->fail_res = calloc(ls->n_slots, sizeof *ls->fail_res);
        ls->fail_kind = calloc(ls->n_slots, 1);
        ls->resize_src = calloc(ls->n_slots, sizeof *ls->resize_src);
        ls->orig_slots = ls->n_slots;
        for (uint32_t r = 0; r < GM_STREAM_PREDICT_MAX; r++)
            ls->gate_ema[r] = 1.0f;
        if (!ls->slot_expert || !ls->slot_bad || !ls->inflight || !ls->is_pre || !ls->failed ||
            !ls->fail_res || !ls->fail_kind || !ls->resize_src) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            goto fail;
        }
        for (uint32_t i = 0; i < ls->n_slots; i++)
            ls->slot_expert[i] = -1;
    }
    s->min_slots_k = k;
    s->lend_frac = 1.0;
    s->st.arena_sized_bytes = total;
    gm_pressure_init(&s->pr, o->pressure_floor_bytes);
    /* a ring slot holds the largest covered layer's stacks, each widened to the alignment */
    s->ring_layer[0] = s->ring_layer[1] = -1;
    for (uint32_t l = 0; l < s->n_layers; l++) {
        const layer_state *ls = &s->layers[l];
        if (!ls->covered)
            continue;
        uint64_t b = 0;
        for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
            if (ls->kind[kd].present)
                b += align_up(ls->kind[kd].expert_bytes * ls->n_expert + 2 * s->align, s->align);
        if (b > s->ring_slot_bytes)
            s->ring_slot_bytes = b;
    }
    int32_t next = -1;
    for (uint32_t l = s->n_layers; l-- > 0;) {
        s->layers[l].next_layer = next;
        if (s->layers[l].covered)
            next = (int32_t)l;
    }
    gm_io_opts io = {.backend = o->backend, .queue_depth = o->queue_depth ? o->queue_depth : 32,
                     .n_threads = 8, .fault = o->fault};
    if ((rc = gm_io_create(&s->io, &io, err)))
        goto fail;
    if (o->trace_path) {
        s->trace = fopen(o->trace_path, "w");
        if (!s->trace) {
            rc = gm_err_errno(err, GM_EIO, errno, "GMLX_LOG_ROUTED=%s: cannot write", o->trace_path);
            goto fail;
        }
    }
    *out = s;
    return 0;
fail:
    gm_stream_free(s);
    return rc;
}

void gm_stream_fast_recipe(gm_stream_opts *o)
{
    o->lookahead_k = GM_STREAM_PREDICT_MAX;
    o->lookahead_min_p = 0.0f;
    o->lookahead_hard_p = 0.5f;
    o->queue_depth = 64;
}

int gm_stream_drive_test(const gm_gguf *g, const gm_model_desc *m, double *gb_s, gm_err *err)
{
    *gb_s = 0;
    const gm_gguf_tensor *t = NULL;
    for (uint32_t l = 0; l < m->n_layers && !t; l++)
        for (int kd = 0; kd < GM_EXP_KIND_COUNT && !t; kd++)
            if (m->layers[l].is_moe && m->layers[l].stack[kd] >= 0)
                t = gm_gguf_tensor_at(g, (uint64_t)m->layers[l].stack[kd]);
    if (!t)
        return gm_err_set(err, GM_EINVAL, "drive test: the model has no expert stack to read");
    enum { REQ = 4u << 20, DEPTH = 8, TOTAL = 64u << 20 };
    int fd = -1;
    bool direct = false;
    int rc = gm_io_open_direct(gm_gguf_part_path(g, t->part), &fd, &direct, err);
    if (rc)
        return rc;
    const uint32_t align = gm_io_dio_align(fd) > GM_IO_DIRECT_ALIGN ? gm_io_dio_align(fd) : GM_IO_DIRECT_ALIGN;
    const uint64_t start = (t->file_offset + align - 1) / align * align;
    const uint64_t end = (t->file_offset + t->n_bytes) / align * align;
    const uint32_t n = end > start ? (uint32_t)((end - start) / REQ < TOTAL / REQ ? (end - start) / REQ
                                                                              : TOTAL / REQ) : 0;
    uint8_t *buf = n ? gm_io_alloc_aligned((uint64_t)DEPTH * REQ) : NULL;
    gm_io *io = NULL;
    gm_io_opts io_o = {.queue_depth = DEPTH};
    if (n == 0) {
        *gb_s = -1; /* a stack under one read: too small to say anything */
    } else if (!buf) {
        rc = gm_err_set(err, GM_ENOMEM, "drive test: out of memory for its %u MiB buffer", (DEPTH * REQ) >> 20);
    } else if ((rc = gm_io_create(&io, &io_o, err)) == 0) {
        memset(buf, 1, (uint64_t)DEPTH * REQ); /* the buffer's first faults are not the drive's */
        const double t0 = now_s();
        uint32_t sent = 0, got = 0;
        while (rc == 0 && got < n) {
            while (sent < n && sent - got < DEPTH) {
                gm_io_req r = {.fd = fd, .offset = start + (uint64_t)sent * REQ, .len = REQ,
                               .buf = buf + (uint64_t)(sent % DEPTH) * REQ, .user = sent, .prio = GM_IO_DEMAND};
                if ((rc = gm_io_submit(io, &r, 1, err)))
                    break;
                sent++;
            }
            gm_io_done done[DEPTH];
            uint32_t k = 0;
            if (rc == 0 && (rc = gm_io_wait(io, done, DEPTH, 1, 10000, &k, err)) == 0) {
                for (uint32_t i = 0; i < k && rc == 0; i++)
                    if (done[i].result != REQ)
                        rc = gm_err_set(err, GM_EIO, "drive test: a read of %s returned %lld",
                                        gm_gguf_part_path(g, t->part), (long long)done[i].result);
                if (k == 0 && rc == 0)
                    rc = gm_err_set(err, GM_EIO, "drive test: no read of %s came back in 10 s",
                                    gm_gguf_part_path(g, t->part));
                got += k;
            }
        }
        const double sec = now_s() - t0;
        if (rc == 0)
            *gb_s = sec > 0 ? (double)n * REQ / 1e9 / sec : 0;
        gm_io_destroy(io);
    }
    if (buf)
        gm_io_free_aligned(buf, (uint64_t)DEPTH * REQ);
    close(fd);
    return rc;
}

bool gm_stream_covers(const gm_stream *s, uint32_t layer)
{
    return layer < s->n_layers && s->layers[layer].covered;
}

const char *gm_stream_backend_name(const gm_stream *s) { return gm_io_backend_name(s->io); }

uint32_t gm_stream_layer_slots(const gm_stream *s, uint32_t layer)
{
    return layer < s->n_layers && s->layers[layer].covered ? s->layers[layer].n_slots : 0;
}

/* ---- prefill ring ---- */

/* Kind kd's region within a ring slot for layer l: offset of the region, and of its data. */
static uint64_t ring_region(const gm_stream *s, const layer_state *ls, uint32_t kd, uint64_t *data_off)
{
    uint64_t off = 0;
    for (uint32_t k = 0; k < kd; k++)
        if (ls->kind[k].present)
            off += align_up(ls->kind[k].expert_bytes * ls->n_expert + 2 * s->align, s->align);
    *data_off = off + (s->direct ? ls->kind[kd].stack_off % s->align : 0);
    return off;
}

/* File range [*start, *end) read for kind kd's stack, and the end of the bytes that must arrive. */
static uint64_t ring_range(const gm_stream *s, const kind_geom *kg, uint32_t n_expert, uint64_t *start, uint64_t *end)
{
    uint64_t lo = kg->stack_off, hi = kg->stack_off + kg->expert_bytes * n_expert;
    *start = s->direct ? lo / s->align * s->align : lo;
    *end = s->direct ? align_up(hi, s->align) : hi;
    return hi;
}

static void ring_done(gm_stream *s, const gm_io_done *d)
{
    uint32_t field = (uint32_t)(d->user >> 4) & 0xffffff, kd = (uint32_t)(d->user & 0xf);
    uint32_t rs = field >> 20, chunk = field & 0xfffff;
    if (rs > 1 || !s->ring_pending[rs] || s->ring_layer[rs] < 0 || kd >= GM_EXP_KIND_COUNT)
        return;
    const layer_state *ls = &s->layers[s->ring_layer[rs]];
    uint64_t start, end, hi = ring_range(s, &ls->kind[kd], ls->n_expert, &start, &end);
    uint64_t at = start + (uint64_t)chunk * RING_CHUNK_BYTES;
    uint64_t need = (hi < at + RING_CHUNK_BYTES ? hi : at + RING_CHUNK_BYTES) - at;
    if ((d->result < 0 || (uint64_t)d->result < need) && !s->ring_failed[rs]) {
        s->ring_failed[rs] = true;
        s->ring_fail_res[rs] = d->result;
        s->ring_fail_off[rs] = at;
        s->ring_fail_part[rs] = ls->kind[kd].part;
    }
    s->ring_pending[rs]--;
}

/* Queues the reads of layer l's whole stacks into ring slot rs. */
static int ring_read(gm_stream *s, uint32_t rs, uint32_t layer, gm_err *err)
{
    const layer_state *ls = &s->layers[layer];
    uint8_t *base = s->ring + (uint64_t)rs * s->ring_slot_bytes;
    s->ring_layer[rs] = (int32_t)layer;
    s->ring_failed[rs] = false;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        const kind_geom *kg = &ls->kind[kd];
        if (!kg->present)
            continue;
        uint64_t data_off, start, end;
        uint64_t region = ring_region(s, ls, kd, &data_off);
        ring_range(s, kg, ls->n_expert, &start, &end);
        uint32_t chunk = 0;
        for (uint64_t at = start; at < end; at += RING_CHUNK_BYTES, chunk++) {
            gm_io_req r = {.fd = s->fds[kg->part], .offset = at,
                           .len = end - at < RING_CHUNK_BYTES ? end - at : RING_CHUNK_BYTES,
                           .buf = base + region + (at - start),
                           .user = tag(RING_TAG_LAYER, (rs << 20) | chunk, kd), .prio = GM_IO_DEMAND};
            int rc = submit_demand(s, &r, 1, err);
            if (rc)
                return rc;
            s->ring_pending[rs]++;
            s->st.ring_read_bytes += r.len;
        }
    }
    return 0;
}

/* Waits for ring slot rs's reads. On a stall past the timeout the reads are cancelled and the
 * ring is given up (its memory may still be written): *stalled = true. */
static int ring_wait(gm_stream *s, uint32_t rs, bool *stalled, gm_err *err)
{
    double t0 = now_s();
    double deadline = read_deadline(s);
    *stalled = false;
    int rc = 0;
    while (s->ring_pending[rs]) {
        int timeout = timeout_until(deadline);
        uint32_t n = 0;
        if (timeout != 0 && (rc = pump(s, timeout, &n, err)))
            break;
        if (n > 0) {
            /* a read came back: the timeout is for one read, not for a whole layer (a layer of
             * 512 experts is gigabytes, seconds of a busy disk) */
            deadline = read_deadline(s);
            continue;
        }
        if (deadline > 0 && now_s() >= deadline) {
            *stalled = true;
            break;
        }
    }
    s->st.ring_wait_s += now_s() - t0;
    return rc;
}

/* Applies op (gm_io_cancel or gm_io_abandon) to every read of ring slot rs's layer. */
static void ring_reads_do(gm_stream *s, uint32_t rs, int (*op)(gm_io *, uint64_t))
{
    const layer_state *ls = &s->layers[s->ring_layer[rs]];
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        if (!ls->kind[kd].present)
            continue;
        uint64_t start, end;
        ring_range(s, &ls->kind[kd], ls->n_expert, &start, &end);
        for (uint32_t c = 0; (uint64_t)c * RING_CHUNK_BYTES < end - start; c++)
            op(s->io, tag(RING_TAG_LAYER, (rs << 20) | c, kd));
    }
}

/* Gives the ring up after a stalled read: cancels what is left; the memory stays mapped. */
static void ring_abandon(gm_stream *s)
{
    for (uint32_t rs = 0; rs < 2; rs++) {
        if (!s->ring_pending[rs] || s->ring_layer[rs] < 0)
            continue;
        ring_reads_do(s, rs, gm_io_abandon);
        s->ring_pending[rs] = 0;
    }
    s->ring_dead = true;
    /* The mapping stays (an abandoned read may still write into it) but its pages go back: the
     * arena was sized on the ring's memory being returned. Pages under a read still in flight
     * are held by the kernel until it ends; a later write lands in a fresh zero page. */
    if (s->ring)
        madvise(s->ring, s->ring_map_bytes, MADV_DONTNEED);
    s->ring = NULL;
    s->ring_layer[0] = s->ring_layer[1] = -1;
}

/* Releases the ring (the first decode token): its reads are cancelled and waited for. */
static void ring_release(gm_stream *s)
{
    if (!s->ring)
        return;
    for (uint32_t rs = 0; rs < 2; rs++) {
        if (!s->ring_pending[rs] || s->ring_layer[rs] < 0)
            continue;
        ring_reads_do(s, rs, gm_io_cancel);
        bool stalled = false;
        gm_err ignore = {0};
        if (ring_wait(s, rs, &stalled, &ignore) != 0 || stalled) {
            ring_abandon(s);
            return;
        }
    }
    munmap(s->ring, s->ring_map_bytes);
    s->ring = NULL;
    s->ring_layer[0] = s->ring_layer[1] = -1;
}

static bool ring_covers(const gm_stream *s, uint32_t layer, uint32_t n_used)
{
    return (uint64_t)n_used * 100 >= (uint64_t)s->o.ring_min_cover_pct * s->layers[layer].n_expert;
}

bool gm_stream_ring_wanted(const gm_stream *s, uint32_t layer, uint32_t n, uint32_t n_used)
{
    return s->o.prefill_ring && !s->ring_dead && n >= s->o.ring_min_tokens && n > 1 && layer < s->n_layers &&
           s->layers[layer].covered && s->ring_slot_bytes > 0 && ring_covers(s, layer, n_used);
}

static void resize_layer(gm_stream *s, uint32_t layer);

/* After decode has filled the arena, a long prefill borrows the ring's memory from it: every
 * layer shrinks now to the share that frees the ring's bytes (keeping its most popular experts;
 * reads in flight are let finish first) until the next decode token gives it back. */
static bool arena_lend(gm_stream *s, uint64_t bytes)
{
    uint64_t before = s->st.arena_bytes;
    if (s->st.tokens == 0 || before == 0)
        return false; /* before the first decode token the arena's pages are still untouched */
    double left = 1.0 - (double)bytes / (double)before;
    s->lend_frac *= left > 0 ? left : 0;
    s->resize_gen++;
    double deadline = now_s() + (s->o.read_timeout_ms ? s->o.read_timeout_ms : 5000) * 1e-3;
    while (gm_io_in_flight(s->io) > 0 && now_s() < deadline) {
        gm_err ignore = {0};
        if (pump(s, (int)((deadline - now_s()) * 1e3) + 1, NULL, &ignore) != 0)
            break;
    }
    for (uint32_t l = 0; l < s->n_layers; l++)
        if (s->layers[l].covered)
            resize_layer(s, l);
    s->st.ring_lends++;
    double lent = (double)(before - s->st.arena_bytes), kept = (double)s->st.arena_bytes;
    gm_log(GM_LOG_NOTE, "[stream] decode arena lends %.2f %s to the prefill ring (kept %.2f %s); restored at the "
            "next decode token", lent >= 1e9 ? lent / 1e9 : lent / 1e6, lent >= 1e9 ? "GB" : "MB",
            kept >= 1e9 ? kept / 1e9 : kept / 1e6, kept >= 1e9 ? "GB" : "MB");
    return true;
}

/* Maps the ring when the memory free holds it above the host floor, or when the arena lends it
 * the memory. */
static int ring_get(gm_stream *s, gm_err *err)
{
    if (s->ring)
        return 0;
    uint64_t bytes = align_up(2 * s->ring_slot_bytes, 1u << 21);
    gm_pressure_sample smp;
    gm_pressure_read(s->o.psi_path, s->o.meminfo_path, &smp);
    if (smp.avail_known && smp.avail_bytes < bytes + s->pr.floor_bytes && !arena_lend(s, bytes)) {
        if (!s->st.ring_refused++)
            gm_log(GM_LOG_NOTE, "[stream] prefill ring: %.2f GB free does not hold 2 x %.2f GB above the %.2f GB "
                    "floor; prefill goes through the decode arena", (double)smp.avail_bytes / 1e9,
                    (double)s->ring_slot_bytes / 1e9, (double)s->pr.floor_bytes / 1e9);
        return gm_err_set(err, GM_ENOMEM, "no memory for the prefill ring");
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        s->st.ring_refused++;
        return gm_err_errno(err, GM_ENOMEM, errno, "cannot map the %.2f GB prefill ring", (double)bytes / 1e9);
    }
    s->ring = m;
    s->ring_map_bytes = bytes;
    s->st.ring_bytes = 2 * s->ring_slot_bytes;
    if (!s->ring_said) {
        s->ring_said = true;
        gm_log(GM_LOG_INFO, "[stream] feeder prefill: expert stacks staged straight from the GGUF through 2 x "
               "%.2f GB ring slots, one layer ahead (GMLX_FEEDER_PREFILL=0 disables)",
               (double)s->ring_slot_bytes / 1e9);
    }
    return 0;
}

int gm_stream_ring_layer(gm_stream *s, uint32_t layer, gm_stream_expert *out, gm_err *err)
{
    if (!gm_stream_ring_wanted(s, layer, s->o.ring_min_tokens ? s->o.ring_min_tokens : 2, s->layers[layer].n_expert))
        return gm_err_set(err, GM_EINVAL, "layer %u does not take the prefill ring", layer);
    int rc = ring_get(s, err);
    if (rc)
        return rc;
    const layer_state *ls = &s->layers[layer];
    int a = s->ring_layer[0] == (int32_t)layer ? 0 : s->ring_layer[1] == (int32_t)layer ? 1 : -1;
    bool stalled = false;
    if (a < 0) {
        /* not prefetched: read it into a slot with nothing in flight (wait for one) */
        a = s->ring_pending[0] == 0 ? 0 : s->ring_pending[1] == 0 ? 1 : 0;
        if (s->ring_pending[a] && ((rc = ring_wait(s, (uint32_t)a, &stalled, err)) || stalled))
            goto stall;
        if ((rc = ring_read(s, (uint32_t)a, layer, err)))
            return rc;
    }
    if ((rc = ring_wait(s, (uint32_t)a, &stalled, err)))
        return rc;
    if (stalled)
        goto stall;
    if (s->ring_failed[a]) {
        int64_t res = s->ring_fail_res[a];
        s->ring_layer[a] = -1;
        if (res < 0)
            return gm_err_set(err, GM_EIO, "%s: reading layer %u's expert stacks at offset %llu failed: %s",
                              gm_gguf_part_path(s->g, s->ring_fail_part[a]), layer,
                              (unsigned long long)s->ring_fail_off[a], strerror((int)-res));
        return gm_err_set(err, GM_EIO, "%s: reading layer %u's expert stacks at offset %llu came back short "
                          "(%lld bytes): the file is shorter than its header says",
                          gm_gguf_part_path(s->g, s->ring_fail_part[a]), layer,
                          (unsigned long long)s->ring_fail_off[a], (long long)res);
    }
    /* start the next covered layer into the other slot while this one computes */
    int32_t next = ls->next_layer;
    uint32_t b = (uint32_t)(1 - a);
    if (next >= 0 && s->ring_layer[b] != next) {
        if (s->ring_pending[b] && ((rc = ring_wait(s, b, &stalled, err)) || stalled))
            goto stall;
        if ((rc = ring_read(s, b, (uint32_t)next, err)))
            return rc;
    }
    s->st.ring_layers++;
    const uint8_t *base = s->ring + (uint64_t)a * s->ring_slot_bytes;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        out->data[kd] = NULL;
        if (!ls->kind[kd].present)
            continue;
        uint64_t data_off;
        ring_region(s, ls, kd, &data_off);
        out->data[kd] = base + data_off;
    }
    return 0;
stall:
    if (rc)
        return rc;
    ring_abandon(s);
    gm_log(GM_LOG_WARN, "[stream] a prefill ring read stalled past %u ms; layer %u's experts are read through the "
            "page cache and the ring is not used again", s->o.read_timeout_ms, layer);
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
        out->data[kd] = ls->kind[kd].present ? ls->kind[kd].mapped : NULL;
    return 0;
}

/* Memory left beside the floor when the ring seeds the arena (the copies fault in fresh pages
 * while the ring is still mapped). */
#define SEED_MARGIN_BYTES (256ull << 20)

void gm_stream_ring_seed(gm_stream *s, uint32_t layer, const int32_t *use_count, uint32_t n_expert)
{
    if (!s->o.ring_seed || !s->ring || layer >= s->n_layers || !s->layers[layer].covered ||
        s->lend_frac < 1.0 || !use_count)
        return;
    layer_state *ls = &s->layers[layer];
    if (n_expert != ls->n_expert || ls->applied_gen != s->resize_gen)
        return; /* a resize is due first (the arena is lending, or under pressure) */
    int a = s->ring_layer[0] == (int32_t)layer ? 0 : s->ring_layer[1] == (int32_t)layer ? 1 : -1;
    if (a < 0 || s->ring_pending[a] || s->ring_failed[a])
        return;
    uint64_t budget = UINT64_MAX;
    gm_pressure_sample smp;
    gm_pressure_read(s->o.psi_path, s->o.meminfo_path, &smp);
    if (smp.avail_known) {
        uint64_t keep = s->pr.floor_bytes + SEED_MARGIN_BYTES;
        budget = smp.avail_bytes > keep ? smp.avail_bytes - keep : 0;
    }
    /* the ring borrows its memory from the arena's budget: while it is mapped, the slots filled
     * stay within the arena's size less the ring's (the plan sized the arena within the memory
     * limit, a cgroup's included, which MemAvailable does not see) */
    uint64_t filled = 0;
    for (uint32_t l = 0; l < s->n_layers; l++) {
        const layer_state *ll = &s->layers[l];
        for (uint32_t i = 0; ll->covered && i < ll->n_slots; i++)
            filled += ll->slot_expert[i] >= 0 ? ll->slot_bytes : 0;
    }
    const uint64_t ring = 2 * s->ring_slot_bytes; /* what the ring's reads touch of its mapping */
    const uint64_t cap = s->st.arena_sized_bytes > ring ? s->st.arena_sized_bytes - ring : 0;
    const uint64_t room = cap > filled ? cap - filled : 0;
    if (room < budget)
        budget = room;
    const double t0 = now_s();
    const uint8_t *base = s->ring + (uint64_t)a * s->ring_slot_bytes;
    uint64_t data_off[GM_EXP_KIND_COUNT] = {0}, expert_bytes = 0;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
        if (ls->kind[kd].present) {
            ring_region(s, ls, kd, &data_off[kd]);
            expert_bytes += ls->kind[kd].expert_bytes;
        }
    uint64_t used = 0; /* slot bytes filled by this call */
    /* the experts by use count, most used first (ties: lower id first): each pass takes the
     * largest (count, -id) below the previous one */
    int32_t prev_c = 0;
    int64_t prev_x = -1;
    for (;;) {
        int32_t bc = 0;
        int64_t bx = -1;
        for (uint32_t x = 0; x < n_expert; x++) {
            int32_t c = use_count[x];
            if (c <= 0 || (prev_x >= 0 && (c > prev_c || (c == prev_c && (int64_t)x <= prev_x))))
                continue;
            if (c > bc) {
                bc = c;
                bx = x;
            }
        }
        if (bx < 0 || used + ls->slot_bytes > budget)
            break;
        prev_c = bc;
        prev_x = bx;
        int32_t slot = -1;
        if (gm_policy_seed(s->policy, layer, (int32_t)bx, &slot) != 0 || slot < 0) {
            if (gm_policy_lookup(s->policy, layer, (int32_t)bx) >= 0)
                continue; /* resident already */
            break;        /* no empty slot left */
        }
        uint8_t *dst = ls->slots + (uint64_t)slot * ls->slot_bytes;
        for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
            const kind_geom *kg = &ls->kind[kd];
            if (!kg->present)
                continue;
            uint64_t off = kg->stack_off + (uint64_t)bx * kg->expert_bytes;
            uint64_t head = s->direct ? off % s->align : 0;
            memcpy(dst + kg->slot_off + head, base + data_off[kd] + (uint64_t)bx * kg->expert_bytes,
                   kg->expert_bytes);
        }
        ls->slot_expert[slot] = (int32_t)bx;
        ls->failed[slot] = 0;
        ls->is_pre[slot] = 0;
        used += ls->slot_bytes;
        s->st.ring_seeded++;
        s->st.ring_seeded_bytes += expert_bytes;
    }
    s->st.ring_seed_s += now_s() - t0;
}

double gm_stream_now_s(void) { return now_s(); }

void gm_stream_phase_add(gm_stream *s, gm_stream_phase ph, double seconds)
{
    if ((unsigned)ph < GM_PHASE_COUNT)
        s->ph_win[ph] += seconds;
}

/* Closes the open token window at a token boundary: counted unless a prefill call ran in it. */
static void phase_boundary(gm_stream *s)
{
    double t = now_s();
    if (s->ph_mark > 0 && !s->ph_dirty) {
        s->ph_total += t - s->ph_mark;
        for (int i = 0; i < GM_PHASE_COUNT; i++)
            s->ph_sum[i] += s->ph_win[i];
        s->ph_tokens++;
    }
    memset(s->ph_win, 0, sizeof s->ph_win);
    s->ph_mark = t;
    s->ph_dirty = false;
}

void gm_stream_prefill(gm_stream *s, uint32_t split_tokens)
{
    s->prefill = true;
    s->ph_dirty = true;
    if (split_tokens) {
        s->st.split_calls++;
        s->st.split_tokens += split_tokens;
    }
}

#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 0x01 /* Linux 4.4 */
#endif

/* Locks [p, p + bytes) as its pages are first touched (mlock2 MLOCK_ONFAULT), falling back to a
 * plain mlock on a kernel without it. A plain mlock maps in the whole range at once: for an
 * 18.4 GB arena on the 24 GiB virtual test machine that stalled the first decode token 13 s
 * (decode of 8 tokens 0.27 tok/s, that token counted), zeroing slots that the run never filled;
 * locked on fault, each slot is mapped by the read that first fills it. */
static int lock_range(void *p, uint64_t bytes)
{
    if (mlock2(p, (size_t)bytes, MLOCK_ONFAULT) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    return mlock(p, (size_t)bytes);
}

void gm_stream_token(gm_stream *s)
{
    s->prefill = false;
    s->token++;
    s->st.tokens++;
    phase_boundary(s);
    ring_release(s); /* before the arena is wired: the two share the memory */
    if (s->lend_frac < 1.0) {
        s->lend_frac = 1.0; /* the lend is repaid: layers regrow at their next calls */
        s->resize_gen++;
    }
    if (!s->locked_tried && s->o.lock_arena && s->arena) {
        /* the arena is locked at the first decode token, after the prefill has used its memory */
        s->locked_tried = true;
        if (lock_range(s->arena, s->arena_map_bytes) == 0)
            s->locked = true;
        else
            gm_log(GM_LOG_INFO, "[stream] decode arena not locked (mlock: %s); it stays anonymous memory",
                   strerror(errno));
    }
}

static void fill_ptrs(const gm_stream *s, const call_entry *c, gm_stream_expert *out)
{
    const layer_state *ls = &s->layers[s->cur_layer];
    for (int kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        const kind_geom *kg = &ls->kind[kd];
        out->data[kd] = NULL;
        if (!kg->present)
            continue;
        uint64_t off = kg->stack_off + (uint64_t)c->expert * kg->expert_bytes;
        if (c->wedged || c->slot < 0) {
            out->data[kd] = kg->mapped + (uint64_t)c->expert * kg->expert_bytes;
            continue;
        }
        uint64_t head = s->direct ? off % s->align : 0;
        out->data[kd] = ls->slots + (uint64_t)c->slot * ls->slot_bytes + kg->slot_off + head;
    }
}

static bool routed(const int32_t *ids, uint32_t k, int32_t x)
{
    for (uint32_t j = 0; j < k; j++)
        if (ids[j] == x)
            return true;
    return false;
}

/* The layer's previous prediction against its routing now: recall counts and the rank gate. */
static void score_prediction(gm_stream *s, layer_state *ls, const int32_t *ids, uint32_t k)
{
    uint32_t uniq = 0;
    for (uint32_t j = 0; j < k; j++)
        uniq += !routed(ids, j, ids[j]);
    if (ls->n_pred) {
        static const uint32_t at[5] = {1, 2, 4, 6, 8};
        s->st.la_predictions++;
        s->st.la_actual += uniq;
        for (uint32_t r = 0; r < ls->n_pred && r < GM_STREAM_PREDICT_MAX; r++) {
            bool hit = routed(ids, k, ls->pred[r]);
            for (int i = 0; i < 5; i++)
                s->st.la_recall_hits[i] += hit && r < at[i];
            ls->gate_ema[r] += ((hit ? 1.0f : 0.0f) - ls->gate_ema[r]) * (1.0f / 64.0f);
        }
        ls->n_pred = 0;
    }
    if (ls->n_prev) {
        s->st.la_prev_actual += uniq;
        for (uint32_t j = 0; j < k; j++)
            s->st.la_prev_hits += !routed(ids, j, ids[j]) && routed(ls->prev, ls->n_prev, ids[j]);
    }
    memcpy(ls->prev, ids, k * sizeof *ids);
    ls->n_prev = k;
}

/* At a layer's call: prestages it did not route that are still reading are cancelled (their
 * slots empty when the cancellation lands); the routed ones are joined by the call. */
static void settle_prestages(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k)
{
    layer_state *ls = &s->layers[layer];
    for (uint32_t i = 0; i < ls->n_pre_slots; i++) {
        uint32_t slot = (uint32_t)ls->pre_slots[i];
        if (ls->is_pre[slot] != 1 || !ls->inflight[slot] || routed(ids, k, ls->slot_expert[slot]))
            continue;
        if (s->o.lookahead_cancel) {
            for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
                if (ls->kind[kd].present)
                    gm_io_cancel(s->io, tag(layer, slot, kd));
            ls->is_pre[slot] = 2;
            ls->n_cancelling++;
        }
    }
    /* a small arena may need the slots those reads hold: let them end first (a cancelled read
     * ends at once unless it is on the device), so the call never falls to the page cache */
    double t0 = now_s();
    double deadline = read_deadline(s);
    while (!gm_policy_would_fit(s->policy, layer, ids, k)) {
        bool loading = false;
        for (uint32_t i = 0; i < ls->n_pre_slots; i++)
            loading |= ls->is_pre[ls->pre_slots[i]] && ls->inflight[ls->pre_slots[i]];
        if (!loading)
            break;
        int timeout = timeout_until(deadline);
        uint32_t n = 0;
        gm_err ignore = {0};
        if (timeout == 0 || pump(s, timeout, &n, &ignore) != 0 || n == 0) {
            for (uint32_t i = 0; i < ls->n_pre_slots; i++)
                if (ls->is_pre[ls->pre_slots[i]] && ls->inflight[ls->pre_slots[i]])
                    quarantine(s, layer, (uint32_t)ls->pre_slots[i], true);
            break;
        }
    }
    double waited = now_s() - t0;
    s->st.stall_s += waited;
    gm_stream_phase_add(s, GM_PHASE_WAIT, waited);
    ls->n_pre_slots = 0;
}

/* A routed expert whose prestage was cancelled at an earlier call (and whose read has not come
 * back yet) would join a read that may end cancelled: let it end first, so the call sees the
 * expert resident (the read finished anyway) or absent (it reads it again). */
static void await_cancelled(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k)
{
    layer_state *ls = &s->layers[layer];
    double t0 = now_s();
    for (uint32_t i = 0; i < ls->n_slots && ls->n_cancelling; i++) {
        if (ls->is_pre[i] != 2 || !routed(ids, k, ls->slot_expert[i]))
            continue;
        double deadline = read_deadline(s);
        while (ls->is_pre[i] == 2 && ls->inflight[i]) {
            int timeout = timeout_until(deadline);
            uint32_t n = 0;
            gm_err ignore = {0};
            if (timeout == 0 || pump(s, timeout, &n, &ignore) != 0 || n == 0) {
                quarantine(s, layer, i, false);
                break;
            }
        }
    }
    double waited = now_s() - t0;
    s->st.stall_s += waited;
    gm_stream_phase_add(s, GM_PHASE_WAIT, waited);
}

/* The slots a layer holds at these pressure steps and lend share (never fewer than a token's
 * experts, never more than sized). */
static uint32_t target_slots(const gm_stream *s, const layer_state *ls, uint32_t steps)
{
    uint32_t n = gm_pressure_slots(ls->orig_slots, s->min_slots_k, steps);
    if (s->lend_frac < 1.0) {
        uint32_t m = (uint32_t)((double)n * s->lend_frac);
        n = m > s->min_slots_k ? m : s->min_slots_k;
        if (n > ls->orig_slots)
            n = ls->orig_slots;
    }
    return n;
}

/* The arena's bytes when every layer holds its slots at this many pressure steps. */
static uint64_t arena_at(const gm_stream *s, uint32_t steps)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->n_layers; l++) {
        const layer_state *ls = &s->layers[l];
        if (ls->covered)
            b += (uint64_t)target_slots(s, ls, steps) * ls->slot_bytes;
    }
    return b;
}

static void pressure_poll(gm_stream *s)
{
    gm_pressure_sample smp;
    gm_pressure_read(s->o.psi_path, s->o.meminfo_path, &smp);
    gm_pressure_level lv = gm_pressure_level_of(&smp, s->pr.floor_bytes);
    uint32_t before = s->pr.steps;
    uint64_t now = arena_at(s, before), back = before ? arena_at(s, before - 1) : now;
    int d = gm_pressure_poll(&s->pr, lv, &smp, now, back);
    if (d)
        s->resize_gen++;
    if (d > 0)
        gm_log(GM_LOG_WARN, "[stream] memory pressure (level %d: PSI some %.1f%% full %.1f%%, %.2f GB available, "
                "floor %.2f GB): decode arena shrinking toward %.2f GB", (int)lv, smp.some_avg10,
                smp.full_avg10, (double)smp.avail_bytes / 1e9, (double)s->pr.floor_bytes / 1e9,
                (double)arena_at(s, s->pr.steps) / 1e9);
    else if (d < 0)
        gm_log(GM_LOG_NOTE, "[stream] memory pressure cleared: decode arena regrowing toward %.2f GB",
                (double)arena_at(s, s->pr.steps) / 1e9);
    s->st.pressure_steps = s->pr.steps;
    s->st.pressure_shrinks = s->pr.shrinks;
    s->st.pressure_regrows = s->pr.regrows;
}

static uint64_t page_up(uint64_t v) { return (v + 4095) & ~(uint64_t)4095; }

/* Brings a layer to the slot count of the current pressure steps and lend, between two of its calls:
 * the policy picks the experts kept (most popular), their bytes move down, the freed tail goes
 * back to the kernel (or, growing, is wired again). Put off while a read of the layer is in
 * flight or a quarantined slot pins its memory (tried again at the layer's next call). */
static void resize_layer(gm_stream *s, uint32_t layer)
{
    layer_state *ls = &s->layers[layer];
    uint32_t want = target_slots(s, ls, s->pr.steps), have = ls->n_slots;
    if (want == have) {
        ls->applied_gen = s->resize_gen;
        return;
    }
    for (uint32_t i = 0; i < have; i++)
        if (ls->inflight[i])
            return;
    int rc = gm_policy_resize(s->policy, layer, want, ls->resize_src, NULL, NULL);
    if (rc == GM_EUNSUPPORTED)
        return; /* a quarantined slot: its abandoned reads may still land */
    if (rc) {
        ls->applied_gen = s->resize_gen;
        return;
    }
    for (uint32_t i = 0; i < want; i++) {
        int32_t src = ls->resize_src[i];
        if (src >= 0 && (uint32_t)src != i) {
            memcpy(ls->slots + (uint64_t)i * ls->slot_bytes, ls->slots + (uint64_t)src * ls->slot_bytes,
                   ls->slot_bytes);
            ls->slot_expert[i] = ls->slot_expert[src];
        } else if (src < 0) {
            ls->slot_expert[i] = -1;
        }
        ls->failed[i] = 0;
        ls->is_pre[i] = 0;
    }
    uintptr_t base = (uintptr_t)ls->slots;
    uint64_t lo = page_up(base + (uint64_t)(want < have ? want : have) * ls->slot_bytes);
    uint64_t hi = (base + (uint64_t)(want < have ? have : want) * ls->slot_bytes) & ~(uint64_t)4095;
    if (want < have) {
        if (hi > lo) {
            if (s->locked)
                munlock((void *)lo, hi - lo);
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
        }
    } else if (s->locked && hi > lo) {
        (void)lock_range((void *)lo, hi - lo);
    }
    s->st.arena_bytes = s->st.arena_bytes - (uint64_t)have * ls->slot_bytes + (uint64_t)want * ls->slot_bytes;
    ls->n_slots = want;
    ls->n_pre_slots = 0;
    ls->applied_gen = s->resize_gen;
    s->st.resized_layers++;
}

int gm_stream_begin(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k, gm_err *err)
{
    if (k > MAX_K)
        return gm_err_set(err, GM_EUNSUPPORTED, "%u experts per token (at most %d)", k, MAX_K);
    double t0 = now_s();
    layer_state *ls = &s->layers[layer];
    s->cur_layer = layer;
    s->cur_k = k;
    if (s->trace && !s->prefill) {
        fprintf(s->trace, "%" PRIu64 " %u", s->token ? s->token - 1 : 0, layer);
        for (uint32_t j = 0; j < k; j++)
            fprintf(s->trace, " %d", ids[j]);
        fputc('\n', s->trace);
    }
    if (!s->prefill && !ls->noted)
        score_prediction(s, ls, ids, k);
    ls->noted = false;
    if (ls->n_pre_slots)
        settle_prestages(s, layer, ids, k);
    if (s->o.pressure && !s->prefill) {
        uint32_t every = s->o.pressure_poll_every ? s->o.pressure_poll_every : GM_PRESSURE_POLL_EVERY;
        if (++s->stage_calls % every == 0)
            pressure_poll(s);
    }
    if (ls->n_cancelling)
        await_cancelled(s, layer, ids, k);
    if (ls->applied_gen != s->resize_gen) {
        /* the layer's prestages may have landed without being collected yet */
        uint32_t got = 0;
        gm_err ignore = {0};
        do
            got = 0;
        while (pump(s, 0, &got, &ignore) == 0 && got > 0);
        resize_layer(s, layer);
    }
    int32_t slot[MAX_K], evicted[MAX_K];
    uint8_t hit[MAX_K];
    int rc = gm_policy_stage(s->policy, layer, ids, k, slot, hit, evicted);
    if (rc && rc != GM_ERANGE)
        return gm_err_set(err, rc, "layer %u: the arena cannot stage experts (an id out of range)", layer);
    /* GM_ERANGE: too few replaceable slots this call; the misses come from the page cache */
    if (!s->prefill) {
        s->st.calls++;
        s->st.lookups += k;
        s->dec_lookups[layer] += k;
    } else {
        s->st.prefill_lookups += k;
    }
    for (uint32_t j = 0; j < k; j++) {
        call_entry *c = &s->cur[j];
        memset(c, 0, sizeof *c);
        c->expert = ids[j];
        c->slot = slot[j];
        bool resident = hit[j] != GM_POLICY_MISS;
        if (resident) {
            if (s->prefill) {
                s->st.prefill_hits++;
            } else {
                s->st.hits++;
                s->dec_hits[layer]++;
            }
        } else if (!s->prefill) {
            s->st.misses++;
        }
        if (c->slot < 0) {
            c->wedged = true; /* no slot this call: the page cache */
            continue;
        }
        if (hit[j] == GM_POLICY_HIT) {
            c->hit = true;
            continue;
        }
        if (hit[j] == GM_POLICY_JOIN) {
            /* loading already (a prestage, or the first copy of a repeated id); noted before
             * any demand read is submitted, since submitting may take completions and a failed
             * prestage's completion clears is_pre */
            c->joined_pre = s->layers[layer].is_pre[c->slot] != 0;
            continue;
        }
    }
    for (uint32_t j = 0; j < k; j++) {
        call_entry *c = &s->cur[j];
        if (c->slot < 0 || hit[j] != GM_POLICY_MISS)
            continue;
        if ((rc = read_expert(s, layer, (uint32_t)c->slot, c->expert, GM_IO_DEMAND, err))) {
            /* this miss and the ones not yet read give their slots back: nothing loads them */
            for (uint32_t i = j; i < k; i++) {
                call_entry *ci = &s->cur[i];
                if (ci->slot < 0 || hit[i] != GM_POLICY_MISS)
                    continue;
                gm_policy_loaded(s->policy, layer, (uint32_t)ci->slot, false);
                for (uint32_t e = 0; e < k; e++) /* and the repeats of its id that joined it */
                    if (s->cur[e].slot == ci->slot)
                        s->cur[e].wedged = true;
            }
            return rc;
        }
    }
    gm_stream_phase_add(s, GM_PHASE_STAGE, now_s() - t0);
    return 0;
}

/* Reads the queued prediction's misses at speculative priority. */
static void submit_prestage(gm_stream *s)
{
    s->la_queued = false;
    double t0 = now_s();
    layer_state *ls = &s->layers[s->la_layer];
    uint32_t n_kinds = 0;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
        n_kinds += ls->kind[kd].present;
    for (uint32_t r = 0; r < s->la_n; r++) {
        if (gm_io_free_slots(s->io, GM_IO_SPECULATIVE) < n_kinds)
            break;
        int32_t slot = -1;
        uint32_t flags = s->la_hard[r] ? GM_POLICY_PRESTAGE_HARD : 0;
        if (ls->n_pre_slots == GM_STREAM_PREDICT_MAX)
            break; /* the layer's earlier prestages are not settled yet (a call cut short) */
        if (gm_policy_prestage(s->policy, s->la_layer, s->la_ids[r], flags, &slot) != 0 || slot < 0)
            continue;
        gm_err ignore = {0};
        if (read_expert(s, s->la_layer, (uint32_t)slot, s->la_ids[r], GM_IO_SPECULATIVE, &ignore) != 0) {
            gm_policy_loaded(s->policy, s->la_layer, (uint32_t)slot, false);
            continue;
        }
        ls->pre_slots[ls->n_pre_slots++] = slot;
    }
    gm_stream_phase_add(s, GM_PHASE_PRESTAGE, now_s() - t0);
}

/* True while some expert of the current call is still reading. */
static bool call_loading(const gm_stream *s)
{
    const layer_state *ls = &s->layers[s->cur_layer];
    for (uint32_t j = 0; j < s->cur_k; j++) {
        const call_entry *c = &s->cur[j];
        if (!c->hit && !c->wedged && ls->inflight[c->slot])
            return true;
    }
    return false;
}

int32_t gm_stream_next_layer(const gm_stream *s, uint32_t l)
{
    return l < s->n_layers && s->layers[l].covered ? s->layers[l].next_layer : -1;
}

bool gm_stream_wants_prediction(const gm_stream *s) { return s->o.lookahead || s->o.lookahead_probe; }

/* Checks a prediction's ids and records the ranking for the recall figures. */
static int record_prediction(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t *n, gm_err *err)
{
    if (layer >= s->n_layers || !s->layers[layer].covered)
        return gm_err_set(err, GM_EINVAL, "lookahead: layer %u does not stream its experts", layer);
    layer_state *ls = &s->layers[layer];
    if (*n > GM_STREAM_PREDICT_MAX)
        *n = GM_STREAM_PREDICT_MAX;
    for (uint32_t r = 0; r < *n; r++)
        if (ranked[r] < 0 || (uint32_t)ranked[r] >= ls->n_expert)
            return gm_err_set(err, GM_EINVAL, "lookahead: expert %d of layer %u is out of range", ranked[r], layer);
    memcpy(ls->pred, ranked, *n * sizeof *ranked);
    ls->n_pred = *n;
    return 0;
}

int gm_stream_predict_keepers(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t n,
                              const int32_t *keep, uint32_t n_keep, gm_err *err)
{
    int rc = record_prediction(s, layer, ranked, &n, err);
    if (rc)
        return rc;
    if (!s->o.lookahead || s->prefill || n_keep == 0)
        return 0;
    if (n_keep > GM_STREAM_PREDICT_MAX)
        n_keep = GM_STREAM_PREDICT_MAX;
    for (uint32_t r = 0; r < n_keep; r++)
        if (keep[r] < 0 || (uint32_t)keep[r] >= s->layers[layer].n_expert)
            return gm_err_set(err, GM_EINVAL, "lookahead: expert %d of layer %u is out of range", keep[r], layer);
    s->la_layer = layer;
    s->la_n = n_keep;
    memcpy(s->la_ids, keep, n_keep * sizeof *keep);
    memset(s->la_hard, 1, n_keep);
    s->la_queued = true;
    if (!call_loading(s))
        submit_prestage(s);
    return 0;
}

bool gm_stream_present(const gm_stream *s, uint32_t layer, int32_t expert)
{
    if (layer >= s->n_layers || !s->layers[layer].covered)
        return false;
    const layer_state *ls = &s->layers[layer];
    const int32_t slot = gm_policy_slot(s->policy, layer, expert);
    /* a read that failed, or a prestage whose cancellation was asked, is not on its way */
    return slot >= 0 && ls->is_pre[slot] != 2 && !ls->failed[slot] && !ls->slot_bad[slot];
}

void gm_stream_note_routing(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k)
{
    if (layer >= s->n_layers || !s->layers[layer].covered || s->prefill)
        return;
    score_prediction(s, &s->layers[layer], ids, k > MAX_K ? MAX_K : k);
    s->layers[layer].noted = true;
}

void gm_stream_skip(gm_stream *s, uint32_t layer)
{
    if (layer >= s->n_layers || !s->layers[layer].covered)
        return;
    layer_state *ls = &s->layers[layer];
    ls->n_pred = 0;
    const int32_t none[1] = {-1};
    if (ls->n_pre_slots)
        settle_prestages(s, layer, none, 0); /* nothing routed: every read-ahead is unrouted */
}

int gm_stream_predict(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t n, gm_err *err)
{
    int rc = record_prediction(s, layer, ranked, &n, err);
    if (rc)
        return rc;
    layer_state *ls = &s->layers[layer];
    if (!s->o.lookahead || s->prefill)
        return 0;
    uint32_t width = s->o.lookahead_k < n ? s->o.lookahead_k : n, r = 0;
    while (r < width && ls->gate_ema[r] >= s->o.lookahead_min_p)
        r++;
    if (r == 0)
        return 0;
    s->la_layer = layer;
    s->la_n = r;
    memcpy(s->la_ids, ranked, r * sizeof *ranked);
    for (uint32_t i = 0; i < r; i++)
        s->la_hard[i] = ls->gate_ema[i] >= s->o.lookahead_hard_p;
    s->la_queued = true;
    if (!call_loading(s))
        submit_prestage(s);
    return 0;
}

bool gm_stream_get(gm_stream *s, uint32_t j, gm_stream_expert *out)
{
    call_entry *c = &s->cur[j];
    const layer_state *ls = &s->layers[s->cur_layer];
    if (!c->hit && !c->wedged) {
        if (ls->inflight[c->slot] || ls->failed[c->slot] || ls->slot_bad[c->slot])
            return false;
        c->hit = true;
    }
    fill_ptrs(s, c, out);
    return true;
}

/* Waits until expert j's slot has all its slices (or the timeout passes). */
int gm_stream_wait(gm_stream *s, uint32_t j, gm_stream_expert *out, gm_err *err)
{
    call_entry *c = &s->cur[j];
    layer_state *ls = &s->layers[s->cur_layer];
    double t0;
    double deadline;
    int rc = 0;
again:
    t0 = now_s();
    deadline = read_deadline(s);
    while (!c->hit && !c->wedged && ls->inflight[c->slot]) {
        int timeout = timeout_until(deadline);
        uint32_t n = 0;
        if (timeout != 0 && (rc = pump(s, timeout, &n, err)))
            break;
        if (n == 0 && deadline > 0 && now_s() >= deadline) {
            /* stuck past the timeout: abandon the read, set the slot aside, use the page cache */
            quarantine(s, s->cur_layer, (uint32_t)c->slot, true);
            s->st.wedged++;
            /* every entry on the slot (a repeated id) is now computed from the page cache: the
             * slot may be emptied before they are waited for, with its bytes half read */
            for (uint32_t i = 0; i < s->cur_k; i++)
                if (s->cur[i].slot == c->slot && !s->cur[i].hit)
                    s->cur[i].wedged = true;
            gm_log(GM_LOG_WARN, "[stream] read of layer %u expert %d stalled past %u ms; it is read "
                    "through the page cache and its slot is set aside",
                    s->cur_layer, c->expert, s->o.read_timeout_ms);
        }
    }
    double waited = now_s() - t0;
    s->st.stall_s += waited;
    gm_stream_phase_add(s, GM_PHASE_WAIT, waited);
    if (rc)
        return rc;
    if (!c->hit && !c->wedged && ls->slot_bad[c->slot])
        c->wedged = true; /* another entry of the call shares the slot and it was set aside */
    if (!c->hit && !c->wedged && ls->failed[c->slot] && c->joined_pre && !c->reread &&
        gm_policy_retake(s->policy, s->cur_layer, (uint32_t)c->slot, c->expert) == 0) {
        /* the lookahead read the call joined failed: it is discarded (counted), and the expert
         * read again as the call's own miss */
        c->reread = true;
        if ((rc = read_expert(s, s->cur_layer, (uint32_t)c->slot, c->expert, GM_IO_DEMAND, err))) {
            gm_policy_loaded(s->policy, s->cur_layer, (uint32_t)c->slot, false);
            c->wedged = true;
            return rc;
        }
        goto again;
    }
    if (!c->hit && !c->wedged && ls->failed[c->slot]) {
        uint32_t kd = ls->fail_kind[c->slot];
        const kind_geom *kg = &ls->kind[kd];
        int64_t res = ls->fail_res[c->slot];
        uint64_t off = kg->stack_off + (uint64_t)c->expert * kg->expert_bytes;
        c->wedged = true; /* nothing of it is used */
        if (res < 0)
            return gm_err_set(err, GM_EIO, "%s: reading layer %u expert %d (%llu bytes at offset %llu) failed: %s",
                              gm_gguf_part_path(s->g, kg->part), s->cur_layer, c->expert,
                              (unsigned long long)kg->expert_bytes, (unsigned long long)off,
                              strerror((int)-res));
        return gm_err_set(err, GM_EIO, "%s: reading layer %u expert %d (%llu bytes at offset %llu) came "
                          "back short (%lld bytes): the file is shorter than its header says",
                          gm_gguf_part_path(s->g, kg->part), s->cur_layer, c->expert,
                          (unsigned long long)kg->expert_bytes, (unsigned long long)off, (long long)res);
    }
    if (!c->wedged)
        c->hit = true;
    if (s->la_queued && !call_loading(s))
        submit_prestage(s);
    fill_ptrs(s, c, out);
    return 0;
}

void gm_stream_end(gm_stream *s)
{
    /* slots left loading (an error cut the call short): their reads still land; keep the slots
     * aside until they do */
    layer_state *ls = &s->layers[s->cur_layer];
    for (uint32_t j = 0; j < s->cur_k; j++) {
        call_entry *c = &s->cur[j];
        if (!c->hit && !c->wedged && c->slot >= 0 && ls->inflight[c->slot]) {
            quarantine(s, s->cur_layer, (uint32_t)c->slot, false);
            c->wedged = true;
        }
    }
    s->cur_k = 0;
    /* the call's gather is over: its experts are no longer in use, so a prestage (of the next
     * token, for this layer) may evict them like any resident (spec 4.4) */
    gm_policy_end(s->policy, s->cur_layer);
    if (s->la_queued)
        submit_prestage(s);
}

void gm_stream_get_stats(const gm_stream *s, gm_stream_stats *out)
{
    *out = s->st;
    out->arena_locked = s->locked;
    gm_policy_stats ps;
    gm_policy_total_stats(s->policy, &ps);
    out->la_issued = ps.prestage_issued;
    out->la_adopted = ps.prestage_adopted;
    out->la_done = ps.prestage_done;
    out->la_joined = ps.prestage_joined;
    out->la_unused = ps.prestage_unused;
    out->la_declined = ps.prestage_declined;
}

void gm_stream_print_phases(const gm_stream *s, FILE *f)
{
    if (!s->ph_tokens)
        return;
    double k = 1e3 / (double)s->ph_tokens, sum = 0;
    for (int i = 0; i < GM_PHASE_COUNT; i++)
        sum += s->ph_sum[i];
    fprintf(f, "[phase] decode per-token ms over %llu tokens: total %.2f | disk stalls %.2f experts %.2f "
            "stage %.2f prestage %.2f lookahead %.2f | other (attention, router, head) %.2f\n",
            (unsigned long long)s->ph_tokens, s->ph_total * k, s->ph_sum[GM_PHASE_WAIT] * k,
            s->ph_sum[GM_PHASE_EXPERTS] * k, s->ph_sum[GM_PHASE_STAGE] * k,
            s->ph_sum[GM_PHASE_PRESTAGE] * k, s->ph_sum[GM_PHASE_PREDICT] * k, (s->ph_total - sum) * k);
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

void gm_stream_print_stats(const gm_stream *s, FILE *f)
{
    gm_stream_stats st;
    gm_stream_get_stats(s, &st);
    if (st.la_adopted)
        fprintf(f, "[stream] decode feeder arena hit rate: %.1f%% (%llu of %llu expert lookups; %.1f%% were "
                "resident before the lookahead read ahead)\n", pct(st.hits, st.lookups),
                (unsigned long long)st.hits, (unsigned long long)st.lookups,
                pct(st.hits > st.la_adopted ? st.hits - st.la_adopted : 0, st.lookups));
    else
        fprintf(f, "[stream] decode feeder arena hit rate: %.1f%% (%llu of %llu expert lookups)\n",
                pct(st.hits, st.lookups), (unsigned long long)st.hits, (unsigned long long)st.lookups);
    gm_policy_spread sp;
    gm_policy_spread_of(s->dec_hits, s->dec_lookups, s->n_layers, &sp);
    if (sp.n_layers)
        fprintf(f, "[stream] per-layer hit rate: min %.1f%% (layer %u) / median %.1f%% / max %.1f%% (layer %u) over %u MoE layers\n",
                sp.min_pct, sp.min_layer, sp.median_pct, sp.max_pct, sp.max_layer, sp.n_layers);
    if (st.prefill_lookups)
        fprintf(f, "[stream] prefill: %llu expert lookups through the arena, %.1f%% resident\n",
                (unsigned long long)st.prefill_lookups, pct(st.prefill_hits, st.prefill_lookups));
    if (st.split_calls)
        fprintf(f, "[stream] arena token split: %llu short prefills after decode (%llu tokens) through the "
                "decode arena (GMLX_ARENA_TOKEN_SPLIT=0 disables)\n", (unsigned long long)st.split_calls,
                (unsigned long long)st.split_tokens);
    if (st.ring_layers)
        fprintf(f, "[stream] prefill ring: %llu layers from 2 x %.2f GB slots, %.2f GB read, waited %.2f s\n",
                (unsigned long long)st.ring_layers, (double)st.ring_bytes / 2e9,
                (double)st.ring_read_bytes / 1e9, st.ring_wait_s);
    if (st.ring_seeded)
        fprintf(f, "[stream] prefill ring seeded the decode arena with %llu experts (%.2f GB copied in %.2f s, "
                "not read again; GMLX_FEEDER_PREFILL_SEED=0 disables)\n", (unsigned long long)st.ring_seeded,
                (double)st.ring_seeded_bytes / 1e9, st.ring_seed_s);
    if (st.la_issued || st.la_declined)
        fprintf(f, "[stream] lookahead prestage: %llu predicted expert reads, %llu adopted by routing (%llu "
                "already done, %llu joined), %llu unused (%llu cancelled), %llu discarded (failed); %llu "
                "declined (no slot colder than the guess); %.2f GB read ahead\n",
                (unsigned long long)st.la_issued, (unsigned long long)st.la_adopted,
                (unsigned long long)st.la_done, (unsigned long long)st.la_joined,
                (unsigned long long)st.la_unused, (unsigned long long)st.la_cancelled,
                (unsigned long long)st.la_failed, (unsigned long long)st.la_declined, (double)st.la_bytes / 1e9);
    if (st.la_predictions)
        fprintf(f, "[lookahead] router recall (predicted@K vs actual routing) over %llu token-layers: @1 %.1f%% "
                "@2 %.1f%% @4 %.1f%% @6 %.1f%% @8 %.1f%%; previous-token baseline %.1f%%\n",
                (unsigned long long)st.la_predictions, pct(st.la_recall_hits[0], st.la_actual),
                pct(st.la_recall_hits[1], st.la_actual), pct(st.la_recall_hits[2], st.la_actual),
                pct(st.la_recall_hits[3], st.la_actual), pct(st.la_recall_hits[4], st.la_actual),
                pct(st.la_prev_hits, st.la_prev_actual));
    fprintf(f, "[stream] arena %.3f GB on %u layers, %u-%u slots per layer; %llu decode tokens\n",
            (double)st.arena_bytes / 1e9, st.covered_layers, st.min_slots, st.max_slots,
            (unsigned long long)st.tokens);
    double per_tok = st.tokens ? 1.0 / (double)st.tokens : 0;
    fprintf(f, "[stream] read %.2f GB in %llu reads (%.3f GB per token), stalled %.1f ms per token, %s%s\n",
            (double)st.bytes_read / 1e9, (unsigned long long)st.reads,
            (double)st.bytes_read / 1e9 * per_tok, st.stall_s * 1e3 * per_tok,
            gm_io_backend_name(s->io), s->direct ? " O_DIRECT" : " buffered");
    if (st.pressure_shrinks || st.pressure_regrows)
        fprintf(f, "[stream] memory pressure: %llu shrinking steps, %llu regrowing; arena now %.3f GB of %.3f GB "
                "sized (%u steps down)\n", (unsigned long long)st.pressure_shrinks,
                (unsigned long long)st.pressure_regrows, (double)st.arena_bytes / 1e9,
                (double)st.arena_sized_bytes / 1e9, st.pressure_steps);
    if (st.wedged)
        fprintf(f, "[stream] %llu reads stalled past the timeout and were served from the page cache\n",
                (unsigned long long)st.wedged);
}
