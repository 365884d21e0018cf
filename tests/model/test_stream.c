/* Streaming is lossless and fails safely.
 *
 * Lossless: for fixture models (qwen3moe, Mixtral, the hybrid Qwen3-Next), the logits with the experts streamed through the decode arena
 * (--stream-experts) equal the in-memory logits bit for bit, with arenas from the minimum (a
 * token's experts per layer) to all experts, with prefill chunks smaller and larger than the
 * prompt, with decode calls of one token, with both read backends, with and without lookahead
 * prestage (whose bookkeeping is checked on the bundled model), with prefill chunks through the
 * two-slot ring and through the arena.
 * Faults (through the io module's fault layer): EIO at the Nth read names the layer, expert and
 * offset (on a hybrid model, the session then asks to be reset and afterwards is exact); a short kernel answer is completed by the backend (still exact); a stalled read is
 * abandoned after the timeout and the expert read through the page cache (still exact, and
 * said); a file truncated after load gives a clear error; with lookahead, a failed prestage read
 * is discarded and the output stays exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "genmodel.h"
#include "base/sysinfo.h"
#include "gguf/gguf.h"
#include "infer/engine.h"
#include "model/model.h"
#include "plan/plan.h"
#include "testutil.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static int32_t *read_ids(const char *path, uint32_t *n)
{
    int32_t *ids = gm_read_ids(path, n);
    assert_non_null(ids);
    return ids;
}

typedef struct run_cfg {
    gm_placement placement;
    double arena_gib;          /* 0: the plan's */
    uint32_t chunk;
    gm_io_backend backend;
    const gm_io_fault *fault;
    uint32_t timeout_ms;
    uint32_t queue_depth;      /* 0: the default */
    uint32_t ring_cover_pct;   /* the share of a layer's experts a chunk routes to for the ring to read it
                                  whole (0: any; below it only the routed ones) */
    bool no_sparse;            /* below that share, through the arena instead */
    bool no_lookahead;
    bool no_ring;              /* prefill chunks through the arena instead of the ring */
    bool buffered;             /* no O_DIRECT (a model in a temporary directory: maybe tmpfs) */
} run_cfg;

/* All logits of ids (prefill in chunks of cfg->chunk); returns the rc of the first failure. */
static int run(const char *model, const int32_t *ids, uint32_t n, const run_cfg *cfg, float **out,
               gm_err *err, gm_stream_stats *st)
{
    char arena[64];
    if (cfg->arena_gib > 0) {
        snprintf(arena, sizeof arena, "%.9f", cfg->arena_gib);
        gm_test_arena(arena);
    } else {
        gm_test_arena(NULL);
    }
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.backend = cfg->backend;
    so.fault = cfg->fault;
    if (cfg->timeout_ms)
        so.read_timeout_ms = cfg->timeout_ms;
    if (cfg->queue_depth)
        so.queue_depth = cfg->queue_depth;
    so.lookahead = !cfg->no_lookahead;
    so.prefill_ring = !cfg->no_ring;
    so.buffered = cfg->buffered;
    so.ring_min_tokens = 2; /* every multi-token chunk of these short prompts takes the ring */
    so.ring_min_cover_pct = cfg->ring_cover_pct;
    so.ring_sparse = !cfg->no_sparse;
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = cfg->chunk, .placement = cfg->placement, .stream = &so};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    int rc = gm_engine_load(&e, model, &eo, err);
    if (rc == 0)
        rc = gm_fwd_create(&s, e, n + 8, GM_KV_F32, err);
    uint32_t V = rc == 0 ? gm_engine_n_vocab(e) : 0;
    float *logits = rc == 0 ? malloc((size_t)n * V * sizeof *logits) : NULL;
    for (uint32_t at = 0; rc == 0 && at < n; at += cfg->chunk) {
        uint32_t m = n - at < cfg->chunk ? n - at : cfg->chunk;
        rc = gm_fwd_eval(s, ids + at, m, logits + (size_t)at * V, true, err);
    }
    if (st && e && gm_engine_stream(e))
        gm_stream_get_stats(gm_engine_stream(e), st);
    gm_fwd_free(s);
    gm_engine_free(e);
    gm_test_arena(NULL);
    if (rc) {
        free(logits);
        logits = NULL;
    }
    *out = logits;
    return rc;
}

/* Bytes of one expert slot of the fixture models (3 slices of 256 x 256 BF16 = 131072 bytes,
 * each widened to 4096-byte O_DIRECT blocks plus one block of slack): 3 x 135168. */
#define SLOT_BYTES (3.0 * 135168.0)

/* The cached fixture rel into model; false (a skip, a failure under CI) when it is missing. */
static bool cached_model(const char *rel, char *model, size_t len)
{
    const char *p = gm_fixture_cached(rel);
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("%s missing: run scripts/fetch-fixtures.sh", rel);
        gm_test_skipped(rel);
        return false;
    }
    snprintf(model, len, "%s", p);
    return true;
}

/* Streamed == in memory, bit for bit, for model (experts of 256 x 256 BF16) over ids: arenas of
 * the least, a few more and every expert, prefill chunks of 1, 5 and 64, both io backends, with
 * and without lookahead and the ring (buffered: no O_DIRECT, for a model in the temporary
 * directory). rel names the model in messages. */
static void check_lossless_model(const char *rel, const char *model, const int32_t *ids, uint32_t n,
                                 uint32_t n_layers_moe, uint32_t k, uint32_t n_expert, bool buffered)
{
    gm_err err = {0};
    float *ref = NULL;
    run_cfg mem = {.placement = GM_PLACE_CPU, .chunk = 64};
    assert_int_equal(run(model, ids, n, &mem, &ref, &err, NULL), 0);
    gm_engine_opts peek = {.n_threads = 1, .max_chunk = 1, .placement = GM_PLACE_CPU};
    gm_engine *pe = NULL;
    assert_int_equal(gm_engine_load(&pe, model, &peek, &err), 0);
    const size_t bytes = (size_t)n * gm_engine_n_vocab(pe) * sizeof(float);
    gm_engine_free(pe);

    /* arenas: exactly k slots per layer (the minimum), a few more, and every expert */
    const double arenas[] = {n_layers_moe * k * SLOT_BYTES / GIB, n_layers_moe * (k + 2) * SLOT_BYTES / GIB,
                             n_layers_moe * n_expert * SLOT_BYTES / GIB};
    const uint32_t chunks[] = {1, 5, 64};
    const gm_io_backend backends[] = {GM_IO_URING, GM_IO_PREAD};
    for (size_t a = 0; a < 3; a++)
        for (size_t c = 0; c < 3; c++)
            for (size_t b = 0; b < 4; b++) {
                run_cfg cfg = {.placement = GM_PLACE_EXPERTS, .arena_gib = arenas[a] * 1.0001,
                               .chunk = chunks[c], .backend = backends[b % 2], .no_lookahead = b >= 2,
                               .no_ring = b >= 2, .buffered = buffered};
                float *got = NULL;
                gm_stream_stats st;
                gm_err_clear(&err);
                int rc = run(model, ids, n, &cfg, &got, &err, &st);
                if (rc == GM_EUNSUPPORTED && backends[b % 2] == GM_IO_URING) {
                    gm_test_unavailable("io_uring", err.msg);
                    continue;
                }
                if (rc)
                    fail_msg("%s arena %.5f GiB chunk %u: %s", rel, arenas[a], chunks[c], err.msg);
                assert_true(st.covered_layers == n_layers_moe);
                assert_true(st.min_slots >= k);
                if (a == 0)
                    assert_int_equal(st.max_slots, k);
                if (chunks[c] > 1 && b < 2)
                    assert_true(st.ring_layers > 0 && st.ring_read_bytes > 0);
                else
                    assert_true(st.reads > 0);
                if (memcmp(got, ref, bytes) != 0)
                    fail_msg("%s: streamed logits differ (arena %.5f GiB, chunk %u, backend %d, lookahead and "
                             "ring %d)", rel, arenas[a], chunks[c], (int)backends[b % 2], b < 2);
                if (b >= 2)
                    assert_int_equal(st.la_issued + st.la_predictions, 0);
                free(got);
            }
    free(ref);
}

