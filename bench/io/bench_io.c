/* gmlx-bench-io: random reads of a fixed size over a file through src/io, keeping a fixed
 * number in flight; prints one markdown row per (backend, size, depth) with GB/s, IOPS and
 * latency percentiles (submit to completion, as the owner thread sees it) and the CPU time the
 * process spent per GB read.
 *
 *   gmlx-bench-io FILE [--size-mb N[,N...]] [--depth N[,N...]] [--backend uring|pread[,...]]
 *                      [--direct|--buffered] [--seconds S] [--threads N] [--drop-caches]
 *                      [--create SIZE_GB] [--keep] [--repeat N]
 *
 * --create writes FILE first (SIZE_GB x 1e9 bytes of pseudo-random data, with O_DIRECT where the
 * filesystem allows) and deletes it at the end unless --keep. --threads sets the pread pool size
 * (default: the depth). --drop-caches writes 3 to /proc/sys/vm/drop_caches before each run
 * (root). --repeat N runs the whole matrix N times, round after round (so slow drifts of a shared
 * disk spread over every configuration), and prints for each configuration its median run by
 * GB/s, with the lowest and highest GB/s. Numbers are for docs/io.md; nothing here passes or
 * fails. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench_file.h"
#include "io/io.h"

#define MAX_LIST 16

typedef struct bench_args {
    const char *path;
    double size_mb[MAX_LIST];
    int n_size;
    uint32_t depth[MAX_LIST];
    int n_depth;
    gm_io_backend backend[MAX_LIST];
    int n_backend;
    bool direct;
    double seconds;
    uint32_t threads;
    bool drop_caches;
    double create_gb;
    bool keep;
    int repeat;
} bench_args;

/* The figures of one run. */
typedef struct run_result {
    double gb_s, iops, p50_ms, p90_ms, p99_ms, max_ms, cpu_s_per_gb;
    size_t n_reads;
    uint64_t errors, short_retries;
    bool ok;
} run_result;

static void usage(void)
{
    fprintf(stderr,
            "usage: gmlx-bench-io FILE [--size-mb N[,N...]] [--depth N[,N...]]\n"
            "                     [--backend uring|pread[,...]] [--direct|--buffered]\n"
            "                     [--seconds S] [--threads N] [--drop-caches]\n"
            "                     [--create SIZE_GB] [--keep] [--repeat N]\n");
}

static int parse_list(const char *s, double *out, int max)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        double v = strtod(tok, &end);
        if (*end || v <= 0 || n == max)
            return -1;
        out[n++] = v;
    }
    return n;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->size_mb[0] = 4;
    a->n_size = 1;
    a->depth[0] = 32;
    a->n_depth = 1;
    a->backend[0] = GM_IO_URING;
    a->n_backend = 1;
    a->direct = true;
    a->seconds = 5;
    a->repeat = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double tmp[MAX_LIST];
        if (!strcmp(o, "--size-mb") && v) {
            if ((a->n_size = parse_list(v, a->size_mb, MAX_LIST)) < 0)
                return -1;
            i++;
        } else if (!strcmp(o, "--depth") && v) {
            int n = parse_list(v, tmp, MAX_LIST);
            if (n < 0)
                return -1;
            for (int k = 0; k < n; k++)
                a->depth[k] = (uint32_t)tmp[k];
            a->n_depth = n;
            i++;
        } else if (!strcmp(o, "--backend") && v) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            a->n_backend = 0;
            for (char *t = strtok(buf, ","); t && a->n_backend < MAX_LIST; t = strtok(NULL, ",")) {
                if (!strcmp(t, "uring") || !strcmp(t, "io_uring"))
                    a->backend[a->n_backend++] = GM_IO_URING;
                else if (!strcmp(t, "pread"))
                    a->backend[a->n_backend++] = GM_IO_PREAD;
                else
                    return -1;
            }
            i++;
        } else if (!strcmp(o, "--direct")) {
            a->direct = true;
        } else if (!strcmp(o, "--buffered")) {
            a->direct = false;
        } else if (!strcmp(o, "--seconds") && v) {
            a->seconds = atof(v);
            i++;
        } else if (!strcmp(o, "--threads") && v) {
            a->threads = (uint32_t)atoi(v);
            i++;
        } else if (!strcmp(o, "--drop-caches")) {
            a->drop_caches = true;
        } else if (!strcmp(o, "--create") && v) {
            a->create_gb = atof(v);
            i++;
        } else if (!strcmp(o, "--repeat") && v) {
            a->repeat = atoi(v);
            i++;
        } else if (!strcmp(o, "--keep")) {
            a->keep = true;
        } else if (o[0] != '-' && !a->path) {
            a->path = o;
        } else {
            return -1;
        }
    }
    return a->path && a->seconds > 0 && a->repeat >= 1 && a->repeat <= 99 ? 0 : -1;
}

