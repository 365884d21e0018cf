/* The VRAM tier of routed experts (see gpu.h): its bookkeeping, and with the CUDA backend the
 * device memory and the token's experts on the device. */
#include "infer/gpu.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "infer/internal.h"

int gm_vram_tier_init(gm_vram_tier *t, uint32_t n_layer, uint32_t n_expert, uint32_t n_slots, gm_err *err)
{
    memset(t, 0, sizeof *t);
    const uint64_t n = (uint64_t)n_layer * n_expert;
    if (!n || !n_slots || n > (1u << 30))
        return gm_err_set(err, GM_EINVAL, "VRAM tier of %u slots for %u layers of %u experts", n_slots, n_layer,
                          n_expert);
    t->slot_of = malloc(n * sizeof *t->slot_of);
    t->count = calloc(n, sizeof *t->count);
    t->owner = malloc((uint64_t)n_slots * sizeof *t->owner);
    if (!t->slot_of || !t->count || !t->owner) {
        gm_vram_tier_free(t);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < n; i++)
        t->slot_of[i] = -1;
    for (uint32_t i = 0; i < n_slots; i++)
        t->owner[i] = -1;
    t->n_layer = n_layer;
    t->n_expert = n_expert;
    t->n_slots = n_slots;
    t->halve_every = 4096ull * n_layer;
    return 0;
}

void gm_vram_tier_free(gm_vram_tier *t)
{
    free(t->slot_of);
    free(t->count);
    free(t->owner);
    memset(t, 0, sizeof *t);
}

static bool in_range(const gm_vram_tier *t, uint32_t l, int32_t x)
{
    return l < t->n_layer && x >= 0 && (uint32_t)x < t->n_expert;
}

int32_t gm_vram_tier_slot(const gm_vram_tier *t, uint32_t l, int32_t x)
{
    return in_range(t, l, x) ? t->slot_of[(uint64_t)l * t->n_expert + (uint32_t)x] : -1;
}

void gm_vram_tier_use(gm_vram_tier *t, uint32_t l, int32_t x)
{
    if (!in_range(t, l, x))
        return;
    uint32_t *c = &t->count[(uint64_t)l * t->n_expert + (uint32_t)x];
    *c += *c < UINT32_MAX;
    if (++t->uses % t->halve_every == 0)
        for (uint64_t i = 0; i < (uint64_t)t->n_layer * t->n_expert; i++)
            t->count[i] /= 2;
}

int32_t gm_vram_tier_claim(gm_vram_tier *t, uint32_t l, int32_t x)
{
    if (!in_range(t, l, x) || gm_vram_tier_slot(t, l, x) >= 0)
        return -1;
    const uint64_t key = (uint64_t)l * t->n_expert + (uint32_t)x;
    int32_t slot = -1;
    if (t->n_used < t->n_slots) {
        for (uint32_t i = 0; i < t->n_slots && slot < 0; i++)
            if (t->owner[i] < 0)
                slot = (int32_t)i;
    } else {
        uint32_t least = UINT32_MAX;
        for (uint32_t i = 0; i < t->n_slots; i++)
            if (t->count[t->owner[i]] < least) {
                least = t->count[t->owner[i]];
                slot = (int32_t)i;
            }
        if (slot < 0 || t->count[key] <= least + 1)
            return -1;
        t->slot_of[t->owner[slot]] = -1;
        t->n_used--;
    }
    if (slot < 0)
        return -1;
    t->owner[slot] = (int64_t)key;
    t->slot_of[key] = slot;
    t->n_used++;
    return slot;
}

int gm_vram_tier_grow(gm_vram_tier *t, uint32_t extra, gm_err *err)
{
    const uint64_t n = (uint64_t)t->n_slots + extra;
    int64_t *o = n > INT32_MAX ? NULL : realloc(t->owner, n * sizeof *o);
    if (!o)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint64_t i = t->n_slots; i < n; i++)
        o[i] = -1;
    t->owner = o;
    t->n_slots = (uint32_t)n;
    return 0;
}

