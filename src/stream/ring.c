/* stream/ring: the prefill ring (two slots, each a layer's whole expert stacks, read while the
 * previous layer computes) and the decode arena it seeds (see stream.h and feeder_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "stream/feeder_internal.h"

/* ---- prefill ring ---- */

/* Kind kd's region within a ring slot for layer l: offset of the region, and of its data. */
static uint64_t ring_region(const gm_stream *s, const layer_state *ls, uint32_t kd, uint64_t *data_off)
{
    uint64_t off = 0;
    for (uint32_t k = 0; k < kd; k++)
        if (ls->kind[k].present)
            off += gm_feed_align_up(ls->kind[k].expert_bytes * ls->n_expert + 2 * s->align, s->align);
    *data_off = off + (s->direct ? ls->kind[kd].stack_off % s->align : 0);
    return off;
}

/* File range [*start, *end) read for kind kd's stack, and the end of the bytes that must arrive. */
static uint64_t ring_range(const gm_stream *s, const kind_geom *kg, uint32_t n_expert, uint64_t *start, uint64_t *end)
{
    uint64_t lo = kg->stack_off, hi = kg->stack_off + kg->expert_bytes * n_expert;
    *start = s->direct ? lo / s->align * s->align : lo;
    *end = s->direct ? gm_feed_align_up(hi, s->align) : hi;
    return hi;
}

/* A sparse read's file range: experts first .. first + count - 1 of kind kg, [*start, *end) read
 * (aligned for O_DIRECT), the end of the bytes that must arrive returned. */
static uint64_t sparse_range(const gm_stream *s, const kind_geom *kg, uint32_t first, uint32_t count, uint64_t *start,
                             uint64_t *end)
{
    uint64_t lo = kg->stack_off + (uint64_t)first * kg->expert_bytes, hi = lo + (uint64_t)count * kg->expert_bytes;
    *start = s->direct ? lo / s->align * s->align : lo;
    *end = s->direct ? gm_feed_align_up(hi, s->align) : hi;
    return hi;
}

/* The next run of experts of ring slot rs's last reads from x on (req[] set), at most a read's
 * worth: its first expert and count (0: none left). */
static uint32_t sparse_run(const gm_stream *s, uint32_t rs, const layer_state *ls, uint32_t kd, uint32_t *x)
{
    const uint64_t eb = ls->kind[kd].expert_bytes;
    const uint32_t cap = eb >= RING_CHUNK_BYTES ? 1 : (uint32_t)(RING_CHUNK_BYTES / eb);
    while (*x < ls->n_expert && !s->ring_req[rs][*x])
        (*x)++;
    uint32_t n = 0;
    while (*x + n < ls->n_expert && n < cap && s->ring_req[rs][*x + n])
        n++;
    return n;
}

void gm_feed_ring_done(gm_stream *s, const gm_io_done *d)
{
    uint32_t field = (uint32_t)(d->user >> 4) & 0xffffff, kd = (uint32_t)(d->user & 0xf);
    uint32_t rs = field >> 20, chunk = field & 0xfffff;
    if (rs > 1 || !s->ring_pending[rs] || s->ring_layer[rs] < 0 || kd >= GM_EXP_KIND_COUNT)
        return;
    const layer_state *ls = &s->layers[s->ring_layer[rs]];
    uint64_t start, end, at, need;
    if (s->ring_sparse[rs]) { /* chunk: the run's first expert, then its count less 1 */
        const uint64_t hi = sparse_range(s, &ls->kind[kd], chunk >> 10, (chunk & 0x3ff) + 1, &start, &end);
        at = start;
        need = hi - start;
    } else {
        const uint64_t hi = ring_range(s, &ls->kind[kd], ls->n_expert, &start, &end);
        at = start + (uint64_t)chunk * RING_CHUNK_BYTES;
        need = (hi < at + RING_CHUNK_BYTES ? hi : at + RING_CHUNK_BYTES) - at;
    }
    if ((d->result < 0 || (uint64_t)d->result < need) && !s->ring_failed[rs]) {
        s->ring_failed[rs] = true;
        s->ring_fail_res[rs] = d->result;
        s->ring_fail_off[rs] = at;
        s->ring_fail_part[rs] = ls->kind[kd].part;
    }
    s->ring_pending[rs]--;
}

/* Queues one read of ring slot rs (its tag's field and kind), counted as in flight. */
static int ring_submit(gm_stream *s, uint32_t rs, const kind_geom *kg, uint64_t offset, uint64_t len, uint8_t *buf,
                       uint32_t field, uint32_t kd, gm_err *err)
{
    gm_io_req r = {.fd = s->fds[kg->part], .offset = offset, .len = len, .buf = buf,
                   .user = gm_feed_tag(RING_TAG_LAYER, (rs << 20) | field, kd), .prio = GM_IO_DEMAND};
    int rc = gm_feed_submit_demand(s, &r, 1, err);
    if (rc)
        return rc;
    s->ring_pending[rs]++;
    s->st.ring_read_bytes += len;
    return 0;
}

