/* io front end: options, request slots, the demand and speculative queues, dispatch to the
 * backend, completions; and the file and buffer helpers. See io.h. */
#include "io/io_impl.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GM_IO_DEFAULT_DEPTH 32u
#define GM_IO_MAX_DEPTH 4096u
#define GM_IO_MAX_CAPACITY 65536u
#define GM_IO_DEFAULT_THREADS 8u
#define GM_IO_MAX_THREADS 1024u
#define GM_IO_DEFAULT_DESTROY_WAIT_MS 5000u /* the spec's wedge timeout (GMLX_DECODE_READ_TIMEOUT) */

int64_t gm_io_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- slot lists ---- */

static void list_init(gm_io_list *l)
{
    l->head = l->tail = GM_IO_NIL;
    l->count = 0;
}

static void list_push(gm_io *io, gm_io_list *l, uint32_t s)
{
    gm_io_slot *sl = &io->slots[s];
    sl->prev = l->tail;
    sl->next = GM_IO_NIL;
    if (l->tail != GM_IO_NIL)
        io->slots[l->tail].next = s;
    else
        l->head = s;
    l->tail = s;
    l->count++;
}

static void list_remove(gm_io *io, gm_io_list *l, uint32_t s)
{
    gm_io_slot *sl = &io->slots[s];
    if (sl->prev != GM_IO_NIL)
        io->slots[sl->prev].next = sl->next;
    else
        l->head = sl->next;
    if (sl->next != GM_IO_NIL)
        io->slots[sl->next].prev = sl->prev;
    else
        l->tail = sl->prev;
    sl->prev = sl->next = GM_IO_NIL;
    l->count--;
}

static uint32_t list_pop(gm_io *io, gm_io_list *l)
{
    uint32_t s = l->head;
    if (s != GM_IO_NIL)
        list_remove(io, l, s);
    return s;
}

static void slot_free(gm_io *io, uint32_t s)
{
    gm_io_slot *sl = &io->slots[s];
    sl->state = GM_IO_SLOT_FREE;
    sl->next = io->free_head;
    io->free_head = s;
    io->n_free++;
}

static uint32_t slot_alloc(gm_io *io)
{
    uint32_t s = io->free_head;
    assert(s != GM_IO_NIL);
    io->free_head = io->slots[s].next;
    io->n_free--;
    return s;
}

/* The read left the caller's books (returned, or abandoned). */
static void slot_unaccount(gm_io *io, uint32_t s)
{
    io->n_accepted--;
    if (io->slots[s].req.prio == GM_IO_SPECULATIVE)
        io->n_spec_accepted--;
}

static void ready_push(gm_io *io, uint32_t s)
{
    io->slots[s].state = GM_IO_SLOT_READY;
    io->ready[(io->ready_head + io->ready_count) % io->cap] = s;
    io->ready_count++;
}

void gm_io_impl_complete(gm_io *io, uint32_t s, int64_t result, uint32_t n_retries)
{
    gm_io_slot *sl = &io->slots[s];
    io->stats.n_short_retries += n_retries;
    if (sl->state == GM_IO_SLOT_ABANDONED) {
        io->n_zombie--;
        slot_free(io, s);
        return;
    }
    assert(sl->state == GM_IO_SLOT_DEVICE);
    sl->result = result;
    io->n_device--;
    ready_push(io, s);
}

/* Moves queued reads to the device: demand first; speculative only while the demand reserve
 * stays free. */
static void dispatch(gm_io *io)
{
    bool started = false;
    while (io->n_device < io->depth) {
        uint32_t s = list_pop(io, &io->demand);
        if (s == GM_IO_NIL) {
            if (io->spec.count == 0 || io->n_device >= io->depth - io->reserve)
                break;
            s = list_pop(io, &io->spec);
        }
        gm_io_slot *sl = &io->slots[s];
        io->n_device++;
        if (io->fault.virtual_clock && (sl->fault & (GM_IO_FAULT_STALL | GM_IO_FAULT_WEDGE))) {
            sl->state = GM_IO_SLOT_HELD;
            sl->release_ns = io->vnow_ns + (int64_t)io->fault.stall_ms * 1000000;
            io->n_held++;
            continue;
        }
        sl->state = GM_IO_SLOT_DEVICE;
        io->ops->start(io, s);
        started = true;
    }
    if (started)
        io->ops->flush(io);
}

/* The virtual clock (fault.virtual_clock): reads held back whose release has come go to the
 * device as plain reads. */
