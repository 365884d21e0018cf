/* gmlx-catalog: keeps data/catalog (the models of gmlx pull --list) true to the models' headers.
 *
 * Each entry stores what the streaming plan reads of a model: its header with the tokenizer's
 * arrays, the chat template and the split keys left out (they are most of a header's bytes and
 * the plan reads none of them; the vocabulary's size is kept as ARCH.vocab_size), its tensors
 * laid out as one part, and the size of the whole file set. gmlx pull --list opens that header
 * with the recorded size and judges it exactly as gmlx validate judges the file.
 *
 *   gmlx-catalog strip MODEL OUT.hdr          writes MODEL's stripped header (MODEL: a file or
 *                                             a remote ref, as gmlx validate takes), prints the size
 *   gmlx-catalog refresh CATALOG.tsv [NAME]   reads every entry's REF again (range requests) and
 *                                             rewrites its header file, size and source
 *
 * HF_ENDPOINT and HF_TOKEN as for gmlx pull. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf/gguf.h"
#include "remote/remote.h"

typedef struct out {
    unsigned char *b;
    size_t n, cap;
    int oom;
} out;

static void put(out *o, const void *p, size_t n)
{
    if (o->oom)
        return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 1 << 16;
        while (cap < o->n + n)
            cap *= 2;
        unsigned char *nb = realloc(o->b, cap);
        if (!nb) {
            o->oom = 1;
            return;
        }
        o->b = nb;
        o->cap = cap;
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put_u32(out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(out *o, uint64_t v) { put(o, &v, 8); }
static void put_str(out *o, const char *s, uint64_t n)
{
    put_u64(o, n);
    put(o, s, (size_t)n);
}

/* Keys the plan never reads and that make up most of a header. */
static int dropped(gm_gguf_str k)
{
    static const char *const prefixes[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                           "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                                           "tokenizer.chat_template", "split."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        if (k.len >= n && memcmp(k.ptr, prefixes[i], n) == 0)
            return 1;
    }
    return 0;
}

static const uint32_t k_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* A scalar value of type t at its width. */
static int put_scalar(out *o, const gm_gguf *g, uint64_t i, uint32_t t)
{
    uint64_t u;
    int64_t s;
    double f;
    bool b;
    switch (t) {
    case GM_GGUF_U8: case GM_GGUF_U16: case GM_GGUF_U32: case GM_GGUF_U64:
        if (gm_gguf_kv_u64(g, i, &u))
            return -1;
        put(o, &u, k_size[t]); /* little-endian: the low bytes */
        return 0;
    case GM_GGUF_I8: case GM_GGUF_I16: case GM_GGUF_I32: case GM_GGUF_I64:
        if (gm_gguf_kv_i64(g, i, &s))
            return -1;
        put(o, &s, k_size[t]);
        return 0;
    case GM_GGUF_F32: {
        if (gm_gguf_kv_f64(g, i, &f))
            return -1;
        float x = (float)f;
        put(o, &x, 4);
        return 0;
    }
    case GM_GGUF_F64:
        if (gm_gguf_kv_f64(g, i, &f))
            return -1;
        put(o, &f, 8);
        return 0;
    case GM_GGUF_BOOL:
        if (gm_gguf_kv_bool(g, i, &b))
            return -1;
        put(o, &(uint8_t){b}, 1);
        return 0;
    default:
        return -1;
    }
}

