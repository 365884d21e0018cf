/* Engine load: the file, the plan, the placement of the weights, the streaming and the levers
 * (see engine.h; the sessions and the layer loop are in fwd.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sysinfo.h"
#include "infer/gpu.h"
#include "stream/table.h"
#include "infer/gpu_attn.h"
#include "infer/gpu_decode.h"
#include "plan/plan.h"
#include "infer/recipe.h"
#include "kernels/dequant.h"
#include "kernels/quant.h"

void gm_engine_free(gm_engine *e)
{
    if (!e)
        return;
    gm_gpu_dec_free(e->gpu_dec);
    gm_gpu_free(e->gpu);
    gm_gpu_attn_free(e->gpu_attn);
    gm_table_close(e->ple_rows);
    gm_shed_free(e->shed);
    gm_stream_free(e->stream);
    gm_pin_free(e->pin);
    for (uint32_t l = 0; e->la_ratio && l < e->n_layer; l++)
        free(e->la_ratio[l]);
    free(e->la_ratio);
    gm_pool_destroy(e->pool);
    for (uint32_t i = 0; i < e->n_f32_copies; i++)
        free(e->f32_copies[i]);
    free(e->f32_copies);
    free(e->bound);
    free(e->prof_attn_ns);
    free(e->prof_ffn_ns);
    free(e->rope_inv);
    free(e->comp_rope_inv);
    free(e->layers);
    gm_model_desc_free(&e->desc);
    gm_gguf_close(e->g);
    free(e);
}

void gm_tuning_default(gm_tuning *t)
{
    memset(t, 0, sizeof *t);
    t->ram_gb = t->avail_gb = t->arena_gb = -1;
    t->pin_weights = -1;
    t->read_timeout_s = -1;
    t->lookahead = t->lookahead_probe = t->lookahead_cancel = -1;
    t->lookahead_min_p = t->lookahead_hard_p = -1;
    t->pressure = t->arena_thp = t->arena_warm = t->prefill_ring = t->ring_cover_pct = t->ring_seed =
        t->ring_sparse = -1;
    t->arena_token_split = -1;
    t->gpu_attn = t->gpu_decode = t->gpu_graph = t->gpu_prompt = t->gpu_stage = t->gpu_pin_host = t->gpu_bounce =
        t->gpu_uploads = t->gpu_split = -1;
}

/* The tuning's feeder settings over so (the fast-disk recipe already in it: a set variable
 * still wins over the recipe, as the variables always have). */
static void apply_tuning(gm_stream_opts *so, const gm_tuning *t)
{
    if (t->read_timeout_s >= 0) {
        so->read_timeout_ms = (uint32_t)(t->read_timeout_s * 1000);
        if (t->read_timeout_s > 0 && so->read_timeout_ms == 0)
            so->read_timeout_ms = 1; /* 0 means no timeout: a tiny one is the shortest wait */
    }
    if (!so->trace_path)
        so->trace_path = t->trace_path;
    if (t->lookahead >= 0)
        so->lookahead = t->lookahead != 0;
    if (t->lookahead_probe >= 0)
        so->lookahead_probe = t->lookahead_probe != 0;
    if (t->lookahead_k > 0)
        so->lookahead_k = (uint32_t)t->lookahead_k;
    if (t->lookahead_min_p >= 0)
        so->lookahead_min_p = (float)t->lookahead_min_p;
    if (t->lookahead_hard_p >= 0)
        so->lookahead_hard_p = (float)t->lookahead_hard_p;
    if (t->lookahead_cancel >= 0)
        so->lookahead_cancel = t->lookahead_cancel != 0;
    if (t->pressure >= 0)
        so->pressure = t->pressure != 0;
    if (t->arena_thp >= 0)
        so->arena_thp = t->arena_thp != 0;
    if (t->arena_warm >= 0)
        so->arena_warm = t->arena_warm != 0;
    if (t->prefill_ring >= 0)
        so->prefill_ring = t->prefill_ring != 0;
    if (t->ring_cover_pct >= 0)
        so->ring_min_cover_pct = (uint32_t)t->ring_cover_pct;
    if (t->ring_sparse >= 0)
        so->ring_sparse = t->ring_sparse != 0;
    if (t->ring_seed >= 0)
        so->ring_seed = t->ring_seed != 0;
}

/* The tuning's ranges (a front end checks them when it parses the variables; a caller filling
 * the struct by hand gets the same answer here). */
static int check_tuning(const gm_tuning *t, gm_err *err)
{
    if (t->lookahead_k < 0 || t->lookahead_k > GM_STREAM_PREDICT_MAX)
        return gm_err_set(err, GM_EINVAL, "GMLX_DECODE_LOOKAHEAD_K=%d: a whole number from 1 to %d",
                          t->lookahead_k, GM_STREAM_PREDICT_MAX);
    if (t->lookahead_min_p > 1 || t->lookahead_hard_p > 1)
        return gm_err_set(err, GM_EINVAL, "GMLX_DECODE_LOOKAHEAD_MIN_P and _HARD_P lie from 0 to 1");
    if (t->ring_cover_pct > 100)
        return gm_err_set(err, GM_EINVAL, "GMLX_FEEDER_PREFILL_COVER=%d: a share from 0 to 100", t->ring_cover_pct);
    if (t->read_timeout_s > 3600)
        return gm_err_set(err, GM_EINVAL, "GMLX_DECODE_READ_TIMEOUT=%g: seconds from 0 to 3600", t->read_timeout_s);
    return 0;
}

/* The lookahead's norm ratio per streamed MoE layer: layer l's FFN input is rms(h) * g_l; the
 * next streamed MoE layer m sees rms(h') * g_m, so l's normed input times g_m / g_l predicts it
 * (1 where |g_l| < 1e-6; no ratio when either norm is missing). */