static void release_held(gm_io *io)
{
    bool started = false;
    for (uint32_t s = 0; s < io->cap && io->n_held > 0; s++) {
        gm_io_slot *sl = &io->slots[s];
        if (sl->state != GM_IO_SLOT_HELD || sl->release_ns > io->vnow_ns)
            continue;
        sl->fault &= ~(uint32_t)(GM_IO_FAULT_STALL | GM_IO_FAULT_WEDGE);
        sl->state = GM_IO_SLOT_DEVICE;
        io->n_held--;
        io->ops->start(io, s);
        started = true;
    }
    if (started)
        io->ops->flush(io);
}

/* Every read in flight is held back: the virtual clock moves to the next release, or to
 * deadline_ns (virtual; < 0: none) when that comes first. False when it reached the deadline. */
static bool advance_clock(gm_io *io, int64_t deadline_ns)
{
    int64_t next = INT64_MAX;
    for (uint32_t s = 0; s < io->cap; s++)
        if (io->slots[s].state == GM_IO_SLOT_HELD && io->slots[s].release_ns < next)
            next = io->slots[s].release_ns;
    if (deadline_ns >= 0 && deadline_ns < next) {
        if (deadline_ns > io->vnow_ns)
            io->vnow_ns = deadline_ns;
        return false;
    }
    io->vnow_ns = next;
    release_held(io);
    return true;
}

double gm_io_clock_s(const gm_io *io)
{
    return (io && io->fault.virtual_clock ? io->vnow_ns : gm_io_now_ns()) * 1e-9;
}

/* ---- create / destroy ---- */

static int init_backend(gm_io *io, gm_io_backend which, gm_err *err)
{
    if (which == GM_IO_URING || which == GM_IO_AUTO) {
#ifdef GM_IO_HAVE_URING
        gm_err tmp = {0};
        io->ops = &gm_io_uring_ops;
        int rc = io->ops->init(io, which == GM_IO_AUTO ? &tmp : err);
        if (rc == 0)
            return 0;
        if (which == GM_IO_URING)
            return rc;
#else
        if (which == GM_IO_URING)
            return gm_err_set(err, GM_EUNSUPPORTED, "io: this build has no io_uring backend "
                                                    "(liburing was not found)");
#endif
    }
    io->ops = &gm_io_pread_ops;
    return io->ops->init(io, err);
}

int gm_io_create(gm_io **out, const gm_io_opts *o, gm_err *err)
{
    if (!out)
        return gm_err_set(err, GM_EINVAL, "io: gm_io_create needs an output pointer");
    *out = NULL;
    gm_io_opts d = {0};
    if (o)
        d = *o;
    if (d.backend != GM_IO_AUTO && d.backend != GM_IO_URING && d.backend != GM_IO_PREAD)
        return gm_err_set(err, GM_EINVAL, "io: unknown backend %d", (int)d.backend);
    if (d.queue_depth == 0)
        d.queue_depth = GM_IO_DEFAULT_DEPTH;
    if (d.queue_depth > GM_IO_MAX_DEPTH)
        return gm_err_set(err, GM_EINVAL, "io: queue depth %u is above %u", d.queue_depth,
                          GM_IO_MAX_DEPTH);
    if (d.demand_reserve == 0 && d.queue_depth >= 2) {
        d.demand_reserve = d.queue_depth / 4;
        if (d.demand_reserve == 0)
            d.demand_reserve = 1;
    }
    if (d.demand_reserve >= d.queue_depth)
        return gm_err_set(err, GM_EINVAL,
                          "io: demand reserve %u must be below the queue depth %u",
                          d.demand_reserve, d.queue_depth);
    if (d.capacity == 0)
        d.capacity = 4 * d.queue_depth;
    if (d.capacity < d.queue_depth || d.capacity > GM_IO_MAX_CAPACITY)
        return gm_err_set(err, GM_EINVAL, "io: capacity %u must be in %u..%u (queue depth..)",
                          d.capacity, d.queue_depth, GM_IO_MAX_CAPACITY);
    if (d.n_threads == 0)
        d.n_threads = GM_IO_DEFAULT_THREADS;
    if (d.n_threads > GM_IO_MAX_THREADS)
        return gm_err_set(err, GM_EINVAL, "io: %u read threads is above %u", d.n_threads,
                          GM_IO_MAX_THREADS);
    if (d.destroy_wait_ms == 0)
        d.destroy_wait_ms = GM_IO_DEFAULT_DESTROY_WAIT_MS;

    gm_io *io = calloc(1, sizeof *io);
    if (!io)
        return gm_err_set(err, GM_ENOMEM, "io: out of memory");
    io->depth = d.queue_depth;
    io->reserve = d.demand_reserve;
    io->cap = d.capacity;
    io->spec_cap = d.capacity - d.queue_depth;
    io->n_threads = d.n_threads;
    io->destroy_wait_ms = d.destroy_wait_ms;
    if (d.fault) {
        io->fault = *d.fault;
        io->has_fault = true;
    }
    io->slots = calloc(io->cap, sizeof *io->slots);
    io->ready = calloc(io->cap, sizeof *io->ready);
    if (!io->slots || !io->ready) {
        free(io->slots);
        free(io->ready);
        free(io);
        return gm_err_set(err, GM_ENOMEM, "io: out of memory for %u request slots", d.capacity);
    }
    io->free_head = GM_IO_NIL;
    for (uint32_t s = io->cap; s-- > 0;) {
        io->slots[s].prev = GM_IO_NIL;
        slot_free(io, s);
    }
    list_init(&io->demand);
    list_init(&io->spec);

    int rc = init_backend(io, d.backend, err);
    if (rc != 0) {
        free(io->slots);
        free(io->ready);
        free(io);
        return rc;
    }
    *out = io;
    return 0;
}

