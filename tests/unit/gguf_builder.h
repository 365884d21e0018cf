/* tests/unit/gguf_builder: assembles GGUF bytes field by field, for the reader's tests, the fuzz
 * seed corpus and any test that needs a small model file.
 *
 * Owns: a growing byte buffer (gm_gb) and writers for each GGUF field. It knows the byte layout
 * from the GGUF specification only (it does not use the reader or the type table), so a test can
 * build a valid file, remember where each field lies (gm_gb_layout) and then break exactly one
 * field with gm_gb_set_*. Allocation failure aborts: this is test code.
 * Threads: a gm_gb belongs to one thread.
 */
#ifndef GM_TESTS_GGUF_BUILDER_H
#define GM_TESTS_GGUF_BUILDER_H

#include <stddef.h>
#include <stdint.h>

/* Value type ids of the GGUF specification (the same numbers as gm_gguf_vtype). */
enum {
    GM_GB_U8 = 0, GM_GB_I8 = 1, GM_GB_U16 = 2, GM_GB_I16 = 3, GM_GB_U32 = 4, GM_GB_I32 = 5,
    GM_GB_F32 = 6, GM_GB_BOOL = 7, GM_GB_STRING = 8, GM_GB_ARRAY = 9, GM_GB_U64 = 10,
    GM_GB_I64 = 11, GM_GB_F64 = 12,
};

typedef struct gm_gb {
    uint8_t *buf;
    size_t len;
    size_t cap;
} gm_gb;

void gm_gb_init(gm_gb *b);
void gm_gb_free(gm_gb *b);

/* Raw little-endian fields. */
void gm_gb_bytes(gm_gb *b, const void *p, size_t n);
void gm_gb_zeros(gm_gb *b, size_t n);
void gm_gb_u8(gm_gb *b, uint8_t v);
void gm_gb_u16(gm_gb *b, uint16_t v);
void gm_gb_u32(gm_gb *b, uint32_t v);
void gm_gb_u64(gm_gb *b, uint64_t v);
void gm_gb_f32(gm_gb *b, float v);
void gm_gb_f64(gm_gb *b, double v);
/* A GGUF string: u64 byte length, then the bytes (no NUL). */
void gm_gb_str(gm_gb *b, const char *s);
void gm_gb_strn(gm_gb *b, const void *s, size_t n);
/* Zero bytes up to the next multiple of align (> 0). */
void gm_gb_align(gm_gb *b, size_t align);

/* Overwrites bytes already written (at + size <= len). */
void gm_gb_set_u8(gm_gb *b, size_t at, uint8_t v);
void gm_gb_set_u32(gm_gb *b, size_t at, uint32_t v);
void gm_gb_set_u64(gm_gb *b, size_t at, uint64_t v);

/* "GGUF", version, tensor count, kv count. */
void gm_gb_header(gm_gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A key and its value type; the value follows. */
void gm_gb_key(gm_gb *b, const char *key, uint32_t vtype);
void gm_gb_kv_u32(gm_gb *b, const char *key, uint32_t v);
void gm_gb_kv_u64(gm_gb *b, const char *key, uint64_t v);
void gm_gb_kv_str(gm_gb *b, const char *key, const char *v);
void gm_gb_kv_bool(gm_gb *b, const char *key, int v);
/* An array header (element type, count); the elements follow. */
void gm_gb_arr(gm_gb *b, uint32_t elem_type, uint64_t n);
/* A tensor info: name, n_dims, dims, ggml type id, offset in the data section. */
void gm_gb_tensor(gm_gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                  uint64_t offset);

/* Writes the buffer to path; returns 0 on success. */
int gm_gb_write(const gm_gb *b, const char *path);

/* ---- a small complete model file, with the position of every field ---- */

#define GM_GB_MAX_TENSORS 8
#define GM_GB_MAX_KV 16

typedef struct gm_gb_tensor_spec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;     /* ggml type id */
    uint64_t n_bytes;  /* bytes of the data (the builder does not know block sizes) */
} gm_gb_tensor_spec;

typedef struct gm_gb_model {
    uint32_t version;       /* 0 means 3 */
    uint32_t alignment;     /* 0: no general.alignment key (the reader then uses 32) */
    /* split keys as llama.cpp's gguf-split writes them (u16, u16, i32); written when
     * split_count > 0 */
    uint32_t split_no, split_count, split_tensors;
    const gm_gb_tensor_spec *tensors;
    uint32_t n_tensors;     /* <= GM_GB_MAX_TENSORS */
    uint8_t fill;           /* tensor data byte k of tensor i is (fill + 7 * i + k) & 0xff */
} gm_gb_model;

/* Byte offsets of the fields of a file made by gm_gb_model_build. */
typedef struct gm_gb_layout {
    size_t version, n_tensors, n_kv;
    uint32_t n_kv_written;
    size_t kv_key[GM_GB_MAX_KV];   /* the key's u64 length field */
    size_t kv_type[GM_GB_MAX_KV];  /* the u32 value type */
    size_t kv_val[GM_GB_MAX_KV];   /* the value (for arrays: the element type) */
    size_t t_name[GM_GB_MAX_TENSORS];   /* the name's u64 length field */
    size_t t_ndims[GM_GB_MAX_TENSORS];
    size_t t_ne[GM_GB_MAX_TENSORS];     /* first dim */
    size_t t_type[GM_GB_MAX_TENSORS];
    size_t t_offset[GM_GB_MAX_TENSORS];
    uint64_t t_data_offset[GM_GB_MAX_TENSORS]; /* the offset value written */
    size_t infos_end;   /* end of the last tensor info */
    size_t data;        /* start of the data section */
} gm_gb_layout;

/* Key indices of the kvs gm_gb_model_build writes, in file order. */
enum {
    GM_GB_KV_ARCH = 0,   /* general.architecture = "test" (string) */
    GM_GB_KV_COUNT = 1,  /* test.count = 7 (u32) */
    GM_GB_KV_FLAG = 2,   /* test.flag = true (bool) */
    GM_GB_KV_LIST = 3,   /* test.list = ["x", "yz"] (array of strings) */
    GM_GB_KV_BASE = 4,   /* then general.alignment, split.no, split.count, split.tensors.count
                          * as configured */
};

/* Builds header, kvs, tensor infos, padding and data. Tensors are laid out in order, each at
 * the next multiple of the alignment. lay may be NULL. */
void gm_gb_model_build(gm_gb *b, const gm_gb_model *m, gm_gb_layout *lay);

/* The two-tensor model most tests break: "a" F32 [4, 4] (64 bytes) and "b" Q8_0 [32, 2]
 * (68 bytes). */
extern const gm_gb_tensor_spec gm_gb_default_tensors[2];

#endif
