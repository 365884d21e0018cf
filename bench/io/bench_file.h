/* bench/io/bench_file: what the disk benchmarks (gmlx-bench-io, gmlx-bench-table) share: a
 * monotonic clock, a pseudo-random sequence, dropping the page cache, writing a file of
 * pseudo-random data at disk speed, sorting figures. Header-only (static functions). */
#ifndef GM_BENCH_FILE_H
#define GM_BENCH_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/io.h"

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t bench_xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Writes 3 to /proc/sys/vm/drop_caches (root); false, after saying so on stderr, when it cannot. */
static inline bool bench_drop_caches(const char *prog)
{
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f || fputs("3\n", f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "%s: cannot drop the page cache (needs root)\n", prog);
        return false;
    }
    return true;
}

/* Writes bytes of pseudo-random data to path, O_DIRECT where allowed; 0 or -1 (said on stderr). */
static inline int bench_create_file(const char *prog, const char *path, uint64_t bytes)
{
    const uint64_t chunk = 8u << 20;
    bool direct = true;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EINVAL) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        direct = false;
    }
    if (fd < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
        return -1;
    }
    uint64_t *buf = gm_io_alloc_aligned(chunk);
    if (!buf) {
        close(fd);
        return -1;
    }
    uint64_t seed = 0x853c49e6748fea9bull;
    double t0 = bench_now_s();
    int rc = 0;
    for (uint64_t done = 0; done < bytes && rc == 0;) {
        for (uint64_t i = 0; i < chunk / 8; i++)
            buf[i] = bench_xorshift(&seed);
        uint64_t n = bytes - done < chunk ? bytes - done : chunk;
        ssize_t w = write(fd, buf, (size_t)n);
        if (w != (ssize_t)n) {
            fprintf(stderr, "%s: writing %s: %s\n", prog, path, w < 0 ? strerror(errno) : "short write");
            rc = -1;
        }
        done += n;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = -1;
    close(fd);
    gm_io_free_aligned(buf, chunk);
    double dt = bench_now_s() - t0;
    if (rc == 0)
        fprintf(stderr, "%s: wrote %.2f GB to %s in %.1f s (%.2f GB/s, %s)\n", prog, (double)bytes / 1e9, path, dt,
                (double)bytes / 1e9 / dt, direct ? "O_DIRECT" : "buffered: O_DIRECT refused");
    return rc;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
