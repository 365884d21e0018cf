/* Tests of src/io: both backends read random ranges of a file with known content (O_DIRECT and
 * buffered), many reads in flight, demand before speculative, end of file, the fault layer (EIO,
 * short read, stall, wedge), cancel, abandon, destroy with reads in flight, bad arguments.
 *
 * The test file lives on a real filesystem ($GMLX_IO_TEST_DIR, else /var/tmp), because /tmp may
 * be tmpfs, which refuses O_DIRECT; where O_DIRECT is refused anyway its part is skipped with a
 * message. No test depends on how fast anything is: stalls that must outlast a step are long
 * (60 s) and ended by cancel or by destroy. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/io.h"
#include "testutil.h"

#define FILE_BYTES (4u * 1024 * 1024 + 1000) /* not a multiple of 4096: the tail tests EOF */
#define MAX_READ (256u * 1024)
#define LONG_STALL_MS 60000u

typedef struct fixture {
    char dir[512];
    char path[600];
    int fd_buf;    /* buffered */
    int fd_direct; /* O_DIRECT, or -1 when the filesystem refuses it */
} fixture;

static fixture g;

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint8_t byte_at(uint64_t off)
{
    return (uint8_t)(mix64(off >> 3) >> ((off & 7) * 8));
}

static int check_content(const uint8_t *p, uint64_t off, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != byte_at(off + i))
            return 0;
    return 1;
}

static uint64_t rng_state = 12345;
static uint64_t rnd(void)
{
    rng_state = mix64(rng_state);
    return rng_state;
}

static int setup_file(void **state)
{
    (void)state;
    const char *base = getenv("GMLX_IO_TEST_DIR");
    snprintf(g.dir, sizeof g.dir, "%s/gmlx-io-test-XXXXXX", base && *base ? base : "/var/tmp");
    if (!mkdtemp(g.dir)) {
        fprintf(stderr, "test_io: cannot make a folder under %s\n", base ? base : "/var/tmp");
        return -1;
    }
    snprintf(g.path, sizeof g.path, "%s/data.bin", g.dir);
    uint8_t *data = malloc(FILE_BYTES);
    if (!data)
        return -1;
    for (uint64_t i = 0; i < FILE_BYTES; i++)
        data[i] = byte_at(i);
    FILE *f = fopen(g.path, "wb");
    int ok = f && fwrite(data, 1, FILE_BYTES, f) == FILE_BYTES;
    if (f && fclose(f) != 0)
        ok = 0;
    free(data);
    if (!ok)
        return -1;
    g.fd_buf = open(g.path, O_RDONLY | O_CLOEXEC);
    bool direct = false;
    gm_err err = {0};
    if (gm_io_open_direct(g.path, &g.fd_direct, &direct, &err) != 0)
        return -1;
    if (!direct) {
        fprintf(stderr, "test_io: %s refuses O_DIRECT; skipping the O_DIRECT parts\n", g.dir);
        close(g.fd_direct);
        g.fd_direct = -1;
    }
    return g.fd_buf >= 0 ? 0 : -1;
}

static int teardown_file(void **state)
{
    (void)state;
    if (g.fd_buf >= 0)
        close(g.fd_buf);
    if (g.fd_direct >= 0)
        close(g.fd_direct);
    unlink(g.path);
    rmdir(g.dir);
    return 0;
}

static const gm_io_backend k_backends[] = {GM_IO_PREAD, GM_IO_URING};
#define N_BACKENDS 2

/* A queue of backend b, or NULL (with a message) when this build or kernel has no io_uring. */
static gm_io *make_io(gm_io_backend b, gm_io_opts o)
{
    o.backend = b;
    gm_io *io = NULL;
    gm_err err = {0};
    int rc = gm_io_create(&io, &o, &err);
    if (rc == GM_EUNSUPPORTED && b == GM_IO_URING) {
        gm_test_unavailable("io_uring", err.msg);
        return NULL;
    }
    if (rc != 0)
        fail_msg("gm_io_create: %s", err.msg);
    assert_string_equal(gm_io_backend_name(io), b == GM_IO_URING ? "io_uring" : "pread");
    return io;
}

static gm_io_req req(int fd, uint64_t off, uint64_t len, void *buf, uint64_t user, gm_io_prio prio)
{
    gm_io_req r = {.fd = fd, .offset = off, .len = len, .buf = buf, .user = user, .prio = prio};
    return r;
}

static void submit_ok(gm_io *io, const gm_io_req *r, uint32_t n)
{
    gm_err err = {0};
    int rc = gm_io_submit(io, r, n, &err);
    if (rc != 0)
        fail_msg("gm_io_submit: %s", err.msg);
}