static void check_lossless(const char *rel, uint32_t n_layers_moe, uint32_t k, uint32_t n_expert)
{
    char model[4096];
    if (!cached_model(rel, model, sizeof model))
        return;
    char ids_rel[256];
    snprintf(ids_rel, sizeof ids_rel, "%.*s/prompt.ids", (int)(strchr(rel, '/') - rel), rel);
    uint32_t n;
    int32_t *ids = read_ids(gm_fixture_cached(ids_rel), &n);
    check_lossless_model(rel, model, ids, n, n_layers_moe, k, n_expert, false);
    free(ids);
}

static void test_lossless_qwen3moe(void **state)
{
    (void)state;
    check_lossless("qwen3moe/model-bf16.gguf", 3, 2, 8);
}

static void test_lossless_mixtral(void **state)
{
    (void)state;
    check_lossless("mixtral/model-bf16.gguf", 3, 2, 8);
}

/* A hybrid model (Gated DeltaNet layers keep a recurrent state between calls) streams losslessly */
static void test_lossless_qwen3next(void **state)
{
    (void)state;
    check_lossless("qwen3next/model-bf16.gguf", 3, 2, 8);
}

static int32_t test_id(uint32_t i);

/* A generated tiny model of a family (arch, gmlx-gen's shape options; n_layers_moe blocks of
 * n_expert experts top-2 of 256 x 256) streams losslessly, and its prefill gives the same logits
 * bit for bit in chunks of 1, 5 or 64 (the checks above compare each against the in-memory
 * one-shot run). */
static void check_lossless_gen(const char *arch, const char *const *shape, uint32_t n_layers_moe, uint32_t n_expert)
{
    char model[4096], name[64];
    snprintf(name, sizeof name, "lossless-%s", arch);
    gm_test_gen_arch(model, sizeof model, name, arch, "31", shape);
    int32_t ids[48];
    for (uint32_t i = 0; i < 48; i++)
        ids[i] = test_id(i);
    gm_err err = {0};
    float *ref = NULL, *got = NULL;
    const run_cfg one = {.placement = GM_PLACE_CPU, .chunk = 64};
    assert_int_equal(run(model, ids, 48, &one, &ref, &err, NULL), 0);
    const uint32_t chunks[] = {1, 5};
    for (size_t c = 0; c < 2; c++) {
        const run_cfg cfg = {.placement = GM_PLACE_CPU, .chunk = chunks[c]};
        assert_int_equal(run(model, ids, 48, &cfg, &got, &err, NULL), 0);
        if (memcmp(got, ref, 48ull * 300 * sizeof(float)) != 0)
            fail_msg("%s: in-memory logits in chunks of %u differ from one chunk", arch, chunks[c]);
        free(got);
    }
    free(ref);
    check_lossless_model(arch, model, ids, 48, n_layers_moe, 2, n_expert, true);
}

static void check_lossless_sparse(const char *arch)
{
    static const char *const shape[] = {"--expert-type", "BF16", "--dense-type", "F32", NULL};
    /* Kimi-K3's experts are of its latent width: 256, as the others' hidden size */
    static const char *const latent[] = {"--expert-type", "BF16", "--dense-type", "F32", "--expert-latent", "256",
                                         "--expert-ffn", "256", NULL};
    check_lossless_gen(arch, strcmp(arch, "kimi-k3") == 0 ? latent : shape, 3, 8);
}

/* GLM-5.2's sparse attention (from the 17th position on each query attends the 16 its indexer
 * chooses, block 3 reuses block 2's choice) */
static void test_lossless_glm_dsa(void **state)
{
    (void)state;
    check_lossless_sparse("glm-dsa");
}

/* MiniMax-M3's (from the 13th position on each kv head's queries attend 3 blocks of 4) */
static void test_lossless_minimax_m3(void **state)
{
    (void)state;
    check_lossless_sparse("minimax-m3");
}

/* Hy4's: hyper-connections (4 residual streams) around latent attention with sinks, an output
 * gate and its indexer's choice of 16 positions */
static void test_lossless_hy_v4(void **state)
{
    (void)state;
    check_lossless_sparse("hy_v4");
}

/* DeepSeek-V4's: Sinkhorn-mixed hyper-connections, a sliding window of 8 raw rows a query, CSA in
 * block 2 (its indexer choosing 8 of the compressed rows from the 36th position on), HCA in block 3
 * (no window of 128 completes in 48 positions), block 0 routed by token id; every block MoE. */
static void test_lossless_deepseek4(void **state)
{
    (void)state;
    static const char *const shape[] = {"--expert-type", "BF16", "--dense-type", "F32", "--compress-ratio", "1",
                                        "--expert-ffn", "256", NULL};
    check_lossless_gen("deepseek4", shape, 4, 8);
}

/* qwen4exp's: low-rank hyper-connections, Gated DeltaNet blocks between full-attention ones whose
 * QSA chooses whole blocks of 4 positions, the n-gram hash embedding (its convolution's history a
 * recurrent state) on block 0; every block MoE (4 of 8 experts of 256 x 256, top-2). Its chunked
 * prefill equals one-shot bit for bit; streamed runs read the embedding's table from the file. */
static void test_lossless_qwen4exp(void **state)
{
    (void)state;
    static const char *const shape[] = {"--expert-type", "BF16", "--dense-type", "F32", "--hidden", "256",
                                        "--expert-ffn", "256", "--experts", "8", NULL};
    check_lossless_gen("qwen4exp", shape, 4, 8);
}

/* A generated qwen4exp of the lossless tests' shape (its n-gram table: 4096 rows of 64 BF16, 4
 * rows a token) into model, the 48 test ids, and its in-memory logits (malloc'd). */
static float *table_model(char *model, size_t len, const char *name, const char *seed, int32_t *ids)
{
    static const char *const shape[] = {"--expert-type", "BF16", "--dense-type", "F32", "--hidden", "256",
                                        "--expert-ffn", "256", "--experts", "8", NULL};
    gm_test_gen_arch(model, len, name, "qwen4exp", seed, shape);
    for (uint32_t i = 0; i < 48; i++)
        ids[i] = test_id(i);
    gm_err err = {0};
    float *ref = NULL;
    const run_cfg one = {.placement = GM_PLACE_CPU, .chunk = 64};
    assert_int_equal(run(model, ids, 48, &one, &ref, &err, NULL), 0);
    return ref;
}

/* Loads model with eo (its experts streamed or not, as streamed says), evaluates the 48 ids in
 * chunks of 5 and checks that every position's 4 table rows were gathered from the file and the
 * logits are ref's bit for bit; returns the bytes the drive was asked for. */
static uint64_t check_table_run(const char *model, const gm_engine_opts *eo, bool streamed, const int32_t *ids,
                                const float *ref)
{
    gm_err err = {0};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    if (gm_engine_load(&e, model, eo, &err) || gm_fwd_create(&s, e, 64, GM_KV_F32, &err))
        fail_msg("load: %s", err.msg);
    gm_test_arena(NULL);
    assert_int_equal(gm_engine_stream(e) != NULL, streamed);
    const uint32_t V = gm_engine_n_vocab(e);
    float *got = malloc(48ull * V * sizeof(float));
    assert_non_null(got);
    for (uint32_t at = 0; at < 48; at += 5) {
        const uint32_t m = 48 - at < 5 ? 48 - at : 5;
        if (gm_fwd_eval(s, ids + at, m, got + (size_t)at * V, true, &err))
            fail_msg("eval at %u: %s", at, err.msg);
    }
    uint64_t rows = 0, bytes = 0;
    assert_true(gm_engine_table_stats(e, &rows, &bytes));
    print_message("table rows gathered %llu, bytes asked of the drive %llu\n", (unsigned long long)rows,
                  (unsigned long long)bytes);
    assert_int_equal(rows, 48 * 4);
    assert_memory_equal(got, ref, 48ull * V * sizeof(float));
    free(got);
    gm_fwd_free(s);
    gm_engine_free(e);
    return bytes;
}

