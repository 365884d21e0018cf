/* io io_uring backend: one ring owned by the owner thread. Reads are IORING_OP_READ at the
 * caller's buffer; short reads are continued from here; speculative reads carry I/O priority
 * best-effort 7; cancels are IORING_OP_ASYNC_CANCEL. A stalled read of the fault layer is an
 * IORING_OP_TIMEOUT that stands in front of the read, so cancel and destroy see it as the
 * device would show a slow read.
 *
 * user_data: kind (8 bits) | slot generation (24 bits) | slot index (32 bits).
 */
#include "io/io_impl.h"

#include <errno.h>
#include <linux/ioprio.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

enum { UD_READ = 1, UD_TIMEOUT = 2, UD_CANCEL = 3 };

typedef struct uring_slot {
    uint64_t done; /* bytes read so far */
    uint32_t retries;
    bool first;    /* no answer from the kernel yet (the fault layer cuts the first one) */
    bool stalled;  /* a timeout stands in for the read */
    struct __kernel_timespec ts;
} uring_slot;

typedef struct uring_be {
    struct io_uring ring;
    uring_slot *s; /* [cap] */
} uring_be;

static uint64_t make_ud(uint32_t kind, uint32_t gen, uint32_t s)
{
    return (uint64_t)kind << 56 | (uint64_t)(gen & 0xffffffu) << 32 | s;
}

static uint32_t pow2_at_least(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

static int uring_init(gm_io *io, gm_err *err)
{
    uring_be *u = calloc(1, sizeof *u);
    if (!u)
        return gm_err_set(err, GM_ENOMEM, "io: out of memory");
    u->s = calloc(io->cap, sizeof *u->s);
    if (!u->s) {
        free(u);
        return gm_err_set(err, GM_ENOMEM, "io: out of memory");
    }
    /* Room for every slot's read plus one cancel each: completions never overflow. */
    struct io_uring_params par;
    memset(&par, 0, sizeof par);
    par.flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP;
    par.cq_entries = pow2_at_least(2 * io->cap + 8);
    uint32_t sq = pow2_at_least(2 * io->depth > 8 ? 2 * io->depth : 8);
    int rc = io_uring_queue_init_params(sq, &u->ring, &par);
    if (rc < 0) {
        free(u->s);
        free(u);
        return gm_err_errno(err, GM_EUNSUPPORTED, -rc, "io: io_uring cannot be set up here");
    }
    io->be = u;
    return 0;
}

static struct io_uring_sqe *get_sqe(uring_be *u)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
    }
    return sqe;
}

/* Sends (the rest of) slot s's read. */
static void issue_read(gm_io *io, uint32_t s)
{
    uring_be *u = io->be;
    const gm_io_slot *sl = &io->slots[s];
    uring_slot *us = &u->s[s];
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe) {
        gm_io_impl_complete(io, s, -EAGAIN, us->retries);
        return;
    }
    io_uring_prep_read(sqe, sl->req.fd, (char *)sl->req.buf + us->done,
                       (unsigned)(sl->req.len - us->done), sl->req.offset + us->done);
    if (sl->req.prio == GM_IO_SPECULATIVE)
        sqe->ioprio = IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7);
    io_uring_sqe_set_data64(sqe, make_ud(UD_READ, sl->gen, s));
}

static void uring_start(gm_io *io, uint32_t s)
{
    uring_be *u = io->be;
    const gm_io_slot *sl = &io->slots[s];
    uring_slot *us = &u->s[s];
    us->done = 0;
    us->retries = 0;
    us->first = true;
    us->stalled = false;
    if (sl->fault & (GM_IO_FAULT_STALL | GM_IO_FAULT_WEDGE)) {
        struct io_uring_sqe *sqe = get_sqe(u);
        if (sqe) {
            us->stalled = true;
            us->ts.tv_sec = io->fault.stall_ms / 1000;
            us->ts.tv_nsec = (long long)(io->fault.stall_ms % 1000) * 1000000;
            io_uring_prep_timeout(sqe, &us->ts, 0, 0);
            io_uring_sqe_set_data64(sqe, make_ud(UD_TIMEOUT, sl->gen, s));
            return;
        }
    }
    issue_read(io, s);
}

static void uring_flush(gm_io *io)
{
    uring_be *u = io->be;
    if (io_uring_sq_ready(&u->ring) > 0)
        io_uring_submit(&u->ring);
}

