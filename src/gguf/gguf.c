/* GGUF reader: see gguf.h for what is checked and why. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/checked.h"
#include "base/sysinfo.h"

#define GGUF_MAGIC "GGUF"
/* Limits far above any real model (DeepSeek-V3 has ~1.8k tensors, vocabularies ~260k tokens)
 * that keep a hostile header from asking for a huge allocation or a long parse. */
#define MAX_KV (1u << 20)
#define MAX_TENSORS (1u << 20)
#define MAX_ARRAY_ELEMS (1ull << 26)
#define MAX_KEY_BYTES 65535u
#define MAX_NAME_BYTES 1024u
#define MAX_ARRAY_DEPTH 8
#define MAX_ALIGNMENT (1u << 20)

typedef struct kv_entry {
    gm_gguf_str key;
    uint32_t type;
    const uint8_t *val;   /* scalar bytes, string length field, or array header */
    gm_gguf_arr arr;      /* filled for ARRAY */
} kv_entry;

typedef struct part {
    char *path;
    int fd;
    const uint8_t *map;
    uint64_t size;        /* bytes of the part file */
    uint64_t avail;       /* bytes of map that hold the file (size, or a header prefix's length) */
    bool owned;           /* map is a malloc'd copy of a prefix, not a mapping */
    uint64_t data_offset;
    /* metadata of this part (for part 0 it is the model's metadata) */
    kv_entry *kvs;
    uint64_t n_kv;
    uint64_t n_tensors;
} part;

struct gm_gguf {
    char *path;
    uint32_t version;
    uint32_t alignment;
    part *parts;
    uint32_t n_parts;
    gm_gguf_tensor *tensors;
    uint64_t n_tensors;
    /* open-addressing hash tables of indices + 1 (0 = empty), keyed by a random seed */
    uint64_t hash_seed;
    uint64_t *kv_hash;
    uint64_t kv_hash_cap;
    uint64_t *tensor_hash;
    uint64_t tensor_hash_cap;
    /* allocations owned for arrays' element offsets */
    uint64_t **offset_blocks;
    uint64_t n_offset_blocks, cap_offset_blocks;
    uint64_t index_bytes; /* bytes allocated for array indexes, bounded by 8 x the file size */
};

/* ---- bounded cursor over one mapped part ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t pos;
    uint64_t end;    /* bytes the file has: every bound of the format is checked against it */
    uint64_t avail;  /* bytes at base that can be read (end, or less for a header prefix) */
    const char *file;
    gm_err *err;
} cursor;

static uint64_t cur_left(const cursor *c) { return c->end - c->pos; }

static int cur_need(cursor *c, uint64_t n, const char *what)
{
    if (n > cur_left(c))
        return gm_err_set(c->err, GM_EFORMAT,
                          "%s: truncated or corrupt: %s needs %llu bytes at offset %llu but the "
                          "file has %llu left",
                          c->file, what, (unsigned long long)n, (unsigned long long)c->pos,
                          (unsigned long long)cur_left(c));
    if (n > c->avail - c->pos)
        return gm_err_set(c->err, GM_GGUF_NEED_MORE,
                          "%s: the header goes on past the first %llu bytes read (%s at offset %llu)",
                          c->file, (unsigned long long)c->avail, what, (unsigned long long)c->pos);
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what)
{
    int rc = cur_need(c, 4, what);
    if (rc)
        return rc;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *what)
{
    int rc = cur_need(c, 8, what);
    if (rc)
        return rc;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static bool utf8_valid(const uint8_t *s, uint64_t n)
{
    uint64_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b == 0)
            return false;
        if (b < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if ((b & 0xE0) == 0xC0) {
            len = 2;
            cp = b & 0x1F;
        } else if ((b & 0xF0) == 0xE0) {
            len = 3;
            cp = b & 0x0F;
        } else if ((b & 0xF8) == 0xF0) {
            len = 4;
            cp = b & 0x07;
        } else {
            return false;
        }
        if (n - i < (uint64_t)len)
            return false;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (uint64_t)len;
    }
    return true;
}

/* Reads a GGUF string (u64 length + bytes) without copying. */
static int cur_str(cursor *c, gm_gguf_str *s, uint64_t max_len, const char *what)
{
    uint64_t len;
    int rc = cur_u64(c, &len, what);
    if (rc)
        return rc;
    if (len > max_len)
        return gm_err_set(c->err, GM_EFORMAT, "%s: %s at offset %llu is %llu bytes long (limit %llu)",
                          c->file, what, (unsigned long long)(c->pos - 8), (unsigned long long)len,
                          (unsigned long long)max_len);
    rc = cur_need(c, len, what);
    if (rc)
        return rc;
    s->ptr = (const char *)(c->base + c->pos);
    s->len = len;
    c->pos += len;
    return 0;
}

static const uint32_t k_scalar_size[GM_GGUF_VTYPE_COUNT] = {
    [GM_GGUF_U8] = 1, [GM_GGUF_I8] = 1, [GM_GGUF_U16] = 2, [GM_GGUF_I16] = 2,
    [GM_GGUF_U32] = 4, [GM_GGUF_I32] = 4, [GM_GGUF_F32] = 4, [GM_GGUF_BOOL] = 1,
    [GM_GGUF_U64] = 8, [GM_GGUF_I64] = 8, [GM_GGUF_F64] = 8,
};

