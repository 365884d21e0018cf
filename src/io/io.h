/* io: asynchronous positional reads from files (the expert reads of the streaming engine).
 *
 * Owns: one read queue (gm_io) with a fixed number of request slots, two software queues
 * (demand, speculative) in front of a backend that keeps up to queue_depth reads on the device:
 * io_uring (one ring; built when liburing is found) or a fixed pool of pread threads. Also a few
 * helpers: opening a file for O_DIRECT, its alignment, page-aligned buffers.
 *
 * Invariants:
 * - Every accepted read completes exactly once through gm_io_wait (result = bytes read, which is
 *   the length asked for unless the file ends first, or -errno), unless it was abandoned.
 * - Speculative reads never hold the demand reserve: they go to the device only while fewer than
 *   queue_depth - demand_reserve reads are on it, and they may take at most capacity - queue_depth
 *   request slots, so demand reads can always fill the device. Demand reads go first in every
 *   queue (front end and thread pool); io_uring speculative reads also carry I/O priority BE 7.
 * - Short reads from the kernel are retried for the remainder inside the backend; a short count
 *   is returned only at end of file.
 * - Nothing is allocated per read: slots, queues and the completion ring are sized at creation.
 * - A read stuck in the kernel never hangs the owner: gm_io_abandon forgets one (the pread pool
 *   adds a thread in its place) and gm_io_destroy gives up after destroy_wait_ms. The buffer of an
 *   abandoned read may still be written later: its owner must never free or reuse it.
 *
 * Threads: a gm_io has one owner thread, which calls every function taking a gm_io (create may
 * run elsewhere; the pread pool's threads are internal). The helpers are thread-safe.
 */
#ifndef GM_IO_IO_H
#define GM_IO_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct gm_io gm_io;

typedef enum gm_io_backend { GM_IO_AUTO = 0, GM_IO_URING, GM_IO_PREAD } gm_io_backend;

typedef enum gm_io_prio { GM_IO_DEMAND = 0, GM_IO_SPECULATIVE = 1 } gm_io_prio;

/* The alignment every O_DIRECT request must have (offset, length and buffer address). */
#define GM_IO_DIRECT_ALIGN 4096u

/* The longest single read (io_uring reports at most INT32_MAX bytes per completion). */
#define GM_IO_MAX_READ_BYTES (1ull << 30)

typedef struct gm_io_req {
    int fd;
    uint64_t offset; /* bytes from the start of the file */
    uint64_t len;    /* bytes, 1..GM_IO_MAX_READ_BYTES */
    void *buf;       /* len bytes; for O_DIRECT fds offset, len and buf are GM_IO_DIRECT_ALIGN aligned */
    uint64_t user;   /* returned with the completion; also the key of cancel and abandon */
    gm_io_prio prio;
} gm_io_req;

typedef struct gm_io_done {
    uint64_t user;
    int64_t result; /* bytes read (== len unless the file ends first) or -errno (-ECANCELED) */
} gm_io_done;

/* Tests only: faults applied to the Nth read accepted by gm_io_submit (counted from 1 over the
 * life of the gm_io, in submission order; 0 = off). The fault layer sits under either backend:
 * - eio_at: the read completes with -EIO.
 * - short_at: the kernel's first answer is cut to about half (len/2 rounded down to 4096, or
 *   len/2 when that is 0); the backend must retry the rest, so the caller sees the full read.
 * - stall_at: the read waits stall_ms before it reaches the disk; gm_io_cancel (or destroy) ends
 *   the wait early with -ECANCELED (a slow device).
 * - wedge_at: the read waits stall_ms and no cancel reaches it (a read stuck in the kernel).
 * - stall_speculative: every speculative read stalls as stall_at does (a slow lookahead).
 * - stall_all: every read stalls as stall_at does (a slow device that keeps going).
 * - virtual_clock: stalls and wedges are measured on the queue's own clock (gm_io_clock_s), not
 *   the wall: a stalled read is held back from the device, and the clock moves only inside
 *   gm_io_wait when every read in flight is held back, by as much as the wait's timeout or as
 *   the next held read's release. A caller that measures its timeouts on gm_io_clock_s then sees
 *   a stall past its timeout exactly when the stall is longer, however loaded the machine. */
typedef struct gm_io_fault {
    uint64_t eio_at, short_at, stall_at, wedge_at;
    uint32_t stall_ms;
    bool stall_speculative, stall_all;
    bool virtual_clock;
} gm_io_fault;

typedef struct gm_io_opts {
    gm_io_backend backend;    /* AUTO: io_uring when built and allowed, else pread */
    uint32_t queue_depth;     /* reads on the device at once; default 32, 1..4096 */
    uint32_t demand_reserve;  /* device slots speculative reads leave to demand reads; default
                                 queue_depth / 4 (at least 1 when queue_depth >= 2); < queue_depth */
    uint32_t capacity;        /* reads accepted and not yet returned by gm_io_wait; default
                                 4 x queue_depth; queue_depth..65536 */
    uint32_t n_threads;       /* pread pool size; default 8, 1..1024 */
    uint32_t destroy_wait_ms; /* how long destroy waits for reads on the device; default 5000 */
    const gm_io_fault *fault; /* NULL in production */
} gm_io_opts;