static int lookahead_ratios(gm_engine *e, gm_err *err)
{
    if (!e->stream || !gm_stream_wants_prediction(e->stream))
        return 0;
    e->la_ratio = calloc(e->n_layer, sizeof *e->la_ratio);
    if (!e->la_ratio)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint32_t l = 0; l < e->n_layer; l++) {
        int32_t m = gm_stream_next_layer(e->stream, l);
        if (m < 0 || !e->layers[l].ffn_norm || !e->layers[m].ffn_norm)
            continue;
        float *r = malloc(e->n_embd * sizeof *r);
        if (!r)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        for (uint32_t i = 0; i < e->n_embd; i++) {
            float gl = e->layers[l].ffn_norm[i];
            r[i] = fabsf(gl) < 1e-6f ? 1.0f : e->layers[m].ffn_norm[i] / gl;
        }
        e->la_ratio[l] = r;
    }
    return 0;
}

/* The lossy levers (stream/shed.h): in force only when the experts stream, each announced with
 * the line the seed documents; K against the arena's slots (a call stages K experts at once). */
static int install_levers(gm_engine *e, const gm_engine_opts *opts, gm_err *err)
{
    const gm_shed_opts *o = opts ? opts->levers : NULL;
    if (!gm_shed_opts_any(o))
        return 0;
    char flags[256];
    gm_shed_opts_flags(o, flags, sizeof flags);
    if (!e->streamed) {
        gm_log(GM_LOG_NOTE, "[stream] %s ignored: needs --stream-experts or --stream-cpu (they only apply to "
               "streamed MoE layers)", flags);
        return 0;
    }
    uint32_t n_moe = 0, n_shexp = 0, covered = 0;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        n_moe += e->layers[l].is_moe;
        n_shexp += e->layers[l].is_moe && e->layers[l].has_shexp;
    }
    if (e->stream) {
        gm_stream_stats st;
        gm_stream_get_stats(e->stream, &st);
        covered = st.covered_layers;
    }
    int rc = gm_shed_create(&e->shed, o, e->n_layer, o->experts ? o->experts : e->n_expert_used, err);
    if (rc)
        return rc;
    if (o->experts) {
        e->k_route = o->experts;
        gm_log(GM_LOG_NOTE, "[stream] MoE top-k override: %u->%u experts/token on %u offloaded MoE layers (lossy - "
               "outputs differ from the trained router)", e->n_expert_used, o->experts, n_moe);
    }
    if (o->expert_mass > 0)
        gm_log(GM_LOG_NOTE, "[stream] MoE expert-mass %g: adaptive experts/token on %u offloaded MoE layers (lossy - "
               "outputs differ from the trained router)", o->expert_mass, n_moe);
    if (o->probe)
        gm_log(GM_LOG_NOTE, "[stream] MoE expert probe: recording router fan-out on %u offloaded MoE layers "
               "(lossless; table prints at exit)", n_moe);
    if (o->miss_shed > 0 && covered)
        gm_log(GM_LOG_NOTE, "[stream] MoE miss-shed %g: demand-miss experts shed up to %g%% of each token's gate "
               "mass on %u offloaded MoE layers (lossy - outputs differ from the trained router)",
               o->miss_shed, 100.0 * (1.0 - o->miss_shed), covered);
    else if (o->miss_shed > 0)
        gm_log(GM_LOG_NOTE, "[stream] MoE miss-shed found no decode-feeder MoE layer - no effect");
    if (o->keepers && !(o->miss_shed > 0))
        gm_log(GM_LOG_NOTE, "[stream] --moe-prestage keepers ignored: it needs --moe-miss-shed");
    else if (o->keepers && covered && !e->lookahead_on)
        gm_log(GM_LOG_NOTE, "[stream] --moe-prestage keepers has no effect: lookahead prestage is off "
               "(GMLX_DECODE_LOOKAHEAD=0)");
    else if (o->keepers && covered)
        gm_log(GM_LOG_NOTE, "[stream] MoE keeper prestage: lookahead reads only the predicted experts miss-shed "
               "would keep");
    if (o->layer_shed > 0 && n_shexp)
        gm_log(GM_LOG_NOTE, "[stream] MoE layer-shed %g: a decode token skips a layer's routed experts with "
               "probability %g on %u offloaded MoE layers with a shared expert (lossy - outputs differ from "
               "the trained router)", o->layer_shed, o->layer_shed, n_shexp);
    else if (o->layer_shed > 0)
        gm_log(GM_LOG_NOTE, "[stream] MoE layer-shed %g: no MoE layer has a shared expert to keep - no effect "
               "(its routed experts always run)", o->layer_shed);
    return 0;
}

gm_shed *gm_engine_levers(gm_engine *e) { return e->shed; }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The caller's progress callback behind the reader's (which has no step name). */
typedef struct load_progress {
    const gm_engine_opts *opts;
    const char *what;
} load_progress;

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    const load_progress *lp = ctx;
    lp->opts->progress(lp->opts->progress_user, lp->what, done, total);
}

/* The model runs from its mapping, which the plan found room for: its tensor data is mapped in
 * now, so that the first prefill does not pay a page fault per page of weights (the load pays
 * it once, as it would reading the file). */
static int populate(gm_engine *e, const gm_engine_opts *opts, bool tables_from_file, gm_err *err)
{
    load_progress lp = {opts, "reading the model into memory"};
    const double t0 = now_s();
    gm_gguf_populate_info info;
    /* lookup tables the plan reads from the file stay on disk (open_tables reads their rows) */
    uint8_t *skip = NULL;
    if (tables_from_file && e->ple_layer >= 0) { /* the n-gram embedding's table is read by row */
        if (!(skip = calloc(e->desc.n_tensors + 1, 1)))
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        for (uint64_t i = 0; i < e->desc.n_tensors; i++)
            skip[i] = e->desc.tensors[i].cls == GM_TC_LOOKUP;
        e->tables_from_file = true;
    }
    int rc = gm_gguf_populate_except(e->g, skip, opts && opts->progress ? on_progress : NULL, &lp, &info, err);
    free(skip);
    if (rc == 0 && gm_log_enabled(GM_LOG_INFO)) {
        char a[32], b[64] = "";
        gm_fmt_bytes(gm_gguf_total_size(e->g), a, sizeof a);
        if (info.huge_bytes) {
            char h[32];
            gm_fmt_bytes(info.huge_bytes, h, sizeof h);
            snprintf(b, sizeof b, ", %s of it in huge pages", h);
        }
        gm_log(GM_LOG_INFO, "[load] model in memory: %s mapped in %.2f s%s%s", a, now_s() - t0, b,
               info.reread ? " (read again: the page cache held it in small pages)" : "");
    }
    return rc;
}