uint32_t gm_io_destroy(gm_io *io)
{
    if (!io)
        return 0;
    uint32_t s;
    while ((s = list_pop(io, &io->demand)) != GM_IO_NIL)
        slot_free(io, s);
    while ((s = list_pop(io, &io->spec)) != GM_IO_NIL)
        slot_free(io, s);
    for (s = 0; s < io->cap; s++) {
        if (io->slots[s].state == GM_IO_SLOT_HELD) {
            io->n_held--;
            io->n_device--;
            slot_free(io, s);
        } else if (io->slots[s].state == GM_IO_SLOT_DEVICE) {
            io->ops->cancel(io, s);
        }
    }
    io->ops->flush(io);
    int64_t deadline = gm_io_now_ns() + (int64_t)io->destroy_wait_ms * 1000000;
    while (io->n_device + io->n_zombie > 0 && gm_io_now_ns() < deadline)
        io->ops->reap(io, true, deadline);
    uint32_t abandoned = io->n_device + io->n_zombie;
    io->ops->fini(io);
    free(io->slots);
    free(io->ready);
    free(io);
    return abandoned;
}

const char *gm_io_backend_name(const gm_io *io)
{
    return io ? io->ops->name : "none";
}

/* ---- submit / wait / cancel ---- */

static int check_req(const gm_io_req *r, uint32_t i, int *last_fd, int *last_flags, gm_err *err)
{
    if (r->prio != GM_IO_DEMAND && r->prio != GM_IO_SPECULATIVE)
        return gm_err_set(err, GM_EINVAL, "io: request %u: unknown priority %d", i, (int)r->prio);
    if (r->len == 0)
        return gm_err_set(err, GM_EINVAL, "io: request %u: zero length at offset %llu", i,
                          (unsigned long long)r->offset);
    if (r->len > GM_IO_MAX_READ_BYTES)
        return gm_err_set(err, GM_ERANGE, "io: request %u: length %llu is above the %llu-byte "
                          "limit of one read", i, (unsigned long long)r->len,
                          (unsigned long long)GM_IO_MAX_READ_BYTES);
    if (!r->buf)
        return gm_err_set(err, GM_EINVAL, "io: request %u: no buffer", i);
    if (r->offset > (uint64_t)INT64_MAX - r->len)
        return gm_err_set(err, GM_ERANGE, "io: request %u: offset %llu + length %llu is past the "
                          "largest file offset", i, (unsigned long long)r->offset,
                          (unsigned long long)r->len);
    if (r->fd < 0)
        return gm_err_set(err, GM_EINVAL, "io: request %u: fd %d is not open", i, r->fd);
    if (r->fd != *last_fd) {
        int fl = fcntl(r->fd, F_GETFL);
        if (fl < 0)
            return gm_err_errno(err, GM_EINVAL, errno, "io: request %u: fd %d", i, r->fd);
        *last_fd = r->fd;
        *last_flags = fl;
    }
    if ((*last_flags & O_DIRECT) &&
        ((r->offset | r->len | (uint64_t)(uintptr_t)r->buf) & (GM_IO_DIRECT_ALIGN - 1)))
        return gm_err_set(err, GM_EINVAL, "io: request %u: O_DIRECT read (fd %d) at offset %llu, "
                          "length %llu, buffer %p is not %u-byte aligned", i, r->fd,
                          (unsigned long long)r->offset, (unsigned long long)r->len, r->buf,
                          GM_IO_DIRECT_ALIGN);
    return 0;
}

