/* tests/testutil: helpers shared by the test programs (fixture paths, temp files, skipping). */
#ifndef GM_TESTUTIL_H
#define GM_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Exit status that ctest reports as "skipped" (SKIP_RETURN_CODE). */
#define GM_TEST_SKIP 77

/* Path of a committed fixture: $GMLX_FIXTURES/rel (tests/fixtures), in a buffer of the calling
 * thread that the next call on that thread reuses. */
const char *gm_fixture(const char *rel);

/* Path of a fetched fixture ($GMLX_FIXTURE_CACHE/rel), or NULL when it is not there. Under CI
 * (CI=true) a missing fetched fixture is a failure, not a skip: the caller must then fail. */
const char *gm_fixture_cached(const char *rel);

/* Notes that a test skipped its work, or part of it, because the fetched fixture rel is missing,
 * and says so with what to run. */
void gm_test_skipped(const char *rel);

/* Notes that cases were not run because this machine or kernel lacks what (io_uring, ...): the
 * program then ends as skipped, not passed, also under CI. */
void gm_test_unavailable(const char *what, const char *why);

/* A test program's exit status from cmocka's count of failed tests: that count when nonzero,
 * else GM_TEST_SKIP when gm_test_skipped or gm_test_unavailable was called (ctest then shows the
 * program as skipped, not passed), else 0. */
int gm_test_exit(int failed);

/* True when running under CI (environment CI=true). */
int gm_test_in_ci(void);

/* A fresh temporary directory for this test process, removed with what is left in it when the
 * process exits normally (a crashed test leaves it for inspection). Static buffer. */
const char *gm_test_tmpdir(void);

/* Writes len bytes to path; returns 0 on success. */
int gm_write_file(const char *path, const void *data, size_t len);

/* Writes text to root followed by rel (which starts with '/'), making the directories on the
 * way (a fake /proc or /sys tree under a temporary root); returns 0 on success. */
int gm_test_put(const char *root, const char *rel, const char *text);

/* Reads the whitespace-separated token ids of a file (malloc'd, their count in *n); NULL when the
 * file cannot be read. */
int32_t *gm_read_ids(const char *path, uint32_t *n);

/* Reads a whole file into a malloc'd buffer (a NUL after its bytes); returns NULL on failure. */
void *gm_read_file(const char *path, size_t *len);

#endif
