/* stream/table: rows of a lookup table read from the model file when they are needed.
 *
 * A lookup table (a per-layer token-embedding table, an engram table) is read a few rows a
 * token, so it need not be in memory: a gather reads just the rows asked for, straight from the
 * file, and never the whole table.
 *
 * Owns: one open table of a file (n_rows rows of row_bytes at a byte offset): its file
 * descriptor and, for GM_TABLE_DIRECT, a read queue (io/io.h) and a bounce buffer of aligned
 * spans for at most max_rows rows, both made at open, so a gather allocates nothing.
 * - GM_TABLE_PREAD: each row is one pread into the caller's buffer, through the page cache (warm
 *   rows cost a copy; cold ones a read each).
 * - GM_TABLE_DIRECT: the rows' 4 KiB-aligned spans are read together with O_DIRECT (all of a
 *   gather's reads in flight at once, beside whatever else the drive serves) and the rows copied
 *   out; where the filesystem refuses O_DIRECT the same reads go through the page cache.
 * Either way the bytes are the file's, bit for bit.
 *
 * Errors: a row outside the table or more rows than max_rows is GM_ERANGE; a failed or short read
 * is GM_EIO with the row and the system's words; the output is then unspecified. Nothing aborts.
 * Threads: a table has one owner thread (gm_table_gather is not reentrant); tables are
 * independent of one another.
 */
#ifndef GM_STREAM_TABLE_H
#define GM_STREAM_TABLE_H

#include <stdint.h>

#include "base/err.h"
#include "io/io.h"

typedef struct gm_table gm_table;

typedef enum gm_table_mode { GM_TABLE_PREAD = 0, GM_TABLE_DIRECT = 1 } gm_table_mode;

typedef struct gm_table_opts {
    gm_table_mode mode;
    uint32_t max_rows;      /* rows one gather may ask for; default 64 */
    gm_io_backend backend;  /* GM_TABLE_DIRECT's read queue (AUTO: io_uring when it can) */
    const gm_io_fault *fault; /* tests only */
} gm_table_opts;

typedef struct gm_table_stats {
    uint64_t gathers, rows, bytes_read; /* bytes_read: what the drive was asked for */
} gm_table_stats;

/* Opens the table of n_rows rows of row_bytes at offset in path. GM_EFORMAT when the file is
 * shorter than the table, GM_EINVAL for a zero size or option out of range, GM_ENOTFOUND /
 * GM_EIO when the file cannot be opened, GM_ENOMEM. o may be NULL (GM_TABLE_PREAD, 64 rows). */
int gm_table_open(gm_table **out, const char *path, uint64_t offset, uint64_t row_bytes, uint64_t n_rows,
                  const gm_table_opts *o, gm_err *err);

/* Reads rows[0..n) (any order, repeats allowed) into out, row i at out + i * row_bytes. */
int gm_table_gather(gm_table *t, const int64_t *rows, uint32_t n, void *out, gm_err *err);
/* The same in two steps, so that the reads run while the caller works: gm_table_start checks and
 * queues the rows (GM_TABLE_DIRECT: their reads are in flight when it returns); gm_table_finish
 * waits for them and copies them into out (NULL: only waits). One gather at a time: a start before
 * the last one's finish first waits for that one and drops its rows. A start's errors leave no
 * gather started; a finish without a start is GM_EINVAL. */
int gm_table_start(gm_table *t, const int64_t *rows, uint32_t n, gm_err *err);
int gm_table_finish(gm_table *t, void *out, gm_err *err);

/* True when GM_TABLE_DIRECT reads bypass the page cache (false: the filesystem refused O_DIRECT,
 * or the mode is GM_TABLE_PREAD). */
bool gm_table_direct(const gm_table *t);
void gm_table_get_stats(const gm_table *t, gm_table_stats *out);
void gm_table_close(gm_table *t);

#endif