const char *gm_gguf_vtype_name(uint32_t t)
{
    static const char *names[GM_GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    return t < GM_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

static int track_offsets(gm_gguf *g, uint64_t *block)
{
    if (g->n_offset_blocks == g->cap_offset_blocks) {
        uint64_t cap = g->cap_offset_blocks ? g->cap_offset_blocks * 2 : 16;
        uint64_t **nb = realloc(g->offset_blocks, cap * sizeof *nb);
        if (!nb)
            return GM_ENOMEM;
        g->offset_blocks = nb;
        g->cap_offset_blocks = cap;
    }
    g->offset_blocks[g->n_offset_blocks++] = block;
    return 0;
}

static int parse_value(gm_gguf *g, cursor *c, uint32_t type, int depth, gm_gguf_arr *arr_out);

/* Parses an array body (element type, count, elements) at the cursor. */
static int parse_array(gm_gguf *g, cursor *c, int depth, gm_gguf_arr *out)
{
    if (depth > MAX_ARRAY_DEPTH)
        return gm_err_set(c->err, GM_EFORMAT, "%s: arrays nested deeper than %d at offset %llu",
                          c->file, MAX_ARRAY_DEPTH, (unsigned long long)c->pos);
    uint32_t et;
    uint64_t n;
    int rc = cur_u32(c, &et, "array element type");
    if (rc)
        return rc;
    if (et >= GM_GGUF_VTYPE_COUNT)
        return gm_err_set(c->err, GM_EFORMAT, "%s: unknown array element type %u at offset %llu",
                          c->file, et, (unsigned long long)(c->pos - 4));
    rc = cur_u64(c, &n, "array length");
    if (rc)
        return rc;
    uint64_t min_elem = et == GM_GGUF_STRING ? 8 : et == GM_GGUF_ARRAY ? 12 : k_scalar_size[et];
    if (n > MAX_ARRAY_ELEMS || n > cur_left(c) / min_elem)
        return gm_err_set(c->err, GM_EFORMAT,
                          "%s: array of %llu %s elements at offset %llu does not fit in the file",
                          c->file, (unsigned long long)n, gm_gguf_vtype_name(et),
                          (unsigned long long)(c->pos - 8));
    memset(out, 0, sizeof *out);
    out->elem_type = (gm_gguf_vtype)et;
    out->n = n;
    out->data = c->base + c->pos;
    uint64_t start = c->pos;
    if (et != GM_GGUF_STRING && et != GM_GGUF_ARRAY) {
        if ((rc = cur_need(c, n * min_elem, "array elements"))) /* n * size <= left: checked above */
            return rc;
        c->pos += n * min_elem;
        if (et == GM_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (out->data[i] > 1)
                    return gm_err_set(c->err, GM_EFORMAT, "%s: bool array element %llu is %u",
                                      c->file, (unsigned long long)i, out->data[i]);
        out->data_bytes = n * min_elem;
        return 0;
    }
    uint64_t *offs = NULL;
    gm_gguf_arr *subs = NULL;
    if (n > 0) {
        uint64_t need = n * (sizeof *offs + (et == GM_GGUF_ARRAY ? sizeof *subs : 0));
        g->index_bytes += need;
        if (g->index_bytes / 8 > c->end)
            return gm_err_set(c->err, GM_EFORMAT,
                              "%s: the metadata arrays at offset %llu need more index memory than a "
                              "file of this size can justify",
                              c->file, (unsigned long long)start);
        offs = malloc(n * sizeof *offs);
        if (offs && track_offsets(g, offs)) {
            free(offs);
            offs = NULL;
        }
        if (offs && et == GM_GGUF_ARRAY) {
            subs = malloc(n * sizeof *subs);
            if (subs && track_offsets(g, (uint64_t *)(void *)subs)) {
                free(subs);
                subs = NULL;
            }
        }
        if (!offs || (et == GM_GGUF_ARRAY && !subs))
            return gm_err_set(c->err, GM_ENOMEM, "%s: out of memory for an array of %llu elements",
                              c->file, (unsigned long long)n);
    }
    out->offsets = offs;
    out->subs = subs;
    for (uint64_t i = 0; i < n; i++) {
        offs[i] = c->pos - start;
        int rc2;
        if (et == GM_GGUF_STRING) {
            gm_gguf_str s;
            rc2 = cur_str(c, &s, UINT64_MAX, "array string");
        } else {
            rc2 = parse_array(g, c, depth + 1, &subs[i]);
        }
        if (rc2)
            return rc2;
    }
    out->data_bytes = c->pos - start;
    return 0;
}

static int parse_value(gm_gguf *g, cursor *c, uint32_t type, int depth, gm_gguf_arr *arr_out)
{
    if (type >= GM_GGUF_VTYPE_COUNT)
        return gm_err_set(c->err, GM_EFORMAT, "%s: unknown metadata value type %u at offset %llu",
                          c->file, type, (unsigned long long)(c->pos - 4));
    if (type == GM_GGUF_STRING) {
        gm_gguf_str s;
        return cur_str(c, &s, UINT64_MAX, "string value");
    }
    if (type == GM_GGUF_ARRAY)
        return parse_array(g, c, depth, arr_out);
    int rc = cur_need(c, k_scalar_size[type], "metadata value");
    if (rc)
        return rc;
    if (type == GM_GGUF_BOOL && c->base[c->pos] > 1)
        return gm_err_set(c->err, GM_EFORMAT, "%s: bool value at offset %llu is %u, not 0 or 1",
                          c->file, (unsigned long long)c->pos, c->base[c->pos]);
    c->pos += k_scalar_size[type];
    return 0;
}

/* ---- hashing ---- */

/* FNV-1a from a per-open random seed, then murmur3's finaliser. Plain FNV-1a's low k bits
 * depend only on the low k bits of its state, so a hostile file can cheaply give every key (or
 * tensor name) the same slot and make open and lookups quadratic: 40k crafted keys (a 1 MB
 * file) took 2 s, the 1M keys allowed would take many minutes. With an unknown seed and every
 * output bit mixed, such names cannot be prepared in advance. */
static uint64_t hash_bytes(uint64_t seed, const char *s, uint64_t n)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (uint64_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t random_seed(const void *salt)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
               (uint64_t)(uintptr_t)salt;
    }
    return seed;
}

static uint64_t hash_cap_for(uint64_t n)
{
    uint64_t cap = 16;
    while (cap < n * 2 + 1)
        cap <<= 1;
    return cap;
}

/* ---- opening one part ---- */

static int map_part(part *p, gm_err *err)
{
    /* O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; it is then refused
     * as not a regular file. Regular files ignore the flag. */
    p->fd = open(p->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (p->fd < 0)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot open", p->path);
    struct stat st;
    if (fstat(p->fd, &st) != 0)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot stat", p->path);
    if (!S_ISREG(st.st_mode))
        return gm_err_set(err, GM_EIO, "%s: not a regular file", p->path);
    p->size = (uint64_t)st.st_size;
    if (p->size < 24)
        return gm_err_set(err, GM_EFORMAT, "%s: %llu bytes is too small to be a GGUF file", p->path,
                          (unsigned long long)p->size);
    void *m = mmap(NULL, (size_t)p->size, PROT_READ, MAP_PRIVATE, p->fd, 0);
    if (m == MAP_FAILED)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot map", p->path);
    p->map = m;
    p->avail = p->size;
    return 0;
}

/* A part given as the first bytes of a file of known size: the bytes are copied. */
static int copy_prefix(part *p, const gm_gguf_prefix *src, gm_err *err)
{
    p->size = src->size;
    if (p->size < 24)
        return gm_err_set(err, GM_EFORMAT, "%s: %llu bytes is too small to be a GGUF file", p->path,
                          (unsigned long long)p->size);
    p->avail = src->len < src->size ? src->len : src->size;
    if (p->avail < 24)
        return gm_err_set(err, GM_GGUF_NEED_MORE, "%s: %llu bytes read, the header needs more",
                          p->path, (unsigned long long)p->avail);
    uint8_t *copy = malloc((size_t)p->avail);
    if (!copy)
        return gm_err_set(err, GM_ENOMEM, "%s: out of memory for %llu header bytes", p->path,
                          (unsigned long long)p->avail);
    memcpy(copy, src->bytes, (size_t)p->avail);
    p->map = copy;
    p->owned = true;
    return 0;
}

static kv_entry *part_find_kv(const part *p, const char *key)
{
    size_t kl = strlen(key);
    for (uint64_t i = 0; i < p->n_kv; i++)
        if (p->kvs[i].key.len == kl && memcmp(p->kvs[i].key.ptr, key, kl) == 0)
            return &p->kvs[i];
    return NULL;
}

/* Reads an integer kv of part p (any integer type, non-negative). */
static int part_kv_uint(const part *p, const char *key, uint64_t *out);

/* Magic and version. Checked before anything else of a part is read: a file that is not GGUF,
 * or a v1 or big-endian one, has no u64 little-endian counts, and must be reported as what it is
 * rather than as a "tensor count does not fit". The part is at least 24 bytes (map_part). */
static int check_preamble(const part *p, uint32_t *version, gm_err *err)
{
    if (memcmp(p->map, GGUF_MAGIC, 4) != 0)
        return gm_err_set(err, GM_EFORMAT, "%s: not a GGUF file (bad magic)", p->path);
    uint32_t v;
    memcpy(&v, p->map + 4, 4);
    if (v == 0x03000000u || v == 0x02000000u)
        return gm_err_set(err, GM_EUNSUPPORTED, "%s: big-endian GGUF files are not supported", p->path);
    if (v == 1)
        return gm_err_set(err, GM_EUNSUPPORTED,
                          "%s: GGUF version 1 is not supported (convert the file again)", p->path);
    if (v != 2 && v != 3)
        return gm_err_set(err, GM_EFORMAT, "%s: unknown GGUF version %u", p->path, v);
    *version = v;
    return 0;
}

static int parse_header(gm_gguf *g, uint32_t pi, uint64_t tensor_base, gm_err *err)
{
    part *p = &g->parts[pi];
    cursor c = {p->map, 8, p->size, p->avail, p->path, err};
    uint32_t version;
    int rc = check_preamble(p, &version, err);
    if (rc)
        return rc;
    if (pi == 0)
        g->version = version;
    uint64_t n_tensors, n_kv;
    if ((rc = cur_u64(&c, &n_tensors, "tensor count")) || (rc = cur_u64(&c, &n_kv, "metadata count")))
        return rc;
    if (n_kv > MAX_KV || n_kv > cur_left(&c) / 13)
        return gm_err_set(err, GM_EFORMAT, "%s: metadata count %llu does not fit in the file",
                          p->path, (unsigned long long)n_kv);
    if (n_tensors > MAX_TENSORS || n_tensors > cur_left(&c) / 32)
        return gm_err_set(err, GM_EFORMAT, "%s: tensor count %llu does not fit in the file",
                          p->path, (unsigned long long)n_tensors);
    p->n_kv = n_kv;
    p->n_tensors = n_tensors;
    p->kvs = calloc(n_kv ? n_kv : 1, sizeof *p->kvs);
    if (!p->kvs)
        return gm_err_set(err, GM_ENOMEM, "%s: out of memory", p->path);

    uint64_t kcap = hash_cap_for(n_kv);
    uint64_t *kh = calloc(kcap, sizeof *kh);
    if (!kh)
        return gm_err_set(err, GM_ENOMEM, "%s: out of memory", p->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        kv_entry *e = &p->kvs[i];
        if ((rc = cur_str(&c, &e->key, MAX_KEY_BYTES, "metadata key")))
            goto fail_kh;
        if (e->key.len == 0 || !utf8_valid((const uint8_t *)e->key.ptr, e->key.len)) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: metadata key %llu is empty or not valid UTF-8",
                            p->path, (unsigned long long)i);
            goto fail_kh;
        }
        uint64_t h = hash_bytes(g->hash_seed, e->key.ptr, e->key.len) & (kcap - 1);
        while (kh[h]) {
            kv_entry *o = &p->kvs[kh[h] - 1];
            if (o->key.len == e->key.len && memcmp(o->key.ptr, e->key.ptr, e->key.len) == 0) {
                rc = gm_err_set(err, GM_EFORMAT, "%s: metadata key '%.*s' appears twice", p->path,
                                (int)e->key.len, e->key.ptr);
                goto fail_kh;
            }
            h = (h + 1) & (kcap - 1);
        }
        kh[h] = i + 1;
        if ((rc = cur_u32(&c, &e->type, "metadata value type")))
            goto fail_kh;
        e->val = c.base + c.pos;
        if ((rc = parse_value(g, &c, e->type, 0, &e->arr))) {
            /* name the key whose value is broken */
            if (err && err->code == rc) {
                size_t len = strlen(err->msg);
                if (len < sizeof err->msg)
                    snprintf(err->msg + len, sizeof err->msg - len, " (key '%.*s')",
                             (int)(e->key.len > 200 ? 200 : e->key.len), e->key.ptr);
            }
            goto fail_kh;
        }
    }
    if (pi == 0) {
        g->kv_hash = kh;
        g->kv_hash_cap = kcap;
    } else {
        free(kh);
    }
    kh = NULL;

    /* alignment: from this part's metadata */
    uint32_t alignment = GM_GGUF_DEFAULT_ALIGNMENT;
    kv_entry *ae = part_find_kv(p, "general.alignment");
    if (ae) {
        uint64_t a;
        if (part_kv_uint(p, "general.alignment", &a) != 0 || a == 0 || a > MAX_ALIGNMENT ||
            (a & (a - 1)) != 0)
            return gm_err_set(err, GM_EFORMAT,
                              "%s: general.alignment must be a power of two up to %u", p->path,
                              MAX_ALIGNMENT);
        alignment = (uint32_t)a;
    }
    if (pi == 0)
        g->alignment = alignment;

    /* tensor infos */
    for (uint64_t i = 0; i < n_tensors; i++) {
        gm_gguf_tensor *t = &g->tensors[tensor_base + i];
        gm_gguf_str name;
        if ((rc = cur_str(&c, &name, MAX_NAME_BYTES, "tensor name")))
            return rc;
        if (name.len == 0 || !utf8_valid((const uint8_t *)name.ptr, name.len))
            return gm_err_set(err, GM_EFORMAT, "%s: tensor %llu has an empty or invalid UTF-8 name",
                              p->path, (unsigned long long)i);
        char *nm = malloc(name.len + 1);
        if (!nm)
            return gm_err_set(err, GM_ENOMEM, "%s: out of memory", p->path);
        memcpy(nm, name.ptr, name.len);
        nm[name.len] = '\0';
        t->name = nm;
        t->part = pi;
        uint32_t nd;
        if ((rc = cur_u32(&c, &nd, "tensor dimension count")))
            return rc;
        if (nd < 1 || nd > GM_GGUF_MAX_DIMS)
            return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' has %u dimensions (1 to %d allowed)",
                              p->path, nm, nd, GM_GGUF_MAX_DIMS);
        t->n_dims = nd;
        uint64_t n_elems = 1;
        for (uint32_t d = 0; d < GM_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            if ((rc = cur_u64(&c, &t->ne[d], "tensor dimension")))
                return rc;
            if (t->ne[d] == 0 || t->ne[d] > (1ull << 62))
                return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' has dimension %u of size %llu",
                                  p->path, nm, d, (unsigned long long)t->ne[d]);
            if (!gm_mul_u64(n_elems, t->ne[d], &n_elems))
                return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' element count overflows",
                                  p->path, nm);
        }
        t->n_elems = n_elems;
        if ((rc = cur_u32(&c, &t->type, "tensor type")))
            return rc;
        const gm_type_info *ti = gm_type_get(t->type);
        if (!ti)
            return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' has unknown type %u", p->path, nm,
                              t->type);
        gm_err sub = {0};
        uint64_t row_bytes;
        if (gm_type_row_bytes(t->type, t->ne[0], &row_bytes, &sub) != 0)
            return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s': %s", p->path, nm, sub.msg);
        if (!gm_mul_u64(row_bytes, n_elems / t->ne[0], &t->n_bytes))
            return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' byte size overflows", p->path, nm);
        if ((rc = cur_u64(&c, &t->offset, "tensor offset")))
            return rc;
        if (t->offset % alignment != 0)
            return gm_err_set(err, GM_EFORMAT,
                              "%s: tensor '%s' offset %llu is not a multiple of the alignment %u",
                              p->path, nm, (unsigned long long)t->offset, alignment);
    }

    uint64_t data_off;
    if (!gm_align_up_u64(c.pos, alignment, &data_off))
        return gm_err_set(err, GM_EFORMAT, "%s: header size overflows", p->path);
    if (data_off > p->size && n_tensors > 0)
        return gm_err_set(err, GM_EFORMAT, "%s: truncated: the tensor data would start at %llu, past "
                          "the end of the file (%llu bytes)", p->path, (unsigned long long)data_off,
                          (unsigned long long)p->size);
    p->data_offset = data_off;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gm_gguf_tensor *t = &g->tensors[tensor_base + i];
        uint64_t start, end;
        if (!gm_add_u64(data_off, t->offset, &start) || !gm_add_u64(start, t->n_bytes, &end) ||
            end > p->size)
            return gm_err_set(err, GM_EFORMAT,
                              "%s: truncated or corrupt: tensor '%s' (%llu bytes at data offset %llu) "
                              "ends past the end of the file (%llu bytes)",
                              p->path, t->name, (unsigned long long)t->n_bytes,
                              (unsigned long long)t->offset, (unsigned long long)p->size);
        t->file_offset = start;
    }
    return 0;