static void handle(gm_io *io, uint64_t ud, int32_t res)
{
    uring_be *u = io->be;
    uint32_t kind = (uint32_t)(ud >> 56);
    uint32_t s = (uint32_t)ud;
    if ((kind != UD_READ && kind != UD_TIMEOUT) || s >= io->cap)
        return; /* cancel results, liburing's own timeouts */
    gm_io_slot *sl = &io->slots[s];
    uring_slot *us = &u->s[s];
    if ((sl->gen & 0xffffffu) != ((ud >> 32) & 0xffffffu) ||
        (sl->state != GM_IO_SLOT_DEVICE && sl->state != GM_IO_SLOT_ABANDONED))
        return;
    bool live = sl->state == GM_IO_SLOT_DEVICE;
    if (kind == UD_TIMEOUT) {
        us->stalled = false;
        if (res == -ECANCELED || !live)
            gm_io_impl_complete(io, s, -ECANCELED, 0);
        else
            issue_read(io, s); /* the stall is over (-ETIME) */
        return;
    }
    int64_t r = res;
    if (sl->fault)
        r = gm_io_fault_result(sl->fault, us->first, sl->req.len, r);
    us->first = false;
    if (r == -EINTR && live) {
        issue_read(io, s);
        return;
    }
    if (r < 0) {
        gm_io_impl_complete(io, s, r, us->retries);
        return;
    }
    us->done += (uint64_t)r;
    if (r == 0 || us->done >= sl->req.len || !live ||
        gm_io_at_eof(sl->req.fd, sl->req.offset + us->done)) {
        gm_io_impl_complete(io, s, (int64_t)us->done, us->retries);
        return;
    }
    us->retries++;
    issue_read(io, s);
}

/* Handles every completion the ring holds now; returns how many. */
static uint32_t drain(gm_io *io)
{
    uring_be *u = io->be;
    uint32_t total = 0;
    for (;;) {
        struct io_uring_cqe *cqes[64];
        unsigned n = io_uring_peek_batch_cqe(&u->ring, cqes, 64);
        if (n == 0)
            break;
        uint64_t ud[64];
        int32_t res[64];
        for (unsigned i = 0; i < n; i++) {
            ud[i] = cqes[i]->user_data;
            res[i] = cqes[i]->res;
        }
        io_uring_cq_advance(&u->ring, n);
        for (unsigned i = 0; i < n; i++)
            handle(io, ud[i], res[i]);
        total += n;
    }
    return total;
}

static void uring_reap(gm_io *io, bool block, int64_t deadline_ns)
{
    uring_be *u = io->be;
    uint32_t n = drain(io);
    if (n == 0 && block) {
        struct io_uring_cqe *cqe = NULL;
        struct __kernel_timespec ts, *tsp = NULL;
        if (deadline_ns >= 0) {
            int64_t left = deadline_ns - gm_io_now_ns();
            if (left < 0)
                left = 0;
            ts.tv_sec = left / 1000000000;
            ts.tv_nsec = left % 1000000000;
            tsp = &ts;
        }
        io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, tsp, NULL);
        drain(io);
    }
    uring_flush(io); /* continuations of short reads, reads after a stall */
}

static void send_cancel(gm_io *io, uint32_t s)
{
    uring_be *u = io->be;
    const gm_io_slot *sl = &io->slots[s];
    uring_slot *us = &u->s[s];
    if (us->stalled && (sl->fault & GM_IO_FAULT_WEDGE))
        return; /* a read stuck in the kernel hears no cancel */
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return;
    io_uring_prep_cancel64(sqe, make_ud(us->stalled ? UD_TIMEOUT : UD_READ, sl->gen, s), 0);
    io_uring_sqe_set_data64(sqe, make_ud(UD_CANCEL, 0, 0));
}

static void uring_cancel(gm_io *io, uint32_t s)
{
    send_cancel(io, s);
}

static void uring_abandon(gm_io *io, uint32_t s)
{
    send_cancel(io, s); /* the ring has no thread to replace; the slot is freed when it ends */
}

static void uring_fini(gm_io *io)
{
    uring_be *u = io->be;
    /* Closing the ring cancels what is left; the kernel finishes that in its own context. */
    io_uring_queue_exit(&u->ring);
    free(u->s);
    free(u);
    io->be = NULL;
}

const gm_io_ops gm_io_uring_ops = {
    .name = "io_uring",
    .init = uring_init,
    .start = uring_start,
    .flush = uring_flush,
    .reap = uring_reap,
    .cancel = uring_cancel,
    .abandon = uring_abandon,
    .fini = uring_fini,
};