/* Waits for exactly one completion (no timeout). */
static gm_io_done wait_one(gm_io *io)
{
    gm_io_done d = {0};
    uint32_t n = 0;
    gm_err err = {0};
    assert_int_equal(gm_io_wait(io, &d, 1, 1, -1, &n, &err), 0);
    assert_int_equal(n, 1);
    return d;
}

/* ---- random reads, many in flight ---- */

static void random_reads(gm_io_backend b, bool direct)
{
    gm_io_opts o = {.queue_depth = 8, .capacity = 32, .n_threads = 4};
    gm_io *io = make_io(b, o);
    if (!io)
        return;
    const uint32_t n_bufs = 32, slack = 4096;
    uint8_t *mem = gm_io_alloc_aligned((uint64_t)n_bufs * (MAX_READ + slack));
    assert_non_null(mem);
    uint64_t want_off[32], want_len[32];
    uint8_t *want_buf[32];
    uint32_t free_bufs[32], n_free = n_bufs;
    for (uint32_t i = 0; i < n_bufs; i++)
        free_bufs[i] = i;

    const uint32_t total = 300;
    uint32_t issued = 0, completed = 0, max_in_flight = 0;
    int fd = direct ? g.fd_direct : g.fd_buf;
    while (completed < total) {
        /* Fill every free slot (in batches of up to 8) before waiting, so more than the queue
         * depth is in flight. */
        while (issued < total && n_free > 0) {
            gm_io_req batch[8];
            uint32_t nb = 0, n_spec = 0;
            while (issued + nb < total && nb < 8 && n_free > 0) {
                gm_io_prio prio = (rnd() & 1) ? GM_IO_SPECULATIVE : GM_IO_DEMAND;
                if (prio == GM_IO_SPECULATIVE &&
                    n_spec + 1 > gm_io_free_slots(io, GM_IO_SPECULATIVE))
                    prio = GM_IO_DEMAND;
                uint32_t bi = free_bufs[--n_free];
                uint64_t len, off;
                uint8_t *buf = mem + (uint64_t)bi * (MAX_READ + slack);
                if (direct) {
                    len = 4096 * (1 + rnd() % (MAX_READ / 4096));
                    off = 4096 * (rnd() % ((FILE_BYTES - len) / 4096 + 1));
                } else {
                    len = 1 + rnd() % MAX_READ;
                    off = rnd() % (FILE_BYTES - len + 1);
                    buf += rnd() % slack;
                }
                memset(buf, 0xEE, len);
                want_off[bi] = off;
                want_len[bi] = len;
                want_buf[bi] = buf;
                n_spec += prio == GM_IO_SPECULATIVE;
                batch[nb++] = req(fd, off, len, buf, bi, prio);
            }
            submit_ok(io, batch, nb);
            issued += nb;
        }
        if (gm_io_in_flight(io) > max_in_flight)
            max_in_flight = gm_io_in_flight(io);
        gm_io_done done[16];
        uint32_t nd = 0;
        gm_err err = {0};
        assert_int_equal(gm_io_wait(io, done, 16, 1, -1, &nd, &err), 0);
        for (uint32_t i = 0; i < nd; i++) {
            uint32_t bi = (uint32_t)done[i].user;
            assert_true(bi < n_bufs);
            assert_int_equal(done[i].result, (int64_t)want_len[bi]);
            assert_true(check_content(want_buf[bi], want_off[bi], want_len[bi]));
            free_bufs[n_free++] = bi;
            completed++;
        }
    }
    assert_int_equal(gm_io_in_flight(io), 0);
    assert_true(max_in_flight > 8); /* more than the queue depth was accepted at once */
    gm_io_stats st;
    gm_io_get_stats(io, &st);
    assert_int_equal(st.n_done, total);
    assert_int_equal(st.n_errors, 0);
    assert_int_equal(gm_io_destroy(io), 0);
    gm_io_free_aligned(mem, (uint64_t)n_bufs * (MAX_READ + slack));
}

static void test_random_reads(void **state)
{
    (void)state;
    for (int i = 0; i < N_BACKENDS; i++) {
        random_reads(k_backends[i], false);
        if (g.fd_direct >= 0)
            random_reads(k_backends[i], true);
    }
}

/* ---- priorities ---- */

/* The one device slot open to speculative reads is held by a stalled speculative read; two more
 * wait behind it. A demand read submitted after them must come back first. */