/* A lookup table (qwen4exp's per_layer_token_embd, 4096 rows of 64 BF16) is read from the file
 * by row when the experts stream: every position's 4 rows through gathers (O_DIRECT where the
 * filesystem takes it), none of it from the mapping, and the logits are those of the in-memory
 * run bit for bit. */
static void test_lookup_table_from_file(void **state)
{
    (void)state;
    char model[4096];
    int32_t ids[48];
    float *ref = table_model(model, sizeof model, "table-qwen4exp", "32", ids);
    char arena[64];
    snprintf(arena, sizeof arena, "%.9f", 4 * 8 * SLOT_BYTES / GIB * 1.0001);
    gm_test_arena(arena);
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.buffered = true; /* the temporary directory may be tmpfs */
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = 5, .placement = GM_PLACE_EXPERTS,
                         .stream = &so};
    const uint64_t bytes = check_table_run(model, &eo, true, ids, ref);
    assert_true(bytes >= 48 * 4 * 128 && bytes <= 48 * 4 * 8192);
    free(ref);
    unlink(model);
}

/* A lookup table larger than the memory the plan leaves once the experts are in: on a machine
 * planned so (GMLX_AVAIL_GB at the first size where the plan keeps the experts in memory and
 * says "its tables are offloaded to disk"), the load maps in everything but the table, reads its
 * rows from the file, and gives the in-memory logits bit for bit. */
static void test_lookup_table_over_budget(void **state)
{
    (void)state;
    char model[4096];
    int32_t ids[48];
    float *ref = table_model(model, sizeof model, "budget-qwen4exp", "33", ids);
    gm_err err = {0};
    /* the machine: 8 GB of RAM with the first free memory, in 100 kB steps, whose plan leaves the
     * table on disk (its window is the table's 0.5 MB) */
    gm_gguf *g = NULL;
    gm_model_desc desc;
    if (gm_gguf_open(&g, model, &err) || gm_model_describe(g, &desc, &err))
        fail_msg("%s", err.msg);
    gm_tuning tune = *gm_test_tuning();
    double avail_gb = 0;
    for (double gb = 0.5; gb < 4.0 && !avail_gb; gb += 0.0001) {
        gm_sysinfo sys;
        gm_plan_opts po;
        gm_plan plan;
        tune.ram_gb = 8.0;
        tune.avail_gb = gb;
        assert_int_equal(gm_sysinfo_probe(&sys, 8.0, gb, &err), 0);
        gm_plan_opts_default(&po);
        gm_plan_opts_tune(&po, &tune);
        po.kv_ctx = 64;
        po.prefill_step = 5;
        gm_plan_compute(&desc, &sys, &po, &plan);
        if ((plan.verdict == GM_VERDICT_FITS || plan.verdict == GM_VERDICT_EXPERTS_IN_MEMORY) &&
            plan.experts_in_memory_now && plan.tables_from_file_now)
            avail_gb = gb;
    }
    gm_model_desc_free(&desc);
    gm_gguf_close(g);
    if (!avail_gb)
        fail_msg("no free memory between 0.5 and 4 GB leaves the table of %s on disk", model);
    print_message("planned with %.4f GB free: experts in memory, the table read from the file\n", avail_gb);
    tune.ram_gb = 8.0;
    tune.avail_gb = avail_gb;
    gm_engine_opts eo = {.tuning = &tune, .n_threads = 2, .max_chunk = 5, .kv_ctx = 64};
    (void)check_table_run(model, &eo, false, ids, ref);
    free(ref);
    unlink(model);
}

/* Kimi-K3's: KDA recurrent blocks between latent-attention ones, cross-layer residual attention
 * and latent routed experts */
static void test_lossless_kimi_k3(void **state)
{
    (void)state;
    check_lossless_sparse("kimi-k3");
}

/* A read error part way through a Qwen3-Next decode (after a Gated DeltaNet layer has moved
 * its state on) leaves the session refusing further calls until it is reset; after the reset
 * the same session gives the in-memory logits bit for bit. */
static void test_recurrent_reset_after_error(void **state)
{
    (void)state;
    const char *rel = "qwen3next/model-bf16.gguf";
    char model[4096];
    if (!cached_model(rel, model, sizeof model))
        return;
    uint32_t n;
    int32_t *ids = read_ids(gm_fixture_cached("qwen3next/prompt.ids"), &n);
    gm_err err = {0};
    float *ref = NULL;
    run_cfg mem = {.placement = GM_PLACE_CPU, .chunk = 1};
    assert_int_equal(run(model, ids, n, &mem, &ref, &err, NULL), 0);
    gm_test_arena("0.0025"); /* 2 slots a layer: reads on most tokens */
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.backend = GM_IO_PREAD;
    so.lookahead = false;
    gm_io_fault f = {.eio_at = 12};
    so.fault = &f;
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = 1, .placement = GM_PLACE_EXPERTS, .stream = &so};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    if (gm_engine_load(&e, model, &eo, &err) != 0 || gm_fwd_create(&s, e, n, GM_KV_F32, &err) != 0)
        fail_msg("load: %s", err.msg);
    gm_test_arena(NULL);
    const uint32_t V = gm_engine_n_vocab(e);
    float *got = malloc((size_t)n * V * sizeof *got);
    uint32_t at = 0;
    int rc = 0;
    for (; at < n && rc == 0; at++)
        rc = gm_fwd_eval(s, ids + at, 1, got + (size_t)at * V, true, &err);
    assert_int_equal(rc, GM_EIO); /* in an FFN block: after layer 0 (recurrent) had run */
    gm_err_clear(&err);
    assert_int_equal(gm_fwd_eval(s, ids, 1, got, true, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "reset the session"));
    gm_fwd_reset(s);
    for (at = 0; at < n; at++)
        if (gm_fwd_eval(s, ids + at, 1, got + (size_t)at * V, true, &err) != 0)
            fail_msg("eval after reset: %s", err.msg);
    assert_memory_equal(got, ref, (size_t)n * V * sizeof(float));
    free(got);
    free(ref);
    free(ids);
    gm_fwd_free(s);
    gm_engine_free(e);
}

