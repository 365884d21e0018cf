/* libFuzzer target for gguf/gguf: the input is a whole GGUF file. It is written to a memfd and
 * opened through /proc/self/fd/N (the reader maps a path). On success every kv, every array
 * element (nested ones included) and every tensor is walked through the public accessors, and
 * each tensor's first and last data bytes are touched; on failure the error contract is checked
 * (*out NULL, the code recorded, a message that starts with the path). The same bytes are then
 * opened as a header prefix (gm_gguf_open_prefixes, as remote files are): grown 4x from 24 bytes
 * while it says it needs more, it must end as the file open did (the same error code, or the
 * same counts). Anything the reader promises and does not keep aborts, so the fuzzer reports it
 * like a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t g_sink; /* keeps the reads from being optimised away */

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz_gguf: %s:%d: broken promise: %s\n", __FILE__, __LINE__, \
                    #cond);                                                          \
            abort();                                                                 \
        }                                                                            \
    } while (0)

static void touch(const void *p, uint64_t n)
{
    if (n == 0)
        return;
    const volatile uint8_t *b = p;
    g_sink += b[0] + b[n - 1];
}

static void sink_f64(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof u); /* NaN and huge values must not be cast to an integer */
    g_sink += u;
}

static void walk_arr(const gm_gguf_arr *a, int depth)
{
    CHECK(depth <= 64);
    CHECK(a->elem_type < GM_GGUF_VTYPE_COUNT);
    touch(a->data, a->data_bytes);
    uint64_t u;
    int64_t i64;
    double f;
    gm_gguf_str s;
    gm_gguf_arr sub;
    for (uint64_t i = 0; i < a->n; i++) {
        if (gm_gguf_arr_u64(a, i, &u) == 0)
            g_sink += u;
        if (gm_gguf_arr_i64(a, i, &i64) == 0)
            g_sink += (uint64_t)i64;
        if (gm_gguf_arr_f64(a, i, &f) == 0)
            sink_f64(f);
        if (gm_gguf_arr_str(a, i, &s) == 0)
            touch(s.ptr, s.len);
        if (gm_gguf_arr_sub(a, i, &sub) == 0)
            walk_arr(&sub, depth + 1);
    }
    CHECK(gm_gguf_arr_u64(a, a->n, &u) == GM_ERANGE);
    CHECK(gm_gguf_arr_str(a, a->n, &s) == GM_ERANGE);
    CHECK(gm_gguf_arr_sub(a, a->n, &sub) == GM_ERANGE);
}

