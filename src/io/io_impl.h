/* io/io_impl: what the front end (io.c), the backends (io_pread.c, io_uring.c) and the fault layer
 * (io_fault.c) share. Not for use outside src/io.
 *
 * Owns: the gm_io struct, its request slots and the backend interface. The front end keeps the
 * software queues and counters; a backend only ever sees slots the front end handed to it with
 * start(), and reports each exactly once through gm_io_impl_complete() from the owner thread
 * (inside reap()).
 *
 * Threads: everything here runs on the owner thread; a backend's own threads never touch
 * struct gm_io.
 */
#ifndef GM_IO_IMPL_H
#define GM_IO_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "io/io.h"

#define GM_IO_NIL UINT32_MAX

/* Fault flags carried by a slot (tests only; 0 in production). */
enum {
    GM_IO_FAULT_EIO = 1u << 0,
    GM_IO_FAULT_SHORT = 1u << 1,
    GM_IO_FAULT_STALL = 1u << 2,
    GM_IO_FAULT_WEDGE = 1u << 3,
};

typedef enum gm_io_slot_state {
    GM_IO_SLOT_FREE = 0,
    GM_IO_SLOT_QUEUED,    /* in the front end's demand or speculative list */
    GM_IO_SLOT_DEVICE,    /* handed to the backend */
    GM_IO_SLOT_READY,     /* completed, in the ready ring */
    GM_IO_SLOT_ABANDONED, /* on the device but forgotten; freed when the backend reports it */
    GM_IO_SLOT_HELD,      /* counted on the device, held back until the virtual clock reaches its
                             release (a stall on the fault layer's virtual clock) */
} gm_io_slot_state;

typedef struct gm_io_slot {
    gm_io_req req;
    int64_t result;
    uint32_t state; /* gm_io_slot_state */
    uint32_t gen;   /* bumped at each accept, so stale backend events cannot match */
    uint32_t prev, next; /* links of the free list (next only) or a queue list */
    uint32_t fault;      /* GM_IO_FAULT_* */
    int64_t release_ns;  /* HELD: the virtual time it goes to the device */
} gm_io_slot;

typedef struct gm_io_list {
    uint32_t head, tail, count;
} gm_io_list;

typedef struct gm_io_ops {
    const char *name;
    int (*init)(gm_io *io, gm_err *err);
    /* Takes slot s to the device; cannot fail (errors come back as completions). */
    void (*start)(gm_io *io, uint32_t s);
    /* Makes started reads and cancels visible to the device. */
    void (*flush)(gm_io *io);
    /* Reports finished reads with gm_io_impl_complete. With block, first waits until at least one
     * finishes or deadline_ns (CLOCK_MONOTONIC; < 0 = none) passes. */
    void (*reap)(gm_io *io, bool block, int64_t deadline_ns);
    /* Asks the device to stop slot s (best effort; it still completes). */
    void (*cancel)(gm_io *io, uint32_t s);
    /* Slot s was abandoned: it still completes later (or never). */
    void (*abandon)(gm_io *io, uint32_t s);
    /* Frees the backend; reads still running are left to finish on their own. */
    void (*fini)(gm_io *io);
} gm_io_ops;

struct gm_io {
    const gm_io_ops *ops;
    void *be; /* backend state */

    uint32_t depth, reserve, cap, spec_cap, n_threads, destroy_wait_ms;
    bool has_fault;
    gm_io_fault fault;
    uint64_t n_submitted; /* reads accepted so far (the fault layer counts these) */

    gm_io_slot *slots; /* [cap] */
    uint32_t free_head, n_free;
    gm_io_list demand, spec;     /* QUEUED slots */
    uint32_t *ready;             /* [cap] ring of READY slots in completion order */
    uint32_t ready_head, ready_count;

    uint32_t n_accepted;      /* QUEUED + DEVICE + READY */
    uint32_t n_spec_accepted; /* the speculative ones among them */
    uint32_t n_device;        /* DEVICE */
    uint32_t n_zombie;        /* ABANDONED */
    uint32_t n_held;          /* HELD (also counted in n_device) */
    int64_t vnow_ns;          /* the virtual clock (fault.virtual_clock) */
    gm_io_stats stats;
};

/* The backend reports slot s finished with result (bytes or -errno) after n_retries short-read
 * continuations. */
void gm_io_impl_complete(gm_io *io, uint32_t s, int64_t result, uint32_t n_retries);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t gm_io_now_ns(void);

/* Fault layer (io_fault.c). */
uint32_t gm_io_fault_tag(gm_io *io, gm_io_prio prio); /* flags for the read being accepted */
uint64_t gm_io_fault_short_len(uint64_t len);         /* the cut of a SHORT fault */
/* Rewrites the kernel's answer res for a read of len bytes (first answer only when first). */
int64_t gm_io_fault_result(uint32_t fault, bool first, uint64_t len, int64_t res);

/* True when a kernel short read that ended at offset end of fd is the end of the file (so the
 * count is final) rather than a reason to read on. */
bool gm_io_at_eof(int fd, uint64_t end);

extern const gm_io_ops gm_io_pread_ops;
#ifdef GM_IO_HAVE_URING
extern const gm_io_ops gm_io_uring_ops;
#endif

#endif