/* The quantized bundled model streams losslessly too (expert slices of Q4_K/Q6_K blocks). */
static void test_lossless_quantized(void **state)
{
    (void)state;
    char model[4096];
    snprintf(model, sizeof model, "%s", gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"));
    uint32_t n;
    int32_t *ids = read_ids(gm_fixture("trained-qwen3moe/ref1.prompt.ids"), &n);
    gm_err err = {0};
    float *ref = NULL, *got = NULL;
    run_cfg mem = {.placement = GM_PLACE_CPU, .chunk = 8};
    assert_int_equal(run(model, ids, n, &mem, &ref, &err, NULL), 0);
    run_cfg cfg = {.placement = GM_PLACE_EXPERTS, .arena_gib = 0.004, .chunk = 1};
    gm_stream_stats st;
    assert_int_equal(run(model, ids, n, &cfg, &got, &err, &st), 0);
    assert_memory_equal(got, ref, (size_t)n * 1014 * sizeof(float));
    free(got);
    /* the lookahead predicted every decode call of the layers after the first, read ahead, and
     * some of what it read was routed; its bookkeeping adds up */
    print_message("lookahead: %llu token-layers, recall @8 %llu/%llu, prev-token %llu/%llu; %llu issued, "
                  "%llu adopted, %llu unused, %llu failed\n", (unsigned long long)st.la_predictions,
                  (unsigned long long)st.la_recall_hits[4], (unsigned long long)st.la_actual,
                  (unsigned long long)st.la_prev_hits, (unsigned long long)st.la_prev_actual,
                  (unsigned long long)st.la_issued, (unsigned long long)st.la_adopted,
                  (unsigned long long)st.la_unused, (unsigned long long)st.la_failed);
    assert_int_equal(st.la_predictions, (uint64_t)(st.covered_layers - 1) * st.tokens);
    assert_true(st.la_issued > 0 && st.la_adopted > 0);
    assert_true(st.la_adopted == st.la_done + st.la_joined);
    assert_true(st.la_adopted + st.la_unused + st.la_failed <= st.la_issued);
    assert_true(st.la_recall_hits[0] <= st.la_recall_hits[4] && st.la_recall_hits[4] <= st.la_actual);
    cfg.chunk = 5;
    assert_int_equal(run(model, ids, n, &cfg, &got, &err, NULL), 0);
    assert_memory_equal(got, ref, (size_t)n * 1014 * sizeof(float));
    free(got);
    free(ref);
    free(ids);
}

static void faults(gm_io_backend backend)
{
    char model[4096];
    snprintf(model, sizeof model, "%s", gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"));
    uint32_t n;
    int32_t *ids = read_ids(gm_fixture("trained-qwen3moe/ref1.prompt.ids"), &n);
    gm_err err = {0};
    float *ref = NULL, *got = NULL;
    run_cfg mem = {.placement = GM_PLACE_CPU, .chunk = 1};
    assert_int_equal(run(model, ids, n, &mem, &ref, &err, NULL), 0);
    const size_t bytes = (size_t)n * 1014 * sizeof(float);

    /* EIO at the 10th read: a clear error naming layer, expert and offset */
    gm_io_fault f = {.eio_at = 10};
    run_cfg cfg = {.placement = GM_PLACE_EXPERTS, .arena_gib = 0.004, .chunk = 1, .backend = backend, .fault = &f,
                   .no_lookahead = true};
    gm_err_clear(&err);
    int rc = run(model, ids, n, &cfg, &got, &err, NULL);
    if (rc == GM_EUNSUPPORTED && backend == GM_IO_URING) {
        gm_test_unavailable("io_uring", err.msg);
        free(ref);
        free(ids);
        return;
    }
    assert_int_equal(rc, GM_EIO);
    assert_null(got);
    assert_non_null(strstr(err.msg, "model-q4_k_m.gguf: reading layer "));
    assert_non_null(strstr(err.msg, " expert "));
    assert_non_null(strstr(err.msg, "at offset "));
    assert_non_null(strstr(err.msg, "Input/output error"));

    /* a short kernel answer is completed by the backend: exact output */
    gm_io_fault sh = {.short_at = 5};
    cfg.fault = &sh;
    gm_err_clear(&err);
    assert_int_equal(run(model, ids, n, &cfg, &got, &err, NULL), 0);
    assert_memory_equal(got, ref, bytes);
    free(got);

    /* a read stalled past the timeout: abandoned, the expert comes from the page cache, output
     * still exact, and counted. Stalls and timeouts here run on the read queue's virtual clock,
     * which moves only while every read in flight is a stalled one: a loaded machine cannot make
     * a normal read look stalled, nor a stall short */
    gm_io_fault st = {.stall_at = 7, .stall_ms = 1500, .virtual_clock = true};
    cfg.fault = &st;
    cfg.timeout_ms = 300;
    gm_stream_stats stats;
    gm_err_clear(&err);
    assert_int_equal(run(model, ids, n, &cfg, &got, &err, &stats), 0);
    assert_memory_equal(got, ref, bytes);
    assert_int_equal(stats.wedged, 1);
    free(got);
    /* a read stuck in the kernel (no cancel reaches it): the same outcome */
    gm_io_fault wd = {.wedge_at = 4, .stall_ms = 1000, .virtual_clock = true};
    cfg.fault = &wd;
    gm_err_clear(&err);
    assert_int_equal(run(model, ids, n, &cfg, &got, &err, &stats), 0);
    assert_memory_equal(got, ref, bytes);
    assert_int_equal(stats.wedged, 1);
    free(got);

    /* with lookahead, a failed read is either a demand read (the error above) or a prestage,
     * which is discarded (the expert is read again when routed): exact output either way */
    cfg.no_lookahead = false;
    cfg.timeout_ms = 0;
    uint32_t discarded = 0;
    for (uint64_t at = 1; at <= 48; at++) {
        gm_io_fault fl = {.eio_at = at};
        cfg.fault = &fl;
        gm_err_clear(&err);
        rc = run(model, ids, n, &cfg, &got, &err, &stats);
        if (rc) {
            /* only a demand read's failure is an error: a failed prestage is read again */
            assert_int_equal(rc, GM_EIO);
            assert_non_null(strstr(err.msg, " expert "));
            assert_int_equal(stats.la_failed, 0);
            continue;
        }
        assert_memory_equal(got, ref, bytes);
        discarded += stats.la_failed > 0;
        free(got);
    }
    assert_true(discarded > 0);
    /* the same with every lookahead read slow: a demand read's failure cuts its call short while
     * the prestages it joined are still loading; they are given up with the call (cancelled),
     * not counted as failed reads */
    uint32_t cut_short = 0;
    for (uint64_t at = 26; at <= 31; at++) { /* around reads 28-30, which end such a call */
        gm_io_fault fl = {.eio_at = at, .stall_speculative = true, .stall_ms = 10, .virtual_clock = true};
        cfg.fault = &fl;
        gm_err_clear(&err);
        rc = run(model, ids, n, &cfg, &got, &err, &stats);
        if (rc) {
            assert_int_equal(rc, GM_EIO);
            assert_int_equal(stats.la_failed, 0);
            cut_short += stats.la_cancelled > 0;
            continue;
        }
        assert_memory_equal(got, ref, bytes);
        free(got);
    }
    print_message("slow lookahead: %u failed calls ended with prestages given up\n", cut_short);
    assert_true(cut_short > 0);

    /* the prefill ring (chunks of 8): a failed whole-layer read names the layer and offset; a
     * stalled one gives the ring up and the layer is read through the page cache, exactly */
    cfg = (run_cfg){.placement = GM_PLACE_EXPERTS, .arena_gib = 0.004, .chunk = 8, .backend = backend,
                    .no_lookahead = true};
    gm_io_fault re = {.eio_at = 1};
    gm_io_fault rst = {.stall_at = 3, .stall_ms = 1500, .virtual_clock = true};
    /* whole layers, then only the routed experts (a chunk of 8 never routes to every one) */
    for (int sparse = 0; sparse < 2; sparse++) {
        cfg.ring_cover_pct = sparse ? 100 : 0;
        cfg.fault = &re;
        cfg.timeout_ms = 0;
        gm_err_clear(&err);
        assert_int_equal(run(model, ids, n, &cfg, &got, &err, &stats), GM_EIO);
        assert_non_null(strstr(err.msg, "expert stacks at offset "));
        assert_non_null(strstr(err.msg, "Input/output error"));
        cfg.fault = &rst;
        cfg.timeout_ms = 300;
        gm_err_clear(&err);
        assert_int_equal(run(model, ids, n, &cfg, &got, &err, &stats), 0);
        assert_memory_equal(got, ref, bytes);
        free(got);
    }
    cfg.ring_cover_pct = 0;
    /* a slow disk that keeps going is not a stall: every read takes 150 ms, one at a time, so a
     * layer's three stacks take 450 ms against a 400 ms timeout (each read inside it), and the
     * ring serves all 6 layers of every chunk of 2 tokens or more */
    gm_io_fault slow = {.stall_all = true, .stall_ms = 150, .virtual_clock = true};
    cfg.fault = &slow;
    cfg.timeout_ms = 400;
    cfg.queue_depth = 1;
    gm_err_clear(&err);
    assert_int_equal(run(model, ids, n, &cfg, &got, &err, &stats), 0);
    assert_memory_equal(got, ref, bytes);
    uint64_t ring_chunks = 0;
    for (uint32_t at = 0; at < n; at += cfg.chunk)
        ring_chunks += n - at >= 2;
    print_message("slow disk: the ring served %llu layers of %llu chunks\n",
                  (unsigned long long)stats.ring_layers, (unsigned long long)ring_chunks);
    assert_int_equal(stats.ring_layers, ring_chunks * 6);
    free(got);
    free(ref);
    free(ids);
}

/* Writes a generated qwen3moe model (vocabulary 300) of the given shape options (NULL-ended)
 * and seed to name.gguf in the test directory; its path in model. */
static void gen_qwen3moe(char *model, size_t len, const char *name, const char *seed,
                         const char *const *shape)
{
    gm_test_gen_arch(model, len, name, "qwen3moe", seed, shape);
}

/* The token ids of the generated-model tests: spread over the 300 ids. */
static int32_t test_id(uint32_t i)
{
    return (int32_t)((i * 7919u + 13u) % 300u);
}

/* A prefill chunk through the arena with more misses than the io has request slots (128
 * experts, 8 a token, an arena for all of them: a group stages up to 64 misses of 3 reads each,
 * the io holds 128 requests) waits for completions instead of failing; exact against memory. */
static void test_prefill_many_misses(void **state)
{
    (void)state;
    char model[512];
    const char *shape[] = {"--layers", "2", "--experts", "128", "--experts-used", "8", "--hidden",
                           "256", "--ffn", "256", "--expert-ffn", "256", "--heads", "4",
                           "--kv-heads", "2", "--head-dim", "64", NULL};
    gen_qwen3moe(model, sizeof model, "many-misses", "5", shape);
    gm_err err = {0};
    int32_t ids[24];
    for (uint32_t i = 0; i < 24; i++)
        ids[i] = test_id(i);
    float *ref = NULL, *got = NULL;
    run_cfg mem = {.placement = GM_PLACE_CPU, .chunk = 24};
    assert_int_equal(run(model, ids, 24, &mem, &ref, &err, NULL), 0);
    for (int b = 0; b < 2; b++) {
        run_cfg cfg = {.placement = GM_PLACE_EXPERTS, .arena_gib = 1.0, .chunk = 24, .no_ring = true,
                       .no_lookahead = true, .buffered = true, .backend = b ? GM_IO_PREAD : GM_IO_URING};
        gm_stream_stats st;
        gm_err_clear(&err);
        int rc = run(model, ids, 24, &cfg, &got, &err, &st);
        if (rc == GM_EUNSUPPORTED && !b)
            continue; /* no io_uring here */
        if (rc)
            fail_msg("prefill through the arena: %s", err.msg);
        assert_true(st.min_slots == 128 && st.prefill_lookups > 0);
        assert_memory_equal(got, ref, (size_t)24 * 300 * sizeof(float));
        free(got);
    }
    free(ref);
    unlink(model);
}

/* The ring reads whole layers only for chunks that use enough of them: on a model of 64 experts,
 * top-2, chunks of 4 tokens (at most 8 experts, an eighth) read just the routed experts into the
 * ring (the second layer's read ahead on a prediction, the experts it missed read after the
 * routing), or with that off go through the arena; a chunk of 64 tokens (most of them) reads
 * whole layers; exact every way. */
static void test_ring_coverage(void **state)
{
    (void)state;
    char model[512];
    const char *shape[] = {"--layers", "2", "--experts", "64", "--experts-used", "2", "--hidden",
                           "128", "--ffn", "128", "--expert-ffn", "128", "--heads", "2",
                           "--kv-heads", "1", "--head-dim", "64", NULL};
    gen_qwen3moe(model, sizeof model, "ring-cover", "9", shape);
    gm_err err = {0};
    int32_t ids[64];
    for (uint32_t i = 0; i < 64; i++)
        ids[i] = test_id(i);
    float *ref = NULL, *got = NULL;
    run_cfg mem = {.placement = GM_PLACE_CPU, .chunk = 64};
    assert_int_equal(run(model, ids, 64, &mem, &ref, &err, NULL), 0);
    const uint32_t chunks[] = {4, 4, 64};
    uint64_t whole_bytes = 0;
    for (int c = 2; c >= 0; c--) {
        run_cfg cfg = {.placement = GM_PLACE_EXPERTS, .arena_gib = 1.0, .chunk = chunks[c], .no_lookahead = true,
                       .buffered = true, .backend = GM_IO_PREAD, .ring_cover_pct = 50, .no_sparse = c == 1};
        gm_stream_stats st;
        gm_err_clear(&err);
        if (run(model, ids, 64, &cfg, &got, &err, &st))
            fail_msg("chunks of %u: %s", chunks[c], err.msg);
        print_message("chunks of %u%s: %llu layers from the ring (%llu sparse, %llu predicted, %llu read more), "
                      "%.3f MB read into it, %llu expert lookups through the arena\n", chunks[c],
                      c == 1 ? ", no sparse reads" : "", (unsigned long long)st.ring_layers,
                      (unsigned long long)st.ring_sparse, (unsigned long long)st.ring_predicted,
                      (unsigned long long)st.ring_missed, (double)st.ring_read_bytes / 1e6,
                      (unsigned long long)st.prefill_lookups);
        if (c == 2) {
            assert_true(st.ring_layers == 2 && st.ring_sparse == 0);
            whole_bytes = st.ring_read_bytes; /* the two layers' whole stacks */
        } else if (c == 1) {
            assert_true(st.ring_layers == 0 && st.prefill_lookups > 0);
        } else {
            /* 16 chunks of both layers, each reading an eighth of its experts at most */
            assert_true(st.ring_layers == 32 && st.ring_sparse == 32 && st.prefill_lookups == 0);
            assert_true(st.ring_predicted > 0 && st.ring_missed > 0);
            assert_true(st.ring_read_bytes < whole_bytes * 16 / 4);
        }
        assert_memory_equal(got, ref, (size_t)64 * 300 * sizeof(float));
        free(got);
    }
    free(ref);
    unlink(model);
}

/* Logits of ids: the first n_pre as one prefill chunk, the rest one decode token at a time; the
 * experts in memory (so == NULL) or streamed with so. */
static float *run_split(const char *model, const int32_t *ids, uint32_t n_pre, uint32_t n,
                        const gm_stream_opts *so, gm_stream_stats *st)
{
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = n_pre,
                         .placement = so ? GM_PLACE_EXPERTS : GM_PLACE_CPU, .stream = so};
    gm_err err = {0};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    if (so)
        gm_test_arena("1");
    if (gm_engine_load(&e, model, &eo, &err) || gm_fwd_create(&s, e, n + 8, GM_KV_F32, &err))
        fail_msg("load: %s", err.msg);
    gm_test_arena(NULL);
    uint32_t V = gm_engine_n_vocab(e);
    float *logits = malloc((size_t)n * V * sizeof *logits);
    assert_non_null(logits);
    for (uint32_t at = 0; at < n; at += at < n_pre ? n_pre : 1) {
        uint32_t m = at < n_pre ? n_pre : 1;
        if (gm_fwd_eval(s, ids + at, m, logits + (size_t)at * V, true, &err))
            fail_msg("eval at %u: %s", at, err.msg);
    }
    if (st)
        gm_stream_get_stats(gm_engine_stream(e), st);
    gm_fwd_free(s);
    gm_engine_free(e);
    return logits;
}

/* A prefill chunk served from the ring seeds the arena with the experts it routed: decode then
 * finds them resident (more hits than without seeding, where the arena starts empty at the first
 * decode token) and the logits stay those of the in-memory model, bit for bit. Seeding stops at
 * the arena's size less the ring's two layers (the ring's memory is the arena's while it is
 * mapped). With the arena's pages mapped ahead by the warm thread (the default), seeding fills
 * only slots already mapped: how many depends on that thread's progress, the logits do not. */
static void test_ring_seed(void **state)
{
    (void)state;
    char model[512];
    const char *shape[] = {"--layers", "6", "--experts", "16", "--experts-used", "2", "--hidden",
                           "128", "--ffn", "128", "--expert-ffn", "128", "--heads", "2",
                           "--kv-heads", "1", "--head-dim", "64", NULL};
    gen_qwen3moe(model, sizeof model, "ring-seed", "13", shape);
    enum { N_PRE = 32, N = 40 };
    int32_t ids[N];
    for (uint32_t i = 0; i < N; i++)
        ids[i] = test_id(i);
    float *ref = run_split(model, ids, N_PRE, N, NULL, NULL);
    gm_stream_stats st[3];
    for (int seed = 0; seed < 3; seed++) {
        gm_stream_opts so;
        gm_stream_opts_default(&so);
        so.buffered = true;
        so.backend = GM_IO_PREAD;
        so.lookahead = false;
        so.ring_min_tokens = 2;
        so.ring_min_cover_pct = 0;
        so.ring_seed = seed > 0;
        so.arena_warm = seed == 2;
        float *got = run_split(model, ids, N_PRE, N, &so, &st[seed]);
        print_message("seeding %s: %llu layers from the ring, %llu experts seeded, decode %llu hits of %llu\n",
                      seed == 2 ? "on, pages mapped ahead" : seed ? "on" : "off", (unsigned long long)st[seed].ring_layers,
                      (unsigned long long)st[seed].ring_seeded, (unsigned long long)st[seed].hits,
                      (unsigned long long)st[seed].lookups);
        assert_int_equal(st[seed].ring_layers, 6);
        /* seeded slots within the arena less the ring (all slots are the same size here) */
        const uint64_t slot = st[seed].arena_sized_bytes / (6 * 16);
        assert_true(st[seed].ring_seeded * slot <= st[seed].arena_sized_bytes - st[seed].ring_bytes);
        assert_memory_equal(got, ref, (size_t)N * 300 * sizeof(float));
        free(got);
    }
    /* seeded slots were mapped ahead (the count of mapped bytes only grows) */
    const uint64_t slot2 = st[2].arena_sized_bytes / (6 * 16);
    assert_true(st[2].ring_seeded * slot2 <= st[2].warm_bytes);
    assert_int_equal(st[0].ring_seeded, 0);
    assert_true(st[1].ring_seeded > 0);
    assert_true(st[1].hits > st[0].hits);
    free(ref);
    unlink(model);
}

/* The default prefill chunk: when the experts stream, as wide as the plan's room for a chunk
 * holds, up to 8192 tokens (a long prompt then reads the model once, not once per 512 tokens);
 * 512 in memory; and a session's chunk is at most its
 * context (its scratch is sized for it): a 40-token session of the streamed engine takes all 40
 * tokens in one call, and the logits equal those of chunks of 8 in memory. */
/* --stream-fast-disk's drive test reads the first expert stack in 4 MiB O_DIRECT reads and
 * says how fast the drive gave them; a stack under one read is not measured (-1). The recipe
 * reads every predicted rank without the rank gate. */
static void test_drive_test(void **state)
{
    (void)state;
    char big[512], small[512];
    const char *bshape[] = {"--layers", "2", "--experts", "16", "--experts-used", "2", "--hidden", "1024",
                            "--ffn", "256", "--expert-ffn", "1024", "--heads", "4", "--kv-heads", "2",
                            "--head-dim", "64", NULL};
    const char *sshape[] = {"--layers", "2", "--experts", "8", "--experts-used", "2", "--hidden", "256",
                            "--ffn", "256", "--expert-ffn", "128", "--heads", "4", "--kv-heads", "2",
                            "--head-dim", "64", NULL};
    gen_qwen3moe(big, sizeof big, "drive-big", "19", bshape);
    gen_qwen3moe(small, sizeof small, "drive-small", "19", sshape);
    gm_err err = {0};
    gm_gguf *g = NULL;
    gm_model_desc d;
    double gb_s = 0;
    assert_int_equal(gm_gguf_open(&g, big, &err), 0);
    assert_int_equal(gm_model_describe(g, &d, &err), 0);
    assert_int_equal(gm_stream_drive_test(g, &d, &gb_s, &err), 0);
    print_message("drive test: %.2f GB/s\n", gb_s);
    assert_true(gb_s > 0 && isfinite(gb_s));
    gm_model_desc_free(&d);
    gm_gguf_close(g);
    assert_int_equal(gm_gguf_open(&g, small, &err), 0);
    assert_int_equal(gm_model_describe(g, &d, &err), 0);
    assert_int_equal(gm_stream_drive_test(g, &d, &gb_s, &err), 0);
    assert_true(gb_s == -1);
    gm_model_desc_free(&d);
    gm_gguf_close(g);

    gm_stream_opts o;
    gm_stream_opts_default(&o);
    gm_stream_fast_recipe(&o);
    assert_int_equal(o.lookahead_k, GM_STREAM_PREDICT_MAX);
    assert_true(o.lookahead_min_p == 0.0f && o.lookahead_hard_p == 0.5f);
}

static void test_default_chunk(void **state)
{
    (void)state;
    char model[512];
    const char *shape[] = {"--layers", "2", "--experts", "16", "--experts-used", "2", "--hidden",
                           "64", "--ffn", "64", "--expert-ffn", "64", "--heads", "1", "--kv-heads",
                           "1", "--head-dim", "64", NULL};
    gen_qwen3moe(model, sizeof model, "default-chunk", "17", shape);
    enum { N = 40 };
    int32_t ids[N];
    for (uint32_t i = 0; i < N; i++)
        ids[i] = test_id(i);
    float *ref = run_split(model, ids, 8, N, NULL, NULL);
    float *got = NULL;
    for (int streamed = 0; streamed < 2; streamed++) {
        gm_stream_opts so;
        gm_stream_opts_default(&so);
        so.buffered = true;
        gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .placement = streamed ? GM_PLACE_EXPERTS : GM_PLACE_CPU,
                             .stream = &so};
        gm_err err = {0};
        gm_engine *e = NULL;
        gm_fwd *s = NULL, *big = NULL;
        if (gm_engine_load(&e, model, &eo, &err) || gm_fwd_create(&s, e, N, GM_KV_F32, &err) ||
            gm_fwd_create(&big, e, 20000, GM_KV_F32, &err))
            fail_msg("load: %s", err.msg);
        const uint32_t chunk = gm_engine_max_chunk(e);
        print_message("%s: chunks of %u tokens\n", streamed ? "streamed" : "in memory", chunk);
        if (streamed) /* as wide as the plan's room for it holds, up to 8192 */
            assert_true(chunk > 4096 && chunk <= 8192);
        else
            assert_int_equal(chunk, 512);
        assert_int_equal(gm_fwd_max_chunk(s), N);
        assert_int_equal(gm_fwd_max_chunk(big), chunk);
        got = malloc((size_t)N * 300 * sizeof *got);
        assert_non_null(got);
        if (gm_fwd_eval(s, ids, N, got, true, &err))
            fail_msg("one call of %d tokens: %s", N, err.msg);
        assert_memory_equal(got, ref, (size_t)N * 300 * sizeof(float));
        static int32_t many[8193]; /* token 0, one past the chunk */
        assert_int_equal(gm_fwd_eval(big, many, chunk + 1, NULL, false, &err), GM_EINVAL);
        free(got);
        gm_fwd_free(big);
        gm_fwd_free(s);
        gm_engine_free(e);
    }
    free(ref);
    unlink(model);
}

