/* The decode feeder: the arena's memory, slots and reads, and the per-call stage, get, wait and end
 * (see stream.h; the prefill ring, the lookahead, the resizing and the figures are in ring.c,
 * lookahead.c, resize.c and stats.c, feeder_internal.h what they share). */
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
#include "stream/feeder_internal.h"


/* gm_stream_opts' queue_depth and spec_depth when given as 0 (stream.h) */
#define FEED_QUEUE_DEPTH 96u
#define FEED_SPEC_DEPTH 24u

void gm_stream_opts_default(gm_stream_opts *o)
{
    memset(o, 0, sizeof *o);
    o->halve_every = 4096;
    o->read_timeout_ms = 5000;
    o->backend = GM_IO_AUTO;
    o->queue_depth = FEED_QUEUE_DEPTH;
    o->spec_depth = FEED_SPEC_DEPTH;
    o->lock_arena = true;
    o->arena_thp = true;
    o->arena_warm = true;
    o->lookahead = true;
    o->lookahead_k = 6;
    o->lookahead_min_p = 0.5f;
    o->lookahead_hard_p = 0.9f;
    o->lookahead_cancel = true;
    o->ring_seed = true;
    o->pressure = true;
    o->pressure_floor_bytes = 1ull << 30;
    o->prefill_ring = true;
    o->ring_min_tokens = 8;
    o->ring_min_cover_pct = 50;
    o->ring_sparse = true;
}

double gm_feed_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The routing trace gathers its lines in trace_buf and writes them a block at a time (as a
 * stdio stream would), the rest when the stream is freed. */
#define TRACE_FLUSH_BYTES 4096

static void trace_flush(gm_stream *s)
{
    const char *p = s->trace_buf.data;
    size_t n = s->trace_buf.len;
    while (n) {
        ssize_t w = write(s->trace_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* the trace is a diagnostic: a failed write drops its block, decoding goes on */
        p += w;
        n -= (size_t)w;
    }
    gm_strbuf_reset(&s->trace_buf);
}

void gm_stream_free(gm_stream *s)
{
    if (!s)
        return;
    gm_warm_free(s->warm);
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
    if (s->trace_fd >= 0) {
        trace_flush(s);
        close(s->trace_fd);
    }
    gm_strbuf_free(&s->trace_buf);
    free(s);
}

uint64_t gm_feed_align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* The moment a wait for reads gives up (the read timeout from now), or 0: never. Read timeouts
 * are measured on the read queue's clock (a test's virtual clock, else CLOCK_MONOTONIC). */
double gm_feed_read_deadline(const gm_stream *s)
{
    return s->o.read_timeout_ms ? gm_io_clock_s(s->io) + s->o.read_timeout_ms * 1e-3 : 0;
}

/* gm_io_wait's timeout until deadline: -1 (none), 0 (passed) or the milliseconds left. */
int gm_feed_timeout_until(const gm_stream *s, double deadline)
{
    if (deadline <= 0)
        return -1;
    double left = deadline - gm_io_clock_s(s->io);
    return left > 0 ? (int)(left * 1e3) + 1 : 0;
}

bool gm_feed_past(const gm_stream *s, double deadline) { return deadline > 0 && gm_io_clock_s(s->io) >= deadline; }


/* A read's user tag: layer (16 bits), slot (24), kind (4). A slot has at most one load in flight
 * (a quarantined slot is not reused until its abandoned reads have come back), so the tag names
 * one read. */
uint64_t gm_feed_tag(uint32_t layer, uint32_t slot, uint32_t kd)
{
    return ((uint64_t)(layer & 0xffff) << 28) | ((uint64_t)(slot & 0xffffff) << 4) | (kd & 0xf);
}

/* File range of one slice read: [*start, *start + *len), and the bytes of it that must arrive. */
static uint64_t slice_range(const gm_stream *s, const kind_geom *kg, int32_t expert, uint64_t *start,
                            uint64_t *len)
{
    uint64_t off = kg->stack_off + (uint64_t)expert * kg->expert_bytes;
    *start = s->direct ? off / s->align * s->align : off;
    *len = s->direct ? gm_feed_align_up(off + kg->expert_bytes, s->align) - *start : kg->expert_bytes;
    return off + kg->expert_bytes - *start;
}


/* Queues the slice reads of expert into slot (its counters set); 0 or the submit error (a
 * demand read waits for request slots; a speculative one is refused when they are full). */