static void walk(const gm_gguf *g)
{
    static char key[65536 + 1];
    uint32_t n_parts = gm_gguf_n_parts(g);
    CHECK(n_parts >= 1);
    uint32_t al = gm_gguf_alignment(g);
    CHECK(al != 0 && (al & (al - 1)) == 0);
    CHECK(gm_gguf_version(g) == 2 || gm_gguf_version(g) == 3);
    for (uint32_t p = 0; p < n_parts; p++) {
        CHECK(gm_gguf_part_path(g, p) != NULL);
        CHECK(gm_gguf_part_data_offset(g, p) <= gm_gguf_part_size(g, p) ||
              gm_gguf_n_tensors(g) == 0);
    }
    g_sink += gm_gguf_total_size(g);

    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
        gm_gguf_str k = gm_gguf_kv_key(g, i);
        CHECK(k.len > 0 && k.len < sizeof key);
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        CHECK(strlen(key) == k.len); /* keys hold no NUL */
        CHECK(gm_gguf_find_kv(g, key) == (int64_t)i); /* keys are unique */
        gm_gguf_vtype t = gm_gguf_kv_type(g, i);
        CHECK(t < GM_GGUF_VTYPE_COUNT);
        g_sink += strlen(gm_gguf_vtype_name(t));
        uint64_t u;
        int64_t s64;
        double f;
        bool b;
        gm_gguf_str s;
        gm_gguf_arr a;
        gm_err err = {0};
        if (gm_gguf_kv_u64(g, i, &u) == 0)
            g_sink += u;
        if (gm_gguf_kv_i64(g, i, &s64) == 0)
            g_sink += (uint64_t)s64;
        if (gm_gguf_kv_f64(g, i, &f) == 0)
            sink_f64(f);
        if (gm_gguf_kv_bool(g, i, &b) == 0)
            g_sink += b;
        if (gm_gguf_kv_str(g, i, &s) == 0)
            touch(s.ptr, s.len);
        if (gm_gguf_get_u64(g, key, &u, &err) != 0)
            CHECK(err.code != 0 && err.msg[0] != '\0');
        if (gm_gguf_get_arr(g, key, &a, NULL) == 0) {
            CHECK(t == GM_GGUF_ARRAY);
            walk_arr(&a, 0);
        }
    }

    uint64_t n_t = gm_gguf_n_tensors(g);
    for (uint64_t i = 0; i < n_t; i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
        CHECK(t != NULL && t->name != NULL);
        CHECK(gm_gguf_find_tensor(g, t->name) == t); /* names are unique */
        CHECK(t->part < n_parts);
        CHECK(t->n_dims >= 1 && t->n_dims <= GM_GGUF_MAX_DIMS);
        uint64_t n = 1;
        for (uint32_t d = 0; d < GM_GGUF_MAX_DIMS; d++) {
            CHECK(t->ne[d] > 0);
            CHECK(!__builtin_mul_overflow(n, t->ne[d], &n));
        }
        CHECK(n == t->n_elems);
        CHECK(gm_type_get(t->type) != NULL);
        uint64_t row;
        CHECK(gm_type_row_bytes(t->type, t->ne[0], &row, NULL) == 0);
        CHECK(row * (n / t->ne[0]) == t->n_bytes);
        CHECK(t->offset % al == 0 || t->part != 0);
        CHECK(t->file_offset == gm_gguf_part_data_offset(g, t->part) + t->offset);
        CHECK(t->file_offset + t->n_bytes <= gm_gguf_part_size(g, t->part));
        touch(gm_gguf_tensor_data(g, t), t->n_bytes);
    }
    CHECK(gm_gguf_tensor_at(g, n_t) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
    }
    if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_gguf: writing the memfd");
        abort();
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    gm_gguf *g = (gm_gguf *)path; /* must become NULL on failure */
    gm_err err = {0};
    int rc = gm_gguf_open(&g, path, &err);
    if (rc != 0) {
        CHECK(g == NULL);
        CHECK(rc < 0 && err.code == rc);
        CHECK(strncmp(err.msg, path, strlen(path)) == 0); /* the message names the file */
    } else {
        CHECK(g != NULL && err.code == 0);
        walk(g);
    }

    /* the header as a prefix of a file of this size */
    gm_gguf_prefix pre = {path, data, size < 24 ? size : 24, size};
    gm_gguf *h = NULL;
    int prc;
    for (;;) {
        gm_err perr = {0};
        uint32_t sp = 7;
        prc = gm_gguf_open_prefixes(&h, path, &pre, 1, &sp, &perr);
        if (prc != GM_GGUF_NEED_MORE)
            break;
        CHECK(h == NULL && sp == 0 && pre.len < size);
        pre.len = pre.len * 4 < size ? pre.len * 4 : size;
    }
    CHECK(prc == rc);
    if (prc == 0) {
        CHECK(h != NULL && gm_gguf_header_only(h));
        CHECK(gm_gguf_n_kv(h) == gm_gguf_n_kv(g) && gm_gguf_n_tensors(h) == gm_gguf_n_tensors(g));
        for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++)
            CHECK(gm_gguf_tensor_at(h, i)->file_offset == gm_gguf_tensor_at(g, i)->file_offset);
        gm_gguf_close(h);
    } else {
        CHECK(h == NULL);
    }
    if (rc == 0)
        gm_gguf_close(g);
    return 0;
}
