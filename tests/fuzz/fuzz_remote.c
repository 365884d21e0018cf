/* libFuzzer target for remote's parsers: the input is split at its first NUL-free line into a
 * model ref (gm_ref_parse), response header lines (gm_http_header_line, as libcurl hands them
 * over) and a hub listing (gm_hub_parse_listing). Each must give an error value or a result
 * that keeps its promises: a hub ref has a repo "ORG/REPO" and a .gguf path without "..", a
 * listing's entries have paths, a sha256 is 64 lowercase hex digits or empty. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_remote: %s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

static void check_hex(const char *s)
{
    size_t n = strlen(s);
    CHECK(n == 0 || (n == 64 && strspn(s, "0123456789abcdef") == 64));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* 1. the first line: a ref */
    size_t nl = 0;
    while (nl < size && data[nl] != '\n')
        nl++;
    char *ref_text = malloc(nl + 1);
    CHECK(ref_text != NULL);
    memcpy(ref_text, data, nl);
    ref_text[nl] = '\0';
    gm_ref r;
    gm_err err = {0};
    int rc = gm_ref_parse(ref_text, &r, &err);
    if (rc) {
        CHECK(rc == GM_EINVAL && err.msg[0]);
    } else if (r.kind == GM_REF_HUB_FILE) {
        CHECK(strchr(r.repo, '/') && strlen(r.path) > 5 && !strstr(r.path, "/../") && strncmp(r.path, "../", 3));
        char name[2048];
        gm_ref_hub_name(r.repo, r.rev, r.path, name, sizeof name);
        CHECK(strncmp(name, "hf://", 5) == 0);
    } else if (r.kind == GM_REF_HUB_QUANT) {
        CHECK(strchr(r.repo, '/') && r.quant[0]);
    } else if (r.kind == GM_REF_URL) {
        CHECK(r.url[0] && r.path[0]);
    }
    free(ref_text);
    if (nl >= size)
        return 0;
    data += nl + 1;
    size -= nl + 1;
    /* 2. header lines up to an empty line */
    gm_http_req q;
    memset(&q, 0, sizeof q);
    while (size > 0) {
        size_t k = 0;
        while (k < size && data[k] != '\n')
            k++;
        gm_http_header_line(&q, (const char *)data, k < size ? k + 1 : k);
        bool empty = k == 0 || (k == 1 && data[0] == '\r');
        data += k < size ? k + 1 : k;
        size -= k < size ? k + 1 : k;
        if (empty)
            break;
    }
    check_hex(q.linked_etag);
    CHECK(strlen(q.next_link) < sizeof q.next_link);
    /* 3. the rest: a listing */
    gm_hub_list l = {0};
    gm_err lerr = {0};
    if (gm_hub_parse_listing("fuzz", (const char *)data, size, &l, &lerr) == 0) {
        for (size_t i = 0; i < l.n; i++) {
            CHECK(l.v[i].path != NULL);
            check_hex(l.v[i].sha256);
        }
    } else {
        CHECK(lerr.code != 0 && lerr.msg[0]);
    }
    gm_hub_list_free(&l);
    return 0;
}
