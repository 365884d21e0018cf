/* gmlx-bench-kernels: throughput of the CPU kernels, printed as a markdown table.
 *
 * Measures, per weight type:
 *  - matrix x vector (decode) in GB/s of weights, for expert-shaped matrices (2048 x 7168: gate
 *    and up projections, 7168 x 2048: down projection; rows x columns) and an attention-shaped
 *    one (4096 x 4096), on 1 thread and on all threads. The matrices are cycled through a
 *    working set much larger than the caches (--ws-mb), as a decode step reads each expert once,
 *    so the numbers are DRAM numbers;
 *  - matrix x matrix (prefill) in GFLOP/s (2 flops per weight per token) for 64 and 512 tokens
 *    on a 2048 x 7168 matrix, all threads, the quantization of the batch's activations included;
 * next to this machine's memory bandwidth measured in the same run (memcpy, counted as bytes
 * read + written, and a read-only sum), on 1 thread and on all threads.
 *
 * Usage: gmlx-bench-kernels [--threads N] [--types q4_K,q8_0,...] [--ws-mb MB] [--min-time S]
 *                           [--repeat N] [--no-batch]
 * --repeat N measures every cell N times and prints the best (on a machine shared with other
 * work a single measurement moves by 10-40 %). The kernel level is the process's choice
 * (GMLX_KERNELS=scalar|avx2|avx512|avx512vbmi|neon|neondot forces one).
 * Numbers are for reading, never pass/fail. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sysinfo.h"
#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/quant.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct shape {
    uint64_t rows, cols;
} shape;

static const shape k_shapes[] = {{2048, 7168}, {7168, 2048}, {4096, 4096}};
#define N_SHAPES 3
static const shape k_batch_shape = {2048, 7168};
static const uint64_t k_batch_tokens[] = {64, 512};
#define N_BATCH 2

static const uint32_t k_default_types[] = {
    GM_TYPE_Q4_K,    GM_TYPE_Q8_0,   GM_TYPE_MXFP4,  GM_TYPE_Q5_K,  GM_TYPE_Q6_K,
    GM_TYPE_Q2_K,    GM_TYPE_Q3_K,   GM_TYPE_IQ4_XS, GM_TYPE_IQ2_XXS, GM_TYPE_IQ3_XXS,
    GM_TYPE_IQ2_XS,  GM_TYPE_IQ2_S,  GM_TYPE_IQ3_S,  GM_TYPE_IQ1_S, GM_TYPE_IQ1_M,
    GM_TYPE_IQ4_NL,  GM_TYPE_Q4_0,   GM_TYPE_Q4_1,   GM_TYPE_Q5_0,  GM_TYPE_Q5_1,
    GM_TYPE_TQ1_0,   GM_TYPE_TQ2_0,  GM_TYPE_BF16,   GM_TYPE_F16,   GM_TYPE_F32,
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rand_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* ---- memory bandwidth ---------------------------------------------------------------------- */

typedef struct bw_job {
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes;
    uint64_t sums[64];
} bw_job;

static void copy_part(void *ctx, int part, int n_parts)
{
    bw_job *j = ctx;
    const uint64_t b0 = j->bytes * (uint64_t)part / (uint64_t)n_parts / 64 * 64;
    const uint64_t b1 = part + 1 == n_parts ? j->bytes
                                            : j->bytes * (uint64_t)(part + 1) / (uint64_t)n_parts / 64 * 64;
    memcpy(j->dst + b0, j->src + b0, b1 - b0);
}

/* Sums the slice with 16-byte loads and 8 independent accumulators, so one core's load rate,
 * not the adds, limits it (a scalar loop reads only ~8 GB/s per core on some machines). */