/* Queues the reads of layer l's whole stacks into ring slot rs. */
static int ring_read(gm_stream *s, uint32_t rs, uint32_t layer, gm_err *err)
{
    const layer_state *ls = &s->layers[layer];
    uint8_t *base = s->ring + (uint64_t)rs * s->ring_slot_bytes;
    s->ring_layer[rs] = (int32_t)layer;
    s->ring_failed[rs] = false;
    s->ring_sparse[rs] = false;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        const kind_geom *kg = &ls->kind[kd];
        if (!kg->present)
            continue;
        uint64_t data_off, start, end;
        uint64_t region = ring_region(s, ls, kd, &data_off);
        ring_range(s, kg, ls->n_expert, &start, &end);
        uint32_t chunk = 0;
        for (uint64_t at = start; at < end; at += RING_CHUNK_BYTES, chunk++) {
            int rc = ring_submit(s, rs, kg, at, end - at < RING_CHUNK_BYTES ? end - at : RING_CHUNK_BYTES,
                                 base + region + (at - start), chunk, kd, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Queues the reads of the experts of layer l that use_count routes to (n_expert entries) into
 * ring slot rs, each at its place in the layer's stacks (as a whole read would put it): runs of
 * consecutive experts a read each. add: the slot holds some of the layer's experts already (its
 * reads done), only the others are read. */
static int ring_read_sparse(gm_stream *s, uint32_t rs, uint32_t layer, const int32_t *use_count, bool add,
                            gm_err *err)
{
    const layer_state *ls = &s->layers[layer];
    uint8_t *base = s->ring + (uint64_t)rs * s->ring_slot_bytes;
    if (!add) {
        s->ring_layer[rs] = (int32_t)layer;
        s->ring_failed[rs] = false;
        s->ring_sparse[rs] = true;
        memset(s->ring_has[rs], 0, ls->n_expert);
    }
    for (uint32_t x = 0; x < ls->n_expert; x++) {
        s->ring_req[rs][x] = use_count[x] > 0 && !s->ring_has[rs][x];
        s->ring_has[rs][x] |= s->ring_req[rs][x];
    }
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        const kind_geom *kg = &ls->kind[kd];
        if (!kg->present)
            continue;
        uint64_t data_off, whole_start, whole_end;
        const uint64_t region = ring_region(s, ls, kd, &data_off);
        ring_range(s, kg, ls->n_expert, &whole_start, &whole_end);
        for (uint32_t x = 0, n; (n = sparse_run(s, rs, ls, kd, &x)) > 0; x += n) {
            uint64_t start, end;
            sparse_range(s, kg, x, n, &start, &end);
            int rc = ring_submit(s, rs, kg, start, end - start, base + region + (start - whole_start),
                                 (x << 10) | (n - 1), kd, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Waits for ring slot rs's reads. On a stall past the timeout the reads are cancelled and the
 * ring is given up (its memory may still be written): *stalled = true. */
static int ring_wait(gm_stream *s, uint32_t rs, bool *stalled, gm_err *err)
{
    double t0 = gm_feed_now();
    double deadline = gm_feed_read_deadline(s);
    *stalled = false;
    int rc = 0;
    while (s->ring_pending[rs]) {
        int timeout = gm_feed_timeout_until(s, deadline);
        uint32_t n = 0;
        if (timeout != 0 && (rc = gm_feed_pump(s, timeout, &n, err)))
            break;
        if (n > 0) {
            /* a read came back: the timeout is for one read, not for a whole layer (a layer of
             * 512 experts is gigabytes, seconds of a busy disk) */
            deadline = gm_feed_read_deadline(s);
            continue;
        }
        if (gm_feed_past(s, deadline)) {
            *stalled = true;
            break;
        }
    }
    s->st.ring_wait_s += gm_feed_now() - t0;
    return rc;
}

/* Applies op (gm_io_cancel or gm_io_abandon) to every read of ring slot rs's layer. */
static void ring_reads_do(gm_stream *s, uint32_t rs, int (*op)(gm_io *, uint64_t))
{
    const layer_state *ls = &s->layers[s->ring_layer[rs]];
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
        if (!ls->kind[kd].present)
            continue;
        if (s->ring_sparse[rs]) {
            for (uint32_t x = 0, n; (n = sparse_run(s, rs, ls, kd, &x)) > 0; x += n)
                op(s->io, gm_feed_tag(RING_TAG_LAYER, (rs << 20) | (x << 10) | (n - 1), kd));
            continue;
        }
        uint64_t start, end;
        ring_range(s, &ls->kind[kd], ls->n_expert, &start, &end);
        for (uint32_t c = 0; (uint64_t)c * RING_CHUNK_BYTES < end - start; c++)
            op(s->io, gm_feed_tag(RING_TAG_LAYER, (rs << 20) | c, kd));
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
    gm_feed_warm_cap(s);
}

/* Releases the ring (the first decode token): its reads are cancelled and waited for. */
void gm_feed_ring_release(gm_stream *s)
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
    gm_feed_warm_cap(s);
}

static bool ring_covers(const gm_stream *s, uint32_t layer, uint32_t n_used)
{
    return (uint64_t)n_used * 100 >= (uint64_t)s->o.ring_min_cover_pct * s->layers[layer].n_expert;
}

bool gm_stream_ring_wanted(const gm_stream *s, uint32_t layer, uint32_t n, uint32_t n_used)
{
    return s->o.prefill_ring && !s->ring_dead && n >= s->o.ring_min_tokens && n > 1 && layer < s->n_layers &&
           s->layers[layer].covered && s->ring_slot_bytes > 0 &&
           (ring_covers(s, layer, n_used) || (s->o.ring_sparse && s->layers[layer].n_expert <= RING_SPARSE_MAX));
}

bool gm_stream_ring_sparse(const gm_stream *s, uint32_t layer, uint32_t n_used)
{
    return layer < s->n_layers && s->o.ring_sparse && !ring_covers(s, layer, n_used) &&
           s->layers[layer].n_expert <= RING_SPARSE_MAX;
}

/* Whether ring slot a's sparse read holds every expert use_count routes to. */
static bool sparse_holds(const gm_stream *s, uint32_t a, const layer_state *ls, const int32_t *use_count)
{
    for (uint32_t x = 0; x < ls->n_expert; x++)
        if (use_count[x] > 0 && !s->ring_has[a][x])
            return false;
    return true;
}

void gm_feed_resize_layer(gm_stream *s, uint32_t layer);

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
    double deadline = gm_feed_now() + (s->o.read_timeout_ms ? s->o.read_timeout_ms : 5000) * 1e-3;
    while (gm_io_in_flight(s->io) > 0 && gm_feed_now() < deadline) {
        gm_err ignore = {0};
        if (gm_feed_pump(s, (int)((deadline - gm_feed_now()) * 1e3) + 1, NULL, &ignore) != 0)
            break;
    }
    for (uint32_t l = 0; l < s->n_layers; l++)
        if (s->layers[l].covered)
            gm_feed_resize_layer(s, l);
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
    uint64_t bytes = gm_feed_align_up(2 * s->ring_slot_bytes, 1u << 21);
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
    /* huge pages as the arena's: the ring's reads map 2.7 GB of fresh pages (a Qwen3-235B layer
     * pair), which 4 KiB faults take several times longer to map */
    if (s->o.arena_thp)
        madvise(m, bytes, MADV_HUGEPAGE);
    s->ring = m;
    s->ring_map_bytes = bytes;
    gm_feed_warm_cap(s); /* the ring's memory is the arena's while it is mapped */
    s->st.ring_bytes = 2 * s->ring_slot_bytes;
    if (!s->ring_said) {
        s->ring_said = true;
        gm_log(GM_LOG_INFO, "[stream] feeder prefill: expert stacks staged straight from the GGUF through 2 x "
               "%.2f GB ring slots, one layer ahead (GMLX_FEEDER_PREFILL=0 disables)",
               (double)s->ring_slot_bytes / 1e9);
    }
    return 0;
}

/* Starts reading the experts next_use routes to (the next covered layer's, predicted) into the
 * ring slot other than a: those it lacks when it holds some of that layer already, none when it
 * holds the whole layer. */
static int ring_prefetch_sparse(gm_stream *s, uint32_t a, int32_t next, const int32_t *next_use, bool *stalled,
                                gm_err *err)
{
    const uint32_t b = 1 - a;
    if (next < 0 || !next_use || s->layers[next].n_expert > RING_SPARSE_MAX ||
        (s->ring_layer[b] == next && !s->ring_sparse[b]))
        return 0;
    int rc;
    if (s->ring_pending[b] && ((rc = ring_wait(s, b, stalled, err)) || *stalled))
        return rc;
    const bool add = s->ring_layer[b] == next && !s->ring_failed[b];
    if (add && sparse_holds(s, b, &s->layers[next], next_use))
        return 0;
    s->st.ring_predicted++;
    return ring_read_sparse(s, b, (uint32_t)next, next_use, add, err);
}

int gm_stream_ring_layer(gm_stream *s, uint32_t layer, const int32_t *use_count, const int32_t *next_use,
                         gm_stream_expert *out, gm_err *err)
{
    if (layer >= s->n_layers || !gm_stream_ring_wanted(s, layer, s->o.ring_min_tokens ? s->o.ring_min_tokens : 2,
                                                       s->layers[layer].n_expert))
        return gm_err_set(err, GM_EINVAL, "layer %u does not take the prefill ring", layer);
    int rc = ring_get(s, err);
    if (rc)
        return rc;
    gm_warm_hint(s->warm, layer); /* map this layer's slots while it computes: its seed fills them */
    const layer_state *ls = &s->layers[layer];
    uint32_t n_used = 0;
    for (uint32_t x = 0; use_count && x < ls->n_expert; x++)
        n_used += use_count[x] > 0;
    /* the whole layer, or (too few of its experts routed to) only those */
    const bool whole = !use_count || ring_covers(s, layer, n_used) || !s->o.ring_sparse ||
                       ls->n_expert > RING_SPARSE_MAX;
    int a = s->ring_layer[0] == (int32_t)layer ? 0 : s->ring_layer[1] == (int32_t)layer ? 1 : -1;
    bool stalled = false;
    if (a >= 0 && s->ring_sparse[a] && (whole || !sparse_holds(s, (uint32_t)a, ls, use_count))) {
        /* some of this chunk's experts (read ahead on a prediction, or an earlier chunk's): the
         * others are read now; a whole layer is read again */
        if (s->ring_pending[a] && ((rc = ring_wait(s, (uint32_t)a, &stalled, err)) || stalled))
            goto stall;
        if (whole || s->ring_failed[a]) {
            s->ring_layer[a] = -1;
            a = -1;
        } else {
            s->st.ring_missed += 1;
            if ((rc = ring_read_sparse(s, (uint32_t)a, layer, use_count, true, err)))
                return rc;
        }
    }
    if (a < 0) {
        /* not prefetched: read it into a slot with nothing in flight (wait for one) */
        a = s->ring_pending[0] == 0 ? 0 : s->ring_pending[1] == 0 ? 1 : 0;
        if (s->ring_pending[a] && ((rc = ring_wait(s, (uint32_t)a, &stalled, err)) || stalled))
            goto stall;
        if ((rc = whole ? ring_read(s, (uint32_t)a, layer, err)
                        : ring_read_sparse(s, (uint32_t)a, layer, use_count, false, err)))
            return rc;
    }
    /* a sparse layer: the next one's predicted experts are read while this one computes */
    if (!whole && ((rc = ring_prefetch_sparse(s, (uint32_t)a, ls->next_layer, next_use, &stalled, err)) || stalled))
        goto stall;
    if ((rc = ring_wait(s, (uint32_t)a, &stalled, err)))
        return rc;
    if (stalled)
        goto stall;
    if (s->ring_failed[a]) {
        int64_t res = s->ring_fail_res[a];
        s->ring_layer[a] = -1;
        s->ring_sparse[a] = false;
        if (res < 0)
            return gm_err_set(err, GM_EIO, "%s: reading layer %u's expert stacks at offset %llu failed: %s",
                              gm_gguf_part_path(s->g, s->ring_fail_part[a]), layer,
                              (unsigned long long)s->ring_fail_off[a], strerror((int)-res));
        return gm_err_set(err, GM_EIO, "%s: reading layer %u's expert stacks at offset %llu came back short "
                          "(%lld bytes): the file is shorter than its header says",
                          gm_gguf_part_path(s->g, s->ring_fail_part[a]), layer,
                          (unsigned long long)s->ring_fail_off[a], (long long)res);
    }
    /* start the next covered layer into the other slot while this one computes (only after a
     * whole layer: which experts the next layer's chunk routes to is not known yet) */
    int32_t next = ls->next_layer;
    uint32_t b = (uint32_t)(1 - a);
    if (whole && next >= 0 && s->ring_layer[b] != next) {
        if (s->ring_pending[b] && ((rc = ring_wait(s, b, &stalled, err)) || stalled))
            goto stall;
        if ((rc = ring_read(s, b, (uint32_t)next, err)))
            return rc;
    }
    s->st.ring_layers++;
    s->st.ring_sparse += s->ring_sparse[a];
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
    const double t0 = gm_feed_now();
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
        if (s->warm && !gm_warm_finished(s->warm)) {
            /* only into slots whose pages are mapped already (once the thread has ended, mapped
             * all it may, been stopped or found no such call, seeding fills any empty slot): mapping fresh ones here is paid by
             * the prefill (about 2 s per GB on the test machine), a decode read pays it later only
             * for what is used */
            uint32_t first_empty = 0;
            while (first_empty < ls->n_slots && ls->slot_expert[first_empty] >= 0)
                first_empty++;
            if (first_empty >= gm_warm_slots(s->warm, layer)) {
                s->st.ring_seed_cold++;
                break;
            }
        }
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
    s->st.ring_seed_s += gm_feed_now() - t0;
}