static void test_demand_before_speculative(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        gm_io_fault f = {.stall_at = 1, .stall_ms = LONG_STALL_MS};
        gm_io_opts o = {.queue_depth = 2, .demand_reserve = 1, .capacity = 8, .n_threads = 2,
                        .fault = &f};
        gm_io *io = make_io(k_backends[bi], o);
        if (!io)
            continue;
        uint8_t *buf = gm_io_alloc_aligned(4 * 65536);
        gm_io_req r[4];
        for (int i = 0; i < 3; i++)
            r[i] = req(g.fd_buf, 65536 * (uint64_t)i, 65536, buf + 65536 * i, 10 + i,
                       GM_IO_SPECULATIVE);
        submit_ok(io, r, 3);
        r[3] = req(g.fd_buf, 3 * 65536, 65536, buf + 3 * 65536, 99, GM_IO_DEMAND);
        submit_ok(io, &r[3], 1);
        gm_io_done d = wait_one(io);
        assert_int_equal(d.user, 99);
        assert_int_equal(d.result, 65536);
        assert_true(check_content(buf + 3 * 65536, 3 * 65536, 65536));
        /* Release the stalled read; the speculative ones then follow. */
        assert_int_equal(gm_io_cancel(io, 10), 0);
        int seen = 0;
        for (int i = 0; i < 3; i++) {
            d = wait_one(io);
            if (d.user == 10) {
                assert_int_equal(d.result, -ECANCELED);
            } else {
                assert_true(d.user == 11 || d.user == 12);
                assert_int_equal(d.result, 65536);
            }
            seen |= 1 << (d.user - 10);
        }
        assert_int_equal(seen, 7);
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 4 * 65536);
    }
}

/* Inside the pread pool (all four reads fit on the "device", so the front end holds nothing
 * back): with its one thread held by a stalled speculative read, a demand read queued after two
 * speculative ones is taken before them. */
static void test_pool_takes_demand_first(void **state)
{
    (void)state;
    gm_io_fault f = {.stall_at = 1, .stall_ms = LONG_STALL_MS};
    gm_io_opts o = {.queue_depth = 8, .demand_reserve = 1, .capacity = 16, .n_threads = 1,
                    .fault = &f};
    gm_io *io = make_io(GM_IO_PREAD, o);
    uint8_t *buf = gm_io_alloc_aligned(4 * 4096);
    gm_io_req r[4];
    for (int i = 0; i < 3; i++)
        r[i] = req(g.fd_buf, 4096 * (uint64_t)i, 4096, buf + 4096 * i, 10 + i, GM_IO_SPECULATIVE);
    r[3] = req(g.fd_buf, 3 * 4096, 4096, buf + 3 * 4096, 99, GM_IO_DEMAND);
    submit_ok(io, r, 3); /* the thread takes 10 and stalls, or has not started yet */
    submit_ok(io, &r[3], 1);
    assert_int_equal(gm_io_cancel(io, 10), 0);
    int pos[4] = {-1, -1, -1, -1}; /* completion position of 10, 11, 12, 99 */
    for (int i = 0; i < 4; i++) {
        gm_io_done d = wait_one(io);
        int k = d.user == 99 ? 3 : (int)d.user - 10;
        assert_true(k >= 0 && k < 4 && pos[k] < 0);
        pos[k] = i;
        assert_int_equal(d.result, k == 0 ? -ECANCELED : 4096);
    }
    assert_true(pos[3] < pos[1] && pos[1] < pos[2]);
    assert_int_equal(gm_io_destroy(io), 0);
    gm_io_free_aligned(buf, 4 * 4096);
}

/* The pread pool keeps threads for demand reads: with two threads, one holding a stalled
 * speculative read, the other does not take the next speculative read but waits for demand. */
static void test_pool_keeps_a_thread_for_demand(void **state)
{
    (void)state;
    gm_io_fault f = {.stall_at = 1, .stall_ms = LONG_STALL_MS};
    gm_io_opts o = {.queue_depth = 8, .demand_reserve = 2, .capacity = 16, .n_threads = 2,
                    .fault = &f};
    gm_io *io = make_io(GM_IO_PREAD, o);
    uint8_t *buf = gm_io_alloc_aligned(4 * 4096);
    gm_io_req r[4];
    for (int i = 0; i < 3; i++)
        r[i] = req(g.fd_buf, 4096 * (uint64_t)i, 4096, buf + 4096 * i, 10 + i, GM_IO_SPECULATIVE);
    r[3] = req(g.fd_buf, 3 * 4096, 4096, buf + 3 * 4096, 99, GM_IO_DEMAND);
    submit_ok(io, r, 3);
    gm_io_done d[4];
    uint32_t n = 9;
    assert_int_equal(gm_io_wait(io, d, 4, 1, 100, &n, NULL), 0);
    assert_int_equal(n, 0); /* 11 and 12 wait: one thread stays free for demand reads */
    submit_ok(io, &r[3], 1);
    d[0] = wait_one(io);
    assert_int_equal(d[0].user, 99);
    assert_int_equal(d[0].result, 4096);
    assert_int_equal(gm_io_cancel(io, 10), 0);
    assert_int_equal(gm_io_wait(io, d, 4, 3, -1, &n, NULL), 0);
    assert_int_equal(n, 3);
    assert_int_equal(gm_io_destroy(io), 0);
    gm_io_free_aligned(buf, 4 * 4096);
}