void gm_vram_tier_drop(gm_vram_tier *t, int32_t slot)
{
    if (slot < 0 || (uint32_t)slot >= t->n_slots || t->owner[slot] < 0)
        return;
    t->slot_of[t->owner[slot]] = -1;
    t->owner[slot] = -1;
    t->n_used--;
}

#ifdef GMLX_HAVE_CUDA

#include <stdio.h>

#include "backend/cuda/cuda.h"

#define SLOT_ALIGN GM_VRAM_SLOT_ALIGN

int gm_gpu_probe(gm_gpu_device *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    gm_cuda_info c;
    int rc = gm_cuda_probe(&c, err);
    if (rc)
        return rc;
    snprintf(out->name, sizeof out->name, "%s", c.name);
    out->cc_major = c.cc_major;
    out->cc_minor = c.cc_minor;
    out->n_sms = c.n_sms;
    out->n_devices = c.n_devices;
    out->driver_version = c.driver_version;
    out->runtime_version = c.runtime_version;
    out->total_bytes = c.total_bytes;
    out->free_bytes = c.free_bytes;
    return 0;
}

struct gm_gpu {
    gm_engine *e;
    gm_cuda_ffn *ffn;
    gm_cuda_slab *slab;
    gm_vram_tier tier;
    uint64_t slot_bytes;
    bool *ok;                /* [n_layer]: the layer's experts run on the device */
    gm_cuda_ffn_shape *shape; /* [n_layer] */
    uint64_t (*off)[3];      /* [n_layer]: gate, up, down offsets within a slot */
    uint32_t n_ok, total;    /* layers the device runs, and their experts */
    uint32_t n_stage;        /* staging slots after the tier's in the slab (gm_gpu_stage_expert) */
    uint8_t *stage;
    const void *pinned;      /* the host's experts page-locked for the staging copies, or NULL */
    uint32_t max_pairs, n_pairs;
    gm_cuda_expert *pair_ex; /* [max_pairs]: the start's experts (decode) or pairs (prefill) */
    uint32_t *pair_tok;      /* [max_pairs]: the pairs' tokens */
    char device[256];
    /* decode */
    uint32_t last_layer, uploads_left, uploads_per_token, started;
    uint64_t lookups, hits, uploads, upload_bytes, evictions, prefill_pairs;
    uint64_t seeded, seeded_bytes;  /* staged experts a prompt's chunk moved into the tier */
    double upload_s, wait_s;
};