static void read_part(void *ctx, int part, int n_parts)
{
    bw_job *j = ctx;
    const uint64_t w = j->bytes / 128; /* 128-byte steps */
    const uint64_t w0 = w * (uint64_t)part / (uint64_t)n_parts;
    const uint64_t w1 = w * (uint64_t)(part + 1) / (uint64_t)n_parts;
    const uint8_t *p = j->src;
#if defined(__SSE2__)
    __m128i s[8];
    for (int k = 0; k < 8; k++)
        s[k] = _mm_setzero_si128();
    for (uint64_t i = w0; i < w1; i++)
        for (int k = 0; k < 8; k++)
            s[k] = _mm_add_epi64(s[k], _mm_load_si128((const __m128i *)(p + 128 * i + 16 * k)));
    for (int k = 1; k < 8; k++)
        s[0] = _mm_add_epi64(s[0], s[k]);
    uint64_t out[2];
    _mm_storeu_si128((__m128i *)out, s[0]);
    j->sums[part & 63] = out[0] + out[1];
#else
    uint64_t s[8] = {0};
    for (uint64_t i = w0; i < w1; i++)
        for (int k = 0; k < 8; k++) {
            uint64_t v;
            memcpy(&v, p + 128 * i + 16 * k, sizeof v);
            s[k] += v;
        }
    j->sums[part & 63] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
#endif
}

/* Best of 5, in GB/s: copy counts bytes read + written. */
static double bandwidth(gm_pool *pool, int threads, int copy, uint8_t *a, uint8_t *b,
                        uint64_t bytes)
{
    bw_job j = {.dst = b, .src = a, .bytes = bytes};
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_s();
        gm_pool_run(pool, copy ? copy_part : read_part, &j, threads);
        const double t = now_s() - t0;
        if (t < best)
            best = t;
    }
    return (copy ? 2.0 : 1.0) * (double)bytes / best / 1e9;
}

/* ---- kernels ---------------------------------------------------------------------------- */

typedef struct bench_ctx {
    const gm_kernels *k;
    gm_pool *pool;
    uint8_t *data; /* working set: random f16 bit patterns (normal, finite) */
    uint64_t ws_bytes;
    float *x;      /* activations, up to 512 tokens x 7168 */
    uint8_t *act;  /* prepared activations */
    float *y;
    double min_time;
    int repeat; /* measurements per cell, the best printed */
} bench_ctx;



/* GB/s of weights for repeated matvecs over the working set. */
static double bench_matvec(bench_ctx *c, uint32_t type, shape s, int threads)
{
    gm_err err = {0};
    uint64_t row_bytes = 0, act_bytes = 0;
    if (gm_type_row_bytes(type, s.cols, &row_bytes, NULL) != 0 ||
        gm_act_row_bytes(type, s.cols, &act_bytes, &err) != 0)
        return NAN;
    const uint64_t mat_bytes = row_bytes * s.rows;
    uint64_t n_copies = c->ws_bytes / mat_bytes;
    if (n_copies < 1)
        n_copies = 1;
    if (gm_act_quantize(type, c->x, s.cols, s.cols, 1, c->act, act_bytes, NULL, 1, &err) != 0)
        return NAN;
    gm_mat m;
    /* warm up (pool, code) on one matrix, then cycle through the working set until min_time */
    gm_mat_init(&m, type, c->data, s.cols, s.rows, &err);
    gm_matvec(c->k, &m, 0, s.rows, c->act, c->y, c->pool, threads, &err);
    uint64_t calls = 0;
    const double t0 = now_s();
    double t = 0;
    do {
        gm_mat_init(&m, type, c->data + (calls % n_copies) * mat_bytes, s.cols, s.rows, &err);
        gm_matvec(c->k, &m, 0, s.rows, c->act, c->y, c->pool, threads, &err);
        calls++;
        t = now_s() - t0;
    } while (t < c->min_time || calls < 3);
    if (err.code != 0) {
        fprintf(stderr, "matvec %s: %s\n", gm_type_name(type), err.msg);
        return NAN;
    }
    return (double)calls * (double)mat_bytes / t / 1e9;
}

/* GB/s of the kernel alone: one thread, one matrix of about 256 KiB (4096 columns) that stays
 * in L2, so memory does not limit it. */
static double bench_in_cache(bench_ctx *c, uint32_t type)
{
    gm_err err = {0};
    const uint64_t cols = 4096;
    uint64_t row_bytes = 0, act_bytes = 0;
    if (gm_type_row_bytes(type, cols, &row_bytes, NULL) != 0 ||
        gm_act_row_bytes(type, cols, &act_bytes, &err) != 0)
        return NAN;
    const uint64_t rows = (256u << 10) / row_bytes ? (256u << 10) / row_bytes : 1;
    if (gm_act_quantize(type, c->x, cols, cols, 1, c->act, act_bytes, NULL, 1, &err) != 0)
        return NAN;
    gm_mat m;
    gm_mat_init(&m, type, c->data, cols, rows, &err);
    gm_matvec(c->k, &m, 0, rows, c->act, c->y, NULL, 1, &err);
    uint64_t calls = 0;
    const double t0 = now_s();
    double t = 0;
    do {
        gm_matvec(c->k, &m, 0, rows, c->act, c->y, NULL, 1, &err);
        calls++;
        t = now_s() - t0;
    } while (t < c->min_time || calls < 3);
    return (double)calls * (double)(rows * row_bytes) / t / 1e9;
}

