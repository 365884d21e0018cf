/* Lookup-table rows read from the file on demand (see table.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/table.h"

#define ALIGN GM_IO_DIRECT_ALIGN

struct gm_table {
    int fd;
    bool direct; /* fd is O_DIRECT */
    gm_table_mode mode;
    uint64_t offset, row_bytes, n_rows;
    uint32_t max_rows;
    uint64_t span;     /* bounce bytes a row: its aligned span at most */
    uint8_t *bounce;   /* GM_TABLE_DIRECT: [max_rows][span] */
    gm_io_req *reqs;   /* [max_rows] */
    gm_io_done *done;  /* [max_rows] */
    gm_io *io;
    gm_table_stats stats;
    int64_t *rows;     /* [max_rows]: the gather started */
    uint32_t n_pending;
    bool started;      /* a start waits for its finish */
};

int gm_table_open(gm_table **out, const char *path, uint64_t offset, uint64_t row_bytes, uint64_t n_rows,
                  const gm_table_opts *o, gm_err *err)
{
    *out = NULL;
    const gm_table_mode mode = o ? o->mode : GM_TABLE_PREAD;
    const uint32_t max_rows = o && o->max_rows ? o->max_rows : 64;
    uint64_t table_bytes;
    if (!row_bytes || !n_rows || max_rows > 65536 || (mode != GM_TABLE_PREAD && mode != GM_TABLE_DIRECT) ||
        __builtin_mul_overflow(row_bytes, n_rows, &table_bytes) || offset > UINT64_MAX - table_bytes ||
        row_bytes > GM_IO_MAX_READ_BYTES - 2 * ALIGN)
        return gm_err_set(err, GM_EINVAL, "%s: a lookup table of %llu rows of %llu bytes at %llu, %u rows a "
                          "gather, cannot be read", path, (unsigned long long)n_rows, (unsigned long long)row_bytes,
                          (unsigned long long)offset, max_rows);
    gm_table *t = calloc(1, sizeof *t);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    t->fd = -1;
    t->mode = mode;
    t->offset = offset;
    t->row_bytes = row_bytes;
    t->n_rows = n_rows;
    t->max_rows = max_rows;
    int rc = 0;
    if (mode == GM_TABLE_DIRECT) {
        if ((rc = gm_io_open_direct(path, &t->fd, &t->direct, err)))
            goto fail;
    } else if ((t->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = gm_err_set(err, errno == ENOENT ? GM_ENOTFOUND : GM_EIO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(t->fd, &st) != 0 || (uint64_t)st.st_size < offset + table_bytes) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: the lookup table ends at byte %llu, past the end of the file (%llu "
                        "bytes)", path, (unsigned long long)(offset + table_bytes), (unsigned long long)st.st_size);
        goto fail;
    }
    if (!(t->rows = calloc(max_rows, sizeof *t->rows))) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory for a lookup table's %u-row buffer", max_rows);
        goto fail;
    }
    if (mode == GM_TABLE_DIRECT) {
        /* a row's span: from its offset rounded down to its end rounded up */
        t->span = (row_bytes + 2 * ALIGN - 2) / ALIGN * ALIGN;
        t->bounce = gm_io_alloc_aligned(t->span * max_rows);
        t->reqs = calloc(max_rows, sizeof *t->reqs);
        t->done = calloc(max_rows, sizeof *t->done);
        if (!t->bounce || !t->reqs || !t->done) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory for a lookup table's %u-row buffer", max_rows);
            goto fail;
        }
        gm_io_opts io = {.backend = o ? o->backend : GM_IO_AUTO, .queue_depth = max_rows < 32 ? max_rows : 32,
                         .capacity = max_rows > 32 ? max_rows : 32, .fault = o ? o->fault : NULL};
        io.n_threads = io.queue_depth;
        if ((rc = gm_io_create(&t->io, &io, err)))
            goto fail;
    }
    *out = t;
    return 0;
fail:
    gm_table_close(t);
    return rc;
}

/* Reads len bytes at off into buf with pread, continuing short reads; -errno, or 0 at success
 * (a read past the end is -EIO). */
static int pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        const ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        p += r;
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    return 0;
}

/* Queues the rows' spans (GM_TABLE_DIRECT). */
static int submit_direct(gm_table *t, gm_err *err)
{
    for (uint32_t i = 0; i < t->n_pending; i++) {
        const uint64_t at = t->offset + (uint64_t)t->rows[i] * t->row_bytes;
        const uint64_t lo = at / ALIGN * ALIGN, hi = (at + t->row_bytes + ALIGN - 1) / ALIGN * ALIGN;
        t->reqs[i] = (gm_io_req){.fd = t->fd, .offset = lo, .len = hi - lo, .buf = t->bounce + (uint64_t)i * t->span,
                                 .user = i, .prio = GM_IO_DEMAND};
        t->stats.bytes_read += hi - lo;
    }
    return gm_io_submit(t->io, t->reqs, t->n_pending, err);
}