/* The seed's "cannot fit:" refusal, before anything is pinned: the every-token weights and the
 * KV room must fit under the ceiling (under GMLX_OVERCOMMIT=1: the RAM), and what the pin takes
 * must be free now, or the kernel would end the process part way through the pin. */
static int check_fit(const gm_plan *plan, bool overcommit, bool pin, gm_err *err)
{
    char a[32], b[32], c[32], d[32];
    const uint64_t need = plan->every_token_bytes + plan->kv_room_bytes;
    gm_fmt_bytes(plan->every_token_bytes, a, sizeof a);
    gm_fmt_bytes(plan->kv_room_bytes, b, sizeof b);
    if (!overcommit && plan->verdict == GM_VERDICT_CANNOT_STREAM) {
        gm_fmt_bytes(plan->ceiling_bytes, c, sizeof c);
        gm_fmt_bytes(need - plan->ceiling_bytes, d, sizeof d);
        return gm_err_set(err, GM_ENOSPACE, "cannot fit: every-token weights %s + KV room %s exceed the %s "
                          "ceiling by %s (pick a quant with smaller every-token tensors, or shrink the KV room: "
                          "-c, --kv-bits 8, --prefill-step-size; gmlx validate shows the plan; "
                          "GMLX_OVERCOMMIT=1 judges against the RAM)", a, b, c, d);
    }
    if (overcommit && need > plan->ram_bytes) {
        gm_fmt_bytes(plan->ram_bytes, c, sizeof c);
        gm_fmt_bytes(need - plan->ram_bytes, d, sizeof d);
        return gm_err_set(err, GM_ENOSPACE, "cannot fit: every-token weights %s + KV room %s exceed the %s of "
                          "RAM by %s (GMLX_OVERCOMMIT=1 judges against the RAM)", a, b, c, d);
    }
    if (pin && plan->avail_known && need > plan->avail_bytes) {
        gm_fmt_bytes(plan->avail_bytes, c, sizeof c);
        gm_fmt_bytes(need - plan->avail_bytes, d, sizeof d);
        return gm_err_set(err, GM_ENOSPACE, "cannot fit: every-token weights %s + KV room %s need %s more than "
                          "the %s of memory available now (free memory, or shrink the KV room: -c, --kv-bits 8)",
                          a, b, d, c);
    }
    return 0;
}

/* Decides where the weights live and, for streamed experts, pins the every-token weights and
 * builds the decode arena sized by the plan. */