/* Resident bytes of this process's locked mappings (the "Locked:" line of /proc/self/smaps_rollup),
 * 0 when unknown. Only the locked pages are counted: the process's whole resident size also moves
 * with the allocator (under ASan by megabytes of shadow and quarantine), which says nothing of the
 * arena. */
static uint64_t locked_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "Locked: %llu kB", &kb) == 1;
    fclose(f);
    return found ? (uint64_t)kb * 1024u : 0;
}

/* The arena is locked at the first decode token without mapping it in: a page is mapped (and
 * locked) when a read first fills it. Locking it whole mapped every slot at once, which on an
 * 18 GB arena stalled the first decode token for seconds and zeroed slots no read ever filled.
 * Four decode tokens of a model of 64 experts, top-2, fill at most 16 slots of 128: the process
 * grows by far less than the arena. 4 KiB pages, so that a slot maps only its own pages; the
 * arena (under 5 MB) fits in a default RLIMIT_MEMLOCK of 8 MiB. */
static void test_arena_locked_on_fault(void **state)
{
    (void)state;
    char model[512];
    const char *shape[] = {"--layers", "2", "--experts", "64", "--experts-used", "2", "--hidden",
                           "64", "--ffn", "64", "--expert-ffn", "64", "--heads", "1", "--kv-heads",
                           "1", "--head-dim", "64", NULL};
    gen_qwen3moe(model, sizeof model, "lock-on-fault", "11", shape);
    gm_test_arena("1");
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.buffered = true;
    so.lookahead = false;
    so.arena_thp = false;
    so.arena_warm = false; /* its thread maps pages ahead, racing the count */
    so.lock_arena = true;
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = 8, .placement = GM_PLACE_EXPERTS, .stream = &so};
    gm_err err = {0};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    if (gm_engine_load(&e, model, &eo, &err) || gm_fwd_create(&s, e, 16, GM_KV_F32, &err))
        fail_msg("load: %s", err.msg);
    gm_test_arena(NULL);
    float logits[300];
    const uint64_t before = locked_bytes();
    for (int32_t t = 0; t < 4; t++) {
        int32_t id = (t * 7919 + 13) % 300;
        if (gm_fwd_eval(s, &id, 1, logits, true, &err))
            fail_msg("decode token %d: %s", t, err.msg);
    }
    const uint64_t after = locked_bytes();
    gm_stream_stats st;
    gm_stream_get_stats(gm_engine_stream(e), &st);
    gm_fwd_free(s);
    gm_engine_free(e);
    unlink(model);
    assert_int_equal(st.min_slots, 64);
    assert_true(st.tokens == 4 && st.misses > 0);
    if (!st.arena_locked || after == 0) {
        print_message("the arena could not be locked here (RLIMIT_MEMLOCK) or /proc/self/smaps_rollup "
                      "is missing: nothing to check\n");
        skip();
    }
    const uint64_t grew = after > before ? after - before : 0;
    print_message("arena %llu bytes; locked memory grew by %llu bytes over 4 decode tokens (%llu misses)\n",
                  (unsigned long long)st.arena_bytes, (unsigned long long)grew,
                  (unsigned long long)st.misses);
    assert_true(grew < st.arena_bytes / 2);
}