uint32_t gm_io_free_slots(const gm_io *io, gm_io_prio prio)
{
    if (!io)
        return 0;
    if (prio != GM_IO_SPECULATIVE)
        return io->n_free;
    uint32_t spec_room = io->spec_cap - io->n_spec_accepted;
    return spec_room < io->n_free ? spec_room : io->n_free;
}

int gm_io_submit(gm_io *io, const gm_io_req *reqs, uint32_t n, gm_err *err)
{
    if (!io)
        return gm_err_set(err, GM_EINVAL, "io: submit on no queue");
    if (n == 0)
        return 0;
    if (!reqs)
        return gm_err_set(err, GM_EINVAL, "io: submit of %u reads without requests", n);
    int last_fd = -1, last_flags = 0;
    uint32_t n_spec = 0;
    for (uint32_t i = 0; i < n; i++) {
        int rc = check_req(&reqs[i], i, &last_fd, &last_flags, err);
        if (rc != 0)
            return rc;
        n_spec += reqs[i].prio == GM_IO_SPECULATIVE;
    }
    if (n > io->n_free)
        return gm_err_set(err, GM_ERANGE, "io: %u reads submitted but only %u of %u request "
                          "slots are free", n, io->n_free, io->cap);
    if (n_spec > io->spec_cap - io->n_spec_accepted)
        return gm_err_set(err, GM_ERANGE, "io: %u speculative reads submitted but only %u more "
                          "may be in flight (%u of %u slots are kept for demand reads)", n_spec,
                          io->spec_cap - io->n_spec_accepted, io->cap - io->spec_cap, io->cap);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = slot_alloc(io);
        gm_io_slot *sl = &io->slots[s];
        sl->req = reqs[i];
        sl->result = 0;
        sl->gen++;
        sl->state = GM_IO_SLOT_QUEUED;
        io->n_submitted++;
        sl->fault = io->has_fault ? gm_io_fault_tag(io, sl->req.prio) : 0;
        io->n_accepted++;
        if (sl->req.prio == GM_IO_SPECULATIVE) {
            io->n_spec_accepted++;
            list_push(io, &io->spec, s);
        } else {
            list_push(io, &io->demand, s);
        }
    }
    dispatch(io);
    return 0;
}

int gm_io_wait(gm_io *io, gm_io_done *done, uint32_t max, uint32_t min_done, int timeout_ms,
               uint32_t *n_done, gm_err *err)
{
    if (n_done)
        *n_done = 0;
    if (!io || !n_done || (!done && max > 0) || timeout_ms < -1)
        return gm_err_set(err, GM_EINVAL, "io: bad arguments to gm_io_wait");
    uint32_t target = min_done;
    if (target > max)
        target = max;
    if (target > io->n_accepted)
        target = io->n_accepted;
    const bool virt = io->fault.virtual_clock;
    int64_t deadline = timeout_ms < 0 ? -1 : (virt ? io->vnow_ns : gm_io_now_ns()) + (int64_t)timeout_ms * 1000000;
    io->ops->reap(io, false, 0);
    dispatch(io);
    while (io->ready_count < target && io->n_device > 0) {
        if (virt) {
            /* the clock stands while a read is on the device: wait for it without a deadline */
            if (io->n_device == io->n_held) {
                if (!advance_clock(io, deadline))
                    break;
            } else {
                io->ops->reap(io, true, -1);
            }
            dispatch(io);
            continue;
        }
        if (deadline >= 0 && gm_io_now_ns() >= deadline)
            break;
        io->ops->reap(io, true, deadline);
        dispatch(io);
    }
    uint32_t k = 0;
    while (k < max && io->ready_count > 0) {
        uint32_t s = io->ready[io->ready_head];
        io->ready_head = (io->ready_head + 1) % io->cap;
        io->ready_count--;
        gm_io_slot *sl = &io->slots[s];
        done[k].user = sl->req.user;
        done[k].result = sl->result;
        k++;
        io->stats.n_done++;
        if (sl->result >= 0)
            io->stats.bytes_done += (uint64_t)sl->result;
        else if (sl->result == -ECANCELED)
            io->stats.n_cancelled++;
        else
            io->stats.n_errors++;
        slot_unaccount(io, s);
        slot_free(io, s);
    }
    *n_done = k;
    return 0;
}