/* ---- end of file ---- */

static void eof_reads(gm_io_backend b, int fd)
{
    gm_io *io = make_io(b, (gm_io_opts){.queue_depth = 4});
    if (!io)
        return;
    uint64_t tail = FILE_BYTES % 4096; /* bytes after the last full page */
    uint64_t last_page = FILE_BYTES - tail;
    uint8_t *buf = gm_io_alloc_aligned(3 * 8192);
    gm_io_req r[3] = {
        req(fd, last_page, 4096, buf, 1, GM_IO_DEMAND),                 /* the tail only */
        req(fd, last_page - 4096, 8192, buf + 8192, 2, GM_IO_DEMAND),   /* a page and the tail */
        req(fd, last_page + 8192, 4096, buf + 16384, 3, GM_IO_DEMAND),  /* past the end */
    };
    submit_ok(io, r, 3);
    gm_io_done d[3];
    uint32_t n = 0;
    gm_err err = {0};
    assert_int_equal(gm_io_wait(io, d, 3, 3, -1, &n, &err), 0);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        switch (d[i].user) {
        case 1:
            assert_int_equal(d[i].result, (int64_t)tail);
            assert_true(check_content(buf, last_page, tail));
            break;
        case 2:
            assert_int_equal(d[i].result, (int64_t)(4096 + tail));
            assert_true(check_content(buf + 8192, last_page - 4096, 4096 + tail));
            break;
        default:
            assert_int_equal(d[i].result, 0);
        }
    }
    assert_int_equal(gm_io_destroy(io), 0);
    gm_io_free_aligned(buf, 3 * 8192);
}

static void test_eof_short_count(void **state)
{
    (void)state;
    for (int i = 0; i < N_BACKENDS; i++) {
        eof_reads(k_backends[i], g.fd_buf);
        if (g.fd_direct >= 0)
            eof_reads(k_backends[i], g.fd_direct);
    }
}

/* ---- fault layer ---- */

static void test_fault_eio(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        gm_io_fault f = {.eio_at = 3};
        gm_io *io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .fault = &f});
        if (!io)
            continue;
        uint8_t *buf = gm_io_alloc_aligned(5 * 8192);
        gm_io_req r[5];
        for (int i = 0; i < 5; i++)
            r[i] = req(g.fd_buf, 8192 * (uint64_t)i, 8192, buf + 8192 * i, (uint64_t)i + 1,
                       GM_IO_DEMAND);
        submit_ok(io, r, 5);
        gm_io_done d[5];
        uint32_t n = 0;
        gm_err err = {0};
        assert_int_equal(gm_io_wait(io, d, 5, 5, -1, &n, &err), 0);
        assert_int_equal(n, 5);
        for (int i = 0; i < 5; i++) {
            if (d[i].user == 3) {
                assert_int_equal(d[i].result, -EIO);
            } else {
                assert_int_equal(d[i].result, 8192);
                assert_true(check_content(buf + 8192 * (d[i].user - 1), 8192 * (d[i].user - 1), 8192));
            }
        }
        gm_io_stats st;
        gm_io_get_stats(io, &st);
        assert_int_equal(st.n_errors, 1);
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 5 * 8192);
    }
}

/* A short answer from the kernel is continued: the caller sees the whole read. */
static void short_read(gm_io_backend b, int fd)
{
    gm_io_fault f = {.short_at = 2};
    gm_io *io = make_io(b, (gm_io_opts){.queue_depth = 4, .fault = &f});
    if (!io)
        return;
    const uint64_t len = 65536;
    uint8_t *buf = gm_io_alloc_aligned(3 * len);
    gm_io_req r[3];
    for (int i = 0; i < 3; i++)
        r[i] = req(fd, 4096 + len * (uint64_t)i, len, buf + len * i, (uint64_t)i, GM_IO_DEMAND);
    submit_ok(io, r, 3);
    gm_io_done d[3];
    uint32_t n = 0;
    gm_err err = {0};
    assert_int_equal(gm_io_wait(io, d, 3, 3, -1, &n, &err), 0);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(d[i].result, (int64_t)len);
    assert_true(check_content(buf, 4096, 3 * len));
    gm_io_stats st;
    gm_io_get_stats(io, &st);
    assert_int_equal(st.n_short_retries, 1);
    assert_int_equal(gm_io_destroy(io), 0);
    gm_io_free_aligned(buf, 3 * len);
}