fail_kh:
    free(kh);
    return rc;
}

/* ---- scalar conversion ---- */

typedef struct scalar {
    int kind; /* 0 unsigned, 1 signed, 2 float, 3 bool */
    uint64_t u;
    int64_t i;
    double f;
} scalar;

static int read_scalar(uint32_t type, const uint8_t *p, scalar *s)
{
    memset(s, 0, sizeof *s);
    switch (type) {
    case GM_GGUF_U8: s->u = p[0]; break;
    case GM_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); s->u = v; break; }
    case GM_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); s->u = v; break; }
    case GM_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); s->u = v; break; }
    case GM_GGUF_I8: { int8_t v; memcpy(&v, p, 1); s->kind = 1; s->i = v; break; }
    case GM_GGUF_I16: { int16_t v; memcpy(&v, p, 2); s->kind = 1; s->i = v; break; }
    case GM_GGUF_I32: { int32_t v; memcpy(&v, p, 4); s->kind = 1; s->i = v; break; }
    case GM_GGUF_I64: { int64_t v; memcpy(&v, p, 8); s->kind = 1; s->i = v; break; }
    case GM_GGUF_F32: { float v; memcpy(&v, p, 4); s->kind = 2; s->f = v; break; }
    case GM_GGUF_F64: { double v; memcpy(&v, p, 8); s->kind = 2; s->f = v; break; }
    case GM_GGUF_BOOL: s->kind = 3; s->u = p[0]; break;
    default: return GM_ETYPE;
    }
    return 0;
}

