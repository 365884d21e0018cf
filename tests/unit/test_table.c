/* stream/table: lookup-table rows gathered from a file are the file's bytes, bit for bit, in both
 * modes (pread through the page cache; O_DIRECT spans, where the filesystem allows it) and both
 * read backends: rows that straddle 4 KiB boundaries, the first and last rows, repeats, a table
 * at an odd offset ending at the file's last byte. And the failures: a row outside the table,
 * too many rows, a table past the end of the file, a read error; and the gather in two steps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stream/table.h"
#include "testutil.h"

/* A table of 1000 rows of 200 bytes at byte 4097 of a file that ends with it. */
#define OFFSET 4097ull
#define ROW 200ull
#define ROWS 1000ull

static uint8_t *g_file;
static char g_path[4096];

static int setup(void **state)
{
    (void)state;
    const uint64_t bytes = OFFSET + ROW * ROWS;
    g_file = malloc(bytes);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < bytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g_file[i] = (uint8_t)x;
    }
    snprintf(g_path, sizeof g_path, "%s/table.bin", gm_test_tmpdir());
    return gm_write_file(g_path, g_file, bytes);
}

static int teardown(void **state)
{
    (void)state;
    free(g_file);
    return 0;
}

static void check_mode(gm_table_mode mode, gm_io_backend backend)
{
    gm_table *t = NULL;
    gm_err err = {0};
    gm_table_opts o = {.mode = mode, .max_rows = 24, .backend = backend};
    int rc = gm_table_open(&t, g_path, OFFSET, ROW, ROWS, &o, &err);
    if (rc == GM_EUNSUPPORTED && backend == GM_IO_URING) {
        gm_test_unavailable("io_uring", err.msg);
        return;
    }
    assert_int_equal(rc, 0);
    print_message("mode %d backend %d: O_DIRECT %s\n", (int)mode, (int)backend, gm_table_direct(t) ? "yes" : "no");
    uint8_t out[24 * ROW];
    for (int round = 0; round < 50; round++) {
        int64_t rows[24];
        for (int i = 0; i < 24; i++)
            rows[i] = (int64_t)((uint64_t)(round * 7919 + i * 104729) % ROWS);
        rows[0] = 0;
        rows[1] = (int64_t)ROWS - 1;
        rows[2] = rows[3]; /* a repeat */
        const uint32_t n = 1 + (uint32_t)round % 24;
        memset(out, 0xa5, sizeof out);
        assert_int_equal(gm_table_gather(t, rows, n, out, &err), 0);
        for (uint32_t i = 0; i < n; i++)
            if (memcmp(out + i * ROW, g_file + OFFSET + (uint64_t)rows[i] * ROW, ROW) != 0)
                fail_msg("mode %d: row %lld differs from the file's", (int)mode, (long long)rows[i]);
    }
    gm_table_stats st;
    gm_table_get_stats(t, &st);
    assert_int_equal(st.gathers, 50);
    assert_true(st.bytes_read >= st.rows * ROW);
    gm_table_close(t);
}

static void test_gather_pread(void **state)
{
    (void)state;
    check_mode(GM_TABLE_PREAD, GM_IO_AUTO);
}

static void test_gather_direct(void **state)
{
    (void)state;
    check_mode(GM_TABLE_DIRECT, GM_IO_PREAD);
    check_mode(GM_TABLE_DIRECT, GM_IO_URING);
}