static void test_fault_short_read_retried(void **state)
{
    (void)state;
    for (int i = 0; i < N_BACKENDS; i++) {
        short_read(k_backends[i], g.fd_buf);
        if (g.fd_direct >= 0)
            short_read(k_backends[i], g.fd_direct);
    }
}

/* A stalled read does not complete within a wait's timeout (reported as a timeout, not an
 * error); cancel ends it with -ECANCELED. A queued read is cancelled at once. */
static void test_fault_stall_and_cancel(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        gm_io_fault f = {.stall_at = 1, .stall_ms = LONG_STALL_MS};
        gm_io *io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 1, .fault = &f});
        if (!io)
            continue;
        uint8_t *buf = gm_io_alloc_aligned(2 * 4096);
        gm_io_req r[2] = {req(g.fd_buf, 0, 4096, buf, 1, GM_IO_DEMAND),
                          req(g.fd_buf, 4096, 4096, buf + 4096, 2, GM_IO_DEMAND)};
        submit_ok(io, r, 2); /* read 2 waits in the queue: the depth is 1 */
        gm_io_done d[2];
        uint32_t n = 7;
        gm_err err = {0};
        assert_int_equal(gm_io_wait(io, d, 2, 1, 20, &n, &err), 0);
        assert_int_equal(n, 0);
        assert_int_equal(gm_io_in_flight(io), 2);
        assert_int_equal(gm_io_cancel(io, 12345), GM_ENOTFOUND);
        assert_int_equal(gm_io_cancel(io, 2), 0);
        assert_int_equal(gm_io_wait(io, d, 2, 0, 0, &n, &err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(d[0].user, 2);
        assert_int_equal(d[0].result, -ECANCELED);
        assert_int_equal(gm_io_cancel(io, 1), 0);
        d[0] = wait_one(io);
        assert_int_equal(d[0].user, 1);
        assert_int_equal(d[0].result, -ECANCELED);
        assert_int_equal(gm_io_in_flight(io), 0);
        assert_int_equal(gm_io_cancel(io, 1), GM_ENOTFOUND);
        gm_io_stats st;
        gm_io_get_stats(io, &st);
        assert_int_equal(st.n_cancelled, 2);
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 2 * 4096);
    }
}

/* The fault layer's virtual clock: a stalled read is held back and the clock moves only while
 * every read in flight is held, by the wait's timeout or up to the next release; a normal read in
 * flight keeps it still (however long the machine takes to serve it). A held stall ends on
 * cancel with -ECANCELED, a held wedge does not, and abandon drops either. */