static int scalar_u64(const scalar *s, uint64_t *out)
{
    if (s->kind == 0) { *out = s->u; return 0; }
    if (s->kind == 1 && s->i >= 0) { *out = (uint64_t)s->i; return 0; }
    return GM_ETYPE;
}

static int scalar_i64(const scalar *s, int64_t *out)
{
    if (s->kind == 1) { *out = s->i; return 0; }
    if (s->kind == 0 && s->u <= (uint64_t)INT64_MAX) { *out = (int64_t)s->u; return 0; }
    return GM_ETYPE;
}

static int scalar_f64(const scalar *s, double *out)
{
    if (s->kind == 2) *out = s->f;
    else if (s->kind == 1) *out = (double)s->i;
    else if (s->kind == 0) *out = (double)s->u;
    else return GM_ETYPE;
    return 0;
}

static int part_kv_uint(const part *p, const char *key, uint64_t *out)
{
    kv_entry *e = part_find_kv(p, key);
    if (!e)
        return GM_ENOTFOUND;
    scalar s;
    if (read_scalar(e->type, e->val, &s))
        return GM_ETYPE;
    return scalar_u64(&s, out);
}

/* ---- split files ---- */

bool gm_gguf_split_name(const char *path, size_t *prefix_len, unsigned *no, unsigned *count)
{
    size_t n = strlen(path);
    const size_t tail = strlen("-00001-of-00001.gguf");
    if (n < tail)
        return false;
    const char *s = path + n - tail;
    unsigned a, b;
    char dash, gg[6];
    if (sscanf(s, "%c%5u-of-%5u.%5s", &dash, &a, &b, gg) != 4 || dash != '-' || strcmp(gg, "gguf") != 0)
        return false;
    for (int k = 1; k <= 5; k++)
        if (s[k] < '0' || s[k] > '9' || s[k + 9] < '0' || s[k + 9] > '9')
            return false;
    *prefix_len = n - tail;
    *no = a;
    *count = b;
    return true;
}