static void test_faults_pread(void **state)
{
    (void)state;
    faults(GM_IO_PREAD);
}

static void test_faults_uring(void **state)
{
    (void)state;
    faults(GM_IO_URING);
}

/* The file loses its expert data after load: the streamed decode reports a short read of a named
 * expert instead of crashing or computing on garbage. */
static void test_truncated_after_load(void **state)
{
    (void)state;
    char copy[512];
    snprintf(copy, sizeof copy, "%s/trunc-model.gguf", gm_test_tmpdir());
    size_t len;
    void *bytes = gm_read_file(gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"), &len);
    assert_non_null(bytes);
    assert_int_equal(gm_write_file(copy, bytes, len), 0);
    free(bytes);
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.buffered = true; /* the copy may sit on tmpfs, which has no O_DIRECT */
    gm_test_arena("0.004");
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 1, .max_chunk = 1, .placement = GM_PLACE_EXPERTS, .stream = &so};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    gm_err err = {0};
    assert_int_equal(gm_engine_load(&e, copy, &eo, &err), 0);
    gm_test_arena(NULL);
    assert_int_equal(gm_fwd_create(&s, e, 64, GM_KV_F32, &err), 0);
    /* keep the first 4 MB (header and early tensors); the expert stacks of later layers go */
    assert_int_equal(truncate(copy, 4 << 20), 0);
    int rc = 0;
    int32_t tok = 42;
    for (int i = 0; i < 32 && rc == 0; i++)
        rc = gm_fwd_eval(s, &tok, 1, NULL, false, &err);
    assert_int_equal(rc, GM_EIO);
    assert_non_null(strstr(err.msg, "trunc-model.gguf: reading layer "));
    assert_true(strstr(err.msg, "came back short") || strstr(err.msg, "failed"));
    gm_fwd_free(s);
    gm_engine_free(e);
    unlink(copy);
}

