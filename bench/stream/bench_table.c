/* gmlx-bench-table: lookup-table gathers (src/stream/table.c) as a streamed model makes them, on a
 * table file larger than memory: per decode token R random rows (the seed's case: DeepSeek-V4.1's
 * engram table, 24 rows a token), cold (page cache dropped) and warm (the same tokens again), in
 * both modes (pread through the page cache, O_DIRECT spans); a prefill's gathers (T tokens' rows
 * in batches of max_rows); and the decode gathers again while another thread streams expert-sized
 * O_DIRECT reads over the same drive, as the decode arena's feeder does. Prints markdown tables:
 * per token mean, p50, p90 and max in ms. Numbers are for docs/performance.md; nothing here passes
 * or fails.
 *
 *   gmlx-bench-table FILE [--create GB] [--keep] [--row-bytes N] [--rows-per-token N]
 *                         [--tokens N] [--prefill-tokens N] [--expert-mb N] [--seed S]
 *
 * --create writes FILE (GB x 1e9 bytes of pseudo-random data, O_DIRECT where allowed) and deletes
 * it at the end unless --keep; the table is the whole file. Cold runs write 3 to
 * /proc/sys/vm/drop_caches first (root; otherwise they are warm and say so). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../io/bench_file.h"
#include "io/io.h"
#include "stream/table.h"

typedef struct args {
    const char *path;
    double create_gb;
    bool keep;
    uint64_t row_bytes;
    uint32_t per_token, tokens, prefill_tokens, expert_mb;
    uint64_t seed;
} args;

/* The background expert reads: expert_mb-sized O_DIRECT reads at random aligned offsets, 4 in
 * flight, until stop. */
typedef struct streamer {
    const char *path;
    uint64_t file_bytes, read_bytes;
    atomic_int stop;
    atomic_ullong done_bytes;
} streamer;

static void *stream_main(void *arg)
{
    streamer *st = arg;
    int fd;
    bool direct;
    gm_err err = {0};
    gm_io *io = NULL;
    gm_io_opts o = {.queue_depth = 4, .capacity = 4};
    if (gm_io_open_direct(st->path, &fd, &direct, &err) || gm_io_create(&io, &o, &err)) {
        fprintf(stderr, "gmlx-bench-table: background reads: %s\n", err.msg);
        return NULL;
    }
    uint8_t *buf = gm_io_alloc_aligned(4 * st->read_bytes);
    uint64_t s = 0x13198a2e03707344ull;
    const uint64_t slots = (st->file_bytes - st->read_bytes) / GM_IO_DIRECT_ALIGN;
    uint32_t in_flight = 0;
    for (uint64_t k = 0; buf && !atomic_load(&st->stop); k++) {
        while (in_flight < 4) {
            gm_io_req r = {.fd = fd, .offset = bench_xorshift(&s) % slots * GM_IO_DIRECT_ALIGN, .len = st->read_bytes,
                           .buf = buf + (uint64_t)in_flight * st->read_bytes, .user = in_flight};
            if (gm_io_submit(io, &r, 1, &err))
                goto out;
            in_flight++;
        }
        gm_io_done d[4];
        uint32_t n = 0;
        if (gm_io_wait(io, d, 4, 4, -1, &n, &err))
            goto out;
        for (uint32_t i = 0; i < n; i++)
            if (d[i].result > 0)
                atomic_fetch_add(&st->done_bytes, (unsigned long long)d[i].result);
        in_flight -= n;
    }
out:
    gm_io_destroy(io);
    if (buf)
        gm_io_free_aligned(buf, 4 * st->read_bytes);
    close(fd);
    return NULL;
}

/* T tokens of per_token rows each, one gather per token; prints the row of figures. */
static int run_decode(const args *a, gm_table_mode mode, uint64_t n_rows, const char *label, uint64_t seed)
{
    gm_table *t = NULL;
    gm_err err = {0};
    gm_table_opts o = {.mode = mode, .max_rows = a->per_token};
    if (gm_table_open(&t, a->path, 0, a->row_bytes, n_rows, &o, &err)) {
        fprintf(stderr, "gmlx-bench-table: %s\n", err.msg);
        return -1;
    }
    int64_t *rows = malloc(a->per_token * sizeof *rows);
    uint8_t *out = malloc(a->per_token * a->row_bytes);
    double *ms = malloc(a->tokens * sizeof *ms), sum = 0;
    for (uint32_t k = 0; k < a->tokens; k++) {
        for (uint32_t i = 0; i < a->per_token; i++)
            rows[i] = (int64_t)(bench_xorshift(&seed) % n_rows);
        const double t0 = bench_now_s();
        if (gm_table_gather(t, rows, a->per_token, out, &err)) {
            fprintf(stderr, "gmlx-bench-table: %s\n", err.msg);
            break;
        }
        ms[k] = (bench_now_s() - t0) * 1e3;
        sum += ms[k];
    }
    qsort(ms, a->tokens, sizeof *ms, bench_cmp_double);
    printf("| %s | %s | %u | %.3f | %.3f | %.3f | %.3f |\n", label,
           mode == GM_TABLE_PREAD ? "pread" : gm_table_direct(t) ? "O_DIRECT" : "buffered", a->per_token,
           sum / a->tokens, ms[a->tokens / 2], ms[a->tokens * 9 / 10], ms[a->tokens - 1]);
    free(rows);
    free(out);
    free(ms);
    gm_table_close(t);
    return 0;
}