typedef struct span_key {
    uint64_t part, offset, idx;
} span_key;

static int span_cmp(const void *a, const void *b)
{
    const span_key *x = a, *y = b;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/* Two tensors of one part must not share bytes: sorted by offset, each ends before the next. */
static int check_overlap(const gm_gguf *g, gm_err *err)
{
    if (g->n_tensors < 2)
        return 0;
    span_key *keys = malloc(g->n_tensors * sizeof *keys);
    if (!keys)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        keys[i] = (span_key){g->tensors[i].part, g->tensors[i].offset, i};
    qsort(keys, g->n_tensors, sizeof *keys, span_cmp);
    int rc = 0;
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const gm_gguf_tensor *a = &g->tensors[keys[i - 1].idx];
        const gm_gguf_tensor *b = &g->tensors[keys[i].idx];
        if (a->part == b->part && a->offset + a->n_bytes > b->offset) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: tensors '%s' and '%s' overlap",
                            g->parts[a->part].path, a->name, b->name);
            break;
        }
    }
    free(keys);
    return rc;
}

/* Opens a set whose parts are files (pre NULL) or header prefixes (pre[0..n_pre)). */
static int open_set(gm_gguf **out, const char *path, const gm_gguf_prefix *pre, uint32_t n_pre,
                    uint32_t *short_part, gm_err *err)
{
    *out = NULL;
    gm_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    int rc = 0;
    g->hash_seed = random_seed(g);
    g->path = strdup(path);
    size_t prefix_len = 0;
    unsigned no = 0, count = 1;
    bool is_split = gm_gguf_split_name(path, &prefix_len, &no, &count);
    if (is_split) {
        if (count < 1 || count > GM_GGUF_MAX_PARTS || no < 1 || no > count) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: part number %u of %u is not valid", path, no, count);
            goto fail;
        }
        if (no != 1) {
            rc = gm_err_set(err, GM_EINVAL,
                            "%s: this is part %u of %u; name the first part (%.*s-00001-of-%05u.gguf)",
                            path, no, count, (int)prefix_len, path, count);
            goto fail;
        }
    }
    g->n_parts = is_split ? count : 1;
    if (pre && n_pre != g->n_parts) {
        rc = gm_err_set(err, GM_EINVAL, "%s: the set has %u part%s, %u given", path, g->n_parts,
                        g->n_parts == 1 ? "" : "s", n_pre);
        goto fail;
    }
    g->parts = calloc(g->n_parts, sizeof *g->parts);
    if (!g->path || !g->parts) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < g->n_parts; i++)
        g->parts[i].fd = -1;
    for (uint32_t i = 0; i < g->n_parts; i++) {
        part *p = &g->parts[i];
        if (pre) {
            p->path = strdup(pre[i].path ? pre[i].path : path);
        } else if (is_split) {
            size_t len = prefix_len + 32;
            p->path = malloc(len);
            if (p->path)
                snprintf(p->path, len, "%.*s-%05u-of-%05u.gguf", (int)prefix_len, path, i + 1, count);
        } else {
            p->path = strdup(path);
        }
        if (!p->path) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            goto fail;
        }
        if (pre) {
            if ((rc = copy_prefix(p, &pre[i], err))) {
                if (short_part)
                    *short_part = i;
                goto fail;
            }
        } else if ((rc = map_part(p, err))) {
            goto fail;
        }
    }
    /* Count tensors first so one array holds them all. Each part's count is bounded by its
     * size (checked again in parse_header). */
    uint64_t total = 0;
    for (uint32_t i = 0; i < g->n_parts; i++) {
        part *p = &g->parts[i];
        uint64_t nt;
        uint32_t version;
        if ((rc = check_preamble(p, &version, err)))
            goto fail;
        memcpy(&nt, p->map + 8, 8);
        if (nt > MAX_TENSORS || nt > p->size / 32) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: tensor count %llu does not fit in the file",
                            p->path, (unsigned long long)nt);
            goto fail;
        }
        total += nt;
    }
    g->tensors = calloc(total ? total : 1, sizeof *g->tensors);
    if (!g->tensors) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    uint64_t base = 0;
    for (uint32_t i = 0; i < g->n_parts; i++) {
        g->n_tensors = base; /* so close() frees the names parsed so far */
        if ((rc = parse_header(g, i, base, err))) {
            if (short_part)
                *short_part = i;
            g->n_tensors = base + g->parts[i].n_tensors;
            goto fail;
        }
        base += g->parts[i].n_tensors;
    }
    g->n_tensors = base;

    /* split metadata */
    for (uint32_t i = 0; i < g->n_parts; i++) {
        part *p = &g->parts[i];
        uint64_t sc = 1, sn = 0;
        int has_count = part_kv_uint(p, "split.count", &sc) == 0;
        int has_no = part_kv_uint(p, "split.no", &sn) == 0;
        if (!is_split) {
            if (has_count && sc > 1) {
                rc = gm_err_set(err, GM_EFORMAT,
                                "%s: this file is part %llu of a %llu-part split model; name the first "
                                "part, as NAME-00001-of-%05llu.gguf",
                                p->path, (unsigned long long)(has_no ? sn + 1 : 0),
                                (unsigned long long)sc, (unsigned long long)sc);
                goto fail;
            }
            break;
        }
        if (!has_count && !has_no && count == 1) {
            is_split = false; /* "-00001-of-00001" with no split keys: a single file, as named */
            break;
        }
        if (!has_count || !has_no) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: split part without split.count / split.no metadata",
                            p->path);
            goto fail;
        }
        if (sc != count || sn != i) {
            rc = gm_err_set(err, GM_EFORMAT,
                            "%s: does not belong to this split set: it says part %llu of %llu, its "
                            "name says part %u of %u",
                            p->path, (unsigned long long)sn + 1, (unsigned long long)sc, i + 1, count);
            goto fail;
        }
    }
    if (is_split) {
        uint64_t st = 0;
        if (part_kv_uint(&g->parts[0], "split.tensors.count", &st) != 0) {
            rc = gm_err_set(err, GM_EFORMAT,
                            "%s: split.tensors.count is missing or not a non-negative integer",
                            path);
            goto fail;
        }
        if (st != g->n_tensors) {
            rc = gm_err_set(err, GM_EFORMAT,
                            "%s: the parts hold %llu tensors but split.tensors.count says %llu",
                            path, (unsigned long long)g->n_tensors, (unsigned long long)st);
            goto fail;
        }
    }

    /* unique names and no overlap within a part */
    g->tensor_hash_cap = hash_cap_for(g->n_tensors);
    g->tensor_hash = calloc(g->tensor_hash_cap, sizeof *g->tensor_hash);
    if (!g->tensor_hash) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *nm = g->tensors[i].name;
        uint64_t h = hash_bytes(g->hash_seed, nm, strlen(nm)) & (g->tensor_hash_cap - 1);
        while (g->tensor_hash[h]) {
            if (strcmp(g->tensors[g->tensor_hash[h] - 1].name, nm) == 0) {
                rc = gm_err_set(err, GM_EFORMAT, "%s: tensor name '%s' appears twice",
                                g->parts[g->tensors[i].part].path, nm);
                goto fail;
            }
            h = (h + 1) & (g->tensor_hash_cap - 1);
        }
        g->tensor_hash[h] = i + 1;
    }
    if ((rc = check_overlap(g, err)))
        goto fail;
    *out = g;
    return 0;