/* CPU seconds (user + system) this process has used, its threads and io_uring workers included. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double pct(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

/* One run. */
static int run_one(const bench_args *a, int fd, uint64_t file_bytes, gm_io_backend be,
                   double size_mb, uint32_t depth, run_result *out)
{
    memset(out, 0, sizeof *out);
    uint64_t size = (uint64_t)(size_mb * 1048576.0 + 0.5);
    size = (size + 4095) / 4096 * 4096;
    if (size == 0 || size > file_bytes || size > GM_IO_MAX_READ_BYTES) {
        fprintf(stderr, "gmlx-bench-io: read size %.2f MiB does not fit the file\n", size_mb);
        return -1;
    }
    uint32_t threads = a->threads ? a->threads : depth;
    gm_io_opts o = {.backend = be, .queue_depth = depth, .capacity = depth, .n_threads = threads};
    gm_io *io = NULL;
    gm_err err = {0};
    if (gm_io_create(&io, &o, &err) != 0) {
        fprintf(stderr, "gmlx-bench-io: %s\n", err.msg);
        return -1;
    }
    uint8_t *mem = gm_io_alloc_aligned((uint64_t)depth * size);
    double *t_sub = calloc(depth, sizeof *t_sub);
    gm_io_done *done = calloc(depth, sizeof *done);
    size_t lat_cap = 1 << 16, n_lat = 0;
    double *lat = malloc(lat_cap * sizeof *lat);
    if (!mem || !t_sub || !done || !lat) {
        fprintf(stderr, "gmlx-bench-io: out of memory for %u x %.1f MiB buffers\n", depth, size_mb);
        gm_io_destroy(io);
        return -1;
    }
    if (a->drop_caches)
        bench_drop_caches("gmlx-bench-io");
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)depth * 7919 ^ size;
    uint64_t n_pages = (file_bytes - size) / 4096 + 1;
    double cpu0 = cpu_s();
    double t0 = bench_now_s(), t_end = t0 + a->seconds, t_last = t0;
    uint64_t bytes = 0, errors = 0;
    int rc = 0;
    for (uint32_t i = 0; i < depth && rc == 0; i++) {
        gm_io_req r = {.fd = fd, .offset = (bench_xorshift(&seed) % n_pages) * 4096, .len = size,
                       .buf = mem + (uint64_t)i * size, .user = i, .prio = GM_IO_DEMAND};
        t_sub[i] = bench_now_s();
        rc = gm_io_submit(io, &r, 1, &err);
    }
    bool stopping = false;
    while (rc == 0 && gm_io_in_flight(io) > 0) {
        uint32_t n = 0;
        rc = gm_io_wait(io, done, depth, 1, -1, &n, &err);
        double t = bench_now_s();
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            uint32_t i = (uint32_t)done[k].user;
            if (stopping)
                continue;
            if (done[k].result != (int64_t)size)
                errors++;
            else
                bytes += size;
            if (n_lat == lat_cap) {
                double *nl = realloc(lat, 2 * lat_cap * sizeof *lat);
                if (!nl) {
                    rc = -1;
                    break;
                }
                lat = nl;
                lat_cap *= 2;
            }
            lat[n_lat++] = (t - t_sub[i]) * 1e3;
            t_last = t;
            if (t >= t_end) {
                stopping = true;
                continue;
            }
            gm_io_req r = {.fd = fd, .offset = (bench_xorshift(&seed) % n_pages) * 4096, .len = size,
                           .buf = mem + (uint64_t)i * size, .user = i, .prio = GM_IO_DEMAND};
            t_sub[i] = bench_now_s();
            rc = gm_io_submit(io, &r, 1, &err);
        }
    }
    if (rc != 0)
        fprintf(stderr, "gmlx-bench-io: %s\n", err.msg[0] ? err.msg : "failed");
    double dt = t_last - t0;
    double cpu = cpu_s() - cpu0;
    qsort(lat, n_lat, sizeof *lat, bench_cmp_double);
    if (rc == 0) {
        out->ok = true;
        out->gb_s = (double)bytes / 1e9 / dt;
        out->iops = (double)n_lat / dt;
        out->p50_ms = pct(lat, n_lat, 0.50);
        out->p90_ms = pct(lat, n_lat, 0.90);
        out->p99_ms = pct(lat, n_lat, 0.99);
        out->max_ms = n_lat ? lat[n_lat - 1] : 0.0;
        out->n_reads = n_lat;
        out->cpu_s_per_gb = bytes ? cpu / ((double)bytes / 1e9) : 0.0;
        out->errors = errors;
        gm_io_stats st;
        gm_io_get_stats(io, &st);
        out->short_retries = st.n_short_retries;
    }
    gm_io_destroy(io);
    gm_io_free_aligned(mem, (uint64_t)depth * size);
    free(t_sub);
    free(done);
    free(lat);
    return rc;
}

