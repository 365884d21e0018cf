/* cli/env: the one place of the front end that reads the GMLX_* environment variables (their
 * meaning: docs/streaming.md and docs/cli.md); everything below it takes the values as options.
 * Also the log sink and the load progress line, which every command that loads shares. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#ifndef GMLX_DEFAULT_MODEL
#define GMLX_DEFAULT_MODEL "model.gguf"
#endif

const char *gm_cli_default_model(void)
{
    const char *m = getenv("GMLX_MODEL");
    return m && *m ? m : GMLX_DEFAULT_MODEL;
}

/* A set variable that is neither empty nor "0". */
static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* A number within [lo, hi] when the variable is set (*out unchanged when unset). */
static bool env_num(const char *cmd, const char *name, double lo, double hi, double *out)
{
    const char *v = getenv(name);
    if (!v)
        return true;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        gm_cli_error(cmd, "%s=%s is not a number from %g to %g", name, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

/* A whole number from lo to hi, of what (the error's "a whole number of ..."): -1 when unset. */
static bool env_count(const char *cmd, const char *name, double lo, double hi, const char *what, int *out)
{
    double x = -1;
    if (!env_num(cmd, name, lo, hi, &x))
        return false;
    if (x >= 0 && x != floor(x)) {
        gm_cli_error(cmd, "%s takes a whole number of %s", name, what);
        return false;
    }
    *out = x < 0 ? -1 : (int)x;
    return true;
}

/* A 0/1 switch: -1 when unset. */
static bool env_switch(const char *cmd, const char *name, int *out)
{
    double x = -1;
    if (!env_num(cmd, name, 0, 1, &x))
        return false;
    if (x != -1 && x != 0 && x != 1) {
        gm_cli_error(cmd, "%s takes 0 or 1", name);
        return false;
    }
    *out = x < 0 ? -1 : (int)x;
    return true;
}

bool gm_cli_tuning(const char *cmd, gm_tuning *t)
{
    gm_tuning_default(t);
    double x;
    /* sizes in GiB, as the plan reads them */
    if (!env_num(cmd, "GMLX_RAM_GB", 1e-3, 1 << 20, &t->ram_gb) ||
        !env_num(cmd, "GMLX_AVAIL_GB", 0, 1 << 20, &t->avail_gb) ||
        !env_num(cmd, "GMLX_DECODE_ARENA_GB", 0, 1 << 20, &t->arena_gb))
        return false;
    x = 0;
    if (!env_num(cmd, "GMLX_STREAM_KV_CTX", 1, 1 << 24, &x))
        return false;
    if (x != floor(x)) {
        gm_cli_error(cmd, "GMLX_STREAM_KV_CTX is a whole number of tokens");
        return false;
    }
    t->plan_kv_ctx = (uint32_t)x;
    t->overcommit = env_on("GMLX_OVERCOMMIT");
    if (getenv("GMLX_PIN_WEIGHTS"))
        t->pin_weights = env_on("GMLX_PIN_WEIGHTS") ? 1 : 0;
    if (!env_num(cmd, "GMLX_DECODE_READ_TIMEOUT", 0, 3600, &t->read_timeout_s))
        return false;
    t->trace_path = getenv("GMLX_LOG_ROUTED");
    x = 0;
    if (!env_switch(cmd, "GMLX_DECODE_LOOKAHEAD", &t->lookahead) ||
        !env_switch(cmd, "GMLX_DECODE_LOOKAHEAD_PROBE", &t->lookahead_probe) ||
        !env_switch(cmd, "GMLX_DECODE_LOOKAHEAD_CANCEL", &t->lookahead_cancel) ||
        !env_num(cmd, "GMLX_DECODE_LOOKAHEAD_K", 1, 8, &x) ||
        !env_num(cmd, "GMLX_DECODE_LOOKAHEAD_MIN_P", 0, 1, &t->lookahead_min_p) ||
        !env_num(cmd, "GMLX_DECODE_LOOKAHEAD_HARD_P", 0, 1, &t->lookahead_hard_p))
        return false;
    if (x != floor(x)) {
        gm_cli_error(cmd, "GMLX_DECODE_LOOKAHEAD_K takes a whole number from 1 to 8");
        return false;
    }
    t->lookahead_k = (int)x;
    /* switches the engine has always read as "nonzero is on" */
    static const struct {
        const char *name;
        size_t off;
    } k_on[] = {{"GMLX_DECODE_PRESSURE", offsetof(gm_tuning, pressure)},
                {"GMLX_DECODE_ARENA_THP", offsetof(gm_tuning, arena_thp)},
                {"GMLX_DECODE_ARENA_WARM", offsetof(gm_tuning, arena_warm)},
                {"GMLX_FEEDER_PREFILL", offsetof(gm_tuning, prefill_ring)},
                {"GMLX_FEEDER_PREFILL_SEED", offsetof(gm_tuning, ring_seed)},
                {"GMLX_FEEDER_PREFILL_SPARSE", offsetof(gm_tuning, ring_sparse)},
                {"GMLX_GPU_ATTN", offsetof(gm_tuning, gpu_attn)},
                {"GMLX_GPU_DECODE", offsetof(gm_tuning, gpu_decode)},
                {"GMLX_GPU_GRAPH", offsetof(gm_tuning, gpu_graph)},
                {"GMLX_GPU_PROMPT", offsetof(gm_tuning, gpu_prompt)},
                {"GMLX_GPU_PIN_HOST", offsetof(gm_tuning, gpu_pin_host)},
                {"GMLX_GPU_BOUNCE", offsetof(gm_tuning, gpu_bounce)},
                {"GMLX_GPU_SPLIT", offsetof(gm_tuning, gpu_split)}};
    for (size_t i = 0; i < sizeof k_on / sizeof k_on[0]; i++) {
        x = -1;
        if (!env_num(cmd, k_on[i].name, 0, 1, &x))
            return false;
        if (x >= 0)
            *(int *)((char *)t + k_on[i].off) = x != 0;
    }
    if (!env_count(cmd, "GMLX_GPU_STAGE", 0, 1024, "experts (0 turns staging off)", &t->gpu_stage) ||
        !env_count(cmd, "GMLX_GPU_UPLOADS", 0, 64, "experts (0 turns promotion off)", &t->gpu_uploads) ||
        !env_count(cmd, "GMLX_ARENA_TOKEN_SPLIT", 0, 65536, "tokens (0 turns it off)", &t->arena_token_split))
        return false;
    x = -1;
    if (!env_num(cmd, "GMLX_FEEDER_PREFILL_COVER", 0, 100, &x))
        return false;
    t->ring_cover_pct = x < 0 ? -1 : (int)x;
    t->phase_stats = env_on("GMLX_DECODE_PHASE_STATS");
    x = 0;
    if (!env_num(cmd, "GMLX_DECODE_LAYER_PROFILE", 0, 2, &x))
        return false;
    if (x != floor(x)) {
        gm_cli_error(cmd, "GMLX_DECODE_LAYER_PROFILE takes 0, 1 or 2");
        return false;
    }
    t->layer_profile = (int)x;
    t->kernels = getenv("GMLX_KERNELS");
    return true;
}

bool gm_cli_model_opts(const char *cmd, const gm_cli_stream *sflags, gm_model_opts *o)
{
    gm_model_opts_default(o);
    if (!gm_cli_tuning(cmd, &o->tuning))
        return false;
    if (getenv("GMLX_GPU"))
        o->gpu = env_on("GMLX_GPU") ? 1 : 0;
    if (!env_num(cmd, "GMLX_VRAM_GB", 0, 1e6, &o->vram_gb))
        return false;
    if (sflags) {
        o->placement = (gm_placement)sflags->placement;
        o->fast_disk = (gm_fast_disk)sflags->fast_disk;
        o->levers = sflags->levers;
        if (sflags->prefill_feeder)
            o->tuning.prefill_ring = sflags->prefill_feeder > 0;
        if (sflags->gpu)
            o->gpu = sflags->gpu > 0 ? 1 : 0;
        if (sflags->vram_gb > 0)
            o->vram_gb = sflags->vram_gb;
        if (sflags->decode_feeder) {
            o->tuning.lookahead = sflags->decode_feeder > 0;
            if (sflags->decode_feeder < 0)
                o->tuning.lookahead_probe = 0;
        }
    }
    o->progress = gm_cli_progress;
    return true;
}

/* ---- log lines and progress ---- */

static bool g_progress_shown;

void gm_cli_progress_done(void)
{
    if (g_progress_shown)
        fputs("\r\033[K", stderr);
    g_progress_shown = false;
}

static void log_line(void *user, gm_log_level level, const char *line)
{
    (void)user;
    (void)level;
    gm_cli_progress_done();
    fprintf(stderr, "%s\n", line);
}

void gm_cli_log_setup(bool verbose) { gm_log_set_sink(log_line, NULL, verbose ? GM_LOG_INFO : GM_LOG_NOTE); }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* On a terminal, after the first second of a step: how much of it is done, at most ten times a
 * second. */
void gm_cli_progress(void *user, const char *what, uint64_t done, uint64_t total)
{
    static const char *step;
    static double t_step, t_drawn;
    (void)user;
    const double t = now_s();
    if (what != step) {
        step = what;
        t_step = t;
    }
    if (!isatty(STDERR_FILENO) || t - t_step < 1.0 || t - t_drawn < 0.1)
        return;
    t_drawn = t;
    fprintf(stderr, "\r\033[K[load] %s: %.1f / %.1f GB", what, (double)done / 1e9, (double)total / 1e9);
    fflush(stderr);
    g_progress_shown = true;
    if (done >= total)
        gm_cli_progress_done();
}