static int place(gm_engine *e, const gm_engine_opts *opts, const gm_tuning *tune, gm_err *err)
{
    gm_placement want = opts ? opts->placement : GM_PLACE_AUTO;
    e->streamed = want == GM_PLACE_CPU && e->desc.n_moe_layers > 0;
    if (want == GM_PLACE_CPU || e->desc.n_moe_layers == 0) {
        if (want == GM_PLACE_CPU)
            gm_log(GM_LOG_INFO, "[stream] --stream-cpu: the whole model runs from the page cache (no arena)");
        if (want == GM_PLACE_EXPERTS)
            gm_log(GM_LOG_NOTE, "[stream] --stream-experts: the model has no routed experts to stream; it runs "
                   "from the page cache");
        return 0;
    }
    gm_sysinfo sys;
    gm_plan_opts po;
    gm_plan plan;
    int rc;
    if ((rc = gm_sysinfo_probe(&sys, tune->ram_gb, tune->avail_gb, err)))
        return rc;
    gm_plan_opts_default(&po);
    gm_plan_opts_tune(&po, tune);
    /* the room the sessions will take: their context, chunk and cache type */
    if (opts && opts->kv_ctx)
        po.kv_ctx = opts->kv_ctx;
    if (opts && opts->max_chunk)
        po.prefill_step = opts->max_chunk;
    else if (opts && opts->kv_ctx && opts->kv_ctx < po.prefill_step)
        po.prefill_step = opts->kv_ctx; /* a session's chunk is at most its context */
    if (opts && opts->kv_bits)
        po.kv_bits = opts->kv_bits;
    gm_plan_compute(&e->desc, &sys, &po, &plan);
    e->plan_chunk_bytes = plan.prefill_chunk_bytes;
    char a[32], b[32];
    if (want == GM_PLACE_AUTO) {
        uint64_t hold = plan.every_token_bytes + plan.expert_bytes + plan.kv_room_bytes;
        bool over_budget = plan.verdict != GM_VERDICT_FITS && plan.verdict != GM_VERDICT_EXPERTS_IN_MEMORY;
        if (tune->overcommit && hold <= plan.ram_bytes)
            return populate(e, opts, false, err);
        if (!over_budget && plan.experts_in_memory_now)
            return populate(e, opts, plan.tables_from_file_now, err);
        gm_fmt_bytes(hold, a, sizeof a);
        if (over_budget) {
            gm_fmt_bytes(plan.ceiling_bytes, b, sizeof b);
            gm_log(GM_LOG_NOTE, "[stream] the experts stream because the model is over its memory budget: holding "
                   "them takes %s, past the %s budget. GMLX_OVERCOMMIT=1 keeps them in memory unless they "
                   "need more than the machine's RAM.", a, b);
        } else {
            gm_fmt_bytes(plan.room_now_bytes, b, sizeof b);
            gm_log(GM_LOG_NOTE, "[stream] the experts stream because the memory free now does not hold them: "
                   "holding them takes %s, past the %s free. GMLX_OVERCOMMIT=1 keeps them in memory.", a, b);
        }
    }
    const bool pin = tune->pin_weights != 0;
    if ((rc = check_fit(&plan, tune->overcommit, pin, err)))
        return rc;
    /* the drive, tested before the pin's reads keep it busy: the fast-disk recipe sets the
     * read-ahead's defaults (the GMLX_DECODE_LOOKAHEAD_* settings still override them) */
    const gm_fast_disk fd = opts ? opts->fast_disk : GM_FAST_DISK_AUTO;
    bool fast = fd == GM_FAST_DISK_ON;
    if (fd == GM_FAST_DISK_AUTO) {
        double gb_s = 0;
        gm_err derr = {0};
        if (gm_stream_drive_test(e->g, &e->desc, &gb_s, &derr) != 0) {
            gm_log(GM_LOG_NOTE, "[stream] drive test failed (%s); normal read-ahead", derr.msg);
        } else if (gb_s < 0) {
            gm_log(GM_LOG_INFO, "[stream] drive test skipped: the expert stacks are under one 4 MiB read; "
                   "normal read-ahead");
        } else {
            fast = gb_s >= GM_STREAM_FAST_DISK_GB_S;
            gm_log(GM_LOG_INFO, "[stream] drive test: %.2f GB/s (O_DIRECT, 4 MiB reads): %s", gb_s,
                   fast ? "fast-disk read-ahead (--stream-fast-disk off for the normal one)"
                        : "normal read-ahead (--stream-fast-disk on reads ahead harder)");
        }
    }
    /* the weight pin */
    if (!pin) {
        gm_log(GM_LOG_INFO, "[stream] weight pin off (GMLX_PIN_WEIGHTS=0): every-token weights stay cache-managed");
    } else {
        load_progress lp = {opts, "reading the every-token weights into pinned memory"};
        rc = gm_pin_create(&e->pin, e->g, &e->desc, e->n_threads > 8 ? e->n_threads : 8,
                           opts && opts->progress ? on_progress : NULL, &lp, err);
        if (rc)
            return rc;
        const gm_pin_info *pi = gm_pin_get_info(e->pin);
        gm_fmt_bytes(pi->bytes, a, sizeof a);
        if (pi->locked_bytes)
            gm_log(GM_LOG_INFO, "[stream] every-token weights pinned: %s locked in %.2f s (GMLX_PIN_WEIGHTS=0 disables)",
                   a, pi->read_s);
        else
            gm_log(GM_LOG_INFO, "[stream] every-token weights pinned: %s in anonymous memory (mlock refused: %s; "
                   "raise RLIMIT_MEMLOCK to lock them) in %.2f s", a, strerror(pi->mlock_errno), pi->read_s);
    }
    /* the arena: the plan's size, within the memory free now */
    uint64_t arena = plan.arena_bytes;
    if (!plan.arena_overridden && plan.avail_known) {
        uint64_t fixed = plan.every_token_bytes + plan.kv_room_bytes;
        uint64_t now = plan.room_now_bytes > fixed ? plan.room_now_bytes - fixed : 0;
        if (now < arena)
            arena = now;
    }
    gm_stream_opts so;
    if (opts && opts->stream)
        so = *opts->stream;
    else
        gm_stream_opts_default(&so);
    so.arena_bytes = arena;
    if (opts && gm_shed_opts_any(opts->levers))
        so.k_route = opts->levers->experts;
    if (fast) {
        gm_stream_fast_recipe(&so);
        if (fd == GM_FAST_DISK_ON)
            gm_log(GM_LOG_INFO, "[stream] --stream-fast-disk on: every predicted rank is read ahead");
    }
    e->fast_disk = fast;
    if (!(opts && opts->stream))
        apply_tuning(&so, tune);
    so.pressure_floor_bytes = plan.host_floor_bytes;
    if ((rc = gm_stream_create(&e->stream, e->g, &e->desc, &so, err)))
        return rc;
    e->streamed = true;
    e->lookahead_on = so.lookahead;
    e->split_max = tune->arena_token_split < 0 ? GM_ENGINE_SPLIT_DEFAULT : (uint32_t)tune->arena_token_split;
    gm_stream_stats st;
    gm_stream_get_stats(e->stream, &st);
    if (st.covered_layers == 0) {
        gm_fmt_bytes(arena, a, sizeof a);
        gm_log(GM_LOG_NOTE, "[stream] no decode arena: %s holds fewer than %u experts per layer; decode reads "
               "experts through the page cache", a, e->n_expert_used);
    } else {
        gm_fmt_bytes(st.arena_bytes, a, sizeof a);
        gm_log(GM_LOG_INFO, "[stream] decode feeder: %s popularity-managed expert arena on %u/%u layers, %u-%u "
               "slots per layer, %s reads (GMLX_DECODE_ARENA_GB sizes)", a, st.covered_layers,
               e->desc.n_moe_layers, st.min_slots, st.max_slots, gm_stream_backend_name(e->stream));
    }
    return 0;
}


/* The lookup table (qwen4exp's per_layer_token_embd) is read from the file by row when the
 * experts stream or the plan keeps the experts in memory by leaving the table on disk, so that
 * it takes no memory; otherwise its rows come from the mapping. */
static int open_tables(gm_engine *e, gm_err *err)
{
    const gm_gguf_tensor *t = e->ple_table;
    if (!t || !(e->stream || e->tables_from_file))
        return 0;
    const gm_table_opts to = {.mode = GM_TABLE_DIRECT, .max_rows = GM_PLE_GATHER};
    int rc = gm_table_open(&e->ple_rows, gm_gguf_part_path(e->g, t->part), t->file_offset, e->ple_row_bytes,
                           t->n_bytes / e->ple_row_bytes, &to, err);
    if (rc)
        return rc;
    gm_log(GM_LOG_INFO, "[stream] per-layer embedding table of %.1f GB offloaded to disk", (double)t->n_bytes / 1e9);
    return 0;
}

bool gm_engine_table_stats(const gm_engine *e, uint64_t *rows, uint64_t *bytes_read)
{
    if (!e->ple_rows)
        return false;
    gm_table_stats st;
    gm_table_get_stats(e->ple_rows, &st);
    *rows = st.rows;
    *bytes_read = st.bytes_read;
    return true;
}