static void test_errors(void **state)
{
    (void)state;
    gm_table *t = NULL;
    gm_err err = {0};
    /* a table past the end of the file */
    assert_int_equal(gm_table_open(&t, g_path, OFFSET + 1, ROW, ROWS, NULL, &err), GM_EFORMAT);
    assert_null(t);
    print_message("%s\n", err.msg);
    gm_err_clear(&err);
    assert_int_equal(gm_table_open(&t, "/nonexistent/table.bin", 0, ROW, 1, NULL, &err), GM_ENOTFOUND);
    assert_int_equal(gm_table_open(&t, g_path, 0, 0, ROWS, NULL, &err), GM_EINVAL);
    assert_int_equal(gm_table_open(&t, g_path, 0, UINT64_MAX / 2, 4, NULL, &err), GM_EINVAL);
    for (int m = 0; m < 2; m++) {
        gm_table_opts o = {.mode = m ? GM_TABLE_DIRECT : GM_TABLE_PREAD, .max_rows = 4, .backend = GM_IO_PREAD};
        assert_int_equal(gm_table_open(&t, g_path, OFFSET, ROW, ROWS, &o, &err), 0);
        uint8_t out[5 * ROW];
        const int64_t outside[] = {1, (int64_t)ROWS}, negative[] = {-1}, five[] = {1, 2, 3, 4, 5};
        gm_err_clear(&err);
        assert_int_equal(gm_table_gather(t, outside, 2, out, &err), GM_ERANGE);
        print_message("%s\n", err.msg);
        assert_non_null(strstr(err.msg, "row 1000 is outside"));
        assert_int_equal(gm_table_gather(t, negative, 1, out, &err), GM_ERANGE);
        assert_int_equal(gm_table_gather(t, five, 5, out, &err), GM_ERANGE);
        gm_table_close(t);
    }
    /* a read that fails: an error value naming the row, and the table still usable */
    gm_io_fault f = {.eio_at = 2};
    gm_table_opts o = {.mode = GM_TABLE_DIRECT, .max_rows = 4, .backend = GM_IO_PREAD, .fault = &f};
    assert_int_equal(gm_table_open(&t, g_path, OFFSET, ROW, ROWS, &o, &err), 0);
    const int64_t rows[] = {10, 20, 30};
    uint8_t out[3 * ROW];
    gm_err_clear(&err);
    assert_int_equal(gm_table_gather(t, rows, 3, out, &err), GM_EIO);
    print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "row 20"));
    gm_err_clear(&err);
    assert_int_equal(gm_table_gather(t, rows, 3, out, &err), 0);
    assert_memory_equal(out + ROW, g_file + OFFSET + 20 * ROW, ROW);
    gm_table_close(t);
}

/* A gather in two steps (start, then finish after other work) gives the same rows; a start left
 * without its finish (its caller failed) is waited for and dropped by the next start; a finish
 * without a start is an error, in both modes. */
static void test_start_finish(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        gm_table *t = NULL;
        gm_err err = {0};
        gm_table_opts o = {.mode = m ? GM_TABLE_DIRECT : GM_TABLE_PREAD, .max_rows = 8, .backend = GM_IO_PREAD};
        assert_int_equal(gm_table_open(&t, g_path, OFFSET, ROW, ROWS, &o, &err), 0);
        uint8_t out[8 * ROW];
        assert_int_equal(gm_table_finish(t, out, &err), GM_EINVAL);
        const int64_t first[] = {5, 6, 7}, rows[] = {999, 0, 500, 500, 21};
        assert_int_equal(gm_table_start(t, first, 3, &err), 0); /* never finished */
        assert_int_equal(gm_table_start(t, rows, 5, &err), 0);
        memset(out, 0xa5, sizeof out);
        assert_int_equal(gm_table_finish(t, out, &err), 0);
        for (uint32_t i = 0; i < 5; i++)
            assert_memory_equal(out + i * ROW, g_file + OFFSET + (uint64_t)rows[i] * ROW, ROW);
        assert_int_equal(gm_table_finish(t, out, &err), GM_EINVAL);
        const int64_t outside[] = {(int64_t)ROWS};
        assert_int_equal(gm_table_start(t, outside, 1, &err), GM_ERANGE);
        assert_int_equal(gm_table_finish(t, out, &err), GM_EINVAL); /* a refused start leaves none */
        gm_table_close(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_pread),
        cmocka_unit_test(test_start_finish),
        cmocka_unit_test(test_gather_direct),
        cmocka_unit_test(test_errors),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