static uint64_t up256(uint64_t b) { return (b + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN; }

/* The layer's expert shape on the device; false (why) when it cannot run there. */
static bool layer_shape(const gm_engine *e, const gm_layer_w *w, gm_cuda_ffn_shape *sh, const char **why)
{
    if (w->gate_b || w->up_b || w->down_b) {
        *why = "experts with biases";
        return false;
    }
    const float limit = w->exp_limit;
    *sh = (gm_cuda_ffn_shape){
        .gate_type = w->gate.type, .up_type = w->up.type, .down_type = w->down.type,
        .dim = e->moe_dim, .ff = w->gate.n_rows,
        .glu = {.act = e->situ_beta > 0.0f     ? GM_CUDA_SITU
                       : limit > 1e-6f         ? GM_CUDA_SWIGLU_LIMIT
                       : e->ops.swiglu_clamped ? GM_CUDA_SWIGLU_OAI
                                               : GM_CUDA_SWIGLU,
                .limit = limit, .beta = e->situ_beta, .lbeta = e->situ_linear_beta},
    };
    if (w->up.n_rows != sh->ff || w->down.n_cols != sh->ff || w->gate.n_cols != sh->dim || w->down.n_rows != sh->dim) {
        *why = "experts whose matrices do not agree";
        return false;
    }
    return gm_cuda_ffn_supports(sh, why);
}

void gm_gpu_free(gm_gpu *g)
{
    if (!g)
        return;
    gm_cuda_ffn_free(g->ffn);
    gm_cuda_slab_free(g->slab);
    gm_cuda_host_unpin(g->pinned);
    gm_vram_tier_free(&g->tier);
    free(g->ok);
    free(g->shape);
    free(g->off);
    free(g->pair_ex);
    free(g->pair_tok);
    free(g);
}

static int upload(gm_gpu *g, uint32_t l, int32_t slot, const gm_stream_expert *src, gm_err *err)
{
    const gm_layer_w *w = &g->e->layers[l];
    uint8_t *at = gm_cuda_slab_base(g->slab) + (uint64_t)slot * g->slot_bytes;
    const gm_expert_stack *st[3] = {&w->gate, &w->up, &w->down};
    const int kind[3] = {GM_EXP_GATE, GM_EXP_UP, GM_EXP_DOWN};
    for (int k = 0; k < 3; k++) {
        int rc = gm_cuda_upload(at + g->off[l][k], src->data[kind[k]], st[k]->expert_bytes, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* Fills the tier's free slots, uploaded from the file's pages (or the pinned stacks): every
 * expert when they all fit, else as many as fit, the same number of each layer (expert ids in
 * order: which experts a model uses most is learnt as decode runs, and those then replace the
 * ones never used). */
static int place(gm_gpu *g, void (*progress)(void *user, const char *what, uint64_t done, uint64_t total), void *user,
                 gm_err *err)
{
    gm_engine *e = g->e;
    const uint32_t n_slots = g->tier.n_slots, goal = n_slots < g->total ? n_slots : g->total;
    for (uint32_t x = 0; x < e->n_expert && g->tier.n_used < n_slots; x++)
        for (uint32_t l = 0; l < e->n_layer && g->tier.n_used < n_slots; l++) {
            if (!g->ok[l] || gm_gpu_has(g, l, (int32_t)x))
                continue;
            const gm_layer_w *w = &e->layers[l];
            const int32_t slot = gm_vram_tier_claim(&g->tier, l, (int32_t)x);
            const gm_stream_expert src = gm_layer_expert(w, (int32_t)x);
            if (slot < 0)
                return gm_err_set(err, GM_EINVAL, "--gpu: no slot for expert %u of layer %u", x, l);
            int rc = upload(g, l, slot, &src, err);
            if (rc) {
                gm_vram_tier_drop(&g->tier, slot);
                return rc;
            }
            const uint32_t placed = g->tier.n_used;
            if (progress && (placed % 64 == 0 || placed == goal))
                progress(user, "uploading routed experts to the GPU", placed, goal);
        }
    return 0;
}

/* Page-locks the host's experts (the span of every device layer's stacks, whole pages) so that
 * the staging copies run at the bus's speed; a refusal is a note, the copies then go through the
 * driver's bounce buffer. */
static void pin_experts(gm_gpu *g)
{
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (uint32_t l = 0; l < g->e->n_layer; l++) {
        const gm_layer_w *w = &g->e->layers[l];
        const gm_expert_stack *st[3] = {&w->gate, &w->up, &w->down};
        for (int k = 0; g->ok[l] && k < 3; k++) {
            const uintptr_t a = (uintptr_t)st[k]->data, b = a + st[k]->expert_bytes * g->e->n_expert;
            lo = a < lo ? a : lo;
            hi = b > hi ? b : hi;
        }
    }
    const uintptr_t page = 4096;
    lo &= ~(page - 1);
    hi = (hi + page - 1) & ~(page - 1);
    gm_err perr = {0};
    const double t0 = gm_stream_now_s();
    if (lo < hi && gm_cuda_host_pin((const void *)lo, hi - lo, &perr) == 0) {
        g->pinned = (const void *)lo;
        gm_log(GM_LOG_NOTE, "[gpu] %.2f GB of experts in host memory page-locked for the staging copies (%.1f s)",
               (double)(hi - lo) / 1e9, gm_stream_now_s() - t0);
    } else if (lo < hi) {
        gm_log(GM_LOG_NOTE, "[gpu] the staging copies go through the driver's buffer: %s", perr.msg);
    }
}

int gm_gpu_create(gm_gpu **out, gm_engine *e, const gm_gpu_device *dev, const gm_gpu_opts *o, gm_err *err)
{
    *out = NULL;
    const double vram_gb = o->vram_gb;
    const uint64_t held_bytes = o->held_bytes, later_bytes = o->later_bytes, stage_slots = o->stage_slots;
    int rc;
    const gm_gpu_device info = *dev;
    gm_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    g->e = e;
    snprintf(g->device, sizeof g->device, "%s", info.name);
    g->ok = calloc(e->n_layer, sizeof *g->ok);
    g->shape = calloc(e->n_layer, sizeof *g->shape);
    g->off = calloc(e->n_layer, sizeof *g->off);
    if (!g->ok || !g->shape || !g->off) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    const char *why = NULL;
    uint64_t max_ff = 0;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        const gm_layer_w *w = &e->layers[l];
        if (!w->is_moe || !layer_shape(e, w, &g->shape[l], &why))
            continue;
        g->ok[l] = true;
        g->n_ok++;
        g->off[l][0] = 0;
        g->off[l][1] = up256(w->gate.expert_bytes);
        g->off[l][2] = g->off[l][1] + up256(w->up.expert_bytes);
        const uint64_t b = g->off[l][2] + up256(w->down.expert_bytes);
        g->slot_bytes = b > g->slot_bytes ? b : g->slot_bytes;
        max_ff = g->shape[l].ff > max_ff ? g->shape[l].ff : max_ff;
    }
    if (!g->n_ok) {
        rc = gm_err_set(err, GM_EUNSUPPORTED, "--gpu: no layer of this model can compute its routed experts on "
                        "the device (%s)", why ? why : "no routed experts");
        goto fail;
    }
    g->total = g->n_ok * e->n_expert;
    const uint64_t chunk_pairs = (uint64_t)e->max_chunk * e->k_max;
    g->max_pairs = chunk_pairs < GM_GPU_PAIRS ? (uint32_t)chunk_pairs : GM_GPU_PAIRS;
    g->max_pairs = g->max_pairs > e->k_max ? g->max_pairs : e->k_max;
    g->pair_ex = calloc(g->max_pairs, sizeof *g->pair_ex);
    g->pair_tok = calloc(g->max_pairs, sizeof *g->pair_tok);
    if (!g->pair_ex || !g->pair_tok) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = gm_cuda_ffn_create(&g->ffn, e->moe_dim, max_ff, g->max_pairs, e->max_chunk ? e->max_chunk : 1, err)))
        goto fail;
    const double reserve = (double)GM_GPU_RESERVE_BYTES;
    /* the probe (before the attention's tier) saw the device's free memory: less what that holds */
    const double room = vram_gb > 0 ? vram_gb * 1e9 + 0.5 - (double)held_bytes
                                    : (double)info.free_bytes - reserve - (double)held_bytes;
    const double budget = room > (double)later_bytes ? room - (double)later_bytes : 0.0;
    uint64_t want = (uint64_t)(budget / (double)g->slot_bytes);
    want = want > g->total ? g->total : want;
    if (want == 0) {
        rc = gm_err_set(err, GM_ENOMEM, "--gpu: %.2f GB of device memory hold no expert (%.2f MB each)",
                        budget / 1e9, (double)g->slot_bytes / 1e6);
        goto fail;
    }
    /* staging slots out of the same memory when not every expert fits, and some are left for the tier */
    uint64_t stage = want < g->total && want > stage_slots ? stage_slots : 0;
    stage = stage > e->n_expert ? e->n_expert : stage;
    gm_err serr = {0};
    rc = gm_cuda_slab_create(&g->slab, want * g->slot_bytes, (stage + 1) * g->slot_bytes, &serr);
    if (rc == GM_ENOMEM && stage) { /* not even that: the tier alone */
        stage = 0;
        rc = gm_cuda_slab_create(&g->slab, want * g->slot_bytes, g->slot_bytes, &serr);
    }
    if (rc) {
        gm_err_set(err, rc, "%s", serr.msg);
        goto fail;
    }
    want -= stage;
    const uint32_t n_slots = (uint32_t)(gm_cuda_slab_bytes(g->slab) / g->slot_bytes - stage);
    g->n_stage = (uint32_t)stage;
    g->stage = gm_cuda_slab_base(g->slab) + (uint64_t)n_slots * g->slot_bytes;
    if (n_slots < want)
        gm_log(GM_LOG_NOTE, "[gpu] the device gave %.2f of the %.2f GB asked: the VRAM tier holds %u experts, "
               "not %llu", (double)gm_cuda_slab_bytes(g->slab) / 1e9, (double)(want * g->slot_bytes) / 1e9, n_slots,
               (unsigned long long)want);
    if ((rc = gm_vram_tier_init(&g->tier, e->n_layer, e->n_expert, n_slots, err)))
        goto fail;
    const bool all = n_slots >= g->total;
    if ((rc = place(g, o->progress, o->user, err)))
        goto fail;
    const uint32_t placed = g->tier.n_used;
    gm_log(GM_LOG_NOTE, "[gpu] %s: %u of the %u routed experts of %u layers in VRAM (%.2f GB%s)%s", g->device,
           placed, g->total, g->n_ok, (double)placed * (double)g->slot_bytes / 1e9, vram_gb > 0 ? ", --vram-gb" : "",
           all ? "" : "; decode replaces the unused with the experts it uses most");
    if (g->n_stage)
        gm_log(GM_LOG_NOTE, "[gpu] %u staging slots (%.2f GB) for the experts a prompt's chunk needs from host memory",
               g->n_stage, (double)g->n_stage * (double)g->slot_bytes / 1e9);
    if (g->n_stage && o->pin_host)
        pin_experts(g);
    g->uploads_per_token = o->uploads_per_token;
    if (g->n_ok < e->desc.n_moe_layers)
        gm_log(GM_LOG_NOTE, "[gpu] %u MoE layers compute their experts on the CPU (%s)",
               e->desc.n_moe_layers - g->n_ok, why ? why : "");
    g->last_layer = UINT32_MAX;
    *out = g;
    return 0;
fail:
    gm_gpu_free(g);
    return rc;
}

bool gm_gpu_layer(const gm_gpu *g, uint32_t l) { return l < g->e->n_layer && g->ok[l]; }

bool gm_gpu_has(const gm_gpu *g, uint32_t l, int32_t x) { return gm_vram_tier_slot(&g->tier, l, x) >= 0; }

void gm_gpu_note(gm_gpu *g, uint32_t l, int32_t x)
{
    if (!gm_gpu_layer(g, l))
        return;
    /* a new token: its upload budget */
    if (g->last_layer == UINT32_MAX || l < g->last_layer)
        g->uploads_left = g->uploads_per_token;
    g->last_layer = l;
    g->lookups++;
    g->hits += gm_gpu_has(g, l, x);
    gm_vram_tier_use(&g->tier, l, x);
}

void gm_gpu_count_pairs(gm_gpu *g, uint64_t n) { g->prefill_pairs += n; }

/* Expert x of layer l's matrices in VRAM (it is there). */
static gm_cuda_expert dev_expert(gm_gpu *g, uint32_t l, int32_t x)
{
    uint8_t *at = gm_cuda_slab_base(g->slab) + (uint64_t)gm_vram_tier_slot(&g->tier, l, x) * g->slot_bytes;
    return (gm_cuda_expert){at + g->off[l][0], at + g->off[l][1], at + g->off[l][2]};
}

bool gm_gpu_all_resident(const gm_gpu *g) { return g && g->tier.n_used >= g->total; }

int gm_gpu_expert_table(gm_gpu *g, uint32_t l, gm_cuda_expert *table, gm_cuda_ffn_shape *shape, gm_err *err)
{
    if (!gm_gpu_layer(g, l))
        return gm_err_set(err, GM_EINVAL, "--gpu: layer %u's experts do not run on the device", l);
    for (uint32_t x = 0; table && x < g->e->n_expert; x++) {
        if (!gm_gpu_has(g, l, (int32_t)x))
            return gm_err_set(err, GM_EINVAL, "--gpu: expert %u of layer %u is not in VRAM", x, l);
        table[x] = dev_expert(g, l, (int32_t)x);
    }
    *shape = g->shape[l];
    return 0;
}

int gm_gpu_unstage(gm_gpu *g, gm_err *err)
{
    if (!g || !g->n_stage)
        return 0;
    const uint32_t extra = g->n_stage;
    gm_cuda_host_unpin(g->pinned);
    g->pinned = NULL;
    g->n_stage = 0;
    g->stage = NULL;
    int rc = gm_vram_tier_grow(&g->tier, extra, err);
    if (rc || (rc = place(g, NULL, NULL, err)))
        return rc;
    gm_log(GM_LOG_NOTE, "[gpu] the %u staging slots hold experts instead: %u of the %u routed experts in VRAM", extra,
           g->tier.n_used, g->total);
    return 0;
}

bool gm_gpu_find(gm_gpu *g, uint32_t l, int32_t x, gm_cuda_expert *out)
{
    if (!gm_gpu_layer(g, l) || !gm_gpu_has(g, l, x))
        return false;
    *out = dev_expert(g, l, x);
    return true;
}

uint32_t gm_gpu_stage_slots(const gm_gpu *g) { return g ? g->n_stage : 0; }
bool gm_gpu_pinned(const gm_gpu *g) { return g && g->pinned; }

void gm_gpu_count_prompt(gm_gpu *g, uint32_t l, const uint32_t *count)
{
    for (uint32_t x = 0; gm_gpu_layer(g, l) && x < g->e->n_expert; x++)
        for (uint32_t c = 0; c < count[x]; c++)
            gm_vram_tier_use(&g->tier, l, (int32_t)x);
}

bool gm_gpu_claim(gm_gpu *g, uint32_t l, int32_t x, gm_cuda_expert *to)
{
    if (!gm_gpu_layer(g, l) || g->tier.n_slots >= g->total)
        return false;
    const bool full = g->tier.n_used == g->tier.n_slots;
    if (gm_vram_tier_claim(&g->tier, l, x) < 0)
        return false;
    g->evictions += full;
    *to = dev_expert(g, l, x);
    return true;
}

void gm_gpu_count_seeded(gm_gpu *g, uint32_t l)
{
    const gm_layer_w *w = &g->e->layers[l];
    g->seeded++;
    g->seeded_bytes += w->gate.expert_bytes + w->up.expert_bytes + w->down.expert_bytes;
}

void gm_gpu_unclaim(gm_gpu *g, uint32_t l, int32_t x) { gm_vram_tier_drop(&g->tier, gm_vram_tier_slot(&g->tier, l, x)); }

gm_cuda_expert gm_gpu_stage_expert(gm_gpu *g, uint32_t l, uint32_t i, uint64_t pitch[3])
{
    /* the slots' gates one after the other, then their ups, then their downs */
    pitch[0] = g->off[l][1];
    pitch[1] = g->off[l][2] - g->off[l][1];
    pitch[2] = up256(g->e->layers[l].down.expert_bytes);
    const uint64_t S = g->n_stage;
    return (gm_cuda_expert){g->stage + i * pitch[0], g->stage + S * pitch[0] + i * pitch[1],
                            g->stage + S * (pitch[0] + pitch[1]) + i * pitch[2]};
}

int gm_gpu_start(gm_gpu *g, uint32_t l, const int32_t *ids, uint32_t n, const float *x, gm_err *err)
{
    if (!gm_gpu_layer(g, l) || n > g->max_pairs)
        return gm_err_set(err, GM_EINVAL, "--gpu: layer %u's experts do not run on the device", l);
    for (uint32_t j = 0; j < n; j++) {
        if (!gm_gpu_has(g, l, ids[j]))
            return gm_err_set(err, GM_EINVAL, "--gpu: expert %d of layer %u is not in VRAM", ids[j], l);
        g->pair_ex[j] = dev_expert(g, l, ids[j]);
    }
    int rc = gm_cuda_ffn_start(g->ffn, &g->shape[l], g->pair_ex, NULL, n, x, 1, err);
    g->started = rc == 0 ? n : 0;
    return rc;
}

void gm_gpu_pairs_reset(gm_gpu *g) { g->n_pairs = 0; }

bool gm_gpu_pairs_add(gm_gpu *g, uint32_t l, int32_t x, const int32_t *toks, uint32_t c)
{
    if (!gm_gpu_layer(g, l) || !gm_gpu_has(g, l, x) || c > g->max_pairs - g->n_pairs)
        return false;
    const gm_cuda_expert ex = dev_expert(g, l, x);
    for (uint32_t i = 0; i < c; i++) {
        g->pair_ex[g->n_pairs] = ex;
        g->pair_tok[g->n_pairs++] = (uint32_t)toks[i];
    }
    return true;
}

int gm_gpu_pairs_start(gm_gpu *g, uint32_t l, const float *x, uint32_t n_tok, gm_err *err)
{
    if (!gm_gpu_layer(g, l) || !g->n_pairs)
        return gm_err_set(err, GM_EINVAL, "--gpu: no pairs of layer %u to compute", l);
    int rc = gm_cuda_ffn_start(g->ffn, &g->shape[l], g->pair_ex, g->pair_tok, g->n_pairs, x, n_tok, err);
    g->started = rc == 0 ? g->n_pairs : 0;
    g->prefill_pairs += rc == 0 ? g->n_pairs : 0;
    return rc;
}

const float *gm_gpu_rows(const gm_gpu *g) { return gm_cuda_ffn_rows(g->ffn); }

int gm_gpu_finish(gm_gpu *g, float *rows, gm_err *err)
{
    const double t0 = gm_stream_now_s();
    int rc = gm_cuda_ffn_finish(g->ffn, rows, err);
    g->wait_s += gm_stream_now_s() - t0;
    g->started = 0;
    return rc;
}

int gm_gpu_offer(gm_gpu *g, uint32_t l, int32_t x, const gm_stream_expert *src, gm_err *err)
{
    if (!gm_gpu_layer(g, l) || g->uploads_left == 0 || g->tier.n_slots >= g->total)
        return 0;
    const bool full = g->tier.n_used == g->tier.n_slots;
    const int32_t slot = gm_vram_tier_claim(&g->tier, l, x);
    if (slot < 0)
        return 0;
    const double t0 = gm_stream_now_s();
    int rc = upload(g, l, slot, src, err);
    g->upload_s += gm_stream_now_s() - t0;
    if (rc) {
        gm_vram_tier_drop(&g->tier, slot);
        return rc;
    }
    const gm_layer_w *w = &g->e->layers[l];
    g->uploads++;
    g->evictions += full;
    g->upload_bytes += w->gate.expert_bytes + w->up.expert_bytes + w->down.expert_bytes;
    g->uploads_left--;
    return 0;
}

void gm_gpu_print_stats(const gm_gpu *g, gm_strbuf *out)
{
    if (!g->lookups && !g->prefill_pairs)
        return;
    gm_strbuf_putf(out, "[gpu] VRAM tier on %s: %u of %u slots hold experts (%.2f GB); decode lookups %llu, "
                   "computed on the device %llu (%.1f%%); prefill (expert, token) pairs on the device %llu; uploads "
                   "%llu (%.2f GB in %.2f s, %llu replacing a resident); moved in from a prompt's staging %llu "
                   "(%.2f GB); waits for the device %.3f s\n",
                   g->device, g->tier.n_used, g->tier.n_slots, (double)g->tier.n_slots * (double)g->slot_bytes / 1e9,
                   (unsigned long long)g->lookups, (unsigned long long)g->hits,
                   g->lookups ? 100.0 * (double)g->hits / (double)g->lookups : 0.0, (unsigned long long)g->prefill_pairs,
                   (unsigned long long)g->uploads,
                   (double)g->upload_bytes / 1e9, g->upload_s, (unsigned long long)g->evictions,
                   (unsigned long long)g->seeded, (double)g->seeded_bytes / 1e9, g->wait_s);
}

#else /* no CUDA backend in this build */

struct gm_gpu {
    int unused;
};

#define NO_BACKEND "this gmlx was built without the CUDA backend (docs/cuda.md: build where the CUDA toolkit " \
                   "is installed, or with -DGMLX_CUDA=ON)"

int gm_gpu_probe(gm_gpu_device *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    return gm_err_set(err, GM_EUNSUPPORTED, NO_BACKEND);
}

int gm_gpu_create(gm_gpu **out, struct gm_engine *e, const gm_gpu_device *dev, const gm_gpu_opts *o, gm_err *err)
{
    (void)e, (void)dev, (void)o;
    *out = NULL;
    return gm_err_set(err, GM_EUNSUPPORTED, "--gpu: " NO_BACKEND);
}
void gm_gpu_free(gm_gpu *g) { (void)g; }
bool gm_gpu_layer(const gm_gpu *g, uint32_t l) { return (void)g, (void)l, false; }
bool gm_gpu_has(const gm_gpu *g, uint32_t l, int32_t x) { return (void)g, (void)l, (void)x, false; }
void gm_gpu_note(gm_gpu *g, uint32_t l, int32_t x) { (void)g, (void)l, (void)x; }
void gm_gpu_count_pairs(gm_gpu *g, uint64_t n) { (void)g, (void)n; }
bool gm_gpu_all_resident(const gm_gpu *g) { return (void)g, false; }
int gm_gpu_expert_table(gm_gpu *g, uint32_t l, struct gm_cuda_expert *table, struct gm_cuda_ffn_shape *shape,
                        gm_err *err)
{
    (void)g, (void)l, (void)table, (void)shape;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}

int gm_gpu_start(gm_gpu *g, uint32_t l, const int32_t *ids, uint32_t n, const float *x, gm_err *err)
{
    (void)g, (void)l, (void)ids, (void)n, (void)x;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
int gm_gpu_finish(gm_gpu *g, float *rows, gm_err *err)
{
    (void)g, (void)rows;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
void gm_gpu_pairs_reset(gm_gpu *g) { (void)g; }
bool gm_gpu_pairs_add(gm_gpu *g, uint32_t l, int32_t x, const int32_t *toks, uint32_t c)
{
    return (void)g, (void)l, (void)x, (void)toks, (void)c, false;
}
int gm_gpu_pairs_start(gm_gpu *g, uint32_t l, const float *x, uint32_t n_tok, gm_err *err)
{
    (void)g, (void)l, (void)x, (void)n_tok;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
const float *gm_gpu_rows(const gm_gpu *g) { return (void)g, NULL; }
int gm_gpu_offer(gm_gpu *g, uint32_t l, int32_t x, const gm_stream_expert *src, gm_err *err)
{
    (void)g, (void)l, (void)x, (void)src, (void)err;
    return 0;
}
void gm_gpu_print_stats(const gm_gpu *g, gm_strbuf *out) { (void)g, (void)out; }

#endif