/* Memory pressure mid-decode (stand-in PSI and meminfo files, polled at every stage call): the
 * arena shrinks to a quarter of its slots keeping its most popular experts, regrows once the
 * pressure has been clear for 256 polls, and the logits stay those of the in-memory model. */
static void test_pressure_shrink_regrow(void **state)
{
    (void)state;
    char model[4096], psi[512], mem[512];
    snprintf(model, sizeof model, "%s", gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"));
    snprintf(psi, sizeof psi, "%s/stream-psi", gm_test_tmpdir());
    snprintf(mem, sizeof mem, "%s/stream-meminfo", gm_test_tmpdir());
    const char *calm = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
    const char *dire = "some avg10=60.00 avg60=20.00 avg300=5.00 total=9\nfull avg10=30.00 avg60=9.00 avg300=2.00 total=5\n";
    const char *plenty = "MemTotal: 25165824 kB\nMemAvailable: 20971520 kB\n";
    assert_int_equal(gm_write_file(psi, calm, strlen(calm)), 0);
    assert_int_equal(gm_write_file(mem, plenty, strlen(plenty)), 0);
    uint32_t n_prompt;
    int32_t *prompt = read_ids(gm_fixture("trained-qwen3moe/ref1.prompt.ids"), &n_prompt);
    enum { N = 90 };
    int32_t ids[N];
    for (uint32_t i = 0; i < N; i++)
        ids[i] = prompt[i % n_prompt];
    free(prompt);
    gm_err err = {0};
    float *ref = NULL;
    run_cfg mem_cfg = {.placement = GM_PLACE_CPU, .chunk = 8};
    assert_int_equal(run(model, ids, N, &mem_cfg, &ref, &err, NULL), 0);

    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.pressure_poll_every = 1;
    so.psi_path = psi;
    so.meminfo_path = mem;
    gm_test_arena("0.08"); /* about every expert: 15-16 slots per layer */
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = 1, .placement = GM_PLACE_EXPERTS, .stream = &so};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    assert_int_equal(gm_engine_load(&e, model, &eo, &err), 0);
    gm_test_arena(NULL);
    assert_int_equal(gm_fwd_create(&s, e, N + 1, GM_KV_F32, &err), 0);
    const uint32_t V = gm_engine_n_vocab(e);
    float *got = malloc((size_t)N * V * sizeof *got);
    gm_stream_stats st;
    uint64_t sized = 0, shrunk = 0, orig = 0, quarter = 0;
    for (uint32_t t = 0; t < N; t++) {
        if (t == 10)
            assert_int_equal(gm_write_file(psi, dire, strlen(dire)), 0);
        if (t == 30) {
            gm_stream_get_stats(gm_engine_stream(e), &st);
            sized = st.arena_sized_bytes;
            shrunk = st.arena_bytes;
            assert_int_equal(st.pressure_steps, 3);
            assert_true(st.max_slots >= 15); /* every expert, or all but one (the plan caps the
                                                 arena at the experts' bytes; slots add slack) */
            /* a quarter of the slots, but never fewer than a token's 4 experts */
            orig = st.max_slots;
            quarter = orig / 4 > 4 ? orig / 4 : 4;
            for (uint32_t l = 0; l < 6; l++)
                assert_int_equal(gm_stream_layer_slots(gm_engine_stream(e), l), quarter);
            assert_int_equal(gm_write_file(psi, calm, strlen(calm)), 0);
        }
        assert_int_equal(gm_fwd_eval(s, &ids[t], 1, got + (size_t)t * V, true, &err), 0);
    }
    gm_stream_get_stats(gm_engine_stream(e), &st);
    /* about 4 of 15-16 slots per layer (layers differ in slot bytes: mixed quant types) */
    print_message("arena %llu bytes sized, %llu at 3 steps, %llu at the end (%u of %u slots)\n",
                  (unsigned long long)sized, (unsigned long long)shrunk, (unsigned long long)st.arena_bytes,
                  (unsigned)quarter, (unsigned)orig);
    assert_true(shrunk * 3 < sized);
    assert_true(st.pressure_shrinks == 2 && st.pressure_regrows >= 1);
    assert_true(st.pressure_steps < 3 && st.arena_bytes > shrunk);
    assert_memory_equal(got, ref, (size_t)N * V * sizeof(float));
    free(got);
    free(ref);
    gm_fwd_free(s);
    gm_engine_free(e);
    unlink(psi);
    unlink(mem);
}

