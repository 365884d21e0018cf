/* The text buffer library code formats into: appends, growth past the first allocation, printf
 * that matches snprintf byte for byte, take and reset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"

static void test_empty_take(void **state)
{
    (void)state;
    gm_strbuf b = GM_STRBUF_INIT;
    char *s = gm_strbuf_take(&b);
    assert_non_null(s); /* nothing said is "", not a failure */
    assert_string_equal(s, "");
    free(s);
    assert_null(b.data);
    gm_strbuf_free(&b);
    gm_strbuf_free(NULL);
}

static void test_appends(void **state)
{
    (void)state;
    gm_strbuf b = GM_STRBUF_INIT;
    gm_strbuf_putc(&b, '\'');
    gm_strbuf_puts(&b, "a\\n");
    gm_strbuf_put(&b, "xyz", 2);
    gm_strbuf_put(&b, NULL, 0);
    gm_strbuf_putf(&b, "[%s x %d] %.9g%%", "u8", 3, (double)0.1f);
    gm_strbuf_putc(&b, '\'');
    assert_false(b.failed);
    assert_int_equal(b.len, strlen(b.data));
    char *s = gm_strbuf_take(&b);
    assert_string_equal(s, "'a\\nxy[u8 x 3] 0.100000001%'");
    free(s);
}

/* Long texts grow the buffer (and take the second formatting pass); each piece is exactly what
 * snprintf makes of the same format. */
static void test_growth_matches_snprintf(void **state)
{
    (void)state;
    gm_strbuf b = GM_STRBUF_INIT;
    char *want = calloc(1, 1 << 20);
    assert_non_null(want);
    size_t n = 0;
    for (int i = 0; i < 2000; i++) {
        char line[512];
        int m = snprintf(line, sizeof line, "[stream] %d: %.3f GB %s|%*d\n", i, i / 7.0,
                         i % 3 ? "O_DIRECT" : "buffered", i % 300, i);
        gm_strbuf_putf(&b, "[stream] %d: %.3f GB %s|%*d\n", i, i / 7.0, i % 3 ? "O_DIRECT" : "buffered",
                       i % 300, i);
        memcpy(want + n, line, (size_t)m);
        n += (size_t)m;
    }
    assert_false(b.failed);
    assert_int_equal(b.len, n);
    assert_true(b.cap > b.len);
    assert_memory_equal(b.data, want, n);
    assert_int_equal(b.data[b.len], '\0');
    gm_strbuf_free(&b);
    free(want);
}

static void test_reserve_reset(void **state)
{
    (void)state;
    gm_strbuf b = GM_STRBUF_INIT;
    assert_true(gm_strbuf_reserve(&b, 1000));
    char *data = b.data;
    size_t cap = b.cap;
    assert_true(cap >= 1001);
    for (int i = 0; i < 100; i++)
        gm_strbuf_putf(&b, "%d ", i % 10);
    assert_ptr_equal(b.data, data); /* within the reserve: no reallocation */
    assert_int_equal(b.len, 200);
    gm_strbuf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(b.cap, cap);
    gm_strbuf_puts(&b, "again");
    assert_string_equal(b.data, "again");
    gm_strbuf_free(&b);
}

/* A failure is sticky: later appends do nothing and take answers NULL (and empties the buffer). */
static void test_sticky_failure(void **state)
{
    (void)state;
    gm_strbuf b = GM_STRBUF_INIT;
    gm_strbuf_puts(&b, "kept");
    assert_false(gm_strbuf_reserve(&b, SIZE_MAX - 2));
    assert_true(b.failed);
    assert_string_equal(b.data, "kept"); /* what came before is intact until take */
    gm_strbuf_puts(&b, "lost");
    gm_strbuf_putf(&b, "%d", 1);
    assert_string_equal(b.data, "kept");
    assert_null(gm_strbuf_take(&b));
    assert_null(b.data);
    assert_false(b.failed); /* emptied: ready for new text */
    gm_strbuf_puts(&b, "new");
    char *s = gm_strbuf_take(&b);
    assert_string_equal(s, "new");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_take),     cmocka_unit_test(test_appends),
        cmocka_unit_test(test_growth_matches_snprintf), cmocka_unit_test(test_reserve_reset),
        cmocka_unit_test(test_sticky_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