/* GFLOP/s of a batch product of n_tok tokens, activation preparation included. */
static double bench_batch(bench_ctx *c, uint32_t type, shape s, uint64_t n_tok, int threads)
{
    gm_err err = {0};
    uint64_t row_bytes = 0, act_bytes = 0;
    if (gm_type_row_bytes(type, s.cols, &row_bytes, NULL) != 0 ||
        gm_act_row_bytes(type, s.cols, &act_bytes, &err) != 0)
        return NAN;
    const uint64_t mat_bytes = row_bytes * s.rows;
    gm_mat m;
    gm_mat_init(&m, type, c->data, s.cols, s.rows, &err);
    uint64_t runs = 0;
    const double t0 = now_s();
    double t = 0;
    do {
        m.data = c->data + (runs % (c->ws_bytes / mat_bytes)) * mat_bytes;
        gm_act_quantize(type, c->x, s.cols, s.cols, n_tok, c->act, act_bytes, c->pool, threads,
                        &err);
        gm_matmul(c->k, &m, 0, s.rows, c->act, act_bytes, n_tok, c->y, s.rows, c->pool, threads,
                  &err);
        runs++;
        t = now_s() - t0;
    } while (t < c->min_time);
    if (err.code != 0) {
        fprintf(stderr, "matmul %s: %s\n", gm_type_name(type), err.msg);
        return NAN;
    }
    return 2.0 * (double)s.rows * (double)s.cols * (double)n_tok * (double)runs / t / 1e9;
}

/* One cell of the table: what is measured and on what. */
typedef enum cell_kind { CELL_MATVEC, CELL_IN_CACHE, CELL_BATCH } cell_kind;

typedef struct cell {
    cell_kind kind;
    uint32_t type;
    shape s;        /* CELL_MATVEC, CELL_BATCH */
    uint64_t n_tok; /* CELL_BATCH */
    int threads;    /* CELL_MATVEC, CELL_BATCH */
} cell;

/* The best of c->repeat measurements of the cell (all are rates: higher is better), NaN when
 * one fails. */
static double best_of(bench_ctx *c, cell x)
{
    double best = -1.0;
    for (int r = 0; r < c->repeat; r++) {
        double v;
        if (x.kind == CELL_MATVEC)
            v = bench_matvec(c, x.type, x.s, x.threads);
        else if (x.kind == CELL_IN_CACHE)
            v = bench_in_cache(c, x.type);
        else
            v = bench_batch(c, x.type, x.s, x.n_tok, x.threads);
        if (isnan(v))
            return v;
        if (v > best)
            best = v;
    }
    return best;
}

/* ---- main ------------------------------------------------------------------------------- */

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ')
                    p++;
                snprintf(buf, len, "%s", p);
                buf[strcspn(buf, "\n")] = 0;
            }
            break;
        }
    }
    fclose(f);
}