/* Runs the script "P22 D10 P22 D10" (prefill chunks of 22 tokens, single decode tokens) over
 * ids, all logits into out; with so, through the arena and the ring. */
static void script(const char *model, const int32_t *ids, const gm_stream_opts *so, const char *mem_low_path,
                   const char *low, float *out, gm_stream_stats *mid, gm_stream_stats *end)
{
    gm_engine_opts eo = {.tuning = gm_test_tuning(), .n_threads = 2, .max_chunk = 22, .placement = so ? GM_PLACE_EXPERTS : GM_PLACE_CPU,
                         .stream = so};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    gm_err err = {0};
    gm_test_arena("0.08");
    assert_int_equal(gm_engine_load(&e, model, &eo, &err), 0);
    gm_test_arena(NULL);
    assert_int_equal(gm_fwd_create(&s, e, 64, GM_KV_F32, &err), 0);
    const uint32_t V = gm_engine_n_vocab(e);
    uint32_t at = 0;
    for (int phase = 0; phase < 4; phase++) {
        if (phase == 2 && so)
            assert_int_equal(gm_write_file(mem_low_path, low, strlen(low)), 0); /* memory gets short */
        uint32_t n = phase % 2 == 0 ? 22 : 10;
        if (phase % 2 == 0) {
            assert_int_equal(gm_fwd_eval(s, ids + at, n, out + (size_t)at * V, true, &err), 0);
        } else {
            for (uint32_t i = 0; i < n; i++)
                assert_int_equal(gm_fwd_eval(s, ids + at + i, 1, out + (size_t)(at + i) * V, true, &err), 0);
        }
        at += n;
        if (phase == 2 && so)
            gm_stream_get_stats(gm_engine_stream(e), mid);
    }
    if (so)
        gm_stream_get_stats(gm_engine_stream(e), end);
    gm_fwd_free(s);
    gm_engine_free(e);
}

/* The ring after decode. With the arena token split off, a second prefill finds too little
 * memory free, so the arena lends the ring its memory (shrinking every layer) and regrows at the
 * next decode token. With it on (the default), that 22-token prefill after decode goes through
 * the decode arena instead: no ring, no lend, the arena never shrinks. The logits stay those of
 * the in-memory model throughout, both ways. */
static void ring_after_decode(bool split)
{
    gm_test_tuning()->arena_token_split = split ? -1 : 0;
    char model[4096], mem[512];
    snprintf(model, sizeof model, "%s", gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"));
    snprintf(mem, sizeof mem, "%s/lend-meminfo", gm_test_tmpdir());
    const char *plenty = "MemTotal: 25165824 kB\nMemAvailable: 20971520 kB\n";
    const char *low = "MemTotal: 25165824 kB\nMemAvailable: 1048576 kB\n"; /* 1 GiB: the floor alone */
    assert_int_equal(gm_write_file(mem, plenty, strlen(plenty)), 0);
    uint32_t n_prompt;
    int32_t *prompt = read_ids(gm_fixture("trained-qwen3moe/ref1.prompt.ids"), &n_prompt);
    int32_t ids[64];
    for (uint32_t i = 0; i < 64; i++)
        ids[i] = prompt[(i * 7) % n_prompt];
    free(prompt);
    const size_t V = 1014, bytes = 64 * V * sizeof(float);
    float *ref = malloc(bytes), *got = malloc(bytes);
    script(model, ids, NULL, NULL, NULL, ref, NULL, NULL);
    gm_stream_opts so;
    gm_stream_opts_default(&so);
    so.ring_min_tokens = 16;
    so.meminfo_path = mem;
    so.psi_path = "/nonexistent/psi";
    so.pressure = false; /* the low figure must not also shrink the arena through the pressure poll */
    gm_stream_stats mid, end;
    script(model, ids, &so, mem, low, got, &mid, &end);
    print_message("ring %llu layers, %llu lends; arena sized %llu, %llu while lent, %llu at the end\n",
                  (unsigned long long)end.ring_layers, (unsigned long long)end.ring_lends,
                  (unsigned long long)end.arena_sized_bytes, (unsigned long long)mid.arena_bytes,
                  (unsigned long long)end.arena_bytes);
    if (split) {
        print_message("arena token split: %llu calls, %llu tokens\n", (unsigned long long)end.split_calls,
                      (unsigned long long)end.split_tokens);
        assert_int_equal(end.ring_layers, 6); /* the first prefill only */
        assert_int_equal(end.ring_lends, 0);
        assert_int_equal(end.split_calls, 1);
        assert_int_equal(end.split_tokens, 22);
        assert_int_equal(mid.arena_bytes, end.arena_sized_bytes);
        assert_int_equal(end.arena_bytes, end.arena_sized_bytes);
        assert_true(mid.prefill_lookups > 0); /* the arena served the second prefill */
    } else {
        assert_int_equal(end.split_calls, 0);
        assert_int_equal(end.ring_layers, 2 * 6); /* both prefills, 6 MoE layers each */
        assert_int_equal(end.ring_lends, 1);
        assert_true(mid.arena_bytes < end.arena_sized_bytes);
        assert_true(end.arena_bytes > mid.arena_bytes);
    }
    assert_memory_equal(got, ref, bytes);
    free(ref);
    free(got);
    unlink(mem);
    gm_test_tuning()->arena_token_split = -1;
}

static void test_ring_lend(void **state)
{
    (void)state;
    ring_after_decode(false);
}

static void test_arena_token_split(void **state)
{
    (void)state;
    ring_after_decode(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lossless_qwen3moe), cmocka_unit_test(test_lossless_mixtral),
        cmocka_unit_test(test_lossless_glm_dsa), cmocka_unit_test(test_lossless_minimax_m3),
        cmocka_unit_test(test_lossless_hy_v4),
        cmocka_unit_test(test_lossless_kimi_k3),
        cmocka_unit_test(test_lossless_qwen4exp),
        cmocka_unit_test(test_lossless_deepseek4),
        cmocka_unit_test(test_lookup_table_from_file),
        cmocka_unit_test(test_lookup_table_over_budget),
        cmocka_unit_test(test_lossless_qwen3next), cmocka_unit_test(test_recurrent_reset_after_error),
        cmocka_unit_test(test_lossless_quantized), cmocka_unit_test(test_faults_pread),
        cmocka_unit_test(test_faults_uring),      cmocka_unit_test(test_truncated_after_load),
        cmocka_unit_test(test_pressure_shrink_regrow), cmocka_unit_test(test_ring_lend), cmocka_unit_test(test_arena_token_split),
        cmocka_unit_test(test_prefill_many_misses), cmocka_unit_test(test_ring_coverage),
        cmocka_unit_test(test_arena_locked_on_fault), cmocka_unit_test(test_ring_seed),
        cmocka_unit_test(test_default_chunk),
        cmocka_unit_test(test_drive_test),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