fail:
    gm_gguf_close(g);
    return rc ? rc : GM_EFORMAT;
}

int gm_gguf_open(gm_gguf **out, const char *path, gm_err *err)
{
    return open_set(out, path, NULL, 0, NULL, err);
}

int gm_gguf_open_prefixes(gm_gguf **out, const char *path, const gm_gguf_prefix *parts,
                          uint32_t n_parts, uint32_t *short_part, gm_err *err)
{
    if (short_part)
        *short_part = 0;
    if (!parts || n_parts == 0) {
        *out = NULL;
        return gm_err_set(err, GM_EINVAL, "%s: no parts given", path);
    }
    return open_set(out, path, parts, n_parts, short_part, err);
}

bool gm_gguf_header_only(const gm_gguf *g)
{
    for (uint32_t i = 0; i < g->n_parts; i++)
        if (g->parts[i].owned)
            return true;
    return false;
}

void gm_gguf_close(gm_gguf *g)
{
    if (!g)
        return;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->tensors);
    for (uint32_t i = 0; g->parts && i < g->n_parts; i++) {
        part *p = &g->parts[i];
        if (p->owned)
            free((void *)p->map);
        else if (p->map)
            munmap((void *)p->map, (size_t)p->size);
        if (p->fd >= 0)
            close(p->fd);
        free(p->kvs);
        free(p->path);
    }
    free(g->parts);
    for (uint64_t i = 0; i < g->n_offset_blocks; i++)
        free(g->offset_blocks[i]);
    free(g->offset_blocks);
    free(g->kv_hash);
    free(g->tensor_hash);
    free(g->path);
    free(g);
}

/* ---- accessors ---- */

uint32_t gm_gguf_version(const gm_gguf *g) { return g->version; }
uint32_t gm_gguf_alignment(const gm_gguf *g) { return g->alignment; }
const char *gm_gguf_path(const gm_gguf *g) { return g->path; }
uint32_t gm_gguf_n_parts(const gm_gguf *g) { return g->n_parts; }
const char *gm_gguf_part_path(const gm_gguf *g, uint32_t i) { return i < g->n_parts ? g->parts[i].path : NULL; }
uint64_t gm_gguf_part_size(const gm_gguf *g, uint32_t i) { return i < g->n_parts ? g->parts[i].size : 0; }
uint64_t gm_gguf_part_data_offset(const gm_gguf *g, uint32_t i) { return i < g->n_parts ? g->parts[i].data_offset : 0; }