/* The stripped header of g, padded to its alignment. */
static int strip(const gm_gguf *g, out *o, gm_err *err)
{
    uint64_t n_kv = 0, vocab = 0;
    gm_gguf_arr toks;
    if (gm_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL) == 0)
        vocab = toks.n;
    gm_gguf_str arch = {"", 0};
    (void)gm_gguf_get_str(g, "general.architecture", &arch, NULL);
    char vocab_key[128];
    snprintf(vocab_key, sizeof vocab_key, "%.*s.vocab_size", (int)(arch.len > 100 ? 100 : arch.len), arch.ptr);
    bool add_vocab = vocab && arch.len && gm_gguf_find_kv(g, vocab_key) < 0;
    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
        gm_gguf_arr a;
        if (dropped(gm_gguf_kv_key(g, i)))
            continue;
        if (gm_gguf_kv_type(g, i) == GM_GGUF_ARRAY && gm_gguf_kv_arr(g, i, &a) == 0 && a.elem_type == GM_GGUF_ARRAY)
            continue; /* nested arrays: no model key uses them */
        n_kv++;
    }
    put(o, "GGUF", 4);
    put_u32(o, 3);
    put_u64(o, gm_gguf_n_tensors(g));
    put_u64(o, n_kv + add_vocab);
    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
        gm_gguf_str k = gm_gguf_kv_key(g, i);
        uint32_t t = gm_gguf_kv_type(g, i);
        gm_gguf_arr a;
        gm_gguf_str s;
        if (dropped(k))
            continue;
        if (t == GM_GGUF_ARRAY) {
            if (gm_gguf_kv_arr(g, i, &a) || a.elem_type == GM_GGUF_ARRAY)
                continue;
            put_str(o, k.ptr, k.len);
            put_u32(o, t);
            put_u32(o, a.elem_type);
            put_u64(o, a.n);
            if (a.elem_type == GM_GGUF_STRING) {
                for (uint64_t j = 0; j < a.n; j++) {
                    if (gm_gguf_arr_str(&a, j, &s))
                        return gm_err_set(err, GM_EFORMAT, "array '%.*s' element %llu", (int)k.len, k.ptr,
                                          (unsigned long long)j);
                    put_str(o, s.ptr, s.len);
                }
            } else {
                put(o, a.data, (size_t)a.data_bytes);
            }
            continue;
        }
        put_str(o, k.ptr, k.len);
        put_u32(o, t);
        if (t == GM_GGUF_STRING) {
            if (gm_gguf_kv_str(g, i, &s))
                return gm_err_set(err, GM_EFORMAT, "key '%.*s'", (int)k.len, k.ptr);
            put_str(o, s.ptr, s.len);
        } else if (put_scalar(o, g, i, t)) {
            return gm_err_set(err, GM_EFORMAT, "key '%.*s' of type %u", (int)k.len, k.ptr, t);
        }
    }
    if (add_vocab) {
        put_str(o, vocab_key, strlen(vocab_key));
        put_u32(o, GM_GGUF_U32);
        put_u32(o, (uint32_t)vocab);
    }
    /* the tensors as one part: offsets laid out again in order */
    const uint64_t align = gm_gguf_alignment(g);
    uint64_t off = 0;
    for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
        put_str(o, t->name, strlen(t->name));
        put_u32(o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_u64(o, t->ne[d]);
        put_u32(o, t->type);
        put_u64(o, off);
        off += (t->n_bytes + align - 1) / align * align;
    }
    while (o->n % align)
        put(o, "", 1);
    if (o->oom)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    return 0;
}

static const char *env_or_null(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Opens a file or a remote ref's header. */
static int open_any(const char *model, gm_gguf **g, gm_err *err)
{
    gm_ref ref;
    struct stat st;
    if (stat(model, &st) == 0)
        return gm_gguf_open(g, model, err);
    int rc = gm_ref_parse(model, &ref, err);
    if (rc)
        return rc;
    if (ref.kind == GM_REF_LOCAL)
        return gm_gguf_open(g, model, err);
    gm_remote_opts o = {env_or_null("HF_ENDPOINT"), env_or_null("HF_TOKEN"), 0};
    gm_remote_set set;
    char resolved[2048];
    if ((rc = gm_remote_resolve(&o, &ref, &set, resolved, sizeof resolved, err)))
        return rc;
    rc = gm_remote_open_header(&o, &set, 0, g, NULL, err);
    gm_remote_set_free(&set);
    return rc;
}

/* Writes model's stripped header to path; *size: the file set's bytes. */
static int strip_to(const char *model, const char *path, uint64_t *size, gm_err *err)
{
    gm_gguf *g = NULL;
    int rc = open_any(model, &g, err);
    if (rc)
        return rc;
    out o = {0};
    rc = strip(g, &o, err);
    *size = gm_gguf_total_size(g);
    gm_gguf_close(g);
    if (!rc) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(o.b, 1, o.n, f) != o.n || fclose(f) != 0 || rename(tmp, path) != 0)
            rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot write", path);
    }
    free(o.b);
    return rc;
}

