#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *gm_fixture(const char *rel)
{
    static char buf[4096];
    const char *base = getenv("GMLX_FIXTURES");
    snprintf(buf, sizeof buf, "%s/%s", base ? base : "tests/fixtures", rel);
    return buf;
}

const char *gm_fixture_cached(const char *rel)
{
    static char buf[4096];
    const char *base = getenv("GMLX_FIXTURE_CACHE");
    snprintf(buf, sizeof buf, "%s/%s", base ? base : ".fixtures", rel);
    struct stat st;
    if (stat(buf, &st) != 0)
        return NULL;
    return buf;
}

int gm_test_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && (strcmp(ci, "true") == 0 || strcmp(ci, "1") == 0);
}

const char *gm_test_tmpdir(void)
{
    static char buf[256];
    if (!buf[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(buf, sizeof buf, "%s/gmlx-test-XXXXXX", t ? t : "/tmp");
        if (!mkdtemp(buf)) {
            perror("mkdtemp");
            abort();
        }
    }
    return buf;
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
    if (buf && len)
        *len = (size_t)n;
    return buf;
}
