/* The public model API: options, loading, metadata, the plan and the streaming statistics
 * (gmlx.h "model loading", "statistics"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/err.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "base/sysinfo.h"
#include "plan/plan.h"
#include "stream/shed.h"
#include "stream/stream.h"

/* The context a load reserves when the caller names none. */
#define DEFAULT_CTX 4096u

void gm_model_opts_default(gm_model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->placement = GM_PLACE_AUTO;
    o->fast_disk = GM_FAST_DISK_AUTO;
    o->kv_type = GM_KV_F16;
    o->gpu = -1;
    gm_tuning_default(&o->tuning);
}

int gm_levers_check(const gm_levers *l, gm_err *err) { return gm_shed_opts_check(l, 0, err); }

static uint32_t kv_bits(gm_kv_type kv) { return kv == GM_KV_F32 ? 32 : kv == GM_KV_Q8_0 ? 8 : 16; }

void gm_model_lock(gm_model *m)
{
    pthread_mutex_lock(&m->lock);
    gm_engine_adopt(m->e);
}

void gm_model_unlock(gm_model *m) { pthread_mutex_unlock(&m->lock); }

void gm_model_free(gm_model *m)
{
    if (!m)
        return;
    if (m->e)
        gm_engine_adopt(m->e); /* the pool is stopped by the thread that frees it */
    gm_engine_free(m->e);
    gm_vocab_clear(&m->vocab);
    pthread_mutex_destroy(&m->lock);
    free(m->path);
    free(m);
}

int gm_model_load(gm_model **out, const char *path, const gm_model_opts *opts, gm_err *err)
{
    *out = NULL;
    gm_model_opts def;
    if (!opts) {
        gm_model_opts_default(&def);
        opts = &def;
    }
    if ((unsigned)opts->kv_type > GM_KV_Q8_0 || (unsigned)opts->placement > GM_PLACE_CPU ||
        (unsigned)opts->fast_disk > GM_FAST_DISK_OFF || opts->n_threads < 0 || opts->n_ctx > (1u << 24))
        return gm_err_set(err, GM_EINVAL, "invalid model options (placement %d, KV type %d, %d threads, "
                          "context %u)", (int)opts->placement, (int)opts->kv_type, opts->n_threads, opts->n_ctx);
    gm_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&m->lock, NULL);
    /* the vocabulary first: its header gives the training context the default is held to */
    gm_gguf *g = NULL;
    int rc = gm_gguf_open(&g, path, err);
    if (rc == 0)
        rc = gm_vocab_fill(&m->vocab, g, err);
    gm_gguf_close(g);
    if (rc)
        goto fail;
    uint32_t n_ctx = opts->n_ctx;
    if (!n_ctx) {
        n_ctx = DEFAULT_CTX;
        if (m->vocab.info.n_ctx_train && m->vocab.info.n_ctx_train < n_ctx)
            n_ctx = m->vocab.info.n_ctx_train;
    } else if (m->vocab.info.n_ctx_train && n_ctx > m->vocab.info.n_ctx_train) {
        gm_log(GM_LOG_WARN, "%s: a context of %u tokens is past the %u the model was trained for; "
               "what it generates past them may not make sense", path, n_ctx, m->vocab.info.n_ctx_train);
    }
    const gm_levers *lv = &opts->levers;
    const bool levers = lv->experts || lv->expert_mass > 0 || lv->probe || lv->miss_shed > 0 || lv->keepers ||
                        lv->layer_shed > 0;
    gm_engine_opts eo = {
        .n_threads = opts->n_threads,
        .max_chunk = opts->prefill_step,
        .placement = opts->placement,
        .kv_ctx = n_ctx,
        .kv_bits = kv_bits(opts->kv_type),
        .fast_disk = opts->fast_disk,
        .levers = levers ? lv : NULL,
        .tuning = &opts->tuning,
        .progress = opts->progress,
        .progress_user = opts->progress_user,
        .gpu = opts->gpu,
        .vram_gb = opts->vram_gb,
    };
    if ((rc = gm_engine_load(&m->e, path, &eo, err)))
        goto fail;
    const gm_model_desc *d = gm_engine_desc(m->e);
    snprintf(m->arch, sizeof m->arch, "%s", d->arch_name);
    snprintf(m->name, sizeof m->name, "%s", d->name);
    gm_printable(m->arch);
    gm_printable(m->name);
    snprintf(m->kernels, sizeof m->kernels, "%s", gm_engine_kernel_level(m->e));
    m->phase_stats = opts->tuning.phase_stats;
    gm_model_info *in = &m->info;
    in->path = m->path;
    in->arch = m->arch;
    in->name = m->name;
    in->n_layer = d->hp.n_layer - d->hp.n_nextn;
    in->n_embd = d->hp.n_embd;
    in->n_expert = d->hp.n_expert;
    in->n_expert_used = d->hp.n_expert_used;
    in->n_ctx_train = m->vocab.info.n_ctx_train;
    in->n_ctx = n_ctx;
    in->kv_type = opts->kv_type;
    in->file_bytes = gm_gguf_total_size(gm_engine_gguf(m->e));
    in->every_token_bytes = d->every_token_bytes;
    in->expert_bytes = d->expert_bytes;
    in->streams = gm_engine_stream(m->e) != NULL;
    in->page_cache = opts->placement == GM_PLACE_CPU;
    for (uint32_t l = 0; l < d->n_layers && l < in->n_layer; l++) {
        in->recurrent |= d->layers[l].is_recurrent;
    }
    in->sliding_window = d->hp.sliding_window > 0;
    in->max_chunk = gm_engine_max_chunk(m->e);
    in->n_threads = gm_engine_n_threads(m->e);
    in->kernels = m->kernels;
    *out = m;
    return 0;