static void load_avg(char *buf, size_t len)
{
    snprintf(buf, len, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    double a = 0, b = 0, c = 0;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

static int parse_types(const char *arg, uint32_t *out, int max)
{
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        const int t = gm_type_from_name(tok);
        if (t < 0 || gm_dot_act_type((uint32_t)t) < 0) {
            fprintf(stderr, "gmlx-bench-kernels: no kernel for type '%s'\n", tok);
            exit(2);
        }
        out[n++] = (uint32_t)t;
    }
    return n;
}

int main(int argc, char **argv)
{
    gm_err err = {0};
    gm_sysinfo si;
    if (gm_sysinfo_probe(&si, -1, -1, &err) != 0) {
        fprintf(stderr, "gmlx-bench-kernels: %s\n", err.msg);
        return 1;
    }
    int threads = si.n_cpus > 0 ? si.n_cpus : 1;
    uint32_t types[64];
    int n_types = (int)(sizeof k_default_types / sizeof k_default_types[0]);
    memcpy(types, k_default_types, sizeof k_default_types);
    uint64_t ws_mb = 1024;
    double min_time = 0.3;
    int batch = 1, repeat = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
            n_types = parse_types(argv[++i], types, 64);
        } else if (strcmp(argv[i], "--ws-mb") == 0 && i + 1 < argc) {
            ws_mb = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc) {
            min_time = atof(argv[++i]);
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--no-batch") == 0) {
            batch = 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: gmlx-bench-kernels [--threads N] [--types q4_K,q8_0,...] "
                   "[--ws-mb MB] [--min-time S] [--repeat N] [--no-batch]\n\n"
                   "Matrix x vector and batch throughput of the CPU kernels per weight type, "
                   "next to this machine's memory bandwidth.\n"
                   "  --threads N    threads for the all-thread columns (default: all CPUs)\n"
                   "  --types LIST   weight types, comma-separated (default: all)\n"
                   "  --ws-mb MB     working set the matrices cycle through (default 1024)\n"
                   "  --min-time S   seconds per measurement (default 0.3)\n"
                   "  --repeat N     measure each cell N times, print the best (default 1)\n"
                   "  --no-batch     skip the batch (prefill) columns\n"
                   "GMLX_KERNELS=scalar|avx2|avx512|avx512vbmi|neon|neondot forces a kernel "
                   "level.\n");
            return 0;
        } else {
            fprintf(stderr,
                    "usage: gmlx-bench-kernels [--threads N] [--types q4_K,q8_0,...] "
                    "[--ws-mb MB] [--min-time S] [--repeat N] [--no-batch]\n");
            return 2;
        }
    }
    if (threads < 1 || ws_mb < 64 || repeat < 1 || repeat > 100) {
        fprintf(stderr,
                "gmlx-bench-kernels: want --threads >= 1, --ws-mb >= 64, --repeat 1..100\n");
        return 2;
    }
    bench_ctx c = {.min_time = min_time, .repeat = repeat};
    if (gm_kernels_init(getenv("GMLX_KERNELS"), &c.k, &err) != 0 || gm_pool_create(&c.pool, threads, &err) != 0) {
        fprintf(stderr, "gmlx-bench-kernels: %s\n", err.msg);
        return 1;
    }
    /* room for the working set plus one matrix of the largest type (F32 4096 x 4096) */
    c.ws_bytes = ws_mb << 20;
    const uint64_t data_bytes = c.ws_bytes + (64ull << 20);
    const uint64_t max_tok = 512, max_cols = 7168;
    c.data = aligned_alloc(4096, data_bytes);
    c.x = malloc(max_tok * max_cols * sizeof *c.x);
    c.act = malloc(max_tok * max_cols * 4 + 4096);
    c.y = malloc(max_tok * 8192 * sizeof *c.y);
    if (!c.data || !c.x || !c.act || !c.y) {
        fprintf(stderr, "gmlx-bench-kernels: out of memory\n");
        return 1;
    }
    /* every 16-bit word a normal f16 in +-[2^-10, 1): scales and float weights stay finite and
     * normal in every type's reading of the bytes */
    uint16_t *h = (uint16_t *)c.data;
    for (uint64_t i = 0; i < data_bytes / 2; i++) {
        const uint64_t r = rand_u64();
        const float v = (float)ldexp(1.0 + (double)(r & 0xffff) / 65536.0, -(int)((r >> 16) % 10) - 1);
        h[i] = gm_f32_to_f16((r >> 40) & 1 ? -v : v);
    }
    for (uint64_t i = 0; i < max_tok * max_cols; i++)
        c.x[i] = (float)((double)(rand_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);

    char model[256], load[64];
    cpu_model(model, sizeof model);
    load_avg(load, sizeof load);
    char feat[256];
    gm_cpu_features_str(gm_cpu_features(), feat, sizeof feat);

    /* memory bandwidth over half the working set each way */
    const uint64_t bw_bytes = c.ws_bytes / 2;
    const double copy1 = bandwidth(c.pool, 1, 1, c.data, c.data + bw_bytes, bw_bytes);
    const double copyn = bandwidth(c.pool, threads, 1, c.data, c.data + bw_bytes, bw_bytes);
    const double read1 = bandwidth(c.pool, 1, 0, c.data, NULL, c.ws_bytes);
    const double readn = bandwidth(c.pool, threads, 0, c.data, NULL, c.ws_bytes);
    /* the copy overwrote half the data with the other half: same pattern, still normal */

    printf("## gmlx-bench-kernels\n\n");
    printf("- machine: %s, %d CPUs usable, features: %s\n", model, si.n_cpus, feat);
    printf("- kernel level: %s; threads: 1 and %d; working set %llu MiB; best of %d per cell; "
           "load average at start: %s\n",
           gm_kernel_level_name(gm_kernels_level(c.k)), threads, (unsigned long long)ws_mb,
           repeat, load);
    printf("- memory bandwidth (GB/s): copy (read + written) %.1f on 1 thread, %.1f on %d; "
           "read-only %.1f on 1 thread, %.1f on %d\n\n",
           copy1, copyn, threads, read1, readn, threads);
    printf("Matrix x vector in GB/s of weights (rows x columns; 1 thread / %d threads); "
           "in-cache: 1 thread on a 256 KiB matrix (the kernel's own speed); "
           "%% BW: mean of the %d-thread numbers over the read-only bandwidth on %d threads; "
           "vs Q4_K: the same mean over Q4_K's. Batch: GFLOP/s of a %llux%llu matrix times 64 "
           "and 512 tokens on %d threads, activation quantization included.\n\n",
           threads, threads, threads, (unsigned long long)k_batch_shape.rows,
           (unsigned long long)k_batch_shape.cols, threads);
    printf("| type | bits/w | code | in-cache |");
    for (int s = 0; s < N_SHAPES; s++)
        printf(" %llux%llu |", (unsigned long long)k_shapes[s].rows,
               (unsigned long long)k_shapes[s].cols);
    printf(" %% BW | vs Q4_K |");
    if (batch)
        printf(" batch 64 | batch 512 |");
    printf("\n|---|---|---|---|");
    for (int s = 0; s < N_SHAPES; s++)
        printf("---|");
    printf("---|---|%s\n", batch ? "---|---|" : "");
    fflush(stdout);

    double q4k_mean = NAN;
    for (int ti = 0; ti < n_types; ti++) {
        const uint32_t t = types[ti];
        if (t == GM_TYPE_MXFP4) {
            /* MXFP4's scale is a byte exponent: make every block's a realistic 2^-10..2^-5
             * (random bytes give float subnormals, which some CPUs process far slower, and
             * infinities). 118..123 also keeps the f16 words of later types finite. */
            for (uint64_t b = 0; b < data_bytes / sizeof(gm_block_mxfp4); b++)
                c.data[b * sizeof(gm_block_mxfp4)] = (uint8_t)(118 + b % 6);
        }
        const gm_type_info *info = gm_type_get(t);
        double res1[N_SHAPES], resn[N_SHAPES], mean = 0;
        for (int s = 0; s < N_SHAPES; s++) {
            res1[s] = best_of(&c, (cell){CELL_MATVEC, t, k_shapes[s], 0, 1});
            resn[s] = best_of(&c, (cell){CELL_MATVEC, t, k_shapes[s], 0, threads});
            mean += resn[s] / N_SHAPES;
        }
        if (t == GM_TYPE_Q4_K)
            q4k_mean = mean;
        printf("| %s | %.3g | %s | %.1f |", info->name,
               8.0 * info->block_bytes / info->block_elems,
               gm_kernel_level_name(gm_kernels_dot_level(c.k, t)),
               best_of(&c, (cell){CELL_IN_CACHE, t, k_shapes[0], 0, 1}));
        for (int s = 0; s < N_SHAPES; s++)
            printf(" %.1f / %.1f |", res1[s], resn[s]);
        printf(" %.0f%% |", 100.0 * mean / readn);
        if (isnan(q4k_mean))
            printf(" - |");
        else
            printf(" %.2f |", mean / q4k_mean);
        if (batch)
            for (int b = 0; b < N_BATCH; b++)
                printf(" %.1f |", best_of(&c, (cell){CELL_BATCH, t, k_batch_shape,
                                                     k_batch_tokens[b], threads}));
        printf("\n");
        fflush(stdout);
    }
    load_avg(load, sizeof load);
    printf("\nload average at end: %s\n", load);
    gm_pool_destroy(c.pool);
    free(c.data);
    free(c.x);
    free(c.act);
    free(c.y);
    return 0;
}