int gm_engine_load(gm_engine **out, const char *path, const gm_engine_opts *opts, gm_err *err)
{
    *out = NULL;
    gm_engine *e = calloc(1, sizeof *e);
    if (!e)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    int rc = gm_gguf_open(&e->g, path, err);
    if (rc)
        goto fail;
    if ((rc = gm_model_describe(e->g, &e->desc, err)))
        goto fail;
    const char *arch = e->desc.arch_name;
    e->recipe = gm_recipe_find(arch);
    if (!e->recipe) {
        char runs[320];
        gm_arch_runnable_list(runs, sizeof runs);
        rc = gm_err_set(err, GM_EUNSUPPORTED, "%s: architecture '%s' cannot run yet (gmlx runs %s)",
                        path, arch[0] ? arch : "(none)", runs);
        goto fail;
    }
    const gm_hparams *hp = &e->desc.hp;
    e->ops.name = e->recipe->arch;
    e->ops.expert_scale = 1.0f;
    e->recipe->ops(hp, &e->ops);
    e->n_layer = hp->n_layer;
    e->n_embd = hp->n_embd;
    e->n_head = hp->n_head;
    e->n_head_kv = hp->n_head_kv;
    e->head_dim = hp->head_dim_k;
    e->n_expert = hp->n_expert;
    e->n_expert_used = hp->n_expert_used;
    e->k_route = e->k_max = hp->n_expert_used;
    e->n_ff_exp = hp->n_ff_exp ? hp->n_ff_exp : hp->n_ff;
    e->n_ff = hp->n_ff;
    e->n_ff_shexp = hp->n_ff_shexp;
    e->n_rot = hp->n_rot ? hp->n_rot : e->head_dim;
    e->rms_eps = hp->rms_eps;
    e->rope_base = hp->rope_base;
    e->mla = e->desc.arch && e->desc.arch->mla && hp->kv_lora_rank > 0;
    if (e->mla) { /* see mla.c: one latent row a position serves every head */
        e->kv_lora = hp->kv_lora_rank;
        e->q_lora = hp->q_lora_rank;
        e->v_head = hp->head_dim_v;
        e->qk_nope = hp->head_dim_k > e->n_rot ? hp->head_dim_k - e->n_rot : 0;
        e->head_dim = e->kv_lora + e->n_rot;
        e->n_head_kv = 1;
    }
    /* DeepSeek sparse attention (dsa.c): a power-of-two key dim (its Hadamard rotation) that
     * holds the rotated dims, through the query latent, the first layer with its own indexer */
    if (e->ops.qsa) {
        /* qwen4exp's block-sparse attention (qsa.c): its indexer is bound on every full-attention
         * layer and chooses blocks where the layer has a compress ratio */
        e->idx_heads = hp->idx_heads;
        e->idx_dim = hp->idx_dim;
        e->qsa_topk = hp->idx_topk;
        uint32_t r_max = 0;
        for (uint32_t l = 0; l < e->desc.n_layers; l++)
            if (e->desc.layers[l].indexer_full && e->desc.layers[l].compress_ratio > r_max)
                r_max = e->desc.layers[l].compress_ratio;
        const uint32_t D = hp->idx_dim;
        if (r_max && (!hp->idx_heads || hp->idx_heads > 1024 || D < 2 || D > GM_MAX_HEAD_DIM ||
                      D < (hp->n_rot ? hp->n_rot : e->head_dim) || !hp->idx_topk || hp->idx_topk > (1u << 20) ||
                      r_max > 64)) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: block-sparse attention this engine cannot run (indexer of %u "
                            "heads of %u, top %u, blocks of up to %u)", path, hp->idx_heads, D, hp->idx_topk, r_max);
            goto fail;
        }
        e->idx_topk = r_max ? hp->idx_topk + r_max - 1 : 0; /* the most positions a query attends */
    } else if (e->ops.csa) {
        /* DeepSeek-V4's compressed attention (csa.c): its CSA layers' indexer */
        e->idx_heads = hp->idx_heads;
        e->idx_dim = hp->idx_dim;
        e->csa_topk = hp->idx_topk;
        const uint32_t D = hp->idx_dim, R = hp->n_rot;
        if (!hp->idx_heads || hp->idx_heads > 1024 || D < R || D > GM_MAX_HEAD_DIM || !hp->idx_topk ||
            hp->idx_topk > (1u << 20)) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: compressed attention this engine cannot run (indexer of %u heads "
                            "of %u, top %u, %u rotated dims)", path, hp->idx_heads, D, hp->idx_topk, R);
            goto fail;
        }
    } else if (hp->idx_topk && hp->idx_block) {
        /* MiniMax sparse attention (msa.c): an indexer head per kv head, blocks of positions */
        e->idx_heads = hp->idx_heads;
        e->idx_dim = hp->idx_dim;
        e->idx_topk = hp->idx_topk;
        e->idx_block = hp->idx_block;
        e->idx_local = hp->idx_local;
        const uint32_t D = hp->idx_dim;
        if (e->mla || hp->idx_heads != e->n_head_kv || D < 2 || D > GM_MAX_HEAD_DIM ||
            D < (hp->n_rot ? hp->n_rot : e->head_dim) || hp->idx_topk > (1u << 16) || hp->idx_block > (1u << 16)) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: block-sparse attention this engine cannot run (indexer of %u "
                            "heads of %u for %u kv heads, top %u blocks of %u)", path, hp->idx_heads, D,
                            e->n_head_kv, hp->idx_topk, hp->idx_block);
            goto fail;
        }
    } else if (hp->idx_topk) {
        e->idx_heads = hp->idx_heads;
        e->idx_dim = hp->idx_dim;
        e->idx_topk = hp->idx_topk;
        const uint32_t D = hp->idx_dim;
        if (!e->mla || !e->q_lora || !hp->idx_heads || hp->idx_heads > 1024 || D < 2 || D > GM_MAX_HEAD_DIM ||
            (!e->ops.idx_no_hadamard && (D & (D - 1)) != 0) || D < (hp->n_rot ? hp->n_rot : e->head_dim) ||
            hp->idx_topk > (1u << 20) ||
            e->desc.n_layers == 0 || !e->desc.layers[0].indexer_full) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: sparse attention this engine cannot run (indexer of %u "
                            "heads of %u, top %u, %s)", path, hp->idx_heads, D, hp->idx_topk,
                            e->mla && e->q_lora ? "first layer without its own indexer or sizes out of range"
                                                : "not on latent attention with a query latent");
            goto fail;
        }
    }
    /* DeepSeek-V4's grouped low-rank attention output (csa.c; its binder checks the shapes) */
    e->o_groups = hp->attn_out_groups;
    e->o_lora = hp->attn_out_lora;
    if (e->o_lora > (1u << 20) || (e->o_groups && e->n_head % e->o_groups != 0)) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: an attention output of %u groups of rank %u for %u heads", path,
                        e->o_groups, e->o_lora, e->n_head);
        goto fail;
    }
    /* hyper-connections (hc.c): hc_count residual streams */
    e->n_hc = 1;
    if (hp->hc_count > 1) {
        if (hp->hc_count > GM_MAX_HC || !(hp->hc_eps >= 0.0f) || !isfinite(hp->hc_magnitude)) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: hyper-connections this engine cannot run (%u streams, "
                            "epsilon %g, magnitude %g)", path, hp->hc_count, (double)hp->hc_eps,
                            (double)hp->hc_magnitude);
            goto fail;
        }
        e->n_hc = hp->hc_count;
        e->hc_eps = hp->hc_eps;
        e->hc_magnitude = hp->hc_magnitude;
        e->hc_lr = hp->hc_low_rank;
        e->hc_sinkhorn = hp->hc_sinkhorn_iters;
        if (e->hc_sinkhorn > 1000) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: %u Sinkhorn iterations for the hyper-connections", path,
                            e->hc_sinkhorn);
            goto fail;
        }
        if (e->hc_lr > (uint64_t)e->n_hc * hp->n_embd) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: hyper-connections of low rank %u over %u streams of %u", path,
                            e->hc_lr, e->n_hc, hp->n_embd);
            goto fail;
        }
    }
    /* qwen4exp's n-gram embedding (ple.c): one layer, its table's rows as wide as the hidden
     * state when the heads' rows are laid side by side */
    e->ple_layer = -1;
    if (hp->ple_layer >= 0 || hp->ple_bad[0]) {
        /* on a linear-attention layer, as the reference requires: its convolution's history is then
         * one more recurrent state, which n_recurrent > 0 already keeps from rewinds */
        if (!e->ops.qsa || hp->ple_bad[0] || hp->ple_layer < 0 || (uint32_t)hp->ple_layer >= e->desc.n_layers ||
            !e->desc.layers[hp->ple_layer].is_recurrent || e->n_hc < 2 ||
            (uint64_t)hp->ple_n_heads * hp->ple_head_dim != hp->n_embd) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: an n-gram embedding this engine cannot run (%s; layer %d, which "
                            "must be a linear-attention one, %u heads of %u for a hidden size of %u)", path,
                            hp->ple_bad[0] ? hp->ple_bad : "ple.* keys", hp->ple_layer, hp->ple_n_heads,
                            hp->ple_head_dim, hp->n_embd);
            goto fail;
        }
        e->ple_layer = hp->ple_layer;
        e->ple_hist = (hp->ple_conv - 1) * hp->ple_ngram;
    }
    /* Kimi-K3: latent routed experts, the situ activation, KDA's decay bound, cross-layer
     * residual attention (a checkpoint every res_block layers) */
    e->moe_dim = hp->n_expert_latent ? hp->n_expert_latent : hp->n_embd;
    e->situ_beta = hp->situ_beta;
    e->situ_linear_beta = hp->situ_linear_beta;
    e->kda_lb = hp->has_kda_lower_bound;
    e->kda_lower_bound = hp->kda_lower_bound;
    e->res_block = hp->attn_res_block;
    e->res_max = e->res_block ? (hp->n_layer + e->res_block - 1) / e->res_block : 0;
    if (!(e->situ_beta >= 0.0f && isfinite(e->situ_beta)) || !isfinite(e->situ_linear_beta) ||
        (e->kda_lb && !isfinite(e->kda_lower_bound)) || e->moe_dim > (1u << 20) || e->res_max > GM_MAX_RES) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: activation or latent sizes this engine cannot run (situ %g/%g, "
                        "KDA bound %g, latent %u)", path, (double)e->situ_beta, (double)e->situ_linear_beta,
                        (double)e->kda_lower_bound, e->moe_dim);
        goto fail;
    }
    const gm_gguf_tensor *te = gm_gguf_find_tensor(e->g, "token_embd.weight");
    e->n_vocab = te && te->n_dims == 2 ? (uint32_t)te->ne[1] : hp->n_vocab;
    if (!e->n_layer || !e->n_embd || !e->n_head || !e->n_head_kv || !e->head_dim ||
        e->n_expert_used > GM_MAX_EXPERTS_USED || e->n_head % e->n_head_kv != 0 ||
        e->n_head / e->n_head_kv > GM_MAX_GROUP || (!e->mla && hp->head_dim_v != e->head_dim) ||
        (e->mla && (!e->qk_nope || !e->v_head)) || e->n_rot > e->head_dim ||
        e->n_rot % 2 != 0 || e->head_dim > GM_MAX_HEAD_DIM || !e->n_vocab || e->n_layer != e->desc.n_layers) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: inconsistent hyper-parameters (layers %u, embedding %u, "
                        "heads %u/%u, head dims %u/%u, rope %u)", path, e->n_layer, e->n_embd,
                        e->n_head, e->n_head_kv, hp->head_dim_k, hp->head_dim_v, e->n_rot);
        goto fail;
    }
    /* the MTP drafter's blocks at the end (nextn_predict_layers) are not part of the forward
     * pass: they serve speculative decoding only */
    if (hp->n_nextn >= e->n_layer) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: %u of the %u blocks are MTP drafter layers", path,
                        hp->n_nextn, e->n_layer);
        goto fail;
    }
    e->n_layer -= hp->n_nextn;
    /* Gated DeltaNet layers (Qwen3-Next): the ssm.* sizes, which every recurrent layer shares */
    for (uint32_t l = 0; l < e->n_layer; l++)
        e->n_recurrent += e->desc.layers[l].is_recurrent;
    if (e->n_recurrent) {
        e->dn_nk = hp->ssm_group_count;
        e->dn_nv = hp->ssm_time_step_rank;
        e->dn_dk = hp->ssm_state_size;
        e->dn_kconv = hp->ssm_conv_kernel;
        e->dn_dv = e->dn_nv ? hp->ssm_inner_size / e->dn_nv : 0;
        if (!e->dn_nk || !e->dn_nv || !e->dn_dk || !e->dn_dv || e->dn_nv % e->dn_nk != 0 ||
            (uint64_t)e->dn_dv * e->dn_nv != hp->ssm_inner_size || e->dn_dk > GM_MAX_HEAD_DIM ||
            e->dn_dv > GM_MAX_HEAD_DIM || e->dn_kconv < 1 || e->dn_kconv > 64) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: inconsistent linear-attention sizes (key heads %u of "
                            "%u, value heads %u, inner size %u, conv kernel %u)", path, e->dn_nk,
                            e->dn_dk, e->dn_nv, hp->ssm_inner_size, e->dn_kconv);
            goto fail;
        }
    }
    if (e->desc.n_moe_layers && (!e->n_expert || !e->n_expert_used || e->n_expert_used > e->n_expert)) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: expert counts %u used of %u are not valid", path,
                        e->n_expert_used, e->n_expert);
        goto fail;
    }
    e->n_group = hp->expert_group_count ? hp->expert_group_count : 1;
    e->n_group_used = hp->expert_group_used_count ? hp->expert_group_used_count : e->n_group;
    if (e->desc.n_moe_layers &&
        (e->n_group > GM_MAX_GROUPS || e->n_expert % e->n_group != 0 || e->n_group_used > e->n_group ||
         (uint64_t)e->n_group_used * (e->n_expert / e->n_group) < e->n_expert_used)) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: expert groups %u used of %u do not fit %u experts, %u "
                        "used (at most %d groups)", path, e->n_group_used, e->n_group, e->n_expert,
                        e->n_expert_used, GM_MAX_GROUPS);
        goto fail;
    }
    /* the levers' ranges before the long part of the load */
    if (opts && gm_shed_opts_any(opts->levers) && e->desc.n_moe_layers) {
        if ((rc = gm_shed_opts_check(opts->levers, e->n_expert, err)))
            goto fail;
        if (opts->levers->experts &&
            (uint64_t)e->n_group_used * (e->n_expert / e->n_group) < opts->levers->experts) {
            rc = gm_err_set(err, GM_EINVAL, "--moe-experts %u: group-limited routing chooses among %u experts",
                            opts->levers->experts, e->n_group_used * (e->n_expert / e->n_group));
            goto fail;
        }
        /* the routing buffers (and the chunk the scratch allows) hold the wider of the two */
        if (opts->levers->experts > e->k_max)
            e->k_max = opts->levers->experts;
    }
    gm_tuning tune_default;
    gm_tuning_default(&tune_default);
    const gm_tuning *tune = opts && opts->tuning ? opts->tuning : &tune_default;
    if ((rc = check_tuning(tune, err)) || (rc = gm_kernels_init(tune->kernels, &e->k, err)))
        goto fail;
    gm_sysinfo sys;
    int n_threads = opts && opts->n_threads > 0 ? opts->n_threads : 0;
    if (!n_threads) {
        gm_err ignore = {0};
        n_threads = gm_sysinfo_probe(&sys, -1, -1, &ignore) == 0 ? sys.n_cpus : 1;
        if (n_threads > 256)
            n_threads = 256; /* a product splits into at most 256 parts (matmul.c) */
    }
    e->n_threads = n_threads;
    if ((rc = gm_pool_create(&e->pool, n_threads, err)))
        goto fail;
    if ((rc = place(e, opts, tune, err)))
        goto fail;
    if (tune->layer_profile > 0) {
        e->prof_attn_ns = calloc(e->n_layer, sizeof *e->prof_attn_ns);
        e->prof_ffn_ns = calloc(e->n_layer, sizeof *e->prof_ffn_ns);
        if (!e->prof_attn_ns || !e->prof_ffn_ns) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            goto fail;
        }
        e->profile = tune->layer_profile;
    }
    e->max_chunk = opts && opts->max_chunk ? opts->max_chunk : GM_ENGINE_CHUNK_MEMORY;
    if (!(opts && opts->max_chunk) && e->stream) {
        /* as wide as the scratch the plan reserved for the chunk holds (its estimate of a
         * token's activations is leaner than the session's buffers, MLA's most of all) */
        const uint64_t fit = e->plan_chunk_bytes / gm_fwd_scratch_token_bytes(e);
        e->max_chunk = fit >= GM_ENGINE_CHUNK_STREAMED ? GM_ENGINE_CHUNK_STREAMED
                       : fit > GM_ENGINE_CHUNK_MEMORY  ? (uint32_t)fit
                                                       : GM_ENGINE_CHUNK_MEMORY;
    }
    e->desc.hp.yarn_no_truncate = e->ops.yarn_no_truncate;
    if ((rc = gm_engine_bind(e, err)) || (rc = lookahead_ratios(e, err)) || (rc = install_levers(e, opts, err)) ||
        (rc = open_tables(e, err)))
        goto fail;
    /* the dense FFN's width sizes the session's scratch only where a layer has a dense FFN: a file
     * of MoE layers alone may carry any feed_forward_length */
    bool dense = false;
    for (uint32_t l = 0; l < e->n_layer; l++)
        dense |= e->layers[l].ffn_gate.data != NULL;
    if (!dense)
        e->n_ff = 0;
    e->attn_scale = 1.0f / sqrtf((float)e->head_dim);
    if (e->mla) {
        /* the scale of the reference's q.k: 1/sqrt(qk_nope + n_rot), times mscale^2 under YaRN
         * (mscale = 1 + yarn_log_multiplier ln(factor)), whose rotation then keeps magnitude 1;
         * Hy4's (mla_plain_yarn) keeps YaRN's rotation magnitude and a plain scale */
        float m = 1.0f;
        if (strcmp(hp->rope_scaling, "yarn") == 0 && !e->ops.mla_plain_yarn) {
            m = hp->yarn_attn_factor * (1.0f + hp->yarn_log_mul * logf(hp->rope_scale_factor));
            e->rope_mscale = 1.0f;
        }
        e->attn_scale = m * m / sqrtf((float)(e->qk_nope + e->n_rot));
        if (!(e->attn_scale > 0.0f && isfinite(e->attn_scale))) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: YaRN settings give an attention scale of %g",
                            path, (double)e->attn_scale);
            goto fail;
        }
    }
    const int gpu = opts ? opts->gpu : 0;
    /* --gpu, or by default when the experts stream (an arena) and a device is there: probed once */
    gm_gpu_device dev;
    bool use_gpu = false;
    if (gpu > 0 || (gpu < 0 && e->stream)) {
        gm_err perr = {0};
        use_gpu = gm_gpu_probe(&dev, &perr) == 0;
        if (!use_gpu && gpu > 0) {
            rc = gm_err_set(err, perr.code ? perr.code : GM_EUNSUPPORTED, "--gpu: no CUDA device to use: %s", perr.msg);
            goto fail;
        }
    }
    if (use_gpu) {
        /* the attention first: the tier of experts takes what it leaves */
        uint64_t held = 0, later = 0;
        gm_err gerr = {0};
        /* staging slots for a prompt's chunk on the device, when the experts are in host memory */
        uint32_t stage = tune->gpu_stage < 0 ? GM_VRAM_STAGE_SLOTS : (uint32_t)tune->gpu_stage;
        if (e->stream || !tune->gpu_decode || !tune->gpu_prompt)
            stage = 0;
        if ((tune->gpu_attn != 0 && (rc = gm_gpu_attn_create(&e->gpu_attn, e, &dev, opts->vram_gb, opts->kv_ctx,
                                                              opts->kv_bits, &held, &later, &gerr))) ||
            (rc = gm_gpu_create(&e->gpu, e, &dev,
                                &(gm_gpu_opts){opts->vram_gb, held, later, stage, tune->gpu_pin_host > 0,
                                               tune->gpu_uploads < 0 ? GM_GPU_UPLOADS_PER_TOKEN
                                                                     : (uint32_t)tune->gpu_uploads,
                                               opts->progress, opts->progress_user},
                                &gerr))) {
            if (gpu > 0) {
                gm_err_set(err, rc, "%s", gerr.msg);
                goto fail;
            }
            gm_log(GM_LOG_NOTE, "[gpu] the CUDA device stays unused: %s", gerr.msg);
            gm_gpu_attn_free(e->gpu_attn);
            e->gpu_attn = NULL;
            rc = 0;
        }
        if (e->gpu && tune->gpu_decode != 0 &&
            (rc = gm_gpu_dec_create(&e->gpu_dec, e,
                                    &(gm_gpu_dec_opts){.graph = tune->gpu_graph != 0, .prompt = tune->gpu_prompt != 0,
                                                       .split = tune->gpu_split != 0,
                                                       .split_promotes = tune->gpu_uploads >= 0,
                                                       .bounce = tune->gpu_bounce != 0},
                                    err)))
            goto fail;
    }
    *out = e;
    return 0;