static int refresh(const char *tsv, const char *only)
{
    FILE *f = fopen(tsv, "r");
    if (!f) {
        fprintf(stderr, "gmlx-catalog: %s: %s\n", tsv, strerror(errno));
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tsv);
    char *sl = strrchr(dir, '/');
    if (sl)
        *sl = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    char *text = NULL;
    size_t tlen = 0;
    FILE *mem = open_memstream(&text, &tlen);
    char line[4096];
    int rc = 0;
    char today[16];
    time_t now = time(NULL);
    strftime(today, sizeof today, "%Y-%m-%d", gmtime(&now));
    while (mem && fgets(line, sizeof line, f)) {
        char copy[4096], *fld[5] = {0};
        snprintf(copy, sizeof copy, "%s", line);
        copy[strcspn(copy, "\r\n")] = '\0';
        int nf = 0;
        for (char *s = copy; nf < 5 && s; nf++) {
            fld[nf] = s;
            char *tab = strchr(s, '\t');
            if (tab)
                *tab++ = '\0';
            s = tab;
        }
        if (copy[0] == '#' || nf < 5 || (only && strcmp(only, fld[0]) != 0)) {
            fputs(line, mem);
            continue;
        }
        char hdr[8300];
        snprintf(hdr, sizeof hdr, "%s/%s", dir, fld[3]);
        uint64_t size = 0;
        gm_err err = {0};
        if (strip_to(fld[1], hdr, &size, &err)) {
            fprintf(stderr, "gmlx-catalog: %s (%s): %s - entry kept as it was\n", fld[0], fld[1], err.msg);
            fputs(line, mem);
            rc = 1;
            continue;
        }
        fprintf(mem, "%s\t%s\t%llu\t%s\thub header %s\n", fld[0], fld[1], (unsigned long long)size, fld[3], today);
        fprintf(stderr, "%s: %llu bytes, header %s\n", fld[0], (unsigned long long)size, hdr);
    }
    fclose(f);
    if (!mem)
        return 2;
    fclose(mem);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", tsv);
    FILE *w = fopen(tmp, "w");
    if (!w || fwrite(text, 1, tlen, w) != tlen || fclose(w) != 0 || rename(tmp, tsv) != 0) {
        fprintf(stderr, "gmlx-catalog: %s: cannot write: %s\n", tsv, strerror(errno));
        rc = 2;
    }
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "strip") == 0) {
        uint64_t size = 0;
        gm_err err = {0};
        if (strip_to(argv[2], argv[3], &size, &err)) {
            fprintf(stderr, "gmlx-catalog: %s\n", err.msg);
            return 2;
        }
        printf("%llu\n", (unsigned long long)size);
        return 0;
    }
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "refresh") == 0)
        return refresh(argv[2], argc == 4 ? argv[3] : NULL);
    fprintf(argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? stdout : stderr,
            "usage: gmlx-catalog strip MODEL OUT.hdr\n"
            "       gmlx-catalog refresh CATALOG.tsv [NAME]\n\n"
            "Keeps the model list of gmlx pull --list (data/catalog) true to the models' headers:\n"
            "strip writes a model's header without its tokenizer arrays, chat template and split\n"
            "keys (what the streaming plan reads, tensors laid out as one part) and prints the\n"
            "file set's size; refresh reads every entry's REF again (HF_ENDPOINT, HF_TOKEN) and\n"
            "rewrites its header file, size and source.\n");
    return argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? 0 : 2;
}
