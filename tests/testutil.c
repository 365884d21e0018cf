#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *gm_fixture(const char *rel)
{
    static _Thread_local char buf[4096]; /* per thread: tests call these from workers too */
    const char *base = getenv("GMLX_FIXTURES");
    snprintf(buf, sizeof buf, "%s/%s", base ? base : "tests/fixtures", rel);
    return buf;
}

const char *gm_fixture_cached(const char *rel)
{
    static _Thread_local char buf[4096]; /* per thread: tests call these from workers too */
    const char *base = getenv("GMLX_FIXTURE_CACHE");
    snprintf(buf, sizeof buf, "%s/%s", base ? base : ".fixtures", rel);
    struct stat st;
    if (stat(buf, &st) != 0)
        return NULL;
    return buf;
}

static int g_skipped, g_unavailable;

void gm_test_skipped(const char *rel)
{
    g_skipped++;
    fprintf(stderr, "skip: %s not fetched (run scripts/fetch-fixtures.sh)\n", rel);
}

void gm_test_unavailable(const char *what, const char *why)
{
    g_unavailable++;
    fprintf(stderr, "skip: %s is not available here (%s); its cases did not run\n", what, why);
}

int gm_test_exit(int failed)
{
    if (failed)
        return failed;
    if (g_skipped)
        fprintf(stderr, "%d fixture%s missing: the work that needs %s was skipped\n", g_skipped,
                g_skipped == 1 ? "" : "s", g_skipped == 1 ? "it" : "them");
    if (g_unavailable)
        fprintf(stderr, "%d case%s skipped for what this machine lacks (see the skip: lines)\n", g_unavailable,
                g_unavailable == 1 ? "" : "s");
    return g_skipped || g_unavailable ? GM_TEST_SKIP : 0;
}

int gm_test_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && (strcmp(ci, "true") == 0 || strcmp(ci, "1") == 0);
}

static char g_tmpdir[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* The test's temporary directory goes at exit, whatever the test left in it. */
static void remove_tmpdir(void)
{
    if (g_tmpdir[0])
        nftw(g_tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *gm_test_tmpdir(void)
{
    if (!g_tmpdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s/gmlx-test-XXXXXX", t ? t : "/tmp");
        if (!mkdtemp(g_tmpdir)) {
            perror("mkdtemp");
            abort();
        }
        atexit(remove_tmpdir);
    }
    return g_tmpdir;
}

int gm_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    int rc = fclose(f);
    return (w == len && rc == 0) ? 0 : -1;
}

int gm_test_put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    if ((size_t)snprintf(path, sizeof path, "%s%s", root, rel) >= sizeof path)
        return -1;
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    return gm_write_file(path, text, strlen(text));
}

void *gm_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    void *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        ((char *)buf)[n] = '\0'; /* text files can be read as strings */
    if (buf && len)
        *len = (size_t)n;
    return buf;
}

int32_t *gm_read_ids(const char *path, uint32_t *n)
{
    size_t len;
    char *txt = gm_read_file(path, &len);
    int32_t *ids = txt ? malloc((len + 1) * sizeof *ids) : NULL;
    if (!ids) {
        free(txt);
        return NULL;
    }
    uint32_t k = 0;
    char *p = txt, *end;
    for (;;) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[k++] = (int32_t)v;
        p = end;
    }
    free(txt);
    *n = k;
    return ids;
}
