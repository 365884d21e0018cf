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
} layer_state;

typedef struct call_entry {
    int32_t expert;
    int32_t slot;
    bool hit;
    uint32_t pending;       /* slice reads not yet completed */
    bool failed;
    int64_t fail_result;
    uint32_t fail_kind;
    bool wedged;            /* abandoned: computed from the page cache */
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
    bool locked_tried;
    /* the current call */
    uint32_t cur_layer;
    uint32_t cur_k;
    call_entry cur[MAX_K];
    uint64_t seq;           /* call number, carried in each read's user tag */
    bool prefill;           /* the current calls belong to a prefill chunk */
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
    for (uint32_t l = 0; s->layers && l < s->n_layers; l++) {
        free(s->layers[l].slot_expert);
        free(s->layers[l].slot_bad);
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

/* A read's user tag: call number (24 bits), layer (12), slot (16), index in the call (8), kind (4). */
static uint64_t tag(uint64_t seq, uint32_t layer, uint32_t slot, uint32_t j, uint32_t kd)
{
    return ((seq & 0xffffff) << 40) | ((uint64_t)(layer & 0xfff) << 28) | ((uint64_t)(slot & 0xffff) << 12) |
           ((uint64_t)(j & 0xff) << 4) | (kd & 0xf);
}

/* A completion of an abandoned read of an earlier call: its slot may be used again. */
static void late_completion(gm_stream *s, uint64_t user)
{
    uint32_t layer = (uint32_t)(user >> 28) & 0xfff, slot = (uint32_t)(user >> 12) & 0xffff;
    if (layer >= s->n_layers || !s->layers[layer].covered || slot >= s->layers[layer].n_slots)
        return;
    layer_state *ls = &s->layers[layer];
    if (ls->slot_bad[slot] && --ls->slot_bad[slot] == 0) {
        ls->slot_expert[slot] = -1;
        gm_policy_unquarantine(s->policy, layer, slot);
    }
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
    s->align = 4096;
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
    uint32_t k = m->hp.n_expert_used ? m->hp.n_expert_used : 1;
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
            kg->region_bytes = align_up(kg->expert_bytes + s->align, s->align);
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
        s->arena = a;
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
        if (!ls->slot_expert || !ls->slot_bad) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            goto fail;
        }
        for (uint32_t i = 0; i < ls->n_slots; i++)
            ls->slot_expert[i] = -1;
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

bool gm_stream_covers(const gm_stream *s, uint32_t layer)
{
    return layer < s->n_layers && s->layers[layer].covered;
}

const char *gm_stream_backend_name(const gm_stream *s) { return gm_io_backend_name(s->io); }

uint32_t gm_stream_layer_slots(const gm_stream *s, uint32_t layer)
{
    return layer < s->n_layers && s->layers[layer].covered ? s->layers[layer].n_slots : 0;
}

void gm_stream_prefill(gm_stream *s) { s->prefill = true; }

void gm_stream_token(gm_stream *s)
{
    s->prefill = false;
    s->token++;
    s->st.tokens++;
    if (!s->locked_tried && s->o.lock_arena && s->arena) {
        /* the arena is wired at the first decode token, after the prefill has used its memory */
        s->locked_tried = true;
        if (mlock(s->arena, s->arena_map_bytes) != 0)
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
    layer_state *ls = &s->layers[layer];
    s->cur_layer = layer;
    s->cur_k = k;
    if (s->trace && !s->prefill) {
        fprintf(s->trace, "%" PRIu64 " %u", s->token ? s->token - 1 : 0, layer);
        for (uint32_t j = 0; j < k; j++)
            fprintf(s->trace, " %d", ids[j]);
        fputc('\n', s->trace);
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
    s->seq++;
    gm_io_req reqs[MAX_K * GM_EXP_KIND_COUNT];
    uint32_t n_req = 0;
    for (uint32_t j = 0; j < k; j++) {
        call_entry *c = &s->cur[j];
        memset(c, 0, sizeof *c);
        c->expert = ids[j];
        c->slot = slot[j];
        c->hit = hit[j] == GM_POLICY_HIT;
        if (c->hit) {
            if (s->prefill) {
                s->st.prefill_hits++;
            } else {
                s->st.hits++;
                s->dec_hits[layer]++;
            }
            continue;
        }
        if (!s->prefill)
            s->st.misses++;
        if (hit[j] == GM_POLICY_JOIN || c->slot < 0) {
            /* still loading from an abandoned read, or no slot this call: the page cache */
            c->wedged = true;
            c->slot = -1;
            continue;
        }
        ls->slot_expert[c->slot] = c->expert;
        for (int kd = 0; kd < GM_EXP_KIND_COUNT; kd++) {
            const kind_geom *kg = &ls->kind[kd];
            if (!kg->present)
                continue;
            uint64_t off = kg->stack_off + (uint64_t)c->expert * kg->expert_bytes;
            uint64_t start = s->direct ? off / s->align * s->align : off;
            uint64_t len = s->direct ? align_up(off + kg->expert_bytes, s->align) - start : kg->expert_bytes;
            gm_io_req *r = &reqs[n_req++];
            r->fd = s->fds[kg->part];
            r->offset = start;
            r->len = len;
            r->buf = ls->slots + (uint64_t)c->slot * ls->slot_bytes + kg->slot_off;
            r->user = tag(s->seq, layer, (uint32_t)c->slot, j, (uint32_t)kd);
            r->prio = GM_IO_DEMAND;
            c->pending++;
            s->st.reads++;
            s->st.bytes_read += len;
        }
    }
    if (n_req && (rc = gm_io_submit(s->io, reqs, n_req, err)))
        return rc;
    return 0;
}

bool gm_stream_get(gm_stream *s, uint32_t j, gm_stream_expert *out)
{
    const call_entry *c = &s->cur[j];
    if (!c->hit && c->pending)
        return false;
    fill_ptrs(s, c, out);
    return true;
}

/* Takes completions until expert j has all its slices (or the timeout passes). */
int gm_stream_wait(gm_stream *s, uint32_t j, gm_stream_expert *out, gm_err *err)
{
    call_entry *c = &s->cur[j];
    layer_state *ls = &s->layers[s->cur_layer];
    double t0 = now_s();
    while (!c->hit && c->pending && !c->wedged) {
        gm_io_done done[64];
        uint32_t n = 0;
        int timeout = s->o.read_timeout_ms ? (int)s->o.read_timeout_ms : -1;
        int rc = gm_io_wait(s->io, done, 64, 1, timeout, &n, err);
        if (rc)
            return rc;
        if (n == 0) {
            /* stuck past the timeout: abandon the read, quarantine the slot, use the page cache */
            for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
                gm_io_cancel(s->io, tag(s->seq, s->cur_layer, (uint32_t)c->slot, j, kd));
            c->wedged = true;
            ls->slot_bad[c->slot] = (uint8_t)c->pending;
            gm_policy_quarantine(s->policy, s->cur_layer, (uint32_t)c->slot);
            s->st.wedged++;
            fprintf(stderr, "[stream] read of layer %u expert %d stalled past %u ms; it is read "
                    "through the page cache and its slot is set aside\n",
                    s->cur_layer, c->expert, s->o.read_timeout_ms);
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint64_t u = done[i].user;
            uint32_t jj = (uint32_t)(u >> 4) & 0xff, kd = (uint32_t)(u & 0xf);
            if ((u >> 40) != (s->seq & 0xffffff) || jj >= s->cur_k || s->cur[jj].wedged) {
                late_completion(s, u);
                continue;
            }
            call_entry *d = &s->cur[jj];
            const kind_geom *kg = &ls->kind[kd];
            uint64_t off = kg->stack_off + (uint64_t)d->expert * kg->expert_bytes;
            uint64_t start = s->direct ? off / s->align * s->align : off;
            uint64_t need = off + kg->expert_bytes - start;
            if (d->pending)
                d->pending--;
            if (done[i].result < 0 || (uint64_t)done[i].result < need) {
                d->failed = true;
                d->fail_result = done[i].result;
                d->fail_kind = kd;
            }
        }
    }
    s->st.stall_s += now_s() - t0;
    if (c->failed) {
        const kind_geom *kg = &ls->kind[c->fail_kind];
        uint64_t off = kg->stack_off + (uint64_t)c->expert * kg->expert_bytes;
        gm_policy_loaded(s->policy, s->cur_layer, (uint32_t)c->slot, false);
        ls->slot_expert[c->slot] = -1;
        if (c->fail_result < 0)
            return gm_err_set(err, GM_EIO, "%s: reading layer %u expert %d (%llu bytes at offset %llu) failed: %s",
                              gm_gguf_part_path(s->g, kg->part), s->cur_layer, c->expert,
                              (unsigned long long)kg->expert_bytes, (unsigned long long)off,
                              strerror((int)-c->fail_result));
        return gm_err_set(err, GM_EIO, "%s: reading layer %u expert %d (%llu bytes at offset %llu) came "
                          "back short (%lld bytes): the file is shorter than its header says",
                          gm_gguf_part_path(s->g, kg->part), s->cur_layer, c->expert,
                          (unsigned long long)kg->expert_bytes, (unsigned long long)off,
                          (long long)c->fail_result);
    }
    if (!c->hit && !c->wedged)
        gm_policy_loaded(s->policy, s->cur_layer, (uint32_t)c->slot, true);
    c->hit = !c->wedged; /* resident from now on */
    fill_ptrs(s, c, out);
    return 0;
}

void gm_stream_end(gm_stream *s)
{
    /* entries left loading (an error cut the call short): their reads still land; keep the
     * slots aside until they do */
    layer_state *ls = &s->layers[s->cur_layer];
    for (uint32_t j = 0; j < s->cur_k; j++) {
        call_entry *c = &s->cur[j];
        if (!c->hit && !c->wedged && c->pending) {
            ls->slot_bad[c->slot] = (uint8_t)c->pending;
            gm_policy_quarantine(s->policy, s->cur_layer, (uint32_t)c->slot);
            c->wedged = true;
        }
    }
    s->cur_k = 0;
}

void gm_stream_get_stats(const gm_stream *s, gm_stream_stats *out) { *out = s->st; }

void gm_stream_print_stats(const gm_stream *s, FILE *f)
{
    const gm_stream_stats *st = &s->st;
    double rate = st->lookups ? 100.0 * (double)st->hits / (double)st->lookups : 0;
    fprintf(f, "[stream] decode feeder arena hit rate: %.1f%% (%llu of %llu expert lookups)\n", rate,
            (unsigned long long)st->hits, (unsigned long long)st->lookups);
    gm_policy_spread sp;
    gm_policy_spread_of(s->dec_hits, s->dec_lookups, s->n_layers, &sp);
    if (sp.n_layers)
        fprintf(f, "[stream] per-layer hit rate: min %.1f%% (layer %u) / median %.1f%% / max %.1f%% (layer %u) over %u MoE layers\n",
                sp.min_pct, sp.min_layer, sp.median_pct, sp.max_pct, sp.max_layer, sp.n_layers);
    if (st->prefill_lookups)
        fprintf(f, "[stream] prefill: %llu expert lookups through the arena, %.1f%% resident\n",
                (unsigned long long)st->prefill_lookups,
                100.0 * (double)st->prefill_hits / (double)st->prefill_lookups);
    fprintf(f, "[stream] arena %.3f GB on %u layers, %u-%u slots per layer; %llu decode tokens\n",
            (double)st->arena_bytes / 1e9, st->covered_layers, st->min_slots, st->max_slots,
            (unsigned long long)st->tokens);
    double per_tok = st->tokens ? 1.0 / (double)st->tokens : 0;
    fprintf(f, "[stream] read %.2f GB in %llu reads (%.3f GB per token), stalled %.1f ms per token, %s%s\n",
            (double)st->bytes_read / 1e9, (unsigned long long)st->reads,
            (double)st->bytes_read / 1e9 * per_tok, st->stall_s * 1e3 * per_tok,
            gm_io_backend_name(s->io), s->direct ? " O_DIRECT" : " buffered");
    if (st->wedged)
        fprintf(f, "[stream] %llu reads stalled past the timeout and were served from the page cache\n",
                (unsigned long long)st->wedged);
}