static void test_fault_virtual_clock(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        gm_io_fault f = {.stall_at = 1, .stall_ms = 1000, .virtual_clock = true};
        gm_io *io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .fault = &f});
        if (!io)
            continue;
        uint8_t *buf = gm_io_alloc_aligned(2 * 4096);
        gm_io_req r[2] = {req(g.fd_buf, 0, 4096, buf, 1, GM_IO_DEMAND),
                          req(g.fd_buf, 4096, 4096, buf + 4096, 2, GM_IO_DEMAND)};
        assert_true(gm_io_clock_s(io) == 0.0);
        submit_ok(io, r, 2); /* 1 is held for 1 s of the virtual clock, 2 goes to the disk */
        gm_io_done d[2];
        uint32_t n = 7;
        gm_err err = {0};
        /* the normal read completes; the clock did not move while it was on the device */
        assert_int_equal(gm_io_wait(io, d, 2, 1, 5, &n, &err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(d[0].user, 2);
        assert_int_equal(d[0].result, 4096);
        assert_true(gm_io_clock_s(io) == 0.0);
        /* only the held read left: a 300 ms wait times out at exactly 0.3 s */
        assert_int_equal(gm_io_wait(io, d, 2, 1, 300, &n, &err), 0);
        assert_int_equal(n, 0);
        assert_true(gm_io_clock_s(io) > 0.2999 && gm_io_clock_s(io) < 0.3001);
        /* a longer wait: released at 1 s, read whole */
        assert_int_equal(gm_io_wait(io, d, 2, 1, 5000, &n, &err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(d[0].user, 1);
        assert_int_equal(d[0].result, 4096);
        assert_true(check_content(buf, 0, 4096));
        assert_true(gm_io_clock_s(io) > 0.9999 && gm_io_clock_s(io) < 1.0001);
        assert_int_equal(gm_io_destroy(io), 0);

        /* a held stall ends on cancel; a held wedge does not, abandon drops it */
        gm_io_fault w = {.stall_at = 1, .wedge_at = 2, .stall_ms = 1000, .virtual_clock = true};
        io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .fault = &w});
        assert_non_null(io);
        submit_ok(io, r, 2);
        assert_int_equal(gm_io_cancel(io, 1), 0);
        assert_int_equal(gm_io_cancel(io, 2), 0);
        assert_int_equal(gm_io_wait(io, d, 2, 0, 0, &n, &err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(d[0].user, 1);
        assert_int_equal(d[0].result, -ECANCELED);
        assert_int_equal(gm_io_in_flight(io), 1);
        assert_int_equal(gm_io_abandon(io, 2), 0);
        assert_int_equal(gm_io_in_flight(io), 0);
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 2 * 4096);
    }
}

/* Cancel of reads that are running normally: each still completes, either -ECANCELED or whole. */
static void test_cancel_running(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        gm_io *io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 8});
        if (!io)
            continue;
        const uint64_t len = 256 * 1024;
        uint8_t *buf = gm_io_alloc_aligned(8 * len);
        gm_io_req r[8];
        for (int i = 0; i < 8; i++)
            r[i] = req(g.fd_buf, len * (uint64_t)i, len, buf + len * i, (uint64_t)i, GM_IO_DEMAND);
        submit_ok(io, r, 8);
        for (int i = 0; i < 8; i++) {
            int rc = gm_io_cancel(io, (uint64_t)i);
            assert_true(rc == 0 || rc == GM_ENOTFOUND); /* ENOTFOUND: already done */
        }
        gm_io_done d[8];
        uint32_t n = 0;
        gm_err err = {0};
        assert_int_equal(gm_io_wait(io, d, 8, 8, -1, &n, &err), 0);
        assert_int_equal(n, 8);
        for (int i = 0; i < 8; i++) {
            if (d[i].result != -ECANCELED) {
                assert_int_equal(d[i].result, (int64_t)len);
                assert_true(check_content(buf + len * d[i].user, len * d[i].user, len));
            }
        }
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 8 * len);
    }
}

/* ---- destroy and abandon ---- */

static void test_destroy_with_reads_in_flight(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        /* Ordinary reads: cancelled or finished; nothing abandoned. */
        gm_io *io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .capacity = 32});
        if (!io)
            continue;
        const uint64_t len = 65536;
        uint8_t *buf = gm_io_alloc_aligned(32 * len);
        gm_io_req r[32];
        for (int i = 0; i < 32; i++)
            r[i] = req(g.fd_buf, len * (uint64_t)i, len, buf + len * i, (uint64_t)i,
                       i % 2 ? GM_IO_DEMAND : GM_IO_SPECULATIVE);
        submit_ok(io, r, 16);
        submit_ok(io, r + 16, 16);
        assert_int_equal(gm_io_destroy(io), 0);

        /* A stalled read (a slow device): destroy's cancel ends it. */
        gm_io_fault f = {.stall_at = 2, .stall_ms = LONG_STALL_MS};
        io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .fault = &f});
        submit_ok(io, r, 4);
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 32 * len);

        /* A wedged read (deaf to cancel): destroy gives up after destroy_wait_ms and says so.
         * Its buffer is never freed: the pread thread may still write it. A pread thread that
         * had not yet taken the read lets it go (0 abandoned): the wait before destroy makes
         * that unlikely, and a second try makes the check certain enough. */
        uint32_t left = 0;
        for (int attempt = 0; attempt < 3 && left == 0; attempt++) {
            gm_io_fault w = {.wedge_at = 1, .stall_ms = LONG_STALL_MS};
            io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .destroy_wait_ms = 50,
                                                      .fault = &w});
            uint8_t *leak = gm_io_alloc_aligned(4096);
            gm_io_req one = req(g.fd_buf, 0, 4096, leak, 1, GM_IO_DEMAND);
            submit_ok(io, &one, 1);
            gm_io_done d;
            uint32_t n = 0;
            assert_int_equal(gm_io_wait(io, &d, 1, 1, 100, &n, NULL), 0);
            assert_int_equal(n, 0);
            left = gm_io_destroy(io);
            assert_true(left <= 1);
        }
        assert_int_equal(left, 1);
    }
}

/* A wedged read is abandoned: it leaves the books, and the queue keeps working at full size
 * (the pread pool of one thread gets a second one). */