int gm_io_cancel(gm_io *io, uint64_t user)
{
    if (!io)
        return GM_EINVAL;
    bool found = false, sent = false;
    for (uint32_t s = 0; s < io->cap; s++) {
        gm_io_slot *sl = &io->slots[s];
        if (sl->req.user != user)
            continue;
        if (sl->state == GM_IO_SLOT_QUEUED) {
            list_remove(io, sl->req.prio == GM_IO_SPECULATIVE ? &io->spec : &io->demand, s);
            sl->result = -ECANCELED;
            ready_push(io, s);
            found = true;
        } else if (sl->state == GM_IO_SLOT_DEVICE) {
            io->ops->cancel(io, s);
            found = sent = true;
        } else if (sl->state == GM_IO_SLOT_HELD) {
            found = true;
            if (sl->fault & GM_IO_FAULT_WEDGE)
                continue; /* deaf to cancel, as a read stuck in the kernel */
            io->n_held--;
            io->n_device--;
            sl->result = -ECANCELED;
            ready_push(io, s);
        }
    }
    if (sent)
        io->ops->flush(io);
    return found ? 0 : GM_ENOTFOUND;
}

int gm_io_abandon(gm_io *io, uint64_t user)
{
    if (!io)
        return GM_EINVAL;
    bool found = false;
    for (uint32_t s = 0; s < io->cap; s++) {
        gm_io_slot *sl = &io->slots[s];
        if (sl->req.user != user)
            continue;
        if (sl->state == GM_IO_SLOT_QUEUED) {
            list_remove(io, sl->req.prio == GM_IO_SPECULATIVE ? &io->spec : &io->demand, s);
            slot_unaccount(io, s);
            slot_free(io, s);
        } else if (sl->state == GM_IO_SLOT_HELD) {
            /* never reached the device: nothing can land later */
            io->n_held--;
            io->n_device--;
            slot_unaccount(io, s);
            slot_free(io, s);
        } else if (sl->state == GM_IO_SLOT_DEVICE) {
            sl->state = GM_IO_SLOT_ABANDONED;
            io->n_device--;
            io->n_zombie++;
            slot_unaccount(io, s);
            io->ops->abandon(io, s);
        } else {
            continue;
        }
        io->stats.n_abandoned++;
        found = true;
    }
    if (found) {
        io->ops->flush(io);
        dispatch(io);
    }
    return found ? 0 : GM_ENOTFOUND;
}

uint32_t gm_io_in_flight(const gm_io *io)
{
    return io ? io->n_accepted : 0;
}

void gm_io_get_stats(const gm_io *io, gm_io_stats *out)
{
    if (!out)
        return;
    if (!io) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = io->stats;
}

/* ---- helpers ---- */

bool gm_io_at_eof(int fd, uint64_t end)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return true; /* cannot tell: report what was read rather than spin */
    return st.st_size >= 0 && end >= (uint64_t)st.st_size;
}

int gm_io_open_direct(const char *path, int *fd_out, bool *direct_out, gm_err *err)
{
    if (!path || !fd_out)
        return gm_err_set(err, GM_EINVAL, "io: gm_io_open_direct needs a path and an fd");
    *fd_out = -1;
    if (direct_out)
        *direct_out = false;
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    bool direct = true;
    if (fd < 0 && errno == EINVAL) { /* the filesystem refuses O_DIRECT (tmpfs, some FUSE) */
        fd = open(path, O_RDONLY | O_CLOEXEC);
        direct = false;
    }
    if (fd < 0) {
        int e = errno;
        return gm_err_errno(err, e == ENOENT ? GM_ENOTFOUND : GM_EIO, e, "%s", path);
    }
    *fd_out = fd;
    if (direct_out)
        *direct_out = direct;
    return 0;
}

uint32_t gm_io_dio_align(int fd)
{
#ifdef STATX_DIOALIGN
    struct statx stx;
    memset(&stx, 0, sizeof stx);
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN) &&
        stx.stx_dio_offset_align > 0)
        return stx.stx_dio_offset_align;
#else
    (void)fd;
#endif
    return 4096;
}

static uint64_t page_round(uint64_t bytes)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

void *gm_io_alloc_aligned(uint64_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX / 2)
        return NULL;
    void *p = mmap(NULL, (size_t)page_round(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void gm_io_free_aligned(void *p, uint64_t bytes)
{
    if (p && bytes > 0)
        munmap(p, (size_t)page_round(bytes));
}
