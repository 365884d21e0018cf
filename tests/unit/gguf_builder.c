#include "gguf_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const gm_gb_tensor_spec gm_gb_default_tensors[2] = {
    {"a", 2, {4, 4, 1, 1}, 0 /* F32 */, 64},
    {"b", 2, {32, 2, 1, 1}, 8 /* Q8_0: 32 elements in 34 bytes */, 68},
};

void gm_gb_init(gm_gb *b) { memset(b, 0, sizeof *b); }

void gm_gb_free(gm_gb *b)
{
    free(b->buf);
    memset(b, 0, sizeof *b);
}

static void reserve(gm_gb *b, size_t n)
{
    if (b->len + n <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *nb = realloc(b->buf, cap);
    if (!nb)
        abort();
    b->buf = nb;
    b->cap = cap;
}

void gm_gb_bytes(gm_gb *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    reserve(b, n);
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

void gm_gb_zeros(gm_gb *b, size_t n)
{
    if (n == 0)
        return;
    reserve(b, n);
    memset(b->buf + b->len, 0, n);
    b->len += n;
}

/* Little-endian stores, independent of the host's byte order. */
static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void add_le(gm_gb *b, uint64_t v, int n)
{
    reserve(b, (size_t)n);
    put_le(b->buf + b->len, v, n);
    b->len += (size_t)n;
}

void gm_gb_u8(gm_gb *b, uint8_t v) { add_le(b, v, 1); }
void gm_gb_u16(gm_gb *b, uint16_t v) { add_le(b, v, 2); }
void gm_gb_u32(gm_gb *b, uint32_t v) { add_le(b, v, 4); }
void gm_gb_u64(gm_gb *b, uint64_t v) { add_le(b, v, 8); }

void gm_gb_f32(gm_gb *b, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    add_le(b, u, 4);
}

void gm_gb_f64(gm_gb *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    add_le(b, u, 8);
}

void gm_gb_strn(gm_gb *b, const void *s, size_t n)
{
    gm_gb_u64(b, n);
    gm_gb_bytes(b, s, n);
}

void gm_gb_str(gm_gb *b, const char *s) { gm_gb_strn(b, s, strlen(s)); }

void gm_gb_align(gm_gb *b, size_t align)
{
    size_t r = b->len % align;
    if (r)
        gm_gb_zeros(b, align - r);
}

static void set_le(gm_gb *b, size_t at, uint64_t v, int n)
{
    if (at + (size_t)n > b->len)
        abort(); /* a test patched past what it built */
    put_le(b->buf + at, v, n);
}

void gm_gb_set_u8(gm_gb *b, size_t at, uint8_t v) { set_le(b, at, v, 1); }
void gm_gb_set_u32(gm_gb *b, size_t at, uint32_t v) { set_le(b, at, v, 4); }
void gm_gb_set_u64(gm_gb *b, size_t at, uint64_t v) { set_le(b, at, v, 8); }

void gm_gb_header(gm_gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gm_gb_bytes(b, "GGUF", 4);
    gm_gb_u32(b, version);
    gm_gb_u64(b, n_tensors);
    gm_gb_u64(b, n_kv);
}

void gm_gb_key(gm_gb *b, const char *key, uint32_t vtype)
{
    gm_gb_str(b, key);
    gm_gb_u32(b, vtype);
}

void gm_gb_kv_u32(gm_gb *b, const char *key, uint32_t v)
{
    gm_gb_key(b, key, GM_GB_U32);
    gm_gb_u32(b, v);
}

void gm_gb_kv_u64(gm_gb *b, const char *key, uint64_t v)
{
    gm_gb_key(b, key, GM_GB_U64);
    gm_gb_u64(b, v);
}

void gm_gb_kv_str(gm_gb *b, const char *key, const char *v)
{
    gm_gb_key(b, key, GM_GB_STRING);
    gm_gb_str(b, v);
}

void gm_gb_kv_bool(gm_gb *b, const char *key, int v)
{
    gm_gb_key(b, key, GM_GB_BOOL);
    gm_gb_u8(b, v ? 1 : 0);
}

void gm_gb_arr(gm_gb *b, uint32_t elem_type, uint64_t n)
{
    gm_gb_u32(b, elem_type);
    gm_gb_u64(b, n);
}

void gm_gb_tensor(gm_gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                  uint64_t offset)
{
    gm_gb_str(b, name);
    gm_gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gm_gb_u64(b, ne[d]);
    gm_gb_u32(b, type);
    gm_gb_u64(b, offset);
}

int gm_gb_write(const gm_gb *b, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = b->len ? fwrite(b->buf, 1, b->len, f) : 0;
    int rc = fclose(f);
    return (w == b->len && rc == 0) ? 0 : -1;
}

/* ---- model files ---- */

static void begin_kv(gm_gb *b, gm_gb_layout *lay, const char *key, uint32_t vtype)
{
    uint32_t i = lay->n_kv_written++;
    lay->kv_key[i] = b->len;
    gm_gb_str(b, key);
    lay->kv_type[i] = b->len;
    gm_gb_u32(b, vtype);
    lay->kv_val[i] = b->len;
}

void gm_gb_model_build(gm_gb *b, const gm_gb_model *m, gm_gb_layout *lay_out)
{
    gm_gb_layout lay;
    memset(&lay, 0, sizeof lay);
    uint32_t align = m->alignment ? m->alignment : 32;
    uint64_t n_kv = GM_GB_KV_BASE + (m->alignment ? 1 : 0) + (m->split_count ? 3 : 0);
    if (m->n_tensors > GM_GB_MAX_TENSORS)
        abort();

    lay.version = b->len + 4;
    lay.n_tensors = b->len + 8;
    lay.n_kv = b->len + 16;
    gm_gb_header(b, m->version ? m->version : 3, m->n_tensors, n_kv);

    begin_kv(b, &lay, "general.architecture", GM_GB_STRING);
    gm_gb_str(b, "test");
    begin_kv(b, &lay, "test.count", GM_GB_U32);
    gm_gb_u32(b, 7);
    begin_kv(b, &lay, "test.flag", GM_GB_BOOL);
    gm_gb_u8(b, 1);
    begin_kv(b, &lay, "test.list", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_STRING, 2);
    gm_gb_str(b, "x");
    gm_gb_str(b, "yz");
    if (m->alignment) {
        begin_kv(b, &lay, "general.alignment", GM_GB_U32);
        gm_gb_u32(b, m->alignment);
    }
    if (m->split_count) {
        begin_kv(b, &lay, "split.no", GM_GB_U16);
        gm_gb_u16(b, (uint16_t)m->split_no);
        begin_kv(b, &lay, "split.count", GM_GB_U16);
        gm_gb_u16(b, (uint16_t)m->split_count);
        begin_kv(b, &lay, "split.tensors.count", GM_GB_I32);
        gm_gb_u32(b, m->split_tensors);
    }

    uint64_t off = 0;
    for (uint32_t i = 0; i < m->n_tensors; i++) {
        const gm_gb_tensor_spec *t = &m->tensors[i];
        lay.t_name[i] = b->len;
        gm_gb_str(b, t->name);
        lay.t_ndims[i] = b->len;
        gm_gb_u32(b, t->n_dims);
        lay.t_ne[i] = b->len;
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++)
            gm_gb_u64(b, t->ne[d]);
        lay.t_type[i] = b->len;
        gm_gb_u32(b, t->type);
        lay.t_offset[i] = b->len;
        gm_gb_u64(b, off);
        lay.t_data_offset[i] = off;
        off += t->n_bytes;
        off = (off + align - 1) / align * align;
    }
    lay.infos_end = b->len;
    gm_gb_align(b, align);
    lay.data = b->len;
    for (uint32_t i = 0; i < m->n_tensors; i++) {
        gm_gb_zeros(b, lay.data + lay.t_data_offset[i] - b->len);
        for (uint64_t k = 0; k < m->tensors[i].n_bytes; k++)
            gm_gb_u8(b, (uint8_t)(m->fill + 7 * i + k));
    }
    if (lay_out)
        *lay_out = lay;
}