static void test_abandon_wedged(void **state)
{
    (void)state;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        gm_io_fault w = {.wedge_at = 1, .stall_ms = LONG_STALL_MS};
        gm_io *io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 1, .capacity = 4,
                                                          .n_threads = 1, .destroy_wait_ms = 50,
                                                          .fault = &w});
        if (!io)
            continue;
        uint8_t *leak = gm_io_alloc_aligned(4096); /* never freed: see io.h */
        gm_io_req one = req(g.fd_buf, 0, 4096, leak, 1, GM_IO_DEMAND);
        submit_ok(io, &one, 1);
        gm_io_done d[4];
        uint32_t n = 0;
        gm_err err = {0};
        assert_int_equal(gm_io_wait(io, d, 4, 1, 200, &n, &err), 0);
        assert_int_equal(n, 0);
        assert_int_equal(gm_io_abandon(io, 1), 0);
        assert_int_equal(gm_io_abandon(io, 1), GM_ENOTFOUND);
        assert_int_equal(gm_io_in_flight(io), 0);
        assert_int_equal(gm_io_free_slots(io, GM_IO_DEMAND), 3); /* its slot is still held */

        uint8_t *buf = gm_io_alloc_aligned(3 * 4096);
        gm_io_req r[3];
        for (int i = 0; i < 3; i++)
            r[i] = req(g.fd_buf, 4096 * (uint64_t)(i + 1), 4096, buf + 4096 * i, 10 + (uint64_t)i,
                       GM_IO_DEMAND);
        submit_ok(io, r, 3);
        assert_int_equal(gm_io_wait(io, d, 4, 3, -1, &n, &err), 0);
        assert_int_equal(n, 3);
        for (int i = 0; i < 3; i++)
            assert_int_equal(d[i].result, 4096);
        assert_true(check_content(buf, 4096, 3 * 4096));
        gm_io_stats st;
        gm_io_get_stats(io, &st);
        assert_int_equal(st.n_abandoned, 1);
        /* The zombie is still out there (a pread thread that had not yet taken the read when it
         * was abandoned lets it go at once: the 200 ms wait above makes that unlikely). */
        uint32_t left = gm_io_destroy(io);
        if (k_backends[bi] == GM_IO_URING)
            assert_int_equal(left, 1);
        else
            assert_true(left <= 1);
        gm_io_free_aligned(buf, 3 * 4096);
    }
}

/* ---- bad arguments ---- */

static void expect_submit(gm_io *io, gm_io_req r, int code, const char *needle)
{
    gm_err err = {0};
    assert_int_equal(gm_io_submit(io, &r, 1, &err), code);
    if (!strstr(err.msg, needle))
        fail_msg("error \"%s\" does not say \"%s\"", err.msg, needle);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_io *io = NULL;
    assert_int_equal(gm_io_create(&io, &(gm_io_opts){.queue_depth = 4, .demand_reserve = 4}, &err),
                     GM_EINVAL);
    assert_null(io);
    gm_err_clear(&err);
    assert_int_equal(gm_io_create(&io, &(gm_io_opts){.queue_depth = 8, .capacity = 4}, &err),
                     GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_io_create(&io, &(gm_io_opts){.backend = (gm_io_backend)7}, &err), GM_EINVAL);

    for (int bi = 0; bi < N_BACKENDS; bi++) {
        io = make_io(k_backends[bi], (gm_io_opts){.queue_depth = 4, .capacity = 8});
        if (!io)
            continue;
        uint8_t *buf = gm_io_alloc_aligned(16 * 4096);
        expect_submit(io, req(g.fd_buf, 0, 0, buf, 1, GM_IO_DEMAND), GM_EINVAL, "zero length");
        expect_submit(io, req(g.fd_buf, 0, 4096, NULL, 1, GM_IO_DEMAND), GM_EINVAL, "no buffer");
        expect_submit(io, req(-1, 0, 4096, buf, 1, GM_IO_DEMAND), GM_EINVAL, "not open");
        expect_submit(io, req(g.fd_buf, 0, GM_IO_MAX_READ_BYTES + 1, buf, 1, GM_IO_DEMAND),
                      GM_ERANGE, "limit");
        expect_submit(io, req(g.fd_buf, UINT64_MAX - 10, 4096, buf, 1, GM_IO_DEMAND), GM_ERANGE,
                      "past the largest");
        expect_submit(io, req(g.fd_buf, 0, 4096, buf, 1, (gm_io_prio)5), GM_EINVAL, "priority");
        int closed = dup(g.fd_buf);
        close(closed);
        expect_submit(io, req(closed, 0, 4096, buf, 1, GM_IO_DEMAND), GM_EINVAL, "fd");
        if (g.fd_direct >= 0) {
            expect_submit(io, req(g.fd_direct, 100, 4096, buf, 1, GM_IO_DEMAND), GM_EINVAL, "aligned");
            expect_submit(io, req(g.fd_direct, 0, 1000, buf, 1, GM_IO_DEMAND), GM_EINVAL, "aligned");
            expect_submit(io, req(g.fd_direct, 0, 4096, buf + 512, 1, GM_IO_DEMAND), GM_EINVAL,
                          "aligned");
        }
        /* Too many reads: all or nothing. */
        gm_io_req r[9];
        for (int i = 0; i < 9; i++)
            r[i] = req(g.fd_buf, 0, 4096, buf + 4096 * i, (uint64_t)i, GM_IO_DEMAND);
        gm_err_clear(&err);
        assert_int_equal(gm_io_submit(io, r, 9, &err), GM_ERANGE);
        assert_non_null(strstr(err.msg, "free"));
        assert_int_equal(gm_io_in_flight(io), 0);
        /* Speculative reads leave queue_depth slots to demand reads. */
        assert_int_equal(gm_io_free_slots(io, GM_IO_SPECULATIVE), 4);
        for (int i = 0; i < 5; i++)
            r[i].prio = GM_IO_SPECULATIVE;
        gm_err_clear(&err);
        assert_int_equal(gm_io_submit(io, r, 5, &err), GM_ERANGE);
        assert_non_null(strstr(err.msg, "speculative"));
        assert_int_equal(gm_io_in_flight(io), 0);
        /* A bad request in a batch rejects the batch. */
        r[2].len = 0;
        gm_err_clear(&err);
        assert_int_equal(gm_io_submit(io, r, 4, &err), GM_EINVAL);
        assert_non_null(strstr(err.msg, "request 2"));
        assert_int_equal(gm_io_in_flight(io), 0);

        uint32_t n = 0;
        gm_err_clear(&err);
        assert_int_equal(gm_io_wait(io, NULL, 4, 1, 0, &n, &err), GM_EINVAL);
        gm_err_clear(&err);
        assert_int_equal(gm_io_wait(io, NULL, 0, 0, -5, &n, &err), GM_EINVAL);
        /* Nothing in flight: a wait for one returns at once. */
        gm_io_done d;
        assert_int_equal(gm_io_wait(io, &d, 1, 1, -1, &n, NULL), 0);
        assert_int_equal(n, 0);
        assert_int_equal(gm_io_submit(io, NULL, 0, NULL), 0);
        assert_int_equal(gm_io_destroy(io), 0);
        gm_io_free_aligned(buf, 16 * 4096);
    }
    assert_int_equal(gm_io_destroy(NULL), 0);
}