fail:
    gm_model_free(m);
    return rc;
}

const gm_model_info *gm_model_get_info(const gm_model *m) { return &m->info; }
const gm_vocab *gm_model_vocab(const gm_model *m) { return &m->vocab; }

char *gm_model_plan_text(const gm_model *m)
{
    gm_sysinfo sys;
    gm_plan_opts po;
    gm_plan plan;
    gm_err ignore = {0};
    if (gm_sysinfo_probe(&sys, -1, -1, &ignore) != 0)
        return strdup("");
    gm_plan_opts_default(&po);
    po.kv_ctx = m->info.n_ctx;
    po.kv_bits = kv_bits(m->info.kv_type);
    gm_plan_compute(gm_engine_desc(m->e), &sys, &po, &plan);
    return gm_plan_text(&plan, "");
}

void gm_model_get_stats(gm_model *m, gm_stats *out)
{
    memset(out, 0, sizeof *out);
    gm_model_lock(m);
    gm_stream *st = gm_engine_stream(m->e);
    if (st) {
        gm_stream_stats s;
        gm_stream_get_stats(st, &s);
        out->streams = true;
        out->decode_tokens = s.tokens;
        out->lookups = s.lookups;
        out->hits = s.hits;
        out->prefill_lookups = s.prefill_lookups;
        out->prefill_hits = s.prefill_hits;
        out->bytes_read = s.bytes_read;
        out->reads = s.reads;
        out->stall_s = s.stall_s;
        out->prestaged = s.la_issued;
        out->prestage_adopted = s.la_adopted;
        out->ring_layers = s.ring_layers;
        out->ring_read_bytes = s.ring_read_bytes;
        out->ring_wait_s = s.ring_wait_s;
        out->seeded = s.ring_seeded;
        out->seeded_bytes = s.ring_seeded_bytes;
        out->split_calls = s.split_calls;
        out->split_tokens = s.split_tokens;
        out->arena_bytes = s.arena_bytes;
        out->arena_sized_bytes = s.arena_sized_bytes;
        out->covered_layers = s.covered_layers;
        out->wedged = s.wedged;
        out->pressure_shrinks = s.pressure_shrinks;
        out->pressure_regrows = s.pressure_regrows;
    }
    gm_model_unlock(m);
}