uint64_t gm_gguf_total_size(const gm_gguf *g)
{
    uint64_t s = 0;
    for (uint32_t i = 0; i < g->n_parts; i++)
        s += g->parts[i].size;
    return s;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif

/* One pass of MADV_POPULATE_READ over bytes [from, to) of part p in steps, progress (when not
 * NULL) after each. */
static int populate_pass(const part *p, uint64_t from, uint64_t to, uint64_t *done,
                         uint64_t total, gm_gguf_progress_fn progress, void *ctx, gm_err *err)
{
    const uint64_t step = 256ull << 20;
    for (uint64_t at = from; at < to; at += step) {
        const size_t len = (size_t)(to - at < step ? to - at : step);
        uint8_t *addr = (uint8_t *)p->map + at;
        if (madvise(addr, len, MADV_POPULATE_READ) != 0) {
            const int e = errno;
            if (e == EFAULT || e == EIO)
                return gm_err_errno(err, GM_EIO, e, "%s: cannot read the tensor data into memory",
                                    p->path);
            /* EINVAL: a kernel before 5.14; ENOMEM, EINTR...: read ahead only */
            (void)madvise(addr, len, MADV_WILLNEED);
        }
        *done += len;
        if (progress)
            progress(ctx, *done, total);
    }
    return 0;
}

/* Drops and reads again 64 MiB of part p from the first 2 MiB boundary at or after from: true
 * when that brings more of the mapping into huge pages than the huge bytes it had. */
static bool reread_helps(const part *p, uint64_t from, uint64_t huge, gm_err *err)
{
    const uint64_t pmd = 2ull << 20, at = (from + pmd - 1) / pmd * pmd;
    if (at >= p->size)
        return false;
    const uint64_t to = p->size - at < (64ull << 20) ? p->size : at + (64ull << 20);
    (void)madvise((uint8_t *)p->map + at, (size_t)(to - at), MADV_DONTNEED);
    (void)posix_fadvise(p->fd, (off_t)at, (off_t)(to - at), POSIX_FADV_DONTNEED);
    uint64_t done = 0, size = 0, after = 0;
    if (populate_pass(p, at, to, &done, to - at, NULL, NULL, err) != 0)
        return false; /* the full pass reports it */
    return gm_sysinfo_huge_mapped(p->map, &size, &after) == 0 && after > huge;
}

static int by_offset(const void *a, const void *b)
{
    const gm_gguf_tensor *x = *(const gm_gguf_tensor *const *)a, *y = *(const gm_gguf_tensor *const *)b;
    return x->file_offset < y->file_offset ? -1 : x->file_offset > y->file_offset;
}

/* The pages of part pi from `from` on that hold no skipped tensor, as ranges [at[2k], at[2k+1]) in
 * ascending order: a skipped tensor leaves out the whole pages inside it. Returns the count of
 * ranges (at most n_tensors + 1; at holds 2 (n_tensors + 1)), with order (n_tensors entries) as
 * scratch. */
static uint64_t kept_ranges(const gm_gguf *g, uint32_t pi, uint64_t from, const uint8_t *skip, uint64_t page,
                            uint64_t *at, const gm_gguf_tensor **order)
{
    const part *p = &g->parts[pi];
    uint64_t m = 0, n = 0, keep = from;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (skip[i] && g->tensors[i].part == pi)
            order[m++] = &g->tensors[i];
    qsort(order, m, sizeof *order, by_offset);
    for (uint64_t k = 0; k < m; k++) {
        const gm_gguf_tensor *t = order[k];
        uint64_t lo = (t->file_offset + page - 1) / page * page, hi = (t->file_offset + t->n_bytes) / page * page;
        lo = lo < p->size ? lo : p->size;
        hi = hi < p->size ? hi : p->size;
        if (lo >= hi || hi <= keep)
            continue; /* under a page, or inside pages already left out */
        if (lo > keep) {
            at[2 * n] = keep;
            at[2 * n + 1] = lo;
            n++;
        }
        keep = hi;
    }
    if (p->size > keep) {
        at[2 * n] = keep;
        at[2 * n + 1] = p->size;
        n++;
    }
    return n;
}

int gm_gguf_populate(const gm_gguf *g, gm_gguf_progress_fn progress, void *ctx,
                     gm_gguf_populate_info *info, gm_err *err)
{
    return gm_gguf_populate_except(g, NULL, progress, ctx, info, err);
}

int gm_gguf_populate_except(const gm_gguf *g, const uint8_t *skip, gm_gguf_progress_fn progress, void *ctx,
                            gm_gguf_populate_info *info, gm_err *err)
{
    if (gm_gguf_header_only(g))
        return gm_err_set(err, GM_EINVAL, "%s: opened from its header alone; the data cannot be read",
                          g->path);
    bool any_skip = false;
    for (uint64_t i = 0; skip && i < g->n_tensors; i++)
        any_skip = any_skip || skip[i];
    if (any_skip) {
        /* only the kept pages, in one pass (no huge-page reread: it would drop whole parts) */
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        uint64_t *at = malloc(2 * (g->n_tensors + 1) * sizeof *at);
        const gm_gguf_tensor **order = malloc((g->n_tensors + 1) * sizeof *order);
        if (!at || !order) {
            free(at);
            free(order);
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        }
        gm_gguf_populate_info in = {0};
        uint64_t total = 0, done = 0;
        for (int pass = 0; pass < 2; pass++)
            for (uint32_t pi = 0; pi < g->n_parts; pi++) {
                const part *p = &g->parts[pi];
                const uint64_t nr = kept_ranges(g, pi, p->data_offset / page * page, skip, page, at, order);
                if (pass == 0) {
                    for (uint64_t r = 0; r < nr; r++)
                        total += at[2 * r + 1] - at[2 * r];
                    continue;
                }
                (void)madvise((void *)p->map, (size_t)p->size, MADV_HUGEPAGE);
                for (uint64_t r = 0; r < nr; r++) {
                    int rc = populate_pass(p, at[2 * r], at[2 * r + 1], &done, total, progress, ctx, err);
                    if (rc) {
                        free(at);
                        free(order);
                        return rc;
                    }
                    in.bytes += at[2 * r + 1] - at[2 * r];
                }
            }
        free(at);
        free(order);
        if (info)
            *info = in;
        return 0;
    }
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    gm_gguf_populate_info in = {0};
    uint64_t total = 0, done = 0;
    for (uint32_t i = 0; i < g->n_parts; i++) {
        const part *p = &g->parts[i];
        const uint64_t from = p->data_offset / page * page;
        total += from < p->size ? p->size - from : 0;
    }
    for (uint32_t i = 0; i < g->n_parts; i++) {
        const part *p = &g->parts[i];
        const uint64_t from = p->data_offset / page * page;
        /* huge pages where the kernel can map the file so (large folios in the page cache) */
        (void)madvise((void *)p->map, (size_t)p->size, MADV_HUGEPAGE);
        int rc = populate_pass(p, from, p->size, &done, total, progress, ctx, err);
        if (rc)
            return rc;
        uint64_t size = 0, huge = 0;
        if (gm_sysinfo_huge_mapped(p->map, &size, &huge) != 0) {
            in.bytes += p->size;
            continue;
        }
        /* Pages that were in the page cache in small folios (a file written in small pieces
         * and still cached) stay mapped by 4 KiB pages, whose TLB misses cost up to 1.5x in
         * prefill. Dropped (this process's mappings first, then the file's cached pages, which
         * only goes for pages no other process maps) and read again, they come in large
         * folios where the kernel and file system make them (xfs, ext4 on recent kernels): a
         * probe of 64 MiB read again first shows whether they do, so that a machine where they
         * never come is not made to read every model twice. Worth it only for a sizeable part
         * mostly in small pages. */
        if (size >= (256ull << 20) && huge < size / 2 && reread_helps(p, from, huge, err)) {
            (void)madvise((void *)p->map, (size_t)p->size, MADV_DONTNEED);
            (void)posix_fadvise(p->fd, 0, 0, POSIX_FADV_DONTNEED);
            in.reread = true;
            total += p->size - from;
            if ((rc = populate_pass(p, from, p->size, &done, total, progress, ctx, err)))
                return rc;
            if (gm_sysinfo_huge_mapped(p->map, &size, &huge) != 0)
                huge = 0;
        }
        in.bytes += size;
        in.huge_bytes += huge;
    }
    if (info)
        *info = in;
    return 0;
}

uint64_t gm_gguf_n_kv(const gm_gguf *g) { return g->parts[0].n_kv; }

gm_gguf_str gm_gguf_kv_key(const gm_gguf *g, uint64_t i)
{
    gm_gguf_str none = {"", 0};
    return i < g->parts[0].n_kv ? g->parts[0].kvs[i].key : none;
}

gm_gguf_vtype gm_gguf_kv_type(const gm_gguf *g, uint64_t i)
{
    return i < g->parts[0].n_kv ? (gm_gguf_vtype)g->parts[0].kvs[i].type : GM_GGUF_VTYPE_COUNT;
}

int64_t gm_gguf_find_kv(const gm_gguf *g, const char *key)
{
    size_t kl = strlen(key);
    uint64_t h = hash_bytes(g->hash_seed, key, kl) & (g->kv_hash_cap - 1);
    while (g->kv_hash[h]) {
        const kv_entry *e = &g->parts[0].kvs[g->kv_hash[h] - 1];
        if (e->key.len == kl && memcmp(e->key.ptr, key, kl) == 0)
            return (int64_t)(g->kv_hash[h] - 1);
        h = (h + 1) & (g->kv_hash_cap - 1);
    }
    return -1;
}

static const kv_entry *kv_at(const gm_gguf *g, uint64_t i)
{
    return i < g->parts[0].n_kv ? &g->parts[0].kvs[i] : NULL;
}

int gm_gguf_kv_u64(const gm_gguf *g, uint64_t i, uint64_t *out)
{
    const kv_entry *e = kv_at(g, i);
    scalar s;
    if (!e)
        return GM_ENOTFOUND;
    if (read_scalar(e->type, e->val, &s))
        return GM_ETYPE;
    return scalar_u64(&s, out);
}

int gm_gguf_kv_i64(const gm_gguf *g, uint64_t i, int64_t *out)
{
    const kv_entry *e = kv_at(g, i);
    scalar s;
    if (!e)
        return GM_ENOTFOUND;
    if (read_scalar(e->type, e->val, &s))
        return GM_ETYPE;
    return scalar_i64(&s, out);
}

int gm_gguf_kv_f64(const gm_gguf *g, uint64_t i, double *out)
{
    const kv_entry *e = kv_at(g, i);
    scalar s;
    if (!e)
        return GM_ENOTFOUND;
    if (read_scalar(e->type, e->val, &s))
        return GM_ETYPE;
    return scalar_f64(&s, out);
}

int gm_gguf_kv_bool(const gm_gguf *g, uint64_t i, bool *out)
{
    const kv_entry *e = kv_at(g, i);
    if (!e)
        return GM_ENOTFOUND;
    if (e->type != GM_GGUF_BOOL)
        return GM_ETYPE;
    *out = e->val[0] != 0;
    return 0;
}

int gm_gguf_kv_str(const gm_gguf *g, uint64_t i, gm_gguf_str *out)
{
    const kv_entry *e = kv_at(g, i);
    if (!e)
        return GM_ENOTFOUND;
    if (e->type != GM_GGUF_STRING)
        return GM_ETYPE;
    uint64_t len;
    memcpy(&len, e->val, 8);
    out->ptr = (const char *)e->val + 8;
    out->len = len;
    return 0;
}

int gm_gguf_kv_arr(const gm_gguf *g, uint64_t i, gm_gguf_arr *out)
{
    const kv_entry *e = kv_at(g, i);
    if (!e)
        return GM_ENOTFOUND;
    if (e->type != GM_GGUF_ARRAY)
        return GM_ETYPE;
    *out = e->arr;
    return 0;
}

/* Getter by key: looks the key up and reports a missing key or a wrong type in err. */
#define GET_BY_KEY(fn, T, kvfn, what)                                                         \
    int fn(const gm_gguf *g, const char *key, T *out, gm_err *err)                            \
    {                                                                                         \
        int64_t i = gm_gguf_find_kv(g, key);                                                  \
        if (i < 0)                                                                            \
            return gm_err_set(err, GM_ENOTFOUND, "%s: metadata key '%s' is missing", g->path, \
                              key);                                                           \
        int rc = kvfn(g, (uint64_t)i, out);                                                   \
        if (rc)                                                                               \
            return gm_err_set(err, rc, "%s: metadata key '%s' holds a %s, not %s", g->path,   \
                              key, gm_gguf_vtype_name(g->parts[0].kvs[i].type), what);         \
        return 0;                                                                             \
    }

GET_BY_KEY(gm_gguf_get_u64, uint64_t, gm_gguf_kv_u64, "a non-negative integer")
GET_BY_KEY(gm_gguf_get_i64, int64_t, gm_gguf_kv_i64, "an integer")
GET_BY_KEY(gm_gguf_get_f64, double, gm_gguf_kv_f64, "a number")
GET_BY_KEY(gm_gguf_get_bool, bool, gm_gguf_kv_bool, "a bool")
GET_BY_KEY(gm_gguf_get_str, gm_gguf_str, gm_gguf_kv_str, "a string")
GET_BY_KEY(gm_gguf_get_arr, gm_gguf_arr, gm_gguf_kv_arr, "an array")

static int arr_scalar(const gm_gguf_arr *a, uint64_t i, scalar *s)
{
    if (i >= a->n || a->elem_type == GM_GGUF_STRING || a->elem_type == GM_GGUF_ARRAY ||
        a->elem_type >= GM_GGUF_VTYPE_COUNT)
        return i >= a->n ? GM_ERANGE : GM_ETYPE;
    return read_scalar(a->elem_type, a->data + i * k_scalar_size[a->elem_type], s);
}

int gm_gguf_arr_u64(const gm_gguf_arr *a, uint64_t i, uint64_t *out)
{
    scalar s;
    int rc = arr_scalar(a, i, &s);
    return rc ? rc : scalar_u64(&s, out);
}

int gm_gguf_arr_i64(const gm_gguf_arr *a, uint64_t i, int64_t *out)
{
    scalar s;
    int rc = arr_scalar(a, i, &s);
    return rc ? rc : scalar_i64(&s, out);
}

int gm_gguf_arr_f64(const gm_gguf_arr *a, uint64_t i, double *out)
{
    scalar s;
    int rc = arr_scalar(a, i, &s);
    return rc ? rc : scalar_f64(&s, out);
}

int gm_gguf_arr_str(const gm_gguf_arr *a, uint64_t i, gm_gguf_str *out)
{
    if (i >= a->n)
        return GM_ERANGE;
    if (a->elem_type != GM_GGUF_STRING)
        return GM_ETYPE;
    const uint8_t *p = a->data + a->offsets[i];
    uint64_t len;
    memcpy(&len, p, 8);
    out->ptr = (const char *)p + 8;
    out->len = len;
    return 0;
}

int gm_gguf_arr_sub(const gm_gguf_arr *a, uint64_t i, gm_gguf_arr *out)
{
    if (i >= a->n)
        return GM_ERANGE;
    if (a->elem_type != GM_GGUF_ARRAY)
        return GM_ETYPE;
    *out = a->subs[i];
    return 0;
}

uint64_t gm_gguf_n_tensors(const gm_gguf *g) { return g->n_tensors; }

const gm_gguf_tensor *gm_gguf_tensor_at(const gm_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gm_gguf_tensor *gm_gguf_find_tensor(const gm_gguf *g, const char *name)
{
    uint64_t h = hash_bytes(g->hash_seed, name, strlen(name)) & (g->tensor_hash_cap - 1);
    while (g->tensor_hash[h]) {
        const gm_gguf_tensor *t = &g->tensors[g->tensor_hash[h] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
        h = (h + 1) & (g->tensor_hash_cap - 1);
    }
    return NULL;
}

const void *gm_gguf_tensor_data(const gm_gguf *g, const gm_gguf_tensor *t)
{
    const part *p = &g->parts[t->part];
    if (p->owned && t->file_offset + t->n_bytes > p->avail)
        return NULL; /* opened from a header prefix: the data was never read */
    return p->map + t->file_offset;
}

bool gm_gguf_str_eq(gm_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}