/* ---- helpers ---- */

static void test_open_direct_and_alignment(void **state)
{
    (void)state;
    gm_err err = {0};
    int fd = -1;
    bool direct = true;
    assert_int_equal(gm_io_open_direct("/nonexistent/gmlx/x.gguf", &fd, &direct, &err),
                     GM_ENOTFOUND);
    assert_int_equal(fd, -1);

    uint32_t a = gm_io_dio_align(g.fd_buf);
    assert_true(a >= 1 && (a & (a - 1)) == 0);

    /* tmpfs refuses O_DIRECT: the helper falls back to a buffered fd and says so. */
    char shm[64];
    snprintf(shm, sizeof shm, "/dev/shm/gmlx-io-test-%d", (int)getpid());
    int w = open(shm, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (w < 0) {
        fprintf(stderr, "test_io: no /dev/shm here; skipping the tmpfs fallback check\n");
        return;
    }
    assert_int_equal(write(w, "hello", 5), 5);
    close(w);
    gm_err_clear(&err);
    assert_int_equal(gm_io_open_direct(shm, &fd, &direct, &err), 0);
    char b[8] = {0};
    assert_int_equal(pread(fd, b, 5, 0), 5);
    assert_string_equal(b, "hello");
    if (direct)
        fprintf(stderr, "test_io: /dev/shm accepts O_DIRECT here\n");
    close(fd);
    unlink(shm);

    void *p = gm_io_alloc_aligned(10000);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 4096, 0);
    gm_io_free_aligned(p, 10000);
    assert_null(gm_io_alloc_aligned(0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_reads),
        cmocka_unit_test(test_demand_before_speculative),
        cmocka_unit_test(test_pool_takes_demand_first),
        cmocka_unit_test(test_pool_keeps_a_thread_for_demand),
        cmocka_unit_test(test_eof_short_count),
        cmocka_unit_test(test_fault_eio),
        cmocka_unit_test(test_fault_short_read_retried),
        cmocka_unit_test(test_fault_stall_and_cancel),
        cmocka_unit_test(test_fault_virtual_clock),
        cmocka_unit_test(test_cancel_running),
        cmocka_unit_test(test_destroy_with_reads_in_flight),
        cmocka_unit_test(test_abandon_wedged),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_open_direct_and_alignment),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, setup_file, teardown_file));
}