/* Waits for the queued spans and copies the rows out (out NULL: only waits). */
static int collect_direct(gm_table *t, uint8_t *out, gm_err *err)
{
    const uint32_t n = t->n_pending;
    uint32_t got = 0;
    int bad = 0, rc;
    int64_t bad_result = 0;
    uint64_t bad_row = 0;
    while (got < n) {
        uint32_t k = 0;
        if ((rc = gm_io_wait(t->io, t->done, t->max_rows, n - got, -1, &k, err)))
            return rc;
        for (uint32_t j = 0; j < k; j++) {
            const uint32_t i = (uint32_t)t->done[j].user;
            const uint64_t at = t->offset + (uint64_t)t->rows[i] * t->row_bytes, lo = at / ALIGN * ALIGN;
            /* the file may end inside the last span: the row itself must have been read */
            if (t->done[j].result < 0 || (uint64_t)t->done[j].result < at + t->row_bytes - lo) {
                if (!bad) {
                    bad = 1;
                    bad_result = t->done[j].result;
                    bad_row = (uint64_t)t->rows[i];
                }
                continue;
            }
            if (out)
                memcpy(out + (uint64_t)i * t->row_bytes, t->bounce + (uint64_t)i * t->span + (at - lo), t->row_bytes);
        }
        got += k;
    }
    if (bad)
        return gm_err_set(err, GM_EIO, "reading row %llu of a lookup table: %s", (unsigned long long)bad_row,
                          bad_result < 0 ? strerror((int)-bad_result) : "short read");
    return 0;
}

int gm_table_start(gm_table *t, const int64_t *rows, uint32_t n, gm_err *err)
{
    int rc;
    if (t->started) { /* an earlier start nobody finished (its caller failed meanwhile) */
        gm_err ignore = {0};
        (void)gm_table_finish(t, NULL, &ignore);
    }
    if (n > t->max_rows)
        return gm_err_set(err, GM_ERANGE, "%u lookup-table rows in one gather (at most %u)", n, t->max_rows);
    for (uint32_t i = 0; i < n; i++)
        if (rows[i] < 0 || (uint64_t)rows[i] >= t->n_rows)
            return gm_err_set(err, GM_ERANGE, "lookup-table row %lld is outside the table (%llu rows)",
                              (long long)rows[i], (unsigned long long)t->n_rows);
    t->stats.gathers++;
    t->stats.rows += n;
    memcpy(t->rows, rows, n * sizeof *rows);
    t->n_pending = n;
    if (t->mode == GM_TABLE_DIRECT && (rc = submit_direct(t, err))) {
        t->n_pending = 0;
        return rc;
    }
    t->started = true;
    return 0;
}

int gm_table_finish(gm_table *t, void *out, gm_err *err)
{
    if (!t->started)
        return gm_err_set(err, GM_EINVAL, "a lookup-table gather finished without a start");
    t->started = false;
    if (t->mode == GM_TABLE_DIRECT)
        return collect_direct(t, out, err);
    for (uint32_t i = 0; out && i < t->n_pending; i++) {
        const int r = pread_all(t->fd, (uint8_t *)out + (uint64_t)i * t->row_bytes, t->row_bytes,
                                t->offset + (uint64_t)t->rows[i] * t->row_bytes);
        t->stats.bytes_read += t->row_bytes;
        if (r)
            return gm_err_set(err, GM_EIO, "reading row %lld of a lookup table: %s", (long long)t->rows[i],
                              strerror(-r));
    }
    return 0;
}

int gm_table_gather(gm_table *t, const int64_t *rows, uint32_t n, void *out, gm_err *err)
{
    int rc = gm_table_start(t, rows, n, err);
    return rc ? rc : gm_table_finish(t, out, err);
}

bool gm_table_direct(const gm_table *t) { return t->mode == GM_TABLE_DIRECT && t->direct; }

void gm_table_get_stats(const gm_table *t, gm_table_stats *out) { *out = t->stats; }

void gm_table_close(gm_table *t)
{
    if (!t)
        return;
    /* a read the queue had to abandon may still write the bounce buffer: then it is kept */
    const uint32_t abandoned = t->io ? gm_io_destroy(t->io) : 0;
    if (t->bounce && !abandoned)
        gm_io_free_aligned(t->bounce, t->span * t->max_rows);
    if (t->fd >= 0)
        close(t->fd);
    free(t->reqs);
    free(t->done);
    free(t->rows);
    free(t);
}