/* A prefill's gathers: prefill_tokens x per_token rows in batches of 64 rows. */
static int run_prefill(const args *a, gm_table_mode mode, uint64_t n_rows, bool cold)
{
    gm_table *t = NULL;
    gm_err err = {0};
    gm_table_opts o = {.mode = mode, .max_rows = 64};
    if (gm_table_open(&t, a->path, 0, a->row_bytes, n_rows, &o, &err)) {
        fprintf(stderr, "gmlx-bench-table: %s\n", err.msg);
        return -1;
    }
    int64_t rows[64];
    uint8_t *out = malloc(64 * a->row_bytes);
    uint64_t seed = a->seed ^ 0x7f4a7c15ull, total = (uint64_t)a->prefill_tokens * a->per_token;
    const double t0 = bench_now_s();
    for (uint64_t done = 0; done < total;) {
        const uint32_t n = total - done < 64 ? (uint32_t)(total - done) : 64;
        for (uint32_t i = 0; i < n; i++)
            rows[i] = (int64_t)(bench_xorshift(&seed) % n_rows);
        if (gm_table_gather(t, rows, n, out, &err)) {
            fprintf(stderr, "gmlx-bench-table: %s\n", err.msg);
            break;
        }
        done += n;
    }
    const double s = bench_now_s() - t0;
    printf("| prefill of %u tokens%s | %s | %.3f s | %.3f ms a token |\n", a->prefill_tokens, cold ? ", cold" : "",
           mode == GM_TABLE_PREAD ? "pread" : gm_table_direct(t) ? "O_DIRECT" : "buffered", s,
           s * 1e3 / a->prefill_tokens);
    free(out);
    gm_table_close(t);
    return 0;
}

int main(int argc, char **argv)
{
    args a = {.row_bytes = 4096, .per_token = 24, .tokens = 2000, .prefill_tokens = 4096, .expert_mb = 8,
              .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--create") && v)
            a.create_gb = atof(argv[++i]);
        else if (!strcmp(o, "--keep"))
            a.keep = true;
        else if (!strcmp(o, "--row-bytes") && v)
            a.row_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(o, "--rows-per-token") && v)
            a.per_token = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(o, "--tokens") && v)
            a.tokens = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(o, "--prefill-tokens") && v)
            a.prefill_tokens = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(o, "--expert-mb") && v)
            a.expert_mb = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(o, "--seed") && v)
            a.seed = strtoull(argv[++i], NULL, 10);
        else if (o[0] != '-' && !a.path)
            a.path = o;
        else {
            fprintf(stderr, "usage: gmlx-bench-table FILE [--create GB] [--keep] [--row-bytes N] "
                            "[--rows-per-token N] [--tokens N] [--prefill-tokens N] [--expert-mb N] [--seed S]\n");
            return 2;
        }
    }
    if (!a.path || !a.row_bytes || !a.per_token || a.per_token > 65536 || !a.tokens || !a.expert_mb) {
        fprintf(stderr, "gmlx-bench-table: a file and positive sizes are needed (--help)\n");
        return 2;
    }
    const uint64_t create_bytes = (uint64_t)(a.create_gb * 1e9) / (1u << 20) * (1u << 20);
    if (a.create_gb > 0 && bench_create_file("gmlx-bench-table", a.path, create_bytes))
        return 1;
    struct stat st;
    if (stat(a.path, &st) != 0 || (uint64_t)st.st_size < a.row_bytes) {
        fprintf(stderr, "gmlx-bench-table: %s: %s\n", a.path, strerror(errno));
        return 1;
    }
    const uint64_t n_rows = (uint64_t)st.st_size / a.row_bytes;
    printf("table: %s, %.1f GB, %llu rows of %llu bytes, %u rows a token\n\n", a.path, (double)st.st_size / 1e9,
           (unsigned long long)n_rows, (unsigned long long)a.row_bytes, a.per_token);
    printf("| case | reads | rows | mean ms | p50 ms | p90 ms | max ms |\n|---|---|---|---|---|---|---|\n");
    const gm_table_mode modes[] = {GM_TABLE_PREAD, GM_TABLE_DIRECT};
    for (int m = 0; m < 2; m++) {
        const bool cold = bench_drop_caches("gmlx-bench-table");
        run_decode(&a, modes[m], n_rows, cold ? "decode, cold" : "decode (caches not dropped)", a.seed);
        run_decode(&a, modes[m], n_rows, "decode, the same rows again", a.seed);
    }
    /* beside the feeder's reads */
    streamer sr = {.path = a.path, .file_bytes = (uint64_t)st.st_size, .read_bytes = (uint64_t)a.expert_mb << 20};
    atomic_init(&sr.stop, 0);
    atomic_init(&sr.done_bytes, 0);
    pthread_t th;
    if (sr.file_bytes > 2 * sr.read_bytes && pthread_create(&th, NULL, stream_main, &sr) == 0) {
        const double t0 = bench_now_s();
        for (int m = 0; m < 2; m++) {
            bench_drop_caches("gmlx-bench-table");
            char label[96];
            snprintf(label, sizeof label, "decode, cold, beside %u MB O_DIRECT reads", a.expert_mb);
            run_decode(&a, modes[m], n_rows, label, a.seed ^ 0x55ull * (uint64_t)(m + 1));
        }
        atomic_store(&sr.stop, 1);
        pthread_join(th, NULL);
        printf("\nbackground reads: %.2f GB/s while the gathers ran\n",
               (double)atomic_load(&sr.done_bytes) / 1e9 / (bench_now_s() - t0));
    }
    printf("\n| case | reads | time | per token |\n|---|---|---|---|\n");
    for (int m = 0; m < 2; m++) {
        const bool cold = bench_drop_caches("gmlx-bench-table");
        run_prefill(&a, modes[m], n_rows, cold);
    }
    if (a.create_gb > 0 && !a.keep)
        unlink(a.path);
    return 0;
}