int gm_feed_read_expert(gm_stream *s, uint32_t layer, uint32_t slot, int32_t expert, gm_io_prio prio,
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
        r->user = gm_feed_tag(layer, slot, kd);
        r->prio = prio;
        bytes += len;
    }
    int rc = prio == GM_IO_DEMAND ? gm_feed_submit_demand(s, reqs, n_req, err)
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
void gm_feed_quarantine(gm_stream *s, uint32_t layer, uint32_t slot, bool stalled)
{
    layer_state *ls = &s->layers[layer];
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
        if (ls->kind[kd].present)
            gm_io_cancel(s->io, gm_feed_tag(layer, slot, kd));
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

static void on_done(gm_stream *s, const gm_io_done *d)
{
    uint32_t layer = (uint32_t)(d->user >> 28) & 0xffff, slot = (uint32_t)(d->user >> 4) & 0xffffff;
    uint32_t kd = (uint32_t)(d->user & 0xf);
    if (layer == RING_TAG_LAYER) {
        gm_feed_ring_done(s, d);
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
int gm_feed_pump(gm_stream *s, int timeout_ms, uint32_t *n_out, gm_err *err)
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
int gm_feed_submit_demand(gm_stream *s, const gm_io_req *reqs, uint32_t n, gm_err *err)
{
    int rc;
    while ((rc = gm_io_submit(s->io, reqs, n, err)) == GM_ERANGE) {
        gm_err_clear(err);
        if ((rc = gm_feed_pump(s, -1, NULL, err)))
            return rc;
    }
    return rc;
}

/* The most of the arena the warm thread may map: the arena less the ring while the ring may be
 * mapped (at the start, and while it is: the ring borrows its memory from the arena's budget),
 * the whole arena once it is released. */
static uint64_t warm_cap(const gm_stream *s, bool ring_possible)
{
    const uint64_t ring = ring_possible && s->o.prefill_ring ? 2 * s->ring_slot_bytes : 0;
    return s->st.arena_sized_bytes > ring ? s->st.arena_sized_bytes - ring : 0;
}

/* Called at every decode token: the thread is woken only when the cap changes. */
void gm_feed_warm_cap(gm_stream *s)
{
    const uint64_t cap = warm_cap(s, s->ring != NULL);
    if (s->warm && cap != s->warm_cap_bytes) {
        s->warm_cap_bytes = cap;
        gm_warm_set_cap(s->warm, cap);
    }
}

/* Starts mapping the arena's pages ahead of use, within the arena less the ring until the first
 * prefill's ring is released. */
static int warm_start(gm_stream *s, gm_err *err)
{
    gm_warm_layer *wl = calloc(s->n_layers ? s->n_layers : 1, sizeof *wl);
    if (!wl)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint32_t l = 0; l < s->n_layers; l++)
        if (s->layers[l].covered)
            wl[l] = (gm_warm_layer){.slots = s->layers[l].slots, .slot_bytes = s->layers[l].slot_bytes,
                                    .n_slots = s->layers[l].n_slots};
    s->warm_cap_bytes = warm_cap(s, true);
    int rc = gm_warm_start(&s->warm, wl, s->n_layers, s->warm_cap_bytes, err);
    free(wl);
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
    s->trace_fd = -1;
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
        s->arena_map_bytes = gm_feed_align_up(total, 1u << 21);
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
                b += gm_feed_align_up(ls->kind[kd].expert_bytes * ls->n_expert + 2 * s->align, s->align);
        if (b > s->ring_slot_bytes)
            s->ring_slot_bytes = b;
    }
    int32_t next = -1;
    for (uint32_t l = s->n_layers; l-- > 0;) {
        s->layers[l].next_layer = next;
        if (s->layers[l].covered)
            next = (int32_t)l;
    }
    /* demand reads may fill the device; speculative ones keep to spec_depth of it, and to four
     * times that queued */
    const uint32_t qd = o->queue_depth ? o->queue_depth : FEED_QUEUE_DEPTH;
    const uint32_t spec = o->spec_depth ? o->spec_depth : FEED_SPEC_DEPTH;
    gm_io_opts io = {.backend = o->backend, .queue_depth = qd, .n_threads = 8, .fault = o->fault};
    if (spec < qd) {
        io.demand_reserve = qd - spec;
        io.capacity = qd + 4 * spec;
    }
    if ((rc = gm_io_create(&s->io, &io, err)))
        goto fail;
    if (o->arena_warm && s->arena && (rc = warm_start(s, err)))
        goto fail;
    if (o->trace_path) {
        s->trace_fd = open(o->trace_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (s->trace_fd < 0) {
            rc = gm_err_errno(err, GM_EIO, errno, "GMLX_LOG_ROUTED=%s: cannot write", o->trace_path);
            goto fail;
        }
        /* room for a block and the line that passes it: decode appends without allocating */
        if (!gm_strbuf_reserve(&s->trace_buf, 2 * TRACE_FLUSH_BYTES)) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
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
    o->spec_depth = 2 * FEED_SPEC_DEPTH;
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
        const double t0 = gm_feed_now();
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
        const double sec = gm_feed_now() - t0;
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


double gm_stream_now_s(void) { return gm_feed_now(); }

void gm_stream_phase_add(gm_stream *s, gm_stream_phase ph, double seconds)
{
    if ((unsigned)ph < GM_PHASE_COUNT)
        s->ph_win[ph] += seconds;
}

/* Closes the open token window at a token boundary: counted unless a prefill call ran in it. */
static void phase_boundary(gm_stream *s)
{
    double t = gm_feed_now();
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
    if (s->warm_paused) {
        gm_warm_pause(s->warm, false);
        s->warm_paused = false;
    }
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
int gm_feed_lock_range(void *p, uint64_t bytes)
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
    gm_feed_ring_release(s); /* before the arena is wired: the two share the memory */
    gm_feed_warm_cap(s);     /* no ring now: the whole arena (a later ring lowers it again) */
    if (s->warm && !s->warm_paused) {
        gm_warm_pause(s->warm, true);
        s->warm_paused = true;
    }
    if (s->lend_frac < 1.0) {
        s->lend_frac = 1.0; /* the lend is repaid: layers regrow at their next calls */
        s->resize_gen++;
    }
    if (!s->locked_tried && s->o.lock_arena && s->arena) {
        /* the arena is locked at the first decode token, after the prefill has used its memory */
        s->locked_tried = true;
        if (gm_feed_lock_range(s->arena, s->arena_map_bytes) == 0)
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



int gm_stream_begin(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k, gm_err *err)
{
    if (k > MAX_K)
        return gm_err_set(err, GM_EUNSUPPORTED, "%u experts per token (at most %d)", k, MAX_K);
    double t0 = gm_feed_now();
    layer_state *ls = &s->layers[layer];
    s->cur_layer = layer;
    s->cur_k = k;
    if (s->prefill && s->warm)
        gm_warm_hint(s->warm, layer + 1); /* this layer's reads are being issued: map the next one's slots */
    if (s->trace_fd >= 0 && !s->prefill) {
        gm_strbuf *tb = &s->trace_buf;
        gm_strbuf_putf(tb, "%" PRIu64 " %u", s->token ? s->token - 1 : 0, layer);
        for (uint32_t j = 0; j < k; j++)
            gm_strbuf_putf(tb, " %d", ids[j]);
        gm_strbuf_putc(tb, '\n');
        if (tb->len >= TRACE_FLUSH_BYTES)
            trace_flush(s);
    }
    if (!s->prefill && !ls->noted)
        gm_feed_score_prediction(s, ls, ids, k);
    ls->noted = false;
    if (ls->n_pre_slots)
        gm_feed_settle_prestages(s, layer, ids, k);
    if (s->o.pressure && !s->prefill) {
        uint32_t every = s->o.pressure_poll_every ? s->o.pressure_poll_every : GM_PRESSURE_POLL_EVERY;
        if (++s->stage_calls % every == 0)
            gm_feed_pressure_poll(s);
    }
    if (ls->n_cancelling)
        gm_feed_await_cancelled(s, layer, ids, k);
    if (ls->applied_gen != s->resize_gen) {
        /* the layer's prestages may have landed without being collected yet */
        uint32_t got = 0;
        gm_err ignore = {0};
        do
            got = 0;
        while (gm_feed_pump(s, 0, &got, &ignore) == 0 && got > 0);
        gm_feed_resize_layer(s, layer);
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
        if ((rc = gm_feed_read_expert(s, layer, (uint32_t)c->slot, c->expert, GM_IO_DEMAND, err))) {
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
    gm_stream_phase_add(s, GM_PHASE_STAGE, gm_feed_now() - t0);
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
    t0 = gm_feed_now();
    deadline = gm_feed_read_deadline(s);
    while (!c->hit && !c->wedged && ls->inflight[c->slot]) {
        int timeout = gm_feed_timeout_until(s, deadline);
        uint32_t n = 0;
        if (timeout != 0 && (rc = gm_feed_pump(s, timeout, &n, err)))
            break;
        if (n == 0 && gm_feed_past(s, deadline)) {
            /* stuck past the timeout: abandon the read, set the slot aside, use the page cache */
            gm_feed_quarantine(s, s->cur_layer, (uint32_t)c->slot, true);
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
    double waited = gm_feed_now() - t0;
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
        if ((rc = gm_feed_read_expert(s, s->cur_layer, (uint32_t)c->slot, c->expert, GM_IO_DEMAND, err))) {
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
    if (s->la_queued && !gm_feed_call_loading(s))
        gm_feed_submit_prestage(s);
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
            gm_feed_quarantine(s, s->cur_layer, (uint32_t)c->slot, false);
            c->wedged = true;
        }
    }
    s->cur_k = 0;
    /* the call's gather is over: its experts are no longer in use, so a prestage (of the next
     * token, for this layer) may evict them like any resident (spec 4.4) */
    gm_policy_end(s->policy, s->cur_layer);
    if (s->la_queued)
        gm_feed_submit_prestage(s);
}