int main(int argc, char **argv)
{
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) {
        usage();
        return 2;
    }
    bool created = false;
    if (a.create_gb > 0) {
        uint64_t bytes = (uint64_t)(a.create_gb * 1e9);
        bytes = (bytes + (1u << 20) - 1) / (1u << 20) * (1u << 20);
        if (bench_create_file("gmlx-bench-io", a.path, bytes) != 0) {
            unlink(a.path);
            return 1;
        }
        created = true;
    }
    int fd = -1;
    bool direct = false;
    gm_err err = {0};
    int rc = 0;
    if (a.direct) {
        rc = gm_io_open_direct(a.path, &fd, &direct, &err);
        if (rc == 0 && !direct)
            fprintf(stderr, "gmlx-bench-io: %s refuses O_DIRECT; reading buffered\n", a.path);
        a.direct = direct;
    } else {
        fd = open(a.path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            rc = gm_err_errno(&err, GM_EIO, errno, "%s", a.path);
    }
    struct stat st;
    if (rc == 0 && fstat(fd, &st) != 0)
        rc = gm_err_errno(&err, GM_EIO, errno, "%s", a.path);
    if (rc != 0) {
        fprintf(stderr, "gmlx-bench-io: %s\n", err.msg);
        if (created && !a.keep)
            unlink(a.path);
        return 1;
    }
    struct utsname un;
    uname(&un);
    printf("file %s: %.2f GB, %s, dio alignment %u; kernel %s; %.1f s per run\n\n", a.path,
           (double)st.st_size / 1e9, a.direct ? "O_DIRECT" : "buffered", gm_io_dio_align(fd),
           un.release, a.seconds);
    const char *be_name[3] = {"auto", "io_uring", "pread"};
    printf("| backend  | mode     | MiB    | depth | threads | GB/s   | GB/s min-max  | IOPS    | p50 ms  | p90 ms  | p99 ms  | max ms  | reads   | CPU s/GB | errors |\n");
    printf("|----------|----------|-------:|------:|--------:|-------:|--------------:|--------:|--------:|--------:|--------:|--------:|--------:|---------:|-------:|\n");
    int n_cfg = a.n_backend * a.n_size * a.n_depth;
    run_result *res = calloc((size_t)n_cfg * (size_t)a.repeat, sizeof *res);
    if (!res)
        return 1;
    int failures = 0;
    for (int rep = 0; rep < a.repeat; rep++)
        for (int c = 0; c < n_cfg; c++) {
            int b = c / (a.n_size * a.n_depth), s = c / a.n_depth % a.n_size, d = c % a.n_depth;
            run_result *r = &res[(size_t)c * (size_t)a.repeat + (size_t)rep];
            failures += run_one(&a, fd, (uint64_t)st.st_size, a.backend[b], a.size_mb[s],
                                a.depth[d], r) != 0;
            if (r->short_retries)
                fprintf(stderr, "gmlx-bench-io: %s %.1f MiB depth %u: %llu short reads from the "
                        "kernel were continued\n", be_name[a.backend[b]], a.size_mb[s], a.depth[d],
                        (unsigned long long)r->short_retries);
        }
    for (int c = 0; c < n_cfg; c++) {
        int b = c / (a.n_size * a.n_depth), s = c / a.n_depth % a.n_size, d = c % a.n_depth;
        run_result *r = &res[(size_t)c * (size_t)a.repeat];
        /* Sort this configuration's runs by GB/s; failed runs (0 GB/s) go first. */
        for (int i = 1; i < a.repeat; i++)
            for (int j = i; j > 0 && r[j].gb_s < r[j - 1].gb_s; j--) {
                run_result t = r[j];
                r[j] = r[j - 1];
                r[j - 1] = t;
            }
        const run_result *m = &r[a.repeat / 2];
        if (!r[0].ok)
            continue;
        char thr[16] = "-", span[32];
        if (a.backend[b] == GM_IO_PREAD)
            snprintf(thr, sizeof thr, "%u", a.threads ? a.threads : a.depth[d]);
        snprintf(span, sizeof span, "%.2f-%.2f", r[0].gb_s, r[a.repeat - 1].gb_s);
        printf("| %-8s | %-8s | %6.1f | %5u | %7s | %6.2f | %13s | %7.0f | %7.2f | %7.2f | %7.2f "
               "| %7.2f | %7zu | %8.3f | %6llu |\n",
               be_name[a.backend[b]], a.direct ? "direct" : "buffered", a.size_mb[s], a.depth[d],
               thr, m->gb_s, span, m->iops, m->p50_ms, m->p90_ms, m->p99_ms, m->max_ms,
               m->n_reads, m->cpu_s_per_gb, (unsigned long long)m->errors);
    }
    free(res);
    close(fd);
    if (created && !a.keep)
        unlink(a.path);
    return failures ? 1 : 0;
}