char *gm_model_stats_text(gm_model *m, unsigned what)
{
    gm_strbuf b = GM_STRBUF_INIT;
    gm_model_lock(m);
    gm_stream *st = gm_engine_stream(m->e);
    if (st && (what & GM_STATS_STREAM))
        gm_stream_print_stats(st, &b);
    if (what & GM_STATS_STREAM)
        gm_engine_print_tables(m->e, &b);
    if (what & GM_STATS_GPU)
        gm_engine_print_gpu(m->e, &b);
    if (gm_engine_levers(m->e) && (what & GM_STATS_LEVERS))
        gm_shed_print(gm_engine_levers(m->e), &b);
    if (st && m->phase_stats && (what & GM_STATS_PHASES))
        gm_stream_print_phases(st, &b);
    if (what & GM_STATS_PROFILE)
        gm_engine_print_profile(m->e, &b);
    gm_model_unlock(m);
    return gm_strbuf_take(&b);
}

int gm_model_footprint_of(const char *path, const gm_model_opts *opts, gm_model_footprint *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    gm_model_opts def;
    if (!opts) {
        gm_model_opts_default(&def);
        opts = &def;
    }
    gm_gguf *g = NULL;
    int rc = gm_gguf_open(&g, path, err);
    if (rc)
        return rc;
    gm_model_desc d;
    if ((rc = gm_model_describe(g, &d, err))) {
        gm_gguf_close(g);
        return rc;
    }
    gm_sysinfo sys;
    if ((rc = gm_sysinfo_probe(&sys, opts->tuning.ram_gb, opts->tuning.avail_gb, err))) {
        gm_model_desc_free(&d);
        gm_gguf_close(g);
        return rc;
    }
    /* the context and chunk a load would reserve (as gm_model_load and the engine choose them) */
    uint32_t n_ctx = opts->n_ctx;
    if (!n_ctx)
        n_ctx = d.hp.n_ctx_train && d.hp.n_ctx_train < DEFAULT_CTX ? d.hp.n_ctx_train : DEFAULT_CTX;
    gm_plan_opts po;
    gm_plan plan;
    gm_plan_opts_default(&po);
    gm_plan_opts_tune(&po, &opts->tuning);
    po.kv_ctx = n_ctx;
    po.kv_bits = kv_bits(opts->kv_type);
    if (opts->prefill_step)
        po.prefill_step = opts->prefill_step;
    else if (n_ctx < po.prefill_step)
        po.prefill_step = n_ctx;
    gm_plan_compute(&d, &sys, &po, &plan);
    const bool moe = d.n_moe_layers > 0;
    const bool over = plan.verdict != GM_VERDICT_FITS && plan.verdict != GM_VERDICT_EXPERTS_IN_MEMORY;
    out->runnable = d.runnable && plan.verdict != GM_VERDICT_CANNOT_STREAM;
    out->streams = moe && (opts->placement == GM_PLACE_EXPERTS ||
                           (opts->placement == GM_PLACE_AUTO && (over || !plan.experts_in_memory_now) &&
                            !(opts->tuning.overcommit &&
                              plan.every_token_bytes + plan.expert_bytes + plan.kv_room_bytes <= plan.ram_bytes)));
    out->page_cache = opts->placement == GM_PLACE_CPU;
    out->file_bytes = d.file_bytes;
    out->every_token_bytes = plan.every_token_bytes;
    out->expert_bytes = plan.expert_bytes;
    out->arena_bytes = plan.arena_bytes;
    out->ring_bytes = plan.prefill_ring_bytes;
    out->kv_room_bytes = plan.kv_room_bytes;
    out->n_ctx = n_ctx;
    out->ceiling_bytes = plan.ceiling_bytes;
    /* the ring is released after prefill and borrows the arena when it fits there */
    out->resident_bytes = out->streams ? plan.every_token_bytes + plan.arena_bytes + plan.kv_room_bytes +
                                             (plan.ring_fits_arena ? 0 : plan.prefill_ring_bytes)
                                       : d.file_bytes + plan.kv_room_bytes;
    if (!d.runnable)
        snprintf(out->verdict, sizeof out->verdict, "%s", d.not_runnable);
    else
        gm_plan_verdict_line(&plan, out->verdict, sizeof out->verdict);
    gm_model_desc_free(&d);
    gm_gguf_close(g);
    return 0;
}