/* Counters since creation (owner thread). */
typedef struct gm_io_stats {
    uint64_t n_done;          /* reads returned by gm_io_wait */
    uint64_t bytes_done;      /* bytes of the reads that succeeded */
    uint64_t n_errors;        /* reads that completed with -errno other than -ECANCELED */
    uint64_t n_cancelled;     /* reads that completed with -ECANCELED */
    uint64_t n_short_retries; /* kernel short reads that were continued */
    uint64_t n_abandoned;     /* reads given up on (gm_io_abandon, destroy) */
} gm_io_stats;

/* Creates a read queue. o may be NULL (defaults). GM_EINVAL for an option out of range,
 * GM_EUNSUPPORTED when GM_IO_URING is asked for but not built or refused by the kernel (AUTO then
 * falls back to pread), GM_ENOMEM / GM_EIO when memory or a thread cannot be had. */
int gm_io_create(gm_io **out, const gm_io_opts *o, gm_err *err);

/* Cancels everything queued or on the device and waits for it, at most destroy_wait_ms; reads
 * still running then are abandoned (their threads detached, their state leaked until they
 * end). Returns how many reads were abandoned: when > 0, the buffers of every read not returned
 * by gm_io_wait may still be written and must never be freed. NULL is ignored (returns 0). */
uint32_t gm_io_destroy(gm_io *io);

/* "io_uring" or "pread". */
const char *gm_io_backend_name(const gm_io *io);

/* Accepts n reads (all or none); never blocks on the disk. GM_EINVAL for a bad request (zero
 * length, NULL buffer, fd not open, O_DIRECT fd with a misaligned offset/length/buffer, bad
 * prio), naming the request; GM_ERANGE when the reads do not fit the free slots (see
 * gm_io_free_slots) or a length is above GM_IO_MAX_READ_BYTES. */
int gm_io_submit(gm_io *io, const gm_io_req *reqs, uint32_t n, gm_err *err);

/* Waits until at least min(min_done, max, reads in flight) completions are available or
 * timeout_ms passes (-1 = no timeout, 0 = poll), then returns up to max of them in done[] (in
 * completion order) and their count in *n_done. A timeout is not an error: *n_done is then
 * smaller than min_done. */
int gm_io_wait(gm_io *io, gm_io_done *done, uint32_t max, uint32_t min_done, int timeout_ms,
               uint32_t *n_done, gm_err *err);

/* Best effort: a queued read completes at once with -ECANCELED; one on the device is asked to
 * stop and completes with -ECANCELED or its real result. Every read with that user value is
 * affected. GM_ENOTFOUND when no such read is queued or on the device. */
int gm_io_cancel(gm_io *io, uint64_t user);

/* Gives up on reads with that user value that are queued or on the device (a read presumed stuck
 * in the kernel): they will not be returned by gm_io_wait, no longer count as in flight, and the
 * pread pool starts one more thread for each one on the device. Their request slots stay taken
 * until the kernel lets go. The buffer may still be written later: never free or reuse it.
 * GM_ENOTFOUND when no such read is queued or on the device. */
int gm_io_abandon(gm_io *io, uint64_t user);

/* Reads accepted and not yet returned by gm_io_wait (abandoned ones excluded). */
uint32_t gm_io_in_flight(const gm_io *io);
/* The clock timeouts on this queue's reads are measured on, in seconds: CLOCK_MONOTONIC, or the
 * fault layer's virtual clock (tests). NULL: CLOCK_MONOTONIC. */
double gm_io_clock_s(const gm_io *io);

/* How many reads of that priority gm_io_submit would accept now. */
uint32_t gm_io_free_slots(const gm_io *io, gm_io_prio prio);

void gm_io_get_stats(const gm_io *io, gm_io_stats *out);

/* Opens path O_RDONLY|O_DIRECT|O_CLOEXEC; where the filesystem refuses O_DIRECT (tmpfs), opens it
 * buffered and sets *direct_out = false. GM_ENOTFOUND when path does not exist, GM_EIO when it
 * cannot be opened. */
int gm_io_open_direct(const char *path, int *fd_out, bool *direct_out, gm_err *err);

/* The file offset alignment O_DIRECT needs on fd: statx stx_dio_offset_align when the kernel
 * reports it, else 4096. (gm_io_submit still asks GM_IO_DIRECT_ALIGN of O_DIRECT requests.) */
uint32_t gm_io_dio_align(int fd);

/* Anonymous mmap'd memory, page aligned, zero filled; NULL when bytes is 0 or memory is short.
 * Free with the same byte count. */
void *gm_io_alloc_aligned(uint64_t bytes);
void gm_io_free_aligned(void *p, uint64_t bytes);

#endif