fail:
    gm_engine_free(e);
    return rc;
}

void gm_engine_adopt(gm_engine *e) { gm_pool_adopt(e->pool); }
void gm_engine_print_tables(const gm_engine *e, gm_strbuf *out)
{
    if (!e->ple_rows)
        return;
    gm_table_stats st;
    gm_table_get_stats(e->ple_rows, &st);
    gm_strbuf_putf(out, "[stream] per-layer embedding table: %llu rows in %llu gathers, %.1f MB from the drive "
                   "(%s); decode %.3f ms a token (worst %.3f), prefill %.3f s\n",
                   (unsigned long long)st.rows, (unsigned long long)st.gathers, (double)st.bytes_read / 1e6,
                   gm_table_direct(e->ple_rows) ? "O_DIRECT" : "page cache",
                   e->ple_decode_calls ? (double)e->ple_decode_ns / 1e6 / (double)e->ple_decode_calls : 0.0,
                   (double)e->ple_decode_max_ns / 1e6, (double)e->ple_prefill_ns / 1e9);
}

void gm_engine_print_gpu(const gm_engine *e, gm_strbuf *out)
{
    if (e->gpu)
        gm_gpu_print_stats(e->gpu, out);
    gm_gpu_attn_print_stats(e->gpu_attn, out);
    gm_gpu_dec_print_stats(e->gpu_dec, out);
}
gm_stream *gm_engine_stream(gm_engine *e) { return e->stream; }
bool gm_engine_streams(const gm_engine *e) { return e->pin != NULL; }
const gm_model_desc *gm_engine_desc(const gm_engine *e) { return &e->desc; }
const gm_gguf *gm_engine_gguf(const gm_engine *e) { return e->g; }
uint32_t gm_engine_n_vocab(const gm_engine *e) { return e->n_vocab; }
uint32_t gm_engine_max_chunk(const gm_engine *e) { return e->max_chunk; }
uint32_t gm_fwd_max_chunk(const gm_fwd *s) { return s->max_chunk; }
int gm_engine_n_threads(const gm_engine *e) { return e->n_threads; }
const char *gm_engine_kernel_level(const gm_engine *e) { return gm_kernel_level_name(gm_kernels_level(e->k)); }
